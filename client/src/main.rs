//! The `snapctl` binary: a thin wrapper over the library.

use clap::Parser;

/// flightrec client (not built yet: only --version works).
#[derive(Parser)]
#[command(name = "snapctl", version)]
struct Args {}

fn main() {
    let _ = Args::parse();
    eprintln!("snapctl: not built yet");
    std::process::exit(1);
}
