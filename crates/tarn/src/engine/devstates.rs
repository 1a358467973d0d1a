//! `zpool offline`, `zpool online` and `zpool clear`: the engine's side of
//! device states (the pool's side is `tarn_pool::health`).
//!
//! A device is named as `zpool status` shows it (`devices::named_leaf`):
//! its path, another path to the same file, its last path component, or —
//! for a device the pool could not open, which status shows by GUID — its
//! GUID. Offline and online change the vdev configuration, so they run
//! under `config`, are recorded in the history and committed at once (the
//! commit rewrites the labels); `clear` changes nothing on disk and takes
//! no lock a suspended commit could hold.

use tarn_dsl::devices;

use super::{dsl_err, spa_err, Engine};
use crate::api::{ZpoolClear, ZpoolOffline, ZpoolOnline};
use crate::backend::BackendError;

impl Engine {
    pub(super) fn offline(&self, a: ZpoolOffline) -> Result<(), BackendError> {
        let config = self.config.lock();
        let pool = self.pool(&a.name)?;
        let guid = devices::named_leaf(&pool.spa().configs(), &a.device)?.guid;
        pool.spa().offline(guid, a.temporary).map_err(spa_err)?;
        let t = if a.temporary { " -t" } else { "" };
        self.commit_change(
            &config,
            &pool,
            &format!("zpool offline{t} {} {}", a.name, a.device),
        )
    }

    pub(super) fn online(&self, a: ZpoolOnline) -> Result<(), BackendError> {
        let config = self.config.lock();
        let pool = self.pool(&a.name)?;
        let spa = pool.spa();
        let leaf = devices::named_leaf(&spa.configs(), &a.device)?.clone();
        let missing = spa.leaf_state(leaf.guid) == Some(tarn_vdev::LeafState::Unavail);
        let dev = if missing {
            Some(devices::reopen(&leaf, pool.guid())?)
        } else {
            None
        };
        spa.online(leaf.guid, dev).map_err(spa_err)?;
        if a.expand {
            pool.expand(leaf.guid).map_err(dsl_err)?;
        }
        let e = if a.expand { " -e" } else { "" };
        self.commit_change(
            &config,
            &pool,
            &format!("zpool online{e} {} {}", a.name, a.device),
        )?;
        // What it missed while away is copied to it now (OpenZFS starts a
        // resilver when a device with a DTL comes back).
        if spa.leaf_has_dtl(leaf.guid) {
            pool.resilver_start(leaf.guid, None).map_err(dsl_err)?;
        }
        Ok(())
    }

    pub(super) fn clear(&self, a: ZpoolClear) -> Result<(), BackendError> {
        let pool = self.pool(&a.name)?;
        let guid = match &a.device {
            Some(d) => Some(devices::named_leaf(&pool.spa().configs(), d)?.guid),
            None => None,
        };
        pool.spa().clear(guid).map_err(spa_err)?;
        // A device back from FAULTED resilvers what it missed.
        if pool.spa().suspended().is_none() {
            pool.resilver_if_needed();
        }
        // Into the history with the next txg, not waiting for it: if the
        // device still fails, the pool suspends again and a wait would
        // hang the command.
        if pool.spa().suspended().is_none() {
            let dev = a.device.as_deref().map(|d| format!(" {d}"));
            let line = format!("zpool clear {}{}", a.name, dev.unwrap_or_default());
            pool.log_history(&line);
        }
        Ok(())
    }
}
