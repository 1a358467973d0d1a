//! Transaction groups: batching changes into atomic commits.
//!
//! As in OpenZFS's txg.c, a txg moves through three states:
//!
//! - **open**: writers take a [`TxgHold`] on the open txg, change in-memory
//!   state tagged with that txg, and drop the hold. Many writers share one
//!   open txg.
//! - **quiescing**: the sync thread closes the open txg (new holds go to the
//!   next one) and waits for the holds on the closed txg to drain.
//! - **syncing**: the sync thread calls [`SyncTarget::sync_txg`], which
//!   writes the txg's dirty state and commits the uberblock.
//!
//! So at most one txg is open, one quiescing/syncing, and writers keep
//! working on txg N+1 while N is written.
//!
//! **A change lands in exactly the txg its hold named.** The next txg
//! opens only after the quiesced one's holders have drained *and* the
//! target has frozen its dirty state ([`SyncTarget::quiesced`]); new holds
//! wait for that moment (it involves no I/O). Without it a writer of
//! txg N+1 could dirty state that the sync of N then takes along, and the
//! intent log, which tags each record with its hold's txg, could not tell
//! which records a crash lost.
//!
//! A txg closes when `TXG_TIMEOUT_MS` has passed since the last commit,
//! when the bytes written in it pass `dirty_data_sync_bytes`, when the
//! memory its dirty blocks hold passes `dirty_data_sync_held_bytes`, or
//! when someone waits for it ([`TxgEngine::wait_synced`], e.g. fsync
//! before the intent log exists). Writers are *throttled, not failed*: a
//! hold blocks while the dirty blocks of every txg not yet synced hold
//! more than `dirty_data_max_bytes`, or while those txgs wrote more than
//! `DIRTY_DATA_STREAM_MAX_BYTES` into blocks not dirty before (a stream
//! of writes running ahead of the disks), until a commit brings it down.
//!
//! The two measures differ for small writes into large records: a 4 KiB
//! write into a 128 KiB record not yet dirty writes 4 KiB but holds the
//! whole record until the txg syncs (OpenZFS charges the whole dbuf).
//! Charging only what was written let random writes into a large file
//! pile up many times `dirty_data_max_bytes` of records in memory.
//!
//! If a sync fails (every copy of a write failed, or no uberblock could be
//! written) the engine is *suspended*, as OpenZFS suspends a pool: the
//! in-memory state is kept, later holds and waits return the error, and
//! nothing half-written becomes visible because the uberblock never moved.
//! A lost device does not get that far: the pool's I/O waits in the sync
//! pipeline for `zpool clear` ([`crate::suspend`]), and the engine asks
//! the pool's [`SuspendGate`] before every hold, which blocks or fails new
//! work as `failmode` says.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::suspend::{FailMode, SuspendGate};
use crate::tunables;

/// The layer that owns the dirty state (the dataset layer) and knows how to
/// write one txg of it and commit it.
pub trait SyncTarget: Send + Sync {
    /// Called once the holders of `txg` have drained and before the next
    /// txg opens: take (freeze) the txg's dirty state, without I/O.
    fn quiesced(&self, _txg: u64) {}
    /// Called before [`SyncTarget::sync_txg`]: whether writers are pushing
    /// harder than the disks take (a writer waited in the throttle since
    /// the last close, the txg filled up while the last one was being
    /// written, or the data not yet synced came within
    /// `DIRTY_PRESSED_PERCENT` of the throttle's limits), and how fast
    /// the txg filled. The pool's allocation throttle engages only when
    /// the disks are behind (`crate::throttle`).
    fn pressure(&self, _pressure: Pressure) {}
    fn sync_txg(&self, txg: u64) -> Result<(), String>;
}

/// How hard the writers of a txg pushed (see [`SyncTarget::pressure`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pressure {
    /// A writer waited, the txg filled up while the last one was being
    /// written, or the unsynced data came near the throttle's limits.
    pub pushed: bool,
    /// Bytes of dirty blocks the txg gave the sync to write, per second
    /// of its filling (0 when it held none).
    pub fill_rate: f64,
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum TxgError {
    #[error("pool I/O is suspended: {0}")]
    Suspended(String),
    #[error("pool is being exported")]
    Closed,
}

