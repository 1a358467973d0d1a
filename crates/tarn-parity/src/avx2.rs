//! The AVX2 backend: 128 bytes per block, as four 256-bit registers (four
//! independent dependency chains keep the vector units busy; two measured
//! ~25 % slower, and with three parity rows four still fit the 16 registers).
//!
//! ×2 per byte: `x + x` shifts every byte left without crossing lanes, and a
//! signed compare `0 > x` yields 0xff exactly in the bytes whose top bit was
//! set, which selects the 0x1d to XOR in. ×4 is done in one step rather
//! than as ×2 twice: shift by two and look the two lost bits' reduction up
//! with `vpshufb` (6 instructions instead of 8; R is on the hot path of raidz3). ×c for an arbitrary constant splits
//! each byte into nibbles: `c·x = c·lo(x) ⊕ c·(hi(x)·16)`, and each half is a
//! lookup in a 16-entry table, which `vpshufb` does for 32 bytes at once
//! (it looks up within each 128-bit lane, so the tables are stored twice).
//!
//! Soundness: every intrinsic needs AVX2. The [`Avx2`] token can only be made
//! by [`Avx2::detect`], which checks the CPU at run time, so holding one proves
//! the instructions exist; every `unsafe` block below rests on that.

use std::arch::x86_64::*;

use crate::gf;
use crate::kernel::{self, Job, Simd};

/// Proof that this CPU has AVX2; see the module comment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx2 {
    _proof: (),
}

impl Avx2 {
    pub(crate) fn detect() -> Option<Avx2> {
        is_x86_feature_detected!("avx2").then_some(Avx2 { _proof: () })
    }

    /// The kernel compiled with AVX2 enabled.
    pub(crate) fn run<const MODE: u8>(self, rows: u8, job: &mut Job) -> bool {
        // SAFETY: `self` exists only if AVX2 was detected at run time, which is
        // the only requirement of this `#[target_feature]` function.
        unsafe { run_avx2::<MODE>(self, rows, job) }
    }
}

#[target_feature(enable = "avx2")]
fn run_avx2<const MODE: u8>(s: Avx2, rows: u8, job: &mut Job) -> bool {
    kernel::run::<Avx2, MODE>(s, rows, job)
}

const LANES: usize = 4;

// Per-register operations. With AVX2 enabled the intrinsics are safe to call;
// callers without it must prove AVX2 is present (they hold an `Avx2`).

#[target_feature(enable = "avx2")]
fn mul2_lane(x: __m256i) -> __m256i {
    let overflow = _mm256_cmpgt_epi8(_mm256_setzero_si256(), x);
    let shifted = _mm256_add_epi8(x, x);
    _mm256_xor_si256(shifted, _mm256_and_si256(overflow, _mm256_set1_epi8(0x1d)))
}

/// ×4 in one step: shift each byte left by two and look up what the two bits
/// that fell off reduce to (x^8 = 0x1d, x^9 = 0x3a, both = 0x27).
#[target_feature(enable = "avx2")]
fn mul4_lane(x: __m256i) -> __m256i {
    #[rustfmt::skip]
    let reduce = _mm256_setr_epi8(
        0, 0x1d, 0x3a, 0x27, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0x1d, 0x3a, 0x27, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    );
    let top = _mm256_and_si256(_mm256_srli_epi16::<6>(x), _mm256_set1_epi8(0x03));
    let shifted = _mm256_and_si256(_mm256_slli_epi16::<2>(x), _mm256_set1_epi8(0xfc_u8 as i8));
    _mm256_xor_si256(shifted, _mm256_shuffle_epi8(reduce, top))
}

/// `c·x` by nibbles: `tables` = [c·(0..16), c·(0..16)·16], each in both lanes.
#[target_feature(enable = "avx2")]
fn mulc_lane(tables: &[__m256i; 2], x: __m256i) -> __m256i {
    let nibble = _mm256_set1_epi8(0x0f);
    let lo = _mm256_and_si256(x, nibble);
    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(x), nibble);
    _mm256_xor_si256(
        _mm256_shuffle_epi8(tables[0], lo),
        _mm256_shuffle_epi8(tables[1], hi),
    )
}

impl Simd for Avx2 {
    type V = [__m256i; LANES];
    /// Low-nibble and high-nibble product tables.
    type C = [__m256i; 2];
    const BYTES: usize = 32 * LANES;

