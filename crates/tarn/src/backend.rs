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

// Every argument and result type of the verb table (`crate::verbs`).
use crate::api::*;

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

macro_rules! backend_trait {
    ($($(#[$doc:meta])* $method:ident: $variant:ident($args:ty) -> $reply:ty;)*) => {
        /// The storage engine as the daemon sees it. See the module comment
        /// for the contract; every method returns a typed result or a
        /// [`BackendError`]. One method per verb of `crate::verbs`.
        pub trait Backend: Send + Sync {
            /// Called once before the daemon serves: re-import cached pools.
            fn startup(&self) -> Result<(), BackendError>;
            /// Called once after the last connection closed: sync and
            /// export pools.
            fn shutdown(&self) -> Result<(), BackendError>;

            $($(#[$doc])* fn $method(&self, args: $args) -> Result<$reply, BackendError>;)*
        }
    };
}

crate::verbs::verbs!(backend_trait);