struct State {
    open: u64,
    /// Holds on the open txg and on the quiescing one.
    holds_open: usize,
    holds_quiescing: usize,
    quiescing: Option<u64>,
    /// Between closing a txg and opening the next: new holds wait.
    opening: bool,
    synced: u64,
    /// Memory held by dirty blocks not yet synced (open + quiescing +
    /// syncing): what the throttle bounds.
    dirty: u64,
    /// Of `dirty`, the open txg's share.
    dirty_open: u64,
    /// Bytes written in the open txg into blocks it did not hold yet: a
    /// large write streams out in txgs of `dirty_sync` bytes. Rewrites
    /// of blocks already dirty give its sync nothing more to write, and
    /// do not count (see `TxgEngine::write_charged`).
    changed_open: u64,
    /// The same bytes of every txg not yet synced (open + quiescing +
    /// syncing): how far a stream of writes runs ahead of the disks,
    /// which the throttle bounds too.
    changed: u64,
    sync_wanted: u64,
    /// A writer waited in the dirty-data throttle since the last close.
    throttled: bool,
    /// When the open txg got its first dirty bytes.
    first_dirty: Option<Instant>,
    last_sync: Instant,
    suspended: Option<String>,
    closing: bool,
    /// Stop without syncing what is open (a simulated crash, or a pool
    /// dropped without export).
    halted: bool,
}

impl State {
    fn has_dirty(&self) -> bool {
        self.dirty_open > 0 || self.changed_open > 0
    }
}

pub struct TxgEngine {
    state: Mutex<State>,
    cv: Condvar,
    dirty_max: u64,
    /// See `State::changed` (`tunables::DIRTY_DATA_STREAM_MAX_BYTES`).
    changed_max: u64,
    dirty_sync: u64,
    held_sync: u64,
    timeout: Duration,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The pool's suspension state (see [`crate::suspend`]), once wired.
    gate: std::sync::OnceLock<Arc<SuspendGate>>,
}

/// A writer's claim on the open txg; the txg cannot sync while it exists.
pub struct TxgHold<'a> {
    engine: &'a TxgEngine,
    pub txg: u64,
}

impl Drop for TxgHold<'_> {
    fn drop(&mut self) {
        let mut s = self.engine.state.lock();
        if s.quiescing == Some(self.txg) {
            s.holds_quiescing -= 1;
            // Only the sync thread waits for holds, and only for the last
            // one of the txg it is quiescing. Waking it on every drop would
            // cost a context switch per transaction.
            if s.holds_quiescing == 0 {
                self.engine.cv.notify_all();
            }
        } else {
            debug_assert_eq!(s.open, self.txg);
            s.holds_open -= 1;
        }
    }
}

impl TxgHold<'_> {
    /// Accounts `bytes` written to this txg, each of them held in memory
    /// until it syncs.
    pub fn dirty(&self, bytes: u64) {
        self.engine.charge(self.txg, bytes, bytes);
    }
}

impl TxgEngine {
    /// Settles the charge of a write of `len` bytes to txg `txg`, which
    /// the caller holds ([`TxgEngine::hold`]) and charged `len` to
    /// ([`TxgHold::dirty`]), once it is known to have made `held` bytes
    /// of blocks dirty that were not dirty in `txg` before:
    /// - a small write into a large record holds all of it: the rest is
    ///   charged as memory (what the throttle and `held_sync` see);
    /// - a write into blocks already dirty holds no more memory and
    ///   gives the sync nothing more to write: the difference is taken
    ///   back, from the memory and from the bytes that start a sync
    ///   early. So random small writes into large records sync at the
    ///   timeout or at `held_sync`, as in OpenZFS, each txg writing every
    ///   dirty record once, instead of rewriting them all every
    ///   `dirty_sync` bytes.
    pub fn write_charged(&self, txg: u64, len: u64, held: u64) {
        if held > len {
            self.charge(txg, 0, held - len);
        } else if held < len {
            let back = len - held;
            let mut s = self.state.lock();
            debug_assert_eq!(s.open, txg, "charged a txg without holding it");
            s.changed_open = s.changed_open.saturating_sub(back);
            s.changed = s.changed.saturating_sub(back);
            s.dirty_open = s.dirty_open.saturating_sub(back);
            s.dirty = s.dirty.saturating_sub(back);
        }
    }

