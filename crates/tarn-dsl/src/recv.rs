//! `zfs receive`: applying a substream (OpenZFS's `dmu_recv.c`,
//! `dsl_dataset_clone_swap`).
//!
//! A substream is applied to a *work* dataset nobody sees, then made
//! visible in one txg:
//!
//! * a full stream into a new filesystem `fs` is received into `fs`
//!   itself, created with [`DS_FLAG_INCONSISTENT`] (never mounted, and
//!   destroyed at import unless it keeps resume state); the end clears the
//!   flag and takes the snapshot;
//! * an incremental stream (and a full one with `-F` onto an existing
//!   filesystem without snapshots) is received into the hidden dataset
//!   `fs/%recv`, a clone of `fs`'s newest snapshot (or a new dataset); the
//!   end *swaps* it into `fs` ([`Inner::swap_received`]): `fs` gets its
//!   object set, space and dead list, its own blocks since the snapshot
//!   are freed, `%recv` disappears and the new snapshot is taken, all in
//!   one txg. A reader of the mounted `fs` sees the old contents until
//!   then (the engine swaps the mount's filesystem right after).
//!
//! Records apply under a txg hold each, so the dirty-data throttle bounds
//! the memory a stream can take, whatever it claims. Every record is
//! checked before it changes anything; a bad one stops the receive.
//!
//! **Resumable receives** (`-s`): the work dataset carries resume state
//! ([`DS_EXT_RECV`]): the stream's guids and name and the position
//! `(object, offset)` of the last record applied, written in the same txg
//! as that record's data once in every txg and every
//! [`RECV_CHECKPOINT_BYTES`] (and when the receive stops), so after any crash it names a point at or before what
//! the pool holds; records sent again from there are applied again, which
//! leaves the same result. Without `-s` a failed receive destroys the work
//! dataset, and an import destroys one a crash left.

use std::io::Read;

use tarn_format::dsl::{DS_EXT_RECV, DS_FLAG_INCONSISTENT};
use tarn_format::stream::{
    Begin, Record, StreamError, StreamReader, STREAM_FEATURES_KNOWN, STREAM_FEATURE_RESUMING,
    STREAM_VERSION,
};
use tarn_format::{Compression, ObjType, FEATURE_SNAPSHOTS};

use crate::deadlist::Space;
use crate::mos;
use crate::pool::{Inner, Pool};
use crate::send::BeginPayload;
use crate::snapshot::{ext_get, ext_make, free_ext};
use crate::DslError;

/// Stream bytes between two resume checkpoints of a `-s` receive.
pub const RECV_CHECKPOINT_BYTES: u64 = 8 << 20;

/// The leaf name of the hidden dataset an incremental is received into.
pub const RECV_WORK_NAME: &str = "%recv";

