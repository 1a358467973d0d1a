//! `tarn-bench io`: the engine's big I/O paths below the POSIX layer, on a
//! file-backed two-way mirror through tarn-dsl and tarn-dmu (no FUSE).
//!
//! Rows (each one timed from the first call to the durable sync):
//! - sequential write of 1 GiB in 1 MiB writes, recordsize 128 KiB and 1 MiB;
//! - sequential read of the 128 KiB file after export and import, with the
//!   host page cache of the image files dropped (`posix_fadvise DONTNEED`),
//!   so the pool's cache and the kernel's are both cold;
//! - 16 KiB random writes into the 1 GiB file, then sync (IOPS);
//! - 20,000 small objects (4 KiB written each) created and linked into one
//!   directory-like ZAP, then sync;
//! - 200,000 entries added to one ZAP (the tarn-zpl bigdir case).
//!
//! Writers take a txg hold and account their dirty bytes, as tarn-zpl does,
//! so the dirty-data limits and the sync thread behave as under a mount.
//! Data is pseudo-random (incompressible), as fio writes it. The machine
//! is shared: compare runs side by side, not with numbers from elsewhere.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tarn_dmu::{Objset, ZapValue};
use tarn_dsl::Pool;
use tarn_format::label::VdevClass;
use tarn_format::ObjType;
use tarn_pool::import::{assemble, best_label};
use tarn_pool::{NewTop, Spa};
use tarn_vdev::{BlockDevice, FileDevice, Layout};

const FILE_BYTES: u64 = 1 << 30;
const WRITE_BYTES: usize = 1 << 20;
const IMAGE_BYTES: u64 = 6 << 30;
const RANDOM_WRITES: usize = 20_000;
const RANDOM_WRITE_BYTES: usize = 16 << 10;
const SMALL_OBJECTS: usize = 20_000;
const SMALL_OBJECT_BYTES: usize = 4 << 10;
const ZAP_ENTRIES: usize = 200_000;

/// Runs every row and prints the table. `dir` holds the two image files.
pub fn run(dir: &Path) {
    std::fs::create_dir_all(dir).expect("create bench dir");
    let images = [dir.join("tarn-io-a.img"), dir.join("tarn-io-b.img")];
    println!(
        "engine I/O on a mirror of two files in {} ({} GiB each), {} cores",
        dir.display(),
        IMAGE_BYTES >> 30,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!();
    println!("| path | result |");
    println!("|---|---:|");
    let pool = create_pool(&images);
    let rs128 = make_dataset(&pool, "bench/rs128k");
    let rs1m = make_dataset(&pool, "bench/rs1m");
    let f128 = seq_write(
        &pool,
        &rs128,
        128 << 10,
        "sequential write 1 GiB, 1 MiB writes, recordsize 128K",
    );
    seq_write(
        &pool,
        &rs1m,
        1 << 20,
        "sequential write 1 GiB, 1 MiB writes, recordsize 1M",
    );
    pool.export().expect("export");
    drop((rs128, rs1m, pool));
    drop_host_cache(&images);
    let pool = import_pool(&images);
    let rs128 = pool.dataset_objset("bench/rs128k").expect("dataset");
    seq_read(
        &rs128,
        f128,
        "sequential read 1 GiB cold (after import), 1 MiB reads, recordsize 128K",
    );
    random_write(&pool, &rs128, f128);
    small_objects(&pool, &rs128);
    zap_entries(&pool, &rs128);
    pool.export().expect("export");
    drop((rs128, pool));
    for img in &images {
        let _ = std::fs::remove_file(img);
    }
}

fn create_pool(images: &[PathBuf; 2]) -> Arc<Pool> {
    let leaves = images
        .iter()
        .map(|p| {
            let f = File::create(p).expect("create image");
            f.set_len(IMAGE_BYTES).expect("size image");
            let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(p).expect("open image"));
            (p.display().to_string(), dev, false)
        })
        .collect();
    let top = NewTop {
        layout: Layout::Mirror,
        class: VdevClass::Normal,
        ashift: 12,
        leaves,
    };
    Pool::create("bench", vec![top], &[], &[]).expect("create pool")
}

fn import_pool(images: &[PathBuf; 2]) -> Arc<Pool> {
    let devs: Vec<Arc<dyn BlockDevice>> = images
        .iter()
        .map(|p| Arc::new(FileDevice::open(p).expect("open image")) as Arc<dyn BlockDevice>)
        .collect();
    let labels: Vec<_> = devs
        .iter()
        .enumerate()
        .filter_map(|(i, d)| {
            let ls = tarn_vdev::read_labels(d.as_ref())
                .into_iter()
                .map(|r| r.map_err(|e| e.to_string()))
                .collect();
            best_label(ls).ok().map(|l| (i, l))
        })
        .collect();
    let found = assemble(&labels);
    let p = &found[0];
    let devmap = p.devices.clone();
    let spa = Spa::open(&p.name, p.guid, p.configs().expect("all tops"), &|l| {
        devmap.get(&l.guid).map(|&i| devs[i].clone())
    })
    .expect("spa import");
    Pool::open(spa).expect("pool import")
}

fn make_dataset(pool: &Pool, name: &str) -> Arc<Objset> {
    pool.dataset_create(name, &[]).expect("create dataset");
    pool.dataset_objset(name).expect("dataset objset")
}

/// Drops the kernel's cached pages of the image files so reads hit the disk.
fn drop_host_cache(images: &[PathBuf; 2]) {
    for p in images {
        let f = File::open(p).expect("open image");
        let _ = f.sync_all();
        // SAFETY: a valid open fd; DONTNEED only drops clean cached pages.
        unsafe {
            libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
        }
    }
}

