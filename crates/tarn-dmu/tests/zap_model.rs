//! ZAP tests: a model test against a `BTreeMap` through micro → fat
//! upgrade, leaf splits and pointer-table growth; cursor iteration under
//! concurrent change; and a 100,000-entry insert + lookup.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_dmu::{DmuError, Objset, ZapValue};
use tarn_format::objset::ObjsetType;
use tarn_format::ObjType;
use tarn_pool::store::MemBlockStore;

fn new_os() -> (Arc<MemBlockStore>, Objset) {
    let store = Arc::new(MemBlockStore::new());
    let os = Objset::create(store.clone(), ObjsetType::Filesystem);
    (store, os)
}

fn random_key(rng: &mut ChaCha8Rng, space: u64) -> Vec<u8> {
    let n = rng.random_range(0..space);
    let mut k = format!("k{n}").into_bytes();
    if n % 7 == 0 {
        k.extend(std::iter::repeat_n(b'x', (n % 200) as usize)); // long keys force fat
    }
    k
}

fn random_value(rng: &mut ChaCha8Rng) -> ZapValue {
    match rng.random_range(0..10) {
        0 => ZapValue::Bytes((0..rng.random_range(0..300)).map(|i| i as u8).collect()),
        1 => ZapValue::U64s((0..rng.random_range(0..5)).collect()),
        _ => ZapValue::u64(rng.random()),
    }
}

fn check_all(os: &Objset, z: u64, model: &BTreeMap<Vec<u8>, ZapValue>) {
    assert_eq!(os.zap_count(z).unwrap(), model.len() as u64);
    for (k, v) in model {
        assert_eq!(
            &os.zap_lookup(z, k).unwrap(),
            v,
            "key {:?}",
            String::from_utf8_lossy(k)
        );
    }
    let mut seen = BTreeMap::new();
    let mut last = 0;
    for item in os.zap_cursor(z, 0) {
        let (k, v, next) = item.unwrap();
        assert!(next > last, "cookies increase");
        last = next;
        assert!(seen.insert(k, v).is_none(), "entry seen twice");
    }
    assert_eq!(&seen, model);
    // Batches (a directory listing) give the same entries in the same
    // order as one entry at a time, across leaf boundaries.
    let one_by_one: Vec<(Vec<u8>, u64)> = os
        .zap_cursor(z, 0)
        .map(|i| {
            let (k, _, next) = i.unwrap();
            (k, next)
        })
        .collect();
    for max in [1, 3, 128, 100_000] {
        let mut got = Vec::new();
        let mut cookie = 0;
        loop {
            let batch = os.zap_next_batch(z, cookie, max).unwrap();
            assert!(batch.len() <= max);
            let done = batch.len() < max;
            for (k, v, c) in batch {
                assert_eq!(Some(&v), model.get(&k));
                got.push((k, c + 1));
                cookie = c + 1;
            }
            if done {
                break;
            }
        }
        assert_eq!(got, one_by_one, "batches of {max}");
    }
}

fn model_run(seed: u64, steps: usize, space: u64, only_u64: bool) {
    let (store, mut os) = new_os();
    let z = os.zap_create(ObjType::Zap).unwrap();
    let mut model = BTreeMap::new();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut txg = 1;
    for step in 0..steps {
        let key = random_key(&mut rng, space);
        let key = if only_u64 {
            key[..key.len().min(40)].to_vec()
        } else {
            key
        };
        let value = if only_u64 {
            ZapValue::u64(rng.random())
        } else {
            random_value(&mut rng)
        };
        match rng.random_range(0..10) {
            0..=4 => match os.zap_add(z, &key, &value) {
                Ok(()) => assert!(model.insert(key, value).is_none()),
                Err(DmuError::Exists) => assert!(model.contains_key(&key)),
                Err(e) => panic!("{e}"),
            },
            5 => {
                os.zap_update(z, &key, &value).unwrap();
                model.insert(key, value);
            }
            6 | 7 => match os.zap_remove(z, &key) {
                Ok(()) => assert!(model.remove(&key).is_some()),
                Err(DmuError::NotFound) => assert!(!model.contains_key(&key)),
                Err(e) => panic!("{e}"),
            },
            _ => match os.zap_lookup(z, &key) {
                Ok(v) => assert_eq!(Some(&v), model.get(&key)),
                Err(DmuError::NotFound) => assert!(!model.contains_key(&key)),
                Err(e) => panic!("{e}"),
            },
        }
        if step % 500 == 499 {
            let root = os.sync(txg).unwrap();
            txg += 1;
            os = Objset::open(store.clone(), &root).unwrap();
            check_all(&os, z, &model);
        }
    }
    check_all(&os, z, &model);
}

#[test]
fn micro_zap_model() {
    // Few, short keys with u64 values: stays micro, grows its block.
    model_run(1, 2000, 200, true);
}

#[test]
fn fat_zap_model() {
    tarn_testkit::for_each_seed("fat zap model", 0, 3, |seed| {
        model_run(seed, 6000, 3000, false)
    });
}

