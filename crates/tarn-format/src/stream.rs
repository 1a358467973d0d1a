//! The send stream (`zfs send`/`zfs receive`), modelled on OpenZFS's
//! replay records (`dmu_replay_record_t`): a sequence of fixed-size
//! records, each followed by a payload, that re-creates a snapshot's
//! objects on another pool. docs/FORMAT.md §13 has the bytes.
//!
//! A *substream* carries one snapshot: `BEGIN`, then `OBJECT`,
//! `FREEOBJECTS`, `WRITE` and `FREE` records in object order, then `END`.
//! A *package* (`zfs send -I` or `-R`) is a `BEGIN` with
//! [`BEGIN_FLAG_COMPOUND`] whose payload lists what follows, its `END`,
//! the substreams, and a final `END` whose `toguid` is zero.
//!
//! Every record carries, in its last 32 bytes, the Fletcher-4 of the
//! substream from its `BEGIN` up to that field (payloads included), so
//! the `END` record's checksum covers the whole substream. Payloads are
//! padded with zeros to a multiple of 8 bytes, which keeps the running
//! sum on whole words.
//!
//! The decoders here trust nothing: a record type, payload length, block
//! size or feature bit outside what this build knows is [`Corrupted`];
//! no payload is larger than [`STREAM_PAYLOAD_MAX`] (a `WRITE`'s at most
//! [`crate::MAX_BLOCK_SIZE`]), so a reader's memory is bounded whatever
//! the stream claims.

use std::io::{self, Read, Write};

use crate::fletcher4::fletcher4_update;
use crate::le::{put_u32, put_u64, u32_at, u64_at};
use crate::{Compression, Corrupted, ObjType, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE};

/// `BEGIN.magic`: "tarnsend" read as a little-endian u64.
pub const STREAM_MAGIC: u64 = u64::from_le_bytes(*b"tarnsend");
/// The stream version this build writes. A receiver accepts every
/// version up to its own; a newer one is refused with a clear error.
pub const STREAM_VERSION: u32 = 1;

/// `-c`: `WRITE` payloads may be compressed as stored (`compression` says how).
pub const STREAM_FEATURE_COMPRESSED: u64 = 1 << 0;
/// `-L`: blocks larger than 128 KiB are sent whole.
pub const STREAM_FEATURE_LARGE_BLOCKS: u64 = 1 << 1;
/// `-e`: accepted; tarn has no embedded block pointers, so nothing changes.
pub const STREAM_FEATURE_EMBED_DATA: u64 = 1 << 2;
/// `-w`: blocks exactly as stored (tarn has no encryption: as `-c`).
pub const STREAM_FEATURE_RAW: u64 = 1 << 3;
/// The substream continues an interrupted one (`zfs send -t`): it starts at
/// the object and offset its `BEGIN` payload names.
pub const STREAM_FEATURE_RESUMING: u64 = 1 << 4;
/// Every feature bit this build can receive.
pub const STREAM_FEATURES_KNOWN: u64 = STREAM_FEATURE_COMPRESSED
    | STREAM_FEATURE_LARGE_BLOCKS
    | STREAM_FEATURE_EMBED_DATA
    | STREAM_FEATURE_RAW
    | STREAM_FEATURE_RESUMING;

/// `BEGIN.flags`: a package header; the payload lists the substreams.
pub const BEGIN_FLAG_COMPOUND: u32 = 1 << 0;
/// `BEGIN.flags`: the sender took the dataset's properties along (`-p`).
pub const BEGIN_FLAG_PROPS: u32 = 1 << 1;
pub const BEGIN_FLAGS_KNOWN: u32 = BEGIN_FLAG_COMPOUND | BEGIN_FLAG_PROPS;

/// `BEGIN.dstype`.
pub const DSTYPE_FILESYSTEM: u32 = 2;
pub const DSTYPE_VOLUME: u32 = 3;

