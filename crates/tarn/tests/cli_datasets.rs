//! End-to-end: datasets and their properties through the real `tarn`
//! binary — create/destroy with and without -p/-r, inheritance with SOURCE
//! strings three levels down, refused values leaving everything as it was,
//! `-H -p` and `-j` output.

mod common;

use common::{Env, MIB};

fn pool(env: &Env) {
    let a = env.vdev("a", 128 * MIB);
    let b = env.vdev("b", 128 * MIB);
    env.ok(&["zpool", "create", "tank", "mirror", &a, &b]);
}

#[test]
fn create_and_destroy_with_parents_and_recursion() {
    let env = Env::new();
    pool(&env);
    let err = env.fail(&["zfs", "create", "tank/a/b"]);
    assert_eq!(err, "cannot create 'tank/a/b': parent does not exist\n");
    env.ok(&["zfs", "create", "-p", "tank/a/b"]);
    env.ok(&["zfs", "create", "-p", "tank/a/b"]); // -p: existing is fine
    env.ok(&["zfs", "create", "tank/a-b"]);
    env.ok(&["zfs", "create", "tank/a/c"]);
    let err = env.fail(&["zfs", "create", "tank/a"]);
    assert_eq!(err, "cannot create 'tank/a': dataset already exists\n");
    let err = env.fail(&["zfs", "create", "nopool/a"]);
    assert!(
        err.starts_with("cannot create 'nopool/a': no such pool 'nopool'"),
        "{err}"
    );
    // Depth-first, siblings by name: tank/a's children before tank/a-b.
    assert_eq!(
        env.datasets(),
        ["tank", "tank/a", "tank/a/b", "tank/a/c", "tank/a-b"]
    );
    let d1 = env.ok(&["zfs", "list", "-H", "-d", "1", "-o", "name", "tank"]);
    assert_eq!(d1, "tank\ntank/a\ntank/a-b\n");
    let one = env.ok(&["zfs", "list", "-H", "-o", "name,type", "tank/a"]);
    assert_eq!(one, "tank/a\tfilesystem\n");
    let snaps = env.run(&["zfs", "list", "-H", "-t", "snapshot"]);
    assert_eq!((snaps.code, snaps.stdout.as_str()), (0, ""));

    let err = env.fail(&["zfs", "destroy", "tank/a"]);
    assert_eq!(
        err,
        "cannot destroy 'tank/a': filesystem has children\n\
         use '-r' to destroy the following datasets:\ntank/a/b\ntank/a/c\n"
    );
    assert_eq!(env.datasets().len(), 5, "a refused destroy changed nothing");
    let err = env.fail(&["zfs", "destroy", "tank/nosuch"]);
    assert_eq!(err, "cannot open 'tank/nosuch': dataset does not exist\n");
    let err = env.fail(&["zfs", "destroy", "tank"]);
    assert!(err.contains("operation does not apply to pools"), "{err}");
    env.ok(&["zfs", "destroy", "-r", "tank/a"]);
    assert_eq!(env.datasets(), ["tank", "tank/a-b"]);
    env.ok(&["zfs", "destroy", "tank/a-b"]);
    env.ok(&["zfs", "create", "-p", "tank/x/y"]);
    // -r on the pool empties it; the root stays.
    env.ok(&["zfs", "destroy", "-r", "tank"]);
    assert_eq!(env.datasets(), ["tank"]);
    let history = env.ok(&["zpool", "history", "tank"]);
    assert!(history.contains(" zfs destroy -r tank/a\n"), "{history}");
}

