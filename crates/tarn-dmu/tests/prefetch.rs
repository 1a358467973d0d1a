//! Read-ahead (`prefetch`): a sequential reader's blocks are read ahead of
//! it by the cache's read threads, each block once; a read racing with
//! syncs that replace and free blocks never reads a freed block and never
//! returns anything but a version that was written.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_dmu::Objset;
use tarn_format::objset::ObjsetType;
use tarn_format::{BlockPtr, ObjType};
use tarn_pool::store::{BlockStore, MemBlockStore, StoreError, WriteProps};

const BS: u32 = 128 << 10;

/// The in-memory store, counting reads of file data blocks (and who made
/// them) and refusing to count a read of a freed block as anything but a
/// bug.
#[derive(Default)]
struct Watched {
    inner: MemBlockStore,
    reads: AtomicU64,
    by_read_threads: AtomicU64,
    freed: Mutex<HashSet<u64>>,
    freed_reads: AtomicU64,
}

impl BlockStore for Watched {
    fn write(&self, txg: u64, data: &[u8], props: &WriteProps) -> Result<BlockPtr, StoreError> {
        self.inner.write(txg, data, props)
    }

    fn read(&self, bp: &BlockPtr) -> Result<Vec<u8>, StoreError> {
        if bp.level > 0 || bp.typ != ObjType::PlainFile {
            return self.inner.read(bp); // metadata: not what is counted
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        let name = std::thread::current().name().unwrap_or("").to_string();
        if name.starts_with("tarn-read-") {
            self.by_read_threads.fetch_add(1, Ordering::Relaxed);
        }
        if self.freed.lock().contains(&bp.dvas[0].offset) {
            self.freed_reads.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.read(bp)
    }

    fn free(&self, txg: u64, bp: &BlockPtr) {
        self.freed.lock().insert(bp.dvas[0].offset);
        self.inner.free(txg, bp)
    }
}

/// Block `blkid` of version `v`: every 8-byte word says both.
fn pattern(v: u64, blkid: u64) -> Vec<u8> {
    let word = (v << 32 | blkid).to_le_bytes();
    word.iter().copied().cycle().take(BS as usize).collect()
}

fn version_of(block: &[u8], blkid: u64) -> u64 {
    let word = u64::from_le_bytes(block[..8].try_into().unwrap());
    assert_eq!(
        word & 0xffff_ffff,
        blkid,
        "block {blkid} holds another block"
    );
    let v = word >> 32;
    assert_eq!(block, pattern(v, blkid), "block {blkid} is torn");
    v
}

/// A new file of `blocks` blocks of version `v` in `os`, not synced.
fn new_file(os: &Objset, blocks: u64, v: u64) -> u64 {
    let _h = os.hold();
    let obj = os.object_create(ObjType::PlainFile, BS, 0).unwrap();
    for b in 0..blocks {
        os.write(obj, b * u64::from(BS), &pattern(v, b)).unwrap();
    }
    obj
}

/// A file of `blocks` blocks, synced, in the object set opened again: its
/// blocks are on the store only (a sync caches what it wrote).
fn file_of(store: Arc<Watched>, blocks: u64) -> (Objset, u64) {
    let os = Objset::create(store.clone(), ObjsetType::Filesystem);
    let obj = new_file(&os, blocks, 0);
    let root = os.sync(1).unwrap();
    (Objset::open(store, &root).unwrap(), obj)
}

/// Reads `blocks` blocks of version 0 of `obj` in 1 MiB reads, in order,
/// checking each block.
fn stream_through(os: &Objset, obj: u64, blocks: u64) {
    let mut buf = vec![0u8; 1 << 20];
    for mib in 0..blocks / 8 {
        os.read(obj, mib << 20, &mut buf).unwrap();
        for (i, block) in buf.chunks(BS as usize).enumerate() {
            assert_eq!(version_of(block, mib * 8 + i as u64), 0);
        }
    }
}

#[test]
fn a_sequential_reader_is_read_ahead_of_and_each_block_is_read_once() {
    let store = Arc::new(Watched::default());
    let blocks = 256; // 32 MiB
    let (os, obj) = file_of(store.clone(), blocks);
    store.reads.store(0, Ordering::Relaxed);
    stream_through(&os, obj, blocks);
    // Whatever prefetch queued past the end of what was read has landed.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let reads = store.reads.load(Ordering::Relaxed);
    // Block 0 of version 0 is all zeros: a hole, never read.
    assert_eq!(reads, blocks - 1, "every block read exactly once");
    let ahead = store.by_read_threads.load(Ordering::Relaxed);
    assert!(
        ahead * 10 >= blocks * 9,
        "{ahead} of {blocks} blocks read by the read threads"
    );
}

/// A file streamed through is not kept in the cache (the kernel's page
/// cache has it): the cache holds about what is read ahead, not the file.
/// A block read at random stays, and is not read from the store twice.
#[test]
fn a_sequential_reader_does_not_fill_the_cache_and_a_random_one_does() {
    let store = Arc::new(Watched::default());
    let blocks = 512; // 64 MiB
    let (os, obj) = file_of(store.clone(), blocks);
    stream_through(&os, obj, blocks);
    std::thread::sleep(std::time::Duration::from_millis(100));
    let cached = os.cache_bytes();
    assert!(
        cached <= 16 << 20,
        "{} MiB cached after streaming 64 MiB",
        cached >> 20
    );
    let before = store.reads.load(Ordering::Relaxed);
    let mut small = vec![0u8; 16 << 10];
    for round in 0..2 {
        for blkid in [3u64, 300, 77, 450] {
            os.read(obj, blkid * u64::from(BS) + 4096, &mut small)
                .unwrap();
            assert_eq!(small[..8], buf_word(blkid), "round {round}");
        }
    }
    let reads = store.reads.load(Ordering::Relaxed) - before;
    assert!(reads <= 4, "{reads} store reads for 4 blocks read twice");
}

/// The first word of block `blkid` of version 0.
fn buf_word(blkid: u64) -> [u8; 8] {
    blkid.to_le_bytes()
}

#[test]
fn random_reads_are_not_read_ahead() {
    let store = Arc::new(Watched::default());
    let blocks = 512;
    let (os, obj) = file_of(store.clone(), blocks);
    store.reads.store(0, Ordering::Relaxed);
    let mut buf = vec![0u8; 16 << 10];
    let mut x = 12345u64;
    let n = 200;
    for _ in 0..n {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let blkid = (x >> 33) % blocks;
        os.read(obj, blkid * u64::from(BS) + 4096, &mut buf)
            .unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    let reads = store.reads.load(Ordering::Relaxed);
    assert!(
        reads <= n + n / 10,
        "{reads} block reads for {n} random reads ({} by read threads)",
        store.by_read_threads.load(Ordering::Relaxed)
    );
}

#[test]
fn reads_racing_syncs_see_written_versions_and_never_a_freed_block() {
    let store = Arc::new(Watched::default());
    let blocks = 128;
    let (os, obj) = file_of(store.clone(), blocks);
    let os = Arc::new(os);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (os, stop) = (os.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut txg = 2;
            let mut x = 99u64;
            while !stop.load(Ordering::Relaxed) {
                {
                    let _h = os.hold();
                    for _ in 0..16 {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                        let b = (x >> 33) % blocks;
                        os.write(obj, b * u64::from(BS), &pattern(txg, b)).unwrap();
                    }
                }
                os.sync(txg).unwrap();
                txg += 1;
            }
            txg
        })
    };
    let mut buf = vec![0u8; 1 << 20];
    for _pass in 0..20 {
        for mib in 0..blocks / 8 {
            os.read(obj, mib << 20, &mut buf).unwrap();
            for (i, block) in buf.chunks(BS as usize).enumerate() {
                version_of(block, mib * 8 + i as u64);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let txgs = writer.join().unwrap();
    assert!(txgs > 3, "the writer synced while the reader read");
    assert_eq!(
        store.freed_reads.load(Ordering::Relaxed),
        0,
        "a freed block was read"
    );
}

/// The blocks a sync wrote stay cached under their new pointers, as the
/// ARC keeps what it wrote: the next txg's partial overwrite of one (a
/// read-modify-write) and reads of them all go to no device.
#[test]
fn blocks_a_sync_wrote_are_read_from_the_cache() {
    let store = Arc::new(Watched::default());
    let os = Objset::create(store.clone(), ObjsetType::Filesystem);
    let blocks = 8;
    let obj = new_file(&os, blocks, 1);
    os.sync(1).unwrap();
    store.reads.store(0, Ordering::Relaxed);
    {
        let _h = os.hold();
        os.write(obj, 3 * u64::from(BS) + 100, b"partial").unwrap();
    }
    os.sync(2).unwrap();
    let mut buf = vec![0u8; BS as usize];
    for b in 0..blocks {
        os.read(obj, b * u64::from(BS), &mut buf).unwrap();
        let mut want = pattern(1, b);
        if b == 3 {
            want[100..107].copy_from_slice(b"partial");
        }
        assert!(buf == want, "block {b}");
    }
    assert_eq!(store.reads.load(Ordering::Relaxed), 0, "blocks read back");
}

/// A read that fetches a record to return part of it also hands back the
/// rest of that record (for the kernel's page cache); a read served from
/// the cache hands back nothing.
#[test]
fn a_random_read_hands_back_the_rest_of_the_records_it_fetched() {
    let store = Arc::new(Watched::default());
    let (os, obj) = file_of(store.clone(), 4);
    let bs = u64::from(BS);
    let check = |rest: &[tarn_dmu::Rest], want: &[(u64, u64)]| {
        let got: Vec<(u64, u64)> = rest
            .iter()
            .map(|r| (r.offset, r.range.len() as u64))
            .collect();
        assert_eq!(got, want);
        for r in rest {
            let blkid = r.offset / bs;
            let at = (r.offset % bs) as usize;
            assert_eq!(r.bytes(), &pattern(0, blkid)[at..at + r.range.len()]);
        }
    };
    let mut rest = Vec::new();
    let pieces = os
        .read_pieces_with_rest(obj, 2 * bs + (48 << 10), 16 << 10, Some(&mut rest))
        .unwrap();
    assert_eq!(pieces.iter().map(|p| p.len()).sum::<usize>(), 16 << 10);
    check(
        &rest,
        &[(2 * bs, 48 << 10), (2 * bs + (64 << 10), 64 << 10)],
    );

    // Cached now: nothing fetched, nothing handed back.
    let mut again = Vec::new();
    os.read_pieces_with_rest(obj, 2 * bs, 16 << 10, Some(&mut again))
        .unwrap();
    check(&again, &[]);

    // A read across two records fetches both.
    let root = os.sync(2).unwrap();
    let os = Objset::open(store, &root).unwrap();
    let mut both = Vec::new();
    os.read_pieces_with_rest(obj, bs + (120 << 10), 16 << 10, Some(&mut both))
        .unwrap();
    check(&both, &[(bs, 120 << 10), (2 * bs + (8 << 10), 120 << 10)]);
}
