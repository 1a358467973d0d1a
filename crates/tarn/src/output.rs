//! Output formatting, byte for byte like OpenZFS 2.x's zpool(8)/zfs(8).
//!
//! An admin's scripts parse `zpool list -H -p` and their eyes know the
//! layout of `zpool status`; both are part of the interface (practice 11).
//! Everything a command prints is built here from the protocol's result
//! types, as pure functions returning a `String`, so golden-text tests can
//! pin each layout.
//!
//! Three families of layout:
//! - tables (`zpool list`, `zfs list`, `zfs get`, `zpool get`): column width
//!   is the widest of header and cells; numbers right-aligned, text
//!   left-aligned; columns separated by two spaces; the last left-aligned
//!   column is not padded. `-H` drops the header and joins cells with tabs.
//!   zpool(8) also gives numeric columns a minimum width of 5 and HEALTH a
//!   fixed width of 8, which this module reproduces.
//! - vdev trees (`zpool status`, `zpool import`, `zpool create -n`, `zpool
//!   add -n`): a tab, two spaces of indent per level, the name padded to
//!   the widest indented name (at least 10).
//! - `zpool iostat`: OpenZFS's own layout — two header lines with group
//!   labels centred over their columns, a dashed separator, columns of
//!   width 5 (15 with `-p`) two spaces apart, a `logs` row of dashes.
//! - JSON (`-j`): the OpenZFS 2.3 shape, an `output_version` header then
//!   `pools` or `datasets` keyed by name, each property as
//!   `{"value", "source": {"type", "data"}}`.
//!
//! Values arrive in stored form (exact numbers); `-p` prints them as they
//! are, otherwise [`tarn_dsl::props::format_value`] renders them, the one
//! place that knows how each property is shown.

use serde_json::{json, Map, Value};
use tarn_dsl::props;

use crate::api::{
    DatasetRow, DestroyReport, DiffRow, HoldRow, ImportablePool, InjectHandler, MountRow,
    PoolHistory, PoolIostat, PoolListRow, PoolStatus, PropRow, ScanFunction, ScanState, ScanStatus,
    VdevClass, VdevGroup, VdevIostat, VdevKind, VdevListRow, VdevStatusNode,
};

/// How a table is printed: `-H` and `-p`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableStyle {
    /// `-H`: no header, tab-separated cells.
    pub scripted: bool,
    /// `-p`: exact numbers.
    pub parsable: bool,
}

/// One column of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub header: String,
    pub right: bool,
    pub min_width: usize,
}

impl Column {
    fn left(header: &str) -> Column {
        Column {
            header: header.to_string(),
            right: false,
            min_width: 0,
        }
    }
}

/// Render rows under columns. A row may have fewer cells than there are
/// columns (zpool list -v vdev rows have no ALTROOT).
pub fn render_table(columns: &[Column], rows: &[Vec<String>], scripted: bool) -> String {
    let mut out = String::new();
    if scripted {
        for row in rows {
            out.push_str(&row.join("\t"));
            out.push('\n');
        }
        return out;
    }
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, col)| {
            let cells = rows
                .iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count());
            cells
                .chain([col.header.len(), col.min_width])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let header: Vec<String> = columns.iter().map(|c| c.header.clone()).collect();
    for row in std::iter::once(&header).chain(rows) {
        out.push_str(&render_row(columns, &widths, row));
        out.push('\n');
    }
    out
}

fn render_row(columns: &[Column], widths: &[usize], row: &[String]) -> String {
    let mut line = String::new();
    for (i, cell) in row.iter().enumerate() {
        if i > 0 {
            line.push_str("  ");
        }
        let last = i + 1 == row.len();
        match columns.get(i) {
            Some(col) if col.right => line.push_str(&format!("{cell:>w$}", w = widths[i])),
            Some(_) if !last => line.push_str(&format!("{cell:<w$}", w = widths[i])),
            _ => line.push_str(cell),
        }
    }
    line
}

/// Whether a property's values are numbers (right-aligned in tables).
/// zfs(8) right-aligns number-typed properties (`zfs_prop_align_right`).
fn numeric_dataset_prop(name: &str) -> bool {
    name.starts_with("written@")
        || props::dataset_prop(name)
            .is_some_and(|def| matches!(def.kind, props::PropKind::Number | props::PropKind::Size))
}

// ---------------------------------------------------------------- zpool list

/// The columns `zpool list` knows, by the names `-o` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolColumn {
    Name,
    Size,
    Alloc,
    Free,
    Ckpoint,
    Expandsz,
    Frag,
    Cap,
    Dedup,
    Health,
    Altroot,
    Guid,
}

/// `zpool list`'s default columns.
pub const POOL_LIST_DEFAULT: &str = "name,size,allocated,free,checkpoint,expandsize,fragmentation,capacity,dedupratio,health,altroot";

impl PoolColumn {
    /// Parse a column name: the property name or its header abbreviation.
    pub fn parse(name: &str) -> Option<PoolColumn> {
        use PoolColumn::*;
        Some(match name.to_ascii_lowercase().as_str() {
            "name" => Name,
            "size" => Size,
            "allocated" | "alloc" => Alloc,
            "free" => Free,
            "checkpoint" | "ckpoint" => Ckpoint,
            "expandsize" | "expandsz" => Expandsz,
            "fragmentation" | "frag" => Frag,
            "capacity" | "cap" => Cap,
            "dedupratio" | "dedup" => Dedup,
            "health" => Health,
            "altroot" => Altroot,
            "guid" => Guid,
            _ => return None,
        })
    }