#[test]
fn properties_inherit_three_levels_with_sources() {
    let env = Env::new();
    pool(&env);
    env.ok(&["zfs", "create", "-p", "tank/a/b/c"]);
    let source = |ds: &str, prop: &str| {
        env.ok(&["zfs", "get", "-H", "-o", "value,source", prop, ds])
            .trim_end()
            .to_string()
    };
    assert_eq!(source("tank/a/b/c", "compression"), "on\tdefault");
    env.ok(&["zfs", "set", "compression=gzip-6", "tank"]);
    assert_eq!(
        source("tank/a/b/c", "compression"),
        "gzip-6\tinherited from tank"
    );
    env.ok(&[
        "zfs",
        "set",
        "compression=zstd-7",
        "recordsize=1M",
        "tank/a",
    ]);
    assert_eq!(
        source("tank/a/b/c", "compression"),
        "zstd-7\tinherited from tank/a"
    );
    assert_eq!(
        source("tank/a/b", "recordsize"),
        "1M\tinherited from tank/a"
    );
    assert_eq!(source("tank/a", "recordsize"), "1M\tlocal");
    assert_eq!(source("tank", "compression"), "gzip-6\tlocal");
    // -p: exact numbers; -H: tabs, no header.
    let raw = env.ok(&["zfs", "get", "-H", "-p", "recordsize", "tank/a/b/c"]);
    assert_eq!(
        raw,
        "tank/a/b/c\trecordsize\t1048576\tinherited from tank/a\n"
    );
    // -r lists every descendant in order.
    let all = env.ok(&[
        "zfs",
        "get",
        "-H",
        "-r",
        "-o",
        "name,value",
        "compression",
        "tank/a",
    ]);
    assert_eq!(
        all,
        "tank/a\tzstd-7\ntank/a/b\tzstd-7\ntank/a/b/c\tzstd-7\n"
    );
    // Mountpoints are inherited with the path below appended.
    env.ok(&["zfs", "set", "mountpoint=/mnt/x", "tank/a"]);
    assert_eq!(
        source("tank/a/b/c", "mountpoint"),
        "/mnt/x/b/c\tinherited from tank/a"
    );
    // Read-only statistics have no source.
    assert!(source("tank/a", "used").ends_with("\t-"));
    // inherit: back to the ancestor's value, then -r clears the subtree.
    env.ok(&["zfs", "set", "compression=off", "tank/a/b"]);
    env.ok(&["zfs", "inherit", "compression", "tank/a"]);
    assert_eq!(
        source("tank/a", "compression"),
        "gzip-6\tinherited from tank"
    );
    assert_eq!(
        source("tank/a/b/c", "compression"),
        "off\tinherited from tank/a/b"
    );
    env.ok(&["zfs", "inherit", "-r", "compression", "tank"]);
    assert_eq!(source("tank/a/b/c", "compression"), "on\tdefault");
    assert_eq!(source("tank", "compression"), "on\tdefault");
    // -s filters by source.
    let local = env.ok(&[
        "zfs",
        "get",
        "-H",
        "-r",
        "-s",
        "local",
        "-o",
        "name,property",
        "all",
        "tank",
    ]);
    assert_eq!(local, "tank/a\trecordsize\ntank/a\tmountpoint\n");
    let history = env.ok(&["zpool", "history", "tank"]);
    assert!(
        history.contains(" zfs set compression=zstd-7 recordsize=1048576 tank/a\n"),
        "{history}"
    );
    assert!(
        history.contains(" zfs inherit -r compression tank\n"),
        "{history}"
    );
}

#[test]
fn refused_values_change_nothing() {
    let env = Env::new();
    pool(&env);
    env.ok(&["zfs", "create", "-o", "atime=off", "tank/a"]);
    let before = env.ok(&["zfs", "get", "-H", "-p", "all", "tank/a"]);
    let refused: [(&[&str], &str); 9] = [
        (&["recordsize=3000", "tank/a"], "bad property value"),
        (&["recordsize=32M", "tank/a"], "power of 2"),
        (&["compression=lzma", "tank/a"], "bad property value"),
        (&["atime=on", "copies=4", "tank/a"], "bad property value"),
        (&["nosuch=1", "tank/a"], "invalid property 'nosuch'"),
        (&["used=1", "tank/a"], "readonly"),
        (
            &["quota=1K", "tank/a"],
            "size is less than current used or reserved space",
        ),
        (
            &["volsize=1G", "tank/a"],
            "does not apply to datasets of this type",
        ),
        (&["readonly=yes", "tank/a"], "must be 'on' or 'off'"),
    ];
    for (args, why) in refused {
        let mut cmd = vec!["zfs", "set"];
        cmd.extend_from_slice(args);
        let err = env.fail(&cmd);
        assert!(
            err.starts_with("cannot set property for 'tank/a': "),
            "{args:?}: {err}"
        );
        assert!(err.contains(why), "{args:?}: {err}");
    }
    let err = env.fail(&["zfs", "set", "atime=on", "tank/nosuch"]);
    assert!(err.contains("dataset does not exist"), "{err}");
    let err = env.fail(&["zfs", "inherit", "quota", "tank/a"]);
    assert!(
        err.contains("'quota' property cannot be inherited"),
        "{err}"
    );
    let err = env.fail(&["zfs", "inherit", "used", "tank/a"]);
    assert!(err.contains("read-only"), "{err}");
    let err = env.fail(&["zfs", "create", "-o", "recordsize=7", "tank/b"]);
    assert!(err.starts_with("cannot create 'tank/b': "), "{err}");
    let err = env.fail(&["zfs", "get", "bogus", "tank/a"]);
    assert!(err.contains("invalid property 'bogus'"), "{err}");
    assert_eq!(env.datasets(), ["tank", "tank/a"]);
    assert_eq!(env.ok(&["zfs", "get", "-H", "-p", "all", "tank/a"]), before);
    // Valid limits are accepted and shown as zfs(8) does.
    env.ok(&["zfs", "set", "quota=64M", "reservation=1M", "tank/a"]);
    assert_eq!(env.get("quota", "tank/a"), "67108864");
    let shown = env.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "value",
        "quota,refquota",
        "tank/a",
    ]);
    assert_eq!(shown, "64M\nnone\n");
}

