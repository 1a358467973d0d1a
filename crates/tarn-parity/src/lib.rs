//! raidz parity maths: generate, verify and rebuild P, Q and R. No I/O and no
//! layout — the raidz vdev decides which sectors form a row and hands us the
//! columns.
//!
//! # The code
//!
//! A row holds `n` data columns `D_0..D_{n-1}` and 1–3 parity columns, each a
//! byte-wise linear combination over GF(2^8) (polynomial 0x11d, generator 2;
//! see `gf.rs`):
//!
//! ```text
//! P = Σ D_c        Q = Σ 2^(n-1-c) · D_c        R = Σ 4^(n-1-c) · D_c
//! ```
//!
//! These are exactly OpenZFS's raidz1/2/3 parities, so columns written by
//! either read back with the other. P alone is plain XOR (RAID-5). Q and R
//! weigh each column differently, which is what lets two or three lost columns
//! be told apart: losing any `k ≤ nparity` columns leaves a `k`×`k` system that
//! is always solvable (proved in `solve.rs`) as long as the row has at most
//! 255 columns, which is also ZFS's limit on raidz width. The exponents run
//! `n-1-c` rather than `c` so that the sums can be computed by Horner's rule
//! with only ×2 and ×4 — the cheap multiplications (`kernel.rs`).
//!
//! Rows are ragged: in ZFS the first columns of a row may be one sector
//! longer than the rest, so a data column may be shorter than the parity; it
//! counts as zero-padded to the parity length. All parity columns share one
//! length, any length (multiples of 512 in practice).
//!
//! # Rebuilding
//!
//! Lost data columns come first: with `k` of them we take the first `k`
//! surviving parity rows, compute their syndromes (stored parity XOR parity
//! recomputed with the lost columns as zero) and multiply by the inverse of a
//! small matrix (`solve.rs`) — all in the same single pass over the surviving
//! columns. Lost parity columns are then simply regenerated from the now
//! complete data.
//!
//! # Backends
//!
//! The pass is written once (`kernel.rs`) over a small vector trait with a
//! portable `u64` backend (`scalar.rs`) and an AVX2 one (`avx2.rs`), chosen at
//! run time. The `*_with` functions take an explicit [`Backend`] so tests and
//! benchmarks can exercise the scalar path on any machine.
//!
//! **Invariant: every backend produces bit-identical output**, and the tests
//! check both against an independent table-and-Gaussian-elimination reference.

mod gf;
mod kernel;
mod scalar;
mod solve;

#[cfg(target_arch = "x86_64")]
mod avx2;

use kernel::{Job, Mode};
use scalar::Scalar;

/// Most columns (parity + data) in one row; beyond 255 data columns the
/// weights `2^(n-1-c)` repeat and lost columns could not be told apart.
pub const MAX_COLUMNS: usize = 255;

/// Most parity columns (raidz3).
pub const MAX_PARITY: usize = 3;

/// What the caller got wrong. Column order everywhere is ZFS's raidz map
/// order: parity columns first (P, then Q, then R), then data columns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParityError {
    #[error("{missing} columns missing but raidz{nparity} can rebuild at most {nparity}")]
    TooManyMissing { missing: usize, nparity: usize },
    #[error("bad parity row shape: {0}")]
    BadShape(String),
}

/// Which implementation runs the pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Portable: 64-bit words, table lookups for constant multiplies.
    Scalar,
    /// 256-bit vectors with `pshufb` constant multiplies (x86-64 with AVX2).
    Avx2,
}

impl Backend {
    /// The fastest backend this CPU supports (what [`generate`] etc. use).
    pub fn best() -> Backend {
        if Backend::Avx2.is_available() {
            Backend::Avx2
        } else {
            Backend::Scalar
        }
    }

    /// Whether this CPU can run the backend. Asking for one that cannot run
    /// falls back to [`Backend::Scalar`].
    pub fn is_available(self) -> bool {
        match self {
            Backend::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => avx2::Avx2::detect().is_some(),
            #[cfg(not(target_arch = "x86_64"))]
            Backend::Avx2 => false,
        }
    }

    /// Every backend this CPU can run.
    pub fn available() -> Vec<Backend> {
        [Backend::Scalar, Backend::Avx2]
            .into_iter()
            .filter(|b| b.is_available())
            .collect()
    }

