//! Fault injection into the leaves of a live pool (`tarn zinject`,
//! OpenZFS's zinject(8) device faults).
//!
//! An administrator rehearsing a failure on a scratch pool, or an
//! end-to-end test, registers a [`Handler`] on one [`Leaf`]: from then on
//! the leaf's I/O of the chosen types (`-T read|write|flush|all`)
//!
//! * fails with an I/O error ([`FaultKind::Io`], `-e io`);
//! * fails whatever its type, as from a device that vanished
//!   ([`FaultKind::Nxio`], `-e nxio`);
//! * reads succeed but return damaged bytes, so the block fails its
//!   checksum ([`FaultKind::Checksum`], `-e checksum`);
//! * or is delayed ([`FaultKind::Delay`], `-D LATENCY_MS[:LANES]`).
//!
//! Injection sits in the leaf, below the mirror/raidz code and above the
//! device, so an injected error is indistinguishable from a real one to
//! everything above: the leaf counts it in READ/WRITE, the mirror or raidz
//! read that rejects damaged bytes counts CKSUM and heals, a single-device
//! read reports the error to the caller. Label and uberblock I/O does not
//! go through a leaf and is never faulted (OpenZFS skips the label areas
//! the same way).
//!
//! **Frequency.** Each handler fires for a fraction of I/Os, in parts per
//! million ([`FREQ_PPM_MAX`] = always; `-f` is a percentage). Errors and
//! delays are drawn per I/O from a counter hashed with the handler's seed.
//! Checksum damage is instead decided per *leaf offset*: a hash of (seed,
//! offset) says whether the block read at that offset is bad, so the same
//! block is bad on every read, as real damage on the platter would be, and
//! about that fraction of distinct blocks is bad. Because the decision is
//! per offset, a leaf with a checksum handler declines aggregated reads
//! ([`Handlers::damages_reads`], see `TopVdev::read_run`): each block is
//! then read at its own offset.
//!
//! **Cost when unused.** Each leaf holds an `Arc<Handlers>`; an I/O checks
//! one relaxed atomic flag and goes straight to the device when no handler
//! is registered. The flag is only a hint: the slow path reads the handler
//! list under its lock, so after a handler is removed the next I/O is
//! normal again.
//!
//! **Registry.** The daemon keeps one [`Registry`] of every handler by id
//! (ids count up from 1 and are never reused while the daemon runs).
//! Handlers live in memory only: a daemon restart or an export of the pool
//! drops them, as a reboot drops OpenZFS's.
//!
//! Locking: the registry is the caller's to lock; a leaf's handler list is
//! an `RwLock` taken briefly (cloned out) by I/O and for writing only by
//! [`Registry`]. No lock is held across device I/O or a delay.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use crate::device::BlockDevice;
use crate::leaf::Leaf;

/// "Always": the frequency of a handler that fires on every matching I/O.
pub const FREQ_PPM_MAX: u32 = 1_000_000;

/// Handlers one daemon holds at once (all pools together).
pub const INJECT_HANDLERS_MAX: usize = 1024;

/// Longest delay one `-D` handler adds to an I/O.
pub const INJECT_DELAY_MS_MAX: u64 = 60_000;

/// Most lanes (I/Os delayed at once) of one `-D` handler.
pub const INJECT_LANES_MAX: u32 = 1024;

/// What a handler does to the I/O it fires on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The I/O fails with an I/O error (EIO).
    Io,
    /// Reads succeed with damaged bytes (decided per leaf offset).
    Checksum,
    /// Every I/O fails, as if the device had gone away (ENXIO).
    Nxio,
    /// The I/O completes no sooner than `latency_ms` after it was issued;
    /// at most `lanes` I/Os are delayed at once, later ones queue behind.
    Delay { latency_ms: u64, lanes: u32 },
}

/// Which I/O a handler applies to (`-T`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoType {
    Read,
    Write,
    Flush,
    All,
}

impl IoType {
    fn covers(self, op: IoType) -> bool {
        self == IoType::All || self == op
    }
}

/// One fault as requested: what, on which I/O, how often.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    pub io: IoType,
    /// Parts per million of matching I/Os (or, for checksum damage, of
    /// distinct offsets) that fault: 1..=[`FREQ_PPM_MAX`].
    pub freq_ppm: u32,
}

