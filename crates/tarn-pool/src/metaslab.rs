//! The metaslab allocator: where every block copy goes.
//!
//! Each top-level vdev's allocatable space is cut into metaslabs of
//! `2^metaslab_shift` bytes (OpenZFS's sizing rule, see `accounting`); each
//! metaslab keeps its free space in a [`RangeTree`]. Space past the last
//! whole metaslab is never used, exactly as in OpenZFS, so `zpool list`
//! SIZE agrees with it.
//!
//! Choosing a vdev: a rotor walks the normal-class vdevs and gives each a
//! run ("aliquot") of allocations before moving on; the run is scaled by the
//! vdev's free space relative to the average, so emptier vdevs receive more
//! writes and unequal vdevs fill evenly (OpenZFS's `mg_bias`). Extra copies
//! (`copies=2|3`, and metadata ditto copies) go to distinct vdevs where the
//! pool has them.
//!
//! Choosing a place: the vdev's active metaslab, first fit from a cursor
//! (OpenZFS's DF allocator), so a txg's writes land in long sequential runs.
//! When the active metaslab cannot fit the block, the metaslab with the most
//! free space becomes active.
//!
//! Frees are deferred: a range freed in txg N is still referenced by the
//! on-disk state of txg N−1, so it returns to the free trees only when txg
//! N is durable ([`Allocator::txg_synced`]). Every allocation and free is
//! also recorded per txg so the space map log can persist it.
//!
//! **Invariant:** a range is in at most one of {free tree, freeing list,
//! allocated}; `RangeTree::add` asserts against double frees.

use std::collections::BTreeMap;

use tarn_format::label::VdevClass;
use tarn_format::spacemap::SpaceMapEntry;
use tarn_format::Dva;

use crate::range_tree::RangeTree;
use crate::tunables;

/// Maps a block's physical size to the bytes it occupies on one vdev
/// (raidz adds parity and padding).
pub type AsizeFn = Box<dyn Fn(u64) -> u64 + Send + Sync>;

pub struct Metaslab {
    pub start: u64,
    pub size: u64,
    free: RangeTree,
    cursor: u64,
}

/// The metaslabs of one top-level vdev.
pub struct MetaslabGroup {
    pub vdev: u32,
    pub ashift: u8,
    pub class: VdevClass,
    pub metaslabs: Vec<Metaslab>,
    asize_of: AsizeFn,
    active: usize,
    free: u64,
    /// Freed ranges waiting for their txg to become durable, and their
    /// total.
    freeing_ranges: RangeTree,
    freeing: u64,
    /// Allocation disabled (device removed / vdev faulted).
    pub disabled: bool,
}

impl MetaslabGroup {
    /// A group covering `[0, count << shift)` with everything free.
    pub fn new(
        vdev: u32,
        ashift: u8,
        class: VdevClass,
        shift: u8,
        count: u64,
        asize_of: AsizeFn,
    ) -> Self {
        let size = 1u64 << shift;
        let metaslabs = (0..count)
            .map(|i| {
                let mut free = RangeTree::new();
                free.add(i * size, size);
                Metaslab {
                    start: i * size,
                    size,
                    free,
                    cursor: i * size,
                }
            })
            .collect();
        MetaslabGroup {
            vdev,
            ashift,
            class,
            metaslabs,
            asize_of,
            active: 0,
            free: count * size,
            freeing_ranges: RangeTree::new(),
            freeing: 0,
            disabled: false,
        }
    }

    /// Grows the group to `count` metaslabs of the same size (its vdev
    /// grew); the new ones are free.
    pub fn grow(&mut self, count: u64) {
        let Some(size) = self.metaslabs.first().map(|m| m.size) else {
            return;
        };
        for i in self.metaslabs.len() as u64..count {
            let mut free = RangeTree::new();
            free.add(i * size, size);
            self.metaslabs.push(Metaslab {
                start: i * size,
                size,
                free,
                cursor: i * size,
            });
            self.free += size;
        }
    }

    /// Bytes of metaslab space (raw, parity included).
    pub fn size(&self) -> u64 {
        self.metaslabs.iter().map(|m| m.size).sum()
    }
    /// Bytes allocated on disk (including frees not yet durable).
    pub fn allocated(&self) -> u64 {
        self.size() - self.free
    }
    pub fn free(&self) -> u64 {
        self.free
    }
    pub fn asize(&self, psize: u64) -> u64 {
        (self.asize_of)(psize)
    }

    fn metaslab_of(&self, offset: u64) -> Option<usize> {
        let size = self.metaslabs.first()?.size;
        let i = (offset / size) as usize;
        (i < self.metaslabs.len()).then_some(i)
    }

