//! TopVdev through its public API: raidz maps for every parity and width,
//! reconstruction and self-healing under silent damage and failing devices,
//! mirrors, single devices, space accounting against OpenZFS's formulas.

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tarn_format::label::VDEV_LABEL_START_SIZE;
use tarn_vdev::top::psize_to_asize;
use tarn_vdev::{
    BlockDevice, FaultDevice, HookDevice, Layout, Leaf, MemDevice, TopVdev, VdevError,
    SCRUB_AGGREGATE_BYTES,
};

const CHILD: u64 = 8 << 20;

fn fnv(d: &[u8]) -> u64 {
    d.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn build(layout: Layout, ashift: u8, devs: &[Arc<dyn BlockDevice>]) -> TopVdev {
    let leaves = devs
        .iter()
        .enumerate()
        .map(|(i, d)| Leaf::new(100 + i as u64, format!("d{i}"), d.clone()))
        .collect();
    TopVdev::new(0, 1, ashift, layout, leaves).unwrap()
}

fn mems(n: usize) -> Vec<Arc<dyn BlockDevice>> {
    (0..n)
        .map(|_| Arc::new(MemDevice::new(CHILD)) as Arc<dyn BlockDevice>)
        .collect()
}

fn random_bytes(rng: &mut ChaCha8Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    v
}

/// A written block: where it is and what it must read back as.
struct Block {
    offset: u64,
    data: Vec<u8>,
}

/// Writes blocks of assorted sizes back to back, plus one past 1 MiB.
fn write_blocks(v: &TopVdev, seed: u64) -> Vec<Block> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let unit = 1u64 << v.ashift();
    let mut sizes: Vec<u64> = vec![512, 1024, 3584, 4096, 8192, 12288, 65536, 131072];
    sizes.extend((0..6).map(|_| rng.random_range(1..=160u64) * 512));
    let mut offset = unit * rng.random_range(0..7u64);
    let mut out = Vec::new();
    for (i, psize) in sizes.into_iter().enumerate() {
        if i == 5 {
            offset = offset.max(1 << 20).next_multiple_of(unit);
        }
        let data = random_bytes(&mut rng, psize as usize);
        v.write(offset, &data).unwrap();
        out.push(Block { offset, data });
        offset += v.psize_to_asize(psize);
    }
    out
}

fn read_ok(v: &TopVdev, b: &Block) -> Result<Vec<u8>, VdevError> {
    let sum = fnv(&b.data);
    v.read(b.offset, b.data.len() as u64, &mut |d| fnv(d) == sum)
}

fn checksum_errors(v: &TopVdev) -> Vec<u64> {
    v.leaves()
        .iter()
        .map(|l| l.stats.checksum_errors.load(Relaxed))
        .collect()
}

/// Fingerprints of every child's allocatable region (to prove no writes).
fn fingerprint(devs: &[Arc<dyn BlockDevice>]) -> Vec<u64> {
    devs.iter()
        .map(|d| {
            let mut b = vec![0u8; (CHILD - VDEV_LABEL_START_SIZE) as usize];
            d.read_at(&mut b, VDEV_LABEL_START_SIZE).unwrap();
            fnv(&b)
        })
        .collect()
}

/// Overwrites the data region of `child` with random bytes.
fn destroy(dev: &Arc<dyn BlockDevice>, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let junk = random_bytes(&mut rng, (2 << 20) as usize);
    dev.write_at(&junk, VDEV_LABEL_START_SIZE).unwrap();
}

fn geometries() -> impl Iterator<Item = (usize, usize)> {
    (1..=3).flat_map(|p| (p + 1..=12).map(move |w| (p, w)))
}

#[test]
fn raidz_round_trip_every_geometry() {
    for (p, w) in geometries() {
        for ashift in [9, 12] {
            let v = build(Layout::Raidz { nparity: p }, ashift, &mems(w));
            let blocks = write_blocks(&v, (p * 100 + w) as u64 + u64::from(ashift));
            for b in &blocks {
                let map = tarn_vdev::RaidzMap::new(b.offset, b.data.len() as u64, ashift, w, p);
                assert_eq!(map.asize, v.psize_to_asize(b.data.len() as u64));
                assert_eq!(read_ok(&v, b).unwrap(), b.data, "raidz{p} w{w} a{ashift}");
            }
            assert!(checksum_errors(&v).iter().all(|&c| c == 0));
        }
    }
}

#[test]
fn raidz_survives_silent_damage_on_up_to_nparity_children_and_heals() {
    for (p, w) in geometries() {
        let devs = mems(w);
        let v = build(Layout::Raidz { nparity: p }, 12, &devs);
        let blocks = write_blocks(&v, w as u64);
        let mut rng = ChaCha8Rng::seed_from_u64((p * 31 + w) as u64);
        let mut victims: Vec<usize> = (0..w).collect();
        for i in 0..p {
            let j = rng.random_range(i..w);
            victims.swap(i, j);
        }
        for &c in &victims[..p] {
            destroy(&devs[c], c as u64);
        }
        for b in &blocks {
            assert_eq!(
                read_ok(&v, b).unwrap(),
                b.data,
                "raidz{p} w{w} off {}",
                b.offset
            );
        }
        let errs = checksum_errors(&v);
        assert!(
            errs.iter().sum::<u64>() > 0,
            "raidz{p} w{w}: no damage seen"
        );
        for (c, &e) in errs.iter().enumerate() {
            assert!(
                e == 0 || victims[..p].contains(&c),
                "raidz{p} w{w}: blamed healthy {c}"
            );
        }
        // Normal reads skip parity, so damaged parity is left for scrub;
        // after one scrub pass nothing is left to repair.
        scrub_all(&v, &blocks);
        assert_eq!(scrub_all(&v, &blocks), 0, "raidz{p} w{w}: not healed");
        for (c, &e) in checksum_errors(&v).iter().enumerate() {
            assert!(
                e == 0 || victims[..p].contains(&c),
                "raidz{p} w{w}: blamed healthy {c}"
            );
        }
    }
}

