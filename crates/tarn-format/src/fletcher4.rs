//! Fletcher-4, the default block checksum, exactly as ZFS computes it
//! (`module/zcommon/zfs_fletcher.c`).
//!
//! The definition: read the data as little-endian `u32` words `w` and run four
//! 64-bit wrapping accumulators, `a += w; b += a; c += b; d += c`, starting at
//! zero. The checksum is `[a, b, c, d]`. Our blocks are always multiples of 512
//! bytes, and intent log blocks (`crate::zil`) of 8; for any other length the trailing 1–3 bytes are zero-padded into one
//! last word (ZFS never checksums such lengths, so this is our own definition
//! and it is only ever used on in-memory structures).
//!
//! Why several implementations: the scalar loop is a chain of four dependent
//! adds per word and runs well below the target speed (docs/MEASUREMENTS.md,
//! "Format: Fletcher-4 kernels"), while every block written or read is
//! checksummed, so it sits on the hot path. The SIMD versions keep `L`
//! independent lanes (lane `j` sees words `j, j+L, j+2L, …`) and fold them into
//! the serial result at the end with fixed integer coefficients (derived in
//! `lane_coefficients`). The kernel is chosen once per process from the
//! CPU's features and cached in a `OnceLock`; all kernels produce
//! bit-identical results, which the tests check on random data.

use std::sync::OnceLock;

/// A whole-buffer Fletcher-4 implementation.
pub type Kernel = fn(&[u8]) -> [u64; 4];

/// Fletcher-4 of `data` with the kernel chosen for this CPU (AVX2 where present).
pub fn fletcher4(data: &[u8]) -> [u64; 4] {
    static IMPL: OnceLock<Kernel> = OnceLock::new();
    (IMPL.get_or_init(|| select_impl().1))(data)
}

/// The portable reference implementation; also what the benchmark compares
/// the dispatched version against.
pub fn fletcher4_scalar(data: &[u8]) -> [u64; 4] {
    let mut state = [0u64; 4];
    update_scalar(&mut state, data);
    state
}

/// Adds `data` to a running Fletcher-4 `state` (start at zeros): a stream
/// fed in pieces whose lengths are multiples of 4 sums exactly as the
/// whole would (the send stream's running checksum, `crate::stream`).
pub fn fletcher4_update(state: &mut [u64; 4], data: &[u8]) {
    // Long pieces go through the fast kernel from a zero state and are
    // folded in (`combine`); short ones are not worth the fold.
    if data.len() >= COMBINE_MIN_BYTES && data.len().is_multiple_of(4) {
        let seg = fletcher4(data);
        *state = combine(*state, seg, (data.len() / 4) as u64);
    } else {
        update_scalar(state, data);
    }
}

/// Shortest piece [`fletcher4_update`] sends through the SIMD kernel.
const COMBINE_MIN_BYTES: usize = 1024;

/// The state after a prefix with state `s` and then `n` words whose sums
/// from zero are `seg`: each of the prefix's accumulators is added to the
/// later ones once per word, so `b` gains `n·a`, `c` gains `n·b +
/// C(n+1,2)·a` and `d` gains `n·c + C(n+1,2)·b + C(n+2,3)·a` (all mod 2^64).
fn combine(s: [u64; 4], seg: [u64; 4], n: u64) -> [u64; 4] {
    let [a, b, c, d] = s;
    // C(n+1,2) and C(n+2,3) mod 2^64: divide the factors that 2 and 3
    // divide before multiplying, so nothing is lost to the wrap.
    let choose = |mut f: Vec<u128>| {
        let divisors: &[u128] = if f.len() == 2 { &[2] } else { &[2, 3] };
        for &p in divisors {
            if let Some(x) = f.iter_mut().find(|x| **x % p == 0) {
                *x /= p;
            }
        }
        f.iter().fold(1u64, |acc, x| acc.wrapping_mul(*x as u64))
    };
    let n128 = u128::from(n);
    let t2 = choose(vec![n128, n128 + 1]);
    let t3 = choose(vec![n128, n128 + 1, n128 + 2]);
    [
        a.wrapping_add(seg[0]),
        b.wrapping_add(n.wrapping_mul(a)).wrapping_add(seg[1]),
        c.wrapping_add(n.wrapping_mul(b))
            .wrapping_add(t2.wrapping_mul(a))
            .wrapping_add(seg[2]),
        d.wrapping_add(n.wrapping_mul(c))
            .wrapping_add(t2.wrapping_mul(b))
            .wrapping_add(t3.wrapping_mul(a))
            .wrapping_add(seg[3]),
    ]
}

