//! Model-based test of the object layer: random create / free / write /
//! truncate / punch / read / sync / reopen sequences against a
//! `BTreeMap<u64, Vec<u8>>`, on a `MemBlockStore`, ending with a leak
//! check: the blocks the store holds are exactly the blocks reachable from
//! the synced root.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_dmu::{DmuError, Objset};
use tarn_format::objset::ObjsetType;
use tarn_format::ObjType;
use tarn_pool::store::MemBlockStore;

struct Harness {
    store: Arc<MemBlockStore>,
    os: Objset,
    model: BTreeMap<u64, Vec<u8>>,
    txg: u64,
    rng: ChaCha8Rng,
}

fn reachable(os: &Objset) -> usize {
    let mut seen = HashSet::new();
    os.walk_blocks(&mut |bp| {
        assert!(seen.insert(bp.dvas[0]), "block reachable twice: {bp:?}");
    })
    .unwrap();
    seen.len()
}

impl Harness {
    fn new(seed: u64) -> Self {
        let store = Arc::new(MemBlockStore::new());
        let os = Objset::create(store.clone(), ObjsetType::Filesystem);
        Harness {
            store,
            os,
            model: BTreeMap::new(),
            txg: 1,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    fn pick(&mut self) -> Option<u64> {
        if self.model.is_empty() {
            return None;
        }
        let i = self.rng.random_range(0..self.model.len());
        self.model.keys().nth(i).copied()
    }

    fn bs(&self, obj: u64) -> u64 {
        u64::from(self.os.object_info(obj).unwrap().block_size)
    }

    fn step(&mut self) {
        match self.rng.random_range(0..20) {
            0..=2 => self.create(),
            3 => self.free(),
            4..=9 => self.write(),
            10 | 11 => self.truncate(),
            12 => self.punch(),
            13..=15 => self.check_random_read(),
            16 => self.sync(),
            17 => self.reopen(),
            18 => self.check_seek(),
            _ => self.bonus(),
        }
    }

    fn create(&mut self) {
        let bs = [512u32, 4096, 16384, 131072][self.rng.random_range(0..4)];
        let obj = self.os.object_create(ObjType::PlainFile, bs, 0).unwrap();
        assert!(
            self.model.insert(obj, Vec::new()).is_none(),
            "object {obj} handed out twice"
        );
        let lower_free = (1..obj).find(|o| !self.model.contains_key(o));
        // Numbers freed in the open txg are reusable only after it syncs.
        if let Some(o) = lower_free {
            assert!(matches!(
                self.os.object_info(o),
                Err(DmuError::NoSuchObject(_))
            ));
        }
    }

    fn free(&mut self) {
        let Some(obj) = self.pick() else { return };
        self.os.object_free(obj).unwrap();
        self.model.remove(&obj);
        assert!(matches!(
            self.os.read(obj, 0, &mut [0u8; 1]),
            Err(DmuError::NoSuchObject(_))
        ));
    }

    fn write(&mut self) {
        let Some(obj) = self.pick() else { return };
        let bs = self.bs(obj);
        // Mostly near the start; sometimes far out, to grow 2-3 levels.
        let off = match self.rng.random_range(0..10) {
            0 => self.rng.random_range(0..(2 << 20)),
            _ => self.rng.random_range(0..8 * bs),
        };
        let len = self.rng.random_range(1..=2 * bs.min(16384) as usize + 7);
        let mut data = vec![0u8; len];
        if self.rng.random_bool(0.9) {
            self.rng.fill(&mut data[..]);
        }
        self.os.write(obj, off, &data).unwrap();
        let m = self.model.get_mut(&obj).unwrap();
        let end = off as usize + len;
        if m.len() < end {
            m.resize(end, 0);
        }
        m[off as usize..end].copy_from_slice(&data);
    }

    fn truncate(&mut self) {
        let Some(obj) = self.pick() else { return };
        let cur = self.model[&obj].len() as u64;
        let size = self.rng.random_range(0..=cur + 100);
        self.os.truncate(obj, size).unwrap();
        self.model.get_mut(&obj).unwrap().resize(size as usize, 0);
    }

    fn punch(&mut self) {
        let Some(obj) = self.pick() else { return };
        let cur = self.model[&obj].len() as u64;
        let off = self.rng.random_range(0..=cur);
        let len = self.rng.random_range(0..=cur - off + 10);
        self.os.free_range(obj, off, len).unwrap();
        let m = self.model.get_mut(&obj).unwrap();
        let end = ((off + len) as usize).min(m.len());
        if (off as usize) < end {
            m[off as usize..end].fill(0);
        }
    }

    fn check_read(&self, obj: u64, off: u64, len: usize) {
        let mut buf = vec![0xEEu8; len];
        self.os.read(obj, off, &mut buf).unwrap();
        let m = &self.model[&obj];
        for (i, b) in buf.iter().enumerate() {
            let want = m.get(off as usize + i).copied().unwrap_or(0);
            assert_eq!(*b, want, "object {obj} byte {}", off as usize + i);
        }
    }

    fn check_random_read(&mut self) {
        let Some(obj) = self.pick() else { return };
        let cur = self.model[&obj].len() as u64;
        let off = self.rng.random_range(0..=cur + 10);
        let len = self
            .rng
            .random_range(0..=(cur - off.min(cur)) as usize + 20);
        self.check_read(obj, off, len);
    }

    fn check_all(&self) {
        for (&obj, m) in &self.model {
            self.check_read(obj, 0, m.len() + 600);
        }
    }

    fn check_seek(&mut self) {
        let Some(obj) = self.pick() else { return };
        let bs = self.bs(obj);
        let m = &self.model[&obj];
        let off = self.rng.random_range(0..=m.len() as u64);
        if let Some(d) = self.os.next_data(obj, off).unwrap() {
            assert!(d >= off);
            // Everything between off and the data block start is zeros.
            let block_start = (d / bs * bs).max(off) as usize;
            assert!(m
                .get(off as usize..block_start.min(m.len()))
                .is_none_or(|s| s.iter().all(|&b| b == 0)));
        } else {
            assert!(m
                .get(off as usize..)
                .is_none_or(|s| s.iter().all(|&b| b == 0)));
        }
        let h = self.os.next_hole(obj, off).unwrap();
        assert!(h >= off);
        let hole_block = h / bs * bs;
        if (hole_block as usize) < m.len() && hole_block >= off {
            let end = ((hole_block + bs) as usize).min(m.len());
            assert!(
                m[hole_block as usize..end].iter().all(|&b| b == 0),
                "next_hole found data"
            );
        }
    }

    fn bonus(&mut self) {
        let Some(obj) = self.pick() else { return };
        let len = self.rng.random_range(0..=320);
        let bytes: Vec<u8> = (0..len).map(|i| (i as u64 ^ obj) as u8).collect();
        self.os.set_bonus(obj, &bytes).unwrap();
        assert_eq!(self.os.bonus(obj).unwrap(), bytes);
    }

    fn sync(&mut self) {
        self.os.sync(self.txg).unwrap();
        self.txg += 1;
    }

    fn reopen(&mut self) {
        let root = self.os.sync(self.txg).unwrap();
        self.txg += 1;
        assert_eq!(
            reachable(&self.os),
            self.store.live_blocks(),
            "leak or lost block"
        );
        self.os = Objset::open(self.store.clone(), &root).unwrap();
        self.check_all();
    }
}

fn run(seed: u64, steps: usize) {
    let mut h = Harness::new(seed);
    for _ in 0..steps {
        h.step();
    }
    h.check_all();
    h.reopen();
    // Bonus survives a reopen through the dnode blocks.
    for obj in h.model.keys().copied().collect::<Vec<_>>() {
        h.os.free_range(obj, 0, 0).unwrap();
        h.os.object_free(obj).unwrap();
    }
    h.model.clear();
    h.reopen();
    assert_eq!(h.store.live_blocks(), 1, "only the objset header remains");
}

#[test]
fn model_many_seeds() {
    tarn_testkit::for_each_seed("objset model", 0, 12, |seed| run(seed, 400));
}

#[test]
fn model_long_run() {
    run(1234, 3000);
}

#[test]
fn sparse_file_takes_no_space_and_grows_levels() {
    let store = Arc::new(MemBlockStore::new());
    let os = Objset::create(store.clone(), ObjsetType::Filesystem);
    let obj = os.object_create(ObjType::PlainFile, 512, 0).unwrap();
    os.write(obj, 600 << 20, b"far").unwrap(); // blkid 1.2M: 4 levels
    os.sync(1).unwrap();
    let info = os.object_info(obj).unwrap();
    assert_eq!(info.nlevels, 4);
    // one data block + three indirect blocks beneath the root
    assert_eq!(info.used_bytes, 512 + 3 * 131072);
    assert_eq!(os.next_data(obj, 0).unwrap(), Some(600 << 20));
    assert_eq!(os.next_hole(obj, 600 << 20).unwrap(), (600 << 20) + 512);
    os.truncate(obj, 0).unwrap();
    os.sync(2).unwrap();
    assert_eq!(os.object_info(obj).unwrap().used_bytes, 0);
    assert_eq!(reachable(&os), store.live_blocks());
}

#[test]
fn clean_objects_are_not_rewritten() {
    let store = Arc::new(MemBlockStore::new());
    let os = Objset::create(store.clone(), ObjsetType::Filesystem);
    let a = os.object_create(ObjType::PlainFile, 4096, 0).unwrap();
    let b = os.object_create(ObjType::PlainFile, 4096, 0).unwrap();
    os.write(a, 0, &[1; 8192]).unwrap();
    os.write(b, 0, &[2; 8192]).unwrap();
    let r1 = os.sync(1).unwrap();
    let mut before = Vec::new();
    os.walk_blocks(&mut |bp| before.push(*bp)).unwrap();
    os.write(a, 0, &[3; 10]).unwrap();
    let r2 = os.sync(2).unwrap();
    assert_ne!(r1, r2);
    let mut after = Vec::new();
    os.walk_blocks(&mut |bp| after.push(*bp)).unwrap();
    let b_blocks: Vec<_> = after
        .iter()
        .filter(|bp| bp.birth == 1 && bp.typ == ObjType::PlainFile)
        .collect();
    assert_eq!(
        b_blocks.len(),
        3,
        "b's two blocks and a's untouched second block keep birth 1"
    );
    assert_eq!(os.sync(3).unwrap(), r2, "a clean objset writes nothing");
    assert_eq!(reachable(&os), store.live_blocks());
}

#[test]
fn block_size_change_only_with_one_block() {
    let store = Arc::new(MemBlockStore::new());
    let os = Objset::create(store, ObjsetType::Filesystem);
    let obj = os.object_create(ObjType::PlainFile, 512, 0).unwrap();
    os.write(obj, 0, b"hello").unwrap();
    os.sync(1).unwrap();
    os.set_block_size(obj, 131072).unwrap();
    let mut buf = [0u8; 5];
    os.read(obj, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"hello");
    os.write(obj, 200_000, b"x").unwrap();
    assert!(matches!(
        os.set_block_size(obj, 4096),
        Err(DmuError::InvalidArgument(_))
    ));
    assert!(matches!(
        os.object_create(ObjType::PlainFile, 1000, 0),
        Err(DmuError::InvalidArgument(_))
    ));
}

#[test]
fn objset_is_send_and_sync_and_writers_overlap_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Objset>();
    let store = Arc::new(MemBlockStore::new());
    let os = Arc::new(Objset::create(store.clone(), ObjsetType::Filesystem));
    let objs: Vec<u64> = (0..4)
        .map(|_| os.object_create(ObjType::PlainFile, 4096, 0).unwrap())
        .collect();
    std::thread::scope(|s| {
        for (t, &obj) in objs.iter().enumerate() {
            let os = os.clone();
            s.spawn(move || {
                for i in 0..200u64 {
                    os.write(obj, i * 4096, &[t as u8 + 1; 4096]).unwrap();
                }
            });
        }
        let os2 = os.clone();
        s.spawn(move || {
            for txg in 1..20 {
                os2.sync(txg).unwrap();
            }
        });
    });
    os.sync(100).unwrap();
    for (t, &obj) in objs.iter().enumerate() {
        let mut buf = vec![0u8; 200 * 4096];
        os.read(obj, 0, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == t as u8 + 1));
    }
    assert_eq!(reachable(&os), store.live_blocks());
}

