//! Crash consistency through a real FUSE mount under many threads, with
//! the daemon killed by SIGKILL.
//!
//! Each round: `THREADS` threads run the seeded workload of
//! `tarn-zpl/tests/common/crash_workload.rs` (creates, writes at offsets,
//! appends, truncates, renames within and across directories and over
//! existing files, exchanges, links, unlinks, directories, symlinks,
//! chmods, xattrs; some followed by fsync of the file or of its
//! directories, some through O_SYNC or O_DSYNC opens), each in its own
//! directory and in one they share. Each thread records in its model,
//! in this process (outside the pool), what every fsync that returned
//! acknowledged. After a seeded number of completed steps the daemon is
//! killed with SIGKILL; the next `tarn` command starts a new one, which
//! re-imports the pool from the cache file, remounts it and replays the
//! intent log. Then the pool must be healthy and mounted once, the whole
//! tree readable (no EIO), and each thread's part of it a state the
//! thread could have left: every acknowledged state there (the check is
//! exact per thread, see the workload's module comment), nothing it never
//! made. The rounds share the pool, so each round also checks that the
//! trees of the earlier ones did not change.
//!
//! Every step opens and closes its own descriptors, and a close writes
//! back the kernel's cached pages of the file (FUSE's writeback cache),
//! so the daemon receives each thread's changes in the order it made
//! them, as the model assumes. A second test runs the same workload
//! without a crash and checks that the tree is then exactly what the
//! models say: that tests the model and the system calls here.
//!
//! Each round has its own seed, which a failure prints:
//! `TARN_SEED=n` replays round n alone (the same operations and
//! kill point; which requests are in flight at the kill may differ).
//! `TARN_SEEDS=n` runs n rounds from `TARN_SEED_START` (default 0).

