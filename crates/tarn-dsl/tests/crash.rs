//! Crash test of the whole engine below the POSIX layer: datasets, object
//! sets, objects and their data on fault-injecting devices.
//!
//! A seeded workload creates, writes, truncates and frees objects in two
//! datasets, creating and destroying a third dataset now and then, and
//! calls `Pool::sync` at random points; what each successful sync
//! acknowledged is recorded in a model. Then writes start failing after a
//! random count (so the crash can fall inside a commit), more work and a
//! last sync are attempted, every device loses its unflushed writes (the
//! last one maybe torn), and the pool is imported again. It must open at
//! the last acknowledged txg or at the one being committed, with every
//! object's bytes equal to that txg's model and every block checksum valid.
//!
//! `TARN_SEED=n` replays one seed; `TARN_SEEDS=n` runs n seeds.

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_dsl::Pool;
use tarn_format::label::VdevClass;
use tarn_format::ObjType;
use tarn_pool::import::import_devices;
use tarn_pool::NewTop;
use tarn_vdev::{BlockDevice, FaultDevice, Layout, MemDevice};

/// dataset -> object -> bytes
type Model = BTreeMap<String, BTreeMap<u64, Vec<u8>>>;

const DATASETS: [&str; 2] = ["tank/a", "tank/b"];

fn topology(seed: u64, devs: &[Arc<FaultDevice>]) -> Vec<NewTop> {
    let leaves = |idx: &[usize]| {
        idx.iter()
            .map(|&i| {
                let d: Arc<dyn BlockDevice> = devs[i].clone();
                (format!("mem{i}"), d, false)
            })
            .collect()
    };
    let (layout, idx): (Layout, &[usize]) = match seed % 3 {
        0 => (Layout::Mirror, &[0, 1]),
        1 => (Layout::Raidz { nparity: 1 }, &[0, 1, 2]),
        _ => (Layout::Single, &[0]),
    };
    vec![NewTop {
        layout,
        class: VdevClass::Normal,
        ashift: 12,
        leaves: leaves(idx),
    }]
}

fn reimport(devs: &[Arc<FaultDevice>]) -> Arc<Pool> {
    let devs: Vec<Arc<dyn BlockDevice>> = devs
        .iter()
        .map(|d| d.clone() as Arc<dyn BlockDevice>)
        .collect();
    Pool::open(import_devices(&devs).expect("spa import")).expect("pool import")
}

/// One random operation on a dataset; mirrors it in `model`.
fn random_op(pool: &Pool, model: &mut Model, rng: &mut ChaCha8Rng) -> Result<(), String> {
    let ds = DATASETS[rng.random_range(0..DATASETS.len())];
    let os = pool.dataset_objset(ds).map_err(|e| e.to_string())?;
    let objs = model.entry(ds.to_string()).or_default();
    let choice = rng.random_range(0..10);
    if objs.is_empty() || choice < 2 {
        let bs = [512u32, 4096, 16384, 131072][rng.random_range(0..4)];
        let obj = os
            .object_create(ObjType::PlainFile, bs, 0)
            .map_err(|e| e.to_string())?;
        objs.insert(obj, Vec::new());
        return Ok(());
    }
    let obj = *objs
        .keys()
        .nth(rng.random_range(0..objs.len()))
        .expect("non-empty");
    let data = objs.get_mut(&obj).expect("present");
    match choice {
        2 => {
            os.object_free(obj).map_err(|e| e.to_string())?;
            objs.remove(&obj);
        }
        3 => {
            let len = rng.random_range(0..=data.len() as u64 + 50_000);
            os.truncate(obj, len).map_err(|e| e.to_string())?;
            data.resize(len as usize, 0);
        }
        _ => {
            let off = rng.random_range(0..=data.len() as u64 + 20_000);
            let len = rng.random_range(1..100_000usize);
            let mut buf = vec![0u8; len];
            if rng.random_bool(0.5) {
                rng.fill(&mut buf[..]);
            } else {
                buf.fill(rng.random());
            }
            os.write(obj, off, &buf).map_err(|e| e.to_string())?;
            let end = off as usize + len;
            if data.len() < end {
                data.resize(end, 0);
            }
            data[off as usize..end].copy_from_slice(&buf);
        }
    }
    Ok(())
}

fn check(pool: &Pool, model: &Model, seed: u64) {
    for ds in DATASETS {
        let os = pool.dataset_objset(ds).expect("dataset exists");
        for (obj, want) in model.get(ds).into_iter().flatten() {
            os.object_info(*obj)
                .unwrap_or_else(|e| panic!("seed {seed}: {ds} object {obj}: {e}"));
            let mut got = vec![0u8; want.len()];
            os.read(*obj, 0, &mut got)
                .unwrap_or_else(|e| panic!("seed {seed}: read {ds}/{obj}: {e}"));
            assert!(
                got == *want,
                "seed {seed}: {ds} object {obj} differs from the committed model"
            );
        }
    }
}

fn run_seed(seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let devs: Vec<Arc<FaultDevice>> = (0..3)
        .map(|i| {
            Arc::new(FaultDevice::new(
                Arc::new(MemDevice::new(192 << 20)),
                seed * 31 + i,
            ))
        })
        .collect();
    let pool = Pool::create("tank", topology(seed, &devs), &[], &[]).expect("create");
    // Half the seeds condense the space map log almost every txg.
    if seed % 4 < 2 {
        pool.spa().set_condense_min_entries(16);
    }
    for ds in DATASETS {
        pool.dataset_create(ds, &[]).expect("create dataset");
    }
    let mut model = Model::new();
    let mut committed: BTreeMap<u64, Model> = BTreeMap::new();
    committed.insert(pool.spa().last_synced_txg(), model.clone());
    let rounds = rng.random_range(1..6);
    for _ in 0..rounds {
        for _ in 0..rng.random_range(1..25) {
            random_op(&pool, &mut model, &mut rng).expect("op before the crash");
        }
        if rng.random_bool(0.2) {
            pool.dataset_create("tank/tmp", &[]).expect("create tmp");
            pool.dataset_destroy("tank/tmp").expect("destroy tmp");
        }
        pool.sync().expect("sync");
        committed.insert(pool.spa().last_synced_txg(), model.clone());
    }
    let last_ok = pool.spa().last_synced_txg();
    let fail_after = rng.random_range(0..60u64);
    for d in &devs {
        d.fail_after_writes(fail_after);
    }
    let mut tail = model.clone();
    let mut ok = true;
    for _ in 0..rng.random_range(0..25) {
        if random_op(&pool, &mut tail, &mut rng).is_err() {
            ok = false;
            break;
        }
    }
    if ok {
        let _ = pool.sync();
    }
    drop(pool);
    for d in &devs {
        d.crash();
        d.heal();
    }
    let pool = reimport(&devs);
    let at = pool.spa().last_synced_txg();
    let model = if at == last_ok {
        &committed[&last_ok]
    } else {
        assert_eq!(at, last_ok + 1, "seed {seed}: imported at unexpected txg");
        assert!(
            ok,
            "seed {seed}: a txg committed although an operation failed"
        );
        &tail
    };
    check(&pool, model, seed);
    // The re-imported pool keeps working.
    pool.dataset_create("tank/after", &[])
        .expect("create after import");
    pool.sync().expect("sync after import");
    pool.export().expect("export");
}

#[test]
fn crash_at_random_points_keeps_acknowledged_state() {
    tarn_testkit::for_each_seed("engine crash test", 1, 40, run_seed);
}
