//! Request validation: the daemon's gate in front of the engine.
//!
//! The socket is root-only, but a request is still untrusted text: it may
//! come from a script, an older client or a bug. Everything the engine would
//! otherwise have to re-check is checked here once, before any backend
//! method runs (the [`crate::backend`] invariant):
//!
//! - pool and dataset names follow [`tarn_dsl::names`];
//! - property names exist and values parse, and are replaced by their
//!   canonical stored form ([`tarn_dsl::props`]), so the engine only ever
//!   sees `131072`, never `128k`;
//! - read-only and create-only properties are refused where they cannot be
//!   set, non-inheritable ones where they cannot be inherited;
//! - a create request's vdev layout passes [`crate::vdevspec::validate_layout`]
//!   (the replication-level check unless forced); an add request's passes
//!   the structural checks ([`crate::vdevspec::validate_add_layout`]) — its
//!   replication check compares with the pool's layout, in the engine;
//! - lists are bounded by [`crate::limits::REQUEST_NAMES_MAX`];
//! - a `zinject` fault is a valid combination with its numbers in range
//!   ([`inject_fault`], which the engine uses to build it).
//!
//! Messages are the complete text a CLI prints, in zpool(8)/zfs(8) wording.

use tarn_dsl::names;
use tarn_dsl::props::{self, PropDef};

use tarn_vdev::inject::{Fault, FaultKind, IoType, FREQ_PPM_MAX};

use crate::api::{
    InjectError, InjectIoType, PropAssign, Request, ScrubAction, ZfsList, ZfsMount, ZfsUnmount,
    ZinjectAdd, ZpoolAdd, ZpoolCreate, ZpoolImport,
};
use crate::limits::REQUEST_NAMES_MAX;
use crate::vdevspec;

/// The verb and object a failure of `req` is reported against:
/// `cannot <verb> '<target>': …`.
pub fn error_context(req: &Request) -> (&'static str, String) {
    let first = |names: &[String]| names.first().cloned().unwrap_or_default();
    match req {
        Request::ZpoolCreate(a) => ("create", a.name.clone()),
        Request::ZpoolDestroy(a) => ("destroy", a.name.clone()),
        Request::ZpoolList(a) => ("open", first(&a.names)),
        Request::ZpoolStatus(a) => ("open", first(&a.names)),
        Request::ZpoolGet(a) => ("open", first(&a.names)),
        Request::ZpoolSet(a) => ("set property for", a.name.clone()),
        Request::ZpoolImportScan(_) => ("import", String::new()),
        Request::ZpoolImport(a) => ("import", a.pool.clone()),
        Request::ZpoolExport(a) => ("export", a.name.clone()),
        Request::ZpoolHistory(a) => ("open", first(&a.names)),
        Request::ZpoolAdd(a) => ("add to", a.name.clone()),
        Request::ZpoolRemove(a) => ("remove", a.device.clone()),
        Request::ZpoolDetach(a) => ("detach", a.device.clone()),
        Request::ZpoolOffline(a) => ("offline", a.device.clone()),
        Request::ZpoolOnline(a) => ("online", a.device.clone()),
        Request::ZpoolClear(a) => ("clear", a.name.clone()),
        Request::ZpoolSync(a) => ("sync", first(&a.names)),
        Request::ZpoolIostat(a) => ("open", first(&a.names)),
        Request::ZpoolAttach(a) => (
            if a.replace { "replace" } else { "attach" },
            a.device.clone(),
        ),
        Request::ZpoolScrub(a) => (
            match a.action {
                ScrubAction::Start => "scrub",
                ScrubAction::Pause => "pause scrubbing",
                ScrubAction::Stop => "cancel scrubbing",
            },
            first(&a.names),
        ),
        Request::ZfsCreate(a) => ("create", a.name.clone()),
        Request::ZfsSnapshot(a) => ("create snapshot", first(&a.names)),
        Request::ZfsRollback(a) => ("rollback to", a.name.clone()),
        Request::ZfsClone(a) => ("create", a.name.clone()),
        Request::ZfsPromote(a) => ("promote", a.name.clone()),
        Request::ZfsRename(a) => ("rename", a.from.clone()),
        Request::ZfsHold(a) => (if a.release { "release" } else { "hold" }, first(&a.names)),
        Request::ZfsHolds(a) => ("get holds for", first(&a.names)),
        Request::ZfsBookmark(a) => ("create bookmark", a.target.clone()),
        Request::ZfsDiff(a) => ("diff", a.from.clone()),
        Request::ZfsSend(a) => ("send", a.snapshot.clone()),
        Request::ZfsReceive(a) => ("receive", a.target.clone()),
        Request::ZfsDestroy(a) => ("destroy", a.name.clone()),
        Request::ZfsList(a) => ("open", first(&a.names)),
        Request::ZfsGet(a) => ("open", first(&a.names)),
        Request::ZfsSet(a) => ("set property for", a.name.clone()),
        Request::ZfsInherit(a) => ("inherit property for", a.name.clone()),
        Request::ZfsMount(a) => ("mount", a.name.clone().unwrap_or_default()),
        Request::ZfsUnmount(a) => ("unmount", a.target.clone().unwrap_or_default()),
        Request::ZinjectAdd(a) => ("inject a fault into", a.pool.clone()),
        Request::ZinjectList(_) => ("list handlers", String::new()),
        Request::Zilstat(a) => ("open", first(&a.pools).max(first(&a.datasets))),
        Request::ZinjectClear(a) => (
            "clear handler",
            a.id.map_or_else(|| "all".to_string(), |id| id.to_string()),
        ),
        Request::Ping {} | Request::Shutdown {} => ("serve", String::new()),
    }
}

