//! Vdev trees for `zpool status`, `zpool import` and `zpool list -v`.
//!
//! One walk serves all three: the top-level configs (as stored in labels)
//! give the shape, and a caller-supplied [`LeafInfo`] function says how each
//! leaf is doing — from the live [`tarn_vdev::Leaf`] of an imported pool, or
//! from whether import's discovery found the device. The health rules are
//! the pool's own (`tarn_pool::health`: a top-level vdev is DEGRADED while
//! no more children are missing than its layout tolerates and UNAVAIL,
//! "insufficient replicas", beyond that; the pool is as healthy as its
//! sickest data vdev, and a sick log vdev only degrades it), so `zpool
//! status` and the import that refuses a pool short of replicas agree.
//!
//! A DEGRADED leaf (too many checksum errors) still serves, so it does not
//! count as missing, but its top-level vdev shows DEGRADED. OFFLINE,
//! FAULTED, UNAVAIL and REMOVED leaves count as missing.
//!
//! The `status:`/`action:` paragraphs pick the first problem found in
//! OpenZFS's order (`check_status` in libzfs_status.c): suspended I/O,
//! insufficient replicas, faulted devices, devices that could not be
//! used, errors, offline devices, removed devices — and then, a tarn
//! addition, devices that missed txgs and await their resilver.
//!
//! Names follow zpool(8): `mirror-0`, `raidz2-1` (kind, parity, top-level
//! id), leaves by path, a single-disk top-level vdev shown as its leaf.

use tarn_dsl::devices::interior_name;
use tarn_format::label::{VdevClass, VdevConfig};
pub use tarn_pool::health::Health;
use tarn_pool::health::{interior_health, pool_health};

use crate::api::{self, VdevListRow, VdevStatusNode};

/// What the caller knows about one leaf.
#[derive(Debug, Clone, Default)]
pub struct LeafInfo {
    /// The path shown for it.
    pub path: String,
    /// `ONLINE`, `OFFLINE`, `FAULTED`, `UNAVAIL`.
    pub state: String,
    pub read: u64,
    pub write: u64,
    pub cksum: u64,
    pub note: Option<String>,
    /// The leaf missed txgs (a DTL) that no resilver has rebuilt yet.
    pub resilver: bool,
}

/// A walked pool: its health and its top-level nodes, data and logs apart.
#[derive(Debug, Clone)]
pub struct PoolTree {
    pub health: Health,
    pub data: Vec<VdevStatusNode>,
    pub logs: Vec<VdevStatusNode>,
    /// Whether any leaf has counted errors (for the `status:` paragraph).
    pub has_errors: bool,
    /// Whether any leaf was faulted or degraded by errors.
    pub has_faulted: bool,
    /// Whether any leaf could not be opened (UNAVAIL).
    pub has_missing: bool,
    pub has_offline: bool,
    pub has_removed: bool,
    /// Whether any leaf awaits a resilver of the txgs it missed.
    pub needs_resilver: bool,
    /// Whether the pool's I/O is suspended (set by the caller).
    pub suspended: bool,
}

impl PoolTree {
    /// The root node named after the pool, holding the data vdevs.
    pub fn root(&self, pool: &str) -> VdevStatusNode {
        VdevStatusNode {
            name: pool.to_string(),
            state: self.health.name().to_string(),
            note: (self.health == Health::Unavail).then(|| "insufficient replicas".to_string()),
            children: self.data.clone(),
            ..VdevStatusNode::default()
        }
    }
}

fn leaf_node(info: &LeafInfo) -> VdevStatusNode {
    VdevStatusNode {
        name: info.path.clone(),
        state: info.state.clone(),
        read: info.read,
        write: info.write,
        cksum: info.cksum,
        note: info.note.clone(),
        children: Vec::new(),
    }
}

/// One vdev (top-level, or a replacing or spare pair inside one): its
/// node and its health.
fn top_node(cfg: &VdevConfig, leaf: &dyn Fn(&VdevConfig) -> LeafInfo) -> (VdevStatusNode, Health) {
    let Some(name) = interior_name(cfg) else {
        let info = leaf(cfg);
        let health = match info.state.as_str() {
            "ONLINE" => Health::Online,
            "DEGRADED" => Health::Degraded,
            _ => Health::Unavail,
        };
        return (leaf_node(&info), health);
    };
    let (children, healths): (Vec<VdevStatusNode>, Vec<Health>) =
        cfg.children.iter().map(|c| top_node(c, leaf)).unzip();
    let health = interior_health(cfg, &healths);
    let node = VdevStatusNode {
        name,
        state: health.name().to_string(),
        note: (health == Health::Unavail).then(|| "insufficient replicas".to_string()),
        children,
        ..VdevStatusNode::default()
    };
    (node, health)
}

