//! The raidz map: where each sector of a block lives on which child.
//!
//! This follows OpenZFS's `vdev_raidz_map_alloc` (non-expanded raidz) so
//! that space accounting and the failure behaviour match ZFS's:
//!
//! * The vdev's address space is row-major over the `width` children in
//!   units of `2^ashift`: vdev sector `b` lives on child `b % width` at
//!   child sector `b / width`.
//! * A block of `s = ceil(psize / 2^ashift)` data sectors starting at vdev
//!   sector `b` uses columns starting at child `f = b % width`. With `p`
//!   parity columns and `d = width − p` data columns per full row, each
//!   data column holds `q = s / d` sectors and the first `r = s mod d` data
//!   columns one more ("big columns"; with the parity columns, `bc = r + p`
//!   big columns in all). Parity columns are as long as the biggest column.
//! * Column `c` starts at vdev sector `b + c`: child `(f + c) % width`, and
//!   one row further down when `f + c` wraps past the last child. Each
//!   column then runs down its child, so the block occupies exactly the
//!   vdev sectors `[b, b + tot)` with `tot = s + p·ceil(s/d)`.
//! * The allocation is rounded up to a multiple of `p + 1` sectors; the
//!   extra "skip" sectors are never written or read. Rounding keeps every
//!   free gap usable by at least one smallest block (one data sector plus
//!   its parity), which is why OpenZFS does it.
//! * Data fills the data columns in order: the first data column holds the
//!   first bytes of the block (not striped sector by sector).
//! * raidz1 only: in blocks whose offset has bit 20 set, the parity column
//!   and the first data column swap children, spreading parity reads (an
//!   OpenZFS on-disk convention kept so the layout matches).
//!
//! When `s < d` (small blocks) only `bc = s + p` columns exist; columns of
//! length zero are not in the map.

/// One column of a raidz map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaidzCol {
    /// Index of the child vdev.
    pub child: usize,
    /// Byte offset within the child's allocatable region.
    pub offset: u64,
    /// Bytes in this column (a multiple of 2^ashift, never zero).
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaidzMap {
    pub nparity: usize,
    /// Parity columns first (P, Q, R), then data columns.
    pub cols: Vec<RaidzCol>,
    /// Sectors allocated only for rounding (never written).
    pub skip_sectors: u64,
    /// Total allocated bytes: columns plus skip sectors.
    pub asize: u64,
}

impl RaidzMap {
    /// The map of a `psize`-byte block at vdev byte `offset`. Callers
    /// guarantee `psize > 0`, `width > nparity >= 1` and an aligned offset.
    pub fn new(offset: u64, psize: u64, ashift: u8, width: usize, nparity: usize) -> RaidzMap {
        assert!(
            psize > 0 && nparity >= 1 && width > nparity,
            "bad raidz geometry"
        );
        let (w, p) = (width as u64, nparity as u64);
        let b = offset >> ashift;
        let s = psize.div_ceil(1 << ashift);
        let f = b % w;
        let row = b / w;
        let q = s / (w - p);
        let r = s - q * (w - p);
        let bc = if r == 0 { 0 } else { r + p };
        let tot = s + p * (q + u64::from(r != 0));
        let acols = if q == 0 { bc } else { w };
        let cols: Vec<RaidzCol> = (0..acols)
            .map(|c| {
                let wraps = f + c >= w;
                RaidzCol {
                    child: ((f + c) % w) as usize,
                    offset: (row + u64::from(wraps)) << ashift,
                    size: (q + u64::from(c < bc)) << ashift,
                }
            })
            .collect();
        let total = tot.next_multiple_of(p + 1);
        let mut map = RaidzMap {
            nparity,
            cols,
            skip_sectors: total - tot,
            asize: total << ashift,
        };
        if nparity == 1 && offset & (1 << 20) != 0 {
            map.swap_first_two();
        }
        debug_assert_eq!(map.cols.iter().map(|c| c.size).sum::<u64>(), tot << ashift);
        map
    }

    fn swap_first_two(&mut self) {
        let (a, b) = (self.cols[0], self.cols[1]);
        debug_assert_eq!(a.size, b.size);
        self.cols[0] = RaidzCol { size: a.size, ..b };
        self.cols[1] = RaidzCol { size: b.size, ..a };
    }

    /// Indices of the data columns in `cols`.
    pub fn data_cols(&self) -> std::ops::Range<usize> {
        self.nparity..self.cols.len()
    }

    /// Bytes of data the data columns hold (psize rounded up to sectors).
    pub fn data_size(&self) -> u64 {
        self.cols[self.data_cols()].iter().map(|c| c.size).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_and_partial_rows_match_openzfs() {
        // 5-wide raidz1, ashift 9, 3 KiB (6 sectors) at vdev sector 7:
        // f = 2, row 1; d = 4, q = 1, r = 2, bc = 3, tot = 8 -> no skip.
        let m = RaidzMap::new(7 << 9, 3072, 9, 5, 1);
        let got: Vec<(usize, u64, u64)> = m
            .cols
            .iter()
            .map(|c| (c.child, c.offset >> 9, c.size >> 9))
            .collect();
        assert_eq!(
            got,
            vec![(2, 1, 2), (3, 1, 2), (4, 1, 2), (0, 2, 1), (1, 2, 1)]
        );
        assert_eq!(m.skip_sectors, 0);
        assert_eq!(m.data_size(), 3072);
        // One sector on 6-wide raidz2: 1 data + 2 parity = 3, no rounding.
        let m = RaidzMap::new(0, 512, 9, 6, 2);
        assert_eq!(m.cols.len(), 3);
        assert_eq!(m.asize, 3 * 512);
        // Two sectors on 4-wide raidz1: 2 data + 1 parity = 3 -> 4.
        let m = RaidzMap::new(4096, 1024, 9, 4, 1);
        assert_eq!((m.cols.len(), m.skip_sectors, m.asize), (3, 1, 2048));
    }

    #[test]
    fn raidz1_parity_rotation_every_mib() {
        let a = RaidzMap::new(0, 4096, 12, 4, 1);
        let b = RaidzMap::new(1 << 20, 4096, 12, 4, 1);
        assert_eq!(a.cols[0].child, 0);
        // Sector 256 starts at child 0; the swap puts parity on child 1.
        assert_eq!(b.cols[0].child, 1);
        assert_eq!(b.cols[1].child, 0);
    }
}
