//! The devices of `zpool create`, `zpool add` and `zpool attach`: open
//! them, vet them, lay them out; and finding the vdev `zpool
//! remove`/`detach`/`offline` name.
//!
//! Every check runs before anything is written, so a refused create or add
//! leaves every device exactly as it was (issue 2, item 8). In order:
//!
//! 1. each path must exist; paths are canonicalised so that two spellings of
//!    one device (`/tmp/a`, `/tmp/../tmp/a`, a symlink) are caught as the
//!    same device named twice;
//! 2. each device opens read-write ([`FileDevice::open`]: `O_EXCL` for block
//!    devices, so one held by a mounted file system or another pool is busy);
//! 3. each device holds at least [`MIN_DEVICE_SIZE`];
//! 4. each device's labels are read: one that belongs to a pool this daemon
//!    has imported is refused outright, one of an exported pool or of a pool
//!    last active elsewhere is refused unless forced (`-f`), as zpool(8)
//!    does; labels of a destroyed pool do not count;
//! 5. the ashift of each top-level vdev is `-o ashift=` or, when that is
//!    absent or 0, the largest ashift its devices ask for.
//!
//! The path recorded in the pool config is the absolute path the user gave,
//! not the canonical one: `/dev/disk/by-id/…` should stay a stable name.
//!
//! `zpool remove` and `zpool detach` name a vdev as `zpool status` shows
//! it: a leaf by its path (or by the path's last component, as `sdc` for
//! `/dev/sdc`), an interior vdev by `mirror-N`.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tarn_format::label::{
    PoolState, VdevClass, VdevConfig, VdevKind as LabelKind, MIN_DEVICE_SIZE,
};
use tarn_pool::import::best_label;
use tarn_pool::{tunables, NewTop, SpaError};
use tarn_vdev::{detect_ashift, read_labels, BlockDevice, FileDevice, Layout, VdevError};

use crate::{DslError, Pool};

/// The kind of a top-level vdev group in a create or add request.
///
/// `Disk` is exactly one device. `Log` is a separate intent-log vdev: one
/// device is a plain log, two or more form a mirrored log (`log mirror a b`).
/// `Spare` is one hot spare device (`spare a b` makes two groups).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VdevKind {
    Disk,
    Mirror,
    Raidz1,
    Raidz2,
    Raidz3,
    Log,
    Spare,
}

impl VdevKind {
    /// The word zpool(8) uses for this kind of vdev.
    pub fn as_str(self) -> &'static str {
        match self {
            VdevKind::Disk => "disk",
            VdevKind::Mirror => "mirror",
            VdevKind::Raidz1 => "raidz1",
            VdevKind::Raidz2 => "raidz2",
            VdevKind::Raidz3 => "raidz3",
            VdevKind::Log => "log",
            VdevKind::Spare => "spare",
        }
    }

    /// Parity columns of a raidz kind, `None` for every other kind.
    pub fn raidz_parity(self) -> Option<usize> {
        match self {
            VdevKind::Raidz1 => Some(1),
            VdevKind::Raidz2 => Some(2),
            VdevKind::Raidz3 => Some(3),
            _ => None,
        }
    }
}

/// One top-level vdev: its kind and its devices (absolute paths).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VdevGroup {
    pub kind: VdevKind,
    pub devices: Vec<String>,
}

impl VdevGroup {
    /// Whether the group is a data vdev (not a log, not a spare).
    pub fn is_data(&self) -> bool {
        !matches!(self.kind, VdevKind::Log | VdevKind::Spare)
    }
}

/// The name zpool(8) gives an interior vdev; `None` for a leaf.
pub fn interior_name(cfg: &VdevConfig) -> Option<String> {
    match cfg.kind {
        LabelKind::File | LabelKind::Disk => None,
        LabelKind::Mirror => Some(format!("mirror-{}", cfg.id)),
        LabelKind::Raidz { nparity } => Some(format!("raidz{nparity}-{}", cfg.id)),
        LabelKind::Replacing => Some(format!("replacing-{}", cfg.id)),
        LabelKind::Spare => Some(format!("spare-{}", cfg.id)),
    }
}

/// A refused change of the vdev configuration keeps its reason; any
/// other pool error is what it is.
pub fn spa_err(e: SpaError) -> DslError {
    match e {
        SpaError::Config(why) => DslError::Invalid(why),
        other => other.into(),
    }
}

