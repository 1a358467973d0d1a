//! The crash-consistency workload shared by `tarn-zpl/tests/zil_crash.rs`
//! (the engine on simulated devices that lose unflushed writes) and
//! `tarn/tests/zil_crash.rs` (the real daemon killed with SIGKILL): each
//! thread's seeded mix of operations, the model of what they may leave
//! behind after a crash, and the check of a recovered tree against it.
//! The two tests differ only in how an operation reaches the filesystem
//! ([`Backend`]) and how the recovered tree is read (into a [`Node`]).
//!
//! # Ownership
//! Every thread owns its names: its own directory tree, and the names
//! with its prefix (`t3-`) in the directory all threads share. So one
//! thread's model never depends on another's and the check is exact,
//! while the shared directory still sees concurrent changes.
//!
//! # Histories and floors
//! The model keeps histories, not states:
//! - per directory entry (directory, name): the bindings it had, in
//!   order (absent, a file, a symlink, a subdirectory);
//! - per file: its contents, its mode and each extended attribute, each
//!   a history of its own (POSIX orders none of them against another).
//!
//! An acknowledgement drops what came before the value it made durable,
//! so the first value left is the floor. After a crash every history
//! must show one of its values: the acknowledged one or one the thread
//! wrote later. A name whose history no longer holds "absent" must
//! exist; a name that is not in the model must not.
//!
//! # What acknowledges what (only once the call returned)
//! - `fsync` of a file, or a write through `O_SYNC`: its contents, mode
//!   and extended attributes; `fdatasync` or `O_DSYNC`: its contents;
//! - `fsync` of a directory: the thread's entries in it (POSIX);
//! - with `zfs_rule`, any of them also makes every entry of the thread
//!   durable: ZFS commits all namespace records at any fsync.
//!
//! A call that failed (the crash came in the middle of it) may or may not
//! have happened, wholly or up to one of its steps: its values go into
//! the histories all the same, acknowledged by nothing.
//!
//! Subdirectory names are never reused, so a directory of the recovered
//! tree stands for exactly one model directory; file names are reused
//! all the time, and a name may stand for any file it was bound to since
//! its floor.

#![allow(dead_code)] // each test uses part of it

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use rand::{Rng, RngCore};

/// A model directory of one thread.
pub type DirId = usize;
/// The directory every thread shares.
pub const SHARED: DirId = 0;
/// The thread's own directory.
pub const OWN: DirId = 1;

/// File names per directory (small, so names are reused and renames land
/// on existing files).
const NAMES_PER_DIR: usize = 8;
/// Subdirectories nest at most this deep below the thread's directory.
const SUBDIR_DEPTH_MAX: usize = 2;
/// Largest write, and largest size a truncate or a write may reach.
const WRITE_BYTES_MAX: usize = 160 << 10;
const FILE_BYTES_MAX: u64 = 512 << 10;
/// Extended attributes the workload sets: small ones stay in the znode,
/// `user.big` may not fit and goes to the xattr directory.
const XATTR_NAMES: [&str; 3] = ["user.a", "user.b", "user.big"];

/// A directory entry of one thread's model.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Loc {
    pub dir: DirId,
    pub name: String,
}

/// How a write is made durable on the file descriptor it went through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteSync {
    No,
    Fsync,
    Fdatasync,
    /// Opened with `O_SYNC`.
    OSync,
    /// Opened with `O_DSYNC`.
    ODsync,
}

impl WriteSync {
    fn acks(self) -> Option<bool> {
        match self {
            WriteSync::No => None,
            WriteSync::Fsync | WriteSync::OSync => Some(false),
            WriteSync::Fdatasync | WriteSync::ODsync => Some(true),
        }
    }
}

/// One change to the tree.
#[derive(Clone, Debug)]
pub enum Change {
    /// `open(O_CREAT|O_EXCL, mode)` then a write of `data` (if any).
    Create {
        at: Loc,
        mode: u32,
        data: Vec<u8>,
        how: WriteSync,
    },
    Pwrite {
        at: Loc,
        off: u64,
        data: Vec<u8>,
        how: WriteSync,
    },
    /// A write through `O_APPEND`.
    Append {
        at: Loc,
        data: Vec<u8>,
        how: WriteSync,
    },
    /// `open(O_TRUNC)` then a write of `data`.
    Replace {
        at: Loc,
        data: Vec<u8>,
        how: WriteSync,
    },
    Truncate {
        at: Loc,
        size: u64,
    },
    Chmod {
        at: Loc,
        mode: u32,
    },
    SetXattr {
        at: Loc,
        name: String,
        value: Vec<u8>,
    },
    RemoveXattr {
        at: Loc,
        name: String,
    },
    /// Replaces `to` if it exists (never a directory).
    Rename {
        from: Loc,
        to: Loc,
    },
    /// `renameat2(RENAME_EXCHANGE)` of two existing names.
    Exchange {
        a: Loc,
        b: Loc,
    },
    Link {
        from: Loc,
        to: Loc,
    },
    Unlink {
        at: Loc,
    },
    Symlink {
        at: Loc,
        target: String,
    },
    /// Creates model directory `id`.
    Mkdir {
        at: Loc,
        id: DirId,
    },
    Rmdir {
        at: Loc,
    },
    /// A step that only syncs.
    Nothing,
}