    /// The full property name (JSON keys).
    pub fn prop_name(self) -> &'static str {
        use PoolColumn::*;
        match self {
            Name => "name",
            Size => "size",
            Alloc => "allocated",
            Free => "free",
            Ckpoint => "checkpoint",
            Expandsz => "expandsize",
            Frag => "fragmentation",
            Cap => "capacity",
            Dedup => "dedupratio",
            Health => "health",
            Altroot => "altroot",
            Guid => "guid",
        }
    }

    fn column(self) -> Column {
        use PoolColumn::*;
        let (header, right, min_width) = match self {
            Name => ("NAME", false, 0),
            Size => ("SIZE", true, 5),
            Alloc => ("ALLOC", true, 5),
            Free => ("FREE", true, 5),
            Ckpoint => ("CKPOINT", true, 5),
            Expandsz => ("EXPANDSZ", true, 5),
            Frag => ("FRAG", true, 5),
            Cap => ("CAP", true, 5),
            Dedup => ("DEDUP", true, 5),
            Health => ("HEALTH", true, 8),
            Altroot => ("ALTROOT", false, 0),
            Guid => ("GUID", true, 5),
        };
        Column {
            header: header.to_string(),
            right,
            min_width,
        }
    }

    fn cell(self, row: &PoolListRow, parsable: bool) -> String {
        use PoolColumn::*;
        match self {
            Name => row.name.clone(),
            Size => bytes(row.size, parsable),
            Alloc => bytes(row.alloc, parsable),
            Free => bytes(row.free, parsable),
            Ckpoint => opt_bytes(row.ckpoint, parsable),
            Expandsz => opt_bytes(row.expandsz, parsable),
            Frag => percent(row.frag, parsable),
            Cap => percent(Some(row.cap), parsable),
            Dedup if parsable => format!("{:.2}", row.dedup),
            Dedup => format!("{:.2}x", row.dedup),
            Health => row.health.clone(),
            Altroot => row.altroot.clone().unwrap_or_else(|| "-".into()),
            Guid => row.guid.to_string(),
        }
    }

    /// A vdev row's cell; columns a vdev has no value for print `-`.
    fn vdev_cell(self, vdev: &VdevListRow, indent: usize, parsable: bool) -> String {
        use PoolColumn::*;
        match self {
            Name => format!("{:indent$}{}", "", vdev.name),
            Size => opt_bytes(vdev.size, parsable),
            Alloc => opt_bytes(vdev.alloc, parsable),
            Free => opt_bytes(vdev.free, parsable),
            Frag => percent(vdev.frag, parsable),
            Cap => percent(vdev.cap, parsable),
            Health => vdev.health.clone(),
            Altroot => String::new(),
            Ckpoint | Expandsz | Dedup | Guid => "-".into(),
        }
    }
}

fn bytes(n: u64, parsable: bool) -> String {
    if parsable {
        n.to_string()
    } else {
        props::nicebytes(n)
    }
}

/// Sizes that are absent or zero print as `-` (CKPOINT, EXPANDSZ).
fn opt_bytes(n: Option<u64>, parsable: bool) -> String {
    match n {
        Some(n) if n > 0 => bytes(n, parsable),
        _ => "-".into(),
    }
}

fn percent(n: Option<u8>, parsable: bool) -> String {
    match n {
        None => "-".into(),
        Some(n) if parsable => n.to_string(),
        Some(n) => format!("{n}%"),
    }
}

/// `zpool list` text. `verbose` adds the vdev rows (`-v`).
pub fn pool_list(
    rows: &[PoolListRow],
    cols: &[PoolColumn],
    style: TableStyle,
    verbose: bool,
) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let columns: Vec<Column> = cols.iter().map(|c| c.column()).collect();
    let mut cells = Vec::new();
    for row in rows {
        cells.push(cols.iter().map(|c| c.cell(row, style.parsable)).collect());
        if verbose {
            pool_list_vdevs(row, cols, style, &mut cells);
        }
    }
    render_table(&columns, &cells, style.scripted)
}

fn pool_list_vdevs(
    row: &PoolListRow,
    cols: &[PoolColumn],
    style: TableStyle,
    cells: &mut Vec<Vec<String>>,
) {
    let cols_no_altroot: Vec<PoolColumn> = cols
        .iter()
        .copied()
        .filter(|c| *c != PoolColumn::Altroot)
        .collect();
    let push_tree = |vdev: &VdevListRow, cells: &mut Vec<Vec<String>>| {
        let mut stack = vec![(vdev, 2usize)];
        while let Some((v, indent)) = stack.pop() {
            cells.push(
                cols_no_altroot
                    .iter()
                    .map(|c| c.vdev_cell(v, indent, style.parsable))
                    .collect(),
            );
            stack.extend(v.children.iter().rev().map(|c| (c, indent + 2)));
        }
    };
    for vdev in row.vdevs.iter().filter(|v| v.class == VdevClass::Normal) {
        push_tree(vdev, cells);
    }
    let logs: Vec<&VdevListRow> = row
        .vdevs
        .iter()
        .filter(|v| v.class == VdevClass::Log)
        .collect();
    if !logs.is_empty() {
        cells.push(
            cols_no_altroot
                .iter()
                .map(|c| {
                    if *c == PoolColumn::Name {
                        "logs".into()
                    } else {
                        "-".into()
                    }
                })
                .collect(),
        );
        for vdev in logs {
            push_tree(vdev, cells);
        }
    }
}

/// OpenZFS's `-j` header.
fn json_header(command: &str) -> Value {
    json!({"command": command, "vers_major": 0, "vers_minor": 1})
}

/// A property in `-j` output: its value and where it comes from.
fn json_prop(value: String, source: &str) -> Value {
    let (kind, data) = match source {
        "local" => ("LOCAL", "-".to_string()),
        "default" => ("DEFAULT", "-".to_string()),
        "temporary" => ("TEMPORARY", "-".to_string()),
        "received" => ("RECEIVED", "-".to_string()),
        s if s.starts_with("inherited from ") => {
            ("INHERITED", s["inherited from ".len()..].to_string())
        }
        _ => ("NONE", "-".to_string()),
    };
    json!({"value": value, "source": {"type": kind, "data": data}})
}

/// `zpool list -j`.
pub fn pool_list_json(rows: &[PoolListRow], cols: &[PoolColumn], parsable: bool) -> Value {
    let mut pools = Map::new();
    for row in rows {
        let mut properties = Map::new();
        for col in cols.iter().filter(|c| **c != PoolColumn::Name) {
            properties.insert(
                col.prop_name().into(),
                json_prop(col.cell(row, parsable), "-"),
            );
        }
        pools.insert(
            row.name.clone(),
            json!({
                "name": row.name,
                "type": "POOL",
                "state": row.health,
                "pool_guid": row.guid.to_string(),
                "txg": row.txg.to_string(),
                "properties": properties,
            }),
        );
    }
    json!({"output_version": json_header("zpool list"), "pools": pools})
}

// ------------------------------------------------------------ zpool status

/// Width of the NAME column of a vdev tree: the widest indented name, at
/// least 10 (OpenZFS's `max_width`).
fn tree_name_width(roots: &[&VdevStatusNode], depth: usize) -> usize {
    roots
        .iter()
        .map(|n| {
            let own = n.name.chars().count() + depth;
            let kids: Vec<&VdevStatusNode> = n.children.iter().collect();
            own.max(tree_name_width(&kids, depth + 2))
        })
        .max()
        .unwrap_or(0)
        .max(10)
}

