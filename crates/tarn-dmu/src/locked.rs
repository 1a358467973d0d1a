//! The objset with its state lock held: block-level access for one
//! operation (a public call or one ZAP operation), atomic with respect to
//! the sync freeze.
//!
//! A block is found in the open record, then the syncing record, then the
//! synced tree (see `objset`). `modify_block` always lands the change in
//! the open record, copying the current contents in first unless the
//! caller overwrites the whole block.

use std::sync::Arc;

use tarn_format::dnode::{
    max_blkid_for, DnodePhys, DNODES_PER_BLOCK, DNODE_BONUS_SIZE, DNODE_SIZE, MAX_NLEVELS,
};
use tarn_format::{BlockPtr, ObjType};

use crate::dirty::Block;
use crate::dirty::DirtyRecord;
use crate::error::{DmuError, Result};
use crate::objset::{check_block_size, open_of, Dnode, Obj, Objset, State};
use parking_lot::Mutex;

pub(crate) struct Locked<'a> {
    pub os: &'a Objset,
    pub st: crate::brlock::BrWrite<'a, State>,
    /// Bytes of data blocks this operation made dirty in the open txg
    /// that were not dirty there before: the memory it added to the txg
    /// (OpenZFS charges a dbuf's whole size when it is first dirtied).
    pub newly_dirty: u64,
}

/// Where a block's current contents come from.
pub(crate) enum Source {
    Dirty(Block),
    Hole,
    Tree(BlockPtr),
}

impl<'a> Locked<'a> {
    pub fn new(os: &'a Objset, st: crate::brlock::BrWrite<'a, State>) -> Self {
        Locked {
            os,
            st,
            newly_dirty: 0,
        }
    }

    // ------------------------------------------------------------ dnodes

    /// The live dnode of `obj`, loading it from its dnode block if needed.
    pub fn dnode(&mut self, obj: u64) -> Result<&Dnode> {
        Ok(self.dnode_mut(obj)?)
    }

    pub fn dnode_mut(&mut self, obj: u64) -> Result<&mut Dnode> {
        if obj == 0 {
            return Err(DmuError::NoSuchObject(0));
        }
        if !self.st.is_loaded(obj) {
            let phys = self.synced_dnode(obj)?.ok_or(DmuError::NoSuchObject(obj))?;
            self.st.put_obj(obj, Dnode { phys, freed: false }, false);
        }
        let dn = &mut self.st.obj(obj).expect("just loaded").dn;
        if dn.freed {
            return Err(DmuError::NoSuchObject(obj));
        }
        Ok(dn)
    }

    /// The dnode of `obj` as of the last sync (`None` = free slot).
    fn synced_dnode(&self, obj: u64) -> Result<Option<DnodePhys>> {
        let meta = &self.st.meta;
        let blkid = obj / DNODES_PER_BLOCK;
        if blkid > meta.maxblkid {
            return Ok(None);
        }
        let bp = self.os.tree_lookup(&meta.root, meta.nlevels, blkid)?;
        if bp.is_hole() {
            return Ok(None);
        }
        let block = self.os.read_bp(&bp)?;
        let off = (obj % DNODES_PER_BLOCK) as usize * DNODE_SIZE;
        let slot = block.get(off..off + DNODE_SIZE).ok_or_else(|| {
            tarn_format::Corrupted::new("dnode block", format!("{} bytes", block.len()))
        })?;
        Ok(DnodePhys::decode(slot)?)
    }

    /// The lowest object number that is free now and was free at the last
    /// sync (numbers freed in a txg become reusable after it syncs).
    pub fn alloc_object_number(&mut self) -> Result<u64> {
        while let Some(n) = self.st.free_nums.pop_first() {
            if self.number_is_free(n)? {
                return Ok(n);
            }
        }
        loop {
            let n = self.st.scan_next;
            if max_blkid_for(MAX_NLEVELS, tarn_format::dnode::DNODE_BLOCK_SIZE as u32)
                < n / DNODES_PER_BLOCK
            {
                return Err(DmuError::TooBig("object number space exhausted"));
            }
            self.st.scan_next += 1;
            if self.number_is_free(n)? {
                return Ok(n);
            }
        }
    }

