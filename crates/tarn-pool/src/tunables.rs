//! Named limits of the pool layer, each documented once (like zfs.4).
//!
//! They are constants today; the ones an admin may want to change become
//! daemon settings when there is a reason to.

/// How long a txg stays open before the sync thread commits it
/// (`zfs_txg_timeout`, 5 s).
pub const TXG_TIMEOUT_MS: u64 = 5_000;

/// Dirty data that forces a txg commit before the timeout, and above which
/// writers are throttled (`zfs_dirty_data_max`): 10 % of RAM, at most 4 GiB.
pub fn dirty_data_max_bytes() -> u64 {
    let ram = physical_memory_bytes().unwrap_or(4 << 30);
    (ram / 10).min(4 << 30)
}

/// Bytes written into blocks not dirty before, in every txg not yet
/// synced, above which writers are throttled too (never more than
/// `dirty_data_max_bytes`): how far a stream of writes may run ahead of
/// the disks. Four txgs of `DIRTY_DATA_SYNC_MAX_BYTES`, so it holds back
/// only a writer faster than the syncs; small writes into large records
/// (which hold far more than they write) are bounded by
/// `dirty_data_max_bytes` alone, as in OpenZFS.
///
/// Every byte of such a backlog is memory the daemon first has to fault
/// in, page by page (zeroed by the kernel and, on a VM, first backed by
/// the host), and that CPU is taken from the sync pipeline: with this
/// bound a sequential write through a mount was faster and took fewer
/// page faults, and with it the block cache keeps its quarter for
/// written blocks (`tarn_dmu::WRITTEN_SHARE_DIVISOR`) at no cost
/// (docs/MEASUREMENTS.md, "Pool: stream throttle").
///
/// Bounding all dirty memory instead (`dirty_data_max_bytes` at most
/// 512 MiB) did as well for that stream, but a fifth of the maximum then
/// starts a sync (`dirty_data_sync_held_bytes`), and 16 KiB random writes
/// with an `fsync` each synced every ~0.3 s instead of at the timeout and
/// lost a quarter of their IOPS (docs/MEASUREMENTS.md, "Pool: dirty memory
/// capped at 512 MiB").
pub const DIRTY_DATA_STREAM_MAX_BYTES: u64 = 4 * DIRTY_DATA_SYNC_MAX_BYTES;

/// Bytes written in a txg at which the sync thread starts a commit without
/// waiting for the timeout (`zfs_dirty_data_sync_percent`, 20 % of the
/// maximum), at most `DIRTY_DATA_SYNC_MAX_BYTES`: a big write then streams
/// out in txgs that overlap with the writer instead of one long commit at
/// its end. (`dirty_data_sync_held_bytes` is the same rule on memory.)
pub fn dirty_data_sync_bytes() -> u64 {
    (dirty_data_max_bytes() / 5).min(DIRTY_DATA_SYNC_MAX_BYTES)
}

/// See `dirty_data_sync_bytes`.
pub const DIRTY_DATA_SYNC_MAX_BYTES: u64 = 128 << 20;

/// Memory held by a txg's dirty blocks at which the sync thread starts a
/// commit (`zfs_dirty_data_sync_percent` of `dirty_max`, 20 %, measured as
/// OpenZFS measures it: whole blocks). Small random writes into large
/// records reach it long before `dirty_data_sync_bytes` of writing.
pub fn dirty_data_sync_held_bytes(dirty_max: u64) -> u64 {
    dirty_max / 5
}

/// Bytes the allocator places on one top-level vdev before the rotor moves
/// on (`metaslab_aliquot`), scaled by the vdev's share of free space.
pub const METASLAB_ALIQUOT_BYTES: u64 = 1 << 20;

/// The allocation throttle (`crate::throttle`): each top-level vdev may
/// hold about this many milliseconds of its measured write rate in
/// allocated-but-unwritten blocks while the pool is pushed, within
/// `ALLOC_QUEUE_MIN_BYTES..=ALLOC_QUEUE_MAX_BYTES` (OpenZFS bounds the
/// count instead: `zfs_vdev_queue_depth_pct` of the vdev's async writes).
pub const ALLOC_QUEUE_MS: u64 = 25;
/// The pool counts as pushed (the throttle engages) while the data not
/// yet synced is at least this share of the dirty-data limits
/// (`zfs_delay_min_dirty_percent`), or a writer waited.
pub const DIRTY_PRESSED_PERCENT: u64 = 60;
/// At least one full aggregated write (`WRITE_AGGREGATE_BYTES`).
pub const ALLOC_QUEUE_MIN_BYTES: u64 = 1 << 20;
pub const ALLOC_QUEUE_MAX_BYTES: u64 = 32 << 20;

