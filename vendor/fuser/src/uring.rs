//! FUSE over io_uring (a tarn patch; see TARN.md).
//!
//! With `/dev/fuse`, a request is queued on one shared queue and whichever
//! worker the kernel wakes takes it, usually on another CPU than the caller.
//! Linux 6.14+ can instead hand each request to a ring entry of a queue of
//! the caller's own CPU (`fs/fuse/dev_uring.c`). Here each CPU's queue has
//! workers pinned to it, each with its own io_uring and one registered
//! entry: a header buffer and a payload buffer. The kernel fills them and
//! completes the entry's command in the worker's context; the worker
//! dispatches the request as the `/dev/fuse` loop would, writes the reply
//! into the same buffers, and commits it with the command that also fetches
//! the next request.
//!
//! A queue starts with one worker and gets another when a request leaves
//! none of its workers idle, up to `Config::uring_per_queue`, so a quiet
//! mount costs one thread and one entry per CPU. A worker that fails on an
//! io_uring error is replaced: the kernel never hands a queue's requests
//! to another queue, so a queue without entries would hold its CPU's
//! requests.
//!
//! The `/dev/fuse` workers keep running: forgets, interrupts and
//! notification replies still use the device. Every other request waits in
//! the kernel (`fuse_block_alloc`) until each queue has a free entry, which
//! the kernel checks only when an entry registers; see `Shared::register`.

use std::alloc::Layout;
use std::io;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::Condvar;
use std::sync::Mutex;
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::thread;
use std::thread::JoinHandle;
use std::time::Duration;
use std::time::Instant;

use io_uring::IoUring;
use io_uring::cqueue;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;
use log::warn;
use nix::unistd::Uid;

use crate::Filesystem;
use crate::channel::Channel;
use crate::channel::ChannelSender;
use crate::ll::Operation;
use crate::request::RequestWithSender;
use crate::session::FilesystemHolder;
use crate::session::SessionACL;
use crate::session::SessionEventLoop;

/// `enum fuse_uring_cmd` (include/uapi/linux/fuse.h).
const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;

/// `struct fuse_uring_req_header`: `in_out` (the `fuse_in_header` of a
/// request, the `fuse_out_header` of its reply), `op_in` (the opcode's
/// fixed argument) and `struct fuse_uring_ent_in_out`.
const IN_OUT_OFF: usize = 0;
const OP_IN_OFF: usize = 128;
const OP_IN_LEN: usize = 128;
const ENT_IN_OUT_OFF: usize = 256;
/// `fuse_uring_ent_in_out`: flags u64, commit_id u64, payload_sz u32.
const ENT_COMMIT_ID_OFF: usize = ENT_IN_OUT_OFF + 8;
const ENT_PAYLOAD_SZ_OFF: usize = ENT_IN_OUT_OFF + 16;
const HEADER_LEN: usize = 288;

const IN_HEADER_LEN: usize = 40;
const OUT_HEADER_LEN: usize = 16;

/// Room in front of the payload buffer where the `fuse_in_header` and the
/// opcode's argument are copied, so that header, argument and payload form
/// the one contiguous request the parser expects without copying the
/// payload.
const PREFIX: usize = 4096;

