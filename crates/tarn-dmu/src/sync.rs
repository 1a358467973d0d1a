//! Syncing an object set: turning one txg's dirty records into new blocks.
//!
//! `sync(txg)` runs in three steps (see `objset` for the states):
//! 1. **freeze** — under `txg_lock` (write) and `state`: take the open
//!    records, copy the dnodes they belong to, publish the records as the
//!    syncing txg. Short: no I/O. The pool's sync thread does this for
//!    every dataset the moment a txg's holders have drained, before the
//!    next txg opens (`freeze_txg`), so a txg holds exactly the changes
//!    made under its holds; `sync` then writes what was taken.
//! 2. **write** — no object lock held: write the dirty data blocks of
//!    every object as one batch through the store's parallel pipeline
//!    (compression, checksums and device writes overlap; allocation keeps
//!    batch order); then for each dirty object apply its frees, grow the
//!    tree if needed, point it at its new data blocks, then
//!    rewrite the touched indirect blocks bottom-up (recomputing fill and
//!    used bytes); then patch the touched dnode slots into copies of their
//!    dnode blocks and sync the meta-dnode the same way; then write the
//!    objset header. Old blocks are only *collected* here, because readers
//!    may still walk the old tree.
//! 3. **install** — under `state`: point the live dnodes, the meta-dnode
//!    and the root at the new tree, drop the syncing records, release freed
//!    object numbers; then hand every collected old block to the free hook.
//!
//! If step 2 fails (a full pool, a bad block), the blocks it wrote are
//! freed — nothing references them — and the frozen records are folded
//! back under the open ones, so a later sync retries the same changes.
//!
//! Invariant: a clean object's blocks are never rewritten; a block is
//! freed exactly once, when the pointer to it is replaced in a rewritten
//! parent (or the subtree under it is freed).

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tarn_format::dnode::{
    nlevels_for, DnodePhys, BLKPTRS_PER_INDIRECT, DNODES_PER_BLOCK, DNODE_BLOCK_SIZE, DNODE_SIZE,
    EPB_SHIFT, INDIRECT_BLOCK_SIZE, MAX_NLEVELS,
};
use tarn_format::objset::{ObjsetPhys, ObjsetType, ZIL_HEADER_SIZE};
use tarn_format::{BlockPtr, Compression, Corrupted, ObjType, BLKPTR_SIZE};
use tarn_pool::store::BlockWrite;

use crate::dirty::{Block, DirtyRecord};
use crate::error::Result;
use crate::objset::{Objset, WritePolicy};
use crate::tree::{decode_child, span_shift};

pub(crate) struct Frozen {
    objs: Vec<(u64, DnodePhys, bool)>,
    records: Arc<HashMap<u64, DirtyRecord>>,
    meta: DnodePhys,
    typ: ObjsetType,
    zil_header: [u8; ZIL_HEADER_SIZE],
    old_root: BlockPtr,
    policy: WritePolicy,
    /// Blocks written in open context that nothing uses (see
    /// `Objset::sync_block`), freed when this sync succeeds.
    orphans: Vec<BlockPtr>,
}

struct Written {
    dnodes: BTreeMap<u64, Option<DnodePhys>>,
    meta: DnodePhys,
    root: BlockPtr,
}

#[derive(Default)]
struct Effects {
    frees: Vec<BlockPtr>,
    written: Vec<BlockPtr>,
    /// Blocks no tree references, freed straight to the store on success.
    unreferenced: Vec<BlockPtr>,
    /// What was written, by its new pointer: cached at install, as the
    /// ARC keeps a block it wrote. The next txg's read-modify-write of the
    /// same record (a random overwrite, an append to a block) then finds
    /// it in memory instead of reading it back from the disk. True for a
    /// block a write streamed in whole (`DirtyRecord::streamed`), cached
    /// as written and not read (`BlockCache::insert_written`).
    cache: Vec<(BlockPtr, Block, bool)>,
}

