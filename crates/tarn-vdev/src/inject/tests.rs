use super::*;
use crate::device::MemDevice;
use crate::top::{Layout, TopVdev};
use crate::VdevError;
use std::sync::atomic::Ordering::Relaxed;

const UNIT: usize = 4096;

fn leaf(guid: u64) -> Leaf {
    Leaf::new(
        guid,
        format!("/dev/d{guid}"),
        Arc::new(MemDevice::new(64 << 20)),
    )
}

fn fault(kind: FaultKind, io: IoType, freq_ppm: u32) -> Fault {
    Fault { kind, io, freq_ppm }
}

/// A block whose bytes say where it is, so a damaged read is visible.
fn pattern(off: u64) -> Vec<u8> {
    (0..UNIT).map(|i| (off as usize / UNIT + i) as u8).collect()
}

#[test]
fn checksum_damage_is_per_offset_deterministic_and_hits_the_fraction() {
    let l = leaf(7);
    let blocks: Vec<u64> = (0..4000u64).map(|i| i * UNIT as u64).collect();
    for &off in &blocks {
        l.write(&pattern(off), off).unwrap();
    }
    let mut reg = Registry::default();
    let r = reg
        .add(
            "tank",
            &l,
            fault(FaultKind::Checksum, IoType::Read, 100_000),
        )
        .unwrap();
    assert_eq!(r.id, 1);
    let handler = l.inject.list.read()[0].clone();
    let mut damaged = 0;
    for &off in &blocks {
        let mut first = vec![0u8; UNIT];
        let mut again = vec![0u8; UNIT];
        l.read(&mut first, off).unwrap();
        l.read(&mut again, off).unwrap();
        // The same offset reads the same (damaged or good) bytes every time.
        assert_eq!(first, again, "offset {off} changed between reads");
        let bad = first != pattern(off);
        assert_eq!(bad, handler.damages(off), "offset {off}");
        damaged += usize::from(bad);
    }
    // 10 % of 4000 offsets, within four standard deviations (~19).
    assert!((320..=480).contains(&damaged), "{damaged} of 4000 damaged");
    // A second leaf (another seed) damages other offsets.
    let other = leaf(8);
    reg.add(
        "tank",
        &other,
        fault(FaultKind::Checksum, IoType::All, 100_000),
    )
    .unwrap();
    let h2 = other.inject.list.read()[0].clone();
    let same = blocks
        .iter()
        .filter(|&&o| handler.damages(o) && h2.damages(o))
        .count();
    assert!(same < 100, "{same} offsets damaged on both leaves");
    // Reads are damaged, never the device; clearing restores them at once.
    assert!(reg.remove(1));
    assert!(!reg.remove(1), "handler 1 removed twice");
    for &off in &blocks {
        let mut buf = vec![0u8; UNIT];
        l.read(&mut buf, off).unwrap();
        assert_eq!(buf, pattern(off));
    }
    assert!(
        !l.inject.active(),
        "no handler left, still on the slow path"
    );
    // Damage is not an I/O error: nothing counted by the leaf itself.
    assert_eq!(l.stats.read_errors.load(Relaxed), 0);
}

#[test]
fn full_frequency_checksum_damages_every_block() {
    let l = leaf(9);
    l.write(&pattern(0), 0).unwrap();
    let mut reg = Registry::default();
    reg.add(
        "p",
        &l,
        fault(FaultKind::Checksum, IoType::Read, FREQ_PPM_MAX),
    )
    .unwrap();
    for off in (0..64u64).map(|i| i * 512) {
        let mut buf = vec![0u8; 512];
        let mut want = vec![0u8; 512];
        l.read(&mut buf, off).unwrap();
        l.dev
            .read_at(&mut want, tarn_format::label::VDEV_LABEL_START_SIZE + off)
            .unwrap();
        assert_ne!(buf, want, "offset {off} read undamaged");
    }
}

#[test]
fn io_errors_follow_the_io_type_and_are_counted() {
    let l = leaf(3);
    let mut reg = Registry::default();
    reg.add("p", &l, fault(FaultKind::Io, IoType::Read, FREQ_PPM_MAX))
        .unwrap();
    let mut buf = vec![0u8; UNIT];
    l.write(&pattern(0), 0).unwrap();
    l.flush().unwrap();
    let err = l.read(&mut buf, 0).unwrap_err().to_string();
    assert!(err.contains("injected by zinject handler 1"), "{err}");
    assert_eq!(l.stats.read_errors.load(Relaxed), 1);
    assert_eq!(l.stats.write_errors.load(Relaxed), 0);

    assert_eq!(reg.remove_where(|r| r.pool == "p"), 1);
    reg.add("p", &l, fault(FaultKind::Io, IoType::Write, FREQ_PPM_MAX))
        .unwrap();
    l.read(&mut buf, 0).unwrap();
    assert!(l.write(&buf, 0).is_err());
    l.flush().unwrap();
    assert_eq!(l.stats.write_errors.load(Relaxed), 1);

    reg.add("p", &l, fault(FaultKind::Io, IoType::Flush, FREQ_PPM_MAX))
        .unwrap();
    assert!(l.flush().is_err());
    assert_eq!(l.stats.write_errors.load(Relaxed), 2);
    assert_eq!(reg.list().map(|r| r.id).collect::<Vec<_>>(), vec![2, 3]);
}

