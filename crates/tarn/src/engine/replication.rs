//! `zfs send` and `zfs receive` (zfs-send(8), zfs-receive(8)): which
//! substreams a command means, the stream between the pool and the
//! client's pipe, progress and estimate lines, and the mounts a receive
//! changes. The stream itself is `tarn_dsl::send`/`tarn_dsl::recv`.
//!
//! The client passes its stdout (send) or stdin (receive) and its stderr
//! with the request (`api::PassedFds`), so the bytes go between the daemon
//! and the pipe with no copy through the client. A send reads snapshots
//! only and takes no engine lock while streaming; a receive takes the
//! configuration lock only to prepare and to make each snapshot visible.
//!
//! Packages: `-I` (every snapshot between two) and `-R` (a dataset, its
//! descendants, their snapshots and clones) send a compound header that
//! lists the filesystems and snapshots, then one substream per snapshot
//! (filesystems parents first, a clone after its origin; snapshots oldest
//! first), then a final `END`.

use std::fs::File;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tarn_dsl::props::nicebytes;
use tarn_dsl::recv::{RecvError, RecvJob, RecvKind};
use tarn_dsl::send::{
    parse_resume_token, resume_token, BeginPayload, PackageFs, PackageInfo, ResumeAt, SendError,
    SendFlags, SendSource,
};
use tarn_dsl::{names, Pool};
use tarn_format::stream::{
    padded_len, Begin, Record, StreamError, StreamReader, StreamWriter, BEGIN_FLAG_COMPOUND,
    DSTYPE_FILESYSTEM, RECORD_SIZE, STREAM_FEATURE_COMPRESSED, STREAM_FEATURE_EMBED_DATA,
    STREAM_FEATURE_LARGE_BLOCKS, STREAM_FEATURE_RAW, STREAM_VERSION,
};

use super::mounts::How;
use super::{create_parents, dsl_err, Engine};
use crate::api::{ZfsReceive, ZfsSend};
use crate::backend::BackendError;

/// One substream of a send.
struct Sub {
    to: String,
    from: Option<SendSource>,
    props: Option<Vec<(String, String)>>,
}

/// Counts the bytes that reach the pipe (for `-v`'s progress lines).
struct Counting<W> {
    inner: W,
    count: Arc<AtomicU64>,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn split_snap(name: &str) -> Result<(&str, &str), BackendError> {
    name.split_once('@')
        .ok_or_else(|| BackendError::Invalid(format!("'{name}' is not a snapshot")))
}

/// A passed descriptor as a `File` of its own (a duplicate: the request
/// keeps the original).
fn passed(fds: &crate::api::PassedFds, i: usize, what: &str) -> Result<File, BackendError> {
    let fd = fds
        .get(i)
        .ok_or_else(|| BackendError::Invalid(format!("no {what} was passed with the request")))?;
    let fd = fd
        .try_clone()
        .map_err(|e| BackendError::Other(format!("cannot use the {what}: {e}")))?;
    Ok(File::from(fd))
}

/// `-h`: the holds of the snapshots `snaps` (names after `@`) of `ds`.
fn holds_of(pool: &Pool, ds: &str, snaps: &[(String, u64)]) -> Vec<(String, Vec<String>)> {
    snaps
        .iter()
        .filter_map(|(name, _)| {
            let tags: Vec<String> = pool
                .holds(&format!("{ds}@{name}"))
                .ok()?
                .into_iter()
                .map(|(t, _)| t)
                .collect();
            (!tags.is_empty()).then(|| (name.clone(), tags))
        })
        .collect()
}

/// The properties of `ds` a stream carries: those set locally, or with
/// `-b` (`backup`) those it received, whatever is set over them.
fn local_props(pool: &Pool, ds: &str, backup: bool) -> Vec<(String, String)> {
    if backup {
        return pool.dataset_received_props(ds);
    }
    let mut out = Vec::new();
    for def in tarn_dsl::props::dataset_props() {
        if def.readonly {
            continue;
        }
        if let Ok(v) = pool.dataset_prop(ds, def.name) {
            if v.source == tarn_dsl::PropSource::Local {
                out.push((def.name.to_string(), v.value));
            }
        }
    }
    for prop in pool.dataset_user_props(ds) {
        if let Ok(v) = pool.dataset_prop(ds, &prop) {
            if v.source == tarn_dsl::PropSource::Local {
                out.push((prop, v.value));
            }
        }
    }
    out
}

/// Marks snapshots as being sent for as long as it lives.
struct Sending<'a> {
    engine: &'a Engine,
    names: Vec<String>,
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        let mut map = self.engine.sending.lock();
        for n in &self.names {
            if let Some(c) = map.get_mut(n) {
                *c -= 1;
                if *c == 0 {
                    map.remove(n);
                }
            }
        }
    }
}

