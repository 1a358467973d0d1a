//! Single-device and mirror I/O (a single device is a one-way mirror).
//!
//! Writes go to every online child; the write succeeds if at least one
//! child took it (the others are counted and left to resilver/scrub).
//!
//! Reads try children cheapest first — lowest latency EWMA scaled by queue
//! depth, ties to the lowest index — so a mirror of a fast and a slow disk
//! reads at about the fast disk's speed. A child whose read errors or whose
//! data fails `verify` is remembered; once a copy verifies, it is written
//! over every remembered child (self-heal) and checksum errors are counted
//! on those that returned wrong data. If no child verifies, nothing is
//! written. A scrub (`thorough`) reads every child, so silent damage on a
//! child the normal path would never pick is found too. A *speculative*
//! read (a block that may never have been written, as the intent log's
//! end of chain) counts checksum errors only when another copy verified,
//! as OpenZFS's `ZIO_FLAG_SPECULATIVE` reads report nothing.

use crate::error::VdevError;
use crate::leaf::Leaf;
use crate::top::{TopVdev, Verify};

pub(crate) fn write(top: &TopVdev, offset: u64, padded: &[u8]) -> Result<(), VdevError> {
    let mut failed = 0;
    let mut last = String::new();
    for leaf in top.leaves() {
        if let Err(e) = leaf.write(padded, offset) {
            failed += 1;
            last = leaf.describe_err(&e);
        }
    }
    top.check_failures("write", failed, last)
}

/// Children in the order to try them.
pub(crate) fn read_order(leaves: &[Leaf]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..leaves.len()).collect();
    order.sort_by_key(|&i| {
        let l = &leaves[i];
        (!l.is_available(), l.stats.resilvering(), l.read_cost(), i)
    });
    order
}

pub(crate) fn read(
    top: &TopVdev,
    offset: u64,
    psize: u64,
    verify: Verify<'_>,
    thorough: bool,
    speculative: bool,
) -> Result<(Vec<u8>, u64), VdevError> {
    let leaves = top.leaves();
    let mut wrong: Vec<usize> = Vec::new();
    let mut bad: Vec<usize> = Vec::new();
    let mut good: Option<Vec<u8>> = None;
    let (mut io_failed, mut last) = (0usize, String::new());
    let len = usize::try_from(psize).map_err(|_| VdevError::BadRequest("psize".into()))?;
    for i in read_order(leaves) {
        let leaf = &leaves[i];
        let mut buf = vec![0u8; len];
        match leaf.read(&mut buf, offset) {
            Err(e) => {
                io_failed += 1;
                last = leaf.describe_err(&e);
                bad.push(i);
            }
            Ok(()) if verify(&buf) => {
                good.get_or_insert(buf);
                if !thorough {
                    break;
                }
            }
            Ok(()) => {
                wrong.push(i);
                bad.push(i);
            }
        }
    }
    if good.is_some() || !speculative {
        for &i in &wrong {
            leaves[i].count_checksum_error();
        }
    }
    let Some(data) = good else {
        return Err(if io_failed == leaves.len() {
            top.check_failures("read", io_failed, last)
                .err()
                .unwrap_or(VdevError::Checksum)
        } else {
            VdevError::Checksum
        });
    };
    let repaired = heal(top, offset, &data, &bad);
    Ok((data, repaired))
}

/// Rewrites the verified `data` over the children in `bad`.
fn heal(top: &TopVdev, offset: u64, data: &[u8], bad: &[usize]) -> u64 {
    if bad.is_empty() {
        return 0;
    }
    let unit = 1usize << top.ashift();
    let mut padded = data.to_vec();
    padded.resize(data.len().next_multiple_of(unit), 0);
    let mut repaired = 0;
    for &i in bad {
        // An unavailable or failing child stays for resilver; its write
        // error is counted by the leaf.
        if top.leaves()[i].write(&padded, offset).is_ok() {
            repaired += padded.len() as u64;
        }
    }
    repaired
}
