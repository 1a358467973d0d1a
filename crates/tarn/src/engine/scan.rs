//! Finding pools on devices for `zpool import` (and the cache file at
//! start-up).
//!
//! A scan looks at the regular files and block devices directly inside each
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
//! The opened devices are kept in the [`Scan`]: importing uses the very
//! handles the labels were read through, so a block device is opened once
//! (exclusively) and cannot change hands between scan and import.

use std::collections::HashSet;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tarn_format::label::{LabelConfig, PoolState, VDEV_LABEL_END_SIZE, VDEV_LABEL_START_SIZE};
use tarn_pool::import::{assemble, best_label, FoundPool};
use tarn_vdev::{read_labels, BlockDevice, FileDevice};

/// Directories searched when the request names none, as zpool(8) does.
pub const DEFAULT_DIRS: [&str; 2] = ["/dev/disk/by-id", "/dev"];

/// Devices a scan looks at, at most (a directory of millions of files must
/// not make the daemon open them all).
pub const SCAN_DEVICES_MAX: usize = 16_384;

/// One device with a valid label (the label itself went to `assemble`).
pub struct Candidate {
    pub path: String,
    pub dev: Arc<FileDevice>,
}

/// The result of one scan.
#[derive(Default)]
pub struct Scan {
    pub candidates: Vec<Candidate>,
    /// Devices whose labels all fail validation (damaged, not blank).
    pub corrupt: Vec<String>,
    /// Pools assembled from the candidates; `devices` index `candidates`.
    pub pools: Vec<FoundPool>,
}

impl Scan {
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

/// Scan the devices in `dirs` (or [`DEFAULT_DIRS`] when empty).
pub fn scan_dirs(dirs: &[String]) -> Scan {
    let dirs: Vec<&str> = if dirs.is_empty() {
        DEFAULT_DIRS.to_vec()
    } else {
        dirs.iter().map(String::as_str).collect()
    };
    let paths = dirs.iter().flat_map(|d| list_dir(Path::new(d)));
    scan_paths(paths)
}

/// Scan exactly these devices (missing ones are skipped). A device reached
/// by two names (a by-id link and its target) is read once, under the
/// first name.
pub fn scan_paths(paths: impl IntoIterator<Item = PathBuf>) -> Scan {
    let mut scan = Scan::default();
    let mut seen = HashSet::new();
    let mut labelled = Vec::new();
    for path in paths.into_iter().take(SCAN_DEVICES_MAX) {
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
                labelled.push((scan.candidates.len(), label));
                scan.candidates.push(Candidate {
                    path: name,
                    dev: Arc::new(dev),
                });
            }
            Err(LabelFault::Corrupt) => scan.corrupt.push(name),
            Err(LabelFault::Blank) => {}
        }
    }
    scan.pools = assemble(&labelled);
    scan
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
        let scan = scan_dirs(&[dir.path().to_string_lossy().into_owned()]);
        assert!(scan.candidates.is_empty());
        assert!(scan.corrupt.is_empty());
        assert!(scan.pools.is_empty());
        // A directory that does not exist is simply empty.
        assert!(scan_dirs(&["/nonexistent/tarn".into()])
            .candidates
            .is_empty());
    }
}
