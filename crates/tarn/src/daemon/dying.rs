//! A daemon that cannot finish dying, and how the next one ends it.
//!
//! The daemon serves its own FUSE mounts, and a few of its threads also
//! use them (a mountpoint made inside a parent dataset's mount, a
//! directory opened there). A request of such a thread that one of the
//! daemon's FUSE workers had already taken when the daemon was killed
//! (SIGKILL) is never answered, and the kernel waits for the answer
//! uninterruptibly, as long as the connection lives. The connection lives
//! until `/dev/fuse` is closed, which happens when the last thread of the
//! daemon has exited — never, since that thread is the one waiting. The
//! process then shows as a zombie that still holds its lock, and no new
//! daemon can start.
//!
//! So each daemon records the FUSE mounts it makes in the run directory
//! ([`Paths::mounts`]: `MAJOR:MINOR<TAB>PATH` lines, emptied when a
//! daemon starts); a client about to connect, and a daemon that finds the
//! lock taken, first check whether the lock's holder is such a zombie
//! ([`dying_holder`]) and if so abort the connections of its mounts that
//! are still there (`tarn_fuse::abort_connection`), after which it dies
//! and releases the lock ([`recover`]). The mounts themselves are then
//! dead and the next daemon detaches and replaces them as after any crash.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};

use crate::paths::Paths;

/// How long [`recover`] waits for the dying daemon to let go of its lock
/// once its connections are aborted.
pub const DYING_EXIT_WAIT_MAX: Duration = Duration::from_secs(10);

/// Records a mount this daemon made (see the module comment).
pub fn record_mount(record: &Path, dev: (u32, u32), path: &Path) {
    let line = format!("{}:{}\t{}\n", dev.0, dev.1, path.display());
    let r = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(record)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = r {
        eprintln!(
            "tarn daemon: cannot record the mount {}: {e}",
            path.display()
        );
    }
}

/// The mounts a record lists.
fn recorded_mounts(record: &Path) -> Vec<((u32, u32), PathBuf)> {
    let text = std::fs::read_to_string(record).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (dev, path) = l.split_once('\t')?;
            let (major, minor) = dev.split_once(':')?;
            Some((
                (major.parse().ok()?, minor.parse().ok()?),
                PathBuf::from(path),
            ))
        })
        .collect()
}

/// Whether someone holds the lock file (asked with a shared lock, which
/// the daemon's exclusive one refuses).
fn lock_held(lock: &Path) -> bool {
    let Ok(file) = File::open(lock) else {
        return false;
    };
    Flock::lock(file, FlockArg::LockSharedNonblock).is_err()
}

/// The pid of the lock's holder if it is a daemon that cannot finish
/// dying: its main thread has exited (a zombie) but the lock is still
/// held, so another thread of it lives on.
pub fn dying_holder(lock: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(lock).ok()?.trim().parse().ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    (is_zombie(&stat) && lock_held(lock)).then_some(pid)
}

/// Whether a `/proc/PID/stat` line is a zombie's: `pid (comm) Z ...`, the
/// state after the last `)` (the command name may hold any byte).
fn is_zombie(stat: &str) -> bool {
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
        == Some('Z')
}

/// If the lock's holder is a daemon that cannot finish dying, aborts the
/// FUSE connections of its mounts and waits (up to
/// [`DYING_EXIT_WAIT_MAX`]) until it has let go of the lock. Returns
/// whether it found one.
pub fn recover(paths: &Paths) -> bool {
    let Some(pid) = dying_holder(&paths.lock) else {
        return false;
    };
    for (dev, path) in recorded_mounts(&paths.mounts) {
        match tarn_fuse::abort_connection(dev, &path) {
            Ok(true) => eprintln!(
                "tarn: daemon {pid} was killed while it waited on its own mount {}: \
                 its FUSE connection was aborted",
                path.display()
            ),
            Ok(false) => {}
            Err(e) => eprintln!(
                "tarn: cannot abort the FUSE connection of {} (daemon {pid}, killed): {e}",
                path.display()
            ),
        }
    }
    let deadline = Instant::now() + DYING_EXIT_WAIT_MAX;
    while lock_held(&paths.lock) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zombies_are_told_from_their_stat_line() {
        assert!(is_zombie("4242 (tarn) Z 1 4242 4242 0 -1 4227332"));
        assert!(is_zombie("4242 (a) b) Z 1 2"));
        assert!(!is_zombie("4242 (tarn) S 1 4242 4242 0 -1 4227332"));
        assert!(!is_zombie(""));
    }

    #[test]
    fn the_record_lists_the_mounts_it_was_given() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("tarn.mounts");
        assert!(recorded_mounts(&record).is_empty());
        record_mount(&record, (0, 44), Path::new("/tank"));
        record_mount(&record, (0, 45), Path::new("/tank/with space"));
        std::fs::OpenOptions::new()
            .append(true)
            .open(&record)
            .unwrap()
            .write_all(b"garbage\n0:x\tpath\n")
            .unwrap();
        assert_eq!(
            recorded_mounts(&record),
            [
                ((0, 44), PathBuf::from("/tank")),
                ((0, 45), PathBuf::from("/tank/with space"))
            ]
        );
    }

    #[test]
    fn a_live_holder_or_none_is_not_dying() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("tarn.lock");
        assert_eq!(dying_holder(&lock), None);
        // This process: alive (and not holding the lock).
        std::fs::write(&lock, format!("{}\n", std::process::id())).unwrap();
        assert_eq!(dying_holder(&lock), None);
        let paths = Paths::in_dir(
            dir.path().into(),
            dir.path().join("s"),
            dir.path().join("c"),
        );
        assert!(!recover(&paths));
    }
}
