//! Mounting and unmounting.
//!
//! ## Mount
//! We call `mount(2)` ourselves (as root; no fusermount, no libfuse):
//! open `/dev/fuse`, mount type `fuse.tarn` with the dataset name as the
//! source (so `mount` and `/proc/mounts` list `tank/fs on /tank/fs type
//! fuse.tarn`), then hand the fd to fuser's `Session::from_fd`, which
//! answers the kernel's INIT (negotiating writeback cache, parallel
//! dirops, 1 MiB requests, ...) before any other request can arrive. Only
//! after INIT can the readahead window be raised — the kernel lets INIT
//! lower it, never raise it — so the mount then writes the backing
//! device's `read_ahead_kb` (and `max_ratio`, the share of dirty pages it
//! may hold) under `/sys/class/bdi/<major>:<minor>/`. Finally the
//! session's worker threads start, each on its own cloned fd.
//!
//! Owning the `mount(2)` call (rather than fuser's mount helper) means
//! nothing in fuser ever unmounts a path on its own: only
//! [`MountHandle`] does, and only while it knows the path is its mount.
//!
//! ## Unmount
//! [`MountHandle::unmount`] calls `umount2(path, 0)`: EBUSY becomes
//! [`FuseError::Busy`] naming the processes with files or directories
//! open under the mount (from `/proc/*/fd`, `cwd`, `root`) and the mounts
//! below it, and the handle stays usable (an EBUSY nobody visibly causes
//! — a `stat` passing through at that instant — is retried briefly
//! first). Then it waits for the session
//! threads to see the connection end (bounded by [`UNMOUNT_WAIT`]; if a
//! copy of the mount in another mount namespace keeps the connection
//! alive, it aborts the connection through fusectl). `force` is a lazy
//! unmount (`MNT_DETACH`): the name disappears at once, files still open
//! keep working until closed, and the session ends after that on its
//! own. Dropping a handle unmounts it, lazily if it is busy.
//!
//! ## Stale mounts
//! If the daemon dies, its mounts stay in the mount table with no one
//! serving them: every access fails with ENOTCONN. [`stale_mounts`] finds
//! those (a `fuse.tarn` mount whose root cannot be stat'ed for that
//! reason) so the daemon can detach them when it starts again.

use std::ffi::CString;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use fuser::{BackgroundSession, Config, Session, SessionACL};
use parking_lot::{Condvar, Mutex};
use tarn_zpl::Zpl;

use crate::ops::{FsConfig, Live, TarnFs};
use crate::snapdir::{SnapState, SnapshotSource};
use crate::{FuseError, MountOptions, DIRTY_RATIO_PCT, UNMOUNT_WAIT};

/// Most processes a busy error names.
const BUSY_HOLDERS_MAX: usize = 8;
/// Retries of an EBUSY unmount that nobody visibly holds, and the pause
/// before the first (growing linearly).
const UNMOUNT_BUSY_RETRIES: u32 = 5;
const UNMOUNT_BUSY_BACKOFF: std::time::Duration = std::time::Duration::from_millis(20);
/// How often, and how far apart, [`is_dead_mount`] asks again a mount
/// whose server is tearing down its FUSE io_uring queues (see there):
/// 25 × 2 ms: 50 ms, where the longest such window measured was ~2 ms.
const DYING_PROBES_MAX: u32 = 25;
const DYING_PROBE_PAUSE: std::time::Duration = std::time::Duration::from_millis(2);

/// What the kernel agreed to at INIT, and the readahead set afterwards.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelFeatures {
    pub writeback_cache: bool,
    pub parallel_dirops: bool,
    pub async_read: bool,
    pub readdirplus: bool,
    pub max_pages: bool,
    pub max_write: u32,
    /// The backing device's readahead window (KiB) as read back; 0 if it
    /// could not be read.
    pub read_ahead_kb: u32,
}

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    pub source: String,
    pub mountpoint: PathBuf,
    pub fstype: String,
    /// The superblock's device (major, minor).
    pub dev: (u32, u32),
    pub options: String,
}