/// Scrubs every block; returns the bytes repaired.
fn scrub_all(v: &TopVdev, blocks: &[Block]) -> u64 {
    blocks
        .iter()
        .map(|b| {
            let sum = fnv(&b.data);
            v.scrub(b.offset, b.data.len() as u64, &mut |d| fnv(d) == sum)
                .unwrap()
        })
        .sum()
}

#[test]
fn raidz_with_failing_devices_and_damage_combined() {
    for (p, w) in geometries() {
        let mem = mems(w);
        let faults: Vec<Arc<FaultDevice>> = mem
            .iter()
            .map(|m| Arc::new(FaultDevice::new(m.clone(), 7)))
            .collect();
        let devs: Vec<Arc<dyn BlockDevice>> = faults
            .iter()
            .map(|f| f.clone() as Arc<dyn BlockDevice>)
            .collect();
        let v = build(Layout::Raidz { nparity: p }, 9, &devs);
        let blocks = write_blocks(&v, 99);
        // One child fails every read; the other p-1 it may lose are damaged.
        faults[w - 1].set_fail_reads(true);
        for (c, dev) in mem.iter().enumerate().take(p - 1) {
            destroy(dev, 50 + c as u64);
        }
        for b in &blocks {
            assert_eq!(read_ok(&v, b).unwrap(), b.data, "raidz{p} w{w}");
        }
        assert!(v.leaves()[w - 1].stats.read_errors.load(Relaxed) > 0);
        // A child that cannot take writes does not fail a raidz write.
        faults[0].set_fail_writes(true);
        v.write(0, &vec![3u8; 8192]).unwrap();
        faults[0].set_fail_writes(false);
    }
}

#[test]
fn raidz_beyond_parity_is_a_checksum_error_and_writes_nothing() {
    for (p, w) in geometries() {
        let devs = mems(w);
        let v = build(Layout::Raidz { nparity: p }, 12, &devs);
        // Blocks spanning every child, so any p+1 destroyed children lose
        // at least one data column beyond what parity can rebuild.
        let mut rng = ChaCha8Rng::seed_from_u64(w as u64);
        let data = random_bytes(&mut rng, 4096 * w * 3);
        v.write(0, &data).unwrap();
        for (c, dev) in devs.iter().enumerate().take(p + 1) {
            destroy(dev, c as u64);
        }
        let before = fingerprint(&devs);
        let b = Block { offset: 0, data };
        assert!(
            matches!(read_ok(&v, &b), Err(VdevError::Checksum)),
            "raidz{p} w{w}"
        );
        assert_eq!(
            fingerprint(&devs),
            before,
            "raidz{p} w{w}: wrote during a failed read"
        );
    }
}

#[test]
fn raidz_too_many_failing_devices() {
    let mem = mems(4);
    let faults: Vec<Arc<FaultDevice>> = mem
        .iter()
        .map(|m| Arc::new(FaultDevice::new(m.clone(), 1)))
        .collect();
    let devs: Vec<Arc<dyn BlockDevice>> = faults
        .iter()
        .map(|f| f.clone() as Arc<dyn BlockDevice>)
        .collect();
    let v = build(Layout::Raidz { nparity: 1 }, 12, &devs);
    let data = vec![9u8; 4096 * 6];
    v.write(0, &data).unwrap();
    faults[1].set_fail_reads(true);
    faults[2].set_fail_reads(true);
    let b = Block { offset: 0, data };
    let e = read_ok(&v, &b).unwrap_err();
    assert!(
        matches!(
            e,
            VdevError::TooManyFailures {
                failed: 2,
                tolerated: 1,
                ..
            }
        ),
        "{e}"
    );
    faults[1].set_fail_writes(true);
    faults[2].set_fail_writes(true);
    assert!(matches!(
        v.write(0, &b.data),
        Err(VdevError::TooManyFailures { .. })
    ));
    // An offline child is skipped without counting errors against it.
    faults[1].heal();
    faults[2].heal();
    v.leaves()[3].set_state(tarn_vdev::LeafState::Offline);
    let ops = v.leaves()[3].stats.write_ops.load(Relaxed);
    v.write(0, &b.data).unwrap();
    assert_eq!(read_ok(&v, &b).unwrap(), b.data);
    assert_eq!(v.leaves()[3].stats.write_ops.load(Relaxed), ops);
    assert_eq!(v.leaves()[3].stats.read_errors.load(Relaxed), 0);
    v.flush().unwrap();
}

#[test]
fn concurrent_readers_and_writers() {
    let v = build(Layout::Raidz { nparity: 2 }, 12, &mems(6));
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let v = &v;
            s.spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(t);
                for i in 0..40u64 {
                    let offset = (t * 40 + i) * v.psize_to_asize(16384);
                    let b = Block {
                        offset,
                        data: random_bytes(&mut rng, 16384),
                    };
                    v.write(b.offset, &b.data).unwrap();
                    assert_eq!(read_ok(v, &b).unwrap(), b.data);
                }
            });
        }
    });
    assert!(checksum_errors(&v).iter().all(|&c| c == 0));
}

