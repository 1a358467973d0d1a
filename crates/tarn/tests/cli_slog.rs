//! End-to-end: separate intent-log devices (SLOGs) and vdev changes at
//! runtime through the real `tarn` binary — `zpool add` of logs, mirrored
//! logs and data vdevs, `zpool remove` of a log under an fsync workload,
//! `zpool detach`, `zpool iostat` proving where log blocks go, and a log
//! device that fails while fsyncs keep succeeding and stay durable.

mod common;

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use common::{tree_names, Env, Mounted, Tmpfs, MIB};

/// `zpool status` of `pool`, lines trimmed at the end.
/// The line of `text` (status, import listing) that names device `path`.
fn device_line<'a>(text: &'a str, path: &str) -> &'a str {
    text.lines()
        .find(|l| l.trim_start().starts_with(path))
        .unwrap_or_else(|| panic!("no line for {path} in\n{text}"))
}

/// A mounted single-device pool `tank` with a log device `c`; the
/// directory the fsync workloads use.
fn with_log() -> (Mounted, String, PathBuf) {
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    let c = m.env.vdev("c", 128 * MIB);
    m.env.ok(&["zpool", "add", "tank", "log", &c]);
    let dir = m.root().join("load");
    (m, c, dir)
}

fn status(env: &Env, pool: &str) -> String {
    env.ok(&["zpool", "status", pool])
}

/// The rows of `zpool iostat -vHp ARGS…`: name and the six numbers
/// (alloc, free, read ops, write ops, read bytes, write bytes).
fn iostat_rows(env: &Env, args: &[&str]) -> Vec<(String, [u64; 6])> {
    let mut argv = vec!["zpool", "iostat", "-vHp"];
    argv.extend_from_slice(args);
    env.ok(&argv)
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let cells: Vec<&str> = l.split('\t').collect();
            assert_eq!(cells.len(), 7, "iostat row {l:?}");
            let mut n = [0u64; 6];
            for (i, c) in cells[1..].iter().enumerate() {
                n[i] = c.parse().unwrap_or_else(|_| panic!("number in {l:?}"));
            }
            (cells[0].to_string(), n)
        })
        .collect()
}

fn row<'a>(rows: &'a [(String, [u64; 6])], name: &str) -> &'a [u64; 6] {
    &rows
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no iostat row {name} in {rows:?}"))
        .1
}

#[test]
fn added_logs_and_data_vdevs_show_everywhere_and_survive_export_import_and_restart() {
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    let env = &m.env;
    let (a, c, d, e, h) = (
        env.path("a"),
        env.vdev("c", 128 * MIB),
        env.vdev("d", 128 * MIB),
        env.vdev("e", 128 * MIB),
        env.vdev("h", 256 * MIB),
    );
    env.ok(&["zpool", "add", "tank", "log", &c]);
    env.ok(&["zpool", "add", "tank", "log", "mirror", &d, &e]);
    // A single disk next to a single disk: the replication level matches.
    let avail = |env: &Env| env.get("available", "tank").parse::<u64>().unwrap();
    let before = avail(env);
    env.ok(&["zpool", "add", "tank", &h]);
    assert!(avail(env) > before + 200 * MIB, "AVAIL did not grow");
    let want = ["tank", &a, &h, "logs", &c, "mirror-2", &d, &e].map(str::to_string);
    let check = |when: &str| {
        let st = status(env, "tank");
        assert_eq!(tree_names(&st), want, "{when}:\n{st}");
        assert!(st.contains(" state: ONLINE"), "{when}:\n{st}");
        let list = env.ok(&["zpool", "list", "-v", "-H", "-o", "name,size", "tank"]);
        let names: Vec<&str> = list
            .lines()
            .map(|l| l.trim_start().split('\t').next().unwrap().trim())
            .collect();
        assert_eq!(
            names,
            [
                "tank",
                a.as_str(),
                h.as_str(),
                "logs",
                c.as_str(),
                "mirror-2",
                d.as_str(),
                e.as_str()
            ],
            "{when}:\n{list}"
        );
        let rows = iostat_rows(env, &["tank"]);
        let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "tank",
                a.as_str(),
                h.as_str(),
                c.as_str(),
                "mirror-2",
                d.as_str(),
                e.as_str()
            ],
            "{when}"
        );
        let text = env.ok(&["zpool", "iostat", "-v", "tank"]);
        assert!(
            text.lines()
                .any(|l| l.starts_with("logs ") && l.trim_end().ends_with('-')),
            "{when}: no logs row\n{text}"
        );
    };
    check("after add");
    // The pool grew by the data vdev only: logs do not count as space.
    let size: u64 = env
        .ok(&["zpool", "list", "-Hp", "-o", "size", "tank"])
        .trim()
        .parse()
        .unwrap();
    assert!(size > 400 * MIB && size < 512 * MIB, "size {size}");
    // Data lands on the added vdev too.
    std::fs::write(m.root().join("big"), vec![7u8; 8 << 20]).unwrap();
    env.ok(&["zpool", "export", "tank"]);
    env.ok(&["zpool", "import", "-d", &env.vdev_dir(), "tank"]);
    check("after export and import");
    assert!(env.stop_daemon(), "the daemon did not stop");
    check("after a daemon restart");
    assert_eq!(
        std::fs::read(m.root().join("big")).unwrap(),
        vec![7u8; 8 << 20]
    );
    let history = env.ok(&["zpool", "history", "tank"]);
    for line in [
        format!("zpool add tank log {c}"),
        format!("zpool add tank log mirror {d} {e}"),
        format!("zpool add tank {h}"),
    ] {
        assert!(
            history.lines().any(|l| l.ends_with(&line)),
            "{line}\n{history}"
        );
    }
}