impl Objset {
    /// Writes every change since the last sync with birth `txg` and
    /// returns the new header block pointer (type `Objset`). A clean
    /// object set returns its current root and writes nothing.
    ///
    /// If [`Objset::freeze_txg`] ran for `txg`, exactly what it took is
    /// written; otherwise everything dirty now is.
    pub fn sync(&self, txg: u64) -> Result<BlockPtr> {
        let _serial = self.sync_lock.lock();
        let taken = match self.prefrozen.lock().take() {
            Some((t, fz)) if t == txg => fz,
            Some((t, Some(_))) => panic!("objset frozen for txg {t}, synced as {txg}"),
            // A stale clean freeze (an earlier sync skipped this objset).
            Some((_, None)) | None => self.freeze(txg),
        };
        let Some(frozen) = taken else {
            return Ok(self.root_bp());
        };
        let mut eff = Effects {
            unreferenced: frozen.orphans.clone(),
            ..Effects::default()
        };
        match self.write_frozen(txg, &frozen, &mut eff) {
            Ok(w) => {
                let root = w.root;
                self.install(txg, w, eff);
                Ok(root)
            }
            Err(e) => {
                self.unfreeze(txg, frozen, eff);
                Err(e)
            }
        }
    }

    /// Takes the changes of `txg` now, for a later `sync(txg)`: called
    /// when the txg's holders have drained and before the next txg opens,
    /// so the sync writes exactly the changes made under holds of `txg`.
    /// No I/O.
    pub fn freeze_txg(&self, txg: u64) {
        let _serial = self.sync_lock.lock();
        let fz = self.freeze(txg);
        let mut pre = self.prefrozen.lock();
        // A clean freeze may be left over when the sync skipped this
        // objset; frozen changes never are (a failed sync suspends the
        // pool, and a suspended pool does not quiesce).
        assert!(
            !matches!(*pre, Some((_, Some(_)))),
            "objset frozen again before its changes were synced"
        );
        *pre = Some((txg, fz));
    }

    fn freeze(&self, txg: u64) -> Option<Frozen> {
        let _quiesce = self.txg_lock.write();
        let mut st = self.state.lock();
        assert!(
            txg > st.last_synced_txg,
            "sync of txg {txg} after {}",
            st.last_synced_txg
        );
        st.frozen_txg = st.frozen_txg.max(txg);
        if st.dirty.get_mut().is_empty()
            && !st.header_dirty
            && !st.root_bp.is_hole()
            && st.orphans.is_empty()
        {
            return None;
        }
        let orphans = std::mem::take(&mut st.orphans);
        let ids = std::mem::take(st.dirty.get_mut());
        let mut records = HashMap::with_capacity(ids.len());
        let mut objs: Vec<(u64, DnodePhys, bool)> = Vec::with_capacity(ids.len());
        for id in ids {
            let o = st.obj(id).expect("dirty objects stay loaded");
            let rec = o.open.take().expect("listed objects have a record");
            objs.push((id, o.dn.phys.clone(), o.dn.freed));
            records.insert(id, rec);
        }
        objs.sort_by_key(|o| o.0);
        let records = Arc::new(records);
        st.syncing = Some(records.clone());
        st.header_dirty = false;
        Some(Frozen {
            objs,
            records,
            meta: st.meta.clone(),
            typ: st.typ,
            zil_header: st.zil_header,
            old_root: st.root_bp,
            policy: st.policy,
            orphans,
        })
    }

    fn write_frozen(&self, txg: u64, fz: &Frozen, eff: &mut Effects) -> Result<Written> {
        let live: Vec<_> = fz.objs.iter().filter(|(_, _, freed)| !freed).collect();
        let jobs: Vec<Level0<'_>> = live
            .iter()
            .map(|(obj, phys, _)| Level0 {
                typ: phys.typ,
                rec: &fz.records[obj],
                fill: &|_| 1,
            })
            .collect();
        let mut data_bps = self.write_level0(txg, fz.policy, &jobs, eff)?.into_iter();
        let mut dnodes = BTreeMap::new();
        for (obj, phys, freed) in &fz.objs {
            let mut phys = phys.clone();
            let mut tb = TreeBuilder::new(self, txg, &phys, fz.policy, eff);
            if *freed {
                let overrides = fz.records[obj].overrides.values();
                tb.eff.unreferenced.extend(overrides.map(|(_, bp)| *bp));
                let root = tb.root;
                tb.free_subtree(&root)?;
                dnodes.insert(*obj, None);
                continue;
            }
            let bps = data_bps.next().expect("one job per live object");
            tb.sync_record(&fz.records[obj], phys.maxblkid, &bps)?;
            tb.store_into(&mut phys);
            dnodes.insert(*obj, Some(phys));
        }
        let meta_rec = self.dnode_blocks(&fz.meta, &dnodes)?;
        let mut meta = fz.meta.clone();
        if let Some((&last, _)) = meta_rec.blocks.iter().next_back() {
            meta.maxblkid = meta.maxblkid.max(last);
        }
        let job = Level0 {
            typ: meta.typ,
            rec: &meta_rec,
            fill: &dnode_block_fill,
        };
        let bps = self.write_level0(txg, fz.policy, &[job], eff)?;
        let mut tb = TreeBuilder::new(self, txg, &meta, fz.policy, eff);
        tb.sync_record(&meta_rec, meta.maxblkid, &bps[0])?;
        tb.store_into(&mut meta);
        let root = self.write_header(txg, fz, &meta, eff)?;
        Ok(Written { dnodes, meta, root })
    }

