//! The block device abstraction and the in-memory backend.
//!
//! [`BlockDevice`] is positional I/O with no seek state, so one device can be
//! shared (`Arc<dyn BlockDevice>`) by every thread of the pool. It is the seam
//! where the deterministic simulator plugs in: production uses
//! [`crate::FileDevice`], tests use [`MemDevice`] and wrap either in
//! [`crate::FaultDevice`].
//!
//! Contract: `read_at`/`write_at` transfer the whole buffer or fail; an
//! access past `size()` fails with `InvalidInput` (never a short transfer,
//! never a panic). Data written is durable only after `flush` returns Ok,
//! or when `write_durable` returns Ok (that write only).

use parking_lot::RwLock;
use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::os::fd::BorrowedFd;

pub trait BlockDevice: Send + Sync + 'static {
    /// Fills `buf` from byte `offset`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at byte `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes every completed write durable.
    fn flush(&self) -> io::Result<()>;
    /// Writes all of `buf` at byte `offset` and returns once *this* write
    /// is durable (as `RWF_DSYNC`): a log block's write and flush in one
    /// device round trip, without waiting for other writes in flight.
    /// Other writes are not made durable by it.
    fn write_durable(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_at(buf, offset)?;
        self.flush()
    }
    /// The device opened `O_DIRECT`, if it has such a descriptor: a
    /// durable write of an aligned buffer at an aligned offset may be
    /// made on it with `RWF_DSYNC` instead of `write_durable` (several
    /// devices at once, see `uring`). Devices that do anything else in
    /// `write_durable` (simulated and fault-injecting ones) have none.
    fn direct_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    /// Size in bytes.
    fn size(&self) -> u64;
    /// The device's physical sector size in bytes (a power of two).
    fn physical_sector_size(&self) -> u32;
    /// A human-readable name for messages (`zpool status` path column).
    fn describe(&self) -> String;
    /// Whether the device is still where it was opened (a file vdev whose
    /// path was deleted or now names another file is not: REMOVED).
    fn is_present(&self) -> bool {
        true
    }
    /// Looks at the device's size again (it may have grown: `zpool online
    /// -e`) and returns it; devices of a fixed size just return it.
    fn refresh_size(&self) -> io::Result<u64> {
        Ok(self.size())
    }
    /// Whether `[offset, offset+len)` holds space the device never stored
    /// anything in: a hole of a sparse file, whose first write makes the
    /// host file system allocate (and, for a durable write, commit its
    /// journal). Devices without holes, and any doubt, say no.
    fn has_hole(&self, offset: u64, len: u64) -> bool {
        let _ = (offset, len);
        false
    }
}

/// Checks that `len` bytes at `offset` lie inside a device of `size` bytes.
pub(crate) fn check_range(offset: u64, len: usize, size: u64) -> io::Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("access of {len} bytes at {offset} is past the end of a {size}-byte device"),
        )),
    }
}

/// log2 of the device's physical sector size, clamped to 9..=16: the
/// smallest allocation unit that never makes the device read-modify-write.
/// Regular files report 4096 and so get 12.
pub fn detect_ashift(dev: &dyn BlockDevice) -> u8 {
    let pss = dev.physical_sector_size().max(1);
    // ilog2 of a u32 is at most 31, so the cast is lossless.
    (pss.ilog2() as u8).clamp(9, 16)
}

/// Bytes per chunk of a [`MemDevice`]; chunks are allocated on first write.
const MEM_CHUNK: u64 = 64 << 10;

/// A sparse in-memory device: unwritten ranges read as zeros, so tests can
/// build wide raidz vdevs of large nominal size cheaply.
pub struct MemDevice {
    size: u64,
    chunks: RwLock<HashMap<u64, Box<[u8]>>>,
}

impl MemDevice {
    pub fn new(size: u64) -> MemDevice {
        MemDevice {
            size,
            chunks: RwLock::new(HashMap::new()),
        }
    }

    /// Splits `[offset, offset+len)` into (chunk index, offset in chunk,
    /// offset in buffer, length) pieces.
    fn pieces(offset: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize, usize)> {
        let mut done = 0usize;
        std::iter::from_fn(move || {
            if done >= len {
                return None;
            }
            let pos = offset + done as u64;
            let in_chunk = (pos % MEM_CHUNK) as usize;
            let n = (MEM_CHUNK as usize - in_chunk).min(len - done);
            let piece = (pos / MEM_CHUNK, in_chunk, done, n);
            done += n;
            Some(piece)
        })
    }
}

