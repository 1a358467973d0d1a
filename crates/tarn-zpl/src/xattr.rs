//! Extended attributes (ZFS's `zpl_xattr.c` and the SA xattr of `sa.c`).
//!
//! With `xattr=sa` (the default) an attribute whose name and value fit in
//! what is left of the znode's bonus (176 bytes minus 3 per entry, shared
//! by all inline attributes) is stored there, so reading a small
//! `security.*` or ACL attribute costs no extra object. Everything else —
//! and everything with `xattr=dir` — lives in the file's hidden xattr
//! directory: a ZAP naming one object per attribute whose contents are
//! the value. A set removes the old copy wherever it was, then stores the
//! new one where it fits, all in one txg, which also logs it (`SETXATTR`,
//! `REMOVEXATTR`: see `log`; replay stores the value as the mount's
//! `xattr` setting says, which only changes where, not what).
//!
//! Namespaces: `user.` (regular files and directories only, by the file's
//! read/write permission), `trusted.` (root only; hidden from others),
//! `security.` and `system.posix_acl_access`/`_default` (stored as bytes;
//! set by the owner or root). Anything else is EOPNOTSUPP.
//!
//! `xattr=off` is ZFS's `noxattr` mount: like `zpl_xattr_user_get`/`_set`
//! it refuses `user.*` with EOPNOTSUPP (after the VFS's own permission
//! checks, which come first on Linux) and, like `zpl_xattr_filldir`, hides
//! `user.*` names from `listxattr`. Nothing stored is touched, so they are
//! back as soon as the property is on/sa/dir again. The other namespaces
//! work as with `sa`, and so does dropping `security.capability` on writes.

use std::collections::BTreeSet;

use tarn_dmu::{DmuError, ZapValue};
use tarn_format::zpl::{
    dirent_encode, ZnodePhys, S_IFDIR, S_IFMT, S_IFREG, XATTR_NAME_MAX, ZNODE_FLAG_XATTR,
};
use tarn_format::ObjType;

use crate::dir::round_block;
use crate::error::{Result, ZplError};
use crate::fs::{Zpl, TX_METADATA_BYTES};
use crate::perm::{check_access, is_owner};
use crate::types::{Cred, Timespec, XattrMode, XattrSetFlags, R_OK, W_OK};

/// Largest value (bytes), Linux's XATTR_SIZE_MAX.
pub const XATTR_SIZE_MAX: usize = 65536;

/// No object number to avoid: allocations outside replay (see `log`).
const AVOID_NONE: &BTreeSet<u64> = &BTreeSet::new();

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Namespace {
    User,
    Trusted,
    Security,
    PosixAcl,
}

fn namespace(name: &[u8]) -> Result<Namespace> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return Err(ZplError::Range);
    }
    let has = |p: &[u8]| name.len() > p.len() && name.starts_with(p);
    if has(b"user.") {
        Ok(Namespace::User)
    } else if has(b"trusted.") {
        Ok(Namespace::Trusted)
    } else if has(b"security.") {
        Ok(Namespace::Security)
    } else if name == b"system.posix_acl_access" || name == b"system.posix_acl_default" {
        Ok(Namespace::PosixAcl)
    } else {
        Err(ZplError::NotSupported)
    }
}

/// A name and value an intent log record may set: what `setxattr`
/// accepts.
pub(crate) fn check_xattr_record(name: &[u8], value: &[u8]) -> Result<()> {
    namespace(name)?;
    if value.len() > XATTR_SIZE_MAX {
        return Err(ZplError::TooBig);
    }
    Ok(())
}

/// `user.*` with `xattr=off`: EOPNOTSUPP, as `ZSB_XATTR` cleared in ZFS.
fn check_enabled(ns: Namespace, mode: XattrMode) -> Result<()> {
    if ns == Namespace::User && mode == XattrMode::Off {
        return Err(ZplError::NotSupported);
    }
    Ok(())
}

/// May `cred` read (`write == false`) or change an attribute of `ns`?
fn check_xattr(z: &ZnodePhys, ns: Namespace, cred: &Cred, write: bool) -> Result<()> {
    match ns {
        Namespace::User => {
            if !(z.is_dir() || z.mode & S_IFMT == S_IFREG) {
                return Err(if write {
                    ZplError::Perm
                } else {
                    ZplError::NoData
                });
            }
            check_access(z, cred, if write { W_OK } else { R_OK })
        }
        Namespace::Trusted if !cred.is_root() => Err(if write {
            ZplError::Perm
        } else {
            ZplError::NoData
        }),
        Namespace::Security | Namespace::PosixAcl if write && !is_owner(z, cred) => {
            Err(ZplError::Perm)
        }
        _ => Ok(()),
    }
}

