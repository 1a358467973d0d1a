//! The storage engine behind the daemon: imported pools and the zpool(8) /
//! zfs(8) verbs on them — the real [`Backend`].
//!
//! State: `pools` maps each imported pool's name to its [`tarn_dsl::Pool`];
//! `config` (a mutex) serialises every change to *which* pools are imported
//! — create, import, export, destroy, start-up, shutdown — together with the
//! cache file that records them, so two creates can never race for one
//! device and the cache file always matches the map. Dataset and property
//! verbs take only a read lock long enough to clone a pool's `Arc`; the pool
//! does its own locking (see tarn-dsl).
//!
//! The `mounts` module holds each mounted filesystem's `Zpl` and FUSE
//! mount. Everything that mounts or unmounts — the pool verbs above, `zfs
//! create`/`destroy`/`mount`/`unmount`, and a `zfs set`/`inherit` of a
//! property that moves or remounts filesystems — runs under `config`, so a
//! sequence such as "unmount the subtree, change the mountpoint, mount it
//! again" is never interleaved with another.
//!
//! **Lock order:** `config`, then the mount table, then `pools`. `pools`
//! is never held across pool I/O; the mount table is held across mount
//! system calls, and nothing FUSE serves takes it.
//!
//! Pool life cycle, as OpenZFS:
//! - create: every device vetted first (`tarn_dsl::devices`), nothing written on a
//!   refusal; then `Pool::create`, the cache file, the history record; the
//!   root dataset's filesystem is formatted and mounted (`zfs create`
//!   likewise for each dataset it creates);
//! - export/destroy: every filesystem of the pool unmounted first (a busy
//!   one refuses the whole operation unless forced); labels marked
//!   Exported/Destroyed, sync thread stopped, the pool leaves the map and
//!   the cache file; the devices are free again;
//! - import: find the pools on the devices (`tarn_dsl::import::discover`),
//!   pick the pool by name or guid, then `tarn_dsl::import::open` (refuses
//!   one whose labels say it is still Active unless forced, opens it, marks
//!   the labels Active); mount its filesystems, parents first (the pool
//!   stays imported when one cannot be mounted);
//! - daemon start-up: stale mounts of a dead daemon are detached; every
//!   cache-file pool is re-imported as if forced (this daemon owned it,
//!   and a crash left its labels Active) and its filesystems mounted; one
//!   that fails is logged and kept in the cache file, so a device that was
//!   late to appear does not make tarn forget its pool;
//! - daemon shutdown: every filesystem unmounted (busy ones after a grace
//!   period, lazily), every pool synced and closed with its labels left
//!   Active and its cache entry kept, so the next start re-imports it.
//!
//! - add/remove/detach (`zpool add`, `zpool remove` of a log, `zpool
//!   detach`): under `config`, devices vetted as for create; the pool's
//!   vdev set changes and a forced txg makes the change durable in every
//!   label (see `tarn_pool::vdevs`); the cache file follows, so a daemon
//!   restart re-imports the new layout.
//!
//! - zinject: faults on the leaves of imported pools, in memory only;
//!   export, destroy and detach drop the ones they make meaningless
//!   (`zinject`).
//!
//! Administrative commands are recorded in the pool history in zpool(8) /
//! zfs(8) syntax (`history`).

mod clones;
mod datasets;
mod devstates;
mod history;
mod iostat;
mod mounts;
mod replication;
mod scrub;
mod snapshots;
mod space;
mod tree;
mod zinject;
mod zvols;

pub use mounts::clean_stale_mounts;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tarn_dsl::devices;
use tarn_dsl::import::{self, Discovery, FoundPool, ImportOptions, Unmatched};
use tarn_dsl::{names, props};
use tarn_dsl::{DslError, Pool};
use tarn_format::label::{PoolState, VdevConfig};
use tarn_pool::{accounting, Spa};

use crate::api::{
    DatasetRow, DatasetType, ImportablePool, MountRow, PoolHistory, PoolListRow, PoolStatus,
    PropRow, ZfsCreate, ZfsDestroy, ZfsGet, ZfsInherit, ZfsList, ZfsMount, ZfsReceive, ZfsSend,
    ZfsSet, ZfsUnmount, ZpoolAdd, ZpoolCreate, ZpoolDestroy, ZpoolDetach, ZpoolExport, ZpoolGet,
    ZpoolHistory, ZpoolImport, ZpoolImportScan, ZpoolIostat, ZpoolList, ZpoolRemove, ZpoolScrub,
    ZpoolSet, ZpoolStatus,
};
use crate::api::{
    DestroyReport, DiffRow, HoldRow, ZfsBookmark, ZfsClone, ZfsDiff, ZfsHold, ZfsHolds, ZfsPromote,
    ZfsRename, ZfsRollback, ZfsSnapshot,
};
use crate::api::{InjectHandler, ZinjectAdd, ZinjectClear, ZinjectList};
use crate::api::{PoolIostat, ZpoolAttach};
use crate::api::{Zilstat, ZilstatRow, ZpoolClear, ZpoolOffline, ZpoolOnline, ZpoolSync};
use crate::backend::{Backend, BackendError};
use crate::cachefile::{read_cache_file, write_cache_file, CacheEntry};
use crate::output::DATASET_LIST_DEFAULT;
use mounts::{How, Mounts};
use tree::{LeafInfo, PoolTree};

/// The engine: imported pools, and the cache file that lists them.
pub struct Engine {
    cachefile: PathBuf,
    pools: RwLock<BTreeMap<String, Arc<Pool>>>,
    config: Mutex<Config>,
    mounts: Mounts,
    /// `tarn zinject` handlers (taken after `config`, never across I/O).
    faults: Mutex<tarn_vdev::inject::Registry>,
    /// Snapshots (and bookmarks) a `zfs send` is reading, with how many
    /// sends read each: they cannot be destroyed meanwhile (as OpenZFS's
    /// temporary holds keep them).
    sending: Mutex<BTreeMap<String, usize>>,
    /// Filesystems a `zfs receive` is writing: a second one is refused.
    receiving: Mutex<std::collections::BTreeSet<String>>,
    /// Volumes served over NBD (`zvols`).
    zvols: zvols::Zvols,
}

/// What the `config` lock guards besides the right to change `pools`.
#[derive(Default)]
struct Config {
    /// Cache entries that could not be re-imported at start-up.
    unimported: Vec<CacheEntry>,
}

impl From<DslError> for BackendError {
    fn from(e: DslError) -> Self {
        dsl_err(e)
    }
}

/// The missing ancestors of dataset `name`, created (parents first) when
/// `parents` (`-p`); without it a missing parent is zfs(8)'s error.
/// Returns the datasets created (not yet formatted or mounted).
pub(crate) fn create_parents(
    pool: &Pool,
    name: &str,
    parents: bool,
) -> Result<Vec<String>, BackendError> {
    let parent = names::parent(name).unwrap_or(names::pool_of(name));
    if pool.dataset_exists(parent) {
        return Ok(Vec::new());
    }
    if !parents {
        return Err(BackendError::NoParent(parent.to_string()));
    }
    let mut created = Vec::new();
    for (at, _) in name.match_indices('/').skip(1) {
        let ancestor = &name[..at];
        match pool.dataset_create(ancestor, &[]) {
            Ok(()) => created.push(ancestor.to_string()),
            Err(DslError::Exists(_)) => {}
            Err(e) => return Err(dsl_err(e)),
        }
    }
    Ok(created)
}

/// The `copies` property of `ds` (1 if unreadable).
fn copies_of(pool: &Pool, ds: &str) -> u8 {
    pool.dataset_prop(ds, "copies")
        .ok()
        .and_then(|v| v.value.parse().ok())
        .unwrap_or(1)
}

/// The size (rounded up to whole blocks) and block size of the volume
/// `zfs create -V` asks for.
fn volume_geometry(a: &ZfsCreate) -> Result<(u64, u32), BackendError> {
    let bad = |e: tarn_zvol::ZvolError| BackendError::Invalid(e.to_string());
    let bs = match a.props.iter().find(|(p, _)| p == "volblocksize") {
        Some((_, v)) => tarn_zvol::check_block_size(v.parse().unwrap_or(0)).map_err(bad)?,
        None => tarn_zvol::BLOCK_SIZE_DEFAULT,
    };
    let size: u64 = a
        .volsize
        .as_deref()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| BackendError::Invalid("missing volume size".into()))?;
    Ok((tarn_zvol::round_size(size, bs).map_err(bad)?, bs))
}

