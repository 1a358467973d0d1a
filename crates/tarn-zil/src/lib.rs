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
//! The log lives in five modules, each with the rules it keeps:
//!
//! - `itx`: records in memory, and how a write's bytes are logged (by
//!   copy, or in place and by pointer);
//! - `commit`: `fsync` — group commit, what a commit takes, failures;
//! - `chain`: the chain of log blocks, its sizing, and freeing it as txgs
//!   commit;
//! - `claim`: opening a log at import, claiming its blocks;
//! - `replay`: handing the claimed records to the mount, once.
//!
//! Locking: `writer` → `chain` → `pending`; `quiesced` takes only `chain`
//! and `pending`, so a txg can quiesce while a commit is writing. A
//! committer waits for the writer's turn holding no lock (`committed`
//! releases `pending` while it waits).

mod chain;
mod claim;
mod commit;
mod itx;
mod replay;

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_dmu::Objset;
use tarn_format::zil::LogRecord;
use tarn_pool::{LogStore, StoreError, TxgEngine, TxgError};

use chain::Chain;
pub use chain::PREDICT_PERCENTILE;
use commit::PendingLock;
use itx::Pending;
use replay::Replay;

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

/// Counters for `zpool iostat`-like reporting and the tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ZilStats {
    /// `fsync`s and other commit requests (`zilstat`'s cc,
    /// `zil_commit_count`).
    pub commit_calls: u64,
    /// Commits that wrote log blocks (cwc, `zil_commit_writer_count`):
    /// `commit_calls / commits` is how many fsyncs one log write served.
    pub commits: u64,
    /// Log writes under way at once now, and the most there have been.
    /// One commit writes at a time (see `commit`), so at most 1.
    pub writes_in_flight: u64,
    pub writes_in_flight_max: u64,
    pub blocks_written: u64,
    pub bytes_written: u64,
    pub records_written: u64,
    /// Commits that fell back to a txg commit after a log I/O error.
    pub fallbacks: u64,
    /// Commits that waited for the txg because more than
    /// `LOG_BULK_BYTES` of writes were pending.
    pub bulk_commits: u64,
    pub records_replayed: u64,
    /// Blocks written in place and logged by pointer (iic), and their
    /// bytes (iib).
    pub indirect_blocks: u64,
    pub indirect_bytes: u64,
    /// Records queued (ic, `zil_itx_count`), and write records whose data
    /// went into the log block (icc/icb: copied).
    pub itx_count: u64,
    pub copied_count: u64,
    pub copied_bytes: u64,
    /// Log blocks on the data vdevs and on separate log devices: count,
    /// bytes of records in them, bytes written (imnc/imnb/imnw and
    /// imsc/imsb/imsw).
    pub normal_blocks: u64,
    pub normal_bytes: u64,
    pub normal_written: u64,
    pub slog_blocks: u64,
    pub slog_bytes: u64,
    pub slog_written: u64,
}

/// One dataset's intent log.
pub struct Zilog {
    store: Arc<dyn LogStore>,
    txg: Arc<TxgEngine>,
    os: Arc<Objset>,
    pending: PendingLock,
    /// Signalled (with `pending`) when a commit finishes.
    committed: std::sync::Condvar,
    /// `ZilStats::commit_calls` and `itx_count`, counted without a lock
    /// on the paths every write and fsync take.
    commit_calls: std::sync::atomic::AtomicU64,
    itx_count: std::sync::atomic::AtomicU64,
    chain: Mutex<Option<Chain>>,
    writer: Mutex<()>,
    stats: Mutex<ZilStats>,
    replay: Mutex<Option<Replay>>,
    /// Bytes of the last `RECENT_COMMITS` commits (block size prediction).
    recent: Mutex<VecDeque<usize>>,
    /// `logbias=throughput`: every write's whole blocks go in place.
    throughput: std::sync::atomic::AtomicBool,
}

impl Zilog {
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
            pending: PendingLock::new(next_seq),
            committed: std::sync::Condvar::new(),
            commit_calls: std::sync::atomic::AtomicU64::new(0),
            itx_count: std::sync::atomic::AtomicU64::new(0),
            chain: Mutex::new(None),
            writer: Mutex::new(()),
            stats: Mutex::new(ZilStats::default()),
            replay: Mutex::new(replay),
            recent: Mutex::new(VecDeque::new()),
            throughput: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub fn stats(&self) -> ZilStats {
        use std::sync::atomic::Ordering::Relaxed;
        ZilStats {
            commit_calls: self.commit_calls.load(Relaxed),
            itx_count: self.itx_count.load(Relaxed),
            ..*self.stats.lock()
        }
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
        self.pending.lock().remove_async(obj);
    }

    fn push(&self, txg: u64, rec: Pending) {
        self.itx_count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.pending.lock().push(txg, rec);
    }
}