    /// Allocates `asize` bytes; returns the offset.
    fn alloc(&mut self, asize: u64) -> Option<u64> {
        let align = 1u64 << self.ashift;
        if self.disabled || self.free < asize {
            return None;
        }
        let try_ms = |ms: &mut Metaslab| {
            let off = ms.free.first_fit(asize, align, ms.cursor)?;
            ms.free.remove(off, asize);
            ms.cursor = off + asize;
            Some(off)
        };
        if let Some(off) = try_ms(&mut self.metaslabs[self.active]) {
            self.free -= asize;
            return Some(off);
        }
        // Activate the metaslab with the most free space that can fit it.
        let mut order: Vec<usize> = (0..self.metaslabs.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(self.metaslabs[i].free.space()));
        for i in order {
            if self.metaslabs[i].free.space() < asize {
                break;
            }
            if let Some(off) = try_ms(&mut self.metaslabs[i]) {
                self.active = i;
                self.free -= asize;
                return Some(off);
            }
        }
        None
    }

    /// Whether `asize` bytes may fit (free space, not fragmentation).
    fn can_fit(&self, asize: u64) -> bool {
        !self.disabled && self.free >= asize
    }

    /// Allocates `asize` bytes at the lowest free offset that fits, for
    /// intent-log blocks on a data vdev: they are freed within a txg or
    /// two, so taking them low keeps the log cycling through the same
    /// small, already-written region (on a file vdev, no file-system block
    /// allocation per log write) and away from the data cursor, which
    /// keeps the data's records contiguous (the role of OpenZFS's
    /// embedded log class).
    fn alloc_low(&mut self, asize: u64) -> Option<u64> {
        let align = 1u64 << self.ashift;
        if self.disabled || self.free < asize {
            return None;
        }
        for ms in &mut self.metaslabs {
            if ms.free.space() < asize {
                continue;
            }
            if let Some(off) = ms.free.first_fit(asize, align, ms.start) {
                ms.free.remove(off, asize);
                self.free -= asize;
                return Some(off);
            }
        }
        None
    }

    /// Takes the free space that starts at `offset`, up to `max` bytes
    /// and the end of its metaslab, in whole allocation units: its length,
    /// 0 if `offset` is not free.
    fn take_following(&mut self, offset: u64, max: u64) -> u64 {
        let Some(i) = self.metaslab_of(offset) else {
            return 0;
        };
        let ms = &mut self.metaslabs[i];
        let ms_end = ms.start + ms.size;
        let Some((s, len)) = ms.free.containing(offset) else {
            return 0;
        };
        let end = s + len;
        let align = 1u64 << self.ashift;
        let len = (end.min(ms_end).min(offset.saturating_add(max)) - offset) & !(align - 1);
        if len > 0 {
            ms.free.remove(offset, len);
            self.free -= len;
        }
        len
    }

    /// Marks `[offset, offset+len)` allocated (space map replay).
    fn claim(&mut self, offset: u64, len: u64) -> Result<(), String> {
        let i = self
            .metaslab_of(offset)
            .ok_or_else(|| format!("offset {offset:#x} beyond the last metaslab"))?;
        let ms = &mut self.metaslabs[i];
        if offset + len > ms.start + ms.size || !ms.free.contains(offset, len) {
            return Err(format!("allocating {offset:#x}+{len:#x} which is not free"));
        }
        ms.free.remove(offset, len);
        self.free -= len;
        Ok(())
    }

    /// Returns `[offset, offset+len)` to the free trees.
    fn release(&mut self, offset: u64, len: u64) -> Result<(), String> {
        let i = self
            .metaslab_of(offset)
            .ok_or_else(|| format!("offset {offset:#x} beyond the last metaslab"))?;
        let ms = &mut self.metaslabs[i];
        if offset + len > ms.start + ms.size || ms.free.overlaps(offset, len) {
            return Err(format!(
                "freeing {offset:#x}+{len:#x} which is already free"
            ));
        }
        ms.free.add(offset, len);
        self.free += len;
        Ok(())
    }

    /// OpenZFS-style fragmentation input: histogram of free segment sizes.
    pub fn free_histogram(&self) -> [u64; 64] {
        let mut h = [0u64; 64];
        for ms in &self.metaslabs {
            for (i, n) in ms.free.histogram().iter().enumerate() {
                h[i] += n;
            }
        }
        h
    }
}