#[test]
fn nxio_fails_every_io() {
    let l = leaf(4);
    let mut reg = Registry::default();
    reg.add("p", &l, fault(FaultKind::Nxio, IoType::All, FREQ_PPM_MAX))
        .unwrap();
    let mut buf = vec![0u8; UNIT];
    let err = l.read(&mut buf, 0).unwrap_err().to_string();
    assert!(err.contains("ENXIO"), "{err}");
    assert!(l.write(&buf, 0).is_err());
    assert!(l.flush().is_err());
    assert_eq!(l.stats.read_errors.load(Relaxed), 1);
    assert_eq!(l.stats.write_errors.load(Relaxed), 2);
}

#[test]
fn partial_frequency_fails_about_that_share_of_ios() {
    let l = leaf(5);
    let mut reg = Registry::default();
    reg.add("p", &l, fault(FaultKind::Io, IoType::All, 250_000))
        .unwrap();
    let mut buf = vec![0u8; 512];
    let failed = (0..4000).filter(|_| l.read(&mut buf, 0).is_err()).count();
    // 25 % of 4000, within four standard deviations (~27).
    assert!((890..=1110).contains(&failed), "{failed} of 4000 failed");
}

#[test]
fn delay_holds_each_io_for_the_latency() {
    let l = leaf(6);
    let mut reg = Registry::default();
    let delay = FaultKind::Delay {
        latency_ms: 20,
        lanes: 1,
    };
    reg.add("p", &l, fault(delay, IoType::All, FREQ_PPM_MAX))
        .unwrap();
    let mut buf = vec![0u8; 512];
    let t0 = Instant::now();
    for _ in 0..3 {
        l.read(&mut buf, 0).unwrap();
    }
    assert!(
        t0.elapsed() >= Duration::from_millis(60),
        "{:?}",
        t0.elapsed()
    );
    // The mirror sees the slow leaf as slow.
    assert!(l.stats.latency_ewma_ns.load(Relaxed) >= 20_000_000);
}

#[test]
fn bad_combinations_are_refused_with_a_reason() {
    let mut reg = Registry::default();
    let l = leaf(1);
    for (bad, why) in [
        (
            fault(FaultKind::Checksum, IoType::Write, 1),
            "only be injected into reads",
        ),
        (fault(FaultKind::Nxio, IoType::Read, 1), "leave -T out"),
        (fault(FaultKind::Io, IoType::All, 0), "out of range"),
        (
            fault(FaultKind::Io, IoType::All, FREQ_PPM_MAX + 1),
            "out of range",
        ),
        (
            fault(
                FaultKind::Delay {
                    latency_ms: INJECT_DELAY_MS_MAX + 1,
                    lanes: 1,
                },
                IoType::All,
                1,
            ),
            "latency",
        ),
        (
            fault(
                FaultKind::Delay {
                    latency_ms: 1,
                    lanes: 0,
                },
                IoType::All,
                1,
            ),
            "lanes",
        ),
    ] {
        let err = reg.add("p", &l, bad).unwrap_err();
        assert!(err.contains(why), "{bad:?}: {err}");
    }
    assert_eq!(reg.list().count(), 0);
    assert!(!l.inject.active());
}

#[test]
fn a_mirror_heals_around_a_damaged_side_and_counts_cksum_there_only() {
    let leaves = vec![leaf(11), leaf(12)];
    let top = TopVdev::new(0, 1, 12, Layout::Mirror, leaves).unwrap();
    let blocks: Vec<u64> = (0..64u64).map(|i| i * UNIT as u64).collect();
    for &off in &blocks {
        top.write(off, &pattern(off)).unwrap();
    }
    let mut reg = Registry::default();
    reg.add(
        "p",
        &top.leaves()[0],
        fault(FaultKind::Checksum, IoType::Read, FREQ_PPM_MAX),
    )
    .unwrap();
    // An aggregated read declines a damaging leaf's run (leaf 0 is first:
    // no latency measured yet, ties go to the lowest index)…
    let run: Vec<(u64, u64)> = blocks.iter().map(|&o| (o, UNIT as u64)).collect();
    assert_eq!(crate::mirror::read_order(top.leaves(), None)[0], 0);
    let got = top.read_run(&run, &mut |i, d| d == pattern(run[i].0).as_slice());
    assert!(got.iter().all(Option::is_none));
    // …and each block read alone comes back right through a thorough read.
    for &off in &blocks {
        let want = pattern(off);
        top.scrub(off, UNIT as u64, &mut |d| d == want.as_slice())
            .unwrap();
        let data = top
            .read(off, UNIT as u64, &mut |d| d == want.as_slice())
            .unwrap();
        assert_eq!(data, want);
    }
    let cksum = |i: usize| top.leaves()[i].stats.checksum_errors.load(Relaxed);
    assert!(cksum(0) >= blocks.len() as u64, "cksum {}", cksum(0));
    assert_eq!(cksum(1), 0);
}

