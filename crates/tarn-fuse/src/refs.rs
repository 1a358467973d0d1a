//! References the kernel holds on inodes through this session.
//!
//! The kernel counts one reference per entry it was given (lookup,
//! create, mknod, mkdir, symlink, link, each readdirplus entry but `.` and
//! `..`) and returns them with `forget`; each open file holds one more
//! until `release`. Every reference is mirrored into [`Zpl::open`] /
//! [`Zpl::forget`], which keep an unlinked file alive while referenced.
//! The table here remembers what this session took, so that the end of
//! the session (unmount, or the kernel going away) gives back what the
//! kernel never forgot — the kernel does not send `forget` at unmount.
//!
//! Sharded by inode so that parallel lookups of different files do not
//! meet on one lock.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_zpl::Zpl;

const SHARDS: usize = 16;

pub(crate) struct Refs {
    shards: Box<[Mutex<HashMap<u64, u64>>]>,
}

impl Refs {
    pub(crate) fn new() -> Refs {
        Refs {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    fn shard(&self, ino: u64) -> &Mutex<HashMap<u64, u64>> {
        &self.shards[(ino.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % SHARDS]
    }

    /// Takes one reference on `ino` (fails if it no longer exists).
    pub(crate) fn take(&self, zpl: &Zpl, ino: u64) -> tarn_zpl::Result<()> {
        zpl.open(ino)?;
        *self.shard(ino).lock().entry(ino).or_insert(0) += 1;
        Ok(())
    }

    /// Gives back up to `n` references this session holds on `ino`.
    pub(crate) fn drop_n(&self, zpl: &Zpl, ino: u64, n: u64) -> tarn_zpl::Result<()> {
        let give = {
            let mut m = self.shard(ino).lock();
            let Some(c) = m.get_mut(&ino) else {
                return Ok(());
            };
            let give = n.min(*c);
            *c -= give;
            if *c == 0 {
                m.remove(&ino);
            }
            give
        };
        if give == 0 {
            return Ok(());
        }
        zpl.forget(ino, give)
    }

    /// The references this session holds on `ino`.
    pub(crate) fn count(&self, ino: u64) -> u64 {
        self.shard(ino).lock().get(&ino).copied().unwrap_or(0)
    }

    /// Every inode the kernel holds now, with its count.
    pub(crate) fn held(&self) -> Vec<(u64, u64)> {
        self.shards
            .iter()
            .flat_map(|s| s.lock().iter().map(|(&i, &n)| (i, n)).collect::<Vec<_>>())
            .collect()
    }

    /// Forgets `ino`'s references without giving them back (the
    /// filesystem they were taken on was replaced).
    pub(crate) fn forget_all(&self, ino: u64) {
        self.shard(ino).lock().remove(&ino);
    }

    /// Gives back everything (the session is over).
    pub(crate) fn drop_all(&self, zpl: &Arc<Zpl>) {
        for s in self.shards.iter() {
            let held: Vec<(u64, u64)> = s.lock().drain().collect();
            for (ino, n) in held {
                if let Err(e) = zpl.forget(ino, n) {
                    tracing::warn!(ino, error = %e, "forgetting an inode at unmount failed");
                }
            }
        }
    }
}
