//! The pool's top-level vdevs, and changing them while the pool runs:
//! `zpool add`, `zpool remove` of a log, `zpool detach`, and a log device
//! that fails (OpenZFS's `spa_vdev_add`, `spa_vdev_remove_log`,
//! `spa_vdev_detach`, and a faulted SLOG).
//!
//! ## The set
//! `VdevSet` holds the top-level vdevs by id. DVAs name a vdev by id, so
//! an id is never reused: a removed vdev leaves a *hole* (unless it was
//! the last id), which labels list (`LabelConfig::holes`) so that import
//! does not take it for a missing device. The set is copy-on-write: a
//! change installs a new `Arc<VdevSet>`, and I/O that took the old
//! snapshot finishes on it — nothing is allocated on a vdev that is
//! leaving, so no I/O in flight can need it.
//!
//! ## Making a change durable
//! A change edits the set (and the allocator) at once, under the `state`
//! lock so that no commit runs meanwhile, and leaves a `ConfigChange`
//! for the next commit, which the caller forces. That commit writes the
//! uberblock with the new configuration's GUID sum to every leaf of the
//! new set, flushes, and only then writes the labels: the new vdevs'
//! first, then everyone else's (`write_config`). At every instant the
//! newest label configuration has a matching uberblock: before the first
//! new label, import sees the old configuration and takes the previous
//! txg's uberblock, which names nothing on an added vdev (allocation on
//! it starts only once the change is durable) and nothing on a removed
//! one (it was emptied first). A removal also rewrites the space map log
//! as a fresh base, so that no entry naming the departed vdev is replayed.
//! Once durable, the departed devices' labels are cleared: they belong to
//! no pool any more.
//!
//! ## Removing a log
//! `start_log_removal` stops allocation on the vdev; the caller then has
//! every dataset's intent log start a new chain (the old chains' blocks
//! are freed with the txg that makes their records durable) and forces
//! txgs until [`Spa::vdev_space`] shows nothing allocated, then calls
//! `finish_log_removal` — or `cancel_log_removal` when that takes too
//! long.
//!
//! ## A failing log device
//! When a log block write or flush fails on a log vdev, the vdev is
//! *faulted*: its leaves go FAULTED, nothing more is allocated on it (the
//! intent log falls back to the data vdevs), and commits no longer flush
//! it or write its uberblocks and labels — so a dead SLOG never stops the
//! pool. The intent log itself falls back to a txg for the commit that
//! failed, so nothing is acknowledged without durability.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tarn_format::label::{PoolState, VdevClass, VdevConfig, VdevKind};
use tarn_vdev::{BlockDevice, LeafState, TopVdev, VdevError};

use crate::spa::{build_top, metaslab_group, top_spec};
use crate::store::StoreError;
use crate::{accounting, NewTop, Spa, SpaError};

/// One top-level vdev of the running pool.
pub(crate) struct Top {
    pub(crate) vdev: Arc<TopVdev>,
    pub(crate) config: VdevConfig,
    /// Deflate ratio in 1/512 units (see `accounting`).
    pub(crate) ratio: u64,
    /// A log vdev whose device failed (see the module comment).
    faulted: AtomicBool,
}

impl Top {
    pub(crate) fn new(vdev: Arc<TopVdev>, config: VdevConfig) -> Top {
        let spec = top_spec(&vdev, &config);
        Top {
            ratio: accounting::deflate_ratio(&spec.layout, spec.ashift),
            vdev,
            config,
            faulted: AtomicBool::new(false),
        }
    }

    pub(crate) fn is_faulted(&self) -> bool {
        self.faulted.load(Ordering::Relaxed)
    }

    pub(crate) fn fault_flag(&self) -> &AtomicBool {
        &self.faulted
    }

    fn id(&self) -> u32 {
        self.vdev.id()
    }
}

/// The top-level vdevs by id; `None` is a hole.
#[derive(Clone, Default)]
pub(crate) struct VdevSet {
    tops: Vec<Option<Arc<Top>>>,
}

