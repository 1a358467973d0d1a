//! Extended attributes on a real FUSE mount: user., trusted. and
//! security. set/get/list/remove, ENODATA, XATTR_CREATE/XATTR_REPLACE,
//! ERANGE for short buffers, values up to 64 KiB and many attributes
//! (more than fit beside the inode with `xattr=sa`), attributes on
//! directories, and `zfs set xattr=dir` — all surviving a remount.

mod common;

use std::collections::BTreeSet;
use std::ffi::CString;
use std::path::Path;

use common::{check, cpath, errno_of, Mounted, MIB};

fn set(p: &Path, name: &str, value: &[u8], flags: i32) -> std::io::Result<()> {
    let n = CString::new(name).unwrap();
    // SAFETY: setxattr on NUL-terminated strings and a live slice.
    check(unsafe {
        libc::setxattr(
            cpath(p).as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
    .map(|_| ())
}

/// getxattr into a buffer of `cap` bytes.
fn get_with(p: &Path, name: &str, cap: usize) -> std::io::Result<Vec<u8>> {
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; cap];
    // SAFETY: getxattr into a buffer of `cap` bytes we own.
    let len = check(unsafe {
        libc::getxattr(cpath(p).as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), cap)
    })?;
    buf.truncate(len as usize);
    Ok(buf)
}

/// getxattr the usual way: ask the size, then fetch.
fn get(p: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    let n = CString::new(name).unwrap();
    // SAFETY: a size query with a null buffer.
    let len =
        check(unsafe { libc::getxattr(cpath(p).as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) })?;
    get_with(p, name, len as usize)
}

fn list_with(p: &Path, cap: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; cap];
    // SAFETY: listxattr into a buffer of `cap` bytes we own.
    let len = check(unsafe { libc::listxattr(cpath(p).as_ptr(), buf.as_mut_ptr().cast(), cap) })?;
    buf.truncate(len as usize);
    Ok(buf)
}

fn list(p: &Path) -> BTreeSet<String> {
    // SAFETY: a size query with a null buffer.
    let len =
        check(unsafe { libc::listxattr(cpath(p).as_ptr(), std::ptr::null_mut(), 0) }).unwrap();
    let raw = list_with(p, len as usize).unwrap();
    let names: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8(s.to_vec()).unwrap())
        .collect();
    assert_eq!(
        raw.last(),
        if raw.is_empty() { None } else { Some(&0) },
        "NUL-terminated"
    );
    let set: BTreeSet<String> = names.iter().cloned().collect();
    assert_eq!(set.len(), names.len(), "duplicates in {names:?}");
    set
}

fn remove(p: &Path, name: &str) -> std::io::Result<()> {
    let n = CString::new(name).unwrap();
    // SAFETY: removexattr on NUL-terminated strings.
    check(unsafe { libc::removexattr(cpath(p).as_ptr(), n.as_ptr()) }).map(|_| ())
}

