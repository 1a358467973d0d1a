//! Batched writes with aggregation (OpenZFS's `vdev_queue` aggregation,
//! for the one case that matters most: a txg's data going out).
//!
//! A txg sync hands a top-level vdev many blocks at once. The allocator
//! places them back to back, so on each leaf their pieces (the whole
//! block on a mirror child, a column on a raidz child) mostly follow one
//! another. Writing them one by one costs a system call and a device
//! round trip per piece; [`TopVdev::write_many`] instead sorts every
//! leaf's pieces by offset, merges runs that touch into one write of up
//! to [`WRITE_AGGREGATE_BYTES`], and issues the merged writes on a few
//! threads, taking the leaves in turn, so every device sees large
//! sequential writes from several queues at once.
//!
//! Only pieces that touch are merged; a gap is never filled (the bytes in
//! it may belong to a live block). Each block's result is what
//! [`TopVdev::write`] would have returned: a merged write that fails
//! counts as a failure of that leaf for every block in it, and a block
//! fails when more leaves failed than its layout tolerates.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::device::IO_ALIGN;
use crate::error::VdevError;
use crate::raidz;
use crate::raidz_map::RaidzMap;
use crate::top::{Layout, TopVdev};

/// Largest write made by merging pieces (`zfs_vdev_aggregation_limit`).
pub const WRITE_AGGREGATE_BYTES: usize = 1 << 20;

/// One leaf write of one block.
struct Piece<'a> {
    block: usize,
    child: usize,
    offset: u64,
    data: Cow<'a, [u8]>,
}

impl TopVdev {
    /// Writes `blocks` (DVA offset, psize bytes) as [`TopVdev::write`]
    /// would, one result per block, merging touching pieces per leaf and
    /// issuing the merged writes on up to `threads` threads.
    pub fn write_many(
        &self,
        blocks: &[(u64, &[u8])],
        threads: usize,
    ) -> Vec<Result<(), VdevError>> {
        let threads = threads.max(1);
        let planned = par_map(blocks.len(), threads, |i| {
            let (offset, data) = blocks[i];
            self.count_write(data.len() as u64);
            self.plan(i, offset, data)
        });
        let mut results: Vec<Result<(), VdevError>> = Vec::with_capacity(blocks.len());
        let mut pieces = Vec::new();
        for p in planned {
            match p {
                Ok(ps) => {
                    results.push(Ok(()));
                    pieces.extend(ps);
                }
                Err(e) => results.push(Err(e)),
            }
        }
        pieces.sort_unstable_by_key(|p| (p.child, p.offset));
        let runs = merge_runs(&pieces);
        let order = issue_order(runs.iter().map(|r| pieces[r.start].child));
        // A mirror's children get the same runs (same places, same bytes,
        // child after child): the aligned copy of a run is made once for
        // all of them, which halves a two-way mirror's copying.
        let children = self.leaves().len();
        let per_child = runs.len() / children.max(1);
        let same = |r: usize| {
            let (a, b) = (&runs[r], &runs[r % per_child]);
            a.len() == b.len() && pieces[a.start].offset == pieces[b.start].offset
        };
        let shared: Vec<SharedCopy> = if self.layout() == Layout::Mirror
            && children > 1
            && per_child > 0
            && runs.len() == per_child * children
            && (0..runs.len()).all(same)
        {
            (0..per_child).map(|_| SharedCopy::new(children)).collect()
        } else {
            Vec::new()
        };
        // Fewer at once while the intent log writes here (`classes.rs`).
        let under_sync = crate::ASYNC_WRITES_UNDER_SYNC.max(self.leaves().len());
        let issued = par_map(order.len(), threads, |k| {
            let r = order[k];
            let run = &pieces[runs[r].clone()];
            let leaf = &self.leaves()[run[0].child];
            let _txg = self.classes().async_write(threads, under_sync);
            let res = if run.len() == 1 {
                leaf.write(&run[0].data, run[0].offset)
            } else {
                let len: usize = run.iter().map(|p| p.data.len()).sum();
                let concat = || aligned_concat(run.iter().map(|p| &p.data[..]), len);
                match shared.get(r % per_child.max(1)) {
                    Some(copy) => {
                        let c = copy.take(concat);
                        let res = leaf.write(&c.0[c.1..], run[0].offset);
                        copy.release();
                        res
                    }
                    None => {
                        let (backing, at) = concat();
                        leaf.write(&backing[at..], run[0].offset)
                    }
                }
            };
            res.map_err(|e| leaf.describe_err(&e))
        });
        let mut outcomes: Vec<Result<(), String>> = vec![Ok(()); runs.len()];
        for (k, outcome) in issued.into_iter().enumerate() {
            outcomes[order[k]] = outcome;
        }
        // Per block: the leaves whose write failed, and the last error.
        let mut failed: Vec<Vec<usize>> = vec![Vec::new(); blocks.len()];
        let mut last: Vec<String> = vec![String::new(); blocks.len()];
        for (run, outcome) in runs.iter().zip(outcomes) {
            if let Err(msg) = outcome {
                for p in &pieces[run.clone()] {
                    if !failed[p.block].contains(&p.child) {
                        failed[p.block].push(p.child);
                    }
                    last[p.block].clone_from(&msg);
                }
            }
        }
        for (i, r) in results.iter_mut().enumerate() {
            if r.is_ok() && !failed[i].is_empty() {
                let lost = self.failed_positions(&failed[i]);
                *r = self.check_failures("write", lost, std::mem::take(&mut last[i]));
            }
        }
        results
    }

