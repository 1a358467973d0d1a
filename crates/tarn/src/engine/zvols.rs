//! Served volumes: each volume's [`Zvol`] behind an NBD socket at
//! `<run dir>/zvol/POOL/VOL` (as `/dev/zvol/POOL/VOL`), and with
//! `snapdev=visible` each of its snapshots, read-only, at
//! `<run dir>/zvol/POOL/VOL@SNAP`.
//!
//! A volume is served when it appears — create, clone, import, daemon
//! start, receive — unless its `volmode` is `none`, and stops being
//! served (its connections cut, its socket removed) when it is destroyed,
//! renamed or exported, or the daemon stops. The socket is mode 0660,
//! owned by the daemon's user; its group is the daemon's unless the user
//! property `tarn:zvol_group` (inherited like any) names another group,
//! so `zfs set tarn:zvol_group=kvm tank` gives a `kvm` group access. The
//! run directory is made traversable (0711) for that.
//!
//! A rollback or a receive that replaces a served volume swaps the open
//! volume inside its export: requests in flight finish on the old one,
//! new ones wait for the swap, and the connected clients read the
//! rolled-back contents without reconnecting.
//!
//! **Locking:** `table` is taken after the engine's `config` (every
//! caller that serves or stops holds it) and never across a request; an
//! export's `zvol` lock is held (read) for the length of one request and
//! (write) across a swap.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tarn_dsl::Pool;
use tarn_nbd::{Errno, Export, ExportError, ExportResult, Extent, Limits, Listener, Runtime};
use tarn_zvol::{Settings, SyncMode, Zvol, ZvolError};

use super::dsl_err;
use super::space::DatasetSpaceHook;
use crate::backend::BackendError;

/// The user property naming the group of a volume's socket.
pub const ZVOL_GROUP_PROP: &str = "tarn:zvol_group";

/// One volume (or snapshot) as an NBD export.
pub struct VolExport {
    zvol: RwLock<Arc<Zvol>>,
    read_only: bool,
}

fn wire(e: ZvolError) -> ExportError {
    let errno = match &e {
        ZvolError::OutOfRange { .. } | ZvolError::Invalid(_) => Errno::Inval,
        ZvolError::ReadOnly => Errno::Perm,
        ZvolError::NoSpace | ZvolError::Quota => Errno::NoSpc,
        ZvolError::Stale => Errno::Shutdown,
        ZvolError::Io(_) | ZvolError::Corrupted(_) => Errno::Io,
    };
    ExportError::new(errno, e.to_string())
}

