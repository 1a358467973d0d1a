//! The space map log condensed on every txg while allocations fill
//! several metaslabs: the pool must import again with every block
//! readable, and keep allocating without overwriting live data. (The case
//! of a condensed run spanning a metaslab boundary is built directly by
//! `metaslab::tests::base_runs_stop_at_metaslab_boundaries`; here small
//! metadata blocks leave gaps at the metaslab ends.)

use std::sync::Arc;

use tarn_format::label::VdevClass;
use tarn_format::{BlockPtr, Compression, ObjType};
use tarn_pool::import::import_devices;
use tarn_pool::{BlockStore, NewTop, Spa, WriteProps, TXG_INITIAL};
use tarn_vdev::{BlockDevice, Layout, MemDevice};

fn reimport(devs: &[Arc<dyn BlockDevice>]) -> Spa {
    import_devices(devs).expect("import after condensing")
}

fn block(i: u64) -> Vec<u8> {
    (0..128 << 10)
        .map(|j: u64| (i.wrapping_mul(31) ^ j.wrapping_mul(2654435761) >> 7) as u8)
        .collect()
}

#[test]
fn condensed_maps_spanning_metaslabs_import_and_stay_consistent() {
    let devs: Vec<Arc<dyn BlockDevice>> = vec![Arc::new(MemDevice::new(256 << 20))];
    let top = NewTop {
        layout: Layout::Single,
        class: VdevClass::Normal,
        ashift: 12,
        leaves: vec![("mem0".into(), devs[0].clone(), false)],
    };
    let spa = Spa::create("tank", vec![top]).unwrap();
    spa.set_condense_min_entries(1);
    let props = WriteProps {
        compression: Compression::Off,
        ..WriteProps::metadata(ObjType::Raw, 0)
    };
    let mut live: Vec<(u64, BlockPtr)> = Vec::new();
    let mut n = 0;
    // 16 MiB metaslabs; 6 txgs of 64 × 128 KiB = 48 MiB: three boundaries.
    for txg in TXG_INITIAL..TXG_INITIAL + 6 {
        for _ in 0..64 {
            live.push((n, spa.write(txg, &block(n), &props).unwrap()));
            n += 1;
        }
        // Free every third of the first 32 blocks so the map has holes to
        // describe.
        if txg == TXG_INITIAL + 1 {
            for (_, bp) in live.iter().filter(|(i, _)| i % 3 == 0 && *i < 32) {
                spa.free(txg, bp);
            }
            live.retain(|(i, _)| !(i % 3 == 0 && *i < 32));
        }
        let root = spa.write(txg, &[0u8; 512], &props).unwrap();
        spa.commit(txg, root).unwrap();
    }
    drop(spa);
    let spa = reimport(&devs);
    for (i, bp) in &live {
        assert!(spa.read(bp).unwrap() == block(*i), "block {i}");
    }
    // New allocations after import never land on live blocks.
    spa.set_condense_min_entries(1);
    let txg = spa.last_synced_txg() + 1;
    for _ in 0..64 {
        spa.write(txg, &block(n), &props).unwrap();
        n += 1;
    }
    let root = spa.write(txg, &[0u8; 512], &props).unwrap();
    spa.commit(txg, root).unwrap();
    for (i, bp) in &live {
        assert!(
            spa.read(bp).unwrap() == block(*i),
            "block {i} after more writes"
        );
    }
    drop(spa);
    reimport(&devs);
}
