//! `Objset::sync_block`: a dirty block written in open context for the
//! intent log is used by the txg's sync instead of being written again,
//! and freed at that sync if the block changed meanwhile. Checked with the
//! in-memory store's live-block count: every block the store holds must
//! be reachable from the synced root, so a double write or a leaked
//! orphan both fail.

use std::collections::HashSet;
use std::sync::Arc;

use tarn_dmu::Objset;
use tarn_format::objset::ObjsetType;
use tarn_format::ObjType;
use tarn_pool::store::MemBlockStore;

const BS: u32 = 16 << 10;

fn reachable(os: &Objset) -> HashSet<u64> {
    let mut seen = HashSet::new();
    os.walk_blocks(&mut |bp| {
        assert!(seen.insert(bp.dvas[0].offset), "block reachable twice");
    })
    .unwrap();
    seen
}

fn setup() -> (Arc<MemBlockStore>, Objset, u64) {
    let store = Arc::new(MemBlockStore::new());
    let os = Objset::create(store.clone(), ObjsetType::Filesystem);
    let obj = {
        let _h = os.hold();
        os.object_create(ObjType::PlainFile, BS, 0).unwrap()
    };
    os.sync(1).unwrap();
    (store, os, obj)
}

fn write(os: &Objset, obj: u64, off: u64, byte: u8, len: usize) {
    let _h = os.hold();
    os.write(obj, off, &vec![byte; len]).unwrap();
}

fn read(os: &Objset, obj: u64, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0; len];
    os.read(obj, off, &mut b).unwrap();
    b
}

#[test]
fn a_block_written_early_is_the_one_the_sync_installs() {
    let (store, os, obj) = setup();
    write(&os, obj, 0, 7, 2 * BS as usize);
    let bp = os.sync_block(obj, 1, 2).unwrap().expect("dirty in txg 2");
    assert_eq!(os.read_block(&bp).unwrap(), vec![7; BS as usize]);
    os.sync(2).unwrap();
    let live = reachable(&os);
    assert!(live.contains(&bp.dvas[0].offset), "the early block is used");
    assert_eq!(store.live_blocks(), live.len(), "written twice or leaked");
    assert_eq!(read(&os, obj, 0, 2 * BS as usize), vec![7; 2 * BS as usize]);
}

#[test]
fn a_block_changed_after_its_early_write_is_written_again_and_the_early_one_freed() {
    let (store, os, obj) = setup();
    write(&os, obj, 0, 7, BS as usize);
    let bp = os.sync_block(obj, 0, 2).unwrap().expect("dirty in txg 2");
    write(&os, obj, 100, 9, 10);
    os.sync(2).unwrap();
    let live = reachable(&os);
    assert!(!live.contains(&bp.dvas[0].offset));
    assert_eq!(store.live_blocks(), live.len(), "the stale block leaked");
    assert_eq!(read(&os, obj, 100, 10), vec![9; 10]);
}

#[test]
fn nothing_is_written_for_a_txg_that_is_no_longer_open_or_a_clean_block() {
    let (store, os, obj) = setup();
    write(&os, obj, 0, 7, BS as usize);
    assert!(os.sync_block(obj, 5, 2).unwrap().is_none(), "clean block");
    os.freeze_txg(2);
    assert!(
        os.sync_block(obj, 0, 2).unwrap().is_none(),
        "txg 2 is frozen"
    );
    os.sync(2).unwrap();
    assert_eq!(store.live_blocks(), reachable(&os).len());
}

#[test]
fn a_freed_object_or_punched_block_frees_its_early_write() {
    let (store, os, obj) = setup();
    let other = {
        let _h = os.hold();
        os.object_create(ObjType::PlainFile, BS, 0).unwrap()
    };
    write(&os, obj, 0, 7, BS as usize);
    write(&os, other, 0, 8, BS as usize);
    os.sync_block(obj, 0, 2).unwrap().unwrap();
    os.sync_block(other, 0, 2).unwrap().unwrap();
    {
        let _h = os.hold();
        os.free_range(obj, 0, u64::from(BS)).unwrap();
        os.object_free(other).unwrap();
    }
    os.sync(2).unwrap();
    assert_eq!(store.live_blocks(), reachable(&os).len(), "leaked");
}
