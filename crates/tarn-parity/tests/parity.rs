//! tarn-parity against an independent reference: GF(2^8) built here from
//! carry-less multiplication, parity as the plain weighted sum, and rebuilds by
//! Gaussian elimination on each byte's linear system. Every test runs on every
//! backend this CPU has, so the scalar path is always covered.

use tarn_parity::{generate_with, reconstruct_with, verify_with, Backend, ParityError};

/// SplitMix64: a seeded, dependency-free source of test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.next() as u8;
        }
    }
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.fill(&mut v);
        v
    }
}

/// The reference field: log/exp tables grown from shift-and-add multiplication.
struct Field {
    exp: [u8; 255],
    log: [usize; 256],
}

impl Field {
    fn new() -> Field {
        fn mul_slow(mut a: u8, mut b: u8) -> u8 {
            let mut r = 0;
            while b != 0 {
                if b & 1 != 0 {
                    r ^= a;
                }
                a = (a << 1) ^ if a & 0x80 != 0 { 0x1d } else { 0 };
                b >>= 1;
            }
            r
        }
        let mut f = Field {
            exp: [0; 255],
            log: [0; 256],
        };
        let mut x = 1u8;
        for k in 0..255 {
            f.exp[k] = x;
            f.log[x as usize] = k;
            x = mul_slow(x, 2);
        }
        assert_eq!(x, 1, "2 has order 255");
        f
    }
    fn mul(&self, a: u8, b: u8) -> u8 {
        if a == 0 || b == 0 {
            0
        } else {
            self.exp[(self.log[a as usize] + self.log[b as usize]) % 255]
        }
    }
    fn div(&self, a: u8, b: u8) -> u8 {
        assert!(b != 0);
        if a == 0 {
            0
        } else {
            self.exp[(self.log[a as usize] + 255 - self.log[b as usize]) % 255]
        }
    }
    /// Weight of data column `c` of `n` in parity row `r`: (2^r)^(n-1-c).
    fn weight(&self, r: usize, c: usize, n: usize) -> u8 {
        self.exp[(r * (n - 1 - c)) % 255]
    }
}

fn byte(col: &[u8], i: usize) -> u8 {
    col.get(i).copied().unwrap_or(0)
}

/// Reference parity: each byte the weighted sum of the (zero-padded) data.
fn ref_parity(f: &Field, nparity: usize, data: &[Vec<u8>], len: usize) -> Vec<Vec<u8>> {
    let n = data.len();
    (0..nparity)
        .map(|r| {
            (0..len)
                .map(|i| {
                    (0..n).fold(0, |acc, c| {
                        acc ^ f.mul(f.weight(r, c, n), byte(&data[c], i))
                    })
                })
                .collect()
        })
        .collect()
}

/// Reference rebuild: for each byte, Gaussian elimination on the equations of
/// the first `k` surviving parity rows (the rows tarn-parity documents using),
/// then lost parity regenerated. Works on arbitrary (even inconsistent) input.
fn ref_reconstruct(f: &Field, nparity: usize, cols: &mut [Vec<u8>], missing: &[usize]) {
    let len = cols[0].len();
    let n = cols.len() - nparity;
    let lost: Vec<usize> = missing
        .iter()
        .filter(|&&i| i >= nparity)
        .map(|&i| i - nparity)
        .collect();
    let rows: Vec<usize> = (0..nparity)
        .filter(|r| !missing.contains(r))
        .take(lost.len())
        .collect();
    for i in 0..len {
        // Augmented matrix: one equation per row, unknowns = lost columns.
        let mut m: Vec<Vec<u8>> = rows
            .iter()
            .map(|&r| {
                let mut eq: Vec<u8> = lost.iter().map(|&c| f.weight(r, c, n)).collect();
                let rhs = (0..n)
                    .filter(|c| !lost.contains(c))
                    .fold(cols[r][i], |acc, c| {
                        acc ^ f.mul(f.weight(r, c, n), byte(&cols[nparity + c], i))
                    });
                eq.push(rhs);
                eq
            })
            .collect();
        let k = lost.len();
        for col in 0..k {
            let p = (col..k).find(|&r| m[r][col] != 0).expect("solvable");
            m.swap(col, p);
            let pivot = m[col][col];
            for x in m[col].iter_mut() {
                *x = f.div(*x, pivot);
            }
            for r in 0..k {
                if r != col && m[r][col] != 0 {
                    let factor = m[r][col];
                    let pivot_row = m[col].clone();
                    for (x, p) in m[r].iter_mut().zip(&pivot_row) {
                        *x ^= f.mul(factor, *p);
                    }
                }
            }
        }
        for (j, &c) in lost.iter().enumerate() {
            if i < cols[nparity + c].len() {
                cols[nparity + c][i] = m[j][k];
            }
        }
    }
    let parity = ref_parity(f, nparity, &cols[nparity..], len);
    for &r in missing.iter().filter(|&&i| i < nparity) {
        cols[r] = parity[r].clone();
    }
}