/// One opened device of a create request.
pub struct OpenedDevice {
    pub path: String,
    pub dev: Arc<FileDevice>,
}

/// The text of an OS error without Rust's ` (os error N)` suffix, as C
/// tools print `strerror`.
pub fn os_reason(err: &io::Error) -> String {
    let text = err.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

fn cannot_open(path: &str, why: &str) -> DslError {
    DslError::Invalid(format!("cannot open '{path}': {why}"))
}

/// Step 1: canonical paths, refusing a device named twice.
fn canonical_paths(groups: &[VdevGroup]) -> Result<Vec<PathBuf>, DslError> {
    let mut seen: HashMap<PathBuf, &str> = HashMap::new();
    let mut out = Vec::new();
    for path in groups.iter().flat_map(|g| &g.devices) {
        let canon = std::fs::canonicalize(path).map_err(|e| cannot_open(path, &os_reason(&e)))?;
        if let Some(first) = seen.insert(canon.clone(), path) {
            return Err(DslError::Invalid(format!(
                "invalid vdev specification: {} is specified multiple times ('{first}' and '{path}')",
                canon.display()
            )));
        }
        out.push(canon);
    }
    Ok(out)
}

/// Step 2: open one device, with a message an admin can act on.
pub fn open_device(path: &str, canon: &Path) -> Result<Arc<FileDevice>, DslError> {
    match FileDevice::open(canon) {
        Ok(dev) => Ok(Arc::new(dev)),
        Err(VdevError::NotFound { .. }) => Err(cannot_open(path, "No such file or directory")),
        Err(VdevError::PermissionDenied { .. }) => Err(cannot_open(path, "Permission denied")),
        Err(VdevError::InUse { .. }) => Err(cannot_open(
            path,
            "Device or resource busy (in use by another pool or program)",
        )),
        Err(VdevError::NotADevice { .. }) => {
            Err(cannot_open(path, "not a regular file or a block device"))
        }
        Err(VdevError::Io { source, .. }) => Err(cannot_open(path, &os_reason(&source))),
        Err(other) => Err(cannot_open(path, &other.to_string())),
    }
}

/// What a device's labels say about who owns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    Free,
    /// Part of a pool (name, guid, state) that is not destroyed.
    Pool(String, u64, PoolState),
}

/// Step 4: the owner recorded in a device's newest valid label.
pub fn owner(dev: &dyn BlockDevice) -> Owner {
    let labels = read_labels(dev)
        .into_iter()
        .map(|r| r.map_err(|e| e.to_string()))
        .collect();
    match best_label(labels) {
        Ok(label) if label.state != PoolState::Destroyed => {
            Owner::Pool(label.name, label.pool_guid, label.state)
        }
        _ => Owner::Free,
    }
}

/// Problems found by step 4: those `-f` overrides, and those it does not.
#[derive(Default)]
struct InUse {
    overridable: Vec<String>,
    fatal: Vec<String>,
}

impl InUse {
    fn check(&mut self, path: &str, owner: Owner, imported: &dyn Fn(u64) -> bool) {
        match owner {
            Owner::Free => {}
            Owner::Pool(name, guid, PoolState::Spare) if imported(guid) => self.fatal.push(
                format!("{path} is reserved as a hot spare of pool '{name}'"),
            ),
            Owner::Pool(name, _, PoolState::Spare) => self
                .overridable
                .push(format!("{path} is a hot spare of exported pool '{name}'")),
            Owner::Pool(name, guid, _) if imported(guid) => self
                .fatal
                .push(format!("{path} is part of active pool '{name}'")),
            Owner::Pool(name, _, PoolState::Exported) => self
                .overridable
                .push(format!("{path} is part of exported pool '{name}'")),
            Owner::Pool(name, _, _) => self
                .overridable
                .push(format!("{path} is part of active pool '{name}'")),
        }
    }

    fn into_result(self, force: bool) -> Result<(), DslError> {
        if !self.fatal.is_empty() {
            return Err(DslError::Invalid(format!(
                "invalid vdev specification\nthe following errors must be manually repaired:\n{}",
                self.fatal.join("\n")
            )));
        }
        if !self.overridable.is_empty() && !force {
            return Err(DslError::Invalid(format!(
                "invalid vdev specification\nuse '-f' to override the following errors:\n{}",
                self.overridable.join("\n")
            )));
        }
        Ok(())
    }
}

