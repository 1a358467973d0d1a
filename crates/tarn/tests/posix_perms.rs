//! Owner, group and mode with non-root users on a real FUSE mount: each
//! check runs in a forked child that has become uid/gid 1000 (or 1001)
//! and reports the errno of one system call. Covers the owner/group/other
//! classes, directory write and search bits, chmod/chown/utimes by
//! non-owners (EPERM), set-uid/set-gid bits cleared by non-root writes
//! and truncates, and sticky directories.

mod common;

use std::ffi::CString;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::{as_user, cpath, Mounted, MIB};

const ALICE: u32 = 1000;
const BOB: u32 = 1001;
const OK: i32 = 0;

/// A pool whose mount other users can reach (the test's temp dir is 0700).
fn pool() -> Mounted {
    let m = Mounted::new("tank", &["mirror", "a", "b"], 256 * MIB);
    for p in [m.env.dir.path(), &m.env.mount_root()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(m.root(), std::fs::Permissions::from_mode(0o755)).unwrap();
    m
}

fn file(p: &Path, mode: u32, uid: u32, gid: u32) -> CString {
    std::fs::write(p, b"data").unwrap();
    std::os::unix::fs::chown(p, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    cpath(p)
}

fn dir(p: &Path, mode: u32, uid: u32, gid: u32) -> CString {
    std::fs::create_dir(p).unwrap();
    std::os::unix::fs::chown(p, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    cpath(p)
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

// The closures below run in a forked child: raw libc calls on strings
// made before the fork, nothing else (see `as_user`).
fn open_as(uid: u32, p: &CString, flags: i32) -> i32 {
    // SAFETY: open on a NUL-terminated path; async-signal-safe.
    as_user(uid, uid, || unsafe {
        libc::open(p.as_ptr(), flags, 0o644) as i64
    })
}

fn mkdir_as(uid: u32, p: &CString) -> i32 {
    // SAFETY: as in open_as.
    as_user(uid, uid, || unsafe {
        libc::mkdir(p.as_ptr(), 0o755) as i64
    })
}

fn unlink_as(uid: u32, p: &CString) -> i32 {
    // SAFETY: as in open_as.
    as_user(uid, uid, || unsafe { libc::unlink(p.as_ptr()) as i64 })
}

fn write_as(uid: u32, p: &CString, data: &'static [u8]) -> i32 {
    // SAFETY: open/write on a path and a static buffer; async-signal-safe.
    as_user(uid, uid, || unsafe {
        let fd = libc::open(p.as_ptr(), libc::O_WRONLY);
        if fd < 0 {
            return -1;
        }
        libc::write(fd, data.as_ptr().cast(), data.len()) as i64
    })
}

#[test]
fn mode_bits_decide_for_non_root_users() {
    let m = pool();
    let r = m.root();
    // The mount must let other users in at all (allow_other).
    let root_c = cpath(&r);
    // SAFETY: access on a NUL-terminated path.
    let e = as_user(ALICE, ALICE, || unsafe {
        libc::access(root_c.as_ptr(), libc::R_OK | libc::X_OK) as i64
    });
    assert_eq!(
        e, OK,
        "a non-root user cannot enter the mount (allow_other?)"
    );

    let pub_ro = file(&r.join("pub_ro"), 0o644, 0, 0);
    let secret = file(&r.join("secret"), 0o600, 0, 0);
    let mine = file(&r.join("mine"), 0o600, ALICE, ALICE);
    let grp_r = file(&r.join("grp_r"), 0o040, 0, ALICE);
    let owner_denied = file(&r.join("owner_denied"), 0o044, ALICE, ALICE);
    let (rd, wr, rw) = (libc::O_RDONLY, libc::O_WRONLY, libc::O_RDWR);
    assert_eq!(open_as(ALICE, &pub_ro, rd), OK);
    assert_eq!(open_as(ALICE, &pub_ro, wr), libc::EACCES);
    assert_eq!(open_as(ALICE, &pub_ro, rd | libc::O_TRUNC), libc::EACCES);
    assert_eq!(open_as(ALICE, &secret, rd), libc::EACCES);
    assert_eq!(open_as(ALICE, &mine, rw), OK);
    assert_eq!(open_as(BOB, &mine, rd), libc::EACCES);
    assert_eq!(open_as(ALICE, &grp_r, rd), OK, "group class");
    assert_eq!(
        open_as(BOB, &grp_r, rd),
        libc::EACCES,
        "other class has no bits"
    );
    assert_eq!(
        open_as(ALICE, &owner_denied, rd),
        libc::EACCES,
        "owner class decides alone"
    );
    assert_eq!(open_as(BOB, &owner_denied, rd), OK);
    assert_eq!(write_as(ALICE, &mine, b"alice"), OK);
    assert_eq!(std::fs::read(r.join("mine")).unwrap(), b"alice");

    // Directories: write+search to create and remove, search to look up.
    let in_root = cpath(&r.join("alice-file"));
    assert_eq!(open_as(ALICE, &in_root, wr | libc::O_CREAT), libc::EACCES);
    assert_eq!(mkdir_as(ALICE, &cpath(&r.join("alice-dir"))), libc::EACCES);
    assert_eq!(unlink_as(ALICE, &pub_ro), libc::EACCES);
    dir(&r.join("shared"), 0o777, 0, 0);
    let shared_f = cpath(&r.join("shared/f"));
    assert_eq!(open_as(ALICE, &shared_f, wr | libc::O_CREAT), OK);
    let md = std::fs::metadata(r.join("shared/f")).unwrap();
    assert_eq!(
        (md.uid(), md.gid()),
        (ALICE, ALICE),
        "new files belong to the caller"
    );
    assert_eq!(mkdir_as(ALICE, &cpath(&r.join("shared/d"))), OK);
    let root_owned = file(&r.join("shared/root-owned"), 0o600, 0, 0);
    assert_eq!(
        unlink_as(BOB, &root_owned),
        OK,
        "not sticky: the directory decides"
    );
    assert_eq!(unlink_as(BOB, &shared_f), OK);
    dir(&r.join("noexec"), 0o666, 0, 0);
    let inner = file(&r.join("noexec/inner"), 0o644, 0, 0);
    assert_eq!(
        open_as(ALICE, &inner, rd),
        libc::EACCES,
        "no search permission"
    );
    dir(&r.join("ro_dir"), 0o755, ALICE, ALICE);
    std::fs::write(r.join("ro_dir/x"), b"").unwrap();
    std::fs::set_permissions(r.join("ro_dir"), std::fs::Permissions::from_mode(0o555)).unwrap();
    assert_eq!(
        unlink_as(ALICE, &cpath(&r.join("ro_dir/x"))),
        libc::EACCES,
        "owner without w"
    );
    // Root passes read/write checks whatever the mode.
    let zero = file(&r.join("zero"), 0o000, ALICE, ALICE);
    drop(zero);
    assert_eq!(std::fs::read(r.join("zero")).unwrap(), b"data");
    m.remount();
    assert_eq!(open_as(ALICE, &grp_r, rd), OK);
    assert_eq!(open_as(ALICE, &secret, rd), libc::EACCES);
}

#[test]
fn attribute_changes_by_non_owners_are_refused() {
    let m = pool();
    let r = m.root();
    let theirs = file(&r.join("theirs"), 0o666, BOB, BOB);
    let mine = file(&r.join("mine"), 0o644, ALICE, ALICE);
    // SAFETY (every closure): chmod/chown/utimensat on NUL-terminated
    // paths and a stack array; async-signal-safe.
    let chmod = |p: &CString, mode: u32| {
        as_user(ALICE, ALICE, || unsafe {
            libc::chmod(p.as_ptr(), mode) as i64
        })
    };
    let chown = |p: &CString, uid: u32, gid: u32| {
        as_user(ALICE, ALICE, || unsafe {
            libc::chown(p.as_ptr(), uid, gid) as i64
        })
    };
    let utimes = |p: &CString, nsec: i64| {
        let ts = [
            libc::timespec {
                tv_sec: 1_000_000,
                tv_nsec: nsec,
            },
            libc::timespec {
                tv_sec: 1_000_000,
                tv_nsec: nsec,
            },
        ];
        as_user(ALICE, ALICE, || unsafe {
            libc::utimensat(libc::AT_FDCWD, p.as_ptr(), ts.as_ptr(), 0) as i64
        })
    };
    assert_eq!(chmod(&theirs, 0o777), libc::EPERM);
    assert_eq!(chmod(&mine, 0o600), OK);
    assert_eq!(mode(&r.join("mine")), 0o600);
    assert_eq!(chown(&theirs, ALICE, ALICE), libc::EPERM);
    assert_eq!(chown(&mine, 0, u32::MAX), libc::EPERM, "giving a file away");
    assert_eq!(
        chown(&mine, u32::MAX, 0),
        libc::EPERM,
        "a group she is not in"
    );
    assert_eq!(chown(&mine, u32::MAX, ALICE), OK, "her own group");
    // Explicit times need ownership; UTIME_NOW needs only write access.
    assert_eq!(utimes(&theirs, 0), libc::EPERM);
    assert_eq!(utimes(&theirs, libc::UTIME_NOW), OK);
    assert_eq!(utimes(&mine, 5), OK);
    assert_eq!(std::fs::metadata(r.join("mine")).unwrap().mtime_nsec(), 5);
    // chmod by a non-member of the group drops set-gid.
    let mine_sgid = file(&r.join("mine-sgid"), 0o644, ALICE, 0);
    assert_eq!(chmod(&mine_sgid, 0o2755), OK);
    assert_eq!(mode(&r.join("mine-sgid")), 0o755);
    assert_eq!(
        std::fs::metadata(r.join("theirs")).unwrap().uid(),
        BOB,
        "unchanged"
    );
    assert_eq!(mode(&r.join("theirs")), 0o666);
}

#[test]
fn setuid_and_setgid_bits_are_cleared_by_non_root_writes() {
    let m = pool();
    let r = m.root();
    let rootfile = file(&r.join("suid-root"), 0o6777, 0, 0);
    assert_eq!(mode(&r.join("suid-root")), 0o6777);
    assert_eq!(write_as(ALICE, &rootfile, b"alice was here"), OK);
    assert_eq!(
        mode(&r.join("suid-root")),
        0o777,
        "a non-owner's write drops both"
    );
    // Without group execute, set-gid stays (it means mandatory locking).
    let nox = file(&r.join("sgid-nox"), 0o6766, 0, 0);
    assert_eq!(write_as(ALICE, &nox, b"x"), OK);
    assert_eq!(mode(&r.join("sgid-nox")), 0o2766);
    // The owner, if not root, loses them too.
    let own = file(&r.join("suid-own"), 0o4755, ALICE, ALICE);
    assert_eq!(write_as(ALICE, &own, b"x"), OK);
    assert_eq!(mode(&r.join("suid-own")), 0o755);
    // Truncation by a non-root user too.
    let tr = file(&r.join("suid-trunc"), 0o6777, 0, 0);
    // SAFETY: truncate on a NUL-terminated path.
    assert_eq!(
        as_user(ALICE, ALICE, || unsafe {
            libc::truncate(tr.as_ptr(), 1) as i64
        }),
        OK
    );
    assert_eq!(mode(&r.join("suid-trunc")), 0o777);
    // Root's writes keep them.
    std::fs::write(r.join("suid-trunc"), b"root").unwrap();
    std::fs::set_permissions(
        r.join("suid-trunc"),
        std::fs::Permissions::from_mode(0o6755),
    )
    .unwrap();
    std::fs::write(r.join("suid-trunc"), b"root again").unwrap();
    assert_eq!(mode(&r.join("suid-trunc")), 0o6755);
    // chown drops set-uid even when root does it.
    std::os::unix::fs::chown(r.join("suid-trunc"), Some(ALICE), None).unwrap();
    assert_eq!(mode(&r.join("suid-trunc")), 0o755);
    m.remount();
    assert_eq!(mode(&r.join("suid-root")), 0o777);
    assert_eq!(mode(&r.join("sgid-nox")), 0o2766);
}

#[test]
fn sticky_directory_protects_other_users_entries() {
    let m = pool();
    let r = m.root();
    dir(&r.join("tmp"), 0o1777, 0, 0);
    let alice_f = cpath(&r.join("tmp/alice"));
    let bob_f = cpath(&r.join("tmp/bob"));
    let wr_create = libc::O_WRONLY | libc::O_CREAT;
    assert_eq!(open_as(ALICE, &alice_f, wr_create), OK);
    assert_eq!(open_as(BOB, &bob_f, wr_create), OK);
    assert_eq!(unlink_as(BOB, &alice_f), libc::EPERM);
    let target = cpath(&r.join("tmp/bob-took-it"));
    // SAFETY: rename on NUL-terminated paths; async-signal-safe.
    let e = as_user(BOB, BOB, || unsafe {
        libc::rename(alice_f.as_ptr(), target.as_ptr()) as i64
    });
    assert_eq!(e, libc::EPERM);
    // Bob may not replace Alice's file by renaming over it either.
    let e = as_user(BOB, BOB, || unsafe {
        libc::rename(bob_f.as_ptr(), alice_f.as_ptr()) as i64
    });
    assert_eq!(e, libc::EPERM);
    assert_eq!(std::fs::metadata(r.join("tmp/alice")).unwrap().uid(), ALICE);
    assert_eq!(unlink_as(ALICE, &alice_f), OK, "her own file");
    // The directory's owner (root here) removes anything.
    std::fs::remove_file(r.join("tmp/bob")).unwrap();
    // A directory Alice owns: she may remove Bob's entries in it.
    dir(&r.join("tmp/alices"), 0o1777, ALICE, ALICE);
    let bob_in_alices = cpath(&r.join("tmp/alices/bob"));
    assert_eq!(open_as(BOB, &bob_in_alices, wr_create), OK);
    assert_eq!(unlink_as(ALICE, &bob_in_alices), OK);
}