impl VdevSet {
    /// The set of `tops`, each at its id; ids nobody has are holes.
    pub(crate) fn from_tops(tops: Vec<Top>) -> VdevSet {
        let mut set = VdevSet::default();
        for top in tops {
            set.put(top.id(), Some(Arc::new(top)));
        }
        set
    }

    pub(crate) fn get(&self, id: u32) -> Option<&Arc<Top>> {
        self.tops.get(id as usize)?.as_ref()
    }

    /// Every top-level vdev, in id order.
    pub(crate) fn live(&self) -> impl Iterator<Item = &Arc<Top>> {
        self.tops.iter().flatten()
    }

    /// `vdev_children`: ids in use, holes included.
    pub(crate) fn children(&self) -> u64 {
        self.tops.len() as u64
    }

    pub(crate) fn holes(&self) -> Vec<u64> {
        (0..self.tops.len())
            .filter(|&i| self.tops[i].is_none())
            .map(|i| i as u64)
            .collect()
    }

    /// Sum of every leaf GUID: the uberblock names the configuration by it.
    /// The configs of the log vdevs (every label lists them).
    pub(crate) fn log_configs(&self) -> Vec<VdevConfig> {
        self.live()
            .filter(|t| t.config.class == VdevClass::Log)
            .map(|t| t.config.clone())
            .collect()
    }

    pub(crate) fn guid_sum(&self) -> u64 {
        self.live()
            .flat_map(|t| t.config.leaves())
            .fold(0u64, |s, l| s.wrapping_add(l.guid))
    }

    pub(crate) fn min_ashift(&self) -> u8 {
        self.live().map(|t| t.config.ashift).min().unwrap_or(12)
    }

    pub(crate) fn ratio(&self, id: u32) -> u64 {
        self.get(id).map_or(512, |t| t.ratio)
    }

    /// Sets id `id` to `top` (a hole when `None`); trailing holes are
    /// dropped, as the ids after the last vdev need no marker.
    pub(crate) fn put(&mut self, id: u32, top: Option<Arc<Top>>) {
        let i = id as usize;
        if self.tops.len() <= i {
            self.tops.resize(i + 1, None);
        }
        self.tops[i] = top;
        while self.tops.last().is_some_and(Option::is_none) {
            self.tops.pop();
        }
    }
}

/// A configuration change waiting for the next commit.
#[derive(Clone, Default)]
pub(crate) struct ConfigChange {
    /// Vdevs new in this change: labelled first, allocatable once durable.
    pub(crate) added: Vec<u32>,
    /// Devices leaving the pool: their labels are cleared once durable.
    pub(crate) departed: Vec<Arc<dyn BlockDevice>>,
    /// Rewrite the space map log as a base (a vdev left).
    pub(crate) condense: bool,
}

fn refused(why: impl Into<String>) -> SpaError {
    SpaError::Config(why.into())
}

impl Spa {
    /// Installs `set` (the caller holds `state`).
    pub(crate) fn install(&self, set: VdevSet) {
        self.min_ashift.store(set.min_ashift(), Ordering::Relaxed);
        *self.vdevs.write() = Arc::new(set);
    }

    /// Adds top-level vdevs to the running pool (`zpool add`); returns
    /// their ids. They join the configuration at the next commit (the
    /// caller forces one) and take allocations once it is durable. The
    /// caller has vetted the devices; their old labels are cleared here.
    pub fn add_tops(&self, new: Vec<NewTop>) -> Result<Vec<u32>, SpaError> {
        let mut state = self.state.lock();
        let old = self.vdev_set();
        let create_txg = state.ub.txg + 1;
        let first = old.children() as u32;
        let mut built = Vec::with_capacity(new.len());
        for (i, nt) in new.into_iter().enumerate() {
            built.push(build_top(first + i as u32, nt, create_txg)?);
        }
        // No stale uberblock or config of another pool may stay behind.
        for (top, _) in &built {
            for leaf in top.leaves() {
                tarn_vdev::clear_labels(leaf.dev.as_ref())?;
            }
        }
        let mut set = (*old).clone();
        let mut ids = Vec::with_capacity(built.len());
        let mut alloc = self.alloc.lock();
        for (top, cfg) in built {
            let top = Arc::new(top);
            let mut group = metaslab_group(&top, &cfg);
            group.disabled = true;
            alloc.add_group(group);
            ids.push(top.id());
            set.put(top.id(), Some(Arc::new(Top::new(top, cfg))));
        }
        drop(alloc);
        self.install(set);
        state
            .change
            .get_or_insert_with(ConfigChange::default)
            .added
            .extend(&ids);
        Ok(ids)
    }

