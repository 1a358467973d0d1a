//! Device round trips on several devices at once.
//!
//! A flush or a durable write of a mirror or raidz waits for its slowest
//! device, not for the sum of them: every device gets its request at the
//! same time. The first goes on the calling thread; the others go to
//! [`ROUND_TRIP_THREADS`] threads that live as long as the process and
//! sleep on a channel between requests. Starting a thread per request
//! costs more than the request: spawning and joining one takes several
//! times as long as handing work to a running thread and back, and an
//! intent-log commit is one such round trip (docs/MEASUREMENTS.md, "Vdev:
//! round-trip threads").
//!
//! The threads block rather than spin when idle. A work-stealing pool
//! (`rayon_core`, used here before) yields in a loop for a while after
//! every job, and with frequent intent-log commits that kept its threads
//! in `sched_yield` for most of the daemon's CPU time, on a two-core
//! machine whose other core the application and the FUSE threads needed
//! (docs/MEASUREMENTS.md, "Vdev: round-trip threads").

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::OnceLock;
use std::thread;

use crossbeam_channel::{Receiver, Sender};

/// Threads that take device round trips (flushes, durable writes) off a
/// caller that has several devices to wait for. Requests beyond what
/// they and a queue of as many again hold run on their caller's thread
/// instead (bounded, like OpenZFS's vdev taskqs).
pub const ROUND_TRIP_THREADS: usize = 8;

/// A round trip handed to a pool thread. Its borrows are erased to
/// `'static` by [`at_once`], which does not return before the job ran.
type Job = Box<dyn FnOnce() + Send + 'static>;

static POOL: OnceLock<Option<Sender<Job>>> = OnceLock::new();

/// The pool's queue, started by the first caller; `None` if the system
/// would not give it a thread (then every caller runs the items itself,
/// one after the other).
fn pool() -> Option<&'static Sender<Job>> {
    POOL.get_or_init(|| {
        // Room for one job per thread: a burst finds them queued for the
        // threads (also the threads' first, before they are all up), and
        // past that its caller runs them rather than queue deeper.
        let (tx, rx) = crossbeam_channel::bounded::<Job>(ROUND_TRIP_THREADS);
        let mut started = 0;
        for i in 0..ROUND_TRIP_THREADS {
            let rx: Receiver<Job> = rx.clone();
            let spawned = thread::Builder::new()
                .name(format!("tarn-vio-{i}"))
                .spawn(move || {
                    for job in rx {
                        job();
                    }
                });
            started += usize::from(spawned.is_ok());
        }
        (started > 0).then_some(tx)
    })
    .as_ref()
}

/// Runs `io` on every item at once, the first on the calling thread, and
/// returns the results in order. A panic in `io` is passed on, as if it
/// ran here, once every item is done.
pub(crate) fn at_once<T: Sync, R: Send>(items: &[T], io: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let Some((first, rest)) = items.split_first() else {
        return Vec::new();
    };
    if rest.is_empty() {
        return vec![io(first)];
    }
    let io = &io;
    let mut others: Vec<Option<thread::Result<R>>> = rest.iter().map(|_| None).collect();
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(rest.len());
    let mut inline = Vec::new();
    for (t, out) in rest.iter().zip(others.iter_mut()) {
        let done = done_tx.clone();
        let job: Box<dyn FnOnce() + Send + '_> = Box::new(move || {
            *out = Some(catch_unwind(AssertUnwindSafe(|| io(t))));
            // Last: once this is received the caller may return and
            // free what `out`, `t` and `io` point to; the sender is owned.
            let _ = done.send(());
        });
        // SAFETY: the job borrows `items`, `io` and one slot of `others`,
        // all of which outlive this call. Every job is either run below on
        // this thread or accepted by a pool thread, and this function does
        // not return — nor unwind, as the caller's own item runs under
        // `catch_unwind` — before it has received one `done` per job; a job sends `done` as its last use of the borrows (a panic
        // in `io` is caught inside the job first). So no borrow is used
        // after it ends. Erasing the lifetime only lets the box cross the
        // channel, it does not extend any use.
        let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + '_>, Job>(job) };
        let sent = match pool() {
            Some(tx) => tx.try_send(job).map_err(|e| e.into_inner()),
            None => Err(job),
        };
        if let Err(job) = sent {
            inline.push(job);
        }
    }
    let mine = catch_unwind(AssertUnwindSafe(|| io(first)));
    for job in inline {
        job();
    }
    // Every job, handed over or run here, sends one `done`.
    for _ in 0..rest.len() {
        // A pool thread never drops a job unrun, so this cannot fail.
        done_rx.recv().expect("a round-trip thread ran its job");
    }
    std::iter::once(Some(mine))
        .chain(others)
        .map(|r| match r.expect("every item ran") {
            Ok(v) => v,
            Err(panic) => resume_unwind(panic),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_runs_once_and_results_keep_their_order() {
        for n in 0..20 {
            let items: Vec<u64> = (0..n).collect();
            let runs = std::sync::atomic::AtomicUsize::new(0);
            let out = at_once(&items, |&i| {
                runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                i * 3
            });
            assert_eq!(out, items.iter().map(|i| i * 3).collect::<Vec<_>>());
            assert_eq!(runs.into_inner(), n as usize);
        }
    }

    #[test]
    fn round_trips_overlap() {
        // Four 50 ms waits take about one wait, not four.
        let t = std::time::Instant::now();
        at_once(&[0u8; 4], |_| {
            std::thread::sleep(std::time::Duration::from_millis(50))
        });
        assert!(t.elapsed() < std::time::Duration::from_millis(180));
    }

    #[test]
    fn more_items_than_threads_run_on_their_callers_and_all_finish() {
        // Four callers with six slow items each: 20 jobs for 8 threads, so
        // some run on their callers; every result lands in its own slot.
        std::thread::scope(|s| {
            for c in 0..4u64 {
                s.spawn(move || {
                    let items: Vec<u64> = (0..6).map(|i| c * 100 + i).collect();
                    let out = at_once(&items, |&i| {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        i + 1
                    });
                    assert_eq!(out, items.iter().map(|i| i + 1).collect::<Vec<_>>());
                });
            }
        });
    }

    #[test]
    fn a_panic_reaches_the_caller_after_the_others_ran() {
        let done = std::sync::atomic::AtomicUsize::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            at_once(&[0u8, 1, 2], |&i| {
                if i == 1 {
                    panic!("item 1");
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            })
        }));
        assert!(r.is_err());
        assert_eq!(done.into_inner(), 2);
    }
}
