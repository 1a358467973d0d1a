//! Model-based random test: one seeded random sequence of operations
//! (create, write at offsets, truncate, mkdir, rmdir, unlink, rename,
//! link, symlink, chmod, read) applied to a tarn mount and to a directory
//! on the local disk (ext4 or whatever the temp dir is on — the reference
//! is Linux itself). Every operation must give the same result (errno, or
//! the bytes read) on both sides, and the two trees must match byte for
//! byte — names, types, sizes, contents, modes, link counts, which names
//! share an inode, symlink targets — in the middle, after an export and
//! import, and at the end.
//!
//! A failure prints its seed; `TARN_SEED=n` replays just that seed.

mod common;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use common::{check, cpath, errno_of, Mounted, MIB};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const FIRST_SEED: u64 = 1;
const SEED_COUNT: u64 = 4;
const OPS_PER_SEED: usize = 1500;
const NAMES: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
const SYMLINK_TARGETS: [&str; 4] = ["a", "b/c", "d", "nowhere"];
const MODES: [u32; 5] = [0o644, 0o600, 0o755, 0o4755, 0o1777];

#[derive(Debug, Clone)]
enum Op {
    Write {
        path: String,
        off: u64,
        len: usize,
        seed: u64,
    },
    Truncate {
        path: String,
        len: u64,
    },
    Mkdir {
        path: String,
    },
    Rmdir {
        path: String,
    },
    Unlink {
        path: String,
    },
    Rename {
        from: String,
        to: String,
    },
    Link {
        from: String,
        to: String,
    },
    Symlink {
        target: &'static str,
        path: String,
    },
    Chmod {
        path: String,
        mode: u32,
    },
    Read {
        path: String,
    },
}

fn random_path(rng: &mut ChaCha8Rng) -> String {
    let depth = match rng.random_range(0..100) {
        0..=44 => 1,
        45..=84 => 2,
        _ => 3,
    };
    (0..depth)
        .map(|_| NAMES[rng.random_range(0..NAMES.len())])
        .collect::<Vec<_>>()
        .join("/")
}

fn random_op(rng: &mut ChaCha8Rng) -> Op {
    let path = random_path(rng);
    match rng.random_range(0..100) {
        0..=24 => {
            let off = if rng.random_bool(0.1) {
                rng.random_range(0..4 * MIB)
            } else {
                rng.random_range(0..200_000)
            };
            Op::Write {
                path,
                off,
                len: rng.random_range(1..70_000),
                seed: rng.random(),
            }
        }
        25..=31 => Op::Truncate {
            path,
            len: rng.random_range(0..300_000),
        },
        32..=44 => Op::Mkdir { path },
        45..=51 => Op::Rmdir { path },
        52..=59 => Op::Unlink { path },
        60..=71 => Op::Rename {
            from: path,
            to: random_path(rng),
        },
        72..=77 => Op::Link {
            from: path,
            to: random_path(rng),
        },
        78..=83 => Op::Symlink {
            target: SYMLINK_TARGETS[rng.random_range(0..SYMLINK_TARGETS.len())],
            path,
        },
        84..=89 => Op::Chmod {
            path,
            mode: MODES[rng.random_range(0..MODES.len())],
        },
        _ => Op::Read { path },
    }
}

/// What an operation gave: the errno, or success with the bytes read.
type Outcome = Result<Vec<u8>, i32>;

fn sys(rc: std::io::Result<impl Sized>) -> Outcome {
    match errno_of(rc) {
        0 => Ok(Vec::new()),
        e => Err(e),
    }
}

fn apply(root: &Path, op: &Op) -> Outcome {
    let p = |s: &str| -> CString { cpath(&root.join(s)) };
    // SAFETY (all the libc calls below): NUL-terminated paths we own.
    match op {
        Op::Write {
            path,
            off,
            len,
            seed,
        } => {
            let f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(root.join(path));
            let f = match f {
                Ok(f) => f,
                Err(e) => return Err(e.raw_os_error().unwrap()),
            };
            let mut data = vec![0u8; *len];
            ChaCha8Rng::seed_from_u64(*seed).fill(&mut data[..]);
            sys(f.write_all_at(&data, *off))
        }
        Op::Truncate { path, len } => sys(check(unsafe {
            libc::truncate(p(path).as_ptr(), *len as i64)
        })),
        Op::Mkdir { path } => sys(std::fs::create_dir(root.join(path))),
        Op::Rmdir { path } => sys(std::fs::remove_dir(root.join(path))),
        Op::Unlink { path } => sys(std::fs::remove_file(root.join(path))),
        Op::Rename { from, to } => sys(std::fs::rename(root.join(from), root.join(to))),
        Op::Link { from, to } => sys(check(unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                p(from).as_ptr(),
                libc::AT_FDCWD,
                p(to).as_ptr(),
                0,
            )
        })),
        Op::Symlink { target, path } => sys(std::os::unix::fs::symlink(target, root.join(path))),
        Op::Chmod { path, mode } => sys(check(unsafe { libc::chmod(p(path).as_ptr(), *mode) })),
        Op::Read { path } => std::fs::read(root.join(path)).map_err(|e| e.raw_os_error().unwrap()),
    }
}

