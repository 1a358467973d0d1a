//! Mounted filesystems: each dataset's [`Zpl`] served through FUSE at its
//! mountpoint (ZFS's `libzfs_mount.c` and `libzfs_changelist.c`, done by
//! the daemon rather than by the command).
//!
//! Where a dataset mounts comes from its properties, read each time:
//! - `mountpoint`: a path (inherited with the child's name appended, the
//!   default `/POOL/PATH`), `legacy` or `none` — neither of the last two is
//!   mounted by tarn;
//! - `canmount`: `on` (mounted automatically: at create, import and daemon
//!   start, by `zfs mount -a`), `noauto` (only by `zfs mount DS`), `off`
//!   (never);
//! - the directory is the pool's `altroot` and the daemon's mount root
//!   (`TARN_MOUNT_ROOT`, see [`crate::paths`]) put in front of the path.
//!
//! A mount creates a missing directory and refuses a non-empty one unless
//! asked to overlay it. An unmount rmdirs the directory when it is empty,
//! as zfs(8) does. Filesystems are mounted parents first and unmounted
//! deepest path first, so a child mounted inside its parent never blocks
//! the parent's unmount.
//!
//! A *busy* filesystem (open files, a working directory, a mount inside
//! it) is never unmounted unless forced: the unmount fails, naming what
//! holds it, and the filesystem stays mounted and served. [`Mounts::detach`]
//! — the one path export, destroy and property changes take — is all or
//! nothing: on a busy filesystem it remounts what it had already unmounted
//! and fails. A forced unmount is a lazy detach: the directory is free at
//! once and open files keep working until closed.
//!
//! **Locking:** `table` is held for the whole of a mount or unmount
//! (including the system calls), so two requests never race for one
//! directory. Nothing served by FUSE takes it, so the daemon may itself
//! create a mountpoint directory inside another of its filesystems while
//! holding it. Callers hold the engine's `config` lock around sequences
//! (detach, change, remount); see the engine's lock order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use tarn_dsl::Pool;
use tarn_zpl::{AtimeMode, LogBias, Settings, SyncMode, XattrMode, Zpl, ZplError, ZplOptions};

use super::dsl_err;
use super::space::DatasetSpaceHook;
use crate::api::MountRow;
use crate::backend::BackendError;
use crate::limits::{
    SHUTDOWN_UNMOUNT_GRACE, SHUTDOWN_UNMOUNT_POLL, UNMOUNT_BUSY_PAUSE, UNMOUNT_BUSY_RETRIES,
};
use tarn_fuse::{FuseError, MountHandle, MountOptions};

/// The `canmount` property.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CanMount {
    On,
    Off,
    NoAuto,
}

/// Where the `mountpoint` property puts a filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// The directory it mounts on (mount root and altroot included).
    Dir(PathBuf),
    Legacy,
    None,
}

/// What a dataset's properties say about mounting it now.
#[derive(Debug, Clone)]
pub struct Plan {
    pub canmount: CanMount,
    pub place: Place,
    pub settings: Settings,
}

impl Plan {
    /// Mounted without being asked by name (create, import, `mount -a`).
    pub fn automatic(&self) -> bool {
        self.canmount == CanMount::On && matches!(self.place, Place::Dir(_))
    }
}

/// How to mount.
#[derive(Debug, Clone, Copy, Default)]
pub struct How {
    /// Mount over a non-empty directory (`-O`).
    pub overlay: bool,
    /// `-o ro` / `-o rw`: beats the `readonly` property for this mount.
    pub readonly: Option<bool>,
}

/// A filesystem unmounted by [`Mounts::detach`], to mount again after a
/// change (or on failure).
#[derive(Debug, Clone)]
pub struct Detached {
    pub name: String,
    /// Where it was mounted.
    pub path: PathBuf,
    pub readonly: Option<bool>,
}

struct Mounted {
    pool: Arc<Pool>,
    path: PathBuf,
    zpl: Arc<Zpl>,
    handle: MountHandle,
    /// `-o ro`/`-o rw` given when mounted.
    readonly: Option<bool>,
    /// The `exec`, `setuid` and `devices` properties it is mounted with.
    flags: MountFlags,
}

