//! tarn-vdev: everything about devices below the pool allocator.
//!
//! The data path through this crate, bottom up:
//!
//! * [`BlockDevice`] — positional, stateless I/O on one device. Backends:
//!   [`FileDevice`] (regular file or block device), [`MemDevice`] (tests),
//!   [`FaultDevice`] (a wrapper that injects crashes, torn writes, I/O
//!   errors, bit rot and latency, all replayable from a seed).
//! * [`Leaf`] — one device inside a pool: its GUID, path, health state and
//!   the error/throughput counters `zpool status` and `iostat` show. A leaf
//!   addresses its *allocatable region*, which starts after the front labels.
//! * [`TopVdev`] — a top-level vdev (single, mirror or raidz): maps a DVA
//!   offset to leaf I/O, adds redundancy on write, and on read returns only
//!   data the caller's checksum accepts, repairing bad copies on the way.
//! * [`inject`] — faults an administrator or a test registers on a live
//!   leaf (`tarn zinject`): I/O errors, checksum damage, a vanished device,
//!   latency. Counted by the leaf exactly like real ones.
//! * [`label`] — the four labels of a leaf (config + uberblock ring), whose
//!   byte layout lives in `tarn_format::label`.
//!
//! **Architecture invariant:** nothing a device can do — an I/O error, any
//! bytes on disk, a wrong size — panics in this crate; it becomes a
//! [`VdevError`] or a counted error on a leaf.
//!
//! **Architecture invariant:** [`TopVdev::read`] never returns data that the
//! caller's verify function rejected, and never overwrites anything when no
//! candidate verified.

mod aggregate;
mod classes;
pub mod device;
pub mod dtl;
pub mod error;
pub mod fault;
pub mod file;
pub mod inject;
pub mod label;
mod layout;
pub mod leaf;
mod mirror;
mod parallel;
mod raidz;
pub mod raidz_map;
pub mod top;
mod uring;

pub use aggregate::WRITE_AGGREGATE_BYTES;
pub use classes::ASYNC_WRITES_UNDER_SYNC;
pub use device::{detect_ashift, BlockDevice, MemDevice, MissingDevice};
pub use dtl::Dtl;
pub use error::VdevError;
pub use fault::{CrashReport, DurableHook, FaultDevice, HookDevice};
pub use file::FileDevice;
pub use label::{
    clear_labels, read_labels, read_uberblocks, write_label_config, write_labels, write_uberblock,
};
pub use leaf::{Leaf, LeafState, LeafStats, ERROR_HISTORY_MAX};
pub use parallel::ROUND_TRIP_THREADS;
pub use raidz_map::{RaidzCol, RaidzMap};
pub use top::{Layout, TopStats, TopVdev, READ_AGGREGATE_BYTES, SCRUB_AGGREGATE_BYTES};
