//! The daemon's ring walks and the ABI they read, compiled on their own.
//!
//! They are pure (no syscalls; the ABI and the record walker come from the
//! `flightrec-perfdata` crate, itself pure), so the fuzz build includes the
//! walks' source rather than the whole daemon crate: that keeps tokio,
//! tonic and the rest of the daemon out of every sanitizer build. If `ring`
//! ever uses another daemon module, include it here too.

pub use flightrec_perfdata::abi;

#[path = "../../src/ring/mod.rs"]
pub mod ring;