/// Set when the session's file system is dropped (the session is over).
#[derive(Default)]
struct EndSignal {
    ended: Mutex<bool>,
    cv: Condvar,
}

/// Held by the file system; its drop signals the end of the session.
pub(crate) struct EndGuard(Arc<EndSignal>);

impl Drop for EndGuard {
    fn drop(&mut self) {
        *self.0.ended.lock() = true;
        self.0.cv.notify_all();
    }
}

impl EndSignal {
    fn wait(&self, timeout: std::time::Duration) -> bool {
        let mut e = self.ended.lock();
        if !*e {
            let _ = self.cv.wait_for(&mut e, timeout);
        }
        *e
    }
}

/// A mounted dataset. Unmounts on drop.
pub struct MountHandle {
    path: PathBuf,
    fsname: String,
    dev: Option<(u32, u32)>,
    session: Option<BackgroundSession>,
    end: Arc<EndSignal>,
    features: KernelFeatures,
    /// The snapshots `.zfs/snapshot` opened.
    snaps: Arc<SnapState>,
    notifier: Arc<OnceLock<fuser::Notifier>>,
    /// The filesystem served, shared with the session (see `Live`).
    live: Arc<Live>,
}

impl std::fmt::Debug for MountHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MountHandle")
            .field("path", &self.path)
            .field("fsname", &self.fsname)
            .field("dev", &self.dev)
            .field("mounted", &self.is_mounted())
            .finish()
    }
}

fn mount_err(opts: &MountOptions, path: &Path, source: io::Error) -> FuseError {
    FuseError::Mount {
        fsname: opts.fsname.clone(),
        path: path.to_path_buf(),
        source,
    }
}

fn check_options(opts: &MountOptions) -> Result<(), FuseError> {
    let bad =
        |s: &str| s.is_empty() || s.contains(|c: char| c == ',' || c.is_whitespace() || c == '\0');
    if opts.fsname.is_empty() || opts.fsname.contains('\0') {
        return Err(FuseError::Options(String::from(
            "fsname must be a non-empty name",
        )));
    }
    if bad(&opts.subtype) {
        return Err(FuseError::Options(format!(
            "bad subtype {:?}",
            opts.subtype
        )));
    }
    if opts.threads == 0 {
        return Err(FuseError::Options(String::from(
            "threads must be at least 1",
        )));
    }
    if opts.max_write < 4096 || opts.max_readahead < 4096 {
        return Err(FuseError::Options(String::from(
            "max_write and max_readahead must be at least 4096",
        )));
    }
    Ok(())
}

/// Mounts `zpl` at `mountpoint` and starts serving it. The caller decides
/// whether a non-empty directory may be mounted over (see
/// [`is_mountpoint_empty`]).
pub fn mount(
    zpl: Arc<Zpl>,
    mountpoint: &Path,
    opts: &MountOptions,
) -> Result<MountHandle, FuseError> {
    mount_with_snapshots(zpl, mountpoint, opts, None)
}

/// [`mount`] with a `.zfs/snapshot` directory served from `snapshots`
/// (see `snapdir`).
pub fn mount_with_snapshots(
    zpl: Arc<Zpl>,
    mountpoint: &Path,
    opts: &MountOptions,
    snapshots: Option<Arc<dyn SnapshotSource>>,
) -> Result<MountHandle, FuseError> {
    check_options(opts)?;
    let path = mountpoint
        .canonicalize()
        .map_err(|e| mount_err(opts, mountpoint, e))?;
    let root = zpl
        .getattr(zpl.root_ino())
        .map_err(|e| mount_err(opts, &path, io::Error::from_raw_os_error(e.errno())))?;
    let dev_fuse = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| mount_err(opts, &path, e))?;
    let fd: OwnedFd = dev_fuse.into();
    if opts.uring_per_queue > 0 {
        allow_fuse_uring();
    }
    sys_mount(&path, opts, &fd, root.mode).map_err(|e| mount_err(opts, &path, e))?;
    let dev = find_mount(&path).map(|m| m.dev);
    match start_session(zpl, &path, opts, fd, dev, snapshots) {
        Ok(h) => Ok(h),
        Err(e) => {
            let _ = umount2(&path, libc::MNT_DETACH);
            Err(mount_err(opts, &path, e))
        }
    }
}

