//! End-to-end: hot spares and the pairs a replace makes, through the real
//! binary and a real mount. A spare stands in for a device that faults
//! while writes go on, is resilvered, shows INUSE, survives export and
//! import, and returns when the device is cleared; a spare put in by hand
//! becomes a permanent member when the original is detached. A raidz
//! member being replaced keeps serving until its replacement is complete,
//! so the vdev never runs a member short.

mod common;

use std::time::{Duration, Instant};

use common::{check_files, noise, tree_names, wait_resilvered, Env, Mounted, Writer, MIB};

const VDEV: u64 = 192 * MIB;

fn write_files(m: &Mounted, prefix: &str, n: u64) -> Vec<(String, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let path = m.root().join(format!("{prefix}{i}")).display().to_string();
            let data = noise(MIB as usize, i * 31 + prefix.len() as u64);
            std::fs::write(&path, &data).unwrap();
            (path, data)
        })
        .collect()
}

fn status(env: &Env) -> String {
    env.ok(&["zpool", "status", "tank"])
}

/// The line of `zpool status` naming `name` (a device or `spare-1`),
/// its words one space apart; the first one, or the one under `spares`
/// when `spares`.
fn line(st: &str, name: &str, spares: bool) -> String {
    let mut lines = st.lines();
    if spares {
        lines.by_ref().find(|l| l.trim() == "spares");
    }
    lines
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no line for {name} in\n{st}"))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn make_vdevs(env: &Env, names: &[&str]) {
    for n in names {
        std::fs::File::create(env.path(n))
            .unwrap()
            .set_len(VDEV)
            .unwrap();
    }
}

