//! Snapshots at the dataset layer: contents frozen at one txg, OpenZFS's
//! space rules (used, usedbysnapshots, written), destroys that free
//! exactly what only they held, and a space check after every step.

mod common;

use std::sync::Arc;

use common::{devices, mirror, reimport};
use tarn_dmu::Objset;
use tarn_dsl::Pool;
use tarn_format::ObjType;

const REC: usize = 128 << 10;

fn s(a: &str, b: &str) -> (String, String) {
    (a.to_string(), b.to_string())
}

fn noise(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2654435761) >> 13) as u8)
        .collect()
}

fn pool() -> (Vec<Arc<dyn tarn_vdev::BlockDevice>>, Arc<Pool>) {
    let devs = devices(2, 512 << 20);
    let pool = Pool::create("tank", mirror(&devs), &[], &[s("compression", "off")]).unwrap();
    pool.dataset_create("tank/fs", &[]).unwrap();
    (devs, pool)
}

fn exact(pool: &Pool) {
    let check = pool.space_check().unwrap();
    assert!(check.is_exact(), "space check: {check:?}");
}

fn read_all(os: &Objset, obj: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    os.read(obj, 0, &mut buf).unwrap();
    buf
}

fn num(pool: &Pool, name: &str, prop: &str) -> u64 {
    pool.dataset_prop(name, prop)
        .unwrap()
        .value
        .parse()
        .unwrap()
}

#[test]
fn a_snapshot_keeps_its_contents_and_its_space_until_destroyed() {
    let (devs, pool) = pool();
    exact(&pool);
    let os = pool.dataset_objset("tank/fs").unwrap();
    let obj = os.object_create(ObjType::PlainFile, REC as u32, 0).unwrap();
    let v1 = noise(1, 16 * REC);
    os.write(obj, 0, &v1).unwrap();
    // Not synced yet: the snapshot must still contain it.
    pool.snapshot(&["tank/fs@one".into()], &[]).unwrap();
    exact(&pool);
    let before = pool.dataset_space("tank/fs").unwrap();
    assert_eq!(before.usedbysnapshots, 0);
    assert_eq!(num(&pool, "tank/fs@one", "used"), 0);
    assert_eq!(num(&pool, "tank/fs", "written"), 0);

    // Overwrite the first half: it stays held by the snapshot.
    let v2 = noise(2, 8 * REC);
    os.write(obj, 0, &v2).unwrap();
    pool.sync().unwrap();
    let half = num(&pool, "tank/fs@one", "referenced") / 2;
    let after = pool.dataset_space("tank/fs").unwrap();
    let near = |a: u64, b: u64| a.abs_diff(b) <= b / 8 + (64 << 10);
    assert!(near(after.usedbysnapshots, half), "{after:?} half {half}");
    assert!(near(num(&pool, "tank/fs@one", "used"), half));
    assert!(near(after.written, half), "written {}", after.written);
    assert_eq!(after.used, after.referenced + after.usedbysnapshots);
    exact(&pool);

    // The snapshot still reads the old bytes; the head the new ones.
    let snap = pool.snapshot_objset("tank/fs@one").unwrap();
    assert_eq!(read_all(&snap, obj, 16 * REC), v1);
    assert_eq!(&read_all(&os, obj, 16 * REC)[..8 * REC], &v2[..]);

    // A second snapshot, more changes, then destroy the first: only what
    // it alone held is freed.
    pool.snapshot(&["tank/fs@two".into()], &[]).unwrap();
    os.write(obj, 8 * REC as u64, &noise(3, 8 * REC)).unwrap();
    pool.sync().unwrap();
    // The second half, born before @one, is held by both: neither holds
    // it alone.
    let two_used = num(&pool, "tank/fs@two", "used");
    assert!(two_used < 2 * REC as u64, "two used {two_used}");
    let would = pool
        .snapshots_destroy_space(&["tank/fs@one".into()])
        .unwrap();
    let freed = pool
        .snapshots_destroy(&["tank/fs@one".into()], false)
        .unwrap();
    assert_eq!(would, freed);
    assert!(near(freed, half), "freed {freed}");
    exact(&pool);
    assert_eq!(pool.snapshots("tank/fs"), vec!["tank/fs@two"]);
    // With @one gone, @two alone holds the old second half.
    let two_used = num(&pool, "tank/fs@two", "used");
    assert!(near(two_used, half), "two used {two_used}");
    let snap = pool.snapshot_objset("tank/fs@two").unwrap();
    let mut want = v2.clone();
    want.extend_from_slice(&v1[8 * REC..]);
    assert_eq!(read_all(&snap, obj, 16 * REC), want);

    // Survives export and import with its guid.
    let guid = num(&pool, "tank/fs@two", "guid");
    pool.export().unwrap();
    drop(pool);
    let pool = reimport(&devs);
    assert_eq!(pool.snapshots("tank/fs"), vec!["tank/fs@two"]);
    assert_eq!(num(&pool, "tank/fs@two", "guid"), guid);
    exact(&pool);
    let snap = pool.snapshot_objset("tank/fs@two").unwrap();
    assert_eq!(read_all(&snap, obj, 16 * REC), want);

    // The last snapshot goes: the dataset's space is its own again.
    pool.snapshots_destroy(&["tank/fs@two".into()], false)
        .unwrap();
    exact(&pool);
    let end = pool.dataset_space("tank/fs").unwrap();
    assert_eq!(end.usedbysnapshots, 0);
    assert_eq!(end.used, end.referenced);
}

