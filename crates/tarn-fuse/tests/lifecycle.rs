//! Mounting, unmounting and the mount table: `fuse.tarn` with the dataset
//! as source, negotiated features, busy and forced unmounts, remount after
//! export/import keeps data and inode numbers, read-only mounts, stale
//! mounts of a dead daemon, parallel writers, bounded busy polling.

mod common;

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::Arc;

use common::{c, options, Mounted, DATASET};
use tarn_fuse::{FuseError, MountOptions};

#[test]
fn listed_as_fuse_tarn_with_the_dataset_name() {
    let m = Mounted::new();
    let proc_mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let line = proc_mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(m.mnt.to_str().unwrap()))
        .expect("mount listed in /proc/mounts");
    let f: Vec<&str> = line.split(' ').collect();
    assert_eq!((f[0], f[2]), (DATASET, "fuse.tarn"), "{line}");
    assert!(
        f[3].contains("default_permissions") && f[3].contains("allow_other"),
        "{line}"
    );
    let feat = m.handle.as_ref().unwrap().features();
    assert!(
        feat.writeback_cache && feat.parallel_dirops && feat.async_read,
        "{feat:?}"
    );
    assert_eq!(feat.max_write, 1 << 20);
    assert!(feat.read_ahead_kb >= 1024, "{feat:?}");
    assert!(tarn_fuse::stale_mounts().iter().all(|p| p != &m.mnt));
    assert!(
        !tarn_fuse::is_mountpoint_empty(&m.mnt) || std::fs::read_dir(&m.mnt).unwrap().count() == 0
    );
}

