//! `nbd-fua SOCKET CLIENTS SECONDS RANGE_BYTES`: random 4 KiB writes with
//! FUA set on every one, over CLIENTS connections (one request in flight
//! each), for SECONDS — the row fio's `nbd` engine cannot run (it has no
//! FUA). Prints `MB/s IOPS p50_us p99_us bytes`, as bench/lib.sh's
//! `run_fio` does.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tarn_nbd::client::Client;

const BLOCK: u64 = 4096;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        eprintln!("usage: nbd-fua SOCKET CLIENTS SECONDS RANGE_BYTES");
        std::process::exit(2);
    }
    let path = PathBuf::from(&args[1]);
    let clients: usize = args[2].parse().expect("CLIENTS");
    let secs: f64 = args[3].parse().expect("SECONDS");
    let range: u64 = args[4].parse().expect("RANGE_BYTES");
    let blocks = (range / BLOCK).max(1);
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(&path).expect("connect");
                let buf = vec![0x5au8 ^ t as u8; BLOCK as usize];
                // xorshift: no dependency for a random offset.
                let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ (t as u64 + 1);
                let mut lat = Vec::new();
                while Instant::now() < until {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let off = (x % blocks) * BLOCK;
                    let t0 = Instant::now();
                    c.write(off, &buf, true).expect("io").expect("write");
                    lat.push(t0.elapsed().as_nanos() as u64);
                }
                let _ = c.disconnect();
                lat
            })
        })
        .collect();
    let mut all: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("a client thread"))
        .collect();
    let elapsed = started.elapsed().as_secs_f64();
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .map_or(f64::NAN, |&ns| ns as f64 / 1000.0)
    };
    let bytes = all.len() as u64 * BLOCK;
    println!(
        "{:.1} {:.0} {:.0} {:.0} {}",
        bytes as f64 / elapsed / 1e6,
        all.len() as f64 / elapsed,
        pct(0.50),
        pct(0.99),
        bytes
    );
}
