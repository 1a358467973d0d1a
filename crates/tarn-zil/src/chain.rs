//! The chain of log blocks.
//!
//! See `tarn_format::zil`. The header (in the object set, rewritten only at
//! txg quiesce) points at the first block still needed; each block points
//! at the next one, allocated before the block is written. The unwritten
//! block at the end (`tail`) is where the next commit writes; its size is
//! predicted from the recent commits' (`predict_commit_bytes`), between
//! [`LOG_BLOCK_MIN_BYTES`] and [`LOG_BLOCK_MAX_BYTES`]. A dataset with no
//! chain yet makes one and waits for a txg so that the header naming it is
//! durable before the first block is acknowledged (ZFS's `zil_create`).
//!
//! A commit too big for one block (eight 16 KiB fsyncs grouped already
//! are) cuts its records into blocks, allocating each one's successor
//! first, and writes them all at once (`LogStore::log_write_many`), so it
//! costs one device round trip, not one per block; a crash that keeps
//! only some of them leaves a chain that ends at the first missing one,
//! before the commit's last block, and replay drops the commit.
//!
//!
//! As each txg quiesces, the blocks holding only records of txgs up to it
//! are freed and the header moves to the first block still needed
//! ([`Zilog::quiesced`]); a log device leaving or failing abandons the
//! chain ([`Zilog::reset`]) and the next commit starts a new one.

use std::collections::VecDeque;

use tarn_format::zil::{
    encode_log_block, LogBlockHeader, LogPtr, LogRecord, ZilHeader, LOG_BLOCK_COMMIT_END,
    LOG_BLOCK_HEADER_SIZE,
};

use crate::itx::Itx;
use crate::{Result, Zilog, LOG_BLOCK_MAX_BYTES, LOG_BLOCK_MIN_BYTES};

/// The chain as written so far.
pub(crate) struct Chain {
    pub guid: u64,
    /// Blocks written since the head, in order, with the newest txg of
    /// their records.
    pub written: VecDeque<(LogPtr, u64)>,
    /// The allocated, unwritten block the next commit writes.
    pub tail: LogPtr,
    /// The header as last set in the object set.
    pub header: ZilHeader,
}

/// How many recent commits the next block's size is predicted from.
pub(crate) const RECENT_COMMITS: usize = 16;
/// The next commit is predicted to be as big as this percentile of the
/// recent ones (`predict_commit_bytes`): the median.
pub const PREDICT_PERCENTILE: usize = 50;

impl Zilog {
    pub(crate) fn new_chain(&self, txg: u64) -> Result<Chain> {
        let mut guid = 0;
        while guid == 0 {
            guid = rand::random();
        }
        let mut tail = self.store.log_alloc(txg, LOG_BLOCK_MIN_BYTES)?;
        tail.seq = 1;
        Ok(Chain {
            guid,
            written: VecDeque::new(),
            tail,
            header: ZilHeader { guid, head: tail },
        })
    }