/// Keeps one CPU from going idle while requests come in (see TARN.md).
///
/// A ring worker wakes its caller from the caller's own CPU. When another
/// CPU is idle, the scheduler moves the caller there, and on a virtual
/// machine whose idle vCPUs halt to the host that wake-up costs more than
/// the request (file creation ran at well under half the rate it reached
/// with a CPU kept busy; tarn's docs/MEASUREMENTS.md, "FUSE: io_uring
/// transport"). So for a short window after each request one thread of the
/// process spins at the lowest priority, yielding; a busy CPU is not a
/// wake-up target, and anything else that wants the CPU gets it.
///
/// Only while at most one request is being served, though. With several
/// at once (many callers, or one caller's writeback) the CPUs have their
/// work and do not go idle; the spinning only took CPU from it (with
/// every yield a trip through the scheduler), and many concurrent fsyncs
/// got faster when it slept through those stretches, while one job and
/// file creation were unchanged (tarn's docs/MEASUREMENTS.md, "FUSE:
/// keep-awake thread under load").
struct Awake {
    start: Instant,
    window_ns: u64,
    /// Nanoseconds after `start` of the last request.
    last: AtomicU64,
    /// Requests being served (from [`Awake::begin`] to the end of its
    /// [`Busy`]).
    serving: AtomicUsize,
    parked: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

/// Requests served at once from which the keep-awake thread stops
/// spinning (see [`Awake`]).
const AWAKE_SERVING_MAX: usize = 2;

/// A request being served ([`Awake::begin`]).
struct Busy(&'static Awake);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.serving.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long the keep-awake thread sleeps before looking again on its own
/// (a missed wake-up costs at most this much spinning later, never a hang).
const AWAKE_PARK_MAX: Duration = Duration::from_millis(100);

impl Awake {
    /// The process's one keep-awake thread, started on first use.
    fn get(window: Duration) -> Option<&'static Awake> {
        static AWAKE: OnceLock<Option<&'static Awake>> = OnceLock::new();
        *AWAKE.get_or_init(|| {
            let a: &'static Awake = Box::leak(Box::new(Awake {
                start: Instant::now(),
                window_ns: u64::try_from(window.as_nanos()).unwrap_or(u64::MAX),
                last: AtomicU64::new(0),
                serving: AtomicUsize::new(0),
                parked: AtomicBool::new(false),
                lock: Mutex::new(()),
                wake: Condvar::new(),
            }));
            thread::Builder::new()
                .name(String::from("fuser-awake"))
                .spawn(move || a.run())
                .ok()
                .map(|_| a)
        })
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// A request is being served, until the returned guard is dropped.
    fn begin(&'static self) -> Busy {
        self.last.store(self.now(), Ordering::SeqCst);
        self.serving.fetch_add(1, Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) {
            let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.wake.notify_one();
        }
        Busy(self)
    }

    fn run(&self) {
        // SAFETY: setpriority on this thread's own id; no memory involved.
        unsafe {
            let tid = libc::gettid();
            let _ = libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19);
        }
        loop {
            // Several requests at once: look again after a window.
            if self.serving.load(Ordering::SeqCst) >= AWAKE_SERVING_MAX {
                thread::sleep(Duration::from_nanos(self.window_ns));
                continue;
            }
            if self.now().saturating_sub(self.last.load(Ordering::SeqCst)) < self.window_ns {
                thread::yield_now();
                continue;
            }
            let g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.parked.store(true, Ordering::SeqCst);
            // A request between the check above and `parked`: go on.
            if self.now().saturating_sub(self.last.load(Ordering::SeqCst)) >= self.window_ns {
                let _ = self.wake.wait_timeout(g, AWAKE_PARK_MAX);
            }
            self.parked.store(false, Ordering::SeqCst);
        }
    }
}

/// A payload buffer a reply may be written into where it is: that of a
/// request without a payload of its own (a read), so no part of the request
/// lies there.
#[derive(Debug, Clone, Copy)]
struct Direct {
    ptr: *mut u8,
    cap: usize,
}

// SAFETY: `Direct` names the payload buffer of one ring entry. It is only
// written by the one reply of the request in flight (under the slot's
// lock), while the owning worker waits for that reply and does not touch
// the buffer; the worker clears it before the entry is committed.
unsafe impl Send for Direct {}

#[derive(Debug, Default)]
enum State {
    #[default]
    Idle,
    /// A request is being served.
    Pending(Option<Direct>),
    /// Its reply: the whole of it, or the `fuse_out_header` with the
    /// payload (of this many bytes) already in the entry's buffer.
    Sent { head: Vec<u8>, in_place: Option<usize> },
}

/// Where a request's reply is left for the worker that owns its entry. A
/// reply may be sent from another thread, after `dispatch` returned.
#[derive(Debug, Default)]
pub(crate) struct ReplySlot {
    state: Mutex<State>,
    sent: Condvar,
}

/// A reply as the worker gets it back from the slot.
enum Answer {
    Whole(Vec<u8>),
    InPlace { head: Vec<u8>, len: usize },
    Errno(i32),
}

