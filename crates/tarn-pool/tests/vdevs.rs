//! Top-level vdevs changing while the pool runs (`tarn_pool::vdevs`):
//! added ones take allocations only once their config is durable and
//! survive import; a log vdev drains, leaves a hole and forgets the pool;
//! a failing log device is faulted without stopping commits; a mirror
//! child is detached; a log block in a hole of a file vdev has the space
//! after it written first.

mod common;

use std::sync::Arc;

use common::props;

use tarn_format::label::{PoolState, VdevClass, VdevKind};
use tarn_format::zil::LogPtr;
use tarn_format::BlockPtr;
use tarn_pool::import::import_devices;
use tarn_pool::{BlockStore, LogStore, NewTop, Spa, TXG_INITIAL};
use tarn_vdev::{BlockDevice, FaultDevice, FileDevice, Layout, LeafState, MemDevice};

const MIB: u64 = 1 << 20;

fn mem(size: u64) -> Arc<dyn BlockDevice> {
    Arc::new(MemDevice::new(size))
}

fn top(class: VdevClass, layout: Layout, devs: &[(&str, &Arc<dyn BlockDevice>)]) -> NewTop {
    NewTop {
        layout,
        class,
        ashift: 12,
        leaves: devs
            .iter()
            .map(|(name, d)| (name.to_string(), Arc::clone(d), false))
            .collect(),
    }
}

fn single(class: VdevClass, name: &str, dev: &Arc<dyn BlockDevice>) -> NewTop {
    top(class, Layout::Single, &[(name, dev)])
}

/// A pool of data device `d0` and log device `log`.
fn with_log(d0: &Arc<dyn BlockDevice>, log: &Arc<dyn BlockDevice>) -> Spa {
    let tops = vec![
        single(VdevClass::Normal, "d0", d0),
        single(VdevClass::Log, "log", log),
    ];
    Spa::create("tank", tops).unwrap()
}

fn block(i: u64) -> Vec<u8> {
    (0..64 << 10)
        .map(|j: u64| (i.wrapping_mul(131) ^ j.wrapping_mul(2654435761) >> 9) as u8)
        .collect()
}

/// Commits `txg` with a small root block.
fn commit(spa: &Spa, txg: u64) {
    let root = spa.write(txg, &[7u8; 512], &props()).unwrap();
    spa.commit(txg, root).unwrap();
}

/// Writes `n` blocks in `txg`, numbered from `first`.
fn write_blocks(spa: &Spa, txg: u64, first: u64, n: u64) -> Vec<(u64, BlockPtr)> {
    (first..first + n)
        .map(|i| (i, spa.write(txg, &block(i), &props()).unwrap()))
        .collect()
}

fn check_blocks(spa: &Spa, live: &[(u64, BlockPtr)]) {
    for (i, bp) in live {
        assert!(spa.read(bp).unwrap() == block(*i), "block {i}");
    }
}

fn has_labels(dev: &Arc<dyn BlockDevice>) -> bool {
    tarn_vdev::read_labels(dev.as_ref())
        .iter()
        .any(|l| l.is_ok())
}

#[test]
fn added_vdevs_allocate_once_durable_and_survive_import() {
    let data0 = mem(256 * MIB);
    let (log, data1) = (mem(128 * MIB), mem(256 * MIB));
    let spa = Spa::create("tank", vec![single(VdevClass::Normal, "d0", &data0)]).unwrap();
    let mut live = write_blocks(&spa, TXG_INITIAL, 0, 8);
    commit(&spa, TXG_INITIAL);

    let ids = spa
        .add_tops(vec![
            single(VdevClass::Log, "log", &log),
            single(VdevClass::Normal, "d1", &data1),
        ])
        .unwrap();
    assert_eq!(ids, vec![1, 2]);
    assert_eq!(spa.configs().len(), 3);
    // Not durable yet: nothing may land on the new vdevs.
    let txg = TXG_INITIAL + 1;
    let early = spa.log_alloc(txg, 8192).unwrap();
    assert_eq!(early.vdev, 0, "a log block went to a vdev not yet durable");
    live.extend(write_blocks(&spa, txg, 100, 64));
    assert!(live.iter().all(|(_, bp)| bp.dvas[0].vdev == 0));
    // A crash now: the new devices carry no label, the pool is as it was.
    assert!(!has_labels(&log) && !has_labels(&data1));
    let crashed = import_devices(&[data0.clone(), log.clone(), data1.clone()]).unwrap();
    assert_eq!(crashed.configs().len(), 1);
    drop(crashed);

    spa.log_free(txg, &early);
    commit(&spa, txg);
    assert!(has_labels(&log) && has_labels(&data1));
    let txg = txg + 1;
    assert_eq!(spa.log_alloc(txg, 8192).unwrap().vdev, 1, "the SLOG");
    live.extend(write_blocks(&spa, txg, 200, 64));
    assert!(
        live.iter().any(|(_, bp)| bp.dvas[0].vdev == 2),
        "data never reached the added vdev"
    );
    commit(&spa, txg);
    check_blocks(&spa, &live);
    drop(spa);

    let spa = import_devices(&[data0, log, data1]).unwrap();
    let configs = spa.configs();
    let classes: Vec<(u64, VdevClass)> = configs.iter().map(|c| (c.id, c.class)).collect();
    assert_eq!(
        classes,
        vec![
            (0, VdevClass::Normal),
            (1, VdevClass::Log),
            (2, VdevClass::Normal)
        ]
    );
    check_blocks(&spa, &live);
}

