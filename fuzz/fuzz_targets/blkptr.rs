#![no_main]
//! See `tarn_fuzz::blkptr` for what this target checks.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tarn_fuzz::blkptr(data));