impl BlockDevice for MemDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(offset, buf.len(), self.size)?;
        let chunks = self.chunks.read();
        for (idx, at, b, n) in Self::pieces(offset, buf.len()) {
            match chunks.get(&idx) {
                Some(c) => buf[b..b + n].copy_from_slice(&c[at..at + n]),
                None => buf[b..b + n].fill(0),
            }
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(offset, buf.len(), self.size)?;
        let mut chunks = self.chunks.write();
        for (idx, at, b, n) in Self::pieces(offset, buf.len()) {
            let c = chunks
                .entry(idx)
                .or_insert_with(|| vec![0u8; MEM_CHUNK as usize].into_boxed_slice());
            c[at..at + n].copy_from_slice(&buf[b..b + n]);
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn physical_sector_size(&self) -> u32 {
        4096
    }

    fn describe(&self) -> String {
        format!("mem:{}", self.size)
    }
}

/// The stand-in for a leaf whose device could not be opened (a pool
/// imported DEGRADED): it has the size the configuration implies, so the
/// top-level vdev keeps its geometry, and every I/O fails at once.
pub struct MissingDevice {
    path: String,
    size: u64,
}

impl MissingDevice {
    pub fn new(path: impl Into<String>, size: u64) -> MissingDevice {
        MissingDevice {
            path: path.into(),
            size,
        }
    }

    fn gone(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{}: device is missing", self.path),
        )
    }
}

impl BlockDevice for MissingDevice {
    fn read_at(&self, _buf: &mut [u8], _offset: u64) -> io::Result<()> {
        Err(self.gone())
    }

    fn write_at(&self, _buf: &[u8], _offset: u64) -> io::Result<()> {
        Err(self.gone())
    }

    fn flush(&self) -> io::Result<()> {
        Err(self.gone())
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn physical_sector_size(&self) -> u32 {
        4096
    }

    fn describe(&self) -> String {
        format!("missing:{}", self.path)
    }

    fn is_present(&self) -> bool {
        false
    }
}

/// Alignment of buffers handed to devices that may write with `O_DIRECT`:
/// the largest logical block size Linux supports.
pub(crate) const IO_ALIGN: usize = 4096;

/// The first `len` bytes of `backing` that start on an `IO_ALIGN`
/// boundary, growing `backing` (zeroed) as needed.
pub(crate) fn aligned_slice(backing: &mut Vec<u8>, len: usize) -> &mut [u8] {
    if backing.len() < len + IO_ALIGN {
        *backing = vec![0; len + IO_ALIGN];
    }
    let at = backing.as_ptr().align_offset(IO_ALIGN);
    &mut backing[at..at + len]
}

thread_local! {
    /// Per-thread bounce buffer for direct writes of unaligned buffers.
    static BOUNCE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// `write(buf)` with `buf` in memory `O_DIRECT` accepts: as it is when
/// aligned already, else copied into the thread's aligned bounce buffer
/// (so `write` must not call `with_aligned` itself).
pub(crate) fn with_aligned<R>(buf: &[u8], write: impl FnOnce(&[u8]) -> R) -> R {
    if (buf.as_ptr() as usize).is_multiple_of(IO_ALIGN) {
        return write(buf);
    }
    BOUNCE.with(|b| {
        let mut b = b.borrow_mut();
        let aligned = aligned_slice(&mut b, buf.len());
        aligned.copy_from_slice(buf);
        write(aligned)
    })
}

/// `read(buf)` into memory `O_DIRECT` accepts: `buf` itself when aligned,
/// else an aligned buffer of this call, copied into `buf` afterwards. Not
/// the thread's bounce buffer: reads run on every FUSE worker of every
/// mount, and each keeping a buffer as large as the largest record it ever
/// read (up to 16 MiB) would add up; a 128 KiB allocation costs a few
/// microseconds, a small fraction of the device read. Reading a whole
/// block into the spare capacity of its own vector, at an aligned place,
/// and moving it to the front (no zeroing, no second buffer) was tried
/// and dropped: the move is the first touch of memory the device just
/// wrote and pays the cache misses the copy here pays now
/// (docs/MEASUREMENTS.md, "Vdev: reads into the block's own vector").
pub(crate) fn with_aligned_mut<T>(
    buf: &mut [u8],
    read: impl FnOnce(&mut [u8]) -> io::Result<T>,
) -> io::Result<T> {
    if (buf.as_ptr() as usize).is_multiple_of(IO_ALIGN) {
        return read(buf);
    }
    let mut backing = Vec::new();
    let aligned = aligned_slice(&mut backing, buf.len());
    let r = read(aligned)?;
    buf.copy_from_slice(aligned);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_device_fails_every_io_but_keeps_its_size() {
        let d = MissingDevice::new("/gone", 80 << 20);
        assert_eq!(d.size(), 80 << 20);
        let mut b = [0u8; 512];
        assert_eq!(
            d.read_at(&mut b, 0).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert!(d.write_at(&b, 0).is_err());
        assert!(d.flush().is_err());
    }

    #[test]
    fn mem_round_trip_across_chunks_and_bounds() {
        let d = MemDevice::new(1 << 20);
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7) as u8).collect();
        d.write_at(&data, 12_345).unwrap();
        let mut back = vec![0u8; data.len()];
        d.read_at(&mut back, 12_345).unwrap();
        assert_eq!(back, data);
        let mut zeros = vec![1u8; 100];
        d.read_at(&mut zeros, 900_000).unwrap();
        assert!(zeros.iter().all(|&b| b == 0));
        assert!(d.write_at(&[0; 2], (1 << 20) - 1).is_err());
        assert!(d.read_at(&mut [0; 1], u64::MAX).is_err());
        assert_eq!(detect_ashift(&d), 12);
    }
}