/// Allocates and writes `n` log blocks in `txg`.
fn log_blocks(spa: &Spa, txg: u64, n: usize) -> Vec<LogPtr> {
    (0..n)
        .map(|i| {
            let at = spa.log_alloc(txg, 8192).unwrap();
            spa.log_write(&at, &vec![i as u8; 8192]).unwrap();
            at
        })
        .collect()
}

#[test]
fn a_removed_log_drains_leaves_a_hole_and_forgets_the_pool() {
    let (d0, log, d2) = (mem(256 * MIB), mem(128 * MIB), mem(256 * MIB));
    let spa = Spa::create(
        "tank",
        vec![
            single(VdevClass::Normal, "d0", &d0),
            single(VdevClass::Log, "log", &log),
            single(VdevClass::Normal, "d2", &d2),
        ],
    )
    .unwrap();
    let mut txg = TXG_INITIAL;
    let live = write_blocks(&spa, txg, 0, 64);
    let chain = log_blocks(&spa, txg, 4);
    assert!(chain.iter().all(|b| b.vdev == 1));
    commit(&spa, txg);

    // Data vdevs cannot leave.
    let err = spa.start_log_removal(0).unwrap_err().to_string();
    assert!(err.contains("only log devices can be removed"), "{err}");

    spa.start_log_removal(1).unwrap();
    txg += 1;
    let moved = spa.log_alloc(txg, 8192).unwrap();
    assert_ne!(moved.vdev, 1, "allocated on a vdev being removed");
    // Still holding the chain: not yet.
    let err = spa.finish_log_removal(1).unwrap_err().to_string();
    assert!(err.contains("still holds"), "{err}");
    // The log frees its blocks with the txg that makes them useless; they
    // are free once that txg is durable.
    for b in &chain {
        spa.log_free(txg, b);
    }
    commit(&spa, txg);
    assert_eq!(spa.vdev_space(1).unwrap().1, 0);
    spa.finish_log_removal(1).unwrap();
    assert_eq!(spa.configs().len(), 2);
    assert!(
        has_labels(&log),
        "labels go only once the removal is durable"
    );
    txg += 1;
    commit(&spa, txg);
    assert!(!has_labels(&log), "the removed device still names the pool");
    check_blocks(&spa, &live);

    // A new log takes a new id: DVAs name vdevs by id, and 1 is a hole.
    let log2 = mem(128 * MIB);
    assert_eq!(
        spa.add_tops(vec![single(VdevClass::Log, "log2", &log2)])
            .unwrap(),
        vec![3]
    );
    txg += 1;
    commit(&spa, txg);
    txg += 1;
    assert_eq!(spa.log_alloc(txg, 8192).unwrap().vdev, 3);
    commit(&spa, txg);
    drop(spa);

    // The old device, found with the others, is not part of the pool; the
    // hole is not a missing device.
    let spa = import_devices(&[d0, log, d2, log2]).unwrap();
    let ids: Vec<u64> = spa.configs().iter().map(|c| c.id).collect();
    assert_eq!(ids, vec![0, 2, 3]);
    check_blocks(&spa, &live);
}

