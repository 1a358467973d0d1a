//! Snapshots, clones, promotes, destroys and rollbacks through the real
//! CLI and a real mount, with the daemon killed by SIGKILL in the middle
//! of them.
//!
//! Each round: a writer thread creates files under `tank/rN/` and fsyncs
//! each one (what an fsync returned is acknowledged), while the test runs
//! seeded `zfs snapshot [-r]`, `zfs destroy -r`, `zfs clone`, `zfs
//! promote` and `zfs rollback` commands and writes to `tank/b`. After a
//! seeded delay the daemon is killed; the next command starts a new one,
//! which re-imports the pool, remounts it and replays the intent log.
//! Then:
//!
//! - every acknowledged file is there with its bytes;
//! - the snapshots are exactly the acknowledged ones, plus the one in
//!   flight if it reached the disk (a recursive one whole, on both
//!   datasets, or not at all), less those whose destroy was acknowledged;
//! - every snapshot reads exactly as it did when it was taken, and holds
//!   every file acknowledged before the command that took it;
//! - every clone reads as its origin, `tank/b` as its model says;
//! - and at the end, after `zpool export`, the pool is opened in this
//!   process and its space check is exact: no block leaked by a crash,
//!   none freed that something still references.
//!
//! Each round has its own seed, which a failure prints: `TARN_SEED=n`
//! replays round n alone (the same operations and kill delay; what is in
//! flight at the kill may differ). `TARN_SEEDS=n` runs n rounds.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{is_fuse_mounted, noise, Mounted, MIB};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const ROUNDS_DEFAULT: u64 = 6;
/// The daemon is killed this long (seeded) after a round starts.
const KILL_AFTER_MS: std::ops::Range<u64> = 50..1500;
/// Snapshots of `tank` kept at most: past it, snapshots become destroys.
const SNAPSHOTS_OF_TANK_MAX: usize = 12;
/// Files the writer creates at most per round.
const WRITER_FILES_MAX: usize = 400;
/// Sizes of the writer's files.
const WRITER_FILE_BYTES: std::ops::Range<usize> = 1..16 << 10;

/// A tree as relative path → (length, hash of the bytes); directories
/// are (0, 0).
type Tree = BTreeMap<String, (usize, u64)>;

fn hash(bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Reads the tree under `root`; `None` on any error (a dying daemon).
fn read_tree(root: &Path) -> Option<Tree> {
    fn walk(dir: &Path, rel: &str, out: &mut Tree) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = format!("{rel}{name}");
            if entry.file_type()?.is_dir() {
                out.insert(path.clone(), (0, 0));
                walk(&entry.path(), &format!("{path}/"), out)?;
            } else {
                let bytes = std::fs::read(entry.path())?;
                out.insert(path, (bytes.len(), hash(&bytes)));
            }
        }
        Ok(())
    }
    let mut out = Tree::new();
    walk(root, "", &mut out).ok()?;
    Some(out)
}

/// One acknowledged file: its path under the root mount and its bytes.
#[derive(Clone)]
struct Acked {
    rel: String,
    sum: (usize, u64),
}

/// The writer's record: files whose fsync returned, in order.
#[derive(Default)]
struct Written {
    acked: Vec<Acked>,
    /// Files it started (created), acknowledged or not: path → bytes.
    started: BTreeMap<String, Vec<u8>>,
}

fn spawn_writer(
    root: PathBuf,
    dir: String,
    seed: u64,
    written: Arc<Mutex<Written>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for i in 0..WRITER_FILES_MAX {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let rel = format!("{dir}/f{i}");
            let data = noise(rng.random_range(WRITER_FILE_BYTES), seed ^ i as u64);
            written
                .lock()
                .unwrap()
                .started
                .insert(rel.clone(), data.clone());
            let r = File::create(root.join(&rel)).and_then(|mut f| {
                f.write_all(&data)?;
                f.sync_all()
            });
            if r.is_err() {
                // The daemon is gone: the test killed it.
                return;
            }
            written.lock().unwrap().acked.push(Acked {
                rel,
                sum: (data.len(), hash(&data)),
            });
        }
    })
}

