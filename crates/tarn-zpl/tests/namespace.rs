//! Directories, rename (plain, NOREPLACE, EXCHANGE, cycles), hard links
//! and link counts, symlinks, special nodes, readdir cookies.

mod common;

use std::collections::BTreeSet;

use common::{root, MemFs};
use tarn_zpl::{Cred, FileType, RenameFlags, Zpl, ZplError};

fn names(fs: &Zpl, dir: u64) -> BTreeSet<Vec<u8>> {
    fs.read_dir_all(dir)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect()
}

fn ino(fs: &Zpl, dir: u64, name: &str) -> u64 {
    fs.lookup(dir, name.as_bytes(), &root()).unwrap().ino
}

#[test]
fn directories() {
    let m = MemFs::new();
    let fs = m.fs();
    let r = fs.root_ino();
    let ra = fs.getattr(r).unwrap();
    assert_eq!(
        (ra.kind, ra.mode & 0o7777, ra.uid, ra.gid),
        (FileType::Directory, 0o755, 0, 0)
    );
    assert_eq!(ra.nlink, 2);
    let d = fs.mkdir(r, b"d", 0o750, &root()).unwrap();
    assert_eq!(d.nlink, 2);
    assert_eq!(fs.getattr(r).unwrap().nlink, 3, "subdir's ..");
    fs.mkdir(d.ino, b"e", 0o755, &root()).unwrap();
    fs.create(d.ino, b"f", 0o644, &root(), true).unwrap();
    assert_eq!(fs.getattr(d.ino).unwrap().nlink, 3);
    assert_eq!(fs.getattr(d.ino).unwrap().size, 4, "entries + 2");
    assert_eq!(fs.mkdir(r, b"d", 0o755, &root()), Err(ZplError::Exists));
    assert_eq!(
        fs.create(r, b"d", 0o644, &root(), false),
        Err(ZplError::IsDir)
    );
    assert_eq!(
        fs.rmdir(r, b"d", &root()).unwrap_err().errno(),
        libc::ENOTEMPTY
    );
    assert_eq!(fs.rmdir(d.ino, b"f", &root()), Err(ZplError::NotDir));
    assert_eq!(fs.unlink(d.ino, b"e", &root()), Err(ZplError::IsDir));
    assert_eq!(fs.lookup(d.ino, b".", &root()).unwrap().ino, d.ino);
    assert_eq!(fs.lookup(d.ino, b"..", &root()).unwrap().ino, r);
    assert_eq!(
        fs.lookup(r, b"..", &root()).unwrap().ino,
        r,
        "root's parent"
    );
    let f = ino(fs, d.ino, "f");
    assert_eq!(fs.lookup(f, b"x", &root()), Err(ZplError::NotDir));
    assert_eq!(fs.mkdir(f, b"x", 0o755, &root()), Err(ZplError::NotDir));
    let long = vec![b'x'; 256];
    assert_eq!(
        fs.create(r, &long, 0o644, &root(), true)
            .unwrap_err()
            .errno(),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        fs.lookup(r, &long, &root()).unwrap_err().errno(),
        libc::ENAMETOOLONG
    );
    fs.create(r, &long[..255], 0o644, &root(), true).unwrap();
    assert_eq!(
        fs.create(r, b"a/b", 0o644, &root(), true)
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    fs.unlink(d.ino, b"f", &root()).unwrap();
    fs.rmdir(d.ino, b"e", &root()).unwrap();
    assert_eq!(fs.getattr(d.ino).unwrap().nlink, 2);
    fs.rmdir(r, b"d", &root()).unwrap();
    assert_eq!(fs.getattr(r).unwrap().nlink, 2);
    assert_eq!(fs.getattr(d.ino), Err(ZplError::NotFound));
    assert_eq!(names(fs, r), [long[..255].to_vec()].into());
    assert_eq!(
        fs.rmdir(r, b"..", &root()).unwrap_err().errno(),
        libc::ENOTEMPTY
    );
    assert_eq!(fs.getattr(0), Err(ZplError::NotFound));
    assert_eq!(
        fs.getattr(1),
        Err(ZplError::NotFound),
        "master node is no inode"
    );
}

#[test]
fn readdir_dots_and_cookies_survive_changes() {
    let m = MemFs::new();
    let fs = m.fs();
    let r = fs.root_ino();
    for i in 0..300 {
        fs.create(r, format!("n{i}").as_bytes(), 0o644, &root(), true)
            .unwrap();
    }
    let mut first = Vec::new();
    fs.readdir(r, 0, |e| {
        first.push(e);
        first.len() < 100
    })
    .unwrap();
    assert_eq!(first[0].name, b".");
    assert_eq!(first[1].name, b"..");
    assert!(first.iter().all(|e| e.next < 1 << 63));
    // Change the directory between batches.
    for i in 0..50 {
        fs.create(r, format!("new{i}").as_bytes(), 0o644, &root(), true)
            .unwrap();
    }
    let gone: Vec<Vec<u8>> = first[2..].iter().take(10).map(|e| e.name.clone()).collect();
    for n in &gone {
        fs.unlink(r, n, &root()).unwrap();
    }
    let unseen = b"n299".to_vec();
    let mut rest = Vec::new();
    fs.readdir(r, first.last().unwrap().next, |e| {
        rest.push(e.name);
        true
    })
    .unwrap();
    let mut seen: Vec<Vec<u8>> = first[2..].iter().map(|e| e.name.clone()).collect();
    seen.extend(rest);
    let set: BTreeSet<_> = seen.iter().cloned().collect();
    assert_eq!(set.len(), seen.len(), "no entry twice");
    for i in 0..300 {
        let n = format!("n{i}").into_bytes();
        assert!(
            set.contains(&n),
            "entry present throughout was returned: {n:?}"
        );
    }
    assert!(set.contains(&unseen));
    // Resuming at "..": the cookie after ".".
    let mut again = Vec::new();
    fs.readdir(r, first[0].next, |e| {
        again.push(e.name);
        again.len() < 2
    })
    .unwrap();
    assert_eq!(again[0], b"..");
}

#[test]
fn hard_links_and_counts() {
    let mut m = MemFs::new();
    let r = m.fs().root_ino();
    let fs = m.fs();
    let d = fs.mkdir(r, b"d", 0o755, &root()).unwrap().ino;
    let f = fs.create(r, b"f", 0o644, &root(), true).unwrap();
    fs.write(f.ino, 0, b"data", &root()).unwrap();
    let l = fs.link(f.ino, d, b"g", &root()).unwrap();
    assert_eq!((l.ino, l.nlink), (f.ino, 2));
    assert_eq!(fs.link(f.ino, d, b"g", &root()), Err(ZplError::Exists));
    assert_eq!(
        fs.link(d, r, b"dl", &root()),
        Err(ZplError::Perm),
        "no dir links"
    );
    fs.unlink(r, b"f", &root()).unwrap();
    let a = fs.lookup(d, b"g", &root()).unwrap();
    assert_eq!(a.nlink, 1);
    let mut buf = [0u8; 4];
    fs.read(a.ino, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"data");
    m.remount();
    let fs = m.fs();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 1);
    let mut s = fs.settings();
    s.link_max = 3;
    fs.set_settings(s).unwrap();
    fs.link(f.ino, d, b"h", &root()).unwrap();
    fs.link(f.ino, d, b"i", &root()).unwrap();
    assert_eq!(
        fs.link(f.ino, d, b"j", &root()).unwrap_err().errno(),
        libc::EMLINK
    );
    fs.mkdir(d, b"s1", 0o755, &root()).unwrap();
    assert_eq!(
        fs.mkdir(d, b"s2", 0o755, &root()).unwrap_err().errno(),
        libc::EMLINK
    );
}

