//! The one pass over the columns that every operation is made of, written once
//! over a small vector abstraction ([`Simd`]) so the scalar and AVX2 paths run
//! the same algorithm.
//!
//! For each block of `BYTES` byte offsets the kernel runs Horner's rule down
//! the data columns, keeping one accumulator per parity row in registers:
//!
//! ```text
//! P = P ⊕ D_c        Q = 2·Q ⊕ D_c        R = 4·R ⊕ D_c
//! ```
//!
//! which after the last column leaves `P = Σ D_c`, `Q = Σ 2^(n-1-c)·D_c`,
//! `R = Σ 4^(n-1-c)·D_c`. Multiplying by 2 needs no table: shift each byte left
//! and, where its top bit fell off, XOR in the low byte of the polynomial
//! (0x1d); ×4 is that twice (or, in AVX2, one shift and a 4-entry lookup). A lost data column is simply skipped in the XOR
//! (it counts as zero) but still takes its multiply, so its weight stays put.
//! The accumulators are then used in one of three ways ([`Mode`]):
//!
//! * `GEN`: stored as the parity rows.
//! * `REBUILD`: XORed with the stored parity to give the syndromes, then each
//!   lost data column is `Σ_r coef[j][r] · S_r`. Multiplying by an arbitrary
//!   constant is where the backends differ most: a 256-byte table per constant
//!   (scalar) or two 16-entry nibble tables and `pshufb` (AVX2), using
//!   `c·x = c·(x & 0x0f) ⊕ c·(x & 0xf0)`.
//! * `CHECK`: XORed with the stored parity and ORed into a flag.
//!
//! Short columns: a data column may be shorter than the parity, and counts as
//! zero past its end. Blocks wholly inside every column take the fast path;
//! the few blocks at the end go through [`load_padded`]/[`store_padded`],
//! which copy through a zeroed buffer. Working block by block across all
//! columns (rather than column by column over the whole parity) keeps the
//! parity in registers: each data byte is read once and each output written
//! once.
//!
//! Everything here is `#[inline(always)]` so that, when called from the AVX2
//! entry point (a `#[target_feature(enable = "avx2")]` function), the whole
//! kernel including the intrinsics is compiled with AVX2 enabled.

/// Bytes of the largest block any backend uses (sizes the padding buffers).
pub(crate) const MAX_BYTES: usize = 128;

/// A way to operate on `BYTES` bytes at once. The value of the implementing
/// type is a proof the CPU supports the instructions (see `avx2.rs`).
pub(crate) trait Simd: Copy {
    /// One block of `BYTES` field elements.
    type V: Copy;
    /// A constant prepared for [`Simd::mulc`].
    type C;
    const BYTES: usize;

    fn zero(self) -> Self::V;
    /// Loads the first `BYTES` bytes of `src` (which must hold that many).
    fn load(self, src: &[u8]) -> Self::V;
    /// Stores into the first `BYTES` bytes of `dst` (which must hold that many).
    fn store(self, dst: &mut [u8], v: Self::V);
    fn xor(self, a: Self::V, b: Self::V) -> Self::V;
    fn or(self, a: Self::V, b: Self::V) -> Self::V;
    fn is_zero(self, v: Self::V) -> bool;
    /// Each byte times 2 in GF(2^8).
    fn mul2(self, v: Self::V) -> Self::V;
    /// Each byte times 4 in GF(2^8).
    #[inline(always)]
    fn mul4(self, v: Self::V) -> Self::V {
        self.mul2(self.mul2(v))
    }
    fn prepare(self, c: u8) -> Self::C;
    /// Each byte times the prepared constant.
    fn mulc(self, c: &Self::C, v: Self::V) -> Self::V;
}

/// What the kernel does with the accumulated parity rows.
pub(crate) struct Mode;

impl Mode {
    pub(crate) const GEN: u8 = 0;
    pub(crate) const REBUILD: u8 = 1;
    pub(crate) const CHECK: u8 = 2;
}

