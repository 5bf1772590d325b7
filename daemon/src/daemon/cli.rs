//! The command line of `flightrecd`, as clap parses it: here rather than in
//! `main.rs` so that its manual page, flightrecd(8), is generated from it.

use std::path::PathBuf;

use clap::Parser;

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
#[derive(Debug, Parser)]
#[command(name = "flightrecd", version)]
pub struct Args {
    /// Config file. Without it /etc/flightrec/flightrec.toml is read if it
    /// exists, else the built-in defaults apply.
    #[arg(long, value_name = "FILE", conflicts_with = "check_config")]
    pub config: Option<PathBuf>,

    /// Validate FILE (syntax, values, socket group, paths, events and their
    /// filters against the kernel), print the effective config as TOML and
    /// exit: 0 if valid, 2 if not.
    #[arg(long, value_name = "FILE")]
    pub check_config: Option<PathBuf>,
}