impl ReplySlot {
    pub(crate) fn send(&self, data: &[io::IoSlice<'_>]) -> io::Result<()> {
        let total: usize = data.iter().map(|d| d.len()).sum();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let State::Pending(direct) = *st else {
            return Err(io::Error::other("fuse-uring: reply without a request"));
        };
        let mut head = Vec::with_capacity(OUT_HEADER_LEN.min(total));
        let in_place = match direct {
            Some(d) if total >= OUT_HEADER_LEN && total - OUT_HEADER_LEN <= d.cap => {
                let mut at = 0usize;
                for piece in data {
                    let mut piece: &[u8] = piece;
                    if head.len() < OUT_HEADER_LEN {
                        let n = (OUT_HEADER_LEN - head.len()).min(piece.len());
                        head.extend_from_slice(&piece[..n]);
                        piece = &piece[n..];
                    }
                    // SAFETY: `at + piece.len() <= total - 16 <= cap`, the
                    // buffer's size; see `Direct` for why no one else uses it.
                    unsafe {
                        std::ptr::copy_nonoverlapping(piece.as_ptr(), d.ptr.add(at), piece.len());
                    }
                    at += piece.len();
                }
                Some(at)
            }
            _ => {
                head.reserve(total);
                for d in data {
                    head.extend_from_slice(d);
                }
                None
            }
        };
        *st = State::Sent { head, in_place };
        self.sent.notify_one();
        Ok(())
    }

    fn start(&self, direct: Option<Direct>) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = State::Pending(direct);
    }

    /// Waits for the reply (`wait`), or takes what is there (`!wait`),
    /// and leaves the slot idle.
    fn finish(&self, wait: bool) -> Answer {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match std::mem::take(&mut *st) {
                State::Sent { head, in_place: None } => return Answer::Whole(head),
                State::Sent {
                    head,
                    in_place: Some(len),
                } => return Answer::InPlace { head, len },
                State::Pending(_) if !wait => return Answer::Errno(libc::EIO),
                State::Idle => return Answer::Errno(libc::EIO),
                pending => *st = pending,
            }
            st = self.sent.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A reply that goes back through a ring entry.
#[derive(Debug, Clone)]
pub(crate) struct UringSender {
    pub(crate) slot: Arc<ReplySlot>,
    /// For what only the device can do (backing files).
    pub(crate) ch: ChannelSender,
}

/// How many queues the kernel made: one per possible CPU.
fn possible_cpus() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let mut most = 0usize;
    for part in s.trim().split(',') {
        let last = part.rsplit('-').next().unwrap_or(part);
        let n: usize = last
            .parse()
            .map_err(|_| io::Error::other(format!("cpu list {s:?}")))?;
        most = most.max(n + 1);
    }
    Ok(most)
}

/// What a session needs to serve FUSE over io_uring, known before INIT
/// asks for the transport.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Transport {
    /// Payload buffer size of an entry (`KernelConfig::uring_payload_len`).
    pub(crate) payload_len: usize,
    /// The kernel's queues: one per possible CPU.
    pub(crate) queues: u16,
}

/// The queues the kernel will make, when this process can serve FUSE over
/// io_uring (the rings it needs can be made and the CPUs counted). Asked
/// before INIT requests the transport, since from then on the kernel holds
/// every request until each queue has an entry.
pub(crate) fn queues() -> Option<u16> {
    let ring: io::Result<IoUring<squeue::Entry128, cqueue::Entry>> = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(4);
    let why = match (ring, possible_cpus()) {
        (Ok(_), Ok(n)) => match u16::try_from(n) {
            Ok(n) => return Some(n),
            Err(_) => format!("{n} CPU queues"),
        },
        (Err(e), _) => format!("no io_uring ({e})"),
        (_, Err(e)) => format!("no CPU list ({e})"),
    };
    warn!("FUSE over io_uring not used: {why}");
    None
}

/// `/dev/fuse` workers a session keeps beside its rings (`Config::n_threads`
/// at most): the device then carries only forgets and interrupts.
pub(crate) const DEVICE_WORKERS: usize = 2;

