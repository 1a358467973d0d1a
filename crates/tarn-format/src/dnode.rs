//! Dnodes: the on-disk description of one object (ZFS's `dnode_phys_t`).
//!
//! An object is an array of equal-sized data blocks under a radix tree of
//! indirect blocks. The dnode records the shape of that tree (levels, block
//! sizes), its single root block pointer, how much space lies beneath it, and
//! a small *bonus* area that the layer above uses for its own per-object
//! record (file attributes, dataset records) so a small object needs no data
//! block at all.
//!
//! Dnodes live in *dnode blocks* of 16 KiB (32 dnodes), which are the data
//! blocks of the meta-dnode (object 0 of an object set). Object `n` lives in
//! dnode block `n / 32`, slot `n % 32`. A free slot is 512 zero bytes.
//!
//! Tree shape: level `nlevels - 1` is the root (one block, named by `root`).
//! With `nlevels == 1` the root *is* data block 0. Every indirect block is
//! `2^indblkshift` bytes (128 KiB) holding 1024 block pointers.
//!
//! Byte layout (512 bytes, little-endian):
//!
//! ```text
//! off  size  field
//!   0     1  type          ObjType code (0 = free slot; then all 512 bytes are 0)
//!   1     1  indblkshift   log2 of the indirect block size (DNODE_INDBLKSHIFT = 17)
//!   2     1  nlevels       1..=MAX_NLEVELS
//!   3     1  flags         DNODE_FLAG_* bits; unknown bits are corruption
//!   4     1  bonus_type    ObjType code of the bonus record
//!   5     1  reserved      zero
//!   6     2  bonus_len     0..=DNODE_BONUS_SIZE bytes used of the bonus area
//!   8     4  datablk_sec   data block size in 512-byte sectors (1..=32768)
//!  12     4  reserved      zero
//!  16     8  maxblkid      highest data block id that may be non-hole
//!  24     8  used          bytes allocated beneath `root` (all copies)
//!  32    32  reserved      zero
//!  64   128  root          BlockPtr (level nlevels-1) or a hole
//! 192   320  bonus         bonus record; bytes past bonus_len are zero
//! ```

use crate::blkptr::{BlockPtr, ObjType, BLKPTR_SIZE, MAX_LEVEL};
use crate::le::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use crate::{Corrupted, MAX_BLOCK_SIZE, SECTOR_SHIFT};

pub const DNODE_SIZE: usize = 512;
pub const DNODE_SHIFT: u32 = 9;
/// Dnode blocks (the meta-dnode's data blocks) are 16 KiB: 32 dnodes.
pub const DNODE_BLOCK_SHIFT: u32 = 14;
pub const DNODE_BLOCK_SIZE: usize = 1 << DNODE_BLOCK_SHIFT;
pub const DNODES_PER_BLOCK: u64 = 1 << (DNODE_BLOCK_SHIFT - DNODE_SHIFT);
/// Indirect blocks are 128 KiB: 1024 block pointers.
pub const DNODE_INDBLKSHIFT: u8 = 17;
pub const INDIRECT_BLOCK_SIZE: usize = 1 << DNODE_INDBLKSHIFT;
/// log2 of the block pointers per indirect block.
pub const EPB_SHIFT: u32 = DNODE_INDBLKSHIFT as u32 - 7;
pub const BLKPTRS_PER_INDIRECT: u64 = 1 << EPB_SHIFT;
pub const DNODE_BONUS_SIZE: usize = 320;
/// Deepest tree a dnode may describe (root level = nlevels - 1 <= MAX_LEVEL).
pub const MAX_NLEVELS: u8 = MAX_LEVEL;

/// `used` counts bytes (not sectors); always set by this version.
pub const DNODE_FLAG_USED_BYTES: u8 = 1;
const KNOWN_FLAGS: u8 = DNODE_FLAG_USED_BYTES;

