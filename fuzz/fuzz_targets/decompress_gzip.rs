#![no_main]
//! `tarn_codec::decompress` with gzip; see `tarn_fuzz::decompress`.
use tarn_format::Compression;
libfuzzer_sys::fuzz_target!(|data: &[u8]| tarn_fuzz::decompress(Compression::Gzip(6), data));
