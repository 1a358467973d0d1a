//! Lock wait statistics: how often, and for how long, a request waited
//! for a lock another thread held (the question "where do the threads
//! wait?" that a load average of 4.6 on 16 CPUs asks).
//!
//! Each named lock of the request path has one [`LockStat`]. Taking the
//! lock tries first without blocking; only when that fails is the clock
//! read and the wait added here, so an uncontended lock costs one failed
//! or successful try and nothing else, and the counters (shared by every
//! thread) are touched only by threads that were about to sleep anyway.
//! `tarn-bench threads` prints them per request; `docs/LOCKING.md` lists
//! the locks each request takes, in order.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Waits on one lock (every instance of it: all object sets' state
/// locks count under one name).
pub struct LockStat {
    pub name: &'static str,
    waits: AtomicU64,
    wait_ns: AtomicU64,
}

/// What a [`LockStat`] counted so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LockWaits {
    /// Acquisitions that had to wait.
    pub waits: u64,
    /// Nanoseconds spent waiting, in all.
    pub wait_ns: u64,
}

impl LockStat {
    pub const fn new(name: &'static str) -> LockStat {
        LockStat {
            name,
            waits: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
        }
    }

    /// `take` the lock, timing it only if `try_take` could not.
    #[inline]
    pub fn acquire<G>(&self, try_take: impl FnOnce() -> Option<G>, take: impl FnOnce() -> G) -> G {
        if let Some(g) = try_take() {
            return g;
        }
        let t0 = Instant::now();
        let g = take();
        self.waits.fetch_add(1, Ordering::Relaxed);
        self.wait_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        g
    }

    pub fn read(&self) -> LockWaits {
        LockWaits {
            waits: self.waits.load(Ordering::Relaxed),
            wait_ns: self.wait_ns.load(Ordering::Relaxed),
        }
    }
}

impl std::ops::Sub for LockWaits {
    type Output = LockWaits;
    fn sub(self, o: LockWaits) -> LockWaits {
        LockWaits {
            waits: self.waits.saturating_sub(o.waits),
            wait_ns: self.wait_ns.saturating_sub(o.wait_ns),
        }
    }
}

/// An object set's state (`Objset::state`), shared or exclusive.
pub static OBJSET_STATE: LockStat = LockStat::new("objset state");
/// A shard of the block cache's LRU.
pub static BLOCK_CACHE: LockStat = LockStat::new("block cache shard");
/// The block cache's reads in flight (misses only).
pub static CACHE_INFLIGHT: LockStat = LockStat::new("block cache in-flight");

/// The DMU's locks, for reports.
pub fn dmu_locks() -> [&'static LockStat; 3] {
    [&OBJSET_STATE, &BLOCK_CACHE, &CACHE_INFLIGHT]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn only_contended_acquisitions_count() {
        static S: LockStat = LockStat::new("test");
        let m = Mutex::new(0u32);
        {
            let _g = S.acquire(|| m.try_lock().ok(), || m.lock().unwrap());
        }
        assert_eq!(S.read(), LockWaits::default());
        std::thread::scope(|s| {
            let g = m.lock().unwrap();
            let t = s.spawn(|| {
                let mut g = S.acquire(|| m.try_lock().ok(), || m.lock().unwrap());
                *g += 1;
            });
            std::thread::sleep(std::time::Duration::from_millis(20));
            drop(g);
            t.join().unwrap();
        });
        let w = S.read();
        assert_eq!(w.waits, 1);
        assert!(w.wait_ns > 0, "{w:?}");
    }
}