/// What the test knows: acknowledged snapshots with their trees, clones
/// with their origins, and `tank/b`.
#[derive(Clone, Default)]
struct Model {
    /// Full snapshot name → the tree it must read as. A snapshot of `tank`
    /// taken in this round has none yet: the writer is busy, so what it
    /// holds is read (and checked against what was acknowledged before
    /// it) after the restart, and must not change from then on. Reading
    /// it at once would put most kills in those reads.
    snaps: BTreeMap<String, Option<Tree>>,
    /// For each snapshot of `tank`, how many of the writer's files were
    /// acknowledged before the command that took it started.
    acked_before: BTreeMap<String, usize>,
    /// Clone dataset → origin snapshot.
    clones: BTreeMap<String, String>,
    /// `tank/b`'s tree.
    b: Tree,
    /// Files the writers of earlier rounds acknowledged.
    files: Tree,
}

impl Model {
    /// A promote moved these snapshots (old name, new name): the clones of
    /// them follow.
    fn promoted(&mut self, renames: &[(String, String)]) {
        for (old, new) in renames {
            if let Some(tree) = self.snaps.remove(old) {
                self.snaps.insert(new.clone(), tree);
            }
            if let Some(n) = self.acked_before.remove(old) {
                self.acked_before.insert(new.clone(), n);
            }
            for origin in self.clones.values_mut() {
                if origin == old {
                    *origin = new.clone();
                }
            }
        }
    }
}

/// An operation whose command did not return success: it may or may not
/// have reached the disk.
enum InDoubt {
    None,
    /// A snapshot of `tank` (and of its children when recursive).
    Snapshot {
        name: String,
        recursive: bool,
        acked_before: usize,
    },
    /// `zfs destroy -r` of these snapshots.
    Destroy(Vec<String>),
    /// `zfs promote`: these snapshots move (old name, new name).
    Promote {
        renames: Vec<(String, String)>,
    },
    Clone {
        name: String,
        origin: String,
    },
    /// A rollback of `tank/b`: it is this, or as before.
    Rollback(Tree),
    /// A new file in `tank/b` whose fsync did not return: it may be
    /// there, with any part of its bytes.
    BWrite(String),
}

impl InDoubt {
    fn what(&self) -> &'static str {
        match self {
            InDoubt::None => "between commands",
            InDoubt::Snapshot { .. } => "in a snapshot",
            InDoubt::Destroy(_) => "in a destroy",
            InDoubt::Promote { .. } => "in a promote",
            InDoubt::Clone { .. } => "in a clone",
            InDoubt::Rollback(_) => "in a rollback",
            InDoubt::BWrite(_) => "in a write to tank/b",
        }
    }
}

struct Round<'a> {
    m: &'a Mounted,
    seed: u64,
    written: Arc<Mutex<Written>>,
}