/// A dataset-layer error as the user should hear it.
pub(crate) fn dsl_err(e: DslError) -> BackendError {
    match e {
        DslError::NoSuchDataset(name) => BackendError::NoSuchDataset(name),
        DslError::Exists(name) => BackendError::DatasetExists(name),
        DslError::NoParent(name) => BackendError::NoParent(name),
        DslError::HasChildren(_) => BackendError::Busy("filesystem has children".into()),
        DslError::Invalid(why) => BackendError::Invalid(why),
        DslError::Busy(why) => BackendError::Busy(why),
        DslError::NoSpace => BackendError::NoSpace,
        DslError::Io(why) => BackendError::Io(format!("I/O error: {why}")),
        e @ DslError::CannotOpen(_) => BackendError::Io(e.to_string()),
        DslError::Corrupted(why) => {
            BackendError::Other(format!("pool metadata is corrupted: {why}"))
        }
    }
}

impl Engine {
    /// `mount_root` is put in front of every mountpoint (`TARN_MOUNT_ROOT`);
    /// every mount is recorded in `mounts_record` (`daemon::dying`).
    pub fn new(
        cachefile: PathBuf,
        mount_root: Option<PathBuf>,
        mounts_record: Option<PathBuf>,
        zvol_dir: Option<PathBuf>,
    ) -> Engine {
        Engine {
            cachefile,
            pools: RwLock::new(BTreeMap::new()),
            config: Mutex::new(Config::default()),
            mounts: Mounts::new(mount_root, mounts_record),
            faults: Mutex::default(),
            sending: Mutex::default(),
            receiving: Mutex::default(),
            zvols: zvols::Zvols::new(zvol_dir),
        }
    }

    /// Mounts the filesystems and serves the volumes among `names` that
    /// their properties say come up by themselves; the errors of those
    /// that could not.
    fn bring_up(&self, pool: &Arc<Pool>, names: &[String], how: How) -> Vec<BackendError> {
        let mut errors = self.mounts.mount_auto(pool, names, how);
        errors.extend(self.zvols.serve_auto(pool, names));
        errors
    }

    /// Unmounts the filesystems and stops serving the volumes among
    /// `names` (all or nothing for busy filesystems; a volume with
    /// clients connected is busy too unless `force`).
    fn take_down(
        &self,
        pool: &Pool,
        names: &[String],
        force: bool,
    ) -> Result<Vec<mounts::Detached>, BackendError> {
        if !force {
            if let Some(v) = names
                .iter()
                .find(|n| pool.is_volume(n) && self.zvols.connections(n) > 0)
            {
                return Err(BackendError::Busy(format!(
                    "volume '{v}' is in use: {} client(s) connected\nuse '-f' to disconnect them",
                    self.zvols.connections(v)
                )));
            }
        }
        let detached = self.mounts.detach(names, force)?;
        self.zvols.stop(names);
        Ok(detached)
    }

    fn pool(&self, name: &str) -> Result<Arc<Pool>, BackendError> {
        self.pools
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| BackendError::NoSuchPool(name.to_string()))
    }

    /// The named pools in order, or every pool (sorted) when none is named.
    fn pools_named(&self, names: &[String]) -> Result<Vec<Arc<Pool>>, BackendError> {
        if names.is_empty() {
            return Ok(self.pools.read().values().cloned().collect());
        }
        names.iter().map(|n| self.pool(n)).collect()
    }

    /// The pool holding dataset `name`; a missing pool is a missing dataset.
    fn dataset_pool(&self, name: &str) -> Result<Arc<Pool>, BackendError> {
        let pool = names::pool_of(name);
        self.pools
            .read()
            .get(pool)
            .cloned()
            .ok_or_else(|| BackendError::NoSuchDataset(name.to_string()))
    }

    fn is_imported(&self, guid: u64) -> bool {
        self.pools.read().values().any(|p| p.guid() == guid)
    }

    /// Rewrite the cache file from the map (the caller holds `config`). A
    /// failure is logged, not returned: the operation itself succeeded.
    fn save_cache(&self, config: &Config) {
        let mut entries: Vec<CacheEntry> = self
            .pools
            .read()
            .values()
            .map(|p| CacheEntry {
                name: p.name(),
                guid: p.guid(),
                paths: p
                    .spa()
                    .device_paths()
                    .iter()
                    .map(|d| d.to_string_lossy().into_owned())
                    .collect(),
            })
            .collect();
        let live: Vec<u64> = entries.iter().map(|e| e.guid).collect();
        entries.extend(
            config
                .unimported
                .iter()
                .filter(|e| !live.contains(&e.guid))
                .cloned(),
        );
        if let Err(e) = write_cache_file(&self.cachefile, &entries) {
            eprintln!(
                "tarn daemon: cannot write cache file {}: {e}",
                self.cachefile.display()
            );
        }
    }

    /// Record a command in the pool history and make it durable.
    fn log(&self, pool: &Pool, text: &str) {
        pool.log_history(text);
        if let Err(e) = pool.sync() {
            eprintln!("tarn daemon: cannot sync pool '{}': {e}", pool.name());
        }
    }
}

// ------------------------------------------------------------- zpool create

/// The `-o ashift=` of a create request (0: detect).
fn requested_ashift(props: &[(String, String)]) -> Result<u8, BackendError> {
    match props.iter().find(|(p, _)| p == "ashift") {
        None => Ok(0),
        Some((_, v)) => v
            .parse::<u8>()
            .ok()
            .filter(|a| *a == 0 || (9..=16).contains(a))
            .ok_or_else(|| BackendError::Invalid(format!("invalid ashift '{v}'"))),
    }
}

/// `-O` properties with `-m` folded in as the root's mountpoint.
fn root_props(a: &ZpoolCreate) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = a
        .fs_props
        .iter()
        .filter(|(p, _)| a.mountpoint.is_none() || p != "mountpoint")
        .cloned()
        .collect();
    if let Some(mp) = &a.mountpoint {
        out.push(("mountpoint".into(), mp.clone()));
    }
    out
}

impl Engine {
    fn create(&self, a: ZpoolCreate) -> Result<(), BackendError> {
        let config = self.config.lock();
        if self.pools.read().contains_key(&a.name) {
            return Err(BackendError::PoolExists(a.name));
        }
        for (prop, _) in &a.fs_props {
            datasets::check_create_value(prop, false)?;
        }
        let ashift = requested_ashift(&a.props)?;
        let opened = devices::open_all(&a.vdevs, a.force, &|g| self.is_imported(g))?;
        let (vdevs, opened, spares) = devices::split_spares(&a.vdevs, opened);
        let tops = devices::new_tops(&vdevs, opened, ashift)?;
        if a.dry_run {
            return Ok(());
        }
        let pool = Pool::create(&a.name, tops, &a.props, &root_props(&a)).map_err(dsl_err)?;
        if !spares.is_empty() {
            let added = pool.spa().add_spares(spares).map_err(spa_err);
            if let Err(e) = added.and_then(|_| pool.sync().map_err(dsl_err)) {
                let _ = pool.destroy();
                return Err(e);
            }
        }
        // A lost device suspends the pool until `zpool clear` (failmode).
        pool.spa().suspend_gate().enable();
        pool.spa().suspend_gate().enable_reads();
        self.log(&pool, &history::zpool_create(&a));
        self.pools.write().insert(a.name.clone(), pool.clone());
        self.save_cache(&config);
        mounts::format(&pool, &a.name)?;
        let root = [a.name.clone()];
        BackendError::combine(self.mounts.mount_auto(&pool, &root, How::default()))
    }

