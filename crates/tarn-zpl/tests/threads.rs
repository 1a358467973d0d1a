//! Many threads on one dataset and one file at once, checked against a
//! model: what the per-object locks of the object layer and the
//! reader-split locks of this one must not break.
//!
//! On a pool (mirror of memory devices, its txg engine syncing by itself)
//! with an intent log, `WRITERS` threads share one file, each owning
//! every `WRITERS`th 4 KiB slot of it and writing versions of them
//! (random slot, write, sometimes `fsync`), reading its own slots back
//! (exactly its last version) and other threads' (some version of the
//! right slot, or zeros before the first); one more thread owns the
//! file's tail, which it truncates and grows again; each writer also
//! writes, truncates, reads and fsyncs a file of its own. Meanwhile a
//! thread takes snapshots, noting each slot's completed version before
//! and after. At the end every file must equal its model, every
//! snapshot must hold, per slot, a version between the two it noted,
//! and after export and import the files must still be the model.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_dsl::Pool;
use tarn_pool::import::import_devices;
use tarn_pool::NewTop;
use tarn_vdev::{BlockDevice, MemDevice};
use tarn_zpl::{Cred, SetAttr, Settings, Zpl, ZplOptions};

const WRITERS: usize = 4;
const SLOT: usize = 4096;
/// Slots of the shared file, `WRITERS` owners interleaved.
const SLOTS: usize = 256;
/// Where the tail (the truncating thread's) starts.
const TAIL_AT: u64 = (SLOTS * SLOT) as u64;
const TAIL_MAX: u64 = 64 << 10;
const OPS: usize = 1500;
const OWN_BYTES: u64 = 256 << 10;

