//! A byte-bounded LRU cache of clean blocks, as read from the store.
//!
//! Keys are `(vdev, offset, birth)` of a block's first copy — the same
//! identity ZFS's ARC uses — so a DVA that is freed and later reused by a
//! block of another txg can never hit a stale entry. Values are shared
//! `Arc`s: a writer that dirties a cached block copies it first
//! (`Arc::make_mut`), so cached bytes are never modified.
//!
//! One cache serves every object set of a pool (`Objset::open_in` /
//! `create_in` take it; the keys are unique within a pool), so memory
//! grows with what is read, up to `limit_bytes`, never with what is
//! stored or with the number of datasets. This is a stand-in for the ARC: recency only, no frequency
//! list and no ghost lists yet. What a sync wrote is cached too, as the ARC keeps a block it
//! wrote; but a block written whole holds, until it is read, a share of its own
//! ([`WRITTEN_SHARE_DIVISOR`]), so a long sequential write neither pushes out what was read nor
//! grows the daemon by the cache's size. Locking: `inflight`, then one
//! shard's mutex, both taken last in the objset's lock order and never
//! held across I/O.
//!
//! ## Shards
//! A hit moves the block to the front of its LRU, which needs the LRU
//! alone: with one LRU every read of a cached block on every CPU would
//! take one mutex (OpenZFS splits the ARC's hash table by per-bucket
//! locks and its lists into per-CPU sublists for the same reason). So a
//! large cache is split by block key into up to [`CACHE_SHARDS`]
//! independent LRUs, each with an equal share of the bound (at least
//! [`CACHE_SHARD_BYTES_MIN`], so the largest block fits one). Recency is
//! then per shard, which with blocks spread by a hash of their address
//! evicts nearly what one LRU would.
//!
//! And a hit changes nothing a lock guards: it takes its shard shared and
//! marks the entry with the shard's clock (an atomic, stored only when
//! it changes). The LRU order is put right lazily, at eviction, under the
//! shard alone: the oldest entry, if hit since it was placed, goes to the
//! front instead of out (a second chance, CLOCK's rule). Every reader of
//! one hot indirect block hits the same entry, so on the hit path they
//! share cache lines but never wait for each other. The written share is
//! kept lazily the same way: a written block that was read leaves it
//! when its turn to be evicted from the share comes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use crossbeam_channel::Sender;
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tarn_format::BlockPtr;

use crate::dirty::Block;
use crate::lockstat::{BLOCK_CACHE, CACHE_INFLIGHT};
use crate::prefetch::{BlockJob, Fill, READ_QUEUE_BLOCKS, READ_THREADS};

/// Default bound on the bytes of clean blocks an object set opened
/// without a shared cache keeps (tests, tools).
pub const BLOCK_CACHE_BYTES_MAX: usize = 64 << 20;

/// Default bound of one pool's shared cache ([`BlockCache::for_pool`]):
/// 1/16 of RAM, at least `BLOCK_CACHE_BYTES_MAX`, at most 4 GiB.
pub fn pool_block_cache_bytes() -> usize {
    let ram = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemTotal:"))?.to_string();
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(1u64 << 30, |kib| kib * 1024);
    (ram / 16).clamp(BLOCK_CACHE_BYTES_MAX as u64, 4 << 30) as usize
}

/// The share of a cache (1 / this) that blocks written whole by
/// sequential writes may hold while nobody reads them
/// (`BlockCache::insert_written`). The cache is recency-only, so
/// without a bound a stream of writes larger than the cache would push
/// out everything that was read (the ARC's MRU / MFU split protects
/// those). And every byte the cache grows by is memory the daemon first
/// has to fault in: a sequential write through a mount took fewer page
/// faults and ran faster with this bound than with written blocks cached
/// like read ones (docs/MEASUREMENTS.md, "DMU: written blocks' share of
/// the block cache"). A quarter still holds the files a program lays
/// out before it rewrites them in part (a database, fio), up to that
/// size.
pub const WRITTEN_SHARE_DIVISOR: usize = 4;

/// Most LRU shards of one cache.
pub const CACHE_SHARDS: usize = 16;
/// Least bytes per shard: four of the largest block (16 MiB).
pub const CACHE_SHARD_BYTES_MIN: usize = 64 << 20;

type Key = (u32, u64, u64);

