//! The daemon protocol: what travels over the tarn socket.
//!
//! A client writes one JSON object per line (a [`Request`], tagged by its
//! `"op"` field) and reads one JSON object per line back (a [`Response`]).
//! A connection may carry any number of request/response pairs, strictly in
//! turn. Every type here is plain data: no behaviour lives in the protocol,
//! so the daemon, the CLI and any other client agree by construction.
//!
//! **Protocol invariant:** every request and argument struct rejects unknown
//! fields, so a typo in a field name is an error rather than a silently
//! ignored option. Results (the `data` of a response) are produced by tarn
//! itself and are decoded leniently, so adding a field to a result does not
//! break an older client.
//!
//! Values in result rows are the *stored* form of a property (exact numbers,
//! canonical names); the client formats them for humans (`-p` decides how),
//! so formatting lives in one place: [`crate::output`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

macro_rules! request_enum {
    ($($(#[$doc:meta])* $method:ident: $variant:ident($args:ty) -> $reply:ty;)*) => {
        /// One request line. The `op` tag names the operation in snake
        /// case (`"zpool_create"`, `"zfs_list"`, `"ping"`…): the engine's
        /// verbs (`crate::verbs`) and the daemon's own two.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
        pub enum Request {
            $($(#[$doc])* $variant($args),)*
            /// Liveness check; answered by the daemon itself with a
            /// [`PingReply`].
            Ping {},
            /// Stop the daemon cleanly (the backend exports and syncs its
            /// pools).
            Shutdown {},
        }
    };
}

crate::verbs::verbs!(request_enum);

/// The vdev groups of `zpool create`/`add` (the dataset layer vets and
/// lays them out, so it owns the type).
pub use tarn_dsl::devices::{VdevGroup, VdevKind};

/// A `name=value` property assignment as the user typed it.
pub type PropAssign = (String, String);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolCreate {
    pub name: String,
    pub vdevs: Vec<VdevGroup>,
    /// Pool properties (`-o`).
    #[serde(default)]
    pub props: Vec<PropAssign>,
    /// Properties of the root dataset (`-O`).
    #[serde(default)]
    pub fs_props: Vec<PropAssign>,
    /// Mountpoint of the root dataset (`-m`).
    #[serde(default)]
    pub mountpoint: Option<String>,
    /// Override the replication-level check (`-f`).
    #[serde(default)]
    pub force: bool,
    /// Validate only, create nothing (`-n`).
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolDestroy {
    pub name: String,
    #[serde(default)]
    pub force: bool,
}

/// Pools to list; an empty list means every imported pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolList {
    #[serde(default)]
    pub names: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolStatus {
    #[serde(default)]
    pub names: Vec<String>,
}

/// `props` empty means `all`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolGet {
    #[serde(default)]
    pub names: Vec<String>,
    #[serde(default)]
    pub props: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolSet {
    pub name: String,
    pub prop: String,
    pub value: String,
}

/// Look for importable pools on the devices under `dirs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolImportScan {
    #[serde(default)]
    pub dirs: Vec<String>,
}

/// Import the pool named (or numbered, by guid) `pool` found under `dirs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolImport {
    #[serde(default)]
    pub dirs: Vec<String>,
    pub pool: String,
    #[serde(default)]
    pub new_name: Option<String>,
    #[serde(default)]
    pub force: bool,
    /// `-m`: import even though every device of a log vdev is missing
    /// (the log records on it are lost).
    #[serde(default)]
    pub missing_log: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolExport {
    pub name: String,
    #[serde(default)]
    pub force: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolHistory {
    #[serde(default)]
    pub names: Vec<String>,
}

/// `zpool add`: new top-level vdevs (data or log) for an imported pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolAdd {
    pub name: String,
    pub vdevs: Vec<VdevGroup>,
    /// Override the replication-level check and the in-use check (`-f`).
    #[serde(default)]
    pub force: bool,
    /// Validate only, change nothing (`-n`).
    #[serde(default)]
    pub dry_run: bool,
}

/// `zpool remove`: a log vdev, named by its device path or `mirror-N`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolRemove {
    pub name: String,
    pub device: String,
}

/// `zpool detach`: one device of a mirror, by path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolDetach {
    pub name: String,
    pub device: String,
}

/// `zpool attach POOL DEVICE NEW` (`replace: false`) and `zpool replace
/// POOL DEVICE NEW` (`replace: true`): NEW joins DEVICE's vdev and is
/// resilvered; a replace then detaches DEVICE.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolAttach {
    pub name: String,
    pub device: String,
    pub new_device: String,
    #[serde(default)]
    pub force: bool,
    #[serde(default)]
    pub replace: bool,
}

/// `zpool scrub`: start (or resume a paused) scrub, pause it (`-p`) or
/// stop it (`-s`), on each named pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolScrub {
    pub names: Vec<String>,
    #[serde(default)]
    pub action: ScrubAction,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ScrubAction {
    #[default]
    Start,
    Pause,
    Stop,
}

/// What an injected fault does (`zinject -e`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InjectError {
    /// Matching I/Os fail with EIO.
    Io,
    /// Reads return damaged bytes (per block, deterministic).
    Checksum,
    /// Every I/O fails, as from a device that vanished.
    Nxio,
}