/// One pass: its inputs, outputs and the parity length `len`.
pub(crate) struct Job<'j, 'a> {
    /// Data columns in order; `None` is a lost column (read as zero).
    pub data: &'j [Option<&'a [u8]>],
    /// Stored parity rows, for `REBUILD` (the chosen rows) and `CHECK` (all).
    pub parity: [Option<&'a [u8]>; 3],
    /// `GEN`: the rows of the mask in order. `REBUILD`: the lost data columns
    /// in the order of `coef`. `CHECK`: empty.
    pub out: &'j mut [&'a mut [u8]],
    /// `REBUILD`: `coef[j][r]`, see `solve.rs`.
    pub coef: [[u8; 3]; 3],
    /// Length of the parity columns.
    pub len: usize,
}

/// Runs the pass for parity rows `rows` (a bit mask: P = 1, Q = 2, R = 4) in
/// `mode`; returns whether any syndrome was non-zero (only meaningful for `CHECK`).
#[inline(always)]
pub(crate) fn run<S: Simd, const MODE: u8>(s: S, rows: u8, job: &mut Job) -> bool {
    match rows {
        1 => run_rows::<S, 1, MODE>(s, job),
        2 => run_rows::<S, 2, MODE>(s, job),
        3 => run_rows::<S, 3, MODE>(s, job),
        4 => run_rows::<S, 4, MODE>(s, job),
        5 => run_rows::<S, 5, MODE>(s, job),
        6 => run_rows::<S, 6, MODE>(s, job),
        7 => run_rows::<S, 7, MODE>(s, job),
        _ => panic!("parity row mask {rows} out of 1..=7"),
    }
}

#[inline(always)]
fn run_rows<S: Simd, const ROWS: u8, const MODE: u8>(s: S, job: &mut Job) -> bool {
    assert!(S::BYTES <= MAX_BYTES && !job.data.is_empty());
    let k = ROWS.count_ones() as usize;
    match MODE {
        Mode::GEN | Mode::REBUILD => assert_eq!(job.out.len(), k, "one output per row"),
        _ => assert!(job.out.is_empty()),
    }
    let coef = (MODE == Mode::REBUILD).then(|| prepare(s, &job.coef));
    let fast_end = fast_end(job) / S::BYTES * S::BYTES;
    let mut dirty = s.zero();
    let mut at = 0;
    while at < fast_end {
        block::<S, ROWS, MODE, false>(s, job, coef.as_ref(), at, &mut dirty);
        at += S::BYTES;
    }
    while at < job.len {
        block::<S, ROWS, MODE, true>(s, job, coef.as_ref(), at, &mut dirty);
        at += S::BYTES;
    }
    !s.is_zero(dirty)
}

fn prepare<S: Simd>(s: S, coef: &[[u8; 3]; 3]) -> [[S::C; 3]; 3] {
    coef.map(|row| row.map(|c| s.prepare(c)))
}

/// Offsets below this are inside every column the pass touches.
fn fast_end(job: &Job) -> usize {
    let data = job.data.iter().flatten().map(|c| c.len());
    let parity = job.parity.iter().flatten().map(|c| c.len());
    let out = job.out.iter().map(|c| c.len());
    data.chain(parity).chain(out).fold(job.len, usize::min)
}

const fn has(rows: u8, r: usize) -> bool {
    rows & (1 << r) != 0
}