fn status_tree(
    out: &mut String,
    node: &VdevStatusNode,
    depth: usize,
    width: usize,
    parsable: bool,
) {
    let count = |n: u64| {
        if parsable {
            n.to_string()
        } else {
            props::nicenum(n)
        }
    };
    out.push_str(&format!(
        "\t{:depth$}{:<name_w$}  {:<8} {:>5} {:>5} {:>5}",
        "",
        node.name,
        node.state,
        count(node.read),
        count(node.write),
        count(node.cksum),
        name_w = width - depth,
    ));
    if let Some(note) = &node.note {
        out.push_str("  ");
        out.push_str(note);
    }
    out.push('\n');
    for child in &node.children {
        status_tree(out, child, depth + 2, width, parsable);
    }
}

/// A labelled paragraph (`status:`, `action:`): continuation lines are
/// indented by a tab, as zpool(8) does.
fn paragraph(out: &mut String, label: &str, text: &str) {
    for (i, line) in text.lines().enumerate() {
        if i == 0 {
            out.push_str(&format!("{label:>6}: {line}\n"));
        } else {
            out.push_str(&format!("\t{line}\n"));
        }
    }
}

/// `zpool status` for one pool. `now` (Unix seconds) dates scan progress.
pub fn pool_status(pool: &PoolStatus, parsable: bool, verbose: bool, now: u64) -> String {
    let mut out = String::new();
    out.push_str(&format!("  pool: {}\n state: {}\n", pool.name, pool.state));
    if let Some(status) = &pool.status {
        paragraph(&mut out, "status", status);
    }
    if let Some(action) = &pool.action {
        paragraph(&mut out, "action", action);
    }
    if let Some(scan) = &pool.scan {
        paragraph(&mut out, "scan", &scan_text(scan, now));
    }
    out.push_str("config:\n\n");
    let width = tree_name_width(&[&pool.config], 0)
        .max(tree_name_width(&pool.logs.iter().collect::<Vec<_>>(), 2))
        .max(tree_name_width(&pool.spares.iter().collect::<Vec<_>>(), 2));
    out.push_str(&format!(
        "\t{:<width$}  {:<8} {:>5} {:>5} {:>5}\n",
        "NAME", "STATE", "READ", "WRITE", "CKSUM"
    ));
    status_tree(&mut out, &pool.config, 0, width, parsable);
    if !pool.logs.is_empty() {
        out.push_str("\tlogs\t\n");
        for log in &pool.logs {
            status_tree(&mut out, log, 2, width, parsable);
        }
    }
    if !pool.spares.is_empty() {
        // zpool(8) prints a spare's state without counters.
        out.push_str("\tspares\n");
        for spare in &pool.spares {
            out.push_str(&format!(
                "\t  {:<w$}  {:<8}",
                spare.name,
                spare.state,
                w = width - 2
            ));
            if let Some(note) = &spare.note {
                out.push_str("  ");
                out.push_str(note);
            }
            out.push('\n');
        }
    }
    out.push('\n');
    match pool.error_count {
        0 => out.push_str("errors: No known data errors\n"),
        _ if verbose => {
            out.push_str("errors: Permanent errors have been detected in the following files:\n\n");
            for e in &pool.errors {
                out.push_str(&format!("        {e}\n"));
            }
        }
        n => out.push_str(&format!("errors: {n} data errors, use '-v' for a list\n")),
    }
    out
}

/// `[=====>      ]  42.00%`: the bar of `zpool scrub -w` on a terminal.
pub fn progress_bar(done: u64, total: u64, width: usize) -> String {
    let frac = if total == 0 {
        0.0
    } else {
        (done as f64 / total as f64).clamp(0.0, 1.0)
    };
    let filled = ((frac * width as f64) as usize).min(width);
    let mut bar = "=".repeat(filled);
    if filled < width {
        bar.push('>');
        bar.push_str(&" ".repeat(width - filled - 1));
    }
    format!("[{bar}] {:6.2}%", frac * 100.0)
}

/// `zpool status` for several pools, separated by blank lines.
pub fn pool_status_all(pools: &[PoolStatus], parsable: bool, verbose: bool, now: u64) -> String {
    pools
        .iter()
        .map(|p| pool_status(p, parsable, verbose, now))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `zpool status -x` shows this pool.
pub fn pool_needs_attention(pool: &PoolStatus) -> bool {
    pool.state != "ONLINE" || pool.status.is_some() || pool.error_count > 0
}

/// The text after `scan:`, possibly several lines.
pub fn scan_text(scan: &ScanStatus, now: u64) -> String {
    let func = match scan.function {
        ScanFunction::Scrub => "scrub",
        ScanFunction::Resilver => "resilver",
    };
    let end = scan.end_time.unwrap_or(now);
    let took = duration_text(end.saturating_sub(scan.start_time));
    let errors = scan.errors;
    match (scan.state, scan.function) {
        (ScanState::Finished, ScanFunction::Scrub) => format!(
            "scrub repaired {} in {took} with {errors} errors on {}",
            props::nicebytes(scan.processed),
            ctime(end)
        ),
        (ScanState::Finished, ScanFunction::Resilver) => format!(
            "resilvered {} in {took} with {errors} errors on {}",
            props::nicebytes(scan.processed),
            ctime(end)
        ),
        (ScanState::Canceled, _) => format!("{func} canceled on {}", ctime(end)),
        (ScanState::Scanning, _) => scan_progress(scan, func, now),
    }
}

fn scan_progress(scan: &ScanStatus, func: &str, now: u64) -> String {
    // Rates over this pass (since start, resume or import), as OpenZFS.
    let pass_start = if scan.pass_start == 0 {
        scan.start_time
    } else {
        scan.pass_start
    };
    let elapsed = now.saturating_sub(pass_start).max(1);
    let pass_bytes = scan.issued.saturating_sub(scan.pass_issued);
    let examine_rate = scan.examined.saturating_sub(scan.pass_issued) / elapsed;
    let issue_rate = pass_bytes / elapsed;
    let total = scan.to_examine.max(1);
    let done_pct = (100.0 * scan.issued as f64 / total as f64).min(100.0);
    if let Some(paused) = scan.pause_time {
        return format!(
            "{func} paused since {}\n{func} started on {}\n{} / {} scanned, {} / {} issued\n{} repaired, {done_pct:.2}% done",
            ctime(paused),
            ctime(scan.start_time),
            props::nicebytes(scan.examined),
            props::nicebytes(scan.to_examine),
            props::nicebytes(scan.issued),
            props::nicebytes(scan.to_examine),
            props::nicebytes(scan.processed),
        );
    }
    let verb = if scan.function == ScanFunction::Scrub {
        "repaired"
    } else {
        "resilvered"
    };
    let left = scan.to_examine.saturating_sub(scan.issued);
    let eta = match left.checked_div(issue_rate) {
        Some(secs) => format!("{} to go", duration_text(secs)),
        None => "no estimated completion time".to_string(),
    };
    format!(
        "{func} in progress since {}\n{} / {} scanned at {}/s, {} / {} issued at {}/s\n{} {verb}, {done_pct:.2}% done, {eta}",
        ctime(scan.start_time),
        props::nicebytes(scan.examined),
        props::nicebytes(scan.to_examine),
        props::nicebytes(examine_rate),
        props::nicebytes(scan.issued),
        props::nicebytes(scan.to_examine),
        props::nicebytes(issue_rate),
        props::nicebytes(scan.processed),
    )
}

/// `HH:MM:SS`, with a day count in front past a day (OpenZFS's scan times).
pub fn duration_text(secs: u64) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let hms = format!(
        "{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    );
    match days {
        0 => hms,
        1 => format!("1 day {hms}"),
        n => format!("{n} days {hms}"),
    }
}

/// The local time of day, `HH:MM:SS` (zilstat's `time` field).
pub fn clock_time() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let t = libc::time_t::try_from(now).unwrap_or(libc::time_t::MAX);
    // SAFETY: localtime_r only writes into the `tm` we pass.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return "--:--:--".to_string();
        }
        format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
    }
}