    /// Encodes `itxs` into blocks at the tail of the chain and writes them.
    pub(crate) fn write_records(&self, itxs: &[Itx]) -> Result<()> {
        self.ensure_chain()?;
        let mut encoded: Vec<(u64, Vec<u8>)> = Vec::new();
        // Vdevs holding blocks written in place: flushed before the log.
        let mut vdevs: Vec<u32> = Vec::new();
        let (mut copied, mut copied_bytes, mut indirect_bytes) = (0u64, 0u64, 0u64);
        for itx in itxs {
            for rec in self.resolve(itx.txg, &itx.rec, &mut vdevs)? {
                match &rec {
                    LogRecord::Write { data, .. } => {
                        copied += 1;
                        copied_bytes += data.len() as u64;
                    }
                    LogRecord::WriteIndirect { bp, .. } => indirect_bytes += u64::from(bp.lsize),
                    _ => {}
                }
                let mut b = Vec::with_capacity(rec.encoded_len());
                rec.encode_into(itx.txg, itx.seq, &mut b);
                encoded.push((itx.txg, b));
            }
        }
        // The blocks indirect records point at are durable before any log
        // block naming them is written: a crash can then never keep a
        // record whose block it lost, which would end the replay there
        // and take acknowledged commits after it along.
        for v in vdevs.drain(..) {
            self.store.log_flush(v)?;
        }
        let total: usize = encoded.iter().map(|(_, b)| b.len()).sum();
        let predicted = {
            let mut r = self.recent.lock();
            if r.len() == RECENT_COMMITS {
                r.pop_front();
            }
            r.push_back(total);
            predict_commit_bytes(r.iter().copied())
        };
        // Cut the records into blocks, each allocating the one it names
        // next, then write them all at once (ZFS keeps several lwbs in
        // flight too): a commit bigger than one block pays for one device
        // round trip, not one per block. A crash that keeps only some of
        // them is safe: replay stops at the first block missing from the
        // chain and drops a commit whose last block it did not reach.
        let (at, guid) = {
            let c = self.chain.lock();
            let c = c.as_ref().expect("chain exists");
            (c.tail, c.guid)
        };
        let mut planned: Vec<(LogPtr, Vec<u8>, u32, u64, usize)> = Vec::new();
        let mut cur = at;
        let mut left = total;
        let mut i = 0;
        while i < encoded.len() {
            let room = cur.size as usize - LOG_BLOCK_HEADER_SIZE;
            let mut body = Vec::new();
            let mut n = 0u32;
            let mut max_txg = 0;
            while i < encoded.len() && body.len() + encoded[i].1.len() <= room {
                body.extend_from_slice(&encoded[i].1);
                max_txg = max_txg.max(encoded[i].0);
                n += 1;
                i += 1;
            }
            left -= body.len();
            // A block holding the rest of this commit is sized for it; the
            // one after the commit's last is the next commit's.
            let want = if left > 0 { left } else { predicted };
            let mut next = match self.alloc_block(block_size_for(want)) {
                Ok(next) => next,
                Err(e) => {
                    // Nothing written yet: give back what this commit took.
                    let taken = planned.iter().skip(1).map(|(p, ..)| *p);
                    self.free_unlinked_all(taken.chain((cur != at).then_some(cur)));
                    return Err(e);
                }
            };
            next.seq = cur.seq + 1;
            let header = LogBlockHeader {
                guid,
                seq: cur.seq,
                nrecords: n,
                next,
                flags: if i == encoded.len() {
                    LOG_BLOCK_COMMIT_END
                } else {
                    0
                },
            };
            planned.push((
                cur,
                encode_log_block(&header, &body),
                n,
                max_txg,
                body.len(),
            ));
            cur = next;
        }
        let writes: Vec<(LogPtr, &[u8])> = planned.iter().map(|(p, b, ..)| (*p, &b[..])).collect();
        {
            let mut st = self.stats.lock();
            st.writes_in_flight += 1;
            st.writes_in_flight_max = st.writes_in_flight_max.max(st.writes_in_flight);
        }
        let results = self.store.log_write_many(&writes);
        // The chain keeps the blocks before the first that failed; that
        // one's place stays the tail, to be written again, and the blocks
        // after it, written or not, are unlinked: the next write there
        // names another successor, and a block's sequence number never
        // repeats, so replay never follows one of them.
        let failed = results.iter().position(|r| r.is_err());
        let kept = failed.unwrap_or(planned.len());
        {
            let mut c = self.chain.lock();
            let c = c.as_mut().expect("chain exists");
            for (p, _, _, max_txg, _) in &planned[..kept] {
                c.written.push_back((*p, *max_txg));
            }
            c.tail = planned.get(kept).map_or(cur, |(p, ..)| *p);
        }
        {
            let mut st = self.stats.lock();
            st.writes_in_flight -= 1;
            st.copied_count += copied;
            st.copied_bytes += copied_bytes;
            st.indirect_bytes += indirect_bytes;
            for (p, _, n, _, body) in &planned[..kept] {
                st.blocks_written += 1;
                st.bytes_written += u64::from(p.size);
                st.records_written += u64::from(*n);
                if self.store.is_log_vdev(p.vdev) {
                    st.slog_blocks += 1;
                    st.slog_bytes += *body as u64;
                    st.slog_written += u64::from(p.size);
                } else {
                    st.normal_blocks += 1;
                    st.normal_bytes += *body as u64;
                    st.normal_written += u64::from(p.size);
                }
            }
        }
        if let Some(f) = failed {
            let unlinked = planned.iter().skip(f + 1).map(|(p, ..)| *p);
            self.free_unlinked_all(unlinked.chain(std::iter::once(cur)));
            let e = results
                .into_iter()
                .nth(f)
                .and_then(|r| r.err())
                .expect("the failed block has an error");
            return Err(e.into());
        }
        Ok(())
    }