#[test]
fn add_dry_run_shows_the_layout_and_changes_nothing() {
    let m = Mounted::new("tank", &["mirror", "a", "b"], 128 * MIB);
    let env = &m.env;
    let (a, b) = (env.path("a"), env.path("b"));
    let (c, e, f) = (
        env.vdev("c", 128 * MIB),
        env.vdev("e", 128 * MIB),
        env.vdev("f", 128 * MIB),
    );
    let before = common::label_bytes(&c);
    let out = env.ok(&["zpool", "add", "-n", "tank", "mirror", &e, &f, "log", &c]);
    let want = format!(
        "would update 'tank' to the following configuration:\n\n\
         \ttank\n\t  mirror-0\n\t    {a}\n\t    {b}\n\t  mirror\n\t    {e}\n\t    {f}\n\
         \tlogs\n\t  {c}\n"
    );
    assert_eq!(out, want);
    assert_eq!(
        tree_names(&status(env, "tank")),
        ["tank", "mirror-0", &a, &b]
    );
    assert_eq!(common::label_bytes(&c), before, "-n wrote to a device");
    // -n still refuses what the real add would.
    let err = env.fail(&["zpool", "add", "-n", "tank", &e]);
    assert!(
        err.contains("pool uses mirror and new vdev is disk"),
        "{err}"
    );
    assert!(!env.ok(&["zpool", "history", "tank"]).contains("zpool add"));
}