mod common;
#[path = "../../tarn-zpl/tests/common/crash_workload.rs"]
mod crash_workload;

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use common::{check, cpath, is_fuse_mounted, mounts_under, umask, Mounted, MIB};
use crash_workload::{
    check_tree, diff, flatten, run_thread, Backend, Change, DirId, Loc, Model, Node, Step, Sync,
    WriteSync, OWN, SHARED,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const THREADS: usize = 6;
const ROUNDS_DEFAULT: u64 = 20;
/// The daemon is killed once the threads have completed a seeded number
/// of steps (all together) in this range.
const KILL_AFTER_STEPS: std::ops::Range<usize> = 10..500;
/// Steps per thread of the run without a crash.
const STEPS_WITHOUT_CRASH: usize = 150;
/// A workload that completes no step for this long is stuck (a hung
/// daemon), not slow.
const STEP_WAIT_MAX: Duration = Duration::from_secs(30);

/// The workload's operations as system calls on the mount.
struct FuseFs {
    dirs: HashMap<DirId, PathBuf>,
}

fn sync_flags(how: WriteSync) -> i32 {
    match how {
        WriteSync::OSync => libc::O_SYNC,
        WriteSync::ODsync => libc::O_DSYNC,
        _ => 0,
    }
}

/// The fsync a write asked for, on the descriptor it went through.
fn finish(f: &File, how: WriteSync) -> std::io::Result<()> {
    match how {
        WriteSync::Fsync => f.sync_all(),
        WriteSync::Fdatasync => f.sync_data(),
        _ => Ok(()),
    }
}

impl FuseFs {
    fn path(&self, at: &Loc) -> PathBuf {
        self.dirs[&at.dir].join(&at.name)
    }

    fn write(&self, at: &Loc, opts: &mut OpenOptions, how: WriteSync) -> std::io::Result<File> {
        opts.write(true)
            .custom_flags(sync_flags(how))
            .open(self.path(at))
    }

    fn change(&mut self, c: &Change) -> std::io::Result<()> {
        match c {
            Change::Create {
                at,
                mode,
                data,
                how,
            } => {
                let mut o = OpenOptions::new();
                let mut f = self.write(at, o.create_new(true).mode(*mode), *how)?;
                f.write_all(data)?;
                finish(&f, *how)
            }
            Change::Pwrite { at, off, data, how } => {
                let f = self.write(at, &mut OpenOptions::new(), *how)?;
                f.write_all_at(data, *off)?;
                finish(&f, *how)
            }
            Change::Append { at, data, how } => {
                let mut f = self.write(at, OpenOptions::new().append(true), *how)?;
                f.write_all(data)?;
                finish(&f, *how)
            }
            Change::Replace { at, data, how } => {
                let mut f = self.write(at, OpenOptions::new().truncate(true), *how)?;
                f.write_all(data)?;
                finish(&f, *how)
            }
            Change::Truncate { at, size } => OpenOptions::new()
                .write(true)
                .open(self.path(at))?
                .set_len(*size),
            Change::Chmod { at, mode } => {
                std::fs::set_permissions(self.path(at), std::fs::Permissions::from_mode(*mode))
            }
            Change::SetXattr { at, name, value } => {
                let (p, n) = (cpath(&self.path(at)), CString::new(name.as_str()).unwrap());
                // SAFETY: NUL-terminated path and name, and a buffer of
                // the length given, all alive for the call.
                let rc = unsafe {
                    libc::lsetxattr(
                        p.as_ptr(),
                        n.as_ptr(),
                        value.as_ptr().cast(),
                        value.len(),
                        0,
                    )
                };
                check(rc).map(|_| ())
            }
            Change::RemoveXattr { at, name } => {
                let (p, n) = (cpath(&self.path(at)), CString::new(name.as_str()).unwrap());
                // SAFETY: NUL-terminated path and name alive for the call.
                check(unsafe { libc::lremovexattr(p.as_ptr(), n.as_ptr()) }).map(|_| ())
            }
            Change::Rename { from, to } => std::fs::rename(self.path(from), self.path(to)),
            Change::Exchange { a, b } => {
                let (pa, pb) = (cpath(&self.path(a)), cpath(&self.path(b)));
                // SAFETY: NUL-terminated paths alive for the call.
                let rc = unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        pa.as_ptr(),
                        libc::AT_FDCWD,
                        pb.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                check(rc).map(|_| ())
            }
            Change::Link { from, to } => std::fs::hard_link(self.path(from), self.path(to)),
            Change::Unlink { at } => std::fs::remove_file(self.path(at)),
            Change::Symlink { at, target } => std::os::unix::fs::symlink(target, self.path(at)),
            Change::Mkdir { at, id } => {
                let p = self.path(at);
                std::fs::create_dir(&p)?;
                self.dirs.insert(*id, p);
                Ok(())
            }
            Change::Rmdir { at } => std::fs::remove_dir(self.path(at)),
            Change::Nothing => Ok(()),
        }
    }
}

impl Backend for FuseFs {
    fn run(&mut self, step: &Step) -> Result<(), String> {
        self.change(&step.change).map_err(|e| e.to_string())?;
        for s in &step.syncs {
            let r = match s {
                Sync::File { at, data_only } => File::open(self.path(at)).and_then(|f| {
                    if *data_only {
                        f.sync_data()
                    } else {
                        f.sync_all()
                    }
                }),
                Sync::Dir(d) => File::open(&self.dirs[d]).and_then(|f| f.sync_all()),
            };
            r.map_err(|e| format!("{s:?}: {e}"))?;
        }
        Ok(())
    }
}

/// The user xattrs of `p` (not following symlinks).
fn user_xattrs(p: &Path) -> std::io::Result<BTreeMap<String, Vec<u8>>> {
    let c = cpath(p);
    // SAFETY: a NUL-terminated path; a null buffer of size 0 asks for
    // the size.
    let len = check(unsafe { libc::llistxattr(c.as_ptr(), std::ptr::null_mut(), 0) })?;
    let mut names = vec![0u8; len as usize];
    // SAFETY: the buffer holds `names.len()` bytes.
    let len =
        check(unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) })?;
    names.truncate(len as usize);
    let mut out = BTreeMap::new();
    for name in names.split(|&b| b == 0).filter(|n| n.starts_with(b"user.")) {
        let n = CString::new(name).unwrap();
        let mut value = vec![0u8; 64 << 10];
        // SAFETY: NUL-terminated path and name; the buffer holds
        // `value.len()` bytes.
        let len = check(unsafe {
            libc::lgetxattr(
                c.as_ptr(),
                n.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        })?;
        value.truncate(len as usize);
        out.insert(String::from_utf8_lossy(name).into_owned(), value);
    }
    Ok(out)
}