impl Engine {
    /// Whether a send is reading snapshot (or bookmark) `name`.
    pub(super) fn is_being_sent(&self, name: &str) -> bool {
        self.sending.lock().contains_key(name)
    }

    fn mark_sending(&self, subs: &[Sub]) -> Sending<'_> {
        let mut names: Vec<String> = subs
            .iter()
            .flat_map(|s| {
                std::iter::once(s.to.clone()).chain(s.from.iter().map(|f| f.name.clone()))
            })
            .collect();
        names.sort();
        names.dedup();
        let mut map = self.sending.lock();
        for n in &names {
            *map.entry(n.clone()).or_default() += 1;
        }
        Sending {
            engine: self,
            names,
        }
    }

    /// `zfs send`: answered with the lines `-n -v` prints.
    pub(super) fn send(&self, a: &ZfsSend) -> Result<Vec<String>, BackendError> {
        let mut flags = SendFlags {
            large_blocks: a.large_blocks,
            embed: a.embed,
            compressed: a.compressed,
            raw: a.raw,
        };
        let (snapshot, from, resume) = match &a.token {
            Some(t) => {
                let st = parse_resume_token(t)
                    .map_err(|e| BackendError::Message(format!("cannot resume send: {e}")))?;
                flags.large_blocks |= st.features & STREAM_FEATURE_LARGE_BLOCKS != 0;
                flags.embed |= st.features & STREAM_FEATURE_EMBED_DATA != 0;
                flags.compressed |= st.features & STREAM_FEATURE_COMPRESSED != 0;
                flags.raw |= st.features & STREAM_FEATURE_RAW != 0;
                let pool = self.dataset_pool(split_snap(&st.toname)?.0)?;
                let guid = pool.snapshot_info(&st.toname).map(|i| i.guid).ok();
                if guid != Some(st.toguid) {
                    return Err(BackendError::Message(format!(
                        "cannot resume send: '{}' is no longer the same snapshot used in the \
                         initial send",
                        st.toname
                    )));
                }
                let from = (!st.fromname.is_empty()).then(|| st.fromname.clone());
                let at = ResumeAt {
                    object: st.object,
                    offset: st.offset,
                };
                (st.toname, from, Some((at, st.fromguid)))
            }
            None => (a.snapshot.clone(), a.from.clone(), None),
        };
        let (ds, snap) = split_snap(&snapshot)?;
        let pool = self.dataset_pool(ds)?;
        if !pool.snapshot_exists(&snapshot) {
            return Err(BackendError::NoSuchDataset(snapshot.clone()));
        }
        let source = |to: &str, f: &str| pool.send_source(to, f).map_err(dsl_err);
        let mut package: Option<PackageInfo> = None;
        let subs: Vec<Sub> = if a.replicate {
            let (subs, info) = self.replication_plan(&pool, ds, snap, from.as_deref(), a)?;
            package = Some(info);
            subs
        } else if a.intermediates {
            let f = from
                .as_deref()
                .ok_or_else(|| BackendError::Invalid("-I needs a source".into()))?;
            let src = source(&snapshot, f)?;
            let to_txg = pool.snapshot_info(&snapshot).map_err(dsl_err)?.createtxg;
            let mut subs = Vec::new();
            let mut prev = src;
            let mut snaps = Vec::new();
            for s in pool.snapshots(ds) {
                let info = pool.snapshot_info(&s).map_err(dsl_err)?;
                if info.createtxg > prev.txg && info.createtxg <= to_txg {
                    snaps.push((s.split_once('@').map_or("", |x| x.1).to_string(), info.guid));
                    subs.push(Sub {
                        to: s.clone(),
                        from: Some(prev.clone()),
                        props: None,
                    });
                    prev = SendSource {
                        name: s,
                        guid: info.guid,
                        txg: info.createtxg,
                    };
                }
            }
            package = Some(PackageInfo {
                fs: ds.to_string(),
                replicate: false,
                datasets: vec![PackageFs {
                    name: ds.to_string(),
                    holds: if a.holds {
                        holds_of(&pool, ds, &snaps)
                    } else {
                        Vec::new()
                    },
                    snaps,
                    origin: None,
                }],
            });
            subs
        } else {
            let src = match &from {
                Some(f) => Some(source(&snapshot, f)?),
                None => None,
            };
            if let (Some((_, fromguid)), Some(src)) = (&resume, &src) {
                if src.guid != *fromguid {
                    return Err(BackendError::Message(format!(
                        "cannot resume send: incremental source {} is no longer the same \
                         snapshot used in the initial send",
                        src.name
                    )));
                }
            }
            if a.holds {
                // -h makes a package: the holds travel in its header.
                let guid = pool.snapshot_info(&snapshot).map_err(dsl_err)?.guid;
                let snaps = vec![(snap.to_string(), guid)];
                package = Some(PackageInfo {
                    fs: ds.to_string(),
                    replicate: false,
                    datasets: vec![PackageFs {
                        name: ds.to_string(),
                        holds: holds_of(&pool, ds, &snaps),
                        snaps,
                        origin: None,
                    }],
                });
            }
            vec![Sub {
                to: snapshot.clone(),
                from: src,
                props: a.props.then(|| local_props(&pool, ds, a.backup)),
            }]
        };
        let resume_at = resume.map(|(at, _)| at);
        let mut lines = Vec::new();
        if a.verbose || a.dry_run {
            let mut total = 0u64;
            for sub in &subs {
                let size = pool
                    .send_size(
                        &sub.to,
                        sub.from.as_ref(),
                        flags,
                        sub.props.clone(),
                        resume_at,
                    )
                    .map_err(send_err)?;
                total += size;
                lines.push(estimate_line(sub, size, a.parsable));
            }
            if let Some(info) = &package {
                // The package's header, its END and the final END.
                let json = package_json(&snapshot, from.as_deref(), info);
                total += 3 * RECORD_SIZE as u64 + padded_len(json.len() as u32) as u64;
            }
            lines.push(if a.parsable {
                format!("size\t{total}")
            } else {
                format!("total estimated size is {}", nicebytes(total))
            });
        }
        if a.dry_run {
            return Ok(lines);
        }
        let out = passed(&a.fds, 0, "output descriptor")?;
        let mut err = passed(&a.fds, 1, "error descriptor").ok();
        let _sending = self.mark_sending(&subs);
        if a.verbose {
            if let Some(e) = err.as_mut() {
                let _ = writeln!(e, "{}", lines.join("\n"));
            }
        }
        let count = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let progress = match (a.verbose, err.take()) {
            (true, Some(e)) => Some(start_progress(
                e,
                count.clone(),
                done.clone(),
                subs.last().map(|s| s.to.clone()).unwrap_or_default(),
                a.parsable,
            )),
            _ => None,
        };
        let result = (|| -> Result<(), BackendError> {
            let sink = Counting {
                inner: out,
                count: count.clone(),
            };
            // The stream buffers its records itself and writes large
            // payloads straight to the pipe.
            let mut w = StreamWriter::new(sink);
            let io = |e: std::io::Error| send_err(SendError::Io(e));
            if let Some(info) = &package {
                let json = package_json(&snapshot, from.as_deref(), info);
                let toguid = pool.snapshot_info(&snapshot).map_err(dsl_err)?.guid;
                let begin = Record::Begin(Begin {
                    version: STREAM_VERSION,
                    flags: BEGIN_FLAG_COMPOUND,
                    features: flags.features(),
                    toguid,
                    fromguid: 0,
                    creation_time: 0,
                    dstype: DSTYPE_FILESYSTEM,
                    payload_len: json.len() as u32,
                });
                w.write(&begin, &json).map_err(io)?;
                w.write(&Record::End { toguid }, &[]).map_err(io)?;
            }
            for sub in &subs {
                pool.send(
                    &sub.to,
                    sub.from.as_ref(),
                    flags,
                    sub.props.clone(),
                    resume_at,
                    &mut w,
                )
                .map_err(send_err)?;
            }
            if package.is_some() {
                w.write(&Record::End { toguid: 0 }, &[]).map_err(io)?;
            }
            w.flush().map_err(io)
        })();
        done.store(true, Ordering::Relaxed);
        if let Some(t) = progress {
            let _ = t.join();
        }
        result.map_err(|e| match e {
            BackendError::Message(m) => {
                BackendError::Message(format!("cannot send '{snapshot}': {m}"))
            }
            other => other,
        })?;
        Ok(Vec::new())
    }

    /// The substreams of `zfs send -R DS@SNAP` and the package header
    /// describing them.
    fn replication_plan(
        &self,
        pool: &Arc<Pool>,
        top: &str,
        snap: &str,
        from: Option<&str>,
        a: &ZfsSend,
    ) -> Result<(Vec<Sub>, PackageInfo), BackendError> {
        let prefix = format!("{top}/");
        let mut members: Vec<String> = pool
            .datasets()
            .into_iter()
            .filter(|d| {
                (d == top || d.starts_with(&prefix)) && pool.snapshot_exists(&format!("{d}@{snap}"))
            })
            .collect();
        // A clone goes after the filesystem its origin belongs to.
        let mut ordered: Vec<String> = Vec::new();
        while !members.is_empty() {
            let before = members.len();
            members.retain(|d| {
                let origin_fs = pool
                    .origin(d)
                    .and_then(|o| o.split_once('@').map(|x| x.0.to_string()));
                let ready = match &origin_fs {
                    Some(o) if o != d => !o.starts_with(top) || ordered.contains(o),
                    _ => true,
                };
                let parent_ready = names::parent(d).is_none_or(|p| {
                    !p.starts_with(top)
                        || p == d
                        || ordered.iter().any(|x| x == p)
                        || !pool.snapshot_exists(&format!("{p}@{snap}"))
                });
                if ready && parent_ready {
                    ordered.push(d.clone());
                    false
                } else {
                    true
                }
            });
            if members.len() == before {
                ordered.append(&mut members);
            }
        }
        let from_txg = match from {
            Some(f) => {
                let name = format!("{top}@{}", f.rsplit('@').next().unwrap_or(f));
                pool.snapshot_info(&name)
                    .map_err(|_| {
                        BackendError::Message(format!(
                            "cannot send '{top}@{snap}': incremental source '{name}' does not exist"
                        ))
                    })?
                    .createtxg
            }
            None => 0,
        };
        let mut subs = Vec::new();
        let mut info = PackageInfo {
            fs: top.to_string(),
            replicate: true,
            datasets: Vec::new(),
        };
        for d in &ordered {
            let to = format!("{d}@{snap}");
            let to_txg = pool.snapshot_info(&to).map_err(dsl_err)?.createtxg;
            let all = pool.snapshots(d);
            let mut chain: Vec<(String, u64, u64)> = Vec::new();
            for s in &all {
                let i = pool.snapshot_info(s).map_err(dsl_err)?;
                if i.createtxg <= to_txg {
                    chain.push((s.clone(), i.guid, i.createtxg));
                }
            }
            // The first snapshot to send, and its source.
            let origin = pool.origin(d);
            let mut prev: Option<SendSource> = None;
            let mut start = 0;
            if let Some(f) = from {
                // The dataset's own snapshot of that name or, where it has
                // none, its newest one taken no later than the top's.
                let fname = format!("{d}@{}", f.rsplit('@').next().unwrap_or(f));
                let k = chain
                    .iter()
                    .position(|(n, _, _)| *n == fname)
                    .or_else(|| chain.iter().rposition(|(_, _, t)| *t <= from_txg));
                if let Some(k) = k {
                    prev = Some(SendSource {
                        name: chain[k].0.clone(),
                        guid: chain[k].1,
                        txg: chain[k].2,
                    });
                    start = if a.intermediates {
                        k + 1
                    } else {
                        chain.len() - 1
                    };
                }
            }
            if prev.is_none() {
                if let Some(o) = &origin {
                    let i = pool.snapshot_info(o).map_err(dsl_err)?;
                    prev = Some(SendSource {
                        name: o.clone(),
                        guid: i.guid,
                        txg: i.createtxg,
                    });
                }
            }
            let origin_guid = origin
                .as_ref()
                .and_then(|o| pool.snapshot_info(o).ok())
                .map(|i| i.guid);
            for (k, (s, guid, txg)) in chain.iter().enumerate().skip(start) {
                subs.push(Sub {
                    to: s.clone(),
                    from: prev.clone(),
                    props: (k + 1 == chain.len() || k == start)
                        .then(|| local_props(pool, d, a.backup)),
                });
                prev = Some(SendSource {
                    name: s.clone(),
                    guid: *guid,
                    txg: *txg,
                });
            }
            let snaps: Vec<(String, u64)> = chain
                .iter()
                .map(|(n, g, _)| (n.split_once('@').map_or("", |x| x.1).to_string(), *g))
                .collect();
            info.datasets.push(PackageFs {
                name: d.clone(),
                holds: if a.holds {
                    holds_of(pool, d, &snaps)
                } else {
                    Vec::new()
                },
                snaps,
                origin: origin_guid,
            });
        }
        Ok((subs, info))
    }

    /// `zfs receive`: answered with the lines `-v` prints.
    pub(super) fn receive(&self, a: &ZfsReceive) -> Result<Vec<String>, BackendError> {
        if a.abort {
            let pool = self.dataset_pool(&a.target)?;
            pool.receive_abort(&a.target).map_err(|e| {
                BackendError::Message(format!("cannot abort receive of '{}': {e}", a.target))
            })?;
            return Ok(Vec::new());
        }
        let input = passed(&a.fds, 0, "input descriptor")?;
        let mut reader = StreamReader::new(input);
        let started = Instant::now();
        let mut lines = Vec::new();
        let first = reader.next_record().map_err(|e| stream_refused("", &e))?;
        let Some((Record::Begin(begin), payload)) = first else {
            return Err(BackendError::Message(match first {
                None => "cannot receive: failed to read from stream".into(),
                Some(_) => "cannot receive: invalid stream (bad magic number)".into(),
            }));
        };
        let payload = parse_payload(&payload)?;
        if begin.flags & BEGIN_FLAG_COMPOUND != 0 {
            let package = payload.package.clone().ok_or_else(|| {
                BackendError::Message("cannot receive: invalid stream (no package list)".into())
            })?;
            match reader.next_record().map_err(|e| stream_refused("", &e))? {
                Some((Record::End { .. }, _)) => {}
                _ => {
                    return Err(BackendError::Message(
                        "cannot receive: invalid stream (package header has no END)".into(),
                    ))
                }
            }
            if a.target.contains('@') {
                return Err(BackendError::Message(
                    "cannot receive: a package (zfs send -R or -I) needs a filesystem as its \
                     target, not a snapshot"
                        .into(),
                ));
            }
            // -F: what the sender no longer has goes first (as OpenZFS
            // does), while the mountpoints of what goes still exist.
            if a.force && package.replicate && !a.dry_run && self.dataset_pool(&a.target).is_ok() {
                self.receive_prune(a, &package)?;
            }
            loop {
                match reader.next_record().map_err(|e| stream_refused("", &e))? {
                    Some((Record::Begin(b), p)) => {
                        let p = parse_payload(&p)?;
                        self.receive_one(a, &b, &p, Some(&package), &mut reader, &mut lines)?;
                    }
                    Some((Record::End { toguid: 0 }, _)) => break,
                    Some(_) => {
                        return Err(BackendError::Message(
                            "cannot receive: invalid stream (unexpected record between \
                             substreams)"
                                .into(),
                        ))
                    }
                    None => {
                        return Err(BackendError::Message(
                            "cannot receive: checksum mismatch or incomplete stream".into(),
                        ))
                    }
                }
            }
            if !a.dry_run {
                self.receive_holds(a, &package)?;
            }
            if !a.nomount && !a.dry_run {
                let pool = self.dataset_pool(&a.target)?;
                let mut names: Vec<String> = Vec::new();
                for p in &package.datasets {
                    if let Ok((fs, _)) = target_of(a, &p.name, "", Some(&package)) {
                        if pool.dataset_exists(&fs) {
                            names.push(fs);
                        }
                    }
                }
                names.sort_by(|x, y| x.split('/').cmp(y.split('/')));
                BackendError::combine(self.bring_up(&pool, &names, How::default()))?;
            }
        } else {
            self.receive_one(a, &begin, &payload, None, &mut reader, &mut lines)?;
        }
        if a.verbose {
            let secs = started.elapsed().as_secs_f64().max(0.001);
            let bytes = reader.bytes();
            lines.push(format!(
                "received {} stream in {:.2} seconds ({}/sec)",
                nicebytes(bytes),
                secs,
                nicebytes((bytes as f64 / secs) as u64)
            ));
        }
        Ok(lines)
    }

    /// Receives one substream whose `BEGIN` was read.
    fn receive_one<R: Read>(
        &self,
        a: &ZfsReceive,
        begin: &Begin,
        payload: &BeginPayload,
        package: Option<&PackageInfo>,
        reader: &mut StreamReader<R>,
        lines: &mut Vec<String>,
    ) -> Result<(), BackendError> {
        let kind = if begin.fromguid == 0 {
            "new filesystem"
        } else {
            "incremental"
        };
        let (sent_fs, sent_snap) = payload.toname.split_once('@').ok_or_else(|| {
            BackendError::Message("cannot receive: invalid stream (no snapshot name)".into())
        })?;
        let (fs, snap) = target_of(a, sent_fs, sent_snap, package)?;
        if a.verbose {
            let what = if begin.fromguid == 0 {
                "full"
            } else {
                "incremental"
            };
            lines.push(format!(
                "receiving {what} stream of {} into {fs}@{snap}",
                payload.toname
            ));
        }
        let pool = self.dataset_pool(&fs)?;
        if a.dry_run {
            loop {
                match reader.next_record().map_err(|e| stream_refused(kind, &e))? {
                    Some((Record::End { .. }, _)) => return Ok(()),
                    Some(_) => {}
                    None => {
                        return Err(stream_refused(
                            kind,
                            &StreamError::Truncated(reader.bytes()),
                        ))
                    }
                }
            }
        }
        // Parents of a `-d`/`-e` or package target are created.
        if fs != a.target && !pool.dataset_exists(&fs) {
            if let Some(parent) = names::parent(&fs) {
                if !pool.dataset_exists(parent) {
                    let created = create_parents(&pool, &fs, true)?;
                    BackendError::combine(self.bring_up(&pool, &created, How::default()))?;
                }
            }
        }
        if !self.receiving.lock().insert(fs.clone()) {
            return Err(BackendError::Message(format!(
                "cannot receive {kind} stream: destination {fs} is busy: a receive is writing it"
            )));
        }
        let r = self.receive_into(
            a,
            begin,
            payload,
            kind,
            &pool,
            (&fs, &snap),
            package.is_some(),
            reader,
        );
        self.receiving.lock().remove(&fs);
        r
    }

    /// [`Engine::receive_one`] once the target is known and ours.
    #[allow(clippy::too_many_arguments)]
    fn receive_into<R: Read>(
        &self,
        a: &ZfsReceive,
        begin: &Begin,
        payload: &BeginPayload,
        kind: &str,
        pool: &Arc<Pool>,
        (fs, snap): (&str, &str),
        in_package: bool,
        reader: &mut StreamReader<R>,
    ) -> Result<(), BackendError> {
        if a.force && begin.fromguid != 0 && pool.dataset_exists(fs) {
            self.receive_force_prepare(pool, fs, begin.fromguid)?;
        }
        let mut job = pool
            .receive_begin(fs, snap, begin, payload, a.force, a.resumable)
            .map_err(|e| recv_err(kind, e, None))?;
        if let Err(e) = pool.receive_apply(&mut job, reader) {
            let kept = pool.receive_fail(&job);
            let token = (a.resumable && kept.is_ok())
                .then(|| pool.receive_resume_state(fs).map(|s| resume_token(&s)))
                .flatten();
            return Err(recv_err(kind, e, token));
        }
        self.receive_finish(pool, &job)?;
        self.receive_props(pool, fs, a, payload)?;
        // A package's filesystems mount once all of it is in (mounting a
        // child makes its mountpoint directory in the parent).
        if !a.nomount && !in_package {
            BackendError::combine(self.bring_up(pool, &[fs.to_string()], How::default()))?;
        }
        pool.log_history(&format!("zfs receive {}", a.target));
        Ok(())
    }

    /// The end of a substream: the snapshot and the head become visible; a
    /// mounted head serves the received filesystem right after.
    fn receive_finish(&self, pool: &Arc<Pool>, job: &RecvJob) -> Result<(), BackendError> {
        let _config = self.config.lock();
        match job.kind {
            RecvKind::Swap => self.mounts.rollback(pool, &job.fs, || {
                self.zvols
                    .replace(pool, &job.fs, || pool.receive_finish(job).map_err(dsl_err))
            }),
            RecvKind::New => pool.receive_finish(job).map_err(dsl_err),
        }
    }

    /// `-F` before an incremental: snapshots after the stream's source are
    /// destroyed and the filesystem is rolled back to it.
    fn receive_force_prepare(
        &self,
        pool: &Arc<Pool>,
        fs: &str,
        fromguid: u64,
    ) -> Result<(), BackendError> {
        let snaps = pool.snapshots(fs);
        let Some(at) = snaps
            .iter()
            .position(|s| pool.snapshot_info(s).is_ok_and(|i| i.guid == fromguid))
        else {
            return Ok(());
        };
        let later: Vec<String> = snaps[at + 1..].to_vec();
        let _config = self.config.lock();
        if !later.is_empty() {
            pool.snapshots_destroy(&later, false).map_err(dsl_err)?;
            for name in &later {
                if let Some((d, s)) = name.split_once('@') {
                    self.mounts.snapshot_gone(d, s);
                }
            }
        }
        if pool.modified_since_snapshot(fs).map_err(dsl_err)? {
            let snap = snaps[at].clone();
            self.mounts.rollback(pool, fs, || {
                self.zvols.replace(pool, fs, || {
                    pool.rollback(&snap).map(|_| ()).map_err(dsl_err)
                })
            })?;
        }
        Ok(())
    }

    /// Properties a stream carried (as received values), then `-o`/`-x`.
    fn receive_props(
        &self,
        pool: &Arc<Pool>,
        fs: &str,
        a: &ZfsReceive,
        payload: &BeginPayload,
    ) -> Result<(), BackendError> {
        let mut changed = false;
        if let Some(props) = &payload.props {
            for (k, v) in props {
                if a.exclude.iter().any(|x| x == k) || a.set.iter().any(|(s, _)| s == k) {
                    continue;
                }
                if pool.dataset_set_received(fs, k, v).is_ok() {
                    changed = true;
                }
            }
        }
        for (k, v) in &a.set {
            pool.dataset_set(fs, k, v).map_err(dsl_err)?;
            changed = true;
        }
        if changed {
            let _ = self.mounts.refresh_settings(pool, fs);
            let _ = self.zvols.refresh_settings(pool, fs);
        }
        Ok(())
    }

    /// `-h` on the sender: the package's holds, put on the received
    /// snapshots (tags a snapshot has already are left alone).
    fn receive_holds(&self, a: &ZfsReceive, package: &PackageInfo) -> Result<(), BackendError> {
        for pfs in &package.datasets {
            if pfs.holds.is_empty() {
                continue;
            }
            let (fs, _) = target_of(a, &pfs.name, "", Some(package))?;
            let pool = self.dataset_pool(&fs)?;
            for (snap, tags) in &pfs.holds {
                let name = format!("{fs}@{snap}");
                if !pool.snapshot_exists(&name) {
                    continue;
                }
                let have: Vec<String> = pool
                    .holds(&name)
                    .map_err(dsl_err)?
                    .into_iter()
                    .map(|(t, _)| t)
                    .collect();
                for tag in tags.iter().filter(|t| !have.contains(t)) {
                    pool.hold(std::slice::from_ref(&name), tag)
                        .map_err(dsl_err)?;
                }
            }
        }
        Ok(())
    }

    /// `zfs receive -F` of a replication stream: snapshots and filesystems
    /// under the target the sender no longer has are destroyed.
    fn receive_prune(&self, a: &ZfsReceive, package: &PackageInfo) -> Result<(), BackendError> {
        let pool = self.dataset_pool(&a.target)?;
        for pfs in &package.datasets {
            let (fs, _) = target_of(a, &pfs.name, "", Some(package))?;
            if !pool.dataset_exists(&fs) {
                continue;
            }
            let mut doomed: Vec<String> = Vec::new();
            for s in pool.snapshots(&fs) {
                let guid = pool.snapshot_info(&s).map(|i| i.guid).unwrap_or(0);
                match pfs.snaps.iter().find(|(_, g)| *g == guid) {
                    None => doomed.push(s),
                    // Renamed on the sender: renamed here too.
                    Some((name, _)) if s.split_once('@').map(|x| x.1) != Some(name) => {
                        let _config = self.config.lock();
                        pool.rename_snapshot(&s, name).map_err(dsl_err)?;
                        if let Some((d, old)) = s.split_once('@') {
                            self.mounts.snapshot_gone(d, old);
                        }
                    }
                    Some(_) => {}
                }
            }
            if !doomed.is_empty() {
                let _config = self.config.lock();
                pool.snapshots_destroy(&doomed, false).map_err(dsl_err)?;
                for name in &doomed {
                    if let Some((d, s)) = name.split_once('@') {
                        self.mounts.snapshot_gone(d, s);
                    }
                }
            }
        }
        // Filesystems under the target that the package does not name.
        let (top, _) = target_of(a, &package.fs, "", Some(package))?;
        let wanted: Vec<String> = package
            .datasets
            .iter()
            .filter_map(|p| target_of(a, &p.name, "", Some(package)).ok().map(|x| x.0))
            .collect();
        let prefix = format!("{top}/");
        let mut extra: Vec<String> = pool
            .datasets()
            .into_iter()
            .filter(|d| d.starts_with(&prefix) && !wanted.contains(d))
            .collect();
        extra.sort_by_key(|d| std::cmp::Reverse(d.len()));
        for d in extra {
            let _config = self.config.lock();
            let snaps = pool.snapshots(&d);
            if !snaps.is_empty() {
                pool.snapshots_destroy(&snaps, false).map_err(dsl_err)?;
            }
            self.mounts.unmount(&pool, &d, true)?;
            pool.dataset_destroy(&d).map_err(dsl_err)?;
        }
        Ok(())
    }
}