/// An explicit sync after a change, through a new descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sync {
    File { at: Loc, data_only: bool },
    Dir(DirId),
}

/// One step of a thread: a change and the syncs that follow it.
#[derive(Clone, Debug)]
pub struct Step {
    pub change: Change,
    pub syncs: Vec<Sync>,
}

/// How a step reaches the filesystem under test. Each thread has its own
/// backend; it learns where model directories are from `Mkdir` and from
/// [`SHARED`]/[`OWN`], which it is given.
pub trait Backend {
    /// Makes the change, then each sync, stopping at the first error.
    fn run(&mut self, step: &Step) -> Result<(), String>;
}

/// A node of a recovered tree, as read back after the crash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    Dir(BTreeMap<String, Node>),
    File {
        ino: u64,
        /// Permission bits only.
        mode: u32,
        data: Vec<u8>,
        /// `user.` attributes only.
        xattrs: BTreeMap<String, Vec<u8>>,
    },
    Symlink(String),
    /// Anything the workload never makes (a device, a FIFO).
    Other(String),
}

/// Values of one attribute since its last acknowledgement.
#[derive(Clone, Debug)]
struct Hist<T> {
    vals: Vec<T>,
    /// The step whose acknowledgement made `vals[0]` the floor.
    acked_at: Option<usize>,
}

impl<T: Clone + PartialEq> Hist<T> {
    fn new(v: T) -> Self {
        Hist {
            vals: vec![v],
            acked_at: None,
        }
    }
    fn cur(&self) -> &T {
        self.vals.last().expect("a history is never empty")
    }
    fn push(&mut self, v: T) {
        if *self.cur() != v {
            self.vals.push(v);
        }
    }
    /// The current value is durable (by `step`): nothing before it may
    /// show up.
    fn ack(&mut self, step: usize) {
        if self.vals.len() > 1 || self.acked_at.is_none() {
            let last = self.vals.len() - 1;
            self.vals.drain(..last);
            self.acked_at = Some(step);
        }
    }

    /// "at step #n" for messages.
    fn acked(&self) -> String {
        self.acked_at.map_or("never acknowledged".into(), |n| {
            format!("acknowledged by #{n}")
        })
    }
}

/// What an entry names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Binding {
    Absent,
    File(usize),
    Symlink(usize),
    Dir(DirId),
}

#[derive(Clone, Debug)]
struct FileObj {
    /// Steps that changed the file or one of its names.
    steps: Vec<usize>,
    data: Hist<Vec<u8>>,
    mode: Hist<u32>,
    xattrs: BTreeMap<String, Hist<Option<Vec<u8>>>>,
}

#[derive(Clone)]
struct DirInfo {
    depth: usize,
    live: bool,
}

/// One thread's model (see the module comment).
#[derive(Clone)]
pub struct Model {
    thread: usize,
    umask: u32,
    zfs_rule: bool,
    entries: BTreeMap<Loc, Hist<Binding>>,
    files: Vec<FileObj>,
    symlinks: Vec<String>,
    dirs: Vec<DirInfo>,
    /// Every step, for failure reports.
    log: Vec<String>,
    acks: usize,
}

impl Model {
    /// A thread whose directory and the shared one exist and are durable.
    /// `umask` is applied to the modes of new files, as the kernel does.
    pub fn new(thread: usize, umask: u32, zfs_rule: bool) -> Model {
        let root = || DirInfo {
            depth: 0,
            live: true,
        };
        Model {
            thread,
            umask,
            zfs_rule,
            entries: BTreeMap::new(),
            files: Vec::new(),
            symlinks: Vec::new(),
            dirs: vec![root(), root()],
            log: Vec::new(),
            acks: 0,
        }
    }

    /// The prefix of this thread's names in the shared directory.
    pub fn prefix(thread: usize) -> String {
        format!("t{thread}-")
    }

    /// The name of this thread's own directory.
    pub fn own_dir_name(thread: usize) -> String {
        format!("t{thread}")
    }

    /// Steps run so far.
    pub fn steps(&self) -> usize {
        self.log.len()
    }

    fn bound(&self, loc: &Loc) -> Binding {
        self.entries.get(loc).map_or(Binding::Absent, |h| *h.cur())
    }

    fn bind(&mut self, loc: &Loc, b: Binding) {
        self.entries
            .entry(loc.clone())
            .or_insert_with(|| Hist::new(Binding::Absent))
            .push(b);
    }

    fn file_at(&self, loc: &Loc) -> usize {
        match self.bound(loc) {
            Binding::File(o) => o,
            b => panic!("model: {loc:?} is {b:?}, not a file"),
        }
    }

    fn live_dirs(&self) -> Vec<DirId> {
        (0..self.dirs.len())
            .filter(|&d| self.dirs[d].live)
            .collect()
    }

