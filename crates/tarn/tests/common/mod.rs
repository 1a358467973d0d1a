//! Harness for end-to-end tests through the real `tarn` binary.
//!
//! Each [`Env`] owns a temporary directory holding its socket, run
//! directory, cache file and sparse-file vdevs, passed to every command
//! through `TARN_SOCKET`, `TARN_RUN_DIR` and `TARN_CACHEFILE`: tests never
//! touch /run or /etc and run in parallel. The first command starts the
//! daemon (as a user's would); dropping the `Env` asks it to shut down and
//! waits for it to exit (SIGKILL if it does not within the limit), so no
//! daemon outlives its test.

#![allow(dead_code)] // each test binary uses part of the harness

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use tarn::api::Request;
use tarn::client::Client;
use tarn::paths::{ENV_CACHEFILE, ENV_RUN_DIR, ENV_SOCKET};

/// How long a daemon may take to exit after being asked to or killed.
const DAEMON_EXIT_WAIT_MAX: Duration = Duration::from_secs(20);

pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

pub struct Env {
    pub dir: tempfile::TempDir,
}

/// A finished command.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Env {
    pub fn new() -> Env {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("vdevs")).expect("vdev dir");
        Env { dir }
    }

    pub fn run_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    pub fn socket(&self) -> PathBuf {
        self.run_dir().join("tarn.sock")
    }

    pub fn cachefile(&self) -> PathBuf {
        self.dir.path().join("tarn.cache")
    }

    /// Where this test's datasets mount: the daemon puts default
    /// mountpoints (`/POOL/PATH`) under it (`TARN_MOUNT_ROOT`), so tests
    /// never mount on the real `/POOL`.
    pub fn mount_root(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    /// The directory dataset `ds` mounts on by default.
    pub fn mountpoint(&self, ds: &str) -> PathBuf {
        self.mount_root().join(ds)
    }

    /// The directory holding the vdev files (for `zpool import -d`).
    pub fn vdev_dir(&self) -> String {
        self.dir.path().join("vdevs").to_string_lossy().into_owned()
    }

    /// Path of vdev `name` (whether or not it exists).
    pub fn path(&self, name: &str) -> String {
        format!("{}/{name}", self.vdev_dir())
    }

    /// A sparse file of `size` bytes; returns its path.
    pub fn vdev(&self, name: &str, size: u64) -> String {
        let path = self.path(name);
        File::create(&path)
            .expect("create vdev")
            .set_len(size)
            .expect("size vdev");
        path
    }

    /// `tarn ARGS` as a command to configure (stdin/stdout redirected to
    /// a stream file or a pipe) and run.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tarn"));
        c.args(args)
            .env(ENV_SOCKET, self.socket())
            .env(ENV_RUN_DIR, self.run_dir())
            .env(ENV_CACHEFILE, self.cachefile())
            .env("TARN_MOUNT_ROOT", self.mount_root());
        c
    }

    pub fn run(&self, args: &[&str]) -> Run {
        let out: Output = self.cmd(args).output().expect("run tarn");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Run a command that must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let r = self.run(args);
        assert_eq!(r.code, 0, "tarn {args:?} failed:\n{}{}", r.stdout, r.stderr);
        r.stdout
    }

    /// Run a command that must fail with exit status 1 and a message; its
    /// stderr.
    pub fn fail(&self, args: &[&str]) -> String {
        let r = self.run(args);
        assert_eq!(
            r.code, 1,
            "tarn {args:?} should fail:\n{}{}",
            r.stdout, r.stderr
        );
        assert!(!r.stderr.trim().is_empty(), "tarn {args:?} failed silently");
        r.stderr
    }

    /// `zpool list -H -o name`: the imported pools.
    pub fn pools(&self) -> Vec<String> {
        let out = self.ok(&["zpool", "list", "-H", "-o", "name"]);
        // zpool(8) says so on stdout even in scripted mode.
        out.lines()
            .filter(|l| *l != "no pools available")
            .map(str::to_string)
            .collect()
    }

    /// `zfs list -H -r -o name` of everything.
    pub fn datasets(&self) -> Vec<String> {
        self.ok(&["zfs", "list", "-H", "-r", "-o", "name"])
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// One property value as `zfs get -Hp -o value`.
    pub fn get(&self, prop: &str, ds: &str) -> String {
        self.ok(&["zfs", "get", "-H", "-p", "-o", "value", prop, ds])
            .trim()
            .to_string()
    }

    /// The pid of the running daemon (from its lock file), if any.
    pub fn daemon_pid(&self) -> Option<i32> {
        let text = std::fs::read_to_string(self.run_dir().join("tarn.lock")).ok()?;
        text.trim().parse().ok()
    }

    /// Whether a daemon holds the lock file.
    fn daemon_alive(&self) -> bool {
        let Ok(file) = File::open(self.run_dir().join("tarn.lock")) else {
            return false;
        };
        // A shared lock is refused while the daemon holds its exclusive one.
        // SAFETY: flock on a file descriptor we own; no memory involved.
        let rc = unsafe {
            libc::flock(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                libc::LOCK_SH | libc::LOCK_NB,
            )
        };
        rc != 0
    }

    /// Wait (bounded) for the daemon to release its lock, i.e. to exit.
    fn wait_daemon_gone(&self) -> bool {
        let deadline = Instant::now() + DAEMON_EXIT_WAIT_MAX;
        while self.daemon_alive() {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// Kill the daemon as a crash would (SIGKILL) and wait until it is gone.
    pub fn kill_daemon(&self) {
        self.kill_daemon_and(|| ());
    }

    /// [`Env::kill_daemon`], running `at_once` right after the signal is
    /// sent, while the daemon may still be dying.
    pub fn kill_daemon_and<R>(&self, at_once: impl FnOnce() -> R) -> R {
        let pid = self.daemon_pid().expect("a daemon is running");
        // SAFETY: kill(2) with a pid read from our own daemon's lock file.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
        let r = at_once();
        assert!(self.wait_daemon_gone(), "daemon {pid} survived SIGKILL");
        r
    }
}

impl Env {
    /// Ask the daemon to shut down cleanly; true once it has exited.
    pub fn stop_daemon(&self) -> bool {
        if let Ok(mut client) = Client::connect(&self.socket()) {
            // Not waited for: a daemon that hangs on shutdown is killed by
            // the caller after `wait_daemon_gone` gives up.
            std::thread::spawn(move || {
                let _ = client.call(&Request::Shutdown {});
            });
        }
        self.wait_daemon_gone()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if !self.stop_daemon() {
            if let Some(pid) = self.daemon_pid() {
                // SAFETY: as in kill_daemon.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
                self.wait_daemon_gone();
            }
        }
        // A test that killed the daemon and failed before another one
        // started leaves its dead mounts behind (a daemon that stopped
        // took its own away): detach them as the next daemon would, or
        // they outlive the test and its directory cannot be removed.
        tarn::engine::clean_stale_mounts(Some(&self.mount_root()));
    }
}

// ------------------------------------------------------------------ labels

const LABEL_BYTES: u64 = 256 << 10;
/// Offset of the config area inside a label.
const LABEL_CONFIG_OFFSET: u64 = 16 << 10;

/// Byte offset of label `l` (0..4) on a device of `size` bytes: two at the
/// front, two at the end of the 256 KiB-aligned size (docs/FORMAT.md).
pub fn label_offset(l: u64, size: u64) -> u64 {
    let osize = size & !(LABEL_BYTES - 1);
    if l < 2 {
        l * LABEL_BYTES
    } else {
        osize - (4 - l) * LABEL_BYTES
    }
}

/// Damage the config of label `l` of the device at `path` (flip bytes in
/// its payload, so its checksum no longer matches).
pub fn corrupt_label(path: &str, l: u64) {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open vdev");
    let size = file.metadata().expect("stat").len();
    let at = label_offset(l, size) + LABEL_CONFIG_OFFSET + 100;
    let mut buf = [0u8; 16];
    file.read_exact_at(&mut buf, at).expect("read label");
    for b in &mut buf {
        *b ^= 0xa5;
    }
    file.write_all_at(&buf, at).expect("write label");
    file.sync_all().expect("sync");
}

/// The bytes of all four labels of a device (to show they are untouched).
pub fn label_bytes(path: &str) -> Vec<u8> {
    let file = File::open(path).expect("open vdev");
    let size = file.metadata().expect("stat").len();
    let mut out = Vec::new();
    for l in 0..4 {
        let mut buf = vec![0u8; LABEL_BYTES as usize];
        file.read_exact_at(&mut buf, label_offset(l, size))
            .expect("read label");
        out.extend_from_slice(&buf);
    }
    out
}

/// Bytes that do not compress (xorshift), so space use is real.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A background writer for tests that change devices under load: files
/// `w0`, `w1`, … of 256 KiB under a directory, each fsynced when asked,
/// until [`Writer::stop`] or `max` files.
pub struct Writer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(String, Vec<u8>)>>,
}

impl Writer {
    pub fn spawn(root: PathBuf, max: u64, seed: u64, fsync: bool) -> Writer {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut written = Vec::new();
            for i in 0..max {
                if flag.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let path = root.join(format!("w{i}")).display().to_string();
                let data = noise(256 << 10, seed + i);
                std::fs::write(&path, &data).unwrap();
                if fsync {
                    File::open(&path).unwrap().sync_all().unwrap();
                }
                written.push((path, data));
            }
            written
        });
        Writer { stop, thread }
    }

    /// Stops the writer; what it wrote, for [`check_files`].
    pub fn stop(self) -> Vec<(String, Vec<u8>)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().expect("the writer thread panicked")
    }
}

