//! End-to-end: device states through the real `tarn` binary and a real
//! FUSE mount — `zpool offline [-t]`/`online` of mirror sides with writes
//! in between, offline refused without replicas, offline surviving export
//! and daemon restart (and `-t` not), import with devices missing (mirror
//! and raidz1, DEGRADED or refused), a device that fails while running
//! (FAULTED, the pool keeps serving, `zpool clear` brings it back), and a
//! single-device pool whose device fails under `failmode=continue` (EIO)
//! and `failmode=wait` (writers wait for `zpool clear`), and readers of a
//! device that stops answering (wait for `zpool clear`, or EIO).

mod common;

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{wait_resilvered, Env, Mounted, Tmpfs, MIB};

fn status(env: &Env, pool: &str) -> String {
    env.ok(&["zpool", "status", pool])
}

/// The `zpool status` line of the vdev named `name`.
fn line<'a>(st: &'a str, name: &str) -> &'a str {
    st.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no line for {name} in\n{st}"))
}

fn state_of(st: &str, name: &str) -> String {
    line(st, name)
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string()
}

fn pool_state(st: &str) -> String {
    st.lines()
        .find_map(|l| l.trim_start().strip_prefix("state: "))
        .unwrap_or_else(|| panic!("no state in\n{st}"))
        .to_string()
}

/// Distinct contents for file `i`.
fn contents(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7 % 251) as u8).collect()
}

/// Writes file `name` of `len` bytes under `dir` and fsyncs it.
fn write_file(dir: &Path, name: &str, i: usize, len: usize) -> std::io::Result<()> {
    let mut f = std::fs::File::create(dir.join(name))?;
    f.write_all(&contents(i, len))?;
    f.sync_all()
}

fn check_file(dir: &Path, name: &str, i: usize, len: usize) {
    let got = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("read {name}: {e}"));
    assert!(got == contents(i, len), "{name} has the wrong contents");
}

/// The files `offline_and_online_a_mirror_side_with_writes_in_between`
/// wrote before and while a side was away.
fn check_written(root: &Path) {
    check_file(root, "before", 1, 3 * MIB as usize);
    for i in 0..4 {
        check_file(root, &format!("during{i}"), 10 + i, MIB as usize + 4096 * i);
    }
}

/// Commits a txg now (an administrative change waits for its txg).
fn commit(env: &Env, pool: &str, n: usize) {
    env.ok(&["zfs", "set", &format!("org.tarn:test={n}"), pool]);
}

#[test]
fn offline_and_online_a_mirror_side_with_writes_in_between() {
    let m = Mounted::new("tank", &["mirror", "a", "b"], 128 * MIB);
    let env = &m.env;
    let (a, b) = (env.path("a"), env.path("b"));
    let root = m.root();
    write_file(&root, "before", 1, 3 * MIB as usize).unwrap();
    env.ok(&["zpool", "offline", "tank", &b]);
    let st = status(env, "tank");
    assert_eq!(pool_state(&st), "DEGRADED", "{st}");
    assert_eq!(state_of(&st, &b), "OFFLINE", "{st}");
    assert_eq!(state_of(&st, "mirror-0"), "DEGRADED", "{st}");
    assert!(
        st.contains("status: One or more devices has been taken offline by the administrator."),
        "{st}"
    );
    assert!(
        st.contains("action: Online the device using 'zpool online'"),
        "{st}"
    );
    // Writes while b is away land on a only.
    for i in 0..4 {
        write_file(
            &root,
            &format!("during{i}"),
            10 + i,
            MIB as usize + 4096 * i,
        )
        .unwrap();
        commit(env, "tank", i);
    }
    // The last good copy cannot go.
    let err = env.fail(&["zpool", "offline", "tank", &a]);
    assert!(
        err.contains(&format!("cannot offline {a}: no valid replicas")),
        "{err}"
    );
    env.ok(&["zpool", "online", "tank", "b"]);
    // b is resilvered at once: what it missed is copied to it, and it
    // is a full copy again (its DTL is empty).
    let st = wait_resilvered(env, "tank");
    assert_eq!(state_of(&st, &b), "ONLINE", "{st}");
    assert!(!st.contains("resilvering"), "{st}");
    assert!(st.contains(" with 0 errors on "), "{st}");
    // So a may go now, and b alone serves everything.
    env.ok(&["zpool", "offline", "-t", "tank", &a]);
    check_written(&root);
    env.ok(&["zpool", "online", "tank", &a]);
    wait_resilvered(env, "tank");
    // Every block reads back right, whichever side serves it; the same
    // after an export and import, with every cache gone.
    write_file(&root, "after", 20, MIB as usize).unwrap();
    for round in 0..2 {
        check_written(&root);
        check_file(&root, "after", 20, MIB as usize);
        if round == 0 {
            m.remount();
        }
    }
    let st = status(env, "tank");
    assert_eq!(state_of(&st, &a), "ONLINE", "{st}");
    assert!(line(&st, &a).split_whitespace().nth(2) == Some("0"), "{st}");
    let history = env.ok(&["zpool", "history", "tank"]);
    assert!(
        history.contains(&format!("zpool offline tank {b}")),
        "{history}"
    );
    assert!(history.contains("zpool online tank b"), "{history}");
}

