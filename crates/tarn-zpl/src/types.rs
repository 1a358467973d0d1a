//! The values that cross the API: credentials, attributes, options and
//! the two hooks (clock, space) that keep the layer deterministic and
//! independent of the daemon.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

pub use tarn_format::zpl::Timespec;
use tarn_format::zpl::{
    ZnodePhys, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK,
};

use crate::error::{Result, ZplError};

/// Who is asking: the caller's uid, primary gid and supplementary groups.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl Cred {
    pub fn root() -> Cred {
        Cred::default()
    }
    pub fn user(uid: u32, gid: u32) -> Cred {
        Cred {
            uid,
            gid,
            groups: Vec::new(),
        }
    }
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// `access(2)` mask bits.
pub const R_OK: u32 = 4;
pub const W_OK: u32 = 2;
pub const X_OK: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    Regular,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl FileType {
    /// The type of an `st_mode` (a znode's mode is always one of these:
    /// the decoder checks it).
    pub fn from_mode(mode: u32) -> FileType {
        match mode & S_IFMT {
            S_IFDIR => FileType::Directory,
            S_IFLNK => FileType::Symlink,
            S_IFIFO => FileType::Fifo,
            S_IFSOCK => FileType::Socket,
            S_IFCHR => FileType::CharDevice,
            S_IFBLK => FileType::BlockDevice,
            _ => FileType::Regular,
        }
    }
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::Regular => S_IFREG,
            FileType::Directory => S_IFDIR,
            FileType::Symlink => S_IFLNK,
            FileType::Fifo => S_IFIFO,
            FileType::Socket => S_IFSOCK,
            FileType::CharDevice => S_IFCHR,
            FileType::BlockDevice => S_IFBLK,
        }
    }
}

/// What `getattr` returns (a `struct stat`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    /// Generation: with `ino`, names this file uniquely for all time.
    pub gen: u64,
    pub kind: FileType,
    /// Full `st_mode` (type bits included).
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 512-byte units allocated as of the last committed txg.
    pub blocks: u64,
    /// The file's data block size (its preferred I/O size).
    pub blksize: u32,
    pub rdev: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub crtime: Timespec,
}

impl Attr {
    pub(crate) fn from_znode(ino: u64, z: &ZnodePhys, blksize: u32, used_bytes: u64) -> Attr {
        Attr {
            ino,
            gen: z.gen,
            kind: FileType::from_mode(z.mode),
            mode: z.mode,
            nlink: z.links,
            uid: z.uid,
            gid: z.gid,
            size: z.size,
            blocks: used_bytes.div_ceil(512),
            blksize,
            rdev: z.rdev,
            atime: z.atime,
            mtime: z.mtime,
            ctime: z.ctime,
            crtime: z.crtime,
        }
    }
}

/// One timestamp of a `setattr` (`utimensat`'s UTIME_NOW / UTIME_OMIT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeSet {
    #[default]
    Omit,
    Now,
    Time(Timespec),
}

/// The changes of one `setattr`; `None`/`Omit` fields are left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetAttr {
    /// Permission bits (07777); the type bits are ignored.
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: TimeSet,
    pub mtime: TimeSet,
    /// The change comes through an open file handle whose access was
    /// checked at open (`ftruncate`): a size change needs no write
    /// permission check.
    pub via_handle: bool,
    /// A size change clears set-uid/set-gid whatever the caller's
    /// credentials say: the front end applies changes as root after the
    /// kernel checked them, and tells the layer the real caller lacked
    /// CAP_FSETID (FUSE's `FATTR_KILL_SUIDGID`).
    pub kill_suidgid: bool,
}

/// `renameat2` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RenameFlags {
    pub noreplace: bool,
    pub exchange: bool,
}

impl RenameFlags {
    pub const NONE: RenameFlags = RenameFlags {
        noreplace: false,
        exchange: false,
    };
    pub const NOREPLACE: RenameFlags = RenameFlags {
        noreplace: true,
        exchange: false,
    };
    pub const EXCHANGE: RenameFlags = RenameFlags {
        noreplace: false,
        exchange: true,
    };
    /// From the `RENAME_*` bits of `renameat2`.
    pub fn from_bits(bits: u32) -> Result<RenameFlags> {
        let known = libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE;
        if bits & !known != 0 {
            return Err(ZplError::Invalid("unknown rename flags"));
        }
        Ok(RenameFlags {
            noreplace: bits & libc::RENAME_NOREPLACE != 0,
            exchange: bits & libc::RENAME_EXCHANGE != 0,
        })
    }
}

/// `setxattr` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XattrSetFlags {
    #[default]
    Any,
    /// XATTR_CREATE: fail with EEXIST if it exists.
    Create,
    /// XATTR_REPLACE: fail with ENODATA if it does not.
    Replace,
}

/// One `readdir` entry; `next` is the cookie to resume after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    pub kind: FileType,
    pub next: u64,
}

/// What `statfs` returns (in `bsize` units).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatFs {
    pub bsize: u32,
    pub frsize: u32,
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub namelen: u32,
}

/// `atime` property: off, on (strict) or on with `relatime` (default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtimeMode {
    Off,
    Strict,
    #[default]
    Relatime,
}