/// Bytes of every record before its payload.
pub const RECORD_SIZE: usize = 128;
/// Offset of the running checksum in a record.
pub const RECORD_OFF_CHECKSUM: usize = 96;
/// Largest payload of any record: a `BEGIN`'s JSON (a package lists every
/// dataset and snapshot it carries) or a `WRITE`'s block.
pub const STREAM_PAYLOAD_MAX: u32 = 32 << 20;

pub const RECORD_BEGIN: u32 = 1;
pub const RECORD_OBJECT: u32 = 2;
pub const RECORD_FREEOBJECTS: u32 = 3;
pub const RECORD_WRITE: u32 = 4;
pub const RECORD_FREE: u32 = 5;
pub const RECORD_END: u32 = 6;

/// Largest bonus an `OBJECT` record carries (`DNODE_BONUS_SIZE`).
const BONUS_MAX: u32 = crate::dnode::DNODE_BONUS_SIZE as u32;

/// One record, decoded. Payloads travel beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// Starts a substream (or a package).
    Begin(Begin),
    /// An object as the snapshot has it: its dnode without the block tree.
    /// The payload is the bonus (`bonus_len` bytes).
    Object {
        object: u64,
        typ: ObjType,
        bonus_type: ObjType,
        block_size: u32,
        maxblkid: u64,
        bonus_len: u32,
    },
    /// Objects `first .. first + count` do not exist.
    FreeObjects { first: u64, count: u64 },
    /// Data block bytes at `offset` (a block boundary) of `object`: `lsize`
    /// bytes, or `psize` bytes compressed with `compression`. The payload
    /// is the `psize` bytes.
    Write {
        object: u64,
        offset: u64,
        lsize: u32,
        psize: u32,
        compression: Compression,
    },
    /// Bytes `offset .. offset + length` of `object` are a hole
    /// (`length == u64::MAX`: to the end of the object).
    Free {
        object: u64,
        offset: u64,
        length: u64,
    },
    /// Ends a substream (or, with `toguid == 0`, a package).
    End { toguid: u64 },
}

/// The fixed fields of a `BEGIN` record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Begin {
    pub version: u32,
    pub flags: u32,
    pub features: u64,
    pub toguid: u64,
    /// Zero for a full stream.
    pub fromguid: u64,
    pub creation_time: u64,
    pub dstype: u32,
    /// Bytes of the JSON payload.
    pub payload_len: u32,
}

impl Record {
    pub fn type_code(&self) -> u32 {
        match self {
            Record::Begin(_) => RECORD_BEGIN,
            Record::Object { .. } => RECORD_OBJECT,
            Record::FreeObjects { .. } => RECORD_FREEOBJECTS,
            Record::Write { .. } => RECORD_WRITE,
            Record::Free { .. } => RECORD_FREE,
            Record::End { .. } => RECORD_END,
        }
    }

    /// Bytes of payload that follow the record (before padding).
    pub fn payload_len(&self) -> u32 {
        match self {
            Record::Begin(b) => b.payload_len,
            Record::Object { bonus_len, .. } => *bonus_len,
            Record::Write { psize, .. } => *psize,
            _ => 0,
        }
    }

    /// The record's bytes; the checksum field is left zero (the writer
    /// fills it in).
    pub fn encode(&self) -> [u8; RECORD_SIZE] {
        let mut b = [0u8; RECORD_SIZE];
        put_u32(&mut b, 0, self.type_code());
        put_u32(&mut b, 4, self.payload_len());
        let f = |b: &mut [u8; RECORD_SIZE], i: usize, v: u64| put_u64(b, 8 + 8 * i, v);
        match *self {
            Record::Begin(ref g) => {
                f(&mut b, 0, STREAM_MAGIC);
                f(&mut b, 1, u64::from(g.version) | (u64::from(g.flags) << 32));
                f(&mut b, 2, g.features);
                f(&mut b, 3, g.toguid);
                f(&mut b, 4, g.fromguid);
                f(&mut b, 5, g.creation_time);
                f(&mut b, 6, u64::from(g.dstype));
            }
            Record::Object {
                object,
                typ,
                bonus_type,
                block_size,
                maxblkid,
                bonus_len: _,
            } => {
                f(&mut b, 0, object);
                f(
                    &mut b,
                    1,
                    u64::from(typ.code()) | (u64::from(bonus_type.code()) << 8),
                );
                f(&mut b, 2, u64::from(block_size));
                f(&mut b, 3, maxblkid);
            }
            Record::FreeObjects { first, count } => {
                f(&mut b, 0, first);
                f(&mut b, 1, count);
            }
            Record::Write {
                object,
                offset,
                lsize,
                psize: _,
                compression,
            } => {
                f(&mut b, 0, object);
                f(&mut b, 1, offset);
                f(&mut b, 2, u64::from(lsize));
                f(&mut b, 3, u64::from(compression.code()));
            }
            Record::Free {
                object,
                offset,
                length,
            } => {
                f(&mut b, 0, object);
                f(&mut b, 1, offset);
                f(&mut b, 2, length);
            }
            Record::End { toguid } => f(&mut b, 0, toguid),
        }
        b
    }