impl InjectError {
    pub const ALL: [InjectError; 3] = [InjectError::Io, InjectError::Checksum, InjectError::Nxio];

    pub fn as_str(self) -> &'static str {
        match self {
            InjectError::Io => "io",
            InjectError::Checksum => "checksum",
            InjectError::Nxio => "nxio",
        }
    }
}

/// Which I/O a fault applies to (`zinject -T`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InjectIoType {
    Read,
    Write,
    Flush,
    All,
}

impl InjectIoType {
    pub const ALL: [InjectIoType; 4] = [
        InjectIoType::Read,
        InjectIoType::Write,
        InjectIoType::Flush,
        InjectIoType::All,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            InjectIoType::Read => "read",
            InjectIoType::Write => "write",
            InjectIoType::Flush => "flush",
            InjectIoType::All => "all",
        }
    }
}

/// `zinject -d DEVICE [-e ERROR] [-T TYPE] [-f FREQ] POOL`, or with
/// `-D LATENCY_MS[:LANES]` instead of `-e`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZinjectAdd {
    pub pool: String,
    /// A leaf as `zpool status` names it: its path or the path's last
    /// component.
    pub device: String,
    /// Default `io` (unless this is a delay).
    #[serde(default)]
    pub error: Option<InjectError>,
    /// Default `all`.
    #[serde(default)]
    pub io_type: Option<InjectIoType>,
    /// Percentage of I/Os (of blocks, for checksum), 0.0001..=100;
    /// default 100.
    #[serde(default)]
    pub frequency: Option<f64>,
    /// `-D`: delay each I/O this long (a delay handler, not an error).
    #[serde(default)]
    pub delay_ms: Option<u64>,
    /// `-D …:LANES`: I/Os delayed at once (default 1).
    #[serde(default)]
    pub lanes: Option<u32>,
}

/// `zinject` with no option: list the registered faults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZinjectList {}

/// `zinject -c ID|all`: `id` `None` clears every handler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZinjectClear {
    #[serde(default)]
    pub id: Option<u64>,
}

/// One registered fault, as `tarn zinject` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InjectHandler {
    pub id: u64,
    pub pool: String,
    /// The leaf's path.
    pub device: String,
    pub io_type: InjectIoType,
    /// `io`, `checksum`, `nxio` or `delay`.
    pub error: String,
    /// Parts per million of I/Os (1 000 000: every one).
    pub freq_ppm: u32,
    #[serde(default)]
    pub delay_ms: Option<u64>,
    #[serde(default)]
    pub lanes: Option<u32>,
}

/// `zpool offline [-t]`: stop using one device (by path or bare name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolOffline {
    pub name: String,
    pub device: String,
    /// `-t`: until the next import only (not recorded in the labels).
    #[serde(default)]
    pub temporary: bool,
}

/// `zpool online [-e]`: use an offline, faulted or missing device again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolOnline {
    pub name: String,
    pub device: String,
    /// `-e`: expand to the device's size (accepted; no effect yet).
    #[serde(default)]
    pub expand: bool,
}

/// `zpool clear`: reset error counters, bring repaired devices back and
/// resume a suspended pool; `device` limits it to one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolClear {
    pub name: String,
    #[serde(default)]
    pub device: Option<String>,
}

/// `zpool sync`: commit the open txg of the named pools (empty: all).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolSync {
    #[serde(default)]
    pub names: Vec<String>,
}

/// `zilstat`: the intent-log counters of the datasets of the named pools
/// and of the named datasets (both empty: every dataset).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Zilstat {
    #[serde(default)]
    pub pools: Vec<String>,
    #[serde(default)]
    pub datasets: Vec<String>,
}

/// One dataset's intent-log counters, cumulative since the pool was
/// imported, by OpenZFS's kstat names (`zil_commit_count`, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ZilstatRow {
    pub pool: String,
    pub dataset: String,
    pub objset: u64,
    pub counters: std::collections::BTreeMap<String, u64>,
}

/// `zpool iostat`: counters of the named pools (empty: every pool).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZpoolIostat {
    #[serde(default)]
    pub names: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZfsCreate {
    pub name: String,
    #[serde(default)]
    pub props: Vec<PropAssign>,
    /// Create missing parents (`-p`).
    #[serde(default)]
    pub parents: bool,
    /// A volume of this size (`-V SIZE`; bytes once validated).
    #[serde(default)]
    pub volsize: Option<String>,
    /// A sparse volume: no reservation (`-s`).
    #[serde(default)]
    pub sparse: bool,
}

