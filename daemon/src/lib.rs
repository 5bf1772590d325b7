//! flightrecd: a flight recorder for Linux on per-CPU perf_event rings.
//!
//! The modules follow the data flow (ARCHITECTURE.md has the details):
//! [`perf`] (the only module that talks to the kernel, the only `unsafe`) →
//! [`ring`] (pure walks over ring bytes) → [`host`] (what is read from the
//! machine: host facts, clock, modules, tracefs formats) → [`tracking`] (tracking drain,
//! tracking log, process table) → [`recorder`] (the live rings and the
//! capture) → [`snapshot`] (the perf.data writer and output file) →
//! [`history`] (the look-back kept on disk) → [`store`] (naming, listing, retention) → [`triggers`] (the dump queue and
//! the signal thread) → [`control`] (state and the one dispatcher) →
//! [`api`] (gRPC) → [`daemon`] (start-up and shutdown). [`abi`] holds the
//! kernel's perf ABI as plain data, shared by all of them, and
//! [`log_limit`] the rate limit of the warnings clients can provoke.

#![deny(unsafe_code)]

pub use flightrec_perfdata::abi;
pub mod api;
pub mod control;
pub mod daemon;
pub mod fleet;
pub mod history;
pub mod host;
pub mod log_limit;
pub mod perf;
pub mod recorder;
pub mod ring;
pub mod snapshot;
pub mod store;
pub mod tracking;
pub mod triggers;