    /// Take a pool out of the map and the cache file and run `end` on it
    /// (export or destroy). Either stops the pool's sync thread even when it
    /// fails, so the pool leaves the map whatever the outcome.
    /// Its filesystems are unmounted first: a busy one (unless `force`)
    /// fails the whole operation with everything left as it was.
    fn release(
        &self,
        name: &str,
        force: bool,
        end: impl FnOnce(&Pool) -> Result<(), DslError>,
    ) -> Result<(), BackendError> {
        let config = self.config.lock();
        if !self.pools.read().contains_key(name) {
            return Err(BackendError::NoSuchPool(name.to_string()));
        }
        {
            let pools = self.pools.read();
            let busy = pools.get(name).and_then(|p| {
                p.datasets()
                    .into_iter()
                    .find(|d| p.is_volume(d) && self.zvols.connections(d) > 0)
            });
            if let (Some(v), false) = (busy, force) {
                return Err(BackendError::Busy(format!(
                    "volume '{v}' is in use\nuse '-f' to disconnect its clients"
                )));
            }
        }
        self.mounts.detach(&self.mounts.of_pool(name), force)?;
        self.zvols.stop_pool(name);
        let pool = self
            .pools
            .write()
            .remove(name)
            .ok_or_else(|| BackendError::NoSuchPool(name.to_string()))?;
        self.inject_forget(name, None);
        let result = end(&pool).map_err(dsl_err);
        self.save_cache(&config);
        // The pool's caches went with it: hand their memory back to the
        // system (the seeds rely on export emptying the ARC).
        drop(pool);
        crate::limits::return_free_memory();
        result
    }
}

// ----------------------------------------------- zpool add, remove, detach

/// A refused change of the vdev configuration, or a pool error.
fn spa_err(e: tarn_pool::SpaError) -> BackendError {
    dsl_err(devices::spa_err(e))
}

impl Engine {
    fn add(&self, a: ZpoolAdd) -> Result<(), BackendError> {
        let config = self.config.lock();
        let pool = self.pool(&a.name)?;
        if !a.force {
            let current = devices::current_groups(&pool.spa().configs());
            crate::vdevspec::check_add_replication(&current, &a.vdevs)
                .map_err(|e| BackendError::Message(e.to_string()))?;
        }
        let opened = devices::open_all(&a.vdevs, a.force, &|g| self.is_imported(g))?;
        let (vdevs, opened, spares) = devices::split_spares(&a.vdevs, opened);
        let tops = devices::new_tops(&vdevs, opened, 0)?;
        if a.dry_run {
            return Ok(());
        }
        if !spares.is_empty() {
            pool.spa().add_spares(spares).map_err(spa_err)?;
        }
        if !tops.is_empty() {
            pool.spa().add_tops(tops).map_err(spa_err)?;
        }
        self.commit_change(&config, &pool, &history::zpool_add(&a))
    }

    fn remove(&self, a: ZpoolRemove) -> Result<(), BackendError> {
        let config = self.config.lock();
        let pool = self.pool(&a.name)?;
        let history = format!("zpool remove {} {}", a.name, a.device);
        if let Some(spare) = devices::spare_named(&pool.spa().spares_status(), &a.device) {
            pool.spa().remove_spare(spare).map_err(spa_err)?;
            return self.commit_change(&config, &pool, &history);
        }
        let id = devices::removable_top(&pool.spa().configs(), &a.device)?;
        devices::drain_log(&pool, id)?;
        pool.spa().finish_log_removal(id).map_err(spa_err)?;
        self.commit_change(
            &config,
            &pool,
            &format!("zpool remove {} {}", a.name, a.device),
        )
    }

    /// `zpool attach` and `zpool replace`: the new device joins the vdev
    /// of `device` and is resilvered. A replace pairs it with `device`
    /// (a `replacing` vdev) until the resilver is done, then `device`
    /// leaves; naming one of the pool's hot spares as the new device puts
    /// that spare in (a `spare` vdev) instead.
    fn attach(&self, a: ZpoolAttach) -> Result<(), BackendError> {
        let config = self.config.lock();
        let pool = self.pool(&a.name)?;
        let existing = devices::leaf_named(&pool.spa().configs(), &a.device).ok_or_else(|| {
            BackendError::Invalid(format!("no such device in pool: {}", a.device))
        })?;
        let verb = if a.replace { "replace" } else { "attach" };
        let history = format!("zpool {verb} {} {} {}", a.name, a.device, a.new_device);
        let spare = a
            .replace
            .then(|| devices::spare_named(&pool.spa().spares_status(), &a.new_device))
            .flatten();
        if let Some(spare) = spare {
            pool.spa().use_spare(existing, spare).map_err(spa_err)?;
            self.commit_change(&config, &pool, &history)?;
            return pool.resilver_start(spare, None).map_err(dsl_err);
        }
        let group = crate::api::VdevGroup {
            kind: crate::api::VdevKind::Disk,
            devices: vec![a.new_device.clone()],
        };
        let mut opened = devices::open_all(&[group], a.force, &|g| self.is_imported(g))?;
        let new = opened.remove(0).remove(0);
        let is_block = new.dev.is_block_device();
        let guid = if a.replace {
            pool.spa()
                .replace(existing, &new.path, new.dev, is_block)
                .map_err(spa_err)?
        } else {
            pool.spa()
                .attach(existing, &new.path, new.dev, is_block)
                .map_err(spa_err)?
        };
        self.commit_change(&config, &pool, &history)?;
        pool.resilver_start(guid, None).map_err(dsl_err)
    }

    fn detach(&self, a: ZpoolDetach) -> Result<(), BackendError> {
        let config = self.config.lock();
        let pool = self.pool(&a.name)?;
        let guid = devices::detachable_leaf(&pool.spa().configs(), &a.device)?;
        pool.spa().detach(guid).map_err(spa_err)?;
        self.inject_forget(&a.name, Some(guid));
        self.commit_change(
            &config,
            &pool,
            &format!("zpool detach {} {}", a.name, a.device),
        )
    }

    /// Records a vdev change in the history and commits it (the commit
    /// writes the new configuration to every label), then the cache file.
    fn commit_change(&self, config: &Config, pool: &Pool, text: &str) -> Result<(), BackendError> {
        pool.log_history(text);
        let synced = pool.sync().map_err(dsl_err);
        self.save_cache(config);
        synced
    }
}

// ------------------------------------------------------ status, list, props

/// The live vdev tree of an imported pool.
fn live_tree(spa: &Spa) -> PoolTree {
    live_tree_and_configs(spa).0
}

/// [`live_tree`] and the configs it was built from (one snapshot).
fn live_tree_and_configs(spa: &Spa) -> (PoolTree, Vec<VdevConfig>) {
    let tops = spa.top_configs();
    let leaves: HashMap<u64, &tarn_vdev::Leaf> = tops
        .iter()
        .flat_map(|(t, _)| t.leaves())
        .map(|l| (l.guid, l))
        .collect();
    let configs: Vec<VdevConfig> = tops.iter().map(|(_, c)| c.clone()).collect();
    let mut tree = tree::pool_tree(&configs, &|cfg| match leaves.get(&cfg.guid) {
        Some(leaf) => live_leaf(leaf),
        None => missing_leaf(cfg),
    });
    tree.suspended = spa.suspended().is_some();
    (tree, configs)
}

/// How a leaf of an imported pool is doing, as `zpool status` shows it.
fn live_leaf(leaf: &tarn_vdev::Leaf) -> LeafInfo {
    use tarn_vdev::LeafState;
    let state = leaf.state();
    let resilver = !leaf.dtl().is_empty();
    // OpenZFS shows a device it cannot open by GUID, "was" its path.
    let (path, note) = match state {
        LeafState::Unavail => (leaf.guid.to_string(), Some(format!("was {}", leaf.path))),
        // VDEV_AUX_ERR_EXCEEDED.
        LeafState::Faulted | LeafState::Degraded => {
            (leaf.path.clone(), Some("too many errors".to_string()))
        }
        _ if leaf.stats.resilvering() => (leaf.path.clone(), Some("(resilvering)".to_string())),
        LeafState::Online if resilver => {
            (leaf.path.clone(), Some("(awaiting resilver)".to_string()))
        }
        _ => (leaf.path.clone(), None),
    };
    LeafInfo {
        path,
        state: state.name().to_string(),
        read: leaf.stats.read_errors.load(Relaxed),
        write: leaf.stats.write_errors.load(Relaxed),
        cksum: leaf.stats.checksum_errors.load(Relaxed),
        note,
        resilver,
    }
}

fn missing_leaf(cfg: &VdevConfig) -> LeafInfo {
    LeafInfo {
        path: cfg.path.clone().unwrap_or_else(|| cfg.guid.to_string()),
        state: "UNAVAIL".into(),
        note: Some("cannot open".into()),
        ..LeafInfo::default()
    }
}

