//! Permissions with non-root creds, set-id clearing, timestamps
//! (UTIME_NOW/UTIME_OMIT, POSIX update rules, relatime, atime=off),
//! extended attributes (sa and dir), the delete queue, read-only mounts,
//! generation numbers.

mod common;

use common::{root, MemFs};
use tarn_zpl::{
    AtimeMode, Cred, RenameFlags, SetAttr, Settings, TimeSet, Timespec, XattrMode, XattrSetFlags,
    ZplError, R_OK, W_OK, X_OK,
};

fn chmod(mode: u32) -> SetAttr {
    SetAttr {
        mode: Some(mode),
        ..Default::default()
    }
}

#[test]
fn permissions_for_non_root() {
    let m = MemFs::new();
    let fs = m.fs();
    let r = fs.root_ino();
    let alice = Cred::user(1000, 1000);
    let bob = Cred {
        uid: 1001,
        gid: 1001,
        groups: vec![50],
    };
    assert_eq!(
        fs.create(r, b"x", 0o644, &alice, true),
        Err(ZplError::Access),
        "root dir 0755"
    );
    fs.setattr(r, &chmod(0o1777), &root()).unwrap();
    let f = fs.create(r, b"af", 0o640, &alice, true).unwrap();
    assert_eq!((f.uid, f.gid), (1000, 1000));
    assert!(fs.access(f.ino, R_OK | W_OK, &alice).is_ok());
    assert_eq!(fs.access(f.ino, R_OK, &bob), Err(ZplError::Access));
    assert_eq!(
        fs.access(f.ino, X_OK, &root()),
        Err(ZplError::Access),
        "root needs an x bit"
    );
    assert!(fs.access(f.ino, R_OK | W_OK, &root()).is_ok());
    // Group access through a supplementary group.
    fs.setattr(
        f.ino,
        &SetAttr {
            gid: Some(50),
            ..Default::default()
        },
        &root(),
    )
    .unwrap();
    assert!(fs.access(f.ino, R_OK, &bob).is_ok());
    assert_eq!(fs.access(f.ino, W_OK, &bob), Err(ZplError::Access));
    // chmod/chown rules.
    assert_eq!(fs.setattr(f.ino, &chmod(0o777), &bob), Err(ZplError::Perm));
    assert_eq!(
        fs.setattr(
            f.ino,
            &SetAttr {
                uid: Some(1001),
                ..Default::default()
            },
            &alice
        ),
        Err(ZplError::Perm)
    );
    assert_eq!(
        fs.setattr(
            f.ino,
            &SetAttr {
                gid: Some(7),
                ..Default::default()
            },
            &alice
        ),
        Err(ZplError::Perm),
        "not alice's group"
    );
    fs.setattr(
        f.ino,
        &SetAttr {
            gid: Some(1000),
            ..Default::default()
        },
        &alice,
    )
    .unwrap();
    // Truncate needs write permission unless through a handle.
    let trunc = SetAttr {
        size: Some(0),
        ..Default::default()
    };
    assert_eq!(fs.setattr(f.ino, &trunc, &bob), Err(ZplError::Access));
    fs.setattr(
        f.ino,
        &SetAttr {
            via_handle: true,
            ..trunc
        },
        &bob,
    )
    .unwrap();
    // Sticky directory: bob cannot remove or rename alice's file.
    assert_eq!(fs.unlink(r, b"af", &bob), Err(ZplError::Perm));
    assert_eq!(
        fs.rename(r, b"af", r, b"bf", RenameFlags::NONE, &bob),
        Err(ZplError::Perm)
    );
    fs.rename(r, b"af", r, b"af2", RenameFlags::NONE, &alice)
        .unwrap();
    // Search permission for lookup.
    let d = fs.mkdir(r, b"private", 0o700, &alice).unwrap().ino;
    fs.create(d, b"inner", 0o644, &alice, true).unwrap();
    assert_eq!(fs.lookup(d, b"inner", &bob), Err(ZplError::Access));
    assert!(fs.lookup(d, b"inner", &root()).is_ok());
    assert_eq!(fs.create(d, b"b", 0o644, &bob, true), Err(ZplError::Access));
    // Owner class decides even when "other" would allow.
    let o = fs.create(r, b"odd", 0o007, &alice, true).unwrap().ino;
    assert_eq!(fs.access(o, R_OK, &alice), Err(ZplError::Access));
    assert!(fs.access(o, R_OK, &bob).is_ok());
}

