//! tarn-zvol: a volume — one dataset as a single array of blocks (ZFS's
//! `zvol.c`), for virtual machines and anything else that wants a block
//! device. The NBD server (`tarn-nbd`) is its front end.
//!
//! A volume's object set holds object 1, the bytes, in blocks of
//! `volblocksize`, and object 2, a ZAP with the size
//! (`tarn_format::zvol`). Everything else is the object layer's: writes
//! go into the open txg like a file's, whole zero blocks become holes
//! (with compression on), freed ranges are holes, and reading a hole
//! gives zeros.
//!
//! ## Durability (as ZFS gives a zvol)
//! Every write, TRIM and zeroing leaves an intent-log record in the same
//! txg as the change (`WRITE` by reference, `FREE_RANGE`), so
//! [`Zvol::flush`] commits the log — one log write, not a txg — and every
//! change acknowledged before it survives a crash. `fua` on a call and
//! `sync=always` commit before the call returns; `sync=disabled` makes
//! flushes do nothing (data of the last few seconds may be lost in a
//! crash, and the guest was told it was safe: only for scratch volumes).
//! Large writes go to their final place and are logged by pointer, as for
//! files (the log's own rule, `tarn_zil::LOG_IMMEDIATE_WRITE_BYTES`).
//! A resize is not logged: it waits for its txg.
//!
//! At open (read-write) the records the log holds from before a crash are
//! applied again, in order, in one txg that also starts the new chain.
//!
//! ## Locking
//! A change applies and logs under the lock of every *range* it touches
//! (`RANGE_LOCK_BYTES` stripes, taken in ascending order), so two
//! overlapping writes reach the log in the order they reached the data
//! and a replay ends where the live volume did; writes to different
//! ranges run in parallel, down to the object layer's own lock. Reads take
//! no range lock: a read racing a write sees one or the other per block,
//! as a disk would.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard, RwLock};
use tarn_dmu::{DmuError, Objset, ReadPiece, ZapValue};
use tarn_format::objset::ObjsetType;
use tarn_format::zil::LogRecord;
use tarn_format::zvol::{
    ZVOL_BLOCK_DEFAULT, ZVOL_BLOCK_MAX, ZVOL_BLOCK_MIN, ZVOL_OBJ, ZVOL_SIZE_KEY, ZVOL_ZAP_OBJ,
};
use tarn_format::ObjType;
use tarn_pool::TxgEngine;
use tarn_zil::Zilog;

pub use tarn_format::zvol;

/// Bytes covered by one stripe of the range lock.
pub const RANGE_LOCK_BYTES: u64 = 1 << 20;
/// Stripes of the range lock (a power of two).
const RANGE_LOCK_STRIPES: usize = 64;
/// Dirty bytes a change that writes no data is charged (TRIM, resize).
const TX_METADATA_BYTES: u64 = 2048;
/// A zeroing without `may_trim` writes zero blocks at most this many
/// bytes at a time (bounding the buffer).
const ZERO_CHUNK_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ZvolError {
    /// Offset or length outside the volume.
    #[error("range {offset}+{len} is outside the volume ({size} bytes)")]
    OutOfRange { offset: u64, len: u64, size: u64 },
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("volume is read-only")]
    ReadOnly,
    #[error("out of space")]
    NoSpace,
    #[error("quota exceeded")]
    Quota,
    /// The volume is being replaced under its users (rollback, receive).
    #[error("volume is being replaced")]
    Stale,
    #[error("I/O error: {0}")]
    Io(String),
    #[error("volume is corrupted: {0}")]
    Corrupted(String),
}

pub type Result<T> = std::result::Result<T, ZvolError>;

impl From<DmuError> for ZvolError {
    fn from(e: DmuError) -> Self {
        match e {
            DmuError::Corrupted(c) => ZvolError::Corrupted(c.to_string()),
            DmuError::NoSuchObject(o) => ZvolError::Corrupted(format!("object {o} is missing")),
            e => ZvolError::Io(e.to_string()),
        }
    }
}

impl From<tarn_pool::TxgError> for ZvolError {
    fn from(e: tarn_pool::TxgError) -> Self {
        ZvolError::Io(e.to_string())
    }
}