    fn charge(&self, txg: u64, changed: u64, held: u64) {
        let mut s = self.state.lock();
        // A live hold keeps its txg from syncing, and `open` moves on only
        // once a quiescing txg's holds are gone and its counts are read:
        // the held txg is the open one.
        debug_assert_eq!(s.open, txg, "charged a txg without holding it");
        s.dirty += held;
        let (before_held, before_changed) = (s.dirty_open, s.changed_open);
        s.dirty_open += held;
        s.changed_open += changed;
        s.changed += changed;
        // The sync thread looks at the amounts before it sleeps: it needs
        // waking only when the txg gets its first dirty bytes (to start
        // the timeout) or crosses a sync threshold.
        let first = before_held == 0 && before_changed == 0;
        if first {
            s.first_dirty = Some(Instant::now());
        }
        let crossed = |before: u64, now: u64, at: u64| before < at && now >= at;
        if first
            || crossed(before_changed, s.changed_open, self.dirty_sync)
            || crossed(before_held, s.dirty_open, self.held_sync)
        {
            self.cv.notify_all();
        }
    }

    /// An engine whose next txg to open is `last_synced + 1`.
    pub fn new(last_synced: u64) -> Arc<TxgEngine> {
        Self::with_limits(
            last_synced,
            tunables::dirty_data_max_bytes(),
            tunables::dirty_data_sync_bytes(),
            Duration::from_millis(tunables::TXG_TIMEOUT_MS),
        )
    }

    pub fn with_limits(
        last_synced: u64,
        dirty_max: u64,
        dirty_sync: u64,
        timeout: Duration,
    ) -> Arc<TxgEngine> {
        Arc::new(TxgEngine {
            state: Mutex::new(State {
                open: last_synced + 1,
                holds_open: 0,
                holds_quiescing: 0,
                quiescing: None,
                opening: false,
                synced: last_synced,
                dirty: 0,
                dirty_open: 0,
                changed_open: 0,
                changed: 0,
                sync_wanted: 0,
                throttled: false,
                first_dirty: None,
                last_sync: Instant::now(),
                suspended: None,
                closing: false,
                halted: false,
            }),
            cv: Condvar::new(),
            dirty_max,
            changed_max: tunables::DIRTY_DATA_STREAM_MAX_BYTES.min(dirty_max),
            dirty_sync,
            held_sync: tunables::dirty_data_sync_held_bytes(dirty_max),
            timeout,
            thread: Mutex::new(None),
            gate: std::sync::OnceLock::new(),
        })
    }

    /// Starts the sync thread.
    pub fn start(self: &Arc<Self>, target: Arc<dyn SyncTarget>, name: &str) {
        let me = Arc::clone(self);
        let handle = std::thread::Builder::new()
            .name(format!("txg_sync:{name}"))
            .spawn(move || me.sync_loop(target.as_ref()))
            .expect("spawn txg sync thread");
        *self.thread.lock() = Some(handle);
    }

    /// Makes holds and waits follow the pool's suspension (set once).
    pub fn set_suspend_gate(&self, gate: Arc<SuspendGate>) {
        let _ = self.gate.set(gate);
    }

    /// Whether new work must fail now: the pool is suspended with
    /// `failmode=continue`.
    fn failing(&self) -> Option<String> {
        let gate = self.gate.get()?;
        let why = gate.suspended()?;
        (gate.failmode() == FailMode::Continue).then_some(why)
    }

