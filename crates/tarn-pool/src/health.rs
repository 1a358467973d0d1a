//! Device states of a running pool: `zpool offline`/`online`/`clear`, the
//! zed-like fault rules, dirty time logs, and suspending the pool when a
//! top-level vdev is lost (OpenZFS's `vdev_offline`, `vdev_online`,
//! `vdev_clear`, `vdev_fault`, zed's diagnosis engine and `spa_suspend`).
//!
//! ## Leaf states
//! A leaf ([`tarn_vdev::Leaf`]) is ONLINE, DEGRADED (too many checksum
//! errors, or too many I/O errors on a leaf that cannot be spared: still
//! used), OFFLINE (the administrator), FAULTED (too many I/O errors),
//! UNAVAIL (its device could not be opened: a [`tarn_vdev::MissingDevice`]
//! stands in, with the size the configuration implies) or REMOVED. Only
//! ONLINE and DEGRADED leaves take I/O; the top-level vdevs already
//! succeed while no more children fail than their redundancy covers.
//!
//! **Invariant:** no state change made here leaves a top-level vdev with
//! fewer good children than its layout needs. `offline` is refused ("no
//! valid replicas") and a fault becomes DEGRADED when the leaf could not
//! be spared; a child that missed txgs (a DTL not yet resilvered) does not
//! count as a good replica. Only a device that really fails can lose a
//! vdev, and then the pool suspends (below).
//!
//! ## What a leaf missed
//! Each leaf keeps a [`tarn_vdev::Dtl`]. At every commit a leaf that takes
//! no I/O, or whose write failed since the last commit, gets that txg
//! added. Bringing a leaf back does not empty it — a resilver will, once
//! it has rewritten those txgs' blocks — and `zpool status` says the
//! device needs resilvering. Meanwhile nothing stale is ever returned:
//! every read is checked against the block pointer's checksum, and a
//! mirror or raidz read that meets a stale copy rewrites it.
//!
//! A state change that must survive (offline without `-t`, online, a
//! fault, whose DTL the labels then carry) is made durable by the next
//! commit, which rewrites the labels of every usable leaf (see
//! [`crate::vdevs`]); the caller forces that commit.
//!
//! ## Faults (zed)
//! [`Spa::diagnose`] runs at every commit and whenever a write is about
//! to suspend the pool. A device that is gone from its path (a deleted
//! file vdev, a vanished block device) is REMOVED when its vdev can spare
//! it (the last copy keeps serving from the open descriptor). More than `FAULT_IO_ERRORS_MAX` I/O errors within
//! `FAULT_WINDOW_MS` fault a leaf, more than `FAULT_CHECKSUM_ERRORS_MAX`
//! checksum errors degrade it. `zpool clear` forgets the errors and brings
//! back every faulted or degraded leaf whose device answers a probe.
//!
//! ## Suspension
//! A block write that fails because its top-level vdev lost too many
//! children suspends the pool ([`crate::suspend`]) and waits, with the
//! `state` lock held if it is part of a commit, for `zpool clear`; then it
//! is issued again. So `clear` must not take `state`: it only touches
//! leaves, the allocator and the gate.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tarn_format::label::{VdevClass, VdevConfig};
use tarn_vdev::{BlockDevice, Dtl, Layout, Leaf, LeafState, TopVdev};

use crate::suspend::{FailMode, SuspendGate};
use crate::vdevs::{ConfigChange, Top, VdevSet};
use crate::{tunables, Spa, SpaError};

/// Health of a vdev or a pool as `zpool status` and `zpool import` show
/// it, ordered from best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Health {
    Online,
    Degraded,
    Unavail,
}

impl Health {
    pub fn name(self) -> &'static str {
        match self {
            Health::Online => "ONLINE",
            Health::Degraded => "DEGRADED",
            Health::Unavail => "UNAVAIL",
        }
    }
}

