//! Crash consistency of the intent log under many threads, on the engine
//! itself (no FUSE) over simulated disks.
//!
//! Each seed: a pool on two simulated disks (`common::sim`), a dataset
//! mounted with its log, and `THREADS` threads each running a seeded mix
//! of creates, writes, truncates, renames, links, unlinks, directories,
//! symlinks, chmods and xattrs, some followed by fsync of the file or of
//! its directories, each thread in its own directory and in one they all
//! share (`common::crash_workload`, which also keeps the model of what
//! every acknowledged fsync made durable). The power of both disks is cut
//! after a seeded number of device writes and flushes; the disks lose
//! what they had not flushed and may tear the last write. Then the pool
//! is imported and mounted (replaying the log) and the whole tree must
//! be readable and a state each thread could have left: every
//! acknowledged state there, nothing the program never made. A second
//! crash right after the mount must change nothing (what replay applied
//! is durable, and is not applied twice).
//!
//! A step that returns success after the power was cut is acknowledged
//! like any other: with the disks gone, an fsync must fail, not succeed
//! without writing. Before the crash, when no thread saw an error, the
//! live tree must be exactly the models' current state: that tests the
//! model itself.
//!
//! `TARN_SEED=n` replays seed n: the same operations and the same
//! crash point (a count of device I/Os); with threads, which I/Os come
//! before that point may differ between runs, so a failing seed may
//! need a few runs to fail again. `TARN_SEEDS=n` runs n seeds, from
//! `TARN_SEED_START` (default 0); `scripts/soak.sh` runs thousands.
//!
//! The smaller tests after it reproduce, each in a few lines, what the
//! workload found.

mod common;

use std::collections::{BTreeMap, HashMap};

use common::crash_workload::{
    check_tree, diff, flatten, run_thread, Backend, Change, DirId, Loc, Model, Node, Step, Sync,
    WriteSync, OWN, SHARED,
};
use common::sim::{Power, SimPool};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_zpl::{Cred, FileType, RenameFlags, SetAttr, XattrSetFlags, Zpl, ZplError};

const DATASET: &str = "tank/fs";
const THREADS: usize = 4;
/// Steps per thread (seeded within this range).
const STEPS: std::ops::Range<usize> = 40..140;
/// The power is cut after a seeded number of device writes and flushes
/// below this; a whole run makes about this many, so some seeds crash
/// only once the workload is over.
const CUT_AFTER_IOS_MAX: u64 = 700;
const SEEDS_DEFAULT: u64 = 48;

/// The workload's operations as direct calls on the engine.
struct ZplFs<'a> {
    zpl: &'a Zpl,
    cred: Cred,
    dirs: HashMap<DirId, u64>,
    power: &'a Power,
    steps: usize,
    /// The first step that started with the power already cut.
    cut_before: Option<usize>,
}

