//! End-to-end: `zpool scrub` through the real binary and a real mount. A
//! mirror with one side's data region overwritten by random bytes reads
//! back correct, the scrub repairs every block and a second scrub finds
//! nothing; a pool without redundancy whose data is damaged never returns
//! wrong bytes, and `status -v` lists the damage; the scrub verbs refuse
//! what makes no sense with zpool(8)'s words.

mod common;

use std::os::unix::fs::FileExt;

use common::{Env, Mounted, MIB};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

const VDEV: u64 = 256 * MIB;
/// The allocatable region of a leaf: after the two front labels and the
/// boot reserve (4 MiB), before the two back labels (512 KiB).
const REGION: std::ops::Range<u64> = 4 * MIB..VDEV - MIB / 2;

fn random(seed: u64, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// Overwrites `range` of a backing file with random bytes.
fn trash(path: &str, range: std::ops::Range<u64>, seed: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let mut at = range.start;
    let mut n = 0;
    while at < range.end {
        let len = (range.end - at).min(4 * MIB);
        f.write_all_at(&random(seed + n, len as usize), at).unwrap();
        at += len;
        n += 1;
    }
    f.sync_all().unwrap();
}

/// The READ, WRITE and CKSUM counters of a leaf in `zpool status -p`.
fn counters(env: &Env, pool: &str, leaf: &str) -> [u64; 3] {
    let status = env.ok(&["zpool", "status", "-p", pool]);
    let line = status
        .lines()
        .find(|l| l.split_whitespace().next() == Some(leaf))
        .unwrap_or_else(|| panic!("no {leaf} in {status}"));
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(2)
        .take(3)
        .map(|c| c.parse().unwrap())
        .collect();
    [f[0], f[1], f[2]]
}

fn scan_line(env: &Env, pool: &str) -> String {
    let status = env.ok(&["zpool", "status", pool]);
    status
        .lines()
        .find(|l| l.trim_start().starts_with("scan:"))
        .unwrap_or_else(|| panic!("no scan line in {status}"))
        .trim()
        .to_string()
}

#[test]
fn scrub_repairs_a_mirror_side_overwritten_with_random_bytes() {
    let m = Mounted::new("tank", &["mirror", "a", "b"], VDEV);
    let files: Vec<(String, Vec<u8>)> = (0..24)
        .map(|i| {
            let path = m.root().join(format!("f{i}")).display().to_string();
            let data = random(i, MIB as usize + 4096 * i as usize);
            std::fs::write(&path, &data).unwrap();
            (path, data)
        })
        .collect();
    m.env.ok(&["zpool", "export", "tank"]);
    let b = m.env.path("b");
    trash(&b, REGION, 1);
    m.env
        .ok(&["zpool", "import", "-d", &m.env.vdev_dir(), "tank"]);
    for (path, data) in &files {
        assert!(
            std::fs::read(path).unwrap() == *data,
            "{path} reads back wrong"
        );
    }
    m.env.ok(&["zpool", "scrub", "-w", "tank"]);
    let line = scan_line(&m.env, "tank");
    assert!(
        line.starts_with("scan: scrub repaired ") && line.contains(" with 0 errors on "),
        "{line}"
    );
    assert!(!line.starts_with("scan: scrub repaired 0B"), "{line}");
    let [_, _, cksum_b] = counters(&m.env, "tank", &b);
    let [_, _, cksum_a] = counters(&m.env, "tank", &m.env.path("a"));
    assert!(cksum_b > 24, "CKSUM on the damaged side: {cksum_b}");
    assert_eq!(cksum_a, 0);
    let status = m.env.ok(&["zpool", "status", "tank"]);
    assert!(status.contains("errors: No known data errors"), "{status}");
    // A second scrub finds everything in order.
    m.env.ok(&["zpool", "scrub", "-w", "tank"]);
    let line = scan_line(&m.env, "tank");
    assert!(line.starts_with("scan: scrub repaired 0B in "), "{line}");
    let [_, _, again] = counters(&m.env, "tank", &b);
    assert_eq!(again, cksum_b, "nothing new found");
    // Side a alone is now the damaged one: side b must hold every block.
    m.env.ok(&["zpool", "export", "tank"]);
    trash(&m.env.path("a"), REGION, 2);
    m.env
        .ok(&["zpool", "import", "-d", &m.env.vdev_dir(), "tank"]);
    for (path, data) in &files {
        assert!(std::fs::read(path).unwrap() == *data, "{path} after repair");
    }
    let history = m.env.ok(&["zpool", "history", "tank"]);
    assert!(history.contains("zpool scrub tank"), "{history}");
}

#[test]
fn damage_without_redundancy_is_never_returned_and_is_listed() {
    let m = Mounted::new("tank", &["a"], VDEV);
    let files: Vec<(String, Vec<u8>)> = (0..16)
        .map(|i| {
            let path = m.root().join(format!("f{i}")).display().to_string();
            let data = random(100 + i, 2 * MIB as usize);
            std::fs::write(&path, &data).unwrap();
            (path, data)
        })
        .collect();
    m.env.ok(&["zpool", "export", "tank"]);
    // The middle of the data region: some file records, perhaps some
    // metadata (which has a second copy elsewhere).
    trash(&m.env.path("a"), 12 * MIB..20 * MIB, 3);
    m.env
        .ok(&["zpool", "import", "-d", &m.env.vdev_dir(), "tank"]);
    m.env.ok(&["zpool", "scrub", "-w", "tank"]);
    let line = scan_line(&m.env, "tank");
    assert!(line.starts_with("scan: scrub repaired "), "{line}");
    assert!(
        !line.contains(" with 0 errors "),
        "the damage was found: {line}"
    );
    let status = m.env.ok(&["zpool", "status", "tank"]);
    assert!(
        status.contains("data errors, use '-v' for a list"),
        "{status}"
    );
    let verbose = m.env.ok(&["zpool", "status", "-v", "tank"]);
    assert!(
        verbose.contains("errors: Permanent errors have been detected in the following files:"),
        "{verbose}"
    );
    // Every file reads back right or fails with EIO: never wrong bytes;
    // and each lost file is listed by its path.
    let mut lost = 0;
    for (path, data) in &files {
        match std::fs::read(path) {
            Ok(got) => assert!(got == *data, "{path} returned wrong bytes"),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EIO), "{path}: {e}");
                assert!(
                    verbose.contains(&format!("        {path}\n")),
                    "{path}: {verbose}"
                );
                lost += 1;
            }
        }
    }
    assert!(lost > 0, "the damaged range held file data");
    // Deleting the damaged files and scrubbing again clears the list
    // (after a remount: the kernel keeps a deleted file's inode, and the
    // file its blocks, until it forgets the inode).
    for (path, data) in &files {
        if std::fs::read(path).map(|g| g != *data).unwrap_or(true) {
            std::fs::remove_file(path).unwrap();
        }
    }
    m.remount();
    m.env.ok(&["zpool", "scrub", "-w", "tank"]);
    let status = m.env.ok(&["zpool", "status", "-v", "tank"]);
    assert!(status.contains("errors: No known data errors"), "{status}");
}