#[test]
fn mirror_heals_one_bad_side_and_refuses_two() {
    for n in [2, 3] {
        let devs = mems(n);
        let v = build(Layout::Mirror, 12, &devs);
        let blocks = write_blocks(&v, 5);
        destroy(&devs[0], 1);
        for b in &blocks {
            assert_eq!(read_ok(&v, b).unwrap(), b.data);
        }
        // Reads that went to side 0 healed it; scrub finds the rest.
        scrub_all(&v, &blocks);
        let errs = checksum_errors(&v);
        assert_eq!(errs[0], blocks.len() as u64);
        assert!(errs[1..].iter().all(|&e| e == 0));
        assert_eq!(scrub_all(&v, &blocks), 0);
        assert_eq!(
            checksum_errors(&v),
            errs,
            "second pass found damage: not healed"
        );
        // Damage on a side normal reads never pick is found by scrub.
        destroy(&devs[n - 1], 2);
        let b = &blocks[3];
        let sum = fnv(&b.data);
        let fixed = v
            .scrub(b.offset, b.data.len() as u64, &mut |d| fnv(d) == sum)
            .unwrap();
        assert_eq!(fixed, 4096);
        // Every side bad: error, and nothing is written.
        for (i, d) in devs.iter().enumerate() {
            destroy(d, 10 + i as u64);
        }
        let before = fingerprint(&devs);
        assert!(matches!(read_ok(&v, &blocks[0]), Err(VdevError::Checksum)));
        assert_eq!(fingerprint(&devs), before);
    }
}

#[test]
fn mirror_with_failing_and_offline_children() {
    let mem = mems(2);
    let f0 = Arc::new(FaultDevice::new(mem[0].clone(), 3));
    let devs: Vec<Arc<dyn BlockDevice>> = vec![f0.clone(), mem[1].clone()];
    let v = build(Layout::Mirror, 12, &devs);
    let blocks = write_blocks(&v, 8);
    f0.set_fail_reads(true);
    for b in &blocks {
        assert_eq!(read_ok(&v, b).unwrap(), b.data);
    }
    assert!(v.leaves()[0].stats.read_errors.load(Relaxed) > 0);
    f0.set_fail_writes(true);
    v.write(0, &[1u8; 4096]).unwrap();
    assert!(v.leaves()[0].stats.write_errors.load(Relaxed) > 0);
    v.flush().unwrap();
    v.leaves()[1].set_state(tarn_vdev::LeafState::Offline);
    assert!(matches!(
        v.write(0, &[1u8; 4096]),
        Err(VdevError::TooManyFailures { .. })
    ));
    assert!(v.flush().is_err());
}

#[test]
fn mirror_prefers_the_fast_side() {
    let mem = mems(2);
    let slow = Arc::new(FaultDevice::new(mem[0].clone(), 0));
    slow.set_latency(Duration::from_millis(3));
    let devs: Vec<Arc<dyn BlockDevice>> = vec![slow.clone(), mem[1].clone()];
    let v = build(Layout::Mirror, 12, &devs);
    let b = Block {
        offset: 0,
        data: vec![4u8; 4096],
    };
    v.write(0, &b.data).unwrap();
    let before = v.leaves()[0].stats.read_ops.load(Relaxed);
    for _ in 0..30 {
        read_ok(&v, &b).unwrap();
    }
    let slow_reads = v.leaves()[0].stats.read_ops.load(Relaxed) - before;
    assert!(slow_reads <= 2, "slow side served {slow_reads} of 30 reads");
}

#[test]
fn single_device_detects_but_cannot_repair() {
    let devs = mems(1);
    let v = build(Layout::Single, 9, &devs);
    let blocks = write_blocks(&v, 3);
    for b in &blocks {
        assert_eq!(read_ok(&v, b).unwrap(), b.data);
    }
    destroy(&devs[0], 4);
    assert!(matches!(read_ok(&v, &blocks[0]), Err(VdevError::Checksum)));
    assert_eq!(checksum_errors(&v), vec![1]);
}

#[test]
fn psize_to_asize_matches_openzfs() {
    let rz = |p| Layout::Raidz { nparity: p };
    // 4-wide raidz1, ashift 12, 128K: s = 32; s += 1*ceil(32/3) = 43;
    // roundup(43, 2) = 44 sectors = 176K. Deflate 2^17/(176K>>9) = 372.
    assert_eq!(psize_to_asize(rz(1), 4, 12, 128 << 10), 176 << 10);
    // 6-wide raidz2: 32 + 2*8 = 48 -> 48 = 192K (ratio 341).
    assert_eq!(psize_to_asize(rz(2), 6, 12, 128 << 10), 192 << 10);
    // 8-wide raidz2: 32 + 2*6 = 44 -> 45 = 180K (ratio 364).
    assert_eq!(psize_to_asize(rz(2), 8, 12, 128 << 10), 180 << 10);
    // 10-wide raidz2: 32 + 2*4 = 40 -> 42 = 168K (ratio 390).
    assert_eq!(psize_to_asize(rz(2), 10, 12, 128 << 10), 168 << 10);
    // 24-wide raidz3: 32 + 3*2 = 38 -> 40 = 160K.
    assert_eq!(psize_to_asize(rz(3), 24, 12, 128 << 10), 160 << 10);
    // One 512 B sector on raidz1 ashift 9: 1 + 1 = 2 sectors.
    assert_eq!(psize_to_asize(rz(1), 4, 9, 512), 1024);
    // 4K on 5-wide raidz3 ashift 12: 1 + 3 = 4 sectors.
    assert_eq!(psize_to_asize(rz(3), 5, 12, 4096), 16 << 10);
    // 5000 B on raidz1 ashift 12, 3-wide: 2 + 1 = 3 -> 4 sectors.
    assert_eq!(psize_to_asize(rz(1), 3, 12, 5000), 16 << 10);
    assert_eq!(psize_to_asize(Layout::Mirror, 2, 12, 512), 4096);
    assert_eq!(psize_to_asize(Layout::Single, 1, 12, 5000), 8192);
    assert_eq!(psize_to_asize(Layout::Mirror, 2, 9, 0), 0);
}

