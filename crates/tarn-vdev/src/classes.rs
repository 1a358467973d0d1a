//! Intent-log writes ahead of a txg's writes on the same devices (the
//! part of OpenZFS's `vdev_queue` I/O classes that tarn needs).
//!
//! Without a separate log device, an `fsync`'s log block goes to the
//! devices the syncing txg is writing to. tarn issues its I/O as system
//! calls from threads, and nothing below orders requests by class: a log
//! write issued while a txg has eight 1 MiB writes in flight waits behind
//! all of them. An `fsync` issued while a txg syncs took many times as
//! long as one outside, and most of a run's worst fsyncs fell in the
//! short time spent syncing (docs/MEASUREMENTS.md, "Vdev: intent-log
//! writes behind txg writes").
//!
//! OpenZFS's queue issues sync writes before async ones and, while dirty
//! data is low, lets only `zfs_vdev_async_write_min_active` (2) async
//! writes be active per leaf. tarn does the same with a gate per
//! top-level vdev: while it has intent-log writes in flight
//! ([`WriteClasses::sync_write`]), or has started one since a txg write
//! on it last finished, the txg's writes on it ([`WriteClasses::async_write`])
//! are held to [`ASYNC_WRITES_UNDER_SYNC`] at once, or one per leaf on a
//! wider vdev (a raidz column write is one leaf's, and a wide raidz held
//! to two would leave most of its disks idle). When a txg write
//! finishes without a log write having started meanwhile, the txg gets
//! back all the threads it was given. A log device's vdev never sees txg
//! data, and a txg with no `fsync` against it is never held back.
//!
//! The gate roughly halves an `fsync`'s latency during a sync and barely
//! lengthens the sync (docs/MEASUREMENTS.md, "Vdev: intent-log writes
//! behind txg writes"). One write at a time
//! instead of two did not lower it further: what is left is the cache
//! flush of each log write, which on one disk also flushes the txg's
//! writes before it.

use parking_lot::{Condvar, Mutex};

/// Txg (async) writes one top-level vdev keeps in flight while it is
/// taking intent-log writes (`zfs_vdev_async_write_min_active`), unless
/// it has more leaves: then one per leaf. Two is measured on a mirror of
/// two files on one disk (four let the fsyncs during a sync wait longer).
pub const ASYNC_WRITES_UNDER_SYNC: usize = 2;

/// The gate: counts of the two classes' writes in flight.
#[derive(Debug, Default)]
pub(crate) struct WriteClasses {
    state: Mutex<ClassState>,
    /// Signalled whenever a write of either class ends.
    ended: Condvar,
}

#[derive(Debug, Default)]
struct ClassState {
    sync_active: usize,
    /// Sync writes ever started (only compared for change).
    sync_started: u64,
    async_active: usize,
    /// A sync write started since the last async write to end began.
    sync_seen: bool,
}

impl ClassState {
    fn async_limit(&self, max: usize, under_sync: usize) -> usize {
        if self.sync_active > 0 || self.sync_seen {
            under_sync.clamp(1, max)
        } else {
            max
        }
    }
}

/// An intent-log write in flight; ends when dropped.
pub(crate) struct SyncWrite<'a>(&'a WriteClasses);

/// A txg write in flight; ends when dropped.
pub(crate) struct AsyncWrite<'a> {
    classes: &'a WriteClasses,
    /// `sync_started` when this write began.
    began: u64,
}

impl WriteClasses {
    /// Marks an intent-log write in flight until the guard drops.
    pub(crate) fn sync_write(&self) -> SyncWrite<'_> {
        let mut st = self.state.lock();
        st.sync_active += 1;
        st.sync_started = st.sync_started.wrapping_add(1);
        st.sync_seen = true;
        SyncWrite(self)
    }

    /// Waits until a txg write may start — fewer than `max` in flight, or
    /// fewer than `under_sync` while log writes are going on — and marks
    /// it in flight until the guard drops. Never waits while no txg
    /// write is in flight (the limit is at least one).
    pub(crate) fn async_write(&self, max: usize, under_sync: usize) -> AsyncWrite<'_> {
        let max = max.max(1);
        let mut st = self.state.lock();
        while st.async_active >= st.async_limit(max, under_sync) {
            self.ended.wait(&mut st);
        }
        st.async_active += 1;
        AsyncWrite {
            classes: self,
            began: st.sync_started,
        }
    }

    #[cfg(test)]
    fn in_flight(&self) -> (usize, usize) {
        let st = self.state.lock();
        (st.sync_active, st.async_active)
    }
}