    /// Decodes and checks a record (not its checksum: [`StreamReader`]
    /// does that, since it needs the bytes before it).
    pub fn decode(b: &[u8]) -> Result<Record, Corrupted> {
        let bad = |why: String| Corrupted::new("stream record", why);
        if b.len() < RECORD_SIZE {
            return Err(bad(format!("{} bytes, need {RECORD_SIZE}", b.len())));
        }
        let typ = u32_at(b, 0);
        let payload_len = u32_at(b, 4);
        let f = |i: usize| u64_at(b, 8 + 8 * i);
        if b[64..RECORD_OFF_CHECKSUM].iter().any(|&x| x != 0) {
            return Err(bad("reserved bytes are not zero".into()));
        }
        let no_payload = |r: Record| {
            if payload_len != 0 {
                return Err(bad(format!(
                    "record type {typ} with a {payload_len}-byte payload"
                )));
            }
            Ok(r)
        };
        match typ {
            RECORD_BEGIN => {
                if f(0) != STREAM_MAGIC {
                    return Err(bad(format!("bad magic {:#x}", f(0))));
                }
                if payload_len > STREAM_PAYLOAD_MAX {
                    return Err(bad(format!("BEGIN payload of {payload_len} bytes")));
                }
                let dstype = f(6);
                if dstype != u64::from(DSTYPE_FILESYSTEM) && dstype != u64::from(DSTYPE_VOLUME) {
                    return Err(bad(format!("unknown dataset type {dstype}")));
                }
                Ok(Record::Begin(Begin {
                    version: f(1) as u32,
                    flags: (f(1) >> 32) as u32,
                    features: f(2),
                    toguid: f(3),
                    fromguid: f(4),
                    creation_time: f(5),
                    dstype: dstype as u32,
                    payload_len,
                }))
            }
            RECORD_OBJECT => {
                let codes = f(1);
                if codes >> 16 != 0 {
                    return Err(bad("OBJECT type field has stray bits".into()));
                }
                let typ = ObjType::from_code(codes as u8)?;
                let bonus_type = ObjType::from_code((codes >> 8) as u8)?;
                let block_size = f(2);
                if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size)
                    || block_size % MIN_BLOCK_SIZE != 0
                {
                    return Err(bad(format!("block size {block_size}")));
                }
                if payload_len > BONUS_MAX {
                    return Err(bad(format!("bonus of {payload_len} bytes")));
                }
                if f(0) == 0 {
                    return Err(bad("OBJECT record for object 0".into()));
                }
                Ok(Record::Object {
                    object: f(0),
                    typ,
                    bonus_type,
                    block_size: block_size as u32,
                    maxblkid: f(3),
                    bonus_len: payload_len,
                })
            }
            RECORD_FREEOBJECTS => no_payload(Record::FreeObjects {
                first: f(0),
                count: f(1),
            }),
            RECORD_WRITE => {
                let lsize = f(2);
                if lsize == 0 || lsize > MAX_BLOCK_SIZE {
                    return Err(bad(format!("WRITE of {lsize} bytes")));
                }
                let compression = Compression::from_code(f(3) as u8)?;
                if f(3) >> 8 != 0 {
                    return Err(bad("WRITE compression field has stray bits".into()));
                }
                let psize = u64::from(payload_len);
                let fits = match compression {
                    Compression::Off => psize == lsize,
                    _ => psize > 0 && psize <= lsize,
                };
                if !fits {
                    return Err(bad(format!(
                        "WRITE of {lsize} bytes with a {psize}-byte payload"
                    )));
                }
                Ok(Record::Write {
                    object: f(0),
                    offset: f(1),
                    lsize: lsize as u32,
                    psize: payload_len,
                    compression,
                })
            }
            RECORD_FREE => no_payload(Record::Free {
                object: f(0),
                offset: f(1),
                length: f(2),
            }),
            RECORD_END => no_payload(Record::End { toguid: f(0) }),
            other => Err(bad(format!("unknown record type {other}"))),
        }
    }
}

