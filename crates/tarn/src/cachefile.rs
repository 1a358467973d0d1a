//! The pool cache file: which pools to re-import when the daemon starts.
//!
//! ZFS keeps `/etc/zfs/zpool.cache` so that pools come back after a reboot
//! without scanning every device; tarn keeps `/etc/tarn/tarn.cache` (see
//! [`crate::paths`]) for the same reason. It is a small JSON document:
//! `{"version": 1, "pools": [{"name", "guid", "paths": [...]}]}`.
//!
//! The engine owns its contents (it rewrites it on create, import, export and
//! destroy); this module only reads and writes it safely.
//!
//! **Invariant:** the file on disk is always either the old or the new
//! version, never a mixture: a write goes to a temporary file in the same
//! directory, is fsynced, renamed over the old file, and the directory is
//! fsynced. A missing file reads as "no pools"; a corrupt one is an error
//! (the daemon should say so rather than silently forget pools).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Version of the cache file format written by this code.
pub const CACHE_FILE_VERSION: u32 = 1;

/// One pool to re-import: its name, guid and the devices it was seen on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheEntry {
    pub name: String,
    pub guid: u64,
    pub paths: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct CacheFile {
    version: u32,
    pools: Vec<CacheEntry>,
}

/// Read the cache file at `path`; a missing file is an empty list.
pub fn read_cache_file(path: &Path) -> io::Result<Vec<CacheEntry>> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    let file: CacheFile = serde_json::from_slice(&bytes).map_err(|err| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("corrupt cache file {}: {err}", path.display()),
        )
    })?;
    if file.version != CACHE_FILE_VERSION {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "cache file {} has unsupported version {}",
                path.display(),
                file.version
            ),
        ));
    }
    Ok(file.pools)
}

/// Replace the cache file at `path` atomically with `entries`.
pub fn write_cache_file(path: &Path, entries: &[CacheEntry]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    fs::create_dir_all(dir)?;
    let file = CacheFile {
        version: CACHE_FILE_VERSION,
        pools: entries.to_vec(),
    };
    let mut bytes = serde_json::to_vec_pretty(&file).map_err(io::Error::other)?;
    bytes.push(b'\n');

    let file_name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "cache file has no name"))?;
    let mut tmp_name = file_name.to_os_string();
    tmp_name.push(format!(".tmp.{}", std::process::id()));
    let tmp = dir.join(tmp_name);

    let result = (|| {
        let mut out = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&tmp)?;
        out.write_all(&bytes)?;
        out.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_file_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_cache_file(&dir.path().join("none"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn round_trip_and_replace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/tarn.cache");
        let a = vec![CacheEntry {
            name: "tank".into(),
            guid: 42,
            paths: vec!["/tmp/a".into(), "/tmp/b".into()],
        }];
        write_cache_file(&path, &a).unwrap();
        assert_eq!(read_cache_file(&path).unwrap(), a);
        write_cache_file(&path, &[]).unwrap();
        assert!(read_cache_file(&path).unwrap().is_empty());
        // No temporary files are left behind.
        let names: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn corrupt_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tarn.cache");
        fs::write(&path, b"{not json").unwrap();
        let err = read_cache_file(&path).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
