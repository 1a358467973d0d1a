//! Fixtures shared by tarn-pool's integration tests.

#![allow(dead_code)] // each test binary uses part of it

use std::sync::Arc;

use tarn_format::label::VdevClass;
use tarn_format::{Compression, ObjType};
use tarn_pool::{NewTop, Spa, WriteProps};
use tarn_vdev::{BlockDevice, Layout};

/// Uncompressed raw blocks: what is written is what lands on the devices.
pub fn props() -> WriteProps {
    WriteProps {
        compression: Compression::Off,
        ..WriteProps::metadata(ObjType::Raw, 0)
    }
}

/// A pool `tank` of one top-level vdev of `layout` over `devs` (named
/// `d0`, `d1`, …).
pub fn pool_of(layout: Layout, devs: &[Arc<dyn BlockDevice>]) -> Spa {
    let leaves = devs
        .iter()
        .enumerate()
        .map(|(i, d)| (format!("d{i}"), d.clone(), false))
        .collect();
    let top = NewTop {
        layout,
        class: VdevClass::Normal,
        ashift: 12,
        leaves,
    };
    Spa::create("tank", vec![top]).unwrap()
}
