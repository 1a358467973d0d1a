//! The `fuser::Filesystem` implementation: each FUSE operation becomes one
//! call into [`Zpl`] (ZFS's `zpl_*.c` glue between the VFS and `zfs_*`).
//!
//! Every handler body runs inside [`guard`]: a panic is caught and logged,
//! and the reply it owned, dropped while unwinding, answers the kernel
//! with EIO — one bad request never takes the daemon down (fuser would
//! otherwise lose the worker thread and end the session).
//!
//! Node ids: the kernel names the root 1; every other node id is the
//! inode number (object number), which the layer keeps stable across
//! remounts. Object 1 is the dataset's master node, never an inode, so
//! the two never clash. `stat` of the root shows its real inode number.
//!
//! File handles carry nothing (the layer is addressed by inode); the
//! open flags arrive with every read and write.
//!
//! ## SEEK_DATA / SEEK_HOLE and the writeback cache
//! With the writeback cache, bytes a program wrote may still be dirty
//! pages in the kernel, unseen by the layer, and the kernel does not write
//! them back before asking us to seek: a fresh sparse file would show
//! holes where it has data (and `cp`, which seeks on files whose blocks
//! look few, would copy holes). So for a file some handle has open for
//! writing, the seek is answered on a separate thread after a
//! FUSE_NOTIFY_INVAL_INODE, which makes the kernel write the dirty pages
//! back (as FUSE writes the workers serve) before it drops them. The
//! worker that received the seek does not wait — with every worker
//! waiting, nobody would serve those writes. When no handle may write,
//! the kernel holds no dirty pages (it writes them back at close and
//! release), and the layer answers directly.

use std::ffi::OsStr;
use std::io::IoSlice;
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, Notifier, OpenAccMode, OpenFlags,
    RenameFlags as FuseRename, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use tarn_zpl::{
    Attr, Cred, DirEntry, ReadPiece, RenameFlags, SetAttr, TimeSet, XattrSetFlags, Zpl, ZplError,
    R_OK, W_OK,
};

mod ctl;

use crate::convert::{errno, file_attr, kind, live_attr, time_set};
use crate::cred::with_cred;
use crate::feed::PageFeed;
use crate::mount::{EndGuard, KernelFeatures};
use crate::nodes::{Given, NodeMap};
use crate::refs::Refs;
use crate::snapdir::SnapState;
use crate::{ATTR_TTL, COPY_CHUNK_MAX_BYTES};

/// readdirplus reads this many entries from the layer at a time (each
/// needs a `getattr`, which must not run inside the layer's iteration).
const READDIRPLUS_BATCH: usize = 128;
/// A set-group-ID bit in a new mode or a chmod: keeping it depends on
/// group membership, so the caller's groups are loaded first.
const S_ISGID: u32 = 0o2000;

/// What the file system does with the kernel's requests.
pub(crate) struct FsConfig {
    pub writeback_cache: bool,
    pub default_permissions: bool,
    pub keep_cache: bool,
    pub max_write: u32,
    pub max_readahead: u32,
}

/// What a mount's handle shares with its file system: the filesystem
/// served (replaced whole by a rollback, see [`Live::replace`]), the
/// kernel's references and the page-cache feed.
pub(crate) struct Live {
    pub zpl: ArcSwap<Zpl>,
    pub refs: Refs,
    /// Open file handles that may write, per inode (only such files can
    /// have dirty pages in the kernel's writeback cache), and the feed of
    /// the page cache with the rest of the records random reads fetch.
    pub pages: PageFeed,
    /// Node ids across rollbacks: stale ones, aliases (see `nodes`).
    pub nodes: NodeMap,
    /// Open file handles per object (`open`/`create` to `release`): a
    /// replaced filesystem keeps the node of a changed file someone has
    /// open, so the handle reads on (see [`Live::replace`]).
    pub opens: parking_lot::Mutex<std::collections::HashMap<u64, u32>>,
}

impl Live {
    pub(crate) fn new(zpl: Arc<Zpl>, notifier: Arc<OnceLock<Notifier>>) -> std::io::Result<Live> {
        Ok(Live {
            zpl: ArcSwap::new(zpl),
            refs: Refs::new(),
            pages: PageFeed::new(crate::feed::to_kernel(notifier))?,
            nodes: NodeMap::default(),
            opens: Default::default(),
        })
    }

    /// Drops what the kernel caches of every node it holds: attributes and
    /// pages (`inval_inode`; dirty pages are written back first, to
    /// whichever filesystem is served then) and, for directories, the
    /// names `zpl` had in them (`expire_entry`).
    fn invalidate(&self, zpl: &Zpl, notifier: &Notifier, root: u64) {
        let mut held: Vec<u64> = self.refs.held().into_iter().map(|(ino, _)| ino).collect();
        if !held.contains(&root) {
            // The kernel holds the root without a lookup.
            held.push(root);
        }
        for ino in held {
            let node = if ino == root {
                INodeNo::ROOT
            } else {
                INodeNo(self.nodes.current(ino))
            };
            let mut names = Vec::new();
            let _ = zpl.readdir_quiet(ino, 2, |e| {
                names.push(e.name);
                true
            });
            // Expired, not dropped: a dropped entry takes the mounts of
            // child datasets on it away with it.
            for name in names {
                let _ = notifier.expire_entry(node, OsStr::from_bytes(&name));
            }
            let _ = notifier.inval_inode(node, 0, 0);
        }
    }