/// `zfs destroy`: a dataset, or snapshots (`ds@a`, `ds@a%c`, `ds@a,b`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZfsDestroy {
    pub name: String,
    /// Descendants too; for snapshots, the same name in every descendant.
    #[serde(default)]
    pub recursive: bool,
    /// Unmount even if busy (`-f`, a lazy detach).
    #[serde(default)]
    pub force: bool,
    /// Also everything that depends on it: clones (`-R`).
    #[serde(default)]
    pub dependents: bool,
    /// Only say what would be destroyed (`-n`).
    #[serde(default)]
    pub dry_run: bool,
    /// Mark snapshots with holds or clones to go when those do (`-d`).
    #[serde(default)]
    pub defer: bool,
}

/// What a destroy did (or, with `-n`, would do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct DestroyReport {
    /// Datasets and snapshots, in the order they go.
    pub destroyed: Vec<String>,
    /// Bytes the snapshots' destruction releases (0 for datasets).
    pub reclaim: u64,
    /// Whether any snapshot was named (the reclaim line is printed).
    pub snapshots: bool,
}

/// `zfs snapshot`: every name in one txg.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZfsSnapshot {
    pub names: Vec<String>,
    /// The same snapshot name in every descendant (`-r`).
    #[serde(default)]
    pub recursive: bool,
    /// User properties (`-o`).
    #[serde(default)]
    pub props: Vec<PropAssign>,
}

/// `zfs rollback SNAP`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZfsRollback {
    pub name: String,
    /// Destroy later snapshots and bookmarks (`-r`).
    #[serde(default)]
    pub recursive: bool,
    /// Also their clones (`-R`).
    #[serde(default)]
    pub dependents: bool,
    /// Unmount clones even if busy (`-f`, with `-R`).
    #[serde(default)]
    pub force: bool,
}

/// `zfs clone SNAP DS`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZfsClone {
    pub snapshot: String,
    pub name: String,
    /// Create missing parents (`-p`).
    #[serde(default)]
    pub parents: bool,
    #[serde(default)]
    pub props: Vec<PropAssign>,
}

/// `zfs promote DS`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZfsPromote {
    pub name: String,
}

/// `zfs rename FROM TO`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZfsRename {
    pub from: String,
    pub to: String,
    /// Snapshots: the same snapshot of every descendant (`-r`).
    #[serde(default)]
    pub recursive: bool,
    /// Create missing parents of `to` (`-p`).
    #[serde(default)]
    pub parents: bool,
    /// Unmount busy filesystems (`-f`).
    #[serde(default)]
    pub force: bool,
}

/// `zfs hold TAG SNAP…` and `zfs release TAG SNAP…`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZfsHold {
    pub tag: String,
    pub names: Vec<String>,
    /// The same snapshot of every descendant (`-r`).
    #[serde(default)]
    pub recursive: bool,
    /// Release instead of hold.
    #[serde(default)]
    pub release: bool,
}

/// `zfs holds SNAP…`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZfsHolds {
    pub names: Vec<String>,
    #[serde(default)]
    pub recursive: bool,
}

/// One hold, as `zfs holds` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct HoldRow {
    pub name: String,
    pub tag: String,
    /// Seconds since the epoch.
    pub time: u64,
}

/// `zfs bookmark SRC DS#NAME`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZfsBookmark {
    pub source: String,
    pub target: String,
}

/// Open file descriptors a client hands the daemon with its request
/// (`SCM_RIGHTS`): `zfs send` passes its stdout and stderr, `zfs receive`
/// its stdin and stderr, so the stream goes between the daemon and the
/// pipe directly. Never serialized; equal to any other (requests compare
/// by their data).
#[derive(Debug, Clone, Default)]
pub struct PassedFds(pub std::sync::Arc<Vec<std::os::fd::OwnedFd>>);