    pub fn create_object(
        &mut self,
        typ: ObjType,
        block_size: u32,
        bonus_len: usize,
    ) -> Result<u64> {
        check_new_object(typ, block_size, bonus_len)?;
        let obj = self.alloc_object_number()?;
        let mut phys = DnodePhys::new(typ, block_size);
        phys.bonus = vec![0; bonus_len];
        self.st.put_obj(obj, Dnode { phys, freed: false }, true);
        Ok(obj)
    }

    /// Creates an empty object at number `obj` (ZFS's `dmu_object_claim`,
    /// for intent log replay). The number must be free, or belong to an
    /// object freed in the open txg: that one is re-created in place. Its
    /// open record already frees every block of the old tree (see
    /// `Objset::object_free`) and a sync applies frees before writes, so
    /// the new object keeps the old tree's root, height and used bytes
    /// for that sync to free; nothing of the old object is visible. A
    /// number freed in an earlier txg that has not synced yet is still in
    /// use (its freed dnode belongs to that sync).
    pub fn claim_object(
        &mut self,
        obj: u64,
        typ: ObjType,
        block_size: u32,
        bonus_len: usize,
    ) -> Result<()> {
        check_new_object(typ, block_size, bonus_len)?;
        let max_blkid = max_blkid_for(MAX_NLEVELS, tarn_format::dnode::DNODE_BLOCK_SIZE as u32);
        if obj == 0 || obj / DNODES_PER_BLOCK > max_blkid {
            return Err(DmuError::InvalidArgument("object number"));
        }
        let mut phys = DnodePhys::new(typ, block_size);
        phys.bonus = vec![0; bonus_len];
        let old = self.st.obj(obj).map(|o| {
            let freed_now = o.dn.freed && o.open.is_some();
            (
                freed_now,
                o.dn.phys.root,
                o.dn.phys.nlevels,
                o.dn.phys.used_bytes,
            )
        });
        match old {
            Some((true, root, nlevels, used_bytes)) => {
                phys.root = root;
                phys.nlevels = nlevels;
                phys.used_bytes = used_bytes;
            }
            Some(_) => return Err(DmuError::ObjectInUse(obj)),
            None if self.synced_dnode(obj)?.is_some() => return Err(DmuError::ObjectInUse(obj)),
            None => {}
        }
        self.st.put_obj(obj, Dnode { phys, freed: false }, true);
        Ok(())
    }

    fn number_is_free(&self, n: u64) -> Result<bool> {
        Ok(!self.st.is_loaded(n) && self.synced_dnode(n)?.is_none())
    }

    // ------------------------------------------------------------ blocks

