//! Send and receive at the dataset layer: random object sets sent full
//! and incrementally into a second pool and compared object by object;
//! streams cut or damaged at random offsets leave the target as it was,
//! and with resume state a cut stream continues to the same result.

mod common;

use std::sync::Arc;

use common::{devices, mirror, reimport};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_dmu::Objset;
use tarn_dsl::recv::RecvError;
use tarn_dsl::send::{BeginPayload, ResumeAt, SendFlags};
use tarn_dsl::Pool;
use tarn_format::stream::{Record, StreamReader, StreamWriter};
use tarn_format::ObjType;

fn s(a: &str, b: &str) -> (String, String) {
    (a.to_string(), b.to_string())
}

fn pool(name: &str) -> (Vec<Arc<dyn tarn_vdev::BlockDevice>>, Arc<Pool>) {
    let devs = devices(2, 256 << 20);
    let pool = Pool::create(name, mirror(&devs), &[], &[s("compression", "lz4")]).unwrap();
    (devs, pool)
}

/// Random changes to an object set: new objects, writes, holes,
/// truncates, bonus changes, frees.
fn churn(os: &Objset, rng: &mut ChaCha8Rng, objs: &mut Vec<u64>, steps: usize) {
    for _ in 0..steps {
        match rng.random_range(0..10) {
            0..=1 => {
                let bs = [512u32, 4096, 16384, 131072][rng.random_range(0..4)];
                let typ = if rng.random_bool(0.8) {
                    ObjType::PlainFile
                } else {
                    ObjType::DirectoryContents
                };
                let o = os.object_create(typ, bs, rng.random_range(0..200)).unwrap();
                objs.push(o);
            }
            2..=5 if !objs.is_empty() => {
                let o = objs[rng.random_range(0..objs.len())];
                let off = rng.random_range(0..1u64 << 20);
                let len = rng.random_range(1..200_000);
                let byte: u8 = rng.random();
                let data: Vec<u8> = (0..len).map(|i| byte.wrapping_add(i as u8)).collect();
                os.write(o, off, &data).unwrap();
            }
            6 if !objs.is_empty() => {
                let o = objs[rng.random_range(0..objs.len())];
                os.free_range(
                    o,
                    rng.random_range(0..1 << 20),
                    rng.random_range(0..1 << 19),
                )
                .unwrap();
            }
            7 if !objs.is_empty() => {
                let o = objs[rng.random_range(0..objs.len())];
                os.truncate(o, rng.random_range(0..1 << 20)).unwrap();
            }
            8 if !objs.is_empty() => {
                let o = objs[rng.random_range(0..objs.len())];
                let len = rng.random_range(0..300);
                let b: u8 = rng.random();
                os.set_bonus(o, &vec![b; len]).unwrap();
            }
            9 if !objs.is_empty() => {
                let i = rng.random_range(0..objs.len());
                os.object_free(objs.swap_remove(i)).unwrap();
            }
            _ => {}
        }
    }
}

/// Every object of `a` and `b` the same: type, block size, bonus, bytes.
fn same(a: &Objset, b: &Objset) {
    let limit = 4096;
    for obj in 1..limit {
        let (da, db) = (a.dnode_phys(obj).unwrap(), b.dnode_phys(obj).unwrap());
        match (&da, &db) {
            (None, None) => continue,
            (Some(x), Some(y)) => {
                assert_eq!(x.typ, y.typ, "object {obj}");
                assert_eq!(x.data_block_size, y.data_block_size, "object {obj}");
                assert_eq!(x.bonus, y.bonus, "object {obj}");
                assert_eq!(x.bonus_type, y.bonus_type, "object {obj}");
                let len = ((x.maxblkid.max(y.maxblkid) + 1) * u64::from(x.data_block_size))
                    .min(4 << 20) as usize;
                let mut ba = vec![0u8; len];
                let mut bb = vec![0u8; len];
                a.read(obj, 0, &mut ba).unwrap();
                b.read(obj, 0, &mut bb).unwrap();
                assert!(ba == bb, "object {obj} differs");
            }
            _ => panic!("object {obj}: {:?} vs {:?}", da.is_some(), db.is_some()),
        }
    }
}