    /// Allocates a log block in the open txg (held while allocating, so
    /// the allocation lands in a txg that has not started to commit).
    fn alloc_block(&self, size: u32) -> Result<LogPtr> {
        let h = self.txg.hold()?;
        let at = self.store.log_alloc(h.txg, size)?;
        if self.store.log_txg_full(h.txg) {
            // Only the sync of the txg frees its log blocks: ask for it
            // now, before the log device fills and the log spills into
            // the pool.
            self.txg.request_sync();
        }
        Ok(at)
    }

    /// Frees blocks a commit allocated but left out of the chain, in one
    /// txg hold.
    fn free_unlinked_all(&self, blocks: impl IntoIterator<Item = LogPtr>) {
        if let Ok(h) = self.txg.hold() {
            for at in blocks {
                self.store.log_free(h.txg, &at);
            }
        }
    }

    /// Makes sure a chain exists whose header is durable.
    fn ensure_chain(&self) -> Result<()> {
        if self.chain.lock().is_some() {
            return Ok(());
        }
        let txg = {
            let h = self.txg.hold()?;
            let mut chain = self.chain.lock();
            if chain.is_none() {
                let c = self.new_chain(h.txg)?;
                self.os.set_zil_header(c.header.encode());
                *chain = Some(c);
            }
            h.txg
        };
        self.txg.wait_synced(txg)?;
        Ok(())
    }

    /// Called when the holders of `txg` have drained, before the dataset
    /// is frozen: frees the log blocks whose records all belong to txgs up
    /// to `txg`, and moves the header forward (the header and the frees
    /// commit with `txg`, so they count only once `txg`'s changes do).
    ///
    /// The records of `txg` itself stay in memory until it has synced:
    /// an `fsync` while it syncs must still find and log them, or it
    /// would acknowledge changes a crash during that sync loses (ZFS
    /// likewise cleans itxs only in `zil_clean`, after the sync). The
    /// sync thread quiesces `txg` only after `txg - 1` synced, so those
    /// records are dropped here.
    pub fn quiesced(&self, txg: u64) {
        self.pending.lock().drop_before(txg);
        let mut chain = self.chain.lock();
        let Some(c) = chain.as_mut() else { return };
        while c.written.front().is_some_and(|(_, t)| *t <= txg) {
            let (b, _) = c.written.pop_front().expect("front exists");
            self.store.log_free(txg, &b);
        }
        let head = c.written.front().map_or(c.tail, |(b, _)| *b);
        if head != c.header.head {
            c.header.head = head;
            self.os.set_zil_header(c.header.encode());
        }
    }

    /// Abandons the chain (ZFS's `zil_reset`, for a log device that is
    /// leaving or failed): in the open txg, frees every block of the
    /// chain and clears the header, so the records already written become
    /// durable with that txg instead, which is returned to wait for. The
    /// next commit starts a new chain wherever the pool now puts log
    /// blocks. A log still waiting for replay is left alone (`None`).
    pub fn reset(&self) -> Result<Option<u64>> {
        let _w = self.writer.lock();
        self.reset_locked()
    }

    /// [`Zilog::reset`] for a caller holding `writer`.
    pub(crate) fn reset_locked(&self) -> Result<Option<u64>> {
        if self.replay_pending() {
            return Ok(None);
        }
        let hold = self.txg.hold()?;
        if let Some(c) = self.chain.lock().take() {
            for (b, _) in &c.written {
                self.store.log_free(hold.txg, b);
            }
            self.store.log_free(hold.txg, &c.tail);
            self.os.set_zil_header(ZilHeader::default().encode());
        }
        Ok(Some(hold.txg))
    }

