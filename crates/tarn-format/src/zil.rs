//! The ZFS Intent Log on disk: the header in each object set, the chain
//! of log blocks it heads, and the records inside them (ZFS's `zil_header_t`,
//! `zil_chain_t` and `lr_*_t`).
//!
//! A dataset's intent log is a singly linked chain of log blocks. The
//! header (in the object set, rewritten at each txg sync) names the chain
//! by a random `guid` and points at the first block still needed. Each
//! block carries the pointer to the next one, allocated before the block
//! is written, so appending is one write (plus a flush) and never
//! rewrites an earlier block. A block is valid only if its magic, chain
//! guid and sequence number are the expected ones and its checksum matches:
//! the chain ends at the first block that is not (an unwritten next block
//! holds stale bytes, a torn one fails the checksum).
//!
//! Records are replayed in sequence order; each carries the txg whose
//! changes it describes, and only records of txgs after the pool's last
//! committed one are replayed.
//!
//! Byte layouts (little-endian):
//!
//! ```text
//! ZIL header (ZIL_HEADER_SIZE = 256 bytes, inside the object set):
//!   0   8  magic   ZIL_HEADER_MAGIC ("tarnZILH"); all-zero = no log yet
//!   8   8  guid    chain guid (nonzero)
//!  16  24  head    LogPtr of the first block to replay (size 0 = none)
//!  40 216  reserved, zero
//!
//! LogPtr (24 bytes):
//!   0   4  vdev    top-level vdev
//!   4   4  size    allocated bytes (a multiple of 512; 0 = no block)
//!   8   8  offset  DVA offset in the vdev
//!  16   8  seq     sequence number the block must carry
//!
//! Log block (size bytes allocated; nused of them written and checked):
//!   0   8  magic     LOG_BLOCK_MAGIC ("tarnZLOG")
//!   8   8  guid      chain guid
//!  16   8  seq       this block's sequence number
//!  24   4  nused     bytes used: header + records
//!  28   4  nrecords
//!  32  24  next      LogPtr of the next block (seq + 1)
//!  56   8  flags     LOG_BLOCK_COMMIT_END: the last block of a commit;
//!                     LOG_BLOCK_FLETCHER4: the checksum is Fletcher-4
//!  64  32  checksum  of bytes 0..nused with this field zeroed: Fletcher-4
//!                     (four u64) if LOG_BLOCK_FLETCHER4, else SHA-256
//!  96   -  records, back to back
//!
//! Record header (32 bytes), then the payload, padded to 8 bytes:
//!   0   4  type    LogRecordType code
//!   4   4  reclen  whole record length, a multiple of 8
//!   8   8  txg     the txg of the change
//!  16   8  seq     record sequence number (increasing through the log)
//!  24   8  obj     the object the record is about (see each type)
//! ```
//!
//! Payloads (after the 32-byte header; `time` = sec i64, nsec u32, pad u32):
//!
//! ```text
//! 1 WRITE        obj = file;  offset u64, len u64, data[len]
//! 2 FREE_RANGE   obj = file;  offset u64, len u64
//! 3 SETATTR      obj = inode; mask u32, mode u32, uid u32, gid u32,
//!                size u64, atime time, mtime time, ctime time
//! 4 CREATE       obj = new inode; dir u64, mode u32, uid u32, gid u32,
//!                name_len u32, rdev u64, gen u64, time,
//!                target_len u32, pad u32, name, target (symlinks)
//! 5 REMOVE       obj = dir;   time, name_len u32, pad u32, name
//! 6 LINK         obj = inode; dir u64, time, name_len u32, pad u32, name
//! 7 RENAME       obj = source dir; target dir u64, time, flags u32,
//!                sname_len u32, tname_len u32, pad u32, sname, tname
//! 8 SETXATTR     obj = inode; time, name_len u32, value_len u32, name, value
//! 9 REMOVEXATTR  obj = inode; time, name_len u32, pad u32, name
//! ```

use sha2::{Digest, Sha256};

use crate::fletcher4::fletcher4;
use crate::le::{put_u32, put_u64, u32_at, u64_at};
use crate::objset::ZIL_HEADER_SIZE;
use crate::{BlockPtr, Corrupted, BLKPTR_SIZE};

/// "tarnZILH" read as a little-endian u64.
pub const ZIL_HEADER_MAGIC: u64 = u64::from_le_bytes(*b"tarnZILH");
/// "tarnZLOG" read as a little-endian u64.
pub const LOG_BLOCK_MAGIC: u64 = u64::from_le_bytes(*b"tarnZLOG");
pub const LOG_PTR_SIZE: usize = 24;
pub const LOG_BLOCK_HEADER_SIZE: usize = 96;
pub const LOG_RECORD_HEADER_SIZE: usize = 32;