/// Why a receive failed.
#[derive(Debug, thiserror::Error)]
pub enum RecvError {
    #[error("{0}")]
    Stream(#[from] StreamError),
    #[error("{0}")]
    Dsl(#[from] DslError),
    /// Refused before anything changed, in zfs-receive(8)'s words.
    #[error("{0}")]
    Refused(String),
}

impl From<tarn_dmu::DmuError> for RecvError {
    fn from(e: tarn_dmu::DmuError) -> Self {
        use tarn_dmu::DmuError as D;
        match e {
            D::Store(_) | D::Corrupted(_) => RecvError::Dsl(e.into()),
            // Anything else is a record the object set would not take.
            other => RecvError::Stream(StreamError::Corrupt(format!(
                "a record cannot be applied: {other}"
            ))),
        }
    }
}

/// How a substream reaches its filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvKind {
    /// Into a new filesystem, received in place.
    New,
    /// Into `fs/%recv`, swapped into the existing `fs` at the end.
    Swap,
}

/// A receive under way.
#[derive(Debug, Clone)]
pub struct RecvJob {
    /// The filesystem the snapshot lands in, and the snapshot's name.
    pub fs: String,
    pub snap: String,
    /// The dataset records are applied to.
    pub work: String,
    pub kind: RecvKind,
    pub begin: Begin,
    pub payload: BeginPayload,
    pub resumable: bool,
    /// The last record applied: where a resumed stream continues.
    pub object: u64,
    pub offset: u64,
    /// Stream bytes applied (with those of earlier attempts).
    pub bytes: u64,
    checkpoint_at: u64,
    checkpoint_txg: u64,
}

/// The space a receive may still write into (OpenZFS's temporary
/// reservations, as the mounted filesystem's space hook keeps them): the
/// work dataset's AVAIL when a txg last synced, less what was written
/// since. A stream larger than the pool (or a quota) stops with ENOSPC
/// before its txg could fail to allocate.
#[derive(Default)]
struct Room {
    synced: u64,
    avail: u64,
    /// Bytes written, by the txg that was open then.
    pending: std::collections::BTreeMap<u64, u64>,
}

impl Room {
    fn refresh(&mut self, pool: &Pool, work: &str) -> Result<(), DslError> {
        self.synced = pool.inner().txg.last_synced();
        self.avail = pool.dataset_space(work)?.avail;
        let synced = self.synced;
        self.pending.retain(|&txg, _| txg > synced);
        Ok(())
    }

    fn take(&mut self, pool: &Pool, work: &str, bytes: u64) -> Result<(), DslError> {
        if pool.inner().txg.last_synced() != self.synced || self.avail == 0 {
            self.refresh(pool, work)?;
        }
        let fits = |r: &Room| r.pending.values().sum::<u64>().saturating_add(bytes) <= r.avail;
        if !fits(self) {
            // What the pool frees in the background may make room: one
            // commit, then the answer.
            pool.sync()?;
            self.refresh(pool, work)?;
            if !fits(self) {
                return Err(DslError::NoSpace);
            }
        }
        *self.pending.entry(pool.inner().txg.open_txg()).or_default() += bytes;
        Ok(())
    }
}

/// The resume state a partial receive keeps (and, as JSON, the body of a
/// resume token).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct ResumeState {
    pub toguid: u64,
    pub fromguid: u64,
    pub toname: String,
    pub fromname: String,
    pub object: u64,
    pub offset: u64,
    pub bytes: u64,
    pub features: u64,
}

fn parent_name(name: &str) -> Option<&str> {
    name.rfind('/').map(|i| &name[..i])
}

