//! End-to-end: `zpool attach` and `zpool replace` through the real binary
//! and a real mount. The new device is resilvered — every older block is
//! copied to it from the healthy side — while writes go on, `zpool status`
//! shows the resilver, and afterwards the new device alone holds every
//! file. Bad requests are refused with zpool(8)'s words.

mod common;

use common::{check_files, wait_resilvered, Env, Mounted, Writer, MIB};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

const VDEV: u64 = 256 * MIB;

fn random(seed: u64, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

fn write_files(m: &Mounted, prefix: &str, n: u64) -> Vec<(String, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let path = m.root().join(format!("{prefix}{i}")).display().to_string();
            let data = random(i + prefix.len() as u64 * 1000, MIB as usize);
            std::fs::write(&path, &data).unwrap();
            (path, data)
        })
        .collect()
}

/// The NAME column of the vdev tree of `zpool status POOL`.
fn tree_names(env: &Env, pool: &str) -> Vec<String> {
    common::tree_names(&env.ok(&["zpool", "status", pool]))
}

#[test]
fn attach_turns_a_single_device_into_a_mirror_and_resilvers_it() {
    let m = Mounted::new("tank", &["a"], VDEV);
    let files = write_files(&m, "f", 24);
    let (a, b) = (m.env.path("a"), m.env.path("b"));
    std::fs::File::create(&b).unwrap().set_len(VDEV).unwrap();
    m.env.ok(&["zpool", "attach", "-w", "tank", &a, &b]);
    let status = m.env.ok(&["zpool", "status", "tank"]);
    assert!(status.contains("scan: resilvered "), "{status}");
    assert!(status.contains(" with 0 errors on "), "{status}");
    assert!(!status.contains("scan: resilvered 0B"), "{status}");
    assert!(!status.contains("(resilvering)"), "{status}");
    assert_eq!(tree_names(&m.env, "tank"), ["tank", "mirror-0", &a, &b]);
    assert!(status.contains("errors: No known data errors"), "{status}");
    // A scrub finds both sides whole, and no checksum error was counted
    // for the blocks the new side did not have yet.
    m.env.ok(&["zpool", "scrub", "-w", "tank"]);
    let status = m.env.ok(&["zpool", "status", "-p", "tank"]);
    assert!(status.contains("scan: scrub repaired 0B"), "{status}");
    for leaf in [&a, &b] {
        let line = status.lines().find(|l| l.contains(leaf.as_str())).unwrap();
        assert!(line.ends_with(" 0     0     0"), "{line}");
    }
    // The new device alone holds every file.
    m.env.ok(&["zpool", "detach", "tank", &a]);
    m.remount();
    assert_eq!(tree_names(&m.env, "tank"), ["tank", &b]);
    check_files(&files);
    let history = m.env.ok(&["zpool", "history", "tank"]);
    assert!(
        history.contains(&format!("zpool attach tank {a} {b}")),
        "{history}"
    );
}