/// One block at offset `at`: Horner down the columns, then the mode's output.
#[inline(always)]
fn block<S: Simd, const ROWS: u8, const MODE: u8, const TAIL: bool>(
    s: S,
    job: &mut Job,
    coef: Option<&[[S::C; 3]; 3]>,
    at: usize,
    dirty: &mut S::V,
) {
    let mut acc = horner::<S, ROWS, TAIL>(s, job.data, at);
    if MODE != Mode::GEN {
        for (r, a) in acc.iter_mut().enumerate() {
            if has(ROWS, r) {
                let stored = job.parity[r].expect("stored parity for every row used");
                *a = s.xor(*a, load::<S, TAIL>(s, stored, at));
            }
        }
    }
    match MODE {
        Mode::GEN => {
            let mut outs = job.out.iter_mut();
            for (r, a) in acc.iter().enumerate() {
                if has(ROWS, r) {
                    store::<S, TAIL>(s, outs.next().expect("one output per row"), at, *a);
                }
            }
        }
        Mode::REBUILD => {
            let coef = coef.expect("coefficients for a rebuild");
            for (j, dst) in job.out.iter_mut().enumerate() {
                let mut v = s.zero();
                for (r, a) in acc.iter().enumerate() {
                    if has(ROWS, r) {
                        v = match job.coef[j][r] {
                            0 => v,
                            1 => s.xor(v, *a),
                            _ => s.xor(v, s.mulc(&coef[j][r], *a)),
                        };
                    }
                }
                store::<S, TAIL>(s, dst, at, v);
            }
        }
        _ => {
            for (r, a) in acc.iter().enumerate() {
                if has(ROWS, r) {
                    *dirty = s.or(*dirty, *a);
                }
            }
        }
    }
}

/// The parity rows in `ROWS` of the block at `at`, lost columns as zero.
#[inline(always)]
fn horner<S: Simd, const ROWS: u8, const TAIL: bool>(
    s: S,
    data: &[Option<&[u8]>],
    at: usize,
) -> [S::V; 3] {
    let mut acc = [s.zero(); 3];
    let (first, rest) = data.split_first().expect("at least one data column");
    if let Some(col) = first {
        acc = [load::<S, TAIL>(s, col, at); 3];
    }
    for col in rest {
        if has(ROWS, 1) {
            acc[1] = s.mul2(acc[1]);
        }
        if has(ROWS, 2) {
            acc[2] = s.mul4(acc[2]);
        }
        if let Some(col) = col {
            let d = load::<S, TAIL>(s, col, at);
            for (r, a) in acc.iter_mut().enumerate() {
                if has(ROWS, r) {
                    *a = s.xor(*a, d);
                }
            }
        }
    }
    acc
}

/// Loads the block at `at`; in the tail, past the end of `col` reads as zero.
#[inline(always)]
fn load<S: Simd, const TAIL: bool>(s: S, col: &[u8], at: usize) -> S::V {
    if TAIL {
        load_padded(s, col, at)
    } else {
        s.load(&col[at..])
    }
}

/// Stores the block at `at`; in the tail, only what fits in `dst`.
#[inline(always)]
fn store<S: Simd, const TAIL: bool>(s: S, dst: &mut [u8], at: usize, v: S::V) {
    if TAIL {
        store_padded(s, dst, at, v)
    } else {
        s.store(&mut dst[at..], v)
    }
}

/// Loads the block at `at` of `col`, reading past its end as zero.
#[inline(always)]
fn load_padded<S: Simd>(s: S, col: &[u8], at: usize) -> S::V {
    if col.len() >= at + S::BYTES {
        return s.load(&col[at..]);
    }
    let mut buf = [0u8; MAX_BYTES];
    if let Some(part) = col.get(at..) {
        buf[..part.len()].copy_from_slice(part);
    }
    s.load(&buf)
}

/// Stores the block at `at` of `dst`, dropping what falls past its end
/// (which the maths guarantees is zero for a short data column).
#[inline(always)]
fn store_padded<S: Simd>(s: S, dst: &mut [u8], at: usize, v: S::V) {
    if dst.len() >= at + S::BYTES {
        return s.store(&mut dst[at..], v);
    }
    if let Some(part) = dst.get_mut(at..) {
        let mut buf = [0u8; MAX_BYTES];
        s.store(&mut buf, v);
        part.copy_from_slice(&buf[..part.len()]);
    }
}
