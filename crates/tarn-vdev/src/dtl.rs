//! [`Dtl`]: the dirty time log of a leaf — the txgs whose writes it missed.
//!
//! OpenZFS keeps, per leaf, the set of txgs for which the leaf does not
//! hold every block written (`vdev_dtl`): while the leaf was offline, could
//! not be opened, or failed writes. A resilver rebuilds exactly the blocks
//! born in those txgs and then empties the set. tarn keeps the same set as
//! sorted, disjoint, inclusive txg ranges, in memory here and in the leaf's
//! label config (`VdevConfig::dtl`, see docs/FORMAT.md §3.1).
//!
//! Labels are not rewritten at every txg, so what is persisted while a
//! leaf is away ends in an *open* range (`DTL_OPEN`): "missing from here
//! on". Loading an open range closes it at the txg the pool was imported
//! at; the running pool then adds each txg it commits without the leaf.
//!
//! The set is bounded (`DTL_RANGES_MAX`): beyond it the two oldest ranges
//! are merged with the gap between them. A wider range is always safe — it
//! only makes a resilver read more.

use tarn_format::label::{DTL_OPEN, DTL_RANGES_MAX};

/// Sorted, disjoint, non-adjacent inclusive txg ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dtl {
    ranges: Vec<(u64, u64)>,
}

impl Dtl {
    /// The ranges, oldest first.
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether `txg` is in the set.
    pub fn contains(&self, txg: u64) -> bool {
        self.ranges.iter().any(|&(a, b)| a <= txg && txg <= b)
    }

    /// Adds one txg.
    pub fn add(&mut self, txg: u64) {
        self.add_range(txg, txg);
    }

    /// Adds `[first, last]` (ignored when `first > last`), merging with
    /// overlapping and adjacent ranges.
    pub fn add_range(&mut self, first: u64, last: u64) {
        if first > last {
            return;
        }
        let (mut lo, mut hi) = (first, last);
        let mut kept = Vec::with_capacity(self.ranges.len() + 1);
        for &(a, b) in &self.ranges {
            if b.saturating_add(1) < lo || hi.saturating_add(1) < a {
                kept.push((a, b));
            } else {
                lo = lo.min(a);
                hi = hi.max(b);
            }
        }
        kept.push((lo, hi));
        kept.sort_unstable();
        self.ranges = kept;
        while self.ranges.len() > DTL_RANGES_MAX {
            let (a, _) = self.ranges.remove(0);
            self.ranges[0].0 = a;
        }
        debug_assert!(self.is_valid());
    }

    /// Empties the set (a resilver finished).
    pub fn clear(&mut self) {
        self.ranges.clear();
    }

    /// The form stored in a label: `missing_now` marks the newest range
    /// open, as the leaf keeps missing txgs that no label will record.
    pub fn to_config(&self, missing_now: bool) -> Vec<[u64; 2]> {
        let mut out: Vec<[u64; 2]> = self.ranges.iter().map(|&(a, b)| [a, b]).collect();
        if missing_now {
            match out.last_mut() {
                Some(last) => last[1] = DTL_OPEN,
                None => out.push([0, DTL_OPEN]),
            }
        }
        out
    }

    /// The set a label stored, with an open range closed at `now` (the txg
    /// the pool is opened at). Bad ranges from disk are skipped, never
    /// trusted to be sorted.
    pub fn from_config(ranges: &[[u64; 2]], now: u64) -> Dtl {
        let mut dtl = Dtl::default();
        for &[a, b] in ranges.iter().take(DTL_RANGES_MAX * 2) {
            let b = if b == DTL_OPEN { now.max(a) } else { b };
            dtl.add_range(a, b);
        }
        dtl
    }

    fn is_valid(&self) -> bool {
        self.ranges.len() <= DTL_RANGES_MAX
            && self.ranges.iter().all(|&(a, b)| a <= b)
            && self
                .ranges
                .windows(2)
                .all(|w| w[0].1.saturating_add(1) < w[1].0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_when_touching() {
        let mut d = Dtl::default();
        d.add(10);
        d.add(11);
        d.add(13);
        assert_eq!(d.ranges(), &[(10, 11), (13, 13)]);
        d.add(12);
        assert_eq!(d.ranges(), &[(10, 13)]);
        d.add_range(3, 5);
        d.add_range(20, 30);
        d.add_range(4, 21);
        assert_eq!(d.ranges(), &[(3, 30)]);
        assert!(d.contains(3) && d.contains(30) && !d.contains(31) && !d.contains(2));
        d.add_range(9, 1);
        assert_eq!(d.ranges(), &[(3, 30)]);
        d.clear();
        assert!(d.is_empty());
    }

    #[test]
    fn open_ranges_round_trip_through_the_config() {
        let mut d = Dtl::default();
        d.add_range(5, 9);
        d.add(12);
        assert_eq!(d.to_config(false), vec![[5, 9], [12, 12]]);
        let stored = d.to_config(true);
        assert_eq!(stored, vec![[5, 9], [12, DTL_OPEN]]);
        // Imported at txg 40: the leaf missed everything up to it.
        let back = Dtl::from_config(&stored, 40);
        assert_eq!(back.ranges(), &[(5, 9), (12, 40)]);
        assert_eq!(Dtl::default().to_config(true), vec![[0, DTL_OPEN]]);
        // Unsorted and overlapping input from disk is normalised.
        let odd = Dtl::from_config(&[[30, 31], [1, 2], [2, 5], [u64::MAX - 1, 3]], 7);
        assert_eq!(odd.ranges(), &[(1, 5), (30, 31)]);
    }

    #[test]
    fn the_set_is_bounded() {
        let mut d = Dtl::default();
        for i in 0..(DTL_RANGES_MAX as u64 + 10) {
            d.add(i * 10);
        }
        assert_eq!(d.ranges().len(), DTL_RANGES_MAX);
        // Nothing was lost: the oldest ranges were widened, not dropped.
        for i in 0..(DTL_RANGES_MAX as u64 + 10) {
            assert!(d.contains(i * 10));
        }
    }
}
