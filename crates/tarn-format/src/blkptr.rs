//! Block pointers: the edges of the Merkle tree.
//!
//! A block pointer names up to three copies of one block (DVAs), its sizes,
//! how it is compressed and checksummed, and the checksum of the *child's*
//! stored bytes. Because every parent carries the checksum of its children,
//! from the uberblock down, a block read through a valid chain of pointers
//! is exactly the block that was written — or the read reports corruption.
//!
//! Byte layout (128 bytes, little-endian):
//!
//! ```text
//! off  size  field
//!   0    16  dva[0]   (see Dva)
//!  16    16  dva[1]
//!  32    16  dva[2]
//!  48     4  lsize      logical (uncompressed) size in bytes
//!  52     4  psize      physical (stored, compressed) size in bytes
//!  56     1  comp       Compression code
//!  57     1  cksum      ChecksumAlg code
//!  58     1  type       ObjType code
//!  59     1  level      0 = data, n = indirect block n levels above data
//!  60     4  reserved   zero
//!  64     8  birth      logical birth txg (the txg that wrote this block)
//!  72     8  phys_birth txg the data was physically written (== birth today)
//!  80     8  fill       data blocks (or allocated dnodes) beneath this pointer
//!  88     8  reserved   zero
//!  96    32  checksum   4 x u64, of the psize stored bytes
//! ```
//!
//! A *hole* is a pointer whose bytes are all zero. Birth txgs are what the
//! snapshot layer uses to decide whether a freed block is still referenced by
//! a snapshot (birth <= snapshot txg → it goes to the dead list instead of
//! being freed), so every pointer carries its birth from format v1 on.

use crate::le::{put_u32, put_u64, u32_at, u64_at};
use crate::{Corrupted, MAX_BLOCK_SIZE, SECTOR_SIZE};

pub const BLKPTR_SIZE: usize = 128;
pub const DVA_SIZE: usize = 16;
/// Copies a block pointer can name (`copies=1..3`).
pub const MAX_DVAS: usize = 3;

pub const BP_OFF_DVA: usize = 0;
pub const BP_OFF_LSIZE: usize = 48;
pub const BP_OFF_PSIZE: usize = 52;
pub const BP_OFF_COMP: usize = 56;
pub const BP_OFF_CKSUM: usize = 57;
pub const BP_OFF_TYPE: usize = 58;
pub const BP_OFF_LEVEL: usize = 59;
pub const BP_OFF_BIRTH: usize = 64;
pub const BP_OFF_PHYS_BIRTH: usize = 72;
pub const BP_OFF_FILL: usize = 80;
pub const BP_OFF_CHECKSUM: usize = 96;

/// Deepest indirection a block tree may have. With 128 KiB indirect blocks
/// (1024 pointers) six levels address far more than 2^64 bytes.
pub const MAX_LEVEL: u8 = 8;

/// A data virtual address: one copy of a block on one top-level vdev.
///
/// ```text
/// off size field
///   0    4 vdev        top-level vdev index in the pool
///   4    4 asize       allocated size in 512-byte sectors (0 = empty DVA)
///   8    8 offset      byte offset into the vdev's allocatable space
///                      (after the front labels), a multiple of 512
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Dva {
    pub vdev: u32,
    pub asize_sectors: u32,
    pub offset: u64,
}

impl Dva {
    pub fn is_empty(&self) -> bool {
        self.asize_sectors == 0
    }
    pub fn asize(&self) -> u64 {
        u64::from(self.asize_sectors) * SECTOR_SIZE
    }
    pub fn encode(&self, out: &mut [u8]) {
        put_u32(out, 0, self.vdev);
        put_u32(out, 4, self.asize_sectors);
        put_u64(out, 8, self.offset);
    }
    pub fn decode(b: &[u8]) -> Result<Dva, Corrupted> {
        let dva = Dva {
            vdev: u32_at(b, 0),
            asize_sectors: u32_at(b, 4),
            offset: u64_at(b, 8),
        };
        if !dva.offset.is_multiple_of(SECTOR_SIZE) {
            return Err(Corrupted::new(
                "dva",
                format!("offset {} not sector aligned", dva.offset),
            ));
        }
        if dva.is_empty() && (dva.vdev != 0 || dva.offset != 0) {
            return Err(Corrupted::new("dva", "empty DVA with non-zero fields"));
        }
        Ok(dva)
    }
}

/// Checksum algorithms. `Off` is allowed only for user data; metadata is
/// always checksummed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ChecksumAlg {
    Off,
    #[default]
    Fletcher4,
    Sha256,
    Blake3,
}

