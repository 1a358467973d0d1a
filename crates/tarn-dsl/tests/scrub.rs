//! Scrub end to end below the POSIX layer: a mirror whose one side is
//! overwritten with random bytes is repaired block for block; a block bad
//! on both sides is a permanent error until the data is rewritten; a scrub
//! paused, exported and imported, or interrupted by a crash, resumes where
//! it was and still covers every block.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{devices, mirror, reimport};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_dsl::{Pool, ScanPhase};
use tarn_format::label::{leaf_asize, osize, VdevClass, VDEV_LABEL_START_SIZE};
use tarn_format::{BlockPtr, ObjType};
use tarn_pool::NewTop;
use tarn_vdev::{BlockDevice, Layout};

const DEV_BYTES: u64 = 128 << 20;

fn random(rng: &mut ChaCha8Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    v
}

type Files = Vec<(u64, Vec<u8>)>;

/// Adds `n` files of 256 KiB (two 128 KiB records each) to `tank/fs`.
fn add_files(pool: &Pool, rng: &mut ChaCha8Rng, n: usize, files: &mut Files) {
    let os = pool.dataset_objset("tank/fs").unwrap();
    for _ in 0..n {
        let obj = os.object_create(ObjType::PlainFile, 128 << 10, 0).unwrap();
        let data = random(rng, 256 << 10);
        os.write(obj, 0, &data).unwrap();
        files.push((obj, data));
    }
}

/// A pool on `tops` with `tank/fs` holding `n` files, committed. Returns
/// the objects and their bytes.
fn filled_on(tops: Vec<NewTop>, n: usize, seed: u64) -> (Arc<Pool>, Files) {
    let pool = Pool::create("tank", tops, &[], &[]).unwrap();
    pool.dataset_create("tank/fs", &[]).unwrap();
    let mut files = Vec::new();
    add_files(&pool, &mut ChaCha8Rng::seed_from_u64(seed), n, &mut files);
    pool.sync().unwrap();
    (pool, files)
}

fn filled(devs: &[Arc<dyn BlockDevice>], n: usize) -> (Arc<Pool>, Files) {
    filled_on(mirror(devs), n, 5)
}

fn scrub_and_wait(pool: &Pool) -> tarn_dsl::ScanPhys {
    pool.scrub_start().unwrap();
    wait(pool)
}