#[test]
fn scrub_verbs_refuse_what_makes_no_sense() {
    let m = Mounted::new("tank", &["a"], VDEV);
    let e = m.env.fail(&["zpool", "scrub", "-p", "tank"]);
    assert!(
        e.contains("cannot pause scrubbing tank: there is no active scrub"),
        "{e}"
    );
    let e = m.env.fail(&["zpool", "scrub", "-s", "tank"]);
    assert!(
        e.contains("cannot cancel scrubbing tank: there is no active scrub"),
        "{e}"
    );
    let e = m.env.fail(&["zpool", "scrub", "nosuch"]);
    assert!(e.contains("cannot open 'nosuch': no such pool"), "{e}");
    let usage = |args: &[&str]| {
        let r = m.env.run(args);
        assert_ne!(r.code, 0, "{args:?} should fail");
        r.stderr
    };
    let e = usage(&["zpool", "scrub"]);
    assert!(e.contains("<POOL>"), "{e}");
    let e = usage(&["zpool", "scrub", "-p", "-s", "tank"]);
    assert!(e.contains("cannot be used with"), "{e}");
    // No scrub yet: no scan line.
    let status = m.env.ok(&["zpool", "status", "tank"]);
    assert!(!status.contains("scan:"), "{status}");
    m.env.ok(&["zpool", "scrub", "-w", "tank"]);
    assert!(scan_line(&m.env, "tank").contains("with 0 errors"));
}