    /// Current names in live directories bound as `keep` says.
    fn names(&self, keep: impl Fn(Binding) -> bool) -> Vec<Loc> {
        self.entries
            .iter()
            .filter(|(l, h)| self.dirs[l.dir].live && keep(*h.cur()))
            .map(|(l, _)| l.clone())
            .collect()
    }

    fn files_now(&self) -> Vec<Loc> {
        self.names(|b| matches!(b, Binding::File(_)))
    }

    fn pick<T: Clone>(rng: &mut impl RngCore, v: &[T]) -> Option<T> {
        (!v.is_empty()).then(|| v[rng.random_range(0..v.len())].clone())
    }

    /// A file-name slot in a random live directory (maybe taken).
    fn any_slot(&self, rng: &mut impl RngCore) -> Loc {
        let dir = Self::pick(rng, &self.live_dirs()).expect("the roots are live");
        let n = rng.random_range(0..NAMES_PER_DIR);
        let name = if dir == SHARED {
            format!("{}n{n}", Self::prefix(self.thread))
        } else {
            format!("n{n}")
        };
        Loc { dir, name }
    }

    fn free_slot(&self, rng: &mut impl RngCore) -> Option<Loc> {
        (0..8)
            .map(|_| self.any_slot(rng))
            .find(|l| self.bound(l) == Binding::Absent)
    }

    fn data(rng: &mut impl RngCore) -> Vec<u8> {
        let len = match rng.random_range(0..10) {
            0..4 => rng.random_range(1..512),
            4..8 => rng.random_range(512..16 << 10),
            _ => rng.random_range(16 << 10..=WRITE_BYTES_MAX),
        };
        let mut v = vec![0u8; len];
        rng.fill_bytes(&mut v);
        v
    }

    fn write_sync(rng: &mut impl RngCore) -> WriteSync {
        match rng.random_range(0..100) {
            0..60 => WriteSync::No,
            60..75 => WriteSync::Fsync,
            75..83 => WriteSync::Fdatasync,
            83..92 => WriteSync::OSync,
            _ => WriteSync::ODsync,
        }
    }

    fn mode(&self, rng: &mut impl RngCore) -> u32 {
        let modes = [0o600, 0o640, 0o644, 0o664, 0o700, 0o755];
        modes[rng.random_range(0..modes.len())] & !self.umask
    }

    /// The next step: a seeded choice among what the current state allows.
    pub fn next_step(&self, rng: &mut impl RngCore) -> Step {
        loop {
            if let Some(step) = self.try_step(rng) {
                return step;
            }
        }
    }

    /// A step of the kind `rng` picks, if the state allows one (the
    /// weights are the widths of the ranges).
    fn try_step(&self, rng: &mut impl RngCore) -> Option<Step> {
        let roll = rng.random_range(0..100);
        let change = match roll {
            0..42 => self.data_change(rng, roll)?,
            42..61 => self.attr_change(rng, roll)?,
            61..88 => self.name_change(rng, roll)?,
            88..94 => self.dir_change(rng, roll)?,
            _ => return self.sync_only(rng, roll),
        };
        let syncs = match &change {
            Change::Truncate { at, .. }
            | Change::Chmod { at, .. }
            | Change::SetXattr { at, .. }
            | Change::RemoveXattr { at, .. } => Self::file_syncs(rng, at),
            _ => self.namespace_syncs(rng, &change),
        };
        Some(Step { change, syncs })
    }

    /// A random current file and its size.
    fn some_file(&self, rng: &mut impl RngCore) -> Option<(Loc, u64)> {
        let at = Self::pick(rng, &self.files_now())?;
        let len = self.files[self.file_at(&at)].data.cur().len() as u64;
        Some((at, len))
    }

    /// Create, pwrite, append or replace.
    fn data_change(&self, rng: &mut impl RngCore, roll: u32) -> Option<Change> {
        let how = Self::write_sync(rng);
        Some(match roll {
            0..14 => {
                let empty = rng.random_bool(0.1);
                Change::Create {
                    at: self.free_slot(rng)?,
                    mode: self.mode(rng),
                    data: if empty { vec![] } else { Self::data(rng) },
                    how,
                }
            }
            14..30 => {
                let (at, len) = self.some_file(rng)?;
                let off = rng.random_range(0..=len + 4096);
                let mut data = Self::data(rng);
                data.truncate(FILE_BYTES_MAX.saturating_sub(off) as usize);
                (!data.is_empty()).then_some(Change::Pwrite { at, off, data, how })?
            }
            30..38 => {
                let (at, len) = self.some_file(rng)?;
                let mut data = Self::data(rng);
                data.truncate(FILE_BYTES_MAX.saturating_sub(len) as usize);
                (!data.is_empty()).then_some(Change::Append { at, data, how })?
            }
            _ => Change::Replace {
                at: self.some_file(rng)?.0,
                data: Self::data(rng),
                how,
            },
        })
    }

