//! `tarn daemon`: the process that holds imported pools.
//!
//! Pools live in one long-running process, as they live in the kernel for
//! ZFS; every `tarn zpool`/`tarn zfs` command is a short client that talks to
//! it over a Unix socket (see [`crate::api`] for the protocol and
//! [`crate::client`] for how it is started on demand).
//!
//! Life of the daemon:
//! 1. [`Server::bind`] creates the run directory (mode 0711 if it creates
//!    it), takes an exclusive `flock` on the lock file — a second daemon fails
//!    here, before touching anything — and writes its pid there. It removes
//!    a stale socket left by a crashed daemon (safe: we hold the lock), binds
//!    a socket under a temporary name, sets mode 0600 and renames it into
//!    place, so the socket is never reachable with looser permissions.
//! 2. [`Server::run`] calls [`Backend::startup`] (the engine re-imports the
//!    pools of the cache file), then serves: one thread per connection, at
//!    most [`CONNECTIONS_MAX`]. Each connection reads request lines of at most
//!    [`REQUEST_LINE_BYTES_MAX`] bytes; each line is decoded (unknown fields
//!    are errors), validated ([`crate::validate`]), dispatched to the backend
//!    and answered with one response line.
//! 3. Shutdown comes from a `shutdown` request, from SIGTERM/SIGINT (the
//!    signal handler only writes a byte to a wake socket: async-signal-safe)
//!    or from a [`ShutdownHandle`]. The accept loop then stops accepting,
//!    shuts down every connection's socket (which unblocks its reader) and
//!    joins every thread, calls [`Backend::shutdown`] (the engine syncs and
//!    exports), and removes the socket file. The lock is released when the
//!    process ends (the lock file itself stays, as pid files do).
//!
//! **Invariant:** no backend method runs after `Backend::shutdown` has
//! started: every connection thread has been joined before it is called.
//!
//! Locking: the accept loop owns the connection list; connection threads
//! share only the `Arc<dyn Backend>` (which does its own locking) and a
//! clone of the wake socket.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use nix::fcntl::{Flock, FlockArg};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use serde::Serialize;
use serde_json::Value;

use crate::api::{PingReply, Request, Response};
use crate::backend::{Backend, BackendError};
use crate::limits::{CONNECTIONS_MAX, REQUEST_LINE_BYTES_MAX};
use crate::paths::Paths;
use crate::validate::{error_context, validate};

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("another tarn daemon is already running (lock {0} is held)")]
    AlreadyRunning(PathBuf),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("backend {phase} failed: {source}")]
    Backend {
        phase: &'static str,
        source: BackendError,
    },
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> DaemonError + 'a {
    move |source| DaemonError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Create the run directory, mode 0711 (others may pass through to the volume sockets in `zvol/`, not list it), if it does not exist. An existing
/// directory is left as it is (it may be a shared one such as /tmp).
pub fn ensure_run_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    DirBuilder::new().recursive(true).mode(0o711).create(dir)
}

/// Wakes the accept loop to shut the daemon down. Cloneable, thread-safe.
#[derive(Debug, Clone)]
pub struct ShutdownHandle {
    wake: Arc<UnixStream>,
}

impl ShutdownHandle {
    /// Ask the daemon to stop. Idempotent; never blocks.
    pub fn trigger(&self) {
        // A full socket buffer (WouldBlock) means a wake-up is already pending.
        let _ = (&*self.wake).write(&[1]);
    }
}

/// The wake socket's write end for the signal handler (-1: none installed).
static SIGNAL_WAKE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(_: libc::c_int) {
    let fd = SIGNAL_WAKE_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: write(2) is async-signal-safe; the buffer is a valid byte.
        unsafe {
            libc::write(fd, [1u8].as_ptr().cast(), 1);
        }
    }
}

/// Make SIGTERM and SIGINT shut the daemon down cleanly. For the `tarn
/// daemon` process only; tests use [`ShutdownHandle`] instead.
pub fn install_signal_handlers(handle: &ShutdownHandle) -> io::Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    // The handle lives as long as the server; the fd stays valid while serving.
    SIGNAL_WAKE_FD.store(handle.wake.as_raw_fd(), Ordering::Relaxed);
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        // SAFETY: the handler only loads an atomic and calls write(2).
        unsafe { sigaction(signal, &action) }.map_err(io::Error::from)?;
    }
    Ok(())
}

/// Removes the socket file when the server goes away, however it goes.
struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// A bound, not yet serving daemon.
pub struct Server {
    listener: UnixListener,
    backend: Arc<dyn Backend>,
    wake_rx: UnixStream,
    shutdown: ShutdownHandle,
    // Field order matters: the socket file is removed before the lock drops.
    _socket: SocketFile,
    _lock: Flock<File>,
}

