//! Finding pools on devices: from labels to a vdev tree (ZFS's import).
//!
//! A label holds only the subtree of the top-level vdev its leaf belongs
//! to, plus the pool's name, GUID, state and the number of top-level vdevs.
//! Import reads the labels of every candidate device, keeps each device's
//! newest valid label (a corrupt label is skipped and the other three are
//! tried), groups devices by pool GUID, and for every top-level vdev takes
//! the subtree from the newest label that describes it. A pool whose
//! top-level vdevs are not all described is reported as missing devices —
//! except the holes the newest label lists (removed vdevs, see
//! [`crate::vdevs`]), which no device describes on purpose; a removed
//! device that still carries an old label is ignored for them. An
//! available hot spare's label (state `spare`) only names its device. A
//! log vdev none of whose devices is found is described by the newest
//! label's `logs` ([`FoundPool::missing_logs`]): the pool can then be
//! imported without it (`zpool import -m`), its vdev faulted.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tarn_format::label::{LabelConfig, PoolState, VdevConfig};
use tarn_vdev::BlockDevice;

use crate::{Spa, SpaError};

/// One pool assembled from the labels of the devices that were scanned.
#[derive(Debug, Clone)]
pub struct FoundPool {
    pub name: String,
    pub guid: u64,
    pub state: PoolState,
    pub txg: u64,
    pub hostname: String,
    pub vdev_children: u64,
    /// Top-level subtrees by id; `None` where no device described it (or
    /// where the id is a hole).
    pub tops: Vec<Option<VdevConfig>>,
    /// Ids of removed top-level vdevs, from the newest label.
    pub holes: Vec<u64>,
    /// Leaf GUID -> index of the device it was found on (spares too).
    pub devices: HashMap<u64, usize>,
    /// The pool's hot spares, from the newest label.
    pub spares: Vec<VdevConfig>,
    /// Ids of log vdevs none of whose devices was found: their subtrees
    /// come from the newest label's `logs`. Importing needs `-m`.
    pub missing_logs: Vec<usize>,
}

impl FoundPool {
    /// Top-level vdevs no scanned device describes.
    pub fn missing_tops(&self) -> Vec<usize> {
        (0..self.tops.len())
            .filter(|&i| self.tops[i].is_none() && !self.is_hole(i))
            .collect()
    }

    pub fn is_hole(&self, id: usize) -> bool {
        self.holes.contains(&(id as u64))
    }

    /// Leaves present in the tree but not found among the devices.
    pub fn missing_leaves(&self) -> Vec<&VdevConfig> {
        self.tops
            .iter()
            .flatten()
            .flat_map(|t| t.leaves())
            .filter(|l| !self.devices.contains_key(&l.guid))
            .collect()
    }

    /// The complete top-level config list (holes left out), if every
    /// other top is described.
    pub fn configs(&self) -> Option<Vec<VdevConfig>> {
        (0..self.tops.len())
            .filter(|&i| !self.is_hole(i))
            .map(|i| self.tops[i].clone())
            .collect()
    }
}

/// The newest valid label of one device, or why there is none.
pub fn best_label(labels: Vec<Result<LabelConfig, String>>) -> Result<LabelConfig, String> {
    let mut best: Option<LabelConfig> = None;
    let mut last_err = String::from("no labels");
    for l in labels {
        match l {
            Ok(c) if best.as_ref().is_none_or(|b| c.txg > b.txg) => best = Some(c),
            Ok(_) => {}
            Err(e) => last_err = e,
        }
    }
    best.ok_or(last_err)
}

/// Groups device labels (device index, its best label) into pools.
pub fn assemble(labels: &[(usize, LabelConfig)]) -> Vec<FoundPool> {
    let mut by_pool: BTreeMap<u64, Vec<&(usize, LabelConfig)>> = BTreeMap::new();
    for l in labels {
        by_pool.entry(l.1.pool_guid).or_default().push(l);
    }
    by_pool
        .into_values()
        .filter_map(|ls| assemble_one(&ls))
        .collect()
}

fn assemble_one(labels: &[&(usize, LabelConfig)]) -> Option<FoundPool> {
    // An available spare's label describes no vdev and no pool state: only
    // its device is of use. A pool of spares alone is no pool.
    let newest = labels
        .iter()
        .filter(|l| l.1.state != PoolState::Spare)
        .max_by_key(|l| l.1.txg)?;
    let children = newest.1.vdev_children.min(4096) as usize;
    let holes = newest.1.holes.clone();
    let mut tops: Vec<Option<VdevConfig>> = vec![None; children];
    let mut top_txg = vec![0u64; children];
    let mut devices = HashMap::new();
    for (dev, cfg) in labels.iter().map(|l| (l.0, &l.1)) {
        devices.insert(cfg.guid, dev);
        if cfg.state == PoolState::Spare {
            continue;
        }
        let id = cfg.vdev_tree.id as usize;
        let hole = holes.contains(&cfg.vdev_tree.id);
        if id < children && !hole && (tops[id].is_none() || cfg.txg > top_txg[id]) {
            tops[id] = Some(cfg.vdev_tree.clone());
            top_txg[id] = cfg.txg;
        }
    }
    // A log vdev no device describes: the newest label knows its tree.
    let mut missing_logs = Vec::new();
    for log in &newest.1.logs {
        let id = log.id as usize;
        if id < children && tops[id].is_none() && !holes.contains(&log.id) {
            tops[id] = Some(log.clone());
            missing_logs.push(id);
        }
    }
    Some(FoundPool {
        name: newest.1.name.clone(),
        guid: newest.1.pool_guid,
        state: newest.1.state,
        txg: newest.1.txg,
        hostname: newest.1.hostname.clone(),
        vdev_children: newest.1.vdev_children,
        tops,
        holes,
        devices,
        spares: newest.1.spares.clone(),
        missing_logs,
    })
}

/// Imports the one pool whose labels are on `devs`, matching leaves to
/// devices by GUID (each device's newest valid label is used). For tools
/// and tests that hold their devices directly; the daemon scans paths.
pub fn import_devices(devs: &[Arc<dyn BlockDevice>]) -> Result<Spa, SpaError> {
    let labels: Vec<(usize, LabelConfig)> = devs
        .iter()
        .enumerate()
        .filter_map(|(i, d)| {
            let ls = tarn_vdev::read_labels(d.as_ref())
                .into_iter()
                .map(|r| r.map_err(|e| e.to_string()))
                .collect();
            best_label(ls).ok().map(|l| (i, l))
        })
        .collect();
    let mut pools = assemble(&labels);
    if pools.len() != 1 {
        return Err(SpaError::Import(format!(
            "expected one pool on the devices, found {}",
            pools.len()
        )));
    }
    let p = pools.remove(0);
    let configs = p
        .configs()
        .ok_or_else(|| SpaError::Import("a top-level vdev is missing".into()))?;
    let device = |l: &VdevConfig| p.devices.get(&l.guid).map(|&i| devs[i].clone());
    let spa = Spa::open(&p.name, p.guid, configs, &device)?;
    spa.load_spares(&p.spares, &device);
    Ok(spa)
}
