//! Snapshots through the real CLI, daemon and mount: `zfs snapshot`,
//! listing them the ways snapshot tools do (`zfs list -t snapshot`,
//! `zfs get -Hrpt snapshot`, `-d 1`, `-s`/`-S`), destroying them by name,
//! range and list with `-n -v -p`, and the errors for bad input.

mod common;

use std::io::Write;

use common::{noise, Mounted, MIB};

/// Writes `noise(len, seed)` (incompressible, so sizes are what was
/// written) to a new file.
fn write_file(path: &std::path::Path, len: usize, seed: u64) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(&noise(len, seed)).unwrap();
    // No fsync: the snapshot must still see it (the daemon flushes the
    // kernel's dirty pages first).
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

#[test]
fn snapshots_list_and_get_as_scripts_read_them() {
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    let e = &m.env;
    e.ok(&["zfs", "create", "tank/fs"]);
    e.ok(&["zfs", "create", "tank/fs/child"]);
    write_file(&m.mnt("tank/fs").join("f"), 4 * MIB as usize, 1);
    let hourly = "autosnap_2026-11-28_06:00:00_hourly";
    e.ok(&["zfs", "snapshot", "-r", &format!("tank/fs@{hourly}")]);
    let referenced: u64 = e
        .ok(&[
            "zfs",
            "get",
            "-Hpo",
            "value",
            "referenced",
            &format!("tank/fs@{hourly}"),
        ])
        .trim()
        .parse()
        .unwrap();
    assert!(
        referenced >= 4 * MIB,
        "unsynced writes are in the snapshot: {referenced}"
    );
    let syncoid = "syncoid_host_2026-11-28:06:00:00-GMT00:00";
    e.ok(&["zfs", "snapshot", &format!("tank/fs@{syncoid}")]);

    // One createtxg for everything -r made.
    let txgs = e.ok(&[
        "zfs",
        "get",
        "-Hrpt",
        "snapshot",
        "-o",
        "name,value",
        "createtxg",
        "tank/fs",
    ]);
    let rows: Vec<Vec<&str>> = txgs.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 3, "{txgs}");
    assert_eq!(rows[0][0], format!("tank/fs@{hourly}"));
    assert_eq!(rows[1][0], format!("tank/fs@{syncoid}"));
    assert_eq!(rows[2][0], format!("tank/fs/child@{hourly}"));
    assert_eq!(rows[0][1], rows[2][1], "-r snapshots share a txg");
    assert!(rows[1][1].parse::<u64>().unwrap() > rows[0][1].parse::<u64>().unwrap());

    // `zfs get -Hpd 1 -t snapshot`: the dataset's own snapshots only.
    let own = e.ok(&[
        "zfs",
        "get",
        "-Hpd",
        "1",
        "-t",
        "snapshot",
        "guid,creation,createtxg",
        "tank/fs",
    ]);
    assert_eq!(own.lines().count(), 6, "{own}");
    assert!(own.lines().all(|l| l.starts_with("tank/fs@")), "{own}");

    // `zfs list -t snapshot DS` lists DS's snapshots; -t all interleaves.
    let snaps = e.ok(&[
        "zfs", "list", "-H", "-o", "name", "-t", "snapshot", "tank/fs",
    ]);
    assert_eq!(
        lines(&snaps),
        vec![format!("tank/fs@{hourly}"), format!("tank/fs@{syncoid}")]
    );
    let all = e.ok(&[
        "zfs",
        "list",
        "-H",
        "-o",
        "name,type",
        "-t",
        "all",
        "-r",
        "tank/fs",
    ]);
    assert_eq!(
        lines(&all),
        vec![
            "tank/fs\tfilesystem".to_string(),
            format!("tank/fs@{hourly}\tsnapshot"),
            format!("tank/fs@{syncoid}\tsnapshot"),
            "tank/fs/child\tfilesystem".to_string(),
            format!("tank/fs/child@{hourly}\tsnapshot"),
        ]
    );
    // Without -t snapshots stay out unless listsnapshots is on.
    assert!(!e.ok(&["zfs", "list", "-H", "-r", "tank"]).contains('@'));
    e.ok(&["zpool", "set", "listsnapshots=on", "tank"]);
    assert!(e.ok(&["zfs", "list", "-H", "-r", "tank"]).contains('@'));

    // Sorted newest first by createtxg.
    let sorted = e.ok(&[
        "zfs",
        "list",
        "-H",
        "-o",
        "name",
        "-t",
        "snapshot",
        "-S",
        "createtxg",
        "-r",
        "tank/fs",
    ]);
    assert_eq!(lines(&sorted)[0], format!("tank/fs@{syncoid}"));
    // Snapshot columns that do not apply show `-`.
    let row = e.ok(&[
        "zfs",
        "list",
        "-H",
        "-o",
        "name,avail,mountpoint,used,written",
        &format!("tank/fs@{syncoid}"),
    ]);
    let cells: Vec<&str> = row.trim_end().split('\t').collect();
    assert_eq!(&cells[1..3], &["-", "-"], "{row}");
    // written@ and a snapshot's user property.
    e.ok(&[
        "zfs",
        "snapshot",
        "-o",
        "com.example:why=test",
        "tank/fs@tagged",
    ]);
    let why = e.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "value,source",
        "com.example:why",
        "tank/fs@tagged",
    ]);
    assert_eq!(why.trim(), "test\tlocal");
    e.ok(&["zfs", "get", "-Hp", &format!("written@{hourly}"), "tank/fs"]);
    e.ok(&[
        "zfs",
        "list",
        "-Hp",
        "-o",
        &format!("name,written@{hourly}"),
        "tank/fs",
    ]);
}