#[test]
fn snapshots_of_several_datasets_share_one_txg_and_names_are_checked() {
    let (_devs, pool) = pool();
    pool.dataset_create("tank/fs/child", &[]).unwrap();
    pool.snapshot(
        &["tank/fs@a".into(), "tank/fs/child@a".into()],
        &[s("com.example:why", "test")],
    )
    .unwrap();
    assert_eq!(
        num(&pool, "tank/fs@a", "createtxg"),
        num(&pool, "tank/fs/child@a", "createtxg")
    );
    assert_ne!(
        num(&pool, "tank/fs@a", "guid"),
        num(&pool, "tank/fs/child@a", "guid")
    );
    let p = pool.dataset_prop("tank/fs@a", "com.example:why").unwrap();
    assert_eq!(p.value, "test");
    assert!(pool.snapshot(&["tank/fs@a".into()], &[]).is_err(), "exists");
    assert!(
        pool.snapshot(&["tank/fs@b".into(), "tank/fs@c".into()], &[])
            .is_err(),
        "two of one dataset"
    );
    assert!(pool.snapshot(&["tank/none@b".into()], &[]).is_err());
    assert!(
        pool.snapshot(&["tank/fs@b".into()], &[s("compression", "off")])
            .is_err(),
        "native properties cannot be set on snapshots"
    );
    assert!(pool.snapshots("tank/fs").len() == 1, "nothing changed");
    assert!(
        pool.dataset_destroy("tank/fs/child").is_err(),
        "has a snapshot"
    );
    exact(&pool);
}

#[test]
fn destroying_a_middle_snapshot_keeps_its_neighbours_exact() {
    let (_devs, pool) = pool();
    let os = pool.dataset_objset("tank/fs").unwrap();
    let obj = os.object_create(ObjType::PlainFile, REC as u32, 0).unwrap();
    let mut versions = Vec::new();
    let mut file = noise(0, 8 * REC);
    os.write(obj, 0, &file).unwrap();
    for (k, name) in ["a", "b", "c", "d"].iter().enumerate() {
        pool.snapshot(&[format!("tank/fs@{name}")], &[]).unwrap();
        versions.push(file.clone());
        // Rewrite two records, a different pair each time.
        let at = (k * 2 % 8) * REC;
        let fresh = noise(10 + k as u32, 2 * REC);
        os.write(obj, at as u64, &fresh).unwrap();
        file[at..at + 2 * REC].copy_from_slice(&fresh);
        pool.sync().unwrap();
    }
    exact(&pool);
    pool.snapshots_destroy(&["tank/fs@b".into(), "tank/fs@c".into()], false)
        .unwrap();
    exact(&pool);
    for (name, want) in [("a", &versions[0]), ("d", &versions[3])] {
        let snap = pool.snapshot_objset(&format!("tank/fs@{name}")).unwrap();
        assert_eq!(&read_all(&snap, obj, 8 * REC), want, "@{name}");
    }
    let written_a = pool.written_since("tank/fs", "a").unwrap();
    assert!(written_a >= 6 * REC as u64, "written@a {written_a}");
    pool.snapshots_destroy(&["tank/fs@a".into(), "tank/fs@d".into()], false)
        .unwrap();
    exact(&pool);
    assert_eq!(pool.freeing(), 0);
}