/// Whether [`fletcher4`] runs the AVX2 kernel on this CPU.
pub fn fletcher4_avx2_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Name of the kernel [`fletcher4`] dispatches to, for benchmark headers.
pub fn fletcher4_impl_name() -> &'static str {
    select_impl().0
}

/// Every kernel this CPU can run, with a short name, scalar first. For
/// benchmarks and tests; [`fletcher4`] uses the one named by
/// [`fletcher4_impl_name`].
pub fn fletcher4_kernels() -> Vec<(&'static str, Kernel)> {
    let mut kernels: Vec<(&'static str, Kernel)> = vec![("scalar", fletcher4_scalar)];
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            kernels.push(("avx2", x86::fletcher4_avx2));
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            kernels.push(("avx512f", x86::fletcher4_avx512));
        }
    }
    kernels
}

/// AVX2 when present, else scalar. The AVX-512 kernel is not preferred: on
/// the AMD EPYC (Zen 4) we measure on, its gain over AVX2 is within the
/// noise (Zen 4 splits 512-bit operations into two 256-bit halves), both
/// clear the target (tarn-bench's `FLETCHER4_TARGET_GBPS`;
/// docs/MEASUREMENTS.md, "Format: Fletcher-4 kernels"), and on some Intel
/// parts 512-bit code lowers the clock for everything else on the core. It
/// stays available and tested for CPUs where it wins.
fn select_impl() -> (&'static str, Kernel) {
    let kernels = fletcher4_kernels();
    let pick = kernels.iter().find(|(name, _)| *name == "avx2");
    *pick.unwrap_or(&kernels[0])
}