#[test]
fn destroy_by_name_range_and_list_with_dry_runs() {
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    let e = &m.env;
    e.ok(&["zfs", "create", "tank/fs"]);
    let file = m.mnt("tank/fs").join("f");
    for (i, s) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        write_file(&file, 2 * MIB as usize, 100 + 2 * i as u64);
        e.ok(&["zfs", "snapshot", &format!("tank/fs@{s}")]);
    }
    let names = |e: &common::Env| {
        e.ok(&[
            "zfs", "list", "-H", "-o", "name", "-t", "snapshot", "-r", "tank",
        ])
        .lines()
        .map(|l| l.rsplit('@').next().unwrap().to_string())
        .collect::<Vec<_>>()
    };
    // -nv: what a range would destroy and reclaim, nothing destroyed.
    let dry = e.ok(&["zfs", "destroy", "-nv", "tank/fs@b%d"]);
    let dry_lines = lines(&dry);
    assert_eq!(
        &dry_lines[..3],
        &[
            "would destroy tank/fs@b",
            "would destroy tank/fs@c",
            "would destroy tank/fs@d"
        ]
    );
    assert!(dry_lines[3].starts_with("would reclaim "), "{dry}");
    assert_eq!(names(e), ["a", "b", "c", "d", "e"]);
    // -p: machine-parsable, and the range really goes.
    let out = e.ok(&["zfs", "destroy", "-p", "tank/fs@b%c"]);
    assert_eq!(
        lines(&out)[..2],
        ["destroy\ttank/fs@b", "destroy\ttank/fs@c"]
    );
    let reclaim: u64 = lines(&out)[2]
        .strip_prefix("reclaim\t")
        .unwrap()
        .parse()
        .unwrap();
    assert!(reclaim >= 2 * MIB, "{out}");
    assert_eq!(names(e), ["a", "d", "e"]);
    // A list, with a name that is not there passed over.
    e.ok(&["zfs", "destroy", "tank/fs@a,zz"]);
    assert_eq!(names(e), ["d", "e"]);
    let none = e.fail(&["zfs", "destroy", "tank/fs@zz"]);
    assert_eq!(
        none.trim(),
        "could not find any snapshots to destroy; check snapshot names."
    );
    // A filesystem with snapshots needs -r, and the error names them.
    let busy = e.fail(&["zfs", "destroy", "tank/fs"]);
    assert!(
        busy.contains("use '-r'") && busy.contains("tank/fs@d"),
        "{busy}"
    );
    let plan = e.ok(&["zfs", "destroy", "-rnv", "tank/fs"]);
    assert_eq!(
        lines(&plan),
        [
            "would destroy tank/fs@d",
            "would destroy tank/fs@e",
            "would destroy tank/fs"
        ]
    );
    e.ok(&["zfs", "destroy", "-r", "tank/fs"]);
    assert!(names(e).is_empty());
    let freeing = e.ok(&["zpool", "get", "-Hpo", "value", "freeing", "tank"]);
    assert!(freeing.trim().parse::<u64>().is_ok(), "{freeing}");
}

