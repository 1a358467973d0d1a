//! Replay: the records a claim kept are handed to the mount, in sequence
//! order, until the mount says it applied them; then the old chain is
//! freed and a new one starts in the same txg, so a record is replayed
//! once (ZFS's `zil_replay`).

use tarn_format::zil::{LogPtr, LogRecord, LoggedRecord};
use tarn_format::BlockPtr;

use crate::{Result, Zilog};

/// What import found in the log, waiting for the mount to replay it.
pub(crate) struct Replay {
    pub records: Vec<LoggedRecord>,
    /// Every block of the old chain (claimed), to free after replay.
    pub blocks: Vec<LogPtr>,
    /// The blocks of indirect writes to replay (claimed): replay copies
    /// their bytes, then they are freed with the chain.
    pub indirect: Vec<BlockPtr>,
}

impl Zilog {
    /// Every block the log holds allocated now: its chain's written blocks
    /// and tail, and, before replay, the claimed old chain and the blocks
    /// its indirect writes name (for space checks).
    pub fn allocated_blocks(&self) -> (Vec<LogPtr>, Vec<BlockPtr>) {
        let mut logs = Vec::new();
        let mut blocks = Vec::new();
        if let Some(c) = self.chain.lock().as_ref() {
            logs.extend(c.written.iter().map(|(p, _)| *p));
            logs.push(c.tail);
        }
        if let Some(r) = self.replay.lock().as_ref() {
            logs.extend(r.blocks.iter().copied());
            blocks.extend(r.indirect.iter().copied());
        }
        (logs, blocks)
    }

    /// Has the import-time replay not been done yet?
    pub fn replay_pending(&self) -> bool {
        self.replay.lock().is_some()
    }

    /// The records to replay, in order, until [`Zilog::replay_done`]
    /// (so a mount that fails halfway and is retried replays them all
    /// again). Indirect writes come back as plain writes of their block's
    /// bytes; a block that cannot be read (a checksum error) ends the
    /// replay there, as a broken chain does, and says so on stderr.
    pub fn take_replay(&self) -> Vec<LoggedRecord> {
        let records = self
            .replay
            .lock()
            .as_ref()
            .map(|r| r.records.clone())
            .unwrap_or_default();
        let mut out = Vec::with_capacity(records.len());
        for r in records {
            let LogRecord::WriteIndirect { obj, offset, bp } = r.record else {
                out.push(r);
                continue;
            };
            match self.os.read_block(&bp) {
                Ok(data) => out.push(LoggedRecord {
                    record: LogRecord::Write { obj, offset, data },
                    ..r
                }),
                Err(e) => {
                    eprintln!(
                        "tarn: intent log replay stops at record {} (txg {}): \
                         its indirect write block is unreadable: {e}",
                        r.seq, r.txg
                    );
                    break;
                }
            }
        }
        out
    }

    /// Ends replay: frees the old chain's blocks in `txg` and starts a new
    /// chain whose header lands in `txg` too, so the replayed changes and
    /// the discarded log commit together. The caller holds `txg` open.
    pub fn replay_done(&self, txg: u64, replayed: u64) -> Result<()> {
        let Some(old) = self.replay.lock().take() else {
            return Ok(());
        };
        for b in &old.blocks {
            self.store.log_free(txg, b);
        }
        for bp in &old.indirect {
            self.os.free_unreferenced(txg, bp);
        }
        let mut chain = self.chain.lock();
        let c = self.new_chain(txg)?;
        self.os.set_zil_header(c.header.encode());
        *chain = Some(c);
        self.stats.lock().records_replayed += replayed;
        Ok(())
    }
}
