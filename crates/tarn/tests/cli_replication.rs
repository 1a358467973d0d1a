//! `zfs send` / `zfs receive` through the real CLI, daemon and mounts:
//! full, incremental, `-I`, from a bookmark, `-c`/`-w`, `-R` with
//! children, properties and clones, `-F`, `-u`, `-o`/`-x`, a receive into
//! a mounted filesystem whose files are open, interrupted receives resumed
//! with `zfs send -t` (pipe cut at random offsets, and the receiving
//! daemon killed), and corrupt or cut streams that leave the target as it
//! was. Every round trip is checked file by file: contents, types, modes,
//! owners, times, inode numbers, link counts, xattrs, holes.

mod common;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::{noise, Env, Mounted, MIB};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Everything a round trip must keep of one file.
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    blocks: u64,
    mtime: (i64, i64),
    ino: u64,
    nlink: u64,
    xattrs: BTreeMap<String, (usize, u64)>,
    /// Length and FNV-1a hash of the file's contents, or a symlink's
    /// target.
    data: (usize, u64),
}

fn fnv(bytes: &[u8]) -> (usize, u64) {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    (bytes.len(), h)
}

fn xattrs(p: &Path) -> BTreeMap<String, Vec<u8>> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 64 << 10];
    // SAFETY: `c` is a valid C string and `names` a buffer of the length
    // passed; the kernel writes at most that many bytes.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(n >= 0, "listxattr {}", p.display());
    let mut out = BTreeMap::new();
    for name in names[..n as usize]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
    {
        let cname = CString::new(name).unwrap();
        let mut v = vec![0u8; 128 << 10];
        // SAFETY: as above, for the value buffer.
        let len =
            unsafe { libc::lgetxattr(c.as_ptr(), cname.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        assert!(len >= 0);
        v.truncate(len as usize);
        out.insert(String::from_utf8_lossy(name).into_owned(), v);
    }
    out
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: valid C strings and a value buffer of the given length.
    let rc = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(rc, 0, "setxattr {name} on {}", p.display());
}

/// Every file under `root` (not `.zfs`), by relative path.
fn tree(root: &Path) -> BTreeMap<String, Entry> {
    let dev = std::fs::metadata(root).unwrap().dev();
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let path = e.path();
            let m = std::fs::symlink_metadata(&path).unwrap();
            if m.dev() != dev {
                // Another dataset mounted here.
                continue;
            }
            let data = if m.file_type().is_symlink() {
                std::fs::read_link(&path)
                    .unwrap()
                    .as_os_str()
                    .as_bytes()
                    .to_vec()
            } else if m.is_file() {
                std::fs::read(&path).unwrap()
            } else {
                Vec::new()
            };
            if m.is_dir() {
                stack.push(path.clone());
            }
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.insert(
                rel,
                Entry {
                    mode: m.mode(),
                    uid: m.uid(),
                    gid: m.gid(),
                    size: m.size(),
                    blocks: if m.is_file() { m.blocks() } else { 0 },
                    mtime: (m.mtime(), m.mtime_nsec()),
                    ino: m.ino(),
                    nlink: m.nlink(),
                    xattrs: if m.file_type().is_symlink() {
                        BTreeMap::new()
                    } else {
                        xattrs(&path)
                            .into_iter()
                            .map(|(k, v)| (k, fnv(&v)))
                            .collect()
                    },
                    data: fnv(&data),
                },
            );
        }
    }
    out
}

fn assert_same_map(a: &BTreeMap<String, Entry>, b: &BTreeMap<String, Entry>, what: &str) {
    let keys_a: Vec<&String> = a.keys().collect();
    let keys_b: Vec<&String> = b.keys().collect();
    assert_eq!(keys_a, keys_b, "{what}");
    for (k, ea) in a {
        assert_eq!(ea, &b[k], "{what}: {k}");
    }
}

/// Both trees the same; inode numbers too unless one side is read
/// through `.zfs` (whose node ids carry the snapshot).
fn assert_same_tree(a: &Path, b: &Path) {
    assert_same_tree_except(a, b, &[]);
}

