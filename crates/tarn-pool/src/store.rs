//! The seam between the pool and the object layer.
//!
//! The object layer never sees a device, a DVA allocation or a checksum
//! routine: it hands whole logical blocks to a [`BlockStore`] and gets back
//! block pointers (which it stores in its parents), and it reads a block by
//! handing back the pointer. Everything between — compression, checksums,
//! copies, allocation, redundancy, self-healing — happens below this line.
//!
//! [`MemBlockStore`] is a complete in-memory implementation used by the
//! object layer's tests and by model-based tests: it really compresses and
//! checksums, so what passes against it passes against the real pool.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use tarn_format::zil::LogPtr;
use tarn_format::{BlockPtr, ChecksumAlg, Compression, Dva, ObjType};

/// How one block is to be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteProps {
    pub typ: ObjType,
    /// 0 for data, n for an indirect block n levels above data.
    pub level: u8,
    pub checksum: ChecksumAlg,
    pub compression: Compression,
    /// 1..=3 copies (metadata gets one more, as in ZFS, capped at 3).
    pub copies: u8,
    /// Data blocks (or dnodes) beneath the pointer; stored in `fill`.
    pub fill: u64,
}

impl WriteProps {
    /// Defaults for a metadata block of `typ`.
    pub fn metadata(typ: ObjType, level: u8) -> Self {
        WriteProps {
            typ,
            level,
            checksum: ChecksumAlg::Fletcher4,
            compression: Compression::Lz4,
            copies: 1,
            fill: 1,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No copy of the block could be read back with a valid checksum.
    #[error("checksum error: no valid copy of block (vdev {vdev} offset {offset:#x})")]
    Checksum { vdev: u32, offset: u64 },
    /// The pool (or the dataset's share of it) has no room for the block.
    #[error("out of space")]
    NoSpace,
    #[error("I/O error: {0}")]
    Io(String),
    #[error(transparent)]
    Corrupted(#[from] tarn_format::Corrupted),
}

/// One block of a [`BlockStore::write_batch`].
#[derive(Debug, Clone, Copy)]
pub struct BlockWrite<'a> {
    pub data: &'a [u8],
    pub props: WriteProps,
}

/// Where intent log blocks live (implemented by `Spa`; tests have an
/// in-memory one). Log blocks are outside the block tree: the log
/// allocates, writes, reads, claims and frees them itself.
pub trait LogStore: Send + Sync {
    /// Allocates a log block of `size` bytes (a multiple of 512) in `txg`
    /// (which the caller holds open); the returned pointer has `seq` 0.
    fn log_alloc(&self, txg: u64, size: u32) -> Result<LogPtr, StoreError>;
    /// Writes `data` (at most `at.size` bytes, zero-padded to it) at `at`
    /// and returns once it is durable (on every device that took it). It
    /// makes nothing else durable.
    fn log_write(&self, at: &LogPtr, data: &[u8]) -> Result<(), StoreError>;
    /// [`LogStore::log_write`] of several blocks, which may be in flight
    /// at once; each block's result, in order. The default writes them
    /// one after the other.
    fn log_write_many(&self, blocks: &[(LogPtr, &[u8])]) -> Vec<Result<(), StoreError>> {
        blocks
            .iter()
            .map(|(at, data)| self.log_write(at, data))
            .collect()
    }
    /// Flushes the write caches of top-level vdev `vdev` (for blocks
    /// written in place that a log record will name).
    fn log_flush(&self, vdev: u32) -> Result<(), StoreError>;
    /// Reads the `at.size` bytes at `at` that `verify` accepts (another
    /// copy or a reconstruction is tried when one does not).
    fn log_read(
        &self,
        at: &LogPtr,
        verify: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Vec<u8>, StoreError>;
    /// Claims a block found at import: allocates it in `txg` unless it is
    /// allocated already (`Ok(false)`); an error if it cannot be a block.
    fn log_claim(&self, txg: u64, at: &LogPtr) -> Result<bool, StoreError>;
    /// Frees a block in `txg` (reusable once `txg` is durable).
    fn log_free(&self, txg: u64, at: &LogPtr);
    /// Does the pool have a separate intent-log device (a SLOG) to write
    /// log blocks to?
    fn has_log_devices(&self) -> bool {
        false
    }
    /// Is top-level vdev `vdev` a separate log device (`zilstat`'s SLOG
    /// counts)?
    fn is_log_vdev(&self, _vdev: u32) -> bool {
        false
    }
    /// Have the log blocks allocated in `txg` on separate log devices
    /// reached the space still free on them? Log blocks are freed only
    /// once the txg holding the same changes has synced, so the blocks of
    /// the open txg and of the one syncing must fit: the log then asks for
    /// the sync rather than spill into the pool.
    fn log_txg_full(&self, _txg: u64) -> bool {
        false
    }
}

/// Longest run of back-to-back blocks a `read_run` reads with one device
/// read; callers cut their runs at this length.
pub const READ_RUN_BYTES: u64 = tarn_vdev::READ_AGGREGATE_BYTES;

/// What the object layer needs from the pool.
///
/// Invariants the implementation guarantees:
/// - `write` returns a pointer with `birth == txg`, and the block is durable
///   once txg `txg` has synced (never before its uberblock is written).
/// - `read(bp)` returns exactly `bp.lsize` bytes equal to what was written,
///   or an error; never silently different bytes.
/// - `free(txg, bp)` makes the space reusable only after `txg` is durable.
pub trait BlockStore: Send + Sync {
    fn write(&self, txg: u64, data: &[u8], props: &WriteProps) -> Result<BlockPtr, StoreError>;
    /// Writes the blocks of one txg, all or nothing: on error every block
    /// of the batch already written is freed and the first error returned.
    /// Pointers come back in `blocks` order. The default runs `write` on
    /// up to `tunables::SYNC_WRITE_THREADS` threads, each taking runs of
    /// consecutive blocks, so placement stays close to batch order; the
    /// pool overrides it to allocate in exact order (see `Spa`).
    fn write_batch(
        &self,
        txg: u64,
        blocks: &[BlockWrite<'_>],
    ) -> Result<Vec<BlockPtr>, StoreError> {
        write_batch_parallel(self, txg, blocks)
    }
    fn read(&self, bp: &BlockPtr) -> Result<Vec<u8>, StoreError>;
    /// Writes a block whose compressed form the caller has already
    /// (`zfs receive` of a `-c` stream): `stored` is `data` compressed
    /// with `comp`, written as it is, without compressing `data` again.
    /// The default compresses `data` under `props` instead.
    fn write_stored(
        &self,
        txg: u64,
        data: &[u8],
        stored: &[u8],
        comp: Compression,
        props: &WriteProps,
    ) -> Result<BlockPtr, StoreError> {
        let _ = (stored, comp);
        self.write(txg, data, props)
    }
    /// The block's bytes as stored (`bp.psize` of them, compressed with
    /// `bp.comp`), checksum-verified but not decompressed: what `zfs send
    /// -c` puts in the stream. The default reads and decompresses, and
    /// says so by returning the logical bytes with `Compression::Off`.
    fn read_stored(&self, bp: &BlockPtr) -> Result<(Vec<u8>, Compression), StoreError> {
        Ok((self.read(bp)?, Compression::Off))
    }
    /// Reads several blocks, each as `read` would. The pool reads blocks
    /// that lie back to back on one vdev with one device read (sequential
    /// prefetch hands it such runs); the default reads them one by one.
    fn read_run(&self, bps: &[BlockPtr]) -> Vec<Result<Vec<u8>, StoreError>> {
        bps.iter().map(|bp| self.read(bp)).collect()
    }
    fn free(&self, txg: u64, bp: &BlockPtr);
    /// Space the block is charged in dataset accounting: its allocated size
    /// scaled by each vdev's deflate ratio (OpenZFS `bp_get_dsize`), so
    /// that raidz parity does not count against USED.
    fn dsize(&self, bp: &BlockPtr) -> u64 {
        bp.asize()
    }
}

/// Consecutive blocks one thread of the default `write_batch` takes at a
/// time: with 128 KiB records a run is 1 MiB, so what lands out of order
/// on disk are whole megabytes, not single records.
const BATCH_RUN_BLOCKS: usize = 8;

fn write_batch_parallel<S: BlockStore + ?Sized>(
    store: &S,
    txg: u64,
    blocks: &[BlockWrite<'_>],
) -> Result<Vec<BlockPtr>, StoreError> {
    let results = run_parallel(blocks.len(), BATCH_RUN_BLOCKS, |i| {
        store.write(txg, blocks[i].data, &blocks[i].props)
    });
    all_or_nothing(results, |bp| store.free(txg, bp))
}

/// Runs `job(0..n)` on up to `SYNC_WRITE_THREADS` scoped threads, each
/// taking `run` consecutive indices at a time in increasing order; stops
/// taking new indices after an error. Indices not run are missing from
/// the result, which is in index order.
///
/// The threads run at the daemon's own priority. Lowering it (per thread,
/// `setpriority`) so that a txg's compression and checksums give way to
/// `fsync`s was tried and dropped: it did not reliably help fsync
/// latency, and single-job fsyncs and sequential writes got slower, most
/// likely because the txg's writes then shared a CPU with FUSE's nice-19
/// keep-awake thread; `SCHED_BATCH` instead changed nothing
/// (docs/MEASUREMENTS.md, "Pool: txg write thread priority").
pub(crate) fn run_parallel<T: Send>(
    n: usize,
    run: usize,
    job: impl Fn(usize) -> Result<T, StoreError> + Sync,
) -> Vec<(usize, Result<T, StoreError>)> {
    use std::sync::atomic::AtomicBool;
    let threads = crate::tunables::SYNC_WRITE_THREADS.min(n.div_ceil(run));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let worker = || {
        let mut out = Vec::new();
        loop {
            let start = next.fetch_add(run, Ordering::Relaxed);
            if start >= n || failed.load(Ordering::Relaxed) {
                return out;
            }
            for i in start..(start + run).min(n) {
                let r = job(i);
                let bad = r.is_err();
                out.push((i, r));
                if bad {
                    failed.store(true, Ordering::Relaxed);
                    return out;
                }
            }
        }
    };
    let mut all = if threads <= 1 {
        worker()
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads).map(|_| s.spawn(worker)).collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("batch write worker panicked"))
                .collect()
        })
    };
    all.sort_unstable_by_key(|(i, _)| *i);
    all
}

/// The pointers of a batch in order, or — if any job failed — the first
/// error, after handing every pointer that was written to `free`.
pub(crate) fn all_or_nothing(
    results: Vec<(usize, Result<BlockPtr, StoreError>)>,
    free: impl Fn(&BlockPtr),
) -> Result<Vec<BlockPtr>, StoreError> {
    if results.iter().all(|(_, r)| r.is_ok()) {
        return Ok(results.into_iter().map(|(_, r)| r.expect("ok")).collect());
    }
    let mut first = None;
    for (_, r) in results {
        match r {
            Ok(bp) => free(&bp),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    Err(first.expect("an error"))
}

/// An in-memory [`BlockStore`] for tests: blocks live in a map keyed by a
/// fake DVA. It stores the bytes uncompressed but keeps every other rule
/// (sizes, birth, fill, hole handling) so callers are tested honestly.
#[derive(Default)]
pub struct MemBlockStore {
    blocks: Mutex<HashMap<u64, Vec<u8>>>,
    next: AtomicU64,
    /// Sum of live block sizes, for leak checks in tests.
    pub live_bytes: AtomicU64,
}

impl MemBlockStore {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn live_blocks(&self) -> usize {
        self.blocks.lock().len()
    }
}

impl BlockStore for MemBlockStore {
    fn write(&self, txg: u64, data: &[u8], props: &WriteProps) -> Result<BlockPtr, StoreError> {
        assert!(txg > 0, "txg 0 is never written");
        assert!(
            !data.is_empty() && data.len().is_multiple_of(512),
            "block size {}",
            data.len()
        );
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let sectors = (data.len() / 512) as u32;
        self.blocks.lock().insert(id, data.to_vec());
        self.live_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        let dva = Dva {
            vdev: 0,
            asize_sectors: sectors,
            offset: id * 512,
        };
        Ok(BlockPtr {
            dvas: [dva, Dva::default(), Dva::default()],
            lsize: data.len() as u32,
            psize: data.len() as u32,
            comp: Compression::Off,
            cksum: props.checksum,
            typ: props.typ,
            level: props.level,
            birth: txg,
            phys_birth: txg,
            fill: props.fill,
            checksum: [id, 0, 0, 0],
        })
    }

    fn read(&self, bp: &BlockPtr) -> Result<Vec<u8>, StoreError> {
        assert!(!bp.is_hole(), "reading a hole is the caller's job");
        let id = bp.dvas[0].offset / 512;
        self.blocks
            .lock()
            .get(&id)
            .cloned()
            .ok_or(StoreError::Checksum {
                vdev: 0,
                offset: bp.dvas[0].offset,
            })
    }

    fn free(&self, _txg: u64, bp: &BlockPtr) {
        let id = bp.dvas[0].offset / 512;
        let removed = self.blocks.lock().remove(&id);
        let data = removed.expect("double free or free of unknown block");
        self.live_bytes
            .fetch_sub(data.len() as u64, Ordering::Relaxed);
    }
}
