//! Dataset records kept in the MOS (ZFS's DSL `_phys` structs).
//!
//! A dataset is two MOS objects, as in ZFS: a *directory* (`DslDirPhys`),
//! which has a place in the tree (parent, children, properties) and whose
//! space accounting includes its descendants; and the *dataset* itself
//! (`DslDatasetPhys`), which points at the head object set and counts what
//! that object set references. Snapshots (feature `org.tarn:snapshots`) are
//! further `DslDatasetPhys` objects chained through `prev_snap_obj` and
//! `next_snap_obj`, each with a dead list (`crate::bpobj`); a clone's
//! directory names its origin snapshot.
//!
//! Both are stored in the bonus area of a bonus-only dnode.
//!
//! `DslDirPhys` (128 bytes):
//!
//! ```text
//! off size field
//!   0    8 creation_time     seconds since the epoch
//!   8    8 head_dataset_obj  MOS object of the head DslDatasetPhys
//!  16    8 parent_dir_obj    MOS object of the parent dir (0 for the root)
//!  24    8 child_map_obj     MOS ZAP: child name -> dir object
//!  32    8 props_obj         MOS ZAP: property name -> value string
//!  40    8 used_bytes        deflated bytes charged here and below
//!  48    8 compressed_bytes  physical bytes here and below
//!  56    8 uncompressed_bytes logical bytes here and below
//!  64    8 origin_obj        a clone's origin snapshot (0: not a clone)
//!  72   56 reserved          zero
//! ```
//!
//! `DslDatasetPhys` (256 bytes):
//!
//! ```text
//! off size field
//!   0    8 dir_obj            MOS object of the owning DslDirPhys
//!   8    8 prev_snap_obj      newest snapshot (0 = none)
//!  16    8 prev_snap_txg      its txg (0 = none)
//!  24    8 next_snap_obj      for snapshots: the next newer one
//!  32    8 snapnames_obj      ZAP: snapshot name -> dataset object
//!  40    8 deadlist_obj       blocks freed while a snapshot holds them
//!  48    8 creation_time      seconds since the epoch
//!  56    8 creation_txg
//!  64    8 referenced_bytes   deflated bytes reachable from `bp`
//!  72    8 compressed_bytes   physical bytes reachable from `bp`
//!  80    8 uncompressed_bytes logical bytes reachable from `bp`
//!  88    8 unique_bytes       bytes only this dataset references
//!  96    8 guid
//! 104    8 flags
//! 112  128 bp                 root of the object set
//! 240    8 ext_obj            ZAP of further objects ("props", "holds",
//!                             "clones", "bookmarks"; 0: none yet)
//! 248    8 reserved           zero
//! ```

use crate::blkptr::{BlockPtr, BLKPTR_SIZE};
use crate::le::{put_u64, u64_at};
use crate::Corrupted;

pub const DSL_DIR_PHYS_SIZE: usize = 128;
pub const DSL_DATASET_PHYS_SIZE: usize = 256;
pub const DS_OFF_BP: usize = 112;
/// Offset of `ext_obj` in `DslDatasetPhys`.
pub const DS_OFF_EXT: usize = 240;
/// Offset of `origin_obj` in `DslDirPhys`.
pub const DD_OFF_ORIGIN: usize = 64;

/// `flags`: `zfs destroy -d` asked for this snapshot while it had holds
/// or clones; it goes when the last of them does.
pub const DS_FLAG_DEFER_DESTROY: u64 = 1 << 0;
/// `flags`: a head being received into (`zfs receive`): not mounted, not
/// listed if its name is hidden (`%recv`), and destroyed at import unless
/// it keeps resume state (`zfs receive -s`, key [`DS_EXT_RECV`]).
pub const DS_FLAG_INCONSISTENT: u64 = 1 << 1;
/// Every flag this build knows; any other bit is corruption.
pub const DS_FLAGS_KNOWN: u64 = DS_FLAG_DEFER_DESTROY | DS_FLAG_INCONSISTENT;

/// Keys of a dataset's `ext_obj` ZAP (each value one MOS object).
pub const DS_EXT_PROPS: &str = "props";
pub const DS_EXT_HOLDS: &str = "holds";
pub const DS_EXT_CLONES: &str = "clones";
pub const DS_EXT_BOOKMARKS: &str = "bookmarks";
/// A partial receive's resume state: a ZAP of `toguid`, `fromguid`,
/// `object`, `offset`, `bytes`, `features` (u64) and `toname` (string).
pub const DS_EXT_RECV: &str = "recv";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DslDirPhys {
    pub creation_time: u64,
    pub head_dataset_obj: u64,
    pub parent_dir_obj: u64,
    pub child_map_obj: u64,
    pub props_obj: u64,
    pub used_bytes: u64,
    pub compressed_bytes: u64,
    pub uncompressed_bytes: u64,
    pub origin_obj: u64,
}