/// [`assert_same_tree`] leaving out `skip` (the mountpoint directories of
/// child datasets, mounted over on one side only).
fn assert_same_tree_except(a: &Path, b: &Path, skip: &[&str]) {
    let (mut ta, mut tb) = (tree(a), tree(b));
    for t in [&mut ta, &mut tb] {
        t.retain(|k, _| {
            !skip
                .iter()
                .any(|s| k == s || k.starts_with(&format!("{s}/")))
        });
    }
    let through_ctl = |p: &Path| p.to_string_lossy().contains("/.zfs/");
    if through_ctl(a) || through_ctl(b) {
        for e in ta.values_mut().chain(tb.values_mut()) {
            e.ino = 0;
        }
    }
    assert_eq!(
        ta.keys().collect::<Vec<_>>(),
        tb.keys().collect::<Vec<_>>(),
        "{} vs {}",
        a.display(),
        b.display()
    );
    for (k, ea) in &ta {
        assert_eq!(ea, &tb[k], "{k}: {} vs {}", a.display(), b.display());
    }
}

/// A tree with every kind of thing a round trip must keep.
fn populate(root: &Path, seed: u64) {
    let d = root.join("dir/sub");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(root.join("small"), b"hello\n").unwrap();
    std::fs::write(d.join("big"), noise(3 * MIB as usize + 777, seed)).unwrap();
    // A sparse file: data, a hole, data.
    let mut f = File::create(root.join("sparse")).unwrap();
    f.write_all(&noise(100_000, seed + 1)).unwrap();
    f.set_len(8 * MIB).unwrap();
    drop(f);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(root.join("sparse"))
        .unwrap();
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(6 * MIB)).unwrap();
    f.write_all(b"after the hole").unwrap();
    drop(f);
    std::fs::hard_link(root.join("small"), d.join("link")).unwrap();
    std::os::unix::fs::symlink("../small", root.join("dir/sym")).unwrap();
    set_xattr(&root.join("small"), "user.inline", b"value");
    set_xattr(&d.join("big"), "user.large", &noise(20_000, seed + 2));
    std::os::unix::fs::chown(root.join("small"), Some(1234), Some(5678)).unwrap();
    std::fs::set_permissions(
        root.join("small"),
        std::os::unix::fs::PermissionsExt::from_mode(0o4751),
    )
    .unwrap();
    let c = CString::new(root.join("fifo").as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid path string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o640) }, 0);
    for i in 0..50 {
        std::fs::write(
            root.join(format!("dir/f{i}")),
            noise(i * 1000, seed + i as u64),
        )
        .unwrap();
    }
}

/// Changes some of it: rewrites, appends, removes, renames, new files.
fn change(root: &Path, seed: u64) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(root.join("dir/sub/big"))
        .unwrap();
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(MIB)).unwrap();
    f.write_all(&noise(300_000, seed)).unwrap();
    drop(f);
    std::fs::remove_file(root.join(format!("dir/f{}", (2 * seed) % 50))).unwrap();
    std::fs::rename(
        root.join(format!("dir/f{}", (2 * seed + 1) % 50)),
        root.join(format!("renamed{seed}")),
    )
    .unwrap();
    std::fs::write(root.join(format!("new{seed}")), noise(5000, seed)).unwrap();
    File::options()
        .write(true)
        .open(root.join("sparse"))
        .unwrap()
        .set_len(7 * MIB + seed)
        .unwrap();
    set_xattr(
        &root.join("small"),
        "user.changed",
        format!("{seed}").as_bytes(),
    );
}

/// `tarn zfs send ARGS > file`; the stream's bytes.
fn send_to_vec(env: &Env, args: &[&str]) -> Vec<u8> {
    let out = env.dir.path().join("stream.out");
    let mut full = vec!["zfs", "send"];
    full.extend_from_slice(args);
    let r = env
        .cmd(&full)
        .stdout(File::create(&out).unwrap())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        r.status.success(),
        "send {args:?}: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    std::fs::read(&out).unwrap()
}

/// `tarn zfs receive ARGS < bytes`: exit code, stdout, stderr.
fn receive(env: &Env, args: &[&str], stream: &[u8]) -> (i32, String, String) {
    let input = env.dir.path().join("stream.in");
    std::fs::write(&input, stream).unwrap();
    let mut full = vec!["zfs", "receive"];
    full.extend_from_slice(args);
    let r = env
        .cmd(&full)
        .stdin(File::open(&input).unwrap())
        .output()
        .unwrap();
    (
        r.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&r.stdout).into_owned(),
        String::from_utf8_lossy(&r.stderr).into_owned(),
    )
}

fn receive_ok(env: &Env, args: &[&str], stream: &[u8]) -> String {
    let (code, out, err) = receive(env, args, stream);
    assert_eq!(code, 0, "receive {args:?}: {out}{err}");
    out
}

