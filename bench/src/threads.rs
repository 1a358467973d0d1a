//! `tarn-bench threads [--dir DIR] [--threads N]`: the request paths on
//! many threads, without FUSE, with the time each request waited for a
//! lock. Per row, 1, 2, 4 and 8 threads each do 4 KiB requests through
//! `Zpl` (what a mount's READ, WRITE and FSYNC run) for two seconds:
//!
//! - **read**: random reads of one shared 64 MiB file, every block cached
//!   (the warm `O_DIRECT` reads of `io-scaling.sh`, minus FUSE);
//! - **write**: random overwrites, a 64 MiB file per thread;
//! - **write+fsync**: the same with an `fsync` after each, the intent
//!   log on a tmpfs log device;
//!
//! at recordsize 4K and 128K. The lock columns come from
//! `tarn_dmu::lockstat`: the share of the threads' time spent waiting
//! for a lock another thread held, waits per request, and the lock that
//! took most of it. A path that scales shows IOPS growing with threads
//! (up to the CPUs) and a lock wait near zero; one that serializes shows
//! the lock. `TARN_BENCH_PATH=read` (a prefix of the first column) runs
//! only those rows.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tarn_dmu::lockstat::{dmu_locks, LockStat, LockWaits};
use tarn_dsl::Pool;
use tarn_zpl::{Cred, Settings, Zpl, ZplOptions, ZPL_INODE, ZPL_NS};

const FILE_BYTES: u64 = 64 << 20;
const REQUEST_BYTES: usize = 4096;
const ROW_TIME: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Path_ {
    /// No tarn: 4 KiB copies out of a private 64 MiB buffer per thread,
    /// the machine's own scaling for a request-sized memory copy (the
    /// ceiling of the read rows).
    Copy,
    Read,
    Write,
    WriteFsync,
}

impl Path_ {
    fn name(self) -> &'static str {
        match self {
            Path_::Copy => "ceiling: 4 KiB copies, private buffers (no tarn)",
            Path_::Read => "read, one shared file",
            Path_::Write => "write, a file per thread",
            Path_::WriteFsync => "write+fsync, a file per thread",
        }
    }
}

fn locks() -> Vec<&'static LockStat> {
    let mut v: Vec<&'static LockStat> = dmu_locks().to_vec();
    v.extend([&ZPL_NS, &ZPL_INODE]);
    v
}

