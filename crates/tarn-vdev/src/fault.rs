//! [`FaultDevice`]: a fault-injecting wrapper for deterministic crash and
//! corruption tests, in the spirit of TigerBeetle's simulated storage.
//!
//! # Crash model
//!
//! The wrapped device holds what a real disk's *volatile cache* would show:
//! every completed write is visible to reads immediately. Separately, the
//! wrapper logs every write since the last successful `flush` as (offset,
//! pre-image, data). `flush` makes everything durable and empties the log.
//!
//! [`FaultDevice::crash`] simulates power loss and then "reboots" the device:
//!
//! 1. Every logged write is rolled back, newest first, restoring the
//!    pre-images: the device now holds exactly the state at the last flush.
//! 2. A seeded-random subset of the logged writes *survives*: each write but
//!    the last survives independently with probability 1/2 (disks reorder
//!    their caches). The last write is, with equal probability, lost,
//!    persisted whole, or *torn*: a random non-empty proper prefix of its
//!    512-byte sectors (counted from the write's start) persisted. A write
//!    of a single sector is never torn: sectors are atomic.
//! 3. Surviving writes are re-applied oldest first, so where two survivors
//!    overlap the newer one wins, as on a real disk.
//!
//! A `write_durable` is logged like any write but always survives (step 2
//! keeps it whole, and step 3 re-applies it in its place among the
//! others), so the writes before it stay as unsure as they were.
//!
//! Consequences the tests rely on: **flushed data always survives a crash**;
//! unflushed data may or may not; a torn write changes whole sectors only.
//! After `crash` the log is empty and the device keeps working.
//!
//! # Other faults
//!
//! `set_fail_reads` / `set_fail_writes` make every read / write (and flush)
//! fail with EIO; `fail_after_writes(n)` lets `n` more writes succeed and
//! then fails all writes. `flip_bit` and `corrupt` damage the *medium*
//! directly: they are not logged, so they count as durable (bit rot), but
//! a later crash rolling back an earlier overlapping write may undo them.
//! `set_latency` sleeps before every I/O (to model a slow disk).
//!
//! All randomness comes from a ChaCha8 generator seeded at construction
//! (and from the explicit seed of `corrupt`), so a failing seed replays the
//! same outcome given the same sequence of calls.

use crate::device::BlockDevice;
use parking_lot::Mutex;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Granularity of torn writes.
const TORN_SECTOR: usize = 512;

struct PendingWrite {
    offset: u64,
    before: Vec<u8>,
    after: Vec<u8>,
    /// Written by `write_durable`: always survives a crash.
    durable: bool,
}

struct FaultState {
    rng: ChaCha8Rng,
    pending: Vec<PendingWrite>,
    /// `Some(n)`: n more writes succeed, then all fail.
    writes_left: Option<u64>,
}

/// What one [`FaultDevice::crash`] did, for test diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CrashReport {
    /// Unflushed writes that were lost entirely.
    pub lost: usize,
    /// Unflushed writes that persisted whole.
    pub survived: usize,
    /// Sectors of the last write that persisted, if it was torn.
    pub torn_sectors: Option<usize>,
    /// Errors from the inner device while rolling back (should be 0).
    pub inner_errors: usize,
}

pub struct FaultDevice {
    inner: Arc<dyn BlockDevice>,
    state: Mutex<FaultState>,
    fail_reads: AtomicBool,
    fail_writes: AtomicBool,
    latency_ns: AtomicU64,
}

fn eio(what: &str) -> io::Error {
    io::Error::other(format!("injected {what} error"))
}

impl FaultDevice {
    pub fn new(inner: Arc<dyn BlockDevice>, seed: u64) -> FaultDevice {
        FaultDevice {
            inner,
            state: Mutex::new(FaultState {
                rng: ChaCha8Rng::seed_from_u64(seed),
                pending: Vec::new(),
                writes_left: None,
            }),
            fail_reads: AtomicBool::new(false),
            fail_writes: AtomicBool::new(false),
            latency_ns: AtomicU64::new(0),
        }
    }

    pub fn set_fail_reads(&self, fail: bool) {
        self.fail_reads.store(fail, Ordering::SeqCst);
    }

    pub fn set_fail_writes(&self, fail: bool) {
        self.fail_writes.store(fail, Ordering::SeqCst);
    }

    /// Lets `n` more writes succeed, then fails every write.
    pub fn fail_after_writes(&self, n: u64) {
        self.state.lock().writes_left = Some(n);
    }

    /// Clears every injected failure (not latency).
    pub fn heal(&self) {
        self.set_fail_reads(false);
        self.set_fail_writes(false);
        self.state.lock().writes_left = None;
    }

    pub fn set_latency(&self, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.latency_ns.store(ns, Ordering::SeqCst);
    }

    /// Writes since the last successful flush (not counting durable ones).
    pub fn unflushed_writes(&self) -> usize {
        self.state
            .lock()
            .pending
            .iter()
            .filter(|w| !w.durable)
            .count()
    }

