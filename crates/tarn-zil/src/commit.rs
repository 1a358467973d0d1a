//! `fsync`: group commit, and what a commit takes.
//!
//! One committer at a time writes (a commit is under way while
//! `PendingState::started` is ahead of `finished`); it takes the
//! records of every committer registered so far, so N threads calling
//! fsync at once cost about one block write, not N. The others wait on a
//! condition variable and are all woken when the write is done: each
//! then sees whether a commit took its records and is over, and returns,
//! or one of them writes what is still needed. Commits are numbered; the
//! first to start after a committer registered takes all of its records,
//! but a commit that fails puts the records it took back, and a later
//! commit may take them again: a committer whose records are gone from
//! the queue returns only when no commit is under way, or when that first
//! commit is over and no commit from it on put records back
//! (`requeued_by`; `zil_crash` found the window where it returned while
//! the retaking commit was still writing). A committer whose records
//! were written never writes again the few that arrived meanwhile (each
//! would then make a log write of its own).
//!
//! One commit is in flight at a time: writing a commit's blocks while the
//! previous commit's are still in flight (as ZFS issues lwbs) was tried
//! and was slower here, because commits got smaller and the device took
//! every extra flush (docs/MEASUREMENTS.md, "ZIL: pipelined commits").
//!
//! All committers of a finished commit are woken: waking only that
//! commit's committers and one of the next commit's, or waking them with
//! `Thread::unpark`, was tried and gained nothing, since they come back
//! one after another however they are woken (docs/MEASUREMENTS.md, "ZIL:
//! waking committers").
//!
//! A committer writes at once: waiting for the others to come back first
//! (OpenZFS's `zfs_commit_timeout_pct`) was tried and gained nothing, as
//! the bigger commits took longer on the device and the device sat idle
//! during the wait (docs/MEASUREMENTS.md, "ZIL: waiting for committers
//! before a commit").
//!
//! What a commit takes: `fsync` of a file ([`Zilog::commit_object`])
//! needs that file's writes and attribute changes and every namespace
//! record (they are few, and later records depend on them), not other
//! files' data — ZFS's async and sync itx lists. Committers register their
//! object before queueing, and the writer takes the records of every
//! registered object, so fsyncs of different files still share a write.
//! Records left behind keep their sequence numbers; replay applies
//! records in sequence order, and a file's records only ever touch that
//! file, so writing them later changes nothing. When a file's last link
//! goes, its pending records are dropped ([`Zilog::remove_async`]).
//!
//!
//! ## Failures
//! If writing or flushing a log block fails, `commit` falls back to
//! waiting for the txg holding the records: slow, but never an
//! acknowledgement without durability.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::itx::{Itx, Pending};
use crate::{Result, Zilog, LOG_BULK_BYTES};

pub(crate) struct PendingState {
    itxs: VecDeque<Itx>,
    /// Every object with a record in `itxs` about it alone (writes,
    /// setattrs, free ranges; `Itx::async_obj`), and perhaps a few
    /// without: `remove_async` scans the queue only for those. Without it
    /// every unlink scanned every record logged since the last sync —
    /// quadratic in an `rm -rf` (docs/MEASUREMENTS.md, "ZIL: unlinks
    /// scanning the pending records").
    async_objs: HashSet<u64>,
    next_seq: u64,
    /// Objects whose `commit_object` callers are queued for or inside the
    /// writer (with their count), and how many `commit`s of everything
    /// are: the writer takes all of their records at once, so concurrent
    /// fsyncs of different files still share one log write.
    committing: HashMap<u64, usize>,
    committing_all: usize,
    /// Commits started and finished so far, numbered from 1. One commit
    /// at a time: while `started` is ahead of `finished` a committer is
    /// writing, and the others wait on `Zilog::committed`.
    started: u64,
    finished: u64,
    /// The last commit that put the records it took back (0: none).
    requeued_by: u64,
    /// A writer panicked: every commit from now on waits for a txg.
    poisoned: bool,
}