#[test]
fn busy_unmount_names_the_holder_and_force_detaches() {
    let mut m = Mounted::new();
    std::fs::write(m.path("held"), b"still here").unwrap();
    let mut f = File::open(m.path("held")).unwrap();
    let err = m.handle().unmount(false).unwrap_err();
    let msg = err.to_string();
    match &err {
        FuseError::Busy { holders, .. } => {
            let me = format!("pid {} ", std::process::id());
            assert!(
                holders
                    .iter()
                    .any(|h| h.starts_with(&me) && h.contains("held")),
                "{msg}"
            );
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    assert!(
        msg.contains("busy") && msg.contains(m.mnt.to_str().unwrap()),
        "{msg}"
    );
    // Still mounted and working.
    assert!(m.handle().is_mounted());
    std::fs::write(m.path("more"), b"x").unwrap();
    // Forced: the name goes at once; the open file keeps working.
    m.handle().unmount(true).unwrap();
    assert!(tarn_fuse::tarn_mounts()
        .iter()
        .all(|t| t.mountpoint != m.mnt));
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "still here");
    drop(f);
    assert!(matches!(
        m.handle().unmount(false),
        Err(FuseError::NotMounted { .. })
    ));
}

#[test]
fn remount_keeps_data_and_inode_numbers() {
    let mut m = Mounted::new();
    std::fs::create_dir(m.path("d")).unwrap();
    std::fs::write(m.path("d/f"), b"persistent").unwrap();
    std::fs::write(m.path("big"), vec![0xA5u8; 5 << 20]).unwrap();
    let root_ino = std::fs::metadata(&m.mnt).unwrap().ino();
    let inos: Vec<u64> = ["d", "d/f", "big"]
        .iter()
        .map(|p| std::fs::metadata(m.path(p)).unwrap().ino())
        .collect();
    // A clean unmount ends the session: it no longer holds the Zpl.
    let zpl = m.zpl.clone().unwrap();
    m.handle.take().unwrap().unmount(false).unwrap();
    assert_eq!(
        Arc::strong_count(&zpl),
        2,
        "the session still holds the filesystem"
    );
    drop(zpl);
    m.handle = Some(tarn_fuse::mount(m.zpl.clone().unwrap(), &m.mnt, &options()).unwrap());
    m.remount(&options());
    assert_eq!(std::fs::metadata(&m.mnt).unwrap().ino(), root_ino);
    for (p, ino) in ["d", "d/f", "big"].iter().zip(&inos) {
        assert_eq!(std::fs::metadata(m.path(p)).unwrap().ino(), *ino, "{p}");
    }
    assert_eq!(std::fs::read(m.path("d/f")).unwrap(), b"persistent");
    let big = std::fs::read(m.path("big")).unwrap();
    assert!(big.len() == 5 << 20 && big.iter().all(|&b| b == 0xA5));

    // Read-only: reads work, every change is EROFS.
    m.remount(&MountOptions {
        readonly: true,
        ..options()
    });
    assert_eq!(std::fs::read(m.path("d/f")).unwrap(), b"persistent");
    for e in [
        std::fs::write(m.path("new"), b"x").unwrap_err(),
        std::fs::remove_file(m.path("d/f")).unwrap_err(),
        std::fs::create_dir(m.path("nd")).unwrap_err(),
        std::fs::OpenOptions::new()
            .write(true)
            .open(m.path("d/f"))
            .unwrap_err(),
    ] {
        assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    }

    // Read-only in the filesystem but not in the kernel (a busy mount
    // made readonly by `zfs set`): reads work, opens for writing are
    // refused instead of filling the writeback cache.
    m.remount(&options());
    let zpl = m.zpl.clone().unwrap();
    let mut settings = zpl.settings();
    settings.readonly = true;
    zpl.set_settings(settings).unwrap();
    assert_eq!(std::fs::read(m.path("d/f")).unwrap(), b"persistent");
    let e = std::fs::OpenOptions::new()
        .write(true)
        .open(m.path("d/f"))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
}

#[test]
fn mount_errors_and_drop_unmounts() {
    let m = Mounted::new();
    let zpl = m.zpl.clone().unwrap();
    let missing = m.mnt.parent().unwrap().join("missing");
    let e = tarn_fuse::mount(zpl.clone(), &missing, &options()).unwrap_err();
    assert!(matches!(e, FuseError::Mount { .. }), "{e}");
    assert!(e.to_string().contains(DATASET), "{e}");
    let bad = MountOptions {
        threads: 0,
        ..options()
    };
    assert!(matches!(
        tarn_fuse::mount(zpl.clone(), &m.mnt, &bad),
        Err(FuseError::Options(_))
    ));
    // A second mount of the same filesystem elsewhere, dropped.
    let other = m.mnt.parent().unwrap().join("other");
    std::fs::create_dir(&other).unwrap();
    let h = tarn_fuse::mount(zpl, &other, &options()).unwrap();
    std::fs::write(other.join("via-other"), b"1").unwrap();
    assert_eq!(std::fs::read(m.path("via-other")).unwrap(), b"1");
    drop(h);
    let other = other.canonicalize().unwrap();
    assert!(tarn_fuse::tarn_mounts()
        .iter()
        .all(|t| t.mountpoint != other));
    assert!(tarn_fuse::is_mountpoint_empty(&other));
}

/// A `fuse.tarn` mount at `path` whose server is this `/dev/fuse`
/// descriptor, which nobody reads: closing it is a dead daemon.
fn fuse_mount_unserved(path: &std::path::Path) -> File {
    let dev = File::options()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .unwrap();
    let data = format!("fd={},rootmode=40755,user_id=0,group_id=0", dev.as_raw_fd());
    let data = std::ffi::CString::new(data).unwrap();
    // SAFETY: valid strings.
    let r = unsafe {
        libc::mount(
            c"tank/unserved".as_ptr(),
            c(path).as_ptr(),
            c"fuse.tarn".as_ptr(),
            0,
            data.as_ptr().cast(),
        )
    };
    assert_eq!(r, 0, "mount: {}", std::io::Error::last_os_error());
    dev
}

#[test]
fn stale_mount_of_a_dead_daemon_is_found_and_detached() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().canonicalize().unwrap();
    let dev = fuse_mount_unserved(&path);
    // The "daemon" dies: its /dev/fuse fd closes and the connection ends.
    drop(dev);
    let stale = tarn_fuse::stale_mounts();
    let found = stale.contains(&path);
    // Detach it whatever happened, then judge.
    let detached = tarn_fuse::unmount_path(&path, true);
    assert!(found, "{} not in {stale:?}", path.display());
    detached.unwrap();
    assert!(tarn_fuse::tarn_mounts()
        .iter()
        .all(|t| t.mountpoint != path));
    assert!(matches!(
        tarn_fuse::unmount_path(&path, false),
        Err(FuseError::NotMounted { .. })
    ));
}

