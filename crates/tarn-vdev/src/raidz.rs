//! raidz I/O: encode a block into columns with parity, and read it back
//! with combinatorial reconstruction.
//!
//! Write: split the (sector-padded) block into the data columns of its
//! [`RaidzMap`], compute parity with `tarn_parity::generate`, write every
//! column. The write succeeds if at most `nparity` columns failed.
//!
//! Read, as OpenZFS's `vdev_raidz_io_done` does:
//!
//! 1. Read the data columns only. If all read and `verify` accepts the
//!    block, done — parity is not touched on the normal path.
//! 2. Otherwise read the parity columns too and try candidate sets of
//!    "missing" columns, smallest first: the columns whose reads failed,
//!    then those plus every combination of other columns, up to `nparity`
//!    in all (a set must contain a data column to change the data). Each
//!    candidate is rebuilt with `tarn_parity::reconstruct` and checked with
//!    `verify`. This finds silent damage on up to `nparity` columns,
//!    including damaged parity.
//! 3. From the verified data, recompute every column; rewrite each column
//!    that failed to read or differs from what was read, counting a checksum
//!    error on leaves that returned wrong bytes.
//!
//! If no candidate verifies, nothing is written and the read fails.
//! A scrub (`thorough`) starts at step 2, so bad parity is found as well.
//!
//! A column is a *position* of the vdev (see `top.rs`): while a member is
//! replaced or spared it holds two leaves. Writes go to both (the column
//! fails only when both fail); a read takes the first leaf that answers,
//! never one being resilvered; a repair, and a scrub of the other leaf,
//! make every leaf of the column hold the verified bytes.

use crate::error::VdevError;
use crate::layout::{Shape, Verify};
use crate::leaf::Leaf;
use crate::parallel::at_once;
use crate::raidz_map::RaidzMap;

/// Writes every column to every leaf of its position; `durable` writes go
/// to all devices at once and return when each has its column durable.
pub(crate) fn write(
    top: &Shape,
    nparity: usize,
    offset: u64,
    padded: &[u8],
    durable: bool,
) -> Result<(), VdevError> {
    let map = RaidzMap::new(
        offset,
        padded.len() as u64,
        top.ashift,
        top.width(),
        nparity,
    );
    debug_assert_eq!(map.data_size(), padded.len() as u64);
    let cols = encode(&map, padded)?;
    // (column, leaf, its bytes, where): every leaf of a column's position.
    let ios: Vec<(usize, &Leaf, &[u8], u64)> = map
        .cols
        .iter()
        .zip(&cols)
        .enumerate()
        .flat_map(|(c, (col, buf))| {
            top.leaves[top.group(col.child)]
                .iter()
                .map(move |leaf| (c, leaf, buf.as_slice(), col.offset))
        })
        .collect();
    let io = |&(_, leaf, buf, at): &(usize, &Leaf, &[u8], u64)| {
        let r = if durable {
            leaf.write_durable(buf, at)
        } else {
            leaf.write(buf, at)
        };
        r.err().map(|e| leaf.describe_err(&e))
    };
    let results: Vec<Option<String>> = if durable {
        at_once(&ios, io)
    } else {
        ios.iter().map(io).collect()
    };
    // A column is written when any leaf of its position took it.
    let mut wrote = vec![false; cols.len()];
    let mut last = String::new();
    for ((c, ..), r) in ios.iter().zip(results) {
        match r {
            None => wrote[*c] = true,
            Some(e) => last = e,
        }
    }
    let failed = wrote.iter().filter(|w| !**w).count();
    top.check_failures("write", failed, last)
}

/// Every column of a block as written: data split over the data columns
/// and parity generated.
pub(crate) fn encode(map: &RaidzMap, padded: &[u8]) -> Result<Vec<Vec<u8>>, VdevError> {
    let mut cols = split(map, padded);
    generate(map.nparity, &mut cols)?;
    Ok(cols)
}

/// Column buffers (parity zeroed) with the data laid into the data columns.
fn split(map: &RaidzMap, data: &[u8]) -> Vec<Vec<u8>> {
    let mut at = 0usize;
    let mut cols = Vec::with_capacity(map.cols.len());
    for (i, c) in map.cols.iter().enumerate() {
        let n = c.size as usize;
        if i < map.nparity {
            cols.push(vec![0u8; n]);
        } else {
            let end = (at + n).min(data.len());
            let mut v = data[at.min(end)..end].to_vec();
            v.resize(n, 0);
            cols.push(v);
            at += n;
        }
    }
    cols
}

