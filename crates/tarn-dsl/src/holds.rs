//! User holds and bookmarks (zfs-hold(8), zfs-bookmark(8)).
//!
//! A **hold** is a named reference on a snapshot (`zfs hold TAG SNAP`):
//! while a snapshot has one, `zfs destroy` refuses it, or with `-d` marks
//! it to go once the last hold (and clone) is released. Holds live in the
//! snapshot's `holds` ZAP: tag → time it was taken.
//!
//! A **bookmark** (`DS#NAME`) remembers a snapshot's guid, txg and
//! creation time after the snapshot itself is gone, so that an
//! incremental send can still start from it. Bookmarks live in the head's
//! `bookmarks` ZAP: name → `[guid, createtxg, creation]`.

use tarn_dmu::ZapValue;
use tarn_format::dsl::{DS_EXT_BOOKMARKS, DS_EXT_HOLDS};
use tarn_format::{ObjType, FEATURE_SNAPSHOTS};

use crate::mos;
use crate::pool::{now, Pool};
use crate::snapshot::{ext_get, ext_make, split};
use crate::DslError;

/// A bookmark: what an incremental send needs of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bookmark {
    /// The name after `#`.
    pub name: String,
    pub guid: u64,
    pub createtxg: u64,
    pub creation: u64,
}

impl Pool {
    /// `zfs hold TAG SNAP…`: every hold in one txg, or none (a tag a
    /// snapshot already has is refused).
    pub fn hold(&self, names: &[String], tag: &str) -> Result<(), DslError> {
        let inner = self.inner();
        let txg = {
            let h = inner.txg.hold()?;
            let _sync = inner.sync_lock.lock();
            for name in names {
                if self.holds(name)?.iter().any(|(t, _)| t == tag) {
                    return Err(DslError::Exists(format!(
                        "{name}: tag '{tag}' already exists on this dataset"
                    )));
                }
            }
            for name in names {
                let (head, i) = inner.snap_index(name)?;
                let mut map = inner.datasets.write();
                let s = &mut map.get_mut(&head).expect("found").snaps[i];
                let mut ext = s.phys.ext_obj;
                let obj = ext_make(&inner.mos, &mut ext, DS_EXT_HOLDS, ObjType::DslHolds)?;
                mos::zap_set_u64(&inner.mos, obj, tag, now())?;
                if ext != s.phys.ext_obj {
                    s.phys.ext_obj = ext;
                    inner.mos.set_bonus(s.obj, &s.phys.encode())?;
                }
            }
            h.txg
        };
        Ok(inner.txg.wait_synced(txg)?)
    }

    /// `zfs release TAG SNAP…`: a snapshot marked for deferred destruction
    /// goes with its last hold.
    pub fn release(&self, names: &[String], tag: &str) -> Result<(), DslError> {
        let inner = self.inner();
        let txg = {
            let h = inner.txg.hold()?;
            let _sync = inner.sync_lock.lock();
            for name in names {
                if !self.holds(name)?.iter().any(|(t, _)| t == tag) {
                    return Err(DslError::NoSuchDataset(format!(
                        "{name}: no such tag on this dataset"
                    )));
                }
            }
            for name in names {
                let (head, i) = inner.snap_index(name)?;
                let ext = inner.datasets.read()[&head].snaps[i].phys.ext_obj;
                if let Some(obj) = ext_get(&inner.mos, ext, DS_EXT_HOLDS)? {
                    mos::zap_remove(&inner.mos, obj, tag)?;
                }
                inner.destroy_if_deferred(&head, i)?;
            }
            h.txg
        };
        Ok(inner.txg.wait_synced(txg)?)
    }

    /// The holds of a snapshot: (tag, time taken), by tag.
    pub fn holds(&self, name: &str) -> Result<Vec<(String, u64)>, DslError> {
        let inner = self.inner();
        let (head, i) = inner.snap_index(name)?;
        let ext = inner.datasets.read()[&head].snaps[i].phys.ext_obj;
        let Some(obj) = ext_get(&inner.mos, ext, DS_EXT_HOLDS)? else {
            return Ok(Vec::new());
        };
        let mut out: Vec<(String, u64)> = mos::zap_list(&inner.mos, obj)?
            .into_iter()
            .map(|(k, v)| (k, v.as_single_u64().unwrap_or(0)))
            .collect();
        out.sort();
        Ok(out)
    }

