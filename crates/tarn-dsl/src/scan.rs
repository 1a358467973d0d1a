//! Scrub: walk every block of the pool, verify every copy, repair from
//! redundancy, list what cannot be repaired (OpenZFS's `dsl_scan`).
//!
//! **What is walked.** The committed state: the MOS from the uberblock's
//! root, and inside it every dataset's object set (at the MOS object that
//! holds its `DslDatasetPhys`), plus the space map log. Blocks of the
//! intent log are not scrubbed: they live only until their txg commits.
//!
//! **Slices.** The scan thread works in slices of about
//! [`tunables::SCAN_SLICE_MS`]. A slice holds frees ([`Spa::hold_frees`]),
//! opens the committed MOS, walks from the bookmark, and queues the blocks
//! it finds; a full queue ([`tunables::SCAN_QUEUE_BYTES`]) and the end of
//! the slice go to an issuer thread, which reads each batch sorted by
//! offset ([`Spa::scrub_blocks`]) while the walk fills the next. Because
//! frees are held from the moment the committed state is read until the
//! slice's reads are done, no block the slice reads can be freed and
//! reused under it: a repair never writes over newer data.
//!
//! **Bookmark.** `(MOS object, object inside that dataset's object set)`:
//! a slice stops before an object, so an object is walked whole within one
//! slice (a huge file holds frees for as long as it takes to read). After
//! each slice the bookmark and the counters are stored in the MOS
//! ([`ScanPhys`] under the object directory's `scan` entry), so a scrub
//! survives export/import and a daemon restart and resumes where it was.
//!
//! **Errors.** A block none of whose copies verifies is a permanent error:
//! `(dataset MOS object, object)` goes into the error log (a MOS ZAP under
//! `errlog`, keys `"<ds>:<obj>"` in hex). A finished scrub replaces the log
//! with what it found, so data repaired since (or deleted) leaves the list.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};
use tarn_dmu::{Objset, ScanStep};
use tarn_format::dsl::DslDatasetPhys;
use tarn_format::scan::{ScanFunc, ScanPhase, ScanPhys};
use tarn_format::spacemap::SpaceMapBlock;
use tarn_format::{BlockPtr, ObjType};
use tarn_pool::{tunables, BlockStore, Spa};
use tarn_vdev::Dtl;

use crate::mos;
use crate::pool::{now, Inner, OBJECT_DIRECTORY};
use crate::DslError;

/// Where an error was found: (dataset MOS object — 0 for the MOS itself —,
/// object).
pub type ErrorSite = (u64, u64);

const RUN: u8 = 0;
const PAUSE: u8 = 1;
const CANCEL: u8 = 2;
/// Export, destroy or daemon shutdown: stop, keep the state as it is.
const SHUTDOWN: u8 = 3;

/// The scan as the pool holds it in memory.
#[derive(Default)]
pub(crate) struct ScanRun {
    pub phys: ScanPhys,
    /// MOS object holding `phys` (0 until the first scan).
    obj: u64,
    /// MOS ZAP of permanent errors (0 until the first one).
    errlog_obj: u64,
    /// The error log as stored.
    pub errlog: BTreeSet<ErrorSite>,
    /// Errors found by the scan in progress.
    found: BTreeSet<ErrorSite>,
    /// When this pass (since start or resume) began, and `issued` then:
    /// the rate `zpool status` shows.
    pub pass_start: u64,
    pub pass_issued: u64,
    thread: Option<JoinHandle<()>>,
    stop: Arc<AtomicU8>,
}

/// Progress of the scan as `zpool status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScanProgress {
    pub phys: ScanPhys,
    pub pass_start: u64,
    pub pass_issued: u64,
}

impl Inner {
    /// Loads the stored scan state and error log at import.
    pub(crate) fn load_scan(&self) -> Result<(), DslError> {
        let mut run = self.scan.lock();
        if let Some(obj) = mos::zap_get_u64(&self.mos, OBJECT_DIRECTORY, "scan")? {
            run.obj = obj;
            run.phys = ScanPhys::decode(&self.mos.bonus(obj)?)
                .map_err(|e| DslError::Corrupted(format!("scan state: {e}")))?;
        }
        if let Some(obj) = mos::zap_get_u64(&self.mos, OBJECT_DIRECTORY, "errlog")? {
            run.errlog_obj = obj;
            for (key, _) in mos::zap_list(&self.mos, obj)? {
                if let Some(site) = parse_site(&key) {
                    run.errlog.insert(site);
                }
            }
        }
        Ok(())
    }