pub const DN_OFF_TYPE: usize = 0;
pub const DN_OFF_INDBLKSHIFT: usize = 1;
pub const DN_OFF_NLEVELS: usize = 2;
pub const DN_OFF_FLAGS: usize = 3;
pub const DN_OFF_BONUS_TYPE: usize = 4;
pub const DN_OFF_BONUS_LEN: usize = 6;
pub const DN_OFF_DATABLK_SEC: usize = 8;
pub const DN_OFF_MAXBLKID: usize = 16;
pub const DN_OFF_USED: usize = 24;
pub const DN_OFF_ROOT: usize = 64;
pub const DN_OFF_BONUS: usize = 192;

const _: () = assert!(DN_OFF_ROOT + BLKPTR_SIZE == DN_OFF_BONUS);
const _: () = assert!(DN_OFF_BONUS + DNODE_BONUS_SIZE == DNODE_SIZE);

/// One allocated dnode. A free slot is represented by `None` in
/// [`DnodePhys::decode`] and encodes as 512 zero bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnodePhys {
    pub typ: ObjType,
    pub indblkshift: u8,
    pub nlevels: u8,
    pub flags: u8,
    pub bonus_type: ObjType,
    /// Data block size in bytes (a multiple of 512, at most MAX_BLOCK_SIZE).
    pub data_block_size: u32,
    pub maxblkid: u64,
    pub used_bytes: u64,
    pub root: BlockPtr,
    /// The bonus record, `bonus.len() <= DNODE_BONUS_SIZE`.
    pub bonus: Vec<u8>,
}

impl DnodePhys {
    /// A fresh, empty object of `typ` with data blocks of `data_block_size`.
    pub fn new(typ: ObjType, data_block_size: u32) -> Self {
        DnodePhys {
            typ,
            indblkshift: DNODE_INDBLKSHIFT,
            nlevels: 1,
            flags: DNODE_FLAG_USED_BYTES,
            bonus_type: ObjType::None,
            data_block_size,
            maxblkid: 0,
            used_bytes: 0,
            root: BlockPtr::HOLE,
            bonus: Vec::new(),
        }
    }

    pub fn encode(&self, out: &mut [u8]) {
        assert!(self.typ != ObjType::None, "encoding a free dnode");
        assert!(self.bonus.len() <= DNODE_BONUS_SIZE);
        assert!(self.data_block_size.is_multiple_of(512) && self.data_block_size > 0);
        let out = &mut out[..DNODE_SIZE];
        out.fill(0);
        out[DN_OFF_TYPE] = self.typ.code();
        out[DN_OFF_INDBLKSHIFT] = self.indblkshift;
        out[DN_OFF_NLEVELS] = self.nlevels;
        out[DN_OFF_FLAGS] = self.flags;
        out[DN_OFF_BONUS_TYPE] = self.bonus_type.code();
        put_u16(out, DN_OFF_BONUS_LEN, self.bonus.len() as u16);
        put_u32(
            out,
            DN_OFF_DATABLK_SEC,
            self.data_block_size >> SECTOR_SHIFT,
        );
        put_u64(out, DN_OFF_MAXBLKID, self.maxblkid);
        put_u64(out, DN_OFF_USED, self.used_bytes);
        out[DN_OFF_ROOT..DN_OFF_ROOT + BLKPTR_SIZE].copy_from_slice(&self.root.encode());
        out[DN_OFF_BONUS..DN_OFF_BONUS + self.bonus.len()].copy_from_slice(&self.bonus);
    }

    /// Encodes a slot: a free slot (`None`) is all zeros.
    pub fn encode_slot(slot: Option<&DnodePhys>, out: &mut [u8]) {
        match slot {
            Some(dn) => dn.encode(out),
            None => out[..DNODE_SIZE].fill(0),
        }
    }