/// Walk every top-level vdev of a pool.
pub fn pool_tree(configs: &[VdevConfig], leaf: &dyn Fn(&VdevConfig) -> LeafInfo) -> PoolTree {
    let mut tree = PoolTree {
        health: Health::Online,
        data: Vec::new(),
        logs: Vec::new(),
        has_errors: false,
        has_faulted: false,
        has_missing: false,
        has_offline: false,
        has_removed: false,
        needs_resilver: false,
        suspended: false,
    };
    for cfg in configs {
        let (node, health) = top_node(cfg, leaf);
        tree.has_errors |= node_has_errors(&node);
        tree.has_faulted |= node_in_state(&node, &["FAULTED", "DEGRADED"]) && leaf_sick(cfg, leaf);
        tree.has_missing |= node_in_state(&node, &["UNAVAIL"]);
        tree.has_offline |= node_in_state(&node, &["OFFLINE"]);
        tree.has_removed |= node_in_state(&node, &["REMOVED"]);
        tree.needs_resilver |= cfg.leaves().into_iter().any(|l| leaf(l).resilver);
        // A log is only read after a crash: losing it degrades the pool.
        tree.health = pool_health([(VdevClass::Normal, tree.health), (cfg.class, health)]);
        if cfg.class == VdevClass::Log {
            tree.logs.push(node);
        } else {
            tree.data.push(node);
        }
    }
    tree
}

fn node_has_errors(node: &VdevStatusNode) -> bool {
    node.read + node.write + node.cksum > 0 || node.children.iter().any(node_has_errors)
}

/// Whether `node` or a node below it is in one of `states`.
fn node_in_state(node: &VdevStatusNode, states: &[&str]) -> bool {
    states.contains(&node.state.as_str()) || node.children.iter().any(|c| node_in_state(c, states))
}

/// Whether a leaf of `cfg` itself is FAULTED or DEGRADED (not merely an
/// interior vdev degraded by a missing child).
fn leaf_sick(cfg: &VdevConfig, leaf: &dyn Fn(&VdevConfig) -> LeafInfo) -> bool {
    cfg.leaves()
        .into_iter()
        .any(|l| matches!(leaf(l).state.as_str(), "FAULTED" | "DEGRADED"))
}

/// The `status:` and `action:` paragraphs of `zpool status` (OpenZFS's
/// wording, first problem first), or `None` for a healthy pool.
pub fn status_text(tree: &PoolTree) -> Option<(String, String)> {
    let text = |status: &str, action: &str| Some((status.to_string(), action.to_string()));
    if tree.suspended {
        return text(
            "One or more devices are faulted in response to IO failures.",
            "Make sure the affected devices are connected, then run 'zpool clear'.",
        );
    }
    if tree.health == Health::Unavail {
        return text(
            "One or more devices could not be opened.  There are insufficient\n\
             replicas for the pool to continue functioning.",
            "Attach the missing device and online it using 'zpool online'.",
        );
    }
    if tree.has_faulted {
        return text(
            "One or more devices are faulted in response to persistent errors.\n\
             Sufficient replicas exist for the pool to continue functioning in a\n\
             degraded state.",
            "Replace the faulted device, or use 'zpool clear' to mark the device\n\
             repaired.",
        );
    }
    if tree.has_missing {
        return text(
            "One or more devices could not be used because the label is missing or\n\
             invalid.  Sufficient replicas exist for the pool to continue\n\
             functioning in a degraded state.",
            "Replace the device using 'zpool replace'.",
        );
    }
    if tree.has_errors {
        return text(
            "One or more devices has experienced an unrecoverable error.  An\n\
             attempt was made to correct the error.  Applications are unaffected.",
            "Determine if the device needs to be replaced, and clear the errors\n\
             using 'zpool clear' or replace the device with 'zpool replace'.",
        );
    }
    if tree.has_offline {
        return text(
            "One or more devices has been taken offline by the administrator.\n\
             Sufficient replicas exist for the pool to continue functioning in a\n\
             degraded state.",
            "Online the device using 'zpool online' or replace the device with\n\
             'zpool replace'.",
        );
    }
    if tree.has_removed {
        return text(
            "One or more devices has been removed by the administrator.\n\
             Sufficient replicas exist for the pool to continue functioning in a\n\
             degraded state.",
            "Online the device using 'zpool online' or replace the device with\n\
             'zpool replace'.",
        );
    }
    if tree.needs_resilver {
        return text(
            "One or more devices missed writes while offline or unavailable and\n\
             needs resilvering.  Reads verify every block and repair stale\n\
             copies they meet.",
            "A resilver starts when the device serves again (import, 'zpool online',\n\
             'zpool clear'); wait for it to complete.",
        );
    }
    None
}

