//! Deterministic crash test of the pool layer.
//!
//! A random workload writes and frees blocks on fault-injecting devices in
//! a random topology, committing a txg at a time. At a random moment — in
//! the middle of a txg, or in the middle of a commit (writes start failing
//! after a random count) — every device loses its unflushed writes and the
//! last one may be torn. The pool is then imported again from its labels
//! and must come back at a committed txg (the last one, or the one whose
//! commit was under way if its uberblock made it) with every block of that
//! txg reading back exactly, every checksum valid. The workload then goes
//! on for a few txgs on the re-imported pool, which catches a space map
//! that lost an allocation (a later write would overwrite live data).
//!
//! Every failure prints its seed; `TARN_SEED=n` replays one seed and
//! `TARN_SEEDS=n` runs more of them.

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_format::label::VdevClass;
use tarn_format::{BlockPtr, Compression, ObjType};
use tarn_pool::import::import_devices;
use tarn_pool::{BlockStore, NewTop, Spa, WriteProps};
use tarn_vdev::{BlockDevice, FaultDevice, Layout, MemDevice};

const DEV_SIZE: u64 = 80 << 20;

type Model = BTreeMap<u64, Vec<u8>>;

struct World {
    devs: Vec<Arc<FaultDevice>>,
    spa: Spa,
    /// key -> (bp, data) in the current, uncommitted state
    live: BTreeMap<u64, (BlockPtr, Vec<u8>)>,
    root: Option<BlockPtr>,
    next_key: u64,
    rng: ChaCha8Rng,
}

fn topology(seed: u64, devs: &[Arc<FaultDevice>]) -> Vec<NewTop> {
    let d = |i: usize| {
        let dev: Arc<dyn BlockDevice> = devs[i].clone();
        (format!("mem{i}"), dev, false)
    };
    let top = |layout: Layout, idx: &[usize]| NewTop {
        layout,
        class: VdevClass::Normal,
        ashift: if seed.is_multiple_of(2) { 12 } else { 9 },
        leaves: idx.iter().map(|&i| d(i)).collect(),
    };
    match seed % 6 {
        0 => vec![top(Layout::Single, &[0])],
        1 => vec![top(Layout::Mirror, &[0, 1])],
        2 => vec![top(Layout::Raidz { nparity: 1 }, &[0, 1, 2])],
        3 => vec![top(Layout::Raidz { nparity: 2 }, &[0, 1, 2, 3])],
        4 => vec![top(Layout::Mirror, &[0, 1]), top(Layout::Mirror, &[2, 3])],
        _ => vec![top(Layout::Single, &[0]), top(Layout::Single, &[1])],
    }
}

fn random_data(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let sectors = rng.random_range(1..=128usize);
    let mut v = vec![0u8; sectors * 512];
    if rng.random_bool(0.5) {
        rng.fill(&mut v[..]);
    } else {
        // Compressible: a few distinct bytes in runs.
        let b: u8 = rng.random();
        for (i, x) in v.iter_mut().enumerate() {
            *x = b.wrapping_add((i / 97) as u8);
        }
    }
    v
}

fn props(typ: ObjType, copies: u8) -> WriteProps {
    WriteProps {
        copies,
        compression: Compression::Lz4,
        ..WriteProps::metadata(typ, 0)
    }
}