#[test]
fn symlinks_and_special_nodes() {
    let mut m = MemFs::new();
    let r = m.fs().root_ino();
    let fs = m.fs();
    let s = fs.symlink(r, b"s", b"../some/where", &root()).unwrap();
    assert_eq!(
        (s.kind, s.size, s.mode & 0o777),
        (FileType::Symlink, 13, 0o777)
    );
    assert_eq!(fs.readlink(s.ino).unwrap(), b"../some/where");
    let long = vec![b'p'; 4095];
    let sl = fs.symlink(r, b"long", &long, &root()).unwrap();
    assert_eq!(fs.readlink(sl.ino).unwrap(), long);
    assert_eq!(
        fs.symlink(r, b"x", &[b'p'; 4096], &root())
            .unwrap_err()
            .errno(),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        fs.symlink(r, b"x", b"", &root()).unwrap_err().errno(),
        libc::ENOENT
    );
    let fifo = fs
        .mknod(r, b"fifo", libc::S_IFIFO | 0o600, 0, &root())
        .unwrap();
    assert_eq!(fifo.kind, FileType::Fifo);
    let sock = fs
        .mknod(r, b"sock", libc::S_IFSOCK | 0o600, 0, &root())
        .unwrap();
    assert_eq!(sock.kind, FileType::Socket);
    let chr = fs
        .mknod(r, b"null", libc::S_IFCHR | 0o666, 0x0103, &root())
        .unwrap();
    assert_eq!((chr.kind, chr.rdev), (FileType::CharDevice, 0x0103));
    let blk = fs
        .mknod(r, b"sda", libc::S_IFBLK | 0o660, 0x0800, &root())
        .unwrap();
    assert_eq!((blk.kind, blk.rdev), (FileType::BlockDevice, 0x0800));
    let user = Cred::user(1000, 1000);
    fs.setattr(
        r,
        &tarn_zpl::SetAttr {
            mode: Some(0o777),
            ..Default::default()
        },
        &root(),
    )
    .unwrap();
    assert_eq!(
        fs.mknod(r, b"dev2", libc::S_IFCHR | 0o600, 1, &user),
        Err(ZplError::Perm)
    );
    fs.mknod(r, b"fifo2", libc::S_IFIFO | 0o600, 0, &user)
        .unwrap();
    assert_eq!(
        fs.mknod(r, b"dir", libc::S_IFDIR | 0o600, 0, &root())
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    assert_eq!(fs.readlink(fifo.ino).unwrap_err().errno(), libc::EINVAL);
    let mut b = [0u8; 1];
    assert_eq!(
        fs.read(fifo.ino, 0, &mut b).unwrap_err().errno(),
        libc::EINVAL
    );
    let kinds: Vec<_> = fs
        .read_dir_all(r)
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.kind))
        .collect();
    assert!(kinds.contains(&(b"null".to_vec(), FileType::CharDevice)));
    assert!(kinds.contains(&(b"s".to_vec(), FileType::Symlink)));
    m.remount();
    assert_eq!(m.fs().readlink(s.ino).unwrap(), b"../some/where");
    assert_eq!(m.fs().getattr(blk.ino).unwrap().rdev, 0x0800);
}

