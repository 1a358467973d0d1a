//! The namespace: lookup, create, link, unlink, rmdir, rename, readdir
//! (ZFS's `zfs_dir.c` and the directory half of `zfs_vnops.c`).
//!
//! A directory is a ZAP from name to `dtype << 60 | object` (see
//! `tarn_format::zpl`); the fat ZAP's extendible hashing keeps lookups and
//! inserts at a leaf read or two however large it grows. `.` and `..` are
//! not stored: `.` is the directory, `..` its znode's `parent`.
//!
//! Link counts follow Unix: a file counts its names; a directory counts 2
//! (its entry and its `.`) plus one per subdirectory (their `..`). A
//! directory's `size` is its entry count + 2, as in ZFS.
//!
//! Every operation here changes entries or link counts, so it holds the
//! namespace lock in write mode for its whole duration (checks and
//! transaction), and makes every check before the transaction starts.
//! Each leaves its intent log record in its own transaction (`log`); the
//! part that changes the tree (`init_inode`, `add_link`, `remove_entry`,
//! `apply_rename`) is shared with the replay of that record.
//!
//! ## readdir cookies
//! `0` starts at `.`, `1` resumes at `..`, and any `c >= 2` resumes at
//! ZAP cookie `hash48 << 16 | cd` packed as `2 + (hash48 << 14 | cd)`
//! (a collision differentiator above 2^14 would need 16384 names with one
//! 48-bit hash; such a resume point moves to the next hash). The packed
//! value stays below 2^63, so it survives FUSE's signed `off_t`. Because a
//! ZAP cookie belongs to its entry for life, entries present for a whole
//! listing are returned exactly once whatever changes meanwhile.

use tarn_dmu::{DmuError, ZapValue};
use tarn_format::zap::{ZAP_CD_BITS, ZAP_HASH_BITS};
use tarn_format::zpl::{dirent_decode, dirent_encode, ZnodePhys, S_IFDIR, S_IFMT};
use tarn_format::{ObjType, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE};

use crate::error::{Result, ZplError};
use crate::fs::{Zpl, INODE_SPACE_BYTES, TX_METADATA_BYTES};
use crate::perm::{check_access, check_sticky, S_ISGID};
use crate::types::{Attr, Cred, DirEntry, FileType, RenameFlags, Timespec, W_OK, X_OK};

/// Longest file name (bytes).
pub const NAME_MAX: usize = 255;
/// Longest symlink target (bytes, PATH_MAX without the NUL).
pub const SYMLINK_MAX: usize = 4095;
/// Parent walks longer than this mean a cycle on disk.
const TREE_DEPTH_MAX: usize = 1 << 20;
/// Directory entries read from the ZAP at once by a listing: about what
/// one FUSE READDIR reply (a page) holds, so little is read for nothing.
const READDIR_BATCH: usize = 128;
const COOKIE_CD_BITS: u32 = 14;

/// A name that may be stored in a directory.
pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(ZplError::NameTooLong);
    }
    if name.is_empty() || name == b"." || name == b".." {
        return Err(ZplError::Invalid("name"));
    }
    if name.iter().any(|&c| c == b'/' || c == 0) {
        return Err(ZplError::Invalid("name contains '/' or NUL"));
    }
    Ok(())
}

fn encode_cookie(zap_cookie: u64) -> u64 {
    let hash = zap_cookie >> ZAP_CD_BITS;
    let cd = zap_cookie & ((1 << ZAP_CD_BITS) - 1);
    let packed = if cd > 1 << COOKIE_CD_BITS {
        (hash + 1) << COOKIE_CD_BITS
    } else {
        (hash << COOKIE_CD_BITS) + cd
    };
    2 + packed
}

/// The ZAP cookie to resume at, `None` past the end.
fn decode_cookie(cookie: u64) -> Option<u64> {
    let v = cookie.saturating_sub(2);
    let hash = v >> COOKIE_CD_BITS;
    let cd = v & ((1 << COOKIE_CD_BITS) - 1);
    (hash < 1 << ZAP_HASH_BITS).then_some(hash << ZAP_CD_BITS | cd)
}