#[test]
fn construction_validates_and_computes_asize() {
    let sized = |mb: &[u64]| -> Vec<Leaf> {
        mb.iter()
            .enumerate()
            .map(|(i, &m)| Leaf::new(i as u64, format!("d{i}"), Arc::new(MemDevice::new(m << 20))))
            .collect()
    };
    let leaf_asize = (64u64 << 20) - (4 << 20) - (512 << 10);
    let m = TopVdev::new(0, 1, 12, Layout::Mirror, sized(&[64, 70])).unwrap();
    assert_eq!(m.asize(), leaf_asize);
    let r = TopVdev::new(
        0,
        1,
        12,
        Layout::Raidz { nparity: 2 },
        sized(&[80, 64, 65, 66]),
    )
    .unwrap();
    assert_eq!(r.asize(), leaf_asize * 4);
    let bad = |layout, n: &[u64], ashift| TopVdev::new(0, 1, ashift, layout, sized(n)).is_err();
    assert!(bad(Layout::Single, &[64, 64], 12));
    assert!(bad(Layout::Mirror, &[64], 12));
    assert!(bad(Layout::Raidz { nparity: 2 }, &[64, 64], 12));
    assert!(bad(Layout::Raidz { nparity: 4 }, &[64; 6], 12));
    assert!(bad(Layout::Raidz { nparity: 0 }, &[64; 6], 12));
    assert!(bad(Layout::Single, &[64], 8));
    assert!(bad(Layout::Single, &[64], 17));
    assert!(bad(Layout::Single, &[4], 12));
}

#[test]
fn bad_requests_are_errors() {
    let v = build(Layout::Raidz { nparity: 1 }, 12, &mems(3));
    let yes = &mut |_: &[u8]| true;
    assert!(matches!(
        v.write(100, &[0; 512]),
        Err(VdevError::BadRequest(_))
    ));
    assert!(matches!(
        v.write(0, &[0; 100]),
        Err(VdevError::BadRequest(_))
    ));
    assert!(matches!(v.write(0, &[]), Err(VdevError::BadRequest(_))));
    assert!(matches!(
        v.write(v.asize() - 4096, &[0; 8192]),
        Err(VdevError::BadRequest(_))
    ));
    assert!(matches!(
        v.read(!4095, 512, yes),
        Err(VdevError::BadRequest(_))
    ));
    // The very last allocation unit of the address space is usable.
    let last = v.asize() - v.psize_to_asize(512);
    v.write(last, &[7; 512]).unwrap();
    assert_eq!(v.read(last, 512, yes).unwrap(), vec![7; 512]);
}

/// Every subset of at most `nparity` columns of one block, damaged in turn:
/// scrub rebuilds it, rewrites exactly those columns and blames exactly
/// their children.
#[test]
fn raidz_every_column_combination_is_rebuilt_and_blamed() {
    for p in 1..=3usize {
        for w in [p + 1, p + 3, 9] {
            let devs = mems(w);
            let v = build(Layout::Raidz { nparity: p }, 9, &devs);
            let mut rng = ChaCha8Rng::seed_from_u64(w as u64);
            // 2.5 rows of data: big and small columns both occur.
            let psize = 512 * ((w - p) * 2 + (w - p).div_ceil(2));
            let b = Block {
                offset: 512 * 3,
                data: random_bytes(&mut rng, psize),
            };
            let map = tarn_vdev::RaidzMap::new(b.offset, psize as u64, 9, w, p);
            for mask in 1u32..(1 << map.cols.len()) {
                if mask.count_ones() as usize > p {
                    continue;
                }
                v.write(b.offset, &b.data).unwrap();
                let before = checksum_errors(&v);
                let mut damaged = 0;
                for (_, col) in map
                    .cols
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                {
                    let junk = random_bytes(&mut rng, col.size as usize);
                    devs[col.child]
                        .write_at(&junk, VDEV_LABEL_START_SIZE + col.offset)
                        .unwrap();
                    damaged += col.size;
                }
                assert_eq!(
                    read_ok(&v, &b).unwrap(),
                    b.data,
                    "raidz{p} w{w} mask {mask:b}"
                );
                let sum = fnv(&b.data);
                let fixed = v
                    .scrub(b.offset, psize as u64, &mut |d| fnv(d) == sum)
                    .unwrap();
                let after = checksum_errors(&v);
                // The normal read may already have repaired data columns.
                let blamed: Vec<usize> = (0..w).filter(|&c| after[c] > before[c]).collect();
                let mut expect: Vec<usize> = map
                    .cols
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(_, c)| c.child)
                    .collect();
                expect.sort_unstable();
                assert_eq!(blamed, expect, "raidz{p} w{w} mask {mask:b}");
                assert!(fixed <= damaged);
                assert!(after.iter().zip(&before).all(|(a, b)| a - b <= 1));
            }
        }
    }
}