impl Pool {
    /// Checks a substream's `BEGIN` against this build and `fs`, and makes
    /// the work dataset: what `zfs receive` does before the first record.
    /// For an incremental, `fs`'s newest snapshot must be the source and
    /// `fs` unchanged since (the engine rolls back first for `-F`).
    pub fn receive_begin(
        &self,
        fs: &str,
        snap: &str,
        begin: &Begin,
        payload: &BeginPayload,
        force: bool,
        resumable: bool,
    ) -> Result<RecvJob, RecvError> {
        if begin.version > STREAM_VERSION || begin.version == 0 {
            return Err(RecvError::Refused(format!(
                "stream version {} is not supported by this tarn (it reads versions 1 to \
                 {STREAM_VERSION})",
                begin.version
            )));
        }
        if begin.features & !STREAM_FEATURES_KNOWN != 0 {
            return Err(RecvError::Refused(format!(
                "stream has unsupported feature, feature flags = {:#x}",
                begin.features & !STREAM_FEATURES_KNOWN
            )));
        }
        let work_name = format!("{fs}/{RECV_WORK_NAME}");
        let mut job = RecvJob {
            fs: fs.to_string(),
            snap: snap.to_string(),
            work: fs.to_string(),
            kind: RecvKind::New,
            begin: *begin,
            payload: payload.clone(),
            resumable,
            object: 0,
            offset: 0,
            bytes: 0,
            checkpoint_at: 0,
            checkpoint_txg: 0,
        };
        if begin.features & STREAM_FEATURE_RESUMING != 0 {
            return self.resume_job(job, &work_name);
        }
        if self.dataset_exists(&work_name) {
            return Err(RecvError::Refused(format!(
                "destination {fs} contains partially-complete state from \"zfs receive -s\"."
            )));
        }
        let exists = self.dataset_exists(fs);
        if exists && self.is_inconsistent(fs) {
            return Err(RecvError::Refused(format!(
                "destination {fs} contains partially-complete state from \"zfs receive -s\"."
            )));
        }
        if exists
            && self
                .snapshots(fs)
                .iter()
                .any(|s| s.ends_with(&format!("@{snap}")))
        {
            return Err(RecvError::Refused(format!(
                "cannot restore to {fs}@{snap}: destination already exists"
            )));
        }
        // A stream never changes what type its target is.
        let volume_stream = begin.dstype == tarn_format::stream::DSTYPE_VOLUME;
        if exists && self.is_volume(fs) != volume_stream {
            let (is, of) = if volume_stream {
                ("filesystem", "volume")
            } else {
                ("volume", "filesystem")
            };
            let kind = if begin.fromguid == 0 {
                "new"
            } else {
                "incremental"
            };
            return Err(RecvError::Refused(format!(
                "cannot receive {kind} stream: destination '{fs}' is a {is} and the stream \
                 is of a {of}"
            )));
        }
        if begin.fromguid == 0 {
            if exists {
                if !force {
                    return Err(RecvError::Refused(format!(
                        "destination '{fs}' exists\nmust specify -F to overwrite it"
                    )));
                }
                if let Some(s) = self.snapshots(fs).first() {
                    return Err(RecvError::Refused(format!(
                        "destination has snapshots (eg. {s})\nmust destroy them to overwrite it"
                    )));
                }
                self.create_work(&work_name, None, resumable, &job)?;
                job.work = work_name;
                job.kind = RecvKind::Swap;
            } else {
                let parent = parent_name(fs).unwrap_or(fs);
                if !self.dataset_exists(parent) {
                    return Err(RecvError::Refused(format!(
                        "cannot receive new filesystem stream: parent '{parent}' does not exist"
                    )));
                }
                self.create_work(fs, None, resumable, &job)?;
            }
            return Ok(job);
        }
        // An incremental.
        if !exists {
            // A clone whose origin the receiver has (a replication stream).
            let Some(origin) = self.snapshot_by_guid_near(begin.fromguid, fs) else {
                return Err(RecvError::Refused(format!(
                    "destination '{fs}' does not exist"
                )));
            };
            let parent = parent_name(fs).unwrap_or(fs);
            if !self.dataset_exists(parent) {
                return Err(RecvError::Refused(format!(
                    "cannot receive incremental stream: parent '{parent}' does not exist"
                )));
            }
            self.create_work(fs, Some(&origin), resumable, &job)?;
            return Ok(job);
        }
        let snaps = self.snapshots(fs);
        let latest = snaps.last().cloned();
        let latest_guid = match &latest {
            Some(s) => self.snapshot_info(s)?.guid,
            None => 0,
        };
        if latest_guid != begin.fromguid {
            return Err(RecvError::Refused(format!(
                "cannot receive incremental stream: most recent snapshot of {fs} does not\n\
                 match incremental source"
            )));
        }
        let latest = latest.expect("a guid matched");
        if self.modified_since_snapshot(fs)? {
            return Err(RecvError::Refused(format!(
                "cannot receive incremental stream: destination {fs} has been modified\n\
                 since most recent snapshot"
            )));
        }
        self.create_work(&work_name, Some(&latest), resumable, &job)?;
        job.work = work_name;
        job.kind = RecvKind::Swap;
        Ok(job)
    }

