//! The mounted filesystem: [`Zpl`], formatting and mounting a dataset,
//! znode load/store, transactions, the delete queue and open counts
//! (ZFS's `zfs_vfsops.c`, `zfs_znode.c`, the unlinked set of `zfs_dir.c`).
//!
//! ## Transactions
//! Every mutating operation runs inside [`Zpl::tx`]: it takes a
//! [`tarn_pool::TxgHold`] (which throttles when dirty data is over the
//! limit and keeps the open txg from syncing) and then the objset's
//! [`tarn_dmu::TxHold`] (which keeps `Objset::sync` from freezing midway),
//! so a multi-object change — a new object, its znode, the directory
//! entry, the parent's times, the generation counter — lands in one txg
//! or not at all. All checks that can fail on the caller's input are made
//! *before* the transaction; inside it only I/O or corruption can fail.
//! Nothing ever waits for a sync while holding either hold.
//!
//! ## Locking
//! Order: `ns` → inode shard → txg hold → objset hold → (objset internals).
//! - `ns` (namespace lock): operations that change directory entries or
//!   link counts (create, link, unlink, rmdir, rename, ...) take it in
//!   write mode; everything else takes it in read mode. Rename's cycle
//!   check and the link/unlink/open-count decisions therefore see a still
//!   tree, like Linux's per-superblock rename mutex but wider.
//! - inode shards: a fixed table of reader-writer locks indexed by a hash
//!   of the inode number serialises read-modify-write of one znode by operations
//!   that hold `ns` only for reading (write, setattr, xattrs, atime).
//!   Namespace writers need no shard: `ns` in write mode excludes them.
//!
//! Both are reader-split (`tarn_dmu::brlock`): a reader takes its own
//! thread's copy of the lock, a writer every copy. Waits on both count in
//! [`ZPL_NS`] and [`ZPL_INODE`] (`tarn_dmu::lockstat`).
//!
//! ## Unlinked but open
//! The front end counts references with [`Zpl::open`]/[`Zpl::release`]
//! (FUSE: one per lookup or open, dropped by forget/release). Removing
//! the last link of a referenced file keeps the object and lists it in
//! the delete queue in the same txg; the last release frees it. A crash
//! in between leaves it listed, and the next read-write mount frees it.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tarn_dmu::brlock::{BrLockTable, BrReadGuard, BrWriteGuard};
use tarn_dmu::lockstat::LockStat;
use tarn_dmu::{DmuError, Objset, ZapValue};
use tarn_format::zpl::{
    delete_queue_key, ZnodePhys, MASTER_NODE_OBJ, S_IFDIR, ZNODE_FLAG_XATTR, ZPL_DELETE_QUEUE_KEY,
    ZPL_GENERATION_KEY, ZPL_ROOT_KEY, ZPL_VERSION, ZPL_VERSION_KEY,
};
use tarn_format::{ObjType, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE};
use tarn_pool::TxgEngine;

use crate::error::{Result, ZplError};
use crate::types::{Attr, Clock, LogBias, Settings, SpaceHook, SyncMode, Timespec, ZplOptions};

/// The namespace lock (`Zpl::ns`, module comment).
pub static ZPL_NS: LockStat = LockStat::new("zpl namespace");
/// The inode lock shards (`Zpl::shard`).
pub static ZPL_INODE: LockStat = LockStat::new("zpl inode shard");

/// The namespace lock: one lock of a reader-split table
/// (`tarn_dmu::brlock`), so the reads and stats that share it on every
/// CPU do not pass one lock word between CPUs.
pub(crate) struct NsLock(BrLockTable);

impl NsLock {
    pub(crate) fn read(&self) -> BrReadGuard<'_> {
        self.0.read(0)
    }

    pub(crate) fn write(&self) -> BrWriteGuard<'_> {
        self.0.write(0)
    }
}

/// When reads update atime: the `atime` setting, and never on a
/// read-only mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtimePolicy {
    Never = 0,
    Relatime = 1,
    Always = 2,
}

impl AtimePolicy {
    fn of(s: &Settings) -> AtimePolicy {
        match s.atime {
            _ if s.readonly => AtimePolicy::Never,
            crate::types::AtimeMode::Off => AtimePolicy::Never,
            crate::types::AtimeMode::Relatime => AtimePolicy::Relatime,
            crate::types::AtimeMode::Strict => AtimePolicy::Always,
        }
    }
}

