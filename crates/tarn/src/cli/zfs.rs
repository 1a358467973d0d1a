//! `tarn zfs …`: the zfs(8) verbs for datasets.
//!
//! As in [`super::zpool`], each verb is an argument struct and a function
//! that builds one request and renders its result.

use clap::{Args, Subcommand};

use crate::api::{
    DatasetRow, DatasetType, DestroyReport, DiffRow, HoldRow, MountRow, PropRow, PropSourceKind,
    Request, SortKey, ZfsBookmark, ZfsClone, ZfsCreate, ZfsDestroy, ZfsDiff, ZfsGet, ZfsHold,
    ZfsHolds, ZfsInherit, ZfsList, ZfsMount, ZfsPromote, ZfsReceive, ZfsRename, ZfsRollback,
    ZfsSend, ZfsSet, ZfsSnapshot, ZfsUnmount,
};
use crate::cli::zpool::get_fields;
use crate::cli::{json_output, parse_assign, split_list, Ctx, Failure, Output, TableFlags};
use crate::output::{self, PropScope};

#[derive(Debug, Subcommand)]
pub enum ZfsCommand {
    /// Create a filesystem, or with -V a volume (served over NBD)
    #[command(disable_version_flag = true)]
    Create(CreateArgs),
    /// Destroy a dataset, or snapshots (DS@SNAP, DS@A%B, DS@A,B)
    Destroy(DestroyArgs),
    /// Create snapshots: read-only copies of datasets as they are now
    #[command(alias = "snap")]
    Snapshot(SnapshotArgs),
    /// Roll a dataset back to its most recent snapshot
    Rollback(RollbackArgs),
    /// Create a writable filesystem from a snapshot, sharing its blocks
    Clone(CloneArgs),
    /// Make a clone independent of its origin: the origin's snapshots move to it
    Promote(PromoteArgs),
    /// Rename a filesystem (moving it in the tree) or a snapshot
    Rename(RenameArgs),
    /// Put a named hold on snapshots: they cannot be destroyed while held
    Hold(HoldArgs),
    /// Release a hold on snapshots
    Release(HoldArgs),
    /// List the holds on snapshots
    Holds(HoldsArgs),
    /// Create a bookmark of a snapshot (or copy a bookmark)
    Bookmark(BookmarkArgs),
    /// Show the files changed between a snapshot and a later snapshot or the filesystem
    Diff(DiffArgs),
    /// Write a snapshot as a stream to standard output (full, incremental, replication)
    Send(SendArgs),
    /// Create a snapshot (and its filesystem) from a stream on standard input
    #[command(alias = "recv")]
    Receive(ReceiveArgs),
    /// List datasets and their space usage
    List(ListArgs),
    /// Show dataset properties and where their values come from
    Get(GetArgs),
    /// Set dataset properties
    Set(SetArgs),
    /// Clear a local property value so it is inherited again
    Inherit(InheritArgs),
    /// Mount a filesystem (no arguments: list mounted filesystems)
    Mount(MountArgs),
    /// Unmount a filesystem, by name or mountpoint
    #[command(alias = "umount")]
    Unmount(UnmountArgs),
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Create missing parent datasets
    #[arg(short = 'p')]
    pub parents: bool,
    /// Create a volume of this size (served over NBD at <run dir>/zvol/POOL/VOL)
    #[arg(short = 'V', value_name = "SIZE")]
    pub volsize: Option<String>,
    /// Sparse volume: no reservation (with -V)
    #[arg(short = 's')]
    pub sparse: bool,
    /// Volume block size (with -V; same as -o volblocksize=)
    #[arg(short = 'b', value_name = "BLOCKSIZE")]
    pub blocksize: Option<String>,
    /// Set a property (repeatable), e.g. -o recordsize=1M
    #[arg(short = 'o', value_name = "PROPERTY=VALUE", value_parser = parse_assign)]
    pub props: Vec<(String, String)>,
    /// Dataset to create, e.g. tank/media
    pub dataset: String,
}

