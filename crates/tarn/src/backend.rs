//! The seam between the daemon and the storage engine.
//!
//! The daemon owns sockets, validation and process life; the engine owns
//! pools and datasets. [`Backend`] is the whole contract between them: one
//! method per protocol operation, taking the already-validated arguments and
//! returning typed results. The daemon serialises results, so an engine never
//! sees JSON.
//!
//! **Invariant:** a backend method is only called with a request that passed
//! [`crate::validate::validate`]: names are valid pool/dataset names, property
//! names are known and values parsed to their canonical form, and a create
//! request's vdev layout passed the replication check (or was forced). An
//! add request passed the structural checks only: its replication check
//! needs the pool's current layout, so the engine makes it.
//!
//! Methods may be called concurrently from several connection threads; the
//! backend does its own locking (`Send + Sync`).
//!
//! Errors are typed ([`BackendError`]); the daemon turns them into the
//! OpenZFS-shaped message (`cannot create 'tank': pool already exists`) with
//! [`BackendError::message`], so every engine error reads the same way.

use crate::api::PoolIostat;
use crate::api::{
    DatasetRow, ImportablePool, InjectHandler, MountRow, PoolHistory, PoolListRow, PoolStatus,
    PropRow, ZfsCreate, ZfsDestroy, ZfsGet, ZfsInherit, ZfsList, ZfsMount, ZfsSet, ZfsUnmount,
    ZpoolAdd, ZpoolClear, ZpoolCreate, ZpoolDestroy, ZpoolDetach, ZpoolExport, ZpoolGet,
    ZpoolHistory, ZpoolImport, ZpoolImportScan, ZpoolIostat, ZpoolList, ZpoolOffline, ZpoolOnline,
    ZpoolRemove, ZpoolScrub, ZpoolSet, ZpoolStatus,
};
use crate::api::{ZinjectAdd, ZinjectClear, ZpoolAttach};

/// What can go wrong inside the engine, as the user should hear it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// No imported pool has this name.
    #[error("no such pool")]
    NoSuchPool(String),
    #[error("pool already exists")]
    PoolExists(String),
    #[error("dataset does not exist")]
    NoSuchDataset(String),
    #[error("dataset already exists")]
    DatasetExists(String),
    #[error("parent does not exist")]
    NoParent(String),
    /// The object is in use (mounted, has children, open files…).
    #[error("{0}")]
    Busy(String),
    /// The request makes no sense for this object (reason given).
    #[error("{0}")]
    Invalid(String),
    /// A device or file failed (reason given, e.g. the OS error).
    #[error("{0}")]
    Io(String),
    /// The pool has no space left for this operation.
    #[error("out of space")]
    NoSpace,
    /// Anything else; the reason is printed as is.
    #[error("{0}")]
    Other(String),
    /// A mount failed; reported on the directory, as zfs(8) does
    /// (`cannot mount '/tank': directory is not empty`).
    #[error("cannot mount '{path}': {why}")]
    Mount { path: String, why: String },
    /// An unmount failed (`cannot unmount '/tank': pool or dataset is busy`).
    #[error("cannot unmount '{path}': {why}")]
    Unmount { path: String, why: String },
    /// Several complete messages (`zfs mount -a` with more than one
    /// failure), one per line.
    #[error("{}", .0.join("\n"))]
    Many(Vec<String>),
    /// A complete message printed as it is, as zpool(8) prints a vdev
    /// specification error (`invalid vdev specification\n…`).
    #[error("{0}")]
    Message(String),
}

impl BackendError {
    /// No error, one, or all of them as [`BackendError::Many`].
    pub fn combine(errors: Vec<BackendError>) -> Result<(), BackendError> {
        let mut errors = errors.into_iter();
        match (errors.next(), errors.next()) {
            (None, _) => Ok(()),
            (Some(one), None) => Err(one),
            (Some(a), Some(b)) => {
                let mut all = vec![a.to_string(), b.to_string()];
                all.extend(errors.map(|e| e.to_string()));
                Err(BackendError::Many(all))
            }
        }
    }
}