#[test]
fn rollback_returns_the_dataset_to_its_newest_snapshot() {
    let (devs, pool) = pool();
    let os = pool.dataset_objset("tank/fs").unwrap();
    let obj = os.object_create(ObjType::PlainFile, REC as u32, 0).unwrap();
    let v1 = noise(1, 8 * REC);
    os.write(obj, 0, &v1).unwrap();
    pool.snapshot(&["tank/fs@a".into()], &[]).unwrap();
    os.write(obj, 0, &noise(2, 8 * REC)).unwrap();
    let extra = os.object_create(ObjType::PlainFile, REC as u32, 0).unwrap();
    os.write(extra, 0, &noise(3, 4 * REC)).unwrap();
    pool.sync().unwrap();
    exact(&pool);
    let before = pool.dataset_space("tank/fs").unwrap();
    let freed = pool.rollback("tank/fs@a").unwrap();
    assert!(freed >= 12 * REC as u64, "freed {freed}");
    exact(&pool);
    let os = pool.dataset_objset("tank/fs").unwrap();
    assert_eq!(read_all(&os, obj, 8 * REC), v1);
    assert!(os.object_info(extra).is_err(), "created after the snapshot");
    let after = pool.dataset_space("tank/fs").unwrap();
    assert_eq!(after.usedbysnapshots, 0);
    assert_eq!(after.written, 0);
    assert!(after.used < before.used);
    // Writes go on after the rollback, and survive an import.
    os.write(obj, 0, &noise(4, REC)).unwrap();
    pool.sync().unwrap();
    exact(&pool);
    pool.export().unwrap();
    drop(pool);
    let pool = reimport(&devs);
    let os = pool.dataset_objset("tank/fs").unwrap();
    assert_eq!(&read_all(&os, obj, REC)[..], &noise(4, REC)[..]);
    exact(&pool);
    // Only to the newest snapshot.
    pool.snapshot(&["tank/fs@b".into()], &[]).unwrap();
    assert!(pool.rollback("tank/fs@a").is_err());
}

#[test]
fn clones_share_their_origin_and_promotion_swaps_the_roles() {
    let (devs, pool) = pool();
    let os = pool.dataset_objset("tank/fs").unwrap();
    let obj = os.object_create(ObjType::PlainFile, REC as u32, 0).unwrap();
    let v1 = noise(1, 8 * REC);
    os.write(obj, 0, &v1).unwrap();
    pool.snapshot(&["tank/fs@base".into()], &[]).unwrap();
    pool.snapshot(&["tank/fs@golden".into()], &[]).unwrap();
    pool.clone_create("tank/fs@golden", "tank/vm1", &[])
        .unwrap();
    exact(&pool);
    // The clone reads the origin's bytes and takes no space of its own.
    let c = pool.dataset_objset("tank/vm1").unwrap();
    assert_eq!(read_all(&c, obj, 8 * REC), v1);
    let cs = pool.dataset_space("tank/vm1").unwrap();
    assert!(cs.used < 64 << 10, "clone used {}", cs.used);
    assert_eq!(
        pool.dataset_prop("tank/vm1", "origin").unwrap().value,
        "tank/fs@golden"
    );
    assert_eq!(
        pool.dataset_prop("tank/fs@golden", "clones").unwrap().value,
        "tank/vm1"
    );
    // Writing the clone charges the clone only; the origin is untouched.
    c.write(obj, 0, &noise(2, 4 * REC)).unwrap();
    pool.sync().unwrap();
    let cs = pool.dataset_space("tank/vm1").unwrap();
    assert!(
        cs.used >= 4 * REC as u64 && cs.used < 6 * REC as u64,
        "{cs:?}"
    );
    assert_eq!(
        read_all(
            &pool.snapshot_objset("tank/fs@golden").unwrap(),
            obj,
            8 * REC
        ),
        v1
    );
    exact(&pool);
    // The origin cannot go while the clone exists.
    assert!(pool
        .snapshots_destroy(&["tank/fs@golden".into()], false)
        .is_err());
    // Promote: the snapshots move to the clone, fs becomes the clone.
    pool.promote("tank/vm1").unwrap();
    exact(&pool);
    assert_eq!(
        pool.snapshots("tank/vm1"),
        vec!["tank/vm1@base", "tank/vm1@golden"]
    );
    assert!(pool.snapshots("tank/fs").is_empty());
    assert_eq!(
        pool.dataset_prop("tank/fs", "origin").unwrap().value,
        "tank/vm1@golden"
    );
    assert_eq!(pool.dataset_prop("tank/vm1", "origin").unwrap().value, "-");
    pool.export().unwrap();
    drop(pool);
    let pool = reimport(&devs);
    exact(&pool);
    // Now the old filesystem is the clone: it can be destroyed, and the
    // promoted one keeps every byte.
    pool.dataset_destroy("tank/fs").unwrap();
    exact(&pool);
    let c = pool.dataset_objset("tank/vm1").unwrap();
    assert_eq!(&read_all(&c, obj, 8 * REC)[4 * REC..], &v1[4 * REC..]);
    pool.snapshots_destroy(&["tank/vm1@base".into(), "tank/vm1@golden".into()], false)
        .unwrap();
    exact(&pool);
}