impl ZplFs<'_> {
    fn dir(&self, d: DirId) -> u64 {
        self.dirs[&d]
    }

    fn ino(&self, at: &Loc) -> Result<u64, ZplError> {
        let a = self
            .zpl
            .lookup(self.dir(at.dir), at.name.as_bytes(), &self.cred)?;
        Ok(a.ino)
    }

    fn write(&self, ino: u64, off: u64, data: &[u8], how: WriteSync) -> Result<(), ZplError> {
        if !data.is_empty() {
            self.zpl.write(ino, off, data, &self.cred)?;
        }
        match how {
            WriteSync::No => Ok(()),
            // O_SYNC is an fsync after each write at this layer.
            WriteSync::OSync | WriteSync::ODsync if data.is_empty() => Ok(()),
            _ => self.zpl.fsync(ino),
        }
    }

    fn set_size(&self, ino: u64, size: u64) -> Result<(), ZplError> {
        let sa = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        self.zpl.setattr(ino, &sa, &self.cred).map(|_| ())
    }

    fn rename(&self, a: &Loc, b: &Loc, flags: RenameFlags) -> Result<(), ZplError> {
        let (da, db) = (self.dir(a.dir), self.dir(b.dir));
        let (na, nb) = (a.name.as_bytes(), b.name.as_bytes());
        self.zpl.rename(da, na, db, nb, flags, &self.cred)
    }

    fn change(&mut self, c: &Change) -> Result<(), ZplError> {
        let (z, cred) = (self.zpl, &self.cred);
        match c {
            Change::Create {
                at,
                mode,
                data,
                how,
            } => {
                let ino = z
                    .create(self.dir(at.dir), at.name.as_bytes(), *mode, cred, true)?
                    .ino;
                self.write(ino, 0, data, *how)
            }
            Change::Pwrite { at, off, data, how } => self.write(self.ino(at)?, *off, data, *how),
            Change::Append { at, data, how } => {
                let ino = self.ino(at)?;
                let size = z.getattr(ino)?.size;
                self.write(ino, size, data, *how)
            }
            Change::Replace { at, data, how } => {
                let ino = self.ino(at)?;
                self.set_size(ino, 0)?;
                self.write(ino, 0, data, *how)
            }
            Change::Truncate { at, size } => self.set_size(self.ino(at)?, *size),
            Change::Chmod { at, mode } => {
                let sa = SetAttr {
                    mode: Some(*mode),
                    ..SetAttr::default()
                };
                z.setattr(self.ino(at)?, &sa, cred).map(|_| ())
            }
            Change::SetXattr { at, name, value } => {
                let ino = self.ino(at)?;
                z.setxattr(ino, name.as_bytes(), value, XattrSetFlags::Any, cred)
            }
            Change::RemoveXattr { at, name } => z.removexattr(self.ino(at)?, name.as_bytes(), cred),
            Change::Rename { from, to } => self.rename(from, to, RenameFlags::NONE),
            Change::Exchange { a, b } => self.rename(a, b, RenameFlags::EXCHANGE),
            Change::Link { from, to } => {
                let ino = self.ino(from)?;
                z.link(ino, self.dir(to.dir), to.name.as_bytes(), cred)
                    .map(|_| ())
            }
            Change::Unlink { at } => z.unlink(self.dir(at.dir), at.name.as_bytes(), cred),
            Change::Symlink { at, target } => z
                .symlink(
                    self.dir(at.dir),
                    at.name.as_bytes(),
                    target.as_bytes(),
                    cred,
                )
                .map(|_| ()),
            Change::Mkdir { at, id } => {
                let ino = z
                    .mkdir(self.dir(at.dir), at.name.as_bytes(), 0o755, cred)?
                    .ino;
                self.dirs.insert(*id, ino);
                Ok(())
            }
            Change::Rmdir { at } => z.rmdir(self.dir(at.dir), at.name.as_bytes(), cred),
            Change::Nothing => Ok(()),
        }
    }
}

impl Backend for ZplFs<'_> {
    fn run(&mut self, step: &Step) -> Result<(), String> {
        if self.cut_before.is_none() && self.power.is_cut() {
            self.cut_before = Some(self.steps);
        }
        self.steps += 1;
        let e = |e: ZplError| format!("{e} (errno {})", e.errno());
        self.change(&step.change).map_err(e)?;
        for s in &step.syncs {
            let ino = match s {
                Sync::File { at, .. } => self.ino(at).map_err(e)?,
                Sync::Dir(d) => self.dir(*d),
            };
            self.zpl.fsync(ino).map_err(e)?;
        }
        Ok(())
    }
}

/// The tree under `ino` as read back; anything unreadable becomes
/// `Node::Other` with the error, which the check reports.
fn snapshot(zpl: &Zpl, ino: u64) -> Node {
    read_node(zpl, ino).unwrap_or_else(|e| Node::Other(format!("unreadable: {e}")))
}

fn read_node(zpl: &Zpl, ino: u64) -> Result<Node, ZplError> {
    let a = zpl.getattr(ino)?;
    Ok(match a.kind {
        FileType::Directory => {
            let mut children = BTreeMap::new();
            for e in zpl.read_dir_all(ino)? {
                let name = String::from_utf8_lossy(&e.name).into_owned();
                children.insert(name, snapshot(zpl, e.ino));
            }
            Node::Dir(children)
        }
        FileType::Regular => {
            let mut data = vec![0u8; a.size as usize];
            let n = zpl.read(ino, 0, &mut data)?;
            if n != data.len() {
                return Err(ZplError::Io(format!("read {n} of {} bytes", data.len())));
            }
            let cred = Cred::root();
            let mut xattrs = BTreeMap::new();
            for name in zpl.listxattr(ino, &cred)? {
                if name.starts_with(b"user.") {
                    let v = zpl.getxattr(ino, &name, &cred)?;
                    xattrs.insert(String::from_utf8_lossy(&name).into_owned(), v);
                }
            }
            Node::File {
                ino,
                mode: a.mode & 0o7777,
                data,
                xattrs,
            }
        }
        FileType::Symlink => {
            Node::Symlink(String::from_utf8_lossy(&zpl.readlink(ino)?).into_owned())
        }
        other => Node::Other(format!("a {other:?}")),
    })
}

