//! The intent log (ZFS's `zil.c`): what makes `fsync` fast.
//!
//! A txg commit writes a whole tree of blocks and takes milliseconds; an
//! `fsync` must not wait for one. Instead every change a dataset makes is
//! also described by a small record kept in memory ([`Zilog::log`]), and
//! `fsync` ([`Zilog::commit`]) writes the records not yet durable into a
//! log block with one durable write (`LogStore::log_write`: `RWF_DSYNC`
//! on a file, which does not wait for the txg's own writes to the same
//! device the way an `fdatasync` would), and returns. When the txg holding the
//! same changes commits, the records are useless: they are dropped from
//! memory, and the log blocks holding only such records are freed at that
//! txg ([`Zilog::quiesced`]). The log is never read while the pool runs.
//!
//! After a crash, the import claims the log blocks that no committed space
//! map knows about ([`Zilog::open`]), the dataset's mount replays the
//! records of txgs after the last committed one, in order, in one txg, and
//! starts a fresh chain in that same txg ([`Zilog::replay_done`]).
//!
//! ## The chain
//! See `tarn_format::zil`. The header (in the object set, rewritten only at
//! txg quiesce) points at the first block still needed; each block points
//! at the next one, allocated before the block is written. The unwritten
//! block at the end (`tail`) is where the next commit writes; its size is
//! predicted from the recent commits' (`predict_commit_bytes`), between
//! [`LOG_BLOCK_MIN_BYTES`] and [`LOG_BLOCK_MAX_BYTES`]. A dataset with no
//! chain yet makes one and waits for a txg so that the header naming it is
//! durable before the first block is acknowledged (ZFS's `zil_create`).
//!
//! ## Group commit
//! One committer at a time writes (a commit is under way while
//! `PendingState::started` is ahead of `finished`); it takes the
//! records of every committer registered so far, so N threads calling
//! fsync at once cost about one block write, not N. The others wait on a
//! condition variable and are all woken when the write is done: each
//! then sees whether a commit took its records and is over, and returns,
//! or one of them writes what is still needed. Commits are numbered; the
//! first to start after a committer registered takes all of its records,
//! but a commit that fails puts the records it took back, and a later
//! commit may take them again: a committer whose records are gone from
//! the queue returns only when no commit is under way, or when that first
//! commit is over and no commit from it on put records back
//! (`requeued_by`; `zil_crash` found the window where it returned while
//! the retaking commit was still writing). A committer whose records
//! were written never writes again the few that arrived meanwhile (each
//! would then make a log write of its own).
//!
//! A commit too big for one block (eight 16 KiB fsyncs grouped already
//! are) cuts its records into blocks, allocating each one's successor
//! first, and writes them all at once (`LogStore::log_write_many`), so it
//! costs one device round trip, not one per block; a crash that keeps
//! only some of them leaves a chain that ends at the first missing one,
//! before the commit's last block, and replay drops the commit.
//!
//! Tried and measured slower on the machines tarn is built on: writing a
//! commit's blocks while the previous commit's are still in flight (as
//! ZFS issues lwbs), ending commits in chain order. With 8 fsync threads
//! commits got smaller (1.4 fsyncs each instead of 4) and the device
//! took every extra flush: 8,988–9,962 IOPS with two commits in flight
//! and 4,934–9,193 with four, against 9,544–10,266 one at a time.
//!
//! Also tried, no gain (16 KiB writes, 8 fsync threads, no log device,
//! 2 CPUs): waking only the committers of the commit that ended and one
//! of the next commit's to write it (the one chosen took longer to get a
//! CPU than the first of all woken: 4,243–5,911 IOPS against
//! 5,849–6,152), and waking them with `Thread::unpark`, so that those
//! whose commit is over return without taking the lock again
//! (4,776–5,075 against 5,326–6,266). A trace of those runs: the writer
//! is busy 90 % of the time, a commit takes ~460 µs (p50; ~400 of them
//! the device's) and carries 3.8 fsyncs, and its committers come back
//! one after another, ~25, 60–90, 100–180 and 140–250 µs after it ends,
//! however they are woken (most likely the two CPUs running each one's
//! reply, and its thread's next write, before the next).
//!
//! Also tried, no gain (4 KiB writes, 8 fsync threads, no log device, 2
//! CPUs): a committer about to write waits for the others to come back
//! first (OpenZFS's `zfs_commit_timeout_pct`). It waited until as many
//! had registered since the last commit as were ever registered at once
//! in the last four commits, or for at most half (or twice) the last
//! commit's time. Commits then carried 7–8.7 fsyncs instead of 4.1. The
//! device time grew with them, 16 KiB: 220–310 µs, 28 KiB: 275–490 µs,
//! while a txg was writing beside it. The device also sat idle during
//! the wait. Results: 9,379 / 7,777 / 11,836 IOPS waiting up to half,
//! 10,087 up to twice, against 13,770 / 9,589 / 11,641 without waiting
//! (alternating fresh pools).
//!
//! What a commit takes: `fsync` of a file ([`Zilog::commit_object`])
//! needs that file's writes and attribute changes and every namespace
//! record (they are few, and later records depend on them), not other
//! files' data — ZFS's async and sync itx lists. Committers register their
//! object before queueing, and the writer takes the records of every
//! registered object, so fsyncs of different files still share a write.
//! Records left behind keep their sequence numbers; replay applies
//! records in sequence order, and a file's records only ever touch that
//! file, so writing them later changes nothing. When a file's last link
//! goes, its pending records are dropped ([`Zilog::remove_async`]).
//!
//! ## Write data
//! A write is logged by reference (object, offset, length): its bytes are
//! read from the object set when the record is committed, as ZFS's
//! `WR_NEED_COPY`, so the log never keeps a second copy of dirty data in
//! memory. If the range was overwritten since, the newer bytes are logged,
//! which replays to the same end state because every later record is
//! replayed after it.
//!
//! A large write (at least [`LOG_IMMEDIATE_WRITE_BYTES`], or any with
//! `logbias=throughput`) is logged by pointer instead, as ZFS's
//! `WR_INDIRECT`, unless a log device is there to absorb it: each whole
//! block it covers is written to its final place at commit
//! (`Objset::sync_block`) and the record carries the block pointer; the
//! txg's sync then installs that block rather than writing the data a
//! second time. Those blocks are flushed before the log blocks naming
//! them are written, so a record that survives a crash always finds its
//! block. Import claims the blocks the surviving records name; replay
//! copies their bytes into the file and frees them.
//!
//! ## Failures
//! If writing or flushing a log block fails, `commit` falls back to
//! waiting for the txg holding the records: slow, but never an
//! acknowledgement without durability.
//!
//! Locking: `writer` → `chain` → `pending`; `quiesced` takes only `chain`
//! and `pending`, so a txg can quiesce while a commit is writing. A
//! committer waits for the writer's turn holding no lock (`committed`
//! releases `pending` while it waits).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_dmu::Objset;
use tarn_format::zil::{
    decode_log_block, decode_records, encode_log_block, LogBlockHeader, LogPtr, LogRecord,
    LoggedRecord, ZilHeader, LOG_BLOCK_COMMIT_END, LOG_BLOCK_HEADER_SIZE,
};
use tarn_format::BlockPtr;
use tarn_pool::{LogStore, StoreError, TxgEngine, TxgError};

