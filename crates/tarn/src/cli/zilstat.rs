//! `tarn zilstat`: the intent log's counters, as OpenZFS's zilstat(1).
//!
//! ```text
//! tarn zilstat [-v] [-a | -p POOL | -d DATASET[,DATASET…]] [-f FIELD[,FIELD…]] [-s SEP] [-i INTERVAL]
//! ```
//!
//! Without `-a`, `-p` or `-d` one line sums every dataset (zilstat's
//! global counters); with them, a line per dataset. Without `-i` the
//! counters are cumulative since the pool was imported; with it, every
//! INTERVAL seconds, what changed, per second for counts and bytes.
//! `cc / cwc` is how many `fsync`s one log write served (group commit).

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use clap::Args;

use crate::api::{Request, Zilstat, ZilstatRow};
use crate::cli::{split_list, Ctx, Failure, Output};

#[derive(Debug, Args)]
pub struct ZilstatArgs {
    /// List every field with its meaning
    #[arg(short = 'v')]
    pub verbose: bool,
    /// One line per dataset of every pool
    #[arg(short = 'a', conflicts_with_all = ["pool", "datasets"])]
    pub all: bool,
    /// One line per dataset of this pool
    #[arg(short = 'p', value_name = "POOL", conflicts_with = "datasets")]
    pub pool: Option<String>,
    /// One line per named dataset (comma-separated)
    #[arg(short = 'd', value_name = "DATASET[,DATASET…]")]
    pub datasets: Option<String>,
    /// Only these fields (comma-separated; -v lists them)
    #[arg(short = 'f', value_name = "FIELD[,FIELD…]")]
    pub fields: Option<String>,
    /// Field separator [default: two spaces]
    #[arg(short = 's', value_name = "SEPARATOR")]
    pub separator: Option<String>,
    /// Print what changed every INTERVAL seconds, as rates
    #[arg(short = 'i', value_name = "INTERVAL", value_parser = parse_interval)]
    pub interval: Option<u64>,
}

fn parse_interval(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "invalid interval '{s}': a whole number of seconds, 1 or more"
        )),
    }
}

/// How a field is shown: its width, and how its number scales (1000 for
/// counts, 1024 for bytes, 100 for percentages, none for words).
#[derive(Clone, Copy)]
enum Scale {
    Word,
    Count,
    Bytes,
    Percent,
}

