//! tarn-zpl: a POSIX filesystem over one dataset's object set (ZFS's ZPL:
//! `zfs_znode.c`, `zfs_dir.c`, `zfs_vnops.c`, `zfs_vfsops.c`).
//!
//! The layer turns objects into files: an inode is an object (its number
//! is the inode number, stable across remounts), its attributes are a
//! *znode* in the object's bonus, a directory is a ZAP of entries, and a
//! per-dataset master node (object 1) names the root, the delete queue and
//! the generation counter. The byte layouts live in `tarn_format::zpl`.
//!
//! [`Zpl`] is a library for the FUSE front end: thread-safe, operations
//! addressed by inode number, every error a [`ZplError`] with an errno.
//! Modules:
//! - `fs`: mount/format, transactions, locking, open counts, delete queue
//! - `dir`: lookup, create/mkdir/mknod/symlink, link, unlink, rmdir,
//!   rename, readdir
//! - `vnops`: read, write, setattr, fallocate, seeks, readlink, access,
//!   statfs, fsync (in `fs`)
//! - `xattr`: extended attributes, inline (`xattr=sa`) or in a directory
//! - `perm`: POSIX permission rules
//!
//! What the front end still owns: applying the umask, checking open
//! flags against `access` (or mounting with `default_permissions`),
//! reference counts (`open`/`forget`) matching the kernel's lookups,
//! ERANGE for xattr buffers that are too small, and O_APPEND offsets.

mod diff;
mod dir;
mod error;
mod fs;
mod log;
mod perm;
mod types;
mod vnops;
mod xattr;

pub use diff::{diff, DiffEntry};
pub use dir::{NAME_MAX, SYMLINK_MAX};
pub use error::{Result, ZplError};
pub use fs::{Zpl, ZPL_INODE, ZPL_NS};
pub use tarn_dmu::{ReadPiece, Rest};
pub use types::{
    AtimeMode, Attr, Clock, Cred, DirEntry, FileType, LogBias, RenameFlags, SetAttr, Settings,
    Space, SpaceHook, StatFs, SyncMode, SystemClock, TimeSet, Timespec, Unlimited, XattrMode,
    XattrSetFlags, ZplOptions, R_OK, W_OK, X_OK,
};
pub use vnops::{FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FILE_SIZE_MAX};
pub use xattr::XATTR_SIZE_MAX;

#[cfg(test)]
mod send_sync {
    fn assert_send_sync<T: Send + Sync>() {}
    #[test]
    fn zpl_is_send_sync() {
        assert_send_sync::<super::Zpl>();
    }
}
