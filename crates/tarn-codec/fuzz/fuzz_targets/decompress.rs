//! Feeds arbitrary bytes to `decompress` for every algorithm. The first
//! bytes pick the algorithm and the logical size; the rest is the stored
//! block. The decoder must return `Ok` with exactly `lsize` bytes or
//! `Corrupted`, never panic and never allocate from a length in the data
//! (AddressSanitizer and libFuzzer's -rss_limit_mb catch the latter).
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run decompress` in crates/tarn-codec.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_format::Compression;

fuzz_target!(|data: &[u8]| {
    let Some((&[pick, s0, s1, s2], stored)) = data.split_first_chunk::<4>() else {
        return;
    };
    let alg = match pick % 5 {
        0 => Compression::Off,
        1 => Compression::Lz4,
        2 => Compression::Zle,
        3 => Compression::Gzip(1 + pick / 5 % 9),
        _ => Compression::Zstd(1 + pick / 5 % 19),
    };
    // Up to 16 MiB + a bit, so the over-limit rejection is exercised too.
    let lsize = (usize::from(s0) | usize::from(s1) << 8 | usize::from(s2) << 16) * 2;
    if let Ok(out) = tarn_codec::decompress(alg, stored, lsize) {
        assert_eq!(out.len(), lsize);
    }
    // Also with a well-formed header, so the back ends see the garbage.
    let mut framed = (stored.len() as u32).to_le_bytes().to_vec();
    framed.extend_from_slice(stored);
    if let Ok(out) = tarn_codec::decompress(alg, &framed, lsize) {
        assert_eq!(out.len(), lsize);
    }
});
