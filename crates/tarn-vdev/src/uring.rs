//! Durable writes to several devices, or several places, at once, from
//! one thread.
//!
//! A mirror's intent-log block must be durable on every child before the
//! `fsync` that waits for it returns. Handing all children but one to
//! other threads (`parallel::at_once`) costs a wake-up on the way out and
//! another on the way back, a tenth of a 4 KiB fsync through FUSE on the
//! machines tarn is built on. Here the calling thread puts one
//! `RWF_DSYNC` write per child but the first on its own io_uring, writes
//! the first itself (an ordinary `RWF_DSYNC` write, so its flush runs on
//! this thread as it would without a ring) and then waits for the ring:
//! the kernel starts them together and nothing in user space has to wake
//! up but the caller. A 4 KiB fsync on a mirror got faster than with the
//! thread hand-off, for half the daemon's CPU time (docs/MEASUREMENTS.md,
//! "Vdev: a mirror's log block from one io_uring").
//!
//! An intent-log commit of several blocks goes out the same way
//! ([`write_durable_each`]: each write with its own buffer), on one
//! device as on several. Handing the second block to a round-trip thread
//! cost more than the write itself when the CPUs were busy: those threads
//! waited for a CPU, and every fsync of the commit with them
//! (docs/MEASUREMENTS.md, "Vdev: a commit's log blocks from one
//! io_uring").
//!
//! This is only a faster way to do what `BlockDevice::write_durable`
//! does on a file's `O_DIRECT` descriptor. Whatever it cannot take — an
//! unaligned offset, a device without a direct descriptor, injected
//! faults, a kernel or sandbox without io_uring — goes the ordinary way,
//! and so does any write it reports failed, so errors are counted and
//! retried in one place.
//!
//! Soundness rests on one rule: [`write_durable_all`] never returns while
//! the kernel may still read the buffer. It waits for a completion for
//! every entry the kernel took, even when waiting through the ring's
//! system call fails (it then watches the completion queue, which the
//! kernel fills regardless).

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use io_uring::{opcode, types, IoUring};

use crate::device::{aligned_slice, with_aligned, IO_ALIGN};

/// Entries in each thread's ring: the most devices one call writes to.
/// A wider write (a raidz of more children) goes the ordinary way.
pub const URING_ENTRIES: u32 = 16;

/// How long to sleep between looks at the completion queue when the
/// ring's system call fails while writes are in flight.
const REAP_PAUSE: Duration = Duration::from_millis(1);

enum Ring {
    Untried,
    Ready(Box<IoUring>),
    /// Setting one up failed, or one failed in a way that makes it
    /// unsafe to reuse: this thread writes the ordinary way from now on.
    Unavailable,
}

thread_local! {
    static RING: RefCell<Ring> = const { RefCell::new(Ring::Untried) };
}

/// One device's share of a durable write: its `O_DIRECT` descriptor and
/// the byte offset on it.
pub(crate) struct Target<'a> {
    pub fd: BorrowedFd<'a>,
    pub offset: u64,
}

