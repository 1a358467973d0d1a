//! FUSE over io_uring (a tarn patch; see TARN.md).
//!
//! With `/dev/fuse`, a request is queued on one shared queue and whichever
//! worker the kernel wakes takes it, usually on another CPU than the caller.
//! Linux 6.14+ can instead hand each request to a ring entry of a queue of
//! the caller's own CPU (`fs/fuse/dev_uring.c`). Here each CPU has a few
//! workers, pinned to it, each with its own io_uring and one registered
//! entry: a header buffer and a payload buffer. The kernel fills them and
//! completes the entry's command in the worker's context; the worker
//! dispatches the request as the `/dev/fuse` loop would, writes the reply
//! into the same buffers, and commits it with the command that also fetches
//! the next request.
//!
//! The `/dev/fuse` workers keep running: requests sent before every queue
//! has an entry, forgets, interrupts and notification replies still use the
//! device.

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
/// the request (create: ~3,800 files/s against ~10,400 with a CPU kept
/// busy). So for a short window after each request one thread of the
/// process spins at the lowest priority, yielding; a busy CPU is not a
/// wake-up target, and anything else that wants the CPU gets it.
struct Awake {
    start: Instant,
    window_ns: u64,
    /// Nanoseconds after `start` of the last request.
    last: AtomicU64,
    parked: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
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

    /// A request was served.
    fn touch(&self) {
        self.last.store(self.now(), Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) {
            let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.wake.notify_one();
        }
    }

    fn run(&self) {
        // SAFETY: setpriority on this thread's own id; no memory involved.
        unsafe {
            let tid = libc::gettid();
            let _ = libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19);
        }
        loop {
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

/// Starts `per_queue` workers for each CPU's queue.
pub(crate) fn spawn<FS: Filesystem + 'static>(
    ch: &Channel,
    filesystem: Arc<FilesystemHolder<FS>>,
    allowed: SessionACL,
    session_owner: Uid,
    per_queue: usize,
    payload_len: usize,
    awake: Option<Duration>,
) -> io::Result<Vec<JoinHandle<io::Result<()>>>> {
    let queues = possible_cpus()?;
    if u16::try_from(queues).is_err() {
        return Err(io::Error::other(format!("{queues} CPU queues")));
    }
    let awake = awake.and_then(Awake::get);
    let mut threads = Vec::new();
    for qid in 0..queues as u16 {
        for i in 0..per_queue {
            let name = format!("fuser-q{qid}-{i}");
            let w = Worker {
                qid,
                se: SessionEventLoop {
                    thread_name: name.clone(),
                    ch: ch.clone(),
                    filesystem: filesystem.clone(),
                    allowed,
                    session_owner,
                    poll: None,
                },
                payload_len,
                awake,
            };
            match thread::Builder::new().name(name).spawn(move || w.run()) {
                Ok(t) => threads.push(t),
                // The threads started still serve (and are joined); a queue
                // without an entry keeps the kernel on the device.
                Err(e) => {
                    warn!("fuse-uring: cannot start a worker: {e}");
                    return Ok(threads);
                }
            }
        }
    }
    Ok(threads)
}

struct Worker<FS: Filesystem> {
    qid: u16,
    se: SessionEventLoop<FS>,
    payload_len: usize,
    awake: Option<&'static Awake>,
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

impl<FS: Filesystem> Worker<FS> {
    fn run(self) -> io::Result<()> {
        pin_to(usize::from(self.qid));
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
        self.register(ring, fd, bufs)?;
        loop {
            match self.wait(ring)? {
                Next::Stop => return Ok(()),
                Next::Reregister => {
                    self.register(ring, fd, bufs)?;
                    continue;
                }
                Next::Request => {}
            }
            if let Some(a) = self.awake {
                a.touch();
            }
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
            self.submit(
                ring,
                fd,
                FUSE_IO_URING_CMD_COMMIT_AND_FETCH,
                commit_id,
                None,
            )?;
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
        ring.submit()?;
        Ok(())
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