/// The health of an interior vdev (a mirror, a raidz, a replacing or spare
/// pair) from its children's, OpenZFS's rule: DEGRADED while no more
/// children are unavailable than its layout tolerates
/// ([`tarn_vdev::Layout::tolerated_failures`]), UNAVAIL ("insufficient
/// replicas") beyond that.
pub fn interior_health(cfg: &VdevConfig, children: &[Health]) -> Health {
    let tolerated = Layout::of(cfg.kind).tolerated_failures(cfg.children.len());
    match children.iter().filter(|h| **h == Health::Unavail).count() {
        0 if children.contains(&Health::Degraded) => Health::Degraded,
        0 => Health::Online,
        n if n <= tolerated => Health::Degraded,
        _ => Health::Unavail,
    }
}

/// The health of the vdev `cfg` describes, given each leaf's.
pub fn vdev_health(cfg: &VdevConfig, leaf: &dyn Fn(&VdevConfig) -> Health) -> Health {
    if cfg.is_leaf() {
        return leaf(cfg);
    }
    let children: Vec<Health> = cfg.children.iter().map(|c| vdev_health(c, leaf)).collect();
    interior_health(cfg, &children)
}

/// A pool's health from its top-level vdevs': the sickest data vdev's; a
/// sick log vdev only degrades it (the log is read only after a crash).
pub fn pool_health(tops: impl IntoIterator<Item = (VdevClass, Health)>) -> Health {
    tops.into_iter()
        .map(|(class, health)| match class {
            VdevClass::Log => health.min(Health::Degraded),
            _ => health,
        })
        .max()
        .unwrap_or(Health::Online)
}

fn refused(why: impl Into<String>) -> SpaError {
    SpaError::Config(why.into())
}

/// The top-level vdev holding leaf `guid`, and the leaf's index in it.
fn find_leaf(set: &VdevSet, guid: u64) -> Option<(Arc<Top>, usize)> {
    set.live().find_map(|t| {
        let i = t.vdev.leaves().iter().position(|l| l.guid == guid)?;
        Some((t.clone(), i))
    })
}

/// `top`'s config with each leaf's live `offline` and `dtl`: what labels
/// and `zpool status` must see.
pub(crate) fn live_config(top: &Top) -> VdevConfig {
    let mut cfg = top.config.clone();
    let leaves = top.vdev.leaves();
    let mut i = 0;
    patch_leaves(&mut cfg, &mut |lc| {
        if let Some(leaf) = leaves.get(i).filter(|l| l.guid == lc.guid) {
            lc.offline = leaf.offline_persistent();
            lc.faulted = leaf.state() == LeafState::Faulted;
            lc.dtl = leaf.dtl().to_config(!leaf.is_available());
        }
        i += 1;
    });
    cfg
}

fn patch_leaves(cfg: &mut VdevConfig, f: &mut dyn FnMut(&mut VdevConfig)) {
    if cfg.is_leaf() {
        f(cfg);
    }
    for c in &mut cfg.children {
        patch_leaves(c, f);
    }
}

/// Applies what a configuration says of its leaves to the opened vdev:
/// OFFLINE for `offline`, FAULTED for `faulted` (until `zpool clear`),
/// and the DTL (an open range closed at `now`).
pub(crate) fn load_leaf_states(top: &TopVdev, cfg: &VdevConfig, now: u64) {
    for (leaf, lc) in top.leaves().iter().zip(cfg.leaves()) {
        if lc.offline && leaf.is_available() {
            leaf.set_offline(false);
        } else if lc.faulted && leaf.is_available() {
            leaf.set_state(LeafState::Faulted);
        }
        leaf.set_dtl(Dtl::from_config(&lc.dtl, now));
    }
}

/// Bytes of a stand-in device for a leaf of `cfg`'s top-level vdev with
/// `width` children: enough for the vdev's per-child share of `asize`
/// after the labels, so the vdev opens with its recorded geometry.
pub(crate) fn stand_in_size(top: &VdevConfig, width: usize) -> u64 {
    use tarn_format::label::{VDEV_LABEL_END_SIZE, VDEV_LABEL_START_SIZE, VDEV_SIZE_ALIGN};
    let per_child = match top.kind {
        // `width`: its positions (a replacing or spare pair is one).
        tarn_format::label::VdevKind::Raidz { .. } => top.asize / width.max(1) as u64,
        _ => top.asize,
    };
    per_child
        .saturating_add(VDEV_LABEL_START_SIZE + VDEV_LABEL_END_SIZE)
        .saturating_add(VDEV_SIZE_ALIGN - 1)
        & !(VDEV_SIZE_ALIGN - 1)
}

