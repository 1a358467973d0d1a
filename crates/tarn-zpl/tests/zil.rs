//! fsync through the intent log, and replay after a crash, on the real
//! dataset layer over fault-injecting devices.
//!
//! Replay, one test per kind of record: a durable starting tree, then
//! changes and an fsync, then a crash before any txg commits them (the
//! devices drop what was not flushed), then import and mount. The tree
//! after replay must be exactly the tree at the fsync: names, object
//! numbers and generations, modes, owners, rdev, symlink targets, link
//! counts, sizes, contents, xattrs and every timestamp (atime is off, so
//! reading the tree does not change it). Each fsync must have written
//! the log and not waited for a txg.
//!
//! The seeded test: a workload writes, extends, truncates, chmods and
//! fallocates files, creates, links, unlinks and renames them (plain,
//! over a file, NOREPLACE, EXCHANGE), makes and removes directories and
//! sets and removes xattrs, calling fsync now and then. Each fsync
//! acknowledges the file's contents and mode, and every namespace and
//! xattr change so far (the log commits all of those at any fsync). fsync
//! must not commit a txg (that is the point of the log) once the files
//! exist. Then the devices fail after a random number of writes,
//! unflushed writes are dropped (the last one maybe torn) and the pool is
//! imported and mounted again, which replays the log. The names and
//! xattrs must be a state the workload produced at or after its last
//! fsync, every file's contents one produced at or after its own last
//! fsync, and a second crash right after the mount must change nothing
//! (replay happened exactly once).
//!
//! `TARN_SEED=n` replays one seed; `TARN_SEEDS=n` runs n seeds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_dsl::Pool;
use tarn_format::zpl::{S_IFBLK, S_IFCHR, S_IFIFO, S_IFSOCK};
use tarn_pool::import::import_devices;
use tarn_pool::NewTop;
use tarn_vdev::{BlockDevice, FaultDevice, MemDevice};
use tarn_zpl::{
    AtimeMode, Attr, Clock, Cred, FileType, RenameFlags, SetAttr, Settings, Timespec, XattrMode,
    XattrSetFlags, Zpl, ZplError, ZplOptions, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE,
};

const DATASET: &str = "tank/fs";
const FILES: usize = 4;

fn new_pool(seed: u64) -> (Vec<Arc<FaultDevice>>, Arc<Pool>) {
    let devs: Vec<Arc<FaultDevice>> = (0..2)
        .map(|i| {
            Arc::new(FaultDevice::new(
                Arc::new(MemDevice::new(256 << 20)),
                seed * 7 + i,
            ))
        })
        .collect();
    let as_dyn: Vec<Arc<dyn BlockDevice>> = devs
        .iter()
        .map(|d| d.clone() as Arc<dyn BlockDevice>)
        .collect();
    let top = NewTop::mem_mirror(&as_dyn);
    let pool = Pool::create("tank", vec![top], &[], &[]).unwrap();
    pool.dataset_create(DATASET, &[]).unwrap();
    (devs, pool)
}

fn mount_opts(pool: &Arc<Pool>, opts: ZplOptions, format: bool) -> Result<Zpl, ZplError> {
    let os = pool.dataset_objset(DATASET).unwrap();
    let opts = ZplOptions {
        zil: Some(pool.dataset_zil(DATASET).unwrap()),
        ..opts
    };
    if format {
        Zpl::format(os, pool.txg().clone(), opts)
    } else {
        Zpl::mount(os, pool.txg().clone(), opts)
    }
}

fn mount(pool: &Arc<Pool>, format: bool) -> Zpl {
    mount_opts(pool, ZplOptions::default(), format).unwrap()
}

fn crash_and_import(pool: Arc<Pool>, devs: &[Arc<FaultDevice>]) -> Arc<Pool> {
    for d in devs {
        d.crash();
        d.heal();
    }
    drop(pool);
    let devs: Vec<Arc<dyn BlockDevice>> = devs.iter().map(|d| d.clone() as _).collect();
    Pool::open(import_devices(&devs).expect("import")).expect("open")
}

fn replayed(pool: &Arc<Pool>) -> u64 {
    pool.dataset_zil(DATASET).unwrap().stats().records_replayed
}

// ---------------------------------------------------------------- exact replay

/// A clock that moves 1 ms at every reading, so no two changes share a
/// timestamp and a parent's times say which change touched it last.
struct StepClock(AtomicI64);

impl Clock for StepClock {
    fn now(&self) -> Timespec {
        let ns = self.0.fetch_add(1_000_000, Ordering::Relaxed);
        Timespec::new(ns / 1_000_000_000, (ns % 1_000_000_000) as u32)
    }
}

