//! The verb table: every operation the engine serves, listed once.
//!
//! Each line names the [`Backend`](crate::backend::Backend) method, the
//! [`Request`](crate::api::Request) variant and its argument struct (both
//! in [`crate::api`]), and the reply the engine returns. `verbs!` hands
//! the table to a macro that builds one thing from it; three do:
//!
//! - `api.rs` builds the `Request` enum (plus the daemon's own `Ping` and
//!   `Shutdown`);
//! - `backend.rs` builds the `Backend` trait, one method per verb;
//! - `daemon.rs` builds `dispatch`, the match calling that method.
//!
//! So a new verb is one line here, not three matching edits that must
//! agree; ARCHITECTURE.md has the whole recipe (validation, engine, CLI,
//! output, tests). The wire name of a request is its method name (`"op":
//! "zpool_create"`), which `api.rs` tests.

/// Calls `$build! { … }` with the verb table: for each verb, its doc
/// comment, `method: Variant(Args) -> Reply;`.
macro_rules! verbs {
    ($build:ident) => {
        $build! {
            zpool_create: ZpoolCreate(ZpoolCreate) -> ();
            zpool_destroy: ZpoolDestroy(ZpoolDestroy) -> ();
            zpool_list: ZpoolList(ZpoolList) -> Vec<PoolListRow>;
            zpool_status: ZpoolStatus(ZpoolStatus) -> Vec<PoolStatus>;
            zpool_get: ZpoolGet(ZpoolGet) -> Vec<PropRow>;
            zpool_set: ZpoolSet(ZpoolSet) -> ();
            zpool_import_scan: ZpoolImportScan(ZpoolImportScan) -> Vec<ImportablePool>;
            /// Returns what to tell the admin: how many intent log records
            /// the mounts replayed (empty when none).
            zpool_import: ZpoolImport(ZpoolImport) -> String;
            zpool_export: ZpoolExport(ZpoolExport) -> ();
            zpool_history: ZpoolHistory(ZpoolHistory) -> Vec<PoolHistory>;
            zpool_add: ZpoolAdd(ZpoolAdd) -> ();
            zpool_remove: ZpoolRemove(ZpoolRemove) -> ();
            zpool_detach: ZpoolDetach(ZpoolDetach) -> ();
            zpool_iostat: ZpoolIostat(ZpoolIostat) -> Vec<PoolIostat>;
            zpool_scrub: ZpoolScrub(ZpoolScrub) -> ();
            zpool_attach: ZpoolAttach(ZpoolAttach) -> ();
            zpool_offline: ZpoolOffline(ZpoolOffline) -> ();
            zpool_online: ZpoolOnline(ZpoolOnline) -> ();
            zpool_clear: ZpoolClear(ZpoolClear) -> ();
            /// Commits the open transaction group of the named pools (all
            /// when none is named) and waits for it.
            zpool_sync: ZpoolSync(ZpoolSync) -> ();
            zfs_create: ZfsCreate(ZfsCreate) -> ();
            zfs_destroy: ZfsDestroy(ZfsDestroy) -> DestroyReport;
            zfs_snapshot: ZfsSnapshot(ZfsSnapshot) -> ();
            zfs_rollback: ZfsRollback(ZfsRollback) -> ();
            zfs_clone: ZfsClone(ZfsClone) -> ();
            zfs_promote: ZfsPromote(ZfsPromote) -> ();
            zfs_rename: ZfsRename(ZfsRename) -> ();
            /// `zfs hold` and `zfs release`.
            zfs_hold: ZfsHold(ZfsHold) -> ();
            zfs_holds: ZfsHolds(ZfsHolds) -> Vec<HoldRow>;
            zfs_bookmark: ZfsBookmark(ZfsBookmark) -> ();
            zfs_diff: ZfsDiff(ZfsDiff) -> Vec<DiffRow>;
            /// Writes the stream to the passed descriptor; answered with
            /// the lines `-n -v` prints (empty otherwise).
            zfs_send: ZfsSend(ZfsSend) -> Vec<String>;
            /// Reads the stream from the passed descriptor; answered with
            /// the lines `-v` prints.
            zfs_receive: ZfsReceive(ZfsReceive) -> Vec<String>;
            zfs_list: ZfsList(ZfsList) -> Vec<DatasetRow>;
            zfs_get: ZfsGet(ZfsGet) -> Vec<PropRow>;
            zfs_set: ZfsSet(ZfsSet) -> ();
            zfs_inherit: ZfsInherit(ZfsInherit) -> ();
            /// Mounts (or, with no name and no `all`, lists) filesystems;
            /// returns what is mounted as a result (a listing: everything
            /// mounted).
            zfs_mount: ZfsMount(ZfsMount) -> Vec<MountRow>;
            zfs_unmount: ZfsUnmount(ZfsUnmount) -> ();
            /// Registers a fault on one leaf of an imported pool (`tarn
            /// zinject -d`); answered with the new [`InjectHandler`].
            zinject_add: ZinjectAdd(ZinjectAdd) -> InjectHandler;
            /// Every registered fault (`tarn zinject`).
            zinject_list: ZinjectList(ZinjectList) -> Vec<InjectHandler>;
            /// Removes one fault or all (`tarn zinject -c`); answered with
            /// how many were removed.
            zinject_clear: ZinjectClear(ZinjectClear) -> u64;
            /// Intent-log counters per dataset (`tarn zilstat`).
            zilstat: Zilstat(Zilstat) -> Vec<ZilstatRow>;
        }
    };
}

pub(crate) use verbs;