impl PartialEq for PassedFds {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl PassedFds {
    /// The `i`th descriptor, if the client passed that many.
    pub fn get(&self, i: usize) -> Option<&std::os::fd::OwnedFd> {
        self.0.get(i)
    }
}

/// `zfs send` (see zfs-send(8)): the stream goes to the first passed
/// descriptor, progress and estimates (`-v`) to the second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZfsSend {
    /// The snapshot to send; empty with `token`.
    #[serde(default)]
    pub snapshot: String,
    /// `-i SNAP|#BOOKMARK` or `-I SNAP`: the incremental source.
    #[serde(default)]
    pub from: Option<String>,
    /// `-I`: every snapshot between `from` and `snapshot`.
    #[serde(default)]
    pub intermediates: bool,
    /// `-R`: the dataset, its descendants, their snapshots, properties
    /// and clones.
    #[serde(default)]
    pub replicate: bool,
    /// `-p`: properties.
    #[serde(default)]
    pub props: bool,
    /// `-L`, `-e`, `-c`, `-w`, `-b`, `-h`.
    #[serde(default)]
    pub large_blocks: bool,
    #[serde(default)]
    pub embed: bool,
    #[serde(default)]
    pub compressed: bool,
    #[serde(default)]
    pub raw: bool,
    #[serde(default)]
    pub backup: bool,
    #[serde(default)]
    pub holds: bool,
    /// `-v`, `-P`, `-n`.
    #[serde(default)]
    pub verbose: bool,
    #[serde(default)]
    pub parsable: bool,
    #[serde(default)]
    pub dry_run: bool,
    /// `-t TOKEN`: resume an interrupted receive.
    #[serde(default)]
    pub token: Option<String>,
    #[serde(skip)]
    pub fds: PassedFds,
}

/// `zfs receive` (see zfs-receive(8)): the stream comes from the first
/// passed descriptor. The reply is what `-v` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZfsReceive {
    /// `DS` or `DS@SNAP`.
    pub target: String,
    /// `-F`, `-u`, `-v`, `-n`, `-s`.
    #[serde(default)]
    pub force: bool,
    #[serde(default)]
    pub nomount: bool,
    #[serde(default)]
    pub verbose: bool,
    #[serde(default)]
    pub dry_run: bool,
    #[serde(default)]
    pub resumable: bool,
    /// `-d`: the sent name without its pool, under `target`.
    #[serde(default)]
    pub discard_first: bool,
    /// `-e`: the sent name's last element, under `target`.
    #[serde(default)]
    pub last_only: bool,
    /// `-o prop=val`: set on the received dataset (as local values).
    #[serde(default)]
    pub set: Vec<(String, String)>,
    /// `-x prop`: not received (inherited instead).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// `-A`: abort the partial receive of `target`.
    #[serde(default)]
    pub abort: bool,
    #[serde(skip)]
    pub fds: PassedFds,
}

/// `zfs diff SNAP [SNAP|DS]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZfsDiff {
    pub from: String,
    /// A later snapshot of the same dataset, or the dataset (default).
    #[serde(default)]
    pub to: Option<String>,
}

/// One changed file of `zfs diff`, paths under the mountpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct DiffRow {
    /// `M`, `+`, `-`, `R`.
    pub change: String,
    pub path: String,
    #[serde(default)]
    pub new_path: Option<String>,
    /// zfs-diff(8)'s type letter: `F`, `/`, `@`, `|`, `=`, `C`, `B`.
    pub kind: String,
    pub ctime_sec: i64,
    pub ctime_nsec: u32,
}

/// One `-s`/`-S` sort key of `zfs list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SortKey {
    pub prop: String,
    #[serde(default)]
    pub descending: bool,
}

/// Datasets to list. `names` empty means every dataset of every pool (and
/// implies recursion); `depth` limits recursion (`-d`, implies `-r`).
/// `props` are the columns the client will show: a hint, the backend may
/// return more. `types` empty means filesystems and volumes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZfsList {
    #[serde(default)]
    pub names: Vec<String>,
    #[serde(default)]
    pub recursive: bool,
    #[serde(default)]
    pub depth: Option<u32>,
    #[serde(default)]
    pub types: Vec<DatasetType>,
    #[serde(default)]
    pub props: Vec<String>,
    /// `-s`/`-S`, first key first (empty: by name).
    #[serde(default)]
    pub sort: Vec<SortKey>,
}

/// `props` empty means `all`; `sources` empty means every source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZfsGet {
    pub names: Vec<String>,
    #[serde(default)]
    pub props: Vec<String>,
    #[serde(default)]
    pub recursive: bool,
    #[serde(default)]
    pub depth: Option<u32>,
    #[serde(default)]
    pub sources: Vec<PropSourceKind>,
    /// `-t` (empty: every type).
    #[serde(default)]
    pub types: Vec<DatasetType>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZfsSet {
    pub name: String,
    pub props: Vec<PropAssign>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZfsInherit {
    pub name: String,
    pub prop: String,
    #[serde(default)]
    pub recursive: bool,
}

/// `zfs mount`: with neither `name` nor `all`, list what is mounted (the
/// result is always the [`MountRow`]s of the filesystems mounted now or,
/// for a listing, all of them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZfsMount {
    #[serde(default)]
    pub name: Option<String>,
    /// Mount every filesystem with `canmount=on` (`-a`).
    #[serde(default)]
    pub all: bool,
    /// Mount over a non-empty directory (`-O`).
    #[serde(default)]
    pub overlay: bool,
    /// Temporary mount options (`-o ro`, `-o rw`).
    #[serde(default)]
    pub options: Vec<String>,
}

