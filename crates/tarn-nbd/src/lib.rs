//! tarn-nbd: an NBD server over Unix sockets — how tarn's volumes reach
//! qemu/KVM, `qemu-img`, `nbdcopy`, `nbdfuse` and the kernel's
//! `nbd-client -unix` without a kernel module of its own.
//!
//! The protocol is NetworkBlockDevice/nbd's `doc/proto.md`, fixed
//! newstyle: options `GO`, `INFO`, `EXPORT_NAME`, `LIST`, `ABORT`,
//! `STRUCTURED_REPLY`, `LIST_META_CONTEXT` and `SET_META_CONTEXT`
//! (`base:allocation`); commands `READ`, `WRITE` (`FUA`), `FLUSH`,
//! `TRIM`, `WRITE_ZEROES` (`NO_HOLE`, `FAST_ZERO`), `BLOCK_STATUS`,
//! `CACHE` and `DISC`. The export is anything that implements
//! [`Export`]; this crate knows nothing of pools.
//!
//! ## Threads
//! Each socket has an accept thread ([`serve`]); each connection a thread
//! that does the handshake and then reads requests. A request (with its
//! payload, already read) goes to the [`Runtime`]'s shared workers, which
//! run it against the export and write the reply under the connection's
//! writer lock — so several requests of one client are in flight at once
//! and are answered in the order they finish, not the order they came.
//! A connection may have at most `inflight_requests` requests and
//! `inflight_bytes` of payload in flight; its reader waits beyond that.
//!
//! ## Hostile clients
//! Nothing a client sends can panic the server or make it allocate more
//! than the bounds above: option data is at most `OPTION_DATA_MAX` bytes
//! (more is a disconnect), a write payload at most [`PAYLOAD_MAX`] (more
//! is a disconnect, as the protocol allows), every length inside an
//! option is checked against the option's. A handshake must finish within
//! `handshake_timeout`; a reply that cannot be written within
//! `reply_timeout` (a client that stops reading) closes the connection,
//! so a stuck client never holds a worker for long. Idle connections
//! after the handshake cost one parked thread each, up to
//! `connections_max` per runtime. Each refusal is a line on stderr.

pub mod client;
pub mod proto;

pub use proto::Errno;

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use proto::*;

/// Largest payload of one request, and the maximum block size announced
/// (the protocol's recommended 32 MiB).
pub const PAYLOAD_MAX: u32 = 32 << 20;
/// Smallest block size announced to clients that ask (`INFO_BLOCK_SIZE`);
/// requests of those clients must be aligned to it.
pub const BLOCK_MIN: u32 = 512;
/// Largest option data accepted during the handshake.
const OPTION_DATA_MAX: u32 = 64 << 10;
/// Most options one handshake may send.
const OPTIONS_MAX: usize = 1024;
/// Longest name or query string (the protocol's bound).
const STRING_MAX: u32 = 4096;
/// Most meta-context queries one option may carry.
const QUERIES_MAX: u32 = 128;
/// Most extents in one `BLOCK_STATUS` reply.
const EXTENTS_MAX: usize = 1 << 16;
/// Stack of a connection's reader thread (it parses headers only).
const CONN_STACK_BYTES: usize = 256 << 10;

/// An error of an export operation: what goes on the wire, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportError {
    pub errno: Errno,
    pub why: String,
}

impl ExportError {
    pub fn new(errno: Errno, why: impl Into<String>) -> Self {
        ExportError {
            errno,
            why: why.into(),
        }
    }
}

pub type ExportResult<T> = std::result::Result<T, ExportError>;

/// One run of a block-status answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub len: u64,
    pub hole: bool,
}

/// What an NBD export must do. Offsets and lengths are checked against
/// [`Export::size`] before any call; `write`, `trim` and `zero` are
/// never called on a read-only export.
pub trait Export: Send + Sync {
    fn size(&self) -> u64;
    /// The preferred block size (`INFO_BLOCK_SIZE`): the volume's.
    fn preferred_block(&self) -> u32;
    fn read_only(&self) -> bool;
    fn read(&self, offset: u64, buf: &mut [u8]) -> ExportResult<()>;
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> ExportResult<()>;
    fn flush(&self) -> ExportResult<()>;
    fn trim(&self, offset: u64, len: u64, fua: bool) -> ExportResult<()>;
    /// Zeroes a range; `may_trim`: holes are allowed (no `NO_HOLE`).
    fn zero(&self, offset: u64, len: u64, may_trim: bool, fua: bool) -> ExportResult<()>;
    /// Holes and data from `offset`, covering at least one byte.
    fn extents(&self, offset: u64, len: u64) -> ExportResult<Vec<Extent>>;
    /// `CACHE`: a hint to read ahead.
    fn cache(&self, _offset: u64, _len: u64) -> ExportResult<()> {
        Ok(())
    }
}