/// One entry of a tree as a program can see it.
#[derive(Debug, PartialEq, Eq)]
struct Node {
    /// `blocks` zeroed: it counts what the last txg committed.
    attr: Attr,
    target: Option<Vec<u8>>,
    data: Option<Vec<u8>>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

fn node(zpl: &Zpl, ino: u64) -> Node {
    let mut attr = zpl.getattr(ino).unwrap();
    attr.blocks = 0;
    let target = (attr.kind == FileType::Symlink).then(|| zpl.readlink(ino).unwrap());
    let data = (attr.kind == FileType::Regular).then(|| {
        let mut buf = vec![0u8; attr.size as usize];
        assert_eq!(zpl.read(ino, 0, &mut buf).unwrap(), buf.len());
        buf
    });
    let cred = Cred::root();
    let xattrs = zpl
        .listxattr(ino, &cred)
        .unwrap()
        .into_iter()
        .map(|n| {
            let v = zpl.getxattr(ino, &n, &cred).unwrap();
            (n, v)
        })
        .collect();
    Node {
        attr,
        target,
        data,
        xattrs,
    }
}

/// Every path of the tree ("/" is the root) with its node.
fn tree(zpl: &Zpl) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    out.insert("/".to_string(), node(zpl, zpl.root_ino()));
    let mut dirs = vec![(String::new(), zpl.root_ino())];
    while let Some((prefix, dir)) = dirs.pop() {
        for e in zpl.read_dir_all(dir).unwrap() {
            let path = format!("{prefix}/{}", String::from_utf8_lossy(&e.name));
            if e.kind == FileType::Directory {
                dirs.push((path.clone(), e.ino));
            }
            out.insert(path, node(zpl, e.ino));
        }
    }
    out
}

fn assert_same_tree(got: &BTreeMap<String, Node>, want: &BTreeMap<String, Node>) {
    for (path, n) in want {
        assert_eq!(got.get(path), Some(n), "{path} after replay");
    }
    let extra: Vec<_> = got.keys().filter(|p| !want.contains_key(*p)).collect();
    assert!(extra.is_empty(), "paths that should not exist: {extra:?}");
}

/// A pool and a mounted filesystem whose crashes the test controls.
struct Rig {
    devs: Vec<Arc<FaultDevice>>,
    pool: Option<Arc<Pool>>,
    opts: ZplOptions,
}

/// Where the log and the txgs stood when the changes under test began.
struct Mark {
    synced: u64,
    commits: u64,
}

impl Rig {
    fn new(xattr: XattrMode) -> (Rig, Zpl) {
        let (devs, pool) = new_pool(1);
        let opts = ZplOptions {
            settings: Settings {
                atime: AtimeMode::Off,
                xattr,
                ..Settings::default()
            },
            clock: Arc::new(StepClock(AtomicI64::new(1_700_000_000_000_000_000))),
            ..ZplOptions::default()
        };
        let rig = Rig {
            devs,
            pool: Some(pool),
            opts,
        };
        let zpl = rig.mount(true).unwrap();
        (rig, zpl)
    }

    fn pool(&self) -> &Arc<Pool> {
        self.pool.as_ref().expect("pool open")
    }

    fn mount(&self, format: bool) -> Result<Zpl, ZplError> {
        mount_opts(self.pool(), self.opts.clone(), format)
    }

    fn commits(&self) -> u64 {
        self.pool().dataset_zil(DATASET).unwrap().stats().commits
    }

    /// Makes everything so far durable in a txg (and the log's chain
    /// exist), so that what follows is only in the log.
    fn settle(&self, zpl: &Zpl) -> Mark {
        zpl.fsync(zpl.root_ino()).unwrap();
        self.pool().txg().wait_synced(0).unwrap();
        Mark {
            synced: self.pool().txg().last_synced(),
            commits: self.commits(),
        }
    }

    fn assert_log_only(&self, m: &Mark, what: &str) {
        assert_eq!(
            self.pool().txg().last_synced(),
            m.synced,
            "{what}: fsync waited for a txg"
        );
        assert!(self.commits() > m.commits, "{what}: fsync wrote no log");
    }

    fn crash(&mut self) {
        let pool = self.pool.take().expect("pool open");
        self.pool = Some(crash_and_import(pool, &self.devs));
    }
}

/// `setup` and a txg, then `ops` and an fsync of the root, then a crash:
/// the mount must replay the log to exactly the tree at the fsync.
fn replays_exactly(
    xattr: XattrMode,
    setup: impl FnOnce(&Zpl),
    ops: impl FnOnce(&Zpl),
) -> (Rig, Zpl) {
    let (mut rig, zpl) = Rig::new(xattr);
    setup(&zpl);
    let mark = rig.settle(&zpl);
    ops(&zpl);
    zpl.fsync(zpl.root_ino()).unwrap();
    rig.assert_log_only(&mark, "changes under test");
    let before = tree(&zpl);
    drop(zpl);
    rig.crash();
    let zpl = rig.mount(false).unwrap();
    assert!(replayed(rig.pool()) > 0, "nothing was replayed");
    assert_same_tree(&tree(&zpl), &before);
    (rig, zpl)
}

