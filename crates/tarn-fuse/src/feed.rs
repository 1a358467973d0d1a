//! Feeding the kernel's page cache the rest of a record.
//!
//! A random read of 16 KiB from a file of 128 KiB records reads the whole
//! record from disk (a block is checksummed whole), replies with its 16
//! KiB and keeps the record in the block cache. The other seven 16 KiB
//! reads of that record would each still cost a FUSE round trip. Instead,
//! after replying, the worker hands the bytes it did not return to the
//! feed thread, which stores them in the kernel's page cache with
//! FUSE_NOTIFY_STORE; those reads are then page-cache hits that never
//! reach the daemon (OpenZFS's ARC hit, without the trip to user space).
//!
//! ## Why this cannot return stale bytes
//! FUSE_NOTIFY_STORE overwrites whatever the page cache holds, dirty pages
//! included, and extends the kernel's file size if it stores past it. So a
//! store is only safe when the page cache and the layer agree on every
//! byte it covers, and the file is no longer than the layer says:
//! - The kernel changes a file's pages only through a handle that may
//!   write (writes, mmap, fallocate, copy_file_range) or a size change
//!   (`truncate(2)`, O_TRUNC). No handle open for writing means no dirty
//!   pages: the kernel writes them back at close and before the release.
//! - A read takes a [`Ticket`] before it reads the layer: only when no
//!   handle may write the file, and it notes the mount's change count.
//!   Every open for writing, every open with `O_TRUNC`, every size change
//!   and every new inode (whose number may be a freed file's) bumps the
//!   count, so a store whose count moved is dropped: the bytes it carries
//!   may be older than the kernel's, or another file's.
//! - A store in progress when such an open, size change or new inode of
//!   its file arrives makes that request's reply wait until the store is
//!   done ([`PageFeed::opened`], [`PageFeed::resized`],
//!   [`PageFeed::new_inode`]): the program cannot write (or truncate the
//!   page cache, or meet the new inode) until the store is over, and the
//!   bytes it stored were the file's until then.
//! - The layer clamps the bytes to the file's size.
//!
//! The change count is the mount's, not the file's: any write open drops
//! the stores queued at that moment, which costs only the saving.
//!
//! ## Why it does not deadlock
//! A store waits for the page locks of the pages it fills, and a page the
//! kernel is reading is locked until a worker answers that read. So the
//! store runs on its own thread and a worker never waits for it: jobs are
//! offered to a bounded queue and dropped when it is full, and a reply
//! that must follow a store is handed to the feed thread instead of
//! waited for.
//!
//! The limit: over io_uring, the ring worker whose request it was holds
//! its ring entry until that reply is sent, and its CPU's queue starts
//! another worker for the next request, up to `uring_per_queue` (8). Only
//! that many opens for writing (or new inodes, or size changes) of the
//! very file being stored, all from one CPU within the store, would leave
//! a read on that CPU unserved and the store waiting for it. The seek
//! thread's replies (`ops.rs`, SEEK_DATA) have the same bound.

use std::collections::HashMap;
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, OnceLock};

use fuser::{INodeNo, Notifier, OpenAccMode, OpenFlags};
use parking_lot::Mutex;
use tarn_zpl::Rest;

use crate::ops::guard;
use crate::PAGE_FEED_QUEUE_MAX;

/// The kernel's page size for the page cache (FUSE pages are 4 KiB).
const PAGE_BYTES: u64 = 4096;

/// Work that must wait for the store in progress.
pub(crate) type After = Box<dyn FnOnce() + Send>;

/// Where the bytes go: FUSE_NOTIFY_STORE on the session ([`to_kernel`]).
pub(crate) type Store = Box<dyn Fn(INodeNo, u64, &[u8]) -> std::io::Result<()> + Send>;

/// Stores into the kernel's page cache once the session exists.
pub(crate) fn to_kernel(notifier: Arc<OnceLock<Notifier>>) -> Store {
    Box::new(move |node, offset, bytes| match notifier.get() {
        Some(n) => n.store(node, offset, bytes),
        None => Ok(()),
    })
}

/// Leave to feed a read's rest: the mount's change count when the read
/// began, with no handle open for writing the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket(u64);