impl Server {
    /// Take the lock and bind the socket (see the module comment, step 1).
    pub fn bind(paths: &Paths, backend: Arc<dyn Backend>) -> Result<Server, DaemonError> {
        ensure_run_dir(&paths.run_dir).map_err(io_err("cannot create", &paths.run_dir))?;
        if let Some(dir) = paths.socket.parent().filter(|d| !d.as_os_str().is_empty()) {
            ensure_run_dir(dir).map_err(io_err("cannot create", dir))?;
        }
        let lock = match take_lock(&paths.lock) {
            // A daemon killed while waiting on its own mount holds it on.
            Err(DaemonError::AlreadyRunning(_)) if dying::recover(paths) => take_lock(&paths.lock)?,
            other => other?,
        };
        // This daemon's mounts are recorded anew (see `dying`).
        let _ = fs::write(&paths.mounts, "");
        let listener = bind_socket(&paths.socket)?;
        let socket = SocketFile(paths.socket.clone());
        listener
            .set_nonblocking(true)
            .map_err(io_err("cannot configure", &paths.socket))?;
        let (wake_tx, wake_rx) =
            UnixStream::pair().map_err(io_err("cannot create", &paths.run_dir))?;
        wake_tx
            .set_nonblocking(true)
            .map_err(io_err("cannot configure", &paths.run_dir))?;
        Ok(Server {
            listener,
            backend,
            wake_rx,
            shutdown: ShutdownHandle {
                wake: Arc::new(wake_tx),
            },
            _socket: socket,
            _lock: lock,
        })
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Start the backend, serve until shut down, stop the backend.
    pub fn run(self) -> Result<(), DaemonError> {
        self.backend
            .startup()
            .map_err(|source| DaemonError::Backend {
                phase: "startup",
                source,
            })?;
        let mut conns: Vec<Connection> = Vec::new();
        while let Some(listener_ready) = self.wait() {
            if listener_ready {
                self.accept(&mut conns);
            }
        }
        for conn in &conns {
            let _ = conn.stream.shutdown(Shutdown::Both);
        }
        for conn in conns {
            // A panicking connection thread was a bug; it is over either way.
            let _ = conn.thread.join();
        }
        self.backend
            .shutdown()
            .map_err(|source| DaemonError::Backend {
                phase: "shutdown",
                source,
            })
    }

    /// Block until a connection is waiting (`Some(true)`) or shutdown was
    /// asked for (`None`).
    fn wait(&self) -> Option<bool> {
        loop {
            let mut fds = [
                PollFd::new(self.listener.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.wake_rx.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {
                    if fds[1].any().unwrap_or(true) {
                        return None;
                    }
                    return Some(fds[0].any().unwrap_or(false));
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(err) => {
                    eprintln!("tarn daemon: poll failed, shutting down: {err}");
                    return None;
                }
            }
        }
    }

    fn accept(&self, conns: &mut Vec<Connection>) {
        let stream = match self.listener.accept() {
            Ok((stream, _)) => stream,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => return,
            Err(err) => {
                eprintln!("tarn daemon: accept failed: {err}");
                return;
            }
        };
        reap(conns);
        if conns.len() >= CONNECTIONS_MAX {
            let busy = Response::failure(format!(
                "tarn daemon is busy: {CONNECTIONS_MAX} connections already open"
            ));
            let _ = write_response(&mut &stream, &busy);
            return;
        }
        match Connection::start(stream, self.backend.clone(), self.shutdown.clone()) {
            Ok(conn) => conns.push(conn),
            Err(err) => eprintln!("tarn daemon: cannot start connection thread: {err}"),
        }
    }
}

/// Join the threads of connections that have ended.
fn reap(conns: &mut Vec<Connection>) {
    let (done, live): (Vec<_>, Vec<_>) = conns.drain(..).partition(|c| c.thread.is_finished());
    *conns = live;
    for conn in done {
        let _ = conn.thread.join();
    }
}

fn take_lock(path: &Path) -> Result<Flock<File>, DaemonError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(io_err("cannot open lock file", path))?;
    let lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => lock,
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
            return Err(DaemonError::AlreadyRunning(path.to_path_buf()))
        }
        Err((_, errno)) => return Err(io_err("cannot lock", path)(errno.into())),
    };
    lock.set_len(0).map_err(io_err("cannot write", path))?;
    (&*lock)
        .write_all(format!("{}\n", std::process::id()).as_bytes())
        .map_err(io_err("cannot write", path))?;
    Ok(lock)
}

/// Bind under a temporary name, restrict to 0600, then rename into place.
fn bind_socket(path: &Path) -> Result<UnixListener, DaemonError> {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(io_err("cannot remove stale socket", path)(err)),
    }
    let mut tmp = path.as_os_str().to_os_string();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let _ = fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp).map_err(io_err("cannot bind", &tmp))?;
    let placed = fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600))
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(err) = placed {
        let _ = fs::remove_file(&tmp);
        return Err(io_err("cannot create socket", path)(err));
    }
    Ok(listener)
}

/// One client connection and the thread serving it.
struct Connection {
    /// A clone of the client socket, kept to shut it down from the loop.
    stream: UnixStream,
    thread: JoinHandle<()>,
}

