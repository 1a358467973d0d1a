//! Snapshots: taking them, what they hold, and destroying them
//! (zfs-snapshot(8), zfs-destroy(8); OpenZFS's `dsl_dataset_snapshot`,
//! `dsl_destroy_snapshot` and the dead-list space rules of
//! `dsl_dataset.c`). docs/FORMAT.md §12.2 has the records.
//!
//! ## Taking a snapshot
//! A snapshot is the head's state as of the last synced txg `L`: the
//! command first waits for the open txg to sync (so every change
//! acknowledged before it is in `L`), then, under `sync_lock` and a hold
//! of the open txg, records the head's root block pointer and space at `L`
//! as a new dataset object, gives it the head's dead list and the head an
//! empty one, and sets the head's `prev_snap_txg` to `L`. No sync runs
//! meanwhile, so the head's synced state is exactly `L`; the records land
//! in the held txg, all snapshots of one command in the same one (one
//! `createtxg`). Nothing is copied: O(1) in the dataset's size.
//!
//! ## What happens to a freed block
//! The head's object set hands every block a sync stops referencing to
//! [`SnapHook`]: one born after `prev_snap_txg` is the head's alone and is
//! freed; an older one is still held by a snapshot and goes to the head's
//! dead list, under the sub-list of the newest snapshot txg below its
//! birth (docs/FORMAT.md §12.2). Each block is so on the dead list of the
//! first dataset in chain order that does not reference it, and:
//!
//! * a snapshot `S` alone holds the blocks of the next dataset's dead
//!   list born in `(prev(S).txg, S.txg]` (its `used`);
//! * every snapshot together holds every dead list (`usedbysnapshots`);
//! * the head wrote `referenced(head) − referenced(S) + deadlist(head)`
//!   since its newest snapshot `S` (`written`).
//!
//! A clone's blocks born up to its origin belong to the origin: they are
//! never charged to the clone and never freed by it.
//!
//! ## Destroying a snapshot
//! The blocks only `S` held — a range of whole sub-lists of the next
//! dataset's dead list — go to the pool's free queue, `S`'s own dead list
//! joins the next one's, and the chain closes over `S`: a handful of MOS
//! changes in one txg, whatever the size. The queue frees the blocks over
//! the next txgs (`tunables::FREE_BLOCKS_PER_TXG` a txg).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_dmu::{FreeHook, Objset};
use tarn_format::dsl::{
    DslDatasetPhys, DS_EXT_CLONES, DS_EXT_HOLDS, DS_EXT_PROPS, DS_FLAG_DEFER_DESTROY,
};
use tarn_format::{BlockPtr, ObjType, FEATURE_SNAPSHOTS};
use tarn_pool::BlockStore;

use crate::acct::AcctStore;
use crate::deadlist::{Dead, Deadlist, Space};
use crate::mos;
use crate::pool::{now, Ds, Inner, Pool, PropSource, PropValue, OBJECT_DIRECTORY};
use crate::DslError;

/// One snapshot of a head, as loaded in memory.
pub(crate) struct Snap {
    /// The name after `@`.
    pub name: String,
    pub obj: u64,
    pub phys: DslDatasetPhys,
    pub deadlist: Deadlist,
}

/// The free hook of a head's object set (see the module comment).
pub(crate) struct SnapHook {
    acct: Arc<AcctStore>,
    prev_snap_txg: AtomicU64,
    /// Blocks sent to the dead list by the sync under way.
    killed: Mutex<Vec<BlockPtr>>,
}

impl SnapHook {
    /// Makes a hook for a head whose newest snapshot (or origin) is at
    /// `prev_snap_txg` and installs it in the head's object set.
    pub fn install(objset: &Objset, acct: &Arc<AcctStore>, prev_snap_txg: u64) -> Arc<SnapHook> {
        let hook = Arc::new(SnapHook {
            acct: acct.clone(),
            prev_snap_txg: AtomicU64::new(prev_snap_txg),
            killed: Mutex::new(Vec::new()),
        });
        objset.set_free_hook(hook.clone());
        hook
    }

    /// A snapshot was taken or destroyed: blocks born after `txg` are
    /// the head's alone from now on.
    pub fn set_prev_snap_txg(&self, txg: u64) {
        self.prev_snap_txg.store(txg, Ordering::Relaxed);
    }

    /// The blocks the last sync sent to the dead list.
    pub fn take_killed(&self) -> Vec<BlockPtr> {
        std::mem::take(&mut *self.killed.lock())
    }
}

impl FreeHook for SnapHook {
    fn free_block(&self, store: &dyn BlockStore, txg: u64, bp: &BlockPtr) {
        if bp.birth > self.prev_snap_txg.load(Ordering::Relaxed) {
            store.free(txg, bp);
        } else {
            self.acct.kill(bp);
            self.killed.lock().push(*bp);
        }
    }
}

/// `pool/fs@snap` → (`pool/fs`, `snap`).
pub(crate) fn split(name: &str) -> Option<(&str, &str)> {
    name.split_once('@')
}

/// The snapshots of a head whose record is `head`, oldest first.
pub(crate) fn load_snaps(mos: &Objset, head: &DslDatasetPhys) -> Result<Vec<Snap>, DslError> {
    if head.snapnames_obj == 0 {
        return Ok(Vec::new());
    }
    let mut snaps = Vec::new();
    for (name, v) in mos::zap_list(mos, head.snapnames_obj)? {
        let obj = v
            .as_single_u64()
            .ok_or_else(|| DslError::Corrupted(format!("snapshot '{name}' entry")))?;
        let phys = DslDatasetPhys::decode(&mos.bonus(obj)?)?;
        if phys.dir_obj != head.dir_obj {
            return Err(DslError::Corrupted(format!(
                "snapshot '{name}' belongs to another dataset"
            )));
        }
        let deadlist = match phys.deadlist_obj {
            0 => Deadlist::default(),
            o => Deadlist::load(mos, o)?,
        };
        snaps.push(Snap {
            name,
            obj,
            phys,
            deadlist,
        });
    }
    snaps.sort_by_key(|s| s.phys.creation_txg);
    Ok(snaps)
}

