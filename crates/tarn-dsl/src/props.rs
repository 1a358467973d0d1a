//! Dataset and pool properties: one definition per property, in two
//! tables, as ripgrep defines each flag once.
//!
//! A [`PropDef`] carries everything the rest of tarn needs about a
//! property: its type and accepted values, the default, whether children
//! inherit it, whether a user may set it, the column header `zfs list -o` /
//! `zpool list -o` prints, and the help text. Parsing user input
//! ([`parse_dataset_value`], [`parse_pool_value`]), display
//! ([`format_value`]) and the CLI help are all driven by these tables, so a
//! new property is one entry, not five edits.
//!
//! Values are stored as strings in their canonical form: sizes and numbers
//! in decimal bytes/units (`"131072"`), `"0"` for an unset quota, index
//! values spelled as the table spells them, ratios in hundredths (`"150"`
//! is 1.50x). Parsing normalises input to that form; formatting turns it
//! back into what OpenZFS prints (`128K`, `none`, `1.50x`).
//!
//! Spellings, defaults, column headers and messages follow OpenZFS 2.3
//! (`zfs_prop.c`, `zpool_prop.c`, `zfs_valid_proplist`), and, as there,
//! values are case-sensitive: `ON` is not `on`.

use crate::names;
use tarn_format::{ChecksumAlg, Compression};
use thiserror::Error;

/// Why a property or its value was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PropError {
    #[error("invalid property '{0}'")]
    Unknown(String),
    #[error("'{0}' is readonly")]
    ReadOnly(String),
    #[error("bad property value '{value}' for {name}: {why}")]
    BadValue {
        name: String,
        value: String,
        why: String,
    },
    /// A size or number that does not parse (`zfs_nicestrtonum`).
    #[error("{0}")]
    BadNumber(String),
}

/// The type of a property's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropKind {
    /// A plain unsigned integer.
    Number,
    /// A byte count; accepts `nicenum` suffixes.
    Size,
    /// One of a fixed list of words.
    Index(&'static [&'static str]),
    /// Free text (paths, names, comments), checked by the property's [`Rule`].
    String,
    /// `on` or `off`.
    Bool,
}

/// Checks beyond the kind, and normalisations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Any,
    /// A power of two between `min` and `max` bytes (block sizes).
    PowerOfTwo {
        min: u64,
        max: u64,
    },
    /// A size, or `none` (stored as 0).
    SizeOrNone,
    /// `compression`: `gzip` means gzip-6, `zstd` means zstd-3.
    Compression,
    /// An absolute path, `legacy` or `none`.
    Mountpoint,
    /// An absolute path, `none`, or empty for the default (`cachefile`).
    PathOrNone,
    /// An absolute path, or empty for unset (`altroot`).
    AbsolutePath,
    /// A dataset name in this pool, or empty (`bootfs`).
    DatasetOrEmpty,
    /// Printable ASCII, at most 32 bytes (`comment`).
    Comment,
    /// 0 (detect) or 9..=16 (`ashift`).
    Ashift,
}

/// How [`format_value`] shows a stored value when not asked for raw output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Display {
    /// As stored, `-` if empty.
    Plain,
    /// `nicebytes`.
    Bytes,
    /// `nicebytes`, `none` for 0 (quotas, reservations).
    BytesOrNone,
    /// `nicebytes`, `-` for 0 (pool `expandsize`, `checkpoint`).
    BytesOrDash,
    /// Hundredths as a ratio: `150` → `1.50x`.
    Ratio,
    /// A percentage: `12` → `12%`.
    Percent,
    /// Seconds since the epoch as a date (UTC).
    Date,
}

/// One property.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PropDef {
    pub name: &'static str,
    pub kind: PropKind,
    /// Canonical stored form of the default.
    pub default: &'static str,
    /// Children take the parent's value unless set locally.
    pub inherit: bool,
    /// A statistic computed by tarn; `zfs set` refuses it.
    pub readonly: bool,
    /// Settable only when the dataset or pool is created (or imported).
    pub create_only: bool,
    /// Column header for `-o` listings.
    pub column: &'static str,
    /// One-line help.
    pub help: &'static str,
    /// Accepted values, as `zfs get` help shows them.
    pub values_help: &'static str,
    pub rule: Rule,
    pub display: Display,
}

/// Defaults for the optional fields, so each table entry states only what
/// is particular to its property.
const BASE: PropDef = PropDef {
    name: "",
    kind: PropKind::String,
    default: "",
    inherit: false,
    readonly: false,
    create_only: false,
    column: "",
    help: "",
    values_help: "",
    rule: Rule::Any,
    display: Display::Plain,
};

/// Smallest block (`SPA_MINBLOCKSIZE`).
pub const MIN_BLOCK_BYTES: u64 = 512;
/// Largest block (`SPA_MAXBLOCKSIZE`).
pub const MAX_BLOCK_BYTES: u64 = 16 << 20;
/// Largest `volblocksize` (`tarn_format::zvol::ZVOL_BLOCK_MAX`).
pub const VOL_BLOCK_MAX_BYTES: u64 = tarn_format::zvol::ZVOL_BLOCK_MAX as u64;
/// `ZPROP_MAX_COMMENT`.
pub const MAX_COMMENT_BYTES: usize = 32;

const ON_OFF: &str = "on | off";
const CACHE_VALUES: &[&str] = &["all", "none", "metadata"];
const COMPRESSION_VALUES: &[&str] = &[
    "on", "off", "lz4", "zle", "gzip", "gzip-1", "gzip-2", "gzip-3", "gzip-4", "gzip-5", "gzip-6",
    "gzip-7", "gzip-8", "gzip-9", "zstd", "zstd-1", "zstd-2", "zstd-3", "zstd-4", "zstd-5",
    "zstd-6", "zstd-7", "zstd-8", "zstd-9", "zstd-10", "zstd-11", "zstd-12", "zstd-13", "zstd-14",
    "zstd-15", "zstd-16", "zstd-17", "zstd-18", "zstd-19",
];

/// A settable, inherited on/off property.
const fn on_off(
    name: &'static str,
    default: &'static str,
    column: &'static str,
    help: &'static str,
) -> PropDef {
    PropDef {
        name,
        kind: PropKind::Bool,
        default,
        inherit: true,
        column,
        help,
        values_help: ON_OFF,
        ..BASE
    }
}

/// A read-only statistic.
const fn stat(
    name: &'static str,
    kind: PropKind,
    column: &'static str,
    help: &'static str,
) -> PropDef {
    let display = match kind {
        PropKind::Size => Display::Bytes,
        _ => Display::Plain,
    };
    let default = match kind {
        PropKind::Size | PropKind::Number => "0",
        _ => "",
    };
    PropDef {
        name,
        kind,
        default,
        readonly: true,
        column,
        help,
        display,
        ..BASE
    }
}

