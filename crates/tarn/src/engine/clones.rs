//! `zfs clone`, `zfs promote`, `zfs rename`, `zfs hold`/`release`/
//! `holds` and `zfs bookmark`: the engine's side (mounts, history, the
//! snapshots `.zfs` shows); the dataset layer does the work (tarn-dsl's
//! `clone`, `rename`, `holds`).
//!
//! A clone is mounted at once, as `zfs clone` does. Renaming a filesystem
//! unmounts it and its descendants (a busy one refuses the rename unless
//! `-f`), renames, and mounts them again where their `mountpoint` now
//! points.

use std::sync::Arc;

use tarn_dsl::{names, DslError, Pool};

use super::mounts::How;
use super::{datasets, dsl_err, history, Engine};
use crate::api::{HoldRow, ZfsBookmark, ZfsClone, ZfsHold, ZfsHolds, ZfsPromote, ZfsRename};
use crate::backend::BackendError;

fn exists_err(e: DslError) -> BackendError {
    match e {
        DslError::Exists(n) => BackendError::DatasetExists(n),
        other => dsl_err(other),
    }
}

impl Engine {
    pub(super) fn clone_dataset(&self, a: &ZfsClone) -> Result<(), BackendError> {
        let _config = self.config.lock();
        let (origin_ds, _) = a
            .snapshot
            .split_once('@')
            .ok_or_else(|| BackendError::Invalid("not a snapshot".into()))?;
        if names::pool_of(origin_ds) != names::pool_of(&a.name) {
            return Err(BackendError::Invalid(
                "source and target pools differ".into(),
            ));
        }
        let pool = self.dataset_pool(&a.snapshot)?;
        if !pool.snapshot_exists(&a.snapshot) {
            return Err(BackendError::NoSuchDataset(a.snapshot.clone()));
        }
        if pool.dataset_exists(&a.name) {
            return Err(BackendError::DatasetExists(a.name.clone()));
        }
        let mut created = super::create_parents(&pool, &a.name, a.parents)?;
        for ds in &created {
            super::mounts::format(&pool, ds)?;
        }
        pool.clone_create(&a.snapshot, &a.name, &a.props)
            .map_err(exists_err)?;
        created.push(a.name.clone());
        let flags = if a.parents { "-p" } else { "" };
        pool.log_history(&history::with_props(
            "zfs clone",
            flags,
            &a.props,
            &format!("{} {}", a.snapshot, a.name),
        ));
        BackendError::combine(self.bring_up(&pool, &created, How::default()))
    }

    pub(super) fn promote(&self, a: &ZfsPromote) -> Result<(), BackendError> {
        let _config = self.config.lock();
        let pool = self.dataset_pool(&a.name)?;
        if !pool.dataset_exists(&a.name) {
            return Err(BackendError::NoSuchDataset(a.name.clone()));
        }
        let origin = pool
            .origin(&a.name)
            .ok_or_else(|| BackendError::Invalid("not a cloned filesystem".into()))?;
        let (old_fs, _) = origin.split_once('@').expect("a snapshot name");
        let before = pool.snapshots(old_fs);
        pool.promote(&a.name).map_err(exists_err)?;
        // The snapshots that moved leave the old filesystem's .zfs.
        for name in before {
            if !pool.snapshot_exists(&name) {
                if let Some((d, s)) = name.split_once('@') {
                    self.mounts.snapshot_gone(d, s);
                }
            }
        }
        pool.log_history(&format!("zfs promote {}", a.name));
        Ok(())
    }

    pub(super) fn rename(&self, a: &ZfsRename) -> Result<(), BackendError> {
        let _config = self.config.lock();
        if a.from.contains('@') {
            return self.rename_snapshot(a);
        }
        if a.to.contains('@') {
            return Err(BackendError::Invalid(
                "a filesystem cannot be renamed to a snapshot name".into(),
            ));
        }
        if names::pool_of(&a.from) != names::pool_of(&a.to) {
            return Err(BackendError::Invalid(
                "datasets must be within the same pool".into(),
            ));
        }
        let pool = self.dataset_pool(&a.from)?;
        if !pool.dataset_exists(&a.from) {
            return Err(BackendError::NoSuchDataset(a.from.clone()));
        }
        if pool.dataset_exists(&a.to) {
            return Err(BackendError::DatasetExists(a.to.clone()));
        }
        let created = super::create_parents(&pool, &a.to, a.parents)?;
        for ds in &created {
            super::mounts::format(&pool, ds)?;
        }
        BackendError::combine(self.bring_up(&pool, &created, How::default()))?;
        let subtree = datasets::subtree(&pool, &a.from, None);
        let detached = self.take_down(&pool, &subtree, a.force)?;
        let renamed = pool.rename_dataset(&a.from, &a.to).map_err(exists_err);
        let moved = |old: &str| format!("{}{}", a.to, &old[a.from.len()..]);
        // Volumes come back at their new (or, on failure, old) names.
        let volumes: Vec<String> = subtree
            .iter()
            .filter(|d| renamed.is_ok() || pool.is_volume(d))
            .map(|d| if renamed.is_ok() { moved(d) } else { d.clone() })
            .collect();
        let mut errors = self.zvols.serve_auto(&pool, &volumes);
        for d in &detached {
            let name = if renamed.is_ok() {
                moved(&d.name)
            } else {
                d.name.clone()
            };
            let how = How {
                overlay: false,
                readonly: d.readonly,
            };
            if let Err(e) = self.mount_again(&pool, &name, how) {
                errors.push(e);
            }
        }
        renamed?;
        let mut flags = String::new();
        for (on, f) in [(a.parents, 'p'), (a.force, 'f')] {
            if on {
                flags.push(f);
            }
        }
        let flags = if flags.is_empty() {
            String::new()
        } else {
            format!("-{flags} ")
        };
        pool.log_history(&format!("zfs rename {flags}{} {}", a.from, a.to));
        BackendError::combine(errors)
    }