    /// Writes the dirty data blocks of every job as one batch through the
    /// store's parallel pipeline (`BlockStore::write_batch`), in job then
    /// block id order, so a txg's records land in file order on disk.
    /// Returns, per job, one pointer per block of its record (a hole for
    /// an all-zero block, as ZFS does when compression is on).
    fn write_level0(
        &self,
        txg: u64,
        policy: WritePolicy,
        jobs: &[Level0<'_>],
        eff: &mut Effects,
    ) -> Result<Vec<Vec<BlockPtr>>> {
        let mut batch = Vec::new();
        let mut blocks: Vec<(&Block, bool)> = Vec::new();
        let mut slots: Vec<Vec<Slot>> = Vec::with_capacity(jobs.len());
        for job in jobs {
            let mut js = Vec::with_capacity(job.rec.blocks.len());
            for (blkid, data) in &job.rec.blocks {
                // Written already by `sync_block`, and unchanged since.
                if let Some((_, bp)) = job
                    .rec
                    .overrides
                    .get(blkid)
                    .filter(|(b, _)| Arc::ptr_eq(b, data))
                {
                    js.push(Slot::Done(*bp));
                    continue;
                }
                let props = policy.props(job.typ, 0, (job.fill)(data));
                if props.compression != Compression::Off && crate::dirty::is_zero(data) {
                    js.push(Slot::Done(BlockPtr::HOLE)); // zero blocks are holes, as ZFS does
                    continue;
                }
                js.push(Slot::Batch(batch.len()));
                batch.push(BlockWrite { data, props });
                blocks.push((data, job.rec.streamed.contains(blkid)));
            }
            for (blkid, (data, bp)) in &job.rec.overrides {
                if !job
                    .rec
                    .blocks
                    .get(blkid)
                    .is_some_and(|b| Arc::ptr_eq(b, data))
                {
                    eff.unreferenced.push(*bp);
                }
            }
            slots.push(js);
        }
        let written = self.store.write_batch(txg, &batch)?;
        assert_eq!(written.len(), batch.len(), "one pointer per block");
        eff.written.extend_from_slice(&written);
        eff.cache.extend(
            written
                .iter()
                .zip(blocks)
                .map(|(bp, (b, streamed))| (*bp, b.clone(), streamed)),
        );
        Ok(slots
            .into_iter()
            .map(|js| {
                js.into_iter()
                    .map(|s| match s {
                        Slot::Done(bp) => bp,
                        Slot::Batch(i) => written[i],
                    })
                    .collect()
            })
            .collect())
    }

    fn write_header(
        &self,
        txg: u64,
        fz: &Frozen,
        meta: &DnodePhys,
        eff: &mut Effects,
    ) -> Result<BlockPtr> {
        let phys = ObjsetPhys {
            typ: fz.typ,
            meta_dnode: meta.clone(),
            zil_header: fz.zil_header,
        };
        let fill = if meta.root.is_hole() {
            0
        } else {
            meta.root.fill
        };
        let root = self.store.write(
            txg,
            &phys.encode(),
            &fz.policy.props(ObjType::Objset, 0, fill),
        )?;
        eff.written.push(root);
        if !fz.old_root.is_hole() {
            eff.frees.push(fz.old_root);
        }
        Ok(root)
    }

    /// Copies of the dnode blocks holding `dnodes`, with their slots patched.
    fn dnode_blocks(
        &self,
        meta: &DnodePhys,
        dnodes: &BTreeMap<u64, Option<DnodePhys>>,
    ) -> Result<DirtyRecord> {
        let mut rec = DirtyRecord::default();
        for (obj, phys) in dnodes {
            let blkid = obj / DNODES_PER_BLOCK;
            let block = match rec.blocks.entry(blkid) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(v) => v.insert(Arc::new(self.synced_dnode_block(meta, blkid)?)),
            };
            let block = Arc::make_mut(block);
            let off = (obj % DNODES_PER_BLOCK) as usize * DNODE_SIZE;
            DnodePhys::encode_slot(phys.as_ref(), &mut block[off..off + DNODE_SIZE]);
        }
        Ok(rec)
    }

