#![no_main]
//! See `tarn_fuzz::send_stream` for what this target checks.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tarn_fuzz::send_stream(data));
