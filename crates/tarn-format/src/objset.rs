//! The object set header block (ZFS's `objset_phys_t`).
//!
//! An object set is a flat array of objects (a filesystem's files and
//! directories, a zvol's data, the pool's MOS). Its header block holds the
//! meta-dnode — object 0, whose data blocks are the dnode blocks of every
//! other object — plus the object set type and the intent log header. The
//! block pointer to this header (type `Objset`) is the whole object set:
//! the uberblock names the MOS this way and a dataset record names its
//! filesystem the same way.
//!
//! The header is 4 KiB: room after the meta-dnode is reserved so that later
//! special dnodes (user/group/project space accounting, as ZFS grew them)
//! can be added behind a feature flag without moving anything.
//!
//! Byte layout (4096 bytes, little-endian):
//!
//! ```text
//! off   size  field
//!    0     8  magic       OBJSET_MAGIC ("tarnOBJS")
//!    8     8  version     FORMAT_VERSION
//!   16     8  type        ObjsetType code
//!   24     8  flags       zero (no flags defined yet)
//!   32    32  reserved    zero
//!   64   512  meta_dnode  DnodePhys of object 0 (type DnodeBlock)
//!  576   256  zil_header  intent log header, zero until the ZIL exists
//!  832  3264  reserved    zero
//! ```

use crate::blkptr::ObjType;
use crate::dnode::{DnodePhys, DNODE_BLOCK_SIZE, DNODE_SIZE};
use crate::le::{put_u64, u64_at};
use crate::{Corrupted, FORMAT_VERSION};

pub const OBJSET_PHYS_SIZE: usize = 4096;
/// "tarnOBJS" read as a little-endian u64.
pub const OBJSET_MAGIC: u64 = u64::from_le_bytes(*b"tarnOBJS");
pub const ZIL_HEADER_SIZE: usize = 256;

pub const OS_OFF_MAGIC: usize = 0;
pub const OS_OFF_VERSION: usize = 8;
pub const OS_OFF_TYPE: usize = 16;
pub const OS_OFF_FLAGS: usize = 24;
pub const OS_OFF_META_DNODE: usize = 64;
pub const OS_OFF_ZIL_HEADER: usize = OS_OFF_META_DNODE + DNODE_SIZE;
pub const OS_OFF_RESERVED: usize = OS_OFF_ZIL_HEADER + ZIL_HEADER_SIZE;

const _: () = assert!(OS_OFF_ZIL_HEADER == 576 && OS_OFF_RESERVED == 832);

/// What an object set holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjsetType {
    /// The pool's meta object set.
    Mos,
    /// A filesystem dataset (and, later, its snapshots).
    Filesystem,
    /// A block volume.
    Zvol,
}