/// The pool's state word: SUSPENDED while its I/O waits for `zpool
/// clear`, else the health of its vdev tree.
fn pool_health(spa: &Spa, tree: &PoolTree) -> String {
    if spa.suspended().is_some() {
        "SUSPENDED".to_string()
    } else {
        tree.health.name().to_string()
    }
}

fn pool_status(pool: &Pool, mounts: &mounts::Mounts) -> PoolStatus {
    let name = pool.name();
    // The scan before the devices: a resilver marks its leaves done before
    // it lets go of the scan state, so a finished resilver is never shown
    // beside a leaf still "(resilvering)" (read the other way round, a
    // resilver ending in between showed both).
    let scan = scrub::scan_status(pool);
    let tree = live_tree(pool.spa());
    let (status, action) = tree::status_text(&tree).unzip();
    let errors = scrub::permanent_errors(pool, mounts);
    PoolStatus {
        state: pool_health(pool.spa(), &tree),
        guid: pool.guid(),
        status,
        action,
        scan,
        config: tree.root(&name),
        logs: tree.logs.clone(),
        spares: spare_nodes(pool.spa()),
        error_count: errors.len() as u64,
        errors,
        name,
    }
}

/// The `spares` rows of `zpool status`.
fn spare_nodes(spa: &Spa) -> Vec<crate::api::VdevStatusNode> {
    spa.spares_status()
        .into_iter()
        .map(|s| crate::api::VdevStatusNode {
            name: s.path,
            state: s.state.to_string(),
            note: match s.state {
                "INUSE" => Some("currently in use".to_string()),
                "UNAVAIL" => Some("cannot open".to_string()),
                _ => None,
            },
            ..crate::api::VdevStatusNode::default()
        })
        .collect()
}

fn list_row(pool: &Pool) -> PoolListRow {
    let spa = pool.spa();
    let space = pool.pool_space();
    let (tree, configs) = live_tree_and_configs(spa);
    let size_of = |cfg: &VdevConfig| match spa.vdev_space(cfg.id as u32) {
        Some((size, alloc, hist)) => (Some(size), Some(alloc), accounting::fragmentation(&hist)),
        None => (None, None, None),
    };
    let altroot = pool
        .pool_prop("altroot")
        .ok()
        .map(|v| v.value)
        .filter(|v| !v.is_empty());
    PoolListRow {
        name: pool.name(),
        size: space.size,
        alloc: space.alloc,
        free: space.free,
        ckpoint: None,
        expandsz: None,
        frag: space.frag,
        cap: space.cap,
        dedup: 1.0,
        health: pool_health(spa, &tree),
        altroot,
        guid: pool.guid(),
        txg: spa.last_synced_txg(),
        vdevs: tree::list_rows(&configs, &tree, &size_of),
    }
}

/// One `zpool get` row. HEALTH comes from the live vdev tree (the one
/// `zpool status` shows), everything else from the pool.
fn pool_prop_row(pool: &Pool, prop: &str) -> Result<PropRow, BackendError> {
    let (value, source) = if prop == "health" {
        let spa = pool.spa();
        (pool_health(spa, &live_tree(spa)), "-".to_string())
    } else {
        let v = pool.pool_prop(prop).map_err(dsl_err)?;
        (v.value, datasets::source_text(&v.source))
    };
    Ok(PropRow {
        name: pool.name(),
        property: prop.to_string(),
        value,
        source,
    })
}

// ------------------------------------------------------------------ import

/// The vdev tree of a pool found by a discovery (missing top-level vdevs
/// shown as unavailable leaves named `missing-N`).
fn found_tree(found_in: &Discovery, found: &FoundPool) -> PoolTree {
    let configs = Discovery::shown_configs(found);
    tree::pool_tree(
        &configs,
        &|cfg| match found_in.found_path(found, cfg.guid) {
            Some(path) if cfg.guid != 0 => LeafInfo {
                path: path.to_string(),
                state: if cfg.offline { "OFFLINE" } else { "ONLINE" }.into(),
                resilver: !cfg.dtl.is_empty(),
                ..LeafInfo::default()
            },
            _ => missing_leaf(cfg),
        },
    )
}

fn importable(found_in: &Discovery, found: &FoundPool) -> ImportablePool {
    let tree = found_tree(found_in, found);
    let (status, action) = tree::import_text(tree.health, found.state == PoolState::Exported);
    ImportablePool {
        name: found.name.clone(),
        guid: found.guid,
        state: tree.health.name().to_string(),
        status,
        action,
        config: tree.root(&found.name),
        logs: tree.logs,
    }
}

impl Engine {
    fn import(&self, a: &ZpoolImport) -> Result<String, BackendError> {
        let config = self.config.lock();
        let found_in = import::discover(&a.dirs);
        let found = match found_in.choose(&a.pool, &|g| self.is_imported(g)) {
            Ok(found) => found,
            Err(_) if self.pools.read().contains_key(&a.pool) => return Err(name_taken()),
            Err(Unmatched::None) => return Err(dsl_err(found_in.no_such_pool())),
            Err(Unmatched::Many) => return Err(dsl_err(Unmatched::many())),
        };
        let target = a.new_name.clone().unwrap_or_else(|| found.name.clone());
        if self.pools.read().contains_key(&target) {
            return Err(name_taken());
        }
        let options = ImportOptions {
            new_name: a.new_name.clone(),
            force: a.force,
            missing_log: a.missing_log,
        };
        let pool = import::open(&found_in, found, &options).map_err(dsl_err)?;
        self.log(&pool, &history::zpool_import(a));
        self.pools.write().insert(target.clone(), pool.clone());
        self.save_cache(&config);
        // The pool is imported even when a filesystem cannot be mounted.
        let all = pool.datasets();
        BackendError::combine(self.bring_up(&pool, &all, How::default()))?;
        Ok(replay_report(&pool, &target))
    }

    /// Re-import one pool of the cache file (start-up). `Ok(None)`: its
    /// labels say it was exported or destroyed since, so it is no longer
    /// this daemon's to import and leaves the cache file.
    fn reimport(&self, entry: &CacheEntry) -> Result<Option<Arc<Pool>>, BackendError> {
        let found_in = import::discover_paths(entry.paths.iter().map(PathBuf::from));
        let found = found_in
            .pools
            .iter()
            .find(|p| p.guid == entry.guid)
            .ok_or_else(|| {
                BackendError::Invalid("one or more devices is currently unavailable".into())
            })?;
        if found.state != PoolState::Active {
            return Ok(None);
        }
        if self.pools.read().contains_key(&found.name) {
            return Err(name_taken());
        }
        // This daemon owned the pool: its labels say Active because it did.
        let options = ImportOptions {
            force: true,
            ..ImportOptions::default()
        };
        import::open(&found_in, found, &options)
            .map(Some)
            .map_err(dsl_err)
    }
}

/// What the mounts of a just-imported pool replayed from the intent logs
/// (a pool that was not exported cleanly), as `zpool import` says it;
/// empty when nothing was replayed.
fn replay_report(pool: &Pool, name: &str) -> String {
    let per_ds: Vec<(String, u64)> = pool
        .datasets()
        .into_iter()
        .filter_map(|ds| {
            let n = pool.dataset_zil(&ds).ok()?.stats().records_replayed;
            (n > 0).then_some((ds, n))
        })
        .collect();
    if per_ds.is_empty() {
        return String::new();
    }
    let total: u64 = per_ds.iter().map(|(_, n)| n).sum();
    let parts: Vec<String> = per_ds.iter().map(|(ds, n)| format!("{ds}: {n}")).collect();
    format!(
        "pool '{name}': replayed {total} intent log record{} ({})\n",
        if total == 1 { "" } else { "s" },
        parts.join(", ")
    )
}

fn name_taken() -> BackendError {
    BackendError::Invalid(
        "a pool with that name already exists\n\
         use the form 'zpool import <pool | id> <newpool>' to give it a new name"
            .into(),
    )
}

// ---------------------------------------------------------------- datasets