impl Export for VolExport {
    fn size(&self) -> u64 {
        self.zvol.read().size()
    }
    fn preferred_block(&self) -> u32 {
        self.zvol.read().block_size()
    }
    fn read_only(&self) -> bool {
        self.read_only || self.zvol.read().settings().readonly
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> ExportResult<()> {
        self.zvol.read().read_into(offset, buf).map_err(wire)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> ExportResult<()> {
        self.zvol.read().write(offset, data, fua).map_err(wire)
    }
    fn flush(&self) -> ExportResult<()> {
        self.zvol.read().flush().map_err(wire)
    }
    fn trim(&self, offset: u64, len: u64, fua: bool) -> ExportResult<()> {
        self.zvol.read().trim(offset, len, fua).map_err(wire)
    }
    fn zero(&self, offset: u64, len: u64, may_trim: bool, fua: bool) -> ExportResult<()> {
        self.zvol
            .read()
            .zero(offset, len, may_trim, fua)
            .map_err(wire)
    }
    fn extents(&self, offset: u64, len: u64) -> ExportResult<Vec<Extent>> {
        Ok(self
            .zvol
            .read()
            .extents(offset, len)
            .map_err(wire)?
            .into_iter()
            .map(|e| Extent {
                len: e.len,
                hole: e.hole,
            })
            .collect())
    }
    fn cache(&self, offset: u64, len: u64) -> ExportResult<()> {
        // Reading the range brings it into the block cache.
        let zv = self.zvol.read().clone();
        let mut at = offset;
        let end = offset + len;
        while at < end {
            let n = (end - at).min(1 << 20) as usize;
            zv.read(at, n).map_err(wire)?;
            at += n as u64;
        }
        Ok(())
    }
}

impl tarn_zvol::SpaceCheck for DatasetSpaceHook {
    fn check_write(&self, bytes: u64) -> tarn_zvol::Result<()> {
        match tarn_zpl::SpaceHook::check_write(self, bytes) {
            Ok(()) => Ok(()),
            Err(tarn_zpl::ZplError::Quota) => Err(ZvolError::Quota),
            Err(_) => Err(ZvolError::NoSpace),
        }
    }
}

struct Served {
    export: Arc<VolExport>,
    listener: Listener,
}

/// The daemon's served volumes.
pub struct Zvols {
    /// `<run dir>/zvol`; `None`: volumes are not served (engine tests).
    dir: Option<PathBuf>,
    rt: Mutex<Option<Arc<Runtime>>>,
    table: Mutex<BTreeMap<String, Served>>,
}

/// What a volume's properties say about its I/O.
pub fn settings_of(pool: &Pool, ds: &str) -> Result<Settings, BackendError> {
    let get = |p: &str| pool.dataset_prop(ds, p).map(|v| v.value).map_err(dsl_err);
    Ok(Settings {
        sync: match get("sync")?.as_str() {
            "always" => SyncMode::Always,
            "disabled" => SyncMode::Disabled,
            _ => SyncMode::Standard,
        },
        throughput: get("logbias")? == "throughput",
        readonly: get("readonly")? == "on",
    })
}

/// Opens volume `ds` (with its intent log, replaying it when read-write).
pub fn open_zvol(pool: &Arc<Pool>, ds: &str) -> Result<Zvol, BackendError> {
    let settings = settings_of(pool, ds)?;
    let os = pool.dataset_objset(ds).map_err(dsl_err)?;
    Zvol::open(
        os,
        pool.txg().clone(),
        pool.dataset_zil(ds).ok(),
        Arc::new(DatasetSpaceHook::new(pool.clone(), ds)),
        settings,
    )
    .map_err(|e| BackendError::Other(format!("cannot open volume '{ds}': {e}")))
}

fn open_snapshot(pool: &Arc<Pool>, snap: &str) -> Result<Zvol, BackendError> {
    let os = pool.snapshot_objset(snap).map_err(dsl_err)?;
    let settings = Settings {
        readonly: true,
        ..Settings::default()
    };
    Zvol::open(
        os,
        pool.txg().clone(),
        None,
        Arc::new(tarn_zvol::Unlimited),
        settings,
    )
    .map_err(|e| BackendError::Other(format!("cannot open volume snapshot '{snap}': {e}")))
}

/// The group a volume's socket gets (`tarn:zvol_group`), if any.
fn socket_group(pool: &Pool, ds: &str) -> Result<Option<u32>, BackendError> {
    let head = ds.split('@').next().unwrap_or(ds);
    let Ok(v) = pool.dataset_prop(head, ZVOL_GROUP_PROP) else {
        return Ok(None);
    };
    if v.value.is_empty() || v.value == "-" {
        return Ok(None);
    }
    if let Ok(gid) = v.value.parse::<u32>() {
        return Ok(Some(gid));
    }
    match nix::unistd::Group::from_name(&v.value) {
        Ok(Some(g)) => Ok(Some(g.gid.as_raw())),
        _ => Err(BackendError::Invalid(format!(
            "{ZVOL_GROUP_PROP} of '{head}' names no group '{}'",
            v.value
        ))),
    }
}

impl Zvols {
    pub fn new(dir: Option<PathBuf>) -> Zvols {
        Zvols {
            dir,
            rt: Mutex::new(None),
            table: Mutex::new(BTreeMap::new()),
        }
    }

    fn runtime(&self) -> Arc<Runtime> {
        self.rt
            .lock()
            .get_or_insert_with(|| Runtime::new(Limits::default()))
            .clone()
    }

    /// Where `name` (a volume or a snapshot) is served.
    pub fn socket_path(&self, name: &str) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(name))
    }

