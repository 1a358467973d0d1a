//! raidz parity benchmarks: one 128 KiB-style record split over the data
//! columns of a typical width, single thread, throughput counted in data bytes
//! (1 GB = 1e9 bytes). Each case runs on the dispatched (fastest) backend and,
//! for comparison, on the scalar one.
use std::hint::black_box;
use std::time::{Duration, Instant};

use tarn_parity::{generate_with, reconstruct_with, Backend};

use crate::table::Row;

/// Minimum measuring time per row.
const MEASURE_MIN: Duration = Duration::from_millis(300);

struct Case {
    nparity: usize,
    width: usize,
    /// Data columns lost (0 = measure generation).
    lost: usize,
    target_gbps: Option<f64>,
}

const CASES: [Case; 6] = [
    Case {
        nparity: 1,
        width: 5,
        lost: 0,
        target_gbps: None,
    },
    Case {
        nparity: 2,
        width: 6,
        lost: 0,
        target_gbps: Some(20.0),
    },
    Case {
        nparity: 3,
        width: 7,
        lost: 0,
        target_gbps: None,
    },
    Case {
        nparity: 1,
        width: 5,
        lost: 1,
        target_gbps: None,
    },
    Case {
        nparity: 2,
        width: 6,
        lost: 2,
        target_gbps: Some(10.0),
    },
    Case {
        nparity: 3,
        width: 7,
        lost: 3,
        target_gbps: None,
    },
];

pub fn rows(record_bytes: usize) -> Vec<Row> {
    let mut rows = Vec::new();
    let best = Backend::best();
    let backends: &[Backend] = if best == Backend::Scalar {
        &[Backend::Scalar]
    } else {
        &[best, Backend::Scalar]
    };
    for &backend in backends {
        for case in &CASES {
            let gbps = measure(backend, case, record_bytes);
            let target_gbps = if backend == best {
                case.target_gbps
            } else {
                None
            };
            rows.push(Row {
                name: name(backend, case),
                gbps,
                target_gbps,
            });
        }
    }
    rows
}

fn name(backend: Backend, case: &Case) -> String {
    let what = match (case.nparity, case.lost) {
        (1, 0) => "P generate".to_string(),
        (2, 0) => "P+Q generate".to_string(),
        (_, 0) => "P+Q+R generate".to_string(),
        (_, 1) => "rebuild 1 data col".to_string(),
        (_, n) => format!("rebuild {n} data cols"),
    };
    format!(
        "raidz{} {}-wide {what} ({})",
        case.nparity,
        case.width,
        backend.name()
    )
}

/// Data bytes per second, in GB/s, for one case on one backend.
fn measure(backend: Backend, case: &Case, record_bytes: usize) -> f64 {
    let ndata = case.width - case.nparity;
    let len = record_bytes.div_ceil(ndata);
    let mut cols: Vec<Vec<u8>> = (0..case.width).map(|_| vec![0u8; len]).collect();
    // The last column carries what is left of the record (ragged like ZFS).
    cols[case.width - 1].truncate(record_bytes - len * (ndata - 1));
    let mut seed = 0x1234_5678_9abc_def0u64;
    for b in cols.iter_mut().flatten() {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *b = (seed >> 56) as u8;
    }
    let mut slices: Vec<&mut [u8]> = cols.iter_mut().map(|c| c.as_mut_slice()).collect();
    generate_with(backend, case.nparity, &mut slices).expect("valid shape");
    let missing: Vec<usize> = (case.nparity..case.nparity + case.lost).collect();
    let mut step = || {
        if case.lost == 0 {
            generate_with(backend, case.nparity, black_box(&mut slices)).expect("valid shape");
        } else {
            reconstruct_with(backend, case.nparity, black_box(&mut slices), &missing)
                .expect("valid shape");
        }
    };
    step();
    let start = Instant::now();
    let mut iters = 0u64;
    while start.elapsed() < MEASURE_MIN {
        for _ in 0..16 {
            step();
        }
        iters += 16;
    }
    (record_bytes as f64 * iters as f64) / start.elapsed().as_secs_f64() / 1e9
}