fn receive_fails(env: &Env, args: &[&str], stream: &[u8]) -> String {
    let (code, out, err) = receive(env, args, stream);
    assert_ne!(code, 0, "receive {args:?} should fail: {out}");
    err
}

fn snap_dir(m: &Mounted, ds: &str, snap: &str) -> PathBuf {
    m.mnt(ds).join(".zfs/snapshot").join(snap)
}

fn guid(env: &Env, name: &str) -> String {
    env.ok(&["zfs", "get", "-Hpo", "value", "guid", name])
        .trim()
        .to_string()
}

/// The object a resume token resumes at (its JSON body's `object`).
fn token_object(token: &str) -> u64 {
    let hex = token.splitn(4, '-').nth(3).unwrap_or("");
    let json: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let json = String::from_utf8(json).unwrap();
    let at = json.find("\"object\":").unwrap() + 9;
    json[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

/// `PROGRAM` with the environment `tarn` commands of `env` get.
fn with_env(env: &Env, program: &str) -> std::process::Command {
    let mut c = std::process::Command::new(program);
    for (k, v) in env.cmd(&[]).get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    c
}

/// Two pools in one daemon: `tank` sends, `backup` receives.
fn two_pools() -> Mounted {
    let m = Mounted::new("tank", &["a"], 512 * MIB);
    let b = m.env.vdev("b", 512 * MIB);
    // Reads on the copies must not change them (atime), as on a backup
    // target admins mount read-only or without atime.
    m.env
        .ok(&["zpool", "create", "-O", "atime=off", "backup", &b]);
    m
}

#[test]
fn full_incremental_and_intermediate_streams_round_trip_file_by_file() {
    let m = two_pools();
    let e = &m.env;
    e.ok(&["zfs", "create", "-o", "xattr=dir", "tank/fs"]);
    populate(&m.mnt("tank/fs"), 1);
    e.ok(&["zfs", "snapshot", "tank/fs@1"]);

    // The estimate of -n -v -P is the stream's size.
    let est = e.ok(&["zfs", "send", "-nvP", "tank/fs@1"]);
    let lines: Vec<&str> = est.lines().collect();
    assert!(lines[0].starts_with("full\ttank/fs@1\t"), "{est}");
    let size: u64 = lines[1].strip_prefix("size\t").unwrap().parse().unwrap();
    let full = send_to_vec(e, &["tank/fs@1"]);
    assert_eq!(size, full.len() as u64, "estimate vs stream");

    let out = receive_ok(e, &["-v", "backup/copy"], &full);
    assert!(
        out.contains("receiving full stream of tank/fs@1 into backup/copy@1"),
        "{out}"
    );
    assert_same_tree(&snap_dir(&m, "tank/fs", "1"), &m.mnt("backup/copy"));
    assert_same_tree(
        &snap_dir(&m, "tank/fs", "1"),
        &snap_dir(&m, "backup/copy", "1"),
    );
    assert_eq!(guid(e, "tank/fs@1"), guid(e, "backup/copy@1"));

    // An incremental, into the mounted copy.
    change(&m.mnt("tank/fs"), 2);
    e.ok(&["zfs", "snapshot", "tank/fs@2"]);
    let inc = send_to_vec(e, &["-i", "@1", "tank/fs@2"]);
    assert!(
        inc.len() < full.len() / 3,
        "{} vs {}",
        inc.len(),
        full.len()
    );
    receive_ok(e, &["backup/copy"], &inc);
    assert_same_tree(&snap_dir(&m, "tank/fs", "2"), &m.mnt("backup/copy"));

    // -I: every snapshot in between, in one stream.
    for s in 3..6u64 {
        change(&m.mnt("tank/fs"), s);
        e.ok(&["zfs", "snapshot", &format!("tank/fs@{s}")]);
    }
    let many = send_to_vec(e, &["-I", "tank/fs@2", "tank/fs@5"]);
    receive_ok(e, &["backup/copy"], &many);
    for s in ["3", "4", "5"] {
        assert_same_tree(&snap_dir(&m, "tank/fs", s), &snap_dir(&m, "backup/copy", s));
        assert_eq!(
            guid(e, &format!("tank/fs@{s}")),
            guid(e, &format!("backup/copy@{s}"))
        );
    }

    // From a bookmark, with -c and -w.
    e.ok(&["zfs", "bookmark", "tank/fs@5", "tank/fs#mark"]);
    e.ok(&["zfs", "destroy", "tank/fs@1,2,3,4,5"]);
    change(&m.mnt("tank/fs"), 6);
    e.ok(&["zfs", "snapshot", "tank/fs@6"]);
    let from_mark = send_to_vec(e, &["-c", "-i", "tank/fs#mark", "tank/fs@6"]);
    receive_ok(e, &["backup/copy"], &from_mark);
    assert_same_tree(&snap_dir(&m, "tank/fs", "6"), &m.mnt("backup/copy"));
    let raw = send_to_vec(e, &["-w", "tank/fs@6"]);
    receive_ok(e, &["-u", "backup/raw"], &raw);
    assert!(
        !common::is_fuse_mounted(&m.mnt("backup/raw")),
        "-u mounts nothing"
    );
    e.ok(&["zfs", "mount", "backup/raw"]);
    assert_same_tree(&snap_dir(&m, "tank/fs", "6"), &m.mnt("backup/raw"));
    // Nothing hidden shows.
    let all = e.ok(&["zfs", "list", "-H", "-t", "all", "-o", "name"]);
    assert!(!all.contains('%'), "{all}");
}

#[test]
fn receive_errors_speak_openzfs_and_change_nothing() {
    let m = two_pools();
    let e = &m.env;
    e.ok(&["zfs", "create", "tank/fs"]);
    populate(&m.mnt("tank/fs"), 7);
    e.ok(&["zfs", "snapshot", "tank/fs@a"]);
    change(&m.mnt("tank/fs"), 8);
    e.ok(&["zfs", "snapshot", "tank/fs@b"]);
    let full = send_to_vec(e, &["tank/fs@a"]);
    let inc = send_to_vec(e, &["-i", "@a", "tank/fs@b"]);

    let err = receive_fails(e, &["backup/copy"], &inc);
    assert!(
        err.contains("destination 'backup/copy' does not exist"),
        "{err}"
    );
    receive_ok(e, &["backup/copy"], &full);
    let err = receive_fails(e, &["backup/copy"], &full);
    assert!(
        err.contains("cannot receive new filesystem stream: destination 'backup/copy' exists\nmust specify -F to overwrite it")
            || err.contains("destination already exists"),
        "{err}"
    );
    // Changed since its snapshot: refused without -F.
    std::fs::write(m.mnt("backup/copy").join("local"), b"x").unwrap();
    e.ok(&["zfs", "snapshot", "backup/copy@local"]);
    let err = receive_fails(e, &["backup/copy"], &inc);
    assert!(
        err.contains("most recent snapshot of backup/copy does not\nmatch incremental source"),
        "{err}"
    );
    e.ok(&["zfs", "destroy", "backup/copy@local"]);
    let err = receive_fails(e, &["backup/copy"], &inc);
    assert!(
        err.contains("destination backup/copy has been modified\nsince most recent snapshot"),
        "{err}"
    );
    // -F rolls back and receives.
    receive_ok(e, &["-F", "backup/copy"], &inc);
    assert_same_tree(&snap_dir(&m, "tank/fs", "b"), &m.mnt("backup/copy"));
    let err = receive_fails(e, &["backup/copy"], &inc);
    assert!(err.contains("destination already exists"), "{err}");

    // Damaged and cut streams, anywhere: the target stays as it was.
    let before = tree(&m.mnt("backup/copy"));
    e.ok(&["zfs", "rollback", "-r", "backup/copy@a"]);
    let at_a = tree(&m.mnt("backup/copy"));
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for i in 0..12 {
        let mut bad = inc.clone();
        if i % 2 == 0 {
            let at = rng.random_range(0..bad.len());
            bad[at] ^= 1 << rng.random_range(0..8);
        } else {
            bad.truncate(rng.random_range(1..inc.len()));
        }
        let err = receive_fails(e, &["backup/copy"], &bad);
        assert!(err.starts_with("cannot receive"), "{err}");
        assert_same_map(
            &tree(&m.mnt("backup/copy")),
            &at_a,
            &format!("after bad stream {i}: {err}"),
        );
        assert_eq!(
            e.ok(&[
                "zfs",
                "list",
                "-H",
                "-t",
                "snapshot",
                "-o",
                "name",
                "-r",
                "backup/copy"
            ]),
            "backup/copy@a\n"
        );
    }
    receive_ok(e, &["backup/copy"], &inc);
    assert_eq!(tree(&m.mnt("backup/copy")), before);
    // A stream of a newer version is refused by name.
    let mut r = tarn_format::stream::StreamReader::new(&full[..]);
    let mut w = tarn_format::stream::StreamWriter::new(Vec::new());
    while let Some((rec, payload)) = r.next_record().unwrap() {
        let rec = match rec {
            tarn_format::stream::Record::Begin(mut b) => {
                b.version = 99;
                tarn_format::stream::Record::Begin(b)
            }
            other => other,
        };
        w.write(&rec, &payload).unwrap();
    }
    let err = receive_fails(e, &["backup/newer"], w.get_mut());
    assert!(err.contains("stream version 99 is not supported"), "{err}");
    assert!(!e.datasets().contains(&"backup/newer".to_string()));
    // Not a stream at all.
    let err = receive_fails(e, &["backup/other"], b"this is not a send stream, not at all........................................................................................................................");
    assert!(err.contains("invalid stream"), "{err}");
    assert!(!e.datasets().contains(&"backup/other".to_string()));
    let err = receive_fails(e, &["backup/other"], b"");
    assert!(err.contains("failed to read from stream"), "{err}");
    // -o and -x.
    receive_ok(
        e,
        &[
            "-o",
            "compression=off",
            "-o",
            "com.example:tag=yes",
            "backup/opts",
        ],
        &full,
    );
    assert_eq!(e.get("compression", "backup/opts"), "off");
    let src = e.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "source",
        "compression",
        "backup/opts",
    ]);
    assert_eq!(src.trim(), "local");
}