#[derive(Debug, Args)]
pub struct DestroyArgs {
    /// Recursively destroy all descendants (for snapshots: the same name in every descendant)
    #[arg(short = 'r')]
    pub recursive: bool,
    /// Also destroy dependents: clones of the snapshots
    #[arg(short = 'R')]
    pub dependents: bool,
    /// Force: unmount busy filesystems (lazy detach)
    #[arg(short = 'f')]
    pub force: bool,
    /// Dry run: show what would be destroyed, destroy nothing
    #[arg(short = 'n')]
    pub dry_run: bool,
    /// Print what is destroyed (and the space snapshots release)
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Print machine-parsable verbose lines (implies -v)
    #[arg(short = 'p')]
    pub parsable: bool,
    /// Defer: snapshots with holds or clones go when those do
    #[arg(short = 'd')]
    pub defer: bool,
    /// Dataset, or snapshots: DS@SNAP, DS@FIRST%LAST, DS@A,B
    pub dataset: String,
}

#[derive(Debug, Args)]
pub struct CloneArgs {
    /// Create missing parent datasets
    #[arg(short = 'p')]
    pub parents: bool,
    /// Set a property (repeatable)
    #[arg(short = 'o', value_name = "PROPERTY=VALUE", value_parser = parse_assign)]
    pub props: Vec<(String, String)>,
    /// The snapshot to clone
    #[arg(value_name = "SNAPSHOT")]
    pub snapshot: String,
    /// The new filesystem
    #[arg(value_name = "FILESYSTEM")]
    pub name: String,
}

#[derive(Debug, Args)]
pub struct PromoteArgs {
    /// The clone to promote
    #[arg(value_name = "CLONE")]
    pub name: String,
}

#[derive(Debug, Args)]
pub struct RenameArgs {
    /// Snapshots: rename the same snapshot of every descendant
    #[arg(short = 'r')]
    pub recursive: bool,
    /// Create missing parents of the new name
    #[arg(short = 'p')]
    pub parents: bool,
    /// Unmount busy filesystems
    #[arg(short = 'f')]
    pub force: bool,
    /// Current name (filesystem or snapshot)
    pub from: String,
    /// New name (for a snapshot: DATASET@NEW or @NEW)
    pub to: String,
}

#[derive(Debug, Args)]
pub struct HoldArgs {
    /// The same snapshot of every descendant too
    #[arg(short = 'r')]
    pub recursive: bool,
    /// The hold's name
    pub tag: String,
    /// Snapshots
    #[arg(required = true, value_name = "SNAPSHOT")]
    pub snapshots: Vec<String>,
}

#[derive(Debug, Args)]
pub struct HoldsArgs {
    /// The same snapshot of every descendant too
    #[arg(short = 'r')]
    pub recursive: bool,
    /// Scripted: no header, tab-separated
    #[arg(short = 'H')]
    pub scripted: bool,
    /// Exact times (seconds since the epoch)
    #[arg(short = 'p')]
    pub parsable: bool,
    /// Snapshots
    #[arg(required = true, value_name = "SNAPSHOT")]
    pub snapshots: Vec<String>,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// Show the file type: F file, / directory, @ symlink, | fifo, = socket, B, C devices
    #[arg(short = 'F')]
    pub types: bool,
    /// Parsable: tab-separated, renames as two fields without an arrow
    #[arg(short = 'H')]
    pub scripted: bool,
    /// Show each change's inode change time first
    #[arg(short = 't')]
    pub times: bool,
    /// The older snapshot
    #[arg(value_name = "SNAPSHOT")]
    pub from: String,
    /// A later snapshot of the same filesystem, or the filesystem (default)
    #[arg(value_name = "SNAPSHOT|FILESYSTEM")]
    pub to: Option<String>,
}

