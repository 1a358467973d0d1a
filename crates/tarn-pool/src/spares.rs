//! Hot spares, and the pairs a replace or a spare makes in a vdev
//! (OpenZFS's `spa_vdev_attach` with `replacing`, `spare` vdevs,
//! `spa_vdev_resilver_done` and zed's retire agent).
//!
//! ## Pairs
//! A replace pairs the old device with the new one in its position of
//! the vdev: the configuration gets a `replacing` node holding both (a
//! child of the mirror or raidz, or the top-level vdev itself in place of
//! a single device), and the [`TopVdev`] a position of two leaves (see
//! tarn-vdev's `top.rs`). Both take every write; the new one is resilvered
//! and read only once complete, the old one keeps serving meanwhile — a
//! raidz is never short of a member during a replace. A hot spare standing
//! in for a failed member makes the same pair, as a `spare` node.
//!
//! When a resilver finishes, [`Spa::finish_pairs`] ends what it completed:
//! a `replacing` pair whose new device is complete loses the old one; a
//! `spare` pair whose original device was brought back (`zpool clear`,
//! `zpool online`) or replaced, and is complete, returns the spare (as
//! OpenZFS's `vdev_unspare`). A spare put in by hand for a healthy device
//! stays until detached. `zpool detach` ends a pair by hand: detaching the new device of
//! a replace cancels it; detaching the spare returns it to the spares;
//! detaching the original makes the spare a permanent member.
//!
//! ## Spares
//! The pool's spares are listed in every label (`LabelConfig::spares`).
//! An available spare carries a label of its own, with state `spare` and
//! only itself as its tree, so that import finds it; in use, it carries
//! the label of the vdev it serves in. A spare is never part of the GUID
//! sum unless in use.
//!
//! When [`Spa::diagnose`] faults a leaf or finds it removed, the leaf is
//! queued; [`Spa::activate_spares`] (run by the pool after a commit) pairs
//! each with the first available spare large enough, and the caller starts
//! a resilver of it.

use std::sync::Arc;

use tarn_format::label::{LabelConfig, PoolState, VdevClass, VdevConfig, VdevKind};
use tarn_vdev::{BlockDevice, Leaf, TopVdev, VdevError};

use crate::vdevs::{ConfigChange, Top, VdevSet};
use crate::{Spa, SpaError};

fn refused(why: impl Into<String>) -> SpaError {
    SpaError::Config(why.into())
}

fn vdev_refused(e: VdevError) -> SpaError {
    match e {
        VdevError::Config(why) => refused(why),
        e => SpaError::Vdev(e),
    }
}

/// One hot spare of the pool.
pub(crate) struct SpareDev {
    /// Its leaf config (kind, GUID, path).
    pub(crate) config: VdevConfig,
    pub(crate) dev: Arc<dyn BlockDevice>,
    /// Whether its device was found (at import) or given.
    pub(crate) found: bool,
}

/// What `zpool status` shows of a spare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpareStatus {
    pub guid: u64,
    pub path: String,
    /// `AVAIL`, `INUSE` or `UNAVAIL`.
    pub state: &'static str,
}

/// Leaf config of a device joining the pool.
pub fn leaf_config(guid: u64, path: &str, is_block: bool, class: VdevClass) -> VdevConfig {
    VdevConfig {
        kind: if is_block {
            VdevKind::Disk
        } else {
            VdevKind::File
        },
        id: 0,
        guid,
        path: Some(path.to_string()),
        ashift: 0,
        asize: 0,
        metaslab_shift: 0,
        class,
        create_txg: 0,
        children: vec![],
        offline: false,
        faulted: false,
        dtl: Vec::new(),
    }
}

fn is_pair(cfg: &VdevConfig) -> bool {
    matches!(cfg.kind, VdevKind::Replacing | VdevKind::Spare)
}