/// A payload's length on the wire: padded to whole 8-byte words.
pub fn padded_len(len: u32) -> usize {
    (len as usize).div_ceil(8) * 8
}

/// Encodes a Fletcher-4 state as the 32 checksum bytes.
fn checksum_bytes(sum: &[u64; 4]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, w) in sum.iter().enumerate() {
        put_u64(&mut out, 8 * i, *w);
    }
    out
}

/// Bytes the writer buffers: records and small payloads go through it; a
/// payload at least this long goes straight from the caller's memory to
/// the pipe (one copy, not two).
const STREAM_BUFFER_BYTES: usize = 64 << 10;

/// Writes records with their running checksum. Records and small payloads
/// are gathered in a buffer; large payloads are written as they are.
/// Call [`StreamWriter::flush`] at the end.
pub struct StreamWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    sum: [u64; 4],
    bytes: u64,
}

impl<W: Write> StreamWriter<W> {
    pub fn new(out: W) -> Self {
        StreamWriter {
            out,
            buf: Vec::with_capacity(STREAM_BUFFER_BYTES),
            sum: [0; 4],
            bytes: 0,
        }
    }

    /// Bytes written so far (buffered ones included).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The destination, with everything written so far in it.
    pub fn get_mut(&mut self) -> &mut W {
        let _ = self.flush_buf();
        &mut self.out
    }

    fn flush_buf(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Writes `rec` and its payload (`payload.len()` must be
    /// `rec.payload_len()`). A `BEGIN` restarts the running checksum.
    pub fn write(&mut self, rec: &Record, payload: &[u8]) -> io::Result<()> {
        debug_assert_eq!(payload.len(), rec.payload_len() as usize);
        if matches!(rec, Record::Begin(_)) {
            self.sum = [0; 4];
        }
        let mut b = rec.encode();
        fletcher4_update(&mut self.sum, &b[..RECORD_OFF_CHECKSUM]);
        b[RECORD_OFF_CHECKSUM..].copy_from_slice(&checksum_bytes(&self.sum));
        fletcher4_update(&mut self.sum, &b[RECORD_OFF_CHECKSUM..]);
        self.buf.extend_from_slice(&b);
        self.bytes += RECORD_SIZE as u64;
        if payload.is_empty() {
            if self.buf.len() >= STREAM_BUFFER_BYTES {
                self.flush_buf()?;
            }
            return Ok(());
        }
        let whole = payload.len() & !3;
        fletcher4_update(&mut self.sum, &payload[..whole]);
        let pad = padded_len(payload.len() as u32) - payload.len();
        let mut tail = [0u8; 12];
        let rest = &payload[whole..];
        tail[..rest.len()].copy_from_slice(rest);
        fletcher4_update(&mut self.sum, &tail[..rest.len() + pad]);
        if payload.len() >= STREAM_BUFFER_BYTES {
            self.flush_buf()?;
            self.out.write_all(payload)?;
        } else {
            self.buf.extend_from_slice(payload);
        }
        self.buf.extend_from_slice(&[0u8; 8][..pad]);
        self.bytes += (payload.len() + pad) as u64;
        if self.buf.len() >= STREAM_BUFFER_BYTES {
            self.flush_buf()?;
        }
        Ok(())
    }

    /// Writes out what is buffered and flushes the destination.
    pub fn flush(&mut self) -> io::Result<()> {
        self.flush_buf()?;
        self.out.flush()
    }
}

/// Why a stream could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The stream ended inside a record (or before its END).
    #[error("the stream is truncated (it ended after {0} bytes)")]
    Truncated(u64),
    #[error("the stream is corrupt: {0}")]
    Corrupt(String),
    #[error("checksum mismatch in the stream at byte {0}")]
    Checksum(u64),
}

impl From<Corrupted> for StreamError {
    fn from(c: Corrupted) -> Self {
        StreamError::Corrupt(c.to_string())
    }
}

/// Reads records, checking each one's running checksum. Payload buffers
/// are at most [`STREAM_PAYLOAD_MAX`] bytes whatever a record says. It
/// reads exactly the stream and nothing past its end (a pipe may carry
/// more for the next reader), each payload straight into its own buffer.
pub struct StreamReader<R: Read> {
    input: R,
    sum: [u64; 4],
    bytes: u64,
}

impl<R: Read> StreamReader<R> {
    pub fn new(input: R) -> Self {
        StreamReader {
            input,
            sum: [0; 4],
            bytes: 0,
        }
    }

