//! Space limits on a real FUSE mount: a small pool filled until ENOSPC
//! stays usable, keeps every byte written before the full point, and
//! takes writes again once files are deleted; a quota gives EDQUOT; `df`
//! agrees with `zfs list`; `readonly=on` gives EROFS and `off` undoes it.

mod common;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use common::{check, cpath, errno_of, Mounted, MIB};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const FILE_BYTES: usize = 4 * MIB as usize;

fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    ChaCha8Rng::seed_from_u64(seed).fill(&mut v[..]);
    v
}

/// Write `data` to a new file `p` and fsync it; the errno of the first
/// failure (0 when everything, fsync and close included, succeeded).
fn write_synced(p: &Path, data: &[u8]) -> i32 {
    let mut f = match File::create(p) {
        Ok(f) => f,
        Err(e) => return e.raw_os_error().unwrap(),
    };
    for chunk in data.chunks(MIB as usize) {
        if let Err(e) = f.write_all(chunk) {
            return e.raw_os_error().unwrap();
        }
    }
    if let Err(e) = f.sync_all() {
        return e.raw_os_error().unwrap();
    }
    // SAFETY: close(2) of our own descriptor, so its error is seen;
    // into_raw_fd keeps File's drop from closing it again.
    let fd = std::os::fd::IntoRawFd::into_raw_fd(f);
    errno_of(check(unsafe { libc::close(fd) }))
}

/// Fill `dir` with FILE_BYTES files until a write fails; returns the
/// errno and the files that were fully written and synced.
fn fill(dir: &Path, max_files: u64) -> (i32, Vec<(PathBuf, u64)>) {
    let mut done = Vec::new();
    for i in 0..max_files {
        let p = dir.join(format!("fill-{i:04}"));
        let e = write_synced(&p, &content(i, FILE_BYTES));
        if e != 0 {
            return (e, done);
        }
        done.push((p, i));
    }
    panic!("{} never filled up after {max_files} files", dir.display());
}

fn check_intact(files: &[(PathBuf, u64)]) {
    for (p, seed) in files {
        let got = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(got == content(*seed, FILE_BYTES), "{} changed", p.display());
    }
}

fn statvfs(p: &Path) -> libc::statvfs {
    // SAFETY: statvfs into a zeroed struct we own.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        check(libc::statvfs(cpath(p).as_ptr(), &mut s)).unwrap();
        s
    }
}

fn syncfs(p: &Path) {
    assert_eq!(syncfs_errno(p), 0, "syncfs");
}

fn syncfs_errno(p: &Path) -> i32 {
    let f = File::open(p).unwrap();
    // SAFETY: syncfs on a descriptor we own.
    errno_of(check(unsafe {
        libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f))
    }))
}

/// After a write failed at the full point: remove the partly written
/// file. With the kernel's writeback cache the failure surfaced at
/// writeback, and Linux reports a writeback error not yet seen through
/// the file system to the next syncfs(2) — once (as on any file system
/// whose writeback can fail); the one after must succeed.
fn clear_failed_write(dir: &Path, failed: &Path, errno: i32) {
    std::fs::remove_file(failed).unwrap();
    let first = syncfs_errno(dir);
    assert!(
        first == 0 || first == errno,
        "syncfs after the full point: {first}"
    );
    syncfs(dir);
}

#[test]
fn full_pool_gives_enospc_stays_usable_and_recovers() {
    let m = Mounted::new("tank", &["mirror", "a", "b"], 256 * MIB);
    let r = m.root();
    // df agrees with zfs list while nothing moves.
    syncfs(&r);
    let s = statvfs(&r);
    let df_avail = s.f_bavail * s.f_frsize;
    let zfs_avail: u64 = m.env.get("available", "tank").parse().unwrap();
    let diff = df_avail.abs_diff(zfs_avail);
    assert!(
        diff <= MIB.max(zfs_avail / 100),
        "df avail {df_avail} vs zfs {zfs_avail}"
    );
    assert!(s.f_blocks * s.f_frsize >= df_avail && s.f_bsize > 0);

    let (e, files) = fill(&r, 200);
    assert_eq!(e, libc::ENOSPC, "errno at the full point");
    clear_failed_write(&r, &r.join(format!("fill-{:04}", files.len())), e);
    assert!(
        files.len() >= 20,
        "only {} files fit in a 256 MiB mirror",
        files.len()
    );
    // Still a working pool.
    let st = m.env.ok(&["zpool", "status", "tank"]);
    assert!(st.contains("ONLINE"), "{st}");
    m.env.ok(&["zfs", "list"]);
    check_intact(&files);
    std::fs::create_dir(r.join("after-full")).ok(); // may or may not fit
                                                    // Delete half the files: the deletes succeed on a full pool.
    for (p, _) in files.iter().step_by(2) {
        std::fs::remove_file(p).unwrap();
    }
    syncfs(&r);
    let kept: Vec<_> = files.iter().skip(1).step_by(2).cloned().collect();
    let again = r.join("again");
    assert_eq!(
        write_synced(&again, &content(9999, FILE_BYTES)),
        0,
        "writes after deletes"
    );
    check_intact(&kept);
    m.remount();
    check_intact(&kept);
    check_intact(&[(again, 9999)]);
    let st = m.env.ok(&["zpool", "status", "tank"]);
    assert!(st.contains("ONLINE") && !st.contains("DEGRADED"), "{st}");
}