#[test]
fn bad_snapshot_requests_are_refused_and_change_nothing() {
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    let e = &m.env;
    e.ok(&["zfs", "create", "tank/fs"]);
    e.ok(&["zfs", "snapshot", "tank/fs@s"]);
    let cases: &[(&[&str], &str)] = &[
        (
            &["zfs", "snapshot", "tank/fs@bad*name"],
            "invalid character '*'",
        ),
        (&["zfs", "snapshot", "tank/fs"], "missing '@' delimiter"),
        (&["zfs", "snapshot", "tank/fs@s"], "dataset already exists"),
        (
            &["zfs", "snapshot", "tank/nope@s"],
            "dataset does not exist",
        ),
        (
            &["zfs", "snapshot", "tank/fs@x", "tank/fs@y"],
            "same filesystem",
        ),
        (
            &["zfs", "snapshot", "-o", "compression=off", "tank/fs@x"],
            "only user properties",
        ),
        (&["zfs", "destroy", "tank/fs@a%%b"], "invalid"),
        (&["zfs", "list", "tank/fs@nope"], "dataset does not exist"),
    ];
    for (args, want) in cases {
        let err = e.fail(args);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let left = e.ok(&[
        "zfs", "list", "-H", "-o", "name", "-t", "snapshot", "-r", "tank",
    ]);
    assert_eq!(left.trim(), "tank/fs@s");
}

fn read(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn dot_zfs_serves_every_snapshot_read_only() {
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    let e = &m.env;
    let root = m.root();
    std::fs::create_dir(root.join("dir")).unwrap();
    write_file(&root.join("dir/f"), 3 * MIB as usize + 123, 7);
    std::os::unix::fs::symlink("dir/f", root.join("link")).unwrap();
    let before = read(&root.join("dir/f"));
    e.ok(&["zfs", "snapshot", "tank@one"]);
    write_file(&root.join("dir/f"), 1000, 8);
    std::fs::remove_file(root.join("link")).unwrap();

    let snap = root.join(".zfs/snapshot/one");
    assert_eq!(read(&snap.join("dir/f")), before, "byte-identical");
    assert_eq!(
        std::fs::read_link(snap.join("link")).unwrap(),
        std::path::PathBuf::from("dir/f")
    );
    // Hidden by default: reachable, not listed.
    let names = |dir: &std::path::Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert!(!names(&root).contains(&".zfs".to_string()));
    assert_eq!(names(&root.join(".zfs")), ["shares", "snapshot"]);
    assert_eq!(names(&root.join(".zfs/snapshot")), ["one"]);
    e.ok(&["zfs", "set", "snapdir=visible", "tank"]);
    assert!(names(&root).contains(&".zfs".to_string()));
    // Read-only: every change fails with EROFS.
    let erofs = |r: std::io::Result<()>| {
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EROFS));
    };
    erofs(std::fs::write(snap.join("dir/f"), b"x"));
    erofs(std::fs::write(snap.join("new"), b"x"));
    erofs(std::fs::remove_file(snap.join("dir/f")));
    erofs(std::fs::create_dir(snap.join("d2")));
    // Stable, distinct inode numbers.
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(snap.join("dir/f")).unwrap().ino();
    assert_ne!(ino, std::fs::metadata(root.join("dir/f")).unwrap().ino());
    m.remount();
    assert_eq!(std::fs::metadata(snap.join("dir/f")).unwrap().ino(), ino);
    assert_eq!(read(&snap.join("dir/f")), before);
    // mkdir and rmdir in .zfs/snapshot take and destroy snapshots.
    std::fs::create_dir(root.join(".zfs/snapshot/two")).unwrap();
    let snaps = e.ok(&["zfs", "list", "-H", "-o", "name", "-t", "snapshot"]);
    assert_eq!(lines(&snaps), ["tank@one", "tank@two"]);
    assert_eq!(read(&root.join(".zfs/snapshot/two/dir/f")).len(), 1000);
    std::fs::remove_dir(root.join(".zfs/snapshot/one")).unwrap();
    let snaps = e.ok(&["zfs", "list", "-H", "-o", "name", "-t", "snapshot"]);
    assert_eq!(lines(&snaps), ["tank@two"]);
    assert!(!snap.exists());
    // mv in .zfs/snapshot renames; a bad name is refused.
    std::fs::rename(
        root.join(".zfs/snapshot/two"),
        root.join(".zfs/snapshot/three"),
    )
    .unwrap();
    let snaps = e.ok(&["zfs", "list", "-H", "-o", "name", "-t", "snapshot"]);
    assert_eq!(lines(&snaps), ["tank@three"]);
    assert_eq!(read(&root.join(".zfs/snapshot/three/dir/f")).len(), 1000);
    assert!(std::fs::rename(
        root.join(".zfs/snapshot/three"),
        root.join(".zfs/snapshot/a@b")
    )
    .is_err());
    std::fs::rename(
        root.join(".zfs/snapshot/three"),
        root.join(".zfs/snapshot/two"),
    )
    .unwrap();
    // zfs destroy of a snapshot someone looked at: the name goes away.
    e.ok(&["zfs", "destroy", "tank@two"]);
    assert!(!root.join(".zfs/snapshot/two").exists());
    // .zfs itself cannot be taken or removed.
    assert!(std::fs::create_dir(root.join(".zfs")).is_err());
    assert!(std::fs::remove_dir(root.join(".zfs")).is_err());
}

