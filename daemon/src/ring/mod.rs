//! Pure walks over ring-buffer bytes: no syscalls, no `unsafe`.
//!
//! Everything here takes byte slices and positions, so it is tested without a
//! kernel and the kernel tests prove the same functions on live rings:
//! - [`backward`]: find the intact records of a kernel `write_backward`
//!   overwrite ring and copy them out (the sample rings).
//! - [`size_at_end`]: the daemon's own overwrite ring whose records carry a
//!   trailing size, walked backward from the newest (the tracking log).
//! - [`records`]: iterate records laid out one after another, as
//!   [`backward::copy_range`] leaves them. It is the one walk over linear
//!   records: the snapshot writer's intact lengths, compression groups and
//!   sample counts are all made with it.
//!
//! - [`follow`]: the records a live backward ring published since the
//!   last look, for a reader that streams them (the history).
//! - [`filter`]: which of such records to keep (by time and event) and
//!   what the kept ones are: the one filter every window is cut with.
//!
//! All of them validate every header they read with the same rules and report
//! what they cannot trust as a [`Corruption`] instead of panicking.

pub mod backward;
pub mod filter;
pub mod follow;
pub mod size_at_end;
mod wrap;

pub use flightrec_perfdata::records::{Corruption, CorruptionReason, Records, records};