#[test]
fn a_scrub_resumes_after_the_daemon_is_killed() {
    let m = Mounted::new("tank", &["mirror", "a", "b"], VDEV);
    for i in 0..32 {
        let path = m.root().join(format!("f{i}"));
        std::fs::write(&path, random(200 + i, MIB as usize)).unwrap();
    }
    m.env.ok(&["zpool", "export", "tank"]);
    trash(&m.env.path("b"), REGION, 7);
    m.env
        .ok(&["zpool", "import", "-d", &m.env.vdev_dir(), "tank"]);
    // Slow disks, so that the scrub is still running when the daemon dies.
    for leaf in ["a", "b"] {
        m.env
            .ok(&["zinject", "-d", &m.env.path(leaf), "-D", "30", "tank"]);
    }
    m.env.ok(&["zpool", "scrub", "tank"]);
    let t0 = std::time::Instant::now();
    let status = loop {
        let s = m.env.ok(&["zpool", "status", "tank"]);
        if s.contains("scrub in progress since") && s.contains(" repaired, ") {
            let repaired_some = !s.contains("\n\t0B repaired,");
            if repaired_some || t0.elapsed() > std::time::Duration::from_secs(3) {
                break s;
            }
        } else if s.contains("scan: scrub repaired") {
            panic!("the scrub finished before the daemon could be killed:\n{s}");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let started = status
        .lines()
        .find(|l| l.contains("scrub in progress since"))
        .unwrap()
        .trim()
        .to_string();
    m.env.kill_daemon();
    // The next command starts the daemon, which imports the pool and
    // resumes the scrub by itself (the injected latency died with the
    // old daemon); nobody asks for a scrub again.
    let s = m.env.ok(&["zpool", "status", "tank"]);
    assert!(
        s.contains(&started) || s.contains("scan: scrub repaired"),
        "{s}"
    );
    let t0 = std::time::Instant::now();
    loop {
        let s = m.env.ok(&["zpool", "status", "tank"]);
        if s.contains("scan: scrub repaired") {
            assert!(s.contains(" with 0 errors on "), "{s}");
            break;
        }
        assert!(s.contains(&started), "the same scrub goes on:\n{s}");
        assert!(t0.elapsed() < std::time::Duration::from_secs(120), "{s}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Everything on the trashed side was repaired by the two passes.
    m.env.ok(&["zpool", "scrub", "-w", "tank"]);
    let line = scan_line(&m.env, "tank");
    assert!(line.starts_with("scan: scrub repaired 0B in "), "{line}");
    let history = m.env.ok(&["zpool", "history", "tank"]);
    assert_eq!(history.matches("zpool scrub tank").count(), 2, "{history}");
}

/// raidzP on P+2 disks: P of them overwritten with random bytes lose
/// nothing (reads reconstruct, the scrub rewrites every damaged column);
/// P+1 damaged disks lose data, and the pool says so instead of returning
/// wrong bytes.
fn raidz_damage(parity: usize) {
    let disks: Vec<String> = (0..parity + 2).map(|i| format!("d{i}")).collect();
    let mut layout = vec![format!("raidz{parity}")];
    layout.extend(disks.iter().cloned());
    let layout: Vec<&str> = layout.iter().map(String::as_str).collect();
    let m = Mounted::new("tank", &layout, VDEV);
    let files: Vec<(String, Vec<u8>)> = (0..16)
        .map(|i| {
            let path = m.root().join(format!("f{i}")).display().to_string();
            let data = random(300 + i, MIB as usize + 8192 * i as usize);
            std::fs::write(&path, &data).unwrap();
            (path, data)
        })
        .collect();
    m.env.ok(&["zpool", "export", "tank"]);
    for (i, d) in disks.iter().take(parity).enumerate() {
        trash(&m.env.path(d), REGION, 40 + i as u64);
    }
    m.env
        .ok(&["zpool", "import", "-d", &m.env.vdev_dir(), "tank"]);
    for (path, data) in &files {
        assert!(
            std::fs::read(path).unwrap() == *data,
            "raidz{parity}: {path}"
        );
    }
    m.env.ok(&["zpool", "scrub", "-w", "tank"]);
    let line = scan_line(&m.env, "tank");
    assert!(line.contains(" with 0 errors on "), "raidz{parity}: {line}");
    assert!(!line.starts_with("scan: scrub repaired 0B"), "{line}");
    m.env.ok(&["zpool", "scrub", "-w", "tank"]);
    let line = scan_line(&m.env, "tank");
    assert!(
        line.starts_with("scan: scrub repaired 0B"),
        "raidz{parity}: {line}"
    );
    // One disk more than the parity: the same range of P+1 disks.
    m.env.ok(&["zpool", "export", "tank"]);
    for (i, d) in disks.iter().take(parity + 1).enumerate() {
        trash(&m.env.path(d), 8 * MIB..24 * MIB, 60 + i as u64);
    }
    m.env
        .ok(&["zpool", "import", "-d", &m.env.vdev_dir(), "tank"]);
    let mut lost = 0;
    for (path, data) in &files {
        match std::fs::read(path) {
            Ok(got) => assert!(got == *data, "raidz{parity}: {path} returned wrong bytes"),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EIO), "{path}: {e}");
                lost += 1;
            }
        }
    }
    assert!(lost > 0, "raidz{parity}: the damaged range held file data");
    m.env.ok(&["zpool", "scrub", "-w", "tank"]);
    let status = m.env.ok(&["zpool", "status", "-v", "tank"]);
    assert!(!status.contains(" with 0 errors on "), "{status}");
    assert!(
        status.contains("Permanent errors have been detected"),
        "{status}"
    );
}

#[test]
fn raidz1_survives_one_damaged_disk_and_reports_two() {
    raidz_damage(1);
}

#[test]
fn raidz2_survives_two_damaged_disks_and_reports_three() {
    raidz_damage(2);
}

#[test]
fn raidz3_survives_three_damaged_disks_and_reports_four() {
    raidz_damage(3);
}