#[test]
fn add_remove_and_detach_refuse_what_openzfs_refuses() {
    let m = Mounted::new("tank", &["a"], 128 * MIB);
    let env = &m.env;
    let a = env.path("a");
    let small = env.vdev("small", 32 * MIB);
    let (c, d, e) = (
        env.vdev("c", 128 * MIB),
        env.vdev("d", 128 * MIB),
        env.vdev("e", 128 * MIB),
    );
    let err = env.fail(&["zpool", "add", "tank", "log", &small]);
    assert!(
        err.starts_with(
            "cannot add to 'tank': one or more devices is less than the minimum size (64M)"
        ) && err.contains(&small),
        "{err}"
    );
    let err = env.fail(&["zpool", "add", "tank", "log", "raidz", &c, &d, &e]);
    assert_eq!(
        err.trim(),
        "invalid vdev specification: unsupported 'log' device: raidz"
    );
    let err = env.fail(&["zpool", "add", "tank", "mirror", &c, &d]);
    assert_eq!(
        err.trim(),
        "invalid vdev specification\nuse '-f' to override the following errors:\n\
         mismatched replication level: pool uses disk and new vdev is mirror"
    );
    // The pool's own device, and a device of another imported pool.
    let err = env.fail(&["zpool", "add", "tank", "log", &a]);
    assert!(
        err.contains(&format!("{a} is part of active pool 'tank'")),
        "{err}"
    );
    let other = env.vdev("o", 128 * MIB);
    env.ok(&["zpool", "create", "other", &other]);
    let err = env.fail(&["zpool", "add", "-f", "tank", "log", &other]);
    assert!(
        err.contains(&format!("{other} is part of active pool 'other'")),
        "{err}"
    );
    let missing = env.path("missing");
    let err = env.fail(&["zpool", "add", "tank", "log", &missing]);
    assert!(err.contains("cannot open"), "{err}");
    let err = env.fail(&["zpool", "add", "nosuch", "log", &c]);
    assert_eq!(err.trim(), "cannot open 'nosuch': no such pool");
    // Nothing of that reached the pool.
    assert_eq!(tree_names(&status(env, "tank")), ["tank", &a]);

    let err = env.fail(&["zpool", "remove", "tank", &a]);
    assert_eq!(
        err.trim(),
        format!(
            "cannot remove {a}: only log devices can be removed: tarn does not support \
             removing top-level data vdevs yet (OpenZFS's device removal)"
        )
    );
    let err = env.fail(&["zpool", "remove", "tank", &c]);
    assert_eq!(
        err.trim(),
        format!("cannot remove {c}: no such device in pool")
    );
    let err = env.fail(&["zpool", "detach", "tank", &a]);
    assert_eq!(
        err.trim(),
        format!("cannot detach {a}: only applicable to mirror and replacing vdevs")
    );
    env.ok(&["zpool", "add", "tank", "log", "mirror", &c, &d]);
    let err = env.fail(&["zpool", "remove", "tank", &c]);
    assert!(err.contains("part of log mirror mirror-1"), "{err}");
    let err = env.fail(&["zpool", "detach", "tank", "mirror-1"]);
    assert!(
        err.contains("only applicable to mirror and replacing vdevs"),
        "{err}"
    );
    env.ok(&["zpool", "destroy", "other"]);
}

/// Rewrites 4 KiB at the start of `path` and fsyncs it until `stop`,
/// saying so on `done` after each fsync.
fn fsync_loop(path: PathBuf, stop: Arc<AtomicBool>, done: mpsc::Sender<()>) {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(&path)
        .unwrap();
    let mut i = 0u8;
    while !stop.load(Ordering::Relaxed) {
        f.write_all_at(&[i; 4096], 0).unwrap();
        f.sync_all().unwrap();
        i = i.wrapping_add(1);
        if done.send(()).is_err() {
            return;
        }
    }
}

