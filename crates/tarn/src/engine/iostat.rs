//! `zpool iostat`: what each vdev has done since the pool was imported.
//!
//! The counters are the vdev layer's own (`tarn_vdev`): a leaf counts the
//! reads and writes it issued to its device, a mirror or raidz counts the
//! blocks it was asked for, one operation per block (OpenZFS counts each
//! vdev's own I/Os the same way). A single-device top-level vdev is its
//! leaf, so its line is the leaf's. Counters are cumulative; the client
//! divides by the time since import, or by the interval between two
//! reports, as zpool(8) does.

use std::sync::atomic::Ordering::Relaxed;

use tarn_dsl::Pool;
use tarn_format::label::{VdevClass, VdevConfig};
use tarn_vdev::{Leaf, TopVdev};

use crate::api::{self, PoolIostat, VdevIostat};
use tarn_dsl::devices::interior_name;

fn leaf_line(leaf: &Leaf) -> VdevIostat {
    let st = &leaf.stats;
    VdevIostat {
        name: leaf.path.clone(),
        read_ops: st.read_ops.load(Relaxed),
        write_ops: st.write_ops.load(Relaxed),
        read_bytes: st.read_bytes.load(Relaxed),
        write_bytes: st.write_bytes.load(Relaxed),
        ..VdevIostat::default()
    }
}

fn top_line(pool: &Pool, top: &TopVdev, cfg: &VdevConfig) -> VdevIostat {
    let mut line = match (interior_name(cfg), top.leaves()) {
        (None, [leaf]) => leaf_line(leaf),
        (name, leaves) => {
            let st = top.stats();
            VdevIostat {
                name: name.unwrap_or_else(|| format!("vdev-{}", cfg.id)),
                read_ops: st.read_ops.load(Relaxed),
                write_ops: st.write_ops.load(Relaxed),
                read_bytes: st.read_bytes.load(Relaxed),
                write_bytes: st.write_bytes.load(Relaxed),
                children: leaves.iter().map(leaf_line).collect(),
                ..VdevIostat::default()
            }
        }
    };
    line.class = match cfg.class {
        VdevClass::Normal => api::VdevClass::Normal,
        VdevClass::Log => api::VdevClass::Log,
    };
    if let Some((size, alloc, _)) = pool.spa().vdev_space(cfg.id as u32) {
        line.alloc = Some(alloc);
        line.free = Some(size.saturating_sub(alloc));
    }
    line
}

/// The counters of one pool, data vdevs first, then logs.
pub fn pool_iostat(pool: &Pool) -> PoolIostat {
    let spa = pool.spa();
    let space = pool.pool_space();
    let mut vdevs: Vec<VdevIostat> = spa
        .top_configs()
        .iter()
        .map(|(top, cfg)| top_line(pool, top, cfg))
        .collect();
    vdevs.sort_by_key(|v| v.class == api::VdevClass::Log);
    PoolIostat {
        name: pool.name(),
        alloc: space.alloc,
        free: space.free,
        elapsed_ns: u64::try_from(spa.open_duration().as_nanos()).unwrap_or(u64::MAX),
        vdevs,
    }
}