#[test]
fn speculative_reads_count_checksum_errors_only_beside_a_good_copy() {
    let devs = mems(2);
    let v = build(Layout::Mirror, 12, &devs);
    // One damaged side beside a good one is real damage: counted, healed.
    // (Nothing was read yet, so the mirror tries side 0 first.)
    let blocks = write_blocks(&v, 3);
    let b = &blocks[3];
    destroy(&devs[0], 9);
    let want = fnv(&b.data);
    let got = v
        .read_speculative(b.offset, b.data.len() as u64, &mut |d| fnv(d) == want)
        .unwrap();
    assert_eq!(got, b.data);
    assert_eq!(checksum_errors(&v), vec![1, 0]);
    // Never written: no copy verifies, and nothing is counted.
    let unwritten = v.asize() - 8192;
    let mut never = |_: &[u8]| false;
    assert!(v.read_speculative(unwritten, 8192, &mut never).is_err());
    assert_eq!(checksum_errors(&v), vec![1, 0]);
    // An ordinary read of the same block counts on both sides.
    assert!(v.read(unwritten, 8192, &mut never).is_err());
    assert_eq!(checksum_errors(&v), vec![2, 1]);
}

#[test]
fn top_counters_and_detaching_a_mirror_child() {
    let devs = mems(3);
    let v = build(Layout::Mirror, 12, &devs);
    let blocks = write_blocks(&v, 5);
    let st = v.stats();
    assert_eq!(
        st.write_ops.load(Relaxed),
        blocks.len() as u64,
        "one op per block"
    );
    let written: u64 = blocks.iter().map(|b| b.data.len() as u64).sum();
    assert_eq!(st.write_bytes.load(Relaxed), written);
    for b in &blocks {
        assert_eq!(read_ok(&v, b).unwrap(), b.data);
    }
    assert_eq!(st.read_ops.load(Relaxed), blocks.len() as u64);
    let leaf_writes = v.leaves()[1].stats.write_ops.load(Relaxed);
    // Without child 0: still a mirror, same counters, every block readable.
    let two = v.without_child(0).unwrap();
    assert_eq!(
        (two.layout(), two.leaves().len(), two.guid()),
        (Layout::Mirror, 2, 1)
    );
    assert_eq!(two.stats().write_ops.load(Relaxed), blocks.len() as u64);
    assert_eq!(two.leaves()[0].guid, 101);
    assert_eq!(two.leaves()[0].stats.write_ops.load(Relaxed), leaf_writes);
    // Down to one: a single device that takes its leaf's GUID.
    let one = two.without_child(1).unwrap();
    assert_eq!((one.layout(), one.guid()), (Layout::Single, 101));
    for b in &blocks {
        assert_eq!(read_ok(&one, b).unwrap(), b.data);
    }
    assert!(
        one.without_child(0).is_err(),
        "a single device is no mirror"
    );
}