impl ChecksumAlg {
    pub fn code(self) -> u8 {
        match self {
            ChecksumAlg::Off => 1,
            ChecksumAlg::Fletcher4 => 2,
            ChecksumAlg::Sha256 => 3,
            ChecksumAlg::Blake3 => 4,
        }
    }
    pub fn from_code(c: u8) -> Result<Self, Corrupted> {
        Ok(match c {
            1 => ChecksumAlg::Off,
            2 => ChecksumAlg::Fletcher4,
            3 => ChecksumAlg::Sha256,
            4 => ChecksumAlg::Blake3,
            _ => {
                return Err(Corrupted::new(
                    "blkptr",
                    format!("unknown checksum code {c}"),
                ))
            }
        })
    }
    /// Property spelling, as `zfs get checksum` shows it.
    pub fn name(self) -> &'static str {
        match self {
            ChecksumAlg::Off => "off",
            ChecksumAlg::Fletcher4 => "fletcher4",
            ChecksumAlg::Sha256 => "sha256",
            ChecksumAlg::Blake3 => "blake3",
        }
    }
}

/// Per-record compression. Levels are part of the code so a reader never
/// needs the dataset's properties to decompress a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    Off,
    #[default]
    Lz4,
    Zle,
    /// gzip-1 … gzip-9
    Gzip(u8),
    /// zstd-1 … zstd-19
    Zstd(u8),
}

impl Compression {
    pub fn code(self) -> u8 {
        match self {
            Compression::Off => 1,
            Compression::Lz4 => 2,
            Compression::Zle => 3,
            Compression::Gzip(l) => 0x10 + l,
            Compression::Zstd(l) => 0x20 + l,
        }
    }
    pub fn from_code(c: u8) -> Result<Self, Corrupted> {
        Ok(match c {
            1 => Compression::Off,
            2 => Compression::Lz4,
            3 => Compression::Zle,
            0x11..=0x19 => Compression::Gzip(c - 0x10),
            0x21..=0x33 => Compression::Zstd(c - 0x20),
            _ => {
                return Err(Corrupted::new(
                    "blkptr",
                    format!("unknown compression code {c}"),
                ))
            }
        })
    }
    /// Property spelling, as `zfs get compression` shows it.
    pub fn name(self) -> String {
        match self {
            Compression::Off => "off".into(),
            Compression::Lz4 => "lz4".into(),
            Compression::Zle => "zle".into(),
            Compression::Gzip(l) => format!("gzip-{l}"),
            Compression::Zstd(l) => format!("zstd-{l}"),
        }
    }
}

/// What a block holds. Stored in every block pointer and dnode so that scrub,
/// debugging tools and decoders know what to expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum ObjType {
    #[default]
    None = 0,
    /// The object set header block (objset_phys).
    Objset = 1,
    /// Blocks of the meta-dnode: arrays of dnodes.
    DnodeBlock = 2,
    /// Indirect blocks: arrays of block pointers (any object).
    Indirect = 3,
    /// The MOS object directory (a ZAP).
    ObjectDirectory = 4,
    /// Space map log blocks.
    SpaceMap = 5,
    /// Pool history records.
    History = 6,
    /// A dataset directory (dsl_dir) — bonus-only object.
    DslDir = 7,
    /// A dataset (dsl_dataset) — bonus-only object.
    DslDataset = 8,
    /// A ZAP of child dataset directories.
    DslChildMap = 9,
    /// A ZAP of locally set dataset properties.
    DslProps = 10,
    /// A snapshot dead list.
    DeadList = 11,
    /// A generic ZAP object.
    Zap = 12,
    /// Regular file contents.
    PlainFile = 13,
    /// Directory entries (a ZAP).
    DirectoryContents = 14,
    /// The filesystem master node (a ZAP).
    MasterNode = 15,
    /// Intent log blocks.
    IntentLog = 16,
    /// zvol data.
    Zvol = 17,
    /// Packed pool configuration.
    PackedConfig = 18,
    /// Opaque byte array object (generic).
    Raw = 19,
    /// A list of block pointers (`bpobj`: dead lists, the free queue).
    Bpobj = 20,
    /// A ZAP of a dataset's snapshots: name -> dataset object.
    DslSnapMap = 21,
    /// A ZAP of a snapshot's user holds: tag -> time.
    DslHolds = 22,
    /// A ZAP of a dataset's bookmarks: name -> [guid, txg, time].
    DslBookmarks = 23,
    /// A ZAP of a snapshot's clones: dataset object -> 1.
    DslClones = 24,
}

