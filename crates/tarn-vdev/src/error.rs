//! The one error type of this crate.
//!
//! Every variant names what an administrator needs to act on: the device
//! path, the sizes involved, or how many devices failed out of how many. A
//! device that merely misbehaves during redundant I/O is *not* an error of
//! the operation — it is counted on the leaf (see `LeafStats`) and the
//! operation succeeds while enough copies remain.

use std::io;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VdevError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("{path}: no such file or device")]
    NotFound { path: String },
    #[error("{path}: permission denied (run as a user that may open it read-write)")]
    PermissionDenied { path: String },
    #[error("{path} is {size} bytes; a vdev needs at least {min} bytes")]
    TooSmall { path: String, size: u64, min: u64 },
    #[error("{path} is neither a regular file nor a block device")]
    NotADevice { path: String },
    #[error("{path} is in use (opened exclusively by another pool or program)")]
    InUse { path: String },
    #[error("checksum mismatch: no copy of the block verifies")]
    Checksum,
    #[error(
        "vdev {vdev}: {op} failed on {failed} of {total} devices, at most {tolerated} may fail \
         (last error: {last})"
    )]
    TooManyFailures {
        vdev: u32,
        op: &'static str,
        failed: usize,
        total: usize,
        tolerated: usize,
        last: String,
    },
    /// A read found no device of the vdev that answers (every copy, or
    /// more raidz columns than its parity, unreachable): OpenZFS's ENXIO.
    #[error("vdev {vdev}: no device answers ({last})")]
    Unreachable { vdev: u32, last: String },
    #[error("invalid vdev configuration: {0}")]
    Config(String),
    #[error("invalid I/O request: {0}")]
    BadRequest(String),
    #[error("raidz parity computation failed: {0}")]
    Parity(String),
    #[error(transparent)]
    Corrupted(#[from] tarn_format::Corrupted),
}

impl VdevError {
    /// Classifies an error from opening `path` into the variant an admin can
    /// act on.
    pub(crate) fn from_open(path: &str, e: io::Error) -> VdevError {
        let path = path.to_string();
        match e.kind() {
            io::ErrorKind::NotFound => VdevError::NotFound { path },
            io::ErrorKind::PermissionDenied => VdevError::PermissionDenied { path },
            _ if e.raw_os_error() == Some(libc::EBUSY) => VdevError::InUse { path },
            _ => VdevError::Io { path, source: e },
        }
    }
}