#[test]
fn fsync_writes_land_on_the_log_device_not_the_pool() {
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    let env = &m.env;
    let (a, c) = (env.path("a"), env.vdev("c", 128 * MIB));
    env.ok(&["zpool", "add", "tank", "log", &c]);
    let before = iostat_rows(env, &["tank"]);
    assert_eq!(row(&before, &c)[3], 0, "log writes before any fsync");
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let worker = {
        let (path, stop) = (m.root().join("synced"), stop.clone());
        std::thread::spawn(move || fsync_loop(path, stop, tx))
    };
    for _ in 0..20 {
        rx.recv().expect("the fsync workload stopped");
    }
    // One report over one second of fsyncs (-y: not the one since import).
    let window = iostat_rows(env, &["-y", "tank", "1", "1"]);
    stop.store(true, Ordering::Relaxed);
    drop(rx);
    worker.join().unwrap();
    let (log, data) = (row(&window, &c), row(&window, &a));
    assert!(log[3] >= 5, "log write ops/s {log:?}");
    assert!(log[5] >= 4096 * log[3], "log write bytes/s {log:?}");
    // The pool's data vdev sees at most a txg of the same data, not the
    // stream of log blocks.
    assert!(data[5] * 2 < log[5], "data {data:?} vs log {log:?}");
    let after = iostat_rows(env, &["tank"]);
    assert!(row(&after, &c)[3] > 0, "the log device was never written");
    // The pool line sums every top-level vdev, logs included.
    assert!(row(&after, "tank")[3] >= row(&after, &c)[3]);

    // -l and -q: the waits and queues, after the six usual numbers.
    let lq = env.ok(&["zpool", "iostat", "-l", "-q", "-Hp", "tank"]);
    let cells: Vec<&str> = lq.trim_end().split('\t').collect();
    assert_eq!(cells.len(), 1 + 6 + 11 + 14, "{lq}");
    let wait = |i: usize| -> u64 { cells[i].parse().unwrap_or_else(|_| panic!("{lq}")) };
    assert!(wait(10) > 0, "disk_wait of the writes: {lq}");
    assert!(wait(8) >= wait(10), "total_wait ≥ disk_wait: {lq}");

    // zilstat: commits, records and log blocks, all on the SLOG.
    let fields = "ds,obj,cc,cwc,ic,icc,imnc,imsc,imsw";
    let out = env.ok(&["zilstat", "-d", "tank", "-f", fields, "-s", ","]);
    let mut lines = out.lines();
    assert_eq!(
        lines.next().unwrap().replace(' ', ""),
        format!("{fields},"),
        "{out}"
    );
    let cells: Vec<String> = lines
        .next()
        .unwrap_or_else(|| panic!("no dataset line in {out}"))
        .split(',')
        .map(|c| c.trim().to_string())
        .collect();
    assert_eq!(cells[0], "tank");
    assert_eq!(cells[1], env.get("objsetid", "tank"), "{out}");
    // Numbers as zilstat prints them: plain, or scaled with a suffix.
    let n = |i: usize| -> u64 {
        let c = &cells[i];
        let (digits, scale) = match c.strip_suffix('K') {
            Some(d) => (d, 1e3),
            None => match c.strip_suffix('M') {
                Some(d) => (d, 1e6),
                None => (c.as_str(), 1.0),
            },
        };
        let v: f64 = digits.parse().unwrap_or_else(|_| panic!("{c:?} in {out}"));
        (v * scale) as u64
    };
    assert!(n(2) >= 20, "fsyncs counted {out}");
    assert!(n(3) >= 1 && n(3) <= n(2), "commits that wrote: {out}");
    assert!(n(4) >= n(5) && n(5) >= 20, "records, copied writes: {out}");
    assert_eq!(n(6), 0, "no log block on the data vdev: {out}");
    assert!(n(7) >= n(3), "log blocks on the SLOG: {out}");
    // The global line sums the datasets; a bad field is refused.
    let global = env.ok(&["zilstat", "-f", "cc", "-s", ","]);
    assert_eq!(
        global
            .lines()
            .nth(1)
            .map(|l| l.trim().trim_end_matches(',')),
        Some(cells[2].as_str())
    );
    let bad = env.fail(&["zilstat", "-f", "cc,nope"]);
    assert!(bad.contains("invalid field 'nope'"), "{bad}");
    let listed = env.ok(&["zilstat", "-v"]);
    assert!(listed.contains("  cwc : Commit writer count"), "{listed}");
}

/// Writes files `f0`…`f39` under `dir` over and over with fsync, recording
/// each file's content once its fsync returned; says so on `done` and
/// waits there until the report is taken (a rendezvous channel), so that
/// it is never more than one file ahead of whoever counts the reports.
fn file_loop(
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    synced: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    done: mpsc::SyncSender<()>,
) {
    std::fs::create_dir_all(&dir).unwrap();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let name = format!("f{}", n % 40);
        let data: Vec<u8> = format!("{n} ")
            .repeat(100 + (n as usize % 300))
            .into_bytes();
        let f = std::fs::File::create(dir.join(&name)).unwrap();
        f.write_all_at(&data, 0).unwrap();
        f.sync_all().unwrap();
        synced.lock().unwrap().insert(name, data);
        n += 1;
        if done.send(()).is_err() {
            return;
        }
    }
}

