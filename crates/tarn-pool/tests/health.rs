//! Device states of a running pool (`tarn_pool::health`): offline refused
//! without replicas, the DTL of what an offline leaf missed recorded at
//! commit and carried through export and import (with the offline state,
//! unless `-t`), a pool opened with a device missing, and zed's fault rule.

mod common;

use std::sync::Arc;

use common::{pool_of, props};

use tarn_format::label::{PoolState, VdevClass};
use tarn_format::BlockPtr;
use tarn_pool::import::import_devices;
use tarn_pool::{BlockStore, NewTop, Spa, TXG_INITIAL};
use tarn_vdev::{BlockDevice, FaultDevice, Layout, LeafState, MemDevice};

const MIB: u64 = 1 << 20;

/// A two-way (or wider) mirror pool over `devs`.
fn mirror(devs: &[Arc<dyn BlockDevice>]) -> Spa {
    pool_of(Layout::Mirror, devs)
}

/// Writes one block in `txg` and commits it with that block as the root.
fn commit(spa: &Spa, txg: u64) -> BlockPtr {
    let root = spa.write(txg, &[txg as u8; 4096], &props()).unwrap();
    spa.commit(txg, root).unwrap();
    root
}

fn leaf_dtl(spa: &Spa, index: usize) -> Vec<(u64, u64)> {
    spa.tops()[0].leaves()[index].dtl().ranges().to_vec()
}

#[test]
fn an_offline_leaf_records_what_it_missed_through_export_and_import() {
    let devs: Vec<Arc<dyn BlockDevice>> = (0..2)
        .map(|_| Arc::new(MemDevice::new(128 * MIB)) as Arc<dyn BlockDevice>)
        .collect();
    let spa = mirror(&devs);
    let g1 = spa.tops()[0].leaves()[1].guid;
    let g0 = spa.tops()[0].leaves()[0].guid;
    commit(&spa, TXG_INITIAL + 1);
    spa.offline(g1, false).unwrap();
    let err = spa.offline(g0, false).unwrap_err();
    assert_eq!(err.to_string(), "no valid replicas");
    let mut roots = Vec::new();
    for txg in TXG_INITIAL + 2..TXG_INITIAL + 5 {
        roots.push(commit(&spa, txg));
    }
    assert_eq!(leaf_dtl(&spa, 1), [(TXG_INITIAL + 2, TXG_INITIAL + 4)]);
    assert!(leaf_dtl(&spa, 0).is_empty());
    // The labels of the online side say leaf 1 is offline, still missing.
    let cfg = &spa.configs()[0];
    assert!(cfg.children[1].offline);
    assert_eq!(cfg.children[1].dtl, [[TXG_INITIAL + 2, u64::MAX]]);
    spa.write_labels(PoolState::Exported, spa.last_synced_txg())
        .unwrap();
    drop(spa);
    let spa = import_devices(&devs).unwrap();
    assert_eq!(spa.leaf_state(g1), Some(LeafState::Offline));
    // The open range is closed at the imported txg.
    assert_eq!(leaf_dtl(&spa, 1), [(TXG_INITIAL + 2, TXG_INITIAL + 4)]);
    // Online keeps the DTL (a resilver empties it); the blocks it missed
    // read back right, the stale copies are not counted as errors.
    spa.online(g1, None).unwrap();
    commit(&spa, TXG_INITIAL + 5);
    assert_eq!(leaf_dtl(&spa, 1), [(TXG_INITIAL + 2, TXG_INITIAL + 4)]);
    for (i, bp) in roots.iter().enumerate() {
        let want = [(TXG_INITIAL + 2 + i as u64) as u8; 4096];
        assert!(spa.read(bp).unwrap() == want);
    }
    assert_eq!(
        spa.tops()[0].leaves()[1]
            .stats
            .checksum_errors
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    // Still not a full replica: side 0 cannot go.
    assert_eq!(
        spa.offline(g0, true).unwrap_err().to_string(),
        "no valid replicas"
    );
    // Temporary offline is not in the labels.
    spa.offline(g1, true).unwrap();
    assert!(!spa.configs()[0].children[1].offline);
}

#[test]
fn a_pool_opens_with_a_missing_side_but_not_without_replicas() {
    let devs: Vec<Arc<dyn BlockDevice>> = (0..2)
        .map(|_| Arc::new(MemDevice::new(128 * MIB)) as Arc<dyn BlockDevice>)
        .collect();
    let spa = mirror(&devs);
    let root = commit(&spa, TXG_INITIAL + 1);
    let asize = spa.tops()[0].asize();
    spa.write_labels(PoolState::Exported, spa.last_synced_txg())
        .unwrap();
    drop(spa);
    let spa = import_devices(&devs[..1]).unwrap();
    let top = spa.tops()[0].clone();
    assert_eq!(top.leaves()[1].state(), LeafState::Unavail);
    assert_eq!(top.asize(), asize, "the stand-in keeps the geometry");
    assert!(spa.read(&root).unwrap() == [(TXG_INITIAL + 1) as u8; 4096]);
    commit(&spa, TXG_INITIAL + 2);
    assert_eq!(leaf_dtl(&spa, 1), [(TXG_INITIAL + 2, TXG_INITIAL + 2)]);
    drop(spa);
    // A single device pool with its device gone cannot open.
    let one: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(128 * MIB));
    let top = NewTop {
        layout: Layout::Single,
        class: VdevClass::Normal,
        ashift: 12,
        leaves: vec![("s".into(), one.clone(), false)],
    };
    let spa = Spa::create("lone", vec![top]).unwrap();
    let configs = spa.configs();
    drop(spa);
    let err = Spa::open("lone", 1, configs, &|_| None).err().unwrap();
    assert!(err.to_string().contains("insufficient replicas"), "{err}");
}

