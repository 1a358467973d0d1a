//! [`FileDevice`]: a regular file or a block device as a [`BlockDevice`].
//!
//! Block devices are opened `O_RDWR | O_EXCL | O_CLOEXEC`: Linux refuses a
//! second exclusive open of the same block device (EBUSY), so two pools —
//! or a pool and a mounted file system — can never share one disk. Their
//! size and physical sector size come from the `BLKGETSIZE64` and
//! `BLKPBSZGET` ioctls. Regular files (sparse is fine) report their length
//! and a 4096-byte sector, so pools on files get ashift 12 as OpenZFS's do.
//!
//! Opening never rejects a small device: the caller compares `size()` with
//! `tarn_format::label::MIN_DEVICE_SIZE` and reports `VdevError::TooSmall`,
//! because tools like `zdb` want to open anything.
//!
//! `flush` is `fdatasync` for files (metadata such as mtime need not be
//! durable, the length is fixed) and `fsync` for block devices, which is
//! what issues the cache flush to the disk.
//!
//! ## Direct writes
//! Writes go through a second descriptor opened `O_DIRECT` when the file
//! system allows it: the pool never reads back what it just wrote (it is
//! copy-on-write and has its own cache), so copying every block into the
//! host's page cache only costs CPU — on the virtio machines tarn is built
//! on, buffered writes top out at about a third of direct ones
//! (docs/MEASUREMENTS.md, "Vdev: direct and buffered writes"), and a
//! mirror writes everything twice. Reads stay buffered, for the kernel's
//! readahead and because the host cache is free to keep what it likes —
//! except large aligned ones (`DIRECT_READ_MIN_BYTES`: whole records and
//! the merged reads of sequential prefetch, which the pool's read-ahead
//! already made big).
//! Linux keeps the two coherent: a direct write first writes back and then
//! invalidates any cached pages it overlaps.
//!
//! `O_DIRECT` wants the buffer, offset and length aligned (to the logical
//! block size, 512 or 4096). Unaligned buffers go through an aligned
//! copy (the thread's bounce buffer for writes, one per call for reads);
//! a write the file system still refuses with `EINVAL` (offset or length
//! finer than its alignment, e.g. a 1 KiB uberblock on a 4Kn disk) goes
//! through the buffered descriptor instead.
//! File systems without `O_DIRECT` (tmpfs before Linux 6.6) refuse the
//! open, and then every write is buffered.
//!
//! ## Sparse files
//! A direct write into a hole of a sparse file makes the host file system
//! allocate the space, and on ext4 it is not an overwrite: it takes the
//! file's lock exclusively, so the pool's parallel writes to one file go
//! one at a time. So before the first direct write into each
//! [`PREALLOC_CHUNK_BYTES`] of a file, the whole chunk is allocated with
//! `fallocate` (unwritten extents, the file's length unchanged): writes
//! into it then run in parallel, and the file still holds only the chunks
//! the pool has written to. A sequential write to a fresh pool on sparse
//! files was faster with it (docs/MEASUREMENTS.md, "Vdev: preallocating
//! sparse file chunks"). Not on tmpfs (it would take the memory) nor
//! block devices.

use crate::device::{check_range, with_aligned, with_aligned_mut, BlockDevice, IO_ALIGN};
use crate::error::VdevError;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

nix::ioctl_read!(blkgetsize64, 0x12, 114, u64);
nix::ioctl_read_bad!(blkpbszget, nix::request_code_none!(0x12, 123), libc::c_uint);

/// Writes smaller than this stay buffered: for a label, an uberblock or
/// a small block the page cache's copy costs less than a direct write
/// (measured: making every 4 KiB write direct cost a third of sequential
/// write throughput and a tenth of fsync IOPS through FUSE).
const DIRECT_MIN_BYTES: usize = 16 << 10;

/// Reads at least this long — a whole default-sized record, or the merged
/// reads of back-to-back blocks (`TopVdev::read_run`) — bypass the page
/// cache, through an aligned buffer of their own when the caller's buffer
/// is not aligned: the pool caches what it read itself, a second
/// copy in the host's cache costs a copy per byte and evicts everything
/// else, and the host's readahead only reads past a random record. On
/// the virtio disk tarn is built on, direct record reads were faster, and
/// so were 16 KiB random reads through a mount (docs/MEASUREMENTS.md,
/// "Vdev: direct record reads").
const DIRECT_READ_MIN_BYTES: usize = 128 << 10;