impl Fault {
    /// Checks the combination; the message says what is wrong and what to
    /// do instead.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=FREQ_PPM_MAX).contains(&self.freq_ppm) {
            return Err(format!(
                "frequency of {} parts per million is out of range 1..={FREQ_PPM_MAX}",
                self.freq_ppm
            ));
        }
        match self.kind {
            FaultKind::Checksum if !matches!(self.io, IoType::Read | IoType::All) => Err(
                "checksum errors can only be injected into reads: use '-T read' or leave -T out"
                    .into(),
            ),
            FaultKind::Nxio if self.io != IoType::All => Err(
                "an nxio fault fails every I/O of the device: leave -T out (or use '-T all')"
                    .into(),
            ),
            FaultKind::Delay { latency_ms, lanes } => {
                if !(1..=INJECT_DELAY_MS_MAX).contains(&latency_ms) {
                    return Err(format!(
                        "latency {latency_ms} ms is out of range 1..={INJECT_DELAY_MS_MAX}"
                    ));
                }
                if !(1..=INJECT_LANES_MAX).contains(&lanes) {
                    return Err(format!(
                        "{lanes} lanes is out of range 1..={INJECT_LANES_MAX}"
                    ));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// One registered fault on one leaf.
#[derive(Debug)]
pub struct Handler {
    pub id: u64,
    pub fault: Fault,
    seed: u64,
    /// I/Os this handler has looked at (the per-I/O draw).
    draws: AtomicU64,
    /// When each delay lane is next free (`Delay` only).
    lanes: Mutex<Vec<Instant>>,
}

impl Handler {
    pub fn new(id: u64, fault: Fault, seed: u64) -> Handler {
        let lanes = match fault.kind {
            FaultKind::Delay { lanes, .. } => lanes as usize,
            _ => 0,
        };
        Handler {
            id,
            fault,
            seed,
            draws: AtomicU64::new(0),
            lanes: Mutex::new(vec![Instant::now(); lanes]),
        }
    }

    /// Whether the hash `h` falls in this handler's fraction.
    fn hit(&self, h: u64) -> bool {
        h % u64::from(FREQ_PPM_MAX) < u64::from(self.fault.freq_ppm)
    }

    /// The per-I/O draw for errors and delays.
    fn fires(&self) -> bool {
        self.fault.freq_ppm >= FREQ_PPM_MAX
            || self.hit(mix(self.seed ^ mix(self.draws.fetch_add(1, Relaxed))))
    }

    /// Whether the block read at leaf offset `off` is damaged: a pure
    /// function of (seed, offset), the same on every read.
    pub fn damages(&self, off: u64) -> bool {
        self.fault.kind == FaultKind::Checksum && self.hit(mix(self.seed ^ mix(off)))
    }

    /// Damages `buf` read at `off` the same way every time: one byte,
    /// chosen by the hash, inverted. Any checksum tarn uses catches it.
    fn damage(&self, buf: &mut [u8], off: u64) {
        if buf.is_empty() {
            return;
        }
        let at = mix(mix(self.seed ^ off) ^ 0x5a5a) % buf.len() as u64;
        buf[at as usize] ^= 0xff;
    }

    /// Sleeps until this I/O's delay is served: it takes the lane that is
    /// free first and holds it for `latency_ms` from when it gets it.
    fn delay(&self, latency_ms: u64) {
        let until = {
            let mut lanes = self.lanes.lock();
            let now = Instant::now();
            let Some(lane) = lanes.iter_mut().min() else {
                return;
            };
            let until = (*lane).max(now) + Duration::from_millis(latency_ms);
            *lane = until;
            until
        };
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
    }

    fn error(&self) -> io::Error {
        match self.fault.kind {
            FaultKind::Nxio => io::Error::other(Nxio(self.id)),
            _ => io::Error::other(format!(
                "I/O error (EIO) injected by zinject handler {}",
                self.id
            )),
        }
    }
}

/// The error of an injected `nxio` fault (handler id): the device does
/// not answer, which [`is_nxio`] tells apart from an I/O error.
#[derive(Debug)]
struct Nxio(u64);

impl std::fmt::Display for Nxio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "device unavailable (ENXIO) injected by zinject handler {}",
            self.0
        )
    }
}

impl std::error::Error for Nxio {}

/// Whether `e` is an injected `nxio` fault.
pub(crate) fn is_nxio(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Nxio>())
}

/// SplitMix64's finaliser: a fast, well-spread 64-bit mix.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The handlers registered on one leaf (shared by the `Leaf` and the
/// [`Registry`]).
#[derive(Debug, Default)]
pub struct Handlers {
    /// True while `list` is non-empty: the one load a healthy I/O pays.
    active: AtomicBool,
    list: RwLock<Vec<Arc<Handler>>>,
}

impl Handlers {
    pub(crate) fn active(&self) -> bool {
        self.active.load(Relaxed)
    }

    fn add(&self, h: Arc<Handler>) {
        let mut list = self.list.write();
        list.push(h);
        self.active.store(true, Relaxed);
    }

    fn remove(&self, id: u64) {
        let mut list = self.list.write();
        list.retain(|h| h.id != id);
        self.active.store(!list.is_empty(), Relaxed);
    }

