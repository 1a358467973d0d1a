#![no_main]
//! See `tarn_fuzz::objset` for what this target checks.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tarn_fuzz::objset(data));
