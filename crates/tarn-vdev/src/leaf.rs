//! [`Leaf`]: one device of a pool, with its health and I/O counters.
//!
//! A leaf addresses its *allocatable region*: leaf offset 0 is device byte
//! `VDEV_LABEL_START_SIZE` (after the two front labels and the boot
//! reserve), and the region is `leaf_asize(osize(size))` bytes long, so a
//! top-level vdev can never write over a label.
//!
//! Every I/O through a leaf updates [`LeafStats`]: operation and byte
//! counts, errors (what `zpool status` shows as READ/WRITE/CKSUM), the
//! number of I/Os in flight and an exponentially weighted moving average of
//! latency, which the mirror uses to prefer its fastest child. All counters
//! are relaxed atomics: they are statistics, not synchronisation.
//!
//! A leaf that is not usable (see [`LeafState::is_usable`]: ONLINE or
//! DEGRADED) is skipped: I/O to it fails immediately without touching the
//! device and without counting an error.
//!
//! Besides the counters, a leaf remembers *when* its recent errors
//! happened ([`ErrorHistory`], bounded), so that the pool can fault it as
//! zed does — so many errors within so long — and its dirty time log
//! ([`Dtl`]): the txgs whose writes it missed. A failed write sets
//! [`Leaf::take_missed`]'s flag; the pool moves it into the DTL at commit.
//!
//! Every device I/O goes through the leaf's [`inject::Handlers`] (`tarn
//! zinject`): with no handler registered that costs one relaxed load; an
//! injected error is counted like a device's.

use crate::device::BlockDevice;
use crate::dtl::Dtl;
use crate::inject;
use crate::uring::Target;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tarn_format::label::{leaf_asize, osize, VDEV_LABEL_START_SIZE};

/// How many error times a leaf remembers per kind (I/O, checksum): more
/// than any fault threshold needs to look back on.
pub const ERROR_HISTORY_MAX: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum LeafState {
    Online = 0,
    /// Taken offline by the administrator.
    Offline = 1,
    /// Too many errors: taken out of service by the pool.
    Faulted = 2,
    /// Could not be opened.
    Unavail = 3,
    /// Too many checksum errors (or too many I/O errors on the last
    /// replica): still used, but not trusted as a replica.
    Degraded = 4,
    /// The device went away while the pool was running.
    Removed = 5,
}

impl LeafState {
    fn from_u8(v: u8) -> LeafState {
        match v {
            0 => LeafState::Online,
            1 => LeafState::Offline,
            2 => LeafState::Faulted,
            4 => LeafState::Degraded,
            5 => LeafState::Removed,
            _ => LeafState::Unavail,
        }
    }

    /// Whether I/O goes to a leaf in this state.
    pub fn is_usable(self) -> bool {
        matches!(self, LeafState::Online | LeafState::Degraded)
    }

    /// The word `zpool status` prints.
    pub fn name(self) -> &'static str {
        match self {
            LeafState::Online => "ONLINE",
            LeafState::Offline => "OFFLINE",
            LeafState::Faulted => "FAULTED",
            LeafState::Unavail => "UNAVAIL",
            LeafState::Degraded => "DEGRADED",
            LeafState::Removed => "REMOVED",
        }
    }
}

/// When a leaf's recent errors happened, newest last, at most
/// [`ERROR_HISTORY_MAX`] of each kind.
#[derive(Debug, Default)]
pub struct ErrorHistory {
    io: VecDeque<Instant>,
    checksum: VecDeque<Instant>,
}

impl ErrorHistory {
    fn push(q: &mut VecDeque<Instant>, at: Instant) {
        if q.len() == ERROR_HISTORY_MAX {
            q.pop_front();
        }
        q.push_back(at);
    }

    fn within(q: &VecDeque<Instant>, window: Duration, now: Instant) -> usize {
        q.iter()
            .filter(|&&t| now.saturating_duration_since(t) <= window)
            .count()
    }
}

#[derive(Debug, Default)]
pub struct LeafStats {
    pub read_errors: AtomicU64,
    pub write_errors: AtomicU64,
    pub checksum_errors: AtomicU64,
    pub read_ops: AtomicU64,
    pub write_ops: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    /// I/Os issued and not yet completed.
    pub pending: AtomicU64,
    /// Of `pending`, the reads and the writes (`zpool iostat -q` activ).
    pub reads_active: AtomicU64,
    pub writes_active: AtomicU64,
    /// Nanoseconds the device took for all reads and all writes
    /// (`zpool iostat -l` disk_wait, divided by the operations).
    pub read_ns: AtomicU64,
    pub write_ns: AtomicU64,
    /// EWMA (weight 1/8) of read latency in nanoseconds; 0 until measured.
    pub latency_ewma_ns: AtomicU64,
    state: AtomicU8,
    /// Being resilvered (newly attached, or replacing another): it takes
    /// every write but holds only part of the older data, so reads try it
    /// last and a wrong copy on it is not a checksum error — it is what
    /// the resilver is there to rewrite.
    resilvering: AtomicBool,
}