#[test]
fn rename_plain_and_over_existing() {
    let m = MemFs::new();
    let fs = m.fs();
    let r = fs.root_ino();
    let a = fs.mkdir(r, b"a", 0o755, &root()).unwrap().ino;
    let b = fs.mkdir(r, b"b", 0o755, &root()).unwrap().ino;
    let f = fs.create(a, b"f", 0o644, &root(), true).unwrap().ino;
    let g = fs.create(b, b"g", 0o644, &root(), true).unwrap().ino;
    fs.rename(a, b"f", b, b"g", RenameFlags::NONE, &root())
        .unwrap();
    assert_eq!(ino(fs, b, "g"), f);
    assert_eq!(
        fs.getattr(g),
        Err(ZplError::NotFound),
        "replaced file freed"
    );
    assert!(names(fs, a).is_empty());
    assert_eq!(fs.getattr(a).unwrap().size, 2);
    // Directory moves fix link counts and "..".
    let sub = fs.mkdir(a, b"sub", 0o755, &root()).unwrap().ino;
    assert_eq!(fs.getattr(a).unwrap().nlink, 3);
    fs.rename(a, b"sub", b, b"sub", RenameFlags::NONE, &root())
        .unwrap();
    assert_eq!(fs.getattr(a).unwrap().nlink, 2);
    assert_eq!(fs.getattr(b).unwrap().nlink, 3);
    assert_eq!(fs.lookup(sub, b"..", &root()).unwrap().ino, b);
    // Over an empty directory: fine; over a non-empty one: ENOTEMPTY.
    let empty = fs.mkdir(a, b"empty", 0o755, &root()).unwrap().ino;
    fs.rename(b, b"sub", a, b"empty", RenameFlags::NONE, &root())
        .unwrap();
    assert_eq!(fs.getattr(empty), Err(ZplError::NotFound));
    assert_eq!(ino(fs, a, "empty"), sub);
    assert_eq!(fs.getattr(a).unwrap().nlink, 3);
    assert_eq!(fs.getattr(b).unwrap().nlink, 2);
    fs.create(sub, b"x", 0o644, &root(), true).unwrap();
    fs.mkdir(b, b"d2", 0o755, &root()).unwrap();
    assert_eq!(
        fs.rename(b, b"d2", a, b"empty", RenameFlags::NONE, &root()),
        Err(ZplError::NotEmpty)
    );
    assert_eq!(
        fs.rename(b, b"g", a, b"empty", RenameFlags::NONE, &root()),
        Err(ZplError::IsDir)
    );
    assert_eq!(
        fs.rename(b, b"d2", b, b"g", RenameFlags::NONE, &root()),
        Err(ZplError::NotDir)
    );
    assert_eq!(
        fs.rename(b, b"nope", b, b"z", RenameFlags::NONE, &root()),
        Err(ZplError::NotFound)
    );
    // Same inode under both names: nothing happens.
    fs.link(f, b, b"g2", &root()).unwrap();
    fs.rename(b, b"g", b, b"g2", RenameFlags::NONE, &root())
        .unwrap();
    assert_eq!(fs.getattr(f).unwrap().nlink, 2);
    // Rename within one directory keeps counts.
    fs.rename(b, b"g2", b, b"g3", RenameFlags::NONE, &root())
        .unwrap();
    assert!(names(fs, b).contains(b"g3".as_slice()));
    assert_eq!(fs.getattr(b).unwrap().size, 2 + 3);
}