    /// Truncate, chmod, setxattr or removexattr.
    fn attr_change(&self, rng: &mut impl RngCore, roll: u32) -> Option<Change> {
        let (at, len) = self.some_file(rng)?;
        Some(match roll {
            42..48 => Change::Truncate {
                at,
                size: rng.random_range(0..=(len + 8192).min(FILE_BYTES_MAX)),
            },
            48..53 => Change::Chmod {
                at,
                mode: self.mode(rng),
            },
            53..59 => {
                let name = XATTR_NAMES[rng.random_range(0..XATTR_NAMES.len())];
                let len = if name == "user.big" {
                    rng.random_range(100..3000)
                } else {
                    rng.random_range(1..64)
                };
                let mut value = vec![0u8; len];
                rng.fill_bytes(&mut value);
                Change::SetXattr {
                    at,
                    name: name.into(),
                    value,
                }
            }
            _ => {
                let o = self.file_at(&at);
                let set: Vec<&String> = self.files[o]
                    .xattrs
                    .iter()
                    .filter(|(_, h)| h.cur().is_some())
                    .map(|(n, _)| n)
                    .collect();
                let name = Self::pick(rng, &set)?.clone();
                Change::RemoveXattr { at, name }
            }
        })
    }

    /// Rename, exchange, link, unlink or symlink.
    fn name_change(&self, rng: &mut impl RngCore, roll: u32) -> Option<Change> {
        let linkable = self.names(|b| matches!(b, Binding::File(_) | Binding::Symlink(_)));
        Some(match roll {
            61..71 => {
                let from = Self::pick(rng, &linkable)?;
                let to = self.any_slot(rng);
                if to == from || matches!(self.bound(&to), Binding::Dir(_)) {
                    return None;
                }
                Change::Rename { from, to }
            }
            71..73 => {
                let (a, b) = (Self::pick(rng, &linkable)?, Self::pick(rng, &linkable)?);
                (a != b).then_some(Change::Exchange { a, b })?
            }
            73..78 => Change::Link {
                from: self.some_file(rng)?.0,
                to: self.free_slot(rng)?,
            },
            78..85 => Change::Unlink {
                at: Self::pick(rng, &linkable)?,
            },
            _ => Change::Symlink {
                at: self.free_slot(rng)?,
                target: format!("target-{}", rng.random_range(0..1000)),
            },
        })
    }

    /// Mkdir (never reusing a name) or rmdir of an empty directory.
    fn dir_change(&self, rng: &mut impl RngCore, roll: u32) -> Option<Change> {
        if roll < 91 {
            let parents: Vec<DirId> = self
                .live_dirs()
                .into_iter()
                .filter(|&d| d != SHARED && self.dirs[d].depth < SUBDIR_DEPTH_MAX)
                .collect();
            let id = self.dirs.len();
            let dir = Self::pick(rng, &parents)?;
            let name = format!("d{id}");
            return Some(Change::Mkdir {
                at: Loc { dir, name },
                id,
            });
        }
        let empty: Vec<Loc> = self
            .names(|b| matches!(b, Binding::Dir(_)))
            .into_iter()
            .filter(|l| {
                let Binding::Dir(d) = self.bound(l) else {
                    unreachable!("filtered on directories")
                };
                self.entries
                    .iter()
                    .all(|(e, h)| e.dir != d || *h.cur() == Binding::Absent)
            })
            .collect();
        Some(Change::Rmdir {
            at: Self::pick(rng, &empty)?,
        })
    }

    /// An fsync of a file or of a directory, changing nothing.
    fn sync_only(&self, rng: &mut impl RngCore, roll: u32) -> Option<Step> {
        let sync = if roll < 97 {
            Sync::File {
                at: self.some_file(rng)?.0,
                data_only: rng.random_bool(0.3),
            }
        } else {
            Sync::Dir(Self::pick(rng, &self.live_dirs())?)
        };
        Some(Step {
            change: Change::Nothing,
            syncs: vec![sync],
        })
    }

    /// After a change to one file: sometimes an fsync of it.
    fn file_syncs(rng: &mut impl RngCore, at: &Loc) -> Vec<Sync> {
        if rng.random_bool(0.35) {
            vec![Sync::File {
                at: at.clone(),
                data_only: rng.random_bool(0.3),
            }]
        } else {
            vec![]
        }
    }

    /// After a namespace change: sometimes the directories it touched
    /// (the portable way), sometimes only the file (enough under ZFS).
    fn namespace_syncs(&self, rng: &mut impl RngCore, change: &Change) -> Vec<Sync> {
        let (dirs, file): (Vec<DirId>, Option<&Loc>) = match change {
            Change::Create { at, .. } => (vec![at.dir], None),
            Change::Rename { from, to } => (vec![from.dir, to.dir], Some(to)),
            Change::Exchange { a, b } => (vec![a.dir, b.dir], None),
            Change::Link { from, to } => (vec![to.dir], Some(from)),
            Change::Unlink { at } | Change::Symlink { at, .. } | Change::Rmdir { at } => {
                (vec![at.dir], None)
            }
            Change::Mkdir { at, id } => (vec![*id, at.dir], None),
            _ => (vec![], None),
        };
        let mut syncs = Vec::new();
        match rng.random_range(0..10) {
            0..3 => {
                for d in dirs {
                    if !syncs.contains(&Sync::Dir(d)) {
                        syncs.push(Sync::Dir(d));
                    }
                }
            }
            3 => {
                // The renamed or linked file, if it is a file.
                if let Some(at) = file {
                    if matches!(self.bound_after(change, at), Binding::File(_)) {
                        syncs.push(Sync::File {
                            at: at.clone(),
                            data_only: false,
                        });
                    }
                }
            }
            _ => {}
        }
        syncs
    }