/// Check `req` and return it with property values in canonical form.
pub fn validate(req: Request) -> Result<Request, String> {
    let (verb, target) = error_context(&req);
    let fail = |why: String| format!("cannot {verb} '{target}': {why}");
    Ok(match req {
        Request::ZpoolCreate(a) => Request::ZpoolCreate(zpool_create(a, &fail)?),
        Request::ZpoolDestroy(a) => {
            pool_name(&a.name, &fail)?;
            Request::ZpoolDestroy(a)
        }
        Request::ZpoolExport(a) => {
            pool_name(&a.name, &fail)?;
            Request::ZpoolExport(a)
        }
        Request::ZpoolList(a) => {
            pool_names(&a.names)?;
            Request::ZpoolList(a)
        }
        Request::ZpoolStatus(a) => {
            pool_names(&a.names)?;
            Request::ZpoolStatus(a)
        }
        Request::ZpoolHistory(a) => {
            pool_names(&a.names)?;
            Request::ZpoolHistory(a)
        }
        Request::ZpoolIostat(a) => {
            pool_names(&a.names)?;
            Request::ZpoolIostat(a)
        }
        Request::ZpoolAdd(a) => Request::ZpoolAdd(zpool_add(a, &fail)?),
        Request::ZpoolRemove(a) => {
            pool_name(&a.name, &|why| format!("cannot open '{}': {why}", a.name))?;
            device_name(&a.device, &fail)?;
            Request::ZpoolRemove(a)
        }
        Request::ZpoolDetach(a) => {
            pool_name(&a.name, &|why| format!("cannot open '{}': {why}", a.name))?;
            device_name(&a.device, &fail)?;
            Request::ZpoolDetach(a)
        }
        Request::ZpoolAttach(a) => {
            pool_name(&a.name, &|why| format!("cannot open '{}': {why}", a.name))?;
            device_name(&a.device, &fail)?;
            device_name(&a.new_device, &fail)?;
            Request::ZpoolAttach(a)
        }
        Request::ZpoolScrub(a) => {
            if a.names.is_empty() {
                return Err("missing pool name argument".into());
            }
            pool_names(&a.names)?;
            Request::ZpoolScrub(a)
        }
        Request::ZpoolOffline(a) => {
            pool_name(&a.name, &|why| format!("cannot open '{}': {why}", a.name))?;
            device_name(&a.device, &fail)?;
            Request::ZpoolOffline(a)
        }
        Request::ZpoolOnline(a) => {
            pool_name(&a.name, &|why| format!("cannot open '{}': {why}", a.name))?;
            device_name(&a.device, &fail)?;
            Request::ZpoolOnline(a)
        }
        Request::ZpoolSync(a) => {
            for n in &a.names {
                pool_name(n, &fail)?;
            }
            Request::ZpoolSync(a)
        }
        Request::ZpoolClear(a) => {
            pool_name(&a.name, &fail)?;
            if let Some(d) = &a.device {
                device_name(d, &fail)?;
            }
            Request::ZpoolClear(a)
        }
        Request::ZpoolGet(mut a) => {
            pool_names(&a.names)?;
            a.props = prop_list(a.props, PropTable::Pool)?;
            Request::ZpoolGet(a)
        }
        Request::ZpoolSet(mut a) => {
            pool_name(&a.name, &fail)?;
            a.value = set_value(PropTable::Pool, &a.prop, &a.value).map_err(&fail)?;
            a.prop = canonical(PropTable::Pool, &a.prop);
            Request::ZpoolSet(a)
        }
        Request::ZpoolImportScan(a) => {
            dirs(&a.dirs)?;
            Request::ZpoolImportScan(a)
        }
        Request::ZpoolImport(a) => Request::ZpoolImport(zpool_import(a, &fail)?),
        Request::ZfsCreate(mut a) => {
            names::validate_dataset_name(&a.name).map_err(|e| fail(e.to_string()))?;
            if !a.name.contains('/') {
                return Err(fail("missing dataset name".into()));
            }
            a.props = create_props(PropTable::Dataset, a.props).map_err(&fail)?;
            if let Some(size) = &a.volsize {
                let bytes =
                    props::parse_dataset_value("volsize", size).map_err(|e| fail(e.to_string()))?;
                if bytes == "0" {
                    return Err(fail("volume size cannot be zero".into()));
                }
                a.volsize = Some(bytes);
            } else if a.sparse {
                return Err(fail("'-s' applies only to volumes (-V)".into()));
            }
            Request::ZfsCreate(a)
        }
        Request::ZfsSnapshot(mut a) => {
            if a.names.is_empty() {
                return Err("missing snapshot argument".into());
            }
            limit(&a.names)?;
            for name in &a.names {
                names::validate_snapshot_name(name)
                    .map_err(|e| format!("cannot create snapshot '{name}': {e}"))?;
            }
            if let Some((k, _)) = a.props.iter().find(|(k, _)| !is_user_prop(k)) {
                return Err(fail(format!(
                    "property '{k}' cannot be set on snapshots: only user properties can"
                )));
            }
            a.props = create_props(PropTable::Dataset, a.props).map_err(&fail)?;
            Request::ZfsSnapshot(a)
        }
        Request::ZfsRollback(a) => {
            names::validate_snapshot_name(&a.name).map_err(|e| fail(e.to_string()))?;
            Request::ZfsRollback(a)
        }
        Request::ZfsClone(mut a) => {
            names::validate_snapshot_name(&a.snapshot)
                .map_err(|e| format!("cannot open '{}': {e}", a.snapshot))?;
            names::validate_dataset_name(&a.name).map_err(|e| fail(e.to_string()))?;
            if !a.name.contains('/') {
                return Err(fail("missing dataset name".into()));
            }
            a.props = create_props(PropTable::Dataset, a.props).map_err(&fail)?;
            Request::ZfsClone(a)
        }
        Request::ZfsPromote(a) => {
            names::validate_dataset_name(&a.name).map_err(|e| fail(e.to_string()))?;
            Request::ZfsPromote(a)
        }
        Request::ZfsRename(a) => {
            entity_name(&a.from, &fail)?;
            if a.from.contains('#') {
                return Err(fail("bookmarks cannot be renamed".into()));
            }
            let to_ok = match (a.from.split_once('@'), a.to.split_once('@')) {
                (Some((ds, _)), Some(("", snap))) => {
                    names::validate_snapshot_name(&format!("{ds}@{snap}"))
                }
                (Some(_), Some(_)) => names::validate_snapshot_name(&a.to),
                (Some(_), None) => Err(names::NameError::MissingAt),
                (None, _) => names::validate_dataset_name(&a.to),
            };
            to_ok.map_err(|e| format!("cannot rename to '{}': {e}", a.to))?;
            Request::ZfsRename(a)
        }
        Request::ZfsHold(a) => {
            if a.tag.is_empty() || a.tag.len() > names::MAX_NAME_BYTES {
                return Err(fail("invalid tag: empty or longer than 255 bytes".into()));
            }
            limit(&a.names)?;
            for name in &a.names {
                names::validate_snapshot_name(name)
                    .map_err(|e| format!("cannot open '{name}': {e}"))?;
            }
            Request::ZfsHold(a)
        }
        Request::ZfsHolds(a) => {
            limit(&a.names)?;
            for name in &a.names {
                names::validate_snapshot_name(name)
                    .map_err(|e| format!("cannot open '{name}': {e}"))?;
            }
            Request::ZfsHolds(a)
        }
        Request::ZfsDiff(a) => {
            names::validate_snapshot_name(&a.from).map_err(|e| fail(e.to_string()))?;
            if let Some(to) = &a.to {
                entity_name(to, &fail)?;
            }
            Request::ZfsDiff(a)
        }
        Request::ZfsSend(a) => {
            if a.token.is_none() {
                names::validate_snapshot_name(&a.snapshot).map_err(|e| fail(e.to_string()))?;
            } else if !a.snapshot.is_empty() || a.from.is_some() {
                return Err(
                    "cannot resume send: a token names the snapshot and its source; \
                     give neither"
                        .into(),
                );
            }
            if let Some(from) = &a.from {
                let full = if from.starts_with(['@', '#']) {
                    let ds = a.snapshot.split_once('@').map_or("", |(d, _)| d);
                    format!("{ds}{from}")
                } else {
                    from.clone()
                };
                entity_name(&full, &|why| format!("cannot open '{from}': {why}"))?;
                if !full.contains(['@', '#']) {
                    return Err(fail(format!(
                        "incremental source '{from}' is neither a snapshot nor a bookmark"
                    )));
                }
                if a.intermediates && full.contains('#') {
                    return Err(fail("-I does not take a bookmark; use -i".into()));
                }
            }
            Request::ZfsSend(a)
        }
        Request::ZfsReceive(mut a) => {
            match a.target.split_once('@') {
                Some(_) => {
                    names::validate_snapshot_name(&a.target).map_err(|e| fail(e.to_string()))?
                }
                None => entity_name(&a.target, &fail)?,
            }
            if a.discard_first && a.last_only {
                return Err("cannot receive: -d and -e cannot be used together".into());
            }
            limit(&a.set)?;
            limit(&a.exclude)?;
            a.set = create_props(PropTable::Dataset, std::mem::take(&mut a.set))?;
            for prop in &a.exclude {
                if !is_user_prop(prop) {
                    known(PropTable::Dataset, prop)
                        .ok_or_else(|| format!("invalid property '{prop}'"))?;
                }
            }
            Request::ZfsReceive(a)
        }
        Request::ZfsBookmark(a) => {
            entity_name(&a.source, &|why| {
                format!("cannot open '{}': {why}", a.source)
            })?;
            if !a.source.contains(['@', '#']) {
                return Err(fail(format!(
                    "'{}' is neither a snapshot nor a bookmark",
                    a.source
                )));
            }
            names::validate_bookmark_name(&a.target).map_err(|e| fail(e.to_string()))?;
            Request::ZfsBookmark(a)
        }
        Request::ZfsDestroy(a) => {
            match a.name.split_once('@') {
                Some((ds, spec)) => snapshot_spec(ds, spec, &fail)?,
                None => entity_name(&a.name, &fail)?,
            }
            if !a.name.contains(['/', '@', '#']) && !a.recursive {
                return Err(fail(format!(
                    "operation does not apply to pools\n\
                     use 'zfs destroy -r {0}' to destroy all datasets in the pool\n\
                     use 'zpool destroy {0}' to destroy the pool itself",
                    a.name
                )));
            }
            Request::ZfsDestroy(a)
        }
        Request::ZfsList(a) => Request::ZfsList(zfs_list(a)?),
        Request::ZfsGet(mut a) => {
            a.types.dedup();
            limit(&a.names)?;
            for name in &a.names {
                entity_name(name, &|why| format!("cannot open '{name}': {why}"))?;
            }
            a.props = prop_list(a.props, PropTable::Dataset)?;
            Request::ZfsGet(a)
        }
        Request::ZfsSet(mut a) => {
            entity_name(&a.name, &fail)?;
            if a.props.is_empty() {
                return Err(fail("no properties given".into()));
            }
            limit(&a.props)?;
            for (prop, value) in &mut a.props {
                *value = set_value(PropTable::Dataset, prop, value).map_err(&fail)?;
                *prop = canonical(PropTable::Dataset, prop);
            }
            Request::ZfsSet(a)
        }
        Request::ZfsInherit(mut a) => {
            entity_name(&a.name, &fail)?;
            inheritable(&a.prop)?;
            a.prop = canonical(PropTable::Dataset, &a.prop);
            Request::ZfsInherit(a)
        }
        Request::ZfsMount(a) => Request::ZfsMount(zfs_mount(a, &fail)?),
        Request::ZfsUnmount(a) => Request::ZfsUnmount(zfs_unmount(a, &fail)?),
        Request::Zilstat(a) => {
            pool_names(&a.pools)?;
            limit(&a.datasets)?;
            for name in &a.datasets {
                names::validate_dataset_name(name)
                    .map_err(|e| format!("cannot open '{name}': {e}"))?;
            }
            Request::Zilstat(a)
        }
        Request::ZinjectAdd(a) => {
            pool_name(&a.pool, &|why| format!("cannot open '{}': {why}", a.pool))?;
            device_name(&a.device, &fail)?;
            inject_fault(&a).map_err(&fail)?;
            Request::ZinjectAdd(a)
        }
        req @ (Request::Ping {}
        | Request::Shutdown {}
        | Request::ZinjectList(_)
        | Request::ZinjectClear(_)) => req,
    })
}