    /// The class of top-level vdev `id`, if it exists.
    pub fn vdev_class(&self, id: u32) -> Option<VdevClass> {
        self.vdev_set().get(id).map(|t| t.config.class)
    }

    /// Whether log vdev `id` was faulted by a failed write or flush.
    pub fn vdev_faulted(&self, id: u32) -> bool {
        self.vdev_set().get(id).is_some_and(|t| t.is_faulted())
    }

    /// First step of removing log vdev `id`: nothing more is allocated on
    /// it. Data vdevs cannot be removed (OpenZFS's device removal, which
    /// remaps their blocks, is not implemented).
    pub fn start_log_removal(&self, id: u32) -> Result<(), SpaError> {
        let set = self.vdev_set();
        let top = set
            .get(id)
            .ok_or_else(|| refused(format!("vdev {id} does not exist")))?;
        if top.config.class != VdevClass::Log {
            return Err(refused(
                "only log devices can be removed: tarn does not support removing \
                 top-level data vdevs yet (OpenZFS's device removal)",
            ));
        }
        self.alloc.lock().set_disabled(id, true);
        Ok(())
    }

    /// Gives up removing log vdev `id`: it takes allocations again, unless
    /// it is faulted.
    pub fn cancel_log_removal(&self, id: u32) {
        if !self.vdev_faulted(id) {
            self.alloc.lock().set_disabled(id, false);
        }
    }

    /// Last step of removing log vdev `id`, once nothing is allocated on
    /// it: it leaves the set (a hole unless it was the last id) and the
    /// allocator now; the next commit makes that durable.
    pub fn finish_log_removal(&self, id: u32) -> Result<(), SpaError> {
        let mut state = self.state.lock();
        let old = self.vdev_set();
        let top = old
            .get(id)
            .filter(|t| t.config.class == VdevClass::Log)
            .ok_or_else(|| refused(format!("vdev {id} is not a log vdev")))?
            .clone();
        let mut alloc = self.alloc.lock();
        let held = alloc.group_allocated(id).unwrap_or(0);
        if held != 0 {
            return Err(refused(format!("the log device still holds {held} bytes")));
        }
        alloc.remove_group(id);
        drop(alloc);
        let mut set = (*old).clone();
        set.put(id, None);
        self.install(set);
        let change = state.change.get_or_insert_with(ConfigChange::default);
        change.condense = true;
        change
            .departed
            .extend(top.vdev.leaves().iter().map(|l| l.dev.clone()));
        Ok(())
    }

    /// Detaches leaf `guid` from the mirror holding it (`zpool detach`);
    /// the next commit makes it durable. A mirror left with one device
    /// becomes a single-device vdev. Refused when the leaf is not part of
    /// a mirror, or when no other child holds a good copy of everything.
    /// A leaf of a replacing or spare pair ends the pair instead (see
    /// [`crate::spares`]).
    pub fn detach(&self, guid: u64) -> Result<(), SpaError> {
        if self.detach_paired(guid)? {
            return Ok(());
        }
        let mut state = self.state.lock();
        let old = self.vdev_set();
        let top = old
            .live()
            .find(|t| t.config.leaves().iter().any(|l| l.guid == guid))
            .ok_or_else(|| refused("no such device in pool"))?
            .clone();
        if top.config.kind != VdevKind::Mirror {
            return Err(refused("only applicable to mirror and replacing vdevs"));
        }
        let index = top
            .config
            .children
            .iter()
            .position(|c| c.guid == guid)
            .ok_or_else(|| refused("no such device in pool"))?;
        let leaves = top.vdev.leaves();
        let replica = (0..leaves.len()).any(|i| {
            let l = &leaves[i];
            i != index && l.is_available() && l.stats.write_errors.load(Ordering::Relaxed) == 0
        });
        // A child that missed txgs (offline, missing) is no replica either.
        if !replica || !top.vdev.can_lose(index) {
            return Err(refused("no valid replicas"));
        }
        let departed = leaves[index].dev.clone();
        let vdev = Arc::new(top.vdev.without_child(index)?);
        let config = detached_config(&top.config, index);
        let new = Top::new(vdev, config);
        new.faulted.store(top.is_faulted(), Ordering::Relaxed);
        let mut set = (*old).clone();
        set.put(top.id(), Some(Arc::new(new)));
        self.install(set);
        state
            .change
            .get_or_insert_with(ConfigChange::default)
            .departed
            .push(departed);
        Ok(())
    }

