//! Crash test through a real FUSE mount: a workload thread writes files
//! (fsyncing about half of them) and records, in a file outside the pool,
//! each name and content hash only after its fsync returned. The daemon
//! is killed with SIGKILL at a random point of that workload; the next
//! `tarn` command starts a new daemon, which re-imports the pool from the
//! cache file and remounts it over the dead mount. Then the pool must be
//! healthy, the whole tree readable, and every recorded file present with
//! exactly the recorded content. Several rounds on the same pool, so
//! later rounds also check the files of earlier crashes.
//!
//! A failure prints its seed; `TARN_SEED=n` replays that seed.

mod common;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use common::{is_fuse_mounted, mounts_under, Mounted, MIB};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const ROUNDS: u64 = 4;
const FIRST_SEED: u64 = 1;
const SEED_COUNT: u64 = 2;

fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Writes files under `dir` until an operation fails (the daemon died);
/// appends `path len hash` to `record` after each successful fsync and
/// says so on `synced`.
fn workload(dir: PathBuf, seed: u64, record: PathBuf, synced: mpsc::Sender<()>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut log = OpenOptions::new()
        .append(true)
        .create(true)
        .open(&record)
        .unwrap();
    for i in 0.. {
        let sub = dir.join(format!("d{}", i % 4));
        if std::fs::create_dir_all(&sub).is_err() {
            return;
        }
        let p = sub.join(format!("f{i}"));
        let mut data = vec![0u8; rng.random_range(1..300_000)];
        rng.fill(&mut data[..]);
        let Ok(mut f) = File::create(&p) else { return };
        if f.write_all(&data).is_err() {
            return;
        }
        if rng.random_bool(0.5) {
            if f.sync_all().is_err() {
                return;
            }
            writeln!(log, "{} {} {:016x}", p.display(), data.len(), fnv1a(&data)).unwrap();
            if synced.send(()).is_err() {
                return;
            }
        }
    }
}

fn check_records(seed: u64, record: &Path) -> usize {
    let text = std::fs::read_to_string(record).unwrap_or_default();
    for line in text.lines() {
        let mut it = line.split(' ');
        let (p, len, hash) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        let got = std::fs::read(p)
            .unwrap_or_else(|e| panic!("seed {seed}: fsynced file {p} lost after the crash: {e}"));
        assert_eq!(got.len().to_string(), len, "seed {seed}: {p} length");
        assert_eq!(
            format!("{:016x}", fnv1a(&got)),
            hash,
            "seed {seed}: {p} content"
        );
    }
    text.lines().count()
}

/// Read every file and directory: nothing may fail after recovery.
fn walk_all(seed: u64, dir: &Path) -> usize {
    let mut n = 0;
    for e in
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("seed {seed}: {}: {e}", dir.display()))
    {
        let p = e.unwrap().path();
        let md = std::fs::symlink_metadata(&p).unwrap();
        n += 1;
        if md.is_dir() {
            n += walk_all(seed, &p);
        } else {
            let got =
                std::fs::read(&p).unwrap_or_else(|e| panic!("seed {seed}: {}: {e}", p.display()));
            assert_eq!(got.len() as u64, md.len(), "seed {seed}: {}", p.display());
        }
    }
    n
}

fn run_seed(seed: u64) {
    let m = Mounted::new("tank", &["mirror", "a", "b"], 512 * MIB);
    let record = m.env.dir.path().join("fsynced.txt");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for round in 0..ROUNDS {
        let dir = m.root().join(format!("round-{round}"));
        let kill_after = rng.random_range(1..25);
        let (tx, rx) = mpsc::channel();
        let worker = {
            let (record, wseed) = (record.clone(), rng.random());
            std::thread::spawn(move || workload(dir, wseed, record, tx))
        };
        for _ in 0..kill_after {
            rx.recv().expect("the workload stopped before the kill");
        }
        m.env.kill_daemon();
        worker.join().unwrap();
        // The next command restarts the daemon, which detaches the dead
        // mount, re-imports and remounts.
        let status = m.env.ok(&["zpool", "status", "tank"]);
        assert!(
            status.contains("ONLINE"),
            "seed {seed} round {round}: {status}"
        );
        m.env.ok(&["zfs", "list", "-r", "tank"]);
        assert!(
            is_fuse_mounted(&m.root()),
            "seed {seed} round {round}: not remounted; daemon log:\n{}",
            m.env.daemon_log()
        );
        let fuse_mounts = mounts_under(m.env.dir.path());
        assert_eq!(
            fuse_mounts.len(),
            1,
            "seed {seed} round {round}: stale mounts {fuse_mounts:?}"
        );
        let checked = check_records(seed, &record);
        let names = walk_all(seed, &m.root());
        eprintln!(
            "seed {seed} round {round}: {checked} fsynced files intact, {names} names readable"
        );
    }
}

#[test]
fn fsynced_files_survive_sigkill_of_the_daemon() {
    tarn_testkit::for_each_seed("posix_crash", FIRST_SEED, SEED_COUNT, run_seed);
}
