//! A pool on simulated disks for crash tests: a two-way mirror of
//! [`FaultDevice`]s (which, at a crash, lose the writes since their last
//! flush and may tear the last one) behind one power switch.
//!
//! The switch ([`Power`]) counts every write and flush reaching any of
//! the disks and cuts them all after a set number: from then on every
//! write and flush fails, as if the machine lost power at that instant.
//! The crash point is therefore a count of device I/Os, not a time, so it
//! comes from the seed; with several threads the order of the I/Os
//! around it still depends on scheduling.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tarn_dsl::Pool;
use tarn_pool::import::import_devices;
use tarn_pool::NewTop;
use tarn_vdev::{BlockDevice, FaultDevice, MemDevice};
use tarn_zpl::{Settings, Zpl, ZplOptions};

/// Size of each simulated disk (sparse in memory).
const DISK_BYTES: u64 = 256 << 20;

/// The power of all the disks of one [`SimPool`].
pub struct Power {
    ios: AtomicU64,
    cut_after: AtomicU64,
    cut: AtomicBool,
}

impl Power {
    fn new() -> Power {
        Power {
            ios: AtomicU64::new(0),
            cut_after: AtomicU64::new(u64::MAX),
            cut: AtomicBool::new(false),
        }
    }

    /// Cuts the power once `n` more writes and flushes have gone through.
    pub fn cut_after(&self, n: u64) {
        self.ios.store(0, Ordering::SeqCst);
        self.cut_after.store(n, Ordering::SeqCst);
    }

    /// Cuts the power now.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    pub fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }

    /// Writes and flushes that went through since `cut_after`.
    pub fn ios(&self) -> u64 {
        self.ios.load(Ordering::SeqCst)
    }

    fn restore(&self) {
        self.cut_after.store(u64::MAX, Ordering::SeqCst);
        self.cut.store(false, Ordering::SeqCst);
    }

    /// Whether one more write or flush may go through (counting it).
    fn take(&self) -> bool {
        if self.is_cut() {
            return false;
        }
        let n = self.ios.fetch_add(1, Ordering::SeqCst);
        if n >= self.cut_after.load(Ordering::SeqCst) {
            self.ios.fetch_sub(1, Ordering::SeqCst);
            self.cut();
            return false;
        }
        true
    }
}

/// One disk behind the power switch.
struct Powered {
    disk: Arc<FaultDevice>,
    power: Arc<Power>,
}

fn no_power() -> std::io::Error {
    std::io::Error::other("simulated power loss")
}

impl BlockDevice for Powered {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.disk.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        if !self.power.take() {
            return Err(no_power());
        }
        self.disk.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        if !self.power.take() {
            return Err(no_power());
        }
        self.disk.flush()
    }
    fn write_durable(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        if !self.power.take() {
            return Err(no_power());
        }
        self.disk.write_durable(buf, offset)
    }
    fn size(&self) -> u64 {
        self.disk.size()
    }
    fn physical_sector_size(&self) -> u32 {
        self.disk.physical_sector_size()
    }
    fn describe(&self) -> String {
        format!("powered({})", self.disk.describe())
    }
}

/// A pool named `tank` on a mirror of two simulated disks.
pub struct SimPool {
    pub power: Arc<Power>,
    disks: Vec<Arc<FaultDevice>>,
    devs: Vec<Arc<dyn BlockDevice>>,
    pool: Option<Arc<Pool>>,
}

impl SimPool {
    /// Creates the pool and `datasets`; the disks' crash outcomes come
    /// from `seed`.
    pub fn create(seed: u64, datasets: &[&str]) -> SimPool {
        let power = Arc::new(Power::new());
        let disks: Vec<Arc<FaultDevice>> = (0..2)
            .map(|i| {
                let mem = Arc::new(MemDevice::new(DISK_BYTES));
                Arc::new(FaultDevice::new(mem, seed.wrapping_mul(7).wrapping_add(i)))
            })
            .collect();
        let devs: Vec<Arc<dyn BlockDevice>> = disks
            .iter()
            .map(|d| {
                Arc::new(Powered {
                    disk: d.clone(),
                    power: power.clone(),
                }) as Arc<dyn BlockDevice>
            })
            .collect();
        let top = NewTop::mem_mirror(&devs);
        let pool = Pool::create("tank", vec![top], &[], &[]).expect("create pool");
        for ds in datasets {
            pool.dataset_create(ds, &[]).expect("create dataset");
        }
        SimPool {
            power,
            disks,
            devs,
            pool: Some(pool),
        }
    }

    pub fn pool(&self) -> &Arc<Pool> {
        self.pool.as_ref().expect("imported")
    }

    /// Mounts `dataset` with its intent log (`format`: make it empty
    /// first). A read-write mount replays what the log holds.
    pub fn mount(&self, dataset: &str, format: bool) -> Zpl {
        let what = if format { "format" } else { "mount" };
        self.try_mount(dataset, format)
            .unwrap_or_else(|e| panic!("{what} {dataset}: {e}"))
    }

    pub fn try_mount(&self, dataset: &str, format: bool) -> tarn_zpl::Result<Zpl> {
        self.try_mount_with(dataset, Settings::default(), format)
    }

    /// [`SimPool::mount`] with dataset settings (`sync`, `logbias`, ...).
    pub fn mount_with(&self, dataset: &str, settings: Settings, format: bool) -> Zpl {
        self.try_mount_with(dataset, settings, format)
            .unwrap_or_else(|e| panic!("mount {dataset}: {e}"))
    }

    fn try_mount_with(
        &self,
        dataset: &str,
        settings: Settings,
        format: bool,
    ) -> tarn_zpl::Result<Zpl> {
        let pool = self.pool();
        let os = pool.dataset_objset(dataset).expect("objset");
        let opts = ZplOptions {
            zil: Some(pool.dataset_zil(dataset).expect("zil")),
            settings,
            ..Default::default()
        };
        if format {
            Zpl::format(os, pool.txg().clone(), opts)
        } else {
            Zpl::mount(os, pool.txg().clone(), opts)
        }
    }

    /// Power loss now (if the switch has not cut it already): the pool
    /// stops, the disks lose what they had not flushed, and the pool is
    /// imported again from what they kept. Mounts must be dropped first.
    pub fn crash_and_import(&mut self) {
        self.power.cut();
        drop(self.pool.take());
        for d in &self.disks {
            d.crash();
        }
        self.power.restore();
        let spa = import_devices(&self.devs).expect("import after the crash");
        self.pool = Some(Pool::open(spa).expect("open after the crash"));
    }

    pub fn export(mut self) {
        self.pool
            .take()
            .expect("imported")
            .export()
            .expect("export");
    }
}