impl Connection {
    fn start(
        stream: UnixStream,
        backend: Arc<dyn Backend>,
        shutdown: ShutdownHandle,
    ) -> io::Result<Connection> {
        stream.set_nonblocking(false)?;
        let serving = stream.try_clone()?;
        let thread = std::thread::Builder::new()
            .name("tarn-conn".into())
            .spawn(move || {
                serve_connection(&serving, &*backend, &shutdown);
                // The accept loop holds a clone of this socket: shut it down
                // explicitly so the client sees the end now, not at exit.
                let _ = serving.shutdown(Shutdown::Both);
            })?;
        Ok(Connection { stream, thread })
    }
}

/// What reading one request line produced.
#[derive(Debug, PartialEq, Eq)]
enum LineRead {
    Line,
    Eof,
    TooLong,
}

/// Read one line of at most `max` bytes (newline included) into `buf`,
/// without the newline.
fn read_line_limited(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<LineRead> {
    buf.clear();
    let n = reader.by_ref().take(max as u64).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(LineRead::Eof);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        return Ok(LineRead::Line);
    }
    if n >= max {
        return Ok(LineRead::TooLong);
    }
    Ok(LineRead::Line)
}

fn write_response(writer: &mut impl Write, response: &Response) -> io::Result<()> {
    let mut line = serde_json::to_vec(response).map_err(io::Error::other)?;
    line.push(b'\n');
    writer.write_all(&line)?;
    writer.flush()
}

fn serve_connection(stream: &UnixStream, backend: &dyn Backend, shutdown: &ShutdownHandle) {
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let fd_reader = fds::FdReader::new(read_half);
    let received = fd_reader.received();
    let mut reader = BufReader::new(fd_reader);
    let mut writer = stream;
    let mut line = Vec::new();
    loop {
        // Descriptors no request claimed are closed here.
        received.lock().clear();
        match read_line_limited(&mut reader, &mut line, REQUEST_LINE_BYTES_MAX) {
            Ok(LineRead::Line) => {}
            Ok(LineRead::Eof) | Err(_) => return,
            Ok(LineRead::TooLong) => {
                let too_long = Response::failure(format!(
                    "request line longer than {REQUEST_LINE_BYTES_MAX} bytes"
                ));
                let _ = write_response(&mut writer, &too_long);
                return;
            }
        }
        let passed = std::mem::take(&mut *received.lock());
        let (response, stop) = handle_line_with(backend, &line, passed);
        if write_response(&mut writer, &response).is_err() {
            return;
        }
        if stop {
            shutdown.trigger();
            return;
        }
    }
}

/// Decode, validate and execute one request line. Returns the response and
/// whether the daemon should shut down.
pub fn handle_line(backend: &dyn Backend, line: &[u8]) -> (Response, bool) {
    handle_line_with(backend, line, Vec::new())
}

/// [`handle_line`] with the descriptors that came with the line: the
/// streaming verbs take them (`api::PassedFds`), others drop them.
pub fn handle_line_with(
    backend: &dyn Backend,
    line: &[u8],
    passed: Vec<std::os::fd::OwnedFd>,
) -> (Response, bool) {
    let req: Request = match serde_json::from_slice(line) {
        Ok(req) => req,
        Err(err) => return (Response::failure(format!("invalid request: {err}")), false),
    };
    let mut req = match validate(req) {
        Ok(req) => req,
        Err(message) => return (Response::failure(message), false),
    };
    let passed = crate::api::PassedFds(Arc::new(passed));
    match &mut req {
        Request::ZfsSend(a) => a.fds = passed,
        Request::ZfsReceive(a) => a.fds = passed,
        _ => {}
    }
    match req {
        Request::Ping {} => {
            let reply = PingReply {
                pid: std::process::id(),
                version: env!("CARGO_PKG_VERSION").to_string(),
            };
            (Response::success(to_json(reply)), false)
        }
        Request::Shutdown {} => (Response::success(Value::Null), true),
        req => {
            let (verb, target) = error_context(&req);
            match dispatch(backend, req) {
                Ok(data) => (Response::success(data), false),
                Err(err) => (Response::failure(err.message(verb, &target)), false),
            }
        }
    }
}

fn to_json<T: Serialize>(value: T) -> Value {
    // Our result types are plain data with string keys: encoding cannot fail.
    serde_json::to_value(value).unwrap_or(Value::Null)
}

macro_rules! dispatch_fn {
    ($($(#[$doc:meta])* $method:ident: $variant:ident($args:ty) -> $reply:ty;)*) => {
        /// Call the backend method for `req`.
        fn dispatch(backend: &dyn Backend, req: Request) -> Result<Value, BackendError> {
            Ok(match req {
                $(Request::$variant(a) => to_json(backend.$method(a)?),)*
                // Answered by handle_line before dispatch.
                Request::Ping {} | Request::Shutdown {} => Value::Null,
            })
        }
    };
}

crate::verbs::verbs!(dispatch_fn);

#[cfg(test)]
mod tests;

pub mod dying;
pub mod fds;