#[test]
fn offline_is_refused_without_enough_replicas() {
    let env = Env::new();
    let s = env.vdev("s", 128 * MIB);
    env.ok(&["zpool", "create", "single", &s]);
    let err = env.fail(&["zpool", "offline", "single", &s]);
    assert_eq!(err.trim(), format!("cannot offline {s}: no valid replicas"));
    let (a, b, c) = (
        env.vdev("a", 128 * MIB),
        env.vdev("b", 128 * MIB),
        env.vdev("c", 128 * MIB),
    );
    env.ok(&["zpool", "create", "rz", "raidz1", &a, &b, &c]);
    env.ok(&["zpool", "offline", "-t", "rz", &a]);
    let err = env.fail(&["zpool", "offline", "rz", &b]);
    assert!(err.contains("no valid replicas"), "{err}");
    let st = status(&env, "rz");
    assert_eq!(state_of(&st, "raidz1-0"), "DEGRADED", "{st}");
    assert_eq!(state_of(&st, &b), "ONLINE", "{st}");
    // Not a device of the pool, or not a leaf.
    let err = env.fail(&["zpool", "offline", "rz", "raidz1-0"]);
    assert!(err.contains("operation not supported"), "{err}");
    let err = env.fail(&["zpool", "offline", "rz", "/nonexistent"]);
    assert!(err.contains("no such device in pool"), "{err}");
    env.ok(&["zpool", "destroy", "single"]);
    env.ok(&["zpool", "destroy", "rz"]);
}

#[test]
fn offline_survives_export_and_restart_but_offline_t_does_not() {
    let m = Mounted::new("tank", &["mirror", "a", "b"], 128 * MIB);
    let env = &m.env;
    let b = env.path("b");
    env.ok(&["zpool", "offline", "tank", &b]);
    write_file(&m.root(), "f", 3, MIB as usize).unwrap();
    m.remount();
    let st = status(env, "tank");
    assert_eq!(state_of(&st, &b), "OFFLINE", "after import\n{st}");
    assert!(env.stop_daemon(), "the daemon did not stop");
    let st = status(env, "tank");
    assert_eq!(state_of(&st, &b), "OFFLINE", "after a restart\n{st}");
    check_file(&m.root(), "f", 3, MIB as usize);
    env.ok(&["zpool", "online", "tank", &b]);
    env.ok(&["zpool", "offline", "-t", "tank", &b]);
    assert_eq!(state_of(&status(env, "tank"), &b), "OFFLINE");
    m.remount();
    let st = status(env, "tank");
    assert_eq!(state_of(&st, &b), "ONLINE", "-t ends at import\n{st}");
    // What it missed is resilvered at import.
    let st = wait_resilvered(env, "tank");
    assert!(!line(&st, &b).contains("resilver"), "{st}");
    check_file(&m.root(), "f", 3, MIB as usize);
}

