//! A volume's on-disk records (ZFS's `zvol.c`: `ZVOL_OBJ`, `ZVOL_ZAP_OBJ`).
//!
//! A volume dataset is an object set of type `Zvol` holding two objects:
//!
//! | object | type  | what                                                  |
//! |--------|-------|-------------------------------------------------------|
//! | 1      | `Zvol`| the volume's bytes; block size = `volblocksize`        |
//! | 2      | `Zap` | properties: `size` → volsize in bytes (one u64)        |
//!
//! The data object's block size is fixed when the volume is created, and
//! its length in bytes is `size` (a multiple of the block size); bytes
//! never written read as zeros (holes). The size lives in the object set
//! itself, not in the dataset's property ZAP, so a send stream carries
//! it with the data and a received volume knows its size.

/// The object holding the volume's bytes.
pub const ZVOL_OBJ: u64 = 1;
/// The ZAP holding the volume's size.
pub const ZVOL_ZAP_OBJ: u64 = 2;
/// Key of the volume size (bytes) in [`ZVOL_ZAP_OBJ`].
pub const ZVOL_SIZE_KEY: &str = "size";
/// Smallest `volblocksize`.
pub const ZVOL_BLOCK_MIN: u32 = 512;
/// Largest `volblocksize` (OpenZFS allows up to 128 KiB without
/// `large_blocks`; tarn keeps the same bound for volumes).
pub const ZVOL_BLOCK_MAX: u32 = 128 << 10;
/// Default `volblocksize`, as OpenZFS 2.2 and later.
pub const ZVOL_BLOCK_DEFAULT: u32 = 16 << 10;