pub const ZH_OFF_MAGIC: usize = 0;
pub const ZH_OFF_GUID: usize = 8;
pub const ZH_OFF_HEAD: usize = 16;

pub const LB_OFF_MAGIC: usize = 0;
pub const LB_OFF_GUID: usize = 8;
pub const LB_OFF_SEQ: usize = 16;
pub const LB_OFF_NUSED: usize = 24;
pub const LB_OFF_NRECORDS: usize = 28;
pub const LB_OFF_NEXT: usize = 32;
pub const LB_OFF_FLAGS: usize = 56;
pub const LB_OFF_CHECKSUM: usize = 64;

/// Block flag: this block ends a commit. Replay applies the records of
/// whole commits only, so a crash in the middle of a multi-block commit
/// (never acknowledged) cannot leave half of it applied.
pub const LOG_BLOCK_COMMIT_END: u64 = 1;

/// Block flag: the checksum is Fletcher-4 (its four accumulators as
/// little-endian u64s), not SHA-256. Every block this build writes has it.
/// A log block only has to tell a complete write of this chain from a
/// torn or stale one (the guid and sequence number already rule out other
/// chains' blocks), which is what OpenZFS uses Fletcher-4 for in its log
/// blocks too; SHA-256 took a sixth of the CPU of the threads serving
/// fsyncs (16 KiB writes, 8 threads, log device in RAM), Fletcher-4 runs
/// at memory speed. Blocks without the flag (written before it) still
/// decode. It is an encoding detail: [`decode_log_block`] strips it and
/// [`encode_log_block`] sets it, so [`LogBlockHeader::flags`] never holds it.
pub const LOG_BLOCK_FLETCHER4: u64 = 2;

/// `SETATTR` mask bits: which fields of the record apply.
pub const LOG_ATTR_MODE: u32 = 1;
pub const LOG_ATTR_UID: u32 = 2;
pub const LOG_ATTR_GID: u32 = 4;
pub const LOG_ATTR_SIZE: u32 = 8;
pub const LOG_ATTR_ATIME: u32 = 16;
pub const LOG_ATTR_MTIME: u32 = 32;
pub const LOG_ATTR_CTIME: u32 = 64;

/// Where a log block lives and which sequence number it must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct LogPtr {
    pub vdev: u32,
    /// Allocated bytes; 0 means "no block".
    pub size: u32,
    pub offset: u64,
    pub seq: u64,
}

impl LogPtr {
    pub fn is_none(&self) -> bool {
        self.size == 0
    }

    pub fn encode(&self, b: &mut [u8]) {
        put_u32(b, 0, self.vdev);
        put_u32(b, 4, self.size);
        put_u64(b, 8, self.offset);
        put_u64(b, 16, self.seq);
    }

    pub fn decode(b: &[u8]) -> Result<LogPtr, Corrupted> {
        if b.len() < LOG_PTR_SIZE {
            return Err(Corrupted::new("log pointer", "short"));
        }
        let p = LogPtr {
            vdev: u32_at(b, 0),
            size: u32_at(b, 4),
            offset: u64_at(b, 8),
            seq: u64_at(b, 16),
        };
        if !p.size.is_multiple_of(512) {
            return Err(Corrupted::new("log pointer", format!("size {}", p.size)));
        }
        Ok(p)
    }
}

/// The intent log header of an object set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ZilHeader {
    /// 0 = no chain yet.
    pub guid: u64,
    pub head: LogPtr,
}

impl ZilHeader {
    pub fn encode(&self) -> [u8; ZIL_HEADER_SIZE] {
        let mut b = [0u8; ZIL_HEADER_SIZE];
        if self.guid == 0 && self.head.is_none() {
            return b;
        }
        put_u64(&mut b, ZH_OFF_MAGIC, ZIL_HEADER_MAGIC);
        put_u64(&mut b, ZH_OFF_GUID, self.guid);
        self.head
            .encode(&mut b[ZH_OFF_HEAD..ZH_OFF_HEAD + LOG_PTR_SIZE]);
        b
    }

    pub fn decode(b: &[u8; ZIL_HEADER_SIZE]) -> Result<ZilHeader, Corrupted> {
        if b.iter().all(|&x| x == 0) {
            return Ok(ZilHeader::default());
        }
        if u64_at(b, ZH_OFF_MAGIC) != ZIL_HEADER_MAGIC {
            return Err(Corrupted::new("zil header", "bad magic"));
        }
        let guid = u64_at(b, ZH_OFF_GUID);
        if guid == 0 {
            return Err(Corrupted::new("zil header", "zero guid"));
        }
        let head = LogPtr::decode(&b[ZH_OFF_HEAD..])?;
        Ok(ZilHeader { guid, head })
    }
}