/// Continues the serial accumulation over `data`, zero-padding a partial
/// trailing word. Every SIMD kernel finishes its tail with this, so the tail
/// rule lives in one place.
fn update_scalar(state: &mut [u64; 4], data: &[u8]) {
    let [mut a, mut b, mut c, mut d] = *state;
    let words = data.chunks_exact(4);
    let tail = words.remainder();
    for w in words {
        let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as u64;
        a = a.wrapping_add(w);
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    if !tail.is_empty() {
        let mut padded = [0u8; 4];
        padded[..tail.len()].copy_from_slice(tail);
        let w = u32::from_le_bytes(padded) as u64;
        a = a.wrapping_add(w);
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    *state = [a, b, c, d];
}

/// Coefficients that fold `L` lane accumulators into the serial state.
///
/// Derivation. Over `N = L·m` words the serial sums are, for word `k`
/// (0-based) and `n = N − k` (how many steps remain including its own):
/// `A = Σ w`, `B = Σ n·w`, `C = Σ C(n+1,2)·w`, `D = Σ C(n+2,3)·w`.
/// Lane `j` holds word `k = L·i + j` at its step `i`, so with `s = m − i` its
/// own sums weigh that word by `1, s, C(s+1,2), C(s+2,3)` in `a_j, b_j, c_j,
/// d_j`. Since `n = L·s − j`, each serial weight is a polynomial in `s` of
/// degree ≤ 3 and can be written in the lane basis `{1, s, C(s+1,2),
/// C(s+2,3)}` with coefficients that depend only on `L` and `j`:
///
/// * `B`: `L·s − j`                       → `L·b_j − j·a_j`
/// * `C`: `(L·s − j)(L·s − j + 1)/2`      → `L²·c_j − (L(L−1)/2 + L·j)·b_j + C(j,2)·a_j`
/// * `D`: `f(s) = C(L·s − j + 2, 3)`      → `L³·d_j + β·c_j + γ·b_j + δ·a_j`,
///   where `δ = f(0) = −C(j,3)` and `β, γ` solve the cubic at `s = 1, 2`.
///
/// For `L = 4` this gives ZFS's AVX2 `fini` constants (e.g. `D` uses
/// `64, −48/−64/−80/−96, 4/10/20/34, 0/0/0/−1`). The identities hold over the
/// integers, so they also hold modulo 2^64, which is why wrapping arithmetic
/// in the lanes is harmless.
///
/// Indexed `[lane j][target word A/B/C/D][source accumulator a/b/c/d]`.
const fn lane_coefficients<const L: usize>() -> [[[i64; 4]; 4]; L] {
    let l = L as i64;
    let mut out = [[[0i64; 4]; 4]; L];
    let mut j = 0;
    while j < L {
        let jj = j as i64;
        out[j][0] = [1, 0, 0, 0];
        out[j][1] = [-jj, l, 0, 0];
        out[j][2] = [jj * (jj - 1) / 2, -(l * (l - 1) / 2 + l * jj), l * l, 0];
        let alpha = l * l * l;
        let delta = -(jj * (jj - 1) * (jj - 2) / 6);
        let f1 = tetra(l - jj);
        let f2 = tetra(2 * l - jj);
        let p = f1 - alpha - delta;
        let q = f2 - 4 * alpha - delta;
        let beta = q - 2 * p;
        let gamma = 3 * p - q;
        out[j][3] = [delta, gamma, beta, alpha];
        j += 1;
    }
    out
}

/// `C(n+2, 3) = n(n+1)(n+2)/6`, the weight of a word `n` steps from the end in `D`.
const fn tetra(n: i64) -> i64 {
    n * (n + 1) * (n + 2) / 6
}

/// Folds per-lane accumulators (`lanes[0]` = all `a_j`, `[1]` = `b_j`, …) into
/// the serial `[A, B, C, D]`.
fn combine_lanes<const L: usize>(lanes: &[[u64; L]; 4]) -> [u64; 4] {
    let coef = const { lane_coefficients::<L>() };
    let mut out = [0u64; 4];
    for (target, slot) in out.iter_mut().enumerate() {
        let mut sum = 0u64;
        for (j, lane_coef) in coef.iter().enumerate() {
            for (src, &k) in lane_coef[target].iter().enumerate() {
                sum = sum.wrapping_add(lanes[src][j].wrapping_mul(k as u64));
            }
        }
        *slot = sum;
    }
    out
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{combine_lanes, update_scalar};
    use std::arch::x86_64::*;

    pub fn fletcher4_avx2(data: &[u8]) -> [u64; 4] {
        assert!(std::arch::is_x86_feature_detected!("avx2"));
        // SAFETY: the assertion above proves the CPU supports AVX2, the only
        // requirement of this `#[target_feature]` function.
        unsafe { avx2(data) }
    }

    pub fn fletcher4_avx512(data: &[u8]) -> [u64; 4] {
        assert!(std::arch::is_x86_feature_detected!("avx512f"));
        // SAFETY: the assertion above proves the CPU supports AVX-512F, the
        // only requirement of this `#[target_feature]` function.
        unsafe { avx512(data) }
    }

    /// Four 64-bit lanes, 16 bytes (four words) per step.
    #[target_feature(enable = "avx2")]
    unsafe fn avx2(data: &[u8]) -> [u64; 4] {
        let chunks = data.chunks_exact(16);
        let tail = chunks.remainder();
        let (mut a, mut b, mut c, mut d) = (
            _mm256_setzero_si256(),
            _mm256_setzero_si256(),
            _mm256_setzero_si256(),
            _mm256_setzero_si256(),
        );
        for chunk in chunks {
            // SAFETY: `chunk` is exactly 16 readable bytes and `loadu` has no
            // alignment requirement.
            let words = unsafe { _mm_loadu_si128(chunk.as_ptr().cast()) };
            a = _mm256_add_epi64(a, _mm256_cvtepu32_epi64(words));
            b = _mm256_add_epi64(b, a);
            c = _mm256_add_epi64(c, b);
            d = _mm256_add_epi64(d, c);
        }
        let mut lanes = [[0u64; 4]; 4];
        for (dst, v) in lanes.iter_mut().zip([a, b, c, d]) {
            // SAFETY: `dst` is 32 writable bytes and `storeu` has no alignment
            // requirement.
            unsafe { _mm256_storeu_si256(dst.as_mut_ptr().cast(), v) };
        }
        let mut state = combine_lanes(&lanes);
        update_scalar(&mut state, tail);
        state
    }

    /// Eight 64-bit lanes, 32 bytes (eight words) per step.
    #[target_feature(enable = "avx512f")]
    unsafe fn avx512(data: &[u8]) -> [u64; 4] {
        let chunks = data.chunks_exact(32);
        let tail = chunks.remainder();
        let (mut a, mut b, mut c, mut d) = (
            _mm512_setzero_si512(),
            _mm512_setzero_si512(),
            _mm512_setzero_si512(),
            _mm512_setzero_si512(),
        );
        for chunk in chunks {
            // SAFETY: `chunk` is exactly 32 readable bytes and `loadu` has no
            // alignment requirement.
            let words = unsafe { _mm256_loadu_si256(chunk.as_ptr().cast()) };
            a = _mm512_add_epi64(a, _mm512_cvtepu32_epi64(words));
            b = _mm512_add_epi64(b, a);
            c = _mm512_add_epi64(c, b);
            d = _mm512_add_epi64(d, c);
        }
        let mut lanes = [[0u64; 8]; 4];
        for (dst, v) in lanes.iter_mut().zip([a, b, c, d]) {
            // SAFETY: `dst` is 64 writable bytes and `storeu` has no alignment
            // requirement.
            unsafe { _mm512_storeu_si512(dst.as_mut_ptr().cast(), v) };
        }
        let mut state = combine_lanes(&lanes);
        update_scalar(&mut state, tail);
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_running_sum_in_pieces_is_the_sum_of_the_whole() {
        let data: Vec<u8> = (0..200_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
            .collect();
        let whole = fletcher4_scalar(&data);
        for pieces in [
            vec![4, 8, 1024, 4096],
            vec![100_000],
            vec![1028, 1024, 2048, 96_000],
        ] {
            let mut st = [0u64; 4];
            let mut at = 0;
            for p in pieces.iter().cycle() {
                let end = (at + p).min(data.len());
                fletcher4_update(&mut st, &data[at..end]);
                at = end;
                if at == data.len() {
                    break;
                }
            }
            assert_eq!(st, whole, "{pieces:?}");
        }
        // The fold itself, on counts whose binomials overflow 64 bits.
        for n in [1u64, 2, 3, 1 << 21, (1 << 33) + 1, u64::MAX / 7] {
            let s = [3, 5, 7, 11];
            let one = combine(combine(s, [1, 1, 1, 1], 1), [0, 0, 0, 0], n);
            let two = combine(s, combine([1, 1, 1, 1], [0, 0, 0, 0], n), n + 1);
            assert_eq!(one, two, "n = {n}");
        }
    }

    fn words_le(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn known_answer_from_definition() {
        // Worked by hand: a = 1,3,6,10; b = 1,4,10,20; c = 1,5,15,35; d = 1,6,21,56.
        assert_eq!(fletcher4_scalar(&words_le(&[1, 2, 3, 4])), [10, 20, 35, 56]);
        assert_eq!(fletcher4(&words_le(&[1, 2, 3, 4])), [10, 20, 35, 56]);
        assert_eq!(fletcher4(&[]), [0, 0, 0, 0]);
        // A single word w: every accumulator equals w.
        assert_eq!(fletcher4(&words_le(&[0xdead_beef])), [0xdead_beef; 4]);
    }

    #[test]
    fn known_answer_all_ones_sector() {
        // 128 words of 0xffff_ffff (one 512-byte sector of 0xff):
        // A = 128·w, B = w·Σn (n=1..128), C = w·ΣC(n+1,2), D = w·ΣC(n+2,3).
        let w = 0xffff_ffffu64;
        let n = 128u64;
        let expect = [
            w * n,
            w * (n * (n + 1) / 2),
            w * (n * (n + 1) * (n + 2) / 6),
            w * (n * (n + 1) * (n + 2) * (n + 3) / 24),
        ];
        assert_eq!(fletcher4_scalar(&[0xff; 512]), expect);
        assert_eq!(fletcher4(&[0xff; 512]), expect);
    }

    #[test]
    fn partial_tail_word_is_zero_padded() {
        assert_eq!(
            fletcher4(&[1, 2, 3, 4, 5]),
            fletcher4(&[1, 2, 3, 4, 5, 0, 0, 0])
        );
        assert_eq!(fletcher4(&[7]), [7; 4]);
    }

    #[test]
    fn zfs_avx2_fini_constants() {
        // The constants in ZFS's fletcher_4_avx2_fini, as a check on the derivation.
        let c = lane_coefficients::<4>();
        assert_eq!(
            [c[0][1], c[1][1], c[2][1], c[3][1]].map(|x| x[0]),
            [0, -1, -2, -3]
        );
        assert_eq!(
            [c[0][2], c[1][2], c[2][2], c[3][2]].map(|x| x[1]),
            [-6, -10, -14, -18]
        );
        assert_eq!(
            [c[0][2], c[1][2], c[2][2], c[3][2]].map(|x| x[0]),
            [0, 0, 1, 3]
        );
        assert_eq!(
            [c[0][3], c[1][3], c[2][3], c[3][3]].map(|x| x[2]),
            [-48, -64, -80, -96]
        );
        assert_eq!(
            [c[0][3], c[1][3], c[2][3], c[3][3]].map(|x| x[1]),
            [4, 10, 20, 34]
        );
        assert_eq!(
            [c[0][3], c[1][3], c[2][3], c[3][3]].map(|x| x[0]),
            [0, 0, 0, -1]
        );
    }

    /// Runs the lane algorithm in plain Rust so the folding maths is tested
    /// independently of any intrinsic.
    fn emulate_lanes<const L: usize>(data: &[u8]) -> [u64; 4] {
        let step = 4 * L;
        let chunks = data.chunks_exact(step);
        let tail = chunks.remainder();
        let mut lanes = [[0u64; L]; 4];
        for chunk in chunks {
            for j in 0..L {
                let w = u32::from_le_bytes(chunk[4 * j..4 * j + 4].try_into().unwrap()) as u64;
                lanes[0][j] = lanes[0][j].wrapping_add(w);
                lanes[1][j] = lanes[1][j].wrapping_add(lanes[0][j]);
                lanes[2][j] = lanes[2][j].wrapping_add(lanes[1][j]);
                lanes[3][j] = lanes[3][j].wrapping_add(lanes[2][j]);
            }
        }
        let mut state = combine_lanes(&lanes);
        update_scalar(&mut state, tail);
        state
    }

    fn all_impls(data: &[u8]) -> Vec<(&'static str, [u64; 4])> {
        let mut v = vec![
            ("dispatched", fletcher4(data)),
            ("lanes4", emulate_lanes::<4>(data)),
            ("lanes8", emulate_lanes::<8>(data)),
            ("lanes16", emulate_lanes::<16>(data)),
        ];
        v.extend(
            fletcher4_kernels()
                .into_iter()
                .map(|(name, k)| (name, k(data))),
        );
        v
    }

    #[test]
    fn simd_matches_scalar_on_large_saturating_data() {
        // All-0xff data for 1 MiB drives every accumulator through wrap-around.
        for len in [0, 4, 16, 32, 48, 512, 4096, 128 << 10, 1 << 20] {
            let data = vec![0xffu8; len + 3];
            for len in [len, len + 1, len + 3] {
                let want = fletcher4_scalar(&data[..len]);
                for (name, got) in all_impls(&data[..len]) {
                    assert_eq!(got, want, "{name} len {len}");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn simd_matches_scalar(data in proptest::collection::vec(any::<u8>(), 0..3000)) {
            let want = fletcher4_scalar(&data);
            for (name, got) in all_impls(&data) {
                prop_assert_eq!(got, want, "{}", name);
            }
        }
    }
}