#[test]
fn rollback_of_a_mounted_filesystem_shows_the_snapshot_at_once() {
    use std::io::{Read, Seek};
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    let e = &m.env;
    let root = m.root();
    std::fs::create_dir(root.join("d")).unwrap();
    write_file(&root.join("d/f"), 2 * MIB as usize, 1);
    let old = read(&root.join("d/f"));
    // A child dataset mounted inside: the rollback of its parent leaves
    // its mount alone.
    e.ok(&["zfs", "create", "tank/child"]);
    write_file(&m.mnt("tank/child").join("kept"), 4096, 9);
    e.ok(&["zfs", "snapshot", "tank@a"]);
    write_file(&root.join("d/f"), 2 * MIB as usize, 2);
    write_file(&root.join("d/new"), 4096, 3);
    write_file(&root.join("top"), 4096, 5);
    // Files the rollback removes, held open across it: their object
    // numbers come back in the rolled-back filesystem.
    let mut gone = std::fs::File::open(root.join("d/new")).unwrap();
    let gone_top = std::fs::File::open(root.join("top")).unwrap();
    let mut open = std::fs::File::open(root.join("d/f")).unwrap();
    let mut cached = Vec::new();
    open.read_to_end(&mut cached).unwrap();
    assert_ne!(cached, old, "the page cache holds the newer bytes");
    // More recent snapshots need -r.
    e.ok(&["zfs", "snapshot", "tank@b"]);
    let err = e.fail(&["zfs", "rollback", "tank@a"]);
    assert!(
        err.contains("more recent snapshots") && err.contains("tank@b"),
        "{err}"
    );
    e.ok(&["zfs", "rollback", "-r", "tank@a"]);
    // The open file, a fresh open and a directory listing all see the
    // snapshot, not the pages the kernel had.
    open.rewind().unwrap();
    let mut again = Vec::new();
    open.read_to_end(&mut again).unwrap();
    assert_eq!(again, old, "open file after rollback");
    assert_eq!(read(&root.join("d/f")), old);
    assert!(!root.join("d/new").exists());
    m.assert_mounted("tank/child");
    assert_eq!(read(&root.join("child/kept")), noise(4096, 9));
    let left = e.ok(&["zfs", "list", "-H", "-o", "name", "-t", "snapshot"]);
    assert_eq!(lines(&left), ["tank@a"]);
    // The filesystem goes on working; new files may reuse the numbers of
    // the files still held open, and are not confused with them.
    write_file(&root.join("d/g"), 8192, 4);
    assert_eq!(read(&root.join("d/g")).len(), 8192);
    for i in 0..4 {
        write_file(&root.join(format!("n{i}")), 4096 + i, 10 + 2 * i as u64);
        write_file(&root.join(format!("d/n{i}")), 4096 + i, 30 + 2 * i as u64);
    }
    let mut stale = Vec::new();
    assert!(gone
        .rewind()
        .and_then(|_| gone.read_to_end(&mut stale))
        .is_err());
    for i in 0..4 {
        assert_eq!(
            read(&root.join(format!("n{i}"))),
            noise(4096 + i, 10 + 2 * i as u64)
        );
        assert_eq!(
            read(&root.join(format!("d/n{i}"))),
            noise(4096 + i, 30 + 2 * i as u64)
        );
    }
    drop((gone, gone_top));
    for i in 0..4 {
        assert_eq!(
            read(&root.join(format!("d/n{i}"))),
            noise(4096 + i, 30 + 2 * i as u64)
        );
    }
    e.ok(&["zfs", "snapshot", "tank@c"]);
    let written: u64 = e
        .ok(&["zfs", "get", "-Hpo", "value", "written", "tank@c"])
        .trim()
        .parse()
        .unwrap();
    assert!(written >= 8192, "{written}");
}