/// Steps 1–4 for every device of `groups`, in request order.
pub fn open_all(
    groups: &[VdevGroup],
    force: bool,
    imported: &dyn Fn(u64) -> bool,
) -> Result<Vec<Vec<OpenedDevice>>, DslError> {
    let canon = canonical_paths(groups)?;
    let mut canon = canon.iter();
    let mut out = Vec::with_capacity(groups.len());
    let mut in_use = InUse::default();
    for group in groups {
        let mut opened = Vec::with_capacity(group.devices.len());
        for (path, canon) in group.devices.iter().zip(canon.by_ref()) {
            let dev = open_device(path, canon)?;
            if dev.size() < MIN_DEVICE_SIZE {
                return Err(DslError::Invalid(format!(
                    "one or more devices is less than the minimum size (64M): \
                     {path} is too small ({} bytes)",
                    dev.size()
                )));
            }
            in_use.check(path, owner(dev.as_ref()), imported);
            opened.push(OpenedDevice {
                path: path.clone(),
                dev,
            });
        }
        out.push(opened);
    }
    in_use.into_result(force)?;
    Ok(out)
}

/// The tarn layout and allocation class of a requested vdev group.
pub fn layout_of(group: &VdevGroup) -> Result<(Layout, VdevClass), DslError> {
    let n = group.devices.len();
    let layout = match group.kind {
        VdevKind::Disk => Layout::Single,
        VdevKind::Mirror => Layout::Mirror,
        VdevKind::Log if n == 1 => Layout::Single,
        VdevKind::Log => Layout::Mirror,
        VdevKind::Spare => return Err(DslError::Invalid("a spare is not a top-level vdev".into())),
        kind @ (VdevKind::Raidz1 | VdevKind::Raidz2 | VdevKind::Raidz3) => {
            let nparity = kind.raidz_parity().unwrap_or(1);
            if n < nparity + 1 {
                return Err(DslError::Invalid(format!(
                    "invalid vdev specification: {} requires at least {} devices",
                    kind.as_str(),
                    nparity + 1
                )));
            }
            Layout::Raidz { nparity }
        }
    };
    let class = if group.kind == VdevKind::Log {
        VdevClass::Log
    } else {
        VdevClass::Normal
    };
    Ok((layout, class))
}

/// A device of a request: its path, device and whether it is a block
/// device (what `Spa::add_spares` takes).
pub type NewLeaf = (String, Arc<dyn BlockDevice>, bool);

/// Takes the hot spares (`spare` groups) out of a request's groups and
/// their opened devices.
pub fn split_spares(
    groups: &[VdevGroup],
    opened: Vec<Vec<OpenedDevice>>,
) -> (Vec<VdevGroup>, Vec<Vec<OpenedDevice>>, Vec<NewLeaf>) {
    let (mut vdevs, mut devs, mut spares) = (Vec::new(), Vec::new(), Vec::new());
    for (group, devices) in groups.iter().zip(opened) {
        if group.kind != VdevKind::Spare {
            vdevs.push(group.clone());
            devs.push(devices);
            continue;
        }
        for d in devices {
            let is_block = d.dev.is_block_device();
            let dev: Arc<dyn BlockDevice> = d.dev;
            spares.push((d.path, dev, is_block));
        }
    }
    (vdevs, devs, spares)
}

/// Step 5 and assembly: the [`NewTop`]s `Spa::create` takes. `ashift` is
/// the `-o ashift=` value (0: detect per vdev).
pub fn new_tops(
    groups: &[VdevGroup],
    opened: Vec<Vec<OpenedDevice>>,
    ashift: u8,
) -> Result<Vec<NewTop>, DslError> {
    let mut tops = Vec::with_capacity(groups.len());
    for (group, devices) in groups.iter().zip(opened) {
        let (layout, class) = layout_of(group)?;
        let detected = devices
            .iter()
            .map(|d| detect_ashift(d.dev.as_ref()))
            .max()
            .unwrap_or(12);
        let leaves = devices
            .into_iter()
            .map(|d| {
                let is_block = d.dev.is_block_device();
                let dev: Arc<dyn BlockDevice> = d.dev;
                (d.path, dev, is_block)
            })
            .collect();
        tops.push(NewTop {
            layout,
            class,
            ashift: if ashift == 0 { detected } else { ashift },
            leaves,
        });
    }
    Ok(tops)
}