/// A size limit that is `none` when 0 and never inherited.
const fn limit(name: &'static str, column: &'static str, help: &'static str) -> PropDef {
    PropDef {
        name,
        kind: PropKind::Size,
        default: "0",
        column,
        help,
        values_help: "<size> | none",
        rule: Rule::SizeOrNone,
        display: Display::BytesOrNone,
        ..BASE
    }
}

static DATASET_PROPS: [PropDef; 59] = [
    PropDef {
        name: "recordsize",
        kind: PropKind::Size,
        default: "131072",
        inherit: true,
        column: "RECSIZE",
        help: "Largest block size for files; a file smaller than this is one block",
        values_help: "512 to 16M, power of 2",
        rule: Rule::PowerOfTwo {
            min: MIN_BLOCK_BYTES,
            max: MAX_BLOCK_BYTES,
        },
        display: Display::Bytes,
        ..BASE
    },
    PropDef {
        name: "compression",
        kind: PropKind::Index(COMPRESSION_VALUES),
        default: "on",
        inherit: true,
        column: "COMPRESS",
        help: "Compression for new blocks (on = lz4, gzip = gzip-6, zstd = zstd-3)",
        values_help: "on | off | lz4 | zle | gzip | gzip-[1-9] | zstd | zstd-[1-19]",
        rule: Rule::Compression,
        ..BASE
    },
    PropDef {
        name: "checksum",
        kind: PropKind::Index(&["on", "off", "fletcher4", "sha256", "blake3"]),
        default: "on",
        inherit: true,
        column: "CHECKSUM",
        help: "Checksum for new data blocks (on = fletcher4); metadata is always checksummed",
        values_help: "on | off | fletcher4 | sha256 | blake3",
        ..BASE
    },
    on_off("atime", "on", "ATIME", "Update access time on read"),
    on_off(
        "relatime",
        "on",
        "RELATIME",
        "Update access time only if older than mtime or a day",
    ),
    PropDef {
        name: "xattr",
        kind: PropKind::Index(&["on", "off", "sa", "dir"]),
        default: "sa",
        inherit: true,
        column: "XATTR",
        help: "Extended attributes: sa stores them in the dnode, dir (or on) in hidden directories",
        values_help: "on | off | sa | dir",
        ..BASE
    },
    PropDef {
        name: "sync",
        kind: PropKind::Index(&["standard", "always", "disabled"]),
        default: "standard",
        inherit: true,
        column: "SYNC",
        help: "Synchronous writes: standard honours fsync/O_SYNC; always syncs every write; \
               disabled acknowledges sync writes without logging them, so a crash can lose \
               the last seconds of writes that applications were told were on disk",
        values_help: "standard | always | disabled",
        ..BASE
    },
    PropDef {
        name: "logbias",
        kind: PropKind::Index(&["latency", "throughput"]),
        default: "latency",
        inherit: true,
        column: "LOGBIAS",
        help: "Intent log use: latency logs sync writes, throughput writes large ones in place",
        values_help: "latency | throughput",
        ..BASE
    },
    PropDef {
        name: "copies",
        kind: PropKind::Index(&["1", "2", "3"]),
        default: "1",
        inherit: true,
        column: "COPIES",
        help: "Copies of each new data block, on different vdevs where possible",
        values_help: "1 | 2 | 3",
        ..BASE
    },
    PropDef {
        name: "mountpoint",
        kind: PropKind::String,
        default: "/",
        inherit: true,
        column: "MOUNTPOINT",
        help: "Where the filesystem is mounted; children inherit it with their name appended",
        values_help: "<path> | legacy | none",
        rule: Rule::Mountpoint,
        ..BASE
    },
    PropDef {
        name: "canmount",
        kind: PropKind::Index(&["on", "off", "noauto"]),
        default: "on",
        column: "CANMOUNT",
        help: "Whether the filesystem can be mounted (noauto: only explicitly)",
        values_help: "on | off | noauto",
        ..BASE
    },
    on_off("readonly", "off", "RDONLY", "Refuse all modifications"),
    limit(
        "quota",
        "QUOTA",
        "Limit on space used by this dataset and its descendants",
    ),
    limit(
        "refquota",
        "REFQUOTA",
        "Limit on space referenced by this dataset alone",
    ),
    limit(
        "reservation",
        "RESERV",
        "Space guaranteed to this dataset and its descendants",
    ),
    limit(
        "refreservation",
        "REFRESERV",
        "Space guaranteed to this dataset alone",
    ),
    PropDef {
        name: "primarycache",
        kind: PropKind::Index(CACHE_VALUES),
        default: "all",
        inherit: true,
        column: "PRIMARYCACHE",
        help: "What the in-memory cache (ARC) keeps",
        values_help: "all | none | metadata",
        ..BASE
    },
    PropDef {
        name: "secondarycache",
        kind: PropKind::Index(CACHE_VALUES),
        default: "all",
        inherit: true,
        column: "SECONDARYCACHE",
        help: "What the cache device (L2ARC) keeps",
        values_help: "all | none | metadata",
        ..BASE
    },
    PropDef {
        name: "volsize",
        kind: PropKind::Size,
        default: "0",
        column: "VOLSIZE",
        help: "Logical size of a volume",
        values_help: "<size>",
        display: Display::Bytes,
        ..BASE
    },
    PropDef {
        name: "volblocksize",
        kind: PropKind::Size,
        default: "16384",
        create_only: true,
        column: "VOLBLOCK",
        help: "Block size of a volume, fixed at creation",
        values_help: "512 to 128K, power of 2",
        rule: Rule::PowerOfTwo {
            min: MIN_BLOCK_BYTES,
            max: VOL_BLOCK_MAX_BYTES,
        },
        display: Display::Bytes,
        ..BASE
    },
    PropDef {
        default: "filesystem",
        ..stat(
            "type",
            PropKind::Index(&["filesystem", "volume", "snapshot", "bookmark"]),
            "TYPE",
            "Dataset type",
        )
    },
    PropDef {
        display: Display::Date,
        ..stat(
            "creation",
            PropKind::Number,
            "CREATION",
            "Time the dataset was created",
        )
    },
    stat(
        "used",
        PropKind::Size,
        "USED",
        "Space used by this dataset and its descendants",
    ),
    stat(
        "available",
        PropKind::Size,
        "AVAIL",
        "Space available to this dataset and its children",
    ),
    stat(
        "referenced",
        PropKind::Size,
        "REFER",
        "Space referenced by this dataset",
    ),
    PropDef {
        default: "100",
        display: Display::Ratio,
        ..stat(
            "compressratio",
            PropKind::Number,
            "RATIO",
            "Compression ratio of used space",
        )
    },
    PropDef {
        default: "100",
        display: Display::Ratio,
        ..stat(
            "refcompressratio",
            PropKind::Number,
            "REFRATIO",
            "Compression ratio of referenced space",
        )
    },
    stat(
        "logicalused",
        PropKind::Size,
        "LUSED",
        "Used space before compression",
    ),
    stat(
        "logicalreferenced",
        PropKind::Size,
        "LREFER",
        "Referenced space before compression",
    ),
    stat(
        "usedbydataset",
        PropKind::Size,
        "USEDDS",
        "Space used by this dataset itself",
    ),
    stat(
        "usedbychildren",
        PropKind::Size,
        "USEDCHILD",
        "Space used by descendants",
    ),
    stat(
        "usedbysnapshots",
        PropKind::Size,
        "USEDSNAP",
        "Space freed if all snapshots were destroyed",
    ),
    stat(
        "usedbyrefreservation",
        PropKind::Size,
        "USEDREFRESERV",
        "Space held by the refreservation",
    ),
    PropDef {
        default: "no",
        ..stat(
            "mounted",
            PropKind::Index(&["yes", "no"]),
            "MOUNTED",
            "Whether the filesystem is mounted",
        )
    },
    stat("name", PropKind::String, "NAME", "Dataset name"),
    stat(
        "guid",
        PropKind::Number,
        "GUID",
        "Unique identifier of the dataset",
    ),
    stat(
        "createtxg",
        PropKind::Number,
        "CREATETXG",
        "Transaction group the dataset was created in",
    ),
    stat(
        "objsetid",
        PropKind::Number,
        "OBJSETID",
        "Object set number",
    ),
    PropDef {
        default: "-",
        ..stat(
            "receive_resume_token",
            PropKind::String,
            "RESUMETOK",
            "Token for 'zfs send -t' to resume an interrupted 'zfs receive -s'",
        )
    },
    stat(
        "origin",
        PropKind::String,
        "ORIGIN",
        "Snapshot this clone was created from",
    ),
    stat(
        "written",
        PropKind::Size,
        "WRITTEN",
        "Space referenced here and written since the previous snapshot",
    ),
    stat(
        "clones",
        PropKind::String,
        "CLONES",
        "Clones of this snapshot",
    ),
    PropDef {
        default: "off",
        ..stat(
            "defer_destroy",
            PropKind::Index(&["on", "off"]),
            "DEFER_DESTROY",
            "Snapshot marked for destruction when its holds and clones go",
        )
    },
    stat(
        "userrefs",
        PropKind::Number,
        "USERREFS",
        "Holds on this snapshot",
    ),
    on_off(
        "exec",
        "on",
        "EXEC",
        "Allow running programs from the filesystem (off mounts it noexec)",
    ),
    on_off(
        "setuid",
        "on",
        "SETUID",
        "Honour set-user-ID and set-group-ID bits (off mounts it nosuid)",
    ),
    on_off(
        "devices",
        "on",
        "DEVICES",
        "Allow opening device nodes (off mounts it nodev)",
    ),
    PropDef {
        name: "casesensitivity",
        kind: PropKind::Index(&["sensitive"]),
        default: "sensitive",
        inherit: true,
        create_only: true,
        column: "CASE",
        help: "File name case: tarn has only sensitive (insensitive and mixed are not supported)",
        values_help: "sensitive",
        ..BASE
    },
    PropDef {
        name: "normalization",
        kind: PropKind::Index(&["none"]),
        default: "none",
        inherit: true,
        create_only: true,
        column: "NORMALIZATION",
        help: "Unicode normalization of file names: tarn has only none (names are bytes)",
        values_help: "none",
        ..BASE
    },
    PropDef {
        create_only: true,
        ..on_off(
            "utf8only",
            "off",
            "UTF8ONLY",
            "Refuse file names that are not valid UTF-8 (EILSEQ)",
        )
    },
    PropDef {
        name: "acltype",
        kind: PropKind::Index(&["off", "noacl", "posix", "posixacl", "nfsv4"]),
        default: "off",
        inherit: true,
        column: "ACLTYPE",
        help: "ACL type: stored only; POSIX ACLs are kept as the xattrs they are, the kernel \
               checks mode bits",
        values_help: "off | posix | nfsv4",
        ..BASE
    },
    PropDef {
        name: "dedup",
        kind: PropKind::Index(&["off"]),
        default: "off",
        inherit: true,
        column: "DEDUP",
        help: "Deduplication: only off, tarn does not deduplicate blocks yet",
        values_help: "off",
        ..BASE
    },
    PropDef {
        default: "5",
        ..stat(
            "version",
            PropKind::String,
            "VERSION",
            "Filesystem (ZPL) version, as zfs(8) reports it",
        )
    },
    PropDef {
        name: "sharenfs",
        kind: PropKind::String,
        default: "off",
        inherit: true,
        column: "SHARENFS",
        help: "NFS sharing: stored only, tarn does not share filesystems yet",
        values_help: "on | off | <options>",
        ..BASE
    },
    PropDef {
        name: "sharesmb",
        kind: PropKind::String,
        default: "off",
        inherit: true,
        column: "SHARESMB",
        help: "SMB sharing: stored only, tarn does not share filesystems yet",
        values_help: "on | off | <options>",
        ..BASE
    },
    PropDef {
        name: "snapdev",
        kind: PropKind::Index(&["hidden", "visible"]),
        default: "hidden",
        inherit: true,
        column: "SNAPDEV",
        help: "Whether a volume's snapshots are served (read-only) beside it",
        values_help: "hidden | visible",
        ..BASE
    },
    PropDef {
        name: "volmode",
        kind: PropKind::Index(&["default", "full", "geom", "dev", "none"]),
        default: "default",
        inherit: true,
        column: "VOLMODE",
        help: "How volumes are exposed: 'none' serves no socket",
        values_help: "default | full | geom | dev | none",
        ..BASE
    },
    PropDef {
        name: "snapdir",
        kind: PropKind::Index(&["hidden", "visible"]),
        default: "hidden",
        inherit: true,
        column: "SNAPDIR",
        help: "Whether .zfs is listed in the filesystem's root",
        values_help: "hidden | visible",
        ..BASE
    },
    stat(
        "snapshot_count",
        PropKind::Number,
        "SSCOUNT",
        "Snapshots of this dataset and its descendants",
    ),
];