    fn synced_dnode_block(&self, meta: &DnodePhys, blkid: u64) -> Result<Vec<u8>> {
        let bp = if blkid > meta.maxblkid {
            BlockPtr::HOLE
        } else {
            self.tree_lookup(&meta.root, meta.nlevels, blkid)?
        };
        if bp.is_hole() {
            return Ok(vec![0; DNODE_BLOCK_SIZE]);
        }
        let data = self.read_bp(&bp)?;
        if data.len() != DNODE_BLOCK_SIZE {
            return Err(Corrupted::new("dnode block", format!("{} bytes", data.len())).into());
        }
        Ok(data.to_vec())
    }

    fn install(&self, txg: u64, w: Written, eff: Effects) {
        let mut st = self.state.lock();
        for (obj, phys) in w.dnodes {
            match phys {
                None => {
                    if let Some(cell) = st.objs.remove(&obj) {
                        assert!(
                            cell.into_inner().open.is_none(),
                            "object {obj} freed by this sync is dirty in the open txg"
                        );
                    }
                    st.free_nums.insert(obj);
                }
                Some(p) => {
                    let dn = &mut st.obj(obj).expect("dirty dnodes stay loaded").dn;
                    dn.phys.root = p.root;
                    dn.phys.nlevels = p.nlevels;
                    dn.phys.used_bytes = p.used_bytes;
                }
            }
        }
        st.meta = w.meta;
        st.root_bp = w.root;
        st.syncing = None;
        st.last_synced_txg = txg;
        drop(st);
        // No new reader can reach the old tree now (pointers are resolved
        // under `state`); wait for those that resolved one before.
        self.tree.retire();
        for bp in &eff.frees {
            self.free_block(txg, bp);
        }
        for bp in &eff.unreferenced {
            self.store.free(txg, bp);
        }
        // Only now: a failed sync frees what it wrote, and a retry may
        // put a block of the same birth at the same place.
        for (bp, data, streamed) in eff.cache {
            if streamed {
                self.cache.insert_written(&bp, data);
            } else {
                self.cache.insert(&bp, data);
            }
        }
    }

    fn unfreeze(&self, txg: u64, fz: Frozen, eff: Effects) {
        for bp in &eff.written {
            self.store.free(txg, bp);
        }
        let mut st = self.state.lock();
        st.syncing = None;
        st.orphans.extend(fz.orphans);
        let records = Arc::try_unwrap(fz.records).unwrap_or_else(|a| (*a).clone());
        for (obj, mut rec) in records {
            let newer = st.open_rec(obj);
            rec.absorb(std::mem::take(newer));
            *newer = rec;
        }
        st.header_dirty = true;
    }
}

/// Where `write_level0` gets one block's pointer.
enum Slot {
    /// Known without writing: a hole, or a block `sync_block` wrote.
    Done(BlockPtr),
    /// The block at this index of the batch.
    Batch(usize),
}

/// The dirty data blocks of one object, for `write_level0`.
struct Level0<'a> {
    typ: ObjType,
    rec: &'a DirtyRecord,
    fill: &'a dyn Fn(&[u8]) -> u64,
}

fn dnode_block_fill(block: &[u8]) -> u64 {
    block.chunks_exact(DNODE_SIZE).filter(|s| s[0] != 0).count() as u64
}

/// Rewrites one object's block tree. `dirty` holds decoded copies of the
/// indirect blocks being changed, keyed by `(level, idx)`.
struct TreeBuilder<'a> {
    os: &'a Objset,
    txg: u64,
    typ: ObjType,
    policy: WritePolicy,
    root: BlockPtr,
    nlevels: u8,
    used: u64,
    dirty: BTreeMap<(u8, u64), Vec<BlockPtr>>,
    eff: &'a mut Effects,
}