    /// A resumed substream continues the partial receive `fs` or
    /// `fs/%recv` keeps.
    fn resume_job(&self, mut job: RecvJob, work_name: &str) -> Result<RecvJob, RecvError> {
        let fs = job.fs.clone();
        let (work, kind) = if self.dataset_exists(work_name) {
            (work_name.to_string(), RecvKind::Swap)
        } else if self.dataset_exists(&fs) && self.is_inconsistent(&fs) {
            (fs.clone(), RecvKind::New)
        } else {
            return Err(RecvError::Refused(format!(
                "cannot resume send: '{fs}' has no partially received state to resume"
            )));
        };
        let state = self.resume_state(&work)?.ok_or_else(|| {
            RecvError::Refused(format!(
                "cannot resume send: '{fs}' was not received with -s"
            ))
        })?;
        if state.toguid != job.begin.toguid {
            return Err(RecvError::Refused(format!(
                "cannot resume send: the stream is of another snapshot than the partial \
                 receive in '{fs}' ({})",
                state.toname
            )));
        }
        job.work = work;
        job.kind = kind;
        job.resumable = true;
        job.bytes = state.bytes;
        job.object = job.payload.resume_object;
        job.offset = job.payload.resume_offset;
        Ok(job)
    }

    /// Whether `fs` is being received into (not mountable yet).
    pub fn is_inconsistent(&self, fs: &str) -> bool {
        self.inner()
            .datasets
            .read()
            .get(fs)
            .is_some_and(|d| d.ds.flags & DS_FLAG_INCONSISTENT != 0)
    }

    /// Whether `fs` changed since its newest snapshot (OpenZFS's
    /// `dsl_dataset_modified_since_snap`): its synced root is not the
    /// snapshot's, or it has changes not yet synced.
    pub fn modified_since_snapshot(&self, fs: &str) -> Result<bool, DslError> {
        let map = self.inner().datasets.read();
        let d = map
            .get(fs)
            .ok_or_else(|| DslError::NoSuchDataset(fs.into()))?;
        Ok(match d.snaps.last() {
            None => true,
            Some(s) => d.ds.bp.birth > s.phys.creation_txg || d.objset.is_dirty(),
        })
    }

    /// The snapshot with this guid nearest to `fs` in the dataset tree (a
    /// pool may hold several received copies of one snapshot: a clone's
    /// origin is the one in its own tree).
    pub fn snapshot_by_guid_near(&self, guid: u64, fs: &str) -> Option<String> {
        let map = self.inner().datasets.read();
        let shared = |name: &str| {
            name.split('/')
                .zip(fs.split('/'))
                .take_while(|(a, b)| a == b)
                .count()
        };
        map.iter()
            .filter_map(|(name, d)| {
                d.snaps
                    .iter()
                    .find(|s| s.phys.guid == guid)
                    .map(|s| (shared(name), format!("{name}@{}", s.name)))
            })
            .max_by_key(|(n, _)| *n)
            .map(|(_, s)| s)
    }

    /// Creates the work dataset `name`: new, or a clone of `origin`,
    /// marked inconsistent, with resume state if `resumable`.
    fn create_work(
        &self,
        name: &str,
        origin: Option<&str>,
        resumable: bool,
        job: &RecvJob,
    ) -> Result<(), RecvError> {
        let inner = self.inner();
        let parent = parent_name(name).ok_or_else(|| DslError::Exists(name.into()))?;
        // Created, marked and given its resume state in one txg, which is
        // not waited for: until it commits nothing of the receive is
        // durable anyway, and the records follow in it or later ones.
        {
            let _hold = inner.txg.hold().map_err(DslError::from)?;
            let _sync = inner.sync_lock.lock();
            if self.dataset_exists(name) {
                return Err(DslError::Exists(name.into()).into());
            }
            let parent_dir = inner
                .with_ds(parent, |d| d.dir_obj)
                .map_err(|_| DslError::NoParent(parent.into()))?;
            let origin = match origin {
                Some(o) => {
                    let (head, i) = inner.snap_index(o)?;
                    let map = inner.datasets.read();
                    let s = &map[&head].snaps[i];
                    Some((s.obj, s.phys))
                }
                None => None,
            };
            inner.create_dataset_objects(name, Some(parent_dir), &[], origin)?;
            // A full stream of a volume makes a volume (a clone is
            // already what its origin is).
            if origin.is_none() && job.begin.dstype == tarn_format::stream::DSTYPE_VOLUME {
                inner
                    .with_ds(name, |d| d.objset.clone())?
                    .set_objset_type(tarn_format::objset::ObjsetType::Zvol);
            }
            if let Some((obj, _)) = origin {
                let clone_obj = inner.with_ds(name, |d| d.ds_obj)?;
                inner.set_clone(obj, clone_obj, true)?;
                inner.spa.activate_feature(FEATURE_SNAPSHOTS);
            }
            inner.set_inconsistent(name, true)?;
            if resumable {
                inner.write_resume(name, job)?;
            }
        }
        Ok(())
    }

