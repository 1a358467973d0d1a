//! The portable backend: eight bytes at a time in a `u64`.
//!
//! Multiplying all eight bytes by 2 at once is the word trick OpenZFS also
//! uses: shift the whole word left by one, clear the bit each byte pushed into
//! its neighbour (`& 0xfe…`), and XOR 0x1d into exactly the bytes whose top bit
//! was set. The mask of those bytes is `(x & 0x80…) >> 7` (0x01 per such byte)
//! times 0xff, which cannot carry between bytes. Multiplying by an arbitrary
//! constant has no such trick, so it goes byte by byte through a 256-entry
//! table for that constant.

use crate::gf;
use crate::kernel::Simd;

/// The scalar backend; always available.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scalar;

const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
const LOW_SEVEN: u64 = 0xfefe_fefe_fefe_fefe;
const POLY_LOW: u64 = 0x1d1d_1d1d_1d1d_1d1d;

impl Simd for Scalar {
    type V = u64;
    type C = [u8; 256];
    const BYTES: usize = 8;

    #[inline(always)]
    fn zero(self) -> u64 {
        0
    }
    #[inline(always)]
    fn load(self, src: &[u8]) -> u64 {
        u64::from_ne_bytes(src[..8].try_into().expect("eight bytes"))
    }
    #[inline(always)]
    fn store(self, dst: &mut [u8], v: u64) {
        dst[..8].copy_from_slice(&v.to_ne_bytes());
    }
    #[inline(always)]
    fn xor(self, a: u64, b: u64) -> u64 {
        a ^ b
    }
    #[inline(always)]
    fn or(self, a: u64, b: u64) -> u64 {
        a | b
    }
    #[inline(always)]
    fn is_zero(self, v: u64) -> bool {
        v == 0
    }
    #[inline(always)]
    fn mul2(self, v: u64) -> u64 {
        let overflow = ((v & HIGH_BITS) >> 7) * 0xff;
        ((v << 1) & LOW_SEVEN) ^ (overflow & POLY_LOW)
    }
    fn prepare(self, c: u8) -> [u8; 256] {
        gf::mul_table(c)
    }
    #[inline(always)]
    fn mulc(self, table: &[u8; 256], v: u64) -> u64 {
        u64::from_ne_bytes(v.to_ne_bytes().map(|b| table[b as usize]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_mul2_matches_field() {
        for b in 0..=255u8 {
            let word = u64::from_ne_bytes([b, 0x80, b.wrapping_add(1), 0xff, 0, b ^ 0x80, 1, b]);
            let want = word.to_ne_bytes().map(|x| gf::mul(x, 2));
            assert_eq!(Scalar.mul2(word).to_ne_bytes(), want);
            let want4 = word.to_ne_bytes().map(|x| gf::mul(x, 4));
            assert_eq!(Scalar.mul4(word).to_ne_bytes(), want4);
        }
    }
}
