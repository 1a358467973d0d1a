//! The object layer's one error type.
//!
//! Everything the world can do to an object operation — a missing object,
//! a key that exists or not, a full pool, a bad block — is a value of
//! [`DmuError`]; the POSIX layer maps it to an errno at its edge.

use tarn_format::Corrupted;
use tarn_pool::store::StoreError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DmuError {
    /// The object number names no allocated object.
    #[error("no such object {0}")]
    NoSuchObject(u64),
    /// The object number is taken (`object_claim`).
    #[error("object {0} is in use")]
    ObjectInUse(u64),
    /// A ZAP entry with this key already exists.
    #[error("entry exists")]
    Exists,
    /// No ZAP entry with this key.
    #[error("entry not found")]
    NotFound,
    /// The pool could not read or write a block.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A block read back decodes to something impossible.
    #[error(transparent)]
    Corrupted(#[from] Corrupted),
    /// An offset, size, key or value beyond a format limit.
    #[error("too big: {0}")]
    TooBig(&'static str),
    /// An argument that can never be valid (block size, empty key, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
}

pub type Result<T> = std::result::Result<T, DmuError>;
