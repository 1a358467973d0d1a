//! GF(2^8), the field raidz parity lives in.
//!
//! Elements are bytes; addition is XOR; multiplication is polynomial
//! multiplication modulo x^8 + x^4 + x^3 + x^2 + 1 (0x11d). The element 2
//! (the polynomial `x`) generates the multiplicative group, so every non-zero
//! byte is `2^k` for exactly one `k` in `0..255`, and `a · b = 2^(log a + log b)`.
//! That gives the two tables below: `EXP[k] = 2^k` (doubled in length so a sum
//! of two logs needs no reduction) and `LOG[2^k] = k`.
//!
//! These tables are only used off the hot path: to solve the small linear
//! systems of a rebuild and to build the per-constant multiplication tables the
//! kernels use. Multiplying by 2 inside the kernels needs no table at all (see
//! `kernel.rs`).

/// The field polynomial, x^8 + x^4 + x^3 + x^2 + 1, as ZFS uses for raidz.
pub(crate) const POLY: u16 = 0x11d;

/// Order of the multiplicative group: `2^255 = 1`.
const ORDER: usize = 255;

const fn build_exp() -> [u8; 2 * ORDER] {
    let mut table = [0u8; 2 * ORDER];
    let mut x: u16 = 1;
    let mut k = 0;
    while k < 2 * ORDER {
        table[k] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        k += 1;
    }
    table
}

const fn build_log(exp: &[u8; 2 * ORDER]) -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut k = 0;
    while k < ORDER {
        table[exp[k] as usize] = k as u8;
        k += 1;
    }
    table
}

static EXP: [u8; 2 * ORDER] = build_exp();
static LOG: [u8; 256] = build_log(&EXP);

/// `a · b` in GF(2^8).
pub(crate) fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
}

/// `1 / a`; `a` must be non-zero (division by zero is a bug in the caller).
pub(crate) fn inv(a: u8) -> u8 {
    assert!(a != 0, "GF(2^8) has no inverse of 0");
    EXP[ORDER - LOG[a as usize] as usize]
}

/// `2^k`, for any `k` (the group is cyclic of order 255).
pub(crate) fn exp2(k: usize) -> u8 {
    EXP[k % ORDER]
}

/// The 256-entry table `i -> c · i`, which the byte-wise kernels index.
pub(crate) fn mul_table(c: u8) -> [u8; 256] {
    let mut table = [0u8; 256];
    for (i, t) in table.iter_mut().enumerate() {
        *t = mul(c, i as u8);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Carry-less "Russian peasant" multiplication: no tables, so it checks them.
    fn mul_slow(mut a: u8, mut b: u8) -> u8 {
        let mut r = 0u8;
        while b != 0 {
            if b & 1 != 0 {
                r ^= a;
            }
            let carry = a & 0x80 != 0;
            a <<= 1;
            if carry {
                a ^= (POLY & 0xff) as u8;
            }
            b >>= 1;
        }
        r
    }

    #[test]
    fn tables_agree_with_slow_multiplication() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), mul_slow(a, b), "{a} * {b}");
            }
            if a != 0 {
                assert_eq!(mul(a, inv(a)), 1);
            }
        }
    }

    #[test]
    fn two_generates_the_group() {
        let mut seen = [false; 256];
        for k in 0..ORDER {
            let x = exp2(k);
            assert!(!seen[x as usize], "2^{k} repeats");
            seen[x as usize] = true;
        }
        assert!(!seen[0]);
        assert_eq!(exp2(ORDER), 1);
    }
}