/// The `status:` and `action:` of one pool in a `zpool import` listing.
pub fn import_text(health: Health, exported: bool) -> (Option<String>, Option<String>) {
    match (health, exported) {
        (Health::Online, true) => (None, None),
        (Health::Online, false) => (
            Some("The pool was last accessed by another system.".into()),
            Some(
                "The pool can be imported using its name or numeric identifier and\n\
                 the '-f' flag."
                    .into(),
            ),
        ),
        (Health::Degraded, _) => (
            Some("One or more devices are missing from the system.".into()),
            Some(
                "The pool can be imported despite missing or damaged devices.  The\n\
                 fault tolerance of the pool may be compromised if imported."
                    .into(),
            ),
        ),
        (Health::Unavail, _) => (
            Some("One or more devices are missing from the system.".into()),
            Some("The pool cannot be imported. Attach the missing\ndevices and try again.".into()),
        ),
    }
}

/// A top-level vdev's (size, allocated) bytes, where known.
pub type VdevSpace = (Option<u64>, Option<u64>, Option<u8>);

/// `zpool list -v` rows: one per top-level vdev with its leaves below.
pub fn list_rows(
    configs: &[VdevConfig],
    tree: &PoolTree,
    size_of: &dyn Fn(&VdevConfig) -> VdevSpace,
) -> Vec<VdevListRow> {
    let nodes = tree.data.iter().chain(&tree.logs);
    let mut ordered: Vec<&VdevConfig> = configs
        .iter()
        .filter(|c| c.class != VdevClass::Log)
        .collect();
    ordered.extend(configs.iter().filter(|c| c.class == VdevClass::Log));
    ordered
        .into_iter()
        .zip(nodes)
        .map(|(cfg, node)| {
            let (size, alloc, frag) = size_of(cfg);
            let free = size.zip(alloc).map(|(s, a)| s.saturating_sub(a));
            let cap = size.zip(alloc).map(|(s, a)| percent(a, s));
            VdevListRow {
                name: node.name.clone(),
                class: match cfg.class {
                    VdevClass::Normal => api::VdevClass::Normal,
                    VdevClass::Log => api::VdevClass::Log,
                },
                size,
                alloc,
                free,
                frag,
                cap,
                health: node.state.clone(),
                children: node.children.iter().map(list_child).collect(),
            }
        })
        .collect()
}

/// A `zpool list -v` row below a top-level vdev (a pair has its own).
fn list_child(node: &VdevStatusNode) -> VdevListRow {
    VdevListRow {
        name: node.name.clone(),
        health: node.state.clone(),
        children: node.children.iter().map(list_child).collect(),
        ..VdevListRow::default()
    }
}