    /// Serves `new` in place of the filesystem served now (`zfs rollback`
    /// of a mounted dataset): the kernel's references move to the new
    /// filesystem where it has the same file (number and generation), the
    /// others turn stale, and everything the kernel caches of the old one
    /// is dropped. The caller suspended the old filesystem and wrote the
    /// kernel's dirty pages back before replacing the dataset (see
    /// [`Live::quiesce`]).
    pub(crate) fn replace(&self, new: Arc<Zpl>, notifier: &Arc<OnceLock<Notifier>>) {
        let old = self.zpl.swap(new.clone());
        let root = new.root_ino();
        let mut stale = Vec::new();
        for (ino, n) in self.refs.held() {
            // With the writeback cache the kernel keeps its own size and
            // times of a regular file over whatever the server answers
            // (`fuse_get_cache_mask`), even after an invalidation: a file
            // whose size or times differ gets a new node, so the kernel
            // makes a fresh inode for it, unless someone has it open (the
            // handle reads on, the kernel's size and times stay until the
            // inode goes); an unchanged one carries on.
            let open = self.opens.lock().get(&ino).copied().unwrap_or(0) > 0;
            let same = match (old.getattr(ino), new.getattr(ino)) {
                (Ok(a), Ok(b)) => {
                    a.gen == b.gen
                        && a.kind == b.kind
                        && (a.kind != tarn_zpl::FileType::Regular
                            || open
                            || (a.size == b.size && a.mtime == b.mtime && a.ctime == b.ctime))
                }
                _ => ino == root,
            };
            if same && (0..n).all(|_| new.open(ino).is_ok()) {
                continue;
            }
            stale.push((ino, n));
        }
        let stale_nodes: Vec<u64> = stale
            .iter()
            .map(|&(ino, _)| self.nodes.current(ino))
            .collect();
        for &(ino, _) in &stale {
            self.refs.forget_all(ino);
        }
        self.nodes.replace(&stale);
        // A store of the old filesystem's bytes, queued or under way, must
        // not land after the invalidation below.
        let (done, wait) = mpsc::channel();
        self.pages.barrier(move || {
            let _ = done.send(());
        });
        let _ = wait.recv();
        if let Some(n) = notifier.get() {
            for node in &stale_nodes {
                let _ = n.inval_inode(INodeNo(*node), 0, 0);
            }
            self.invalidate(&old, n, root);
            self.invalidate(&new, n, root);
        }
    }

    /// Before a rollback: the kernel's dirty pages go to the filesystem
    /// served now, which is then suspended (changes fail with ESTALE)
    /// and its caches dropped, so nothing written before the rollback can
    /// reach the replaced dataset.
    pub(crate) fn quiesce(&self, notifier: &Arc<OnceLock<Notifier>>) {
        let zpl = self.zpl.load_full();
        zpl.suspend();
        if let Some(n) = notifier.get() {
            self.invalidate(&zpl, n, zpl.root_ino());
        }
    }
}

pub(crate) struct TarnFs {
    live: Arc<Live>,
    root: u64,
    cfg: FsConfig,
    features: Arc<Mutex<KernelFeatures>>,
    /// The session's notification channel (set once the session exists).
    notifier: Arc<OnceLock<Notifier>>,
    /// SEEK_DATA/SEEK_HOLE on files with possible dirty pages are answered
    /// by the seek thread (see [`TarnFs::lseek`]).
    seek_jobs: mpsc::Sender<SeekJob>,
    /// `.zfs` and the snapshots opened through it (see `snapdir`).
    snaps: Arc<SnapState>,
    /// Dropped with the file system when the session ends: the mount
    /// handle waits for that.
    _ended: EndGuard,
}

type SeekJob = Box<dyn FnOnce() + Send>;

/// Pieces a read reply is sent in as they are. The reply is one `writev`
/// of the header and the pieces (`IOV_MAX` is 1024); a read of more (a
/// 1 MiB read of 512-byte records) is copied into one buffer first.
const READ_REPLY_PIECES_MAX: usize = 256;

/// What the holes in a read reply point at.
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

/// Runs one handler; a panic is logged and answered with EIO by the
/// dropped reply.
pub(crate) fn guard(op: &'static str, f: impl FnOnce()) {
    if let Err(p) = catch_unwind(AssertUnwindSafe(f)) {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| String::from("(no message)"));
        tracing::error!(op, panic = %msg, "FUSE request handler panicked; answered EIO");
    }
}

fn reply_attr(reply: ReplyAttr, r: Result<Attr, Errno>) {
    match r {
        Ok(a) => reply.attr(&ATTR_TTL, &file_attr(&a, a.ino)),
        Err(e) => reply.error(e),
    }
}

fn zerr(e: ZplError) -> Errno {
    errno(&e)
}

fn name_bytes(name: &OsStr) -> &[u8] {
    name.as_bytes()
}

impl TarnFs {
    pub(crate) fn new(
        cfg: FsConfig,
        features: Arc<Mutex<KernelFeatures>>,
        live: Arc<Live>,
        notifier: Arc<OnceLock<Notifier>>,
        snaps: Arc<SnapState>,
        ended: EndGuard,
    ) -> std::io::Result<TarnFs> {
        let zpl = live.zpl.load_full();
        let (seek_jobs, jobs) = mpsc::channel::<SeekJob>();
        // Ends when the file system (the only sender) is dropped.
        std::thread::Builder::new()
            .name(String::from("tarn-fuse-seek"))
            .spawn(move || {
                for job in jobs {
                    guard("lseek", job);
                }
            })?;
        Ok(TarnFs {
            root: zpl.root_ino(),
            live,
            cfg,
            features,
            notifier,
            seek_jobs,
            snaps,
            _ended: ended,
        })
    }