    /// Attaches a new device to the vdev holding leaf `existing` (`zpool
    /// attach`, and the first half of `zpool replace`): a mirror gains a
    /// child, a single device becomes a two-way mirror. The new leaf takes
    /// every write from now on and is marked *resilvering* until a
    /// resilver has copied the older blocks to it (see tarn-dsl's `scan`).
    /// Returns the new leaf's GUID; the next commit makes it durable.
    pub fn attach(
        &self,
        existing: u64,
        path: &str,
        dev: Arc<dyn BlockDevice>,
        is_block: bool,
    ) -> Result<u64, SpaError> {
        let mut state = self.state.lock();
        let old = self.vdev_set();
        let top = old
            .live()
            .find(|t| t.config.leaves().iter().any(|l| l.guid == existing))
            .ok_or_else(|| refused("no such device in pool"))?
            .clone();
        if !matches!(
            top.config.kind,
            VdevKind::Mirror | VdevKind::File | VdevKind::Disk
        ) {
            return Err(refused("can only attach to mirrors and top-level disks"));
        }
        if top.is_faulted() {
            return Err(refused("the vdev is faulted"));
        }
        let guid = crate::spa::new_guid();
        let leaf = tarn_vdev::Leaf::new(guid, path, dev);
        leaf.stats.set_resilvering(true);
        let mirror_guid = crate::spa::new_guid();
        let vdev = Arc::new(
            top.vdev
                .with_child(leaf, mirror_guid)
                .map_err(|e| match e {
                    VdevError::Config(why) => refused(why),
                    e => SpaError::Vdev(e),
                })?,
        );
        let config = attached_config(&top.config, guid, path, is_block, vdev.guid());
        let new = Top::new(vdev, config);
        let mut set = (*old).clone();
        set.put(top.id(), Some(Arc::new(new)));
        self.install(set);
        state.change.get_or_insert_with(ConfigChange::default);
        Ok(guid)
    }

    /// The resilver of leaf `guid` is done (or not needed): it serves
    /// reads like its siblings.
    /// Its DTL is emptied too (it holds every txg now), which the labels
    /// record with the next commit.
    pub fn resilver_done(&self, guid: u64) {
        let mut state = self.state.lock();
        for top in self.vdev_set().live() {
            for leaf in top.vdev.leaves().iter().filter(|l| l.guid == guid) {
                leaf.stats.set_resilvering(false);
                if leaf.has_dtl() {
                    leaf.set_dtl(tarn_vdev::Dtl::default());
                    state.change.get_or_insert_with(ConfigChange::default);
                }
            }
        }
    }

    /// The txgs leaf `guid` missed (`None`: no such leaf).
    pub fn leaf_dtl(&self, guid: u64) -> Option<tarn_vdev::Dtl> {
        self.vdev_set()
            .live()
            .flat_map(|t| t.vdev.leaves().iter())
            .find(|l| l.guid == guid)
            .map(|l| l.dtl())
    }

    /// Whether leaf `guid` missed txgs (its DTL is not empty).
    pub fn leaf_has_dtl(&self, guid: u64) -> bool {
        self.vdev_set()
            .live()
            .flat_map(|t| t.vdev.leaves().iter())
            .any(|l| l.guid == guid && l.has_dtl())
    }

    /// Marks leaf `guid` as being resilvered (a resilver resumed at import).
    pub fn resilver_started(&self, guid: u64) {
        for top in self.vdev_set().live() {
            for leaf in top.vdev.leaves().iter().filter(|l| l.guid == guid) {
                leaf.stats.set_resilvering(true);
            }
        }
    }