/// Every synced file under `dir` reads back as written. A file that
/// cannot be read fails with the tarn mounts and the daemon's log, which
/// say whether the mount was there and served.
fn check_files(env: &Env, dir: &Path, synced: &HashMap<String, Vec<u8>>, when: &str) {
    assert!(!synced.is_empty());
    for (name, data) in synced {
        let got = std::fs::read(dir.join(name)).unwrap_or_else(|e| {
            let mounts: String = std::fs::read_to_string("/proc/self/mountinfo")
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("fuse.tarn"))
                .map(|l| format!("{l}\n"))
                .collect();
            panic!(
                "{when}: {name}: {e}\ntarn mounts:\n{mounts}daemon log:\n{}",
                env.daemon_log()
            )
        });
        assert!(&got == data, "{when}: {name} differs");
    }
}

/// Runs `file_loop` under `dir`, calls `during` after `warmup` fsyncs,
/// lets `after` more fsyncs happen and stops; returns what was synced.
/// At least `after - 1` of those fsyncs start after `during` returned.
/// With an unbounded channel the loop could run ahead of the reports, so
/// on a loaded machine the `after` reports could all be of fsyncs made
/// before `during` — most likely why
/// `a_faulted_log_device_comes_back_with_clear_and_online` once found the
/// log device it had just failed still ONLINE in CI (no log write reached
/// it while it failed).
fn with_fsync_load(
    dir: PathBuf,
    warmup: usize,
    after: usize,
    during: impl FnOnce(),
) -> HashMap<String, Vec<u8>> {
    let stop = Arc::new(AtomicBool::new(false));
    let synced = Arc::new(Mutex::new(HashMap::new()));
    let (tx, rx) = mpsc::sync_channel(0);
    let worker = {
        let (stop, synced) = (stop.clone(), synced.clone());
        std::thread::spawn(move || file_loop(dir, stop, synced, tx))
    };
    for _ in 0..warmup {
        rx.recv().expect("the fsync workload stopped");
    }
    during();
    for _ in 0..after {
        rx.recv().expect("the fsync workload stopped");
    }
    stop.store(true, Ordering::Relaxed);
    drop(rx);
    worker.join().unwrap();
    let out = synced.lock().unwrap().clone();
    out
}

#[test]
fn removing_a_log_under_fsync_load_keeps_every_write() {
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    let env = &m.env;
    let a = env.path("a");
    let (c, d) = (env.vdev("c", 128 * MIB), env.vdev("d", 128 * MIB));
    env.ok(&["zpool", "add", "tank", "log", "mirror", &c, &d]);
    let dir = m.root().join("load");
    let synced = with_fsync_load(dir.clone(), 100, 100, || {
        env.ok(&["zpool", "remove", "tank", "mirror-1"]);
    });
    check_files(env, &dir, &synced, "after the removal");
    let st = status(env, "tank");
    assert_eq!(tree_names(&st), ["tank", &a], "{st}");
    let rows = iostat_rows(env, &["tank"]);
    assert_eq!(rows.len(), 2, "{rows:?}");
    let history = env.ok(&["zpool", "history", "tank"]);
    assert!(history.contains("zpool remove tank mirror-1"), "{history}");
    m.remount();
    check_files(env, &dir, &synced, "after export and import");
    assert_eq!(tree_names(&status(env, "tank")), ["tank", &a]);
    // The removed devices belong to no pool: they are added back as new.
    env.ok(&["zpool", "add", "tank", "log", &c]);
    // A single log, removed by its device, under load again.
    let synced = with_fsync_load(dir.clone(), 50, 50, || {
        env.ok(&["zpool", "remove", "tank", &c]);
    });
    check_files(env, &dir, &synced, "after the second removal");
    assert!(env.stop_daemon(), "the daemon did not stop");
    // The next command starts a daemon, which re-imports and remounts.
    assert_eq!(tree_names(&status(env, "tank")), ["tank", &a]);
    check_files(env, &dir, &synced, "after a daemon restart");
}

