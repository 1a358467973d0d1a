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
use crate::layout::{Shape, Verify};
use crate::leaf::Leaf;
use crate::parallel::at_once;
use crate::uring::{write_durable_all, write_durable_each, Target};

/// Writes to every child; `durable` writes go to all children at once and
/// return when each has the bytes durable.
pub(crate) fn write(
    top: &Shape,
    offset: u64,
    padded: &[u8],
    durable: bool,
) -> Result<(), VdevError> {
    let errors: Vec<String> = if durable {
        let leaves = top.leaves;
        let direct: Vec<(&Leaf, u64, &[u8])> =
            leaves.iter().map(|leaf| (leaf, offset, padded)).collect();
        let todo = not_done(leaves.iter(), &write_durable_direct(&direct));
        at_once(&todo, |leaf| {
            leaf.write_durable(padded, offset)
                .err()
                .map(|e| leaf.describe_err(&e))
        })
        .into_iter()
        .flatten()
        .collect()
    } else {
        top.leaves
            .iter()
            .filter_map(|leaf| {
                leaf.write(padded, offset)
                    .err()
                    .map(|e| leaf.describe_err(&e))
            })
            .collect()
    };
    let last = errors.last().cloned().unwrap_or_default();
    top.check_failures("write", errors.len(), last)
}

/// Several durable writes (`(offset, padded bytes)`), every block to every
/// child at once: an intent-log commit too big for one block no longer
/// waits for its blocks one after the other. Each block's result is that
/// of [`write`]: it succeeds if enough children took it.
pub(crate) fn write_durable_many(
    top: &Shape,
    blocks: &[(u64, &[u8])],
) -> Vec<Result<(), VdevError>> {
    let leaves = top.leaves;
    let pieces: Vec<(usize, &Leaf)> = (0..blocks.len())
        .flat_map(|b| leaves.iter().map(move |leaf| (b, leaf)))
        .collect();
    let direct: Vec<(&Leaf, u64, &[u8])> = pieces
        .iter()
        .map(|&(b, leaf)| (leaf, blocks[b].0, blocks[b].1))
        .collect();
    let todo = not_done(pieces.iter().copied(), &write_durable_direct(&direct));
    let outcomes = at_once(&todo, |&(b, leaf)| {
        let (offset, data) = blocks[b];
        leaf.write_durable(data, offset)
            .err()
            .map(|e| leaf.describe_err(&e))
    });
    let mut errors: Vec<Vec<String>> = vec![Vec::new(); blocks.len()];
    for (&(b, _), outcome) in todo.iter().zip(outcomes) {
        errors[b].extend(outcome);
    }
    errors
        .into_iter()
        .map(|e| {
            let last = e.last().cloned().unwrap_or_default();
            top.check_failures("write", e.len(), last)
        })
        .collect()
}

/// The items `done` (as [`write_durable_direct`] returns it) does not
/// mark made: all of them when it is empty.
fn not_done<T>(items: impl Iterator<Item = T>, done: &[bool]) -> Vec<T> {
    items
        .zip(done.iter().copied().chain(std::iter::repeat(false)))
        .filter_map(|(item, ok)| (!ok).then_some(item))
        .collect()
}

/// Durable writes `(leaf, offset, padded bytes)` all at once from this
/// thread (`uring`), when every leaf can take them that way; which ones
/// it made. The others (all of them, if any leaf cannot, or io_uring is
/// not there) are left to [`Leaf::write_durable`]. A single write is
/// left to it too: on one device it is already one round trip.
fn write_durable_direct(writes: &[(&Leaf, u64, &[u8])]) -> Vec<bool> {
    if writes.len() < 2 {
        return Vec::new();
    }
    let Some(targets) = writes
        .iter()
        .map(|&(leaf, offset, data)| leaf.direct_durable_target(data.len(), offset))
        .collect::<Option<Vec<Target<'_>>>>()
    else {
        return Vec::new();
    };
    let first = writes[0].2;
    let t0 = std::time::Instant::now();
    let results = if writes.iter().all(|w| std::ptr::eq(w.2, first)) {
        // One block to every child: one aligned copy at most, the
        // thread's bounce buffer.
        write_durable_all(&targets, first)
    } else {
        let each: Vec<(Target<'_>, &[u8])> = targets
            .into_iter()
            .zip(writes.iter().map(|w| w.2))
            .collect();
        write_durable_each(&each)
    };
    let Some(results) = results else {
        return Vec::new();
    };
    let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
    writes
        .iter()
        .zip(results)
        .map(|(&(leaf, _, data), r)| {
            let ok = r.is_ok();
            if ok {
                leaf.count_direct_write(data.len(), ns);
            }
            ok
        })
        .collect()
}

/// Children in the order to try them for a block born in txg `birth`
/// (when known): available ones first, then those not being resilvered,
/// then those whose DTL does not say they missed that txg (OpenZFS's
/// `vdev_dtl_contains` check in `vdev_mirror_child_select`: such a copy
/// is stale, tried only when nothing else answers), the fastest first.
pub(crate) fn read_order(leaves: &[Leaf], birth: Option<u64>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..leaves.len()).collect();
    order.sort_by_key(|&i| {
        let l = &leaves[i];
        let stale = birth.is_some_and(|txg| l.missed_txg(txg));
        (
            !l.is_available(),
            l.stats.resilvering(),
            stale,
            l.read_cost(),
            i,
        )
    });
    order
}