    /// Applies records from `reader` to the job's work dataset up to the
    /// substream's `END`, whose checksum covers everything before it.
    pub fn receive_apply<R: Read>(
        &self,
        job: &mut RecvJob,
        reader: &mut StreamReader<R>,
    ) -> Result<(), RecvError> {
        let inner = self.inner();
        let os = self.dataset_objset(&job.work)?;
        let start = reader.bytes();
        let base = job.bytes;
        let mut room = Room::default();
        loop {
            let Some((rec, payload)) = reader.next_record()? else {
                return Err(StreamError::Truncated(reader.bytes()).into());
            };
            job.bytes = base + (reader.bytes() - start);
            match rec {
                Record::End { toguid } => {
                    if toguid != job.begin.toguid {
                        return Err(StreamError::Corrupt(format!(
                            "END of snapshot {toguid:#x} in the stream of {:#x}",
                            job.begin.toguid
                        ))
                        .into());
                    }
                    return Ok(());
                }
                Record::Begin(_) => {
                    return Err(StreamError::Corrupt("BEGIN inside a substream".into()).into());
                }
                Record::Object {
                    object,
                    typ,
                    bonus_type,
                    block_size,
                    maxblkid,
                    bonus_len: _,
                } => {
                    let hold = inner.txg.hold().map_err(DslError::from)?;
                    hold.dirty(payload.len() as u64 + 512);
                    os.receive_object(object, typ, bonus_type, block_size, maxblkid, &payload)?;
                    job.object = object;
                    job.offset = 0;
                }
                Record::FreeObjects { first, count } => {
                    let _hold = inner.txg.hold().map_err(DslError::from)?;
                    os.receive_free_objects(first, count)?;
                }
                Record::Write {
                    object,
                    offset,
                    lsize,
                    psize: _,
                    compression,
                } => {
                    // A compressed block is checked by decompressing it
                    // (readers want the bytes) and then written as it came.
                    let (data, stored) = match compression {
                        Compression::Off => (payload, None),
                        c => {
                            let d = tarn_codec::decompress(c, &payload, lsize as usize).map_err(
                                |e| {
                                    StreamError::Corrupt(format!(
                                        "a WRITE does not decompress: {e}"
                                    ))
                                },
                            )?;
                            (d, Some((payload, c)))
                        }
                    };
                    let info = os.object_info(object).map_err(RecvError::from)?;
                    let bs = u64::from(info.block_size);
                    if offset % bs != 0 || u64::from(lsize) > bs {
                        return Err(StreamError::Corrupt(format!(
                            "WRITE of {lsize} bytes at {offset} into object {object} of \
                             {bs}-byte blocks"
                        ))
                        .into());
                    }
                    room.take(self, &job.work, bs)?;
                    let hold = inner.txg.hold().map_err(DslError::from)?;
                    hold.dirty(bs);
                    match stored {
                        // Whole blocks only: a shorter one is padded out,
                        // which its stored form does not know.
                        Some((bytes, c)) if data.len() as u64 == bs => {
                            os.receive_block_stored(object, offset / bs, data, &bytes, c, hold.txg)?
                        }
                        _ => os.receive_block(object, offset / bs, data)?,
                    }
                    job.object = object;
                    job.offset = offset;
                }
                Record::Free {
                    object,
                    offset,
                    length,
                } => {
                    let _hold = inner.txg.hold().map_err(DslError::from)?;
                    os.free_range(object, offset, length)?;
                }
            }
            // Once in every txg, and every RECV_CHECKPOINT_BYTES within one.
            let txg = inner.txg.open_txg();
            if job.resumable
                && (txg != job.checkpoint_txg
                    || job.bytes >= job.checkpoint_at + RECV_CHECKPOINT_BYTES)
            {
                job.checkpoint_at = job.bytes;
                job.checkpoint_txg = txg;
                self.receive_checkpoint(job)?;
            }
        }
    }

