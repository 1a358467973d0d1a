//! `.zfs/snapshot`: every snapshot of the mounted dataset, read-only, in
//! the same mount (OpenZFS's `zfs_ctldir.c`).
//!
//! The root of a mount holds a directory `.zfs` — not listed by `readdir`
//! unless the dataset's `snapdir` is `visible`, but always reachable by
//! name — with `snapshot` (one directory per snapshot) and `shares`
//! (empty). A snapshot's filesystem is opened the first time it is looked
//! up ("mounted on first access") and stays open until the snapshot is
//! destroyed or the mount ends. `mkdir`, `rmdir` and `mv` inside
//! `.zfs/snapshot` create, destroy and rename snapshots, as on OpenZFS
//! for Linux; everything else in there fails with EROFS.
//!
//! ## Node ids
//! The head's nodes are its object numbers (below 2^40). Control
//! directories have bit 63 set; a snapshot's nodes have bit 62 set, the
//! snapshot's id (its dataset object in the MOS, below 2^22) in bits
//! 40–61 and the object number below: stable across remounts, unique in
//! the mount (so tools that compare device and inode numbers never take a
//! snapshot's file for the head's). `st_ino` is the node id.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use parking_lot::RwLock;
use tarn_zpl::{Attr, FileType, Timespec, Zpl};

/// What the mount needs from the dataset layer for `.zfs/snapshot`.
pub trait SnapshotSource: Send + Sync {
    /// The snapshots, oldest first: their names (after `@`) and ids (their
    /// dataset objects, below 2^22).
    fn list(&self) -> Vec<(String, u64)>;
    /// Opens snapshot `name` read-only: its id and filesystem.
    fn open(&self, name: &str) -> io::Result<(u64, Arc<Zpl>)>;
    /// `mkdir .zfs/snapshot/NAME`.
    fn create(&self, name: &str) -> io::Result<()>;
    /// `rmdir .zfs/snapshot/NAME`.
    fn destroy(&self, name: &str) -> io::Result<()>;
    /// `mv .zfs/snapshot/FROM .zfs/snapshot/TO`.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Whether `.zfs` is listed in the root (`snapdir=visible`).
    fn visible(&self) -> bool;
}

/// Node ids of the control directories.
pub(crate) const CTL_BIT: u64 = 1 << 63;
pub(crate) const CTL_ZFS: u64 = CTL_BIT | 1;
pub(crate) const CTL_SNAPDIR: u64 = CTL_BIT | 2;
pub(crate) const CTL_SHARES: u64 = CTL_BIT | 3;
const SNAP_BIT: u64 = 1 << 62;
const OBJ_BITS: u32 = 40;
const ID_MAX: u64 = (1 << 22) - 1;
const OBJ_MAX: u64 = (1 << OBJ_BITS) - 1;

/// The name of the control directory in the root.
pub(crate) const CTL_NAME: &[u8] = b".zfs";

/// What a node id stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// An object of the mounted dataset (node 1 is its root).
    Head,
    Ctl(u64),
    /// Object `ino` of snapshot `id`.
    Snap {
        id: u64,
        ino: u64,
    },
}

pub(crate) fn route(node: u64) -> Route {
    if node & CTL_BIT != 0 {
        Route::Ctl(node)
    } else if node & SNAP_BIT != 0 {
        Route::Snap {
            id: (node >> OBJ_BITS) & ID_MAX,
            ino: node & OBJ_MAX,
        }
    } else {
        Route::Head
    }
}

/// The node id of object `ino` of snapshot `id`.
pub(crate) fn snap_node(id: u64, ino: u64) -> io::Result<u64> {
    if id > ID_MAX || ino > OBJ_MAX {
        return Err(io::Error::from_raw_os_error(libc::EOVERFLOW));
    }
    Ok(SNAP_BIT | id << OBJ_BITS | ino)
}

/// The open snapshots of one mount.
pub(crate) struct SnapState {
    pub source: Option<Arc<dyn SnapshotSource>>,
    open: RwLock<HashMap<u64, (String, Arc<Zpl>)>>,
}

impl SnapState {
    pub fn new(source: Option<Arc<dyn SnapshotSource>>) -> SnapState {
        SnapState {
            source,
            open: RwLock::new(HashMap::new()),
        }
    }

    /// The filesystem of an open snapshot (ESTALE once it is gone).
    pub fn zpl(&self, id: u64) -> io::Result<Arc<Zpl>> {
        self.open
            .read()
            .get(&id)
            .map(|(_, z)| z.clone())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ESTALE))
    }

    /// Snapshot `name`, opened now if it was not yet.
    pub fn by_name(&self, name: &str) -> io::Result<(u64, Arc<Zpl>)> {
        if let Some((id, (_, z))) = self.open.read().iter().find(|(_, (n, _))| n == name) {
            return Ok((*id, z.clone()));
        }
        let source = self.source()?;
        let (id, zpl) = source.open(name)?;
        snap_node(id, zpl.root_ino())?;
        self.open
            .write()
            .entry(id)
            .or_insert_with(|| (name.to_string(), zpl.clone()));
        Ok((id, zpl))
    }

    /// Forgets an open snapshot (destroyed or renamed); its id, if open.
    pub fn close(&self, name: &str) -> Option<u64> {
        let mut open = self.open.write();
        let id = open
            .iter()
            .find(|(_, (n, _))| n == name)
            .map(|(id, _)| *id)?;
        open.remove(&id);
        Some(id)
    }

    pub fn source(&self) -> io::Result<&Arc<dyn SnapshotSource>> {
        self.source
            .as_ref()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
    }
}

/// A control directory's attributes: read-only directories, dated like the
/// mount's root (`.zfs/snapshot` is writable, for `mkdir`), or like the
/// epoch when the root cannot be read.
pub(crate) fn ctl_attr(node: u64, root: Option<&Attr>) -> Attr {
    let mode = if node == CTL_SNAPDIR { 0o777 } else { 0o555 };
    let time = |t: fn(&Attr) -> Timespec| root.map_or_else(epoch, t);
    Attr {
        ino: node,
        gen: 0,
        kind: FileType::Directory,
        mode: libc::S_IFDIR | mode,
        nlink: 2,
        uid: 0,
        gid: 0,
        size: 0,
        blocks: 0,
        blksize: 512,
        rdev: 0,
        atime: time(|r| r.atime),
        mtime: time(|r| r.mtime),
        ctime: time(|r| r.ctime),
        crtime: time(|r| r.crtime),
    }
}

/// A snapshot object's attributes, its node id in place of its number.
pub(crate) fn snap_attr(id: u64, mut a: Attr) -> io::Result<Attr> {
    a.ino = snap_node(id, a.ino)?;
    Ok(a)
}

/// Times for a control directory when the root cannot be read.
pub(crate) fn epoch() -> Timespec {
    Timespec::new(0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_route_back() {
        assert_eq!(route(1), Route::Head);
        assert_eq!(route(12345), Route::Head);
        assert_eq!(route(CTL_ZFS), Route::Ctl(CTL_ZFS));
        let n = snap_node(77, 9).unwrap();
        assert_eq!(route(n), Route::Snap { id: 77, ino: 9 });
        assert_eq!(
            route(snap_node(ID_MAX, OBJ_MAX).unwrap()),
            Route::Snap {
                id: ID_MAX,
                ino: OBJ_MAX
            }
        );
        assert!(snap_node(ID_MAX + 1, 1).is_err());
        assert!(snap_node(1, OBJ_MAX + 1).is_err());
    }
}
