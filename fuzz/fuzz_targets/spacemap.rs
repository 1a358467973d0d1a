#![no_main]
//! See `tarn_fuzz::spacemap` for what this target checks.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tarn_fuzz::spacemap(data));