/// The snapshot whose dataset object is `obj`: its head's name and index.
pub(crate) fn find_snap(map: &BTreeMap<String, Ds>, obj: u64) -> Option<(&str, usize)> {
    map.iter().find_map(|(name, d)| {
        d.snaps
            .iter()
            .position(|s| s.obj == obj)
            .map(|i| (name.as_str(), i))
    })
}

/// The txg of a clone's origin snapshot (0 for a dataset that is not a
/// clone): blocks born up to it are the origin's.
pub(crate) fn origin_txg(map: &BTreeMap<String, Ds>, name: &str) -> u64 {
    let Some(d) = map.get(name) else { return 0 };
    if d.dir.origin_obj == 0 {
        return 0;
    }
    find_snap(map, d.dir.origin_obj).map_or(0, |(head, i)| map[head].snaps[i].phys.creation_txg)
}

/// The txgs of every snapshot in `name`'s history, ascending: its own and,
/// for a clone, its origin and the origin's older snapshots, and so on.
/// A dead list's keys are taken from them.
pub(crate) fn ancestry_txgs(map: &BTreeMap<String, Ds>, name: &str) -> Vec<u64> {
    let mut txgs = Vec::new();
    let mut at = map.get(name);
    let mut limit = u64::MAX;
    // Bounded: a corrupt origin loop must not spin forever.
    for _ in 0..map.len() + 1 {
        let Some(d) = at else { break };
        txgs.extend(
            d.snaps
                .iter()
                .map(|s| s.phys.creation_txg)
                .filter(|&t| t <= limit),
        );
        at = None;
        if d.dir.origin_obj != 0 {
            if let Some((head, i)) = find_snap(map, d.dir.origin_obj) {
                limit = map[head].snaps[i].phys.creation_txg;
                at = map.get(head);
            }
        }
    }
    txgs.sort_unstable();
    txgs.dedup();
    txgs
}

/// The dead-list key of a block born at `birth`: the newest snapshot txg
/// below it, or 0.
fn key_for(txgs: &[u64], birth: u64) -> u64 {
    match txgs.partition_point(|&t| t < birth) {
        0 => 0,
        i => txgs[i - 1],
    }
}

/// Puts the blocks a sync of head `d` sent to the dead list there (sync
/// context). Returns their space: the object set counted them as freed,
/// but they stay charged to the dataset's directory (its snapshots, or a
/// clone's origin, hold them).
pub(crate) fn add_to_deadlist(
    mos: &Objset,
    d: &mut Ds,
    txgs: &[u64],
    origin_txg: u64,
    killed: &[BlockPtr],
) -> Result<Space, DslError> {
    if killed.is_empty() {
        return Ok(Space::default());
    }
    if d.deadlist.obj == 0 {
        d.deadlist = Deadlist::create(mos)?;
        d.ds.deadlist_obj = d.deadlist.obj;
    }
    let mut groups: BTreeMap<u64, Vec<Dead>> = BTreeMap::new();
    let mut kept = Space::default();
    for bp in killed {
        let dead = Dead {
            bp: *bp,
            dsize: d.acct.dsize(bp),
        };
        let _ = origin_txg;
        kept.dsize += dead.dsize;
        kept.psize += u64::from(bp.psize);
        kept.lsize += u64::from(bp.lsize);
        groups
            .entry(key_for(txgs, bp.birth))
            .or_default()
            .push(dead);
    }
    for (key, dead) in groups {
        d.deadlist.insert(mos, key, &dead)?;
    }
    Ok(kept)
}

/// Space held by `name`'s snapshots alone (`usedbysnapshots`).
pub(crate) fn snapused(map: &BTreeMap<String, Ds>, name: &str) -> Space {
    let Some(d) = map.get(name) else {
        return Space::default();
    };
    let origin = origin_txg(map, name);
    d.snaps
        .iter()
        .map(|s| &s.deadlist)
        .chain(std::iter::once(&d.deadlist))
        .map(|dl| dl.range(origin, u64::MAX))
        .fold(Space::default(), |a, b| a + b)
}

/// Space the head of `name` references that is its own (`usedbydataset`):
/// all it references, less, for a clone, the origin's blocks it still
/// shares (the origin's, less those the clone's history freed).
pub(crate) fn usedbydataset(map: &BTreeMap<String, Ds>, name: &str) -> u64 {
    usedbydataset_space(map, name).dsize
}

/// [`usedbydataset`] with the physical and logical sizes.
pub(crate) fn usedbydataset_space(map: &BTreeMap<String, Ds>, name: &str) -> Space {
    let Some(d) = map.get(name) else {
        return Space::default();
    };
    let referenced = Space {
        dsize: d.ds.referenced_bytes,
        psize: d.ds.compressed_bytes,
        lsize: d.ds.uncompressed_bytes,
    };
    if d.dir.origin_obj == 0 {
        return referenced;
    }
    let Some((h, i)) = find_snap(map, d.dir.origin_obj) else {
        return referenced;
    };
    let origin = &map[h].snaps[i].phys;
    let freed_of_origin = d
        .snaps
        .iter()
        .map(|s| &s.deadlist)
        .chain(std::iter::once(&d.deadlist))
        .map(|dl| dl.range(0, origin.creation_txg))
        .fold(Space::default(), |a, b| a + b);
    let origin_ref = Space {
        dsize: origin.referenced_bytes,
        psize: origin.compressed_bytes,
        lsize: origin.uncompressed_bytes,
    };
    referenced - (origin_ref - freed_of_origin)
}