    /// The leaf writes of one block, or why the request is invalid.
    fn plan<'a>(
        &self,
        block: usize,
        offset: u64,
        data: &'a [u8],
    ) -> Result<Vec<Piece<'a>>, VdevError> {
        self.check_request(offset, data.len() as u64)?;
        let padded = self.pad(data);
        match self.layout() {
            Layout::Single | Layout::Mirror => Ok((0..self.leaves().len())
                .map(|child| Piece {
                    block,
                    child,
                    offset,
                    data: padded.clone(),
                })
                .collect()),
            Layout::Raidz { nparity } => {
                let width = self.width();
                let map = RaidzMap::new(offset, padded.len() as u64, self.ashift(), width, nparity);
                let cols = raidz::encode(&map, &padded)?;
                let mut pieces = Vec::with_capacity(cols.len());
                for (c, buf) in map.cols.iter().zip(cols).filter(|(c, _)| c.size > 0) {
                    // The second leaf of a pair (see `top.rs`) takes a copy.
                    let group = self.group(c.child);
                    for child in group.start + 1..group.end {
                        pieces.push(Piece {
                            block,
                            child,
                            offset: c.offset,
                            data: Cow::Owned(buf.clone()),
                        });
                    }
                    pieces.push(Piece {
                        block,
                        child: group.start,
                        offset: c.offset,
                        data: Cow::Owned(buf),
                    });
                }
                Ok(pieces)
            }
        }
    }
}

/// The order to issue runs in, given each run's leaf (runs sorted by leaf,
/// then offset): the leaves' first runs, then their second runs, and so
/// on. The threads take runs in this order, so every leaf has writes in
/// flight from the start — in leaf order, a mirror's second disk would
/// idle until the first one's runs were all taken — while each leaf still
/// sees its own runs in ascending offset order.
fn issue_order(run_leaves: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut per_leaf: Vec<Vec<usize>> = Vec::new();
    let mut last = None;
    for (r, leaf) in run_leaves.enumerate() {
        match per_leaf.last_mut() {
            Some(runs) if last == Some(leaf) => runs.push(r),
            _ => {
                per_leaf.push(vec![r]);
                last = Some(leaf);
            }
        }
    }
    let rounds = per_leaf.iter().map(Vec::len).max().unwrap_or(0);
    (0..rounds)
        .flat_map(|i| per_leaf.iter().filter_map(move |runs| runs.get(i).copied()))
        .collect()
}