static POOL_PROPS: [PropDef; 28] = [
    PropDef {
        display: Display::Bytes,
        ..stat(
            "size",
            PropKind::Size,
            "SIZE",
            "Raw size of the pool's metaslabs, parity included",
        )
    },
    PropDef {
        display: Display::Percent,
        ..stat(
            "capacity",
            PropKind::Number,
            "CAP",
            "Percentage of the pool allocated",
        )
    },
    stat("allocated", PropKind::Size, "ALLOC", "Raw space allocated"),
    stat("free", PropKind::Size, "FREE", "Raw space not allocated"),
    PropDef {
        display: Display::BytesOrDash,
        ..stat(
            "checkpoint",
            PropKind::Size,
            "CKPOINT",
            "Space held by the pool checkpoint",
        )
    },
    PropDef {
        display: Display::BytesOrDash,
        ..stat(
            "expandsize",
            PropKind::Size,
            "EXPANDSZ",
            "Space that 'zpool online -e' would add",
        )
    },
    PropDef {
        default: "0",
        display: Display::Percent,
        ..stat(
            "fragmentation",
            PropKind::Number,
            "FRAG",
            "Fragmentation of free space",
        )
    },
    PropDef {
        default: "100",
        display: Display::Ratio,
        ..stat(
            "dedupratio",
            PropKind::Number,
            "DEDUP",
            "Deduplication ratio",
        )
    },
    PropDef {
        default: "ONLINE",
        ..stat(
            "health",
            PropKind::String,
            "HEALTH",
            "ONLINE, DEGRADED, FAULTED, OFFLINE, REMOVED or UNAVAIL",
        )
    },
    PropDef {
        name: "altroot",
        create_only: true,
        column: "ALTROOT",
        help: "Directory prefixed to every mountpoint (set at create or import)",
        values_help: "<path>",
        rule: Rule::AbsolutePath,
        ..BASE
    },
    stat(
        "guid",
        PropKind::Number,
        "GUID",
        "Unique identifier of the pool",
    ),
    stat(
        "load_guid",
        PropKind::Number,
        "LOAD_GUID",
        "Identifier that changes each time the pool is opened",
    ),
    PropDef {
        default: "-",
        ..stat(
            "version",
            PropKind::String,
            "VERSION",
            "On-disk version; '-' for feature-flag pools",
        )
    },
    stat(
        "freeing",
        PropKind::Size,
        "FREEING",
        "Space still being freed by background destroys",
    ),
    stat(
        "leaked",
        PropKind::Size,
        "LEAKED",
        "Space leaked by destroys (should be 0)",
    ),
    PropDef {
        name: "bootfs",
        column: "BOOTFS",
        help: "Default bootable dataset",
        values_help: "<filesystem>",
        rule: Rule::DatasetOrEmpty,
        ..BASE
    },
    PropDef {
        readonly: false,
        inherit: false,
        ..on_off(
            "delegation",
            "on",
            "DELEGATION",
            "Allow 'zfs allow' delegation",
        )
    },
    PropDef {
        readonly: false,
        inherit: false,
        ..on_off(
            "autoreplace",
            "off",
            "REPLACE",
            "Replace a faulted device by a new one found in its place",
        )
    },
    PropDef {
        name: "cachefile",
        column: "CACHEFILE",
        help: "Where the pool configuration is cached ('none' for nowhere)",
        values_help: "<file> | none",
        rule: Rule::PathOrNone,
        ..BASE
    },
    PropDef {
        name: "failmode",
        kind: PropKind::Index(&["wait", "continue", "panic"]),
        default: "wait",
        column: "FAILMODE",
        help: "What to do when the pool loses too many devices: wait, return EIO, or panic",
        values_help: "wait | continue | panic",
        ..BASE
    },
    PropDef {
        inherit: false,
        ..on_off(
            "listsnapshots",
            "off",
            "LISTSNAPS",
            "Show snapshots in 'zfs list' by default",
        )
    },
    PropDef {
        inherit: false,
        ..on_off(
            "autoexpand",
            "off",
            "EXPAND",
            "Grow the pool when its devices grow",
        )
    },
    PropDef {
        inherit: false,
        create_only: true,
        ..on_off(
            "readonly",
            "off",
            "RDONLY",
            "Import the pool read-only (set at import)",
        )
    },
    PropDef {
        inherit: false,
        ..on_off(
            "multihost",
            "off",
            "MULTIHOST",
            "Guard against import on two hosts at once",
        )
    },
    PropDef {
        inherit: false,
        ..on_off(
            "autotrim",
            "off",
            "AUTOTRIM",
            "Trim freed space automatically",
        )
    },
    PropDef {
        name: "ashift",
        kind: PropKind::Number,
        default: "0",
        column: "ASHIFT",
        help: "Sector size exponent for new vdevs (0 detects; 9 = 512 B, 12 = 4 KiB)",
        values_help: "0 | 9 to 16",
        rule: Rule::Ashift,
        ..BASE
    },
    PropDef {
        name: "comment",
        column: "COMMENT",
        help: "Free-form text, stored with the pool",
        values_help: "<text, up to 32 printable characters>",
        rule: Rule::Comment,
        ..BASE
    },
    PropDef {
        default: "",
        ..stat("name", PropKind::String, "NAME", "Pool name")
    },
];

