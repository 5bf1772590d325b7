//! The `flightrecd` binary: a thin wrapper over the library.

use clap::Parser;

/// flightrec daemon (not built yet: only --version works).
#[derive(Parser)]
#[command(name = "flightrecd", version)]
struct Args {}

fn main() {
    let _ = Args::parse();
    eprintln!("flightrecd: the daemon is not built yet");
    std::process::exit(1);
}
