//! The `flightrecd` binary: a thin wrapper over the library.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use flightrec_config::{DEFAULT_CONFIG_PATH, LoadedConfig};
use flightrecd::control::config::{ConfigSource, check_config};
use flightrecd::daemon;

/// flightrec daemon: keeps the recent past of the kernel in per-CPU perf
/// rings and writes snapshots that `perf script -i` reads on demand
/// (`snapctl dump`, SIGUSR2).
///
/// Runs in the foreground and logs to stderr; systemd starts it as a
/// Type=notify service. Signals: SIGUSR2 dump, SIGHUP reload the config,
/// SIGTERM/SIGINT finish a dump under way and exit.
///
/// Exit status: 0 clean shutdown (or a valid config with --check-config),
/// 1 runtime failure, 2 bad config (the message names file, line and column).
#[derive(Parser)]
#[command(name = "flightrecd", version)]
struct Args {
    /// Config file. Without it /etc/flightrec/flightrec.toml is read if it
    /// exists, else the built-in defaults apply.
    #[arg(long, value_name = "FILE", conflicts_with = "check_config")]
    config: Option<PathBuf>,

    /// Validate FILE (syntax, values, socket group, paths, events and their
    /// filters against the kernel), print the effective config as TOML and
    /// exit: 0 if valid, 2 if not.
    #[arg(long, value_name = "FILE")]
    check_config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(path) = args.check_config {
        let checked = LoadedConfig::load(&path).and_then(|loaded| check_config(&loaded));
        return match checked {
            Ok(effective) => {
                print!("{}", effective.to_toml());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("flightrecd: {e}");
                ExitCode::from(2)
            }
        };
    }
    let source = match args.config {
        Some(path) => ConfigSource {
            path,
            explicit: true,
        },
        None => ConfigSource {
            path: DEFAULT_CONFIG_PATH.into(),
            explicit: false,
        },
    };
    let loaded = match source.load() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("flightrecd: {e}");
            return ExitCode::from(2);
        }
    };
    match daemon::run(source, loaded) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flightrecd: {e}");
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
        }
    }
}
