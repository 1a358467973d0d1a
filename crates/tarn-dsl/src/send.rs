//! `zfs send`: a snapshot as a stream of records (docs/FORMAT.md §13,
//! `tarn_format::stream`; OpenZFS's `dmu_send.c`).
//!
//! A substream re-creates snapshot `to` on a receiver that has `from` (or
//! nothing, for a full stream). It is produced from the snapshot's
//! synced tree alone, so the dataset stays fully usable meanwhile:
//!
//! 1. the meta-dnode's changes since `from`'s txg
//!    ([`tarn_dmu::Objset::changes_since`] on object 0): each dnode block
//!    born after it is read, and each of its slots becomes an `OBJECT`
//!    record (then the object's own changes: `WRITE` for each block born
//!    after `from`, `FREE` for the holes under changed parents and for
//!    everything past the object's last block) or, for a free slot, part
//!    of a `FREEOBJECTS` run; a hole in the meta-dnode is a `FREEOBJECTS`
//!    run of its own;
//! 2. an incremental ends with `FREEOBJECTS` from the last dnode block on,
//!    for objects the receiver has and the snapshot no longer does;
//! 3. `END`, with the checksum of everything before it.
//!
//! Objects go in number order and blocks in offset order, so a position
//! `(object, offset)` says how much of a substream a receiver has; a
//! resumed send (`zfs send -t`) starts there.
//!
//! [`Pool::send_size`] runs the same walk without reading data: the
//! `-n -v -P` estimate is the exact size of the stream.

use std::io::Write;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tarn_dmu::{BlockChange, Objset};
use tarn_format::dnode::{DnodePhys, DNODES_PER_BLOCK, DNODE_SIZE};
use tarn_format::stream::{
    padded_len, Begin, Record, StreamWriter, DSTYPE_FILESYSTEM, RECORD_SIZE,
    STREAM_FEATURE_COMPRESSED, STREAM_FEATURE_EMBED_DATA, STREAM_FEATURE_LARGE_BLOCKS,
    STREAM_FEATURE_RAW, STREAM_FEATURE_RESUMING, STREAM_VERSION,
};
use tarn_format::{BlockPtr, Compression};

use crate::pool::Pool;
use crate::snapshot::{ancestry_txgs, split};
use crate::DslError;

/// The JSON payload of a substream's `BEGIN` record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeginPayload {
    /// The snapshot sent, `pool/fs@snap` as the sender names it.
    pub toname: String,
    /// The incremental source (`fs@snap` or `fs#bookmark`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fromname: Option<String>,
    /// The dataset's locally set properties (`-p`, `-R`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub props: Option<Vec<(String, String)>>,
    /// With `STREAM_FEATURE_RESUMING`: where this substream starts.
    #[serde(default)]
    pub resume_object: u64,
    #[serde(default)]
    pub resume_offset: u64,
    /// The snapshot's creation txg on the sender (for the receiver's
    /// `-F` with a replication stream and for estimates).
    #[serde(default)]
    pub createtxg: u64,
    /// A package header's description of what follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<PackageInfo>,
}

/// A package's description (the payload of its compound `BEGIN`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageInfo {
    /// The top filesystem sent, as the sender names it.
    pub fs: String,
    /// `-R`: descendants, properties and clones are included, and `-F`
    /// on the receiver destroys what the sender no longer has.
    pub replicate: bool,
    pub datasets: Vec<PackageFs>,
}

/// One filesystem of a package.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageFs {
    pub name: String,
    /// Its snapshots on the sender, oldest first: name and guid.
    pub snaps: Vec<(String, u64)>,
    /// The guid of the snapshot it was cloned from, if any.
    #[serde(default)]
    pub origin: Option<u64>,
    /// `-h`: the user holds of its snapshots (snapshot name, tags).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holds: Vec<(String, Vec<String>)>,
}

/// The version prefix of resume tokens this build writes.
const TOKEN_VERSION: &str = "1";

/// The opaque string `receive_resume_token` shows and `zfs send -t`
/// takes: `1-<checksum>-<length>-<hex of the JSON resume state>`, as
/// OpenZFS's tokens are shaped (version, checksum, length, payload).
pub fn resume_token(state: &crate::recv::ResumeState) -> String {
    let json = serde_json::to_vec(state).unwrap_or_default();
    let sum = tarn_format::fletcher4::fletcher4(&json)[0];
    let hex: String = json.iter().map(|b| format!("{b:02x}")).collect();
    format!("{TOKEN_VERSION}-{sum:x}-{:x}-{hex}", json.len())
}