/// The filesystem and snapshot a substream of `sent_fs@sent_snap` lands
/// in (zfs-receive(8): the target, `-d`, `-e`, or the package's layout).
fn target_of(
    a: &ZfsReceive,
    sent_fs: &str,
    sent_snap: &str,
    package: Option<&PackageInfo>,
) -> Result<(String, String), BackendError> {
    if let Some((fs, snap)) = a.target.split_once('@') {
        return Ok((fs.to_string(), snap.to_string()));
    }
    let fs = if a.discard_first {
        match sent_fs.split_once('/') {
            Some((_, rest)) => format!("{}/{rest}", a.target),
            None => a.target.clone(),
        }
    } else if a.last_only {
        let last = sent_fs.rsplit('/').next().unwrap_or(sent_fs);
        format!("{}/{last}", a.target)
    } else if let Some(p) = package {
        match sent_fs.strip_prefix(&p.fs) {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => {
                format!("{}{rest}", a.target)
            }
            _ => {
                return Err(BackendError::Message(format!(
                    "cannot receive: invalid stream ('{sent_fs}' is outside the package's '{}')",
                    p.fs
                )))
            }
        }
    } else {
        a.target.clone()
    };
    names::validate_dataset_name(&fs)
        .map_err(|e| BackendError::Message(format!("cannot receive: '{fs}': {e}")))?;
    Ok((fs, sent_snap.to_string()))
}