#[test]
fn read_run_reads_back_to_back_blocks_with_one_read_and_leaves_bad_ones() {
    let devs = mems(2);
    let v = build(Layout::Mirror, 12, &devs);
    let mut rng = ChaCha8Rng::seed_from_u64(77);
    let bs = 128u64 << 10;
    let blocks: Vec<Block> = (0..9)
        .map(|i| {
            let data = random_bytes(&mut rng, bs as usize);
            v.write(i * bs, &data).unwrap();
            Block {
                offset: i * bs,
                data,
            }
        })
        .collect();
    // Block 3 is wrong on the side a read picks first (ties: child 0).
    devs[0]
        .write_at(&vec![0xee; 4096], VDEV_LABEL_START_SIZE + 3 * bs)
        .unwrap();
    let sums: Vec<u64> = blocks.iter().map(|b| fnv(&b.data)).collect();
    let run = |idx: &[usize]| {
        let spec: Vec<(u64, u64)> = idx.iter().map(|&i| (blocks[i].offset, bs)).collect();
        v.read_run(&spec, &mut |k, d| fnv(d) == sums[idx[k]])
    };
    let reads_before = v.leaves()[0].stats.read_ops.load(Relaxed);
    let got = run(&[0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(v.leaves()[0].stats.read_ops.load(Relaxed), reads_before + 1);
    for (i, g) in got.iter().enumerate() {
        match i {
            3 => assert!(g.is_none(), "the wrong copy is not returned"),
            _ => assert_eq!(g.as_deref(), Some(&blocks[i].data[..]), "block {i}"),
        }
    }
    // Nothing was counted or healed: the caller reads block 3 on its own
    // (here a scrub read, which checks both sides whichever it picks).
    assert_eq!(checksum_errors(&v), vec![0, 0]);
    let fixed = v
        .scrub(blocks[3].offset, bs, &mut |d| fnv(d) == sums[3])
        .unwrap();
    assert_eq!(fixed, bs);
    assert_eq!(checksum_errors(&v), vec![1, 0]);
    assert!(run(&[0, 1, 2, 3]).iter().all(Option::is_some), "healed");
    // Not back to back, longer than one aggregated read: not read at all.
    assert!(run(&[0, 2]).iter().all(Option::is_none));
    assert!(run(&[0, 1, 2, 3, 4, 5, 6, 7, 8])
        .iter()
        .all(Option::is_none));
    // Raidz is read block by block.
    let r = build(Layout::Raidz { nparity: 1 }, 12, &mems(3));
    r.write(0, &blocks[0].data).unwrap();
    let asize = r.psize_to_asize(bs);
    r.write(asize, &blocks[1].data).unwrap();
    let got = r.read_run(&[(0, bs), (asize, bs)], &mut |k, d| fnv(d) == sums[k]);
    assert!(got.iter().all(Option::is_none));
}

#[test]
fn scrub_run_checks_every_child_with_one_read_each_and_marks_bad_blocks() {
    let devs = mems(2);
    let v = build(Layout::Mirror, 12, &devs);
    let mut rng = ChaCha8Rng::seed_from_u64(78);
    let bs = 64u64 << 10;
    // Blocks 0..6 with a free gap before block 4.
    let offsets: Vec<u64> = (0..6u64)
        .map(|i| i * bs + if i >= 4 { 3 * bs } else { 0 })
        .collect();
    let blocks: Vec<Block> = offsets
        .iter()
        .map(|&offset| {
            let data = random_bytes(&mut rng, bs as usize);
            v.write(offset, &data).unwrap();
            Block { offset, data }
        })
        .collect();
    // Block 2 is wrong on child 1 only: a normal read (child 0 first)
    // would never see it, a scrub must.
    devs[1]
        .write_at(&vec![0x5a; 4096], VDEV_LABEL_START_SIZE + offsets[2])
        .unwrap();
    let sums: Vec<u64> = blocks.iter().map(|b| fnv(&b.data)).collect();
    let spec: Vec<(u64, u64)> = blocks.iter().map(|b| (b.offset, bs)).collect();
    let reads: Vec<u64> = (0..2)
        .map(|c| v.leaves()[c].stats.read_ops.load(Relaxed))
        .collect();
    let ok = v.scrub_run(&spec, &mut |k, d| fnv(d) == sums[k]);
    let s = Some(0);
    assert_eq!(ok, vec![s, s, None, s, s, s]);
    for (c, before) in reads.iter().enumerate() {
        let now = v.leaves()[c].stats.read_ops.load(Relaxed);
        assert_eq!(now, before + 1, "child {c}: one read for the run");
    }
    // The caller scrubs the marked block on its own: repaired and counted.
    assert_eq!(
        v.scrub(offsets[2], bs, &mut |d| fnv(d) == sums[2]).unwrap(),
        bs
    );
    assert_eq!(checksum_errors(&v), vec![0, 1]);
    assert!(v
        .scrub_run(&spec, &mut |k, d| fnv(d) == sums[k])
        .into_iter()
        .all(|b| b == Some(0)));
    // Out of order, overlapping, too long, or raidz: nothing read whole.
    let rev: Vec<(u64, u64)> = spec.iter().rev().copied().collect();
    assert!(v
        .scrub_run(&rev, &mut |_, _| true)
        .iter()
        .all(Option::is_none));
    let big: Vec<Arc<dyn BlockDevice>> = (0..2)
        .map(|_| Arc::new(MemDevice::new(4 * SCRUB_AGGREGATE_BYTES)) as Arc<dyn BlockDevice>)
        .collect();
    let wide = build(Layout::Mirror, 12, &big);
    let long = [(0, bs), (SCRUB_AGGREGATE_BYTES, bs)];
    assert!(wide
        .scrub_run(&long, &mut |_, _| true)
        .iter()
        .all(Option::is_none));
    let near = [(0, bs), (SCRUB_AGGREGATE_BYTES - bs, bs)];
    assert!(wide
        .scrub_run(&near, &mut |_, _| true)
        .iter()
        .all(|b| *b == Some(0)));
    let r = build(Layout::Raidz { nparity: 1 }, 12, &mems(3));
    r.write(0, &blocks[0].data).unwrap();
    assert_eq!(r.scrub_run(&[(0, bs)], &mut |_, _| true), vec![None]);
}

/// A raidz column held by a pair of leaves (a member being replaced, or a
/// spare standing in): both take every write, the column is lost only
/// with both, a leaf being resilvered is never read, and a repair or a
/// scrub makes both hold the column.
#[test]
fn a_raidz_column_held_by_a_pair() {
    let devs = mems(4);
    let leaves = devs
        .iter()
        .enumerate()
        .map(|(i, d)| Leaf::new(100 + i as u64, format!("d{i}"), d.clone()))
        .collect();
    let t = TopVdev::grouped(0, 1, 12, Layout::Raidz { nparity: 1 }, leaves, &[1, 1, 2]).unwrap();
    assert_eq!(t.width(), 3);
    assert_eq!(
        t.asize(),
        build(Layout::Raidz { nparity: 1 }, 12, &mems(3)).asize()
    );
    assert_eq!(t.group(2), 2..4);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let data = random_bytes(&mut rng, 64 << 10);
    t.write(0, &data).unwrap();
    let mut ok = |b: &[u8]| fnv(b) == fnv(&data);
    // Either leaf of the pair makes the column, with a data column gone.
    t.leaves()[0].set_state(tarn_vdev::LeafState::Faulted);
    t.leaves()[2].set_state(tarn_vdev::LeafState::Faulted);
    assert_eq!(t.unusable_children(), 1);
    assert!(!t.is_lost());
    assert_eq!(t.read(0, data.len() as u64, &mut ok).unwrap(), data);
    // Both gone: the column is lost too.
    t.leaves()[3].set_state(tarn_vdev::LeafState::Faulted);
    assert!(t.is_lost());
    for l in t.leaves() {
        l.set_state(tarn_vdev::LeafState::Online);
    }
    // The second leaf is being resilvered and holds garbage: never read,
    // and a scrub writes the column to it.
    devs[3]
        .write_at(&vec![0xEE; 1 << 20], VDEV_LABEL_START_SIZE)
        .unwrap();
    t.leaves()[3].stats.set_resilvering(true);
    t.leaves()[0].set_state(tarn_vdev::LeafState::Faulted);
    assert!(
        !t.can_lose(2),
        "the pair's old leaf is its only complete one"
    );
    assert_eq!(t.read(0, data.len() as u64, &mut ok).unwrap(), data);
    t.leaves()[0].set_state(tarn_vdev::LeafState::Online);
    assert!(t.scrub(0, data.len() as u64, &mut ok).unwrap() > 0);
    t.leaves()[3].stats.set_resilvering(false);
    t.leaves()[2].set_state(tarn_vdev::LeafState::Faulted);
    t.leaves()[0].set_state(tarn_vdev::LeafState::Faulted);
    assert_eq!(t.read(0, data.len() as u64, &mut ok).unwrap(), data);
    // Leaving the pair keeps the other leaf in the column.
    for l in t.leaves() {
        l.set_state(tarn_vdev::LeafState::Online);
    }
    let single = t.without_paired(2).unwrap();
    assert_eq!((single.width(), single.leaves().len()), (3, 3));
    assert_eq!(single.leaves()[2].guid, 103);
    assert_eq!(single.read(0, data.len() as u64, &mut ok).unwrap(), data);
    assert!(single.without_paired(0).is_err());
}

/// `n` file vdevs of `CHILD` bytes in `dir` (d0.img, d1.img, ...).
fn file_devices(dir: &std::path::Path, n: usize) -> Vec<Arc<tarn_vdev::FileDevice>> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("d{i}.img"));
            std::fs::File::create(&p).unwrap().set_len(CHILD).unwrap();
            Arc::new(tarn_vdev::FileDevice::open(&p).unwrap())
        })
        .collect()
}

