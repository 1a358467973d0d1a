//! tarn-fuse: the FUSE front end. It serves one mounted [`tarn_zpl::Zpl`]
//! on a kernel FUSE mount, so ordinary programs use a dataset like any
//! directory.
//!
//! ```text
//!  kernel VFS ──io_uring, one queue per CPU──────────▶ fuser ring workers
//!             ──/dev/fuse (one cloned fd per thread)──▶ fuser device workers
//!                                                        │ TarnFs (ops.rs)
//!                                                        ▼
//!                                                  tarn_zpl::Zpl (Arc)
//! ```
//!
//! Modules:
//! - `mount`: [`mount`] (our own `mount(2)` of type `fuse.tarn` as root,
//!   no fusermount, no libfuse), [`MountHandle`] (unmount, busy
//!   reporting, lazy unmount), the readahead and dirty-ratio knobs of the
//!   mount's backing device, [`stale_mounts`] and [`is_dead_mount`],
//!   [`unmount_path`], [`is_mountpoint_empty`], [`write_back`] (the
//!   kernel's dirty pages of a mount, written back from a child process).
//! - `ops`: the `fuser::Filesystem` implementation — every FUSE operation
//!   mapped to one `Zpl` call, errors mapped to errno, panics caught;
//!   `ops/ctl` serves `.zfs` (snapshots through `snapdir`).
//! - `refs`: the kernel's lookup counts per inode, mirrored into
//!   `Zpl::open`/`Zpl::forget` and dropped when the session ends.
//! - `nodes`: node ids across a rollback (stale ones, aliases for reused
//!   object numbers).
//! - `cred`: the caller's credentials from the request (and, lazily, its
//!   supplementary groups from `/proc`).
//! - `convert`: attributes, times and file types between the two crates.
//!
//! ## Permissions
//! By default the mount uses `default_permissions` and `allow_other`: the
//! kernel applies POSIX permission checks with the caller's complete
//! credentials (fsuid, fsgid, every supplementary group) before a request
//! reaches the daemon, exactly as for ext4. The daemon still passes a
//! [`tarn_zpl::Cred`] to every call (new files are owned by it and the
//! layer double-checks); it starts with the request's uid and gid only,
//! and when the layer refuses (EACCES/EPERM) a non-root caller it reads
//! the caller's `Groups:` from `/proc/<pid>/status` and asks again, so the
//! common path never touches `/proc`. Without `default_permissions` the
//! daemon is the only check: `open` tests the access mode with
//! `Zpl::access`, everything else relies on the layer's rules.
//!
//! ## Transport
//! On Linux 6.14+ the mount asks for FUSE over io_uring (and turns on the
//! fuse module's `enable_uring`, off by default, which changes nothing for
//! servers that do not ask). The kernel then queues each request on the
//! queue of the caller's CPU; workers pinned to that CPU each own one ring
//! entry, so the request is taken and answered on the caller's CPU. A
//! queue starts with one worker and gets another whenever a request finds
//! every worker of the queue busy (fsyncs waiting for a log write hold
//! theirs), up to [`MountOptions::uring_per_queue`]: a quiet mount costs
//! one thread and one entry per CPU. File creation (six requests a file)
//! is faster this way than over `/dev/fuse` with polling
//! (docs/MEASUREMENTS.md, "FUSE: io_uring transport"). While requests
//! come in, one lowest-priority thread of the daemon spins (yielding) for
//! the poll window: otherwise the scheduler wakes the caller on the idle
//! vCPU, which halted, and creation was then slower than over
//! `/dev/fuse` (same entry). Forgets and interrupts still come through
//! `/dev/fuse`; without io_uring everything does, with the polling below. Once INIT has chosen io_uring the kernel
//! holds every request until each CPU's queue has an entry, so the mount
//! asks for it only when it can make the rings, and a worker that fails is
//! replaced. The vendored patch is `vendor/fuser/src/uring.rs`.
//!
//! ## Polling
//! A FUSE request is a round trip between two threads, usually on two
//! CPUs. When the daemon's worker sleeps in `read`, the kernel must wake
//! it, and on a virtual machine whose idle vCPUs halt to the host that
//! wake-up is most of the round trip: a file create (LOOKUP, CREATE,
//! GETXATTR, WRITE, GETATTR, RELEASE) ran nearly twice as fast with the
//! program and the daemon pinned to one CPU as with the workers asleep
//! (docs/MEASUREMENTS.md, "FUSE: polling /dev/fuse"). So after answering
//! a request a worker keeps reading its fd without blocking, yielding
//! between tries, for [`FUSE_POLL_WINDOW`]; the next request of a busy
//! program is taken on a CPU that never went idle. At
//! most [`FUSE_POLLERS_MAX`] workers of the whole daemon poll, and a quiet
//! mount stops within the window. The loop is a small patch to the
//! vendored `fuser` (`vendor/fuser/TARN.md`).
//!
//! ## Caching
//! Only this daemon changes a mounted dataset, so the kernel may cache:
//! attributes and entries for [`ATTR_TTL`], page cache kept across opens
//! (`FOPEN_KEEP_CACHE`), writeback cache (the kernel gathers small writes
//! into up to `max_write` requests and handles `O_APPEND` itself), symlink
//! targets. A caller that changes a dataset behind the mount (rollback,
//! receive) must unmount it first. A random read that fetches a record
//! from disk to return part of it stores the rest of the record in the
//! page cache afterwards (`feed.rs`, FUSE_NOTIFY_STORE), so the record's
//! other reads never reach the daemon.