/// What a field is computed from.
#[derive(Clone, Copy)]
enum Source {
    Time,
    Pool,
    Dataset,
    Objset,
    /// One counter (OpenZFS's kstat name).
    Kstat(&'static str),
    /// The sum of two fields.
    Sum(&'static str, &'static str),
    /// One field as a percentage of another.
    Ratio(&'static str, &'static str),
}

struct Field {
    name: &'static str,
    width: usize,
    scale: Scale,
    source: Source,
    what: &'static str,
}

const fn f(
    name: &'static str,
    width: usize,
    scale: Scale,
    source: Source,
    what: &'static str,
) -> Field {
    Field {
        name,
        width,
        scale,
        source,
        what,
    }
}

use Scale::{Bytes, Count, Percent, Word};
use Source::{Dataset, Kstat, Objset, Pool, Ratio, Sum, Time};

/// zilstat(1)'s fields, in its order.
const FIELDS: &[Field] = &[
    f("time", 8, Word, Time, "Current time"),
    f("pool", 12, Word, Pool, "Pool name"),
    f("ds", 12, Word, Dataset, "Dataset name"),
    f("obj", 12, Word, Objset, "Objset ID"),
    f("cc", 5, Count, Kstat("zil_commit_count"), "Commit count"),
    f(
        "cwc",
        5,
        Count,
        Kstat("zil_commit_writer_count"),
        "Commit writer count",
    ),
    f(
        "cec",
        5,
        Count,
        Kstat("zil_commit_error_count"),
        "Commit error count",
    ),
    f(
        "csc",
        5,
        Count,
        Kstat("zil_commit_stall_count"),
        "Commit stall count",
    ),
    f(
        "cSc",
        5,
        Count,
        Kstat("zil_commit_suspend_count"),
        "Commit suspend count",
    ),
    f(
        "cCc",
        5,
        Count,
        Kstat("zil_commit_crash_count"),
        "Commit crash count",
    ),
    f(
        "ic",
        5,
        Count,
        Kstat("zil_itx_count"),
        "In-transaction count",
    ),
    f(
        "iic",
        5,
        Count,
        Kstat("zil_itx_indirect_count"),
        "Indirect in-transaction count",
    ),
    f(
        "iib",
        5,
        Bytes,
        Kstat("zil_itx_indirect_bytes"),
        "Indirect in-transaction bytes",
    ),
    f(
        "icc",
        5,
        Count,
        Kstat("zil_itx_copied_count"),
        "Copied in-transaction count",
    ),
    f(
        "icb",
        5,
        Bytes,
        Kstat("zil_itx_copied_bytes"),
        "Copied in-transaction bytes",
    ),
    f(
        "inc",
        5,
        Count,
        Kstat("zil_itx_needcopy_count"),
        "Needcopy in-transaction count",
    ),
    f(
        "inb",
        5,
        Bytes,
        Kstat("zil_itx_needcopy_bytes"),
        "Needcopy in-transaction bytes",
    ),
    f(
        "idc",
        5,
        Count,
        Sum("icc", "inc"),
        "Direct (copied + needcopy) count",
    ),
    f(
        "idb",
        5,
        Bytes,
        Sum("icb", "inb"),
        "Direct (copied + needcopy) bytes",
    ),
    f(
        "iwc",
        5,
        Count,
        Sum("iic", "idc"),
        "Total write (indirect + direct) count",
    ),
    f(
        "iwb",
        5,
        Bytes,
        Sum("iib", "idb"),
        "Total write (indirect + direct) bytes",
    ),
    f(
        "imnc",
        6,
        Count,
        Kstat("zil_itx_metaslab_normal_count"),
        "Normal metaslab count",
    ),
    f(
        "imnb",
        6,
        Bytes,
        Kstat("zil_itx_metaslab_normal_bytes"),
        "Normal metaslab bytes",
    ),
    f(
        "imnw",
        6,
        Bytes,
        Kstat("zil_itx_metaslab_normal_write"),
        "Normal metaslab write bytes",
    ),
    f(
        "imna",
        6,
        Bytes,
        Kstat("zil_itx_metaslab_normal_alloc"),
        "Normal metaslab alloc bytes",
    ),
    f(
        "imsc",
        6,
        Count,
        Kstat("zil_itx_metaslab_slog_count"),
        "SLOG metaslab count",
    ),
    f(
        "imsb",
        6,
        Bytes,
        Kstat("zil_itx_metaslab_slog_bytes"),
        "SLOG metaslab bytes",
    ),
    f(
        "imsw",
        6,
        Bytes,
        Kstat("zil_itx_metaslab_slog_write"),
        "SLOG metaslab write bytes",
    ),
    f(
        "imsa",
        6,
        Bytes,
        Kstat("zil_itx_metaslab_slog_alloc"),
        "SLOG metaslab alloc bytes",
    ),
    f(
        "imc",
        5,
        Count,
        Sum("imnc", "imsc"),
        "Total metaslab (normal + SLOG) count",
    ),
    f(
        "imb",
        5,
        Bytes,
        Sum("imnb", "imsb"),
        "Total metaslab (normal + SLOG) bytes",
    ),
    f(
        "imw",
        5,
        Bytes,
        Sum("imnw", "imsw"),
        "Total metaslab (normal + SLOG) write bytes",
    ),
    f(
        "ima",
        5,
        Bytes,
        Sum("imna", "imsa"),
        "Total metaslab (normal + SLOG) alloc bytes",
    ),
    f(
        "se%",
        3,
        Percent,
        Ratio("imb", "ima"),
        "Space efficiency percentage (bytes / alloc)",
    ),
    f(
        "sen%",
        4,
        Percent,
        Ratio("imnb", "imna"),
        "Normal space efficiency percentage",
    ),
    f(
        "ses%",
        4,
        Percent,
        Ratio("imsb", "imsa"),
        "SLOG space efficiency percentage",
    ),
    f(
        "te%",
        3,
        Percent,
        Ratio("imb", "imw"),
        "Total efficiency percentage (bytes / write)",
    ),
    f(
        "ten%",
        4,
        Percent,
        Ratio("imnb", "imnw"),
        "Normal total efficiency percentage",
    ),
    f(
        "tes%",
        4,
        Percent,
        Ratio("imsb", "imsw"),
        "SLOG total efficiency percentage",
    ),
];

/// zilstat's default fields per dataset, and for the global line.
const DATASET_FIELDS: &[&str] = &[
    "time", "ds", "cc", "ic", "idc", "idb", "iic", "iib", "imnc", "imnw", "imsc", "imsw",
];
const GLOBAL_FIELDS: &[&str] = &[
    "time", "cc", "ic", "idc", "idb", "iic", "iib", "imnc", "imnw", "imsc", "imsw",
];

fn field(name: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.name == name)
}

