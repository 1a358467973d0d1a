//! The command line: `tarn daemon`, `tarn zpool …`, `tarn zfs …`,
//! `tarn zinject …`.
//!
//! Each flag is defined once, in a clap derive struct, with its one-line
//! help; `--help` for every command is generated from these definitions
//! (practice 11: the CLI is documentation). Verbs, flags and their letters
//! follow zpool(8) and zfs(8) so an admin's habits carry over.
//!
//! A command turns its arguments into one [`Request`], sends it through
//! [`Client`] and renders the result with [`crate::output`]. Commands return
//! an [`Output`] (text for stdout/stderr) or a [`Failure`] (message for
//! stderr, exit status 1); they never print themselves, so they are testable.

pub mod zfs;
pub mod zilstat;
pub mod zinject;
pub mod zpool;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::api::Request;
use crate::client::{self, Client};
use crate::daemon::{install_signal_handlers, Server};
use crate::paths::Paths;

/// ZFS in user space: storage pools, datasets, and the daemon that holds them.
#[derive(Debug, Parser)]
#[command(name = "tarn", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon that holds imported pools (started automatically by any command)
    Daemon(DaemonArgs),
    /// Configure storage pools, as zpool(8)
    #[command(subcommand)]
    Zpool(zpool::ZpoolCommand),
    /// Configure datasets, as zfs(8)
    #[command(subcommand)]
    Zfs(zfs::ZfsCommand),
    /// Inject faults into a pool's devices, as zinject(8): I/O errors, checksum damage, latency
    Zinject(zinject::ZinjectArgs),
    /// Report intent log statistics, as zilstat(1): commits, records, log blocks
    Zilstat(zilstat::ZilstatArgs),
}

#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// Stay in the foreground instead of detaching (for service managers)
    #[arg(long)]
    pub foreground: bool,
    /// Socket to listen on [env: TARN_SOCKET] [default: /run/tarn/tarn.sock]
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Pool cache file [env: TARN_CACHEFILE] [default: /etc/tarn/tarn.cache]
    #[arg(long, value_name = "PATH")]
    pub cachefile: Option<PathBuf>,
}

/// What a successful command prints.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn stdout(text: impl Into<String>) -> Output {
        Output {
            stdout: text.into(),
            stderr: String::new(),
        }
    }

    pub fn stderr(text: impl Into<String>) -> Output {
        Output {
            stdout: String::new(),
            stderr: text.into(),
        }
    }

    pub fn none() -> Output {
        Output::default()
    }
}

/// A failed command: the message printed on stderr; exit status 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Failure(pub String);

/// How commands reach the daemon.
pub struct Ctx {
    pub paths: Paths,
}

impl Ctx {
    /// Send `req` (starting the daemon if needed); the result data or the
    /// daemon's error message.
    pub fn call(&self, req: &Request) -> Result<Value, Failure> {
        let mut client =
            Client::connect_or_start(&self.paths).map_err(|e| Failure(e.to_string()))?;
        let response = client.call(req).map_err(|e| Failure(e.to_string()))?;
        if response.ok {
            Ok(response.data)
        } else {
            Err(Failure(response.error.unwrap_or_else(|| {
                "the daemon reported an unnamed error".into()
            })))
        }
    }

    /// [`Ctx::call`], decoding the result as `T`.
    /// [`Ctx::call`] passing open descriptors with the request.
    pub fn call_with_fds(
        &self,
        req: &Request,
        fds: &[std::os::fd::RawFd],
    ) -> Result<Value, Failure> {
        let mut client =
            Client::connect_or_start(&self.paths).map_err(|e| Failure(e.to_string()))?;
        let response = client
            .call_with_fds(req, fds)
            .map_err(|e| Failure(e.to_string()))?;
        if response.ok {
            Ok(response.data)
        } else {
            Err(Failure(response.error.unwrap_or_else(|| {
                "the daemon reported an unnamed error".into()
            })))
        }
    }