struct Job {
    node: INodeNo,
    ino: u64,
    ticket: Ticket,
    rest: Vec<Rest>,
}

#[derive(Default)]
struct State {
    /// Open handles that may write, per inode.
    writers: HashMap<u64, u32>,
    /// Opens for writing or with `O_TRUNC`, size changes and new inodes so
    /// far (see the module comment).
    changes: u64,
    /// The inode whose bytes the feed thread is storing now.
    storing: Option<u64>,
    /// Replies to send once that store is done.
    after: Vec<After>,
}

/// The page-cache feed of one mount, and the open-for-writing count the
/// file system also uses to know which files may have dirty pages.
pub(crate) struct PageFeed {
    state: Arc<Mutex<State>>,
    jobs: SyncSender<Job>,
}

impl PageFeed {
    /// Starts the feed thread; it ends when the feed is dropped.
    pub(crate) fn new(sink: Store) -> std::io::Result<PageFeed> {
        let state = Arc::new(Mutex::new(State::default()));
        let (jobs, queue) = mpsc::sync_channel::<Job>(PAGE_FEED_QUEUE_MAX);
        let shared = state.clone();
        std::thread::Builder::new()
            .name(String::from("tarn-fuse-feed"))
            .spawn(move || {
                for job in queue {
                    guard("page feed", || store(&shared, &sink, job));
                }
            })?;
        Ok(PageFeed { state, jobs })
    }

    /// A handle was opened with `flags`. `reply` answers the open; it waits
    /// for a store of this file in progress if the handle may write or the
    /// open truncated the file (`O_TRUNC` even read-only, as Linux does).
    pub(crate) fn opened(&self, ino: u64, flags: i32, reply: impl FnOnce() + Send + 'static) {
        let writes = OpenFlags(flags).acc_mode() != OpenAccMode::O_RDONLY;
        if !writes && flags & libc::O_TRUNC == 0 {
            return reply();
        }
        self.change(ino, writes, reply);
    }

    /// A new inode (create, mkdir, symlink, mknod), with a handle that may
    /// write if `writes`. Its number may be a freed file's: stores queued
    /// for that file are dropped, and `reply`, which tells the kernel of
    /// the new inode, waits for one in progress (bytes of the old file
    /// must not land in the new one's page cache, or a symlink's cached
    /// target).
    pub(crate) fn new_inode(&self, ino: u64, writes: bool, reply: impl FnOnce() + Send + 'static) {
        self.change(ino, writes, reply);
    }

    /// A handle opened with `flags` was released.
    pub(crate) fn released(&self, ino: u64, flags: i32) {
        if OpenFlags(flags).acc_mode() == OpenAccMode::O_RDONLY {
            return;
        }
        let mut s = self.state.lock();
        if let Some(n) = s.writers.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                s.writers.remove(&ino);
            }
        }
    }

    /// The file's size changed (`truncate(2)`, `ftruncate(2)`): queued
    /// stores are dropped, and `reply` waits for a store of this file in
    /// progress.
    pub(crate) fn resized(&self, ino: u64, reply: impl FnOnce() + Send + 'static) {
        self.change(ino, false, reply);
    }

    /// The filesystem was replaced (a rollback): queued stores are dropped
    /// and `after` waits for any store in progress, whatever its file.
    pub(crate) fn barrier(&self, after: impl FnOnce() + Send + 'static) {
        let mut s = self.state.lock();
        s.changes += 1;
        if s.storing.is_some() {
            s.after.push(Box::new(after));
        } else {
            drop(s);
            after();
        }
    }

    /// Moves the change count (and counts a writer if `writes`); runs
    /// `after` now, or after the store of `ino` in progress (boxed only
    /// then).
    fn change(&self, ino: u64, writes: bool, after: impl FnOnce() + Send + 'static) {
        let mut s = self.state.lock();
        if writes {
            *s.writers.entry(ino).or_insert(0) += 1;
        }
        s.changes += 1;
        if s.storing == Some(ino) {
            s.after.push(Box::new(after));
        } else {
            drop(s);
            after();
        }
    }

    /// Whether some handle may write the file (and so the kernel may hold
    /// dirty pages of it).
    pub(crate) fn has_writers(&self, ino: u64) -> bool {
        self.state.lock().writers.contains_key(&ino)
    }

    /// Leave to feed what a read of `ino` starting now fetches, if no
    /// handle may write the file.
    pub(crate) fn ticket(&self, ino: u64) -> Option<Ticket> {
        let s = self.state.lock();
        (!s.writers.contains_key(&ino)).then_some(Ticket(s.changes))
    }

    /// Offers the bytes a read fetched but did not return to the feed
    /// thread; dropped if its queue is full.
    pub(crate) fn feed(&self, node: INodeNo, ino: u64, ticket: Ticket, rest: Vec<Rest>) {
        if rest.is_empty() {
            return;
        }
        // A full queue drops the job: only the saving is lost.
        let _ = self.jobs.try_send(Job {
            node,
            ino,
            ticket,
            rest,
        });
    }
}