fn as_block_devices(files: &[Arc<tarn_vdev::FileDevice>]) -> Vec<Arc<dyn BlockDevice>> {
    files
        .iter()
        .map(|f| f.clone() as Arc<dyn BlockDevice>)
        .collect()
}

#[test]
fn mirror_durable_writes_on_files_land_on_every_child_once() {
    // A mirror of two file vdevs takes an intent-log block on both at
    // once from the caller's thread (io_uring where the kernel has it, the
    // round-trip threads where not): aligned or not, every child holds
    // exactly the bytes and counts exactly one write per block.
    let dir = tempfile::tempdir().unwrap();
    let files = file_devices(dir.path(), 2);
    let v = build(Layout::Mirror, 12, &as_block_devices(&files));
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let backing = random_bytes(&mut rng, (128 << 10) + 1);
    let mut blocks = Vec::new();
    for (i, len) in [4096usize, 8192, 12288, 131072].into_iter().enumerate() {
        let offset = (i as u64) * (256 << 10);
        // Even blocks start on an odd address: the bounce path.
        let data = &backing[i % 2..i % 2 + len];
        v.write_durable(offset, data).unwrap();
        blocks.push((offset, data.to_vec()));
    }
    for (leaf, dev) in v.leaves().iter().zip(&files) {
        assert_eq!(leaf.stats.write_ops.load(Relaxed), blocks.len() as u64);
        assert_eq!(leaf.stats.write_errors.load(Relaxed), 0);
        for (offset, data) in &blocks {
            let mut got = vec![0u8; data.len()];
            dev.read_at(&mut got, VDEV_LABEL_START_SIZE + offset)
                .unwrap();
            assert!(got == *data, "block at {offset} differs on {}", leaf.path);
        }
    }
}

#[test]
fn several_durable_blocks_on_files_land_on_every_child_once() {
    // An intent-log commit of several blocks goes out in one io_uring
    // round from the caller's thread, on a single file vdev as on a
    // mirror: each child holds every block's bytes and counts exactly
    // one write per block, aligned buffers or not.
    for (layout, n) in [(Layout::Single, 1), (Layout::Mirror, 2)] {
        let dir = tempfile::tempdir().unwrap();
        let files = file_devices(dir.path(), n);
        let v = build(layout, 12, &as_block_devices(&files));
        let mut rng = ChaCha8Rng::seed_from_u64(13);
        let backing = random_bytes(&mut rng, (64 << 10) + 1);
        // Odd start addresses for the first and third: copied to aligned
        // memory; the second is written from where it is (if aligned).
        let blocks: Vec<(u64, &[u8])> = vec![
            (0, &backing[1..8193]),
            (1 << 20, &backing[..16384]),
            (3 << 20, &backing[1..4097]),
        ];
        let results = v.write_durable_many(&blocks);
        assert!(results.iter().all(Result::is_ok), "{layout:?}: {results:?}");
        for (leaf, dev) in v.leaves().iter().zip(&files) {
            assert_eq!(leaf.stats.write_ops.load(Relaxed), blocks.len() as u64);
            for (offset, data) in &blocks {
                let mut got = vec![0u8; data.len()];
                dev.read_at(&mut got, VDEV_LABEL_START_SIZE + offset)
                    .unwrap();
                assert!(got == *data, "{layout:?}: block at {offset} differs");
            }
        }
    }
}

/// A disk that does one write at a time, each taking `per_write`, and
/// counts the writes it finished.
struct SerialDisk {
    mem: MemDevice,
    busy: std::sync::Mutex<()>,
    per_write: Duration,
    done: std::sync::atomic::AtomicUsize,
}