impl World {
    fn new(seed: u64) -> World {
        let devs: Vec<Arc<FaultDevice>> = (0..4)
            .map(|i| {
                Arc::new(FaultDevice::new(
                    Arc::new(MemDevice::new(DEV_SIZE)),
                    seed * 7 + i,
                ))
            })
            .collect();
        let spa = Spa::create("tank", topology(seed, &devs)).expect("create");
        // Half the seeds condense the space map log almost every txg.
        if seed % 4 < 2 {
            spa.set_condense_min_entries(16);
        }
        World {
            devs,
            spa,
            live: BTreeMap::new(),
            root: None,
            next_key: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    fn model(&self) -> Model {
        self.live
            .iter()
            .map(|(k, (_, d))| (*k, d.clone()))
            .collect()
    }

    /// One txg of random writes and frees, then the root block.
    fn run_txg(&mut self, txg: u64) -> Result<BlockPtr, String> {
        let ops = self.rng.random_range(1..20);
        for _ in 0..ops {
            let choice = self.rng.random_range(0..10);
            if choice < 3 && !self.live.is_empty() {
                let k = *self
                    .live
                    .keys()
                    .nth(self.rng.random_range(0..self.live.len()))
                    .unwrap();
                let (bp, _) = self.live.remove(&k).unwrap();
                self.spa.free(txg, &bp);
            } else {
                let data = random_data(&mut self.rng);
                let copies = self.rng.random_range(1..=2);
                let bp = self
                    .spa
                    .write(txg, &data, &props(ObjType::Raw, copies))
                    .map_err(|e| e.to_string())?;
                self.live.insert(self.next_key, (bp, data));
                self.next_key += 1;
            }
        }
        let mut root = Vec::new();
        for (k, (bp, _)) in &self.live {
            root.extend_from_slice(&k.to_le_bytes());
            root.extend_from_slice(&bp.encode());
        }
        root.resize((root.len() + 8).next_multiple_of(512), 0);
        let bp = self
            .spa
            .write(txg, &root, &props(ObjType::Objset, 2))
            .map_err(|e| e.to_string())?;
        if let Some(old) = self.root.replace(bp) {
            self.spa.free(txg, &old);
        }
        Ok(bp)
    }
}

fn reimport(devs: &[Arc<FaultDevice>]) -> Spa {
    let devs: Vec<Arc<dyn BlockDevice>> = devs
        .iter()
        .map(|d| d.clone() as Arc<dyn BlockDevice>)
        .collect();
    import_devices(&devs).expect("import")
}

/// Reads the tree of the committed root and compares it with `model`.
fn check(spa: &Spa, model: &Model) -> BTreeMap<u64, (BlockPtr, Vec<u8>)> {
    let root = spa.uberblock().rootbp;
    let bytes = spa.read(&root).expect("root readable");
    let mut found = BTreeMap::new();
    for rec in bytes.chunks_exact(136) {
        let bp = BlockPtr::decode(&rec[8..]).expect("valid pointer");
        if bp.is_hole() {
            break;
        }
        let k = u64::from_le_bytes(rec[..8].try_into().unwrap());
        let data = spa.read(&bp).expect("block readable and checksum valid");
        found.insert(k, (bp, data));
    }
    let got: Model = found.iter().map(|(k, (_, d))| (*k, d.clone())).collect();
    assert_eq!(got.len(), model.len(), "number of blocks");
    assert!(
        got == *model,
        "block contents differ from the committed model"
    );
    found
}

fn run_seed(seed: u64) {
    let mut w = World::new(seed);
    let mut txg = tarn_pool::TXG_INITIAL;
    let mut committed: BTreeMap<u64, Model> = BTreeMap::new();
    let txgs = w.rng.random_range(1..10);
    for _ in 0..txgs {
        let root = w.run_txg(txg).expect("write");
        w.spa.commit(txg, root).expect("commit");
        committed.insert(txg, w.model());
        txg += 1;
    }
    // The crash: either mid-txg, or with writes failing mid-commit.
    let attempted = txg;
    let fail_after = w.rng.random_range(0..40u64);
    for d in &w.devs {
        d.fail_after_writes(fail_after);
    }
    if let Ok(root) = w.run_txg(txg) {
        let model = w.model();
        if w.rng.random_bool(0.7) && w.spa.commit(txg, root).is_ok() {
            committed.insert(txg, model.clone());
        }
        // Whether or not the commit reported success, the uberblock of
        // `attempted` may be on disk; remember what it would show.
        committed.entry(attempted).or_insert(model);
    }
    for d in &w.devs {
        d.crash();
        d.heal();
    }
    let devs = w.devs.clone();
    let spa = reimport(&devs);
    if seed % 4 < 2 {
        spa.set_condense_min_entries(16);
    }
    let at = spa.last_synced_txg();
    let last_ok = *committed.keys().filter(|&&t| t < attempted).max().unwrap();
    assert!(
        at == last_ok || at == attempted,
        "imported at txg {at}, expected {last_ok} or {attempted}"
    );
    let found = check(&spa, &committed[&at]);
    // Go on writing on the re-imported pool: nothing live may be overwritten.
    let mut w2 = World {
        live: found,
        root: Some(spa.uberblock().rootbp),
        next_key: 1 << 32,
        rng: ChaCha8Rng::seed_from_u64(seed ^ 0xfeed),
        devs,
        spa,
    };
    for txg in at + 1..at + 5 {
        let root = w2.run_txg(txg).expect("write after import");
        w2.spa.commit(txg, root).expect("commit after import");
    }
    let model = w2.model();
    let spa = reimport(&w2.devs);
    check(&spa, &model);
}

#[test]
fn crash_at_random_points_keeps_committed_state() {
    tarn_testkit::for_each_seed("crash test", 1, 48, run_seed);
}