    /// Records the job's position in the open txg (with the data applied
    /// so far); does not wait for it.
    fn receive_checkpoint(&self, job: &RecvJob) -> Result<(), DslError> {
        let inner = self.inner();
        let hold = inner.txg.hold()?;
        let _sync = inner.sync_lock.lock();
        inner.write_resume(&job.work, job)?;
        drop(hold);
        Ok(())
    }

    /// A receive stopped before its end: with `-s` the work dataset keeps
    /// its position (durable when this returns); without, it is destroyed.
    pub fn receive_fail(&self, job: &RecvJob) -> Result<(), DslError> {
        if job.resumable {
            let inner = self.inner();
            let txg = {
                let hold = inner.txg.hold()?;
                let _sync = inner.sync_lock.lock();
                inner.write_resume(&job.work, job)?;
                hold.txg
            };
            return Ok(inner.txg.wait_synced(txg)?);
        }
        self.dataset_destroy(&job.work)
    }

    /// `zfs receive -A fs`: drops the partial receive `fs` keeps.
    pub fn receive_abort(&self, fs: &str) -> Result<(), DslError> {
        let work = format!("{fs}/{RECV_WORK_NAME}");
        if self.dataset_exists(&work) {
            return self.dataset_destroy(&work);
        }
        if self.dataset_exists(fs) && self.is_inconsistent(fs) {
            return self.dataset_destroy(fs);
        }
        Err(DslError::Invalid(format!(
            "'{fs}' does not have any resumable receive state to abort"
        )))
    }

    /// The resume state a partial receive keeps in `work`, if any.
    pub fn resume_state(&self, work: &str) -> Result<Option<ResumeState>, DslError> {
        let inner = self.inner();
        let ext = inner.with_ds(work, |d| d.ds.ext_obj)?;
        let Some(obj) = ext_get(&inner.mos, ext, DS_EXT_RECV)? else {
            return Ok(None);
        };
        let mos = &inner.mos;
        let u =
            |k: &str| -> Result<u64, DslError> { Ok(mos::zap_get_u64(mos, obj, k)?.unwrap_or(0)) };
        let s = |k: &str| -> Result<String, DslError> {
            Ok(mos::zap_get_str(mos, obj, k)?.unwrap_or_default())
        };
        Ok(Some(ResumeState {
            toguid: u("toguid")?,
            fromguid: u("fromguid")?,
            toname: s("toname")?,
            fromname: s("fromname")?,
            object: u("object")?,
            offset: u("offset")?,
            bytes: u("bytes")?,
            features: u("features")?,
        }))
    }

    /// The partial receive of `fs`: its own state, or its `%recv`'s.
    pub fn receive_resume_state(&self, fs: &str) -> Option<ResumeState> {
        let work = format!("{fs}/{RECV_WORK_NAME}");
        if self.dataset_exists(&work) {
            return self.resume_state(&work).ok().flatten();
        }
        if self.is_inconsistent(fs) {
            return self.resume_state(fs).ok().flatten();
        }
        None
    }