/// Named limits of a [`Runtime`] (`tunables`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Worker threads running requests, shared by every export.
    pub workers: usize,
    /// Connections open at once, over every export.
    pub connections_max: usize,
    /// Requests of one connection in flight at once.
    pub inflight_requests: usize,
    /// Payload bytes of one connection in flight at once.
    pub inflight_bytes: usize,
    /// Time a client has to finish the handshake.
    pub handshake_timeout: Duration,
    /// Time a reply may take to be written before the connection is cut.
    pub reply_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        Limits {
            workers: (cpus * 2).clamp(4, 64),
            connections_max: 4096,
            inflight_requests: 64,
            inflight_bytes: 64 << 20,
            handshake_timeout: Duration::from_secs(10),
            reply_timeout: Duration::from_secs(30),
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// The workers and limits every export of a daemon shares.
pub struct Runtime {
    limits: Limits,
    jobs: crossbeam_channel::Sender<Job>,
    connections: AtomicUsize,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl Runtime {
    pub fn new(limits: Limits) -> Arc<Runtime> {
        let (tx, rx) = crossbeam_channel::bounded::<Job>(limits.workers * 4);
        let workers = (0..limits.workers)
            .map(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("nbd-worker-{i}"))
                    .spawn(move || {
                        while let Ok(job) = rx.recv() {
                            job();
                        }
                    })
                    .expect("spawn an NBD worker")
            })
            .collect();
        Arc::new(Runtime {
            limits,
            jobs: tx,
            connections: AtomicUsize::new(0),
            workers: Mutex::new(workers),
        })
    }

    /// Connections open now, over every export.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    fn run(&self, job: Job) {
        // The channel lives as long as the runtime; a full one waits
        // (the reader's in-flight bound is the back-pressure).
        let _ = self.jobs.send(job);
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // Workers end when every sender is gone; ours is the last, and it
        // goes with `self` — so they are not joined here (a worker may be
        // what drops the runtime).
        self.workers.lock().clear();
    }
}

/// What [`serve`] serves at one socket.
pub struct Config {
    /// The export's name (`LIST`, `INFO_NAME`); `""` is accepted too.
    pub name: String,
    pub description: String,
    /// Said in front of every log line (`nbd tank/vol`).
    pub label: String,
    /// Socket permission bits (default 0o660) and group (`None`: the
    /// daemon's).
    pub mode: u32,
    pub group: Option<u32>,
}

/// A socket being served; [`Listener::stop`] (or drop) closes it, cuts
/// every connection and waits for their requests to finish.
pub struct Listener {
    path: PathBuf,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    listen_fd: std::os::unix::io::RawFd,
}

struct Shared {
    export: Arc<dyn Export>,
    config: Config,
    rt: Arc<Runtime>,
    stopping: AtomicBool,
    conns: Mutex<HashMap<u64, (UnixStream, JoinHandle<()>)>>,
    next_id: AtomicU64,
}

impl Shared {
    fn log(&self, what: std::fmt::Arguments<'_>) {
        eprintln!("tarn daemon: {}: {what}", self.config.label);
    }
}

/// Serves `export` at the Unix socket `path` (a stale socket there is
/// replaced; the directory must exist).
pub fn serve(
    path: &Path,
    export: Arc<dyn Export>,
    config: Config,
    rt: Arc<Runtime>,
) -> io::Result<Listener> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) => {
            std::fs::remove_file(path)?
        }
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ))
        }
        Err(_) => {}
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(config.mode))?;
    if let Some(gid) = config.group {
        std::os::unix::fs::chown(path, None, Some(gid))?;
    }
    let listen_fd = listener.as_raw_fd();
    let shared = Arc::new(Shared {
        export,
        config,
        rt,
        stopping: AtomicBool::new(false),
        conns: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(0),
    });
    let s = shared.clone();
    let accept = std::thread::Builder::new()
        .name("nbd-accept".into())
        .spawn(move || accept_loop(listener, s))?;
    Ok(Listener {
        path: path.to_path_buf(),
        shared,
        accept: Some(accept),
        listen_fd,
    })
}

impl Listener {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Connections open on this socket now.
    pub fn connections(&self) -> usize {
        self.shared.conns.lock().len()
    }

