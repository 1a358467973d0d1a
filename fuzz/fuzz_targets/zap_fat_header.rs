#![no_main]
//! See `tarn_fuzz::zap_fat_header` for what this target checks.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tarn_fuzz::zap_fat_header(data));
