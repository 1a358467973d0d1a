//! `zfs snapshot` and `zfs destroy` as zfs(8) has them, and which datasets
//! and snapshots `zfs list`/`zfs get` select.
//!
//! Snapshot specifications of `zfs destroy` (zfs-destroy(8)):
//! `ds@a` one snapshot; `ds@a,b` several; `ds@a%c` every snapshot from
//! `a` to `c` in creation order, `ds@%c` from the oldest, `ds@a%` to the
//! newest; the forms combine (`ds@a,c%e`). With `-r` the same
//! specification applies to every descendant that has such snapshots.
//!
//! Selection (`zfs list`, `zfs get`): each named dataset, then with `-r`/
//! `-d` its descendants depth-first; each filesystem is followed by its
//! snapshots oldest first when snapshots are wanted. A snapshot sits one
//! level below its dataset, so `-d 1 -t snapshot DS` lists DS's
//! snapshots. `zfs list -t snapshot DS` without `-r` lists DS's own
//! snapshots too, as OpenZFS does; without `-t` snapshots are listed only
//! when the pool's `listsnapshots` is on (`zfs get` lists every type).

use std::sync::Arc;

use tarn_dsl::{names, DslError, Pool};

use super::{datasets, dsl_err, history, mounts, Engine};
use crate::api::{
    DatasetType, DestroyReport, DiffRow, ZfsDestroy, ZfsDiff, ZfsRollback, ZfsSnapshot,
};
use crate::backend::BackendError;

/// zfs-diff(8)'s `-F` letter for a file type.
fn diff_type(kind: tarn_zpl::FileType) -> char {
    use tarn_zpl::FileType as T;
    match kind {
        T::Regular => 'F',
        T::Directory => '/',
        T::Symlink => '@',
        T::Fifo => '|',
        T::Socket => '=',
        T::CharDevice => 'C',
        T::BlockDevice => 'B',
    }
}

/// The snapshots of `dataset` a destroy specification (the part after
/// `@`) names, oldest first; a name that matches none is an error.
pub fn expand_spec(pool: &Pool, dataset: &str, spec: &str) -> Result<Vec<String>, BackendError> {
    let all = pool.snapshots(dataset);
    let short: Vec<&str> = all
        .iter()
        .map(|n| n.split_once('@').map_or("", |(_, s)| s))
        .collect();
    let index = |name: &str| -> Result<usize, BackendError> {
        short
            .iter()
            .position(|s| *s == name)
            .ok_or_else(|| BackendError::NoSuchDataset(format!("{dataset}@{name}")))
    };
    let mut picked = vec![false; all.len()];
    for part in spec.split(',') {
        match part.split_once('%') {
            None => picked[index(part)?] = true,
            Some((from, to)) => {
                let lo = if from.is_empty() { 0 } else { index(from)? };
                let hi = if to.is_empty() {
                    all.len().saturating_sub(1)
                } else {
                    index(to)?
                };
                if lo > hi {
                    return Err(BackendError::Invalid(format!(
                        "'{from}' is newer than '{to}': a range runs from the older snapshot"
                    )));
                }
                for p in &mut picked[lo..=hi] {
                    *p = true;
                }
            }
        }
    }
    Ok(all
        .into_iter()
        .zip(picked)
        .filter_map(|(n, p)| p.then_some(n))
        .collect())
}

/// Like [`expand_spec`], but names the dataset does not have are passed
/// over instead of refused (a range needs both of its named ends).
fn expand_spec_lenient(
    pool: &Pool,
    dataset: &str,
    spec: &str,
) -> Result<Vec<String>, BackendError> {
    let known: Vec<String> = pool.snapshots(dataset);
    let has = |n: &str| known.iter().any(|k| k.ends_with(&format!("@{n}")));
    let kept: Vec<&str> = spec
        .split(',')
        .filter(|part| match part.split_once('%') {
            None => has(part),
            Some((a, b)) => (a.is_empty() || has(a)) && (b.is_empty() || has(b)),
        })
        .collect();
    if kept.is_empty() || known.is_empty() {
        return Ok(Vec::new());
    }
    expand_spec(pool, dataset, &kept.join(","))
}