fn start_session(
    zpl: Arc<Zpl>,
    path: &Path,
    opts: &MountOptions,
    fd: OwnedFd,
    dev: Option<(u32, u32)>,
    snapshots: Option<Arc<dyn SnapshotSource>>,
) -> io::Result<MountHandle> {
    let features = Arc::new(Mutex::new(KernelFeatures::default()));
    let end = Arc::new(EndSignal::default());
    let cfg = FsConfig {
        writeback_cache: opts.writeback_cache && !opts.readonly,
        default_permissions: opts.default_permissions,
        keep_cache: opts.keep_cache,
        max_write: opts.max_write,
        max_readahead: opts.max_readahead,
    };
    let notifier = Arc::new(OnceLock::new());
    let snaps = Arc::new(SnapState::new(snapshots));
    let live = Arc::new(Live::new(zpl, notifier.clone())?);
    let fs = TarnFs::new(
        cfg,
        features.clone(),
        live.clone(),
        notifier.clone(),
        snaps.clone(),
        EndGuard(end.clone()),
    )?;
    let acl = if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    let mut config = Config::default();
    config.acl = acl;
    config.n_threads = Some(opts.threads);
    config.clone_fd = true;
    config.poll = opts.poll.clone();
    config.uring_per_queue = opts.uring_per_queue;
    // The handshake (INIT) happens here, before any worker runs.
    let session = Session::from_fd(fs, fd, acl, config)?;
    let _ = notifier.set(session.notifier());
    let mut features = *features.lock();
    if let Some(dev) = dev {
        features.read_ahead_kb = tune_bdi(dev, opts);
    }
    let session = session.spawn()?;
    Ok(MountHandle {
        path: path.to_path_buf(),
        fsname: opts.fsname.clone(),
        dev,
        session: Some(session),
        end,
        features,
        snaps,
        notifier,
        live,
    })
}

