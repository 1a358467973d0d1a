//! Regular files through a real FUSE mount: write/read, append, truncate,
//! writes past the end, sparse files with SEEK_DATA/SEEK_HOLE, fallocate,
//! copy_file_range, fsync, statfs.

mod common;

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};

use common::{c, errno, Mounted};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn write_read_append_truncate() {
    let m = Mounted::new();
    let p = m.path("f");
    let data = pattern(3 << 20, 7);
    std::fs::write(&p, &data).unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), data);
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 3 << 20);

    // Append through O_APPEND.
    let mut f = OpenOptions::new().append(true).open(&p).unwrap();
    f.write_all(b"tail").unwrap();
    drop(f);
    let got = std::fs::read(&p).unwrap();
    assert_eq!(got.len(), (3 << 20) + 4);
    assert_eq!(&got[3 << 20..], b"tail");

    // Truncate down and up: the regrown part reads as zeros.
    let f = OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(1000).unwrap();
    f.set_len(5000).unwrap();
    drop(f);
    let got = std::fs::read(&p).unwrap();
    assert_eq!(&got[..1000], &data[..1000]);
    assert!(got[1000..].iter().all(|&b| b == 0));
    assert_eq!(got.len(), 5000);

    // O_TRUNC on open.
    std::fs::write(&p, b"short").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"short");

    // pwrite beyond the end leaves a hole of zeros; reads past EOF are empty.
    let f = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    f.write_all_at(b"far", 1 << 20).unwrap();
    let mut buf = vec![1u8; 16];
    assert_eq!(f.read_at(&mut buf, (1 << 20) + 3).unwrap(), 0);
    assert_eq!(f.read_at(&mut buf, 100).unwrap(), 16);
    assert!(buf.iter().all(|&b| b == 0));
    f.sync_all().unwrap();
    assert_eq!(f.metadata().unwrap().len(), (1 << 20) + 3);

    // O_EXCL on an existing name.
    let e = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&p)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
}

#[test]
fn sparse_seek_fallocate_copy() {
    let m = Mounted::new();
    let p = m.path("sparse");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    // Data at 1 MiB and at 8 MiB, holes elsewhere.
    f.write_all_at(&pattern(4096, 1), 1 << 20).unwrap();
    f.write_all_at(&pattern(4096, 2), 8 << 20).unwrap();
    // No fsync: the written pages may still sit in the kernel's writeback
    // cache, and the seeks must see them anyway.
    let fd = f.as_raw_fd();
    // SAFETY: plain syscalls on an fd we own.
    let data = unsafe { libc::lseek(fd, 0, libc::SEEK_DATA) };
    assert!(data > 0 && data <= 1 << 20, "SEEK_DATA from 0 = {data}");
    let hole = unsafe { libc::lseek(fd, 1 << 20, libc::SEEK_HOLE) };
    assert!(hole > 1 << 20 && hole < 8 << 20, "SEEK_HOLE = {hole}");
    let data2 = unsafe { libc::lseek(fd, hole, libc::SEEK_DATA) };
    assert!(
        data2 > hole && data2 <= 8 << 20,
        "second SEEK_DATA = {data2}"
    );
    let end = (8 << 20) + 4096;
    assert_eq!(unsafe { libc::lseek(fd, data2, libc::SEEK_HOLE) }, end);
    assert_eq!(unsafe { libc::lseek(fd, end, libc::SEEK_DATA) }, -1);
    assert_eq!(errno(), libc::ENXIO);
    // Holes take no space.
    let blocks = std::fs::metadata(&p).unwrap().blocks();
    assert!(blocks * 512 < 1 << 20, "sparse file uses {blocks} blocks");

    // fallocate default mode extends the size.
    assert_eq!(unsafe { libc::fallocate(fd, 0, 0, 16 << 20) }, 0);
    assert_eq!(f.metadata().unwrap().len(), 16 << 20);
    // Punching a hole zeroes the range.
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    assert_eq!(unsafe { libc::fallocate(fd, punch, 1 << 20, 4096) }, 0);
    let mut buf = vec![9u8; 4096];
    f.read_exact_at(&mut buf, 1 << 20).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
    assert_eq!(f.metadata().unwrap().len(), 16 << 20);
    // An unsupported mode.
    assert_eq!(
        unsafe { libc::fallocate(fd, libc::FALLOC_FL_COLLAPSE_RANGE, 0, 4096) },
        -1
    );

    // copy_file_range copies bytes (and stops at the source's end).
    let src = m.path("src");
    let body = pattern(300_000, 3);
    std::fs::write(&src, &body).unwrap();
    let s = File::open(&src).unwrap();
    let d = File::create(m.path("dst")).unwrap();
    let (mut off_in, mut off_out) = (0i64, 0i64);
    let mut copied = 0usize;
    loop {
        // SAFETY: valid fds and offsets we own.
        let n = unsafe {
            libc::copy_file_range(
                s.as_raw_fd(),
                &mut off_in,
                d.as_raw_fd(),
                &mut off_out,
                1 << 30,
                0,
            )
        };
        assert!(n >= 0, "copy_file_range: errno {}", errno());
        if n == 0 {
            break;
        }
        copied += n as usize;
    }
    assert_eq!(copied, body.len());
    drop(d);
    assert_eq!(std::fs::read(m.path("dst")).unwrap(), body);
}