mod convert;
mod cred;
mod feed;
mod mount;
mod nodes;
mod ops;
mod refs;
mod snapdir;

use std::path::PathBuf;
use std::time::Duration;

pub use fuser::PollBudget;

pub use mount::{
    abort_connection, is_dead_mount, is_mountpoint_empty, mount, mount_with_snapshots,
    remount_flags, stale_mounts, tarn_mounts, unmount_path, write_back, KernelFeatures,
    MountHandle, MountInfo,
};
pub use snapdir::SnapshotSource;

/// How long the kernel may cache attributes and directory entries.
pub const ATTR_TTL: Duration = Duration::from_secs(1);
/// The largest FUSE write request (and read request) asked for.
pub const MAX_WRITE_BYTES: u32 = 1 << 20;
/// Readahead window set on the mount's backing device.
pub const MAX_READAHEAD_BYTES: u32 = 1 << 20;
/// Largest byte count one `copy_file_range` request copies (the caller
/// loops on a short copy, as it must for any file system).
pub const COPY_CHUNK_MAX_BYTES: u64 = 64 << 20;
/// Reads whose unreturned record bytes may wait for the page-cache feed
/// (`feed.rs`); more are not fed. Each holds its records in memory.
pub const PAGE_FEED_QUEUE_MAX: usize = 32;
/// Share (percent) of the system's dirty-page budget this mount may use;
/// the kernel's default for FUSE is 1 %, which throttles buffered writes.
pub const DIRTY_RATIO_PCT: u32 = 20;
/// How long a clean unmount waits for the session threads to finish
/// before aborting the connection.
pub const UNMOUNT_WAIT: Duration = Duration::from_secs(5);

/// The file-system type name after `fuse.`: `mount` shows `fuse.tarn`.
pub const SUBTYPE: &str = "tarn";