fn send(pool: &Pool, to: &str, from: Option<&str>) -> Vec<u8> {
    send_with(pool, to, from, SendFlags::default())
}

fn send_with(pool: &Pool, to: &str, from: Option<&str>, flags: SendFlags) -> Vec<u8> {
    let src = from.map(|f| pool.send_source(to, f).unwrap());
    let mut w = StreamWriter::new(Vec::new());
    let n = pool
        .send(to, src.as_ref(), flags, None, None, &mut w)
        .unwrap();
    let est = pool.send_size(to, src.as_ref(), flags, None, None).unwrap();
    let bytes = w.get_mut().clone();
    assert_eq!(n as usize, bytes.len());
    assert_eq!(est, n, "the estimate is the stream's size");
    bytes
}

fn receive(
    pool: &Pool,
    fs: &str,
    stream: &[u8],
    force: bool,
    resumable: bool,
) -> Result<(), RecvError> {
    let mut r = StreamReader::new(stream);
    let Some((Record::Begin(b), payload)) = r.next_record()? else {
        panic!("no BEGIN");
    };
    let payload: BeginPayload = serde_json::from_slice(&payload).unwrap();
    let snap = payload.toname.split_once('@').unwrap().1.to_string();
    let mut job = pool.receive_begin(fs, &snap, &b, &payload, force, resumable)?;
    match pool.receive_apply(&mut job, &mut r) {
        Ok(()) => Ok(pool.receive_finish(&job)?),
        Err(e) => {
            pool.receive_fail(&job)?;
            Err(e)
        }
    }
}

fn snap_objset(pool: &Pool, name: &str) -> Arc<Objset> {
    pool.snapshot_objset(name).unwrap()
}

#[test]
fn full_and_incremental_streams_recreate_every_object() {
    tarn_testkit::for_each_seed("send_recv", 0, 8, |seed| {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (_da, a) = pool("src");
        let (db, b) = pool("dst");
        a.dataset_create("src/fs", &[]).unwrap();
        let os = a.dataset_objset("src/fs").unwrap();
        let mut objs = Vec::new();
        churn(&os, &mut rng, &mut objs, 60);
        a.snapshot(&["src/fs@1".into()], &[]).unwrap();
        receive(&b, "dst/copy", &send(&a, "src/fs@1", None), false, false).unwrap();
        same(&snap_objset(&a, "src/fs@1"), &snap_objset(&b, "dst/copy@1"));
        assert_eq!(
            a.snapshot_info("src/fs@1").unwrap().guid,
            b.snapshot_info("dst/copy@1").unwrap().guid
        );
        let mut prev = "1".to_string();
        for round in 2..6 {
            // Round 3 changes nothing: its stream must change nothing.
            churn(&os, &mut rng, &mut objs, if round == 3 { 0 } else { 40 });
            let name = format!("src/fs@{round}");
            a.snapshot(std::slice::from_ref(&name), &[]).unwrap();
            let stream = send(&a, &name, Some(&format!("@{prev}")));
            receive(&b, "dst/copy", &stream, false, false).unwrap();
            same(
                &snap_objset(&a, &name),
                &snap_objset(&b, &format!("dst/copy@{round}")),
            );
            same(
                &a.snapshot_objset(&name).unwrap(),
                &b.dataset_objset("dst/copy").unwrap(),
            );
            prev = round.to_string();
        }
        assert!(b.space_check().unwrap().is_exact());
        assert!(b.datasets().iter().all(|d| !d.contains('%')));
        b.export().unwrap();
        let b = reimport(&db);
        same(&snap_objset(&a, "src/fs@5"), &snap_objset(&b, "dst/copy@5"));
        assert!(b.space_check().unwrap().is_exact());
    });
}

