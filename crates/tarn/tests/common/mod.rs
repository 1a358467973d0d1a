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

    pub fn run(&self, args: &[&str]) -> Run {
        let out: Output = Command::new(env!("CARGO_BIN_EXE_tarn"))
            .args(args)
            .env(ENV_SOCKET, self.socket())
            .env(ENV_RUN_DIR, self.run_dir())
            .env(ENV_CACHEFILE, self.cachefile())
            .env("TARN_MOUNT_ROOT", self.mount_root())
            .output()
            .expect("run tarn");
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
        let pid = self.daemon_pid().expect("a daemon is running");
        // SAFETY: kill(2) with a pid read from our own daemon's lock file.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
        assert!(self.wait_daemon_gone(), "daemon {pid} survived SIGKILL");
    }
}

impl Env {
    /// Ask the daemon to shut down cleanly; true once it has exited.
    pub fn stop_daemon(&self) -> bool {
        if let Ok(mut client) = Client::connect(&self.socket()) {
            let _ = client.call(&Request::Shutdown {});
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

/// Whether `haystack` holds the `needles` lines in this order.
pub fn in_order(haystack: &str, needles: &[String]) -> bool {
    let mut lines = haystack.lines();
    needles.iter().all(|n| lines.any(|l| l.trim_end() == n))
}

pub fn exists(path: &str) -> bool {
    Path::new(path).exists()
}