/// The feed thread's part: stores a job's bytes if its ticket still holds.
fn store(state: &Mutex<State>, sink: &Store, job: Job) {
    {
        let mut s = state.lock();
        if s.changes != job.ticket.0 || s.writers.contains_key(&job.ino) {
            return;
        }
        s.storing = Some(job.ino);
    }
    // Ends the store and sends the replies that waited for it, also if
    // the store panics (a write open must never wait forever).
    let _done = StoreDone(state);
    for r in &job.rest {
        // Whole pages only: a page stored from its middle is not marked
        // up to date, so it would only be read again.
        let skip = (r.offset.next_multiple_of(PAGE_BYTES) - r.offset) as usize;
        let Some(bytes) = r.bytes().get(skip..).filter(|b| !b.is_empty()) else {
            continue;
        };
        // ENOENT: the kernel no longer has the inode, nothing to feed.
        if let Err(e) = sink(job.node, r.offset + skip as u64, bytes) {
            tracing::debug!(ino = job.ino, error = %e, "page feed store failed");
        }
    }
}

struct StoreDone<'a>(&'a Mutex<State>);

impl Drop for StoreDone<'_> {
    fn drop(&mut self) {
        let after = {
            let mut s = self.0.lock();
            s.storing = None;
            std::mem::take(&mut s.after)
        };
        for reply in after {
            guard("page feed reply", reply);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{channel, Receiver, Sender};
    use std::time::Duration;

    use super::*;

    const WAIT: Duration = Duration::from_secs(10);
    const RDWR: i32 = libc::O_RDWR;

    fn rest(offset: u64, len: usize) -> Vec<Rest> {
        vec![Rest {
            offset,
            block: Arc::new(vec![7u8; len]),
            range: 0..len,
        }]
    }

    /// A feed whose stores are reported as (offset, len), each after
    /// `gate` lets it through (when given).
    fn feed(gate: Option<Receiver<()>>) -> (PageFeed, Receiver<(u64, usize)>) {
        let (tx, rx) = channel();
        let gate = gate.map(Mutex::new);
        let sink: Store = Box::new(move |_, offset, bytes| {
            tx.send((offset, bytes.len())).unwrap();
            if let Some(g) = &gate {
                g.lock().recv().unwrap();
            }
            Ok(())
        });
        (PageFeed::new(sink).unwrap(), rx)
    }

    fn replied(tx: &Sender<&'static str>, what: &'static str) -> impl FnOnce() + Send + 'static {
        let tx = tx.clone();
        move || tx.send(what).unwrap()
    }

    #[test]
    fn a_store_whose_ticket_moved_is_dropped() {
        let (f, stored) = feed(None);
        let (tx, rx) = channel();
        let stale = f.ticket(9).unwrap();
        f.opened(9, RDWR, replied(&tx, "open"));
        assert_eq!(rx.recv_timeout(WAIT), Ok("open"), "nothing stored: no wait");
        // A handle may write: no leave to feed.
        assert_eq!(f.ticket(9), None);
        assert!(f.has_writers(9));
        f.released(9, RDWR);
        assert!(!f.has_writers(9));
        let fresh = f.ticket(9).unwrap();
        f.feed(INodeNo(9), 9, stale, rest(0, 8192));
        f.feed(INodeNo(9), 9, fresh, rest(1 << 20, 8192));
        // The queue is FIFO: had the stale job been stored, it came first.
        assert_eq!(stored.recv_timeout(WAIT), Ok((1 << 20, 8192)));
        // A size change moves the count too.
        let t = f.ticket(9).unwrap();
        f.resized(9, replied(&tx, "setattr"));
        assert_eq!(rx.recv_timeout(WAIT), Ok("setattr"));
        f.feed(INodeNo(9), 9, t, rest(0, 8192));
        f.feed(INodeNo(9), 9, f.ticket(9).unwrap(), rest(2 << 20, 8192));
        assert_eq!(stored.recv_timeout(WAIT), Ok((2 << 20, 8192)));
        // Read-only opens change nothing, unless they truncate.
        let t = f.ticket(9).unwrap();
        f.opened(9, libc::O_RDONLY, replied(&tx, "read open"));
        assert_eq!(rx.recv_timeout(WAIT), Ok("read open"));
        assert_eq!(f.ticket(9), Some(t));
        f.opened(
            9,
            libc::O_RDONLY | libc::O_TRUNC,
            replied(&tx, "truncating open"),
        );
        assert_eq!(rx.recv_timeout(WAIT), Ok("truncating open"));
        assert!(f.ticket(9).is_some_and(|now| now != t));
        assert!(!f.has_writers(9));
        // So does a new inode, which may have a freed file's number.
        let t = f.ticket(9).unwrap();
        f.new_inode(9, false, replied(&tx, "mkdir"));
        assert_eq!(rx.recv_timeout(WAIT), Ok("mkdir"));
        assert!(f.ticket(9).is_some_and(|now| now != t));
    }

    #[test]
    fn a_write_open_resize_or_new_inode_during_a_store_is_answered_after_it() {
        let (go, gate) = channel();
        let (f, stored) = feed(Some(gate));
        let (tx, rx) = channel();
        f.feed(INodeNo(5), 5, f.ticket(5).unwrap(), rest(0, 4096));
        // The store has begun and waits at the gate.
        assert_eq!(stored.recv_timeout(WAIT), Ok((0, 4096)));
        // Neither call blocks the (worker) thread that makes it.
        f.opened(5, libc::O_WRONLY, replied(&tx, "open 5"));
        f.resized(5, replied(&tx, "setattr 5"));
        f.new_inode(5, false, replied(&tx, "symlink 5"));
        // Another file is not held up.
        f.opened(6, RDWR, replied(&tx, "open 6"));
        assert_eq!(rx.recv_timeout(WAIT), Ok("open 6"));
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        go.send(()).unwrap();
        assert_eq!(rx.recv_timeout(WAIT), Ok("open 5"));
        assert_eq!(rx.recv_timeout(WAIT), Ok("setattr 5"));
        assert_eq!(rx.recv_timeout(WAIT), Ok("symlink 5"));
    }

    #[test]
    fn a_store_that_panics_holds_up_no_write_open() {
        let (tx, rx) = channel();
        let sink: Store = Box::new(move |_, _, _| {
            tx.send(()).unwrap();
            panic!("store failed");
        });
        let f = PageFeed::new(sink).unwrap();
        f.feed(INodeNo(4), 4, f.ticket(4).unwrap(), rest(0, 4096));
        rx.recv_timeout(WAIT).unwrap();
        let (done, replies) = channel();
        f.opened(4, RDWR, replied(&done, "open"));
        assert_eq!(replies.recv_timeout(WAIT), Ok("open"));
    }

    #[test]
    fn only_whole_pages_are_stored() {
        let (f, stored) = feed(None);
        // 1000..13000: the first whole page starts at 4096.
        f.feed(INodeNo(3), 3, f.ticket(3).unwrap(), rest(1000, 12_000));
        assert_eq!(stored.recv_timeout(WAIT), Ok((4096, 12_000 - 3096)));
        // Less than the rest of a page: nothing to store.
        f.feed(INodeNo(3), 3, f.ticket(3).unwrap(), rest(1000, 3000));
        f.feed(INodeNo(3), 3, f.ticket(3).unwrap(), rest(8192, 100));
        assert_eq!(stored.recv_timeout(WAIT), Ok((8192, 100)));
    }
}