/// "mirror-0: /a, /b are unavailable; it needs 1 of its 2 devices".
fn lost_text(top: &Top) -> String {
    let leaves = top.vdev.leaves();
    let gone: Vec<&str> = leaves
        .iter()
        .filter(|l| !l.is_available())
        .map(|l| l.path.as_str())
        .collect();
    let need = top.vdev.width() - top.vdev.tolerated_failures();
    format!(
        "vdev {}: {} unavailable; it needs {need} of its {} devices",
        top.vdev.id(),
        gone.join(", "),
        top.vdev.width()
    )
}

impl Spa {
    /// The pool's suspension state (the txg engine asks it before holds).
    pub fn suspend_gate(&self) -> &Arc<SuspendGate> {
        &self.gate
    }

    /// Why the pool's I/O is suspended, if it is.
    pub fn suspended(&self) -> Option<String> {
        self.gate.suspended()
    }

    pub fn set_failmode(&self, mode: FailMode) {
        if mode == FailMode::Panic {
            eprintln!(
                "tarn: pool '{}': failmode=panic behaves as failmode=wait: \
                 tarn does not stop the machine for a device",
                self.name()
            );
        }
        self.gate.set_failmode(mode);
    }

    /// Refuses a pool that has a top-level vdev with too few usable
    /// children (import with devices missing).
    /// A log vdev that lost too many devices at open (`zpool import -m`:
    /// the engine asks for it) is faulted, as one that fails while
    /// running: the intent log moves to the data vdevs, and its blocks on
    /// the lost vdev are gone.
    pub(crate) fn fault_lost_logs(&self) {
        for top in self.vdev_set().live() {
            if top.config.class == VdevClass::Log && top.vdev.is_lost() && !top.is_faulted() {
                top.fault_flag().store(true, Ordering::Relaxed);
                self.alloc.lock().set_disabled(top.vdev.id(), true);
                eprintln!(
                    "tarn: pool '{}': log vdev {} is missing; the intent log continues \
                     on the data vdevs",
                    self.name(),
                    top.vdev.id()
                );
            }
        }
    }

    pub(crate) fn check_replicas(&self) -> Result<(), SpaError> {
        let set = self.vdev_set();
        let lost: Vec<String> = set
            .live()
            .filter(|t| t.vdev.is_lost() && !t.is_faulted())
            .map(|t| lost_text(t))
            .collect();
        if lost.is_empty() {
            return Ok(());
        }
        Err(SpaError::Import(format!(
            "one or more devices is currently unavailable (insufficient replicas): {}",
            lost.join("; ")
        )))
    }

    /// Takes leaf `guid` offline (`zpool offline [-t]`); the caller forces
    /// a commit, which records it in the labels unless `temporary`.
    pub fn offline(&self, guid: u64, temporary: bool) -> Result<(), SpaError> {
        let mut state = self.state.lock();
        let set = self.vdev_set();
        let (top, i) = find_leaf(&set, guid).ok_or_else(|| refused("no such device in pool"))?;
        let leaf = &top.vdev.leaves()[i];
        if leaf.state() == LeafState::Offline {
            // Already offline: only the -t flag may change.
            leaf.set_offline(temporary);
        } else {
            if !top.vdev.can_lose(i) {
                return Err(refused("no valid replicas"));
            }
            leaf.set_offline(temporary);
        }
        state.change.get_or_insert_with(ConfigChange::default);
        Ok(())
    }