/// Local time like ctime(3) without the newline: `Sun Jan  5 00:24:01 2025`.
pub fn ctime(secs: u64) -> String {
    let t = libc::time_t::try_from(secs).unwrap_or(libc::time_t::MAX);
    // SAFETY: localtime_r and strftime only write into the buffers we pass,
    // whose sizes we pass with them.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return secs.to_string();
        }
        let mut buf = [0u8; 64];
        let n = libc::strftime(
            buf.as_mut_ptr().cast(),
            buf.len(),
            c"%a %b %e %H:%M:%S %Y".as_ptr(),
            &tm,
        );
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }
}

/// `zpool status -j`.
pub fn pool_status_json(pools: &[PoolStatus]) -> Value {
    fn node(n: &VdevStatusNode, vdev_type: &str) -> Value {
        let mut v = json!({
            "name": n.name,
            "vdev_type": vdev_type,
            "state": n.state,
            "read_errors": n.read.to_string(),
            "write_errors": n.write.to_string(),
            "checksum_errors": n.cksum.to_string(),
        });
        if let Some(note) = &n.note {
            v["note"] = json!(note);
        }
        if !n.children.is_empty() {
            let kids: Map<String, Value> = n
                .children
                .iter()
                .map(|c| {
                    (
                        c.name.clone(),
                        node(c, vdev_type_of(&c.name, !c.children.is_empty())),
                    )
                })
                .collect();
            v["vdevs"] = Value::Object(kids);
        }
        v
    }
    let mut out = Map::new();
    for p in pools {
        let mut pool = json!({
            "name": p.name,
            "state": p.state,
            "pool_guid": p.guid.to_string(),
            "vdevs": {p.config.name.clone(): node(&p.config, "root")},
            "error_count": p.error_count.to_string(),
        });
        for (key, text) in [("status", &p.status), ("action", &p.action)] {
            if let Some(text) = text {
                pool[key] = json!(text);
            }
        }
        if let Some(scan) = &p.scan {
            pool["scan_stats"] = serde_json::to_value(scan).unwrap_or(Value::Null);
        }
        if !p.logs.is_empty() {
            let logs: Map<String, Value> = p
                .logs
                .iter()
                .map(|l| {
                    (
                        l.name.clone(),
                        node(l, vdev_type_of(&l.name, !l.children.is_empty())),
                    )
                })
                .collect();
            pool["logs"] = Value::Object(logs);
        }
        if !p.spares.is_empty() {
            let spares: Map<String, Value> = p
                .spares
                .iter()
                .map(|s| (s.name.clone(), node(s, vdev_type_of(&s.name, false))))
                .collect();
            pool["spares"] = Value::Object(spares);
        }
        out.insert(p.name.clone(), pool);
    }
    json!({"output_version": json_header("zpool status"), "pools": out})
}

/// The vdev type JSON names, from a node's name (`mirror-0`, `raidz2-1`).
fn vdev_type_of(name: &str, interior: bool) -> &'static str {
    if !interior {
        return if name.starts_with('/') {
            "file"
        } else {
            "disk"
        };
    }
    if name.starts_with("mirror") {
        "mirror"
    } else if name.starts_with("raidz") {
        "raidz"
    } else if name.starts_with("replacing") {
        "replacing"
    } else if name.starts_with("spare") {
        "spare"
    } else {
        "interior"
    }
}

// ------------------------------------------------------------ zpool import

fn import_tree(out: &mut String, node: &VdevStatusNode, depth: usize, width: usize) {
    out.push_str(&format!(
        "\t{:depth$}{:<name_w$}  {}",
        "",
        node.name,
        node.state,
        name_w = width - depth
    ));
    if let Some(note) = &node.note {
        out.push_str("  ");
        out.push_str(note);
    }
    out.push('\n');
    for child in &node.children {
        import_tree(out, child, depth + 2, width);
    }
}

/// One pool of `zpool import` (no arguments).
pub fn importable_pool(pool: &ImportablePool) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "   pool: {}\n     id: {}\n  state: {}\n",
        pool.name, pool.guid, pool.state
    ));
    let import_label = |out: &mut String, label: &str, text: &str| {
        for (i, line) in text.lines().enumerate() {
            if i == 0 {
                out.push_str(&format!("{label:>7}: {line}\n"));
            } else {
                out.push_str(&format!("\t{line}\n"));
            }
        }
    };
    if let Some(status) = &pool.status {
        import_label(&mut out, "status", status);
    }
    let default_action = "The pool can be imported using its name or numeric identifier.";
    import_label(
        &mut out,
        "action",
        pool.action.as_deref().unwrap_or(default_action),
    );
    out.push_str(" config:\n\n");
    let width = tree_name_width(&[&pool.config], 0)
        .max(tree_name_width(&pool.logs.iter().collect::<Vec<_>>(), 2));
    import_tree(&mut out, &pool.config, 0, width);
    if !pool.logs.is_empty() {
        out.push_str("\tlogs\t\n");
        for log in &pool.logs {
            import_tree(&mut out, log, 2, width);
        }
    }
    out
}

/// `zpool import` listing of every pool found, separated by blank lines.
pub fn importable_pools(pools: &[ImportablePool]) -> String {
    pools
        .iter()
        .map(importable_pool)
        .collect::<Vec<_>>()
        .join("\n")
}

// ------------------------------------------------------- zpool create -n