    /// What `at` names once `change` is made (for the names a change
    /// creates or keeps).
    fn bound_after(&self, change: &Change, at: &Loc) -> Binding {
        match change {
            Change::Rename { from, to } if to == at => self.bound(from),
            _ => self.bound(at),
        }
    }

    /// Records `step`'s change as possibly made, before it is attempted.
    pub fn apply(&mut self, step: &Step) {
        self.log.push(describe(step));
        let before = self.touched(step);
        self.apply_change(step);
        let n = self.log.len() - 1;
        for o in before.into_iter().chain(self.touched(step)) {
            if self.files[o].steps.last() != Some(&n) {
                self.files[o].steps.push(n);
            }
        }
    }

    /// The files a step names (before or after its change).
    fn touched(&self, step: &Step) -> Vec<usize> {
        let mut locs: Vec<&Loc> = Vec::new();
        match &step.change {
            Change::Create { at, .. }
            | Change::Pwrite { at, .. }
            | Change::Append { at, .. }
            | Change::Replace { at, .. }
            | Change::Truncate { at, .. }
            | Change::Chmod { at, .. }
            | Change::SetXattr { at, .. }
            | Change::RemoveXattr { at, .. }
            | Change::Unlink { at }
            | Change::Symlink { at, .. }
            | Change::Mkdir { at, .. }
            | Change::Rmdir { at } => locs.push(at),
            Change::Rename { from: a, to: b }
            | Change::Exchange { a, b }
            | Change::Link { from: a, to: b } => locs.extend([a, b]),
            Change::Nothing => {}
        }
        for s in &step.syncs {
            if let Sync::File { at, .. } = s {
                locs.push(at);
            }
        }
        locs.into_iter()
            .filter_map(|l| match self.bound(l) {
                Binding::File(o) => Some(o),
                _ => None,
            })
            .collect()
    }

    fn apply_change(&mut self, step: &Step) {
        match &step.change {
            Change::Create { at, mode, data, .. } => {
                self.files.push(FileObj {
                    steps: Vec::new(),
                    data: Hist::new(Vec::new()),
                    mode: Hist::new(*mode),
                    xattrs: BTreeMap::new(),
                });
                let o = self.files.len() - 1;
                self.bind(at, Binding::File(o));
                self.files[o].data.push(data.clone());
            }
            Change::Pwrite { at, off, data, .. } => {
                self.edit(at, |v| {
                    let (off, end) = (*off as usize, *off as usize + data.len());
                    if v.len() < end {
                        v.resize(end, 0);
                    }
                    v[off..end].copy_from_slice(data);
                });
            }
            Change::Append { at, data, .. } => self.edit(at, |v| v.extend_from_slice(data)),
            Change::Replace { at, data, .. } => {
                self.edit(at, Vec::clear);
                self.edit(at, |v| v.extend_from_slice(data));
            }
            Change::Truncate { at, size } => self.edit(at, |v| v.resize(*size as usize, 0)),
            Change::Chmod { at, mode } => {
                let o = self.file_at(at);
                self.files[o].mode.push(*mode);
            }
            Change::SetXattr { at, name, value } => self.set_xattr(at, name, Some(value.clone())),
            Change::RemoveXattr { at, name } => self.set_xattr(at, name, None),
            Change::Rename { from, to } => {
                let b = self.bound(from);
                // rename(2) of two links of one file does nothing.
                if self.bound(to) != b {
                    self.bind(to, b);
                    self.bind(from, Binding::Absent);
                }
            }
            Change::Exchange { a, b } => {
                let (ba, bb) = (self.bound(a), self.bound(b));
                self.bind(a, bb);
                self.bind(b, ba);
            }
            Change::Link { from, to } => {
                let b = self.bound(from);
                self.bind(to, b);
            }
            Change::Unlink { at } => self.bind(at, Binding::Absent),
            Change::Symlink { at, target } => {
                self.symlinks.push(target.clone());
                self.bind(at, Binding::Symlink(self.symlinks.len() - 1));
            }
            Change::Mkdir { at, id } => {
                assert_eq!(*id, self.dirs.len(), "model: directory ids in order");
                self.dirs.push(DirInfo {
                    depth: self.dirs[at.dir].depth + 1,
                    live: true,
                });
                self.bind(at, Binding::Dir(*id));
            }
            Change::Rmdir { at } => {
                let Binding::Dir(d) = self.bound(at) else {
                    panic!("model: rmdir of {at:?}, not a directory")
                };
                self.dirs[d].live = false;
                self.bind(at, Binding::Absent);
            }
            Change::Nothing => {}
        }
    }