// ------------------------------------------------- the pool's vdevs by name

/// The pool's top-level vdevs as vdev groups (what the replication check
/// of `zpool add` compares the new ones with).
pub fn current_groups(configs: &[VdevConfig]) -> Vec<VdevGroup> {
    configs
        .iter()
        .map(|c| {
            let kind = match (c.class, c.kind) {
                (VdevClass::Log, _) => VdevKind::Log,
                (_, LabelKind::File | LabelKind::Disk) => VdevKind::Disk,
                // A single device being replaced or spared.
                (_, LabelKind::Replacing | LabelKind::Spare) => VdevKind::Disk,
                (_, LabelKind::Mirror) => VdevKind::Mirror,
                (_, LabelKind::Raidz { nparity: 1 }) => VdevKind::Raidz1,
                (_, LabelKind::Raidz { nparity: 2 }) => VdevKind::Raidz2,
                (_, LabelKind::Raidz { .. }) => VdevKind::Raidz3,
            };
            // One device per position: a replacing or spare pair is one.
            let first_leaf = |p: &VdevConfig| {
                let leaf = p.leaves()[0];
                leaf.path.clone().unwrap_or_else(|| leaf.guid.to_string())
            };
            let devices =
                if c.is_leaf() || c.kind == LabelKind::Replacing || c.kind == LabelKind::Spare {
                    vec![first_leaf(c)]
                } else {
                    c.children.iter().map(first_leaf).collect()
                };
            VdevGroup { kind, devices }
        })
        .collect()
}

/// Whether leaf `leaf` is the device `name` means: its path, the same file
/// by another path, (a bare word) the path's last component, or its GUID
/// (how `zpool status` shows a device that could not be opened).
fn names_leaf(leaf: &VdevConfig, name: &str) -> bool {
    if name.parse::<u64>().is_ok_and(|g| g == leaf.guid) {
        return true;
    }
    let Some(path) = leaf.path.as_deref() else {
        return false;
    };
    if path == name {
        return true;
    }
    if !name.contains('/') {
        return Path::new(path).file_name().is_some_and(|f| f == name);
    }
    let canon = |p: &str| std::fs::canonicalize(p).ok();
    canon(path).is_some_and(|c| Some(c) == canon(name))
}

/// What `name` names in the pool: (top-level config, the leaf if a leaf).
fn find_vdev<'a>(
    configs: &'a [VdevConfig],
    name: &str,
) -> Option<(&'a VdevConfig, Option<&'a VdevConfig>)> {
    for top in configs {
        if interior_name(top).as_deref() == Some(name) {
            return Some((top, None));
        }
    }
    for top in configs {
        if let Some(leaf) = top.leaves().into_iter().find(|l| names_leaf(l, name)) {
            return Some((top, Some(leaf)));
        }
    }
    None
}

/// The GUID of the hot spare `name` names, if any.
pub fn spare_named(spares: &[tarn_pool::spares::SpareStatus], name: &str) -> Option<u64> {
    spares
        .iter()
        .find(|s| {
            let leaf = tarn_pool::spares::leaf_config(s.guid, &s.path, false, VdevClass::Normal);
            names_leaf(&leaf, name)
        })
        .map(|s| s.guid)
}

/// The GUID of the leaf `name` names (`tarn zinject -d`), if any.
pub fn leaf_named(configs: &[VdevConfig], name: &str) -> Option<u64> {
    configs
        .iter()
        .flat_map(|top| top.leaves())
        .find(|leaf| names_leaf(leaf, name))
        .map(|leaf| leaf.guid)
}

fn no_such_device() -> DslError {
    DslError::Invalid("no such device in pool".into())
}

/// The id of the top-level vdev `zpool remove NAME` removes: a log named
/// by its leaf (a single log) or by `mirror-N`. A data vdev is refused:
/// tarn has no device removal (OpenZFS remaps its blocks elsewhere).
pub fn removable_top(configs: &[VdevConfig], name: &str) -> Result<u32, DslError> {
    let (top, leaf) = find_vdev(configs, name).ok_or_else(no_such_device)?;
    if top.class != VdevClass::Log {
        return Err(DslError::Invalid(
            "only log devices can be removed: tarn does not support removing \
             top-level data vdevs yet (OpenZFS's device removal)"
                .into(),
        ));
    }
    if let (Some(_), Some(mirror)) = (leaf, interior_name(top)) {
        return Err(DslError::Invalid(format!(
            "the device is part of log mirror {mirror}: remove '{mirror}' \
             or detach the device with 'zpool detach'"
        )));
    }
    Ok(top.id as u32)
}

