//! `tarn-bench`: the engine micro-benchmark table. Each row is one operation
//! on one record, single-threaded, in GB/s (1e9 bytes/s) per core, with the
//! target from the issue where there is one.
//!
//! `tarn-bench io [--dir DIR]` instead measures the engine's big I/O paths
//! (sequential and random writes, cold reads, object creation, ZAP inserts)
//! on a file-backed mirror pool; see `engine_io`.

mod codec;
mod engine_io;
mod fsync_scaling;
mod log_floor;
mod parity;
mod table;
mod threads;

use table::Row;

/// The record size every row processes: the default recordsize.
const RECORD_BYTES: usize = 128 << 10;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("io") => return engine_io::run(&dir_arg(&args)),
        Some("logfloor") => return log_floor::run(&dir_arg(&args)),
        Some("threads") => {
            let only = args.iter().position(|a| a == "--threads").map(|i| {
                args.get(i + 1)
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| usage())
            });
            return threads::run(&dir_arg(&args), only);
        }
        Some("fsync") => {
            let only = args.iter().position(|a| a == "--threads").map(|i| {
                args.get(i + 1)
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| usage())
            });
            return fsync_scaling::run(&dir_arg(&args), only);
        }
        _ => {}
    }
    if !args.is_empty() {
        usage();
    }
    println!(
        "CPU: {} | fletcher4 kernel: {} (AVX2 available: {}) | record {} KiB, 1 thread",
        cpu_model(),
        tarn_codec::fletcher4_impl_name(),
        if tarn_codec::fletcher4_avx2_available() {
            "yes"
        } else {
            "no"
        },
        RECORD_BYTES >> 10,
    );
    println!();
    let mut rows = codec::rows(RECORD_BYTES);
    rows.extend(parity::rows(RECORD_BYTES));
    print_table(&rows);
}

/// The `--dir DIR` of a subcommand: where its image files go.
fn dir_arg(args: &[String]) -> std::path::PathBuf {
    match args.iter().position(|a| a == "--dir") {
        Some(i) => args.get(i + 1).map_or_else(|| usage(), Into::into),
        None => "/var/tmp/tarn-bench".into(),
    }
}

fn usage() -> ! {
    eprintln!("usage: tarn-bench [io [--dir DIR] | logfloor [--dir DIR] | fsync [--dir DIR] [--threads N] | threads [--dir DIR] [--threads N]]");
    std::process::exit(2);
}

fn print_table(rows: &[Row]) {
    println!("| operation | GB/s per core | target | ok |");
    println!("|---|---:|---:|---|");
    for row in rows {
        let (target, ok) = match row.target_gbps {
            Some(t) => (format!("{t:.1}"), if row.gbps >= t { "yes" } else { "NO" }),
            None => ("-".to_string(), ""),
        };
        // Slow rows (gzip) keep three significant digits instead of rounding to 0.0x.
        let precision = if row.gbps < 1.0 { 3 } else { 2 };
        println!(
            "| {} | {:.*} | {target} | {ok} |",
            row.name, precision, row.gbps
        );
    }
}

/// The CPU's marketing name from /proc/cpuinfo, for the table header.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}