    pub fn is_served(&self, name: &str) -> bool {
        self.table.lock().contains_key(name)
    }

    /// Serves every volume among `names` (and its visible snapshots)
    /// that is not served yet; the errors of those that could not be.
    pub fn serve_auto(&self, pool: &Arc<Pool>, names: &[String]) -> Vec<BackendError> {
        let mut errors = Vec::new();
        for ds in names {
            if !pool.is_volume(ds) || pool.is_inconsistent(ds) {
                continue;
            }
            if let Err(e) = self.serve(pool, ds) {
                errors.push(e);
            }
            if let Err(e) = self.refresh_snapshots(pool, ds) {
                errors.push(e);
            }
        }
        errors
    }

    /// Serves volume `ds` unless `volmode=none` or it is served already.
    pub fn serve(&self, pool: &Arc<Pool>, ds: &str) -> Result<(), BackendError> {
        if self.dir.is_none() || self.is_served(ds) {
            return Ok(());
        }
        let volmode = pool.dataset_prop(ds, "volmode").map_err(dsl_err)?.value;
        if volmode == "none" {
            return Ok(());
        }
        let zvol = open_zvol(pool, ds)?;
        self.start(pool, ds, zvol, false)
    }

    fn start(
        &self,
        pool: &Pool,
        name: &str,
        zvol: Zvol,
        read_only: bool,
    ) -> Result<(), BackendError> {
        let Some(path) = self.socket_path(name) else {
            return Ok(());
        };
        let fail = |why: String| {
            BackendError::Other(format!(
                "cannot serve volume '{name}' at {}: {why}",
                path.display()
            ))
        };
        if let Some(parent) = path.parent() {
            make_dirs(self.dir.as_deref().unwrap_or(parent), parent)
                .map_err(|e| fail(e.to_string()))?;
        }
        let export = Arc::new(VolExport {
            zvol: RwLock::new(Arc::new(zvol)),
            read_only,
        });
        let config = tarn_nbd::Config {
            name: name.to_string(),
            description: format!("tarn volume {name}"),
            label: format!("nbd {name}"),
            mode: 0o660,
            group: socket_group(pool, name)?,
        };
        let listener = tarn_nbd::serve(&path, export.clone(), config, self.runtime())
            .map_err(|e| fail(e.to_string()))?;
        self.table
            .lock()
            .insert(name.to_string(), Served { export, listener });
        Ok(())
    }

    /// Serves the snapshots of volume `ds` when `snapdev=visible` (and
    /// stops serving them when not).
    pub fn refresh_snapshots(&self, pool: &Arc<Pool>, ds: &str) -> Result<(), BackendError> {
        if self.dir.is_none() || !pool.is_volume(ds) {
            return Ok(());
        }
        let visible = pool.dataset_prop(ds, "snapdev").map_err(dsl_err)?.value == "visible"
            && pool.dataset_prop(ds, "volmode").map_err(dsl_err)?.value != "none";
        let snaps = pool.snapshots(ds);
        for s in &self.served_under(&format!("{ds}@")) {
            if !visible || !snaps.contains(s) {
                self.stop(std::slice::from_ref(s));
            }
        }
        if visible {
            for s in snaps {
                if !self.is_served(&s) {
                    let zvol = open_snapshot(pool, &s)?;
                    self.start(pool, &s, zvol, true)?;
                }
            }
        }
        Ok(())
    }