#[test]
fn import_with_a_mirror_side_missing_is_degraded() {
    let m = Mounted::new("tank", &["mirror", "a", "b"], 128 * MIB);
    let env = &m.env;
    let (a, b) = (env.path("a"), env.path("b"));
    let dir = env.vdev_dir();
    write_file(&m.root(), "f", 5, 2 * MIB as usize).unwrap();
    env.ok(&["zpool", "export", "tank"]);
    let saved = format!("{}/../b.saved", dir);
    std::fs::rename(&b, &saved).unwrap();
    let listing = env.ok(&["zpool", "import", "-d", &dir]);
    assert!(listing.contains("state: DEGRADED"), "{listing}");
    assert!(
        listing.contains("One or more devices are missing from the system."),
        "{listing}"
    );
    let bl = line(&listing, &b);
    assert!(
        bl.contains("UNAVAIL") && bl.ends_with("cannot open"),
        "{listing}"
    );
    env.ok(&["zpool", "import", "-d", &dir, "tank"]);
    m.assert_mounted("tank");
    let st = status(env, "tank");
    assert_eq!(pool_state(&st), "DEGRADED", "{st}");
    assert!(st.contains("the label is missing or"), "{st}");
    let missing = st
        .lines()
        .find(|l| l.trim_end().ends_with(&format!("was {b}")))
        .unwrap_or_else(|| panic!("no 'was {b}' line\n{st}"));
    let guid = missing.split_whitespace().next().unwrap().to_string();
    assert!(guid.parse::<u64>().is_ok(), "{missing}");
    assert_eq!(state_of(&st, &guid), "UNAVAIL", "{st}");
    assert_eq!(state_of(&st, &a), "ONLINE", "{st}");
    check_file(&m.root(), "f", 5, 2 * MIB as usize);
    write_file(&m.root(), "g", 6, MIB as usize).unwrap();
    commit(env, "tank", 1);
    // Still missing: the pool cannot go without its last copy.
    let err = env.fail(&["zpool", "offline", "tank", &a]);
    assert!(err.contains("no valid replicas"), "{err}");
    let err = env.fail(&["zpool", "online", "tank", &guid]);
    assert!(err.contains(&format!("cannot online {guid}")), "{err}");
    // The device comes back and is brought online by its GUID.
    std::fs::rename(&saved, &b).unwrap();
    env.ok(&["zpool", "online", "tank", &guid]);
    // Back, and resilvered with what it missed.
    let st = wait_resilvered(env, "tank");
    assert_eq!(state_of(&st, &b), "ONLINE", "{st}");
    assert!(!st.contains("resilvering"), "{st}");
    m.remount();
    check_file(&m.root(), "f", 5, 2 * MIB as usize);
    check_file(&m.root(), "g", 6, MIB as usize);
}

#[test]
fn raidz1_imports_with_one_device_missing_and_refuses_two() {
    let m = Mounted::new("tank", &["raidz1", "a", "b", "c"], 128 * MIB);
    let env = &m.env;
    let dir = env.vdev_dir();
    let (b, c) = (env.path("b"), env.path("c"));
    write_file(&m.root(), "f", 7, 3 * MIB as usize).unwrap();
    env.ok(&["zpool", "export", "tank"]);
    let away = tempfile::tempdir().unwrap();
    std::fs::rename(&c, away.path().join("c")).unwrap();
    env.ok(&["zpool", "import", "-d", &dir, "tank"]);
    let st = status(env, "tank");
    assert_eq!(pool_state(&st), "DEGRADED", "{st}");
    assert_eq!(state_of(&st, "raidz1-0"), "DEGRADED", "{st}");
    check_file(&m.root(), "f", 7, 3 * MIB as usize);
    write_file(&m.root(), "g", 8, MIB as usize).unwrap();
    env.ok(&["zpool", "export", "tank"]);
    std::fs::rename(&b, away.path().join("b")).unwrap();
    let listing = env.ok(&["zpool", "import", "-d", &dir]);
    assert!(listing.contains("state: UNAVAIL"), "{listing}");
    assert!(
        listing.contains("The pool cannot be imported."),
        "{listing}"
    );
    let err = env.fail(&["zpool", "import", "-d", &dir, "tank"]);
    assert!(
        err.starts_with("cannot import 'tank': one or more devices is currently unavailable"),
        "{err}"
    );
    assert!(err.contains(&b) && err.contains(&c), "{err}");
    assert!(env.pools().is_empty());
    // Both back: everything is there.
    std::fs::rename(away.path().join("b"), &b).unwrap();
    std::fs::rename(away.path().join("c"), &c).unwrap();
    env.ok(&["zpool", "import", "-d", &dir, "tank"]);
    check_file(&m.root(), "f", 7, 3 * MIB as usize);
    check_file(&m.root(), "g", 8, MIB as usize);
}