    /// Frees every block of the log in `txg` (the dataset is destroyed).
    pub fn destroy(&self, txg: u64) {
        if let Some(old) = self.replay.lock().take() {
            for b in &old.blocks {
                self.store.log_free(txg, b);
            }
            for bp in &old.indirect {
                self.os.free_unreferenced(txg, bp);
            }
        }
        if let Some(c) = self.chain.lock().take() {
            for (b, _) in &c.written {
                self.store.log_free(txg, b);
            }
            self.store.log_free(txg, &c.tail);
        }
    }
}
/// How many bytes of records the next commit will bring: the
/// [`PREDICT_PERCENTILE`]th percentile of the recent commits' sizes.
///
/// Not their largest: fsyncs arriving at their own pace make commits of
/// one to several records, and sizing every block for the biggest (as
/// tarn did) left two thirds of a log device's blocks empty
/// (docs/MEASUREMENTS.md, "ZIL: log blocks sized for the largest
/// commit"). A log device fills in proportion, and a full one forces a
/// txg sync that rewrites every dirty record (`log_txg_full`). A commit
/// bigger than its block spills into a second one, sized for the rest and
/// written at the same time, so a short prediction costs a write in
/// flight, not a round trip.
///
/// The median, not a higher percentile: with 8 fsync threads most commits
/// carry one fsync and some carry several, and the 75th percentile flipped
/// between the two, putting a one-fsync commit into a block sized for
/// two. With the median a SLOG holds more commits per txg, and the
/// extra spill blocks, written with the rest of their commit, cost
/// nothing measurable (docs/MEASUREMENTS.md, "ZIL: median block size").
fn predict_commit_bytes(recent: impl Iterator<Item = usize>) -> usize {
    let mut sizes: Vec<usize> = recent.collect();
    sizes.sort_unstable();
    sizes
        .get(sizes.len().saturating_sub(1) * PREDICT_PERCENTILE / 100)
        .copied()
        .unwrap_or(0)
}

/// A block size for `bytes` of records: whole 4 KiB units with the header,
/// between the minimum and the maximum.
fn block_size_for(bytes: usize) -> u32 {
    let want = (bytes + LOG_BLOCK_HEADER_SIZE).next_multiple_of(4096);
    (want.min(LOG_BLOCK_MAX_BYTES as usize) as u32).max(LOG_BLOCK_MIN_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LOG_WRITE_CHUNK_BYTES;

    #[test]
    fn the_next_commit_is_predicted_from_most_recent_ones_not_the_largest() {
        assert_eq!(predict_commit_bytes(std::iter::empty()), 0);
        assert_eq!(predict_commit_bytes([5000].into_iter()), 5000);
        // Sixteen commits, twelve of one record and four of eight: the
        // blocks are sized for one record.
        let recent = (0..16).map(|i| if i % 4 == 0 { 8 * 4200 } else { 4200 });
        assert_eq!(predict_commit_bytes(recent), 4200);
        // Mostly big commits: sized for them.
        let recent = (0..16).map(|i| if i % 4 == 0 { 4200 } else { 8 * 4200 });
        assert_eq!(predict_commit_bytes(recent), 8 * 4200);
        // Just over half of them single: still sized for one; the others
        // spill into a second block written with the first.
        let recent = (0..16).map(|i| if i < 9 { 4200 } else { 8 * 4200 });
        assert_eq!(predict_commit_bytes(recent), 4200);
    }

    #[test]
    fn block_sizes_stay_in_bounds() {
        assert_eq!(block_size_for(0), LOG_BLOCK_MIN_BYTES);
        assert_eq!(block_size_for(4144), LOG_BLOCK_MIN_BYTES);
        assert_eq!(block_size_for(9000), 12 << 10);
        assert_eq!(block_size_for(10 << 20), LOG_BLOCK_MAX_BYTES);
        // The largest write piece fits the largest block.
        assert!(LOG_WRITE_CHUNK_BYTES + 64 + LOG_BLOCK_HEADER_SIZE <= LOG_BLOCK_MAX_BYTES as usize);
    }
}