    /// Brings leaf `guid` back (`zpool online`): an offline, faulted,
    /// degraded or removed leaf whose device answers a probe, or a leaf
    /// that was missing with `dev`, its device found again. The leaf keeps
    /// its DTL: a resilver rebuilds what it missed. The caller forces a
    /// commit.
    pub fn online(&self, guid: u64, dev: Option<Arc<dyn BlockDevice>>) -> Result<(), SpaError> {
        let mut state = self.state.lock();
        let set = self.vdev_set();
        let (top, i) = find_leaf(&set, guid).ok_or_else(|| refused("no such device in pool"))?;
        let leaf = &top.vdev.leaves()[i];
        self.unspare(guid);
        match (leaf.state(), dev) {
            (LeafState::Online, _) => return Ok(()),
            (LeafState::Unavail, Some(dev)) => {
                let fresh = Leaf::new(leaf.guid, leaf.path.clone(), dev);
                fresh.set_dtl(leaf.dtl());
                if !fresh.probe() {
                    return Err(refused("the device does not answer"));
                }
                let vdev = Arc::new(top.vdev.with_child_swapped(i, fresh)?);
                let new = Top::new(vdev, top.config.clone());
                new.copy_fault(&top);
                let mut next = (*set).clone();
                next.put(top.vdev.id(), Some(Arc::new(new)));
                self.install(next);
            }
            (LeafState::Unavail, None) => {
                return Err(refused(
                    "the device could not be opened; reconnect it and try again",
                ))
            }
            _ if !leaf.dev.is_present() || !leaf.probe() => {
                return Err(refused(
                    "the device does not answer; reconnect it and try again",
                ))
            }
            _ => {
                leaf.clear_errors();
                leaf.set_state(LeafState::Online);
            }
        }
        state.change.get_or_insert_with(ConfigChange::default);
        Ok(())
    }

    /// `zpool clear [DEVICE]`: zeroes the error counters of leaf `guid`
    /// (every leaf when `None`), brings faulted, degraded and removed
    /// leaves whose device answers back online, and resumes a suspended
    /// pool. Takes no `state` lock (a suspended commit holds it).
    pub fn clear(&self, guid: Option<u64>) -> Result<(), SpaError> {
        let set = self.vdev_set();
        if let Some(g) = guid {
            find_leaf(&set, g).ok_or_else(|| refused("no such device in pool"))?;
        }
        for top in set.live() {
            let mut all_back = true;
            for leaf in top.vdev.leaves() {
                if guid.is_some_and(|g| g != leaf.guid) {
                    continue;
                }
                self.unspare(leaf.guid);
                leaf.clear_errors();
                let sick = matches!(
                    leaf.state(),
                    LeafState::Faulted | LeafState::Degraded | LeafState::Removed
                );
                if sick && leaf.dev.is_present() && leaf.probe() {
                    leaf.set_state(LeafState::Online);
                }
                all_back &= leaf.is_available();
            }
            if top.is_faulted() && all_back {
                top.unfault();
                self.alloc.lock().set_disabled(top.vdev.id(), false);
            }
        }
        if self.gate.resume() {
            eprintln!("tarn: pool '{}': I/O resumed by 'zpool clear'", self.name());
        }
        Ok(())
    }

    /// zed's rules (see the module comment); returns whether a leaf
    /// changed state, which the labels should then record.
    pub fn diagnose(&self) -> bool {
        let window = Duration::from_millis(tunables::FAULT_WINDOW_MS);
        let mut changed = false;
        for top in self.vdev_set().live() {
            for (i, leaf) in top.vdev.leaves().iter().enumerate() {
                if !leaf.is_available() {
                    continue;
                }
                if !leaf.dev.is_present() && top.vdev.can_lose(i) {
                    leaf.set_state(LeafState::Removed);
                    self.want_spare(leaf.guid);
                    changed = true;
                    eprintln!(
                        "tarn: pool '{}': {} REMOVED: the device is gone from its path",
                        self.name(),
                        leaf.path
                    );
                    continue;
                }
                let io = leaf.io_errors_within(window);
                let cksum = leaf.checksum_errors_within(window);
                let next = if io > tunables::FAULT_IO_ERRORS_MAX && top.vdev.can_lose(i) {
                    LeafState::Faulted
                } else if io > tunables::FAULT_IO_ERRORS_MAX
                    || cksum > tunables::FAULT_CHECKSUM_ERRORS_MAX
                {
                    LeafState::Degraded
                } else {
                    continue;
                };
                if leaf.state() != next {
                    leaf.set_state(next);
                    if next == LeafState::Faulted {
                        self.want_spare(leaf.guid);
                    }
                    changed = true;
                    eprintln!(
                        "tarn: pool '{}': {} {} after {io} I/O and {cksum} checksum errors \
                         in {} s (too many errors)",
                        self.name(),
                        leaf.path,
                        next.name(),
                        window.as_secs()
                    );
                }
            }
        }
        changed
    }