pub(crate) fn round_block(bytes: u64) -> u32 {
    let rounded = bytes
        .max(1)
        .div_ceil(MIN_BLOCK_SIZE)
        .saturating_mul(MIN_BLOCK_SIZE)
        .min(MAX_BLOCK_SIZE);
    // At most 16 MiB: fits. (Cast unclamped, a file of 4 GiB or more
    // wrapped to a tiny block size, often 512 bytes.)
    rounded as u32
}

/// The two names of a rename.
pub(crate) struct RenameNames<'a> {
    pub olddir: u64,
    pub oldname: &'a [u8],
    pub newdir: u64,
    pub newname: &'a [u8],
}

/// The znode of an inode created at `now` with `mode` (type included),
/// `(uid, gid)`, `rdev` and generation `gen` in `dir`; a symlink's size is
/// its target's length `tlen`. One place for `create` and its replay.
pub(crate) fn fresh_znode(
    dir: u64,
    mode: u32,
    (uid, gid): (u32, u32),
    rdev: u64,
    gen: u64,
    tlen: u64,
    now: Timespec,
) -> ZnodePhys {
    let is_dir = mode & S_IFMT == S_IFDIR;
    ZnodePhys {
        mode,
        uid,
        gid,
        size: if is_dir { 2 } else { tlen },
        links: if is_dir { 2 } else { 1 },
        parent: dir,
        gen,
        rdev,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        ..Default::default()
    }
}

/// What a new inode is.
struct NewNode<'a> {
    kind: FileType,
    perm: u32,
    rdev: u64,
    target: Option<&'a [u8]>,
}

impl Zpl {
    /// The znode of a directory (ENOTDIR otherwise).
    pub(crate) fn dir_znode(&self, dir: u64) -> Result<ZnodePhys> {
        let d = self.inode(dir)?;
        if !d.is_dir() {
            return Err(ZplError::NotDir);
        }
        Ok(d)
    }

