//! `tarn zpool …`: the zpool(8) verbs.
//!
//! Each verb is an argument struct (flags with help) and a function that
//! builds the request and renders the result. Client-side work is limited
//! to what needs the caller's context: parsing the vdev grammar against the
//! working directory, choosing columns, and formatting. Everything else —
//! names, properties, the replication check — is the daemon's to validate.

use clap::{Args, Subcommand};

use std::io::Write;
use std::time::Duration;

use crate::api::{
    ImportablePool, PoolHistory, PoolIostat, PoolListRow, PoolStatus, PropRow, Request, ScanState,
    ScanStatus, ScrubAction, ZpoolAdd, ZpoolAttach, ZpoolClear, ZpoolCreate, ZpoolDestroy,
    ZpoolDetach, ZpoolExport, ZpoolGet, ZpoolHistory, ZpoolImport, ZpoolImportScan, ZpoolIostat,
    ZpoolList, ZpoolOffline, ZpoolOnline, ZpoolRemove, ZpoolScrub, ZpoolSet, ZpoolStatus,
    ZpoolSync,
};
use crate::cli::{json_output, parse_assign, split_list, Ctx, Failure, Output, TableFlags};
use crate::output::{self, GetField, IostatStyle, PoolColumn, PropScope};
use crate::vdevspec;

// The doc comments are clap's help text: `[mirror]` there is zpool(8)'s
// optional word, not a rustdoc link.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Subcommand)]
pub enum ZpoolCommand {
    /// Create a pool from vdevs: devices, 'mirror DEV…', 'raidz[1-3] DEV…', 'log [mirror] DEV…'
    Create(CreateArgs),
    /// Destroy a pool and everything in it
    Destroy(DestroyArgs),
    /// List pools with their size, usage and health
    List(ListArgs),
    /// Show pool health, vdev error counters and scan progress
    Status(StatusArgs),
    /// Show pool properties
    Get(GetArgs),
    /// Set a pool property
    Set(SetArgs),
    /// List importable pools, or import one by name or numeric id
    Import(ImportArgs),
    /// Export a pool: sync it and release its devices
    Export(ExportArgs),
    /// Show the commands that changed a pool
    History(HistoryArgs),
    /// Add vdevs to a pool: devices, 'mirror DEV…', 'raidz[1-3] DEV…', 'log [mirror] DEV…'
    Add(AddArgs),
    /// Remove a log device (a device, or 'mirror-N' for a mirrored log)
    Remove(RemoveArgs),
    /// Detach a device from a mirror
    Detach(DetachArgs),
    /// Show I/O statistics of pools and their vdevs
    Iostat(IostatArgs),
    /// Verify every block of a pool and repair what is damaged (-p pause, -s stop)
    Scrub(ScrubArgs),
    /// Attach a new device to a mirror or a single-device vdev (it is resilvered)
    Attach(AttachArgs),
    /// Replace a device with a new one: attach, resilver, detach the old one
    Replace(AttachArgs),
    /// Take a device offline: the pool stops using it (refused without enough replicas)
    Offline(OfflineArgs),
    /// Bring an offline, faulted or missing device back online
    Online(OnlineArgs),
    /// Clear device errors, bring repaired devices back and resume a suspended pool
    Clear(ClearArgs),
    /// Write out everything pending: commit the open transaction group now
    Sync(SyncArgs),
}

#[derive(Debug, Args)]
pub struct SyncArgs {
    /// Pools to sync (default: every imported pool)
    pub pools: Vec<String>,
}

/// `zpool attach` and `zpool replace`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Force: use a device that belongs to an exported pool
    #[arg(short = 'f')]
    pub force: bool,
    /// Wait until the resilver has finished
    #[arg(short = 'w')]
    pub wait: bool,
    /// Pool holding the device
    pub pool: String,
    /// A device of the pool (attach: a mirror child or a single-device vdev)
    #[arg(value_name = "DEVICE")]
    pub device: String,
    /// The new device
    #[arg(value_name = "NEW_DEVICE")]
    pub new_device: String,
}

