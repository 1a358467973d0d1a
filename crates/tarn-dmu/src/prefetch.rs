//! Read-ahead for sequential readers, and the threads that fill the
//! block cache (OpenZFS's `dmu_zfetch` and the ARC's in-flight buffers).
//!
//! - [`Streams`] (one per object set) watches which data blocks each
//!   `Objset::read` asks for. A read that continues where an earlier read
//!   of the same object ended belongs to a stream; from the
//!   [`PREFETCH_HITS_MIN`]th such read on, each doubles how far ahead of
//!   the stream blocks are fetched, from [`PREFETCH_MIN_BYTES`] up to
//!   [`PREFETCH_MAX_BYTES`] (`zfetch_max_distance`). A random read starts
//!   a stream that no later read continues, so it fetches nothing extra.
//! - The block cache reads blocks on [`READ_THREADS`] threads
//!   ([`BlockCache::submit`]). A block being read is *in flight*: whoever
//!   else needs it waits for that read ([`Fill`]) instead of issuing a
//!   second one. Prefetch is advisory: when the queue is full the block is
//!   not fetched, and a reader that needs it reads it itself.
//!
//! A prefetch is resolved under the object set's state lock but read later,
//! on another thread; by then a sync may have replaced the block and freed
//! it. Each prefetch carries the object set's tree epoch ([`TreeGuard`]),
//! which `install` bumps before it waits out the tree readers and frees
//! anything. The worker reads holding `readers` and drops the job when the
//! epoch has moved, so a prefetch never reads a freed block. (That
//! matters beyond wasted work: a read whose checksum fails on one mirror
//! side rewrites that side from the other.)

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock};
use tarn_format::BlockPtr;

use crate::cache::BlockCache;
use crate::dirty::Block;
use tarn_pool::store::READ_RUN_BYTES;
use tarn_pool::BlockStore;

/// How far ahead of a stream the first continuing read fetches.
pub const PREFETCH_MIN_BYTES: u64 = 1 << 20;
/// How far ahead of a stream its reads fetch at most
/// (`zfetch_max_distance`, 8 MiB before OpenZFS 2.2). 64 MiB (2.2's
/// value) with 16 `READ_THREADS` was tried and was no faster on a cold
/// sequential read through a mount: what limits it is the FUSE path on
/// two CPUs, not how far ahead the disk is read (docs/MEASUREMENTS.md,
/// "DMU: read-ahead distance").
pub const PREFETCH_MAX_BYTES: u64 = 8 << 20;
/// Blocks one read may queue for prefetch at most (bounds the work done
/// under the state lock when records are small).
pub const PREFETCH_BLOCKS_PER_READ: u64 = 64;
/// Reads that must continue a stream before anything is fetched ahead of
/// it: with one, a random reader would start streams by chance (two reads
/// a block apart) several times per thousand reads.
pub const PREFETCH_HITS_MIN: u32 = 2;
/// Streams one object set tracks; the least recently used is replaced
/// once it is [`PREFETCH_STREAM_REAP_MS`] old.
pub const PREFETCH_STREAMS_MAX: usize = 16;
/// Streams that no read has continued yet, at most: a random reader's
/// reads each look like a new stream, and every stream kept is a chance
/// for a later random read to continue it by luck (with 16 of them on a
/// small file, random reads were read ahead). Sequential readers confirm
/// theirs with their next read.
pub const PREFETCH_UNCONFIRMED_MAX: usize = 2;
/// How long a stream nobody continues keeps its slot from a read that
/// would start another (`zfetch_min_sec_reap`, 1 s in OpenZFS): at most
/// this many new streams per slot per this time, so random reads leave
/// the table alone (see `Streams`).
pub const PREFETCH_STREAM_REAP_MS: u64 = 100;
/// Threads of one pool that read blocks into its cache.
pub const READ_THREADS: usize = 8;
/// Block reads queued for those threads at most.
pub const READ_QUEUE_BLOCKS: usize = 512;

/// What an object set shares with the reads it hands to other threads.
#[derive(Default)]
pub(crate) struct TreeGuard {
    /// Held (read) by whoever does store I/O on a synced-tree block without
    /// the state lock; `install` takes it (write) once before it frees the
    /// blocks a sync replaced.
    pub readers: RwLock<()>,
    /// Bumped by `install` before it takes `readers` to free blocks.
    pub epoch: AtomicU64,
}

