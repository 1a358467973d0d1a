//! The client side of the socket, and starting the daemon on demand.
//!
//! Every `tarn zpool`/`tarn zfs` command sends one request and reads one
//! response. If nothing listens on the socket (no file, or a stale file whose
//! daemon died), the client starts the daemon itself — as `zpool` works
//! without the admin first starting anything — and waits for it:
//!
//! 1. spawn `<this executable> daemon --foreground --socket S --cachefile C`
//!    in a new session (`setsid`, so it survives the terminal), stdin from
//!    /dev/null, stdout and stderr appended to `<run dir>/daemon.log`;
//! 2. poll the socket with exponential backoff ([`AUTOSTART_POLL_FIRST`] up
//!    to [`AUTOSTART_POLL_MAX`]) until it answers `ping`, for at most
//!    [`AUTOSTART_WAIT_MAX`]. If the spawned daemon exits early and no other
//!    daemon holds the lock (two clients may race to start one; the loser
//!    exits and the winner serves both), give up at once and point at the log.
//!
//! Errors read `cannot connect to tarn daemon at <socket>: <reason>`.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use nix::fcntl::{Flock, FlockArg};

use crate::api::{Request, Response};
use crate::daemon::ensure_run_dir;
use crate::limits::{
    AUTOSTART_POLL_FIRST, AUTOSTART_POLL_MAX, AUTOSTART_WAIT_MAX, RESPONSE_LINE_BYTES_MAX,
};
use crate::paths::Paths;

/// A failure to talk to the daemon (as opposed to a failed operation, which
/// is a [`Response`] with `ok: false`).
#[derive(Debug, thiserror::Error)]
#[error("cannot connect to tarn daemon at {socket}: {reason}")]
pub struct ClientError {
    pub socket: String,
    pub reason: String,
}

/// An open connection to the daemon.
pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    socket: String,
}

impl Client {
    /// Connect without starting a daemon.
    pub fn connect(socket: &Path) -> io::Result<Client> {
        let stream = UnixStream::connect(socket)?;
        Ok(Client {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            socket: socket.display().to_string(),
        })
    }

    /// Connect, starting the daemon if none is listening.
    pub fn connect_or_start(paths: &Paths) -> Result<Client, ClientError> {
        let fail = |reason: String| ClientError {
            socket: paths.socket.display().to_string(),
            reason,
        };
        // A daemon that cannot finish dying still accepts connections on
        // its socket, and never answers: end it first (`daemon::dying`).
        crate::daemon::dying::recover(paths);
        match Client::connect(&paths.socket) {
            Ok(client) => return Ok(client),
            Err(err) if daemon_absent(&err) => {}
            Err(err) => return Err(fail(err.to_string())),
        }
        start_daemon(paths)
    }

    /// Send one request and read its response.
    pub fn call(&mut self, req: &Request) -> Result<Response, ClientError> {
        self.call_with_fds(req, &[])
    }

    /// [`Client::call`] handing the daemon open descriptors with the
    /// request (`daemon::fds`): `zfs send`/`receive` pass their stdio.
    pub fn call_with_fds(
        &mut self,
        req: &Request,
        fds: &[std::os::fd::RawFd],
    ) -> Result<Response, ClientError> {
        let fail = |reason: String| ClientError {
            socket: self.socket.clone(),
            reason,
        };
        let mut line = serde_json::to_vec(req).map_err(|e| fail(e.to_string()))?;
        line.push(b'\n');
        crate::daemon::fds::send_with_fds(&self.writer, &line, fds)
            .map_err(|e| fail(format!("cannot send request: {e}")))?;
        let mut buf = Vec::new();
        let n = (&mut self.reader)
            .take(RESPONSE_LINE_BYTES_MAX as u64)
            .read_until(b'\n', &mut buf)
            .map_err(|e| fail(format!("cannot read response: {e}")))?;
        if n == 0 {
            return Err(fail("the daemon closed the connection".into()));
        }
        if buf.last() != Some(&b'\n') {
            return Err(fail("response truncated or too long".into()));
        }
        serde_json::from_slice(&buf).map_err(|e| fail(format!("malformed response: {e}")))
    }
}

/// Start a daemon and wait until it answers; the connection it answered on.
pub fn start_daemon(paths: &Paths) -> Result<Client, ClientError> {
    let fail = |reason: String| ClientError {
        socket: paths.socket.display().to_string(),
        reason,
    };
    let child = spawn_daemon(paths).map_err(|e| fail(format!("cannot start daemon: {e}")))?;
    wait_for_daemon(paths, child).map_err(fail)
}

/// Nobody is listening: no socket file, or a stale one.
fn daemon_absent(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
    )
}

/// Start `tarn daemon --foreground` detached from this process.
pub fn spawn_daemon(paths: &Paths) -> io::Result<Child> {
    let exe = std::env::current_exe()?;
    let (out, err) = match open_log(paths) {
        Some(log) => match log.try_clone() {
            Ok(copy) => (Stdio::from(copy), Stdio::from(log)),
            Err(_) => (Stdio::null(), Stdio::null()),
        },
        None => (Stdio::null(), Stdio::null()),
    };
    let mut cmd = Command::new(exe);
    cmd.arg("daemon")
        .arg("--foreground")
        .arg("--socket")
        .arg(&paths.socket)
        .arg("--cachefile")
        .arg(&paths.cachefile)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    // SAFETY: setsid(2) is async-signal-safe and touches no Rust state.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// The daemon log, opened for appending; `None` if it cannot be (the daemon
/// then runs with its output discarded rather than not at all).
fn open_log(paths: &Paths) -> Option<File> {
    ensure_run_dir(&paths.run_dir).ok()?;
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(&paths.log)
        .ok()
}

/// Poll until the daemon answers `ping` (module comment, step 2).
fn wait_for_daemon(paths: &Paths, mut child: Child) -> Result<Client, String> {
    let deadline = Instant::now() + AUTOSTART_WAIT_MAX;
    let mut pause = AUTOSTART_POLL_FIRST;
    loop {
        let last_error = match ping(&paths.socket) {
            Ok(client) => return Ok(client),
            Err(err) => err,
        };
        if let Ok(Some(status)) = child.try_wait() {
            if !lock_held(&paths.lock) && ping(&paths.socket).is_err() {
                return Err(format!(
                    "the daemon exited ({status}); see {}",
                    paths.log.display()
                ));
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "daemon did not answer within {} s ({last_error}); see {}",
                AUTOSTART_WAIT_MAX.as_secs(),
                paths.log.display()
            ));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(AUTOSTART_POLL_MAX);
    }
}

/// Connect and check that the daemon answers.
fn ping(socket: &Path) -> Result<Client, String> {
    let mut client = Client::connect(socket).map_err(|e| e.to_string())?;
    let response = client.call(&Request::Ping {}).map_err(|e| e.reason)?;
    if response.ok {
        Ok(client)
    } else {
        Err(response.error.unwrap_or_default())
    }
}

/// Whether some daemon holds the lock file (is starting or running).
fn lock_held(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_) => false,
        Err((_, errno)) => errno == nix::errno::Errno::EWOULDBLOCK,
    }
}