/// The tree at `p` as read back; anything unreadable becomes
/// `Node::Other` with the error, which the check reports.
fn snapshot(p: &Path) -> Node {
    read_node(p).unwrap_or_else(|e| Node::Other(format!("unreadable: {e}")))
}

fn read_node(p: &Path) -> std::io::Result<Node> {
    let md = std::fs::symlink_metadata(p)?;
    let ft = md.file_type();
    Ok(if ft.is_dir() {
        let mut children = BTreeMap::new();
        for e in std::fs::read_dir(p)? {
            let e = e?;
            children.insert(
                e.file_name().to_string_lossy().into_owned(),
                snapshot(&e.path()),
            );
        }
        Node::Dir(children)
    } else if ft.is_symlink() {
        Node::Symlink(std::fs::read_link(p)?.to_string_lossy().into_owned())
    } else if ft.is_file() {
        let data = std::fs::read(p)?;
        if data.len() as u64 != md.len() {
            return Err(std::io::Error::other(format!(
                "read {} bytes of a {}-byte file",
                data.len(),
                md.len()
            )));
        }
        Node::File {
            ino: md.ino(),
            mode: md.mode() & 0o7777,
            data,
            xattrs: user_xattrs(p)?,
        }
    } else {
        Node::Other(format!("file type {ft:?}"))
    })
}

/// Makes `dirs` and makes them durable (each, and its parent).
fn make_durable_dirs(dirs: &[PathBuf]) {
    for d in dirs {
        std::fs::create_dir(d).unwrap();
        File::open(d).unwrap().sync_all().unwrap();
        File::open(d.parent().unwrap()).unwrap().sync_all().unwrap();
    }
}

/// The directories of a round under `base` (made durable) and the
/// backend of each thread.
fn round_dirs(base: &Path) -> Vec<FuseFs> {
    let shared = base.join("shared");
    let own: Vec<PathBuf> = (0..THREADS)
        .map(|k| base.join(Model::own_dir_name(k)))
        .collect();
    let mut all = vec![base.to_path_buf(), shared.clone()];
    all.extend(own.iter().cloned());
    make_durable_dirs(&all);
    own.into_iter()
        .map(|o| FuseFs {
            dirs: HashMap::from([(SHARED, shared.clone()), (OWN, o)]),
        })
        .collect()
}

/// How a run of the workload ends.
#[derive(Clone, Copy)]
enum End {
    /// SIGKILL of the daemon once the threads completed this many steps
    /// (all together).
    KillAfter(usize),
    /// Each thread stops after this many steps.
    Steps(usize),
}