/// Granule in which a sparse file vdev's space is allocated ahead of its
/// first direct write (see "Sparse files"): large enough that the
/// `fallocate` calls cost nothing next to the writes (one per 16 MiB),
/// small enough that a pool on a sparse file stays thin.
pub const PREALLOC_CHUNK_BYTES: u64 = 16 << 20;

pub struct FileDevice {
    file: File,
    /// The same file opened `O_DIRECT`, if the file system allows it.
    direct: Option<File>,
    path: String,
    /// Bytes; grows when [`BlockDevice::refresh_size`] finds the file or
    /// disk larger (`zpool online -e`).
    size: AtomicU64,
    sector_size: u32,
    is_block: bool,
    /// A regular file whose holes cost a durable write the host file
    /// system's allocation (see [`BlockDevice::has_hole`]): not a block
    /// device, and not tmpfs, whose `SEEK_HOLE` walks the page cache
    /// under the inode lock (milliseconds on a log device in
    /// `/dev/shm`) and whose holes cost nothing a journal would.
    holes_matter: bool,
    /// The last range `has_hole` found all data, `[start, end)`. A log
    /// block after another falls inside it, so most questions need no
    /// `lseek` (which walks the file's extents: 7 % of the daemon's CPU
    /// time under one job of 4 KiB `fsync`s). tarn only ever fills holes,
    /// and the answer is a hint (`Spa::prewrite_for_log`): one made stale
    /// by someone punching a hole costs speed, never data.
    known_data: parking_lot::Mutex<(u64, u64)>,
    /// One bit per [`PREALLOC_CHUNK_BYTES`] of the file as opened: set
    /// once that chunk was handed to `fallocate`. Empty when chunks are
    /// not allocated ahead (block devices, tmpfs, no `O_DIRECT`).
    prealloc: Vec<AtomicU64>,
}

impl FileDevice {
    pub fn open(path: &Path) -> Result<FileDevice, VdevError> {
        let name = path.display().to_string();
        let meta = std::fs::metadata(path).map_err(|e| VdevError::from_open(&name, e))?;
        let ft = meta.file_type();
        if ft.is_file() {
            let file = open_rw(path, 0).map_err(|e| VdevError::from_open(&name, e))?;
            let size = file.metadata().map_err(|e| io_err(&name, e))?.len();
            let tmpfs = nix::sys::statfs::fstatfs(&file)
                .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
            let direct = open_rw(path, libc::O_DIRECT).ok();
            let prealloc_words = if direct.is_some() && !tmpfs {
                size.div_ceil(PREALLOC_CHUNK_BYTES).div_ceil(64)
            } else {
                0
            };
            Ok(FileDevice {
                file,
                direct,
                path: name,
                size: AtomicU64::new(size),
                sector_size: 4096,
                is_block: false,
                holes_matter: !tmpfs,
                known_data: parking_lot::Mutex::new((0, 0)),
                prealloc: (0..prealloc_words).map(|_| AtomicU64::new(0)).collect(),
            })
        } else if ft.is_block_device() {
            let file = open_rw(path, libc::O_EXCL).map_err(|e| VdevError::from_open(&name, e))?;
            let (size, sector_size) = block_geometry(&file).map_err(|e| io_err(&name, e))?;
            // The exclusive open above already holds the device; a second
            // descriptor of the same opener is not refused.
            let direct = open_rw(path, libc::O_DIRECT).ok();
            Ok(FileDevice {
                file,
                direct,
                path: name,
                size: AtomicU64::new(size),
                sector_size,
                is_block: true,
                holes_matter: false,
                known_data: parking_lot::Mutex::new((0, 0)),
                prealloc: Vec::new(),
            })
        } else {
            Err(VdevError::NotADevice { path: name })
        }
    }

    pub fn is_block_device(&self) -> bool {
        self.is_block
    }