#[test]
fn a_failing_log_device_is_faulted_and_fsync_stays_durable() {
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    let env = &m.env;
    let a = env.path("a");
    let slog = Tmpfs::mount(72 * MIB);
    let log = slog.path().join("log").to_string_lossy().into_owned();
    std::fs::File::create(&log)
        .unwrap()
        .set_len(64 * MIB)
        .unwrap();
    env.ok(&["zpool", "add", "tank", "log", &log]);
    let dir = m.root().join("load");
    // The log device runs out of space under the workload, and fails its
    // writes (the full tmpfs alone fails only writes to pages it never
    // held, which a log that reuses its space may not reach): its next
    // block write fails. Every fsync must still succeed.
    let synced = with_fsync_load(dir.clone(), 30, 200, || {
        slog.fill();
        env.ok(&["zinject", "-d", &log, "-e", "io", "-T", "write", "tank"]);
    });
    check_files(env, &dir, &synced, "after the log device failed");
    let st = status(env, "tank");
    assert!(st.contains(" state: DEGRADED"), "{st}");
    assert!(
        st.contains("status: One or more devices are faulted in response to persistent errors."),
        "{st}"
    );
    assert!(st.contains("action: Replace the faulted device"), "{st}");
    let log_line = device_line(&st, &log);
    assert!(
        log_line.contains("FAULTED") && log_line.ends_with("too many errors"),
        "{log_line}"
    );
    let data_line = device_line(&st, &a);
    assert!(data_line.contains("ONLINE"), "{data_line}");
    assert!(env.daemon_log().contains("faulted after an I/O error"));
    // Acknowledged means durable: a crash now loses none of it.
    env.kill_daemon();
    // The next command starts a daemon, which re-imports (claiming and
    // replaying the intent log) and remounts.
    let st = status(env, "tank");
    assert_eq!(
        tree_names(&st),
        ["tank", a.as_str(), "logs", log.as_str()],
        "{st}"
    );
    check_files(env, &dir, &synced, "after SIGKILL of the daemon");
    m.env.ok(&["zpool", "export", "tank"]);
    let slog_dir = slog.path().to_string_lossy().into_owned();
    env.ok(&[
        "zpool",
        "import",
        "-d",
        &env.vdev_dir(),
        "-d",
        &slog_dir,
        "tank",
    ]);
    check_files(env, &dir, &synced, "after export and import");
    // The dead log can still be removed.
    env.ok(&["zpool", "remove", "tank", &log]);
    assert_eq!(tree_names(&status(env, "tank")), ["tank", &a]);
    m.env.ok(&["zpool", "export", "tank"]);
}

#[test]
fn detach_takes_mirror_members_of_data_and_log_vdevs() {
    let m = Mounted::new("tank", &["mirror", "a", "b"], 128 * MIB);
    let env = &m.env;
    let (a, b) = (env.path("a"), env.path("b"));
    let (c, d) = (env.vdev("c", 128 * MIB), env.vdev("d", 128 * MIB));
    env.ok(&["zpool", "add", "tank", "log", "mirror", &c, &d]);
    std::fs::write(m.root().join("kept"), b"before detach").unwrap();
    env.ok(&["zpool", "detach", "tank", &b]);
    env.ok(&["zpool", "detach", "tank", &d]);
    let want = ["tank", a.as_str(), "logs", c.as_str()];
    assert_eq!(tree_names(&status(env, "tank")), want);
    let err = env.fail(&["zpool", "detach", "tank", &a]);
    assert_eq!(
        err.trim(),
        format!("cannot detach {a}: only applicable to mirror and replacing vdevs")
    );
    let history = env.ok(&["zpool", "history", "tank"]);
    assert!(
        history.contains(&format!("zpool detach tank {b}")),
        "{history}"
    );
    m.remount();
    assert_eq!(tree_names(&status(env, "tank")), want);
    assert_eq!(
        std::fs::read(m.root().join("kept")).unwrap(),
        b"before detach"
    );
    // The detached device is free again: it comes back as a new disk.
    env.ok(&["zpool", "add", "tank", &b]);
    assert_eq!(
        tree_names(&status(env, "tank")),
        ["tank", a.as_str(), b.as_str(), "logs", c.as_str()]
    );
}

