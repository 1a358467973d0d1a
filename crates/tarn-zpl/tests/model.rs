//! Model-based random test: a seeded sequence of namespace and data
//! operations runs against the filesystem and against a plain in-memory
//! model of a POSIX tree; every result (success or errno) must agree,
//! and the whole tree — names, types, modes, link counts, sizes, bytes,
//! symlink targets — is compared regularly, with remounts (commit +
//! reopen) in the middle. `TARN_SEED=n` replays one seed.

mod common;

use std::collections::{BTreeMap, HashMap};

use common::{root, MemFs};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_zpl::{FileType, RenameFlags, SetAttr, Settings, Zpl, ZplError};

type Id = usize;

#[derive(Clone, Debug)]
enum Kind {
    File(Vec<u8>),
    Dir(BTreeMap<Vec<u8>, Id>),
    Symlink(Vec<u8>),
}

#[derive(Clone, Debug)]
struct Node {
    kind: Kind,
    perm: u32,
    parent: Id,
}

struct Model {
    nodes: HashMap<Id, Node>,
    next: Id,
}

const ROOT: Id = 0;
const NAMES: [&str; 6] = ["a", "b", "c", "dd", "e", "f"];

impl Model {
    fn new() -> Model {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                kind: Kind::Dir(BTreeMap::new()),
                perm: 0o755,
                parent: ROOT,
            },
        );
        Model { nodes, next: 1 }
    }
    fn entries(&self, d: Id) -> &BTreeMap<Vec<u8>, Id> {
        match &self.nodes[&d].kind {
            Kind::Dir(e) => e,
            _ => unreachable!("not a dir"),
        }
    }
    fn entries_mut(&mut self, d: Id) -> &mut BTreeMap<Vec<u8>, Id> {
        match &mut self.nodes.get_mut(&d).unwrap().kind {
            Kind::Dir(e) => e,
            _ => unreachable!("not a dir"),
        }
    }
    fn is_dir(&self, id: Id) -> bool {
        matches!(self.nodes[&id].kind, Kind::Dir(_))
    }
    fn dirs(&self) -> Vec<Id> {
        let mut out = vec![ROOT];
        let mut i = 0;
        while i < out.len() {
            let d = out[i];
            out.extend(self.entries(d).values().filter(|&&c| self.is_dir(c)));
            i += 1;
        }
        out
    }
    fn files(&self) -> Vec<Id> {
        let mut v: Vec<Id> = self
            .dirs()
            .iter()
            .flat_map(|&d| self.entries(d).values().copied().collect::<Vec<_>>())
            .filter(|c| matches!(self.nodes[c].kind, Kind::File(_)))
            .collect();
        v.sort();
        v.dedup();
        v
    }
    fn nlink(&self, id: Id) -> u64 {
        if self.is_dir(id) {
            return 2 + self
                .entries(id)
                .values()
                .filter(|&&c| self.is_dir(c))
                .count() as u64;
        }
        self.dirs()
            .iter()
            .map(|&d| self.entries(d).values().filter(|&&c| c == id).count() as u64)
            .sum()
    }
    /// Is `d` equal to `anc` or beneath it?
    fn within(&self, anc: Id, mut d: Id) -> bool {
        loop {
            if d == anc {
                return true;
            }
            if d == ROOT {
                return false;
            }
            d = self.nodes[&d].parent;
        }
    }
    fn add(&mut self, dir: Id, name: &[u8], kind: Kind, perm: u32) -> Result<Id, i32> {
        if self.entries(dir).contains_key(name) {
            return Err(libc::EEXIST);
        }
        let id = self.next;
        self.next += 1;
        self.nodes.insert(
            id,
            Node {
                kind,
                perm,
                parent: dir,
            },
        );
        self.entries_mut(dir).insert(name.to_vec(), id);
        Ok(id)
    }
    fn unlink(&mut self, dir: Id, name: &[u8]) -> Result<(), i32> {
        let c = *self.entries(dir).get(name).ok_or(libc::ENOENT)?;
        if self.is_dir(c) {
            return Err(libc::EISDIR);
        }
        self.entries_mut(dir).remove(name);
        Ok(())
    }
    fn rmdir(&mut self, dir: Id, name: &[u8]) -> Result<(), i32> {
        let c = *self.entries(dir).get(name).ok_or(libc::ENOENT)?;
        if !self.is_dir(c) {
            return Err(libc::ENOTDIR);
        }
        if !self.entries(c).is_empty() {
            return Err(libc::ENOTEMPTY);
        }
        self.entries_mut(dir).remove(name);
        Ok(())
    }
    fn rename(&mut self, d1: Id, n1: &[u8], d2: Id, n2: &[u8], f: RenameFlags) -> Result<(), i32> {
        let src = *self.entries(d1).get(n1).ok_or(libc::ENOENT)?;
        let dst = self.entries(d2).get(n2).copied();
        match dst {
            None if f.exchange => return Err(libc::ENOENT),
            Some(_) if f.noreplace => return Err(libc::EEXIST),
            Some(d) if d == src => return Ok(()),
            _ => {}
        }
        let moves = d1 != d2;
        if self.is_dir(src) && moves && self.within(src, d2) {
            return Err(libc::EINVAL);
        }
        if let Some(d) = dst {
            if f.exchange && self.is_dir(d) && moves && self.within(d, d1) {
                return Err(libc::EINVAL);
            }
            if !f.exchange {
                match (self.is_dir(src), self.is_dir(d)) {
                    (true, false) => return Err(libc::ENOTDIR),
                    (false, true) => return Err(libc::EISDIR),
                    (true, true) if !self.entries(d).is_empty() => return Err(libc::ENOTEMPTY),
                    _ => {}
                }
            }
        }
        if f.exchange {
            let d = dst.unwrap();
            self.entries_mut(d1).insert(n1.to_vec(), d);
            self.entries_mut(d2).insert(n2.to_vec(), src);
            self.nodes.get_mut(&d).unwrap().parent = d1;
        } else {
            self.entries_mut(d1).remove(n1);
            self.entries_mut(d2).insert(n2.to_vec(), src);
        }
        self.nodes.get_mut(&src).unwrap().parent = d2;
        Ok(())
    }
}

