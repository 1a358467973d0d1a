//! End-to-end: `tarn zinject` through the real binary, a real daemon and a
//! real FUSE mount — checksum damage and I/O errors on one side of a
//! mirror (data stays right, the errors are counted on that leaf only),
//! read errors on a single device reaching the reader until cleared,
//! listing and clearing handlers, and every kind of bad input.

mod common;

use std::path::Path;

use common::{noise, Env, Mounted, MIB};

/// Writes `data` to `path` and makes it durable in the daemon.
fn write_file(path: &Path, data: &[u8]) {
    std::fs::write(path, data).expect("write");
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .expect("fsync");
}

/// READ, WRITE and CKSUM of the leaf `device` in `zpool status -p`.
fn counters(env: &Env, pool: &str, device: &str) -> [u64; 3] {
    let status = env.ok(&["zpool", "status", "-p", pool]);
    let line = status
        .lines()
        .find(|l| l.split_whitespace().next() == Some(device))
        .unwrap_or_else(|| panic!("no line for {device} in:\n{status}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    let n = |i: usize| cells[i].parse::<u64>().unwrap_or_else(|_| panic!("{line}"));
    [n(2), n(3), n(4)]
}

/// `tarn zinject` (the listing) as rows of cells, header dropped.
fn handlers(env: &Env) -> Vec<Vec<String>> {
    let out = env.ok(&["zinject"]);
    if out == "No handlers registered.\n" {
        return Vec::new();
    }
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["ID", "POOL", "DEVICE", "TYPE", "ERROR", "FREQ", "DELAY"],
        "{out}"
    );
    lines
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// A mirror of `a` and `b` holding one 8 MiB file that is read back only
/// after an export and import (so nothing of it is cached).
fn mirror_with_cold_file() -> (Mounted, Vec<u8>) {
    let m = Mounted::with_options(
        "tank",
        &["mirror", "a", "b"],
        256 * MIB,
        &["-O", "atime=off"],
    );
    let data = noise(8 << 20, 7);
    write_file(&m.root().join("f"), &data);
    m.remount();
    (m, data)
}

#[test]
fn checksum_damage_on_one_mirror_side_is_healed_and_counted_there_only() {
    let (m, data) = mirror_with_cold_file();
    let env = &m.env;
    let (a, b) = (env.path("a"), env.path("b"));
    let out = env.ok(&["zinject", "-d", &a, "-e", "checksum", "-T", "read", "tank"]);
    assert!(
        out.starts_with("Added handler 1 with the following properties:\n"),
        "{out}"
    );
    assert!(out.contains(&format!("vdev: {a}\n")), "{out}");
    assert_eq!(std::fs::read(m.root().join("f")).expect("read"), data);
    let [read, write, cksum] = counters(env, "tank", &a);
    assert!(cksum > 0, "no checksum errors counted on {a}");
    assert_eq!(
        (read, write),
        (0, 0),
        "checksum damage counted as I/O errors"
    );
    assert_eq!(counters(env, "tank", &b), [0, 0, 0]);

    assert_eq!(
        env.ok(&["zinject", "-c", "all"]),
        "removed all registered handlers\n"
    );
    assert_eq!(env.ok(&["zinject"]), "No handlers registered.\n");
}

#[test]
fn read_errors_on_one_mirror_side_are_counted_and_reads_stay_correct() {
    let (m, data) = mirror_with_cold_file();
    let env = &m.env;
    let (a, b) = (env.path("a"), env.path("b"));
    env.ok(&["zinject", "-d", &a, "-e", "io", "-T", "read", "tank"]);
    assert_eq!(std::fs::read(m.root().join("f")).expect("read"), data);
    let [read, write, cksum] = counters(env, "tank", &a);
    assert!(read > 0, "no read errors counted on {a}");
    assert_eq!((write, cksum), (0, 0));
    assert_eq!(counters(env, "tank", &b), [0, 0, 0]);
    env.ok(&["zinject", "-c", "1"]);
}

#[test]
fn nxio_on_one_mirror_side_fails_its_io_and_the_mirror_carries_on() {
    let (m, data) = mirror_with_cold_file();
    let env = &m.env;
    let (a, b) = (env.path("a"), env.path("b"));
    env.ok(&["zinject", "-d", "b", "-e", "nxio", "tank"]);
    assert_eq!(std::fs::read(m.root().join("f")).expect("read"), data);
    write_file(&m.root().join("g"), &noise(MIB as usize, 3));
    env.ok(&["zfs", "set", "compression=off", "tank"]);
    let [read, write, _] = counters(env, "tank", &b);
    assert!(
        read > 0 && write > 0,
        "nxio counted read {read}, write {write}"
    );
    assert_eq!(counters(env, "tank", &a), [0, 0, 0]);
}

#[test]
fn write_errors_on_one_mirror_side_leave_writes_working() {
    let m = Mounted::with_options(
        "tank",
        &["mirror", "a", "b"],
        256 * MIB,
        &["-O", "atime=off"],
    );
    let env = &m.env;
    let (a, b) = (env.path("a"), env.path("b"));
    env.ok(&["zinject", "-d", &a, "-e", "io", "-T", "write", "tank"]);
    let data = noise(4 << 20, 11);
    write_file(&m.root().join("f"), &data);
    // An administrative change returns once its txg, which carries the
    // file's blocks, is on disk.
    env.ok(&["zfs", "set", "compression=off", "tank"]);
    // A block whose write a missed reads back wrong there if it is read
    // again (a log block, a space map): CKSUM may count those, as ZFS's
    // would; nothing may count as a read error.
    let [read, write, _] = counters(env, "tank", &a);
    assert!(write > 0, "no write errors counted on {a}");
    assert_eq!(read, 0);
    assert_eq!(counters(env, "tank", &b), [0, 0, 0]);
    assert_eq!(env.ok(&["zinject", "-c", "1"]), "removed handler 1\n");
    // b holds everything: the file reads back whole from disk.
    m.remount();
    assert_eq!(std::fs::read(m.root().join("f")).expect("read"), data);
}

#[test]
fn read_errors_on_a_single_device_reach_the_reader_until_cleared() {
    let m = Mounted::with_options("tank", &["a"], 256 * MIB, &["-O", "atime=off"]);
    let env = &m.env;
    let data = noise(MIB as usize, 5);
    let f = m.root().join("f");
    write_file(&f, &data);
    m.remount();
    let pid = env.daemon_pid().expect("daemon running");
    env.ok(&["zinject", "-d", "a", "-e", "io", "-T", "read", "tank"]);
    let err = std::fs::read(&f).expect_err("a read with every device read failing succeeded");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    // The daemon is alive and answers.
    assert_eq!(env.daemon_pid(), Some(pid));
    assert!(counters(env, "tank", &env.path("a"))[0] > 0);
    assert!(env
        .ok(&["zpool", "list", "-H", "-o", "name"])
        .contains("tank"));

    assert_eq!(env.ok(&["zinject", "-c", "1"]), "removed handler 1\n");
    assert_eq!(std::fs::read(&f).expect("read after clear"), data);
}

#[test]
fn handlers_list_clear_and_refuse_bad_input() {
    let env = Env::new();
    let (a, b) = (env.vdev("a", 128 * MIB), env.vdev("b", 128 * MIB));
    env.ok(&["zpool", "create", "-m", "none", "tank", "mirror", &a, &b]);
    assert_eq!(env.ok(&["zinject"]), "No handlers registered.\n");
    assert!(handlers(&env).is_empty());

    env.ok(&[
        "zinject", "-d", &a, "-e", "checksum", "-T", "read", "-f", "12.5", "tank",
    ]);
    // A device by the last component of its path, as zpool status shows.
    env.ok(&["zinject", "-d", "b", "-e", "io", "-T", "write", "tank"]);
    env.ok(&["zinject", "-d", &a, "-D", "5:2", "-f", "0.0001", "tank"]);
    let row = |cells: &[&str]| cells.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let listed = vec![
        row(&["1", "tank", &a, "read", "checksum", "12.5%", "-"]),
        row(&["2", "tank", &b, "write", "io", "100%", "-"]),
        row(&["3", "tank", &a, "all", "delay", "0.0001%", "5ms:2"]),
    ];
    assert_eq!(handlers(&env), listed);

    // Bad input: a clear message, a non-zero exit, nothing changed.
    for (args, why) in [
        (
            &["-d", &a, "nosuch"][..],
            "cannot open 'nosuch': no such pool",
        ),
        (
            &["-d", "/nonexistent", "tank"],
            "cannot find device '/nonexistent' in pool 'tank'",
        ),
        (&["-d", &a, "-f", "150", "tank"], "invalid frequency '150'"),
        (&["-d", &a, "-f", "0", "tank"], "invalid frequency '0'"),
        (
            &["-d", &a, "-e", "checksum", "-T", "write", "tank"],
            "only be injected into reads",
        ),
        (
            &["-d", &a, "-e", "nxio", "-T", "read", "tank"],
            "leave -T out",
        ),
        (
            &["-d", &a, "-D", "0", "tank"],
            "latency 0 ms is out of range",
        ),
        (&["-c", "9"], "cannot clear handler 9: no such handler"),
    ] {
        let mut argv = vec!["zinject"];
        argv.extend_from_slice(args);
        let err = env.fail(&argv);
        assert!(err.contains(why), "zinject {args:?}: {err}");
    }
    for (args, why) in [
        (
            &["-d", &a, "-e", "bogus", "tank"][..],
            "expected one of: io, checksum, nxio",
        ),
        (
            &["-d", &a, "-T", "sideways", "tank"],
            "expected one of: read, write, flush, all",
        ),
        (&["-d", &a, "-f", "often", "tank"], "often"),
        (&["-c", "seven"], "expected a handler id"),
        (&["-d", &a], "POOL"),
    ] {
        let mut argv = vec!["zinject"];
        argv.extend_from_slice(args);
        let r = env.run(&argv);
        assert_eq!(r.code, 2, "zinject {args:?} should be a usage error");
        assert!(r.stderr.contains(why), "zinject {args:?}: {}", r.stderr);
    }
    assert_eq!(handlers(&env), listed);

    assert_eq!(env.ok(&["zinject", "-c", "2"]), "removed handler 2\n");
    assert_eq!(handlers(&env), vec![listed[0].clone(), listed[2].clone()]);
    assert!(env
        .fail(&["zinject", "-c", "2"])
        .contains("no such handler"));

    // Export drops the pool's handlers; they do not come back with it.
    env.ok(&["zpool", "export", "tank"]);
    assert!(handlers(&env).is_empty());
    env.ok(&["zpool", "import", "-d", &env.vdev_dir(), "tank"]);
    assert!(handlers(&env).is_empty());
    env.ok(&["zinject", "-d", &a, "tank"]);
    assert_eq!(handlers(&env)[0][0], "4", "handler ids are not reused");
    assert_eq!(handlers(&env)[0][4], "io", "-e defaults to io");
    env.ok(&["zinject", "-c", "4"]);
    // Detaching a device drops its handlers, not the others'.
    env.ok(&["zinject", "-d", &a, "-D", "1", "tank"]);
    env.ok(&["zinject", "-d", &b, "-e", "checksum", "tank"]);
    env.ok(&["zpool", "detach", "tank", &b]);
    let left = handlers(&env);
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0][..5], ["5", "tank", a.as_str(), "all", "delay"]);
    assert_eq!(
        env.ok(&["zinject", "-c", "all"]),
        "removed all registered handlers\n"
    );
    assert_eq!(
        env.ok(&["zinject", "-c", "all"]),
        "no handlers registered\n"
    );
}

#[test]
fn handlers_are_lost_with_the_daemon() {
    let env = Env::new();
    let a = env.vdev("a", 128 * MIB);
    env.ok(&["zpool", "create", "-m", "none", "tank", &a]);
    env.ok(&["zinject", "-d", &a, "-D", "1", "tank"]);
    assert_eq!(handlers(&env).len(), 1);
    assert!(env.stop_daemon(), "the daemon did not stop");
    // The next command starts a daemon that re-imports the pool, bare.
    assert!(env
        .ok(&["zpool", "list", "-H", "-o", "name"])
        .contains("tank"));
    assert!(handlers(&env).is_empty());
}
