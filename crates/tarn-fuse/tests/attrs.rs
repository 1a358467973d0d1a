//! Attributes through a real FUSE mount: chmod/chown, utimensat with
//! UTIME_NOW/UTIME_OMIT and nanoseconds, ctime, extended attributes, and
//! permission checks for a non-root user (run with setpriv).

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use common::{c, chmod, errno, run_as, Mounted};

fn utimens(p: &std::path::Path, atime: libc::timespec, mtime: libc::timespec) -> i32 {
    let ts = [atime, mtime];
    // SAFETY: a valid path and a two-element array.
    unsafe { libc::utimensat(libc::AT_FDCWD, c(p).as_ptr(), ts.as_ptr(), 0) }
}

/// CLOCK_REALTIME_COARSE in whole seconds: the clock the kernel stamps
/// inodes with.
fn coarse_secs() -> i64 {
    let mut t = ts(0, 0);
    // SAFETY: clock_gettime into a local.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut t) };
    t.tv_sec
}

fn ts(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    }
}

#[test]
fn modes_owners_and_times() {
    let m = Mounted::new();
    let p = m.path("f");
    std::fs::write(&p, b"x").unwrap();
    chmod(&p, 0o640);
    assert_eq!(
        std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777,
        0o640
    );
    std::os::unix::fs::chown(&p, Some(1234), Some(5678)).unwrap();
    let md = std::fs::metadata(&p).unwrap();
    assert_eq!((md.uid(), md.gid()), (1234, 5678));

    // Explicit times with nanoseconds; OMIT leaves one alone.
    assert_eq!(
        utimens(
            &p,
            ts(1_000_000_000, 123_456_789),
            ts(1_100_000_000, 987_654_321)
        ),
        0
    );
    let md = std::fs::metadata(&p).unwrap();
    assert_eq!((md.atime(), md.atime_nsec()), (1_000_000_000, 123_456_789));
    assert_eq!((md.mtime(), md.mtime_nsec()), (1_100_000_000, 987_654_321));
    let omit = ts(0, libc::UTIME_OMIT);
    assert_eq!(utimens(&p, omit, ts(1_200_000_000, 5)), 0);
    let md = std::fs::metadata(&p).unwrap();
    assert_eq!((md.atime(), md.atime_nsec()), (1_000_000_000, 123_456_789));
    assert_eq!((md.mtime(), md.mtime_nsec()), (1_200_000_000, 5));
    // NOW sets the current time; ctime moved with every change. The
    // kernel stamps ctime, and mtime on a cached write, from the coarse
    // clock, which trails CLOCK_REALTIME by up to a tick: a bound read from
    // the fine clock can be a second ahead of them at a second's edge.
    let before = coarse_secs();
    assert_eq!(utimens(&p, ts(0, libc::UTIME_NOW), omit), 0);
    let md = std::fs::metadata(&p).unwrap();
    assert!(md.atime() >= before && md.atime() <= before + 5);
    assert_eq!(md.mtime(), 1_200_000_000);
    assert!(md.ctime() >= before);
    // A write moves mtime and ctime.
    assert_eq!(utimens(&p, omit, ts(1_000, 0)), 0);
    std::fs::write(&p, b"y").unwrap();
    let md = std::fs::metadata(&p).unwrap();
    assert!(md.mtime() >= before, "mtime {} after a write", md.mtime());
}

#[test]
fn extended_attributes() {
    let m = Mounted::new();
    let p = m.path("f");
    std::fs::write(&p, b"x").unwrap();
    let cp = c(&p);
    let set = |name: &str, v: &[u8], flags: i32| {
        let n = std::ffi::CString::new(name).unwrap();
        // SAFETY: valid strings and buffer.
        unsafe { libc::setxattr(cp.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), flags) }
    };
    let get = |name: &str, buf: &mut [u8]| {
        let n = std::ffi::CString::new(name).unwrap();
        // SAFETY: valid strings and buffer.
        unsafe { libc::getxattr(cp.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) }
    };
    assert_eq!(set("user.small", b"value", 0), 0);
    let big = vec![7u8; 10_000];
    assert_eq!(set("user.big", &big, 0), 0);
    assert_eq!(set("trusted.t", b"root only", 0), 0);
    assert_eq!(set("security.s", b"sec", 0), 0);
    // Size probe, exact read, too-small buffer.
    assert_eq!(get("user.big", &mut []), 10_000);
    let mut buf = vec![0u8; 10_000];
    assert_eq!(get("user.big", &mut buf), 10_000);
    assert_eq!(buf, big);
    let mut small = [0u8; 3];
    assert_eq!(get("user.small", &mut small), -1);
    assert_eq!(errno(), libc::ERANGE);
    let mut b5 = [0u8; 5];
    assert_eq!(get("user.small", &mut b5), 5);
    assert_eq!(&b5, b"value");
    assert_eq!(get("user.missing", &mut buf), -1);
    assert_eq!(errno(), libc::ENODATA);
    // CREATE and REPLACE.
    assert_eq!(set("user.small", b"v2", libc::XATTR_CREATE), -1);
    assert_eq!(errno(), libc::EEXIST);
    assert_eq!(set("user.none", b"v", libc::XATTR_REPLACE), -1);
    assert_eq!(errno(), libc::ENODATA);
    assert_eq!(set("user.small", b"v2", libc::XATTR_REPLACE), 0);
    // Unknown namespace.
    assert_eq!(set("bogus.x", b"v", 0), -1);
    assert_eq!(errno(), libc::EOPNOTSUPP);
    // list: probe, then read.
    // SAFETY: valid path and buffers.
    let n = unsafe { libc::listxattr(cp.as_ptr(), std::ptr::null_mut(), 0) };
    assert!(n > 0);
    let mut lb = vec![0u8; n as usize];
    let n2 = unsafe { libc::listxattr(cp.as_ptr(), lb.as_mut_ptr().cast(), lb.len()) };
    assert_eq!(n, n2);
    let names: Vec<&[u8]> = lb.split(|&b| b == 0).filter(|s| !s.is_empty()).collect();
    for want in [&b"user.small"[..], b"user.big", b"trusted.t", b"security.s"] {
        assert!(
            names.contains(&want),
            "{:?} missing",
            String::from_utf8_lossy(want)
        );
    }
    let mut tiny = [0u8; 4];
    assert_eq!(
        unsafe { libc::listxattr(cp.as_ptr(), tiny.as_mut_ptr().cast(), 4) },
        -1
    );
    assert_eq!(errno(), libc::ERANGE);
    // remove.
    let n = std::ffi::CString::new("user.big").unwrap();
    assert_eq!(unsafe { libc::removexattr(cp.as_ptr(), n.as_ptr()) }, 0);
    assert_eq!(get("user.big", &mut buf), -1);
    assert_eq!(errno(), libc::ENODATA);
    assert_eq!(unsafe { libc::removexattr(cp.as_ptr(), n.as_ptr()) }, -1);
    assert_eq!(errno(), libc::ENODATA);
}