/// Parity columns of `len` and data columns of the given lengths, random.
fn random_row(rng: &mut Rng, nparity: usize, len: usize, data_lens: &[usize]) -> Vec<Vec<u8>> {
    let mut cols: Vec<Vec<u8>> = (0..nparity).map(|_| vec![0; len]).collect();
    cols.extend(data_lens.iter().map(|&l| rng.bytes(l)));
    cols
}

/// ZFS-like ragged lengths: the first few data columns full, the rest shorter.
fn ragged_lens(
    rng: &mut Rng,
    ndata: usize,
    len: usize,
    short_min: usize,
    short_max: usize,
) -> Vec<usize> {
    let full = rng.below(ndata + 1);
    let short = short_min + rng.below(short_max - short_min + 1);
    (0..ndata)
        .map(|c| {
            if c < full {
                len
            } else {
                len.saturating_sub(short)
            }
        })
        .collect()
}

fn as_mut(cols: &mut [Vec<u8>]) -> Vec<&mut [u8]> {
    cols.iter_mut().map(|c| c.as_mut_slice()).collect()
}

fn as_ref(cols: &[Vec<u8>]) -> Vec<&[u8]> {
    cols.iter().map(|c| c.as_slice()).collect()
}

/// All subsets of `0..n` with at most `k` elements.
fn subsets(n: usize, k: usize) -> Vec<Vec<usize>> {
    let mut out = vec![vec![]];
    let mut frontier = vec![vec![]];
    for _ in 0..k {
        let mut next = vec![];
        for s in &frontier {
            let start = s.last().map_or(0, |&l: &usize| l + 1);
            for i in start..n {
                let mut t: Vec<usize> = s.clone();
                t.push(i);
                next.push(t);
            }
        }
        out.extend(next.iter().cloned());
        frontier = next;
    }
    out
}

