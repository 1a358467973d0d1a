//! The POSIX layer's one error type and its errno mapping.
//!
//! Every failure a caller, another process or the disk can cause is a
//! [`ZplError`]; the FUSE front end turns it into an errno with
//! [`ZplError::errno`] and nothing else. Object-layer errors are mapped
//! here once: a missing object is `ENOENT` (a stale inode number), a full
//! pool `ENOSPC`, an unreadable or corrupt block `EIO`.

use tarn_dmu::DmuError;
use tarn_pool::{StoreError, TxgError};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ZplError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("permission denied")]
    Access,
    #[error("operation not permitted")]
    Perm,
    #[error("file name too long")]
    NameTooLong,
    /// A name that is not UTF-8 on a filesystem with `utf8only=on`.
    #[error("invalid or incomplete multibyte or wide character")]
    NotUtf8,
    #[error("cross-device link")]
    CrossDevice,
    #[error("no space left on device")]
    NoSpace,
    #[error("disk quota exceeded")]
    Quota,
    #[error("read-only file system")]
    ReadOnly,
    #[error("no such attribute")]
    NoData,
    #[error("result out of range")]
    Range,
    #[error("file too large")]
    FileTooBig,
    #[error("argument list too long")]
    TooBig,
    #[error("too many links")]
    TooManyLinks,
    #[error("operation not supported")]
    NotSupported,
    #[error("no such device or address (offset past end of file)")]
    NoSuchOffset,
    #[error("device or resource busy")]
    Busy,
    /// The filesystem was replaced under the caller (a rollback): its
    /// files are no longer what this handle names.
    #[error("stale file handle")]
    Stale,
    #[error("I/O error: {0}")]
    Io(String),
    #[error("corrupted filesystem metadata: {0}")]
    Corrupted(String),
}

impl ZplError {
    /// The errno a system call reports for this error.
    pub fn errno(&self) -> i32 {
        use ZplError::*;
        match self {
            NotFound => libc::ENOENT,
            Exists => libc::EEXIST,
            NotDir => libc::ENOTDIR,
            IsDir => libc::EISDIR,
            NotEmpty => libc::ENOTEMPTY,
            Invalid(_) => libc::EINVAL,
            Access => libc::EACCES,
            Perm => libc::EPERM,
            NameTooLong => libc::ENAMETOOLONG,
            NotUtf8 => libc::EILSEQ,
            CrossDevice => libc::EXDEV,
            NoSpace => libc::ENOSPC,
            Quota => libc::EDQUOT,
            ReadOnly => libc::EROFS,
            NoData => libc::ENODATA,
            Range => libc::ERANGE,
            FileTooBig => libc::EFBIG,
            TooBig => libc::E2BIG,
            TooManyLinks => libc::EMLINK,
            NotSupported => libc::EOPNOTSUPP,
            NoSuchOffset => libc::ENXIO,
            Busy => libc::EBUSY,
            Stale => libc::ESTALE,
            Io(_) | Corrupted(_) => libc::EIO,
        }
    }
}

impl From<DmuError> for ZplError {
    fn from(e: DmuError) -> Self {
        match e {
            DmuError::NoSuchObject(_) => ZplError::NotFound,
            DmuError::Store(StoreError::NoSpace) => ZplError::NoSpace,
            DmuError::Store(s) => ZplError::Io(s.to_string()),
            DmuError::Corrupted(c) => ZplError::Corrupted(c.to_string()),
            DmuError::TooBig(_) => ZplError::FileTooBig,
            // Exists/NotFound of a ZAP key are handled where they can
            // happen; reaching here means the metadata disagrees with
            // itself (a directory entry without its object, ...).
            other => ZplError::Corrupted(other.to_string()),
        }
    }
}

impl From<tarn_format::Corrupted> for ZplError {
    fn from(e: tarn_format::Corrupted) -> Self {
        ZplError::Corrupted(e.to_string())
    }
}

impl From<TxgError> for ZplError {
    fn from(e: TxgError) -> Self {
        ZplError::Io(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, ZplError>;
