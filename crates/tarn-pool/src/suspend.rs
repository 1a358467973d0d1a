//! Pool suspension: what happens to I/O when a top-level vdev is lost
//! (OpenZFS's `spa_suspend`/`zio_suspend` and the `failmode` property).
//!
//! When a block cannot be written because its top-level vdev has lost
//! more devices than its redundancy covers, nothing is acknowledged and
//! nothing is dropped: the pool is *suspended*. The write that failed
//! waits in the sync pipeline — whatever `failmode` says — and is issued
//! again when an administrator runs `zpool clear` after reconnecting the
//! device ([`SuspendGate::resume`]). If it fails again, the pool suspends
//! again.
//!
//! (Outside the sync thread, a write under `failmode=continue` fails
//! instead of waiting: see `on_sync_thread`.)
//!
//! A *read* suspends the pool too when no device holding any copy of the
//! block answers at all (OpenZFS's ENXIO: the device is gone, unusable,
//! or fails with `zinject -e nxio`). Under `failmode=wait` the reader
//! waits for `zpool clear` and reads again; under `continue` it gets EIO
//! at once and the pool is not suspended for it. A device that answers
//! with an I/O or checksum error is not waited for: that read fails with
//! EIO and its block is listed as a permanent error. Scrub and resilver
//! threads never wait ([`mark_scan_thread`]), and neither does a read
//! while the pool is being imported ([`SuspendGate::enable_reads`]).
//!
//! `failmode` decides what *new* work does meanwhile ([`SuspendGate::admit`],
//! called by every txg hold):
//!
//! * `wait` (the default, as OpenZFS): it blocks until the pool resumes;
//! * `continue`: it fails at once with the suspension's reason, which the
//!   POSIX layer reports as EIO; reads of healthy vdevs go on;
//! * `panic`: tarn never takes the machine down for a device; it behaves
//!   as `wait` (ARCHITECTURE.md says so, and the daemon logs it).
//!
//! The daemon enables this for every pool ([`SuspendGate::enable`]); a
//! pool used as a library keeps the older rule — a failed sync stops the
//! txg engine for good — which the crash tests rely on.
//!
//! Export and daemon shutdown must not wait forever for a device:
//! [`SuspendGate::close`] makes every waiter give up with an error, so the
//! suspended txg is abandoned (its changes were never acknowledged as
//! durable; the on-disk state stays at the last committed uberblock).

use std::cell::Cell;

use parking_lot::{Condvar, Mutex};