#[derive(Debug, Args)]
#[command(disable_help_flag = true)]
pub struct SendArgs {
    /// Print help (-h is zfs-send(8)'s holds flag)
    #[arg(long = "help", action = clap::ArgAction::Help)]
    pub help: Option<bool>,
    /// Incremental from this snapshot or bookmark (@SNAP, #BOOKMARK or full names)
    #[arg(
        short = 'i',
        value_name = "SNAPSHOT|BOOKMARK",
        conflicts_with = "intermediates"
    )]
    pub from: Option<String>,
    /// Incremental with every snapshot between this one and SNAPSHOT
    #[arg(short = 'I', value_name = "SNAPSHOT")]
    pub intermediates: Option<String>,
    /// Replication stream: the dataset, its descendants, snapshots, properties and clones
    #[arg(short = 'R')]
    pub replicate: bool,
    /// Include the dataset's properties
    #[arg(short = 'p')]
    pub props: bool,
    /// Send blocks larger than 128 KiB whole
    #[arg(short = 'L', long = "large-block")]
    pub large_blocks: bool,
    /// Embedded data (accepted; tarn has no embedded block pointers)
    #[arg(short = 'e', long = "embed")]
    pub embed: bool,
    /// Send blocks compressed as stored
    #[arg(short = 'c', long = "compressed")]
    pub compressed: bool,
    /// Raw: blocks exactly as stored
    #[arg(short = 'w', long = "raw")]
    pub raw: bool,
    /// Send received property values as received (accepted)
    #[arg(short = 'b', long = "backup")]
    pub backup: bool,
    /// Include user holds (accepted)
    #[arg(short = 'h', long = "holds")]
    pub holds: bool,
    /// Print estimates and per-second progress on standard error
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
    /// Parsable estimates: full/incremental/size lines with exact bytes
    #[arg(short = 'P', long = "parsable")]
    pub parsable: bool,
    /// Dry run: print what would be sent (with -v) and send nothing
    #[arg(short = 'n', long = "dryrun")]
    pub dry_run: bool,
    /// Resume an interrupted receive from its receive_resume_token
    #[arg(short = 't', value_name = "TOKEN", conflicts_with_all = ["from", "intermediates", "replicate", "snapshot"])]
    pub token: Option<String>,
    /// The snapshot to send
    #[arg(value_name = "SNAPSHOT", required_unless_present = "token")]
    pub snapshot: Option<String>,
}

#[derive(Debug, Args)]
pub struct ReceiveArgs {
    /// Roll the target back first (and, for a replication stream, destroy what the sender no longer has)
    #[arg(short = 'F')]
    pub force: bool,
    /// Do not mount the received filesystem
    #[arg(short = 'u')]
    pub nomount: bool,
    /// Print what is received and how fast
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Dry run: read and check the stream, change nothing
    #[arg(short = 'n')]
    pub dry_run: bool,
    /// Keep a partial receive for 'zfs send -t' to resume
    #[arg(short = 's')]
    pub resumable: bool,
    /// Name the target after the sent name without its pool
    #[arg(short = 'd', conflicts_with = "last_only")]
    pub discard_first: bool,
    /// Name the target after the last element of the sent name
    #[arg(short = 'e')]
    pub last_only: bool,
    /// Set a property on the received filesystem
    #[arg(short = 'o', value_name = "PROPERTY=VALUE", value_parser = parse_assign)]
    pub set: Vec<(String, String)>,
    /// Do not receive this property
    #[arg(short = 'x', value_name = "PROPERTY")]
    pub exclude: Vec<String>,
    /// Abort a partial receive of the filesystem
    #[arg(short = 'A')]
    pub abort: bool,
    /// The filesystem (or snapshot) to receive into
    #[arg(value_name = "FILESYSTEM|SNAPSHOT")]
    pub target: String,
}

#[derive(Debug, Args)]
pub struct BookmarkArgs {
    /// The snapshot (or bookmark) to mark
    #[arg(value_name = "SNAPSHOT|BOOKMARK")]
    pub source: String,
    /// The new bookmark: DATASET#NAME
    #[arg(value_name = "BOOKMARK")]
    pub target: String,
}