/// Options of one mount. Build with `..Default::default()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountOptions {
    /// The mount's source as `mount` and `/proc/mounts` list it: the
    /// dataset name.
    pub fsname: String,
    /// Type suffix: the mount is of type `fuse.<subtype>`.
    pub subtype: String,
    /// Mount read-only (`MS_RDONLY`): every write fails with EROFS.
    pub readonly: bool,
    /// Let every user use the mount, not just root.
    pub allow_other: bool,
    /// Let the kernel check permissions (see the crate comment).
    pub default_permissions: bool,
    /// Worker threads, each with its own cloned `/dev/fuse` fd (two at
    /// most over io_uring, where the device carries only forgets and
    /// interrupts).
    pub threads: usize,
    /// Kernel writeback cache for buffered writes.
    pub writeback_cache: bool,
    /// Largest write request (bytes).
    pub max_write: u32,
    /// Readahead window (bytes) of the mount's backing device.
    pub max_readahead: u32,
    /// Keep the page cache when a file is opened again.
    pub keep_cache: bool,
    /// Honour set-user-ID bits (ZFS `setuid`); off adds `nosuid`.
    pub setuid: bool,
    /// Allow device nodes to be opened (ZFS `devices`); off adds `nodev`.
    pub devices: bool,
    /// Allow executing programs (ZFS `exec`); off adds `noexec`.
    pub exec: bool,
    /// Bounded busy polling of the FUSE device after each request (see
    /// "Polling" above); `None` makes workers always block in `read`.
    pub poll: Option<PollBudget>,
    /// FUSE over io_uring when the kernel offers it: at most this many
    /// workers per CPU, started as requests need them (see "Transport"
    /// above); 0 uses `/dev/fuse` only.
    pub uring_per_queue: usize,
}

/// How long a worker keeps polling its `/dev/fuse` fd after answering a
/// request (see "Polling" above). Long enough to span a program's time
/// between two requests (a `close` and the next `open`); short enough that
/// a quiet mount stops using CPU at once.
pub const FUSE_POLL_WINDOW: Duration = Duration::from_micros(200);

/// Most workers polling at once, over every mount of the daemon. One keeps
/// a CPU awake for the next request; more only burn CPU the program and
/// the sync thread need (measured: two were slower than one on 2 CPUs).
pub const FUSE_POLLERS_MAX: usize = 1;

/// The daemon's polling budget: every mount shares it, so
/// [`FUSE_POLLERS_MAX`] bounds the whole process.
pub fn poll_budget() -> PollBudget {
    static BUDGET: std::sync::OnceLock<PollBudget> = std::sync::OnceLock::new();
    BUDGET
        .get_or_init(|| PollBudget::new(FUSE_POLL_WINDOW, FUSE_POLLERS_MAX))
        .clone()
}

/// Fewest worker threads of a mount (and the most of each CPU's io_uring
/// queue): this many fsyncs (or other blocking requests) can wait in the
/// daemon at once.
pub const FSYNC_CONCURRENCY_MIN: usize = 8;

impl Default for MountOptions {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        MountOptions {
            fsname: String::from("tarn"),
            subtype: String::from(SUBTYPE),
            readonly: false,
            allow_other: true,
            default_permissions: true,
            // Most requests block on I/O, not CPU: an fsync waits for a
            // log write, and group commit only helps when several can
            // wait at once. Each worker costs a request buffer.
            threads: (2 * cpus).max(FSYNC_CONCURRENCY_MIN),
            writeback_cache: true,
            max_write: MAX_WRITE_BYTES,
            max_readahead: MAX_READAHEAD_BYTES,
            keep_cache: true,
            setuid: true,
            devices: true,
            exec: true,
            poll: Some(poll_budget()),
            uring_per_queue: FSYNC_CONCURRENCY_MIN,
        }
    }
}

/// What can go wrong mounting and unmounting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FuseError {
    #[error("cannot mount {fsname} at {}: {source}", path.display())]
    Mount {
        fsname: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot unmount {}: {}", path.display(), busy_text(holders))]
    Busy {
        path: PathBuf,
        /// What keeps it busy: processes with files or directories open
        /// under it, mounts below it.
        holders: Vec<String>,
    },
    #[error("cannot unmount {}: {source}", path.display())]
    Unmount {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not mounted", path.display())]
    NotMounted { path: PathBuf },
    #[error("invalid mount options: {0}")]
    Options(String),
}

fn busy_text(holders: &[String]) -> String {
    if holders.is_empty() {
        return String::from("target is busy");
    }
    format!("target is busy: {}", holders.join("; "))
}
