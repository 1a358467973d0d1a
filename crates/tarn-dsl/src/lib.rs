//! tarn-dsl: datasets on top of object sets (ZFS's DSL), and the imported
//! pool as one object.
//!
//! A [`Pool`] ties the layers together: the storage pool ([`Spa`](tarn_pool::Spa)), its
//! meta object set (MOS), the dataset tree kept in the MOS, one object set
//! per dataset, and the txg engine whose sync thread writes them all and
//! commits the uberblock (`tarn_pool::Spa::commit`).
//!
//! MOS layout (object numbers other than 1 are allocated as needed):
//!
//! ```text
//! object 1   object directory (ZAP): "root_dataset" -> dir object,
//!            "pool_props" -> ZAP of locally set pool properties,
//!            "history" -> history object
//! dir        bonus DslDirPhys: head dataset, parent, child map, props ZAP,
//!            space charged here and below
//! dataset    bonus DslDatasetPhys: the object set's root block pointer and
//!            what it references
//! props      ZAP: property name -> value string (the canonical form the
//!            property table parses to)
//! child map  ZAP: child name -> dir object
//! history    byte object: records "unix-seconds<TAB>text<NL>"; bonus holds
//!            its length
//! ```
//!
//! Dataset names are not stored: a dataset's name is the path of child-map
//! keys from the root, and the root dataset is named after the pool, so
//! importing under a new name renames every dataset at once.
//!
//! **Sync path (one txg):** for every dataset whose object set has changes,
//! sync the object set through its accounting store, add the space it
//! charged to the dataset and its ancestors, store the new root pointer in
//! the dataset record; then sync the MOS and commit its root with the
//! space map log and the uberblock (`Spa::commit`).
//!
//! **Locking:** `sync_lock` is held by the sync of one txg and by each
//! administrative change (create/destroy a dataset, set a property), so an
//! administrative change lands whole in one txg. An administrative change
//! takes its txg hold *before* `sync_lock` — the sync thread takes
//! `sync_lock` only after quiescing, so this order cannot deadlock — and
//! waits for its txg to be durable after releasing both, as `zfs` commands
//! do.

mod acct;
mod clone;
mod deadlist;
pub mod devices;
mod holds;
pub mod import;
mod mos;
pub mod names;
mod pool;
pub mod props;
pub mod recv;
mod rename;
mod scan;
pub mod send;
mod snapshot;
mod verify;

pub use holds::Bookmark;
pub use pool::{DatasetSpace, HistoryRecord, Pool, PoolSpace, PropSource, PropValue};
pub use scan::ScanProgress;
pub use snapshot::SnapshotInfo;
pub use tarn_format::scan::{ScanFunc, ScanPhase, ScanPhys};
pub use verify::SpaceCheck;

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum DslError {
    #[error("dataset does not exist")]
    NoSuchDataset(String),
    #[error("dataset already exists")]
    Exists(String),
    #[error("parent does not exist")]
    NoParent(String),
    #[error("filesystem has children")]
    HasChildren(String),
    #[error("{0}")]
    Invalid(String),
    #[error("out of space")]
    NoSpace,
    #[error("I/O error: {0}")]
    Io(String),
    /// An import could not open the pool it found.
    #[error("cannot open pool: {0}")]
    CannotOpen(String),
    #[error("corrupted pool metadata: {0}")]
    Corrupted(String),
    /// The pool is busy with something that excludes the request.
    #[error("{0}")]
    Busy(String),
}

impl From<tarn_dmu::DmuError> for DslError {
    fn from(e: tarn_dmu::DmuError) -> Self {
        use tarn_dmu::DmuError as D;
        match e {
            D::Store(tarn_pool::StoreError::NoSpace) => DslError::NoSpace,
            D::Store(s) => DslError::Io(s.to_string()),
            D::Corrupted(c) => DslError::Corrupted(c.to_string()),
            other => DslError::Corrupted(other.to_string()),
        }
    }
}

impl From<tarn_zil::ZilError> for DslError {
    fn from(e: tarn_zil::ZilError) -> Self {
        match e {
            tarn_zil::ZilError::Store(tarn_pool::StoreError::NoSpace) => DslError::NoSpace,
            tarn_zil::ZilError::Header(c) => DslError::Corrupted(c.to_string()),
            other => DslError::Io(other.to_string()),
        }
    }
}

impl From<tarn_format::Corrupted> for DslError {
    fn from(e: tarn_format::Corrupted) -> Self {
        DslError::Corrupted(e.to_string())
    }
}

impl From<tarn_pool::SpaError> for DslError {
    fn from(e: tarn_pool::SpaError) -> Self {
        match e {
            tarn_pool::SpaError::Store(tarn_pool::StoreError::NoSpace) => DslError::NoSpace,
            tarn_pool::SpaError::Corrupted(c) => DslError::Corrupted(c.to_string()),
            other => DslError::Io(other.to_string()),
        }
    }
}

impl From<tarn_pool::TxgError> for DslError {
    fn from(e: tarn_pool::TxgError) -> Self {
        DslError::Io(e.to_string())
    }
}