/// Allocation and free records of one txg, for the space map log.
#[derive(Default, Debug)]
struct TxgRecord {
    entries: Vec<SpaceMapEntry>,
    /// Frees to release when this txg is durable.
    frees: Vec<(u32, u64, u64)>,
    /// Bytes of log blocks allocated on log-class vdevs.
    log_bytes: u64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AllocError {
    #[error("out of space")]
    NoSpace,
}

pub struct Allocator {
    pub groups: Vec<MetaslabGroup>,
    rotor: usize,
    aliquot_left: u64,
    txgs: BTreeMap<u64, TxgRecord>,
    /// Scans reading the committed state ([`Allocator::hold_frees`]);
    /// while any does, synced frees stay unallocatable.
    free_holds: usize,
    /// The newest txg reported durable by [`Allocator::txg_synced`].
    synced: u64,
}

impl Allocator {
    pub fn new(groups: Vec<MetaslabGroup>) -> Self {
        Allocator {
            groups,
            rotor: 0,
            aliquot_left: tunables::METASLAB_ALIQUOT_BYTES,
            txgs: BTreeMap::new(),
            free_holds: 0,
            synced: 0,
        }
    }

    fn normal(&self, i: usize) -> bool {
        self.groups[i].class == VdevClass::Normal && !self.groups[i].disabled
    }

    /// Allocates `copies` DVAs for a block of `psize` bytes in `txg`.
    pub fn alloc(&mut self, txg: u64, psize: u64, copies: usize) -> Result<Vec<Dva>, AllocError> {
        match self.alloc_throttled(txg, psize, copies, &|_| true) {
            Ok(Some(dvas)) => Ok(dvas),
            Ok(None) => unreachable!("every vdev has room"),
            Err(e) => Err(e),
        }
    }

    /// [`Allocator::alloc`] under the allocation throttle (see
    /// `crate::throttle`): the first copy goes only to a vdev `room`
    /// accepts. `Ok(None)` when the block would fit on a vdev without
    /// room but on none with room: the caller waits for a write to
    /// complete and asks again.
    pub fn alloc_throttled(
        &mut self,
        txg: u64,
        psize: u64,
        copies: usize,
        room: &dyn Fn(u32) -> bool,
    ) -> Result<Option<Vec<Dva>>, AllocError> {
        assert!((1..=3).contains(&copies));
        let n = self.groups.len();
        let mut dvas: Vec<Dva> = Vec::with_capacity(copies);
        for copy in 0..copies {
            let only = |v: u32| copy > 0 || room(v);
            let dva = self.alloc_one(txg, psize, &dvas, copy == 0, &only);
            if dva.is_none() && copy == 0 && self.fits_somewhere(psize, &room) {
                return Ok(None);
            }
            match dva {
                Some(d) => dvas.push(d),
                None => {
                    // Undo the copies already placed: the block is not written.
                    for d in &dvas {
                        self.unalloc(txg, d);
                    }
                    return Err(AllocError::NoSpace);
                }
            }
        }
        debug_assert!(dvas.len() == copies && n > 0);
        Ok(Some(dvas))
    }

    /// Whether a vdev that `room` turns away could hold `psize` bytes
    /// (so a throttled allocation should wait rather than fail).
    fn fits_somewhere(&self, psize: u64, room: &dyn Fn(u32) -> bool) -> bool {
        (0..self.groups.len())
            .filter(|&i| self.normal(i) && !room(self.groups[i].vdev))
            .any(|i| self.groups[i].can_fit(self.groups[i].asize(psize)))
    }

    fn alloc_one(
        &mut self,
        txg: u64,
        psize: u64,
        taken: &[Dva],
        advance: bool,
        only: &dyn Fn(u32) -> bool,
    ) -> Option<Dva> {
        let n = self.groups.len();
        // Prefer vdevs that hold no copy yet, starting at the rotor.
        let start = self.rotor;
        let usable = |i: usize| self.normal(i) && only(self.groups[i].vdev);
        let candidates = (0..n)
            .map(|k| (start + k) % n)
            .filter(|&i| usable(i))
            .filter(|&i| !taken.iter().any(|d| d.vdev == self.groups[i].vdev));
        let mut order: Vec<usize> = candidates.collect();
        order.extend((0..n).map(|k| (start + k) % n).filter(|&i| usable(i)));
        for i in order {
            let g = &mut self.groups[i];
            let asize = g.asize(psize);
            if let Some(offset) = g.alloc(asize) {
                let dva = Dva {
                    vdev: g.vdev,
                    asize_sectors: (asize >> 9) as u32,
                    offset,
                };
                self.record(txg, dva, false);
                if advance {
                    self.advance_rotor(i, asize);
                }
                return Some(dva);
            }
        }
        None
    }

    /// Gives each vdev an aliquot scaled by its share of free space.
    fn advance_rotor(&mut self, used: usize, asize: u64) {
        if used != self.rotor {
            self.rotor = used;
            self.aliquot_left = tunables::METASLAB_ALIQUOT_BYTES;
        }
        self.aliquot_left = self.aliquot_left.saturating_sub(asize);
        if self.aliquot_left > 0 {
            return;
        }
        let n = self.groups.len();
        self.rotor = (self.rotor + 1) % n;
        let normal: Vec<&MetaslabGroup> = self
            .groups
            .iter()
            .filter(|g| g.class == VdevClass::Normal)
            .collect();
        let mean = normal.iter().map(|g| g.free).sum::<u64>() / normal.len().max(1) as u64;
        let free = self.groups[self.rotor].free;
        let base = tunables::METASLAB_ALIQUOT_BYTES;
        self.aliquot_left = if mean == 0 {
            base
        } else {
            (base as u128 * free as u128 / mean as u128).clamp(1, 4 * base as u128) as u64
        };
    }

