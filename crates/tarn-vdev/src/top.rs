//! [`TopVdev`]: a top-level vdev — the unit the pool allocates from.
//!
//! A top-level vdev owns a contiguous address space of [`TopVdev::asize`]
//! bytes; a DVA offset is an offset in it. The layout decides how that
//! space maps onto leaves and what redundancy protects it:
//!
//! * `Single`: one leaf, identity mapping.
//! * `Mirror`: every leaf holds the whole address space (see `mirror.rs`).
//! * `Raidz`: the space is row-major over the leaves, blocks carry 1–3
//!   parity columns (see `raidz_map.rs` and `raidz.rs`).
//!
//! Reads take a `verify` callback — the caller checks the block checksum
//! from the block pointer — because only the checksum can tell which copy
//! or which reconstruction is right. Writes and reads succeed as long as
//! enough leaves did; the rest is counted on the leaves and repaired when a
//! verified copy is found (self-healing, as ZFS does).
//!
//! Requests are validated up front (alignment, size, range) and rejected
//! with `VdevError::BadRequest`: a bad request is the caller's bug but must
//! not reach a device.
//!
//! ## Positions
//! A raidz column or a mirror side is a *position*, normally held by one
//! leaf. While a member is being replaced, or stood in for by a hot spare,
//! its position holds two leaves — the old and the new, in that order
//! (OpenZFS's `replacing` and `spare` vdevs, which are mirrors of two):
//! both take every write, reads use whichever holds the data (a leaf being
//! resilvered is read last, and a raidz column only from a leaf that is
//! not), and the position is lost only when all its leaves are. Leaves of
//! a position are adjacent in [`TopVdev::leaves`], in the order of the
//! configuration's depth-first walk. A mirror reads and writes its leaves
//! flat (every leaf holds every block), so positions only matter to its
//! redundancy rules.
//!
//! Each top-level vdev counts its logical I/O in [`TopStats`] — one
//! operation per block, however many leaves it touches — which is what
//! `zpool iostat` shows for a mirror or raidz line; leaves count their own
//! device I/O ([`crate::LeafStats`]).

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::classes::WriteClasses;
use crate::device::aligned_slice;
use crate::error::VdevError;
use crate::layout::Shape;
pub use crate::layout::{Layout, Verify};
use crate::leaf::Leaf;
use crate::parallel::at_once;
use crate::{mirror, raidz};
use tarn_format::SECTOR_SIZE;

pub struct TopVdev {
    id: u32,
    guid: u64,
    ashift: u8,
    layout: Layout,
    children: Vec<Leaf>,
    /// Leaf index ranges by position (see the module comment).
    groups: Vec<Range<usize>>,
    asize: u64,
    stats: TopStats,
    /// Intent-log writes ahead of txg writes (`classes.rs`).
    classes: WriteClasses,
}

/// Blocks read and written through one top-level vdev (relaxed atomics:
/// statistics, not synchronisation).
#[derive(Debug, Default)]
pub struct TopStats {
    pub read_ops: AtomicU64,
    pub write_ops: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
}

impl TopStats {
    /// Takes over another vdev's counters (the same vdev rebuilt).
    fn copy_from(&self, from: &TopStats) {
        for (to, from) in [
            (&self.read_ops, &from.read_ops),
            (&self.write_ops, &from.write_ops),
            (&self.read_bytes, &from.read_bytes),
            (&self.write_bytes, &from.write_bytes),
        ] {
            to.store(from.load(Relaxed), Relaxed);
        }
    }

    fn count_read(&self, bytes: u64) {
        self.read_ops.fetch_add(1, Relaxed);
        self.read_bytes.fetch_add(bytes, Relaxed);
    }

    fn count_write(&self, bytes: u64) {
        self.write_ops.fetch_add(1, Relaxed);
        self.write_bytes.fetch_add(bytes, Relaxed);
    }
}

/// Longest read [`TopVdev::read_run`] makes of blocks that lie back to
/// back (`zfs_vdev_aggregation_limit`).
pub const READ_AGGREGATE_BYTES: u64 = 1 << 20;

