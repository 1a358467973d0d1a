//! End-to-end: datasets mounted through FUSE by the daemon, driven by the
//! real `tarn` binary (as root). Every test mounts under its own temporary
//! mount root (`TARN_MOUNT_ROOT`), checks `/proc/mounts` for what the
//! kernel really has, and leaves nothing mounted: dropping the [`Env`]
//! shuts the daemon down, which unmounts everything.
//!
//! Covered: mounts on create/import, unmounts on export/destroy, files
//! surviving export/import, `canmount`, `mountpoint=legacy|none`, moving a
//! mountpoint, `readonly` (EROFS), busy unmounts and `-f`, non-empty
//! directories and `-O`, `zfs mount`/`unmount` with and without `-a`, the
//! `mounted` property, `df` against `zfs list`, quotas as EDQUOT, and a
//! daemon killed with SIGKILL whose stale mounts are cleaned and replaced.

mod common;

use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use common::{noise, Env, MIB};

/// The `fuse.tarn` mounts under this test's mount root: (source, target,
/// options), in mount order.
fn mounts(env: &Env) -> Vec<(String, PathBuf, String)> {
    let root = env.mount_root();
    fs::read_to_string("/proc/self/mounts")
        .expect("read /proc/self/mounts")
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            (f.len() >= 4 && f[2] == "fuse.tarn").then(|| {
                (
                    f[0].to_string(),
                    PathBuf::from(f[1].replace("\\040", " ")),
                    f[3].to_string(),
                )
            })
        })
        .filter(|(_, target, _)| target.starts_with(&root))
        .collect()
}

/// Datasets mounted, with where, sorted by name.
fn mounted(env: &Env) -> Vec<(String, PathBuf)> {
    let mut v: Vec<(String, PathBuf)> = mounts(env).into_iter().map(|(s, t, _)| (s, t)).collect();
    v.sort();
    v
}

fn is_mounted_at(env: &Env, ds: &str, path: &Path) -> bool {
    mounts(env)
        .iter()
        .any(|(s, t, _)| s == ds && t.as_path() == path)
}

fn pool(env: &Env) {
    let a = env.vdev("a", 256 * MIB);
    let b = env.vdev("b", 256 * MIB);
    env.ok(&["zpool", "create", "tank", "mirror", &a, &b]);
}

fn write_synced(path: &Path, data: &[u8]) {
    let mut f = fs::File::create(path).unwrap_or_else(|e| panic!("create {path:?}: {e}"));
    f.write_all(data).expect("write");
    f.sync_all().expect("fsync");
}

/// Commit everything written to the filesystem at `dir` (fsync of its
/// root: tarn commits the txg).
fn sync_fs(dir: &Path) {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .expect("fsync");
}

#[test]
fn create_mounts_and_export_import_keeps_files() {
    let env = Env::new();
    pool(&env);
    let root_mp = env.mountpoint("tank");
    assert_eq!(mounted(&env), [("tank".to_string(), root_mp.clone())]);
    env.ok(&["zfs", "create", "tank/a"]);
    env.ok(&["zfs", "create", "-p", "tank/b/c"]);
    assert_eq!(
        mounted(&env),
        [
            ("tank".to_string(), root_mp.clone()),
            ("tank/a".to_string(), env.mountpoint("tank/a")),
            ("tank/b".to_string(), env.mountpoint("tank/b")),
            ("tank/b/c".to_string(), env.mountpoint("tank/b/c")),
        ]
    );
    assert_eq!(env.get("mounted", "tank/b/c"), "yes");
    let data = noise(3 * MIB as usize + 123, 7);
    let file = env.mountpoint("tank/a").join("file");
    fs::write(&file, &data).expect("write into tank/a");
    fs::create_dir(root_mp.join("dir")).expect("mkdir in tank");
    fs::write(root_mp.join("dir/small"), b"hello\n").expect("write small");

    // `zfs mount` lists what is mounted, zfs(8)'s layout.
    let list = env.ok(&["zfs", "mount"]);
    let first = list.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        format!("{:<30}  {}", "tank", root_mp.display()),
        "{list}"
    );
    assert_eq!(list.lines().count(), 4, "{list}");

    env.ok(&["zpool", "export", "tank"]);
    assert!(mounted(&env).is_empty(), "export unmounts everything");
    assert!(!env.mountpoint("tank/a").exists(), "empty mountpoints go");
    env.ok(&["zpool", "import", "-d", &env.vdev_dir(), "tank"]);
    assert_eq!(mounted(&env).len(), 4, "import mounts everything");
    assert_eq!(fs::read(&file).expect("read back"), data);
    assert_eq!(fs::read(root_mp.join("dir/small")).unwrap(), b"hello\n");
    assert_eq!(env.get("mounted", "tank"), "yes");
}

