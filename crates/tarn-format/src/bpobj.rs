//! Block pointer lists and dead lists (ZFS's `bpobj` and `dsl_deadlist`),
//! feature `org.tarn:snapshots`.
//!
//! A **bpobj** is a MOS object (type `Bpobj`) whose data is an array of
//! block pointers, [`BLKPTR_SIZE`] bytes each, appended at the end; its
//! bonus ([`BpobjPhys`], 64 bytes) counts them and their space.
//!
//! ```text
//! off size field
//!   0    8 num_blkptrs  entries in the data
//!   8    8 dsize        deflated bytes of every copy (what USED counts)
//!  16    8 psize        physical bytes, each block once
//!  24    8 lsize        logical bytes, each block once
//!  32   32 reserved     zero
//! ```
//!
//! A **dead list** is a MOS ZAP (type `DeadList`) of sub-lists keyed by
//! birth txg: the key is `mintxg` as 16 lower-case hex digits and the
//! sub-list holds blocks with `birth > mintxg`, up to the next key. Its
//! value is an array of u64: `[dsize, psize, lsize, bpobj, bpobj, …]`, the
//! sub-list's totals and then the bpobjs holding its entries (several
//! after two dead lists were merged: merging appends the other's bpobjs,
//! it never copies entries). A value holds at most
//! [`DEADLIST_BPOBJS_MAX`] bpobjs.

use crate::blkptr::BLKPTR_SIZE;
use crate::le::{put_u64, u64_at};
use crate::Corrupted;

pub const BPOBJ_PHYS_SIZE: usize = 64;
/// Most bpobjs one dead-list sub-list names.
pub const DEADLIST_BPOBJS_MAX: usize = 4096;
/// Bytes of one bpobj entry.
pub const BPOBJ_ENTRY_SIZE: usize = BLKPTR_SIZE;

/// The bonus of a bpobj.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BpobjPhys {
    pub num_blkptrs: u64,
    pub dsize: u64,
    pub psize: u64,
    pub lsize: u64,
}

impl BpobjPhys {
    pub fn encode(&self) -> [u8; BPOBJ_PHYS_SIZE] {
        let mut b = [0u8; BPOBJ_PHYS_SIZE];
        for (i, v) in [self.num_blkptrs, self.dsize, self.psize, self.lsize]
            .iter()
            .enumerate()
        {
            put_u64(&mut b, i * 8, *v);
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, Corrupted> {
        let b = b
            .get(..BPOBJ_PHYS_SIZE)
            .ok_or_else(|| Corrupted::new("bpobj", "short bonus"))?;
        if b[32..].iter().any(|&x| x != 0) {
            return Err(Corrupted::new("bpobj", "reserved bytes are not zero"));
        }
        let num_blkptrs = u64_at(b, 0);
        // The entries must fit an object (2^63 bytes).
        if num_blkptrs > (1 << 56) {
            return Err(Corrupted::new("bpobj", "impossible entry count"));
        }
        Ok(BpobjPhys {
            num_blkptrs,
            dsize: u64_at(b, 8),
            psize: u64_at(b, 16),
            lsize: u64_at(b, 24),
        })
    }
}

/// One sub-list of a dead list: its totals and its bpobjs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeadlistEntry {
    pub dsize: u64,
    pub psize: u64,
    pub lsize: u64,
    pub bpobjs: Vec<u64>,
}

impl DeadlistEntry {
    /// The ZAP key of the sub-list that starts after `mintxg`.
    pub fn key(mintxg: u64) -> String {
        format!("{mintxg:016x}")
    }

    /// The `mintxg` of a key, if it is one.
    pub fn parse_key(key: &[u8]) -> Result<u64, Corrupted> {
        let text = std::str::from_utf8(key)
            .ok()
            .filter(|t| t.len() == 16 && t.bytes().all(|c| c.is_ascii_hexdigit()));
        text.and_then(|t| u64::from_str_radix(t, 16).ok())
            .ok_or_else(|| Corrupted::new("dead list", "key is not 16 hex digits"))
    }

    pub fn encode(&self) -> Vec<u64> {
        let mut v = vec![self.dsize, self.psize, self.lsize];
        v.extend_from_slice(&self.bpobjs);
        v
    }

    pub fn decode(v: &[u64]) -> Result<Self, Corrupted> {
        if v.len() < 3 || v.len() - 3 > DEADLIST_BPOBJS_MAX {
            return Err(Corrupted::new("dead list", "bad entry length"));
        }
        if v[3..].contains(&0) {
            return Err(Corrupted::new("dead list", "names object 0"));
        }
        Ok(DeadlistEntry {
            dsize: v[0],
            psize: v[1],
            lsize: v[2],
            bpobjs: v[3..].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bpobj_golden() {
        let p = BpobjPhys {
            num_blkptrs: 1,
            dsize: 2,
            psize: 3,
            lsize: 4,
        };
        let b = p.encode();
        for i in 0..4 {
            assert_eq!(u64_at(&b, i * 8), i as u64 + 1);
        }
        assert!(b[32..].iter().all(|&x| x == 0));
        assert_eq!(BpobjPhys::decode(&b).unwrap(), p);
        let mut bad = b;
        bad[40] = 1;
        assert!(BpobjPhys::decode(&bad).is_err());
        assert!(BpobjPhys::decode(&b[..10]).is_err());
    }

    #[test]
    fn deadlist_entries_round_trip_and_refuse_garbage() {
        let e = DeadlistEntry {
            dsize: 8192,
            psize: 4096,
            lsize: 4096,
            bpobjs: vec![12, 40],
        };
        assert_eq!(DeadlistEntry::decode(&e.encode()).unwrap(), e);
        assert!(DeadlistEntry::decode(&[1, 2]).is_err());
        assert!(DeadlistEntry::decode(&[1, 2, 3, 0]).is_err());
        assert_eq!(DeadlistEntry::key(0x1f), "000000000000001f");
        assert_eq!(DeadlistEntry::parse_key(b"000000000000001f").unwrap(), 0x1f);
        assert!(DeadlistEntry::parse_key(b"1f").is_err());
        assert!(DeadlistEntry::parse_key(b"00000000000000zz").is_err());
    }

    proptest::proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..80),
                                words in proptest::collection::vec(proptest::num::u64::ANY, 0..8)) {
            let _ = BpobjPhys::decode(&bytes);
            let _ = DeadlistEntry::decode(&words);
            let _ = DeadlistEntry::parse_key(&bytes);
        }
    }
}