/// `zpool create -n`: the layout that would be created.
pub fn create_layout(pool: &str, groups: &[VdevGroup]) -> String {
    let mut out = format!("would create '{pool}' with the following layout:\n\n\t{pool}\n");
    let group = |out: &mut String, g: &VdevGroup, indent: usize| {
        let single = matches!(g.kind, VdevKind::Disk | VdevKind::Spare)
            || (g.kind == VdevKind::Log && g.devices.len() == 1);
        if single {
            out.push_str(&format!("\t{:indent$}{}\n", "", g.devices[0]));
            return;
        }
        let kind = if g.kind == VdevKind::Log {
            "mirror"
        } else {
            g.kind.as_str()
        };
        out.push_str(&format!("\t{:indent$}{kind}\n", ""));
        for d in &g.devices {
            out.push_str(&format!("\t{:w$}{d}\n", "", w = indent + 2));
        }
    };
    for g in groups.iter().filter(|g| g.is_data()) {
        group(&mut out, g, 2);
    }
    for (kind, title) in [(VdevKind::Log, "logs"), (VdevKind::Spare, "spares")] {
        let these: Vec<&VdevGroup> = groups.iter().filter(|g| g.kind == kind).collect();
        if !these.is_empty() {
            out.push_str(&format!("\t{title}\n"));
            for g in these {
                group(&mut out, g, 2);
            }
        }
    }
    out
}

// ---------------------------------------------------------- zpool add -n

