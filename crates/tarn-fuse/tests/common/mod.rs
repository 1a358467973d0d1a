//! A tarn dataset mounted for real: a mirror of two in-memory devices, a
//! pool, dataset `tank/fs` formatted by tarn-zpl, mounted through FUSE at
//! a fresh temporary directory. Dropping the fixture unmounts first (even
//! when a test panics), then drops the pool.

#![allow(dead_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tarn_dsl::Pool;
use tarn_fuse::{MountHandle, MountOptions};
use tarn_pool::import::import_devices;
use tarn_pool::NewTop;
use tarn_vdev::{BlockDevice, MemDevice};
use tarn_zpl::{Space, SpaceHook, Zpl, ZplOptions};

pub const DATASET: &str = "tank/fs";

/// The dataset's USED and AVAIL from the pool (what `df` must show).
pub struct DatasetSpace {
    pub pool: Arc<Pool>,
    pub name: String,
}

impl SpaceHook for DatasetSpace {
    fn space(&self) -> Space {
        let s = self.pool.dataset_space(&self.name).unwrap_or_default();
        Space {
            used_bytes: s.used,
            avail_bytes: s.avail,
        }
    }
}

pub struct Mounted {
    // Field order is drop order: unmount before anything else goes.
    pub handle: Option<MountHandle>,
    pub zpl: Option<Arc<Zpl>>,
    pub pool: Option<Arc<Pool>>,
    pub devs: Vec<Arc<dyn BlockDevice>>,
    pub mnt: PathBuf,
    dir: tempfile::TempDir,
}

pub fn devices(n: usize) -> Vec<Arc<dyn BlockDevice>> {
    (0..n)
        .map(|_| Arc::new(MemDevice::new(256 << 20)) as Arc<dyn BlockDevice>)
        .collect()
}

fn mirror(devs: &[Arc<dyn BlockDevice>]) -> Vec<NewTop> {
    vec![NewTop::mem_mirror(devs)]
}

/// Imports the pool on `devs` again (after an export).
pub fn reimport(devs: &[Arc<dyn BlockDevice>]) -> Arc<Pool> {
    Pool::open(import_devices(devs).unwrap()).unwrap()
}

pub fn zpl_on(pool: &Arc<Pool>, format: bool) -> Arc<Zpl> {
    let os = pool.dataset_objset(DATASET).unwrap();
    let opts = ZplOptions {
        space: Arc::new(DatasetSpace {
            pool: pool.clone(),
            name: DATASET.into(),
        }),
        ..Default::default()
    };
    Arc::new(if format {
        Zpl::format(os, pool.txg().clone(), opts).unwrap()
    } else {
        Zpl::mount(os, pool.txg().clone(), opts).unwrap()
    })
}

pub fn options() -> MountOptions {
    MountOptions {
        fsname: DATASET.into(),
        threads: 4,
        ..Default::default()
    }
}

impl Mounted {
    pub fn new() -> Mounted {
        Self::with_options(options())
    }

    pub fn with_options(opts: MountOptions) -> Mounted {
        Mounted::on_devices(devices(2), opts)
    }

    /// A mount of a pool mirrored on `devs` (two of them).
    pub fn on_devices(devs: Vec<Arc<dyn BlockDevice>>, opts: MountOptions) -> Mounted {
        let pool = Pool::create("tank", mirror(&devs), &[], &[]).unwrap();
        pool.dataset_create(DATASET, &[]).unwrap();
        let zpl = zpl_on(&pool, true);
        let dir = tempfile::tempdir().unwrap();
        // Other users must reach the mount point (tempdirs are 0700).
        chmod(dir.path(), 0o755);
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let handle = tarn_fuse::mount(zpl.clone(), &mnt, &opts).unwrap();
        let mnt = mnt.canonicalize().unwrap();
        let listed = tarn_fuse::tarn_mounts()
            .into_iter()
            .any(|m| m.mountpoint == mnt);
        assert!(listed, "{} is not a fuse.tarn mount", mnt.display());
        Mounted {
            handle: Some(handle),
            zpl: Some(zpl),
            pool: Some(pool),
            devs,
            mnt,
            dir,
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    pub fn handle(&mut self) -> &mut MountHandle {
        self.handle.as_mut().unwrap()
    }

    /// Unmounts, exports and re-imports the pool, and mounts again.
    pub fn remount(&mut self, opts: &MountOptions) {
        self.handle.take().unwrap().unmount(false).unwrap();
        self.zpl.take();
        self.pool.take().unwrap().export().unwrap();
        let pool = reimport(&self.devs);
        let zpl = zpl_on(&pool, false);
        self.handle = Some(tarn_fuse::mount(zpl.clone(), &self.mnt, opts).unwrap());
        self.zpl = Some(zpl);
        self.pool = Some(pool);
    }
}

pub fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

pub fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Runs `script` with /bin/sh as uid/gid (and supplementary groups),
/// returning (exit code, stderr).
pub fn run_as(uid: u32, gid: u32, groups: &[u32], script: &str) -> (i32, String) {
    let mut cmd = std::process::Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"));
    if groups.is_empty() {
        cmd.arg("--clear-groups");
    } else {
        let g: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        cmd.arg(format!("--groups={}", g.join(",")));
    }
    let out = cmd.arg("/bin/sh").arg("-c").arg(script).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