/// The first `psize` bytes of the data columns, concatenated.
fn assemble(map: &RaidzMap, cols: &[Vec<u8>], psize: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(map.data_size() as usize);
    for c in map.data_cols() {
        out.extend_from_slice(&cols[c]);
    }
    out.truncate(psize);
    out
}

fn generate(nparity: usize, cols: &mut [Vec<u8>]) -> Result<(), VdevError> {
    let mut refs: Vec<&mut [u8]> = cols.iter_mut().map(|c| c.as_mut_slice()).collect();
    tarn_parity::generate(nparity, &mut refs).map_err(|e| VdevError::Parity(e.to_string()))
}

fn reconstruct(nparity: usize, cols: &mut [Vec<u8>], missing: &[usize]) -> bool {
    let mut refs: Vec<&mut [u8]> = cols.iter_mut().map(|c| c.as_mut_slice()).collect();
    tarn_parity::reconstruct(nparity, &mut refs, missing).is_ok()
}

/// What was read from each column.
struct Columns {
    bufs: Vec<Vec<u8>>,
    ok: Vec<bool>,
    /// The leaf each column was read from (when `ok`).
    src: Vec<usize>,
    /// Columns read with no leaf answering at all (see
    /// `LeafIoError::is_unreachable`).
    unreachable: Vec<bool>,
    /// The block's birth txg, if known (a pair's leaf that missed it is
    /// read last).
    birth: Option<u64>,
    last_err: String,
}

impl Columns {
    fn new(map: &RaidzMap, birth: Option<u64>) -> Columns {
        Columns {
            bufs: map
                .cols
                .iter()
                .map(|c| vec![0u8; c.size as usize])
                .collect(),
            ok: vec![false; map.cols.len()],
            src: vec![usize::MAX; map.cols.len()],
            unreachable: vec![false; map.cols.len()],
            birth,
            last_err: String::new(),
        }
    }

    fn read(&mut self, top: &Shape, map: &RaidzMap, range: std::ops::Range<usize>) {
        for c in range {
            let col = &map.cols[c];
            let group = top.group(col.child);
            let leaves = &top.leaves[group.clone()];
            // A leaf being resilvered is never trusted: it may not hold
            // this block yet. With no other leaf, the column is rebuilt.
            let (mut tried, mut unreachable) = (0usize, 0usize);
            for i in crate::mirror::read_order(leaves, self.birth) {
                let leaf = &leaves[i];
                if leaf.stats.resilvering() {
                    continue;
                }
                tried += 1;
                match leaf.read(&mut self.bufs[c], col.offset) {
                    Ok(()) => {
                        self.ok[c] = true;
                        self.src[c] = group.start + i;
                        break;
                    }
                    Err(e) => {
                        unreachable += usize::from(e.is_unreachable());
                        self.last_err = leaf.describe_err(&e);
                    }
                }
            }
            self.unreachable[c] = !self.ok[c] && tried > 0 && unreachable == tried;
            if !self.ok[c] {
                self.bufs[c].fill(0);
            }
        }
    }

    fn failed(&self) -> Vec<usize> {
        (0..self.ok.len()).filter(|&c| !self.ok[c]).collect()
    }
}

pub(crate) fn read(
    top: &Shape,
    nparity: usize,
    offset: u64,
    psize: u64,
    verify: Verify<'_>,
    thorough: bool,
    birth: Option<u64>,
) -> Result<(Vec<u8>, u64), VdevError> {
    let map = RaidzMap::new(offset, psize, top.ashift, top.width(), nparity);
    let len = usize::try_from(psize).map_err(|_| VdevError::BadRequest("psize".into()))?;
    let mut cols = Columns::new(&map, birth);
    cols.read(top, &map, map.data_cols());
    let data_ok = map.data_cols().all(|c| cols.ok[c]);
    if !thorough && data_ok {
        let data = assemble(&map, &cols.bufs, len);
        if verify(&data) {
            return Ok((data, 0));
        }
    }
    let as_read_tried = !thorough && data_ok;
    cols.read(top, &map, 0..nparity);
    let failed = cols.failed();
    for missing in candidates(map.cols.len(), nparity, &failed) {
        if missing.is_empty() && as_read_tried {
            continue;
        }
        let mut work = cols.bufs.clone();
        if !missing.is_empty() && !reconstruct(nparity, &mut work, &missing) {
            continue;
        }
        let data = assemble(&map, &work, len);
        if verify(&data) {
            let repaired = repair(top, &map, &cols, work, thorough)?;
            return Ok((data, repaired));
        }
    }
    let last = std::mem::take(&mut cols.last_err);
    if cols.unreachable.iter().filter(|&&u| u).count() > nparity {
        return Err(VdevError::Unreachable { vdev: top.id, last });
    }
    top.check_failures("read", failed.len(), last)?;
    Err(VdevError::Checksum)
}

