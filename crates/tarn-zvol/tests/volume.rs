//! A volume on a pool of simulated disks: geometry, reads and writes,
//! TRIM at block edges, zeroing, extents, resize, and power cuts at
//! seeded moments — every write a completed flush or FUA covered reads
//! back after the import and the log's replay; a block holds one of the
//! values written to it, never anything else.
//!
//! `TARN_SEED=n` replays one seed (single-threaded: exactly).

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_dsl::Pool;
use tarn_pool::import::import_devices;
use tarn_pool::NewTop;
use tarn_vdev::{BlockDevice, FaultDevice, MemDevice};
use tarn_zvol::{Extent, Settings, SyncMode, Unlimited, Zvol, ZvolError};

const DISK: u64 = 256 << 20;
const MIB: u64 = 1 << 20;

struct Disks {
    faults: Vec<Arc<FaultDevice>>,
    devs: Vec<Arc<dyn BlockDevice>>,
}

fn disks(seed: u64) -> Disks {
    let faults: Vec<Arc<FaultDevice>> = (0..2)
        .map(|i| {
            Arc::new(FaultDevice::new(
                Arc::new(MemDevice::new(DISK)),
                seed * 2 + i,
            ))
        })
        .collect();
    let devs = faults
        .iter()
        .map(|f| f.clone() as Arc<dyn BlockDevice>)
        .collect();
    Disks { faults, devs }
}

fn new_pool(d: &Disks) -> Arc<Pool> {
    let pool = Pool::create("tank", vec![NewTop::mem_mirror(&d.devs)], &[], &[]).unwrap();
    pool.dataset_create("tank/vol", &[]).unwrap();
    pool
}

fn open(pool: &Arc<Pool>, settings: Settings) -> Zvol {
    Zvol::open(
        pool.dataset_objset("tank/vol").unwrap(),
        pool.txg().clone(),
        Some(pool.dataset_zil("tank/vol").unwrap()),
        Arc::new(Unlimited),
        settings,
    )
    .unwrap()
}

fn format(pool: &Arc<Pool>, size: u64, bs: u32) {
    let os = pool.dataset_objset("tank/vol").unwrap();
    Zvol::format(&os, pool.txg(), size, bs).unwrap();
}

#[test]
fn geometry_is_checked_and_recorded() {
    assert!(tarn_zvol::check_block_size(3000).is_err());
    assert!(tarn_zvol::check_block_size(256 << 10).is_err());
    assert_eq!(tarn_zvol::check_block_size(512).unwrap(), 512);
    assert_eq!(tarn_zvol::round_size(10_000, 4096).unwrap(), 12_288);
    assert!(tarn_zvol::round_size(0, 4096).is_err());
    assert!(tarn_zvol::round_size(u64::MAX, 4096).is_err());
    // The reservation covers the data and its indirect blocks.
    let r = tarn_zvol::reservation_for(100 * MIB, 16384, 1);
    assert!(r > 100 * MIB && r < 105 * MIB, "{r}");
    assert!(tarn_zvol::reservation_for(100 * MIB, 16384, 2) > 200 * MIB);
    let d = disks(1);
    let pool = new_pool(&d);
    let os = pool.dataset_objset("tank/vol").unwrap();
    assert!(Zvol::geometry(&os).is_err(), "not a volume yet");
    format(&pool, 10 * MIB + 1, 8192);
    assert_eq!(Zvol::geometry(&os).unwrap(), (10 * MIB + 8192, 8192));
    assert!(
        Zvol::format(&os, pool.txg(), MIB, 8192).is_err(),
        "formatted once"
    );
    assert!(pool.is_volume("tank/vol"));
    assert_eq!(
        pool.volume_geometry("tank/vol").unwrap(),
        (10 * MIB + 8192, 8192)
    );
}