    /// Stores the scan state (and, when `errlog` is given, replaces the
    /// error log) in the open txg. Returns that txg.
    fn store_scan(
        &self,
        run: &mut ScanRun,
        errlog: Option<&BTreeSet<ErrorSite>>,
    ) -> Result<u64, DslError> {
        let hold = self.txg.hold()?;
        let _sync = self.sync_lock.lock();
        let m = &self.mos;
        let bonus = run.phys.encode();
        if run.obj == 0 {
            run.obj = mos::record_create(m, ObjType::Raw, &bonus)?;
            mos::zap_set_u64(m, OBJECT_DIRECTORY, "scan", run.obj)?;
        } else {
            m.set_bonus(run.obj, &bonus)?;
        }
        if let Some(new) = errlog {
            if run.errlog_obj == 0 {
                run.errlog_obj = mos::zap_create(m, ObjType::Zap)?;
                mos::zap_set_u64(m, OBJECT_DIRECTORY, "errlog", run.errlog_obj)?;
            }
            for gone in run.errlog.difference(new) {
                mos::zap_remove(m, run.errlog_obj, &site_key(*gone))?;
            }
            for added in new.difference(&run.errlog) {
                mos::zap_set_u64(m, run.errlog_obj, &site_key(*added), 1)?;
            }
            run.errlog = new.clone();
        }
        Ok(hold.txg)
    }

    /// Starts a scrub, or resumes a paused one.
    pub(crate) fn scrub_start(self: &Arc<Self>) -> Result<(), DslError> {
        let mut run = self.scan.lock();
        let p = run.phys;
        if p.state == ScanPhase::Scanning && p.func == ScanFunc::Resilver {
            return Err(DslError::Busy("currently resilvering".into()));
        }
        if p.state == ScanPhase::Scanning && p.pause_time == 0 {
            return Err(DslError::Busy(
                "currently scrubbing; use 'zpool scrub -s' to cancel the current scrub".into(),
            ));
        }
        if p.state == ScanPhase::Scanning {
            run.phys.pause_time = 0;
        } else {
            run.phys = ScanPhys {
                func: ScanFunc::Scrub,
                state: ScanPhase::Scanning,
                max_txg: self.spa.last_synced_txg(),
                start_time: now(),
                to_examine: self.spa.raw_space().1,
                ..ScanPhys::default()
            };
            run.found.clear();
        }
        self.launch(run)
    }

    /// Starts a resilver of leaf `target` (just attached): every block with
    /// a copy on its top-level vdev is read from the healthy children and
    /// written to it. A scrub in progress is canceled, a resilver in
    /// progress starts over (covering both devices), as in OpenZFS.
    pub(crate) fn resilver_start(
        self: &Arc<Self>,
        target: u64,
        replaces: Option<u64>,
    ) -> Result<(), DslError> {
        let mut run = self.stop_thread(self.scan.lock(), CANCEL);
        self.spa.resilver_started(target);
        let to_examine = self
            .spa
            .top_of_leaf(target)
            .and_then(|id| self.spa.vdev_space(id))
            .map_or(0, |(_, alloc, _)| alloc);
        run.phys = ScanPhys {
            func: ScanFunc::Resilver,
            state: ScanPhase::Scanning,
            max_txg: self.spa.last_synced_txg(),
            start_time: now(),
            to_examine,
            target_guid: target,
            replaces_guid: replaces.unwrap_or(0),
            ..ScanPhys::default()
        };
        run.found.clear();
        self.launch(run)
    }

    /// The resilver made new devices complete: replaces end (the old
    /// device leaves) and spares whose original is back return (see
    /// tarn-pool's `spares`); the commit that makes it durable is waited
    /// for. `replaced`: the old device of a replace made before pairs
    /// existed (a scan state written by an older tarn).
    fn finish_pairs(&self, replaced: u64) {
        let mut ended = self.spa.finish_pairs();
        if replaced != 0 && !ended.contains(&replaced) && self.spa.top_of_leaf(replaced).is_some() {
            match self.spa.detach(replaced) {
                Ok(()) => ended.push(replaced),
                Err(e) => eprintln!("tarn: cannot detach the replaced device: {e}"),
            }
        }
        if ended.is_empty() {
            return;
        }
        if let Err(e) = self.txg.wait_synced(0) {
            eprintln!("tarn: cannot commit the end of a replace: {e}");
        }
    }