/// Ring workers each queue starts with. More start while requests keep
/// every worker of a queue busy (a worker that takes a request and leaves
/// none idle starts the next), up to `Config::uring_per_queue`: a quiet
/// mount costs one thread and one entry per CPU, not the most it may need
/// (on a 64-CPU machine, 8 per queue would be 512 threads per dataset).
const WORKERS_START: usize = 1;

/// Ring workers a session replaces at most after an io_uring error. Past
/// that, a queue whose workers have all failed holds its CPU's requests
/// until the mount goes, so it is logged.
const RESPAWN_MAX: usize = 16;

/// Times a submission refused for a passing reason (`EINTR`, `EAGAIN`,
/// `EBUSY`) is tried again before the worker gives up.
const SUBMIT_TRIES: u32 = 10;

/// Pause before a failed worker's replacement starts.
const RESPAWN_PAUSE: Duration = Duration::from_millis(10);

/// Injected failures (`inject_failures`): the next this many entry
/// registrations of any ring worker fail as an io_uring error would.
static INJECTED_FAILURES: AtomicUsize = AtomicUsize::new(0);

/// Makes the next `n` entry registrations of ring workers fail as an
/// io_uring error would, so tests can check that failed workers are
/// replaced.
#[doc(hidden)]
pub fn inject_failures(n: usize) {
    INJECTED_FAILURES.store(n, Ordering::SeqCst);
}

/// Injected failures not used yet.
#[doc(hidden)]
pub fn injected_failures_left() -> usize {
    INJECTED_FAILURES.load(Ordering::SeqCst)
}

/// One CPU's queue: how many workers it has, and how many of them wait
/// for a request (their entry is registered and free).
#[derive(Default)]
struct Queue {
    workers: AtomicUsize,
    idle: AtomicUsize,
    /// Workers ever started (names them).
    started: AtomicUsize,
}

/// What the ring workers of one session share.
struct Shared<FS: Filesystem> {
    ch: Channel,
    filesystem: Arc<FilesystemHolder<FS>>,
    allowed: SessionACL,
    session_owner: Uid,
    payload_len: usize,
    awake: Option<&'static Awake>,
    per_queue_max: usize,
    queues: Vec<Queue>,
    /// Workers started and not ended, over all queues: none left means
    /// none can start another.
    live: AtomicUsize,
    respawns: AtomicUsize,
    handles: Mutex<Vec<JoinHandle<io::Result<()>>>>,
    /// Held across each entry registration. The kernel lets requests
    /// through only once every queue has a free entry, and checks that
    /// only when an entry registers, looking at the other queues: two
    /// registrations at once can each miss the other, and then no request
    /// would ever pass. One at a time, the last queue's sees all others.
    register: Mutex<()>,
}

/// The ring workers of a session.
pub(crate) struct Ring<FS: Filesystem + 'static> {
    shared: Arc<Shared<FS>>,
}

/// Starts `WORKERS_START` workers for each CPU's queue; more start on
/// demand, up to `per_queue` each.
pub(crate) fn spawn<FS: Filesystem + 'static>(
    ch: &Channel,
    filesystem: Arc<FilesystemHolder<FS>>,
    allowed: SessionACL,
    session_owner: Uid,
    per_queue: usize,
    transport: Transport,
    awake: Option<Duration>,
) -> Ring<FS> {
    let shared = Arc::new(Shared {
        ch: ch.clone(),
        filesystem,
        allowed,
        session_owner,
        payload_len: transport.payload_len,
        awake: awake.and_then(Awake::get),
        per_queue_max: per_queue,
        queues: (0..transport.queues).map(|_| Queue::default()).collect(),
        live: AtomicUsize::new(0),
        respawns: AtomicUsize::new(0),
        handles: Mutex::new(Vec::new()),
        register: Mutex::new(()),
    });
    'start: for qid in 0..transport.queues {
        for _ in 0..WORKERS_START.min(per_queue) {
            // The workers started still serve (and are joined). A queue
            // without an entry holds every request of the mount: say so.
            if !start_worker(&shared, qid) {
                log::error!(
                    "fuse-uring: no worker for queue {qid}; requests to this mount wait until \
                     it is unmounted"
                );
                break 'start;
            }
        }
    }
    Ring { shared }
}

