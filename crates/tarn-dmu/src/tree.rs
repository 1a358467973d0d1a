//! Reading a synced block tree: from a dnode's root down to a data block.
//!
//! Block `(level, idx)` covers data block ids
//! `idx << (EPB_SHIFT * level) .. (idx + 1) << (EPB_SHIFT * level)`; the
//! root is block `(nlevels - 1, 0)`. These functions see only the synced
//! tree (state 3 in `objset`): callers check the dirty records first.
//! Every pointer read from an indirect block is decoded and checked for
//! the level it must have, so a damaged tree is `Corrupted`, never a loop
//! or a panic.

use std::sync::Arc;

use tarn_format::dnode::{BLKPTRS_PER_INDIRECT, EPB_SHIFT, INDIRECT_BLOCK_SIZE};
use tarn_format::{BlockPtr, Corrupted, BLKPTR_SIZE};

use crate::cache::Claim;
use crate::dirty::Block;
use crate::error::Result;
use crate::objset::Objset;
use crate::prefetch::Fill;

/// Shift from a block id at `level` to data block ids; saturates past 63.
pub(crate) fn span_shift(level: u8) -> u32 {
    EPB_SHIFT * u32::from(level)
}

/// Does a tree of `nlevels` have room for data block `blkid`?
pub(crate) fn addressable(nlevels: u8, blkid: u64) -> bool {
    let s = span_shift(nlevels - 1);
    s >= 64 || blkid >> s == 0
}

impl Objset {
    /// Reads a block through the clean-block cache.
    pub(crate) fn read_bp(&self, bp: &BlockPtr) -> Result<Block> {
        assert!(!bp.is_hole());
        // A hit takes only its cache shard; the cache's one table of
        // reads in flight is for misses.
        if let Some(b) = self.cache.get(bp) {
            return Ok(b);
        }
        match self.cache.claim(bp) {
            Claim::Cached(b) => Ok(b),
            Claim::InFlight(fill) => match fill.wait() {
                Some(b) => Ok(b),
                None => self.read_claimed(bp, None),
            },
            Claim::Mine(fill) => self.read_claimed(bp, Some(&fill)),
        }
    }

    /// Reads a block from the store; completes `fill` (the claim on it)
    /// with the result, so whoever waits for the read gets it.
    pub(crate) fn read_claimed(&self, bp: &BlockPtr, fill: Option<&Arc<Fill>>) -> Result<Block> {
        let r = self.store.read(bp).map_err(Into::into).and_then(|data| {
            if data.len() != bp.lsize as usize {
                return Err(Corrupted::new(
                    "block",
                    format!("read {} bytes, lsize {}", data.len(), bp.lsize),
                )
                .into());
            }
            Ok(Arc::new(data))
        });
        match fill {
            Some(f) => self.cache.complete(bp, f, r.as_ref().ok().cloned()),
            None => {
                if let Ok(b) = &r {
                    self.cache.insert(bp, b.clone());
                }
            }
        }
        r
    }

    /// Child `slot` of indirect block `parent`, checked to be at `level`.
    pub(crate) fn child_of(&self, parent: &BlockPtr, slot: u64, level: u8) -> Result<BlockPtr> {
        let decode = |ind: &[u8]| {
            if ind.len() != INDIRECT_BLOCK_SIZE {
                return Err(
                    Corrupted::new("indirect block", format!("{} bytes", ind.len())).into(),
                );
            }
            decode_child(ind, slot, level)
        };
        if let Some(r) = self.cache.with(parent, decode) {
            return r;
        }
        decode(&self.read_bp(parent)?)
    }

    /// The pointer to data block `blkid` in the tree under `root` (a hole
    /// if there is none).
    pub(crate) fn tree_lookup(&self, root: &BlockPtr, nlevels: u8, blkid: u64) -> Result<BlockPtr> {
        if !addressable(nlevels, blkid) {
            return Ok(BlockPtr::HOLE);
        }
        let mut bp = *root;
        for level in (1..nlevels).rev() {
            if bp.is_hole() {
                return Ok(bp);
            }
            let slot = (blkid >> span_shift(level - 1)) & (BLKPTRS_PER_INDIRECT - 1);
            bp = self.child_of(&bp, slot, level - 1)?;
        }
        Ok(bp)
    }

