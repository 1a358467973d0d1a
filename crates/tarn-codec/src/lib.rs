//! tarn-codec: the pure computation on a block's way to and from disk —
//! checksums and per-record compression. No I/O, no state beyond per-thread
//! compression contexts, so every function here can be tested and fuzzed in
//! isolation.
//!
//! Code map:
//! * [`fletcher4`](mod@fletcher4): the default checksum, scalar and SIMD,
//!   dispatched once per process on CPU features (defined in
//!   `tarn_format::fletcher4`, because the format's own log blocks use it;
//!   re-exported here with the other algorithms);
//! * [`checksum`](mod@checksum): the per-algorithm entry point (fletcher4,
//!   SHA-256, BLAKE3) returning the block pointer's four checksum words;
//! * [`compress`](mod@compress): the "is it worth it" rule, the on-disk frame
//!   of a compressed block, and the lz4 / gzip / zstd back ends;
//! * [`zle`]: ZFS's zero-length encoding.
//!
//! **Architecture Invariant:** decoders never trust a length found in their
//! input, never panic on input bytes and never allocate more than the
//! caller's `lsize` (plus a constant); damage is reported as
//! [`tarn_format::Corrupted`].

pub mod checksum;
pub mod compress;
pub mod zle;

pub use checksum::checksum;
pub use compress::{
    compress, decompress, lz4_probe_promising, worth_storing, FRAME_HEADER_BYTES,
    LZ4_PROBE_MIN_BYTES,
};
pub use tarn_format::fletcher4;
pub use tarn_format::fletcher4::{
    fletcher4, fletcher4_avx2_available, fletcher4_impl_name, fletcher4_kernels, fletcher4_scalar,
};