/// Smallest and largest `zinject -f` percentage (OpenZFS's bounds).
pub const INJECT_FREQ_PERCENT_MIN: f64 = 0.0001;
pub const INJECT_FREQ_PERCENT_MAX: f64 = 100.0;

/// The fault a `zinject` request asks for, or what is wrong with it.
pub fn inject_fault(a: &ZinjectAdd) -> Result<Fault, String> {
    let percent = a.frequency.unwrap_or(INJECT_FREQ_PERCENT_MAX);
    if !(INJECT_FREQ_PERCENT_MIN..=INJECT_FREQ_PERCENT_MAX).contains(&percent) {
        return Err(format!(
            "invalid frequency '{percent}': expected a percentage from \
             {INJECT_FREQ_PERCENT_MIN} to {INJECT_FREQ_PERCENT_MAX}"
        ));
    }
    // 0.0001 % is one in a million: the range maps onto 1..=FREQ_PPM_MAX.
    let freq_ppm = ((percent * 10_000.0).round() as u32).clamp(1, FREQ_PPM_MAX);
    let kind = match (a.error, a.delay_ms, a.lanes) {
        (Some(_), Some(_), _) => {
            return Err("-D adds latency and cannot be combined with -e".into())
        }
        (_, None, Some(_)) => return Err("lanes are only given with a delay (-D)".into()),
        (_, Some(latency_ms), lanes) => FaultKind::Delay {
            latency_ms,
            lanes: lanes.unwrap_or(1),
        },
        (None | Some(InjectError::Io), None, None) => FaultKind::Io,
        (Some(InjectError::Checksum), None, None) => FaultKind::Checksum,
        (Some(InjectError::Nxio), None, None) => FaultKind::Nxio,
    };
    let io = match a.io_type.unwrap_or(InjectIoType::All) {
        InjectIoType::Read => IoType::Read,
        InjectIoType::Write => IoType::Write,
        InjectIoType::Flush => IoType::Flush,
        InjectIoType::All => IoType::All,
    };
    let fault = Fault { kind, io, freq_ppm };
    fault.validate()?;
    Ok(fault)
}