fn key(bp: &BlockPtr) -> Key {
    (bp.dvas[0].vdev, bp.dvas[0].offset, bp.birth)
}

/// A pool's clean-block cache, shared (`Arc`) by its object sets, with
/// the blocks being read into it and the threads that read them (see
/// `prefetch`).
pub struct BlockCache {
    shards: Box<[RwLock<Lru>]>,
    inflight: Mutex<HashMap<Key, Arc<Fill>>>,
    /// Started at the first job; the threads end when the cache is gone.
    queue: OnceLock<Option<Sender<BlockJob>>>,
}

/// Where a block a reader needs is.
pub(crate) enum Claim {
    Cached(Block),
    /// Another thread is reading it: wait.
    InFlight(Arc<Fill>),
    /// Nobody is: the caller reads it and `complete`s the fill.
    Mine(Arc<Fill>),
}

struct Entry {
    data: Arc<Vec<u8>>,
    /// Its place in `order` (and in `written`, if there).
    at: u64,
    /// The shard's `tick` at its last hit; 0 until hit. A value `>= at`
    /// means hit since placed.
    used: AtomicU64,
    /// Read since `insert_written` placed it.
    read: AtomicBool,
}

struct Lru {
    map: HashMap<Key, Entry>,
    /// Every entry by when it was placed (inserted, or given a second
    /// chance), oldest first.
    order: BTreeMap<u64, Key>,
    /// The entries `insert_written` made, by the same ticks, not yet
    /// found read at eviction: a subset of `order`, `written_bytes` in all.
    written: BTreeMap<u64, Key>,
    /// Advanced (under the shard alone) each time an entry is placed;
    /// read by hits.
    tick: AtomicU64,
    bytes: usize,
    written_bytes: usize,
    limit_bytes: usize,
}

impl BlockCache {
    /// A cache of the default size for one pool, to share between all of
    /// its object sets.
    pub fn for_pool() -> Arc<BlockCache> {
        Arc::new(BlockCache::new(pool_block_cache_bytes()))
    }

    pub fn new(limit_bytes: usize) -> Self {
        let n = (limit_bytes / CACHE_SHARD_BYTES_MIN).clamp(1, CACHE_SHARDS);
        BlockCache {
            shards: (0..n)
                .map(|_| {
                    RwLock::new(Lru {
                        map: HashMap::new(),
                        order: BTreeMap::new(),
                        written: BTreeMap::new(),
                        tick: AtomicU64::new(0),
                        bytes: 0,
                        written_bytes: 0,
                        limit_bytes: limit_bytes / n,
                    })
                })
                .collect(),
            inflight: Mutex::new(HashMap::new()),
            queue: OnceLock::new(),
        }
    }

    /// The block from the cache, the read of it in flight, or the duty
    /// to read it (every other claimant then waits for that read).
    pub(crate) fn claim(&self, bp: &BlockPtr) -> Claim {
        // Under `inflight`: `complete` caches a block before it leaves
        // `inflight`, so a block is seen in one or the other, and no two
        // claimants both get `Mine` for it.
        let mut inflight =
            CACHE_INFLIGHT.acquire(|| self.inflight.try_lock(), || self.inflight.lock());
        if let Some(f) = inflight.get(&key(bp)) {
            return Claim::InFlight(f.clone());
        }
        if let Some(b) = self.get(bp) {
            return Claim::Cached(b);
        }
        let fill = Arc::new(Fill::default());
        inflight.insert(key(bp), fill.clone());
        Claim::Mine(fill)
    }

    /// The read a `claim` returned `Mine` for is over: caches the block
    /// (if read) and wakes the waiters.
    pub(crate) fn complete(&self, bp: &BlockPtr, fill: &Arc<Fill>, data: Option<Block>) {
        if let Some(d) = &data {
            self.insert(bp, d.clone());
        }
        let mut inflight = self.inflight.lock();
        if inflight.get(&key(bp)).is_some_and(|f| Arc::ptr_eq(f, fill)) {
            inflight.remove(&key(bp));
        }
        drop(inflight);
        fill.set(data);
    }