impl Zpl {
    pub fn getxattr(&self, ino: u64, name: &[u8], cred: &Cred) -> Result<Vec<u8>> {
        let ns = namespace(name)?;
        let _ns = self.ns_read();
        let _l = self.shard(ino).read();
        let z = self.inode(ino)?;
        check_xattr(&z, ns, cred, false)?;
        check_enabled(ns, self.settings().xattr)?;
        if let Some((_, v)) = z.sa_xattrs.iter().find(|(n, _)| n == name) {
            return Ok(v.clone());
        }
        if z.xattr != 0 {
            if let Some(obj) = self.dir_lookup(z.xattr, name)? {
                let vz = self.znode(obj)?;
                if vz.size as usize > XATTR_SIZE_MAX {
                    return Err(ZplError::Corrupted(format!("xattr object {obj} size")));
                }
                let mut v = vec![0u8; vz.size as usize];
                self.os.read(obj, 0, &mut v)?;
                return Ok(v);
            }
        }
        Err(ZplError::NoData)
    }

    /// Names of every attribute the caller may see (`trusted.` only for
    /// root, `user.` only while `xattr` is not off), inline ones first.
    pub fn listxattr(&self, ino: u64, cred: &Cred) -> Result<Vec<Vec<u8>>> {
        let _ns = self.ns_read();
        let _l = self.shard(ino).read();
        let z = self.inode(ino)?;
        let mut names: Vec<Vec<u8>> = z.sa_xattrs.iter().map(|(n, _)| n.clone()).collect();
        if z.xattr != 0 {
            for e in self.os.zap_cursor(z.xattr, 0) {
                names.push(e?.0);
            }
        }
        let user = self.settings().xattr != XattrMode::Off;
        names.retain(|n| {
            (cred.is_root() || !n.starts_with(b"trusted.")) && (user || !n.starts_with(b"user."))
        });
        Ok(names)
    }

    pub fn setxattr(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: XattrSetFlags,
        cred: &Cred,
    ) -> Result<()> {
        let ns = namespace(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(ZplError::TooBig);
        }
        self.writable()?;
        let _ns = self.ns_read();
        let _l = self.shard(ino).write();
        let mut z = self.inode(ino)?;
        check_xattr(&z, ns, cred, true)?;
        check_enabled(ns, self.settings().xattr)?;
        let exists = self.xattr_exists(&z, name)?;
        match flags {
            XattrSetFlags::Create if exists => return Err(ZplError::Exists),
            XattrSetFlags::Replace if !exists => return Err(ZplError::NoData),
            _ => {}
        }
        self.space.check_write(value.len() as u64)?;
        let now = self.now();
        self.tx_logged(TX_METADATA_BYTES + value.len() as u64, |txg| {
            self.xattr_set(ino, &mut z, name, value, now, AVOID_NONE)?;
            self.log_setxattr(txg, ino, name, value, now);
            Ok(())
        })
    }

    /// Does `z` (an inode's znode) have attribute `name`, inline or in its
    /// xattr directory?
    pub(crate) fn xattr_exists(&self, z: &ZnodePhys, name: &[u8]) -> Result<bool> {
        Ok(z.sa_xattrs.iter().any(|(n, _)| n == name)
            || z.xattr != 0 && self.dir_lookup(z.xattr, name)?.is_some())
    }

    /// Sets `name` to `value` on `ino` (znode `z`) at `now`, inline if
    /// the `xattr` setting allows and it fits, else in the xattr
    /// directory, whose new objects avoid the numbers in `avoid` (inside a
    /// tx).
    pub(crate) fn xattr_set(
        &self,
        ino: u64,
        z: &mut ZnodePhys,
        name: &[u8],
        value: &[u8],
        now: Timespec,
        avoid: &BTreeSet<u64>,
    ) -> Result<()> {
        self.xattr_drop(z, name)?;
        z.sa_xattrs.push((name.to_vec(), value.to_vec()));
        if self.settings().xattr == XattrMode::Dir || !z.sa_fits() {
            z.sa_xattrs.pop();
            self.xattr_dir_put(ino, z, name, value, avoid)?;
        }
        z.ctime = now;
        self.put_znode(ino, z)
    }

    /// Removes `name` from `ino` (znode `z`) at `now` (inside a tx).
    pub(crate) fn xattr_remove(
        &self,
        ino: u64,
        z: &mut ZnodePhys,
        name: &[u8],
        now: Timespec,
    ) -> Result<()> {
        self.xattr_drop(z, name)?;
        z.ctime = now;
        self.put_znode(ino, z)
    }

