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
//! A leaf that is not [`LeafState::Online`] is skipped: I/O to it fails
//! immediately without touching the device and without counting an error.
//!
//! Every device I/O goes through the leaf's [`inject::Handlers`] (`tarn
//! zinject`): with no handler registered that costs one relaxed load; an
//! injected error is counted like a device's.

use crate::device::BlockDevice;
use crate::inject;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;
use tarn_format::label::{leaf_asize, osize, VDEV_LABEL_START_SIZE};

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
}

impl LeafState {
    fn from_u8(v: u8) -> LeafState {
        match v {
            0 => LeafState::Online,
            1 => LeafState::Offline,
            2 => LeafState::Faulted,
            _ => LeafState::Unavail,
        }
    }

    /// The word `zpool status` prints.
    pub fn name(self) -> &'static str {
        match self {
            LeafState::Online => "ONLINE",
            LeafState::Offline => "OFFLINE",
            LeafState::Faulted => "FAULTED",
            LeafState::Unavail => "UNAVAIL",
        }
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
}

impl Leaf {
    pub fn new(guid: u64, path: impl Into<String>, dev: Arc<dyn BlockDevice>) -> Leaf {
        Leaf {
            guid,
            path: path.into(),
            dev,
            stats: LeafStats::default(),
            inject: Arc::default(),
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
        leaf
    }

    pub fn state(&self) -> LeafState {
        self.stats.state()
    }

    pub fn set_state(&self, s: LeafState) {
        self.stats.set_state(s);
    }

    pub fn is_available(&self) -> bool {
        self.state() == LeafState::Online
    }

    fn check(&self, off: u64, len: usize) -> Result<u64, LeafIoError> {
        let s = self.state();
        if s != LeafState::Online {
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
        let t0 = Instant::now();
        let r = self.inject.read(self.dev.as_ref(), buf, at, off);
        st.pending.fetch_sub(1, Relaxed);
        st.record_latency(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
        st.read_ops.fetch_add(1, Relaxed);
        match r {
            Ok(()) => {
                st.read_bytes.fetch_add(buf.len() as u64, Relaxed);
                Ok(())
            }
            Err(e) => {
                st.read_errors.fetch_add(1, Relaxed);
                Err(LeafIoError::Io(e))
            }
        }
    }

    /// Writes to the allocatable region at leaf offset `off`.
    pub(crate) fn write(&self, buf: &[u8], off: u64) -> Result<(), LeafIoError> {
        let at = self.check(off, buf.len())?;
        let st = &self.stats;
        st.pending.fetch_add(1, Relaxed);
        let r = self.inject.write(self.dev.as_ref(), buf, at);
        st.pending.fetch_sub(1, Relaxed);
        st.write_ops.fetch_add(1, Relaxed);
        match r {
            Ok(()) => {
                st.write_bytes.fetch_add(buf.len() as u64, Relaxed);
                Ok(())
            }
            Err(e) => {
                st.write_errors.fetch_add(1, Relaxed);
                Err(LeafIoError::Io(e))
            }
        }
    }

    pub(crate) fn flush(&self) -> Result<(), LeafIoError> {
        let s = self.state();
        if s != LeafState::Online {
            return Err(LeafIoError::Unavailable(s));
        }
        self.inject.flush(self.dev.as_ref()).map_err(|e| {
            self.stats.write_errors.fetch_add(1, Relaxed);
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

    pub(crate) fn count_checksum_error(&self) {
        if !self.stats.resilvering() {
            self.stats.checksum_errors.fetch_add(1, Relaxed);
        }
    }
}