impl Engine {
    /// The datasets `names` (with `-r`/`-d`) select, with their pools.
    fn select(
        &self,
        names: &[String],
        recursive: bool,
        depth: Option<u32>,
    ) -> Result<Vec<(Arc<Pool>, String)>, BackendError> {
        // No names: every dataset. Names without -r/-d: just those.
        let depth = match (recursive, names.is_empty()) {
            (true, _) => depth,
            (false, true) => None,
            (false, false) => Some(0),
        };
        let roots: Vec<(Arc<Pool>, String)> = if names.is_empty() {
            self.pools
                .read()
                .iter()
                .map(|(n, p)| (p.clone(), n.clone()))
                .collect()
        } else {
            let mut roots = Vec::with_capacity(names.len());
            for name in names {
                let pool = self.dataset_pool(name)?;
                if !pool.dataset_exists(name) {
                    return Err(BackendError::NoSuchDataset(name.clone()));
                }
                roots.push((pool, name.clone()));
            }
            roots
        };
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for (pool, root) in roots {
            for ds in datasets::subtree(&pool, &root, depth) {
                if seen.insert(ds.clone()) {
                    out.push((pool.clone(), ds));
                }
            }
        }
        Ok(out)
    }

    /// Creates the dataset (and with `-p` its missing ancestors); the pool
    /// and the datasets created, parents first.
    fn zfs_create_inner(&self, a: &ZfsCreate) -> Result<(Arc<Pool>, Vec<String>), BackendError> {
        let pool_name = names::pool_of(&a.name);
        let pool = self.pool(pool_name)?;
        let volume = a.volsize.is_some();
        for (prop, _) in &a.props {
            datasets::check_create_value(prop, volume)?;
        }
        if pool.dataset_exists(&a.name) {
            if a.parents {
                return Ok((pool, Vec::new()));
            }
            return Err(BackendError::DatasetExists(a.name.clone()));
        }
        let props = match volume {
            true => self.volume_props(&pool, a)?,
            false => a.props.clone(),
        };
        let mut created = create_parents(&pool, &a.name, a.parents)?;
        match pool.dataset_create(&a.name, &props) {
            Ok(()) => created.push(a.name.clone()),
            Err(DslError::Exists(_)) if a.parents => {}
            Err(e) => return Err(dsl_err(e)),
        }
        Ok((pool, created))
    }

    /// The properties a new volume is created with: `volblocksize` left
    /// out (the object set records it) and, unless sparse (`-s`) or set,
    /// a `refreservation` covering the whole volume (`auto`).
    fn volume_props(
        &self,
        pool: &Pool,
        a: &ZfsCreate,
    ) -> Result<Vec<(String, String)>, BackendError> {
        let (size, bs) = volume_geometry(a)?;
        let parent = names::parent(&a.name).unwrap_or(names::pool_of(&a.name));
        let copies = match a.props.iter().find(|(p, _)| p == "copies") {
            Some((_, v)) => v.parse().unwrap_or(1),
            None => pool
                .dataset_prop(parent, "copies")
                .ok()
                .and_then(|v| v.value.parse().ok())
                .unwrap_or(1),
        };
        let auto = tarn_zvol::reservation_for(size, bs, copies);
        let mut props: Vec<(String, String)> = a
            .props
            .iter()
            .filter(|(p, _)| p != "volblocksize")
            .map(|(p, v)| match (p.as_str(), v.as_str()) {
                ("refreservation", "auto") => (p.clone(), auto.to_string()),
                _ => (p.clone(), v.clone()),
            })
            .collect();
        if !a.sparse && !props.iter().any(|(p, _)| p == "refreservation") {
            props.push(("refreservation".into(), auto.to_string()));
        }
        let reserve: u64 = props
            .iter()
            .find(|(p, _)| p == "refreservation")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        if reserve > 0 && pool.dataset_exists(parent) {
            let avail: u64 = pool
                .dataset_prop(parent, "available")
                .ok()
                .and_then(|v| v.value.parse().ok())
                .unwrap_or(0);
            if reserve > avail {
                return Err(BackendError::Invalid(format!(
                    "out of space: the volume's reservation ({reserve} bytes) is more than \
                     is available ({avail} bytes); use '-s' for a sparse volume"
                )));
            }
        }
        Ok(props)
    }

    /// `zfs destroy` of a filesystem: with `-r` its descendants and every
    /// snapshot among them go too, deepest first, each dataset's
    /// snapshots before it.
    fn zfs_destroy_inner(
        &self,
        a: &ZfsDestroy,
    ) -> Result<(Arc<Pool>, DestroyReport), BackendError> {
        let pool = self.dataset_pool(&a.name)?;
        if !pool.dataset_exists(&a.name) {
            return Err(BackendError::NoSuchDataset(a.name.clone()));
        }
        let below = datasets::descendants(&pool, &a.name);
        let mut dependents: Vec<String> = below.clone();
        dependents.extend(pool.snapshots(&a.name));
        if !a.recursive && !dependents.is_empty() {
            return Err(BackendError::Busy(format!(
                "filesystem has children\nuse '-r' to destroy the following datasets:\n{}",
                dependents.join("\n")
            )));
        }
        // `zfs destroy -r POOL` empties the pool; the root stays (zfs(8)).
        let mut doomed = below.clone();
        if a.name.contains('/') {
            doomed.push(a.name.clone());
        }
        let mut order = Vec::new();
        for ds in below.iter().rev().chain(std::iter::once(&a.name)) {
            order.extend(pool.snapshots(ds));
            if doomed.contains(ds) {
                order.push(ds.clone());
            }
        }
        let report = DestroyReport {
            destroyed: order,
            reclaim: 0,
            snapshots: false,
        };
        if a.dry_run {
            return Ok((pool, report));
        }
        if let Some(busy) = report.destroyed.iter().find(|n| self.is_being_sent(n)) {
            return Err(BackendError::Message(format!(
                "cannot destroy snapshot {busy}: dataset is busy"
            )));
        }
        self.take_down(&pool, &doomed, a.force)?;
        for ds in below.iter().rev().chain(std::iter::once(&a.name)) {
            let snaps = pool.snapshots(ds);
            if !snaps.is_empty() {
                pool.snapshots_destroy(&snaps, false).map_err(dsl_err)?;
            }
            if doomed.contains(ds) {
                pool.dataset_destroy(ds).map_err(dsl_err)?;
            }
        }
        Ok((pool, report))
    }

    /// Sorts `rows` by `zfs list -s`/`-S` keys: numbers as numbers,
    /// anything else as text, values a row lacks last.
    fn sort_rows(
        &self,
        rows: &mut [DatasetRow],
        pools: &[Arc<Pool>],
        keys: &[crate::api::SortKey],
    ) {
        if keys.is_empty() {
            return;
        }
        #[derive(PartialEq, Eq, PartialOrd, Ord)]
        enum Val {
            Num(u64),
            Text(String),
            Missing,
        }
        let value = |pool: &Pool, name: &str, prop: &str| -> Val {
            if prop == "name" {
                return Val::Text(name.to_string());
            }
            match datasets::prop_value(pool, name, prop) {
                Ok(v) if v.value != "-" && !v.value.is_empty() => match v.value.parse() {
                    Ok(n) => Val::Num(n),
                    Err(_) => Val::Text(v.value),
                },
                _ => Val::Missing,
            }
        };
        let mut keyed: Vec<(Vec<Val>, DatasetRow)> = rows
            .iter()
            .zip(pools)
            .map(|(r, p)| {
                let vals = keys.iter().map(|k| value(p, &r.name, &k.prop)).collect();
                (vals, r.clone())
            })
            .collect();
        keyed.sort_by(|(a, _), (b, _)| {
            for ((x, y), k) in a.iter().zip(b).zip(keys) {
                let ord = match (x, y) {
                    (Val::Missing, Val::Missing) => std::cmp::Ordering::Equal,
                    (Val::Missing, _) => std::cmp::Ordering::Greater,
                    (_, Val::Missing) => std::cmp::Ordering::Less,
                    _ if k.descending => y.cmp(x),
                    _ => x.cmp(y),
                };
                if ord != std::cmp::Ordering::Equal {
                    return ord;
                }
            }
            std::cmp::Ordering::Equal
        });
        for (slot, (_, row)) in rows.iter_mut().zip(keyed) {
            *slot = row;
        }
    }