    pub fn call_as<T: DeserializeOwned>(&self, req: &Request) -> Result<T, Failure> {
        let data = self.call(req)?;
        serde_json::from_value(data)
            .map_err(|e| Failure(format!("malformed result from tarn daemon: {e}")))
    }
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> Result<Output, Failure> {
    match cli.command {
        Command::Daemon(args) => run_daemon(args),
        Command::Zpool(cmd) => zpool::run(
            cmd,
            &Ctx {
                paths: Paths::resolve(None, None),
            },
        ),
        Command::Zfs(cmd) => zfs::run(
            cmd,
            &Ctx {
                paths: Paths::resolve(None, None),
            },
        ),
        Command::Zinject(args) => zinject::run(
            args,
            &Ctx {
                paths: Paths::resolve(None, None),
            },
        ),
        Command::Zilstat(args) => zilstat::run(
            args,
            &Ctx {
                paths: Paths::resolve(None, None),
            },
        ),
    }
}

/// Sends the warnings and errors the libraries report through `tracing`
/// (a FUSE handler that panicked, a mount option the kernel refused) to
/// the daemon's stderr, which is `<run dir>/daemon.log` when it runs in
/// the background. Without a subscriber they went nowhere.
fn log_to_stderr() {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// Caps glibc's malloc arenas before the daemon starts its threads (see
/// `limits::MALLOC_ARENAS_MAX`).
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tuning; it is called before
    // the daemon starts any thread, and each option takes any positive int.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, crate::limits::MALLOC_ARENAS_MAX);
        libc::mallopt(libc::M_MMAP_THRESHOLD, crate::limits::MALLOC_MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, crate::limits::MALLOC_TRIM_THRESHOLD);
    }
}

/// `-H` and `-p`: defined once for every command that prints a table.
#[derive(Debug, Clone, Copy, Args)]
pub struct TableFlags {
    /// Scripted mode: no header, fields separated by tabs
    #[arg(short = 'H')]
    pub scripted: bool,
    /// Print exact (parsable) numbers
    #[arg(short = 'p')]
    pub parsable: bool,
}

impl TableFlags {
    pub fn style(self) -> crate::output::TableStyle {
        crate::output::TableStyle {
            scripted: self.scripted,
            parsable: self.parsable,
        }
    }
}

fn run_daemon(args: DaemonArgs) -> Result<Output, Failure> {
    let paths = Paths::resolve(args.socket.as_deref(), args.cachefile.as_deref());
    if !args.foreground {
        if Client::connect(&paths.socket).is_ok() {
            return Err(Failure(format!(
                "tarn daemon is already running at {}",
                paths.socket.display()
            )));
        }
        client::start_daemon(&paths).map_err(|e| Failure(e.to_string()))?;
        return Ok(Output::none());
    }
    limit_malloc_arenas();
    log_to_stderr();
    let backend = std::sync::Arc::new(crate::engine::Engine::new(
        paths.cachefile.clone(),
        paths.mount_root.clone(),
        Some(paths.mounts.clone()),
        Some(paths.run_dir.join("zvol")),
    ));
    let server = Server::bind(&paths, backend).map_err(|e| Failure(format!("tarn daemon: {e}")))?;
    install_signal_handlers(&server.shutdown_handle())
        .map_err(|e| Failure(format!("tarn daemon: cannot install signal handlers: {e}")))?;
    server
        .run()
        .map_err(|e| Failure(format!("tarn daemon: {e}")))?;
    Ok(Output::none())
}

/// Parse `property=value` (for `-o`, `-O` and `set`).
pub fn parse_assign(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((prop, value)) if !prop.is_empty() => Ok((prop.to_string(), value.to_string())),
        _ => Err(format!("missing '=' for property=value argument '{s}'")),
    }
}

/// Split a comma-separated list (`-o name,size`), dropping empty items.
pub fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// Render a `-j` document as zpool(8)/zfs(8) do: one line of JSON.
pub fn json_output(value: &Value) -> Output {
    Output::stdout(format!("{value}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_flag_has_help() {
        fn walk(cmd: &clap::Command, path: &str) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                assert!(arg.get_help().is_some(), "{path} {id} has no help");
            }
            for sub in cmd.get_subcommands() {
                assert!(
                    sub.get_about().is_some(),
                    "{path} {} has no about",
                    sub.get_name()
                );
                walk(sub, &format!("{path} {}", sub.get_name()));
            }
        }
        walk(&Cli::command(), "tarn");
    }

    #[test]
    fn usage_errors_are_clap_errors() {
        let err = Cli::try_parse_from(["tarn", "zpool", "frobnicate"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        let err = Cli::try_parse_from(["tarn", "zpool", "create", "tank"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        let err = Cli::try_parse_from(["tarn", "zfs", "set", "compression=lz4"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn assignments_and_lists() {
        assert_eq!(parse_assign("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert!(parse_assign("novalue").is_err());
        assert!(parse_assign("=x").is_err());
        assert_eq!(split_list("name,,size "), vec!["name", "size"]);
    }
}
