//! Clones and promotion (zfs-clone(8), zfs-promote(8); OpenZFS's
//! `dsl_dataset_clone` and `dsl_dataset_promote`).
//!
//! A clone is a new dataset whose head starts as a snapshot (its origin):
//! the same root block pointer, nothing copied. Its directory names the
//! origin; the origin's `clones` list names it, and an origin with clones
//! cannot be destroyed. The clone's `prev_snap_txg` is the origin's txg,
//! so the blocks it frees that the origin holds go to its dead list, as
//! for any snapshot, but they are never charged to the clone: its space
//! is what was written into it (docs/FORMAT.md §12.2).
//!
//! Promoting a clone `C` of snapshot `O` of `F` swaps their roles: `O` and
//! every older snapshot of `F` move to `C` (with their dead lists and the
//! space they hold), and `F` becomes a clone of `O`. Nothing is copied;
//! only the snapshots' records and the two directories change, in one
//! txg. It is refused when one of the moving snapshots has the name of
//! one of `C`'s.

use tarn_format::dsl::DS_EXT_CLONES;
use tarn_format::{ObjType, FEATURE_SNAPSHOTS};

use crate::deadlist::Space;
use crate::mos;
use crate::pool::{Inner, Pool};
use crate::snapshot::{ext_get, ext_make, find_snap, own_charge, split};
use crate::DslError;

fn parent_name(name: &str) -> Option<&str> {
    name.rfind('/').map(|i| &name[..i])
}

impl Inner {
    /// Adds (`true`) or removes dataset object `clone` to the clones list
    /// of snapshot `origin`.
    pub(crate) fn set_clone(&self, origin: u64, clone: u64, member: bool) -> Result<(), DslError> {
        let found = find_snap(&self.datasets.read(), origin).map(|(h, i)| (h.to_string(), i));
        let Some((head, i)) = found else {
            return Ok(());
        };
        let mut map = self.datasets.write();
        let s = &mut map.get_mut(&head).expect("found above").snaps[i];
        let key = format!("{clone:x}");
        if member {
            let mut ext = s.phys.ext_obj;
            let obj = ext_make(&self.mos, &mut ext, DS_EXT_CLONES, ObjType::DslClones)?;
            mos::zap_set_u64(&self.mos, obj, &key, 1)?;
            if ext != s.phys.ext_obj {
                s.phys.ext_obj = ext;
                self.mos.set_bonus(s.obj, &s.phys.encode())?;
            }
        } else if let Some(obj) = ext_get(&self.mos, s.phys.ext_obj, DS_EXT_CLONES)? {
            mos::zap_remove(&self.mos, obj, &key)?;
        }
        Ok(())
    }
}

impl Pool {
    /// `zfs clone SNAP NAME`: a new dataset sharing every block of
    /// snapshot `snap` (same pool; `NAME`'s parent exists).
    pub fn clone_create(
        &self,
        snap: &str,
        name: &str,
        props: &[(String, String)],
    ) -> Result<(), DslError> {
        let parent = parent_name(name).ok_or_else(|| DslError::Exists(name.into()))?;
        let inner = self.inner();
        let txg = {
            let hold = inner.txg.hold()?;
            let _sync = inner.sync_lock.lock();
            if self.dataset_exists(name) {
                return Err(DslError::Exists(name.into()));
            }
            let parent_dir = {
                let map = inner.datasets.read();
                map.get(parent)
                    .map(|d| d.dir_obj)
                    .ok_or_else(|| DslError::NoParent(parent.into()))?
            };
            let (head, i) = {
                let (h, _) = split(snap).ok_or_else(|| DslError::NoSuchDataset(snap.into()))?;
                let map = inner.datasets.read();
                let d = map
                    .get(h)
                    .ok_or_else(|| DslError::NoSuchDataset(snap.into()))?;
                let i = d
                    .snaps
                    .iter()
                    .position(|s| format!("{h}@{}", s.name) == snap)
                    .ok_or_else(|| DslError::NoSuchDataset(snap.into()))?;
                (h.to_string(), i)
            };
            let (obj, phys) = {
                let map = inner.datasets.read();
                let s = &map[&head].snaps[i];
                (s.obj, s.phys)
            };
            inner.create_dataset_objects(name, Some(parent_dir), props, Some((obj, phys)))?;
            let clone_obj = inner.datasets.read()[name].ds_obj;
            inner.set_clone(obj, clone_obj, true)?;
            inner.spa.activate_feature(FEATURE_SNAPSHOTS);
            hold.txg
        };
        Ok(inner.txg.wait_synced(txg)?)
    }