/// Decodes a resume token; the error says what is wrong with it.
pub fn parse_resume_token(token: &str) -> Result<crate::recv::ResumeState, String> {
    let bad = |why: &str| format!("resume token is corrupt ({why})");
    let mut parts = token.trim().splitn(4, '-');
    let (Some(v), Some(sum), Some(len), Some(hex)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("not four fields"));
    };
    if v != TOKEN_VERSION {
        return Err(format!(
            "resume token version {v} is not supported (this tarn reads {TOKEN_VERSION})"
        ));
    }
    let len = usize::from_str_radix(len, 16).map_err(|_| bad("length"))?;
    if hex.len() != 2 * len || len > 1 << 16 {
        return Err(bad("length"));
    }
    let json: Vec<u8> = (0..len)
        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2).unwrap_or("zz"), 16))
        .collect::<Result<_, _>>()
        .map_err(|_| bad("payload"))?;
    let want = u64::from_str_radix(sum, 16).map_err(|_| bad("checksum"))?;
    if tarn_format::fletcher4::fletcher4(&json)[0] != want {
        return Err(bad("checksum mismatch"));
    }
    serde_json::from_slice(&json).map_err(|_| bad("payload"))
}

/// What `zfs send` was asked for, as far as the stream cares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendFlags {
    /// `-L`
    pub large_blocks: bool,
    /// `-e`
    pub embed: bool,
    /// `-c`
    pub compressed: bool,
    /// `-w`
    pub raw: bool,
}

impl SendFlags {
    pub fn features(&self) -> u64 {
        let mut f = 0;
        if self.large_blocks {
            f |= STREAM_FEATURE_LARGE_BLOCKS;
        }
        if self.embed {
            f |= STREAM_FEATURE_EMBED_DATA;
        }
        if self.compressed || self.raw {
            f |= STREAM_FEATURE_COMPRESSED;
        }
        if self.raw {
            f |= STREAM_FEATURE_RAW;
        }
        f
    }
}

/// An incremental source: a snapshot or a bookmark, reduced to what a
/// stream needs of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendSource {
    pub name: String,
    pub guid: u64,
    pub txg: u64,
}

/// Where a resumed substream starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResumeAt {
    pub object: u64,
    pub offset: u64,
}

/// Why a send stopped.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("{0}")]
    Dsl(#[from] DslError),
    /// Writing the stream failed (the reader went away: EPIPE).
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl From<tarn_format::Corrupted> for SendError {
    fn from(e: tarn_format::Corrupted) -> Self {
        SendError::Dsl(e.into())
    }
}

impl From<tarn_dmu::DmuError> for SendError {
    fn from(e: tarn_dmu::DmuError) -> Self {
        SendError::Dsl(e.into())
    }
}

/// Where the records of a walk go: a stream, or a byte count.
trait Sink {
    fn record(&mut self, rec: &Record, payload: Option<&[u8]>) -> Result<(), SendError>;
    /// A data block to send: `Some` hands it back to be read and recorded
    /// at once; a sink that reads blocks itself (several at a time, see
    /// [`Pool::send`]) keeps it and returns `None`.
    fn block(&mut self, b: BlockItem) -> Result<Option<BlockItem>, SendError> {
        Ok(Some(b))
    }
}

/// A `WRITE` record still to be read: object, offset, pointer, and
/// whether to send it as stored (`-c`).
#[derive(Debug, Clone, Copy)]
struct BlockItem {
    obj: u64,
    offset: u64,
    bp: BlockPtr,
    stored: bool,
}

impl BlockItem {
    fn record(&self, psize: u32, compression: Compression) -> Record {
        Record::Write {
            object: self.obj,
            offset: self.offset,
            lsize: self.bp.lsize,
            psize,
            compression,
        }
    }

    /// The record without its data: what a counter needs.
    fn sized(&self) -> Record {
        if self.stored {
            self.record(self.bp.psize, self.bp.comp)
        } else {
            self.record(self.bp.lsize, Compression::Off)
        }
    }

    /// Reads the block: its record and payload.
    fn read(&self, os: &Objset) -> Result<(Record, Vec<u8>), SendError> {
        if self.stored {
            let (data, comp) = os.read_block_stored(&self.bp)?;
            return Ok((self.record(data.len() as u32, comp), data));
        }
        let data = os.read_block_once(&self.bp)?;
        Ok((self.record(self.bp.lsize, Compression::Off), data))
    }
}

/// Bytes of blocks read together in one batch of a send: the pipeline's
/// memory is a few batches.
pub const SEND_BATCH_BYTES: u64 = 8 << 20;
/// Changed dnode blocks an incremental send reads ahead together.
pub const SEND_DNODE_PREFETCH_BLOCKS: usize = 256;
/// Threads reading one batch's blocks at once: enough to keep a queue on
/// the devices (the sequential read of a file's blocks one at a time
/// waits for each).
pub const SEND_READ_THREADS: usize = 4;

/// What the walk hands the readers: records with their payloads and
/// blocks still to read, in stream order.
enum Item {
    Rec(Record, Vec<u8>),
    Block(BlockItem),
}

/// The walk's end of the pipeline (see [`Pool::send`]).
struct Batcher {
    tx: std::sync::mpsc::SyncSender<Result<Vec<Item>, SendError>>,
    batch: Vec<Item>,
    bytes: u64,
}

impl Batcher {
    fn flush(&mut self) -> Result<(), SendError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        self.bytes = 0;
        self.tx
            .send(Ok(std::mem::take(&mut self.batch)))
            .map_err(|_| SendError::Io(std::io::ErrorKind::BrokenPipe.into()))
    }
}