pub(crate) fn read(
    top: &Shape,
    offset: u64,
    psize: u64,
    verify: Verify<'_>,
    thorough: bool,
    speculative: bool,
    birth: Option<u64>,
) -> Result<(Vec<u8>, u64), VdevError> {
    let leaves = top.leaves;
    let mut wrong: Vec<usize> = Vec::new();
    let mut bad: Vec<usize> = Vec::new();
    let mut good: Option<Vec<u8>> = None;
    let (mut io_failed, mut unreachable, mut last) = (0usize, 0usize, String::new());
    let len = usize::try_from(psize).map_err(|_| VdevError::BadRequest("psize".into()))?;
    for i in read_order(leaves, birth) {
        let leaf = &leaves[i];
        let mut buf = vec![0u8; len];
        match leaf.read(&mut buf, offset) {
            Err(e) => {
                io_failed += 1;
                unreachable += usize::from(e.is_unreachable());
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
        return Err(if unreachable == leaves.len() {
            VdevError::Unreachable { vdev: top.id, last }
        } else if io_failed == leaves.len() {
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
fn heal(top: &Shape, offset: u64, data: &[u8], bad: &[usize]) -> u64 {
    if bad.is_empty() {
        return 0;
    }
    let unit = 1usize << top.ashift;
    let mut padded = data.to_vec();
    padded.resize(data.len().next_multiple_of(unit), 0);
    let mut repaired = 0;
    for &i in bad {
        // An unavailable or failing child stays for resilver; its write
        // error is counted by the leaf.
        if top.leaves[i].write(&padded, offset).is_ok() {
            repaired += padded.len() as u64;
        }
    }
    repaired
}

#[cfg(test)]
mod tests {
    use crate::device::{BlockDevice, MemDevice};
    use crate::leaf::{Leaf, LeafState};
    use crate::top::{Layout, TopVdev};
    use std::sync::Arc;

    fn vdev(layout: Layout, n: usize) -> TopVdev {
        let leaves = (0..n)
            .map(|i| {
                let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(80 << 20));
                Leaf::new(i as u64 + 1, format!("/d{i}"), dev)
            })
            .collect();
        TopVdev::new(0, 9, 12, layout, leaves).unwrap()
    }

    /// A leaf that was offline while a block was rewritten comes back
    /// with the old bytes: the read must not return them, and heals them.
    fn stale_copy_is_never_returned(layout: Layout, n: usize) {
        let top = vdev(layout, n);
        let old = vec![0x11u8; 8192];
        let new = vec![0x22u8; 8192];
        top.write(0, &old).unwrap();
        top.leaves()[0].set_offline(true);
        assert!(top.leaves()[0].take_missed() || !top.leaves()[0].is_available());
        top.write(0, &new).unwrap();
        assert!(
            top.leaves()[0].take_missed(),
            "the write it missed is noted"
        );
        top.leaves()[0].set_state(LeafState::Online);
        let got = top
            .read(0, 8192, &mut |d: &[u8]| d == new.as_slice())
            .unwrap();
        assert_eq!(got, new);
        // The stale copy was rewritten: the leaf alone now has the block.
        for leaf in top.leaves().iter().skip(1) {
            leaf.set_offline(true);
        }
        if layout == Layout::Mirror {
            let again = top
                .read(0, 8192, &mut |d: &[u8]| d == new.as_slice())
                .unwrap();
            assert_eq!(again, new);
        }
    }

    #[test]
    fn stale_copies_after_online_are_verified_and_healed() {
        stale_copy_is_never_returned(Layout::Mirror, 2);
        stale_copy_is_never_returned(Layout::Raidz { nparity: 1 }, 3);
    }

    /// A side whose DTL says it missed the block's txg is not read for it
    /// while the other side answers (OpenZFS skips it in
    /// `vdev_mirror_child_select`); with nothing else, it is still tried.
    #[test]
    fn a_side_that_missed_the_birth_txg_is_read_last() {
        let top = vdev(Layout::Mirror, 2);
        let old = vec![0x11u8; 8192];
        let new = vec![0x22u8; 8192];
        top.write(0, &old).unwrap();
        // Side 0 (the first choice on a tie) missed txg 7's rewrite.
        top.leaves()[1].write(&new, 0).unwrap();
        top.leaves()[0].dtl_add(7);
        let reads = |i: usize| {
            top.leaves()[i]
                .stats
                .read_ops
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        let before = reads(0);
        let got = top
            .read_born(0, 8192, 7, &mut |d: &[u8]| d == new.as_slice())
            .unwrap();
        assert_eq!(got, new);
        assert_eq!(reads(0), before, "the stale side was read");
        assert_eq!(
            top.leaves()[0]
                .stats
                .checksum_errors
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        // A block born in a txg it did not miss: it is read as usual.
        let got = top.read_born(0, 8192, 5, &mut |_: &[u8]| true).unwrap();
        assert_eq!(got, old);
        assert_eq!(reads(0), before + 1);
        // Nothing else answers: the stale side is tried (and verified).
        top.leaves()[1].set_state(LeafState::Faulted);
        assert!(top
            .read_born(0, 8192, 7, &mut |d: &[u8]| d == new.as_slice())
            .is_err());
        assert_eq!(reads(0), before + 2);
    }

    #[test]
    fn replicas_count_missed_txgs() {
        let top = vdev(Layout::Mirror, 2);
        assert!(top.can_lose(0) && top.can_lose(1));
        top.leaves()[1].set_offline(false);
        assert!(!top.can_lose(0), "the last usable side");
        assert!(!top.is_lost());
        top.leaves()[1].set_state(LeafState::Online);
        top.leaves()[1].dtl_add(7);
        // Back online but missing txg 7: side 0 is the only full copy.
        assert!(!top.can_lose(0));
        assert!(top.can_lose(1));
        let rz = vdev(Layout::Raidz { nparity: 1 }, 3);
        rz.leaves()[2].set_state(LeafState::Faulted);
        assert!(!rz.is_lost() && !rz.can_lose(0));
        rz.leaves()[1].set_state(LeafState::Unavail);
        assert!(rz.is_lost());
    }
}
