//! Importing a pool: finding pools on devices (`zpool import` with no
//! pool named, and the cache file at start-up), choosing one, and opening
//! it ([`open`], the one entry point that turns a found pool into a
//! [`Pool`]).
//!
//! Discovery looks at the regular files and block devices directly inside each
//! directory (not below: `/dev` holds thousands of entries, and zpool(8)'s
//! `-d` is not recursive either), opens each, and keeps the newest label
//! that validates ([`best_label`]): a label whose bytes are damaged is
//! skipped and the other three are tried. [`assemble`] then groups the
//! devices by pool GUID into [`FoundPool`]s.
//!
//! A device whose four labels all fail their checksums is remembered as
//! *corrupt* (as opposed to *blank*, which merely has no tarn label), so an
//! import that finds nothing can say why.
//!
//! The opened devices are kept in the [`Discovery`]: importing uses the
//! very handles the labels were read through, so a block device is opened
//! once (exclusively) and cannot change hands between discovery and
//! import.
//!
//! [`open`] refuses, as zpool(8) does, a pool whose labels say it is
//! active elsewhere (unless forced), a pool missing a whole log vdev
//! (unless `-m`), and a pool with a top-level vdev short of replicas
//! ([`tarn_pool::health::vdev_health`]); then it opens the pool on the
//! found devices, points each leaf at the path it was found at, and marks
//! the labels Active (or renames the pool).

use std::collections::HashSet;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tarn_format::label::{
    LabelConfig, PoolState, VdevClass, VdevConfig, VDEV_LABEL_END_SIZE, VDEV_LABEL_START_SIZE,
};
use tarn_pool::health::{vdev_health, Health};
pub use tarn_pool::import::FoundPool;
use tarn_pool::import::{assemble, best_label};
use tarn_pool::Spa;
use tarn_vdev::{read_labels, BlockDevice, FileDevice};

use crate::{DslError, Pool};

/// Directories searched when the request names none, as zpool(8) does.
pub const DEFAULT_DIRS: [&str; 2] = ["/dev/disk/by-id", "/dev"];

/// Devices a discovery looks at, at most (a directory of millions of files must
/// not make the daemon open them all).
pub const DISCOVER_DEVICES_MAX: usize = 16_384;

/// One device with a valid label (the label itself went to `assemble`).
pub struct Candidate {
    pub path: String,
    pub dev: Arc<FileDevice>,
}

/// The result of one discovery.
#[derive(Default)]
pub struct Discovery {
    pub candidates: Vec<Candidate>,
    /// Devices whose labels all fail validation (damaged, not blank).
    pub corrupt: Vec<String>,
    /// Pools assembled from the candidates; `devices` index `candidates`.
    pub pools: Vec<FoundPool>,
}

impl Discovery {
    /// Pools that can be offered for import: not destroyed, not imported.
    pub fn importable(&self, imported: &dyn Fn(u64) -> bool) -> Vec<&FoundPool> {
        self.pools
            .iter()
            .filter(|p| p.state != PoolState::Destroyed && !imported(p.guid))
            .collect()
    }

    /// The path a leaf was found at, if it was found.
    pub fn found_path(&self, pool: &FoundPool, leaf_guid: u64) -> Option<&str> {
        let index = *pool.devices.get(&leaf_guid)?;
        self.candidates.get(index).map(|c| c.path.as_str())
    }

    /// The opened device of a leaf, if it was found.
    pub fn device(&self, pool: &FoundPool, leaf_guid: u64) -> Option<Arc<dyn BlockDevice>> {
        let index = *pool.devices.get(&leaf_guid)?;
        let dev: Arc<dyn BlockDevice> = self.candidates.get(index)?.dev.clone();
        Some(dev)
    }
}

/// The regular files and block devices directly inside `dir`, sorted.
fn list_dir(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            // metadata() follows symlinks: /dev/disk/by-id holds links.
            std::fs::metadata(p)
                .map(|m| m.file_type().is_file() || m.file_type().is_block_device())
                .unwrap_or(false)
        })
        .collect();
    paths.sort();
    paths
}

/// Looks at the devices in `dirs` (or [`DEFAULT_DIRS`] when empty).
pub fn discover(dirs: &[String]) -> Discovery {
    let dirs: Vec<&str> = if dirs.is_empty() {
        DEFAULT_DIRS.to_vec()
    } else {
        dirs.iter().map(String::as_str).collect()
    };
    let paths = dirs.iter().flat_map(|d| list_dir(Path::new(d)));
    discover_paths(paths)
}