    /// `zfs bookmark SRC DS#NAME`: `SRC` is a snapshot of `DS` or one of
    /// its bookmarks.
    pub fn bookmark(&self, source: &str, target: &str) -> Result<(), DslError> {
        let (ds, name) = target
            .split_once('#')
            .ok_or_else(|| DslError::Invalid(format!("'{target}' is not a bookmark name")))?;
        let from = if let Some((sds, _)) = split(source) {
            if sds != ds {
                return Err(DslError::Invalid(
                    "a bookmark must be in the same filesystem as its source".into(),
                ));
            }
            let info = self.snapshot_info(source)?;
            Bookmark {
                name: name.to_string(),
                guid: info.guid,
                createtxg: info.createtxg,
                creation: info.creation,
            }
        } else if let Some((bds, bname)) = source.split_once('#') {
            if bds != ds {
                return Err(DslError::Invalid(
                    "a bookmark must be in the same filesystem as its source".into(),
                ));
            }
            let b = self
                .bookmarks(bds)?
                .into_iter()
                .find(|b| b.name == bname)
                .ok_or_else(|| DslError::NoSuchDataset(source.into()))?;
            Bookmark {
                name: name.to_string(),
                ..b
            }
        } else {
            return Err(DslError::Invalid(format!(
                "'{source}' is neither a snapshot nor a bookmark"
            )));
        };
        let inner = self.inner();
        let txg = {
            let h = inner.txg.hold()?;
            let _sync = inner.sync_lock.lock();
            if self.bookmarks(ds)?.iter().any(|b| b.name == name) {
                return Err(DslError::Exists(target.into()));
            }
            let mut map = inner.datasets.write();
            let d = map
                .get_mut(ds)
                .ok_or_else(|| DslError::NoSuchDataset(ds.into()))?;
            let mut ext = d.ds.ext_obj;
            let obj = ext_make(
                &inner.mos,
                &mut ext,
                DS_EXT_BOOKMARKS,
                ObjType::DslBookmarks,
            )?;
            inner.mos.zap_update(
                obj,
                name.as_bytes(),
                &ZapValue::U64s(vec![from.guid, from.createtxg, from.creation]),
            )?;
            if ext != d.ds.ext_obj {
                d.ds.ext_obj = ext;
                inner.mos.set_bonus(d.ds_obj, &d.ds.encode())?;
            }
            inner.spa.activate_feature(FEATURE_SNAPSHOTS);
            h.txg
        };
        Ok(inner.txg.wait_synced(txg)?)
    }

    /// The bookmarks of `ds`, oldest first.
    pub fn bookmarks(&self, ds: &str) -> Result<Vec<Bookmark>, DslError> {
        let inner = self.inner();
        let ext = {
            let map = inner.datasets.read();
            map.get(ds)
                .ok_or_else(|| DslError::NoSuchDataset(ds.into()))?
                .ds
                .ext_obj
        };
        let Some(obj) = ext_get(&inner.mos, ext, DS_EXT_BOOKMARKS)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (name, v) in mos::zap_list(&inner.mos, obj)? {
            let ZapValue::U64s(w) = v else {
                return Err(DslError::Corrupted(format!("bookmark '{name}'")));
            };
            let [guid, createtxg, creation] = w[..] else {
                return Err(DslError::Corrupted(format!("bookmark '{name}'")));
            };
            out.push(Bookmark {
                name,
                guid,
                createtxg,
                creation,
            });
        }
        out.sort_by_key(|b| (b.createtxg, b.name.clone()));
        Ok(out)
    }

    /// `zfs destroy DS#NAME`.
    pub fn bookmark_destroy(&self, target: &str) -> Result<(), DslError> {
        let (ds, name) = target
            .split_once('#')
            .ok_or_else(|| DslError::Invalid(format!("'{target}' is not a bookmark name")))?;
        let inner = self.inner();
        let txg = {
            let h = inner.txg.hold()?;
            let _sync = inner.sync_lock.lock();
            if !self.bookmarks(ds)?.iter().any(|b| b.name == name) {
                return Err(DslError::NoSuchDataset(target.into()));
            }
            let ext = inner.datasets.read()[ds].ds.ext_obj;
            if let Some(obj) = ext_get(&inner.mos, ext, DS_EXT_BOOKMARKS)? {
                mos::zap_remove(&inner.mos, obj, name)?;
            }
            h.txg
        };
        Ok(inner.txg.wait_synced(txg)?)
    }
}