impl From<tarn_zil::ZilError> for ZvolError {
    fn from(e: tarn_zil::ZilError) -> Self {
        ZvolError::Io(e.to_string())
    }
}

/// The dataset's `sync` property.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    #[default]
    Standard,
    Always,
    Disabled,
}

/// What the volume's properties say, changeable while it is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settings {
    pub sync: SyncMode,
    /// `logbias=throughput`: writes go in place, logged by pointer.
    pub throughput: bool,
    pub readonly: bool,
}

/// Space accounting from the layer that knows it: asked before a change
/// that may allocate `bytes` more (frees are never asked).
pub trait SpaceCheck: Send + Sync {
    fn check_write(&self, bytes: u64) -> Result<()>;
}

/// No limits (tests on an in-memory store).
pub struct Unlimited;

impl SpaceCheck for Unlimited {
    fn check_write(&self, _: u64) -> Result<()> {
        Ok(())
    }
}

/// One run of a [`Zvol::extents`] answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub len: u64,
    /// Never written, trimmed or zeroed: reads as zeros, takes no space.
    pub hole: bool,
}

/// Checks a `volblocksize`: a power of two in 512 B ..= 128 KiB.
pub fn check_block_size(bs: u64) -> Result<u32> {
    if bs.is_power_of_two() && (u64::from(ZVOL_BLOCK_MIN)..=u64::from(ZVOL_BLOCK_MAX)).contains(&bs)
    {
        return Ok(bs as u32);
    }
    Err(ZvolError::Invalid(format!(
        "volblocksize must be a power of 2 from {ZVOL_BLOCK_MIN} to {}K",
        ZVOL_BLOCK_MAX >> 10
    )))
}

/// `size` rounded up to a whole number of `bs` blocks; a size of zero,
/// or one past the object layer's limit, is refused.
pub fn round_size(size: u64, bs: u32) -> Result<u64> {
    let bs = u64::from(bs);
    match size.checked_next_multiple_of(bs) {
        Some(0) => Err(ZvolError::Invalid("volume size cannot be zero".into())),
        Some(s) if s <= tarn_dmu::objset::MAX_OBJECT_BYTES => Ok(s),
        _ => Err(ZvolError::Invalid("volume size is too large".into())),
    }
}

/// The `refreservation` a thick volume of `size` bytes in `bs`-byte
/// blocks with `copies` copies gets (`refreservation=auto`), as OpenZFS's
/// `zvol_volsize_to_reservation`: the data times its copies, plus every
/// indirect block a full volume needs (each with one copy more than the
/// data, at most three) and a few for the object set itself.
pub fn reservation_for(size: u64, bs: u32, copies: u8) -> u64 {
    use tarn_format::dnode::{BLKPTRS_PER_INDIRECT, INDIRECT_BLOCK_SIZE};
    let copies = u64::from(copies.clamp(1, 3));
    let mut blocks = size.div_ceil(u64::from(bs.max(1)));
    // Metadata blocks: the object set's own, then each indirect level.
    let mut meta: u64 = 7;
    while blocks > 1 {
        blocks = blocks.div_ceil(BLKPTRS_PER_INDIRECT);
        meta += blocks;
    }
    meta *= (copies + 1).min(3);
    size.saturating_mul(copies)
        .saturating_add(meta.saturating_mul(INDIRECT_BLOCK_SIZE as u64))
}

/// The default block size.
pub const BLOCK_SIZE_DEFAULT: u32 = ZVOL_BLOCK_DEFAULT;

/// One open volume. `Send + Sync`: call it from any thread.
pub struct Zvol {
    os: Arc<Objset>,
    txg: Arc<TxgEngine>,
    zil: Option<Arc<Zilog>>,
    space: Arc<dyn SpaceCheck>,
    block_size: u32,
    size: AtomicU64,
    settings: RwLock<Settings>,
    stripes: Box<[Mutex<()>]>,
    /// Set by [`Zvol::suspend`]: every change fails from now on.
    suspended: AtomicBool,
    /// Serialises resizes against each other.
    resizing: Mutex<()>,
}

