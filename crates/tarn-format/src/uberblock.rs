//! The uberblock: the root of the whole pool at one txg.
//!
//! Each label of each leaf holds a ring of uberblock slots (see `label`).
//! Committing txg N writes the uberblock for N into slot `N % slots` of every
//! label of every leaf, after the blocks it points to are durable. Import
//! picks the valid uberblock with the highest txg (ties broken by timestamp),
//! so switching from one txg to the next is atomic: an uberblock slot is
//! either the old valid one, or the new valid one, or torn — and a torn slot
//! fails its checksum and is ignored.
//!
//! Byte layout (1024 bytes; a slot is `max(1024, 2^ashift)` bytes and the
//! rest of the slot is zero):
//!
//! ```text
//! off  size  field
//!   0     8  magic          UBERBLOCK_MAGIC
//!   8     8  version        format version (FORMAT_VERSION)
//!  16     8  txg            the txg this uberblock commits
//!  24     8  guid_sum       sum (wrapping) of all leaf vdev GUIDs
//!  32     8  timestamp      seconds since the Unix epoch
//!  40   128  rootbp         block pointer to the MOS object set
//! 168   128  spacemap_bp    head of the space map log chain
//! 296     8  features       bitset of active feature flags
//! 304   688  reserved       zero
//! 992    32  checksum       SHA-256 over (slot device offset as u64 LE,
//!                           bytes 0..992)
//! ```
//!
//! The device offset in the checksum makes a misdirected write (a valid
//! uberblock landing in the wrong slot) fail verification.

use crate::blkptr::{BlockPtr, BLKPTR_SIZE};
use crate::le::{put_u64, u64_at};
use crate::{Corrupted, FORMAT_VERSION};
use sha2::{Digest, Sha256};

pub const UBERBLOCK_SIZE: usize = 1024;
/// "tarnUBER" read as a little-endian u64.
pub const UBERBLOCK_MAGIC: u64 = u64::from_le_bytes(*b"tarnUBER");

pub const UB_OFF_MAGIC: usize = 0;
pub const UB_OFF_VERSION: usize = 8;
pub const UB_OFF_TXG: usize = 16;
pub const UB_OFF_GUID_SUM: usize = 24;
pub const UB_OFF_TIMESTAMP: usize = 32;
pub const UB_OFF_ROOTBP: usize = 40;
pub const UB_OFF_SPACEMAP_BP: usize = 168;
pub const UB_OFF_FEATURES: usize = 296;
pub const UB_OFF_CHECKSUM: usize = 992;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Uberblock {
    pub version: u64,
    pub txg: u64,
    pub guid_sum: u64,
    pub timestamp: u64,
    pub rootbp: BlockPtr,
    pub spacemap_bp: BlockPtr,
    pub features: u64,
}

impl Uberblock {
    pub fn new(txg: u64, guid_sum: u64, timestamp: u64) -> Self {
        Uberblock {
            version: FORMAT_VERSION,
            txg,
            guid_sum,
            timestamp,
            ..Default::default()
        }
    }

    /// Encodes for the slot at byte `device_offset` on its leaf.
    pub fn encode(&self, device_offset: u64) -> [u8; UBERBLOCK_SIZE] {
        let mut b = [0u8; UBERBLOCK_SIZE];
        put_u64(&mut b, UB_OFF_MAGIC, UBERBLOCK_MAGIC);
        put_u64(&mut b, UB_OFF_VERSION, self.version);
        put_u64(&mut b, UB_OFF_TXG, self.txg);
        put_u64(&mut b, UB_OFF_GUID_SUM, self.guid_sum);
        put_u64(&mut b, UB_OFF_TIMESTAMP, self.timestamp);
        b[UB_OFF_ROOTBP..UB_OFF_ROOTBP + BLKPTR_SIZE].copy_from_slice(&self.rootbp.encode());
        b[UB_OFF_SPACEMAP_BP..UB_OFF_SPACEMAP_BP + BLKPTR_SIZE]
            .copy_from_slice(&self.spacemap_bp.encode());
        put_u64(&mut b, UB_OFF_FEATURES, self.features);
        let sum = slot_checksum(&b, device_offset);
        b[UB_OFF_CHECKSUM..].copy_from_slice(&sum);
        b
    }

