//! Replacing and spare pairs (`tarn_pool::spares`): a raidz member being
//! replaced serves until its replacement is complete, so the vdev keeps
//! its full redundancy meanwhile; a spare stands in for a faulted member;
//! pairs survive export and import and end as `zpool detach` says.

mod common;

use std::sync::Arc;

use common::{pool_of, props};

use tarn_format::label::{PoolState, VdevKind};
use tarn_format::BlockPtr;
use tarn_pool::import::import_devices;
use tarn_pool::{BlockStore, Spa, TXG_INITIAL};
use tarn_vdev::{BlockDevice, Layout, MemDevice};

const MIB: u64 = 1 << 20;

fn devices(n: usize) -> Vec<Arc<dyn BlockDevice>> {
    (0..n)
        .map(|_| Arc::new(MemDevice::new(128 * MIB)) as Arc<dyn BlockDevice>)
        .collect()
}

fn raidz1(devs: &[Arc<dyn BlockDevice>]) -> Spa {
    pool_of(Layout::Raidz { nparity: 1 }, devs)
}

fn block(txg: u64, i: u64) -> Vec<u8> {
    (0..128 << 10)
        .map(|j| (txg * 31 + i * 7 + j) as u8)
        .collect()
}

/// Writes 8 blocks in `txg`, commits, and returns them with their data.
fn fill(spa: &Spa, txg: u64) -> Vec<(BlockPtr, Vec<u8>)> {
    let blocks: Vec<(BlockPtr, Vec<u8>)> = (0..8)
        .map(|i| {
            let data = block(txg, i);
            (spa.write(txg, &data, &props()).unwrap(), data)
        })
        .collect();
    spa.commit(txg, blocks[0].0).unwrap();
    blocks
}

fn check(spa: &Spa, blocks: &[(BlockPtr, Vec<u8>)]) {
    for (bp, data) in blocks {
        assert!(spa.read(bp).unwrap() == *data, "a block reads back wrong");
    }
}

fn guid(spa: &Spa, i: usize) -> u64 {
    spa.tops()[0].leaves()[i].guid
}

#[test]
fn a_raidz_member_being_replaced_serves_until_the_new_one_is_complete() {
    let devs = devices(4);
    let spa = raidz1(&devs[..3]);
    let old = fill(&spa, TXG_INITIAL + 1);
    let (a, c) = (guid(&spa, 0), guid(&spa, 2));
    let new = spa.replace(c, "n", devs[3].clone(), false).unwrap();
    let cfg = &spa.configs()[0];
    assert_eq!(cfg.children.len(), 3, "still three positions");
    let pair = &cfg.children[2];
    assert_eq!((pair.kind, pair.id), (VdevKind::Replacing, 2));
    assert_eq!([pair.children[0].guid, pair.children[1].guid], [c, new]);
    assert_eq!(spa.tops()[0].width(), 3);
    // Writes reach both; the new device is not resilvered yet, so the old
    // one is what makes the column: a can go offline and every block —
    // old and new — still reads back.
    let newer = fill(&spa, TXG_INITIAL + 2);
    spa.offline(a, true).unwrap();
    check(&spa, &old);
    check(&spa, &newer);
    // Detaching the old member now would leave two columns missing.
    assert_eq!(spa.detach(c).unwrap_err().to_string(), "no valid replicas");
    spa.online(a, None).unwrap();
    // The pair survives export and import.
    spa.write_labels(PoolState::Exported, spa.last_synced_txg())
        .unwrap();
    drop(spa);
    let spa = import_devices(&devs).unwrap();
    assert_eq!(spa.configs()[0].children[2].kind, VdevKind::Replacing);
    check(&spa, &old);
    // Once the new device is complete, the pair ends with it alone.
    for (bp, _) in old.iter().chain(&newer) {
        spa.scrub_blocks(&[*bp]);
    }
    spa.resilver_done(new);
    assert_eq!(spa.finish_pairs(), [c]);
    let cfg = &spa.configs()[0];
    assert_eq!(cfg.children[2].guid, new);
    assert_eq!(cfg.children[2].id, 2);
    assert!(cfg.children[2].is_leaf());
    spa.offline(a, true).unwrap();
    check(&spa, &old);
    check(&spa, &newer);
}

#[test]
fn a_spare_stands_in_and_detaching_it_or_the_original_ends_the_pair() {
    let devs = devices(5);
    let spa = raidz1(&devs[..3]);
    let blocks = fill(&spa, TXG_INITIAL + 1);
    let spares = spa
        .add_spares(vec![
            ("s1".into(), devs[3].clone(), false),
            ("s2".into(), devs[4].clone(), false),
        ])
        .unwrap();
    fill(&spa, TXG_INITIAL + 2);
    let b = guid(&spa, 1);
    assert_eq!(spa.activate_spare(b).unwrap(), Some(spares[0]));
    // One spare per device.
    assert_eq!(spa.activate_spare(b).unwrap(), None);
    let states: Vec<&str> = spa.spares_status().iter().map(|s| s.state).collect();
    assert_eq!(states, ["INUSE", "AVAIL"]);
    let pair = &spa.configs()[0].children[1];
    assert_eq!(pair.kind, VdevKind::Spare);
    check(&spa, &blocks);
    // Detaching the spare returns it.
    spa.detach(spares[0]).unwrap();
    assert!(spa.configs()[0].children[1].is_leaf());
    let states: Vec<&str> = spa.spares_status().iter().map(|s| s.state).collect();
    assert_eq!(states, ["AVAIL", "AVAIL"]);
    // Detaching the original keeps the spare, which leaves the spares.
    assert!(spa.use_spare(b, spares[1]).unwrap());
    for (bp, _) in &blocks {
        spa.scrub_blocks(&[*bp]);
    }
    spa.resilver_done(spares[1]);
    // Put in by hand for a healthy device: the resilver does not end it.
    assert!(spa.finish_pairs().is_empty());
    spa.detach(b).unwrap();
    assert_eq!(spa.configs()[0].children[1].guid, spares[1]);
    assert_eq!(spa.spares_status().len(), 1);
    spa.commit(TXG_INITIAL + 3, blocks[0].0).unwrap();
    spa.write_labels(PoolState::Exported, TXG_INITIAL + 3)
        .unwrap();
    drop(spa);
    let spa = import_devices(&devs).unwrap();
    assert_eq!(spa.spares_status().len(), 1);
    assert_eq!(spa.spares_status()[0].state, "AVAIL");
    check(&spa, &blocks);
}