#[test]
fn canmount_and_mountpoint_rules() {
    let env = Env::new();
    pool(&env);
    env.ok(&["zfs", "create", "-o", "canmount=off", "tank/off"]);
    env.ok(&["zfs", "create", "-o", "canmount=noauto", "tank/na"]);
    env.ok(&["zfs", "create", "-o", "mountpoint=legacy", "tank/leg"]);
    env.ok(&["zfs", "create", "-o", "mountpoint=none", "tank/none"]);
    env.ok(&["zfs", "create", "tank/none/child"]); // inherits none
    assert_eq!(mounted(&env).len(), 1, "{:?}", mounted(&env));
    assert_eq!(env.get("mounted", "tank/off"), "no");

    let err = env.fail(&["zfs", "mount", "tank/off"]);
    assert_eq!(
        err,
        "cannot mount 'tank/off': 'canmount' property is set to 'off'\n"
    );
    assert!(env
        .fail(&["zfs", "mount", "tank/leg"])
        .contains("legacy mountpoint"));
    assert!(env
        .fail(&["zfs", "mount", "tank/none"])
        .contains("no mountpoint set"));
    env.ok(&["zfs", "mount", "tank/na"]);
    assert!(is_mounted_at(&env, "tank/na", &env.mountpoint("tank/na")));
    let err = env.fail(&["zfs", "mount", "tank/na"]);
    assert!(err.contains("filesystem already mounted"), "{err}");

    // `mount -a` mounts only canmount=on filesystems; noauto stays down
    // across export/import.
    env.ok(&["zfs", "unmount", "-a"]);
    assert!(mounted(&env).is_empty());
    env.ok(&["zfs", "mount", "-a"]);
    assert_eq!(mounted(&env).len(), 1);
    env.ok(&["zpool", "export", "tank"]);
    env.ok(&["zpool", "import", "-d", &env.vdev_dir(), "tank"]);
    assert_eq!(
        mounted(&env),
        [("tank".to_string(), env.mountpoint("tank"))]
    );

    // canmount=off on a mounted filesystem unmounts it.
    env.ok(&["zfs", "create", "tank/c"]);
    assert!(is_mounted_at(&env, "tank/c", &env.mountpoint("tank/c")));
    env.ok(&["zfs", "set", "canmount=off", "tank/c"]);
    assert_eq!(env.get("mounted", "tank/c"), "no");
}

#[test]
fn set_mountpoint_moves_the_mount_and_its_children() {
    let env = Env::new();
    pool(&env);
    env.ok(&["zfs", "create", "-p", "tank/a/b"]);
    fs::write(env.mountpoint("tank/a/b").join("f"), b"data").unwrap();
    env.ok(&["zfs", "set", "mountpoint=/elsewhere", "tank/a"]);
    let new_a = env.mount_root().join("elsewhere");
    assert!(is_mounted_at(&env, "tank/a", &new_a));
    assert!(is_mounted_at(&env, "tank/a/b", &new_a.join("b")));
    assert!(!env.mountpoint("tank/a").exists(), "the old directory goes");
    assert_eq!(fs::read(new_a.join("b/f")).unwrap(), b"data");
    let list = env.ok(&["zfs", "list", "-H", "-o", "name,mountpoint", "tank/a/b"]);
    assert_eq!(list, "tank/a/b\t/elsewhere/b\n");

    env.ok(&["zfs", "set", "mountpoint=none", "tank/a"]);
    assert_eq!(mounted(&env).len(), 1, "none unmounts the subtree");
    env.ok(&["zfs", "inherit", "mountpoint", "tank/a"]);
    assert!(is_mounted_at(&env, "tank/a", &env.mountpoint("tank/a")));
    assert!(is_mounted_at(&env, "tank/a/b", &env.mountpoint("tank/a/b")));
    assert_eq!(fs::read(env.mountpoint("tank/a/b/f")).unwrap(), b"data");
}