impl Engine {
    pub(super) fn snapshot(&self, a: &ZfsSnapshot) -> Result<(), BackendError> {
        let _config = self.config.lock();
        let Some(first) = a.names.first() else {
            return Err(BackendError::Invalid("missing snapshot argument".into()));
        };
        let pool = self.dataset_pool(first)?;
        let mut all = Vec::new();
        let mut datasets_touched = Vec::new();
        for name in &a.names {
            let (ds, snap) = name
                .split_once('@')
                .ok_or_else(|| BackendError::Invalid("missing '@' delimiter".into()))?;
            if names::pool_of(ds) != names::pool_of(first) {
                return Err(BackendError::Invalid(
                    "snapshots of one command must be in the same pool".into(),
                ));
            }
            if !pool.dataset_exists(ds) {
                return Err(BackendError::NoSuchDataset(ds.to_string()));
            }
            let targets = if a.recursive {
                datasets::subtree(&pool, ds, None)
            } else {
                vec![ds.to_string()]
            };
            for t in targets {
                all.push(format!("{t}@{snap}"));
                datasets_touched.push(t);
            }
        }
        self.mounts.flush(&datasets_touched);
        pool.snapshot(&all, &a.props).map_err(|e| match e {
            DslError::Exists(n) => BackendError::DatasetExists(n),
            other => dsl_err(other),
        })?;
        for ds in &datasets_touched {
            if let Err(e) = self.zvols.refresh_snapshots(&pool, ds) {
                eprintln!("tarn daemon: {e}");
            }
        }
        let flags = if a.recursive { "-r" } else { "" };
        pool.log_history(&history::with_props(
            "zfs snapshot",
            flags,
            &a.props,
            &a.names.join(" "),
        ));
        Ok(())
    }

    /// `zfs destroy` of snapshots (`a.name` holds an `@`).
    pub(super) fn destroy_snapshots(&self, a: &ZfsDestroy) -> Result<DestroyReport, BackendError> {
        let _config = self.config.lock();
        let (ds, spec) = a.name.split_once('@').expect("the caller checked for '@'");
        let pool = self.dataset_pool(ds)?;
        if !pool.dataset_exists(ds) {
            return Err(BackendError::NoSuchDataset(ds.to_string()));
        }
        // As zfs(8): names that match nothing are passed over; a request
        // that matches no snapshot at all is refused.
        let mut doomed = expand_spec_lenient(&pool, ds, spec)?;
        if a.recursive {
            for child in datasets::descendants(&pool, ds) {
                doomed.extend(expand_spec_lenient(&pool, &child, spec)?);
            }
        }
        if doomed.is_empty() {
            return Err(BackendError::Message(
                "could not find any snapshots to destroy; check snapshot names.".into(),
            ));
        }
        if let Some(busy) = doomed.iter().find(|n| self.is_being_sent(n)) {
            return Err(BackendError::Message(format!(
                "cannot destroy snapshot {busy}: dataset is busy"
            )));
        }
        let reclaim = pool.snapshots_destroy_space(&doomed).map_err(dsl_err)?;
        let clones = if a.dependents {
            self.destroy_clones(&pool, &doomed, a.force, a.dry_run)?
        } else {
            Vec::new()
        };
        let mut destroyed = clones;
        destroyed.extend(doomed.iter().cloned());
        let report = DestroyReport {
            destroyed,
            reclaim,
            snapshots: true,
        };
        if a.dry_run {
            return Ok(report);
        }
        self.zvols.stop(&doomed);
        let destroyed = pool
            .snapshots_destroy(&doomed, a.defer)
            .map_err(|e| match e {
                DslError::Busy(why) => BackendError::Busy(why),
                other => dsl_err(other),
            });
        let mut heads: Vec<&str> = doomed.iter().filter_map(|n| n.split('@').next()).collect();
        heads.dedup();
        for ds in heads {
            let _ = self.zvols.refresh_snapshots(&pool, ds);
        }
        destroyed?;
        for name in &doomed {
            if let Some((ds, snap)) = name.split_once('@') {
                if !pool.snapshot_exists(name) {
                    self.mounts.snapshot_gone(ds, snap);
                }
            }
        }
        let mut flags = String::new();
        for (on, f) in [(a.recursive, 'r'), (a.defer, 'd'), (a.dependents, 'R')] {
            if on {
                flags.push(f);
            }
        }
        let flags = if flags.is_empty() {
            String::new()
        } else {
            format!("-{flags}")
        };
        pool.log_history(&history::with_props("zfs destroy", &flags, &[], &a.name));
        Ok(report)
    }