impl ObjType {
    pub fn code(self) -> u8 {
        self as u8
    }
    pub fn from_code(c: u8) -> Result<Self, Corrupted> {
        use ObjType::*;
        const ALL: [ObjType; 25] = [
            None,
            Objset,
            DnodeBlock,
            Indirect,
            ObjectDirectory,
            SpaceMap,
            History,
            DslDir,
            DslDataset,
            DslChildMap,
            DslProps,
            DeadList,
            Zap,
            PlainFile,
            DirectoryContents,
            MasterNode,
            IntentLog,
            Zvol,
            PackedConfig,
            Raw,
            Bpobj,
            DslSnapMap,
            DslHolds,
            DslBookmarks,
            DslClones,
        ];
        ALL.get(usize::from(c))
            .copied()
            .ok_or_else(|| Corrupted::new("object type", format!("unknown type code {c}")))
    }
    /// Metadata is never stored with `checksum=off`.
    pub fn is_metadata(self) -> bool {
        !matches!(self, ObjType::PlainFile | ObjType::Zvol)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockPtr {
    pub dvas: [Dva; MAX_DVAS],
    pub lsize: u32,
    pub psize: u32,
    pub comp: Compression,
    pub cksum: ChecksumAlg,
    pub typ: ObjType,
    pub level: u8,
    pub birth: u64,
    pub phys_birth: u64,
    pub fill: u64,
    pub checksum: [u64; 4],
}

impl Default for BlockPtr {
    fn default() -> Self {
        BlockPtr::HOLE
    }
}

impl BlockPtr {
    /// The all-zero pointer: a hole (never written, reads as zeros).
    pub const HOLE: BlockPtr = BlockPtr {
        dvas: [Dva {
            vdev: 0,
            asize_sectors: 0,
            offset: 0,
        }; MAX_DVAS],
        lsize: 0,
        psize: 0,
        comp: Compression::Off,
        cksum: ChecksumAlg::Off,
        typ: ObjType::None,
        level: 0,
        birth: 0,
        phys_birth: 0,
        fill: 0,
        checksum: [0; 4],
    };

    pub fn is_hole(&self) -> bool {
        self.dvas[0].is_empty()
    }

    /// Number of non-empty DVAs (copies).
    pub fn ncopies(&self) -> usize {
        self.dvas.iter().filter(|d| !d.is_empty()).count()
    }

    /// Total allocated bytes over all copies.
    pub fn asize(&self) -> u64 {
        self.dvas.iter().map(Dva::asize).sum()
    }

    pub fn encode(&self) -> [u8; BLKPTR_SIZE] {
        let mut b = [0u8; BLKPTR_SIZE];
        if self.is_hole() {
            return b;
        }
        for (i, dva) in self.dvas.iter().enumerate() {
            dva.encode(&mut b[BP_OFF_DVA + i * DVA_SIZE..BP_OFF_DVA + (i + 1) * DVA_SIZE]);
        }
        put_u32(&mut b, BP_OFF_LSIZE, self.lsize);
        put_u32(&mut b, BP_OFF_PSIZE, self.psize);
        b[BP_OFF_COMP] = self.comp.code();
        b[BP_OFF_CKSUM] = self.cksum.code();
        b[BP_OFF_TYPE] = self.typ.code();
        b[BP_OFF_LEVEL] = self.level;
        put_u64(&mut b, BP_OFF_BIRTH, self.birth);
        put_u64(&mut b, BP_OFF_PHYS_BIRTH, self.phys_birth);
        put_u64(&mut b, BP_OFF_FILL, self.fill);
        for (i, w) in self.checksum.iter().enumerate() {
            put_u64(&mut b, BP_OFF_CHECKSUM + 8 * i, *w);
        }
        b
    }

    /// Decodes and validates a pointer. `b` must be at least 128 bytes.
    pub fn decode(b: &[u8]) -> Result<BlockPtr, Corrupted> {
        let b = b
            .get(..BLKPTR_SIZE)
            .ok_or_else(|| Corrupted::new("blkptr", "short buffer"))?;
        if b.iter().all(|&x| x == 0) {
            return Ok(BlockPtr::HOLE);
        }
        let mut dvas = [Dva::default(); MAX_DVAS];
        for (i, dva) in dvas.iter_mut().enumerate() {
            *dva = Dva::decode(&b[BP_OFF_DVA + i * DVA_SIZE..])?;
        }
        let bp = BlockPtr {
            dvas,
            lsize: u32_at(b, BP_OFF_LSIZE),
            psize: u32_at(b, BP_OFF_PSIZE),
            comp: Compression::from_code(b[BP_OFF_COMP])?,
            cksum: ChecksumAlg::from_code(b[BP_OFF_CKSUM])?,
            typ: ObjType::from_code(b[BP_OFF_TYPE])?,
            level: b[BP_OFF_LEVEL],
            birth: u64_at(b, BP_OFF_BIRTH),
            phys_birth: u64_at(b, BP_OFF_PHYS_BIRTH),
            fill: u64_at(b, BP_OFF_FILL),
            checksum: std::array::from_fn(|i| u64_at(b, BP_OFF_CHECKSUM + 8 * i)),
        };
        bp.validate(b)?;
        Ok(bp)
    }

    fn validate(&self, raw: &[u8]) -> Result<(), Corrupted> {
        let bad = |why: String| Err(Corrupted::new("blkptr", why));
        if raw[60..64].iter().any(|&x| x != 0) || raw[88..96].iter().any(|&x| x != 0) {
            return bad("reserved bytes are not zero".into());
        }
        if self.dvas[0].is_empty() {
            return bad("first DVA empty in a non-hole pointer".into());
        }
        // Copies fill from the front: no empty DVA before a used one.
        if self.dvas[1].is_empty() && !self.dvas[2].is_empty() {
            return bad("DVA gap".into());
        }
        let (l, p) = (u64::from(self.lsize), u64::from(self.psize));
        if l == 0 || p == 0 || l > MAX_BLOCK_SIZE || p > l || l % SECTOR_SIZE != 0 {
            return bad(format!("bad sizes lsize={l} psize={p}"));
        }
        if self.comp == Compression::Off && p != l {
            return bad("uncompressed block with psize != lsize".into());
        }
        if self.level > MAX_LEVEL {
            return bad(format!("level {} too deep", self.level));
        }
        if self.birth == 0 {
            return bad("zero birth txg".into());
        }
        for dva in self.dvas.iter().filter(|d| !d.is_empty()) {
            if dva.asize() < p {
                return bad(format!("DVA asize {} smaller than psize {p}", dva.asize()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BlockPtr {
        BlockPtr {
            dvas: [
                Dva {
                    vdev: 1,
                    asize_sectors: 8,
                    offset: 0x12_3400,
                },
                Dva {
                    vdev: 2,
                    asize_sectors: 8,
                    offset: 0x200,
                },
                Dva::default(),
            ],
            lsize: 131072,
            psize: 4096,
            comp: Compression::Zstd(3),
            cksum: ChecksumAlg::Fletcher4,
            typ: ObjType::PlainFile,
            level: 0,
            birth: 7,
            phys_birth: 7,
            fill: 1,
            checksum: [1, 2, 3, 0xdead_beef_0000_0001],
        }
    }

    #[test]
    fn golden_bytes() {
        let b = sample().encode();
        let mut want = [0u8; 128];
        want[0] = 1; // vdev 1
        want[4] = 8; // 8 sectors
        want[8..16].copy_from_slice(&0x12_3400u64.to_le_bytes());
        want[16] = 2;
        want[20] = 8;
        want[24..32].copy_from_slice(&0x200u64.to_le_bytes());
        want[48..52].copy_from_slice(&131072u32.to_le_bytes());
        want[52..56].copy_from_slice(&4096u32.to_le_bytes());
        want[56] = 0x23;
        want[57] = 2;
        want[58] = 13;
        want[64] = 7;
        want[72] = 7;
        want[80] = 1;
        want[96] = 1;
        want[104] = 2;
        want[112] = 3;
        want[120..128].copy_from_slice(&0xdead_beef_0000_0001u64.to_le_bytes());
        assert_eq!(b, want);
        assert_eq!(BlockPtr::decode(&b).unwrap(), sample());
    }

    #[test]
    fn hole_is_all_zero() {
        assert_eq!(BlockPtr::HOLE.encode(), [0u8; 128]);
        assert!(BlockPtr::decode(&[0u8; 128]).unwrap().is_hole());
    }

    #[test]
    fn codes_round_trip() {
        for c in 0..=255u8 {
            if let Ok(x) = Compression::from_code(c) {
                assert_eq!(x.code(), c);
            }
            if let Ok(x) = ChecksumAlg::from_code(c) {
                assert_eq!(x.code(), c);
            }
            if let Ok(x) = ObjType::from_code(c) {
                assert_eq!(x.code(), c);
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 128)) {
            let _ = BlockPtr::decode(&bytes);
        }
    }
}