    /// The handlers that apply to `op`, after serving their delays; the
    /// injected error if one fires.
    fn before(&self, op: IoType) -> Result<Vec<Arc<Handler>>, io::Error> {
        let list: Vec<Arc<Handler>> = self
            .list
            .read()
            .iter()
            .filter(|h| h.fault.kind == FaultKind::Nxio || h.fault.io.covers(op))
            .cloned()
            .collect();
        for h in &list {
            if let FaultKind::Delay { latency_ms, .. } = h.fault.kind {
                if h.fires() {
                    h.delay(latency_ms);
                }
            }
        }
        for h in &list {
            if matches!(h.fault.kind, FaultKind::Io | FaultKind::Nxio) && h.fires() {
                return Err(h.error());
            }
        }
        Ok(list)
    }

    /// Whether a read may come back damaged (so reads must be made one
    /// block at a time, at the block's own offset).
    pub fn damages_reads(&self) -> bool {
        self.active()
            && self
                .list
                .read()
                .iter()
                .any(|h| h.fault.kind == FaultKind::Checksum)
    }

    /// `dev.read_at(buf, at)` for leaf offset `off`, with the faults.
    #[inline]
    pub(crate) fn read(
        &self,
        dev: &dyn BlockDevice,
        buf: &mut [u8],
        at: u64,
        off: u64,
    ) -> io::Result<()> {
        if !self.active() {
            return dev.read_at(buf, at);
        }
        let list = self.before(IoType::Read)?;
        dev.read_at(buf, at)?;
        for h in list.iter().filter(|h| h.damages(off)) {
            h.damage(buf, off);
        }
        Ok(())
    }

    /// `dev.write_at(buf, at)` with the faults.
    #[inline]
    pub(crate) fn write(&self, dev: &dyn BlockDevice, buf: &[u8], at: u64) -> io::Result<()> {
        if self.active() {
            self.before(IoType::Write)?;
        }
        dev.write_at(buf, at)
    }

    /// `dev.write_durable(buf, at)` with the faults of a write and of a
    /// flush: it is both.
    #[inline]
    pub(crate) fn write_durable(
        &self,
        dev: &dyn BlockDevice,
        buf: &[u8],
        at: u64,
    ) -> io::Result<()> {
        if self.active() {
            self.before(IoType::Write)?;
            self.before(IoType::Flush)?;
        }
        dev.write_durable(buf, at)
    }

    /// `dev.flush()` with the faults.
    #[inline]
    pub(crate) fn flush(&self, dev: &dyn BlockDevice) -> io::Result<()> {
        if self.active() {
            self.before(IoType::Flush)?;
        }
        dev.flush()
    }
}

/// One handler as the registry lists it.
#[derive(Debug, Clone)]
pub struct Registered {
    pub id: u64,
    /// The pool the leaf belongs to (the registry's owner decides the
    /// names; the daemon uses pool names).
    pub pool: String,
    /// The leaf's path, as `zpool status` shows it.
    pub device: String,
    pub guid: u64,
    pub fault: Fault,
    handlers: Arc<Handlers>,
}

/// Every handler of a daemon, by id.
#[derive(Debug)]
pub struct Registry {
    next_id: u64,
    handlers: BTreeMap<u64, Registered>,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry {
            next_id: 1,
            handlers: BTreeMap::new(),
        }
    }
}

impl Registry {
    /// Registers `fault` on `leaf` of `pool`; returns the new handler.
    /// Takes effect on the leaf's next I/O.
    pub fn add(&mut self, pool: &str, leaf: &Leaf, fault: Fault) -> Result<Registered, String> {
        fault.validate()?;
        if self.handlers.len() >= INJECT_HANDLERS_MAX {
            return Err(format!(
                "too many handlers (at most {INJECT_HANDLERS_MAX}): clear some with 'zinject -c'"
            ));
        }
        let id = self.next_id;
        self.next_id += 1;
        let seed = mix(leaf.guid ^ mix(id));
        leaf.inject.add(Arc::new(Handler::new(id, fault, seed)));
        let entry = Registered {
            id,
            pool: pool.to_string(),
            device: leaf.path.clone(),
            guid: leaf.guid,
            fault,
            handlers: leaf.inject.clone(),
        };
        self.handlers.insert(id, entry.clone());
        Ok(entry)
    }

    /// Every handler, by id.
    pub fn list(&self) -> impl Iterator<Item = &Registered> {
        self.handlers.values()
    }

    /// Removes handler `id`; false if there is none.
    pub fn remove(&mut self, id: u64) -> bool {
        match self.handlers.remove(&id) {
            Some(r) => {
                r.handlers.remove(id);
                true
            }
            None => false,
        }
    }

    /// Removes the handlers `which` selects; returns how many.
    pub fn remove_where(&mut self, which: impl Fn(&Registered) -> bool) -> usize {
        let ids: Vec<u64> = self.list().filter(|r| which(r)).map(|r| r.id).collect();
        for &id in &ids {
            self.remove(id);
        }
        ids.len()
    }
}

#[cfg(test)]
mod tests;