    /// Stops serving `names` (volumes, with their snapshots, or single
    /// snapshots): sockets closed and removed, connections cut.
    pub fn stop(&self, names: &[String]) {
        let gone: Vec<(String, Served)> = {
            let mut table = self.table.lock();
            let keys: Vec<String> = table
                .keys()
                .filter(|k| {
                    names.iter().any(|n| {
                        *k == n
                            || k.strip_prefix(n.as_str())
                                .is_some_and(|r| r.starts_with('@'))
                    })
                })
                .cloned()
                .collect();
            keys.into_iter()
                .filter_map(|k| table.remove(&k).map(|s| (k, s)))
                .collect()
        };
        for (name, s) in gone {
            s.listener.stop();
            self.prune_dirs(&name);
        }
    }

    /// Stops serving every volume of pool `pool`.
    pub fn stop_pool(&self, pool: &str) {
        self.stop(&self.served_under(&format!("{pool}/")));
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir(d.join(pool));
        }
    }

    /// Stops serving everything (daemon shutdown).
    pub fn stop_all(&self) {
        self.stop(&self.served_under(""));
    }

    /// The names served now that start with `prefix`.
    fn served_under(&self, prefix: &str) -> Vec<String> {
        self.table
            .lock()
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Removes the directories a socket of `name` left empty.
    fn prune_dirs(&self, name: &str) {
        let Some(root) = &self.dir else { return };
        let mut at = root.join(name);
        while let Some(parent) = at.parent() {
            if parent == root.as_path() || !parent.starts_with(root) {
                break;
            }
            if std::fs::remove_dir(parent).is_err() {
                break;
            }
            at = parent.to_path_buf();
        }
    }

    /// Runs `replace` (a rollback or receive of volume `ds`) with the
    /// volume's requests held off, then serves the volume opened anew.
    pub fn replace(
        &self,
        pool: &Arc<Pool>,
        ds: &str,
        replace: impl FnOnce() -> Result<(), BackendError>,
    ) -> Result<(), BackendError> {
        let export = self.table.lock().get(ds).map(|s| s.export.clone());
        let Some(export) = export else {
            return replace();
        };
        let mut slot = export.zvol.write();
        slot.suspend();
        let result = replace();
        match open_zvol(pool, ds) {
            Ok(z) => *slot = Arc::new(z),
            Err(e) => {
                drop(slot);
                self.stop(&[ds.to_string()]);
                return Err(e);
            }
        }
        result
    }

    /// Brings a volume in line with its properties after a change:
    /// served or not (`volmode`), its settings, its snapshots (`snapdev`).
    pub fn refresh(&self, pool: &Arc<Pool>, ds: &str) -> Result<(), BackendError> {
        let off = pool.dataset_prop(ds, "volmode").map_err(dsl_err)?.value == "none";
        if off {
            self.stop(&[ds.to_string()]);
            return Ok(());
        }
        self.serve(pool, ds)?;
        self.refresh_settings(pool, ds)?;
        self.refresh_snapshots(pool, ds)
    }

    /// Applies `sync`, `logbias` and `readonly` to a served volume.
    pub fn refresh_settings(&self, pool: &Pool, ds: &str) -> Result<(), BackendError> {
        let export = self.table.lock().get(ds).map(|s| s.export.clone());
        if let Some(export) = export {
            let s = settings_of(pool, ds)?;
            export.zvol.read().set_settings(s);
        }
        Ok(())
    }

    /// The open volume of a served `ds`.
    pub fn open_volume(&self, ds: &str) -> Option<Arc<Zvol>> {
        self.table
            .lock()
            .get(ds)
            .map(|s| s.export.zvol.read().clone())
    }

    /// Connections open on `name`'s socket.
    pub fn connections(&self, name: &str) -> usize {
        self.table
            .lock()
            .get(name)
            .map_or(0, |s| s.listener.connections())
    }
}

/// Creates `dir` and the directories between `root` and it, mode 0755.
fn make_dirs(root: &Path, dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if !root.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(root)?;
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
}
