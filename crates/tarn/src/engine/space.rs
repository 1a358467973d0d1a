//! The space hook of a mounted filesystem: `ENOSPC` and `EDQUOT` at write
//! time, and the numbers `df` shows.
//!
//! [`Pool::dataset_space`] walks the quotas of every ancestor and reads
//! property ZAPs: far too costly to ask on every `write(2)`. A hook
//! therefore keeps a *snapshot* of the dataset's USED and AVAIL (and
//! whether a quota rather than the pool is what limits it), retaken when
//! it is older than [`SPACE_REFRESH`] or when a txg has synced since.
//!
//! What the snapshot cannot know is the data written since: a write only
//! reaches USED when its txg syncs, seconds later. So the hook counts the
//! bytes it has let through, keyed by the txg that was open when it did
//! ("pending"), and a write is refused when AVAIL minus pending cannot hold
//! it. Pending bytes of a txg are dropped once that txg has synced, as the
//! next snapshot includes them. The count is conservative — an overwrite
//! is charged in full although it may free as much as it allocates, as
//! ZFS's own temporary reservations are — so a dataset can report ENOSPC
//! a little early, never late by more than one check.
//!
//! Deletes are never checked (the POSIX layer does not ask), so a full
//! dataset can always be emptied; and a write that does not fit waits for
//! one commit before failing, so the space those deletes free is usable at
//! once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};
use tarn_dsl::Pool;
use tarn_zpl::{Space, SpaceHook, ZplError};

/// Longest a space snapshot is trusted.
pub const SPACE_REFRESH: Duration = Duration::from_millis(100);

/// One dataset's space, as its mounted filesystem asks for it.
pub struct DatasetSpaceHook {
    pool: Arc<Pool>,
    name: String,
    cache: Mutex<Snapshot>,
}

#[derive(Default)]
struct Snapshot {
    taken: Option<Instant>,
    /// The last synced txg when the snapshot was taken.
    synced_txg: u64,
    used: u64,
    avail: u64,
    /// AVAIL is bounded by a quota or refquota, not by the pool.
    quota_bound: bool,
    /// Bytes let through since, by the txg open at the time.
    pending: BTreeMap<u64, u64>,
}

impl Snapshot {
    fn pending_bytes(&self) -> u64 {
        self.pending.values().sum()
    }
}

impl DatasetSpaceHook {
    pub fn new(pool: Arc<Pool>, name: &str) -> DatasetSpaceHook {
        DatasetSpaceHook {
            pool,
            name: name.to_string(),
            cache: Mutex::new(Snapshot::default()),
        }
    }

    /// The snapshot, retaken first if it is stale.
    fn current(&self) -> MutexGuard<'_, Snapshot> {
        let mut snap = self.cache.lock();
        let synced = self.pool.txg().last_synced();
        let fresh = snap
            .taken
            .is_some_and(|t| t.elapsed() < SPACE_REFRESH && snap.synced_txg == synced);
        if fresh {
            return snap;
        }
        // A dataset destroyed under a lazily detached mount keeps the last
        // numbers; it takes no more writes that matter.
        if let Ok(space) = self.pool.dataset_space(&self.name) {
            let pool_avail = self.pool.pool_space().avail;
            snap.used = space.used;
            snap.avail = space.avail;
            snap.quota_bound = space.avail < pool_avail;
        }
        snap.taken = Some(Instant::now());
        snap.synced_txg = synced;
        snap.pending.retain(|&txg, _| txg > synced);
        snap
    }
}

impl SpaceHook for DatasetSpaceHook {
    fn space(&self) -> Space {
        let snap = self.current();
        let pending = snap.pending_bytes();
        Space {
            used_bytes: snap.used.saturating_add(pending),
            avail_bytes: snap.avail.saturating_sub(pending),
        }
    }

    /// Refuses a write only after the open txg has been committed: the
    /// space of files deleted since the last commit is freed by that txg,
    /// and bytes counted as pending may have been overwrites. So a write
    /// that does not fit waits for one commit and looks again, as OpenZFS's
    /// `dsl_dir_tempreserve_space` waits for the txg before ENOSPC. The
    /// caller holds no txg hold here, so the commit can proceed.
    fn check_write(&self, bytes: u64) -> tarn_zpl::Result<()> {
        if self.reserve(bytes).is_ok() {
            return Ok(());
        }
        let _ = self.pool.txg().wait_synced(0);
        self.reserve(bytes)
    }
}

impl DatasetSpaceHook {
    /// Counts `bytes` against the snapshot, or says why they do not fit.
    fn reserve(&self, bytes: u64) -> tarn_zpl::Result<()> {
        let mut snap = self.current();
        if snap.pending_bytes().saturating_add(bytes) > snap.avail {
            return Err(if snap.quota_bound {
                ZplError::Quota
            } else {
                ZplError::NoSpace
            });
        }
        let txg = self.pool.txg().open_txg();
        *snap.pending.entry(txg).or_insert(0) += bytes;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_pool::NewTop;
    use tarn_vdev::{BlockDevice, MemDevice};

    fn pool() -> Arc<Pool> {
        let devs: Vec<Arc<dyn BlockDevice>> = (0..2)
            .map(|_| Arc::new(MemDevice::new(256 << 20)) as Arc<dyn BlockDevice>)
            .collect();
        let top = NewTop::mem_mirror(&devs);
        Pool::create("tank", vec![top], &[], &[]).unwrap()
    }

    #[test]
    fn pending_bytes_count_against_quota_and_pool() {
        let pool = pool();
        pool.dataset_create("tank/q", &[("quota".into(), (1u64 << 20).to_string())])
            .unwrap();
        let hook = DatasetSpaceHook::new(pool.clone(), "tank/q");
        let avail = hook.space().avail_bytes;
        assert!(avail > 900 << 10 && avail <= 1 << 20, "{avail}");
        // Nothing has synced: each accepted write is still pending.
        hook.check_write(avail / 2).unwrap();
        hook.check_write(avail / 2).unwrap();
        assert!(hook.space().avail_bytes < avail / 2 + 1);
        // A write that does not fit waits for one commit and looks again;
        // nothing was really written here, so after it the space is back.
        let before = pool.txg().last_synced();
        hook.check_write(avail / 2).unwrap();
        assert!(pool.txg().last_synced() > before, "it waited for a commit");
        // More than the quota never fits, commit or not.
        assert_eq!(hook.check_write(2 * avail), Err(ZplError::Quota));
        // Past the pool's AVAIL it is ENOSPC.
        let root = DatasetSpaceHook::new(pool.clone(), "tank");
        assert_eq!(root.check_write(1 << 40), Err(ZplError::NoSpace));
        root.check_write(4096).unwrap();
        // Once the txg holding them has synced, pending bytes are dropped
        // (none were really written here).
        pool.sync().unwrap();
        hook.check_write(avail / 2).unwrap();
        pool.export().unwrap();
    }
}