#[test]
fn reads_writes_trims_extents_and_resize() {
    let d = disks(2);
    let pool = new_pool(&d);
    format(&pool, 8 * MIB, 4096);
    let zv = open(&pool, Settings::default());
    assert_eq!((zv.size(), zv.block_size()), (8 * MIB, 4096));
    // Outside: refused, nothing written.
    assert!(matches!(
        zv.write(8 * MIB - 512, &[1; 1024], false),
        Err(ZvolError::OutOfRange { .. })
    ));
    assert!(zv.read(8 * MIB, 1).is_err());
    assert!(zv.trim(u64::MAX - 1, 2, false).is_err());
    // Unwritten reads as zeros; byte-granular writes work.
    let mut buf = vec![9u8; 8192];
    zv.read_into(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
    zv.write(100, &[7; 10_000], false).unwrap();
    zv.read_into(0, &mut buf).unwrap();
    assert!(buf[..100].iter().all(|&b| b == 0) && buf[100..].iter().all(|&b| b == 7));
    // A TRIM inside a block zeroes; across blocks it frees the middle.
    zv.write(MIB, &[5; 65536], false).unwrap();
    zv.trim(MIB + 1000, 20_000, true).unwrap();
    let mut b = vec![0u8; 65536];
    zv.read_into(MIB, &mut b).unwrap();
    assert!(b[..1000].iter().all(|&x| x == 5));
    assert!(b[1000..21_000].iter().all(|&x| x == 0));
    assert!(b[21_000..].iter().all(|&x| x == 5));
    pool.sync().unwrap();
    let ext = zv.extents(MIB, 65536).unwrap();
    assert_eq!(
        ext,
        vec![
            Extent {
                len: 4096,
                hole: false
            },
            Extent {
                len: 16384,
                hole: true
            },
            Extent {
                len: 65536 - 20480,
                hole: false
            },
        ]
    );
    // Zeroing with holes allowed frees; without, it writes zeros.
    zv.zero(MIB, 65536, true, false).unwrap();
    assert_eq!(
        zv.extents(MIB, 65536).unwrap(),
        vec![Extent {
            len: 65536,
            hole: true
        }]
    );
    zv.zero(2 * MIB, 8192, false, false).unwrap();
    zv.read_into(2 * MIB, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
    // The whole volume: data at the start, hole to the end.
    let all = zv.extents(0, u64::MAX).unwrap();
    assert_eq!(all.iter().map(|e| e.len).sum::<u64>(), 8 * MIB);
    assert!(!all[0].hole && all.last().unwrap().hole);
    // Grow: zeros past the old end; shrink: the end is gone for good.
    zv.write(8 * MIB - 4096, &[3; 4096], false).unwrap();
    assert_eq!(zv.resize(16 * MIB + 1).unwrap(), 16 * MIB + 4096);
    let mut tail = vec![1u8; 4096];
    zv.read_into(12 * MIB, &mut tail).unwrap();
    assert!(tail.iter().all(|&b| b == 0));
    zv.resize(4 * MIB).unwrap();
    zv.resize(8 * MIB).unwrap();
    zv.read_into(8 * MIB - 4096, &mut tail).unwrap();
    assert!(tail.iter().all(|&b| b == 0), "a shrink frees what it cut");
    assert_eq!(pool.volume_geometry("tank/vol").unwrap().0, 8 * MIB);
    // Read-only: every change refused.
    zv.set_settings(Settings {
        readonly: true,
        ..Settings::default()
    });
    assert!(matches!(zv.write(0, &[1], false), Err(ZvolError::ReadOnly)));
    assert!(matches!(zv.trim(0, 512, false), Err(ZvolError::ReadOnly)));
    // Suspended (a rollback under way): changes are stale.
    zv.set_settings(Settings::default());
    zv.suspend();
    assert!(matches!(zv.write(0, &[1], false), Err(ZvolError::Stale)));
}

/// What a block may hold after a crash: the value a flush made durable,
/// or one written since, or one a failed write or TRIM may have left
/// (a failure promises nothing either way).
struct Model {
    durable: Vec<u64>,
    pending: Vec<Vec<u64>>,
    maybe: Vec<Vec<u64>>,
}

const BLOCK: usize = 4096;
const BLOCKS: u64 = 512;

fn fill(v: u64) -> Vec<u8> {
    if v == 0 {
        return vec![0; BLOCK];
    }
    let mut b = vec![0u8; BLOCK];
    for (i, c) in b.chunks_mut(8).enumerate() {
        c.copy_from_slice(&(v ^ i as u64).to_le_bytes());
    }
    b
}

fn decode(b: &[u8]) -> Option<u64> {
    if b.iter().all(|&x| x == 0) {
        return Some(0);
    }
    let v = u64::from_le_bytes(b[..8].try_into().unwrap());
    (fill(v) == b).then_some(v)
}

fn crash_round(seed: u64, sync: SyncMode) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let d = disks(seed);
    let pool = new_pool(&d);
    format(&pool, BLOCKS * BLOCK as u64, 4096);
    let settings = Settings {
        sync,
        throughput: rng.random_range(0..4) == 0,
        ..Settings::default()
    };
    let zv = open(&pool, settings);
    let mut m = Model {
        durable: vec![0; BLOCKS as usize],
        pending: vec![Vec::new(); BLOCKS as usize],
        maybe: vec![Vec::new(); BLOCKS as usize],
    };
    let cut = rng.random_range(20..600u64);
    for f in &d.faults {
        f.fail_after_writes(cut);
    }
    let mut value = 0u64;
    for _ in 0..400 {
        let b = rng.random_range(0..BLOCKS);
        let off = b * BLOCK as u64;
        match rng.random_range(0..12) {
            0..=6 => {
                // One or several blocks, sometimes large (logged by pointer).
                let n = if rng.random_range(0..5) == 0 { 16 } else { 1 }.min(BLOCKS - b);
                let fua = rng.random_range(0..6) == 0;
                let mut data = Vec::with_capacity(n as usize * BLOCK);
                let mut vals = Vec::new();
                for _ in 0..n {
                    value += 1;
                    data.extend_from_slice(&fill(value));
                    vals.push(value);
                }
                let r = zv.write(off, &data, fua);
                let ok = r.is_ok();
                for (i, v) in vals.iter().enumerate() {
                    let k = (b + i as u64) as usize;
                    match ok {
                        false => m.maybe[k].push(*v),
                        true if fua || sync == SyncMode::Always => {
                            m.durable[k] = *v;
                            m.pending[k].clear();
                        }
                        true => m.pending[k].push(*v),
                    }
                }
            }
            7..=8 => {
                let n = rng.random_range(1..8).min(BLOCKS - b);
                let r = zv.trim(off, n * BLOCK as u64, false);
                let ok = r.is_ok();
                for k in b..b + n {
                    match ok {
                        true if sync == SyncMode::Always => {
                            m.durable[k as usize] = 0;
                            m.pending[k as usize].clear();
                        }
                        true => m.pending[k as usize].push(0),
                        false => m.maybe[k as usize].push(0),
                    }
                }
            }
            9 => pool.txg().request_sync(),
            _ => {
                let r = zv.flush();
                if r.is_ok() && sync != SyncMode::Disabled {
                    for (dur, p) in m.durable.iter_mut().zip(m.pending.iter_mut()) {
                        if let Some(&last) = p.last() {
                            *dur = last;
                        }
                        p.clear();
                    }
                }
            }
        }
    }
    // Power loss: everything not flushed to the disks is gone.
    drop(zv);
    drop(pool);
    for f in &d.faults {
        f.crash();
        f.heal();
    }
    let spa = import_devices(&d.devs).expect("import after the crash");
    let pool = Pool::open(spa).expect("open after the crash");
    let zv = open(&pool, Settings::default());
    let mut buf = vec![0u8; BLOCK];
    for b in 0..BLOCKS {
        zv.read_into(b * BLOCK as u64, &mut buf).unwrap();
        let v = decode(&buf).unwrap_or_else(|| panic!("seed {seed}: block {b} holds garbage"));
        let k = b as usize;
        assert!(
            v == m.durable[k] || m.pending[k].contains(&v) || m.maybe[k].contains(&v),
            "seed {seed}: block {b} reads {v}, durable {}, since {:?}, failed {:?}",
            m.durable[k],
            m.pending[k],
            m.maybe[k]
        );
    }
    // What the replay applied is durable: a second crash changes nothing.
    let before: Vec<Vec<u8>> = (0..BLOCKS)
        .map(|b| {
            let mut x = vec![0u8; BLOCK];
            zv.read_into(b * BLOCK as u64, &mut x).unwrap();
            x
        })
        .collect();
    drop(zv);
    drop(pool);
    for f in &d.faults {
        f.crash();
    }
    let pool = Pool::open(import_devices(&d.devs).unwrap()).unwrap();
    let zv = open(&pool, Settings::default());
    for (b, want) in before.iter().enumerate() {
        zv.read_into(b as u64 * BLOCK as u64, &mut buf).unwrap();
        assert!(
            buf == *want,
            "seed {seed}: block {b} changed after a second crash"
        );
    }
}

#[test]
fn acknowledged_flushes_survive_power_cuts() {
    tarn_testkit::for_each_seed("acknowledged_flushes_survive_power_cuts", 0, 24, |seed| {
        crash_round(seed, SyncMode::Standard)
    });
}

#[test]
fn sync_always_makes_every_write_durable() {
    tarn_testkit::for_each_seed("sync_always_makes_every_write_durable", 100, 6, |seed| {
        crash_round(seed, SyncMode::Always)
    });
}
