//! The allocation throttle: faster vdevs take more of the writes when the
//! pool is pushed (OpenZFS 0.7's `zio_dva_throttle`).
//!
//! Without it, the rotor gives each top-level vdev a share of a txg's
//! blocks by free space, and the txg is written when its slowest vdev is
//! done: a pool of one fast and one slow vdev writes at twice the slow
//! one's speed. With it, each top-level vdev may hold only a bounded
//! amount of *allocated but not yet written* data — about
//! `ALLOC_QUEUE_MS` of its own measured completion rate, within
//! `ALLOC_QUEUE_MIN_BYTES..=ALLOC_QUEUE_MAX_BYTES` — and the allocator
//! passes over a vdev whose queue is full. A fast vdev empties its queue
//! sooner and so is offered more blocks; when every queue is full, the
//! allocation waits for a write to finish.
//!
//! The throttle engages only when writers push harder than the disks
//! take ([`AllocThrottle::set_pressure`], from the txg engine: a writer
//! waited, the txg filled up before the last one was written, or it
//! filled faster than a split by free space could be written at the
//! vdevs' measured rates — `Spa::pushed`). When they do not, nothing
//! waits on the sync, and allocation stays by free space so that unequal
//! vdevs fill evenly — the behaviour the seed measured ("ZFS write
//! allocation in 0.7.x": ~90 % of small random writes on the SSD when
//! pushed hard, a near-even split for an unhurried stream).
//!
//! Lock order: the allocator's lock, then the throttle's.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::tunables;
use crate::txg::Pressure;

/// One top-level vdev's write queue.
#[derive(Debug, Default, Clone, Copy)]
struct Queue {
    /// Bytes allocated on the vdev and not yet written.
    inflight: u64,
    /// Blocks allocated and waiting for a writer (`zpool iostat -q`
    /// asyncq_write pend) and being written (activ).
    pending: u64,
    active: u64,
    /// Completion rate in bytes per second (an EWMA); 0 until measured.
    rate: f64,
}

/// Cumulative queue statistics of one top-level vdev (`zpool iostat -q
/// -l`).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct QueueStats {
    pub pending: u64,
    pub active: u64,
    /// Bytes allocated and not yet written.
    pub inflight: u64,
    /// Most bytes it may hold now (see the module comment).
    pub depth: u64,
    /// Measured completion rate, bytes per second (0: not measured).
    pub rate: u64,
    /// Blocks that went through the queue, and the nanoseconds they
    /// waited in it in all (asyncq_wait).
    pub queued_ops: u64,
    pub queued_ns: u64,
}

#[derive(Default)]
pub struct AllocThrottle {
    queues: Mutex<HashMap<u32, Queue>>,
    /// Cumulative wait counters, kept apart from the live queue state.
    waits: Mutex<HashMap<u32, (u64, u64)>>,
    done: Condvar,
    pressure: Mutex<Pressure>,
}

impl AllocThrottle {
    /// How hard the writers of the txg being synced pushed (see the
    /// module comment); set by the sync before each txg.
    pub fn set_pressure(&self, p: Pressure) {
        *self.pressure.lock() = p;
    }

    /// [`AllocThrottle::set_pressure`] with only `pushed` (tests).
    pub fn set_pressed(&self, on: bool) {
        self.set_pressure(Pressure {
            pushed: on,
            fill_rate: 0.0,
        });
    }

    pub fn pressure(&self) -> Pressure {
        *self.pressure.lock()
    }

    /// `vdev`'s measured write rate, bytes per second (0: not measured).
    pub fn rate(&self, vdev: u32) -> f64 {
        self.queues.lock().get(&vdev).map_or(0.0, |q| q.rate)
    }

    fn depth(q: &Queue) -> u64 {
        if q.rate <= 0.0 {
            return tunables::ALLOC_QUEUE_MAX_BYTES;
        }
        let d = q.rate * tunables::ALLOC_QUEUE_MS as f64 / 1000.0;
        (d as u64).clamp(
            tunables::ALLOC_QUEUE_MIN_BYTES,
            tunables::ALLOC_QUEUE_MAX_BYTES,
        )
    }

    /// Whether `vdev` may take another block now.
    pub fn has_room(&self, vdev: u32) -> bool {
        let queues = self.queues.lock();
        queues
            .get(&vdev)
            .is_none_or(|q| q.inflight < Self::depth(q))
    }

    /// A block of `bytes` was allocated on `vdev` and queued for writing.
    pub fn queued(&self, vdev: u32, bytes: u64) {
        let mut queues = self.queues.lock();
        let q = queues.entry(vdev).or_default();
        q.inflight += bytes;
        q.pending += 1;
    }

