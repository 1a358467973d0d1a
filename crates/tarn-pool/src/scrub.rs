//! The I/O half of a scrub: verify every copy of a batch of blocks,
//! repair from redundancy, report what could not be repaired.
//!
//! The walk that finds the blocks lives above (tarn-dsl's `scan`); it hands
//! this layer batches of block pointers read from the committed state while
//! it holds frees ([`Spa::hold_frees`]), so every block of a batch stays
//! allocated, unmodified, while it is read and repaired.
//!
//! A batch is issued as OpenZFS's sorted scrub issues it: every copy (DVA)
//! becomes one item, items are sorted by (vdev, offset) and cut into runs
//! of nearby blocks ([`tunables::SCAN_GAP_BYTES`], at most
//! [`tarn_vdev::SCRUB_AGGREGATE_BYTES`] long); each run is one large read
//! per child ([`TopVdev::scrub_run`]), and [`tunables::SCAN_ISSUE_THREADS`]
//! runs are in flight at once. A block whose copy fails there is scrubbed
//! on its own ([`TopVdev::scrub`]): mirror children and raidz columns are
//! tried, the wrong ones rewritten and counted. A ditto copy (a second
//! DVA) that is lost while another copy of the block verified is rewritten
//! from that copy. A block none of whose copies verifies is *unrecoverable*:
//! nothing is written, and the caller lists it as a permanent error.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tarn_format::{BlockPtr, ChecksumAlg};
use tarn_vdev::{TopVdev, SCRUB_AGGREGATE_BYTES};

use crate::spa::Spa;
use crate::tunables;

/// What scrubbing one block found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockScrub {
    /// Bytes read and checked (every copy).
    pub issued: u64,
    /// Bytes rewritten from a good copy.
    pub repaired: u64,
    /// No copy verified: the block's data is lost.
    pub unrecoverable: bool,
}

/// Held while a scan reads blocks of the committed state: frees stay
/// unallocatable until it is dropped (see `Allocator::hold_frees`).
pub struct FreeHold<'a> {
    spa: &'a Spa,
}

impl Drop for FreeHold<'_> {
    fn drop(&mut self) {
        self.spa.alloc.lock().release_frees();
    }
}

/// One copy of one block: `(vdev, offset, psize, block index, dva index)`.
type Item = (u32, u64, u64, usize, usize);

fn verifies(bp: &BlockPtr, data: &[u8]) -> bool {
    bp.cksum == ChecksumAlg::Off || tarn_codec::checksum(bp.cksum, data) == bp.checksum
}