    /// Decodes the slot read from `device_offset`. An empty (all zero) slot,
    /// a torn one and a misdirected one are all `Corrupted`.
    pub fn decode(b: &[u8], device_offset: u64) -> Result<Uberblock, Corrupted> {
        let b = b
            .get(..UBERBLOCK_SIZE)
            .ok_or_else(|| Corrupted::new("uberblock", "short buffer"))?;
        if u64_at(b, UB_OFF_MAGIC) != UBERBLOCK_MAGIC {
            return Err(Corrupted::new("uberblock", "bad magic"));
        }
        if slot_checksum(b, device_offset) != b[UB_OFF_CHECKSUM..] {
            return Err(Corrupted::new("uberblock", "checksum mismatch"));
        }
        if b[UB_OFF_FEATURES + 8..UB_OFF_CHECKSUM]
            .iter()
            .any(|&x| x != 0)
        {
            return Err(Corrupted::new("uberblock", "reserved bytes are not zero"));
        }
        let version = u64_at(b, UB_OFF_VERSION);
        if version == 0 || version > FORMAT_VERSION {
            return Err(Corrupted::new(
                "uberblock",
                format!("unsupported format version {version}"),
            ));
        }
        let ub = Uberblock {
            version,
            txg: u64_at(b, UB_OFF_TXG),
            guid_sum: u64_at(b, UB_OFF_GUID_SUM),
            timestamp: u64_at(b, UB_OFF_TIMESTAMP),
            rootbp: BlockPtr::decode(&b[UB_OFF_ROOTBP..])?,
            spacemap_bp: BlockPtr::decode(&b[UB_OFF_SPACEMAP_BP..])?,
            features: u64_at(b, UB_OFF_FEATURES),
        };
        if ub.txg == 0 {
            return Err(Corrupted::new("uberblock", "txg 0"));
        }
        Ok(ub)
    }

    /// Feature bits active in this pool that this build does not know.
    pub fn unknown_features(&self) -> u64 {
        self.features & !crate::KNOWN_FEATURE_BITS
    }

    /// Ordering used to choose the active uberblock at import.
    pub fn is_newer_than(&self, other: &Uberblock) -> bool {
        (self.txg, self.timestamp) > (other.txg, other.timestamp)
    }
}

fn slot_checksum(b: &[u8], device_offset: u64) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(device_offset.to_le_bytes());
    h.update(&b[..UB_OFF_CHECKSUM]);
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blkptr::{Dva, ObjType};

    fn sample() -> Uberblock {
        let mut ub = Uberblock::new(42, 0x1234, 1_700_000_000);
        ub.rootbp = BlockPtr {
            dvas: [
                Dva {
                    vdev: 0,
                    asize_sectors: 8,
                    offset: 4096,
                },
                Dva::default(),
                Dva::default(),
            ],
            lsize: 4096,
            psize: 4096,
            typ: ObjType::Objset,
            birth: 42,
            phys_birth: 42,
            fill: 1,
            ..Default::default()
        };
        ub.rootbp.comp = crate::Compression::Off;
        ub
    }

    #[test]
    fn golden_layout_and_round_trip() {
        let ub = sample();
        let b = ub.encode(128 * 1024);
        assert_eq!(&b[0..8], b"tarnUBER");
        assert_eq!(u64_at(&b, UB_OFF_VERSION), 1);
        assert_eq!(u64_at(&b, UB_OFF_TXG), 42);
        assert_eq!(u64_at(&b, UB_OFF_GUID_SUM), 0x1234);
        assert_eq!(u64_at(&b, UB_OFF_TIMESTAMP), 1_700_000_000);
        assert_eq!(b[UB_OFF_ROOTBP..UB_OFF_ROOTBP + 128], ub.rootbp.encode());
        assert!(b[UB_OFF_SPACEMAP_BP..UB_OFF_SPACEMAP_BP + 128]
            .iter()
            .all(|&x| x == 0));
        assert!(b[304..992].iter().all(|&x| x == 0));
        assert_eq!(Uberblock::decode(&b, 128 * 1024).unwrap(), ub);
    }

    #[test]
    fn unknown_feature_bits_are_reported() {
        let mut ub = sample();
        assert_eq!(ub.unknown_features(), 0);
        ub.features = 1 << 40;
        let b = ub.encode(0);
        assert_eq!(
            Uberblock::decode(&b, 0).unwrap().unknown_features(),
            1 << 40
        );
    }

    #[test]
    fn misdirected_and_torn_slots_are_rejected() {
        let b = sample().encode(128 * 1024);
        assert!(Uberblock::decode(&b, 129 * 1024).is_err());
        let mut torn = b;
        torn[500..].fill(0);
        assert!(Uberblock::decode(&torn, 128 * 1024).is_err());
        assert!(Uberblock::decode(&[0u8; 1024], 0).is_err());
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 1024), off in 0u64..1<<40) {
            let _ = Uberblock::decode(&bytes, off);
        }
    }
}
