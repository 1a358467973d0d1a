//! The on-disk format of tarn, in one place.
//!
//! Every structure that reaches a device is defined here as a plain Rust
//! value with an explicit little-endian encoder and a *validating* decoder.
//! Decoders never trust a length, count or type code read from disk: a bad
//! value is reported as [`Corrupted`], never a panic, never an unbounded
//! allocation. `docs/FORMAT.md` describes the same layouts byte by byte and
//! `tests/format_doc.rs` checks the offsets quoted there against the
//! constants in this crate, so the two cannot drift apart.
//!
//! Layout conventions: all integers are little-endian; sizes on disk are in
//! bytes unless the field name says otherwise; reserved bytes are written as
//! zero and a decoder rejects non-zero reserved bytes where that is cheap, so
//! a future version can give them meaning behind a feature flag.

pub mod blkptr;
pub mod bpobj;
pub mod dnode;
pub mod dsl;
pub mod fletcher4;
pub mod label;
pub mod objset;
pub mod scan;
pub mod spacemap;
pub mod stream;
pub mod uberblock;
pub mod zap;
pub mod zil;
pub mod zpl;
pub mod zvol;

pub use blkptr::{BlockPtr, ChecksumAlg, Compression, Dva, ObjType, BLKPTR_SIZE};
pub use uberblock::{Uberblock, UBERBLOCK_SIZE};

/// The on-disk format version written by this build. Bumped only for a
/// change that older code cannot read; smaller changes use feature flags.
pub const FORMAT_VERSION: u64 = 1;

/// Smallest unit of allocation and of on-disk sizes: 2^9 bytes.
pub const SECTOR_SHIFT: u32 = 9;
pub const SECTOR_SIZE: u64 = 1 << SECTOR_SHIFT;

/// Largest logical block (recordsize upper bound), 16 MiB.
pub const MAX_BLOCK_SIZE: u64 = 16 << 20;
/// Smallest logical block, 512 B.
pub const MIN_BLOCK_SIZE: u64 = 512;

/// Feature bit of `org.tarn:snapshots`: the pool holds snapshot,
/// dead-list or bookmark records (set from the first snapshot on, in every
/// uberblock). A tarn that does not know it would free blocks snapshots
/// still hold, so it must not import the pool.
pub const FEATURE_SNAPSHOTS: u64 = 1 << 0;

/// Feature bits (in the uberblock's `features` word) this build knows. A
/// pool with any other bit set is refused at import: it was written by a
/// newer tarn with a format this one cannot read.
pub const KNOWN_FEATURE_BITS: u64 = FEATURE_SNAPSHOTS;

/// Feature flags this build knows. A pool that has a feature active that is
/// not in this list is refused at import (read-incompatible features) or
/// imported read-only (write-incompatible ones) — see docs/FORMAT.md.
pub const KNOWN_FEATURES: &[&str] = &["org.tarn:blake3", "org.tarn:snapshots", "org.tarn:zstd"];

/// A decoder found bytes that cannot be a valid structure of this format.
/// Corruption is a value, never a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupted {what}: {why}")]
pub struct Corrupted {
    pub what: &'static str,
    pub why: String,
}

impl Corrupted {
    pub fn new(what: &'static str, why: impl Into<String>) -> Self {
        Corrupted {
            what,
            why: why.into(),
        }
    }
}

/// Little-endian field readers over a slice whose length the caller has
/// already checked. They take fixed offsets, so an out-of-range offset is a
/// bug in this crate (and panics in tests), never a property of disk bytes.
pub(crate) mod le {
    pub fn u64_at(b: &[u8], off: usize) -> u64 {
        u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
    }
    pub fn u32_at(b: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
    }
    pub fn u16_at(b: &[u8], off: usize) -> u16 {
        u16::from_le_bytes(b[off..off + 2].try_into().expect("2 bytes"))
    }
    pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
        b[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }
    pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
        b[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }
    pub fn put_u16(b: &mut [u8], off: usize, v: u16) {
        b[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }
}