/// The dataset properties that are per-mount flags (noexec, nosuid,
/// nodev).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MountFlags {
    exec: bool,
    setuid: bool,
    devices: bool,
}

fn mount_flags(pool: &Pool, ds: &str) -> Result<MountFlags, BackendError> {
    let on = |p: &str| {
        pool.dataset_prop(ds, p)
            .map(|v| v.value != "off")
            .map_err(dsl_err)
    };
    Ok(MountFlags {
        exec: on("exec")?,
        setuid: on("setuid")?,
        devices: on("devices")?,
    })
}

/// The daemon's mounted filesystems.
pub struct Mounts {
    root: Option<PathBuf>,
    /// Where each mount is recorded (`daemon::dying`).
    record: Option<PathBuf>,
    table: Mutex<BTreeMap<String, Mounted>>,
}

fn mount_err(path: &Path, why: impl ToString) -> BackendError {
    BackendError::Mount {
        path: path.display().to_string(),
        why: why.to_string(),
    }
}

fn unmount_err(path: &Path, why: impl ToString) -> BackendError {
    BackendError::Unmount {
        path: path.display().to_string(),
        why: why.to_string(),
    }
}

fn busy(path: &Path) -> BackendError {
    unmount_err(path, "pool or dataset is busy")
}

/// The POSIX layer's settings from a dataset's properties.
pub fn settings_of(pool: &Pool, ds: &str) -> Result<Settings, BackendError> {
    let get = |p: &str| pool.dataset_prop(ds, p).map(|v| v.value).map_err(dsl_err);
    let recordsize = get("recordsize")?;
    let recordsize = recordsize
        .parse()
        .map_err(|_| BackendError::Other(format!("bad recordsize '{recordsize}'")))?;
    let atime = match (get("atime")?.as_str(), get("relatime")?.as_str()) {
        ("off", _) => AtimeMode::Off,
        (_, "off") => AtimeMode::Strict,
        _ => AtimeMode::Relatime,
    };
    // `on` is the historical spelling of `dir`.
    let xattr = match get("xattr")?.as_str() {
        "dir" | "on" => XattrMode::Dir,
        "off" => XattrMode::Off,
        _ => XattrMode::Sa,
    };
    let sync = match get("sync")?.as_str() {
        "always" => SyncMode::Always,
        "disabled" => SyncMode::Disabled,
        _ => SyncMode::Standard,
    };
    let logbias = match get("logbias")?.as_str() {
        "throughput" => LogBias::Throughput,
        _ => LogBias::Latency,
    };
    Ok(Settings {
        recordsize,
        atime,
        xattr,
        readonly: get("readonly")? == "on",
        sync,
        logbias,
        utf8only: get("utf8only")? == "on",
        ..Settings::default()
    })
}

/// Opens the filesystem of `ds`: formats it when `fresh` (or when an
/// older tarn created the dataset without one), else mounts it.
fn open_zpl(pool: &Arc<Pool>, ds: &str, s: Settings, fresh: bool) -> Result<Zpl, ZplError> {
    let opts = |settings| ZplOptions {
        settings,
        space: Arc::new(DatasetSpaceHook::new(pool.clone(), ds)),
        zil: pool.dataset_zil(ds).ok(),
        ..ZplOptions::default()
    };
    let os = pool
        .dataset_objset(ds)
        .map_err(|e| ZplError::Io(e.to_string()))?;
    if !fresh {
        match Zpl::mount(os.clone(), pool.txg().clone(), opts(s)) {
            Err(ZplError::Invalid("dataset holds no filesystem")) => {}
            other => return other,
        }
    }
    // Formatting writes: it is done read-write, then the settings apply.
    let zpl = Zpl::format(
        os,
        pool.txg().clone(),
        opts(Settings {
            readonly: false,
            ..s
        }),
    )?;
    zpl.set_settings(s)?;
    Ok(zpl)
}

/// Formats the filesystem of a dataset just created.
pub fn format(pool: &Arc<Pool>, ds: &str) -> Result<(), BackendError> {
    let settings = settings_of(pool, ds)?;
    open_zpl(pool, ds, settings, true)
        .map(drop)
        .map_err(|e| BackendError::Other(format!("cannot create a filesystem on '{ds}': {e}")))
}