#[test]
fn every_erasure_of_every_width_round_trips() {
    let f = Field::new();
    let mut rng = Rng(1);
    for backend in Backend::available() {
        for nparity in 1..=3 {
            for width in (nparity + 1)..=16 {
                let len = 136;
                let lens = ragged_lens(&mut rng, width - nparity, len, 8, 32);
                let mut cols = random_row(&mut rng, nparity, len, &lens);
                generate_with(backend, nparity, &mut as_mut(&mut cols)).unwrap();
                assert_eq!(
                    cols[..nparity],
                    ref_parity(&f, nparity, &cols[nparity..], len)[..]
                );
                assert!(verify_with(backend, nparity, &as_ref(&cols)).unwrap());
                for missing in subsets(width, nparity) {
                    let mut damaged = cols.clone();
                    for &i in &missing {
                        rng.fill(&mut damaged[i]);
                    }
                    reconstruct_with(backend, nparity, &mut as_mut(&mut damaged), &missing)
                        .unwrap();
                    assert!(
                        damaged == cols,
                        "{backend:?} raidz{nparity} width {width} lens {lens:?} missing {missing:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn generate_matches_reference_on_long_ragged_rows() {
    let f = Field::new();
    let mut rng = Rng(2);
    for backend in Backend::available() {
        for round in 0..40 {
            let nparity = 1 + round % 3;
            let ndata = 1 + rng.below(12);
            let len = rng.below(3000);
            let lens: Vec<usize> = (0..ndata)
                .map(|_| {
                    if rng.below(2) == 0 {
                        len
                    } else {
                        rng.below(len + 1)
                    }
                })
                .collect();
            let mut cols = random_row(&mut rng, nparity, len, &lens);
            generate_with(backend, nparity, &mut as_mut(&mut cols)).unwrap();
            let want = ref_parity(&f, nparity, &cols[nparity..], len);
            assert!(
                cols[..nparity] == want[..],
                "{backend:?} raidz{nparity} lens {lens:?} len {len}"
            );
        }
    }
}

#[test]
fn reconstruct_matches_gaussian_elimination_on_arbitrary_input() {
    // Random garbage everywhere, parity included: the rebuild is then a fixed
    // linear map of the surviving columns, and must be exactly the reference's.
    let f = Field::new();
    let mut rng = Rng(3);
    for backend in Backend::available() {
        for round in 0..300 {
            let nparity = 1 + round % 3;
            let ndata = 1 + rng.below(14);
            let width = nparity + ndata;
            let len = rng.below(700);
            let lens = ragged_lens(&mut rng, ndata, len, 0, 70);
            let mut cols: Vec<Vec<u8>> = (0..nparity).map(|_| rng.bytes(len)).collect();
            cols.extend(lens.iter().map(|&l| rng.bytes(l)));
            let nmissing = 1 + rng.below(nparity.min(width));
            let mut missing: Vec<usize> = vec![];
            while missing.len() < nmissing {
                let i = rng.below(width);
                if !missing.contains(&i) {
                    missing.push(i);
                }
            }
            let mut want = cols.clone();
            ref_reconstruct(&f, nparity, &mut want, &missing);
            reconstruct_with(backend, nparity, &mut as_mut(&mut cols), &missing).unwrap();
            assert!(
                cols == want,
                "{backend:?} raidz{nparity} lens {lens:?} len {len} missing {missing:?}"
            );
        }
    }
}

#[test]
fn backends_agree_on_large_rows() {
    let mut rng = Rng(4);
    let len = 32 * 1024 + 512;
    for nparity in 1..=3 {
        let lens = ragged_lens(&mut rng, 5, len, 512, 512);
        let mut base = random_row(&mut rng, nparity, len, &lens);
        generate_with(Backend::Scalar, nparity, &mut as_mut(&mut base)).unwrap();
        for backend in Backend::available() {
            let mut cols = base.clone();
            generate_with(backend, nparity, &mut as_mut(&mut cols)).unwrap();
            assert!(cols == base, "{backend:?} raidz{nparity}");
            let missing: Vec<usize> = (nparity..2 * nparity).collect();
            for &i in &missing {
                rng.fill(&mut cols[i]);
            }
            reconstruct_with(backend, nparity, &mut as_mut(&mut cols), &missing).unwrap();
            assert!(cols == base, "{backend:?} raidz{nparity} rebuild");
        }
    }
}

#[test]
fn verify_detects_any_single_flipped_bit() {
    let mut rng = Rng(5);
    for backend in Backend::available() {
        for nparity in 1..=3 {
            let len = 200;
            let lens = ragged_lens(&mut rng, 4, len, 8, 40);
            let mut cols = random_row(&mut rng, nparity, len, &lens);
            generate_with(backend, nparity, &mut as_mut(&mut cols)).unwrap();
            assert!(verify_with(backend, nparity, &as_ref(&cols)).unwrap());
            for c in 0..cols.len() {
                for i in 0..cols[c].len() {
                    let bit = 1 << rng.below(8);
                    cols[c][i] ^= bit;
                    let ok = verify_with(backend, nparity, &as_ref(&cols)).unwrap();
                    assert!(
                        !ok,
                        "{backend:?} raidz{nparity}: flip in column {c} byte {i} unseen"
                    );
                    cols[c][i] ^= bit;
                }
            }
            assert!(verify_with(backend, nparity, &as_ref(&cols)).unwrap());
        }
    }
}

fn is_bad_shape<T: std::fmt::Debug>(r: Result<T, ParityError>) -> bool {
    matches!(r, Err(ParityError::BadShape(_)))
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let mut cols = vec![vec![0u8; 64]; 6];
    for backend in Backend::available() {
        let mut c = as_mut(&mut cols);
        for nparity in [0, 4, 6, 7] {
            assert!(is_bad_shape(generate_with(backend, nparity, &mut c)));
            assert!(is_bad_shape(reconstruct_with(
                backend,
                nparity,
                &mut c,
                &[]
            )));
            assert!(is_bad_shape(verify_with(backend, nparity, &as_ref(&cols))));
            c = as_mut(&mut cols);
        }
        assert!(matches!(
            reconstruct_with(backend, 2, &mut c, &[0, 3, 5]),
            Err(ParityError::TooManyMissing {
                missing: 3,
                nparity: 2
            })
        ));
        assert!(matches!(
            reconstruct_with(backend, 1, &mut c, &[1, 2]),
            Err(ParityError::TooManyMissing {
                missing: 2,
                nparity: 1
            })
        ));
        assert!(is_bad_shape(reconstruct_with(backend, 2, &mut c, &[3, 3])));
        assert!(is_bad_shape(reconstruct_with(backend, 2, &mut c, &[6])));
    }
    // Data longer than parity, parity columns of different lengths, no data.
    let shapes: [&[usize]; 4] = [&[64, 64, 65], &[64, 63, 10], &[64, 64], &[]];
    for lens in shapes {
        let mut cols: Vec<Vec<u8>> = lens.iter().map(|&l| vec![0; l]).collect();
        assert!(
            is_bad_shape(generate_with(Backend::best(), 2, &mut as_mut(&mut cols))),
            "{lens:?}"
        );
        assert!(
            is_bad_shape(verify_with(Backend::best(), 2, &as_ref(&cols))),
            "{lens:?}"
        );
        assert!(
            is_bad_shape(reconstruct_with(
                Backend::best(),
                2,
                &mut as_mut(&mut cols),
                &[0]
            )),
            "{lens:?}"
        );
    }
    let mut wide = vec![vec![0u8; 8]; 256];
    assert!(is_bad_shape(generate_with(
        Backend::best(),
        1,
        &mut as_mut(&mut wide)
    )));
}

#[test]
fn empty_and_zero_length_rows_work() {
    for backend in Backend::available() {
        let mut cols = vec![vec![]; 4];
        generate_with(backend, 3, &mut as_mut(&mut cols)).unwrap();
        assert!(verify_with(backend, 3, &as_ref(&cols)).unwrap());
        reconstruct_with(backend, 3, &mut as_mut(&mut cols), &[0, 2, 3]).unwrap();
        // Data columns of length zero next to non-empty parity are zero data.
        let mut cols = vec![vec![7u8; 16], vec![], vec![]];
        generate_with(backend, 1, &mut as_mut(&mut cols)).unwrap();
        assert_eq!(cols[0], vec![0; 16]);
    }
}

#[test]
fn avx2_is_tested_where_the_cpu_has_it() {
    #[cfg(target_arch = "x86_64")]
    assert_eq!(
        Backend::Avx2.is_available(),
        std::arch::is_x86_feature_detected!("avx2")
    );
    assert!(Backend::available().contains(&Backend::Scalar));
}