/// Starts one more worker on queue `qid` unless it has the most it may;
/// false when none was started.
fn start_worker<FS: Filesystem + 'static>(shared: &Arc<Shared<FS>>, qid: u16) -> bool {
    let q = &shared.queues[usize::from(qid)];
    let max = shared.per_queue_max;
    if q.workers
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1))
        .is_err()
    {
        return false;
    }
    shared.live.fetch_add(1, Ordering::SeqCst);
    let name = format!("fuser-q{qid}-{}", q.started.fetch_add(1, Ordering::SeqCst));
    let w = Worker {
        qid,
        se: SessionEventLoop {
            thread_name: name.clone(),
            ch: shared.ch.clone(),
            filesystem: shared.filesystem.clone(),
            allowed: shared.allowed,
            session_owner: shared.session_owner,
            poll: None,
        },
        payload_len: shared.payload_len,
        awake: shared.awake,
        shared: shared.clone(),
    };
    // Under the lock, so that `join` cannot find the list empty while a
    // started worker's handle is still on its way to it.
    let mut handles = shared.handles.lock().unwrap_or_else(|e| e.into_inner());
    match thread::Builder::new().name(name).spawn(move || w.run()) {
        Ok(t) => {
            handles.push(t);
            true
        }
        Err(e) => {
            warn!("fuse-uring: cannot start a worker: {e}");
            q.workers.fetch_sub(1, Ordering::SeqCst);
            shared.live.fetch_sub(1, Ordering::SeqCst);
            false
        }
    }
}

impl<FS: Filesystem + 'static> Ring<FS> {
    /// Waits for every worker, including those started meanwhile (they
    /// all end when the kernel tears the queues down at unmount); returns
    /// the first error.
    pub(crate) fn join(self) -> io::Result<()> {
        let mut first = Ok(());
        loop {
            let handles =
                std::mem::take(&mut *self.shared.handles.lock().unwrap_or_else(|e| e.into_inner()));
            if handles.is_empty() {
                if self.shared.live.load(Ordering::SeqCst) == 0 {
                    return first;
                }
                // A worker between its own end and its `live` count.
                thread::sleep(Duration::from_millis(1));
                continue;
            }
            for h in handles {
                let r = h
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("ring worker panicked")));
                if first.is_ok() {
                    first = r;
                }
            }
        }
    }
}

struct Worker<FS: Filesystem + 'static> {
    qid: u16,
    se: SessionEventLoop<FS>,
    payload_len: usize,
    awake: Option<&'static Awake>,
    shared: Arc<Shared<FS>>,
}

/// The entry's memory: the header, and the prefix plus payload. The kernel
/// writes both only inside `io_uring_enter` of this worker (task work), so
/// between two waits they are this worker's alone.
struct Buffers {
    header: *mut u8,
    data: *mut u8,
    data_layout: Layout,
    header_layout: Layout,
    payload_len: usize,
}

impl Buffers {
    fn new(payload_len: usize) -> io::Result<Buffers> {
        let header_layout = Layout::from_size_align(HEADER_LEN, 64).map_err(io::Error::other)?;
        let data_layout =
            Layout::from_size_align(PREFIX + payload_len, 4096).map_err(io::Error::other)?;
        // SAFETY: both layouts have non-zero size.
        let header = unsafe { std::alloc::alloc_zeroed(header_layout) };
        if header.is_null() {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        }
        // SAFETY: as above.
        let data = unsafe { std::alloc::alloc_zeroed(data_layout) };
        if data.is_null() {
            // SAFETY: allocated just above with this layout.
            unsafe { std::alloc::dealloc(header, header_layout) };
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        }
        Ok(Buffers {
            header,
            data,
            data_layout,
            header_layout,
            payload_len,
        })
    }

    fn header(&self) -> &[u8] {
        // SAFETY: `header` is HEADER_LEN bytes, live until drop; the kernel
        // does not write it while the worker holds this borrow (see above).
        unsafe { std::slice::from_raw_parts(self.header, HEADER_LEN) }
    }