    /// Joins the open txg, waiting while dirty data is over the limit, or
    /// while the pool is suspended (see [`crate::suspend`]).
    pub fn hold(&self) -> Result<TxgHold<'_>, TxgError> {
        if let Some(gate) = self.gate.get() {
            gate.admit().map_err(TxgError::Suspended)?;
        }
        let mut s = self.state.lock();
        loop {
            if let Some(e) = &s.suspended {
                return Err(TxgError::Suspended(e.clone()));
            }
            if s.closing {
                return Err(TxgError::Closed);
            }
            if s.opening {
                self.cv.wait(&mut s);
                continue;
            }
            if s.dirty < self.dirty_max && s.changed < self.changed_max {
                break;
            }
            // Throttle: ask for a sync and wait for dirty data to drain.
            s.sync_wanted = s.sync_wanted.max(s.open);
            s.throttled = true;
            self.cv.notify_all();
            self.cv.wait(&mut s);
        }
        s.holds_open += 1;
        Ok(TxgHold {
            engine: self,
            txg: s.open,
        })
    }

    /// The txg currently open (for readers that tag work without a hold).
    pub fn open_txg(&self) -> u64 {
        self.state.lock().open
    }

    /// Memory held by the dirty blocks of every txg not yet synced, as
    /// charged by [`TxgHold::dirty`] and [`TxgEngine::write_charged`].
    pub fn dirty_bytes(&self) -> u64 {
        self.state.lock().dirty
    }

    pub fn last_synced(&self) -> u64 {
        self.state.lock().synced
    }

    /// Asks for the open txg to be synced now, without waiting for it.
    pub fn request_sync(&self) {
        let mut s = self.state.lock();
        if s.sync_wanted < s.open {
            s.sync_wanted = s.open;
            self.cv.notify_all();
        }
    }

    /// Waits until `txg` (0 = the currently open one) is durable.
    pub fn wait_synced(&self, txg: u64) -> Result<(), TxgError> {
        let mut s = self.state.lock();
        let txg = if txg == 0 { s.open } else { txg };
        s.sync_wanted = s.sync_wanted.max(txg);
        self.cv.notify_all();
        while s.synced < txg {
            if let Some(e) = &s.suspended {
                return Err(TxgError::Suspended(e.clone()));
            }
            if s.closing && s.quiescing.is_none() && s.open > txg && s.synced < txg {
                return Err(TxgError::Closed);
            }
            if let Some(why) = self.failing() {
                return Err(TxgError::Suspended(why));
            }
            if self.gate.get().is_some() {
                // The gate has its own lock: look again now and then.
                self.cv.wait_for(&mut s, Duration::from_millis(100));
            } else {
                self.cv.wait(&mut s);
            }
        }
        Ok(())
    }

    /// Syncs everything dirty, stops the sync thread and waits for it.
    pub fn shutdown(&self) -> Result<(), TxgError> {
        let r = self.wait_synced(0);
        self.state.lock().closing = true;
        self.cv.notify_all();
        if let Some(h) = self.thread.lock().take() {
            let _ = h.join();
        }
        r
    }

    /// Stops the sync thread at once: what is open is not written, as if
    /// the machine stopped. Holds and waits fail afterwards.
    pub fn halt(&self) {
        // A sync waiting for a lost device gives up.
        if let Some(gate) = self.gate.get() {
            gate.close();
        }
        {
            let mut s = self.state.lock();
            s.halted = true;
            s.closing = true;
            if s.suspended.is_none() {
                s.suspended = Some("pool was closed without export".into());
            }
        }
        self.cv.notify_all();
        if let Some(h) = self.thread.lock().take() {
            let _ = h.join();
        }
    }

    /// Would the sync thread start a sync now?
    #[cfg(test)]
    fn sync_due(&self) -> bool {
        self.should_sync(&self.state.lock())
    }

    fn should_sync(&self, s: &State) -> bool {
        s.sync_wanted >= s.open
            || s.changed_open >= self.dirty_sync
            || s.dirty_open >= self.held_sync
            || (s.has_dirty() && s.last_sync.elapsed() >= self.timeout)
    }

    fn sync_loop(&self, target: &dyn SyncTarget) {
        crate::suspend::mark_sync_thread();
        let mut first = true;
        loop {
            let (txg, held, changed, pressure) = {
                let mut s = self.state.lock();
                // Whether the sync thread had to wait for this txg to
                // come due (it did not: the txg filled up while the last
                // one was being written — the disks are behind). The
                // first txg had no last one.
                let mut waited = std::mem::replace(&mut first, false);
                loop {
                    if s.halted || s.suspended.is_some() || (s.closing && !self.should_sync(&s)) {
                        return;
                    }
                    if self.should_sync(&s) {
                        break;
                    }
                    if !s.has_dirty() {
                        // Nothing to time out: the first dirty bytes wake us.
                        self.cv.wait(&mut s);
                        waited = true;
                        continue;
                    }
                    let left = self.timeout.saturating_sub(s.last_sync.elapsed());
                    self.cv
                        .wait_for(&mut s, left.max(Duration::from_millis(10)));
                    waited = true;
                }
                // Quiesce: close the open txg and wait for its holders;
                // new holds wait until the target has frozen it.
                let txg = s.open;
                s.quiescing = Some(txg);
                s.holds_quiescing = s.holds_open;
                s.holds_open = 0;
                s.opening = true;
                while s.holds_quiescing > 0 {
                    self.cv.wait(&mut s);
                }
                let (held, changed) = (s.dirty_open, s.changed_open);
                // Pushed: a writer waited; or the txg filled up before
                // the last one was written; or the unsynced data came
                // near the throttle (OpenZFS starts delaying writers at
                // `zfs_delay_min_dirty_percent`). A txg that fills up
                // while the sync thread idles is not: a steady stream the
                // disks keep up with does that.
                let near = |v: u64, max: u64| {
                    v as u128 * 100 >= max as u128 * tunables::DIRTY_PRESSED_PERCENT as u128
                };
                let full = held >= self.held_sync || changed >= self.dirty_sync;
                let pushed = s.throttled
                    || (full && !waited)
                    || near(s.dirty, self.dirty_max)
                    || near(s.changed, self.changed_max);
                let filling = s.first_dirty.take().map(|t| t.elapsed());
                let pressure = Pressure {
                    pushed,
                    fill_rate: filling.map_or(0.0, |d| held as f64 / d.as_secs_f64().max(1e-3)),
                };
                s.throttled = false;
                s.dirty_open = 0;
                s.changed_open = 0;
                drop(s);
                target.quiesced(txg);
                let mut s = self.state.lock();
                s.quiescing = None;
                s.open += 1;
                s.opening = false;
                self.cv.notify_all();
                (txg, held, changed, pressure)
            };
            target.pressure(pressure);
            let result = target.sync_txg(txg);
            let mut s = self.state.lock();
            match result {
                Ok(()) => {
                    s.synced = txg;
                    s.dirty = s.dirty.saturating_sub(held);
                    s.changed = s.changed.saturating_sub(changed);
                    s.last_sync = Instant::now();
                }
                Err(e) => s.suspended = Some(e),
            }
            self.cv.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct Counter {
        synced: Mutex<Vec<u64>>,
        fail_at: AtomicU64,
    }
    impl SyncTarget for Counter {
        fn sync_txg(&self, txg: u64) -> Result<(), String> {
            if self.fail_at.load(Ordering::Relaxed) == txg {
                return Err("injected".into());
            }
            self.synced.lock().push(txg);
            Ok(())
        }
    }

    fn engine(timeout_ms: u64) -> (Arc<TxgEngine>, Arc<Counter>) {
        let e = TxgEngine::with_limits(4, 1 << 20, 1 << 19, Duration::from_millis(timeout_ms));
        let c = Arc::new(Counter {
            synced: Mutex::new(vec![]),
            fail_at: AtomicU64::new(0),
        });
        e.start(c.clone(), "test");
        (e, c)
    }

    #[test]
    fn wait_synced_commits_in_order() {
        let (e, c) = engine(60_000);
        let t = {
            let h = e.hold().unwrap();
            h.dirty(10);
            h.txg
        };
        assert_eq!(t, 5);
        e.wait_synced(t).unwrap();
        assert_eq!(e.last_synced(), 5);
        let t2 = e.hold().unwrap().txg;
        assert_eq!(t2, 6);
        e.wait_synced(t2).unwrap();
        assert_eq!(*c.synced.lock(), vec![5, 6]);
        e.shutdown().unwrap();
    }

    #[test]
    fn dirty_data_triggers_sync_and_throttles() {
        let (e, c) = engine(60_000);
        for _ in 0..64 {
            let h = e.hold().unwrap();
            h.dirty(64 << 10);
        }
        // 4 MiB written against a 1 MiB limit: commits must have happened.
        assert!(!c.synced.lock().is_empty());
        e.shutdown().unwrap();
    }

    /// Small writes into large records: the memory the txg holds starts a
    /// commit (a fifth of the maximum), though few bytes were written.
    #[test]
    fn memory_held_starts_a_sync() {
        let (e, c) = engine(60_000);
        {
            let h = e.hold().unwrap();
            h.dirty(4096);
            e.write_charged(h.txg, 4096, (256 << 10) + 4096);
            assert_eq!(e.dirty_bytes(), (256 << 10) + 4096);
        }
        let start = Instant::now();
        while c.synced.lock().is_empty() {
            assert!(start.elapsed() < Duration::from_secs(10), "no sync");
            std::thread::yield_now();
        }
        e.wait_synced(0).unwrap();
        assert_eq!(e.dirty_bytes(), 0, "a synced txg holds nothing");
        e.shutdown().unwrap();
    }

    /// Writes into blocks the txg already holds hold no more memory and
    /// give its sync nothing more to write: however many there are, they
    /// do not start it early. Writes into fresh blocks do.
    #[test]
    fn rewrites_of_dirty_blocks_do_not_start_a_sync() {
        let (e, _c) = engine(60_000);
        let h = e.hold().unwrap();
        h.dirty(64 << 10);
        e.write_charged(h.txg, 64 << 10, 64 << 10);
        // 4 MiB of rewrites, against 512 KiB written (and a fifth of the
        // 1 MiB maximum held) that start a sync.
        for _ in 0..64 {
            h.dirty(64 << 10);
            e.write_charged(h.txg, 64 << 10, 0);
        }
        assert_eq!(e.dirty_bytes(), 64 << 10, "the one block is held");
        assert!(!e.sync_due(), "rewrites started a sync");
        for _ in 0..8 {
            h.dirty(64 << 10);
            e.write_charged(h.txg, 64 << 10, 64 << 10);
        }
        assert!(e.sync_due(), "512 KiB of fresh blocks did not");
        drop(h);
        e.shutdown().unwrap();
    }

    /// Records the pressure signal of each txg and takes `per_sync`.
    struct Pushes {
        seen: Mutex<Vec<bool>>,
        per_sync: Duration,
    }
    impl SyncTarget for Pushes {
        fn pressure(&self, p: Pressure) {
            self.seen.lock().push(p.pushed);
        }
        fn sync_txg(&self, _txg: u64) -> Result<(), String> {
            std::thread::sleep(self.per_sync);
            Ok(())
        }
    }

    /// Txgs that fill up while the last one is still being written mean
    /// the disks are behind (the allocation throttle engages); txgs that
    /// fill up while the sync thread idles do not.
    #[test]
    fn txgs_filling_faster_than_they_sync_are_pressed() {
        let run = |per_sync_ms: u64, pause_ms: u64| {
            let e = TxgEngine::with_limits(4, 1 << 30, 1 << 20, Duration::from_secs(60));
            let p = Arc::new(Pushes {
                seen: Mutex::new(vec![]),
                per_sync: Duration::from_millis(per_sync_ms),
            });
            e.start(p.clone(), "test");
            for _ in 0..6 {
                let h = e.hold().unwrap();
                h.dirty(1 << 20);
                e.write_charged(h.txg, 1 << 20, 1 << 20);
                drop(h);
                std::thread::sleep(Duration::from_millis(pause_ms));
            }
            e.shutdown().unwrap();
            let seen = p.seen.lock().clone();
            seen
        };
        // Each txg fills at once while the last one takes 100 ms.
        let behind = run(100, 5);
        assert!(behind.iter().skip(1).any(|&p| p), "{behind:?}");
        // Each fills 50 ms after a sync that took 1 ms.
        let keeping_up = run(1, 50);
        assert!(keeping_up.iter().all(|&p| !p), "{keeping_up:?}");
    }

    /// A sync that waits until the test lets it finish.
    struct Gated {
        open: Mutex<bool>,
        cv: Condvar,
        synced: Mutex<Vec<u64>>,
    }
    impl SyncTarget for Gated {
        fn sync_txg(&self, txg: u64) -> Result<(), String> {
            let mut open = self.open.lock();
            while !*open {
                self.cv.wait(&mut open);
            }
            self.synced.lock().push(txg);
            Ok(())
        }
    }

    /// A stream of writes into fresh blocks is held back once
    /// `DIRTY_DATA_STREAM_MAX_BYTES` of them wait for a sync, far below
    /// the memory limit; small writes into large records, which hold far
    /// more than they write, are not.
    #[test]
    fn a_stream_running_ahead_of_the_syncs_is_throttled() {
        let stream = tunables::DIRTY_DATA_STREAM_MAX_BYTES;
        let e = TxgEngine::with_limits(4, 8 * stream, u64::MAX, Duration::from_secs(60));
        let gate = Arc::new(Gated {
            open: Mutex::new(false),
            cv: Condvar::new(),
            synced: Mutex::new(vec![]),
        });
        e.start(gate.clone(), "test");
        let hold_in = |e: &Arc<TxgEngine>| {
            let e = e.clone();
            std::thread::spawn(move || e.hold().map(|h| h.txg))
        };
        // Small writes into large records: a stream's worth held, 4 KiB
        // written (no sync is due: the memory is under a fifth of the
        // maximum).
        {
            let h = e.hold().unwrap();
            h.dirty(4096);
            e.write_charged(h.txg, 4096, stream + 4096);
        }
        let writer = hold_in(&e);
        let start = Instant::now();
        while !writer.is_finished() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "held records throttled a writer"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(writer.join().unwrap(), Ok(5));
        // A stream's worth written into fresh blocks.
        e.hold().unwrap().dirty(stream);
        let writer = hold_in(&e);
        std::thread::sleep(Duration::from_millis(200));
        assert!(!writer.is_finished(), "a writer ran further ahead");
        *gate.open.lock() = true;
        gate.cv.notify_all();
        assert!(
            writer.join().unwrap().unwrap() > 5,
            "held until txg 5 synced"
        );
        assert_eq!(gate.synced.lock()[0], 5);
        e.shutdown().unwrap();
    }

    /// Dirties one byte after `idle` and expects the timeout (20 ms) to
    /// sync it with nobody waiting, within 10 s.
    fn timed_sync_after(idle: Duration) {
        let (e, c) = engine(20);
        std::thread::sleep(idle);
        e.hold().unwrap().dirty(1);
        let start = Instant::now();
        while c.synced.lock().is_empty() {
            assert!(start.elapsed() < Duration::from_secs(10), "no timed sync");
            std::thread::yield_now();
        }
        e.shutdown().unwrap();
    }

    #[test]
    fn timeout_syncs_without_waiters() {
        timed_sync_after(Duration::ZERO);
    }

    #[test]
    fn idle_engine_wakes_for_first_dirty_bytes() {
        // Long enough for the sync thread to find nothing dirty and sleep
        // without a timeout: the first dirty bytes must wake it.
        timed_sync_after(Duration::from_millis(100));
    }

    #[test]
    fn failed_sync_suspends() {
        let (e, c) = engine(60_000);
        c.fail_at.store(5, Ordering::Relaxed);
        let t = e.hold().unwrap().txg;
        assert!(matches!(e.wait_synced(t), Err(TxgError::Suspended(_))));
        assert!(e.hold().is_err());
        let _ = e.shutdown();
    }

    #[test]
    fn sync_waits_for_holders() {
        let (e, c) = engine(60_000);
        let h = e.hold().unwrap();
        let e2 = e.clone();
        let waiter = std::thread::spawn(move || e2.wait_synced(5));
        // The holder is still in txg 5, so it cannot have synced.
        std::thread::sleep(Duration::from_millis(50));
        assert!(c.synced.lock().is_empty());
        drop(h);
        waiter.join().unwrap().unwrap();
        assert_eq!(*c.synced.lock(), vec![5]);
        e.shutdown().unwrap();
    }
}