impl<'a> TreeBuilder<'a> {
    fn new(
        os: &'a Objset,
        txg: u64,
        phys: &DnodePhys,
        policy: WritePolicy,
        eff: &'a mut Effects,
    ) -> Self {
        TreeBuilder {
            os,
            txg,
            typ: phys.typ,
            policy,
            root: phys.root,
            nlevels: phys.nlevels,
            used: phys.used_bytes,
            dirty: BTreeMap::new(),
            eff,
        }
    }

    fn store_into(&self, phys: &mut DnodePhys) {
        assert!(self.dirty.is_empty(), "indirect blocks left unwritten");
        phys.root = self.root;
        phys.nlevels = self.nlevels;
        phys.used_bytes = self.used;
    }

    /// Applies one record: its frees, then its data blocks, already
    /// written as `bps` (one per block of `rec.blocks`, in order).
    fn sync_record(&mut self, rec: &DirtyRecord, maxblkid: u64, bps: &[BlockPtr]) -> Result<()> {
        assert_eq!(bps.len(), rec.blocks.len());
        for (lo, hi) in rec.frees.iter() {
            let top = (self.nlevels - 1, 0);
            self.free_walk(top, lo, hi)?;
        }
        let last = rec
            .blocks
            .keys()
            .next_back()
            .copied()
            .unwrap_or(0)
            .max(maxblkid);
        self.grow_to(nlevels_for(last));
        for (&blkid, bp) in rec.blocks.keys().zip(bps) {
            self.replace(0, blkid, *bp)?;
        }
        self.finish()
    }

    /// The pointer to block `(level, idx)` as the rewritten tree has it now.
    fn bp_at(&self, level: u8, idx: u64) -> Result<BlockPtr> {
        if level == self.nlevels - 1 {
            return Ok(if idx == 0 { self.root } else { BlockPtr::HOLE });
        }
        let (pidx, slot) = (idx >> EPB_SHIFT, idx & (BLKPTRS_PER_INDIRECT - 1));
        if let Some(v) = self.dirty.get(&(level + 1, pidx)) {
            return Ok(v[slot as usize]);
        }
        let parent = self.bp_at(level + 1, pidx)?;
        if parent.is_hole() {
            return Ok(BlockPtr::HOLE);
        }
        self.os.child_of(&parent, slot, level)
    }

    /// A decoded, modifiable copy of indirect block `(level, idx)`.
    fn ind_mut(&mut self, level: u8, idx: u64) -> Result<&mut Vec<BlockPtr>> {
        if !self.dirty.contains_key(&(level, idx)) {
            let bp = self.bp_at(level, idx)?;
            let v = self.decode_indirect(&bp, level)?;
            self.dirty.insert((level, idx), v);
        }
        Ok(self.dirty.get_mut(&(level, idx)).expect("inserted"))
    }

    fn decode_indirect(&self, bp: &BlockPtr, level: u8) -> Result<Vec<BlockPtr>> {
        if bp.is_hole() {
            return Ok(vec![BlockPtr::HOLE; BLKPTRS_PER_INDIRECT as usize]);
        }
        let data = self.os.read_bp(bp)?;
        if data.len() != INDIRECT_BLOCK_SIZE {
            return Err(Corrupted::new("indirect block", format!("{} bytes", data.len())).into());
        }
        (0..BLKPTRS_PER_INDIRECT)
            .map(|s| decode_child(&data, s, level - 1))
            .collect()
    }

    /// Points the parent slot of `(level, idx)` at `bp`; returns the old one.
    fn set(&mut self, level: u8, idx: u64, bp: BlockPtr) -> Result<BlockPtr> {
        if level == self.nlevels - 1 {
            assert_eq!(idx, 0, "second block at the root level");
            return Ok(std::mem::replace(&mut self.root, bp));
        }
        let slot = (idx & (BLKPTRS_PER_INDIRECT - 1)) as usize;
        let parent = self.ind_mut(level + 1, idx >> EPB_SHIFT)?;
        Ok(std::mem::replace(&mut parent[slot], bp))
    }

    /// `set`, releasing the replaced block and accounting the new one.
    fn replace(&mut self, level: u8, idx: u64, bp: BlockPtr) -> Result<()> {
        let old = self.set(level, idx, bp)?;
        if !old.is_hole() {
            self.release(old);
        }
        self.used += bp.asize();
        Ok(())
    }