#[test]
fn clones_promote_rename_holds_and_bookmarks() {
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    let e = &m.env;
    e.ok(&["zfs", "create", "tank/golden"]);
    write_file(&m.mnt("tank/golden").join("disk.img"), 2 * MIB as usize, 5);
    let image = read(&m.mnt("tank/golden").join("disk.img"));
    e.ok(&["zfs", "snapshot", "tank/golden@v1"]);
    // A clone per guest, mounted at once, sharing the image.
    e.ok(&["zfs", "clone", "-p", "tank/golden@v1", "tank/guests/vm1"]);
    e.ok(&[
        "zfs",
        "clone",
        "-o",
        "atime=off",
        "tank/golden@v1",
        "tank/guests/vm2",
    ]);
    assert_eq!(read(&m.mnt("tank/guests/vm1").join("disk.img")), image);
    let origin = e.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "value",
        "origin",
        "tank/guests/vm2",
    ]);
    assert_eq!(origin.trim(), "tank/golden@v1");
    let clones = e.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "value",
        "clones",
        "tank/golden@v1",
    ]);
    assert_eq!(clones.trim(), "tank/guests/vm1,tank/guests/vm2");
    let atime = e.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "value,source",
        "atime",
        "tank/guests/vm2",
    ]);
    assert_eq!(atime.trim(), "off\tlocal");
    write_file(&m.mnt("tank/guests/vm1").join("disk.img"), MIB as usize, 6);
    assert_eq!(
        read(&m.mnt("tank/golden").join("disk.img")),
        image,
        "origin untouched"
    );
    let err = e.fail(&["zfs", "destroy", "tank/golden@v1"]);
    assert!(
        err.contains("dependent clones") && err.contains("tank/guests/vm1"),
        "{err}"
    );
    let err = e.fail(&["zfs", "clone", "tank/golden@v1", "other/x"]);
    assert!(err.contains("source and target pools differ"), "{err}");
    // Holds keep a snapshot; -d defers its destroy to the last release.
    e.ok(&["zfs", "snapshot", "tank/golden@v2"]);
    e.ok(&["zfs", "hold", "backup", "tank/golden@v2"]);
    let holds = e.ok(&["zfs", "holds", "-H", "tank/golden@v2"]);
    assert!(holds.starts_with("tank/golden@v2\tbackup\t"), "{holds}");
    let busy = e.fail(&["zfs", "destroy", "tank/golden@v2"]);
    assert!(busy.contains("dataset is busy"), "{busy}");
    e.ok(&["zfs", "destroy", "-d", "tank/golden@v2"]);
    let defer = e.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "value",
        "defer_destroy,userrefs",
        "tank/golden@v2",
    ]);
    assert_eq!(lines(&defer), ["on", "1"]);
    // Bookmarks outlive their snapshot.
    e.ok(&["zfs", "bookmark", "tank/golden@v2", "tank/golden#v2"]);
    e.ok(&["zfs", "release", "backup", "tank/golden@v2"]);
    let snaps = e.ok(&[
        "zfs",
        "list",
        "-H",
        "-o",
        "name",
        "-t",
        "snapshot",
        "tank/golden",
    ]);
    assert_eq!(lines(&snaps), ["tank/golden@v1"]);
    let marks = e.ok(&[
        "zfs",
        "list",
        "-H",
        "-o",
        "name,type",
        "-t",
        "bookmark",
        "tank/golden",
    ]);
    assert_eq!(lines(&marks), ["tank/golden#v2\tbookmark"]);
    // Promote vm2: the snapshot moves to it, golden becomes its clone.
    e.ok(&["zfs", "promote", "tank/guests/vm2"]);
    let origin = e.ok(&["zfs", "get", "-H", "-o", "value", "origin", "tank/golden"]);
    assert_eq!(origin.trim(), "tank/guests/vm2@v1");
    assert_eq!(read(&m.mnt("tank/golden").join("disk.img")), image);
    // Renames: a snapshot, then a filesystem that moves its mount.
    e.ok(&["zfs", "rename", "tank/guests/vm2@v1", "@base"]);
    e.ok(&[
        "zfs",
        "rename",
        "-p",
        "tank/guests/vm1",
        "tank/old/guests/vm1",
    ]);
    m.assert_mounted("tank/old/guests/vm1");
    assert_eq!(
        read(&m.mnt("tank/old/guests/vm1").join("disk.img")).len(),
        MIB as usize
    );
    assert!(!m.mnt("tank/guests/vm1").join("disk.img").exists());
    let err = e.fail(&["zfs", "rename", "tank/old", "tank/old/guests/x"]);
    assert!(err.contains("below itself"), "{err}");
    // -R destroys the clones with the snapshot.
    let out = e.ok(&["zfs", "destroy", "-Rv", "tank/guests/vm2@base"]);
    assert!(out.contains("will destroy tank/old/guests/vm1"), "{out}");
    assert!(out.contains("will destroy tank/golden"), "{out}");
    let left = e.ok(&["zfs", "list", "-H", "-o", "name", "-t", "all", "-r", "tank"]);
    assert!(!left.contains("golden") && !left.contains("vm1"), "{left}");
}

