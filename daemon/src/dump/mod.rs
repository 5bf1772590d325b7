//! A dump, from request to file, in one place.
//!
//! The path, in the order the data takes it:
//! - [`request`]: what asks for a dump (a [`Trigger`]: a signal, the Dump
//!   RPC, a condition, a fleet request) and the caller waiting for it;
//! - [`window`]: the window asked for, resolved against the wall clock,
//!   which windows one file can hold, and what a file holds of it;
//! - [`queue`]: which triggers share a dump and when it starts (pure);
//! - `thread`: the dump thread (SCHED_FIFO until the rings are frozen):
//!   it freezes the rings at the moment a batch is due and writes what the
//!   rings hold; a window older than the rings goes to
//! - `history_lane`: its own thread, where a window is cut from the
//!   history's segments a frame at a time while the rings go on being
//!   frozen and written on time;
//! - `write`: a capture, or a window cut from the history, into the
//!   store: name and sidecar, the file, retention, Watch;
//! - [`spec`]: what a group of triggers asks of its file;
//! - [`scope`]: a dump of one service or container, and the containers a
//!   snapshot holds;
//! - [`outcome`] and [`error`]: what the caller gets back.

pub mod error;
mod history_lane;
pub mod outcome;
pub mod queue;
pub mod request;
mod retention;
pub mod scope;
pub mod spec;
mod thread;
pub mod window;
mod write;

use std::sync::Arc;

use crate::history::History;
use crate::recorder::Recorder;
use crate::runtimes::RuntimeNames;
use crate::store::{RetentionPolicy, Store};

pub use error::DumpError;
pub use outcome::{CpuWritten, DumpDone, DumpOutput, DumpTimings};
pub use queue::Timing;
pub use request::{Answer, DumpRequest, Served, Trigger, TriggerKind, Waiter};
pub use retention::apply_retention;
pub use scope::Scope;
pub use thread::{DumpThreads, Dumps, start};
pub use window::{HeldWindow, WallWindow, WindowRequest};

/// Test builds only (the `testing` feature, never the release binary): a
/// dump with this label hangs the dump thread for good, so a test can see
/// the systemd watchdog restart the daemon.
#[cfg(feature = "testing")]
pub const HANG_DUMP_LABEL: &str = "testing-hang-dump-thread";

/// What a dump needs of the daemon as it is when the dump starts (a
/// reload may replace the recorder, the store and the settings).
pub struct Setup {
    pub recorder: Arc<Recorder>,
    pub store: Arc<Store>,
    /// With `[history]` on.
    pub history: Option<Arc<History>>,
    /// `[snapshot] compression = "zstd"`: what a trigger that does not say
    /// gets.
    pub compress_by_default: bool,
    pub level: i32,
    pub retention: RetentionPolicy,
    /// `[snapshot] writer_nice`: the dump thread's nice while it writes.
    pub writer_nice: i32,
    /// Containers' names from their runtimes.
    pub names: Option<Arc<RuntimeNames>>,
}

/// Told of every snapshot written, with the kinds of trigger it served.
pub type OnWritten = Box<dyn Fn(&DumpDone, &[TriggerKind]) + Send + Sync>;

/// Where the pipeline gets its [`Setup`] (None once the daemon is going
/// away) and whom it tells of every snapshot written (the control plane
/// credits its conditions and wakes the upload queue).
pub struct Hooks {
    pub setup: Box<dyn Fn() -> Option<Setup> + Send + Sync>,
    pub written: OnWritten,
}