    fn edit(&mut self, at: &Loc, f: impl FnOnce(&mut Vec<u8>)) {
        let o = self.file_at(at);
        let mut v = self.files[o].data.cur().clone();
        f(&mut v);
        self.files[o].data.push(v);
    }

    fn set_xattr(&mut self, at: &Loc, name: &str, value: Option<Vec<u8>>) {
        let o = self.file_at(at);
        self.files[o]
            .xattrs
            .entry(name.to_string())
            .or_insert_with(|| Hist::new(None))
            .push(value);
    }

    /// `step` returned success: what it made durable is acknowledged.
    pub fn acknowledge(&mut self, step: &Step) {
        let n = self.log.len() - 1;
        let mut synced = false;
        match &step.change {
            // O_SYNC syncs writes; a create that wrote nothing synced nothing.
            Change::Create { data, how, .. }
                if data.is_empty() && matches!(how, WriteSync::OSync | WriteSync::ODsync) => {}
            Change::Create { at, how, .. }
            | Change::Pwrite { at, how, .. }
            | Change::Append { at, how, .. }
            | Change::Replace { at, how, .. } => {
                if let Some(data_only) = how.acks() {
                    self.ack_file(at, data_only, n);
                    synced = true;
                }
            }
            _ => {}
        }
        for s in &step.syncs {
            match s {
                Sync::File { at, data_only } => self.ack_file(at, *data_only, n),
                Sync::Dir(d) => {
                    for (_, h) in self.entries.iter_mut().filter(|(l, _)| l.dir == *d) {
                        h.ack(n);
                    }
                }
            }
            synced = true;
        }
        if synced && self.zfs_rule {
            for h in self.entries.values_mut() {
                h.ack(n);
            }
        }
        self.acks += usize::from(synced);
    }

    /// Steps that acknowledged something.
    pub fn acks(&self) -> usize {
        self.acks
    }

    /// Everything is durable: the check then accepts exactly the current
    /// state (to test the model against a filesystem that did not crash).
    pub fn ack_all(&mut self) {
        let n = self.log.len();
        for h in self.entries.values_mut() {
            h.ack(n);
        }
        for o in 0..self.files.len() {
            self.ack_object(o, false, n);
        }
    }

    fn ack_file(&mut self, at: &Loc, data_only: bool, step: usize) {
        self.ack_object(self.file_at(at), data_only, step);
    }

    fn ack_object(&mut self, o: usize, data_only: bool, step: usize) {
        let f = &mut self.files[o];
        f.data.ack(step);
        if !data_only {
            f.mode.ack(step);
            for h in f.xattrs.values_mut() {
                h.ack(step);
            }
        }
    }

    /// Checks the recovered tree: `own` is the thread's directory,
    /// `shared` the shared one with only this thread's names. Returns
    /// every violation found (empty: the state is one the thread could
    /// have left).
    pub fn check(
        &self,
        own: &BTreeMap<String, Node>,
        shared: &BTreeMap<String, Node>,
    ) -> Vec<String> {
        let mut cx = CheckCx::default();
        self.check_dir(SHARED, shared, "shared", &mut cx);
        let own_path = Self::own_dir_name(self.thread);
        self.check_dir(OWN, own, &own_path, &mut cx);
        cx.failures
    }

    fn check_dir(&self, d: DirId, got: &BTreeMap<String, Node>, path: &str, cx: &mut CheckCx) {
        for (name, node) in got {
            let loc = Loc {
                dir: d,
                name: name.clone(),
            };
            let p = format!("{path}/{name}");
            let Some(h) = self.entries.get(&loc) else {
                cx.fail(format!("{p}: a name the program never made"));
                continue;
            };
            match node {
                Node::Dir(children) => match h.vals.iter().find_map(|b| match b {
                    Binding::Dir(d2) => Some(*d2),
                    _ => None,
                }) {
                    Some(d2) => self.check_dir(d2, children, &p, cx),
                    None => cx.fail(format!("{p}: a directory, was {:?}", h.vals)),
                },
                Node::File { ino, .. } => {
                    let cands: Vec<usize> = h
                        .vals
                        .iter()
                        .filter_map(|b| match b {
                            Binding::File(o) => Some(*o),
                            _ => None,
                        })
                        .collect();
                    let ok: Vec<usize> = cands
                        .iter()
                        .copied()
                        .filter(|&o| self.file_matches(o, node))
                        .collect();
                    match ok.as_slice() {
                        [] => cx.fail(self.explain_file(&p, node, &cands, &h.vals)),
                        [o] => cx.same_file(*o, *ino, &p),
                        _ => {}
                    }
                }
                Node::Symlink(t) => {
                    let found = h
                        .vals
                        .iter()
                        .any(|b| matches!(b, Binding::Symlink(s) if self.symlinks[*s] == *t));
                    if !found {
                        cx.fail(format!("{p}: symlink to {t}, was {:?}", h.vals));
                    }
                }
                Node::Other(what) => cx.fail(format!("{p}: {what}")),
            }
        }
        for (loc, h) in self.entries.range(dir_range(d)) {
            if !h.vals.contains(&Binding::Absent) && !got.contains_key(&loc.name) {
                cx.fail(format!(
                    "{path}/{}: {:?}, {}, but missing",
                    loc.name,
                    h.vals,
                    h.acked()
                ));
            }
        }
    }