    /// Decodes one 512-byte slot; `Ok(None)` is a free slot.
    pub fn decode(b: &[u8]) -> Result<Option<DnodePhys>, Corrupted> {
        let b = b
            .get(..DNODE_SIZE)
            .ok_or_else(|| Corrupted::new("dnode", "short buffer"))?;
        if b[DN_OFF_TYPE] == 0 {
            if b.iter().any(|&x| x != 0) {
                return Err(Corrupted::new("dnode", "free slot with non-zero bytes"));
            }
            return Ok(None);
        }
        check_reserved(b)?;
        let bonus_len = usize::from(u16_at(b, DN_OFF_BONUS_LEN));
        if bonus_len > DNODE_BONUS_SIZE {
            return Err(Corrupted::new("dnode", format!("bonus_len {bonus_len}")));
        }
        let dn = DnodePhys {
            typ: ObjType::from_code(b[DN_OFF_TYPE])?,
            indblkshift: b[DN_OFF_INDBLKSHIFT],
            nlevels: b[DN_OFF_NLEVELS],
            flags: b[DN_OFF_FLAGS],
            bonus_type: ObjType::from_code(b[DN_OFF_BONUS_TYPE])?,
            data_block_size: decode_block_size(u32_at(b, DN_OFF_DATABLK_SEC))?,
            maxblkid: u64_at(b, DN_OFF_MAXBLKID),
            used_bytes: u64_at(b, DN_OFF_USED),
            root: BlockPtr::decode(&b[DN_OFF_ROOT..])?,
            bonus: b[DN_OFF_BONUS..DN_OFF_BONUS + bonus_len].to_vec(),
        };
        if b[DN_OFF_BONUS + bonus_len..].iter().any(|&x| x != 0) {
            return Err(Corrupted::new("dnode", "bytes past bonus_len are not zero"));
        }
        dn.validate()?;
        Ok(Some(dn))
    }

    fn validate(&self) -> Result<(), Corrupted> {
        let bad = |why: String| Err(Corrupted::new("dnode", why));
        if self.indblkshift != DNODE_INDBLKSHIFT {
            return bad(format!("indblkshift {}", self.indblkshift));
        }
        if self.nlevels == 0 || self.nlevels > MAX_NLEVELS {
            return bad(format!("nlevels {}", self.nlevels));
        }
        if self.flags & !KNOWN_FLAGS != 0 {
            return bad(format!("unknown flags {:#x}", self.flags));
        }
        if !self.root.is_hole() && self.root.level + 1 != self.nlevels {
            return bad(format!(
                "root level {} with nlevels {}",
                self.root.level, self.nlevels
            ));
        }
        if self.maxblkid > max_blkid_for(self.nlevels, self.data_block_size) {
            return bad(format!(
                "maxblkid {} beyond {} levels",
                self.maxblkid, self.nlevels
            ));
        }
        Ok(())
    }
}

fn check_reserved(b: &[u8]) -> Result<(), Corrupted> {
    if b[5] != 0 || b[12..16].iter().any(|&x| x != 0) || b[32..64].iter().any(|&x| x != 0) {
        return Err(Corrupted::new("dnode", "reserved bytes are not zero"));
    }
    Ok(())
}

fn decode_block_size(sectors: u32) -> Result<u32, Corrupted> {
    let bytes = u64::from(sectors) << SECTOR_SHIFT;
    if sectors == 0 || bytes > MAX_BLOCK_SIZE {
        return Err(Corrupted::new(
            "dnode",
            format!("data block of {sectors} sectors"),
        ));
    }
    Ok(bytes as u32)
}

/// Highest block id a tree of `nlevels` can address (saturating at u64::MAX).
/// The block size does not matter for the tree, but objects are limited to
/// 2^63 bytes, which caps the block id for small blocks.
pub fn max_blkid_for(nlevels: u8, data_block_size: u32) -> u64 {
    let shift = u32::from(nlevels.saturating_sub(1)) * EPB_SHIFT;
    let by_tree = if shift >= 64 {
        u64::MAX
    } else {
        (1u64 << shift) - 1
    };
    let by_size = (1u64 << 63) / u64::from(data_block_size.max(1)) - 1;
    by_tree.min(by_size)
}