/// What a dataset's own directory is charged, children aside: its
/// head's own space and its snapshots'.
pub(crate) fn own_charge(map: &BTreeMap<String, Ds>, name: &str) -> Space {
    usedbydataset_space(map, name) + snapused(map, name)
}

/// Frees a dataset's `ext_obj` ZAP and the objects it names.
pub(crate) fn free_ext(mos: &Objset, ext: u64) -> Result<(), DslError> {
    for (_, v) in mos::zap_list(mos, ext)? {
        if let Some(obj) = v.as_single_u64() {
            mos::object_free(mos, obj)?;
        }
    }
    mos::object_free(mos, ext)
}

/// The object `ext_obj` names under `key`, if any.
pub(crate) fn ext_get(mos: &Objset, ext: u64, key: &str) -> Result<Option<u64>, DslError> {
    if ext == 0 {
        return Ok(None);
    }
    mos::zap_get_u64(mos, ext, key)
}

/// The object `ext_obj` names under `key`, made (with `ext_obj` itself)
/// when missing; `ext` is updated in place.
pub(crate) fn ext_make(
    mos: &Objset,
    ext: &mut u64,
    key: &str,
    typ: ObjType,
) -> Result<u64, DslError> {
    if *ext == 0 {
        *ext = mos::zap_create(mos, ObjType::Zap)?;
    }
    if let Some(obj) = mos::zap_get_u64(mos, *ext, key)? {
        return Ok(obj);
    }
    let obj = mos::zap_create(mos, typ)?;
    mos::zap_set_u64(mos, *ext, key, obj)?;
    Ok(obj)
}

/// What `zfs list`/`zfs get` show of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapshotInfo {
    pub creation: u64,
    pub createtxg: u64,
    pub guid: u64,
    /// Space only this snapshot holds.
    pub used: u64,
    pub referenced: u64,
    pub written: u64,
    pub logicalreferenced: u64,
    pub compressratio_x100: u64,
    pub defer_destroy: bool,
    pub userrefs: u64,
    pub clones: Vec<String>,
}

fn ratio(l: u64, p: u64) -> u64 {
    (l * 100).checked_div(p).map_or(100, |r| r.max(100))
}

impl Inner {
    /// The head of a snapshot name, and the snapshot's index.
    pub(crate) fn snap_index(&self, name: &str) -> Result<(String, usize), DslError> {
        let (head, snap) = split(name).ok_or_else(|| DslError::NoSuchDataset(name.into()))?;
        let map = self.datasets.read_recursive();
        let d = map
            .get(head)
            .ok_or_else(|| DslError::NoSuchDataset(name.into()))?;
        let i = d
            .snaps
            .iter()
            .position(|s| s.name == snap)
            .ok_or_else(|| DslError::NoSuchDataset(name.into()))?;
        Ok((head.to_string(), i))
    }

    /// Records snapshot `snap` of `head` at the last synced txg `txg` (the
    /// caller holds `sync_lock` and a hold of the open txg).
    fn snapshot_locked(
        &self,
        head: &str,
        snap: &str,
        txg: u64,
        props: &[(String, String)],
    ) -> Result<(), DslError> {
        self.snapshot_guid_locked(head, snap, txg, props, tarn_pool::spa::new_guid())
    }

    /// A received snapshot: [`Inner::snapshot_locked`] with the sender's
    /// guid, so later incrementals match it.
    pub(crate) fn snapshot_with_guid(
        &self,
        head: &str,
        snap: &str,
        txg: u64,
        guid: u64,
    ) -> Result<(), DslError> {
        self.snapshot_guid_locked(head, snap, txg, &[], guid)
    }

    fn snapshot_guid_locked(
        &self,
        head: &str,
        snap: &str,
        txg: u64,
        props: &[(String, String)],
        guid: u64,
    ) -> Result<(), DslError> {
        let mos = &self.mos;
        let mut map = self.datasets.write();
        let d = map
            .get_mut(head)
            .ok_or_else(|| DslError::NoSuchDataset(head.into()))?;
        let mut ext = 0;
        if !props.is_empty() {
            let obj = ext_make(mos, &mut ext, DS_EXT_PROPS, ObjType::DslProps)?;
            for (k, v) in props {
                mos::zap_set_str(mos, obj, k, v)?;
            }
        }
        let phys = DslDatasetPhys {
            dir_obj: d.dir_obj,
            prev_snap_obj: d.ds.prev_snap_obj,
            prev_snap_txg: d.ds.prev_snap_txg,
            next_snap_obj: d.ds_obj,
            snapnames_obj: 0,
            deadlist_obj: d.ds.deadlist_obj,
            creation_time: now(),
            creation_txg: txg,
            referenced_bytes: d.ds.referenced_bytes,
            compressed_bytes: d.ds.compressed_bytes,
            uncompressed_bytes: d.ds.uncompressed_bytes,
            unique_bytes: 0,
            guid,
            flags: 0,
            bp: d.ds.bp,
            ext_obj: ext,
        };
        let obj = mos::record_create(mos, ObjType::DslDataset, &phys.encode())?;
        if let Some(prev) = d.snaps.last_mut() {
            prev.phys.next_snap_obj = obj;
            mos.set_bonus(prev.obj, &prev.phys.encode())?;
        }
        if d.ds.snapnames_obj == 0 {
            d.ds.snapnames_obj = mos::zap_create(mos, ObjType::DslSnapMap)?;
        }
        mos::zap_set_u64(mos, d.ds.snapnames_obj, snap, obj)?;
        d.ds.prev_snap_obj = obj;
        d.ds.prev_snap_txg = txg;
        d.ds.deadlist_obj = 0;
        let deadlist = std::mem::take(&mut d.deadlist);
        mos.set_bonus(d.ds_obj, &d.ds.encode())?;
        d.hook.set_prev_snap_txg(txg);
        d.snaps.push(Snap {
            name: snap.to_string(),
            obj,
            phys,
            deadlist,
        });
        Ok(())
    }

