//! The coefficients of a rebuild: which multiple of each syndrome gives back
//! each lost data column.
//!
//! Parity row `r` (P = 0, Q = 1, R = 2) has generator `g_r = 2^r` and weighs
//! data column `c` of `n` by `g_r^(n-1-c) = 2^(r·(n-1-c))`. When the data
//! columns `m_0..m_{k-1}` are lost we pick `k` surviving parity rows
//! `r_0..r_{k-1}` and form, for each, the *syndrome*
//!
//! ```text
//! S_i = stored parity r_i  ⊕  (parity r_i recomputed with the lost columns as zero)
//!     = Σ_j B[i][j] · D_{m_j},        B[i][j] = 2^(r_i · (n-1-m_j))
//! ```
//!
//! so `D = B⁻¹ · S`. `B` is always invertible for distinct exponents below
//! 255 (hence the width limit): with rows {P,Q,R} it is a Vandermonde matrix in
//! `x_j = 2^(n-1-m_j)`; {Q,R} has determinant `x_a·x_b·(x_a+x_b)`; {P,R} has
//! `x_a² + x_b² = (x_a+x_b)²`; a single row is a non-zero scalar. OpenZFS writes
//! the 2×2 {P,Q} case out by hand (and its source comment for that coefficient
//! has a slip); solving the general system here and testing every rebuild
//! against an independent Gaussian elimination avoids copying either.
//!
//! `B` is at most 3×3, so plain Gauss–Jordan elimination per call costs nothing
//! next to the pass over the data.

use crate::gf;

/// Weight of data column `col` (of `ndata`) in parity row `row`.
pub(crate) fn weight(row: usize, col: usize, ndata: usize) -> u8 {
    gf::exp2(row * (ndata - 1 - col))
}

/// `coef[j][r]`: the multiple of the syndrome of parity row `r` that
/// contributes to lost data column `missing[j]`. Rows not in `rows` are zero.
pub(crate) fn rebuild_coefficients(
    rows: &[usize],
    missing: &[usize],
    ndata: usize,
) -> [[u8; 3]; 3] {
    let k = missing.len();
    assert!(
        k == rows.len() && (1..=3).contains(&k),
        "square system of size 1..=3"
    );
    let mut b = [[0u8; 3]; 3];
    for (i, &r) in rows.iter().enumerate() {
        for (j, &m) in missing.iter().enumerate() {
            b[i][j] = weight(r, m, ndata);
        }
    }
    let b_inv = invert(b, k);
    let mut coef = [[0u8; 3]; 3];
    for j in 0..k {
        for (i, &r) in rows.iter().enumerate() {
            coef[j][r] = b_inv[j][i];
        }
    }
    coef
}

/// Inverse of the leading `k`×`k` block of `m` by Gauss–Jordan elimination.
/// Panics if singular: the module comment proves that cannot happen for the
/// systems we build, so a singular matrix is a bug.
fn invert(mut m: [[u8; 3]; 3], k: usize) -> [[u8; 3]; 3] {
    let mut inv = [[0u8; 3]; 3];
    for (i, row) in inv.iter_mut().enumerate().take(k) {
        row[i] = 1;
    }
    for col in 0..k {
        let pivot = (col..k)
            .find(|&r| m[r][col] != 0)
            .expect("raidz rebuild matrix is invertible");
        m.swap(col, pivot);
        inv.swap(col, pivot);
        let scale = gf::inv(m[col][col]);
        for c in 0..k {
            m[col][c] = gf::mul(m[col][c], scale);
            inv[col][c] = gf::mul(inv[col][c], scale);
        }
        for r in 0..k {
            let f = m[r][col];
            if r == col || f == 0 {
                continue;
            }
            for c in 0..k {
                m[r][c] ^= gf::mul(f, m[col][c]);
                inv[r][c] ^= gf::mul(f, inv[col][c]);
            }
        }
    }
    inv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_times_matrix_is_identity() {
        let ndata = 200;
        for rows in [
            &[0usize][..],
            &[1],
            &[2],
            &[0, 1],
            &[0, 2],
            &[1, 2],
            &[0, 1, 2],
        ] {
            let k = rows.len();
            let missing: Vec<usize> = (0..k).map(|j| j * 97 % ndata).collect();
            let coef = rebuild_coefficients(rows, &missing, ndata);
            for (j, c) in coef.iter().enumerate().take(k) {
                for (jj, &m) in missing.iter().enumerate() {
                    let dot = rows
                        .iter()
                        .fold(0u8, |acc, &r| acc ^ gf::mul(c[r], weight(r, m, ndata)));
                    assert_eq!(dot, u8::from(j == jj), "rows {rows:?} j {j} jj {jj}");
                }
            }
        }
    }
}