    /// The origin snapshot of a clone (`origin`), if it is one.
    pub fn origin(&self, name: &str) -> Option<String> {
        let map = self.inner().datasets.read();
        let d = map.get(name)?;
        if d.dir.origin_obj == 0 {
            return None;
        }
        find_snap(&map, d.dir.origin_obj).map(|(h, i)| format!("{h}@{}", map[h].snaps[i].name))
    }

    /// `zfs promote NAME` (see the module comment).
    pub fn promote(&self, name: &str) -> Result<(), DslError> {
        let inner = self.inner();
        let txg = {
            let hold = inner.txg.hold()?;
            let _sync = inner.sync_lock.lock();
            inner.promote_locked(name)?;
            hold.txg
        };
        Ok(inner.txg.wait_synced(txg)?)
    }
}

impl Inner {
    fn promote_locked(&self, name: &str) -> Result<(), DslError> {
        let mos = &self.mos;
        let (fname, k, origin_obj, f_origin, c_obj, f_obj, before) = {
            let map = self.datasets.read();
            let c = map
                .get(name)
                .ok_or_else(|| DslError::NoSuchDataset(name.into()))?;
            if c.dir.origin_obj == 0 {
                return Err(DslError::Invalid("not a cloned filesystem".into()));
            }
            let (f, k) = find_snap(&map, c.dir.origin_obj)
                .ok_or_else(|| DslError::Corrupted(format!("the origin of '{name}' is missing")))?;
            let fd = &map[f];
            let clash: Vec<&str> = fd.snaps[..=k]
                .iter()
                .filter(|s| c.snaps.iter().any(|t| t.name == s.name))
                .map(|s| s.name.as_str())
                .collect();
            if !clash.is_empty() {
                return Err(DslError::Exists(format!(
                    "{name}: the snapshot names {} of the origin's filesystem are taken here",
                    clash.join(", ")
                )));
            }
            let before = (own_charge(&map, f), own_charge(&map, name));
            (
                f.to_string(),
                k,
                c.dir.origin_obj,
                fd.dir.origin_obj,
                c.ds_obj,
                fd.ds_obj,
                before,
            )
        };
        {
            let mut map = self.datasets.write();
            let mut moved: Vec<crate::snapshot::Snap> = {
                let fd = map.get_mut(&fname).expect("found above");
                fd.snaps.drain(..=k).collect()
            };
            let f_snapnames = map[&fname].ds.snapnames_obj;
            let c = map.get_mut(name).expect("found above");
            if c.ds.snapnames_obj == 0 {
                c.ds.snapnames_obj = mos::zap_create(mos, ObjType::DslSnapMap)?;
            }
            let next_of_origin = c.snaps.first().map_or(c.ds_obj, |s| s.obj);
            for s in &mut moved {
                s.phys.dir_obj = c.dir_obj;
                if s.obj == origin_obj {
                    s.phys.next_snap_obj = next_of_origin;
                }
                mos.set_bonus(s.obj, &s.phys.encode())?;
                mos::zap_remove(mos, f_snapnames, &s.name)?;
                mos::zap_set_u64(mos, c.ds.snapnames_obj, &s.name, s.obj)?;
            }
            moved.append(&mut c.snaps);
            c.snaps = moved;
            c.dir.origin_obj = f_origin;
            mos.set_bonus(c.dir_obj, &c.dir.encode())?;
            mos.set_bonus(c.ds_obj, &c.ds.encode())?;
            let f = map.get_mut(&fname).expect("found above");
            f.dir.origin_obj = origin_obj;
            mos.set_bonus(f.dir_obj, &f.dir.encode())?;
        }
        // `O`'s clones: `F` in place of `C`; `F`'s old origin's: `C` in
        // place of `F`.
        self.set_clone(origin_obj, c_obj, false)?;
        self.set_clone(origin_obj, f_obj, true)?;
        if f_origin != 0 {
            self.set_clone(f_origin, f_obj, false)?;
            self.set_clone(f_origin, c_obj, true)?;
        }
        // Each directory is charged what it holds now.
        let after = {
            let map = self.datasets.read();
            (own_charge(&map, &fname), own_charge(&map, name))
        };
        let charge = |ds: &str, old: Space, new: Space| {
            let d = |a: u64, b: u64| b as i64 - a as i64;
            self.charge_ancestors(
                ds,
                d(old.dsize, new.dsize),
                d(old.psize, new.psize),
                d(old.lsize, new.lsize),
            )
        };
        charge(&fname, before.0, after.0)?;
        charge(name, before.1, after.1)
    }
}