fn cstr(b: &[u8]) -> io::Result<CString> {
    CString::new(b).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn sys_mount(path: &Path, opts: &MountOptions, fd: &OwnedFd, root_mode: u32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut data = format!(
        "fd={},rootmode={:o},user_id={},group_id={}",
        fd.as_raw_fd(),
        root_mode,
        // SAFETY: getters without preconditions.
        unsafe { libc::geteuid() },
        unsafe { libc::getegid() },
    );
    if opts.default_permissions {
        data.push_str(",default_permissions");
    }
    if opts.allow_other {
        data.push_str(",allow_other");
    }
    let mut flags: libc::c_ulong = 0;
    for (off, flag) in [
        (!opts.setuid, libc::MS_NOSUID),
        (!opts.devices, libc::MS_NODEV),
        (!opts.exec, libc::MS_NOEXEC),
        (opts.readonly, libc::MS_RDONLY),
    ] {
        if off {
            flags |= flag;
        }
    }
    let source = cstr(opts.fsname.as_bytes())?;
    let target = cstr(path.as_os_str().as_bytes())?;
    let typed = cstr(format!("fuse.{}", opts.subtype).as_bytes())?;
    let call = |fstype: &CString, data: &str| -> io::Result<()> {
        let data = cstr(data.as_bytes())?;
        // SAFETY: every pointer is a live NUL-terminated string.
        let r = unsafe {
            libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                flags,
                data.as_ptr().cast(),
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    match call(&typed, &data) {
        // A kernel without "fuse.<subtype>" types takes it as an option.
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
            call(&cstr(b"fuse")?, &format!("{data},subtype={}", opts.subtype))
        }
        r => r,
    }
}

/// The FUSE module's switch for io_uring transport (off by default; it only
/// changes anything for servers that ask for io_uring in INIT).
const FUSE_URING_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Lets this daemon's mounts use FUSE over io_uring (see "Transport" in
/// the crate comment). Without it (no such kernel, not root) the mounts
/// use `/dev/fuse` alone.
fn allow_fuse_uring() {
    match std::fs::read_to_string(FUSE_URING_PARAM) {
        Ok(v) if v.trim() == "Y" => {}
        Ok(_) => {
            if let Err(e) = std::fs::write(FUSE_URING_PARAM, "Y") {
                tracing::warn!(path = FUSE_URING_PARAM, error = %e,
                    "cannot enable FUSE over io_uring; using /dev/fuse");
            }
        }
        Err(_) => {}
    }
}

/// Raises the backing device's readahead and dirty share; returns the
/// readahead (KiB) read back.
fn tune_bdi(dev: (u32, u32), opts: &MountOptions) -> u32 {
    let dir = format!("/sys/class/bdi/{}:{}", dev.0, dev.1);
    let ra = format!("{dir}/read_ahead_kb");
    if let Err(e) = std::fs::write(&ra, (opts.max_readahead / 1024).to_string()) {
        tracing::warn!(path = %ra, error = %e, "cannot raise FUSE readahead");
    }
    if !opts.readonly {
        let mr = format!("{dir}/max_ratio");
        if let Err(e) = std::fs::write(&mr, DIRTY_RATIO_PCT.to_string()) {
            tracing::warn!(path = %mr, error = %e, "cannot raise FUSE dirty-page share");
        }
    }
    std::fs::read_to_string(&ra)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn umount2(path: &Path, flags: libc::c_int) -> io::Result<()> {
    let target = cstr(path.as_os_str().as_bytes())?;
    // SAFETY: a live NUL-terminated string.
    if unsafe { libc::umount2(target.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl MountHandle {
    pub fn mountpoint(&self) -> &Path {
        &self.path
    }

    /// The mount's device (major, minor): the minor numbers its FUSE
    /// connection in `/sys/fs/fuse/connections` (see [`abort_connection`]).
    pub fn dev(&self) -> Option<(u32, u32)> {
        self.dev
    }

    pub fn fsname(&self) -> &str {
        &self.fsname
    }

    /// What the kernel agreed to when the mount started.
    pub fn features(&self) -> KernelFeatures {
        self.features
    }

    /// Before the mounted dataset is rolled back: the kernel's dirty pages
    /// are written back and the filesystem served is suspended (its
    /// changes fail with ESTALE), so nothing reaches the dataset after.
    pub fn quiesce(&self) {
        write_back(&self.path);
        self.live.quiesce(&self.notifier);
    }

    /// Serves `zpl` in place of the filesystem served now (after a
    /// rollback): open files of the same objects go on with the new
    /// contents, the others answer ENOENT, and the kernel's caches of the
    /// old contents are dropped.
    pub fn replace(&self, zpl: Arc<Zpl>) {
        self.live.replace(zpl, &self.notifier);
    }

    /// Snapshot `name` was destroyed or renamed: its filesystem is closed
    /// (its nodes answer ESTALE) and the kernel forgets the name in
    /// `.zfs/snapshot`.
    pub fn snapshot_gone(&self, name: &str) {
        self.snaps.close(name);
        if let Some(n) = self.notifier.get() {
            let dir = fuser::INodeNo(crate::snapdir::CTL_SNAPDIR);
            // The kernel may never have looked the name up: ENOENT is fine.
            let _ = n.inval_entry(dir, std::ffi::OsStr::new(name));
        }
    }

    /// Still served (false after unmount, or if someone else unmounted it).
    pub fn is_mounted(&self) -> bool {
        self.session
            .as_ref()
            .is_some_and(|s| !s.guard.is_finished())
    }

    /// Unmounts: EBUSY is [`FuseError::Busy`] and leaves the mount (and
    /// this handle) as they were; `force` detaches lazily instead. After
    /// a clean unmount the session has ended and released its `Arc<Zpl>`.
    pub fn unmount(&mut self, force: bool) -> Result<(), FuseError> {
        let Some(session) = self.session.take() else {
            return Err(FuseError::NotMounted {
                path: self.path.clone(),
            });
        };
        if let Err(e) = self.check_top() {
            self.session = Some(session);
            return Err(e);
        }
        match try_umount(&self.path, force) {
            // NotMounted: someone unmounted it already (`umount` by hand).
            Umount::Done | Umount::NotMounted => {}
            Umount::Busy(holders) => {
                self.session = Some(session);
                return Err(FuseError::Busy {
                    path: self.path.clone(),
                    holders,
                });
            }
            Umount::Failed(source) => {
                self.session = Some(session);
                return Err(FuseError::Unmount {
                    path: self.path.clone(),
                    source,
                });
            }
        }
        if force {
            // The session serves files still open until they are closed;
            // its thread ends by itself then.
            drop(session);
        } else {
            self.finish(session);
        }
        Ok(())
    }

    /// Refuses to unmount whatever is mounted on top of our mount.
    fn check_top(&self) -> Result<(), FuseError> {
        let (Some(dev), Some(top)) = (self.dev, find_mount(&self.path)) else {
            return Ok(());
        };
        if top.dev == dev {
            return Ok(());
        }
        Err(FuseError::Busy {
            path: self.path.clone(),
            holders: vec![format!(
                "{} ({}) is mounted on top of it",
                top.source, top.fstype
            )],
        })
    }

    /// Waits for the session threads to see the connection end.
    fn finish(&self, session: BackgroundSession) {
        if !self.end.wait(UNMOUNT_WAIT) {
            // Still alive: a copy of the mount in another namespace.
            if let Some((_, minor)) = self.dev {
                let abort = format!("/sys/fs/fuse/connections/{minor}/abort");
                let _ = std::fs::write(abort, "1");
            }
            if !self.end.wait(UNMOUNT_WAIT) {
                tracing::warn!(path = %self.path.display(), "FUSE session still running after unmount; detached");
                return;
            }
        }
        if let Err(e) = session.join() {
            tracing::warn!(path = %self.path.display(), error = %e, "FUSE session ended with an error");
        }
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if self.session.is_none() {
            return;
        }
        match self.unmount(false) {
            Ok(()) => {}
            Err(FuseError::Busy { .. }) => {
                if let Err(e) = self.unmount(true) {
                    tracing::warn!(error = %e, "lazy unmount at drop failed");
                }
            }
            Err(e) => tracing::warn!(error = %e, "unmount at drop failed"),
        }
    }
}

// ------------------------------------------------------------ mount table

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let oct = &b[i + 1..i + 4];
            if oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                let v = oct.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_mountinfo_line(line: &str) -> Option<MountInfo> {
    let (left, right) = line.split_once(" - ")?;
    let l: Vec<&str> = left.split(' ').collect();
    let r: Vec<&str> = right.split(' ').collect();
    if l.len() < 6 || r.len() < 2 {
        return None;
    }
    let (maj, min) = l[2].split_once(':')?;
    Some(MountInfo {
        dev: (maj.parse().ok()?, min.parse().ok()?),
        mountpoint: PathBuf::from(unescape(l[4])),
        options: l[5].to_string(),
        fstype: r[0].to_string(),
        source: unescape(r[1]),
    })
}

fn mount_table() -> Vec<MountInfo> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|s| s.lines().filter_map(parse_mountinfo_line).collect())
        .unwrap_or_default()
}

/// The topmost mount at `path` (the last one listed there).
fn find_mount(path: &Path) -> Option<MountInfo> {
    mount_table()
        .into_iter()
        .rev()
        .find(|m| m.mountpoint == path)
}

/// Every `fuse.tarn` mount in this mount namespace.
pub fn tarn_mounts() -> Vec<MountInfo> {
    let fstype = format!("fuse.{}", crate::SUBTYPE);
    mount_table()
        .into_iter()
        .filter(|m| m.fstype == fstype)
        .collect()
}

/// `fuse.tarn` mounts nobody serves any more (their daemon died): their
/// root fails with ENOTCONN. Deepest first, so they can be detached in
/// order with [`unmount_path`]`(path, true)`. Mounts served by a live
/// daemon — this one or another — are left out.
pub fn stale_mounts() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = tarn_mounts()
        .into_iter()
        .filter(|m| is_dead_mount(&m.mountpoint))
        .map(|m| m.mountpoint)
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out.dedup();
    out
}

/// Does the FUSE mount at `path` have no daemon behind it? Asked with
/// statfs(2), which always goes to the server: a stat could be answered
/// from the kernel's attribute cache for a while after the daemon died.
///
/// A dead server's mount answers ENOTCONN, or ECONNABORTED for a request
/// that was queued when the connection was aborted. Over FUSE's io_uring
/// transport there is a moment before that: the dead daemon's rings are
/// torn down asynchronously, after its file descriptors (and its lock)
/// are gone, and a request sent meanwhile ends with ECANCELED: for a
/// couple of milliseconds after a SIGKILL, before ECONNABORTED and then
/// ENOTCONN (docs/MEASUREMENTS.md, "FUSE: a killed daemon's mount"). A
/// daemon restarted at once (its lock was free) that took ECANCELED for
/// "alive" kept the dead mount and could not mount over it. So ECANCELED
/// is asked again until the answer settles, and taken as dead if it never
/// does: a server whose queues cancel every request is going away.
pub fn is_dead_mount(path: &Path) -> bool {
    for _ in 0..DYING_PROBES_MAX {
        match statfs_errno(path) {
            Some(libc::ECANCELED) => std::thread::sleep(DYING_PROBE_PAUSE),
            answer => return matches!(answer, Some(libc::ENOTCONN | libc::ECONNABORTED)),
        }
    }
    true
}

/// statfs(2) of `path`: `None` if it answered, else its errno.
fn statfs_errno(path: &Path) -> Option<i32> {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return Some(libc::EINVAL);
    };
    let mut buf = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path that outlives the call, and
    // `buf` has room for one `struct statfs`, which the kernel fills (or
    // leaves untouched on error); it is never read.
    let r = unsafe { libc::statfs(c.as_ptr(), buf.as_mut_ptr()) };
    (r != 0).then(|| {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    })
}

/// Unmounts whatever is mounted at `path` (a mount this process holds no
/// handle for: a stale one, or one named by path on the command line).
pub fn unmount_path(path: &Path, force: bool) -> Result<(), FuseError> {
    match try_umount(path, force) {
        Umount::Done => Ok(()),
        Umount::NotMounted => Err(FuseError::NotMounted {
            path: path.to_path_buf(),
        }),
        Umount::Busy(holders) => Err(FuseError::Busy {
            path: path.to_path_buf(),
            holders,
        }),
        Umount::Failed(source) => Err(FuseError::Unmount {
            path: path.to_path_buf(),
            source,
        }),
    }
}

enum Umount {
    Done,
    NotMounted,
    Busy(Vec<String>),
    Failed(io::Error),
}

/// `umount2`, lazily if `force`. EBUSY with nobody visibly holding the
/// mount is a passing reference (a `stat` or `df` walking through it at
/// that moment) and is tried again a few times.
fn try_umount(path: &Path, force: bool) -> Umount {
    let flags = if force { libc::MNT_DETACH } else { 0 };
    let mut attempt = 0;
    loop {
        match umount2(path, flags) {
            Ok(()) => return Umount::Done,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Umount::NotMounted,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                let holders = busy_holders(path);
                if !holders.is_empty() || attempt == UNMOUNT_BUSY_RETRIES {
                    return Umount::Busy(holders);
                }
                attempt += 1;
                std::thread::sleep(UNMOUNT_BUSY_BACKOFF * attempt);
            }
            Err(e) => return Umount::Failed(e),
        }
    }
}

/// True if `path` is an empty directory or does not exist yet: the only
/// places a dataset is mounted without `-O` (overlay).
/// Changes the per-mount flags of the mount at `path` in place
/// (`MS_REMOUNT | MS_BIND`: the VFS flags only, the filesystem is not
/// involved): `zfs set exec|setuid|devices` on a mounted dataset.
pub fn remount_flags(path: &Path, exec: bool, setuid: bool, devices: bool) -> io::Result<()> {
    let mut flags: libc::c_ulong = libc::MS_REMOUNT | libc::MS_BIND;
    for (off, flag) in [
        (!setuid, libc::MS_NOSUID),
        (!devices, libc::MS_NODEV),
        (!exec, libc::MS_NOEXEC),
    ] {
        if off {
            flags |= flag;
        }
    }
    let target = cstr(path.as_os_str().as_bytes())?;
    // SAFETY: `target` is a live NUL-terminated string; null source, type
    // and data are allowed for a remount.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            target.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn is_mountpoint_empty(path: &Path) -> bool {
    match std::fs::read_dir(path) {
        Ok(mut d) => d.next().is_none(),
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

// ------------------------------------------------------------ busy

/// Who keeps `path` busy: processes with a file, working directory or
/// root under it, and mounts below it.
fn busy_holders(path: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut more = 0usize;
    for m in mount_table() {
        if m.mountpoint != path && m.mountpoint.starts_with(path) {
            out.push(format!(
                "{} is mounted at {}",
                m.source,
                m.mountpoint.display()
            ));
        }
    }
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Some(what) = process_use(pid, path) {
            if out.len() < BUSY_HOLDERS_MAX {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                out.push(format!("pid {pid} ({}) {what}", comm.trim()));
            } else {
                more += 1;
            }
        }
    }
    if more > 0 {
        out.push(format!("and {more} more processes"));
    }
    out
}

/// How process `pid` uses something under `path`, if it does.
fn process_use(pid: u32, path: &Path) -> Option<String> {
    let under = |l: &Path| l == path || l.starts_with(path);
    for (link, what) in [
        ("cwd", "has its working directory"),
        ("root", "has its root"),
    ] {
        if let Ok(l) = std::fs::read_link(format!("/proc/{pid}/{link}")) {
            if under(&l) {
                return Some(format!("{what} at {}", l.display()));
            }
        }
    }
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    for fd in fds.flatten() {
        if let Ok(l) = std::fs::read_link(fd.path()) {
            if under(&l) {
                return Some(format!("has {} open", l.display()));
            }
        }
    }
    None
}

/// `syncfs` of a tarn mountpoint, from a child process: the kernel writes
/// back the dirty pages it caches, as FUSE writes to this daemon.
///
/// A child process makes the call (`sync -f`, coreutils), not a thread of
/// the daemon: should the daemon be killed meanwhile, a thread of it
/// waiting there for its own writes could never return (nobody answers
/// them), so the daemon could never finish dying and close `/dev/fuse`,
/// which is what ends such waits. The child holds no descriptor of the
/// daemon's (they are close-on-exec) and gets its error once the daemon
/// is gone. Without `sync`, the daemon calls `syncfs` itself.
pub fn write_back(path: &Path) {
    match std::process::Command::new("sync")
        .arg("-f")
        .arg(path)
        .stdin(std::process::Stdio::null())
        .status()
    {
        Ok(status) if status.success() => return,
        Ok(status) => {
            tracing::warn!(path = %path.display(), %status, "sync -f failed");
            return;
        }
        Err(_) => {}
    }
    let Ok(dir) = std::fs::File::open(path) else {
        return;
    };
    // SAFETY: `dir` is an open descriptor for the whole call; syncfs only
    // reads the descriptor number.
    let rc = unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&dir)) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        tracing::warn!(path = %path.display(), error = %e, "syncfs failed");
    }
}