/// Waits until `zpool status` satisfies `done` (within a minute).
fn wait_for(env: &Env, what: &str, done: &dyn Fn(&str) -> bool) -> String {
    let t0 = Instant::now();
    loop {
        let st = status(env);
        if done(&st) {
            return st;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "{what}:\n{st}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_spare_stands_in_for_a_faulted_raidz_member_and_returns_after_clear() {
    let m = Mounted::new("tank", &["raidz1", "a", "b", "c"], VDEV);
    let env = &m.env;
    let (b, s1, s2) = (env.path("b"), env.path("s1"), env.path("s2"));
    make_vdevs(env, &["s1", "s2"]);
    env.ok(&["zpool", "add", "tank", "spare", &s1, &s2]);
    let st = status(env);
    assert_eq!(line(&st, &s1, true), format!("{s1} AVAIL"), "{st}");
    assert_eq!(line(&st, &s2, true), format!("{s2} AVAIL"), "{st}");
    let files = write_files(&m, "f", 24);
    // b fails every I/O; writes go on until zed's rule faults it and the
    // first spare is put in.
    env.ok(&[
        "zinject", "-d", &b, "-e", "io", "-T", "all", "-f", "100", "tank",
    ]);
    let writer = Writer::spawn(m.root(), 200, 7000, true);
    let st = wait_for(env, "no spare went in", &|st| {
        st.contains("INUSE") && st.contains("scan: resilvered ")
    });
    let written = writer.stop();
    env.ok(&["zinject", "-c", "all"]);
    assert!(line(&st, &b, false).contains("FAULTED"), "{st}");
    assert!(line(&st, &b, false).ends_with("too many errors"), "{st}");
    assert_eq!(
        line(&st, &s1, true),
        format!("{s1} INUSE currently in use"),
        "{st}"
    );
    assert_eq!(line(&st, &s2, true), format!("{s2} AVAIL"), "{st}");
    assert!(
        line(&st, "spare-1", false).starts_with("spare-1 DEGRADED"),
        "{st}"
    );
    assert!(st.contains("state: DEGRADED"), "{st}");
    let names = tree_names(&st);
    let at = names.iter().position(|n| n == "spare-1").unwrap();
    assert_eq!(&names[at + 1..at + 3], [b.as_str(), s1.as_str()], "{st}");
    assert!(env.daemon_log().contains("stands in for a failed device"));
    check_files(&files);
    check_files(&written);
    // The spare holds b's column: a scrub finds everything whole.
    env.ok(&["zpool", "scrub", "-w", "tank"]);
    let st = status(env);
    assert!(st.contains("scan: scrub repaired 0B"), "{st}");
    assert!(st.contains("with 0 errors"), "{st}");
    // FAULTED, the pair and the spares survive export and import.
    m.remount();
    let st = status(env);
    assert!(line(&st, &b, false).contains("FAULTED"), "{st}");
    assert!(line(&st, &s1, true).contains("INUSE"), "{st}");
    assert!(line(&st, &s2, true).contains("AVAIL"), "{st}");
    check_files(&files);
    // b is repaired: clear brings it back, it is resilvered, and the
    // spare returns to the spares.
    env.ok(&["zpool", "clear", "tank", &b]);
    let st = wait_for(env, "the spare never returned", &|st| {
        !st.contains("spare-1") && st.contains("scan: resilvered ")
    });
    assert_eq!(line(&st, &s1, true), format!("{s1} AVAIL"), "{st}");
    assert!(st.contains("state: ONLINE"), "{st}");
    env.ok(&["zpool", "scrub", "-w", "tank"]);
    let st = status(env);
    assert!(st.contains("scan: scrub repaired 0B"), "{st}");
    check_files(&files);
    check_files(&written);
    env.ok(&["zpool", "destroy", "tank"]);
}

#[test]
fn a_spare_put_in_by_hand_stays_and_detaching_the_original_keeps_it() {
    let m = Mounted::new("tank", &["mirror", "a", "b"], VDEV);
    let env = &m.env;
    let (a, b, s) = (env.path("a"), env.path("b"), env.path("s"));
    make_vdevs(env, &["s"]);
    env.ok(&["zpool", "add", "tank", "spare", &s]);
    let files = write_files(&m, "f", 16);
    // A spare named as the new device of a replace is put in as a spare.
    env.ok(&["zpool", "replace", "tank", &a, &s]);
    let st = wait_resilvered(env, "tank");
    assert_eq!(
        tree_names(&st)[..6],
        ["tank", "mirror-0", "spare-0", &a, &s, &b]
    );
    assert!(line(&st, &s, true).contains("INUSE"), "{st}");
    // A spare cannot be removed while in use, nor replaced.
    let err = env.fail(&["zpool", "remove", "tank", &s]);
    assert!(err.contains("currently in use"), "{err}");
    // Detaching the original makes the spare a permanent member.
    env.ok(&["zpool", "detach", "tank", &a]);
    let st = status(env);
    assert_eq!(tree_names(&st), ["tank", "mirror-0", &s, &b], "{st}");
    assert!(!st.contains("spares"), "{st}");
    m.remount();
    assert_eq!(tree_names(&status(env)), ["tank", "mirror-0", &s, &b]);
    check_files(&files);
    // The detached original is free for another pool.
    env.ok(&["zpool", "create", "other", &a]);
    env.ok(&["zpool", "destroy", "other"]);
    env.ok(&["zpool", "destroy", "tank"]);
}

#[test]
fn spares_are_listed_created_removed_and_guarded() {
    let env = Env::new();
    let (a, b, s1, s2) = (
        env.vdev("a", VDEV),
        env.vdev("b", VDEV),
        env.vdev("s1", VDEV),
        env.vdev("s2", VDEV),
    );
    let dry = env.ok(&[
        "zpool", "create", "-n", "tank", "mirror", &a, &b, "spare", &s1,
    ]);
    assert!(dry.contains(&format!("\tspares\n\t  {s1}\n")), "{dry}");
    env.ok(&[
        "zpool", "create", "tank", "mirror", &a, &b, "spare", &s1, &s2,
    ]);
    let st = status(&env);
    assert!(st.contains("\tspares\n"), "{st}");
    // A spare of an imported pool is not free.
    let err = env.fail(&["zpool", "create", "other", &s1]);
    assert!(
        err.contains("is reserved as a hot spare of pool 'tank'"),
        "{err}"
    );
    let err = env.fail(&["zpool", "add", "tank", "spare", "mirror", &s1, &s2]);
    assert!(err.contains("spares are single devices"), "{err}");
    // Spares persist across export/import.
    env.ok(&["zpool", "export", "tank"]);
    env.ok(&["zpool", "import", "-d", &env.vdev_dir(), "tank"]);
    let st = status(&env);
    assert!(line(&st, &s1, true).contains("AVAIL"), "{st}");
    assert!(line(&st, &s2, true).contains("AVAIL"), "{st}");
    env.ok(&["zpool", "remove", "tank", &s2]);
    let st = status(&env);
    assert!(!st.contains(&s2), "{st}");
    // A removed spare is free again.
    env.ok(&["zpool", "create", "other", &s2]);
    env.ok(&["zpool", "destroy", "other"]);
    let history = env.ok(&["zpool", "history", "tank"]);
    assert!(history.contains(&format!("spare {s1} {s2}")), "{history}");
    env.ok(&["zpool", "destroy", "tank"]);
}

/// A raidz1 member being replaced still serves while the new device is
/// resilvered (slowed down here): another member can go offline meanwhile
/// and every file still reads back, as OpenZFS's `replacing` vdev allows.
/// When the resilver is done the old member leaves.
#[test]
fn a_raidz_member_being_replaced_keeps_serving_until_the_new_one_is_complete() {
    let m = Mounted::new("tank", &["raidz1", "a", "b", "c"], VDEV);
    let env = &m.env;
    let (a, b, c, n) = (env.path("a"), env.path("b"), env.path("c"), env.path("n"));
    make_vdevs(env, &["n"]);
    let files = write_files(&m, "f", 40);
    // 10 ms per I/O on b, which the resilver reads for every block: it
    // takes seconds.
    env.ok(&["zinject", "-d", &b, "-D", "10", "tank"]);
    env.ok(&["zpool", "replace", "tank", &c, &n]);
    let st = status(env);
    let names = tree_names(&st);
    let at = names.iter().position(|x| x == "replacing-2").expect(&st);
    assert_eq!(&names[at + 1..at + 3], [c.as_str(), n.as_str()], "{st}");
    assert!(line(&st, &n, false).ends_with("(resilvering)"), "{st}");
    assert!(st.contains("state: ONLINE"), "{st}");
    // The old member serves: a may go (with c gone at once, as a raidz1
    // short of a member, that would be refused), and everything reads
    // back. (tarn-pool's `pairs` test reads every block from the disks in
    // this state.)
    env.ok(&["zpool", "offline", "tank", &a]);
    check_files(&files);
    let st = status(env);
    assert!(
        st.contains("replacing-2"),
        "the resilver ended early:\n{st}"
    );
    env.ok(&["zpool", "online", "tank", &a]);
    env.ok(&["zinject", "-c", "all"]);
    let st = wait_for(env, "the replace never ended", &|st| {
        !st.contains("replacing-2") && !st.contains("resilvering")
    });
    assert_eq!(
        tree_names(&st),
        ["tank", "raidz1-0", &a, &env.path("b"), &n],
        "{st}"
    );
    env.ok(&["zpool", "scrub", "-w", "tank"]);
    let st = status(env);
    assert!(st.contains("scan: scrub repaired 0B"), "{st}");
    check_files(&files);
    // The old member left the pool: it is free.
    env.ok(&["zpool", "create", "other", &c]);
    env.ok(&["zpool", "destroy", "other"]);
    env.ok(&["zpool", "destroy", "tank"]);
}
