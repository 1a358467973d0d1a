//! `tarn zinject`: fault injection, as OpenZFS's zinject(8) device faults.
//!
//! ```text
//! tarn zinject                                   list the handlers
//! tarn zinject -d DEVICE [-e io|checksum|nxio] [-T read|write|flush|all] [-f PERCENT] POOL
//! tarn zinject -d DEVICE -D LATENCY_MS[:LANES] [-T TYPE] [-f PERCENT] POOL
//! tarn zinject -c ID|all                         clear handlers
//! ```
//!
//! For rehearsing failures on a scratch pool and for tests: handlers live
//! in the daemon's memory only. What each fault does is described in
//! `tarn_vdev::inject`; the daemon validates the combination.

use clap::Args;

use crate::api::{
    InjectError, InjectHandler, InjectIoType, Request, ZinjectAdd, ZinjectClear, ZinjectList,
};
use crate::cli::zpool::device_word;
use crate::cli::{Ctx, Failure, Output};
use crate::output;

#[derive(Debug, Args)]
pub struct ZinjectArgs {
    /// Inject into this device (a leaf, named as 'zpool status' shows it)
    #[arg(short = 'd', value_name = "DEVICE", requires = "pool")]
    pub device: Option<String>,
    /// Error to inject: io (EIO), checksum (damaged reads), nxio (device gone) [default: io]
    #[arg(short = 'e', value_name = "ERROR", value_parser = parse_error, requires = "device")]
    pub error: Option<InjectError>,
    /// I/O to inject into: read, write, flush or all [default: all]
    #[arg(short = 'T', value_name = "TYPE", value_parser = parse_io_type, requires = "device")]
    pub io_type: Option<InjectIoType>,
    /// Percentage of I/Os to fault (of blocks, for checksum), 0.0001 to 100 [default: 100]
    #[arg(short = 'f', value_name = "FREQUENCY", requires = "device")]
    pub frequency: Option<f64>,
    /// Add latency to every I/O instead of an error; LANES I/Os are delayed at once [default lanes: 1]
    #[arg(short = 'D', value_name = "LATENCY_MS[:LANES]", value_parser = parse_delay,
          requires = "device", conflicts_with = "error")]
    pub delay: Option<(u64, Option<u32>)>,
    /// Clear handler ID, or all handlers
    #[arg(short = 'c', value_name = "ID|all", value_parser = parse_clear,
          conflicts_with_all = ["device", "error", "io_type", "frequency", "delay", "pool"])]
    pub clear: Option<Clear>,
    /// Pool holding the device
    #[arg(value_name = "POOL", requires = "device")]
    pub pool: Option<String>,
}

/// What `-c` clears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clear {
    All,
    Id(u64),
}

fn one_of<T: Copy>(all: &[T], name: fn(T) -> &'static str, s: &str) -> Result<T, String> {
    all.iter().copied().find(|&v| name(v) == s).ok_or_else(|| {
        let names: Vec<&str> = all.iter().map(|&v| name(v)).collect();
        format!("expected one of: {}", names.join(", "))
    })
}

fn parse_error(s: &str) -> Result<InjectError, String> {
    one_of(&InjectError::ALL, InjectError::as_str, s)
}

fn parse_io_type(s: &str) -> Result<InjectIoType, String> {
    one_of(&InjectIoType::ALL, InjectIoType::as_str, s)
}

/// `LATENCY_MS[:LANES]`; the daemon checks the ranges.
fn parse_delay(s: &str) -> Result<(u64, Option<u32>), String> {
    let bad = || "expected LATENCY_MS[:LANES] in whole numbers, e.g. 25 or 25:4".to_string();
    let (ms, lanes) = match s.split_once(':') {
        Some((ms, lanes)) => (ms, Some(lanes.parse::<u32>().map_err(|_| bad())?)),
        None => (s, None),
    };
    Ok((ms.parse::<u64>().map_err(|_| bad())?, lanes))
}