#[test]
fn a_leaf_failing_io_is_faulted_after_the_threshold_and_cleared() {
    let fault = Arc::new(FaultDevice::new(Arc::new(MemDevice::new(128 * MIB)), 7));
    let devs: Vec<Arc<dyn BlockDevice>> = vec![Arc::new(MemDevice::new(128 * MIB)), fault.clone()];
    let spa = mirror(&devs);
    fault.fail_after_writes(0);
    let mut txg = TXG_INITIAL + 1;
    while spa.tops()[0].leaves()[1].state() != LeafState::Faulted {
        assert!(txg < TXG_INITIAL + 40, "never faulted");
        commit(&spa, txg);
        txg += 1;
    }
    let errors = spa.tops()[0].leaves()[1].io_errors_within(std::time::Duration::from_secs(600));
    assert!(
        errors > tarn_pool::tunables::FAULT_IO_ERRORS_MAX,
        "{errors}"
    );
    // The last side is never faulted, only degraded.
    assert!(spa.tops()[0].leaves()[0].is_available());
    fault.heal();
    spa.clear(None).unwrap();
    assert_eq!(spa.tops()[0].leaves()[1].state(), LeafState::Online);
    commit(&spa, txg);
}

/// A configuration tree tarn never writes (damaged or crafted labels) is
/// refused at open with a reason, never a panic later.
#[test]
fn malformed_vdev_trees_are_refused_at_open() {
    use tarn_format::label::{VdevConfig, VdevKind};
    let devs: Vec<Arc<dyn BlockDevice>> = (0..2)
        .map(|_| Arc::new(MemDevice::new(128 * MIB)) as Arc<dyn BlockDevice>)
        .collect();
    let spa = mirror(&devs);
    commit(&spa, TXG_INITIAL + 1);
    let (guid, good) = (spa.guid(), spa.configs()[0].clone());
    let leaf_guids: Vec<u64> = good.children.iter().map(|c| c.guid).collect();
    drop(spa);
    let device = |cfg: &VdevConfig| -> Option<Arc<dyn BlockDevice>> {
        let i = leaf_guids.iter().position(|&g| g == cfg.guid)?;
        Some(devs[i].clone())
    };
    let one_child_pair = {
        let mut c = good.clone();
        let leaf = c.children[1].clone();
        c.children[1] = VdevConfig {
            kind: VdevKind::Replacing,
            children: vec![leaf.clone()],
            ..leaf
        };
        c
    };
    let leaf_with_children = {
        let mut c = good.clone();
        let leaf = c.children[1].clone();
        c.children[0].children = vec![leaf];
        c
    };
    let three_way_spare = VdevConfig {
        kind: VdevKind::Spare,
        children: vec![
            good.children[0].clone(),
            good.children[1].clone(),
            good.children[1].clone(),
        ],
        ..good.clone()
    };
    let nested_mirror = {
        let mut c = good.clone();
        let inner = good.clone();
        c.children[1] = inner;
        c
    };
    for (what, cfg) in [
        ("one-child pair", one_child_pair),
        ("leaf with children", leaf_with_children),
        ("three-way spare", three_way_spare),
        ("mirror in a mirror", nested_mirror),
    ] {
        match Spa::open("tank", guid, vec![cfg], &device) {
            Ok(_) => panic!("{what}: opened"),
            Err(e) => assert!(e.to_string().contains("malformed"), "{what}: {e}"),
        }
    }
    // The tree as written still opens.
    Spa::open("tank", guid, vec![good], &device).unwrap();
}