/// The fixed part of a log block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogBlockHeader {
    pub guid: u64,
    pub seq: u64,
    pub nrecords: u32,
    pub next: LogPtr,
    /// `LOG_BLOCK_COMMIT_END` or 0.
    pub flags: u64,
}

/// A log block of `header` and the encoded `records`, checksummed; its
/// length is `LOG_BLOCK_HEADER_SIZE + records.len()` (the `nused`), which
/// the caller pads to whole sectors when writing.
pub fn encode_log_block(header: &LogBlockHeader, records: &[u8]) -> Vec<u8> {
    let nused = LOG_BLOCK_HEADER_SIZE + records.len();
    let mut b = vec![0u8; nused];
    put_u64(&mut b, LB_OFF_MAGIC, LOG_BLOCK_MAGIC);
    put_u64(&mut b, LB_OFF_GUID, header.guid);
    put_u64(&mut b, LB_OFF_SEQ, header.seq);
    put_u32(&mut b, LB_OFF_NUSED, nused as u32);
    put_u32(&mut b, LB_OFF_NRECORDS, header.nrecords);
    header
        .next
        .encode(&mut b[LB_OFF_NEXT..LB_OFF_NEXT + LOG_PTR_SIZE]);
    put_u64(&mut b, LB_OFF_FLAGS, header.flags | LOG_BLOCK_FLETCHER4);
    b[LOG_BLOCK_HEADER_SIZE..].copy_from_slice(records);
    // The checksum field is still zero, as the checksum is defined.
    let sum = fletcher4_bytes(&b);
    b[LB_OFF_CHECKSUM..LB_OFF_CHECKSUM + 32].copy_from_slice(&sum);
    b
}

/// The checksum `b` (a whole block, `nused` bytes) should carry, with the
/// algorithm its flags name.
fn block_checksum(b: &[u8], flags: u64) -> [u8; 32] {
    if flags & LOG_BLOCK_FLETCHER4 != 0 {
        let mut zeroed = b.to_vec();
        zeroed[LB_OFF_CHECKSUM..LB_OFF_CHECKSUM + 32].fill(0);
        fletcher4_bytes(&zeroed)
    } else {
        let mut h = Sha256::new();
        h.update(&b[..LB_OFF_CHECKSUM]);
        h.update([0u8; 32]);
        h.update(&b[LB_OFF_CHECKSUM + 32..]);
        h.finalize().into()
    }
}

fn fletcher4_bytes(b: &[u8]) -> [u8; 32] {
    let words = fletcher4(b);
    let mut out = [0u8; 32];
    for (i, w) in words.iter().enumerate() {
        put_u64(&mut out, 8 * i, *w);
    }
    out
}

/// Checks a block read from `LogPtr { seq, .. }` of chain `guid` and
/// returns its header and record bytes. Any mismatch means "the chain
/// ends here".
pub fn decode_log_block(
    buf: &[u8],
    guid: u64,
    seq: u64,
) -> Result<(LogBlockHeader, &[u8]), Corrupted> {
    let bad = |why: String| Err(Corrupted::new("log block", why));
    if buf.len() < LOG_BLOCK_HEADER_SIZE {
        return bad(format!("{} bytes", buf.len()));
    }
    if u64_at(buf, LB_OFF_MAGIC) != LOG_BLOCK_MAGIC {
        return bad("bad magic".into());
    }
    if u64_at(buf, LB_OFF_GUID) != guid || u64_at(buf, LB_OFF_SEQ) != seq {
        return bad("from another chain or position".into());
    }
    let nused = u32_at(buf, LB_OFF_NUSED) as usize;
    if !(LOG_BLOCK_HEADER_SIZE..=buf.len()).contains(&nused) {
        return bad(format!("nused {nused} of {}", buf.len()));
    }
    let b = &buf[..nused];
    let raw_flags = u64_at(b, LB_OFF_FLAGS);
    if raw_flags & !(LOG_BLOCK_COMMIT_END | LOG_BLOCK_FLETCHER4) != 0 {
        return bad(format!("unknown flags {raw_flags:#x}"));
    }
    if block_checksum(b, raw_flags)[..] != b[LB_OFF_CHECKSUM..LB_OFF_CHECKSUM + 32] {
        return bad("checksum mismatch".into());
    }
    let next = LogPtr::decode(&b[LB_OFF_NEXT..])?;
    if !next.is_none() && next.seq != seq + 1 {
        return bad(format!("next seq {} after {seq}", next.seq));
    }
    let flags = raw_flags & !LOG_BLOCK_FLETCHER4;
    let header = LogBlockHeader {
        guid,
        seq,
        nrecords: u32_at(b, LB_OFF_NRECORDS),
        next,
        flags,
    };
    Ok((header, &b[LOG_BLOCK_HEADER_SIZE..]))
}

/// A timestamp in a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogTime {
    pub sec: i64,
    pub nsec: u32,
}

