//! The POSIX layer on the real dataset layer: a mirror of in-memory
//! devices, a dataset, files written through `Zpl`, export and import
//! (a real sync and reopen), statfs from the dataset's space, and
//! EDQUOT/ENOSPC from a space hook over `Pool::dataset_space`.

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_dsl::Pool;
use tarn_pool::import::import_devices;
use tarn_pool::NewTop;
use tarn_vdev::{BlockDevice, MemDevice};
use tarn_zpl::{Cred, Space, SpaceHook, Zpl, ZplError, ZplOptions};

fn devices(n: usize) -> Vec<Arc<dyn BlockDevice>> {
    (0..n)
        .map(|_| Arc::new(MemDevice::new(256 << 20)) as Arc<dyn BlockDevice>)
        .collect()
}

fn mirror(devs: &[Arc<dyn BlockDevice>]) -> Vec<NewTop> {
    vec![NewTop::mem_mirror(devs)]
}

fn reimport(devs: &[Arc<dyn BlockDevice>]) -> Arc<Pool> {
    Pool::open(import_devices(devs).unwrap()).unwrap()
}

/// The dataset's space as the pool reports it; EDQUOT past its quota.
struct DatasetSpace {
    pool: Arc<Pool>,
    name: String,
}

impl SpaceHook for DatasetSpace {
    fn space(&self) -> Space {
        let s = self.pool.dataset_space(&self.name).unwrap_or_default();
        Space {
            used_bytes: s.used,
            avail_bytes: s.avail,
        }
    }
    fn check_write(&self, bytes: u64) -> tarn_zpl::Result<()> {
        let s = self.space();
        if bytes <= s.avail_bytes {
            return Ok(());
        }
        let quota: u64 = self
            .pool
            .dataset_prop(&self.name, "quota")
            .ok()
            .and_then(|p| p.value.parse().ok())
            .unwrap_or(0);
        Err(if quota > 0 {
            ZplError::Quota
        } else {
            ZplError::NoSpace
        })
    }
}

fn mount(pool: &Arc<Pool>, name: &str, format: bool) -> Zpl {
    let os = pool.dataset_objset(name).unwrap();
    let opts = ZplOptions {
        space: Arc::new(DatasetSpace {
            pool: pool.clone(),
            name: name.into(),
        }),
        ..Default::default()
    };
    if format {
        Zpl::format(os, pool.txg().clone(), opts).unwrap()
    } else {
        Zpl::mount(os, pool.txg().clone(), opts).unwrap()
    }
}

#[test]
fn files_survive_export_import_and_quota_is_edquot() {
    let devs = devices(2);
    let pool = Pool::create("tank", mirror(&devs), &[], &[]).unwrap();
    pool.dataset_create("tank/fs", &[]).unwrap();
    pool.dataset_create("tank/small", &[("quota".into(), "2097152".into())])
        .unwrap();
    let c = Cred::root();
    let (file, dir, gen) = {
        let fs = mount(&pool, "tank/fs", true);
        let r = fs.root_ino();
        let d = fs.mkdir(r, b"dir", 0o755, &c).unwrap().ino;
        let f = fs.create(d, b"file", 0o644, &c, true).unwrap();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        fs.write(f.ino, 0, &data, &c).unwrap();
        fs.setxattr(f.ino, b"user.k", b"v", tarn_zpl::XattrSetFlags::Any, &c)
            .unwrap();
        fs.fsync(f.ino).unwrap();
        let st = fs.statfs();
        assert!(st.blocks > 0 && st.bavail > 0 && st.bavail < st.blocks);
        assert_eq!(st.namelen, 255);
        (f.ino, d, f.gen)
    };
    // Quota: writes past it fail with EDQUOT, deletes still work.
    {
        let fs = mount(&pool, "tank/small", true);
        let f = fs
            .create(fs.root_ino(), b"fill", 0o644, &c, true)
            .unwrap()
            .ino;
        // Incompressible bytes, so the quota is reached by real blocks.
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let chunk: Vec<u8> = (0..256 << 10).map(|_| rng.random()).collect();
        let mut err = None;
        for i in 0..64u64 {
            match fs.write(f, i * chunk.len() as u64, &chunk, &c) {
                Ok(_) => pool.sync().unwrap(),
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        assert_eq!(err.map(|e| e.errno()), Some(libc::EDQUOT));
        fs.unlink(fs.root_ino(), b"fill", &c).unwrap();
        pool.sync().unwrap();
        fs.create(fs.root_ino(), b"again", 0o644, &c, true).unwrap();
    }
    pool.export().unwrap();
    drop(pool);
    let pool = reimport(&devs);
    let fs = mount(&pool, "tank/fs", false);
    let a = fs.lookup(dir, b"file", &c).unwrap();
    assert_eq!((a.ino, a.gen, a.size), (file, gen, 3_000_000));
    let mut buf = vec![0u8; 3_000_000];
    assert_eq!(fs.read(file, 0, &mut buf).unwrap(), 3_000_000);
    assert!(buf.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    assert_eq!(fs.getxattr(file, b"user.k", &c).unwrap(), b"v");
    assert_eq!(a.blksize, 128 << 10);
    assert!(
        a.blocks > 0,
        "space is charged once synced (compressed: the data repeats)"
    );
    assert_eq!(
        Zpl::format(
            pool.dataset_objset("tank/fs").unwrap(),
            pool.txg().clone(),
            ZplOptions::default()
        )
        .err(),
        Some(ZplError::Exists)
    );
    pool.export().unwrap();
}
