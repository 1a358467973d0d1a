//! Model-based test of snapshots, clones, rollback and destroy at the
//! dataset layer.
//!
//! A seeded sequence of operations — writes, truncates, object creates
//! and frees, snapshots, rollbacks, clones, promotions and destroys — runs
//! against a pool and against an in-memory model that keeps the expected
//! contents of every head and every snapshot. After every step, and after
//! an export and import at the end:
//! - every head and every snapshot reads back exactly the model's bytes;
//! - the space check is exact: every allocated byte is reachable and
//!   nothing reachable was freed (no leak, no double free);
//! - the space properties agree with what destroying would free, OpenZFS's
//!   definitions: a snapshot's `used` is what destroying it alone would
//!   reclaim, `usedbysnapshots` what destroying all of them would, and
//!   `used` = `usedbydataset` + `usedbysnapshots` (no children here).
//!
//! `TARN_SEED=n` replays one seed.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{devices, mirror, reimport};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_dmu::Objset;
use tarn_dsl::Pool;
use tarn_format::ObjType;

const BLOCK: u32 = 4096;
const FILE_MAX: u64 = 24 * BLOCK as u64;
const STEPS: usize = 60;

/// Files of one dataset or snapshot: object number → bytes.
type Files = BTreeMap<u64, Vec<u8>>;

#[derive(Default, Clone)]
struct Model {
    /// Heads by name.
    heads: BTreeMap<String, Files>,
    /// Snapshots by full name, oldest first per dataset (creation order).
    snaps: BTreeMap<String, Files>,
    order: Vec<String>,
}

impl Model {
    fn snaps_of(&self, ds: &str) -> Vec<String> {
        self.order
            .iter()
            .filter(|s| s.split_once('@').is_some_and(|(d, _)| d == ds))
            .cloned()
            .collect()
    }
}

fn bytes(rng: &mut ChaCha8Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.random()).collect()
}

fn read_files(os: &Objset, model: &Files, what: &str) {
    for (obj, want) in model {
        let info = os
            .object_info(*obj)
            .unwrap_or_else(|e| panic!("{what}: object {obj} missing: {e}"));
        assert!(
            info.size_blocks_bytes >= want.len() as u64,
            "{what}: object {obj} too short"
        );
        let mut got = vec![0u8; want.len()];
        os.read(*obj, 0, &mut got).unwrap();
        assert!(got == *want, "{what}: object {obj} differs");
    }
}

fn check(pool: &Pool, m: &Model, step: usize) {
    for (ds, files) in &m.heads {
        let os = pool.dataset_objset(ds).unwrap();
        read_files(&os, files, &format!("step {step}: {ds}"));
    }
    for (snap, files) in &m.snaps {
        let os = pool.snapshot_objset(snap).unwrap();
        read_files(&os, files, &format!("step {step}: {snap}"));
    }
    let check = pool.space_check().unwrap();
    assert!(check.is_exact(), "step {step}: space check {check:?}");
    for ds in m.heads.keys() {
        let snaps = pool.snapshots(ds);
        assert_eq!(snaps, m.snaps_of(ds), "step {step}: snapshots of {ds}");
        let space = pool.dataset_space(ds).unwrap();
        let all = pool.snapshots_destroy_space(&snaps).unwrap();
        assert_eq!(
            space.usedbysnapshots, all,
            "step {step}: {ds} usedbysnapshots"
        );
        assert_eq!(
            space.used,
            space.usedbydataset + space.usedbysnapshots,
            "step {step}: {ds} used"
        );
        for s in &snaps {
            let used: u64 = pool.dataset_prop(s, "used").unwrap().value.parse().unwrap();
            let alone = pool
                .snapshots_destroy_space(std::slice::from_ref(s))
                .unwrap();
            assert_eq!(used, alone, "step {step}: {s} used");
        }
    }
}

