//! The POSIX layer's side of the intent log (ZFS's `zfs_log.c` and
//! `zfs_replay.c`): which changes are logged, and how records are applied
//! again after a crash.
//!
//! Logged today: writes (by reference, plus the size and times they left)
//! and setattr (size, mode, owner, times). Every other change —
//! namespace operations, xattrs, fallocate — runs through `Zpl::tx`,
//! which notes its txg, and `fsync` waits for that txg before committing
//! the log. So a record is always written after every change it depends
//! on is durable, and the records replayed after a crash always apply to
//! objects that exist. Logging namespace operations too (records for
//! create, remove, rename, link, symlink and xattrs exist in the format)
//! is the next step; it makes `fsync` after a create as fast as after a
//! write.
//!
//! Replay runs at a read-write mount, before the delete queue: the
//! records of txgs after the last committed one, in order, inside one
//! txg that also starts the log's new chain; the mount then waits for
//! that txg, so a crash during replay replays again from the start.

use tarn_format::zil::{
    LogRecord, LogSetattr, LogTime, LOG_ATTR_ATIME, LOG_ATTR_CTIME, LOG_ATTR_GID, LOG_ATTR_MODE,
    LOG_ATTR_MTIME, LOG_ATTR_SIZE, LOG_ATTR_UID,
};
use tarn_format::zpl::{Timespec, ZnodePhys, S_IFMT};

use crate::error::{Result, ZplError};
use crate::fs::Zpl;
use crate::fs::TX_METADATA_BYTES;

fn lt(t: Timespec) -> LogTime {
    LogTime {
        sec: t.sec,
        nsec: t.nsec,
    }
}

fn ts(t: LogTime) -> Timespec {
    Timespec {
        sec: t.sec,
        nsec: t.nsec,
    }
}

/// Every attribute of `z` the log carries, as absolute values.
fn full_setattr(z: &ZnodePhys) -> LogSetattr {
    LogSetattr {
        mask: LOG_ATTR_MODE
            | LOG_ATTR_UID
            | LOG_ATTR_GID
            | LOG_ATTR_SIZE
            | LOG_ATTR_ATIME
            | LOG_ATTR_MTIME
            | LOG_ATTR_CTIME,
        mode: z.mode,
        uid: z.uid,
        gid: z.gid,
        size: z.size,
        atime: lt(z.atime),
        mtime: lt(z.mtime),
        ctime: lt(z.ctime),
    }
}

impl Zpl {
    /// Logs a write of `len` bytes at `off` (in `txg`) and the attributes
    /// it left in `z`.
    pub(crate) fn log_write(&self, txg: u64, ino: u64, off: u64, len: u64, z: &ZnodePhys) {
        if let Some(zil) = &self.zil {
            zil.log_write(txg, ino, off, len);
            zil.log(
                txg,
                LogRecord::Setattr {
                    obj: ino,
                    attr: full_setattr(z),
                },
            );
        }
    }

    /// Logs the attributes a setattr left in `z` (in `txg`).
    pub(crate) fn log_setattr(&self, txg: u64, ino: u64, z: &ZnodePhys) {
        if let Some(zil) = &self.zil {
            zil.log(
                txg,
                LogRecord::Setattr {
                    obj: ino,
                    attr: full_setattr(z),
                },
            );
        }
    }

    /// Replays what the intent log holds (see the module comment).
    pub(crate) fn replay_log(&self) -> Result<()> {
        let Some(zil) = self.zil.clone() else {
            return Ok(());
        };
        if !zil.replay_pending() {
            return Ok(());
        }
        let records = zil.take_replay();
        let n = records.len() as u64;
        let txg = self.tx_logged(TX_METADATA_BYTES, |txg| {
            for r in &records {
                self.replay_one(&r.record)?;
            }
            zil.replay_done(txg, n)
                .map_err(|e| ZplError::Io(e.to_string()))?;
            Ok(txg)
        })?;
        self.txg.wait_synced(txg)?;
        Ok(())
    }

    fn replay_one(&self, rec: &LogRecord) -> Result<()> {
        match rec {
            LogRecord::Write { obj, offset, data } => {
                let mut z = self.znode(*obj)?;
                let end = offset + data.len() as u64;
                self.grow_block(*obj, &z, end)?;
                self.os.write(*obj, *offset, data)?;
                z.size = z.size.max(end);
                self.put_znode(*obj, &z)
            }
            LogRecord::Setattr { obj, attr } => {
                let mut z = self.znode(*obj)?;
                let m = attr.mask;
                if m & LOG_ATTR_SIZE != 0 {
                    if attr.size < z.size {
                        self.os.truncate(*obj, attr.size)?;
                    }
                    z.size = attr.size;
                }
                if m & LOG_ATTR_MODE != 0 {
                    z.mode = (z.mode & S_IFMT) | (attr.mode & 0o7777);
                }
                if m & LOG_ATTR_UID != 0 {
                    z.uid = attr.uid;
                }
                if m & LOG_ATTR_GID != 0 {
                    z.gid = attr.gid;
                }
                if m & LOG_ATTR_ATIME != 0 {
                    z.atime = ts(attr.atime);
                }
                if m & LOG_ATTR_MTIME != 0 {
                    z.mtime = ts(attr.mtime);
                }
                if m & LOG_ATTR_CTIME != 0 {
                    z.ctime = ts(attr.ctime);
                }
                self.put_znode(*obj, &z)
            }
            LogRecord::FreeRange { obj, offset, len } => {
                self.os.free_range(*obj, *offset, *len)?;
                Ok(())
            }
            other => Err(ZplError::Corrupted(format!(
                "intent log record type {} is not replayed by this version",
                other.type_code()
            ))),
        }
    }
}