/// Runs the workload in `base` until `end`; returns each thread's model.
/// A workload that stops making progress fails the test (the daemon is
/// killed first, so that the threads return).
fn run_workload(m: &Mounted, seed: u64, rng: &mut ChaCha8Rng, base: &Path, end: End) -> Vec<Model> {
    let backends = round_dirs(base);
    let (kill_after, steps) = match end {
        End::KillAfter(n) => (Some(n), usize::MAX),
        End::Steps(n) => (None, n),
    };
    let killed = AtomicBool::new(false);
    let kill = || {
        killed.store(true, Ordering::SeqCst);
        m.env.kill_daemon();
    };
    let (tick, ticks) = mpsc::channel::<()>();
    let umask = umask();
    std::thread::scope(|s| {
        let handles: Vec<_> = backends
            .into_iter()
            .enumerate()
            .map(|(k, mut fs)| {
                let (tseed, tick, killed) = (rng.random::<u64>(), tick.clone(), &killed);
                s.spawn(move || {
                    let mut model = Model::new(k, umask, true);
                    let mut trng = ChaCha8Rng::seed_from_u64(tseed);
                    let err = run_thread(&mut model, &mut fs, &mut trng, steps, || {
                        let _ = tick.send(());
                    });
                    if let Some(e) = err {
                        assert!(
                            killed.load(Ordering::SeqCst),
                            "seed {seed}: thread {k} failed before any kill: {e}"
                        );
                    }
                    model
                })
            })
            .collect();
        drop(tick);
        let mut done = 0;
        while kill_after.is_none_or(|n| done < n) {
            match ticks.recv_timeout(STEP_WAIT_MAX) {
                Ok(()) => done += 1,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    kill();
                    panic!(
                        "seed {seed}: no step completed for {STEP_WAIT_MAX:?} after {done} \
                         (a hung daemon: it was killed to end the test)"
                    );
                }
            }
        }
        if kill_after.is_some() {
            kill();
        }
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The next command restarts the daemon, which re-imports and remounts:
/// the pool must be healthy and mounted exactly once.
fn restart_and_check_pool(m: &Mounted, seed: u64) {
    let status = m.env.ok(&["zpool", "status", m.pool.as_str()]);
    assert!(
        status.contains("ONLINE") && status.contains("errors: No known data errors"),
        "seed {seed}: after the restart:\n{status}"
    );
    assert!(
        is_fuse_mounted(&m.root()),
        "seed {seed}: not remounted; daemon log:\n{}",
        m.env.daemon_log()
    );
    let fuse_mounts = mounts_under(m.env.dir.path());
    assert_eq!(fuse_mounts.len(), 1, "seed {seed}: mounts {fuse_mounts:?}");
}

/// One crash point: workload, kill, restart, check. `earlier` holds the
/// flattened trees of the earlier rounds on this pool, which must not
/// change; this round's is added.
fn run_round(m: &Mounted, seed: u64, earlier: &mut BTreeMap<String, BTreeMap<String, String>>) {
    let name = format!("seed-{seed}");
    let base = m.root().join(&name);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let kill_after = rng.random_range(KILL_AFTER_STEPS);
    let models = run_workload(m, seed, &mut rng, &base, End::KillAfter(kill_after));
    restart_and_check_pool(m, seed);
    let top = match snapshot(&base) {
        Node::Dir(c) => c,
        other => panic!("seed {seed}: {}: {other:?}", base.display()),
    };
    let failures = check_tree(&models, &top, "shared");
    let steps: usize = models.iter().map(Model::steps).sum();
    assert!(
        failures.is_empty(),
        "seed {seed}: after SIGKILL at step {steps}:\n{}\ndaemon log:\n{}",
        failures.join("\n"),
        m.env.daemon_log()
    );
    for (r, before) in earlier.iter() {
        let mut after = BTreeMap::new();
        flatten(&snapshot(&m.root().join(r)), "", &mut after);
        let changed = diff(before, &after);
        assert!(
            changed.is_empty(),
            "seed {seed}: the crash changed {r}, recovered by an earlier round:\n{}",
            changed.join("\n")
        );
    }
    let mut mine = BTreeMap::new();
    flatten(&Node::Dir(top), "", &mut mine);
    let acks: usize = models.iter().map(Model::acks).sum();
    eprintln!(
        "seed {seed}: killed after {steps} steps ({acks} acknowledged by an fsync), \
         {} names recovered and checked",
        mine.len()
    );
    earlier.insert(name, mine);
}

fn seeds() -> Vec<u64> {
    tarn_testkit::seeds(0, ROUNDS_DEFAULT)
}

/// Without a crash, the tree the workload leaves is exactly what its
/// models say: a test of the model and of this file's system calls.
#[test]
fn workload_without_a_crash_matches_its_model() {
    let m = Mounted::new("tank", &["a"], 512 * MIB);
    let base = m.root().join("no-crash");
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let end = End::Steps(STEPS_WITHOUT_CRASH);
    let mut models = run_workload(&m, 0, &mut rng, &base, end);
    for model in &mut models {
        model.ack_all();
    }
    let top = match snapshot(&base) {
        Node::Dir(c) => c,
        other => panic!("{}: {other:?}", base.display()),
    };
    let failures = check_tree(&models, &top, "shared");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn acknowledged_state_survives_sigkill_under_many_threads() {
    let m = Mounted::new("tank", &["mirror", "a", "b"], 512 * MIB);
    let mut earlier = BTreeMap::new();
    for seed in seeds() {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_round(&m, seed, &mut earlier)
        }));
        if let Err(e) = r {
            eprintln!("{}", tarn_testkit::replay_line("zil_crash round", seed));
            std::panic::resume_unwind(e);
        }
    }
}