/// Where the kernel lists FUSE connections (the `fusectl` file system).
const FUSECTL: &str = "/sys/fs/fuse/connections";

/// Aborts the FUSE connection of the `fuse.tarn` mount at `path` whose
/// device is `dev` (as [`MountHandle::dev`] said when it was mounted), if
/// that very mount is still there: every request waiting on it fails with
/// ECONNABORTED at once. For a daemon that was killed while a thread of it
/// waited on one of its own mounts (see [`write_back`]): that thread, and
/// so the daemon, can end only when the connection does. Mounts `fusectl`
/// on its usual place if it is not there. Returns whether it aborted.
pub fn abort_connection(dev: (u32, u32), path: &Path) -> io::Result<bool> {
    let fstype = format!("fuse.{}", crate::SUBTYPE);
    let mounted = mount_table()
        .iter()
        .any(|m| m.dev == dev && m.mountpoint == path && m.fstype == fstype);
    if !mounted {
        return Ok(false);
    }
    let abort = Path::new(FUSECTL).join(dev.1.to_string()).join("abort");
    if !abort.exists() {
        let target = CString::new(FUSECTL).expect("no NUL");
        let fstype = CString::new("fusectl").expect("no NUL");
        // SAFETY: mount(2) with NUL-terminated strings that outlive the
        // call and no data argument.
        let rc = unsafe {
            libc::mount(
                fstype.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EBUSY) {
                return Err(e);
            }
        }
    }
    std::fs::write(&abort, "1")?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines() {
        let l = "36 35 0:52 / /mnt/my\\040dir rw,nosuid,nodev,relatime shared:1 - fuse.tarn tank/my\\040fs rw,user_id=0,group_id=0";
        let m = parse_mountinfo_line(l).unwrap();
        assert_eq!(m.dev, (0, 52));
        assert_eq!(m.mountpoint, PathBuf::from("/mnt/my dir"));
        assert_eq!(m.fstype, "fuse.tarn");
        assert_eq!(m.source, "tank/my fs");
        assert!(parse_mountinfo_line("garbage").is_none());
        assert_eq!(unescape("a\\134b\\"), "a\\b\\");
    }

    #[test]
    fn options_are_checked() {
        let ok = MountOptions::default();
        assert!(check_options(&ok).is_ok());
        assert!(ok.threads >= 4 && ok.allow_other && ok.default_permissions);
        for bad in [
            MountOptions {
                threads: 0,
                ..ok.clone()
            },
            MountOptions {
                fsname: String::new(),
                ..ok.clone()
            },
            MountOptions {
                subtype: "a,b".into(),
                ..ok.clone()
            },
            MountOptions {
                max_write: 1,
                ..ok.clone()
            },
        ] {
            assert!(matches!(check_options(&bad), Err(FuseError::Options(_))));
        }
    }

    #[test]
    fn empty_mountpoints() {
        let d = tempfile::tempdir().unwrap();
        assert!(is_mountpoint_empty(d.path()));
        assert!(is_mountpoint_empty(&d.path().join("missing")));
        std::fs::write(d.path().join("f"), b"x").unwrap();
        assert!(!is_mountpoint_empty(d.path()));
        assert!(!is_mountpoint_empty(&d.path().join("f")));
    }
}