impl BackendError {
    /// The full message a CLI prints: `cannot <verb> '<target>': <reason>`.
    /// A missing pool or dataset is reported on the object that is missing,
    /// as `zpool`/`zfs` do (`cannot open 'nosuch': no such pool`), except for
    /// create, where the object being created is named.
    pub fn message(&self, verb: &str, target: &str) -> String {
        match self {
            // Complete messages of their own: the directory is the object.
            BackendError::Mount { .. }
            | BackendError::Unmount { .. }
            | BackendError::Many(_)
            | BackendError::Message(_) => self.to_string(),
            BackendError::NoSuchPool(name) | BackendError::NoSuchDataset(name)
                if verb != "create" && !name.is_empty() =>
            {
                format!("cannot open '{name}': {self}")
            }
            BackendError::NoSuchPool(name) if verb == "create" && !name.is_empty() => {
                format!("cannot {verb} '{target}': no such pool '{name}'")
            }
            _ if target.is_empty() => format!("cannot {verb}: {self}"),
            // zpool(8) names a device without quotes.
            _ if matches!(
                verb,
                "remove"
                    | "detach"
                    | "offline"
                    | "online"
                    | "attach"
                    | "replace"
                    | "scrub"
                    | "pause scrubbing"
                    | "cancel scrubbing"
            ) =>
            {
                format!("cannot {verb} {target}: {self}")
            }
            _ => format!("cannot {verb} '{target}': {self}"),
        }
    }
}

/// The storage engine as the daemon sees it. See the module comment for the
/// contract; every method returns a typed result or a [`BackendError`].
pub trait Backend: Send + Sync {
    /// Called once before the daemon serves: re-import cached pools.
    fn startup(&self) -> Result<(), BackendError>;
    /// Called once after the last connection closed: sync and export pools.
    fn shutdown(&self) -> Result<(), BackendError>;

    fn zpool_create(&self, args: ZpoolCreate) -> Result<(), BackendError>;
    fn zpool_destroy(&self, args: ZpoolDestroy) -> Result<(), BackendError>;
    fn zpool_list(&self, args: ZpoolList) -> Result<Vec<PoolListRow>, BackendError>;
    fn zpool_status(&self, args: ZpoolStatus) -> Result<Vec<PoolStatus>, BackendError>;
    fn zpool_get(&self, args: ZpoolGet) -> Result<Vec<PropRow>, BackendError>;
    fn zpool_set(&self, args: ZpoolSet) -> Result<(), BackendError>;
    fn zpool_import_scan(&self, args: ZpoolImportScan)
        -> Result<Vec<ImportablePool>, BackendError>;
    /// Returns what to tell the admin: how many intent log records the
    /// mounts replayed (empty when none).
    fn zpool_import(&self, args: ZpoolImport) -> Result<String, BackendError>;
    fn zpool_export(&self, args: ZpoolExport) -> Result<(), BackendError>;
    fn zpool_history(&self, args: ZpoolHistory) -> Result<Vec<PoolHistory>, BackendError>;
    fn zpool_add(&self, args: ZpoolAdd) -> Result<(), BackendError>;
    fn zpool_remove(&self, args: ZpoolRemove) -> Result<(), BackendError>;
    fn zpool_detach(&self, args: ZpoolDetach) -> Result<(), BackendError>;
    fn zpool_iostat(&self, args: ZpoolIostat) -> Result<Vec<PoolIostat>, BackendError>;
    fn zpool_scrub(&self, args: ZpoolScrub) -> Result<(), BackendError>;
    fn zpool_attach(&self, args: ZpoolAttach) -> Result<(), BackendError>;
    fn zpool_offline(&self, args: ZpoolOffline) -> Result<(), BackendError>;
    fn zpool_online(&self, args: ZpoolOnline) -> Result<(), BackendError>;
    fn zpool_clear(&self, args: ZpoolClear) -> Result<(), BackendError>;

