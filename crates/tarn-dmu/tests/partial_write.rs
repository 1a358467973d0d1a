//! A write into part of a block that is not cached reads the block from
//! the store without the object set's lock: other calls on the object set
//! go on while that read waits for the device.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use tarn_dmu::Objset;
use tarn_format::objset::ObjsetType;
use tarn_format::{BlockPtr, ObjType};
use tarn_pool::store::{BlockStore, MemBlockStore, StoreError, WriteProps};

const BS: u32 = 128 << 10;

/// The in-memory store; while `held`, a read of a file data block waits
/// (and says so on `started`) until the gate opens.
struct Gated {
    inner: MemBlockStore,
    held: Mutex<bool>,
    opened: Condvar,
    started: Mutex<Option<mpsc::Sender<()>>>,
}

impl Gated {
    fn new() -> Gated {
        Gated {
            inner: MemBlockStore::default(),
            held: Mutex::new(false),
            opened: Condvar::new(),
            started: Mutex::new(None),
        }
    }

    fn hold(&self, started: mpsc::Sender<()>) {
        *self.started.lock() = Some(started);
        *self.held.lock() = true;
    }

    fn open(&self) {
        *self.held.lock() = false;
        self.opened.notify_all();
    }
}

impl BlockStore for Gated {
    fn write(&self, txg: u64, data: &[u8], props: &WriteProps) -> Result<BlockPtr, StoreError> {
        self.inner.write(txg, data, props)
    }

    fn read(&self, bp: &BlockPtr) -> Result<Vec<u8>, StoreError> {
        if bp.level == 0 && bp.typ == ObjType::PlainFile {
            let mut held = self.held.lock();
            if *held {
                if let Some(tx) = self.started.lock().take() {
                    let _ = tx.send(());
                }
            }
            while *held {
                self.opened.wait(&mut held);
            }
        }
        self.inner.read(bp)
    }

    fn free(&self, txg: u64, bp: &BlockPtr) {
        self.inner.free(txg, bp)
    }
}

/// A file of one block of 7s and an empty second file, synced and opened
/// again: the file's block is on the store only.
fn file_on_store(store: &Arc<Gated>) -> (Arc<Objset>, u64, u64) {
    let os = Objset::create(store.clone(), ObjsetType::Filesystem);
    let (file, other) = {
        let _h = os.hold();
        let file = os.object_create(ObjType::PlainFile, BS, 0).unwrap();
        os.write(file, 0, &vec![7u8; BS as usize]).unwrap();
        let other = os.object_create(ObjType::PlainFile, BS, 0).unwrap();
        (file, other)
    };
    let root = os.sync(1).unwrap();
    let os = Arc::new(Objset::open(store.clone(), &root).unwrap());
    (os, file, other)
}

/// Starts a 4 KiB write of 1s at 4 KiB into `file` with the store's reads
/// held, and returns once it waits for its block.
fn partial_write_waiting(
    store: &Gated,
    os: &Arc<Objset>,
    file: u64,
) -> std::thread::JoinHandle<Result<(), tarn_dmu::DmuError>> {
    let (started_tx, started) = mpsc::channel();
    store.hold(started_tx);
    let writer = {
        let os = os.clone();
        std::thread::spawn(move || {
            let _h = os.hold();
            os.write(file, 4096, &[1u8; 4096])
        })
    };
    started
        .recv_timeout(Duration::from_secs(10))
        .expect("the partial write reads its block");
    writer
}

#[test]
fn a_partial_write_reads_its_block_without_holding_the_object_set() {
    let store = Arc::new(Gated::new());
    let (os, file, other) = file_on_store(&store);
    let writer = partial_write_waiting(&store, &os, file);

    // While that read waits: another object is written and looked at.
    let (done_tx, done) = mpsc::channel();
    let bystander = {
        let os = os.clone();
        std::thread::spawn(move || {
            let _h = os.hold();
            os.write(other, 0, &[2u8; 512]).unwrap();
            let size = os.object_info(other).unwrap().block_size;
            let _ = done_tx.send(size);
        })
    };
    let got = done.recv_timeout(Duration::from_secs(10));
    store.open();
    writer.join().unwrap().unwrap();
    bystander.join().unwrap();
    assert!(
        got.is_ok(),
        "a call on the object set waited for another write's device read"
    );

    let mut buf = vec![0u8; BS as usize];
    os.read(file, 0, &mut buf).unwrap();
    assert!(buf[..4096].iter().all(|&b| b == 7));
    assert!(buf[4096..8192].iter().all(|&b| b == 1));
    assert!(buf[8192..].iter().all(|&b| b == 7));
}

/// A partial write lets the object set's lock go while it reads its block.
/// A write that makes the block dirty meanwhile is not undone by what the
/// partial write read: the partial write lands on the new contents.
#[test]
fn a_write_while_a_partial_write_reads_is_kept() {
    let store = Arc::new(Gated::new());
    let (os, file, _) = file_on_store(&store);
    let partial = partial_write_waiting(&store, &os, file);
    // While it waits for the old contents: the whole block is written
    // anew.
    {
        let _h = os.hold();
        os.write(file, 0, &vec![3u8; BS as usize]).unwrap();
    }
    store.open();
    partial.join().unwrap().unwrap();

    let mut buf = vec![0u8; BS as usize];
    os.read(file, 0, &mut buf).unwrap();
    assert!(
        buf[..4096].iter().all(|&b| b == 3),
        "the whole write was lost"
    );
    assert!(buf[4096..8192].iter().all(|&b| b == 1));
    assert!(
        buf[8192..].iter().all(|&b| b == 3),
        "the whole write was lost"
    );
    os.sync(2).unwrap();
    os.read(file, 0, &mut buf).unwrap();
    assert!(buf[..4096].iter().all(|&b| b == 3) && buf[8192..].iter().all(|&b| b == 3));
}