#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// Destroy later snapshots and bookmarks
    #[arg(short = 'r')]
    pub recursive: bool,
    /// Destroy later snapshots and their clones
    #[arg(short = 'R')]
    pub dependents: bool,
    /// With -R: unmount clones even if busy
    #[arg(short = 'f')]
    pub force: bool,
    /// The snapshot to roll back to
    #[arg(value_name = "SNAPSHOT")]
    pub snapshot: String,
}

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// Snapshot every descendant too, with the same name, in one transaction
    #[arg(short = 'r')]
    pub recursive: bool,
    /// Set a user property on the snapshots (repeatable), e.g. -o com.example:why=backup
    #[arg(short = 'o', value_name = "PROPERTY=VALUE", value_parser = parse_assign)]
    pub props: Vec<(String, String)>,
    /// Snapshots to create: DATASET@NAME (several: one transaction)
    #[arg(required = true, value_name = "DATASET@NAME")]
    pub names: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Recursively list descendants
    #[arg(short = 'r')]
    pub recursive: bool,
    /// Recurse at most this many levels (implies -r)
    #[arg(short = 'd', value_name = "DEPTH")]
    pub depth: Option<u32>,
    #[command(flatten)]
    pub table: TableFlags,
    /// Comma-separated columns (default: name,used,available,referenced,mountpoint)
    #[arg(short = 'o', value_name = "PROPERTY[,…]")]
    pub columns: Option<String>,
    /// Comma-separated types: filesystem, volume, snapshot, bookmark, all
    #[arg(short = 't', value_name = "TYPE[,…]")]
    pub types: Option<String>,
    /// Sort by a property, ascending (repeatable: later keys break ties)
    #[arg(short = 's', value_name = "PROPERTY")]
    pub sort: Vec<String>,
    /// Sort by a property, descending (repeatable)
    #[arg(short = 'S', value_name = "PROPERTY")]
    pub sort_desc: Vec<String>,
    /// Print JSON
    #[arg(short = 'j', long = "json")]
    pub json: bool,
    /// Datasets to list (default: all)
    pub datasets: Vec<String>,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// Recursively show descendants
    #[arg(short = 'r')]
    pub recursive: bool,
    /// Recurse at most this many levels (implies -r)
    #[arg(short = 'd', value_name = "DEPTH")]
    pub depth: Option<u32>,
    #[command(flatten)]
    pub table: TableFlags,
    /// Comma-separated fields: name,property,value,source
    #[arg(short = 'o', value_name = "FIELD[,…]")]
    pub fields: Option<String>,
    /// Comma-separated sources to show: local,default,inherited,temporary,received,none
    #[arg(short = 's', value_name = "SOURCE[,…]")]
    pub sources: Option<String>,
    /// Comma-separated types: filesystem, volume, snapshot, bookmark, all
    #[arg(short = 't', value_name = "TYPE[,…]")]
    pub types: Option<String>,
    /// Print JSON
    #[arg(short = 'j', long = "json")]
    pub json: bool,
    /// 'all' or comma-separated property names
    #[arg(value_name = "all|PROPERTY[,…]")]
    pub props: String,
    /// Datasets (default: all)
    pub datasets: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SetArgs {
    /// PROPERTY=VALUE assignments followed by the dataset to change
    #[arg(required = true, num_args = 2.., value_name = "PROPERTY=VALUE… DATASET")]
    pub args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct InheritArgs {
    /// Also clear the property on all descendants
    #[arg(short = 'r')]
    pub recursive: bool,
    /// Property to inherit
    pub prop: String,
    /// Dataset to change
    pub dataset: String,
}

#[derive(Debug, Args)]
pub struct MountArgs {
    /// Mount every filesystem whose canmount is on
    #[arg(short = 'a', conflicts_with = "dataset")]
    pub all: bool,
    /// Overlay: mount even over a non-empty directory
    #[arg(short = 'O')]
    pub overlay: bool,
    /// Temporary mount options, comma-separated: ro, rw
    #[arg(short = 'o', value_name = "OPTION[,…]")]
    pub options: Vec<String>,
    /// Filesystem to mount (omit, without -a, to list mounted filesystems)
    pub dataset: Option<String>,
}

#[derive(Debug, Args)]
pub struct UnmountArgs {
    /// Unmount every tarn filesystem
    #[arg(short = 'a', conflicts_with = "target")]
    pub all: bool,
    /// Force: unmount even if busy (lazy detach)
    #[arg(short = 'f')]
    pub force: bool,
    /// Filesystem name or mountpoint
    #[arg(value_name = "FILESYSTEM|MOUNTPOINT", required_unless_present = "all")]
    pub target: Option<String>,
}

/// Which of the two hold verbs a [`HoldArgs`] came with.
enum HoldKind {
    Hold,
    Release,
}

/// `zfs send`: the daemon writes the stream to this process's stdout.
fn send(a: SendArgs, ctx: &Ctx) -> Result<Output, Failure> {
    use std::io::IsTerminal;
    use std::os::fd::AsRawFd;
    if !a.dry_run && std::io::stdout().is_terminal() {
        return Err(Failure(
            "Error: Stream can not be written to a terminal.\n\
             You must redirect standard output."
                .into(),
        ));
    }
    let (from, intermediates) = match (a.from, a.intermediates) {
        (Some(f), _) => (Some(f), false),
        (None, Some(f)) => (Some(f), true),
        (None, None) => (None, false),
    };
    let req = Request::ZfsSend(ZfsSend {
        snapshot: a.snapshot.unwrap_or_default(),
        from,
        intermediates,
        replicate: a.replicate,
        props: a.props,
        large_blocks: a.large_blocks,
        embed: a.embed,
        compressed: a.compressed,
        raw: a.raw,
        backup: a.backup,
        holds: a.holds,
        verbose: a.verbose,
        parsable: a.parsable,
        dry_run: a.dry_run,
        token: a.token,
        fds: Default::default(),
    });
    let fds = [std::io::stdout().as_raw_fd(), std::io::stderr().as_raw_fd()];
    lines_output(ctx.call_with_fds(&req, &fds)?)
}

/// `zfs receive`: the daemon reads the stream from this process's stdin.
fn receive(a: ReceiveArgs, ctx: &Ctx) -> Result<Output, Failure> {
    use std::io::IsTerminal;
    use std::os::fd::AsRawFd;
    if !a.abort && std::io::stdin().is_terminal() {
        return Err(Failure(
            "Error: Backup stream can not be read from a terminal.\n\
             You must redirect standard input."
                .into(),
        ));
    }
    let req = Request::ZfsReceive(ZfsReceive {
        target: a.target,
        force: a.force,
        nomount: a.nomount,
        verbose: a.verbose,
        dry_run: a.dry_run,
        resumable: a.resumable,
        discard_first: a.discard_first,
        last_only: a.last_only,
        set: a.set,
        exclude: a.exclude,
        abort: a.abort,
        fds: Default::default(),
    });
    let fds = [std::io::stdin().as_raw_fd(), std::io::stderr().as_raw_fd()];
    lines_output(ctx.call_with_fds(&req, &fds)?)
}

/// The lines a send or receive answered with, on stdout.
fn lines_output(data: serde_json::Value) -> Result<Output, Failure> {
    let lines: Vec<String> = serde_json::from_value(data)
        .map_err(|e| Failure(format!("malformed result from tarn daemon: {e}")))?;
    if lines.is_empty() {
        return Ok(Output::none());
    }
    Ok(Output::stdout(lines.join("\n") + "\n"))
}

pub fn run(cmd: ZfsCommand, ctx: &Ctx) -> Result<Output, Failure> {
    let cmd_kind = match cmd {
        ZfsCommand::Release(_) => HoldKind::Release,
        _ => HoldKind::Hold,
    };
    match cmd {
        ZfsCommand::Create(a) => {
            let mut props = a.props;
            if let Some(b) = a.blocksize {
                props.push(("volblocksize".into(), b));
            }
            let req = Request::ZfsCreate(ZfsCreate {
                name: a.dataset,
                props,
                parents: a.parents,
                volsize: a.volsize,
                sparse: a.sparse,
            });
            ctx.call(&req).map(|_| Output::none())
        }
        ZfsCommand::Destroy(a) => {
            let verbose = a.verbose || a.parsable;
            let req = Request::ZfsDestroy(ZfsDestroy {
                name: a.dataset,
                recursive: a.recursive,
                force: a.force,
                dependents: a.dependents,
                dry_run: a.dry_run,
                defer: a.defer,
            });
            let report: DestroyReport = ctx.call_as(&req)?;
            Ok(if verbose {
                Output::stdout(output::destroy_report(&report, a.dry_run, a.parsable))
            } else {
                Output::none()
            })
        }
        ZfsCommand::Rollback(a) => {
            let req = Request::ZfsRollback(ZfsRollback {
                name: a.snapshot,
                recursive: a.recursive,
                dependents: a.dependents,
                force: a.force,
            });
            ctx.call(&req).map(|_| Output::none())
        }
        ZfsCommand::Clone(a) => {
            let req = Request::ZfsClone(ZfsClone {
                snapshot: a.snapshot,
                name: a.name,
                parents: a.parents,
                props: a.props,
            });
            ctx.call(&req).map(|_| Output::none())
        }
        ZfsCommand::Promote(a) => {
            let req = Request::ZfsPromote(ZfsPromote { name: a.name });
            ctx.call(&req).map(|_| Output::none())
        }
        ZfsCommand::Rename(a) => {
            let req = Request::ZfsRename(ZfsRename {
                from: a.from,
                to: a.to,
                recursive: a.recursive,
                parents: a.parents,
                force: a.force,
            });
            ctx.call(&req).map(|_| Output::none())
        }
        ZfsCommand::Hold(a) | ZfsCommand::Release(a) => {
            let release = matches!(cmd_kind, HoldKind::Release);
            let req = Request::ZfsHold(ZfsHold {
                tag: a.tag,
                names: a.snapshots,
                recursive: a.recursive,
                release,
            });
            ctx.call(&req).map(|_| Output::none())
        }
        ZfsCommand::Holds(a) => {
            let req = Request::ZfsHolds(ZfsHolds {
                names: a.snapshots,
                recursive: a.recursive,
            });
            let rows: Vec<HoldRow> = ctx.call_as(&req)?;
            Ok(Output::stdout(output::holds(&rows, a.scripted, a.parsable)))
        }
        ZfsCommand::Diff(a) => {
            let req = Request::ZfsDiff(ZfsDiff {
                from: a.from,
                to: a.to,
            });
            let rows: Vec<DiffRow> = ctx.call_as(&req)?;
            Ok(Output::stdout(output::diff(
                &rows, a.types, a.scripted, a.times,
            )))
        }
        ZfsCommand::Send(a) => send(a, ctx),
        ZfsCommand::Receive(a) => receive(a, ctx),
        ZfsCommand::Bookmark(a) => {
            let req = Request::ZfsBookmark(ZfsBookmark {
                source: a.source,
                target: a.target,
            });
            ctx.call(&req).map(|_| Output::none())
        }
        ZfsCommand::Snapshot(a) => {
            let req = Request::ZfsSnapshot(ZfsSnapshot {
                names: a.names,
                recursive: a.recursive,
                props: a.props,
            });
            ctx.call(&req).map(|_| Output::none())
        }
        ZfsCommand::List(a) => list(a, ctx),
        ZfsCommand::Get(a) => get(a, ctx),
        ZfsCommand::Set(a) => {
            let req = set_request(a.args)?;
            ctx.call(&req).map(|_| Output::none())
        }
        ZfsCommand::Inherit(a) => {
            let req = Request::ZfsInherit(ZfsInherit {
                name: a.dataset,
                prop: a.prop,
                recursive: a.recursive,
            });
            ctx.call(&req).map(|_| Output::none())
        }
        ZfsCommand::Mount(a) => {
            let listing = a.dataset.is_none() && !a.all;
            let req = Request::ZfsMount(ZfsMount {
                name: a.dataset,
                all: a.all,
                overlay: a.overlay,
                options: a.options.iter().flat_map(|o| split_list(o)).collect(),
            });
            let rows: Vec<MountRow> = ctx.call_as(&req)?;
            Ok(if listing {
                Output::stdout(output::mount_list(&rows))
            } else {
                Output::none()
            })
        }
        ZfsCommand::Unmount(a) => {
            let req = Request::ZfsUnmount(ZfsUnmount {
                target: a.target,
                all: a.all,
                force: a.force,
            });
            ctx.call(&req).map(|_| Output::none())
        }
    }
}

/// `zfs set a=b c=d DATASET`: the assignments, then the dataset.
pub fn set_request(mut args: Vec<String>) -> Result<Request, Failure> {
    let Some(name) = args.pop() else {
        return Err(Failure("missing dataset argument".into()));
    };
    let props = args
        .iter()
        .map(|a| parse_assign(a).map_err(Failure))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Request::ZfsSet(ZfsSet { name, props }))
}