#[test]
fn compressed_streams_carry_blocks_as_stored() {
    let (_da, a) = pool("src");
    let (_db, b) = pool("dst");
    a.dataset_create("src/fs", &[]).unwrap();
    let os = a.dataset_objset("src/fs").unwrap();
    let text: Vec<u8> = (0..4 << 20).map(|i| b"tarn send -c "[i % 13]).collect();
    let o = os.object_create(ObjType::PlainFile, 131072, 0).unwrap();
    os.write(o, 0, &text).unwrap();
    a.snapshot(&["src/fs@1".into()], &[]).unwrap();
    let plain = send(&a, "src/fs@1", None);
    let packed = send_with(
        &a,
        "src/fs@1",
        None,
        SendFlags {
            compressed: true,
            ..Default::default()
        },
    );
    assert!(
        packed.len() * 4 < plain.len(),
        "{} vs {}",
        packed.len(),
        plain.len()
    );
    receive(&b, "dst/copy", &packed, false, false).unwrap();
    same(&snap_objset(&a, "src/fs@1"), &snap_objset(&b, "dst/copy@1"));
}

#[test]
fn an_incremental_holds_only_what_changed() {
    let (_da, a) = pool("src");
    a.dataset_create("src/fs", &[]).unwrap();
    let os = a.dataset_objset("src/fs").unwrap();
    for i in 0..64 {
        let o = os.object_create(ObjType::PlainFile, 131072, 0).unwrap();
        os.write(o, 0, &vec![i as u8 + 1; 1 << 20]).unwrap();
    }
    a.snapshot(&["src/fs@a".into()], &[]).unwrap();
    os.write(5, 0, &[7u8; 131072]).unwrap();
    a.snapshot(&["src/fs@b".into()], &[]).unwrap();
    let full = send(&a, "src/fs@a", None);
    let inc = send(&a, "src/fs@b", Some("@a"));
    assert!(full.len() > 64 << 20);
    assert!(
        inc.len() < 200 << 10,
        "incremental of one block: {} bytes",
        inc.len()
    );
}

#[test]
fn damaged_or_cut_streams_leave_the_target_unchanged() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let (_da, a) = pool("src");
    let (_db, b) = pool("dst");
    a.dataset_create("src/fs", &[]).unwrap();
    let os = a.dataset_objset("src/fs").unwrap();
    let mut objs = Vec::new();
    churn(&os, &mut rng, &mut objs, 40);
    a.snapshot(&["src/fs@1".into()], &[]).unwrap();
    churn(&os, &mut rng, &mut objs, 40);
    a.snapshot(&["src/fs@2".into()], &[]).unwrap();
    let full = send(&a, "src/fs@1", None);
    let inc = send(&a, "src/fs@2", Some("@1"));
    // A full stream cut or damaged anywhere creates nothing.
    for _ in 0..20 {
        let cut = rng.random_range(1..full.len());
        assert!(receive(&b, "dst/copy", &full[..cut], false, false).is_err());
        assert!(!b.dataset_exists("dst/copy"));
        let mut bad = full.clone();
        let at = rng.random_range(0..bad.len());
        bad[at] ^= 1 << rng.random_range(0..8);
        assert!(receive(&b, "dst/copy", &bad, false, false).is_err());
        assert!(!b.dataset_exists("dst/copy"));
    }
    receive(&b, "dst/copy", &full, false, false).unwrap();
    let before = b.dataset_prop("dst/copy", "referenced").unwrap().value;
    for _ in 0..20 {
        let cut = rng.random_range(1..inc.len());
        assert!(receive(&b, "dst/copy", &inc[..cut], false, false).is_err());
        assert_eq!(b.snapshots("dst/copy"), vec!["dst/copy@1".to_string()]);
        same(
            &snap_objset(&a, "src/fs@1"),
            &b.dataset_objset("dst/copy").unwrap(),
        );
        assert_eq!(
            b.dataset_prop("dst/copy", "referenced").unwrap().value,
            before
        );
    }
    // A stream for another source is refused in OpenZFS's words.
    let err = receive(&b, "dst/copy", &send(&a, "src/fs@2", None), false, false).unwrap_err();
    assert!(err.to_string().contains("exists"), "{err}");
    receive(&b, "dst/copy", &inc, false, false).unwrap();
    let err = receive(&b, "dst/copy", &inc, false, false).unwrap_err();
    assert!(
        err.to_string().contains("destination already exists"),
        "{err}"
    );
    assert!(b.space_check().unwrap().is_exact());
}