    /// Object `obj` (loaded, not freed) for the per-object operations of
    /// [`ObjMut`], with the state held alone.
    pub fn om(&mut self, obj: u64) -> Result<ObjMut<'_>> {
        self.dnode(obj)?;
        let State {
            objs,
            dirty,
            syncing,
            ..
        } = &mut *self.st;
        Ok(ObjMut {
            os: self.os,
            id: obj,
            o: objs.get_mut(&obj).expect("just loaded").get_mut(),
            syncing: syncing.as_ref().and_then(|s| s.get(&obj)),
            dirty,
            newly_dirty: &mut self.newly_dirty,
        })
    }

    /// Current contents of a data block (`None` = hole).
    pub fn read_block(&mut self, obj: u64, blkid: u64) -> Result<Option<Block>> {
        self.om(obj)?.read_block(blkid)
    }

    /// See [`ObjMut::read_block_origin`].
    pub fn read_block_origin(
        &mut self,
        obj: u64,
        blkid: u64,
    ) -> Result<Option<(Block, Option<BlockPtr>)>> {
        self.om(obj)?.read_block_origin(blkid)
    }

    /// See [`ObjMut::modify_block`].
    pub fn modify_block<R>(
        &mut self,
        obj: u64,
        blkid: u64,
        whole: bool,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R> {
        self.om(obj)?.modify_block(blkid, whole, f)
    }

    pub fn put_block(&mut self, obj: u64, blkid: u64, data: Vec<u8>) -> Result<()> {
        self.om(obj)?.put_block(blkid, data)
    }

    pub fn free_range(&mut self, obj: u64, lo: u64, hi: u64) -> Result<()> {
        self.om(obj)?.free_range(lo, hi)
    }

    /// Frees whole blocks `lo..hi` (block ids).
    pub fn free_blocks(&mut self, obj: u64, lo: u64, hi: u64) {
        self.st.open_rec(obj).free(lo, hi);
    }

    pub fn set_block_size(&mut self, obj: u64, bs: u32) -> Result<()> {
        self.om(obj)?.set_block_size(bs)
    }

    pub fn next_data_block(&mut self, obj: u64, b: u64) -> Result<Option<u64>> {
        self.om(obj)?.next_data_block(b)
    }

    pub fn next_hole_block(&mut self, obj: u64, b: u64) -> Result<u64> {
        self.om(obj)?.next_hole_block(b)
    }

    // ------------------------------------------------------------ walking

    pub fn walk_blocks(&mut self, f: &mut dyn FnMut(&BlockPtr)) -> Result<()> {
        // Every block has a birth after txg 0.
        self.walk_blocks_born_after(0, f)
    }

    /// [`Locked::walk_blocks`] of only the blocks born after `txg`:
    /// subtrees born at or before it are skipped whole (copy-on-write
    /// rewrites every parent of a changed block, so nothing under them is
    /// younger), and so are the dnodes of dnode blocks born before it.
    pub fn walk_blocks_born_after(&mut self, txg: u64, f: &mut dyn FnMut(&BlockPtr)) -> Result<()> {
        let root = self.st.root_bp;
        if root.is_hole() || root.birth <= txg {
            return Ok(());
        }
        f(&root);
        let meta = self.st.meta.clone();
        let mut dnode_blocks = Vec::new();
        self.os.walk_tree_after(&meta.root, txg, &mut |bp| {
            f(bp);
            if bp.level == 0 {
                dnode_blocks.push(*bp);
            }
        })?;
        for bp in dnode_blocks {
            let block = self.os.read_bp(&bp)?;
            for slot in block.chunks_exact(DNODE_SIZE) {
                if let Some(dn) = DnodePhys::decode(slot)? {
                    self.os.walk_tree_after(&dn.root, txg, f)?;
                }
            }
        }
        Ok(())
    }

    /// See [`Objset::scan_synced`].
    pub fn scan_synced(
        &mut self,
        from: u64,
        min_birth: u64,
        block: &mut dyn FnMut(u64, &BlockPtr),
        object: &mut dyn FnMut(u64, &DnodePhys) -> ScanStep,
    ) -> Result<Option<u64>> {
        let root = self.st.root_bp;
        if root.is_hole() {
            return Ok(None);
        }
        let meta = self.st.meta.clone();
        if from == 0 && root.birth >= min_birth {
            block(0, &root);
            self.os
                .walk_tree_tolerant(&meta.root, min_birth, &mut |bp| block(0, bp));
        }
        // Damage is the scan's to report, not to stop at: a dnode block
        // that cannot be read (shown to `block` above, whose scrub finds
        // it) skips its objects, a slot that does not decode its object.
        let mut blkid = from / DNODES_PER_BLOCK;
        while blkid <= meta.maxblkid {
            let bp = self.os.tree_lookup(&meta.root, meta.nlevels, blkid)?;
            let dnodes = match bp.is_hole() {
                true => None,
                false => self.os.read_bp(&bp).ok(),
            };
            for (slot, raw) in dnodes
                .iter()
                .flat_map(|b| b.chunks_exact(DNODE_SIZE).enumerate())
            {
                let obj = blkid * DNODES_PER_BLOCK + slot as u64;
                if obj < from.max(1) {
                    continue;
                }
                let Ok(Some(dn)) = DnodePhys::decode(raw) else {
                    continue;
                };
                match object(obj, &dn) {
                    ScanStep::Stop => return Ok(Some(obj)),
                    ScanStep::Skip => {}
                    ScanStep::Walk => self
                        .os
                        .walk_tree_tolerant(&dn.root, min_birth, &mut |bp| block(obj, bp)),
                }
            }
            blkid += 1;
        }
        Ok(None)
    }
}

/// Where block `blkid` of object `o` comes from: its open record, the
/// syncing txg's record (`syncing`), or the synced tree. With the state
/// held shared and `o` held (shared or alone), or the state held alone.
pub(crate) fn source_of(
    os: &Objset,
    o: &Obj,
    syncing: Option<&DirtyRecord>,
    blkid: u64,
) -> Result<Source> {
    let dn = &o.dn.phys;
    if blkid > dn.maxblkid {
        return Ok(Source::Hole);
    }
    for rec in [o.open.as_ref(), syncing].into_iter().flatten() {
        match rec.lookup(blkid) {
            Some(Some(b)) => return Ok(Source::Dirty(b.clone())),
            Some(None) => return Ok(Source::Hole),
            None => {}
        }
    }
    let bp = os.tree_lookup(&dn.root, dn.nlevels, blkid)?;
    Ok(if bp.is_hole() {
        Source::Hole
    } else {
        Source::Tree(bp)
    })
}

