use super::*;
use crate::{FaultDevice, MemDevice};
use std::sync::Arc;
use tarn_format::label::{PoolState, VdevClass, VdevConfig, VdevKind};

fn cfg(txg: u64) -> LabelConfig {
    LabelConfig {
        version: 1,
        name: "tank".into(),
        pool_guid: 77,
        state: PoolState::Active,
        txg,
        hostname: "host".into(),
        guid: 5,
        top_guid: 5,
        vdev_children: 1,
        vdev_tree: VdevConfig {
            kind: VdevKind::File,
            id: 0,
            guid: 5,
            path: Some("/d0".into()),
            ashift: 12,
            asize: 1 << 26,
            metaslab_shift: 24,
            class: VdevClass::Normal,
            create_txg: 4,
            children: vec![],
            offline: false,
            faulted: false,
            dtl: vec![],
        },
        features_for_read: vec![],
        holes: vec![],
        spares: vec![],
        logs: vec![],
    }
}

const SIZE: u64 = (64 << 20) + 12345;

fn damage(dev: &dyn BlockDevice, label: usize) {
    let lo = label_offset(label, osize(dev.size()));
    dev.write_at(&[0xab; 100], lo + LABEL_OFF_CONFIG + 60)
        .unwrap();
}

#[test]
fn labels_round_trip_and_survive_damage() {
    let dev = MemDevice::new(SIZE);
    write_labels(&dev, &cfg(3)).unwrap();
    let all = read_labels(&dev);
    assert_eq!(all.len(), 4);
    assert!(all.iter().all(|l| l.as_ref().unwrap() == &cfg(3)));
    for (n, l) in [0usize, 3, 1].into_iter().enumerate() {
        damage(&dev, l);
        let got = read_labels(&dev);
        assert_eq!(got.iter().filter(|r| r.is_ok()).count(), 3 - n);
        assert!(matches!(got[l], Err(VdevError::Corrupted(_))));
        let good = got.into_iter().find_map(Result::ok).unwrap();
        assert_eq!(good, cfg(3));
    }
    write_label_config(&dev, 0, &cfg(9)).unwrap();
    assert_eq!(read_labels(&dev)[0].as_ref().unwrap().txg, 9);
    assert!(write_label_config(&dev, 4, &cfg(9)).is_err());
    clear_labels(&dev).unwrap();
    assert!(read_labels(&dev).iter().all(Result::is_err));
}

#[test]
fn a_config_in_the_wrong_label_is_rejected() {
    let dev = MemDevice::new(SIZE);
    write_labels(&dev, &cfg(3)).unwrap();
    let os = osize(SIZE);
    let mut b = vec![0u8; LABEL_CONFIG_SIZE as usize];
    dev.read_at(&mut b, LABEL_OFF_CONFIG).unwrap();
    dev.write_at(&b, label_offset(2, os) + LABEL_OFF_CONFIG)
        .unwrap();
    let got = read_labels(&dev);
    assert!(got[0].is_ok() && got[2].is_err());
}

#[test]
fn crash_during_label_update_leaves_a_valid_pair() {
    for seed in tarn_testkit::seeds(0, 50) {
        let mem = Arc::new(MemDevice::new(SIZE));
        let dev = FaultDevice::new(mem, seed);
        write_labels(&dev, &cfg(3)).unwrap();
        // Crash after the first pair was written and flushed, mid second.
        dev.fail_after_writes(3);
        assert!(write_labels(&dev, &cfg(8)).is_err());
        dev.crash();
        dev.heal();
        let got: Vec<u64> = read_labels(&dev)
            .into_iter()
            .flatten()
            .map(|c| c.txg)
            .collect();
        assert!(got.len() >= 2, "seed {seed}: {got:?}");
        assert!(got.iter().all(|&t| t == 3 || t == 8));
    }
}

#[test]
fn tiny_devices_are_errors_not_panics() {
    let dev = MemDevice::new(1 << 20);
    assert!(read_labels(&dev)
        .iter()
        .all(|r| matches!(r, Err(VdevError::TooSmall { .. }))));
    assert!(read_uberblocks(&dev, 12).is_empty());
    assert!(matches!(
        write_labels(&dev, &cfg(1)),
        Err(VdevError::TooSmall { .. })
    ));
}

#[test]
fn uberblock_ring_keeps_the_last_slots() {
    let dev = MemDevice::new(SIZE);
    for txg in 1..=40 {
        write_uberblock(&dev, 12, &Uberblock::new(txg, 1, 1000 + txg)).unwrap();
    }
    let ubs = read_uberblocks(&dev, 12);
    // 32 slots per label at ashift 12: txgs 9..=40, in each of 4 labels.
    assert_eq!(ubs.len(), 4 * 32);
    assert!(ubs.iter().all(|u| (9..=40).contains(&u.txg)));
    let best = ubs.iter().max_by_key(|u| (u.txg, u.timestamp)).unwrap();
    assert_eq!(best.txg, 40);
    // At ashift 9 the ring has 128 slots.
    let dev9 = MemDevice::new(SIZE);
    write_uberblock(&dev9, 9, &Uberblock::new(200, 1, 1)).unwrap();
    assert_eq!(read_uberblocks(&dev9, 9).len(), 4);
}

#[test]
fn torn_and_misplaced_uberblocks_are_ignored() {
    let dev = MemDevice::new(SIZE);
    let os = osize(SIZE);
    write_uberblock(&dev, 12, &Uberblock::new(7, 1, 1)).unwrap();
    write_uberblock(&dev, 12, &Uberblock::new(8, 1, 1)).unwrap();
    // Tear txg 8's slot in label 0: only its first sector persisted.
    let off = uberblock_offset(0, os, 12, 8);
    dev.write_at(&[0u8; 512], off + 512).unwrap();
    // Copy txg 7's slot over txg 9's slot in label 1 (misdirected write).
    let mut slot = vec![0u8; 4096];
    dev.read_at(&mut slot, uberblock_offset(1, os, 12, 7))
        .unwrap();
    dev.write_at(&slot, uberblock_offset(1, os, 12, 9)).unwrap();
    let ubs = read_uberblocks(&dev, 12);
    assert_eq!(ubs.iter().filter(|u| u.txg == 8).count(), 3);
    assert_eq!(ubs.iter().filter(|u| u.txg == 7).count(), 4);
    assert_eq!(ubs.len(), 7);
}

#[test]
fn crash_while_writing_an_uberblock_never_yields_garbage() {
    for seed in tarn_testkit::seeds(0, 100) {
        let dev = FaultDevice::new(Arc::new(MemDevice::new(SIZE)), seed);
        write_uberblock(&dev, 12, &Uberblock::new(5, 1, 1)).unwrap();
        dev.flush().unwrap();
        write_uberblock(&dev, 12, &Uberblock::new(6, 1, 2)).unwrap();
        dev.crash();
        let ubs = read_uberblocks(&dev, 12);
        assert_eq!(ubs.iter().filter(|u| u.txg == 5).count(), 4, "seed {seed}");
        assert!(ubs
            .iter()
            .all(|u| *u == Uberblock::new(5, 1, 1) || *u == Uberblock::new(6, 1, 2)));
    }
}