/// What `SETATTR` sets (fields outside `mask` are ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogSetattr {
    pub mask: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime: LogTime,
    pub mtime: LogTime,
    pub ctime: LogTime,
}

/// One logged change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogRecord {
    Write {
        obj: u64,
        offset: u64,
        data: Vec<u8>,
    },
    FreeRange {
        obj: u64,
        offset: u64,
        len: u64,
    },
    Setattr {
        obj: u64,
        attr: LogSetattr,
    },
    Create {
        dir: u64,
        obj: u64,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        gen: u64,
        time: LogTime,
        name: Vec<u8>,
        target: Vec<u8>,
    },
    Remove {
        dir: u64,
        name: Vec<u8>,
        time: LogTime,
    },
    Link {
        dir: u64,
        obj: u64,
        name: Vec<u8>,
        time: LogTime,
    },
    Rename {
        sdir: u64,
        sname: Vec<u8>,
        tdir: u64,
        tname: Vec<u8>,
        flags: u32,
        time: LogTime,
    },
    Setxattr {
        obj: u64,
        name: Vec<u8>,
        value: Vec<u8>,
        time: LogTime,
    },
    Removexattr {
        obj: u64,
        name: Vec<u8>,
        time: LogTime,
    },
    /// A whole block written in place before the commit (ZFS's
    /// `WR_INDIRECT`): the record carries its pointer, not its bytes.
    /// `offset` is the block's file offset; `bp.lsize` its length.
    WriteIndirect {
        obj: u64,
        offset: u64,
        bp: BlockPtr,
    },
}

/// Record type codes.
pub const LR_WRITE: u32 = 1;
pub const LR_FREE_RANGE: u32 = 2;
pub const LR_SETATTR: u32 = 3;
pub const LR_CREATE: u32 = 4;
pub const LR_REMOVE: u32 = 5;
pub const LR_LINK: u32 = 6;
pub const LR_RENAME: u32 = 7;
pub const LR_SETXATTR: u32 = 8;
pub const LR_REMOVEXATTR: u32 = 9;
pub const LR_WRITE_INDIRECT: u32 = 10;

/// A record as read back: the change, its txg and sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedRecord {
    pub txg: u64,
    pub seq: u64,
    pub record: LogRecord,
}

struct Out(Vec<u8>);

impl Out {
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn time(&mut self, t: LogTime) {
        self.u64(t.sec as u64);
        self.u32(t.nsec);
        self.u32(0);
    }
    fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
}

impl LogRecord {
    pub fn type_code(&self) -> u32 {
        match self {
            LogRecord::Write { .. } => LR_WRITE,
            LogRecord::FreeRange { .. } => LR_FREE_RANGE,
            LogRecord::Setattr { .. } => LR_SETATTR,
            LogRecord::Create { .. } => LR_CREATE,
            LogRecord::Remove { .. } => LR_REMOVE,
            LogRecord::Link { .. } => LR_LINK,
            LogRecord::Rename { .. } => LR_RENAME,
            LogRecord::Setxattr { .. } => LR_SETXATTR,
            LogRecord::Removexattr { .. } => LR_REMOVEXATTR,
            LogRecord::WriteIndirect { .. } => LR_WRITE_INDIRECT,
        }
    }

    /// The object in the record header.
    pub fn object(&self) -> u64 {
        match self {
            LogRecord::Write { obj, .. }
            | LogRecord::FreeRange { obj, .. }
            | LogRecord::Setattr { obj, .. }
            | LogRecord::Create { obj, .. }
            | LogRecord::Link { obj, .. }
            | LogRecord::Setxattr { obj, .. }
            | LogRecord::Removexattr { obj, .. }
            | LogRecord::WriteIndirect { obj, .. } => *obj,
            LogRecord::Remove { dir, .. } => *dir,
            LogRecord::Rename { sdir, .. } => *sdir,
        }
    }

    /// The encoded length: header, payload, padding to 8 bytes.
    pub fn encoded_len(&self) -> usize {
        let payload = match self {
            LogRecord::Write { data, .. } => 16 + data.len(),
            LogRecord::FreeRange { .. } => 16,
            LogRecord::Setattr { .. } => 72,
            LogRecord::Create { name, target, .. } => 64 + name.len() + target.len(),
            LogRecord::Remove { name, .. } => 24 + name.len(),
            LogRecord::Link { name, .. } => 32 + name.len(),
            LogRecord::Rename { sname, tname, .. } => 40 + sname.len() + tname.len(),
            LogRecord::Setxattr { name, value, .. } => 24 + name.len() + value.len(),
            LogRecord::Removexattr { name, .. } => 24 + name.len(),
            LogRecord::WriteIndirect { .. } => 8 + BLKPTR_SIZE,
        };
        (LOG_RECORD_HEADER_SIZE + payload).next_multiple_of(8)
    }

