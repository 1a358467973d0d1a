//! The dataset layer end to end on in-memory devices: create a pool,
//! build a dataset tree with properties, write data, export, import, and
//! check that everything came back and the space accounting adds up.

mod common;

use common::{devices, mirror, reimport};
use tarn_dsl::{Pool, PropSource};
use tarn_format::ObjType;

fn s(a: &str, b: &str) -> (String, String) {
    (a.to_string(), b.to_string())
}

#[test]
fn datasets_props_and_space_survive_export_import() {
    let devs = devices(2, 256 << 20);
    let pool = Pool::create(
        "tank",
        mirror(&devs),
        &[s("comment", "hello")],
        &[s("compression", "off")],
    )
    .unwrap();
    pool.dataset_create("tank/a", &[s("recordsize", "1048576")])
        .unwrap();
    pool.dataset_create("tank/a/b", &[]).unwrap();
    pool.dataset_create("tank/c", &[s("quota", "104857600")])
        .unwrap();
    assert!(
        pool.dataset_create("tank/x/y", &[]).is_err(),
        "missing parent"
    );
    assert!(pool.dataset_create("tank/a", &[]).is_err(), "exists");
    assert_eq!(
        pool.datasets(),
        vec!["tank", "tank/a", "tank/a/b", "tank/c"]
    );

    // Inheritance and sources.
    let rs = pool.dataset_prop("tank/a/b", "recordsize").unwrap();
    assert_eq!(rs.value, "1048576");
    assert_eq!(rs.source, PropSource::Inherited("tank/a".into()));
    let comp = pool.dataset_prop("tank/a/b", "compression").unwrap();
    assert_eq!(
        (comp.value.as_str(), comp.source),
        ("off", PropSource::Inherited("tank".into()))
    );
    let mp = pool.dataset_prop("tank/a/b", "mountpoint").unwrap();
    assert_eq!(
        (mp.value.as_str(), mp.source),
        ("/tank/a/b", PropSource::Default)
    );
    pool.dataset_set("tank/a", "mountpoint", "/srv/a").unwrap();
    let mp = pool.dataset_prop("tank/a/b", "mountpoint").unwrap();
    assert_eq!(
        (mp.value.as_str(), mp.source),
        ("/srv/a/b", PropSource::Inherited("tank/a".into()))
    );
    let q = pool.dataset_prop("tank/a", "quota").unwrap();
    assert_eq!((q.value.as_str(), q.source), ("0", PropSource::Default));
    pool.dataset_inherit("tank/a", "recordsize").unwrap();
    assert_eq!(
        pool.dataset_prop("tank/a/b", "recordsize").unwrap().value,
        "131072"
    );

    // Write 4 MiB of incompressible data into tank/a/b.
    let os = pool.dataset_objset("tank/a/b").unwrap();
    let obj = os.object_create(ObjType::PlainFile, 128 << 10, 0).unwrap();
    let data: Vec<u8> = (0..4u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    os.write(obj, 0, &data).unwrap();
    pool.sync().unwrap();
    let b = pool.dataset_space("tank/a/b").unwrap();
    assert!(b.referenced >= 4 << 20, "referenced {}", b.referenced);
    let a = pool.dataset_space("tank/a").unwrap();
    assert_eq!(a.usedbychildren, b.used);
    let root = pool.dataset_space("tank").unwrap();
    assert_eq!(root.used, root.referenced + root.usedbychildren);
    assert!(root.usedbychildren >= a.used);
    let c = pool.dataset_space("tank/c").unwrap();
    assert!(
        c.avail <= 100 << 20 && c.avail > 99 << 20,
        "quota bounds avail"
    );
    let ps = pool.pool_space();
    assert!(ps.alloc >= 4 << 20 && ps.avail < ps.dspace);
    pool.log_history("zfs create tank/a");
    pool.sync().unwrap();
    pool.export().unwrap();
    drop(pool);

    let pool = reimport(&devs);
    assert_eq!(
        pool.datasets(),
        vec!["tank", "tank/a", "tank/a/b", "tank/c"]
    );
    assert_eq!(pool.pool_prop("comment").unwrap().value, "hello");
    assert_eq!(
        pool.dataset_prop("tank/a/b", "mountpoint").unwrap().value,
        "/srv/a/b"
    );
    assert_eq!(
        pool.dataset_space("tank/a/b").unwrap().referenced,
        b.referenced
    );
    let os = pool.dataset_objset("tank/a/b").unwrap();
    let mut back = vec![0u8; data.len()];
    os.read(obj, 0, &mut back).unwrap();
    assert!(back == data, "file data survives export/import");
    assert_eq!(pool.history().last().unwrap().text, "zfs create tank/a");

    // Destroy gives the space back.
    assert!(pool.dataset_destroy("tank/a").is_err(), "has children");
    let before = pool.pool_space().alloc;
    pool.dataset_destroy("tank/a/b").unwrap();
    pool.sync().unwrap();
    pool.sync().unwrap();
    let after = pool.pool_space().alloc;
    assert!(before - after >= 4 << 20, "freed {} bytes", before - after);
    let a = pool.dataset_space("tank/a").unwrap();
    assert_eq!(
        (a.usedbychildren, a.used),
        (0, a.referenced),
        "only its own header is left"
    );
    assert!(a.referenced < 64 << 10);
    pool.export().unwrap();
    drop(pool);
    let pool = reimport(&devs);
    assert_eq!(pool.datasets(), vec!["tank", "tank/a", "tank/c"]);
    pool.export().unwrap();
}

#[test]
fn rename_on_import_renames_every_dataset() {
    let devs = devices(2, 256 << 20);
    let pool = Pool::create("tank", mirror(&devs), &[], &[]).unwrap();
    pool.dataset_create("tank/a", &[]).unwrap();
    pool.rename("newtank").unwrap();
    assert_eq!(pool.datasets(), vec!["newtank", "newtank/a"]);
    pool.export().unwrap();
    drop(pool);
    let pool = reimport(&devs);
    assert_eq!(pool.name(), "newtank");
    assert_eq!(pool.datasets(), vec!["newtank", "newtank/a"]);
    pool.export().unwrap();
}

/// A change lands in exactly the txg its hold named: a writer that joins
/// while txg N quiesces gets N+1, and N's commit does not take its change
/// along (the intent log relies on this to know what a crash lost).
#[test]
fn a_change_lands_in_the_txg_of_its_hold() {
    let devs = devices(2, 256 << 20);
    let pool = Pool::create("tank", mirror(&devs), &[], &[]).unwrap();
    pool.dataset_create("tank/fs", &[]).unwrap();
    pool.sync().unwrap();
    let os = pool.dataset_objset("tank/fs").unwrap();
    let (x, y) = {
        let _h = os.hold();
        (
            os.object_create(ObjType::PlainFile, 4096, 0).unwrap(),
            os.object_create(ObjType::PlainFile, 4096, 0).unwrap(),
        )
    };
    pool.sync().unwrap();
    let txg = pool.txg().clone();
    let first = txg.hold().unwrap();
    let n = first.txg;
    {
        let _os = os.hold();
        os.write(x, 0, b"in txg N").unwrap();
    }
    // A commit of N starts and waits for `first` to be released.
    let waiter = {
        let txg = txg.clone();
        std::thread::spawn(move || txg.wait_synced(n))
    };
    std::thread::sleep(std::time::Duration::from_millis(100));
    // A second writer arrives while N quiesces.
    let late = {
        let (txg, os) = (txg.clone(), os.clone());
        std::thread::spawn(move || {
            let h = txg.hold().unwrap();
            let _os = os.hold();
            os.write(y, 0, b"in txg N+1").unwrap();
            h.txg
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(100));
    drop(first);
    waiter.join().unwrap().unwrap();
    assert_eq!(late.join().unwrap(), n + 1);
    // Crash before N+1 commits: N holds x's write and not y's.
    drop((os, txg));
    drop(pool);
    let pool = reimport(&devs);
    let os = pool.dataset_objset("tank/fs").unwrap();
    let mut b = [0u8; 8];
    os.read(x, 0, &mut b).unwrap();
    assert_eq!(&b, b"in txg N");
    let mut b = [0u8; 10];
    os.read(y, 0, &mut b).unwrap();
    assert_eq!(b, [0u8; 10], "a change of txg N+1 was committed with N");
}

/// Reservations hold space back from the pool's AVAIL, and every change
/// of one is seen by the next query (the dataset layer keeps copies of
/// them between property changes).
#[test]
fn reservation_changes_are_seen_at_once() {
    let devs = devices(2, 256 << 20);
    let pool = Pool::create("tank", mirror(&devs), &[], &[]).unwrap();
    pool.dataset_create("tank/a", &[]).unwrap();
    pool.dataset_create("tank/a/b", &[]).unwrap();
    let avail = |p: &Pool| p.pool_space().avail;
    let free = avail(&pool);
    let mib = 1u64 << 20;
    pool.dataset_set("tank/a/b", "reservation", &(10 * mib).to_string())
        .unwrap();
    let with_ten = avail(&pool);
    assert!(free - with_ten >= 10 * mib - mib, "{free} then {with_ten}");
    pool.dataset_set("tank/a/b", "reservation", &(30 * mib).to_string())
        .unwrap();
    let with_thirty = avail(&pool);
    assert!(
        with_ten - with_thirty >= 20 * mib - mib,
        "{with_ten} then {with_thirty}"
    );
    pool.dataset_set("tank/a", "refreservation", &(5 * mib).to_string())
        .unwrap();
    assert!(with_thirty - avail(&pool) >= 5 * mib - mib);
    pool.dataset_inherit("tank/a/b", "reservation").unwrap();
    pool.dataset_inherit("tank/a", "refreservation").unwrap();
    let back = avail(&pool);
    assert!(
        back + mib >= free && back <= free + mib,
        "{free} then {back}"
    );
    // A dataset destroyed and made again under the same name starts
    // without the old one's reservation.
    pool.dataset_set("tank/a/b", "reservation", &(10 * mib).to_string())
        .unwrap();
    pool.dataset_destroy("tank/a/b").unwrap();
    pool.dataset_create("tank/a/b", &[]).unwrap();
    let again = avail(&pool);
    assert!(again + mib >= free, "{free} then {again}");
}
