//! The space check (what `zdb -b` does for OpenZFS): every block reachable
//! from the committed state, counted once, against what the allocator
//! says is allocated, per top-level vdev. A difference is a leak (more
//! allocated than reachable) or a block freed while still referenced
//! (less). Tests run it after every step that could get either wrong:
//! snapshots, destroys, rollbacks, crashes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tarn_dmu::Objset;
use tarn_format::spacemap::SpaceMapBlock;
use tarn_format::{BlockPtr, ObjType};
use tarn_pool::BlockStore;

use crate::pool::Pool;
use crate::DslError;

/// What the check found: raw bytes per top-level vdev.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpaceCheck {
    /// Bytes of every distinct block copy reachable from the committed
    /// state (the MOS, the space map log, every dataset and snapshot, the
    /// free queue, the intent logs).
    pub reachable: BTreeMap<u32, u64>,
    /// Bytes the allocator counts as allocated.
    pub allocated: BTreeMap<u32, u64>,
}

impl SpaceCheck {
    /// Whether every allocated byte is reachable and nothing more.
    pub fn is_exact(&self) -> bool {
        let vdevs: BTreeSet<u32> = self
            .reachable
            .keys()
            .chain(self.allocated.keys())
            .copied()
            .collect();
        vdevs.iter().all(|v| {
            self.reachable.get(v).copied().unwrap_or(0)
                == self.allocated.get(v).copied().unwrap_or(0)
        })
    }
}

/// Distinct copies, by (vdev, offset), with their raw size.
#[derive(Default)]
struct Seen {
    copies: BTreeMap<(u32, u64), u64>,
}

impl Seen {
    fn block(&mut self, bp: &BlockPtr) {
        if bp.is_hole() {
            return;
        }
        for d in bp.dvas.iter().filter(|d| !d.is_empty()) {
            self.copies.insert((d.vdev, d.offset), d.asize());
        }
    }
}

impl Pool {
    /// Syncs until nothing is pending, then compares what is reachable with
    /// what is allocated (see the module comment). Meant for an idle pool:
    /// tests, and a check an administrator asks for.
    pub fn space_check(&self) -> Result<SpaceCheck, DslError> {
        // Frees wait for the txg after the one that made them durable, and
        // the free queue drains over several txgs.
        for _ in 0..3 {
            self.sync()?;
        }
        while self.freeing() > 0 {
            self.sync()?;
        }
        self.sync()?;
        let inner = self.inner();
        let _sync = inner.sync_lock.lock();
        let spa = &inner.spa;
        let store: Arc<dyn BlockStore> = spa.clone();
        let ub = spa.uberblock();
        let mut seen = Seen::default();
        let mut bp = ub.spacemap_bp;
        let mut n = 0;
        while !bp.is_hole() && bp.typ == ObjType::SpaceMap && n < 1 << 20 {
            seen.block(&bp);
            bp = SpaceMapBlock::decode(&store.read(&bp).map_err(|e| DslError::Io(e.to_string()))?)?
                .prev;
            n += 1;
        }
        let mos = Objset::open_in(store.clone(), &ub.rootbp, inner.cache.clone())?;
        seen.block(&ub.rootbp);
        mos.walk_blocks(&mut |bp| seen.block(bp))?;
        let mut roots = Vec::new();
        let mut logs = Vec::new();
        {
            let map = inner.datasets.read();
            for d in map.values() {
                roots.push(d.ds.bp);
                roots.extend(d.snaps.iter().map(|s| s.phys.bp));
                logs.push(d.zil.clone());
            }
        }
        for root in roots.into_iter().filter(|b| !b.is_hole()) {
            seen.block(&root);
            let os = Objset::open_in(store.clone(), &root, inner.cache.clone())?;
            os.walk_blocks(&mut |bp| seen.block(bp))?;
        }
        for bp in inner.free_queue.lock().entries(&inner.mos)? {
            seen.block(&bp);
        }
        let mut reachable: BTreeMap<u32, u64> = BTreeMap::new();
        for zil in logs {
            let (ptrs, blocks) = zil.allocated_blocks();
            for p in ptrs.iter().filter(|p| !p.is_none()) {
                seen.copies.insert((p.vdev, p.offset), spa.log_asize(p));
            }
            for b in &blocks {
                seen.block(b);
            }
        }
        for ((vdev, _), asize) in seen.copies {
            *reachable.entry(vdev).or_default() += asize;
        }
        let allocated = spa
            .allocated_by_vdev()
            .into_iter()
            .filter(|(_, a)| *a > 0)
            .collect();
        Ok(SpaceCheck {
            reachable,
            allocated,
        })
    }
}