    /// Allocates, in the host file system, every chunk of
    /// `[offset, offset + len)` not handed to `fallocate` before (see
    /// "Sparse files"). A hint: a failure (a file system without
    /// `fallocate`, or one that is full) leaves the write to allocate
    /// as it would have, and to report what it must.
    fn preallocate(&self, offset: u64, len: usize) {
        if self.prealloc.is_empty() || len == 0 {
            return;
        }
        let size = self.size();
        let first = offset / PREALLOC_CHUNK_BYTES;
        let last = (offset + len as u64 - 1) / PREALLOC_CHUNK_BYTES;
        for chunk in first..=last {
            let Some(word) = self.prealloc.get((chunk / 64) as usize) else {
                return; // past the file as opened (grown since): no hint
            };
            let bit = 1u64 << (chunk % 64);
            if word.fetch_or(bit, Ordering::Relaxed) & bit != 0 {
                continue;
            }
            let start = chunk * PREALLOC_CHUNK_BYTES;
            let end = (start + PREALLOC_CHUNK_BYTES).min(size);
            let (Ok(at), Ok(n)) = (
                libc::off_t::try_from(start),
                libc::off_t::try_from(end.saturating_sub(start)),
            ) else {
                return;
            };
            if n == 0 {
                continue;
            }
            // KEEP_SIZE leaves the file's length alone; the mode never
            // changes data. The result is only a hint (see above).
            let _ = nix::fcntl::fallocate(
                &self.file,
                nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
                at,
                n,
            );
        }
    }
}

fn io_err(path: &str, source: io::Error) -> VdevError {
    VdevError::Io {
        path: path.to_string(),
        source,
    }
}

fn open_rw(path: &Path, extra_flags: i32) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC | extra_flags)
        .open(path)
}

/// Writes all of `buf` at `offset` with `pwritev2(…, RWF_DSYNC)`: each
/// call returns once its bytes are durable — the file system writes back
/// and waits for that range only, then flushes the disk's cache — so a
/// log block does not wait for the txg's writes to the same file, as an
/// `fdatasync` of the whole file would.
fn pwrite_dsync(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    pwrite_dsync_fd(file.as_fd(), buf, offset)
}