impl TreeGuard {
    /// Called by `install` after the new tree is visible and before any
    /// block of the old one is freed: waits for every reader that may hold
    /// an old pointer, and makes queued prefetches of old pointers stale.
    pub fn retire(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        drop(self.readers.write());
    }
}

/// The result of one in-flight block read: `None` when the read failed or
/// was dropped (the waiter then reads the block itself and sees why).
#[derive(Default)]
pub(crate) struct Fill {
    slot: Mutex<Option<Option<Block>>>,
    done: Condvar,
}

impl Fill {
    pub fn wait(&self) -> Option<Block> {
        let mut slot = self.slot.lock();
        while slot.is_none() {
            self.done.wait(&mut slot);
        }
        slot.clone().flatten()
    }

    pub(crate) fn set(&self, result: Option<Block>) {
        *self.slot.lock() = Some(result);
        self.done.notify_all();
    }
}

/// Blocks for a read thread: read `blocks` (one, or a run that lies back
/// to back on disk, see [`runs`]) from `store` into `cache`.
pub(crate) struct BlockJob {
    pub store: Arc<dyn BlockStore>,
    pub cache: Arc<BlockCache>,
    pub guard: Arc<TreeGuard>,
    /// `Some(epoch)` for a prefetch (dropped if the tree moved on);
    /// `None` for blocks a reader waits for while it holds `readers`.
    pub epoch: Option<u64>,
    /// Each block with the claim on it; completed fills are taken out,
    /// and dropping the job completes the rest empty, so nobody waits
    /// forever for a job that was never run.
    pub blocks: Vec<(BlockPtr, Arc<Fill>)>,
}

impl BlockJob {
    pub fn run(mut self) {
        // Recursive: a reader that queued this job holds `readers` and
        // waits for it; a queued `install` must not come between.
        let _readers = self.guard.readers.read_recursive();
        if self
            .epoch
            .is_some_and(|e| e != self.guard.epoch.load(Ordering::SeqCst))
        {
            return; // stale prefetch: dropping completes the fills empty
        }
        let bps: Vec<BlockPtr> = self.blocks.iter().map(|(bp, _)| *bp).collect();
        let read = self.store.read_run(&bps);
        // Into the cache before `readers` is released, so a sync that
        // frees a block removes it after this insert, never before.
        for ((bp, fill), r) in self.blocks.drain(..).zip(read) {
            let data = r
                .ok()
                .filter(|d| d.len() == bp.lsize as usize)
                .map(Arc::new);
            self.cache.complete(&bp, &fill, data);
        }
    }
}

impl Drop for BlockJob {
    fn drop(&mut self) {
        for (bp, fill) in self.blocks.drain(..) {
            self.cache.complete(&bp, &fill, None);
        }
    }
}

/// Cuts blocks (in file order) into runs a pool can read with one device
/// read each: first copies on one vdev, each starting where the one
/// before ends, at most `READ_RUN_BYTES` in all.
pub(crate) fn runs(blocks: Vec<(BlockPtr, Arc<Fill>)>) -> Vec<Vec<(BlockPtr, Arc<Fill>)>> {
    let mut out: Vec<Vec<(BlockPtr, Arc<Fill>)>> = Vec::new();
    let mut bytes = 0;
    for (bp, fill) in blocks {
        let d = bp.dvas[0];
        let joins = out
            .last()
            .and_then(|run| run.last())
            .is_some_and(|(prev, _)| {
                let p = prev.dvas[0];
                p.vdev == d.vdev
                    && p.offset.checked_add(p.asize()) == Some(d.offset)
                    && bytes + d.asize() <= READ_RUN_BYTES
            });
        if joins {
            bytes += d.asize();
            out.last_mut().expect("joined a run").push((bp, fill));
        } else {
            bytes = d.asize();
            out.push(vec![(bp, fill)]);
        }
    }
    out
}

/// The sequential streams of one object set.
///
/// Every read of the object set asks here, so on many CPUs this table
/// must not be a lock every reader takes (it was: two threads reading one
/// cached file spent as much time passing it between CPUs as reading).
/// Each stream publishes, in atomics, the object and block window a read
/// must fall in to continue it; a read first compares itself with those
/// without locking, and takes the table only when it continues a stream,
/// or when it may start one. A read that continues nothing starts a
/// stream only where a slot is free or its stream has gone unused for
/// [`PREFETCH_STREAM_REAP_MS`] (OpenZFS's `zfetch_min_sec_reap`): random
/// readers then fill the table once and leave it alone, instead of
/// rewriting it on every read. Stale or torn hints only send a read down
/// the locked path, where the decision is made again.
pub(crate) struct Streams {
    inner: Mutex<StreamTable>,
    hints: [Hint; PREFETCH_STREAMS_MAX],
    /// Before this time (`now_ms`) no new stream may start: every slot is
    /// taken by a stream used more recently than the reap age.
    reap_at_ms: AtomicU64,
}