    fn group_mut(&mut self, vdev: u32) -> Option<&mut MetaslabGroup> {
        self.groups.iter_mut().find(|g| g.vdev == vdev)
    }

    /// Adds the metaslabs of a vdev added to the running pool.
    pub fn add_group(&mut self, group: MetaslabGroup) {
        assert!(
            self.groups.iter().all(|g| g.vdev != group.vdev),
            "vdev {} added twice",
            group.vdev
        );
        self.groups.push(group);
    }

    /// Drops the metaslabs of a vdev leaving the pool; it must hold
    /// nothing (no allocation, no free waiting for its txg).
    pub fn remove_group(&mut self, vdev: u32) {
        let i = self
            .groups
            .iter()
            .position(|g| g.vdev == vdev)
            .expect("removing a vdev that has metaslabs");
        // Durable frees a scan's hold kept back: no scan reads a vdev
        // that is leaving (log vdevs hold no scanned blocks).
        let synced = self.synced;
        let mut released = Vec::new();
        for rec in self.txgs.range_mut(..=synced).map(|(_, r)| r) {
            rec.frees.retain(|f| {
                let mine = f.0 == vdev;
                if mine {
                    released.push((f.1, f.2));
                }
                !mine
            });
        }
        let g = &mut self.groups[i];
        for (off, len) in released {
            g.freeing -= len;
            g.freeing_ranges.remove(off, len);
            g.release(off, len)
                .expect("deferred free of allocated space");
        }
        assert_eq!(self.groups[i].allocated(), 0, "vdev {vdev} is not empty");
        assert!(
            self.txgs
                .values()
                .all(|r| r.frees.iter().all(|f| f.0 != vdev)),
            "vdev {vdev} has frees pending"
        );
        self.groups.remove(i);
        if self.rotor >= self.groups.len() {
            self.rotor = 0;
        }
    }

    /// Grows vdev `vdev`'s group to `count` metaslabs (autoexpand).
    pub fn grow_group(&mut self, vdev: u32, count: u64) {
        if let Some(g) = self.group_mut(vdev) {
            g.grow(count);
        }
    }

    /// Stops (or resumes) allocation on a vdev (being removed, faulted,
    /// or added and not yet durable).
    pub fn set_disabled(&mut self, vdev: u32, disabled: bool) {
        if let Some(g) = self.group_mut(vdev) {
            g.disabled = disabled;
        }
    }

    /// Bytes allocated on a vdev, frees not yet durable included.
    pub fn group_allocated(&self, vdev: u32) -> Option<u64> {
        self.groups
            .iter()
            .find(|g| g.vdev == vdev)
            .map(MetaslabGroup::allocated)
    }

    fn record(&mut self, txg: u64, dva: Dva, free: bool) {
        self.txgs
            .entry(txg)
            .or_default()
            .entries
            .push(SpaceMapEntry {
                vdev: dva.vdev,
                offset: dva.offset,
                len: dva.asize(),
                free,
            });
    }

    /// Takes back an allocation made in `txg` that was never written.
    fn unalloc(&mut self, txg: u64, dva: &Dva) {
        let rec = self.txgs.get_mut(&txg).expect("allocation recorded");
        let pos = rec
            .entries
            .iter()
            .rposition(|e| !e.free && e.vdev == dva.vdev && e.offset == dva.offset)
            .expect("allocation recorded");
        rec.entries.remove(pos);
        let g = self.group_mut(dva.vdev).expect("vdev exists");
        g.release(dva.offset, dva.asize())
            .expect("unalloc of a fresh allocation");
    }

    /// Allocates one intent-log block of `psize` bytes in `txg`: on a log
    /// vdev (a SLOG) if the pool has one with room, else low on a data
    /// vdev (`Group::alloc_low`), trying the data vdevs in `prefer` first
    /// (the caller's fastest first; see `crate::throttle`).
    pub fn alloc_log(&mut self, txg: u64, psize: u64, prefer: &[u32]) -> Result<Dva, AllocError> {
        let slog = |g: &MetaslabGroup| g.class == VdevClass::Log;
        let data = |g: &MetaslabGroup| g.class == VdevClass::Normal;
        let on_data = |this: &mut Self| {
            prefer
                .iter()
                .find_map(|&v| this.alloc_low_in(psize, |g| data(g) && g.vdev == v))
                .or_else(|| this.alloc_low_in(psize, data))
        };
        let (dva, on_slog) = match self.alloc_low_in(psize, slog) {
            Some(dva) => (dva, true),
            None => (on_data(self).ok_or(AllocError::NoSpace)?, false),
        };
        self.record(txg, dva, false);
        if on_slog {
            self.txgs.entry(txg).or_default().log_bytes += dva.asize();
        }
        Ok(dva)
    }

