#![no_main]
//! `tarn_codec::decompress` with lz4; see `tarn_fuzz::decompress`.
use tarn_format::Compression;
libfuzzer_sys::fuzz_target!(|data: &[u8]| tarn_fuzz::decompress(Compression::Lz4, data));
