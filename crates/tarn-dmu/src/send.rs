//! What `zfs send` reads and `zfs receive` writes at the object layer
//! (OpenZFS's `dmu_send.c` traversal and `dmu_recv.c` apply functions).
//!
//! **Sending** walks a snapshot's synced tree by birth txg:
//! [`Objset::changes_since`] shows the level-0 blocks of one object born
//! after the incremental source's txg, and the holes inside indirect
//! blocks born after it (a hole has no birth, so a hole under a changed
//! parent may be new: it is always reported, which costs a `FREE` record
//! and is right either way). Subtrees born at or before the source are
//! skipped whole, so an incremental costs what changed, not what exists.
//! Object 0, the meta-dnode, is walked the same way: its data blocks are
//! the dnode blocks that changed, its holes are objects that are gone.
//!
//! **Receiving** re-creates objects by number ([`Objset::receive_object`])
//! and writes whole blocks ([`Objset::receive_block`]); everything a stream
//! says is checked against the same limits as a local caller's request.

use tarn_format::dnode::{
    max_blkid_for, DnodePhys, DNODES_PER_BLOCK, DNODE_BONUS_SIZE, MAX_NLEVELS,
};
use tarn_format::{BlockPtr, ObjType, MAX_BLOCK_SIZE};

use crate::error::{DmuError, Result};
use crate::objset::{check_block_size, Objset};
use crate::tree::span_shift;

/// A change [`Objset::changes_since`] reports, in block id order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockChange {
    /// Data block `blkid`, born after the source.
    Data { blkid: u64, bp: BlockPtr },
    /// Blocks `first .. first + count` are holes (maybe new ones).
    Hole { first: u64, count: u64 },
}

impl Objset {
    /// Calls `f` for every change to object `obj` (0: the meta-dnode) since
    /// `txg` in the synced tree, in block id order, up to the object's
    /// `maxblkid` (see the module comment). `txg == 0` reports every block.
    pub fn changes_since(
        &self,
        obj: u64,
        txg: u64,
        f: &mut dyn FnMut(BlockChange) -> Result<()>,
    ) -> Result<()> {
        let phys: DnodePhys = if obj == 0 {
            self.state.lock().meta.clone()
        } else {
            self.dnode_phys(obj)?.ok_or(DmuError::NoSuchObject(obj))?
        };
        let limit = phys.maxblkid.saturating_add(1);
        let nlevels = phys.nlevels.max(1);
        self.walk_changes(&phys.root, nlevels - 1, 0, txg, limit, f)
    }

    fn walk_changes(
        &self,
        bp: &BlockPtr,
        level: u8,
        idx: u64,
        txg: u64,
        limit: u64,
        f: &mut dyn FnMut(BlockChange) -> Result<()>,
    ) -> Result<()> {
        let shift = span_shift(level);
        let first = if shift >= 64 {
            if idx == 0 {
                0
            } else {
                return Ok(());
            }
        } else {
            match idx.checked_mul(1u64 << shift) {
                Some(v) => v,
                None => return Ok(()),
            }
        };
        if first >= limit {
            return Ok(());
        }
        if bp.is_hole() {
            let span = if shift >= 64 { u64::MAX } else { 1u64 << shift };
            let count = span.min(limit - first);
            return f(BlockChange::Hole { first, count });
        }
        if bp.birth <= txg {
            return Ok(());
        }
        if level == 0 {
            return f(BlockChange::Data {
                blkid: idx,
                bp: *bp,
            });
        }
        for slot in 0..tarn_format::dnode::BLKPTRS_PER_INDIRECT {
            let Some(child_idx) = idx
                .checked_mul(tarn_format::dnode::BLKPTRS_PER_INDIRECT)
                .and_then(|v| v.checked_add(slot))
            else {
                break;
            };
            let child = self.child_of(bp, slot, level - 1)?;
            let child_shift = span_shift(level - 1);
            if child_shift < 64
                && child_idx
                    .checked_mul(1u64 << child_shift)
                    .is_none_or(|v| v >= limit)
            {
                break;
            }
            self.walk_changes(&child, level - 1, child_idx, txg, limit, f)?;
        }
        Ok(())
    }