#[test]
fn setuid_and_setgid_clearing() {
    let m = MemFs::new();
    let fs = m.fs();
    let r = fs.root_ino();
    fs.setattr(r, &chmod(0o777), &root()).unwrap();
    let alice = Cred::user(1000, 1000);
    let bob = Cred::user(1001, 1001);
    let f = fs.create(r, b"suid", 0o6777, &alice, true).unwrap().ino;
    assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o6777);
    fs.write(f, 0, b"root keeps", &root()).unwrap();
    assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o6777);
    fs.write(f, 0, b"bob clears", &bob).unwrap();
    assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o0777);
    // chmod by someone outside the group drops setgid.
    fs.setattr(f, &chmod(0o2755), &alice).unwrap();
    assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o2755);
    fs.setattr(
        f,
        &SetAttr {
            gid: Some(5),
            ..Default::default()
        },
        &root(),
    )
    .unwrap();
    assert_eq!(
        fs.getattr(f).unwrap().mode & 0o7777,
        0o0755,
        "chown drops set-ids"
    );
    fs.setattr(f, &chmod(0o2755), &alice).unwrap();
    assert_eq!(
        fs.getattr(f).unwrap().mode & 0o7777,
        0o0755,
        "alice not in group 5"
    );
    // A setgid directory hands its group (and the bit) down.
    let d = fs.mkdir(r, b"sg", 0o2777, &root()).unwrap().ino;
    fs.setattr(
        d,
        &SetAttr {
            gid: Some(77),
            ..Default::default()
        },
        &root(),
    )
    .unwrap();
    let c = fs.create(d, b"c", 0o644, &alice, true).unwrap();
    assert_eq!(c.gid, 77);
    let sd = fs.mkdir(d, b"sd", 0o755, &alice).unwrap();
    assert_eq!((sd.gid, sd.mode & 0o2000), (77, 0o2000));
}

#[test]
fn timestamps_follow_posix() {
    let m = MemFs::new();
    let fs = m.fs();
    let clock = &m.clock;
    let r = fs.root_ino();
    let t0 = clock.get();
    let f = fs.create(r, b"f", 0o644, &root(), true).unwrap();
    assert_eq!((f.atime, f.mtime, f.ctime, f.crtime), (t0, t0, t0, t0));
    let t1 = clock.advance(1, 500);
    fs.write(f.ino, 0, b"x", &root()).unwrap();
    let a = fs.getattr(f.ino).unwrap();
    assert_eq!((a.mtime, a.ctime, a.atime), (t1, t1, t0));
    let t2 = clock.advance(1, 1);
    fs.setattr(f.ino, &chmod(0o600), &root()).unwrap();
    let a = fs.getattr(f.ino).unwrap();
    assert_eq!((a.mtime, a.ctime), (t1, t2), "chmod: ctime only");
    // Directory entry changes stamp the directory.
    let t3 = clock.advance(1, 0);
    fs.link(f.ino, r, b"g", &root()).unwrap();
    let (fa, ra) = (fs.getattr(f.ino).unwrap(), fs.getattr(r).unwrap());
    assert_eq!((fa.ctime, fa.mtime, ra.mtime, ra.ctime), (t3, t1, t3, t3));
    let t4 = clock.advance(1, 0);
    fs.rename(r, b"g", r, b"h", RenameFlags::NONE, &root())
        .unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().ctime, t4, "rename: ctime");
    assert_eq!(fs.getattr(r).unwrap().mtime, t4);
    // utimensat: explicit, UTIME_NOW, UTIME_OMIT.
    let t5 = clock.advance(1, 0);
    let when = Timespec::new(12345, 678_901_234);
    fs.setattr(
        f.ino,
        &SetAttr {
            atime: TimeSet::Time(when),
            mtime: TimeSet::Omit,
            ..Default::default()
        },
        &root(),
    )
    .unwrap();
    let a = fs.getattr(f.ino).unwrap();
    assert_eq!((a.atime, a.mtime, a.ctime), (when, t1, t5));
    let t6 = clock.advance(0, 7);
    fs.setattr(
        f.ino,
        &SetAttr {
            mtime: TimeSet::Now,
            ..Default::default()
        },
        &root(),
    )
    .unwrap();
    let a = fs.getattr(f.ino).unwrap();
    assert_eq!((a.atime, a.mtime, a.ctime), (when, t6, t6));
    let bad = Timespec::new(1, 1_000_000_000);
    assert_eq!(
        fs.setattr(
            f.ino,
            &SetAttr {
                mtime: TimeSet::Time(bad),
                ..Default::default()
            },
            &root()
        )
        .unwrap_err()
        .errno(),
        libc::EINVAL
    );
    // Non-owner: UTIME_NOW needs write access, explicit times need owner.
    let bob = Cred::user(1001, 1001);
    fs.setattr(f.ino, &chmod(0o666), &root()).unwrap();
    let now_both = SetAttr {
        atime: TimeSet::Now,
        mtime: TimeSet::Now,
        ..Default::default()
    };
    fs.setattr(f.ino, &now_both, &bob).unwrap();
    let set = SetAttr {
        mtime: TimeSet::Time(when),
        ..Default::default()
    };
    assert_eq!(fs.setattr(f.ino, &set, &bob), Err(ZplError::Perm));
    fs.setattr(f.ino, &chmod(0o644), &root()).unwrap();
    assert_eq!(fs.setattr(f.ino, &now_both, &bob), Err(ZplError::Access));
    // Truncate stamps mtime and ctime; unlink stamps the remaining link's ctime.
    let t7 = clock.advance(1, 0);
    fs.setattr(
        f.ino,
        &SetAttr {
            size: Some(0),
            ..Default::default()
        },
        &root(),
    )
    .unwrap();
    let a = fs.getattr(f.ino).unwrap();
    assert_eq!((a.mtime, a.ctime), (t7, t7));
    let t8 = clock.advance(1, 0);
    fs.unlink(r, b"h", &root()).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().ctime, t8);
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 1);
}