/// `PendingState` behind a std mutex, so that `Zilog::committed` (a std
/// condition variable) wakes every committer of a finished commit at once.
/// parking_lot's `notify_all` wakes one waiter and requeues the rest on
/// the mutex, each woken only when the one before unlocks it: the waiters
/// of one commit came back one scheduler wake-up after another, the last
/// ones later than the log write itself took (docs/MEASUREMENTS.md, "ZIL:
/// parking_lot's notify_all").
pub(crate) struct PendingLock(pub std::sync::Mutex<PendingState>);

impl PendingLock {
    pub fn new(next_seq: u64) -> PendingLock {
        PendingLock(std::sync::Mutex::new(PendingState {
            itxs: VecDeque::new(),
            async_objs: HashSet::new(),
            next_seq,
            committing: HashMap::new(),
            committing_all: 0,
            started: 0,
            finished: 0,
            requeued_by: 0,
            poisoned: false,
        }))
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, PendingState> {
        // A writer that panics marks the state itself (`Writing`), and
        // every committer then waits for a txg: the std poison adds
        // nothing.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl PendingState {
    /// Queues a record logged under a hold of `txg`.
    pub fn push(&mut self, txg: u64, rec: Pending) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let itx = Itx { seq, txg, rec };
        if let Some(obj) = itx.async_obj() {
            self.async_objs.insert(obj);
        }
        self.itxs.push_back(itx);
    }

    /// Drops the pending records of `obj`, whose last link is gone.
    pub fn remove_async(&mut self, obj: u64) {
        if self.async_objs.remove(&obj) {
            self.itxs.retain(|i| i.async_obj() != Some(obj));
        }
    }

    /// Puts records a commit took back among the pending ones, in
    /// sequence order.
    fn put_back(&mut self, itxs: Vec<Itx>) {
        // Their objects may have been forgotten while they were out.
        self.async_objs
            .extend(itxs.iter().filter_map(Itx::async_obj));
        let mut all: Vec<Itx> = std::mem::take(&mut self.itxs).into();
        all.extend(itxs);
        all.sort_by_key(|i| i.seq);
        debug_assert!(
            all.windows(2).all(|w| w[0].seq < w[1].seq),
            "a record was requeued twice"
        );
        self.itxs = all.into();
    }

    /// Drops the records of txgs before `txg` (they have synced), and
    /// forgets the objects none of the rest is about.
    pub fn drop_before(&mut self, txg: u64) {
        self.itxs.retain(|i| i.txg >= txg);
        self.async_objs = self.itxs.iter().filter_map(Itx::async_obj).collect();
    }

    /// The group-commit state's invariants, checked in debug builds after
    /// every change of the commit counters and registrations (constant
    /// time: the order of `itxs` is checked where it could break, in
    /// `Zilog::requeue`).
    fn check(&self) {
        debug_assert!(
            self.finished <= self.started && self.started - self.finished <= 1,
            "one commit at a time: started {}, finished {}",
            self.started,
            self.finished
        );
        debug_assert!(
            self.requeued_by <= self.started,
            "only a started commit puts records back"
        );
        debug_assert!(
            self.itxs.back().is_none_or(|i| i.seq < self.next_seq),
            "sequence numbers are never reused"
        );
        debug_assert!(
            self.committing.values().all(|&n| n > 0),
            "a registered object has a committer"
        );
    }

    /// Does a commit for `obj` (`None`: everything) need `i` durable?
    fn needed_by(&self, i: &Itx, obj: Option<u64>) -> bool {
        obj.is_none() || i.async_obj().is_none_or(|o| Some(o) == obj)
    }

    fn wants(&self, i: &Itx) -> bool {
        self.committing_all > 0
            || i.async_obj()
                .is_none_or(|o| self.committing.contains_key(&o))
    }
}

impl Zilog {
    /// Makes every change logged so far durable: returns once the records
    /// are in durable log blocks (or their txg has committed).
    pub fn commit(&self) -> Result<()> {
        self.commit_for(None)
    }