#[test]
fn holds_bookmarks_and_renames() {
    let (devs, pool) = pool();
    pool.dataset_create("tank/fs/kid", &[]).unwrap();
    pool.snapshot(&["tank/fs@a".into()], &[]).unwrap();
    let info = pool.snapshot_info("tank/fs@a").unwrap();
    pool.hold(&["tank/fs@a".into()], "keep").unwrap();
    assert!(pool.hold(&["tank/fs@a".into()], "keep").is_err(), "twice");
    assert!(pool
        .snapshots_destroy(&["tank/fs@a".into()], false)
        .is_err());
    // -d: marked, and gone with the last hold.
    pool.snapshots_destroy(&["tank/fs@a".into()], true).unwrap();
    assert_eq!(
        pool.dataset_prop("tank/fs@a", "defer_destroy")
            .unwrap()
            .value,
        "on"
    );
    assert_eq!(
        pool.dataset_prop("tank/fs@a", "userrefs").unwrap().value,
        "1"
    );
    pool.bookmark("tank/fs@a", "tank/fs#mark").unwrap();
    assert!(pool.bookmark("tank/fs@a", "tank/fs#mark").is_err());
    assert!(pool.release(&["tank/fs@a".into()], "nope").is_err());
    pool.release(&["tank/fs@a".into()], "keep").unwrap();
    assert!(!pool.snapshot_exists("tank/fs@a"), "deferred destroy done");
    exact(&pool);
    // The bookmark outlives its snapshot, with its guid and txg.
    let b = &pool.bookmarks("tank/fs").unwrap()[0];
    assert_eq!((b.guid, b.createtxg), (info.guid, info.createtxg));
    pool.bookmark("tank/fs#mark", "tank/fs#copy").unwrap();
    assert_eq!(pool.bookmarks("tank/fs").unwrap().len(), 2);
    pool.bookmark_destroy("tank/fs#copy").unwrap();
    // Renames: a snapshot, then a dataset with its child and snapshots.
    pool.snapshot(&["tank/fs@b".into()], &[]).unwrap();
    pool.rename_snapshot("tank/fs@b", "c").unwrap();
    assert_eq!(pool.snapshots("tank/fs"), vec!["tank/fs@c"]);
    pool.dataset_create("tank/other", &[]).unwrap();
    pool.rename_dataset("tank/fs", "tank/other/moved").unwrap();
    assert!(pool.dataset_exists("tank/other/moved/kid"));
    assert_eq!(
        pool.snapshots("tank/other/moved"),
        vec!["tank/other/moved@c"]
    );
    assert!(pool
        .rename_dataset("tank/other", "tank/other/moved/x")
        .is_err());
    pool.export().unwrap();
    drop(pool);
    let pool = reimport(&devs);
    assert!(pool.dataset_exists("tank/other/moved/kid"));
    assert_eq!(pool.bookmarks("tank/other/moved").unwrap().len(), 1);
    exact(&pool);
}