impl LeafStats {
    pub fn state(&self) -> LeafState {
        LeafState::from_u8(self.state.load(Relaxed))
    }

    pub fn set_state(&self, s: LeafState) {
        self.state.store(s as u8, Relaxed);
    }

    pub fn resilvering(&self) -> bool {
        self.resilvering.load(Relaxed)
    }

    pub fn set_resilvering(&self, on: bool) {
        self.resilvering.store(on, Relaxed);
    }

    /// Zeroes the error counters (`zpool clear`).
    pub fn clear_errors(&self) {
        self.read_errors.store(0, Relaxed);
        self.write_errors.store(0, Relaxed);
        self.checksum_errors.store(0, Relaxed);
    }

    fn record_latency(&self, ns: u64) {
        let old = self.latency_ewma_ns.load(Relaxed);
        let new = if old == 0 {
            ns.max(1)
        } else {
            old - old / 8 + ns / 8
        };
        self.latency_ewma_ns.store(new.max(1), Relaxed);
    }
}

/// Why one leaf I/O did not happen.
#[derive(Debug)]
pub(crate) enum LeafIoError {
    Unavailable(LeafState),
    Io(io::Error),
}

impl LeafIoError {
    /// Whether the device did not answer at all (OpenZFS's ENXIO: not
    /// usable, gone, or an injected `nxio` fault), as opposed to answering
    /// with an error. Only a read that failed this way on every copy
    /// suspends the pool (see tarn-pool's `Spa::read`).
    pub(crate) fn is_unreachable(&self) -> bool {
        match self {
            LeafIoError::Unavailable(_) => true,
            LeafIoError::Io(e) => {
                matches!(e.raw_os_error(), Some(libc::ENXIO | libc::ENODEV))
                    || crate::inject::is_nxio(e)
            }
        }
    }
}

impl std::fmt::Display for LeafIoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeafIoError::Unavailable(s) => write!(f, "device is {}", s.name()),
            LeafIoError::Io(e) => write!(f, "{e}"),
        }
    }
}

pub struct Leaf {
    pub guid: u64,
    pub path: String,
    pub dev: Arc<dyn BlockDevice>,
    pub stats: LeafStats,
    /// Injected faults (`tarn zinject`); shared with the daemon's registry.
    pub inject: Arc<inject::Handlers>,
    history: Mutex<ErrorHistory>,
    dtl: Mutex<Dtl>,
    /// A write failed since the pool last looked (`take_missed`).
    missed: AtomicBool,
    /// Offline with `zpool offline -t`: not recorded in the labels.
    offline_temporary: AtomicBool,
}

impl Leaf {
    pub fn new(guid: u64, path: impl Into<String>, dev: Arc<dyn BlockDevice>) -> Leaf {
        Leaf {
            guid,
            path: path.into(),
            dev,
            stats: LeafStats::default(),
            inject: Arc::default(),
            history: Mutex::new(ErrorHistory::default()),
            dtl: Mutex::new(Dtl::default()),
            missed: AtomicBool::new(false),
            offline_temporary: AtomicBool::new(false),
        }
    }

    /// Allocatable bytes of this leaf (OpenZFS: osize − 4.5 MiB).
    pub fn asize(&self) -> u64 {
        leaf_asize(osize(self.dev.size()))
    }

    /// The same device as a new `Leaf` with the counters and state copied
    /// (for a top-level vdev rebuilt around it, as by `zpool detach`); its
    /// injected faults stay.
    pub fn reopen(&self) -> Leaf {
        let leaf = Leaf {
            inject: self.inject.clone(),
            ..Leaf::new(self.guid, self.path.clone(), self.dev.clone())
        };
        let (to, from) = (&leaf.stats, &self.stats);
        for (t, f) in [
            (&to.read_errors, &from.read_errors),
            (&to.write_errors, &from.write_errors),
            (&to.checksum_errors, &from.checksum_errors),
            (&to.read_ops, &from.read_ops),
            (&to.write_ops, &from.write_ops),
            (&to.read_bytes, &from.read_bytes),
            (&to.write_bytes, &from.write_bytes),
            (&to.latency_ewma_ns, &from.latency_ewma_ns),
        ] {
            t.store(f.load(Relaxed), Relaxed);
        }
        to.set_state(from.state());
        to.set_resilvering(from.resilvering());
        {
            let h = self.history.lock();
            let mut mine = leaf.history.lock();
            mine.io = h.io.clone();
            mine.checksum = h.checksum.clone();
        }
        *leaf.dtl.lock() = self.dtl();
        leaf.missed.store(self.missed.load(Relaxed), Relaxed);
        leaf.offline_temporary
            .store(self.offline_temporary.load(Relaxed), Relaxed);
        leaf
    }