/// Object sets of one pool share one cache: its bound holds for all of
/// them together, and each reads its own bytes back through it.
#[test]
fn object_sets_share_one_bounded_cache() {
    let store = Arc::new(MemBlockStore::new());
    let cache = Arc::new(tarn_dmu::BlockCache::new(256 << 10));
    let sets: Vec<Objset> = (0..3)
        .map(|_| Objset::create_in(store.clone(), ObjsetType::Filesystem, cache.clone()))
        .collect();
    let mut roots = Vec::new();
    for (i, os) in sets.iter().enumerate() {
        let obj = os.object_create(ObjType::PlainFile, 64 << 10, 0).unwrap();
        os.write(obj, 0, &vec![i as u8 + 1; 256 << 10]).unwrap();
        roots.push((os.sync(2).unwrap(), obj));
    }
    drop(sets);
    let sets: Vec<Objset> = roots
        .iter()
        .map(|(root, _)| Objset::open_in(store.clone(), root, cache.clone()).unwrap())
        .collect();
    for _ in 0..2 {
        for (i, (os, (_, obj))) in sets.iter().zip(&roots).enumerate() {
            let mut buf = vec![0u8; 256 << 10];
            os.read(*obj, 0, &mut buf).unwrap();
            assert!(buf.iter().all(|&b| b == i as u8 + 1));
            assert!(cache.bytes() <= 256 << 10, "{}", cache.bytes());
            assert_eq!(os.cache_bytes(), cache.bytes());
        }
    }
}