    /// Grows the top-level vdev holding leaf `guid` to what its devices
    /// offer now — after every device of a mirror or raidz was replaced by
    /// a larger one (`autoexpand=on`, `zpool online -e`) — by adding
    /// metaslabs of the same size at its end. Nothing happens while one of
    /// its leaves is being resilvered or when the gain is less than one
    /// metaslab. Returns the old and new size when it grew; the next
    /// commit records it in the labels.
    pub fn expand(&self, guid: u64) -> Result<Option<(u64, u64)>, SpaError> {
        let mut state = self.state.lock();
        let set = self.vdev_set();
        let Some(top) = set
            .live()
            .find(|t| t.vdev.leaves().iter().any(|l| l.guid == guid))
            .cloned()
        else {
            return Err(refused("no such device in pool"));
        };
        if top.vdev.leaves().iter().any(|l| l.stats.resilvering()) {
            return Ok(None);
        }
        // A file or disk grown in place: look at its size again. Its end
        // labels move with its end, so the next commit rewrites the labels.
        for leaf in top.vdev.leaves() {
            let before = leaf.dev.size();
            match leaf.dev.refresh_size() {
                Ok(now) if now != before => {
                    state.change.get_or_insert_with(ConfigChange::default);
                }
                Ok(_) => {}
                Err(e) => eprintln!("tarn: cannot read the size of {}: {e}", leaf.path),
            }
        }
        let grown = top.vdev.resized()?;
        let shift = top.config.metaslab_shift;
        let (old, new) = (top.config.asize, grown.asize());
        let count = accounting::metaslab_count(new, shift);
        if count <= accounting::metaslab_count(old, shift) {
            return Ok(None);
        }
        let mut config = top.config.clone();
        config.asize = new;
        let replacement = Top::new(Arc::new(grown), config);
        replacement.copy_fault(&top);
        let mut new_set = (*set).clone();
        new_set.put(top.id(), Some(Arc::new(replacement)));
        self.install(new_set);
        self.alloc.lock().grow_group(top.id(), count);
        state.change.get_or_insert_with(ConfigChange::default);
        Ok(Some((old, new)))
    }

    /// Usable leaves that missed txgs (a DTL), not being resilvered: what a
    /// resilver should rebuild.
    pub fn stale_leaves(&self) -> Vec<u64> {
        self.vdev_set()
            .live()
            .flat_map(|t| t.vdev.leaves().iter())
            .filter(|l| l.is_available() && l.has_dtl() && !l.stats.resilvering())
            .map(|l| l.guid)
            .collect()
    }

    /// The leaves being resilvered.
    pub fn resilvering_leaves(&self) -> Vec<u64> {
        self.vdev_set()
            .live()
            .flat_map(|t| t.vdev.leaves().iter())
            .filter(|l| l.stats.resilvering())
            .map(|l| l.guid)
            .collect()
    }

    /// The top-level vdevs with a leaf being resilvered.
    pub fn resilvering_tops(&self) -> Vec<u32> {
        self.vdev_set()
            .live()
            .filter(|t| t.vdev.leaves().iter().any(|l| l.stats.resilvering()))
            .map(|t| t.id())
            .collect()
    }

    /// The id of the top-level vdev holding leaf `guid`.
    pub fn top_of_leaf(&self, guid: u64) -> Option<u32> {
        self.vdev_set()
            .live()
            .find(|t| t.vdev.leaves().iter().any(|l| l.guid == guid))
            .map(|t| t.id())
    }

    /// A log block write or flush on `vdev` failed: a log vdev is faulted
    /// (see the module comment). Returns the error for the caller.
    pub(crate) fn log_io_failed(&self, vdev: u32, e: VdevError) -> StoreError {
        let set = self.vdev_set();
        if let Some(top) = set.get(vdev) {
            if top.config.class == VdevClass::Log && !top.faulted.swap(true, Ordering::Relaxed) {
                for leaf in top.vdev.leaves() {
                    leaf.set_state(LeafState::Faulted);
                }
                self.alloc.lock().set_disabled(vdev, true);
                eprintln!(
                    "tarn: pool '{}': log vdev {vdev} faulted after an I/O error ({e}); \
                     the intent log continues on the data vdevs",
                    self.name()
                );
            }
        }
        StoreError::Io(e.to_string())
    }