    /// Closes the socket and every connection, waiting for the requests
    /// in flight; the socket file is removed.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        self.shared.stopping.store(true, Ordering::SeqCst);
        // SAFETY: `listen_fd` is the listener the accept thread owns and
        // has not closed (it closes it only after leaving its loop, which
        // it does only once woken here): shutting a valid socket down
        // has no memory effect; on Linux it wakes a blocked accept().
        unsafe {
            libc::shutdown(self.listen_fd, libc::SHUT_RDWR);
        }
        let _ = accept.join();
        let _ = std::fs::remove_file(&self.path);
        let conns: Vec<(UnixStream, JoinHandle<()>)> =
            self.shared.conns.lock().drain().map(|(_, c)| c).collect();
        for (s, _) in &conns {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        for (_, t) in conns {
            let _ = t.join();
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    loop {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(_) if shared.stopping.load(Ordering::SeqCst) => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                shared.log(format_args!("accept failed: {e}"));
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let rt = &shared.rt;
        if rt.connections.fetch_add(1, Ordering::SeqCst) >= rt.limits.connections_max {
            rt.connections.fetch_sub(1, Ordering::SeqCst);
            shared.log(format_args!(
                "connection refused: {} connections are open (the limit)",
                rt.limits.connections_max
            ));
            continue;
        }
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let Ok(handle) = stream.try_clone() else {
            rt.connections.fetch_sub(1, Ordering::SeqCst);
            continue;
        };
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("nbd-conn".into())
            .stack_size(CONN_STACK_BYTES)
            .spawn(move || {
                // Counted out however the connection ends.
                let _gone = Gone {
                    shared: s.clone(),
                    id,
                };
                if let Some(conn) = Conn::new(stream, s.clone()) {
                    conn.run();
                }
            });
        match spawned {
            Ok(t) => {
                let mut conns = shared.conns.lock();
                // Reap the threads of connections that ended.
                conns.retain(|_, (_, t)| !t.is_finished());
                conns.insert(id, (handle, t));
            }
            Err(e) => {
                rt.connections.fetch_sub(1, Ordering::SeqCst);
                shared.log(format_args!("cannot start a connection thread: {e}"));
            }
        }
    }
}

/// Takes a connection out of the counts when its thread ends.
struct Gone {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Gone {
    fn drop(&mut self) {
        self.shared.rt.connections.fetch_sub(1, Ordering::SeqCst);
        // A connection that ends on its own takes itself out.
        if !self.shared.stopping.load(Ordering::SeqCst) {
            self.shared.conns.lock().remove(&self.id);
        }
    }
}

/// Requests and payload bytes of one connection in flight.
#[derive(Default)]
struct Inflight {
    state: Mutex<(usize, usize)>,
    changed: Condvar,
}

impl Inflight {
    fn enter(&self, bytes: usize, limits: &Limits) {
        let mut st = self.state.lock();
        while st.0 > 0 && (st.0 >= limits.inflight_requests || st.1 + bytes > limits.inflight_bytes)
        {
            self.changed.wait(&mut st);
        }
        st.0 += 1;
        st.1 += bytes;
    }
    fn leave(&self, bytes: usize) {
        let mut st = self.state.lock();
        st.0 -= 1;
        st.1 -= bytes;
        self.changed.notify_all();
    }
    /// Whether exactly one request (the caller's) is in flight.
    fn alone(&self) -> bool {
        self.state.lock().0 == 1
    }
    fn drain(&self) {
        let mut st = self.state.lock();
        while st.0 > 0 {
            self.changed.wait(&mut st);
        }
    }
}

/// What the handshake settled.
#[derive(Default, Clone, Copy)]
struct Negotiated {
    structured: bool,
    /// `base:allocation` was selected by the last `SET_META_CONTEXT`.
    meta: bool,
    /// The client asked for block sizes: its requests must honour them.
    block_sizes: bool,
    no_zeroes: bool,
}

/// A connection's writer: replies of workers go out one whole reply at a
/// time.
struct Writer {
    stream: Mutex<UnixStream>,
    broken: AtomicBool,
}

impl Writer {
    fn send(&self, bytes: &[u8]) {
        if self.broken.load(Ordering::Relaxed) {
            return;
        }
        let mut s = self.stream.lock();
        if s.write_all(bytes).is_err() {
            self.broken.store(true, Ordering::Relaxed);
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

struct Conn {
    reader: UnixStream,
    writer: Arc<Writer>,
    shared: Arc<Shared>,
    neg: Negotiated,
    inflight: Arc<Inflight>,
}

enum Next {
    /// Go on to the transmission phase.
    Serve,
    /// End the connection (abort, error, a client gone).
    Close,
}

/// A protocol violation that ends the connection, with the log line.
struct Hangup(String);

impl From<io::Error> for Hangup {
    fn from(e: io::Error) -> Self {
        Hangup(match e.kind() {
            io::ErrorKind::UnexpectedEof => "client disconnected".into(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                "client too slow (timed out)".into()
            }
            _ => format!("connection error: {e}"),
        })
    }
}

impl Conn {
    fn new(stream: UnixStream, shared: Arc<Shared>) -> Option<Conn> {
        let reply_timeout = shared.rt.limits.reply_timeout;
        let writer = stream.try_clone().ok()?;
        writer.set_write_timeout(Some(reply_timeout)).ok()?;
        Some(Conn {
            reader: stream,
            writer: Arc::new(Writer {
                stream: Mutex::new(writer),
                broken: AtomicBool::new(false),
            }),
            shared,
            neg: Negotiated::default(),
            inflight: Arc::default(),
        })
    }

    fn run(mut self) {
        let limits = self.shared.rt.limits;
        let _ = self.reader.set_read_timeout(Some(limits.handshake_timeout));
        match self.handshake() {
            Ok(Next::Serve) => {}
            Ok(Next::Close) => return,
            Err(Hangup(why)) => {
                self.shared.log(format_args!("handshake ended: {why}"));
                return;
            }
        }
        let _ = self.reader.set_read_timeout(None);
        let r = self.transmission();
        self.inflight.drain();
        if let Err(Hangup(why)) = r {
            if !self.shared.stopping.load(Ordering::SeqCst) {
                self.shared.log(format_args!("connection closed: {why}"));
            }
        }
        let _ = self.reader.shutdown(std::net::Shutdown::Both);
    }

    // ------------------------------------------------------------ handshake

    fn send(&self, bytes: &[u8]) -> Result<(), Hangup> {
        self.writer.send(bytes);
        if self.writer.broken.load(Ordering::Relaxed) {
            return Err(Hangup("client stopped reading".into()));
        }
        Ok(())
    }

    fn opt_reply(&self, opt: u32, typ: u32, data: &[u8]) -> Result<(), Hangup> {
        let mut out = Vec::with_capacity(20 + data.len());
        option_reply(&mut out, opt, typ, data);
        self.send(&out)
    }

    fn opt_error(&self, opt: u32, typ: u32, why: &str) -> Result<(), Hangup> {
        self.opt_reply(opt, typ, why.as_bytes())
    }

    fn read_u32(&mut self) -> io::Result<u32> {
        let mut b = [0u8; 4];
        self.reader.read_exact(&mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    fn names_export(&self, name: &[u8]) -> bool {
        name.is_empty() || name == self.shared.config.name.as_bytes()
    }

    fn transmission_flags(&self) -> u16 {
        let mut f = TF_HAS_FLAGS | TF_SEND_FLUSH | TF_SEND_FUA | TF_CAN_MULTI_CONN | TF_SEND_CACHE;
        if self.shared.export.read_only() {
            f |= TF_READ_ONLY;
        } else {
            f |= TF_SEND_TRIM | TF_SEND_WRITE_ZEROES | TF_SEND_FAST_ZERO;
        }
        if self.neg.structured {
            f |= TF_SEND_DF;
        }
        f
    }

    fn handshake(&mut self) -> Result<Next, Hangup> {
        let mut hello = Vec::with_capacity(18);
        hello.extend_from_slice(&NBDMAGIC.to_be_bytes());
        hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
        hello.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
        self.send(&hello)?;
        let cflags = self.read_u32()?;
        if cflags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
            return Err(Hangup(format!("unknown client flags {cflags:#x}")));
        }
        self.neg.no_zeroes = cflags & FLAG_C_NO_ZEROES != 0;
        for _ in 0..OPTIONS_MAX {
            let mut h = [0u8; 16];
            self.reader.read_exact(&mut h)?;
            let magic = u64::from_be_bytes(h[0..8].try_into().expect("8"));
            let opt = u32::from_be_bytes(h[8..12].try_into().expect("4"));
            let len = u32::from_be_bytes(h[12..16].try_into().expect("4"));
            if magic != IHAVEOPT {
                return Err(Hangup(format!("bad option magic {magic:#x}")));
            }
            if len > OPTION_DATA_MAX {
                return Err(Hangup(format!(
                    "option {opt} carries {len} bytes (at most {OPTION_DATA_MAX})"
                )));
            }
            let mut data = vec![0u8; len as usize];
            self.reader.read_exact(&mut data)?;
            if let Some(next) = self.option(opt, &data)? {
                return Ok(next);
            }
        }
        Err(Hangup(format!("more than {OPTIONS_MAX} options")))
    }

    /// Answers one option; `Some` ends the handshake.
    fn option(&mut self, opt: u32, data: &[u8]) -> Result<Option<Next>, Hangup> {
        match opt {
            OPT_EXPORT_NAME => {
                if !self.names_export(data) {
                    return Err(Hangup(format!(
                        "unknown export '{}'",
                        String::from_utf8_lossy(data)
                    )));
                }
                let mut out = Vec::with_capacity(134);
                out.extend_from_slice(&self.shared.export.size().to_be_bytes());
                out.extend_from_slice(&self.transmission_flags().to_be_bytes());
                if !self.neg.no_zeroes {
                    out.extend_from_slice(&[0u8; 124]);
                }
                self.send(&out)?;
                Ok(Some(Next::Serve))
            }
            OPT_ABORT => {
                let _ = self.opt_reply(opt, REP_ACK, &[]);
                Ok(Some(Next::Close))
            }
            OPT_LIST => {
                if !data.is_empty() {
                    self.opt_error(opt, REP_ERR_INVALID, "LIST takes no data")?;
                    return Ok(None);
                }
                let name = self.shared.config.name.as_bytes();
                let desc = self.shared.config.description.as_bytes();
                let mut d = Vec::with_capacity(4 + name.len() + desc.len());
                d.extend_from_slice(&(name.len() as u32).to_be_bytes());
                d.extend_from_slice(name);
                d.extend_from_slice(desc);
                self.opt_reply(opt, REP_SERVER, &d)?;
                self.opt_reply(opt, REP_ACK, &[])?;
                Ok(None)
            }
            OPT_INFO | OPT_GO => self.info(opt, data),
            OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    self.opt_error(opt, REP_ERR_INVALID, "STRUCTURED_REPLY takes no data")?;
                } else if self.neg.structured {
                    self.opt_error(opt, REP_ERR_INVALID, "structured replies already on")?;
                } else {
                    self.neg.structured = true;
                    self.opt_reply(opt, REP_ACK, &[])?;
                }
                Ok(None)
            }
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
                self.meta_context(opt, data)?;
                Ok(None)
            }
            OPT_STARTTLS => {
                self.opt_error(opt, REP_ERR_POLICY, "TLS is not supported on a Unix socket")?;
                Ok(None)
            }
            _ => {
                self.opt_error(opt, REP_ERR_UNSUP, "option not supported")?;
                Ok(None)
            }
        }
    }

    fn info(&mut self, opt: u32, data: &[u8]) -> Result<Option<Next>, Hangup> {
        let mut c = Cursor::new(data);
        let parsed = (|| {
            let name = c.string(STRING_MAX)?;
            let count = c.u16()?;
            let mut infos = Vec::with_capacity(usize::from(count));
            for _ in 0..count {
                infos.push(c.u16()?);
            }
            c.is_empty().then_some((name, infos))
        })();
        let Some((name, infos)) = parsed else {
            self.opt_error(opt, REP_ERR_INVALID, "malformed INFO/GO request")?;
            return Ok(None);
        };
        if !self.names_export(name) {
            self.opt_error(opt, REP_ERR_UNKNOWN, "no such export")?;
            return Ok(None);
        }
        let e = &self.shared.export;
        let mut export = Vec::with_capacity(12);
        export.extend_from_slice(&INFO_EXPORT.to_be_bytes());
        export.extend_from_slice(&e.size().to_be_bytes());
        export.extend_from_slice(&self.transmission_flags().to_be_bytes());
        self.opt_reply(opt, REP_INFO, &export)?;
        let mut block = Vec::with_capacity(14);
        block.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        block.extend_from_slice(&BLOCK_MIN.to_be_bytes());
        block.extend_from_slice(&e.preferred_block().max(BLOCK_MIN).to_be_bytes());
        block.extend_from_slice(&PAYLOAD_MAX.to_be_bytes());
        self.opt_reply(opt, REP_INFO, &block)?;
        let asked_sizes = infos.contains(&INFO_BLOCK_SIZE);
        for i in infos {
            let text = match i {
                INFO_NAME => &self.shared.config.name,
                INFO_DESCRIPTION => &self.shared.config.description,
                _ => continue,
            };
            let mut d = Vec::with_capacity(2 + text.len());
            d.extend_from_slice(&i.to_be_bytes());
            d.extend_from_slice(text.as_bytes());
            self.opt_reply(opt, REP_INFO, &d)?;
        }
        self.opt_reply(opt, REP_ACK, &[])?;
        if opt == OPT_GO {
            self.neg.block_sizes = asked_sizes;
            return Ok(Some(Next::Serve));
        }
        Ok(None)
    }

    fn meta_context(&mut self, opt: u32, data: &[u8]) -> Result<(), Hangup> {
        let set = opt == OPT_SET_META_CONTEXT;
        if set {
            // A SET replaces what an earlier one selected, even failing.
            self.neg.meta = false;
        }
        let mut c = Cursor::new(data);
        let parsed = (|| {
            let name = c.string(STRING_MAX)?;
            let count = c.u32()?;
            if count > QUERIES_MAX {
                return None;
            }
            let mut queries = Vec::new();
            for _ in 0..count {
                queries.push(c.string(STRING_MAX)?);
            }
            c.is_empty().then_some((name, queries))
        })();
        let Some((name, queries)) = parsed else {
            return self.opt_error(opt, REP_ERR_INVALID, "malformed meta context request");
        };
        if set && !self.neg.structured {
            return self.opt_error(
                opt,
                REP_ERR_INVALID,
                "SET_META_CONTEXT needs structured replies first",
            );
        }
        if !self.names_export(name) {
            return self.opt_error(opt, REP_ERR_UNKNOWN, "no such export");
        }
        let ours = META_BASE_ALLOCATION.as_bytes();
        let wanted = if set {
            queries.contains(&ours)
        } else {
            queries.is_empty() || queries.iter().any(|q| *q == ours || *q == b"base:")
        };
        if wanted {
            let id = if set { META_BASE_ALLOCATION_ID } else { 0 };
            let mut d = Vec::with_capacity(4 + ours.len());
            d.extend_from_slice(&id.to_be_bytes());
            d.extend_from_slice(ours);
            self.opt_reply(opt, REP_META_CONTEXT, &d)?;
            if set {
                self.neg.meta = true;
            }
        }
        self.opt_reply(opt, REP_ACK, &[])
    }

    // ------------------------------------------------------------ transmission

    fn transmission(&mut self) -> Result<(), Hangup> {
        loop {
            let mut h = [0u8; REQUEST_BYTES];
            match self.reader.read_exact(&mut h) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e.into()),
            }
            let Some(req) = Request::decode(&h) else {
                return Err(Hangup("bad request magic".into()));
            };
            if req.typ == CMD_DISC {
                return Ok(());
            }
            let payload = if req.typ == CMD_WRITE {
                if req.len > PAYLOAD_MAX {
                    return Err(Hangup(format!(
                        "write of {} bytes (at most {PAYLOAD_MAX})",
                        req.len
                    )));
                }
                let bytes = req.len as usize;
                self.inflight.enter(bytes, &self.shared.rt.limits);
                let mut buf = vec![0u8; bytes];
                if let Err(e) = self.reader.read_exact(&mut buf) {
                    self.inflight.leave(bytes);
                    return Err(Hangup(format!("write payload cut short: {e}")));
                }
                Some(buf)
            } else {
                self.inflight.enter(0, &self.shared.rt.limits);
                None
            };
            let charged = payload.as_ref().map_or(0, Vec::len);
            let job = Task {
                req,
                payload,
                neg: self.neg,
                export: self.shared.export.clone(),
                writer: self.writer.clone(),
                inflight: self.inflight.clone(),
                charged,
                shared: self.shared.clone(),
            };
            // A request alone (nothing else in flight, nothing more
            // waiting on the socket) runs here: handing it to a worker
            // would cost two thread switches and gain nothing. Otherwise
            // the workers run it, in parallel with what follows.
            if self.inflight.alone() && !bytes_waiting(&self.reader) {
                job.run();
            } else {
                self.shared.rt.run(Box::new(move || job.run()));
            }
            if self.writer.broken.load(Ordering::Relaxed) {
                return Err(Hangup("client stopped reading replies".into()));
            }
        }
    }
}

/// Whether the client has sent more bytes than were read.
fn bytes_waiting(s: &UnixStream) -> bool {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which points
    // at `n`, alive for the call; the descriptor is the open stream's.
    let rc = unsafe { libc::ioctl(s.as_raw_fd(), libc::FIONREAD, &mut n) };
    rc != 0 || n > 0
}

/// One request, run by a worker.
struct Task {
    req: Request,
    payload: Option<Vec<u8>>,
    neg: Negotiated,
    export: Arc<dyn Export>,
    writer: Arc<Writer>,
    inflight: Arc<Inflight>,
    charged: usize,
    shared: Arc<Shared>,
}

/// What a request came to.
enum Outcome {
    Done,
    Data(Vec<u8>),
    Extents(Vec<Extent>),
    Failed(ExportError),
}

fn inval(why: impl Into<String>) -> Outcome {
    Outcome::Failed(ExportError::new(Errno::Inval, why))
}

impl Task {
    fn run(mut self) {
        let outcome = self.execute();
        if let Outcome::Failed(e) = &outcome {
            if e.errno == Errno::Io || e.errno == Errno::NoSpc {
                self.shared.log(format_args!(
                    "request {} at {}+{} failed: {}",
                    cmd_name(self.req.typ),
                    self.req.offset,
                    self.req.len,
                    e.why
                ));
            }
        }
        let reply = self.reply(outcome);
        self.writer.send(&reply);
        self.inflight.leave(self.charged);
    }

    fn check_flags(&self, allowed: u16) -> Result<(), Outcome> {
        if self.req.flags & !allowed != 0 {
            return Err(inval(format!(
                "flags {:#x} are not valid for {}",
                self.req.flags,
                cmd_name(self.req.typ)
            )));
        }
        Ok(())
    }

    /// Offset and length inside the export and, for a client that asked
    /// for block sizes, aligned to them.
    fn check_range(&self, past_end: Errno) -> Result<(), Outcome> {
        let (off, len) = (self.req.offset, u64::from(self.req.len));
        let size = self.export.size();
        if off.checked_add(len).is_none_or(|end| end > size) {
            return Err(Outcome::Failed(ExportError::new(
                past_end,
                format!("request {off}+{len} is past the end of the export ({size} bytes)"),
            )));
        }
        let bm = u64::from(BLOCK_MIN);
        if self.neg.block_sizes && (off % bm != 0 || len % bm != 0) {
            return Err(inval(format!(
                "request {off}+{len} is not aligned to {BLOCK_MIN} bytes"
            )));
        }
        Ok(())
    }

    fn writable(&self) -> Result<(), Outcome> {
        if self.export.read_only() {
            return Err(Outcome::Failed(ExportError::new(
                Errno::Perm,
                "the export is read-only",
            )));
        }
        Ok(())
    }

    fn execute(&mut self) -> Outcome {
        match self.try_execute() {
            Ok(o) | Err(o) => o,
        }
    }

    fn try_execute(&mut self) -> Result<Outcome, Outcome> {
        let r = self.req;
        let (off, len) = (r.offset, u64::from(r.len));
        let fua = r.flags & CMD_FLAG_FUA != 0;
        let done = |res: ExportResult<()>| match res {
            Ok(()) => Outcome::Done,
            Err(e) => Outcome::Failed(e),
        };
        Ok(match r.typ {
            CMD_READ => {
                let df = if self.neg.structured { CMD_FLAG_DF } else { 0 };
                self.check_flags(CMD_FLAG_FUA | df)?;
                if r.len > PAYLOAD_MAX {
                    return Err(inval(format!(
                        "read of {len} bytes (at most {PAYLOAD_MAX})"
                    )));
                }
                self.check_range(Errno::Inval)?;
                let mut buf = vec![0u8; r.len as usize];
                match self.export.read(off, &mut buf) {
                    Ok(()) => Outcome::Data(buf),
                    Err(e) => Outcome::Failed(e),
                }
            }
            CMD_WRITE => {
                self.check_flags(CMD_FLAG_FUA)?;
                self.writable()?;
                self.check_range(Errno::NoSpc)?;
                let data = self.payload.take().unwrap_or_default();
                done(self.export.write(off, &data, fua))
            }
            CMD_FLUSH => {
                self.check_flags(0)?;
                done(self.export.flush())
            }
            CMD_TRIM => {
                self.check_flags(CMD_FLAG_FUA)?;
                self.writable()?;
                self.check_range(Errno::Inval)?;
                done(self.export.trim(off, len, fua))
            }
            CMD_WRITE_ZEROES => {
                self.check_flags(CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO)?;
                self.writable()?;
                self.check_range(Errno::NoSpc)?;
                let may_trim = r.flags & CMD_FLAG_NO_HOLE == 0;
                if r.flags & CMD_FLAG_FAST_ZERO != 0 && !may_trim {
                    // Writing zeros is no faster than writing data.
                    return Err(Outcome::Failed(ExportError::new(
                        Errno::NotSup,
                        "zeroing without holes is not fast",
                    )));
                }
                done(self.export.zero(off, len, may_trim, fua))
            }
            CMD_CACHE => {
                self.check_flags(0)?;
                self.check_range(Errno::Inval)?;
                done(self.export.cache(off, len))
            }
            CMD_BLOCK_STATUS => {
                self.check_flags(CMD_FLAG_REQ_ONE)?;
                if !self.neg.meta {
                    return Err(inval("no metadata context was negotiated"));
                }
                if len == 0 {
                    return Err(inval("block status of 0 bytes"));
                }
                self.check_range(Errno::Inval)?;
                match self.export.extents(off, len) {
                    Ok(mut ext) => {
                        if ext.is_empty() {
                            return Err(Outcome::Failed(ExportError::new(Errno::Io, "no extents")));
                        }
                        ext.truncate(EXTENTS_MAX);
                        if r.flags & CMD_FLAG_REQ_ONE != 0 {
                            ext.truncate(1);
                            ext[0].len = ext[0].len.min(len);
                        }
                        Outcome::Extents(ext)
                    }
                    Err(e) => Outcome::Failed(e),
                }
            }
            t => return Err(inval(format!("unknown command {t}"))),
        })
    }

    fn reply(&self, outcome: Outcome) -> Vec<u8> {
        let cookie = self.req.cookie;
        let mut out = Vec::new();
        if !self.neg.structured {
            match outcome {
                Outcome::Done | Outcome::Extents(_) => simple_reply(&mut out, 0, cookie),
                Outcome::Data(d) => {
                    out.reserve(16 + d.len());
                    simple_reply(&mut out, 0, cookie);
                    out.extend_from_slice(&d);
                }
                Outcome::Failed(e) => simple_reply(&mut out, e.errno as u32, cookie),
            }
            return out;
        }
        match outcome {
            Outcome::Done => {
                chunk_header(&mut out, REPLY_FLAG_DONE, REPLY_TYPE_NONE, cookie, 0);
            }
            // An OFFSET_DATA chunk carries at least one byte.
            Outcome::Data(d) if d.is_empty() => {
                chunk_header(&mut out, REPLY_FLAG_DONE, REPLY_TYPE_NONE, cookie, 0);
            }
            Outcome::Data(d) => {
                out.reserve(28 + d.len());
                let len = 8 + d.len() as u32;
                chunk_header(
                    &mut out,
                    REPLY_FLAG_DONE,
                    REPLY_TYPE_OFFSET_DATA,
                    cookie,
                    len,
                );
                out.extend_from_slice(&self.req.offset.to_be_bytes());
                out.extend_from_slice(&d);
            }
            Outcome::Extents(ext) => {
                let mut descs: Vec<(u32, u32)> = Vec::with_capacity(ext.len());
                for e in ext {
                    let flags = if e.hole { STATE_HOLE | STATE_ZERO } else { 0 };
                    let mut left = e.len;
                    while left > 0 {
                        // Each descriptor's length is a u32, 512-aligned.
                        let n = left.min(u64::from(u32::MAX) & !511).max(1);
                        descs.push((n as u32, flags));
                        left -= n.min(left);
                    }
                }
                let len = 4 + 8 * descs.len() as u32;
                chunk_header(
                    &mut out,
                    REPLY_FLAG_DONE,
                    REPLY_TYPE_BLOCK_STATUS,
                    cookie,
                    len,
                );
                out.extend_from_slice(&META_BASE_ALLOCATION_ID.to_be_bytes());
                for (n, f) in descs {
                    out.extend_from_slice(&n.to_be_bytes());
                    out.extend_from_slice(&f.to_be_bytes());
                }
            }
            Outcome::Failed(e) => {
                let msg = &e.why.as_bytes()[..e.why.len().min(1024)];
                let len = 6 + msg.len() as u32;
                chunk_header(&mut out, REPLY_FLAG_DONE, REPLY_TYPE_ERROR, cookie, len);
                out.extend_from_slice(&(e.errno as u32).to_be_bytes());
                out.extend_from_slice(&(msg.len() as u16).to_be_bytes());
                out.extend_from_slice(msg);
            }
        }
        out
    }
}

fn cmd_name(t: u16) -> &'static str {
    match t {
        CMD_READ => "READ",
        CMD_WRITE => "WRITE",
        CMD_FLUSH => "FLUSH",
        CMD_TRIM => "TRIM",
        CMD_CACHE => "CACHE",
        CMD_WRITE_ZEROES => "WRITE_ZEROES",
        CMD_BLOCK_STATUS => "BLOCK_STATUS",
        _ => "unknown",
    }
}