/// Temporary mount options `zfs mount -o` understands.
const MOUNT_OPTIONS: &[&str] = &["ro", "rw"];

fn zfs_mount(a: ZfsMount, fail: &dyn Fn(String) -> String) -> Result<ZfsMount, String> {
    limit(&a.options)?;
    match (&a.name, a.all) {
        (Some(_), true) => return Err(fail("'-a' and a filesystem name are exclusive".into())),
        (Some(name), false) => {
            names::validate_dataset_name(name).map_err(|e| fail(e.to_string()))?
        }
        (None, false) if a.overlay || !a.options.is_empty() => {
            return Err("cannot mount: missing filesystem name (or '-a')".into())
        }
        _ => {}
    }
    if let Some(bad) = a
        .options
        .iter()
        .find(|o| !MOUNT_OPTIONS.contains(&o.as_str()))
    {
        return Err(fail(format!(
            "invalid mount option '{bad}' (tarn understands: {})",
            MOUNT_OPTIONS.join(", ")
        )));
    }
    Ok(a)
}

fn zfs_unmount(a: ZfsUnmount, fail: &dyn Fn(String) -> String) -> Result<ZfsUnmount, String> {
    match (&a.target, a.all) {
        (Some(_), true) => Err(fail("'-a' and a filesystem are exclusive".into())),
        (None, false) => Err("cannot unmount: missing filesystem or mountpoint (or '-a')".into()),
        (Some(path), false) if path.starts_with('/') => {
            if path.contains('\0') {
                return Err(fail("invalid mountpoint".into()));
            }
            Ok(a)
        }
        (Some(name), false) => {
            names::validate_dataset_name(name).map_err(|e| fail(e.to_string()))?;
            Ok(a)
        }
        (None, true) => Ok(a),
    }
}