#[derive(Debug, Args)]
pub struct ScrubArgs {
    /// Pause the scrub (start it again to resume)
    #[arg(short = 'p', conflicts_with = "stop")]
    pub pause: bool,
    /// Stop (cancel) the scrub
    #[arg(short = 's')]
    pub stop: bool,
    /// Wait until the scrub has finished (a progress bar on a terminal)
    #[arg(short = 'w')]
    pub wait: bool,
    /// Pools to scrub
    #[arg(required = true, value_name = "POOL")]
    pub pools: Vec<String>,
}

#[derive(Debug, Args)]
pub struct OfflineArgs {
    /// Temporary: the device comes back online at the next import
    #[arg(short = 't')]
    pub temporary: bool,
    /// Pool holding the device
    pub pool: String,
    /// The device to take offline
    #[arg(value_name = "DEVICE")]
    pub device: String,
}

#[derive(Debug, Args)]
pub struct OnlineArgs {
    /// Expand: grow the vdev to what its devices offer (after they were all replaced by larger ones)
    #[arg(short = 'e')]
    pub expand: bool,
    /// Pool holding the device
    pub pool: String,
    /// The device to bring online
    #[arg(value_name = "DEVICE")]
    pub device: String,
}

#[derive(Debug, Args)]
pub struct ClearArgs {
    /// Pool to clear
    pub pool: String,
    /// Only this device (default: every device of the pool)
    #[arg(value_name = "DEVICE")]
    pub device: Option<String>,
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// Force: accept vdevs of mismatched replication levels, or devices of an exported pool
    #[arg(short = 'f')]
    pub force: bool,
    /// Dry run: show the layout the pool would have, change nothing
    #[arg(short = 'n')]
    pub dry_run: bool,
    /// Pool to add to
    pub pool: String,
    /// Vdev specification (devices are files or block devices)
    #[arg(required = true, value_name = "VDEV")]
    pub vdevs: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RemoveArgs {
    /// Pool to remove from
    pub pool: String,
    /// The log device, or 'mirror-N' for a mirrored log
    #[arg(value_name = "DEVICE")]
    pub device: String,
}

#[derive(Debug, Args)]
pub struct DetachArgs {
    /// Pool holding the mirror
    pub pool: String,
    /// The device to detach
    #[arg(value_name = "DEVICE")]
    pub device: String,
}

#[derive(Debug, Args)]
pub struct IostatArgs {
    #[command(flatten)]
    pub table: TableFlags,
    /// Verbose: also show each vdev
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Omit the first report (the statistics since the pool was imported)
    #[arg(short = 'y')]
    pub omit_since_import: bool,
    /// Latency: average total, disk and queue waits
    #[arg(short = 'l')]
    pub latency: bool,
    /// Queues: I/Os pending and active in each queue now
    #[arg(short = 'q')]
    pub queues: bool,
    /// Pools (default: all), then an interval in seconds and a report count
    #[arg(value_name = "POOL… [INTERVAL [COUNT]]")]
    pub args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Force: accept vdevs of mismatched replication levels
    #[arg(short = 'f')]
    pub force: bool,
    /// Dry run: show the layout that would be created, create nothing
    #[arg(short = 'n')]
    pub dry_run: bool,
    /// Set a pool property (repeatable), e.g. -o ashift=12
    #[arg(short = 'o', value_name = "PROPERTY=VALUE", value_parser = parse_assign)]
    pub props: Vec<(String, String)>,
    /// Set a property of the root dataset (repeatable), e.g. -O compression=lz4
    #[arg(short = 'O', value_name = "PROPERTY=VALUE", value_parser = parse_assign)]
    pub fs_props: Vec<(String, String)>,
    /// Mountpoint of the root dataset (default: /POOL)
    #[arg(short = 'm', value_name = "MOUNTPOINT")]
    pub mountpoint: Option<String>,
    /// Name of the new pool
    pub pool: String,
    /// Vdev specification (devices are files or block devices)
    #[arg(required = true, value_name = "VDEV")]
    pub vdevs: Vec<String>,
}

#[derive(Debug, Args)]
pub struct DestroyArgs {
    /// Force: unmount busy datasets
    #[arg(short = 'f')]
    pub force: bool,
    /// Pool to destroy
    pub pool: String,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub table: TableFlags,
    /// Comma-separated columns: name,size,allocated,free,checkpoint,expandsize,fragmentation,capacity,dedupratio,health,altroot,guid
    #[arg(short = 'o', value_name = "PROPERTY[,…]")]
    pub columns: Option<String>,
    /// Verbose: also show each vdev
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Print JSON
    #[arg(short = 'j', long = "json")]
    pub json: bool,
    /// Pools to list (default: all)
    pub pools: Vec<String>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Verbose: list files with permanent errors
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Only show pools that are not healthy
    #[arg(short = 'x')]
    pub unhealthy: bool,
    /// Print exact (parsable) error counters
    #[arg(short = 'p')]
    pub parsable: bool,
    /// Print JSON
    #[arg(short = 'j', long = "json")]
    pub json: bool,
    /// Pools to show (default: all)
    pub pools: Vec<String>,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(flatten)]
    pub table: TableFlags,
    /// Comma-separated fields: name,property,value,source
    #[arg(short = 'o', value_name = "FIELD[,…]")]
    pub fields: Option<String>,
    /// Print JSON
    #[arg(short = 'j', long = "json")]
    pub json: bool,
    /// 'all' or comma-separated property names
    #[arg(value_name = "all|PROPERTY[,…]")]
    pub props: String,
    /// Pools (default: all)
    pub pools: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SetArgs {
    /// The property and its new value
    #[arg(value_name = "PROPERTY=VALUE", value_parser = parse_assign)]
    pub assignment: (String, String),
    /// Pool to change
    pub pool: String,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Search for devices in this directory (repeatable; default /dev)
    #[arg(short = 'd', value_name = "DIR")]
    pub dirs: Vec<String>,
    /// Force: import a pool that seems to be in use by another system
    #[arg(short = 'f')]
    pub force: bool,
    /// Import even if a log device is missing (its intent log records are lost)
    #[arg(short = 'm')]
    pub missing_log: bool,
    /// Pool name or numeric id to import (omit to list importable pools)
    #[arg(value_name = "POOL|ID")]
    pub pool: Option<String>,
    /// Import the pool under this new name
    #[arg(value_name = "NEWPOOL")]
    pub new_name: Option<String>,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Force: unmount busy datasets
    #[arg(short = 'f')]
    pub force: bool,
    /// Pool to export
    pub pool: String,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Pools (default: all)
    pub pools: Vec<String>,
}

pub fn run(cmd: ZpoolCommand, ctx: &Ctx) -> Result<Output, Failure> {
    match cmd {
        ZpoolCommand::Create(a) => create(a, ctx),
        ZpoolCommand::Destroy(a) => {
            let req = Request::ZpoolDestroy(ZpoolDestroy {
                name: a.pool,
                force: a.force,
            });
            ctx.call(&req).map(|_| Output::none())
        }
        ZpoolCommand::List(a) => list(a, ctx),
        ZpoolCommand::Status(a) => status(a, ctx),
        ZpoolCommand::Scrub(a) => scrub(a, ctx),
        ZpoolCommand::Attach(a) => attach(a, false, ctx),
        ZpoolCommand::Replace(a) => attach(a, true, ctx),
        ZpoolCommand::Get(a) => get(a, ctx),
        ZpoolCommand::Set(a) => {
            let (prop, value) = a.assignment;
            let req = Request::ZpoolSet(ZpoolSet {
                name: a.pool,
                prop,
                value,
            });
            ctx.call(&req).map(|_| Output::none())
        }
        ZpoolCommand::Import(a) => import(a, ctx),
        ZpoolCommand::Export(a) => {
            let req = Request::ZpoolExport(ZpoolExport {
                name: a.pool,
                force: a.force,
            });
            ctx.call(&req).map(|_| Output::none())
        }
        ZpoolCommand::History(a) => {
            let req = Request::ZpoolHistory(ZpoolHistory { names: a.pools });
            let histories: Vec<PoolHistory> = ctx.call_as(&req)?;
            Ok(Output::stdout(output::pool_history(&histories)))
        }
        ZpoolCommand::Add(a) => add(a, ctx),
        ZpoolCommand::Remove(a) => {
            let req = Request::ZpoolRemove(ZpoolRemove {
                name: a.pool,
                device: device_word(&a.device),
            });
            ctx.call(&req).map(|_| Output::none())
        }
        ZpoolCommand::Detach(a) => {
            let req = Request::ZpoolDetach(ZpoolDetach {
                name: a.pool,
                device: device_word(&a.device),
            });
            ctx.call(&req).map(|_| Output::none())
        }
        ZpoolCommand::Iostat(a) => iostat(a, ctx),
        ZpoolCommand::Offline(a) => {
            let req = Request::ZpoolOffline(ZpoolOffline {
                name: a.pool,
                device: device_word(&a.device),
                temporary: a.temporary,
            });
            ctx.call(&req).map(|_| Output::none())
        }
        ZpoolCommand::Online(a) => {
            let req = Request::ZpoolOnline(ZpoolOnline {
                name: a.pool,
                device: device_word(&a.device),
                expand: a.expand,
            });
            ctx.call(&req).map(|_| Output::none())
        }
        ZpoolCommand::Sync(a) => {
            let req = Request::ZpoolSync(ZpoolSync { names: a.pools });
            ctx.call(&req).map(|_| Output::none())
        }
        ZpoolCommand::Clear(a) => {
            let req = Request::ZpoolClear(ZpoolClear {
                name: a.pool,
                device: a.device.as_deref().map(device_word),
            });
            ctx.call(&req).map(|_| Output::none())
        }
    }
}

fn add(a: AddArgs, ctx: &Ctx) -> Result<Output, Failure> {
    let vdevs = vdevspec::parse_vdev_spec(&a.vdevs, &vdevspec::resolve_device)
        .map_err(|e| Failure(e.to_string()))?;
    let req = Request::ZpoolAdd(ZpoolAdd {
        name: a.pool.clone(),
        vdevs: vdevs.clone(),
        force: a.force,
        dry_run: a.dry_run,
    });
    ctx.call(&req)?;
    if !a.dry_run {
        return Ok(Output::none());
    }
    let status: Vec<PoolStatus> = ctx.call_as(&Request::ZpoolStatus(ZpoolStatus {
        names: vec![a.pool],
    }))?;
    let current = status
        .first()
        .ok_or_else(|| Failure("the daemon returned no pool".into()))?;
    Ok(Output::stdout(output::add_layout(current, &vdevs)))
}

/// A device word of `remove`/`detach`: a path made absolute, a file of the
/// working directory, or as typed (`mirror-1`, `sdc`).
pub(crate) fn device_word(word: &str) -> String {
    let path = std::path::Path::new(word);
    if word.contains('/') || path.exists() {
        if let Ok(abs) = std::path::absolute(path) {
            return abs.to_string_lossy().into_owned();
        }
    }
    word.to_string()
}

/// What the words of `zpool iostat` ask for.
#[derive(Debug, PartialEq)]
struct IostatWords {
    pools: Vec<String>,
    /// Seconds between reports (`None`: one report).
    interval: Option<f64>,
    /// Reports to print (`None`: until interrupted).
    count: Option<u64>,
}

/// Splits off the trailing `INTERVAL [COUNT]` of `zpool iostat` (pool
/// names start with a letter, so trailing numbers are never pools).
fn iostat_interval(args: &[String]) -> Result<IostatWords, Failure> {
    let numeric = |s: &String| s.parse::<f64>().is_ok_and(|v| v.is_finite() && v >= 0.0);
    let n = args.iter().rev().take(2).take_while(|a| numeric(a)).count();
    let (pools, nums) = args.split_at(args.len() - n);
    let parse = |s: &str| s.parse::<f64>().unwrap_or(0.0);
    let (interval, count) = match nums {
        [] => (None, None),
        [i] => (Some(parse(i)), None),
        [i, c] => {
            let c = c
                .parse::<u64>()
                .map_err(|_| Failure(format!("invalid count '{c}'")))?;
            (Some(parse(i)), Some(c))
        }
        _ => unreachable!("at most two numbers"),
    };
    if interval == Some(0.0) {
        return Err(Failure("interval cannot be zero".into()));
    }
    Ok(IostatWords {
        pools: pools.to_vec(),
        interval,
        count,
    })
}

/// `zpool iostat`. With an interval, reports are printed as they come
/// (the one command that cannot return its output at the end).
fn iostat(a: IostatArgs, ctx: &Ctx) -> Result<Output, Failure> {
    let IostatWords {
        pools: names,
        interval,
        count,
    } = iostat_interval(&a.args)?;
    let style = IostatStyle {
        verbose: a.verbose,
        scripted: a.table.scripted,
        parsable: a.table.parsable,
        latency: a.latency,
        queues: a.queues,
    };
    let req = Request::ZpoolIostat(ZpoolIostat { names });
    let mut prev: Vec<PoolIostat> = Vec::new();
    let mut printed = 0u64;
    let mut first = true;
    loop {
        let now: Vec<PoolIostat> = ctx.call_as(&req)?;
        if now.is_empty() && interval.is_none() {
            return Err(Failure("no pools available".into()));
        }
        let skip = first && a.omit_since_import;
        if !skip {
            let header = printed == 0 || a.verbose;
            let text = output::iostat_report(&now, &prev, style, header);
            let Some(every) = interval else {
                return Ok(Output::stdout(text));
            };
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(|e| Failure(format!("cannot write: {e}")))?;
            printed += 1;
            if count.is_some_and(|c| printed >= c) {
                return Ok(Output::none());
            }
            std::thread::sleep(Duration::from_secs_f64(every));
        } else if let Some(every) = interval {
            std::thread::sleep(Duration::from_secs_f64(every));
        }
        first = false;
        prev = now;
    }
}

fn create(a: CreateArgs, ctx: &Ctx) -> Result<Output, Failure> {
    let vdevs = vdevspec::parse_vdev_spec(&a.vdevs, &vdevspec::resolve_device)
        .map_err(|e| Failure(e.to_string()))?;
    let layout = a.dry_run.then(|| output::create_layout(&a.pool, &vdevs));
    let req = Request::ZpoolCreate(ZpoolCreate {
        name: a.pool,
        vdevs,
        props: a.props,
        fs_props: a.fs_props,
        mountpoint: a.mountpoint,
        force: a.force,
        dry_run: a.dry_run,
    });
    ctx.call(&req)?;
    Ok(layout.map(Output::stdout).unwrap_or_default())
}

/// Parse `-o` columns for `zpool list`.
pub fn pool_columns(spec: Option<&str>) -> Result<Vec<PoolColumn>, Failure> {
    split_list(spec.unwrap_or(output::POOL_LIST_DEFAULT))
        .iter()
        .map(|c| PoolColumn::parse(c).ok_or_else(|| Failure(format!("invalid property '{c}'"))))
        .collect()
}

fn list(a: ListArgs, ctx: &Ctx) -> Result<Output, Failure> {
    let cols = pool_columns(a.columns.as_deref())?;
    let all = a.pools.is_empty();
    let rows: Vec<PoolListRow> = ctx.call_as(&Request::ZpoolList(ZpoolList { names: a.pools }))?;
    if a.json {
        return Ok(json_output(&output::pool_list_json(
            &rows,
            &cols,
            a.table.parsable,
        )));
    }
    if rows.is_empty() && all {
        return Ok(Output::stdout("no pools available\n"));
    }
    let style = a.table.style();
    Ok(Output::stdout(output::pool_list(
        &rows, &cols, style, a.verbose,
    )))
}

fn status(a: StatusArgs, ctx: &Ctx) -> Result<Output, Failure> {
    let named = !a.pools.is_empty();
    let mut pools: Vec<PoolStatus> = ctx.call_as(&Request::ZpoolStatus(ZpoolStatus {
        names: a.pools.clone(),
    }))?;
    if a.unhealthy {
        pools.retain(output::pool_needs_attention);
    }
    if a.json {
        return Ok(json_output(&output::pool_status_json(&pools)));
    }
    if pools.is_empty() {
        let text = match (a.unhealthy, named) {
            (true, true) => a
                .pools
                .iter()
                .map(|p| format!("pool '{p}' is healthy\n"))
                .collect(),
            (true, false) => "all pools are healthy\n".to_string(),
            (false, _) => "no pools available\n".to_string(),
        };
        return Ok(Output::stdout(text));
    }
    Ok(Output::stdout(output::pool_status_all(
        &pools,
        a.parsable,
        a.verbose,
        now_secs(),
    )))
}

fn attach(a: AttachArgs, replace: bool, ctx: &Ctx) -> Result<Output, Failure> {
    ctx.call(&Request::ZpoolAttach(ZpoolAttach {
        name: a.pool.clone(),
        device: device_word(&a.device),
        new_device: device_word(&a.new_device),
        force: a.force,
        replace,
    }))?;
    if a.wait {
        wait_for_scan(&[a.pool], ctx)?;
    }
    Ok(Output::none())
}

fn scrub(a: ScrubArgs, ctx: &Ctx) -> Result<Output, Failure> {
    let action = match (a.pause, a.stop) {
        (true, _) => ScrubAction::Pause,
        (_, true) => ScrubAction::Stop,
        _ => ScrubAction::Start,
    };
    let req = Request::ZpoolScrub(ZpoolScrub {
        names: a.pools.clone(),
        action,
    });
    ctx.call(&req)?;
    if a.wait && action == ScrubAction::Start {
        wait_for_scan(&a.pools, ctx)?;
    }
    Ok(Output::none())
}

/// Polls `zpool status` until no named pool is scrubbing or resilvering (a
/// paused scrub counts as done); on a terminal, draws a progress bar on
/// stderr meanwhile.
fn wait_for_scan(pools: &[String], ctx: &Ctx) -> Result<(), Failure> {
    use std::io::IsTerminal;
    let tty = std::io::stderr().is_terminal();
    loop {
        let status: Vec<PoolStatus> = ctx.call_as(&Request::ZpoolStatus(ZpoolStatus {
            names: pools.to_vec(),
        }))?;
        let running: Vec<&ScanStatus> = status
            .iter()
            .filter_map(|p| p.scan.as_ref())
            .filter(|s| s.state == ScanState::Scanning && s.pause_time.is_none())
            .collect();
        if running.is_empty() {
            if tty {
                eprint!("\r\x1b[K");
            }
            return Ok(());
        }
        if tty {
            let (done, total) = running
                .iter()
                .fold((0u64, 0u64), |(d, t), s| (d + s.issued, t + s.to_examine));
            eprint!("\r\x1b[K{}", output::progress_bar(done, total, 40));
            let _ = std::io::stderr().flush();
        }
        std::thread::sleep(std::time::Duration::from_millis(if tty {
            500
        } else {
            200
        }));
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Parse `-o` fields for `get`.
pub fn get_fields(spec: Option<&str>) -> Result<Vec<GetField>, Failure> {
    match spec {
        None => Ok(output::GET_FIELDS_DEFAULT.to_vec()),
        Some(spec) => split_list(spec)
            .iter()
            .map(|f| {
                GetField::parse(f).ok_or_else(|| {
                    Failure(format!(
                        "invalid field '{f}': expected name, property, value or source"
                    ))
                })
            })
            .collect(),
    }
}

fn get(a: GetArgs, ctx: &Ctx) -> Result<Output, Failure> {
    let fields = get_fields(a.fields.as_deref())?;
    let req = Request::ZpoolGet(ZpoolGet {
        names: a.pools,
        props: split_list(&a.props),
    });
    let rows: Vec<PropRow> = ctx.call_as(&req)?;
    if a.json {
        return Ok(json_output(&output::get_json(
            &rows,
            PropScope::Pool,
            a.table.parsable,
        )));
    }
    let style = a.table.style();
    Ok(Output::stdout(output::get_table(
        &rows,
        &fields,
        PropScope::Pool,
        style,
    )))
}

fn import(a: ImportArgs, ctx: &Ctx) -> Result<Output, Failure> {
    let dirs = if a.dirs.is_empty() {
        vec!["/dev".to_string()]
    } else {
        a.dirs
            .iter()
            .map(|d| absolute(d))
            .collect::<Result<Vec<_>, _>>()?
    };
    let Some(pool) = a.pool else {
        let pools: Vec<ImportablePool> =
            ctx.call_as(&Request::ZpoolImportScan(ZpoolImportScan { dirs }))?;
        if pools.is_empty() {
            return Ok(Output::stderr("no pools available to import\n"));
        }
        return Ok(Output::stdout(output::importable_pools(&pools)));
    };
    let req = Request::ZpoolImport(ZpoolImport {
        dirs,
        pool,
        new_name: a.new_name,
        force: a.force,
        missing_log: a.missing_log,
    });
    let report: String = ctx.call_as(&req)?;
    Ok(Output::stdout(report))
}

/// A `-d` directory made absolute against the working directory.
fn absolute(dir: &str) -> Result<String, Failure> {
    std::path::absolute(dir)
        .map(|p| p.to_string_lossy().into_owned())
        .map_err(|e| Failure(format!("cannot search '{dir}': {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn parse(args: &[&str]) -> ZpoolCommand {
        let mut argv = vec!["tarn", "zpool"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Zpool(cmd) => cmd,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn create_flags_parse_like_zpool() {
        let ZpoolCommand::Create(a) = parse(&[
            "create",
            "-f",
            "-n",
            "-o",
            "ashift=12",
            "-O",
            "compression=lz4",
            "-m",
            "/mnt/t",
            "tank",
            "mirror",
            "/a",
            "/b",
        ]) else {
            panic!("not create")
        };
        assert!(a.force && a.dry_run);
        assert_eq!(a.props, vec![("ashift".to_string(), "12".to_string())]);
        assert_eq!(
            a.fs_props,
            vec![("compression".to_string(), "lz4".to_string())]
        );
        assert_eq!(a.mountpoint.as_deref(), Some("/mnt/t"));
        assert_eq!(a.pool, "tank");
        assert_eq!(a.vdevs, vec!["mirror", "/a", "/b"]);
    }

    #[test]
    fn add_remove_detach_iostat_parse() {
        let ZpoolCommand::Add(a) = parse(&["add", "-f", "-n", "tank", "log", "mirror", "/c", "/d"])
        else {
            panic!("not add")
        };
        assert!(a.force && a.dry_run);
        assert_eq!(a.vdevs, vec!["log", "mirror", "/c", "/d"]);
        let ZpoolCommand::Remove(r) = parse(&["remove", "tank", "mirror-1"]) else {
            panic!("not remove")
        };
        assert_eq!(device_word(&r.device), "mirror-1");
        let ZpoolCommand::Offline(o) = parse(&["offline", "-t", "tank", "/a"]) else {
            panic!("offline")
        };
        assert!(o.temporary && o.device == "/a");
        let ZpoolCommand::Online(o) = parse(&["online", "-e", "tank", "/a"]) else {
            panic!("online")
        };
        assert!(o.expand);
        let ZpoolCommand::Clear(c) = parse(&["clear", "tank"]) else {
            panic!("clear")
        };
        assert!(c.device.is_none());
        assert!(matches!(
            parse(&["detach", "tank", "/a"]),
            ZpoolCommand::Detach(_)
        ));
        let ZpoolCommand::Iostat(i) = parse(&["iostat", "-vHpy", "tank", "2", "3"]) else {
            panic!("not iostat")
        };
        assert!(i.verbose && i.table.scripted && i.table.parsable && i.omit_since_import);
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let want = |pools: &[&str], interval, count| IostatWords {
            pools: words(pools),
            interval,
            count,
        };
        assert_eq!(
            iostat_interval(&i.args).unwrap(),
            want(&["tank"], Some(2.0), Some(3))
        );
        assert_eq!(
            iostat_interval(&words(&["a", "b", "0.5"])).unwrap(),
            want(&["a", "b"], Some(0.5), None)
        );
        assert_eq!(iostat_interval(&[]).unwrap(), want(&[], None, None));
        assert!(iostat_interval(&words(&["0"])).is_err());
    }

    #[test]
    fn list_get_import_flags() {
        let ZpoolCommand::List(a) = parse(&["list", "-Hp", "-o", "name,cap", "-v", "tank"]) else {
            panic!("not list")
        };
        assert!(a.table.scripted && a.table.parsable && a.verbose && !a.json);
        assert_eq!(
            pool_columns(a.columns.as_deref()).unwrap(),
            vec![PoolColumn::Name, PoolColumn::Cap]
        );
        assert!(pool_columns(Some("name,bogus")).is_err());
        let ZpoolCommand::Get(g) = parse(&["get", "-j", "size,health", "tank"]) else {
            panic!("not get")
        };
        assert!(g.json);
        assert_eq!(g.props, "size,health");
        let ZpoolCommand::Import(i) = parse(&["import", "-d", "/tmp", "-d", "/x", "tank", "new"])
        else {
            panic!("not import")
        };
        assert_eq!(i.dirs, vec!["/tmp", "/x"]);
        assert_eq!(i.pool.as_deref(), Some("tank"));
        assert_eq!(i.new_name.as_deref(), Some("new"));
    }
}