/// Asserts that each `(path, data)` reads back as written.
pub fn check_files(files: &[(String, Vec<u8>)]) {
    for (path, data) in files {
        assert!(
            std::fs::read(path).unwrap() == *data,
            "{path} reads back wrong"
        );
    }
}

/// `zpool status POOL` once it says a resilver is done (within a minute).
pub fn wait_resilvered(env: &Env, pool: &str) -> String {
    let t0 = Instant::now();
    loop {
        let st = env.ok(&["zpool", "status", pool]);
        if st.contains("scan: resilvered ") {
            return st;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "{st}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The vdev tree lines of `zpool status` text (NAME column only), in order.
pub fn tree_names(status: &str) -> Vec<String> {
    status
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("NAME"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect()
}

/// Whether `haystack` holds the `needles` lines in this order.
pub fn in_order(haystack: &str, needles: &[String]) -> bool {
    let mut lines = haystack.lines();
    needles.iter().all(|n| lines.any(|l| l.trim_end() == n))
}

pub fn exists(path: &str) -> bool {
    Path::new(path).exists()
}

// ------------------------------------------------------------------ mounts

/// Mount points (from /proc/self/mountinfo) at or below `dir`, with their
/// file system types.
pub fn mounts_under(dir: &Path) -> Vec<(PathBuf, String)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let mut out = Vec::new();
    for line in info.lines() {
        // id parent major:minor root MOUNTPOINT options... - FSTYPE source ...
        let mut fields = line.split(' ');
        let Some(mp) = fields.nth(4) else { continue };
        let fstype = line
            .split(" - ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or("");
        let mp = PathBuf::from(unescape_mountinfo(mp));
        if mp.starts_with(dir) {
            out.push((mp, fstype.to_string()));
        }
    }
    out
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            out.push(u8::from_str_radix(&s[i + 1..i + 4], 8).unwrap_or(b'?'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether a FUSE file system is mounted exactly at `path`.
pub fn is_fuse_mounted(path: &Path) -> bool {
    mounts_under(path)
        .iter()
        .any(|(mp, fstype)| mp == path && fstype.starts_with("fuse"))
}

/// A pool whose root dataset is mounted, for the POSIX tests. Dropping it
/// stops the daemon (which unmounts everything) and then checks that no
/// mount is left under the test's temporary directory; a leftover one is
/// detached (so the temp dir can be removed) and fails the test.
pub struct Mounted {
    pub env: Env,
    pub pool: String,
}

impl Mounted {
    /// `zpool create POOL VDEVS...` where each vdev spec is a name of a
    /// sparse file of `vdev_size` bytes or a keyword (mirror, raidz...).
    pub fn new(pool: &str, layout: &[&str], vdev_size: u64) -> Mounted {
        Self::with_options(pool, layout, vdev_size, &[])
    }

    /// As [`Mounted::new`] with extra `zpool create` options before the
    /// pool name (`-O prop=value`, ...).
    pub fn with_options(pool: &str, layout: &[&str], vdev_size: u64, opts: &[&str]) -> Mounted {
        let env = Env::new();
        let mut args: Vec<String> = vec!["zpool".into(), "create".into()];
        args.extend(opts.iter().map(|s| s.to_string()));
        args.push(pool.into());
        for v in layout {
            if matches!(*v, "mirror" | "raidz" | "raidz1" | "raidz2" | "raidz3") {
                args.push(v.to_string());
            } else {
                args.push(env.vdev(v, vdev_size));
            }
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        env.ok(&argv);
        let m = Mounted {
            env,
            pool: pool.into(),
        };
        m.assert_mounted(pool);
        m
    }

    /// Where dataset `ds` is mounted (its default mountpoint).
    pub fn mnt(&self, ds: &str) -> PathBuf {
        self.env.mountpoint(ds)
    }

    /// The pool's root dataset mount.
    pub fn root(&self) -> PathBuf {
        self.mnt(&self.pool)
    }

    pub fn assert_mounted(&self, ds: &str) {
        let mp = self.mnt(ds);
        assert!(
            is_fuse_mounted(&mp),
            "{ds} is not mounted at {}; mounts under the test dir: {:?}",
            mp.display(),
            mounts_under(self.env.dir.path())
        );
    }

    pub fn assert_not_mounted(&self, ds: &str) {
        let mp = self.mnt(ds);
        assert!(
            !is_fuse_mounted(&mp),
            "{ds} is still mounted at {}",
            mp.display()
        );
    }

    /// Export and import the pool again (unmount, remount: caches gone).
    pub fn remount(&self) {
        self.env.ok(&["zpool", "export", &self.pool]);
        self.assert_not_mounted(&self.pool);
        self.env
            .ok(&["zpool", "import", "-d", &self.env.vdev_dir(), &self.pool]);
        self.assert_mounted(&self.pool);
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let stopped = self.env.stop_daemon();
        let left = mounts_under(self.env.dir.path());
        for (mp, _) in &left {
            let c = std::ffi::CString::new(mp.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: umount2 with a NUL-terminated path we own.
            unsafe {
                libc::umount2(c.as_ptr(), libc::MNT_DETACH);
            }
        }
        if !std::thread::panicking() {
            assert!(stopped, "the daemon did not stop");
            assert!(
                left.is_empty(),
                "mounts left after the daemon stopped: {left:?}"
            );
        }
    }
}

// ------------------------------------------------------------------ syscalls

/// The errno of a failed call (0 for success).
pub fn errno_of<T>(r: std::io::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().expect("an OS error"),
    }
}

pub fn cpath(p: &Path) -> std::ffi::CString {
    std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("path without NUL")
}

/// `-1` → the errno as an `io::Error`; anything else → the value.
pub fn check<T: TryInto<i64> + Copy>(rc: T) -> std::io::Result<T> {
    if rc.try_into().ok() == Some(-1) {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Run `f` in a forked child that first becomes `uid`/`gid` with only
/// `gid` as supplementary group; its result is the errno `f` left (0 when
/// it returned >= 0). `f` runs after fork in a threaded process, so it
/// must only make async-signal-safe calls: raw libc calls on data
/// prepared before, no allocation, no locks.
pub fn as_user<F: FnOnce() -> i64>(uid: u32, gid: u32, f: F) -> i32 {
    // SAFETY: the child only calls async-signal-safe libc functions (the
    // caller's contract for `f`) and leaves with _exit.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let groups = [gid];
            if libc::setgroups(1, groups.as_ptr()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                libc::_exit(255);
            }
            let rc = f();
            let code = if rc < 0 { *libc::__errno_location() } else { 0 };
            libc::_exit(code);
        }
        let mut status = 0;
        let waited = libc::waitpid(pid, &mut status, 0);
        assert_eq!(waited, pid, "waitpid");
        assert!(libc::WIFEXITED(status), "child died: status {status:#x}");
        let code = libc::WEXITSTATUS(status);
        assert_ne!(code, 255, "the child could not become {uid}:{gid}");
        code
    }
}

/// This process's umask (read from /proc, so nothing changes it).
pub fn umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .expect("Umask line");
    u32::from_str_radix(line.trim(), 8).expect("octal umask")
}

impl Env {
    /// What the daemon wrote to its log (empty if nothing yet).
    pub fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.run_dir().join("daemon.log")).unwrap_or_default()
    }
}

// ------------------------------------------------------------------- tmpfs

/// A tmpfs of `bytes` mounted on a directory of its own: a file there
/// gets ENOSPC once it is full — a real I/O error for a device on it.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(bytes: u64) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let target = cpath(dir.path());
        let opts = std::ffi::CString::new(format!("size={bytes}")).unwrap();
        // SAFETY: mount(2) with NUL-terminated strings we own.
        let rc = unsafe {
            libc::mount(
                c"tarn-test-tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                opts.as_ptr().cast(),
            )
        };
        assert_eq!(rc, 0, "mount tmpfs: {}", std::io::Error::last_os_error());
        Tmpfs { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Frees what `fill` took.
    pub fn unfill(&self) {
        std::fs::remove_file(self.path().join("filler")).unwrap();
    }

    /// Fills the file system up.
    pub fn fill(&self) {
        let mut f = std::fs::File::create(self.path().join("filler")).unwrap();
        let chunk = vec![0xa5u8; MIB as usize];
        while std::io::Write::write_all(&mut f, &chunk).is_ok() {}
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let target = cpath(self.dir.path());
        // SAFETY: umount2 with a NUL-terminated path we own; a device
        // still open in a daemon does not keep a lazy unmount from working.
        unsafe {
            libc::umount2(target.as_ptr(), libc::MNT_DETACH);
        }
    }
}