    fn file_matches(&self, o: usize, node: &Node) -> bool {
        let Node::File {
            mode, data, xattrs, ..
        } = node
        else {
            return false;
        };
        let f = &self.files[o];
        f.data.vals.contains(data)
            && f.mode.vals.contains(mode)
            && xattrs.iter().all(|(n, v)| {
                f.xattrs
                    .get(n)
                    .is_some_and(|h| h.vals.iter().any(|x| x.as_ref() == Some(v)))
            })
            && f.xattrs
                .iter()
                .all(|(n, h)| xattrs.contains_key(n) || h.vals.contains(&None))
    }

    fn explain_file(&self, p: &str, node: &Node, cands: &[usize], was: &[Binding]) -> String {
        let Node::File {
            mode, data, xattrs, ..
        } = node
        else {
            unreachable!()
        };
        let mut s = format!(
            "{p}: file of {} bytes ({}), mode {mode:o}, xattrs {:?} matches no state \
             the program left there since its last acknowledgement; name was {was:?}",
            data.len(),
            summary(data),
            xattrs.keys().collect::<Vec<_>>()
        );
        for &o in cands {
            let f = &self.files[o];
            let xattrs: Vec<String> = f
                .xattrs
                .iter()
                .map(|(n, h)| {
                    let vals: Vec<String> = h
                        .vals
                        .iter()
                        .map(|v| v.as_ref().map_or("-".into(), |v| summary(v)))
                        .collect();
                    format!("{n} {vals:?} {}", h.acked())
                })
                .collect();
            let modes: Vec<String> = f.mode.vals.iter().map(|m| format!("{m:o}")).collect();
            let data: Vec<String> = f.data.vals.iter().map(|v| summary(v)).collect();
            s += &format!(
                "\n  file#{o}: contents {data:?} {}; modes {modes:?} {}; xattrs {xattrs:?}",
                f.data.acked(),
                f.mode.acked()
            );
            for &i in &f.steps {
                s += &format!("\n    #{i} {}", self.log[i]);
            }
        }
        s
    }

    /// The steps that mention `name` (for a failure report).
    pub fn history_of(&self, name: &str) -> Vec<String> {
        let quoted = format!("\"{name}\"");
        self.log
            .iter()
            .enumerate()
            .filter(|(_, l)| l.contains(&quoted))
            .map(|(i, l)| format!("#{i} {l}"))
            .collect()
    }
}

fn dir_range(d: DirId) -> std::ops::Range<Loc> {
    let lo = Loc {
        dir: d,
        name: String::new(),
    };
    let hi = Loc {
        dir: d + 1,
        name: String::new(),
    };
    lo..hi
}

#[derive(Default)]
struct CheckCx {
    failures: Vec<String>,
    /// Files matched unambiguously: model file -> inode, and back.
    ino_of: HashMap<usize, (u64, String)>,
    file_of: HashMap<u64, (usize, String)>,
}

impl CheckCx {
    fn fail(&mut self, s: String) {
        self.failures.push(s);
    }

    /// Names of one file must be one inode, and one inode one file.
    fn same_file(&mut self, o: usize, ino: u64, p: &str) {
        if let Some((i, q)) = self.ino_of.get(&o) {
            if *i != ino {
                let s = format!("{p} and {q}: links of one file are different inodes");
                self.fail(s);
            }
        }
        if let Some((o2, q)) = self.file_of.get(&ino) {
            if *o2 != o {
                let s = format!("{p} and {q}: two different files share inode {ino}");
                self.fail(s);
            }
        }
        self.ino_of.insert(o, (ino, p.to_string()));
        self.file_of.insert(ino, (o, p.to_string()));
    }
}

/// Length and hash of some bytes, for messages.
pub fn summary(data: &[u8]) -> String {
    format!("{}B#{:08x}", data.len(), fnv1a(data) as u32)
}