    /// `Group::alloc_low` on the first enabled group `pick` accepts that
    /// has room.
    fn alloc_low_in(&mut self, psize: u64, pick: impl Fn(&MetaslabGroup) -> bool) -> Option<Dva> {
        self.groups
            .iter_mut()
            .filter(|g| !g.disabled && pick(g))
            .find_map(|g| {
                let asize = g.asize(psize);
                let offset = g.alloc_low(asize)?;
                Some(Dva {
                    vdev: g.vdev,
                    asize_sectors: (asize >> 9) as u32,
                    offset,
                })
            })
    }

    /// Allocates, in `txg`, the free space that directly follows `dva` on
    /// its vdev, up to `max` bytes and within one metaslab; `None` if
    /// there is none. For a moment only: [`Allocator::unreserve`] gives it
    /// back in the same txg (see `Spa::log_alloc`).
    pub fn reserve_following(&mut self, txg: u64, dva: &Dva, max: u64) -> Option<Dva> {
        let g = self.group_mut(dva.vdev)?;
        let offset = dva.offset + dva.asize();
        // A DVA counts its size in 512-byte sectors, in a u32.
        let len = g.take_following(offset, max.min(u64::from(u32::MAX) << 9));
        if len == 0 {
            return None;
        }
        let r = Dva {
            vdev: dva.vdev,
            asize_sectors: (len >> 9) as u32,
            offset,
        };
        self.record(txg, r, false);
        Some(r)
    }

    /// Undoes [`Allocator::reserve_following`] in the txg it was made in,
    /// which must still be open.
    pub fn unreserve(&mut self, txg: u64, dva: &Dva) {
        self.unalloc(txg, dva);
    }

    /// Claims an intent-log block found at import (ZFS's `zil_claim`): a
    /// block written after the last committed txg is not in the space
    /// maps, so it is allocated here, in `txg`, before anything else can
    /// be. `Ok(false)`: it was allocated already. An error: the range is
    /// partly free or outside the vdevs, so it is no valid log block.
    pub fn claim_log(&mut self, txg: u64, dva: &Dva) -> Result<bool, String> {
        if dva.is_empty() {
            return Err("empty log block pointer".into());
        }
        if self.check_allocated(dva).is_ok() {
            return Ok(false);
        }
        let g = self
            .group_mut(dva.vdev)
            .ok_or_else(|| format!("vdev {} does not exist", dva.vdev))?;
        let ms_end = g
            .metaslab_of(dva.offset)
            .map(|i| g.metaslabs[i].start + g.metaslabs[i].size)
            .ok_or_else(|| "offset beyond the last metaslab".to_string())?;
        if dva.offset + dva.asize() > ms_end {
            return Err("range crosses a metaslab boundary".into());
        }
        g.claim(dva.offset, dva.asize())?;
        self.record(txg, *dva, false);
        Ok(true)
    }

    /// Frees a DVA in `txg`; the space is reusable after `txg` is durable.
    ///
    /// A DVA that names no vdev, lies outside the metaslabs or overlaps
    /// free space can only come from damaged metadata (its parent's
    /// checksum passed, so from a bug that wrote it): it is reported and
    /// leaked rather than freed, so that nothing live is ever handed out
    /// twice.
    pub fn free(&mut self, txg: u64, dva: &Dva) {
        assert!(!dva.is_empty());
        if let Err(why) = self.check_allocated(dva) {
            eprintln!("tarn: not freeing {dva:?} in txg {txg}: {why}; space leaked");
            return;
        }
        self.record(txg, *dva, true);
        self.txgs
            .entry(txg)
            .or_default()
            .frees
            .push((dva.vdev, dva.offset, dva.asize()));
        if let Some(g) = self.group_mut(dva.vdev) {
            g.freeing += dva.asize();
            g.freeing_ranges.add(dva.offset, dva.asize());
        }
    }

    /// Is `dva` allocated space of an existing vdev (not free, not being
    /// freed)?
    fn check_allocated(&self, dva: &Dva) -> Result<(), String> {
        let g = self
            .groups
            .iter()
            .find(|g| g.vdev == dva.vdev)
            .ok_or_else(|| format!("vdev {} does not exist", dva.vdev))?;
        let i = g
            .metaslab_of(dva.offset)
            .ok_or_else(|| "offset beyond the last metaslab".to_string())?;
        let ms = &g.metaslabs[i];
        if dva.offset + dva.asize() > ms.start + ms.size {
            return Err("range crosses a metaslab boundary".into());
        }
        if ms.free.overlaps(dva.offset, dva.asize()) {
            return Err("range is already free".into());
        }
        if g.freeing_ranges.overlaps(dva.offset, dva.asize()) {
            return Err("range is already being freed".into());
        }
        Ok(())
    }