    fn may_have_dirty_pages(&self, ino: u64) -> bool {
        self.cfg.writeback_cache && self.live.pages.has_writers(ino)
    }

    /// The filesystem served now.
    fn zpl(&self) -> arc_swap::Guard<Arc<Zpl>> {
        self.live.zpl.load()
    }

    /// The layer's inode number of a FUSE node id.
    fn ino(&self, node: INodeNo) -> u64 {
        if node == INodeNo::ROOT {
            self.root
        } else {
            self.live.nodes.ino(node.0)
        }
    }

    /// The FUSE node id of an inode (see `nodes`).
    fn node(&self, ino: u64) -> u64 {
        if ino == self.root {
            INodeNo::ROOT.0
        } else {
            self.live.nodes.node(ino)
        }
    }

    /// The kernel gives back `n` references on head node `node`.
    fn give_back(&self, node: INodeNo, n: u64) -> Given {
        if node == INodeNo::ROOT {
            Given::Live(self.root)
        } else {
            self.live.nodes.give_back(node.0, n)
        }
    }

    /// Drops `n` references of the kernel's on `ino`; once it holds none,
    /// the node id it knew the file by may go (`NodeMap::forgotten`).
    fn drop_refs(&self, ino: u64, n: u64) -> tarn_zpl::Result<()> {
        let r = self.live.refs.drop_n(&self.zpl(), ino, n);
        let refs = &self.live.refs;
        self.live.nodes.forgotten(ino, || refs.count(ino));
        r
    }

    /// Answers with an entry, taking the reference the kernel now holds.
    fn reply_entry(&self, reply: ReplyEntry, r: Result<Attr, Errno>) {
        self.answer_entry(reply, r, false);
    }

    /// [`TarnFs::reply_entry`] for an inode just made: the page-cache feed
    /// learns of it first (see `feed`).
    fn reply_new_entry(&self, reply: ReplyEntry, r: Result<Attr, Errno>) {
        self.answer_entry(reply, r, true);
    }

    fn answer_entry(&self, reply: ReplyEntry, r: Result<Attr, Errno>, new: bool) {
        let r = r.and_then(|a| {
            self.live
                .refs
                .take(&self.zpl(), a.ino)
                .map(|()| a)
                .map_err(zerr)
        });
        match r {
            Ok(a) => {
                let (ino, node) = (a.ino, self.node(a.ino));
                // The kernel insists on generation 0 for the root.
                let gen = if node == INodeNo::ROOT.0 { 0 } else { a.gen };
                let answer = move || reply.entry(&ATTR_TTL, &live_attr(&a, node), Generation(gen));
                if new {
                    self.live.pages.new_inode(ino, false, answer);
                } else {
                    answer();
                }
            }
            Err(e) => reply.error(e),
        }
    }

    fn open_flags(&self) -> FopenFlags {
        if self.cfg.keep_cache {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        }
    }

    /// Without `default_permissions` the daemon checks the access mode of
    /// an open itself.
    fn check_open(&self, req: &Request, ino: u64, flags: i32) -> Result<(), Errno> {
        // A filesystem made read-only while busy stays read-write in the
        // kernel: refuse opens for writing here, so that the writeback
        // cache never accepts writes that could not land.
        if access_mask(flags) & W_OK != 0 && self.zpl().settings().readonly {
            return Err(Errno::EROFS);
        }
        if self.cfg.default_permissions {
            return Ok(());
        }
        let mask = access_mask(flags);
        with_cred(req, false, |c| self.zpl().access(ino, mask, c))
    }

    fn do_setattr(
        &self,
        req: &Request,
        ino: u64,
        sa: SetAttr,
        kernel_times: bool,
    ) -> Result<Attr, Errno> {
        // With default_permissions the kernel has applied setattr's POSIX
        // rules (owner, group membership, set-group-ID clearing) with the
        // caller's full credentials, and it also sends setattr on its own
        // account — the mtime/ctime of its writeback cache, on behalf of
        // whoever closes a file they may write but do not own. The layer
        // therefore applies the change as root. Without it, only such
        // kernel time updates (times only, with ctime) by a caller that
        // may write the file are applied as root.
        let times_only =
            sa.mode.is_none() && sa.uid.is_none() && sa.gid.is_none() && sa.size.is_none();
        // The kernel's killpriv (v2) leaves clearing set-uid/set-gid on
        // truncate to the daemon, and fuser does not pass its flag on:
        // a non-root caller's size change clears them.
        let mut sa = sa;
        sa.kill_suidgid = sa.size.is_some() && req.uid() != 0;
        if self.cfg.default_permissions
            || kernel_times
                && times_only
                && with_cred(req, false, |c| self.zpl().access(ino, W_OK, c)).is_ok()
        {
            return self.zpl().setattr(ino, &sa, &Cred::root()).map_err(zerr);
        }
        let eager = sa.mode.is_some_and(|m| m & S_ISGID != 0);
        with_cred(req, eager, |c| self.zpl().setattr(ino, &sa, c))
    }