/// `top` with leaf `existing` replaced by a pair node of `kind` holding it
/// and `new` (see the module comment).
fn paired_config(
    top: &VdevConfig,
    existing: u64,
    mut new: VdevConfig,
    kind: VdevKind,
    pair_guid: u64,
) -> Option<VdevConfig> {
    let mut pair = |old: &VdevConfig, id: u64| -> VdevConfig {
        let old = VdevConfig {
            id: 0,
            ashift: 0,
            asize: 0,
            metaslab_shift: 0,
            children: vec![],
            ..old.clone()
        };
        new.id = 1;
        new.class = old.class;
        new.create_txg = old.create_txg;
        VdevConfig {
            kind,
            id,
            guid: pair_guid,
            path: None,
            ashift: 0,
            asize: 0,
            metaslab_shift: 0,
            class: old.class,
            create_txg: old.create_txg,
            children: vec![old, new.clone()],
            offline: false,
            faulted: false,
            dtl: Vec::new(),
        }
    };
    if top.is_leaf() {
        if top.guid != existing {
            return None;
        }
        return Some(VdevConfig {
            ashift: top.ashift,
            asize: top.asize,
            metaslab_shift: top.metaslab_shift,
            ..pair(top, top.id)
        });
    }
    let i = top.children.iter().position(|c| c.guid == existing)?;
    let mut cfg = top.clone();
    cfg.children[i] = pair(&top.children[i], top.children[i].id);
    Some(cfg)
}

/// `top` with leaf `gone` taken out of its pair: the other leaf stands in
/// the pair's place. `None` when `gone` is not in a pair.
fn unpaired_config(top: &VdevConfig, gone: u64) -> Option<VdevConfig> {
    let keep = |pair: &VdevConfig| -> Option<VdevConfig> {
        let i = pair.children.iter().position(|c| c.guid == gone)?;
        pair.children
            .iter()
            .find(|c| c.guid != gone)
            .cloned()
            .filter(|_| i < 2)
    };
    if is_pair(top) {
        let kept = keep(top)?;
        return Some(VdevConfig {
            id: top.id,
            ashift: top.ashift,
            asize: top.asize,
            metaslab_shift: top.metaslab_shift,
            class: top.class,
            create_txg: top.create_txg,
            ..kept
        });
    }
    let i = top
        .children
        .iter()
        .position(|c| is_pair(c) && c.children.iter().any(|l| l.guid == gone))?;
    let kept = keep(&top.children[i])?;
    let mut cfg = top.clone();
    cfg.children[i] = VdevConfig {
        id: top.children[i].id,
        ..kept
    };
    Some(cfg)
}

/// The pair node holding leaf `guid` in `top`, if any.
fn pair_of(top: &VdevConfig, guid: u64) -> Option<&VdevConfig> {
    if is_pair(top) {
        return top.children.iter().any(|c| c.guid == guid).then_some(top);
    }
    top.children
        .iter()
        .find(|c| is_pair(c) && c.children.iter().any(|l| l.guid == guid))
}

/// The top-level vdev holding leaf `guid`, and the leaf's index in it.
fn find_leaf(set: &VdevSet, guid: u64) -> Option<(Arc<Top>, usize)> {
    set.live().find_map(|t| {
        let i = t.vdev.leaves().iter().position(|l| l.guid == guid)?;
        Some((t.clone(), i))
    })
}

impl Spa {
    /// Pairs leaf `existing` with `leaf` (config `leaf_cfg`) as `kind`;
    /// the caller holds `state` and records the change.
    fn pair_locked(
        &self,
        existing: u64,
        leaf: Leaf,
        leaf_cfg: VdevConfig,
        kind: VdevKind,
    ) -> Result<(), SpaError> {
        let set = self.vdev_set();
        let (top, index) =
            find_leaf(&set, existing).ok_or_else(|| refused("no such device in pool"))?;
        if top.is_faulted() {
            return Err(refused("the vdev is faulted"));
        }
        if kind == VdevKind::Spare {
            // A new pair: the original's return is a later event.
            self.unspare.lock().remove(&existing);
        }
        let pair_guid = crate::spa::new_guid();
        let vdev: TopVdev = top
            .vdev
            .with_pair(index, leaf, pair_guid)
            .map_err(vdev_refused)?;
        let config = paired_config(&top.config, existing, leaf_cfg, kind, vdev.guid())
            .ok_or_else(|| refused("the device is already being replaced or spared"))?;
        let new = Top::new(Arc::new(vdev), config);
        new.copy_fault(&top);
        let mut next = (*set).clone();
        next.put(top.vdev.id(), Some(Arc::new(new)));
        self.install(next);
        Ok(())
    }