fn ino(zpl: &Zpl, dir: u64, name: &str) -> u64 {
    zpl.lookup(dir, name.as_bytes(), &Cred::root()).unwrap().ino
}

/// A path's inode, from the root.
fn at(zpl: &Zpl, path: &str) -> u64 {
    path.split('/')
        .fold(zpl.root_ino(), |dir, name| ino(zpl, dir, name))
}

fn makedev(major: u64, minor: u64) -> u64 {
    major << 8 | minor
}

#[test]
fn replay_creates_every_kind_of_inode() {
    let root = Cred::root();
    let user = Cred {
        uid: 1000,
        gid: 100,
        groups: vec![],
    };
    let (_rig, zpl) = replays_exactly(
        XattrMode::Sa,
        |zpl| {
            // A set-group-ID directory of group 50: what it hands down.
            let d = zpl.mkdir(zpl.root_ino(), b"sgid", 0o2777, &root).unwrap();
            let sa = SetAttr {
                gid: Some(50),
                ..SetAttr::default()
            };
            zpl.setattr(d.ino, &sa, &root).unwrap();
        },
        |zpl| {
            let r = zpl.root_ino();
            let d = at(zpl, "sgid");
            zpl.create(d, b"file", 0o640, &user, true).unwrap();
            zpl.mkdir(d, b"sub", 0o755, &user).unwrap();
            zpl.mknod(r, b"fifo", S_IFIFO | 0o600, 0, &root).unwrap();
            zpl.mknod(r, b"sock", S_IFSOCK | 0o600, 0, &root).unwrap();
            zpl.mknod(r, b"chr", S_IFCHR | 0o620, makedev(4, 1), &root)
                .unwrap();
            zpl.mknod(r, b"blk", S_IFBLK | 0o660, makedev(8, 3), &root)
                .unwrap();
            zpl.mknod(r, b"plain", 0o644, 0, &root).unwrap();
            zpl.symlink(d, b"link", b"../fifo", &user).unwrap();
        },
    );
    // What the tree comparison covers, spelled out for the reader.
    let sub = zpl.getattr(at(&zpl, "sgid/sub")).unwrap();
    assert_eq!((sub.mode & 0o7777, sub.uid, sub.gid), (0o2755, 1000, 50));
    let file = zpl.getattr(at(&zpl, "sgid/file")).unwrap();
    assert_eq!((file.mode & 0o7777, file.gid), (0o640, 50));
    assert_eq!(zpl.getattr(at(&zpl, "chr")).unwrap().rdev, makedev(4, 1));
    assert_eq!(
        zpl.getattr(at(&zpl, "blk")).unwrap().kind,
        FileType::BlockDevice
    );
    assert_eq!(zpl.readlink(at(&zpl, "sgid/link")).unwrap(), b"../fifo");
    assert_eq!(zpl.getattr(at(&zpl, "sgid")).unwrap().nlink, 3);
}

