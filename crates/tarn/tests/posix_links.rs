//! Hard links, symlinks and special files on a real FUSE mount: st_nlink
//! through link/unlink (and an unlinked file that is still open), symlink
//! targets with readlink/lstat, dangling and looping links, the target
//! length limit, and FIFOs, sockets and device nodes made with mknod.

mod common;

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use common::{check, cpath, errno_of, Mounted, MIB};

fn nlink(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).unwrap().nlink()
}

fn mknod(p: &Path, mode: u32, dev: u64) -> std::io::Result<()> {
    // SAFETY: mknod on a NUL-terminated path.
    check(unsafe { libc::mknod(cpath(p).as_ptr(), mode, dev) }).map(|_| ())
}

fn pool() -> Mounted {
    Mounted::new("tank", &["mirror", "a", "b"], 256 * MIB)
}

#[test]
fn hard_links_count_names() {
    let m = pool();
    let r = m.root();
    let f = r.join("f");
    std::fs::write(&f, b"one").unwrap();
    assert_eq!(nlink(&f), 1);
    std::fs::create_dir(r.join("d")).unwrap();
    std::fs::hard_link(&f, r.join("g")).unwrap();
    std::fs::hard_link(&f, r.join("d/h")).unwrap();
    for p in [&f, &r.join("g"), &r.join("d/h")] {
        assert_eq!(nlink(p), 3, "{}", p.display());
        assert_eq!(
            std::fs::metadata(p).unwrap().ino(),
            std::fs::metadata(&f).unwrap().ino()
        );
    }
    // A write through one name shows through the others.
    OpenOptions::new()
        .write(true)
        .open(r.join("d/h"))
        .unwrap()
        .write_all_at(b"ONE", 0)
        .unwrap();
    assert_eq!(std::fs::read(r.join("g")).unwrap(), b"ONE");
    assert_eq!(errno_of(std::fs::hard_link(&f, r.join("g"))), libc::EEXIST);
    assert_eq!(
        errno_of(std::fs::hard_link(r.join("d"), r.join("dl"))),
        libc::EPERM
    );
    assert_eq!(
        errno_of(std::fs::hard_link(r.join("none"), r.join("x"))),
        libc::ENOENT
    );
    // A directory gets no link from a hard link inside it.
    assert_eq!(nlink(&r.join("d")), 2);
    std::fs::remove_file(&f).unwrap();
    assert_eq!(nlink(&r.join("g")), 2);
    m.remount();
    assert_eq!(nlink(&r.join("g")), 2);
    assert_eq!(nlink(&r.join("d/h")), 2);
    assert_eq!(std::fs::read(r.join("d/h")).unwrap(), b"ONE");
    std::fs::remove_file(r.join("g")).unwrap();
    assert_eq!(nlink(&r.join("d/h")), 1);

    // Unlinked while open: the data stays reachable through the handle.
    let mut open = OpenOptions::new()
        .read(true)
        .write(true)
        .open(r.join("d/h"))
        .unwrap();
    std::fs::remove_file(r.join("d/h")).unwrap();
    assert_eq!(open.metadata().unwrap().nlink(), 0);
    open.write_all_at(b"still here", 100).unwrap();
    let mut s = Vec::new();
    open.read_to_end(&mut s).unwrap();
    assert_eq!(&s[..3], b"ONE");
    assert_eq!(&s[100..], b"still here");
    drop(open);
    assert!(std::fs::read_dir(r.join("d")).unwrap().next().is_none());
}