    /// Starts replacing leaf `existing` with a new device (`zpool
    /// replace`): the two are paired (see the module comment) until a
    /// resilver has made the new one complete. Returns the new leaf's
    /// GUID; the caller forces a commit and starts the resilver.
    ///
    /// A leaf already paired with a spare is swapped for the new device
    /// inside the pair: once the new device is resilvered, the spare goes
    /// back to the spares.
    pub fn replace(
        &self,
        existing: u64,
        path: &str,
        dev: Arc<dyn BlockDevice>,
        is_block: bool,
    ) -> Result<u64, SpaError> {
        let mut state = self.state.lock();
        let set = self.vdev_set();
        let (top, index) =
            find_leaf(&set, existing).ok_or_else(|| refused("no such device in pool"))?;
        if self.is_spare(existing) {
            return Err(refused(
                "the device is a hot spare in use; detach it, or replace the device it stands in for",
            ));
        }
        let guid = crate::spa::new_guid();
        let leaf = Leaf::new(guid, path, dev.clone());
        leaf.stats.set_resilvering(true);
        let leaf_cfg = leaf_config(guid, path, is_block, top.config.class);
        let in_spare_pair =
            pair_of(&top.config, existing).is_some_and(|p| p.kind == VdevKind::Spare);
        if !in_spare_pair {
            self.pair_locked(existing, leaf, leaf_cfg, VdevKind::Replacing)?;
            state.change.get_or_insert_with(ConfigChange::default);
            return Ok(guid);
        }
        // Swap the original inside its spare pair; once it is complete,
        // the spare returns.
        self.unspare(guid);
        let departed = top.vdev.leaves()[index].dev.clone();
        let vdev = top
            .vdev
            .with_child_swapped(index, leaf)
            .map_err(vdev_refused)?;
        let mut config = top.config.clone();
        swap_leaf(&mut config, existing, &leaf_cfg);
        let new = Top::new(Arc::new(vdev), config);
        new.copy_fault(&top);
        let mut next = (*set).clone();
        next.put(top.vdev.id(), Some(Arc::new(new)));
        self.install(next);
        state
            .change
            .get_or_insert_with(ConfigChange::default)
            .departed
            .push(departed);
        Ok(guid)
    }

    /// `zpool detach` of a leaf in a pair (see the module comment).
    /// Refused when the vdev would be left without a complete copy of
    /// what the leaf holds. `Ok(false)`: the leaf is in no pair.
    pub(crate) fn detach_paired(&self, guid: u64) -> Result<bool, SpaError> {
        let mut state = self.state.lock();
        let set = self.vdev_set();
        let (top, index) =
            find_leaf(&set, guid).ok_or_else(|| refused("no such device in pool"))?;
        let Some(pair) = pair_of(&top.config, guid) else {
            return Ok(false);
        };
        let other = pair
            .children
            .iter()
            .find(|c| c.guid != guid)
            .map(|c| c.guid)
            .unwrap_or(0);
        if !top.vdev.can_lose(index) {
            return Err(refused("no valid replicas"));
        }
        let config = unpaired_config(&top.config, guid)
            .ok_or_else(|| refused("only applicable to mirror and replacing vdevs"))?;
        let vdev = top.vdev.without_paired(index).map_err(vdev_refused)?;
        let dev = top.vdev.leaves()[index].dev.clone();
        let new = Top::new(Arc::new(vdev), config);
        new.copy_fault(&top);
        let mut next = (*set).clone();
        next.put(top.vdev.id(), Some(Arc::new(new)));
        self.install(next);
        let change = state.change.get_or_insert_with(ConfigChange::default);
        if self.is_spare(guid) {
            // Back to the spares: its label says so at the commit.
        } else {
            if self.is_spare(other) {
                // The spare takes the original's place for good.
                self.spares.lock().retain(|s| s.config.guid != other);
            }
            change.departed.push(dev);
        }
        Ok(true)
    }

    /// Ends the pairs a finished resilver completed (see the module
    /// comment); returns the GUIDs of the leaves detached.
    pub fn finish_pairs(&self) -> Vec<u64> {
        let set = self.vdev_set();
        let mut done = Vec::new();
        for top in set.live() {
            let leaves = top.vdev.leaves();
            let complete = |guid: u64| {
                leaves.iter().any(|l| {
                    l.guid == guid && l.is_available() && !l.has_dtl() && !l.stats.resilvering()
                })
            };
            let pairs: Vec<&VdevConfig> = if is_pair(&top.config) {
                vec![&top.config]
            } else {
                top.config.children.iter().filter(|c| is_pair(c)).collect()
            };
            for pair in pairs {
                // Two leaves (`spa::check_shape` at open).
                let [first, second] = pair.children.as_slice() else {
                    continue;
                };
                match pair.kind {
                    VdevKind::Replacing if complete(second.guid) => done.push(first.guid),
                    VdevKind::Spare
                        if complete(first.guid) && self.unspare.lock().contains(&first.guid) =>
                    {
                        done.push(second.guid)
                    }
                    _ => {}
                }
            }
        }
        done.retain(|&g| match self.detach_paired(g) {
            Ok(true) => true,
            Ok(false) => false,
            Err(e) => {
                eprintln!(
                    "tarn: pool '{}': cannot end the replace or spare of a device: {e}",
                    self.name()
                );
                false
            }
        });
        done
    }

