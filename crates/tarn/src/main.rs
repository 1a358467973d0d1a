//! The `tarn` executable: parse the command line, run, map the outcome to
//! an exit status (0 success, 1 failure with the message on stderr, 2 usage
//! error — clap's own exit status for a bad command line).

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = tarn::cli::Cli::parse();
    match tarn::cli::run(cli) {
        Ok(output) => {
            // A closed pipe (`tarn zfs list | head`) is not an error worth a panic.
            let _ = std::io::stdout().write_all(output.stdout.as_bytes());
            let _ = std::io::stderr().write_all(output.stderr.as_bytes());
            ExitCode::SUCCESS
        }
        Err(failure) => {
            let _ = writeln!(std::io::stderr(), "{failure}");
            ExitCode::from(1)
        }
    }
}