/// One loaded object held alone (its lock, or the whole state): the
/// block-level operations of a write, truncate or hole punch, which touch
/// only this object's dnode and records. [`Locked::om`] makes one with the
/// state held alone, `Objset::write` with the state shared and only this
/// object's lock held alone, so writes to different objects run in
/// parallel.
pub(crate) struct ObjMut<'a> {
    pub os: &'a Objset,
    pub id: u64,
    pub o: &'a mut Obj,
    pub syncing: Option<&'a DirtyRecord>,
    /// Where the object is listed when it gets an open record.
    pub dirty: &'a Mutex<Vec<u64>>,
    /// See [`Locked::newly_dirty`].
    pub newly_dirty: &'a mut u64,
}

impl ObjMut<'_> {
    /// The open record, made (and the object listed dirty) if needed.
    pub fn open(&mut self) -> &mut DirtyRecord {
        open_of(self.o, self.dirty, self.id)
    }

    pub fn source(&self, blkid: u64) -> Result<Source> {
        source_of(self.os, self.o, self.syncing, blkid)
    }

    /// Current contents of a data block (`None` = hole).
    pub fn read_block(&self, blkid: u64) -> Result<Option<Block>> {
        Ok(self.read_block_origin(blkid)?.map(|(b, _)| b))
    }

    /// `read_block`, with the block pointer the bytes came from when they
    /// were read from the synced tree (`None`: a dirty block, built in
    /// memory by this process).
    pub fn read_block_origin(&self, blkid: u64) -> Result<Option<(Block, Option<BlockPtr>)>> {
        match self.source(blkid)? {
            Source::Dirty(b) => Ok(Some((b, None))),
            Source::Hole => Ok(None),
            Source::Tree(bp) => Ok(Some((self.os.read_bp(&bp)?, Some(bp)))),
        }
    }

    pub fn is_data(&self, blkid: u64) -> Result<bool> {
        Ok(!matches!(self.source(blkid)?, Source::Hole))
    }

    /// Applies `f` to block `blkid` in the open txg. With `whole` the
    /// caller overwrites every byte, so the old contents are not read.
    pub fn modify_block<R>(
        &mut self,
        blkid: u64,
        whole: bool,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R> {
        let in_open = self
            .o
            .open
            .as_ref()
            .is_some_and(|r| r.blocks.contains_key(&blkid));
        if !in_open {
            let bs = self.o.dn.phys.data_block_size;
            let data = if whole {
                vec![0; bs as usize]
            } else {
                self.current_copy(blkid, bs)?
            };
            self.put_block(blkid, data)?;
        }
        let rec = self.open();
        rec.streamed.remove(&blkid);
        let block = Arc::make_mut(rec.blocks.get_mut(&blkid).expect("block exists"));
        Ok(f(block))
    }

    /// Replaces block `blkid` in the open txg with `data`, a whole block:
    /// what `modify_block` of every byte does, without zeroing or copying
    /// a block first (sequential writes are all this).
    pub fn put_block(&mut self, blkid: u64, data: Vec<u8>) -> Result<()> {
        self.put_block_as(blkid, data, false)
    }

    /// `put_block` of a whole block a write streamed in (see
    /// `DirtyRecord::streamed`).
    pub fn put_streamed_block(&mut self, blkid: u64, data: Vec<u8>) -> Result<()> {
        self.put_block_as(blkid, data, true)
    }

    fn put_block_as(&mut self, blkid: u64, data: Vec<u8>, streamed: bool) -> Result<()> {
        let bs = self.o.dn.phys.data_block_size;
        if blkid > max_blkid_for(MAX_NLEVELS, bs) {
            return Err(DmuError::TooBig("block id"));
        }
        debug_assert_eq!(data.len(), bs as usize, "put_block takes whole blocks");
        let dn = &mut self.o.dn;
        dn.phys.maxblkid = dn.phys.maxblkid.max(blkid);
        let rec = self.open();
        let replaced = rec.blocks.insert(blkid, Arc::new(data));
        if streamed {
            rec.streamed.insert(blkid);
        } else {
            rec.streamed.remove(&blkid);
        }
        if replaced.is_none() {
            *self.newly_dirty += u64::from(bs);
        }
        Ok(())
    }

    /// An owned copy of a block's contents, resized to `bs`.
    fn current_copy(&self, blkid: u64, bs: u32) -> Result<Vec<u8>> {
        let mut data = match self.read_block(blkid)? {
            Some(b) => b.to_vec(),
            None => Vec::new(),
        };
        data.resize(bs as usize, 0);
        Ok(data)
    }

    /// Frees bytes `lo..hi`: whole blocks become holes, partial ones are
    /// zeroed in place (only if they hold data).
    pub fn free_range(&mut self, lo: u64, hi: u64) -> Result<()> {
        let bs = u64::from(self.o.dn.phys.data_block_size);
        if lo >= hi {
            return Ok(());
        }
        let (first_whole, end_whole) = (lo.div_ceil(bs), hi / bs);
        self.zero_partial(lo, hi.min(first_whole.saturating_mul(bs)))?;
        if first_whole < end_whole {
            self.open().free(first_whole, end_whole);
        } else if end_whole < first_whole {
            return Ok(()); // lo and hi in the same block: done above
        }
        self.zero_partial((end_whole.saturating_mul(bs)).max(lo), hi)?;
        self.open();
        Ok(())
    }

    /// Zeroes bytes `lo..hi`, which lie within one block.
    fn zero_partial(&mut self, lo: u64, hi: u64) -> Result<()> {
        let bs = u64::from(self.o.dn.phys.data_block_size);
        if lo >= hi || lo / bs > self.o.dn.phys.maxblkid || !self.is_data(lo / bs)? {
            return Ok(());
        }
        let (s, e) = ((lo % bs) as usize, (hi - (lo / bs) * bs) as usize);
        self.modify_block(lo / bs, false, |b| b[s..e].fill(0))
    }

    pub fn set_block_size(&mut self, bs: u32) -> Result<()> {
        let dn = &self.o.dn.phys;
        if dn.data_block_size == bs {
            return Ok(());
        }
        if dn.maxblkid > 0 {
            return Err(DmuError::InvalidArgument(
                "block size change on a multi-block object",
            ));
        }
        let old = self.read_block(0)?;
        self.o.dn.phys.data_block_size = bs;
        let rec = self.open();
        match old {
            Some(b) => {
                let mut data = b.to_vec();
                data.resize(bs as usize, 0);
                rec.blocks.insert(0, Arc::new(data));
            }
            None => rec.free(0, 1),
        }
        Ok(())
    }

    pub fn next_data_block(&self, mut b: u64) -> Result<Option<u64>> {
        loop {
            let dn = &self.o.dn.phys;
            if b > dn.maxblkid {
                return Ok(None);
            }
            let mut cand = self.os.tree_next(&dn.root, dn.nlevels - 1, 0, b)?;
            for rec in [self.o.open.as_ref(), self.syncing].into_iter().flatten() {
                if let Some((&k, _)) = rec.blocks.range(b..).next() {
                    cand = Some(cand.map_or(k, |c| c.min(k)));
                }
            }
            let Some(c) = cand else { return Ok(None) };
            if self.is_data(c)? {
                return Ok(Some(c));
            }
            b = c + 1;
        }
    }

    pub fn next_hole_block(&self, mut b: u64) -> Result<u64> {
        while b <= self.o.dn.phys.maxblkid && self.is_data(b)? {
            b += 1;
        }
        Ok(b)
    }
}

/// What a scan does with the object it is shown ([`Objset::scan_synced`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanStep {
    /// Visit every block of the object.
    Walk,
    /// Go on to the next object without visiting this one's blocks.
    Skip,
    /// Stop before this object: the scan resumes at it.
    Stop,
}

/// The arguments of a new object: a type objects may have, a valid block
/// size, a bonus that fits the dnode.
fn check_new_object(typ: ObjType, block_size: u32, bonus_len: usize) -> Result<()> {
    check_block_size(block_size)?;
    if matches!(typ, ObjType::None | ObjType::DnodeBlock | ObjType::Objset) {
        return Err(DmuError::InvalidArgument("object type"));
    }
    if bonus_len > DNODE_BONUS_SIZE {
        return Err(DmuError::TooBig("bonus"));
    }
    Ok(())
}