    fn list_row(pool: &Pool, ds: &str, cols: &[String]) -> Result<DatasetRow, BackendError> {
        let typ = if ds.contains('@') {
            DatasetType::Snapshot
        } else if ds.contains('#') {
            DatasetType::Bookmark
        } else if pool.is_volume(ds) {
            DatasetType::Volume
        } else {
            DatasetType::Filesystem
        };
        let mut row = DatasetRow {
            name: ds.to_string(),
            typ: typ.as_str().to_string(),
            props: BTreeMap::new(),
        };
        for col in cols.iter().filter(|c| *c != "name" && *c != "type") {
            match datasets::prop_value(pool, ds, col) {
                Ok(v) => {
                    row.props.insert(col.clone(), v);
                }
                Err(BackendError::NoSuchDataset(n)) => return Err(BackendError::NoSuchDataset(n)),
                // Not tracked (a user property): the column shows `-`.
                Err(_) => {}
            }
        }
        Ok(row)
    }

    fn set_all(&self, a: &ZfsSet) -> Result<Arc<Pool>, BackendError> {
        let pool = self.dataset_pool(&a.name)?;
        if !pool.dataset_exists(&a.name) {
            return Err(BackendError::NoSuchDataset(a.name.clone()));
        }
        // Check every assignment before making any, so a refused one
        // leaves the dataset unchanged.
        for (prop, value) in &a.props {
            datasets::check_set_value(&pool, &a.name, prop, value)?;
        }
        if let Some((_, v)) = a.props.iter().find(|(p, _)| p == "volsize") {
            self.set_volsize(&pool, &a.name, v)?;
        }
        // `refreservation=auto` of a volume: what its size needs.
        let assigned: Vec<(String, String)> = a
            .props
            .iter()
            .filter(|(p, _)| p != "volsize")
            .map(|(p, v)| match (p.as_str(), v.as_str()) {
                ("refreservation", "auto") => self
                    .auto_reservation(&pool, &a.name)
                    .map(|r| (p.clone(), r.to_string())),
                _ => Ok((p.clone(), v.clone())),
            })
            .collect::<Result<_, _>>()?;
        let props: Vec<&str> = a.props.iter().map(|(p, _)| p.as_str()).collect();
        self.change_mounted(&pool, &a.name, &props, || {
            for (prop, value) in &assigned {
                pool.dataset_set(&a.name, prop, value).map_err(dsl_err)?;
            }
            Ok(())
        })?;
        Ok(pool)
    }

    /// The `refreservation=auto` of volume `ds` at its size now.
    fn auto_reservation(&self, pool: &Pool, ds: &str) -> Result<u64, BackendError> {
        let (size, bs) = pool.volume_geometry(ds).map_err(dsl_err)?;
        Ok(tarn_zvol::reservation_for(size, bs, copies_of(pool, ds)))
    }

    /// `zfs set volsize=`: the volume is resized in place (rounded up to
    /// its block size). A thick volume's reservation follows when it was
    /// the automatic one; a shrink is refused while clients are connected
    /// (they would lose the end of their disk under them).
    fn set_volsize(&self, pool: &Arc<Pool>, ds: &str, value: &str) -> Result<(), BackendError> {
        let _config = self.config.lock();
        let (old, bs) = pool.volume_geometry(ds).map_err(dsl_err)?;
        let want: u64 = value
            .parse()
            .map_err(|_| BackendError::Invalid(format!("bad volume size '{value}'")))?;
        let new =
            tarn_zvol::round_size(want, bs).map_err(|e| BackendError::Invalid(e.to_string()))?;
        if new == old {
            return Ok(());
        }
        if new < old && self.zvols.connections(ds) > 0 {
            return Err(BackendError::Busy(format!(
                "volume '{ds}' is in use: shrinking it would cut off the end its {} \
                 client(s) see; disconnect them first",
                self.zvols.connections(ds)
            )));
        }
        let copies = copies_of(pool, ds);
        let reserved: u64 = pool
            .dataset_prop(ds, "refreservation")
            .ok()
            .and_then(|v| v.value.parse().ok())
            .unwrap_or(0);
        let thick = reserved == tarn_zvol::reservation_for(old, bs, copies);
        let new_reserve = tarn_zvol::reservation_for(new, bs, copies);
        if thick {
            datasets::check_set_value(pool, ds, "refreservation", &new_reserve.to_string())
                .map_err(|_| {
                    BackendError::Invalid(
                        "out of space: the volume's reservation cannot grow that far".into(),
                    )
                })?;
        }
        let resized = match self.zvols.open_volume(ds) {
            Some(zv) => zv.resize(new),
            None => zvols::open_zvol(pool, ds)?.resize(new),
        };
        resized.map_err(|e| BackendError::Other(format!("cannot resize '{ds}': {e}")))?;
        if thick {
            pool.dataset_set(ds, "refreservation", &new_reserve.to_string())
                .map_err(dsl_err)?;
        }
        Ok(())
    }

    /// Runs `change` (a set or inherit of `props` on `name`) and brings
    /// the mounted filesystems of the subtree in line with it, as zfs(8)'s
    /// change lists do: a new mountpoint or canmount unmounts the subtree
    /// first (busy: refused, nothing changed) and mounts it again where
    /// the properties now say — and mounts a `canmount=on` filesystem that
    /// was not mounted when its mountpoint is set; readonly remounts when
    /// the filesystems are idle; recordsize/atime/relatime/xattr (and a
    /// readonly that could not remount) apply to the live filesystems.
    fn change_mounted(
        &self,
        pool: &Arc<Pool>,
        name: &str,
        props: &[&str],
        change: impl FnOnce() -> Result<(), BackendError>,
    ) -> Result<(), BackendError> {
        let reach = props.iter().map(|p| Reach::of(p)).max();
        if reach.is_none_or(|r| r == Reach::Nothing) {
            return change();
        }
        let _config = self.config.lock();
        let subtree = datasets::subtree(pool, name, None);
        let detached = match reach {
            Some(Reach::Move) => self.mounts.detach(&subtree, false)?,
            Some(Reach::Remount) => self.mounts.detach(&subtree, false).unwrap_or_default(),
            _ => Vec::new(),
        };
        let changed = change();
        let mount_new = changed.is_ok() && props.contains(&"mountpoint");
        let mut errors = Vec::new();
        for ds in &subtree {
            let was = detached.iter().find(|d| d.name == *ds);
            if let Err(e) = self.settle(pool, ds, was, mount_new) {
                errors.push(e);
            }
        }
        changed?;
        BackendError::combine(errors)
    }

    /// One dataset after a property change (see [`Engine::change_mounted`]).
    fn settle(
        &self,
        pool: &Arc<Pool>,
        ds: &str,
        was: Option<&mounts::Detached>,
        mount_new: bool,
    ) -> Result<(), BackendError> {
        if pool.is_volume(ds) {
            return self.zvols.refresh(pool, ds);
        }
        if self.mounts.is_mounted(ds) {
            return self.mounts.refresh_settings(pool, ds);
        }
        let plan = self.mounts.plan(pool, ds)?;
        let mounts::Place::Dir(path) = &plan.place else {
            return Ok(());
        };
        let how = match was {
            // Back where it was: an overlay mount stays one.
            Some(d) if plan.canmount != mounts::CanMount::Off => How {
                overlay: path.canonicalize().is_ok_and(|p| p == d.path),
                readonly: d.readonly,
            },
            None if mount_new && plan.automatic() => How::default(),
            _ => return Ok(()),
        };
        self.mounts.mount(pool, ds, how)
    }

    /// The `mounted` property: the engine knows, not the pool.
    fn mounted_text(&self, ds: &str) -> String {
        if self.mounts.is_mounted(ds) {
            "yes"
        } else {
            "no"
        }
        .to_string()
    }
}

/// How far a property change reaches into mounted filesystems.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Reach {
    Nothing,
    /// The live filesystem's settings change.
    Live,
    /// The mount is redone when idle (its read-only flag changes).
    Remount,
    /// The filesystem moves or stops being mounted.
    Move,
}

impl Reach {
    fn of(prop: &str) -> Reach {
        match prop {
            "mountpoint" | "canmount" => Reach::Move,
            "readonly" => Reach::Remount,
            "recordsize" | "atime" | "relatime" | "xattr" | "sync" | "logbias" | "exec"
            | "setuid" | "devices" | "snapdev" | "volmode" => Reach::Live,
            _ => Reach::Nothing,
        }
    }
}

