//! The space map log: how free space survives an export.
//!
//! tarn keeps one pool-wide log of allocation changes (OpenZFS has the same
//! idea as its `log_spacemap` feature). Every txg that allocates or frees
//! space appends one or more *delta* blocks recording those changes; the
//! uberblock points at the newest block, and every block points at the one
//! before it. When the log grows much larger than the allocated state it
//! describes, the pool *condenses* it: it writes a fresh *base* — the list of
//! every allocated range — and frees the old chain. Replaying the chain from
//! its oldest block to its newest rebuilds every metaslab's free map.
//!
//! A chain block's own allocation is recorded inside the chain it belongs
//! to (the pool allocates a block's address before it serialises the
//! entries), so the map is self-describing and needs no fixed region.
//!
//! Block layout (a block is a multiple of 512 bytes, at most
//! `SPACEMAP_BLOCK_MAX`):
//!
//! ```text
//! off  size  field
//!   0     8  magic     SPACEMAP_MAGIC ("tarnSMAP")
//!   8     8  txg       the txg that wrote this block
//!  16     4  count     number of entries
//!  20     4  kind      0 = delta, 1 = base
//!  24     8  reserved  zero
//!  32   128  prev      block pointer to the previous (older) block, or a hole
//! 160    32  reserved  zero
//! 192   16n  entries   `count` entries (SpaceMapEntry)
//!   …        zero padding to the block size
//! ```
//!
//! Entry (16 bytes):
//!
//! ```text
//! off size field
//!   0    8 offset     byte offset in the top-level vdev's allocatable space
//!   8    4 vdev       top-level vdev index
//!  12    4 len        bits 0..31: length in 512-byte sectors; bit 31: 1 = free,
//!                     0 = allocate
//! ```

use crate::blkptr::{BlockPtr, BLKPTR_SIZE};
use crate::le::{put_u32, put_u64, u32_at, u64_at};
use crate::{Corrupted, SECTOR_SIZE};

pub const SPACEMAP_MAGIC: u64 = u64::from_le_bytes(*b"tarnSMAP");
pub const SPACEMAP_HEADER_SIZE: usize = 192;
pub const SPACEMAP_ENTRY_SIZE: usize = 16;
/// Largest space map block: 128 KiB holds 8180 entries.
pub const SPACEMAP_BLOCK_MAX: usize = 128 << 10;
pub const SPACEMAP_ENTRIES_MAX: usize =
    (SPACEMAP_BLOCK_MAX - SPACEMAP_HEADER_SIZE) / SPACEMAP_ENTRY_SIZE;
/// Longest run one entry can describe, in sectors (bit 31 is the free flag).
pub const SPACEMAP_RUN_MAX_SECTORS: u32 = (1 << 31) - 1;

pub const SM_OFF_TXG: usize = 8;
pub const SM_OFF_COUNT: usize = 16;
pub const SM_OFF_KIND: usize = 20;
pub const SM_OFF_PREV: usize = 32;