#[test]
fn replay_links_removes_and_renames() {
    let root = Cred::root();
    let mut gone = Vec::new();
    let (_rig, zpl) = replays_exactly(
        XattrMode::Sa,
        |zpl| {
            let r = zpl.root_ino();
            for d in ["a", "b", "c", "a/e1", "b/e2"] {
                let (parent, name) = d.rsplit_once('/').unwrap_or(("", d));
                let p = if parent.is_empty() {
                    r
                } else {
                    at(zpl, parent)
                };
                zpl.mkdir(p, name.as_bytes(), 0o755, &root).unwrap();
            }
            for f in ["a/f1", "a/f2", "a/f3", "b/g", "x", "held"] {
                let (parent, name) = f.rsplit_once('/').unwrap_or(("", f));
                let p = if parent.is_empty() {
                    r
                } else {
                    at(zpl, parent)
                };
                let ino = zpl
                    .create(p, name.as_bytes(), 0o644, &root, true)
                    .unwrap()
                    .ino;
                zpl.write(ino, 0, f.as_bytes(), &root).unwrap();
            }
        },
        |zpl| {
            let (r, a, b) = (zpl.root_ino(), at(zpl, "a"), at(zpl, "b"));
            let f1 = at(zpl, "a/f1");
            zpl.link(f1, b, b"f1link", &root).unwrap();
            zpl.unlink(a, b"f1", &root).unwrap();
            gone.push(at(zpl, "a/f2"));
            zpl.unlink(a, b"f2", &root).unwrap();
            gone.push(at(zpl, "c"));
            zpl.rmdir(r, b"c", &root).unwrap();
            zpl.rename(a, b"f3", b, b"f3moved", RenameFlags::NONE, &root)
                .unwrap();
            gone.push(at(zpl, "b/g"));
            zpl.rename(r, b"x", b, b"g", RenameFlags::NONE, &root)
                .unwrap();
            zpl.rename(b, b"f3moved", b, b"new", RenameFlags::NOREPLACE, &root)
                .unwrap();
            zpl.mkdir(a, b"sub", 0o700, &root).unwrap();
            zpl.rename(a, b"sub", b, b"sub", RenameFlags::NONE, &root)
                .unwrap();
            zpl.mkdir(r, b"d2", 0o750, &root).unwrap();
            zpl.rename(r, b"d2", b, b"new", RenameFlags::EXCHANGE, &root)
                .unwrap();
            gone.push(at(zpl, "b/e2"));
            zpl.rename(a, b"e1", b, b"e2", RenameFlags::NONE, &root)
                .unwrap();
            // Unlinked while open: kept in the delete queue until release.
            let held = at(zpl, "held");
            zpl.open(held).unwrap();
            zpl.unlink(r, b"held", &root).unwrap();
            assert_eq!(zpl.delete_queue().unwrap(), vec![held]);
            gone.push(held);
        },
    );
    for ino in gone {
        assert_eq!(zpl.getattr(ino), Err(ZplError::NotFound), "inode {ino}");
    }
    assert_eq!(zpl.delete_queue().unwrap(), Vec::<u64>::new());
    assert_eq!(zpl.getattr(at(&zpl, "b/f1link")).unwrap().nlink, 1);
    assert_eq!(
        zpl.getattr(at(&zpl, "b/new")).unwrap().kind,
        FileType::Directory
    );
    assert_eq!(zpl.getattr(at(&zpl, "d2")).unwrap().kind, FileType::Regular);
    assert_eq!(zpl.getattr(at(&zpl, "b")).unwrap().nlink, 5, "sub, e2, new");
}

fn xattr_ops(xattr: XattrMode) {
    let root = Cred::root();
    let any = XattrSetFlags::Any;
    let (_rig, zpl) = replays_exactly(
        xattr,
        |zpl| {
            let r = zpl.root_ino();
            let f = zpl.create(r, b"f", 0o644, &root, true).unwrap().ino;
            zpl.mkdir(r, b"d", 0o755, &root).unwrap();
            zpl.setxattr(f, b"user.old", b"old", any, &root).unwrap();
            zpl.setxattr(f, b"user.gone", &[3; 900], any, &root)
                .unwrap();
        },
        |zpl| {
            let (f, d) = (at(zpl, "f"), at(zpl, "d"));
            let acl = [2u8, 0, 0, 0, 1, 0, 6, 0, 0xff, 0xff, 0xff, 0xff];
            zpl.setxattr(f, b"user.small", b"v", any, &root).unwrap();
            zpl.setxattr(f, b"user.big", &[7; 3000], any, &root)
                .unwrap();
            zpl.setxattr(f, b"trusted.t", b"tt", any, &root).unwrap();
            zpl.setxattr(f, b"security.selinux", b"ctx", any, &root)
                .unwrap();
            zpl.setxattr(f, b"system.posix_acl_access", &acl, any, &root)
                .unwrap();
            zpl.setxattr(d, b"system.posix_acl_default", &acl, any, &root)
                .unwrap();
            zpl.setxattr(f, b"user.old", b"replaced", XattrSetFlags::Replace, &root)
                .unwrap();
            zpl.setxattr(f, b"user.small", &[9; 400], any, &root)
                .unwrap();
            zpl.removexattr(f, b"trusted.t", &root).unwrap();
            zpl.removexattr(f, b"user.gone", &root).unwrap();
        },
    );
    let f = at(&zpl, "f");
    let v = zpl.getxattr(f, b"user.old", &root).unwrap();
    assert_eq!(v, b"replaced");
    assert_eq!(zpl.getxattr(f, b"trusted.t", &root), Err(ZplError::NoData));
    assert_eq!(zpl.getxattr(f, b"user.big", &root).unwrap(), vec![7; 3000]);
}

#[test]
fn replay_xattrs_inline() {
    xattr_ops(XattrMode::Sa);
}

#[test]
fn replay_xattrs_in_a_directory() {
    xattr_ops(XattrMode::Dir);
}