/// The leaf `zpool offline`/`online`/`clear NAME` means; an interior vdev
/// (`mirror-0`) is refused.
pub fn named_leaf<'a>(configs: &'a [VdevConfig], name: &str) -> Result<&'a VdevConfig, DslError> {
    match find_vdev(configs, name).ok_or_else(no_such_device)? {
        (_, Some(leaf)) => Ok(leaf),
        (_, None) => Err(DslError::Invalid(
            "operation not supported on this type of vdev (name a device of it)".into(),
        )),
    }
}

/// The GUID of the leaf `zpool detach NAME` detaches.
pub fn detachable_leaf(configs: &[VdevConfig], name: &str) -> Result<u64, DslError> {
    match find_vdev(configs, name).ok_or_else(no_such_device)? {
        (_, Some(leaf)) => Ok(leaf.guid),
        (_, None) => Err(DslError::Invalid(
            "only applicable to mirror and replacing vdevs".into(),
        )),
    }
}

/// Moves the intent log off log vdev `id` (the middle of `zpool remove`):
/// no more allocation there, every dataset's log starts a new chain, and
/// txgs are forced until the old chains' blocks on it are free — at most
/// `LOG_REMOVE_WAIT_MS`, after which the removal is abandoned and the
/// vdev takes allocations again.
pub fn drain_log(pool: &Pool, id: u32) -> Result<(), DslError> {
    let spa = pool.spa();
    spa.start_log_removal(id).map_err(spa_err)?;
    let drained = (|| {
        pool.reset_logs()?;
        let deadline = Instant::now() + Duration::from_millis(tunables::LOG_REMOVE_WAIT_MS);
        loop {
            let held = spa.vdev_space(id).map_or(0, |(_, alloc, _)| alloc);
            if held == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(DslError::Busy(format!(
                    "the intent log still holds {held} bytes on the device after {} s \
                     (a dataset's log waiting for replay? mount every dataset and retry)",
                    tunables::LOG_REMOVE_WAIT_MS / 1000
                )));
            }
            pool.sync()?;
        }
    })();
    if drained.is_err() {
        spa.cancel_log_removal(id);
    }
    drained
}

