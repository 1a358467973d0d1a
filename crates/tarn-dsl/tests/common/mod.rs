//! Pool fixtures shared by tarn-dsl's integration tests.

#![allow(dead_code)] // each test binary uses part of it

use std::sync::Arc;

use tarn_dsl::Pool;
use tarn_pool::import::import_devices;
use tarn_pool::NewTop;
use tarn_vdev::{BlockDevice, MemDevice};

/// `n` in-memory devices of `bytes` each.
pub fn devices(n: usize, bytes: u64) -> Vec<Arc<dyn BlockDevice>> {
    (0..n)
        .map(|_| Arc::new(MemDevice::new(bytes)) as Arc<dyn BlockDevice>)
        .collect()
}

/// One mirror of `devs` (named `mem0`, `mem1`, …).
pub fn mirror(devs: &[Arc<dyn BlockDevice>]) -> Vec<NewTop> {
    vec![NewTop::mem_mirror(devs)]
}

/// Imports the pool on `devs` again (after an export or a crash).
pub fn reimport(devs: &[Arc<dyn BlockDevice>]) -> Arc<Pool> {
    Pool::open(import_devices(devs).unwrap()).unwrap()
}