    /// Queues a block read for the read threads. False when the queue is
    /// full: the job is dropped, which completes its fill empty.
    pub(crate) fn submit(&self, job: BlockJob) -> bool {
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = crossbeam_channel::bounded::<BlockJob>(READ_QUEUE_BLOCKS);
            let started = (0..READ_THREADS)
                .filter(|i| {
                    let rx = rx.clone();
                    std::thread::Builder::new()
                        .name(format!("tarn-read-{i}"))
                        .spawn(move || {
                            for job in rx {
                                job.run();
                            }
                        })
                        .is_ok()
                })
                .count();
            // Without a single thread nothing would ever run a queued job:
            // then there is no queue and readers read for themselves.
            (started > 0).then_some(tx)
        });
        queue.as_ref().is_some_and(|q| q.try_send(job).is_ok())
    }

    /// The cached block, now the most recently used; a written block read
    /// this way is no longer counted as unread (both lazily: module
    /// comment).
    pub(crate) fn get(&self, bp: &BlockPtr) -> Option<Arc<Vec<u8>>> {
        self.hit(bp, |data| data.clone())
    }

    /// `f` of the cached block in place, marked used as by `get`: no
    /// reference is taken, so readers of one hot block (every lookup
    /// through an indirect block) do not all update its count.
    pub(crate) fn with<R>(&self, bp: &BlockPtr, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        self.hit(bp, |data| f(data))
    }

    /// `f` of a cached block, under its shard shared, marking it used and
    /// read (each mark stored only when it changes, so readers of one hot
    /// block do not all write its cache line).
    fn hit<R>(&self, bp: &BlockPtr, f: impl FnOnce(&Arc<Vec<u8>>) -> R) -> Option<R> {
        let k = key(bp);
        let s = self.shard_of(&k);
        let l = BLOCK_CACHE.acquire(|| s.try_read(), || s.read());
        let e = l.map.get(&k)?;
        let now = l.tick.load(Ordering::Relaxed);
        if e.used.load(Ordering::Relaxed) != now {
            e.used.store(now, Ordering::Relaxed);
        }
        if !e.read.load(Ordering::Relaxed) {
            e.read.store(true, Ordering::Relaxed);
        }
        Some(f(&e.data))
    }

    /// Caches a block that was read, or written in part (whoever changes
    /// a block in part is likely to change it again).
    pub(crate) fn insert(&self, bp: &BlockPtr, data: Arc<Vec<u8>>) {
        let k = key(bp);
        self.shard(&k).insert(k, data, false);
    }

    /// Caches a block a sequential write replaced whole: until someone
    /// reads it, it counts towards a bound of its own (a
    /// [`WRITTEN_SHARE_DIVISOR`]th of the cache), where the oldest such
    /// blocks make room for newer ones.
    pub(crate) fn insert_written(&self, bp: &BlockPtr, data: Arc<Vec<u8>>) {
        let k = key(bp);
        self.shard(&k).insert(k, data, true);
    }

    pub(crate) fn remove(&self, bp: &BlockPtr) {
        let k = key(bp);
        self.shard(&k).remove(&k);
    }

    /// Bytes cached now.
    pub fn bytes(&self) -> usize {
        self.shards.iter().map(|s| s.read().bytes).sum()
    }

    fn shard_of(&self, k: &Key) -> &RwLock<Lru> {
        let h = (k.1 >> 9 ^ k.2 ^ u64::from(k.0) << 40).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        &self.shards[(h >> 32) as usize % self.shards.len()]
    }

    /// The LRU that holds `k`, alone.
    fn shard(&self, k: &Key) -> parking_lot::RwLockWriteGuard<'_, Lru> {
        let s = self.shard_of(k);
        BLOCK_CACHE.acquire(|| s.try_write(), || s.write())
    }
}

impl Lru {
    fn insert(&mut self, k: Key, data: Arc<Vec<u8>>, written: bool) {
        if data.len() > self.limit_bytes {
            return;
        }
        self.remove(&k);
        let tick = self.next_tick();
        self.bytes += data.len();
        if written {
            self.written_bytes += data.len();
            self.written.insert(tick, k);
        }
        self.map.insert(
            k,
            Entry {
                data,
                at: tick,
                used: AtomicU64::new(0),
                read: AtomicBool::new(!written),
            },
        );
        self.order.insert(tick, k);
        let written_limit = self.limit_bytes / WRITTEN_SHARE_DIVISOR;
        while self.written_bytes > written_limit {
            let Some((at, oldest)) = self.written.pop_first() else {
                break;
            };
            let e = &self.map[&oldest];
            debug_assert_eq!(e.at, at);
            if e.read.load(Ordering::Relaxed) {
                // Read since written: it stays, as a block that was read.
                self.written_bytes -= e.data.len();
            } else {
                self.written.insert(at, oldest);
                self.remove(&oldest);
            }
        }
        while self.bytes > self.limit_bytes {
            let Some((at, oldest)) = self.order.pop_first() else {
                break;
            };
            let e = &self.map[&oldest];
            if e.used.load(Ordering::Relaxed) >= at {
                // Hit since placed: a second chance, as the newest.
                let tick = self.next_tick();
                let e = self.map.get_mut(&oldest).expect("just seen");
                e.at = tick;
                *e.used.get_mut() = 0;
                if self.written.remove(&at).is_some() {
                    self.written_bytes -= e.data.len();
                }
                self.order.insert(tick, oldest);
            } else {
                self.order.insert(at, oldest);
                self.remove(&oldest);
            }
        }
    }