/// Parse `-t`: `all` is every type; `fs`, `vol`, `snap` are accepted
/// abbreviations, as in zfs(8).
pub fn parse_types(spec: &str) -> Result<Vec<DatasetType>, Failure> {
    let mut types = Vec::new();
    for t in split_list(spec) {
        match t.as_str() {
            "all" => {
                return Ok(vec![
                    DatasetType::Filesystem,
                    DatasetType::Volume,
                    DatasetType::Snapshot,
                    DatasetType::Bookmark,
                ])
            }
            "filesystem" | "fs" => types.push(DatasetType::Filesystem),
            "volume" | "vol" => types.push(DatasetType::Volume),
            "snapshot" | "snap" => types.push(DatasetType::Snapshot),
            "bookmark" => types.push(DatasetType::Bookmark),
            other => return Err(Failure(format!("invalid type '{other}'"))),
        }
    }
    Ok(types)
}

fn list(a: ListArgs, ctx: &Ctx) -> Result<Output, Failure> {
    let cols = split_list(a.columns.as_deref().unwrap_or(output::DATASET_LIST_DEFAULT));
    let types = a
        .types
        .as_deref()
        .map(parse_types)
        .transpose()?
        .unwrap_or_default();
    let req = Request::ZfsList(ZfsList {
        names: a.datasets,
        recursive: a.recursive || a.depth.is_some(),
        depth: a.depth,
        types,
        props: cols.clone(),
        sort: a
            .sort
            .into_iter()
            .map(|prop| SortKey {
                prop,
                descending: false,
            })
            .chain(a.sort_desc.into_iter().map(|prop| SortKey {
                prop,
                descending: true,
            }))
            .collect(),
    });
    let rows: Vec<DatasetRow> = ctx.call_as(&req)?;
    if a.json {
        return Ok(json_output(&output::dataset_list_json(
            &rows,
            &cols,
            a.table.parsable,
        )));
    }
    if rows.is_empty() {
        return Ok(Output::stderr("no datasets available\n"));
    }
    let style = a.table.style();
    Ok(Output::stdout(output::dataset_list(&rows, &cols, style)))
}