    /// A writer took `blocks` blocks of `vdev`'s queue, which waited
    /// `waited_ns` in all.
    pub fn started(&self, vdev: u32, blocks: u64, waited_ns: u64) {
        {
            let mut queues = self.queues.lock();
            let q = queues.entry(vdev).or_default();
            q.pending = q.pending.saturating_sub(blocks);
            q.active += blocks;
        }
        let mut waits = self.waits.lock();
        let w = waits.entry(vdev).or_default();
        w.0 += blocks;
        w.1 += waited_ns;
    }

    /// `blocks` blocks (`bytes`) of `vdev`'s queue were written in
    /// `took`: their room is given back and the rate measured.
    pub fn completed(&self, vdev: u32, blocks: u64, bytes: u64, took: Duration) {
        let mut queues = self.queues.lock();
        let q = queues.entry(vdev).or_default();
        q.inflight = q.inflight.saturating_sub(bytes);
        q.active = q.active.saturating_sub(blocks);
        Self::measure(q, bytes, took);
        drop(queues);
        self.done.notify_all();
    }

    /// Measures a write of `bytes` to `vdev` that took `took` outside
    /// the queue (a sync that was not pushed still teaches the rate).
    pub fn measured(&self, vdev: u32, bytes: u64, took: Duration) {
        let mut queues = self.queues.lock();
        Self::measure(queues.entry(vdev).or_default(), bytes, took);
    }

    fn measure(q: &mut Queue, bytes: u64, took: Duration) {
        // Too small a write says little about the device's speed.
        if bytes < tunables::ALLOC_QUEUE_MIN_BYTES / 4 {
            return;
        }
        let rate = bytes as f64 / took.as_secs_f64().max(1e-6);
        q.rate = if q.rate <= 0.0 {
            rate
        } else {
            q.rate * 0.75 + rate * 0.25
        };
    }

    /// Waits until some queued write completes (or a short while).
    pub fn wait(&self) {
        let mut queues = self.queues.lock();
        self.done.wait_for(&mut queues, Duration::from_millis(5));
    }

    /// Top-level vdevs by measured rate, fastest first; the unmeasured
    /// keep their order after them (the intent log's choice of data vdev
    /// when the pool has no log device).
    pub fn fastest_first(&self, vdevs: &[u32]) -> Vec<u32> {
        let queues = self.queues.lock();
        let rate = |v: &u32| queues.get(v).map_or(0.0, |q| q.rate);
        let mut order = vdevs.to_vec();
        order.sort_by(|a, b| rate(b).total_cmp(&rate(a)));
        order
    }

    /// Forgets a vdev that left the pool.
    pub fn remove(&self, vdev: u32) {
        self.queues.lock().remove(&vdev);
        self.waits.lock().remove(&vdev);
    }

    pub fn stats(&self, vdev: u32) -> QueueStats {
        let q = self.queues.lock().get(&vdev).copied().unwrap_or_default();
        let (queued_ops, queued_ns) = self.waits.lock().get(&vdev).copied().unwrap_or_default();
        QueueStats {
            pending: q.pending,
            active: q.active,
            inflight: q.inflight,
            depth: Self::depth(&q),
            rate: q.rate as u64,
            queued_ops,
            queued_ns,
        }
    }
}

/// When a block was queued (for the wait statistics).
pub(crate) fn since(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_has_no_room_until_its_writes_complete() {
        let t = AllocThrottle::default();
        assert!(t.has_room(0), "an unknown vdev has room");
        // Measured at 10 MB/s: the depth is the floor.
        t.measured(0, 4 << 20, Duration::from_millis(400));
        const { assert!(10 << 20 < tunables::ALLOC_QUEUE_MIN_BYTES * 1000 / tunables::ALLOC_QUEUE_MS) };
        assert_eq!(t.stats(0).depth, tunables::ALLOC_QUEUE_MIN_BYTES);
        t.queued(0, tunables::ALLOC_QUEUE_MIN_BYTES);
        assert!(!t.has_room(0));
        t.started(0, 1, 1000);
        t.completed(
            0,
            1,
            tunables::ALLOC_QUEUE_MIN_BYTES,
            Duration::from_millis(100),
        );
        assert!(t.has_room(0));
        let s = t.stats(0);
        assert_eq!((s.pending, s.active, s.inflight), (0, 0, 0));
        assert_eq!((s.queued_ops, s.queued_ns), (1, 1000));
    }

    #[test]
    fn faster_vdevs_come_first_and_get_deeper_queues() {
        let t = AllocThrottle::default();
        t.measured(1, 64 << 20, Duration::from_millis(100));
        t.measured(0, 8 << 20, Duration::from_millis(100));
        assert_eq!(t.fastest_first(&[0, 1, 2]), vec![1, 0, 2]);
        assert!(t.stats(1).depth > t.stats(0).depth);
    }
}