#[test]
fn a_failing_log_device_is_faulted_and_commits_go_on() {
    let d0 = mem(256 * MIB);
    let fault = Arc::new(FaultDevice::new(Arc::new(MemDevice::new(128 * MIB)), 7));
    let log: Arc<dyn BlockDevice> = fault.clone();
    let spa = with_log(&d0, &log);
    assert!(spa.has_log_devices());
    let txg = TXG_INITIAL;
    let at = spa.log_alloc(txg, 8192).unwrap();
    assert_eq!(at.vdev, 1);
    fault.set_fail_writes(true);
    assert!(spa.log_write(&at, &[1u8; 8192]).is_err());
    assert!(spa.vdev_faulted(1));
    assert!(!spa.has_log_devices());
    let leaf_state = spa.tops()[1].leaves()[0].state();
    assert_eq!(leaf_state, LeafState::Faulted);
    // The log moves to the data vdev; commits neither flush the dead
    // device nor need its uberblocks.
    assert_eq!(spa.log_alloc(txg, 8192).unwrap().vdev, 0);
    spa.log_free(txg, &at);
    let live = write_blocks(&spa, txg, 0, 16);
    commit(&spa, txg);
    commit(&spa, txg + 1);
    spa.write_labels(PoolState::Exported, txg + 1).unwrap();
    check_blocks(&spa, &live);
    // Removing the faulted log works as for a healthy one.
    spa.start_log_removal(1).unwrap();
    spa.cancel_log_removal(1);
    assert_eq!(
        spa.log_alloc(txg + 2, 8192).unwrap().vdev,
        0,
        "still faulted"
    );
}

#[test]
fn detaching_mirror_children() {
    let (a, b, c) = (mem(128 * MIB), mem(128 * MIB), mem(128 * MIB));
    let spa = Spa::create(
        "tank",
        vec![top(
            VdevClass::Normal,
            Layout::Mirror,
            &[("a", &a), ("b", &b), ("c", &c)],
        )],
    )
    .unwrap();
    let mut txg = TXG_INITIAL;
    let mut live = write_blocks(&spa, txg, 0, 32);
    commit(&spa, txg);
    let guid = |i: usize| spa.configs()[0].children[i].guid;

    let c_guid = guid(2);
    spa.detach(c_guid).unwrap();
    assert_eq!(spa.configs()[0].children.len(), 2);
    txg += 1;
    live.extend(write_blocks(&spa, txg, 100, 8));
    commit(&spa, txg);
    assert!(!has_labels(&c));

    // From a 2-way mirror: what is left is a plain disk in its place.
    spa.detach(guid(1)).unwrap();
    let cfg = spa.configs()[0].clone();
    assert_eq!(
        (cfg.kind, cfg.id, cfg.children.len()),
        (VdevKind::File, 0, 0)
    );
    txg += 1;
    live.extend(write_blocks(&spa, txg, 200, 8));
    commit(&spa, txg);
    // A single device is no mirror.
    let err = spa.detach(cfg.guid).unwrap_err().to_string();
    assert_eq!(err, "only applicable to mirror and replacing vdevs");
    check_blocks(&spa, &live);
    drop(spa);

    let spa = import_devices(&[a, b, c]).unwrap();
    assert_eq!(spa.configs()[0].kind, VdevKind::File);
    check_blocks(&spa, &live);
}

/// Every label lists the log vdevs' trees: with the log device gone, the
/// data device alone describes the whole pool, which opens with the log
/// faulted (the engine asks for `zpool import -m` first) and its blocks
/// readable, the intent log on the data vdev.
#[test]
fn a_pool_opens_without_its_log_device_from_the_labels_alone() {
    let d0 = mem(256 * MIB);
    let log = mem(128 * MIB);
    let spa = with_log(&d0, &log);
    let txg = TXG_INITIAL + 1;
    let live = write_blocks(&spa, txg, 0, 8);
    commit(&spa, txg);
    spa.write_labels(PoolState::Exported, txg).unwrap();
    drop(spa);
    let labels: Vec<_> = tarn_vdev::read_labels(d0.as_ref())
        .into_iter()
        .map(|r| r.map_err(|e| e.to_string()))
        .collect();
    let label = tarn_pool::import::best_label(labels).unwrap();
    assert_eq!(label.logs.len(), 1, "the data device's label lists the log");
    let found = tarn_pool::import::assemble(&[(0, label)]);
    assert_eq!(found[0].missing_logs, [1]);
    assert!(found[0].missing_tops().is_empty());
    let spa = import_devices(&[d0]).unwrap();
    assert!(spa.vdev_faulted(1));
    assert!(!spa.has_log_devices());
    check_blocks(&spa, &live);
    assert_eq!(spa.log_alloc(txg + 1, 8192).unwrap().vdev, 0);
}

