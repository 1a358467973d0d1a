//! `tarn zinject`: faults registered on the leaves of imported pools.
//!
//! The engine keeps one [`Registry`] (see `tarn_vdev::inject` for what a
//! handler does and what it costs). A handler names its pool and leaf;
//! it lives as long as the pool stays imported: export and destroy drop
//! the pool's handlers, `zpool detach` those of the detached leaf, and
//! nothing is persisted (a daemon restart starts with none, as a reboot
//! does for OpenZFS).
//!
//! Adding takes `config` so that the pool cannot be exported between
//! finding the leaf and registering on it; the registry lock comes after
//! `config` and is never held across pool I/O.

use tarn_format::label::VdevConfig;
use tarn_vdev::inject::{FaultKind, IoType, Registered};

use super::Engine;
use crate::api::{InjectHandler, InjectIoType, ZinjectAdd, ZinjectClear};
use crate::backend::BackendError;
use crate::validate::inject_fault;
use tarn_dsl::devices;

impl Engine {
    pub(super) fn inject_add(&self, a: ZinjectAdd) -> Result<InjectHandler, BackendError> {
        let fault = inject_fault(&a).map_err(BackendError::Invalid)?;
        let _config = self.config.lock();
        let pool = self.pool(&a.pool)?;
        let tops = pool.spa().top_configs();
        let configs: Vec<VdevConfig> = tops.iter().map(|(_, c)| c.clone()).collect();
        let not_found = || {
            BackendError::Message(format!(
                "cannot find device '{}' in pool '{}' (name a device as 'zpool status' shows it)",
                a.device, a.pool
            ))
        };
        let guid = devices::leaf_named(&configs, &a.device).ok_or_else(not_found)?;
        let leaf = tops
            .iter()
            .flat_map(|(top, _)| top.leaves())
            .find(|l| l.guid == guid)
            .ok_or_else(|| {
                BackendError::Invalid(format!(
                    "device '{}' is not open (UNAVAIL): there is no I/O to inject into",
                    a.device
                ))
            })?;
        let added = self
            .faults
            .lock()
            .add(&a.pool, leaf, fault)
            .map_err(BackendError::Invalid)?;
        Ok(handler_row(&added))
    }

    pub(super) fn inject_list(&self) -> Vec<InjectHandler> {
        self.faults.lock().list().map(handler_row).collect()
    }

    pub(super) fn inject_clear(&self, a: ZinjectClear) -> Result<u64, BackendError> {
        let mut faults = self.faults.lock();
        match a.id {
            None => Ok(faults.remove_where(|_| true) as u64),
            Some(id) if faults.remove(id) => Ok(1),
            Some(id) => Err(BackendError::Message(format!(
                "cannot clear handler {id}: no such handler (list them with 'tarn zinject')"
            ))),
        }
    }

    /// Drops the handlers of pool `name`, or only of its leaf `guid`.
    pub(super) fn inject_forget(&self, name: &str, guid: Option<u64>) {
        self.faults
            .lock()
            .remove_where(|r| r.pool == name && guid.is_none_or(|g| g == r.guid));
    }
}

fn handler_row(r: &Registered) -> InjectHandler {
    let (error, delay_ms, lanes) = match r.fault.kind {
        FaultKind::Io => ("io", None, None),
        FaultKind::Checksum => ("checksum", None, None),
        FaultKind::Nxio => ("nxio", None, None),
        FaultKind::Delay { latency_ms, lanes } => ("delay", Some(latency_ms), Some(lanes)),
    };
    InjectHandler {
        id: r.id,
        pool: r.pool.clone(),
        device: r.device.clone(),
        io_type: match r.fault.io {
            IoType::Read => InjectIoType::Read,
            IoType::Write => InjectIoType::Write,
            IoType::Flush => InjectIoType::Flush,
            IoType::All => InjectIoType::All,
        },
        error: error.to_string(),
        freq_ppm: r.fault.freq_ppm,
        delay_ms,
        lanes,
    }
}
