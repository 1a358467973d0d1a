//! End-to-end: pools through the real `tarn` binary — every topology, the
//! capacity OpenZFS would report, export/import, restart from the cache
//! file, dry runs and history.

mod common;

use common::{in_order, Env, GIB, MIB};

/// `zpool status` config lines for a tree of (depth, name) entries.
fn status_lines(entries: &[(usize, &str)]) -> Vec<String> {
    entries
        .iter()
        .map(|(depth, name)| format!("\t{:w$}{name}", "", w = depth * 2))
        .collect()
}

/// Lines of `zpool status` that start the config rows (NAME column only).
fn status_names(status: &str) -> String {
    status
        .lines()
        .filter(|l| l.starts_with('\t'))
        .map(|l| {
            let indent = l[1..].len() - l[1..].trim_start().len();
            let name = l[1..].split_whitespace().next().unwrap_or("");
            format!("\t{:indent$}{name}", "")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_topology_creates_lists_and_shows_its_layout() {
    let env = Env::new();
    let d: Vec<String> = (0..6)
        .map(|i| env.vdev(&format!("d{i}"), 256 * MIB))
        .collect();
    let d = |i: usize| d[i].as_str();
    type Case<'a> = (&'a str, Vec<&'a str>, Vec<(usize, &'a str)>);
    let cases: Vec<Case> = vec![
        ("single", vec![d(0)], vec![(0, "tank"), (1, d(0))]),
        (
            "two disks",
            vec![d(0), d(1)],
            vec![(0, "tank"), (1, d(0)), (1, d(1))],
        ),
        (
            "2-way mirror",
            vec!["mirror", d(0), d(1)],
            vec![(0, "tank"), (1, "mirror-0"), (2, d(0)), (2, d(1))],
        ),
        (
            "3-way mirror",
            vec!["mirror", d(0), d(1), d(2)],
            vec![
                (0, "tank"),
                (1, "mirror-0"),
                (2, d(0)),
                (2, d(1)),
                (2, d(2)),
            ],
        ),
        (
            "two mirrors",
            vec!["mirror", d(0), d(1), "mirror", d(2), d(3)],
            vec![
                (0, "tank"),
                (1, "mirror-0"),
                (2, d(0)),
                (2, d(1)),
                (1, "mirror-1"),
                (2, d(2)),
                (2, d(3)),
            ],
        ),
        (
            "raidz1",
            vec!["raidz", d(0), d(1), d(2)],
            vec![
                (0, "tank"),
                (1, "raidz1-0"),
                (2, d(0)),
                (2, d(1)),
                (2, d(2)),
            ],
        ),
        (
            "raidz2",
            vec!["raidz2", d(0), d(1), d(2), d(3)],
            vec![(0, "tank"), (1, "raidz2-0"), (2, d(3))],
        ),
        (
            "raidz3",
            vec!["raidz3", d(0), d(1), d(2), d(3), d(4)],
            vec![(0, "tank"), (1, "raidz3-0"), (2, d(0)), (2, d(4))],
        ),
        (
            "mirror with a log",
            vec!["mirror", d(0), d(1), "log", d(5)],
            vec![
                (0, "tank"),
                (1, "mirror-0"),
                (2, d(0)),
                (2, d(1)),
                (0, "logs"),
                (1, d(5)),
            ],
        ),
    ];
    for (what, spec, layout) in cases {
        let mut args = vec!["zpool", "create", "tank"];
        args.extend(&spec);
        env.ok(&args);
        let list = env.ok(&["zpool", "list", "-Hp", "-o", "name,size,health"]);
        let cols: Vec<&str> = list.trim().split('\t').collect();
        assert_eq!(cols[0], "tank", "{what}: {list}");
        assert!(
            cols[1].parse::<u64>().unwrap() > 100 * MIB,
            "{what}: {list}"
        );
        assert_eq!(cols[2], "ONLINE", "{what}");
        let status = env.ok(&["zpool", "status", "tank"]);
        assert!(status.contains(" state: ONLINE"), "{what}:\n{status}");
        assert!(status.contains("errors: No known data errors"), "{what}");
        let names = status_names(&status);
        assert!(
            in_order(&names, &status_lines(&layout)),
            "{what}:\n{status}"
        );
        let zfs = env.ok(&["zfs", "list", "-Hp"]);
        let row: Vec<&str> = zfs.trim().split('\t').collect();
        assert_eq!((row[0], row[4]), ("tank", "/tank"), "{what}: {zfs}");
        assert!(row[2].parse::<u64>().unwrap() > 0, "{what}: {zfs}");
        env.ok(&["zpool", "destroy", "tank"]);
        assert!(env.pools().is_empty());
    }
}

// ------------------------------------------------------------ capacity

/// Bit length of `x` (OpenZFS highbit64).
fn highbit64(x: u64) -> u32 {
    64 - x.leading_zeros()
}

/// A top-level vdev for the expected-capacity arithmetic.
struct Top {
    /// Device sizes in bytes.
    disks: Vec<u64>,
    /// 0 for a mirror, else raidz parity.
    parity: u64,
    ashift: u32,
}

/// Metaslab space and deflated space of one top-level vdev, from
/// REFERENCE.md's rules, written out independently of tarn's code.
fn top_space(top: &Top) -> (u64, u64, u64) {
    // 1. leaf asize: 256 KiB-aligned size minus 4 MiB front and 512 KiB back.
    let leaf = |size: u64| (size & !((256 << 10) - 1)) - (4 << 20) - (512 << 10);
    let min_leaf = top.disks.iter().map(|&s| leaf(s)).min().unwrap();
    // 2. mirror: smallest child; raidz: smallest child × width.
    let width = top.disks.len() as u64;
    let sector = 1u64 << top.ashift;
    let per_child = min_leaf / sector * sector;
    let asize = if top.parity == 0 {
        per_child
    } else {
        per_child * width
    };
    // 3. metaslab size.
    let count = asize >> 29;
    let mut shift = if count < 16 {
        highbit64(asize / 16)
    } else if count > 200 {
        highbit64(asize / 200)
    } else {
        29
    };
    shift = shift.max(24);
    if shift > 34 {
        shift = 34;
        if asize >> 34 > 131_072 {
            shift = highbit64(asize / 131_072);
        }
    }
    let metaslabs = asize >> shift;
    let raw = metaslabs << shift;
    // More than 64 metaslabs: one goes to the embedded log class.
    let log_ms = u64::from(metaslabs > 64) << shift;
    // 4-5. deflate ratio from the allocated size of a 128 KiB block.
    let ratio = deflate_ratio(width, top.parity, top.ashift);
    let deflated = ((raw - log_ms) >> 9) * ratio;
    let log_deflated = (log_ms >> 9) * ratio;
    (raw, deflated, log_deflated)
}

/// `vdev_set_deflate_ratio`: 2^17 / (asize of a 128 KiB block >> 9).
fn deflate_ratio(width: u64, parity: u64, ashift: u32) -> u64 {
    if parity == 0 {
        return 512;
    }
    let sector = 1u64 << ashift;
    let mut s = (128 << 10) / sector;
    s += parity * s.div_ceil(width - parity);
    let alloc = s.div_ceil(parity + 1) * (parity + 1) * sector;
    (1 << 17) / (alloc >> 9)
}

/// Expected (SIZE, AVAIL) of an empty pool.
fn expected(tops: &[Top]) -> (u64, u64) {
    let mut size = 0;
    let mut dspace = 0;
    let mut embedded_log = 0;
    for t in tops {
        let (raw, deflated, log) = top_space(t);
        size += raw;
        dspace += deflated;
        embedded_log += log;
    }
    // 6. slop.
    let mut slop = (dspace >> 5).min(128 * GIB);
    slop -= embedded_log.min(slop / 2);
    slop = slop.max((dspace / 2).min(128 * MIB));
    (size, dspace - slop)
}

fn within_1pct(actual: u64, expected: u64) -> bool {
    actual.abs_diff(expected) * 100 <= expected
}

/// One capacity case: the vdev words (device names are files in the test
/// directory; names starting with `b` are 2 GiB, the others 1 GiB).
struct Case {
    what: &'static str,
    ashift: Option<u32>,
    spec: Vec<&'static str>,
    tops: Vec<Top>,
}

fn disk_size(name: &str) -> u64 {
    if name.starts_with('b') {
        2 * GIB
    } else {
        GIB
    }
}

fn is_keyword(word: &str) -> bool {
    word.starts_with("mirror") || word.starts_with("raidz")
}

#[test]
fn avail_agrees_with_openzfs_rules() {
    let env = Env::new();
    let mirror = |disks: Vec<u64>| Top {
        disks,
        parity: 0,
        ashift: 12,
    };
    let raidz = |n: usize, parity: u64, ashift: u32| Top {
        disks: vec![GIB; n],
        parity,
        ashift,
    };
    let raidz1 = vec!["raidz1", "r0", "r1", "r2", "r3"];
    let cases = vec![
        Case {
            what: "mirror 2x1G",
            ashift: None,
            spec: vec!["mirror", "m0", "m1"],
            tops: vec![mirror(vec![GIB, GIB])],
        },
        Case {
            what: "raidz1 4x1G",
            ashift: None,
            spec: raidz1.clone(),
            tops: vec![raidz(4, 1, 12)],
        },
        Case {
            what: "raidz2 6x1G",
            ashift: None,
            spec: vec!["raidz2", "r0", "r1", "r2", "r3", "r4", "r5"],
            tops: vec![raidz(6, 2, 12)],
        },
        Case {
            what: "mirrors 2x1G + 2x2G",
            ashift: None,
            spec: vec!["mirror", "m0", "m1", "mirror", "b0", "b1"],
            tops: vec![mirror(vec![GIB, GIB]), mirror(vec![2 * GIB, 2 * GIB])],
        },
        Case {
            what: "raidz1 4x1G ashift=9",
            ashift: Some(9),
            spec: raidz1.clone(),
            tops: vec![raidz(4, 1, 9)],
        },
        Case {
            what: "raidz1 4x1G ashift=12",
            ashift: Some(12),
            spec: raidz1,
            tops: vec![raidz(4, 1, 12)],
        },
    ];
    for case in cases {
        let mut args = vec!["zpool".to_string(), "create".into()];
        if let Some(ashift) = case.ashift {
            args.extend(["-o".into(), format!("ashift={ashift}")]);
        }
        args.push("tank".into());
        for word in &case.spec {
            args.push(if is_keyword(word) {
                word.to_string()
            } else {
                env.vdev(word, disk_size(word))
            });
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        env.ok(&args);
        let (size, avail) = expected(&case.tops);
        let number = |args: &[&str]| -> u64 { env.ok(args).trim().parse().unwrap() };
        let got_avail = number(&["zfs", "list", "-Hp", "-o", "available", "tank"]);
        let got_size = number(&["zpool", "list", "-Hp", "-o", "size", "tank"]);
        let what = case.what;
        assert!(
            within_1pct(got_avail, avail),
            "{what}: AVAIL {got_avail}, OpenZFS rules give {avail}"
        );
        assert!(
            within_1pct(got_size, size),
            "{what}: SIZE {got_size}, OpenZFS rules give {size}"
        );
        env.ok(&["zpool", "destroy", "tank"]);
    }
}

#[test]
fn the_arithmetic_reproduces_reference_examples() {
    // REFERENCE.md, ashift 12: raidz1 4-wide 372, raidz2 6/8/10-wide 341/364/390.
    assert_eq!(deflate_ratio(4, 1, 12), 372);
    assert_eq!(deflate_ratio(6, 2, 12), 341);
    assert_eq!(deflate_ratio(8, 2, 12), 364);
    assert_eq!(deflate_ratio(10, 2, 12), 390);
    // The seed's 24-wide raidz3 of 4 TB disks shows 68.4 TiB at ashift 12
    // and 73.9 TiB at ashift 9: the ratio is what OpenZFS reproduces.
    let avail = |ashift| {
        let top = Top {
            disks: vec![4_000_000_000_000; 24],
            parity: 3,
            ashift,
        };
        expected(&[top]).1 as f64
    };
    let ratio = avail(9) / avail(12);
    assert!((ratio - 73.9 / 68.4).abs() < 0.005, "{ratio}");
}

// ------------------------------------------------------- export / import

#[test]
fn export_import_keeps_datasets_and_props_and_renames() {
    let env = Env::new();
    let a = env.vdev("a", 256 * MIB);
    let b = env.vdev("b", 256 * MIB);
    let dir = env.vdev_dir();
    env.ok(&["zpool", "create", "tank", "mirror", &a, &b]);
    env.ok(&["zfs", "create", "-o", "recordsize=1M", "tank/a"]);
    env.ok(&["zfs", "create", "-p", "tank/a/b/c"]);
    env.ok(&["zfs", "set", "compression=gzip-6", "tank/a/b"]);
    let guid = env
        .ok(&["zpool", "get", "-Hp", "-o", "value", "guid", "tank"])
        .trim()
        .to_string();

    env.ok(&["zpool", "export", "tank"]);
    assert!(env.pools().is_empty());
    let listing = env.ok(&["zpool", "import", "-d", &dir]);
    assert!(listing.contains("   pool: tank\n"), "{listing}");
    assert!(listing.contains(&format!("     id: {guid}\n")), "{listing}");
    assert!(listing.contains("  state: ONLINE\n"), "{listing}");
    assert!(listing.contains("mirror-0"), "{listing}");

    env.ok(&["zpool", "import", "-d", &dir, "tank"]);
    assert_eq!(env.datasets(), ["tank", "tank/a", "tank/a/b", "tank/a/b/c"]);
    assert_eq!(env.get("recordsize", "tank/a"), "1048576");
    let src = env.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "value,source",
        "compression",
        "tank/a/b/c",
    ]);
    assert_eq!(src.trim(), "gzip-6\tinherited from tank/a/b");

    // Import under a new name: every dataset follows.
    env.ok(&["zpool", "export", "tank"]);
    env.ok(&["zpool", "import", "-d", &dir, "tank", "newtank"]);
    assert_eq!(env.pools(), ["newtank"]);
    assert_eq!(
        env.datasets(),
        ["newtank", "newtank/a", "newtank/a/b", "newtank/a/b/c"]
    );
    assert_eq!(env.get("mountpoint", "newtank/a"), "/newtank/a");

    // Import by numeric id.
    env.ok(&["zpool", "export", "newtank"]);
    env.ok(&["zpool", "import", "-d", &dir, &guid]);
    assert_eq!(env.pools(), ["newtank"]);
    let history = env.ok(&["zpool", "history", "newtank"]);
    assert!(
        history.contains(&format!(" zpool create tank mirror {a} {b}\n")),
        "{history}"
    );
    assert!(
        history.contains(&format!(" zpool import -d {dir} tank newtank\n")),
        "{history}"
    );
    assert!(
        history.contains(" zfs set compression=gzip-6 tank/a/b\n"),
        "{history}"
    );
    let line = history.lines().nth(1).unwrap();
    assert_eq!(&line[10..11], ".", "YYYY-MM-DD.HH:MM:SS: {line}");
}

