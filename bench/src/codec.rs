//! Checksum and compression benchmarks: single-threaded throughput of the
//! tarn-codec entry points the pool calls on every block, on one record.
//!
//! Throughput is always in *uncompressed* bytes per second (1 GB = 1e9 bytes),
//! so compress and decompress rows compare directly with the checksum rows
//! and with the disk. Compression runs on English-ish text with about 3 % of
//! its bytes replaced by random ones: realistic, mildly compressible data
//! (lz4 ratio ~2.5–3), not the all-zero or all-random extremes.

use std::hint::black_box;
use std::time::{Duration, Instant};

use tarn_codec::{checksum, compress, decompress, fletcher4, fletcher4_kernels};
use tarn_format::{ChecksumAlg, Compression};

use crate::table::Row;

/// Each row runs for at least this long, so timer resolution and one-off
/// effects (page faults, frequency ramps) stay in the noise.
const MIN_RUN: Duration = Duration::from_millis(300);

/// Fletcher-4 must keep up with several NVMe devices per core.
const FLETCHER4_TARGET_GBPS: f64 = 20.0;

/// The vdev ashift the compression rows assume (4 KiB sectors).
const ASHIFT: u8 = 12;

pub fn rows(record_bytes: usize) -> Vec<Row> {
    let random = random_bytes(record_bytes, 1);
    let text = text_with_noise(record_bytes, 2);
    let mut dst = vec![0u8; record_bytes];

    let mut rows = vec![
        row("memcpy (baseline)", record_bytes, None, || {
            dst.copy_from_slice(black_box(&random));
        }),
        row(
            &format!(
                "fletcher4 (dispatched: {})",
                tarn_codec::fletcher4_impl_name()
            ),
            record_bytes,
            Some(FLETCHER4_TARGET_GBPS),
            || {
                black_box(fletcher4(black_box(&random)));
            },
        ),
        row("sha256", record_bytes, None, || {
            black_box(checksum(ChecksumAlg::Sha256, black_box(&random)));
        }),
        row("blake3", record_bytes, None, || {
            black_box(checksum(ChecksumAlg::Blake3, black_box(&random)));
        }),
    ];
    for (name, kernel) in fletcher4_kernels() {
        rows.push(row(
            &format!("fletcher4 {name} kernel"),
            record_bytes,
            None,
            || {
                black_box(kernel(black_box(&random)));
            },
        ));
    }
    for alg in [
        Compression::Lz4,
        Compression::Zstd(1),
        Compression::Zstd(3),
        Compression::Gzip(6),
    ] {
        rows.extend(compression_rows(alg, &text, record_bytes));
    }
    // Media, encrypted and fio's data: the attempt is all there is to pay.
    // fio's blocks carry a small header every 4 KiB, which lz4 finds
    // matches in without saving the 12.5 % that storing needs.
    let mut fio_like = random.clone();
    for block in fio_like.chunks_mut(4096) {
        block[..256].fill(0);
    }
    for (what, data) in [("random", &random), ("random + 4 KiB headers", &fio_like)] {
        rows.push(row(
            &format!("lz4 compress attempt ({what}, stored uncompressed)"),
            record_bytes,
            None,
            || {
                assert!(black_box(compress(Compression::Lz4, black_box(data), ASHIFT)).is_none());
            },
        ));
    }
    rows
}

/// Compress and decompress rows for one algorithm on the text buffer.
fn compression_rows(alg: Compression, text: &[u8], record_bytes: usize) -> Vec<Row> {
    let Some(stored) = compress(alg, text, ASHIFT) else {
        panic!("{} did not compress the benchmark text", alg.name());
    };
    assert_eq!(decompress(alg, &stored, text.len()).as_deref(), Ok(text));
    let ratio = text.len() as f64 / stored.len() as f64;
    let what = format!("text+3% random, ratio {ratio:.2}");
    vec![
        row(
            &format!("{} compress ({what})", alg.name()),
            record_bytes,
            None,
            || {
                black_box(compress(alg, black_box(text), ASHIFT));
            },
        ),
        row(
            &format!("{} decompress ({what})", alg.name()),
            record_bytes,
            None,
            || {
                black_box(decompress(alg, black_box(&stored), text.len()).ok());
            },
        ),
    ]
}

/// Runs `op` (which processes `bytes` bytes) until [`MIN_RUN`] has passed.
fn row(name: &str, bytes: usize, target_gbps: Option<f64>, mut op: impl FnMut()) -> Row {
    op(); // warm caches, lazily built contexts and the dispatch cell
    let start = Instant::now();
    let mut iterations = 0u64;
    while start.elapsed() < MIN_RUN {
        for _ in 0..8 {
            op();
        }
        iterations += 8;
    }
    let secs = start.elapsed().as_secs_f64();
    Row {
        name: name.to_string(),
        gbps: (iterations as f64 * bytes as f64) / secs / 1e9,
        target_gbps,
    }
}

/// xorshift64*: a fixed, dependency-free generator so every run measures
/// the same bytes.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    (0..len).map(|_| rng.next() as u8).collect()
}

fn text_with_noise(len: usize, seed: u64) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "the ",
        "of ",
        "and ",
        "a ",
        "to ",
        "in ",
        "is ",
        "pool ",
        "that ",
        "for ",
        "block ",
        "it ",
        "with ",
        "as ",
        "was ",
        "on ",
        "disk ",
        "be ",
        "at ",
        "by ",
        "this ",
        "had ",
        "not ",
        "are ",
        "but ",
        "from ",
        "or ",
        "have ",
        "an ",
        "they ",
        "which ",
        "one ",
        "snapshot ",
        "checksum ",
        "records. ",
        "transaction, ",
        "group ",
        "written ",
        "Every ",
        "scrub ",
        "mirror ",
        "raidz ",
        "dataset ",
        "compression ",
        "The ",
        "\n",
    ];
    let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        let word = WORDS[(rng.next() % WORDS.len() as u64) as usize];
        out.extend_from_slice(word.as_bytes());
    }
    out.truncate(len);
    for byte in out.iter_mut() {
        if rng.next() % 100 < 3 {
            *byte = rng.next() as u8;
        }
    }
    out
}