#[test]
fn a_cut_resumable_receive_continues_to_the_same_result() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let (_da, a) = pool("src");
    let (_db, b) = pool("dst");
    a.dataset_create("src/fs", &[]).unwrap();
    let os = a.dataset_objset("src/fs").unwrap();
    let mut objs = Vec::new();
    churn(&os, &mut rng, &mut objs, 80);
    a.snapshot(&["src/fs@1".into()], &[]).unwrap();
    churn(&os, &mut rng, &mut objs, 80);
    a.snapshot(&["src/fs@2".into()], &[]).unwrap();
    for (target, to, from) in [
        ("dst/copy", "src/fs@1", None),
        ("dst/copy", "src/fs@2", Some("@1")),
    ] {
        let full = send(&a, to, from);
        let src = from.map(|f| a.send_source(to, f).unwrap());
        let mut cuts = 0;
        let mut stream = full.clone();
        loop {
            // Cuts land anywhere; the tail after the last object is small,
            // so some attempts run to the end.
            let cut = if rng.random_bool(0.25) {
                stream.len()
            } else {
                rng.random_range(1..stream.len())
            };
            match receive(&b, target, &stream[..cut], false, true) {
                Ok(()) => break,
                Err(_) => cuts += 1,
            }
            let st = b.receive_resume_state(target).expect("resume state");
            let mut w = StreamWriter::new(Vec::new());
            a.send(
                to,
                src.as_ref(),
                SendFlags::default(),
                None,
                Some(ResumeAt {
                    object: st.object,
                    offset: st.offset,
                }),
                &mut w,
            )
            .unwrap();
            stream = w.get_mut().clone();
            assert!(cuts < 100);
        }
        same(
            &snap_objset(&a, to),
            &snap_objset(&b, &format!("{target}@{}", to.split_once('@').unwrap().1)),
        );
    }
    assert!(b.space_check().unwrap().is_exact());
}

#[test]
fn a_stream_larger_than_the_pool_stops_with_enospc_and_leaves_nothing() {
    let (_da, a) = pool("src");
    a.dataset_create("src/fs", &[s("compression", "off")])
        .unwrap();
    let os = a.dataset_objset("src/fs").unwrap();
    for i in 0..12u8 {
        let o = os.object_create(ObjType::PlainFile, 131072, 0).unwrap();
        let data: Vec<u8> = (0..8 << 20)
            .map(|j: u32| (j as u8) ^ i ^ (j >> 9) as u8)
            .collect();
        os.write(o, 0, &data).unwrap();
    }
    a.snapshot(&["src/fs@big".into()], &[]).unwrap();
    let stream = send(&a, "src/fs@big", None);
    let devs = devices(2, 64 << 20);
    let small = Pool::create("small", mirror(&devs), &[], &[s("compression", "off")]).unwrap();
    let err = receive(&small, "small/copy", &stream, false, false).unwrap_err();
    assert!(
        matches!(err, RecvError::Dsl(tarn_dsl::DslError::NoSpace)),
        "{err}"
    );
    assert!(!small.dataset_exists("small/copy"));
    // The pool goes on: nothing suspended it.
    small.dataset_create("small/after", &[]).unwrap();
    small.sync().unwrap();
    assert!(small.space_check().unwrap().is_exact());
}