    /// Flips bit `bit` (0..8) of the byte at `offset`, on the medium.
    pub fn flip_bit(&self, offset: u64, bit: u8) -> io::Result<()> {
        let mut b = [0u8; 1];
        self.inner.read_at(&mut b, offset)?;
        b[0] ^= 1 << (bit % 8);
        self.inner.write_at(&b, offset)
    }

    /// Overwrites `len` bytes at `offset` with bytes drawn from `seed`.
    pub fn corrupt(&self, offset: u64, len: usize, seed: u64) -> io::Result<()> {
        let mut junk = vec![0u8; len];
        ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut junk);
        self.inner.write_at(&junk, offset)
    }

    fn delay(&self) {
        let ns = self.latency_ns.load(Ordering::Relaxed);
        if ns > 0 {
            std::thread::sleep(Duration::from_nanos(ns));
        }
    }

    /// A write, logged for `crash`; `durable` ones always survive it.
    fn write_logged(&self, buf: &[u8], offset: u64, durable: bool) -> io::Result<()> {
        self.delay();
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(eio("write"));
        }
        // The lock spans pre-image, write and log so concurrent writes log
        // in the order they reached the device.
        let mut st = self.state.lock();
        if st.writes_left == Some(0) {
            return Err(eio("write"));
        }
        let mut before = vec![0u8; buf.len()];
        self.inner.read_at(&mut before, offset)?;
        self.inner.write_at(buf, offset)?;
        st.pending.push(PendingWrite {
            offset,
            before,
            after: buf.to_vec(),
            durable,
        });
        if let Some(n) = st.writes_left.as_mut() {
            *n -= 1;
        }
        Ok(())
    }

    /// Simulates power loss; see the module comment for the exact model.
    pub fn crash(&self) -> CrashReport {
        let mut st = self.state.lock();
        let pending = std::mem::take(&mut st.pending);
        let mut report = CrashReport::default();
        for w in pending.iter().rev() {
            if self.inner.write_at(&w.before, w.offset).is_err() {
                report.inner_errors += 1;
            }
        }
        let n = pending.len();
        for (i, w) in pending.iter().enumerate() {
            let keep = if w.durable {
                w.after.len()
            } else if i + 1 == n {
                last_write_fate(&mut st.rng, w.after.len(), &mut report)
            } else if st.rng.random_bool(0.5) {
                report.survived += 1;
                w.after.len()
            } else {
                report.lost += 1;
                0
            };
            if keep > 0 && self.inner.write_at(&w.after[..keep], w.offset).is_err() {
                report.inner_errors += 1;
            }
        }
        report
    }
}

/// Decides how many leading bytes of the last unflushed write persist.
fn last_write_fate(rng: &mut ChaCha8Rng, len: usize, report: &mut CrashReport) -> usize {
    let sectors = len.div_ceil(TORN_SECTOR);
    match rng.random_range(0..3u32) {
        0 => {
            report.lost += 1;
            0
        }
        1 if sectors > 1 => {
            let k = rng.random_range(1..sectors);
            report.torn_sectors = Some(k);
            k * TORN_SECTOR
        }
        _ => {
            report.survived += 1;
            len
        }
    }
}

impl BlockDevice for FaultDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.delay();
        if self.fail_reads.load(Ordering::SeqCst) {
            return Err(eio("read"));
        }
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_logged(buf, offset, false)
    }

    fn write_durable(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_logged(buf, offset, true)
    }

    fn flush(&self) -> io::Result<()> {
        self.delay();
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(eio("flush"));
        }
        let mut st = self.state.lock();
        self.inner.flush()?;
        st.pending.clear();
        Ok(())
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn physical_sector_size(&self) -> u32 {
        self.inner.physical_sector_size()
    }

    fn describe(&self) -> String {
        format!("fault({})", self.inner.describe())
    }
}

/// What a [`HookDevice`] does around each durable write: given the bytes,
/// the offset and the write to `inner` (to call or not), the result.
pub type DurableHook =
    dyn Fn(&[u8], u64, &dyn Fn() -> io::Result<()>) -> io::Result<()> + Send + Sync;

/// Hands every call to `inner` but durable writes (only the intent log
/// makes those), which go through a hook first, for tests of what a log
/// write can meet: a writer that panics, one block that fails, writes
/// that overlap (count them around the call).
pub struct HookDevice {
    inner: Arc<dyn BlockDevice>,
    hook: Box<DurableHook>,
}

impl HookDevice {
    pub fn new(
        inner: Arc<dyn BlockDevice>,
        hook: impl Fn(&[u8], u64, &dyn Fn() -> io::Result<()>) -> io::Result<()> + Send + Sync + 'static,
    ) -> HookDevice {
        HookDevice {
            inner,
            hook: Box::new(hook),
        }
    }
}