struct Run {
    rng: ChaCha8Rng,
    model: Model,
    fs: MemFs,
    ino: HashMap<Id, u64>,
}

fn errno<T>(r: Result<T, ZplError>) -> Result<T, i32> {
    r.map_err(|e| e.errno())
}

impl Run {
    fn zpl(&self) -> &Zpl {
        self.fs.fs()
    }
    fn name(&mut self) -> Vec<u8> {
        NAMES[self.rng.random_range(0..NAMES.len())]
            .as_bytes()
            .to_vec()
    }
    fn dir(&mut self) -> Id {
        let d = self.model.dirs();
        d[self.rng.random_range(0..d.len())]
    }

    fn step(&mut self, i: usize) {
        let op = self.rng.random_range(0..100);
        let (d, n) = (self.dir(), self.name());
        let rd = self.ino[&d];
        let c = root();
        match op {
            0..=14 => {
                let perm = 0o600 | self.rng.random_range(0..0o100);
                let want = self.model.add(d, &n, Kind::File(Vec::new()), perm);
                let got = errno(self.zpl().create(rd, &n, perm, &c, true));
                self.check_new(i, "create", want, got);
            }
            15..=22 => {
                let want = self.model.add(d, &n, Kind::Dir(BTreeMap::new()), 0o755);
                let got = errno(self.zpl().mkdir(rd, &n, 0o755, &c));
                self.check_new(i, "mkdir", want, got);
            }
            23..=25 => {
                let t = format!("target-{i}").into_bytes();
                let want = self.model.add(d, &n, Kind::Symlink(t.clone()), 0o777);
                let got = errno(self.zpl().symlink(rd, &n, &t, &c));
                self.check_new(i, "symlink", want, got);
            }
            26..=45 => self.write(i),
            46..=50 => self.truncate(i),
            51..=58 => {
                let want = self.model.unlink(d, &n);
                let got = errno(self.zpl().unlink(rd, &n, &c));
                assert_eq!(got, want, "op {i}: unlink");
            }
            59..=64 => {
                let want = self.model.rmdir(d, &n);
                let got = errno(self.zpl().rmdir(rd, &n, &c));
                assert_eq!(got, want, "op {i}: rmdir");
            }
            65..=84 => {
                let (d2, n2) = (self.dir(), self.name());
                let flags = match self.rng.random_range(0..4) {
                    0 => RenameFlags::NOREPLACE,
                    1 => RenameFlags::EXCHANGE,
                    _ => RenameFlags::NONE,
                };
                let want = self.model.rename(d, &n, d2, &n2, flags);
                let got = errno(self.zpl().rename(rd, &n, self.ino[&d2], &n2, flags, &c));
                assert_eq!(
                    got, want,
                    "op {i}: rename {d}/{n:?} -> {d2}/{n2:?} {flags:?}"
                );
            }
            85..=91 => self.link(i, d, &n),
            92..=96 => {
                let files = self.model.files();
                if let Some(&f) = files.get(self.rng.random_range(0..files.len().max(1))) {
                    let perm = self.rng.random_range(0..0o1000);
                    self.model.nodes.get_mut(&f).unwrap().perm = perm;
                    let sa = SetAttr {
                        mode: Some(perm),
                        ..Default::default()
                    };
                    self.zpl().setattr(self.ino[&f], &sa, &c).unwrap();
                }
            }
            _ => {
                self.fs.remount();
            }
        }
    }