#[test]
fn replay_fallocate_and_hole_punch() {
    let root = Cred::root();
    let (_rig, zpl) = replays_exactly(
        XattrMode::Sa,
        |zpl| {
            let f = zpl
                .create(zpl.root_ino(), b"f", 0o644, &root, true)
                .unwrap()
                .ino;
            zpl.write(f, 0, &[5; 300_000], &root).unwrap();
        },
        |zpl| {
            let f = at(zpl, "f");
            zpl.fallocate(f, 0, 250_000, 200_000, &root).unwrap();
            let punch = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
            zpl.fallocate(f, punch, 1000, 140_000, &root).unwrap();
            zpl.fsync(f).unwrap();
        },
    );
    let f = at(&zpl, "f");
    assert_eq!(zpl.getattr(f).unwrap().size, 450_000);
    let mut buf = vec![0u8; 450_000];
    zpl.read(f, 0, &mut buf).unwrap();
    assert!(buf[..1000].iter().all(|&b| b == 5));
    assert!(buf[1000..141_000].iter().all(|&b| b == 0));
    assert!(buf[141_000..300_000].iter().all(|&b| b == 5));
    assert!(buf[300_000..].iter().all(|&b| b == 0));
}

#[test]
fn fsync_after_namespace_and_xattr_changes_writes_only_the_log() {
    let root = Cred::root();
    let (rig, zpl) = Rig::new(XattrMode::Sa);
    let r = zpl.root_ino();
    let f = zpl.create(r, b"f", 0o644, &root, true).unwrap().ino;
    zpl.write(f, 0, &[1; 8192], &root).unwrap();
    let mark = rig.settle(&zpl);
    type Op<'a> = Box<dyn Fn(&Zpl) + 'a>;
    let any = XattrSetFlags::Any;
    let punch = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
    let steps: Vec<(&str, Op<'_>)> = vec![
        (
            "create",
            Box::new(|z| {
                z.create(r, b"c", 0o600, &root, true).unwrap();
            }),
        ),
        (
            "mkdir",
            Box::new(|z| {
                z.mkdir(r, b"d", 0o700, &root).unwrap();
            }),
        ),
        (
            "mknod",
            Box::new(|z| {
                z.mknod(r, b"p", S_IFIFO | 0o600, 0, &root).unwrap();
            }),
        ),
        (
            "symlink",
            Box::new(|z| {
                z.symlink(r, b"s", b"f", &root).unwrap();
            }),
        ),
        (
            "link",
            Box::new(|z| {
                z.link(f, r, b"f2", &root).unwrap();
            }),
        ),
        (
            "rename",
            Box::new(|z| {
                z.rename(r, b"c", r, b"c2", RenameFlags::NONE, &root)
                    .unwrap()
            }),
        ),
        (
            "exchange",
            Box::new(|z| {
                z.rename(r, b"c2", r, b"d", RenameFlags::EXCHANGE, &root)
                    .unwrap()
            }),
        ),
        ("unlink", Box::new(|z| z.unlink(r, b"d", &root).unwrap())),
        ("rmdir", Box::new(|z| z.rmdir(r, b"c2", &root).unwrap())),
        (
            "setxattr",
            Box::new(|z| z.setxattr(f, b"user.a", b"1", any, &root).unwrap()),
        ),
        (
            "removexattr",
            Box::new(|z| z.removexattr(f, b"user.a", &root).unwrap()),
        ),
        (
            "fallocate",
            Box::new(|z| z.fallocate(f, 0, 0, 20_000, &root).unwrap()),
        ),
        (
            "punch",
            Box::new(|z| z.fallocate(f, punch, 0, 4096, &root).unwrap()),
        ),
    ];
    for (what, op) in steps {
        let before = rig.commits();
        op(&zpl);
        zpl.fsync(f).unwrap();
        assert_eq!(
            rig.commits(),
            before + 1,
            "{what}: fsync wrote no log block"
        );
        rig.assert_log_only(&mark, what);
    }
}

#[test]
fn a_crash_during_replay_replays_again() {
    let root = Cred::root();
    let (mut rig, zpl) = Rig::new(XattrMode::Dir);
    let r = zpl.root_ino();
    let old = zpl.create(r, b"old", 0o644, &root, true).unwrap().ino;
    zpl.write(old, 0, b"old contents", &root).unwrap();
    let mark = rig.settle(&zpl);
    let d = zpl.mkdir(r, b"d", 0o755, &root).unwrap().ino;
    let f = zpl.create(d, b"f", 0o600, &root, true).unwrap().ino;
    zpl.write(f, 0, &[8; 20_000], &root).unwrap();
    zpl.setxattr(f, b"user.x", &[4; 500], XattrSetFlags::Any, &root)
        .unwrap();
    zpl.link(f, r, b"f-too", &root).unwrap();
    zpl.unlink(r, b"old", &root).unwrap();
    zpl.rename(d, b"f", r, b"old", RenameFlags::NONE, &root)
        .unwrap();
    zpl.symlink(d, b"l", b"../old", &root).unwrap();
    zpl.fsync(f).unwrap();
    rig.assert_log_only(&mark, "changes under test");
    let before = tree(&zpl);
    drop(zpl);
    rig.crash();
    // The replay's txg never commits: the devices fail after a few writes.
    for writes in [0, 1, 3, 8] {
        for d in &rig.devs {
            d.fail_after_writes(writes);
        }
        let r = rig.mount(false);
        assert!(writes > 0 || r.is_err(), "replay committed with no device");
        drop(r);
        rig.crash();
    }
    let zpl = rig.mount(false).unwrap();
    assert_same_tree(&tree(&zpl), &before);
    drop(zpl);
    rig.crash();
    let zpl = rig.mount(false).unwrap();
    assert_same_tree(&tree(&zpl), &before);
    assert_eq!(zpl.getattr(old), Err(ZplError::NotFound));
}