/// `xattr` property: inline in the znode when small (`sa`) or always in a
/// hidden directory (`dir`), or `off`: as a ZFS mount with `noxattr`,
/// `user.*` attributes are refused with EOPNOTSUPP and hidden from
/// `listxattr`, but stay stored and come back when turned on again; the
/// other namespaces (`trusted.`, `security.`, POSIX ACLs) keep working
/// and are stored as with `sa`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XattrMode {
    #[default]
    Sa,
    Dir,
    Off,
}

/// The `sync` property: what `fsync`, `O_SYNC` and friends do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// Sync requests commit the intent log before returning.
    #[default]
    Standard,
    /// Every change is committed to the log before its call returns.
    Always,
    /// Sync requests return at once: a crash loses what the last txgs
    /// had not yet committed, even if an application was told otherwise.
    Disabled,
}

/// The `logbias` property: where large synchronous writes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogBias {
    /// Log small writes by copy (and, with a log device, large ones too).
    #[default]
    Latency,
    /// Write every whole block in place and log only its pointer.
    Throughput,
}

/// Settings the caller may change at any time (dataset properties).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Largest data block of a file, 512 B ..= 16 MiB, a multiple of 512.
    pub recordsize: u32,
    pub atime: AtimeMode,
    pub xattr: XattrMode,
    pub readonly: bool,
    /// Most hard links one inode may have (EMLINK beyond).
    pub link_max: u64,
    pub sync: SyncMode,
    pub logbias: LogBias,
    /// `utf8only=on`: new names must be valid UTF-8 (EILSEQ otherwise).
    pub utf8only: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            recordsize: 128 << 10,
            atime: AtimeMode::Relatime,
            xattr: XattrMode::Sa,
            readonly: false,
            link_max: u64::from(u32::MAX),
            sync: SyncMode::Standard,
            logbias: LogBias::Latency,
            utf8only: false,
        }
    }
}

/// The source of "now" (a trait so tests are deterministic).
pub trait Clock: Send + Sync {
    fn now(&self) -> Timespec;
}

/// The kernel's clock at its own granularity: `CLOCK_REALTIME_COARSE`,
/// the clock Linux's `current_time()` stamps ext4's (and every other
/// file system's) mtime and ctime with, updated once a tick.
///
/// This matters beyond matching ext4. With the FUSE writeback cache the
/// kernel owns a file's mtime while it caches writes: `write(2)` compares
/// the inode's times with `current_time()` and, when they differ, marks the
/// inode dirty, which costs a SETATTR round trip on close. A file created
/// with the kernel's own "now" is written within the same tick without
/// one. A finer clock gains nothing the kernel would keep.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timespec {
        use nix::time::{clock_gettime, ClockId};
        match clock_gettime(ClockId::CLOCK_REALTIME_COARSE) {
            Ok(t) => Timespec::new(t.tv_sec(), t.tv_nsec() as u32),
            Err(_) => {
                let d = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default();
                Timespec::new(d.as_secs() as i64, d.subsec_nanos())
            }
        }
    }
}

/// The dataset's space as the pool sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    pub used_bytes: u64,
    pub avail_bytes: u64,
}

/// Space accounting from the layer that knows it (the dataset's USED and
/// AVAIL with quotas and reservations). `check_write` is asked before an
/// operation that may allocate `bytes` more; it answers `NoSpace` (pool
/// AVAIL reached) or `Quota` (a quota reached). Deletes are never asked.
pub trait SpaceHook: Send + Sync {
    fn space(&self) -> Space;
    fn check_write(&self, bytes: u64) -> Result<()> {
        if bytes > self.space().avail_bytes {
            return Err(ZplError::NoSpace);
        }
        Ok(())
    }
}

/// No limits: for tests on an in-memory store.
pub struct Unlimited;

impl SpaceHook for Unlimited {
    fn space(&self) -> Space {
        Space {
            used_bytes: 0,
            avail_bytes: 1 << 50,
        }
    }
}

/// Everything `Zpl::create`/`Zpl::open` take besides the object set.
#[derive(Clone)]
pub struct ZplOptions {
    pub settings: Settings,
    pub clock: Arc<dyn Clock>,
    pub space: Arc<dyn SpaceHook>,
    /// The dataset's intent log; without one, `fsync` commits a txg.
    pub zil: Option<Arc<tarn_zil::Zilog>>,
}

impl Default for ZplOptions {
    fn default() -> Self {
        ZplOptions {
            settings: Settings::default(),
            clock: Arc::new(SystemClock),
            space: Arc::new(Unlimited),
            zil: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coarse() -> Timespec {
        let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME_COARSE).unwrap();
        Timespec::new(t.tv_sec(), t.tv_nsec() as u32)
    }

    #[test]
    fn the_system_clock_is_the_kernels_coarse_clock() {
        // The kernel stamps cached writes with current_time(), the coarse
        // clock; a finer "now" would lie between ticks and differ from it.
        for _ in 0..1000 {
            let before = coarse();
            let now = SystemClock.now();
            let after = coarse();
            assert!(
                before <= now && now <= after,
                "{before:?} {now:?} {after:?}"
            );
        }
    }
}