/// A mirror whose second side lives on a tmpfs: a vdev of `size` bytes on
/// a tmpfs with room for it as written so far, plus a little.
fn mirror_with_side_on_tmpfs(env: &Env, tmpfs: &Tmpfs, pool: &str) -> (String, String) {
    let a = env.vdev("a", 128 * MIB);
    let b = tmpfs.path().join("b").to_string_lossy().into_owned();
    std::fs::File::create(&b)
        .unwrap()
        .set_len(128 * MIB)
        .unwrap();
    env.ok(&["zpool", "create", pool, "mirror", &a, &b]);
    (a, b)
}

#[test]
fn a_device_failing_while_running_is_faulted_and_cleared() {
    let env = Env::new();
    let tmpfs = Tmpfs::mount(160 * MIB);
    let (a, b) = mirror_with_side_on_tmpfs(&env, &tmpfs, "tank");
    let root = env.mountpoint("tank");
    write_file(&root, "f0", 0, MIB as usize).unwrap();
    // b's file system fills up: its writes of new blocks fail (ENOSPC).
    tmpfs.fill();
    let mut n = 1;
    while state_of(&status(&env, "tank"), &b) != "FAULTED" {
        assert!(n < 60, "b was never faulted:\n{}", status(&env, "tank"));
        write_file(&root, &format!("f{n}"), n, MIB as usize).unwrap();
        commit(&env, "tank", n);
        n += 1;
    }
    let st = status(&env, "tank");
    assert_eq!(pool_state(&st), "DEGRADED", "{st}");
    assert!(line(&st, &b).ends_with("too many errors"), "{st}");
    assert!(
        st.contains("status: One or more devices are faulted in response to persistent errors."),
        "{st}"
    );
    assert_eq!(state_of(&st, &a), "ONLINE", "{st}");
    assert!(env.daemon_log().contains("too many errors"));
    // The pool keeps serving: writes and reads.
    write_file(&root, "more", 99, MIB as usize).unwrap();
    commit(&env, "tank", 1000);
    for i in 0..n {
        check_file(&root, &format!("f{i}"), i, MIB as usize);
    }
    // The device is repaired; clear brings it back with no errors.
    tmpfs.unfill();
    env.ok(&["zpool", "clear", "tank", &b]);
    let st = status(&env, "tank");
    assert_eq!(state_of(&st, &b), "ONLINE", "{st}");
    let cols: Vec<&str> = line(&st, &b).split_whitespace().collect();
    assert_eq!(&cols[2..5], ["0", "0", "0"], "{st}");
    // What it missed is resilvered now.
    let st = wait_resilvered(&env, "tank");
    assert!(!line(&st, &b).contains("resilver"), "{st}");
    write_file(&root, "after", 100, MIB as usize).unwrap();
    commit(&env, "tank", 1001);
    check_file(&root, "after", 100, MIB as usize);
    let history = env.ok(&["zpool", "history", "tank"]);
    assert!(
        history.contains(&format!("zpool clear tank {b}")),
        "{history}"
    );
    env.ok(&["zpool", "destroy", "tank"]);
}