#[test]
fn raidz_reconstructs_around_a_damaged_column_and_counts_it() {
    let leaves = (0..4).map(|i| leaf(20 + i)).collect();
    let top = TopVdev::new(0, 1, 12, Layout::Raidz { nparity: 1 }, leaves).unwrap();
    let psize = 3 * UNIT as u64;
    let blocks: Vec<u64> = (0..32u64).map(|i| i * top.psize_to_asize(psize)).collect();
    let data = |off: u64| [pattern(off), pattern(off + 1), pattern(off + 2)].concat();
    for &off in &blocks {
        top.write(off, &data(off)).unwrap();
    }
    let mut reg = Registry::default();
    reg.add(
        "p",
        &top.leaves()[2],
        fault(FaultKind::Checksum, IoType::Read, FREQ_PPM_MAX),
    )
    .unwrap();
    for &off in &blocks {
        let want = data(off);
        let got = top.read(off, psize, &mut |d| d == want.as_slice()).unwrap();
        assert_eq!(got, want, "block at {off}");
    }
    let cksum = |i: usize| top.leaves()[i].stats.checksum_errors.load(Relaxed);
    assert!(cksum(2) > 0, "no checksum error on the damaged column");
    for i in [0, 1, 3] {
        assert_eq!(cksum(i), 0, "leaf {i}");
    }
}

/// Which faults make a failed read `Unreachable` (the pool may suspend
/// and wait) rather than an I/O error (EIO at once): only when no device
/// answers for a mirror's every side, or for more raidz columns than its
/// parity.
#[test]
fn a_read_is_unreachable_only_when_no_device_answers() {
    let unreachable =
        |r: Result<Vec<u8>, VdevError>| matches!(r, Err(VdevError::Unreachable { .. }));
    let any = &mut |_: &[u8]| true;

    let mirror = TopVdev::new(0, 1, 12, Layout::Mirror, vec![leaf(31), leaf(32)]).unwrap();
    mirror.write(0, &pattern(0)).unwrap();
    let mut reg = Registry::default();
    let nxio = fault(FaultKind::Nxio, IoType::All, FREQ_PPM_MAX);
    let eio = fault(FaultKind::Io, IoType::Read, FREQ_PPM_MAX);
    reg.add("p", &mirror.leaves()[0], nxio).unwrap();
    assert!(mirror.read(0, UNIT as u64, any).is_ok(), "one side answers");
    reg.add("p", &mirror.leaves()[1], eio).unwrap();
    let r = mirror.read(0, UNIT as u64, any);
    assert!(r.is_err() && !unreachable(r), "one side answered with EIO");
    reg.remove_where(|_| true);
    mirror.leaves()[1].set_state(crate::LeafState::Offline);
    reg.add("p", &mirror.leaves()[0], nxio).unwrap();
    assert!(
        unreachable(mirror.read(0, UNIT as u64, any)),
        "nxio and offline"
    );
    reg.remove_where(|_| true);
    mirror.leaves()[1].set_state(crate::LeafState::Online);

    let raidz = TopVdev::new(
        0,
        1,
        12,
        Layout::Raidz { nparity: 1 },
        (0..4).map(|i| leaf(40 + i)).collect(),
    )
    .unwrap();
    let psize = 3 * UNIT as u64;
    raidz.write(0, &vec![7u8; psize as usize]).unwrap();
    reg.add("p", &raidz.leaves()[0], nxio).unwrap();
    assert!(
        raidz.read(0, psize, any).is_ok(),
        "parity covers one column"
    );
    reg.add("p", &raidz.leaves()[1], eio).unwrap();
    let r = raidz.read(0, psize, any);
    assert!(r.is_err() && !unreachable(r), "a column answered with EIO");
    reg.add("p", &raidz.leaves()[2], nxio).unwrap();
    assert!(
        unreachable(raidz.read(0, psize, any)),
        "two columns do not answer"
    );
}