    fn do_create(
        &self,
        req: &Request,
        dir: u64,
        name: &[u8],
        mode: u32,
        flags: i32,
    ) -> Result<Attr, Errno> {
        let eager = mode & S_ISGID != 0;
        match with_cred(req, eager, |c| self.zpl().create(dir, name, mode, c, true)) {
            Err(e) if e == Errno::EEXIST && flags & libc::O_EXCL == 0 => {}
            r => return r,
        }
        // The name appeared since the kernel looked: open it like open(2)
        // without O_CREAT would, permission checks and O_TRUNC included.
        let a = with_cred(req, false, |c| self.zpl().lookup(dir, name, c))?;
        if a.kind == tarn_zpl::FileType::Directory {
            return Err(Errno::EISDIR);
        }
        let mask = access_mask(flags);
        with_cred(req, false, |c| self.zpl().access(a.ino, mask, c))?;
        if flags & libc::O_TRUNC != 0 && a.size > 0 {
            let sa = SetAttr {
                size: Some(0),
                via_handle: true,
                ..SetAttr::default()
            };
            return with_cred(req, false, |c| self.zpl().setattr(a.ino, &sa, c));
        }
        Ok(a)
    }

    /// Replies with the blocks' own bytes (`Zpl::read_pieces`), one
    /// `writev`: the daemon never copies what it reads. The rest of the
    /// records the read fetched from disk then goes to the kernel's page
    /// cache (`feed`).
    fn do_read(&self, ino: u64, offset: u64, size: u32, reply: ReplyData) {
        let ticket = self.live.pages.ticket(ino);
        let mut rest = Vec::new();
        let pieces = match self.zpl().read_pieces_with_rest(
            ino,
            offset,
            size as usize,
            ticket.is_some().then_some(&mut rest),
        ) {
            Ok(p) => p,
            Err(e) => return reply.error(zerr(e)),
        };
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(pieces.len());
        for p in &pieces {
            match p {
                ReadPiece::Bytes(b, r) => slices.push(IoSlice::new(&b[r.clone()])),
                ReadPiece::Zeros(n) => {
                    let mut left = *n;
                    while left > 0 {
                        let k = left.min(ZEROS.len());
                        slices.push(IoSlice::new(&ZEROS[..k]));
                        left -= k;
                    }
                }
            }
        }
        if slices.len() <= READ_REPLY_PIECES_MAX {
            reply.data_vectored(&slices);
        } else {
            let mut buf = vec![0u8; pieces.iter().map(ReadPiece::len).sum()];
            ReadPiece::copy_all(&pieces, &mut buf);
            reply.data(&buf);
        }
        if let Some(ticket) = ticket {
            self.live
                .pages
                .feed(INodeNo(self.node(ino)), ino, ticket, rest);
        }
    }

    fn do_write(
        &self,
        req: &Request,
        ino: u64,
        offset: u64,
        data: &[u8],
        flags: i32,
    ) -> Result<u32, Errno> {
        // Without the writeback cache the kernel's idea of the end of the
        // file may be stale: an O_APPEND write goes where the file ends now.
        let offset = if !self.cfg.writeback_cache && flags & libc::O_APPEND != 0 {
            self.zpl().getattr(ino).map_err(zerr)?.size
        } else {
            offset
        };
        let c = crate::cred::cred(req, false);
        let n = self.zpl().write(ino, offset, data, &c).map_err(zerr)?;
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }

    /// Fills a readdirplus reply; `true` when the directory's end was
    /// reached with room left.
    fn do_readdirplus(
        &self,
        dir: u64,
        offset: u64,
        reply: &mut ReplyDirectoryPlus,
    ) -> Result<bool, Errno> {
        let mut cookie = offset;
        loop {
            let mut batch: Vec<DirEntry> = Vec::with_capacity(READDIRPLUS_BATCH);
            self.zpl()
                .readdir(dir, cookie, |e| {
                    batch.push(e);
                    batch.len() < READDIRPLUS_BATCH
                })
                .map_err(zerr)?;
            let ended = batch.len() < READDIRPLUS_BATCH;
            for e in batch {
                if !self.add_plus(reply, &e)? {
                    return Ok(false);
                }
                cookie = e.next;
            }
            if ended {
                return Ok(true);
            }
        }
    }

    /// Why a new name cannot go under `parent`: `.zfs` is taken in the
    /// root (EEXIST); under `.zfs` or in a snapshot nothing can (EROFS).
    fn no_entry_here(&self, parent: INodeNo) -> Errno {
        if self.is_head(parent) {
            Errno::EEXIST
        } else {
            Errno::EROFS
        }
    }