/// Levels needed to address block ids `0..=maxblkid`.
pub fn nlevels_for(maxblkid: u64) -> u8 {
    let mut levels = 1u8;
    let mut cap_shift = 0u32;
    while cap_shift < 64 && (maxblkid >> cap_shift) > 0 {
        levels += 1;
        cap_shift += EPB_SHIFT;
    }
    levels
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blkptr::Dva;

    fn sample() -> DnodePhys {
        let mut dn = DnodePhys::new(ObjType::PlainFile, 131072);
        dn.nlevels = 2;
        dn.bonus_type = ObjType::Raw;
        dn.maxblkid = 5;
        dn.used_bytes = 0x1_0000;
        dn.bonus = vec![0xAB; 3];
        dn.root = BlockPtr {
            dvas: [
                Dva {
                    vdev: 0,
                    asize_sectors: 256,
                    offset: 0x2000,
                },
                Dva::default(),
                Dva::default(),
            ],
            lsize: 131072,
            psize: 131072,
            comp: crate::Compression::Off,
            cksum: crate::ChecksumAlg::Fletcher4,
            typ: ObjType::PlainFile,
            level: 1,
            birth: 9,
            phys_birth: 9,
            fill: 6,
            checksum: [1, 2, 3, 4],
        };
        dn
    }

    #[test]
    fn golden_bytes() {
        let dn = sample();
        let mut b = [0u8; DNODE_SIZE];
        dn.encode(&mut b);
        let mut want = [0u8; DNODE_SIZE];
        want[0] = 13; // PlainFile
        want[1] = 17;
        want[2] = 2;
        want[3] = 1;
        want[4] = 19; // Raw
        want[6] = 3;
        want[8..12].copy_from_slice(&256u32.to_le_bytes());
        want[16] = 5;
        want[24..32].copy_from_slice(&0x1_0000u64.to_le_bytes());
        want[64..192].copy_from_slice(&dn.root.encode());
        want[192..195].copy_from_slice(&[0xAB; 3]);
        assert_eq!(b, want);
        assert_eq!(DnodePhys::decode(&b).unwrap(), Some(dn));
    }

    #[test]
    fn free_slot_is_zero() {
        let mut b = [0xFFu8; DNODE_SIZE];
        DnodePhys::encode_slot(None, &mut b);
        assert_eq!(b, [0u8; DNODE_SIZE]);
        assert_eq!(DnodePhys::decode(&b).unwrap(), None);
        b[100] = 1;
        assert!(DnodePhys::decode(&b).is_err());
    }

    #[test]
    fn rejects_bad_fields() {
        let mut b = [0u8; DNODE_SIZE];
        sample().encode(&mut b);
        for (off, val) in [
            (1, 12u8),
            (2, 0),
            (2, 9),
            (3, 0x80),
            (5, 1),
            (40, 1),
            (300, 1),
        ] {
            let mut c = b;
            c[off] = val;
            assert!(DnodePhys::decode(&c).is_err(), "offset {off} value {val}");
        }
        let mut c = b;
        c[6] = 0x41; // bonus_len 321
        c[7] = 0x01;
        assert!(DnodePhys::decode(&c).is_err());
    }

    #[test]
    fn levels() {
        assert_eq!(nlevels_for(0), 1);
        assert_eq!(nlevels_for(1), 2);
        assert_eq!(nlevels_for(1023), 2);
        assert_eq!(nlevels_for(1024), 3);
        assert_eq!(nlevels_for(u64::MAX), 8);
        assert_eq!(max_blkid_for(1, 512), 0);
        assert_eq!(max_blkid_for(2, 512), 1023);
        assert_eq!(max_blkid_for(8, 512), (1 << 54) - 1);
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 512)) {
            let _ = DnodePhys::decode(&bytes);
        }

        #[test]
        fn round_trip(maxblkid in 0u64..1000, bonus in proptest::collection::vec(proptest::num::u8::ANY, 0..=320), sec in 1u32..=256) {
            let mut dn = sample();
            dn.maxblkid = maxblkid;
            dn.bonus = bonus;
            dn.data_block_size = sec * 512;
            let mut b = [0u8; DNODE_SIZE];
            dn.encode(&mut b);
            proptest::prop_assert_eq!(DnodePhys::decode(&b).unwrap(), Some(dn));
        }
    }
}
