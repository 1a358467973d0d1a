//! Dirty records: what one txg changed in one object.
//!
//! A record holds the new contents of the data blocks written in its txg
//! and the block ranges freed in it. Frees are applied before writes at
//! sync, which is right because freeing a range in open context also drops
//! the record's dirty blocks in that range: any block still in `blocks` was
//! written *after* every free that covers it.
//!
//! Records are keyed by txg: the objset keeps one map of records for the
//! open txg and (while a sync runs) a read-only map for the syncing txg.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tarn_format::BlockPtr;

pub(crate) type Block = Arc<Vec<u8>>;

#[derive(Debug, Clone, Default)]
pub(crate) struct DirtyRecord {
    pub blocks: BTreeMap<u64, Block>,
    pub frees: RangeSet,
    /// Blocks already written in open context (`Objset::sync_block`):
    /// the contents written and their pointer. The sync uses the pointer
    /// if `blocks` still holds that very contents (same `Arc`), and frees
    /// it otherwise.
    pub overrides: BTreeMap<u64, (Block, BlockPtr)>,
    /// Blocks of `blocks` a write replaced whole, with nothing changed in
    /// part since (what sequential writes leave): the sync caches them as
    /// written and not read (`BlockCache::insert_written`), a share of the
    /// cache with a bound of its own. A hint: a block missing here is only
    /// cached like any other.
    pub streamed: BTreeSet<u64>,
}

impl DirtyRecord {
    /// Frees block ids `lo..hi` in this txg.
    pub fn free(&mut self, lo: u64, hi: u64) {
        if lo >= hi {
            return;
        }
        let doomed: Vec<u64> = self.blocks.range(lo..hi).map(|(k, _)| *k).collect();
        for k in doomed {
            self.blocks.remove(&k);
            self.streamed.remove(&k);
        }
        self.frees.insert(lo, hi);
    }

    /// What this record says about `blkid`: `Some(Some(data))` written,
    /// `Some(None)` freed, `None` untouched.
    pub fn lookup(&self, blkid: u64) -> Option<Option<&Block>> {
        if let Some(b) = self.blocks.get(&blkid) {
            return Some(Some(b));
        }
        self.frees.contains(blkid).then_some(None)
    }

    /// Folds `newer` (a later txg's record) on top of `self`.
    pub fn absorb(&mut self, newer: DirtyRecord) {
        for (lo, hi) in newer.frees.iter() {
            self.free(lo, hi);
        }
        for blkid in newer.blocks.keys() {
            self.streamed.remove(blkid);
        }
        self.blocks.extend(newer.blocks);
        self.streamed.extend(newer.streamed);
        self.overrides.extend(newer.overrides);
    }
}

/// Is every byte of `b` zero? (A block of zeros is written as a hole.)
/// In 64-byte chunks OR-ed together, which the compiler turns into
/// vector instructions: a byte-at-a-time `all` scanned 128 KiB records of
/// zeros at a byte per cycle, a sixth of the daemon's CPU when a writer
/// wrote zeros.
pub(crate) fn is_zero(b: &[u8]) -> bool {
    let chunks = b.chunks_exact(64);
    let rest = chunks.remainder();
    chunks
        .map(|c| c.iter().fold(0u8, |a, &x| a | x))
        .all(|x| x == 0)
        && rest.iter().all(|&x| x == 0)
}

/// A set of disjoint half-open ranges of block ids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RangeSet {
    ranges: BTreeMap<u64, u64>,
}

impl RangeSet {
    pub fn insert(&mut self, mut lo: u64, mut hi: u64) {
        assert!(lo < hi);
        // Merge with every range that overlaps or touches [lo, hi).
        let touching: Vec<(u64, u64)> = self
            .ranges
            .range(..=hi)
            .rev()
            .take_while(|(_, &e)| e >= lo)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in touching {
            self.ranges.remove(&s);
            lo = lo.min(s);
            hi = hi.max(e);
        }
        self.ranges.insert(lo, hi);
    }

    pub fn contains(&self, x: u64) -> bool {
        self.range_of(x).is_some()
    }

    /// The range containing `x`, if any.
    pub fn range_of(&self, x: u64) -> Option<(u64, u64)> {
        let (&s, &e) = self.ranges.range(..=x).next_back()?;
        (x < e).then_some((s, e))
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().map(|(&s, &e)| (s, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_blocks_are_seen_whatever_their_length() {
        for len in [0usize, 1, 63, 64, 65, 4096, 131_072 + 7] {
            let mut b = vec![0u8; len];
            assert!(is_zero(&b), "{len}");
            for at in [0, len / 2, len.saturating_sub(1)] {
                if len > 0 {
                    b[at] = 1;
                    assert!(!is_zero(&b), "{len} at {at}");
                    b[at] = 0;
                }
            }
        }
    }

    #[test]
    fn ranges_merge() {
        let mut r = RangeSet::default();
        r.insert(10, 20);
        r.insert(30, 40);
        r.insert(20, 30);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(10, 40)]);
        r.insert(5, 6);
        r.insert(0, u64::MAX);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(0, u64::MAX)]);
        assert!(r.contains(7) && !RangeSet::default().contains(0));
    }

    #[test]
    fn free_drops_written_blocks() {
        let mut d = DirtyRecord::default();
        d.blocks.insert(3, Arc::new(vec![1]));
        d.blocks.insert(9, Arc::new(vec![2]));
        d.free(5, 100);
        assert!(d.lookup(3).is_some_and(|b| b.is_some()));
        assert_eq!(d.lookup(9), Some(None));
        assert_eq!(d.lookup(200), None);
    }
}