    /// What `fsync` of `obj` needs durable (ZFS's `zil_commit(zilog,
    /// foid)`): every synchronous record (namespace, xattrs) and `obj`'s
    /// own writes and attribute changes; other files' writes stay pending
    /// for their own `fsync` or their txg.
    pub fn commit_object(&self, obj: u64) -> Result<()> {
        self.commit_for(Some(obj))
    }

    fn commit_for(&self, obj: Option<u64>) -> Result<()> {
        self.commit_calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.replay_pending() {
            // The header still names the chain to replay: no new chain
            // before the mount has replayed it, so a txg it is.
            return Ok(self.txg.wait_synced(0)?);
        }
        let (_registered, upto, first) = Registered::new(&self.pending, obj);
        let mut p = self.pending.lock();
        loop {
            if p.poisoned {
                // A writer panicked with records it had taken: only the
                // txg makes sure they are durable now.
                drop(p);
                return Ok(self.txg.wait_synced(0)?);
            }
            let need = p.itxs.iter().any(|i| i.seq <= upto && p.needed_by(i, obj));
            // A commit either makes the records it took durable or puts
            // them back (`need` again), where a later commit may take them
            // once more. So, with none of this caller's records pending:
            // with no commit under way, every one that took them is over
            // and they are durable; or, if the commit numbered `first`
            // (the first to start after this caller registered, which
            // takes all of them) is over and neither it nor a later one
            // put records back, that commit made them durable.
            let over = p.finished == p.started;
            if !need && (over || (p.finished >= first && p.requeued_by < first)) {
                return Ok(());
            }
            if need && over {
                break;
            }
            p = self
                .committed
                .wait(p)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        debug_assert_eq!(
            p.started, p.finished,
            "a commit starts only when none is under way"
        );
        p.started += 1;
        p.check();
        let ticket = p.started;
        drop(p);
        let _writing = Writing(self);
        self.write_pending(ticket)
    }

    /// The writer's part of a commit: takes the records every registered
    /// committer wants and makes them durable, in log blocks or, when
    /// that fails or more than `LOG_BULK_BYTES` of data is pending, by
    /// their txg.
    fn write_pending(&self, ticket: u64) -> Result<()> {
        let _w = self.writer.lock();
        let synced = self.txg.last_synced();
        let itxs: Vec<Itx> = {
            let mut p = self.pending.lock();
            let bytes: u64 = p
                .itxs
                .iter()
                .filter(|i| p.wants(i))
                .map(Itx::write_len)
                .sum();
            if bytes > LOG_BULK_BYTES {
                let newest = p.itxs.iter().filter(|i| p.wants(i)).map(|i| i.txg).max();
                drop(p);
                self.stats.lock().bulk_commits += 1;
                return Ok(self.txg.wait_synced(newest.unwrap_or(0))?);
            }
            // Everything the registered committers want, not only this
            // caller's records: they then find theirs written.
            let (take, keep): (VecDeque<Itx>, VecDeque<Itx>) = std::mem::take(&mut p.itxs)
                .into_iter()
                .partition(|i| p.wants(i));
            p.itxs = keep;
            take.into_iter().filter(|i| i.txg > synced).collect()
        };
        if itxs.is_empty() {
            return Ok(());
        }
        let max_txg = itxs.iter().map(|i| i.txg).max().unwrap_or(0);
        self.stats.lock().commits += 1;
        if self.write_records(&itxs).is_ok() {
            return Ok(());
        }
        // Never acknowledge without durability: fall back to the txg that
        // holds the same changes. The chain's tail may sit on a device
        // that failed: the next commit starts a new chain wherever the
        // pool now puts log blocks.
        self.stats.lock().fallbacks += 1;
        let fallback = self
            .reset_locked()
            .and_then(|reset| Ok(self.txg.wait_synced(max_txg.max(reset.unwrap_or(0)))?));
        if fallback.is_err() {
            // Neither the log nor the txg made them durable: they stay
            // pending, so a later fsync retries instead of finding
            // nothing to do and acknowledging what was never written.
            self.requeue(itxs, ticket);
        }
        fallback
    }

    /// Puts records the failed commit numbered `ticket` took back among
    /// the pending ones, in sequence order.
    fn requeue(&self, itxs: Vec<Itx>, ticket: u64) {
        let mut p = self.pending.lock();
        p.requeued_by = p.requeued_by.max(ticket);
        p.put_back(itxs);
        p.check();
    }
}

/// The writer's turn, given back on drop (every return path of the
/// writer, and a panic), which wakes the committers waiting for it.
struct Writing<'a>(&'a Zilog);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        let mut p = self.0.pending.lock();
        debug_assert!(p.finished < p.started, "the writer's turn ends once");
        p.finished += 1;
        p.poisoned |= std::thread::panicking();
        p.check();
        drop(p);
        self.0.committed.notify_all();
    }
}