    /// Puts hot spares in for devices that failed (tarn-pool's
    /// `activate_spares`) and resilvers them: on a thread of its own, as
    /// this may be asked from the sync thread and starting a resilver
    /// waits for the scan thread.
    pub(crate) fn activate_spares(self: &Arc<Self>) {
        if !self.spa.spares_wanted() {
            return;
        }
        let inner = self.clone();
        let spawned = std::thread::Builder::new()
            .name("tarn-spare".into())
            .spawn(move || {
                let used = inner.spa.activate_spares();
                if used.is_empty() {
                    return;
                }
                if let Err(e) = inner.txg.wait_synced(0) {
                    eprintln!("tarn: cannot commit a hot spare: {e}");
                    return;
                }
                for spare in used {
                    if let Err(e) = inner.resilver_start(spare, None) {
                        eprintln!("tarn: cannot resilver a hot spare: {e}");
                    }
                }
            });
        if let Err(e) = spawned {
            eprintln!("tarn: cannot start the hot spare thread: {e}");
        }
    }

    /// Grows the vdev of leaf `guid` to what its devices offer now, and
    /// waits for the commit that records it (autoexpand, `online -e`).
    pub(crate) fn expand(&self, guid: u64) {
        match self.spa.expand(guid) {
            Ok(Some(_)) => {
                if let Err(e) = self.txg.wait_synced(0) {
                    eprintln!("tarn: cannot commit a vdev's growth: {e}");
                }
            }
            Ok(None) => {}
            Err(e) => eprintln!("tarn: cannot grow the vdev: {e}"),
        }
    }

    /// Pauses (`cancel` false) or cancels the running scrub.
    pub(crate) fn scrub_stop(&self, cancel: bool) -> Result<(), DslError> {
        let run = self.scan.lock();
        if run.phys.state != ScanPhase::Scanning {
            return Err(DslError::Invalid("there is no active scrub".into()));
        }
        if run.phys.func == ScanFunc::Resilver {
            return Err(DslError::Invalid("currently resilvering".into()));
        }
        if !cancel && run.phys.pause_time != 0 {
            return Err(DslError::Invalid("scrub is already paused".into()));
        }
        let mut run = self.stop_thread(run, if cancel { CANCEL } else { PAUSE });
        if cancel {
            run.phys.state = ScanPhase::Canceled;
            run.phys.end_time = now();
            run.phys.pause_time = 0;
        } else {
            run.phys.pause_time = now();
        }
        let txg = self.store_scan(&mut run, None)?;
        drop(run);
        Ok(self.txg.wait_synced(txg)?)
    }

    /// Resumes a scrub that was running when the pool was exported or the
    /// daemon stopped. With none, a device that missed txgs and serves
    /// again (its DTL is not empty) is resilvered now, as OpenZFS does at
    /// import.
    pub(crate) fn resume_scan(self: &Arc<Self>) {
        let mut run = self.scan.lock();
        if run.phys.state == ScanPhase::Scanning && run.phys.func == ScanFunc::Resilver {
            self.spa.resilver_started(run.phys.target_guid);
        }
        if run.phys.state == ScanPhase::Scanning && run.phys.pause_time == 0 {
            self.spawn_scan(&mut run);
            return;
        }
        drop(run);
        self.resilver_if_needed();
    }

    /// Starts a resilver when a usable device missed txgs (after import,
    /// and after `zpool clear` brought a device back); returns whether
    /// one started.
    pub(crate) fn resilver_if_needed(self: &Arc<Self>) -> bool {
        if self.scan.lock().phys.state == ScanPhase::Scanning {
            return false;
        }
        let Some(stale) = self.spa.stale_leaves().first().copied() else {
            return false;
        };
        if let Err(e) = self.resilver_start(stale, None) {
            eprintln!("tarn: cannot start a resilver: {e}");
            return false;
        }
        true
    }

    /// Stops the scan thread for export or shutdown; the stored state says
    /// where to resume.
    pub(crate) fn shutdown_scan(&self) {
        drop(self.stop_thread(self.scan.lock(), SHUTDOWN));
    }

