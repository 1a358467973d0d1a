//! The imported pool: datasets, properties, space and the sync path.
//! See the crate comment for the MOS layout and the locking rules.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::props::{self, PropDef};
use parking_lot::{Mutex, RwLock};
use tarn_dmu::{BlockCache, Objset, WritePolicy};
use tarn_format::dsl::{DslDatasetPhys, DslDirPhys, DSL_DATASET_PHYS_SIZE};
use tarn_format::label::PoolState;
use tarn_format::objset::ObjsetType;
use tarn_format::{BlockPtr, ObjType};
use tarn_pool::{
    accounting, tunables, BlockStore, FailMode, NewTop, Spa, SyncTarget, TxgEngine, TXG_INITIAL,
};
use tarn_zil::Zilog;

use crate::acct::AcctStore;
use crate::deadlist::{Dead, Deadlist, FreeQueue};
use crate::mos::{self, MOS_BLOCK_SIZE};
use crate::scan::{ErrorSite, ScanProgress, ScanRun};
use crate::snapshot::{Snap, SnapHook};
use crate::DslError;

/// Object number of the MOS object directory.
pub(crate) const OBJECT_DIRECTORY: u64 = 1;
/// Pool history stops growing here (OpenZFS caps it at 1 % of the pool,
/// at most 1 GiB, and wraps; tarn keeps the first records whole).
const HISTORY_BYTES_MAX: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropSource {
    Local,
    /// Set by `zfs receive` from a stream (`prop$recvd` in the props ZAP);
    /// a local value overrides it.
    Received,
    Default,
    Inherited(String),
    /// Read-only statistics.
    None,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PropValue {
    /// The canonical stored form (sizes in bytes, ratios in hundredths).
    pub value: String,
    pub source: PropSource,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DatasetSpace {
    pub used: u64,
    pub avail: u64,
    pub referenced: u64,
    pub logicalused: u64,
    pub logicalreferenced: u64,
    pub compressratio_x100: u64,
    pub refcompressratio_x100: u64,
    pub usedbydataset: u64,
    pub usedbychildren: u64,
    pub usedbysnapshots: u64,
    pub usedbyrefreservation: u64,
    pub written: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolSpace {
    pub size: u64,
    pub alloc: u64,
    pub free: u64,
    pub frag: Option<u8>,
    pub cap: u8,
    pub dspace: u64,
    pub slop: u64,
    pub avail: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRecord {
    pub time: u64,
    pub text: String,
}

/// One dataset (its head) as loaded in memory, with its snapshots.
pub(crate) struct Ds {
    pub(crate) dir_obj: u64,
    pub(crate) ds_obj: u64,
    pub(crate) dir: DslDirPhys,
    pub(crate) ds: DslDatasetPhys,
    pub(crate) objset: Arc<Objset>,
    pub(crate) acct: Arc<AcctStore>,
    /// The dataset's intent log.
    pub(crate) zil: Arc<Zilog>,
    /// Blocks the head stopped referencing that a snapshot still holds.
    pub(crate) deadlist: Deadlist,
    /// The snapshots, oldest first.
    pub(crate) snaps: Vec<Snap>,
    /// Sends the blocks a sync frees to the dead list or the pool.
    pub(crate) hook: Arc<SnapHook>,
    /// `refreservation` and `reservation` as read at `Inner::props_gen`
    /// (see `Inner::reservation_props`).
    pub(crate) reservations: Mutex<Option<(u64, u64, u64)>>,
}

pub(crate) struct Inner {
    pub(crate) spa: Arc<Spa>,
    /// One bounded cache of clean blocks for the MOS and every dataset.
    pub(crate) cache: Arc<BlockCache>,
    pub(crate) txg: Arc<TxgEngine>,
    pub(crate) mos: Objset,
    pool_props_obj: u64,
    history_obj: u64,
    pub(crate) datasets: RwLock<BTreeMap<String, Ds>>,
    /// Bumped by every change of a dataset's properties: copies of them
    /// read before (`Ds::reservations`) are stale.
    pub(crate) props_gen: AtomicU64,
    pub(crate) sync_lock: Mutex<()>,
    /// The scrub: its state, thread and error log (see `scan`).
    pub(crate) scan: Mutex<ScanRun>,
    /// `tunables::SCAN_SLICE_MS`, lowered by tests so that a small pool's
    /// scrub takes many slices.
    pub(crate) scan_slice_ms: AtomicU64,
    /// Objects whose reads found no good copy of a block, since the last
    /// finished scrub (each dataset's object set reports them).
    pub(crate) read_errors: Arc<Mutex<BTreeSet<ErrorSite>>>,
    /// Blocks destroys released, freed a bounded number per txg.
    pub(crate) free_queue: Mutex<FreeQueue>,
}

/// An imported pool. Dropping it without `export` leaves the pool as a
/// crash would: the last committed txg is what the next import sees.
pub struct Pool {
    inner: Arc<Inner>,
}

impl Drop for Pool {
    /// A pool dropped without `export`/`close` stops like a crash: the sync
    /// thread halts and nothing more is written.
    fn drop(&mut self) {
        self.inner.shutdown_scan();
        self.inner.txg.halt();
    }
}

struct Syncer(Arc<Inner>);

impl SyncTarget for Syncer {
    fn quiesced(&self, txg: u64) {
        self.0.freeze_datasets(txg);
    }

    fn pressure(&self, pressure: tarn_pool::Pressure) {
        self.0.spa.throttle.set_pressure(pressure);
    }

    fn sync_txg(&self, txg: u64) -> Result<(), String> {
        let synced = self.0.sync_txg(txg).map_err(|e| e.to_string());
        // The commit's diagnosis may have failed a device a spare can
        // stand in for.
        self.0.activate_spares();
        synced
    }
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Suffix of a received value's key in a props ZAP (OpenZFS's `$recvd`).
pub(crate) const RECEIVED_SUFFIX: &str = "$recvd";

/// A user property (`com.example:backup`), as zfsprops(7) defines them.
fn is_user_prop(prop: &str) -> bool {
    prop.contains(':')
}

fn parent_name(name: &str) -> Option<&str> {
    name.rfind('/').map(|i| &name[..i])
}

fn leaf_name(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// Parents-before-children order: compare by path components.
fn tree_order(a: &str, b: &str) -> std::cmp::Ordering {
    a.split('/').cmp(b.split('/'))
}

impl Pool {
    /// Creates a pool on `tops` with its root dataset, and commits it.
    pub fn create(
        name: &str,
        tops: Vec<NewTop>,
        pool_props: &[(String, String)],
        root_props: &[(String, String)],
    ) -> Result<Arc<Pool>, DslError> {
        let spa = Arc::new(Spa::create(name, tops)?);
        let store: Arc<dyn BlockStore> = spa.clone();
        let cache = BlockCache::for_pool();
        let mos = Objset::create_in(store, ObjsetType::Mos, cache.clone());
        let objdir = mos::zap_create(&mos, ObjType::ObjectDirectory)?;
        assert_eq!(objdir, OBJECT_DIRECTORY, "object directory is object 1");
        let pool_props_obj = mos::zap_create(&mos, ObjType::Zap)?;
        mos::zap_set_u64(&mos, objdir, "pool_props", pool_props_obj)?;
        let history_obj = mos.object_create(ObjType::History, MOS_BLOCK_SIZE, 8)?;
        mos.set_bonus(history_obj, &0u64.to_le_bytes())?;
        mos::zap_set_u64(&mos, objdir, "history", history_obj)?;
        for (k, v) in pool_props {
            mos::zap_set_str(&mos, pool_props_obj, k, v)?;
        }
        let inner = Arc::new(Inner {
            txg: TxgEngine::new(TXG_INITIAL - 1),
            spa,
            cache,
            mos,
            pool_props_obj,
            history_obj,
            datasets: RwLock::new(BTreeMap::new()),
            props_gen: AtomicU64::new(0),
            sync_lock: Mutex::new(()),
            scan: Mutex::new(ScanRun::default()),
            scan_slice_ms: AtomicU64::new(tunables::SCAN_SLICE_MS),
            read_errors: Arc::default(),
            free_queue: Mutex::default(),
        });
        let root_dir = inner.create_dataset_objects(name, None, root_props, None)?;
        mos::zap_set_u64(&inner.mos, objdir, "root_dataset", root_dir)?;
        let pool = Pool::start(inner);
        pool.inner.txg.wait_synced(TXG_INITIAL)?;
        Ok(pool)
    }

    /// Opens an imported `Spa`: loads the MOS and every dataset.
    pub fn open(spa: Spa) -> Result<Arc<Pool>, DslError> {
        let spa = Arc::new(spa);
        let ub = spa.uberblock();
        let store: Arc<dyn BlockStore> = spa.clone();
        let cache = BlockCache::for_pool();
        let mos = Objset::open_in(store, &ub.rootbp, cache.clone())?;
        let get = |key: &str| {
            mos::zap_get_u64(&mos, OBJECT_DIRECTORY, key)?
                .ok_or_else(|| DslError::Corrupted(format!("MOS has no '{key}'")))
        };
        let pool_props_obj = get("pool_props")?;
        let history_obj = get("history")?;
        let root_dir = get("root_dataset")?;
        let name = spa.name();
        let free_queue = FreeQueue::load(&mos, OBJECT_DIRECTORY)?;
        let inner = Arc::new(Inner {
            txg: TxgEngine::new(ub.txg),
            spa,
            cache,
            mos,
            pool_props_obj,
            history_obj,
            datasets: RwLock::new(BTreeMap::new()),
            props_gen: AtomicU64::new(0),
            sync_lock: Mutex::new(()),
            scan: Mutex::new(ScanRun::default()),
            scan_slice_ms: AtomicU64::new(tunables::SCAN_SLICE_MS),
            read_errors: Arc::default(),
            free_queue: Mutex::new(free_queue),
        });
        inner.load_tree(&name, root_dir, 0)?;
        inner.load_scan()?;
        let pool = Pool::start(inner);
        pool.inner.resume_scan();
        pool.destroy_inconsistent()?;
        Ok(pool)
    }

    fn start(inner: Arc<Inner>) -> Arc<Pool> {
        let name = inner.spa.name();
        inner.txg.set_suspend_gate(inner.spa.suspend_gate().clone());
        let pool = Arc::new(Pool { inner });
        pool.apply_failmode();
        pool.inner
            .txg
            .start(Arc::new(Syncer(pool.inner.clone())), &name);
        pool
    }

    /// Hands the `failmode` property to the pool's suspension gate.
    fn apply_failmode(&self) {
        let value = self.pool_prop("failmode").map(|v| v.value);
        let mode = value
            .ok()
            .and_then(|v| FailMode::parse(&v))
            .unwrap_or_default();
        self.inner.spa.set_failmode(mode);
    }

    pub fn name(&self) -> String {
        self.inner.spa.name()
    }
    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }
    pub fn guid(&self) -> u64 {
        self.inner.spa.guid()
    }
    pub fn spa(&self) -> &Spa {
        &self.inner.spa
    }
    pub fn txg(&self) -> &Arc<TxgEngine> {
        &self.inner.txg
    }

    /// Commits everything dirty now and waits for it.
    pub fn sync(&self) -> Result<(), DslError> {
        Ok(self.inner.txg.wait_synced(0)?)
    }

    /// Syncs, marks the labels exported and stops the sync thread.
    pub fn export(&self) -> Result<(), DslError> {
        self.inner.shutdown_scan();
        self.inner.store_read_errors();
        self.inner.txg.shutdown()?;
        let txg = self.inner.spa.last_synced_txg();
        self.inner.spa.write_labels(PoolState::Exported, txg)?;
        Ok(())
    }

    /// Marks the labels destroyed and stops the sync thread. A suspended
    /// pool's pending txg is abandoned.
    pub fn destroy(&self) -> Result<(), DslError> {
        self.abandon_if_suspended();
        self.inner.shutdown_scan();
        let _ = self.inner.txg.shutdown();
        let txg = self.inner.spa.last_synced_txg();
        self.inner.spa.write_labels(PoolState::Destroyed, txg)?;
        Ok(())
    }

    /// Stops the sync thread after a final sync, leaving labels Active
    /// (daemon shutdown: the next start re-imports from the cache file).
    ///
    /// The pool is going away: a device that fails during this last sync
    /// must not hold the daemon forever, so the suspend gate is closed
    /// first (a suspension from now on abandons the txg at once).
    pub fn close(&self) -> Result<(), DslError> {
        self.inner.spa.suspend_gate().close();
        self.inner.shutdown_scan();
        self.inner.store_read_errors();
        Ok(self.inner.txg.shutdown()?)
    }

    /// A suspended pool cannot finish its txg: waiters give up, so that
    /// closing does not wait forever for a device (nothing acknowledged
    /// is lost: the txg never committed, the intent log keeps fsynced
    /// changes).
    fn abandon_if_suspended(&self) {
        if self.inner.spa.suspended().is_some() {
            self.inner.spa.suspend_gate().close();
        }
    }

    /// Renames the pool (import under a new name): labels and every
    /// dataset name follow.
    pub fn rename(&self, new_name: &str) -> Result<(), DslError> {
        let old = self.name();
        let mut map = self.inner.datasets.write();
        let renamed: BTreeMap<String, Ds> = std::mem::take(&mut *map)
            .into_iter()
            .map(|(k, v)| (format!("{new_name}{}", &k[old.len()..]), v))
            .collect();
        *map = renamed;
        drop(map);
        self.inner.spa.set_name(new_name);
        let txg = self.inner.spa.last_synced_txg();
        self.inner.spa.write_labels(PoolState::Active, txg)?;
        Ok(())
    }

    // ---- datasets ------------------------------------------------------------

    pub fn dataset_exists(&self, name: &str) -> bool {
        self.inner.datasets.read().contains_key(name)
    }

    /// Every dataset, parents before children, siblings sorted by name;
    /// not the hidden ones a receive works in (`fs/%recv`).
    pub fn datasets(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .inner
            .datasets
            .read()
            .keys()
            .filter(|k| !crate::names::is_hidden(k))
            .cloned()
            .collect();
        v.sort_by(|a, b| tree_order(a, b));
        v
    }

    /// Direct children of `name`, sorted (not hidden ones).
    pub fn dataset_children(&self, name: &str) -> Vec<String> {
        let mut v = self.dataset_children_all(name);
        v.retain(|k| !crate::names::is_hidden(k));
        v
    }

    /// Direct children of `name`, hidden ones included.
    pub fn dataset_children_all(&self, name: &str) -> Vec<String> {
        let prefix = format!("{name}/");
        let mut v: Vec<String> = self
            .inner
            .datasets
            .read()
            .keys()
            .filter(|k| k.starts_with(&prefix) && !k[prefix.len()..].contains('/'))
            .cloned()
            .collect();
        v.sort_by(|a, b| tree_order(a, b));
        v
    }

    pub fn dataset_create(&self, name: &str, props: &[(String, String)]) -> Result<(), DslError> {
        let parent = parent_name(name).ok_or_else(|| DslError::Exists(name.into()))?;
        let txg = {
            let hold = self.inner.txg.hold()?;
            let _sync = self.inner.sync_lock.lock();
            if self.dataset_exists(name) {
                return Err(DslError::Exists(name.into()));
            }
            let parent_dir = self
                .inner
                .with_ds(parent, |d| d.dir_obj)
                .map_err(|_| DslError::NoParent(parent.into()))?;
            self.inner
                .create_dataset_objects(name, Some(parent_dir), props, None)?;
            hold.txg
        };
        Ok(self.inner.txg.wait_synced(txg)?)
    }

    /// Destroys a dataset with no children, freeing everything it holds.
    pub fn dataset_destroy(&self, name: &str) -> Result<(), DslError> {
        if !self.dataset_exists(name) {
            return Err(DslError::NoSuchDataset(name.into()));
        }
        if parent_name(name).is_none() {
            return Err(DslError::Invalid(
                "cannot destroy the pool's root dataset".into(),
            ));
        }
        if !self.dataset_children_all(name).is_empty() || !self.snapshots(name).is_empty() {
            return Err(DslError::HasChildren(name.into()));
        }
        // Write out pending changes first so the object set is clean.
        self.sync()?;
        let txg = {
            let hold = self.inner.txg.hold()?;
            let _sync = self.inner.sync_lock.lock();
            self.inner.destroy_dataset_objects(name, hold.txg)?;
            hold.txg
        };
        Ok(self.inner.txg.wait_synced(txg)?)
    }

    /// Has every dataset's intent log start a new chain (a log device is
    /// leaving or failed, see `Zilog::reset`) and waits for the txg that
    /// makes the old chains' records durable; their blocks are free once
    /// it has committed.
    pub fn reset_logs(&self) -> Result<(), DslError> {
        let zils: Vec<Arc<Zilog>> = self
            .inner
            .datasets
            .read()
            .values()
            .map(|d| d.zil.clone())
            .collect();
        let mut txg = 0;
        for zil in zils {
            txg = txg.max(zil.reset()?.unwrap_or(0));
        }
        Ok(self.inner.txg.wait_synced(txg)?)
    }

    /// The intent log of a dataset (for the POSIX layer).
    pub fn dataset_zil(&self, name: &str) -> Result<Arc<Zilog>, DslError> {
        self.inner.with_ds(name, |d| d.zil.clone())
    }

    /// The object set of a dataset (for the POSIX layer).
    pub fn dataset_objset(&self, name: &str) -> Result<Arc<Objset>, DslError> {
        self.inner.with_ds(name, |d| d.objset.clone())
    }

    /// A property's value and source; works for read-only statistics too.
    pub fn dataset_prop(&self, name: &str, prop: &str) -> Result<PropValue, DslError> {
        if name.contains('@') {
            return self.snapshot_prop(name, prop);
        }
        if let Some((ds, bm)) = name.split_once('#') {
            let b = self
                .bookmarks(ds)?
                .into_iter()
                .find(|b| b.name == bm)
                .ok_or_else(|| DslError::NoSuchDataset(name.into()))?;
            let value = match props::dataset_prop(prop).map_or(prop, |d| d.name) {
                "type" => "bookmark".to_string(),
                "name" => name.to_string(),
                "guid" => b.guid.to_string(),
                "createtxg" => b.createtxg.to_string(),
                "creation" => b.creation.to_string(),
                _ => {
                    return Err(DslError::Invalid(format!(
                        "property '{prop}' does not apply to bookmarks"
                    )))
                }
            };
            return Ok(PropValue {
                value,
                source: PropSource::None,
            });
        }
        if let Some(snap) = prop.strip_prefix("written@") {
            return Ok(PropValue {
                value: self.written_since(name, snap)?.to_string(),
                source: PropSource::None,
            });
        }
        if is_user_prop(prop) {
            let v = self.inner.lookup_prop(name, prop, true, "-")?;
            let source = if v.value == "-" {
                PropSource::None
            } else {
                v.source
            };
            return Ok(PropValue { source, ..v });
        }
        let def = props::dataset_prop(prop)
            .ok_or_else(|| DslError::Invalid(format!("invalid property '{prop}'")))?;
        let volume = self.is_volume(name);
        check_applies(def.name, volume)?;
        if volume && matches!(def.name, "volsize" | "volblocksize") {
            let (size, bs) = self.volume_geometry(name)?;
            return Ok(if def.name == "volsize" {
                PropValue {
                    value: size.to_string(),
                    source: PropSource::Local,
                }
            } else {
                PropValue {
                    value: bs.to_string(),
                    source: if bs == tarn_format::zvol::ZVOL_BLOCK_DEFAULT {
                        PropSource::Default
                    } else {
                        PropSource::None
                    },
                }
            });
        }
        if def.readonly {
            return Ok(PropValue {
                value: self.stat(name, prop)?,
                source: PropSource::None,
            });
        }
        self.inner.settable_prop(name, def)
    }

    /// Whether `name` (a dataset, or a snapshot of one) is a volume.
    pub fn is_volume(&self, name: &str) -> bool {
        let head = name.split(['@', '#']).next().unwrap_or(name);
        self.inner
            .with_ds(head, |d| d.objset.objset_type() == ObjsetType::Zvol)
            .unwrap_or(false)
    }

    /// A volume's (or a volume snapshot's) size and block size, as its
    /// object set records them (`tarn_format::zvol`).
    pub fn volume_geometry(&self, name: &str) -> Result<(u64, u32), DslError> {
        use tarn_format::zvol::{ZVOL_OBJ, ZVOL_SIZE_KEY, ZVOL_ZAP_OBJ};
        let os = if name.contains('@') {
            self.snapshot_objset(name)?
        } else {
            self.dataset_objset(name)?
        };
        if os.objset_type() != ObjsetType::Zvol {
            return Err(DslError::Invalid(format!("'{name}' is not a volume")));
        }
        let size = os
            .zap_lookup(ZVOL_ZAP_OBJ, ZVOL_SIZE_KEY.as_bytes())?
            .as_single_u64()
            .ok_or_else(|| DslError::Corrupted(format!("volume size of '{name}'")))?;
        let bs = os.object_info(ZVOL_OBJ)?.block_size;
        Ok((size, bs))
    }

    /// User properties (`module:name`) set on `name` or inherited by it,
    /// sorted.
    pub fn dataset_user_props(&self, name: &str) -> Vec<String> {
        let mut out = std::collections::BTreeSet::new();
        let mut at = Some(name);
        while let Some(n) = at {
            if let Ok(obj) = self.inner.with_ds(n, |d| d.dir.props_obj) {
                for (k, _) in mos::zap_list(&self.inner.mos, obj).unwrap_or_default() {
                    let k = k.strip_suffix(RECEIVED_SUFFIX).unwrap_or(&k);
                    if is_user_prop(k) {
                        out.insert(k.to_string());
                    }
                }
            }
            at = parent_name(n);
        }
        out.into_iter().collect()
    }

    /// Sets a property to an already-canonical value.
    pub fn dataset_set(&self, name: &str, prop: &str, value: &str) -> Result<(), DslError> {
        if is_user_prop(prop) {
            return self.change_props(name, |inner, props_obj| {
                mos::zap_set_str(&inner.mos, props_obj, prop, value)
            });
        }
        let def = props::dataset_prop(prop)
            .ok_or_else(|| DslError::Invalid(format!("invalid property '{prop}'")))?;
        if def.readonly {
            return Err(DslError::Invalid(format!("'{prop}' is readonly")));
        }
        if def.create_only {
            return Err(DslError::Invalid(format!(
                "'{prop}' can only be set at creation time"
            )));
        }
        check_applies(def.name, self.is_volume(name))?;
        if def.name == "volsize" {
            return Err(DslError::Invalid(
                "a volume's size is changed by resizing the volume".into(),
            ));
        }
        self.change_props(name, |inner, props_obj| {
            mos::zap_set_str(&inner.mos, props_obj, prop, value)
        })
    }

    /// The values `name` received from streams (`prop$recvd` keys), which
    /// `zfs send -b` sends whether or not local values override them.
    pub fn dataset_received_props(&self, name: &str) -> Vec<(String, String)> {
        let Ok(obj) = self.inner.with_ds(name, |d| d.dir.props_obj) else {
            return Vec::new();
        };
        let mut out: Vec<(String, String)> = mos::zap_list(&self.inner.mos, obj)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, _)| {
                let prop = k.strip_suffix(RECEIVED_SUFFIX)?.to_string();
                let v = mos::zap_get_str(&self.inner.mos, obj, &k).ok()??;
                Some((prop, v))
            })
            .collect();
        out.sort();
        out
    }

    /// Sets a property as received from a stream (source `received`): a
    /// local value overrides it, `zfs inherit` leaves it. The value is
    /// checked as `zfs set` checks one; create-time properties are taken
    /// only while the dataset is being received.
    pub fn dataset_set_received(
        &self,
        name: &str,
        prop: &str,
        value: &str,
    ) -> Result<(), DslError> {
        let value = if is_user_prop(prop) {
            value.to_string()
        } else {
            let def = props::dataset_prop(prop)
                .ok_or_else(|| DslError::Invalid(format!("invalid property '{prop}'")))?;
            if def.readonly {
                return Err(DslError::Invalid(format!("'{prop}' is readonly")));
            }
            props::parse_value(def, value).map_err(|e| DslError::Invalid(e.to_string()))?
        };
        let key = format!("{prop}{RECEIVED_SUFFIX}");
        self.change_props(name, |inner, props_obj| {
            mos::zap_set_str(&inner.mos, props_obj, &key, &value)
        })
    }

    /// Removes a local setting, so the value is inherited (or the default).
    pub fn dataset_inherit(&self, name: &str, prop: &str) -> Result<(), DslError> {
        let readonly = if is_user_prop(prop) {
            false
        } else {
            props::dataset_prop(prop)
                .ok_or_else(|| DslError::Invalid(format!("invalid property '{prop}'")))?
                .readonly
        };
        if readonly {
            return Err(DslError::Invalid(format!("'{prop}' property is read-only")));
        }
        self.change_props(name, |inner, props_obj| {
            mos::zap_remove(&inner.mos, props_obj, prop).map(|_| ())
        })
    }

    fn change_props(
        &self,
        name: &str,
        f: impl FnOnce(&Inner, u64) -> Result<(), DslError>,
    ) -> Result<(), DslError> {
        let txg = {
            let hold = self.inner.txg.hold()?;
            let _sync = self.inner.sync_lock.lock();
            let props_obj = self.inner.with_ds(name, |d| d.dir.props_obj)?;
            let changed = f(&self.inner, props_obj);
            // Copies of properties read before now are stale.
            self.inner.props_gen.fetch_add(1, Ordering::AcqRel);
            changed?;
            hold.txg
        };
        // Write policies of this dataset and its descendants may change.
        let prefix = format!("{name}/");
        for ds in self.datasets() {
            if ds == name || ds.starts_with(&prefix) {
                self.inner.apply_policy(&ds)?;
            }
        }
        Ok(self.inner.txg.wait_synced(txg)?)
    }

    pub fn dataset_space(&self, name: &str) -> Result<DatasetSpace, DslError> {
        let pool_avail = self.pool_space().avail;
        let map = self.inner.datasets.read();
        let ds = map
            .get(name)
            .ok_or_else(|| DslError::NoSuchDataset(name.into()))?;
        let used = |n: &str| self.inner.used_locked(&map, n);
        let quota = |n: &str| self.inner.size_prop(n, "quota").unwrap_or(0);
        let referenced = ds.ds.referenced_bytes;
        let refres = self.inner.size_prop(name, "refreservation").unwrap_or(0);
        let usedbyrefreservation = refres.saturating_sub(referenced);
        let children: u64 = self
            .dataset_children_locked(&map, name)
            .iter()
            .map(|c| used(c))
            .sum();
        let own_used = used(name);
        // Quotas of this dataset and every ancestor bound what it may use.
        let mut avail = pool_avail;
        let mut at = Some(name);
        while let Some(n) = at {
            let q = quota(n);
            if q > 0 {
                avail = avail.min(q.saturating_sub(used(n)));
            }
            at = parent_name(n);
        }
        let refquota = self.inner.size_prop(name, "refquota").unwrap_or(0);
        if refquota > 0 {
            avail = avail.min(refquota.saturating_sub(referenced));
        }
        let ratio = |l: u64, p: u64| (l * 100).checked_div(p).map_or(100, |r| r.max(100));
        let snapused = crate::snapshot::snapused(&map, name).dsize;
        // Written since the newest snapshot (or the origin): what the head
        // references beyond it, plus what it freed of it.
        let prev_ref = match ds.snaps.last() {
            Some(s) => Some(s.phys.referenced_bytes),
            None if ds.dir.origin_obj != 0 => crate::snapshot::find_snap(&map, ds.dir.origin_obj)
                .map(|(h, i)| map[h].snaps[i].phys.referenced_bytes),
            None => None,
        };
        let written = match prev_ref {
            Some(p) => (referenced + ds.deadlist.total().dsize).saturating_sub(p),
            None => referenced,
        };
        Ok(DatasetSpace {
            used: own_used,
            avail,
            referenced,
            logicalused: ds.dir.uncompressed_bytes,
            logicalreferenced: ds.ds.uncompressed_bytes,
            compressratio_x100: ratio(ds.dir.uncompressed_bytes, ds.dir.compressed_bytes),
            refcompressratio_x100: ratio(ds.ds.uncompressed_bytes, ds.ds.compressed_bytes),
            usedbydataset: crate::snapshot::usedbydataset(&map, name),
            usedbychildren: children,
            usedbysnapshots: snapused,
            usedbyrefreservation,
            written,
        })
    }

    fn dataset_children_locked(&self, map: &BTreeMap<String, Ds>, name: &str) -> Vec<String> {
        let prefix = format!("{name}/");
        map.keys()
            .filter(|k| k.starts_with(&prefix) && !k[prefix.len()..].contains('/'))
            .cloned()
            .collect()
    }

    /// Read-only dataset statistics in canonical form.
    fn stat(&self, name: &str, prop: &str) -> Result<String, DslError> {
        let (ds, dir, ds_obj) = self.inner.with_ds(name, |d| (d.ds, d.dir, d.ds_obj))?;
        let space = self.dataset_space(name)?;
        Ok(match prop {
            "type" => if self.is_volume(name) {
                "volume"
            } else {
                "filesystem"
            }
            .into(),
            "name" => name.into(),
            "creation" => ds.creation_time.to_string(),
            "createtxg" => ds.creation_txg.to_string(),
            "guid" => ds.guid.to_string(),
            // OpenZFS's objsetid: the dataset's object in the MOS.
            "objsetid" => ds_obj.to_string(),
            "receive_resume_token" => self
                .receive_resume_state(name)
                .map_or_else(|| "-".to_string(), |s| crate::send::resume_token(&s)),
            "used" => space.used.to_string(),
            "available" => space.avail.to_string(),
            "referenced" => space.referenced.to_string(),
            "logicalused" => space.logicalused.to_string(),
            "logicalreferenced" => space.logicalreferenced.to_string(),
            "compressratio" => space.compressratio_x100.to_string(),
            "refcompressratio" => space.refcompressratio_x100.to_string(),
            "usedbydataset" => space.usedbydataset.to_string(),
            "usedbychildren" => space.usedbychildren.to_string(),
            "usedbysnapshots" => space.usedbysnapshots.to_string(),
            "usedbyrefreservation" => space.usedbyrefreservation.to_string(),
            "written" => space.written.to_string(),
            "mounted" => "no".into(),
            "origin" => self.origin(name).unwrap_or_else(|| "-".into()),
            "compressed" => dir.compressed_bytes.to_string(),
            "version" => "5".into(),
            _ => "-".into(),
        })
    }

    // ---- pool properties and space --------------------------------------------

    pub fn pool_space(&self) -> PoolSpace {
        let spa = &self.inner.spa;
        let (size, alloc) = spa.raw_space();
        let rules = accounting::pool_space(&spa.top_specs());
        let used = spa.allocated_deflated();
        let reserved = self.inner.unused_reservations();
        PoolSpace {
            size,
            alloc,
            free: size.saturating_sub(alloc),
            frag: accounting::fragmentation(&spa.free_histogram()),
            cap: (alloc * 100).checked_div(size).unwrap_or(0) as u8,
            dspace: rules.dspace,
            slop: rules.slop,
            avail: accounting::avail(&rules, used).saturating_sub(reserved),
        }
    }

    pub fn pool_prop(&self, prop: &str) -> Result<PropValue, DslError> {
        if let Some(feature) = prop.strip_prefix("feature@") {
            return self.feature_prop(feature);
        }
        let def = props::pool_prop(prop)
            .ok_or_else(|| DslError::Invalid(format!("invalid property '{prop}'")))?;
        let space = self.pool_space();
        let stat = |v: String| {
            Ok(PropValue {
                value: v,
                source: PropSource::None,
            })
        };
        match prop {
            "name" => return stat(self.name()),
            "size" => return stat(space.size.to_string()),
            "allocated" => return stat(space.alloc.to_string()),
            "free" => return stat(space.free.to_string()),
            "capacity" => return stat(space.cap.to_string()),
            "fragmentation" => return stat(space.frag.unwrap_or(0).to_string()),
            "health" => return stat("ONLINE".into()),
            "guid" | "load_guid" => return stat(self.guid().to_string()),
            "dedupratio" => return stat("100".into()),
            "freeing" => return stat(self.freeing().to_string()),
            "leaked" => return stat("0".into()),
            _ => {}
        }
        if def.readonly {
            return stat("-".into());
        }
        match mos::zap_get_str(&self.inner.mos, self.inner.pool_props_obj, prop)? {
            Some(v) => Ok(PropValue {
                value: v,
                source: PropSource::Local,
            }),
            None => Ok(PropValue {
                value: def.default.to_string(),
                source: PropSource::Default,
            }),
        }
    }

    /// `feature@NAME`: what scripts written for OpenZFS probe before they
    /// choose flags (`zfs send -L`, `-c`, resumable receives). The
    /// features tarn has in substance are `enabled`, or `active` while the
    /// pool uses them; the others `disabled`.
    fn feature_prop(&self, feature: &str) -> Result<PropValue, DslError> {
        let snapshots_active = self.inner.spa.features() & tarn_format::FEATURE_SNAPSHOTS != 0;
        let value = match feature {
            "async_destroy" | "empty_bpobj" | "lz4_compress" | "extensible_dataset" => "active",
            "bookmarks" | "bookmark_v2" if snapshots_active => "active",
            "bookmarks" | "bookmark_v2" | "large_blocks" | "embedded_data" | "zstd_compress"
            | "spacemap_histogram" | "enabled_txg" | "filesystem_limits" | "device_removal" => {
                "enabled"
            }
            "hole_birth"
            | "encryption"
            | "userobj_accounting"
            | "project_quota"
            | "edonr"
            | "skein"
            | "sha512"
            | "allocation_classes"
            | "resilver_defer"
            | "redaction_bookmarks"
            | "redacted_datasets"
            | "draid"
            | "head_errlog"
            | "blake3"
            | "block_cloning"
            | "vdev_zaps_v2"
            | "raidz_expansion"
            | "fast_dedup"
            | "longname"
            | "large_microzap"
            | "spacemap_v2"
            | "log_spacemap"
            | "livelist"
            | "device_rebuild"
            | "zilsaxattr"
            | "multi_vdev_crash_dump"
            | "obsolete_counts"
            | "zpool_checkpoint" => "disabled",
            _ => {
                return Err(DslError::Invalid(format!(
                    "invalid property 'feature@{feature}'"
                )))
            }
        };
        Ok(PropValue {
            value: value.to_string(),
            source: PropSource::Local,
        })
    }

    pub fn pool_set(&self, prop: &str, value: &str) -> Result<(), DslError> {
        let def = props::pool_prop(prop)
            .ok_or_else(|| DslError::Invalid(format!("invalid property '{prop}'")))?;
        if def.readonly || def.create_only {
            return Err(DslError::Invalid(format!(
                "property '{prop}' can only be set at creation time"
            )));
        }
        let txg = {
            let hold = self.inner.txg.hold()?;
            let _sync = self.inner.sync_lock.lock();
            mos::zap_set_str(&self.inner.mos, self.inner.pool_props_obj, prop, value)?;
            hold.txg
        };
        if prop == "failmode" {
            self.apply_failmode();
        }
        Ok(self.inner.txg.wait_synced(txg)?)
    }

    // ---- scrub ----------------------------------------------------------------------

    /// `zpool scrub`: starts a scrub, or resumes a paused one.
    pub fn scrub_start(&self) -> Result<(), DslError> {
        self.inner.scrub_start()
    }

    /// Starts resilvering leaf `guid` (after `Spa::attach`); with
    /// `replaces`, that leaf is detached once the resilver is done
    /// (`zpool replace`).
    pub fn resilver_start(&self, guid: u64, replaces: Option<u64>) -> Result<(), DslError> {
        self.inner.resilver_start(guid, replaces)
    }

    /// Starts a resilver when a usable device missed txgs (`zpool clear`
    /// brought one back); returns whether one started.
    pub fn resilver_if_needed(&self) -> bool {
        self.inner.resilver_if_needed()
    }

    /// `zpool online -e`: grows the vdev of leaf `guid` to what its devices
    /// offer now; returns the old and new size when it grew (committed).
    pub fn expand(&self, guid: u64) -> Result<Option<(u64, u64)>, DslError> {
        let grew = self.inner.spa.expand(guid)?;
        if grew.is_some() {
            self.inner.txg.wait_synced(0)?;
        }
        Ok(grew)
    }

    /// `zpool scrub -p`.
    pub fn scrub_pause(&self) -> Result<(), DslError> {
        self.inner.scrub_stop(false)
    }

    /// `zpool scrub -s`.
    pub fn scrub_cancel(&self) -> Result<(), DslError> {
        self.inner.scrub_stop(true)
    }

    /// Sets the length of a scan slice (tests: many slices on a small
    /// pool, so that pausing and resuming happen mid-walk).
    pub fn set_scan_slice(&self, slice: std::time::Duration) {
        let ms = u64::try_from(slice.as_millis()).unwrap_or(u64::MAX);
        self.inner.scan_slice_ms.store(ms, Ordering::Relaxed);
    }

    /// The last or current scrub.
    pub fn scan_progress(&self) -> ScanProgress {
        self.inner.scan_progress()
    }

    /// Permanent errors: for each, the dataset's name (`None` for pool
    /// metadata or a dataset since destroyed) and the object.
    pub fn permanent_errors(&self) -> Vec<(Option<String>, u64)> {
        let by_obj: BTreeMap<u64, String> = self
            .inner
            .datasets
            .read()
            .iter()
            .map(|(name, ds)| (ds.ds_obj, name.clone()))
            .collect();
        self.inner
            .error_sites()
            .into_iter()
            .map(|(ds, obj)| (by_obj.get(&ds).cloned(), obj))
            .collect()
    }

    // ---- history ------------------------------------------------------------------

    /// Appends one record to the pool history (committed with the next txg).
    pub fn log_history(&self, line: &str) {
        let rec = format!("{}\t{}\n", now(), line.replace(['\n', '\t'], " "));
        let r: Result<(), DslError> = (|| {
            let _hold = self.inner.txg.hold()?;
            let _sync = self.inner.sync_lock.lock();
            let mos = &self.inner.mos;
            let obj = self.inner.history_obj;
            let len = history_len(&mos.bonus(obj)?);
            if len + rec.len() as u64 > HISTORY_BYTES_MAX {
                return Ok(());
            }
            mos.write(obj, len, rec.as_bytes())?;
            mos.set_bonus(obj, &(len + rec.len() as u64).to_le_bytes())?;
            Ok(())
        })();
        if let Err(e) = r {
            eprintln!("tarn: cannot log pool history: {e}");
        }
    }

    pub fn history(&self) -> Vec<HistoryRecord> {
        let mos = &self.inner.mos;
        let obj = self.inner.history_obj;
        let Ok(bonus) = mos.bonus(obj) else {
            return Vec::new();
        };
        let len = history_len(&bonus).min(HISTORY_BYTES_MAX);
        let mut buf = vec![0u8; len as usize];
        if mos.read(obj, 0, &mut buf).is_err() {
            return Vec::new();
        }
        String::from_utf8_lossy(&buf)
            .lines()
            .filter_map(|l| {
                let (t, text) = l.split_once('\t')?;
                Some(HistoryRecord {
                    time: t.parse().ok()?,
                    text: text.to_string(),
                })
            })
            .collect()
    }
}

fn history_len(bonus: &[u8]) -> u64 {
    bonus
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        .unwrap_or(0)
}

impl Inner {
    /// Runs `f` on dataset `name`. A recursive read: callers may already
    /// hold `datasets` (`dataset_space`), and a plain second read behind
    /// a queued writer (the sync thread) would wait forever.
    pub(crate) fn with_ds<T>(&self, name: &str, f: impl FnOnce(&Ds) -> T) -> Result<T, DslError> {
        self.datasets
            .read_recursive()
            .get(name)
            .map(f)
            .ok_or_else(|| DslError::NoSuchDataset(name.into()))
    }

    /// `autoexpand=on`: a vdev grows once all its devices are larger.
    pub(crate) fn autoexpand(&self) -> bool {
        matches!(
            mos::zap_get_str(&self.mos, self.pool_props_obj, "autoexpand"),
            Ok(Some(v)) if v == "on"
        )
    }

    /// Lists objects of dataset `ds_obj` whose reads fail for want of a
    /// good copy among the pool's permanent errors.
    pub(crate) fn report_read_errors(&self, objset: &Objset, ds_obj: u64) {
        let errors = self.read_errors.clone();
        objset.set_data_error_hook(Arc::new(move |obj| {
            errors.lock().insert((ds_obj, obj));
        }));
    }

    pub(crate) fn open_objset(
        &self,
        bp: &BlockPtr,
    ) -> Result<(Arc<Objset>, Arc<AcctStore>), DslError> {
        let spa: Arc<dyn BlockStore> = self.spa.clone();
        let acct = Arc::new(AcctStore::new(spa));
        let store: Arc<dyn BlockStore> = acct.clone();
        let os = if bp.is_hole() {
            Objset::create_in(store, ObjsetType::Filesystem, self.cache.clone())
        } else {
            Objset::open_in(store, bp, self.cache.clone())?
        };
        Ok((Arc::new(os), acct))
    }

    /// Creates the dir, dataset, child map and props objects of `name`
    /// in the open txg (the caller holds it and `sync_lock`). A clone
    /// names its `origin` snapshot (dataset object and record): it starts
    /// as the snapshot's copy, sharing every block.
    pub(crate) fn create_dataset_objects(
        &self,
        name: &str,
        parent_dir: Option<u64>,
        props: &[(String, String)],
        origin: Option<(u64, DslDatasetPhys)>,
    ) -> Result<u64, DslError> {
        let mos = &self.mos;
        let child_map_obj = mos::zap_create(mos, ObjType::DslChildMap)?;
        let props_obj = mos::zap_create(mos, ObjType::DslProps)?;
        for (k, v) in props {
            mos::zap_set_str(mos, props_obj, k, v)?;
        }
        let dir = DslDirPhys {
            creation_time: now(),
            parent_dir_obj: parent_dir.unwrap_or(0),
            child_map_obj,
            props_obj,
            origin_obj: origin.map_or(0, |(obj, _)| obj),
            ..Default::default()
        };
        let dir_obj = mos::record_create(mos, ObjType::DslDir, &dir.encode())?;
        let mut ds = DslDatasetPhys {
            dir_obj,
            creation_time: now(),
            creation_txg: self.txg.open_txg(),
            guid: tarn_pool::spa::new_guid(),
            ..Default::default()
        };
        if let Some((obj, snap)) = origin {
            ds.prev_snap_obj = obj;
            ds.prev_snap_txg = snap.creation_txg;
            ds.bp = snap.bp;
            ds.referenced_bytes = snap.referenced_bytes;
            ds.compressed_bytes = snap.compressed_bytes;
            ds.uncompressed_bytes = snap.uncompressed_bytes;
        }
        let ds_obj = mos::record_create(mos, ObjType::DslDataset, &ds.encode())?;
        let dir = DslDirPhys {
            head_dataset_obj: ds_obj,
            ..dir
        };
        mos.set_bonus(dir_obj, &dir.encode())?;
        if let Some(p) = parent_dir {
            let pmap = DslDirPhys::decode(&mos.bonus(p)?)?.child_map_obj;
            mos::zap_set_u64(mos, pmap, leaf_name(name), dir_obj)?;
        }
        let (objset, acct) = self.open_objset(&ds.bp)?;
        self.report_read_errors(&objset, ds_obj);
        // A clone must not inherit the origin's intent log chain.
        let empty = tarn_format::zil::ZilHeader::default().encode();
        if !ds.bp.is_hole() && objset.zil_header() != empty {
            objset.set_zil_header(empty);
        }
        let zil = Zilog::create(self.spa.clone(), self.txg.clone(), objset.clone());
        let hook = SnapHook::install(&objset, &acct, ds.prev_snap_txg);
        self.datasets.write().insert(
            name.to_string(),
            Ds {
                dir_obj,
                ds_obj,
                dir,
                ds,
                objset,
                acct,
                zil,
                deadlist: Deadlist::default(),
                snaps: Vec::new(),
                hook,
                reservations: Mutex::new(None),
            },
        );
        self.apply_policy(name)?;
        Ok(dir_obj)
    }

    /// Removes a head with no snapshots (the caller checked) and queues
    /// the blocks it alone holds to be freed: those born after its origin
    /// (a clone's older blocks are the origin's). The caller holds
    /// `sync_lock` and a hold of the open txg.
    fn destroy_dataset_objects(&self, name: &str, txg: u64) -> Result<(), DslError> {
        let ds = self
            .datasets
            .write()
            .remove(name)
            .ok_or_else(|| DslError::NoSuchDataset(name.into()))?;
        ds.zil.destroy(txg);
        let origin_txg = ds.ds.prev_snap_txg;
        let mut dead = Vec::new();
        ds.objset.walk_blocks(&mut |bp| {
            if bp.birth > origin_txg {
                dead.push(Dead {
                    bp: *bp,
                    dsize: self.spa.dsize(bp),
                })
            }
        })?;
        let root = ds.ds.bp;
        if !root.is_hole() && root.birth > origin_txg && !dead.iter().any(|d| d.bp == root) {
            dead.push(Dead {
                bp: root,
                dsize: self.spa.dsize(&root),
            });
        }
        let mos = &self.mos;
        let dsize = |bp: &BlockPtr| self.spa.dsize(bp);
        self.free_queue
            .lock()
            .enqueue_blocks(mos, OBJECT_DIRECTORY, &dead, &dsize)?;
        // A clone's dead list holds only the origin's blocks.
        if ds.deadlist.obj != 0 {
            ds.deadlist.discard(mos)?;
        }
        if ds.dir.origin_obj != 0 {
            self.unlink_clone(ds.dir.origin_obj, ds.ds_obj)?;
        }
        let parent = parent_name(name).expect("not the root");
        let pmap = self.with_ds(parent, |d| d.dir.child_map_obj)?;
        mos::zap_remove(mos, pmap, leaf_name(name))?;
        for obj in [
            ds.dir.child_map_obj,
            ds.dir.props_obj,
            ds.ds_obj,
            ds.dir_obj,
        ] {
            mos::object_free(mos, obj)?;
        }
        for obj in [ds.ds.snapnames_obj, ds.ds.ext_obj] {
            if obj != 0 {
                crate::snapshot::free_ext(mos, obj)?;
            }
        }
        // The ancestors no longer carry what this dataset held.
        self.charge_ancestors(
            parent,
            -(ds.dir.used_bytes as i64),
            -(ds.dir.compressed_bytes as i64),
            -(ds.dir.uncompressed_bytes as i64),
        )
    }

    fn load_tree(&self, name: &str, dir_obj: u64, depth: usize) -> Result<(), DslError> {
        if depth > 64 {
            return Err(DslError::Corrupted("dataset tree too deep".into()));
        }
        let dir = DslDirPhys::decode(&self.mos.bonus(dir_obj)?)?;
        let ds_obj = dir.head_dataset_obj;
        let ds = DslDatasetPhys::decode(&self.mos.bonus(ds_obj)?)?;
        let (objset, acct) = self.open_objset(&ds.bp)?;
        self.report_read_errors(&objset, ds_obj);
        // Claims the log's blocks before anything can allocate over them.
        let zil = Zilog::open(
            self.spa.clone(),
            self.txg.clone(),
            objset.clone(),
            self.txg.open_txg(),
            self.txg.last_synced(),
        )?;
        let deadlist = match ds.deadlist_obj {
            0 => Deadlist::default(),
            obj => Deadlist::load(&self.mos, obj)?,
        };
        let snaps = crate::snapshot::load_snaps(&self.mos, &ds)?;
        let hook = SnapHook::install(&objset, &acct, ds.prev_snap_txg);
        self.datasets.write().insert(
            name.to_string(),
            Ds {
                dir_obj,
                ds_obj,
                dir,
                ds,
                objset,
                acct,
                zil,
                deadlist,
                snaps,
                hook,
                reservations: Mutex::new(None),
            },
        );
        self.apply_policy(name)?;
        for (child, v) in mos::zap_list(&self.mos, dir.child_map_obj)? {
            let child_dir = v
                .as_single_u64()
                .ok_or_else(|| DslError::Corrupted("child map entry".into()))?;
            self.load_tree(&format!("{name}/{child}"), child_dir, depth + 1)?;
        }
        Ok(())
    }

    /// Value and source of a settable property, following inheritance.
    fn settable_prop(&self, name: &str, def: &PropDef) -> Result<PropValue, DslError> {
        self.lookup_prop(name, def.name, def.inherit, def.default)
    }

    /// The local value of `prop` on `name`, else (if `inherit`) the nearest
    /// ancestor's, else `default`.
    fn lookup_prop(
        &self,
        name: &str,
        prop: &str,
        inherit: bool,
        default: &str,
    ) -> Result<PropValue, DslError> {
        let received = format!("{prop}{RECEIVED_SUFFIX}");
        let local = |n: &str| -> Result<Option<String>, DslError> {
            let props_obj = self.with_ds(n, |d| d.dir.props_obj)?;
            match mos::zap_get_str(&self.mos, props_obj, prop)? {
                Some(v) => Ok(Some(v)),
                None => mos::zap_get_str(&self.mos, props_obj, &received),
            }
        };
        let props_obj = self.with_ds(name, |d| d.dir.props_obj)?;
        if let Some(v) = mos::zap_get_str(&self.mos, props_obj, prop)? {
            return Ok(PropValue {
                value: v,
                source: PropSource::Local,
            });
        }
        if let Some(v) = mos::zap_get_str(&self.mos, props_obj, &received)? {
            return Ok(PropValue {
                value: v,
                source: PropSource::Received,
            });
        }
        if inherit {
            let mut at = parent_name(name);
            while let Some(p) = at {
                if let Some(v) = local(p)? {
                    let value = if prop == "mountpoint" {
                        props::inherited_mountpoint(&v, p, name)
                    } else {
                        v
                    };
                    return Ok(PropValue {
                        value,
                        source: PropSource::Inherited(p.to_string()),
                    });
                }
                at = parent_name(p);
            }
        }
        let value = if prop == "mountpoint" {
            props::inherited_mountpoint(default, "", name)
        } else {
            default.to_string()
        };
        Ok(PropValue {
            value,
            source: PropSource::Default,
        })
    }

    fn size_prop(&self, name: &str, prop: &str) -> Option<u64> {
        let def = props::dataset_prop(prop)?;
        self.settable_prop(name, def).ok()?.value.parse().ok()
    }

    /// Sets the object set's write policy from the dataset's properties.
    pub(crate) fn apply_policy(&self, name: &str) -> Result<(), DslError> {
        let get = |p: &str| -> Result<String, DslError> {
            let def = props::dataset_prop(p).expect("known property");
            Ok(self.settable_prop(name, def)?.value)
        };
        let policy = WritePolicy {
            checksum: props::checksum_from_prop(&get("checksum")?),
            compression: props::compression_from_prop(&get("compression")?),
            copies: get("copies")?.parse().unwrap_or(1),
        };
        self.with_ds(name, |d| d.objset.set_write_policy(policy))
    }

    /// USED of a dataset: what it references, its unused refreservation and
    /// its children, and at least its reservation.
    fn used_locked(&self, map: &BTreeMap<String, Ds>, name: &str) -> u64 {
        let Some(ds) = map.get(name) else {
            return 0;
        };
        let (refres, res) = self.reservations_of(ds, name);
        let referenced = ds.ds.referenced_bytes;
        let own = crate::snapshot::usedbydataset(map, name)
            + refres.saturating_sub(referenced)
            + crate::snapshot::snapused(map, name).dsize;
        // The descendants sort right after `name/` in the map.
        let prefix = format!("{name}/");
        let children: u64 = map
            .range::<str, _>((
                std::ops::Bound::Excluded(prefix.as_str()),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(k, _)| !k[prefix.len()..].contains('/'))
            .map(|(c, _)| self.used_locked(map, c))
            .sum();
        (own + children).max(res)
    }

    /// Space promised by reservations but not yet written: it is not
    /// available to anyone else.
    fn unused_reservations(&self) -> u64 {
        // Copied out first: `size_prop` takes `datasets` again, and a
        // second read lock behind a queued writer (the sync thread) would
        // wait forever (the lock is fair).
        let sizes: Vec<(String, u64, u64)> = self
            .datasets
            .read()
            .iter()
            .map(|(name, ds)| (name.clone(), ds.ds.referenced_bytes, ds.dir.used_bytes))
            .collect();
        sizes
            .iter()
            .map(|(name, referenced, used)| {
                let (refres, res) = self.reservation_props(name);
                let by_ref = refres.saturating_sub(*referenced);
                let actual = used + by_ref;
                by_ref + res.saturating_sub(actual)
            })
            .sum()
    }

    /// `refreservation` and `reservation` of `name`, from the dataset's
    /// copy when no property changed since it was read. Every space query
    /// (a mount's first write, `zfs list`, each new dataset's) sums them
    /// over all datasets, and reading them from the property ZAPs made
    /// creating the thousandth dataset cost a thousand times two lookups
    /// (docs/MEASUREMENTS.md, "DSL: reservations read once").
    fn reservation_props(&self, name: &str) -> (u64, u64) {
        // Recursive: a miss reads the properties through `with_ds`.
        let map = self.datasets.read_recursive();
        match map.get(name) {
            Some(ds) => self.reservations_of(ds, name),
            None => (0, 0),
        }
    }

    /// [`Inner::reservation_props`] of `ds` (named `name`), for a caller
    /// that holds the dataset map already.
    fn reservations_of(&self, ds: &Ds, name: &str) -> (u64, u64) {
        let generation = self.props_gen.load(Ordering::Acquire);
        if let Some((g, refres, res)) = *ds.reservations.lock() {
            if g == generation {
                return (refres, res);
            }
        }
        let refres = self.size_prop(name, "refreservation").unwrap_or(0);
        let res = self.size_prop(name, "reservation").unwrap_or(0);
        // Read after `generation` was: a change since makes it stale, and
        // the next query reads again.
        *ds.reservations.lock() = Some((generation, refres, res));
        (refres, res)
    }

    pub(crate) fn charge_ancestors(
        &self,
        mut name: &str,
        dsize: i64,
        psize: i64,
        lsize: i64,
    ) -> Result<(), DslError> {
        let add = |v: u64, d: i64| (v as i64).saturating_add(d).max(0) as u64;
        loop {
            let (obj, dir) = {
                let mut map = self.datasets.write();
                let ds = map
                    .get_mut(name)
                    .ok_or_else(|| DslError::NoSuchDataset(name.into()))?;
                ds.dir.used_bytes = add(ds.dir.used_bytes, dsize);
                ds.dir.compressed_bytes = add(ds.dir.compressed_bytes, psize);
                ds.dir.uncompressed_bytes = add(ds.dir.uncompressed_bytes, lsize);
                (ds.dir_obj, ds.dir)
            };
            self.mos.set_bonus(obj, &dir.encode())?;
            match parent_name(name) {
                Some(p) => name = p,
                None => return Ok(()),
            }
        }
    }

    /// Writes one txg: every dirty dataset, the MOS, then the uberblock.
    /// Freezes every dataset's changes of `txg` (see `TxgEngine`): the
    /// MOS is changed by the sync itself and frozen when it is written.
    fn freeze_datasets(&self, txg: u64) {
        let _sync = self.sync_lock.lock();
        let dss: Vec<(Arc<Objset>, Arc<Zilog>)> = self
            .datasets
            .read()
            .values()
            .map(|d| (d.objset.clone(), d.zil.clone()))
            .collect();
        for (os, zil) in dss {
            // The log moves its header forward first, so that the header
            // commits with the txg that makes the dropped records durable.
            zil.quiesced(txg);
            os.freeze_txg(txg);
        }
    }

    fn sync_txg(&self, txg: u64) -> Result<(), DslError> {
        let _sync = self.sync_lock.lock();
        let names: Vec<String> = self.datasets.read().keys().cloned().collect();
        for name in names {
            self.sync_dataset(&name, txg)?;
        }
        self.process_free_queue(txg)?;
        let root = self.mos.sync(txg)?;
        self.spa.commit(txg, root)?;
        Ok(())
    }

    fn sync_dataset(&self, name: &str, txg: u64) -> Result<(), DslError> {
        let (objset, acct, hook, is_new) = self.with_ds(name, |d| {
            (
                d.objset.clone(),
                d.acct.clone(),
                d.hook.clone(),
                d.ds.bp.is_hole(),
            )
        })?;
        if !objset.is_dirty() && !is_new {
            return Ok(());
        }
        let bp = objset.sync(txg)?;
        let delta = acct.take();
        let killed = hook.take_killed();
        let (ds_obj, ds, kept) = {
            let mut map = self.datasets.write();
            let txgs = crate::snapshot::ancestry_txgs(&map, name);
            let origin = crate::snapshot::origin_txg(&map, name);
            let d = map.get_mut(name).expect("dataset present during sync");
            let add = |v: u64, x: i64| (v as i64).saturating_add(x).max(0) as u64;
            d.ds.bp = bp;
            d.ds.referenced_bytes = add(d.ds.referenced_bytes, delta.dsize);
            d.ds.compressed_bytes = add(d.ds.compressed_bytes, delta.psize);
            d.ds.uncompressed_bytes = add(d.ds.uncompressed_bytes, delta.lsize);
            // Blocks a snapshot holds go to the dead list; those born
            // after the origin stay charged to this dataset.
            let kept = crate::snapshot::add_to_deadlist(&self.mos, d, &txgs, origin, &killed)?;
            (d.ds_obj, d.ds, kept)
        };
        debug_assert_eq!(ds.encode().len(), DSL_DATASET_PHYS_SIZE);
        self.mos.set_bonus(ds_obj, &ds.encode())?;
        self.charge_ancestors(
            name,
            delta.dsize + kept.dsize as i64,
            delta.psize + kept.psize as i64,
            delta.lsize + kept.lsize as i64,
        )
    }

    /// Frees the next blocks of the free queue in `txg` (sync context) and
    /// asks for another txg soon while some are left.
    fn process_free_queue(&self, txg: u64) -> Result<(), DslError> {
        let mut queue = self.free_queue.lock();
        if queue.list.is_none() {
            return Ok(());
        }
        let dsize = |bp: &BlockPtr| self.spa.dsize(bp);
        queue.process(
            &self.mos,
            tunables::FREE_BLOCKS_PER_TXG,
            &dsize,
            &mut |bp| self.spa.free(txg, bp),
        )?;
        if queue.pending().dsize > 0 {
            self.txg.request_sync();
        }
        Ok(())
    }
}

/// zfs(8)'s refusal of a property that does not fit the dataset's type.
fn check_applies(prop: &str, volume: bool) -> Result<(), DslError> {
    let fits = if volume {
        props::applies_to_volume(prop)
    } else {
        props::applies_to_filesystem(prop)
    };
    if !fits {
        return Err(DslError::Invalid(format!(
            "property '{prop}' does not apply to datasets of this type"
        )));
    }
    Ok(())
}