impl Sink for Batcher {
    fn record(&mut self, rec: &Record, payload: Option<&[u8]>) -> Result<(), SendError> {
        let payload = payload.unwrap_or_default().to_vec();
        self.bytes += payload.len() as u64 + RECORD_SIZE as u64;
        self.batch.push(Item::Rec(rec.clone(), payload));
        if self.bytes >= SEND_BATCH_BYTES {
            self.flush()?;
        }
        Ok(())
    }
    fn block(&mut self, b: BlockItem) -> Result<Option<BlockItem>, SendError> {
        self.bytes += u64::from(b.bp.lsize);
        self.batch.push(Item::Block(b));
        if self.bytes >= SEND_BATCH_BYTES {
            self.flush()?;
        }
        Ok(None)
    }
}

/// A record read for the stream, with its payload.
type Read = Result<(Record, Vec<u8>), SendError>;

/// Reads a batch's blocks, `SEND_READ_THREADS` at a time, keeping order.
fn read_batch(os: &Objset, items: Vec<Item>) -> Result<Vec<(Record, Vec<u8>)>, SendError> {
    let blocks: Vec<(usize, BlockItem)> = items
        .iter()
        .enumerate()
        .filter_map(|(i, it)| match it {
            Item::Block(b) => Some((i, *b)),
            Item::Rec(..) => None,
        })
        .collect();
    let mut read: Vec<Option<Read>> = (0..items.len()).map(|_| None).collect();
    let threads = SEND_READ_THREADS.min(blocks.len()).max(1);
    let results: Vec<Vec<(usize, Read)>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let mine: Vec<(usize, BlockItem)> =
                    blocks.iter().skip(t).step_by(threads).copied().collect();
                sc.spawn(move || {
                    mine.into_iter()
                        .map(|(i, b)| (i, b.read(os)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a send reader panicked"))
            .collect()
    });
    for (i, r) in results.into_iter().flatten() {
        read[i] = Some(r);
    }
    items
        .into_iter()
        .zip(read)
        .map(|(it, r)| match (it, r) {
            (Item::Rec(rec, p), _) => Ok((rec, p)),
            (Item::Block(_), Some(r)) => r,
            (Item::Block(_), None) => unreachable!("every block was read"),
        })
        .collect()
}

struct Counter(u64);

impl Sink for Counter {
    fn record(&mut self, rec: &Record, _: Option<&[u8]>) -> Result<(), SendError> {
        self.0 += (RECORD_SIZE + padded_len(rec.payload_len())) as u64;
        Ok(())
    }
    fn block(&mut self, b: BlockItem) -> Result<Option<BlockItem>, SendError> {
        self.record(&b.sized(), None)?;
        Ok(None)
    }
}

impl Pool {
    /// Resolves an incremental source for snapshot `to`: a snapshot
    /// (`@s`, `fs@s`) or bookmark (`#b`, `fs#b`) of `to`'s dataset or of
    /// the snapshots it was cloned from, older than `to`.
    pub fn send_source(&self, to: &str, from: &str) -> Result<SendSource, DslError> {
        let (head, _) = split(to).ok_or_else(|| DslError::NoSuchDataset(to.into()))?;
        let full = if from.starts_with('@') || from.starts_with('#') {
            format!("{head}{from}")
        } else {
            from.to_string()
        };
        let to_txg = self.snapshot_info(to)?.createtxg;
        let (guid, txg, ds) = if let Some((ds, name)) = full.split_once('#') {
            let b = self
                .bookmarks(ds)?
                .into_iter()
                .find(|b| b.name == name)
                .ok_or_else(|| DslError::NoSuchDataset(full.clone()))?;
            (b.guid, b.createtxg, ds.to_string())
        } else {
            let info = self.snapshot_info(&full)?;
            let ds = split(&full).map(|(d, _)| d.to_string()).unwrap_or_default();
            (info.guid, info.createtxg, ds)
        };
        let related = ds == head || {
            let map = self.inner().datasets.read();
            ancestry_txgs(&map, head).contains(&txg)
        };
        if !related || txg >= to_txg {
            return Err(DslError::Invalid(format!(
                "incremental source ({full}) must be an earlier snapshot or bookmark of '{head}' \
                 or of its origin"
            )));
        }
        Ok(SendSource {
            name: full,
            guid,
            txg,
        })
    }

    /// Writes the substream of snapshot `to` (incremental from `from`) to
    /// `out`. Returns the stream's size.
    pub fn send<W: Write>(
        &self,
        to: &str,
        from: Option<&SendSource>,
        flags: SendFlags,
        props: Option<Vec<(String, String)>>,
        resume: Option<ResumeAt>,
        out: &mut StreamWriter<W>,
    ) -> Result<u64, SendError> {
        let start = out.bytes();
        // Three stages: this thread writes the stream; a reader reads
        // each batch's blocks several at a time; the walk runs ahead of
        // both, by at most two batches each.
        let os = self.snapshot_objset(to)?;
        let (walk_tx, walk_rx) = std::sync::mpsc::sync_channel(2);
        let (read_tx, read_rx) = std::sync::mpsc::sync_channel(2);
        let result = std::thread::scope(|sc| {
            let walker = sc.spawn(move || {
                let mut b = Batcher {
                    tx: walk_tx,
                    batch: Vec::new(),
                    bytes: 0,
                };
                let r = self
                    .walk_send(to, from, flags, props, resume, &mut b)
                    .and_then(|()| b.flush());
                if let Err(e) = r {
                    let _ = b.tx.send(Err(e));
                }
            });
            let os = &os;
            let reader = sc.spawn(move || {
                for batch in walk_rx {
                    let r = batch.and_then(|items| read_batch(os, items));
                    let failed = r.is_err();
                    if read_tx.send(r).is_err() || failed {
                        return;
                    }
                }
            });
            let mut result = Ok(());
            for batch in read_rx.iter() {
                match batch {
                    Ok(recs) => {
                        if let Err(e) = recs.iter().try_for_each(|(rec, p)| out.write(rec, p)) {
                            result = Err(SendError::Io(e));
                            break;
                        }
                    }
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            // A failed write ends the other stages: their channels close.
            drop(read_rx);
            let _ = reader.join();
            let _ = walker.join();
            result
        });
        result?;
        Ok(out.bytes() - start)
    }

    /// The exact size [`Pool::send`] would write, without reading data.
    pub fn send_size(
        &self,
        to: &str,
        from: Option<&SendSource>,
        flags: SendFlags,
        props: Option<Vec<(String, String)>>,
        resume: Option<ResumeAt>,
    ) -> Result<u64, SendError> {
        let mut c = Counter(0);
        self.walk_send(to, from, flags, props, resume, &mut c)?;
        Ok(c.0)
    }

    fn walk_send(
        &self,
        to: &str,
        from: Option<&SendSource>,
        flags: SendFlags,
        props: Option<Vec<(String, String)>>,
        resume: Option<ResumeAt>,
        sink: &mut dyn Sink,
    ) -> Result<(), SendError> {
        let info = self.snapshot_info(to)?;
        let os = self.snapshot_objset(to)?;
        let mut features = flags.features();
        if resume.is_some() {
            features |= STREAM_FEATURE_RESUMING;
        }
        let resume = resume.unwrap_or_default();
        let payload = BeginPayload {
            toname: to.to_string(),
            fromname: from.map(|f| f.name.clone()),
            props,
            resume_object: resume.object,
            resume_offset: resume.offset,
            createtxg: info.createtxg,
            package: None,
        };
        let json = serde_json::to_vec(&payload).map_err(|e| DslError::Invalid(e.to_string()))?;
        let begin = Record::Begin(Begin {
            version: STREAM_VERSION,
            flags: if payload.props.is_some() {
                tarn_format::stream::BEGIN_FLAG_PROPS
            } else {
                0
            },
            features,
            toguid: info.guid,
            fromguid: from.map_or(0, |f| f.guid),
            creation_time: info.creation,
            dstype: if os.objset_type() == tarn_format::objset::ObjsetType::Zvol {
                tarn_format::stream::DSTYPE_VOLUME
            } else {
                DSTYPE_FILESYSTEM
            },
            payload_len: json.len() as u32,
        });
        sink.record(&begin, Some(&json))?;
        let from_os = match from {
            Some(f) if f.name.contains('@') => Some(self.snapshot_objset(&f.name)?),
            _ => None,
        };
        let walk = Walk {
            os: &os,
            from_os,
            from_txg: from.map_or(0, |f| f.txg),
            incremental: from.is_some(),
            resume,
            flags,
        };
        walk.objects(sink)?;
        sink.record(&Record::End { toguid: info.guid }, None)?;
        Ok(())
    }
}

/// One substream's walk over a snapshot's object set.
struct Walk<'a> {
    os: &'a Objset,
    /// The incremental source's object set, when it is a snapshot: dnodes
    /// a changed dnode block shares with it byte for byte are not sent.
    from_os: Option<Arc<Objset>>,
    from_txg: u64,
    incremental: bool,
    resume: ResumeAt,
    flags: SendFlags,
}

impl Walk<'_> {
    fn objects(&self, sink: &mut dyn Sink) -> Result<(), SendError> {
        let mut meta = Vec::new();
        self.os.changes_since(0, self.from_txg, &mut |c| {
            meta.push(c);
            Ok(())
        })?;
        let per = DNODES_PER_BLOCK;
        let mut free_run: Option<(u64, u64)> = None;
        let mut ahead = 0;
        for (i, change) in meta.iter().copied().enumerate() {
            if i == ahead {
                // The next dnode blocks, and the source's, read several
                // at a time into the cache: one by one, an incremental of
                // scattered changes waits for each.
                ahead = (i + SEND_DNODE_PREFETCH_BLOCKS).min(meta.len());
                self.prefetch_dnode_blocks(&meta[i..ahead]);
            }
            match change {
                BlockChange::Hole { first, count } => {
                    let lo = first.saturating_mul(per).max(1);
                    let hi = first.saturating_add(count).saturating_mul(per);
                    self.free_objects(sink, &mut free_run, lo, hi)?;
                }
                BlockChange::Data { blkid, bp } => {
                    let block = self.os.read_block(&bp)?;
                    let old = match &self.from_os {
                        Some(f) => f.meta_block(blkid)?,
                        None => None,
                    };
                    for (slot, raw) in block.chunks_exact(DNODE_SIZE).enumerate() {
                        let obj = blkid * per + slot as u64;
                        if obj == 0 {
                            continue;
                        }
                        let at = slot * DNODE_SIZE;
                        if old.as_ref().and_then(|o| o.get(at..at + DNODE_SIZE)) == Some(raw) {
                            // Exactly as the receiver has it.
                            continue;
                        }
                        match DnodePhys::decode(raw)? {
                            None => self.free_objects(sink, &mut free_run, obj, obj + 1)?,
                            Some(dn) => {
                                self.flush_free(sink, &mut free_run)?;
                                if obj >= self.resume.object {
                                    self.object(sink, obj, &dn)?;
                                }
                            }
                        }
                    }
                }
            }
        }
        self.flush_free(sink, &mut free_run)?;
        if self.incremental {
            // Objects past the snapshot's last dnode block are gone.
            let first = self
                .os
                .object_limit()
                .max(self.resume.object.saturating_add(1));
            sink.record(
                &Record::FreeObjects {
                    first,
                    count: u64::MAX - first,
                },
                None,
            )?;
        }
        Ok(())
    }

    /// Reads the changed dnode blocks of `changes` (and the source's at the
    /// same places) into the cache, `SEND_READ_THREADS` at a time. Errors
    /// are left for the walk's own reads to report.
    fn prefetch_dnode_blocks(&self, changes: &[BlockChange]) {
        let blocks: Vec<(u64, BlockPtr)> = changes
            .iter()
            .filter_map(|c| match *c {
                BlockChange::Data { blkid, bp } => Some((blkid, bp)),
                BlockChange::Hole { .. } => None,
            })
            .collect();
        if blocks.len() < 2 {
            return;
        }
        let threads = SEND_READ_THREADS.min(blocks.len());
        std::thread::scope(|sc| {
            for t in 0..threads {
                let mine: Vec<(u64, BlockPtr)> =
                    blocks.iter().skip(t).step_by(threads).copied().collect();
                sc.spawn(move || {
                    for (blkid, bp) in mine {
                        let _ = self.os.read_block(&bp);
                        if let Some(f) = &self.from_os {
                            let _ = f.meta_block(blkid);
                        }
                    }
                });
            }
        });
    }

    /// Adds objects `lo..hi` to the pending `FREEOBJECTS` run (objects
    /// before the resume point were already sent).
    fn free_objects(
        &self,
        sink: &mut dyn Sink,
        run: &mut Option<(u64, u64)>,
        lo: u64,
        hi: u64,
    ) -> Result<(), SendError> {
        let lo = lo.max(self.resume.object.saturating_add(1));
        if lo >= hi {
            return Ok(());
        }
        match run {
            Some((_, end)) if *end == lo => *end = hi,
            _ => {
                self.flush_free(sink, run)?;
                *run = Some((lo, hi));
            }
        }
        Ok(())
    }

    fn flush_free(
        &self,
        sink: &mut dyn Sink,
        run: &mut Option<(u64, u64)>,
    ) -> Result<(), SendError> {
        if let Some((lo, hi)) = run.take() {
            sink.record(
                &Record::FreeObjects {
                    first: lo,
                    count: hi - lo,
                },
                None,
            )?;
        }
        Ok(())
    }

    fn object(&self, sink: &mut dyn Sink, obj: u64, dn: &DnodePhys) -> Result<(), SendError> {
        sink.record(
            &Record::Object {
                object: obj,
                typ: dn.typ,
                bonus_type: dn.bonus_type,
                block_size: dn.data_block_size,
                maxblkid: dn.maxblkid,
                bonus_len: dn.bonus.len() as u32,
            },
            Some(&dn.bonus),
        )?;
        let bs = u64::from(dn.data_block_size);
        let mut changes: Vec<BlockChange> = Vec::new();
        self.os.changes_since(obj, self.from_txg, &mut |c| {
            changes.push(c);
            Ok(())
        })?;
        let skip_below = if obj == self.resume.object {
            self.resume.offset
        } else {
            0
        };
        let mut hole: Option<(u64, u64)> = None;
        let flush_hole = |sink: &mut dyn Sink, hole: &mut Option<(u64, u64)>| {
            if let Some((lo, hi)) = hole.take() {
                sink.record(
                    &Record::Free {
                        object: obj,
                        offset: lo,
                        length: hi - lo,
                    },
                    None,
                )?;
            }
            Ok::<(), SendError>(())
        };
        for c in changes {
            match c {
                BlockChange::Hole { first, count } => {
                    let lo = first.saturating_mul(bs).max(skip_below);
                    let hi = first.saturating_add(count).saturating_mul(bs);
                    if lo >= hi {
                        continue;
                    }
                    match &mut hole {
                        Some((_, end)) if *end == lo => *end = hi,
                        _ => {
                            flush_hole(sink, &mut hole)?;
                            hole = Some((lo, hi));
                        }
                    }
                }
                BlockChange::Data { blkid, bp } => {
                    let offset = blkid * bs;
                    if offset < skip_below {
                        continue;
                    }
                    flush_hole(sink, &mut hole)?;
                    self.write(sink, obj, offset, &bp)?;
                }
            }
        }
        flush_hole(sink, &mut hole)?;
        if self.incremental {
            let end = dn
                .maxblkid
                .saturating_add(1)
                .saturating_mul(bs)
                .max(skip_below);
            sink.record(
                &Record::Free {
                    object: obj,
                    offset: end,
                    length: u64::MAX,
                },
                None,
            )?;
        }
        Ok(())
    }

    fn write(
        &self,
        sink: &mut dyn Sink,
        obj: u64,
        offset: u64,
        bp: &BlockPtr,
    ) -> Result<(), SendError> {
        // -c/-w: the block as stored, when it is stored compressed.
        let item = BlockItem {
            obj,
            offset,
            bp: *bp,
            stored: (self.flags.compressed || self.flags.raw) && bp.comp != Compression::Off,
        };
        if let Some(item) = sink.block(item)? {
            let (rec, data) = item.read(self.os)?;
            sink.record(&rec, Some(&data))?;
        }
        Ok(())
    }
}