impl Round<'_> {
    fn mnt(&self, ds: &str) -> PathBuf {
        self.m.mnt(ds)
    }

    fn snap_dir(&self, name: &str) -> PathBuf {
        let (ds, snap) = name.split_once('@').expect("a snapshot name");
        self.mnt(ds).join(".zfs/snapshot").join(snap)
    }

    /// The snapshots a recursive snapshot `name` of `tank` takes of the
    /// children, with the trees they must have: `tank/b` and the clones
    /// (nothing writes in a clone).
    fn children(&self, model: &Model, name: &str) -> Vec<(String, Tree)> {
        let snap = name.split_once('@').expect("a snapshot name").1;
        let mut out = vec![(format!("tank/b@{snap}"), model.b.clone())];
        for (clone, origin) in &model.clones {
            let tree = model.snaps[origin]
                .clone()
                .expect("clones are of read snapshots");
            out.push((format!("{clone}@{snap}"), tree));
        }
        out
    }

    /// Files acknowledged before `n` (and in earlier rounds) must be in
    /// `tree` exactly; any other file of the writer's must hold only what
    /// the writer wrote there (or zeros not yet written), no more.
    fn check_snapshot_holds_acked(&self, model: &Model, name: &str, tree: &Tree, n: usize) {
        let written = self.written.lock().unwrap();
        let acked = written.acked[..n.min(written.acked.len())]
            .iter()
            .map(|a| (&a.rel, &a.sum));
        for (rel, sum) in model.files.iter().chain(acked) {
            assert_eq!(
                tree.get(rel),
                Some(sum),
                "seed {}: {name} lacks {rel}, acknowledged before it was taken",
                self.seed
            );
        }
        for (rel, got) in tree {
            let Some(data) = written.started.get(rel) else {
                continue;
            };
            if *got == (data.len(), hash(data)) {
                continue;
            }
            let Ok(bytes) = std::fs::read(self.snap_dir(name).join(rel)) else {
                continue; // the daemon died under the read
            };
            let ok = bytes.len() <= data.len()
                && bytes.iter().zip(data).all(|(b, d)| *b == *d || *b == 0);
            assert!(
                ok,
                "seed {}: {name} holds {rel} as bytes the writer never wrote",
                self.seed
            );
        }
    }

    /// One seeded operation until the daemon dies; what is in doubt then.
    fn step(
        &self,
        model: &mut Model,
        rng: &mut ChaCha8Rng,
        k: u32,
    ) -> Result<(), (InDoubt, String)> {
        let env = &self.m.env;
        // A failed command: what is in doubt, and what the command said.
        let run = |args: &[&str], doubt: InDoubt| {
            let r = env.run(args);
            match r.code {
                0 => Ok(r.stdout),
                _ => Err((doubt, format!("{args:?}: {}", r.stderr.trim()))),
            }
        };
        let tank_snaps: Vec<String> = model
            .snaps
            .keys()
            .filter(|s| s.starts_with("tank@"))
            .cloned()
            .collect();
        let mut op = rng.random_range(0..10);
        if op <= 3 && tank_snaps.len() >= SNAPSHOTS_OF_TANK_MAX {
            op = 4;
        }
        match op {
            0..=3 => {
                let recursive = rng.random_bool(0.4);
                let name = format!("tank@s{}-{k}", self.seed);
                let acked_before = self.written.lock().unwrap().acked.len();
                let mut args = vec!["zfs", "snapshot"];
                if recursive {
                    args.push("-r");
                }
                args.push(&name);
                let doubt = InDoubt::Snapshot {
                    name: name.clone(),
                    recursive,
                    acked_before,
                };
                run(&args, doubt)?;
                if recursive {
                    for (child, want) in self.children(model, &name) {
                        model.snaps.insert(child, Some(want));
                    }
                }
                model.snaps.insert(name.clone(), None);
                model.acked_before.insert(name, acked_before);
            }
            4 | 5 => {
                // Destroy a snapshot no clone depends on, and the ones of
                // the same name below it (-r): all at once.
                let used: BTreeSet<&String> = model.clones.values().collect();
                let free: Vec<&String> = tank_snaps.iter().filter(|s| !used.contains(s)).collect();
                let Some(&name) = free.get(rng.random_range(0..free.len().max(1))) else {
                    return Ok(());
                };
                let name = name.clone();
                let mut all = vec![name.clone()];
                all.extend(self.children(model, &name).into_iter().map(|(c, _)| c));
                all.retain(|n| model.snaps.contains_key(n));
                run(
                    &["zfs", "destroy", "-r", &name],
                    InDoubt::Destroy(all.clone()),
                )?;
                for n in &all {
                    model.snaps.remove(n);
                    model.acked_before.remove(n);
                }
            }
            6 if rng.random_bool(0.4) => {
                // Promote a clone of a snapshot of tank: tank's snapshots
                // up to its origin move to it, renamed.
                let promotable: Vec<String> = model
                    .clones
                    .iter()
                    .filter(|(_, origin)| origin.starts_with("tank@"))
                    .map(|(clone, _)| clone.clone())
                    .collect();
                let Some(clone) = promotable.get(rng.random_range(0..promotable.len().max(1)))
                else {
                    return Ok(());
                };
                let clone = clone.clone();
                let args = ["zfs", "list", "-H", "-o", "name", "-s", "createtxg", "-t"];
                let listed = run(
                    &[&args[..], &["snapshot", "-r", "tank"]].concat(),
                    InDoubt::None,
                )?;
                let origin = &model.clones[&clone];
                let mut renames = Vec::new();
                for old in listed.lines().filter(|n| n.starts_with("tank@")) {
                    let (_, snap) = old.split_once('@').expect("a snapshot");
                    renames.push((old.to_string(), format!("{clone}@{snap}")));
                    if old == origin {
                        break;
                    }
                }
                if renames.iter().any(|(_, new)| model.snaps.contains_key(new)) {
                    return Ok(()); // a name clash: refused, as zfs(8) does
                }
                let doubt = InDoubt::Promote {
                    renames: renames.clone(),
                };
                run(&["zfs", "promote", &clone], doubt)?;
                model.promoted(&renames);
            }
            6 => {
                let Some(origin) = tank_snaps.iter().rev().find(|s| model.snaps[*s].is_some())
                else {
                    return Ok(());
                };
                let origin = origin.clone();
                if model.clones.len() >= 3 {
                    return Ok(());
                }
                let name = format!("tank/c{}-{k}", self.seed);
                let doubt = InDoubt::Clone {
                    name: name.clone(),
                    origin: origin.clone(),
                };
                run(&["zfs", "clone", &origin, &name], doubt)?;
                model.clones.insert(name, origin);
            }
            7 | 8 => {
                // A file in tank/b, fsynced.
                let rel = format!("b{}-{k}", self.seed);
                let data = noise(rng.random_range(1..64 << 10), self.seed * 1000 + k as u64);
                let mut next = model.b.clone();
                next.insert(rel.clone(), (data.len(), hash(&data)));
                let r = File::create(self.mnt("tank/b").join(&rel)).and_then(|mut f| {
                    f.write_all(&data)?;
                    f.sync_all()
                });
                if let Err(e) = r {
                    return Err((InDoubt::BWrite(rel), e.to_string()));
                }
                model.b = next;
            }
            _ => {
                // Roll tank/b back to its latest snapshot.
                let args = ["zfs", "list", "-H", "-o", "name", "-t", "snapshot", "-s"];
                let listed = run(
                    &[&args[..], &["createtxg", "tank/b"]].concat(),
                    InDoubt::None,
                )?;
                let Some(latest) = listed.lines().last().map(str::to_string) else {
                    return Ok(());
                };
                let next = model.snaps.get(&latest).cloned().flatten();
                let next = next.expect("a snapshot of tank/b the test took");
                run(
                    &["zfs", "rollback", &latest],
                    InDoubt::Rollback(next.clone()),
                )?;
                model.b = next;
            }
        }
        Ok(())
    }

    /// After the restart: the pool as the model says, up to `doubt`;
    /// returns the model the pool now matches.
    fn check(&self, mut model: Model, doubt: InDoubt) -> Model {
        let env = &self.m.env;
        let status = env.ok(&["zpool", "status", "tank"]);
        assert!(
            status.contains("ONLINE") && status.contains("errors: No known data errors"),
            "seed {}: after the restart:\n{status}",
            self.seed
        );
        assert!(
            is_fuse_mounted(&self.m.root()),
            "seed {}: not remounted",
            self.seed
        );
        let listed: BTreeSet<String> = env
            .ok(&["zfs", "list", "-H", "-o", "name", "-t", "snapshot"])
            .lines()
            .map(str::to_string)
            .collect();
        // Settle the operation in doubt by what the pool shows.
        match doubt {
            InDoubt::None => {}
            InDoubt::Snapshot {
                name,
                recursive,
                acked_before,
            } => {
                for (child, want) in self.children(&model, &name) {
                    // A recursive snapshot is one: all of it or none.
                    assert_eq!(
                        listed.contains(&child),
                        recursive && listed.contains(&name),
                        "seed {}: {name} (recursive: {recursive}) is not whole",
                        self.seed
                    );
                    if listed.contains(&child) {
                        model.snaps.insert(child, Some(want));
                    }
                }
                if listed.contains(&name) {
                    model.snaps.insert(name.clone(), None);
                    model.acked_before.insert(name, acked_before);
                }
            }
            InDoubt::Destroy(names) => {
                let gone = names.iter().filter(|n| !listed.contains(*n)).count();
                assert!(
                    gone == 0 || gone == names.len(),
                    "seed {}: destroy -r of {names:?} is not whole: {gone} gone",
                    self.seed
                );
                for n in &names {
                    if !listed.contains(n) {
                        model.snaps.remove(n);
                        model.acked_before.remove(n);
                    }
                }
            }
            InDoubt::Promote { renames } => {
                let moved = renames
                    .iter()
                    .filter(|(_, new)| listed.contains(new))
                    .count();
                assert!(
                    moved == 0 || moved == renames.len(),
                    "seed {}: promote moved {moved} of {renames:?}",
                    self.seed
                );
                if moved > 0 {
                    model.promoted(&renames);
                }
            }
            InDoubt::Clone { name, origin } => {
                if env.datasets().contains(&name) {
                    model.clones.insert(name, origin);
                }
            }
            InDoubt::Rollback(next) => {
                if read_tree(&self.mnt("tank/b")).as_ref() == Some(&next) {
                    model.b = next;
                }
            }
            InDoubt::BWrite(rel) => {
                let b = read_tree(&self.mnt("tank/b")).expect("tank/b reads");
                if let Some(sum) = b.get(&rel) {
                    model.b.insert(rel, *sum);
                }
            }
        }
        let want: BTreeSet<String> = model.snaps.keys().cloned().collect();
        assert_eq!(
            listed, want,
            "seed {}: the snapshots after the restart",
            self.seed
        );
        let mut snaps = std::mem::take(&mut model.snaps);
        for (name, tree) in snaps.iter_mut() {
            let got = read_tree(&self.snap_dir(name)).expect("a snapshot reads");
            match tree {
                Some(want) => assert!(
                    got == *want,
                    "seed {}: {name} changed across the crash",
                    self.seed
                ),
                None => {
                    self.check_snapshot_holds_acked(&model, name, &got, model.acked_before[name]);
                    *tree = Some(got);
                }
            }
        }
        model.snaps = snaps;
        for (name, origin) in &model.clones {
            let got = read_tree(&self.mnt(name)).expect("a clone reads");
            assert!(
                Some(got) == model.snaps[origin],
                "seed {}: clone {name}",
                self.seed
            );
        }
        let b = read_tree(&self.mnt("tank/b")).expect("tank/b reads");
        assert!(b == model.b, "seed {}: tank/b after the restart", self.seed);
        let written = self.written.lock().unwrap();
        for a in &written.acked {
            model.files.insert(a.rel.clone(), a.sum);
        }
        let live = read_tree(&self.m.root()).expect("the root reads");
        for (rel, sum) in &model.files {
            assert_eq!(
                live.get(rel),
                Some(sum),
                "seed {}: acknowledged {rel} lost or changed",
                self.seed
            );
        }
        model
    }
}

