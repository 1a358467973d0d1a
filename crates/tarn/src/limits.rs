//! Named limits of the daemon and the client, each documented once.
//!
//! Everything the outside world can make grow (connections, line length,
//! names per request) has a bound here, so a misbehaving client costs the
//! daemon a fixed amount of memory and threads, never an unbounded one.

use std::time::Duration;

/// Longest request line the daemon reads, newline included. A longer line is
/// answered with an error and the connection is closed (it cannot resync).
pub const REQUEST_LINE_BYTES_MAX: usize = 1 << 20;

/// Longest response line a client accepts. Responses carry listings of every
/// dataset of every pool, so this is much larger than a request.
pub const RESPONSE_LINE_BYTES_MAX: usize = 256 << 20;

/// Connections served at once; one thread each. Further connections get one
/// error line and are closed.
pub const CONNECTIONS_MAX: usize = 64;

/// Names (pools, datasets, properties, directories) in one request.
pub const REQUEST_NAMES_MAX: usize = 4096;

/// How long a client waits for an automatically started daemon to answer.
pub const AUTOSTART_WAIT_MAX: Duration = Duration::from_secs(10);

/// First and longest pause between connection attempts while waiting for the
/// daemon (exponential backoff between the two).
pub const AUTOSTART_POLL_FIRST: Duration = Duration::from_millis(5);
pub const AUTOSTART_POLL_MAX: Duration = Duration::from_millis(200);

/// How long daemon shutdown waits for busy filesystems to become idle
/// before detaching them lazily, and how often it looks again.
pub const SHUTDOWN_UNMOUNT_GRACE: Duration = Duration::from_secs(3);
pub const SHUTDOWN_UNMOUNT_POLL: Duration = Duration::from_millis(50);

/// An unmount refused as busy with nothing found holding the filesystem is
/// tried again this many times, this far apart, before it is reported.
pub const UNMOUNT_BUSY_RETRIES: u32 = 10;
pub const UNMOUNT_BUSY_PAUSE: Duration = Duration::from_millis(20);

/// malloc arenas the daemon lets glibc create (`M_ARENA_MAX`): one, the
/// main arena, for every thread.
///
/// glibc gives every thread that allocates its own arena and keeps freed
/// memory in it; with a FUSE worker pool per mounted dataset that kept
/// tens of MiB per mount resident after export (bench/memory.sh), which
/// two arenas bounded. But with a second arena, memory a txg frees went
/// back to the kernel while the next txg's record copies took fresh
/// pages, and on a VM a fault on fresh memory is slow enough to show in
/// the p99 of FUSE writes and fsyncs; one arena removes those faults, at
/// the cost of contention on its lock where many threads allocate at
/// once (docs/MEASUREMENTS.md, "Daemon: one malloc arena").
pub const MALLOC_ARENAS_MAX: i32 = 1;

/// Allocations the daemon's malloc serves from its arenas rather than
/// from fresh `mmap`s (`M_MMAP_THRESHOLD`): every block buffer (up to a
/// 1 MiB record) would otherwise be mapped, faulted in page by page,
/// zeroed by the kernel and unmapped again — a sixth of the daemon's CPU
/// in a cold sequential read (perf, bench/peers.sh).
pub const MALLOC_MMAP_THRESHOLD: i32 = 4 << 20;

/// Free memory at the top of an arena that malloc keeps rather than
/// returns to the kernel (`M_TRIM_THRESHOLD`): enough for a burst of
/// block buffers to be reused instead of faulted in again.
pub const MALLOC_TRIM_THRESHOLD: i32 = 64 << 20;

/// Returns the heap's free memory to the system (`malloc_trim`): glibc
/// keeps freed chunks in its arenas and gives back only what lies above
/// `MALLOC_TRIM_THRESHOLD` at the top of each heap, so the caches of an
/// exported pool would otherwise stay resident.
pub fn return_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free pages of the allocator's own
    // arenas; it is thread-safe (it takes each arena's lock) and takes any
    // padding value.
    unsafe {
        libc::malloc_trim(0);
    }
}
