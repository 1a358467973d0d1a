#![no_main]
//! See `tarn_fuzz::znode` for what this target checks.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tarn_fuzz::znode(data));