    /// A data block's bytes, read from the store without going through the
    /// clean-block cache: a send reads each block once, and streaming a
    /// whole dataset through the cache would only push out what readers
    /// of the live filesystem keep there.
    pub fn read_block_once(&self, bp: &BlockPtr) -> Result<Vec<u8>> {
        if let Some(b) = self.cache.get(bp) {
            return Ok(b.to_vec());
        }
        let data = self.store.read(bp)?;
        if data.len() != bp.lsize as usize {
            return Err(tarn_format::Corrupted::new(
                "block",
                format!("read {} bytes, lsize {}", data.len(), bp.lsize),
            )
            .into());
        }
        Ok(data)
    }

    /// A data block's bytes as stored and how they are compressed
    /// (`zfs send -c`); checksum-verified, never decompressed.
    pub fn read_block_stored(&self, bp: &BlockPtr) -> Result<(Vec<u8>, tarn_format::Compression)> {
        Ok(self.store.read_stored(bp)?)
    }

    /// Dnode block `blkid` of the synced meta-dnode (`None`: a hole or past
    /// its end): an incremental send compares a changed block with the
    /// source's to skip the dnodes that did not change.
    pub fn meta_block(&self, blkid: u64) -> Result<Option<Vec<u8>>> {
        let meta = self.state.lock().meta.clone();
        if blkid > meta.maxblkid {
            return Ok(None);
        }
        let bp = self.tree_lookup(&meta.root, meta.nlevels.max(1), blkid)?;
        if bp.is_hole() {
            return Ok(None);
        }
        Ok(Some(self.read_bp(&bp)?.to_vec()))
    }

    /// One past the highest object number the synced meta-dnode can hold
    /// (objects at or above it do not exist).
    pub fn object_limit(&self) -> u64 {
        let st = self.state.lock();
        st.meta
            .maxblkid
            .saturating_add(1)
            .saturating_mul(DNODES_PER_BLOCK)
    }

    /// Makes object `obj` what a stream's `OBJECT` record describes. An
    /// existing object of the same type and block size keeps its blocks
    /// (an incremental then sends only the changed ones); any other is
    /// freed and re-created empty at the same number.
    pub fn receive_object(
        &self,
        obj: u64,
        typ: ObjType,
        bonus_type: ObjType,
        block_size: u32,
        maxblkid: u64,
        bonus: &[u8],
    ) -> Result<()> {
        check_block_size(block_size)?;
        if bonus.len() > DNODE_BONUS_SIZE {
            return Err(DmuError::TooBig("bonus"));
        }
        if maxblkid > max_blkid_for(MAX_NLEVELS, block_size) {
            return Err(DmuError::TooBig("block id"));
        }
        if !receivable(typ) {
            return Err(DmuError::InvalidArgument("object type"));
        }
        let mut l = self.locked();
        let keep = match l.dnode(obj) {
            Ok(d) => d.phys.typ == typ && d.phys.data_block_size == block_size,
            Err(DmuError::NoSuchObject(_)) => {
                l.claim_object(obj, typ, block_size, bonus.len())?;
                true
            }
            Err(e) => return Err(e),
        };
        if !keep {
            l.dnode_mut(obj)?.freed = true;
            l.st.open_rec(obj).free(0, u64::MAX);
            l.claim_object(obj, typ, block_size, bonus.len())?;
        }
        let old_max = l.dnode(obj)?.phys.maxblkid;
        if old_max > maxblkid {
            let bs = u64::from(block_size);
            l.free_range(obj, (maxblkid + 1) * bs, u64::MAX)?;
        }
        let dn = l.dnode_mut(obj)?;
        dn.phys.bonus = bonus.to_vec();
        dn.phys.bonus_type = bonus_type;
        dn.phys.maxblkid = maxblkid;
        l.st.open_rec(obj);
        Ok(())
    }

