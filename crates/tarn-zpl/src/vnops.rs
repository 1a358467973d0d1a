//! File data and attributes: read, write, setattr (chmod, chown,
//! truncate, utimens), fallocate, SEEK_DATA/SEEK_HOLE, readlink, access,
//! statfs (the file half of ZFS's `zfs_vnops.c`).
//!
//! These hold the namespace lock for reading and the inode's shard for
//! writing (reading, for `read` and seeks), so they run in parallel with
//! each other on different files.
//!
//! ## Block size (recordsize semantics)
//! A new file has one 512-byte block. While it has only block 0, a write
//! that reaches past that block grows it to the file's size rounded up to
//! 512 B, at most the dataset's *current* recordsize (ZFS's
//! `zfs_grow_blocksize`). Once a second block exists the block size is
//! fixed for the file's life, so a recordsize change reaches only files
//! that are still a single block — in practice files created afterwards.
//! Small files therefore take one block of their own size and large
//! files recordsize blocks.
//!
//! ## Invariant: bytes at or past `size` are zero
//! Truncation zeroes the tail of the block it cuts, and only writes move
//! data past `size` (extending it), so growing `size` by truncate or
//! fallocate exposes zeros without touching data blocks.
//!
//! ## Timestamps
//! write, truncate, fallocate (when it grows the file) and hole punching
//! set mtime and ctime; every attribute change sets ctime; reads set atime
//! according to the `atime` setting (relatime: only when atime is not
//! newer than mtime/ctime or is a day old). Atime updates are best effort:
//! a read never fails because its atime could not be written.

use tarn_dmu::objset::MAX_OBJECT_BYTES;
use tarn_dmu::{ReadPiece, Rest};
use tarn_format::zpl::{ZnodePhys, NSEC_PER_SEC, S_IFLNK, S_IFMT, S_IFREG};

use crate::dir::{round_block, SYMLINK_MAX};
use crate::error::{Result, ZplError};
use crate::fs::{AtimePolicy, Zpl, TX_METADATA_BYTES};
use crate::perm::{check_access, is_owner, kill_suid, S_ISGID};
use crate::types::{Attr, Cred, SetAttr, StatFs, TimeSet, Timespec, W_OK};

/// Largest file (bytes): the object layer's limit.
pub const FILE_SIZE_MAX: u64 = MAX_OBJECT_BYTES;
/// Relatime refreshes an atime older than this even if newer than mtime.
const RELATIME_INTERVAL_SECS: i64 = 24 * 60 * 60;
/// `statfs` block size.
const STATFS_BSIZE: u32 = 4096;
/// `fallocate` mode bits understood.
pub const FALLOC_FL_KEEP_SIZE: u32 = 0x01;
pub const FALLOC_FL_PUNCH_HOLE: u32 = 0x02;

fn regular(z: &ZnodePhys) -> Result<()> {
    match z.mode & S_IFMT {
        S_IFREG => Ok(()),
        _ if z.is_dir() => Err(ZplError::IsDir),
        _ => Err(ZplError::Invalid("not a regular file")),
    }
}

fn end_of(off: u64, len: u64) -> Result<u64> {
    match off.checked_add(len) {
        Some(end) if end <= FILE_SIZE_MAX => Ok(end),
        _ => Err(ZplError::FileTooBig),
    }
}