    /// Adds one readdirplus entry; `false` when the reply is full.
    fn add_plus(&self, reply: &mut ReplyDirectoryPlus, e: &DirEntry) -> Result<bool, Errno> {
        let name = OsStr::from_bytes(&e.name);
        if e.name == b"." || e.name == b".." {
            // The kernel links neither (and takes no reference): only the
            // dirent part matters.
            let a = match self.zpl().getattr(e.ino) {
                Ok(a) => a,
                Err(ZplError::NotFound) => return Ok(true),
                Err(err) => return Err(zerr(err)),
            };
            let full = reply.add(
                INodeNo(e.ino),
                e.next,
                name,
                &ATTR_TTL,
                &file_attr(&a, e.ino),
                Generation(0),
            );
            return Ok(!full);
        }
        match self.live.refs.take(&self.zpl(), e.ino) {
            Ok(()) => {}
            // Removed since the directory was read: skip it.
            Err(ZplError::NotFound) => return Ok(true),
            Err(err) => return Err(zerr(err)),
        }
        let a = match self.zpl().getattr(e.ino) {
            Ok(a) => a,
            Err(err) => {
                let _ = self.live.refs.drop_n(&self.zpl(), e.ino, 1);
                return if err == ZplError::NotFound {
                    Ok(true)
                } else {
                    Err(zerr(err))
                };
            }
        };
        let node = self.node(a.ino);
        let full = reply.add(
            INodeNo(node),
            e.next,
            name,
            &ATTR_TTL,
            &live_attr(&a, node),
            Generation(a.gen),
        );
        if full {
            let _ = self.live.refs.drop_n(&self.zpl(), e.ino, 1);
        }
        Ok(!full)
    }

    fn do_getxattr(&self, req: &Request, ino: u64, name: &OsStr, size: u32, reply: ReplyXattr) {
        let r = with_cred(req, false, |c| {
            self.zpl().getxattr(ino, name_bytes(name), c)
        });
        reply_xattr(reply, r, size, |v| v);
    }

    fn do_copy(
        &self,
        req: &Request,
        src: u64,
        mut off_in: u64,
        dst: u64,
        mut off_out: u64,
        len: u64,
    ) -> Result<u32, Errno> {
        let c = crate::cred::cred(req, false);
        let total = len.min(COPY_CHUNK_MAX_BYTES);
        let chunk = u64::from(self.cfg.max_write.max(4096));
        let mut buf = vec![0u8; total.min(chunk) as usize];
        let mut done = 0u64;
        while done < total {
            let want = (total - done).min(chunk) as usize;
            let n = self
                .zpl()
                .read(src, off_in, &mut buf[..want])
                .map_err(zerr)?;
            if n == 0 {
                break;
            }
            self.zpl()
                .write(dst, off_out, &buf[..n], &c)
                .map_err(zerr)?;
            done += n as u64;
            off_in += n as u64;
            off_out += n as u64;
            if n < want {
                break;
            }
        }
        Ok(done as u32)
    }
}

/// The reply to getxattr/listxattr: the size for a size-0 probe, ERANGE
/// when the caller's buffer is too small, else the bytes.
/// A `listxattr` answer: the names, each ended by a NUL.
fn xattr_list(names: Vec<Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    for n in names {
        out.extend_from_slice(&n);
        out.push(0);
    }
    out
}

fn reply_xattr<T>(
    reply: ReplyXattr,
    r: Result<T, Errno>,
    size: u32,
    bytes: impl FnOnce(T) -> Vec<u8>,
) {
    match r {
        Err(e) => reply.error(e),
        Ok(v) => {
            let v = bytes(v);
            if size == 0 {
                reply.size(u32::try_from(v.len()).unwrap_or(u32::MAX));
            } else if v.len() > size as usize {
                reply.error(Errno::ERANGE);
            } else {
                reply.data(&v);
            }
        }
    }
}

/// The `access` bits an open with `flags` needs.
fn access_mask(flags: i32) -> u32 {
    let mask = match OpenFlags(flags).acc_mode() {
        OpenAccMode::O_RDONLY => R_OK,
        OpenAccMode::O_WRONLY => W_OK,
        OpenAccMode::O_RDWR => R_OK | W_OK,
    };
    if flags & libc::O_TRUNC != 0 {
        mask | W_OK
    } else {
        mask
    }
}

/// SEEK_DATA / SEEK_HOLE from the layer (the kernel answers SEEK_SET,
/// SEEK_CUR and SEEK_END itself).
fn seek(zpl: &Zpl, ino: u64, offset: i64, whence: i32) -> Result<i64, Errno> {
    let r = match (u64::try_from(offset), whence) {
        (Err(_), libc::SEEK_DATA | libc::SEEK_HOLE) => Err(Errno::ENXIO),
        (Ok(off), libc::SEEK_DATA) => zpl.lseek_data(ino, off).map_err(zerr),
        (Ok(off), libc::SEEK_HOLE) => zpl.lseek_hole(ino, off).map_err(zerr),
        _ => Err(Errno::EINVAL),
    };
    r.and_then(|o| i64::try_from(o).map_err(|_| Errno::EOVERFLOW))
}

fn reply_seek(reply: ReplyLseek, r: Result<i64, Errno>) {
    match r {
        Ok(o) => reply.offset(o),
        Err(e) => reply.error(e),
    }
}