#[test]
fn a_reader_of_the_mounted_target_sees_the_new_contents_right_after() {
    let m = two_pools();
    let e = &m.env;
    e.ok(&["zfs", "create", "tank/fs"]);
    std::fs::write(m.mnt("tank/fs").join("f"), b"old contents").unwrap();
    std::fs::write(m.mnt("tank/fs").join("keep"), b"kept").unwrap();
    e.ok(&["zfs", "snapshot", "tank/fs@1"]);
    std::fs::write(m.mnt("tank/fs").join("f"), b"NEW CONTENTS").unwrap();
    e.ok(&["zfs", "snapshot", "tank/fs@2"]);
    receive_ok(e, &["backup/copy"], &send_to_vec(e, &["tank/fs@1"]));
    let target = m.mnt("backup/copy");
    // Pages cached and a handle open while the stream arrives.
    assert_eq!(std::fs::read(target.join("f")).unwrap(), b"old contents");
    let mut open = File::open(target.join("keep")).unwrap();
    // Reading updated atimes: the copy changed since its snapshot, as on
    // OpenZFS, so -F (which backup scripts pass) rolls that back first.
    receive_ok(
        e,
        &["-F", "backup/copy"],
        &send_to_vec(e, &["-i", "@1", "tank/fs@2"]),
    );
    assert_eq!(std::fs::read(target.join("f")).unwrap(), b"NEW CONTENTS");
    let mut s = String::new();
    open.read_to_string(&mut s).unwrap();
    assert_eq!(s, "kept", "an open file of an unchanged object reads on");
}