// ---------------------------------------------------------------- seeded

/// What a file may look like: (mode bits, contents).
type Version = (u32, Vec<u8>);
/// An inode for all time: (number, generation).
type Id = (u64, u64);

fn state(zpl: &Zpl, ino: u64) -> Version {
    let a = zpl.getattr(ino).unwrap();
    let mut buf = vec![0u8; a.size as usize];
    let n = zpl.read(ino, 0, &mut buf).unwrap();
    assert_eq!(n, buf.len());
    (a.mode & 0o7777, buf)
}

/// What the log's synchronous records describe: every name (path to the
/// inode and whether it is a directory) and the xattrs of every file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Names {
    paths: BTreeMap<String, (Id, bool)>,
    xattrs: BTreeMap<Id, BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl Names {
    fn files(&self) -> Vec<(&String, Id)> {
        self.paths
            .iter()
            .filter(|(_, (_, dir))| !dir)
            .map(|(p, (id, _))| (p, *id))
            .collect()
    }

    /// Drops the xattrs of inodes no name reaches, and empty sets.
    fn prune(&mut self) {
        let live: BTreeSet<Id> = self.paths.values().map(|(id, _)| *id).collect();
        self.xattrs
            .retain(|id, x| live.contains(id) && !x.is_empty());
    }

    fn read(zpl: &Zpl) -> Names {
        let mut n = Names::default();
        let cred = Cred::root();
        let mut dirs = vec![(String::new(), zpl.root_ino())];
        while let Some((prefix, dir)) = dirs.pop() {
            for e in zpl.read_dir_all(dir).unwrap() {
                let path = format!("{prefix}{}", String::from_utf8(e.name).unwrap());
                let a = zpl.getattr(e.ino).unwrap();
                let id = (e.ino, a.gen);
                let is_dir = a.kind == FileType::Directory;
                n.paths.insert(path.clone(), (id, is_dir));
                if is_dir {
                    dirs.push((format!("{path}/"), e.ino));
                    continue;
                }
                for name in zpl.listxattr(e.ino, &cred).unwrap() {
                    let v = zpl.getxattr(e.ino, &name, &cred).unwrap();
                    n.xattrs.entry(id).or_default().insert(name, v);
                }
            }
        }
        n
    }
}

/// Names files may take: in the root and in `d`.
fn file_paths() -> Vec<String> {
    (0..6)
        .flat_map(|i| [format!("f{i}"), format!("d/f{i}")])
        .collect()
}

struct Workload<'a> {
    zpl: &'a Zpl,
    rng: ChaCha8Rng,
    d: u64,
    names: Names,
    /// Per file, every version since (and including) the acknowledged one.
    versions: BTreeMap<Id, Vec<Version>>,
}

