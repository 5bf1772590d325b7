//! The daemon's ring walks and the ABI they read, compiled on their own.
//!
//! They are pure (no syscalls, no dependencies beyond thiserror and the
//! perf-event-open-sys bindings the ABI takes its layout from), so the
//! fuzz build includes their source rather than the whole daemon crate:
//! that keeps tokio, tonic and the rest of the daemon out of every
//! sanitizer build. If `ring` ever uses another daemon module, include it
//! here too.

#[path = "../../src/abi/mod.rs"]
pub mod abi;

#[path = "../../src/ring/mod.rs"]
pub mod ring;