impl Zvol {
    /// Makes an empty object set a volume of `size` bytes (rounded up to
    /// `block_size`) and commits it.
    pub fn format(os: &Objset, txg: &TxgEngine, size: u64, block_size: u32) -> Result<()> {
        let bs = check_block_size(u64::from(block_size))?;
        let size = round_size(size, bs)?;
        match os.object_info(ZVOL_OBJ) {
            Err(DmuError::NoSuchObject(_)) => {}
            Ok(_) => return Err(ZvolError::Invalid("object set is not empty".into())),
            Err(e) => return Err(e.into()),
        }
        let t = {
            let h = txg.hold()?;
            let _os = os.hold();
            h.dirty(TX_METADATA_BYTES);
            os.set_objset_type(ObjsetType::Zvol);
            let data = os.object_create(ObjType::Zvol, bs, 0)?;
            let zap = os.zap_create(ObjType::Zap)?;
            if data != ZVOL_OBJ || zap != ZVOL_ZAP_OBJ {
                return Err(ZvolError::Invalid("object set is not empty".into()));
            }
            os.zap_update(ZVOL_ZAP_OBJ, ZVOL_SIZE_KEY.as_bytes(), &ZapValue::u64(size))?;
            h.txg
        };
        txg.wait_synced(t)?;
        Ok(())
    }

    /// The size and block size a volume's object set records, without
    /// opening it (for `zfs get` of a snapshot, say).
    pub fn geometry(os: &Objset) -> Result<(u64, u32)> {
        if os.objset_type() != ObjsetType::Zvol {
            return Err(ZvolError::Invalid("dataset is not a volume".into()));
        }
        let size = match os.zap_lookup(ZVOL_ZAP_OBJ, ZVOL_SIZE_KEY.as_bytes()) {
            Ok(v) => v
                .as_single_u64()
                .ok_or_else(|| ZvolError::Corrupted("volume size is not a u64".into()))?,
            Err(DmuError::NotFound) => {
                return Err(ZvolError::Corrupted("volume has no size".into()))
            }
            Err(e) => return Err(e.into()),
        };
        let info = os.object_info(ZVOL_OBJ)?;
        if info.typ != ObjType::Zvol {
            return Err(ZvolError::Corrupted("object 1 is not volume data".into()));
        }
        let bs = check_block_size(u64::from(info.block_size))
            .map_err(|_| ZvolError::Corrupted(format!("block size {}", info.block_size)))?;
        if size == 0 || size % u64::from(bs) != 0 {
            return Err(ZvolError::Corrupted(format!(
                "volume size {size} is not a whole number of {bs}-byte blocks"
            )));
        }
        Ok((size, bs))
    }