    /// The space map entries of `txg`, in the order they happened.
    pub fn txg_entries(&self, txg: u64) -> &[SpaceMapEntry] {
        self.txgs
            .get(&txg)
            .map(|r| r.entries.as_slice())
            .unwrap_or(&[])
    }

    /// `txg` is durable: its frees become allocatable — unless a scan
    /// holds frees, in which case they wait for [`Allocator::release_frees`].
    pub fn txg_synced(&mut self, txg: u64) {
        self.synced = self.synced.max(txg);
        if self.free_holds == 0 {
            self.release_synced(txg);
        }
    }

    /// A scan is about to read blocks of the committed state: until the
    /// matching [`Allocator::release_frees`], no space freed by a later
    /// txg is handed out again, so no block it read can be overwritten
    /// under it (a scrub "repairing" a block that was freed and reused
    /// would write old bytes over new ones).
    pub fn hold_frees(&mut self) {
        self.free_holds += 1;
    }

    pub fn release_frees(&mut self) {
        self.free_holds = self.free_holds.saturating_sub(1);
        if self.free_holds == 0 {
            self.release_synced(self.synced);
        }
    }

    fn release_synced(&mut self, txg: u64) {
        let done: Vec<u64> = self.txgs.range(..=txg).map(|(&t, _)| t).collect();
        for t in done {
            let rec = self.txgs.remove(&t).expect("present");
            for (vdev, off, len) in rec.frees {
                let g = self.group_mut(vdev).expect("vdev exists");
                g.freeing -= len;
                g.freeing_ranges.remove(off, len);
                g.release(off, len)
                    .expect("deferred free of allocated space");
            }
        }
    }

    /// Applies one replayed space map entry at import. An entry may span
    /// several metaslabs (a condensed base lists runs of allocated space;
    /// older versions did not cut them at metaslab boundaries): each
    /// metaslab's piece is applied to it.
    pub fn replay(&mut self, e: &SpaceMapEntry) -> Result<(), String> {
        let g = self
            .group_mut(e.vdev)
            .ok_or_else(|| format!("space map names unknown vdev {}", e.vdev))?;
        let ms_size = g.metaslabs.first().map_or(u64::MAX, |m| m.size);
        let end = e
            .offset
            .checked_add(e.len)
            .ok_or_else(|| format!("entry {:#x}+{:#x} overflows", e.offset, e.len))?;
        let mut at = e.offset;
        while at < end {
            let piece = (end - at).min(ms_size - at % ms_size);
            if e.free {
                g.release(at, piece)?;
            } else {
                g.claim(at, piece)?;
            }
            at += piece;
        }
        Ok(())
    }

    /// Every range allocated in the on-disk state after the pending txgs:
    /// not free and not being freed.
    pub fn allocated_ranges(&self) -> Vec<SpaceMapEntry> {
        self.allocated_ranges_at(u64::MAX)
    }

    /// Every range allocated in the state of `txg` (what a base condensed
    /// at `txg` must list): the state after every pending txg, with the
    /// allocations and frees of txgs after `txg` undone, newest first.
    /// While `txg` syncs, the open txg already allocates (intent-log
    /// blocks) and frees (a destroyed dataset); its delta, replayed on the
    /// base after a crash, must find exactly the state before it.
    pub fn allocated_ranges_at(&self, txg: u64) -> Vec<SpaceMapEntry> {
        let mut out = Vec::new();
        let later: Vec<&SpaceMapEntry> = self
            .txgs
            .range(txg.saturating_add(1)..)
            .rev()
            .flat_map(|(_, r)| r.entries.iter().rev())
            .collect();
        for g in &self.groups {
            let mut unalloc = RangeTree::new();
            for ms in &g.metaslabs {
                for (s, l) in ms.free.iter() {
                    unalloc.add(s, l);
                }
            }
            for (off, len) in g.freeing_ranges.iter() {
                unalloc.add(off, len);
            }
            for e in later.iter().filter(|e| e.vdev == g.vdev) {
                if e.free {
                    unalloc.remove(e.offset, e.len);
                } else {
                    unalloc.add(e.offset, e.len);
                }
            }
            let mut pos = 0;
            let end = g.size();
            let ms_size = g.metaslabs.first().map_or(u64::MAX, |m| m.size);
            for (s, l) in unalloc.iter().chain(std::iter::once((end, 0))) {
                let mut at = pos;
                while at < s {
                    // Runs stop at metaslab boundaries: replay applies an
                    // entry to the metaslab it starts in.
                    let run = (s - at)
                        .min(u64::from(tarn_format::spacemap::SPACEMAP_RUN_MAX_SECTORS) << 9)
                        .min(ms_size - at % ms_size);
                    out.push(SpaceMapEntry {
                        vdev: g.vdev,
                        offset: at,
                        len: run,
                        free: false,
                    });
                    at += run;
                }
                pos = s + l;
            }
        }
        out
    }