    /// Adds `txg` to the DTL of every leaf that missed it: unusable, or a
    /// write failed since the last commit.
    pub(crate) fn record_dtl(&self, set: &VdevSet, txg: u64) {
        for top in set.live() {
            for leaf in top.vdev.leaves() {
                let missed = leaf.take_missed();
                if missed || !leaf.is_available() {
                    leaf.dtl_add(txg);
                }
            }
        }
    }

    /// A device write failed for `why` (a top-level vdev lost too many
    /// children): suspend the pool and wait for `zpool clear`. `Err` when
    /// the pool is closing instead, or under `failmode=continue` off the
    /// sync thread: the write must fail.
    pub(crate) fn suspend_and_wait(&self, why: &str) -> Result<(), String> {
        self.diagnose();
        if !self.gate.is_enabled() {
            return Err(why.to_string());
        }
        let reason = format!("a top-level vdev cannot be written: {why}");
        if self.gate.suspend(reason) {
            let mode = match self.gate.failmode() {
                FailMode::Continue => "new writes fail with EIO",
                _ => "writes wait",
            };
            eprintln!(
                "tarn: pool '{}': I/O suspended ({why}); {mode} until the device is back \
                 and 'zpool clear' is run",
                self.name()
            );
        }
        if self.gate.failmode() == FailMode::Continue && !crate::suspend::on_sync_thread() {
            return Err(why.to_string());
        }
        self.gate.wait_resumed()
    }

    /// A read found no device answering for any copy of a block (the
    /// caller checked `SuspendGate::read_waits`): suspend the pool and
    /// wait for `zpool clear`. `Err` when the pool is closing instead.
    pub(crate) fn suspend_read_and_wait(&self, why: &str) -> Result<(), String> {
        self.diagnose();
        let reason = format!("a top-level vdev cannot be read: {why}");
        if self.gate.suspend(reason) {
            eprintln!(
                "tarn: pool '{}': I/O suspended ({why}); reads wait until the device is back \
                 and 'zpool clear' is run",
                self.name()
            );
        }
        self.gate.wait_resumed()
    }

    /// Runs `op` (device I/O of the sync pipeline) until it works, waiting
    /// for `zpool clear` after each failure that `is_device` calls a lost
    /// device. Other errors, and the pool closing, return the error.
    pub(crate) fn until_resumed<T, E: std::fmt::Display>(
        &self,
        mut op: impl FnMut() -> Result<T, E>,
        is_device: impl Fn(&E) -> bool,
    ) -> Result<T, E> {
        loop {
            match op() {
                Err(e) if is_device(&e) => {
                    if self.suspend_and_wait(&e.to_string()).is_err() {
                        return Err(e);
                    }
                }
                r => return r,
            }
        }
    }

    /// The state of leaf `guid`, if the pool has it.
    pub fn leaf_state(&self, guid: u64) -> Option<LeafState> {
        let set = self.vdev_set();
        let (top, i) = find_leaf(&set, guid)?;
        Some(top.vdev.leaves()[i].state())
    }
}

impl Top {
    /// Carries a log vdev's fault over to a rebuilt copy of it.
    pub(crate) fn copy_fault(&self, from: &Top) {
        if from.is_faulted() {
            self.fault_flag().store(true, Ordering::Relaxed);
        }
    }

    pub(crate) fn unfault(&self) {
        self.fault_flag().store(false, Ordering::Relaxed);
    }
}