fn limit<T>(items: &[T]) -> Result<(), String> {
    if items.len() > REQUEST_NAMES_MAX {
        return Err(format!(
            "too many names in one request ({} > {REQUEST_NAMES_MAX})",
            items.len()
        ));
    }
    Ok(())
}

fn pool_name(name: &str, fail: &dyn Fn(String) -> String) -> Result<(), String> {
    names::validate_pool_name(name).map_err(|e| fail(e.to_string()))
}

fn pool_names(list: &[String]) -> Result<(), String> {
    limit(list)?;
    for name in list {
        pool_name(name, &|why| format!("cannot open '{name}': {why}"))?;
    }
    Ok(())
}

fn entity_name(name: &str, fail: &dyn Fn(String) -> String) -> Result<(), String> {
    names::parse_entity_name(name)
        .map(|_| ())
        .map_err(|e| fail(e.to_string()))
}

/// `zfs destroy DS@SPEC`: the dataset part and every snapshot name of the
/// specification (`a`, `a,b`, `a%c`, `%c`, `a%`) must be valid.
fn snapshot_spec(ds: &str, spec: &str, fail: &dyn Fn(String) -> String) -> Result<(), String> {
    names::validate_dataset_name(ds).map_err(|e| fail(e.to_string()))?;
    if spec.is_empty() {
        return Err(fail("empty snapshot name".into()));
    }
    for part in spec.split(',') {
        let ends: Vec<&str> = match part.split_once('%') {
            Some((a, b)) => [a, b].into_iter().filter(|e| !e.is_empty()).collect(),
            None => vec![part],
        };
        if part.is_empty() || part.matches('%').count() > 1 {
            return Err(fail(format!("invalid snapshot specification '{part}'")));
        }
        for end in ends {
            names::validate_snapshot_name(&format!("{ds}@{end}"))
                .map_err(|e| fail(e.to_string()))?;
        }
    }
    Ok(())
}

