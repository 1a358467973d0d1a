//! Crash test of snapshots, clones, rollbacks and destroys on
//! fault-injecting devices.
//!
//! A seeded workload writes objects in `tank/a` and, between syncs, takes
//! and destroys snapshots, rolls back, clones and promotes; a model keeps
//! every acknowledged state (heads and snapshots). Then writes start
//! failing after a random count, a few more writes and one more
//! administrative operation are attempted, every device loses its
//! unflushed writes (the last one maybe torn), and the pool is imported
//! again. It must be exactly one of the states the operation could leave:
//! before it, with the writes before it synced, or after it — every
//! snapshot whole or absent with its exact bytes — and the space check
//! must be exact: nothing leaked, nothing freed that is still referenced.
//!
//! `TARN_SEED=n` replays one seed; `TARN_SEEDS=n` runs n seeds.

use std::collections::BTreeMap;
use std::sync::Arc;

mod common;

use common::{mirror, reimport};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_dsl::Pool;
use tarn_format::ObjType;
use tarn_vdev::{BlockDevice, FaultDevice, MemDevice};

type Files = BTreeMap<u64, Vec<u8>>;

/// Heads and snapshots (full names) with their files.
#[derive(Clone, Default, PartialEq)]
struct State {
    heads: BTreeMap<String, Files>,
    snaps: BTreeMap<String, Files>,
}

fn devices(seed: u64) -> Vec<Arc<FaultDevice>> {
    (0..2)
        .map(|i| {
            Arc::new(FaultDevice::new(
                Arc::new(MemDevice::new(192 << 20)),
                seed * 17 + i,
            ))
        })
        .collect()
}

/// The devices as the pool takes them.
fn dyn_devs(devs: &[Arc<FaultDevice>]) -> Vec<Arc<dyn BlockDevice>> {
    devs.iter()
        .map(|d| d.clone() as Arc<dyn BlockDevice>)
        .collect()
}

/// A write (or object create/free) in a random head; mirrored in `s`.
fn write_op(pool: &Pool, s: &mut State, rng: &mut ChaCha8Rng) -> Result<(), String> {
    let heads: Vec<String> = s.heads.keys().cloned().collect();
    let ds = &heads[rng.random_range(0..heads.len())];
    let os = pool.dataset_objset(ds).map_err(|e| e.to_string())?;
    let files = s.heads.get_mut(ds).expect("listed");
    if files.is_empty() || rng.random_bool(0.2) {
        let obj = os
            .object_create(ObjType::PlainFile, 4096, 0)
            .map_err(|e| e.to_string())?;
        files.insert(obj, Vec::new());
        return Ok(());
    }
    let obj = *files
        .keys()
        .nth(rng.random_range(0..files.len()))
        .expect("some");
    if rng.random_bool(0.1) {
        os.object_free(obj).map_err(|e| e.to_string())?;
        files.remove(&obj);
        return Ok(());
    }
    let off = rng.random_range(0..64 << 10u64);
    let mut buf = vec![0u8; rng.random_range(1..48 << 10)];
    rng.fill(&mut buf[..]);
    os.write(obj, off, &buf).map_err(|e| e.to_string())?;
    let f = files.get_mut(&obj).expect("present");
    let end = off as usize + buf.len();
    if f.len() < end {
        f.resize(end, 0);
    }
    f[off as usize..end].copy_from_slice(&buf);
    Ok(())
}

/// One administrative operation; `s` becomes the state it leaves, even
/// when it fails: a failed sync may still have reached the disk.
fn admin_op(
    pool: &Pool,
    s: &mut State,
    rng: &mut ChaCha8Rng,
    serial: &mut u32,
) -> Result<(), String> {
    let heads: Vec<String> = s.heads.keys().cloned().collect();
    let ds = heads[rng.random_range(0..heads.len())].clone();
    let snaps: Vec<String> = pool.snapshots(&ds);
    let err = |e: tarn_dsl::DslError| e.to_string();
    *serial += 1;
    match rng.random_range(0..7) {
        0 | 1 => {
            let name = format!("{ds}@s{serial}");
            s.snaps.insert(name.clone(), s.heads[&ds].clone());
            pool.snapshot(std::slice::from_ref(&name), &[])
                .map_err(err)?;
        }
        2 => {
            let Some(v) = snaps.first() else {
                return Ok(());
            };
            if pool.snapshot_info(v).map_err(err)?.clones.is_empty() {
                s.snaps.remove(v);
                pool.snapshots_destroy(std::slice::from_ref(v), false)
                    .map_err(err)?;
            }
        }
        3 => {
            let Some(v) = snaps.last() else { return Ok(()) };
            s.heads.insert(ds.clone(), s.snaps[v].clone());
            pool.rollback(v).map_err(err)?;
        }
        4 => {
            let Some(v) = snaps.last() else { return Ok(()) };
            if s.heads.len() < 4 {
                let name = format!("tank/c{serial}");
                s.heads.insert(name.clone(), s.snaps[v].clone());
                pool.clone_create(v, &name, &[]).map_err(err)?;
            }
        }
        5 => {
            // Promote a clone: its origin's snapshots up to the origin
            // move to it, renamed.
            let Some((ds, origin)) = heads.iter().find_map(|h| Some((h, pool.origin(h)?))) else {
                return Ok(());
            };
            let (from, _) = origin.split_once('@').expect("a snapshot");
            let moved: Vec<String> = pool.snapshots(from);
            let upto = moved.iter().position(|n| *n == origin).expect("listed");
            for old in &moved[..=upto] {
                let files = s.snaps.remove(old).expect("in the model");
                let (_, snap) = old.split_once('@').expect("a snapshot");
                s.snaps.insert(format!("{ds}@{snap}"), files);
            }
            pool.promote(ds).map_err(err)?;
        }
        _ => {
            if pool.origin(&ds).is_some() && snaps.is_empty() {
                s.heads.remove(&ds);
                pool.dataset_destroy(&ds).map_err(err)?;
            }
        }
    }
    Ok(())
}

