//! A filesystem on an in-memory block store with a real `TxgEngine`
//! whose sync target syncs the one object set, plus a manual clock.
//! `remount` commits, drops everything in memory and mounts again from
//! the last committed root, as an export/import would.
//!
//! For the crash tests: `sim` (a pool on simulated disks behind one power
//! switch) and `crash_workload` (the multi-threaded workload, its model
//! and the check of a recovered tree, shared with `tarn`'s FUSE test).

#![allow(dead_code)]

pub mod crash_workload;
pub mod sim;

use std::sync::Arc;

use parking_lot::Mutex;
use tarn_dmu::Objset;
use tarn_format::objset::ObjsetType;
use tarn_format::BlockPtr;
use tarn_pool::{MemBlockStore, SyncTarget, TxgEngine};
use tarn_zpl::{Clock, Cred, Settings, Timespec, Zpl, ZplOptions};

pub struct TestClock(Mutex<Timespec>);

impl TestClock {
    pub fn new() -> Arc<TestClock> {
        Arc::new(TestClock(Mutex::new(Timespec::new(1_700_000_000, 0))))
    }
    pub fn advance(&self, secs: i64, nsec: u32) -> Timespec {
        let mut t = self.0.lock();
        let total = u64::from(t.nsec) + u64::from(nsec);
        t.sec += secs + (total / 1_000_000_000) as i64;
        t.nsec = (total % 1_000_000_000) as u32;
        *t
    }
    pub fn get(&self) -> Timespec {
        *self.0.lock()
    }
}

impl Clock for TestClock {
    fn now(&self) -> Timespec {
        *self.0.lock()
    }
}

struct OsSync {
    os: Arc<Objset>,
    root: Arc<Mutex<BlockPtr>>,
}

impl SyncTarget for OsSync {
    fn sync_txg(&self, txg: u64) -> Result<(), String> {
        let bp = self.os.sync(txg).map_err(|e| e.to_string())?;
        *self.root.lock() = bp;
        Ok(())
    }
}

pub struct MemFs {
    pub store: Arc<MemBlockStore>,
    pub clock: Arc<TestClock>,
    pub settings: Settings,
    root_bp: Arc<Mutex<BlockPtr>>,
    txg: Arc<TxgEngine>,
    pub zpl: Option<Zpl>,
}

fn engine(os: &Arc<Objset>, root: &Arc<Mutex<BlockPtr>>, last: u64) -> Arc<TxgEngine> {
    let txg = TxgEngine::new(last);
    txg.start(
        Arc::new(OsSync {
            os: os.clone(),
            root: root.clone(),
        }),
        "zpl-test",
    );
    txg
}

impl MemFs {
    pub fn new() -> MemFs {
        Self::with_settings(Settings::default())
    }

    pub fn with_settings(settings: Settings) -> MemFs {
        let store = Arc::new(MemBlockStore::new());
        let os = Arc::new(Objset::create(store.clone(), ObjsetType::Filesystem));
        let root_bp = Arc::new(Mutex::new(BlockPtr::HOLE));
        let txg = engine(&os, &root_bp, 0);
        let clock = TestClock::new();
        let opts = ZplOptions {
            settings,
            clock: clock.clone(),
            ..Default::default()
        };
        let zpl = Zpl::format(os, txg.clone(), opts).expect("format");
        MemFs {
            store,
            clock,
            settings,
            root_bp,
            txg,
            zpl: Some(zpl),
        }
    }

    pub fn txg(&self) -> &Arc<TxgEngine> {
        &self.txg
    }

    pub fn fs(&self) -> &Zpl {
        self.zpl.as_ref().expect("mounted")
    }

    /// Commits, unmounts, reopens the object set from the committed root
    /// and mounts again with `settings`.
    pub fn remount_with(&mut self, settings: Settings) {
        let zpl = self.zpl.take().expect("mounted");
        drop(zpl);
        self.txg.shutdown().expect("final sync");
        let last = self.txg.last_synced();
        let root = *self.root_bp.lock();
        let os = Arc::new(Objset::open(self.store.clone(), &root).expect("reopen objset"));
        self.txg = engine(&os, &self.root_bp, last);
        let opts = ZplOptions {
            settings,
            clock: self.clock.clone(),
            ..Default::default()
        };
        self.settings = settings;
        self.zpl = Some(Zpl::mount(os, self.txg.clone(), opts).expect("mount"));
    }

    pub fn remount(&mut self) {
        self.remount_with(self.settings);
    }

    /// Simulates a crash: what is not committed is lost.
    pub fn crash_and_remount(&mut self) {
        let zpl = self.zpl.take().expect("mounted");
        drop(zpl);
        self.txg.halt();
        let last = self.txg.last_synced();
        let root = *self.root_bp.lock();
        let os = Arc::new(Objset::open(self.store.clone(), &root).expect("reopen objset"));
        self.txg = engine(&os, &self.root_bp, last);
        let opts = ZplOptions {
            settings: self.settings,
            clock: self.clock.clone(),
            ..Default::default()
        };
        self.zpl = Some(Zpl::mount(os, self.txg.clone(), opts).expect("mount"));
    }
}

impl Drop for MemFs {
    fn drop(&mut self) {
        self.zpl.take();
        self.txg.halt();
    }
}

pub fn root() -> Cred {
    Cred::root()
}