    fn header_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `header`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.header, HEADER_LEN) }
    }

    fn data(&self) -> &[u8] {
        // SAFETY: `data` is PREFIX + payload_len bytes, live until drop.
        unsafe { std::slice::from_raw_parts(self.data, PREFIX + self.payload_len) }
    }

    fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `data`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.data, PREFIX + self.payload_len) }
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with these layouts. `run` drops them
        // only after the kernel tore the entry down (or never registered
        // it); otherwise it leaks them (see there).
        unsafe {
            std::alloc::dealloc(self.header, self.header_layout);
            std::alloc::dealloc(self.data, self.data_layout);
        }
    }
}

fn read_u32(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(b[off..off + 4].try_into().unwrap_or_default())
}

fn read_u64(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(b[off..off + 8].try_into().unwrap_or_default())
}

fn pin_to(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_SET stays in bounds for
    // cpu < CPU_SETSIZE (checked); sched_setaffinity reads the set.
    unsafe {
        if cpu >= libc::CPU_SETSIZE as usize {
            return;
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        // An offline CPU: the worker runs anywhere, its queue is idle.
        let _ = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

enum Next {
    Request,
    Stop,
    Reregister,
}

impl<FS: Filesystem + 'static> Worker<FS> {
    fn run(self) -> io::Result<()> {
        pin_to(usize::from(self.qid));
        let result = self.run_entry();
        let shared = &self.shared;
        let left = shared.queues[usize::from(self.qid)]
            .workers
            .fetch_sub(1, Ordering::SeqCst)
            .saturating_sub(1);
        if let Err(e) = &result {
            // The kernel does not hand a queue's requests to another CPU's
            // queue: a queue whose workers have all ended holds them.
            if shared.respawns.fetch_add(1, Ordering::SeqCst) < RESPAWN_MAX {
                warn!("fuse-uring: worker of queue {} failed ({e}); starting another", self.qid);
                thread::sleep(RESPAWN_PAUSE);
                start_worker(shared, self.qid);
            } else if left == 0 {
                log::error!(
                    "fuse-uring: worker of queue {} failed ({e}) and {RESPAWN_MAX} were replaced \
                     already; the queue has no worker left, so requests from that CPU wait \
                     until the mount is unmounted",
                    self.qid
                );
            } else {
                warn!(
                    "fuse-uring: worker of queue {} failed ({e}); {RESPAWN_MAX} already replaced, \
                     not replacing it",
                    self.qid
                );
            }
        }
        // Last: while this worker counts, `Ring::join` waits for the
        // replacement it may have started.
        shared.live.fetch_sub(1, Ordering::SeqCst);
        result
    }

    fn run_entry(&self) -> io::Result<()> {
        let mut bufs = Buffers::new(self.payload_len)?;
        // Dropped (and the entry cancelled) before `bufs` is freed.
        let mut ring: IoUring<squeue::Entry128, cqueue::Entry> = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(4)?;
        let result = self.serve(&mut ring, &mut bufs);
        drop(ring);
        if result.is_err() {
            // The entry may still be registered: the kernel cancels it only
            // once the ring's file is released, asynchronously, and could
            // copy a request into the buffers until then. Never free memory
            // the kernel may still write (a worker fails this way only on
            // an unexpected io_uring error).
            std::mem::forget(bufs);
        }
        result
    }

    /// Serves the entry until the kernel tears it down (`Ok`) or io_uring
    /// fails (`Err`).
    fn serve(
        &self,
        ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
        bufs: &mut Buffers,
    ) -> io::Result<()> {
        let fd = self.se.ch.as_fd().as_raw_fd();
        let slot = Arc::new(ReplySlot::default());
        let sender = UringSender {
            slot: slot.clone(),
            ch: self.se.ch.sender(),
        };
        let queue = &self.shared.queues[usize::from(self.qid)];
        self.register(ring, fd, bufs)?;
        queue.idle.fetch_add(1, Ordering::SeqCst);
        loop {
            let next = self.wait(ring);
            // Whatever came, the entry no longer waits.
            let idle = queue.idle.fetch_sub(1, Ordering::SeqCst).saturating_sub(1);
            match next? {
                Next::Stop => return Ok(()),
                Next::Reregister => {
                    self.register(ring, fd, bufs)?;
                    queue.idle.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                Next::Request => {}
            }
            if idle == 0 {
                // Every entry of the queue is busy: the next request would
                // wait for one to be committed.
                start_worker(&self.shared, self.qid);
            }
            let busy = self.awake.map(Awake::begin);
            let commit_id = read_u64(bufs.header(), ENT_COMMIT_ID_OFF);
            let reply = match self.parse(bufs) {
                Some((range, has_payload)) => {
                    let direct = (!has_payload).then(|| Direct {
                        // SAFETY: PREFIX is inside the allocation.
                        ptr: unsafe { bufs.data.add(PREFIX) },
                        cap: bufs.payload_len,
                    });
                    slot.start(direct);
                    let data = &bufs.data()[range];
                    match RequestWithSender::new_uring(sender.clone(), data) {
                        Some(req) => {
                            // Forgets have no reply (and come through the
                            // device); do not wait for one.
                            let wait = !matches!(
                                req.request.operation(),
                                Ok(Operation::Forget(_) | Operation::BatchForget(_))
                            );
                            req.dispatch(&self.se);
                            slot.finish(wait)
                        }
                        None => slot.finish(false),
                    }
                }
                None => Answer::Errno(libc::EIO),
            };
            self.put_reply(bufs, commit_id, reply);
            drop(busy);
            self.submit(
                ring,
                fd,
                FUSE_IO_URING_CMD_COMMIT_AND_FETCH,
                commit_id,
                None,
            )?;
            queue.idle.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Copies the request's header and fixed argument in front of its
    /// payload; returns where the whole request lies in `bufs.data()`.
    /// Also says whether the request has a payload.
    fn parse(&self, bufs: &mut Buffers) -> Option<(std::ops::Range<usize>, bool)> {
        let h = bufs.header();
        let len = read_u32(h, IN_OUT_OFF) as usize;
        let payload = read_u32(h, ENT_PAYLOAD_SZ_OFF) as usize;
        if payload > bufs.payload_len {
            return None;
        }
        let arg0 = len.checked_sub(IN_HEADER_LEN)?.checked_sub(payload)?;
        if arg0 > OP_IN_LEN {
            return None;
        }
        let mut head = [0u8; IN_HEADER_LEN + OP_IN_LEN];
        head[..IN_HEADER_LEN].copy_from_slice(&h[IN_OUT_OFF..IN_OUT_OFF + IN_HEADER_LEN]);
        head[IN_HEADER_LEN..IN_HEADER_LEN + arg0].copy_from_slice(&h[OP_IN_OFF..OP_IN_OFF + arg0]);
        let start = PREFIX - IN_HEADER_LEN - arg0;
        bufs.data_mut()[start..PREFIX].copy_from_slice(&head[..IN_HEADER_LEN + arg0]);
        Some((start..PREFIX + payload, payload > 0))
    }

    /// Writes the reply (or an error reply) into the entry's buffers.
    fn put_reply(&self, bufs: &mut Buffers, unique: u64, reply: Answer) {
        let (head, payload) = match reply {
            Answer::InPlace { head, len } if head.len() == OUT_HEADER_LEN => (head, len),
            Answer::Whole(r)
                if r.len() >= OUT_HEADER_LEN && r.len() - OUT_HEADER_LEN <= bufs.payload_len =>
            {
                let len = r.len() - OUT_HEADER_LEN;
                bufs.data_mut()[PREFIX..PREFIX + len].copy_from_slice(&r[OUT_HEADER_LEN..]);
                (r, len)
            }
            Answer::Errno(e) => (error_reply(unique, e), 0),
            _ => {
                warn!("fuse-uring: a reply that does not fit the entry");
                (error_reply(unique, libc::EIO), 0)
            }
        };
        let h = bufs.header_mut();
        h[IN_OUT_OFF..IN_OUT_OFF + OUT_HEADER_LEN].copy_from_slice(&head[..OUT_HEADER_LEN]);
        h[ENT_PAYLOAD_SZ_OFF..ENT_PAYLOAD_SZ_OFF + 4]
            .copy_from_slice(&(payload as u32).to_ne_bytes());
    }

    fn register(
        &self,
        ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
        fd: i32,
        bufs: &mut Buffers,
    ) -> io::Result<()> {
        let _one_at_a_time = self
            .shared
            .register
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let iov = [
            libc::iovec {
                iov_base: bufs.header.cast(),
                iov_len: HEADER_LEN,
            },
            libc::iovec {
                // SAFETY: PREFIX is inside the allocation.
                iov_base: unsafe { bufs.data.add(PREFIX) }.cast(),
                iov_len: bufs.payload_len,
            },
        ];
        if INJECTED_FAILURES
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(io::Error::other("fuse-uring: injected failure"));
        }
        // The kernel reads `iov` while the submission is issued, inside
        // `submit` below, which returns before `iov` goes out of scope.
        self.submit(
            ring,
            fd,
            FUSE_IO_URING_CMD_REGISTER,
            0,
            Some(iov.as_ptr() as u64),
        )
    }

    fn submit(
        &self,
        ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
        fd: i32,
        cmd_op: u32,
        commit_id: u64,
        iov: Option<u64>,
    ) -> io::Result<()> {
        // struct fuse_uring_cmd_req: flags u64, commit_id u64, qid u16.
        let mut cmd = [0u8; 80];
        cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
        cmd[16..18].copy_from_slice(&self.qid.to_ne_bytes());
        let mut op = opcode::UringCmd80::new(types::Fd(fd), cmd_op).cmd(cmd);
        if let Some(addr) = iov {
            op = op.addr(Some(addr));
        }
        let mut sqe = op.build();
        if iov.is_some() {
            set_sqe_len(&mut sqe, 2);
        }
        // SAFETY: the SQE's pointers (the iovec array, read at issue time)
        // outlive the `submit` call below; the buffers the iovecs name live
        // as long as the ring.
        unsafe {
            ring.submission()
                .push(&sqe)
                .map_err(|_| io::Error::other("fuse-uring: submission queue full"))?;
        }
        // A submission that did not go in is tried again: the entry's
        // request (if any) is answered only through this ring.
        let mut tries = 0;
        loop {
            match ring.submit() {
                Ok(_) => return Ok(()),
                Err(e)
                    if tries < SUBMIT_TRIES
                        && matches!(
                            e.raw_os_error(),
                            Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                        ) =>
                {
                    tries += 1;
                    thread::sleep(Duration::from_micros(100) * tries);
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn wait(&self, ring: &mut IoUring<squeue::Entry128, cqueue::Entry>) -> io::Result<Next> {
        loop {
            if let Some(cqe) = ring.completion().next() {
                let res = cqe.result();
                return Ok(match res {
                    0 => Next::Request,
                    r if r == -libc::ENOTCONN
                        || r == -libc::ECONNABORTED
                        || r == -libc::ECANCELED
                        || r == -libc::ENODEV =>
                    {
                        Next::Stop
                    }
                    r if r == -libc::ENOENT => Next::Reregister,
                    r if r == -libc::EOPNOTSUPP || r == -libc::EINVAL => {
                        warn!(
                            "fuse-uring: queue {} refused: {}",
                            self.qid,
                            io::Error::from_raw_os_error(-r)
                        );
                        Next::Stop
                    }
                    r => return Err(io::Error::from_raw_os_error(-r)),
                });
            }
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

fn error_reply(unique: u64, errno: i32) -> Vec<u8> {
    let mut v = Vec::with_capacity(OUT_HEADER_LEN);
    v.extend_from_slice(&(OUT_HEADER_LEN as u32).to_ne_bytes());
    v.extend_from_slice(&(-errno).to_ne_bytes());
    v.extend_from_slice(&unique.to_ne_bytes());
    v
}

/// Sets `len` of a 128-byte SQE (the iovec count of a register command);
/// `UringCmd80` has no setter for it.
fn set_sqe_len(sqe: &mut squeue::Entry128, len: u32) {
    const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
    // SAFETY: `Entry128` is `#[repr(C)]` of a `#[repr(C)]` `io_uring_sqe`
    // (64 bytes, `len: u32` at byte 24) and 64 more bytes, so it is 128
    // initialized bytes (asserted above), and offset 24..28 is `len`.
    unsafe {
        let p = (sqe as *mut squeue::Entry128).cast::<u8>().add(24);
        std::ptr::copy_nonoverlapping(len.to_ne_bytes().as_ptr(), p, 4);
    }
}