    /// Tells the scan thread to stop (`why`: PAUSE, CANCEL or SHUTDOWN),
    /// waits for it without holding the state, and takes the state again.
    fn stop_thread<'a>(
        &'a self,
        mut run: MutexGuard<'a, ScanRun>,
        why: u8,
    ) -> MutexGuard<'a, ScanRun> {
        run.stop.store(why, Ordering::SeqCst);
        let handle = run.thread.take();
        drop(run);
        if let Some(h) = handle {
            let _ = h.join();
        }
        self.scan.lock()
    }

    /// Stores the errors reads found since the last scrub in the error log
    /// (export and shutdown: the log survives them).
    pub(crate) fn store_read_errors(&self) {
        let read = self.read_errors.lock().clone();
        let mut run = self.scan.lock();
        if read.is_subset(&run.errlog) {
            return;
        }
        let all: BTreeSet<ErrorSite> = run.errlog.union(&read).copied().collect();
        if let Err(e) = self.store_scan(&mut run, Some(&all)) {
            eprintln!("tarn: cannot record the permanent errors reads found: {e}");
        }
    }

    pub(crate) fn scan_progress(&self) -> ScanProgress {
        let run = self.scan.lock();
        ScanProgress {
            phys: run.phys,
            pass_start: run.pass_start,
            pass_issued: run.pass_issued,
        }
    }

    /// Blocks with permanent errors: the stored log and what the running
    /// scrub found so far.
    pub(crate) fn error_sites(&self) -> Vec<ErrorSite> {
        let mut all: BTreeSet<ErrorSite> = self.read_errors.lock().clone();
        let run = self.scan.lock();
        all.extend(run.errlog.iter().chain(&run.found));
        all.into_iter().collect()
    }

    /// Stores the new scan state, starts the thread, and waits until the
    /// state is durable (the scan survives a crash from then on).
    fn launch(self: &Arc<Self>, mut run: MutexGuard<'_, ScanRun>) -> Result<(), DslError> {
        let txg = self.store_scan(&mut run, None)?;
        self.spawn_scan(&mut run);
        drop(run);
        Ok(self.txg.wait_synced(txg)?)
    }

    fn spawn_scan(self: &Arc<Self>, run: &mut ScanRun) {
        run.stop = Arc::new(AtomicU8::new(RUN));
        run.pass_start = now();
        run.pass_issued = run.phys.issued;
        let inner = Arc::clone(self);
        let stop = run.stop.clone();
        let name = format!("tarn-scrub-{}", self.spa.name());
        let spawned = std::thread::Builder::new()
            .name(name)
            .spawn(move || inner.scan_thread(&stop));
        match spawned {
            Ok(h) => run.thread = Some(h),
            Err(e) => eprintln!("tarn: cannot start the scrub thread: {e}"),
        }
    }

    fn scan_thread(&self, stop: &AtomicU8) {
        tarn_pool::suspend::mark_scan_thread();
        loop {
            if stop.load(Ordering::SeqCst) != RUN {
                return;
            }
            let bookmark = {
                let p = self.scan.lock().phys;
                (p.bm_mos_obj, p.bm_obj)
            };
            let outcome = self.scan_slice(bookmark, stop);
            let mut run = self.scan.lock();
            let finished = match outcome {
                Ok(Slice { tally, next }) => {
                    run.phys.examined += tally.examined;
                    run.phys.issued += tally.issued;
                    run.phys.processed += tally.repaired;
                    run.phys.errors += tally.errors.len() as u64;
                    run.found.extend(tally.errors);
                    if run.phys.examined > run.phys.to_examine {
                        run.phys.to_examine = run.phys.examined;
                    }
                    match next {
                        Some((m, o)) => {
                            run.phys.bm_mos_obj = m;
                            run.phys.bm_obj = o;
                            false
                        }
                        None => true,
                    }
                }
                Err(e) => {
                    // The walk itself failed (an unreadable MOS block):
                    // count it and end the scrub rather than spin.
                    eprintln!("tarn: scrub of {} stopped: {e}", self.spa.name());
                    run.phys.errors += 1;
                    true
                }
            };
            let errlog = finished.then(|| run.found.clone());
            if finished {
                run.phys.state = ScanPhase::Finished;
                run.phys.end_time = now();
                run.found.clear();
                // The scrub read everything again: what reads had found
                // and is still bad, it found too.
                self.read_errors.lock().clear();
            }
            // A resilver's errors are its own: the error log is a scrub's.
            let errlog = errlog.filter(|_| run.phys.func == ScanFunc::Scrub);
            if let Err(e) = self.store_scan(&mut run, errlog.as_ref()) {
                eprintln!("tarn: cannot record scrub progress: {e}");
            }
            if finished {
                if run.phys.func == ScanFunc::Resilver {
                    let target = run.phys.target_guid;
                    let replaced = run.phys.replaces_guid;
                    // Every leaf being rebuilt was covered (the walk took
                    // every vdev with one, and all of their blocks unless
                    // the target was alone); one attached since restarts
                    // the resilver.
                    for leaf in self.spa.resilvering_leaves() {
                        self.spa.resilver_done(leaf);
                    }
                    self.spa.resilver_done(target);
                    drop(run);
                    self.finish_pairs(replaced);
                    if self.autoexpand() {
                        self.expand(target);
                    }
                }
                return;
            }
        }
    }

    /// One slice: hold frees, walk the committed state from `bookmark`,
    /// issue what was found. `next` is `None` when the walk is complete.
    fn scan_slice(&self, bookmark: (u64, u64), stop: &AtomicU8) -> Result<Slice, DslError> {
        let spa: &Spa = &self.spa;
        let _hold = spa.hold_frees();
        // A resilver reads only blocks with a copy on a vdev being rebuilt;
        // of a device that came back, only those born in the txgs it missed
        // (its DTL: older subtrees are not even walked). A new device
        // (empty DTL) needs everything.
        let phys = self.scan.lock().phys;
        let resilver = phys.func == ScanFunc::Resilver;
        let only: Option<Vec<u32>> = resilver.then(|| spa.resilvering_tops());
        // Limited to the DTL only when the target is the one leaf being
        // rebuilt: another (a device attached meanwhile) needs everything.
        let alone = spa.resilvering_leaves() == [phys.target_guid];
        let births = spa
            .leaf_dtl(phys.target_guid)
            .filter(|d| resilver && alone && !d.is_empty());
        let min_birth = births.as_ref().map_or(0, |d| d.ranges()[0].0);
        let ub = spa.uberblock();
        let store: Arc<dyn BlockStore> = self.spa.clone();
        let mos = Objset::open_in(store.clone(), &ub.rootbp, self.cache.clone())?;
        let slice = Duration::from_millis(self.scan_slice_ms.load(Ordering::Relaxed));
        let deadline = Instant::now() + slice;
        // A slice stops between objects once its time is up, but only after
        // walking at least one: every slice makes progress.
        let progressed = std::cell::Cell::new(false);
        let time_to_stop = || {
            progressed.get() && (Instant::now() >= deadline || stop.load(Ordering::SeqCst) != RUN)
        };
        // The walk queues what it finds; full batches go to one issuer
        // thread, so reading one batch overlaps walking to the next.
        let (mos_from, mut ds_from) = bookmark;
        let (examined, tally, next_mos) = std::thread::scope(|sc| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(tunables::SCAN_BATCHES_QUEUED);
            let issuer = sc.spawn(move || {
                tarn_pool::suspend::mark_scan_thread();
                let mut tally = Tally::default();
                for batch in rx {
                    batch.issue(spa, &mut tally);
                }
                tally
            });
            let queue = Mutex::new(Queue::new(tx, only.as_deref(), births.as_ref()));
            if bookmark == (0, 0) {
                let mut bp = ub.spacemap_bp;
                let mut n = 0;
                while !bp.is_hole() && bp.typ == ObjType::SpaceMap && n < 1 << 20 {
                    queue.lock().push((0, 0), bp);
                    // An unreadable block ends the chain here; its scrub (queued
                    // above) reports it.
                    let prev = store
                        .read(&bp)
                        .ok()
                        .and_then(|b| SpaceMapBlock::decode(&b).ok())
                        .map(|b| b.prev);
                    bp = prev.unwrap_or(BlockPtr::HOLE);
                    n += 1;
                }
            }
            let next_mos = mos.scan_synced(
                mos_from,
                min_birth,
                &mut |obj, bp| queue.lock().push((0, obj), *bp),
                &mut |obj, dn| {
                    if time_to_stop() {
                        return ScanStep::Stop;
                    }
                    let ds = match DslDatasetPhys::decode(&dn.bonus) {
                        Ok(ds) if dn.typ == ObjType::DslDataset && !ds.bp.is_hole() => ds,
                        _ => {
                            progressed.set(true);
                            return ScanStep::Walk;
                        }
                    };
                    let from = if obj == mos_from { ds_from } else { 0 };
                    let inner = Objset::open_in(store.clone(), &ds.bp, self.cache.clone())
                        .and_then(|os| {
                            os.scan_synced(
                                from,
                                min_birth,
                                &mut |o, bp| queue.lock().push((obj, o), *bp),
                                &mut |_, _| {
                                    if time_to_stop() {
                                        return ScanStep::Stop;
                                    }
                                    progressed.set(true);
                                    ScanStep::Walk
                                },
                            )
                        });
                    match inner {
                        Ok(None) => {
                            ds_from = 0;
                            ScanStep::Walk
                        }
                        Ok(Some(o)) => {
                            ds_from = o;
                            ScanStep::Stop
                        }
                        // The dataset's tree cannot be walked on (its damaged
                        // block was queued and is reported by its scrub): go
                        // on with the next dataset.
                        Err(e) => {
                            eprintln!("tarn: scrub skips the rest of dataset object {obj}: {e}");
                            ds_from = 0;
                            ScanStep::Walk
                        }
                    }
                },
            );
            let mut q = queue.into_inner();
            q.flush();
            let examined = q.examined;
            drop(q);
            let tally = issuer.join().unwrap_or_default();
            (examined, tally, next_mos)
        });
        let mut tally = tally;
        tally.examined = examined;
        Ok(Slice {
            tally,
            next: next_mos?.map(|m| (m, ds_from)),
        })
    }
}