/// What a read must match to continue slot `i`'s stream: `obj`, and a
/// first block in `lo..=hi`. `obj` is `u64::MAX` for an empty slot.
#[derive(Default)]
struct Hint {
    obj: AtomicU64,
    lo: AtomicU64,
    hi: AtomicU64,
}

impl Default for Streams {
    fn default() -> Self {
        let hints = std::array::from_fn(|_| Hint {
            obj: AtomicU64::new(u64::MAX),
            ..Hint::default()
        });
        Streams {
            inner: Mutex::default(),
            hints,
            reap_at_ms: AtomicU64::new(0),
        }
    }
}

#[derive(Default)]
struct StreamTable {
    /// `streams[i]` is published in `hints[i]`.
    streams: Vec<Stream>,
}

struct Stream {
    obj: u64,
    /// First block after the stream's last read.
    next: u64,
    /// End (exclusive) of what has been queued for prefetch.
    fetched: u64,
    /// Reads that continued the stream.
    hits: u32,
    /// Current prefetch distance in bytes (0 until the stream continues).
    distance: u64,
    /// `now_ms` of its last read.
    used_ms: u64,
    /// Its block size, for the window.
    bs: u64,
}

impl Stream {
    /// A read of block `first` belongs to the stream from the stream's
    /// distance behind its end to the end of what was fetched for it.
    fn window(&self) -> (u64, u64) {
        let lo = self
            .next
            .saturating_sub(1 + self.distance.div_ceil(self.bs.max(1)));
        (lo, self.fetched.max(self.next))
    }
}

/// Milliseconds on a monotonic clock, for the reap age only.
fn now_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

impl Streams {
    /// Records a read of data blocks `first..=last` of `obj` (blocks of
    /// `block_size` bytes, the last one `maxblkid`) and returns the blocks
    /// to fetch ahead of it, if the read continues a stream.
    pub fn access(
        &self,
        obj: u64,
        first: u64,
        last: u64,
        block_size: u64,
        maxblkid: u64,
    ) -> Option<Range<u64>> {
        self.access_at(now_ms(), obj, first, last, block_size, maxblkid)
    }

    fn access_at(
        &self,
        now: u64,
        obj: u64,
        first: u64,
        last: u64,
        block_size: u64,
        maxblkid: u64,
    ) -> Option<Range<u64>> {
        let continues = self.hints.iter().any(|h| {
            h.obj.load(Ordering::Relaxed) == obj
                && (h.lo.load(Ordering::Relaxed)..=h.hi.load(Ordering::Relaxed)).contains(&first)
        });
        if !continues && now < self.reap_at_ms.load(Ordering::Relaxed) {
            return None;
        }
        // A hint never makes a reader wait: when another read holds the
        // table, this one is not counted. A stream then misses a read,
        // which only delays its next prefetch: the read after it is still
        // within the stream's window.
        let mut t = self.inner.try_lock()?;
        let r = t.access(now, obj, first, last, block_size, maxblkid);
        for (i, st) in t.streams.iter().enumerate() {
            let (lo, hi) = st.window();
            let h = &self.hints[i];
            h.obj.store(st.obj, Ordering::Relaxed);
            h.lo.store(lo, Ordering::Relaxed);
            h.hi.store(hi, Ordering::Relaxed);
        }
        self.reap_at_ms.store(t.reap_at(), Ordering::Relaxed);
        r
    }
}

impl StreamTable {
    /// When a read that continues no stream may next start one: at once
    /// while fewer than [`PREFETCH_UNCONFIRMED_MAX`] streams wait for
    /// their first continuing read and a slot is free; otherwise once the
    /// oldest stream it could replace (any, or an unconfirmed one when
    /// those are at their limit) is [`PREFETCH_STREAM_REAP_MS`] old.
    fn reap_at(&self) -> u64 {
        let unconfirmed = self.streams.iter().filter(|s| s.hits == 0).count();
        if unconfirmed < PREFETCH_UNCONFIRMED_MAX && self.streams.len() < PREFETCH_STREAMS_MAX {
            return 0;
        }
        let oldest = self
            .streams
            .iter()
            .filter(|s| unconfirmed < PREFETCH_UNCONFIRMED_MAX || s.hits == 0)
            .map(|s| s.used_ms)
            .min()
            .unwrap_or(0);
        oldest + PREFETCH_STREAM_REAP_MS
    }