#[test]
fn abort_connection_ends_a_mount_whose_server_never_answers() {
    // A mount whose /dev/fuse descriptor stays open but is never read: a
    // daemon that cannot finish dying (tarn's `daemon::dying`).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().canonicalize().unwrap();
    let dev = fuse_mount_unserved(&path);
    let found = tarn_fuse::tarn_mounts()
        .into_iter()
        .find(|m| m.mountpoint == path)
        .expect("listed");
    // Another path, or another device: not touched.
    let other = (found.dev.0, found.dev.1 + 1000);
    let wrong_path = tarn_fuse::abort_connection(found.dev, std::path::Path::new("/nowhere"));
    let wrong_dev = tarn_fuse::abort_connection(other, &path);
    let aborted = tarn_fuse::abort_connection(found.dev, &path);
    // The descriptor is still open, yet nobody serves the mount any more.
    let dead = tarn_fuse::is_dead_mount(&path);
    let detached = tarn_fuse::unmount_path(&path, true);
    drop(dev);
    assert!(!wrong_path.unwrap() && !wrong_dev.unwrap());
    assert!(aborted.unwrap());
    assert!(dead, "the mount still answers after the abort");
    detached.unwrap();
}

#[test]
fn parallel_writers_on_different_and_same_files() {
    let m = Mounted::new();
    let shared = m.path("shared");
    std::fs::write(&shared, b"").unwrap();
    const THREADS: usize = 8;
    const CHUNK: usize = 256 << 10;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let own = m.path(&format!("own-{t}"));
            let shared = shared.clone();
            s.spawn(move || {
                let body: Vec<u8> = (0..2 << 20).map(|i| (i as u8) ^ t as u8).collect();
                std::fs::write(&own, &body).unwrap();
                assert_eq!(std::fs::read(&own).unwrap(), body);
                let f = File::options().write(true).open(&shared).unwrap();
                for round in 0..4 {
                    let off = ((round * THREADS + t) * CHUNK) as u64;
                    f.write_all_at(&vec![t as u8 + 1; CHUNK], off).unwrap();
                }
            });
        }
    });
    let all = std::fs::read(&shared).unwrap();
    assert_eq!(all.len(), 4 * THREADS * CHUNK);
    for (i, chunk) in all.chunks(CHUNK).enumerate() {
        let t = i % THREADS;
        assert!(chunk.iter().all(|&b| b == t as u8 + 1), "chunk {i}");
    }
}

/// Polls `cond` every millisecond for up to `limit`.
fn eventually(limit: std::time::Duration, cond: impl Fn() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    cond()
}

#[test]
fn busy_polling_is_bounded_and_ends_when_the_mount_is_quiet() {
    use std::time::Duration;
    let budget = tarn_fuse::PollBudget::new(Duration::from_millis(300), 1);
    // Polling is for the `/dev/fuse` transport.
    let m = Mounted::with_options(MountOptions {
        poll: Some(budget.clone()),
        uring_per_queue: 0,
        ..options()
    });
    // Requests answered while a worker polls are still answered right:
    // four threads create, write, read back and remove files while the
    // test samples the number of polling workers.
    let max_seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (budget, max_seen, done) = (budget.clone(), max_seen.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                max_seen.fetch_max(budget.pollers(), std::sync::atomic::Ordering::Relaxed);
                std::thread::yield_now();
            }
        })
    };
    std::thread::scope(|s| {
        for t in 0..4 {
            let m = &m;
            s.spawn(move || {
                for i in 0..200 {
                    let p = m.path(&format!("t{t}-{i}"));
                    std::fs::write(&p, format!("{t}/{i}")).unwrap();
                    assert_eq!(std::fs::read_to_string(&p).unwrap(), format!("{t}/{i}"));
                    std::fs::remove_file(&p).unwrap();
                }
            });
        }
    });
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    sampler.join().unwrap();
    let max_seen = max_seen.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(max_seen, 1, "one worker polls while busy, never more");

    // One request opens the window; a quiet mount closes it.
    std::fs::metadata(m.path("")).unwrap();
    std::fs::write(m.path("x"), b"x").unwrap();
    assert!(
        eventually(Duration::from_secs(5), || budget.pollers() == 0),
        "the polling worker went back to blocking reads"
    );
    std::fs::write(m.path("y"), b"y").unwrap();
    assert!(eventually(Duration::from_secs(2), || budget.pollers() == 1));
    assert!(eventually(Duration::from_secs(5), || budget.pollers() == 0));
    assert_eq!(std::fs::read(m.path("y")).unwrap(), b"y");
}