    /// Opens a volume; a read-write open first applies what the intent
    /// log holds from before a crash.
    pub fn open(
        os: Arc<Objset>,
        txg: Arc<TxgEngine>,
        zil: Option<Arc<Zilog>>,
        space: Arc<dyn SpaceCheck>,
        settings: Settings,
    ) -> Result<Zvol> {
        let (size, block_size) = Self::geometry(&os)?;
        let zv = Zvol {
            os,
            txg,
            zil,
            space,
            block_size,
            size: AtomicU64::new(size),
            settings: RwLock::new(settings),
            stripes: (0..RANGE_LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            suspended: AtomicBool::new(false),
            resizing: Mutex::new(()),
        };
        zv.tell_log(&settings);
        if !settings.readonly {
            zv.replay()?;
        }
        Ok(zv)
    }

    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    pub fn settings(&self) -> Settings {
        *self.settings.read()
    }

    pub fn set_settings(&self, s: Settings) {
        *self.settings.write() = s;
        self.tell_log(&s);
    }

    fn tell_log(&self, s: &Settings) {
        if let Some(zil) = &self.zil {
            zil.set_throughput(s.throughput);
        }
    }

    pub fn objset(&self) -> &Arc<Objset> {
        &self.os
    }

    /// Stops every change (the volume is about to be replaced: rollback,
    /// receive); reads go on. A change inside its transaction finishes,
    /// so once the open txg has synced nothing more reaches the object
    /// set.
    pub fn suspend(&self) {
        self.suspended.store(true, Ordering::Release);
    }

    pub fn is_suspended(&self) -> bool {
        self.suspended.load(Ordering::Acquire)
    }

    fn writable(&self) -> Result<()> {
        if self.is_suspended() {
            return Err(ZvolError::Stale);
        }
        if self.settings.read().readonly {
            return Err(ZvolError::ReadOnly);
        }
        Ok(())
    }

    fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        let size = self.size();
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(()),
            _ => Err(ZvolError::OutOfRange { offset, len, size }),
        }
    }

    /// The range-lock stripes of `[offset, offset+len)`, locked in
    /// ascending order.
    fn lock_range(&self, offset: u64, len: u64) -> Vec<MutexGuard<'_, ()>> {
        let first = offset / RANGE_LOCK_BYTES;
        let last = (offset + len.max(1) - 1) / RANGE_LOCK_BYTES;
        let n = self.stripes.len() as u64;
        let mut idx: Vec<usize> = if last - first + 1 >= n {
            (0..self.stripes.len()).collect()
        } else {
            (first..=last).map(|r| (r % n) as usize).collect()
        };
        idx.sort_unstable();
        idx.dedup();
        idx.into_iter().map(|i| self.stripes[i].lock()).collect()
    }

    /// Runs `f` inside one txg (holding it and the object set), then,
    /// with `sync=always` or `durable`, commits the log.
    fn tx(&self, dirty: u64, durable: bool, f: impl FnOnce(u64) -> Result<()>) -> Result<()> {
        {
            let h = self.txg.hold()?;
            let _os = self.os.hold();
            if self.is_suspended() {
                return Err(ZvolError::Stale);
            }
            h.dirty(dirty);
            f(h.txg)?;
        }
        if durable || self.settings().sync == SyncMode::Always {
            self.commit()?;
        }
        Ok(())
    }

    /// The `len` bytes at `offset` as pieces of blocks and runs of zeros.
    pub fn read(&self, offset: u64, len: usize) -> Result<Vec<ReadPiece>> {
        self.check_range(offset, len as u64)?;
        Ok(self.os.read_pieces(ZVOL_OBJ, offset, len)?)
    }

    /// Reads into `buf` (`buf.len()` bytes at `offset`).
    pub fn read_into(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let pieces = self.read(offset, buf.len())?;
        ReadPiece::copy_all(&pieces, buf);
        Ok(())
    }

    /// Writes `data` at `offset`; with `fua` it is durable on return.
    pub fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<()> {
        self.writable()?;
        self.check_range(offset, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        self.space.check_write(data.len() as u64)?;
        let _r = self.lock_range(offset, data.len() as u64);
        self.tx(data.len() as u64, fua, |txg| {
            let held = self.os.write_charged(ZVOL_OBJ, offset, data)?;
            self.txg.write_charged(txg, data.len() as u64, held);
            if let Some(zil) = &self.zil {
                zil.log_write(txg, ZVOL_OBJ, offset, data.len() as u64);
            }
            Ok(())
        })
    }

    /// Discards `[offset, offset+len)`: whole blocks are freed (the
    /// volume's `used` drops), the parts of blocks at the edges are
    /// zeroed. With `fua` the change is durable on return.
    pub fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<()> {
        self.writable()?;
        self.check_range(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let _r = self.lock_range(offset, len);
        self.tx(TX_METADATA_BYTES, fua, |txg| {
            self.os.free_range(ZVOL_OBJ, offset, len)?;
            if let Some(zil) = &self.zil {
                zil.log(
                    txg,
                    LogRecord::FreeRange {
                        obj: ZVOL_OBJ,
                        offset,
                        len,
                    },
                );
            }
            Ok(())
        })
    }

    /// Makes `[offset, offset+len)` read as zeros. With `may_trim` whole
    /// blocks become holes (as [`Zvol::trim`]); without it (NBD's
    /// `NO_HOLE`) zeros are written, so the range stays allocated —
    /// unless compression turns zero blocks into holes, as ZFS does.
    pub fn zero(&self, offset: u64, len: u64, may_trim: bool, fua: bool) -> Result<()> {
        if may_trim {
            return self.trim(offset, len, fua);
        }
        self.writable()?;
        self.check_range(offset, len)?;
        let zeros = vec![0u8; len.min(ZERO_CHUNK_BYTES) as usize];
        let mut at = offset;
        let end = offset + len;
        while at < end {
            let n = (end - at).min(ZERO_CHUNK_BYTES);
            self.write(at, &zeros[..n as usize], false)?;
            at += n;
        }
        if fua {
            self.commit()?;
        }
        Ok(())
    }

    /// Makes every change acknowledged so far durable (NBD `FLUSH`): one
    /// commit of the intent log. `sync=disabled` returns at once.
    pub fn flush(&self) -> Result<()> {
        let s = self.settings();
        if s.readonly || s.sync == SyncMode::Disabled {
            return Ok(());
        }
        self.commit()
    }

    fn commit(&self) -> Result<()> {
        if self.settings().sync == SyncMode::Disabled {
            return Ok(());
        }
        match &self.zil {
            Some(zil) => Ok(zil.commit()?),
            None => Ok(self.txg.wait_synced(0)?),
        }
    }

    /// Which parts of `[offset, offset+len)` are holes and which hold
    /// data, in order, covering exactly the range (clipped to the size).
    pub fn extents(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        let size = self.size();
        if offset >= size {
            return Err(ZvolError::OutOfRange { offset, len, size });
        }
        let end = offset.saturating_add(len).min(size);
        let mut out: Vec<Extent> = Vec::new();
        let mut at = offset;
        while at < end {
            let data = self.os.next_data(ZVOL_OBJ, at)?;
            let (hole, next) = match data {
                Some(d) if d <= at => (false, self.os.next_hole(ZVOL_OBJ, at)?),
                Some(d) => (true, d),
                None => (true, end),
            };
            let next = next.clamp(at + 1, end);
            match out.last_mut() {
                Some(e) if e.hole == hole => e.len += next - at,
                _ => out.push(Extent {
                    len: next - at,
                    hole,
                }),
            }
            at = next;
        }
        Ok(out)
    }

    /// Changes the size (`zfs set volsize`): rounded up to the block
    /// size; a shrink frees everything past the new end. Durable on
    /// return.
    pub fn resize(&self, new_size: u64) -> Result<u64> {
        self.writable()?;
        let new_size = round_size(new_size, self.block_size)?;
        let _one = self.resizing.lock();
        let old = self.size();
        if new_size == old {
            return Ok(new_size);
        }
        let _all = self.lock_range(0, u64::MAX / 2);
        let mut t = 0;
        self.tx(TX_METADATA_BYTES, false, |txg| {
            if new_size < old {
                self.os.truncate(ZVOL_OBJ, new_size)?;
            }
            self.os.zap_update(
                ZVOL_ZAP_OBJ,
                ZVOL_SIZE_KEY.as_bytes(),
                &ZapValue::u64(new_size),
            )?;
            t = txg;
            Ok(())
        })?;
        self.size.store(new_size, Ordering::Release);
        self.txg.wait_synced(t)?;
        Ok(new_size)
    }

    /// Applies the records the intent log holds (see the module comment).
    fn replay(&self) -> Result<()> {
        let Some(zil) = self.zil.clone() else {
            return Ok(());
        };
        if !zil.replay_pending() {
            return Ok(());
        }
        let records = zil.take_replay();
        let n = records.len() as u64;
        let size = self.size();
        let mut t = 0;
        self.tx(TX_METADATA_BYTES, false, |txg| {
            for r in &records {
                let bad = |why: &str| {
                    ZvolError::Corrupted(format!(
                        "intent log record {} (type {}, txg {}) does not apply: {why}",
                        r.seq,
                        r.record.type_code(),
                        r.txg
                    ))
                };
                match &r.record {
                    LogRecord::Write { obj, offset, data } if *obj == ZVOL_OBJ => {
                        let end = offset.checked_add(data.len() as u64);
                        if end.is_none_or(|e| e > size) {
                            return Err(bad("write past the end of the volume"));
                        }
                        self.os.write(ZVOL_OBJ, *offset, data)?;
                    }
                    LogRecord::FreeRange { obj, offset, len } if *obj == ZVOL_OBJ => {
                        self.os.free_range(ZVOL_OBJ, *offset, *len)?;
                    }
                    _ => return Err(bad("not a volume record")),
                }
            }
            zil.replay_done(txg, n)?;
            t = txg;
            Ok(())
        })?;
        self.txg.wait_synced(t)?;
        Ok(())
    }
}

#[cfg(test)]
mod send_sync {
    fn assert_send_sync<T: Send + Sync>() {}
    #[test]
    fn zvol_is_send_sync() {
        assert_send_sync::<super::Zvol>();
    }
}