#[test]
fn a_pool_last_active_elsewhere_needs_force() {
    let env = Env::new();
    let a = env.vdev("a", 128 * MIB);
    let dir = env.vdev_dir();
    env.ok(&["zpool", "create", "tank", &a]);
    env.ok(&["zfs", "create", "tank/fs"]);
    // A crash, and the cache file lost: the labels still say Active.
    env.kill_daemon();
    std::fs::remove_file(env.cachefile()).unwrap();
    assert!(env.pools().is_empty());
    let listing = env.ok(&["zpool", "import", "-d", &dir]);
    assert!(
        listing.contains("last accessed by another system"),
        "{listing}"
    );
    let err = env.fail(&["zpool", "import", "-d", &dir, "tank"]);
    assert!(
        err.starts_with("cannot import 'tank': pool was previously in use from another system"),
        "{err}"
    );
    assert!(err.contains("zpool import -f"), "{err}");
    assert!(env.pools().is_empty());
    env.ok(&["zpool", "import", "-f", "-d", &dir, "tank"]);
    assert_eq!(env.datasets(), ["tank", "tank/fs"]);
    // Importing what is already imported names the clash.
    let err = env.fail(&["zpool", "import", "-d", &dir, "tank"]);
    assert!(
        err.contains("a pool with that name already exists"),
        "{err}"
    );
}

