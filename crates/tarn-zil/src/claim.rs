//! Opening a log at import: walking the chain the header names and
//! claiming its blocks (ZFS's `zil_claim`).
//!
//! The walk runs before the sync thread: every block that verifies is
//! claimed in the first txg to be committed, so no allocation can reuse
//! it before replay is done; so is every block an indirect write record
//! names. The chain ends at the first block that does not verify (the
//! unwritten tail, or one the crash tore) or cannot be claimed, and only
//! whole commits (up to a block flagged `COMMIT_END`) are kept for replay.

use std::sync::Arc;

use tarn_dmu::Objset;
use tarn_format::zil::{
    decode_log_block, decode_records, LogPtr, LogRecord, LoggedRecord, ZilHeader,
    LOG_BLOCK_COMMIT_END,
};
use tarn_format::BlockPtr;
use tarn_pool::{LogStore, TxgEngine};

use crate::replay::Replay;
use crate::{Result, Zilog, LOG_CHAIN_MAX_BLOCKS};

impl Zilog {
    /// Opens a dataset's log at import, before the sync thread runs:
    /// walks the chain the header names, claims its blocks in `claim_txg`
    /// (the first txg to be committed) and keeps the records of txgs after
    /// `last_synced` for [`Zilog::take_replay`].
    pub fn open(
        store: Arc<dyn LogStore>,
        txg: Arc<TxgEngine>,
        os: Arc<Objset>,
        claim_txg: u64,
        last_synced: u64,
    ) -> Result<Arc<Zilog>> {
        let header = ZilHeader::decode(&os.zil_header())?;
        let mut blocks = Vec::new();
        let mut records = Vec::new();
        let mut indirect = Vec::new();
        if header.guid != 0 {
            // Records of the commit being read; applied only once its
            // last block (COMMIT_END) is found.
            let mut partial: Vec<LoggedRecord> = Vec::new();
            let mut at = header.head;
            while !at.is_none() && blocks.len() < LOG_CHAIN_MAX_BLOCKS {
                let mut good = None;
                let mut verify = |b: &[u8]| match decode_log_block(b, header.guid, at.seq) {
                    Ok((h, area)) => match decode_records(area) {
                        Ok(r) => {
                            good = Some((h.next, h.flags, r));
                            true
                        }
                        Err(_) => false,
                    },
                    Err(_) => false,
                };
                // A block that does not verify ends the chain: it is the
                // unwritten tail, or torn by the crash.
                if store.log_read(&at, &mut verify).is_err() {
                    break;
                }
                let Some((next, flags, recs)) = good else {
                    break;
                };
                // Claim it; a block whose space is partly free is no block.
                if store.log_claim(claim_txg, &at).is_err() {
                    break;
                }
                blocks.push(at);
                let recs: Vec<LoggedRecord> =
                    recs.into_iter().filter(|r| r.txg > last_synced).collect();
                // The blocks its indirect writes name are claimed too: no
                // committed space map knows them. One that cannot be
                // claimed ends the chain, like a block that fails its
                // checksum.
                if !claim_indirect(store.as_ref(), claim_txg, &recs, &mut indirect) {
                    break;
                }
                partial.extend(recs);
                if flags & LOG_BLOCK_COMMIT_END != 0 {
                    records.append(&mut partial);
                }
                at = next;
            }
            // The unwritten tail is allocated too (the header or the last
            // block names it); claim it so it is freed with the rest.
            if !at.is_none() && store.log_claim(claim_txg, &at).is_ok() {
                blocks.push(at);
            }
        }
        records.sort_by_key(|r| r.seq);
        let next_seq = records.last().map_or(1, |r| r.seq + 1);
        // A dataset that never had a chain has nothing to replay.
        let replay = (header.guid != 0).then_some(Replay {
            records,
            blocks,
            indirect,
        });
        Ok(Zilog::new(store, txg, os, next_seq, replay))
    }
}