    /// I/O errors (read, write, flush) in the last `window`.
    pub fn io_errors_within(&self, window: Duration) -> usize {
        ErrorHistory::within(&self.history.lock().io, window, Instant::now())
    }

    /// Checksum errors in the last `window`.
    pub fn checksum_errors_within(&self, window: Duration) -> usize {
        ErrorHistory::within(&self.history.lock().checksum, window, Instant::now())
    }

    /// Zeroes the error counters and forgets the error times (`zpool clear`).
    pub fn clear_errors(&self) {
        self.stats.clear_errors();
        *self.history.lock() = ErrorHistory::default();
    }

    fn note_io_error(&self) {
        ErrorHistory::push(&mut self.history.lock().io, Instant::now());
    }

    /// The txgs this leaf missed (a copy).
    pub fn dtl(&self) -> Dtl {
        self.dtl.lock().clone()
    }

    /// Whether the leaf missed any txg (it may hold stale blocks).
    pub fn has_dtl(&self) -> bool {
        !self.dtl.lock().is_empty()
    }

    /// Whether the leaf missed txg `txg` (its copy of a block born then
    /// is stale until a resilver).
    pub fn missed_txg(&self, txg: u64) -> bool {
        self.dtl.lock().contains(txg)
    }

    /// Adds `txg` to the txgs this leaf missed.
    pub fn dtl_add(&self, txg: u64) {
        self.dtl.lock().add(txg);
    }

    /// Replaces the DTL (loading a pool's config).
    pub fn set_dtl(&self, dtl: Dtl) {
        *self.dtl.lock() = dtl;
    }

    /// Whether a write failed since the last call (and forget it).
    pub fn take_missed(&self) -> bool {
        self.missed.swap(false, Relaxed)
    }

    /// Takes the leaf offline; `temporary`: not recorded in the labels
    /// (`zpool offline -t`), so the next import brings it back.
    pub fn set_offline(&self, temporary: bool) {
        self.offline_temporary.store(temporary, Relaxed);
        self.set_state(LeafState::Offline);
    }

    /// Whether the leaf is offline in a way the labels record.
    pub fn offline_persistent(&self) -> bool {
        self.state() == LeafState::Offline && !self.offline_temporary.load(Relaxed)
    }

    /// Whether the device answers: it reads its first label's config area
    /// (a repaired or reconnected device, `zpool clear` and `online`).
    pub fn probe(&self) -> bool {
        let mut b = vec![0u8; 4096];
        self.dev
            .read_at(&mut b, tarn_format::label::LABEL_OFF_CONFIG)
            .is_ok()
            && self.dev.flush().is_ok()
    }

    pub fn state(&self) -> LeafState {
        self.stats.state()
    }

    pub fn set_state(&self, s: LeafState) {
        self.stats.set_state(s);
    }

    pub fn is_available(&self) -> bool {
        self.state().is_usable()
    }