    /// Frees every object in `first .. first + count` that exists (a
    /// stream's `FREEOBJECTS`; `count` may reach the end of the number
    /// space, only numbers in use are visited).
    pub fn receive_free_objects(&self, first: u64, count: u64) -> Result<()> {
        let end = first.saturating_add(count);
        let mut l = self.locked();
        let synced_end =
            l.st.meta
                .maxblkid
                .saturating_add(1)
                .saturating_mul(DNODES_PER_BLOCK);
        let mut doomed: Vec<u64> =
            l.st.objs
                .iter_mut()
                .filter_map(|(&o, c)| (o >= first && o < end && !c.get_mut().dn.freed).then_some(o))
                .collect();
        for obj in first.max(1)..end.min(synced_end) {
            if !l.st.is_loaded(obj) && l.dnode(obj).is_ok() {
                doomed.push(obj);
            }
        }
        for obj in doomed {
            l.dnode_mut(obj)?.freed = true;
            l.st.open_rec(obj).free(0, u64::MAX);
        }
        Ok(())
    }

    /// [`Objset::receive_block`] of a block that came compressed (`zfs
    /// send -c`): `stored` (what `data` is compressed with `comp`) is
    /// written to its place at once, in open context for `txg` (which the
    /// caller holds), and the sync installs that pointer instead of
    /// compressing and writing the block again (`sync_block`'s override).
    pub fn receive_block_stored(
        &self,
        obj: u64,
        blkid: u64,
        data: Vec<u8>,
        stored: &[u8],
        comp: tarn_format::Compression,
        txg: u64,
    ) -> Result<()> {
        self.receive_block(obj, blkid, data)?;
        let _open = self.txg_lock.read_recursive();
        let (data, props) = {
            let mut st = self.state.lock();
            if txg <= st.frozen_txg {
                return Ok(());
            }
            let policy = st.policy;
            let Some(o) = st.obj(obj) else {
                return Ok(());
            };
            let Some(data) = o.open.as_ref().and_then(|r| r.blocks.get(&blkid)) else {
                return Ok(());
            };
            (data.clone(), policy.props(o.dn.phys.typ, 0, 1))
        };
        let bp = self.store.write_stored(txg, &data, stored, comp, &props)?;
        let mut st = self.state.lock();
        match st.open_get(obj) {
            Some(r)
                if r.blocks
                    .get(&blkid)
                    .is_some_and(|b| std::sync::Arc::ptr_eq(b, &data)) =>
            {
                r.overrides.insert(blkid, (data, bp));
            }
            _ => st.orphans.push(bp),
        }
        Ok(())
    }

    /// Writes block `blkid` of `obj` whole, from a stream's `WRITE` record
    /// (`data` at most one block; a shorter one is zero-filled).
    pub fn receive_block(&self, obj: u64, blkid: u64, mut data: Vec<u8>) -> Result<()> {
        let mut l = self.locked();
        let bs = l.dnode(obj)?.phys.data_block_size;
        if data.len() > bs as usize || data.len() as u64 > MAX_BLOCK_SIZE {
            return Err(DmuError::TooBig("block"));
        }
        if blkid > max_blkid_for(MAX_NLEVELS, bs) {
            return Err(DmuError::TooBig("block id"));
        }
        data.resize(bs as usize, 0);
        l.put_block(obj, blkid, data)
    }
}

/// Object types a dataset's object set may hold; a stream naming any
/// other (the MOS's, the tree's own) is refused.
fn receivable(typ: ObjType) -> bool {
    matches!(
        typ,
        ObjType::PlainFile
            | ObjType::DirectoryContents
            | ObjType::MasterNode
            | ObjType::Zap
            | ObjType::Zvol
            | ObjType::Raw
    )
}