    fn zfs_create(&self, args: ZfsCreate) -> Result<(), BackendError>;
    fn zfs_destroy(&self, args: ZfsDestroy) -> Result<(), BackendError>;
    fn zfs_list(&self, args: ZfsList) -> Result<Vec<DatasetRow>, BackendError>;
    fn zfs_get(&self, args: ZfsGet) -> Result<Vec<PropRow>, BackendError>;
    fn zfs_set(&self, args: ZfsSet) -> Result<(), BackendError>;
    fn zfs_inherit(&self, args: ZfsInherit) -> Result<(), BackendError>;
    /// Mounts (or, with no name and no `all`, lists) filesystems; returns
    /// what is mounted as a result (a listing: everything mounted).
    fn zfs_mount(&self, args: ZfsMount) -> Result<Vec<MountRow>, BackendError>;
    fn zfs_unmount(&self, args: ZfsUnmount) -> Result<(), BackendError>;

    /// Registers a fault on one leaf of an imported pool (`tarn zinject`).
    fn zinject_add(&self, args: ZinjectAdd) -> Result<InjectHandler, BackendError>;
    fn zinject_list(&self) -> Result<Vec<InjectHandler>, BackendError>;
    /// Removes one handler or all; returns how many were removed.
    fn zinject_clear(&self, args: ZinjectClear) -> Result<u64, BackendError>;
}

/// The backend used when this build has no storage engine wired in: the
/// daemon, socket and CLI all work, and every storage operation answers
/// with one clear error. `default_backend` is the single place the engine
/// is chosen.
#[derive(Debug, Default)]
pub struct NoEngine;

const NO_ENGINE: &str = "the storage engine is not part of this build";

macro_rules! no_engine {
    ($($method:ident($args:ty) -> $ret:ty;)*) => {
        $(fn $method(&self, _: $args) -> Result<$ret, BackendError> {
            Err(BackendError::Other(NO_ENGINE.into()))
        })*
    };
}

impl Backend for NoEngine {
    fn startup(&self) -> Result<(), BackendError> {
        Ok(())
    }
    fn shutdown(&self) -> Result<(), BackendError> {
        Ok(())
    }
    fn zinject_list(&self) -> Result<Vec<InjectHandler>, BackendError> {
        Ok(Vec::new())
    }
    no_engine! {
        zpool_create(ZpoolCreate) -> ();
        zpool_destroy(ZpoolDestroy) -> ();
        zpool_list(ZpoolList) -> Vec<PoolListRow>;
        zpool_status(ZpoolStatus) -> Vec<PoolStatus>;
        zpool_get(ZpoolGet) -> Vec<PropRow>;
        zpool_set(ZpoolSet) -> ();
        zpool_import_scan(ZpoolImportScan) -> Vec<ImportablePool>;
        zpool_import(ZpoolImport) -> String;
        zpool_export(ZpoolExport) -> ();
        zpool_history(ZpoolHistory) -> Vec<PoolHistory>;
        zpool_add(ZpoolAdd) -> ();
        zpool_remove(ZpoolRemove) -> ();
        zpool_detach(ZpoolDetach) -> ();
        zpool_iostat(ZpoolIostat) -> Vec<PoolIostat>;
        zpool_scrub(ZpoolScrub) -> ();
        zpool_attach(ZpoolAttach) -> ();
        zpool_offline(ZpoolOffline) -> ();
        zpool_online(ZpoolOnline) -> ();
        zpool_clear(ZpoolClear) -> ();
        zfs_create(ZfsCreate) -> ();
        zfs_destroy(ZfsDestroy) -> ();
        zfs_list(ZfsList) -> Vec<DatasetRow>;
        zfs_get(ZfsGet) -> Vec<PropRow>;
        zfs_set(ZfsSet) -> ();
        zfs_inherit(ZfsInherit) -> ();
        zfs_mount(ZfsMount) -> Vec<MountRow>;
        zfs_unmount(ZfsUnmount) -> ();
        zinject_add(ZinjectAdd) -> InjectHandler;
        zinject_clear(ZinjectClear) -> u64;
    }
}

/// The backend `tarn daemon` serves. The engine (`engine.rs`) plugs in here.
pub fn default_backend(paths: &crate::paths::Paths) -> std::sync::Arc<dyn Backend> {
    std::sync::Arc::new(crate::engine::Engine::new(
        paths.cachefile.clone(),
        paths.mount_root.clone(),
    ))
}
