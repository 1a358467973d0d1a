//! The dataset properties replication scripts expect, through the real
//! CLI and mounts: `exec`, `setuid`, `devices` as mount flags (set at
//! mount and changed in place by `zfs set`), `utf8only` refusing names,
//! the create-time and stored-only ones with their one honest value, and
//! the `feature@` pool properties scripts probe; and all of them carried
//! by a replication stream.

mod common;

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;

use common::{Mounted, MIB};

/// The options `/proc/self/mounts` lists for the mount at `path`.
fn mount_options(path: &std::path::Path) -> Vec<String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let want = path.to_string_lossy().into_owned();
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() > 3 && f[1] == want).then(|| f[3].split(',').map(String::from).collect())
        })
        .next_back()
        .unwrap_or_else(|| panic!("{want} is not mounted"))
}

#[test]
fn exec_setuid_and_devices_are_mount_flags() {
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    let e = &m.env;
    e.ok(&[
        "zfs",
        "create",
        "-o",
        "setuid=off",
        "-o",
        "devices=off",
        "tank/fs",
    ]);
    let opts = mount_options(&m.mnt("tank/fs"));
    assert!(
        opts.contains(&"nosuid".into()) && opts.contains(&"nodev".into()),
        "{opts:?}"
    );
    assert!(!opts.contains(&"noexec".into()), "{opts:?}");
    let prog = m.mnt("tank/fs").join("true");
    std::fs::copy("/bin/true", &prog).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(std::process::Command::new(&prog)
        .status()
        .unwrap()
        .success());
    // zfs set changes the mounted filesystem at once.
    e.ok(&["zfs", "set", "exec=off", "tank/fs"]);
    assert!(mount_options(&m.mnt("tank/fs")).contains(&"noexec".into()));
    let err = std::process::Command::new(&prog).status().unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EACCES), "{err}");
    e.ok(&["zfs", "inherit", "exec", "tank/fs"]);
    assert!(!mount_options(&m.mnt("tank/fs")).contains(&"noexec".into()));
    assert!(std::process::Command::new(&prog)
        .status()
        .unwrap()
        .success());
    // Inherited by children, and kept across a remount.
    e.ok(&["zfs", "set", "exec=off", "tank"]);
    e.ok(&["zfs", "create", "tank/fs/child"]);
    assert!(mount_options(&m.mnt("tank/fs/child")).contains(&"noexec".into()));
    let src = e.ok(&["zfs", "get", "-H", "-o", "source", "exec", "tank/fs/child"]);
    assert_eq!(src.trim(), "inherited from tank");
}

#[test]
fn create_time_and_stored_properties_say_what_tarn_does() {
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    let e = &m.env;
    e.ok(&["zfs", "create", "-o", "utf8only=on", "tank/u"]);
    let bad = m
        .mnt("tank/u")
        .join(std::ffi::OsStr::from_bytes_compat(b"bad\xff"));
    let err = File::create(&bad).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EILSEQ));
    File::create(m.mnt("tank/u").join("grüße")).unwrap();
    let err = e.fail(&["zfs", "set", "utf8only=off", "tank/u"]);
    assert!(err.contains("can only be set at creation time"), "{err}");
    let err = e.fail(&[
        "zfs",
        "create",
        "-o",
        "casesensitivity=insensitive",
        "tank/c",
    ]);
    assert!(err.contains("casesensitivity"), "{err}");
    let err = e.fail(&["zfs", "create", "-o", "normalization=formD", "tank/c"]);
    assert!(err.contains("normalization"), "{err}");
    let err = e.fail(&["zfs", "set", "dedup=on", "tank"]);
    assert!(err.contains("dedup"), "{err}");
    e.ok(&["zfs", "set", "dedup=off", "tank"]);
    e.ok(&["zfs", "set", "acltype=posix", "tank"]);
    e.ok(&["zfs", "set", "sharenfs=rw=@10.0.0.0/8", "tank"]);
    let got = e.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "property,value",
        "version,casesensitivity,normalization,utf8only,acltype,dedup,sharenfs,sharesmb",
        "tank/u",
    ]);
    assert_eq!(
        got,
        "version\t5\ncasesensitivity\tsensitive\nnormalization\tnone\nutf8only\ton\n\
         acltype\tposix\ndedup\toff\nsharenfs\trw=@10.0.0.0/8\nsharesmb\toff\n"
    );
    let f = e.ok(&[
        "zpool",
        "get",
        "-H",
        "-o",
        "property,value",
        "feature@extensible_dataset,feature@large_blocks,feature@hole_birth",
        "tank",
    ]);
    assert_eq!(
        f,
        "feature@extensible_dataset\tactive\nfeature@large_blocks\tenabled\n\
         feature@hole_birth\tdisabled\n"
    );
    let err = e.fail(&["zpool", "get", "feature@no_such_thing", "tank"]);
    assert!(err.contains("feature@no_such_thing"), "{err}");
}

#[test]
fn a_replication_stream_carries_every_property() {
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    let e = &m.env;
    let b = e.vdev("b", 256 * MIB);
    e.ok(&["zpool", "create", "backup", &b]);
    e.ok(&[
        "zfs",
        "create",
        "-o",
        "exec=off",
        "-o",
        "utf8only=on",
        "-o",
        "sharesmb=on",
        "-o",
        "com.example:owner=ops",
        "tank/fs",
    ]);
    e.ok(&["zfs", "snapshot", "tank/fs@1"]);
    let stream = e.dir.path().join("s");
    let ok = e
        .cmd(&["zfs", "send", "-R", "tank/fs@1"])
        .stdout(File::create(&stream).unwrap())
        .stderr(Stdio::inherit())
        .status()
        .unwrap();
    assert!(ok.success());
    let ok = e
        .cmd(&["zfs", "receive", "-x", "sharesmb", "backup/fs"])
        .stdin(File::open(&stream).unwrap())
        .status()
        .unwrap();
    assert!(ok.success());
    let got = e.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "property,value,source",
        "exec,utf8only,sharesmb,com.example:owner",
        "backup/fs",
    ]);
    assert_eq!(
        got,
        "exec\toff\treceived\nutf8only\ton\treceived\nsharesmb\toff\tdefault\n\
         com.example:owner\tops\treceived\n"
    );
    assert!(mount_options(&m.mnt("backup/fs")).contains(&"noexec".into()));
}

trait FromBytes {
    fn from_bytes_compat(b: &[u8]) -> &std::ffi::OsStr;
}

impl FromBytes for std::ffi::OsStr {
    fn from_bytes_compat(b: &[u8]) -> &std::ffi::OsStr {
        std::os::unix::ffi::OsStrExt::from_bytes(b)
    }
}