    /// The first non-hole data block id >= `from` in the tree under `bp`
    /// (block `(level, idx)`), skipping hole subtrees without reading them.
    pub(crate) fn tree_next(
        &self,
        bp: &BlockPtr,
        level: u8,
        idx: u64,
        from: u64,
    ) -> Result<Option<u64>> {
        if bp.is_hole() {
            return Ok(None);
        }
        if level == 0 {
            return Ok(Some(idx));
        }
        // u128: a level-7 root spans 2^70 block ids.
        let child_span = span_shift(level - 1);
        let base = u128::from(idx) << span_shift(level);
        let from_wide = u128::from(from);
        let first = if from_wide > base {
            ((from_wide - base) >> child_span).min(1024) as u64
        } else {
            0
        };
        for slot in first..BLKPTRS_PER_INDIRECT {
            let child_idx = (u128::from(idx) << EPB_SHIFT) + u128::from(slot);
            if child_idx << child_span > u128::from(u64::MAX) {
                break;
            }
            let child = self.child_of(bp, slot, level - 1)?;
            if let Some(b) = self.tree_next(&child, level - 1, child_idx as u64, from)? {
                return Ok(Some(b.max(from)));
            }
        }
        Ok(None)
    }

    /// Calls `f` on `bp` and every block beneath it born after `txg`,
    /// skipping older subtrees whole.
    pub(crate) fn walk_tree_after(
        &self,
        bp: &BlockPtr,
        txg: u64,
        f: &mut dyn FnMut(&BlockPtr),
    ) -> Result<()> {
        if bp.is_hole() || bp.birth <= txg {
            return Ok(());
        }
        f(bp);
        if bp.level == 0 {
            return Ok(());
        }
        for slot in 0..BLKPTRS_PER_INDIRECT {
            let child = self.child_of(bp, slot, bp.level - 1)?;
            self.walk_tree_after(&child, txg, f)?;
        }
        Ok(())
    }
}

impl Objset {
    /// Calls `f(blkid, bp)` for every level-0 block of the tree under `bp`
    /// (block `(level, idx)`) born after `txg`: subtrees born at or before
    /// it are skipped whole (copy-on-write rewrites every parent of a
    /// changed block).
    pub(crate) fn walk_born_after(
        &self,
        bp: &BlockPtr,
        idx: u64,
        txg: u64,
        f: &mut dyn FnMut(u64, &BlockPtr),
    ) -> Result<()> {
        if bp.is_hole() || bp.birth <= txg {
            return Ok(());
        }
        if bp.level == 0 {
            f(idx, bp);
            return Ok(());
        }
        for slot in 0..BLKPTRS_PER_INDIRECT {
            let child = self.child_of(bp, slot, bp.level - 1)?;
            self.walk_born_after(&child, idx * BLKPTRS_PER_INDIRECT + slot, txg, f)?;
        }
        Ok(())
    }

    /// [`Objset::walk_tree_after`] for a scan: an indirect block that cannot be
    /// read or decoded ends its own subtree only (the scan reports the
    /// block itself, which `f` was shown first), and the walk goes on.
    /// A subtree born before `min_birth` is skipped whole: copy-on-write
    /// rewrites every parent of a changed block, so nothing under it is
    /// younger.
    pub(crate) fn walk_tree_tolerant(
        &self,
        bp: &BlockPtr,
        min_birth: u64,
        f: &mut dyn FnMut(&BlockPtr),
    ) {
        if bp.is_hole() || bp.birth < min_birth {
            return;
        }
        f(bp);
        if bp.level == 0 {
            return;
        }
        let Ok(ind) = self.read_bp(bp) else {
            return;
        };
        if ind.len() != INDIRECT_BLOCK_SIZE {
            return;
        }
        for slot in 0..BLKPTRS_PER_INDIRECT {
            if let Ok(child) = decode_child(&ind, slot, bp.level - 1) {
                self.walk_tree_tolerant(&child, min_birth, f);
            }
        }
    }
}

pub(crate) fn decode_child(ind: &[u8], slot: u64, level: u8) -> Result<BlockPtr> {
    let off = slot as usize * BLKPTR_SIZE;
    let bp = BlockPtr::decode(&ind[off..off + BLKPTR_SIZE])?;
    if !bp.is_hole() && bp.level != level {
        return Err(Corrupted::new(
            "indirect block",
            format!("child at level {} in level {level}", bp.level),
        )
        .into());
    }
    Ok(bp)
}