#[test]
fn permissions_for_a_non_root_user() {
    check_permissions(common::options());
}

#[test]
fn permissions_checked_by_the_daemon_alone() {
    check_permissions(tarn_fuse::MountOptions {
        default_permissions: false,
        ..common::options()
    });
}

fn check_permissions(opts: tarn_fuse::MountOptions) {
    let m = Mounted::with_options(opts);
    let root = m.mnt.display().to_string();
    // A directory only root may write, a file only root may read.
    std::fs::create_dir(m.path("locked")).unwrap();
    chmod(&m.path("locked"), 0o755);
    std::fs::write(m.path("secret"), b"s").unwrap();
    chmod(&m.path("secret"), 0o600);
    // A directory owned by group 2000 with group write.
    std::fs::create_dir(m.path("team")).unwrap();
    std::os::unix::fs::chown(m.path("team"), Some(0), Some(2000)).unwrap();
    chmod(&m.path("team"), 0o770);
    // A directory the user owns.
    std::fs::create_dir(m.path("mine")).unwrap();
    std::os::unix::fs::chown(m.path("mine"), Some(1000), Some(1000)).unwrap();

    let ok = |uid, groups: &[u32], script: &str| {
        let (code, err) = run_as(uid, 1000, groups, script);
        assert_eq!(code, 0, "as uid {uid}: {script}: {err}");
    };
    let denied = |uid, groups: &[u32], script: &str| {
        let (code, err) = run_as(uid, 1000, groups, script);
        assert_ne!(code, 0, "as uid {uid} should fail: {script}");
        assert!(
            err.contains("ermission denied") || err.contains("not permitted"),
            "{script}: {err}"
        );
    };
    denied(1000, &[], &format!("echo x > {root}/locked/f"));
    denied(1000, &[], &format!("cat {root}/secret"));
    denied(1000, &[], &format!("ls {root}/team"));
    denied(1000, &[], &format!("chmod 777 {root}/secret"));
    denied(1000, &[], &format!("rm -f {root}/secret"));
    // Supplementary group membership grants the group's bits.
    ok(
        1000,
        &[2000],
        &format!("echo x > {root}/team/f && cat {root}/team/f >/dev/null"),
    );
    let md = std::fs::metadata(m.path("team/f")).unwrap();
    assert_eq!((md.uid(), md.gid()), (1000, 1000));
    // In its own directory the user does everything; new files follow
    // the umask.
    ok(
        1000,
        &[],
        &format!(
            "cd {root}/mine && umask 027 && echo hi > a && mkdir sub && ln -s a l && ln a hard \
         && mv a b && chmod 600 b && touch -d @1000000000 b && rm b hard l && rmdir sub \
         && umask 022 && echo x > c"
        ),
    );
    let md = std::fs::metadata(m.path("mine/c")).unwrap();
    assert_eq!(md.permissions().mode() & 0o777, 0o644);
    assert_eq!((md.uid(), md.gid()), (1000, 1000));
    // Another user may not touch it, nor change its times.
    std::fs::write(m.path("mine/shared"), b"").unwrap();
    chmod(&m.path("mine/shared"), 0o666);
    denied(1001, &[], &format!("chmod 600 {root}/mine/c"));
    denied(1001, &[], &format!("touch -d @5 {root}/mine/shared"));
    // ...but a writer who is not the owner may write (mtime flushed by the
    // kernel) and set the times to now.
    ok(
        1001,
        &[],
        &format!("echo more >> {root}/mine/shared && touch {root}/mine/shared"),
    );
    assert_eq!(std::fs::read(m.path("mine/shared")).unwrap(), b"more\n");
}
