//! A set of disjoint byte ranges, kept merged.
//!
//! The allocator keeps each metaslab's free space as a range tree (OpenZFS
//! `range_tree.c`). Adjacent ranges are always coalesced, so the number of
//! entries equals the number of free segments, which is also what the
//! fragmentation metric and the space map's size follow.

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Included, Unbounded};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeTree {
    /// start -> end (exclusive).
    segs: BTreeMap<u64, u64>,
    space: u64,
}

impl RangeTree {
    pub fn new() -> Self {
        Self::default()
    }

    /// Total bytes in the tree.
    pub fn space(&self) -> u64 {
        self.space
    }

    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    pub fn segments(&self) -> usize {
        self.segs.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.segs.iter().map(|(&s, &e)| (s, e - s))
    }

    /// True if `[start, start+len)` overlaps any range in the tree.
    pub fn overlaps(&self, start: u64, len: u64) -> bool {
        let end = start + len;
        if let Some((_, &e)) = self.segs.range(..=start).next_back() {
            if e > start {
                return true;
            }
        }
        self.segs
            .range((Excluded(start), Excluded(end)))
            .next()
            .is_some()
    }

    /// The range holding `offset`, as (start, length).
    pub fn containing(&self, offset: u64) -> Option<(u64, u64)> {
        let (&s, &e) = self.segs.range(..=offset).next_back()?;
        (offset < e).then_some((s, e - s))
    }

    /// True if `[start, start+len)` lies wholly inside one range.
    pub fn contains(&self, start: u64, len: u64) -> bool {
        match self.segs.range(..=start).next_back() {
            Some((_, &e)) => e >= start + len,
            None => false,
        }
    }

    /// Adds a range that must not overlap the tree (a double free is a bug).
    pub fn add(&mut self, start: u64, len: u64) {
        assert!(len > 0, "empty range");
        assert!(
            !self.overlaps(start, len),
            "range {start:#x}+{len:#x} already present"
        );
        let mut new_start = start;
        let mut new_end = start + len;
        if let Some((&s, &e)) = self.segs.range(..start).next_back() {
            if e == start {
                new_start = s;
                self.segs.remove(&s);
            }
        }
        if let Some(e) = self.segs.remove(&new_end) {
            new_end = e;
        }
        self.segs.insert(new_start, new_end);
        self.space += len;
    }

    /// Removes a range that must lie wholly inside one segment.
    pub fn remove(&mut self, start: u64, len: u64) {
        let (&s, &e) = self
            .segs
            .range(..=start)
            .next_back()
            .expect("removing a range that is not present");
        assert!(
            e >= start + len,
            "range {start:#x}+{len:#x} not wholly present"
        );
        self.segs.remove(&s);
        if s < start {
            self.segs.insert(s, start);
        }
        if start + len < e {
            self.segs.insert(start + len, e);
        }
        self.space -= len;
    }

    /// First `align`-aligned place of `len` bytes at or after `cursor`,
    /// wrapping to the start once. Does not remove it.
    pub fn first_fit(&self, len: u64, align: u64, cursor: u64) -> Option<u64> {
        let fit = |(&s, &e): (&u64, &u64)| {
            let a = s.next_multiple_of(align);
            (a + len <= e).then_some(a)
        };
        // The segment containing the cursor, then everything after, then wrap.
        if let Some((&s, &e)) = self.segs.range(..=cursor).next_back() {
            let a = cursor.max(s).next_multiple_of(align);
            if a + len <= e {
                return Some(a);
            }
        }
        self.segs
            .range((Excluded(cursor), Unbounded))
            .find_map(fit)
            .or_else(|| self.segs.range((Unbounded, Included(cursor))).find_map(fit))
    }

    /// Length of the largest segment.
    pub fn largest(&self) -> u64 {
        self.segs.iter().map(|(s, e)| e - s).max().unwrap_or(0)
    }

    /// Histogram of segment sizes by power of two (index = floor(log2(len))).
    pub fn histogram(&self) -> [u64; 64] {
        let mut h = [0u64; 64];
        for (s, e) in &self.segs {
            h[63 - (e - s).leading_zeros() as usize] += 1;
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn merge_and_split() {
        let mut t = RangeTree::new();
        t.add(0, 10);
        t.add(20, 10);
        t.add(10, 10);
        assert_eq!(t.segments(), 1);
        assert_eq!(t.space(), 30);
        t.remove(5, 5);
        assert_eq!(t.iter().collect::<Vec<_>>(), vec![(0, 5), (10, 20)]);
        assert!(t.contains(10, 20));
        assert!(!t.contains(4, 2));
        assert!(t.overlaps(4, 2));
        assert!(!t.overlaps(5, 5));
    }

    #[test]
    fn first_fit_alignment_and_wrap() {
        let mut t = RangeTree::new();
        t.add(100, 50);
        t.add(4096, 8192);
        assert_eq!(t.first_fit(4096, 4096, 0), Some(4096));
        assert_eq!(t.first_fit(4096, 4096, 5000), Some(8192));
        assert_eq!(t.first_fit(10, 1, 9000), Some(9000));
        assert_eq!(t.first_fit(40, 1, 12_000), Some(12_000));
        assert_eq!(t.first_fit(50, 1, 12_280), Some(100));
        assert_eq!(t.first_fit(1 << 20, 1, 0), None);
    }

    proptest! {
        #[test]
        fn model(ops in proptest::collection::vec((0u64..64, 1u64..8, any::<bool>()), 1..200)) {
            let mut t = RangeTree::new();
            let mut model = [false; 80];
            for (start, len, add) in ops {
                let r = start as usize..(start + len) as usize;
                if add && model[r.clone()].iter().all(|&x| !x) {
                    t.add(start, len);
                    model[r].iter_mut().for_each(|x| *x = true);
                } else if !add && model[r.clone()].iter().all(|&x| x) {
                    t.remove(start, len);
                    model[r].iter_mut().for_each(|x| *x = false);
                }
                let mut flat = [false; 80];
                for (s, l) in t.iter() {
                    flat[s as usize..(s + l) as usize].iter_mut().for_each(|x| *x = true);
                }
                prop_assert_eq!(flat, model);
                prop_assert_eq!(t.space(), model.iter().filter(|&&x| x).count() as u64);
                // Coalesced: no two segments touch.
                let v: Vec<_> = t.iter().collect();
                for w in v.windows(2) {
                    prop_assert!(w[0].0 + w[0].1 < w[1].0);
                }
            }
        }
    }
}
