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
//! list and no ghost lists yet. Locking: `inflight`, then the LRU's
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
    order: BTreeMap<u64, Key>,
    tick: u64,
    bytes: usize,
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
                tick: 0,
                bytes: 0,
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

    pub(crate) fn get(&self, bp: &BlockPtr) -> Option<Arc<Vec<u8>>> {
        let mut l = self.inner.lock();
        let l = &mut *l;
        let k = key(bp);
        let (data, tick) = l.map.get_mut(&k)?;
        l.order.remove(tick);
        l.tick += 1;
        *tick = l.tick;
        l.order.insert(l.tick, k);
        Some(data.clone())
    }

    pub(crate) fn insert(&self, bp: &BlockPtr, data: Arc<Vec<u8>>) {
        let mut l = self.inner.lock();
        if data.len() > l.limit_bytes {
            return;
        }
        l.remove(&key(bp));
        l.tick += 1;
        let tick = l.tick;
        l.bytes += data.len();
        l.map.insert(key(bp), (data, tick));
        l.order.insert(tick, key(bp));
        while l.bytes > l.limit_bytes {
            let Some((_, oldest)) = l.order.pop_first() else {
                break;
            };
            if let Some((d, _)) = l.map.remove(&oldest) {
                l.bytes -= d.len();
            }
        }
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
    fn remove(&mut self, k: &Key) {
        if let Some((d, tick)) = self.map.remove(k) {
            self.order.remove(&tick);
            self.bytes -= d.len();
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
}
