//! End-to-end: every bad input of issue 2 item 8 through the real `tarn`
//! binary. Each is refused with exit status 1 and a clear message, and
//! leaves everything as it was: the pool list, the datasets, and the bytes
//! of every device's labels.

mod common;

use common::{corrupt_label, label_bytes, Env, MIB};

/// Everything a refused command must leave unchanged.
struct Snapshot {
    pools: Vec<String>,
    datasets: Vec<String>,
    labels: Vec<Vec<u8>>,
}

fn snapshot(env: &Env, devices: &[&str]) -> Snapshot {
    Snapshot {
        pools: env.pools(),
        datasets: env.datasets(),
        labels: devices.iter().map(|d| label_bytes(d)).collect(),
    }
}

fn assert_unchanged(env: &Env, devices: &[&str], before: &Snapshot, what: &str) {
    assert_eq!(env.pools(), before.pools, "{what}: pools changed");
    assert_eq!(env.datasets(), before.datasets, "{what}: datasets changed");
    for (d, bytes) in devices.iter().zip(&before.labels) {
        assert!(label_bytes(d) == *bytes, "{what}: labels of {d} changed");
    }
}

#[test]
fn bad_devices_are_refused_and_nothing_is_written() {
    let env = Env::new();
    let a = env.vdev("a", 128 * MIB);
    let b = env.vdev("b", 128 * MIB);
    let c = env.vdev("c", 128 * MIB);
    let d = env.vdev("d", 128 * MIB);
    let e = env.vdev("e", 128 * MIB);
    let small = env.vdev("small", 63 * MIB);
    let missing = env.path("missing");
    let alias = format!("{}/../vdevs/c", env.vdev_dir());
    env.ok(&["zpool", "create", "tank", "mirror", &a, &b]);
    let all = [a.as_str(), b.as_str(), c.as_str(), d.as_str(), e.as_str()];
    let before = snapshot(&env, &all);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["new", "mirror", &c, &missing], "cannot open '"),
        (
            vec!["new", "mirror", &c, &missing],
            "No such file or directory",
        ),
        (
            vec!["new", "mirror", &c, &small],
            "less than the minimum size (64M)",
        ),
        (vec!["new", "mirror", &c, &c], "more than once"),
        (
            vec!["new", "mirror", &c, &d, "mirror", &e, &alias],
            "specified multiple times",
        ),
        (
            vec!["new", "mirror", &alias, &d, "mirror", &e, &c],
            "specified multiple times",
        ),
        (
            vec!["new", "mirror", &c, &a],
            "is part of active pool 'tank'",
        ),
        (
            vec!["-f", "new", "mirror", &c, &a],
            "is part of active pool 'tank'",
        ),
        (
            vec!["new", "mirror", &c, &d, "raidz", &e, &small, &missing],
            "mismatched replication level",
        ),
        (
            vec!["new", &c, "mirror", &d, &e],
            "mismatched replication level",
        ),
        (vec!["new", "raidz2", &c, &d], "requires at least 3 devices"),
        (
            vec!["new", "raidz3", &c, &d, &e],
            "requires at least 4 devices",
        ),
        (vec!["tank", &c], "pool already exists"),
    ];
    for (args, why) in cases {
        let mut cmd = vec!["zpool", "create"];
        cmd.extend(&args);
        let err = env.fail(&cmd);
        assert!(err.contains(why), "{args:?}: {err}");
        assert_unchanged(&env, &all, &before, &format!("{args:?}"));
    }
    // -f accepts mismatched replication levels, and the pool works.
    env.ok(&["zpool", "create", "-f", "new", &c, "mirror", &d, &e]);
    assert_eq!(env.pools(), ["new", "tank"]);
    let status = env.ok(&["zpool", "status", "tank"]);
    assert!(status.contains(" state: ONLINE"), "{status}");
}

#[test]
fn exported_and_destroyed_pools_devices() {
    let env = Env::new();
    let a = env.vdev("a", 128 * MIB);
    let b = env.vdev("b", 128 * MIB);
    let c = env.vdev("c", 128 * MIB);
    env.ok(&["zpool", "create", "tank", "mirror", &a, &b]);
    env.ok(&["zpool", "export", "tank"]);
    let devices = [a.as_str(), b.as_str(), c.as_str()];
    let before = snapshot(&env, &devices);
    let err = env.fail(&["zpool", "create", "new", "mirror", &a, &c]);
    assert_eq!(
        err,
        format!(
            "cannot create 'new': invalid vdev specification\n\
             use '-f' to override the following errors:\n{a} is part of exported pool 'tank'\n"
        )
    );
    assert_unchanged(&env, &devices, &before, "exported device");
    // With -f the device is taken; the exported pool loses it.
    env.ok(&["zpool", "create", "-f", "new", "mirror", &a, &c]);
    env.ok(&["zpool", "destroy", "new"]);
    // A destroyed pool's devices are free without -f.
    env.ok(&["zpool", "create", "again", &c]);
    assert_eq!(env.pools(), ["again"]);
}