fn fuse_options(ds: &str, readonly: bool, flags: MountFlags) -> MountOptions {
    MountOptions {
        fsname: ds.to_string(),
        readonly,
        exec: flags.exec,
        setuid: flags.setuid,
        devices: flags.devices,
        allow_other: true,
        default_permissions: true,
        ..MountOptions::default()
    }
}

/// An unmount failure as zfs(8) words it, with what keeps a busy
/// filesystem busy.
fn unmount_failure(path: &Path, e: FuseError) -> BackendError {
    match e {
        FuseError::Busy { holders, .. } if holders.is_empty() => busy(path),
        FuseError::Busy { holders, .. } => unmount_err(
            path,
            format!("pool or dataset is busy: {}", holders.join("; ")),
        ),
        other => unmount_err(path, other),
    }
}

/// Path depth, for deepest-first unmounting.
fn depth(path: &Path) -> usize {
    path.components().count()
}

impl Mounts {
    /// The mount root (`TARN_MOUNT_ROOT`), if any.
    pub fn root(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    pub fn new(root: Option<PathBuf>, record: Option<PathBuf>) -> Mounts {
        Mounts {
            root,
            record,
            table: Mutex::new(BTreeMap::new()),
        }
    }

    /// The directory a `mountpoint` value means for `pool`.
    fn dir_of(&self, pool: &Pool, mountpoint: &str) -> PathBuf {
        let altroot = pool.pool_prop("altroot").map(|v| v.value).ok();
        let mut path = self.root.clone().unwrap_or_else(|| PathBuf::from("/"));
        for part in [altroot.as_deref().unwrap_or(""), mountpoint] {
            let rel = part.trim_start_matches('/');
            if !rel.is_empty() && part != "-" {
                path.push(rel);
            }
        }
        path
    }

    /// What the properties of `ds` say about mounting it.
    pub fn plan(&self, pool: &Pool, ds: &str) -> Result<Plan, BackendError> {
        if pool.is_volume(ds) {
            return Err(BackendError::Invalid(format!(
                "cannot open '{ds}': operation not applicable to datasets of this type"
            )));
        }
        let get = |p: &str| pool.dataset_prop(ds, p).map(|v| v.value).map_err(dsl_err);
        let canmount = match get("canmount")?.as_str() {
            "off" => CanMount::Off,
            "noauto" => CanMount::NoAuto,
            _ => CanMount::On,
        };
        let place = match get("mountpoint")?.as_str() {
            "legacy" => Place::Legacy,
            "none" => Place::None,
            mp => Place::Dir(self.dir_of(pool, mp)),
        };
        Ok(Plan {
            canmount,
            place,
            settings: settings_of(pool, ds)?,
        })
    }

    /// Where object `obj` of mounted dataset `ds` is, as a path under its
    /// mountpoint (`zpool status -v`); `None` if `ds` is not mounted or
    /// the object has no path.
    pub fn file_path(&self, ds: &str, obj: u64) -> Option<String> {
        let (zpl, path) = {
            let table = self.table.lock();
            let m = table.get(ds)?;
            (m.zpl.clone(), m.path.clone())
        };
        let rel = zpl.path_of(obj)?;
        Some(path.join(rel).display().to_string())
    }

    /// Makes the kernel write back what it caches for the mounted ones of
    /// `names` (dirty pages of the writeback cache), so that a snapshot
    /// taken next holds every write a program saw succeed: `syncfs` on the
    /// mountpoint sends the pages to the daemon as FUSE writes, which the
    /// mount's workers serve while this thread waits.
    pub fn flush(&self, names: &[String]) {
        let paths: Vec<PathBuf> = {
            let table = self.table.lock();
            names
                .iter()
                .filter_map(|n| table.get(n).map(|m| m.path.clone()))
                .collect()
        };
        for path in paths {
            tarn_fuse::write_back(&path);
        }
    }

    /// `zfs rollback` of `ds` (mounted or not): `rollback` replaces the
    /// dataset; a mounted filesystem is suspended first (the kernel's dirty
    /// pages written back, changes refused) and then serves the rolled-back
    /// dataset in place, with the kernel's caches of the old contents
    /// dropped (tarn-fuse's `MountHandle::replace`).
    pub fn rollback(
        &self,
        pool: &Arc<Pool>,
        ds: &str,
        rollback: impl FnOnce() -> Result<(), BackendError>,
    ) -> Result<(), BackendError> {
        let mut table = self.table.lock();
        let Some(m) = table.get_mut(ds) else {
            drop(table);
            return rollback();
        };
        m.handle.quiesce();
        let result = rollback();
        // Rolled back or not, the mount serves a filesystem opened anew:
        // the one it had is suspended.
        let mut settings = settings_of(pool, ds)?;
        if let Some(ro) = m.readonly {
            settings.readonly = ro;
        }
        match open_zpl(pool, ds, settings, false) {
            Ok(zpl) => {
                let zpl = Arc::new(zpl);
                m.handle.replace(zpl.clone());
                m.zpl = zpl;
            }
            Err(e) => {
                return Err(BackendError::Other(format!(
                    "cannot mount '{ds}' again after the rollback: {e}"
                )))
            }
        }
        result
    }

    /// Snapshot `snap` of `ds` was destroyed or renamed: the mount's
    /// `.zfs/snapshot` lets it go.
    pub fn snapshot_gone(&self, ds: &str, snap: &str) {
        if let Some(m) = self.table.lock().get(ds) {
            m.handle.snapshot_gone(snap);
        }
    }

    pub fn is_mounted(&self, ds: &str) -> bool {
        self.table.lock().contains_key(ds)
    }

    /// Every mounted filesystem, by dataset name.
    pub fn list(&self) -> Vec<MountRow> {
        self.table
            .lock()
            .iter()
            .map(|(name, m)| MountRow {
                name: name.clone(),
                mountpoint: m.path.display().to_string(),
            })
            .collect()
    }

    /// The dataset mounted at `path`, if any.
    pub fn at_path(&self, path: &Path) -> Option<String> {
        self.table
            .lock()
            .iter()
            .find(|(_, m)| m.path == path)
            .map(|(name, _)| name.clone())
    }

    /// Mounted datasets of one pool (`pool` and `pool/…`).
    pub fn of_pool(&self, pool: &str) -> Vec<String> {
        let prefix = format!("{pool}/");
        self.table
            .lock()
            .keys()
            .filter(|k| *k == pool || k.starts_with(&prefix))
            .cloned()
            .collect()
    }

    /// Mounts `ds` as `how` says; the refusals are zfs(8)'s.
    pub fn mount(&self, pool: &Arc<Pool>, ds: &str, how: How) -> Result<(), BackendError> {
        let plan = self.plan(pool, ds)?;
        let refuse = |why: &str| mount_err(Path::new(ds), why);
        let path = match &plan.place {
            Place::Dir(path) => path.clone(),
            Place::Legacy => return Err(refuse("legacy mountpoint: not mounted by tarn")),
            Place::None => return Err(refuse("no mountpoint set")),
        };
        if plan.canmount == CanMount::Off {
            return Err(refuse("'canmount' property is set to 'off'"));
        }
        let mut table = self.table.lock();
        if table.contains_key(ds) {
            return Err(refuse("filesystem already mounted"));
        }
        std::fs::create_dir_all(&path)
            .map_err(|e| mount_err(&path, format!("failed to create mountpoint: {e}")))?;
        // The kernel's name for it (no symlinks), as the mount table has it.
        let path = path.canonicalize().map_err(|e| mount_err(&path, e))?;
        if !path.is_dir() {
            return Err(mount_err(&path, "not a directory"));
        }
        if let Some((other, _)) = table.iter().find(|(_, m)| m.path == path) {
            return Err(mount_err(&path, format!("'{other}' is mounted there")));
        }
        if !how.overlay && !tarn_fuse::is_mountpoint_empty(&path) {
            return Err(mount_err(&path, "directory is not empty"));
        }
        let readonly = how.readonly.unwrap_or(plan.settings.readonly);
        let settings = Settings {
            readonly,
            ..plan.settings
        };
        let zpl = Arc::new(open_zpl(pool, ds, settings, false).map_err(|e| mount_err(&path, e))?);
        let snapdir = Arc::new(Snapdir {
            pool: pool.clone(),
            ds: ds.to_string(),
            settings,
            path: path.clone(),
        });
        let flags = mount_flags(pool, ds)?;
        let handle = tarn_fuse::mount_with_snapshots(
            zpl.clone(),
            &path,
            &fuse_options(ds, readonly, flags),
            Some(snapdir),
        )
        .map_err(|e| match e {
            FuseError::Mount { source, .. } => mount_err(&path, source),
            other => mount_err(&path, other),
        })?;
        if let (Some(record), Some(dev)) = (&self.record, handle.dev()) {
            crate::daemon::dying::record_mount(record, dev, handle.mountpoint());
        }
        table.insert(
            ds.to_string(),
            Mounted {
                pool: pool.clone(),
                path: handle.mountpoint().to_path_buf(),
                zpl,
                handle,
                readonly: how.readonly,
                flags,
            },
        );
        Ok(())
    }

    /// Unmounts one mounted filesystem (the caller holds `table`). A busy
    /// one is left mounted unless `force`.
    fn unmount_locked(
        table: &mut BTreeMap<String, Mounted>,
        ds: &str,
        force: bool,
    ) -> Result<Detached, BackendError> {
        let Some(m) = table.get_mut(ds) else {
            return Err(unmount_err(Path::new(ds), "not currently mounted"));
        };
        // A busy filesystem stays mounted, and in the table. EBUSY with
        // no holder to name is usually a passing reference (a `df`, a
        // path lookup crossing the mount): asked again a few times.
        let mut tries = 0;
        loop {
            match m.handle.unmount(force) {
                Ok(()) => break,
                Err(FuseError::Busy { holders, .. })
                    if holders.is_empty() && tries < UNMOUNT_BUSY_RETRIES =>
                {
                    tries += 1;
                    std::thread::sleep(UNMOUNT_BUSY_PAUSE);
                }
                Err(e) => return Err(unmount_failure(&m.path, e)),
            }
        }
        let m = table.remove(ds).expect("looked up above");
        // As zfs(8): the directory goes when it is empty (else it stays).
        let _ = std::fs::remove_dir(&m.path);
        Ok(Detached {
            name: ds.to_string(),
            path: m.path,
            readonly: m.readonly,
        })
    }

    /// Unmounts every mounted one of `names`, deepest directory first, all
    /// or nothing (see the module comment). Not-mounted names are skipped.
    pub fn detach(&self, names: &[String], force: bool) -> Result<Vec<Detached>, BackendError> {
        let mut table = self.table.lock();
        let mut order: Vec<(usize, String)> = names
            .iter()
            .filter_map(|n| table.get(n).map(|m| (depth(&m.path), n.clone())))
            .collect();
        order.sort_by(|a, b| b.cmp(a));
        let mut done: Vec<(Detached, Arc<Pool>)> = Vec::new();
        for (_, name) in order {
            let pool = table[&name].pool.clone();
            match Self::unmount_locked(&mut table, &name, force) {
                Ok(d) => done.push((d, pool)),
                Err(e) => {
                    drop(table);
                    self.restore(done);
                    return Err(e);
                }
            }
        }
        Ok(done.into_iter().map(|(d, _)| d).collect())
    }

    /// Mounts again what a failed [`Mounts::detach`] had unmounted.
    fn restore(&self, done: Vec<(Detached, Arc<Pool>)>) {
        for (d, pool) in done.into_iter().rev() {
            let how = How {
                overlay: true,
                readonly: d.readonly,
            };
            if let Err(e) = self.mount(&pool, &d.name, how) {
                eprintln!("tarn daemon: cannot remount '{}': {e}", d.name);
            }
        }
    }

    /// Unmounts one dataset, and first its descendants mounted inside it
    /// (which would keep it busy).
    pub fn unmount(&self, pool: &Pool, ds: &str, force: bool) -> Result<(), BackendError> {
        let inside: Vec<String> = {
            let table = self.table.lock();
            let Some(top) = table.get(ds).map(|m| m.path.clone()) else {
                return Err(unmount_err(Path::new(ds), "not currently mounted"));
            };
            super::datasets::subtree(pool, ds, None)
                .into_iter()
                .filter(|n| table.get(n).is_some_and(|m| m.path.starts_with(&top)))
                .collect()
        };
        self.detach(&inside, force).map(|_| ())
    }

    /// Mounts every dataset of `names` (parents first) whose properties
    /// say it mounts automatically; the errors of those that failed.
    pub fn mount_auto(&self, pool: &Arc<Pool>, names: &[String], how: How) -> Vec<BackendError> {
        let mut errors = Vec::new();
        for ds in names {
            // A filesystem being received into is not whole yet.
            if pool.is_inconsistent(ds) || pool.is_volume(ds) {
                continue;
            }
            let automatic = match self.plan(pool, ds) {
                Ok(plan) => plan.automatic(),
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            if automatic && !self.is_mounted(ds) {
                if let Err(e) = self.mount(pool, ds, how) {
                    errors.push(e);
                }
            }
        }
        errors
    }

    /// Applies the current properties of mounted `ds` to its filesystem
    /// (recordsize, atime, xattr, readonly: they take effect at once).
    pub fn refresh_settings(&self, pool: &Pool, ds: &str) -> Result<(), BackendError> {
        let mut table = self.table.lock();
        let Some(m) = table.get_mut(ds) else {
            return Ok(());
        };
        // exec, setuid, devices: the mount's own flags, changed in place.
        let flags = mount_flags(pool, ds)?;
        if flags != m.flags {
            tarn_fuse::remount_flags(&m.path, flags.exec, flags.setuid, flags.devices)
                .map_err(|e| mount_err(&m.path, e))?;
            m.flags = flags;
        }
        let mut s = settings_of(pool, ds)?;
        if let Some(ro) = m.readonly {
            s.readonly = ro;
        }
        m.zpl
            .set_settings(s)
            .map_err(|e| BackendError::Other(format!("cannot apply settings to '{ds}': {e}")))
    }

    /// Mounted datasets, deepest directory first (the order to unmount).
    pub fn deepest_first(&self) -> Vec<String> {
        let table = self.table.lock();
        let mut order: Vec<(usize, &String)> =
            table.iter().map(|(n, m)| (depth(&m.path), n)).collect();
        order.sort_by(|a, b| b.cmp(a));
        order.into_iter().map(|(_, n)| n.clone()).collect()
    }

    /// Unmounts everything (daemon shutdown): busy filesystems get
    /// [`SHUTDOWN_UNMOUNT_GRACE`] to become idle, then are detached lazily.
    pub fn unmount_everything(&self) {
        let deadline = Instant::now() + SHUTDOWN_UNMOUNT_GRACE;
        loop {
            let names: Vec<String> = self.table.lock().keys().cloned().collect();
            if names.is_empty() {
                return;
            }
            let force = Instant::now() >= deadline;
            let mut table = self.table.lock();
            let mut order: Vec<(usize, String)> = names
                .iter()
                .filter_map(|n| table.get(n).map(|m| (depth(&m.path), n.clone())))
                .collect();
            order.sort_by(|a, b| b.cmp(a));
            for (_, name) in order {
                match Self::unmount_locked(&mut table, &name, force) {
                    Ok(_) => {}
                    Err(BackendError::Unmount { path, why }) if force => {
                        eprintln!("tarn daemon: cannot unmount '{path}': {why}");
                    }
                    Err(_) => {}
                }
            }
            drop(table);
            if force {
                return;
            }
            if !self.table.lock().is_empty() {
                std::thread::sleep(SHUTDOWN_UNMOUNT_POLL);
            }
        }
    }
}

/// Detaches (lazily) every `fuse.tarn` mount a dead daemon left behind
/// (under the mount root, when there is one: daemons with different roots
/// leave each other alone): their directories answer ENOTCONN until then.
/// Outermost first: a lazy detach takes the mounts below with it (they
/// cannot even be named while the dead mount above them is there).
pub fn clean_stale_mounts(root: Option<&Path>) {
    // Probing a live mount pins it for a moment (its unmount would see
    // EBUSY), so only the mounts this daemon may own are probed.
    let mut stale: Vec<PathBuf> = tarn_fuse::tarn_mounts()
        .into_iter()
        .map(|m| m.mountpoint)
        .filter(|p| root.is_none_or(|r| p.starts_with(r)))
        .filter(|p| tarn_fuse::is_dead_mount(p))
        .collect();
    stale.sort_by_key(|p| (depth(p), p.clone()));
    stale.dedup();
    let mut gone: Vec<PathBuf> = Vec::new();
    for path in stale {
        if gone.iter().any(|g| path.starts_with(g)) {
            continue;
        }
        match tarn_fuse::unmount_path(&path, true) {
            Ok(()) => eprintln!(
                "tarn daemon: detached stale mount {} left by a previous daemon",
                path.display()
            ),
            Err(e) => eprintln!(
                "tarn daemon: cannot detach stale mount {}: {e}",
                path.display()
            ),
        }
        gone.push(path);
    }
}

/// A read-only filesystem over `os` (a snapshot, or a dataset's committed
/// state), with `ds`'s settings.
pub fn readonly_zpl(
    pool: &Arc<Pool>,
    ds: &str,
    os: Arc<tarn_dmu::Objset>,
) -> Result<Zpl, BackendError> {
    let settings = Settings {
        readonly: true,
        ..settings_of(pool, ds)?
    };
    let opts = ZplOptions {
        settings,
        ..ZplOptions::default()
    };
    Zpl::mount(os, pool.txg().clone(), opts)
        .map_err(|e| BackendError::Other(format!("cannot read '{ds}': {e}")))
}

/// `.zfs/snapshot` of one mounted dataset (see tarn-fuse's `snapdir`).
struct Snapdir {
    pool: Arc<Pool>,
    ds: String,
    /// The head's settings: a snapshot mounts with them, read-only.
    settings: Settings,
    /// The mountpoint (its dirty pages are written back before `mkdir`
    /// takes a snapshot).
    path: PathBuf,
}

fn io_err(e: tarn_dsl::DslError) -> std::io::Error {
    use tarn_dsl::DslError as D;
    let errno = match e {
        D::NoSuchDataset(_) => libc::ENOENT,
        D::Exists(_) => libc::EEXIST,
        D::Busy(_) => libc::EBUSY,
        D::Invalid(_) => libc::EINVAL,
        D::NoSpace => libc::ENOSPC,
        _ => libc::EIO,
    };
    std::io::Error::from_raw_os_error(errno)
}

impl tarn_fuse::SnapshotSource for Snapdir {
    fn list(&self) -> Vec<(String, u64)> {
        self.pool.snapshot_ids(&self.ds)
    }

    fn open(&self, name: &str) -> std::io::Result<(u64, Arc<Zpl>)> {
        let id = self
            .list()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, id)| id)
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOENT))?;
        let full = format!("{}@{name}", self.ds);
        let os = self.pool.snapshot_objset(&full).map_err(io_err)?;
        let opts = ZplOptions {
            settings: Settings {
                readonly: true,
                ..self.settings
            },
            ..ZplOptions::default()
        };
        let zpl = Zpl::mount(os, self.pool.txg().clone(), opts)
            .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))?;
        Ok((id, Arc::new(zpl)))
    }

    fn create(&self, name: &str) -> std::io::Result<()> {
        let full = format!("{}@{name}", self.ds);
        tarn_dsl::names::validate_snapshot_name(&full)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        tarn_fuse::write_back(&self.path);
        self.pool
            .snapshot(std::slice::from_ref(&full), &[])
            .map_err(io_err)?;
        self.pool.log_history(&format!("zfs snapshot {full}"));
        Ok(())
    }

    fn destroy(&self, name: &str) -> std::io::Result<()> {
        let full = format!("{}@{name}", self.ds);
        self.pool
            .snapshots_destroy(std::slice::from_ref(&full), false)
            .map_err(io_err)?;
        self.pool.log_history(&format!("zfs destroy {full}"));
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        let full = format!("{}@{from}", self.ds);
        tarn_dsl::names::validate_snapshot_name(&format!("{}@{to}", self.ds))
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        self.pool.rename_snapshot(&full, to).map_err(io_err)?;
        self.pool
            .log_history(&format!("zfs rename {full} {}@{to}", self.ds));
        Ok(())
    }

    fn visible(&self) -> bool {
        self.pool
            .dataset_prop(&self.ds, "snapdir")
            .is_ok_and(|v| v.value == "visible")
    }
}