/// All dataset properties, in `zfs get all` order.
/// The short names zfs(8) and zpool(8) accept for properties
/// (`zfs list -o avail,refer`, `zpool list -o cap,frag`). Lookups resolve
/// them, so `PropDef::name` is always the full name.
const DATASET_ALIASES: &[(&str, &str)] = &[
    ("avail", "available"),
    ("refer", "referenced"),
    ("recsize", "recordsize"),
    ("compress", "compression"),
    ("ratio", "compressratio"),
    ("refratio", "refcompressratio"),
    ("reserv", "reservation"),
    ("refreserv", "refreservation"),
    ("rdonly", "readonly"),
    ("lused", "logicalused"),
    ("lrefer", "logicalreferenced"),
    ("usedsnap", "usedbysnapshots"),
    ("usedds", "usedbydataset"),
    ("usedchild", "usedbychildren"),
    ("usedrefreserv", "usedbyrefreservation"),
    ("volblock", "volblocksize"),
];
const POOL_ALIASES: &[(&str, &str)] = &[
    ("cap", "capacity"),
    ("alloc", "allocated"),
    ("frag", "fragmentation"),
    ("expandsz", "expandsize"),
    ("dedup", "dedupratio"),
    ("ckpoint", "checkpoint"),
    ("listsnaps", "listsnapshots"),
];

fn resolve_alias<'a>(aliases: &[(&'a str, &'a str)], name: &'a str) -> &'a str {
    aliases
        .iter()
        .find(|(short, _)| *short == name)
        .map_or(name, |(_, full)| full)
}

pub fn dataset_props() -> &'static [PropDef] {
    &DATASET_PROPS
}

/// All pool properties, in `zpool get all` order.
pub fn pool_props() -> &'static [PropDef] {
    &POOL_PROPS
}

/// Looks up a dataset property by name.
/// Whether a dataset property means something for a volume: not the
/// ones about files, directories and mounts (zfs(8) shows `-` for those
/// and `zfs set` refuses them), as OpenZFS's `ZFS_TYPE_FILESYSTEM`-only
/// properties.
pub fn applies_to_volume(name: &str) -> bool {
    let name = resolve_alias(DATASET_ALIASES, name);
    !matches!(
        name,
        "recordsize"
            | "mountpoint"
            | "canmount"
            | "mounted"
            | "atime"
            | "relatime"
            | "xattr"
            | "exec"
            | "setuid"
            | "devices"
            | "utf8only"
            | "normalization"
            | "casesensitivity"
            | "acltype"
            | "sharenfs"
            | "sharesmb"
            | "snapdir"
            | "quota"
            | "refquota"
            | "version"
    )
}

