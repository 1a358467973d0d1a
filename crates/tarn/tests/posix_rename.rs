//! rename(2) and renameat2(2) on a real FUSE mount: within and across
//! directories, over files and empty directories, the errors POSIX and
//! Linux give (ENOTEMPTY, EISDIR, ENOTDIR, EINVAL for a directory moved
//! into its own subtree), RENAME_NOREPLACE and RENAME_EXCHANGE, and the
//! link counts and `..` of moved directories, before and after a remount.

mod common;

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::{check, cpath, errno_of, Mounted, MIB};

fn renameat2(from: &Path, to: &Path, flags: u32) -> std::io::Result<()> {
    let (f, t) = (cpath(from), cpath(to));
    // SAFETY: renameat2 with two NUL-terminated paths we own.
    check(unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            flags,
        )
    })
    .map(|_| ())
}

fn ino(p: &Path) -> u64 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .ino()
}

fn nlink(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).unwrap().nlink()
}

fn gone(p: &Path) -> bool {
    errno_of(std::fs::symlink_metadata(p)) == libc::ENOENT
}

fn pool() -> Mounted {
    Mounted::new("tank", &["mirror", "a", "b"], 256 * MIB)
}

#[test]
fn rename_files_within_and_across_directories() {
    let m = pool();
    let r = m.root();
    std::fs::write(r.join("a"), b"A").unwrap();
    let a_ino = ino(&r.join("a"));
    std::fs::rename(r.join("a"), r.join("b")).unwrap();
    assert!(gone(&r.join("a")));
    assert_eq!(std::fs::read(r.join("b")).unwrap(), b"A");
    assert_eq!(ino(&r.join("b")), a_ino, "rename keeps the inode");

    std::fs::create_dir_all(r.join("d1/sub/deep")).unwrap();
    std::fs::create_dir(r.join("d2")).unwrap();
    std::fs::rename(r.join("b"), r.join("d1/b")).unwrap();
    assert_eq!(std::fs::read(r.join("d1/b")).unwrap(), b"A");
    // A directory moves with its subtree; link counts follow its `..`.
    assert_eq!((nlink(&r.join("d1")), nlink(&r.join("d2"))), (3, 2));
    std::fs::rename(r.join("d1/sub"), r.join("d2/moved")).unwrap();
    assert_eq!((nlink(&r.join("d1")), nlink(&r.join("d2"))), (2, 3));
    assert_eq!(ino(&r.join("d2/moved/..")), ino(&r.join("d2")));
    assert!(std::fs::metadata(r.join("d2/moved/deep")).unwrap().is_dir());
    // Renaming a name onto itself (or onto another link of the same
    // inode) does nothing.
    std::fs::rename(r.join("d1/b"), r.join("d1/b")).unwrap();
    std::fs::hard_link(r.join("d1/b"), r.join("d1/b2")).unwrap();
    std::fs::rename(r.join("d1/b"), r.join("d1/b2")).unwrap();
    assert_eq!(nlink(&r.join("d1/b")), 2, "both names stay");
    assert_eq!(
        errno_of(std::fs::rename(r.join("nope"), r.join("x"))),
        libc::ENOENT
    );
    assert_eq!(
        errno_of(std::fs::rename(r.join("d1/b"), r.join("no/x"))),
        libc::ENOENT
    );
    m.remount();
    assert_eq!((nlink(&r.join("d1")), nlink(&r.join("d2"))), (2, 3));
    assert_eq!(ino(&r.join("d2/moved/..")), ino(&r.join("d2")));
    assert_eq!(std::fs::read(r.join("d1/b2")).unwrap(), b"A");
}

#[test]
fn rename_over_existing_targets() {
    let m = pool();
    let r = m.root();
    std::fs::write(r.join("src"), b"new").unwrap();
    std::fs::write(r.join("dst"), b"old").unwrap();
    std::fs::hard_link(r.join("dst"), r.join("dst-link")).unwrap();
    let mut open_old = File::open(r.join("dst")).unwrap();
    std::fs::rename(r.join("src"), r.join("dst")).unwrap();
    assert_eq!(std::fs::read(r.join("dst")).unwrap(), b"new");
    assert!(gone(&r.join("src")));
    assert_eq!(
        nlink(&r.join("dst-link")),
        1,
        "the replaced inode lost a link"
    );
    let mut s = String::new();
    open_old.read_to_string(&mut s).unwrap();
    assert_eq!(s, "old", "an open replaced file still reads");
    drop(open_old);

    // Directory over an empty directory: allowed; over a non-empty one: not.
    std::fs::create_dir_all(r.join("full/x")).unwrap();
    std::fs::create_dir(r.join("empty")).unwrap();
    std::fs::create_dir(r.join("dir")).unwrap();
    std::fs::write(r.join("dir/f"), b"f").unwrap();
    std::fs::rename(r.join("dir"), r.join("empty")).unwrap();
    assert_eq!(std::fs::read(r.join("empty/f")).unwrap(), b"f");
    assert_eq!(nlink(&r), 4, "root: . .. and the dirs full, empty");
    let e = errno_of(std::fs::rename(r.join("empty"), r.join("full")));
    assert_eq!(e, libc::ENOTEMPTY);
    // Type mismatches.
    assert_eq!(
        errno_of(std::fs::rename(r.join("dst"), r.join("full"))),
        libc::EISDIR
    );
    assert_eq!(
        errno_of(std::fs::rename(r.join("full"), r.join("dst"))),
        libc::ENOTDIR
    );
    // Nothing moved on the refusals.
    assert_eq!(std::fs::read(r.join("dst")).unwrap(), b"new");
    assert!(std::fs::metadata(r.join("full/x")).unwrap().is_dir());
    assert_eq!(std::fs::read(r.join("empty/f")).unwrap(), b"f");
    m.remount();
    assert_eq!(nlink(&r), 4);
    assert_eq!(nlink(&r.join("dst-link")), 1);
    assert_eq!(std::fs::read(r.join("dst-link")).unwrap(), b"old");
}