    /// Appends the encoded record (txg and sequence number included).
    pub fn encode_into(&self, txg: u64, seq: u64, out: &mut Vec<u8>) {
        let start = out.len();
        let len = self.encoded_len();
        let mut o = Out(std::mem::take(out));
        o.u32(self.type_code());
        o.u32(len as u32);
        o.u64(txg);
        o.u64(seq);
        o.u64(self.object());
        match self {
            LogRecord::Write { offset, data, .. } => {
                o.u64(*offset);
                o.u64(data.len() as u64);
                o.bytes(data);
            }
            LogRecord::FreeRange { offset, len, .. } => {
                o.u64(*offset);
                o.u64(*len);
            }
            LogRecord::Setattr { attr, .. } => {
                o.u32(attr.mask);
                o.u32(attr.mode);
                o.u32(attr.uid);
                o.u32(attr.gid);
                o.u64(attr.size);
                o.time(attr.atime);
                o.time(attr.mtime);
                o.time(attr.ctime);
            }
            LogRecord::Create {
                dir,
                mode,
                uid,
                gid,
                rdev,
                gen,
                time,
                name,
                target,
                ..
            } => {
                o.u64(*dir);
                o.u32(*mode);
                o.u32(*uid);
                o.u32(*gid);
                o.u32(name.len() as u32);
                o.u64(*rdev);
                o.u64(*gen);
                o.time(*time);
                o.u32(target.len() as u32);
                o.u32(0);
                o.bytes(name);
                o.bytes(target);
            }
            LogRecord::Remove { name, time, .. } => {
                o.time(*time);
                o.u32(name.len() as u32);
                o.u32(0);
                o.bytes(name);
            }
            LogRecord::Link {
                dir, name, time, ..
            } => {
                o.u64(*dir);
                o.time(*time);
                o.u32(name.len() as u32);
                o.u32(0);
                o.bytes(name);
            }
            LogRecord::Rename {
                sname,
                tdir,
                tname,
                flags,
                time,
                ..
            } => {
                o.u64(*tdir);
                o.time(*time);
                o.u32(*flags);
                o.u32(sname.len() as u32);
                o.u32(tname.len() as u32);
                o.u32(0);
                o.bytes(sname);
                o.bytes(tname);
            }
            LogRecord::Setxattr {
                name, value, time, ..
            } => {
                o.time(*time);
                o.u32(name.len() as u32);
                o.u32(value.len() as u32);
                o.bytes(name);
                o.bytes(value);
            }
            LogRecord::Removexattr { name, time, .. } => {
                o.time(*time);
                o.u32(name.len() as u32);
                o.u32(0);
                o.bytes(name);
            }
            LogRecord::WriteIndirect { offset, bp, .. } => {
                o.u64(*offset);
                o.bytes(&bp.encode());
            }
        }
        o.0.resize(start + len, 0);
        *out = o.0;
    }
}

/// A bounds-checked reader over one record's payload.
struct In<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> In<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Corrupted> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| Corrupted::new("log record", "payload runs past its length"))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, Corrupted> {
        Ok(u32_at(self.take(4)?, 0))
    }
    fn u64(&mut self) -> Result<u64, Corrupted> {
        Ok(u64_at(self.take(8)?, 0))
    }
    fn time(&mut self) -> Result<LogTime, Corrupted> {
        let sec = self.u64()? as i64;
        let nsec = self.u32()?;
        self.u32()?;
        if nsec >= 1_000_000_000 {
            return Err(Corrupted::new("log record", format!("nsec {nsec}")));
        }
        Ok(LogTime { sec, nsec })
    }
    fn vec(&mut self, n: u32) -> Result<Vec<u8>, Corrupted> {
        Ok(self.take(n as usize)?.to_vec())
    }
}

