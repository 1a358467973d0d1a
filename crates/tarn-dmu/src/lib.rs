//! tarn-dmu: objects and object sets (ZFS's DMU).
//!
//! Objects are arrays of blocks under a radix tree of indirect blocks,
//! described by dnodes; an object set is an array of dnodes (the meta-dnode)
//! plus a header block. Key-value objects (ZAPs) hold directories and
//! property lists. The dataset layer (`tarn-dsl`) builds the dataset tree,
//! its properties with inheritance, and space accounting on top.

pub mod brlock;
mod cache;
mod dirty;
mod error;
mod fatzap;
mod locked;
pub mod lockstat;
pub mod objset;
mod prefetch;
mod send;
mod sync;
mod tree;
pub mod zap;

pub use cache::{pool_block_cache_bytes, BlockCache, BLOCK_CACHE_BYTES_MAX, WRITTEN_SHARE_DIVISOR};
pub use error::DmuError;
pub use locked::ScanStep;
pub use objset::{
    DataErrorHook, FreeHook, FreeToStore, ObjectInfo, Objset, ReadPiece, Rest, TxHold, WritePolicy,
};
pub use send::BlockChange;
pub use tarn_format::zap::ZapValue;
pub use zap::ZapCursor;