fn dirs(list: &[String]) -> Result<(), String> {
    limit(list)?;
    for dir in list {
        if !dir.starts_with('/') || dir.contains('\0') {
            return Err(format!(
                "cannot search '{dir}': directory must be an absolute path"
            ));
        }
    }
    Ok(())
}

/// `zpool add`: the structural checks of create (the replication check
/// needs the pool's layout, so the engine makes it).
fn zpool_add(a: ZpoolAdd, fail: &dyn Fn(String) -> String) -> Result<ZpoolAdd, String> {
    pool_name(&a.name, fail)?;
    limit(&a.vdevs)?;
    vdevspec::validate_add_layout(&a.vdevs).map_err(|e| e.to_string())?;
    Ok(a)
}

/// A device named by `zpool remove`/`detach`: a path or a vdev name such
/// as `mirror-1`.
fn device_name(name: &str, fail: &dyn Fn(String) -> String) -> Result<(), String> {
    if name.is_empty() || name.contains(['\0', '\n']) {
        return Err(fail("invalid device name".into()));
    }
    Ok(())
}

fn zpool_create(
    mut a: ZpoolCreate,
    fail: &dyn Fn(String) -> String,
) -> Result<ZpoolCreate, String> {
    pool_name(&a.name, fail)?;
    limit(&a.vdevs)?;
    vdevspec::validate_layout(&a.vdevs, a.force).map_err(|e| e.to_string())?;
    a.props = create_props(PropTable::Pool, std::mem::take(&mut a.props)).map_err(fail)?;
    a.fs_props = create_props(PropTable::Dataset, std::mem::take(&mut a.fs_props)).map_err(fail)?;
    if let Some(mp) = &a.mountpoint {
        names::validate_mountpoint(mp)
            .map_err(|e| fail(format!("invalid mountpoint '{mp}': {e}")))?;
    }
    Ok(a)
}

fn zpool_import(a: ZpoolImport, fail: &dyn Fn(String) -> String) -> Result<ZpoolImport, String> {
    dirs(&a.dirs)?;
    let is_guid = !a.pool.is_empty() && a.pool.bytes().all(|b| b.is_ascii_digit());
    if is_guid {
        a.pool
            .parse::<u64>()
            .map_err(|_| fail("pool guid is out of range".into()))?;
    } else {
        pool_name(&a.pool, fail)?;
    }
    if let Some(new_name) = &a.new_name {
        pool_name(new_name, &|why| {
            format!("cannot import as '{new_name}': {why}")
        })?;
    }
    Ok(a)
}

fn zfs_list(mut a: ZfsList) -> Result<ZfsList, String> {
    limit(&a.names)?;
    for name in &a.names {
        entity_name(name, &|why| format!("cannot open '{name}': {why}"))?;
    }
    limit(&a.props)?;
    limit(&a.sort)?;
    let listable = |prop: &str| {
        prop == "name"
            || known(PropTable::Dataset, prop).is_some()
            || is_user_prop(prop)
            || prop.strip_prefix("written@").is_some_and(|s| !s.is_empty())
    };
    for prop in a.props.iter().chain(a.sort.iter().map(|k| &k.prop)) {
        if !listable(prop) {
            return Err(format!("bad property list: invalid property '{prop}'"));
        }
    }
    for key in &mut a.sort {
        key.prop = canonical(PropTable::Dataset, &key.prop);
    }
    a.props = a
        .props
        .iter()
        .map(|p| canonical(PropTable::Dataset, p))
        .collect();
    a.types.dedup();
    Ok(a)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PropTable {
    Pool,
    Dataset,
}

fn known(table: PropTable, prop: &str) -> Option<&'static PropDef> {
    match table {
        PropTable::Pool => props::pool_prop(prop),
        PropTable::Dataset => props::dataset_prop(prop),
    }
}

/// The full name of `prop` (`avail` -> `available`); user properties and
/// unknown names are returned as they are, for the caller to judge.
fn canonical(table: PropTable, prop: &str) -> String {
    known(table, prop).map_or_else(|| prop.to_string(), |d| d.name.to_string())
}

/// A user property (`com.example:backup`): module:name, as zfsprops(7).
fn is_user_prop(prop: &str) -> bool {
    prop.contains(':')
        && prop.len() <= USER_PROP_NAME_BYTES_MAX
        && prop
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b":-_.".contains(&b))
}