/// `zfs unmount`: a dataset name or a mountpoint path, or `all`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZfsUnmount {
    #[serde(default)]
    pub target: Option<String>,
    #[serde(default)]
    pub all: bool,
    /// Unmount even if busy: a lazy detach (`-f`).
    #[serde(default)]
    pub force: bool,
}

/// One mounted filesystem (`zfs mount` with no arguments).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct MountRow {
    pub name: String,
    pub mountpoint: String,
}

/// Dataset types, as `zfs list -t` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DatasetType {
    Filesystem,
    Volume,
    Snapshot,
    Bookmark,
}

impl DatasetType {
    pub fn as_str(self) -> &'static str {
        match self {
            DatasetType::Filesystem => "filesystem",
            DatasetType::Volume => "volume",
            DatasetType::Snapshot => "snapshot",
            DatasetType::Bookmark => "bookmark",
        }
    }
}

/// Where a property value comes from, for `zfs get -s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PropSourceKind {
    Local,
    Default,
    Inherited,
    Temporary,
    Received,
    None,
}

/// One response line. `error` is the complete message a CLI prints
/// (e.g. `cannot create 'tank': pool already exists`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub data: serde_json::Value,
}

impl Response {
    pub fn success(data: serde_json::Value) -> Response {
        Response {
            ok: true,
            error: None,
            data,
        }
    }

    pub fn failure(message: impl Into<String>) -> Response {
        Response {
            ok: false,
            error: Some(message.into()),
            data: serde_json::Value::Null,
        }
    }
}

/// The daemon's answer to `ping`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PingReply {
    pub pid: u32,
    pub version: String,
}

/// One row of `zpool list`. Sizes in bytes; `None` prints as `-`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct PoolListRow {
    pub name: String,
    pub size: u64,
    pub alloc: u64,
    pub free: u64,
    #[serde(default)]
    pub ckpoint: Option<u64>,
    #[serde(default)]
    pub expandsz: Option<u64>,
    #[serde(default)]
    pub frag: Option<u8>,
    pub cap: u8,
    pub dedup: f64,
    pub health: String,
    #[serde(default)]
    pub altroot: Option<String>,
    pub guid: u64,
    #[serde(default)]
    pub txg: u64,
    /// Top-level vdevs (for `-v`), data vdevs first; `class` tells logs apart.
    #[serde(default)]
    pub vdevs: Vec<VdevListRow>,
}

/// One vdev row of `zpool list -v`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct VdevListRow {
    pub name: String,
    #[serde(default)]
    pub class: VdevClass,
    #[serde(default)]
    pub size: Option<u64>,
    #[serde(default)]
    pub alloc: Option<u64>,
    #[serde(default)]
    pub free: Option<u64>,
    #[serde(default)]
    pub frag: Option<u8>,
    #[serde(default)]
    pub cap: Option<u8>,
    pub health: String,
    #[serde(default)]
    pub children: Vec<VdevListRow>,
}

/// Allocation class of a top-level vdev.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum VdevClass {
    #[default]
    Normal,
    Log,
}

/// One pool of `zpool status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct PoolStatus {
    pub name: String,
    pub state: String,
    #[serde(default)]
    pub guid: u64,
    /// The `status:` paragraph, when the pool is not perfectly healthy.
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub action: Option<String>,
    #[serde(default)]
    pub scan: Option<ScanStatus>,
    /// The root of the vdev tree (named after the pool), data vdevs only.
    pub config: VdevStatusNode,
    /// Top-level log vdevs.
    #[serde(default)]
    pub logs: Vec<VdevStatusNode>,
    /// Hot spares: `AVAIL`, `INUSE` (note "currently in use") or
    /// `UNAVAIL`.
    #[serde(default)]
    pub spares: Vec<VdevStatusNode>,
    /// Number of blocks with permanent (unrepaired) errors.
    #[serde(default)]
    pub error_count: u64,
    /// Where they are, as `zpool status -v` lists them: a dataset and an
    /// object (`tank/fs:<0x23>`), or `<metadata>:<0x5>`.
    #[serde(default)]
    pub errors: Vec<String>,
}

/// One node of the vdev tree in `zpool status` and `zpool import`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct VdevStatusNode {
    pub name: String,
    pub state: String,
    #[serde(default)]
    pub read: u64,
    #[serde(default)]
    pub write: u64,
    #[serde(default)]
    pub cksum: u64,
    /// Free text after the counters: `(resilvering)`, `was /dev/sdb`…
    #[serde(default)]
    pub note: Option<String>,
    #[serde(default)]
    pub children: Vec<VdevStatusNode>,
}