/// One line's numbers: a dataset's counters (or their sum), by kstat name.
struct Line {
    pool: String,
    dataset: String,
    objset: u64,
    counters: BTreeMap<String, u64>,
}

impl Line {
    fn number(&self, name: &str) -> u64 {
        match field(name).map(|f| f.source) {
            Some(Kstat(k)) => self.counters.get(k).copied().unwrap_or(0),
            Some(Sum(a, b)) => self.number(a) + self.number(b),
            Some(Ratio(a, b)) => (self.number(a) * 100)
                .checked_div(self.number(b))
                .unwrap_or(0),
            Some(Objset) => self.objset,
            _ => 0,
        }
    }
}

/// A number in `width` columns as zilstat prints it: plain below the
/// scale, else divided down with a suffix (one decimal below 10).
fn pretty(width: usize, scale: u64, num: u64) -> String {
    const SUFFIX: [&str; 6] = ["", "K", "M", "G", "T", "P"];
    let mut value = num as f64;
    let mut index = 0;
    let mut before = value;
    while value > scale as f64 && index < 5 {
        before = value;
        value /= scale as f64;
        index += 1;
    }
    if index == 0 {
        return format!("{:>width$}", num);
    }
    let w = width.saturating_sub(1);
    if before / (scale as f64) < 10.0 {
        format!("{value:>w$.1}{}", SUFFIX[index])
    } else {
        format!("{:>w$}{}", value as u64, SUFFIX[index])
    }
}

fn cell(line: &Line, f: &Field, per_second: Option<u64>) -> String {
    let scale = match f.scale {
        Word => {
            let text = match f.source {
                Time => crate::output::clock_time(),
                Pool => line.pool.clone(),
                Dataset => line.dataset.clone(),
                Objset => line.objset.to_string(),
                _ => String::new(),
            };
            return format!("{text:>w$}", w = f.width);
        }
        Count => 1000,
        Bytes => 1024,
        Percent => 100,
    };
    let mut n = line.number(f.name);
    if let (Some(secs), Count | Bytes) = (per_second, f.scale) {
        n /= secs;
    }
    pretty(f.width, scale, n)
}