thread_local! {
    /// The span buffer of [`TopVdev::read_run`], kept by the thread from
    /// one run to the next. A fresh one is zeroed before every read, and
    /// in a cold sequential read through a mount that zeroing took 7–9 %
    /// of the daemon's CPU, as much as the reads' checksums (perf). Runs
    /// are read on the block cache's read threads only, and a run is at
    /// most [`READ_AGGREGATE_BYTES`], so each of those threads keeps at
    /// most that much (and an alignment's worth more).
    static RUN_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Longest read [`TopVdev::scrub_run`] makes of one child: a scrub's
/// sorted blocks, gaps included (OpenZFS's `zfs_scan_vdev_limit` spirit:
/// large reads keep a scrub near the device's sequential speed).
pub const SCRUB_AGGREGATE_BYTES: u64 = 4 << 20;

impl TopVdev {
    pub fn new(
        id: u32,
        guid: u64,
        ashift: u8,
        layout: Layout,
        children: Vec<Leaf>,
    ) -> Result<TopVdev, VdevError> {
        let sizes = vec![1; children.len()];
        TopVdev::grouped(id, guid, ashift, layout, children, &sizes)
    }

    /// A vdev whose positions hold `sizes[i]` consecutive leaves each (1,
    /// or 2 for a position being replaced or spared; see the module
    /// comment).
    pub fn grouped(
        id: u32,
        guid: u64,
        ashift: u8,
        layout: Layout,
        children: Vec<Leaf>,
        sizes: &[usize],
    ) -> Result<TopVdev, VdevError> {
        if sizes.iter().sum::<usize>() != children.len() || sizes.contains(&0) {
            return Err(VdevError::Config(format!(
                "vdev {id}: positions of {sizes:?} leaves do not cover its {} leaves",
                children.len()
            )));
        }
        let mut groups = Vec::with_capacity(sizes.len());
        let mut at = 0;
        for &n in sizes {
            groups.push(at..at + n);
            at += n;
        }
        let positions = match layout {
            Layout::Raidz { .. } => groups.len(),
            Layout::Single | Layout::Mirror => children.len(),
        };
        validate(ashift, layout, positions)?;
        let min_child = children.iter().map(Leaf::asize).min().unwrap_or(0);
        // Round each child down to whole allocation units so that every
        // address of the vdev maps inside every child.
        let per_child = min_child & !((1u64 << ashift) - 1);
        if per_child == 0 {
            let small = children.iter().min_by_key(|c| c.asize());
            let path = small.map(|c| c.path.clone()).unwrap_or_default();
            return Err(VdevError::Config(format!(
                "{path} has no allocatable space after its labels"
            )));
        }
        let asize = match layout {
            Layout::Single | Layout::Mirror => per_child,
            // OpenZFS vdev_raidz_open: smallest child × number of children.
            Layout::Raidz { .. } => per_child * groups.len() as u64,
        };
        Ok(TopVdev {
            id,
            guid,
            ashift,
            layout,
            children,
            groups,
            asize,
            stats: TopStats::default(),
            classes: WriteClasses::default(),
        })
    }

    fn group_sizes(&self) -> Vec<usize> {
        self.groups.iter().map(Range::len).collect()
    }

    /// The same vdev over `leaves` (grouped as `sizes`), keeping id, GUID,
    /// layout, size and counters.
    fn rebuilt(&self, leaves: Vec<Leaf>, sizes: &[usize]) -> Result<TopVdev, VdevError> {
        let top = TopVdev::grouped(self.id, self.guid, self.ashift, self.layout, leaves, sizes)?;
        if top.asize < self.asize {
            return Err(VdevError::Config(format!(
                "the device is smaller than the one it stands for ({} < {} bytes)",
                top.asize, self.asize
            )));
        }
        // A larger device does not grow the vdev (`resized` does).
        let top = TopVdev {
            asize: self.asize,
            ..top
        };
        top.stats.copy_from(&self.stats);
        Ok(top)
    }

    /// What mirror and raidz I/O work on: the leaves, their positions
    /// and the layout.
    pub(crate) fn shape(&self) -> Shape<'_> {
        Shape {
            id: self.id,
            ashift: self.ashift,
            layout: self.layout,
            leaves: &self.children,
            groups: &self.groups,
        }
    }

    /// Number of positions: raidz columns, mirror sides.
    pub fn width(&self) -> usize {
        self.shape().width()
    }

    /// The leaf indices of raidz column (or position) `pos`.
    pub fn group(&self, pos: usize) -> Range<usize> {
        self.shape().group(pos)
    }

    /// The position holding leaf `index`.
    pub fn position_of(&self, index: usize) -> Option<usize> {
        self.groups.iter().position(|g| g.contains(&index))
    }

    /// This vdev with `leaf` paired with leaf `index` in its position (the
    /// start of a replace, or a hot spare standing in): the new leaf takes
    /// every write and comes right after `index`. A single device becomes
    /// a mirror-like vdev of the pair (GUID `pair_guid`). Refused when the
    /// position already holds a pair.
    pub fn with_pair(
        &self,
        index: usize,
        leaf: Leaf,
        pair_guid: u64,
    ) -> Result<TopVdev, VdevError> {
        let pos = self
            .position_of(index)
            .ok_or_else(|| VdevError::Config(format!("vdev {}: no child {index}", self.id)))?;
        if self.groups[pos].len() > 1 {
            return Err(VdevError::Config(
                "the device is already being replaced or spared; \
                 wait for that to finish or detach one of its devices"
                    .into(),
            ));
        }
        self.check_new_child(&leaf)?;
        let mut leaves: Vec<Leaf> = self.children.iter().map(Leaf::reopen).collect();
        leaves.insert(index + 1, leaf);
        let mut sizes = self.group_sizes();
        sizes[pos] += 1;
        if self.layout == Layout::Single {
            let top = TopVdev::grouped(
                self.id,
                pair_guid,
                self.ashift,
                Layout::Mirror,
                leaves,
                &sizes,
            )?;
            let top = TopVdev {
                asize: self.asize,
                ..top
            };
            top.stats.copy_from(&self.stats);
            return Ok(top);
        }
        self.rebuilt(leaves, &sizes)
    }

    /// This vdev without leaf `index` of a position that holds a pair (the
    /// end of a replace, a spare returned or kept): the position keeps the
    /// other leaf. A mirror-like pair standing for a single device becomes
    /// that device (taking its GUID).
    pub fn without_paired(&self, index: usize) -> Result<TopVdev, VdevError> {
        let pos = self
            .position_of(index)
            .filter(|&p| self.groups[p].len() > 1);
        let Some(pos) = pos else {
            return Err(VdevError::Config(format!(
                "vdev {}: leaf {index} is not part of a replacing or spare pair",
                self.id
            )));
        };
        let leaves = self.leaves_without(index);
        let mut sizes = self.group_sizes();
        sizes[pos] -= 1;
        if self.layout == Layout::Mirror && leaves.len() == 1 {
            let guid = leaves[0].guid;
            let top = TopVdev::grouped(self.id, guid, self.ashift, Layout::Single, leaves, &sizes)?;
            top.stats.copy_from(&self.stats);
            return Ok(top);
        }
        let top = TopVdev::grouped(self.id, self.guid, self.ashift, self.layout, leaves, &sizes)?;
        let top = TopVdev {
            asize: self.asize,
            ..top
        };
        top.stats.copy_from(&self.stats);
        Ok(top)
    }

    /// This vdev with `leaf` attached (`zpool attach`, `zpool replace`): a
    /// mirror gains a child, a single device becomes a two-way mirror with
    /// the new `mirror_guid` (the old device keeps its own GUID). The same
    /// id, ashift and I/O counters; the existing leaves keep theirs. The
    /// new leaf must be at least as large as the vdev's children.
    pub fn with_child(&self, leaf: Leaf, mirror_guid: u64) -> Result<TopVdev, VdevError> {
        let guid = match self.layout {
            Layout::Mirror => self.guid,
            Layout::Single => mirror_guid,
            Layout::Raidz { .. } => {
                return Err(VdevError::Config(
                    "can only attach to mirrors and top-level disks".into(),
                ))
            }
        };
        self.check_new_child(&leaf)?;
        let mut leaves: Vec<Leaf> = self.children.iter().map(Leaf::reopen).collect();
        leaves.push(leaf);
        let mut sizes = self.group_sizes();
        sizes.push(1);
        let top = TopVdev::grouped(self.id, guid, self.ashift, Layout::Mirror, leaves, &sizes)?;
        top.stats.copy_from(&self.stats);
        Ok(top)
    }

    /// This vdev sized by what its devices offer now (`zpool online -e`,
    /// autoexpand): the same id, GUID, layout, leaves and counters. The
    /// caller compares its size with the one the pool's configuration
    /// uses.
    pub fn resized(&self) -> Result<TopVdev, VdevError> {
        let leaves: Vec<Leaf> = self.children.iter().map(Leaf::reopen).collect();
        let sizes = self.group_sizes();
        let top = TopVdev::grouped(self.id, self.guid, self.ashift, self.layout, leaves, &sizes)?;
        top.stats.copy_from(&self.stats);
        Ok(top)
    }

    /// A device joining this vdev must be as large as its children.
    fn check_new_child(&self, leaf: &Leaf) -> Result<(), VdevError> {
        let child_asize = self.children.iter().map(Leaf::asize).min().unwrap_or(0);
        if leaf.asize() < child_asize {
            return Err(VdevError::Config("device is too small".into()));
        }
        Ok(())
    }

    /// This vdev with child `index` swapped for `leaf` (`zpool replace` of
    /// a raidz member, or a device that was missing and is back): the same
    /// id, GUID, layout, size and counters; the other leaves keep their
    /// counters and state. The new leaf must be at least as large as the
    /// others.
    pub fn with_child_swapped(&self, index: usize, leaf: Leaf) -> Result<TopVdev, VdevError> {
        if index >= self.children.len() {
            return Err(VdevError::Config(format!(
                "vdev {}: no child {index}",
                self.id
            )));
        }
        self.check_new_child(&leaf)?;
        let mut leaves: Vec<Leaf> = self.children.iter().map(Leaf::reopen).collect();
        leaves[index] = leaf;
        self.rebuilt(leaves, &self.group_sizes())
    }

    /// Every leaf but `index`, reopened (keeping counters and state).
    fn leaves_without(&self, index: usize) -> Vec<Leaf> {
        (0..self.children.len())
            .filter(|&i| i != index)
            .map(|i| self.children[i].reopen())
            .collect()
    }

    /// This mirror without child `index` (`zpool detach`): the same id,
    /// ashift and I/O counters; a mirror left with one child becomes that
    /// child as a single-device vdev, which takes the child's GUID (a
    /// single-device top-level vdev *is* its leaf). The remaining leaves
    /// keep their counters and state.
    pub fn without_child(&self, index: usize) -> Result<TopVdev, VdevError> {
        let pos = self.position_of(index);
        if self.layout != Layout::Mirror || pos.is_none_or(|p| self.groups[p].len() != 1) {
            return Err(VdevError::Config(format!(
                "vdev {}: only a mirror child can be detached",
                self.id
            )));
        }
        let leaves = self.leaves_without(index);
        let mut sizes = self.group_sizes();
        sizes.remove(pos.unwrap_or(0));
        let (layout, guid) = match leaves.as_slice() {
            [one] => (Layout::Single, one.guid),
            _ => (Layout::Mirror, self.guid),
        };
        let top = TopVdev::grouped(self.id, guid, self.ashift, layout, leaves, &sizes)?;
        top.stats.copy_from(&self.stats);
        Ok(top)
    }

    /// Positions that take no I/O: a raidz column none of whose leaves is
    /// available; a mirror leaf that is not (offline, faulted, missing,
    /// removed).
    pub fn unusable_children(&self) -> usize {
        match self.layout {
            Layout::Raidz { .. } => self
                .groups
                .iter()
                .filter(|g| !self.children[(*g).clone()].iter().any(Leaf::is_available))
                .count(),
            Layout::Single | Layout::Mirror => {
                self.children.iter().filter(|l| !l.is_available()).count()
            }
        }
    }

    /// Whether more children are unusable than the layout tolerates: the
    /// vdev cannot serve all its data (OpenZFS's "insufficient replicas").
    pub fn is_lost(&self) -> bool {
        self.unusable_children() > self.tolerated_failures()
    }

    /// Whether leaf `index` may stop taking I/O with every block still
    /// readable: the positions with no leaf that is usable and complete
    /// (not missing txgs in a DTL, not being resilvered), counting `index`
    /// as gone, are no more than the layout tolerates (OpenZFS's
    /// `vdev_dtl_required` check of `zpool offline`, of a fault, and of
    /// `zpool detach`).
    pub fn can_lose(&self, index: usize) -> bool {
        let complete = |i: usize| {
            let l = &self.children[i];
            i != index && l.is_available() && !l.has_dtl() && !l.stats.resilvering()
        };
        let gone = match self.layout {
            Layout::Raidz { .. } => self
                .groups
                .iter()
                .filter(|g| !(*g).clone().any(complete))
                .count(),
            Layout::Single | Layout::Mirror => {
                (0..self.children.len()).filter(|&i| !complete(i)).count()
            }
        };
        gone <= self.tolerated_failures()
    }

    pub fn id(&self) -> u32 {
        self.id
    }
    pub fn guid(&self) -> u64 {
        self.guid
    }
    pub fn ashift(&self) -> u8 {
        self.ashift
    }
    pub fn layout(&self) -> Layout {
        self.layout
    }
    pub fn leaves(&self) -> &[Leaf] {
        &self.children
    }
    /// Logical I/O counters (one operation per block).
    pub fn stats(&self) -> &TopStats {
        &self.stats
    }

    /// Allocatable bytes of this vdev's address space (parity included).
    pub fn asize(&self) -> u64 {
        self.asize
    }

    /// Bytes allocated for a block of `psize` bytes (OpenZFS
    /// `vdev_raidz_asize` / `vdev_default_asize`).
    pub fn psize_to_asize(&self, psize: u64) -> u64 {
        psize_to_asize(self.layout, self.width(), self.ashift, psize)
    }

    /// Whether a child of a single-device or mirror vdev never stored
    /// anything in `[offset, offset+len)` (a hole of a sparse file, see
    /// `BlockDevice::has_hole`). A raidz's children hold other ranges of
    /// the vdev's addresses; it says no.
    pub fn has_hole(&self, offset: u64, len: u64) -> bool {
        match self.layout {
            Layout::Single | Layout::Mirror => {
                self.leaves().iter().any(|l| l.has_hole(offset, len))
            }
            Layout::Raidz { .. } => false,
        }
    }

    /// Writes a block of `data.len()` (= psize) bytes at DVA offset `offset`.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), VdevError> {
        self.write_with(offset, data, false)
    }

    /// [`TopVdev::write`] that returns once the block is durable on every
    /// device that took it (an intent-log block): each device writes it
    /// with `BlockDevice::write_durable`, all at once, so the caller waits
    /// for the slowest device and for nothing else written before.
    pub fn write_durable(&self, offset: u64, data: &[u8]) -> Result<(), VdevError> {
        self.write_with(offset, data, true)
    }

    /// [`TopVdev::write_durable`] of several blocks, `(offset, bytes)`,
    /// all of them in flight at once on a mirror or single device (one
    /// after the other on raidz); each block's result in order.
    ///
    /// Each block is its own durable write, even where blocks lie side by
    /// side. Joining such blocks into one write, so that each device takes
    /// one write and one cache flush per commit, was tried and dropped: a
    /// second write in flight with its own flush costs nothing measurable
    /// (docs/MEASUREMENTS.md, "Vdev: joined log-block writes").
    pub fn write_durable_many(&self, blocks: &[(u64, &[u8])]) -> Vec<Result<(), VdevError>> {
        if blocks.len() < 2 || matches!(self.layout, Layout::Raidz { .. }) {
            return blocks
                .iter()
                .map(|&(offset, data)| self.write_durable(offset, data))
                .collect();
        }
        let mut results: Vec<Option<Result<(), VdevError>>> = Vec::with_capacity(blocks.len());
        let mut padded = Vec::with_capacity(blocks.len());
        let mut index = Vec::with_capacity(blocks.len());
        for (i, &(offset, data)) in blocks.iter().enumerate() {
            match self.check_request(offset, data.len() as u64) {
                Ok(()) => {
                    self.stats.count_write(data.len() as u64);
                    padded.push((offset, self.pad(data)));
                    index.push(i);
                    results.push(None);
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        let writes: Vec<(u64, &[u8])> = padded.iter().map(|(o, d)| (*o, &d[..])).collect();
        let _log = self.classes.sync_write();
        for (i, r) in index
            .into_iter()
            .zip(mirror::write_durable_many(&self.shape(), &writes))
        {
            results[i] = Some(r);
        }
        results
            .into_iter()
            .map(|r| r.expect("every block has a result"))
            .collect()
    }

    fn write_with(&self, offset: u64, data: &[u8], durable: bool) -> Result<(), VdevError> {
        self.check_request(offset, data.len() as u64)?;
        let _log = durable.then(|| self.classes.sync_write());
        self.stats.count_write(data.len() as u64);
        let padded = self.pad(data);
        match self.layout {
            Layout::Single | Layout::Mirror => {
                mirror::write(&self.shape(), offset, &padded, durable)
            }
            Layout::Raidz { nparity } => {
                raidz::write(&self.shape(), nparity, offset, &padded, durable)
            }
        }
    }

    /// Reads `psize` bytes at `offset` that `verify` accepts, repairing any
    /// bad copy found on the way. Never returns unverified data.
    pub fn read(&self, offset: u64, psize: u64, verify: Verify<'_>) -> Result<Vec<u8>, VdevError> {
        self.check_request(offset, psize)?;
        self.read_impl(offset, psize, verify, false, false, None)
            .map(|(data, _)| data)
    }

    /// [`TopVdev::read`] of a block born in txg `birth`: a child whose DTL
    /// says it missed that txg holds a stale copy and is tried last.
    pub fn read_born(
        &self,
        offset: u64,
        psize: u64,
        birth: u64,
        verify: Verify<'_>,
    ) -> Result<Vec<u8>, VdevError> {
        self.check_request(offset, psize)?;
        self.read_impl(offset, psize, verify, false, false, Some(birth))
            .map(|(data, _)| data)
    }

    /// [`TopVdev::read`] of a block that may never have been written (the
    /// end of an intent-log chain): when no copy verifies, no checksum
    /// error is counted.
    pub fn read_speculative(
        &self,
        offset: u64,
        psize: u64,
        verify: Verify<'_>,
    ) -> Result<Vec<u8>, VdevError> {
        self.check_request(offset, psize)?;
        self.read_impl(offset, psize, verify, false, true, None)
            .map(|(data, _)| data)
    }

    /// Scrub read: checks *every* copy (all mirror children; raidz data and
    /// parity), repairs what is wrong and returns the bytes rewritten.
    pub fn scrub(&self, offset: u64, psize: u64, verify: Verify<'_>) -> Result<u64, VdevError> {
        self.check_request(offset, psize)?;
        self.read_impl(offset, psize, verify, true, false, None)
            .map(|(_, repaired)| repaired)
    }

    /// Reads blocks that lie back to back on this vdev — `blocks` are
    /// `(offset, psize)`, each starting where the allocation of the one
    /// before it ends — with one read of one mirror child (OpenZFS's read
    /// aggregation). Each block whose bytes `verify(i, bytes)` accepts
    /// comes back; `None` marks a block the caller must read on its own
    /// (its copy was wrong, the read failed, the run is not back to back or
    /// is longer than [`READ_AGGREGATE_BYTES`], raidz): that read tries the
    /// other copies, heals, and counts the errors.
    pub fn read_run(
        &self,
        blocks: &[(u64, u64)],
        verify: &mut dyn FnMut(usize, &[u8]) -> bool,
    ) -> Vec<Option<Vec<u8>>> {
        let mut out: Vec<Option<Vec<u8>>> = vec![None; blocks.len()];
        let (Some(&(first, _)), Some(&(last, last_psize))) = (blocks.first(), blocks.last()) else {
            return out;
        };
        let back_to_back = blocks.windows(2).all(|w| {
            let (off, psize) = w[0];
            off.checked_add(self.psize_to_asize(psize)) == Some(w[1].0)
        });
        // To the end of the last allocation: whole sectors, so the file
        // vdev can read it `O_DIRECT`.
        let span = (last.saturating_add(self.psize_to_asize(last_psize))).saturating_sub(first);
        if matches!(self.layout, Layout::Raidz { .. })
            || !back_to_back
            || span > READ_AGGREGATE_BYTES
            || blocks
                .iter()
                .any(|&(o, p)| self.check_request(o, p).is_err())
        {
            return out;
        }
        // The blocks' births differ: a child that missed any txg may hold
        // stale copies in the run, so another is read if there is one.
        let order = mirror::read_order(&self.children, None);
        let fresh = order.iter().copied().find(|&i| {
            let l = &self.children[i];
            l.is_available() && !l.has_dtl() && !l.stats.resilvering()
        });
        let Some(child) = fresh.or(order.first().copied()) else {
            return out;
        };
        let leaf = &self.children[child];
        // Injected checksum damage is decided per block offset: such a
        // leaf is read block by block.
        if !leaf.is_available() || leaf.inject.damages_reads() {
            return out;
        }
        RUN_BUFFER.with(|backing| {
            let mut backing = backing.borrow_mut();
            let buf = aligned_slice(&mut backing, span as usize);
            if leaf.read(buf, first).is_err() {
                return;
            }
            for (i, &(off, psize)) in blocks.iter().enumerate() {
                self.stats.count_read(psize);
                let at = (off - first) as usize;
                let piece = &buf[at..at + psize as usize];
                if verify(i, piece) {
                    out[i] = Some(piece.to_vec());
                }
            }
        });
        out
    }

    /// Scrub of blocks that lie close together on this vdev: `blocks` are
    /// `(offset, psize)` in offset order, not overlapping, and the span
    /// from the first offset to the end of the last allocation is at most
    /// [`SCRUB_AGGREGATE_BYTES`]. The span is read once from *every* child
    /// (gaps between blocks included: one large read beats several small
    /// ones), as a scrub must check every copy. Per block: `Some(bytes
    /// rewritten)` when every child's copy was read and `verify(i, bytes)`
    /// accepted it, `None` when the block must be scrubbed on its own
    /// ([`TopVdev::scrub`]), which finds the good copy, repairs the others
    /// and counts the errors; so must every block of a raidz vdev or of a
    /// run this cannot read whole (all `None`).
    ///
    /// A child being resilvered is not read: each block the others verified
    /// is written to it (a resilver), and those are the bytes rewritten.
    pub fn scrub_run(
        &self,
        blocks: &[(u64, u64)],
        verify: &mut dyn FnMut(usize, &[u8]) -> bool,
    ) -> Vec<Option<u64>> {
        let none = vec![None; blocks.len()];
        let (Some(&(first, _)), Some(&(last, last_psize))) = (blocks.first(), blocks.last()) else {
            return none;
        };
        let in_order = blocks.windows(2).all(|w| {
            let (off, psize) = w[0];
            off.checked_add(self.psize_to_asize(psize))
                .is_some_and(|end| end <= w[1].0)
        });
        let span = last
            .saturating_add(self.psize_to_asize(last_psize))
            .saturating_sub(first);
        if matches!(self.layout, Layout::Raidz { .. })
            || !in_order
            || span > SCRUB_AGGREGATE_BYTES
            || blocks
                .iter()
                .any(|&(o, p)| self.check_request(o, p).is_err())
        {
            return none;
        }
        let (resilvering, healthy): (Vec<&Leaf>, Vec<&Leaf>) =
            self.children.iter().partition(|l| l.stats.resilvering());
        // Injected checksum damage is decided per block offset: a vdev with
        // such a leaf is scrubbed block by block.
        if healthy.is_empty() || self.children.iter().any(|l| l.inject.damages_reads()) {
            return none;
        }
        let mut out: Vec<Option<u64>> = vec![Some(0); blocks.len()];
        let mut backing = Vec::new();
        for leaf in &healthy {
            let buf = aligned_slice(&mut backing, span as usize);
            if !leaf.is_available() || leaf.read(buf, first).is_err() {
                return none;
            }
            for (i, &(off, psize)) in blocks.iter().enumerate() {
                let at = (off - first) as usize;
                if out[i].is_some() && !verify(i, &buf[at..at + psize as usize]) {
                    out[i] = None;
                }
            }
        }
        for &(_, psize) in blocks {
            self.stats.count_read(psize);
        }
        if resilvering.is_empty() {
            return out;
        }
        // `backing` holds the last healthy child's span.
        let buf = aligned_slice(&mut backing, span as usize);
        for (i, &(off, psize)) in blocks.iter().enumerate() {
            let Some(written) = out[i].as_mut() else {
                continue;
            };
            let at = (off - first) as usize;
            let len = self.psize_to_asize(psize) as usize;
            for leaf in &resilvering {
                // A failed write is the leaf's to count; the block is then
                // scrubbed on its own, which tries again.
                if leaf.write(&buf[at..at + len], off).is_ok() {
                    *written += len as u64;
                } else {
                    out[i] = None;
                    break;
                }
            }
        }
        out
    }

    fn read_impl(
        &self,
        offset: u64,
        psize: u64,
        verify: Verify<'_>,
        thorough: bool,
        speculative: bool,
        birth: Option<u64>,
    ) -> Result<(Vec<u8>, u64), VdevError> {
        self.stats.count_read(psize);
        let r = match self.layout {
            Layout::Single | Layout::Mirror => mirror::read(
                &self.shape(),
                offset,
                psize,
                verify,
                thorough,
                speculative,
                birth,
            ),
            // Raidz counts a checksum error only for a column a verified
            // reconstruction proved wrong: speculative or not.
            Layout::Raidz { nparity } => raidz::read(
                &self.shape(),
                nparity,
                offset,
                psize,
                verify,
                thorough,
                birth,
            ),
        }?;
        debug_assert_eq!(r.0.len() as u64, psize);
        Ok(r)
    }

    /// Flushes every healthy child; Ok while enough children hold the data.
    ///
    /// The children flush at once, each on its own thread: a flush is a
    /// device round trip (an fdatasync on a file vdev), and an `fsync`
    /// through the intent log waits for the slowest child, not the sum.
    pub fn flush(&self) -> Result<(), VdevError> {
        let errors: Vec<String> = at_once(&self.children, |leaf| {
            leaf.flush().err().map(|e| leaf.describe_err(&e))
        })
        .into_iter()
        .flatten()
        .collect();
        let last = errors.last().cloned().unwrap_or_default();
        self.check_failures("flush", errors.len(), last)
    }

    /// How many positions the leaves in `failed` (indices) take out: for
    /// raidz, the columns all of whose leaves failed; for a mirror, each
    /// failed leaf.
    pub(crate) fn failed_positions(&self, failed: &[usize]) -> usize {
        match self.layout {
            Layout::Raidz { .. } => self
                .groups
                .iter()
                .filter(|g| (*g).clone().all(|i| failed.contains(&i)))
                .count(),
            Layout::Single | Layout::Mirror => failed.len(),
        }
    }

    /// How many children may fail an operation without losing data.
    pub fn tolerated_failures(&self) -> usize {
        self.layout.tolerated_failures(self.children.len())
    }

    pub(crate) fn check_failures(
        &self,
        op: &'static str,
        failed: usize,
        last: String,
    ) -> Result<(), VdevError> {
        self.shape().check_failures(op, failed, last)
    }

    /// Zero-pads a block to whole allocation units (no copy when it
    /// already is whole units, as every uncompressed record is).
    /// Counts one block written by [`TopVdev::write_many`].
    /// The gate that puts intent-log writes ahead of txg writes.
    pub(crate) fn classes(&self) -> &WriteClasses {
        &self.classes
    }

    pub(crate) fn count_write(&self, bytes: u64) {
        self.stats.count_write(bytes);
    }

    pub(crate) fn pad<'a>(&self, data: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
        let unit = 1usize << self.ashift;
        if data.len().is_multiple_of(unit) {
            return std::borrow::Cow::Borrowed(data);
        }
        let mut v = Vec::with_capacity(data.len().next_multiple_of(unit));
        v.extend_from_slice(data);
        v.resize(data.len().next_multiple_of(unit), 0);
        std::borrow::Cow::Owned(v)
    }

    pub(crate) fn check_request(&self, offset: u64, psize: u64) -> Result<(), VdevError> {
        let bad = |why: String| Err(VdevError::BadRequest(format!("vdev {}: {why}", self.id)));
        if psize == 0 || !psize.is_multiple_of(SECTOR_SIZE) || psize > tarn_format::MAX_BLOCK_SIZE {
            return bad(format!(
                "block size {psize} is not a multiple of 512 in 512..=16M"
            ));
        }
        if offset & ((1 << self.ashift) - 1) != 0 {
            return bad(format!(
                "offset {offset} is not aligned to 2^{}",
                self.ashift
            ));
        }
        let end = offset.checked_add(self.psize_to_asize(psize));
        if end.is_none_or(|e| e > self.asize) {
            return bad(format!(
                "{psize} bytes at {offset} run past the end ({})",
                self.asize
            ));
        }
        Ok(())
    }
}

fn validate(ashift: u8, layout: Layout, n: usize) -> Result<(), VdevError> {
    let err = |s: String| Err(VdevError::Config(s));
    if !(9..=16).contains(&ashift) {
        return err(format!("ashift {ashift} is outside 9..=16"));
    }
    match layout {
        Layout::Single if n != 1 => err(format!("a single-device vdev needs 1 device, got {n}")),
        Layout::Mirror if n < 2 => err(format!("a mirror needs at least 2 devices, got {n}")),
        Layout::Raidz { nparity } if !(1..=3).contains(&nparity) => {
            err(format!("raidz parity {nparity} is outside 1..=3"))
        }
        Layout::Raidz { nparity } if n < nparity + 1 => err(format!(
            "raidz{nparity} needs at least {} devices, got {n}",
            nparity + 1
        )),
        Layout::Raidz { .. } if n > tarn_parity::MAX_COLUMNS => err(format!(
            "raidz can have at most {} devices, got {n}",
            tarn_parity::MAX_COLUMNS
        )),
        _ => Ok(()),
    }
}

/// Allocated bytes for `psize` bytes on a vdev of this shape.
pub fn psize_to_asize(layout: Layout, width: usize, ashift: u8, psize: u64) -> u64 {
    if psize == 0 {
        return 0;
    }
    match layout {
        Layout::Single | Layout::Mirror => psize.next_multiple_of(1 << ashift),
        Layout::Raidz { nparity } => {
            let (w, p) = (width as u64, nparity as u64);
            let s = psize.div_ceil(1 << ashift);
            let s = s + p * s.div_ceil(w - p);
            s.next_multiple_of(p + 1) << ashift
        }
    }
}