#[test]
fn a_killed_daemon_comes_back_with_its_pools() {
    let env = Env::new();
    let a = env.vdev("a", 128 * MIB);
    let b = env.vdev("b", 128 * MIB);
    let c = env.vdev("c", 128 * MIB);
    env.ok(&["zpool", "create", "tank", "mirror", &a, &b]);
    env.ok(&["zpool", "create", "other", &c]);
    env.ok(&["zfs", "create", "-p", "-o", "atime=off", "tank/x/y"]);
    let before = env.daemon_pid().unwrap();
    env.kill_daemon();
    // The next command starts a new daemon, which re-imports from the cache.
    assert_eq!(env.pools(), ["other", "tank"]);
    assert_ne!(env.daemon_pid().unwrap(), before);
    assert_eq!(env.datasets(), ["other", "tank", "tank/x", "tank/x/y"]);
    assert_eq!(env.get("atime", "tank/x/y"), "off");
    let status = env.ok(&["zpool", "status", "tank"]);
    assert!(status.contains(" state: ONLINE"), "{status}");
    // A clean stop and start keeps them too.
    env.ok(&["zpool", "export", "other"]);
    assert!(env.stop_daemon(), "daemon did not stop");
    assert_eq!(env.pools(), ["tank"]);
}

#[test]
fn dry_run_validates_and_creates_nothing() {
    let env = Env::new();
    let a = env.vdev("a", 128 * MIB);
    let b = env.vdev("b", 128 * MIB);
    let before = common::label_bytes(&a);
    let out = env.ok(&["zpool", "create", "-n", "tank", "mirror", &a, &b]);
    assert!(
        out.starts_with("would create 'tank' with the following layout:\n"),
        "{out}"
    );
    assert!(out.contains("\t  mirror\n"), "{out}");
    assert!(env.pools().is_empty());
    assert_eq!(common::label_bytes(&a), before, "a dry run wrote labels");
    let missing = env.path("missing");
    let err = env.fail(&["zpool", "create", "-n", "tank", "mirror", &a, &missing]);
    assert!(err.contains("No such file or directory"), "{err}");
    env.ok(&["zpool", "create", "tank", "mirror", &a, &b]);
    let verbose = env.ok(&[
        "zpool",
        "list",
        "-v",
        "-H",
        "-p",
        "-o",
        "name,size,health",
        "tank",
    ]);
    let lines: Vec<&str> = verbose.lines().collect();
    assert_eq!(lines.len(), 4, "{verbose}");
    assert!(lines[1].starts_with("  mirror-0\t"), "{verbose}");
    assert!(lines[2].starts_with(&format!("    {a}\t")), "{verbose}");
}

#[test]
fn a_pool_whose_device_is_late_stays_in_the_cache_file() {
    let env = Env::new();
    let a = env.vdev("a", 128 * MIB);
    env.ok(&["zpool", "create", "tank", &a]);
    assert!(env.stop_daemon(), "daemon did not stop");
    let away = env.path("away");
    std::fs::rename(&a, &away).unwrap();
    // The daemon starts without the pool, says why, and forgets nothing.
    assert!(env.pools().is_empty());
    let log = std::fs::read_to_string(env.run_dir().join("daemon.log")).unwrap();
    assert!(log.contains("cannot re-import pool 'tank'"), "{log}");
    let cache = std::fs::read_to_string(env.cachefile()).unwrap();
    assert!(cache.contains("\"tank\""), "{cache}");
    assert!(env.stop_daemon(), "daemon did not stop");
    std::fs::rename(&away, &a).unwrap();
    assert_eq!(env.pools(), ["tank"]);
    // An exported pool is not re-imported, and leaves the cache file.
    env.ok(&["zpool", "export", "tank"]);
    assert!(env.stop_daemon(), "daemon did not stop");
    assert!(env.pools().is_empty());
}