    // ---- Spares -----------------------------------------------------------

    /// Whether `guid` is one of the pool's hot spares.
    pub fn is_spare(&self, guid: u64) -> bool {
        self.spares.lock().iter().any(|s| s.config.guid == guid)
    }

    /// The spares' leaf configs, for labels.
    pub(crate) fn spare_configs(&self) -> Vec<VdevConfig> {
        self.spares
            .lock()
            .iter()
            .map(|s| s.config.clone())
            .collect()
    }

    fn in_use(set: &VdevSet, guid: u64) -> bool {
        set.live()
            .any(|t| t.vdev.leaves().iter().any(|l| l.guid == guid))
    }

    /// The spares as `zpool status` shows them.
    pub fn spares_status(&self) -> Vec<SpareStatus> {
        let set = self.vdev_set();
        self.spares
            .lock()
            .iter()
            .map(|s| SpareStatus {
                guid: s.config.guid,
                path: s
                    .config
                    .path
                    .clone()
                    .unwrap_or_else(|| s.config.guid.to_string()),
                state: if Spa::in_use(&set, s.config.guid) {
                    "INUSE"
                } else if s.found && s.dev.is_present() {
                    "AVAIL"
                } else {
                    "UNAVAIL"
                },
            })
            .collect()
    }

    /// Adds hot spares (`zpool add POOL spare …`, `zpool create … spare
    /// …`); the caller has vetted the devices and forces a commit, which
    /// labels them.
    pub fn add_spares(
        &self,
        devs: Vec<(String, Arc<dyn BlockDevice>, bool)>,
    ) -> Result<Vec<u64>, SpaError> {
        let mut state = self.state.lock();
        let mut spares = self.spares.lock();
        let mut guids = Vec::new();
        for (path, dev, is_block) in devs {
            if spares
                .iter()
                .any(|s| s.config.path.as_deref() == Some(path.as_str()))
            {
                return Err(refused(format!("{path} is already a spare of this pool")));
            }
            tarn_vdev::clear_labels(dev.as_ref())?;
            let guid = crate::spa::new_guid();
            spares.push(SpareDev {
                config: leaf_config(guid, &path, is_block, VdevClass::Normal),
                dev,
                found: true,
            });
            guids.push(guid);
        }
        state.change.get_or_insert_with(ConfigChange::default);
        Ok(guids)
    }

    /// Removes spare `guid` (`zpool remove`); refused while it is in use.
    pub fn remove_spare(&self, guid: u64) -> Result<(), SpaError> {
        let mut state = self.state.lock();
        if Spa::in_use(&self.vdev_set(), guid) {
            return Err(refused(
                "the spare is currently in use; detach it first (zpool detach)",
            ));
        }
        let mut spares = self.spares.lock();
        let i = spares
            .iter()
            .position(|s| s.config.guid == guid)
            .ok_or_else(|| refused("no such spare in pool"))?;
        let spare = spares.remove(i);
        let change = state.change.get_or_insert_with(ConfigChange::default);
        if spare.found {
            change.departed.push(spare.dev);
        }
        Ok(())
    }

    /// The spares an imported pool's labels list, with the devices found
    /// for them (a spare not found shows UNAVAIL).
    pub fn load_spares(
        &self,
        configs: &[VdevConfig],
        devices: &dyn Fn(&VdevConfig) -> Option<Arc<dyn BlockDevice>>,
    ) {
        let set = self.vdev_set();
        let mut spares = self.spares.lock();
        spares.clear();
        for cfg in configs {
            if !crate::spa::is_leaf_config(cfg) {
                eprintln!(
                    "tarn: pool '{}': ignoring hot spare {} whose label config is not a device",
                    self.name(),
                    cfg.guid
                );
                continue;
            }
            // In use, its device is the leaf's.
            let live = set
                .live()
                .flat_map(|t| t.vdev.leaves().iter())
                .find(|l| l.guid == cfg.guid)
                .map(|l| l.dev.clone());
            let (dev, found) = match live.or_else(|| devices(cfg)) {
                Some(dev) => (dev, true),
                None => {
                    let path = cfg.path.clone().unwrap_or_default();
                    let stand_in: Arc<dyn BlockDevice> =
                        Arc::new(tarn_vdev::MissingDevice::new(path, 0));
                    (stand_in, false)
                }
            };
            spares.push(SpareDev {
                config: cfg.clone(),
                dev,
                found,
            });
        }
    }