impl Workload<'_> {
    /// The directory inode and name of a path.
    fn split<'p>(&self, path: &'p str) -> (u64, &'p [u8]) {
        match path.strip_prefix("d/") {
            Some(name) => (self.d, name.as_bytes()),
            None => (self.zpl.root_ino(), path.as_bytes()),
        }
    }

    fn pick_file(&mut self) -> Option<(String, Id)> {
        let files = self.names.files();
        if files.is_empty() {
            return None;
        }
        let (p, id) = files[self.rng.random_range(0..files.len())];
        Some((p.clone(), id))
    }

    fn pick_path(&mut self, present: Option<bool>) -> Option<String> {
        let all: Vec<String> = file_paths()
            .into_iter()
            .filter(|p| present.is_none_or(|want| self.names.paths.contains_key(p) == want))
            .collect();
        (!all.is_empty()).then(|| all[self.rng.random_range(0..all.len())].clone())
    }

    /// One operation on a file's data or mode (an asynchronous record).
    fn change_file(&mut self, id: Id) -> Result<(), ZplError> {
        let (zpl, cred) = (self.zpl, Cred::root());
        let ino = id.0;
        let len = state(zpl, ino).1.len() as u64;
        match self.rng.random_range(0..10) {
            0 => {
                let size = self.rng.random_range(0..=len + 9000);
                let sa = SetAttr {
                    size: Some(size),
                    ..SetAttr::default()
                };
                zpl.setattr(ino, &sa, &cred).map(drop)?
            }
            1 => {
                let sa = SetAttr {
                    mode: Some(self.rng.random_range(0o400..0o777)),
                    ..SetAttr::default()
                };
                zpl.setattr(ino, &sa, &cred).map(drop)?
            }
            2 => {
                let off = self.rng.random_range(0..=len + 3000);
                let n = self.rng.random_range(1..9000);
                let punch = self.rng.random_bool(0.5);
                let mode = if punch {
                    FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
                } else {
                    0
                };
                zpl.fallocate(ino, mode, off, n, &cred)?
            }
            _ => {
                let off = self.rng.random_range(0..=len + 5000);
                let n = self.rng.random_range(1..70_000usize);
                let mut data = vec![0u8; n];
                self.rng.fill(&mut data[..]);
                zpl.write(ino, off, &data, &cred).map(drop)?
            }
        }
        let now = state(zpl, ino);
        self.versions.entry(id).or_default().push(now);
        Ok(())
    }

    /// One namespace or xattr change (a synchronous record); `false` if
    /// none applied.
    fn change_names(&mut self) -> Result<bool, ZplError> {
        let (zpl, cred) = (self.zpl, Cred::root());
        match self.rng.random_range(0..8) {
            0 | 1 => {
                let Some(p) = self.pick_path(Some(false)) else {
                    return Ok(false);
                };
                let (dir, name) = self.split(&p);
                let a = zpl.create(dir, name, 0o644, &cred, true)?;
                let id = (a.ino, a.gen);
                self.names.paths.insert(p, (id, false));
                self.versions.insert(id, vec![state(zpl, a.ino)]);
            }
            2 => {
                let Some((p, _)) = self.pick_file() else {
                    return Ok(false);
                };
                let (dir, name) = self.split(&p);
                zpl.unlink(dir, name, &cred)?;
                self.names.paths.remove(&p);
            }
            3 | 4 => return self.rename(),
            5 => {
                let (Some((_, id)), Some(p)) = (self.pick_file(), self.pick_path(Some(false)))
                else {
                    return Ok(false);
                };
                let (dir, name) = self.split(&p);
                zpl.link(id.0, dir, name, &cred)?;
                self.names.paths.insert(p, (id, false));
            }
            6 => {
                let Some((_, id)) = self.pick_file() else {
                    return Ok(false);
                };
                let name = [b"user.a", b"user.b"][self.rng.random_range(0..2)].to_vec();
                let have = self
                    .names
                    .xattrs
                    .get(&id)
                    .is_some_and(|x| x.contains_key(&name));
                if have && self.rng.random_bool(0.4) {
                    zpl.removexattr(id.0, &name, &cred)?;
                    self.names.xattrs.entry(id).or_default().remove(&name);
                } else {
                    let n = [
                        self.rng.random_range(1..60),
                        self.rng.random_range(300..3000),
                    ][self.rng.random_range(0..2)];
                    let v: Vec<u8> = (0..n).map(|_| self.rng.random()).collect();
                    zpl.setxattr(id.0, &name, &v, XattrSetFlags::Any, &cred)?;
                    self.names.xattrs.entry(id).or_default().insert(name, v);
                }
            }
            _ => {
                let p = format!("e{}", self.rng.random_range(0..3));
                let r = zpl.root_ino();
                if self.names.paths.remove(&p).is_some() {
                    zpl.rmdir(r, p.as_bytes(), &cred)?;
                } else {
                    let a = zpl.mkdir(r, p.as_bytes(), 0o755, &cred)?;
                    self.names.paths.insert(p, ((a.ino, a.gen), true));
                }
            }
        }
        self.names.prune();
        Ok(true)
    }

    fn rename(&mut self) -> Result<bool, ZplError> {
        let (Some((src, sid)), Some(dst)) = (self.pick_file(), self.pick_path(None)) else {
            return Ok(false);
        };
        let target = self.names.paths.get(&dst).copied();
        let flags = match (target, self.rng.random_bool(0.5)) {
            (Some(_), true) => RenameFlags::EXCHANGE,
            (None, true) => RenameFlags::NOREPLACE,
            _ => RenameFlags::NONE,
        };
        let ((sd, sn), (dd, dn)) = (self.split(&src), self.split(&dst));
        self.zpl.rename(sd, sn, dd, dn, flags, &Cred::root())?;
        match target {
            // Two names of one inode: rename does nothing.
            Some((tid, _)) if tid == sid => {}
            Some(t) if flags.exchange => {
                self.names.paths.insert(src, t);
                self.names.paths.insert(dst, (sid, false));
            }
            _ => {
                self.names.paths.remove(&src);
                self.names.paths.insert(dst, (sid, false));
            }
        }
        self.names.prune();
        Ok(true)
    }
}