fn names(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn pool() -> Mounted {
    Mounted::new("tank", &["mirror", "a", "b"], 256 * MIB)
}

#[test]
fn set_get_list_remove_and_flags() {
    let m = pool();
    let f = m.root().join("f");
    std::fs::write(&f, b"x").unwrap();
    assert!(list(&f).is_empty());
    assert_eq!(errno_of(get(&f, "user.none")), libc::ENODATA);
    set(&f, "user.a", b"alpha", 0).unwrap();
    set(&f, "trusted.t", b"root only", 0).unwrap();
    set(&f, "security.s", b"label", 0).unwrap();
    set(&f, "user.empty", b"", 0).unwrap();
    assert_eq!(get(&f, "user.a").unwrap(), b"alpha");
    assert_eq!(get(&f, "trusted.t").unwrap(), b"root only");
    assert_eq!(get(&f, "security.s").unwrap(), b"label");
    assert_eq!(get(&f, "user.empty").unwrap(), b"");
    assert_eq!(
        list(&f),
        names(&["user.a", "trusted.t", "security.s", "user.empty"])
    );
    // Flags.
    assert_eq!(
        errno_of(set(&f, "user.a", b"x", libc::XATTR_CREATE)),
        libc::EEXIST
    );
    assert_eq!(
        errno_of(set(&f, "user.new", b"x", libc::XATTR_REPLACE)),
        libc::ENODATA
    );
    set(&f, "user.a", b"replaced, longer", libc::XATTR_REPLACE).unwrap();
    set(&f, "user.b", b"created", libc::XATTR_CREATE).unwrap();
    assert_eq!(get(&f, "user.a").unwrap(), b"replaced, longer");
    // Short buffers: ERANGE, for get and list.
    assert_eq!(errno_of(get_with(&f, "user.a", 3)), libc::ERANGE);
    assert_eq!(errno_of(list_with(&f, 5)), libc::ERANGE);
    // Remove.
    remove(&f, "user.a").unwrap();
    assert_eq!(errno_of(get(&f, "user.a")), libc::ENODATA);
    assert_eq!(errno_of(remove(&f, "user.a")), libc::ENODATA);
    // Namespaces Linux does not know, and names too long.
    assert_eq!(errno_of(set(&f, "bogus.x", b"x", 0)), libc::EOPNOTSUPP);
    assert_eq!(
        errno_of(set(&f, &format!("user.{}", "n".repeat(251)), b"x", 0)),
        libc::ERANGE
    );
    // Directories carry attributes too.
    let d = m.root().join("d");
    std::fs::create_dir(&d).unwrap();
    set(&d, "user.dir", b"on a dir", 0).unwrap();
    m.remount();
    assert_eq!(
        list(&f),
        names(&["trusted.t", "security.s", "user.empty", "user.b"])
    );
    assert_eq!(get(&f, "user.b").unwrap(), b"created");
    assert_eq!(get(&d, "user.dir").unwrap(), b"on a dir");
    assert_eq!(std::fs::read(&f).unwrap(), b"x", "the data is untouched");
}

#[test]
fn big_values_and_many_attributes() {
    let m = pool();
    let f = m.root().join("f");
    std::fs::write(&f, b"x").unwrap();
    let big: Vec<u8> = (0..65536u32).map(|i| (i * 7 + i / 256) as u8).collect();
    set(&f, "user.big", &big, 0).unwrap();
    assert!(get(&f, "user.big").unwrap() == big);
    let too_big = vec![1u8; 65537];
    assert_eq!(errno_of(set(&f, "user.too-big", &too_big, 0)), libc::E2BIG);
    // Many small ones: more than the inode's bonus holds.
    let mut want = names(&["user.big"]);
    for i in 0..200 {
        let n = format!("user.attr-{i:03}");
        set(
            &f,
            &n,
            format!("value {i} {}", "v".repeat(i % 50)).as_bytes(),
            0,
        )
        .unwrap();
        want.insert(n);
    }
    assert_eq!(list(&f), want);
    // Grow one past what fits inline, then shrink it back.
    set(&f, "user.attr-000", &vec![9u8; 5000], 0).unwrap();
    set(&f, "user.attr-001", b"tiny", 0).unwrap();
    m.remount();
    assert_eq!(list(&f), want);
    assert!(get(&f, "user.big").unwrap() == big);
    assert_eq!(get(&f, "user.attr-000").unwrap(), vec![9u8; 5000]);
    assert_eq!(get(&f, "user.attr-001").unwrap(), b"tiny");
    for i in 2..200 {
        let v = get(&f, &format!("user.attr-{i:03}")).unwrap();
        assert_eq!(v, format!("value {i} {}", "v".repeat(i % 50)).as_bytes());
    }
    // Removing the file frees its attributes with it.
    std::fs::remove_file(&f).unwrap();
    std::fs::write(&f, b"y").unwrap();
    assert!(list(&f).is_empty(), "a new file starts with no attributes");
}

#[test]
fn xattr_dir_property() {
    let m = pool();
    let f = m.root().join("f");
    std::fs::write(&f, b"x").unwrap();
    set(&f, "user.sa", b"stored inline", 0).unwrap();
    m.env.ok(&["zfs", "set", "xattr=dir", "tank"]);
    set(&f, "user.dir", b"stored in the directory", 0).unwrap();
    set(&f, "user.sa2", b"also", 0).unwrap();
    assert_eq!(get(&f, "user.sa").unwrap(), b"stored inline");
    assert_eq!(get(&f, "user.dir").unwrap(), b"stored in the directory");
    // Replacing an inline attribute under xattr=dir keeps one copy.
    set(&f, "user.sa", b"moved", 0).unwrap();
    assert_eq!(list(&f), names(&["user.sa", "user.dir", "user.sa2"]));
    m.remount();
    assert_eq!(m.env.get("xattr", "tank"), "dir");
    assert_eq!(get(&f, "user.sa").unwrap(), b"moved");
    assert_eq!(get(&f, "user.dir").unwrap(), b"stored in the directory");
    remove(&f, "user.sa").unwrap();
    assert_eq!(list(&f), names(&["user.dir", "user.sa2"]));
    m.env.ok(&["zfs", "set", "xattr=sa", "tank"]);
    set(&f, "user.back", b"inline again", 0).unwrap();
    assert_eq!(list(&f), names(&["user.dir", "user.sa2", "user.back"]));
    assert_eq!(get(&f, "user.dir").unwrap(), b"stored in the directory");
}

/// Linux drops file capabilities when the file changes: any write,
/// truncate or chown removes `security.capability` (the daemon does it,
/// the kernel having handed that job over with FUSE's killpriv v2), and
/// other attributes stay.
#[test]
fn file_capabilities_are_dropped_by_write_truncate_and_chown() {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let m = pool();
    // A version-2 capability set: magic with the effective flag, then
    // permitted/inheritable words for capabilities 0..31 and 32..63.
    let mut caps = Vec::new();
    caps.extend_from_slice(&(0x0200_0000u32 | 1).to_le_bytes());
    caps.extend_from_slice(&(1u32 << 10).to_le_bytes()); // CAP_NET_BIND_SERVICE
    caps.extend_from_slice(&0u32.to_le_bytes());
    caps.extend_from_slice(&0u32.to_le_bytes());
    caps.extend_from_slice(&0u32.to_le_bytes());
    let f = m.root().join("prog");
    std::fs::write(&f, b"#!/bin/sh\n").unwrap();
    let arm = || {
        set(&f, "security.capability", &caps, 0).unwrap();
        set(&f, "user.keep", b"kept", 0).unwrap();
        assert_eq!(get(&f, "security.capability").unwrap(), caps);
    };
    let dropped = |how: &str| {
        assert_eq!(
            errno_of(get(&f, "security.capability")),
            libc::ENODATA,
            "{how} must drop the capabilities"
        );
        assert_eq!(get(&f, "user.keep").unwrap(), b"kept", "{how}");
    };
    arm();
    // Twice in one open: the second write must not be the only one seen.
    let mut w = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(0)
        .open(&f)
        .unwrap();
    w.write_all(b"echo hi\n").unwrap();
    w.write_all(b"echo again\n").unwrap();
    drop(w);
    dropped("a write");
    arm();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(3)
        .unwrap();
    dropped("a truncate");
    arm();
    std::os::unix::fs::chown(&f, Some(1234), None).unwrap();
    dropped("a chown");
    m.remount();
    dropped("a remount after the chown");
}

/// `zfs set xattr=off` (ZFS's `noxattr`) takes effect on the live mount:
/// `user.*` get/set/remove fail with EOPNOTSUPP and `listxattr` leaves
/// `user.*` names out (as OpenZFS's `zpl_xattr_filldir` does), while
/// `security.*` keeps working; what is stored stays on disk and is back
/// after `zfs set xattr=sa`, also across an export/import.
#[test]
fn xattr_off_property() {
    let m = pool();
    let f = m.root().join("f");
    std::fs::write(&f, b"x").unwrap();
    set(&f, "user.a", b"alpha", 0).unwrap();
    set(&f, "security.s", b"label", 0).unwrap();
    m.env.ok(&["zfs", "set", "xattr=off", "tank"]);
    assert_eq!(m.env.get("xattr", "tank"), "off");
    assert_eq!(errno_of(get(&f, "user.a")), libc::EOPNOTSUPP);
    assert_eq!(errno_of(get(&f, "user.none")), libc::EOPNOTSUPP);
    assert_eq!(errno_of(set(&f, "user.a", b"x", 0)), libc::EOPNOTSUPP);
    assert_eq!(errno_of(set(&f, "user.b", b"x", 0)), libc::EOPNOTSUPP);
    assert_eq!(errno_of(remove(&f, "user.a")), libc::EOPNOTSUPP);
    assert_eq!(list(&f), names(&["security.s"]));
    assert_eq!(get(&f, "security.s").unwrap(), b"label");
    m.remount();
    assert_eq!(errno_of(get(&f, "user.a")), libc::EOPNOTSUPP);
    assert_eq!(list(&f), names(&["security.s"]));
    m.env.ok(&["zfs", "set", "xattr=sa", "tank"]);
    assert_eq!(get(&f, "user.a").unwrap(), b"alpha");
    assert_eq!(list(&f), names(&["user.a", "security.s"]));
    set(&f, "user.b", b"beta", 0).unwrap();
    remove(&f, "user.a").unwrap();
    assert_eq!(list(&f), names(&["user.b", "security.s"]));
}