    /// Labels every available spare as a spare of this pool at `txg`.
    pub(crate) fn write_spare_labels(&self, set: &VdevSet, txg: u64) {
        let all = self.spare_configs();
        for spare in self.spares.lock().iter() {
            if !spare.found || Spa::in_use(set, spare.config.guid) {
                continue;
            }
            let label = LabelConfig {
                version: tarn_format::FORMAT_VERSION,
                name: self.name(),
                pool_guid: self.guid(),
                state: PoolState::Spare,
                txg,
                hostname: String::new(),
                guid: spare.config.guid,
                top_guid: 0,
                vdev_children: set.children(),
                vdev_tree: spare.config.clone(),
                features_for_read: vec![],
                holes: set.holes(),
                spares: all.clone(),
                // Import takes only the device from a spare's label.
                logs: vec![],
            };
            if let Err(e) = tarn_vdev::write_labels(spare.dev.as_ref(), &label) {
                eprintln!(
                    "tarn: pool '{}': cannot label spare {}: {e}",
                    self.name(),
                    spare.config.path.as_deref().unwrap_or("?")
                );
            }
        }
    }

    /// Leaf `guid` was brought back or is new: if it is (or becomes) the
    /// original device of a spare pair, the spare returns once it is
    /// complete.
    pub(crate) fn unspare(&self, guid: u64) {
        self.unspare.lock().insert(guid);
    }

    /// Queues leaf `guid` (faulted or removed) for a spare.
    pub(crate) fn want_spare(&self, guid: u64) {
        if !self.spares.lock().is_empty() {
            self.spare_wanted.lock().push(guid);
        }
    }

    /// Whether a leaf waits for a spare.
    pub fn spares_wanted(&self) -> bool {
        !self.spare_wanted.lock().is_empty()
    }

    /// Pairs each queued faulted or removed leaf with the first available
    /// spare large enough (zed's retire agent); returns the spares put in
    /// use, which the caller resilvers after forcing a commit. A leaf that
    /// is in a pair already, or of a log vdev, gets none.
    pub fn activate_spares(&self) -> Vec<u64> {
        let wanted = std::mem::take(&mut *self.spare_wanted.lock());
        let mut used = Vec::new();
        for failed in wanted {
            match self.activate_spare(failed) {
                Ok(Some(spare)) => used.push(spare),
                Ok(None) => {}
                Err(e) => eprintln!(
                    "tarn: pool '{}': no hot spare for a failed device: {e}",
                    self.name()
                ),
            }
        }
        used
    }