fn root_children(zpl: &Zpl) -> BTreeMap<String, Node> {
    match snapshot(zpl, zpl.root_ino()) {
        Node::Dir(c) => c,
        other => panic!("the root is {other:?}"),
    }
}

/// What one seed did, for the summary.
#[derive(Default)]
struct Stats {
    steps: usize,
    acks: usize,
    ios: u64,
    cut: bool,
    replayed: u64,
}

/// What each thread left: its model and the first step it started with
/// the power already cut.
struct Thread {
    model: Model,
    cut_before: Option<usize>,
}

/// Makes the directories, then runs the threads until each is done or
/// failed (after the power cut).
fn run_workload(sim: &SimPool, zpl: &Zpl, seed: u64) -> Vec<Thread> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let cred = Cred::root();
    let root = zpl.root_ino();
    let shared = zpl.mkdir(root, b"shared", 0o755, &cred).unwrap().ino;
    let own: Vec<u64> = (0..THREADS)
        .map(|k| {
            let name = Model::own_dir_name(k);
            zpl.mkdir(root, name.as_bytes(), 0o755, &cred).unwrap().ino
        })
        .collect();
    sim.pool().sync().unwrap();
    let plans: Vec<(u64, usize)> = (0..THREADS)
        .map(|_| (rng.random(), rng.random_range(STEPS)))
        .collect();
    sim.power.cut_after(rng.random_range(0..CUT_AFTER_IOS_MAX));
    let power = &sim.power;
    std::thread::scope(|s| {
        let handles: Vec<_> = plans
            .iter()
            .enumerate()
            .map(|(k, &(tseed, steps))| {
                let own = own[k];
                s.spawn(move || {
                    let mut model = Model::new(k, 0, true);
                    let mut fs = ZplFs {
                        zpl,
                        cred: Cred::root(),
                        dirs: HashMap::from([(SHARED, shared), (OWN, own)]),
                        power,
                        steps: 0,
                        cut_before: None,
                    };
                    let mut trng = ChaCha8Rng::seed_from_u64(tseed);
                    let err = run_thread(&mut model, &mut fs, &mut trng, steps, || {});
                    // An error before the power went is a bug, not the crash.
                    if let Some(e) = &err {
                        assert!(
                            power.is_cut(),
                            "seed {seed}: thread {k} failed before the crash: {e}"
                        );
                    }
                    Thread {
                        model,
                        cut_before: fs.cut_before,
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// When the power went, for a failure report.
fn cut_points(threads: &[Thread]) -> String {
    threads
        .iter()
        .enumerate()
        .map(|(k, t)| match t.cut_before {
            Some(n) => format!("thread {k}: power already cut at the start of step #{n}"),
            None => format!("thread {k}: power on at the start of every step"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The tree of the dataset, flattened.
fn flat_tree(zpl: &Zpl) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    flatten(&Node::Dir(root_children(zpl)), "", &mut out);
    out
}

fn run_seed(seed: u64) -> Stats {
    let mut sim = SimPool::create(seed, &[DATASET]);
    let zpl = sim.mount(DATASET, true);
    let threads = run_workload(&sim, &zpl, seed);
    let stats = Stats {
        steps: threads.iter().map(|t| t.model.steps()).sum(),
        acks: threads.iter().map(|t| t.model.acks()).sum(),
        ios: sim.power.ios(),
        cut: sim.power.is_cut(),
        replayed: 0,
    };
    let models: Vec<Model> = threads.iter().map(|t| t.model.clone()).collect();
    if !stats.cut {
        check_live_tree(seed, &zpl, &models);
    }

    drop(zpl);
    sim.crash_and_import();
    let zpl = sim.mount(DATASET, false);
    let zil = sim.pool().dataset_zil(DATASET).unwrap();
    let failures = check_tree(&models, &root_children(&zpl), "shared");
    assert!(
        failures.is_empty(),
        "seed {seed}: after the crash ({} I/Os in, power cut: {}):\n{}\n{}",
        stats.ios,
        stats.cut,
        failures.join("\n"),
        cut_points(&threads)
    );

    // Replay happened once and is durable: a crash right now changes nothing.
    let before = flat_tree(&zpl);
    drop(zpl);
    sim.crash_and_import();
    let zpl = sim.mount(DATASET, false);
    let changed = diff(&before, &flat_tree(&zpl));
    assert!(
        changed.is_empty(),
        "seed {seed}: a second crash right after the mount changed the tree:\n{}",
        changed.join("\n")
    );
    drop(zpl);
    sim.export();
    Stats {
        replayed: zil.stats().records_replayed,
        ..stats
    }
}

/// Without a crash the tree is exactly what the models say now.
fn check_live_tree(seed: u64, zpl: &Zpl, models: &[Model]) {
    let now: Vec<Model> = models
        .iter()
        .map(|m| {
            let mut m = m.clone();
            m.ack_all();
            m
        })
        .collect();
    let failures = check_tree(&now, &root_children(zpl), "shared");
    assert!(
        failures.is_empty(),
        "seed {seed}: before any crash, the tree differs from the model:\n{}",
        failures.join("\n")
    );
}

fn seeds() -> Vec<u64> {
    tarn_testkit::seeds(0, SEEDS_DEFAULT)
}

#[test]
fn acknowledged_state_survives_power_loss_under_many_threads() {
    let seeds = seeds();
    let mut total = Stats::default();
    let mut cuts = 0;
    for &seed in &seeds {
        match std::panic::catch_unwind(|| run_seed(seed)) {
            Ok(s) => {
                total.steps += s.steps;
                total.acks += s.acks;
                total.ios += s.ios;
                total.replayed += s.replayed;
                cuts += usize::from(s.cut);
            }
            Err(e) => {
                eprintln!("{}", tarn_testkit::replay_line("zil_crash", seed));
                std::panic::resume_unwind(e);
            }
        }
    }
    eprintln!(
        "{} seeds ({} crashes, {cuts} during the workload): {} steps ({} acknowledged \
         by an fsync), {} device I/Os, {} log records replayed",
        seeds.len(),
        2 * seeds.len(),
        total.steps,
        total.acks,
        total.ios,
        total.replayed
    );
    assert!(
        seeds.len() < 8 || cuts > 0,
        "no seed cut the power mid-workload"
    );
}

/// One thread creates files and writes them without fsync; meanwhile
/// another fsyncs its own, already durable file once. Then a crash.
/// Nothing was acknowledged but that one file, so the mount must succeed
/// (replaying the log) and show it with its new contents. (While creates
/// were not logged, the fsync's commit took along the other thread's
/// write records of a txg that never committed, and replaying them on
/// objects that did not exist failed the mount.)
#[test]
fn creates_beside_an_fsync_leave_a_mountable_log() {
    const ROUNDS: u64 = 3;
    const CREATES: usize = 500;
    for round in 0..ROUNDS {
        let mut sim = SimPool::create(round, &[DATASET]);
        let zpl = sim.mount(DATASET, true);
        let (root, cred) = (zpl.root_ino(), Cred::root());
        let synced = zpl.create(root, b"synced", 0o644, &cred, true).unwrap().ino;
        sim.pool().sync().unwrap();
        // The log's first commit makes its chain (and waits for a txg).
        zpl.write(synced, 0, b"initial", &cred).unwrap();
        zpl.fsync(synced).unwrap();
        let (started, start) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            let (zpl, cred) = (&zpl, &cred);
            s.spawn(move || {
                for i in 0..CREATES {
                    let name = format!("f{i}");
                    let a = zpl.create(root, name.as_bytes(), 0o644, cred, true);
                    zpl.write(a.unwrap().ino, 0, b"never fsynced", cred)
                        .unwrap();
                    if i == 0 {
                        started.send(()).unwrap();
                    }
                }
            });
            start.recv().unwrap();
            zpl.write(synced, 0, b"fsynced", cred).unwrap();
            zpl.fsync(synced).unwrap();
        });
        drop(zpl);
        sim.crash_and_import();
        let zpl = sim
            .try_mount(DATASET, false)
            .unwrap_or_else(|e| panic!("round {round}: mount after the crash: {e}"));
        let mut buf = [0u8; 7];
        zpl.read(synced, 0, &mut buf).unwrap();
        assert_eq!(&buf, b"fsynced", "round {round}");
        drop(zpl);
        sim.export();
    }
}

/// One program creates a file; another fsyncs its own file as the disks
/// fail, and its commit, which takes the create record along (namespace
/// records go with every commit), fails. Then the first program fsyncs
/// the directory: if that returns success, the create must survive the
/// crash. (It once returned success with nothing written: the failed
/// commit had taken the record out of the pending ones.)
#[test]
fn fsync_after_a_failed_commit_acknowledges_nothing_lost() {
    let mut sim = SimPool::create(1, &[DATASET]);
    let zpl = sim.mount(DATASET, true);
    let (root, cred) = (zpl.root_ino(), Cred::root());
    let other = zpl.create(root, b"other", 0o644, &cred, true).unwrap().ino;
    sim.pool().sync().unwrap();
    // The log's first commit makes its chain (and waits for a txg).
    zpl.write(other, 0, b"first", &cred).unwrap();
    zpl.fsync(other).unwrap();

    zpl.create(root, b"new", 0o644, &cred, true).unwrap();
    zpl.write(other, 0, b"second", &cred).unwrap();
    sim.power.cut();
    assert!(zpl.fsync(other).is_err(), "fsync succeeded without power");
    let acknowledged = zpl.fsync(root).is_ok();
    drop(zpl);
    sim.crash_and_import();
    let zpl = sim.mount(DATASET, false);
    if acknowledged {
        let found = zpl.lookup(root, b"new", &cred);
        assert!(
            found.is_ok(),
            "fsync of the directory succeeded, yet its new entry is gone after the crash: {found:?}"
        );
    }
    drop(zpl);
    sim.export();
}

/// The daemon asks for the dataset's space (`Pool::dataset_space`)
/// before every create and write, while the txg sync thread syncs the
/// dataset; neither may wait for the other forever. (The FUSE workload
/// hung there: `unused_reservations` holds the datasets lock for reading
/// and takes it again through `size_prop`, and a sync waiting to write
/// it in between blocks the second read.)
#[test]
fn space_queries_beside_txg_syncs_do_not_deadlock() {
    const ROUNDS: u64 = 20_000;
    let sim = SimPool::create(0, &[DATASET]);
    let pool = sim.pool().clone();
    let zpl = std::sync::Arc::new(sim.mount(DATASET, true));
    let (done, finished) = std::sync::mpsc::channel();
    let workers = [0, 1, 2].map(|role| {
        let (pool, zpl, done) = (pool.clone(), zpl.clone(), done.clone());
        std::thread::spawn(move || {
            let cred = Cred::root();
            let root = zpl.root_ino();
            let ino = zpl.create(root, b"f", 0o644, &cred, false).unwrap().ino;
            for i in 0..ROUNDS {
                match role {
                    0 => drop(pool.dataset_space(DATASET).unwrap()),
                    1 => drop(zpl.write(ino, i * 512, &[1; 512], &cred).unwrap()),
                    _ => pool.sync().unwrap(),
                }
            }
            done.send(()).unwrap();
        })
    });
    for _ in &workers {
        // A bound to detect the hang, not to wait for anything.
        finished
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("space queries and txg syncs deadlocked");
    }
    for w in workers {
        w.join().unwrap();
    }
    drop(zpl);
    sim.export();
}

/// A file's big write (logged by pointer to a block written in place)
/// waits unsynced while another file is written and fsynced; then the
/// big one's fsync is cut short by the crash. Whatever the disks kept of
/// that last commit, the fsync acknowledged before it must survive.
/// (Replay applied records in the order they were logged, not
/// committed, and stopped at the first indirect block it could not read:
/// the unacknowledged commit's, logged first, cut off the acknowledged
/// one.)
#[test]
fn an_unfinished_indirect_write_does_not_cut_off_earlier_fsyncs() {
    const BIG: usize = 128 << 10;
    for seed in tarn_testkit::seeds(0, 16) {
        for cut in 0..8 {
            let mut sim = SimPool::create(seed, &[DATASET]);
            let zpl = sim.mount(DATASET, true);
            let (root, cred) = (zpl.root_ino(), Cred::root());
            let big = zpl.create(root, b"big", 0o644, &cred, true).unwrap().ino;
            let small = zpl.create(root, b"small", 0o644, &cred, true).unwrap().ino;
            sim.pool().sync().unwrap();
            // The log's first commit makes its chain (and waits for a txg).
            zpl.write(small, 0, b"first", &cred).unwrap();
            zpl.fsync(small).unwrap();

            zpl.write(big, 0, &[7; BIG], &cred).unwrap();
            zpl.write(small, 0, b"fsynced", &cred).unwrap();
            zpl.fsync(small).unwrap();
            sim.power.cut_after(cut);
            let _ = zpl.fsync(big);
            drop(zpl);
            sim.crash_and_import();
            let zpl = sim.mount(DATASET, false);
            let mut buf = [0u8; 7];
            zpl.read(small, 0, &mut buf).unwrap();
            assert_eq!(
                &buf, b"fsynced",
                "disk seed {seed}, power cut after {cut} I/Os"
            );
            drop(zpl);
            sim.export();
        }
    }
}