fn wait(pool: &Pool) -> tarn_dsl::ScanPhys {
    let t0 = Instant::now();
    loop {
        let p = pool.scan_progress().phys;
        if p.state != ScanPhase::Scanning {
            return p;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "scrub hangs: {p:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Until the running scan has a bookmark past the MOS's first object.
fn wait_mid_walk(pool: &Pool) {
    let t0 = Instant::now();
    while pool.scan_progress().phys.bm_mos_obj == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the scan never moved"
        );
        std::thread::yield_now();
    }
}

fn checksum_errors(pool: &Pool) -> Vec<u64> {
    pool.spa().tops()[0]
        .leaves()
        .iter()
        .map(|l| {
            l.stats
                .checksum_errors
                .load(std::sync::atomic::Ordering::Relaxed)
        })
        .collect()
}

/// Overwrites a leaf's whole allocatable region with random bytes.
fn trash(dev: &Arc<dyn BlockDevice>, seed: u64) {
    let len = leaf_asize(osize(dev.size()));
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let chunk = 1 << 20;
    let mut at = 0;
    while at < len {
        let n = chunk.min(len - at);
        dev.write_at(&random(&mut rng, n as usize), VDEV_LABEL_START_SIZE + at)
            .unwrap();
        at += n;
    }
}

/// The level-0 block pointers of object `obj` in `tank/fs`.
fn data_blocks(pool: &Pool, obj: u64) -> Vec<BlockPtr> {
    let os = pool.dataset_objset("tank/fs").unwrap();
    let mut out = Vec::new();
    os.scan_synced(
        obj,
        0,
        &mut |o, bp| {
            if o == obj && bp.level == 0 {
                out.push(*bp);
            }
        },
        &mut |o, _| match o == obj {
            true => tarn_dmu::ScanStep::Walk,
            false => tarn_dmu::ScanStep::Stop,
        },
    )
    .unwrap();
    out
}

fn read_all(pool: &Pool, files: &[(u64, Vec<u8>)]) {
    let os = pool.dataset_objset("tank/fs").unwrap();
    for (obj, data) in files {
        let mut buf = vec![0u8; data.len()];
        os.read(*obj, 0, &mut buf).unwrap();
        assert!(buf == *data, "object {obj} reads back wrong");
    }
}

#[test]
fn scrub_repairs_a_trashed_mirror_side_and_a_second_finds_nothing() {
    let devs = devices(2, DEV_BYTES);
    let (pool, files) = filled(&devs, 40);
    trash(&devs[1], 9);
    let p = scrub_and_wait(&pool);
    assert_eq!(p.state, ScanPhase::Finished);
    assert_eq!(p.errors, 0, "{p:?}");
    // Every allocated block was read: 40 files of 256 KiB at least.
    assert!(p.issued >= 40 * (256 << 10), "{p:?}");
    assert!(p.processed >= 40 * (256 << 10), "repaired {p:?}");
    let cksum = checksum_errors(&pool);
    assert_eq!(cksum[0], 0);
    assert!(cksum[1] >= 80, "{cksum:?}");
    assert!(pool.permanent_errors().is_empty());
    let again = scrub_and_wait(&pool);
    assert_eq!((again.processed, again.errors), (0, 0), "{again:?}");
    assert_eq!(checksum_errors(&pool), cksum, "nothing new found");
    pool.export().unwrap();
    // Side 0 alone now holds every block: trash it and read from side 1.
    trash(&devs[0], 10);
    let pool = reimport(&devs);
    read_all(&pool, &files);
    let p = scrub_and_wait(&pool);
    assert_eq!(p.errors, 0, "{p:?}");
    pool.export().unwrap();
}

#[test]
fn a_block_lost_on_every_copy_is_a_permanent_error_until_rewritten() {
    let devs = devices(2, DEV_BYTES);
    let (pool, files) = filled(&devs, 8);
    let (victim, _) = files[3];
    let bp = data_blocks(&pool, victim)[1];
    for d in &devs {
        d.write_at(&vec![0xa5; 4096], VDEV_LABEL_START_SIZE + bp.dvas[0].offset)
            .unwrap();
    }
    // A read finds it first (after an export/import, so from the disks):
    // EIO to the reader, and the object is listed, across export/import.
    pool.export().unwrap();
    let pool = reimport(&devs);
    let os = pool.dataset_objset("tank/fs").unwrap();
    let mut buf = vec![0u8; 256 << 10];
    assert!(os.read(victim, 0, &mut buf).is_err(), "no good copy");
    let listed = vec![(Some("tank/fs".to_string()), victim)];
    assert_eq!(pool.permanent_errors(), listed);
    pool.export().unwrap();
    let pool = reimport(&devs);
    assert_eq!(pool.permanent_errors(), listed, "kept by export/import");
    let p = scrub_and_wait(&pool);
    assert_eq!(p.errors, 1, "{p:?}");
    assert_eq!(pool.permanent_errors(), listed);
    // Nothing was overwritten: both copies still hold the damage.
    for d in &devs {
        let mut b = vec![0u8; 4096];
        d.read_at(&mut b, VDEV_LABEL_START_SIZE + bp.dvas[0].offset)
            .unwrap();
        assert!(b.iter().all(|&x| x == 0xa5));
    }
    // The error survives export/import.
    pool.export().unwrap();
    let pool = reimport(&devs);
    assert_eq!(pool.permanent_errors().len(), 1);
    assert_eq!(pool.scan_progress().phys.errors, 1);
    // Rewrite the file: a later scrub finds it good and clears the error.
    let os = pool.dataset_objset("tank/fs").unwrap();
    os.write(victim, 0, &vec![7u8; 256 << 10]).unwrap();
    pool.sync().unwrap();
    let p = scrub_and_wait(&pool);
    assert_eq!(p.errors, 0, "{p:?}");
    assert!(pool.permanent_errors().is_empty());
    pool.export().unwrap();
}

#[test]
fn a_paused_scrub_resumes_after_export_import_and_covers_everything() {
    let devs = devices(2, DEV_BYTES);
    let (pool, _) = filled(&devs, 60);
    // Reference: what one uninterrupted scrub reads.
    let full = scrub_and_wait(&pool);
    trash(&devs[1], 3);
    pool.set_scan_slice(Duration::ZERO);
    pool.scrub_start().unwrap();
    // Pause mid-walk.
    wait_mid_walk(&pool);
    match pool.scrub_pause() {
        Ok(()) => {}
        // Finished before the pause landed: nothing left to test here.
        Err(_) => panic!("scrub finished before it could be paused"),
    }
    let paused = pool.scan_progress().phys;
    assert_eq!(paused.state, ScanPhase::Scanning);
    assert_ne!(paused.pause_time, 0);
    assert!(pool.scrub_pause().is_err(), "already paused");
    pool.export().unwrap();
    let pool = reimport(&devs);
    let p = pool.scan_progress().phys;
    assert_eq!(
        (p.state, p.bm_mos_obj),
        (ScanPhase::Scanning, paused.bm_mos_obj)
    );
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(pool.scan_progress().phys.issued, p.issued, "stays paused");
    pool.set_scan_slice(Duration::ZERO);
    let done = scrub_and_wait(&pool);
    assert_eq!(done.errors, 0, "{done:?}");
    assert_eq!(done.start_time, paused.start_time, "the same scrub");
    // Every block of the trashed side was repaired: a fresh scrub finds
    // nothing left to repair, and covered as much as the reference.
    assert!(done.issued >= full.issued * 9 / 10, "{done:?} vs {full:?}");
    let again = scrub_and_wait(&pool);
    assert_eq!(again.processed, 0, "{again:?}");
    pool.export().unwrap();
}

#[test]
fn a_scrub_interrupted_by_a_crash_resumes_on_import() {
    let devs = devices(2, DEV_BYTES);
    let (pool, _) = filled(&devs, 60);
    trash(&devs[1], 4);
    pool.set_scan_slice(Duration::ZERO);
    pool.scrub_start().unwrap();
    wait_mid_walk(&pool);
    pool.sync().unwrap();
    // Dropped without export: as a crash (the scan thread stops too).
    drop(pool);
    let pool = reimport(&devs);
    // Resumed on its own.
    let done = wait(&pool);
    assert_eq!((done.state, done.errors), (ScanPhase::Finished, 0));
    let again = scrub_and_wait(&pool);
    assert_eq!(again.processed, 0, "{again:?}");
    pool.export().unwrap();
}

#[test]
fn scrub_commands_refuse_what_makes_no_sense() {
    let devs = devices(2, DEV_BYTES);
    let (pool, _) = filled(&devs, 2);
    assert!(pool.scrub_pause().is_err(), "no scrub to pause");
    assert!(pool.scrub_cancel().is_err(), "no scrub to cancel");
    pool.set_scan_slice(Duration::ZERO);
    pool.scrub_start().unwrap();
    if pool.scan_progress().phys.state == ScanPhase::Scanning {
        if let Err(e) = pool.scrub_start() {
            assert!(e.to_string().contains("currently scrubbing"), "{e}");
        }
        let _ = pool.scrub_cancel();
    }
    let p = wait(&pool);
    assert_ne!(p.state, ScanPhase::Scanning);
    pool.export().unwrap();
}

fn single(dev: &Arc<dyn BlockDevice>) -> Vec<NewTop> {
    vec![NewTop {
        layout: Layout::Single,
        class: VdevClass::Normal,
        ashift: 12,
        leaves: vec![("mem0".to_string(), dev.clone(), false)],
    }]
}

#[test]
fn an_attached_device_is_resilvered_while_writes_go_on_and_then_holds_everything() {
    let devs = devices(3, DEV_BYTES);
    let (pool, mut files) = filled_on(single(&devs[0]), 40, 11);
    let mut rng = ChaCha8Rng::seed_from_u64(111);
    let old = pool.spa().configs()[0].guid;
    // Single → 2-way mirror, then a third side while the first resilver
    // may still run.
    let b = pool
        .spa()
        .attach(old, "mem1", devs[1].clone(), false)
        .unwrap();
    pool.sync().unwrap();
    pool.set_scan_slice(Duration::ZERO);
    pool.resilver_start(b, None).unwrap();
    add_files(&pool, &mut rng, 10, &mut files);
    pool.sync().unwrap();
    let p = wait(&pool);
    assert_eq!(p.func, tarn_dsl::ScanFunc::Resilver);
    assert_eq!((p.state, p.errors), (ScanPhase::Finished, 0), "{p:?}");
    assert!(p.processed >= 40 * (256 << 10), "resilvered {p:?}");
    assert!(!pool.spa().tops()[0].leaves()[1].stats.resilvering());
    assert_eq!(checksum_errors(&pool), vec![0, 0], "a resilver is no error");
    // The original device leaves: the new one alone holds every block.
    pool.spa().detach(old).unwrap();
    pool.sync().unwrap();
    pool.export().unwrap();
    let pool = reimport(&devs[1..2]);
    read_all(&pool, &files);
    // And once more onto a third device, under writes.
    let c = pool
        .spa()
        .attach(b, "mem2", devs[2].clone(), false)
        .unwrap();
    pool.sync().unwrap();
    pool.set_scan_slice(Duration::ZERO);
    pool.resilver_start(c, Some(b)).unwrap();
    if pool.scan_progress().phys.state == ScanPhase::Scanning {
        if let Err(e) = pool.scrub_start() {
            assert!(e.to_string().contains("currently resilvering"), "{e}");
        }
    }
    add_files(&pool, &mut rng, 5, &mut files);
    pool.sync().unwrap();
    let p = wait(&pool);
    assert_eq!(
        (p.state, p.errors, p.target_guid),
        (ScanPhase::Finished, 0, c)
    );
    // A replace: the old device left by itself when the resilver was done.
    let t0 = Instant::now();
    while pool.spa().configs()[0].leaves().len() != 1 {
        assert!(t0.elapsed() < Duration::from_secs(10), "b never left");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(pool.spa().configs()[0].guid, c);
    pool.export().unwrap();
    let pool = reimport(&devs[2..3]);
    read_all(&pool, &files);
    pool.export().unwrap();
}

#[test]
fn a_resilver_interrupted_by_a_crash_resumes_on_import() {
    let devs = devices(2, DEV_BYTES);
    let (pool, files) = filled_on(single(&devs[0]), 60, 12);
    let old = pool.spa().configs()[0].guid;
    let new = pool
        .spa()
        .attach(old, "mem1", devs[1].clone(), false)
        .unwrap();
    pool.sync().unwrap();
    pool.set_scan_slice(Duration::ZERO);
    pool.resilver_start(new, Some(old)).unwrap();
    wait_mid_walk(&pool);
    pool.sync().unwrap();
    drop(pool);
    let pool = reimport(&devs);
    let p = pool.scan_progress().phys;
    if p.state == ScanPhase::Scanning {
        // Resumed by itself, with the new side still marked.
        assert_eq!(p.target_guid, new);
    }
    let done = wait(&pool);
    assert_eq!(
        (done.state, done.errors),
        (ScanPhase::Finished, 0),
        "{done:?}"
    );
    let t0 = Instant::now();
    while pool.spa().configs()[0].guid != new {
        assert!(t0.elapsed() < Duration::from_secs(10), "the old side stays");
        std::thread::sleep(Duration::from_millis(10));
    }
    pool.export().unwrap();
    let pool = reimport(&devs[1..2]);
    read_all(&pool, &files);
    pool.export().unwrap();
}

#[test]
fn a_device_back_from_offline_gets_only_the_txgs_it_missed() {
    let devs = devices(2, DEV_BYTES);
    let (pool, mut files) = filled(&devs, 40);
    let leaf_guid = |i: usize| pool.spa().tops()[0].leaves()[i].guid;
    let (a, b) = (leaf_guid(0), leaf_guid(1));
    pool.spa().offline(b, false).unwrap();
    pool.sync().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    add_files(&pool, &mut rng, 2, &mut files);
    pool.sync().unwrap();
    pool.spa().online(b, None).unwrap();
    pool.sync().unwrap();
    assert!(
        pool.spa().leaf_has_dtl(b),
        "b missed the txgs of the 2 files"
    );
    pool.resilver_start(b, None).unwrap();
    let p = wait(&pool);
    assert_eq!((p.state, p.errors), (ScanPhase::Finished, 0), "{p:?}");
    // Only what b missed was copied: the 2 new files and the metadata
    // above them, not the 40 older files (10 MiB).
    assert!(p.processed >= 2 * (256 << 10), "{p:?}");
    assert!(
        p.processed < 10 * (256 << 10),
        "copied more than missed: {p:?}"
    );
    assert!(!pool.spa().leaf_has_dtl(b));
    // b alone holds everything.
    pool.spa().offline(a, false).unwrap();
    pool.sync().unwrap();
    pool.export().unwrap();
    let pool = reimport(&devs);
    read_all(&pool, &files);
    pool.export().unwrap();
}

#[test]
fn a_resilver_restarted_by_a_second_attach_rebuilds_both_devices() {
    let devs = devices(3, DEV_BYTES);
    let (pool, files) = filled_on(single(&devs[0]), 30, 14);
    let a = pool.spa().configs()[0].guid;
    let b = pool
        .spa()
        .attach(a, "mem1", devs[1].clone(), false)
        .unwrap();
    pool.sync().unwrap();
    pool.set_scan_slice(Duration::ZERO);
    pool.resilver_start(b, None).unwrap();
    // A third side before the first resilver is done: the resilver starts
    // over for both.
    let c = pool
        .spa()
        .attach(a, "mem2", devs[2].clone(), false)
        .unwrap();
    pool.sync().unwrap();
    pool.resilver_start(c, None).unwrap();
    let p = wait(&pool);
    assert_eq!((p.state, p.errors), (ScanPhase::Finished, 0), "{p:?}");
    assert!(pool.spa().resilvering_leaves().is_empty());
    // b alone holds everything.
    pool.spa().detach(a).unwrap();
    pool.spa().detach(c).unwrap();
    pool.sync().unwrap();
    pool.export().unwrap();
    let pool = reimport(&devs[1..2]);
    read_all(&pool, &files);
    pool.export().unwrap();
}