fn run(seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let devs = devices(2, 256 << 20);
    let pool = Pool::create(
        "tank",
        mirror(&devs),
        &[],
        &[("compression".into(), "off".into())],
    )
    .unwrap();
    pool.dataset_create("tank/a", &[]).unwrap();
    let mut m = Model::default();
    m.heads.insert("tank/a".into(), Files::new());
    let mut next_snap = 0;
    let mut next_clone = 0;
    for step in 0..STEPS {
        let heads: Vec<String> = m.heads.keys().cloned().collect();
        let ds = heads[rng.random_range(0..heads.len())].clone();
        let os = pool.dataset_objset(&ds).unwrap();
        match rng.random_range(0..100) {
            // Write into a file (creating one now and then).
            0..=34 => {
                let files = m.heads.get_mut(&ds).unwrap();
                let obj = if files.is_empty() || rng.random_bool(0.2) {
                    let obj = os.object_create(ObjType::PlainFile, BLOCK, 0).unwrap();
                    files.insert(obj, Vec::new());
                    obj
                } else {
                    *files.keys().nth(rng.random_range(0..files.len())).unwrap()
                };
                let off = rng.random_range(0..FILE_MAX / 2);
                let len = rng.random_range(1..FILE_MAX / 2) as usize;
                let data = bytes(&mut rng, len);
                os.write(obj, off, &data).unwrap();
                let f = files.get_mut(&obj).unwrap();
                let end = off as usize + len;
                if f.len() < end {
                    f.resize(end, 0);
                }
                f[off as usize..end].copy_from_slice(&data);
            }
            // Truncate a file.
            35..=44 => {
                let files = m.heads.get_mut(&ds).unwrap();
                if let Some(&obj) = files.keys().next() {
                    let f = files.get_mut(&obj).unwrap();
                    let to = rng.random_range(0..=f.len() as u64);
                    os.truncate(obj, to).unwrap();
                    f.truncate(to as usize);
                }
            }
            // Free a file.
            45..=52 => {
                let files = m.heads.get_mut(&ds).unwrap();
                if let Some(&obj) = files.keys().last() {
                    os.object_free(obj).unwrap();
                    files.remove(&obj);
                }
            }
            // Snapshot.
            53..=69 => {
                let name = format!("{ds}@s{next_snap}");
                next_snap += 1;
                pool.snapshot(std::slice::from_ref(&name), &[]).unwrap();
                m.snaps.insert(name.clone(), m.heads[&ds].clone());
                m.order.push(name);
            }
            // Destroy a snapshot (not one with clones).
            70..=79 => {
                let snaps = m.snaps_of(&ds);
                if !snaps.is_empty() {
                    let s = &snaps[rng.random_range(0..snaps.len())];
                    let cloned = !pool.snapshot_info(s).unwrap().clones.is_empty();
                    let r = pool.snapshots_destroy(std::slice::from_ref(s), false);
                    if cloned {
                        assert!(r.is_err(), "step {step}: {s} has clones");
                    } else {
                        r.unwrap();
                        m.snaps.remove(s);
                        m.order.retain(|x| x != s);
                    }
                }
            }
            // Roll back to the newest snapshot.
            80..=86 => {
                if let Some(last) = m.snaps_of(&ds).last() {
                    pool.rollback(last).unwrap();
                    m.heads.insert(ds.clone(), m.snaps[last].clone());
                }
            }
            // Clone a snapshot.
            87..=93 => {
                if !m.order.is_empty() && m.heads.len() < 5 {
                    let s = m.order[rng.random_range(0..m.order.len())].clone();
                    let name = format!("tank/c{next_clone}");
                    next_clone += 1;
                    pool.clone_create(&s, &name, &[]).unwrap();
                    m.heads.insert(name, m.snaps[&s].clone());
                }
            }
            // Promote a clone, or destroy one without snapshots.
            _ => {
                if pool.origin(&ds).is_some() {
                    if rng.random_bool(0.5) && m.snaps_of(&ds).is_empty() {
                        pool.dataset_destroy(&ds).unwrap();
                        m.heads.remove(&ds);
                    } else if pool.promote(&ds).is_ok() {
                        // The origin and older snapshots move to `ds`.
                        let origin = pool.dataset_prop(&ds, "origin").unwrap().value;
                        let _ = origin;
                        let mut renamed = Vec::new();
                        for s in m.order.iter_mut() {
                            let (d, n) = s.split_once('@').unwrap();
                            let name = format!("{ds}@{n}");
                            if d != ds && pool.snapshot_exists(&name) && !pool.snapshot_exists(s) {
                                renamed.push((s.clone(), name.clone()));
                                *s = name;
                            }
                        }
                        for (old, new) in renamed {
                            let files = m.snaps.remove(&old).unwrap();
                            m.snaps.insert(new, files);
                        }
                    }
                }
            }
        }
        pool.sync().unwrap();
        check(&pool, &m, step);
    }
    pool.export().unwrap();
    drop(pool);
    let pool = reimport(&devs);
    check(&pool, &m, STEPS);
    let _ = Arc::strong_count(&pool);
}

#[test]
fn snapshots_clones_and_rollbacks_match_the_model() {
    tarn_testkit::for_each_seed("snapshot model", 0, 6, run);
}