    /// Destroys snapshot `i` of `head` (the caller holds `sync_lock` and a
    /// hold of the open txg, and checked holds and clones). Returns the
    /// space queued to be freed.
    fn destroy_snapshot_locked(&self, head: &str, i: usize) -> Result<Space, DslError> {
        let mos = &self.mos;
        let dsize = |bp: &BlockPtr| self.spa.dsize(bp);
        let origin = origin_txg(&self.datasets.read(), head);
        let mut map = self.datasets.write();
        let d = map
            .get_mut(head)
            .ok_or_else(|| DslError::NoSuchDataset(head.into()))?;
        let s = d.snaps.remove(i);
        let p_txg = if i > 0 {
            d.snaps[i - 1].phys.creation_txg
        } else {
            origin
        };
        // The next dataset in the chain: the next snapshot, or the head.
        let (next_dl, next_phys, next_obj) = match d.snaps.get_mut(i) {
            Some(n) => (&mut n.deadlist, &mut n.phys, n.obj),
            None => (&mut d.deadlist, &mut d.ds, d.ds_obj),
        };
        // What only `s` held: the next dead list's blocks born after the
        // previous snapshot.
        let only = next_dl.take_range(mos, p_txg, s.phys.creation_txg)?;
        let freed = only.iter().fold(Space::default(), |a, e| {
            a + Space {
                dsize: e.dsize,
                psize: e.psize,
                lsize: e.lsize,
            }
        });
        self.free_queue
            .lock()
            .enqueue(mos, OBJECT_DIRECTORY, only, &dsize)?;
        if s.deadlist.obj != 0 {
            if next_dl.obj == 0 {
                *next_dl = Deadlist::create(mos)?;
                next_phys.deadlist_obj = next_dl.obj;
            }
            next_dl.absorb(mos, s.deadlist, &dsize)?;
        }
        next_phys.prev_snap_obj = s.phys.prev_snap_obj;
        next_phys.prev_snap_txg = s.phys.prev_snap_txg;
        mos.set_bonus(next_obj, &next_phys.encode())?;
        if next_obj == d.ds_obj {
            d.hook.set_prev_snap_txg(s.phys.prev_snap_txg);
        }
        if i > 0 {
            let p = &mut d.snaps[i - 1];
            p.phys.next_snap_obj = next_obj;
            mos.set_bonus(p.obj, &p.phys.encode())?;
        }
        mos::zap_remove(mos, d.ds.snapnames_obj, &s.name)?;
        if s.phys.ext_obj != 0 {
            free_ext(mos, s.phys.ext_obj)?;
        }
        mos::object_free(mos, s.obj)?;
        drop(map);
        self.charge_freed(head, freed)?;
        Ok(freed)
    }

    /// The space a destroy queued no longer counts against `head` and its
    /// ancestors.
    fn charge_freed(&self, head: &str, freed: Space) -> Result<(), DslError> {
        if freed == Space::default() {
            return Ok(());
        }
        self.charge_ancestors(
            head,
            -(freed.dsize as i64),
            -(freed.psize as i64),
            -(freed.lsize as i64),
        )
    }

    /// Clones of a snapshot (their names).
    fn clones_of(&self, snap: &Snap) -> Result<Vec<String>, DslError> {
        let Some(obj) = ext_get(&self.mos, snap.phys.ext_obj, DS_EXT_CLONES)? else {
            return Ok(Vec::new());
        };
        let objs: Vec<u64> = mos::zap_list(&self.mos, obj)?
            .into_iter()
            .filter_map(|(k, _)| u64::from_str_radix(&k, 16).ok())
            .collect();
        let map = self.datasets.read_recursive();
        Ok(map
            .iter()
            .filter(|(_, d)| objs.contains(&d.ds_obj))
            .map(|(n, _)| n.clone())
            .collect())
    }

    /// Hold tags of a snapshot.
    fn holds_of(&self, snap: &Snap) -> Result<Vec<(String, u64)>, DslError> {
        let Some(obj) = ext_get(&self.mos, snap.phys.ext_obj, DS_EXT_HOLDS)? else {
            return Ok(Vec::new());
        };
        Ok(mos::zap_list(&self.mos, obj)?
            .into_iter()
            .map(|(k, v)| (k, v.as_single_u64().unwrap_or(0)))
            .collect())
    }
}

impl Pool {
    /// `zfs snapshot NAME…`: every snapshot in one txg (one `createtxg`),
    /// with user properties `props`. `names` are `dataset@snapshot`,
    /// already valid; each dataset at most once.
    pub fn snapshot(&self, names: &[String], props: &[(String, String)]) -> Result<(), DslError> {
        let mut seen = Vec::new();
        for name in names {
            let (head, _) = split(name)
                .ok_or_else(|| DslError::Invalid(format!("'{name}' is not a snapshot name")))?;
            if seen.contains(&head) {
                return Err(DslError::Invalid(
                    "multiple snapshots of the same filesystem are not allowed in one command"
                        .into(),
                ));
            }
            seen.push(head);
        }
        if let Some((k, _)) = props.iter().find(|(k, _)| !k.contains(':')) {
            return Err(DslError::Invalid(format!(
                "property '{k}' cannot be set on snapshots (only user properties can)"
            )));
        }
        // Everything acknowledged before the command is in a synced txg.
        self.sync()?;
        let inner = self.inner();
        let txg = {
            let hold = inner.txg.hold()?;
            let _sync = inner.sync_lock.lock();
            let synced = inner.txg.last_synced();
            for name in names {
                let (head, snap) = split(name).expect("checked above");
                let map = inner.datasets.read();
                let d = map
                    .get(head)
                    .ok_or_else(|| DslError::NoSuchDataset(head.into()))?;
                if d.snaps.iter().any(|s| s.name == snap) {
                    return Err(DslError::Exists(name.clone()));
                }
            }
            for name in names {
                let (head, snap) = split(name).expect("checked above");
                inner.snapshot_locked(head, snap, synced, props)?;
            }
            inner.spa.activate_feature(FEATURE_SNAPSHOTS);
            hold.txg
        };
        Ok(inner.txg.wait_synced(txg)?)
    }