/// One round on the shared pool: the model it leaves.
fn run_round(m: &Mounted, seed: u64, model: Model) -> Model {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let dir = format!("r{seed}");
    std::fs::create_dir(m.root().join(&dir)).unwrap();
    File::open(m.root()).unwrap().sync_all().unwrap();
    let round = Round {
        m,
        seed,
        written: Arc::new(Mutex::new(Written::default())),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let writer = spawn_writer(
        m.root(),
        dir,
        rng.random(),
        round.written.clone(),
        stop.clone(),
    );
    let kill_at = Instant::now() + Duration::from_millis(rng.random_range(KILL_AFTER_MS));
    let (signalled, killed) = (AtomicBool::new(false), AtomicBool::new(false));
    let (model, doubt, steps) = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(kill_at.saturating_duration_since(Instant::now()));
            signalled.store(true, Ordering::SeqCst);
            sigkill(m);
            killed.store(true, Ordering::SeqCst);
        });
        let mut model = model;
        let mut k = 0;
        // A step changes the model only once it is acknowledged; one that
        // fails leaves it as it was and says what is in doubt. A command
        // that starts after the kill starts a new daemon and may succeed:
        // that is a restart like the check's.
        let doubt = loop {
            k += 1;
            if let Err((doubt, why)) = round.step(&mut model, &mut rng, k) {
                // Every operation the test picks is valid: only the kill
                // makes one fail.
                assert!(
                    signalled.load(Ordering::SeqCst),
                    "seed {seed}: step {k} failed before the kill: {why}"
                );
                break doubt;
            }
            if killed.load(Ordering::SeqCst) {
                break InDoubt::None;
            }
        };
        (model, doubt, k)
    });
    stop.store(true, Ordering::SeqCst);
    writer.join().expect("the writer thread");
    let doubt_was = doubt.what();
    let model = round.check(model, doubt);
    eprintln!(
        "seed {seed}: killed in step {steps} ({doubt_was}); {} files acknowledged, \
         {} snapshots, {} clones after the kill",
        round.written.lock().unwrap().acked.len(),
        model.snaps.len(),
        model.clones.len()
    );
    model
}