fn parse_payload(bytes: &[u8]) -> Result<BeginPayload, BackendError> {
    let p: BeginPayload = serde_json::from_slice(bytes).map_err(|e| {
        BackendError::Message(format!(
            "cannot receive: invalid stream (BEGIN payload: {e})"
        ))
    })?;
    if tarn_dsl::names::validate_snapshot_name(&p.toname).is_err() {
        return Err(BackendError::Message(format!(
            "cannot receive: invalid stream (bad snapshot name '{}')",
            p.toname
        )));
    }
    Ok(p)
}

fn stream_refused(kind: &str, e: &StreamError) -> BackendError {
    let what = if kind.is_empty() {
        "cannot receive".to_string()
    } else {
        format!("cannot receive {kind} stream")
    };
    BackendError::Message(match e {
        StreamError::Truncated(_) | StreamError::Checksum(_) => {
            format!("{what}: checksum mismatch or incomplete stream")
        }
        StreamError::Corrupt(why) => format!("{what}: invalid stream ({why})"),
        StreamError::Io(io) => format!("{what}: failed to read from stream: {io}"),
    })
}

fn recv_err(kind: &str, e: RecvError, token: Option<String>) -> BackendError {
    let mut msg = match e {
        RecvError::Refused(m) if m.starts_with("cannot ") => m,
        RecvError::Refused(m) => format!("cannot receive {kind} stream: {m}"),
        RecvError::Stream(s) => match stream_refused(kind, &s) {
            BackendError::Message(m) => m,
            other => other.to_string(),
        },
        RecvError::Dsl(d) => format!("cannot receive {kind} stream: {}", dsl_err(d)),
    };
    if let Some(t) = token {
        msg.push_str(&format!(
            "\nPartially received snapshot is saved.\nA resuming stream can be generated on the \
             sending system by running:\n    zfs send -t {t}"
        ));
    }
    BackendError::Message(msg)
}

