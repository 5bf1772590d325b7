//! flightrecd: a flight recorder for Linux on per-CPU perf_event rings.
//!
//! The modules follow the data flow (ARCHITECTURE.md has the details):
//! [`perf`] (the only module that talks to the kernel, the only `unsafe`) →
//! [`ring`] (pure walks over ring bytes) → [`host`] (what is read from the
//! machine: host facts, clock, modules, tracefs formats) → [`tracking`] (tracking drain,
//! tracking log, process table) → [`recorder`] (the live rings and the
//! capture) → [`snapshot`] (the perf.data writer and output file) →
//! [`history`] (the look-back kept on disk) → [`store`] (naming, listing,
//! retention) → [`events`] (what Watch streams) → [`dump`] (a dump from
//! request to file: queue, freeze, cut, write) → [`control`] (the running
//! parts and their typed operations) → [`api`] (gRPC), [`fleet`] (NATS) →
//! [`daemon`] (start-up and shutdown). Beside them, low: [`triggers`] (the
//! signal thread and the `[[trigger]]` conditions), [`time`] (the two
//! clocks' instants as types), [`abi`] (the kernel's perf ABI as plain
//! data) and [`log_limit`] (the rate limit of the warnings clients can
//! provoke). `tests/tests/layers.rs` holds each module to the modules it
//! may use.

#![deny(unsafe_code)]

pub use flightrec_perfdata::abi;
pub mod api;
pub mod control;
pub mod daemon;
pub mod dump;
pub mod events;
pub mod fleet;
pub mod history;
pub mod host;
pub mod log_limit;
pub mod perf;
pub mod recorder;
pub mod ring;
pub mod runtimes;
pub mod snapshot;
pub mod store;
pub mod time;
pub mod tracking;
pub mod triggers;