    fn check_new(
        &mut self,
        i: usize,
        what: &str,
        want: Result<Id, i32>,
        got: Result<tarn_zpl::Attr, i32>,
    ) {
        match (want, got) {
            (Ok(id), Ok(a)) => {
                self.ino.insert(id, a.ino);
            }
            (Err(w), Err(g)) => assert_eq!(g, w, "op {i}: {what}"),
            (w, g) => panic!("op {i}: {what}: model {w:?}, fs {g:?}"),
        }
    }

    fn write(&mut self, i: usize) {
        let files = self.model.files();
        if files.is_empty() {
            return;
        }
        let f = files[self.rng.random_range(0..files.len())];
        let off = self.rng.random_range(0..40_000usize);
        let len = self.rng.random_range(1..6_000usize);
        let byte = (i % 251) as u8 + 1;
        let data = vec![byte; len];
        if let Kind::File(v) = &mut self.model.nodes.get_mut(&f).unwrap().kind {
            if v.len() < off + len {
                v.resize(off + len, 0);
            }
            v[off..off + len].copy_from_slice(&data);
        }
        let n = self
            .zpl()
            .write(self.ino[&f], off as u64, &data, &root())
            .unwrap();
        assert_eq!(n, len);
    }

    fn truncate(&mut self, _i: usize) {
        let files = self.model.files();
        if files.is_empty() {
            return;
        }
        let f = files[self.rng.random_range(0..files.len())];
        let size = self.rng.random_range(0..50_000usize);
        if let Kind::File(v) = &mut self.model.nodes.get_mut(&f).unwrap().kind {
            v.resize(size, 0);
        }
        let sa = SetAttr {
            size: Some(size as u64),
            ..Default::default()
        };
        self.zpl().setattr(self.ino[&f], &sa, &root()).unwrap();
    }

    fn link(&mut self, i: usize, d: Id, n: &[u8]) {
        let files = self.model.files();
        if files.is_empty() {
            return;
        }
        let f = files[self.rng.random_range(0..files.len())];
        let want = if self.model.entries(d).contains_key(n) {
            Err(libc::EEXIST)
        } else {
            self.model.entries_mut(d).insert(n.to_vec(), f);
            Ok(())
        };
        let got = errno(
            self.zpl()
                .link(self.ino[&f], self.ino[&d], n, &root())
                .map(|_| ()),
        );
        assert_eq!(got, want, "op {i}: link");
    }

    /// Walks both trees and compares everything.
    fn compare(&self, when: usize) {
        let fs = self.zpl();
        for d in self.model.dirs() {
            let rd = self.ino[&d];
            let real: BTreeMap<Vec<u8>, (u64, FileType)> = fs
                .read_dir_all(rd)
                .unwrap()
                .into_iter()
                .map(|e| (e.name, (e.ino, e.kind)))
                .collect();
            let want = self.model.entries(d);
            assert_eq!(
                real.keys().collect::<Vec<_>>(),
                want.keys().collect::<Vec<_>>(),
                "after op {when}: names in dir {d}"
            );
            for (name, &id) in want {
                let (ino, kind) = real[name];
                assert_eq!(ino, self.ino[&id], "after op {when}: {name:?} inode");
                let a = fs.getattr(ino).unwrap();
                assert_eq!(a.kind, kind);
                let node = &self.model.nodes[&id];
                assert_eq!(a.mode & 0o7777, node.perm, "after op {when}: {name:?} mode");
                assert_eq!(
                    a.nlink,
                    self.model.nlink(id),
                    "after op {when}: {name:?} nlink"
                );
                match &node.kind {
                    Kind::File(data) => {
                        assert_eq!(a.size, data.len() as u64, "after op {when}: {name:?} size");
                        let mut buf = vec![0u8; data.len()];
                        fs.read(ino, 0, &mut buf).unwrap();
                        assert!(buf == *data, "after op {when}: {name:?} contents");
                    }
                    Kind::Symlink(t) => assert_eq!(&fs.readlink(ino).unwrap(), t),
                    Kind::Dir(_) => {
                        assert_eq!(fs.lookup(ino, b"..", &root()).unwrap().ino, rd);
                    }
                }
            }
        }
    }
}

fn run(seed: u64, ops: usize) {
    let settings = Settings {
        recordsize: 4096,
        ..Settings::default()
    };
    let fs = MemFs::with_settings(settings);
    let mut ino = HashMap::new();
    ino.insert(ROOT, fs.fs().root_ino());
    let mut r = Run {
        rng: ChaCha8Rng::seed_from_u64(seed),
        model: Model::new(),
        fs,
        ino,
    };
    for i in 0..ops {
        r.step(i);
        if i % 25 == 24 {
            r.compare(i);
        }
    }
    r.fs.remount();
    r.compare(ops);
}

#[test]
fn random_ops_match_the_model() {
    // A replayed seed runs a longer workload than the sweep.
    let ops = if tarn_testkit::replaying() { 1500 } else { 600 };
    tarn_testkit::for_each_seed("model test", 0, 12, |seed| run(seed, ops));
}