/// Smallest log block: room for one 4 KiB write record.
pub const LOG_BLOCK_MIN_BYTES: u32 = 8 << 10;
/// Largest log block (ZFS's `zil_maxblocksize`).
pub const LOG_BLOCK_MAX_BYTES: u32 = 128 << 10;
/// Writes are logged in pieces of at most this many bytes, so that every
/// record fits the largest block.
pub const LOG_WRITE_CHUNK_BYTES: usize = 64 << 10;
/// When more write data than this waits for a commit, the commit waits
/// for the txg instead: the txg writes the data once, where logging it
/// would write it twice (a big sequential write ending in one fsync).
/// OpenZFS avoids the double write per record (`WR_INDIRECT`); this is the
/// coarse form of the same rule.
pub const LOG_BULK_BYTES: u64 = 32 << 20;
/// Writes at least this long are written in place and logged by pointer
/// (ZFS's `zfs_immediate_write_sz`), unless the pool has a log device and
/// the dataset's `logbias` is `latency`: then the fast log device takes
/// the bytes, and the write costs one device write in the commit instead
/// of a pool write plus a log write.
pub const LOG_IMMEDIATE_WRITE_BYTES: u64 = 32 << 10;
/// Longest chain walked at import (a bound against a corrupt loop).
pub const LOG_CHAIN_MAX_BLOCKS: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ZilError {
    #[error("intent log: {0}")]
    Store(#[from] StoreError),
    #[error("intent log: {0}")]
    Txg(#[from] TxgError),
    #[error("intent log: {0}")]
    Dmu(#[from] tarn_dmu::DmuError),
    #[error("intent log header: {0}")]
    Header(#[from] tarn_format::Corrupted),
}

pub type Result<T> = std::result::Result<T, ZilError>;

/// A record waiting in memory for a commit or its txg.
enum Pending {
    Record(LogRecord),
    /// A write whose bytes are read from the object set at commit.
    WriteRef {
        obj: u64,
        offset: u64,
        len: u64,
        /// Whole blocks are written in place and logged by pointer.
        indirect: bool,
    },
}

struct Itx {
    seq: u64,
    txg: u64,
    rec: Pending,
}

impl Itx {
    /// The object an asynchronous record belongs to: writes, truncates
    /// and attribute changes, which an `fsync` of another file does not
    /// need (ZFS's async itx lists). Namespace and xattr records are
    /// synchronous: every commit takes them, in order.
    fn async_obj(&self) -> Option<u64> {
        match &self.rec {
            Pending::WriteRef { obj, .. } => Some(*obj),
            Pending::Record(
                LogRecord::Write { obj, .. }
                | LogRecord::Setattr { obj, .. }
                | LogRecord::FreeRange { obj, .. },
            ) => Some(*obj),
            Pending::Record(_) => None,
        }
    }

    /// Bytes of write data the record stands for.
    fn write_len(&self) -> u64 {
        match self.rec {
            Pending::WriteRef { len, .. } => len,
            Pending::Record(_) => 0,
        }
    }
}

/// The chain as written so far.
struct Chain {
    guid: u64,
    /// Blocks written since the head, in order, with the newest txg of
    /// their records.
    written: VecDeque<(LogPtr, u64)>,
    /// The allocated, unwritten block the next commit writes.
    tail: LogPtr,
    /// The header as last set in the object set.
    header: ZilHeader,
}

/// Counters for `zpool iostat`-like reporting and the tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ZilStats {
    pub commits: u64,
    pub blocks_written: u64,
    pub bytes_written: u64,
    pub records_written: u64,
    /// Commits that fell back to a txg commit after a log I/O error.
    pub fallbacks: u64,
    /// Commits that waited for the txg because more than
    /// `LOG_BULK_BYTES` of writes were pending.
    pub bulk_commits: u64,
    pub records_replayed: u64,
    /// Blocks written in place and logged by pointer.
    pub indirect_blocks: u64,
}

/// One dataset's intent log.
pub struct Zilog {
    store: Arc<dyn LogStore>,
    txg: Arc<TxgEngine>,
    os: Arc<Objset>,
    pending: PendingLock,
    /// Signalled (with `pending`) when a commit finishes.
    committed: std::sync::Condvar,
    chain: Mutex<Option<Chain>>,
    writer: Mutex<()>,
    stats: Mutex<ZilStats>,
    replay: Mutex<Option<Replay>>,
    /// Bytes of the last `RECENT_COMMITS` commits (block size prediction).
    recent: Mutex<VecDeque<usize>>,
    /// `logbias=throughput`: every write's whole blocks go in place.
    throughput: std::sync::atomic::AtomicBool,
}

/// How many recent commits the next block's size is predicted from.
const RECENT_COMMITS: usize = 16;
/// The next commit is predicted to be as big as this percentile of the
/// recent ones ([`predict_commit_bytes`]): the median.
const PREDICT_PERCENTILE: usize = 50;

struct PendingState {
    itxs: VecDeque<Itx>,
    next_seq: u64,
    /// Objects whose `commit_object` callers are queued for or inside the
    /// writer (with their count), and how many `commit`s of everything
    /// are: the writer takes all of their records at once, so concurrent
    /// fsyncs of different files still share one log write.
    committing: HashMap<u64, usize>,
    committing_all: usize,
    /// Commits started and finished so far, numbered from 1. One commit
    /// at a time: while `started` is ahead of `finished` a committer is
    /// writing, and the others wait on `Zilog::committed`.
    started: u64,
    finished: u64,
    /// The last commit that put the records it took back (0: none).
    requeued_by: u64,
    /// A writer panicked: every commit from now on waits for a txg.
    poisoned: bool,
}

/// `PendingState` behind a std mutex, so that `Zilog::committed` (a std
/// condition variable) wakes every committer of a finished commit at once.
/// parking_lot's `notify_all` wakes one waiter and requeues the rest on
/// the mutex, each woken only when the one before unlocks it: the waiters
/// of one commit came back one scheduler wake-up after another (with 8
/// fsync threads, the fourth replied ~385 µs after its commit was
/// durable, longer than the log write itself).
struct PendingLock(std::sync::Mutex<PendingState>);

impl PendingLock {
    fn lock(&self) -> std::sync::MutexGuard<'_, PendingState> {
        // A writer that panics marks the state itself (`Writing`), and
        // every committer then waits for a txg: the std poison adds
        // nothing.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl PendingState {
    /// Does a commit for `obj` (`None`: everything) need `i` durable?
    fn needed_by(&self, i: &Itx, obj: Option<u64>) -> bool {
        obj.is_none() || i.async_obj().is_none_or(|o| Some(o) == obj)
    }

    fn wants(&self, i: &Itx) -> bool {
        self.committing_all > 0
            || i.async_obj()
                .is_none_or(|o| self.committing.contains_key(&o))
    }
}

/// What import found in the log, waiting for the mount to replay it.
struct Replay {
    records: Vec<LoggedRecord>,
    /// Every block of the old chain (claimed), to free after replay.
    blocks: Vec<LogPtr>,
    /// The blocks of indirect writes to replay (claimed): replay copies
    /// their bytes, then they are freed with the chain.
    indirect: Vec<BlockPtr>,
}

impl Zilog {
    /// Opens a dataset's log at import, before the sync thread runs:
    /// walks the chain the header names, claims its blocks in `claim_txg`
    /// (the first txg to be committed) and keeps the records of txgs after
    /// `last_synced` for [`Zilog::take_replay`].
    pub fn open(
        store: Arc<dyn LogStore>,
        txg: Arc<TxgEngine>,
        os: Arc<Objset>,
        claim_txg: u64,
        last_synced: u64,
    ) -> Result<Arc<Zilog>> {
        let header = ZilHeader::decode(&os.zil_header())?;
        let mut blocks = Vec::new();
        let mut records = Vec::new();
        let mut indirect = Vec::new();
        if header.guid != 0 {
            // Records of the commit being read; applied only once its
            // last block (COMMIT_END) is found.
            let mut partial: Vec<LoggedRecord> = Vec::new();
            let mut at = header.head;
            while !at.is_none() && blocks.len() < LOG_CHAIN_MAX_BLOCKS {
                let mut good = None;
                let mut verify = |b: &[u8]| match decode_log_block(b, header.guid, at.seq) {
                    Ok((h, area)) => match decode_records(area) {
                        Ok(r) => {
                            good = Some((h.next, h.flags, r));
                            true
                        }
                        Err(_) => false,
                    },
                    Err(_) => false,
                };
                // A block that does not verify ends the chain: it is the
                // unwritten tail, or torn by the crash.
                if store.log_read(&at, &mut verify).is_err() {
                    break;
                }
                let Some((next, flags, recs)) = good else {
                    break;
                };
                // Claim it; a block whose space is partly free is no block.
                if store.log_claim(claim_txg, &at).is_err() {
                    break;
                }
                blocks.push(at);
                let recs: Vec<LoggedRecord> =
                    recs.into_iter().filter(|r| r.txg > last_synced).collect();
                // The blocks its indirect writes name are claimed too: no
                // committed space map knows them. One that cannot be
                // claimed ends the chain, like a block that fails its
                // checksum.
                if !claim_indirect(store.as_ref(), claim_txg, &recs, &mut indirect) {
                    break;
                }
                partial.extend(recs);
                if flags & LOG_BLOCK_COMMIT_END != 0 {
                    records.append(&mut partial);
                }
                at = next;
            }
            // The unwritten tail is allocated too (the header or the last
            // block names it); claim it so it is freed with the rest.
            if !at.is_none() && store.log_claim(claim_txg, &at).is_ok() {
                blocks.push(at);
            }
        }
        records.sort_by_key(|r| r.seq);
        let next_seq = records.last().map_or(1, |r| r.seq + 1);
        // A dataset that never had a chain has nothing to replay.
        let replay = (header.guid != 0).then_some(Replay {
            records,
            blocks,
            indirect,
        });
        Ok(Zilog::new(store, txg, os, next_seq, replay))
    }

    /// A log for a dataset created now (nothing to claim or replay).
    pub fn create(store: Arc<dyn LogStore>, txg: Arc<TxgEngine>, os: Arc<Objset>) -> Arc<Zilog> {
        Zilog::new(store, txg, os, 1, None)
    }

    fn new(
        store: Arc<dyn LogStore>,
        txg: Arc<TxgEngine>,
        os: Arc<Objset>,
        next_seq: u64,
        replay: Option<Replay>,
    ) -> Arc<Zilog> {
        Arc::new(Zilog {
            store,
            txg,
            os,
            pending: PendingLock(std::sync::Mutex::new(PendingState {
                itxs: VecDeque::new(),
                next_seq,
                committing: HashMap::new(),
                committing_all: 0,
                started: 0,
                finished: 0,
                requeued_by: 0,
                poisoned: false,
            })),
            committed: std::sync::Condvar::new(),
            chain: Mutex::new(None),
            writer: Mutex::new(()),
            stats: Mutex::new(ZilStats::default()),
            replay: Mutex::new(replay),
            recent: Mutex::new(VecDeque::new()),
            throughput: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub fn stats(&self) -> ZilStats {
        *self.stats.lock()
    }

    /// Has the import-time replay not been done yet?
    pub fn replay_pending(&self) -> bool {
        self.replay.lock().is_some()
    }

    /// The records to replay, in order, until [`Zilog::replay_done`]
    /// (so a mount that fails halfway and is retried replays them all
    /// again). Indirect writes come back as plain writes of their block's
    /// bytes; a block that cannot be read (a checksum error) ends the
    /// replay there, as a broken chain does, and says so on stderr.
    pub fn take_replay(&self) -> Vec<LoggedRecord> {
        let records = self
            .replay
            .lock()
            .as_ref()
            .map(|r| r.records.clone())
            .unwrap_or_default();
        let mut out = Vec::with_capacity(records.len());
        for r in records {
            let LogRecord::WriteIndirect { obj, offset, bp } = r.record else {
                out.push(r);
                continue;
            };
            match self.os.read_block(&bp) {
                Ok(data) => out.push(LoggedRecord {
                    record: LogRecord::Write { obj, offset, data },
                    ..r
                }),
                Err(e) => {
                    eprintln!(
                        "tarn: intent log replay stops at record {} (txg {}): \
                         its indirect write block is unreadable: {e}",
                        r.seq, r.txg
                    );
                    break;
                }
            }
        }
        out
    }

    /// Ends replay: frees the old chain's blocks in `txg` and starts a new
    /// chain whose header lands in `txg` too, so the replayed changes and
    /// the discarded log commit together. The caller holds `txg` open.
    pub fn replay_done(&self, txg: u64, replayed: u64) -> Result<()> {
        let Some(old) = self.replay.lock().take() else {
            return Ok(());
        };
        for b in &old.blocks {
            self.store.log_free(txg, b);
        }
        for bp in &old.indirect {
            self.os.free_unreferenced(txg, bp);
        }
        let mut chain = self.chain.lock();
        let c = self.new_chain(txg)?;
        self.os.set_zil_header(c.header.encode());
        *chain = Some(c);
        self.stats.lock().records_replayed += replayed;
        Ok(())
    }

    fn new_chain(&self, txg: u64) -> Result<Chain> {
        let mut guid = 0;
        while guid == 0 {
            guid = rand::random();
        }
        let mut tail = self.store.log_alloc(txg, LOG_BLOCK_MIN_BYTES)?;
        tail.seq = 1;
        Ok(Chain {
            guid,
            written: VecDeque::new(),
            tail,
            header: ZilHeader { guid, head: tail },
        })
    }

    /// Logs a change made under a hold of `txg`.
    pub fn log(&self, txg: u64, rec: LogRecord) {
        self.push(txg, Pending::Record(rec));
    }

    /// Logs a write of `len` bytes at `offset` of `obj` under a hold of
    /// `txg`; the bytes are read back at commit. Whether whole blocks are
    /// then logged by copy or written in place and logged by pointer is
    /// decided here, as ZFS's `zfs_log_write` does: in place for
    /// `logbias=throughput`, and for writes of at least
    /// [`LOG_IMMEDIATE_WRITE_BYTES`] when the pool has no log device.
    pub fn log_write(&self, txg: u64, obj: u64, offset: u64, len: u64) {
        let indirect = self.throughput.load(std::sync::atomic::Ordering::Relaxed)
            || (len >= LOG_IMMEDIATE_WRITE_BYTES && !self.store.has_log_devices());
        self.push(
            txg,
            Pending::WriteRef {
                obj,
                offset,
                len,
                indirect,
            },
        );
    }

    /// The dataset's `logbias`: `true` for `throughput`.
    pub fn set_throughput(&self, on: bool) {
        self.throughput
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Forgets the pending writes and attribute changes of `obj`, whose
    /// last link is gone (ZFS's `zil_remove_async`): after a crash the
    /// object is deleted anyway, and its number may be reused by a later
    /// create that these records must not touch.
    pub fn remove_async(&self, obj: u64) {
        self.pending
            .lock()
            .itxs
            .retain(|i| i.async_obj() != Some(obj));
    }

    fn push(&self, txg: u64, rec: Pending) {
        let mut p = self.pending.lock();
        let seq = p.next_seq;
        p.next_seq += 1;
        p.itxs.push_back(Itx { seq, txg, rec });
    }

    /// Makes every change logged so far durable: returns once the records
    /// are in durable log blocks (or their txg has committed).
    pub fn commit(&self) -> Result<()> {
        self.commit_for(None)
    }

    /// What `fsync` of `obj` needs durable (ZFS's `zil_commit(zilog,
    /// foid)`): every synchronous record (namespace, xattrs) and `obj`'s
    /// own writes and attribute changes; other files' writes stay pending
    /// for their own `fsync` or their txg.
    pub fn commit_object(&self, obj: u64) -> Result<()> {
        self.commit_for(Some(obj))
    }

    fn commit_for(&self, obj: Option<u64>) -> Result<()> {
        if self.replay_pending() {
            // The header still names the chain to replay: no new chain
            // before the mount has replayed it, so a txg it is.
            return Ok(self.txg.wait_synced(0)?);
        }
        let (_registered, upto, first) = Registered::new(&self.pending, obj);
        let mut p = self.pending.lock();
        loop {
            if p.poisoned {
                // A writer panicked with records it had taken: only the
                // txg makes sure they are durable now.
                drop(p);
                return Ok(self.txg.wait_synced(0)?);
            }
            let need = p.itxs.iter().any(|i| i.seq <= upto && p.needed_by(i, obj));
            // A commit either makes the records it took durable or puts
            // them back (`need` again), where a later commit may take them
            // once more. So, with none of this caller's records pending:
            // with no commit under way, every one that took them is over
            // and they are durable; or, if the commit numbered `first`
            // (the first to start after this caller registered, which
            // takes all of them) is over and neither it nor a later one
            // put records back, that commit made them durable.
            let over = p.finished == p.started;
            if !need && (over || (p.finished >= first && p.requeued_by < first)) {
                return Ok(());
            }
            if need && over {
                break;
            }
            p = self
                .committed
                .wait(p)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        p.started += 1;
        let ticket = p.started;
        drop(p);
        let _writing = Writing(self);
        self.write_pending(ticket)
    }

    /// The writer's part of a commit: takes the records every registered
    /// committer wants and makes them durable, in log blocks or, when
    /// that fails or more than `LOG_BULK_BYTES` of data is pending, by
    /// their txg.
    fn write_pending(&self, ticket: u64) -> Result<()> {
        let _w = self.writer.lock();
        let synced = self.txg.last_synced();
        let itxs: Vec<Itx> = {
            let mut p = self.pending.lock();
            let bytes: u64 = p
                .itxs
                .iter()
                .filter(|i| p.wants(i))
                .map(Itx::write_len)
                .sum();
            if bytes > LOG_BULK_BYTES {
                let newest = p.itxs.iter().filter(|i| p.wants(i)).map(|i| i.txg).max();
                drop(p);
                self.stats.lock().bulk_commits += 1;
                return Ok(self.txg.wait_synced(newest.unwrap_or(0))?);
            }
            // Everything the registered committers want, not only this
            // caller's records: they then find theirs written.
            let (take, keep): (VecDeque<Itx>, VecDeque<Itx>) = std::mem::take(&mut p.itxs)
                .into_iter()
                .partition(|i| p.wants(i));
            p.itxs = keep;
            take.into_iter().filter(|i| i.txg > synced).collect()
        };
        if itxs.is_empty() {
            return Ok(());
        }
        let max_txg = itxs.iter().map(|i| i.txg).max().unwrap_or(0);
        self.stats.lock().commits += 1;
        if self.write_records(&itxs).is_ok() {
            return Ok(());
        }
        // Never acknowledge without durability: fall back to the txg that
        // holds the same changes. The chain's tail may sit on a device
        // that failed: the next commit starts a new chain wherever the
        // pool now puts log blocks.
        self.stats.lock().fallbacks += 1;
        let fallback = self
            .reset_locked()
            .and_then(|reset| Ok(self.txg.wait_synced(max_txg.max(reset.unwrap_or(0)))?));
        if fallback.is_err() {
            // Neither the log nor the txg made them durable: they stay
            // pending, so a later fsync retries instead of finding
            // nothing to do and acknowledging what was never written.
            self.requeue(itxs, ticket);
        }
        fallback
    }

    /// Puts records the failed commit numbered `ticket` took back among
    /// the pending ones, in sequence order.
    fn requeue(&self, itxs: Vec<Itx>, ticket: u64) {
        let mut p = self.pending.lock();
        p.requeued_by = p.requeued_by.max(ticket);
        let mut all: Vec<Itx> = std::mem::take(&mut p.itxs).into();
        all.extend(itxs);
        all.sort_by_key(|i| i.seq);
        p.itxs = all.into();
    }

    /// Encodes `itxs` into blocks at the tail of the chain and writes them.
    fn write_records(&self, itxs: &[Itx]) -> Result<()> {
        self.ensure_chain()?;
        let mut encoded: Vec<(u64, Vec<u8>)> = Vec::new();
        // Vdevs holding blocks written in place: flushed before the log.
        let mut vdevs: Vec<u32> = Vec::new();
        for itx in itxs {
            for rec in self.resolve(itx.txg, &itx.rec, &mut vdevs)? {
                let mut b = Vec::with_capacity(rec.encoded_len());
                rec.encode_into(itx.txg, itx.seq, &mut b);
                encoded.push((itx.txg, b));
            }
        }
        // The blocks indirect records point at are durable before any log
        // block naming them is written: a crash can then never keep a
        // record whose block it lost, which would end the replay there
        // and take acknowledged commits after it along.
        for v in vdevs.drain(..) {
            self.store.log_flush(v)?;
        }
        let total: usize = encoded.iter().map(|(_, b)| b.len()).sum();
        let predicted = {
            let mut r = self.recent.lock();
            if r.len() == RECENT_COMMITS {
                r.pop_front();
            }
            r.push_back(total);
            predict_commit_bytes(r.iter().copied())
        };
        // Cut the records into blocks, each allocating the one it names
        // next, then write them all at once (ZFS keeps several lwbs in
        // flight too): a commit bigger than one block pays for one device
        // round trip, not one per block. A crash that keeps only some of
        // them is safe: replay stops at the first block missing from the
        // chain and drops a commit whose last block it did not reach.
        let (at, guid) = {
            let c = self.chain.lock();
            let c = c.as_ref().expect("chain exists");
            (c.tail, c.guid)
        };
        let mut planned: Vec<(LogPtr, Vec<u8>, u32, u64)> = Vec::new();
        let mut cur = at;
        let mut left = total;
        let mut i = 0;
        while i < encoded.len() {
            let room = cur.size as usize - LOG_BLOCK_HEADER_SIZE;
            let mut body = Vec::new();
            let mut n = 0u32;
            let mut max_txg = 0;
            while i < encoded.len() && body.len() + encoded[i].1.len() <= room {
                body.extend_from_slice(&encoded[i].1);
                max_txg = max_txg.max(encoded[i].0);
                n += 1;
                i += 1;
            }
            left -= body.len();
            // A block holding the rest of this commit is sized for it; the
            // one after the commit's last is the next commit's.
            let want = if left > 0 { left } else { predicted };
            let mut next = match self.alloc_block(block_size_for(want)) {
                Ok(next) => next,
                Err(e) => {
                    // Nothing written yet: give back what this commit took.
                    let taken = planned.iter().skip(1).map(|(p, ..)| *p);
                    self.free_unlinked_all(taken.chain((cur != at).then_some(cur)));
                    return Err(e);
                }
            };
            next.seq = cur.seq + 1;
            let header = LogBlockHeader {
                guid,
                seq: cur.seq,
                nrecords: n,
                next,
                flags: if i == encoded.len() {
                    LOG_BLOCK_COMMIT_END
                } else {
                    0
                },
            };
            planned.push((cur, encode_log_block(&header, &body), n, max_txg));
            cur = next;
        }
        let writes: Vec<(LogPtr, &[u8])> = planned.iter().map(|(p, b, ..)| (*p, &b[..])).collect();
        let results = self.store.log_write_many(&writes);
        // The chain keeps the blocks before the first that failed; that
        // one's place stays the tail, to be written again, and the blocks
        // after it, written or not, are unlinked: the next write there
        // names another successor, and a block's sequence number never
        // repeats, so replay never follows one of them.
        let failed = results.iter().position(|r| r.is_err());
        let kept = failed.unwrap_or(planned.len());
        {
            let mut c = self.chain.lock();
            let c = c.as_mut().expect("chain exists");
            for (p, _, _, max_txg) in &planned[..kept] {
                c.written.push_back((*p, *max_txg));
            }
            c.tail = planned.get(kept).map_or(cur, |(p, ..)| *p);
        }
        {
            let mut st = self.stats.lock();
            for (p, _, n, _) in &planned[..kept] {
                st.blocks_written += 1;
                st.bytes_written += u64::from(p.size);
                st.records_written += u64::from(*n);
            }
        }
        if let Some(f) = failed {
            let unlinked = planned.iter().skip(f + 1).map(|(p, ..)| *p);
            self.free_unlinked_all(unlinked.chain(std::iter::once(cur)));
            let e = results
                .into_iter()
                .nth(f)
                .and_then(|r| r.err())
                .expect("the failed block has an error");
            return Err(e.into());
        }
        Ok(())
    }

    /// The records a pending entry stands for: a write read back now, in
    /// pieces that fit a block, or for an indirect write its whole blocks
    /// written in place (their vdevs added to `vdevs`, to flush) and the
    /// rest by copy. Nothing for a write whose object is gone.
    fn resolve(&self, txg: u64, rec: &Pending, vdevs: &mut Vec<u32>) -> Result<Vec<LogRecord>> {
        let (obj, offset, len, indirect) = match *rec {
            Pending::Record(ref r) => return Ok(vec![r.clone()]),
            Pending::WriteRef {
                obj,
                offset,
                len,
                indirect,
            } => (obj, offset, len, indirect),
        };
        let Ok(info) = self.os.object_info(obj) else {
            return Ok(Vec::new()); // freed since: a later remove covers it
        };
        let bs = u64::from(info.block_size).max(1);
        let end = offset + len;
        let mut out = Vec::new();
        let mut at = offset;
        while at < end {
            let blkid = at / bs;
            let (lo, hi) = (blkid * bs, (blkid + 1) * bs);
            if indirect && lo == at && hi <= end {
                if let Some(bp) = self.os.sync_block(obj, blkid, txg)? {
                    for d in bp.dvas.iter().filter(|d| !d.is_empty()) {
                        if !vdevs.contains(&d.vdev) {
                            vdevs.push(d.vdev);
                        }
                    }
                    out.push(LogRecord::WriteIndirect {
                        obj,
                        offset: lo,
                        bp,
                    });
                    self.stats.lock().indirect_blocks += 1;
                    at = hi;
                    continue;
                }
            }
            let piece_end = if indirect { hi.min(end) } else { end };
            if !self.copy_write(obj, at, piece_end - at, &mut out) {
                return Ok(out);
            }
            at = piece_end;
        }
        Ok(out)
    }

    /// Appends `len` bytes at `offset` of `obj` as write records of at
    /// most `LOG_WRITE_CHUNK_BYTES`; `false` if the object is gone.
    fn copy_write(&self, obj: u64, offset: u64, len: u64, out: &mut Vec<LogRecord>) -> bool {
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(LOG_WRITE_CHUNK_BYTES as u64) as usize;
            let mut data = vec![0u8; n];
            if self.os.read(obj, offset + at, &mut data).is_err() {
                return false;
            }
            out.push(LogRecord::Write {
                obj,
                offset: offset + at,
                data,
            });
            at += n as u64;
        }
        true
    }

    /// Allocates a log block in the open txg (held while allocating, so
    /// the allocation lands in a txg that has not started to commit).
    fn alloc_block(&self, size: u32) -> Result<LogPtr> {
        let h = self.txg.hold()?;
        let at = self.store.log_alloc(h.txg, size)?;
        if self.store.log_txg_full(h.txg) {
            // Only the sync of the txg frees its log blocks: ask for it
            // now, before the log device fills and the log spills into
            // the pool.
            self.txg.request_sync();
        }
        Ok(at)
    }

    /// Frees blocks a commit allocated but left out of the chain, in one
    /// txg hold.
    fn free_unlinked_all(&self, blocks: impl IntoIterator<Item = LogPtr>) {
        if let Ok(h) = self.txg.hold() {
            for at in blocks {
                self.store.log_free(h.txg, &at);
            }
        }
    }

    /// Makes sure a chain exists whose header is durable.
    fn ensure_chain(&self) -> Result<()> {
        if self.chain.lock().is_some() {
            return Ok(());
        }
        let txg = {
            let h = self.txg.hold()?;
            let mut chain = self.chain.lock();
            if chain.is_none() {
                let c = self.new_chain(h.txg)?;
                self.os.set_zil_header(c.header.encode());
                *chain = Some(c);
            }
            h.txg
        };
        self.txg.wait_synced(txg)?;
        Ok(())
    }

    /// Called when the holders of `txg` have drained, before the dataset
    /// is frozen: frees the log blocks whose records all belong to txgs up
    /// to `txg`, and moves the header forward (the header and the frees
    /// commit with `txg`, so they count only once `txg`'s changes do).
    ///
    /// The records of `txg` itself stay in memory until it has synced:
    /// an `fsync` while it syncs must still find and log them, or it
    /// would acknowledge changes a crash during that sync loses (ZFS
    /// likewise cleans itxs only in `zil_clean`, after the sync). The
    /// sync thread quiesces `txg` only after `txg - 1` synced, so those
    /// records are dropped here.
    pub fn quiesced(&self, txg: u64) {
        self.pending.lock().itxs.retain(|i| i.txg >= txg);
        let mut chain = self.chain.lock();
        let Some(c) = chain.as_mut() else { return };
        while c.written.front().is_some_and(|(_, t)| *t <= txg) {
            let (b, _) = c.written.pop_front().expect("front exists");
            self.store.log_free(txg, &b);
        }
        let head = c.written.front().map_or(c.tail, |(b, _)| *b);
        if head != c.header.head {
            c.header.head = head;
            self.os.set_zil_header(c.header.encode());
        }
    }

    /// Abandons the chain (ZFS's `zil_reset`, for a log device that is
    /// leaving or failed): in the open txg, frees every block of the
    /// chain and clears the header, so the records already written become
    /// durable with that txg instead, which is returned to wait for. The
    /// next commit starts a new chain wherever the pool now puts log
    /// blocks. A log still waiting for replay is left alone (`None`).
    pub fn reset(&self) -> Result<Option<u64>> {
        let _w = self.writer.lock();
        self.reset_locked()
    }

    /// [`Zilog::reset`] for a caller holding `writer`.
    fn reset_locked(&self) -> Result<Option<u64>> {
        if self.replay_pending() {
            return Ok(None);
        }
        let hold = self.txg.hold()?;
        if let Some(c) = self.chain.lock().take() {
            for (b, _) in &c.written {
                self.store.log_free(hold.txg, b);
            }
            self.store.log_free(hold.txg, &c.tail);
            self.os.set_zil_header(ZilHeader::default().encode());
        }
        Ok(Some(hold.txg))
    }

    /// Frees every block of the log in `txg` (the dataset is destroyed).
    pub fn destroy(&self, txg: u64) {
        if let Some(old) = self.replay.lock().take() {
            for b in &old.blocks {
                self.store.log_free(txg, b);
            }
            for bp in &old.indirect {
                self.os.free_unreferenced(txg, bp);
            }
        }
        if let Some(c) = self.chain.lock().take() {
            for (b, _) in &c.written {
                self.store.log_free(txg, b);
            }
            self.store.log_free(txg, &c.tail);
        }
    }
}

/// The writer's turn, given back on drop (every return path of the
/// writer, and a panic), which wakes the committers waiting for it.
struct Writing<'a>(&'a Zilog);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        let mut p = self.0.pending.lock();
        p.finished += 1;
        p.poisoned |= std::thread::panicking();
        drop(p);
        self.0.committed.notify_all();
    }
}

/// A committer's registration in `PendingState::committing`, undone on
/// drop (every return path of `commit_for`).
struct Registered<'a> {
    pending: &'a PendingLock,
    obj: Option<u64>,
}

impl<'a> Registered<'a> {
    /// Registers the committer and returns the last sequence number logged
    /// before it: the records it must see durable are those up to there.
    /// Also returns the number the next commit to start will have: that
    /// commit takes every record the committer needs (and, if it fails,
    /// puts them back: see `commit_for`).
    fn new(pending: &'a PendingLock, obj: Option<u64>) -> (Self, u64, u64) {
        let mut p = pending.lock();
        match obj {
            Some(o) => *p.committing.entry(o).or_default() += 1,
            None => p.committing_all += 1,
        }
        let upto = p.next_seq.saturating_sub(1);
        let first = p.started + 1;
        (Registered { pending, obj }, upto, first)
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        let mut p = self.pending.lock();
        match self.obj {
            Some(o) => {
                if let Some(n) = p.committing.get_mut(&o) {
                    *n -= 1;
                    if *n == 0 {
                        p.committing.remove(&o);
                    }
                }
            }
            None => p.committing_all -= 1,
        }
    }
}

/// Claims, in `txg`, every copy of every block the indirect writes among
/// `recs` name, adding them to `claimed`; `false` (claiming nothing more)
/// if one cannot be claimed.
fn claim_indirect(
    store: &dyn LogStore,
    txg: u64,
    recs: &[LoggedRecord],
    claimed: &mut Vec<BlockPtr>,
) -> bool {
    for r in recs {
        let LogRecord::WriteIndirect { bp, .. } = &r.record else {
            continue;
        };
        // The copies this claim allocated (given back if the block turns
        // out not to be the log's, or cannot be claimed: a corrupt log).
        let mut fresh = Vec::new();
        let mut ours = true;
        for d in bp.dvas.iter().filter(|d| !d.is_empty()) {
            let at = LogPtr {
                vdev: d.vdev,
                size: bp.psize,
                offset: d.offset,
                seq: 0,
            };
            match store.log_claim(txg, &at) {
                Ok(true) => fresh.push(at),
                Ok(false) => ours = false,
                Err(_) => {
                    for at in &fresh {
                        store.log_free(txg, at);
                    }
                    return false;
                }
            }
        }
        // Space some committed map already holds is not the log's to free.
        if ours {
            claimed.push(*bp);
        } else {
            for at in &fresh {
                store.log_free(txg, at);
            }
        }
    }
    true
}

/// How many bytes of records the next commit will bring: the
/// [`PREDICT_PERCENTILE`]th percentile of the recent commits' sizes.
///
/// Not their largest: fsyncs arriving at their own pace make commits of
/// one to several records, and sizing every block for the biggest (as
/// tarn did) left two thirds of a log device's blocks empty
/// (8 jobs of 4 KiB: 22.7 KiB allocated per commit of 6.7 KiB). A log
/// device fills in proportion, and a full one forces a txg sync that
/// rewrites every dirty record (`log_txg_full`). A commit bigger than its
/// block spills into a second one, sized for the rest and written at the
/// same time, so a short prediction costs a write in flight, not a round
/// trip.
///
/// The median, not a higher percentile: with 8 fsync threads most commits
/// carry one fsync and some carry several, and the 75th percentile flipped
/// between the two, putting a one-fsync commit into a block sized for
/// two. Measured (16 KiB × 8, 3 alternating pairs): log blocks allocated
/// 1.37–1.44× the bytes written with the 75th percentile, 1.23–1.24× with
/// the median, so a SLOG lasts ~15 % longer per txg. IOPS went from
/// 15.1–15.9k to 16.1–17.2k with a SLOG, and at 4 KiB × 8 without one
/// from 7.6–7.9k to 8.0–8.5k: the extra blocks, written with the rest
/// of their commit, cost nothing measurable.
fn predict_commit_bytes(recent: impl Iterator<Item = usize>) -> usize {
    let mut sizes: Vec<usize> = recent.collect();
    sizes.sort_unstable();
    sizes
        .get(sizes.len().saturating_sub(1) * PREDICT_PERCENTILE / 100)
        .copied()
        .unwrap_or(0)
}

/// A block size for `bytes` of records: whole 4 KiB units with the header,
/// between the minimum and the maximum.
fn block_size_for(bytes: usize) -> u32 {
    let want = (bytes + LOG_BLOCK_HEADER_SIZE).next_multiple_of(4096);
    (want.min(LOG_BLOCK_MAX_BYTES as usize) as u32).max(LOG_BLOCK_MIN_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    use tarn_format::Dva;

    /// Claims of log blocks by offset: `held` are allocated by a committed
    /// map already, `bad` cannot be blocks.
    #[derive(Default)]
    struct Claims {
        held: BTreeSet<u64>,
        bad: BTreeSet<u64>,
        taken: Mutex<BTreeSet<u64>>,
    }

    impl LogStore for Claims {
        fn log_alloc(&self, _: u64, _: u32) -> std::result::Result<LogPtr, StoreError> {
            unreachable!("claims only")
        }
        fn log_write(&self, _: &LogPtr, _: &[u8]) -> std::result::Result<(), StoreError> {
            unreachable!("claims only")
        }
        fn log_flush(&self, _: u32) -> std::result::Result<(), StoreError> {
            unreachable!("claims only")
        }
        fn log_read(
            &self,
            _: &LogPtr,
            _: &mut dyn FnMut(&[u8]) -> bool,
        ) -> std::result::Result<Vec<u8>, StoreError> {
            unreachable!("claims only")
        }
        fn log_claim(&self, _: u64, at: &LogPtr) -> std::result::Result<bool, StoreError> {
            if self.bad.contains(&at.offset) {
                return Err(StoreError::Io("not a block".into()));
            }
            if self.held.contains(&at.offset) {
                return Ok(false);
            }
            Ok(self.taken.lock().unwrap().insert(at.offset))
        }
        fn log_free(&self, _: u64, at: &LogPtr) {
            assert!(self.taken.lock().unwrap().remove(&at.offset), "double free");
        }
    }

    fn indirect(offsets: &[u64]) -> LoggedRecord {
        let mut bp = BlockPtr::HOLE;
        bp.psize = 4096;
        for (d, &offset) in bp.dvas.iter_mut().zip(offsets) {
            *d = Dva {
                vdev: 0,
                asize_sectors: 8,
                offset,
            };
        }
        LoggedRecord {
            txg: 9,
            seq: 1,
            record: LogRecord::WriteIndirect {
                obj: 5,
                offset: 0,
                bp,
            },
        }
    }

    /// A block of an indirect write that is only partly the log's (a
    /// corrupt log) gives back what its claim took: nothing leaks.
    #[test]
    fn a_partly_claimable_indirect_block_leaks_nothing() {
        let store = Claims {
            held: [8192].into(),
            bad: [12288].into(),
            ..Claims::default()
        };
        let mut claimed = Vec::new();
        // Both copies free: the block is the log's.
        assert!(claim_indirect(
            &store,
            9,
            &[indirect(&[0, 4096])],
            &mut claimed
        ));
        assert_eq!(claimed.len(), 1);
        // One copy free, one held by a committed map: not the log's, and
        // the free one is given back.
        assert!(claim_indirect(
            &store,
            9,
            &[indirect(&[16384, 8192])],
            &mut claimed
        ));
        assert_eq!(claimed.len(), 1);
        // One copy cannot be claimed: the chain ends, the other goes back.
        assert!(!claim_indirect(
            &store,
            9,
            &[indirect(&[20480, 12288])],
            &mut claimed
        ));
        assert_eq!(claimed.len(), 1);
        assert_eq!(*store.taken.lock().unwrap(), [0, 4096].into());
    }

    #[test]
    fn the_next_commit_is_predicted_from_most_recent_ones_not_the_largest() {
        assert_eq!(predict_commit_bytes(std::iter::empty()), 0);
        assert_eq!(predict_commit_bytes([5000].into_iter()), 5000);
        // Sixteen commits, twelve of one record and four of eight: the
        // blocks are sized for one record.
        let recent = (0..16).map(|i| if i % 4 == 0 { 8 * 4200 } else { 4200 });
        assert_eq!(predict_commit_bytes(recent), 4200);
        // Mostly big commits: sized for them.
        let recent = (0..16).map(|i| if i % 4 == 0 { 4200 } else { 8 * 4200 });
        assert_eq!(predict_commit_bytes(recent), 8 * 4200);
        // Just over half of them single: still sized for one; the others
        // spill into a second block written with the first.
        let recent = (0..16).map(|i| if i < 9 { 4200 } else { 8 * 4200 });
        assert_eq!(predict_commit_bytes(recent), 4200);
    }

    #[test]
    fn block_sizes_stay_in_bounds() {
        assert_eq!(block_size_for(0), LOG_BLOCK_MIN_BYTES);
        assert_eq!(block_size_for(4144), LOG_BLOCK_MIN_BYTES);
        assert_eq!(block_size_for(9000), 12 << 10);
        assert_eq!(block_size_for(10 << 20), LOG_BLOCK_MAX_BYTES);
        // The largest write piece fits the largest block.
        assert!(LOG_WRITE_CHUNK_BYTES + 64 + LOG_BLOCK_HEADER_SIZE <= LOG_BLOCK_MAX_BYTES as usize);
    }
}