/// `zpool add -n`: the pool's layout (`current`, as `zpool status` has it)
/// with the new vdevs, as OpenZFS prints it — the existing vdevs with their
/// ids (`mirror-0`), the new ones by type (`mirror`).
pub fn add_layout(current: &PoolStatus, groups: &[VdevGroup]) -> String {
    let mut out = format!(
        "would update '{}' to the following configuration:\n\n\t{}\n",
        current.name, current.name
    );
    fn node(out: &mut String, n: &VdevStatusNode, indent: usize) {
        out.push_str(&format!("\t{:indent$}{}\n", "", n.name));
        for c in &n.children {
            node(out, c, indent + 2);
        }
    }
    for n in &current.config.children {
        node(&mut out, n, 2);
    }
    let new = create_layout(&current.name, groups);
    // The new groups as `create -n` draws them, without its title lines.
    let body: Vec<&str> = new.lines().skip(3).collect();
    let logs_at = body.iter().position(|l| *l == "\tlogs");
    let (data, new_logs) = match logs_at {
        Some(i) => (&body[..i], &body[i + 1..]),
        None => (&body[..], &body[..0]),
    };
    for line in data {
        out.push_str(line);
        out.push('\n');
    }
    if !current.logs.is_empty() || !new_logs.is_empty() {
        out.push_str("\tlogs\n");
        for n in &current.logs {
            node(&mut out, n, 2);
        }
        for line in new_logs {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

// ---------------------------------------------------------- zpool iostat

/// How `zpool iostat` prints: `-v`, `-H`, `-p`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IostatStyle {
    pub verbose: bool,
    pub scripted: bool,
    pub parsable: bool,
    /// `-l`: average waits (total, disk, sync queue, async queue, scrub,
    /// trim, rebuild).
    pub latency: bool,
    /// `-q`: the queues now (pending and active, per class).
    pub queues: bool,
}

/// `-l`'s column groups and how many columns each has.
const IOSTAT_LATENCY_GROUPS: [(&str, usize); 7] = [
    ("total_wait", 2),
    ("disk_wait", 2),
    ("syncq_wait", 2),
    ("asyncq_wait", 2),
    ("scrub", 1),
    ("trim", 1),
    ("rebuild", 1),
];

/// `-q`'s column groups, two columns (pend, activ) each.
const IOSTAT_QUEUE_GROUPS: [&str; 7] = [
    "syncq_read",
    "syncq_write",
    "asyncq_read",
    "asyncq_write",
    "scrubq_read",
    "trimq_write",
    "rebuildq_write",
];

impl IostatStyle {
    /// The column groups of the header and how many columns each has.
    fn groups(self) -> Vec<(&'static str, usize)> {
        let mut g = vec![("capacity", 2), ("operations", 2), ("bandwidth", 2)];
        if self.latency {
            g.extend(IOSTAT_LATENCY_GROUPS);
        }
        if self.queues {
            g.extend(IOSTAT_QUEUE_GROUPS.iter().map(|&l| (l, 2)));
        }
        g
    }

    fn columns(self) -> usize {
        self.groups().iter().map(|g| g.1).sum()
    }
}

impl IostatStyle {
    /// Column width (OpenZFS's `default_column_width`: 15 for exact
    /// numbers, so a petabyte fits).
    fn width(self) -> usize {
        if self.parsable {
            15
        } else {
            5
        }
    }
}

/// The six numbers of one line, per second (capacity as it is), and what
/// `-l` and `-q` add.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct IostatLine {
    capacity: Option<(u64, u64)>,
    ops: [f64; 2],
    bytes: [f64; 2],
    /// Average waits in the interval, nanoseconds (`None`: no operation):
    /// total read/write, disk read/write, async write queue.
    total_wait: [Option<u64>; 2],
    disk_wait: [Option<u64>; 2],
    asyncq_write_wait: Option<u64>,
    /// Now: reads and writes at the devices, writes queued for them.
    reads_active: u64,
    writes_active: u64,
    asyncq_write_pend: u64,
}

/// The name column's width: the widest (indented) name, at least 10.
fn iostat_name_width(pools: &[PoolIostat], verbose: bool) -> usize {
    fn tree(v: &VdevIostat, depth: usize) -> usize {
        let own = v.name.chars().count() + depth;
        v.children
            .iter()
            .map(|c| tree(c, depth + 2))
            .fold(own, usize::max)
    }
    pools
        .iter()
        .map(|p| {
            let own = p.name.chars().count();
            if verbose {
                p.vdevs.iter().map(|v| tree(v, 2)).fold(own, usize::max)
            } else {
                own
            }
        })
        .fold(10, usize::max)
}

/// Rates of `now` since `prev` (same vdev one report ago), or since import.
fn iostat_rates(now: &VdevIostat, prev: Option<&VdevIostat>, secs: f64) -> IostatLine {
    let d = |n: u64, p: Option<u64>| n.saturating_sub(p.unwrap_or(0)) as f64 / secs;
    let delta = |f: fn(&VdevIostat) -> u64| f(now).saturating_sub(prev.map_or(0, f));
    let avg = |ns: u64, ops: u64| (ops > 0).then(|| ns / ops);
    let (reads, writes) = (delta(|v| v.read_ops), delta(|v| v.write_ops));
    let disk = [
        avg(delta(|v| v.disk_read_ns), reads),
        avg(delta(|v| v.disk_write_ns), writes),
    ];
    let asyncq = avg(delta(|v| v.asyncq_write_ns), delta(|v| v.asyncq_write_ops));
    IostatLine {
        capacity: now.alloc.zip(now.free),
        ops: [
            d(now.read_ops, prev.map(|p| p.read_ops)),
            d(now.write_ops, prev.map(|p| p.write_ops)),
        ],
        bytes: [
            d(now.read_bytes, prev.map(|p| p.read_bytes)),
            d(now.write_bytes, prev.map(|p| p.write_bytes)),
        ],
        // Reads wait only at the devices; a write of the txg's data
        // waits in the allocation queue first.
        total_wait: [
            disk[0],
            avg(
                delta(|v| v.disk_write_ns) + delta(|v| v.asyncq_write_ns),
                writes,
            ),
        ],
        disk_wait: disk,
        asyncq_write_wait: asyncq,
        reads_active: now.reads_active,
        writes_active: now.writes_active,
        asyncq_write_pend: now.asyncq_write_pend,
    }
}

/// The pool line: every top-level vdev's operations summed (OpenZFS's root
/// vdev), capacity of the data vdevs.
fn iostat_pool_totals(p: &PoolIostat) -> VdevIostat {
    let mut total = VdevIostat {
        name: p.name.clone(),
        alloc: Some(p.alloc),
        free: Some(p.free),
        ..VdevIostat::default()
    };
    for v in &p.vdevs {
        total.read_ops += v.read_ops;
        total.write_ops += v.write_ops;
        total.read_bytes += v.read_bytes;
        total.write_bytes += v.write_bytes;
        total.disk_read_ns += v.disk_read_ns;
        total.disk_write_ns += v.disk_write_ns;
        total.asyncq_write_ops += v.asyncq_write_ops;
        total.asyncq_write_ns += v.asyncq_write_ns;
        total.reads_active += v.reads_active;
        total.writes_active += v.writes_active;
        total.asyncq_write_pend += v.asyncq_write_pend;
    }
    total
}

fn iostat_cells(line: &IostatLine, style: IostatStyle) -> Vec<String> {
    let num = |v: u64| {
        if style.parsable {
            v.to_string()
        } else {
            props::nicenum(v)
        }
    };
    let na = if style.parsable { "0" } else { "-" };
    let mut cells = match line.capacity {
        Some((alloc, free)) => vec![num(alloc), num(free)],
        None => vec![na.to_string(), na.to_string()],
    };
    for v in line.ops.iter().chain(&line.bytes) {
        cells.push(num(*v as u64));
    }
    if style.latency {
        let time = |t: Option<u64>| match t {
            Some(ns) if style.parsable => ns.to_string(),
            Some(ns) => props::nicetime(ns),
            None => na.to_string(),
        };
        for t in line.total_wait.iter().chain(&line.disk_wait) {
            cells.push(time(*t));
        }
        // No sync-class queue: sync reads and log writes go straight to
        // the devices.
        cells.extend([time(None), time(None), time(None)]);
        cells.push(time(line.asyncq_write_wait));
        cells.extend([time(None), time(None), time(None)]);
    }
    if style.queues {
        let queues = [
            (0, line.reads_active),
            (0, 0),
            (0, 0),
            (line.asyncq_write_pend, line.writes_active),
            (0, 0),
            (0, 0),
            (0, 0),
        ];
        for (pend, activ) in queues {
            cells.push(num(pend));
            cells.push(num(activ));
        }
    }
    cells
}

fn iostat_row(
    out: &mut String,
    name: &str,
    depth: usize,
    cells: &[String],
    width: usize,
    style: IostatStyle,
) {
    if style.scripted {
        out.push_str(name);
        for c in cells {
            out.push('\t');
            out.push_str(c);
        }
    } else {
        let pad = width.saturating_sub(name.chars().count() + depth);
        out.push_str(&format!("{:depth$}{name}{:pad$}", "", ""));
        for c in cells {
            out.push_str(&format!("  {c:>w$}", w = style.width()));
        }
    }
    out.push('\n');
}

/// The two header lines and the separator (`print_iostat_header`).
fn iostat_header(out: &mut String, width: usize, style: IostatStyle) {
    let col = style.width();
    // A group label is centred over its two columns the way OpenZFS's
    // `print_iostat_labels` computes it.
    // A one-column label is right-aligned over it, and may run past it.
    out.push_str(&" ".repeat(width));
    let mut line = String::new();
    for (label, n) in style.groups() {
        let span = n * col + (n - 1) * 2;
        if n == 1 {
            line.push_str(&format!("  {label:>span$}"));
            continue;
        }
        let start = (span / 2).saturating_sub(label.len() / 2);
        let end = span.saturating_sub(start + label.len());
        line.push_str(&format!("  {:start$}{label}{:end$}", "", ""));
    }
    out.push_str(line.trim_end_matches(' '));
    if !style.latency && !style.queues {
        // zpool(8)'s plain header keeps its trailing blank.
        out.push(' ');
    }
    out.push('\n');
    out.push_str(&format!("{:<width$}", "pool"));
    let mut labels = vec!["alloc", "free", "read", "write", "read", "write"];
    if style.latency {
        labels.extend(["read", "write"].repeat(4));
        labels.extend(["wait"; 3]);
    }
    if style.queues {
        labels.extend(["pend", "activ"].repeat(7));
    }
    for label in labels {
        let start = col.saturating_sub(label.len());
        out.push_str(&format!("  {:start$}{label}", ""));
    }
    out.push('\n');
    iostat_separator(out, width, style);
}

fn iostat_separator(out: &mut String, width: usize, style: IostatStyle) {
    out.push_str(&"-".repeat(width));
    for _ in 0..style.columns() {
        out.push_str("  ");
        out.push_str(&"-".repeat(style.width()));
    }
    out.push('\n');
}

/// One `zpool iostat` report. `prev` is the previous report's data (empty
/// for the first: rates since import); `header` prints the column header
/// (zpool(8) prints it on the first report, and on every one with `-v`).
pub fn iostat_report(
    pools: &[PoolIostat],
    prev: &[PoolIostat],
    style: IostatStyle,
    header: bool,
) -> String {
    let width = iostat_name_width(pools, style.verbose);
    let mut out = String::new();
    if header && !style.scripted {
        iostat_header(&mut out, width, style);
    }
    for p in pools {
        let before = prev
            .iter()
            .find(|o| o.name == p.name && o.elapsed_ns < p.elapsed_ns);
        let ns = p.elapsed_ns - before.map_or(0, |b| b.elapsed_ns);
        let secs = (ns.max(1) as f64) / 1e9;
        let total = iostat_pool_totals(p);
        let prev_total = before.map(iostat_pool_totals);
        let line = iostat_rates(&total, prev_total.as_ref(), secs);
        iostat_row(
            &mut out,
            &p.name,
            0,
            &iostat_cells(&line, style),
            width,
            style,
        );
        if !style.verbose {
            continue;
        }
        let find = |name: &str, class: VdevClass| {
            before.and_then(|b| b.vdevs.iter().find(|v| v.name == name && v.class == class))
        };
        let rows = |out: &mut String, v: &VdevIostat| {
            let old = find(&v.name, v.class);
            let line = iostat_rates(v, old, secs);
            iostat_row(out, &v.name, 2, &iostat_cells(&line, style), width, style);
            for c in &v.children {
                let old_c = old.and_then(|o| o.children.iter().find(|x| x.name == c.name));
                let line = iostat_rates(c, old_c, secs);
                iostat_row(out, &c.name, 4, &iostat_cells(&line, style), width, style);
            }
        };
        for v in p.vdevs.iter().filter(|v| v.class == VdevClass::Normal) {
            rows(&mut out, v);
        }
        if p.vdevs.iter().any(|v| v.class == VdevClass::Log) {
            if !style.scripted {
                out.push_str(&format!("{:<width$}", "logs"));
                for _ in 0..style.columns() {
                    out.push_str(&format!("  {:>w$}", "-", w = style.width()));
                }
            }
            // zpool(8) ends the `logs` row with a newline even in scripted
            // mode, where the row itself is left out.
            out.push('\n');
            for v in p.vdevs.iter().filter(|v| v.class == VdevClass::Log) {
                rows(&mut out, v);
            }
        }
        if !style.scripted {
            iostat_separator(&mut out, width, style);
        }
    }
    out
}

// ------------------------------------------------------------ zpool history

pub fn pool_history(histories: &[PoolHistory]) -> String {
    let mut out = String::new();
    for h in histories {
        out.push_str(&format!("History for '{}':\n", h.name));
        for entry in &h.entries {
            out.push_str(entry);
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

// ------------------------------------------------------------ get (both)

/// The fields `zfs get -o` / `zpool get -o` accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetField {
    Name,
    Property,
    Value,
    Source,
}

impl GetField {
    pub fn parse(s: &str) -> Option<GetField> {
        Some(match s {
            "name" => GetField::Name,
            "property" => GetField::Property,
            "value" => GetField::Value,
            "source" => GetField::Source,
            _ => return None,
        })
    }
}

pub const GET_FIELDS_DEFAULT: [GetField; 4] = [
    GetField::Name,
    GetField::Property,
    GetField::Value,
    GetField::Source,
];

/// Which property table a `get` reads definitions from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropScope {
    Pool,
    Dataset,
}

/// A stored value as a `get` or `list` shows it. Unknown properties (user
/// properties) print as stored; an empty value prints `-`.
pub fn show_value(scope: PropScope, prop: &str, stored: &str, parsable: bool) -> String {
    if stored.is_empty() {
        return "-".into();
    }
    // `written@SNAP` shows as `written` does.
    let prop = if prop.starts_with("written@") {
        "written"
    } else {
        prop
    };
    let def = match scope {
        PropScope::Pool => props::pool_prop(prop),
        PropScope::Dataset => props::dataset_prop(prop),
    };
    match def {
        Some(def) => props::format_value(def, stored, parsable),
        None => stored.to_string(),
    }
}

/// `zfs get` / `zpool get` text.
pub fn get_table(
    rows: &[PropRow],
    fields: &[GetField],
    scope: PropScope,
    style: TableStyle,
) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let columns: Vec<Column> = fields
        .iter()
        .map(|f| {
            Column::left(match f {
                GetField::Name => "NAME",
                GetField::Property => "PROPERTY",
                GetField::Value => "VALUE",
                GetField::Source => "SOURCE",
            })
        })
        .collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            fields
                .iter()
                .map(|f| match f {
                    GetField::Name => r.name.clone(),
                    GetField::Property => r.property.clone(),
                    GetField::Value => show_value(scope, &r.property, &r.value, style.parsable),
                    GetField::Source => r.source.clone(),
                })
                .collect()
        })
        .collect();
    render_table(&columns, &cells, style.scripted)
}