    /// Short lower-case name, for benchmark tables.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Scalar => "scalar",
            Backend::Avx2 => "avx2",
        }
    }
}

/// Fill `cols[0..nparity]` (parity) from `cols[nparity..]` (data).
/// `nparity` in 1..=3, at least one data column.
pub fn generate(nparity: usize, cols: &mut [&mut [u8]]) -> Result<(), ParityError> {
    generate_with(Backend::best(), nparity, cols)
}

/// Rebuild the columns whose indices are in `missing` (any mix of parity and
/// data, at most `nparity`) from the others. Their contents on entry are
/// ignored and overwritten; lost parity columns are regenerated.
pub fn reconstruct(
    nparity: usize,
    cols: &mut [&mut [u8]],
    missing: &[usize],
) -> Result<(), ParityError> {
    reconstruct_with(Backend::best(), nparity, cols, missing)
}

/// Whether the parity columns agree with the data (scrub uses this to find
/// silently corrupted parity).
pub fn verify(nparity: usize, cols: &[&[u8]]) -> Result<bool, ParityError> {
    verify_with(Backend::best(), nparity, cols)
}

/// [`generate`] on a chosen backend.
pub fn generate_with(
    backend: Backend,
    nparity: usize,
    cols: &mut [&mut [u8]],
) -> Result<(), ParityError> {
    let shape = Shape::check(nparity, cols.iter().map(|c| c.len()))?;
    let (parity, data) = cols.split_at_mut(nparity);
    let data: Vec<Option<&[u8]>> = data.iter().map(|c| Some(&**c)).collect();
    let mut out: Vec<&mut [u8]> = parity.iter_mut().map(|c| &mut **c).collect();
    let mut job = Job {
        data: &data,
        parity: [None; 3],
        out: &mut out,
        coef: [[0; 3]; 3],
        len: shape.len,
    };
    pass::<{ Mode::GEN }>(backend, shape.all_rows(), &mut job);
    Ok(())
}

/// [`reconstruct`] on a chosen backend.
pub fn reconstruct_with(
    backend: Backend,
    nparity: usize,
    cols: &mut [&mut [u8]],
    missing: &[usize],
) -> Result<(), ParityError> {
    let shape = Shape::check(nparity, cols.iter().map(|c| c.len()))?;
    let (lost_parity, lost_data) = shape.split_missing(missing)?;
    let (parity, data) = cols.split_at_mut(nparity);
    if !lost_data.is_empty() {
        rebuild_data(backend, &shape, parity, data, lost_parity, &lost_data);
    }
    if lost_parity != 0 {
        let data: Vec<Option<&[u8]>> = data.iter().map(|c| Some(&**c)).collect();
        let mut out: Vec<&mut [u8]> = (parity.iter_mut().enumerate())
            .filter(|(r, _)| lost_parity & (1 << r) != 0)
            .map(|(_, c)| &mut **c)
            .collect();
        let mut job = Job {
            data: &data,
            parity: [None; 3],
            out: &mut out,
            coef: [[0; 3]; 3],
            len: shape.len,
        };
        pass::<{ Mode::GEN }>(backend, lost_parity, &mut job);
    }
    Ok(())
}

/// [`verify`] on a chosen backend.
pub fn verify_with(backend: Backend, nparity: usize, cols: &[&[u8]]) -> Result<bool, ParityError> {
    let shape = Shape::check(nparity, cols.iter().map(|c| c.len()))?;
    let data: Vec<Option<&[u8]>> = cols[nparity..].iter().map(|&c| Some(c)).collect();
    let mut parity = [None; 3];
    for (slot, &col) in parity.iter_mut().zip(&cols[..nparity]) {
        *slot = Some(col);
    }
    let mut job = Job {
        data: &data,
        parity,
        out: &mut [],
        coef: [[0; 3]; 3],
        len: shape.len,
    };
    let dirty = pass::<{ Mode::CHECK }>(backend, shape.all_rows(), &mut job);
    Ok(!dirty)
}