    /// Whether the log blocks allocated in `txg` on log-class vdevs are
    /// as many bytes as the log space still free (`false` without log
    /// vdevs). Only `txg`'s sync frees its blocks, and while it syncs the
    /// next txg allocates at about the same pace: asking for the sync once
    /// the free space is no more than `txg` took leaves the next txg as
    /// much as `txg` had. With nothing else on the log that is half of
    /// it; blocks of a txg still syncing, or of a log not replayed yet,
    /// bring the moment forward, never to a txg with no blocks.
    pub fn log_txg_full(&self, txg: u64) -> bool {
        let (size, allocated) = self
            .groups
            .iter()
            .filter(|g| g.class == VdevClass::Log && !g.disabled)
            .fold((0, 0), |(s, a), g| (s + g.size(), a + g.allocated()));
        let own = self.txgs.get(&txg).map_or(0, |r| r.log_bytes);
        own > 0 && own >= size.saturating_sub(allocated)
    }

    /// Allocated bytes over normal-class vdevs (raw).
    pub fn normal_allocated(&self) -> u64 {
        self.groups
            .iter()
            .filter(|g| g.class == VdevClass::Normal)
            .map(MetaslabGroup::allocated)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(vdev: u32, count: u64) -> MetaslabGroup {
        MetaslabGroup::new(
            vdev,
            12,
            VdevClass::Normal,
            24,
            count,
            Box::new(|p: u64| p.next_multiple_of(4096)),
        )
    }

    #[test]
    fn copies_land_on_distinct_vdevs() {
        let mut a = Allocator::new(vec![group(0, 4), group(1, 4), group(2, 4)]);
        let d = a.alloc(1, 8192, 3).unwrap();
        let mut v: Vec<u32> = d.iter().map(|d| d.vdev).collect();
        v.sort();
        assert_eq!(v, vec![0, 1, 2]);
        // With one vdev, copies go to different offsets on it.
        let mut b = Allocator::new(vec![group(0, 4)]);
        let d = b.alloc(1, 8192, 2).unwrap();
        assert_ne!(d[0].offset, d[1].offset);
    }

    #[test]
    fn writes_spread_by_free_space() {
        // vdev 1 has twice the space of vdev 0: it should get about 2/3.
        let mut a = Allocator::new(vec![group(0, 40), group(1, 80)]);
        let mut per = [0u64; 2];
        for _ in 0..4000 {
            let d = a.alloc(1, 128 << 10, 1).unwrap();
            per[d[0].vdev as usize] += 1;
        }
        let share = per[1] as f64 / 4000.0;
        assert!((0.58..0.75).contains(&share), "share {share}");
    }

    #[test]
    fn frees_wait_for_their_txg() {
        let mut a = Allocator::new(vec![group(0, 1)]);
        let all = 16 << 20;
        let d = a.alloc(1, all, 1).unwrap();
        assert_eq!(a.alloc(1, 4096, 1), Err(AllocError::NoSpace));
        a.free(2, &d[0]);
        assert_eq!(a.alloc(2, 4096, 1), Err(AllocError::NoSpace));
        a.txg_synced(2);
        assert!(a.alloc(3, 4096, 1).is_ok());
    }

    #[test]
    fn a_scan_hold_keeps_synced_frees_until_released() {
        let mut a = Allocator::new(vec![group(0, 1)]);
        let d = a.alloc(1, 16 << 20, 1).unwrap();
        a.txg_synced(1);
        a.hold_frees();
        a.hold_frees();
        a.free(2, &d[0]);
        a.txg_synced(2);
        a.txg_synced(3);
        assert_eq!(a.alloc(4, 4096, 1), Err(AllocError::NoSpace), "held");
        a.release_frees();
        assert_eq!(a.alloc(4, 4096, 1), Err(AllocError::NoSpace), "one left");
        a.release_frees();
        assert!(a.alloc(4, 4096, 1).is_ok(), "released with the last hold");
    }

    #[test]
    fn failed_multi_copy_alloc_takes_nothing() {
        let mut a = Allocator::new(vec![group(0, 1)]);
        let before = a.groups[0].free();
        assert_eq!(a.alloc(1, 12 << 20, 2), Err(AllocError::NoSpace));
        assert_eq!(a.groups[0].free(), before);
        assert!(a.txg_entries(1).is_empty());
    }

    #[test]
    fn base_and_replay_reproduce_state() {
        let mut a = Allocator::new(vec![group(0, 4), group(1, 4)]);
        let mut live = Vec::new();
        for i in 0..500u64 {
            let d = a.alloc(1, 4096 * (1 + i % 7), 1).unwrap();
            live.push(d[0]);
        }
        for d in live.iter().step_by(3) {
            a.free(1, d);
        }
        let base = a.allocated_ranges();
        let mut b = Allocator::new(vec![group(0, 4), group(1, 4)]);
        for e in &base {
            b.replay(e).unwrap();
        }
        a.txg_synced(1);
        for (ga, gb) in a.groups.iter().zip(&b.groups) {
            assert_eq!(ga.free(), gb.free());
            for (ma, mb) in ga.metaslabs.iter().zip(&gb.metaslabs) {
                assert_eq!(ma.free, mb.free);
            }
        }
    }

    #[test]
    fn a_base_at_txg_leaves_later_txgs_to_their_delta() {
        // Txg 2 is condensed while txg 3 is open and already allocating
        // and freeing: the base must be txg 2's state, so that replaying
        // txg 3's entries on it is exact.
        let mut a = Allocator::new(vec![group(0, 4)]);
        let old = a.alloc(1, 8192, 1).unwrap()[0];
        let kept = a.alloc(1, 8192, 1).unwrap()[0];
        a.txg_synced(1);
        let two = a.alloc(2, 8192, 1).unwrap()[0];
        let three = a.alloc(3, 8192, 1).unwrap()[0];
        let brief = a.alloc(3, 4096, 1).unwrap()[0];
        a.free(3, &old);
        a.free(3, &brief);
        let base = a.allocated_ranges_at(2);
        let mut b = Allocator::new(vec![group(0, 4)]);
        for e in &base {
            b.replay(e).unwrap();
        }
        for d in [old, kept, two] {
            assert!(b.check_allocated(&d).is_ok(), "{d:?} missing from the base");
        }
        assert!(b.groups[0].metaslabs[0]
            .free
            .contains(three.offset, three.asize()));
        for e in a.txg_entries(3) {
            b.replay(e).unwrap();
        }
        a.txg_synced(3);
        assert_eq!(a.groups[0].free(), b.groups[0].free());
    }

    #[test]
    fn base_runs_stop_at_metaslab_boundaries() {
        // Fill metaslab 0 and part of 1: the allocated space is one run
        // on the vdev, but every base entry must lie in one metaslab.
        let mut a = Allocator::new(vec![group(0, 3)]);
        let ms = 1u64 << 24;
        while a.groups[0].allocated() < ms + (4 << 20) {
            a.alloc(1, 1 << 20, 1).unwrap();
        }
        let base = a.allocated_ranges();
        assert!(base
            .iter()
            .all(|e| e.offset / ms == (e.offset + e.len - 1) / ms));
        let mut b = Allocator::new(vec![group(0, 3)]);
        for e in &base {
            b.replay(e).unwrap();
        }
        assert_eq!(a.groups[0].free(), b.groups[0].free());
        // A spanning entry, as older versions wrote them, replays too.
        let mut c = Allocator::new(vec![group(0, 3)]);
        let span = SpaceMapEntry {
            vdev: 0,
            offset: 0,
            len: ms + (4 << 20),
            free: false,
        };
        c.replay(&span).unwrap();
        assert_eq!(c.groups[0].free(), b.groups[0].free());
    }

    #[test]
    fn freeing_damaged_dvas_leaks_instead_of_panicking() {
        let mut a = Allocator::new(vec![group(0, 2)]);
        let d = a.alloc(1, 8192, 1).unwrap()[0];
        a.txg_synced(1);
        let free_space = a.groups[0].free();
        // Unknown vdev, beyond the metaslabs, never allocated, double free.
        a.free(2, &Dva { vdev: 7, ..d });
        a.free(
            2,
            &Dva {
                offset: 1 << 40,
                ..d
            },
        );
        a.free(
            2,
            &Dva {
                offset: 1 << 20,
                ..d
            },
        );
        a.free(2, &d);
        a.free(2, &d);
        a.txg_synced(2);
        assert_eq!(a.groups[0].free(), free_space + 8192);
    }

    #[test]
    fn replay_rejects_inconsistent_maps() {
        let mut a = Allocator::new(vec![group(0, 1)]);
        let e = SpaceMapEntry {
            vdev: 0,
            offset: 0,
            len: 4096,
            free: false,
        };
        a.replay(&e).unwrap();
        assert!(a.replay(&e).is_err());
        let bad = SpaceMapEntry { vdev: 9, ..e };
        assert!(a.replay(&bad).is_err());
        let beyond = SpaceMapEntry {
            offset: 1 << 40,
            ..e
        };
        assert!(a.replay(&beyond).is_err());
    }
}