/// `zfs get -j` / `zpool get -j`.
pub fn get_json(rows: &[PropRow], scope: PropScope, parsable: bool) -> Value {
    let (command, key, kind) = match scope {
        PropScope::Pool => ("zpool get", "pools", "POOL"),
        PropScope::Dataset => ("zfs get", "datasets", "FILESYSTEM"),
    };
    let mut objects = Map::new();
    for r in rows {
        let entry = objects.entry(r.name.clone()).or_insert_with(|| {
            json!({
                "name": r.name,
                "type": kind,
                "pool": r.name.split(['/', '@']).next().unwrap_or(""),
                "properties": {},
            })
        });
        let value = show_value(scope, &r.property, &r.value, parsable);
        entry["properties"][r.property.as_str()] = json_prop(value, &r.source);
    }
    if scope == PropScope::Pool {
        for v in objects.values_mut() {
            if let Some(obj) = v.as_object_mut() {
                obj.remove("pool");
            }
        }
    }
    json!({"output_version": json_header(command), key: objects})
}

// ------------------------------------------------------------- zfs list

/// `zfs list`'s default columns.
pub const DATASET_LIST_DEFAULT: &str = "name,used,available,referenced,mountpoint";

/// The header of a `zfs list` column: the property's column name, or the
/// upper-cased name of a user property.
pub fn dataset_column(prop: &str) -> Column {
    if prop == "name" {
        return Column::left("NAME");
    }
    let header = props::dataset_prop(prop)
        .map(|def| def.column.to_string())
        .unwrap_or_else(|| prop.to_ascii_uppercase());
    Column {
        header,
        right: numeric_dataset_prop(prop),
        min_width: 0,
    }
}

/// `zfs list` text.
pub fn dataset_list(rows: &[DatasetRow], cols: &[String], style: TableStyle) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let columns: Vec<Column> = cols.iter().map(|c| dataset_column(c)).collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            cols.iter()
                .map(|c| dataset_cell(r, c, style.parsable))
                .collect()
        })
        .collect();
    render_table(&columns, &cells, style.scripted)
}

