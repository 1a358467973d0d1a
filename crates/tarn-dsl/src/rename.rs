//! Renaming datasets and snapshots (zfs-rename(8)).
//!
//! Names are not stored in the records (the crate comment): a dataset's
//! name is its path of child-map keys, a snapshot's the key of its
//! head's snapshot map. So a rename changes one or two map entries, the
//! moved directory's parent, and who is charged its space, in one txg; a
//! dataset's descendants and snapshots follow it by construction.

use crate::mos;
use crate::pool::Pool;
use crate::snapshot::split;
use crate::DslError;

fn parent_name(name: &str) -> Option<&str> {
    name.rfind('/').map(|i| &name[..i])
}

fn leaf_name(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

impl Pool {
    /// `zfs rename DS@OLD DS@NEW` (`new` is the part after `@`).
    pub fn rename_snapshot(&self, from: &str, new: &str) -> Result<(), DslError> {
        let (head, _) = split(from).ok_or_else(|| DslError::NoSuchDataset(from.into()))?;
        let inner = self.inner();
        let txg = {
            let h = inner.txg.hold()?;
            let _sync = inner.sync_lock.lock();
            let (head_name, i) = inner.snap_index(from)?;
            let mut map = inner.datasets.write();
            let d = map.get_mut(&head_name).expect("found above");
            if d.snaps.iter().any(|s| s.name == new) {
                return Err(DslError::Exists(format!("{head}@{new}")));
            }
            let s = &mut d.snaps[i];
            mos::zap_remove(&inner.mos, d.ds.snapnames_obj, &s.name)?;
            mos::zap_set_u64(&inner.mos, d.ds.snapnames_obj, new, s.obj)?;
            s.name = new.to_string();
            h.txg
        };
        Ok(inner.txg.wait_synced(txg)?)
    }

    /// `zfs rename FS NEWFS`: the dataset (with its descendants and
    /// snapshots) moves under `NEWFS`'s parent, which must exist.
    pub fn rename_dataset(&self, from: &str, to: &str) -> Result<(), DslError> {
        let old_parent = parent_name(from)
            .ok_or_else(|| DslError::Invalid("cannot rename the root dataset".into()))?;
        let new_parent = parent_name(to)
            .ok_or_else(|| DslError::Invalid("datasets must be within the same pool".into()))?;
        if to.starts_with(&format!("{from}/")) {
            return Err(DslError::Invalid(
                "a dataset cannot be moved below itself".into(),
            ));
        }
        let inner = self.inner();
        let txg = {
            let h = inner.txg.hold()?;
            let _sync = inner.sync_lock.lock();
            if !self.dataset_exists(from) {
                return Err(DslError::NoSuchDataset(from.into()));
            }
            if self.dataset_exists(to) {
                return Err(DslError::Exists(to.into()));
            }
            let (old_map, new_map, new_dir) = {
                let map = inner.datasets.read();
                let np = map
                    .get(new_parent)
                    .ok_or_else(|| DslError::NoParent(new_parent.into()))?;
                (
                    map[old_parent].dir.child_map_obj,
                    np.dir.child_map_obj,
                    np.dir_obj,
                )
            };
            let (dir_obj, dir) = {
                let mut map = inner.datasets.write();
                let d = map.get_mut(from).expect("exists");
                d.dir.parent_dir_obj = new_dir;
                inner.mos.set_bonus(d.dir_obj, &d.dir.encode())?;
                (d.dir_obj, d.dir)
            };
            mos::zap_remove(&inner.mos, old_map, leaf_name(from))?;
            mos::zap_set_u64(&inner.mos, new_map, leaf_name(to), dir_obj)?;
            // The old ancestors stop carrying it, the new ones start.
            let (u, c, l) = (
                dir.used_bytes as i64,
                dir.compressed_bytes as i64,
                dir.uncompressed_bytes as i64,
            );
            inner.charge_ancestors(old_parent, -u, -c, -l)?;
            inner.charge_ancestors(new_parent, u, c, l)?;
            let mut map = inner.datasets.write();
            let prefix = format!("{from}/");
            let moving: Vec<String> = map
                .keys()
                .filter(|k| *k == from || k.starts_with(&prefix))
                .cloned()
                .collect();
            for old in moving {
                let new = format!("{to}{}", &old[from.len()..]);
                let d = map.remove(&old).expect("listed above");
                map.insert(new, d);
            }
            h.txg
        };
        Ok(inner.txg.wait_synced(txg)?)
    }
}