impl Zpl {
    /// `pread`: up to `buf.len()` bytes at `off`; 0 at or past the end.
    pub fn read(&self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize> {
        let pieces = self.read_pieces(ino, off, buf.len())?;
        Ok(ReadPiece::copy_all(&pieces, buf))
    }

    /// `read` without the copy: up to `len` bytes at `off` (fewer at the
    /// end of the file) as pieces of blocks and runs of zeros
    /// (`Objset::read_pieces`).
    pub fn read_pieces(&self, ino: u64, off: u64, len: usize) -> Result<Vec<ReadPiece>> {
        self.read_pieces_with_rest(ino, off, len, None)
    }

    /// [`Zpl::read_pieces`], and when `rest` is given, the bytes of the
    /// records this read fetched from disk that it does not return, up to
    /// the end of the file ([`tarn_dmu::Objset::read_pieces_with_rest`]).
    pub fn read_pieces_with_rest(
        &self,
        ino: u64,
        off: u64,
        len: usize,
        mut rest: Option<&mut Vec<Rest>>,
    ) -> Result<Vec<ReadPiece>> {
        let (pieces, atime) = {
            let _ns = self.ns_read();
            let _l = self.shard(ino).read();
            let z = self.inode(ino)?;
            regular(&z)?;
            let atime = self.atime_wanted(&z);
            let pieces = if off >= z.size {
                Vec::new()
            } else {
                let n = (z.size - off).min(len as u64) as usize;
                let pieces = self
                    .os
                    .read_pieces_with_rest(ino, off, n, rest.as_deref_mut())?;
                if let Some(rest) = rest {
                    // Bytes of a last record past the end are not the file's.
                    rest.retain_mut(|r| {
                        let left = z.size.saturating_sub(r.offset);
                        let keep = (r.range.len() as u64).min(left) as usize;
                        r.range.end = r.range.start + keep;
                        keep > 0
                    });
                }
                pieces
            };
            (pieces, atime)
        };
        if atime {
            self.touch_atime(ino);
        }
        Ok(pieces)
    }

    /// Would an access now change `z`'s atime (the `atime` setting,
    /// relatime's rule)? A read asks while it holds the inode shared, and
    /// calls `touch_atime` only when the answer is yes.
    pub(crate) fn atime_wanted(&self, z: &ZnodePhys) -> bool {
        let policy = self.atime_policy();
        if policy == AtimePolicy::Never {
            return false;
        }
        let now = self.now();
        let stale = z.atime <= z.mtime
            || z.atime <= z.ctime
            || now.sec.saturating_sub(z.atime.sec) >= RELATIME_INTERVAL_SECS;
        !(policy == AtimePolicy::Relatime && !stale || z.atime == now)
    }

    /// Sets atime if the `atime` setting asks for it (best effort).
    pub(crate) fn touch_atime(&self, ino: u64) {
        let _ns = self.ns_read();
        // Most reads change nothing (relatime, or atime already now):
        // that is decided sharing the inode's lock with other readers,
        // which take it alone only for an update.
        {
            let _l = self.shard(ino).read();
            match self.inode(ino) {
                Ok(z) if self.atime_wanted(&z) => {}
                _ => return,
            }
        }
        let _l = self.shard(ino).write();
        let Ok(mut z) = self.inode(ino) else { return };
        if !self.atime_wanted(&z) {
            return;
        }
        let now = self.now();
        z.atime = now;
        // Best effort: a suspended pool or a full txg must not fail a read.
        // Not logged: atime need not survive a crash (as in ZFS).
        let _ = self.tx_quiet(TX_METADATA_BYTES, |_| self.put_znode(ino, &z));
    }

    /// `pwrite`: writes all of `data` at `off` (extending the file) and
    /// returns its length. A write by a non-root caller clears set-uid
    /// (and set-gid with group execute), as Linux does without CAP_FSETID.
    pub fn write(&self, ino: u64, off: u64, data: &[u8], cred: &Cred) -> Result<usize> {
        self.writable()?;
        let end = end_of(off, data.len() as u64)?;
        let _ns = self.ns_read();
        let _l = self.shard(ino).write();
        let mut z = self.inode(ino)?;
        regular(&z)?;
        if data.is_empty() {
            return Ok(0);
        }
        self.space.check_write(data.len() as u64)?;
        let now = self.now();
        self.tx_logged(data.len() as u64, |txg| {
            self.grow_block(ino, &z, end)?;
            // The txg holds whole records: a small write into one not yet
            // dirty holds all of it until the txg syncs.
            let held = self.os.write_charged(ino, off, data)?;
            self.txg.write_charged(txg, data.len() as u64, held);
            z.size = z.size.max(end);
            z.mtime = now;
            z.ctime = now;
            kill_suid(&mut z, cred);
            self.kill_caps(&mut z)?;
            self.put_znode(ino, &z)?;
            self.log_write(txg, ino, off, data.len() as u64, &z);
            Ok(())
        })?;
        Ok(data.len())
    }

    /// Grows a single-block file's block toward recordsize (module comment).
    pub(crate) fn grow_block(&self, ino: u64, z: &ZnodePhys, end: u64) -> Result<()> {
        let info = self.os.object_info(ino)?;
        let rs = self.settings().recordsize;
        if info.maxblkid > 0 || info.block_size >= rs {
            return Ok(());
        }
        let want = round_block(end.max(z.size)).min(rs);
        if want > info.block_size {
            self.os.set_block_size(ino, want)?;
        }
        Ok(())
    }

    /// `setattr`: chmod, chown, truncate and utimens in one call, with
    /// POSIX permission rules; ctime is set whenever anything changes.
    pub fn setattr(&self, ino: u64, sa: &SetAttr, cred: &Cred) -> Result<Attr> {
        let _ns = self.ns_read();
        let _l = self.shard(ino).write();
        let mut z = self.inode(ino)?;
        if *sa
            == (SetAttr {
                via_handle: sa.via_handle,
                ..SetAttr::default()
            })
        {
            return self.attr_of(ino, &z);
        }
        self.writable()?;
        check_setattr(&z, sa, cred)?;
        if sa.size.is_some() {
            regular(&z)?;
            if !sa.via_handle {
                check_access(&z, cred, W_OK)?;
            }
        }
        let now = self.now();
        self.tx_logged(TX_METADATA_BYTES, |txg| {
            if let Some(size) = sa.size {
                if size < z.size {
                    self.os.truncate(ino, size)?;
                }
                z.size = size;
                z.mtime = now;
                if sa.kill_suidgid {
                    kill_suid(&mut z, &Cred::user(u32::MAX, u32::MAX));
                } else {
                    kill_suid(&mut z, cred);
                }
                self.kill_caps(&mut z)?;
            }
            if sa.uid.is_some_and(|u| u != z.uid) || sa.gid.is_some_and(|g| g != z.gid) {
                self.kill_caps(&mut z)?;
            }
            apply_owner_mode(&mut z, sa, cred);
            let pick = |t: TimeSet, old: Timespec| match t {
                TimeSet::Omit => old,
                TimeSet::Now => now,
                TimeSet::Time(t) => t,
            };
            z.atime = pick(sa.atime, z.atime);
            z.mtime = pick(sa.mtime, z.mtime);
            z.ctime = now;
            self.put_znode(ino, &z)?;
            self.log_setattr(txg, ino, &z);
            Ok(())
        })?;
        self.attr_of(ino, &z)
    }

    /// `fallocate`: mode 0 extends the size (nothing is reserved on a
    /// copy-on-write pool), KEEP_SIZE does nothing, PUNCH_HOLE|KEEP_SIZE
    /// frees the range.
    pub fn fallocate(&self, ino: u64, mode: u32, off: u64, len: u64, cred: &Cred) -> Result<()> {
        if len == 0 {
            return Err(ZplError::Invalid("fallocate length 0"));
        }
        let end = end_of(off, len)?;
        let punch = match mode {
            0 | FALLOC_FL_KEEP_SIZE => false,
            m if m == FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE => true,
            _ => return Err(ZplError::NotSupported),
        };
        self.writable()?;
        let _ns = self.ns_read();
        let _l = self.shard(ino).write();
        let mut z = self.inode(ino)?;
        regular(&z)?;
        let grows = mode == 0 && end > z.size;
        if !punch && !grows {
            return Ok(());
        }
        if grows {
            self.space.check_write(end - z.size)?;
        }
        let now = self.now();
        self.tx_logged(TX_METADATA_BYTES, |txg| {
            let mut hole = None;
            if punch {
                if off < z.size {
                    let len = end.min(z.size) - off;
                    self.os.free_range(ino, off, len)?;
                    hole = Some((off, len));
                }
            } else {
                z.size = end;
            }
            z.mtime = now;
            z.ctime = now;
            kill_suid(&mut z, cred);
            self.put_znode(ino, &z)?;
            self.log_fallocate(txg, ino, hole, &z);
            Ok(())
        })
    }

    /// `lseek(SEEK_DATA)`: ENXIO at or past the end or in a final hole.
    pub fn lseek_data(&self, ino: u64, off: u64) -> Result<u64> {
        let _ns = self.ns_read();
        let _l = self.shard(ino).read();
        let z = self.inode(ino)?;
        regular(&z)?;
        if off >= z.size {
            return Err(ZplError::NoSuchOffset);
        }
        match self.os.next_data(ino, off)? {
            Some(d) if d < z.size => Ok(d),
            _ => Err(ZplError::NoSuchOffset),
        }
    }

    /// `lseek(SEEK_HOLE)`: the end of the file counts as a hole.
    pub fn lseek_hole(&self, ino: u64, off: u64) -> Result<u64> {
        let _ns = self.ns_read();
        let _l = self.shard(ino).read();
        let z = self.inode(ino)?;
        regular(&z)?;
        if off >= z.size {
            return Err(ZplError::NoSuchOffset);
        }
        Ok(self.os.next_hole(ino, off)?.min(z.size))
    }

    /// `readlink`: the target of a symlink.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        let target = {
            let _ns = self.ns_read();
            let z = self.inode(ino)?;
            if z.mode & S_IFMT != S_IFLNK {
                return Err(ZplError::Invalid("not a symlink"));
            }
            if z.size as usize > SYMLINK_MAX || z.size == 0 {
                return Err(ZplError::Corrupted(format!(
                    "symlink {ino} size {}",
                    z.size
                )));
            }
            let mut t = vec![0u8; z.size as usize];
            self.os.read(ino, 0, &mut t)?;
            t
        };
        self.touch_atime(ino);
        Ok(target)
    }

    /// `access`: may `cred` do `mask` (R_OK | W_OK | X_OK, 0 = exists)?
    pub fn access(&self, ino: u64, mask: u32, cred: &Cred) -> Result<()> {
        let _ns = self.ns_read();
        let z = self.inode(ino)?;
        let ro_type = z.is_dir() || matches!(z.mode & S_IFMT, S_IFREG | S_IFLNK);
        if mask & W_OK != 0 && ro_type && self.settings().readonly {
            return Err(ZplError::ReadOnly);
        }
        check_access(&z, cred, mask)
    }

    /// `statfs` from the space hook (the dataset's USED and AVAIL).
    pub fn statfs(&self) -> StatFs {
        let s = self.space.space();
        let bs = u64::from(STATFS_BSIZE);
        let avail = s.avail_bytes / bs;
        // As ZFS: every 512 bytes free could become one more dnode.
        let ffree = s.avail_bytes >> 9;
        StatFs {
            bsize: STATFS_BSIZE,
            frsize: STATFS_BSIZE,
            blocks: (s.used_bytes + s.avail_bytes) / bs,
            bfree: avail,
            bavail: avail,
            files: ffree,
            ffree,
            namelen: crate::dir::NAME_MAX as u32,
        }
    }
}