fn run_seed(seed: u64) -> u64 {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (devs, pool) = new_pool(seed);
    let zpl = mount(&pool, true);
    let root = zpl.root_ino();
    let cred = Cred::root();
    for i in 0..FILES {
        zpl.create(root, format!("f{i}").as_bytes(), 0o644, &cred, true)
            .unwrap();
    }
    let d = zpl.mkdir(root, b"d", 0o755, &cred).unwrap().ino;
    // The first fsync makes the log's chain, which waits for a txg.
    zpl.fsync(root).unwrap();
    let synced = pool.txg().last_synced();
    let names = Names::read(&zpl);
    let versions = names
        .files()
        .into_iter()
        .map(|(_, id)| (id, vec![state(&zpl, id.0)]))
        .collect();
    let mut w = Workload {
        zpl: &zpl,
        rng: ChaCha8Rng::seed_from_u64(rng.random()),
        d,
        names: names.clone(),
        versions,
    };
    // Every state of the names since (and including) the acknowledged one.
    let mut named = vec![names];
    let ops = rng.random_range(10..120);
    let fail_at = rng.random_range(0..ops);
    for op in 0..ops {
        if op == fail_at {
            for d in &devs {
                d.fail_after_writes(rng.random_range(0..40));
            }
        }
        let r = match (rng.random_range(0..10), w.pick_file()) {
            (0..=5, Some((_, id))) => w.change_file(id),
            _ => w.change_names().map(|changed| {
                if changed {
                    named.push(w.names.clone());
                }
            }),
        };
        if r.is_err() {
            break; // the devices started failing
        }
        if rng.random_bool(0.4) {
            let target = w.pick_file().map(|(_, id)| id);
            match zpl.fsync(target.map_or(root, |id| id.0)) {
                Ok(()) => {
                    // Acknowledged: older states may no longer appear.
                    named.drain(..named.len() - 1);
                    if let Some(v) = target.and_then(|id| w.versions.get_mut(&id)) {
                        v.drain(..v.len() - 1);
                    }
                }
                Err(_) => break,
            }
        }
    }
    if fail_at >= ops {
        // No device failure: at least the log carried the fsyncs.
        assert_eq!(
            pool.txg().last_synced(),
            synced,
            "seed {seed}: fsync committed a txg instead of the log"
        );
    }
    let versions = std::mem::take(&mut w.versions);
    drop(zpl);
    let pool = crash_and_import(pool, &devs);
    let zpl = mount(&pool, false);
    let replayed = replayed(&pool);
    let got = Names::read(&zpl);
    assert!(
        named.contains(&got),
        "seed {seed}: the names and xattrs are in no state the workload produced since its last \
         fsync\n got {got:?}\n acknowledged {:?}",
        named[0]
    );
    let mut after = BTreeMap::new();
    for (path, id) in got.files() {
        let links = got.files().iter().filter(|(_, i)| *i == id).count() as u64;
        assert_eq!(
            zpl.getattr(id.0).unwrap().nlink,
            links,
            "seed {seed}: {path}"
        );
        let now = state(&zpl, id.0);
        let known = versions.get(&id).map_or(&[][..], |v| &v[..]);
        assert!(
            known.contains(&now),
            "seed {seed}: {path} (inode {}) is in no state the workload produced since its last \
             fsync ({} bytes, mode {:o}; {} candidates)",
            id.0,
            now.1.len(),
            now.0,
            known.len()
        );
        after.insert(id, now);
    }
    drop(zpl);
    // Replay happened once: a crash right now changes nothing.
    let pool = crash_and_import(pool, &devs);
    let zpl = mount(&pool, false);
    assert_eq!(Names::read(&zpl), got, "seed {seed}: second replay");
    for (id, v) in &after {
        assert_eq!(&state(&zpl, id.0), v, "seed {seed}: second replay");
    }
    drop(zpl);
    pool.export().unwrap();
    replayed
}

fn seeds() -> Vec<u64> {
    tarn_testkit::seeds(0, 40)
}

#[test]
fn fsynced_state_survives_crashes_through_the_log() {
    let mut replayed = 0;
    let seeds = seeds();
    for &seed in &seeds {
        match std::panic::catch_unwind(|| run_seed(seed)) {
            Ok(n) => replayed += n,
            Err(e) => {
                eprintln!("{}", tarn_testkit::replay_line("zil crash test", seed));
                std::panic::resume_unwind(e);
            }
        }
    }
    eprintln!("{} seeds, {replayed} records replayed", seeds.len());
    assert!(seeds.len() < 5 || replayed > 0, "no seed exercised replay");
}
