//! The `sync` and `logbias` properties through the real CLI and a real
//! mount, and `zpool import` saying what it replayed from the intent log.
//!
//! Each crash here is a SIGKILL of the daemon right after a `zfs set`,
//! which commits a txg: the txg timer (5 s) cannot commit the writes that
//! follow before the kill, so only the intent log can bring them back.

mod common;

use std::fs::{File, OpenOptions};
use std::io::Write;

use common::Mounted;

const MIB: u64 = 1 << 20;

fn write_file(path: &std::path::Path, data: &[u8], fsync: bool) {
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)
        .unwrap();
    f.write_all(data).unwrap();
    if fsync {
        f.sync_all().unwrap();
    }
    // close() writes the page cache back to the daemon.
}

#[test]
fn sync_and_logbias_are_inherited_dataset_properties() {
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    let env = &m.env;
    env.ok(&["zfs", "create", "tank/db"]);
    assert_eq!(env.get("sync", "tank/db"), "standard");
    assert_eq!(env.get("logbias", "tank/db"), "latency");
    env.ok(&["zfs", "set", "sync=always", "tank"]);
    env.ok(&["zfs", "set", "logbias=throughput", "tank/db"]);
    let out = env.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "name,value,source",
        "sync",
        "tank/db",
    ]);
    assert_eq!(out.trim(), "tank/db\talways\tinherited from tank");
    assert_eq!(env.get("logbias", "tank/db"), "throughput");
    let bad = env.fail(&["zfs", "set", "sync=sometimes", "tank"]);
    assert!(bad.contains("sync"), "{bad}");
}

#[test]
fn sync_always_makes_a_write_durable_without_fsync() {
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    m.env.ok(&["zfs", "set", "sync=always", "tank"]);
    let data = vec![0x5a; 100_000];
    write_file(&m.root().join("f"), &data, false);
    m.env.kill_daemon();
    // The next command starts a daemon that re-imports and replays.
    m.env.ok(&["zpool", "status", "tank"]);
    m.assert_mounted("tank");
    assert_eq!(std::fs::read(m.root().join("f")).unwrap(), data);
}

#[test]
fn sync_disabled_fsync_is_not_durable() {
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    write_file(&m.root().join("f"), b"old", true);
    m.env.ok(&["zfs", "set", "sync=disabled", "tank"]);
    write_file(&m.root().join("f"), b"new contents", true);
    m.env.kill_daemon();
    m.env.ok(&["zpool", "status", "tank"]);
    // The documented price of sync=disabled: the acknowledged fsync is
    // gone, and the file is as the last txg left it.
    assert_eq!(std::fs::read(m.root().join("f")).unwrap(), b"old");
}

#[test]
fn import_says_how_many_records_it_replayed() {
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    let env = &m.env;
    env.ok(&["zfs", "create", "tank/db"]);
    // A txg commits here; what follows lives only in the log.
    env.ok(&["zfs", "set", "atime=off", "tank"]);
    for i in 0..3 {
        write_file(&m.mnt("tank/db").join(format!("f{i}")), b"logged", true);
    }
    env.kill_daemon();
    // Without the cache file the new daemon imports nothing by itself:
    // `zpool import` does, and says what the mounts replayed.
    std::fs::remove_file(env.cachefile()).unwrap();
    let out = env.ok(&["zpool", "import", "-f", "-d", &env.vdev_dir(), "tank"]);
    assert!(
        out.starts_with("pool 'tank': replayed ") && out.contains("tank/db: "),
        "{out}"
    );
    for i in 0..3 {
        let back = std::fs::read(m.mnt("tank/db").join(format!("f{i}"))).unwrap();
        assert_eq!(back, b"logged");
    }
    // A clean export and import replays nothing and says nothing.
    env.ok(&["zpool", "export", "tank"]);
    let out = env.ok(&["zpool", "import", "-d", &env.vdev_dir(), "tank"]);
    assert_eq!(out, "");
    let _ = File::open(m.root()).unwrap();
}