/// SIGKILL of the running daemon; returns once it is dead: gone, or a
/// zombie (its threads may still be exiting, and one waiting on one of
/// its own mounts may not be able to: the next command ends that, see
/// `tarn::daemon::dying`, and the check starts with one).
fn sigkill(m: &Mounted) {
    let pid = m.env.daemon_pid().expect("a daemon is running");
    // SAFETY: kill(2) with a pid read from our own daemon's lock file.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
        if matches!(state, None | Some('Z') | Some('X')) {
            return;
        }
        assert!(Instant::now() < deadline, "daemon {pid} survived SIGKILL");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Opens the exported pool in this process and checks its space exactly.
fn space_check_exported(m: &Mounted) {
    let paths: Vec<PathBuf> = std::fs::read_dir(m.env.vdev_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let discovery = tarn_dsl::import::discover_paths(paths);
    let found = discovery
        .choose("tank", &|_| false)
        .unwrap_or_else(|_| panic!("the exported pool is not found"));
    let pool = tarn_dsl::import::open(&discovery, found, &Default::default()).expect("import");
    let check = pool.space_check().expect("space check");
    assert!(check.is_exact(), "after the crashes: {check:?}");
    pool.export().expect("export");
}

#[test]
fn snapshot_operations_survive_sigkill_whole_or_not_at_all() {
    let m = Mounted::new("tank", &["mirror", "a", "b"], 512 * MIB);
    m.env.ok(&["zfs", "create", "tank/b"]);
    let mut model = Model {
        b: read_tree(&m.mnt("tank/b")).unwrap(),
        ..Model::default()
    };
    for seed in tarn_testkit::seeds(0, ROUNDS_DEFAULT) {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_round(&m, seed, std::mem::take(&mut model))
        }));
        match r {
            Ok(next) => model = next,
            Err(e) => {
                let log = m.env.daemon_log();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                eprintln!("daemon log, newest first:\n{}", tail.join("\n"));
                eprintln!(
                    "{}",
                    tarn_testkit::replay_line("snapshot sigkill round", seed)
                );
                std::panic::resume_unwind(e);
            }
        }
    }
    m.env.ok(&["zpool", "export", "tank"]);
    space_check_exported(&m);
}