pub fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A step as one line, data as length and hash.
fn describe(step: &Step) -> String {
    struct D<'a>(&'a Step);
    impl fmt::Display for D<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            let l = |l: &Loc| format!("{}/\"{}\"", l.dir, l.name);
            match &self.0.change {
                Change::Create {
                    at,
                    mode,
                    data,
                    how,
                } => {
                    write!(f, "create {} {mode:o} {} {how:?}", l(at), summary(data))
                }
                Change::Pwrite { at, off, data, how } => {
                    write!(f, "pwrite {} @{off} {} {how:?}", l(at), summary(data))
                }
                Change::Append { at, data, how } => {
                    write!(f, "append {} {} {how:?}", l(at), summary(data))
                }
                Change::Replace { at, data, how } => {
                    write!(f, "replace {} {} {how:?}", l(at), summary(data))
                }
                Change::Truncate { at, size } => write!(f, "truncate {} {size}", l(at)),
                Change::Chmod { at, mode } => write!(f, "chmod {} {mode:o}", l(at)),
                Change::SetXattr { at, name, value } => {
                    write!(f, "setxattr {} {name} {}", l(at), summary(value))
                }
                Change::RemoveXattr { at, name } => write!(f, "removexattr {} {name}", l(at)),
                Change::Rename { from, to } => write!(f, "rename {} {}", l(from), l(to)),
                Change::Exchange { a, b } => write!(f, "exchange {} {}", l(a), l(b)),
                Change::Link { from, to } => write!(f, "link {} {}", l(from), l(to)),
                Change::Unlink { at } => write!(f, "unlink {}", l(at)),
                Change::Symlink { at, target } => write!(f, "symlink {} -> {target}", l(at)),
                Change::Mkdir { at, id } => write!(f, "mkdir {} (dir {id})", l(at)),
                Change::Rmdir { at } => write!(f, "rmdir {}", l(at)),
                Change::Nothing => write!(f, "-"),
            }?;
            for s in &self.0.syncs {
                match s {
                    Sync::File { at, data_only } => write!(
                        f,
                        "; fsync {}{}",
                        l(at),
                        if *data_only { " (data)" } else { "" }
                    )?,
                    Sync::Dir(d) => write!(f, "; fsync dir {d}")?,
                }
            }
            Ok(())
        }
    }
    D(step).to_string()
}

/// Runs up to `steps` steps of `model` on `fs`: each is recorded as
/// possibly made before it is attempted and acknowledged once it
/// returned. `done` is told after each step. Returns the first error
/// (the crash, or a bug), after which the thread stops.
pub fn run_thread<B: Backend>(
    model: &mut Model,
    fs: &mut B,
    rng: &mut impl RngCore,
    steps: usize,
    mut done: impl FnMut(),
) -> Option<String> {
    for _ in 0..steps {
        let step = model.next_step(rng);
        model.apply(&step);
        if let Err(e) = fs.run(&step) {
            return Some(format!(
                "step #{} ({}): {e}",
                model.steps() - 1,
                describe(&step)
            ));
        }
        model.acknowledge(&step);
        done();
    }
    None
}

/// A recovered tree flattened to one line per path (contents hashed), to
/// compare a tree with itself after a later crash.
pub fn flatten(node: &Node, path: &str, out: &mut BTreeMap<String, String>) {
    let line = match node {
        Node::Dir(children) => {
            for (name, child) in children {
                flatten(child, &format!("{path}/{name}"), out);
            }
            "dir".to_string()
        }
        Node::File {
            ino,
            mode,
            data,
            xattrs,
        } => format!(
            "file ino {ino} mode {mode:o} {} xattrs {:?}",
            summary(data),
            xattrs
                .iter()
                .map(|(n, v)| format!("{n}={}", summary(v)))
                .collect::<Vec<_>>()
        ),
        Node::Symlink(t) => format!("symlink {t}"),
        Node::Other(w) => w.clone(),
    };
    out.insert(path.to_string(), line);
}

/// Lines that differ between two flattened trees.
pub fn diff(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (p, a) in before {
        match after.get(p) {
            Some(b) if b == a => {}
            Some(b) => out.push(format!("{p}: {a} -> {b}")),
            None => out.push(format!("{p}: {a} -> gone")),
        }
    }
    for (p, b) in after {
        if !before.contains_key(p) {
            out.push(format!("{p}: appeared as {b}"));
        }
    }
    out
}

/// Checks a recovered tree holding the directories of `models` (one per
/// thread, thread k's at index k) and the shared one named `shared`.
/// Returns the violations, each with the history of the name involved.
pub fn check_tree(models: &[Model], top: &BTreeMap<String, Node>, shared: &str) -> Vec<String> {
    let mut failures = Vec::new();
    let empty = BTreeMap::new();
    let shared_dir = match top.get(shared) {
        Some(Node::Dir(c)) => c,
        other => {
            failures.push(format!("{shared}: {other:?}, not the shared directory"));
            &empty
        }
    };
    for name in top.keys() {
        let known = name == shared || (0..models.len()).any(|k| *name == Model::own_dir_name(k));
        if !known {
            failures.push(format!("{name}: a name the program never made"));
        }
    }
    for name in shared_dir.keys() {
        if !(0..models.len()).any(|k| name.starts_with(&Model::prefix(k))) {
            failures.push(format!("{shared}/{name}: a name no thread made"));
        }
    }
    for (k, m) in models.iter().enumerate() {
        let own = match top.get(&Model::own_dir_name(k)) {
            Some(Node::Dir(c)) => c,
            other => {
                failures.push(format!("thread {k}'s directory: {other:?}"));
                &empty
            }
        };
        let prefix = Model::prefix(k);
        let mine: BTreeMap<String, Node> = shared_dir
            .iter()
            .filter(|(n, _)| n.starts_with(&prefix))
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        for f in m.check(own, &mine) {
            let name = f.split(':').next().unwrap_or("");
            let last = name.rsplit('/').next().unwrap_or(name);
            let mut s = format!("thread {k}: {f}");
            if !f.contains('\n') {
                for h in m.history_of(last) {
                    s += &format!("\n    {h}");
                }
            }
            failures.push(s);
        }
    }
    failures
}
