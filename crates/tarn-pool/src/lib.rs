//! tarn-pool: the storage pool allocator (ZFS's SPA).
//!
//! Owns the vdevs of one pool, the metaslab allocator and its space map log,
//! the I/O pipeline that turns a logical block into checksummed, compressed,
//! allocated copies (and back), and the transaction-group engine that makes
//! a set of changes durable atomically with one uberblock write.
//!
//! The object layer above (tarn-dmu) sees the pool only through
//! [`BlockStore`]: write a block, read a block, free a block.

pub mod accounting;
pub mod health;
pub mod import;
pub mod metaslab;
pub mod range_tree;
mod scrub;
pub mod spa;
pub mod spares;
pub mod store;
pub mod suspend;
pub mod throttle;
pub mod tunables;
pub mod txg;
pub mod vdevs;

pub use scrub::{BlockScrub, FreeHold};
pub use spa::{NewTop, Spa, SpaError, TXG_INITIAL};
pub use store::{BlockStore, BlockWrite, LogStore, MemBlockStore, StoreError, WriteProps};
pub use suspend::{FailMode, SuspendGate};
pub use txg::{Pressure, SyncTarget, TxgEngine, TxgError, TxgHold};
