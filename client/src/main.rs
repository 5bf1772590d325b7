//! The `snapctl` binary: a thin wrapper over the library.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use snapctl::cli::Args;
use snapctl::run::{failure, run};

fn main() -> ExitCode {
    let args = Args::parse();
    let json = args.json;
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("snapctl: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let Err(error) = rt.block_on(run(args)) else {
        return ExitCode::SUCCESS;
    };
    match failure(&error, json) {
        Some(f) => {
            eprintln!("{}", f.message);
            ExitCode::from(f.status)
        }
        None => ExitCode::SUCCESS,
    }
}
