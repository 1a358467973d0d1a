//! The `sync` and `logbias` properties, and which records an `fsync`
//! commits, on the real dataset layer over devices that lose unflushed
//! writes at a crash.
//!
//! - `sync=standard`: an fsync'd write survives a crash, without a txg.
//! - `sync=always`: a write survives a crash with no fsync at all.
//! - `sync=disabled`: fsync returns without writing the log, so a crash
//!   loses the write (this is the documented price of the setting).
//! - an fsync of one file does not write another file's pending data.
//! - large writes (and every write with `logbias=throughput`) are written
//!   in place and logged by pointer; small ones are copied into the log;
//!   both replay after a crash.

mod common;

use common::sim::SimPool;
use tarn_zpl::{Cred, LogBias, SetAttr, Settings, SyncMode, Zpl};

const DATASET: &str = "tank/fs";

/// A pool on simulated disks that lose unflushed writes at a crash.
struct Rig(SimPool);

impl Rig {
    fn new() -> Rig {
        Rig(SimPool::create(0, &[DATASET]))
    }

    fn mount(&self, settings: Settings, format: bool) -> Zpl {
        self.0.mount_with(DATASET, settings, format)
    }

    /// Power loss: unflushed writes are gone; the pool is imported again.
    fn crash(mut self) -> Rig {
        self.0.crash_and_import();
        self
    }

    fn pool(&self) -> &std::sync::Arc<tarn_dsl::Pool> {
        self.0.pool()
    }

    fn commits(&self) -> u64 {
        self.pool().dataset_zil(DATASET).unwrap().stats().commits
    }
}

fn with_sync(sync: SyncMode) -> Settings {
    Settings {
        sync,
        ..Settings::default()
    }
}

/// Creates `name` and makes it durable (a txg), so later writes to it
/// are the only thing a crash can lose. The first logged fsync also
/// makes the log's chain, which itself waits for a txg.
fn durable_file(rig: &Rig, zpl: &Zpl, name: &str) -> u64 {
    let ino = zpl
        .create(zpl.root_ino(), name.as_bytes(), 0o644, &Cred::root(), true)
        .unwrap()
        .ino;
    rig.pool().txg().wait_synced(0).unwrap();
    let chmod = SetAttr {
        mode: Some(0o644),
        ..SetAttr::default()
    };
    zpl.setattr(ino, &chmod, &Cred::root()).unwrap();
    zpl.fsync(ino).unwrap();
    rig.pool().txg().wait_synced(0).unwrap();
    ino
}

