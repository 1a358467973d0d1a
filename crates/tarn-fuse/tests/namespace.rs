//! Directories, renames, links, symlinks and special files through a real
//! FUSE mount.

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::{DirEntryExt, FileTypeExt, MetadataExt};

use common::{c, errno, Mounted};

fn renameat2(from: &std::path::Path, to: &std::path::Path, flags: u32) -> i32 {
    let (a, b) = (c(from), c(to));
    // SAFETY: valid NUL-terminated paths.
    unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        ) as i32
    }
}

#[test]
fn directories() {
    let m = Mounted::new();
    let d = m.path("d");
    std::fs::create_dir(&d).unwrap();
    // Enough entries that readdir takes several requests.
    let names: BTreeSet<String> = (0..600)
        .map(|i| format!("entry-with-a-longish-name-{i:04}"))
        .collect();
    for n in &names {
        std::fs::write(d.join(n), n.as_bytes()).unwrap();
    }
    let listed: BTreeSet<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(listed, names);
    // ls -l style: readdir and stat every entry (readdirplus).
    for e in std::fs::read_dir(&d).unwrap() {
        let e = e.unwrap();
        let md = e.metadata().unwrap();
        assert_eq!(md.len(), e.file_name().len() as u64);
        assert_eq!(md.ino(), e.ino());
    }
    // rmdir of a non-empty directory.
    let err = std::fs::remove_dir(&d).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTEMPTY));
    for n in &names {
        std::fs::remove_file(d.join(n)).unwrap();
    }
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
    // nlink of a directory counts its subdirectories.
    std::fs::create_dir(d.join("sub")).unwrap();
    assert_eq!(std::fs::metadata(&d).unwrap().nlink(), 3);
    std::fs::remove_dir(d.join("sub")).unwrap();
    std::fs::remove_dir(&d).unwrap();
    assert!(!d.exists());
    // Names of 255 bytes work, 256 do not.
    std::fs::write(m.path(&"n".repeat(255)), b"").unwrap();
    let e = std::fs::write(m.path(&"n".repeat(256)), b"").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG));
    // The root's "." and ".." show the root's inode number.
    let root_ino = std::fs::metadata(&m.mnt).unwrap().ino();
    std::fs::create_dir(m.path("x")).unwrap();
    assert_eq!(std::fs::metadata(m.path("x/..")).unwrap().ino(), root_ino);
}

#[test]
fn renames() {
    let m = Mounted::new();
    let (a, b) = (m.path("a"), m.path("b"));
    std::fs::write(&a, b"A").unwrap();
    std::fs::write(&b, b"B").unwrap();
    // Plain rename over an existing file.
    std::fs::rename(&a, &b).unwrap();
    assert!(!a.exists());
    assert_eq!(std::fs::read(&b).unwrap(), b"A");
    // NOREPLACE refuses an existing target.
    std::fs::write(&a, b"A2").unwrap();
    assert_eq!(renameat2(&a, &b, libc::RENAME_NOREPLACE), -1);
    assert_eq!(errno(), libc::EEXIST);
    // EXCHANGE swaps, across directories too.
    std::fs::create_dir(m.path("dir")).unwrap();
    let c2 = m.path("dir/c");
    std::fs::write(&c2, b"C").unwrap();
    assert_eq!(renameat2(&a, &c2, libc::RENAME_EXCHANGE), 0);
    assert_eq!(std::fs::read(&a).unwrap(), b"C");
    assert_eq!(std::fs::read(&c2).unwrap(), b"A2");
    // Exchanging with a missing name fails.
    assert_eq!(renameat2(&a, &m.path("missing"), libc::RENAME_EXCHANGE), -1);
    assert_eq!(errno(), libc::ENOENT);
    // A directory over an empty directory; not over a non-empty one.
    std::fs::create_dir(m.path("e1")).unwrap();
    std::fs::create_dir(m.path("e2")).unwrap();
    std::fs::rename(m.path("e1"), m.path("e2")).unwrap();
    let e = std::fs::rename(m.path("e2"), m.path("dir")).unwrap_err();
    assert!(matches!(
        e.raw_os_error(),
        Some(libc::ENOTEMPTY | libc::EEXIST)
    ));
    // Into its own subdirectory: EINVAL.
    let e = std::fs::rename(m.path("dir"), m.path("dir/inner")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
}

#[test]
fn links_symlinks_and_special_files() {
    let m = Mounted::new();
    let f = m.path("f");
    std::fs::write(&f, b"data").unwrap();
    std::fs::hard_link(&f, m.path("g")).unwrap();
    std::fs::create_dir(m.path("d")).unwrap();
    std::fs::hard_link(&f, m.path("d/h")).unwrap();
    let md = std::fs::metadata(&f).unwrap();
    assert_eq!(md.nlink(), 3);
    assert_eq!(std::fs::metadata(m.path("d/h")).unwrap().ino(), md.ino());
    std::fs::remove_file(m.path("g")).unwrap();
    assert_eq!(std::fs::metadata(&f).unwrap().nlink(), 2);
    // Hard links to directories are refused.
    let e = std::fs::hard_link(m.path("d"), m.path("d2")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EPERM));

    // Symlinks.
    std::os::unix::fs::symlink("d/h", m.path("s")).unwrap();
    assert_eq!(
        std::fs::read_link(m.path("s")).unwrap().to_str(),
        Some("d/h")
    );
    assert_eq!(std::fs::read(m.path("s")).unwrap(), b"data");
    assert!(std::fs::symlink_metadata(m.path("s"))
        .unwrap()
        .file_type()
        .is_symlink());
    std::os::unix::fs::symlink("nowhere", m.path("dangling")).unwrap();
    assert!(std::fs::metadata(m.path("dangling")).is_err());

    // A FIFO, a socket node and a device node.
    let fifo = c(&m.path("fifo"));
    // SAFETY: valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    assert!(std::fs::metadata(m.path("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    let sock = c(&m.path("sock"));
    assert_eq!(
        unsafe { libc::mknod(sock.as_ptr(), libc::S_IFSOCK | 0o644, 0) },
        0
    );
    assert!(std::fs::metadata(m.path("sock"))
        .unwrap()
        .file_type()
        .is_socket());
    let dev = c(&m.path("null"));
    let rdev = libc::makedev(1, 3);
    assert_eq!(
        unsafe { libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o666, rdev) },
        0
    );
    let md = std::fs::metadata(m.path("null")).unwrap();
    assert!(md.file_type().is_char_device());
    assert_eq!(md.rdev(), rdev);

    // An unlinked file stays readable while open.
    let mut held = std::fs::File::open(&f).unwrap();
    std::fs::remove_file(&f).unwrap();
    std::fs::remove_file(m.path("d/h")).unwrap();
    let mut s = String::new();
    std::io::Read::read_to_string(&mut held, &mut s).unwrap();
    assert_eq!(s, "data");
    drop(held);
}