    /// Makes a received substream visible: the snapshot `fs@snap` with the
    /// sender's guid, and `fs` as it has it, in one txg. The caller has
    /// the mounted `fs` quiesced (the engine swaps its filesystem after).
    pub fn receive_finish(&self, job: &RecvJob) -> Result<(), DslError> {
        // The work dataset's changes reach the disk first: the swap and
        // the snapshot record synced roots.
        self.sync()?;
        let inner = self.inner();
        let txg = {
            let hold = inner.txg.hold()?;
            let _sync = inner.sync_lock.lock();
            let synced = inner.txg.last_synced();
            if job.kind == RecvKind::Swap {
                inner.swap_received(&job.fs, &job.work, hold.txg)?;
            } else {
                inner.set_inconsistent(&job.fs, false)?;
                inner.drop_resume(&job.fs)?;
            }
            inner.snapshot_with_guid(&job.fs, &job.snap, synced, job.begin.toguid)?;
            inner.spa.activate_feature(FEATURE_SNAPSHOTS);
            hold.txg
        };
        Ok(inner.txg.wait_synced(txg)?)
    }

    /// Destroys what crashes left of receives without `-s` (called once
    /// the pool is open).
    pub(crate) fn destroy_inconsistent(&self) -> Result<(), DslError> {
        let doomed: Vec<String> = {
            let inner = self.inner();
            let map = inner.datasets.read();
            let mut v: Vec<String> = map
                .iter()
                .filter(|(_, d)| d.ds.flags & DS_FLAG_INCONSISTENT != 0)
                .filter(|(_, d)| {
                    !matches!(ext_get(&inner.mos, d.ds.ext_obj, DS_EXT_RECV), Ok(Some(_)))
                })
                .map(|(n, _)| n.clone())
                .collect();
            // Children first.
            v.sort_by_key(|n| std::cmp::Reverse(n.len()));
            v
        };
        for name in doomed {
            if self.snapshots(&name).is_empty() && self.dataset_children_all(&name).is_empty() {
                self.dataset_destroy(&name)?;
            }
        }
        Ok(())
    }
}

impl Inner {
    fn set_inconsistent(&self, name: &str, on: bool) -> Result<(), DslError> {
        let mut map = self.datasets.write();
        let d = map
            .get_mut(name)
            .ok_or_else(|| DslError::NoSuchDataset(name.into()))?;
        if on {
            d.ds.flags |= DS_FLAG_INCONSISTENT;
        } else {
            d.ds.flags &= !DS_FLAG_INCONSISTENT;
        }
        self.mos.set_bonus(d.ds_obj, &d.ds.encode())?;
        Ok(())
    }

    /// Writes the job's resume state into `work`'s record (the caller
    /// holds the open txg and `sync_lock`).
    fn write_resume(&self, work: &str, job: &RecvJob) -> Result<(), DslError> {
        let mos = &self.mos;
        let mut map = self.datasets.write();
        let d = map
            .get_mut(work)
            .ok_or_else(|| DslError::NoSuchDataset(work.into()))?;
        let before = d.ds.ext_obj;
        let obj = ext_make(mos, &mut d.ds.ext_obj, DS_EXT_RECV, ObjType::Zap)?;
        if d.ds.ext_obj != before {
            mos.set_bonus(d.ds_obj, &d.ds.encode())?;
        }
        mos::zap_set_u64(mos, obj, "toguid", job.begin.toguid)?;
        mos::zap_set_u64(mos, obj, "fromguid", job.begin.fromguid)?;
        mos::zap_set_u64(mos, obj, "object", job.object)?;
        mos::zap_set_u64(mos, obj, "offset", job.offset)?;
        mos::zap_set_u64(mos, obj, "bytes", job.bytes)?;
        mos::zap_set_u64(
            mos,
            obj,
            "features",
            job.begin.features & !STREAM_FEATURE_RESUMING,
        )?;
        mos::zap_set_str(mos, obj, "toname", &job.payload.toname)?;
        mos::zap_set_str(
            mos,
            obj,
            "fromname",
            job.payload.fromname.as_deref().unwrap_or(""),
        )?;
        Ok(())
    }