/// Looks at exactly these devices (missing ones are skipped). A device reached
/// by two names (a by-id link and its target) is read once, under the
/// first name.
pub fn discover_paths(paths: impl IntoIterator<Item = PathBuf>) -> Discovery {
    let mut found = Discovery::default();
    let mut seen = HashSet::new();
    let mut labelled = Vec::new();
    for path in paths.into_iter().take(DISCOVER_DEVICES_MAX) {
        let Ok(canon) = std::fs::canonicalize(&path) else {
            continue;
        };
        if !seen.insert(canon.clone()) {
            continue;
        }
        let Ok(dev) = FileDevice::open(&canon) else {
            continue;
        };
        if dev.size() < VDEV_LABEL_START_SIZE + VDEV_LABEL_END_SIZE {
            continue;
        }
        let name = path.to_string_lossy().into_owned();
        match read_best_label(&dev) {
            Ok(label) => {
                labelled.push((found.candidates.len(), label));
                found.candidates.push(Candidate {
                    path: name,
                    dev: Arc::new(dev),
                });
            }
            Err(LabelFault::Corrupt) => found.corrupt.push(name),
            Err(LabelFault::Blank) => {}
        }
    }
    found.pools = assemble(&labelled);
    found
}

impl Discovery {
    /// The one importable pool that `wanted` (a name or a numeric GUID)
    /// means. `imported` says whether a GUID is imported already; when
    /// nothing matches, the caller tells a name in use apart.
    pub fn choose(
        &self,
        wanted: &str,
        imported: &dyn Fn(u64) -> bool,
    ) -> Result<&FoundPool, Unmatched> {
        let guid = wanted
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| wanted.parse::<u64>().ok())
            .flatten();
        let matches: Vec<&FoundPool> = self
            .importable(imported)
            .into_iter()
            .filter(|p| match guid {
                Some(g) => p.guid == g,
                None => p.name == wanted,
            })
            .collect();
        match matches.as_slice() {
            [one] => Ok(one),
            [] => Err(Unmatched::None),
            _ => Err(Unmatched::Many),
        }
    }

    /// Why [`Discovery::choose`] found nothing, as zpool(8) says it.
    pub fn no_such_pool(&self) -> DslError {
        if self.corrupt.is_empty() {
            DslError::Invalid("no such pool available".into())
        } else {
            DslError::Invalid(format!(
                "no such pool available\nno valid label (all four labels are corrupt) on: {}",
                self.corrupt.join(" ")
            ))
        }
    }

    /// The configurations of a found pool's top-level vdevs, holes left
    /// out and a missing one stood in for by an unavailable leaf named
    /// `missing-N` (what `zpool import` shows).
    pub fn shown_configs(found: &FoundPool) -> Vec<VdevConfig> {
        found
            .tops
            .iter()
            .enumerate()
            .filter(|(i, _)| !found.is_hole(*i))
            .map(|(i, top)| top.clone().unwrap_or_else(|| missing_top(i)))
            .collect()
    }

    /// Whether leaf `cfg` of `found` was found and is not offline.
    pub fn leaf_usable(&self, found: &FoundPool, cfg: &VdevConfig) -> bool {
        cfg.guid != 0 && !cfg.offline && self.found_path(found, cfg.guid).is_some()
    }
}

/// Why no single pool matched an import request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmatched {
    None,
    Many,
}

impl Unmatched {
    /// The message zpool(8) prints for more than one match.
    pub fn many() -> DslError {
        DslError::Invalid("more than one matching pool\nimport by numeric ID instead".into())
    }
}

fn missing_top(id: usize) -> VdevConfig {
    VdevConfig {
        kind: tarn_format::label::VdevKind::File,
        id: id as u64,
        guid: 0,
        path: Some(format!("missing-{id}")),
        ashift: 0,
        asize: 0,
        metaslab_shift: 0,
        class: Default::default(),
        create_txg: 0,
        children: vec![],
        offline: false,
        faulted: false,
        dtl: vec![],
    }
}

/// How an import opens a found pool.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Import under this name (`zpool import POOL NEWNAME`).
    pub new_name: Option<String>,
    /// Import a pool whose labels say it is active elsewhere (`-f`).
    pub force: bool,
    /// Import without a missing log vdev (`-m`).
    pub missing_log: bool,
}