#[test]
fn readonly_gives_erofs_and_properties_apply_live() {
    let env = Env::new();
    pool(&env);
    env.ok(&["zfs", "create", "tank/ro"]);
    let mp = env.mountpoint("tank/ro");
    fs::write(mp.join("f"), b"before").unwrap();
    env.ok(&["zfs", "set", "readonly=on", "tank/ro"]);
    let err = fs::write(mp.join("g"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    let err = fs::OpenOptions::new()
        .write(true)
        .open(mp.join("f"))
        .and_then(|mut f| f.write_all(b"y").and_then(|()| f.sync_all()))
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    assert_eq!(fs::read(mp.join("f")).unwrap(), b"before");
    let opts = mounts(&env)
        .into_iter()
        .find(|(s, _, _)| s == "tank/ro")
        .map(|(_, _, o)| o)
        .expect("still mounted");
    assert!(opts.split(',').any(|o| o == "ro"), "{opts}");
    env.ok(&["zfs", "set", "readonly=off", "tank/ro"]);
    fs::write(mp.join("g"), b"after").expect("writable again");

    // A temporary read-only mount beats the property.
    env.ok(&["zfs", "unmount", "tank/ro"]);
    env.ok(&["zfs", "mount", "-o", "ro", "tank/ro"]);
    let err = fs::write(mp.join("h"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");

    // recordsize applies to files created after the change, live.
    env.ok(&["zfs", "set", "recordsize=16K", "tank"]);
    let big = env.mountpoint("tank").join("big");
    write_synced(&big, &noise(MIB as usize, 3));
    let blksize = std::os::unix::fs::MetadataExt::blksize(&fs::metadata(&big).unwrap());
    assert_eq!(blksize, 16 << 10);
}

#[test]
fn busy_filesystems_refuse_to_unmount_unless_forced() {
    let env = Env::new();
    pool(&env);
    env.ok(&["zfs", "create", "tank/a"]);
    let mp = env.mountpoint("tank/a");
    let open = fs::File::create(mp.join("open")).expect("create");

    let err = env.fail(&["zfs", "unmount", "tank/a"]);
    assert!(
        err.starts_with(&format!("cannot unmount '{}': ", mp.display())) && err.contains("busy"),
        "{err}"
    );
    let err = env.fail(&["zpool", "export", "tank"]);
    assert!(err.contains("busy"), "{err}");
    assert_eq!(env.pools(), ["tank"], "a refused export leaves the pool");
    assert_eq!(mounted(&env).len(), 2, "and every mount");
    let err = env.fail(&["zfs", "destroy", "tank/a"]);
    assert!(err.contains("busy"), "{err}");
    assert_eq!(env.datasets(), ["tank", "tank/a"]);
    let err = env.fail(&["zfs", "set", "mountpoint=/moved", "tank/a"]);
    assert!(err.contains("busy"), "{err}");
    assert_eq!(env.get("mountpoint", "tank/a"), "/tank/a");

    env.ok(&["zfs", "unmount", "-f", "tank/a"]);
    assert_eq!(env.get("mounted", "tank/a"), "no");
    assert_eq!(mounted(&env).len(), 1);
    drop(open);
    // By mountpoint, and the `umount` spelling.
    env.ok(&["zfs", "mount", "tank/a"]);
    env.ok(&["zfs", "umount", &mp.to_string_lossy()]);
    assert_eq!(env.get("mounted", "tank/a"), "no");
    let err = env.fail(&["zfs", "unmount", "tank/a"]);
    assert!(err.contains("not currently mounted"), "{err}");
}

#[test]
fn non_empty_directories_need_overlay() {
    let env = Env::new();
    pool(&env);
    let dir = env.mount_root().join("occupied");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("mine"), b"underneath").unwrap();
    let r = env.run(&["zfs", "create", "-o", "mountpoint=/occupied", "tank/o"]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr,
        format!(
            "cannot mount '{}': directory is not empty\n\
             filesystem successfully created, but not mounted\n",
            dir.display()
        )
    );
    assert_eq!(env.datasets(), ["tank", "tank/o"]);
    let err = env.fail(&["zfs", "mount", "tank/o"]);
    assert_eq!(
        err,
        format!("cannot mount '{}': directory is not empty\n", dir.display())
    );
    env.ok(&["zfs", "mount", "-O", "tank/o"]);
    assert!(is_mounted_at(&env, "tank/o", &dir));
    assert!(
        !dir.join("mine").exists(),
        "the overlay hides what is below"
    );
    fs::write(dir.join("new"), b"in tarn").unwrap();
    env.ok(&["zfs", "unmount", "tank/o"]);
    assert_eq!(fs::read(dir.join("mine")).unwrap(), b"underneath");
    assert!(!dir.join("new").exists());
}

#[test]
fn destroy_unmounts_and_df_matches_zfs_list() {
    let env = Env::new();
    pool(&env);
    env.ok(&["zfs", "create", "-p", "tank/d/e"]);
    let mp = env.mountpoint("tank/d");
    write_synced(&mp.join("f"), &noise(8 * MIB as usize, 5));
    // df: size and avail as zfs list reports them (within what the last
    // txg may have moved).
    let st = nix::sys::statvfs::statvfs(&mp).expect("statvfs");
    let frsize = st.fragment_size() as u64;
    let df_avail = st.blocks_available() as u64 * frsize;
    let zfs_avail: u64 = env.get("available", "tank/d").parse().unwrap();
    let slack = 4 * MIB;
    assert!(
        df_avail.abs_diff(zfs_avail) <= slack,
        "df avail {df_avail} vs zfs {zfs_avail}"
    );
    let zfs_used: u64 = env.get("used", "tank/d").parse().unwrap();
    let df_size = st.blocks() as u64 * frsize;
    assert!(
        df_size.abs_diff(zfs_used + zfs_avail) <= slack,
        "df size {df_size} vs zfs used+avail {}",
        zfs_used + zfs_avail
    );

    env.ok(&["zfs", "destroy", "-r", "tank/d"]);
    assert_eq!(
        mounted(&env),
        [("tank".to_string(), env.mountpoint("tank"))]
    );
    assert!(!mp.exists());
    env.ok(&["zpool", "destroy", "tank"]);
    assert!(mounted(&env).is_empty());
}

#[test]
fn quota_is_edquot_at_write_time_and_deletes_free_it() {
    let env = Env::new();
    pool(&env);
    env.ok(&["zfs", "create", "-o", "quota=8M", "tank/q"]);
    let mp = env.mountpoint("tank/q");
    let chunk = noise(MIB as usize, 11);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .custom_flags(libc::O_SYNC)
        .open(mp.join("fill"))
        .unwrap();
    let mut err = None;
    for _ in 0..32 {
        if let Err(e) = f.write_all(&chunk).and_then(|()| f.sync_all()) {
            err = Some(e);
            break;
        }
    }
    drop(f);
    let err = err.expect("a write past the quota fails");
    assert_eq!(err.raw_os_error(), Some(libc::EDQUOT), "{err}");
    fs::remove_file(mp.join("fill")).expect("delete in a full dataset");
    sync_fs(&mp);
    fs::write(mp.join("again"), &chunk[..4096]).expect("space is back");
}

/// The next daemon may start the moment a killed one's lock is free, and
/// its first look at the old mounts then comes while the kernel is still
/// tearing down the dead daemon's FUSE io_uring queues: a request can end
/// with ECANCELED instead of ENOTCONN (from 1 kill in 5 to 2 in 3 here,
/// depending on how soon after the signal it comes). Taken for a live
/// mount, the dead one was kept, the dataset could not be mounted over
/// it, and its files answered ENOTCONN after the restart.
#[test]
fn a_mount_is_dead_from_the_moment_its_daemon_is_killed() {
    let env = Env::new();
    pool(&env);
    for round in 0..10 {
        let mp = env.mountpoint("tank");
        write_synced(&mp.join("f"), b"kept");
        let dead = env.kill_daemon_and(|| tarn_fuse::is_dead_mount(&mp));
        assert!(
            dead,
            "round {round}: the killed daemon's mount looked alive"
        );
        // The next command's daemon detaches it and mounts the pool again.
        assert_eq!(env.pools(), ["tank"]);
        assert_eq!(mounted(&env), [("tank".to_string(), mp.clone())]);
        assert_eq!(fs::read(mp.join("f")).unwrap(), b"kept");
    }
}

#[test]
fn killed_daemon_leaves_stale_mounts_that_the_next_one_replaces() {
    let env = Env::new();
    pool(&env);
    env.ok(&["zfs", "create", "tank/a"]);
    let mp = env.mountpoint("tank/a");
    let data = noise(2 * MIB as usize, 9);
    write_synced(&mp.join("f"), &data);
    env.kill_daemon();
    // The kernel keeps the dead mounts: they answer ENOTCONN. (Over FUSE's
    // io_uring transport, a request queued while the dead daemon's rings
    // were being torn down ends with ECONNABORTED, or ECANCELED when its
    // ring entry is cancelled, instead; after that the connection is
    // aborted and every request gets ENOTCONN.)
    assert_eq!(mounts(&env).len(), 2, "stale mounts stay until cleaned");
    let err = fs::metadata(mp.join("f")).unwrap_err();
    assert!(
        matches!(
            err.raw_os_error(),
            Some(libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED)
        ),
        "{err}"
    );
    let err = fs::metadata(mp.join("f")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN), "{err}");
    assert_eq!(err.kind(), ErrorKind::NotConnected);

    // The next command starts a daemon, which detaches them, re-imports
    // the pool from the cache file and mounts it again.
    assert_eq!(env.pools(), ["tank"]);
    assert_eq!(
        mounted(&env),
        [
            ("tank".to_string(), env.mountpoint("tank")),
            ("tank/a".to_string(), mp.clone()),
        ],
        "daemon log:\n{}",
        fs::read_to_string(env.run_dir().join("daemon.log")).unwrap_or_default()
    );
    assert_eq!(fs::read(mp.join("f")).expect("read after restart"), data);
}