/// Opens the device of a leaf the pool could not open, at its last path,
/// if it carries this pool's label for that leaf.
pub fn reopen(leaf: &VdevConfig, pool_guid: u64) -> Result<Arc<dyn BlockDevice>, DslError> {
    let path = leaf.path.clone().unwrap_or_default();
    let canon = std::fs::canonicalize(&path)
        .map_err(|e| DslError::Invalid(format!("cannot open {path}: {}", os_reason(&e))))?;
    let dev = open_device(&path, &canon)?;
    let labels = read_labels(dev.as_ref())
        .into_iter()
        .map(|r| r.map_err(|e| e.to_string()))
        .collect();
    match best_label(labels) {
        Ok(l) if l.pool_guid == pool_guid && l.guid == leaf.guid => Ok(dev),
        Ok(_) => Err(DslError::Invalid(format!(
            "{path} is not the device this pool is missing (its label names another \
             pool or device); use 'zpool replace' for a new device"
        ))),
        Err(why) => Err(DslError::Invalid(format!(
            "{path} has no valid label ({why}); use 'zpool replace' for a new device"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    fn file(dir: &Path, name: &str, size: u64) -> String {
        let p = dir.join(name);
        File::create(&p).unwrap().set_len(size).unwrap();
        p.to_string_lossy().into_owned()
    }

    fn mirror(devices: &[&str]) -> VdevGroup {
        VdevGroup {
            kind: VdevKind::Mirror,
            devices: devices.iter().map(|d| d.to_string()).collect(),
        }
    }

    fn err(r: Result<Vec<Vec<OpenedDevice>>, DslError>) -> String {
        match r {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn missing_small_and_duplicate_devices_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = file(dir.path(), "a", 64 << 20);
        let small = file(dir.path(), "small", 63 << 20);
        let none = |_| false;
        let missing = dir.path().join("nope").to_string_lossy().into_owned();
        let e = err(open_all(&[mirror(&[&a, &missing])], false, &none));
        assert_eq!(
            e,
            format!("cannot open '{missing}': No such file or directory")
        );
        let e = err(open_all(&[mirror(&[&a, &small])], false, &none));
        assert!(
            e.contains("less than the minimum size (64M)") && e.contains(&small),
            "{e}"
        );
        let alias = format!(
            "{}/../{}/a",
            dir.path().display(),
            dir.path().file_name().unwrap().to_string_lossy()
        );
        let e = err(open_all(&[mirror(&[&a, &alias])], false, &none));
        assert!(e.contains("specified multiple times"), "{e}");
        let ok = open_all(&[mirror(&[&a])], false, &none).unwrap();
        assert_eq!(ok[0][0].path, a);
    }

    #[test]
    fn layouts_and_ashift() {
        let dir = tempfile::tempdir().unwrap();
        let a = file(dir.path(), "a", 64 << 20);
        let b = file(dir.path(), "b", 64 << 20);
        let groups = [mirror(&[&a, &b])];
        let opened = open_all(&groups, false, &|_| false).unwrap();
        let tops = new_tops(&groups, opened, 0).unwrap();
        assert_eq!(tops[0].ashift, 12, "files detect 4K sectors");
        assert_eq!(tops[0].layout, Layout::Mirror);
        let opened = open_all(&groups, false, &|_| false).unwrap();
        assert_eq!(new_tops(&groups, opened, 9).unwrap()[0].ashift, 9);
        let short = VdevGroup {
            kind: VdevKind::Raidz2,
            devices: vec![a.clone(), b.clone()],
        };
        assert!(layout_of(&short)
            .unwrap_err()
            .to_string()
            .contains("at least 3 devices"));
        let log = VdevGroup {
            kind: VdevKind::Log,
            devices: vec![a],
        };
        assert_eq!(layout_of(&log).unwrap(), (Layout::Single, VdevClass::Log));
    }

    #[test]
    fn remove_and_detach_find_their_vdevs() {
        let leaf = |id: u64, guid: u64, path: &str, class: VdevClass| VdevConfig {
            kind: LabelKind::File,
            id,
            guid,
            path: Some(path.into()),
            ashift: 12,
            asize: 1 << 30,
            metaslab_shift: 24,
            class,
            create_txg: 4,
            children: vec![],
            offline: false,
            faulted: false,
            dtl: vec![],
        };
        let mirror = |id: u64, paths: [&str; 2], class: VdevClass| VdevConfig {
            kind: LabelKind::Mirror,
            path: None,
            children: vec![
                leaf(0, 10 * id + 1, paths[0], class),
                leaf(1, 10 * id + 2, paths[1], class),
            ],
            ..leaf(id, 10 * id, "", class)
        };
        let configs = [
            mirror(0, ["/d/a", "/d/b"], VdevClass::Normal),
            leaf(1, 7, "/d/c", VdevClass::Log),
            mirror(2, ["/d/e", "/d/f"], VdevClass::Log),
        ];
        assert_eq!(removable_top(&configs, "/d/c").unwrap(), 1);
        assert_eq!(removable_top(&configs, "c").unwrap(), 1, "shorthand");
        assert_eq!(removable_top(&configs, "mirror-2").unwrap(), 2);
        let msg = |r: Result<u32, DslError>| r.unwrap_err().to_string();
        assert!(msg(removable_top(&configs, "/d/e")).contains("part of log mirror mirror-2"));
        assert!(msg(removable_top(&configs, "mirror-0")).contains("only log devices"));
        assert!(msg(removable_top(&configs, "/d/a")).contains("only log devices"));
        assert_eq!(
            msg(removable_top(&configs, "/d/z")),
            "no such device in pool"
        );
        assert_eq!(detachable_leaf(&configs, "/d/f").unwrap(), 22);
        assert!(detachable_leaf(&configs, "mirror-0")
            .unwrap_err()
            .to_string()
            .contains("only applicable to mirror"));
        let groups = current_groups(&configs);
        assert_eq!(groups[0].kind, VdevKind::Mirror);
        assert_eq!(groups[1].kind, VdevKind::Log);
    }

    #[test]
    fn os_reason_drops_the_errno() {
        let e = io::Error::from_raw_os_error(2 /* ENOENT */);
        assert_eq!(os_reason(&e), "No such file or directory");
    }
}