/// The space map log is condensed when it holds more than this many times
/// the entries a fresh base would need (plus `SPACEMAP_CONDENSE_MIN`).
pub const SPACEMAP_CONDENSE_RATIO: usize = 4;
pub const SPACEMAP_CONDENSE_MIN_ENTRIES: usize = 4096;

/// Pool metadata (MOS, space maps) is written with this many copies, on
/// distinct vdevs where the pool has them (OpenZFS's ditto blocks).
pub const POOL_METADATA_COPIES: usize = 2;

/// Writes the sync pipeline keeps in flight (bounded parallelism): split
/// between the top-level vdevs being written, at least two each.
pub const SYNC_WRITE_THREADS: usize = 8;

/// A txg's blocks are compressed, allocated and written in windows of
/// this many bytes: large enough for long merged writes per leaf, small
/// enough to bound the compressed and parity copies held at once.
pub const WRITE_WINDOW_BYTES: usize = 64 << 20;

/// Space written ahead of an intent-log block that lands in a hole of a
/// file vdev (`Spa::prewrite_for_log`): one zero write of this size saves
/// the host file system's allocation in the durable writes of the next
/// few hundred log blocks.
pub const LOG_PREWRITE_BYTES: u64 = 2 << 20;

/// How long `zpool remove` of a log device waits for the intent log to
/// move off it (each wait is a forced txg commit) before giving up.
pub const LOG_REMOVE_WAIT_MS: u64 = 30_000;

/// A scrub issues this many runs of sorted blocks at once.
pub const SCAN_ISSUE_THREADS: usize = 4;

/// Blocks of a scrub batch this close together (free space between them)
/// are read with one device read, the gap included.
pub const SCAN_GAP_BYTES: u64 = 128 << 10;

/// A scrub walks the committed state until it has queued this many bytes
/// of blocks, then issues them sorted by offset (OpenZFS's scan queues).
pub const SCAN_QUEUE_BYTES: u64 = 64 << 20;

/// Full batches waiting for the scrub's issuer while the walk goes on.
pub const SCAN_BATCHES_QUEUED: usize = 1;

/// A scan holds frees (see `Spa::hold_frees`) for at most about this long
/// before it records its place and lets them go.
pub const SCAN_SLICE_MS: u64 = 1_000;

/// Blocks a destroy released that one txg frees at most (the free queue,
/// OpenZFS's async destroy; `zfs_async_block_max_blocks` is unlimited
/// there but bounded by a time per txg): a destroy of gigabytes returns
/// at once and its space comes back over the next txgs, none of which
/// takes long enough to stall writers.
pub const FREE_BLOCKS_PER_TXG: u64 = 32_768;

/// zed's rule for a leaf that keeps failing I/O: more than this many read,
/// write or flush errors within `FAULT_WINDOW_MS` fault it ("too many
/// errors"; zed's `io_n`). A leaf whose loss would leave its top-level
/// vdev short of replicas is marked DEGRADED instead, as `vdev_fault` does.
pub const FAULT_IO_ERRORS_MAX: usize = 10;

/// zed's rule for silent damage: more than this many checksum errors within
/// `FAULT_WINDOW_MS` mark a leaf DEGRADED (`checksum_n`).
pub const FAULT_CHECKSUM_ERRORS_MAX: usize = 10;

/// The window of both fault rules (zed's `io_t`/`checksum_t`, 10 minutes).
pub const FAULT_WINDOW_MS: u64 = 600_000;

// A leaf must remember more error times than a rule counts.
const _: () = assert!(FAULT_IO_ERRORS_MAX < tarn_vdev::ERROR_HISTORY_MAX);
const _: () = assert!(FAULT_CHECKSUM_ERRORS_MAX < tarn_vdev::ERROR_HISTORY_MAX);

fn physical_memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