/// One entry of a tree, everything that must match.
#[derive(Debug, PartialEq, Eq)]
struct Node {
    kind: &'static str,
    mode: u32,
    nlink: u64,
    /// Size and contents of a file, target of a symlink.
    size: u64,
    bytes: Vec<u8>,
    /// The first path (in walk order) naming the same inode.
    same_as: String,
}

fn snapshot(root: &Path) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    let mut inodes: BTreeMap<u64, String> = BTreeMap::new();
    walk(root, "", &mut out, &mut inodes);
    out
}

fn walk(
    root: &Path,
    rel: &str,
    out: &mut BTreeMap<String, Node>,
    inodes: &mut BTreeMap<u64, String>,
) {
    let dir = root.join(rel);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    for n in names {
        let path = if rel.is_empty() {
            n.clone()
        } else {
            format!("{rel}/{n}")
        };
        let md = std::fs::symlink_metadata(root.join(&path)).unwrap();
        let ft = md.file_type();
        let (kind, size, bytes) = if ft.is_dir() {
            ("dir", 0, Vec::new())
        } else if ft.is_symlink() {
            let t = std::fs::read_link(root.join(&path)).unwrap();
            ("symlink", md.len(), t.into_os_string().into_encoded_bytes())
        } else {
            ("file", md.len(), std::fs::read(root.join(&path)).unwrap())
        };
        let same_as = inodes
            .entry(md.ino())
            .or_insert_with(|| path.clone())
            .clone();
        // A symlink's mode bits are not meaningful (0777 everywhere).
        let mode = if ft.is_symlink() {
            0
        } else {
            md.mode() & 0o7777
        };
        out.insert(
            path.clone(),
            Node {
                kind,
                mode,
                nlink: md.nlink(),
                size,
                bytes,
                same_as,
            },
        );
        if ft.is_dir() {
            walk(root, &path, out, inodes);
        }
    }
}

fn compare_trees(seed: u64, when: &str, tarn: &Path, local: &Path) {
    let (t, l) = (snapshot(tarn), snapshot(local));
    let tk: Vec<_> = t.keys().collect();
    let lk: Vec<_> = l.keys().collect();
    assert_eq!(
        tk, lk,
        "seed {seed}, {when}: names differ (tarn left, local right)"
    );
    for (path, tn) in &t {
        let ln = &l[path];
        if tn != ln {
            let brief = |n: &Node| {
                format!(
                    "{} mode {:o} nlink {} size {} same_as {}",
                    n.kind, n.mode, n.nlink, n.size, n.same_as
                )
            };
            let first_diff = tn.bytes.iter().zip(&ln.bytes).position(|(a, b)| a != b);
            panic!(
                "seed {seed}, {when}: {path} differs\n tarn:  {}\n local: {}\n first differing byte: {first_diff:?}",
                brief(tn),
                brief(ln)
            );
        }
    }
}

fn run_seed(seed: u64) {
    let m = Mounted::new("tank", &["mirror", "a", "b"], 512 * MIB);
    let tarn = m.root().join("model");
    let local = m.env.dir.path().join("local-model");
    std::fs::create_dir(&tarn).unwrap();
    std::fs::create_dir(&local).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut succeeded = 0;
    for i in 0..OPS_PER_SEED {
        let op = random_op(&mut rng);
        let (t, l) = (apply(&tarn, &op), apply(&local, &op));
        succeeded += usize::from(t.is_ok());
        if t != l {
            let show = |o: &Outcome| match o {
                Ok(b) => format!("ok ({} bytes)", b.len()),
                Err(e) => format!("errno {e} ({})", std::io::Error::from_raw_os_error(*e)),
            };
            panic!(
                "seed {seed}, op {i}: {op:?}\n tarn:  {}\n local: {}\n(replay: TARN_SEED={seed})",
                show(&t),
                show(&l)
            );
        }
        if i == OPS_PER_SEED / 2 {
            compare_trees(seed, "before remount", &tarn, &local);
            m.remount();
            compare_trees(seed, "after remount", &tarn, &local);
        }
    }
    compare_trees(seed, "at the end", &tarn, &local);
    let nodes = snapshot(&tarn).len();
    eprintln!(
        "seed {seed}: {succeeded} of {OPS_PER_SEED} operations succeeded, {nodes} names at the end"
    );
    // A sequence that mostly fails would test little.
    assert!(
        succeeded > OPS_PER_SEED / 5 && nodes >= 10,
        "seed {seed}: too little happened"
    );
}

#[test]
fn random_operations_match_the_local_file_system() {
    for seed in tarn_testkit::seeds(FIRST_SEED, SEED_COUNT) {
        eprintln!("posix_model: seed {seed}");
        run_seed(seed);
    }
}
