//! The POSIX layer's side of the intent log (ZFS's `zfs_log.c` and
//! `zfs_replay.c`): which changes are logged, and how records are applied
//! again after a crash.
//!
//! ## What is logged
//! Every change an application can ask to be durable leaves a record in
//! the same tx as the change itself (`Zpl::tx_logged`), so `fsync` never
//! waits for a txg for it:
//! - write (by reference, plus the attributes it left) and setattr
//!   (absolute mode, owner, size and times): `WRITE` + `SETATTR`,
//!   `SETATTR`;
//! - create, mkdir, mknod, symlink: `CREATE`, with everything the new
//!   inode got — its number, type and permission bits after the set-gid
//!   inheritance of `new_znode`, owner and group, rdev, generation, time
//!   and symlink target (nothing else is inherited: no ACL or xattr is
//!   copied at create);
//! - unlink and rmdir: `REMOVE`; link: `LINK`; rename (plain, over an
//!   existing name, NOREPLACE, EXCHANGE): `RENAME` with its flags;
//! - setxattr and removexattr, in every namespace and either storage
//!   (`sa` or `dir`), ACLs included: `SETXATTR`, `REMOVEXATTR`;
//! - fallocate: `SETATTR` (the grown size), a punched hole `FREE_RANGE` +
//!   `SETATTR`.
//!
//! What is not logged goes through `Zpl::tx` (or notes its txg the same
//! way), and `fsync` waits for that txg: freeing an unlinked file at its
//! last release, draining the delete queue, and the drop of
//! `security.capability` by a write, truncate or chown (`kill_caps`).
//! Atime is not durable on its own (`tx_quiet`).
//!
//! When a change removes an inode's last link, the inode's pending writes
//! and attribute changes are dropped from the log (`remove_async`): they
//! describe a file that is gone, and its number may come back.
//!
//! ## Replay
//! At a read-write mount, in one txg that also starts the log's new chain
//! (so a crash during replay replays everything again, and a replay that
//! committed never replays again):
//! 1. The delete queue is drained first, as ZFS's `zfsvfs_setup` does
//!    before `zil_replay`. A queued inode has no name left, so no record
//!    can give it one; but its number may have been freed and handed to a
//!    logged create after the last committed txg, and that create must
//!    find the number free.
//! 2. The records, in log order. Each gets the object numbers the change
//!    had: `CREATE` claims its number (`Objset::object_claim`). A number
//!    freed earlier in the same replay — by the drain, a `REMOVE`, an
//!    xattr change — is re-created in place (the object layer allows that
//!    inside the txg that freed it, only through `object_claim`). Objects
//!    the replay allocates itself (xattr directories and values, whose
//!    numbers the records do not carry) avoid every number a `CREATE` of
//!    this log claims.
//! 3. `Zilog::replay_done`, then the mount waits for the txg.
//!
//! Rules, as ZFS's (`TX_OOO` in `zil_replay_log_record`): a record about
//! one object (write, setattr, free range, xattrs) may name an object
//! that is gone at its point of the replay — a file unlinked while open
//! is still written to and fsynced, and the replay of its `REMOVE` freed
//! it (nothing is open during replay) — and is skipped. A `CREATE` whose
//! name already names the same object was replayed before and is
//! skipped; a `LINK` likewise. Anything else that does not fit the tree
//! (a missing name, a name taken by another object, a number in use, a
//! non-empty directory removed, file data for a directory) is
//! `ZplError::Corrupted` naming the record, never a panic. Each record
//! is checked before it changes anything, so a replay that fails leaves
//! whole records applied: the mount fails, those changes commit with
//! their txg, and the log stays on disk for the next import, which
//! replays it from its start again.

use std::collections::BTreeSet;