    /// `zfs diff FROM [TO]`: files changed from snapshot `FROM` to a later
    /// snapshot or the dataset now (see tarn-zpl's `diff`), with paths
    /// under the dataset's mountpoint.
    pub(super) fn diff(&self, a: &ZfsDiff) -> Result<Vec<DiffRow>, BackendError> {
        let (ds, _) = a
            .from
            .split_once('@')
            .ok_or_else(|| BackendError::Invalid(format!("'{}' is not a snapshot", a.from)))?;
        let pool = self.dataset_pool(ds)?;
        let from = pool.snapshot_info(&a.from).map_err(dsl_err)?;
        let to = a.to.clone().unwrap_or_else(|| ds.to_string());
        let (to_ds, to_snap) = match to.split_once('@') {
            Some((d, _)) => (d.to_string(), true),
            None => (to.clone(), false),
        };
        if to_ds != ds {
            return Err(BackendError::Invalid(format!(
                "'{to}' is not '{ds}' or one of its snapshots"
            )));
        }
        let new_os = if to_snap {
            let info = pool.snapshot_info(&to).map_err(dsl_err)?;
            if info.createtxg <= from.createtxg {
                return Err(BackendError::Invalid(format!(
                    "'{}' is not earlier than '{to}'",
                    a.from
                )));
            }
            pool.snapshot_objset(&to).map_err(dsl_err)?
        } else {
            self.mounts.flush(&[ds.to_string()]);
            pool.sync().map_err(dsl_err)?;
            pool.dataset_committed_objset(ds).map_err(dsl_err)?
        };
        let old = mounts::readonly_zpl(&pool, ds, pool.snapshot_objset(&a.from).map_err(dsl_err)?)?;
        let new = mounts::readonly_zpl(&pool, ds, new_os)?;
        let changes = tarn_zpl::diff(&old, &new, from.createtxg)
            .map_err(|e| BackendError::Other(format!("cannot diff: {e}")))?;
        let base = match self.mounts.plan(&pool, ds)?.place {
            mounts::Place::Dir(p) => p.display().to_string(),
            _ => format!("/{ds}"),
        };
        let full = |rel: &str| {
            if rel.is_empty() {
                format!("{base}/")
            } else {
                format!("{base}/{rel}")
            }
        };
        Ok(changes
            .into_iter()
            .map(|c| DiffRow {
                change: c.change.to_string(),
                path: full(&c.path),
                new_path: c.new_path.as_deref().map(full),
                kind: diff_type(c.kind).to_string(),
                ctime_sec: c.ctime.sec,
                ctime_nsec: c.ctime.nsec,
            })
            .collect())
    }

    /// `zfs destroy DS#BOOKMARK`.
    pub(super) fn destroy_bookmark(&self, a: &ZfsDestroy) -> Result<DestroyReport, BackendError> {
        let _config = self.config.lock();
        let pool = self.dataset_pool(&a.name)?;
        let report = DestroyReport {
            destroyed: vec![a.name.clone()],
            reclaim: 0,
            snapshots: false,
        };
        if a.dry_run {
            return Ok(report);
        }
        pool.bookmark_destroy(&a.name).map_err(dsl_err)?;
        pool.log_history(&format!("zfs destroy {}", a.name));
        Ok(report)
    }