    fn access(
        &mut self,
        now: u64,
        obj: u64,
        first: u64,
        last: u64,
        block_size: u64,
        maxblkid: u64,
    ) -> Option<Range<u64>> {
        let end = last.saturating_add(1);
        let bs = block_size.max(1);
        let found = self.streams.iter_mut().find(|s| {
            let (lo, hi) = s.window();
            s.obj == obj && (lo..=hi).contains(&first)
        });
        let Some(s) = found else {
            let fresh = Stream {
                obj,
                next: end,
                fetched: end,
                hits: 0,
                distance: 0,
                used_ms: now,
                bs,
            };
            if self.reap_at() > now {
                return None;
            }
            let unconfirmed = self.streams.iter().filter(|s| s.hits == 0).count();
            if unconfirmed < PREFETCH_UNCONFIRMED_MAX && self.streams.len() < PREFETCH_STREAMS_MAX {
                self.streams.push(fresh);
            } else if let Some(old) = self
                .streams
                .iter_mut()
                .filter(|s| unconfirmed < PREFETCH_UNCONFIRMED_MAX || s.hits == 0)
                .min_by_key(|s| s.used_ms)
            {
                *old = fresh;
            }
            return None;
        };
        s.used_ms = now;
        s.bs = bs;
        if first.saturating_add(1) < s.next {
            // Behind the stream: a read the kernel's read-ahead delivered
            // late. It keeps the stream, and moves nothing.
            return None;
        }
        // At the stream's end (or the block before: reads that are not
        // record-aligned share one), or ahead of it within what was
        // fetched (delivered early).
        s.next = s.next.max(end);
        s.hits += 1;
        if s.hits < PREFETCH_HITS_MIN {
            return None;
        }
        s.distance = (s.distance * 2).clamp(PREFETCH_MIN_BYTES, PREFETCH_MAX_BYTES);
        let target = s
            .next
            .saturating_add(s.distance.div_ceil(bs))
            .min(maxblkid.saturating_add(1));
        let start = s.fetched.max(s.next);
        let stop = target.min(start.saturating_add(PREFETCH_BLOCKS_PER_READ));
        if stop <= start {
            return None;
        }
        s.fetched = stop;
        Some(start..stop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BS: u64 = 128 << 10;

    #[test]
    fn sequential_reads_fetch_further_and_further_ahead() {
        let s = Streams::default();
        // 1 MiB reads of 128 KiB records: 8 blocks each.
        assert_eq!(s.access(5, 0, 7, BS, 10_000), None); // new stream
        assert_eq!(s.access(5, 8, 15, BS, 10_000), None); // one hit
        assert_eq!(s.access(5, 16, 23, BS, 10_000), Some(24..32)); // 1 MiB
        assert_eq!(s.access(5, 24, 31, BS, 10_000), Some(32..48)); // 2 MiB
        assert_eq!(s.access(5, 32, 39, BS, 10_000), Some(48..72)); // 4 MiB
        assert_eq!(s.access(5, 40, 47, BS, 10_000), Some(72..112)); // 8 MiB
        assert_eq!(s.access(5, 48, 55, BS, 10_000), Some(112..120)); // stays 8
    }

    /// A stream of `obj` that has started fetching (two hits).
    fn running(s: &Streams, obj: u64, bs: u64, maxblkid: u64) -> Option<Range<u64>> {
        assert_eq!(s.access(obj, 0, 0, bs, maxblkid), None);
        assert_eq!(s.access(obj, 1, 1, bs, maxblkid), None);
        s.access(obj, 2, 2, bs, maxblkid)
    }

    #[test]
    fn stops_at_the_last_block_and_caps_one_read() {
        let s = Streams::default();
        assert_eq!(running(&s, 1, BS, 20), Some(3..11));
        let small = Streams::default();
        let r = running(&small, 1, 512, u64::MAX).unwrap();
        assert_eq!(r.end - r.start, PREFETCH_BLOCKS_PER_READ);
        let end = Streams::default();
        assert_eq!(running(&end, 1, BS, 2), None);
    }

    #[test]
    fn random_reads_fetch_nothing_and_streams_are_per_object() {
        let s = Streams::default();
        for (i, blk) in [500u64, 17, 9000, 3, 777, 4242, 18, 501]
            .into_iter()
            .enumerate()
        {
            assert_eq!(s.access(9, blk, blk, BS, 10_000), None, "read {i}");
        }
        s.access(1, 0, 7, BS, 10_000);
        s.access(1, 8, 15, BS, 10_000);
        assert_eq!(s.access(2, 16, 23, BS, 10_000), None);
        assert!(s.access(1, 16, 23, BS, 10_000).is_some());
    }

    #[test]
    fn reads_a_little_out_of_order_stay_in_the_stream() {
        let s = Streams::default();
        s.access(1, 0, 7, BS, 10_000);
        s.access(1, 8, 15, BS, 10_000);
        assert_eq!(s.access(1, 16, 23, BS, 10_000), Some(24..32));
        // The read of 32..40 arrives before that of 24..32: it continues
        // the stream, and the late one neither starts another nor fetches.
        assert_eq!(s.access(1, 32, 39, BS, 10_000), Some(40..56));
        assert_eq!(s.access(1, 24, 31, BS, 10_000), None);
        assert_eq!(s.access(1, 40, 47, BS, 10_000), Some(56..80));
    }

    #[test]
    fn least_recently_used_stream_is_replaced_once_old_enough() {
        let s = Streams::default();
        let full = PREFETCH_STREAMS_MAX as u64;
        // Objects 0..16 start a stream each at times 0..16 ms, each
        // confirmed by a second read.
        for obj in 0..full {
            s.access_at(obj, obj, 0, 0, BS, 100);
            s.access_at(obj, obj, 1, 1, BS, 100);
        }
        // A 17th read soon after finds every slot young: nothing changes,
        // and it does not even take the table.
        assert_eq!(s.access_at(20, full, 0, 0, BS, 100), None);
        assert!(s.hints.iter().all(|h| h.obj.load(Ordering::Relaxed) < full));
        assert_eq!(
            s.reap_at_ms.load(Ordering::Relaxed),
            PREFETCH_STREAM_REAP_MS
        );
        // Once stream 0 is old enough, the next new reader takes its slot.
        let later = PREFETCH_STREAM_REAP_MS;
        assert_eq!(s.access_at(later, full, 0, 0, BS, 100), None);
        s.access_at(later, full, 1, 1, BS, 100);
        assert!(s.access_at(later, full, 2, 2, BS, 100).is_some());
        s.access_at(later, 0, 2, 2, BS, 100);
        assert_eq!(
            s.access_at(later, 0, 3, 3, BS, 100),
            None,
            "stream 0 was replaced"
        );
        // Stream 1, young when object 16 came, is still there.
        assert!(s.access_at(later, 1, 2, 2, BS, 100).is_some());
    }

    /// Random reads of one object keep at most two streams waiting for a
    /// continuing read, so few of them continue one by luck.
    #[test]
    fn random_reads_leave_few_unconfirmed_streams() {
        let s = Streams::default();
        for (i, blk) in [500u64, 17, 9000, 3, 777, 4242, 60, 905]
            .into_iter()
            .enumerate()
        {
            s.access_at(i as u64, 9, blk, blk, BS, 10_000);
        }
        let t = s.inner.lock();
        assert_eq!(t.streams.len(), PREFETCH_UNCONFIRMED_MAX);
        assert!(t.reap_at() > 7);
    }

    fn at(vdev: u32, offset: u64, asize: u64) -> (BlockPtr, Arc<Fill>) {
        let mut bp = BlockPtr::HOLE;
        bp.dvas[0] = tarn_format::Dva {
            vdev,
            asize_sectors: (asize / 512) as u32,
            offset,
        };
        (bp, Arc::new(Fill::default()))
    }

    #[test]
    fn runs_join_back_to_back_blocks_on_one_vdev_up_to_the_limit() {
        let k = 128 << 10;
        let lens = |blocks: Vec<(BlockPtr, Arc<Fill>)>| -> Vec<usize> {
            runs(blocks).iter().map(Vec::len).collect()
        };
        // Ten back to back: 8 (1 MiB) and 2.
        assert_eq!(lens((0..10).map(|i| at(0, i * k, k)).collect()), vec![8, 2]);
        // A gap, another vdev, a step backwards: each starts a run.
        let mixed = vec![
            at(0, 0, k),
            at(0, k, k),
            at(0, 3 * k, k),
            at(1, 4 * k, k),
            at(1, 5 * k, k),
            at(1, 0, k),
        ];
        assert_eq!(lens(mixed), vec![2, 1, 2, 1]);
        assert!(runs(Vec::new()).is_empty());
    }
}