    /// The snapshots of `dataset`, oldest first (full names).
    pub fn snapshots(&self, dataset: &str) -> Vec<String> {
        let map = self.inner().datasets.read();
        map.get(dataset).map_or_else(Vec::new, |d| {
            d.snaps
                .iter()
                .map(|s| format!("{dataset}@{}", s.name))
                .collect()
        })
    }

    /// The snapshots of `dataset`, oldest first: their names (after `@`)
    /// and ids (their dataset objects in the MOS, stable for their life).
    pub fn snapshot_ids(&self, dataset: &str) -> Vec<(String, u64)> {
        let map = self.inner().datasets.read();
        map.get(dataset).map_or_else(Vec::new, |d| {
            d.snaps.iter().map(|s| (s.name.clone(), s.obj)).collect()
        })
    }

    pub fn snapshot_exists(&self, name: &str) -> bool {
        self.inner().snap_index(name).is_ok()
    }

    /// `zfs destroy DS@SNAP…`: destroys the snapshots in one txg, oldest
    /// first. A snapshot with holds or clones is refused, or with `defer`
    /// marked to go when the last of them does. Returns the space the
    /// destroy releases (freed in the background).
    pub fn snapshots_destroy(&self, names: &[String], defer: bool) -> Result<u64, DslError> {
        let inner = self.inner();
        let txg = {
            let hold = inner.txg.hold()?;
            let _sync = inner.sync_lock.lock();
            let mut targets = Vec::new();
            for name in names {
                let (head, i) = inner.snap_index(name)?;
                let map = inner.datasets.read();
                let s = &map[&head].snaps[i];
                let txg = s.phys.creation_txg;
                let busy = !inner.clones_of(s)?.is_empty() || !inner.holds_of(s)?.is_empty();
                drop(map);
                if busy && !defer {
                    return Err(self.busy_error(name)?);
                }
                targets.push((head, txg, name.clone(), busy));
            }
            // Oldest first, so each one's neighbours are already final.
            targets.sort_by_key(|(_, txg, _, _)| *txg);
            let mut freed = 0;
            for (head, _, name, busy) in targets {
                if busy {
                    inner.set_defer(&name)?;
                    continue;
                }
                let (_, i) = inner.snap_index(&name)?;
                freed += inner.destroy_snapshot_locked(&head, i)?.dsize;
            }
            (hold.txg, freed)
        };
        inner.txg.wait_synced(txg.0)?;
        Ok(txg.1)
    }

    /// What destroying the snapshots `names` would release, without
    /// destroying anything (`zfs destroy -nv`, `-p`).
    pub fn snapshots_destroy_space(&self, names: &[String]) -> Result<u64, DslError> {
        let inner = self.inner();
        let map = inner.datasets.read();
        // Per dataset, the indices going.
        let mut going: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for name in names {
            let (head, i) = inner.snap_index(name)?;
            going.entry(head).or_default().push(i);
        }
        let mut total = 0;
        for (head, mut idx) in going {
            idx.sort_unstable();
            idx.dedup();
            let d = &map[&head];
            let origin = origin_txg(&map, &head);
            // Each run of consecutive snapshots frees, from the dead lists
            // after its first one up to the next survivor's, the blocks
            // born after the snapshot before the run.
            let mut k = 0;
            while k < idx.len() {
                let first = idx[k];
                let mut last = first;
                while k + 1 < idx.len() && idx[k + 1] == last + 1 {
                    k += 1;
                    last = idx[k];
                }
                k += 1;
                let p_txg = if first > 0 {
                    d.snaps[first - 1].phys.creation_txg
                } else {
                    origin
                };
                let lists =
                    d.snaps[first + 1..=last]
                        .iter()
                        .map(|s| &s.deadlist)
                        .chain(std::iter::once(
                            d.snaps.get(last + 1).map_or(&d.deadlist, |n| &n.deadlist),
                        ));
                total += lists.map(|dl| dl.range(p_txg, u64::MAX).dsize).sum::<u64>();
            }
        }
        Ok(total)
    }

    fn busy_error(&self, name: &str) -> Result<DslError, DslError> {
        let inner = self.inner();
        let (head, i) = inner.snap_index(name)?;
        let map = inner.datasets.read();
        let s = &map[&head].snaps[i];
        let clones = inner.clones_of(s)?;
        Ok(if clones.is_empty() {
            DslError::Busy("dataset is busy".into())
        } else {
            DslError::Busy(format!(
                "snapshot has dependent clones\nuse '-R' to destroy the following datasets:\n{}",
                clones.join("\n")
            ))
        })
    }

