//! POSIX permission rules (Linux's `generic_permission`, ZFS's
//! `zfs_zaccess` without ACLs).
//!
//! The class of the caller is chosen once — owner if the uid matches, else
//! group if the primary or a supplementary gid matches, else other — and
//! only that class's three bits decide (an owner denied by the owner bits
//! is denied even when "other" would allow). Root passes every read and
//! write check and searches any directory, but executes a file only when
//! some execute bit is set.

use tarn_format::zpl::ZnodePhys;

use crate::error::{Result, ZplError};
use crate::types::{Cred, X_OK};

pub(crate) const S_ISUID: u32 = 0o4000;
pub(crate) const S_ISGID: u32 = 0o2000;
pub(crate) const S_ISVTX: u32 = 0o1000;
pub(crate) const S_IXGRP: u32 = 0o010;

/// May `cred` access `z` for every bit of `mask` (R_OK | W_OK | X_OK)?
pub(crate) fn check_access(z: &ZnodePhys, cred: &Cred, mask: u32) -> Result<()> {
    let mask = mask & 7;
    if cred.is_root() {
        if mask & X_OK != 0 && !z.is_dir() && z.mode & 0o111 == 0 {
            return Err(ZplError::Access);
        }
        return Ok(());
    }
    let bits = if cred.uid == z.uid {
        (z.mode >> 6) & 7
    } else if cred.in_group(z.gid) {
        (z.mode >> 3) & 7
    } else {
        z.mode & 7
    };
    if bits & mask == mask {
        Ok(())
    } else {
        Err(ZplError::Access)
    }
}

/// Root or the file's owner: who may chmod, set explicit times, ...
pub(crate) fn is_owner(z: &ZnodePhys, cred: &Cred) -> bool {
    cred.is_root() || cred.uid == z.uid
}

/// In a sticky directory only the owner of the entry or of the directory
/// (or root) may remove or rename it.
pub(crate) fn check_sticky(dir: &ZnodePhys, child: &ZnodePhys, cred: &Cred) -> Result<()> {
    if dir.mode & S_ISVTX == 0 || is_owner(dir, cred) || cred.uid == child.uid {
        return Ok(());
    }
    Err(ZplError::Perm)
}

/// A write or truncate by someone without CAP_FSETID (non-root) drops
/// set-user-ID, and set-group-ID when group execute is set (Linux's
/// `should_remove_suid`; without group execute S_ISGID means mandatory
/// locking and stays).
pub(crate) fn kill_suid(z: &mut ZnodePhys, cred: &Cred) {
    if cred.is_root() || z.is_dir() {
        return;
    }
    z.mode &= !S_ISUID;
    if z.mode & S_IXGRP != 0 {
        z.mode &= !S_ISGID;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{R_OK, W_OK};
    use tarn_format::zpl::{S_IFDIR, S_IFREG};

    fn z(mode: u32, uid: u32, gid: u32) -> ZnodePhys {
        ZnodePhys {
            mode,
            uid,
            gid,
            ..Default::default()
        }
    }

    #[test]
    fn classes() {
        let f = z(S_IFREG | 0o604, 10, 20);
        let owner = Cred::user(10, 99);
        let group = Cred {
            uid: 11,
            gid: 1,
            groups: vec![20],
        };
        let other = Cred::user(12, 1);
        assert!(check_access(&f, &owner, R_OK | W_OK).is_ok());
        assert!(check_access(&f, &group, R_OK).is_err(), "group bits are 0");
        assert!(check_access(&f, &other, R_OK).is_ok());
        assert!(check_access(&f, &other, W_OK).is_err());
        let root = Cred::root();
        assert!(check_access(&f, &root, R_OK | W_OK).is_ok());
        assert!(check_access(&f, &root, X_OK).is_err(), "no x bit at all");
        assert!(check_access(&z(S_IFREG | 0o001, 1, 1), &root, X_OK).is_ok());
        assert!(check_access(&z(S_IFDIR, 1, 1), &root, X_OK).is_ok());
    }

    #[test]
    fn sticky_and_suid() {
        let dir = z(S_IFDIR | 0o1777, 0, 0);
        let file = z(S_IFREG | 0o644, 10, 10);
        assert!(check_sticky(&dir, &file, &Cred::user(10, 10)).is_ok());
        assert_eq!(
            check_sticky(&dir, &file, &Cred::user(11, 10)),
            Err(ZplError::Perm)
        );
        let mut f = z(S_IFREG | 0o6755, 10, 10);
        kill_suid(&mut f, &Cred::root());
        assert_eq!(f.mode & 0o7777, 0o6755);
        kill_suid(&mut f, &Cred::user(11, 11));
        assert_eq!(f.mode & 0o7777, 0o0755);
        let mut g = z(S_IFREG | 0o2644, 10, 10);
        kill_suid(&mut g, &Cred::user(11, 11));
        assert_eq!(g.mode & 0o7777, 0o2644, "no group exec: sgid stays");
    }
}