fn negotiate(cfg: &FsConfig, config: &mut KernelConfig) -> KernelFeatures {
    let mut want = InitFlags::FUSE_ASYNC_READ
        | InitFlags::FUSE_BIG_WRITES
        | InitFlags::FUSE_PARALLEL_DIROPS
        | InitFlags::FUSE_AUTO_INVAL_DATA
        | InitFlags::FUSE_DO_READDIRPLUS
        | InitFlags::FUSE_READDIRPLUS_AUTO
        | InitFlags::FUSE_CACHE_SYMLINKS
        | InitFlags::FUSE_MAX_PAGES
        // The daemon clears set-uid/set-gid and security.capability on
        // write, truncate and chown itself (tarn-zpl does), so the kernel
        // may mark inodes S_NOSEC and skip asking for security.capability
        // (a GETXATTR round trip) on every write(2).
        | InitFlags::FUSE_HANDLE_KILLPRIV_V2;
    if cfg.writeback_cache {
        want |= InitFlags::FUSE_WRITEBACK_CACHE;
    }
    let offered = config.capabilities();
    let granted = want & offered;
    if let Err(missing) = config.add_capabilities(granted) {
        tracing::warn!(?missing, "kernel refused FUSE capabilities it offered");
    }
    let max_write = match config.set_max_write(cfg.max_write) {
        Ok(_) => cfg.max_write,
        Err(nearest) => {
            let _ = config.set_max_write(nearest);
            nearest
        }
    };
    // The kernel offers at most its current readahead; the mount raises
    // the backing device's window after the handshake.
    let _ = config
        .set_max_readahead(cfg.max_readahead)
        .or_else(|max| config.set_max_readahead(max));
    let _ = config.set_max_background(64);
    let _ = config.set_congestion_threshold(48);
    KernelFeatures {
        writeback_cache: granted.contains(InitFlags::FUSE_WRITEBACK_CACHE),
        parallel_dirops: granted.contains(InitFlags::FUSE_PARALLEL_DIROPS),
        async_read: granted.contains(InitFlags::FUSE_ASYNC_READ),
        readdirplus: granted.contains(InitFlags::FUSE_DO_READDIRPLUS),
        max_pages: granted.contains(InitFlags::FUSE_MAX_PAGES),
        max_write,
        read_ahead_kb: 0,
    }
}

