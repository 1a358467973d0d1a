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
        disk_read_ns: st.read_ns.load(Relaxed),
        disk_write_ns: st.write_ns.load(Relaxed),
        reads_active: st.reads_active.load(Relaxed),
        writes_active: st.writes_active.load(Relaxed),
        ..VdevIostat::default()
    }
}

fn top_line(pool: &Pool, top: &TopVdev, cfg: &VdevConfig) -> VdevIostat {
    let mut line = match (interior_name(cfg), top.leaves()) {
        (None, [leaf]) => leaf_line(leaf),
        (name, leaves) => {
            let st = top.stats();
            let children: Vec<VdevIostat> = leaves.iter().map(leaf_line).collect();
            let sum = |f: fn(&VdevIostat) -> u64| children.iter().map(f).sum::<u64>();
            // The device time of the leaves' I/Os, spread over the
            // vdev's own operations (each of them waits for its leaves).
            let per = |ns: u64, leaf_ops: u64, ops: u64| {
                (ns as u128 * ops as u128 / leaf_ops.max(1) as u128) as u64
            };
            let (read_ops, write_ops) = (st.read_ops.load(Relaxed), st.write_ops.load(Relaxed));
            VdevIostat {
                disk_read_ns: per(sum(|c| c.disk_read_ns), sum(|c| c.read_ops), read_ops),
                disk_write_ns: per(sum(|c| c.disk_write_ns), sum(|c| c.write_ops), write_ops),
                reads_active: sum(|c| c.reads_active),
                writes_active: sum(|c| c.writes_active),
                name: name.unwrap_or_else(|| format!("vdev-{}", cfg.id)),
                read_ops,
                write_ops,
                read_bytes: st.read_bytes.load(Relaxed),
                write_bytes: st.write_bytes.load(Relaxed),
                children,
                ..VdevIostat::default()
            }
        }
    };
    line.class = match cfg.class {
        VdevClass::Normal => api::VdevClass::Normal,
        VdevClass::Log => api::VdevClass::Log,
    };
    let q = pool.spa().throttle.stats(cfg.id as u32);
    line.asyncq_write_ops = q.queued_ops;
    line.asyncq_write_ns = q.queued_ns;
    line.asyncq_write_pend = q.pending;
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

/// One dataset's intent-log counters for `zilstat`, by OpenZFS's kstat
/// names; `None` for a dataset without a log (a snapshot).
pub fn zilstat_row(pool: &Pool, ds: &str) -> Option<api::ZilstatRow> {
    let zil = pool.dataset_zil(ds).ok()?;
    let s = zil.stats();
    let objset = pool
        .dataset_prop(ds, "objsetid")
        .ok()
        .and_then(|v| v.value.parse().ok())
        .unwrap_or(0);
    let counters = [
        ("zil_commit_count", s.commit_calls),
        ("zil_commit_writer_count", s.commits),
        ("zil_commit_error_count", s.fallbacks),
        ("zil_commit_stall_count", s.bulk_commits),
        ("zil_commit_suspend_count", 0),
        ("zil_commit_crash_count", 0),
        ("zil_itx_count", s.itx_count),
        ("zil_itx_indirect_count", s.indirect_blocks),
        ("zil_itx_indirect_bytes", s.indirect_bytes),
        ("zil_itx_copied_count", s.copied_count),
        ("zil_itx_copied_bytes", s.copied_bytes),
        ("zil_itx_needcopy_count", 0),
        ("zil_itx_needcopy_bytes", 0),
        ("zil_itx_metaslab_normal_count", s.normal_blocks),
        ("zil_itx_metaslab_normal_bytes", s.normal_bytes),
        ("zil_itx_metaslab_normal_write", s.normal_written),
        ("zil_itx_metaslab_normal_alloc", s.normal_written),
        ("zil_itx_metaslab_slog_count", s.slog_blocks),
        ("zil_itx_metaslab_slog_bytes", s.slog_bytes),
        ("zil_itx_metaslab_slog_write", s.slog_written),
        ("zil_itx_metaslab_slog_alloc", s.slog_written),
        ("tarn_log_writes_in_flight_max", s.writes_in_flight_max),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    Some(api::ZilstatRow {
        pool: pool.name(),
        dataset: ds.to_string(),
        objset,
        counters,
    })
}