#[test]
fn statfs_and_fsync() {
    let m = Mounted::new();
    let mut f = File::create(m.path("a")).unwrap();
    f.write_all(&pattern(1 << 20, 5)).unwrap();
    f.sync_all().unwrap();
    f.sync_data().unwrap();
    let dir = File::open(&m.mnt).unwrap();
    dir.sync_all().unwrap();
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid path and an out pointer to a zeroed struct.
    assert_eq!(unsafe { libc::statvfs(c(&m.mnt).as_ptr(), &mut st) }, 0);
    assert_eq!(st.f_bsize, 4096);
    assert_eq!(st.f_namemax, 255);
    assert!(st.f_blocks > 0 && st.f_bavail > 0 && st.f_bavail <= st.f_blocks);
    let space = m
        .pool
        .as_ref()
        .unwrap()
        .dataset_space(common::DATASET)
        .unwrap();
    let avail_blocks = space.avail / 4096;
    // AVAIL moves while the pool syncs; it must be the dataset's, roughly.
    let diff = (st.f_bavail as i64 - avail_blocks as i64).unsigned_abs();
    assert!(
        diff < 1024,
        "statfs bavail {} vs dataset avail {avail_blocks}",
        st.f_bavail
    );

    // Reading through a second handle sees what the first wrote.
    let mut r = File::open(m.path("a")).unwrap();
    r.seek(SeekFrom::Start(10)).unwrap();
    let mut b = [0u8; 4];
    r.read_exact(&mut b).unwrap();
    assert_eq!(b, pattern(14, 5)[10..14]);
}

#[test]
fn without_writeback_cache_append_and_ioctl() {
    let m = Mounted::with_options(tarn_fuse::MountOptions {
        writeback_cache: false,
        ..common::options()
    });
    assert!(!m.handle.as_ref().unwrap().features().writeback_cache);
    let p = m.path("log");
    for i in 0..3 {
        let mut f = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&p)
            .unwrap();
        // A second handle extends the file behind the first one's back.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .write_all_at(b"..", f.metadata().unwrap().len())
            .unwrap();
        writeln!(f, "line {i}").unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(&p).unwrap(),
        "..line 0\n..line 1\n..line 2\n"
    );
    // ioctls are not supported.
    let f = File::open(&p).unwrap();
    let mut flags: libc::c_long = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one long.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) };
    assert_eq!(r, -1);
    assert!(
        matches!(errno(), libc::ENOTTY | libc::ENOSYS),
        "errno {}",
        errno()
    );
}

/// A read is answered with the blocks' own bytes and runs of zeros, one
/// `writev`; a read of more pieces than one reply takes (512-byte records:
/// 2,048 in a 1 MiB read) is copied together first. Either way the bytes
/// are the file's: data, holes longer than the zero buffer, short tails.
#[test]
fn reads_of_many_pieces_and_long_holes_return_the_file() {
    let m = Mounted::new();
    let zpl = m.zpl.clone().unwrap();
    for (name, rs) in [("small", 512u32), ("big", 128 << 10)] {
        let mut s = zpl.settings();
        s.recordsize = rs;
        zpl.set_settings(s).unwrap();
        let p = m.path(name);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&p)
            .unwrap();
        // Data, a hole of 3.2 MiB (a read of it then data: zeros first),
        // data, a hole to a short tail.
        let head = pattern(2 << 20, 3);
        let mid = pattern(700_001, 9);
        f.write_all_at(&head, 0).unwrap();
        let at = (5 << 20) + 200_000;
        f.write_all_at(&mid, at as u64).unwrap();
        f.write_all_at(b"end", 9 << 20).unwrap();
        f.sync_all().unwrap();
        // Cold: the kernel lets go of the file's cached pages.
        // SAFETY: plain syscall on a descriptor we own.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(r, 0);
        drop(f);
        let mut want = vec![0u8; (9 << 20) + 3];
        want[..head.len()].copy_from_slice(&head);
        want[at..at + mid.len()].copy_from_slice(&mid);
        want[9 << 20..].copy_from_slice(b"end");
        let got = std::fs::read(&p).unwrap();
        assert!(
            got == want,
            "{name} (recordsize {rs}) read back differently"
        );
    }
}