#[allow(clippy::too_many_arguments)]
impl Filesystem for TarnFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let f = negotiate(&self.cfg, config);
        *self.features.lock() = f;
        Ok(())
    }

    fn destroy(&mut self) {
        self.live.refs.drop_all(&self.zpl());
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        guard("lookup", || {
            let Some(reply) = self.ctl_lookup(req, parent, name, reply) else {
                return;
            };
            let dir = self.ino(parent);
            let r = with_cred(req, false, |c| self.zpl().lookup(dir, name_bytes(name), c));
            self.reply_entry(reply, r);
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        guard("forget", || {
            if !self.is_head(ino) {
                return;
            }
            let Given::Live(ino) = self.give_back(ino, nlookup) else {
                return;
            };
            if let Err(e) = self.drop_refs(ino, nlookup) {
                tracing::warn!(ino, error = %e, "forget failed");
            }
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        guard("getattr", || {
            let Some(reply) = self.ctl_getattr(ino, reply) else {
                return;
            };
            let r = self.zpl().getattr(self.ino(ino)).map_err(zerr);
            reply_attr(reply, r);
        });
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        guard("setattr", || {
            if !self.is_head(ino) {
                return reply.error(Errno::EROFS);
            }
            let sa = SetAttr {
                mode: mode.map(|m| m & 0o7777),
                uid,
                gid,
                size,
                atime: time_set(atime),
                mtime: time_set(mtime),
                via_handle: fh.is_some(),
                kill_suidgid: false,
            };
            // With the writeback cache the kernel keeps mtime itself: it
            // flushes it (mtime and ctime, no atime) and turns a
            // UTIME_NOW mtime into its current time (atime stays NOW).
            // Only utimensat(2) with an explicit atime is surely a user's.
            let kernel_times = self.cfg.writeback_cache
                && ctime.is_some()
                && !matches!(atime, Some(TimeOrNow::SpecificTime(_)))
                && matches!(sa.mtime, TimeSet::Time(_));
            let resized = sa.size.is_some();
            let r = self.do_setattr(req, self.ino(ino), sa, kernel_times);
            if resized {
                // Bytes fed to the page cache before the change must be in
                // before the kernel truncates it (see `feed`).
                let ino = self.ino(ino);
                self.live.pages.resized(ino, move || reply_attr(reply, r));
            } else {
                reply_attr(reply, r);
            }
        });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        guard("readlink", || {
            let Some(reply) = self.ctl_readlink(ino, reply) else {
                return;
            };
            match self.zpl().readlink(self.ino(ino)) {
                Ok(t) => reply.data(&t),
                Err(e) => reply.error(zerr(e)),
            }
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        guard("mknod", || {
            if !self.is_head(parent) || self.reserved_name(parent, name) {
                return reply.error(self.no_entry_here(parent));
            }
            let dir = self.ino(parent);
            let mode = mode & !(umask & 0o777);
            let r = with_cred(req, mode & S_ISGID != 0, |c| {
                self.zpl()
                    .mknod(dir, name_bytes(name), mode, u64::from(rdev), c)
            });
            self.reply_new_entry(reply, r);
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        guard("mkdir", || {
            let Some(reply) = self.ctl_mkdir(req, parent, name, reply) else {
                return;
            };
            let dir = self.ino(parent);
            let mode = mode & !(umask & 0o777) & 0o7777;
            let r = with_cred(req, false, |c| {
                self.zpl().mkdir(dir, name_bytes(name), mode, c)
            });
            self.reply_new_entry(reply, r);
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guard("unlink", || {
            if !self.is_head(parent) {
                return reply.error(Errno::EROFS);
            }
            if self.reserved_name(parent, name) {
                return reply.error(Errno::EISDIR);
            }
            let dir = self.ino(parent);
            match with_cred(req, false, |c| self.zpl().unlink(dir, name_bytes(name), c)) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guard("rmdir", || {
            let Some(reply) = self.ctl_rmdir(req, parent, name, reply) else {
                return;
            };
            let dir = self.ino(parent);
            match with_cred(req, false, |c| self.zpl().rmdir(dir, name_bytes(name), c)) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        guard("symlink", || {
            if !self.is_head(parent) || self.reserved_name(parent, link_name) {
                return reply.error(self.no_entry_here(parent));
            }
            let dir = self.ino(parent);
            let target = target.as_os_str().as_bytes();
            let r = with_cred(req, false, |c| {
                self.zpl().symlink(dir, name_bytes(link_name), target, c)
            });
            self.reply_new_entry(reply, r);
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: FuseRename,
        reply: ReplyEmpty,
    ) {
        guard("rename", || {
            let Some(reply) = self.ctl_rename(req, parent, name, newparent, newname, reply) else {
                return;
            };
            let r = RenameFlags::from_bits(flags.bits())
                .map_err(zerr)
                .and_then(|f| {
                    let (od, nd) = (self.ino(parent), self.ino(newparent));
                    with_cred(req, false, |c| {
                        self.zpl()
                            .rename(od, name_bytes(name), nd, name_bytes(newname), f, c)
                    })
                });
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        guard("link", || {
            if !self.is_head(ino) {
                return reply.error(Errno::EXDEV);
            }
            if !self.is_head(newparent) || self.reserved_name(newparent, newname) {
                return reply.error(self.no_entry_here(newparent));
            }
            let (ino, dir) = (self.ino(ino), self.ino(newparent));
            let r = with_cred(req, false, |c| {
                self.zpl().link(ino, dir, name_bytes(newname), c)
            });
            self.reply_entry(reply, r);
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        guard("open", || {
            let Some(reply) = self.ctl_open(ino, flags.0, reply) else {
                return;
            };
            let ino = self.ino(ino);
            let r = self
                .check_open(req, ino, flags.0)
                .and_then(|()| self.live.refs.take(&self.zpl(), ino).map_err(zerr));
            match r {
                Ok(()) => {
                    *self.live.opens.lock().entry(ino).or_default() += 1;
                    let open_flags = self.open_flags();
                    self.live.pages.opened(ino, flags.0, move || {
                        reply.opened(FileHandle(0), open_flags)
                    });
                }
                Err(e) => reply.error(e),
            }
        });
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        guard("read", || {
            let Some(reply) = self.ctl_read(ino, offset, size, reply) else {
                return;
            };
            self.do_read(self.ino(ino), offset, size, reply)
        });
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        guard("write", || {
            if !self.is_head(ino) {
                return reply.error(Errno::EROFS);
            }
            match self.do_write(req, self.ino(ino), offset, data, flags.0) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(e),
            }
        });
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing is buffered in the daemon: a written byte is in the
        // open txg already (durability is fsync's business), and locks are
        // the kernel's. ENOSYS makes the kernel stop sending FLUSH (it
        // still writes dirty pages back on close), which saves a round
        // trip on every close.
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        guard("release", || {
            if !self.is_head(ino) {
                return reply.ok();
            }
            let given = self.give_back(ino, 1);
            let obj = match given {
                Given::Stale(o) | Given::Live(o) => o,
            };
            {
                let mut opens = self.live.opens.lock();
                if let Some(n) = opens.get_mut(&obj) {
                    *n -= 1;
                    if *n == 0 {
                        opens.remove(&obj);
                    }
                }
            }
            match given {
                Given::Stale(ino) => {
                    self.live.pages.released(ino, flags.0);
                    reply.ok()
                }
                Given::Live(ino) => {
                    self.live.pages.released(ino, flags.0);
                    match self.drop_refs(ino, 1) {
                        Ok(()) => reply.ok(),
                        Err(e) => reply.error(zerr(e)),
                    }
                }
            }
        });
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        guard("fsync", || {
            if !self.is_head(ino) {
                return reply.ok();
            }
            match self.zpl().fsync(self.ino(ino)) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(zerr(e)),
            }
        });
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        guard("opendir", || {
            let Some(reply) = self.ctl_opendir(req, ino, reply) else {
                return;
            };
            let ino = self.ino(ino);
            let r = if self.cfg.default_permissions {
                self.zpl().getattr(ino).map(|_| ()).map_err(zerr)
            } else {
                with_cred(req, false, |c| self.zpl().access(ino, R_OK, c))
            };
            match r {
                Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
                Err(e) => reply.error(e),
            }
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        guard("readdir", || {
            let Some(mut reply) = self.ctl_readdir(ino, offset, reply) else {
                return;
            };
            let mut full = false;
            let r = self.zpl().readdir(self.ino(ino), offset, |e| {
                full = reply.add(
                    INodeNo(e.ino),
                    e.next,
                    kind(e.kind),
                    OsStr::from_bytes(&e.name),
                );
                !full
            });
            if r.is_ok() && !full && ino == INodeNo::ROOT {
                self.add_ctl_entry(&mut reply);
            }
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(zerr(e)),
            }
        });
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        guard("readdirplus", || {
            let Some(mut reply) = self.ctl_readdirplus(ino, offset, reply) else {
                return;
            };
            match self.do_readdirplus(self.ino(ino), offset, &mut reply) {
                Ok(true) if ino == INodeNo::ROOT => {
                    self.add_ctl_plus(&mut reply);
                    reply.ok()
                }
                Ok(_) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        guard("fsyncdir", || {
            if !self.is_head(ino) {
                return reply.ok();
            }
            match self.zpl().fsync(self.ino(ino)) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(zerr(e)),
            }
        });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        guard("statfs", || {
            let s = self.zpl().statfs();
            reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            );
        });
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        guard("setxattr", || {
            let how = match flags {
                0 => Ok(XattrSetFlags::Any),
                libc::XATTR_CREATE => Ok(XattrSetFlags::Create),
                libc::XATTR_REPLACE => Ok(XattrSetFlags::Replace),
                _ => Err(Errno::EINVAL),
            };
            if !self.is_head(ino) {
                return reply.error(Errno::EROFS);
            }
            let ino = self.ino(ino);
            let r = how.and_then(|how| {
                if position != 0 {
                    return Err(Errno::EINVAL);
                }
                with_cred(req, false, |c| {
                    self.zpl().setxattr(ino, name_bytes(name), value, how, c)
                })
            });
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        guard("getxattr", || {
            let Some(reply) = self.ctl_getxattr(req, ino, name, size, reply) else {
                return;
            };
            self.do_getxattr(req, self.ino(ino), name, size, reply)
        });
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        guard("listxattr", || {
            let Some(reply) = self.ctl_listxattr(req, ino, size, reply) else {
                return;
            };
            let ino = self.ino(ino);
            let r = with_cred(req, false, |c| self.zpl().listxattr(ino, c));
            reply_xattr(reply, r, size, xattr_list);
        });
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guard("removexattr", || {
            if !self.is_head(ino) {
                return reply.error(Errno::EROFS);
            }
            let ino = self.ino(ino);
            match with_cred(req, false, |c| {
                self.zpl().removexattr(ino, name_bytes(name), c)
            }) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        guard("access", || {
            let mask = (mask.bits() & 7) as u32;
            let Some(reply) = self.ctl_access(req, ino, mask, reply) else {
                return;
            };
            let ino = self.ino(ino);
            match with_cred(req, false, |c| self.zpl().access(ino, mask, c)) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        guard("create", || {
            if !self.is_head(parent) || self.reserved_name(parent, name) {
                return reply.error(self.no_entry_here(parent));
            }
            let dir = self.ino(parent);
            let mode = mode & !(umask & 0o777) & 0o7777;
            let r = self.do_create(req, dir, name_bytes(name), mode, flags);
            // Two references: the entry and the open file.
            let r = r.and_then(|a| {
                self.live.refs.take(&self.zpl(), a.ino).map_err(zerr)?;
                if let Err(e) = self.live.refs.take(&self.zpl(), a.ino) {
                    let _ = self.live.refs.drop_n(&self.zpl(), a.ino, 1);
                    return Err(zerr(e));
                }
                Ok(a)
            });
            match r {
                Ok(a) => {
                    *self.live.opens.lock().entry(a.ino).or_default() += 1;
                    let (node, open_flags) = (self.node(a.ino), self.open_flags());
                    let writes = OpenFlags(flags).acc_mode() != OpenAccMode::O_RDONLY;
                    self.live.pages.new_inode(a.ino, writes, move || {
                        reply.created(
                            &ATTR_TTL,
                            &live_attr(&a, node),
                            Generation(a.gen),
                            FileHandle(0),
                            open_flags,
                        )
                    });
                }
                Err(e) => reply.error(e),
            }
        });
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        reply.error(Errno::ENOTTY);
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        guard("fallocate", || {
            if !self.is_head(ino) {
                return reply.error(Errno::EROFS);
            }
            let c = crate::cred::cred(req, false);
            match self
                .zpl()
                .fallocate(self.ino(ino), mode as u32, offset, length, &c)
            {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(zerr(e)),
            }
        });
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        guard("lseek", || {
            let Some(reply) = self.ctl_lseek(ino, offset, whence, reply) else {
                return;
            };
            let ino = self.ino(ino);
            if !self.may_have_dirty_pages(ino) {
                return reply_seek(reply, seek(&self.zpl(), ino, offset, whence));
            }
            // The kernel may hold written pages the layer has not seen.
            // Invalidating the inode's page cache makes the kernel write
            // them back first — FUSE writes this session must serve — so
            // the answer is computed on the seek thread, leaving this
            // worker free (a worker waiting there could starve them).
            let zpl = self.live.zpl.load_full();
            let notifier = self.notifier.get().cloned();
            let node = INodeNo(self.node(ino));
            let job: SeekJob = Box::new(move || {
                if let Some(n) = notifier {
                    if let Err(e) = n.inval_inode(node, 0, 0) {
                        tracing::warn!(ino, error = %e, "flushing pages before a seek failed");
                    }
                }
                reply_seek(reply, seek(&zpl, ino, offset, whence));
            });
            if let Err(mpsc::SendError(job)) = self.seek_jobs.send(job) {
                job();
            }
        });
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        guard("copy_file_range", || {
            if !flags.is_empty() {
                return reply.error(Errno::EINVAL);
            }
            if !self.is_head(ino_out) {
                return reply.error(Errno::EROFS);
            }
            if !self.is_head(ino_in) {
                // From a snapshot: the kernel falls back to read and write.
                return reply.error(Errno::EXDEV);
            }
            let (src, dst) = (self.ino(ino_in), self.ino(ino_out));
            match self.do_copy(req, src, offset_in, dst, offset_out, len) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(e),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_handler_is_contained() {
        let mut after = false;
        guard("test", || panic!("boom"));
        guard("test", || after = true);
        assert!(after);
    }
}
