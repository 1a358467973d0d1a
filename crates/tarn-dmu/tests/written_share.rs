//! What a sync wrote stays cached, as the ARC keeps what it wrote; but the
//! blocks a write replaced whole hold only a share of the cache until
//! somebody reads them (`WRITTEN_SHARE_DIVISOR`): a sequential write larger
//! than that share leaves only its newest blocks cached and pushes out
//! nothing that was read, while blocks written in part (which the next
//! partial write needs again) are cached like read ones.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tarn_dmu::{BlockCache, Objset, WRITTEN_SHARE_DIVISOR};
use tarn_format::objset::ObjsetType;
use tarn_format::{BlockPtr, ObjType};
use tarn_pool::store::{BlockStore, MemBlockStore, StoreError, WriteProps};

const BS: u32 = 128 << 10;
const CACHE_BYTES: usize = 64 << 20;
/// A file twice the written share.
const BLOCKS: u64 = 2 * SHARE_BLOCKS;
const SHARE_BLOCKS: u64 = (CACHE_BYTES / WRITTEN_SHARE_DIVISOR) as u64 / BS as u64;

/// The in-memory store, counting the file data blocks read from it.
#[derive(Default)]
struct Counting {
    inner: MemBlockStore,
    data_reads: AtomicU64,
}

impl BlockStore for Counting {
    fn write(&self, txg: u64, data: &[u8], props: &WriteProps) -> Result<BlockPtr, StoreError> {
        self.inner.write(txg, data, props)
    }

    fn read(&self, bp: &BlockPtr) -> Result<Vec<u8>, StoreError> {
        if bp.level == 0 && bp.typ == ObjType::PlainFile {
            self.data_reads.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.read(bp)
    }

    fn free(&self, txg: u64, bp: &BlockPtr) {
        self.inner.free(txg, bp)
    }
}

fn objset() -> (Arc<Counting>, Objset) {
    let store = Arc::new(Counting::default());
    let cache = Arc::new(BlockCache::new(CACHE_BYTES));
    let os = Objset::create_in(store.clone(), ObjsetType::Filesystem, cache);
    (store, os)
}

/// A file of `BLOCKS` blocks written by one sequential write, synced in
/// `txg`.
fn streamed_file(os: &Objset, txg: u64, fill: u8) -> u64 {
    let file = {
        let _h = os.hold();
        let file = os.object_create(ObjType::PlainFile, BS, 0).unwrap();
        os.write(file, 0, &vec![fill; (BLOCKS * u64::from(BS)) as usize])
            .unwrap();
        file
    };
    os.sync(txg).unwrap();
    file
}

/// Reads blocks `ids` of `file` (checking they hold `fill`), and returns
/// how many came from the store. Last block first, so no read-ahead
/// stream starts.
fn read_blocks(
    store: &Counting,
    os: &Objset,
    file: u64,
    ids: impl DoubleEndedIterator<Item = u64>,
    fill: u8,
) -> u64 {
    let before = store.data_reads.load(Ordering::SeqCst);
    let mut buf = vec![0u8; BS as usize];
    for blkid in ids.rev() {
        os.read(file, blkid * u64::from(BS), &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == fill), "block {blkid}");
    }
    store.data_reads.load(Ordering::SeqCst) - before
}

#[test]
fn a_long_sequential_write_stays_cached_up_to_its_share() {
    let (store, os) = objset();
    let file = streamed_file(&os, 1, 5);
    assert_eq!(
        read_blocks(&store, &os, file, SHARE_BLOCKS..BLOCKS, 5),
        0,
        "the newest blocks of the write are cached"
    );
    assert_eq!(
        read_blocks(&store, &os, file, 0..SHARE_BLOCKS, 5),
        SHARE_BLOCKS,
        "the older ones made room for them"
    );
}

#[test]
fn blocks_written_in_part_are_cached_like_read_ones() {
    let (store, os) = objset();
    let file = {
        let _h = os.hold();
        let file = os.object_create(ObjType::PlainFile, BS, 0).unwrap();
        let half = vec![6u8; BS as usize / 2];
        for blkid in 0..BLOCKS {
            let at = blkid * u64::from(BS);
            os.write(file, at, &half).unwrap();
            os.write(file, at + u64::from(BS) / 2, &half).unwrap();
        }
        file
    };
    os.sync(1).unwrap();
    assert_eq!(read_blocks(&store, &os, file, 0..BLOCKS, 6), 0);
}

#[test]
fn a_written_block_once_read_is_not_pushed_out_by_later_writes() {
    let (store, os) = objset();
    let first = streamed_file(&os, 1, 7);
    let last = BLOCKS - 1;
    assert_eq!(read_blocks(&store, &os, first, last..BLOCKS, 7), 0);
    // A second file as long: its blocks take the whole written share.
    let second = streamed_file(&os, 2, 8);
    assert_eq!(
        read_blocks(&store, &os, first, last..BLOCKS, 7),
        0,
        "the block that was read is still cached"
    );
    assert_eq!(
        read_blocks(&store, &os, first, last - 1..last, 7),
        1,
        "its neighbour, never read, made room for the second file"
    );
    assert_eq!(read_blocks(&store, &os, second, SHARE_BLOCKS..BLOCKS, 8), 0);
}