impl DslDirPhys {
    pub fn encode(&self) -> [u8; DSL_DIR_PHYS_SIZE] {
        let mut b = [0u8; DSL_DIR_PHYS_SIZE];
        let f = [
            self.creation_time,
            self.head_dataset_obj,
            self.parent_dir_obj,
            self.child_map_obj,
            self.props_obj,
            self.used_bytes,
            self.compressed_bytes,
            self.uncompressed_bytes,
            self.origin_obj,
        ];
        for (i, v) in f.iter().enumerate() {
            put_u64(&mut b, i * 8, *v);
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, Corrupted> {
        let b = b
            .get(..DSL_DIR_PHYS_SIZE)
            .ok_or_else(|| Corrupted::new("dsl_dir", "short bonus"))?;
        if b[DD_OFF_ORIGIN + 8..].iter().any(|&x| x != 0) {
            return Err(Corrupted::new("dsl_dir", "reserved bytes are not zero"));
        }
        let w = |i: usize| u64_at(b, i * 8);
        Ok(DslDirPhys {
            creation_time: w(0),
            head_dataset_obj: w(1),
            parent_dir_obj: w(2),
            child_map_obj: w(3),
            props_obj: w(4),
            used_bytes: w(5),
            compressed_bytes: w(6),
            uncompressed_bytes: w(7),
            origin_obj: w(8),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DslDatasetPhys {
    pub dir_obj: u64,
    pub prev_snap_obj: u64,
    pub prev_snap_txg: u64,
    pub next_snap_obj: u64,
    pub snapnames_obj: u64,
    pub deadlist_obj: u64,
    pub creation_time: u64,
    pub creation_txg: u64,
    pub referenced_bytes: u64,
    pub compressed_bytes: u64,
    pub uncompressed_bytes: u64,
    pub unique_bytes: u64,
    pub guid: u64,
    pub flags: u64,
    pub bp: BlockPtr,
    pub ext_obj: u64,
}

impl DslDatasetPhys {
    fn words(&self) -> [u64; 14] {
        [
            self.dir_obj,
            self.prev_snap_obj,
            self.prev_snap_txg,
            self.next_snap_obj,
            self.snapnames_obj,
            self.deadlist_obj,
            self.creation_time,
            self.creation_txg,
            self.referenced_bytes,
            self.compressed_bytes,
            self.uncompressed_bytes,
            self.unique_bytes,
            self.guid,
            self.flags,
        ]
    }

    pub fn encode(&self) -> [u8; DSL_DATASET_PHYS_SIZE] {
        let mut b = [0u8; DSL_DATASET_PHYS_SIZE];
        for (i, v) in self.words().iter().enumerate() {
            put_u64(&mut b, i * 8, *v);
        }
        b[DS_OFF_BP..DS_OFF_BP + BLKPTR_SIZE].copy_from_slice(&self.bp.encode());
        put_u64(&mut b, DS_OFF_EXT, self.ext_obj);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, Corrupted> {
        let b = b
            .get(..DSL_DATASET_PHYS_SIZE)
            .ok_or_else(|| Corrupted::new("dsl_dataset", "short bonus"))?;
        if b[DS_OFF_EXT + 8..].iter().any(|&x| x != 0) {
            return Err(Corrupted::new("dsl_dataset", "reserved bytes are not zero"));
        }
        let w = |i: usize| u64_at(b, i * 8);
        if w(13) & !DS_FLAGS_KNOWN != 0 {
            return Err(Corrupted::new("dsl_dataset", "unknown flags"));
        }
        Ok(DslDatasetPhys {
            dir_obj: w(0),
            prev_snap_obj: w(1),
            prev_snap_txg: w(2),
            next_snap_obj: w(3),
            snapnames_obj: w(4),
            deadlist_obj: w(5),
            creation_time: w(6),
            creation_txg: w(7),
            referenced_bytes: w(8),
            compressed_bytes: w(9),
            uncompressed_bytes: w(10),
            unique_bytes: w(11),
            guid: w(12),
            flags: w(13),
            bp: BlockPtr::decode(&b[DS_OFF_BP..])?,
            ext_obj: u64_at(b, DS_OFF_EXT),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_golden() {
        let d = DslDirPhys {
            creation_time: 1,
            head_dataset_obj: 2,
            parent_dir_obj: 3,
            child_map_obj: 4,
            props_obj: 5,
            used_bytes: 6,
            compressed_bytes: 7,
            uncompressed_bytes: 8,
            origin_obj: 9,
        };
        let b = d.encode();
        for i in 0..9 {
            assert_eq!(b[i * 8], i as u8 + 1);
        }
        assert!(b[72..].iter().all(|&x| x == 0));
        assert_eq!(DslDirPhys::decode(&b).unwrap(), d);
    }

    #[test]
    fn dataset_golden() {
        let d = DslDatasetPhys {
            dir_obj: 9,
            guid: 0xabcd,
            referenced_bytes: 4096,
            ..Default::default()
        };
        let b = d.encode();
        assert_eq!(b[0], 9);
        assert_eq!(u64_at(&b, 64), 4096);
        assert_eq!(u64_at(&b, 96), 0xabcd);
        assert!(b[DS_OFF_BP..].iter().all(|&x| x == 0));
        assert_eq!(DslDatasetPhys::decode(&b).unwrap(), d);
        let d = DslDatasetPhys {
            ext_obj: 0x77,
            flags: DS_FLAG_DEFER_DESTROY,
            ..d
        };
        let mut b = d.encode();
        assert_eq!(u64_at(&b, DS_OFF_EXT), 0x77);
        assert!(b[DS_OFF_EXT + 8..].iter().all(|&x| x == 0));
        assert_eq!(DslDatasetPhys::decode(&b).unwrap(), d);
        b[13 * 8] |= 0x80;
        assert!(DslDatasetPhys::decode(&b).is_err(), "unknown flag");
    }

    proptest::proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let _ = DslDirPhys::decode(&bytes);
            let _ = DslDatasetPhys::decode(&bytes);
        }
    }
}