/// Whether a dataset property means something for a filesystem: all but
/// the volume's geometry.
pub fn applies_to_filesystem(name: &str) -> bool {
    !matches!(
        resolve_alias(DATASET_ALIASES, name),
        "volsize" | "volblocksize"
    )
}

pub fn dataset_prop(name: &str) -> Option<&'static PropDef> {
    let name = resolve_alias(DATASET_ALIASES, name);
    DATASET_PROPS.iter().find(|p| p.name == name)
}

/// Looks up a pool property by name.
pub fn pool_prop(name: &str) -> Option<&'static PropDef> {
    let name = resolve_alias(POOL_ALIASES, name);
    POOL_PROPS.iter().find(|p| p.name == name)
}

/// Validates and normalises a user value for a dataset property, giving
/// the stored form (`"128k"` → `"131072"`; `"gzip"` and `"zstd"` stay as
/// typed and mean gzip-6 and zstd-3, as in OpenZFS, which shows them so).
pub fn parse_dataset_value(name: &str, value: &str) -> Result<String, PropError> {
    let def = dataset_prop(name).ok_or_else(|| PropError::Unknown(name.to_string()))?;
    parse_value(def, value)
}

/// Validates and normalises a user value for a pool property.
pub fn parse_pool_value(name: &str, value: &str) -> Result<String, PropError> {
    let def = pool_prop(name).ok_or_else(|| PropError::Unknown(name.to_string()))?;
    parse_value(def, value)
}

fn bad(def: &PropDef, value: &str, why: impl Into<String>) -> PropError {
    PropError::BadValue {
        name: def.name.to_string(),
        value: value.to_string(),
        why: why.into(),
    }
}

/// Parses `value` against `def`'s kind, then its rule.
pub fn parse_value(def: &PropDef, value: &str) -> Result<String, PropError> {
    if def.readonly {
        return Err(PropError::ReadOnly(def.name.to_string()));
    }
    match def.kind {
        PropKind::Bool if value == "on" || value == "off" => Ok(value.to_string()),
        PropKind::Bool => Err(bad(def, value, "must be 'on' or 'off'")),
        PropKind::Index(values) if values.contains(&value) => Ok(value.to_string()),
        PropKind::Index(_) => Err(bad(
            def,
            value,
            format!("must be one of {}", def.values_help),
        )),
        PropKind::Size => parse_size_value(def, value),
        PropKind::Number => parse_number_value(def, value),
        PropKind::String => parse_string_value(def, value),
    }
}

fn parse_size_value(def: &PropDef, value: &str) -> Result<String, PropError> {
    if def.rule == Rule::SizeOrNone && value == "none" {
        return Ok("0".to_string());
    }
    // Resolved against the volume by the engine (zfsprops(7)).
    if def.name == "refreservation" && value == "auto" {
        return Ok("auto".to_string());
    }
    let bytes = parse_size(value).map_err(|e| bad(def, value, e.to_string()))?;
    if let Rule::PowerOfTwo { min, max } = def.rule {
        if !(min..=max).contains(&bytes) || !bytes.is_power_of_two() {
            let why = format!(
                "must be a power of 2 from {} to {}",
                nicebytes(min),
                nicebytes(max)
            );
            return Err(bad(def, value, why));
        }
    }
    Ok(bytes.to_string())
}

fn parse_number_value(def: &PropDef, value: &str) -> Result<String, PropError> {
    let n: u64 = match value.bytes().all(|b| b.is_ascii_digit()) {
        true => value
            .parse()
            .map_err(|_| bad(def, value, "numeric value is too large"))?,
        false => return Err(bad(def, value, "must be a number")),
    };
    if def.rule == Rule::Ashift && n != 0 && !(9..=16).contains(&n) {
        return Err(bad(def, value, "only values between 9 and 16 are allowed"));
    }
    Ok(n.to_string())
}

fn parse_string_value(def: &PropDef, value: &str) -> Result<String, PropError> {
    let why = match def.rule {
        Rule::Mountpoint => names::validate_mountpoint(value)
            .err()
            .map(|e| e.to_string()),
        Rule::AbsolutePath if !value.is_empty() && !value.starts_with('/') => {
            Some("must be an absolute path".into())
        }
        Rule::PathOrNone if !(value.is_empty() || value == "none" || value.starts_with('/')) => {
            Some("must be an absolute path or 'none'".into())
        }
        Rule::DatasetOrEmpty if !value.is_empty() => names::validate_dataset_name(value)
            .err()
            .map(|e| e.to_string()),
        Rule::Comment if value.len() > MAX_COMMENT_BYTES => Some("comment is too long".into()),
        Rule::Comment if !value.bytes().all(|b| (0x20..0x7f).contains(&b)) => {
            Some("comment may only have printable characters".into())
        }
        _ => None,
    };
    match why {
        Some(why) => Err(bad(def, value, why)),
        None => Ok(value.to_string()),
    }
}

/// The mountpoint a child inherits: the parent's value with the child's
/// path below the dataset the value came from appended. `parent_ds` is the
/// dataset whose value it is (`""` when it is the default `/`), so
/// `("/", "", "tank/a")` is `/tank/a` and `("/mnt", "tank", "tank/a/b")` is
/// `/mnt/a/b`. `legacy` and `none` are inherited unchanged.
pub fn inherited_mountpoint(parent_value: &str, parent_ds: &str, child_ds: &str) -> String {
    if parent_value == "legacy" || parent_value == "none" {
        return parent_value.to_string();
    }
    let rel = match child_ds.strip_prefix(parent_ds) {
        Some(rest) if parent_ds.is_empty() => rest,
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest.trim_start_matches('/'),
        // Not a descendant: callers pass the source dataset, so this is a
        // bug upstream; appending the whole name keeps the path unique.
        _ => child_ds,
    };
    match (parent_value.trim_end_matches('/'), rel) {
        ("", "") => "/".to_string(),
        (base, "") => base.to_string(),
        (base, rel) => format!("{base}/{rel}"),
    }
}