impl Spa {
    /// Keeps every block of the committed state where it is until the
    /// hold is dropped.
    pub fn hold_frees(&self) -> FreeHold<'_> {
        self.alloc.lock().hold_frees();
        FreeHold { spa: self }
    }

    /// Scrubs every copy of every block in `bps` (holes are skipped); the
    /// caller holds frees. Results are in `bps` order.
    pub fn scrub_blocks(&self, bps: &[BlockPtr]) -> Vec<BlockScrub> {
        let mut items: Vec<Item> = Vec::new();
        for (i, bp) in bps.iter().enumerate() {
            if bp.is_hole() {
                continue;
            }
            for (d, dva) in bp.dvas.iter().enumerate().filter(|(_, d)| !d.is_empty()) {
                items.push((dva.vdev, dva.offset, u64::from(bp.psize), i, d));
            }
        }
        items.sort_unstable_by_key(|&(vdev, offset, ..)| (vdev, offset));
        let runs = self.cut_runs(&items);
        let next = AtomicUsize::new(0);
        let threads = tunables::SCAN_ISSUE_THREADS.min(runs.len()).max(1);
        let worker = || {
            let mut out: Vec<(usize, usize, bool, u64)> = Vec::new();
            loop {
                let r = next.fetch_add(1, Ordering::Relaxed);
                let Some(run) = runs.get(r) else {
                    return out;
                };
                self.scrub_one_run(bps, &items[run.clone()], &mut out);
            }
        };
        let found: Vec<(usize, usize, bool, u64)> = if threads == 1 {
            worker()
        } else {
            std::thread::scope(|s| {
                let hs: Vec<_> = (0..threads).map(|_| s.spawn(worker)).collect();
                hs.into_iter()
                    .flat_map(|h| h.join().unwrap_or_default())
                    .collect()
            })
        };
        let mut results = vec![BlockScrub::default(); bps.len()];
        let mut ok = vec![[None::<bool>; tarn_format::blkptr::MAX_DVAS]; bps.len()];
        for (i, d, good, repaired) in found {
            results[i].issued += u64::from(bps[i].psize);
            results[i].repaired += repaired;
            ok[i][d] = Some(good);
        }
        for (i, bp) in bps.iter().enumerate() {
            let copies = &ok[i];
            let good = copies.iter().position(|c| *c == Some(true));
            let bad: Vec<usize> = (0..copies.len())
                .filter(|&d| copies[d] == Some(false))
                .collect();
            match good {
                None if !bad.is_empty() => results[i].unrecoverable = true,
                Some(g) if !bad.is_empty() => {
                    results[i].repaired += self.rewrite_copies(bp, g, &bad);
                }
                _ => {}
            }
        }
        results
    }

    /// Cuts sorted items into runs one [`TopVdev::scrub_run`] can read.
    fn cut_runs(&self, items: &[Item]) -> Vec<std::ops::Range<usize>> {
        let mut runs = Vec::new();
        let mut start = 0;
        let mut end_of_prev = 0u64;
        for (k, &(vdev, offset, psize, ..)) in items.iter().enumerate() {
            let asize = self
                .top_vdev(vdev)
                .map_or(psize, |t| t.psize_to_asize(psize));
            if k > start {
                let (v0, o0, ..) = items[start];
                let joins = vdev == v0
                    && offset >= end_of_prev
                    && offset - end_of_prev <= tunables::SCAN_GAP_BYTES
                    && offset + asize - o0 <= SCRUB_AGGREGATE_BYTES;
                if !joins {
                    runs.push(start..k);
                    start = k;
                }
            }
            end_of_prev = offset + asize;
        }
        if start < items.len() {
            runs.push(start..items.len());
        }
        runs
    }

    /// Scrubs one run; pushes `(block, dva, verified, repaired bytes)`.
    fn scrub_one_run(
        &self,
        bps: &[BlockPtr],
        run: &[Item],
        out: &mut Vec<(usize, usize, bool, u64)>,
    ) {
        let Some(top) = run.first().and_then(|it| self.top_vdev(it.0)) else {
            out.extend(run.iter().map(|&(.., i, d)| (i, d, false, 0)));
            return;
        };
        let spec: Vec<(u64, u64)> = run.iter().map(|&(_, o, p, ..)| (o, p)).collect();
        let whole = top.scrub_run(&spec, &mut |k, data| verifies(&bps[run[k].3], data));
        for (k, &(_, offset, psize, i, d)) in run.iter().enumerate() {
            if let Some(written) = whole[k] {
                out.push((i, d, true, written));
                continue;
            }
            let bp = &bps[i];
            match top.scrub(offset, psize, &mut |data| verifies(bp, data)) {
                Ok(repaired) => out.push((i, d, true, repaired)),
                Err(_) => out.push((i, d, false, 0)),
            }
        }
    }

    /// Writes the verified copy `good` of `bp` over its lost copies.
    fn rewrite_copies(&self, bp: &BlockPtr, good: usize, bad: &[usize]) -> u64 {
        let g = bp.dvas[good];
        let Some(top) = self.top_vdev(g.vdev) else {
            return 0;
        };
        let Ok(stored) = top.read(g.offset, u64::from(bp.psize), &mut |d| verifies(bp, d)) else {
            return 0;
        };
        let mut repaired = 0;
        for &d in bad {
            let dva = bp.dvas[d];
            if let Some(t) = self.top_vdev(dva.vdev) {
                if t.write(dva.offset, &stored).is_ok() {
                    repaired += u64::from(bp.psize);
                }
            }
        }
        repaired
    }

    fn top_vdev(&self, vdev: u32) -> Option<Arc<TopVdev>> {
        self.top(vdev).ok()
    }
}