#[test]
fn replication_streams_carry_children_properties_and_clones() {
    let m = two_pools();
    let e = &m.env;
    e.ok(&[
        "zfs",
        "create",
        "-o",
        "compression=zstd",
        "-o",
        "com.example:role=db",
        "tank/fs",
    ]);
    e.ok(&["zfs", "create", "-o", "recordsize=16K", "tank/fs/child"]);
    populate(&m.mnt("tank/fs"), 3);
    populate(&m.mnt("tank/fs/child"), 4);
    e.ok(&["zfs", "snapshot", "-r", "tank/fs@1"]);
    e.ok(&["zfs", "clone", "tank/fs/child@1", "tank/fs/clone"]);
    std::fs::write(m.mnt("tank/fs/clone").join("own"), b"clone data").unwrap();
    e.ok(&["zfs", "snapshot", "-r", "tank/fs@2"]);
    let stream = send_to_vec(e, &["-R", "tank/fs@2"]);
    let est = e.ok(&["zfs", "send", "-nvP", "-R", "tank/fs@2"]);
    let size: u64 = est
        .lines()
        .last()
        .unwrap()
        .strip_prefix("size\t")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        size,
        stream.len() as u64,
        "the estimate of a package is its size"
    );
    receive_ok(e, &["backup/r"], &stream);
    for ds in ["", "/child", "/clone"] {
        assert_same_tree_except(
            &snap_dir(&m, &format!("tank/fs{ds}"), "2"),
            &m.mnt(&format!("backup/r{ds}")),
            &["child", "clone"],
        );
    }
    assert_eq!(e.get("compression", "backup/r"), "zstd");
    assert_eq!(e.get("com.example:role", "backup/r"), "db");
    let src = e.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "source",
        "compression",
        "backup/r",
    ]);
    assert_eq!(src.trim(), "received");
    assert_eq!(e.get("recordsize", "backup/r/child"), "16384");
    assert_eq!(e.get("origin", "backup/r/clone"), "backup/r/child@1");
    for s in [
        "backup/r@1",
        "backup/r@2",
        "backup/r/child@1",
        "backup/r/child@2",
        "backup/r/clone@2",
    ] {
        let src = s.replacen("backup/r", "tank/fs", 1);
        assert_eq!(guid(e, s), guid(e, &src), "{s}");
    }

    // The sender renames and destroys snapshots; -F -R follows.
    e.ok(&["zfs", "rename", "tank/fs@1", "tank/fs@first"]);
    e.ok(&["zfs", "destroy", "tank/fs/child@2"]);
    std::fs::write(m.mnt("tank/fs/child").join("later"), b"3").unwrap();
    e.ok(&["zfs", "snapshot", "-r", "tank/fs@3"]);
    let inc = send_to_vec(e, &["-R", "-I", "@2", "tank/fs@3"]);
    receive_ok(e, &["-F", "backup/r"], &inc);
    for ds in ["", "/child", "/clone"] {
        assert_same_tree_except(
            &snap_dir(&m, &format!("tank/fs{ds}"), "3"),
            &m.mnt(&format!("backup/r{ds}")),
            &["child", "clone"],
        );
    }
    let snaps = e.ok(&[
        "zfs", "list", "-H", "-t", "snapshot", "-o", "name", "-r", "-d", "1", "backup/r",
    ]);
    assert_eq!(snaps, "backup/r@first\nbackup/r@2\nbackup/r@3\n");
    let snaps = e.ok(&[
        "zfs",
        "list",
        "-H",
        "-t",
        "snapshot",
        "-o",
        "name",
        "-r",
        "backup/r/child",
    ]);
    assert_eq!(snaps, "backup/r/child@1\nbackup/r/child@3\n");

    // A filesystem the sender destroyed goes from the copy too with -F.
    e.ok(&["zfs", "destroy", "-r", "tank/fs/clone"]);
    e.ok(&["zfs", "snapshot", "-r", "tank/fs@4"]);
    let inc = send_to_vec(e, &["-R", "-I", "@3", "tank/fs@4"]);
    receive_ok(e, &["-F", "backup/r"], &inc);
    let left = e.ok(&["zfs", "list", "-H", "-o", "name", "-r", "backup/r"]);
    assert_eq!(left, "backup/r\nbackup/r/child\n");
}

