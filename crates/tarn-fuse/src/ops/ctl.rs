//! The FUSE side of `.zfs` (see `snapdir` for the layout and node ids):
//! each handler of `ops` first offers its request here; a request for a
//! control directory or a snapshot's node is answered here (`None`), any
//! other is handed back (`Some(reply)`) for the head's filesystem.
//!
//! Snapshot nodes take no references: a snapshot never unlinks a file,
//! so the kernel's lookups and forgets need not be mirrored, and a
//! snapshot destroyed under an open file makes its nodes ESTALE.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;

use fuser::{
    Errno, FopenFlags, Generation, INodeNo, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyXattr, Request,
};
use tarn_zpl::{Attr, W_OK};

use super::{
    access_mask, reply_xattr, seek, xattr_list, zerr, TarnFs, READ_REPLY_PIECES_MAX, ZEROS,
};
use crate::convert::{file_attr, kind};
use crate::cred::with_cred;
use crate::snapdir::{
    ctl_attr, route, snap_attr, snap_node, Route, CTL_NAME, CTL_SHARES, CTL_SNAPDIR, CTL_ZFS,
};
use crate::ATTR_TTL;

/// The cookie of `.zfs` in the root's listing: after every real entry
/// (their cookies are below 2^63 − 1, see tarn-zpl's `encode_cookie`).
pub(super) const CTL_COOKIE: u64 = i64::MAX as u64;