fn seed() -> u64 {
    std::env::var("TARN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x7448_5245_4144)
}

/// The contents of `slot` at `version` (0: never written, zeros).
fn pattern(slot: usize, version: u64) -> Vec<u8> {
    if version == 0 {
        return vec![0; SLOT];
    }
    let mut v = vec![0u8; SLOT];
    for (i, chunk) in v.chunks_exact_mut(16).enumerate() {
        chunk[..8].copy_from_slice(&(slot as u64).to_le_bytes());
        chunk[8..].copy_from_slice(&(version ^ (i as u64) << 48).to_le_bytes());
    }
    v
}

/// The version `bytes` hold as slot `slot`'s contents, if they are one.
fn version_of(slot: usize, bytes: &[u8]) -> Option<u64> {
    if bytes.iter().all(|&b| b == 0) {
        return Some(0);
    }
    let v = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    (pattern(slot, v) == bytes).then_some(v)
}

fn mount(pool: &Arc<Pool>, name: &str, readonly: bool) -> Zpl {
    let os = if name.contains('@') {
        pool.snapshot_objset(name).unwrap()
    } else {
        pool.dataset_objset(name).unwrap()
    };
    let opts = ZplOptions {
        settings: Settings {
            recordsize: 16 << 10,
            readonly,
            ..Settings::default()
        },
        zil: (!readonly).then(|| pool.dataset_zil(name).unwrap()),
        ..Default::default()
    };
    match Zpl::mount(os.clone(), pool.txg().clone(), opts.clone()) {
        Ok(z) => z,
        Err(_) => Zpl::format(os, pool.txg().clone(), opts).unwrap(),
    }
}

fn ino_of(zpl: &Zpl, name: &str) -> u64 {
    zpl.lookup(zpl.root_ino(), name.as_bytes(), &Cred::root())
        .unwrap()
        .ino
}

fn read_all(zpl: &Zpl, ino: u64) -> Vec<u8> {
    let size = zpl.getattr(ino).unwrap().size;
    let mut buf = vec![0u8; size as usize];
    let n = zpl.read(ino, 0, &mut buf).unwrap();
    assert_eq!(n as u64, size);
    buf
}

/// What the threads leave: the shared file's versions per slot, the
/// tail's bytes, each writer's own file.
struct Model {
    slots: Vec<u64>,
    tail: Vec<u8>,
    own: Vec<Vec<u8>>,
}

fn check_files(zpl: &Zpl, m: &Model, when: &str) {
    let shared = read_all(zpl, ino_of(zpl, "shared"));
    assert!(shared.len() as u64 >= TAIL_AT, "{when}: shared file shrank");
    for (slot, &v) in m.slots.iter().enumerate() {
        let got = &shared[slot * SLOT..(slot + 1) * SLOT];
        assert_eq!(version_of(slot, got), Some(v), "{when}: slot {slot}");
    }
    assert_eq!(&shared[TAIL_AT as usize..], &m.tail[..], "{when}: tail");
    for (t, own) in m.own.iter().enumerate() {
        let got = read_all(zpl, ino_of(zpl, &format!("own-{t}")));
        assert!(got == *own, "{when}: own-{t} differs from its model");
    }
}

#[test]
fn many_threads_on_one_file_and_one_dataset_match_the_model() {
    let devs: Vec<Arc<dyn BlockDevice>> = (0..2)
        .map(|_| Arc::new(MemDevice::new(512 << 20)) as Arc<dyn BlockDevice>)
        .collect();
    let pool = Pool::create("tank", vec![NewTop::mem_mirror(&devs)], &[], &[]).unwrap();
    pool.dataset_create("tank/fs", &[]).unwrap();
    let zpl = mount(&pool, "tank/fs", false);
    let cred = Cred::root();
    let root = zpl.root_ino();
    let shared = zpl
        .create(root, b"shared", 0o644, &cred, false)
        .unwrap()
        .ino;
    zpl.setattr(
        shared,
        &SetAttr {
            size: Some(TAIL_AT),
            ..SetAttr::default()
        },
        &cred,
    )
    .unwrap();
    let own: Vec<u64> = (0..WRITERS)
        .map(|t| {
            let name = format!("own-{t}");
            zpl.create(root, name.as_bytes(), 0o644, &cred, false)
                .unwrap()
                .ino
        })
        .collect();
    // Each slot's last completed version and the version being written
    // (both set by its owner only: `started` before the write, `done`
    // after it).
    let done: Vec<AtomicU64> = (0..SLOTS).map(|_| AtomicU64::new(0)).collect();
    let started: Vec<AtomicU64> = (0..SLOTS).map(|_| AtomicU64::new(0)).collect();
    let stop = AtomicBool::new(false);
    let base = seed();
    let (model, snaps) = std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                let (zpl, cred, done, started, own) = (&zpl, &cred, &done, &started, own[t]);
                s.spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(base ^ t as u64);
                    let mine: Vec<usize> = (t..SLOTS).step_by(WRITERS).collect();
                    let mut model_own: Vec<u8> = Vec::new();
                    let mut buf = vec![0u8; SLOT];
                    for op in 0..OPS {
                        match rng.random_range(0..10) {
                            0..=3 => {
                                let slot = mine[rng.random_range(0..mine.len())];
                                let v = done[slot].load(Ordering::Relaxed) + 1;
                                let off = (slot * SLOT) as u64;
                                started[slot].store(v, Ordering::SeqCst);
                                zpl.write(shared, off, &pattern(slot, v), cred).unwrap();
                                done[slot].store(v, Ordering::SeqCst);
                                if rng.random_range(0..8) == 0 {
                                    zpl.fsync(shared).unwrap();
                                }
                            }
                            4..=5 => {
                                let slot = rng.random_range(0..SLOTS);
                                let seen = done[slot].load(Ordering::SeqCst);
                                zpl.read(shared, (slot * SLOT) as u64, &mut buf).unwrap();
                                let v = version_of(slot, &buf)
                                    .unwrap_or_else(|| panic!("slot {slot}: torn or foreign"));
                                if slot % WRITERS == t {
                                    assert_eq!(v, seen, "my slot {slot} after op {op}");
                                } else {
                                    assert!(v >= seen, "slot {slot} went back: {v} < {seen}");
                                }
                            }
                            6..=7 => {
                                let off = rng.random_range(0..OWN_BYTES);
                                let len = rng.random_range(1..20_000usize);
                                let byte = rng.random::<u8>() | 1;
                                zpl.write(own, off, &vec![byte; len], cred).unwrap();
                                let end = off as usize + len;
                                if model_own.len() < end {
                                    model_own.resize(end, 0);
                                }
                                model_own[off as usize..end].fill(byte);
                                if rng.random_range(0..4) == 0 {
                                    zpl.fsync(own).unwrap();
                                }
                            }
                            8 => {
                                let size = rng.random_range(0..OWN_BYTES);
                                let sa = SetAttr {
                                    size: Some(size),
                                    ..SetAttr::default()
                                };
                                zpl.setattr(own, &sa, cred).unwrap();
                                model_own.resize(size as usize, 0);
                            }
                            _ => {
                                let got = read_all(zpl, own);
                                assert!(got == model_own, "own-{t} after op {op}");
                            }
                        }
                    }
                    model_own
                })
            })
            .collect();
        // The tail: truncated and grown again, by one thread.
        let tail = {
            let (zpl, cred, stop) = (&zpl, &cred, &stop);
            s.spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(base ^ 0x7a11);
                let mut model: Vec<u8> = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if rng.random_bool(0.3) {
                        let keep = rng.random_range(0..=model.len() as u64);
                        let sa = SetAttr {
                            size: Some(TAIL_AT + keep),
                            ..SetAttr::default()
                        };
                        zpl.setattr(shared, &sa, cred).unwrap();
                        model.truncate(keep as usize);
                    } else {
                        let off = rng.random_range(0..TAIL_MAX - 9000);
                        let len = rng.random_range(1..9000usize);
                        let byte = rng.random::<u8>() | 1;
                        zpl.write(shared, TAIL_AT + off, &vec![byte; len], cred)
                            .unwrap();
                        let end = off as usize + len;
                        if model.len() < end {
                            model.resize(end, 0);
                        }
                        model[off as usize..end].fill(byte);
                    }
                }
                model
            })
        };
        // Snapshots, each with the completed versions before and after.
        let snapper = {
            let (pool, done, started, stop) = (&pool, &done, &started, &stop);
            s.spawn(move || {
                let mut snaps = Vec::new();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) && n < 6 {
                    std::thread::sleep(std::time::Duration::from_millis(30));
                    let before: Vec<u64> = done.iter().map(|d| d.load(Ordering::SeqCst)).collect();
                    let name = format!("tank/fs@s{n}");
                    pool.snapshot(std::slice::from_ref(&name), &[]).unwrap();
                    // A write the snapshot holds had started before it was
                    // taken.
                    let after: Vec<u64> =
                        started.iter().map(|d| d.load(Ordering::SeqCst)).collect();
                    snaps.push((name, before, after));
                    n += 1;
                }
                snaps
            })
        };
        let own_models: Vec<Vec<u8>> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        let tail = tail.join().unwrap();
        let snaps = snapper.join().unwrap();
        let slots = done.iter().map(|d| d.load(Ordering::SeqCst)).collect();
        (
            Model {
                slots,
                tail,
                own: own_models,
            },
            snaps,
        )
    });
    assert!(!snaps.is_empty(), "no snapshot was taken");
    check_files(&zpl, &model, "live");
    for (name, before, after) in &snaps {
        let snap = mount(&pool, name, true);
        let data = read_all(&snap, ino_of(&snap, "shared"));
        for slot in 0..SLOTS {
            let got = version_of(slot, &data[slot * SLOT..(slot + 1) * SLOT])
                .unwrap_or_else(|| panic!("{name}: slot {slot} torn"));
            assert!(
                (before[slot]..=after[slot]).contains(&got),
                "{name}: slot {slot} holds version {got}, not in {}..={}",
                before[slot],
                after[slot]
            );
        }
    }
    drop(zpl);
    pool.export().unwrap();
    drop(pool);
    let pool = Pool::open(import_devices(&devs).unwrap()).unwrap();
    let zpl = mount(&pool, "tank/fs", false);
    check_files(&zpl, &model, "after export and import");
    drop(zpl);
    pool.export().unwrap();
}