    fn drop_resume(&self, name: &str) -> Result<(), DslError> {
        let mos = &self.mos;
        let mut map = self.datasets.write();
        let d = map
            .get_mut(name)
            .ok_or_else(|| DslError::NoSuchDataset(name.into()))?;
        if let Some(obj) = ext_get(mos, d.ds.ext_obj, DS_EXT_RECV)? {
            mos::object_free(mos, obj)?;
            mos::zap_remove(mos, d.ds.ext_obj, DS_EXT_RECV)?;
            if mos::zap_list(mos, d.ds.ext_obj)?.is_empty() {
                free_ext(mos, d.ds.ext_obj)?;
                d.ds.ext_obj = 0;
                mos.set_bonus(d.ds_obj, &d.ds.encode())?;
            }
        }
        Ok(())
    }

    /// `fs` takes the contents of `work` (see the module comment); the
    /// caller holds `sync_lock` and the open `txg`, and both object sets
    /// are clean.
    fn swap_received(&self, fs: &str, work: &str, txg: u64) -> Result<(), DslError> {
        let mos = &self.mos;
        // What `fs` holds alone: its blocks born after its newest snapshot.
        let (old_os, prev_txg) = {
            let map = self.datasets.read();
            let d = &map[fs];
            (d.objset.clone(), d.ds.prev_snap_txg)
        };
        let freed = self.free_born_after(&old_os, prev_txg)?;
        let w = self
            .datasets
            .write()
            .remove(work)
            .ok_or_else(|| DslError::NoSuchDataset(work.into()))?;
        {
            let mut map = self.datasets.write();
            let d = map
                .get_mut(fs)
                .ok_or_else(|| DslError::NoSuchDataset(fs.into()))?;
            d.zil.destroy(txg);
            let old = std::mem::replace(&mut d.deadlist, w.deadlist);
            if old.obj != 0 {
                old.discard(mos)?;
            }
            d.ds.deadlist_obj = w.ds.deadlist_obj;
            d.ds.bp = w.ds.bp;
            d.ds.referenced_bytes = w.ds.referenced_bytes;
            d.ds.compressed_bytes = w.ds.compressed_bytes;
            d.ds.uncompressed_bytes = w.ds.uncompressed_bytes;
            d.objset = w.objset.clone();
            d.acct = w.acct.clone();
            d.zil = w.zil.clone();
            d.hook = w.hook.clone();
            d.hook.set_prev_snap_txg(d.ds.prev_snap_txg);
            mos.set_bonus(d.ds_obj, &d.ds.encode())?;
        }
        // `work` goes without freeing anything: `fs` holds its blocks now.
        // Its space was charged to `fs` as its parent all along.
        if w.dir.origin_obj != 0 {
            self.unlink_clone(w.dir.origin_obj, w.ds_obj)?;
        }
        let pmap = self.with_ds(fs, |d| d.dir.child_map_obj)?;
        mos::zap_remove(mos, pmap, RECV_WORK_NAME)?;
        for obj in [w.dir.child_map_obj, w.dir.props_obj, w.ds_obj, w.dir_obj] {
            mos::object_free(mos, obj)?;
        }
        if w.ds.snapnames_obj != 0 {
            mos::object_free(mos, w.ds.snapnames_obj)?;
        }
        if w.ds.ext_obj != 0 {
            free_ext(mos, w.ds.ext_obj)?;
        }
        let ds_obj = self.with_ds(fs, |d| d.ds_obj)?;
        self.report_read_errors(&w.objset, ds_obj);
        self.apply_policy(fs)?;
        if freed != Space::default() {
            self.charge_ancestors(
                fs,
                -(freed.dsize as i64),
                -(freed.psize as i64),
                -(freed.lsize as i64),
            )?;
        }
        // `fs`'s directory no longer carries `work` as a child: its own
        // charge took it over, so the totals stand.
        Ok(())
    }
}