/// A log device faulted by write errors comes back with `zpool clear`
/// once it works again (and with `zpool online`): ONLINE in status, and
/// fsyncs land on it again.
#[test]
fn a_faulted_log_device_comes_back_with_clear_and_online() {
    let (m, c, dir) = with_log();
    let env = &m.env;
    let fault = || {
        env.ok(&["zinject", "-d", &c, "-e", "io", "-T", "write", "tank"]);
    };
    let synced = with_fsync_load(dir.clone(), 10, 50, fault);
    check_files(env, &dir, &synced, "after the log device failed");
    let log_state = |env: &Env| {
        let st = status(env, "tank");
        let state = device_line(&st, &c).split_whitespace().nth(1);
        state.unwrap_or_default().to_string()
    };
    assert_eq!(log_state(env), "FAULTED");
    env.ok(&["zinject", "-c", "all"]);
    env.ok(&["zpool", "clear", "tank"]);
    assert_eq!(log_state(env), "ONLINE", "{}", status(env, "tank"));
    assert!(status(env, "tank").contains(" state: ONLINE"));
    // The log takes fsyncs again.
    let before = row(&iostat_rows(env, &["tank"]), &c)[3];
    let synced = with_fsync_load(dir.clone(), 10, 30, || {});
    check_files(env, &dir, &synced, "after clear");
    let after = row(&iostat_rows(env, &["tank"]), &c)[3];
    assert!(after > before + 10, "log writes {before} -> {after}");
    // The same through `zpool online`.
    let synced = with_fsync_load(dir.clone(), 10, 50, fault);
    check_files(env, &dir, &synced, "after the second failure");
    assert_eq!(log_state(env), "FAULTED");
    env.ok(&["zinject", "-c", "all"]);
    env.ok(&["zpool", "online", "tank", &c]);
    assert_eq!(log_state(env), "ONLINE", "{}", status(env, "tank"));
    m.remount();
    assert_eq!(log_state(env), "ONLINE");
}

/// A pool whose only log device is gone imports with `zpool import -m`
/// (as OpenZFS's): without it the import says what is missing and what
/// `-m` costs; with it the log shows UNAVAIL, the pool DEGRADED, committed
/// files are intact and fsync goes on with the in-pool log. The daemon
/// does not re-import such a pool by itself; removing the dead log makes
/// the pool import plainly again.
#[test]
fn a_pool_whose_log_device_is_gone_imports_with_m() {
    let (m, c, dir) = with_log();
    let env = &m.env;
    let synced = with_fsync_load(dir.clone(), 20, 0, || {});
    env.ok(&["zpool", "export", "tank"]);
    let away = tempfile::tempdir().unwrap();
    std::fs::rename(&c, away.path().join("c")).unwrap();
    let vdevs = env.vdev_dir();
    let listing = env.ok(&["zpool", "import", "-d", &vdevs]);
    assert!(listing.contains("logs"), "{listing}");
    assert!(device_line(&listing, &c).contains("UNAVAIL"), "{listing}");
    let err = env.fail(&["zpool", "import", "-d", &vdevs, "tank"]);
    assert!(err.contains(&c) && err.contains("zpool import -m"), "{err}");
    env.ok(&["zpool", "import", "-m", "-d", &vdevs, "tank"]);
    let st = status(env, "tank");
    assert!(st.contains(" state: DEGRADED"), "{st}");
    assert!(st.contains(&format!("was {c}")), "{st}");
    check_files(env, &dir, &synced, "after import -m");
    let synced = with_fsync_load(dir.clone(), 20, 0, || {});
    check_files(env, &dir, &synced, "fsync after import -m");
    let history = env.ok(&["zpool", "history", "tank"]);
    assert!(history.contains(" -m tank"), "{history}");
    // A crash now: the next daemon does not import it without -m.
    env.kill_daemon();
    let err = env.fail(&["zpool", "status", "tank"]);
    assert!(err.contains("no such pool"), "{err}");
    assert!(env.daemon_log().contains("zpool import -m"));
    env.ok(&["zpool", "import", "-f", "-m", "-d", &vdevs, "tank"]);
    check_files(env, &dir, &synced, "after the crash and import -f -m");
    // The dead log can be removed; then nothing is missing.
    env.ok(&["zpool", "remove", "tank", &c]);
    m.remount();
    let st = status(env, "tank");
    assert!(st.contains(" state: ONLINE"), "{st}");
    assert_eq!(tree_names(&st), ["tank", env.path("a").as_str()]);
}