impl ObjsetType {
    pub fn code(self) -> u64 {
        match self {
            ObjsetType::Mos => 1,
            ObjsetType::Filesystem => 2,
            ObjsetType::Zvol => 3,
        }
    }
    pub fn from_code(c: u64) -> Result<Self, Corrupted> {
        Ok(match c {
            1 => ObjsetType::Mos,
            2 => ObjsetType::Filesystem,
            3 => ObjsetType::Zvol,
            _ => return Err(Corrupted::new("objset", format!("unknown objset type {c}"))),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjsetPhys {
    pub typ: ObjsetType,
    pub meta_dnode: DnodePhys,
    /// Opaque to this layer; the intent log defines it.
    pub zil_header: [u8; ZIL_HEADER_SIZE],
}

impl ObjsetPhys {
    /// An empty object set: a meta-dnode with no dnode blocks.
    pub fn new(typ: ObjsetType) -> Self {
        ObjsetPhys {
            typ,
            meta_dnode: DnodePhys::new(ObjType::DnodeBlock, DNODE_BLOCK_SIZE as u32),
            zil_header: [0; ZIL_HEADER_SIZE],
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; OBJSET_PHYS_SIZE];
        put_u64(&mut b, OS_OFF_MAGIC, OBJSET_MAGIC);
        put_u64(&mut b, OS_OFF_VERSION, FORMAT_VERSION);
        put_u64(&mut b, OS_OFF_TYPE, self.typ.code());
        self.meta_dnode
            .encode(&mut b[OS_OFF_META_DNODE..OS_OFF_ZIL_HEADER]);
        b[OS_OFF_ZIL_HEADER..OS_OFF_RESERVED].copy_from_slice(&self.zil_header);
        b
    }

    pub fn decode(b: &[u8]) -> Result<ObjsetPhys, Corrupted> {
        let b = b
            .get(..OBJSET_PHYS_SIZE)
            .ok_or_else(|| Corrupted::new("objset", "short buffer"))?;
        if u64_at(b, OS_OFF_MAGIC) != OBJSET_MAGIC {
            return Err(Corrupted::new("objset", "bad magic"));
        }
        let version = u64_at(b, OS_OFF_VERSION);
        if version == 0 || version > FORMAT_VERSION {
            return Err(Corrupted::new(
                "objset",
                format!("unsupported version {version}"),
            ));
        }
        if u64_at(b, OS_OFF_FLAGS) != 0
            || b[32..64].iter().any(|&x| x != 0)
            || b[OS_OFF_RESERVED..].iter().any(|&x| x != 0)
        {
            return Err(Corrupted::new("objset", "reserved bytes or flags not zero"));
        }
        let typ = ObjsetType::from_code(u64_at(b, OS_OFF_TYPE))?;
        let meta_dnode = DnodePhys::decode(&b[OS_OFF_META_DNODE..OS_OFF_ZIL_HEADER])?
            .ok_or_else(|| Corrupted::new("objset", "meta-dnode slot is free"))?;
        if meta_dnode.typ != ObjType::DnodeBlock
            || meta_dnode.data_block_size as usize != DNODE_BLOCK_SIZE
        {
            return Err(Corrupted::new(
                "objset",
                "meta-dnode is not an array of dnode blocks",
            ));
        }
        let mut zil_header = [0u8; ZIL_HEADER_SIZE];
        zil_header.copy_from_slice(&b[OS_OFF_ZIL_HEADER..OS_OFF_RESERVED]);
        Ok(ObjsetPhys {
            typ,
            meta_dnode,
            zil_header,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_bytes() {
        let mut os = ObjsetPhys::new(ObjsetType::Filesystem);
        os.meta_dnode.maxblkid = 2;
        os.meta_dnode.nlevels = 2;
        os.zil_header[0] = 7;
        let b = os.encode();
        assert_eq!(b.len(), OBJSET_PHYS_SIZE);
        let mut want = vec![0u8; OBJSET_PHYS_SIZE];
        want[0..8].copy_from_slice(b"tarnOBJS");
        want[8] = 1;
        want[16] = 2;
        want[64] = 2; // DnodeBlock
        want[65] = 17;
        want[66] = 2;
        want[67] = 1;
        want[72..76].copy_from_slice(&32u32.to_le_bytes()); // 16 KiB in sectors
        want[80] = 2; // maxblkid
        want[576] = 7;
        assert_eq!(b, want);
        assert_eq!(ObjsetPhys::decode(&b).unwrap(), os);
    }

    #[test]
    fn rejects_damage() {
        let b = ObjsetPhys::new(ObjsetType::Mos).encode();
        for off in [0usize, 8, 16, 24, 40, 64, 72, 1000, 4095] {
            let mut c = b.clone();
            c[off] ^= 0x5A;
            assert!(ObjsetPhys::decode(&c).is_err(), "offset {off}");
        }
        assert!(ObjsetPhys::decode(&b[..100]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 4096)) {
            let _ = ObjsetPhys::decode(&bytes);
        }

        #[test]
        fn decode_never_panics_near_valid(off in 0usize..4096, val in proptest::num::u8::ANY) {
            let mut b = ObjsetPhys::new(ObjsetType::Zvol).encode();
            b[off] = val;
            if let Ok(os) = ObjsetPhys::decode(&b) {
                proptest::prop_assert_eq!(os.encode(), b);
            }
        }
    }
}