#[test]
fn atime_relatime_strict_and_off() {
    let m = MemFs::new();
    let fs = m.fs();
    let clock = &m.clock;
    let r = fs.root_ino();
    let f = fs.create(r, b"f", 0o644, &root(), true).unwrap().ino;
    fs.write(f, 0, b"abc", &root()).unwrap();
    let mut b = [0u8; 3];
    let t1 = clock.advance(10, 0);
    fs.read(f, 0, &mut b).unwrap();
    assert_eq!(fs.getattr(f).unwrap().atime, t1, "atime <= mtime: updated");
    clock.advance(10, 0);
    fs.read(f, 0, &mut b).unwrap();
    assert_eq!(fs.getattr(f).unwrap().atime, t1, "relatime: not again");
    let t3 = clock.advance(24 * 3600, 0);
    fs.read(f, 0, &mut b).unwrap();
    assert_eq!(fs.getattr(f).unwrap().atime, t3, "a day later: updated");
    let mut s = fs.settings();
    s.atime = AtimeMode::Strict;
    fs.set_settings(s).unwrap();
    let t4 = clock.advance(1, 0);
    fs.read(f, 0, &mut b).unwrap();
    assert_eq!(fs.getattr(f).unwrap().atime, t4);
    s.atime = AtimeMode::Off;
    fs.set_settings(s).unwrap();
    fs.write(f, 0, b"x", &root()).unwrap();
    clock.advance(1, 0);
    fs.read(f, 0, &mut b).unwrap();
    assert_eq!(fs.getattr(f).unwrap().atime, t4, "atime=off");
}