    fn next_tick(&mut self) -> u64 {
        let t = self.tick.get_mut();
        *t += 1;
        *t
    }

    fn remove(&mut self, k: &Key) {
        if let Some(e) = self.map.remove(k) {
            self.order.remove(&e.at);
            self.bytes -= e.data.len();
            if self.written.remove(&e.at).is_some() {
                self.written_bytes -= e.data.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_format::Dva;

    fn bp(n: u64) -> BlockPtr {
        let mut bp = BlockPtr::HOLE;
        bp.dvas[0] = Dva {
            vdev: 0,
            asize_sectors: 1,
            offset: n * 512,
        };
        bp.birth = 1;
        bp
    }

    #[test]
    fn evicts_least_recent_within_limit() {
        let c = BlockCache::new(1024);
        c.insert(&bp(1), Arc::new(vec![0; 512]));
        c.insert(&bp(2), Arc::new(vec![0; 512]));
        assert!(c.get(&bp(1)).is_some()); // 1 is now more recent than 2
        c.insert(&bp(3), Arc::new(vec![0; 512]));
        assert!(c.get(&bp(2)).is_none());
        assert!(c.get(&bp(1)).is_some() && c.get(&bp(3)).is_some());
        assert_eq!(c.bytes(), 1024);
        c.remove(&bp(1));
        assert_eq!(c.bytes(), 512);
    }

    /// Blocks written whole and not read since hold at most a quarter of
    /// the cache, the oldest leaving first; one that is read joins the
    /// others, and what was read is never pushed out by them.
    #[test]
    fn written_blocks_hold_a_bounded_share_until_read() {
        let c = BlockCache::new(8 * 512);
        c.insert(&bp(1), Arc::new(vec![1; 512]));
        for n in 10..20 {
            c.insert_written(&bp(n), Arc::new(vec![2; 512]));
        }
        assert!(c.get(&bp(1)).is_some(), "a read block was pushed out");
        let kept: Vec<u64> = (10..20).filter(|&n| c.get(&bp(n)).is_some()).collect();
        assert_eq!(kept, vec![18, 19], "the two newest written blocks");
        assert_eq!(c.bytes(), 3 * 512);
        // 18 and 19 were read just now: no longer bounded as written.
        for n in 20..24 {
            c.insert_written(&bp(n), Arc::new(vec![3; 512]));
        }
        assert!(c.get(&bp(18)).is_some() && c.get(&bp(19)).is_some());
        assert!(c.get(&bp(22)).is_some() && c.get(&bp(23)).is_some());
        assert!(c.get(&bp(20)).is_none() && c.get(&bp(21)).is_none());
        // Overwriting a written block with a read one (same key) moves it
        // out of the written share; removing it gives its bytes back.
        c.insert_written(&bp(30), Arc::new(vec![4; 512]));
        c.insert(&bp(30), Arc::new(vec![5; 512]));
        c.remove(&bp(30));
        let l = c.shards[0].read();
        let unread = |k: &Key| !l.map[k].read.load(Ordering::Relaxed);
        assert_eq!(
            l.written.values().filter(|k| unread(k)).count(),
            0,
            "22 and 23 were read too"
        );
        let listed: usize = l.written.values().map(|k| l.map[k].data.len()).sum();
        assert_eq!(l.written_bytes, listed);
        assert_eq!(l.bytes, l.map.values().map(|e| e.data.len()).sum::<usize>());
        assert_eq!(l.order.len(), l.map.len());
    }
}
