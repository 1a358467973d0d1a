//! Timestamps on a real FUSE mount: utimensat with nanoseconds,
//! UTIME_NOW and UTIME_OMIT (also on a symlink itself), mtime and ctime
//! changed by exactly the operations POSIX names, atime with relatime
//! semantics by default and untouched with `atime=off`.
//!
//! To tell "changed" from "unchanged" without sleeping a fixed time, a
//! step first sets old times with utimensat (which sets ctime to now),
//! then waits until the coarse clock — the one the kernel stamps with —
//! has passed that ctime, so any later stamp is strictly greater.

mod common;

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use common::{check, cpath, Mounted, MIB};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Ts(i64, i64);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Times {
    a: Ts,
    m: Ts,
    c: Ts,
}

fn times(p: &Path) -> Times {
    let md = std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    Times {
        a: Ts(md.atime(), md.atime_nsec()),
        m: Ts(md.mtime(), md.mtime_nsec()),
        c: Ts(md.ctime(), md.ctime_nsec()),
    }
}

fn clock(id: libc::clockid_t) -> Ts {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a local.
    unsafe { libc::clock_gettime(id, &mut t) };
    Ts(t.tv_sec, t.tv_nsec)
}

/// Wait until both clocks that stamp files have passed `t`.
fn wait_past(t: Ts) {
    for _ in 0..1000 {
        if clock(libc::CLOCK_REALTIME_COARSE) > t && clock(libc::CLOCK_REALTIME) > t {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the clock did not pass {t:?}");
}

fn ts(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    }
}

fn utimens(p: &Path, a: libc::timespec, m: libc::timespec, flags: i32) -> std::io::Result<()> {
    let t = [a, m];
    // SAFETY: utimensat on a NUL-terminated path and a local array.
    check(unsafe { libc::utimensat(libc::AT_FDCWD, cpath(p).as_ptr(), t.as_ptr(), flags) })
        .map(|_| ())
}

const OLD_A: Ts = Ts(1_000_000_000, 111);
const OLD_M: Ts = Ts(1_100_000_000, 222);

/// Give `paths` old atime/mtime, then wait until the clock is past the
/// ctime that set them.
fn age(paths: &[&Path]) {
    let mut newest = Ts(0, 0);
    for p in paths {
        utimens(
            p,
            ts(OLD_A.0, OLD_A.1),
            ts(OLD_M.0, OLD_M.1),
            libc::AT_SYMLINK_NOFOLLOW,
        )
        .unwrap();
        newest = newest.max(times(p).c);
    }
    wait_past(newest);
}

fn pool() -> Mounted {
    Mounted::new("tank", &["mirror", "a", "b"], 256 * MIB)
}

#[test]
fn utimensat_nanoseconds_now_and_omit() {
    let m = pool();
    let f = m.root().join("f");
    std::fs::write(&f, b"x").unwrap();
    let c0 = times(&f).c;
    wait_past(c0);
    utimens(
        &f,
        ts(1_500_000_000, 123_456_789),
        ts(1_600_000_000, 987_654_321),
        0,
    )
    .unwrap();
    let t = times(&f);
    assert_eq!(
        (t.a, t.m),
        (
            Ts(1_500_000_000, 123_456_789),
            Ts(1_600_000_000, 987_654_321)
        )
    );
    assert!(t.c > c0, "utimensat sets ctime");
    // OMIT keeps one, sets the other.
    utimens(&f, ts(0, libc::UTIME_OMIT), ts(1_700_000_000, 5), 0).unwrap();
    let t2 = times(&f);
    assert_eq!((t2.a, t2.m), (t.a, Ts(1_700_000_000, 5)));
    // NOW: between the clock before and after.
    let before = clock(libc::CLOCK_REALTIME_COARSE);
    utimens(&f, ts(0, libc::UTIME_NOW), ts(0, libc::UTIME_OMIT), 0).unwrap();
    let after = clock(libc::CLOCK_REALTIME);
    let t3 = times(&f);
    assert!(
        t3.a >= before && t3.a <= after,
        "{:?} not in {before:?}..{after:?}",
        t3.a
    );
    assert_eq!(t3.m, t2.m);
    // A null times pointer means both NOW.
    // SAFETY: utimensat with a null times array.
    check(unsafe { libc::utimensat(libc::AT_FDCWD, cpath(&f).as_ptr(), std::ptr::null(), 0) })
        .unwrap();
    let t4 = times(&f);
    assert!(t4.m >= before && t4.m <= clock(libc::CLOCK_REALTIME));
    // futimens through a descriptor.
    let fd = File::open(&f).unwrap();
    let arr = [ts(42, 7), ts(43, 8)];
    // SAFETY: futimens on a descriptor we own and a local array.
    check(unsafe { libc::futimens(fd.as_raw_fd(), arr.as_ptr()) }).unwrap();
    drop(fd);
    let t5 = times(&f);
    assert_eq!((t5.a, t5.m), (Ts(42, 7), Ts(43, 8)));
    // On a symlink with AT_SYMLINK_NOFOLLOW: the link changes, not the file.
    let l = m.root().join("l");
    std::os::unix::fs::symlink("f", &l).unwrap();
    utimens(&l, ts(10, 1), ts(20, 2), libc::AT_SYMLINK_NOFOLLOW).unwrap();
    assert_eq!((times(&l).a, times(&l).m), (Ts(10, 1), Ts(20, 2)));
    assert_eq!(times(&f).m, Ts(43, 8));
    // Out-of-range nanoseconds.
    let e = common::errno_of(utimens(&f, ts(1, 1_000_000_000), ts(1, 0), 0));
    assert_eq!(e, libc::EINVAL);
    m.remount();
    let t6 = times(&f);
    assert_eq!((t6.a, t6.m), (Ts(42, 7), Ts(43, 8)), "exact after remount");
    assert_eq!(times(&l).m, Ts(20, 2));
}

/// What an operation must change: (mtime, ctime) of the file and of its
/// directory.
#[derive(Debug, PartialEq, Eq)]
struct Changed {
    file_m: bool,
    file_c: bool,
    dir_m: bool,
    dir_c: bool,
}

fn changed(before: (Times, Times), after: (Times, Times)) -> Changed {
    Changed {
        file_m: after.0.m != before.0.m,
        file_c: after.0.c != before.0.c,
        dir_m: after.1.m != before.1.m,
        dir_c: after.1.c != before.1.c,
    }
}

const fn ch(file_m: bool, file_c: bool, dir_m: bool, dir_c: bool) -> Changed {
    Changed {
        file_m,
        file_c,
        dir_m,
        dir_c,
    }
}

#[test]
fn mtime_and_ctime_change_exactly_when_posix_says() {
    let m = pool();
    let d = m.root().join("d");
    let d2 = m.root().join("d2");
    std::fs::create_dir(&d).unwrap();
    std::fs::create_dir(&d2).unwrap();
    let f = d.join("f");
    std::fs::write(&f, b"hello").unwrap();

    // `file` is the file's path before the operation, `file_after` after.
    let step =
        |name: &str, file: &Path, file_after: &Path, dir: &Path, want: Changed, op: &dyn Fn()| {
            age(&[file, dir]);
            let before = (times(file), times(dir));
            op();
            let after = (times(file_after), times(dir));
            assert_eq!(
                changed(before, after),
                want,
                "{name}: {before:?} -> {after:?}"
            );
        };
    step("write", &f, &f, &d, ch(true, true, false, false), &|| {
        OpenOptions::new()
            .write(true)
            .open(&f)
            .unwrap()
            .write_all_at(b"J", 0)
            .unwrap();
    });
    step("read", &f, &f, &d, ch(false, false, false, false), &|| {
        let mut s = String::new();
        File::open(&f).unwrap().read_to_string(&mut s).unwrap();
        assert_eq!(s, "Jello");
    });
    step(
        "stat and open",
        &f,
        &f,
        &d,
        ch(false, false, false, false),
        &|| {
            std::fs::metadata(&f).unwrap();
            drop(OpenOptions::new().write(true).open(&f).unwrap());
        },
    );
    step(
        "truncate",
        &f,
        &f,
        &d,
        ch(true, true, false, false),
        &|| {
            OpenOptions::new()
                .write(true)
                .open(&f)
                .unwrap()
                .set_len(2)
                .unwrap();
        },
    );
    step("chmod", &f, &f, &d, ch(false, true, false, false), &|| {
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    });
    step("chown", &f, &f, &d, ch(false, true, false, false), &|| {
        std::os::unix::fs::chown(&f, Some(1234), Some(1234)).unwrap();
    });
    step(
        "setxattr",
        &f,
        &f,
        &d,
        ch(false, true, false, false),
        &|| {
            let (p, n) = (cpath(&f), c"user.t");
            // SAFETY: setxattr on NUL-terminated strings and a static value.
            check(unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), b"v".as_ptr().cast(), 1, 0) })
                .unwrap();
        },
    );
    let g = d.join("g");
    step("link", &f, &f, &d, ch(false, true, true, true), &|| {
        std::fs::hard_link(&f, &g).unwrap();
    });
    step(
        "unlink one link",
        &f,
        &f,
        &d,
        ch(false, true, true, true),
        &|| {
            std::fs::remove_file(&g).unwrap();
        },
    );
    let f2 = d.join("f2");
    step(
        "rename within a directory",
        &f,
        &f2,
        &d,
        ch(false, true, true, true),
        &|| {
            std::fs::rename(&f, &f2).unwrap();
        },
    );
    // Across directories both parents change; check the source one here
    // and the target one just after.
    age(&[&d2]);
    let d2_before = times(&d2);
    let f3 = d2.join("f3");
    step(
        "rename across directories",
        &f2,
        &f3,
        &d,
        ch(false, true, true, true),
        &|| {
            std::fs::rename(&f2, &f3).unwrap();
        },
    );
    let d2_after = times(&d2);
    assert!(
        d2_after.m > d2_before.m && d2_after.c > d2_before.c,
        "target directory"
    );
    step(
        "create in a directory",
        &d2,
        &d2,
        &d,
        ch(false, false, true, true),
        &|| {
            std::fs::write(d.join("new"), b"").unwrap();
        },
    );
    step("mkdir", &d2, &d2, &d, ch(false, false, true, true), &|| {
        std::fs::create_dir(d.join("sub")).unwrap();
    });
    step("rmdir", &d2, &d2, &d, ch(false, false, true, true), &|| {
        std::fs::remove_dir(d.join("sub")).unwrap();
    });
    step(
        "symlink",
        &d2,
        &d2,
        &d,
        ch(false, false, true, true),
        &|| {
            std::os::unix::fs::symlink("x", d.join("sl")).unwrap();
        },
    );
    step(
        "readdir",
        &d2,
        &d2,
        &d,
        ch(false, false, false, false),
        &|| {
            assert_eq!(std::fs::read_dir(&d).unwrap().count(), 2);
        },
    );
    // A file's own times are untouched by changes to its directory.
    step(
        "sibling created",
        &f3,
        &f3,
        &d2,
        ch(false, false, true, true),
        &|| {
            std::fs::write(d2.join("sibling"), b"").unwrap();
        },
    );
    // Renaming a directory to another parent updates its ctime too.
    let sub = d.join("moving");
    std::fs::create_dir(&sub).unwrap();
    let moved = d2.join("moved");
    step(
        "directory moved",
        &sub,
        &moved,
        &d,
        ch(false, true, true, true),
        &|| {
            std::fs::rename(&sub, &moved).unwrap();
        },
    );
}