// ------------------------------------------------------------ the contract

impl Backend for Engine {
    fn startup(&self) -> Result<(), BackendError> {
        let mut config = self.config.lock();
        mounts::clean_stale_mounts(self.mounts.root());
        let entries = match read_cache_file(&self.cachefile) {
            Ok(entries) => entries,
            Err(e) => {
                eprintln!("tarn daemon: not re-importing pools: {e}");
                return Ok(());
            }
        };
        for entry in entries {
            match self.reimport(&entry) {
                Ok(Some(pool)) => {
                    self.pools.write().insert(pool.name(), pool);
                }
                Ok(None) => eprintln!(
                    "tarn daemon: pool '{}' (guid {}) was exported or destroyed since; \
                     not re-importing it",
                    entry.name, entry.guid
                ),
                Err(e) => {
                    eprintln!(
                        "tarn daemon: cannot re-import pool '{}' (guid {}): {e}",
                        entry.name, entry.guid
                    );
                    config.unimported.push(entry);
                }
            }
        }
        self.save_cache(&config);
        let pools: Vec<Arc<Pool>> = self.pools.read().values().cloned().collect();
        for pool in pools {
            for e in self.bring_up(&pool, &pool.datasets(), How::default()) {
                eprintln!("tarn daemon: {e}");
            }
            let report = replay_report(&pool, &pool.name());
            if !report.is_empty() {
                eprint!("tarn daemon: re-imported {report}");
            }
        }
        Ok(())
    }

