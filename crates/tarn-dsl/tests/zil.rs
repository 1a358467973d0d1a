//! The intent log end to end below the POSIX layer: records committed by
//! `Zilog::commit` survive a crash that loses the open txg and are found
//! again at import (exactly those of txgs after the last committed one);
//! records whose txg committed are not replayed; the blocks the log uses
//! are freed again; concurrent commits share block writes; the records a
//! writer took before it panicked are made durable by the txg, never
//! acknowledged without.

mod common;

use std::sync::Arc;

use tarn_dsl::Pool;
use tarn_format::zil::LogRecord;
use tarn_format::ObjType;
use tarn_vdev::{BlockDevice, FaultDevice, HookDevice, MemDevice};

fn devices(seed: u64) -> Vec<Arc<FaultDevice>> {
    (0..2)
        .map(|i| {
            Arc::new(FaultDevice::new(
                Arc::new(MemDevice::new(256 << 20)),
                seed + i,
            ))
        })
        .collect()
}

fn as_dyn(devs: &[Arc<FaultDevice>]) -> Vec<Arc<dyn BlockDevice>> {
    devs.iter().map(|d| d.clone() as _).collect()
}

fn create(devs: &[Arc<FaultDevice>]) -> Arc<Pool> {
    let pool = Pool::create("tank", common::mirror(&as_dyn(devs)), &[], &[]).unwrap();
    pool.dataset_create("tank/fs", &[]).unwrap();
    pool
}

/// Drops what was not flushed (the last write maybe torn) and imports.
fn crash_and_import(pool: Arc<Pool>, devs: &[Arc<FaultDevice>]) -> Arc<Pool> {
    for d in devs {
        d.crash();
    }
    drop(pool);
    common::reimport(&as_dyn(devs))
}

/// Writes `data` at `off` of `obj` in the open txg and logs it.
fn logged_write(pool: &Pool, obj: u64, off: u64, data: &[u8]) -> u64 {
    let os = pool.dataset_objset("tank/fs").unwrap();
    let zil = pool.dataset_zil("tank/fs").unwrap();
    let h = pool.txg().hold().unwrap();
    let _os = os.hold();
    os.write(obj, off, data).unwrap();
    zil.log_write(h.txg, obj, off, data.len() as u64);
    h.txg
}

fn new_object(pool: &Pool) -> u64 {
    let os = pool.dataset_objset("tank/fs").unwrap();
    let obj = {
        let _h = pool.txg().hold().unwrap();
        let _os = os.hold();
        os.object_create(ObjType::PlainFile, 4096, 0).unwrap()
    };
    pool.sync().unwrap();
    obj
}

#[test]
fn committed_records_survive_a_crash_and_replay_once() {
    let devs = devices(1);
    let pool = create(&devs);
    let obj = new_object(&pool);
    let zil = pool.dataset_zil("tank/fs").unwrap();
    // The first commit makes the chain and waits for a txg to name it.
    logged_write(&pool, obj, 0, b"first");
    zil.commit().unwrap();
    let synced_before = pool.txg().last_synced();
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    let txg = logged_write(&pool, obj, 100, &data);
    assert!(txg > synced_before);
    zil.commit().unwrap();
    assert_eq!(
        pool.txg().last_synced(),
        synced_before,
        "a commit is not a txg"
    );
    // A second commit with nothing new writes nothing.
    let blocks = zil.stats().blocks_written;
    zil.commit().unwrap();
    assert_eq!(zil.stats().blocks_written, blocks);
    // Logged but not committed: lost by the crash, and that is allowed.
    logged_write(&pool, obj, 50_000, b"never committed");
    let pool = crash_and_import(pool, &devs);
    let zil = pool.dataset_zil("tank/fs").unwrap();
    let recs = zil.take_replay();
    assert_eq!(recs.len(), 1, "{recs:?}");
    match &recs[0].record {
        LogRecord::Write {
            obj: o,
            offset,
            data: d,
        } => {
            assert_eq!((*o, *offset), (obj, 100));
            assert_eq!(d, &data);
        }
        r => panic!("unexpected {r:?}"),
    }
    // Apply and end replay in one txg.
    let os = pool.dataset_objset("tank/fs").unwrap();
    {
        let h = pool.txg().hold().unwrap();
        let _os = os.hold();
        os.write(obj, 100, &data).unwrap();
        zil.replay_done(h.txg, 1).unwrap();
    }
    pool.sync().unwrap();
    let pool = crash_and_import(pool, &devs);
    let zil = pool.dataset_zil("tank/fs").unwrap();
    assert!(zil.take_replay().is_empty(), "replayed exactly once");
    let os = pool.dataset_objset("tank/fs").unwrap();
    let mut back = vec![0u8; data.len()];
    os.read(obj, 100, &mut back).unwrap();
    assert_eq!(back, data);
}