/// Formats a stored value for display as `zfs get` / `zfs list` do, or
/// returns it raw (numbers in bytes, ratios as `1.50`) for `-p`.
pub fn format_value(def: &PropDef, stored: &str, parsable: bool) -> String {
    let number = stored.parse::<u64>().ok();
    match (def.display, number) {
        (Display::Plain, _) if stored.is_empty() => "-".to_string(),
        (Display::Plain, _) => stored.to_string(),
        (Display::Ratio, Some(n)) => {
            let x = if parsable { "" } else { "x" };
            format!("{}.{:02}{x}", n / 100, n % 100)
        }
        (_, None) => stored.to_string(),
        (_, Some(n)) if parsable => n.to_string(),
        (Display::BytesOrNone, Some(0)) => "none".to_string(),
        (Display::BytesOrDash, Some(0)) => "-".to_string(),
        (Display::Bytes | Display::BytesOrNone | Display::BytesOrDash, Some(n)) => nicebytes(n),
        (Display::Percent, Some(n)) => format!("{n}%"),
        (Display::Date, Some(n)) => format_date_utc(n),
    }
}

/// `ctime`-style date as `zfs get creation` prints it (`%a %b %e %H:%M %Y`),
/// in UTC: tarn has no time-zone database, so this differs from OpenZFS's
/// local time by the zone offset.
fn format_date_utc(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = secs / 86_400;
    let (hour, minute) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    // Civil-from-days (Howard Hinnant), for days since 1970-01-01.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    let weekday = DAYS[(days % 7) as usize];
    let month_name = MONTHS[(month - 1) as usize];
    format!("{weekday} {month_name} {day:>2} {hour:02}:{minute:02} {year}")
}

/// `str2shift`: the power of 1024 a suffix means. `B`, `K`…`Z`, each
/// optionally followed by `B` or `iB` (but not `BB`/`BiB`), any case.
fn suffix_shift(suffix: &str) -> Result<u32, PropError> {
    let invalid = || PropError::BadNumber(format!("invalid numeric suffix '{suffix}'"));
    let upper = suffix.to_ascii_uppercase();
    let mut chars = upper.chars();
    let Some(unit) = chars.next() else {
        return Ok(0);
    };
    let index = "BKMGTPEZ".find(unit).ok_or_else(invalid)?;
    let rest = chars.as_str();
    match rest {
        "" => Ok(10 * index as u32),
        "B" | "IB" if unit != 'B' => Ok(10 * index as u32),
        _ => Err(invalid()),
    }
}

/// `zfs_nicestrtonum`: parses `512`, `128k`, `1.5G`, `16MiB`, `1TB` into
/// bytes. Units are powers of 1024; fractions are truncated to whole bytes.
pub fn parse_size(s: &str) -> Result<u64, PropError> {
    let numeric_end = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(numeric_end);
    let starts_ok = number.starts_with(|c: char| c.is_ascii_digit() || c == '.');
    if !starts_ok || number == "." || number.matches('.').count() > 1 {
        return Err(PropError::BadNumber(format!("bad numeric value '{s}'")));
    }
    let shift = suffix_shift(suffix)?;
    let too_large = || PropError::BadNumber("numeric value is too large".to_string());
    if number.contains('.') {
        let value: f64 = number
            .parse()
            .map_err(|_| PropError::BadNumber(format!("bad numeric value '{s}'")))?;
        let bytes = value * 2f64.powi(shift as i32);
        // u64::MAX is not representable; its nearest double is 2^64.
        if bytes >= u64::MAX as f64 {
            return Err(too_large());
        }
        return Ok(bytes as u64);
    }
    let value: u64 = number.parse().map_err(|_| too_large())?;
    if shift >= 64 || value.checked_shl(shift).is_none_or(|v| v >> shift != value) {
        return Err(too_large());
    }
    Ok(value << shift)
}

/// `zfs_nicenum_format`: up to 5 characters, 1024-based, with `unit0` for
/// plain bytes. Exact multiples print without decimals (`1K`); otherwise
/// the most decimals (2, 1, 0) that fit in 5 characters (`1.50K`, `10.5K`,
/// `100K`).
fn nicenum_format(num: u64, unit0: &str) -> String {
    const UNITS: [&str; 7] = ["", "K", "M", "G", "T", "P", "E"];
    let mut n = num;
    let mut index = 0;
    while n >= 1024 && index < UNITS.len() - 1 {
        n /= 1024;
        index += 1;
    }
    let unit = if index == 0 { unit0 } else { UNITS[index] };
    let divisor = 1u64 << (10 * index);
    if index == 0 || num.is_multiple_of(divisor) {
        return format!("{n}{unit}");
    }
    let value = num as f64 / divisor as f64;
    let mut text = String::new();
    for precision in (0..=2).rev() {
        text = format!("{value:.precision$}{unit}");
        if text.len() <= 5 {
            break;
        }
    }
    text
}

/// `zfs_nicenum_format` for times (`ZFS_NICENUM_TIME`): nanoseconds,
/// 1000-based, as `zpool iostat -l` prints waits: `500ns`, `793us`,
/// `1.05s` (at most 5 characters where decimals are dropped).
pub fn nicetime(ns: u64) -> String {
    const UNITS: [&str; 4] = ["ns", "us", "ms", "s"];
    let mut n = ns;
    let mut index = 0;
    while n >= 1000 && index < UNITS.len() - 1 {
        n /= 1000;
        index += 1;
    }
    let divisor = 1000u64.pow(index as u32);
    if index == 0 || ns.is_multiple_of(divisor) {
        return format!("{n}{}", UNITS[index]);
    }
    let value = ns as f64 / divisor as f64;
    let mut text = String::new();
    for precision in (0..=2).rev() {
        text = format!("{value:.precision$}{}", UNITS[index]);
        if text.len() <= 5 {
            break;
        }
    }
    text
}

/// `zfs_nicenum`: `0`, `1023`, `1K`, `1.50K`.
pub fn nicenum(n: u64) -> String {
    nicenum_format(n, "")
}

/// `zfs_nicebytes`, as `zfs list` prints sizes: `0B`, `512B`, `1.50K`.
pub fn nicebytes(n: u64) -> String {
    nicenum_format(n, "B")
}

/// The algorithm a stored `compression` value selects. An unknown value
/// (only possible from a damaged property list) selects the default, lz4.
pub fn compression_from_prop(v: &str) -> Compression {
    let level = |prefix: &str, range: std::ops::RangeInclusive<u8>| {
        v.strip_prefix(prefix)
            .and_then(|l| l.parse::<u8>().ok())
            .filter(|l| range.contains(l))
    };
    match v {
        "off" => Compression::Off,
        "on" | "lz4" => Compression::Lz4,
        "zle" => Compression::Zle,
        "gzip" => Compression::Gzip(6),
        "zstd" => Compression::Zstd(3),
        _ => match (level("gzip-", 1..=9), level("zstd-", 1..=19)) {
            (Some(l), _) => Compression::Gzip(l),
            (_, Some(l)) => Compression::Zstd(l),
            _ => Compression::default(),
        },
    }
}

/// The algorithm a stored `checksum` value selects; `on` and unknown
/// values select fletcher4.
pub fn checksum_from_prop(v: &str) -> ChecksumAlg {
    match v {
        "off" => ChecksumAlg::Off,
        "sha256" => ChecksumAlg::Sha256,
        "blake3" => ChecksumAlg::Blake3,
        _ => ChecksumAlg::Fletcher4,
    }
}