fn send_err(e: SendError) -> BackendError {
    match e {
        SendError::Dsl(d) => dsl_err(d),
        SendError::Io(io) if io.kind() == std::io::ErrorKind::BrokenPipe => {
            BackendError::Message("Broken pipe".into())
        }
        SendError::Io(io) => BackendError::Message(io.to_string()),
    }
}

/// The JSON payload of a package's `BEGIN`.
fn package_json(snapshot: &str, from: Option<&str>, info: &PackageInfo) -> Vec<u8> {
    let payload = BeginPayload {
        toname: snapshot.to_string(),
        fromname: from.map(str::to_string),
        package: Some(info.clone()),
        ..Default::default()
    };
    serde_json::to_vec(&payload).unwrap_or_default()
}

/// One estimate line of `zfs send -v` / `-n -v -P`.
fn estimate_line(sub: &Sub, size: u64, parsable: bool) -> String {
    match (&sub.from, parsable) {
        (None, true) => format!("full\t{}\t{size}", sub.to),
        (Some(f), true) => format!("incremental\t{}\t{}\t{size}", f.name, sub.to),
        (None, false) => format!(
            "full send of {} estimated size is {}",
            sub.to,
            nicebytes(size)
        ),
        (Some(f), false) => format!(
            "send from {} to {} estimated size is {}",
            f.name,
            sub.to,
            nicebytes(size)
        ),
    }
}

/// `-v`'s progress: a line a second on the client's stderr, as
/// zfs-send(8) prints them.
fn start_progress(
    mut err: File,
    count: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
    snap: String,
    parsable: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let _ = writeln!(err, "TIME        SENT   SNAPSHOT {snap}");
        let mut next = Instant::now() + Duration::from_secs(1);
        while !done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
            if Instant::now() >= next {
                next += Duration::from_secs(1);
                let sent = count.load(Ordering::Relaxed);
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                let stamp = super::history::stamp(now);
                let time = stamp.rsplit('.').next().unwrap_or(&stamp).to_string();
                let sent = if parsable {
                    sent.to_string()
                } else {
                    nicebytes(sent)
                };
                let _ = writeln!(err, "{time}   {sent:>5}   {snap}");
            }
        }
    })
}
