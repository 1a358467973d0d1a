//! The page-cache feed (`feed.rs`): a random read that fetches a record
//! from disk leaves the whole record in the kernel's page cache, and the
//! bytes it stores there never hide a write, however the two interleave.

mod common;

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{options, Mounted};
use tarn_fuse::MountOptions;

const RECORD: usize = 128 << 10;
const PAGE: usize = 4096;

/// Record `r` of generation `g`: every 8-byte word says both, and where
/// it is.
fn record(r: usize, g: u64) -> Vec<u8> {
    (0..RECORD / 8)
        .flat_map(|w| (g << 40 | (r * RECORD / 8 + w) as u64).to_le_bytes())
        .collect()
}

/// A file of `records` records of generation 1.
fn file_of(records: usize) -> Vec<u8> {
    (0..records).flat_map(|r| record(r, 1)).collect()
}

/// The generation of the words in `buf`, read at `offset`: panics if a
/// word is not where it says it is; the lowest generation seen.
fn generation(buf: &[u8], offset: usize) -> u64 {
    let mut low = u64::MAX;
    for (i, w) in buf.chunks_exact(8).enumerate() {
        let w = u64::from_le_bytes(w.try_into().unwrap());
        let at = (offset / 8 + i) as u64;
        assert_eq!(w & ((1 << 40) - 1), at, "word {at} holds word {w:#x}");
        low = low.min(w >> 40);
    }
    low
}

/// Which pages of `f` in `range` the kernel's page cache holds.
fn resident(f: &File, len: usize, range: std::ops::Range<usize>) -> Vec<bool> {
    // SAFETY: a read-only shared mapping of a file we hold open, never
    // dereferenced; mincore only reports residency and faults nothing in.
    // The mapping is removed before returning.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(
            p,
            libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        let mut vec = vec![0u8; len.div_ceil(PAGE)];
        let r = libc::mincore(p, len, vec.as_mut_ptr());
        let err = std::io::Error::last_os_error();
        libc::munmap(p, len);
        assert_eq!(r, 0, "mincore: {err}");
        vec[range.start / PAGE..range.end.div_ceil(PAGE)]
            .iter()
            .map(|v| v & 1 == 1)
            .collect()
    }
}

#[test]
fn a_random_read_of_a_cold_record_brings_in_the_whole_record() {
    let mut m = Mounted::new();
    let p = m.path("f");
    let records = 8;
    let data = file_of(records);
    std::fs::write(&p, &data).unwrap();
    m.remount(&options());

    let f = File::open(&p).unwrap();
    let len = records * RECORD;
    assert!(
        resident(&f, len, 0..len).iter().all(|&r| !r),
        "cold after remount"
    );
    let mut buf = vec![0u8; 16 << 10];
    let at = 3 * RECORD + (48 << 10);
    f.read_exact_at(&mut buf, at as u64).unwrap();
    assert_eq!(generation(&buf, at), 1);
    // The feed stores the rest of record 3 after the reply.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pages = resident(&f, len, 3 * RECORD..4 * RECORD);
        if pages.iter().all(|&r| r) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "record 3 not in the page cache: {pages:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Nothing else was read.
    let far = resident(&f, len, 6 * RECORD..8 * RECORD);
    assert!(far.iter().all(|&r| !r), "records 6-7 resident: {far:?}");
    // What the page cache now serves is the file.
    assert!(std::fs::read(&p).unwrap() == data);
}

/// Readers of cold records (whose rest is fed to the page cache) race
/// writers that open the file, rewrite a record and close it: a reader
/// never sees a record older than one whose writer has closed, and after
/// a remount every record holds its last write.
#[test]
fn fed_pages_never_hide_a_write() {
    races_of_reads_and_write_opens(options());
}

/// The same without the writeback cache: writes go through to the daemon
/// and into the page cache at once.
#[test]
fn fed_pages_never_hide_a_write_through_write() {
    races_of_reads_and_write_opens(MountOptions {
        writeback_cache: false,
        ..options()
    });
}

fn races_of_reads_and_write_opens(opts: MountOptions) {
    let mut m = Mounted::with_options(opts.clone());
    let p = m.path("f");
    let records = 64;
    std::fs::write(&p, file_of(records)).unwrap();
    // Generation each record's last closed writer wrote.
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..records).map(|_| AtomicU64::new(1)).collect());
    for round in 0..6u64 {
        m.remount(&opts);
        let stop = Arc::new(AtomicBool::new(false));
        // The record a reader is reading now: the writer aims at it, so
        // its write open meets the store of that record's rest.
        let hot = Arc::new(AtomicUsize::new(0));
        let mut threads = Vec::new();
        for t in 0..2u64 {
            let (p, done, stop, hot) = (p.clone(), done.clone(), stop.clone(), hot.clone());
            threads.push(std::thread::spawn(move || {
                let f = File::open(&p).unwrap();
                let mut buf = vec![0u8; 16 << 10];
                let mut x = round * 7919 + t * 104_729 + 1;
                let mut reads = 0;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let r = (x % records as u64) as usize;
                    let at = r * RECORD + (x >> 8) as usize % 8 * (16 << 10);
                    hot.store(r, Ordering::Relaxed);
                    let closed = done[r].load(Ordering::SeqCst);
                    f.read_exact_at(&mut buf, at as u64).unwrap();
                    let g = generation(&buf, at);
                    assert!(
                        g >= closed,
                        "round {round}: record {r} at {at} reads generation {g}, \
                         after a writer of {closed} closed"
                    );
                    reads += 1;
                }
                reads
            }));
        }
        let writer = {
            let (p, done, hot) = (p.clone(), done.clone(), hot.clone());
            std::thread::spawn(move || {
                let mut x = round * 31 + 17;
                let start = Instant::now();
                while start.elapsed() < Duration::from_millis(400) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let r = if x & 1 == 0 {
                        hot.load(Ordering::Relaxed)
                    } else {
                        (x % records as u64) as usize
                    };
                    let g = done[r].load(Ordering::SeqCst) + 1;
                    let f = OpenOptions::new().write(true).open(&p).unwrap();
                    f.write_all_at(&record(r, g), (r * RECORD) as u64).unwrap();
                    drop(f);
                    done[r].store(g, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        writer.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            assert!(t.join().unwrap() > 0);
        }
    }
    m.remount(&opts);
    let got = std::fs::read(&p).unwrap();
    for r in 0..records {
        let g = done[r].load(Ordering::SeqCst);
        assert!(
            got[r * RECORD..(r + 1) * RECORD] == record(r, g)[..],
            "record {r} lost its generation-{g} write"
        );
    }
}