/// Index ranges of `pieces` (sorted by leaf, then offset) that touch and
/// together stay within `WRITE_AGGREGATE_BYTES`.
fn merge_runs(pieces: &[Piece<'_>]) -> Vec<std::ops::Range<usize>> {
    let mut runs = Vec::new();
    let mut start = 0;
    let mut len = 0usize;
    for (i, p) in pieces.iter().enumerate() {
        if i > start {
            let prev = &pieces[i - 1];
            let touches = prev.child == p.child && prev.offset + prev.data.len() as u64 == p.offset;
            if !touches || len + p.data.len() > WRITE_AGGREGATE_BYTES {
                runs.push(start..i);
                start = i;
                len = 0;
            }
        }
        len += p.data.len();
    }
    if start < pieces.len() {
        runs.push(start..pieces.len());
    }
    runs
}

/// What [`aligned_concat`] returns: a buffer and where its aligned bytes
/// start.
type AlignedCopy = (Vec<u8>, usize);

/// The aligned copy of one run that every child of a mirror writes: made
/// by the first writer to get to it, dropped when the last one is done.
struct SharedCopy {
    copy: Mutex<Option<Arc<AlignedCopy>>>,
    left: AtomicUsize,
}

impl SharedCopy {
    fn new(writers: usize) -> SharedCopy {
        SharedCopy {
            copy: Mutex::new(None),
            left: AtomicUsize::new(writers),
        }
    }

    fn take(&self, make: impl FnOnce() -> AlignedCopy) -> Arc<AlignedCopy> {
        self.copy
            .lock()
            .get_or_insert_with(|| Arc::new(make()))
            .clone()
    }

    fn release(&self) {
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.copy.lock().take();
        }
    }
}

/// `parts` (`len` bytes in all) one after another in a new buffer, from
/// its `IO_ALIGN`-aligned index on (returned), for a direct write. Only
/// the bytes before that index are zeroed: the rest are copied once.
fn aligned_concat<'a>(parts: impl Iterator<Item = &'a [u8]>, len: usize) -> AlignedCopy {
    #[cfg(test)]
    tests::CONCATS.with(|c| c.set(c.get() + 1));
    let mut buf: Vec<u8> = Vec::with_capacity(len + IO_ALIGN);
    // The capacity covers every byte pushed below, so the buffer never
    // moves and the offset stays aligned.
    let at = buf.as_ptr().align_offset(IO_ALIGN).min(IO_ALIGN);
    buf.resize(at, 0);
    for p in parts {
        buf.extend_from_slice(p);
    }
    debug_assert_eq!(buf.len(), at + len);
    (buf, at)
}