    /// The labels of a configuration change at `txg`: the added vdevs'
    /// first (see the module comment), then every other vdev's.
    pub(crate) fn write_config(
        &self,
        set: &VdevSet,
        change: &ConfigChange,
        txg: u64,
    ) -> Result<(), SpaError> {
        let usable = |t: &&Arc<Top>| !t.is_faulted();
        let (added, rest): (Vec<&Arc<Top>>, Vec<&Arc<Top>>) = set
            .live()
            .filter(usable)
            .partition(|t| change.added.contains(&t.id()));
        for top in added.into_iter().chain(rest) {
            self.write_top_labels(set, top, PoolState::Active, txg)?;
        }
        self.write_spare_labels(set, txg);
        Ok(())
    }

    /// A configuration change is durable: the added vdevs take
    /// allocations, the departed devices forget the pool.
    pub(crate) fn config_durable(&self, change: ConfigChange) {
        {
            let set = self.vdev_set();
            let mut alloc = self.alloc.lock();
            for id in &change.added {
                if set.get(*id).is_some_and(|t| !t.is_faulted()) {
                    alloc.set_disabled(*id, false);
                }
            }
        }
        for dev in &change.departed {
            if let Err(e) = tarn_vdev::clear_labels(dev.as_ref()) {
                eprintln!(
                    "tarn: pool '{}': cannot clear the labels of a device that left it: {e}",
                    self.name()
                );
            }
        }
    }
}

/// A vdev's config with a new leaf: a mirror gains a child; a single
/// device becomes a mirror (`mirror_guid`) of itself and the new leaf.
fn attached_config(
    top: &VdevConfig,
    guid: u64,
    path: &str,
    is_block: bool,
    mirror_guid: u64,
) -> VdevConfig {
    let leaf = |id: u64| VdevConfig {
        kind: if is_block {
            VdevKind::Disk
        } else {
            VdevKind::File
        },
        id,
        guid,
        path: Some(path.to_string()),
        ashift: 0,
        asize: 0,
        metaslab_shift: 0,
        class: top.class,
        create_txg: top.create_txg,
        children: vec![],
        offline: false,
        faulted: false,
        dtl: Vec::new(),
    };
    if top.kind == VdevKind::Mirror {
        let mut cfg = top.clone();
        let id = cfg.children.len() as u64;
        cfg.children.push(leaf(id));
        return cfg;
    }
    let old_leaf = VdevConfig {
        id: 0,
        ashift: 0,
        asize: 0,
        metaslab_shift: 0,
        children: vec![],
        ..top.clone()
    };
    VdevConfig {
        kind: VdevKind::Mirror,
        id: top.id,
        guid: mirror_guid,
        path: None,
        ashift: top.ashift,
        asize: top.asize,
        metaslab_shift: top.metaslab_shift,
        class: top.class,
        create_txg: top.create_txg,
        children: vec![old_leaf, leaf(1)],
        offline: false,
        faulted: false,
        dtl: Vec::new(),
    }
}

/// A mirror's config without child `index`: a mirror of the others, or
/// the one left as a single-device vdev in the mirror's place.
fn detached_config(mirror: &VdevConfig, index: usize) -> VdevConfig {
    let mut kept: Vec<VdevConfig> = mirror
        .children
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != index)
        .map(|(_, c)| c.clone())
        .collect();
    if kept.len() == 1 {
        let leaf = kept.pop().expect("one child");
        return VdevConfig {
            id: mirror.id,
            ashift: mirror.ashift,
            asize: mirror.asize,
            metaslab_shift: mirror.metaslab_shift,
            class: mirror.class,
            create_txg: mirror.create_txg,
            ..leaf
        };
    }
    for (i, c) in kept.iter_mut().enumerate() {
        c.id = i as u64;
    }
    VdevConfig {
        children: kept,
        ..mirror.clone()
    }
}