fn ioerr(e: io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

impl TarnFs {
    /// Whether `.zfs` exists in this mount.
    pub(super) fn has_ctl(&self) -> bool {
        self.snaps.source.is_some()
    }

    /// Whether node `n` is the head's: the others are `.zfs` and
    /// snapshots, which only read.
    pub(super) fn is_head(&self, n: INodeNo) -> bool {
        route(n.0) == Route::Head
    }

    /// A name the head's root must not take: `.zfs` is the control
    /// directory's.
    pub(super) fn reserved_name(&self, parent: INodeNo, name: &OsStr) -> bool {
        self.has_ctl() && parent == INodeNo::ROOT && name.as_bytes() == CTL_NAME
    }

    fn root_attr(&self) -> Attr {
        match self.zpl().getattr(self.root) {
            Ok(mut a) => {
                a.ino = INodeNo::ROOT.0;
                a
            }
            Err(_) => ctl_attr(INodeNo::ROOT.0, None),
        }
    }

    fn ctl_entry(&self, node: u64, reply: ReplyEntry) {
        let a = ctl_attr(node, Some(&self.root_attr()));
        reply.entry(&ATTR_TTL, &file_attr(&a, node), Generation(0));
    }

    /// The attributes of snapshot node `(id, ino)`, node id in place.
    fn snap_getattr(&self, id: u64, ino: u64) -> Result<Attr, Errno> {
        let zpl = self.snaps.zpl(id).map_err(ioerr)?;
        let a = zpl.getattr(ino).map_err(zerr)?;
        snap_attr(id, a).map_err(ioerr)
    }

    fn reply_snap_entry(&self, reply: ReplyEntry, id: u64, r: Result<Attr, Errno>) {
        match r.and_then(|a| snap_attr(id, a).map_err(ioerr)) {
            Ok(a) => reply.entry(&ATTR_TTL, &file_attr(&a, a.ino), Generation(a.gen)),
            Err(e) => reply.error(e),
        }
    }

    pub(super) fn ctl_lookup(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        reply: ReplyEntry,
    ) -> Option<ReplyEntry> {
        if self.reserved_name(parent, name) {
            self.ctl_entry(CTL_ZFS, reply);
            return None;
        }
        match route(parent.0) {
            Route::Head => Some(reply),
            Route::Ctl(CTL_ZFS) => {
                match name.as_bytes() {
                    b"snapshot" => self.ctl_entry(CTL_SNAPDIR, reply),
                    b"shares" => self.ctl_entry(CTL_SHARES, reply),
                    _ => reply.error(Errno::ENOENT),
                }
                None
            }
            Route::Ctl(CTL_SNAPDIR) => {
                let r = std::str::from_utf8(name.as_bytes())
                    .map_err(|_| Errno::ENOENT)
                    .and_then(|n| self.snaps.by_name(n).map_err(ioerr))
                    .and_then(|(id, zpl)| Ok((id, zpl.getattr(zpl.root_ino()).map_err(zerr)?)));
                match r {
                    Ok((id, a)) => self.reply_snap_entry(reply, id, Ok(a)),
                    Err(e) => reply.error(e),
                }
                None
            }
            Route::Ctl(_) => {
                reply.error(Errno::ENOENT);
                None
            }
            Route::Snap { id, ino } => {
                let r =
                    self.snaps.zpl(id).map_err(ioerr).and_then(|zpl| {
                        with_cred(req, false, |c| zpl.lookup(ino, name.as_bytes(), c))
                    });
                self.reply_snap_entry(reply, id, r);
                None
            }
        }
    }

    pub(super) fn ctl_getattr(&self, node: INodeNo, reply: ReplyAttr) -> Option<ReplyAttr> {
        match route(node.0) {
            Route::Head => return Some(reply),
            Route::Ctl(n) => {
                let a = ctl_attr(n, Some(&self.root_attr()));
                reply.attr(&ATTR_TTL, &file_attr(&a, n));
            }
            Route::Snap { id, ino } => match self.snap_getattr(id, ino) {
                Ok(a) => reply.attr(&ATTR_TTL, &file_attr(&a, a.ino)),
                Err(e) => reply.error(e),
            },
        }
        None
    }

    pub(super) fn ctl_readlink(&self, node: INodeNo, reply: ReplyData) -> Option<ReplyData> {
        match route(node.0) {
            Route::Head => return Some(reply),
            Route::Ctl(_) => reply.error(Errno::EINVAL),
            Route::Snap { id, ino } => {
                match self
                    .snaps
                    .zpl(id)
                    .map_err(ioerr)
                    .and_then(|z| z.readlink(ino).map_err(zerr))
                {
                    Ok(t) => reply.data(&t),
                    Err(e) => reply.error(e),
                }
            }
        }
        None
    }

    pub(super) fn ctl_open(
        &self,
        node: INodeNo,
        flags: i32,
        reply: ReplyOpen,
    ) -> Option<ReplyOpen> {
        match route(node.0) {
            Route::Head => return Some(reply),
            Route::Ctl(_) => reply.error(Errno::EISDIR),
            Route::Snap { id, ino } => {
                if access_mask(flags) & W_OK != 0 {
                    reply.error(Errno::EROFS);
                } else {
                    match self.snap_getattr(id, ino) {
                        // A snapshot never changes: the kernel may keep its pages.
                        Ok(_) => reply.opened(fuser::FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
                        Err(e) => reply.error(e),
                    }
                }
            }
        }
        None
    }

    pub(super) fn ctl_read(
        &self,
        node: INodeNo,
        offset: u64,
        size: u32,
        reply: ReplyData,
    ) -> Option<ReplyData> {
        let Route::Snap { id, ino } = route(node.0) else {
            if self.is_head(node) {
                return Some(reply);
            }
            reply.error(Errno::EISDIR);
            return None;
        };
        let pieces = self
            .snaps
            .zpl(id)
            .map_err(ioerr)
            .and_then(|z| z.read_pieces(ino, offset, size as usize).map_err(zerr));
        match pieces {
            Ok(pieces) if pieces.len() <= READ_REPLY_PIECES_MAX => {
                let mut slices = Vec::with_capacity(pieces.len());
                for p in &pieces {
                    match p {
                        tarn_zpl::ReadPiece::Bytes(b, r) => {
                            slices.push(std::io::IoSlice::new(&b[r.clone()]))
                        }
                        tarn_zpl::ReadPiece::Zeros(n) => {
                            let mut left = *n;
                            while left > 0 {
                                let k = left.min(ZEROS.len());
                                slices.push(std::io::IoSlice::new(&ZEROS[..k]));
                                left -= k;
                            }
                        }
                    }
                }
                reply.data_vectored(&slices);
            }
            Ok(pieces) => {
                let mut buf = vec![0u8; pieces.iter().map(tarn_zpl::ReadPiece::len).sum()];
                tarn_zpl::ReadPiece::copy_all(&pieces, &mut buf);
                reply.data(&buf);
            }
            Err(e) => reply.error(e),
        }
        None
    }

    pub(super) fn ctl_opendir(
        &self,
        req: &Request,
        node: INodeNo,
        reply: ReplyOpen,
    ) -> Option<ReplyOpen> {
        match route(node.0) {
            Route::Head => return Some(reply),
            Route::Ctl(_) => reply.opened(fuser::FileHandle(0), FopenFlags::empty()),
            Route::Snap { id, ino } => {
                let r = self.snaps.zpl(id).map_err(ioerr).and_then(|z| {
                    if self.cfg.default_permissions {
                        z.getattr(ino).map(|_| ()).map_err(zerr)
                    } else {
                        with_cred(req, false, |c| z.access(ino, tarn_zpl::R_OK, c))
                    }
                });
                match r {
                    Ok(()) => reply.opened(fuser::FileHandle(0), FopenFlags::empty()),
                    Err(e) => reply.error(e),
                }
            }
        }
        None
    }

    /// The entries of a control directory: `(name, node, next cookie)`.
    fn ctl_entries(&self, node: u64) -> Vec<(Vec<u8>, u64)> {
        let mut out = vec![(b".".to_vec(), node)];
        let parent = match node {
            CTL_ZFS => INodeNo::ROOT.0,
            _ => CTL_ZFS,
        };
        out.push((b"..".to_vec(), parent));
        match node {
            CTL_ZFS => {
                out.push((b"shares".to_vec(), CTL_SHARES));
                out.push((b"snapshot".to_vec(), CTL_SNAPDIR));
            }
            CTL_SNAPDIR => {
                if let Ok(source) = self.snaps.source() {
                    for (name, id) in source.list() {
                        // A snapshot's root is the head's root object (it
                        // is fixed for the dataset's life).
                        if let Ok(n) = snap_node(id, self.root) {
                            out.push((name.into_bytes(), n));
                        }
                    }
                }
            }
            _ => {}
        }
        out
    }

    pub(super) fn ctl_readdir(
        &self,
        node: INodeNo,
        offset: u64,
        mut reply: ReplyDirectory,
    ) -> Option<ReplyDirectory> {
        match route(node.0) {
            Route::Head if node == INodeNo::ROOT => {
                // `.zfs` after the root's own entries, when visible.
                if offset == CTL_COOKIE {
                    reply.ok();
                    return None;
                }
                Some(reply)
            }
            Route::Head => Some(reply),
            Route::Ctl(n) => {
                for (i, (name, child)) in self
                    .ctl_entries(n)
                    .into_iter()
                    .enumerate()
                    .skip(offset as usize)
                {
                    if reply.add(
                        INodeNo(child),
                        i as u64 + 1,
                        fuser::FileType::Directory,
                        OsStr::from_bytes(&name),
                    ) {
                        break;
                    }
                }
                reply.ok();
                None
            }
            Route::Snap { id, ino } => {
                let r = self.snaps.zpl(id).map_err(ioerr).and_then(|z| {
                    let root = z.root_ino();
                    z.readdir(ino, offset, |e| {
                        let child = if ino == root && e.name == b".." {
                            CTL_SNAPDIR
                        } else {
                            snap_node(id, e.ino).unwrap_or(0)
                        };
                        !reply.add(
                            INodeNo(child),
                            e.next,
                            kind(e.kind),
                            OsStr::from_bytes(&e.name),
                        )
                    })
                    .map_err(zerr)
                });
                match r {
                    Ok(()) => reply.ok(),
                    Err(e) => reply.error(e),
                }
                None
            }
        }
    }

    /// The root's listing is over: `.zfs` goes last when visible. `false`
    /// when the reply is full.
    pub(super) fn add_ctl_entry(&self, reply: &mut ReplyDirectory) -> bool {
        if !self.has_ctl() || !self.snaps.source.as_ref().is_some_and(|s| s.visible()) {
            return true;
        }
        !reply.add(
            INodeNo(CTL_ZFS),
            CTL_COOKIE,
            fuser::FileType::Directory,
            OsStr::from_bytes(CTL_NAME),
        )
    }

    /// [`TarnFs::add_ctl_entry`] for readdirplus.
    pub(super) fn add_ctl_plus(&self, reply: &mut ReplyDirectoryPlus) -> bool {
        if !self.has_ctl() || !self.snaps.source.as_ref().is_some_and(|s| s.visible()) {
            return true;
        }
        let a = ctl_attr(CTL_ZFS, Some(&self.root_attr()));
        !reply.add(
            INodeNo(CTL_ZFS),
            CTL_COOKIE,
            OsStr::from_bytes(CTL_NAME),
            &ATTR_TTL,
            &file_attr(&a, CTL_ZFS),
            Generation(0),
        )
    }

    pub(super) fn ctl_readdirplus(
        &self,
        node: INodeNo,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) -> Option<ReplyDirectoryPlus> {
        match route(node.0) {
            Route::Head if node == INodeNo::ROOT && offset == CTL_COOKIE => {
                reply.ok();
                None
            }
            Route::Head => Some(reply),
            Route::Ctl(n) => {
                let root = self.root_attr();
                for (i, (name, child)) in self
                    .ctl_entries(n)
                    .into_iter()
                    .enumerate()
                    .skip(offset as usize)
                {
                    let a = match route(child) {
                        Route::Snap { id, .. } if name != b"." && name != b".." => {
                            let name = String::from_utf8_lossy(&name).into_owned();
                            match self.snaps.by_name(&name).and_then(|(id, z)| {
                                let a = z
                                    .getattr(z.root_ino())
                                    .map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
                                snap_attr(id, a)
                            }) {
                                Ok(a) => a,
                                Err(_) => {
                                    let _ = id;
                                    continue;
                                }
                            }
                        }
                        Route::Head => root.clone(),
                        _ => ctl_attr(child, Some(&root)),
                    };
                    if reply.add(
                        INodeNo(a.ino),
                        i as u64 + 1,
                        OsStr::from_bytes(&name),
                        &ATTR_TTL,
                        &file_attr(&a, a.ino),
                        Generation(0),
                    ) {
                        break;
                    }
                }
                reply.ok();
                None
            }
            Route::Snap { id, ino } => {
                let r = self.snaps.zpl(id).map_err(ioerr).and_then(|z| {
                    let root = z.root_ino();
                    let mut entries = Vec::new();
                    z.readdir(ino, offset, |e| {
                        entries.push(e);
                        entries.len() < 128
                    })
                    .map_err(zerr)?;
                    for e in entries {
                        let a = if ino == root && e.name == b".." {
                            ctl_attr(CTL_SNAPDIR, Some(&self.root_attr()))
                        } else {
                            match z.getattr(e.ino) {
                                Ok(a) => snap_attr(id, a).map_err(ioerr)?,
                                Err(_) => continue,
                            }
                        };
                        if reply.add(
                            INodeNo(a.ino),
                            e.next,
                            OsStr::from_bytes(&e.name),
                            &ATTR_TTL,
                            &file_attr(&a, a.ino),
                            Generation(a.gen),
                        ) {
                            break;
                        }
                    }
                    Ok(())
                });
                match r {
                    Ok(()) => reply.ok(),
                    Err(e) => reply.error(e),
                }
                None
            }
        }
    }

    pub(super) fn ctl_getxattr(
        &self,
        req: &Request,
        node: INodeNo,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) -> Option<ReplyXattr> {
        match route(node.0) {
            Route::Head => return Some(reply),
            Route::Ctl(_) => reply.error(Errno::ENODATA),
            Route::Snap { id, ino } => {
                let r =
                    self.snaps.zpl(id).map_err(ioerr).and_then(|z| {
                        with_cred(req, false, |c| z.getxattr(ino, name.as_bytes(), c))
                    });
                reply_xattr(reply, r, size, |v| v);
            }
        }
        None
    }

    pub(super) fn ctl_listxattr(
        &self,
        req: &Request,
        node: INodeNo,
        size: u32,
        reply: ReplyXattr,
    ) -> Option<ReplyXattr> {
        let r = match route(node.0) {
            Route::Head => return Some(reply),
            Route::Ctl(_) => Ok(Vec::new()),
            Route::Snap { id, ino } => self
                .snaps
                .zpl(id)
                .map_err(ioerr)
                .and_then(|z| with_cred(req, false, |c| z.listxattr(ino, c))),
        };
        reply_xattr(reply, r, size, xattr_list);
        None
    }

    pub(super) fn ctl_access(
        &self,
        req: &Request,
        node: INodeNo,
        mask: u32,
        reply: ReplyEmpty,
    ) -> Option<ReplyEmpty> {
        match route(node.0) {
            Route::Head => return Some(reply),
            Route::Ctl(n) => {
                if mask & W_OK != 0 && n != CTL_SNAPDIR {
                    reply.error(Errno::EROFS);
                } else {
                    reply.ok();
                }
            }
            Route::Snap { id, ino } => {
                if mask & W_OK != 0 {
                    reply.error(Errno::EROFS);
                } else {
                    let r = self
                        .snaps
                        .zpl(id)
                        .map_err(ioerr)
                        .and_then(|z| with_cred(req, false, |c| z.access(ino, mask, c)));
                    match r {
                        Ok(()) => reply.ok(),
                        Err(e) => reply.error(e),
                    }
                }
            }
        }
        None
    }

    pub(super) fn ctl_lseek(
        &self,
        node: INodeNo,
        offset: i64,
        whence: i32,
        reply: fuser::ReplyLseek,
    ) -> Option<fuser::ReplyLseek> {
        let Route::Snap { id, ino } = route(node.0) else {
            if self.is_head(node) {
                return Some(reply);
            }
            reply.error(Errno::EINVAL);
            return None;
        };
        match self
            .snaps
            .zpl(id)
            .map_err(ioerr)
            .and_then(|z| seek(&z, ino, offset, whence))
        {
            Ok(o) => reply.offset(o),
            Err(e) => reply.error(e),
        }
        None
    }

    /// Who may change snapshots through `.zfs/snapshot`: root, as `zfs`
    /// itself requires (OpenZFS also honours `zfs allow` delegation).
    fn may_manage(req: &Request) -> Result<(), Errno> {
        if req.uid() == 0 {
            Ok(())
        } else {
            Err(Errno::EPERM)
        }
    }

    /// `mkdir` in `.zfs/snapshot` takes a snapshot; elsewhere under `.zfs`
    /// it is refused.
    pub(super) fn ctl_mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        reply: ReplyEntry,
    ) -> Option<ReplyEntry> {
        if self.reserved_name(parent, name) {
            reply.error(Errno::EEXIST);
            return None;
        }
        match route(parent.0) {
            Route::Head => return Some(reply),
            Route::Ctl(CTL_SNAPDIR) => {
                let r = Self::may_manage(req)
                    .and_then(|()| std::str::from_utf8(name.as_bytes()).map_err(|_| Errno::EINVAL))
                    .and_then(|n| {
                        self.snaps
                            .source()
                            .map_err(ioerr)?
                            .create(n)
                            .map_err(ioerr)?;
                        let (id, z) = self.snaps.by_name(n).map_err(ioerr)?;
                        Ok((id, z.getattr(z.root_ino()).map_err(zerr)?))
                    });
                match r {
                    Ok((id, a)) => self.reply_snap_entry(reply, id, Ok(a)),
                    Err(e) => reply.error(e),
                }
            }
            _ => reply.error(Errno::EROFS),
        }
        None
    }

    /// `rmdir` in `.zfs/snapshot` destroys a snapshot.
    pub(super) fn ctl_rmdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        reply: ReplyEmpty,
    ) -> Option<ReplyEmpty> {
        if self.reserved_name(parent, name) {
            reply.error(Errno::EBUSY);
            return None;
        }
        match route(parent.0) {
            Route::Head => return Some(reply),
            Route::Ctl(CTL_SNAPDIR) => {
                let r = Self::may_manage(req)
                    .and_then(|()| std::str::from_utf8(name.as_bytes()).map_err(|_| Errno::ENOENT))
                    .and_then(|n| {
                        self.snaps
                            .source()
                            .map_err(ioerr)?
                            .destroy(n)
                            .map_err(ioerr)?;
                        self.snaps.close(n);
                        Ok(())
                    });
                match r {
                    Ok(()) => reply.ok(),
                    Err(e) => reply.error(e),
                }
            }
            _ => reply.error(Errno::EROFS),
        }
        None
    }

    /// `mv` within `.zfs/snapshot` renames a snapshot; a move into or out
    /// of `.zfs` is refused.
    pub(super) fn ctl_rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEmpty,
    ) -> Option<ReplyEmpty> {
        if self.reserved_name(parent, name) || self.reserved_name(newparent, newname) {
            reply.error(Errno::EBUSY);
            return None;
        }
        match (route(parent.0), route(newparent.0)) {
            (Route::Head, Route::Head) => return Some(reply),
            (Route::Ctl(CTL_SNAPDIR), Route::Ctl(CTL_SNAPDIR)) => {
                let text = |n: &OsStr| {
                    std::str::from_utf8(n.as_bytes())
                        .map(str::to_string)
                        .map_err(|_| Errno::EINVAL)
                };
                let r = Self::may_manage(req).and_then(|()| {
                    let (from, to) = (text(name)?, text(newname)?);
                    self.snaps
                        .source()
                        .map_err(ioerr)?
                        .rename(&from, &to)
                        .map_err(ioerr)?;
                    self.snaps.close(&from);
                    Ok(())
                });
                match r {
                    Ok(()) => reply.ok(),
                    Err(e) => reply.error(e),
                }
            }
            (Route::Head, _) | (_, Route::Head) => reply.error(Errno::EXDEV),
            _ => reply.error(Errno::EROFS),
        }
        None
    }
}