impl BlockDevice for HookDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn write_durable(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        (self.hook)(buf, offset, &|| self.inner.write_durable(buf, offset))
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn physical_sector_size(&self) -> u32 {
        self.inner.physical_sector_size()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDevice;

    fn dev(seed: u64) -> FaultDevice {
        FaultDevice::new(Arc::new(MemDevice::new(1 << 20)), seed)
    }

    fn read(d: &FaultDevice, off: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        d.read_at(&mut b, off).unwrap();
        b
    }

    /// Writes a flushed base, then unflushed overlapping writes; crashes.
    fn scenario(seed: u64) -> (Vec<u8>, CrashReport) {
        let d = dev(seed);
        d.write_at(&[1u8; 8192], 0).unwrap();
        d.flush().unwrap();
        for i in 0..6u8 {
            d.write_at(&[10 + i; 4096], u64::from(i) * 2048).unwrap();
        }
        d.write_at(&[0xee; 4096], 65536).unwrap();
        assert_eq!(d.unflushed_writes(), 7);
        let r = d.crash();
        assert_eq!(d.unflushed_writes(), 0);
        (read(&d, 0, 70_000), r)
    }

    #[test]
    fn flushed_data_survives_every_crash() {
        for seed in 0..200 {
            let d = dev(seed);
            d.write_at(&[7u8; 4096], 4096).unwrap();
            d.flush().unwrap();
            d.write_at(&[9u8; 4096], 4096).unwrap();
            d.write_at(&[9u8; 4096], 16384).unwrap();
            d.crash();
            let a = read(&d, 4096, 4096);
            assert!(a == vec![7u8; 4096] || a == vec![9u8; 4096]);
            d.flush().unwrap();
            d.crash();
            assert_eq!(read(&d, 4096, 4096), a, "seed {seed}");
        }
    }

    #[test]
    fn unflushed_writes_may_vanish_and_tear_by_sector() {
        let (mut lost, mut kept, mut torn) = (false, false, false);
        for seed in 0..300 {
            let (img, r) = scenario(seed);
            assert_eq!(r.inner_errors, 0);
            // The last write (0xee at 65536) is the only one that may tear.
            let last = &img[65536..65536 + 4096];
            for (s, chunk) in last.chunks(512).enumerate() {
                let v = chunk[0];
                assert!(
                    chunk.iter().all(|&b| b == v),
                    "sector not atomic, seed {seed}"
                );
                assert!(v == 0 || v == 0xee);
                if s > 0 && v == 0xee {
                    assert_eq!(last[(s - 1) * 512], 0xee, "torn write is not a prefix");
                }
            }
            // The flushed base is either still there or overwritten by a
            // write that was really issued, never anything else.
            assert!(img[..8192].iter().all(|&b| b == 1 || (10..16).contains(&b)));
            lost |= r.lost > 0;
            kept |= r.survived > 0;
            torn |= r.torn_sectors.is_some();
        }
        assert!(lost && kept && torn);
    }

    #[test]
    fn a_durable_write_survives_every_crash_and_nothing_else_with_it() {
        let (mut lost_before, mut lost_after) = (false, false);
        for seed in 0..200 {
            let d = dev(seed);
            d.write_at(&[1u8; 4096], 0).unwrap();
            d.write_at(&[2u8; 4096], 8192).unwrap(); // overwritten below
            d.write_durable(&[3u8; 4096], 8192).unwrap();
            d.write_at(&[4u8; 4096], 16384).unwrap();
            assert_eq!(d.unflushed_writes(), 3, "the durable one is not pending");
            d.crash();
            assert_eq!(read(&d, 8192, 4096), vec![3u8; 4096], "seed {seed}");
            lost_before |= read(&d, 0, 4096) == vec![0u8; 4096];
            lost_after |= read(&d, 16384, 4096) == vec![0u8; 4096];
        }
        // It made neither the write before it nor the one after durable.
        assert!(lost_before && lost_after);
    }

    #[test]
    fn same_seed_same_outcome() {
        for seed in 0..20 {
            assert_eq!(scenario(seed), scenario(seed));
        }
        assert!((0..20).any(|s| scenario(s).0 != scenario(s + 1).0));
    }

    #[test]
    fn injected_errors_and_bit_rot() {
        let d = dev(1);
        d.fail_after_writes(2);
        d.write_at(&[1], 0).unwrap();
        d.write_at(&[1], 1).unwrap();
        assert!(d.write_at(&[1], 2).is_err());
        d.heal();
        d.set_fail_reads(true);
        assert!(d.read_at(&mut [0u8; 1], 0).is_err());
        d.set_fail_reads(false);
        d.set_fail_writes(true);
        assert!(d.write_at(&[1], 3).is_err());
        assert!(d.flush().is_err());
        d.set_fail_writes(false);
        d.flip_bit(0, 3).unwrap();
        assert_eq!(read(&d, 0, 1), vec![1 ^ 8]);
        d.corrupt(100, 64, 5).unwrap();
        let a = read(&d, 100, 64);
        d.corrupt(100, 64, 5).unwrap();
        assert_eq!(read(&d, 100, 64), a);
        assert!(a.iter().any(|&b| b != 0));
    }
}