/// `f(0..n)` on up to `threads` scoped threads, results in index order.
fn par_map<T: Send>(n: usize, threads: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let threads = threads.min(n);
    if threads <= 1 {
        return (0..n).map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let mut all: Vec<(usize, T)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            return out;
                        }
                        out.push((i, f(i)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("vdev write worker panicked"))
            .collect()
    });
    all.sort_unstable_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, t)| t).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{BlockDevice, MemDevice};
    use crate::fault::FaultDevice;
    use crate::leaf::Leaf;
    use std::sync::Arc;

    thread_local! {
        /// `aligned_concat` calls on this thread.
        pub(super) static CONCATS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    #[test]
    fn a_mirror_run_is_copied_once_for_all_children() {
        for (layout, n, copies) in [(Layout::Mirror, 3, 3), (Layout::Raidz { nparity: 1 }, 3, 6)] {
            let (t, _) = top(layout, n, None);
            // 24 touching 128 KiB blocks: three 1 MiB runs per mirror child,
            // copied once for all three; on raidz each child its own runs.
            let datas: Vec<Vec<u8>> = (0..24).map(|i| block(i, 131072)).collect();
            let mut at = 0;
            let reqs: Vec<(u64, &[u8])> = datas
                .iter()
                .map(|d| {
                    let o = at;
                    at += t.psize_to_asize(d.len() as u64);
                    (o, d.as_slice())
                })
                .collect();
            CONCATS.with(|c| c.set(0));
            // One thread: every copy is made on this one.
            for r in t.write_many(&reqs, 1) {
                r.unwrap();
            }
            assert_eq!(CONCATS.with(|c| c.get()), copies, "{layout:?}");
            for (o, d) in &reqs {
                let mut ok = |b: &[u8]| b == *d;
                assert_eq!(&t.read(*o, d.len() as u64, &mut ok).unwrap(), d);
            }
        }
    }

    /// A device whose writes take 5 ms and count how many run at once,
    /// except durable ones (the intent log's), which wait until `open`.
    struct Queue {
        mem: MemDevice,
        active: AtomicUsize,
        peak: AtomicUsize,
        open: std::sync::atomic::AtomicBool,
        durable_started: std::sync::atomic::AtomicBool,
    }

    impl BlockDevice for Queue {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            self.mem.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
            let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(5));
            self.active.fetch_sub(1, Ordering::SeqCst);
            self.mem.write_at(buf, offset)
        }
        fn write_durable(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
            self.durable_started.store(true, Ordering::SeqCst);
            while !self.open.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            self.mem.write_at(buf, offset)
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn size(&self) -> u64 {
            self.mem.size()
        }
        fn physical_sector_size(&self) -> u32 {
            512
        }
        fn describe(&self) -> String {
            "queue".into()
        }
    }

    /// The most txg writes `write_many` on 8 threads had in flight at once
    /// on a vdev of `n` leaves (all one device underneath, which counts
    /// them), with or without an intent-log write going on.
    fn txg_writes_at_once(layout: Layout, n: usize, with_log_write: bool) -> usize {
        let dev = Arc::new(Queue {
            mem: MemDevice::new(64 << 20),
            active: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            open: std::sync::atomic::AtomicBool::new(false),
            durable_started: std::sync::atomic::AtomicBool::new(false),
        });
        let leaves = (0..n)
            .map(|i| {
                Leaf::new(
                    i as u64 + 1,
                    format!("q{i}"),
                    dev.clone() as Arc<dyn BlockDevice>,
                )
            })
            .collect();
        let t = TopVdev::new(0, 7, 12, layout, leaves).unwrap();
        // 16 blocks with gaps between them: 16 writes, none merged.
        let datas: Vec<Vec<u8>> = (0..16).map(|i| block(i, 8192)).collect();
        let reqs: Vec<(u64, &[u8])> = datas
            .iter()
            .enumerate()
            .map(|(i, d)| ((i as u64 + 1) << 20, d.as_slice()))
            .collect();
        let log = block(99, 4096);
        std::thread::scope(|s| {
            if with_log_write {
                s.spawn(|| t.write_durable(0, &log).unwrap());
                while !dev.durable_started.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
            }
            for r in t.write_many(&reqs, 8) {
                r.unwrap();
            }
            dev.open.store(true, Ordering::SeqCst);
        });
        dev.peak.load(Ordering::SeqCst)
    }

    #[test]
    fn txg_writes_make_room_for_an_intent_log_write_on_the_same_vdev() {
        let under_sync = crate::ASYNC_WRITES_UNDER_SYNC;
        assert!(txg_writes_at_once(Layout::Single, 1, false) > under_sync);
        assert_eq!(txg_writes_at_once(Layout::Single, 1, true), under_sync);
        // A raidz of five keeps one write per leaf going.
        let raidz = Layout::Raidz { nparity: 1 };
        assert_eq!(txg_writes_at_once(raidz, 5, true), 5);
    }

    #[test]
    fn runs_are_issued_taking_the_leaves_in_turn() {
        // Runs 0-2 on leaf 0, 3-4 on leaf 1, 5 on leaf 2.
        let order = issue_order([0, 0, 0, 1, 1, 2].into_iter());
        assert_eq!(order, vec![0, 3, 5, 1, 4, 2]);
        assert_eq!(issue_order([4, 4].into_iter()), vec![0, 1]);
        assert!(issue_order(std::iter::empty()).is_empty());
    }

    #[test]
    fn aligned_concat_puts_the_parts_on_an_aligned_start() {
        let parts: [&[u8]; 3] = [&[1; 4096], &[2; 512], &[3; 8192]];
        let (buf, at) = aligned_concat(parts.iter().copied(), 4096 + 512 + 8192);
        assert!((buf[at..].as_ptr() as usize).is_multiple_of(IO_ALIGN));
        assert_eq!(buf.len() - at, 4096 + 512 + 8192);
        assert!(buf[at..at + 4096].iter().all(|&b| b == 1));
        assert!(buf[at + 4096..at + 4608].iter().all(|&b| b == 2));
        assert!(buf[at + 4608..].iter().all(|&b| b == 3));
    }

    fn top(layout: Layout, n: usize, fail: Option<usize>) -> (TopVdev, Vec<Arc<FaultDevice>>) {
        let devs: Vec<Arc<FaultDevice>> = (0..n)
            .map(|i| {
                let d = Arc::new(FaultDevice::new(
                    Arc::new(MemDevice::new(64 << 20)),
                    i as u64,
                ));
                if fail == Some(i) {
                    d.set_fail_writes(true);
                }
                d
            })
            .collect();
        let leaves = devs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                Leaf::new(
                    i as u64 + 1,
                    format!("d{i}"),
                    d.clone() as Arc<dyn BlockDevice>,
                )
            })
            .collect();
        (TopVdev::new(0, 7, 12, layout, leaves).unwrap(), devs)
    }

    fn block(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    fn check_round_trip(layout: Layout, n: usize) {
        let (t, _) = top(layout, n, None);
        // Touching 128 KiB blocks, a gap, small and odd-sized ones.
        let mut offsets = Vec::new();
        let mut at = 0u64;
        let sizes = [131072usize, 131072, 4096, 512, 131072, 8192, 1536, 131072];
        for (i, s) in sizes.iter().enumerate() {
            offsets.push(at);
            at += t.psize_to_asize(*s as u64);
            if i == 3 {
                at += 1 << 16;
            }
        }
        let datas: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| block(i as u8, s))
            .collect();
        let reqs: Vec<(u64, &[u8])> = offsets
            .iter()
            .zip(&datas)
            .map(|(o, d)| (*o, d.as_slice()))
            .collect();
        for r in t.write_many(&reqs, 3) {
            r.unwrap();
        }
        for (o, d) in offsets.iter().zip(&datas) {
            let mut ok = |b: &[u8]| b == d.as_slice();
            let back = t.read(*o, d.len() as u64, &mut ok).unwrap();
            assert_eq!(&back, d);
        }
        // Merged writes: fewer device writes than pieces.
        let ops: u64 = t
            .leaves()
            .iter()
            .map(|l| l.stats.write_ops.load(std::sync::atomic::Ordering::Relaxed))
            .sum();
        let pieces = match layout {
            Layout::Raidz { .. } => (sizes.len() * 2) as u64,
            _ => (sizes.len() * n) as u64,
        };
        assert!(ops < pieces, "{ops} writes for at least {pieces} pieces");
    }

    #[test]
    fn merged_writes_read_back_on_every_layout() {
        check_round_trip(Layout::Single, 1);
        check_round_trip(Layout::Mirror, 3);
        check_round_trip(Layout::Raidz { nparity: 1 }, 3);
        check_round_trip(Layout::Raidz { nparity: 2 }, 6);
    }

    #[test]
    fn runs_merge_only_touching_pieces_within_the_limit() {
        let p = |child, offset, len| Piece {
            block: 0,
            child,
            offset,
            data: Cow::Owned(vec![0; len]),
        };
        let big = WRITE_AGGREGATE_BYTES / 2;
        let pieces = vec![
            p(0, 0, 4096),
            p(0, 4096, 4096),
            p(0, 12288, 4096), // gap before
            p(0, 16384, big),
            p(0, 16384 + big as u64, big),      // would pass the limit
            p(1, 16384 + 2 * big as u64, 4096), // other leaf
        ];
        assert_eq!(merge_runs(&pieces), vec![0..2, 2..4, 4..5, 5..6]);
        assert!(merge_runs(&[]).is_empty());
    }

    #[test]
    fn a_failed_leaf_fails_only_blocks_that_cannot_tolerate_it() {
        let d = block(1, 131072);
        let reqs = [(0u64, d.as_slice()), (131072, d.as_slice())];
        let (m, _) = top(Layout::Mirror, 2, Some(1));
        assert!(m.write_many(&reqs, 2).iter().all(Result::is_ok));
        let (s, _) = top(Layout::Single, 1, Some(0));
        assert!(s.write_many(&reqs, 2).iter().all(Result::is_err));
        let (z, _) = top(Layout::Raidz { nparity: 1 }, 3, Some(2));
        assert!(z.write_many(&reqs, 2).iter().all(Result::is_ok));
    }

    #[test]
    fn bad_requests_fail_alone() {
        let (t, _) = top(Layout::Mirror, 2, None);
        let d = block(2, 8192);
        let reqs = [
            (0u64, d.as_slice()),
            (100, d.as_slice()),
            (8192, d.as_slice()),
        ];
        let r = t.write_many(&reqs, 2);
        assert!(r[0].is_ok() && r[2].is_ok());
        assert!(matches!(r[1], Err(VdevError::BadRequest(_))));
    }
}