/// The permission half of `setattr` (Linux's `setattr_prepare`).
fn check_setattr(z: &ZnodePhys, sa: &SetAttr, cred: &Cred) -> Result<()> {
    let owner = is_owner(z, cred);
    if sa.mode.is_some() && !owner {
        return Err(ZplError::Perm);
    }
    if let Some(uid) = sa.uid {
        if !cred.is_root() && (uid != z.uid || cred.uid != z.uid) {
            return Err(ZplError::Perm);
        }
    }
    if let Some(gid) = sa.gid {
        let allowed = cred.uid == z.uid && (gid == z.gid || cred.in_group(gid));
        if !cred.is_root() && !allowed {
            return Err(ZplError::Perm);
        }
    }
    if let Some(size) = sa.size {
        if size > FILE_SIZE_MAX {
            return Err(ZplError::FileTooBig);
        }
    }
    for t in [sa.atime, sa.mtime] {
        match t {
            TimeSet::Time(t) if t.nsec >= NSEC_PER_SEC => {
                return Err(ZplError::Invalid("nanoseconds"));
            }
            TimeSet::Time(_) if !owner => return Err(ZplError::Perm),
            TimeSet::Now if !owner => check_access(z, cred, W_OK)?,
            _ => {}
        }
    }
    Ok(())
}

/// chown then chmod; a chown of a non-directory drops set-uid and
/// (with group execute) set-gid, even by root, as Linux does; a chmod by
/// someone outside the file's group drops set-gid.
fn apply_owner_mode(z: &mut ZnodePhys, sa: &SetAttr, cred: &Cred) {
    let chown = sa.uid.is_some_and(|u| u != z.uid) || sa.gid.is_some_and(|g| g != z.gid);
    z.uid = sa.uid.unwrap_or(z.uid);
    z.gid = sa.gid.unwrap_or(z.gid);
    if chown && !z.is_dir() {
        z.mode &= !crate::perm::S_ISUID;
        if z.mode & crate::perm::S_IXGRP != 0 {
            z.mode &= !S_ISGID;
        }
    }
    if let Some(m) = sa.mode {
        z.mode = (z.mode & S_IFMT) | (m & 0o7777);
        if !cred.is_root() && !cred.in_group(z.gid) {
            z.mode &= !S_ISGID;
        }
    }
}