thread_local! {
    /// Whether this thread is a pool's txg sync thread.
    static SYNC_THREAD: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread is a scrub or resilver thread.
    static SCAN_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as a scrub/resilver thread (for its whole
/// life): its reads never wait for a suspended pool (OpenZFS's
/// `ZIO_FLAG_SCAN_THREAD`); a block it cannot read is an error it reports.
pub fn mark_scan_thread() {
    SCAN_THREAD.with(|f| f.set(true));
}

fn on_scan_thread() -> bool {
    SCAN_THREAD.with(Cell::get)
}

/// Marks the calling thread as a txg sync thread (for its whole life).
pub(crate) fn mark_sync_thread() {
    SYNC_THREAD.with(|f| f.set(true));
}

/// Whether a failed write on this thread waits for `zpool clear` even
/// under `failmode=continue`: only the sync thread's do, as they carry
/// changes already accepted; any other writer (an `fsync` writing its
/// block early) fails, and its caller falls back to the txg.
pub(crate) fn on_sync_thread() -> bool {
    SYNC_THREAD.with(Cell::get)
}

/// The `failmode` pool property.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailMode {
    #[default]
    Wait,
    Continue,
    /// Behaves as `Wait` (see the module comment).
    Panic,
}

impl FailMode {
    /// The property value (`wait`, `continue`, `panic`); `None` for any
    /// other word.
    pub fn parse(value: &str) -> Option<FailMode> {
        match value {
            "wait" => Some(FailMode::Wait),
            "continue" => Some(FailMode::Continue),
            "panic" => Some(FailMode::Panic),
            _ => None,
        }
    }
}

#[derive(Debug, Default)]
struct GateState {
    /// Whether failed writes suspend and wait at all (see `enable`).
    enabled: bool,
    /// Whether reads of unreachable devices suspend (see `enable_reads`).
    reads: bool,
    suspended: Option<String>,
    failmode: FailMode,
    closed: bool,
}

/// Whether the pool's I/O is suspended, and the waiters for its resumption.
#[derive(Debug, Default)]
pub struct SuspendGate {
    state: Mutex<GateState>,
    cv: Condvar,
}

impl SuspendGate {
    /// Makes failed writes suspend the pool and wait for `zpool clear`.
    /// Until then (a pool used as a library: tests that crash a pool by
    /// failing every device) a failed write fails its sync, and the txg
    /// engine stops for good, as `crate::txg` describes.
    pub fn enable(&self) {
        self.state.lock().enabled = true;
    }

    pub fn is_enabled(&self) -> bool {
        self.state.lock().enabled
    }

    /// Makes a read that finds no device answering suspend the pool, as a
    /// failed write does, once the pool is loaded (a read while importing
    /// fails instead: OpenZFS suspends reads only in `SPA_LOAD_NONE`).
    pub fn enable_reads(&self) {
        self.state.lock().reads = true;
    }

    /// Whether a read on this thread whose every copy is unreachable waits
    /// for `zpool clear` (OpenZFS's `ZIO_REEXECUTE_SUSPEND` of a read: only
    /// for ENXIO, never an I/O or checksum error; not under
    /// `failmode=continue`, where it fails with EIO; not on a scan thread).
    pub fn read_waits(&self) -> bool {
        let s = self.state.lock();
        s.enabled && s.reads && s.failmode != FailMode::Continue && !on_scan_thread()
    }

    pub fn set_failmode(&self, mode: FailMode) {
        self.state.lock().failmode = mode;
        self.cv.notify_all();
    }

    pub fn failmode(&self) -> FailMode {
        self.state.lock().failmode
    }

    /// Suspends the pool's I/O for `why` (the first reason is kept).
    /// Returns whether it was running until now.
    pub fn suspend(&self, why: String) -> bool {
        let mut s = self.state.lock();
        let first = s.suspended.is_none();
        if first {
            s.suspended = Some(why);
        }
        first
    }

    /// The reason the pool is suspended, if it is.
    pub fn suspended(&self) -> Option<String> {
        self.state.lock().suspended.clone()
    }

    /// Resumes I/O (`zpool clear`): every waiter retries.
    pub fn resume(&self) -> bool {
        let was = self.state.lock().suspended.take().is_some();
        self.cv.notify_all();
        was
    }

    /// Waiters give up from now on (export, shutdown).
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.cv.notify_all();
    }

    /// For the sync pipeline: blocks while the pool is suspended. `Err`
    /// (the reason) when the gate was closed meanwhile.
    pub fn wait_resumed(&self) -> Result<(), String> {
        let mut s = self.state.lock();
        loop {
            if s.closed {
                return Err(s
                    .suspended
                    .clone()
                    .unwrap_or_else(|| "pool is closing".into()));
            }
            if s.suspended.is_none() {
                return Ok(());
            }
            self.cv.wait(&mut s);
        }
    }

    /// For new work: `Ok` when the pool runs; while it is suspended,
    /// `failmode=continue` fails at once and `wait` (or `panic`) blocks
    /// until it resumes. `Err` is the reason for the suspension.
    pub fn admit(&self) -> Result<(), String> {
        let mut s = self.state.lock();
        loop {
            let Some(why) = &s.suspended else {
                return Ok(());
            };
            if s.closed || s.failmode == FailMode::Continue {
                return Err(why.clone());
            }
            self.cv.wait(&mut s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn continue_fails_new_work_and_wait_blocks_until_resume() {
        let g = Arc::new(SuspendGate::default());
        g.enable();
        assert!(g.admit().is_ok());
        assert!(g.suspend("vdev 0 lost".into()));
        assert!(!g.suspend("second reason".into()));
        g.set_failmode(FailMode::Continue);
        assert_eq!(g.admit().unwrap_err(), "vdev 0 lost");
        g.set_failmode(FailMode::Wait);
        let waiter = {
            let g = g.clone();
            std::thread::spawn(move || (g.admit(), g.wait_resumed()))
        };
        assert!(g.resume());
        let (admitted, resumed) = waiter.join().unwrap();
        assert!(admitted.is_ok() && resumed.is_ok());
        assert!(g.suspended().is_none());
    }

    #[test]
    fn close_releases_waiters_with_the_reason() {
        let g = Arc::new(SuspendGate::default());
        g.suspend("vdev 1 lost".into());
        let waiter = {
            let g = g.clone();
            std::thread::spawn(move || g.wait_resumed())
        };
        g.close();
        assert_eq!(waiter.join().unwrap().unwrap_err(), "vdev 1 lost");
        assert!(g.admit().is_err());
        assert_eq!(FailMode::parse("panic"), Some(FailMode::Panic));
        assert_eq!(FailMode::parse("nope"), None);
    }
}