/// One inode's lock in the shard table (`Zpl::shard`).
pub(crate) struct InodeLock<'a>(&'a BrLockTable, usize);

impl<'a> InodeLock<'a> {
    pub(crate) fn read(&self) -> BrReadGuard<'a> {
        self.0.read(self.1)
    }

    pub(crate) fn write(&self) -> BrWriteGuard<'a> {
        self.0.write(self.1)
    }
}

/// Shards of the inode lock table (a power of two).
const INODE_LOCK_SHARDS: usize = 256;
/// Dirty bytes a metadata-only transaction is charged to the throttle.
pub(crate) const TX_METADATA_BYTES: u64 = 2048;
/// Bytes a new inode may take once written (dnode + a ZAP or first block).
pub(crate) const INODE_SPACE_BYTES: u64 = 1024;

/// One mounted filesystem dataset. `Send + Sync`: call it from any thread.
pub struct Zpl {
    pub(crate) os: Arc<Objset>,
    pub(crate) txg: Arc<TxgEngine>,
    pub(crate) root: u64,
    pub(crate) dq: u64,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) space: Arc<dyn SpaceHook>,
    settings: RwLock<Settings>,
    /// What `settings` says about atime ([`AtimePolicy`]), kept where a
    /// read can see it without a lock every reader would share.
    atime_policy: std::sync::atomic::AtomicU8,
    pub(crate) ns: NsLock,
    shards: BrLockTable,
    /// Added to the txg number to make a generation (the master node's
    /// `GENERATION`, fixed at format).
    /// Generations are this plus the txg (`next_gen`); raised by replay.
    gen_base: std::sync::atomic::AtomicU64,
    /// Front-end references per inode (see the module comment).
    opens: Mutex<HashMap<u64, u64>>,
    /// The intent log (see `log`), if the dataset has one.
    pub(crate) zil: Option<Arc<tarn_zil::Zilog>>,
    /// The newest txg with a change the log does not describe (freeing an
    /// unlinked file at its last release, dropping file capabilities: see
    /// `log`): `fsync` waits for it to commit.
    pub(crate) unlogged_txg: std::sync::atomic::AtomicU64,
    /// Set by [`Zpl::suspend`]: the dataset is being replaced (a
    /// rollback); every change fails with ESTALE from now on.
    suspended: std::sync::atomic::AtomicBool,
}

fn check_settings(s: &Settings) -> Result<()> {
    let rs = u64::from(s.recordsize);
    if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&rs) || rs % MIN_BLOCK_SIZE != 0 {
        return Err(ZplError::Invalid("recordsize"));
    }
    if s.link_max < 2 {
        return Err(ZplError::Invalid("link_max"));
    }
    Ok(())
}

fn master_get(os: &Objset, key: &str) -> Result<u64> {
    match os.zap_lookup(MASTER_NODE_OBJ, key.as_bytes()) {
        Ok(v) => v
            .as_single_u64()
            .ok_or_else(|| ZplError::Corrupted(format!("master node {key} is not a u64"))),
        Err(DmuError::NotFound) => Err(ZplError::Corrupted(format!("master node has no {key}"))),
        Err(DmuError::NoSuchObject(_)) => Err(ZplError::Invalid("dataset holds no filesystem")),
        Err(e) => Err(e.into()),
    }
}