struct Slice {
    tally: Tally,
    next: Option<(u64, u64)>,
}

#[derive(Default)]
struct Tally {
    examined: u64,
    issued: u64,
    repaired: u64,
    errors: Vec<ErrorSite>,
}

/// Blocks found and not yet handed to the issuer.
struct Queue<'a> {
    /// Only blocks with a copy on one of these vdevs (a resilver).
    only: Option<&'a [u32]>,
    /// Only blocks born in these txgs (a resilver of a device's DTL).
    births: Option<&'a Dtl>,
    batch: Batch,
    bytes: u64,
    /// Bytes of blocks found (all copies).
    examined: u64,
    tx: std::sync::mpsc::SyncSender<Batch>,
}

/// Blocks for the issuer, with where each was found.
#[derive(Default)]
struct Batch {
    bps: Vec<BlockPtr>,
    sites: Vec<ErrorSite>,
}

fn allocated(bp: &BlockPtr) -> u64 {
    bp.dvas
        .iter()
        .filter(|d| !d.is_empty())
        .map(|d| d.asize())
        .sum()
}

impl<'a> Queue<'a> {
    fn new(
        tx: std::sync::mpsc::SyncSender<Batch>,
        only: Option<&'a [u32]>,
        births: Option<&'a Dtl>,
    ) -> Queue<'a> {
        Queue {
            only,
            births,
            batch: Batch::default(),
            bytes: 0,
            examined: 0,
            tx,
        }
    }

    fn push(&mut self, site: ErrorSite, bp: BlockPtr) {
        if bp.is_hole() {
            return;
        }
        if let Some(only) = self.only {
            if !bp
                .dvas
                .iter()
                .any(|d| !d.is_empty() && only.contains(&d.vdev))
            {
                return;
            }
        }
        if self.births.is_some_and(|d| !d.contains(bp.birth)) {
            return;
        }
        let size = allocated(&bp);
        self.examined += size;
        self.bytes += size;
        self.batch.bps.push(bp);
        self.batch.sites.push(site);
        if self.bytes >= tunables::SCAN_QUEUE_BYTES {
            self.flush();
        }
    }

    /// Hands the batch to the issuer (waiting while it is
    /// `SCAN_BATCHES_QUEUED` batches behind).
    fn flush(&mut self) {
        if self.batch.bps.is_empty() {
            return;
        }
        self.bytes = 0;
        // The issuer only stops when this queue is dropped.
        let _ = self.tx.send(std::mem::take(&mut self.batch));
    }
}

impl Batch {
    fn issue(&self, spa: &Spa, tally: &mut Tally) {
        let results = spa.scrub_blocks(&self.bps);
        for ((bp, site), r) in self.bps.iter().zip(&self.sites).zip(results) {
            tally.issued += allocated(bp);
            tally.repaired += r.repaired;
            if r.unrecoverable {
                tally.errors.push(*site);
            }
        }
    }
}

fn site_key((ds, obj): ErrorSite) -> String {
    format!("{ds:x}:{obj:x}")
}

fn parse_site(key: &str) -> Option<ErrorSite> {
    let (ds, obj) = key.split_once(':')?;
    Some((
        u64::from_str_radix(ds, 16).ok()?,
        u64::from_str_radix(obj, 16).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_site_keys_round_trip() {
        for site in [(0, 0), (5, 0x1f), (u64::MAX, 7)] {
            assert_eq!(parse_site(&site_key(site)), Some(site));
        }
        assert_eq!(parse_site("zz:1"), None);
        assert_eq!(parse_site("12"), None);
    }
}