/// Progress or result of the last scrub or resilver. Times are Unix seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ScanStatus {
    pub function: ScanFunction,
    pub state: ScanState,
    pub start_time: u64,
    #[serde(default)]
    pub end_time: Option<u64>,
    /// Bytes scanned (metadata walked) so far.
    #[serde(default)]
    pub examined: u64,
    /// Bytes of data actually read and verified so far.
    #[serde(default)]
    pub issued: u64,
    /// Total bytes the scan will cover.
    #[serde(default)]
    pub to_examine: u64,
    /// Bytes repaired (scrub) or rebuilt (resilver).
    #[serde(default)]
    pub processed: u64,
    #[serde(default)]
    pub errors: u64,
    /// When the scan was paused (`zpool scrub -p`); `None` while it runs.
    #[serde(default)]
    pub pause_time: Option<u64>,
    /// When this pass (since start, resume or import) began, and the bytes
    /// issued by then: the issue rate and the ETA use them.
    #[serde(default)]
    pub pass_start: u64,
    #[serde(default)]
    pub pass_issued: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ScanFunction {
    #[default]
    Scrub,
    Resilver,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ScanState {
    #[default]
    Scanning,
    Finished,
    Canceled,
}

/// One row of `zfs list`: stored property values keyed by property name.
/// `typ` is a [`DatasetType`] name (`filesystem`, `volume`, `snapshot`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct DatasetRow {
    pub name: String,
    #[serde(rename = "type")]
    pub typ: String,
    #[serde(default)]
    pub props: BTreeMap<String, PropValue>,
}

/// A stored value and where it comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct PropValue {
    pub value: String,
    /// `local`, `default`, `inherited from X`, or `-`.
    pub source: String,
}

/// One row of `zfs get` / `zpool get`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct PropRow {
    pub name: String,
    pub property: String,
    pub value: String,
    pub source: String,
}

/// One pool found by an import scan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ImportablePool {
    pub name: String,
    pub guid: u64,
    pub state: String,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub action: Option<String>,
    pub config: VdevStatusNode,
    #[serde(default)]
    pub logs: Vec<VdevStatusNode>,
}

/// One pool of `zpool iostat`: space now and I/O counters since the pool
/// was imported (the client turns them into rates).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct PoolIostat {
    pub name: String,
    /// Allocated and free bytes, as `zpool list` counts them.
    pub alloc: u64,
    pub free: u64,
    /// Nanoseconds since the pool was imported (or created).
    pub elapsed_ns: u64,
    /// Top-level vdevs, data first; `class` tells logs apart.
    #[serde(default)]
    pub vdevs: Vec<VdevIostat>,
}

/// One vdev of `zpool iostat -v`: cumulative operations and bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct VdevIostat {
    pub name: String,
    #[serde(default)]
    pub class: VdevClass,
    /// Capacity (top-level vdevs only).
    #[serde(default)]
    pub alloc: Option<u64>,
    #[serde(default)]
    pub free: Option<u64>,
    pub read_ops: u64,
    pub write_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Nanoseconds the devices took for the reads and the writes counted
    /// above, in all (`-l` disk_wait; an interior vdev sums its leaves).
    #[serde(default)]
    pub disk_read_ns: u64,
    #[serde(default)]
    pub disk_write_ns: u64,
    /// Blocks that waited in the allocation throttle's queue for this
    /// top-level vdev, and for how long in all (`-l` asyncq_wait).
    #[serde(default)]
    pub asyncq_write_ops: u64,
    #[serde(default)]
    pub asyncq_write_ns: u64,
    /// Now: reads and writes at the devices, and blocks queued for them
    /// (`-q` syncq_read activ, asyncq_write activ and pend).
    #[serde(default)]
    pub reads_active: u64,
    #[serde(default)]
    pub writes_active: u64,
    #[serde(default)]
    pub asyncq_write_pend: u64,
    #[serde(default)]
    pub children: Vec<VdevIostat>,
}