#[test]
fn json_output_has_the_openzfs_shape() {
    let env = Env::new();
    pool(&env);
    env.ok(&["zfs", "create", "-o", "compression=lz4", "tank/a"]);
    let get = env.ok(&["zfs", "get", "-j", "compression", "tank/a"]);
    let v: serde_json::Value = serde_json::from_str(&get).unwrap();
    let prop = &v["datasets"]["tank/a"]["properties"]["compression"];
    assert_eq!(prop["value"], "lz4", "{get}");
    assert_eq!(prop["source"]["type"], "LOCAL", "{get}");
    assert_eq!(v["output_version"]["command"], "zfs get");
    let list = env.ok(&["zfs", "list", "-j", "-p", "-r", "tank"]);
    let v: serde_json::Value = serde_json::from_str(&list).unwrap();
    let datasets = v["datasets"].as_object().unwrap();
    assert_eq!(datasets.len(), 2, "{list}");
    let avail: u64 = v["datasets"]["tank"]["properties"]["available"]["value"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(avail > 32 * MIB, "{list}");
    let status = env.ok(&["zpool", "status", "-j"]);
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(v["pools"]["tank"]["state"], "ONLINE", "{status}");
}

#[test]
fn short_property_names_and_user_properties() {
    let env = Env::new();
    pool(&env);
    env.ok(&[
        "zfs",
        "create",
        "-o",
        "recsize=16K",
        "-o",
        "compress=gzip",
        "tank/db",
    ]);
    assert_eq!(env.get("recordsize", "tank/db"), "16384");
    assert_eq!(env.get("compression", "tank/db"), "gzip");
    let out = env.ok(&[
        "zfs",
        "list",
        "-H",
        "-o",
        "name,recsize,compress",
        "tank/db",
    ]);
    assert_eq!(out, "tank/db\t16K\tgzip\n");
    let avail = env.ok(&["zfs", "list", "-Hp", "-o", "avail", "tank"]);
    let available = env.ok(&["zfs", "list", "-Hp", "-o", "available", "tank"]);
    assert_eq!(avail, available);
    assert!(avail.trim().parse::<u64>().unwrap() > 0);
    let cap = env.ok(&["zpool", "list", "-H", "-o", "cap,frag", "tank"]);
    assert_eq!(cap, "0%\t0%\n");
    env.ok(&["zfs", "inherit", "compress", "tank/db"]);
    assert_eq!(env.get("compression", "tank/db"), "on");

    // User properties: set, inherited with a SOURCE, listed by `get all`.
    env.ok(&["zfs", "set", "com.example:owner=alice", "tank"]);
    let rows = env.ok(&["zfs", "get", "-H", "com.example:owner", "tank/db"]);
    assert_eq!(
        rows,
        "tank/db\tcom.example:owner\talice\tinherited from tank\n"
    );
    let all = env.ok(&["zfs", "get", "-H", "-o", "property,value", "all", "tank/db"]);
    assert!(all.contains("com.example:owner\talice\n"), "{all}");
    env.ok(&["zfs", "set", "com.example:owner=bob", "tank/db"]);
    assert_eq!(env.get("com.example:owner", "tank/db"), "bob");
    env.ok(&["zfs", "inherit", "com.example:owner", "tank/db"]);
    assert_eq!(env.get("com.example:owner", "tank/db"), "alice");
    let unset = env.ok(&["zfs", "get", "-H", "com.example:nothing", "tank"]);
    assert_eq!(unset, "tank\tcom.example:nothing\t-\t-\n");
}