/// [`pwrite_dsync`] on a borrowed descriptor.
pub(crate) fn pwrite_dsync_fd(
    fd: BorrowedFd<'_>,
    mut buf: &[u8],
    mut offset: u64,
) -> io::Result<()> {
    while !buf.is_empty() {
        let at = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let iov = libc::iovec {
            iov_base: buf.as_ptr().cast_mut().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: `iov` describes `buf`, which stays borrowed (alive and
        // unmoved) for the whole call; the kernel only reads through it.
        // The descriptor is borrowed, so open for the call's duration.
        let n = unsafe { libc::pwritev2(fd.as_raw_fd(), &iov, 1, at, libc::RWF_DSYNC) };
        match usize::try_from(n) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                buf = &buf[n.min(buf.len())..];
                offset += n as u64;
            }
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Size in bytes and physical sector size of an open block device.
fn block_geometry(file: &File) -> io::Result<(u64, u32)> {
    let fd = file.as_raw_fd();
    let mut size: u64 = 0;
    let mut pbs: libc::c_uint = 0;
    // SAFETY: `fd` is an open block device owned by `file`, and both
    // pointers are to live locals of exactly the type the kernel writes
    // (u64 for BLKGETSIZE64, unsigned int for BLKPBSZGET).
    unsafe {
        blkgetsize64(fd, &mut size).map_err(io::Error::from)?;
        blkpbszget(fd, &mut pbs).map_err(io::Error::from)?;
    }
    // A device reporting nonsense gets the conventional 512.
    let pbs = if pbs.is_power_of_two() { pbs } else { 512 };
    Ok((size, pbs))
}

impl BlockDevice for FileDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(offset, buf.len(), self.size())?;
        if let Some(direct) = &self.direct {
            let sectors =
                buf.len().is_multiple_of(IO_ALIGN) && offset.is_multiple_of(IO_ALIGN as u64);
            if sectors && buf.len() >= DIRECT_READ_MIN_BYTES {
                match with_aligned_mut(buf, |b| direct.read_exact_at(b, offset)) {
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                    done => return done,
                }
            }
        }
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(offset, buf.len(), self.size())?;
        if let Some(direct) = &self.direct {
            if buf.len() >= DIRECT_MIN_BYTES {
                self.preallocate(offset, buf.len());
                match with_aligned(buf, |b| direct.write_all_at(b, offset)) {
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                    done => return done,
                }
            }
        }
        self.file.write_all_at(buf, offset)
    }

    fn flush(&self) -> io::Result<()> {
        if self.is_block {
            self.file.sync_all()
        } else {
            self.file.sync_data()
        }
    }

    /// Direct when the file system allows it (no page to write back, and
    /// measured here: half the latency of a buffered `RWF_DSYNC` write
    /// while the txg streams to the same file), buffered otherwise; a
    /// kernel without `RWF_DSYNC` gets a write and a flush.
    fn write_durable(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(offset, buf.len(), self.size())?;
        if let Some(direct) = &self.direct {
            match with_aligned(buf, |b| pwrite_dsync(direct, b, offset)) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                done => return done,
            }
        }
        match pwrite_dsync(&self.file, buf, offset) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOSYS)) => {
                self.file.write_all_at(buf, offset)?;
                self.flush()
            }
            done => done,
        }
    }

    fn direct_fd(&self) -> Option<BorrowedFd<'_>> {
        self.direct.as_ref().map(AsFd::as_fd)
    }

    fn size(&self) -> u64 {
        self.size.load(Ordering::Relaxed)
    }

    /// Re-reads the size; a device never shrinks under a pool (a smaller
    /// answer is ignored: the pool's addresses must stay valid).
    fn refresh_size(&self) -> io::Result<u64> {
        let now = if self.is_block {
            block_geometry(&self.file)?.0
        } else {
            self.file.metadata()?.len()
        };
        Ok(self.size.fetch_max(now, Ordering::Relaxed).max(now))
    }

    fn physical_sector_size(&self) -> u32 {
        self.sector_size
    }

    fn describe(&self) -> String {
        self.path.clone()
    }

    /// `lseek(SEEK_HOLE)` from `offset`: a hole before `offset + len`.
    /// (The end of a file counts as a hole to `SEEK_HOLE`; a vdev's file
    /// is never shorter than the pool's addresses, so a range inside the
    /// device ends before it.) Block devices have no holes, and tmpfs
    /// files are not asked (`holes_matter`).
    fn has_hole(&self, offset: u64, len: u64) -> bool {
        if !self.holes_matter || len == 0 {
            return false;
        }
        let end = offset.saturating_add(len);
        let (lo, hi) = *self.known_data.lock();
        if lo <= offset && end <= hi {
            return false;
        }
        let Ok(at) = libc::off_t::try_from(offset) else {
            return false;
        };
        // SAFETY: `lseek` on a descriptor `self.file` owns for the call;
        // it moves only the file position, which nothing here uses (all
        // I/O is positioned: pread/pwrite).
        let hole = unsafe { libc::lseek(self.file.as_raw_fd(), at, libc::SEEK_HOLE) };
        match u64::try_from(hole) {
            Ok(h) if h < end => true,
            Ok(h) => {
                *self.known_data.lock() = (offset, h);
                false
            }
            // Past the end of the file: no answer.
            Err(_) => false,
        }
    }

    fn is_present(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let (Ok(open), Ok(named)) = (self.file.metadata(), std::fs::metadata(&self.path)) else {
            return false;
        };
        open.dev() == named.dev() && open.ino() == named.ino()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect_ashift;
    use crate::device::aligned_slice;

    fn on_tmpfs(path: &std::path::Path) -> bool {
        nix::sys::statfs::statfs(path)
            .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
    }

    /// A temporary directory on a file system whose holes cost (so
    /// `has_hole` asks it): the system's, or the build's own directory
    /// where that is tmpfs.
    fn dir_with_costly_holes() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        if !on_tmpfs(dir.path()) {
            return dir;
        }
        tempfile::tempdir_in(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target")).unwrap()
    }

    #[test]
    fn has_hole_sees_what_a_sparse_file_never_held() {
        let dir = dir_with_costly_holes();
        let dev = sparse_device_in(dir.path(), 16 << 20);
        assert!(dev.has_hole(0, 4096));
        dev.write_at(&vec![1u8; 1 << 20], 4 << 20).unwrap();
        assert!(!dev.has_hole(4 << 20, 1 << 20));
        assert!(!dev.has_hole((4 << 20) + 4096, 8192));
        assert!(dev.has_hole(4 << 20, 2 << 20), "the hole after the data");
        assert!(dev.has_hole(3 << 20, 2 << 20), "the hole before it");
        assert!(!dev.has_hole(64 << 20, 4096), "past the end: no answer, no");
    }

    /// The first direct write into a chunk of a sparse file allocates the
    /// whole chunk (and only it) in the host file system; the rest of the
    /// chunk still reads as zeros and still counts as a hole (unwritten
    /// space, which a durable log write would have to convert).
    #[test]
    fn a_direct_write_allocates_its_chunk_and_no_more() {
        use std::os::unix::fs::MetadataExt;
        let dir = dir_with_costly_holes();
        let dev = sparse_device_in(dir.path(), 4 * PREALLOC_CHUNK_BYTES);
        let allocated = || {
            std::fs::metadata(dir.path().join("d.img"))
                .unwrap()
                .blocks()
                * 512
        };
        let before = allocated();
        let at = PREALLOC_CHUNK_BYTES + (1 << 20);
        dev.write_at(&vec![5u8; 64 << 10], at).unwrap();
        if dev.direct.is_none() {
            return; // no O_DIRECT here: writes stay buffered, nothing ahead
        }
        let grown = allocated() - before;
        assert!(
            (PREALLOC_CHUNK_BYTES..2 * PREALLOC_CHUNK_BYTES).contains(&grown),
            "{grown} bytes allocated for a write into one chunk"
        );
        let mut back = vec![1u8; 128 << 10];
        dev.read_at(&mut back, at).unwrap();
        assert!(back[..64 << 10].iter().all(|&b| b == 5));
        assert!(back[64 << 10..].iter().all(|&b| b == 0));
        assert!(dev.has_hole(PREALLOC_CHUNK_BYTES, 4096));
        // A write into another chunk allocates that one too (the file
        // system may add a block of its own bookkeeping).
        dev.write_at(&vec![6u8; 64 << 10], 3 * PREALLOC_CHUNK_BYTES)
            .unwrap();
        let both = allocated() - before;
        assert!(
            (2 * PREALLOC_CHUNK_BYTES..3 * PREALLOC_CHUNK_BYTES).contains(&both),
            "{both} bytes allocated for writes into two chunks"
        );
    }

    /// Inside a range it found all data, `has_hole` answers without asking
    /// the file system again: a hole punched there behind tarn's back
    /// (tarn never punches one) goes unseen until a question leaves the
    /// range.
    #[test]
    fn has_hole_remembers_the_data_it_found() {
        let dir = dir_with_costly_holes();
        let dev = sparse_device_in(dir.path(), 16 << 20);
        dev.write_at(&vec![1u8; 4 << 20], 4 << 20).unwrap();
        assert!(!dev.has_hole(4 << 20, 8192));
        let other = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("d.img"))
            .unwrap();
        // SAFETY: fallocate on a descriptor `other` owns for the call.
        let r = unsafe {
            libc::fallocate(
                other.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                6 << 20,
                1 << 20,
            )
        };
        assert_eq!(r, 0, "punch a hole: {}", io::Error::last_os_error());
        assert!(!dev.has_hole(6 << 20, 8192), "answered from the range");
        assert!(
            dev.has_hole(3 << 20, 2 << 20),
            "a question outside it is asked"
        );
        // Data found elsewhere replaces the range; the hole is seen again.
        dev.write_at(&vec![1u8; 1 << 20], 12 << 20).unwrap();
        assert!(!dev.has_hole(12 << 20, 8192));
        assert!(dev.has_hole(6 << 20, 8192), "the punched hole, asked again");
    }

    #[test]
    fn tmpfs_files_are_not_asked_for_holes() {
        let shm = std::path::Path::new("/dev/shm");
        if !on_tmpfs(shm) {
            return; // nothing to test on a machine without one
        }
        let dir = tempfile::tempdir_in(shm).unwrap();
        assert!(!sparse_device_in(dir.path(), 16 << 20).has_hole(0, 4096));
    }

    #[test]
    fn refresh_size_sees_a_grown_file_and_never_shrinks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d");
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(1 << 20).unwrap();
        let dev = FileDevice::open(&path).unwrap();
        assert_eq!(dev.size(), 1 << 20);
        f.set_len(4 << 20).unwrap();
        assert_eq!(dev.size(), 1 << 20, "not looked at yet");
        assert_eq!(dev.refresh_size().unwrap(), 4 << 20);
        assert_eq!(dev.size(), 4 << 20);
        let mut buf = vec![0u8; 4096];
        dev.read_at(&mut buf, (4 << 20) - 4096).unwrap();
        f.set_len(2 << 20).unwrap();
        assert_eq!(
            dev.refresh_size().unwrap(),
            4 << 20,
            "a device never shrinks"
        );
    }

    /// A sparse file of `bytes` in `dir`, opened.
    fn sparse_device_in(dir: &std::path::Path, bytes: u64) -> FileDevice {
        let p = dir.join("d.img");
        File::create(&p).unwrap().set_len(bytes).unwrap();
        FileDevice::open(&p).unwrap()
    }

    /// A sparse file of `bytes` in a temporary directory, opened.
    fn sparse_device(bytes: u64) -> (tempfile::TempDir, FileDevice) {
        let dir = tempfile::tempdir().unwrap();
        let d = sparse_device_in(dir.path(), bytes);
        (dir, d)
    }

    #[test]
    fn large_aligned_reads_go_direct_and_see_buffered_writes() {
        let (_dir, d) = sparse_device(8 << 20);
        // A small write stays in the page cache; a direct read of the
        // range around it must still see it.
        let big: Vec<u8> = (0..DIRECT_READ_MIN_BYTES)
            .map(|i| (i % 251) as u8)
            .collect();
        d.write_at(&big, 1 << 20).unwrap();
        d.write_at(&[7u8; 4096], (1 << 20) + 8192).unwrap();
        let mut backing = Vec::new();
        let buf = aligned_slice(&mut backing, DIRECT_READ_MIN_BYTES);
        d.read_at(buf, 1 << 20).unwrap();
        let mut want = big.clone();
        want[8192..8192 + 4096].fill(7);
        assert!(buf[..] == want[..], "direct read differs");
        // An unaligned buffer (a record read into a plain Vec) goes direct
        // through an aligned copy and gets the same bytes.
        let mut plain = vec![0u8; DIRECT_READ_MIN_BYTES + 1];
        let unaligned = if (plain.as_ptr() as usize).is_multiple_of(IO_ALIGN) {
            &mut plain[1..]
        } else {
            &mut plain[..DIRECT_READ_MIN_BYTES]
        };
        d.read_at(unaligned, 1 << 20).unwrap();
        assert!(unaligned[..] == want[..], "bounced direct read differs");
        // Short reads take the buffered path.
        let mut small = vec![0u8; 4096];
        d.read_at(&mut small, (1 << 20) + 8192).unwrap();
        assert_eq!(small, vec![7u8; 4096]);
    }

    #[test]
    fn durable_writes_land_from_any_buffer_at_any_sector() {
        let (_dir, d) = sparse_device(4 << 20);
        let data: Vec<u8> = (0..12288).map(|i| (i % 253) as u8).collect();
        // Aligned (direct), an unaligned buffer (bounced), and an offset
        // finer than the file system's block (the buffered descriptor).
        let mut backing = Vec::new();
        let aligned = aligned_slice(&mut backing, data.len());
        aligned.copy_from_slice(&data);
        d.write_durable(aligned, 1 << 20).unwrap();
        d.write_durable(&data[1..4097], 2 << 20).unwrap();
        d.write_durable(&data[..512], (3 << 20) + 512).unwrap();
        let mut back = vec![0u8; 12288];
        d.read_at(&mut back, 1 << 20).unwrap();
        assert_eq!(back, data);
        d.read_at(&mut back[..4096], 2 << 20).unwrap();
        assert_eq!(back[..4096], data[1..4097]);
        d.read_at(&mut back[..512], (3 << 20) + 512).unwrap();
        assert_eq!(back[..512], data[..512]);
        assert!(
            d.write_durable(&data, (4 << 20) - 4096).is_err(),
            "past the end"
        );
    }

    #[test]
    fn sparse_file_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d.img");
        File::create(&p).unwrap().set_len(80 << 20).unwrap();
        let d = FileDevice::open(&p).unwrap();
        assert_eq!(d.size(), 80 << 20);
        assert_eq!(detect_ashift(&d), 12);
        assert!(!d.is_block_device());
        let data = vec![0xa5u8; 8192];
        d.write_at(&data, 70 << 20).unwrap();
        d.flush().unwrap();
        drop(d);
        let d = FileDevice::open(&p).unwrap();
        let mut back = vec![0u8; 8192];
        d.read_at(&mut back, 70 << 20).unwrap();
        assert_eq!(back, data);
        assert!(d.read_at(&mut back, (80 << 20) - 10).is_err());
        assert_eq!(d.describe(), p.display().to_string());
    }

    #[test]
    fn open_errors_are_classified() {
        let dir = tempfile::tempdir().unwrap();
        let missing = FileDevice::open(&dir.path().join("nope"));
        assert!(matches!(missing, Err(VdevError::NotFound { .. })));
        let not_dev = FileDevice::open(dir.path());
        assert!(matches!(not_dev, Err(VdevError::NotADevice { .. })));
        let msg = FileDevice::open(dir.path()).err().unwrap().to_string();
        assert!(
            msg.contains("neither a regular file nor a block device"),
            "{msg}"
        );
    }
}