#[test]
fn a_log_block_in_a_file_hole_has_the_space_after_it_written_first() {
    use tarn_format::label::VDEV_LABEL_START_SIZE as START;
    use tarn_pool::tunables::LOG_PREWRITE_BYTES;
    // In the build directory: not tmpfs, whose holes are not looked at.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let devs: Vec<Arc<dyn BlockDevice>> = ["a", "b"]
        .iter()
        .map(|n| {
            let p = dir.path().join(n);
            std::fs::File::create(&p)
                .unwrap()
                .set_len(256 * MIB)
                .unwrap();
            Arc::new(FileDevice::open(&p).unwrap()) as _
        })
        .collect();
    let spa = Spa::create(
        "tank",
        vec![top(
            VdevClass::Normal,
            Layout::Mirror,
            &[("a", &devs[0]), ("b", &devs[1])],
        )],
    )
    .unwrap();
    commit(&spa, TXG_INITIAL);
    let txg = TXG_INITIAL + 1;
    let allocated = spa.vdev_space(0).unwrap().1;
    let first = spa.log_alloc(txg, 8192).unwrap();
    for d in &devs {
        assert!(
            !d.has_hole(START + first.offset, LOG_PREWRITE_BYTES),
            "the space after a log block in a hole was not written"
        );
        assert!(d.has_hole(START + first.offset + LOG_PREWRITE_BYTES, 64 << 10));
    }
    // Written, not kept: the reservation is gone and the next log block
    // takes the place right after the first.
    assert_eq!(spa.vdev_space(0).unwrap().1, allocated + 8192);
    let next = spa.log_alloc(txg, 8192).unwrap();
    assert_eq!(next.offset, first.offset + 8192);
    // A block device, or memory, has no holes: nothing is written ahead.
    let m = mem(256 * MIB);
    assert!(!m.has_hole(0, MIB));
    spa.log_free(txg, &first);
    spa.log_free(txg, &next);
    commit(&spa, txg);
}

/// The log blocks of one txg on a log device ask for that txg's sync (the
/// only thing that frees them) once they take as much as is still free:
/// half the device when nothing else is on it, sooner while an earlier
/// txg's blocks are still there; a txg with no blocks never asks, and
/// blocks on the data vdevs do not count.
#[test]
fn a_txg_whose_log_blocks_match_the_free_log_space_asks_for_its_sync() {
    let (d0, log) = (mem(256 * MIB), mem(64 * MIB));
    let spa = with_log(&d0, &log);
    let txg = TXG_INITIAL;
    let size = spa.vdev_space(1).unwrap().0;
    let block: u64 = 128 << 10;
    // Fills `txg` with blocks until it asks; returns the bytes it took.
    let fill = |txg: u64, free: u64| -> u64 {
        let mut own = 0;
        while own + block < free / 2 {
            let at = spa.log_alloc(txg, block as u32).unwrap();
            assert_eq!(at.vdev, 1, "on the log device");
            own += block;
            assert!(!spa.log_txg_full(txg), "full at {own} of {free} free");
        }
        spa.log_alloc(txg, block as u32).unwrap();
        spa.log_alloc(txg, block as u32).unwrap();
        assert!(
            spa.log_txg_full(txg),
            "not full at {} of {free} free",
            own + 2 * block
        );
        own + 2 * block
    };
    let first = fill(txg, size);
    assert!(!spa.log_txg_full(txg + 1), "a txg without log blocks");
    // The first txg's blocks are still allocated: the next asks sooner.
    let second = fill(txg + 1, size - first);
    assert!(second < first * 3 / 4, "{second} bytes, after {first}");

    // Without a log device the log lives in the pool: never "full".
    let plain = Spa::create(
        "plain",
        vec![single(VdevClass::Normal, "d", &mem(256 * MIB))],
    )
    .unwrap();
    for _ in 0..256 {
        plain.log_alloc(txg, block as u32).unwrap();
    }
    assert!(!plain.log_txg_full(txg));
}