/// A single-device pool on a tmpfs with `failmode=mode`, mounted.
fn single_on_tmpfs(env: &Env, tmpfs: &Tmpfs, mode: &str) -> std::path::PathBuf {
    let d = tmpfs.path().join("d").to_string_lossy().into_owned();
    std::fs::File::create(&d)
        .unwrap()
        .set_len(128 * MIB)
        .unwrap();
    env.ok(&["zpool", "create", "tank", &d]);
    env.ok(&["zpool", "set", &format!("failmode={mode}"), "tank"]);
    let got = env.ok(&["zpool", "get", "-H", "-o", "value", "failmode", "tank"]);
    assert_eq!(got.trim(), mode);
    env.mountpoint("tank")
}

/// Waits (bounded) until `zpool status` says SUSPENDED.
fn wait_suspended(env: &Env) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = status(env, "tank");
        if pool_state(&st) == "SUSPENDED" {
            return st;
        }
        assert!(Instant::now() < deadline, "never suspended:\n{st}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn failmode_continue_fails_writes_with_eio_when_the_only_device_fails() {
    let env = Env::new();
    let tmpfs = Tmpfs::mount(160 * MIB);
    let root = single_on_tmpfs(&env, &tmpfs, "continue");
    write_file(&root, "kept", 1, MIB as usize).unwrap();
    commit(&env, "tank", 1);
    tmpfs.fill();
    let r = write_file(&root, "lost", 2, 4 * MIB as usize);
    assert_eq!(r.map_err(|e| e.raw_os_error()), Err(Some(libc::EIO)));
    let st = wait_suspended(&env);
    assert!(
        st.contains("status: One or more devices are faulted in response to IO failures."),
        "{st}"
    );
    assert!(
        st.contains(
            "action: Make sure the affected devices are connected, then run 'zpool clear'."
        ),
        "{st}"
    );
    // New writes fail at once; reads of what is there go on.
    let r = std::fs::File::create(root.join("new")).map(|_| ());
    assert_eq!(r.map_err(|e| e.raw_os_error()), Err(Some(libc::EIO)));
    let health = env.ok(&["zpool", "list", "-H", "-o", "health", "tank"]);
    assert_eq!(health.trim(), "SUSPENDED");
    check_file(&root, "kept", 1, MIB as usize);
    let err = env.fail(&["zpool", "export", "tank"]);
    assert!(err.contains("pool I/O is currently suspended"), "{err}");
    assert!(env.daemon_pid().is_some(), "the daemon is still there");
    // The device has room again: clear resumes the pool.
    tmpfs.unfill();
    env.ok(&["zpool", "clear", "tank"]);
    let st = status(&env, "tank");
    assert_eq!(pool_state(&st), "ONLINE", "{st}");
    write_file(&root, "new", 3, MIB as usize).unwrap();
    commit(&env, "tank", 2);
    check_file(&root, "new", 3, MIB as usize);
    check_file(&root, "kept", 1, MIB as usize);
    assert!(env.daemon_log().contains("I/O suspended"));
    env.ok(&["zpool", "export", "tank"]);
}

#[test]
fn failmode_wait_holds_writers_until_clear() {
    let env = Env::new();
    let tmpfs = Tmpfs::mount(160 * MIB);
    let root = single_on_tmpfs(&env, &tmpfs, "wait");
    tmpfs.fill();
    let writer = {
        let root = root.clone();
        std::thread::spawn(move || write_file(&root, "waits", 4, 4 * MIB as usize))
    };
    wait_suspended(&env);
    assert!(!writer.is_finished(), "the writer returned while suspended");
    tmpfs.unfill();
    env.ok(&["zpool", "clear", "tank"]);
    writer
        .join()
        .unwrap()
        .expect("the write completes after clear");
    check_file(&root, "waits", 4, 4 * MIB as usize);
    assert_eq!(pool_state(&status(&env, "tank")), "ONLINE");
    env.ok(&["zpool", "export", "tank"]);
}

