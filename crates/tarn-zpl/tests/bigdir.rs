//! A directory of 200,000 entries stays fast: creates, lookups, a full
//! readdir, removes, and a remount in between (the fat ZAP's hashing).

mod common;

use std::collections::HashSet;
use std::time::Instant;

use common::{root, MemFs};

const ENTRIES: usize = 200_000;

#[test]
fn two_hundred_thousand_entries() {
    let mut m = MemFs::new();
    let r = m.fs().root_ino();
    let d = m.fs().mkdir(r, b"big", 0o755, &root()).unwrap().ino;
    let start = Instant::now();
    for i in 0..ENTRIES {
        let name = format!("file-{i:07}-with-a-longish-name");
        m.fs()
            .create(d, name.as_bytes(), 0o644, &root(), true)
            .unwrap();
    }
    let created = start.elapsed();
    m.remount();
    let fs = m.fs();
    let t = Instant::now();
    for i in (0..ENTRIES).step_by(97) {
        let name = format!("file-{i:07}-with-a-longish-name");
        fs.lookup(d, name.as_bytes(), &root()).unwrap();
    }
    let looked = t.elapsed();
    let t = Instant::now();
    let mut seen = HashSet::new();
    let mut cookie = 0;
    loop {
        let mut batch = 0;
        fs.readdir(d, cookie, |e| {
            cookie = e.next;
            seen.insert(e.name);
            batch += 1;
            batch < 1000
        })
        .unwrap();
        if batch < 1000 {
            break;
        }
    }
    assert_eq!(seen.len(), ENTRIES + 2);
    let listed = t.elapsed();
    let t = Instant::now();
    for i in (0..ENTRIES).step_by(10) {
        let name = format!("file-{i:07}-with-a-longish-name");
        fs.unlink(d, name.as_bytes(), &root()).unwrap();
    }
    assert_eq!(
        fs.getattr(d).unwrap().size,
        (ENTRIES - ENTRIES / 10 + 2) as u64
    );
    let removed = t.elapsed();
    eprintln!("create {created:?} lookup {looked:?} readdir {listed:?} unlink {removed:?}");
    assert!(created.as_secs() < 60, "creates took {created:?}");
}