#[test]
fn records_of_committed_txgs_are_not_replayed_and_blocks_are_freed() {
    let devs = devices(2);
    let pool = create(&devs);
    let obj = new_object(&pool);
    let zil = pool.dataset_zil("tank/fs").unwrap();
    logged_write(&pool, obj, 0, &[1u8; 4096]);
    zil.commit().unwrap();
    pool.sync().unwrap();
    pool.sync().unwrap();
    let alloc = pool.spa().allocated_deflated();
    for round in 0..30u8 {
        logged_write(&pool, obj, u64::from(round) * 4096, &[round; 4096]);
        zil.commit().unwrap();
        if round % 5 == 4 {
            pool.sync().unwrap();
        }
    }
    pool.sync().unwrap();
    pool.sync().unwrap();
    let after = pool.spa().allocated_deflated();
    // The file grew by 120 KiB of data (plus its metadata); the 30 log
    // blocks written meanwhile are free again.
    assert!(
        after < alloc + (1 << 20),
        "log blocks leaked: {alloc} -> {after}"
    );
    assert!(zil.stats().blocks_written >= 30);
    let pool = crash_and_import(pool, &devs);
    let zil = pool.dataset_zil("tank/fs").unwrap();
    assert!(zil.take_replay().is_empty());
}

/// Each round, 8 threads each log a write to their own object and then
/// all commit at once (through `commit`): the committers share log blocks.
fn commits_share_log_blocks(
    commit: fn(&tarn_zil::Zilog, u64),
) -> (Vec<Arc<FaultDevice>>, Arc<Pool>) {
    let devs = devices(3);
    let pool = create(&devs);
    let objs: Vec<u64> = (0..8).map(|_| new_object(&pool)).collect();
    let zil = pool.dataset_zil("tank/fs").unwrap();
    // Device writes that take as long as a real disk's: committers
    // arriving while one writes are batched into the next write.
    for d in &devs {
        d.set_latency(std::time::Duration::from_millis(1));
    }
    let barrier = Arc::new(std::sync::Barrier::new(objs.len()));
    let threads: Vec<_> = objs
        .iter()
        .map(|&obj| {
            let (pool, zil, barrier) = (pool.clone(), zil.clone(), barrier.clone());
            std::thread::spawn(move || {
                for i in 0..40u64 {
                    logged_write(&pool, obj, i * 4096, &[obj as u8; 4096]);
                    barrier.wait();
                    commit(&zil, obj);
                    barrier.wait();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let st = zil.stats();
    // Records whose txg committed first are dropped, never written.
    assert!(st.records_written <= 8 * 40, "{st:?}");
    assert!(
        st.blocks_written * 2 <= st.records_written,
        "commits did not share log blocks: {st:?}"
    );
    (devs, pool)
}

#[test]
fn concurrent_fsyncs_of_different_objects_share_log_blocks() {
    // Each commits only its own object's writes, yet the writer takes
    // the records of every object whose committer is queued.
    commits_share_log_blocks(|zil, obj| zil.commit_object(obj).unwrap());
}

#[test]
fn concurrent_commits_share_log_blocks() {
    // The first committer takes everyone's records along.
    let (devs, pool) = commits_share_log_blocks(|zil, _| zil.commit().unwrap());
    let pool = crash_and_import(pool, &devs);
    let zil = pool.dataset_zil("tank/fs").unwrap();
    let recs = zil.take_replay();
    // Everything committed since the last txg is there, in order.
    assert!(recs.windows(2).all(|w| w[0].seq < w[1].seq));
    assert!(!recs.is_empty());
}

/// 8 threads each write and fsync their own object in a loop, with no
/// barrier: a committer whose records a writer ahead of it took returns
/// when it gets the writer, instead of writing what arrived meanwhile.
/// (When each queued committer wrote, every fsync made a log write of its
/// own, about 1.4 fsyncs per write, and waited behind all the others.)
#[test]
fn streaming_fsyncs_share_log_writes() {
    let devs = devices(3);
    let pool = create(&devs);
    let objs: Vec<u64> = (0..8).map(|_| new_object(&pool)).collect();
    let zil = pool.dataset_zil("tank/fs").unwrap();
    logged_write(&pool, objs[0], 0, b"make the chain");
    zil.commit().unwrap();
    for d in &devs {
        d.set_latency(std::time::Duration::from_millis(1));
    }
    let before = zil.stats();
    let rounds = 30u64;
    let threads: Vec<_> = objs
        .iter()
        .map(|&obj| {
            let (pool, zil) = (pool.clone(), zil.clone());
            std::thread::spawn(move || {
                for i in 0..rounds {
                    logged_write(&pool, obj, i * 4096, &[obj as u8; 4096]);
                    zil.commit_object(obj).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let after = zil.stats();
    let fsyncs = rounds * objs.len() as u64;
    let writes = after.commits - before.commits;
    assert!(
        writes * 2 <= fsyncs,
        "{writes} log writes for {fsyncs} fsyncs: {after:?}"
    );
}

#[test]
fn a_commit_behind_much_write_data_waits_for_the_txg_instead() {
    let devs = devices(4);
    let pool = create(&devs);
    let obj = new_object(&pool);
    let zil = pool.dataset_zil("tank/fs").unwrap();
    logged_write(&pool, obj, 0, b"make the chain");
    zil.commit().unwrap();
    let before = zil.stats();
    let synced = pool.txg().last_synced();
    let chunk = vec![0x5au8; 1 << 20];
    for i in 0..(tarn_zil::LOG_BULK_BYTES >> 20) + 2 {
        logged_write(&pool, obj, i << 20, &chunk);
    }
    zil.commit().unwrap();
    let after = zil.stats();
    assert_eq!(after.bulk_commits, before.bulk_commits + 1);
    assert_eq!(
        after.blocks_written, before.blocks_written,
        "data logged twice"
    );
    assert!(pool.txg().last_synced() > synced);
}

#[test]
fn records_a_panicking_writer_took_are_made_durable_by_the_txg() {
    let devs = devices(5);
    // Once armed, the next durable write (only the intent log makes
    // those) to the first device panics, standing in for a bug in the
    // log's writer.
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dyns: Vec<Arc<dyn BlockDevice>> = devs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let armed = armed.clone();
            Arc::new(HookDevice::new(d.clone(), move |_, _, write| {
                if i == 0 && armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    panic!("injected: the log writer panics");
                }
                write()
            })) as Arc<dyn BlockDevice>
        })
        .collect();
    let pool = Pool::create("tank", common::mirror(&dyns), &[], &[]).unwrap();
    pool.dataset_create("tank/fs", &[]).unwrap();
    let obj = new_object(&pool);
    let zil = pool.dataset_zil("tank/fs").unwrap();
    logged_write(&pool, obj, 0, b"chain");
    zil.commit().unwrap();
    // The writer takes this record, then panics before it is written
    // (a FUSE handler catches the panic; the daemon goes on).
    logged_write(&pool, obj, 4096, b"taken by the writer that panicked");
    armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let z = zil.clone();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| z.commit()));
    assert!(panicked.is_err(), "the injected panic did not happen");
    // A later commit must not acknowledge a state that lacks the record
    // the panicked writer dropped.
    logged_write(&pool, obj, 8192, b"after");
    zil.commit().unwrap();
    let pool = crash_and_import(pool, &devs);
    let zil = pool.dataset_zil("tank/fs").unwrap();
    let os = pool.dataset_objset("tank/fs").unwrap();
    {
        let h = pool.txg().hold().unwrap();
        let _os = os.hold();
        for r in zil.take_replay() {
            if let LogRecord::Write { obj, offset, data } = r.record {
                os.write(obj, offset, &data).unwrap();
            }
        }
        zil.replay_done(h.txg, 0).unwrap();
    }
    let mut back = vec![0u8; 33];
    os.read(obj, 4096, &mut back).unwrap();
    assert_eq!(&back, b"taken by the writer that panicked");
    let mut back = vec![0u8; 5];
    os.read(obj, 8192, &mut back).unwrap();
    assert_eq!(&back, b"after");
}

/// A txg whose log blocks take half of an otherwise empty log device asks
/// for its own sync, long before the 5 s timeout: only that sync frees
/// them, and the next txg's blocks must fit in the other half meanwhile.
#[test]
fn a_txg_filling_half_of_the_log_device_is_synced_at_once() {
    let data = common::devices(2, 256 << 20);
    let log: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(64 << 20));
    let mut tops = common::mirror(&data);
    tops.push(tarn_pool::NewTop {
        class: tarn_format::label::VdevClass::Log,
        layout: tarn_vdev::Layout::Single,
        ..tarn_pool::NewTop::mem_mirror(&[log])
    });
    let pool = Pool::create("tank", tops, &[], &[]).unwrap();
    pool.dataset_create("tank/fs", &[]).unwrap();
    let obj = new_object(&pool);
    let zil = pool.dataset_zil("tank/fs").unwrap();
    logged_write(&pool, obj, 0, b"make the chain");
    zil.commit().unwrap();
    let start = std::time::Instant::now();
    let txg = pool.txg().open_txg();
    // 64 KiB records into 68 KiB blocks: half of 64 MiB is ~480 of them,
    // all in the txg open now (nothing else syncs it in time).
    let mut commits = 0;
    while pool.txg().open_txg() == txg && commits < 800 {
        logged_write(&pool, obj, commits * 65536, &[commits as u8; 65536]);
        zil.commit_object(obj).unwrap();
        commits += 1;
    }
    // Not before half (a little less: the blocks are predicted larger
    // than the records), and well before the whole.
    assert!(
        (350..600).contains(&commits),
        "txg closed after {commits} commits"
    );
    while pool.txg().last_synced() < txg {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(3),
            "txg {txg} not synced after {:?}",
            start.elapsed()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Sixteen 16 KiB writes: copied into the log (below the in-place size),
/// more than one 128 KiB block holds.
fn log_big_commit(pool: &Pool, obj: u64, fill: u8) -> Vec<(u64, Vec<u8>)> {
    (0..16u64)
        .map(|i| {
            let data = vec![fill.wrapping_add(i as u8); 16 << 10];
            logged_write(pool, obj, i * (16 << 10), &data);
            (i * (16 << 10), data)
        })
        .collect()
}

/// Applies the records import found and ends the replay.
fn replay_writes(pool: &Pool) -> usize {
    let zil = pool.dataset_zil("tank/fs").unwrap();
    let os = pool.dataset_objset("tank/fs").unwrap();
    let h = pool.txg().hold().unwrap();
    let _os = os.hold();
    let recs = zil.take_replay();
    for r in &recs {
        if let LogRecord::Write { obj, offset, data } = &r.record {
            os.write(*obj, *offset, data).unwrap();
        }
    }
    zil.replay_done(h.txg, recs.len() as u64).unwrap();
    recs.len()
}

fn assert_file(pool: &Pool, obj: u64, writes: &[(u64, Vec<u8>)]) {
    let os = pool.dataset_objset("tank/fs").unwrap();
    for (off, data) in writes {
        let mut back = vec![0u8; data.len()];
        os.read(obj, *off, &mut back).unwrap();
        assert!(back == *data, "the write at {off} is not there");
    }
}

/// What a test sees of the log's durable writes: how many are in flight
/// at once (each is held for a millisecond, so overlapping ones are
/// seen), and once `armed`, a failure of those to one place — the first
/// such write any device gets picks it, so every copy of that one log
/// block fails and the other blocks of its commit do not.
#[derive(Default)]
struct LogProbe {
    armed: std::sync::atomic::AtomicBool,
    at: std::sync::Mutex<Option<u64>>,
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl LogProbe {
    fn write(&self, offset: u64, write: &dyn Fn() -> std::io::Result<()>) -> std::io::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.armed.load(SeqCst) && *self.at.lock().unwrap().get_or_insert(offset) == offset {
            return Err(std::io::Error::other("injected log block write error"));
        }
        let n = self.now.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(n, SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(1));
        let r = write();
        self.now.fetch_sub(1, SeqCst);
        r
    }
}

/// A mirror pool of `devs` seen through one probe.
fn create_probed(devs: &[Arc<FaultDevice>]) -> (Arc<Pool>, Arc<LogProbe>) {
    let probe = Arc::new(LogProbe::default());
    let dyns: Vec<Arc<dyn BlockDevice>> = devs
        .iter()
        .map(|d| {
            let probe = probe.clone();
            Arc::new(HookDevice::new(d.clone(), move |_, offset, write| {
                probe.write(offset, write)
            })) as Arc<dyn BlockDevice>
        })
        .collect();
    let pool = Pool::create("tank", common::mirror(&dyns), &[], &[]).unwrap();
    pool.dataset_create("tank/fs", &[]).unwrap();
    (pool, probe)
}

/// A commit bigger than one log block is written as several blocks in
/// one go (their writes in flight together), and every record of it is
/// replayed after a crash.
#[test]
fn a_commit_of_several_blocks_replays_whole() {
    let devs = devices(6);
    let (pool, probe) = create_probed(&devs);
    let obj = new_object(&pool);
    let zil = pool.dataset_zil("tank/fs").unwrap();
    logged_write(&pool, obj, 1 << 20, b"make the chain");
    zil.commit().unwrap();
    let before = zil.stats();
    let writes = log_big_commit(&pool, obj, 1);
    zil.commit().unwrap();
    let after = zil.stats();
    assert_eq!(after.commits, before.commits + 1);
    assert!(
        after.blocks_written >= before.blocks_written + 2,
        "one commit, {} blocks: {after:?}",
        after.blocks_written - before.blocks_written
    );
    // One block alone has its two copies in flight at once.
    assert!(
        probe.most.load(std::sync::atomic::Ordering::SeqCst) > 2,
        "the commit's blocks were written one after the other"
    );
    drop(zil);
    let pool = crash_and_import(pool, &devs);
    assert_eq!(replay_writes(&pool), writes.len());
    assert_file(&pool, obj, &writes);
}

/// One block of a several-block commit fails while the others are
/// written: the commit falls back to the txg (durable, never a bare
/// acknowledgement), the blocks it took are freed, and the log goes on:
/// a later commit is replayed after a crash.
#[test]
fn a_failed_block_of_a_commit_falls_back_to_the_txg_and_leaks_nothing() {
    let devs = devices(7);
    let (pool, probe) = create_probed(&devs);
    let (armed, at) = (&probe.armed, &probe.at);
    let obj = new_object(&pool);
    let zil = pool.dataset_zil("tank/fs").unwrap();
    log_big_commit(&pool, obj, 0);
    zil.commit().unwrap();
    pool.sync().unwrap();
    pool.sync().unwrap();
    let alloc = pool.spa().allocated_deflated();
    let mut writes = Vec::new();
    for round in 1..=4u8 {
        *at.lock().unwrap() = None;
        armed.store(true, std::sync::atomic::Ordering::SeqCst);
        let before = zil.stats();
        let synced = pool.txg().last_synced();
        writes = log_big_commit(&pool, obj, round);
        zil.commit().unwrap();
        armed.store(false, std::sync::atomic::Ordering::SeqCst);
        let after = zil.stats();
        assert_eq!(
            after.fallbacks,
            before.fallbacks + 1,
            "round {round}: {after:?}"
        );
        assert!(
            pool.txg().last_synced() > synced,
            "acknowledged without a txg"
        );
    }
    pool.sync().unwrap();
    pool.sync().unwrap();
    let grown = pool.spa().allocated_deflated().saturating_sub(alloc);
    // Four commits of three blocks: a leak of even one block a commit
    // would be 512 KiB or more.
    assert!(grown < 256 << 10, "log blocks leaked: {grown} bytes");
    assert_file(&pool, obj, &writes);
    // The log works again: the next commit starts a new chain (its
    // header durable with a txg, which takes that commit's records
    // along), and a commit after that is replayed.
    logged_write(&pool, obj, 1 << 20, b"a new chain");
    zil.commit().unwrap();
    let last = log_big_commit(&pool, obj, 100);
    zil.commit().unwrap();
    drop(zil);
    let pool = crash_and_import(pool, &devs);
    assert_eq!(replay_writes(&pool), last.len());
    assert_file(&pool, obj, &last);
}