#[test]
fn rename_noreplace_exchange_and_cycles() {
    let m = MemFs::new();
    let fs = m.fs();
    let r = fs.root_ino();
    let a = fs.mkdir(r, b"a", 0o755, &root()).unwrap().ino;
    let aa = fs.mkdir(a, b"aa", 0o755, &root()).unwrap().ino;
    let f = fs.create(r, b"f", 0o644, &root(), true).unwrap().ino;
    let g = fs.create(r, b"g", 0o644, &root(), true).unwrap().ino;
    assert_eq!(
        fs.rename(r, b"f", r, b"g", RenameFlags::NOREPLACE, &root()),
        Err(ZplError::Exists)
    );
    fs.rename(r, b"f", r, b"h", RenameFlags::NOREPLACE, &root())
        .unwrap();
    assert_eq!(
        fs.rename(r, b"h", r, b"zz", RenameFlags::EXCHANGE, &root()),
        Err(ZplError::NotFound)
    );
    fs.rename(r, b"h", r, b"g", RenameFlags::EXCHANGE, &root())
        .unwrap();
    assert_eq!((ino(fs, r, "h"), ino(fs, r, "g")), (g, f));
    // Exchange a directory and a file across directories.
    fs.rename(r, b"g", aa, b"file", RenameFlags::NONE, &root())
        .unwrap();
    fs.rename(r, b"a", aa, b"file", RenameFlags::EXCHANGE, &root())
        .unwrap_err();
    let d = fs.mkdir(r, b"d", 0o755, &root()).unwrap().ino;
    fs.rename(r, b"d", aa, b"file", RenameFlags::EXCHANGE, &root())
        .unwrap();
    assert_eq!(ino(fs, aa, "file"), d);
    assert_eq!(ino(fs, r, "d"), f);
    assert_eq!(fs.lookup(d, b"..", &root()).unwrap().ino, aa);
    assert_eq!(fs.getattr(aa).unwrap().nlink, 3);
    assert_eq!(fs.getattr(r).unwrap().nlink, 3, "root: . + a");
    // Cycles: a directory into its own subtree, or onto itself.
    assert_eq!(
        fs.rename(r, b"a", aa, b"x", RenameFlags::NONE, &root())
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    assert_eq!(
        fs.rename(r, b"a", d, b"x", RenameFlags::NONE, &root())
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    assert_eq!(
        fs.rename(r, b"a", a, b"x", RenameFlags::NONE, &root())
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    assert_eq!(
        fs.rename(aa, b"file", r, b"a", RenameFlags::EXCHANGE, &root())
            .unwrap_err()
            .errno(),
        libc::EINVAL,
        "exchange that would put a inside itself"
    );
    let both = RenameFlags {
        noreplace: true,
        exchange: true,
    };
    assert_eq!(
        fs.rename(r, b"d", r, b"h", both, &root())
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    assert!(
        RenameFlags::from_bits(libc::RENAME_NOREPLACE)
            .unwrap()
            .noreplace
    );
    assert!(RenameFlags::from_bits(1 << 10).is_err());
    // Moving a directory up out of a deep tree is fine.
    fs.rename(aa, b"file", r, b"up", RenameFlags::NONE, &root())
        .unwrap();
    assert_eq!(fs.lookup(d, b"..", &root()).unwrap().ino, r);
    assert_eq!(fs.getattr(r).unwrap().nlink, 4);
    assert_eq!(fs.getattr(aa).unwrap().nlink, 2);
}

#[test]
fn concurrent_namespace_operations() {
    let m = MemFs::new();
    let fs = m.fs();
    let r = fs.root_ino();
    let shared = fs.mkdir(r, b"shared", 0o755, &root()).unwrap().ino;
    std::thread::scope(|s| {
        for t in 0..8 {
            s.spawn(move || {
                let mine = fs
                    .mkdir(r, format!("t{t}").as_bytes(), 0o755, &root())
                    .unwrap()
                    .ino;
                for i in 0..100 {
                    let n = format!("f{t}-{i}");
                    fs.create(mine, n.as_bytes(), 0o644, &root(), true).unwrap();
                    fs.rename(
                        mine,
                        n.as_bytes(),
                        shared,
                        n.as_bytes(),
                        RenameFlags::NONE,
                        &root(),
                    )
                    .unwrap();
                    if i % 3 == 0 {
                        fs.unlink(shared, n.as_bytes(), &root()).unwrap();
                    }
                    let _ = fs.readdir(shared, 0, |_| true);
                }
            });
        }
    });
    assert_eq!(names(fs, shared).len(), 8 * 66);
    assert_eq!(fs.getattr(shared).unwrap().size, 2 + 8 * 66);
    assert_eq!(fs.getattr(r).unwrap().nlink, 2 + 9);
}