impl Zpl {
    /// Formats an empty dataset — master node, delete queue and a root
    /// directory (mode 0755, root:root) — commits it and mounts it. (`Zpl::create` is the file-creating operation.)
    pub fn format(os: Arc<Objset>, txg: Arc<TxgEngine>, opts: ZplOptions) -> Result<Zpl> {
        check_settings(&opts.settings)?;
        if opts.settings.readonly {
            return Err(ZplError::ReadOnly);
        }
        match os.object_info(MASTER_NODE_OBJ) {
            Err(DmuError::NoSuchObject(_)) => {}
            Ok(_) => return Err(ZplError::Exists),
            Err(e) => return Err(e.into()),
        }
        let now = opts.clock.now();
        {
            let h = txg.hold()?;
            let _os = os.hold();
            h.dirty(TX_METADATA_BYTES);
            let master = os.zap_create(ObjType::MasterNode)?;
            if master != MASTER_NODE_OBJ {
                return Err(ZplError::Invalid("object set is not empty"));
            }
            let dq = os.zap_create(ObjType::Zap)?;
            let root = os.zap_create(ObjType::DirectoryContents)?;
            let z = ZnodePhys {
                mode: S_IFDIR | 0o755,
                size: 2,
                links: 2,
                parent: root,
                gen: 1,
                atime: now,
                mtime: now,
                ctime: now,
                crtime: now,
                ..Default::default()
            };
            os.set_bonus(root, &z.encode())?;
            for (k, v) in [
                (ZPL_VERSION_KEY, ZPL_VERSION),
                (ZPL_ROOT_KEY, root),
                (ZPL_DELETE_QUEUE_KEY, dq),
                (ZPL_GENERATION_KEY, 1),
            ] {
                os.zap_update(MASTER_NODE_OBJ, k.as_bytes(), &ZapValue::u64(v))?;
            }
        }
        txg.wait_synced(0)?;
        Self::mount(os, txg, opts)
    }

    /// Mounts a formatted dataset; a read-write mount first frees what
    /// the delete queue still lists (files unlinked while open at a crash)
    /// and replays the intent log.
    pub fn mount(os: Arc<Objset>, txg: Arc<TxgEngine>, opts: ZplOptions) -> Result<Zpl> {
        check_settings(&opts.settings)?;
        let version = master_get(&os, ZPL_VERSION_KEY)?;
        if version > ZPL_VERSION {
            return Err(ZplError::NotSupported);
        }
        let root = master_get(&os, ZPL_ROOT_KEY)?;
        let dq = master_get(&os, ZPL_DELETE_QUEUE_KEY)?;
        let gen = master_get(&os, ZPL_GENERATION_KEY)?;
        let zpl = Zpl {
            os,
            txg,
            root,
            dq,
            clock: opts.clock,
            space: opts.space,
            settings: RwLock::new(opts.settings),
            atime_policy: std::sync::atomic::AtomicU8::new(AtimePolicy::of(&opts.settings) as u8),
            ns: NsLock(BrLockTable::new(1, &ZPL_NS)),
            shards: BrLockTable::new(INODE_LOCK_SHARDS, &ZPL_INODE),
            gen_base: std::sync::atomic::AtomicU64::new(gen),
            opens: Mutex::new(HashMap::new()),
            zil: opts.zil,
            unlogged_txg: std::sync::atomic::AtomicU64::new(0),
            suspended: std::sync::atomic::AtomicBool::new(false),
        };
        zpl.tell_log(&opts.settings);
        if !zpl.inode(root)?.is_dir() {
            return Err(ZplError::Corrupted("root is not a directory".into()));
        }
        if !opts.settings.readonly {
            // Replay drains the delete queue itself, first (see `log`).
            zpl.replay_log()?;
            zpl.replay_delete_queue()?;
        }
        Ok(zpl)
    }

    /// The path of `obj` below the root (`dir/file`), found by following
    /// parent pointers and looking each name up in its parent, as
    /// OpenZFS's `zfs_obj_to_path` (for `zpool status -v`). A file with
    /// several links gets the one its parent pointer names. `None` when
    /// the object is gone or the chain does not lead to the root.
    pub fn path_of(&self, obj: u64) -> Option<String> {
        const DEPTH_MAX: usize = 256;
        let mut names = Vec::new();
        let mut at = obj;
        for _ in 0..DEPTH_MAX {
            if at == self.root {
                names.reverse();
                return Some(names.join("/"));
            }
            let parent = self.znode(at).ok()?.parent;
            let mut cookie = 0;
            let name = loop {
                let (name, v, c) = self.os.zap_next(parent, cookie).ok()??;
                let ino = v
                    .as_single_u64()
                    .and_then(|v| tarn_format::zpl::dirent_decode(v).ok());
                if ino.is_some_and(|(ino, _)| ino == at) {
                    break name;
                }
                cookie = c + 1;
            };
            names.push(String::from_utf8_lossy(&name).into_owned());
            at = parent;
        }
        None
    }