const FREE_BIT: u32 = 1 << 31;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpaceMapKind {
    Delta,
    Base,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceMapEntry {
    pub vdev: u32,
    pub offset: u64,
    /// Bytes, a multiple of 512, at most `SPACEMAP_RUN_MAX_SECTORS` sectors.
    pub len: u64,
    pub free: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceMapBlock {
    pub txg: u64,
    pub kind: SpaceMapKind,
    pub prev: BlockPtr,
    pub entries: Vec<SpaceMapEntry>,
}

impl SpaceMapBlock {
    /// Encoded size: header + entries rounded up to whole sectors.
    pub fn encoded_len(entries: usize) -> usize {
        let raw = SPACEMAP_HEADER_SIZE + entries * SPACEMAP_ENTRY_SIZE;
        raw.div_ceil(SECTOR_SIZE as usize) * SECTOR_SIZE as usize
    }

    pub fn encode(&self) -> Vec<u8> {
        assert!(self.entries.len() <= SPACEMAP_ENTRIES_MAX);
        let mut b = vec![0u8; Self::encoded_len(self.entries.len())];
        put_u64(&mut b, 0, SPACEMAP_MAGIC);
        put_u64(&mut b, SM_OFF_TXG, self.txg);
        put_u32(&mut b, SM_OFF_COUNT, self.entries.len() as u32);
        let kind = match self.kind {
            SpaceMapKind::Delta => 0,
            SpaceMapKind::Base => 1,
        };
        put_u32(&mut b, SM_OFF_KIND, kind);
        b[SM_OFF_PREV..SM_OFF_PREV + BLKPTR_SIZE].copy_from_slice(&self.prev.encode());
        for (i, e) in self.entries.iter().enumerate() {
            let o = SPACEMAP_HEADER_SIZE + i * SPACEMAP_ENTRY_SIZE;
            assert!(e.len > 0 && e.len % SECTOR_SIZE == 0 && e.offset % SECTOR_SIZE == 0);
            let sectors = e.len / SECTOR_SIZE;
            assert!(sectors <= u64::from(SPACEMAP_RUN_MAX_SECTORS));
            put_u64(&mut b, o, e.offset);
            put_u32(&mut b, o + 8, e.vdev);
            put_u32(
                &mut b,
                o + 12,
                sectors as u32 | if e.free { FREE_BIT } else { 0 },
            );
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<SpaceMapBlock, Corrupted> {
        let err = |why: String| Corrupted::new("space map block", why);
        if b.len() < SPACEMAP_HEADER_SIZE || u64_at(b, 0) != SPACEMAP_MAGIC {
            return Err(err("bad magic".into()));
        }
        let count = u32_at(b, SM_OFF_COUNT) as usize;
        if count > SPACEMAP_ENTRIES_MAX
            || SPACEMAP_HEADER_SIZE + count * SPACEMAP_ENTRY_SIZE > b.len()
        {
            return Err(err(format!("entry count {count} does not fit the block")));
        }
        let kind = match u32_at(b, SM_OFF_KIND) {
            0 => SpaceMapKind::Delta,
            1 => SpaceMapKind::Base,
            k => return Err(err(format!("unknown kind {k}"))),
        };
        let prev = BlockPtr::decode(&b[SM_OFF_PREV..])?;
        let mut entries = Vec::with_capacity(count);
        for i in 0..count {
            let o = SPACEMAP_HEADER_SIZE + i * SPACEMAP_ENTRY_SIZE;
            let offset = u64_at(b, o);
            let word = u32_at(b, o + 12);
            let sectors = u64::from(word & !FREE_BIT);
            if sectors == 0 || !offset.is_multiple_of(SECTOR_SIZE) {
                return Err(err(format!(
                    "bad entry {i}: offset {offset} sectors {sectors}"
                )));
            }
            entries.push(SpaceMapEntry {
                vdev: u32_at(b, o + 8),
                offset,
                len: sectors * SECTOR_SIZE,
                free: word & FREE_BIT != 0,
            });
        }
        Ok(SpaceMapBlock {
            txg: u64_at(b, SM_OFF_TXG),
            kind,
            prev,
            entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_bytes_and_round_trip() {
        let blk = SpaceMapBlock {
            txg: 9,
            kind: SpaceMapKind::Base,
            prev: BlockPtr::HOLE,
            entries: vec![
                SpaceMapEntry {
                    vdev: 1,
                    offset: 0x2000,
                    len: 0x1000,
                    free: false,
                },
                SpaceMapEntry {
                    vdev: 0,
                    offset: 0x200,
                    len: 0x200,
                    free: true,
                },
            ],
        };
        let b = blk.encode();
        assert_eq!(b.len(), 512);
        assert_eq!(&b[0..8], b"tarnSMAP");
        assert_eq!(b[8], 9);
        assert_eq!(b[16], 2);
        assert_eq!(b[20], 1);
        assert!(b[32..192].iter().all(|&x| x == 0));
        assert_eq!(&b[192..200], &0x2000u64.to_le_bytes());
        assert_eq!(&b[200..204], &1u32.to_le_bytes());
        assert_eq!(&b[204..208], &8u32.to_le_bytes());
        assert_eq!(&b[208..216], &0x200u64.to_le_bytes());
        assert_eq!(&b[220..224], &(1u32 | 1 << 31).to_le_bytes());
        assert_eq!(SpaceMapBlock::decode(&b).unwrap(), blk);
    }

    #[test]
    fn capacity() {
        assert_eq!(SPACEMAP_ENTRIES_MAX, 8180);
        assert!(SpaceMapBlock::encoded_len(SPACEMAP_ENTRIES_MAX) <= SPACEMAP_BLOCK_MAX);
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..2048)) {
            let _ = SpaceMapBlock::decode(&bytes);
        }
    }
}