    #[inline(always)]
    fn zero(self) -> Self::V {
        // SAFETY: AVX2 is present (module comment).
        [unsafe { _mm256_setzero_si256() }; LANES]
    }
    #[inline(always)]
    fn load(self, src: &[u8]) -> Self::V {
        let src: &[u8; 32 * LANES] = src[..Self::BYTES].try_into().expect("one block");
        let mut v = self.zero();
        for (i, lane) in v.iter_mut().enumerate() {
            // SAFETY: AVX2 is present; the load reads 32 bytes inside `src`,
            // whose type guarantees 32·LANES readable bytes; `loadu` needs no
            // alignment.
            *lane = unsafe { _mm256_loadu_si256(src.as_ptr().add(32 * i).cast()) };
        }
        v
    }
    #[inline(always)]
    fn store(self, dst: &mut [u8], v: Self::V) {
        let dst: &mut [u8; 32 * LANES] = (&mut dst[..Self::BYTES]).try_into().expect("one block");
        for (i, lane) in v.iter().enumerate() {
            // SAFETY: AVX2 is present; the store writes 32 bytes inside `dst`,
            // which is exclusively borrowed and 32·LANES long; no alignment needed.
            unsafe { _mm256_storeu_si256(dst.as_mut_ptr().add(32 * i).cast(), *lane) }
        }
    }
    #[inline(always)]
    fn xor(self, mut a: Self::V, b: Self::V) -> Self::V {
        for (x, y) in a.iter_mut().zip(b) {
            // SAFETY: AVX2 is present (module comment).
            *x = unsafe { _mm256_xor_si256(*x, y) };
        }
        a
    }
    #[inline(always)]
    fn or(self, mut a: Self::V, b: Self::V) -> Self::V {
        for (x, y) in a.iter_mut().zip(b) {
            // SAFETY: AVX2 is present (module comment).
            *x = unsafe { _mm256_or_si256(*x, y) };
        }
        a
    }
    #[inline(always)]
    fn is_zero(self, v: Self::V) -> bool {
        let mut all = v[0];
        for x in v {
            // SAFETY: AVX2 is present (module comment).
            all = unsafe { _mm256_or_si256(all, x) };
        }
        // SAFETY: AVX2 is present (module comment).
        unsafe { _mm256_testz_si256(all, all) != 0 }
    }
    #[inline(always)]
    fn mul2(self, mut v: Self::V) -> Self::V {
        for x in v.iter_mut() {
            // SAFETY: AVX2 is present (module comment).
            *x = unsafe { mul2_lane(*x) };
        }
        v
    }
    #[inline(always)]
    fn mul4(self, mut v: Self::V) -> Self::V {
        for x in v.iter_mut() {
            // SAFETY: AVX2 is present (module comment).
            *x = unsafe { mul4_lane(*x) };
        }
        v
    }
    #[inline(always)]
    fn prepare(self, c: u8) -> Self::C {
        let mut lo = [0u8; 32];
        let mut hi = [0u8; 32];
        for i in 0..32 {
            lo[i] = gf::mul(c, (i % 16) as u8);
            hi[i] = gf::mul(c, ((i % 16) << 4) as u8);
        }
        // SAFETY: AVX2 is present; each load reads the 32 bytes of a local array.
        unsafe {
            [
                _mm256_loadu_si256(lo.as_ptr().cast()),
                _mm256_loadu_si256(hi.as_ptr().cast()),
            ]
        }
    }
    #[inline(always)]
    fn mulc(self, c: &Self::C, mut v: Self::V) -> Self::V {
        for x in v.iter_mut() {
            // SAFETY: AVX2 is present (module comment).
            *x = unsafe { mulc_lane(c, *x) };
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte value through every lane operation, against the field tables.
    #[test]
    fn lane_operations_match_the_field() {
        let Some(s) = Avx2::detect() else { return };
        let mut bytes = [0u8; 128];
        for base in [0usize, 128] {
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = (base + i) as u8;
            }
            let v = s.load(&bytes);
            let mut out = [0u8; 128];
            for c in [0u8, 1, 2, 3, 0x1d, 0x80, 0xff] {
                s.store(&mut out, s.mulc(&s.prepare(c), v));
                assert_eq!(out, bytes.map(|x| gf::mul(x, c)), "times {c}");
            }
            s.store(&mut out, s.mul2(v));
            assert_eq!(out, bytes.map(|x| gf::mul(x, 2)));
            s.store(&mut out, s.mul4(v));
            assert_eq!(out, bytes.map(|x| gf::mul(x, 4)));
            assert!(s.is_zero(s.zero()) && !s.is_zero(s.mul2(v)));
        }
    }
}