    /// The root directory's inode number (fixed for the dataset's life).
    pub fn root_ino(&self) -> u64 {
        self.root
    }

    pub fn objset(&self) -> &Arc<Objset> {
        &self.os
    }

    pub fn settings(&self) -> Settings {
        *self.settings.read()
    }

    pub(crate) fn atime_policy(&self) -> AtimePolicy {
        match self.atime_policy.load(std::sync::atomic::Ordering::Relaxed) {
            x if x == AtimePolicy::Relatime as u8 => AtimePolicy::Relatime,
            x if x == AtimePolicy::Always as u8 => AtimePolicy::Always,
            _ => AtimePolicy::Never,
        }
    }

    /// Changes recordsize/atime/xattr/readonly/link_max at runtime (a new
    /// recordsize applies to files that still have one block).
    pub fn set_settings(&self, s: Settings) -> Result<()> {
        check_settings(&s)?;
        *self.settings.write() = s;
        self.atime_policy.store(
            AtimePolicy::of(&s) as u8,
            std::sync::atomic::Ordering::Relaxed,
        );
        self.tell_log(&s);
        Ok(())
    }

    /// Passes the settings the intent log acts on (`logbias`) to it.
    fn tell_log(&self, s: &Settings) {
        if let Some(zil) = &self.zil {
            zil.set_throughput(s.logbias == LogBias::Throughput);
        }
    }

    // ------------------------------------------------------------ txs

    pub(crate) fn writable(&self) -> Result<()> {
        if self.suspended.load(std::sync::atomic::Ordering::Acquire) {
            return Err(ZplError::Stale);
        }
        if self.settings.read().readonly {
            return Err(ZplError::ReadOnly);
        }
        Ok(())
    }

    /// Stops every change (ESTALE) before the dataset is replaced under
    /// the mount (`zfs rollback`): a change already inside its
    /// transaction finishes, so once the open txg has synced after this
    /// call, nothing more reaches the object set. Reads go on.
    pub fn suspend(&self) {
        self.suspended
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Runs `f` inside one txg (see the module comment). `dirty` is what
    /// the change adds to the txg's dirty data, for the throttle.
    ///
    /// The change is not described by the intent log, so `fsync` makes it
    /// durable by waiting for this txg.
    pub(crate) fn tx<R>(&self, dirty: u64, f: impl FnOnce() -> Result<R>) -> Result<R> {
        self.tx_logged(dirty, |txg| {
            self.unlogged_txg
                .fetch_max(txg, std::sync::atomic::Ordering::Relaxed);
            f()
        })
    }

    /// Like `tx`, for a change `f` describes in the intent log itself
    /// (given the txg), or one that need not be durable at all (atime).
    ///
    /// With `sync=always` the log is committed before returning, so every
    /// change is durable when its call returns.
    pub(crate) fn tx_logged<R>(&self, dirty: u64, f: impl FnOnce(u64) -> Result<R>) -> Result<R> {
        let r = self.tx_quiet(dirty, f)?;
        if self.settings().sync == SyncMode::Always {
            self.commit_log(None)?;
        }
        Ok(r)
    }

    /// Like `tx_logged`, for a change that never needs to be durable on
    /// its own (atime): not even `sync=always` commits for it.
    pub(crate) fn tx_quiet<R>(&self, dirty: u64, f: impl FnOnce(u64) -> Result<R>) -> Result<R> {
        self.writable()?;
        let h = self.txg.hold()?;
        let _os = self.os.hold();
        // Checked again under the hold: `suspend` then a sync of the open
        // txg leaves no change behind (see `Zpl::suspend`).
        if self.suspended.load(std::sync::atomic::Ordering::Acquire) {
            return Err(ZplError::Stale);
        }
        h.dirty(dirty);
        f(h.txg)
    }

    pub(crate) fn now(&self) -> Timespec {
        self.clock.now()
    }

    pub(crate) fn shard(&self, ino: u64) -> InodeLock<'_> {
        let h = ino.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56;
        InodeLock(&self.shards, h as usize)
    }