    /// Destroys the clones of `snaps` (and whatever depends on them),
    /// for `-R`; their names, in the order they went.
    pub(super) fn destroy_clones(
        &self,
        pool: &Arc<Pool>,
        snaps: &[String],
        force: bool,
        dry_run: bool,
    ) -> Result<Vec<String>, BackendError> {
        let mut seen = std::collections::HashSet::new();
        self.destroy_clones_of(pool, snaps, force, dry_run, &mut seen)
    }

    fn destroy_clones_of(
        &self,
        pool: &Arc<Pool>,
        snaps: &[String],
        force: bool,
        dry_run: bool,
        seen: &mut std::collections::HashSet<String>,
    ) -> Result<Vec<String>, BackendError> {
        let mut gone = Vec::new();
        for s in snaps {
            let clones = match pool.snapshot_info(s) {
                Ok(info) => info.clones,
                Err(_) => continue,
            };
            for clone in clones {
                if !clone.contains('/') {
                    return Err(BackendError::Invalid(format!(
                        "'{clone}' depends on '{s}' and is the pool's root dataset: \
                         promote '{clone}' first"
                    )));
                }
                let source = s.split_once('@').map_or(s.as_str(), |(d, _)| d);
                if source == clone || source.starts_with(&format!("{clone}/")) {
                    return Err(BackendError::Invalid(format!(
                        "'{clone}' depends on '{s}' but holds it: promote '{clone}' first"
                    )));
                }
                let mut below = datasets::subtree(pool, &clone, None);
                below.reverse();
                for ds in &below {
                    if !seen.insert(ds.clone()) {
                        continue;
                    }
                    let own = pool.snapshots(ds);
                    gone.extend(self.destroy_clones_of(pool, &own, force, dry_run, seen)?);
                    gone.extend(own.iter().cloned());
                    if !dry_run {
                        self.mounts.detach(std::slice::from_ref(ds), force)?;
                        if !own.is_empty() {
                            pool.snapshots_destroy(&own, false).map_err(dsl_err)?;
                        }
                        pool.dataset_destroy(ds).map_err(dsl_err)?;
                    }
                    gone.push(ds.clone());
                }
            }
        }
        Ok(gone)
    }

    /// `zfs rollback [-r] SNAP`: only to the newest snapshot unless `-r`
    /// destroys the later ones.
    pub(super) fn rollback(&self, a: &ZfsRollback) -> Result<(), BackendError> {
        let _config = self.config.lock();
        let (ds, _) = a
            .name
            .split_once('@')
            .ok_or_else(|| BackendError::Invalid("not a snapshot".into()))?;
        let pool = self.dataset_pool(ds)?;
        if !pool.snapshot_exists(&a.name) {
            return Err(BackendError::NoSuchDataset(a.name.clone()));
        }
        let all = pool.snapshots(ds);
        let at = all.iter().position(|n| *n == a.name).unwrap_or(0);
        let later: Vec<String> = all[at + 1..].to_vec();
        let txg = pool.snapshot_info(&a.name).map_err(dsl_err)?.createtxg;
        let later_marks: Vec<String> = pool
            .bookmarks(ds)
            .map_err(dsl_err)?
            .into_iter()
            .filter(|b| b.createtxg > txg)
            .map(|b| format!("{ds}#{}", b.name))
            .collect();
        if (!later.is_empty() || !later_marks.is_empty()) && !a.recursive && !a.dependents {
            let all: Vec<&str> = later
                .iter()
                .chain(&later_marks)
                .map(String::as_str)
                .collect();
            return Err(BackendError::Message(format!(
                "cannot rollback to '{}': more recent snapshots or bookmarks exist\n\
                 use '-r' to force deletion of the following snapshots and bookmarks:\n{}",
                a.name,
                all.join("\n")
            )));
        }
        if a.dependents {
            self.destroy_clones(&pool, &later, a.force, false)?;
        }
        for b in &later_marks {
            pool.bookmark_destroy(b).map_err(dsl_err)?;
        }
        if !later.is_empty() {
            self.zvols.stop(&later);
            pool.snapshots_destroy(&later, false).map_err(|e| match e {
                DslError::Busy(why) => BackendError::Busy(why),
                other => dsl_err(other),
            })?;
            for name in &later {
                if let Some((d, s)) = name.split_once('@') {
                    self.mounts.snapshot_gone(d, s);
                }
            }
        }
        self.mounts.rollback(&pool, ds, || {
            self.zvols.replace(&pool, ds, || {
                pool.rollback(&a.name).map(|_| ()).map_err(dsl_err)
            })
        })?;
        let flags = if a.recursive { "-r" } else { "" };
        pool.log_history(&history::with_props("zfs rollback", flags, &[], &a.name));
        Ok(())
    }