/// What the pool holds now, read the way the model is kept.
fn read_state(pool: &Pool, like: &State) -> Option<State> {
    let mut out = State::default();
    for (ds, files) in &like.heads {
        let os = pool.dataset_objset(ds).ok()?;
        out.heads.insert(ds.clone(), read_files(&os, files)?);
    }
    for (name, files) in &like.snaps {
        let os = pool.snapshot_objset(name).ok()?;
        out.snaps.insert(name.clone(), read_files(&os, files)?);
    }
    // Nothing more than the model has.
    let datasets: Vec<String> = pool
        .datasets()
        .into_iter()
        .filter(|d| d != "tank")
        .collect();
    if datasets != like.heads.keys().cloned().collect::<Vec<_>>() {
        return None;
    }
    let snaps: Vec<String> = datasets.iter().flat_map(|d| pool.snapshots(d)).collect();
    let mut want: Vec<String> = like.snaps.keys().cloned().collect();
    let mut got = snaps;
    want.sort();
    got.sort();
    (want == got).then_some(out)
}

/// How the pool differs from each candidate, for a failure message.
fn describe(pool: &Pool, candidates: &[&State]) -> String {
    let mut out = String::new();
    for (i, c) in candidates.iter().enumerate() {
        let names = |m: &BTreeMap<String, Files>| m.keys().cloned().collect::<Vec<_>>();
        out += &format!(
            "candidate {i}: heads {:?} snapshots {:?}\n",
            names(&c.heads),
            names(&c.snaps)
        );
        let Some(got) = read_state(pool, c) else {
            let datasets = pool.datasets();
            let snaps: Vec<String> = datasets.iter().flat_map(|d| pool.snapshots(d)).collect();
            out += &format!(
                "  pool has datasets {datasets:?} snapshots {snaps:?}, or a read failed\n"
            );
            continue;
        };
        for (name, files) in got.heads.iter().chain(&got.snaps) {
            let want = c
                .heads
                .get(name)
                .or(c.snaps.get(name))
                .expect("read from the model");
            for (obj, bytes) in files {
                if want[obj] != *bytes {
                    out += &format!("  {name} object {obj} differs\n");
                }
            }
        }
    }
    out
}

fn read_files(os: &tarn_dmu::Objset, like: &Files) -> Option<Files> {
    let mut out = Files::new();
    for (obj, want) in like {
        os.object_info(*obj).ok()?;
        let mut got = vec![0u8; want.len()];
        os.read(*obj, 0, &mut got).ok()?;
        out.insert(*obj, got);
    }
    Some(out)
}

fn run_seed(seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let devs = devices(seed);
    let pool = Pool::create("tank", mirror(&dyn_devs(&devs)), &[], &[]).expect("create");
    pool.dataset_create("tank/a", &[]).expect("dataset");
    let mut s = State::default();
    s.heads.insert("tank/a".into(), Files::new());
    let mut serial = 0;
    for _ in 0..rng.random_range(2..8) {
        for _ in 0..rng.random_range(0..12) {
            write_op(&pool, &mut s, &mut rng).expect("write before the crash");
        }
        pool.sync().expect("sync");
        admin_op(&pool, &mut s, &mut rng, &mut serial).expect("admin op before the crash");
    }
    pool.sync().expect("sync");
    let check = pool.space_check().expect("space check");
    assert!(check.is_exact(), "seed {seed}: before the crash: {check:?}");
    let before = s.clone();
    for d in &devs {
        d.fail_after_writes(rng.random_range(0..80u64));
    }
    // A background sync may carry any prefix of the writes.
    let mut synced_writes = s.clone();
    let mut prefixes = Vec::new();
    let mut ok = true;
    for _ in 0..rng.random_range(0..10) {
        if write_op(&pool, &mut synced_writes, &mut rng).is_err() {
            ok = false;
            break;
        }
        prefixes.push(synced_writes.clone());
    }
    let mut after = synced_writes.clone();
    if ok && admin_op(&pool, &mut after, &mut rng, &mut serial).is_err() {
        ok = false;
    }
    if !ok {
        // The operation may not have run at all.
        prefixes.push(synced_writes.clone());
    }
    if ok {
        let _ = pool.sync();
    }
    drop(pool);
    for d in &devs {
        d.crash();
        d.heal();
    }
    let pool = reimport(&dyn_devs(&devs));
    let mut candidates = vec![&before];
    candidates.extend(prefixes.iter());
    candidates.push(&after);
    let matched = candidates
        .iter()
        .any(|c| read_state(&pool, c).is_some_and(|got| got == **c));
    assert!(
        matched,
        "seed {seed}: the imported pool is none of the states the crash could leave \
         (the writes {}):\n{}",
        if ok { "succeeded" } else { "failed" },
        describe(&pool, &candidates)
    );
    let check = pool.space_check().expect("space check after import");
    assert!(check.is_exact(), "seed {seed}: after the crash: {check:?}");
    // It keeps working: a snapshot and a destroy of everything.
    pool.snapshot(&["tank/a@after".into()], &[])
        .expect("snapshot after import");
    pool.export().expect("export");
}

#[test]
fn snapshot_operations_survive_crashes_whole_or_not_at_all() {
    tarn_testkit::for_each_seed("snapshot crash test", 1, 32, run_seed);
}