/// Opens a found pool on the devices `discovery` opened and marks its
/// labels Active (or renames it): the import sequence of `zpool import`
/// and of the daemon's start-up. Nothing is written on a refusal.
pub fn open(
    discovery: &Discovery,
    found: &FoundPool,
    options: &ImportOptions,
) -> Result<Arc<Pool>, DslError> {
    if found.state == PoolState::Active && !options.force {
        return Err(DslError::Invalid(format!(
            "pool was previously in use from another system.\n\
             Last accessed by {} (txg {})\n\
             The pool can be imported, use 'zpool import -f' to import the pool.",
            if found.hostname.is_empty() {
                "<unknown>"
            } else {
                &found.hostname
            },
            found.txg
        )));
    }
    if !found.missing_logs.is_empty() && !options.missing_log {
        return Err(missing_logs(found));
    }
    // Missing leaves are fine while every top-level vdev keeps enough of
    // its devices: the pool imports DEGRADED.
    let leaf = |cfg: &VdevConfig| match discovery.leaf_usable(found, cfg) {
        true => Health::Online,
        false => Health::Unavail,
    };
    let short = Discovery::shown_configs(found)
        .iter()
        .any(|c| c.class != VdevClass::Log && vdev_health(c, &leaf) == Health::Unavail);
    if !found.missing_tops().is_empty() || short {
        return Err(insufficient_replicas(found));
    }
    let mut configs = found.configs().ok_or_else(one_or_more_unavailable)?;
    let path_of = |guid| discovery.found_path(found, guid).map(str::to_string);
    for cfg in &mut configs {
        update_paths(cfg, &path_of);
    }
    let device = |leaf: &VdevConfig| discovery.device(found, leaf.guid);
    let spa = Spa::open(&found.name, found.guid, configs, &device)
        .map_err(|e| DslError::CannotOpen(e.to_string()))?;
    spa.load_spares(&found.spares, &device);
    // A lost device suspends the pool until `zpool clear` (failmode).
    spa.suspend_gate().enable();
    let pool = Pool::open(spa)?;
    pool.spa().suspend_gate().enable_reads();
    let activated = match &options.new_name {
        Some(name) => pool.rename(name),
        None => {
            let spa = pool.spa();
            spa.write_labels(PoolState::Active, spa.last_synced_txg())
                .map_err(DslError::from)
        }
    };
    if let Err(e) = activated {
        let _ = pool.close();
        return Err(e);
    }
    Ok(pool)
}

fn one_or_more_unavailable() -> DslError {
    DslError::Invalid("one or more devices is currently unavailable".into())
}

/// Why a found pool cannot be imported: the devices it misses.
fn insufficient_replicas(found: &FoundPool) -> DslError {
    let missing: Vec<String> = found
        .missing_leaves()
        .iter()
        .map(|l| l.path.clone().unwrap_or_else(|| l.guid.to_string()))
        .chain(
            found
                .missing_tops()
                .iter()
                .map(|i| format!("top-level vdev {i}")),
        )
        .collect();
    DslError::Invalid(format!(
        "one or more devices is currently unavailable\n\
         a top-level vdev has too few of its devices (missing: {}); \
         attach the missing devices and try again",
        missing.join(", ")
    ))
}

/// Why a found pool needs `-m`: every device of a log vdev is missing.
fn missing_logs(found: &FoundPool) -> DslError {
    let gone: Vec<String> = found
        .missing_logs
        .iter()
        .filter_map(|&i| found.tops.get(i).cloned().flatten())
        .flat_map(|t| {
            t.leaves()
                .into_iter()
                .map(|l| l.path.clone().unwrap_or_else(|| l.guid.to_string()))
                .collect::<Vec<_>>()
        })
        .collect();
    DslError::Invalid(format!(
        "one or more devices is currently unavailable\n\
         The log devices below are missing: {}\n\
         use 'zpool import -m' to import the pool anyway (synchronous writes \
         whose only copy is in their intent log are lost)",
        gone.join(", ")
    ))
}

/// Points each leaf config at the path its device was found at now.
fn update_paths(cfg: &mut VdevConfig, found: &dyn Fn(u64) -> Option<String>) {
    if cfg.is_leaf() {
        if let Some(path) = found(cfg.guid) {
            cfg.path = Some(path);
        }
    }
    for child in &mut cfg.children {
        update_paths(child, found);
    }
}

enum LabelFault {
    /// No label looks like a tarn label at all.
    Blank,
    /// Something tarn-like is there, but no label validates.
    Corrupt,
}

fn read_best_label(dev: &dyn BlockDevice) -> Result<LabelConfig, LabelFault> {
    let labels: Vec<Result<LabelConfig, String>> = read_labels(dev)
        .into_iter()
        .map(|r| r.map_err(|e| e.to_string()))
        .collect();
    let damaged = labels
        .iter()
        .any(|r| matches!(r, Err(why) if !why.contains("bad magic")));
    best_label(labels).map_err(|_| {
        if damaged {
            LabelFault::Corrupt
        } else {
            LabelFault::Blank
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    #[test]
    fn blank_and_odd_entries_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        File::create(dir.path().join("blank"))
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        File::create(dir.path().join("tiny"))
            .unwrap()
            .set_len(1 << 10)
            .unwrap();
        std::fs::create_dir(dir.path().join("subdir")).unwrap();
        let found = discover(&[dir.path().to_string_lossy().into_owned()]);
        assert!(found.candidates.is_empty());
        assert!(found.corrupt.is_empty());
        assert!(found.pools.is_empty());
        // A directory that does not exist is simply empty.
        assert!(discover(&["/nonexistent/tarn".into()])
            .candidates
            .is_empty());
    }
}
