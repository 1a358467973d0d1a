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
//! grows the daemon by the cache's size. Locking: `inflight`, then the LRU's
//! mutex, both taken last in the objset's lock order and never held
//! across I/O.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use crossbeam_channel::Sender;
use parking_lot::Mutex;
use tarn_format::BlockPtr;

use crate::dirty::Block;
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

type Key = (u32, u64, u64);

fn key(bp: &BlockPtr) -> Key {
    (bp.dvas[0].vdev, bp.dvas[0].offset, bp.birth)
}

/// A pool's clean-block cache, shared (`Arc`) by its object sets, with
/// the blocks being read into it and the threads that read them (see
/// `prefetch`).
pub struct BlockCache {
    inner: Mutex<Lru>,
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

struct Lru {
    map: HashMap<Key, (Arc<Vec<u8>>, u64)>,
    /// Every entry by its last use, oldest first.
    order: BTreeMap<u64, Key>,
    /// The entries `insert_written` made and nobody has read since, by
    /// the same ticks: a subset of `order`, `written_bytes` in all.
    written: BTreeMap<u64, Key>,
    tick: u64,
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
        BlockCache {
            inner: Mutex::new(Lru {
                map: HashMap::new(),
                order: BTreeMap::new(),
                written: BTreeMap::new(),
                tick: 0,
                bytes: 0,
                written_bytes: 0,
                limit_bytes,
            }),
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
        let mut inflight = self.inflight.lock();
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
    /// this way is no longer counted as unread.
    pub(crate) fn get(&self, bp: &BlockPtr) -> Option<Arc<Vec<u8>>> {
        let mut l = self.inner.lock();
        let l = &mut *l;
        let k = key(bp);
        let (data, tick) = l.map.get_mut(&k)?;
        l.order.remove(tick);
        if l.written.remove(tick).is_some() {
            l.written_bytes -= data.len();
        }
        l.tick += 1;
        *tick = l.tick;
        l.order.insert(l.tick, k);
        Some(data.clone())
    }

    /// Caches a block that was read, or written in part (whoever changes
    /// a block in part is likely to change it again).
    pub(crate) fn insert(&self, bp: &BlockPtr, data: Arc<Vec<u8>>) {
        self.inner.lock().insert(key(bp), data, false);
    }

    /// Caches a block a sequential write replaced whole: until someone
    /// reads it, it counts towards a bound of its own (a
    /// [`WRITTEN_SHARE_DIVISOR`]th of the cache), where the oldest such
    /// blocks make room for newer ones.
    pub(crate) fn insert_written(&self, bp: &BlockPtr, data: Arc<Vec<u8>>) {
        self.inner.lock().insert(key(bp), data, true);
    }

    pub(crate) fn remove(&self, bp: &BlockPtr) {
        self.inner.lock().remove(&key(bp));
    }

    /// Bytes cached now.
    pub fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }
}

impl Lru {
    fn insert(&mut self, k: Key, data: Arc<Vec<u8>>, written: bool) {
        if data.len() > self.limit_bytes {
            return;
        }
        self.remove(&k);
        self.tick += 1;
        let tick = self.tick;
        self.bytes += data.len();
        if written {
            self.written_bytes += data.len();
            self.written.insert(tick, k);
        }
        self.map.insert(k, (data, tick));
        self.order.insert(tick, k);
        let written_limit = self.limit_bytes / WRITTEN_SHARE_DIVISOR;
        while self.written_bytes > written_limit {
            let Some((_, oldest)) = self.written.first_key_value() else {
                break;
            };
            let oldest = *oldest;
            self.remove(&oldest);
        }
        while self.bytes > self.limit_bytes {
            let Some((_, oldest)) = self.order.first_key_value() else {
                break;
            };
            let oldest = *oldest;
            self.remove(&oldest);
        }
    }

    fn remove(&mut self, k: &Key) {
        if let Some((data, tick)) = self.map.remove(k) {
            self.order.remove(&tick);
            self.bytes -= data.len();
            if self.written.remove(&tick).is_some() {
                self.written_bytes -= data.len();
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
        let l = c.inner.lock();
        assert_eq!(l.written_bytes, 0, "22 and 23 were read too");
        assert_eq!(l.written.len(), 0);
        assert_eq!(l.bytes, l.map.values().map(|(d, _)| d.len()).sum::<usize>());
    }
}