/// Fast incompressible bytes (xorshift64*).
fn fill_random(buf: &mut [u8], seed: &mut u64) {
    for chunk in buf.chunks_mut(8) {
        *seed ^= *seed >> 12;
        *seed ^= *seed << 25;
        *seed ^= *seed >> 27;
        let v = seed.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// One write in its own txg hold, accounted as dirty data.
fn write_held(pool: &Pool, os: &Objset, obj: u64, off: u64, data: &[u8]) {
    let h = pool.txg().hold().expect("txg hold");
    let _os = os.hold();
    os.write(obj, off, data).expect("write");
    h.dirty(data.len() as u64);
}

fn report(name: &str, value: f64, unit: &str) {
    println!("| {name} | {value:.0} {unit} |");
}

fn seq_write(pool: &Pool, os: &Objset, record: u32, name: &str) -> u64 {
    let obj = {
        let h = pool.txg().hold().expect("txg hold");
        let _os = os.hold();
        h.dirty(4096);
        os.object_create(ObjType::PlainFile, record, 0)
            .expect("object")
    };
    let mut buf = vec![0u8; WRITE_BYTES];
    let mut seed = 0x9E37_79B9_7F4A_7C15;
    let t = Instant::now();
    for i in 0..FILE_BYTES / WRITE_BYTES as u64 {
        fill_random(&mut buf, &mut seed);
        write_held(pool, os, obj, i * WRITE_BYTES as u64, &buf);
    }
    pool.sync().expect("sync");
    let s = t.elapsed().as_secs_f64();
    report(name, FILE_BYTES as f64 / s / 1e6, "MB/s");
    obj
}

fn seq_read(os: &Objset, obj: u64, name: &str) {
    let mut buf = vec![0u8; WRITE_BYTES];
    let t = Instant::now();
    let mut sum = 0u64;
    for i in 0..FILE_BYTES / WRITE_BYTES as u64 {
        os.read(obj, i * WRITE_BYTES as u64, &mut buf)
            .expect("read");
        sum = sum.wrapping_add(u64::from(buf[17]));
    }
    let s = t.elapsed().as_secs_f64();
    std::hint::black_box(sum);
    report(name, FILE_BYTES as f64 / s / 1e6, "MB/s");
}

fn random_write(pool: &Pool, os: &Objset, obj: u64) {
    let mut buf = vec![0u8; RANDOM_WRITE_BYTES];
    let mut seed = 0x1234_5678_9ABC_DEF1u64;
    let slots = FILE_BYTES / RANDOM_WRITE_BYTES as u64;
    let t = Instant::now();
    for _ in 0..RANDOM_WRITES {
        fill_random(&mut buf, &mut seed);
        let slot = seed % slots;
        write_held(pool, os, obj, slot * RANDOM_WRITE_BYTES as u64, &buf);
    }
    let written = t.elapsed().as_secs_f64();
    pool.sync().expect("sync");
    let s = t.elapsed().as_secs_f64();
    report(
        "random write 16K into the cold 1 GiB file (recordsize 128K), write phase",
        RANDOM_WRITES as f64 / written,
        "IOPS",
    );
    report(
        "random write 16K into the cold 1 GiB file, including the sync",
        RANDOM_WRITES as f64 / s,
        "IOPS",
    );
}

fn small_objects(pool: &Pool, os: &Objset) {
    let dir = {
        let h = pool.txg().hold().expect("txg hold");
        let _os = os.hold();
        h.dirty(4096);
        os.zap_create(ObjType::DirectoryContents).expect("zap")
    };
    let mut buf = vec![0u8; SMALL_OBJECT_BYTES];
    let mut seed = 7u64;
    let t = Instant::now();
    for i in 0..SMALL_OBJECTS {
        fill_random(&mut buf, &mut seed);
        let h = pool.txg().hold().expect("txg hold");
        let _os = os.hold();
        let obj = os
            .object_create(ObjType::PlainFile, SMALL_OBJECT_BYTES as u32, 0)
            .expect("object");
        os.write(obj, 0, &buf).expect("write");
        let name = format!("file-{i:06}");
        os.zap_add(dir, name.as_bytes(), &ZapValue::u64(obj))
            .expect("zap add");
        h.dirty(SMALL_OBJECT_BYTES as u64 + 1024);
    }
    pool.sync().expect("sync");
    let s = t.elapsed().as_secs_f64();
    report(
        "create 20,000 objects of 4 KiB linked in one ZAP, then sync",
        SMALL_OBJECTS as f64 / s,
        "objects/s",
    );
}

fn zap_entries(pool: &Pool, os: &Objset) {
    let zap = {
        let h = pool.txg().hold().expect("txg hold");
        let _os = os.hold();
        h.dirty(4096);
        os.zap_create(ObjType::DirectoryContents).expect("zap")
    };
    let t = Instant::now();
    for i in 0..ZAP_ENTRIES {
        let h = pool.txg().hold().expect("txg hold");
        let _os = os.hold();
        let name = format!("entry-with-a-longer-name-{i:08}");
        os.zap_add(zap, name.as_bytes(), &ZapValue::u64(i as u64))
            .expect("zap add");
        h.dirty(256);
    }
    pool.sync().expect("sync");
    let s = t.elapsed().as_secs_f64();
    report(
        "add 200,000 entries to one ZAP, then sync",
        ZAP_ENTRIES as f64 / s,
        "entries/s",
    );
    let t = Instant::now();
    for i in (0..ZAP_ENTRIES).step_by(7) {
        let name = format!("entry-with-a-longer-name-{i:08}");
        os.zap_lookup(zap, name.as_bytes()).expect("lookup");
    }
    let s = t.elapsed().as_secs_f64();
    report(
        "look up entries of that 200,000-entry ZAP",
        (ZAP_ENTRIES / 7) as f64 / s,
        "lookups/s",
    );
}