/// ZAP name limit for user property names (`ZAP_MAXNAMELEN`).
const USER_PROP_NAME_BYTES_MAX: usize = 255;
/// Longest user property value (`ZAP_MAXVALUELEN`).
const USER_PROP_VALUE_BYTES_MAX: usize = 8192;

/// `get` property list: `all` (or nothing) is every property.
fn prop_list(list: Vec<String>, table: PropTable) -> Result<Vec<String>, String> {
    limit(&list)?;
    if list.iter().any(|p| p == "all") {
        return Ok(Vec::new());
    }
    for prop in &list {
        let user_ok = (table == PropTable::Dataset
            && (is_user_prop(prop)
                || prop.strip_prefix("written@").is_some_and(|s| !s.is_empty())))
            || (table == PropTable::Pool
                && prop.strip_prefix("feature@").is_some_and(|s| !s.is_empty()));
        if known(table, prop).is_none() && !user_ok {
            return Err(format!("bad property list: invalid property '{prop}'"));
        }
    }
    Ok(list.iter().map(|p| canonical(table, p)).collect())
}

/// Parse a value for `set`: the property must exist and be settable now.
fn set_value(table: PropTable, prop: &str, value: &str) -> Result<String, String> {
    if table == PropTable::Dataset && is_user_prop(prop) {
        return user_value(prop, value);
    }
    let def = known(table, prop).ok_or_else(|| format!("invalid property '{prop}'"))?;
    if def.create_only && !def.readonly {
        return Err(format!("'{prop}' can only be set at creation time"));
    }
    props::parse_value(def, value).map_err(|e| e.to_string())
}

fn user_value(prop: &str, value: &str) -> Result<String, String> {
    if value.len() >= USER_PROP_VALUE_BYTES_MAX {
        return Err(format!("property '{prop}' value is too long"));
    }
    Ok(value.to_string())
}

/// Parse the properties given at creation (create-only ones allowed).
fn create_props(table: PropTable, list: Vec<PropAssign>) -> Result<Vec<PropAssign>, String> {
    limit(&list)?;
    let mut seen = std::collections::HashSet::new();
    list.into_iter()
        .map(|(prop, value)| {
            if !seen.insert(canonical(table, &prop)) {
                return Err(format!("property '{prop}' specified multiple times"));
            }
            let value = if table == PropTable::Dataset && is_user_prop(&prop) {
                user_value(&prop, &value)?
            } else {
                let def = known(table, &prop).ok_or_else(|| match table {
                    PropTable::Pool => format!("property '{prop}' is not a valid pool property"),
                    PropTable::Dataset => format!("invalid property '{prop}'"),
                })?;
                props::parse_value(def, &value).map_err(|e| e.to_string())?
            };
            Ok((canonical(table, &prop), value))
        })
        .collect()
}

