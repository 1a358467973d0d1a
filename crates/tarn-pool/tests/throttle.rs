//! The allocation throttle (`tarn_pool::throttle`): when the pool is
//! pushed, a fast vdev takes most of a txg's blocks; when it is not, the
//! blocks go by free space, evenly onto equal vdevs.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::props;

use tarn_format::label::VdevClass;
use tarn_pool::{BlockStore, BlockWrite, NewTop, Spa};
use tarn_vdev::{BlockDevice, Layout, MemDevice};

const MIB: u64 = 1 << 20;

/// A memory device that takes `per_write` for every write (a disk whose
/// every I/O costs a seek), one at a time.
struct Slow {
    inner: MemDevice,
    per_write: Duration,
    lane: parking_lot::Mutex<()>,
}

impl BlockDevice for Slow {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let _one = self.lane.lock();
        std::thread::sleep(self.per_write);
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn physical_sector_size(&self) -> u32 {
        self.inner.physical_sector_size()
    }
    fn describe(&self) -> String {
        "slow".into()
    }
}

fn pool(slow_ms: u64) -> Spa {
    let fast: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(512 * MIB));
    let slow: Arc<dyn BlockDevice> = Arc::new(Slow {
        inner: MemDevice::new(512 * MIB),
        per_write: Duration::from_millis(slow_ms),
        lane: parking_lot::Mutex::new(()),
    });
    let single = |name: &str, dev: Arc<dyn BlockDevice>| NewTop {
        layout: Layout::Single,
        class: VdevClass::Normal,
        ashift: 12,
        leaves: vec![(name.to_string(), dev, false)],
    };
    Spa::create("tank", vec![single("fast", fast), single("slow", slow)]).unwrap()
}

/// Writes `txgs` txgs of 16 MiB in 128 KiB blocks, each pushed or not;
/// the fraction of the bytes that landed on vdev 0 (the fast one).
fn fast_share(spa: &Spa, pushed: bool, txgs: u64) -> f64 {
    let block = vec![0xa5u8; 128 << 10];
    let (_, before0, _) = spa.vdev_space(0).unwrap();
    let (_, before1, _) = spa.vdev_space(1).unwrap();
    for txg in 0..txgs {
        spa.throttle.set_pressed(pushed);
        let blocks: Vec<BlockWrite<'_>> = (0..128)
            .map(|_| BlockWrite {
                data: &block,
                props: props(),
            })
            .collect();
        spa.write_batch(4 + txg, &blocks).unwrap();
    }
    let (_, after0, _) = spa.vdev_space(0).unwrap();
    let (_, after1, _) = spa.vdev_space(1).unwrap();
    let (a, b) = (after0 - before0, after1 - before1);
    a as f64 / (a + b) as f64
}

#[test]
fn a_pushed_pool_puts_most_writes_on_the_fast_vdev() {
    let spa = pool(20);
    // The first unpushed window teaches the throttle each vdev's rate.
    let even = fast_share(&spa, false, 1);
    assert!((0.4..=0.6).contains(&even), "unpushed share {even}");
    let share = fast_share(&spa, true, 4);
    assert!(
        share >= 0.8,
        "pushed: {share} of the bytes on the fast vdev"
    );
    // Every copy went somewhere: the queues drained.
    for v in 0..2 {
        let q = spa.throttle.stats(v);
        assert_eq!((q.pending, q.active, q.inflight), (0, 0, 0), "vdev {v}");
    }
    assert!(spa.throttle.stats(0).queued_ops > 0);
}

#[test]
fn an_unpushed_pool_splits_by_free_space() {
    let spa = pool(20);
    let share = fast_share(&spa, false, 3);
    assert!((0.4..=0.6).contains(&share), "share {share}");
}