fn xattr_roundtrip(mode: XattrMode) {
    let mut m = MemFs::with_settings(Settings {
        xattr: mode,
        ..Settings::default()
    });
    let r = m.fs().root_ino();
    let fs = m.fs();
    let f = fs.create(r, b"f", 0o644, &root(), true).unwrap().ino;
    let big = vec![0xABu8; 10_000];
    fs.setxattr(f, b"user.small", b"v1", XattrSetFlags::Any, &root())
        .unwrap();
    fs.setxattr(f, b"user.big", &big, XattrSetFlags::Any, &root())
        .unwrap();
    fs.setxattr(
        f,
        b"security.selinux",
        b"system_u:object_r:x",
        XattrSetFlags::Create,
        &root(),
    )
    .unwrap();
    fs.setxattr(
        f,
        b"system.posix_acl_access",
        &[2, 0, 0, 0, 1, 0, 6, 0],
        XattrSetFlags::Any,
        &root(),
    )
    .unwrap();
    fs.setxattr(f, b"trusted.t", b"tv", XattrSetFlags::Any, &root())
        .unwrap();
    assert_eq!(
        fs.setxattr(f, b"user.small", b"x", XattrSetFlags::Create, &root()),
        Err(ZplError::Exists)
    );
    assert_eq!(
        fs.setxattr(f, b"user.none", b"x", XattrSetFlags::Replace, &root())
            .unwrap_err()
            .errno(),
        libc::ENODATA
    );
    fs.setxattr(f, b"user.small", b"v2", XattrSetFlags::Replace, &root())
        .unwrap();
    assert_eq!(fs.getxattr(f, b"user.small", &root()).unwrap(), b"v2");
    assert_eq!(fs.getxattr(f, b"user.big", &root()).unwrap(), big);
    assert_eq!(
        fs.getxattr(f, b"user.none", &root()).unwrap_err().errno(),
        libc::ENODATA
    );
    assert_eq!(
        fs.getxattr(f, b"bogus.x", &root()).unwrap_err().errno(),
        libc::EOPNOTSUPP
    );
    assert_eq!(
        fs.setxattr(
            f,
            b"user.huge",
            &vec![0; 65537],
            XattrSetFlags::Any,
            &root()
        )
        .unwrap_err()
        .errno(),
        libc::E2BIG
    );
    let mut names = fs.listxattr(f, &root()).unwrap();
    names.sort();
    assert_eq!(names.len(), 5);
    let bob = Cred::user(1001, 1001);
    assert!(!fs
        .listxattr(f, &bob)
        .unwrap()
        .contains(&b"trusted.t".to_vec()));
    assert_eq!(
        fs.getxattr(f, b"trusted.t", &bob).unwrap_err().errno(),
        libc::ENODATA
    );
    assert_eq!(
        fs.setxattr(f, b"user.b", b"", XattrSetFlags::Any, &bob),
        Err(ZplError::Access)
    );
    assert_eq!(
        fs.getxattr(f, b"user.small", &bob).unwrap(),
        b"v2",
        "0644: others read"
    );
    // Growing an inline attribute past the inline area moves it out.
    let mid = vec![7u8; 150];
    fs.setxattr(f, b"user.small", &mid, XattrSetFlags::Any, &root())
        .unwrap();
    assert_eq!(fs.getxattr(f, b"user.small", &root()).unwrap(), mid);
    m.remount();
    let fs = m.fs();
    assert_eq!(fs.getxattr(f, b"user.small", &root()).unwrap(), mid);
    assert_eq!(fs.getxattr(f, b"user.big", &root()).unwrap(), big);
    assert_eq!(
        fs.getxattr(f, b"security.selinux", &root()).unwrap(),
        b"system_u:object_r:x"
    );
    fs.removexattr(f, b"user.big", &root()).unwrap();
    assert_eq!(
        fs.removexattr(f, b"user.big", &root()).unwrap_err().errno(),
        libc::ENODATA
    );
    assert_eq!(fs.listxattr(f, &root()).unwrap().len(), 4);
    // Attributes go with the file.
    let before = m.store.live_blocks();
    m.fs().unlink(r, b"f", &root()).unwrap();
    m.remount();
    assert!(m.store.live_blocks() < before);
}

#[test]
fn xattrs_sa() {
    xattr_roundtrip(XattrMode::Sa);
}

#[test]
fn xattrs_dir() {
    xattr_roundtrip(XattrMode::Dir);
}

#[test]
fn small_xattrs_stay_inline_with_sa() {
    let m = MemFs::new();
    let fs = m.fs();
    let f = fs
        .create(fs.root_ino(), b"f", 0o644, &root(), true)
        .unwrap()
        .ino;
    let before = fs.objset().object_info(f).unwrap().bonus_len;
    fs.setxattr(f, b"user.a", b"12345", XattrSetFlags::Any, &root())
        .unwrap();
    assert_eq!(
        fs.objset().object_info(f).unwrap().bonus_len,
        before + 3 + 6 + 5
    );
    let d = fs.mkdir(fs.root_ino(), b"d", 0o755, &root()).unwrap().ino;
    fs.setxattr(d, b"user.dir", b"ok", XattrSetFlags::Any, &root())
        .unwrap();
    let s = fs.symlink(fs.root_ino(), b"s", b"t", &root()).unwrap().ino;
    assert_eq!(
        fs.setxattr(s, b"user.x", b"1", XattrSetFlags::Any, &root()),
        Err(ZplError::Perm)
    );
}