#[cfg(test)]
mod alias_tests {
    use super::*;

    #[test]
    fn short_names_resolve_to_full_ones() {
        assert_eq!(dataset_prop("avail").unwrap().name, "available");
        assert_eq!(dataset_prop("recsize").unwrap().name, "recordsize");
        assert_eq!(dataset_prop("compress").unwrap().name, "compression");
        assert_eq!(pool_prop("cap").unwrap().name, "capacity");
        assert_eq!(pool_prop("frag").unwrap().name, "fragmentation");
        for (short, full) in DATASET_ALIASES {
            assert_eq!(dataset_prop(short).map(|d| d.name), Some(*full), "{short}");
        }
        for (short, full) in POOL_ALIASES {
            assert_eq!(pool_prop(short).map(|d| d.name), Some(*full), "{short}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_well_formed() {
        for table in [dataset_props(), pool_props()] {
            for (i, p) in table.iter().enumerate() {
                assert!(
                    !p.name.is_empty() && !p.column.is_empty() && !p.help.is_empty(),
                    "{p:?}"
                );
                assert_eq!(p.column, p.column.to_ascii_uppercase(), "{}", p.name);
                assert!(
                    table[..i].iter().all(|q| q.name != p.name),
                    "duplicate {}",
                    p.name
                );
                if !p.readonly {
                    assert!(!p.values_help.is_empty(), "{} lacks values_help", p.name);
                }
            }
        }
    }

    #[test]
    fn every_default_parses_and_formats() {
        for def in dataset_props().iter().chain(pool_props()) {
            if !def.readonly {
                // The stored default must be its own canonical form.
                assert_eq!(
                    parse_value(def, def.default).as_deref(),
                    Ok(def.default),
                    "{}",
                    def.name
                );
            }
            let _ = format_value(def, def.default, false);
        }
    }

    #[test]
    fn inheritance_flags_follow_openzfs() {
        let inherit = |n| dataset_prop(n).map(|p| p.inherit);
        for n in [
            "recordsize",
            "compression",
            "checksum",
            "atime",
            "copies",
            "mountpoint",
            "sync",
        ] {
            assert_eq!(inherit(n), Some(true), "{n}");
        }
        for n in [
            "canmount",
            "quota",
            "refquota",
            "reservation",
            "refreservation",
            "volsize",
        ] {
            assert_eq!(inherit(n), Some(false), "{n}");
        }
    }

    #[test]
    fn sizes_and_block_sizes() {
        assert_eq!(
            parse_dataset_value("recordsize", "128k").as_deref(),
            Ok("131072")
        );
        assert_eq!(
            parse_dataset_value("recordsize", "16M").as_deref(),
            Ok("16777216")
        );
        assert_eq!(
            parse_dataset_value("recordsize", "512").as_deref(),
            Ok("512")
        );
        let err = parse_dataset_value("recordsize", "3K").unwrap_err();
        assert_eq!(
            err.to_string(),
            "bad property value '3K' for recordsize: must be a power of 2 from 512B to 16M"
        );
        assert!(parse_dataset_value("recordsize", "256").is_err());
        assert!(parse_dataset_value("recordsize", "32M").is_err());
        assert!(parse_dataset_value("recordsize", "big").is_err());
        assert_eq!(parse_dataset_value("quota", "none").as_deref(), Ok("0"));
        assert_eq!(
            parse_dataset_value("quota", "1.5G").as_deref(),
            Ok("1610612736")
        );
        assert!(parse_dataset_value("volsize", "none").is_err());
        assert_eq!(
            parse_dataset_value("volblocksize", "8K").as_deref(),
            Ok("8192")
        );
    }

    #[test]
    fn index_and_bool_values() {
        assert_eq!(
            parse_dataset_value("compression", "gzip").as_deref(),
            Ok("gzip")
        );
        assert_eq!(
            parse_dataset_value("compression", "zstd").as_deref(),
            Ok("zstd")
        );
        assert_eq!(
            parse_dataset_value("compression", "zstd-19").as_deref(),
            Ok("zstd-19")
        );
        assert_eq!(
            parse_dataset_value("compression", "on").as_deref(),
            Ok("on")
        );
        assert!(parse_dataset_value("compression", "ON").is_err());
        assert!(parse_dataset_value("compression", "gzip-10").is_err());
        assert!(parse_dataset_value("compression", "zstd-20").is_err());
        assert!(parse_dataset_value("atime", "yes").is_err());
        assert!(parse_dataset_value("atime", "On").is_err());
        assert_eq!(parse_dataset_value("atime", "off").as_deref(), Ok("off"));
        assert_eq!(parse_dataset_value("copies", "3").as_deref(), Ok("3"));
        assert!(parse_dataset_value("copies", "4").is_err());
        assert_eq!(
            parse_dataset_value("sync", "disabled").as_deref(),
            Ok("disabled")
        );
        assert!(dataset_prop("sync").is_some_and(|p| p.help.contains("lose the last seconds")));
        let err = parse_dataset_value("logbias", "fast")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "bad property value 'fast' for logbias: must be one of latency | throughput"
        );
    }

    #[test]
    fn strings_and_errors() {
        assert_eq!(
            parse_dataset_value("mountpoint", "/srv/data").as_deref(),
            Ok("/srv/data")
        );
        assert_eq!(
            parse_dataset_value("mountpoint", "legacy").as_deref(),
            Ok("legacy")
        );
        assert!(parse_dataset_value("mountpoint", "srv").is_err());
        assert!(parse_dataset_value("mountpoint", "/a/../b").is_err());
        assert_eq!(
            parse_dataset_value("used", "1G"),
            Err(PropError::ReadOnly("used".into()))
        );
        assert_eq!(
            parse_dataset_value("nosuch", "1").unwrap_err().to_string(),
            "invalid property 'nosuch'"
        );
    }

    #[test]
    fn pool_values() {
        assert_eq!(parse_pool_value("ashift", "12").as_deref(), Ok("12"));
        assert_eq!(parse_pool_value("ashift", "0").as_deref(), Ok("0"));
        for bad in ["8", "17", "-1", "x", "99999999999999999999"] {
            assert!(parse_pool_value("ashift", bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_pool_value("failmode", "continue").as_deref(),
            Ok("continue")
        );
        assert!(parse_pool_value("failmode", "retry").is_err());
        assert!(parse_pool_value("size", "1G").is_err());
        assert!(parse_pool_value("comment", &"x".repeat(33)).is_err());
        assert!(parse_pool_value("comment", "tab\there").is_err());
        assert_eq!(
            parse_pool_value("comment", "rack 4").as_deref(),
            Ok("rack 4")
        );
        assert_eq!(parse_pool_value("cachefile", "none").as_deref(), Ok("none"));
        assert!(parse_pool_value("altroot", "mnt").is_err());
        assert!(parse_pool_value("bootfs", "tank/ROOT@x").is_err());
        assert!(pool_prop("ashift").is_some_and(|p| !p.readonly));
        assert!(pool_prop("health").is_some_and(|p| p.readonly));
    }

    #[test]
    fn parse_size_edge_cases() {
        let ok = [
            ("0", 0),
            ("512", 512),
            ("512B", 512),
            ("128k", 131_072),
            ("128K", 131_072),
            ("16M", 16 << 20),
            ("16MiB", 16 << 20),
            ("16mb", 16 << 20),
            ("1T", 1 << 40),
            ("1.5G", 3 << 29),
            (".5K", 512),
            ("1.5", 1),
            ("15E", 15 << 60),
            ("18446744073709551615", u64::MAX),
        ];
        for (s, want) in ok {
            assert_eq!(parse_size(s), Ok(want), "{s}");
        }
        let bad = [
            "",
            "-1",
            "+1",
            " 1",
            "1 K",
            "abc",
            "1X",
            "1BB",
            "1BiB",
            "1KBB",
            "16E",
            "1Z",
            "1.5.5",
            ".",
            "18446744073709551616",
            "20E",
            "1e3",
        ];
        for s in bad {
            assert!(parse_size(s).is_err(), "{s} should fail");
        }
        assert_eq!(
            parse_size("16E").unwrap_err().to_string(),
            "numeric value is too large"
        );
        assert_eq!(
            parse_size("-1").unwrap_err().to_string(),
            "bad numeric value '-1'"
        );
        assert_eq!(
            parse_size("1X").unwrap_err().to_string(),
            "invalid numeric suffix 'X'"
        );
    }

    #[test]
    fn nicetime_prints_waits_as_zpool_iostat_does() {
        assert_eq!(nicetime(500), "500ns");
        assert_eq!(nicetime(793_000), "793us");
        assert_eq!(nicetime(1_000_000), "1ms");
        assert_eq!(nicetime(1_500_000), "1.5ms");
        assert_eq!(nicetime(12_345_678), "12ms");
        assert_eq!(nicetime(2_500_000_000), "2.50s");
    }

    #[test]
    fn nicenum_matches_openzfs() {
        // Outputs of zfs_nicenum_format in OpenZFS 2.x, worked by its rules.
        let cases = [
            (0, "0", "0B"),
            (512, "512", "512B"),
            (1023, "1023", "1023B"),
            (1024, "1K", "1K"),
            (1536, "1.50K", "1.50K"),
            (10_752, "10.5K", "10.5K"),
            (102_809, "100K", "100K"),
            (10_239, "10.0K", "10.0K"),
            (98_304, "96K", "96K"),
            (131_072, "128K", "128K"),
            (1_610_612_736, "1.50G", "1.50G"),
            (1152, "1.12K", "1.12K"),
            (1 << 60, "1E", "1E"),
            (u64::MAX, "16.0E", "16.0E"),
        ];
        for (n, num, bytes) in cases {
            assert_eq!(nicenum(n), num, "nicenum({n})");
            assert_eq!(nicebytes(n), bytes, "nicebytes({n})");
        }
    }

    #[test]
    fn format_values() {
        let get = |n| dataset_prop(n).expect("known property");
        assert_eq!(format_value(get("recordsize"), "131072", false), "128K");
        assert_eq!(format_value(get("recordsize"), "131072", true), "131072");
        assert_eq!(format_value(get("quota"), "0", false), "none");
        assert_eq!(format_value(get("quota"), "0", true), "0");
        assert_eq!(format_value(get("used"), "0", false), "0B");
        assert_eq!(format_value(get("compressratio"), "150", false), "1.50x");
        assert_eq!(format_value(get("compressratio"), "150", true), "1.50");
        assert_eq!(
            format_value(get("creation"), "0", false),
            "Thu Jan  1 00:00 1970"
        );
        assert_eq!(
            format_value(get("creation"), "1709373600", false),
            "Sat Mar  2 10:00 2024"
        );
        assert_eq!(format_value(get("origin"), "", false), "-");
        let pool = |n| pool_prop(n).expect("known property");
        assert_eq!(format_value(pool("capacity"), "12", false), "12%");
        assert_eq!(format_value(pool("expandsize"), "0", false), "-");
        assert_eq!(format_value(pool("dedupratio"), "100", false), "1.00x");
        assert_eq!(format_value(pool("bootfs"), "", false), "-");
    }

    #[test]
    fn mountpoint_inheritance() {
        assert_eq!(inherited_mountpoint("/", "", "tank"), "/tank");
        assert_eq!(inherited_mountpoint("/", "", "tank/a/b"), "/tank/a/b");
        assert_eq!(inherited_mountpoint("/mnt", "tank", "tank/a/b"), "/mnt/a/b");
        assert_eq!(inherited_mountpoint("/mnt/", "tank", "tank/a"), "/mnt/a");
        assert_eq!(inherited_mountpoint("/", "tank", "tank/a"), "/a");
        assert_eq!(inherited_mountpoint("/srv", "tank/a", "tank/a"), "/srv");
        assert_eq!(inherited_mountpoint("legacy", "tank", "tank/a"), "legacy");
        assert_eq!(inherited_mountpoint("none", "tank", "tank/a"), "none");
        // "tank/ab" is not below "tank/a".
        assert_eq!(
            inherited_mountpoint("/m", "tank/a", "tank/ab"),
            "/m/tank/ab"
        );
    }

    #[test]
    fn algorithms_from_props() {
        assert_eq!(compression_from_prop("on"), Compression::Lz4);
        assert_eq!(compression_from_prop("off"), Compression::Off);
        assert_eq!(compression_from_prop("gzip"), Compression::Gzip(6));
        assert_eq!(compression_from_prop("gzip-1"), Compression::Gzip(1));
        assert_eq!(compression_from_prop("zstd"), Compression::Zstd(3));
        assert_eq!(compression_from_prop("zstd-19"), Compression::Zstd(19));
        assert_eq!(compression_from_prop("zle"), Compression::Zle);
        assert_eq!(compression_from_prop("zstd-20"), Compression::Lz4);
        for v in COMPRESSION_VALUES {
            let stored = parse_dataset_value("compression", v).expect("listed value parses");
            let alg = compression_from_prop(&stored);
            if *v != "on" {
                assert_eq!(compression_from_prop(&alg.name()), alg, "{v}");
            }
        }
        assert_eq!(checksum_from_prop("on"), ChecksumAlg::Fletcher4);
        assert_eq!(checksum_from_prop("sha256"), ChecksumAlg::Sha256);
        assert_eq!(checksum_from_prop("blake3"), ChecksumAlg::Blake3);
        assert_eq!(checksum_from_prop("off"), ChecksumAlg::Off);
    }
}