    /// What `zfs get`/`zfs list` show of snapshot `name`.
    pub fn snapshot_info(&self, name: &str) -> Result<SnapshotInfo, DslError> {
        let inner = self.inner();
        let (head, i) = inner.snap_index(name)?;
        let map = inner.datasets.read_recursive();
        let d = &map[&head];
        let s = &d.snaps[i];
        let origin = origin_txg(&map, &head);
        let prev = if i > 0 {
            Some(d.snaps[i - 1].phys)
        } else if d.dir.origin_obj != 0 {
            find_snap(&map, d.dir.origin_obj).map(|(h, k)| map[h].snaps[k].phys)
        } else {
            None
        };
        let p_txg = prev.map_or(origin, |p| p.creation_txg);
        let next_dl = d.snaps.get(i + 1).map_or(&d.deadlist, |n| &n.deadlist);
        let used = next_dl.range(p_txg, s.phys.creation_txg).dsize;
        let written = match prev {
            Some(p) => (s.phys.referenced_bytes + s.deadlist.total().dsize)
                .saturating_sub(p.referenced_bytes),
            None => s.phys.referenced_bytes,
        };
        let clones = inner.clones_of(s)?;
        let userrefs = inner.holds_of(s)?.len() as u64;
        Ok(SnapshotInfo {
            creation: s.phys.creation_time,
            createtxg: s.phys.creation_txg,
            guid: s.phys.guid,
            used,
            referenced: s.phys.referenced_bytes,
            written,
            logicalreferenced: s.phys.uncompressed_bytes,
            compressratio_x100: ratio(s.phys.uncompressed_bytes, s.phys.compressed_bytes),
            defer_destroy: s.phys.flags & DS_FLAG_DEFER_DESTROY != 0,
            userrefs,
            clones,
        })
    }

    /// A user property of a snapshot (`None`: not set).
    pub fn snapshot_user_prop(&self, name: &str, prop: &str) -> Result<Option<String>, DslError> {
        let inner = self.inner();
        let (head, i) = inner.snap_index(name)?;
        let ext = inner.datasets.read()[&head].snaps[i].phys.ext_obj;
        match ext_get(&inner.mos, ext, DS_EXT_PROPS)? {
            Some(obj) => mos::zap_get_str(&inner.mos, obj, prop),
            None => Ok(None),
        }
    }

