//! The `flightrecd` binary: a thin wrapper over the library.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use flightrec_config::{DEFAULT_CONFIG_PATH, LoadedConfig};
use flightrecd::control::config::{ConfigSource, check_config};
use flightrecd::daemon;
use flightrecd::daemon::cli::Args;

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
    // Before any thread: a dump's large buffers go back to the kernel.
    flightrecd::perf::heap::map_large_blocks_apart();
    match daemon::run(source, loaded) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flightrecd: {e}");
            if let Some(hint) = daemon::read_only_hint(&e) {
                eprintln!("flightrecd: {hint}");
            }
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
        }
    }
}