#[test]
fn delete_queue_frees_on_release_and_on_mount() {
    let mut m = MemFs::new();
    let r = m.fs().root_ino();
    let fs = m.fs();
    let f = fs.create(r, b"open", 0o644, &root(), true).unwrap().ino;
    fs.write(f, 0, &[9u8; 100_000], &root()).unwrap();
    fs.open(f).unwrap();
    fs.open(f).unwrap();
    fs.unlink(r, b"open", &root()).unwrap();
    assert_eq!(fs.delete_queue().unwrap(), vec![f]);
    let a = fs.getattr(f).unwrap();
    assert_eq!((a.nlink, a.size), (0, 100_000), "still readable");
    let mut b = [0u8; 10];
    fs.read(f, 500, &mut b).unwrap();
    assert_eq!(b, [9u8; 10]);
    fs.write(f, 0, b"still writable", &root()).unwrap();
    fs.release(f).unwrap();
    assert!(fs.getattr(f).is_ok());
    fs.release(f).unwrap();
    assert_eq!(fs.getattr(f), Err(ZplError::NotFound));
    assert!(fs.delete_queue().unwrap().is_empty());
    // An open unlinked directory, then a crash: freed at the next mount.
    let g = fs.create(r, b"g", 0o644, &root(), true).unwrap().ino;
    fs.write(g, 0, &[1u8; 50_000], &root()).unwrap();
    fs.open(g).unwrap();
    fs.unlink(r, b"g", &root()).unwrap();
    let d = fs.mkdir(r, b"d", 0o755, &root()).unwrap().ino;
    fs.open(d).unwrap();
    fs.rmdir(r, b"d", &root()).unwrap();
    assert_eq!(
        fs.create(d, b"x", 0o644, &root(), true),
        Err(ZplError::NotFound)
    );
    fs.fsync(g).unwrap();
    m.crash_and_remount();
    let fs = m.fs();
    assert!(fs.delete_queue().unwrap().is_empty());
    assert_eq!(fs.getattr(g), Err(ZplError::NotFound));
    assert_eq!(fs.getattr(d), Err(ZplError::NotFound));
    // Rename over an open file queues it too.
    let a = fs.create(r, b"a", 0o644, &root(), true).unwrap().ino;
    let bb = fs.create(r, b"b", 0o644, &root(), true).unwrap().ino;
    fs.open(bb).unwrap();
    fs.rename(r, b"a", r, b"b", RenameFlags::NONE, &root())
        .unwrap();
    assert_eq!(fs.delete_queue().unwrap(), vec![bb]);
    fs.release(bb).unwrap();
    assert!(fs.delete_queue().unwrap().is_empty());
    assert!(fs.getattr(a).is_ok());
}

#[test]
fn readonly_and_generations() {
    let mut m = MemFs::new();
    let r = m.fs().root_ino();
    let a = m.fs().create(r, b"a", 0o644, &root(), true).unwrap();
    m.fs().unlink(r, b"a", &root()).unwrap();
    let b = m.fs().create(r, b"b", 0o644, &root(), true).unwrap();
    // Same txg: the object number differs, so the pair is new.
    assert!(b.gen >= a.gen && (b.ino, b.gen) != (a.ino, a.gen));
    m.remount();
    let c = m.fs().create(r, b"c", 0o644, &root(), true).unwrap();
    assert!(c.gen > b.gen, "generations grow with the txg across mounts");
    m.remount_with(Settings {
        readonly: true,
        ..Settings::default()
    });
    let fs = m.fs();
    let ro = |e: ZplError| assert_eq!(e.errno(), libc::EROFS);
    ro(fs.create(r, b"d", 0o644, &root(), true).unwrap_err());
    ro(fs.write(c.ino, 0, b"x", &root()).unwrap_err());
    ro(fs.unlink(r, b"c", &root()).unwrap_err());
    ro(fs.setattr(c.ino, &chmod(0o600), &root()).unwrap_err());
    ro(fs.access(c.ino, W_OK, &root()).unwrap_err());
    ro(fs
        .setxattr(c.ino, b"user.a", b"", XattrSetFlags::Any, &root())
        .unwrap_err());
    let before = fs.getattr(c.ino).unwrap().atime;
    m.clock.advance(100_000, 0);
    let mut buf = [0u8; 1];
    assert_eq!(fs.read(c.ino, 0, &mut buf).unwrap(), 0);
    assert_eq!(fs.getattr(c.ino).unwrap().atime, before);
    fs.fsync(c.ino).unwrap();
}