/// The full property name behind a column (`avail` -> `available`).
fn full_dataset_prop(prop: &str) -> &str {
    props::dataset_prop(prop).map_or(prop, |d| d.name)
}

fn dataset_cell(row: &DatasetRow, prop: &str, parsable: bool) -> String {
    let prop = full_dataset_prop(prop);
    match prop {
        "name" => row.name.clone(),
        "type" => row.typ.clone(),
        _ => match row.props.get(prop) {
            Some(v) => show_value(PropScope::Dataset, prop, &v.value, parsable),
            None => "-".into(),
        },
    }
}

/// What `zfs destroy -v`/`-n`/`-p` print: a line per dataset or
/// snapshot, then (for snapshots) the space it releases, as zfs(8):
/// `will destroy tank@a` / `would destroy …` / `destroy<TAB>tank@a`, and
/// `will reclaim 1.5G` / `would reclaim …` / `reclaim<TAB>1610612736`.
pub fn destroy_report(r: &DestroyReport, dry_run: bool, parsable: bool) -> String {
    let mut out = String::new();
    let (verb, reclaim) = if dry_run {
        ("would destroy", "would reclaim")
    } else {
        ("will destroy", "will reclaim")
    };
    for name in &r.destroyed {
        if parsable {
            out.push_str(&format!("destroy\t{name}\n"));
        } else {
            out.push_str(&format!("{verb} {name}\n"));
        }
    }
    if r.snapshots {
        if parsable {
            out.push_str(&format!("reclaim\t{}\n", r.reclaim));
        } else {
            out.push_str(&format!("{reclaim} {}\n", props::nicebytes(r.reclaim)));
        }
    }
    out
}

/// A path as zfs(8) prints it: bytes outside printable ASCII (and `\`)
/// as `\ooo` octal, so that a name with a newline stays on one line.
fn diff_path(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    for b in p.bytes() {
        if (0x21..0x7f).contains(&b) && b != b'\\' {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\{b:04o}"));
        }
    }
    out
}

/// `zfs diff`: one line per change (`-F` type letter, `-H` tabs without
/// the rename arrow, `-t` change time first).
pub fn diff(rows: &[DiffRow], types: bool, scripted: bool, times: bool) -> String {
    let mut out = String::new();
    for r in rows {
        if times {
            out.push_str(&format!("{}.{:09}\t", r.ctime_sec, r.ctime_nsec));
        }
        out.push_str(&r.change);
        out.push('\t');
        if types {
            out.push_str(&r.kind);
            out.push('\t');
        }
        out.push_str(&diff_path(&r.path));
        if let Some(new) = &r.new_path {
            out.push_str(if scripted { "\t" } else { " -> " });
            out.push_str(&diff_path(new));
        }
        out.push('\n');
    }
    out
}

/// `zfs holds`: NAME, TAG, TIMESTAMP (`-H`: no header, tabs; `-p`:
/// seconds).
pub fn holds(rows: &[HoldRow], scripted: bool, parsable: bool) -> String {
    let columns = [
        Column::left("NAME"),
        Column::left("TAG"),
        Column::left("TIMESTAMP"),
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let time = if parsable {
                r.time.to_string()
            } else {
                ctime(r.time)
            };
            vec![r.name.clone(), r.tag.clone(), time]
        })
        .collect();
    render_table(&columns, &cells, scripted)
}

/// `zfs list -j`.
pub fn dataset_list_json(rows: &[DatasetRow], cols: &[String], parsable: bool) -> Value {
    let mut datasets = Map::new();
    for r in rows {
        let mut properties = Map::new();
        for c in cols.iter().filter(|c| *c != "name") {
            let c = full_dataset_prop(c);
            let source = r.props.get(c).map(|v| v.source.as_str()).unwrap_or("-");
            properties.insert(
                c.to_string(),
                json_prop(dataset_cell(r, c, parsable), source),
            );
        }
        datasets.insert(
            r.name.clone(),
            json!({
                "name": r.name,
                "type": r.typ.to_ascii_uppercase(),
                "pool": r.name.split(['/', '@']).next().unwrap_or(""),
                "properties": properties,
            }),
        );
    }
    json!({"output_version": json_header("zfs list"), "datasets": datasets})
}

/// `zfs mount` with no arguments: each mounted filesystem and its
/// directory, in zfs(8)'s layout (name padded to 30 columns).
pub fn mount_list(rows: &[MountRow]) -> String {
    rows.iter()
        .map(|r| format!("{:<30}  {}\n", r.name, r.mountpoint))
        .collect()
}

/// `tarn zinject` with no arguments: the handlers, one per line under a
/// header, or zinject(8)'s line when there are none.
pub fn inject_list(handlers: &[InjectHandler]) -> String {
    if handlers.is_empty() {
        return "No handlers registered.\n".to_string();
    }
    let right = |h: &str| Column {
        right: true,
        ..Column::left(h)
    };
    // zinject(8) prints the id as `%3s`.
    let columns = [
        Column {
            min_width: 3,
            ..right("ID")
        },
        Column::left("POOL"),
        Column::left("DEVICE"),
        Column::left("TYPE"),
        Column::left("ERROR"),
        right("FREQ"),
        Column::left("DELAY"),
    ];
    let rows: Vec<Vec<String>> = handlers
        .iter()
        .map(|h| {
            vec![
                h.id.to_string(),
                h.pool.clone(),
                h.device.clone(),
                h.io_type.as_str().to_string(),
                h.error.clone(),
                inject_freq(h.freq_ppm),
                inject_delay(h),
            ]
        })
        .collect();
    render_table(&columns, &rows, false)
}

/// A frequency in parts per million as the percentage `-f` took.
fn inject_freq(ppm: u32) -> String {
    format!("{}%", f64::from(ppm) / 10_000.0)
}

/// `LATENCY_MS:LANES` as `-D` took it, `-` for an error handler.
fn inject_delay(h: &InjectHandler) -> String {
    match h.delay_ms {
        Some(ms) => format!("{ms}ms:{}", h.lanes.unwrap_or(1)),
        None => "-".to_string(),
    }
}

/// What `tarn zinject -d` prints for the handler it added (zinject(8)'s
/// wording).
pub fn inject_added(h: &InjectHandler) -> String {
    let what = match h.delay_ms {
        Some(_) => format!("delay {}", inject_delay(h)),
        None => h.error.clone(),
    };
    format!(
        "Added handler {} with the following properties:\n  pool: {}\n  vdev: {}\n  \
         type: {}\n  error: {what}\n  freq: {}\n",
        h.id,
        h.pool,
        h.device,
        h.io_type.as_str(),
        inject_freq(h.freq_ppm)
    )
}

#[cfg(test)]
mod tests;