#[test]
fn diff_reports_changes_from_block_births() {
    let m = Mounted::new("tank", &["a"], 256 * MIB);
    let e = &m.env;
    let root = m.root();
    std::fs::create_dir(root.join("d")).unwrap();
    for name in ["keep", "mod", "gone", "old"] {
        std::fs::write(root.join("d").join(name), name).unwrap();
    }
    for i in 0..200 {
        std::fs::write(root.join(format!("untouched{i}")), b"x").unwrap();
    }
    e.ok(&["zfs", "snapshot", "tank@s"]);
    std::fs::write(root.join("d/mod"), b"changed").unwrap();
    std::fs::remove_file(root.join("d/gone")).unwrap();
    std::fs::rename(root.join("d/old"), root.join("d/new name")).unwrap();
    std::fs::write(root.join("d/added"), b"new").unwrap();
    let base = root.display().to_string();
    let out = e.ok(&["zfs", "diff", "tank@s"]);
    assert_eq!(
        lines(&out),
        [
            format!("M\t{base}/d"),
            format!("+\t{base}/d/added"),
            format!("-\t{base}/d/gone"),
            format!("M\t{base}/d/mod"),
            format!("R\t{base}/d/old -> {base}/d/new\\0040name"),
        ]
    );
    // -F -H: type letters, renames as two fields; and snapshot to snapshot.
    e.ok(&["zfs", "snapshot", "tank@t"]);
    let out = e.ok(&["zfs", "diff", "-FH", "tank@s", "tank@t"]);
    assert!(out.contains(&format!("+\tF\t{base}/d/added\n")), "{out}");
    assert!(out.contains(&format!("M\t/\t{base}/d\n")), "{out}");
    assert!(
        out.contains(&format!("R\tF\t{base}/d/old\t{base}/d/new\\0040name\n")),
        "{out}"
    );
    let out = e.ok(&["zfs", "diff", "-t", "tank@t"]);
    assert!(out.is_empty(), "nothing changed since @t: {out}");
    let err = e.fail(&["zfs", "diff", "tank@t", "tank@s"]);
    assert!(err.contains("not earlier"), "{err}");
}