#[test]
fn bad_properties_and_names_are_refused() {
    let env = Env::new();
    let a = env.vdev("a", 128 * MIB);
    let b = env.vdev("b", 128 * MIB);
    let long = "x".repeat(300);
    let long_ds = format!("tank/{}", "y".repeat(300));
    let before = snapshot(&env, &[a.as_str(), b.as_str()]);
    let creates: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["-o", "nosuch=1", "tank", &a],
            "property 'nosuch' is not a valid pool property",
        ),
        (vec!["-o", "ashift=7", "tank", &a], "ashift"),
        (vec!["-o", "ashift=17", "tank", &a], "ashift"),
        (vec!["-O", "recordsize=3", "tank", &a], "recordsize"),
        (
            vec!["-O", "nosuch=1", "tank", &a],
            "invalid property 'nosuch'",
        ),
        (vec!["-O", "volsize=1G", "tank", &a], "does not apply"),
        (vec!["-m", "relative", "tank", &a], "invalid mountpoint"),
        (vec!["mirror", &a, &b], "cannot create 'mirror'"),
        (vec!["1tank", &a], "cannot create '1tank'"),
        (vec!["ta/nk", &a], "cannot create 'ta/nk'"),
        (vec!["ta\u{1}nk", &a], "cannot create"),
        (vec![&long, &a], "name is too long"),
    ];
    for (args, why) in creates {
        let mut cmd = vec!["zpool", "create"];
        cmd.extend(&args);
        let err = env.fail(&cmd);
        assert!(err.contains(why), "{args:?}: {err}");
        assert_unchanged(
            &env,
            &[a.as_str(), b.as_str()],
            &before,
            &format!("{args:?}"),
        );
    }
    env.ok(&[
        "zpool", "create", "-o", "ashift=9", "tank", "mirror", &a, &b,
    ]);
    let shift = env.ok(&["zpool", "get", "-H", "-o", "value,source", "ashift", "tank"]);
    assert_eq!(shift, "9\tlocal\n");
    let before = snapshot(&env, &[]);
    let datasets: Vec<(&str, &str)> = vec![
        ("tank/../x", "'..'"),
        ("tank/a/..", "'..'"),
        ("tank/a\u{7}b", "cannot create"),
        ("tank//a", "cannot create"),
        (&long_ds, "name is too long"),
        ("tank/a@snap", "cannot create 'tank/a@snap'"),
    ];
    for (name, why) in datasets {
        let err = env.fail(&["zfs", "create", name]);
        assert!(err.contains(why), "{name:?}: {err}");
        assert_unchanged(&env, &[], &before, name);
    }
    let err = env.fail(&["zpool", "set", "nosuch=1", "tank"]);
    assert!(err.contains("invalid property"), "{err}");
    let err = env.fail(&["zpool", "set", "failmode=sometimes", "tank"]);
    assert!(err.contains("bad property value"), "{err}");
    let err = env.fail(&["zpool", "get", "health", "nopool"]);
    assert!(err.contains("no such pool"), "{err}");
    env.ok(&["zpool", "set", "comment=hello", "tank"]);
    let comment = env.ok(&[
        "zpool",
        "get",
        "-H",
        "-o",
        "value,source",
        "comment",
        "tank",
    ]);
    assert_eq!(comment, "hello\tlocal\n");
}

#[test]
fn corrupt_labels_fall_back_to_good_ones_or_say_so() {
    let env = Env::new();
    let a = env.vdev("a", 128 * MIB);
    let b = env.vdev("b", 128 * MIB);
    let dir = env.vdev_dir();
    env.ok(&["zpool", "create", "tank", "mirror", &a, &b]);
    env.ok(&["zfs", "create", "-o", "atime=off", "tank/fs"]);
    env.ok(&["zpool", "export", "tank"]);
    // Damage 1 to 3 of each device's four labels: the rest still serve.
    for l in 0..3 {
        corrupt_label(&a, l);
    }
    corrupt_label(&b, 3);
    let listing = env.ok(&["zpool", "import", "-d", &dir]);
    assert!(listing.contains("  state: ONLINE"), "{listing}");
    env.ok(&["zpool", "import", "-d", &dir, "tank"]);
    assert_eq!(env.datasets(), ["tank", "tank/fs"]);
    assert_eq!(env.get("atime", "tank/fs"), "off");
    env.ok(&["zpool", "export", "tank"]);
    // All four labels of every device damaged: nothing to import, and why.
    for dev in [&a, &b] {
        for l in 0..4 {
            corrupt_label(dev, l);
        }
    }
    let scan = env.run(&["zpool", "import", "-d", &dir]);
    assert_eq!(scan.code, 0);
    assert_eq!(scan.stderr, "no pools available to import\n");
    let err = env.fail(&["zpool", "import", "-d", &dir, "tank"]);
    assert!(
        err.starts_with("cannot import 'tank': no such pool available"),
        "{err}"
    );
    assert!(
        err.contains("labels are corrupt") && err.contains(&a),
        "{err}"
    );
    assert!(env.pools().is_empty());
    // Corrupt labels do not stop the devices being reused.
    env.ok(&["zpool", "create", "fresh", &a]);
}