/// Decodes every record of a block's record area. Lengths come from disk
/// and are all checked; nothing here can panic on bad bytes.
pub fn decode_records(area: &[u8]) -> Result<Vec<LoggedRecord>, Corrupted> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < area.len() {
        let rest = &area[at..];
        if rest.len() < LOG_RECORD_HEADER_SIZE {
            return Err(Corrupted::new("log record", "truncated header"));
        }
        let typ = u32_at(rest, 0);
        let reclen = u32_at(rest, 4) as usize;
        if reclen < LOG_RECORD_HEADER_SIZE || !reclen.is_multiple_of(8) || reclen > rest.len() {
            return Err(Corrupted::new("log record", format!("length {reclen}")));
        }
        let txg = u64_at(rest, 8);
        let seq = u64_at(rest, 16);
        let obj = u64_at(rest, 24);
        let mut i = In {
            b: &rest[LOG_RECORD_HEADER_SIZE..reclen],
            at: 0,
        };
        let record = match typ {
            LR_WRITE => {
                let offset = i.u64()?;
                let len = i.u64()?;
                let len =
                    u32::try_from(len).map_err(|_| Corrupted::new("log record", "write length"))?;
                LogRecord::Write {
                    obj,
                    offset,
                    data: i.vec(len)?,
                }
            }
            LR_FREE_RANGE => LogRecord::FreeRange {
                obj,
                offset: i.u64()?,
                len: i.u64()?,
            },
            LR_SETATTR => {
                let attr = LogSetattr {
                    mask: i.u32()?,
                    mode: i.u32()?,
                    uid: i.u32()?,
                    gid: i.u32()?,
                    size: i.u64()?,
                    atime: i.time()?,
                    mtime: i.time()?,
                    ctime: i.time()?,
                };
                LogRecord::Setattr { obj, attr }
            }
            LR_CREATE => {
                let dir = i.u64()?;
                let mode = i.u32()?;
                let uid = i.u32()?;
                let gid = i.u32()?;
                let name_len = i.u32()?;
                let rdev = i.u64()?;
                let gen = i.u64()?;
                let time = i.time()?;
                let target_len = i.u32()?;
                i.u32()?;
                LogRecord::Create {
                    dir,
                    obj,
                    mode,
                    uid,
                    gid,
                    rdev,
                    gen,
                    time,
                    name: i.vec(name_len)?,
                    target: i.vec(target_len)?,
                }
            }
            LR_REMOVE => {
                let time = i.time()?;
                let n = i.u32()?;
                i.u32()?;
                LogRecord::Remove {
                    dir: obj,
                    name: i.vec(n)?,
                    time,
                }
            }
            LR_LINK => {
                let dir = i.u64()?;
                let time = i.time()?;
                let n = i.u32()?;
                i.u32()?;
                LogRecord::Link {
                    dir,
                    obj,
                    name: i.vec(n)?,
                    time,
                }
            }
            LR_RENAME => {
                let tdir = i.u64()?;
                let time = i.time()?;
                let flags = i.u32()?;
                let sn = i.u32()?;
                let tn = i.u32()?;
                i.u32()?;
                LogRecord::Rename {
                    sdir: obj,
                    sname: i.vec(sn)?,
                    tdir,
                    tname: i.vec(tn)?,
                    flags,
                    time,
                }
            }
            LR_SETXATTR => {
                let time = i.time()?;
                let n = i.u32()?;
                let v = i.u32()?;
                LogRecord::Setxattr {
                    obj,
                    name: i.vec(n)?,
                    value: i.vec(v)?,
                    time,
                }
            }
            LR_REMOVEXATTR => {
                let time = i.time()?;
                let n = i.u32()?;
                i.u32()?;
                LogRecord::Removexattr {
                    obj,
                    name: i.vec(n)?,
                    time,
                }
            }
            LR_WRITE_INDIRECT => {
                let offset = i.u64()?;
                let bp = BlockPtr::decode(i.take(BLKPTR_SIZE)?)?;
                if bp.is_hole() || bp.level != 0 {
                    return Err(Corrupted::new("log record", "indirect write pointer"));
                }
                LogRecord::WriteIndirect { obj, offset, bp }
            }
            t => return Err(Corrupted::new("log record", format!("unknown type {t}"))),
        };
        out.push(LoggedRecord { txg, seq, record });
        at += reclen;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(sec: i64) -> LogTime {
        LogTime { sec, nsec: 7 }
    }

    fn every_record() -> Vec<LogRecord> {
        vec![
            LogRecord::Write {
                obj: 5,
                offset: 4096,
                data: b"hello".to_vec(),
            },
            LogRecord::FreeRange {
                obj: 5,
                offset: 1,
                len: u64::MAX,
            },
            LogRecord::Setattr {
                obj: 6,
                attr: LogSetattr {
                    mask: LOG_ATTR_MODE | LOG_ATTR_SIZE | LOG_ATTR_MTIME,
                    mode: 0o100644,
                    uid: 1,
                    gid: 2,
                    size: 99,
                    atime: t(1),
                    mtime: t(2),
                    ctime: t(3),
                },
            },
            LogRecord::Create {
                dir: 4,
                obj: 9,
                mode: 0o120777,
                uid: 3,
                gid: 4,
                rdev: 0,
                gen: 12,
                time: t(4),
                name: b"link".to_vec(),
                target: b"../somewhere".to_vec(),
            },
            LogRecord::Remove {
                dir: 4,
                name: b"gone".to_vec(),
                time: t(5),
            },
            LogRecord::Link {
                dir: 4,
                obj: 9,
                name: b"again".to_vec(),
                time: t(6),
            },
            LogRecord::Rename {
                sdir: 4,
                sname: b"a".to_vec(),
                tdir: 8,
                tname: b"bb".to_vec(),
                flags: 2,
                time: t(7),
            },
            LogRecord::Setxattr {
                obj: 9,
                name: b"user.x".to_vec(),
                value: vec![0xab; 300],
                time: t(8),
            },
            LogRecord::Removexattr {
                obj: 9,
                name: b"user.x".to_vec(),
                time: t(9),
            },
            LogRecord::WriteIndirect {
                obj: 5,
                offset: 1 << 20,
                bp: sample_bp(),
            },
        ]
    }

    fn sample_bp() -> BlockPtr {
        let mut bp = BlockPtr {
            lsize: 128 << 10,
            psize: 4096,
            comp: crate::Compression::Lz4,
            cksum: crate::ChecksumAlg::Fletcher4,
            typ: crate::ObjType::PlainFile,
            birth: 77,
            phys_birth: 77,
            fill: 1,
            checksum: [1, 2, 3, 4],
            ..BlockPtr::HOLE
        };
        bp.dvas[0] = crate::Dva {
            vdev: 1,
            asize_sectors: 8,
            offset: 1 << 30,
        };
        bp
    }

    #[test]
    fn records_round_trip_and_are_padded() {
        let mut area = Vec::new();
        for (i, r) in every_record().iter().enumerate() {
            let before = area.len();
            r.encode_into(100 + i as u64, 1000 + i as u64, &mut area);
            assert_eq!(area.len() - before, r.encoded_len());
            assert_eq!(r.encoded_len() % 8, 0);
        }
        let back = decode_records(&area).unwrap();
        assert_eq!(back.len(), every_record().len());
        for (i, (got, want)) in back.iter().zip(every_record()).enumerate() {
            assert_eq!(got.record, want);
            assert_eq!((got.txg, got.seq), (100 + i as u64, 1000 + i as u64));
        }
    }

    #[test]
    fn write_record_layout() {
        let mut b = Vec::new();
        LogRecord::Write {
            obj: 0x0102,
            offset: 0x0304,
            data: vec![0xee; 3],
        }
        .encode_into(7, 8, &mut b);
        assert_eq!(b.len(), 56);
        assert_eq!(u32_at(&b, 0), LR_WRITE);
        assert_eq!(u32_at(&b, 4), 56);
        assert_eq!(u64_at(&b, 8), 7);
        assert_eq!(u64_at(&b, 16), 8);
        assert_eq!(u64_at(&b, 24), 0x0102);
        assert_eq!(u64_at(&b, 32), 0x0304);
        assert_eq!(u64_at(&b, 40), 3);
        assert_eq!(&b[48..51], &[0xee; 3]);
        assert_eq!(&b[51..], &[0; 5]);
    }

    #[test]
    fn write_indirect_record_layout() {
        let mut b = Vec::new();
        let bp = sample_bp();
        LogRecord::WriteIndirect {
            obj: 0x0102,
            offset: 0x20000,
            bp,
        }
        .encode_into(7, 8, &mut b);
        assert_eq!(b.len(), 32 + 8 + BLKPTR_SIZE);
        assert_eq!(u32_at(&b, 0), LR_WRITE_INDIRECT);
        assert_eq!(u32_at(&b, 4) as usize, b.len());
        assert_eq!(u64_at(&b, 24), 0x0102);
        assert_eq!(u64_at(&b, 32), 0x20000);
        assert_eq!(&b[40..], &bp.encode()[..]);
        // A hole is no pointer to replay from.
        let mut hole = b.clone();
        hole[40..].fill(0);
        assert!(decode_records(&hole).is_err());
    }

    #[test]
    fn header_layout_and_empty_header() {
        assert_eq!(
            ZilHeader::decode(&[0; ZIL_HEADER_SIZE]).unwrap(),
            ZilHeader::default()
        );
        assert_eq!(ZilHeader::default().encode(), [0; ZIL_HEADER_SIZE]);
        let h = ZilHeader {
            guid: 0xabcdef,
            head: LogPtr {
                vdev: 1,
                size: 8192,
                offset: 0x10000,
                seq: 3,
            },
        };
        let b = h.encode();
        assert_eq!(&b[0..8], b"tarnZILH");
        assert_eq!(u64_at(&b, 8), 0xabcdef);
        assert_eq!(u32_at(&b, 16), 1);
        assert_eq!(u32_at(&b, 20), 8192);
        assert_eq!(u64_at(&b, 24), 0x10000);
        assert_eq!(u64_at(&b, 32), 3);
        assert!(b[40..].iter().all(|&x| x == 0));
        assert_eq!(ZilHeader::decode(&b).unwrap(), h);
        let mut bad = b;
        bad[0] ^= 1;
        assert!(ZilHeader::decode(&bad).is_err());
    }

    /// Block 5 of chain 42 holding one record and ending a commit, and
    /// its record bytes.
    fn one_record_block(next: LogPtr) -> (LogBlockHeader, Vec<u8>) {
        let mut recs = Vec::new();
        every_record()[0].encode_into(1, 1, &mut recs);
        let h = LogBlockHeader {
            guid: 42,
            seq: 5,
            nrecords: 1,
            next,
            flags: LOG_BLOCK_COMMIT_END,
        };
        (h, recs)
    }

    #[test]
    fn blocks_check_magic_chain_position_and_checksum() {
        let next = LogPtr {
            vdev: 0,
            size: 4096,
            offset: 8192,
            seq: 6,
        };
        let (h, recs) = one_record_block(next);
        let mut b = encode_log_block(&h, &recs);
        assert_eq!(b.len(), LOG_BLOCK_HEADER_SIZE + recs.len());
        assert_eq!(&b[0..8], b"tarnZLOG");
        assert_eq!(u64_at(&b, 8), 42);
        assert_eq!(u64_at(&b, 16), 5);
        assert_eq!(u32_at(&b, 24) as usize, b.len());
        assert_eq!(u32_at(&b, 28), 1);
        assert_eq!(LogPtr::decode(&b[32..]).unwrap(), next);
        assert_eq!(u64_at(&b, 56), LOG_BLOCK_COMMIT_END | LOG_BLOCK_FLETCHER4);
        let mut zeroed = b.clone();
        zeroed[64..96].fill(0);
        let words = fletcher4(&zeroed);
        for (i, w) in words.iter().enumerate() {
            assert_eq!(u64_at(&b, 64 + 8 * i), *w, "checksum word {i}");
        }
        // Stale bytes after nused (an allocated block is written short).
        b.resize(4096, 0x5a);
        let (got, area) = decode_log_block(&b, 42, 5).unwrap();
        assert_eq!(got, h);
        assert_eq!(area, &recs[..]);
        assert!(decode_log_block(&b, 43, 5).is_err(), "other chain");
        assert!(decode_log_block(&b, 42, 6).is_err(), "other position");
        let mut torn = b.clone();
        torn[LOG_BLOCK_HEADER_SIZE + 40] ^= 0x10;
        assert!(decode_log_block(&torn, 42, 5).is_err(), "torn");
        assert!(decode_log_block(&b[..50], 42, 5).is_err());
        let mut flag_flipped = b.clone();
        flag_flipped[56] ^= LOG_BLOCK_FLETCHER4 as u8;
        assert!(decode_log_block(&flag_flipped, 42, 5).is_err(), "flag torn");
    }

    /// Blocks written before `LOG_BLOCK_FLETCHER4` carry SHA-256 and no
    /// flag; they still decode (a pool's log after an upgrade).
    #[test]
    fn sha256_blocks_still_decode() {
        let (h, recs) = one_record_block(LogPtr::default());
        let mut b = encode_log_block(&h, &recs);
        put_u64(&mut b, LB_OFF_FLAGS, LOG_BLOCK_COMMIT_END);
        b[LB_OFF_CHECKSUM..LB_OFF_CHECKSUM + 32].fill(0);
        let digest: [u8; 32] = Sha256::digest(&b).into();
        b[LB_OFF_CHECKSUM..LB_OFF_CHECKSUM + 32].copy_from_slice(&digest);
        let (got, area) = decode_log_block(&b, 42, 5).unwrap();
        assert_eq!(got, h);
        assert_eq!(area, &recs[..]);
        // The flag set on a SHA-256 block: the checksum no longer matches.
        put_u64(
            &mut b,
            LB_OFF_FLAGS,
            LOG_BLOCK_COMMIT_END | LOG_BLOCK_FLETCHER4,
        );
        assert!(decode_log_block(&b, 42, 5).is_err());
        let mut torn = b.clone();
        put_u64(&mut torn, LB_OFF_FLAGS, LOG_BLOCK_COMMIT_END);
        torn[LOG_BLOCK_HEADER_SIZE + 3] ^= 1;
        assert!(decode_log_block(&torn, 42, 5).is_err());
    }

    #[test]
    fn decoders_never_panic_on_garbage() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut good = Vec::new();
        for (i, r) in every_record().iter().enumerate() {
            r.encode_into(1, i as u64, &mut good);
        }
        for _ in 0..20_000 {
            let mut b = good.clone();
            let n = (next() % 8) as usize + 1;
            for _ in 0..n {
                let at = (next() as usize) % b.len();
                b[at] = next() as u8;
            }
            let cut = (next() as usize) % (b.len() + 1);
            let _ = decode_records(&b[..cut]);
            let _ = decode_log_block(&b[..cut], 1, 1);
            let _ = LogPtr::decode(&b[..cut.min(30)]);
        }
    }
}