    /// Bytes read so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Appends exactly `n` bytes of input to `out` (whose capacity the
    /// caller reserved; `read_to_end` fills it without zeroing it first).
    /// `Ok(false)`: the input ended before the first byte.
    fn fill(&mut self, out: &mut Vec<u8>, n: usize) -> Result<bool, StreamError> {
        let start = out.len();
        let want = start + n;
        while out.len() < want {
            let left = (want - out.len()) as u64;
            match (&mut self.input).take(left).read_to_end(out) {
                Ok(0) if out.len() == start => return Ok(false),
                Ok(0) => {
                    return Err(StreamError::Truncated(
                        self.bytes + (out.len() - start) as u64,
                    ))
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.bytes += n as u64;
        Ok(true)
    }

    /// The next record and its payload; `Ok(None)` at a clean end of input
    /// (between records). A truncated record, a checksum mismatch or an
    /// invalid field is an error.
    pub fn next_record(&mut self) -> Result<Option<(Record, Vec<u8>)>, StreamError> {
        let mut head = Vec::with_capacity(RECORD_SIZE);
        if !self.fill(&mut head, RECORD_SIZE)? {
            return Ok(None);
        }
        let b: [u8; RECORD_SIZE] = head.try_into().expect("a whole record");
        let at = self.bytes - RECORD_SIZE as u64;
        let rec = Record::decode(&b)?;
        if matches!(rec, Record::Begin(_)) {
            self.sum = [0; 4];
        }
        fletcher4_update(&mut self.sum, &b[..RECORD_OFF_CHECKSUM]);
        if b[RECORD_OFF_CHECKSUM..] != checksum_bytes(&self.sum) {
            return Err(StreamError::Checksum(at));
        }
        fletcher4_update(&mut self.sum, &b[RECORD_OFF_CHECKSUM..]);
        let len = rec.payload_len() as usize;
        let padded = padded_len(rec.payload_len());
        let mut payload = Vec::with_capacity(padded);
        if padded > 0 {
            if !self.fill(&mut payload, padded)? {
                return Err(StreamError::Truncated(self.bytes));
            }
            fletcher4_update(&mut self.sum, &payload);
            if payload[len..].iter().any(|&x| x != 0) {
                return Err(StreamError::Corrupt("payload padding is not zero".into()));
            }
            payload.truncate(len);
        }
        Ok(Some((rec, payload)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<(Record, Vec<u8>)> {
        vec![
            (
                Record::Begin(Begin {
                    version: STREAM_VERSION,
                    flags: 0,
                    features: 0,
                    toguid: 7,
                    fromguid: 0,
                    creation_time: 1,
                    dstype: DSTYPE_FILESYSTEM,
                    payload_len: 5,
                }),
                b"{...}".to_vec(),
            ),
            (
                Record::Object {
                    object: 3,
                    typ: ObjType::PlainFile,
                    bonus_type: ObjType::None,
                    block_size: 4096,
                    maxblkid: 2,
                    bonus_len: 3,
                },
                vec![1, 2, 3],
            ),
            (
                Record::Write {
                    object: 3,
                    offset: 4096,
                    lsize: 4096,
                    psize: 4096,
                    compression: Compression::Off,
                },
                vec![9; 4096],
            ),
            (
                Record::Free {
                    object: 3,
                    offset: 8192,
                    length: u64::MAX,
                },
                vec![],
            ),
            (Record::FreeObjects { first: 4, count: 2 }, vec![]),
            (Record::End { toguid: 7 }, vec![]),
        ]
    }

    fn encode(recs: &[(Record, Vec<u8>)]) -> Vec<u8> {
        let mut w = StreamWriter::new(Vec::new());
        for (r, p) in recs {
            w.write(r, p).unwrap();
        }
        w.flush().unwrap();
        w.out
    }

    #[test]
    fn records_round_trip_with_their_checksums() {
        let recs = sample();
        let bytes = encode(&recs);
        let mut r = StreamReader::new(&bytes[..]);
        for want in &recs {
            assert_eq!(r.next_record().unwrap().as_ref(), Some(want));
        }
        assert!(r.next_record().unwrap().is_none());
    }

    #[test]
    fn record_layout_is_fixed() {
        let b = Record::Write {
            object: 0x11,
            offset: 0x22,
            lsize: 0x200,
            psize: 0x100,
            compression: Compression::Lz4,
        }
        .encode();
        assert_eq!(u32_at(&b, 0), RECORD_WRITE);
        assert_eq!(u32_at(&b, 4), 0x100);
        assert_eq!(u64_at(&b, 8), 0x11);
        assert_eq!(u64_at(&b, 16), 0x22);
        assert_eq!(u64_at(&b, 24), 0x200);
        assert_eq!(u64_at(&b, 32), u64::from(Compression::Lz4.code()));
        assert_eq!(RECORD_SIZE, 128);
        assert_eq!(RECORD_OFF_CHECKSUM, 96);
        assert_eq!(&STREAM_MAGIC.to_le_bytes(), b"tarnsend");
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_caught() {
        let bytes = encode(&sample());
        let read_all = |b: &[u8]| -> Result<usize, StreamError> {
            let mut r = StreamReader::new(b);
            let mut n = 0;
            while r.next_record()?.is_some() {
                n += 1;
            }
            Ok(n)
        };
        assert_eq!(read_all(&bytes).unwrap(), 6);
        for i in (0..bytes.len()).step_by(7) {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(read_all(&bad).is_err(), "flip at {i} not caught");
        }
        // A cut inside a record is an error; a cut between records is a
        // clean end that the receiver sees as a missing END.
        for cut in 1..bytes.len() {
            match read_all(&bytes[..cut]) {
                Ok(n) => assert!(n < 6),
                Err(StreamError::Truncated(_)) => {}
                Err(e) => panic!("cut at {cut}: {e}"),
            }
        }
    }

    #[test]
    fn lengths_from_the_stream_are_bounded() {
        let mut b = Record::End { toguid: 1 }.encode();
        put_u32(&mut b, 0, RECORD_WRITE);
        put_u32(&mut b, 4, u32::MAX);
        put_u64(&mut b, 24, MAX_BLOCK_SIZE + 1);
        assert!(Record::decode(&b).is_err());
        put_u64(&mut b, 24, 4096);
        assert!(Record::decode(&b).is_err(), "payload larger than lsize");
        let mut b = Record::End { toguid: 1 }.encode();
        put_u32(&mut b, 4, 8);
        assert!(Record::decode(&b).is_err(), "END with a payload");
        put_u32(&mut b, 0, 99);
        assert!(Record::decode(&b).is_err());
    }
}