/// Writes all of `buf` at every target's offset, `RWF_DSYNC`, all at
/// once; returns each target's result in order, or `None` if this thread
/// cannot use io_uring (nothing was written then).
pub(crate) fn write_durable_all(targets: &[Target<'_>], buf: &[u8]) -> Option<Vec<io::Result<()>>> {
    with_aligned(buf, |b| {
        let writes: Vec<(&Target<'_>, &[u8])> = targets.iter().map(|t| (t, b)).collect();
        on_ring(&writes)
    })
}

/// [`write_durable_all`] of a different buffer per target (`(target,
/// bytes)`): several intent-log blocks of one commit, on one device or
/// several. An unaligned buffer is copied once, however many targets
/// share it.
pub(crate) fn write_durable_each(writes: &[(Target<'_>, &[u8])]) -> Option<Vec<io::Result<()>>> {
    let mut copies: Vec<(*const u8, usize, Vec<u8>)> = Vec::new();
    for (_, buf) in writes {
        let key = (buf.as_ptr(), buf.len());
        if !(buf.as_ptr() as usize).is_multiple_of(IO_ALIGN)
            && !copies.iter().any(|(p, l, _)| (*p, *l) == key)
        {
            let mut backing = Vec::new();
            aligned_slice(&mut backing, buf.len()).copy_from_slice(buf);
            copies.push((key.0, key.1, backing));
        }
    }
    let aligned: Vec<(&Target<'_>, &[u8])> = writes
        .iter()
        .map(|(t, buf)| {
            let copy = copies
                .iter()
                .find(|(p, l, _)| (*p, *l) == (buf.as_ptr(), buf.len()));
            match copy {
                Some((_, len, backing)) => {
                    let at = backing.as_ptr().align_offset(IO_ALIGN);
                    (t, &backing[at..at + len])
                }
                None => (t, *buf),
            }
        })
        .collect();
    on_ring(&aligned)
}

/// `writes` (aligned buffers) through this thread's ring: see [`run`].
fn on_ring(writes: &[(&Target<'_>, &[u8])]) -> Option<Vec<io::Result<()>>> {
    if writes.is_empty()
        || writes.len() > URING_ENTRIES as usize
        || writes.iter().any(|(_, b)| u32::try_from(b.len()).is_err())
    {
        return None;
    }
    RING.with(|cell| {
        let mut ring = cell.borrow_mut();
        if matches!(*ring, Ring::Untried) {
            *ring = new_ring().map_or(Ring::Unavailable, |r| Ring::Ready(Box::new(r)));
        }
        let Ring::Ready(r) = &mut *ring else {
            return None;
        };
        match run(r, writes) {
            Some(results) => Some(results),
            None => {
                *ring = Ring::Unavailable;
                None
            }
        }
    })
}

/// A ring for this thread alone: completions are handled when it waits
/// (`DEFER_TASKRUN`, which needs `SINGLE_ISSUER`; Linux 6.1), so the
/// kernel does not interrupt it for each one; a plain ring on older
/// kernels.
fn new_ring() -> io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(URING_ENTRIES)
        .or_else(|_| IoUring::new(URING_ENTRIES))
}

/// The writes: the first on this thread, the others on `ring`. `None`:
/// the ring failed before the kernel took its entries, and must not be
/// used again (the caller then writes them the ordinary way; writing the
/// first twice is harmless). Every buffer is aligned for `O_DIRECT` and
/// shorter than 4 GiB (`on_ring` checks).
fn run(ring: &mut IoUring, writes: &[(&Target<'_>, &[u8])]) -> Option<Vec<io::Result<()>>> {
    let n = writes.len();
    {
        let mut sq = ring.submission();
        for (i, (t, buf)) in writes.iter().enumerate().skip(1) {
            let len = u32::try_from(buf.len()).ok()?;
            let entry = opcode::Write::new(types::Fd(t.fd.as_raw_fd()), buf.as_ptr(), len)
                .offset(t.offset)
                .rw_flags(libc::RWF_DSYNC)
                .build()
                .user_data(i as u64);
            // SAFETY: the entry points at `buf` (`len` bytes) and at a
            // descriptor, both borrowed for this call. The kernel reads both
            // only until the entry completes, and this function does not
            // return while an entry it submitted is incomplete (the
            // loop below; an entry never submitted is dropped with the
            // ring, unread). The queue is empty here — every call leaves
            // it so — and holds `URING_ENTRIES` ≥ `n`, so the push fits.
            if unsafe { sq.push(&entry) }.is_err() {
                return None;
            }
        }
    }
    let mut results: Vec<Option<io::Result<()>>> = (0..n).map(|_| None).collect();
    // The others start first (an error here is met again, and dealt
    // with, in the wait below), then the first is written here.
    let _ = ring.submit();
    results[0] = Some(crate::file::pwrite_dsync_fd(
        writes[0].0.fd,
        writes[0].1,
        writes[0].0.offset,
    ));
    let mut done = 1;
    let mut broken = false;
    while done < n {
        if !broken {
            match ring.submit_and_wait(n - done) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) => {}
                Err(_) => broken = true,
            }
        }
        for cqe in ring.completion() {
            let Some(slot) = usize::try_from(cqe.user_data())
                .ok()
                .and_then(|i| results.get_mut(i))
            else {
                continue;
            };
            if slot.is_none() {
                let (t, buf) = writes[cqe.user_data() as usize];
                *slot = Some(finish(cqe.result(), t, buf));
                done += 1;
            }
        }
        if broken && done < n {
            // Entries that never reached the kernel will never complete;
            // once only they are left, nothing is in flight any more.
            if n - done == ring.submission().len() {
                return None;
            }
            std::thread::sleep(REAP_PAUSE);
        }
    }
    Some(
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(io::ErrorKind::Other.into())))
            .collect(),
    )
}

/// The result of one write from its completion: a short write is
/// finished with an ordinary `RWF_DSYNC` write.
fn finish(res: i32, t: &Target<'_>, buf: &[u8]) -> io::Result<()> {
    let written = usize::try_from(res).map_err(|_| io::Error::from_raw_os_error(-res))?;
    if written >= buf.len() {
        return Ok(());
    }
    if written == 0 {
        return Err(io::ErrorKind::WriteZero.into());
    }
    crate::file::pwrite_dsync_fd(t.fd, &buf[written..], t.offset + written as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::os::fd::AsFd;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};

    fn file(dir: &std::path::Path, name: &str, direct: bool, write: bool) -> std::fs::File {
        let p = dir.join(name);
        if !p.exists() {
            std::fs::File::create(&p).unwrap().set_len(1 << 20).unwrap();
        }
        OpenOptions::new()
            .read(true)
            .write(write)
            .custom_flags(if direct { libc::O_DIRECT } else { 0 })
            .open(&p)
            .unwrap()
    }

    #[test]
    fn each_target_gets_its_own_result_and_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let a = file(dir.path(), "a", true, true);
        let b = file(dir.path(), "b", true, true);
        // Read-only: the kernel refuses this one write (EBADF) alone.
        let ro = file(dir.path(), "c", false, false);
        let data: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
        let targets = [
            Target {
                fd: a.as_fd(),
                offset: 4096,
            },
            Target {
                fd: ro.as_fd(),
                offset: 0,
            },
            Target {
                fd: b.as_fd(),
                offset: 65536,
            },
        ];
        let results = write_durable_all(&targets, &data[..])
            .expect("io_uring works on the machines tarn is built and tested on");
        assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
        assert_eq!(
            results[1].as_ref().unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
        let read_back = |name: &str, at: u64, len: usize| {
            let mut got = vec![0u8; len];
            file(dir.path(), name, false, false)
                .read_exact_at(&mut got, at)
                .unwrap();
            got
        };
        assert_eq!(read_back("a", 4096, data.len()), data);
        assert_eq!(read_back("b", 65536, data.len()), data);
        // The ring is still good for the next call, and an unaligned
        // buffer goes through the bounce copy.
        let odd = &data[1..4097];
        let again = write_durable_all(&targets[..1], odd).unwrap();
        assert!(again[0].is_ok());
        assert_eq!(read_back("a", 4096, odd.len()), odd);
    }

    #[test]
    fn each_write_takes_its_own_buffer_and_gets_its_own_result() {
        let dir = tempfile::tempdir().unwrap();
        let a = file(dir.path(), "a", true, true);
        let ro = file(dir.path(), "c", false, false);
        let data: Vec<u8> = (0..12289u32).map(|i| (i * 13) as u8).collect();
        // Two unaligned buffers, the first shared by two writes, and a
        // write the kernel refuses (EBADF) on its own.
        let first = &data[1..8193];
        let second = &data[1..4097];
        let at = |fd, offset| Target { fd, offset };
        let writes = [
            (at(a.as_fd(), 0), first),
            (at(a.as_fd(), 65536), second),
            (at(ro.as_fd(), 0), second),
            (at(a.as_fd(), 131072), first),
        ];
        let results = write_durable_each(&writes)
            .expect("io_uring works on the machines tarn is built and tested on");
        assert!(results[0].is_ok() && results[1].is_ok() && results[3].is_ok());
        assert_eq!(
            results[2].as_ref().unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
        let mut got = vec![0u8; first.len()];
        let back = file(dir.path(), "a", false, false);
        back.read_exact_at(&mut got, 0).unwrap();
        assert_eq!(got, first);
        back.read_exact_at(&mut got, 131072).unwrap();
        assert_eq!(got, first);
        let mut got = vec![0u8; second.len()];
        back.read_exact_at(&mut got, 65536).unwrap();
        assert_eq!(got, second);
    }

    #[test]
    fn more_targets_than_the_ring_holds_go_the_ordinary_way() {
        let dir = tempfile::tempdir().unwrap();
        let a = file(dir.path(), "a", true, true);
        let many: Vec<Target<'_>> = (0..=URING_ENTRIES as u64)
            .map(|i| Target {
                fd: a.as_fd(),
                offset: i * 4096,
            })
            .collect();
        assert!(write_durable_all(&many, &[0u8; 4096]).is_none());
        assert!(write_durable_all(&[], &[0u8; 4096]).is_none());
    }
}