    pub fn removexattr(&self, ino: u64, name: &[u8], cred: &Cred) -> Result<()> {
        let ns = namespace(name)?;
        self.writable()?;
        let _ns = self.ns_read();
        let _l = self.shard(ino).write();
        let mut z = self.inode(ino)?;
        check_xattr(&z, ns, cred, true)?;
        check_enabled(ns, self.settings().xattr)?;
        let now = self.now();
        if !self.xattr_exists(&z, name)? {
            return Err(ZplError::NoData);
        }
        self.tx_logged(TX_METADATA_BYTES, |txg| {
            self.xattr_remove(ino, &mut z, name, now)?;
            self.log_removexattr(txg, ino, name, now);
            Ok(())
        })
    }

    /// Drops `security.capability`, as Linux does on every write,
    /// truncate and chown of a file (file capabilities must not survive a
    /// change of the program they were granted to). Free when the file
    /// has no xattrs at all, which is the common case. Not subject to
    /// `xattr=off` (which only concerns `user.*`).
    ///
    /// Not logged (the record would need the inode number, which the
    /// callers do not pass): when a capability is dropped, `fsync` waits
    /// for this txg instead, which the caller's hold keeps open.
    pub(crate) fn kill_caps(&self, z: &mut ZnodePhys) -> Result<()> {
        const CAPS: &[u8] = b"security.capability";
        if z.xattr == 0 && !z.sa_xattrs.iter().any(|(n, _)| n == CAPS) {
            return Ok(());
        }
        if self.xattr_drop(z, CAPS)? {
            self.unlogged_txg
                .fetch_max(self.txg.open_txg(), std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }

    /// Removes `name` from the inline area and the xattr dir (in a tx);
    /// `true` if it was there.
    fn xattr_drop(&self, z: &mut ZnodePhys, name: &[u8]) -> Result<bool> {
        let inline = z.sa_xattrs.len();
        z.sa_xattrs.retain(|(n, _)| n != name);
        let mut dropped = z.sa_xattrs.len() != inline;
        if z.xattr == 0 {
            return Ok(dropped);
        }
        if let Some(obj) = self.dir_lookup(z.xattr, name)? {
            self.os.zap_remove(z.xattr, name)?;
            self.os.object_free(obj)?;
            dropped = true;
        }
        Ok(dropped)
    }

    /// Stores `name` as an object in the xattr dir, creating the dir; new
    /// objects avoid the numbers in `avoid`.
    fn xattr_dir_put(
        &self,
        ino: u64,
        z: &mut ZnodePhys,
        name: &[u8],
        value: &[u8],
        avoid: &BTreeSet<u64>,
    ) -> Result<()> {
        let base = ZnodePhys {
            flags: ZNODE_FLAG_XATTR,
            uid: z.uid,
            gid: z.gid,
            atime: z.ctime,
            mtime: z.ctime,
            ctime: z.ctime,
            crtime: z.ctime,
            ..Default::default()
        };
        if z.xattr == 0 {
            let dir = self.new_object(avoid, || self.os.zap_create(ObjType::DirectoryContents))?;
            let dz = ZnodePhys {
                mode: S_IFDIR | 0o700,
                links: 2,
                size: 2,
                parent: ino,
                ..base.clone()
            };
            self.put_znode(dir, &dz)?;
            z.xattr = dir;
        }
        let block = round_block(value.len() as u64);
        let obj = self.new_object(avoid, || {
            self.os.object_create(ObjType::PlainFile, block, 0)
        })?;
        self.os.write(obj, 0, value)?;
        let vz = ZnodePhys {
            mode: S_IFREG | 0o600,
            links: 1,
            size: value.len() as u64,
            parent: z.xattr,
            ..base
        };
        self.put_znode(obj, &vz)?;
        let dirent = ZapValue::u64(dirent_encode(obj, vz.mode));
        self.os
            .zap_add(z.xattr, name, &dirent)
            .map_err(|e| match e {
                DmuError::Exists => ZplError::Corrupted("xattr present twice".into()),
                e => e.into(),
            })
    }

    /// Frees an xattr directory and every value object in it (in a tx).
    pub(crate) fn free_xattr_dir(&self, dir: u64) -> Result<()> {
        let mut objs = Vec::new();
        for e in self.os.zap_cursor(dir, 0) {
            let (_, v, _) = e?;
            let v = v
                .as_single_u64()
                .ok_or_else(|| ZplError::Corrupted("xattr dir entry".into()))?;
            objs.push(tarn_format::zpl::dirent_decode(v)?.0);
        }
        for obj in objs {
            self.os.object_free(obj)?;
        }
        Ok(self.os.object_free(dir)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces() {
        assert!(namespace(b"user.x").is_ok());
        assert_eq!(namespace(b"user."), Err(ZplError::NotSupported));
        assert_eq!(namespace(b"os2.x"), Err(ZplError::NotSupported));
        assert_eq!(namespace(&[b'u'; 256]), Err(ZplError::Range));
        assert!(namespace(b"system.posix_acl_default").is_ok());
        assert_eq!(namespace(b"system.other"), Err(ZplError::NotSupported));
    }
}
