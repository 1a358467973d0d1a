//! Records in memory, and how a write's bytes are logged.
//!
//! A write is logged by reference (object, offset, length): its bytes are
//! read from the object set when the record is committed, as ZFS's
//! `WR_NEED_COPY`, so the log never keeps a second copy of dirty data in
//! memory. If the range was overwritten since, the newer bytes are logged,
//! which replays to the same end state because every later record is
//! replayed after it.
//!
//! A large write (at least [`crate::LOG_IMMEDIATE_WRITE_BYTES`], or any with
//! `logbias=throughput`) is logged by pointer instead, as ZFS's
//! `WR_INDIRECT`, unless a log device is there to absorb it: each whole
//! block it covers is written to its final place at commit
//! (`Objset::sync_block`) and the record carries the block pointer; the
//! txg's sync then installs that block rather than writing the data a
//! second time. Those blocks are flushed before the log blocks naming
//! them are written, so a record that survives a crash always finds its
//! block. Import claims the blocks the surviving records name; replay
//! copies their bytes into the file and frees them.

use tarn_format::zil::LogRecord;

use crate::{Result, Zilog, LOG_WRITE_CHUNK_BYTES};

/// A record waiting in memory for a commit or its txg.
pub(crate) enum Pending {
    Record(LogRecord),
    /// A write whose bytes are read from the object set at commit.
    WriteRef {
        obj: u64,
        offset: u64,
        len: u64,
        /// Whole blocks are written in place and logged by pointer.
        indirect: bool,
    },
}

pub(crate) struct Itx {
    pub seq: u64,
    pub txg: u64,
    pub rec: Pending,
}

impl Itx {
    /// The object an asynchronous record belongs to: writes, truncates
    /// and attribute changes, which an `fsync` of another file does not
    /// need (ZFS's async itx lists). Namespace and xattr records are
    /// synchronous: every commit takes them, in order.
    pub fn async_obj(&self) -> Option<u64> {
        match &self.rec {
            Pending::WriteRef { obj, .. } => Some(*obj),
            Pending::Record(
                LogRecord::Write { obj, .. }
                | LogRecord::Setattr { obj, .. }
                | LogRecord::FreeRange { obj, .. },
            ) => Some(*obj),
            Pending::Record(_) => None,
        }
    }

    /// Bytes of write data the record stands for.
    pub fn write_len(&self) -> u64 {
        match self.rec {
            Pending::WriteRef { len, .. } => len,
            Pending::Record(_) => 0,
        }
    }
}

impl Zilog {
    /// The records a pending entry stands for: a write read back now, in
    /// pieces that fit a block, or for an indirect write its whole blocks
    /// written in place (their vdevs added to `vdevs`, to flush) and the
    /// rest by copy. Nothing for a write whose object is gone.
    pub(crate) fn resolve(
        &self,
        txg: u64,
        rec: &Pending,
        vdevs: &mut Vec<u32>,
    ) -> Result<Vec<LogRecord>> {
        let (obj, offset, len, indirect) = match *rec {
            Pending::Record(ref r) => return Ok(vec![r.clone()]),
            Pending::WriteRef {
                obj,
                offset,
                len,
                indirect,
            } => (obj, offset, len, indirect),
        };
        let Ok(info) = self.os.object_info(obj) else {
            return Ok(Vec::new()); // freed since: a later remove covers it
        };
        let bs = u64::from(info.block_size).max(1);
        let end = offset + len;
        let mut out = Vec::new();
        let mut at = offset;
        while at < end {
            let blkid = at / bs;
            let (lo, hi) = (blkid * bs, (blkid + 1) * bs);
            if indirect && lo == at && hi <= end {
                if let Some(bp) = self.os.sync_block(obj, blkid, txg)? {
                    for d in bp.dvas.iter().filter(|d| !d.is_empty()) {
                        if !vdevs.contains(&d.vdev) {
                            vdevs.push(d.vdev);
                        }
                    }
                    out.push(LogRecord::WriteIndirect {
                        obj,
                        offset: lo,
                        bp,
                    });
                    self.stats.lock().indirect_blocks += 1;
                    at = hi;
                    continue;
                }
            }
            let piece_end = if indirect { hi.min(end) } else { end };
            if !self.copy_write(obj, at, piece_end - at, &mut out) {
                return Ok(out);
            }
            at = piece_end;
        }
        Ok(out)
    }

    /// Appends `len` bytes at `offset` of `obj` as write records of at
    /// most `LOG_WRITE_CHUNK_BYTES`; `false` if the object is gone.
    fn copy_write(&self, obj: u64, offset: u64, len: u64, out: &mut Vec<LogRecord>) -> bool {
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(LOG_WRITE_CHUNK_BYTES as u64) as usize;
            let mut data = vec![0u8; n];
            if self.os.read(obj, offset + at, &mut data).is_err() {
                return false;
            }
            out.push(LogRecord::Write {
                obj,
                offset: offset + at,
                data,
            });
            at += n as u64;
        }
        true
    }
}