#[test]
fn limits_and_errors() {
    let (_s, os) = new_os();
    let z = os.zap_create(ObjType::Zap).unwrap();
    assert!(matches!(
        os.zap_add(z, b"", &ZapValue::u64(1)),
        Err(DmuError::InvalidArgument(_))
    ));
    assert!(matches!(
        os.zap_add(z, &[1; 256], &ZapValue::u64(1)),
        Err(DmuError::TooBig(_))
    ));
    assert!(matches!(
        os.zap_add(z, b"k", &ZapValue::Bytes(vec![0; 8193])),
        Err(DmuError::TooBig(_))
    ));
    os.zap_add(z, &[1; 255], &ZapValue::Bytes(vec![7; 8192]))
        .unwrap();
    assert_eq!(
        os.zap_lookup(z, &[1; 255]).unwrap(),
        ZapValue::Bytes(vec![7; 8192])
    );
    assert!(matches!(os.zap_lookup(z, b"nope"), Err(DmuError::NotFound)));
    let f = os.object_create(ObjType::PlainFile, 512, 0).unwrap();
    os.write(f, 0, &[9; 512]).unwrap();
    assert!(matches!(os.zap_count(f), Err(DmuError::Corrupted(_))));
}

#[test]
fn cursor_sees_stable_entries_exactly_once() {
    let (_s, os) = new_os();
    let z = os.zap_create(ObjType::DirectoryContents).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    // Stable entries survive the whole iteration; churn entries come and go.
    for i in 0..3000u64 {
        os.zap_add(z, format!("stable-{i}").as_bytes(), &ZapValue::u64(i))
            .unwrap();
    }
    let mut seen: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut cookie = 0;
    let mut churn = 0u64;
    let mut steps = 0;
    // A fresh cursor per step, like readdir calls resuming at a cookie.
    while let Some(item) = os.zap_cursor(z, cookie).next() {
        let (k, _, next) = item.unwrap();
        *seen.entry(k).or_default() += 1;
        cookie = next;
        steps += 1;
        for _ in 0..rng.random_range(0..4) {
            churn += 1;
            os.zap_add(
                z,
                format!("churn-{churn}-{}", "y".repeat((churn % 90) as usize)).as_bytes(),
                &ZapValue::Bytes(vec![1; 40]),
            )
            .unwrap();
        }
        if churn > 10 && rng.random_bool(0.5) {
            let victim = rng.random_range(1..churn);
            let _ = os.zap_remove(
                z,
                format!("churn-{victim}-{}", "y".repeat((victim % 90) as usize)).as_bytes(),
            );
        }
    }
    assert!(steps >= 3000);
    for i in 0..3000u64 {
        assert_eq!(
            seen.get(format!("stable-{i}").as_bytes()),
            Some(&1),
            "stable-{i}"
        );
    }
    assert!(seen.values().all(|&n| n == 1), "no entry returned twice");
}

#[test]
fn pointer_table_grows_past_embedded() {
    // 1 KiB values: ~15 per leaf, so > 1024 leaves need a table of 2^11+.
    let (store, os) = new_os();
    let z = os.zap_create(ObjType::Zap).unwrap();
    let n = 24_000u64;
    for i in 0..n {
        os.zap_add(
            z,
            format!("big-{i}").as_bytes(),
            &ZapValue::Bytes(vec![i as u8; 1000]),
        )
        .unwrap();
    }
    let root = os.sync(1).unwrap();
    let os = Objset::open(store, &root).unwrap();
    assert_eq!(os.zap_count(z).unwrap(), n);
    for i in (0..n).step_by(7) {
        assert_eq!(
            os.zap_lookup(z, format!("big-{i}").as_bytes()).unwrap(),
            ZapValue::Bytes(vec![i as u8; 1000])
        );
    }
    assert_eq!(os.zap_cursor(z, 0).count() as u64, n);
    let info = os.object_info(z).unwrap();
    assert!(
        info.maxblkid > 1500,
        "leaves + table blocks: {}",
        info.maxblkid
    );
}

#[test]
fn hundred_thousand_entries() {
    let (store, os) = new_os();
    let z = os.zap_create(ObjType::DirectoryContents).unwrap();
    let n = 100_000u64;
    let t = std::time::Instant::now();
    for i in 0..n {
        os.zap_add(z, format!("file-{i:08}").as_bytes(), &ZapValue::u64(i))
            .unwrap();
    }
    for i in 0..n {
        assert_eq!(
            os.zap_lookup(z, format!("file-{i:08}").as_bytes()).unwrap(),
            ZapValue::u64(i)
        );
    }
    let root = os.sync(1).unwrap();
    let os = Objset::open(store, &root).unwrap();
    assert_eq!(os.zap_count(z).unwrap(), n);
    for i in (0..n).step_by(97) {
        assert_eq!(
            os.zap_lookup(z, format!("file-{i:08}").as_bytes()).unwrap(),
            ZapValue::u64(i)
        );
    }
    eprintln!("100k zap insert+lookup+sync: {:?}", t.elapsed());
}