#[test]
fn interrupted_receives_resume_to_the_same_result() {
    let m = two_pools();
    let e = &m.env;
    e.ok(&["zfs", "create", "tank/fs"]);
    populate(&m.mnt("tank/fs"), 5);
    for i in 0..6 {
        std::fs::write(
            m.mnt("tank/fs").join(format!("bulk{i}")),
            noise(4 * MIB as usize, i),
        )
        .unwrap();
    }
    e.ok(&["zfs", "snapshot", "tank/fs@1"]);
    let full = send_to_vec(e, &["tank/fs@1"]);

    // Without -s a cut stream leaves nothing.
    let err = receive_fails(e, &["backup/r"], &full[..full.len() / 2]);
    assert!(
        err.contains("checksum mismatch or incomplete stream"),
        "{err}"
    );
    assert!(!e.datasets().iter().any(|d| d.starts_with("backup/r")));

    // With -s: cut at random offsets, resumed each time with send -t.
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut stream = full.clone();
    let mut tries = 0;
    loop {
        let cut = if tries >= 4 {
            stream.len()
        } else {
            rng.random_range(1..stream.len())
        };
        let (code, _, err) = receive(e, &["-s", "backup/r"], &stream[..cut]);
        if code == 0 {
            break;
        }
        assert!(err.contains("zfs send -t "), "{err}");
        let token = e.get("receive_resume_token", "backup/r");
        assert_ne!(token, "-");
        assert!(!common::is_fuse_mounted(&m.mnt("backup/r")));
        stream = send_to_vec(e, &["-t", &token]);
        tries += 1;
    }
    assert_same_tree(&snap_dir(&m, "tank/fs", "1"), &m.mnt("backup/r"));
    assert_eq!(e.get("receive_resume_token", "backup/r"), "-");

    // An incremental whose receiving daemon is killed mid-stream.
    for i in 0..6 {
        std::fs::write(
            m.mnt("tank/fs").join(format!("bulk{i}")),
            noise(4 * MIB as usize, 100 + i),
        )
        .unwrap();
    }
    e.ok(&["zfs", "snapshot", "tank/fs@2"]);
    let inc = send_to_vec(e, &["-i", "@1", "tank/fs@2"]);
    let mut child = e
        .cmd(&["zfs", "receive", "-s", "backup/r"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(&inc[..inc.len() * 2 / 3]).unwrap();
    // Wait until the receive has recorded progress, then make it durable
    // (any command that commits a txg of the pool does).
    let started = std::time::Instant::now();
    loop {
        let token = e.get("receive_resume_token", "backup/r");
        if token != "-" && token_object(&token) > 0 {
            break;
        }
        assert!(started.elapsed().as_secs() < 30, "no progress recorded");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    e.ok(&["zfs", "set", "com.example:sync=1", "backup"]);
    e.kill_daemon();
    drop(pipe);
    let _ = child.wait();
    // The next command starts a daemon that imports the pools again.
    let token = e.get("receive_resume_token", "backup/r");
    assert_ne!(token, "-", "the partial receive survives the kill");
    let rest = send_to_vec(e, &["-t", &token]);
    assert!(
        rest.len() < inc.len(),
        "resumed {} of {}",
        rest.len(),
        inc.len()
    );
    receive_ok(e, &["-s", "backup/r"], &rest);
    assert_same_tree(&snap_dir(&m, "tank/fs", "2"), &m.mnt("backup/r"));

    // -A drops a partial receive.
    change(&m.mnt("tank/fs"), 9);
    e.ok(&["zfs", "snapshot", "tank/fs@3"]);
    let inc = send_to_vec(e, &["-i", "@2", "tank/fs@3"]);
    receive_fails(e, &["-s", "backup/r"], &inc[..inc.len() / 2]);
    assert_ne!(e.get("receive_resume_token", "backup/r"), "-");
    e.ok(&["zfs", "receive", "-A", "backup/r"]);
    assert_eq!(e.get("receive_resume_token", "backup/r"), "-");
    receive_ok(e, &["backup/r"], &inc);
    assert_same_tree(&snap_dir(&m, "tank/fs", "3"), &m.mnt("backup/r"));
}

#[test]
fn names_progress_and_terminals_as_zfs_does() {
    let m = two_pools();
    let e = &m.env;
    e.ok(&["zfs", "create", "-p", "tank/a/b"]);
    std::fs::write(m.mnt("tank/a/b").join("f"), noise(3 * MIB as usize, 4)).unwrap();
    e.ok(&["zfs", "snapshot", "tank/a/b@s"]);
    let stream = send_to_vec(e, &["tank/a/b@s"]);
    // -d: the sent name without its pool, under the target; -e: its last
    // element. Missing parents are made.
    receive_ok(e, &["-d", "backup/d"], &stream);
    receive_ok(e, &["-e", "backup/e"], &stream);
    receive_ok(e, &["backup/named@other"], &stream);
    let names = e.ok(&[
        "zfs", "list", "-H", "-t", "snapshot", "-o", "name", "-r", "backup",
    ]);
    assert_eq!(names, "backup/d/a/b@s\nbackup/e/b@s\nbackup/named@other\n");
    // A receive reads its stream and not a byte more: two streams in one
    // pipe go to two receives.
    let tarn = env!("CARGO_BIN_EXE_tarn");
    let two = with_env(e, "bash")
        .arg("-c")
        .arg(format!(
            "({tarn} zfs send tank/a/b@s; {tarn} zfs send tank/a/b@s) | \
             ({tarn} zfs receive backup/one && {tarn} zfs receive backup/two)"
        ))
        .output()
        .unwrap();
    assert!(
        two.status.success(),
        "{}",
        String::from_utf8_lossy(&two.stderr)
    );
    assert_eq!(guid(e, "backup/one@s"), guid(e, "backup/two@s"));
    // -v: the estimate, then progress lines on stderr.
    let out = e.dir.path().join("v.out");
    let r = e
        .cmd(&["zfs", "send", "-v", "tank/a/b@s"])
        .stdout(File::create(&out).unwrap())
        .output()
        .unwrap();
    assert!(r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("full send of tank/a/b@s estimated size is"),
        "{err}"
    );
    assert!(err.contains("total estimated size is"), "{err}");
    assert!(
        err.contains("TIME        SENT   SNAPSHOT tank/a/b@s"),
        "{err}"
    );
    assert_eq!(std::fs::read(&out).unwrap(), stream);
    // A terminal on stdout is refused, as zfs-send(8) does.
    let r = with_env(e, "script")
        .args(["-qec", &format!("{tarn} zfs send tank/a/b@s"), "/dev/null"])
        .output()
        .unwrap();
    assert!(!r.status.success());
    let all = String::from_utf8_lossy(&r.stdout).into_owned() + &String::from_utf8_lossy(&r.stderr);
    assert!(
        all.contains("Stream can not be written to a terminal"),
        "{all}"
    );
}

#[test]
fn a_snapshot_being_sent_and_a_target_being_received_are_busy() {
    let m = two_pools();
    let e = &m.env;
    e.ok(&["zfs", "create", "tank/fs"]);
    std::fs::write(m.mnt("tank/fs").join("f"), noise(8 * MIB as usize, 5)).unwrap();
    e.ok(&["zfs", "snapshot", "tank/fs@s"]);
    // A send whose reader has not read yet: it waits on the pipe.
    let mut send = e
        .cmd(&["zfs", "send", "tank/fs@s"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let err = e.fail(&["zfs", "destroy", "tank/fs@s"]);
    assert!(err.contains("dataset is busy"), "{err}");
    let err = e.fail(&["zfs", "destroy", "-r", "tank/fs"]);
    assert!(err.contains("dataset is busy"), "{err}");
    assert!(e.datasets().contains(&"tank/fs".to_string()));
    let mut stream = Vec::new();
    send.stdout
        .take()
        .unwrap()
        .read_to_end(&mut stream)
        .unwrap();
    assert!(send.wait().unwrap().success());
    // A receive still reading its stream: a second one into the same
    // target is refused, and a kill -9 of the daemon (no -s) leaves
    // nothing behind.
    let mut recv = e
        .cmd(&["zfs", "receive", "backup/x"])
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut pipe = recv.stdin.take().unwrap();
    pipe.write_all(&stream[..stream.len() / 2]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let err = receive_fails(e, &["backup/x"], &stream);
    assert!(err.contains("busy"), "{err}");
    e.kill_daemon();
    drop(pipe);
    let _ = recv.wait();
    let all = e.ok(&["zfs", "list", "-H", "-o", "name", "-r", "backup"]);
    assert_eq!(all, "backup\n", "a receive without -s left something");
    assert_eq!(e.get("receive_resume_token", "backup"), "-");
    receive_ok(e, &["backup/x"], &stream);
    e.ok(&["zfs", "destroy", "tank/fs@s"]);
}

#[test]
fn holds_and_received_values_travel_when_asked() {
    let m = two_pools();
    let e = &m.env;
    e.ok(&["zfs", "create", "-o", "compression=zstd", "tank/fs"]);
    std::fs::write(m.mnt("tank/fs").join("f"), b"held").unwrap();
    e.ok(&["zfs", "snapshot", "tank/fs@s"]);
    e.ok(&["zfs", "hold", "keep", "tank/fs@s"]);
    // -h: the holds come along.
    receive_ok(e, &["backup/h"], &send_to_vec(e, &["-h", "tank/fs@s"]));
    let holds = e.ok(&["zfs", "holds", "-H", "backup/h@s"]);
    assert!(holds.starts_with("backup/h@s\tkeep\t"), "{holds}");
    let err = e.fail(&["zfs", "destroy", "backup/h@s"]);
    assert!(err.contains("busy") || err.contains("hold"), "{err}");
    // Without -h they do not.
    receive_ok(e, &["backup/n"], &send_to_vec(e, &["tank/fs@s"]));
    assert_eq!(e.ok(&["zfs", "holds", "-H", "backup/n@s"]), "");
    // -b sends what was received, not what is set over it.
    receive_ok(e, &["backup/p"], &send_to_vec(e, &["-p", "tank/fs@s"]));
    e.ok(&["zfs", "set", "compression=gzip", "backup/p"]);
    receive_ok(
        e,
        &["backup/b"],
        &send_to_vec(e, &["-b", "-p", "backup/p@s"]),
    );
    assert_eq!(e.get("compression", "backup/b"), "zstd");
    receive_ok(e, &["backup/l"], &send_to_vec(e, &["-p", "backup/p@s"]));
    assert_eq!(e.get("compression", "backup/l"), "gzip");
}