#[test]
fn quota_gives_edquot_and_frees_on_delete() {
    let m = Mounted::new("tank", &["mirror", "a", "b"], 512 * MIB);
    m.env.ok(&["zfs", "create", "-o", "quota=32M", "tank/q"]);
    m.assert_mounted("tank/q");
    let q = m.mnt("tank/q");
    let s = statvfs(&q);
    let size = s.f_blocks * s.f_frsize;
    assert!(
        (24 * MIB..=32 * MIB).contains(&size),
        "df size of a 32M quota: {size}"
    );
    let (e, files) = fill(&q, 100);
    assert_eq!(e, libc::EDQUOT, "errno at the quota");
    clear_failed_write(&q, &q.join(format!("fill-{:04}", files.len())), e);
    assert!(
        (4..=8).contains(&files.len()),
        "{} files under a 32M quota",
        files.len()
    );
    check_intact(&files);
    // Outside the quota the pool still has room.
    assert_eq!(
        write_synced(&m.root().join("outside"), &content(1, FILE_BYTES)),
        0
    );
    for (p, _) in &files[..2] {
        std::fs::remove_file(p).unwrap();
    }
    syncfs(&q);
    assert_eq!(write_synced(&q.join("again"), &content(2, FILE_BYTES)), 0);
    m.env.ok(&["zfs", "set", "quota=64M", "tank/q"]);
    assert_eq!(write_synced(&q.join("more"), &content(3, FILE_BYTES)), 0);
    check_intact(&files[2..]);
}

#[test]
fn readonly_gives_erofs() {
    let m = Mounted::new("tank", &["mirror", "a", "b"], 256 * MIB);
    let r = m.root();
    std::fs::write(r.join("f"), b"before").unwrap();
    std::fs::create_dir(r.join("d")).unwrap();
    m.env.ok(&["zfs", "set", "readonly=on", "tank"]);
    m.assert_mounted("tank");
    let erofs = libc::EROFS;
    assert_eq!(std::fs::read(r.join("f")).unwrap(), b"before", "reads work");
    assert_eq!(
        errno_of(OpenOptions::new().write(true).open(r.join("f"))),
        erofs
    );
    assert_eq!(errno_of(File::create(r.join("new"))), erofs);
    assert_eq!(errno_of(std::fs::create_dir(r.join("d2"))), erofs);
    assert_eq!(errno_of(std::fs::remove_file(r.join("f"))), erofs);
    assert_eq!(errno_of(std::fs::remove_dir(r.join("d"))), erofs);
    assert_eq!(errno_of(std::fs::rename(r.join("f"), r.join("g"))), erofs);
    assert_eq!(
        errno_of(std::os::unix::fs::symlink("x", r.join("l"))),
        erofs
    );
    let perm = std::os::unix::fs::PermissionsExt::from_mode(0o600);
    assert_eq!(errno_of(std::fs::set_permissions(r.join("f"), perm)), erofs);
    let (p, n) = (cpath(&r.join("f")), c"user.x");
    // SAFETY: setxattr on NUL-terminated strings and a static value.
    let e = check(unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), b"v".as_ptr().cast(), 1, 0) });
    assert_eq!(errno_of(e), erofs);
    let s = statvfs(&r);
    assert_ne!(s.f_flag & libc::ST_RDONLY, 0, "statvfs says read-only");
    m.env.ok(&["zfs", "set", "readonly=off", "tank"]);
    std::fs::write(r.join("f"), b"after").unwrap();
    assert_eq!(std::fs::read(r.join("f")).unwrap(), b"after");
}