impl Drop for SyncWrite<'_> {
    fn drop(&mut self) {
        let mut st = self.0.state.lock();
        st.sync_active -= 1;
        drop(st);
        self.0.ended.notify_all();
    }
}

impl Drop for AsyncWrite<'_> {
    fn drop(&mut self) {
        let mut st = self.classes.state.lock();
        st.async_active -= 1;
        // No log write started while this one ran: the log is quiet.
        st.sync_seen = st.sync_started != self.began;
        drop(st);
        self.classes.ended.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    /// Starts `n` txg writes on their own threads, each holding its slot
    /// until released; returns how many got one (waiting 50 ms for every
    /// one that may start to do so).
    fn in_flight_at_once(c: &WriteClasses, n: usize, max: usize) -> usize {
        in_flight_at_once_on(c, n, max, ASYNC_WRITES_UNDER_SYNC)
    }

    /// [`in_flight_at_once`] on a vdev allowed `under_sync` under sync.
    fn in_flight_at_once_on(c: &WriteClasses, n: usize, max: usize, under_sync: usize) -> usize {
        let active = AtomicUsize::new(0);
        let release = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..n {
                s.spawn(|| {
                    let _w = c.async_write(max, under_sync);
                    active.fetch_add(1, Ordering::SeqCst);
                    while !release.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                });
            }
            std::thread::sleep(Duration::from_millis(50));
            let got = active.load(Ordering::SeqCst);
            release.store(true, Ordering::SeqCst);
            got
        })
    }

    #[test]
    fn txg_writes_use_every_thread_while_no_log_write_goes_on() {
        let c = WriteClasses::default();
        assert_eq!(in_flight_at_once(&c, 8, 8), 8);
        assert_eq!(c.in_flight(), (0, 0));
    }

    #[test]
    fn a_log_write_in_flight_holds_txg_writes_to_the_minimum() {
        let c = WriteClasses::default();
        let log = c.sync_write();
        assert_eq!(in_flight_at_once(&c, 8, 8), ASYNC_WRITES_UNDER_SYNC);
        drop(log);
        assert_eq!(c.in_flight(), (0, 0));
    }

    #[test]
    fn txg_writes_get_their_threads_back_once_one_ends_with_the_log_quiet() {
        let c = WriteClasses::default();
        // A log write came and went: the next txg writes are held back...
        drop(c.sync_write());
        let first = c.async_write(8, ASYNC_WRITES_UNDER_SYNC);
        let second = c.async_write(8, ASYNC_WRITES_UNDER_SYNC);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let _third = c.async_write(8, ASYNC_WRITES_UNDER_SYNC);
                tx.send(()).unwrap();
            });
            assert!(
                rx.recv_timeout(Duration::from_millis(50)).is_err(),
                "held back"
            );
            // ...until one ends without a log write having started.
            drop(first);
            rx.recv_timeout(Duration::from_secs(5)).expect("released");
        });
        drop(second);
        assert_eq!(in_flight_at_once(&c, 8, 8), 8);
    }

    #[test]
    fn a_log_write_starting_during_a_txg_write_keeps_the_next_ones_held() {
        let c = WriteClasses::default();
        let w = c.async_write(8, ASYNC_WRITES_UNDER_SYNC);
        drop(c.sync_write());
        drop(w);
        assert_eq!(in_flight_at_once(&c, 8, 8), ASYNC_WRITES_UNDER_SYNC);
    }

    #[test]
    fn a_wide_vdev_keeps_one_txg_write_per_leaf_under_sync() {
        let c = WriteClasses::default();
        let _log = c.sync_write();
        assert_eq!(in_flight_at_once_on(&c, 8, 8, 5), 5);
    }

    #[test]
    fn the_limit_is_never_below_one_or_above_what_the_caller_asked() {
        let c = WriteClasses::default();
        let log = c.sync_write();
        assert_eq!(in_flight_at_once(&c, 4, 1), 1);
        assert_eq!(in_flight_at_once(&c, 4, 0), 1);
        drop(log);
        drop(c.sync_write());
        assert_eq!(in_flight_at_once(&c, 4, 3), ASYNC_WRITES_UNDER_SYNC);
    }
}