/// Rebuilds the data columns `lost_data` (sorted) in one pass, using the first
/// surviving parity rows.
fn rebuild_data(
    backend: Backend,
    shape: &Shape,
    parity: &[&mut [u8]],
    data: &mut [&mut [u8]],
    lost_parity: u8,
    lost_data: &[usize],
) {
    let rows: Vec<usize> = (0..shape.nparity)
        .filter(|r| lost_parity & (1 << r) == 0)
        .take(lost_data.len())
        .collect();
    let coef = solve::rebuild_coefficients(&rows, lost_data, shape.ndata);
    let mut inputs: Vec<Option<&[u8]>> = Vec::with_capacity(shape.ndata);
    let mut out: Vec<&mut [u8]> = Vec::with_capacity(lost_data.len());
    for (c, col) in data.iter_mut().enumerate() {
        if lost_data.contains(&c) {
            inputs.push(None);
            out.push(&mut **col);
        } else {
            inputs.push(Some(&**col));
        }
    }
    let mut stored = [None; 3];
    let mut mask = 0u8;
    for &r in &rows {
        stored[r] = Some(&*parity[r]);
        mask |= 1 << r;
    }
    let mut job = Job {
        data: &inputs,
        parity: stored,
        out: &mut out,
        coef,
        len: shape.len,
    };
    pass::<{ Mode::REBUILD }>(backend, mask, &mut job);
}

/// Runs one kernel pass on `backend`, or on the scalar backend if this CPU
/// cannot run it.
fn pass<const MODE: u8>(backend: Backend, rows: u8, job: &mut Job) -> bool {
    #[cfg(target_arch = "x86_64")]
    if backend == Backend::Avx2 {
        if let Some(avx2) = avx2::Avx2::detect() {
            return avx2.run::<MODE>(rows, job);
        }
    }
    let _ = backend;
    kernel::run::<Scalar, MODE>(Scalar, rows, job)
}

/// A validated row shape.
struct Shape {
    nparity: usize,
    ndata: usize,
    /// Length of every parity column.
    len: usize,
}

impl Shape {
    fn check(
        nparity: usize,
        lens: impl ExactSizeIterator<Item = usize>,
    ) -> Result<Shape, ParityError> {
        let bad = |msg: String| Err(ParityError::BadShape(msg));
        if !(1..=MAX_PARITY).contains(&nparity) {
            return bad(format!("nparity {nparity} not in 1..={MAX_PARITY}"));
        }
        let ncols = lens.len();
        if ncols <= nparity || ncols > MAX_COLUMNS {
            return bad(format!(
                "{ncols} columns for raidz{nparity}; need {}..={MAX_COLUMNS}",
                nparity + 1
            ));
        }
        let lens: Vec<usize> = lens.collect();
        let len = lens[0];
        if let Some(p) = (1..nparity).find(|&p| lens[p] != len) {
            return bad(format!(
                "parity column {p} is {} bytes, parity column 0 is {len}",
                lens[p]
            ));
        }
        if let Some(c) = (nparity..ncols).find(|&c| lens[c] > len) {
            return bad(format!(
                "data column {c} is {} bytes, longer than the {len}-byte parity",
                lens[c]
            ));
        }
        Ok(Shape {
            nparity,
            ndata: ncols - nparity,
            len,
        })
    }

    /// Bit mask of all parity rows.
    fn all_rows(&self) -> u8 {
        (1u8 << self.nparity) - 1
    }

    /// Splits `missing` into a mask of lost parity rows and the sorted
    /// indices (within the data) of lost data columns.
    fn split_missing(&self, missing: &[usize]) -> Result<(u8, Vec<usize>), ParityError> {
        let ncols = self.nparity + self.ndata;
        let mut sorted = missing.to_vec();
        sorted.sort_unstable();
        if let Some(&i) = sorted.iter().find(|&&i| i >= ncols) {
            return Err(ParityError::BadShape(format!(
                "missing column {i} of only {ncols}"
            )));
        }
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(ParityError::BadShape(format!(
                "column {} listed missing twice",
                w[0]
            )));
        }
        if sorted.len() > self.nparity {
            return Err(ParityError::TooManyMissing {
                missing: sorted.len(),
                nparity: self.nparity,
            });
        }
        let lost_parity = sorted
            .iter()
            .filter(|&&i| i < self.nparity)
            .fold(0u8, |m, &i| m | 1 << i);
        let lost_data = sorted
            .iter()
            .filter(|&&i| i >= self.nparity)
            .map(|&i| i - self.nparity)
            .collect();
        Ok((lost_parity, lost_data))
    }
}