/// Reads through the daemon: each read follows an export/import, so the
/// kernel's page cache is cold. (Reads served from the page cache never
/// reach tarn, so they do not touch atime: a known FUSE limitation.)
#[test]
fn atime_relatime_by_default_and_off() {
    let m = pool();
    let f = m.root().join("f");
    std::fs::write(&f, vec![7u8; 10_000]).unwrap();
    let read = || {
        let mut v = Vec::new();
        File::open(&f).unwrap().read_to_end(&mut v).unwrap();
        assert_eq!(v.len(), 10_000);
    };
    // atime older than mtime: a read refreshes it.
    age(&[&f]);
    m.remount();
    let before = times(&f);
    assert!(before.a < before.m);
    read();
    let after = times(&f);
    assert!(
        after.a > before.c,
        "relatime: a stale atime is refreshed: {after:?}"
    );
    assert_eq!(
        (after.m, after.c),
        (before.m, before.c),
        "reads change only atime"
    );
    // atime now newer than mtime and ctime, and fresh: left alone.
    wait_past(after.a);
    m.remount();
    read();
    assert_eq!(times(&f).a, after.a, "relatime: a fresh atime is kept");

    m.env.ok(&["zfs", "set", "atime=off", "tank"]);
    age(&[&f]);
    m.remount();
    read();
    assert_eq!(times(&f).a, OLD_A, "atime=off never writes atime");
    m.env.ok(&["zfs", "set", "atime=on", "tank"]);
    m.remount();
    read();
    assert!(
        times(&f).a > OLD_M,
        "atime=on again: the stale atime is refreshed"
    );
}