    fn shutdown(&self) -> Result<(), BackendError> {
        let _config = self.config.lock();
        self.mounts.unmount_everything();
        self.zvols.stop_all();
        let pools = std::mem::take(&mut *self.pools.write());
        let mut failed = Vec::new();
        for (name, pool) in pools {
            if let Err(e) = pool.close() {
                failed.push(format!("{name}: {e}"));
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(BackendError::Io(format!(
                "cannot sync: {}",
                failed.join("; ")
            )))
        }
    }

    fn zpool_create(&self, args: ZpoolCreate) -> Result<(), BackendError> {
        self.create(args)
    }

    fn zpool_destroy(&self, args: ZpoolDestroy) -> Result<(), BackendError> {
        self.release(&args.name, args.force, |pool| pool.destroy())
    }

    fn zpool_list(&self, args: ZpoolList) -> Result<Vec<PoolListRow>, BackendError> {
        Ok(self
            .pools_named(&args.names)?
            .iter()
            .map(|p| list_row(p))
            .collect())
    }

    fn zpool_status(&self, args: ZpoolStatus) -> Result<Vec<PoolStatus>, BackendError> {
        Ok(self
            .pools_named(&args.names)?
            .iter()
            .map(|p| pool_status(p, &self.mounts))
            .collect())
    }

    fn zpool_get(&self, args: ZpoolGet) -> Result<Vec<PropRow>, BackendError> {
        let wanted: Vec<&str> = if args.props.is_empty() {
            props::pool_props()
                .iter()
                .map(|d| d.name)
                .filter(|n| *n != "name")
                .collect()
        } else {
            args.props.iter().map(String::as_str).collect()
        };
        let mut rows = Vec::new();
        for pool in self.pools_named(&args.names)? {
            for prop in &wanted {
                rows.push(pool_prop_row(&pool, prop)?);
            }
        }
        Ok(rows)
    }

    fn zpool_set(&self, args: ZpoolSet) -> Result<(), BackendError> {
        let pool = self.pool(&args.name)?;
        pool.pool_set(&args.prop, &args.value).map_err(dsl_err)?;
        self.log(
            &pool,
            &format!("zpool set {}={} {}", args.prop, args.value, args.name),
        );
        Ok(())
    }

    fn zpool_import_scan(
        &self,
        args: ZpoolImportScan,
    ) -> Result<Vec<ImportablePool>, BackendError> {
        let found_in = import::discover(&args.dirs);
        let imported = |g| self.is_imported(g);
        Ok(found_in
            .importable(&imported)
            .into_iter()
            .map(|p| importable(&found_in, p))
            .collect())
    }

    fn zpool_import(&self, args: ZpoolImport) -> Result<String, BackendError> {
        self.import(&args)
    }

    fn zpool_export(&self, args: ZpoolExport) -> Result<(), BackendError> {
        if self.pool(&args.name)?.spa().suspended().is_some() {
            return Err(BackendError::Invalid(
                "pool I/O is currently suspended; reconnect the device and run \
                 'zpool clear', or destroy the pool"
                    .into(),
            ));
        }
        let text = format!("zpool export {}", args.name);
        self.release(&args.name, args.force, |pool| {
            pool.log_history(&text);
            pool.export()
        })
    }

    fn zpool_add(&self, args: ZpoolAdd) -> Result<(), BackendError> {
        self.add(args)
    }

    fn zpool_remove(&self, args: ZpoolRemove) -> Result<(), BackendError> {
        self.remove(args)
    }

    fn zpool_detach(&self, args: ZpoolDetach) -> Result<(), BackendError> {
        self.detach(args)
    }

    fn zpool_attach(&self, args: ZpoolAttach) -> Result<(), BackendError> {
        self.attach(args)
    }

    fn zpool_scrub(&self, args: ZpoolScrub) -> Result<(), BackendError> {
        for pool in self.pools_named(&args.names)? {
            scrub::scrub(&pool, args.action)?;
            let flag = match args.action {
                crate::api::ScrubAction::Start => "",
                crate::api::ScrubAction::Pause => "-p ",
                crate::api::ScrubAction::Stop => "-s ",
            };
            self.log(&pool, &format!("zpool scrub {flag}{}", pool.name()));
        }
        Ok(())
    }

    fn zpool_offline(&self, args: ZpoolOffline) -> Result<(), BackendError> {
        self.offline(args)
    }

    fn zpool_online(&self, args: ZpoolOnline) -> Result<(), BackendError> {
        self.online(args)
    }

    fn zpool_sync(&self, args: ZpoolSync) -> Result<(), BackendError> {
        for pool in self.pools_named(&args.names)? {
            pool.sync().map_err(dsl_err)?;
        }
        Ok(())
    }

    fn zpool_clear(&self, args: ZpoolClear) -> Result<(), BackendError> {
        self.clear(args)
    }

    fn zilstat(&self, args: Zilstat) -> Result<Vec<ZilstatRow>, BackendError> {
        let mut rows = Vec::new();
        // Named datasets alone: only those; nothing named: every pool.
        let pools = if args.pools.is_empty() && !args.datasets.is_empty() {
            Vec::new()
        } else {
            self.pools_named(&args.pools)?
        };
        for pool in &pools {
            for ds in pool.datasets() {
                if let Some(row) = iostat::zilstat_row(pool, &ds) {
                    rows.push(row);
                }
            }
        }
        for ds in &args.datasets {
            let pool = self.pool(ds.split('/').next().unwrap_or(ds))?;
            if !pool.dataset_exists(ds) || ds.contains('@') {
                return Err(BackendError::NoSuchDataset(ds.clone()));
            }
            rows.extend(iostat::zilstat_row(&pool, ds));
        }
        Ok(rows)
    }

    fn zpool_iostat(&self, args: ZpoolIostat) -> Result<Vec<PoolIostat>, BackendError> {
        Ok(self
            .pools_named(&args.names)?
            .iter()
            .map(|p| iostat::pool_iostat(p))
            .collect())
    }

    fn zpool_history(&self, args: ZpoolHistory) -> Result<Vec<PoolHistory>, BackendError> {
        Ok(self
            .pools_named(&args.names)?
            .iter()
            .map(|p| PoolHistory {
                name: p.name(),
                entries: p
                    .history()
                    .iter()
                    .map(|r| history::entry(r.time, &r.text))
                    .collect(),
            })
            .collect())
    }

    fn zfs_create(&self, args: ZfsCreate) -> Result<(), BackendError> {
        let _config = self.config.lock();
        let (pool, created) = self.zfs_create_inner(&args)?;
        let mut flags: Vec<String> = Vec::new();
        if args.parents {
            flags.push("-p".into());
        }
        if args.sparse {
            flags.push("-s".into());
        }
        if let Some(size) = &args.volsize {
            flags.push(format!("-V {size}"));
        }
        pool.log_history(&history::with_props(
            "zfs create",
            &flags.join(" "),
            &args.props,
            &args.name,
        ));
        for ds in &created {
            if *ds == args.name && args.volsize.is_some() {
                let (size, bs) = volume_geometry(&args)?;
                let os = pool.dataset_objset(ds).map_err(dsl_err)?;
                if let Err(e) = tarn_zvol::Zvol::format(&os, pool.txg(), size, bs) {
                    let _ = pool.dataset_destroy(ds);
                    return Err(BackendError::Other(format!(
                        "cannot create volume '{ds}': {e}"
                    )));
                }
            } else {
                mounts::format(&pool, ds)?;
            }
        }
        BackendError::combine(self.bring_up(&pool, &created, How::default())).map_err(|e| match e {
            BackendError::Mount { path, why } => BackendError::Mount {
                path,
                why: format!("{why}\nfilesystem successfully created, but not mounted"),
            },
            other => other,
        })
    }

    fn zfs_destroy(&self, args: ZfsDestroy) -> Result<DestroyReport, BackendError> {
        if args.name.contains('@') {
            return self.destroy_snapshots(&args);
        }
        if args.name.contains('#') {
            return self.destroy_bookmark(&args);
        }
        let _config = self.config.lock();
        let (pool, report) = self.zfs_destroy_inner(&args)?;
        if !args.dry_run {
            let flags = if args.recursive { "-r" } else { "" };
            pool.log_history(&history::with_props("zfs destroy", flags, &[], &args.name));
        }
        Ok(report)
    }

    fn zfs_snapshot(&self, args: ZfsSnapshot) -> Result<(), BackendError> {
        self.snapshot(&args)
    }

    fn zfs_rollback(&self, args: ZfsRollback) -> Result<(), BackendError> {
        self.rollback(&args)
    }

    fn zfs_clone(&self, args: ZfsClone) -> Result<(), BackendError> {
        self.clone_dataset(&args)
    }

    fn zfs_promote(&self, args: ZfsPromote) -> Result<(), BackendError> {
        self.promote(&args)
    }

    fn zfs_rename(&self, args: ZfsRename) -> Result<(), BackendError> {
        self.rename(&args)
    }

    fn zfs_hold(&self, args: ZfsHold) -> Result<(), BackendError> {
        self.hold(&args)
    }

    fn zfs_holds(&self, args: ZfsHolds) -> Result<Vec<HoldRow>, BackendError> {
        self.holds(&args)
    }

    fn zfs_bookmark(&self, args: ZfsBookmark) -> Result<(), BackendError> {
        self.bookmark(&args)
    }

    fn zfs_diff(&self, args: ZfsDiff) -> Result<Vec<DiffRow>, BackendError> {
        self.diff(&args)
    }

    fn zfs_send(&self, args: ZfsSend) -> Result<Vec<String>, BackendError> {
        self.send(&args)
    }

    fn zfs_receive(&self, args: ZfsReceive) -> Result<Vec<String>, BackendError> {
        self.receive(&args)
    }

    fn zfs_list(&self, args: ZfsList) -> Result<Vec<DatasetRow>, BackendError> {
        let cols: Vec<String> = if args.props.is_empty() {
            DATASET_LIST_DEFAULT
                .split(',')
                .map(str::to_string)
                .collect()
        } else {
            args.props.clone()
        };
        let selected =
            self.select_typed(&args.names, args.recursive, args.depth, &args.types, true)?;
        let mut rows = selected
            .iter()
            .map(|(pool, ds)| Engine::list_row(pool, ds, &cols))
            .collect::<Result<Vec<DatasetRow>, BackendError>>()?;
        let pools: Vec<Arc<Pool>> = selected.into_iter().map(|(p, _)| p).collect();
        self.sort_rows(&mut rows, &pools, &args.sort);
        for row in &mut rows {
            if let Some(v) = row.props.get_mut("mounted") {
                v.value = self.mounted_text(&row.name);
            }
        }
        Ok(rows)
    }

    fn zfs_get(&self, args: ZfsGet) -> Result<Vec<PropRow>, BackendError> {
        let mut rows = Vec::new();
        let types = if args.types.is_empty() {
            vec![
                DatasetType::Filesystem,
                DatasetType::Volume,
                DatasetType::Snapshot,
                DatasetType::Bookmark,
            ]
        } else {
            args.types.clone()
        };
        for (pool, ds) in
            self.select_typed(&args.names, args.recursive, args.depth, &types, false)?
        {
            rows.extend(datasets::get_rows(&pool, &ds, &args.props, &args.sources)?);
        }
        for row in rows
            .iter_mut()
            .filter(|r| r.property == "mounted" && !r.value.is_empty())
        {
            row.value = self.mounted_text(&row.name);
        }
        Ok(rows)
    }

    fn zfs_set(&self, args: ZfsSet) -> Result<(), BackendError> {
        let pool = self.set_all(&args)?;
        pool.log_history(&history::with_props("zfs set", "", &args.props, &args.name));
        Ok(())
    }

    fn zfs_inherit(&self, args: ZfsInherit) -> Result<(), BackendError> {
        let pool = self.dataset_pool(&args.name)?;
        if !pool.dataset_exists(&args.name) {
            return Err(BackendError::NoSuchDataset(args.name));
        }
        let targets = if args.recursive {
            datasets::subtree(&pool, &args.name, None)
        } else {
            vec![args.name.clone()]
        };
        self.change_mounted(&pool, &args.name, &[args.prop.as_str()], || {
            for ds in &targets {
                pool.dataset_inherit(ds, &args.prop).map_err(dsl_err)?;
            }
            Ok(())
        })?;
        let flags = if args.recursive { "-r " } else { "" };
        pool.log_history(&format!("zfs inherit {flags}{} {}", args.prop, args.name));
        Ok(())
    }

    fn zfs_mount(&self, args: ZfsMount) -> Result<Vec<MountRow>, BackendError> {
        let readonly = args.options.iter().rev().find_map(|o| match o.as_str() {
            "ro" => Some(true),
            "rw" => Some(false),
            _ => None,
        });
        let how = How {
            overlay: args.overlay,
            readonly,
        };
        if let Some(name) = &args.name {
            let _config = self.config.lock();
            let pool = self.dataset_pool(name)?;
            if !pool.dataset_exists(name) {
                return Err(BackendError::NoSuchDataset(name.clone()));
            }
            self.mounts.mount(&pool, name, how)?;
        } else if args.all {
            let _config = self.config.lock();
            let mut errors = Vec::new();
            for pool in self.pools_named(&[])? {
                errors.extend(self.bring_up(&pool, &pool.datasets(), how));
            }
            BackendError::combine(errors)?;
        }
        Ok(self.mounts.list())
    }

    fn zfs_unmount(&self, args: ZfsUnmount) -> Result<(), BackendError> {
        let _config = self.config.lock();
        let Some(target) = &args.target else {
            // -a: everything, each on its own (a busy one does not stop
            // the others).
            let mut errors = Vec::new();
            for name in self.mounts.deepest_first() {
                if let Err(e) = self.mounts.detach(&[name], args.force) {
                    errors.push(e);
                }
            }
            return BackendError::combine(errors);
        };
        let name = if target.starts_with('/') {
            let path = std::path::Path::new(target);
            let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
            self.mounts
                .at_path(&path)
                .ok_or_else(|| BackendError::Unmount {
                    path: target.clone(),
                    why: "not a mounted tarn filesystem".into(),
                })?
        } else {
            target.clone()
        };
        let pool = self.dataset_pool(&name)?;
        if !pool.dataset_exists(&name) {
            return Err(BackendError::NoSuchDataset(name));
        }
        self.mounts.unmount(&pool, &name, args.force)
    }

    fn zinject_add(&self, args: ZinjectAdd) -> Result<InjectHandler, BackendError> {
        self.inject_add(args)
    }

    fn zinject_list(&self, _: ZinjectList) -> Result<Vec<InjectHandler>, BackendError> {
        Ok(self.inject_list())
    }

    fn zinject_clear(&self, args: ZinjectClear) -> Result<u64, BackendError> {
        self.inject_clear(args)
    }
}