pub fn run(dir: &Path, only: Option<usize>) {
    std::fs::create_dir_all(dir).expect("create bench dir");
    let images = [
        dir.join("tarn-threads-a.img"),
        dir.join("tarn-threads-b.img"),
    ];
    let slog: PathBuf = format!("/dev/shm/tarn-threads-slog.{}", std::process::id()).into();
    let tops = crate::fsync_scaling::mirror_and_slog(&images, &slog);
    let pool = Pool::create("threadsbench", tops, &[], &[]).expect("create pool");
    println!(
        "4 KiB requests through Zpl (no FUSE), {} s a row, {} CPUs; mirror of two files in {}, log device on tmpfs",
        ROW_TIME.as_secs(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        dir.display()
    );
    println!();
    println!("| path | recordsize | threads | IOPS | × 1 thread | CPUs busy | µs per request | lock wait | waits per request | most waited |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---|");
    let counts: Vec<usize> = [1usize, 2, 4, 8]
        .into_iter()
        .filter(|&n| only.is_none_or(|o| o == n || n == 1))
        .collect();
    let mut one = None;
    for &threads in &counts {
        let iops = ceiling(threads, one);
        one.get_or_insert(iops);
    }
    for (i, recordsize) in [4u32 << 10, 128 << 10].into_iter().enumerate() {
        let name = format!("threadsbench/rs{i}");
        pool.dataset_create(&name, &[]).expect("dataset");
        let zpl = mount(&pool, &name, recordsize);
        for path in [Path_::Read, Path_::Write, Path_::WriteFsync] {
            if std::env::var("TARN_BENCH_PATH").is_ok_and(|p| !path.name().starts_with(&p)) {
                continue;
            }
            let mut one = None;
            for &threads in &counts {
                let iops = row(&pool, &zpl, path, recordsize, threads, one);
                one.get_or_insert(iops);
            }
        }
        drop(zpl);
    }
    pool.close().expect("close pool");
    for p in images.iter().chain([&slog]) {
        let _ = std::fs::remove_file(p);
    }
}

fn mount(pool: &Arc<Pool>, name: &str, recordsize: u32) -> Zpl {
    let os = pool.dataset_objset(name).expect("objset");
    let opts = ZplOptions {
        zil: Some(pool.dataset_zil(name).expect("zil")),
        settings: Settings {
            recordsize,
            ..Settings::default()
        },
        ..Default::default()
    };
    match Zpl::mount(os.clone(), pool.txg().clone(), opts.clone()) {
        Ok(z) => z,
        Err(_) => Zpl::format(os, pool.txg().clone(), opts).expect("format"),
    }
}

/// A file of `FILE_BYTES` laid out and synced.
fn file(pool: &Pool, zpl: &Zpl, name: &str) -> u64 {
    let cred = Cred::root();
    let ino = match zpl.lookup(zpl.root_ino(), name.as_bytes(), &cred) {
        Ok(a) => return a.ino,
        Err(_) => {
            zpl.create(zpl.root_ino(), name.as_bytes(), 0o644, &cred, false)
                .expect("create")
                .ino
        }
    };
    let chunk = vec![0x5au8; 1 << 20];
    for off in (0..FILE_BYTES).step_by(chunk.len()) {
        zpl.write(ino, off, &chunk, &cred).expect("lay out");
    }
    pool.sync().expect("sync");
    ino
}

fn row(
    pool: &Arc<Pool>,
    zpl: &Zpl,
    path: Path_,
    recordsize: u32,
    threads: usize,
    one: Option<f64>,
) -> f64 {
    let cred = Cred::root();
    let files: Vec<u64> = match path {
        Path_::Read => {
            let ino = file(pool, zpl, "shared");
            // Warm: every block of it in the cache, read out of order (a
            // sequential reader's blocks are not kept: `Objset::read`).
            let mut buf = vec![0u8; REQUEST_BYTES];
            let n = FILE_BYTES / REQUEST_BYTES as u64;
            for i in 0..n {
                let off = (i * 7919 % n) * REQUEST_BYTES as u64;
                zpl.read(ino, off, &mut buf).expect("warm");
            }
            vec![ino; threads]
        }
        Path_::Copy => unreachable!("ceiling()"),
        Path_::Write | Path_::WriteFsync => (0..threads)
            .map(|t| file(pool, zpl, &format!("own-{t}")))
            .collect(),
    };
    let locks = locks();
    let before: Vec<LockWaits> = locks.iter().map(|l| l.read()).collect();
    let stop = AtomicBool::new(false);
    let cpu0 = process_cpu();
    let t0 = Instant::now();
    let done: u64 = std::thread::scope(|s| {
        let workers: Vec<_> = files
            .iter()
            .enumerate()
            .map(|(t, &ino)| {
                let (stop, cred) = (&stop, &cred);
                s.spawn(move || {
                    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (t as u64 + 1);
                    let mut buf = vec![t as u8; REQUEST_BYTES];
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let off = random_request(&mut seed) as u64;
                        match path {
                            Path_::Copy => {}
                            Path_::Read => {
                                zpl.read(ino, off, &mut buf).expect("read");
                            }
                            Path_::Write => {
                                zpl.write(ino, off, &buf, cred).expect("write");
                            }
                            Path_::WriteFsync => {
                                zpl.write(ino, off, &buf, cred).expect("write");
                                zpl.fsync(ino).expect("fsync");
                            }
                        }
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        std::thread::sleep(ROW_TIME);
        stop.store(true, Ordering::Relaxed);
        workers.into_iter().map(|w| w.join().expect("worker")).sum()
    });
    let elapsed = t0.elapsed();
    let cpus_busy = (process_cpu() - cpu0).as_secs_f64() / elapsed.as_secs_f64();
    let waits: Vec<(&str, LockWaits)> = locks
        .iter()
        .zip(before)
        .map(|(l, b)| (l.name, l.read() - b))
        .collect();
    let total_ns: u64 = waits.iter().map(|(_, w)| w.wait_ns).sum();
    let total_waits: u64 = waits.iter().map(|(_, w)| w.waits).sum();
    let top = waits
        .iter()
        .max_by_key(|(_, w)| w.wait_ns)
        .filter(|(_, w)| w.wait_ns > 0)
        .map_or("-".to_string(), |(n, w)| {
            format!("{n} ({:.0} %)", 100.0 * w.wait_ns as f64 / total_ns as f64)
        });
    let iops = done as f64 / elapsed.as_secs_f64();
    let busy_ns = threads as f64 * elapsed.as_nanos() as f64;
    println!(
        "| {} | {}K | {threads} | {iops:.0} | {} | {cpus_busy:.2} | {:.1} | {:.1} % | {:.2} | {top} |",
        path.name(),
        recordsize >> 10,
        one.map_or("1.00".to_string(), |o| format!("{:.2}", iops / o)),
        busy_ns / 1000.0 / done.max(1) as f64,
        100.0 * total_ns as f64 / busy_ns,
        total_waits as f64 / done.max(1) as f64,
    );
    iops
}

/// The `Copy` row.
fn ceiling(threads: usize, one: Option<f64>) -> f64 {
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let done: u64 = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let stop = &stop;
                s.spawn(move || {
                    let src = vec![t as u8 ^ 0x5a; FILE_BYTES as usize];
                    let mut buf = vec![0u8; REQUEST_BYTES];
                    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (t as u64 + 1);
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let off = random_request(&mut seed);
                        buf.copy_from_slice(&src[off..off + REQUEST_BYTES]);
                        std::hint::black_box(&mut buf);
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        std::thread::sleep(ROW_TIME);
        stop.store(true, Ordering::Relaxed);
        workers.into_iter().map(|w| w.join().expect("worker")).sum()
    });
    let iops = done as f64 / t0.elapsed().as_secs_f64();
    let busy_ns = threads as f64 * t0.elapsed().as_nanos() as f64;
    println!(
        "| {} | - | {threads} | {iops:.0} | {} | {threads} | {:.2} | - | - | - |",
        Path_::Copy.name(),
        one.map_or("1.00".to_string(), |o| format!("{:.2}", iops / o)),
        busy_ns / 1000.0 / done.max(1) as f64,
    );
    iops
}

/// CPU time this process used so far (all threads: the requests' and the
/// pool's own, txg sync and its writers): `CPUs busy` says whether a row
/// that did not scale had CPUs left to scale onto.
fn process_cpu() -> Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes a whole `rusage` into the pointer it is
    // given, which points at one; RUSAGE_SELF is a valid `who`.
    let ru = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) != 0 {
            return Duration::ZERO;
        }
        ru.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The offset of the next random request in a `FILE_BYTES` file
/// (xorshift on `seed`).
fn random_request(seed: &mut u64) -> usize {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    (*seed % (FILE_BYTES / REQUEST_BYTES as u64)) as usize * REQUEST_BYTES
}