fn parse_sources(spec: &str) -> Result<Vec<PropSourceKind>, Failure> {
    split_list(spec)
        .iter()
        .map(|s| {
            Ok(match s.as_str() {
                "local" => PropSourceKind::Local,
                "default" => PropSourceKind::Default,
                "inherited" => PropSourceKind::Inherited,
                "temporary" => PropSourceKind::Temporary,
                "received" => PropSourceKind::Received,
                "none" => PropSourceKind::None,
                other => return Err(Failure(format!("invalid source '{other}'"))),
            })
        })
        .collect()
}

fn get(a: GetArgs, ctx: &Ctx) -> Result<Output, Failure> {
    let fields = get_fields(a.fields.as_deref())?;
    let sources = a
        .sources
        .as_deref()
        .map(parse_sources)
        .transpose()?
        .unwrap_or_default();
    let req = Request::ZfsGet(ZfsGet {
        names: a.datasets,
        props: split_list(&a.props),
        recursive: a.recursive || a.depth.is_some(),
        depth: a.depth,
        sources,
        types: a
            .types
            .as_deref()
            .map(parse_types)
            .transpose()?
            .unwrap_or_default(),
    });
    let rows: Vec<PropRow> = ctx.call_as(&req)?;
    if a.json {
        return Ok(json_output(&output::get_json(
            &rows,
            PropScope::Dataset,
            a.table.parsable,
        )));
    }
    let style = a.table.style();
    Ok(Output::stdout(output::get_table(
        &rows,
        &fields,
        PropScope::Dataset,
        style,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn parse(args: &[&str]) -> ZfsCommand {
        let mut argv = vec!["tarn", "zfs"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Zfs(cmd) => cmd,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn set_takes_many_assignments_then_the_dataset() {
        let ZfsCommand::Set(a) = parse(&["set", "compression=lz4", "atime=off", "tank/a"]) else {
            panic!("not set")
        };
        let Request::ZfsSet(set) = set_request(a.args).unwrap() else {
            panic!("not a set request")
        };
        assert_eq!(set.name, "tank/a");
        assert_eq!(set.props.len(), 2);
        assert!(set_request(vec!["nonsense".into(), "tank".into()]).is_err());
    }

    #[test]
    fn list_and_get_flags() {
        let ZfsCommand::List(l) = parse(&["list", "-r", "-d", "1", "-Hp", "-t", "fs,snap", "tank"])
        else {
            panic!("not list")
        };
        assert!(l.recursive && l.table.scripted && l.table.parsable);
        assert_eq!(l.depth, Some(1));
        assert_eq!(
            parse_types(l.types.as_deref().unwrap()).unwrap(),
            vec![DatasetType::Filesystem, DatasetType::Snapshot]
        );
        assert!(parse_types("bogus").is_err());
        let ZfsCommand::Get(g) = parse(&["get", "-s", "local,default", "-o", "name,value", "all"])
        else {
            panic!("not get")
        };
        assert_eq!(
            parse_sources(g.sources.as_deref().unwrap()).unwrap(),
            vec![PropSourceKind::Local, PropSourceKind::Default]
        );
        assert!(g.datasets.is_empty());
    }

    #[test]
    fn mount_and_unmount_flags() {
        let ZfsCommand::Mount(m) = parse(&["mount", "-O", "-o", "ro,rw", "tank/a"]) else {
            panic!("not mount")
        };
        assert!(m.overlay && !m.all);
        assert_eq!(m.dataset.as_deref(), Some("tank/a"));
        let ZfsCommand::Mount(m) = parse(&["mount"]) else {
            panic!("not mount")
        };
        assert!(m.dataset.is_none() && !m.all);
        let ZfsCommand::Unmount(u) = parse(&["umount", "-f", "/tank/a"]) else {
            panic!("umount is not an alias of unmount")
        };
        assert!(u.force);
        assert_eq!(u.target.as_deref(), Some("/tank/a"));
        let ZfsCommand::Unmount(u) = parse(&["unmount", "-a"]) else {
            panic!("not unmount")
        };
        assert!(u.all && u.target.is_none());
        let mut argv = vec!["tarn", "zfs", "unmount"];
        assert!(Cli::try_parse_from(argv.clone()).is_err(), "a target or -a");
        argv.extend(["-a", "tank"]);
        assert!(Cli::try_parse_from(argv).is_err(), "-a with a target");
    }
}