    /// Puts a spare in for leaf `failed` (`zpool replace POOL DEV SPARE`
    /// does the same by hand with `spare`); `Ok(None)` when none fits.
    pub fn activate_spare(&self, failed: u64) -> Result<Option<u64>, SpaError> {
        let mut state = self.state.lock();
        let set = self.vdev_set();
        let Some((top, _)) = find_leaf(&set, failed) else {
            return Ok(None);
        };
        if top.config.class == VdevClass::Log || pair_of(&top.config, failed).is_some() {
            return Ok(None);
        }
        let candidates: Vec<(VdevConfig, Arc<dyn BlockDevice>)> = self
            .spares
            .lock()
            .iter()
            .filter(|s| s.found && s.dev.is_present() && !Spa::in_use(&set, s.config.guid))
            .map(|s| (s.config.clone(), s.dev.clone()))
            .collect();
        for (cfg, dev) in candidates {
            let path = cfg.path.clone().unwrap_or_default();
            let leaf = Leaf::new(cfg.guid, path.clone(), dev);
            leaf.stats.set_resilvering(true);
            match self.pair_locked(failed, leaf, cfg.clone(), VdevKind::Spare) {
                Ok(()) => {
                    state.change.get_or_insert_with(ConfigChange::default);
                    eprintln!(
                        "tarn: pool '{}': hot spare {path} stands in for a failed device",
                        self.name()
                    );
                    return Ok(Some(cfg.guid));
                }
                // Too small: try the next.
                Err(SpaError::Config(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Puts spare `spare` in for leaf `existing` by hand (`zpool replace
    /// POOL DEV SPARE`). Returns whether `spare` is one of the spares.
    pub fn use_spare(&self, existing: u64, spare: u64) -> Result<bool, SpaError> {
        let mut state = self.state.lock();
        let set = self.vdev_set();
        let Some((cfg, dev)) = self
            .spares
            .lock()
            .iter()
            .find(|s| s.config.guid == spare)
            .map(|s| (s.config.clone(), s.dev.clone()))
        else {
            return Ok(false);
        };
        if Spa::in_use(&set, spare) {
            return Err(refused("the spare is already in use"));
        }
        let leaf = Leaf::new(spare, cfg.path.clone().unwrap_or_default(), dev);
        leaf.stats.set_resilvering(true);
        self.pair_locked(existing, leaf, cfg, VdevKind::Spare)?;
        state.change.get_or_insert_with(ConfigChange::default);
        Ok(true)
    }
}

/// Sets leaf `old`'s GUID, path and kind in `cfg` to `new`'s.
fn swap_leaf(cfg: &mut VdevConfig, old: u64, new: &VdevConfig) {
    if cfg.is_leaf() && cfg.guid == old {
        cfg.guid = new.guid;
        cfg.path.clone_from(&new.path);
        cfg.kind = new.kind;
        cfg.offline = false;
        cfg.dtl.clear();
        return;
    }
    for c in &mut cfg.children {
        swap_leaf(c, old, new);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(guid: u64, id: u64) -> VdevConfig {
        VdevConfig {
            id,
            ..leaf_config(guid, &format!("/d{guid}"), false, VdevClass::Normal)
        }
    }

    fn raidz() -> VdevConfig {
        VdevConfig {
            kind: VdevKind::Raidz { nparity: 1 },
            id: 2,
            guid: 100,
            ashift: 12,
            asize: 1 << 30,
            metaslab_shift: 24,
            children: vec![leaf(1, 0), leaf(2, 1), leaf(3, 2)],
            ..leaf_config(100, "", false, VdevClass::Normal)
        }
    }

    #[test]
    fn pair_and_unpair_a_raidz_member() {
        let top = VdevConfig {
            path: None,
            ..raidz()
        };
        let paired = paired_config(&top, 2, leaf(9, 0), VdevKind::Replacing, 50).unwrap();
        let pair = &paired.children[1];
        assert_eq!(pair.kind, VdevKind::Replacing);
        assert_eq!((pair.id, pair.guid), (1, 50));
        assert_eq!(
            pair.children
                .iter()
                .map(|c| (c.guid, c.id))
                .collect::<Vec<_>>(),
            [(2, 0), (9, 1)]
        );
        assert_eq!(pair_of(&paired, 9).map(|p| p.guid), Some(50));
        assert!(pair_of(&paired, 1).is_none());
        // Ending the replace keeps the new device in the member's place.
        let done = unpaired_config(&paired, 2).unwrap();
        assert_eq!(done.children[1].guid, 9);
        assert_eq!(done.children[1].id, 1);
        // Canceling it keeps the old one: the config is as before.
        assert_eq!(unpaired_config(&paired, 9).unwrap(), top);
        assert!(unpaired_config(&top, 2).is_none());
    }

    #[test]
    fn a_single_device_pair_is_the_top_level_vdev() {
        let single = VdevConfig {
            id: 3,
            ashift: 12,
            asize: 1 << 30,
            metaslab_shift: 24,
            create_txg: 7,
            ..leaf(5, 3)
        };
        let paired = paired_config(&single, 5, leaf(6, 0), VdevKind::Spare, 60).unwrap();
        assert_eq!(paired.kind, VdevKind::Spare);
        assert_eq!((paired.id, paired.ashift, paired.asize), (3, 12, 1 << 30));
        assert_eq!(paired.children[0].asize, 0);
        assert_eq!(paired.children[1].create_txg, 7);
        // Detaching the spare gives back the single device, as it was.
        assert_eq!(unpaired_config(&paired, 6).unwrap(), single);
        // Detaching the original leaves the spare as the vdev.
        let kept = unpaired_config(&paired, 5).unwrap();
        assert_eq!((kept.guid, kept.id, kept.asize), (6, 3, 1 << 30));
        assert!(kept.is_leaf());
    }
}