#[test]
fn a_zero_poll_window_never_polls() {
    let budget = tarn_fuse::PollBudget::new(std::time::Duration::ZERO, 4);
    let m = Mounted::with_options(MountOptions {
        poll: Some(budget.clone()),
        uring_per_queue: 0,
        ..options()
    });
    for i in 0..50 {
        std::fs::write(m.path(&format!("f{i}")), b"data").unwrap();
        assert_eq!(budget.pollers(), 0);
    }
    assert_eq!(std::fs::read_dir(m.path("")).unwrap().count(), 50);
}

/// This process's threads that serve FUSE-over-io_uring queues, and how
/// many times they were woken (each request wakes one).
fn uring_workers() -> (usize, u64) {
    uring_workers_of("fuser-q")
}

/// The same for the threads whose name starts with `prefix` (one queue's:
/// `fuser-q0-`).
fn uring_workers_of(prefix: &str) -> (usize, u64) {
    let mut n = 0;
    let mut wakeups = 0;
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(comm) = std::fs::read_to_string(t.path().join("comm")) else {
            continue;
        };
        if !comm.starts_with(prefix) {
            continue;
        }
        n += 1;
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        for l in status.lines() {
            if let Some(v) = l.strip_prefix("voluntary_ctxt_switches:") {
                wakeups += v.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    (n, wakeups)
}

/// Four threads create, write, read back (small and 3 MiB), seek and
/// remove files; the data must come back exactly.
fn mixed_workload(m: &Mounted) {
    use std::io::Seek;
    std::thread::scope(|s| {
        for t in 0..4u8 {
            s.spawn(move || {
                for i in 0..100 {
                    let p = m.path(&format!("w{t}-{i}"));
                    std::fs::write(&p, format!("{t}/{i}")).unwrap();
                    assert_eq!(std::fs::read_to_string(&p).unwrap(), format!("{t}/{i}"));
                    std::fs::remove_file(&p).unwrap();
                }
                let big: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8 ^ t).collect();
                let p = m.path(&format!("big{t}"));
                std::fs::write(&p, &big).unwrap();
                assert!(std::fs::read(&p).unwrap() == big, "3 MiB file {t}");
                // SEEK_HOLE is answered from another daemon thread.
                let mut f = std::fs::File::open(&p).unwrap();
                let end = f.seek(std::io::SeekFrom::End(0)).unwrap();
                assert_eq!(end, 3 << 20);
            });
        }
    });
    for t in 0..4 {
        let p = m.path(&format!("big{t}"));
        let f = std::fs::File::open(&p).unwrap();
        // SAFETY: lseek on an open fd.
        let hole = unsafe { libc::lseek(std::os::fd::AsRawFd::as_raw_fd(&f), 0, libc::SEEK_HOLE) };
        assert_eq!(hole, 3 << 20, "no hole before the end of big{t}");
    }
}

fn kernel_has_fuse_uring() -> bool {
    std::path::Path::new("/sys/module/fuse/parameters/enable_uring").exists()
}

/// One queue per possible CPU, as the kernel makes them.
fn possible_cpus() -> usize {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap();
    s.trim()
        .split(',')
        .map(|part| part.rsplit('-').next().unwrap().parse::<usize>().unwrap() + 1)
        .max()
        .unwrap()
}

/// Runs the test named `test` again in a process of its own, and says
/// whether this is that process. The ring-worker tests count the worker
/// threads of their whole process, so no other test's mount may live in
/// it: `cargo test` runs a file's tests as threads of one process
/// (nextest already gives each its own). The parent checks that the child
/// ran the test and passed.
fn in_own_process(test: &str) -> bool {
    const ALONE: &str = "TARN_LIFECYCLE_TEST_ALONE";
    if std::env::var_os(ALONE).is_some() {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--test-threads=1", "--nocapture"])
        .env(ALONE, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{test} in its own process: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

#[test]
fn requests_go_through_io_uring_when_the_kernel_offers_it() {
    if !in_own_process("requests_go_through_io_uring_when_the_kernel_offers_it") {
        return;
    }
    let m = Mounted::with_options(options());
    // The session starts its ring workers once the mount call returned.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while kernel_has_fuse_uring()
        && uring_workers().0 < possible_cpus()
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (started, before) = uring_workers();
    mixed_workload(&m);
    if kernel_has_fuse_uring() {
        // The mount turned the module switch on, made its queues, and the
        // kernel sent the requests through them.
        let on = std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring").unwrap();
        assert_eq!(on.trim(), "Y");
        // A queue starts with one worker and gets one more when a request
        // finds its workers all busy: the mount's own few requests come
        // one at a time.
        let queues = possible_cpus();
        assert!(
            (queues..=2 * queues).contains(&started),
            "{started} ring workers for {queues} queues after mounting"
        );
        let (n, after) = uring_workers();
        assert!(n <= queues * options().uring_per_queue, "ring workers: {n}");
        // Beside the rings the device carries only forgets and interrupts.
        let device_workers = (0..options().threads)
            .map(|i| uring_workers_of(&format!("fuser-{i}\n")).0)
            .sum::<usize>();
        assert!(
            (1..=2).contains(&device_workers),
            "{device_workers} /dev/fuse workers"
        );
        assert!(
            after >= before + 400,
            "ring workers served requests: {before} → {after}"
        );
    } else {
        assert_eq!(uring_workers().0, 0);
    }
    drop(m);
}

/// Eight threads on CPU 0 write and fsync at once on slow devices: each
/// fsync holds a worker of queue 0 while it waits, so the queue gets more workers (group
/// commit needs them), never more than `uring_per_queue`.
#[test]
fn a_busy_ring_queue_gets_more_workers_up_to_its_limit() {
    if !kernel_has_fuse_uring()
        || !in_own_process("a_busy_ring_queue_gets_more_workers_up_to_its_limit")
    {
        return;
    }
    let per_queue = 4;
    // Every device write takes 2 ms, so an fsync (a log block write)
    // holds its worker at least that long.
    let devs: Vec<Arc<dyn tarn_vdev::BlockDevice>> = common::devices(2)
        .into_iter()
        .map(|d| {
            let f = tarn_vdev::FaultDevice::new(d, 1);
            f.set_latency(std::time::Duration::from_millis(2));
            Arc::new(f) as Arc<dyn tarn_vdev::BlockDevice>
        })
        .collect();
    let m = Mounted::on_devices(
        devs,
        MountOptions {
            uring_per_queue: per_queue,
            ..options()
        },
    );
    std::thread::scope(|s| {
        for t in 0..8 {
            let m = &m;
            s.spawn(move || {
                // SAFETY: a zeroed cpu_set_t with CPU 0 set, for this thread.
                unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(0, &mut set);
                    assert_eq!(
                        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set),
                        0
                    );
                }
                let mut f = File::create(m.path(&format!("sync{t}"))).unwrap();
                for i in 0..10u32 {
                    std::io::Write::write_all(&mut f, &i.to_le_bytes()).unwrap();
                    f.sync_all().unwrap();
                }
            });
        }
    });
    let (q0, _) = uring_workers_of("fuser-q0-");
    assert!(
        (3..=per_queue).contains(&q0),
        "queue 0 has {q0} workers (at most {per_queue})"
    );
    for t in 0..8 {
        assert_eq!(
            std::fs::metadata(m.path(&format!("sync{t}")))
                .unwrap()
                .len(),
            40
        );
    }
}

/// A worker whose io_uring fails is replaced: with one worker per queue
/// and the first registrations failing, every queue still gets its entry
/// (else the kernel would never switch to the rings and the requests
/// below would all go through `/dev/fuse`).
#[test]
fn a_ring_worker_that_fails_is_replaced() {
    // The injected failures are the process's, too.
    if !kernel_has_fuse_uring() || !in_own_process("a_ring_worker_that_fails_is_replaced") {
        return;
    }
    fuser::inject_uring_failures(2);
    let m = Mounted::with_options(MountOptions {
        uring_per_queue: 1,
        ..options()
    });
    // Without a replacement the kernel would hold this write for good.
    let probe = m.path("probe");
    let write = std::thread::spawn(move || std::fs::write(probe, b"x"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !write.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "a write to the mount hangs: a queue has no ring entry"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    write.join().unwrap().unwrap();
    let (_, before) = uring_workers();
    mixed_workload(&m);
    assert_eq!(fuser::uring_injected_failures_left(), 0);
    let (n, after) = uring_workers();
    assert_eq!(n, possible_cpus(), "one ring worker per queue");
    assert!(
        after >= before + 100,
        "ring workers served requests: {before} → {after}"
    );
}

#[test]
fn dev_fuse_alone_serves_the_same_requests() {
    let m = Mounted::with_options(MountOptions {
        uring_per_queue: 0,
        ..options()
    });
    mixed_workload(&m);
}