    /// The datasets and snapshots `names` (with `-r`/`-d`) select, of the
    /// `types` wanted, with their pools (see the module comment).
    pub(super) fn select_typed(
        &self,
        names: &[String],
        recursive: bool,
        depth: Option<u32>,
        types: &[DatasetType],
        listing: bool,
    ) -> Result<Vec<(Arc<Pool>, String)>, BackendError> {
        let want =
            |t: DatasetType| types.is_empty() && t != DatasetType::Snapshot || types.contains(&t);
        let mut out = Vec::new();
        // Named snapshots and bookmarks stand for themselves.
        let (snaps, dsets): (Vec<&String>, Vec<&String>) =
            names.iter().partition(|n| n.contains(['@', '#']));
        for name in &snaps {
            let pool = self.dataset_pool(name)?;
            let exists = match name.split_once('#') {
                Some((ds, bm)) => pool
                    .bookmarks(ds)
                    .map_err(dsl_err)?
                    .iter()
                    .any(|b| b.name == bm),
                None => pool.snapshot_exists(name),
            };
            if !exists {
                return Err(BackendError::NoSuchDataset((*name).clone()));
            }
            out.push((pool, (*name).clone()));
        }
        let dsets: Vec<String> = dsets.into_iter().cloned().collect();
        if !snaps.is_empty() && dsets.is_empty() {
            return Ok(out);
        }
        // Snapshots of a named dataset are listed one level below it.
        let only_snaps_of_named = !recursive
            && !dsets.is_empty()
            && !types.is_empty()
            && types
                .iter()
                .all(|t| matches!(t, DatasetType::Snapshot | DatasetType::Bookmark));
        let level_of =
            |name: &str, root: &str| (name.matches('/').count() - root.matches('/').count()) as u32;
        let roots: Vec<String> = if dsets.is_empty() {
            self.pools.read().keys().cloned().collect()
        } else {
            dsets.clone()
        };
        let effective_depth = match (recursive, dsets.is_empty()) {
            (true, _) => depth,
            (false, true) => None,
            (false, false) if only_snaps_of_named => Some(1),
            (false, false) => Some(0),
        };
        for (pool, ds) in self.select(&dsets, recursive, depth)? {
            let root = roots
                .iter()
                .filter(|r| ds == **r || ds.starts_with(&format!("{r}/")))
                .max_by_key(|r| r.len())
                .cloned()
                .unwrap_or_else(|| ds.clone());
            let level = level_of(&ds, &root);
            let typ = if pool.is_volume(&ds) {
                DatasetType::Volume
            } else {
                DatasetType::Filesystem
            };
            if want(typ) {
                out.push((pool.clone(), ds.clone()));
            }
            let list_snaps = want(DatasetType::Snapshot)
                || (types.is_empty()
                    && listing
                    && pool
                        .pool_prop("listsnapshots")
                        .is_ok_and(|v| v.value == "on"));
            let snaps_in_depth = effective_depth.is_none_or(|d| level < d);
            if list_snaps && snaps_in_depth {
                for s in pool.snapshots(&ds) {
                    out.push((pool.clone(), s));
                }
            }
            if types.contains(&DatasetType::Bookmark) && snaps_in_depth {
                for b in pool.bookmarks(&ds).map_err(dsl_err)? {
                    out.push((pool.clone(), format!("{ds}#{}", b.name)));
                }
            }
        }
        Ok(out)
    }
}
