//! `tarn-bench logfloor`: what one intent-log block write costs on a
//! file-backed two-way mirror, below the log and FUSE: the floor under
//! every `fsync` row of `bench/peers.sh --sync` without a SLOG.
//!
//! Each write is `TopVdev::write_durable`, the call `Zilog` commits
//! through: the block goes to both files at once (`RWF_DSYNC`, the second
//! through io_uring) and the call returns when both are durable. Rows:
//! - block sizes 8 KiB (the log block of one 4 KiB `fsync`) and 32 KiB
//!   (about eight of them committed together);
//! - 1 writer, and 8 writers each writing its own blocks (what group
//!   commit would cost if every `fsync` wrote its own block);
//! - regions the files never held (sparse: the host file system
//!   allocates on the way, as on a fresh pool) and regions written before
//!   (as once the log cycles through freed space).
//!
//! Latency is per write; the machine is shared, so compare rows of one
//! run with each other and with the `fsync` rows measured beside them.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tarn_vdev::{FileDevice, Layout, Leaf, TopVdev};

/// Each image file: room for every fresh row to march through new space.
const IMAGE_BYTES: u64 = 8 << 30;
/// The region written before the "written before" rows, cycled through.
const WARM_BYTES: u64 = 64 << 20;
/// How long each row writes.
const ROW_TIME: Duration = Duration::from_secs(3);

pub fn run(dir: &Path) {
    std::fs::create_dir_all(dir).expect("create bench dir");
    let images = [dir.join("tarn-log-a.img"), dir.join("tarn-log-b.img")];
    for p in &images {
        let _ = std::fs::remove_file(p);
        std::fs::File::create(p)
            .and_then(|f| f.set_len(IMAGE_BYTES))
            .expect("create image file");
    }
    let leaves = images
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let dev = FileDevice::open(p).expect("open image file");
            Leaf::new(i as u64 + 1, p.display().to_string(), Arc::new(dev))
        })
        .collect();
    let top = Arc::new(TopVdev::new(0, 1, 12, Layout::Mirror, leaves).expect("mirror"));
    // The warm region: written and flushed once, as a txg leaves it.
    let chunk = vec![0x5au8; 1 << 20];
    for off in (0..WARM_BYTES).step_by(chunk.len()) {
        top.write(off, &chunk).expect("warm write");
    }
    top.flush().expect("flush");
    println!(
        "intent-log block writes (TopVdev::write_durable) on a mirror of two sparse files in {}, {} s a row",
        dir.display(),
        ROW_TIME.as_secs()
    );
    println!();
    println!("| block | writers | region | writes/s | p50 µs | p99 µs |");
    println!("|---:|---:|---|---:|---:|---:|");
    // Fresh rows march upwards from the warm region, never reusing space.
    let fresh = Arc::new(AtomicU64::new(WARM_BYTES));
    for block in [8u64 << 10, 32 << 10] {
        for writers in [1usize, 8] {
            for warm in [false, true] {
                let (rate, p50, p99) = row(&top, block, writers, warm, &fresh);
                println!(
                    "| {} KiB | {writers} | {} | {rate:.0} | {p50:.0} | {p99:.0} |",
                    block >> 10,
                    if warm {
                        "written before"
                    } else {
                        "never written"
                    },
                );
            }
        }
    }
    drop(top);
    for p in &images {
        let _ = std::fs::remove_file(p);
    }
}

/// Writes for `ROW_TIME`; returns writes/s and the p50 and p99 latency
/// in µs.
fn row(
    top: &Arc<TopVdev>,
    block: u64,
    writers: usize,
    warm: bool,
    fresh: &Arc<AtomicU64>,
) -> (f64, f64, f64) {
    let end = Instant::now() + ROW_TIME;
    let slots = WARM_BYTES / block;
    let lat: Vec<Vec<Duration>> = std::thread::scope(|s| {
        let jobs: Vec<_> = (0..writers as u64)
            .map(|w| {
                let (top, fresh) = (top.clone(), fresh.clone());
                s.spawn(move || {
                    let data = vec![w as u8 + 1; block as usize];
                    let mut out = Vec::new();
                    let mut i = w;
                    while Instant::now() < end {
                        let off = if warm {
                            (i % slots) * block
                        } else {
                            fresh.fetch_add(block, Ordering::Relaxed)
                        };
                        i += writers as u64;
                        if off + block > top.asize() {
                            break;
                        }
                        let t = Instant::now();
                        top.write_durable(off, &data).expect("durable write");
                        out.push(t.elapsed());
                    }
                    out
                })
            })
            .collect();
        jobs.into_iter()
            .map(|j| j.join().expect("writer"))
            .collect()
    });
    let mut all: Vec<Duration> = lat.into_iter().flatten().collect();
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    (
        all.len() as f64 / ROW_TIME.as_secs_f64(),
        pct(0.50),
        pct(0.99),
    )
}
