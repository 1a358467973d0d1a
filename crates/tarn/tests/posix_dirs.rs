//! POSIX directories on a real FUSE mount: mkdir/rmdir and their errors,
//! directory link counts, readdir listing exactly what is there (with `.`
//! and `..` and the right d_type), 255- and 256-byte names, a directory of
//! 100,000 entries (created, listed, looked up, renamed and removed, the
//! pool's space back afterwards), and readdir stable while entries come
//! and go.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{CStr, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{check, cpath, errno_of, Mounted, MIB};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Entries from readdir(3), `.` and `..` included: name → d_type.
fn list(dir: &Path) -> Vec<(OsString, u8)> {
    let c = cpath(dir);
    // SAFETY: opendir/readdir/closedir on a stream we own; each entry's
    // name is copied before the next readdir call.
    unsafe {
        let d = libc::opendir(c.as_ptr());
        assert!(
            !d.is_null(),
            "opendir {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        );
        let mut out = Vec::new();
        loop {
            *libc::__errno_location() = 0;
            let e = libc::readdir64(d);
            if e.is_null() {
                let err = *libc::__errno_location();
                assert_eq!(err, 0, "readdir {}", dir.display());
                break;
            }
            let name = CStr::from_ptr((*e).d_name.as_ptr());
            out.push((OsStr::from_bytes(name.to_bytes()).to_owned(), (*e).d_type));
        }
        libc::closedir(d);
        out
    }
}

fn names(dir: &Path) -> BTreeSet<OsString> {
    let mut seen = BTreeSet::new();
    for (n, _) in list(dir) {
        assert!(seen.insert(n.clone()), "{n:?} listed twice");
    }
    seen
}

fn mknod_file(p: &Path) -> std::io::Result<()> {
    // SAFETY: mknod on a NUL-terminated path.
    check(unsafe { libc::mknod(cpath(p).as_ptr(), libc::S_IFREG | 0o644, 0) }).map(|_| ())
}

fn pool() -> Mounted {
    Mounted::new("tank", &["mirror", "a", "b"], 512 * MIB)
}

#[test]
fn mkdir_rmdir_errors_and_link_counts() {
    let m = pool();
    let r = m.root();
    let root_links = std::fs::metadata(&r).unwrap().nlink();
    assert_eq!(root_links, 2, "an empty root");
    let d = r.join("d");
    std::fs::create_dir(&d).unwrap();
    assert_eq!(std::fs::metadata(&d).unwrap().nlink(), 2);
    assert_eq!(std::fs::metadata(&r).unwrap().nlink(), 3, "the child's ..");
    assert_eq!(errno_of(std::fs::create_dir(&d)), libc::EEXIST);
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::write(d.join("f"), b"x").unwrap();
    assert_eq!(std::fs::metadata(&d).unwrap().nlink(), 3);
    assert_eq!(errno_of(std::fs::remove_dir(&d)), libc::ENOTEMPTY);
    assert_eq!(errno_of(std::fs::remove_dir(d.join("f"))), libc::ENOTDIR);
    assert_eq!(errno_of(std::fs::remove_file(d.join("sub"))), libc::EISDIR);
    assert_eq!(errno_of(std::fs::remove_dir(d.join("nope"))), libc::ENOENT);
    assert_eq!(errno_of(std::fs::create_dir(d.join("f/x"))), libc::ENOTDIR);
    assert_eq!(errno_of(std::fs::create_dir(d.join("no/x"))), libc::ENOENT);
    assert_eq!(errno_of(std::fs::remove_dir(d.join("sub/."))), libc::EINVAL);
    assert_eq!(errno_of(std::fs::create_dir(&r)), libc::EEXIST);
    // Only the file is left in the way.
    std::fs::remove_dir(d.join("sub")).unwrap();
    assert_eq!(std::fs::metadata(&d).unwrap().nlink(), 2);
    assert_eq!(errno_of(std::fs::remove_dir(&d)), libc::ENOTEMPTY);
    std::fs::remove_file(d.join("f")).unwrap();
    std::fs::remove_dir(&d).unwrap();
    assert_eq!(errno_of(std::fs::metadata(&d)), libc::ENOENT);
    assert_eq!(std::fs::metadata(&r).unwrap().nlink(), 2);
    // A mode asked for is honoured (less the umask, which is ours).
    // SAFETY: mkdir on a NUL-terminated path.
    check(unsafe { libc::mkdir(cpath(&r.join("m")).as_ptr(), 0o1777) }).unwrap();
    let want = 0o1777 & !common::umask();
    let md = std::fs::metadata(r.join("m")).unwrap();
    assert_eq!(md.mode() & 0o7777, want);
    assert!(md.is_dir());
    m.remount();
    assert_eq!(
        std::fs::metadata(r.join("m")).unwrap().mode() & 0o7777,
        want
    );
    assert_eq!(std::fs::metadata(&r).unwrap().nlink(), 3);
}

#[test]
fn readdir_lists_exactly_with_types() {
    let m = pool();
    let d = m.root().join("d");
    std::fs::create_dir(&d).unwrap();
    let long = "L".repeat(255);
    let mut want: BTreeMap<OsString, u8> = BTreeMap::new();
    for (i, n) in ["a", "B", "with space", "ünï©ødé", "-dash", ".hidden", &long]
        .iter()
        .enumerate()
    {
        let p = d.join(n);
        let t = match i % 3 {
            0 => {
                std::fs::write(&p, n.as_bytes()).unwrap();
                libc::DT_REG
            }
            1 => {
                std::fs::create_dir(&p).unwrap();
                libc::DT_DIR
            }
            _ => {
                std::os::unix::fs::symlink("target", &p).unwrap();
                libc::DT_LNK
            }
        };
        want.insert(OsString::from(n), t);
    }
    want.insert(".".into(), libc::DT_DIR);
    want.insert("..".into(), libc::DT_DIR);
    let check_listing = |want: &BTreeMap<OsString, u8>, when: &str| {
        let got = list(&d);
        assert_eq!(got.len(), want.len(), "{when}: {got:?}");
        let got: BTreeMap<OsString, u8> = got.into_iter().collect();
        // Some file systems say DT_UNKNOWN; tarn knows every type.
        assert_eq!(&got, want, "{when}");
    };
    check_listing(&want, "fresh");
    std::fs::remove_file(d.join("a")).unwrap();
    want.remove(OsStr::new("a"));
    check_listing(&want, "after unlink");
    m.remount();
    check_listing(&want, "after remount");
    let empty = m.root().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e: BTreeSet<OsString> = names(&empty);
    assert_eq!(e, [".", ".."].iter().map(OsString::from).collect());
}

#[test]
fn names_longer_than_255_bytes_are_refused() {
    let m = pool();
    let r = m.root();
    let ok = r.join("n".repeat(255));
    let long = r.join("n".repeat(256));
    std::fs::write(&ok, b"fine").unwrap();
    assert_eq!(std::fs::read(&ok).unwrap(), b"fine");
    let too_long = libc::ENAMETOOLONG;
    assert_eq!(errno_of(std::fs::write(&long, b"x")), too_long);
    assert_eq!(errno_of(std::fs::create_dir(&long)), too_long);
    assert_eq!(errno_of(std::fs::metadata(&long)), too_long);
    assert_eq!(errno_of(mknod_file(&long)), too_long);
    assert_eq!(errno_of(std::os::unix::fs::symlink("t", &long)), too_long);
    assert_eq!(errno_of(std::fs::hard_link(&ok, &long)), too_long);
    assert_eq!(errno_of(std::fs::rename(&ok, &long)), too_long);
    // Multi-byte characters count in bytes: 128 two-byte chars = 256.
    assert_eq!(
        errno_of(std::fs::write(r.join("é".repeat(128)), b"x")),
        too_long
    );
    std::fs::write(r.join(format!("{}x", "é".repeat(127))), b"x").unwrap();
    let n = names(&r);
    assert_eq!(n.len(), 4, "{n:?}");
}

const BIG_DIR_ENTRIES: u64 = 100_000;
const BIG_DIR_TIME_MAX: Duration = Duration::from_secs(150);
/// Metadata a directory of `BIG_DIR_ENTRIES` files leaves grown after
/// all of it is removed (see `directory_of_100k_entries`).
const BIG_DIR_METADATA_KEPT: u64 = 64 << 10;

#[test]
fn directory_of_100k_entries() {
    let m = pool();
    let used = |m: &Mounted| -> u64 {
        m.env.ok(&["zpool", "sync", "tank"]);
        m.env.get("used", "tank").parse().unwrap()
    };
    let used_before = used(&m);
    let d = Arc::new(m.root().join("big"));
    std::fs::create_dir(&*d).unwrap();
    let start = Instant::now();
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let d = d.clone();
            std::thread::spawn(move || {
                for i in (t..BIG_DIR_ENTRIES).step_by(2) {
                    mknod_file(&d.join(format!("entry-{i:06}"))).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let created = start.elapsed();
    let listing = names(&d);
    let listed = start.elapsed() - created;
    assert_eq!(listing.len() as u64, BIG_DIR_ENTRIES + 2);
    for i in 0..BIG_DIR_ENTRIES {
        assert!(
            listing.contains(OsStr::new(&format!("entry-{i:06}"))),
            "entry {i} missing"
        );
    }
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for _ in 0..2000 {
        let i = rng.random_range(0..BIG_DIR_ENTRIES);
        let md = std::fs::symlink_metadata(d.join(format!("entry-{i:06}"))).unwrap();
        assert!(md.is_file());
        let j = rng.random_range(BIG_DIR_ENTRIES..2 * BIG_DIR_ENTRIES);
        let miss = std::fs::symlink_metadata(d.join(format!("entry-{j:06}")));
        assert_eq!(errno_of(miss), libc::ENOENT);
    }
    let total = start.elapsed();
    eprintln!("100k entries: created in {created:?}, listed in {listed:?}, total {total:?}");
    assert!(total < BIG_DIR_TIME_MAX, "too slow: {total:?}");
    assert_eq!(errno_of(std::fs::remove_dir(&*d)), libc::ENOTEMPTY);
    m.remount();
    assert_eq!(names(&d).len() as u64, BIG_DIR_ENTRIES + 2);

    // Every entry renamed within the directory, then every one removed.
    for i in 0..BIG_DIR_ENTRIES {
        let (from, to) = (format!("entry-{i:06}"), format!("moved-{i:06}"));
        std::fs::rename(d.join(&from), d.join(&to))
            .unwrap_or_else(|e| panic!("rename {from}: {e}"));
    }
    let listing = names(&d);
    assert_eq!(listing.len() as u64, BIG_DIR_ENTRIES + 2);
    for i in 0..BIG_DIR_ENTRIES {
        assert!(listing.contains(OsStr::new(&format!("moved-{i:06}"))));
    }
    for i in (0..BIG_DIR_ENTRIES).rev() {
        std::fs::remove_file(d.join(format!("moved-{i:06}"))).unwrap();
    }
    assert_eq!(names(&d).len(), 2, "only . and .. left");
    std::fs::remove_dir(&*d).unwrap();
    // The delete queue frees the files' objects in the background; once
    // it has, the pool holds what it held before the directory, but for
    // metadata that grew on the way and, as in OpenZFS, does not shrink:
    // the delete queue's ZAP and the dnode blocks of the object numbers
    // (16 KiB after 100,000 files, 8 KiB after 100: a fixed cost, not one
    // per file).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = used(&m);
        if now <= used_before + BIG_DIR_METADATA_KEPT {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the pool still uses {now} bytes, {used_before} before the directory"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn readdir_is_stable_while_entries_change() {
    let m = pool();
    let d = m.root().join("churn");
    std::fs::create_dir(&d).unwrap();
    const STABLE: usize = 1500;
    for i in 0..STABLE {
        mknod_file(&d.join(format!("stable-{i}"))).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let churned = Arc::new(AtomicU64::new(0));
    let churner = {
        let (d, stop, churned) = (d.clone(), stop.clone(), churned.clone());
        std::thread::spawn(move || {
            let mut rng = ChaCha8Rng::seed_from_u64(11);
            let mut live: Vec<u64> = Vec::new();
            let mut next = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if live.len() < 500 && rng.random_bool(0.6) || live.is_empty() {
                    mknod_file(&d.join(format!("tmp-{next}"))).unwrap();
                    live.push(next);
                    next += 1;
                } else {
                    let k = live.swap_remove(rng.random_range(0..live.len()));
                    std::fs::remove_file(d.join(format!("tmp-{k}"))).unwrap();
                }
                churned.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let mut listings = 0;
    // Keep listing until the churn has really overlapped many listings.
    while listings < 5 || churned.load(Ordering::Relaxed) < 2000 {
        assert!(listings < 10_000, "the churn thread makes no progress");
        let mut seen: HashMap<OsString, u32> = HashMap::new();
        for (n, _) in list(&d) {
            *seen.entry(n).or_default() += 1;
        }
        for (n, c) in &seen {
            assert_eq!(*c, 1, "listing {listings}: {n:?} seen {c} times");
        }
        for i in 0..STABLE {
            let n = OsString::from(format!("stable-{i}"));
            assert!(seen.contains_key(&n), "listing {listings}: {n:?} missing");
        }
        listings += 1;
    }
    stop.store(true, Ordering::Relaxed);
    churner.join().unwrap();
    eprintln!(
        "{listings} listings during {} changes",
        churned.load(Ordering::Relaxed)
    );
}