fn contents(zpl: &Zpl, name: &str) -> Vec<u8> {
    let a = zpl
        .lookup(zpl.root_ino(), name.as_bytes(), &Cred::root())
        .unwrap();
    let mut buf = vec![0u8; a.size as usize];
    let n = zpl.read(a.ino, 0, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn standard_fsync_survives_a_crash_without_a_txg() {
    let rig = Rig::new();
    let zpl = rig.mount(with_sync(SyncMode::Standard), true);
    let ino = durable_file(&rig, &zpl, "a");
    let synced = rig.pool().txg().last_synced();
    let before = rig.commits();
    zpl.write(ino, 0, b"acknowledged", &Cred::root()).unwrap();
    zpl.fsync(ino).unwrap();
    assert_eq!(
        rig.pool().txg().last_synced(),
        synced,
        "fsync waited for a txg: {:?}",
        rig.pool().dataset_zil(DATASET).unwrap().stats()
    );
    assert_eq!(rig.commits(), before + 1);
    drop(zpl);
    let rig = rig.crash();
    let zpl = rig.mount(with_sync(SyncMode::Standard), false);
    assert_eq!(contents(&zpl, "a"), b"acknowledged");
}

#[test]
fn always_makes_every_write_durable_without_fsync() {
    let rig = Rig::new();
    let zpl = rig.mount(with_sync(SyncMode::Always), true);
    let ino = durable_file(&rig, &zpl, "a");
    let before = rig.commits();
    zpl.write(ino, 0, b"first", &Cred::root()).unwrap();
    zpl.write(ino, 5, b"+second", &Cred::root()).unwrap();
    assert!(rig.commits() >= before + 2, "each write commits the log");
    drop(zpl);
    let rig = rig.crash();
    let zpl = rig.mount(with_sync(SyncMode::Always), false);
    assert_eq!(contents(&zpl, "a"), b"first+second");
}

#[test]
fn disabled_fsync_writes_nothing_and_a_crash_loses_the_write() {
    let rig = Rig::new();
    let zpl = rig.mount(with_sync(SyncMode::Disabled), true);
    let ino = durable_file(&rig, &zpl, "a");
    zpl.write(ino, 0, b"lost", &Cred::root()).unwrap();
    zpl.fsync(ino).unwrap();
    assert_eq!(rig.commits(), 0, "sync=disabled must not write the log");
    drop(zpl);
    let rig = rig.crash();
    let zpl = rig.mount(with_sync(SyncMode::Disabled), false);
    assert_eq!(contents(&zpl, "a"), b"");
}

#[test]
fn the_setting_changes_at_runtime() {
    let rig = Rig::new();
    let zpl = rig.mount(with_sync(SyncMode::Disabled), true);
    let ino = durable_file(&rig, &zpl, "a");
    zpl.set_settings(with_sync(SyncMode::Always)).unwrap();
    zpl.write(ino, 0, b"kept", &Cred::root()).unwrap();
    drop(zpl);
    let rig = rig.crash();
    let zpl = rig.mount(Settings::default(), false);
    assert_eq!(contents(&zpl, "a"), b"kept");
}

#[test]
fn fsync_of_one_file_leaves_another_files_writes_pending() {
    let rig = Rig::new();
    let zpl = rig.mount(Settings::default(), true);
    let a = durable_file(&rig, &zpl, "a");
    let b = durable_file(&rig, &zpl, "b");
    zpl.write(a, 0, &vec![7u8; 64 << 10], &Cred::root())
        .unwrap();
    zpl.write(b, 0, b"bee", &Cred::root()).unwrap();
    let zil = rig.pool().dataset_zil(DATASET).unwrap();
    let before = zil.stats().bytes_written;
    zpl.fsync(b).unwrap();
    // b's write and setattr: a's 64 KiB were not written to the log.
    assert!(
        zil.stats().bytes_written - before < 32 << 10,
        "fsync(b) logged a's data: {:?}",
        zil.stats()
    );
    drop(zpl);
    let rig = rig.crash();
    let zpl = rig.mount(Settings::default(), false);
    assert_eq!(contents(&zpl, "b"), b"bee");
    assert!(contents(&zpl, "a").is_empty(), "a was never fsynced");
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// Writes `data` at 0 of a durable file, fsyncs, and returns the log's
/// (bytes written, indirect blocks) for that fsync, and the crashed and
/// remounted file's contents.
fn fsync_then_crash(settings: Settings, data: &[u8]) -> ((u64, u64), Vec<u8>) {
    let rig = Rig::new();
    let zpl = rig.mount(settings, true);
    let ino = durable_file(&rig, &zpl, "f");
    let zil = rig.pool().dataset_zil(DATASET).unwrap();
    let before = zil.stats();
    zpl.write(ino, 0, data, &Cred::root()).unwrap();
    zpl.fsync(ino).unwrap();
    let after = zil.stats();
    let used = (
        after.bytes_written - before.bytes_written,
        after.indirect_blocks - before.indirect_blocks,
    );
    drop(zpl);
    let rig = rig.crash();
    let zpl = rig.mount(settings, false);
    (used, contents(&zpl, "f"))
}

#[test]
fn a_large_write_is_written_in_place_and_logged_by_pointer() {
    let data = pattern(512 << 10, 1);
    let ((log_bytes, indirect), back) = fsync_then_crash(Settings::default(), &data);
    assert_eq!(indirect, 4, "four 128 KiB records in place");
    assert!(
        log_bytes <= 16 << 10,
        "data copied into the log: {log_bytes}"
    );
    assert!(back == data, "indirect writes did not replay");
}

#[test]
fn a_small_write_is_copied_into_the_log() {
    let data = pattern(4 << 10, 2);
    let ((log_bytes, indirect), back) = fsync_then_crash(Settings::default(), &data);
    assert_eq!(indirect, 0);
    assert!(log_bytes >= 4 << 10);
    assert!(back == data);
}

#[test]
fn throughput_writes_even_small_blocks_in_place() {
    let settings = Settings {
        logbias: LogBias::Throughput,
        recordsize: 4 << 10,
        ..Settings::default()
    };
    let data = pattern(8 << 10, 3);
    let ((_, indirect), back) = fsync_then_crash(settings, &data);
    assert_eq!(indirect, 2, "two 4 KiB records in place");
    assert!(back == data);
}

#[test]
fn an_overwrite_after_an_indirect_commit_replays_to_the_newest_fsync() {
    let rig = Rig::new();
    let zpl = rig.mount(Settings::default(), true);
    let ino = durable_file(&rig, &zpl, "f");
    let first = pattern(256 << 10, 4);
    zpl.write(ino, 0, &first, &Cred::root()).unwrap();
    zpl.fsync(ino).unwrap();
    // Same txg: the block written in place is stale now.
    let second = pattern(256 << 10, 5);
    zpl.write(ino, 0, &second, &Cred::root()).unwrap();
    zpl.fsync(ino).unwrap();
    drop(zpl);
    let rig = rig.crash();
    let zpl = rig.mount(Settings::default(), false);
    assert!(contents(&zpl, "f") == second);
    // And once synced, the file reads back the same (the stale block was
    // freed, not installed).
    rig.pool().txg().wait_synced(0).unwrap();
    assert!(contents(&zpl, "f") == second);
}

#[test]
fn inodes_created_after_a_replay_get_newer_generations() {
    let rig = Rig::new();
    let zpl = rig.mount(Settings::default(), true);
    let dir = durable_file(&rig, &zpl, "anchor");
    // Logged creates that never commit: after the crash the pool's txgs
    // restart at or below theirs (a crash while a txg syncs leaves records
    // of the next one too), and new inodes must still not repeat them.
    let mut gens = Vec::new();
    for i in 0..3 {
        let a = zpl
            .create(
                zpl.root_ino(),
                format!("n{i}").as_bytes(),
                0o644,
                &Cred::root(),
                true,
            )
            .unwrap();
        gens.push(a.gen);
        zpl.fsync(a.ino).unwrap();
    }
    zpl.fsync(dir).unwrap();
    drop(zpl);
    let rig = rig.crash();
    let zpl = rig.mount(Settings::default(), false);
    let newest = *gens.iter().max().unwrap();
    for (i, gen) in gens.iter().enumerate() {
        let a = zpl
            .lookup(zpl.root_ino(), format!("n{i}").as_bytes(), &Cred::root())
            .unwrap();
        assert_eq!(a.gen, *gen, "replay keeps the generation");
    }
    let fresh = zpl
        .create(zpl.root_ino(), b"fresh", 0o644, &Cred::root(), true)
        .unwrap();
    assert!(
        fresh.gen > newest,
        "{} repeats a replayed generation",
        fresh.gen
    );
}