#[test]
fn directory_into_its_own_subtree_is_einval() {
    let m = pool();
    let r = m.root();
    std::fs::create_dir_all(r.join("a/b/c")).unwrap();
    assert_eq!(
        errno_of(std::fs::rename(r.join("a"), r.join("a/b/c/a"))),
        libc::EINVAL
    );
    assert_eq!(
        errno_of(std::fs::rename(r.join("a"), r.join("a/x"))),
        libc::EINVAL
    );
    // A subdirectory onto its ancestor: the ancestor is not empty.
    let e = errno_of(std::fs::rename(r.join("a/b/c"), r.join("a")));
    assert!(e == libc::ENOTEMPTY || e == libc::EEXIST, "errno {e}");
    assert!(std::fs::metadata(r.join("a/b/c")).unwrap().is_dir());
    // Moving a directory up is fine.
    std::fs::rename(r.join("a/b/c"), r.join("c")).unwrap();
    assert_eq!(nlink(&r.join("a/b")), 2);
}

#[test]
fn renameat2_noreplace_and_exchange() {
    let m = pool();
    let r = m.root();
    std::fs::write(r.join("x"), b"X").unwrap();
    std::fs::write(r.join("y"), b"Y").unwrap();
    let e = errno_of(renameat2(
        &r.join("x"),
        &r.join("y"),
        libc::RENAME_NOREPLACE,
    ));
    assert_eq!(e, libc::EEXIST);
    assert_eq!(std::fs::read(r.join("y")).unwrap(), b"Y");
    renameat2(&r.join("x"), &r.join("z"), libc::RENAME_NOREPLACE).unwrap();
    assert!(gone(&r.join("x")));
    assert_eq!(std::fs::read(r.join("z")).unwrap(), b"X");

    // Exchange two files.
    let (yi, zi) = (ino(&r.join("y")), ino(&r.join("z")));
    renameat2(&r.join("y"), &r.join("z"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(std::fs::read(r.join("y")).unwrap(), b"X");
    assert_eq!(std::fs::read(r.join("z")).unwrap(), b"Y");
    assert_eq!((ino(&r.join("y")), ino(&r.join("z"))), (zi, yi));
    // Exchange a file and a directory in different parents: the
    // directory's `..` and both parents' link counts follow it.
    std::fs::create_dir_all(r.join("p1/dir/inner")).unwrap();
    std::fs::create_dir(r.join("p2")).unwrap();
    std::fs::write(r.join("p2/file"), b"F").unwrap();
    assert_eq!((nlink(&r.join("p1")), nlink(&r.join("p2"))), (3, 2));
    renameat2(&r.join("p1/dir"), &r.join("p2/file"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(std::fs::read(r.join("p1/dir")).unwrap(), b"F");
    assert!(std::fs::metadata(r.join("p2/file/inner")).unwrap().is_dir());
    assert_eq!(ino(&r.join("p2/file/..")), ino(&r.join("p2")));
    assert_eq!((nlink(&r.join("p1")), nlink(&r.join("p2"))), (2, 3));
    // Exchange needs both names.
    let e = errno_of(renameat2(
        &r.join("y"),
        &r.join("none"),
        libc::RENAME_EXCHANGE,
    ));
    assert_eq!(e, libc::ENOENT);
    let both = libc::RENAME_EXCHANGE | libc::RENAME_NOREPLACE;
    assert_eq!(
        errno_of(renameat2(&r.join("y"), &r.join("z"), both)),
        libc::EINVAL
    );
    // Exchanging a directory into its own subtree is refused.
    let e = errno_of(renameat2(
        &r.join("p2/file"),
        &r.join("p2/file/inner"),
        libc::RENAME_EXCHANGE,
    ));
    assert_eq!(e, libc::EINVAL);
    m.remount();
    assert_eq!(std::fs::read(r.join("y")).unwrap(), b"X");
    assert_eq!(std::fs::read(r.join("p1/dir")).unwrap(), b"F");
    assert_eq!(ino(&r.join("p2/file/..")), ino(&r.join("p2")));
    assert_eq!((nlink(&r.join("p1")), nlink(&r.join("p2"))), (2, 3));
}

#[test]
fn rename_across_datasets_is_exdev() {
    let m = pool();
    m.env.ok(&["zfs", "create", "tank/other"]);
    m.assert_mounted("tank/other");
    let r = m.root();
    std::fs::write(r.join("f"), b"f").unwrap();
    let e = errno_of(std::fs::rename(r.join("f"), m.mnt("tank/other").join("f")));
    assert_eq!(e, libc::EXDEV);
    assert_eq!(
        errno_of(std::fs::hard_link(
            r.join("f"),
            m.mnt("tank/other").join("g")
        )),
        libc::EXDEV
    );
}