    /// `(object, d_type)` that `name` names in `dir`, if any.
    pub(crate) fn dir_lookup(&self, dir: u64, name: &[u8]) -> Result<Option<u64>> {
        match self.os.zap_lookup(dir, name) {
            Ok(v) => {
                let v = v
                    .as_single_u64()
                    .ok_or_else(|| ZplError::Corrupted("directory entry value".into()))?;
                Ok(Some(dirent_decode(v)?.0))
            }
            Err(DmuError::NotFound) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    pub(crate) fn dir_add(&self, dir: u64, name: &[u8], obj: u64, mode: u32) -> Result<()> {
        let v = ZapValue::u64(dirent_encode(obj, mode));
        Ok(self.os.zap_add(dir, name, &v)?)
    }

    /// Applies entry-count and link-count changes to a directory and
    /// stamps its mtime and ctime (inside a tx).
    pub(crate) fn touch_dir(
        &self,
        dir: u64,
        entries: i64,
        links: i64,
        now: Timespec,
    ) -> Result<()> {
        let mut d = self.znode(dir)?;
        d.size = d.size.saturating_add_signed(entries);
        d.links = d.links.saturating_add_signed(links);
        d.mtime = now;
        d.ctime = now;
        self.put_znode(dir, &d)
    }

    /// `lookup`: needs search permission on `dir`. `.` and `..` resolve.
    pub fn lookup(&self, dir: u64, name: &[u8], cred: &Cred) -> Result<Attr> {
        let _ns = self.ns_read();
        let d = self.dir_znode(dir)?;
        check_access(&d, cred, X_OK)?;
        let ino = match name {
            b"." => dir,
            b".." => d.parent,
            _ => {
                check_name(name)?;
                self.dir_lookup(dir, name)?.ok_or(ZplError::NotFound)?
            }
        };
        let z = self.inode(ino)?;
        self.attr_of(ino, &z)
    }

    /// `open(O_CREAT)`: a new regular file, or (unless `excl`) the
    /// existing one. `mode` is the permission bits after the umask.
    pub fn create(
        &self,
        dir: u64,
        name: &[u8],
        mode: u32,
        cred: &Cred,
        excl: bool,
    ) -> Result<Attr> {
        let node = NewNode {
            kind: FileType::Regular,
            perm: mode,
            rdev: 0,
            target: None,
        };
        self.make_node(dir, name, node, cred, !excl)
    }

    pub fn mkdir(&self, dir: u64, name: &[u8], mode: u32, cred: &Cred) -> Result<Attr> {
        let node = NewNode {
            kind: FileType::Directory,
            perm: mode,
            rdev: 0,
            target: None,
        };
        self.make_node(dir, name, node, cred, false)
    }

    /// `mknod`: `mode` carries the type (S_IFIFO, S_IFSOCK, S_IFCHR,
    /// S_IFBLK, S_IFREG or none for regular) and the permission bits.
    /// Device nodes need root.
    pub fn mknod(&self, dir: u64, name: &[u8], mode: u32, rdev: u64, cred: &Cred) -> Result<Attr> {
        let ftype = mode & S_IFMT;
        let kind = if ftype == 0 {
            FileType::Regular
        } else {
            FileType::from_mode(mode)
        };
        if ftype != 0 && kind.mode_bits() != ftype || kind == FileType::Directory {
            return Err(ZplError::Invalid("mknod type"));
        }
        if kind == FileType::Symlink {
            return Err(ZplError::Invalid("mknod type"));
        }
        let device = matches!(kind, FileType::CharDevice | FileType::BlockDevice);
        if device && !cred.is_root() {
            return Err(ZplError::Perm);
        }
        let node = NewNode {
            kind,
            perm: mode,
            rdev: if device { rdev } else { 0 },
            target: None,
        };
        self.make_node(dir, name, node, cred, false)
    }

    pub fn symlink(&self, dir: u64, name: &[u8], target: &[u8], cred: &Cred) -> Result<Attr> {
        if target.is_empty() {
            return Err(ZplError::NotFound);
        }
        if target.len() > SYMLINK_MAX {
            return Err(ZplError::NameTooLong);
        }
        let node = NewNode {
            kind: FileType::Symlink,
            perm: 0o777,
            rdev: 0,
            target: Some(target),
        };
        self.make_node(dir, name, node, cred, false)
    }

    /// A name a new entry may take: [`check_name`], and UTF-8 where the
    /// filesystem says `utf8only`.
    fn check_new_name(&self, name: &[u8]) -> Result<()> {
        check_name(name)?;
        if self.settings().utf8only && std::str::from_utf8(name).is_err() {
            return Err(ZplError::NotUtf8);
        }
        Ok(())
    }

    fn make_node(
        &self,
        dir: u64,
        name: &[u8],
        node: NewNode<'_>,
        cred: &Cred,
        open_existing: bool,
    ) -> Result<Attr> {
        self.check_new_name(name)?;
        let _ns = self.ns.write();
        let d = self.dir_znode(dir)?;
        check_access(&d, cred, X_OK)?;
        if open_existing {
            if let Some(ino) = self.dir_lookup(dir, name)? {
                let z = self.inode(ino)?;
                if z.is_dir() {
                    return Err(ZplError::IsDir);
                }
                return self.attr_of(ino, &z);
            }
        }
        let allowed = self
            .writable()
            .and_then(|_| check_access(&d, cred, W_OK | X_OK));
        if let Err(e) = allowed {
            // An existing name wins over EACCES/EROFS, as in Linux.
            return Err(match self.dir_lookup(dir, name)? {
                Some(_) => ZplError::Exists,
                None => e,
            });
        }
        if d.links == 0 {
            return Err(ZplError::NotFound);
        }
        let is_dir = node.kind == FileType::Directory;
        if is_dir && d.links >= self.settings().link_max {
            return Err(ZplError::TooManyLinks);
        }
        let tlen = node.target.map_or(0, |t| t.len() as u64);
        self.space.check_write(INODE_SPACE_BYTES + tlen)?;
        let now = self.now();
        // The entry is inserted optimistically: the ZAP's own existence
        // check replaces a separate lookup (one leaf walk fewer per
        // create); on EEXIST the fresh object is freed in the same txg.
        let (ino, z) = self.tx_logged(TX_METADATA_BYTES + tlen, |txg| {
            let z = self.new_znode(dir, &d, &node, cred, now)?;
            let ino = self.init_inode(None, &z, node.target)?;
            let v = ZapValue::u64(dirent_encode(ino, z.mode));
            match self.os.zap_add(dir, name, &v) {
                Err(DmuError::Exists) => {
                    self.os.object_free(ino)?;
                    return Err(ZplError::Exists);
                }
                r => r?,
            }
            self.touch_dir(dir, 1, i64::from(is_dir), now)?;
            self.log_create(txg, dir, name, ino, &z, node.target);
            Ok((ino, z))
        })?;
        self.attr_of(ino, &z)
    }

    /// The znode of a new inode in `dir` (whose znode is `d`), created now
    /// (inside a tx): owner, group and set-group-ID as Linux's
    /// `inode_init_owner` gives them.
    fn new_znode(
        &self,
        dir: u64,
        d: &ZnodePhys,
        node: &NewNode<'_>,
        cred: &Cred,
        now: Timespec,
    ) -> Result<ZnodePhys> {
        let is_dir = node.kind == FileType::Directory;
        let mut mode = node.kind.mode_bits() | (node.perm & 0o7777);
        // BSD group semantics under a set-group-ID directory (and the
        // bit propagates to subdirectories), as Linux's inode_init_owner.
        let gid = if d.mode & S_ISGID != 0 {
            if is_dir {
                mode |= S_ISGID;
            }
            d.gid
        } else {
            cred.gid
        };
        if !is_dir && mode & S_ISGID != 0 && !cred.is_root() && !cred.in_group(gid) {
            mode &= !S_ISGID;
        }
        let owner = (cred.uid, gid);
        let tlen = node.target.map_or(0, |t| t.len() as u64);
        let gen = self.next_gen()?;
        Ok(fresh_znode(dir, mode, owner, node.rdev, gen, tlen, now))
    }

    /// Creates the object of a new inode whose znode is `z` — a directory
    /// ZAP, or one 512-byte block (a symlink's sized to its `target`) —
    /// at the lowest free number, or at `claim` (replay), and stores `z`.
    pub(crate) fn init_inode(
        &self,
        claim: Option<u64>,
        z: &ZnodePhys,
        target: Option<&[u8]>,
    ) -> Result<u64> {
        let (typ, bs) = (ObjType::PlainFile, MIN_BLOCK_SIZE as u32);
        let ino = match claim {
            None if z.is_dir() => self.os.zap_create(ObjType::DirectoryContents)?,
            None => self.os.object_create(typ, bs, 0)?,
            Some(n) if z.is_dir() => self
                .os
                .zap_claim(n, ObjType::DirectoryContents)
                .map(|_| n)?,
            Some(n) => self.os.object_claim(n, typ, bs, 0).map(|_| n)?,
        };
        if let Some(t) = target {
            debug_assert_eq!(z.size, t.len() as u64);
            self.os.set_block_size(ino, round_block(t.len() as u64))?;
            self.os.write(ino, 0, t)?;
        }
        self.put_znode(ino, z)?;
        Ok(ino)
    }

    /// `link`: a new name for a non-directory.
    pub fn link(&self, ino: u64, newdir: u64, newname: &[u8], cred: &Cred) -> Result<Attr> {
        self.check_new_name(newname)?;
        self.writable()?;
        let _ns = self.ns.write();
        let mut z = self.inode(ino)?;
        if z.is_dir() {
            return Err(ZplError::Perm);
        }
        let d = self.dir_znode(newdir)?;
        check_access(&d, cred, W_OK | X_OK)?;
        if self.dir_lookup(newdir, newname)?.is_some() {
            return Err(ZplError::Exists);
        }
        if z.links == 0 || d.links == 0 {
            return Err(ZplError::NotFound);
        }
        if z.links >= self.settings().link_max {
            return Err(ZplError::TooManyLinks);
        }
        self.space.check_write(TX_METADATA_BYTES)?;
        let now = self.now();
        self.tx_logged(TX_METADATA_BYTES, |txg| {
            self.add_link(ino, &mut z, newdir, newname, now)?;
            self.log_link(txg, ino, newdir, newname, now);
            Ok(())
        })?;
        self.attr_of(ino, &z)
    }

    /// Names `ino` (znode `z`) `name` in `dir` too (inside a tx).
    pub(crate) fn add_link(
        &self,
        ino: u64,
        z: &mut ZnodePhys,
        dir: u64,
        name: &[u8],
        now: Timespec,
    ) -> Result<()> {
        self.dir_add(dir, name, ino, z.mode)?;
        z.links += 1;
        z.ctime = now;
        self.put_znode(ino, z)?;
        self.touch_dir(dir, 1, 0, now)
    }

    /// `unlink`: removes a name of a non-directory (EISDIR otherwise).
    pub fn unlink(&self, dir: u64, name: &[u8], cred: &Cred) -> Result<()> {
        check_name(name)?;
        self.writable()?;
        let _ns = self.ns.write();
        let d = self.dir_znode(dir)?;
        check_access(&d, cred, W_OK | X_OK)?;
        let ino = self.dir_lookup(dir, name)?.ok_or(ZplError::NotFound)?;
        let z = self.znode(ino)?;
        if z.is_dir() {
            return Err(ZplError::IsDir);
        }
        check_sticky(&d, &z, cred)?;
        let now = self.now();
        self.tx_logged(TX_METADATA_BYTES, |txg| {
            let last = self.remove_entry(dir, name, ino, z, now)?;
            self.log_remove(txg, dir, name, now, last.then_some(ino));
            Ok(())
        })
    }

    /// Removes `name`, which names `ino` (znode `z`), from `dir` (inside a
    /// tx): a directory loses its `..` in `dir` and every link; `true` if
    /// that was the inode's last link (it is freed or queued).
    pub(crate) fn remove_entry(
        &self,
        dir: u64,
        name: &[u8],
        ino: u64,
        mut z: ZnodePhys,
        now: Timespec,
    ) -> Result<bool> {
        self.os.zap_remove(dir, name)?;
        let is_dir = z.is_dir();
        self.touch_dir(dir, -1, -i64::from(is_dir), now)?;
        z.links = if is_dir { 0 } else { z.links.saturating_sub(1) };
        z.ctime = now;
        if z.links > 0 {
            self.put_znode(ino, &z)?;
            return Ok(false);
        }
        self.unlinked(ino, &z)?;
        Ok(true)
    }

    /// `rmdir`: removes an empty directory.
    pub fn rmdir(&self, dir: u64, name: &[u8], cred: &Cred) -> Result<()> {
        match name {
            b"." => return Err(ZplError::Invalid("rmdir .")),
            b".." => return Err(ZplError::NotEmpty),
            _ => check_name(name)?,
        }
        self.writable()?;
        let _ns = self.ns.write();
        let d = self.dir_znode(dir)?;
        check_access(&d, cred, W_OK | X_OK)?;
        let ino = self.dir_lookup(dir, name)?.ok_or(ZplError::NotFound)?;
        let z = self.znode(ino)?;
        if !z.is_dir() {
            return Err(ZplError::NotDir);
        }
        if ino == self.root {
            return Err(ZplError::Busy);
        }
        check_sticky(&d, &z, cred)?;
        if self.os.zap_count(ino)? > 0 {
            return Err(ZplError::NotEmpty);
        }
        let now = self.now();
        self.tx_logged(TX_METADATA_BYTES, |txg| {
            let last = self.remove_entry(dir, name, ino, z, now)?;
            self.log_remove(txg, dir, name, now, last.then_some(ino));
            Ok(())
        })
    }

    /// EINVAL if `dir` is `anc` or lies beneath it.
    pub(crate) fn check_not_within(&self, anc: u64, dir: u64) -> Result<()> {
        let mut p = dir;
        for _ in 0..TREE_DEPTH_MAX {
            if p == anc {
                return Err(ZplError::Invalid("directory moved into its own subtree"));
            }
            if p == self.root {
                return Ok(());
            }
            p = self.znode(p)?.parent;
        }
        Err(ZplError::Corrupted("directory parents form a cycle".into()))
    }

    /// `renameat2`: atomic; replaces a file or an empty directory unless
    /// `noreplace`; `exchange` swaps two existing names.
    pub fn rename(
        &self,
        olddir: u64,
        oldname: &[u8],
        newdir: u64,
        newname: &[u8],
        flags: RenameFlags,
        cred: &Cred,
    ) -> Result<()> {
        if flags.noreplace && flags.exchange {
            return Err(ZplError::Invalid("NOREPLACE with EXCHANGE"));
        }
        check_name(oldname)?;
        self.check_new_name(newname)?;
        self.writable()?;
        let _ns = self.ns.write();
        let od = self.dir_znode(olddir)?;
        let nd = self.dir_znode(newdir)?;
        check_access(&od, cred, W_OK | X_OK)?;
        check_access(&nd, cred, W_OK | X_OK)?;
        let src = self
            .dir_lookup(olddir, oldname)?
            .ok_or(ZplError::NotFound)?;
        let sz = self.znode(src)?;
        check_sticky(&od, &sz, cred)?;
        let dst = self.dir_lookup(newdir, newname)?;
        match dst {
            None if flags.exchange => return Err(ZplError::NotFound),
            Some(_) if flags.noreplace => return Err(ZplError::Exists),
            Some(d) if d == src => return Ok(()),
            _ => {}
        }
        if nd.links == 0 {
            return Err(ZplError::NotFound);
        }
        let dz = match dst {
            Some(d) => {
                let dz = self.znode(d)?;
                check_sticky(&nd, &dz, cred)?;
                Some((d, dz))
            }
            None => None,
        };
        let moves_dir = olddir != newdir;
        if sz.is_dir() && moves_dir {
            self.check_not_within(src, newdir)?;
            check_access(&sz, cred, W_OK)?;
        }
        if let Some((d, dz)) = &dz {
            if flags.exchange && dz.is_dir() && moves_dir {
                self.check_not_within(*d, olddir)?;
                check_access(dz, cred, W_OK)?;
            }
            if !flags.exchange {
                self.check_replace(&sz, *d, dz)?;
            }
        }
        self.check_rename_links(&od, &nd, &sz, dz.as_ref().map(|d| &d.1), flags, moves_dir)?;
        let now = self.now();
        let names = RenameNames {
            olddir,
            oldname,
            newdir,
            newname,
        };
        self.tx_logged(TX_METADATA_BYTES, |txg| {
            let freed = self.apply_rename(&names, (src, sz), dz, flags.exchange, now)?;
            self.log_rename(txg, &names, flags, now, freed);
            Ok(())
        })
    }

    /// Renames `src` (znode `sz`) over `dst` if any, or exchanges them
    /// (inside a tx, after every check); returns the replaced inode if
    /// that was its last link.
    pub(crate) fn apply_rename(
        &self,
        n: &RenameNames<'_>,
        src: (u64, ZnodePhys),
        dst: Option<(u64, ZnodePhys)>,
        exchange: bool,
        now: Timespec,
    ) -> Result<Option<u64>> {
        match dst {
            Some(dst) if exchange => {
                self.do_exchange(n, src, dst, now)?;
                Ok(None)
            }
            dst => self.do_rename(n, src, dst, now),
        }
    }

    /// Rename over an existing name: dir over empty dir, file over file.
    pub(crate) fn check_replace(&self, sz: &ZnodePhys, d: u64, dz: &ZnodePhys) -> Result<()> {
        match (sz.is_dir(), dz.is_dir()) {
            (true, false) => Err(ZplError::NotDir),
            (false, true) => Err(ZplError::IsDir),
            (true, true) if self.os.zap_count(d)? > 0 => Err(ZplError::NotEmpty),
            _ => Ok(()),
        }
    }

    /// EMLINK when a directory would gain a subdirectory past link_max.
    fn check_rename_links(
        &self,
        od: &ZnodePhys,
        nd: &ZnodePhys,
        sz: &ZnodePhys,
        dz: Option<&ZnodePhys>,
        flags: RenameFlags,
        moves_dir: bool,
    ) -> Result<()> {
        if !moves_dir {
            return Ok(());
        }
        let max = self.settings().link_max;
        let dst_dir = dz.is_some_and(|d| d.is_dir());
        let new_gains = sz.is_dir() && !dst_dir;
        let old_gains = flags.exchange && dst_dir && !sz.is_dir();
        if new_gains && nd.links >= max || old_gains && od.links >= max {
            return Err(ZplError::TooManyLinks);
        }
        Ok(())
    }

    fn do_rename(
        &self,
        n: &RenameNames<'_>,
        (src, mut sz): (u64, ZnodePhys),
        dst: Option<(u64, ZnodePhys)>,
        now: Timespec,
    ) -> Result<Option<u64>> {
        let (olddir, oldname, newdir, newname) = (n.olddir, n.oldname, n.newdir, n.newname);
        let (mut old_links, mut new_entries, mut new_links) = (0i64, 1i64, 0i64);
        let mut freed = None;
        if let Some((d, mut dz)) = dst {
            self.os.zap_remove(newdir, newname)?;
            new_entries -= 1;
            dz.ctime = now;
            if dz.is_dir() {
                new_links -= 1;
                dz.links = 0;
            } else {
                dz.links = dz.links.saturating_sub(1);
            }
            if dz.links == 0 {
                self.unlinked(d, &dz)?;
                freed = Some(d);
            } else {
                self.put_znode(d, &dz)?;
            }
        }
        self.os.zap_remove(olddir, oldname)?;
        self.dir_add(newdir, newname, src, sz.mode)?;
        if sz.is_dir() && olddir != newdir {
            old_links -= 1;
            new_links += 1;
        }
        sz.parent = newdir;
        sz.ctime = now;
        self.put_znode(src, &sz)?;
        if olddir == newdir {
            self.touch_dir(olddir, new_entries - 1, old_links + new_links, now)?;
        } else {
            self.touch_dir(olddir, -1, old_links, now)?;
            self.touch_dir(newdir, new_entries, new_links, now)?;
        }
        Ok(freed)
    }

    fn do_exchange(
        &self,
        n: &RenameNames<'_>,
        (src, mut sz): (u64, ZnodePhys),
        (dst, mut dz): (u64, ZnodePhys),
        now: Timespec,
    ) -> Result<()> {
        let (olddir, oldname, newdir, newname) = (n.olddir, n.oldname, n.newdir, n.newname);
        let old_v = ZapValue::u64(dirent_encode(dst, dz.mode));
        let new_v = ZapValue::u64(dirent_encode(src, sz.mode));
        self.os.zap_update(olddir, oldname, &old_v)?;
        self.os.zap_update(newdir, newname, &new_v)?;
        let (mut old_links, mut new_links) = (0i64, 0i64);
        if olddir != newdir {
            sz.parent = newdir;
            dz.parent = olddir;
            if sz.is_dir() {
                old_links -= 1;
                new_links += 1;
            }
            if dz.is_dir() {
                new_links -= 1;
                old_links += 1;
            }
        }
        sz.ctime = now;
        dz.ctime = now;
        self.put_znode(src, &sz)?;
        self.put_znode(dst, &dz)?;
        self.touch_dir(olddir, 0, old_links, now)?;
        if olddir != newdir {
            self.touch_dir(newdir, 0, new_links, now)?;
        }
        Ok(())
    }

    /// `readdir` from `cookie` (0 = the start): calls `f` with each entry
    /// until it returns `false` (the reply buffer is full) or the
    /// directory ends. `.` and `..` come first. See the module comment
    /// for the cookies.
    pub fn readdir(&self, dir: u64, cookie: u64, f: impl FnMut(DirEntry) -> bool) -> Result<()> {
        self.readdir_quiet(dir, cookie, f)?;
        if cookie == 0 {
            self.touch_atime(dir);
        }
        Ok(())
    }

    /// [`Zpl::readdir`] that leaves the directory's atime alone: the
    /// daemon's own walks (what the kernel caches of a directory, dropped
    /// after a rollback or a receive), which must not change the dataset.
    pub fn readdir_quiet(
        &self,
        dir: u64,
        cookie: u64,
        mut f: impl FnMut(DirEntry) -> bool,
    ) -> Result<()> {
        {
            let _ns = self.ns_read();
            let d = self.dir_znode(dir)?;
            if !self.readdir_dots(dir, &d, cookie, &mut f) {
                return Ok(());
            }
            let Some(mut zc) = decode_cookie(cookie.max(2)) else {
                return Ok(());
            };
            loop {
                let batch = self.os.zap_next_batch(dir, zc, READDIR_BATCH)?;
                let last = batch.len() < READDIR_BATCH;
                for (name, v, c) in batch {
                    let v = v
                        .as_single_u64()
                        .ok_or_else(|| ZplError::Corrupted("directory entry value".into()))?;
                    let (ino, dtype) = dirent_decode(v)?;
                    let entry = DirEntry {
                        name,
                        ino,
                        kind: FileType::from_mode(u32::from(dtype) << 12),
                        next: encode_cookie(c + 1),
                    };
                    if !f(entry) {
                        return Ok(());
                    }
                    zc = c + 1;
                }
                if last {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Emits `.` and `..` as `cookie` asks; `false` if `f` is full.
    fn readdir_dots(
        &self,
        dir: u64,
        d: &ZnodePhys,
        cookie: u64,
        f: &mut impl FnMut(DirEntry) -> bool,
    ) -> bool {
        let dots = [(b".".to_vec(), dir, 1), (b"..".to_vec(), d.parent, 2)];
        for (name, ino, next) in dots {
            if cookie < next
                && !f(DirEntry {
                    name,
                    ino,
                    kind: FileType::Directory,
                    next,
                })
            {
                return false;
            }
        }
        true
    }

    /// Every entry of `dir` (without `.` and `..`), for tests and tools.
    pub fn read_dir_all(&self, dir: u64) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        self.readdir(dir, 2, |e| {
            out.push(e);
            true
        })?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_round_trip_and_fit_off_t() {
        for zc in [0u64, 1, 5, 0x3FFF, 1 << 16, ((1u64 << 48) - 1) << 16 | 3] {
            let c = encode_cookie(zc);
            assert!((2..1 << 63).contains(&c), "{zc:#x} -> {c:#x}");
            assert_eq!(decode_cookie(c), Some(zc), "{zc:#x}");
        }
        // A differentiator past 2^14 resumes at the next hash, never before.
        let zc = 7 << 16 | 0x9000;
        assert_eq!(decode_cookie(encode_cookie(zc)), Some(8 << 16));
        let max = encode_cookie(u64::MAX);
        assert!(max < 1 << 63);
        assert_eq!(decode_cookie(u64::MAX), None);
    }

    #[test]
    fn names() {
        assert_eq!(check_name(&[b'a'; 256]), Err(ZplError::NameTooLong));
        assert!(check_name(&[b'a'; 255]).is_ok());
        assert!(check_name(b"a/b").is_err());
        assert!(check_name(b"..").is_err());
        assert!(check_name(b"").is_err());
        assert_eq!(round_block(1), 512);
        assert_eq!(round_block(513), 1024);
        for big in [4 << 30, (4 << 30) + 4096, 32 << 30, u64::MAX] {
            assert_eq!(u64::from(round_block(big)), MAX_BLOCK_SIZE, "{big}");
        }
    }
}
