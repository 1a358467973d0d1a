//! `tarn-bench fsync [--dir DIR] [--threads N]`: group commit without FUSE. Threads
//! each write 4 KiB at random places of their own file and `fsync` it
//! (`Zpl::fsync`, what a mount's FSYNC runs), on a mirror of two files
//! with a log device on tmpfs (`/dev/shm`), for 1, 2, 4 and 8 threads,
//! and the same dataset with `sync=disabled` (no log write at all: the
//! ceiling). Per row: fsyncs per second, p50/p99 latency, and the
//! intent log's own counts — fsyncs per log write (how many committers
//! one commit served) and log blocks per commit.
//!
//! What `bench/peers.sh --sync` measures through FUSE, minus FUSE: if
//! more threads do not give more fsyncs here, the log path serializes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tarn_dsl::Pool;
use tarn_format::label::VdevClass;
use tarn_pool::NewTop;
use tarn_vdev::{BlockDevice, FileDevice, Layout};
use tarn_zpl::{Cred, Settings, SyncMode, Zpl, ZplOptions};

const IMAGE_BYTES: u64 = 4 << 30;
const SLOG_BYTES: u64 = 1 << 30;
const FILE_BYTES: u64 = 32 << 20;
const ROW_TIME: Duration = Duration::from_secs(3);

pub(crate) fn device(p: &Path, len: u64) -> Arc<dyn BlockDevice> {
    let _ = std::fs::remove_file(p);
    let f = std::fs::File::create(p).expect("create image");
    f.set_len(len).expect("size image");
    Arc::new(FileDevice::open(p).expect("open image"))
}

pub fn run(dir: &Path, only: Option<usize>) {
    std::fs::create_dir_all(dir).expect("create bench dir");
    let images = [dir.join("tarn-fsync-a.img"), dir.join("tarn-fsync-b.img")];
    let slog: PathBuf = format!("/dev/shm/tarn-fsync-slog.{}", std::process::id()).into();
    let tops = mirror_and_slog(&images, &slog);
    let pool = Pool::create("fsyncbench", tops, &[], &[]).expect("create pool");
    pool.dataset_create("fsyncbench/fs", &[]).expect("dataset");
    println!(
        "4 KiB write + fsync, a file per thread, {} s a row; mirror of two files in {}, log device on tmpfs",
        ROW_TIME.as_secs(),
        dir.display()
    );
    println!();
    println!("| sync | threads | fsyncs/s | p50 µs | p99 µs | fsyncs per log write | log blocks per commit |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for sync in [SyncMode::Standard, SyncMode::Disabled] {
        let zpl = mount(&pool, sync);
        for threads in [1usize, 2, 4, 8] {
            if only.is_none_or(|n| n == threads) {
                row(&pool, &zpl, sync, threads);
            }
        }
        drop(zpl);
    }
    pool.close().expect("close pool");
    for p in images.iter().chain([&slog]) {
        let _ = std::fs::remove_file(p);
    }
}

/// A mirror of the two `images` and a log device on `slog` (created,
/// sparse, at the bench's sizes).
pub(crate) fn mirror_and_slog(images: &[PathBuf; 2], slog: &Path) -> Vec<NewTop> {
    let leaves = images
        .iter()
        .map(|p| (p.display().to_string(), device(p, IMAGE_BYTES), false))
        .collect();
    vec![
        NewTop {
            layout: Layout::Mirror,
            class: VdevClass::Normal,
            ashift: 12,
            leaves,
        },
        NewTop {
            layout: Layout::Single,
            class: VdevClass::Log,
            ashift: 12,
            leaves: vec![(slog.display().to_string(), device(slog, SLOG_BYTES), false)],
        },
    ]
}

fn mount(pool: &Arc<Pool>, sync: SyncMode) -> Zpl {
    let os = pool.dataset_objset("fsyncbench/fs").expect("objset");
    let opts = ZplOptions {
        zil: Some(pool.dataset_zil("fsyncbench/fs").expect("zil")),
        settings: Settings {
            sync,
            ..Settings::default()
        },
        ..Default::default()
    };
    match Zpl::mount(os.clone(), pool.txg().clone(), opts.clone()) {
        Ok(z) => z,
        Err(_) => Zpl::format(os, pool.txg().clone(), opts).expect("format"),
    }
}

fn row(pool: &Arc<Pool>, zpl: &Zpl, sync: SyncMode, threads: usize) {
    let cred = Cred::root();
    let root = zpl.root_ino();
    let files: Vec<u64> = (0..threads)
        .map(|t| {
            let name = format!("{sync:?}-{threads}-{t}");
            let ino = zpl
                .create(root, name.as_bytes(), 0o644, &cred, false)
                .expect("create")
                .ino;
            let chunk = vec![0x5au8; 1 << 20];
            for off in (0..FILE_BYTES).step_by(chunk.len()) {
                zpl.write(ino, off, &chunk, &cred).expect("lay out");
            }
            ino
        })
        .collect();
    pool.sync().expect("sync");
    let zil = pool.dataset_zil("fsyncbench/fs").expect("zil");
    let before = zil.stats();
    let stop = AtomicBool::new(false);
    let lat: Vec<Vec<u32>> = std::thread::scope(|s| {
        let workers: Vec<_> = files
            .iter()
            .enumerate()
            .map(|(t, &ino)| {
                let stop = &stop;
                let cred = &cred;
                s.spawn(move || {
                    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ t as u64;
                    let buf = vec![t as u8; 4096];
                    let mut lat = Vec::with_capacity(1 << 16);
                    while !stop.load(Ordering::Relaxed) {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        let off = (seed % (FILE_BYTES / 4096)) * 4096;
                        let t0 = Instant::now();
                        zpl.write(ino, off, &buf, cred).expect("write");
                        zpl.fsync(ino).expect("fsync");
                        lat.push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
                    }
                    lat
                })
            })
            .collect();
        std::thread::sleep(ROW_TIME);
        stop.store(true, Ordering::Relaxed);
        workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .collect()
    });
    let after = zil.stats();
    let mut all: Vec<u32> = lat.into_iter().flatten().collect();
    all.sort_unstable();
    let n = all.len().max(1);
    let pct = |p: f64| {
        all.get(((n as f64 * p) as usize).min(n - 1))
            .copied()
            .unwrap_or(0)
    };
    let commits = after.commits - before.commits;
    let blocks = after.blocks_written - before.blocks_written;
    let per = |a: u64, b: u64| {
        if b == 0 {
            "-".to_string()
        } else {
            format!("{:.1}", a as f64 / b as f64)
        }
    };
    println!(
        "| {} | {threads} | {:.0} | {} | {} | {} | {} |",
        if sync == SyncMode::Disabled {
            "disabled"
        } else {
            "standard"
        },
        all.len() as f64 / ROW_TIME.as_secs_f64(),
        pct(0.5),
        pct(0.99),
        per(all.len() as u64, commits),
        per(blocks, commits),
    );
}