use tarn_dmu::DmuError;
use tarn_format::zil::{
    LogRecord, LogSetattr, LogTime, LoggedRecord, LOG_ATTR_ATIME, LOG_ATTR_CTIME, LOG_ATTR_GID,
    LOG_ATTR_MODE, LOG_ATTR_MTIME, LOG_ATTR_SIZE, LOG_ATTR_UID,
};
use tarn_format::zpl::{Timespec, ZnodePhys, S_IFLNK, S_IFMT, S_IFREG};

use crate::dir::{check_name, fresh_znode, RenameNames, SYMLINK_MAX};
use crate::error::{Result, ZplError};
use crate::fs::Zpl;
use crate::fs::TX_METADATA_BYTES;
use crate::types::{FileType, RenameFlags};
use crate::xattr::check_xattr_record;

/// `RENAME` flag bits (docs/FORMAT.md §12b), Linux's `RENAME_*` values.
const LOG_RENAME_NOREPLACE: u32 = 1;
const LOG_RENAME_EXCHANGE: u32 = 2;

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

fn corrupt(why: impl Into<String>) -> ZplError {
    ZplError::Corrupted(why.into())
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

fn rename_bits(f: RenameFlags) -> u32 {
    let mut bits = 0;
    if f.noreplace {
        bits |= LOG_RENAME_NOREPLACE;
    }
    if f.exchange {
        bits |= LOG_RENAME_EXCHANGE;
    }
    bits
}

fn rename_flags(bits: u32) -> Result<RenameFlags> {
    let f = RenameFlags {
        noreplace: bits & LOG_RENAME_NOREPLACE != 0,
        exchange: bits & LOG_RENAME_EXCHANGE != 0,
    };
    if bits & !(LOG_RENAME_NOREPLACE | LOG_RENAME_EXCHANGE) != 0 || f.noreplace && f.exchange {
        return Err(corrupt(format!("rename flags {bits:#x}")));
    }
    Ok(f)
}

impl Zpl {
    /// Logs the record `rec` builds, in `txg` (built only if there is a log).
    fn log_with(&self, txg: u64, rec: impl FnOnce() -> LogRecord) {
        if let Some(zil) = &self.zil {
            zil.log(txg, rec());
        }
    }

    /// Logs a write of `len` bytes at `off` (in `txg`) and the attributes
    /// it left in `z`.
    pub(crate) fn log_write(&self, txg: u64, ino: u64, off: u64, len: u64, z: &ZnodePhys) {
        if let Some(zil) = &self.zil {
            zil.log_write(txg, ino, off, len);
        }
        self.log_setattr(txg, ino, z);
    }

    /// Logs the attributes a setattr left in `z` (in `txg`).
    pub(crate) fn log_setattr(&self, txg: u64, ino: u64, z: &ZnodePhys) {
        self.log_with(txg, || LogRecord::Setattr {
            obj: ino,
            attr: full_setattr(z),
        });
    }

    /// Logs a fallocate: the hole it punched (`offset`, `len`), if any, and
    /// the attributes it left in `z`.
    pub(crate) fn log_fallocate(
        &self,
        txg: u64,
        ino: u64,
        hole: Option<(u64, u64)>,
        z: &ZnodePhys,
    ) {
        if let Some((offset, len)) = hole {
            self.log_with(txg, || LogRecord::FreeRange {
                obj: ino,
                offset,
                len,
            });
        }
        self.log_setattr(txg, ino, z);
    }

    /// Logs the creation of inode `ino` (znode `z`) as `name` in `dir`.
    pub(crate) fn log_create(
        &self,
        txg: u64,
        dir: u64,
        name: &[u8],
        ino: u64,
        z: &ZnodePhys,
        target: Option<&[u8]>,
    ) {
        self.log_with(txg, || LogRecord::Create {
            dir,
            obj: ino,
            mode: z.mode,
            uid: z.uid,
            gid: z.gid,
            rdev: z.rdev,
            gen: z.gen,
            time: lt(z.ctime),
            name: name.to_vec(),
            target: target.unwrap_or_default().to_vec(),
        });
    }

    /// Logs the removal of `name` from `dir`; `last` is the inode whose
    /// last link that was, whose pending records are dropped.
    pub(crate) fn log_remove(
        &self,
        txg: u64,
        dir: u64,
        name: &[u8],
        now: Timespec,
        last: Option<u64>,
    ) {
        self.log_with(txg, || LogRecord::Remove {
            dir,
            name: name.to_vec(),
            time: lt(now),
        });
        self.forget_pending(last);
    }

    /// Drops the pending writes and attribute changes of an inode whose
    /// last link went away (see the module comment).
    fn forget_pending(&self, last: Option<u64>) {
        if let (Some(zil), Some(ino)) = (&self.zil, last) {
            zil.remove_async(ino);
        }
    }

    pub(crate) fn log_link(&self, txg: u64, ino: u64, dir: u64, name: &[u8], now: Timespec) {
        self.log_with(txg, || LogRecord::Link {
            dir,
            obj: ino,
            name: name.to_vec(),
            time: lt(now),
        });
    }

    /// Logs a rename; `replaced` is the inode whose last link it removed.
    pub(crate) fn log_rename(
        &self,
        txg: u64,
        n: &RenameNames<'_>,
        flags: RenameFlags,
        now: Timespec,
        replaced: Option<u64>,
    ) {
        self.log_with(txg, || LogRecord::Rename {
            sdir: n.olddir,
            sname: n.oldname.to_vec(),
            tdir: n.newdir,
            tname: n.newname.to_vec(),
            flags: rename_bits(flags),
            time: lt(now),
        });
        self.forget_pending(replaced);
    }

    pub(crate) fn log_setxattr(
        &self,
        txg: u64,
        ino: u64,
        name: &[u8],
        value: &[u8],
        now: Timespec,
    ) {
        self.log_with(txg, || LogRecord::Setxattr {
            obj: ino,
            name: name.to_vec(),
            value: value.to_vec(),
            time: lt(now),
        });
    }

    pub(crate) fn log_removexattr(&self, txg: u64, ino: u64, name: &[u8], now: Timespec) {
        self.log_with(txg, || LogRecord::Removexattr {
            obj: ino,
            name: name.to_vec(),
            time: lt(now),
        });
    }

    /// A new object from `create` (inside a tx), whose number is not in
    /// `avoid` (numbers a replayed log still has to claim; empty outside
    /// replay). Numbers skipped are freed again in the same txg, where a
    /// claim can re-create them.
    pub(crate) fn new_object(
        &self,
        avoid: &BTreeSet<u64>,
        create: impl Fn() -> std::result::Result<u64, DmuError>,
    ) -> Result<u64> {
        let mut skipped = Vec::new();
        let obj = loop {
            let obj = create()?;
            if !avoid.contains(&obj) {
                break obj;
            }
            skipped.push(obj);
        };
        for n in skipped {
            self.os.object_free(n)?;
        }
        Ok(obj)
    }

    // ------------------------------------------------------------ replay

    /// Replays what the intent log holds (see the module comment).
    pub(crate) fn replay_log(&self) -> Result<()> {
        let Some(zil) = self.zil.clone() else {
            return Ok(());
        };
        if !zil.replay_pending() {
            return Ok(());
        }
        let records = zil.take_replay();
        let queued = self.queued_deletes()?;
        let n = records.len() as u64;
        let newest = records.iter().map(|r| r.txg).max().unwrap_or(0);
        let txg = self.tx_logged(TX_METADATA_BYTES, |txg| {
            self.drain_delete_queue(&queued)?;
            self.apply_log(&records)?;
            if newest > 0 {
                self.raise_gen_base(newest)?;
            }
            zil.replay_done(txg, n)
                .map_err(|e| ZplError::Io(e.to_string()))?;
            Ok(txg)
        })?;
        self.txg.wait_synced(txg)?;
        Ok(())
    }

    /// Applies `records` in order (inside a tx).
    pub(crate) fn apply_log(&self, records: &[LoggedRecord]) -> Result<()> {
        let claimed: BTreeSet<u64> = records
            .iter()
            .filter_map(|r| match r.record {
                LogRecord::Create { obj, .. } => Some(obj),
                _ => None,
            })
            .collect();
        for r in records {
            self.replay_one(&r.record, &claimed).map_err(|e| {
                let why = match e {
                    ZplError::Io(_) | ZplError::NoSpace | ZplError::Quota => return e,
                    ZplError::Corrupted(why) => why,
                    e => e.to_string(),
                };
                corrupt(format!(
                    "intent log record {} (type {}, txg {}) does not apply: {why}",
                    r.seq,
                    r.record.type_code(),
                    r.txg
                ))
            })?;
        }
        Ok(())
    }

    fn replay_one(&self, rec: &LogRecord, claimed: &BTreeSet<u64>) -> Result<()> {
        match rec {
            LogRecord::Write { obj, offset, data } => self.replay_write(*obj, *offset, data),
            LogRecord::Setattr { obj, attr } => self.replay_setattr(*obj, attr),
            LogRecord::FreeRange { obj, offset, len } => {
                let Some(z) = self.replay_target(*obj)? else {
                    return Ok(());
                };
                regular(&z)?;
                Ok(self.os.free_range(*obj, *offset, *len)?)
            }
            LogRecord::Create {
                dir,
                obj,
                mode,
                uid,
                gid,
                rdev,
                gen,
                time,
                name,
                target,
            } => {
                let new = NewInode {
                    obj: *obj,
                    mode: *mode,
                    owner: (*uid, *gid),
                    rdev: *rdev,
                    gen: *gen,
                    target,
                };
                self.replay_create(*dir, name, &new, ts(*time))
            }
            LogRecord::Remove { dir, name, time } => self.replay_remove(*dir, name, ts(*time)),
            LogRecord::Link {
                dir,
                obj,
                name,
                time,
            } => self.replay_link(*dir, *obj, name, ts(*time)),
            LogRecord::Rename {
                sdir,
                sname,
                tdir,
                tname,
                flags,
                time,
            } => {
                let names = RenameNames {
                    olddir: *sdir,
                    oldname: sname,
                    newdir: *tdir,
                    newname: tname,
                };
                self.replay_rename(&names, rename_flags(*flags)?, ts(*time))
            }
            LogRecord::Setxattr {
                obj,
                name,
                value,
                time,
            } => {
                let Some(mut z) = self.replay_target(*obj)? else {
                    return Ok(());
                };
                check_xattr_record(name, value)?;
                self.xattr_set(*obj, &mut z, name, value, ts(*time), claimed)
            }
            // `Zilog::take_replay` hands these over as plain writes.
            LogRecord::WriteIndirect { .. } => Err(corrupt("an indirect write left unread")),
            LogRecord::Removexattr { obj, name, time } => {
                let Some(mut z) = self.replay_target(*obj)? else {
                    return Ok(());
                };
                if !self.xattr_exists(&z, name)? {
                    return Err(corrupt("the attribute does not exist"));
                }
                self.xattr_remove(*obj, &mut z, name, ts(*time))
            }
        }
    }

    /// The znode of the inode a per-object record names, `None` if the
    /// object is gone (the record is skipped, see the module comment).
    fn replay_target(&self, obj: u64) -> Result<Option<ZnodePhys>> {
        match self.inode(obj) {
            Ok(z) => Ok(Some(z)),
            Err(ZplError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn replay_write(&self, obj: u64, offset: u64, data: &[u8]) -> Result<()> {
        let Some(mut z) = self.replay_target(obj)? else {
            return Ok(());
        };
        regular(&z)?;
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| corrupt("write past the largest offset"))?;
        self.grow_block(obj, &z, end)?;
        self.os.write(obj, offset, data)?;
        z.size = z.size.max(end);
        self.put_znode(obj, &z)
    }

    fn replay_setattr(&self, obj: u64, attr: &LogSetattr) -> Result<()> {
        let Some(mut z) = self.replay_target(obj)? else {
            return Ok(());
        };
        let m = attr.mask;
        // Only a file's size is set; a directory's counts its entries and
        // a symlink's is its target (and a ZAP must never be truncated).
        if m & LOG_ATTR_SIZE != 0 && z.mode & S_IFMT == S_IFREG {
            if attr.size < z.size {
                self.os.truncate(obj, attr.size)?;
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
        self.put_znode(obj, &z)
    }

    fn replay_create(
        &self,
        dir: u64,
        name: &[u8],
        new: &NewInode<'_>,
        now: Timespec,
    ) -> Result<()> {
        check_name(name)?;
        let (mode, target) = (new.mode, new.target);
        let symlink = mode & S_IFMT == S_IFLNK;
        let typed = FileType::from_mode(mode).mode_bits() == mode & S_IFMT;
        if !typed || symlink == target.is_empty() || target.len() > SYMLINK_MAX {
            return Err(corrupt(format!(
                "create with mode {mode:o} and a {}-byte target",
                target.len()
            )));
        }
        self.dir_znode(dir)?;
        match self.dir_lookup(dir, name)? {
            Some(o) if o == new.obj => return Ok(()),
            Some(o) => return Err(corrupt(format!("the name already names object {o}"))),
            None => {}
        }
        let tlen = target.len() as u64;
        let z = fresh_znode(dir, mode, new.owner, new.rdev, new.gen, tlen, now);
        let target = symlink.then_some(target);
        self.init_inode(Some(new.obj), &z, target)?;
        self.dir_add(dir, name, new.obj, mode)?;
        self.touch_dir(dir, 1, i64::from(z.is_dir()), now)
    }

    fn replay_remove(&self, dir: u64, name: &[u8], now: Timespec) -> Result<()> {
        self.dir_znode(dir)?;
        let ino = self
            .dir_lookup(dir, name)?
            .ok_or_else(|| corrupt("the name does not exist"))?;
        let z = self.znode(ino)?;
        if z.is_dir() && self.os.zap_count(ino)? > 0 {
            return Err(corrupt(format!("directory {ino} is not empty")));
        }
        self.remove_entry(dir, name, ino, z, now).map(|_| ())
    }

    fn replay_link(&self, dir: u64, ino: u64, name: &[u8], now: Timespec) -> Result<()> {
        check_name(name)?;
        self.dir_znode(dir)?;
        let mut z = self.inode(ino)?;
        if z.is_dir() || z.links == 0 {
            return Err(corrupt(format!("object {ino} cannot take a link")));
        }
        match self.dir_lookup(dir, name)? {
            Some(o) if o == ino => return Ok(()),
            Some(o) => return Err(corrupt(format!("the name already names object {o}"))),
            None => {}
        }
        self.add_link(ino, &mut z, dir, name, now)
    }

    fn replay_rename(&self, n: &RenameNames<'_>, flags: RenameFlags, now: Timespec) -> Result<()> {
        check_name(n.newname)?;
        self.dir_znode(n.olddir)?;
        self.dir_znode(n.newdir)?;
        let src = self
            .dir_lookup(n.olddir, n.oldname)?
            .ok_or_else(|| corrupt("the source name does not exist"))?;
        let sz = self.znode(src)?;
        let dst = match self.dir_lookup(n.newdir, n.newname)? {
            None if flags.exchange => return Err(corrupt("exchange with a missing name")),
            Some(_) if flags.noreplace => return Err(corrupt("the target name exists")),
            Some(d) if d == src => return Ok(()),
            dst => dst,
        };
        let dst = match dst {
            Some(d) => Some((d, self.znode(d)?)),
            None => None,
        };
        if n.olddir != n.newdir {
            if sz.is_dir() {
                self.check_not_within(src, n.newdir)?;
            }
            match &dst {
                Some((d, dz)) if flags.exchange && dz.is_dir() => {
                    self.check_not_within(*d, n.olddir)?;
                }
                _ => {}
            }
        }
        if let Some((d, dz)) = dst.as_ref().filter(|_| !flags.exchange) {
            self.check_replace(&sz, *d, dz)?;
        }
        self.apply_rename(n, (src, sz), dst, flags.exchange, now)
            .map(|_| ())
    }
}

/// What a `CREATE` record says the new inode is.
struct NewInode<'a> {
    obj: u64,
    mode: u32,
    owner: (u32, u32),
    rdev: u64,
    gen: u64,
    target: &'a [u8],
}

fn regular(z: &ZnodePhys) -> Result<()> {
    if z.mode & S_IFMT != S_IFREG {
        return Err(corrupt("file data record for an object that is no file"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Hand-made logs on an in-memory store, for the cases a real crash
    //! cannot be steered into: numbers freed and claimed again inside one
    //! replay, objects the replay allocates itself, records that do not
    //! fit the tree.

    use std::collections::HashSet;
    use std::sync::Arc;

    use parking_lot::Mutex;
    use tarn_dmu::Objset;
    use tarn_format::objset::ObjsetType;
    use tarn_format::zpl::{S_IFDIR, S_IFLNK, S_IFREG};
    use tarn_format::BlockPtr;
    use tarn_pool::{MemBlockStore, SyncTarget, TxgEngine};

    use super::*;
    use crate::types::{Cred, Settings, XattrMode, ZplOptions};

    struct OsSync {
        os: Arc<Objset>,
        root: Arc<Mutex<BlockPtr>>,
    }

    impl SyncTarget for OsSync {
        fn sync_txg(&self, txg: u64) -> std::result::Result<(), String> {
            *self.root.lock() = self.os.sync(txg).map_err(|e| e.to_string())?;
            Ok(())
        }
    }

    struct Rig {
        store: Arc<MemBlockStore>,
        root_bp: Arc<Mutex<BlockPtr>>,
        txg: Arc<TxgEngine>,
        zpl: Option<Zpl>,
        settings: Settings,
    }

    fn engine(os: &Arc<Objset>, root: &Arc<Mutex<BlockPtr>>, last: u64) -> Arc<TxgEngine> {
        let txg = TxgEngine::new(last);
        let target = OsSync {
            os: os.clone(),
            root: root.clone(),
        };
        txg.start(Arc::new(target), "log-test");
        txg
    }

    const T: LogTime = LogTime {
        sec: 1_800_000_000,
        nsec: 5,
    };

    fn create(dir: u64, obj: u64, mode: u32, name: &str) -> LogRecord {
        LogRecord::Create {
            dir,
            obj,
            mode,
            uid: 7,
            gid: 8,
            rdev: 0,
            gen: 99,
            time: T,
            name: name.as_bytes().to_vec(),
            target: if mode & S_IFMT == S_IFLNK {
                b"target".to_vec()
            } else {
                Vec::new()
            },
        }
    }

    impl Rig {
        fn new(xattr: XattrMode) -> Rig {
            let store = Arc::new(MemBlockStore::new());
            let os = Arc::new(Objset::create(store.clone(), ObjsetType::Filesystem));
            let root_bp = Arc::new(Mutex::new(BlockPtr::HOLE));
            let txg = engine(&os, &root_bp, 0);
            let settings = Settings {
                xattr,
                ..Settings::default()
            };
            let opts = ZplOptions {
                settings,
                ..Default::default()
            };
            let zpl = Zpl::format(os, txg.clone(), opts).unwrap();
            Rig {
                store,
                root_bp,
                txg,
                zpl: Some(zpl),
                settings,
            }
        }

        fn fs(&self) -> &Zpl {
            self.zpl.as_ref().expect("mounted")
        }

        fn replay(&self, records: Vec<LogRecord>) -> Result<()> {
            let records: Vec<LoggedRecord> = records
                .into_iter()
                .enumerate()
                .map(|(i, record)| LoggedRecord {
                    txg: 1,
                    seq: i as u64 + 1,
                    record,
                })
                .collect();
            let fs = self.fs();
            fs.tx_logged(TX_METADATA_BYTES, |_| fs.apply_log(&records))
        }

        /// Commits, checks that the store holds exactly the blocks the
        /// tree reaches, and mounts the committed tree again.
        fn remount(&mut self) {
            self.zpl.take();
            self.txg.shutdown().unwrap();
            let root = *self.root_bp.lock();
            let os = Arc::new(Objset::open(self.store.clone(), &root).unwrap());
            let mut seen = HashSet::new();
            os.walk_blocks(&mut |bp| assert!(seen.insert(bp.dvas[0])))
                .unwrap();
            assert_eq!(seen.len(), self.store.live_blocks(), "leak or lost block");
            self.txg = engine(&os, &self.root_bp, self.txg.last_synced());
            let opts = ZplOptions {
                settings: self.settings,
                ..Default::default()
            };
            self.zpl = Some(Zpl::mount(os, self.txg.clone(), opts).unwrap());
        }

        fn ino(&self, dir: u64, name: &str) -> Option<u64> {
            self.fs().dir_lookup(dir, name.as_bytes()).unwrap()
        }
    }

    impl Drop for Rig {
        fn drop(&mut self) {
            self.zpl.take();
            self.txg.halt();
        }
    }

    #[test]
    fn a_number_freed_in_the_replay_is_claimed_again() {
        let mut rig = Rig::new(XattrMode::Sa);
        let root = rig.fs().root_ino();
        rig.replay(vec![
            create(root, 50, S_IFREG | 0o644, "a"),
            LogRecord::Write {
                obj: 50,
                offset: 0,
                data: vec![0xaa; 3000],
            },
            LogRecord::Remove {
                dir: root,
                name: b"a".to_vec(),
                time: T,
            },
            create(root, 50, S_IFDIR | 0o755, "b"),
            create(50, 51, S_IFLNK | 0o777, "l"),
        ])
        .unwrap();
        rig.remount();
        assert_eq!(rig.ino(root, "a"), None);
        assert_eq!(rig.ino(root, "b"), Some(50));
        let b = rig.fs().getattr(50).unwrap();
        assert_eq!(
            (b.mode, b.nlink, b.size, b.gen),
            (S_IFDIR | 0o755, 2, 3, 99)
        );
        assert_eq!((b.uid, b.gid, b.mtime), (7, 8, ts(T)));
        assert_eq!(rig.fs().readlink(51).unwrap(), b"target");
        let r = rig.fs().getattr(root).unwrap();
        assert_eq!((r.nlink, r.size, r.mtime), (3, 3, ts(T)));
    }

    #[test]
    fn objects_the_replay_allocates_avoid_numbers_the_log_claims() {
        let mut rig = Rig::new(XattrMode::Dir);
        let root = rig.fs().root_ino();
        // The lowest free numbers now: what the xattr directory and its
        // value object would get if they did not avoid them.
        let free: Vec<u64> = (root + 1..).take(2).collect();
        rig.replay(vec![
            create(root, 40, S_IFREG | 0o600, "f"),
            LogRecord::Setxattr {
                obj: 40,
                name: b"user.big".to_vec(),
                value: vec![7; 1000],
                time: T,
            },
            create(root, free[0], S_IFREG | 0o600, "g"),
            create(root, free[1], S_IFDIR | 0o700, "h"),
        ])
        .unwrap();
        rig.remount();
        assert_eq!(rig.ino(root, "g"), Some(free[0]));
        assert_eq!(rig.ino(root, "h"), Some(free[1]));
        let v = rig.fs().getxattr(40, b"user.big", &Cred::root()).unwrap();
        assert_eq!(v, vec![7; 1000]);
    }

    #[test]
    fn records_of_gone_objects_and_repeated_creates_are_skipped() {
        let rig = Rig::new(XattrMode::Sa);
        let root = rig.fs().root_ino();
        let gone = 77;
        rig.replay(vec![
            create(root, 30, S_IFREG | 0o644, "f"),
            create(root, 30, S_IFREG | 0o644, "f"),
            LogRecord::Link {
                dir: root,
                obj: 30,
                name: b"g".to_vec(),
                time: T,
            },
            LogRecord::Link {
                dir: root,
                obj: 30,
                name: b"g".to_vec(),
                time: T,
            },
            LogRecord::Write {
                obj: gone,
                offset: 0,
                data: vec![1; 10],
            },
            LogRecord::Setattr {
                obj: gone,
                attr: LogSetattr::default(),
            },
            LogRecord::FreeRange {
                obj: gone,
                offset: 0,
                len: 10,
            },
            LogRecord::Setxattr {
                obj: gone,
                name: b"user.x".to_vec(),
                value: vec![1],
                time: T,
            },
            LogRecord::Removexattr {
                obj: gone,
                name: b"user.x".to_vec(),
                time: T,
            },
        ])
        .unwrap();
        let f = rig.fs().getattr(30).unwrap();
        assert_eq!(f.nlink, 2);
        assert_eq!(rig.fs().getattr(root).unwrap().size, 4);
        assert_eq!(rig.fs().getattr(gone), Err(ZplError::NotFound));
    }

    #[test]
    fn records_that_do_not_fit_the_tree_are_corruption() {
        let mut rig = Rig::new(XattrMode::Sa);
        let root = rig.fs().root_ino();
        rig.replay(vec![
            create(root, 30, S_IFREG | 0o644, "f"),
            create(root, 31, S_IFDIR | 0o755, "d"),
            create(31, 32, S_IFREG | 0o644, "inner"),
        ])
        .unwrap();
        let name = |s: &str| s.as_bytes().to_vec();
        let bad = [
            create(root, 40, S_IFREG | 0o644, "f"),
            create(root, root, S_IFREG | 0o644, "taken"),
            create(root, 41, 0o170000 | 0o644, "badmode"),
            create(root, 42, S_IFREG | 0o644, "a/b"),
            create(30, 43, S_IFREG | 0o644, "in-a-file"),
            LogRecord::Remove {
                dir: root,
                name: name("missing"),
                time: T,
            },
            LogRecord::Remove {
                dir: root,
                name: name("d"),
                time: T,
            },
            LogRecord::Link {
                dir: root,
                obj: 44,
                name: name("l"),
                time: T,
            },
            LogRecord::Rename {
                sdir: root,
                sname: name("missing"),
                tdir: root,
                tname: name("x"),
                flags: 0,
                time: T,
            },
            LogRecord::Rename {
                sdir: root,
                sname: name("d"),
                tdir: 31,
                tname: name("x"),
                flags: 0,
                time: T,
            },
            LogRecord::Rename {
                sdir: root,
                sname: name("f"),
                tdir: root,
                tname: name("d"),
                flags: 0,
                time: T,
            },
            LogRecord::Rename {
                sdir: root,
                sname: name("f"),
                tdir: root,
                tname: name("x"),
                flags: 3,
                time: T,
            },
            LogRecord::Removexattr {
                obj: 30,
                name: name("user.none"),
                time: T,
            },
            LogRecord::Write {
                obj: 31,
                offset: 0,
                data: vec![1],
            },
        ];
        let before = rig.fs().read_dir_all(root).unwrap();
        for rec in bad {
            let err = rig.replay(vec![rec.clone()]).unwrap_err();
            assert!(
                matches!(err, ZplError::Corrupted(_)),
                "{rec:?} gave {err:?}"
            );
        }
        assert_eq!(rig.fs().read_dir_all(root).unwrap(), before);
        assert_eq!(rig.fs().read_dir_all(31).unwrap().len(), 1);
        rig.remount();
        assert_eq!(rig.fs().read_dir_all(root).unwrap(), before);
    }
}