impl BlockDevice for SerialDisk {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.mem.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let _one_at_a_time = self.busy.lock().unwrap();
        std::thread::sleep(self.per_write);
        self.mem.write_at(buf, offset)?;
        self.done.fetch_add(1, Relaxed);
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn size(&self) -> u64 {
        self.mem.size()
    }
    fn physical_sector_size(&self) -> u32 {
        self.mem.physical_sector_size()
    }
    fn describe(&self) -> String {
        String::from("serial disk")
    }
}

#[test]
fn a_batched_mirror_write_keeps_both_disks_busy_from_the_start() {
    let disks: Vec<Arc<SerialDisk>> = (0..2)
        .map(|_| {
            Arc::new(SerialDisk {
                mem: MemDevice::new(CHILD * 8),
                busy: std::sync::Mutex::new(()),
                per_write: Duration::from_millis(10),
                done: std::sync::atomic::AtomicUsize::new(0),
            })
        })
        .collect();
    let devs: Vec<Arc<dyn BlockDevice>> = disks.iter().map(|d| d.clone() as _).collect();
    let v = build(Layout::Mirror, 12, &devs);
    // 24 blocks of 1 MiB with gaps between them: 24 runs per disk.
    let data = vec![7u8; 1 << 20];
    let start = VDEV_LABEL_START_SIZE;
    let blocks: Vec<(u64, &[u8])> = (0..24u64)
        .map(|i| (start + i * (2 << 20), &data[..]))
        .collect();
    let first_on_second = Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
    // Watch for the second disk's first write to finish; note how many the
    // first disk had finished by then.
    let watcher = {
        let (a, b, seen) = (disks[0].clone(), disks[1].clone(), first_on_second.clone());
        std::thread::spawn(move || {
            while b.done.load(Relaxed) == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            seen.store(a.done.load(Relaxed), Relaxed);
        })
    };
    let results = v.write_many(&blocks, 8);
    watcher.join().unwrap();
    assert!(results.iter().all(Result::is_ok));
    // Taking the disks in turn, both start at once; taking them in order,
    // the second waits until the 8 threads have taken the first disk's
    // 24 runs (18 of them done, measured).
    let before = first_on_second.load(Relaxed);
    assert!(
        before <= 4,
        "the first disk finished {before} writes before the second finished one"
    );
    let mut back = vec![0u8; 1 << 20];
    for d in &disks {
        d.read_at(&mut back, start + 23 * (2 << 20)).unwrap();
        assert!(back.iter().all(|&b| b == 7));
    }
}

/// `write_durable_many` (an intent-log commit of several blocks): every
/// block reaches every child with its own bytes, the writes are in flight
/// together rather than one after the other, and each block's result is
/// its own: a mirror tolerates a child that fails, a single device does
/// not, and a block outside the vdev fails alone.
#[test]
fn durable_writes_of_several_blocks_go_out_together() {
    let now = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Each durable write is counted while in flight (across both
    // children) and held for a moment, so overlapping ones are seen
    // without timing anything.
    let devs: Vec<Arc<dyn BlockDevice>> = (0..2)
        .map(|_| {
            let (now, most) = (now.clone(), most.clone());
            let dev = HookDevice::new(Arc::new(MemDevice::new(CHILD)), move |_, _, write| {
                let n = now.fetch_add(1, Relaxed) + 1;
                most.fetch_max(n, Relaxed);
                std::thread::sleep(Duration::from_millis(20));
                let r = write();
                now.fetch_sub(1, Relaxed);
                r
            });
            Arc::new(dev) as Arc<dyn BlockDevice>
        })
        .collect();
    let v = build(Layout::Mirror, 12, &devs);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let blocks: Vec<Block> = (0..3u64)
        .map(|i| Block {
            offset: i * 16384,
            data: random_bytes(&mut rng, 12288 + i as usize * 512),
        })
        .collect();
    let writes: Vec<(u64, &[u8])> = blocks.iter().map(|b| (b.offset, &b.data[..])).collect();
    let results = v.write_durable_many(&writes);
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    // One block alone has its two children in flight at once.
    assert!(
        most.load(Relaxed) > 2,
        "the blocks' durable writes went out one block at a time"
    );
    for b in &blocks {
        for d in &devs {
            let mut back = vec![0u8; b.data.len()];
            d.read_at(&mut back, VDEV_LABEL_START_SIZE + b.offset)
                .unwrap();
            assert_eq!(back, b.data, "block at {} on a child", b.offset);
        }
        assert_eq!(read_ok(&v, b).unwrap(), b.data);
    }

    // One child of the mirror fails every write: each block still
    // succeeds on the other. On a single device the same failure is each
    // block's error, and a block past the end fails on its own.
    let faulty: Vec<Arc<FaultDevice>> = (0..2)
        .map(|i| Arc::new(FaultDevice::new(Arc::new(MemDevice::new(CHILD)), i)))
        .collect();
    faulty[0].set_fail_writes(true);
    let as_dyn: Vec<Arc<dyn BlockDevice>> = faulty.iter().map(|f| f.clone() as _).collect();
    let m = build(Layout::Mirror, 12, &as_dyn);
    assert!(m.write_durable_many(&writes).iter().all(Result::is_ok));
    for b in &blocks {
        assert_eq!(read_ok(&m, b).unwrap(), b.data);
    }
    let single = build(Layout::Single, 12, &as_dyn[..1]);
    assert!(single
        .write_durable_many(&writes)
        .iter()
        .all(Result::is_err));
    faulty[0].heal();
    let past_end = single.asize();
    let mixed =
        single.write_durable_many(&[(0, &blocks[0].data[..]), (past_end, &blocks[1].data[..])]);
    assert!(mixed[0].is_ok() && mixed[1].is_err(), "{mixed:?}");
}