/// Waits (bounded) for a reader thread; `None` when it is still blocked.
fn joined<T>(
    h: std::thread::JoinHandle<T>,
    within: Duration,
) -> Result<T, std::thread::JoinHandle<T>> {
    let deadline = Instant::now() + within;
    while !h.is_finished() {
        if Instant::now() >= deadline {
            return Err(h);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(h.join().expect("reader thread"))
}

/// A read whose only device stops answering (ENXIO) suspends the pool
/// under `failmode=wait`: the reader waits for `zpool clear` and then gets
/// the right bytes. Under `failmode=continue` it gets EIO at once; a
/// device that answers with an I/O error is never waited for.
#[test]
fn failmode_wait_holds_readers_of_a_device_that_stops_answering() {
    let m = Mounted::with_options("tank", &["a"], 128 * MIB, &["-O", "atime=off"]);
    let env = &m.env;
    for (i, name) in ["f", "g", "h"].iter().enumerate() {
        write_file(&m.root(), name, 60 + i, 2 * MIB as usize).unwrap();
    }
    // Cold: the blocks must come from the device.
    m.remount();
    let root = m.root();
    let reader = |name: &'static str| {
        let root = root.clone();
        std::thread::spawn(move || std::fs::read(root.join(name)))
    };
    env.ok(&["zinject", "-d", "a", "-e", "nxio", "tank"]);
    let waiting = reader("f");
    wait_suspended(env);
    let waiting = match joined(waiting, Duration::from_secs(2)) {
        Ok(r) => panic!(
            "the reader returned while suspended: {:?}",
            r.map(|b| b.len())
        ),
        Err(h) => h,
    };
    let st = status(env, "tank");
    assert!(
        st.contains(
            "action: Make sure the affected devices are connected, then run 'zpool clear'."
        ),
        "{st}"
    );
    env.ok(&["zinject", "-c", "all"]);
    env.ok(&["zpool", "clear", "tank"]);
    let got = joined(waiting, Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("the reader still waits after clear"))
        .expect("the read completes after clear");
    assert!(got == contents(60, 2 * MIB as usize), "f read back wrong");
    assert_eq!(pool_state(&status(env, "tank")), "ONLINE");
    assert!(env
        .daemon_log()
        .contains("reads wait until the device is back"));

    // An I/O error is no reason to wait: EIO, and the pool runs on.
    env.ok(&["zinject", "-d", "a", "-e", "io", "-T", "read", "tank"]);
    let r = joined(reader("g"), Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("a read that failed with EIO waits"));
    assert_eq!(
        r.map(|_| ()).map_err(|e| e.raw_os_error()),
        Err(Some(libc::EIO))
    );
    assert_ne!(pool_state(&status(env, "tank")), "SUSPENDED");
    env.ok(&["zinject", "-c", "all"]);
    env.ok(&["zpool", "clear", "tank"]);

    // failmode=continue: the reader of an unreachable device gets EIO.
    env.ok(&["zpool", "set", "failmode=continue", "tank"]);
    env.ok(&["zinject", "-d", "a", "-e", "nxio", "tank"]);
    let r = joined(reader("h"), Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("a read under failmode=continue waits"));
    assert_eq!(
        r.map(|_| ()).map_err(|e| e.raw_os_error()),
        Err(Some(libc::EIO))
    );
    env.ok(&["zinject", "-c", "all"]);
    env.ok(&["zpool", "clear", "tank"]);
    check_file(&m.root(), "h", 62, 2 * MIB as usize);

    // A daemon asked to stop does not wait for the device: the waiting
    // reader gets an error.
    env.ok(&["zpool", "set", "failmode=wait", "tank"]);
    env.ok(&["zinject", "-d", "a", "-e", "nxio", "tank"]);
    let waiting = reader("g");
    wait_suspended(env);
    assert!(env.stop_daemon(), "the daemon hangs on a suspended pool");
    let r = joined(waiting, Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("the reader still waits after the daemon stopped"));
    assert!(r.is_err(), "a read of an unreachable device succeeded");
}

#[test]
fn a_deleted_mirror_side_is_removed_and_the_pool_keeps_serving() {
    let m = Mounted::new("tank", &["mirror", "a", "b"], 128 * MIB);
    let env = &m.env;
    let b = env.path("b");
    write_file(&m.root(), "f", 9, MIB as usize).unwrap();
    std::fs::remove_file(&b).unwrap();
    write_file(&m.root(), "g", 10, MIB as usize).unwrap();
    commit(env, "tank", 1);
    let st = status(env, "tank");
    assert_eq!(state_of(&st, &b), "REMOVED", "{st}");
    assert_eq!(pool_state(&st), "DEGRADED", "{st}");
    assert!(
        st.contains("status: One or more devices has been removed by the administrator."),
        "{st}"
    );
    let err = env.fail(&["zpool", "online", "tank", &b]);
    assert!(err.contains("does not answer"), "{err}");
    check_file(&m.root(), "f", 9, MIB as usize);
    check_file(&m.root(), "g", 10, MIB as usize);
    // Gone for good: the next import finds the pool DEGRADED.
    m.remount();
    let st = status(env, "tank");
    assert_eq!(pool_state(&st), "DEGRADED", "{st}");
    assert!(st.contains(&format!("was {b}")), "{st}");
    check_file(&m.root(), "g", 10, MIB as usize);
}

/// Four 2-way mirrors losing disks one by one: every first loss is
/// survived; a second loss is survived exactly when it is in another
/// mirror; the pool says UNAVAIL (and imports nothing) when a mirror has
/// lost both sides, and every file reads back whenever it imports.
#[test]
fn four_mirrors_survive_exactly_the_losses_the_maths_allows() {
    let names = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let layout = [
        "mirror", "a", "b", "mirror", "c", "d", "mirror", "e", "f", "mirror", "g", "h",
    ];
    let m = Mounted::new("tank", &layout, 128 * MIB);
    let env = &m.env;
    let dir = env.vdev_dir();
    for i in 0..8usize {
        write_file(&m.root(), &format!("f{i}"), 40 + i, MIB as usize).unwrap();
    }
    env.ok(&["zpool", "export", "tank"]);
    let away = tempfile::tempdir().unwrap();
    let take = |n: &str| std::fs::rename(env.path(n), away.path().join(n)).unwrap();
    let give = |n: &str| std::fs::rename(away.path().join(n), env.path(n)).unwrap();
    let imports = || {
        let r = env.run(&["zpool", "import", "-d", &dir, "tank"]);
        if r.code != 0 {
            assert!(
                r.stderr
                    .contains("one or more devices is currently unavailable"),
                "{}",
                r.stderr
            );
            return false;
        }
        for i in 0..8usize {
            check_file(&m.root(), &format!("f{i}"), 40 + i, MIB as usize);
        }
        assert_eq!(pool_state(&status(env, "tank")), "DEGRADED");
        env.ok(&["zpool", "export", "tank"]);
        true
    };
    // Every single loss.
    for n in names {
        take(n);
        assert!(imports(), "losing {n} alone is survived");
        give(n);
    }
    // Pairs: a first loss in mirror-0, the second anywhere else.
    for (first, second, survives) in [
        ("a", "b", false),
        ("b", "a", false),
        ("a", "c", true),
        ("b", "e", true),
        ("a", "h", true),
        ("g", "h", false),
        ("d", "f", true),
    ] {
        take(first);
        take(second);
        assert_eq!(imports(), survives, "losing {first} and {second}");
        give(first);
        give(second);
    }
    // One from every mirror at once is still survived.
    for n in ["a", "d", "e", "h"] {
        take(n);
    }
    assert!(imports(), "one side of each mirror");
    for n in ["a", "d", "e", "h"] {
        give(n);
    }
    env.ok(&["zpool", "import", "-d", &dir, "tank"]);
}