fn inheritable(prop: &str) -> Result<(), String> {
    if is_user_prop(prop) {
        return Ok(());
    }
    let def = props::dataset_prop(prop).ok_or_else(|| format!("invalid property '{prop}'"))?;
    if def.readonly {
        return Err(format!("'{prop}' property is read-only"));
    }
    if !def.inherit {
        return Err(format!("'{prop}' property cannot be inherited"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::*;

    fn create(name: &str, vdevs: Vec<VdevGroup>) -> Request {
        Request::ZpoolCreate(ZpoolCreate {
            name: name.into(),
            vdevs,
            props: vec![],
            fs_props: vec![],
            mountpoint: None,
            force: false,
            dry_run: false,
        })
    }

    fn disk(path: &str) -> VdevGroup {
        VdevGroup {
            kind: VdevKind::Disk,
            devices: vec![path.into()],
        }
    }

    #[test]
    fn invalid_names_never_reach_the_backend() {
        let err = validate(create("mirror", vec![disk("/a")])).unwrap_err();
        assert!(err.starts_with("cannot create 'mirror': "), "{err}");
        let err = validate(create("ta!nk", vec![disk("/a")])).unwrap_err();
        assert!(err.contains("invalid character '!'"), "{err}");
        let err = validate(Request::ZfsCreate(ZfsCreate {
            name: "tank/a@b".into(),
            props: vec![],
            parents: false,
            ..Default::default()
        }))
        .unwrap_err();
        assert!(err.starts_with("cannot create 'tank/a@b'"), "{err}");
        let err = validate(Request::ZpoolList(ZpoolList {
            names: vec!["ok".into(), "../x".into()],
        }))
        .unwrap_err();
        assert!(err.starts_with("cannot open '../x'"), "{err}");
    }

    #[test]
    fn values_are_canonicalised_and_bad_ones_refused() {
        let req = Request::ZfsSet(ZfsSet {
            name: "tank/a".into(),
            props: vec![("recordsize".into(), "1M".into())],
        });
        let Request::ZfsSet(set) = validate(req).unwrap() else {
            panic!("variant changed")
        };
        assert_eq!(
            set.props,
            vec![("recordsize".to_string(), "1048576".to_string())]
        );

        let bad = |prop: &str, value: &str| {
            validate(Request::ZfsSet(ZfsSet {
                name: "tank/a".into(),
                props: vec![(prop.into(), value.into())],
            }))
            .unwrap_err()
        };
        assert_eq!(
            bad("nosuch", "1"),
            "cannot set property for 'tank/a': invalid property 'nosuch'"
        );
        assert_eq!(
            bad("used", "1"),
            "cannot set property for 'tank/a': 'used' is readonly"
        );
        assert!(bad("compression", "lzma").contains("bad property value"));
        // User properties pass through.
        assert!(validate(Request::ZfsSet(ZfsSet {
            name: "tank/a".into(),
            props: vec![("com.example:owner".into(), "alice".into())],
        }))
        .is_ok());
    }

    #[test]
    fn create_checks_layout_and_props() {
        let mirror3 = VdevGroup {
            kind: VdevKind::Mirror,
            devices: vec!["/a".into(), "/b".into(), "/c".into()],
        };
        let raidz = VdevGroup {
            kind: VdevKind::Raidz1,
            devices: vec!["/d".into(), "/e".into(), "/f".into()],
        };
        let err = validate(create("tank", vec![mirror3, raidz])).unwrap_err();
        assert!(
            err.ends_with("mismatched replication level: both mirror and raidz vdevs are present")
        );
        let mut req = ZpoolCreate {
            name: "tank".into(),
            vdevs: vec![disk("/a")],
            props: vec![("nosuch".into(), "1".into())],
            fs_props: vec![],
            mountpoint: None,
            force: false,
            dry_run: false,
        };
        let err = validate(Request::ZpoolCreate(req.clone())).unwrap_err();
        assert_eq!(
            err,
            "cannot create 'tank': property 'nosuch' is not a valid pool property"
        );
        req.props = vec![];
        req.mountpoint = Some("relative/path".into());
        assert!(validate(Request::ZpoolCreate(req))
            .unwrap_err()
            .contains("invalid mountpoint"));
    }

    #[test]
    fn get_lists_and_inherit() {
        let get = |props: &[&str]| {
            validate(Request::ZfsGet(ZfsGet {
                names: vec!["tank".into()],
                props: props.iter().map(|p| p.to_string()).collect(),
                recursive: false,
                depth: None,
                sources: vec![],
                types: vec![],
            }))
        };
        let Ok(Request::ZfsGet(all)) = get(&["all"]) else {
            panic!("all refused")
        };
        assert!(all.props.is_empty());
        assert_eq!(
            get(&["bogus"]).unwrap_err(),
            "bad property list: invalid property 'bogus'"
        );
        let inherit = |prop: &str| {
            validate(Request::ZfsInherit(ZfsInherit {
                name: "tank/a".into(),
                prop: prop.into(),
                recursive: false,
            }))
        };
        assert!(inherit("compression").is_ok());
        assert!(inherit("used").unwrap_err().contains("read-only"));
        let err = validate(Request::ZfsDestroy(ZfsDestroy {
            name: "tank".into(),
            ..ZfsDestroy::default()
        }))
        .unwrap_err();
        assert!(err.starts_with("cannot destroy 'tank': operation does not apply to pools"));
    }

    #[test]
    fn mount_requests() {
        let mount = |name: Option<&str>, all: bool, options: &[&str]| {
            validate(Request::ZfsMount(ZfsMount {
                name: name.map(str::to_string),
                all,
                overlay: false,
                options: options.iter().map(|o| o.to_string()).collect(),
            }))
        };
        assert!(mount(None, false, &[]).is_ok(), "a listing");
        assert!(mount(Some("tank/a"), false, &["ro"]).is_ok());
        assert!(mount(None, true, &[]).is_ok());
        assert!(mount(Some("tank/a"), true, &[]).is_err());
        let err = mount(Some("tank/a"), false, &["noexec"]).unwrap_err();
        assert!(err.starts_with("cannot mount 'tank/a': invalid mount option 'noexec'"));
        assert!(mount(Some("tank/a@s"), false, &[]).is_err());
        let unmount = |target: Option<&str>, all: bool| {
            validate(Request::ZfsUnmount(ZfsUnmount {
                target: target.map(str::to_string),
                all,
                force: false,
            }))
        };
        assert!(unmount(Some("/mnt/x"), false).is_ok());
        assert!(unmount(Some("tank/a"), false).is_ok());
        assert!(unmount(None, true).is_ok());
        assert!(unmount(None, false).is_err());
        assert!(unmount(Some("bad name!"), false).is_err());
    }
}