/// Sets of columns to rebuild, smallest first; each includes every failed
/// column and at least one data column. The empty set means "as read".
fn candidates(ncols: usize, nparity: usize, failed: &[usize]) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    if failed.iter().all(|&c| c < nparity) {
        out.push(Vec::new());
    }
    if failed.len() > nparity {
        return out;
    }
    let others: Vec<usize> = (0..ncols).filter(|c| !failed.contains(c)).collect();
    for k in 0..=nparity - failed.len() {
        for extra in combinations(&others, k) {
            let mut set = failed.to_vec();
            set.extend(extra);
            set.sort_unstable();
            if !set.is_empty() && set.iter().any(|&c| c >= nparity) {
                out.push(set);
            }
        }
    }
    out
}

/// All `k`-element subsets of `items`, in lexicographic order.
fn combinations(items: &[usize], k: usize) -> Vec<Vec<usize>> {
    if k == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for i in 0..items.len() {
        for mut rest in combinations(&items[i + 1..], k - 1) {
            rest.insert(0, items[i]);
            out.push(rest);
        }
    }
    out
}

/// Rewrites every column that failed or held wrong bytes, from the verified
/// data in `good`'s data columns, on every leaf of the column that needs
/// it: the one read when it was wrong, one that failed, one being
/// resilvered, and (in a scrub) the other leaf of a pair when it differs.
/// Returns bytes rewritten.
fn repair(
    top: &Shape,
    map: &RaidzMap,
    read: &Columns,
    mut good: Vec<Vec<u8>>,
    thorough: bool,
) -> Result<u64, VdevError> {
    generate(map.nparity, &mut good)?;
    let mut repaired = 0;
    let mut other = Vec::new();
    for (c, col) in map.cols.iter().enumerate() {
        let right = read.ok[c] && read.bufs[c] == good[c];
        for i in top.group(col.child) {
            let leaf = &top.leaves[i];
            if i == read.src[c] {
                if right {
                    continue;
                }
                leaf.count_checksum_error();
            } else if read.ok[c] && leaf.is_available() && !leaf.stats.resilvering() {
                // The other leaf of a pair, holding the column too: only
                // a scrub looks at it.
                if !thorough {
                    continue;
                }
                other.clear();
                other.resize(col.size as usize, 0);
                match leaf.read(&mut other, col.offset) {
                    Ok(()) if other == good[c] => continue,
                    Ok(()) => leaf.count_checksum_error(),
                    Err(_) => {}
                }
            }
            if leaf.write(&good[c], col.offset).is_ok() {
                repaired += col.size;
            }
        }
    }
    Ok(repaired)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidate_sets() {
        // raidz2, 4 columns, nothing failed: as-read, then singles with a
        // data column, then pairs with a data column.
        let c = candidates(4, 2, &[]);
        assert_eq!(c[0], Vec::<usize>::new());
        assert_eq!(&c[1..3], &[vec![2], vec![3]]);
        assert_eq!(c.len(), 1 + 2 + 5);
        // A failed data column is always included.
        assert!(candidates(4, 2, &[3]).iter().all(|s| s.contains(&3)));
        // Too many failures: only "as read" if no data column failed.
        assert_eq!(candidates(4, 1, &[0, 1]), Vec::<Vec<usize>>::new());
        assert_eq!(
            combinations(&[1, 2, 3], 2),
            vec![vec![1, 2], vec![1, 3], vec![2, 3]]
        );
    }
}