    /// Every user property set on a snapshot, sorted.
    pub fn snapshot_user_props(&self, name: &str) -> Result<Vec<(String, String)>, DslError> {
        let inner = self.inner();
        let (head, i) = inner.snap_index(name)?;
        let ext = inner.datasets.read()[&head].snaps[i].phys.ext_obj;
        let Some(obj) = ext_get(&inner.mos, ext, DS_EXT_PROPS)? else {
            return Ok(Vec::new());
        };
        let mut out: Vec<(String, String)> = mos::zap_list(&inner.mos, obj)?
            .into_iter()
            .filter_map(|(k, v)| match v {
                tarn_dmu::ZapValue::Bytes(b) => Some((k, String::from_utf8_lossy(&b).into())),
                _ => None,
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// Sets (`Some`) or removes (`None`) a user property of a snapshot.
    pub fn snapshot_set_user_prop(
        &self,
        name: &str,
        prop: &str,
        value: Option<&str>,
    ) -> Result<(), DslError> {
        let inner = self.inner();
        let txg = {
            let hold = inner.txg.hold()?;
            let _sync = inner.sync_lock.lock();
            let (head, i) = inner.snap_index(name)?;
            let mut map = inner.datasets.write();
            let s = &mut map.get_mut(&head).expect("found above").snaps[i];
            let mut ext = s.phys.ext_obj;
            let obj = ext_make(&inner.mos, &mut ext, DS_EXT_PROPS, ObjType::DslProps)?;
            match value {
                Some(v) => mos::zap_set_str(&inner.mos, obj, prop, v)?,
                None => {
                    mos::zap_remove(&inner.mos, obj, prop)?;
                }
            }
            if ext != s.phys.ext_obj {
                s.phys.ext_obj = ext;
                inner.mos.set_bonus(s.obj, &s.phys.encode())?;
            }
            hold.txg
        };
        Ok(inner.txg.wait_synced(txg)?)
    }

    /// The dataset's object set as its last synced txg left it, opened
    /// read-only on its own (what a `zfs diff` against the live dataset
    /// compares; the caller syncs first).
    pub fn dataset_committed_objset(&self, name: &str) -> Result<Arc<Objset>, DslError> {
        let inner = self.inner();
        let bp = inner
            .datasets
            .read()
            .get(name)
            .map(|d| d.ds.bp)
            .ok_or_else(|| DslError::NoSuchDataset(name.into()))?;
        let store: Arc<dyn BlockStore> = inner.spa.clone();
        Ok(Arc::new(Objset::open_in(store, &bp, inner.cache.clone())?))
    }

    /// The object set of a snapshot, opened read-only at its root.
    pub fn snapshot_objset(&self, name: &str) -> Result<Arc<Objset>, DslError> {
        let inner = self.inner();
        let (head, i) = inner.snap_index(name)?;
        let bp = inner.datasets.read()[&head].snaps[i].phys.bp;
        let store: Arc<dyn BlockStore> = inner.spa.clone();
        Ok(Arc::new(Objset::open_in(store, &bp, inner.cache.clone())?))
    }

    /// A property of snapshot `name`: its statistics and user properties
    /// (`Invalid` for a property snapshots do not have, which `zfs get all`
    /// leaves out).
    pub fn snapshot_prop(&self, name: &str, prop: &str) -> Result<PropValue, DslError> {
        let stat = |v: String| {
            Ok(PropValue {
                value: v,
                source: PropSource::None,
            })
        };
        if prop.contains(':') {
            if let Some(v) = self.snapshot_user_prop(name, prop)? {
                return Ok(PropValue {
                    value: v,
                    source: PropSource::Local,
                });
            }
            let (head, _) = split(name).expect("a snapshot name");
            let v = self.dataset_prop(head, prop)?;
            let source = match v.source {
                PropSource::Local => PropSource::Inherited(head.to_string()),
                other => other,
            };
            return Ok(PropValue { source, ..v });
        }
        let prop = crate::props::dataset_prop(prop).map_or(prop, |d| d.name);
        if let Some(snap) = prop.strip_prefix("written@") {
            return stat(self.written_since(name, snap)?.to_string());
        }
        let info = self.snapshot_info(name)?;
        match prop {
            "type" => stat("snapshot".into()),
            "name" => stat(name.into()),
            "creation" => stat(info.creation.to_string()),
            "createtxg" => stat(info.createtxg.to_string()),
            "guid" => stat(info.guid.to_string()),
            "used" => stat(info.used.to_string()),
            "referenced" => stat(info.referenced.to_string()),
            "written" => stat(info.written.to_string()),
            "logicalreferenced" => stat(info.logicalreferenced.to_string()),
            "compressratio" | "refcompressratio" => stat(info.compressratio_x100.to_string()),
            "defer_destroy" => stat(if info.defer_destroy { "on" } else { "off" }.into()),
            "userrefs" => stat(info.userrefs.to_string()),
            "clones" => stat(info.clones.join(",")),
            "volsize" if self.is_volume(name) => stat(self.volume_geometry(name)?.0.to_string()),
            _ => Err(DslError::Invalid(format!(
                "property '{prop}' does not apply to snapshots"
            ))),
        }
    }

    /// `written@SNAP` of `name` (a dataset or a later snapshot of the same
    /// history): bytes it references that were written after `SNAP`.
    pub fn written_since(&self, name: &str, snap: &str) -> Result<u64, DslError> {
        let inner = self.inner();
        let head = split(name).map_or(name, |(h, _)| h);
        // `written@tank/a@s` or `written@s`: the older snapshot's full name.
        let old = if snap.contains('@') {
            snap.to_string()
        } else {
            format!("{head}@{snap}")
        };
        let (old_head, old_i) = inner.snap_index(&old)?;
        let map = inner.datasets.read_recursive();
        let d = &map[head];
        let old_txg = map[&old_head].snaps[old_i].phys.creation_txg;
        let old_ref = map[&old_head].snaps[old_i].phys.referenced_bytes;
        if old_head != head && !ancestry_txgs(&map, head).contains(&old_txg) {
            return Err(DslError::Invalid(format!(
                "'{old}' is not an earlier snapshot of '{name}'"
            )));
        }
        // The newer end: a snapshot of `head`, or the head itself.
        let (new_ref, lists): (u64, Vec<&Deadlist>) = match split(name) {
            Some(_) => {
                let (_, i) = inner.snap_index(name)?;
                let s = &d.snaps[i];
                if s.phys.creation_txg <= old_txg {
                    return Err(DslError::Invalid(format!(
                        "'{old}' is not an earlier snapshot of '{name}'"
                    )));
                }
                let after: Vec<&Deadlist> = d.snaps[..=i]
                    .iter()
                    .filter(|x| x.phys.creation_txg > old_txg)
                    .map(|x| &x.deadlist)
                    .collect();
                (s.phys.referenced_bytes, after)
            }
            None => {
                let mut after: Vec<&Deadlist> = d
                    .snaps
                    .iter()
                    .filter(|x| x.phys.creation_txg > old_txg)
                    .map(|x| &x.deadlist)
                    .collect();
                after.push(&d.deadlist);
                (d.ds.referenced_bytes, after)
            }
        };
        // Blocks of the old snapshot freed since sit on the later dead
        // lists with a birth at or before it.
        let killed: u64 = lists.iter().map(|dl| dl.range(0, old_txg).dsize).sum();
        Ok((new_ref + killed).saturating_sub(old_ref))
    }

    /// `zfs rollback DS@SNAP` to the newest snapshot (the caller destroyed
    /// any later ones, and suspended the mounted filesystem): the dataset
    /// is as the snapshot has it, in one txg. Its object set and intent
    /// log are new objects afterwards ([`Pool::dataset_objset`]).
    pub fn rollback(&self, name: &str) -> Result<u64, DslError> {
        let inner = self.inner();
        let (head, i) = inner.snap_index(name)?;
        if i + 1 != inner.datasets.read()[&head].snaps.len() {
            return Err(DslError::Invalid(format!(
                "'{name}' is not the most recent snapshot"
            )));
        }
        // What the dataset had in memory reaches the disk first, so that
        // the walk below sees every block written since the snapshot.
        self.sync()?;
        let (txg, freed) = {
            let hold = inner.txg.hold()?;
            let _sync = inner.sync_lock.lock();
            let freed = inner.rollback_locked(&head, hold.txg)?;
            (hold.txg, freed)
        };
        inner.txg.wait_synced(txg)?;
        Ok(freed.dsize)
    }

    /// Space waiting in the free queue (the pool property `freeing`).
    pub fn freeing(&self) -> u64 {
        self.inner().free_queue.lock().pending().dsize
    }
}

impl Inner {
    /// Rolls head `head` back to its newest snapshot in the held `txg`
    /// (the caller holds `sync_lock`): the blocks written since go to the
    /// free queue, the head's dead list (the snapshot's blocks it had
    /// freed, which the snapshot still holds) is dropped, and the head
    /// gets a fresh object set at the snapshot's root with an empty intent
    /// log. Returns the space released.
    fn rollback_locked(&self, head: &str, txg: u64) -> Result<Space, DslError> {
        let mos = &self.mos;
        let (objset, snap) = {
            let map = self.datasets.read();
            let d = &map[head];
            let s = d
                .snaps
                .last()
                .ok_or_else(|| DslError::Invalid("the dataset has no snapshot".into()))?;
            (d.objset.clone(), s.phys)
        };
        if objset.is_dirty() {
            return Err(DslError::Busy(
                "dataset is busy (it changed during the rollback)".into(),
            ));
        }
        // Every block written since the snapshot.
        let freed = self.free_born_after(&objset, snap.creation_txg)?;
        let (new_os, acct) = self.open_objset(&snap.bp)?;
        // The snapshot's header may name the log chain the head had then.
        let empty = tarn_format::zil::ZilHeader::default().encode();
        if new_os.zil_header() != empty {
            new_os.set_zil_header(empty);
        }
        let zil = tarn_zil::Zilog::create(self.spa.clone(), self.txg.clone(), new_os.clone());
        let hook = SnapHook::install(&new_os, &acct, snap.creation_txg);
        let ds_obj = {
            let mut map = self.datasets.write();
            let d = map.get_mut(head).expect("found above");
            d.zil.destroy(txg);
            let old = std::mem::take(&mut d.deadlist);
            if old.obj != 0 {
                old.discard(mos)?;
            }
            d.ds.deadlist_obj = 0;
            d.ds.bp = snap.bp;
            d.ds.referenced_bytes = snap.referenced_bytes;
            d.ds.compressed_bytes = snap.compressed_bytes;
            d.ds.uncompressed_bytes = snap.uncompressed_bytes;
            d.objset = new_os.clone();
            d.acct = acct;
            d.zil = zil;
            d.hook = hook;
            mos.set_bonus(d.ds_obj, &d.ds.encode())?;
            d.ds_obj
        };
        self.report_read_errors(&new_os, ds_obj);
        self.apply_policy(head)?;
        self.charge_freed(head, freed)?;
        Ok(freed)
    }

    /// A clone (dataset object `clone`) of snapshot `origin` is gone: it
    /// leaves the origin's clone list, and an origin marked for deferred
    /// destruction with nothing else holding it goes now (the caller holds
    /// `sync_lock` and a hold of the open txg).
    pub(crate) fn unlink_clone(&self, origin: u64, clone: u64) -> Result<(), DslError> {
        let found = find_snap(&self.datasets.read(), origin).map(|(h, i)| (h.to_string(), i));
        let Some((head, i)) = found else {
            return Ok(());
        };
        let ext = self.datasets.read()[&head].snaps[i].phys.ext_obj;
        if let Some(obj) = ext_get(&self.mos, ext, DS_EXT_CLONES)? {
            mos::zap_remove(&self.mos, obj, &format!("{clone:x}"))?;
        }
        self.destroy_if_deferred(&head, i)
    }

    /// Destroys snapshot `i` of `head` if it is marked for deferred
    /// destruction and nothing holds it any more.
    pub(crate) fn destroy_if_deferred(&self, head: &str, i: usize) -> Result<(), DslError> {
        let map = self.datasets.read();
        let s = &map[head].snaps[i];
        let gone = s.phys.flags & DS_FLAG_DEFER_DESTROY != 0
            && self.clones_of(s)?.is_empty()
            && self.holds_of(s)?.is_empty();
        drop(map);
        if gone {
            self.destroy_snapshot_locked(head, i)?;
        }
        Ok(())
    }

    /// Marks a snapshot for destruction once its holds and clones are
    /// gone (`zfs destroy -d`).
    fn set_defer(&self, name: &str) -> Result<(), DslError> {
        let (head, i) = self.snap_index(name)?;
        let mut map = self.datasets.write();
        let s = &mut map.get_mut(&head).expect("found above").snaps[i];
        s.phys.flags |= DS_FLAG_DEFER_DESTROY;
        self.mos.set_bonus(s.obj, &s.phys.encode())?;
        Ok(())
    }
}

impl Inner {
    /// Queues every block of `objset` born after `txg` (its header too,
    /// whether or not the walk shows it) to be freed, in time proportional
    /// to them: what a rollback or a receive's swap drops of a head. The
    /// caller holds `sync_lock` and the open txg. Returns the space.
    pub(crate) fn free_born_after(&self, objset: &Objset, txg: u64) -> Result<Space, DslError> {
        let mut born: Vec<BlockPtr> = Vec::new();
        objset.walk_blocks_born_after(txg, &mut |bp| born.push(*bp))?;
        let root = objset.root_bp();
        if !root.is_hole() && root.birth > txg && !born.contains(&root) {
            born.push(root);
        }
        let mut freed = Space::default();
        let dead: Vec<Dead> = born
            .into_iter()
            .map(|bp| {
                let d = Dead {
                    bp,
                    dsize: self.spa.dsize(&bp),
                };
                freed += Space {
                    dsize: d.dsize,
                    psize: u64::from(bp.psize),
                    lsize: u64::from(bp.lsize),
                };
                d
            })
            .collect();
        let dsize = |bp: &BlockPtr| self.spa.dsize(bp);
        self.free_queue
            .lock()
            .enqueue_blocks(&self.mos, OBJECT_DIRECTORY, &dead, &dsize)?;
        Ok(freed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_goes_under_the_newest_snapshot_below_its_birth() {
        let txgs = [10, 20, 30];
        assert_eq!(key_for(&txgs, 5), 0);
        assert_eq!(key_for(&txgs, 10), 0);
        assert_eq!(key_for(&txgs, 11), 10);
        assert_eq!(key_for(&txgs, 20), 10);
        assert_eq!(key_for(&txgs, 25), 20);
        assert_eq!(key_for(&txgs, 31), 30);
        assert_eq!(key_for(&[], 7), 0);
    }

    #[test]
    fn names_split_at_the_at_sign() {
        assert_eq!(split("tank/a@s1"), Some(("tank/a", "s1")));
        assert_eq!(split("tank/a"), None);
    }
}