    pub(crate) fn ns_read(&self) -> BrReadGuard<'_> {
        self.ns.read()
    }

    /// The generation of an inode created now (inside a tx): the open txg
    /// plus the dataset's base, as ZFS uses the txg. An object number is
    /// never reused within the txg that freed it, so (inode, generation)
    /// never repeats, and nothing is written per create.
    pub(crate) fn next_gen(&self) -> Result<u64> {
        let base = self.gen_base.load(std::sync::atomic::Ordering::Relaxed);
        Ok(base + self.txg.open_txg())
    }

    /// Raises the generation base so that inodes created from now on get
    /// generations above those of txgs up to `txg`, which a replayed log
    /// may hold although the pool's txgs after a crash restart below them
    /// (OpenZFS avoids the same repeat with `spa_claim_max_txg`). Inside
    /// a tx; the new base is stored in the master node.
    pub(crate) fn raise_gen_base(&self, txg: u64) -> Result<()> {
        let base = self.gen_base.load(std::sync::atomic::Ordering::Relaxed) + txg;
        self.os.zap_update(
            MASTER_NODE_OBJ,
            ZPL_GENERATION_KEY.as_bytes(),
            &ZapValue::u64(base),
        )?;
        self.gen_base
            .store(base, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    // ------------------------------------------------------------ znodes

    /// The znode of any object the layer owns (inodes and xattr objects).
    pub(crate) fn znode(&self, obj: u64) -> Result<ZnodePhys> {
        if obj == 0 {
            return Err(ZplError::NotFound);
        }
        Ok(self.os.with_bonus(obj, ZnodePhys::decode)??)
    }

    /// The znode of a namespace inode: ENOENT for numbers that are not
    /// inodes (free, the master node, the delete queue, xattr objects).
    pub(crate) fn inode(&self, ino: u64) -> Result<ZnodePhys> {
        if ino == MASTER_NODE_OBJ || ino == self.dq {
            return Err(ZplError::NotFound);
        }
        let z = self.znode(ino)?;
        if z.flags & ZNODE_FLAG_XATTR != 0 {
            return Err(ZplError::NotFound);
        }
        Ok(z)
    }

    pub(crate) fn put_znode(&self, obj: u64, z: &ZnodePhys) -> Result<()> {
        Ok(self.os.set_bonus(obj, &z.encode())?)
    }

    pub(crate) fn attr_of(&self, ino: u64, z: &ZnodePhys) -> Result<Attr> {
        let info = self.os.object_info(ino)?;
        Ok(Attr::from_znode(ino, z, info.block_size, info.used_bytes))
    }

    /// `stat`: the attributes of `ino`.
    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        let _ns = self.ns_read();
        let z = self.inode(ino)?;
        self.attr_of(ino, &z)
    }

    // ------------------------------------------------------------ lifetime

    /// Takes a front-end reference on `ino` (FUSE lookup or open).
    pub fn open(&self, ino: u64) -> Result<()> {
        let _ns = self.ns_read();
        self.inode(ino)?;
        *self.opens.lock().entry(ino).or_insert(0) += 1;
        Ok(())
    }

    /// Drops one reference (see [`Zpl::forget`]).
    pub fn release(&self, ino: u64) -> Result<()> {
        self.forget(ino, 1)
    }

    /// Drops `n` references; the last one frees an unlinked file.
    pub fn forget(&self, ino: u64, n: u64) -> Result<()> {
        let _ns = self.ns_read();
        let _l = self.shard(ino).write();
        {
            let mut opens = self.opens.lock();
            let Some(c) = opens.get_mut(&ino) else {
                return Ok(());
            };
            *c = c.saturating_sub(n);
            if *c > 0 {
                return Ok(());
            }
            opens.remove(&ino);
        }
        let z = match self.inode(ino) {
            Ok(z) => z,
            Err(ZplError::NotFound) => return Ok(()),
            Err(e) => return Err(e),
        };
        if z.links > 0 {
            return Ok(());
        }
        // Not logged, and no reason for an fsync to wait for it: after a
        // crash the inode is still queued and the mount frees it.
        let r = self.tx_quiet(TX_METADATA_BYTES, |_| {
            match self
                .os
                .zap_remove(self.dq, delete_queue_key(ino).as_bytes())
            {
                Ok(()) | Err(DmuError::NotFound) => {}
                Err(e) => return Err(e.into()),
            }
            self.free_inode(ino, &z)
        });
        match r {
            // A read-only mount leaves it queued for the next RW mount.
            Err(ZplError::ReadOnly) => Ok(()),
            r => r,
        }
    }

    pub(crate) fn is_open(&self, ino: u64) -> bool {
        self.opens.lock().get(&ino).is_some_and(|&c| c > 0)
    }

    /// An inode whose last link went away (inside a tx): freed now, or
    /// queued while referenced.
    pub(crate) fn unlinked(&self, ino: u64, z: &ZnodePhys) -> Result<()> {
        debug_assert_eq!(z.links, 0);
        if self.is_open(ino) {
            self.put_znode(ino, z)?;
            let key = delete_queue_key(ino);
            self.os
                .zap_update(self.dq, key.as_bytes(), &ZapValue::u64(ino))?;
            return Ok(());
        }
        self.free_inode(ino, z)
    }

    /// Frees an inode and its extended attributes (inside a tx).
    pub(crate) fn free_inode(&self, ino: u64, z: &ZnodePhys) -> Result<()> {
        if z.xattr != 0 {
            self.free_xattr_dir(z.xattr)?;
        }
        Ok(self.os.object_free(ino)?)
    }

    fn replay_delete_queue(&self) -> Result<()> {
        let queued = self.queued_deletes()?;
        if queued.is_empty() {
            return Ok(());
        }
        self.tx(TX_METADATA_BYTES, || self.drain_delete_queue(&queued))
    }

    /// The delete queue's entries: (key, inode).
    pub(crate) fn queued_deletes(&self) -> Result<Vec<(Vec<u8>, u64)>> {
        let mut queued = Vec::new();
        for e in self.os.zap_cursor(self.dq, 0) {
            let (key, v, _) = e?;
            let ino = v
                .as_single_u64()
                .ok_or_else(|| ZplError::Corrupted("delete queue value".into()))?;
            queued.push((key, ino));
        }
        Ok(queued)
    }

    /// Frees the `queued` inodes and empties the queue (inside a tx).
    pub(crate) fn drain_delete_queue(&self, queued: &[(Vec<u8>, u64)]) -> Result<()> {
        for (key, ino) in queued {
            match self.znode(*ino) {
                Ok(z) => self.free_inode(*ino, &z)?,
                Err(ZplError::NotFound) => {}
                Err(e) => return Err(e),
            }
            self.os.zap_remove(self.dq, key)?;
        }
        Ok(())
    }

    /// Objects listed in the delete queue now (for tests and `zdb`-like
    /// tools).
    pub fn delete_queue(&self) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        for e in self.os.zap_cursor(self.dq, 0) {
            let (_, v, _) = e?;
            out.extend(v.as_single_u64());
        }
        Ok(out)
    }

    /// `fsync`/`fdatasync`: makes `ino`'s changes and every namespace
    /// change durable (see `commit_log`). `sync=disabled` returns at once.
    pub fn fsync(&self, ino: u64) -> Result<()> {
        self.getattr(ino)?;
        let s = self.settings();
        if s.readonly || s.sync == SyncMode::Disabled {
            return Ok(());
        }
        self.commit_log(Some(ino))
    }

    /// Commits the intent log: `ino`'s own records and every synchronous
    /// one, or everything when `ino` is `None`. Without a log (a pool
    /// opened without one, in tests) the open txg is committed instead.
    pub(crate) fn commit_log(&self, ino: Option<u64>) -> Result<()> {
        if self.suspended.load(std::sync::atomic::Ordering::Acquire) {
            return Err(ZplError::Stale);
        }
        let Some(zil) = &self.zil else {
            return Ok(self.txg.wait_synced(0)?);
        };
        // Changes the log does not describe are made durable by their txg
        // first, so every record committed below applies on top of them.
        let unlogged = self.unlogged_txg.load(std::sync::atomic::Ordering::Relaxed);
        if unlogged > self.txg.last_synced() {
            self.txg.wait_synced(unlogged)?;
        }
        match ino {
            Some(ino) => zil.commit_object(ino),
            None => zil.commit(),
        }
        .map_err(|e| ZplError::Io(e.to_string()))
    }
}