/// A committer's registration in `PendingState::committing`, undone on
/// drop (every return path of `commit_for`).
struct Registered<'a> {
    pending: &'a PendingLock,
    obj: Option<u64>,
}

impl<'a> Registered<'a> {
    /// Registers the committer and returns the last sequence number logged
    /// before it: the records it must see durable are those up to there.
    /// Also returns the number the next commit to start will have: that
    /// commit takes every record the committer needs (and, if it fails,
    /// puts them back: see `commit_for`).
    fn new(pending: &'a PendingLock, obj: Option<u64>) -> (Self, u64, u64) {
        let mut p = pending.lock();
        match obj {
            Some(o) => *p.committing.entry(o).or_default() += 1,
            None => p.committing_all += 1,
        }
        p.check();
        let upto = p.next_seq.saturating_sub(1);
        let first = p.started + 1;
        (Registered { pending, obj }, upto, first)
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        let mut p = self.pending.lock();
        match self.obj {
            Some(o) => {
                if let Some(n) = p.committing.get_mut(&o) {
                    *n -= 1;
                    if *n == 0 {
                        p.committing.remove(&o);
                    }
                }
            }
            None => {
                debug_assert!(p.committing_all > 0, "registered once, unregistered once");
                p.committing_all -= 1;
            }
        }
        p.check();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(obj: u64) -> Pending {
        Pending::WriteRef {
            obj,
            offset: 0,
            len: 4096,
            indirect: false,
        }
    }

    fn objs(p: &PendingState) -> Vec<Option<u64>> {
        p.itxs.iter().map(Itx::async_obj).collect()
    }

    /// `remove_async` drops exactly the removed object's records, also
    /// after a sync forgot objects and after a failed commit put taken
    /// records back.
    #[test]
    fn removing_an_object_drops_its_records_only() {
        let lock = PendingLock::new(1);
        let mut p = lock.lock();
        p.push(5, write(1));
        p.push(5, write(2));
        p.push(6, write(1));
        p.remove_async(3); // nothing of it: nothing changes
        assert_eq!(objs(&p), [Some(1), Some(2), Some(1)]);
        p.remove_async(1);
        assert_eq!(objs(&p), [Some(2)]);
        // A commit takes object 2's record; a sync forgets the objects
        // of what is left (nothing); the commit fails and puts it back.
        let taken: Vec<Itx> = std::mem::take(&mut p.itxs).into();
        p.push(7, write(4));
        p.drop_before(7);
        assert!(!p.async_objs.contains(&2));
        p.put_back(taken);
        assert_eq!(objs(&p), [Some(2), Some(4)]);
        p.remove_async(2);
        assert_eq!(objs(&p), [Some(4)]);
        p.drop_before(8);
        assert!(p.itxs.is_empty() && p.async_objs.is_empty());
    }
}
