//! `xattr=off` (ZFS's `noxattr`): `user.*` get/set/remove are EOPNOTSUPP
//! and `user.*` names are left out of `listxattr`, other namespaces keep
//! working, nothing stored is lost, and everything is back when the
//! setting returns to sa/dir — at once on a live mount and after a remount.

mod common;

use common::{root, MemFs};
use tarn_zpl::{Cred, SetAttr, Settings, XattrMode, XattrSetFlags, ZplError};

fn with_xattr(m: &MemFs, xattr: XattrMode) {
    let s = m.fs().settings();
    m.fs().set_settings(Settings { xattr, ..s }).unwrap();
}

fn sorted(mut v: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    v.sort();
    v
}

#[test]
fn xattr_off_refuses_user_namespace_and_keeps_what_is_stored() {
    let mut m = MemFs::new();
    let fs = m.fs();
    let r = fs.root_ino();
    let f = fs.create(r, b"f", 0o644, &root(), true).unwrap().ino;
    let big = vec![0x5Au8; 4000]; // in the xattr dir, not inline
    fs.setxattr(f, b"user.a", b"alpha", XattrSetFlags::Any, &root())
        .unwrap();
    fs.setxattr(f, b"user.big", &big, XattrSetFlags::Any, &root())
        .unwrap();
    fs.setxattr(f, b"security.s", b"label", XattrSetFlags::Any, &root())
        .unwrap();
    let all = sorted(vec![
        b"security.s".to_vec(),
        b"user.a".to_vec(),
        b"user.big".to_vec(),
    ]);
    assert_eq!(sorted(fs.listxattr(f, &root()).unwrap()), all);

    with_xattr(&m, XattrMode::Off);
    let fs = m.fs();
    let nosup = Err(ZplError::NotSupported);
    assert_eq!(fs.getxattr(f, b"user.a", &root()), nosup);
    assert_eq!(fs.getxattr(f, b"user.none", &root()), nosup);
    assert_eq!(
        fs.setxattr(f, b"user.a", b"x", XattrSetFlags::Any, &root()),
        Err(ZplError::NotSupported)
    );
    assert_eq!(
        fs.setxattr(f, b"user.new", b"x", XattrSetFlags::Create, &root()),
        Err(ZplError::NotSupported)
    );
    assert_eq!(
        fs.removexattr(f, b"user.a", &root()),
        Err(ZplError::NotSupported)
    );
    assert_eq!(
        fs.getxattr(f, b"user.a", &root()).unwrap_err().errno(),
        libc::EOPNOTSUPP
    );
    // The VFS's permission checks come first, as on Linux.
    let bob = Cred::user(1001, 1001);
    assert_eq!(
        fs.setxattr(f, b"user.a", b"x", XattrSetFlags::Any, &bob),
        Err(ZplError::Access)
    );
    // user.* names are hidden; the other namespaces still work.
    assert_eq!(
        fs.listxattr(f, &root()).unwrap(),
        vec![b"security.s".to_vec()]
    );
    assert_eq!(fs.getxattr(f, b"security.s", &root()).unwrap(), b"label");
    fs.setxattr(f, b"trusted.t", b"tv", XattrSetFlags::Any, &root())
        .unwrap();
    assert_eq!(fs.getxattr(f, b"trusted.t", &root()).unwrap(), b"tv");
    // Dropping file capabilities on a write or truncate still works.
    let caps = |fs: &tarn_zpl::Zpl| {
        fs.setxattr(
            f,
            b"security.capability",
            &[1, 0, 0, 2],
            XattrSetFlags::Any,
            &root(),
        )
        .unwrap()
    };
    caps(fs);
    fs.write(f, 0, b"data", &root()).unwrap();
    assert_eq!(
        fs.getxattr(f, b"security.capability", &root()),
        Err(ZplError::NoData),
        "write"
    );
    caps(fs);
    let truncate = SetAttr {
        size: Some(0),
        ..Default::default()
    };
    fs.setattr(f, &truncate, &root()).unwrap();
    assert_eq!(
        fs.getxattr(f, b"security.capability", &root()),
        Err(ZplError::NoData),
        "truncate"
    );

    // Survives a remount with xattr=off, then comes back on.
    let s = m.fs().settings();
    m.remount_with(s);
    assert_eq!(
        m.fs().getxattr(f, b"user.big", &root()),
        Err(ZplError::NotSupported)
    );
    m.remount_with(Settings {
        xattr: XattrMode::Sa,
        ..s
    });
    let fs = m.fs();
    let mut want = all.clone();
    want.push(b"trusted.t".to_vec());
    assert_eq!(sorted(fs.listxattr(f, &root()).unwrap()), sorted(want));
    assert_eq!(fs.getxattr(f, b"user.a", &root()).unwrap(), b"alpha");
    assert_eq!(fs.getxattr(f, b"user.big", &root()).unwrap(), big);

    // Live toggles with dir as well.
    with_xattr(&m, XattrMode::Off);
    assert_eq!(
        m.fs().removexattr(f, b"user.big", &root()),
        Err(ZplError::NotSupported)
    );
    with_xattr(&m, XattrMode::Dir);
    let fs = m.fs();
    assert_eq!(fs.getxattr(f, b"user.big", &root()).unwrap(), big);
    fs.removexattr(f, b"user.big", &root()).unwrap();
    fs.setxattr(f, b"user.a", b"again", XattrSetFlags::Replace, &root())
        .unwrap();
    assert_eq!(fs.getxattr(f, b"user.a", &root()).unwrap(), b"again");
}