/// The history of one pool (`zpool history`): one line per command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct PoolHistory {
    pub name: String,
    pub entries: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_request() -> Vec<Request> {
        let names = vec!["tank".to_string()];
        vec![
            Request::ZpoolCreate(ZpoolCreate {
                name: "tank".into(),
                vdevs: vec![
                    VdevGroup {
                        kind: VdevKind::Mirror,
                        devices: vec!["/a".into(), "/b".into()],
                    },
                    VdevGroup {
                        kind: VdevKind::Log,
                        devices: vec!["/c".into()],
                    },
                ],
                props: vec![("ashift".into(), "12".into())],
                fs_props: vec![("compression".into(), "lz4".into())],
                mountpoint: Some("/mnt/tank".into()),
                force: true,
                dry_run: true,
            }),
            Request::ZpoolDestroy(ZpoolDestroy {
                name: "tank".into(),
                force: true,
            }),
            Request::ZpoolList(ZpoolList {
                names: names.clone(),
            }),
            Request::ZpoolStatus(ZpoolStatus {
                names: names.clone(),
            }),
            Request::ZpoolGet(ZpoolGet {
                names: names.clone(),
                props: vec!["size".into()],
            }),
            Request::ZpoolSet(ZpoolSet {
                name: "tank".into(),
                prop: "comment".into(),
                value: "hi".into(),
            }),
            Request::ZpoolImportScan(ZpoolImportScan {
                dirs: vec!["/tmp".into()],
            }),
            Request::ZpoolImport(ZpoolImport {
                dirs: vec!["/tmp".into()],
                pool: "123".into(),
                new_name: Some("other".into()),
                force: false,
                missing_log: true,
            }),
            Request::ZpoolExport(ZpoolExport {
                name: "tank".into(),
                force: false,
            }),
            Request::ZpoolHistory(ZpoolHistory {
                names: names.clone(),
            }),
            Request::ZpoolAdd(ZpoolAdd {
                name: "tank".into(),
                vdevs: vec![VdevGroup {
                    kind: VdevKind::Log,
                    devices: vec!["/l1".into(), "/l2".into()],
                }],
                force: true,
                dry_run: true,
            }),
            Request::ZpoolRemove(ZpoolRemove {
                name: "tank".into(),
                device: "mirror-1".into(),
            }),
            Request::ZpoolDetach(ZpoolDetach {
                name: "tank".into(),
                device: "/a".into(),
            }),
            Request::ZpoolOffline(ZpoolOffline {
                name: "tank".into(),
                device: "/a".into(),
                temporary: true,
            }),
            Request::ZpoolOnline(ZpoolOnline {
                name: "tank".into(),
                device: "/a".into(),
                expand: false,
            }),
            Request::ZpoolClear(ZpoolClear {
                name: "tank".into(),
                device: Some("/a".into()),
            }),
            Request::ZpoolSync(ZpoolSync {
                names: vec!["tank".into()],
            }),
            Request::ZpoolIostat(ZpoolIostat {
                names: names.clone(),
            }),
            Request::ZpoolScrub(ZpoolScrub {
                names: names.clone(),
                action: ScrubAction::Pause,
            }),
            Request::ZpoolAttach(ZpoolAttach {
                name: "tank".into(),
                device: "/a".into(),
                new_device: "/b".into(),
                force: false,
                replace: true,
            }),
            Request::ZfsCreate(ZfsCreate {
                name: "tank/a".into(),
                props: vec![("recordsize".into(), "1M".into())],
                parents: true,
                volsize: Some("1073741824".into()),
                sparse: true,
            }),
            Request::ZfsDestroy(ZfsDestroy {
                name: "tank/a@a%c".into(),
                recursive: true,
                force: true,
                dependents: true,
                dry_run: true,
                defer: true,
            }),
            Request::ZfsRollback(ZfsRollback {
                name: "tank/a@then".into(),
                recursive: true,
                dependents: false,
                force: false,
            }),
            Request::ZfsClone(ZfsClone {
                snapshot: "tank/a@then".into(),
                name: "tank/b".into(),
                parents: true,
                props: vec![("atime".into(), "off".into())],
            }),
            Request::ZfsPromote(ZfsPromote {
                name: "tank/b".into(),
            }),
            Request::ZfsRename(ZfsRename {
                from: "tank/a".into(),
                to: "tank/c".into(),
                recursive: false,
                parents: true,
                force: true,
            }),
            Request::ZfsHold(ZfsHold {
                tag: "keep".into(),
                names: vec!["tank/a@then".into()],
                recursive: true,
                release: false,
            }),
            Request::ZfsHolds(ZfsHolds {
                names: vec!["tank/a@then".into()],
                recursive: false,
            }),
            Request::ZfsSend(ZfsSend {
                snapshot: "tank/a@then".into(),
                from: Some("#mark".into()),
                replicate: true,
                ..Default::default()
            }),
            Request::ZfsReceive(ZfsReceive {
                target: "tank/b".into(),
                force: true,
                set: vec![("compression".into(), "off".into())],
                exclude: vec!["atime".into()],
                ..Default::default()
            }),
            Request::ZfsDiff(ZfsDiff {
                from: "tank/a@then".into(),
                to: Some("tank/a".into()),
            }),
            Request::ZfsBookmark(ZfsBookmark {
                source: "tank/a@then".into(),
                target: "tank/a#then".into(),
            }),
            Request::ZfsSnapshot(ZfsSnapshot {
                names: vec!["tank/a@now".into()],
                recursive: true,
                props: vec![("com.example:why".into(), "test".into())],
            }),
            Request::ZfsList(ZfsList {
                names: names.clone(),
                recursive: true,
                depth: Some(1),
                types: vec![DatasetType::Filesystem, DatasetType::Snapshot],
                props: vec!["name".into(), "used".into()],
                sort: vec![SortKey {
                    prop: "creation".into(),
                    descending: true,
                }],
            }),
            Request::ZfsGet(ZfsGet {
                names,
                props: vec![],
                recursive: false,
                depth: None,
                sources: vec![PropSourceKind::Local],
                types: vec![DatasetType::Snapshot],
            }),
            Request::ZfsSet(ZfsSet {
                name: "tank/a".into(),
                props: vec![("atime".into(), "off".into())],
            }),
            Request::ZfsInherit(ZfsInherit {
                name: "tank/a".into(),
                prop: "atime".into(),
                recursive: false,
            }),
            Request::ZfsMount(ZfsMount {
                name: Some("tank/a".into()),
                all: false,
                overlay: true,
                options: vec!["ro".into()],
            }),
            Request::ZfsUnmount(ZfsUnmount {
                target: Some("/tank/a".into()),
                all: false,
                force: true,
            }),
            Request::ZinjectAdd(ZinjectAdd {
                pool: "tank".into(),
                device: "/a".into(),
                error: Some(InjectError::Checksum),
                io_type: Some(InjectIoType::Read),
                frequency: Some(12.5),
                delay_ms: None,
                lanes: None,
            }),
            Request::ZinjectList(ZinjectList {}),
            Request::ZinjectClear(ZinjectClear { id: Some(3) }),
            Request::Zilstat(Zilstat {
                pools: vec!["tank".into()],
                datasets: vec!["tank/fs".into()],
            }),
            Request::Ping {},
            Request::Shutdown {},
        ]
    }

    #[test]
    fn every_request_round_trips_on_one_line() {
        for req in every_request() {
            let line = serde_json::to_string(&req).unwrap();
            assert!(!line.contains('\n'), "{line}");
            let back: Request = serde_json::from_str(&line).unwrap();
            assert_eq!(back, req, "{line}");
        }
    }

    #[test]
    fn wire_names_are_snake_case_ops() {
        let line =
            serde_json::to_string(&Request::ZpoolImportScan(ZpoolImportScan { dirs: vec![] }))
                .unwrap();
        assert_eq!(line, r#"{"op":"zpool_import_scan","dirs":[]}"#);
        assert_eq!(
            serde_json::to_string(&Request::Ping {}).unwrap(),
            r#"{"op":"ping"}"#
        );
        // Optional fields may be left out by hand-written clients.
        let req: Request = serde_json::from_str(r#"{"op":"zpool_list"}"#).unwrap();
        assert_eq!(req, Request::ZpoolList(ZpoolList { names: vec![] }));
    }

    macro_rules! method_names {
        ($($(#[$doc:meta])* $method:ident: $variant:ident($args:ty) -> $reply:ty;)*) => {
            &[$(stringify!($method)),*]
        };
    }

    /// The wire name of every verb is its backend method's name, and the
    /// round trip above covers every verb.
    #[test]
    fn every_verb_travels_under_its_method_name() {
        let methods: &[&str] = crate::verbs::verbs!(method_names);
        let ops: Vec<String> = every_request()
            .iter()
            .map(|r| {
                serde_json::to_value(r).unwrap()["op"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        for method in methods {
            assert!(
                ops.iter().any(|op| op == method),
                "{method} not sent as an op"
            );
        }
        assert_eq!(ops.len(), methods.len() + 2, "the verbs, ping and shutdown");
        // A request without arguments keeps its old wire form.
        let req: Request = serde_json::from_str(r#"{"op":"zinject_list"}"#).unwrap();
        assert_eq!(req, Request::ZinjectList(ZinjectList {}));
    }

    #[test]
    fn unknown_fields_and_ops_are_rejected() {
        for bad in [
            r#"{"op":"zpool_destroy","name":"tank","recursive":true}"#,
            r#"{"op":"ping","extra":1}"#,
            r#"{"op":"shutdown","now":true}"#,
            r#"{"op":"zpool_create","name":"t","vdevs":[{"kind":"disk","devices":["/a"],"size":1}]}"#,
            r#"{"op":"zpool_create","name":"t","vdevs":[{"kind":"raidz4","devices":["/a"]}]}"#,
            r#"{"op":"zpool_frobnicate"}"#,
            r#"{"name":"tank"}"#,
            r#"{"op":"zfs_list","depth":-1}"#,
        ] {
            assert!(
                serde_json::from_str::<Request>(bad).is_err(),
                "accepted {bad}"
            );
        }
    }

    #[test]
    fn response_round_trip() {
        let ok = Response::success(serde_json::json!([1, 2]));
        let line = serde_json::to_string(&ok).unwrap();
        assert_eq!(serde_json::from_str::<Response>(&line).unwrap(), ok);
        let err = Response::failure("cannot open 'x': no such pool");
        let line = serde_json::to_string(&err).unwrap();
        assert_eq!(serde_json::from_str::<Response>(&line).unwrap(), err);
    }
}