    /// Mounts a filesystem a rename unmounted, where it now belongs (if
    /// its properties still want it mounted).
    fn mount_again(&self, pool: &Arc<Pool>, ds: &str, how: How) -> Result<(), BackendError> {
        let plan = self.mounts.plan(pool, ds)?;
        if !plan.automatic() && how.readonly.is_none() {
            return Ok(());
        }
        self.mounts.mount(pool, ds, how)
    }

    /// `zfs rename [-r] DS@OLD DS@NEW` (or `@NEW`).
    fn rename_snapshot(&self, a: &ZfsRename) -> Result<(), BackendError> {
        let (ds, old) = a.from.split_once('@').expect("checked by the caller");
        let new = match a.to.split_once('@') {
            Some((tds, new)) if tds.is_empty() || tds == ds => new,
            Some(_) => {
                return Err(BackendError::Invalid(
                    "snapshots must be part of the same dataset".into(),
                ))
            }
            None => {
                return Err(BackendError::Invalid(
                    "a snapshot can only be renamed to a snapshot name".into(),
                ))
            }
        };
        names::validate_snapshot_name(&format!("{ds}@{new}"))
            .map_err(|e| BackendError::Invalid(e.to_string()))?;
        let pool = self.dataset_pool(ds)?;
        if !pool.snapshot_exists(&a.from) {
            return Err(BackendError::NoSuchDataset(a.from.clone()));
        }
        let targets: Vec<String> = if a.recursive {
            datasets::subtree(&pool, ds, None)
                .into_iter()
                .filter(|d| pool.snapshot_exists(&format!("{d}@{old}")))
                .collect()
        } else {
            vec![ds.to_string()]
        };
        for d in &targets {
            if pool.snapshot_exists(&format!("{d}@{new}")) {
                return Err(BackendError::DatasetExists(format!("{d}@{new}")));
            }
        }
        for d in &targets {
            self.zvols.stop(&[format!("{d}@{old}")]);
            pool.rename_snapshot(&format!("{d}@{old}"), new)
                .map_err(exists_err)?;
            self.mounts.snapshot_gone(d, old);
            let _ = self.zvols.refresh_snapshots(&pool, d);
        }
        let flags = if a.recursive { "-r " } else { "" };
        pool.log_history(&format!("zfs rename {flags}{} {ds}@{new}", a.from));
        Ok(())
    }

    /// The snapshots `names` mean, with `-r` the same snapshot of every
    /// descendant that has it.
    fn snapshots_named(
        &self,
        pool: &Pool,
        names: &[String],
        recursive: bool,
    ) -> Result<Vec<String>, BackendError> {
        let mut out = Vec::new();
        for name in names {
            let (ds, snap) = name
                .split_once('@')
                .ok_or_else(|| BackendError::Invalid(format!("'{name}' is not a snapshot")))?;
            if !pool.snapshot_exists(name) {
                return Err(BackendError::NoSuchDataset(name.clone()));
            }
            if recursive {
                for d in datasets::subtree(pool, ds, None) {
                    let full = format!("{d}@{snap}");
                    if pool.snapshot_exists(&full) {
                        out.push(full);
                    }
                }
            } else {
                out.push(name.clone());
            }
        }
        Ok(out)
    }

    pub(super) fn hold(&self, a: &ZfsHold) -> Result<(), BackendError> {
        let _config = self.config.lock();
        let first = a
            .names
            .first()
            .ok_or_else(|| BackendError::Invalid("missing snapshot argument".into()))?;
        let pool = self.dataset_pool(first)?;
        let snaps = self.snapshots_named(&pool, &a.names, a.recursive)?;
        let r = if a.release {
            pool.release(&snaps, &a.tag)
        } else {
            pool.hold(&snaps, &a.tag)
        };
        r.map_err(|e| match e {
            DslError::Exists(why) => BackendError::Invalid(why),
            DslError::NoSuchDataset(why) if why.contains("no such tag") => {
                BackendError::Invalid(why)
            }
            other => dsl_err(other),
        })?;
        // A release may have ended a deferred destroy.
        for s in &snaps {
            if !pool.snapshot_exists(s) {
                if let Some((d, n)) = s.split_once('@') {
                    self.mounts.snapshot_gone(d, n);
                }
            }
        }
        let verb = if a.release { "release" } else { "hold" };
        let flags = if a.recursive { "-r " } else { "" };
        pool.log_history(&format!(
            "zfs {verb} {flags}{} {}",
            a.tag,
            a.names.join(" ")
        ));
        Ok(())
    }

    pub(super) fn holds(&self, a: &ZfsHolds) -> Result<Vec<HoldRow>, BackendError> {
        let mut rows = Vec::new();
        for name in &a.names {
            let pool = self.dataset_pool(name)?;
            for s in self.snapshots_named(&pool, std::slice::from_ref(name), a.recursive)? {
                for (tag, time) in pool.holds(&s).map_err(dsl_err)? {
                    rows.push(HoldRow {
                        name: s.clone(),
                        tag,
                        time,
                    });
                }
            }
        }
        Ok(rows)
    }

    pub(super) fn bookmark(&self, a: &ZfsBookmark) -> Result<(), BackendError> {
        let _config = self.config.lock();
        let pool = self.dataset_pool(&a.target)?;
        pool.bookmark(&a.source, &a.target).map_err(exists_err)?;
        pool.log_history(&format!("zfs bookmark {} {}", a.source, a.target));
        Ok(())
    }
}