/// `all` or a handler id.
fn parse_clear(s: &str) -> Result<Clear, String> {
    if s == "all" {
        return Ok(Clear::All);
    }
    s.parse::<u64>()
        .map(Clear::Id)
        .map_err(|_| "expected a handler id (a number) or 'all'".to_string())
}

pub fn run(a: ZinjectArgs, ctx: &Ctx) -> Result<Output, Failure> {
    if let Some(clear) = a.clear {
        let id = match clear {
            Clear::All => None,
            Clear::Id(id) => Some(id),
        };
        let removed: u64 = ctx.call_as(&Request::ZinjectClear(ZinjectClear { id }))?;
        return Ok(Output::stdout(match id {
            Some(id) => format!("removed handler {id}\n"),
            None if removed == 0 => "no handlers registered\n".to_string(),
            None => "removed all registered handlers\n".to_string(),
        }));
    }
    let (Some(device), Some(pool)) = (a.device, a.pool) else {
        let handlers: Vec<InjectHandler> = ctx.call_as(&Request::ZinjectList(ZinjectList {}))?;
        return Ok(Output::stdout(output::inject_list(&handlers)));
    };
    let (delay_ms, lanes) = a.delay.unzip();
    let req = Request::ZinjectAdd(ZinjectAdd {
        pool,
        device: device_word(&device),
        error: a.error,
        io_type: a.io_type,
        frequency: a.frequency,
        delay_ms,
        lanes: lanes.flatten(),
    });
    let added: InjectHandler = ctx.call_as(&req)?;
    Ok(Output::stdout(output::inject_added(&added)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn parse(args: &[&str]) -> Result<ZinjectArgs, clap::Error> {
        let mut argv = vec!["tarn", "zinject"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).map(|cli| match cli.command {
            Command::Zinject(a) => a,
            other => panic!("parsed as {other:?}"),
        })
    }

    #[test]
    fn flags_parse_like_zinject() {
        let a = parse(&[
            "-d", "sdb", "-e", "checksum", "-T", "read", "-f", "2.5", "tank",
        ])
        .unwrap();
        assert_eq!(a.device.as_deref(), Some("sdb"));
        assert_eq!(a.error, Some(InjectError::Checksum));
        assert_eq!(a.io_type, Some(InjectIoType::Read));
        assert_eq!(a.frequency, Some(2.5));
        assert_eq!(a.pool.as_deref(), Some("tank"));
        let a = parse(&["-d", "/a", "-D", "25:4", "tank"]).unwrap();
        assert_eq!(a.delay, Some((25, Some(4))));
        assert_eq!(
            parse(&["-d", "/a", "-D", "7", "t"]).unwrap().delay,
            Some((7, None))
        );
        assert_eq!(parse(&["-c", "all"]).unwrap().clear, Some(Clear::All));
        assert_eq!(parse(&["-c", "12"]).unwrap().clear, Some(Clear::Id(12)));
        let none = parse(&[]).unwrap();
        assert!(none.device.is_none() && none.clear.is_none());
    }

    #[test]
    fn bad_words_and_combinations_are_usage_errors() {
        for bad in [
            &["-d", "sdb", "-e", "bogus", "tank"][..],
            &["-d", "sdb", "-T", "sideways", "tank"],
            &["-d", "sdb", "-D", "fast", "tank"],
            &["-d", "sdb", "-D", "5:x", "tank"],
            &["-d", "sdb", "-e", "io", "-D", "5", "tank"],
            &["-c", "seven"],
            &["-c", "1", "-d", "sdb", "tank"],
            &["-d", "sdb"],
            &["tank"],
            &["-e", "io"],
        ] {
            let err = parse(bad).err().unwrap_or_else(|| panic!("{bad:?} parsed"));
            assert_eq!(err.exit_code(), 2, "{bad:?}");
        }
        let err = parse(&["-d", "sdb", "-e", "bogus", "tank"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("expected one of: io, checksum, nxio"), "{err}");
    }
}