fn header(fields: &[&'static Field], sep: &str, rates: bool) -> String {
    let mut out = String::new();
    for f in fields {
        let mut name = f.name.to_string();
        if rates && matches!(f.scale, Count | Bytes) {
            name.push_str("/s");
        }
        out.push_str(&format!("{name:>w$}{sep}", w = f.width));
    }
    out.push('\n');
    out
}

fn row(line: &Line, fields: &[&'static Field], sep: &str, per_second: Option<u64>) -> String {
    let mut out = String::new();
    for f in fields {
        out.push_str(&cell(line, f, per_second));
        out.push_str(sep);
    }
    out.push('\n');
    out
}

/// The lines to print: per dataset, or one sum of them all.
fn lines(rows: Vec<ZilstatRow>, per_dataset: bool) -> Vec<Line> {
    if per_dataset {
        return rows
            .into_iter()
            .map(|r| Line {
                pool: r.pool,
                dataset: r.dataset,
                objset: r.objset,
                counters: r.counters,
            })
            .collect();
    }
    let mut sum: BTreeMap<String, u64> = BTreeMap::new();
    for r in rows {
        for (k, v) in r.counters {
            *sum.entry(k).or_default() += v;
        }
    }
    vec![Line {
        pool: String::new(),
        dataset: String::new(),
        objset: 0,
        counters: sum,
    }]
}

/// `now` minus `before` for the same dataset (all of `now` if it is new).
fn delta(now: &[Line], before: &[Line]) -> Vec<Line> {
    now.iter()
        .map(|l| {
            let old = before
                .iter()
                .find(|b| b.pool == l.pool && b.dataset == l.dataset);
            let counters = l
                .counters
                .iter()
                .map(|(k, v)| {
                    let was = old.and_then(|o| o.counters.get(k)).copied().unwrap_or(0);
                    (k.clone(), v.saturating_sub(was))
                })
                .collect();
            Line {
                pool: l.pool.clone(),
                dataset: l.dataset.clone(),
                objset: l.objset,
                counters,
            }
        })
        .collect()
}

pub fn run(a: ZilstatArgs, ctx: &Ctx) -> Result<Output, Failure> {
    if a.verbose {
        let mut out = String::new();
        for f in FIELDS {
            out.push_str(&format!("{:>5} : {}\n", f.name, f.what));
        }
        return Ok(Output::stdout(out));
    }
    let per_dataset = a.all || a.pool.is_some() || a.datasets.is_some();
    let names: Vec<&str> = match &a.fields {
        Some(list) => {
            let list = split_list(list);
            if list.is_empty() {
                return Err(Failure("no fields given to -f".into()));
            }
            return fields_then_run(&a, ctx, per_dataset, list);
        }
        None if per_dataset => DATASET_FIELDS.to_vec(),
        None => GLOBAL_FIELDS.to_vec(),
    };
    let owned: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    fields_then_run(&a, ctx, per_dataset, owned)
}

fn fields_then_run(
    a: &ZilstatArgs,
    ctx: &Ctx,
    per_dataset: bool,
    names: Vec<String>,
) -> Result<Output, Failure> {
    let mut fields = Vec::with_capacity(names.len());
    for n in &names {
        match field(n) {
            Some(f) => fields.push(f),
            None => {
                return Err(Failure(format!(
                    "invalid field '{n}': 'tarn zilstat -v' lists the fields"
                )))
            }
        }
    }
    let sep = a.separator.clone().unwrap_or_else(|| "  ".to_string());
    let req = Request::Zilstat(Zilstat {
        pools: a.pool.iter().cloned().collect(),
        datasets: a.datasets.as_deref().map(split_list).unwrap_or_default(),
    });
    let fetch = || -> Result<Vec<Line>, Failure> {
        let rows: Vec<ZilstatRow> = ctx.call_as(&req)?;
        Ok(lines(rows, per_dataset))
    };
    let Some(every) = a.interval else {
        let mut out = header(&fields, &sep, false);
        for l in fetch()? {
            out.push_str(&row(&l, &fields, &sep, None));
        }
        return Ok(Output::stdout(out));
    };
    let mut before = fetch()?;
    let mut out = std::io::stdout().lock();
    let write = |out: &mut std::io::StdoutLock<'_>, text: &str| {
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|e| Failure(format!("cannot write: {e}")))
    };
    write(&mut out, &header(&fields, &sep, true))?;
    loop {
        std::thread::sleep(Duration::from_secs(every));
        let now = fetch()?;
        let mut text = String::new();
        for l in delta(&now, &before) {
            text.push_str(&row(&l, &fields, &sep, Some(every)));
        }
        write(&mut out, &text)?;
        before = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_scale_as_zilstat_prints_them() {
        assert_eq!(pretty(5, 1000, 0), "    0");
        assert_eq!(pretty(5, 1000, 999), "  999");
        assert_eq!(pretty(5, 1000, 1500), " 1.5K");
        assert_eq!(pretty(5, 1000, 25_000), "  25K");
        assert_eq!(pretty(6, 1024, 3 << 20), "  3.0M");
        assert_eq!(pretty(3, 100, 99), " 99");
    }

    #[test]
    fn sums_and_ratios_come_from_the_counters() {
        let counters = [
            ("zil_itx_copied_count", 3),
            ("zil_itx_indirect_count", 2),
            ("zil_itx_metaslab_slog_bytes", 50),
            ("zil_itx_metaslab_slog_write", 200),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let line = Line {
            pool: "tank".into(),
            dataset: "tank/fs".into(),
            objset: 54,
            counters,
        };
        assert_eq!(line.number("idc"), 3);
        assert_eq!(line.number("iwc"), 5);
        assert_eq!(line.number("tes%"), 25);
        assert_eq!(line.number("ten%"), 0, "nothing written: no ratio");
        let fields: Vec<&Field> = ["ds", "iwc", "obj"]
            .iter()
            .map(|n| field(n).unwrap())
            .collect();
        assert_eq!(
            header(&fields, "  ", false),
            "          ds    iwc           obj  \n"
        );
        assert_eq!(
            row(&line, &fields, ",", None),
            "     tank/fs,    5,          54,\n"
        );
    }

    #[test]
    fn every_default_field_exists() {
        for n in DATASET_FIELDS.iter().chain(GLOBAL_FIELDS) {
            assert!(field(n).is_some(), "{n}");
        }
    }
}