    fn release(&mut self, bp: BlockPtr) {
        self.used = self.used.saturating_sub(bp.asize());
        self.eff.frees.push(bp);
    }

    fn free_subtree(&mut self, bp: &BlockPtr) -> Result<()> {
        if bp.is_hole() {
            return Ok(());
        }
        if bp.level > 0 {
            for slot in 0..BLKPTRS_PER_INDIRECT {
                let child = self.os.child_of(bp, slot, bp.level - 1)?;
                self.free_subtree(&child)?;
            }
        }
        self.release(*bp);
        Ok(())
    }

    /// Frees data block ids `lo..hi` beneath block `(level, idx)`.
    fn free_walk(&mut self, (level, idx): (u8, u64), lo: u64, hi: u64) -> Result<()> {
        let start = u128::from(idx) << span_shift(level);
        let end = (u128::from(idx) + 1) << span_shift(level);
        let (lo, hi) = (u128::from(lo).max(start), u128::from(hi).min(end));
        if lo >= hi {
            return Ok(());
        }
        let copy = self.dirty.contains_key(&(level, idx));
        if !copy && self.bp_at(level, idx)?.is_hole() {
            return Ok(());
        }
        if lo == start && hi == end {
            return self.free_whole(level, idx);
        }
        assert!(level > 0, "a data block is either inside a range or not");
        let child_span = span_shift(level - 1);
        let (first, last) = ((lo - start) >> child_span, (hi - 1 - start) >> child_span);
        for slot in first as u64..=last as u64 {
            let child = (idx << EPB_SHIFT) | slot;
            self.free_walk(
                (level - 1, child),
                lo as u64,
                hi.min(u128::from(u64::MAX)) as u64,
            )?;
        }
        Ok(())
    }

    fn free_whole(&mut self, level: u8, idx: u64) -> Result<()> {
        let copy = self.dirty.remove(&(level, idx));
        let old = self.set(level, idx, BlockPtr::HOLE)?;
        match copy {
            Some(children) => {
                for c in children.iter().filter(|c| !c.is_hole()) {
                    self.free_subtree(c)?;
                }
                if !old.is_hole() {
                    self.release(old);
                }
            }
            None => self.free_subtree(&old)?,
        }
        Ok(())
    }

    /// Adds levels on top until the tree has `need` levels; the old root
    /// moves (unchanged) to slot 0 of the new root.
    fn grow_to(&mut self, need: u8) {
        assert!(need <= MAX_NLEVELS, "tree of {need} levels");
        while self.nlevels < need {
            if !self.root.is_hole() || self.dirty.contains_key(&(self.nlevels - 1, 0)) {
                let mut v = vec![BlockPtr::HOLE; BLKPTRS_PER_INDIRECT as usize];
                v[0] = std::mem::replace(&mut self.root, BlockPtr::HOLE);
                self.dirty.insert((self.nlevels, 0), v);
            }
            self.nlevels += 1;
        }
    }

    /// Writes the changed indirect blocks bottom-up; a block whose children
    /// are all holes becomes a hole.
    fn finish(&mut self) -> Result<()> {
        for level in 1..self.nlevels {
            let idxs: Vec<u64> = self
                .dirty
                .range((level, 0)..=(level, u64::MAX))
                .map(|(k, _)| k.1)
                .collect();
            for idx in idxs {
                let children = self.dirty.remove(&(level, idx)).expect("listed");
                let bp = self.write_indirect(level, &children)?;
                self.replace(level, idx, bp)?;
            }
        }
        Ok(())
    }

    fn write_indirect(&mut self, level: u8, children: &[BlockPtr]) -> Result<BlockPtr> {
        let fill: u64 = children.iter().map(|c| c.fill).sum();
        if children.iter().all(BlockPtr::is_hole) {
            return Ok(BlockPtr::HOLE);
        }
        let mut buf = vec![0u8; INDIRECT_BLOCK_SIZE];
        for (i, c) in children.iter().enumerate().filter(|(_, c)| !c.is_hole()) {
            buf[i * BLKPTR_SIZE..(i + 1) * BLKPTR_SIZE].copy_from_slice(&c.encode());
        }
        let props = self.policy.props(self.typ, level, fill);
        let bp = self.os.store.write(self.txg, &buf, &props)?;
        self.eff.written.push(bp);
        self.eff.cache.push((bp, Arc::new(buf), false));
        Ok(bp)
    }
}