/// Claims, in `txg`, every copy of every block the indirect writes among
/// `recs` name, adding them to `claimed`; `false` (claiming nothing more)
/// if one cannot be claimed.
fn claim_indirect(
    store: &dyn LogStore,
    txg: u64,
    recs: &[LoggedRecord],
    claimed: &mut Vec<BlockPtr>,
) -> bool {
    for r in recs {
        let LogRecord::WriteIndirect { bp, .. } = &r.record else {
            continue;
        };
        // The copies this claim allocated (given back if the block turns
        // out not to be the log's, or cannot be claimed: a corrupt log).
        let mut fresh = Vec::new();
        let mut ours = true;
        for d in bp.dvas.iter().filter(|d| !d.is_empty()) {
            let at = LogPtr {
                vdev: d.vdev,
                size: bp.psize,
                offset: d.offset,
                seq: 0,
            };
            match store.log_claim(txg, &at) {
                Ok(true) => fresh.push(at),
                Ok(false) => ours = false,
                Err(_) => {
                    for at in &fresh {
                        store.log_free(txg, at);
                    }
                    return false;
                }
            }
        }
        // Space some committed map already holds is not the log's to free.
        if ours {
            claimed.push(*bp);
        } else {
            for at in &fresh {
                store.log_free(txg, at);
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    use tarn_format::Dva;
    use tarn_pool::StoreError;

    /// Claims of log blocks by offset: `held` are allocated by a committed
    /// map already, `bad` cannot be blocks.
    #[derive(Default)]
    struct Claims {
        held: BTreeSet<u64>,
        bad: BTreeSet<u64>,
        taken: Mutex<BTreeSet<u64>>,
    }

    impl LogStore for Claims {
        fn log_alloc(&self, _: u64, _: u32) -> std::result::Result<LogPtr, StoreError> {
            unreachable!("claims only")
        }
        fn log_write(&self, _: &LogPtr, _: &[u8]) -> std::result::Result<(), StoreError> {
            unreachable!("claims only")
        }
        fn log_flush(&self, _: u32) -> std::result::Result<(), StoreError> {
            unreachable!("claims only")
        }
        fn log_read(
            &self,
            _: &LogPtr,
            _: &mut dyn FnMut(&[u8]) -> bool,
        ) -> std::result::Result<Vec<u8>, StoreError> {
            unreachable!("claims only")
        }
        fn log_claim(&self, _: u64, at: &LogPtr) -> std::result::Result<bool, StoreError> {
            if self.bad.contains(&at.offset) {
                return Err(StoreError::Io("not a block".into()));
            }
            if self.held.contains(&at.offset) {
                return Ok(false);
            }
            Ok(self.taken.lock().unwrap().insert(at.offset))
        }
        fn log_free(&self, _: u64, at: &LogPtr) {
            assert!(self.taken.lock().unwrap().remove(&at.offset), "double free");
        }
    }

    fn indirect(offsets: &[u64]) -> LoggedRecord {
        let mut bp = BlockPtr::HOLE;
        bp.psize = 4096;
        for (d, &offset) in bp.dvas.iter_mut().zip(offsets) {
            *d = Dva {
                vdev: 0,
                asize_sectors: 8,
                offset,
            };
        }
        LoggedRecord {
            txg: 9,
            seq: 1,
            record: LogRecord::WriteIndirect {
                obj: 5,
                offset: 0,
                bp,
            },
        }
    }

    /// A block of an indirect write that is only partly the log's (a
    /// corrupt log) gives back what its claim took: nothing leaks.
    #[test]
    fn a_partly_claimable_indirect_block_leaks_nothing() {
        let store = Claims {
            held: [8192].into(),
            bad: [12288].into(),
            ..Claims::default()
        };
        let mut claimed = Vec::new();
        // Both copies free: the block is the log's.
        assert!(claim_indirect(
            &store,
            9,
            &[indirect(&[0, 4096])],
            &mut claimed
        ));
        assert_eq!(claimed.len(), 1);
        // One copy free, one held by a committed map: not the log's, and
        // the free one is given back.
        assert!(claim_indirect(
            &store,
            9,
            &[indirect(&[16384, 8192])],
            &mut claimed
        ));
        assert_eq!(claimed.len(), 1);
        // One copy cannot be claimed: the chain ends, the other goes back.
        assert!(!claim_indirect(
            &store,
            9,
            &[indirect(&[20480, 12288])],
            &mut claimed
        ));
        assert_eq!(claimed.len(), 1);
        assert_eq!(*store.taken.lock().unwrap(), [0, 4096].into());
    }
}
