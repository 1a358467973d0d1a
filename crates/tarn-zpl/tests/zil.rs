//! fsync through the intent log, and replay after a crash, on the real
//! dataset layer over fault-injecting devices.
//!
//! A seeded workload writes, extends, truncates and chmods a few files,
//! calling fsync after some operations; each fsync's state of that file is
//! recorded as acknowledged. fsync must not commit a txg (that is the
//! point of the log) once the files exist. Then the devices fail after a
//! random number of writes, unflushed writes are dropped (the last one
//! maybe torn) and the pool is imported and mounted again, which replays
//! the log. Every file must be in a state the workload produced at or
//! after its last acknowledged fsync, and a second crash right after the
//! mount must change nothing (replay happened exactly once).
//!
//! `CRASH_SEED=n` replays one seed; `CRASH_SEEDS=n` runs n seeds.

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_dsl::Pool;
use tarn_format::label::VdevClass;
use tarn_pool::import::import_devices;
use tarn_pool::NewTop;
use tarn_vdev::{BlockDevice, FaultDevice, Layout, MemDevice};
use tarn_zpl::{Cred, SetAttr, Zpl, ZplOptions};

const DATASET: &str = "tank/fs";
const FILES: usize = 4;

fn mount(pool: &Arc<Pool>, format: bool) -> Zpl {
    let os = pool.dataset_objset(DATASET).unwrap();
    let opts = ZplOptions {
        zil: Some(pool.dataset_zil(DATASET).unwrap()),
        ..Default::default()
    };
    if format {
        Zpl::format(os, pool.txg().clone(), opts).unwrap()
    } else {
        Zpl::mount(os, pool.txg().clone(), opts).unwrap()
    }
}

fn crash_and_import(pool: Arc<Pool>, devs: &[Arc<FaultDevice>]) -> Arc<Pool> {
    for d in devs {
        d.crash();
        d.heal();
    }
    drop(pool);
    let devs: Vec<Arc<dyn BlockDevice>> = devs.iter().map(|d| d.clone() as _).collect();
    Pool::open(import_devices(&devs).expect("import")).expect("open")
}

/// What a file may look like: (mode bits, contents).
type Version = (u32, Vec<u8>);

fn state(zpl: &Zpl, ino: u64) -> Version {
    let a = zpl.getattr(ino).unwrap();
    let mut buf = vec![0u8; a.size as usize];
    let n = zpl.read(ino, 0, &mut buf).unwrap();
    assert_eq!(n, buf.len());
    (a.mode & 0o7777, buf)
}

fn run_seed(seed: u64) -> u64 {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let devs: Vec<Arc<FaultDevice>> = (0..2)
        .map(|i| {
            Arc::new(FaultDevice::new(
                Arc::new(MemDevice::new(256 << 20)),
                seed * 7 + i,
            ))
        })
        .collect();
    let top = NewTop {
        layout: Layout::Mirror,
        class: VdevClass::Normal,
        ashift: 12,
        leaves: devs
            .iter()
            .enumerate()
            .map(|(i, d)| (format!("mem{i}"), d.clone() as Arc<dyn BlockDevice>, false))
            .collect(),
    };
    let pool = Pool::create("tank", vec![top], &[], &[]).unwrap();
    pool.dataset_create(DATASET, &[]).unwrap();
    let zpl = mount(&pool, true);
    let root = zpl.root_ino();
    let cred = Cred::root();
    let inos: Vec<u64> = (0..FILES)
        .map(|i| {
            let a = zpl
                .create(root, format!("f{i}").as_bytes(), 0o644, &cred, true)
                .unwrap();
            a.ino
        })
        .collect();
    // The creates are not logged: this fsync commits their txg.
    zpl.fsync(inos[0]).unwrap();
    let synced = pool.txg().last_synced();
    // Per file: every version since (and including) the acknowledged one.
    let mut versions: BTreeMap<u64, Vec<Version>> =
        inos.iter().map(|&i| (i, vec![state(&zpl, i)])).collect();
    let ops = rng.random_range(10..120);
    let fail_at = rng.random_range(0..ops);
    for op in 0..ops {
        if op == fail_at {
            for d in &devs {
                d.fail_after_writes(rng.random_range(0..40));
            }
        }
        let ino = inos[rng.random_range(0..FILES)];
        let cur = state(&zpl, ino);
        let r = match rng.random_range(0..10) {
            0 => {
                let size = rng.random_range(0..=cur.1.len() as u64 + 9000);
                let sa = SetAttr {
                    size: Some(size),
                    ..SetAttr::default()
                };
                zpl.setattr(ino, &sa, &cred).map(|_| ())
            }
            1 => {
                let sa = SetAttr {
                    mode: Some(rng.random_range(0o400..0o777)),
                    ..SetAttr::default()
                };
                zpl.setattr(ino, &sa, &cred).map(|_| ())
            }
            _ => {
                let off = rng.random_range(0..=cur.1.len() as u64 + 5000);
                let len = rng.random_range(1..70_000usize);
                let mut data = vec![0u8; len];
                rng.fill(&mut data[..]);
                zpl.write(ino, off, &data, &cred).map(|_| ())
            }
        };
        if r.is_err() {
            break; // the devices started failing
        }
        let now = state(&zpl, ino);
        versions.get_mut(&ino).unwrap().push(now);
        if rng.random_bool(0.4) {
            match zpl.fsync(ino) {
                Ok(()) => {
                    // Acknowledged: older versions may no longer appear.
                    let v = versions.get_mut(&ino).unwrap();
                    let last = v.len() - 1;
                    v.drain(..last);
                }
                Err(_) => break,
            }
        }
    }
    if fail_at >= ops {
        // No device failure: at least the log carried the fsyncs.
        assert_eq!(
            pool.txg().last_synced(),
            synced,
            "seed {seed}: fsync committed a txg instead of the log"
        );
    }
    drop(zpl);
    let pool = crash_and_import(pool, &devs);
    let zpl = mount(&pool, false);
    let replayed = pool.dataset_zil(DATASET).unwrap().stats().records_replayed;
    let mut after = BTreeMap::new();
    for &ino in &inos {
        let got = state(&zpl, ino);
        assert!(
            versions[&ino].contains(&got),
            "seed {seed}: file {ino} is in no state the workload produced since its last fsync \
             ({} bytes, mode {:o}; {} candidates)",
            got.1.len(),
            got.0,
            versions[&ino].len()
        );
        after.insert(ino, got);
    }
    drop(zpl);
    // Replay happened once: a crash right now changes nothing.
    let pool = crash_and_import(pool, &devs);
    let zpl = mount(&pool, false);
    for &ino in &inos {
        assert_eq!(state(&zpl, ino), after[&ino], "seed {seed}: second replay");
    }
    drop(zpl);
    pool.export().unwrap();
    replayed
}

fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("CRASH_SEED") {
        return vec![s.parse().expect("CRASH_SEED is a number")];
    }
    let n = std::env::var("CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    (0..n).collect()
}

#[test]
fn fsynced_state_survives_crashes_through_the_log() {
    let mut replayed = 0;
    let seeds = seeds();
    for &seed in &seeds {
        match std::panic::catch_unwind(|| run_seed(seed)) {
            Ok(n) => replayed += n,
            Err(e) => {
                eprintln!("failing seed: CRASH_SEED={seed}");
                std::panic::resume_unwind(e);
            }
        }
    }
    eprintln!("{} seeds, {replayed} records replayed", seeds.len());
    assert!(seeds.len() < 5 || replayed > 0, "no seed exercised replay");
}
