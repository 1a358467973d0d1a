//! Bounded busy polling of the FUSE device (a tarn patch; see TARN.md).
//!
//! A worker that has just answered a request keeps reading its device fd
//! without blocking, yielding the CPU between tries, for a short window.
//! A request that arrives in the window is taken without the kernel waking
//! a sleeping thread, and the CPU it is taken on never went idle. Where
//! waking an idle CPU is dear (virtual machines whose idle vCPUs halt to the
//! host), that is most of a metadata request's round trip. Outside the window
//! the worker blocks in `read` as before, so an idle file system costs
//! nothing.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use crate::channel::Channel;

/// How long workers poll and how many may poll at once. Clones share the
/// count, so one budget can bound the polling of several sessions.
#[derive(Debug, Clone)]
pub struct PollBudget {
    window: Duration,
    max_pollers: usize,
    pollers: Arc<AtomicUsize>,
}

impl PollBudget {
    /// Workers poll for `window` after each request, at most `max_pollers`
    /// of them at a time.
    pub fn new(window: Duration, max_pollers: usize) -> PollBudget {
        PollBudget {
            window,
            max_pollers,
            pollers: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// How long a worker polls after a request.
    pub(crate) fn window(&self) -> Duration {
        self.window
    }

    /// How many workers are polling now.
    pub fn pollers(&self) -> usize {
        self.pollers.load(Ordering::Relaxed)
    }

    fn try_take(&self) -> bool {
        if self.window.is_zero() {
            return false;
        }
        self.pollers
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < self.max_pollers).then_some(n + 1)
            })
            .is_ok()
    }

    fn give_back(&self) {
        self.pollers.fetch_sub(1, Ordering::AcqRel);
    }
}

impl PartialEq for PollBudget {
    fn eq(&self, other: &PollBudget) -> bool {
        self.window == other.window
            && self.max_pollers == other.max_pollers
            && Arc::ptr_eq(&self.pollers, &other.pollers)
    }
}

impl Eq for PollBudget {}

/// One worker's polling state: while it holds a slot of the budget its fd
/// is non-blocking. Dropping it gives both back.
pub(crate) struct Poller<'a> {
    budget: Option<&'a PollBudget>,
    ch: &'a Channel,
    deadline: Option<Instant>,
}

impl<'a> Poller<'a> {
    pub(crate) fn new(budget: Option<&'a PollBudget>, ch: &'a Channel) -> Poller<'a> {
        Poller {
            budget,
            ch,
            deadline: None,
        }
    }

    /// Reads the next request: polling while the window is open, else
    /// blocking.
    pub(crate) fn receive(&mut self, buf: &mut [u8]) -> nix::Result<usize> {
        while let Some(deadline) = self.deadline {
            match self.ch.receive(buf) {
                Err(nix::errno::Errno::EAGAIN) => {
                    if Instant::now() >= deadline {
                        self.stop();
                    } else {
                        std::thread::yield_now();
                    }
                }
                Err(nix::errno::Errno::ENOENT | nix::errno::Errno::EINTR) => {}
                r => return r,
            }
        }
        self.ch.receive_retrying(buf)
    }

    /// A request was answered: (re)open the window if the budget allows.
    pub(crate) fn answered(&mut self) {
        let Some(budget) = self.budget else { return };
        if self.deadline.is_none() {
            if !budget.try_take() {
                return;
            }
            if set_nonblocking(self.ch, true).is_err() {
                budget.give_back();
                return;
            }
        }
        self.deadline = Some(Instant::now() + budget.window);
    }

    fn stop(&mut self) {
        if self.deadline.take().is_some() {
            // A descriptor left non-blocking only makes this worker spin in
            // `receive_retrying`; that cannot happen: F_SETFL on an open fd
            // with a valid flag set does not fail.
            let _ = set_nonblocking(self.ch, false);
            if let Some(b) = self.budget {
                b.give_back();
            }
        }
    }
}

impl Drop for Poller<'_> {
    fn drop(&mut self) {
        self.stop();
    }
}

fn set_nonblocking(ch: &Channel, on: bool) -> nix::Result<()> {
    use nix::fcntl::FcntlArg;
    use nix::fcntl::OFlag;
    use nix::fcntl::fcntl;
    let fd = ch.as_fd();
    let flags = OFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFL)?);
    let flags = if on {
        flags | OFlag::O_NONBLOCK
    } else {
        flags & !OFlag::O_NONBLOCK
    };
    fcntl(fd, FcntlArg::F_SETFL(flags)).map(drop)
}
