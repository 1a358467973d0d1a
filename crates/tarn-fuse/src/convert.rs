//! Conversions between tarn-zpl's values and fuser's: attributes, times,
//! file types, errno.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType as FuseType, INodeNo, TimeOrNow};
use tarn_zpl::{Attr, FileType, TimeSet, Timespec, ZplError};

pub(crate) fn errno(e: &ZplError) -> Errno {
    Errno::from_i32(e.errno())
}

pub(crate) fn kind(k: FileType) -> FuseType {
    match k {
        FileType::Regular => FuseType::RegularFile,
        FileType::Directory => FuseType::Directory,
        FileType::Symlink => FuseType::Symlink,
        FileType::Fifo => FuseType::NamedPipe,
        FileType::Socket => FuseType::Socket,
        FileType::CharDevice => FuseType::CharDevice,
        FileType::BlockDevice => FuseType::BlockDevice,
    }
}

pub(crate) fn system_time(t: Timespec) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec)
    } else {
        // sec is negative and nsec counts forward from it.
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + Duration::from_nanos(t.nsec.into())
    }
}

pub(crate) fn timespec(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec::new(d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let (sec, nsec) = (d.as_secs() as i64, d.subsec_nanos());
            if nsec == 0 {
                Timespec::new(-sec, 0)
            } else {
                Timespec::new(-sec - 1, 1_000_000_000 - nsec)
            }
        }
    }
}

pub(crate) fn time_set(t: Option<TimeOrNow>) -> TimeSet {
    match t {
        None => TimeSet::Omit,
        Some(TimeOrNow::Now) => TimeSet::Now,
        Some(TimeOrNow::SpecificTime(t)) => TimeSet::Time(timespec(t)),
    }
}

/// A `struct stat` for the kernel; `node` is the FUSE node id to report
/// (the inode number except for the root, whose node id is always 1).
pub(crate) fn file_attr(a: &Attr, node: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(node),
        size: a.size,
        blocks: a.blocks,
        atime: system_time(a.atime),
        mtime: system_time(a.mtime),
        ctime: system_time(a.ctime),
        crtime: system_time(a.crtime),
        kind: kind(a.kind),
        perm: (a.mode & 0o7777) as u16,
        nlink: u32::try_from(a.nlink).unwrap_or(u32::MAX),
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev as u32,
        blksize: a.blksize,
        flags: 0,
        node: None,
    }
}

/// [`file_attr`] for a file of the live filesystem whose FUSE node id may
/// be an alias (`NodeMap`, after a rollback or a receive): the kernel
/// gets the node id, `stat` shows the object number as ever.
pub(crate) fn live_attr(a: &Attr, node: u64) -> FileAttr {
    if node == a.ino || node == fuser::INodeNo::ROOT.0 {
        return file_attr(a, node);
    }
    FileAttr {
        ino: INodeNo(a.ino),
        node: Some(INodeNo(node)),
        ..file_attr(a, node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_including_before_the_epoch() {
        for t in [
            Timespec::new(0, 0),
            Timespec::new(1_700_000_000, 123_456_789),
            Timespec::new(-1, 999_999_999),
            Timespec::new(-1_000, 1),
            Timespec::new(-5, 0),
        ] {
            assert_eq!(timespec(system_time(t)), t, "{t:?}");
        }
    }

    #[test]
    fn every_zpl_error_has_its_errno() {
        for (e, n) in [
            (ZplError::NotFound, libc::ENOENT),
            (ZplError::NotEmpty, libc::ENOTEMPTY),
            (ZplError::NoSpace, libc::ENOSPC),
            (ZplError::Quota, libc::EDQUOT),
            (ZplError::ReadOnly, libc::EROFS),
            (ZplError::Io("x".into()), libc::EIO),
        ] {
            assert_eq!(i32::from(errno(&e)), n);
        }
    }
}