/// `part` as a whole percentage of `whole`, rounded down (CAP).
pub fn percent(part: u64, whole: u64) -> u8 {
    if whole == 0 {
        return 0;
    }
    let p = u128::from(part) * 100 / u128::from(whole);
    u8::try_from(p.min(100)).unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_format::label::VdevKind;

    fn leaf(id: u64, guid: u64, path: &str) -> VdevConfig {
        VdevConfig {
            kind: VdevKind::File,
            id,
            guid,
            path: Some(path.into()),
            ashift: 12,
            asize: 1 << 30,
            metaslab_shift: 26,
            class: VdevClass::Normal,
            create_txg: 4,
            children: vec![],
            offline: false,
            faulted: false,
            dtl: vec![],
        }
    }

    fn group(kind: VdevKind, id: u64, paths: &[&str], class: VdevClass) -> VdevConfig {
        VdevConfig {
            kind,
            id,
            guid: 1000 + id,
            path: None,
            ashift: 12,
            asize: 1 << 30,
            metaslab_shift: 26,
            class,
            create_txg: 4,
            children: paths
                .iter()
                .enumerate()
                .map(|(i, p)| leaf(i as u64, 100 * (id + 1) + i as u64, p))
                .collect(),
            offline: false,
            faulted: false,
            dtl: vec![],
        }
    }

    fn missing(names: &'static [&'static str]) -> impl Fn(&VdevConfig) -> LeafInfo {
        move |cfg| {
            let path = cfg.path.clone().unwrap_or_default();
            let gone = names.contains(&path.as_str());
            LeafInfo {
                state: if gone { "UNAVAIL" } else { "ONLINE" }.into(),
                note: gone.then(|| "cannot open".into()),
                path,
                ..LeafInfo::default()
            }
        }
    }

    #[test]
    fn names_follow_zpool() {
        let m = group(VdevKind::Mirror, 0, &["/a", "/b"], VdevClass::Normal);
        let r = group(
            VdevKind::Raidz { nparity: 2 },
            1,
            &["/c", "/d", "/e"],
            VdevClass::Normal,
        );
        assert_eq!(interior_name(&m).as_deref(), Some("mirror-0"));
        assert_eq!(interior_name(&r).as_deref(), Some("raidz2-1"));
        assert_eq!(interior_name(&leaf(2, 9, "/f")), None);
    }

    #[test]
    fn health_follows_tolerance() {
        let raidz1 = group(
            VdevKind::Raidz { nparity: 1 },
            0,
            &["/a", "/b", "/c"],
            VdevClass::Normal,
        );
        let t = pool_tree(std::slice::from_ref(&raidz1), &missing(&[]));
        assert_eq!(t.health, Health::Online);
        assert!(status_text(&t).is_none());
        let t = pool_tree(std::slice::from_ref(&raidz1), &missing(&["/a"]));
        assert_eq!(t.health, Health::Degraded);
        assert_eq!(t.data[0].children[0].note.as_deref(), Some("cannot open"));
        let t = pool_tree(std::slice::from_ref(&raidz1), &missing(&["/a", "/b"]));
        assert_eq!(t.health, Health::Unavail);
        assert_eq!(
            t.root("tank").note.as_deref(),
            Some("insufficient replicas")
        );
        // A single disk tolerates nothing; a missing log only degrades.
        let single = leaf(0, 5, "/s");
        assert_eq!(
            pool_tree(&[single], &missing(&["/s"])).health,
            Health::Unavail
        );
        let data = group(VdevKind::Mirror, 0, &["/a", "/b"], VdevClass::Normal);
        let log = group(VdevKind::Mirror, 1, &["/l1", "/l2"], VdevClass::Log);
        let t = pool_tree(&[data.clone(), log.clone()], &missing(&["/l1", "/l2"]));
        assert_eq!(t.health, Health::Degraded);
        assert_eq!(t.logs.len(), 1);
        assert!(status_text(&t).unwrap().0.contains("label is missing"));
        // A log faulted by I/O errors: OpenZFS's FAULTED_DEV_R text.
        let faulted = |cfg: &VdevConfig| LeafInfo {
            state: if cfg.path.as_deref() == Some("/l1") {
                "FAULTED".into()
            } else {
                "ONLINE".into()
            },
            path: cfg.path.clone().unwrap_or_default(),
            ..LeafInfo::default()
        };
        let single_log = VdevConfig {
            class: VdevClass::Log,
            ..leaf(1, 9, "/l1")
        };
        let t = pool_tree(&[data, single_log], &faulted);
        assert_eq!(t.health, Health::Degraded);
        let (status, action) = status_text(&t).unwrap();
        assert!(
            status.starts_with("One or more devices are faulted"),
            "{status}"
        );
        assert!(action.starts_with("Replace the faulted device"), "{action}");
    }

    /// Leaves in the given states (by path); the rest ONLINE.
    fn states(table: &'static [(&'static str, &'static str)]) -> impl Fn(&VdevConfig) -> LeafInfo {
        move |cfg| {
            let path = cfg.path.clone().unwrap_or_default();
            let state = table
                .iter()
                .find(|(p, _)| *p == path)
                .map_or("ONLINE", |(_, s)| *s);
            LeafInfo {
                state: state.into(),
                resilver: state == "RESILVER",
                path,
                ..LeafInfo::default()
            }
        }
    }

    #[test]
    fn health_of_each_leaf_state() {
        let mirror = group(VdevKind::Mirror, 0, &["/a", "/b"], VdevClass::Normal);
        let one = std::slice::from_ref(&mirror);
        let status = |t: &PoolTree| status_text(t).map(|(s, _)| s).unwrap_or_default();
        // Offline: DEGRADED with OpenZFS's OFFLINE_DEV text.
        let t = pool_tree(one, &states(&[("/b", "OFFLINE")]));
        assert_eq!(
            (t.health, t.data[0].state.as_str()),
            (Health::Degraded, "DEGRADED")
        );
        assert!(status(&t).starts_with("One or more devices has been taken offline"));
        // Both sides gone: the vdev and the pool are UNAVAIL.
        let t = pool_tree(one, &states(&[("/a", "OFFLINE"), ("/b", "FAULTED")]));
        assert_eq!(t.health, Health::Unavail);
        assert_eq!(t.data[0].note.as_deref(), Some("insufficient replicas"));
        assert!(status(&t).contains("insufficient"));
        // A DEGRADED leaf (checksum errors) still serves: the vdev is
        // DEGRADED, not short of replicas, and the text is the fault one.
        let t = pool_tree(one, &states(&[("/a", "DEGRADED"), ("/b", "DEGRADED")]));
        assert_eq!(t.health, Health::Degraded);
        assert!(status(&t).starts_with("One or more devices are faulted"));
        let t = pool_tree(&[leaf(0, 5, "/s")], &states(&[("/s", "DEGRADED")]));
        assert_eq!(t.health, Health::Degraded);
        // Removed, and a leaf awaiting resilver (ONLINE otherwise).
        let t = pool_tree(one, &states(&[("/b", "REMOVED")]));
        assert_eq!(t.health, Health::Degraded);
        assert!(status(&t).starts_with("One or more devices has been removed"));
        let resilver = |cfg: &VdevConfig| LeafInfo {
            resilver: cfg.path.as_deref() == Some("/b"),
            ..states(&[])(cfg)
        };
        let t = pool_tree(one, &resilver);
        assert_eq!(t.health, Health::Online);
        assert!(status(&t).contains("needs resilvering"));
        // Suspended I/O comes first, whatever else is wrong.
        let mut t = pool_tree(one, &states(&[("/b", "OFFLINE")]));
        t.suspended = true;
        assert!(status(&t).starts_with("One or more devices are faulted in response to IO"));
        // raidz2 loses two and stays DEGRADED; a third makes it UNAVAIL.
        let rz = group(
            VdevKind::Raidz { nparity: 2 },
            0,
            &["/a", "/b", "/c", "/d"],
            VdevClass::Normal,
        );
        let two = pool_tree(
            std::slice::from_ref(&rz),
            &states(&[("/a", "UNAVAIL"), ("/b", "OFFLINE")]),
        );
        assert_eq!(two.health, Health::Degraded);
        let three = pool_tree(
            std::slice::from_ref(&rz),
            &states(&[("/a", "UNAVAIL"), ("/b", "OFFLINE"), ("/c", "FAULTED")]),
        );
        assert_eq!(three.health, Health::Unavail);
    }

    #[test]
    fn list_rows_keep_data_before_logs() {
        let log = group(VdevKind::Mirror, 0, &["/l1", "/l2"], VdevClass::Log);
        let data = leaf(1, 7, "/d");
        let configs = [log, data];
        let t = pool_tree(&configs, &missing(&[]));
        let rows = list_rows(&configs, &t, &|c| {
            (Some(c.asize), Some(c.asize / 4), Some(0))
        });
        assert_eq!(rows[0].name, "/d");
        assert_eq!(rows[0].cap, Some(25));
        assert_eq!(rows[1].name, "mirror-0");
        assert_eq!(rows[1].class, api::VdevClass::Log);
        assert_eq!(rows[1].children.len(), 2);
        assert_eq!(percent(1, 3), 33);
        assert_eq!(percent(5, 0), 0);
    }
}
