//! Where the daemon's files live, and how tests move them.
//!
//! | file        | default                 | override                         |
//! |-------------|-------------------------|----------------------------------|
//! | run dir     | `/run/tarn` (mode 0711) | `TARN_RUN_DIR`, else the socket's directory when the socket is overridden |
//! | socket      | `<run dir>/tarn.sock`   | `--socket`, `TARN_SOCKET`        |
//! | lock file   | `<run dir>/tarn.lock`   | (follows the run dir)            |
//! | daemon log  | `<run dir>/daemon.log`  | (follows the run dir)            |
//! | mount record | `<run dir>/tarn.mounts` | (follows the run dir)           |
//! | cache file  | `/etc/tarn/tarn.cache`  | `--cachefile`, `TARN_CACHEFILE`  |
//! | mount root  | none                    | `TARN_MOUNT_ROOT`                |
//!
//! The mount root is a directory the daemon puts in front of every
//! mountpoint, as a pool's `altroot` does: with `TARN_MOUNT_ROOT=/tmp/t`,
//! `tank` (mountpoint `/tank`) mounts on `/tmp/t/tank`. Tests and the quick
//! start use it so that nothing mounts on the real `/tank`; the
//! `mountpoint` property itself is unchanged.
//!
//! A command-line flag beats the environment, which beats the default. Tests
//! set the environment (or pass explicit [`Paths`]) and never touch the real
//! locations.

use std::path::{Path, PathBuf};

pub const ENV_SOCKET: &str = "TARN_SOCKET";
pub const ENV_RUN_DIR: &str = "TARN_RUN_DIR";
pub const ENV_CACHEFILE: &str = "TARN_CACHEFILE";
pub const ENV_MOUNT_ROOT: &str = "TARN_MOUNT_ROOT";

const DEFAULT_RUN_DIR: &str = "/run/tarn";
const DEFAULT_CACHEFILE: &str = "/etc/tarn/tarn.cache";

/// The daemon's file locations, resolved once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    pub run_dir: PathBuf,
    pub socket: PathBuf,
    pub lock: PathBuf,
    pub log: PathBuf,
    /// The FUSE mounts the daemon made (`daemon::dying`).
    pub mounts: PathBuf,
    pub cachefile: PathBuf,
    /// Prefixed to every mountpoint (see the module comment).
    pub mount_root: Option<PathBuf>,
}

impl Paths {
    /// Resolve from optional flags, then the environment, then defaults.
    pub fn resolve(socket_flag: Option<&Path>, cachefile_flag: Option<&Path>) -> Paths {
        let env = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let socket_override = socket_flag
            .map(Path::to_path_buf)
            .or_else(|| env(ENV_SOCKET));
        let run_dir = env(ENV_RUN_DIR)
            .or_else(|| {
                let parent = socket_override.as_deref()?.parent()?;
                (!parent.as_os_str().is_empty()).then(|| parent.to_path_buf())
            })
            .unwrap_or_else(|| PathBuf::from(DEFAULT_RUN_DIR));
        let socket = socket_override.unwrap_or_else(|| run_dir.join("tarn.sock"));
        let cachefile = cachefile_flag
            .map(Path::to_path_buf)
            .or_else(|| env(ENV_CACHEFILE))
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CACHEFILE));
        Paths {
            mount_root: env(ENV_MOUNT_ROOT),
            ..Paths::in_dir(run_dir, socket, cachefile)
        }
    }

    /// Paths with everything in `run_dir` (tests use a temporary directory).
    pub fn in_dir(run_dir: PathBuf, socket: PathBuf, cachefile: PathBuf) -> Paths {
        Paths {
            lock: run_dir.join("tarn.lock"),
            log: run_dir.join("daemon.log"),
            mounts: run_dir.join("tarn.mounts"),
            run_dir,
            socket,
            cachefile,
            mount_root: None,
        }
    }
}