    fn check(&self, off: u64, len: usize) -> Result<u64, LeafIoError> {
        let s = self.state();
        if !s.is_usable() {
            return Err(LeafIoError::Unavailable(s));
        }
        match off.checked_add(len as u64) {
            Some(end) if end <= self.asize() => Ok(VDEV_LABEL_START_SIZE + off),
            _ => Err(LeafIoError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("leaf access of {len} bytes at {off} is past the allocatable region"),
            ))),
        }
    }

    /// Reads from the allocatable region at leaf offset `off`.
    pub(crate) fn read(&self, buf: &mut [u8], off: u64) -> Result<(), LeafIoError> {
        let at = self.check(off, buf.len())?;
        let st = &self.stats;
        st.pending.fetch_add(1, Relaxed);
        st.reads_active.fetch_add(1, Relaxed);
        let t0 = Instant::now();
        let r = self.inject.read(self.dev.as_ref(), buf, at, off);
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        st.pending.fetch_sub(1, Relaxed);
        st.reads_active.fetch_sub(1, Relaxed);
        st.read_ns.fetch_add(ns, Relaxed);
        st.record_latency(ns);
        st.read_ops.fetch_add(1, Relaxed);
        match r {
            Ok(()) => {
                st.read_bytes.fetch_add(buf.len() as u64, Relaxed);
                Ok(())
            }
            Err(e) => {
                st.read_errors.fetch_add(1, Relaxed);
                self.note_io_error();
                Err(LeafIoError::Io(e))
            }
        }
    }

    /// Whether `[off, off+len)` of the allocatable region holds space the
    /// device never stored anything in (`BlockDevice::has_hole`).
    pub(crate) fn has_hole(&self, off: u64, len: u64) -> bool {
        usize::try_from(len)
            .ok()
            .and_then(|n| self.check(off, n).ok())
            .is_some_and(|at| self.dev.has_hole(at, len))
    }

    /// Writes to the allocatable region at leaf offset `off`.
    pub(crate) fn write(&self, buf: &[u8], off: u64) -> Result<(), LeafIoError> {
        self.write_with(buf, off, false)
    }

    /// [`Leaf::write`] that returns once the bytes are durable (a log
    /// block): `BlockDevice::write_durable`.
    pub(crate) fn write_durable(&self, buf: &[u8], off: u64) -> Result<(), LeafIoError> {
        self.write_with(buf, off, true)
    }

    /// Where a durable write of `len` bytes at leaf offset `off` may go
    /// straight to the device (`uring`): its `O_DIRECT` descriptor and
    /// the device offset, when the leaf is usable, the range inside it, no
    /// fault is being injected and the device has such a descriptor.
    /// `None` sends the write the ordinary way ([`Leaf::write_durable`]),
    /// which also reports whatever made it `None`.
    pub(crate) fn direct_durable_target(&self, len: usize, off: u64) -> Option<Target<'_>> {
        if self.inject.active() {
            return None;
        }
        let at = self.check(off, len).ok()?;
        Some(Target {
            fd: self.dev.direct_fd()?,
            offset: at,
        })
    }

    /// Counts a write of `len` bytes made through
    /// [`Leaf::direct_durable_target`] that succeeded. (One that failed
    /// is made again with [`Leaf::write_durable`], which counts it.)
    pub(crate) fn count_direct_write(&self, len: usize, ns: u64) {
        self.stats.write_ops.fetch_add(1, Relaxed);
        self.stats.write_ns.fetch_add(ns, Relaxed);
        self.stats.write_bytes.fetch_add(len as u64, Relaxed);
    }

    fn write_with(&self, buf: &[u8], off: u64, durable: bool) -> Result<(), LeafIoError> {
        let at = match self.check(off, buf.len()) {
            Ok(at) => at,
            Err(e) => {
                self.missed.store(true, Relaxed);
                return Err(e);
            }
        };
        let st = &self.stats;
        st.pending.fetch_add(1, Relaxed);
        st.writes_active.fetch_add(1, Relaxed);
        let t0 = Instant::now();
        let r = if durable {
            self.inject.write_durable(self.dev.as_ref(), buf, at)
        } else {
            self.inject.write(self.dev.as_ref(), buf, at)
        };
        st.pending.fetch_sub(1, Relaxed);
        st.writes_active.fetch_sub(1, Relaxed);
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        st.write_ns.fetch_add(ns, Relaxed);
        st.write_ops.fetch_add(1, Relaxed);
        match r {
            Ok(()) => {
                st.write_bytes.fetch_add(buf.len() as u64, Relaxed);
                Ok(())
            }
            Err(e) => {
                st.write_errors.fetch_add(1, Relaxed);
                self.note_io_error();
                self.missed.store(true, Relaxed);
                Err(LeafIoError::Io(e))
            }
        }
    }

    pub(crate) fn flush(&self) -> Result<(), LeafIoError> {
        let s = self.state();
        if !s.is_usable() {
            return Err(LeafIoError::Unavailable(s));
        }
        self.inject.flush(self.dev.as_ref()).map_err(|e| {
            self.stats.write_errors.fetch_add(1, Relaxed);
            self.note_io_error();
            self.missed.store(true, Relaxed);
            LeafIoError::Io(e)
        })
    }

    /// Cost estimate for choosing among mirror children: latency scaled by
    /// queue depth, so a busy fast disk still loses to an idle one.
    pub(crate) fn read_cost(&self) -> u64 {
        let lat = self.stats.latency_ewma_ns.load(Relaxed);
        let q = self.stats.pending.load(Relaxed);
        lat.saturating_mul(q + 1)
    }

    /// "path: error" for messages.
    pub(crate) fn describe_err(&self, e: &LeafIoError) -> String {
        format!("{}: {e}", self.path)
    }

    /// Counts a copy that failed its checksum — unless the leaf missed
    /// txgs (a DTL): a stale block there is expected until a resilver, and
    /// is repaired without being called an error (OpenZFS does not read
    /// such a child for blocks born in its DTL at all).
    pub(crate) fn count_checksum_error(&self) {
        // A copy the leaf is known to lack (it missed those txgs, or it is
        // being resilvered) is stale, not damaged.
        if self.has_dtl() || self.stats.resilvering() {
            return;
        }
        self.stats.checksum_errors.fetch_add(1, Relaxed);
        ErrorHistory::push(&mut self.history.lock().checksum, Instant::now());
    }
}