#[test]
fn symlinks_readlink_lstat_dangling_and_loops() {
    let m = pool();
    let r = m.root();
    std::fs::create_dir(r.join("dir")).unwrap();
    std::fs::write(r.join("dir/file"), b"content").unwrap();
    let l = r.join("link");
    std::os::unix::fs::symlink("dir/file", &l).unwrap();
    assert_eq!(std::fs::read_link(&l).unwrap(), PathBuf::from("dir/file"));
    let lmd = std::fs::symlink_metadata(&l).unwrap();
    assert!(lmd.file_type().is_symlink());
    assert_eq!(
        lmd.len(),
        "dir/file".len() as u64,
        "a symlink's size is its target's length"
    );
    assert_eq!(lmd.mode() & 0o777, 0o777);
    assert_eq!(lmd.nlink(), 1);
    assert_eq!(std::fs::read(&l).unwrap(), b"content", "followed");
    assert!(std::fs::metadata(&l).unwrap().is_file());
    // Through a symlink to a directory, and an absolute target.
    std::os::unix::fs::symlink("dir", r.join("dl")).unwrap();
    assert_eq!(std::fs::read(r.join("dl/file")).unwrap(), b"content");
    std::os::unix::fs::symlink(r.join("dir/file"), r.join("abs")).unwrap();
    assert_eq!(std::fs::read(r.join("abs")).unwrap(), b"content");
    // Dangling: lstat works, stat and open say ENOENT.
    let dang = r.join("dangling");
    std::os::unix::fs::symlink("nowhere/at/all", &dang).unwrap();
    assert!(std::fs::symlink_metadata(&dang)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(errno_of(std::fs::metadata(&dang)), libc::ENOENT);
    assert_eq!(errno_of(File::open(&dang)), libc::ENOENT);
    // Loops: ELOOP.
    std::os::unix::fs::symlink("loop2", r.join("loop1")).unwrap();
    std::os::unix::fs::symlink("loop1", r.join("loop2")).unwrap();
    assert_eq!(errno_of(File::open(r.join("loop1"))), libc::ELOOP);
    let nofollow = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&l);
    assert_eq!(errno_of(nofollow), libc::ELOOP);
    // An existing name; hard link to a symlink links the symlink itself.
    assert_eq!(errno_of(std::os::unix::fs::symlink("x", &l)), libc::EEXIST);
    let hl = r.join("hardlink-to-link");
    // SAFETY: linkat without AT_SYMLINK_FOLLOW on NUL-terminated paths.
    check(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            cpath(&l).as_ptr(),
            libc::AT_FDCWD,
            cpath(&hl).as_ptr(),
            0,
        )
    })
    .unwrap();
    assert!(std::fs::symlink_metadata(&hl)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(nlink(&l), 2);
    // Target length: 4095 bytes is the limit.
    let long_ok = "t/".repeat(2047) + "t";
    assert_eq!(long_ok.len(), 4095);
    std::os::unix::fs::symlink(&long_ok, r.join("long")).unwrap();
    assert_eq!(
        std::fs::read_link(r.join("long")).unwrap(),
        PathBuf::from(&long_ok)
    );
    let too_long = "t".repeat(4096);
    assert_eq!(
        errno_of(std::os::unix::fs::symlink(&too_long, r.join("long2"))),
        libc::ENAMETOOLONG
    );
    // readlink of a non-symlink is EINVAL.
    assert_eq!(
        errno_of(std::fs::read_link(r.join("dir/file"))),
        libc::EINVAL
    );
    // Removing a symlink leaves its target.
    std::fs::remove_file(r.join("dl")).unwrap();
    assert!(std::fs::metadata(r.join("dir")).unwrap().is_dir());
    m.remount();
    assert_eq!(std::fs::read_link(&l).unwrap(), PathBuf::from("dir/file"));
    assert_eq!(
        std::fs::read_link(&dang).unwrap(),
        PathBuf::from("nowhere/at/all")
    );
    assert_eq!(
        std::fs::read_link(r.join("long")).unwrap(),
        PathBuf::from(&long_ok)
    );
    assert_eq!(std::fs::read(&hl).unwrap(), b"content");
}

#[test]
fn fifo_socket_and_device_nodes() {
    let m = pool();
    let r = m.root();
    // FIFO: made by mknod and mkfifo, passes bytes between two openers.
    let fifo = r.join("fifo");
    mknod(&fifo, libc::S_IFIFO | 0o644, 0).unwrap();
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    // SAFETY: mkfifo on a NUL-terminated path.
    check(unsafe { libc::mkfifo(cpath(&r.join("fifo2")).as_ptr(), 0o600) }).unwrap();
    assert!(std::fs::symlink_metadata(r.join("fifo2"))
        .unwrap()
        .file_type()
        .is_fifo());
    let mut reader = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let mut writer = OpenOptions::new().write(true).open(&fifo).unwrap();
    writer.write_all(b"through the pipe").unwrap();
    drop(writer);
    let mut got = String::new();
    reader.read_to_string(&mut got).unwrap();
    assert_eq!(got, "through the pipe");
    drop(reader);

    // Socket: bind creates the node, and it works.
    let sock = r.join("sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    assert!(std::fs::symlink_metadata(&sock)
        .unwrap()
        .file_type()
        .is_socket());
    let mut client = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    client.write_all(b"hi").unwrap();
    let mut two = [0u8; 2];
    server.read_exact(&mut two).unwrap();
    assert_eq!(&two, b"hi");
    drop((client, server, listener));
    mknod(&r.join("sock2"), libc::S_IFSOCK | 0o600, 0).unwrap();
    assert!(std::fs::symlink_metadata(r.join("sock2"))
        .unwrap()
        .file_type()
        .is_socket());

    // Device nodes keep their device numbers.
    let null_dev = libc::makedev(1, 3);
    let blk_dev = libc::makedev(7, 200);
    mknod(&r.join("null"), libc::S_IFCHR | 0o666, null_dev).unwrap();
    mknod(&r.join("blk"), libc::S_IFBLK | 0o600, blk_dev).unwrap();
    let check_nodes = || {
        let c = std::fs::symlink_metadata(r.join("null")).unwrap();
        assert!(c.file_type().is_char_device());
        assert_eq!(c.rdev(), null_dev);
        assert_eq!(c.mode() & 0o777, 0o666 & !common::umask());
        let b = std::fs::symlink_metadata(r.join("blk")).unwrap();
        assert!(b.file_type().is_block_device());
        assert_eq!(b.rdev(), blk_dev);
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        assert!(std::fs::symlink_metadata(r.join("sock2"))
            .unwrap()
            .file_type()
            .is_socket());
    };
    check_nodes();
    assert_eq!(
        errno_of(mknod(&r.join("null"), libc::S_IFCHR | 0o666, null_dev)),
        libc::EEXIST
    );
    m.remount();
    check_nodes();
    // Special files can be renamed, linked and removed like any other.
    std::fs::rename(r.join("null"), r.join("null2")).unwrap();
    std::fs::hard_link(r.join("null2"), r.join("null3")).unwrap();
    assert_eq!(nlink(&r.join("null3")), 2);
    for n in ["null2", "null3", "blk", "fifo", "fifo2", "sock", "sock2"] {
        std::fs::remove_file(r.join(n)).unwrap();
    }
    assert!(std::fs::read_dir(&r).unwrap().next().is_none());
}