#[test]
fn replace_under_writes_resilvers_then_detaches_the_old_device() {
    let m = Mounted::new("tank", &["mirror", "a", "b"], VDEV);
    let mut files = write_files(&m, "f", 24);
    let (a, b, c) = (m.env.path("a"), m.env.path("b"), m.env.path("c"));
    std::fs::File::create(&c).unwrap().set_len(VDEV).unwrap();
    // A writer keeps going during the resilver.
    let writer = Writer::spawn(m.root(), 64, 50_000, false);
    m.env.ok(&["zpool", "replace", "tank", &b, &c]);
    let status = wait_resilvered(&m.env, "tank");
    files.extend(writer.stop());
    assert!(status.contains(" with 0 errors on "), "{status}");
    // The old device left by itself.
    let t0 = std::time::Instant::now();
    while tree_names(&m.env, "tank") != ["tank", "mirror-0", &a, &c] {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "{:?}",
            tree_names(&m.env, "tank")
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    check_files(&files);
    m.env.ok(&["zpool", "scrub", "-w", "tank"]);
    let status = m.env.ok(&["zpool", "status", "tank"]);
    assert!(status.contains("scan: scrub repaired 0B"), "{status}");
    // c alone holds everything, including what was written meanwhile.
    m.env.ok(&["zpool", "detach", "tank", &a]);
    m.remount();
    check_files(&files);
    // The replaced device no longer belongs to the pool: it can be reused.
    m.env.ok(&["zpool", "create", "other", &b]);
    m.env.ok(&["zpool", "destroy", "other"]);
}

#[test]
fn attach_and_replace_refuse_what_cannot_work() {
    let m = Mounted::new("tank", &["raidz1", "a", "b", "c"], VDEV);
    let (a, d) = (m.env.path("a"), m.env.path("d"));
    std::fs::File::create(&d).unwrap().set_len(VDEV).unwrap();
    let e = m.env.fail(&["zpool", "attach", "tank", &a, &d]);
    assert!(
        e.contains(&format!("cannot attach {a}"))
            && e.contains("can only attach to mirrors and top-level disks"),
        "{e}"
    );
    let e = m.env.fail(&["zpool", "attach", "tank", "/no/such", &d]);
    assert!(e.contains("no such device in pool"), "{e}");
    let e = m
        .env
        .fail(&["zpool", "attach", "tank", &a, &m.env.path("b")]);
    assert!(e.contains("is part of active pool 'tank'"), "{e}");
    let e = m.env.fail(&["zpool", "attach", "nosuch", &a, &d]);
    assert!(e.contains("cannot open 'nosuch': no such pool"), "{e}");
    // Too small for the vdev.
    let m2 = Mounted::new("small", &["x"], VDEV);
    let tiny = m2.env.path("tiny");
    std::fs::File::create(&tiny)
        .unwrap()
        .set_len(VDEV / 2)
        .unwrap();
    let e = m2
        .env
        .fail(&["zpool", "attach", "small", &m2.env.path("x"), &tiny]);
    assert!(e.contains("device is too small"), "{e}");
    // Nothing changed.
    assert_eq!(tree_names(&m2.env, "small"), ["small", &m2.env.path("x")]);
}

#[test]
fn replace_of_a_raidz_member_rebuilds_its_column_from_parity() {
    let m = Mounted::new("tank", &["raidz1", "a", "b", "c"], VDEV);
    let files = write_files(&m, "f", 24);
    let (a, b, c, d) = (
        m.env.path("a"),
        m.env.path("b"),
        m.env.path("c"),
        m.env.path("d"),
    );
    std::fs::File::create(&d).unwrap().set_len(VDEV).unwrap();
    m.env.ok(&["zpool", "replace", "-w", "tank", &b, &d]);
    let status = m.env.ok(&["zpool", "status", "tank"]);
    assert!(status.contains("scan: resilvered "), "{status}");
    assert!(status.contains(" with 0 errors on "), "{status}");
    assert_eq!(tree_names(&m.env, "tank"), ["tank", "raidz1-0", &a, &d, &c]);
    check_files(&files);
    // d holds its column: a scrub, which reads every column, finds nothing.
    m.remount();
    m.env.ok(&["zpool", "scrub", "-w", "tank"]);
    let status = m.env.ok(&["zpool", "status", "-p", "tank"]);
    assert!(status.contains("scan: scrub repaired 0B"), "{status}");
    let line = status.lines().find(|l| l.contains(d.as_str())).unwrap();
    assert!(line.ends_with(" 0     0     0"), "{line}");
    check_files(&files);
    // b left the pool: it can be used again.
    m.env.ok(&["zpool", "create", "other", &b]);
    m.env.ok(&["zpool", "destroy", "other"]);
}

#[test]
fn a_resilver_resumes_after_the_daemon_is_killed() {
    let m = Mounted::new("tank", &["a"], VDEV);
    let files = write_files(&m, "f", 32);
    let (a, b) = (m.env.path("a"), m.env.path("b"));
    std::fs::File::create(&b).unwrap().set_len(VDEV).unwrap();
    // A slow source disk, so that the resilver is still running when the
    // daemon dies.
    m.env.ok(&["zinject", "-d", &a, "-D", "30", "tank"]);
    m.env.ok(&["zpool", "attach", "tank", &a, &b]);
    let st = m.env.ok(&["zpool", "status", "tank"]);
    assert!(st.contains("resilver in progress since"), "{st}");
    assert!(st.contains("(resilvering)"), "{st}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    m.env.kill_daemon();
    // The next command starts the daemon; it imports the pool and resumes
    // the resilver by itself (the injected latency died with the old one).
    let st = wait_resilvered(&m.env, "tank");
    assert!(st.contains(" with 0 errors on "), "{st}");
    assert!(!st.contains("(resilvering)"), "{st}");
    // b alone holds every file.
    m.env.ok(&["zpool", "detach", "tank", &a]);
    m.remount();
    check_files(&files);
}

fn pool_size(env: &Env, pool: &str) -> u64 {
    env.ok(&["zpool", "list", "-Hp", "-o", "size", pool])
        .trim()
        .parse()
        .unwrap()
}

fn avail(env: &Env, ds: &str) -> u64 {
    env.ok(&["zfs", "list", "-Hp", "-o", "avail", ds])
        .trim()
        .parse()
        .unwrap()
}

/// Every disk of a mirror replaced by a twice larger one: with
/// `autoexpand=on` the vdev grows when the last one is resilvered, with
/// `off` only at `zpool online -e`; `zpool list` and AVAIL follow, across
/// export/import, and nothing is lost.
#[test]
fn replacing_every_disk_with_a_larger_one_grows_the_pool() {
    for auto in [true, false] {
        let m = Mounted::new("tank", &["mirror", "a", "b"], VDEV);
        let env = &m.env;
        if auto {
            env.ok(&["zpool", "set", "autoexpand=on", "tank"]);
        }
        let files = write_files(&m, "f", 8);
        let (size0, avail0) = (pool_size(env, "tank"), avail(env, "tank"));
        let (big_a, big_b) = (env.path("A"), env.path("B"));
        for p in [&big_a, &big_b] {
            std::fs::File::create(p).unwrap().set_len(2 * VDEV).unwrap();
        }
        env.ok(&["zpool", "replace", "-w", "tank", &env.path("a"), &big_a]);
        // The new device takes the old one's place.
        wait_for_leaves(env, &["tank", "mirror-0", &big_a, &env.path("b")]);
        assert_eq!(pool_size(env, "tank"), size0, "one small side left");
        env.ok(&["zpool", "replace", "-w", "tank", &env.path("b"), &big_b]);
        wait_for_leaves(env, &["tank", "mirror-0", &big_a, &big_b]);
        if !auto {
            assert_eq!(pool_size(env, "tank"), size0, "autoexpand=off");
            env.ok(&["zpool", "online", "-e", "tank", &big_b]);
        }
        wait_for_growth(env, size0);
        let size1 = pool_size(env, "tank");
        assert!(size1 > size0 * 3 / 2, "{size0} -> {size1}");
        assert!(
            avail(env, "tank") > avail0 + (size1 - size0) / 2,
            "AVAIL follows"
        );
        check_files(&files);
        m.remount();
        assert_eq!(pool_size(env, "tank"), size1, "kept across export/import");
        check_files(&files);
        // The new space is used: a file bigger than the old pool.
        let path = m.root().join("big");
        std::fs::write(&path, random(7, (size0 as usize / 2) + 32 * MIB as usize)).unwrap();
        m.env.ok(&["zpool", "scrub", "-w", "tank"]);
        let st = m.env.ok(&["zpool", "status", "tank"]);
        assert!(st.contains(" with 0 errors on "), "{st}");
    }
}

/// Until `zpool list` shows tank larger than `size0` (within 20 s).
fn wait_for_growth(env: &Env, size0: u64) {
    let t0 = std::time::Instant::now();
    while pool_size(env, "tank") == size0 {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "never grew"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn wait_for_leaves(env: &Env, want: &[&str]) {
    let t0 = std::time::Instant::now();
    loop {
        let names = tree_names(env, "tank");
        if names == want {
            return;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "{names:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_raidz_grows_when_its_last_member_is_replaced_by_a_larger_one() {
    let m = Mounted::new("tank", &["raidz1", "a", "b", "c"], VDEV);
    let env = &m.env;
    env.ok(&["zpool", "set", "autoexpand=on", "tank"]);
    let files = write_files(&m, "f", 8);
    let size0 = pool_size(env, "tank");
    for (old, new) in [("a", "A"), ("b", "B"), ("c", "C")] {
        assert_eq!(pool_size(env, "tank"), size0, "before {new}");
        let p = env.path(new);
        std::fs::File::create(&p)
            .unwrap()
            .set_len(2 * VDEV)
            .unwrap();
        env.ok(&["zpool", "replace", "-w", "tank", &env.path(old), &p]);
    }
    wait_for_growth(env, size0);
    assert!(pool_size(env, "tank") > size0 * 3 / 2);
    m.remount();
    check_files(&files);
    m.env.ok(&["zpool", "scrub", "-w", "tank"]);
    let st = m.env.ok(&["zpool", "status", "tank"]);
    assert!(
        st.contains("scrub repaired 0B") && st.contains(" with 0 errors on "),
        "{st}"
    );
}

/// Devices grown in place (here: the backing files made larger while the
/// pool runs) are used by `zpool online -e` once every side has grown.
#[test]
fn online_e_uses_devices_that_grew_in_place() {
    let m = Mounted::new("tank", &["mirror", "a", "b"], VDEV);
    let env = &m.env;
    let files = write_files(&m, "f", 4);
    let size0 = pool_size(env, "tank");
    let grow = |n: &str| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(env.path(n))
            .unwrap()
            .set_len(2 * VDEV)
            .unwrap()
    };
    grow("a");
    env.ok(&["zpool", "online", "-e", "tank", &env.path("a")]);
    assert_eq!(pool_size(env, "tank"), size0, "b is still small");
    grow("b");
    env.ok(&["zpool", "online", "-e", "tank", &env.path("b")]);
    wait_for_growth(env, size0);
    let size1 = pool_size(env, "tank");
    assert!(size1 > size0 * 3 / 2, "{size0} -> {size1}");
    m.remount();
    assert_eq!(
        pool_size(env, "tank"),
        size1,
        "the labels at the new ends hold"
    );
    check_files(&files);
    env.ok(&["zpool", "scrub", "-w", "tank"]);
    let st = env.ok(&["zpool", "status", "tank"]);
    assert!(
        st.contains("scrub repaired 0B") && st.contains(" with 0 errors on "),
        "{st}"
    );
}
