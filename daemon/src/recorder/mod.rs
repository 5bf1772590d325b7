//! The recorder: the live per-CPU sample rings, the tracking drain and log,
//! and the capture that freezes the rings and copies them out as a
//! [`Capture`], the hand-off to the perf.data writer (`snapshot`).
//!
//! - [`start`]: the config's `[[event]]` tables resolved and checked against
//!   the kernel, then [`Recorder::start`];
//! - [`lifecycle`]: the [`Recorder`] itself (configure, open, stop);
//! - [`capture`]: freeze, copy and resume the rings into a [`Capture`];
//! - [`status`]: its health, as `snapctl status` shows it, with how far
//!   back the rings reach (`reach`, read without freezing them);
//! - [`maps_needed`]: which processes' maps a snapshot must carry;
//! - [`window`]: the part of the rings' past a capture keeps.

pub mod capture;
mod hotplug;
pub mod lifecycle;
pub mod maps_needed;
mod reach;
mod rings;
pub mod start;
pub mod status;
pub mod window;

use std::time::Duration;

use crate::abi::EventAttr;
use crate::tracking::modules::LoadedModule;
use crate::tracking::state::ProcessState;

pub use crate::host::HostInfo;
pub use lifecycle::{CaptureError, HistoryCheckpoint, Recorder, RecorderConfig};
pub use start::{EventInfo, StartError};
pub use status::{CpuStatus, RecorderStatus};
pub use window::SampleWindow;

/// One configured event as the kernel opened it: the attr passed to
/// `perf_event_open`, the name as the user wrote it, and the kernel id
/// (`PERF_EVENT_IOC_ID`) of each of its per-CPU fds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDescriptor {
    /// As written in the config, e.g. `sched:sched_switch`; the capture names
    /// the tracking event `dummy:HG`, as perf names its own when run as root.
    pub name: String,
    pub attr: EventAttr,
    pub ids: Vec<u64>,
    /// `(system, name)` for tracepoints: the TRACING_DATA feature needs them.
    pub tracepoint: Option<(String, String)>,
}

/// The `(system, name)` of every tracepoint event, in event order.
pub fn tracepoints_of(events: &[EventDescriptor]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for tp in events.iter().filter_map(|e| e.tracepoint.clone()) {
        if !out.contains(&tp) {
            out.push(tp);
        }
    }
    out
}

/// The records one CPU's sample ring held when it was frozen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuCapture {
    pub cpu: u32,
    /// The kernel id of the first sample event on the frozen ring (LOST
    /// records are written under it); 0 when unknown.
    pub event_id: u64,
    /// Intact records, verbatim, newest first (the order of a backward ring).
    pub records: Vec<u8>,
    pub record_count: u64,
    /// Size of the ring's data area.
    pub ring_bytes: u64,
    /// Whether the ring had wrapped (overwritten its oldest records) since
    /// the window began.
    pub wrapped: bool,
    /// Sample time of the oldest and newest records (perf clock, ns).
    pub oldest_ns: Option<u64>,
    pub newest_ns: Option<u64>,
    /// Samples the kernel dropped while the ring was paused for this capture.
    pub lost_while_paused: u64,
    /// Samples lost on this CPU since the rings were opened.
    pub lost_since_start: u64,
    /// How long the ring stayed paused (zero with the lossless freeze,
    /// which switches to a standby ring and pauses nothing).
    pub pause: Duration,
    /// Set when the walk met a record header that cannot be right; the
    /// records before it are still returned.
    pub corruption: Option<String>,
}

/// Everything a snapshot holds, before it is written.
#[derive(Debug, Clone, Default)]
pub struct Capture {
    /// Sample events then the tracking event.
    pub events: Vec<EventDescriptor>,
    pub cpus: Vec<CpuCapture>,
    /// Process state at `window_start_ns`, to synthesize COMM/MMAP2 from.
    pub processes: Vec<ProcessState>,
    /// Kernel tracking records (COMM, FORK, EXIT, MMAP2...) inside the
    /// window, verbatim, oldest first.
    pub tracking_records: Vec<u8>,
    pub tracking_record_count: u64,
    /// Tracking records the kernel dropped since start.
    pub tracking_lost: u64,
    /// Where the window starts: the oldest sample time over all CPUs, or
    /// the start asked for when the rings reach back past it.
    pub window_start_ns: u64,
    /// The oldest sample time the rings held, before the window was cut
    /// (0: they held none).
    pub held_from_ns: u64,
    /// Time inside the window that neither the history nor the rings hold
    /// (a history that stopped before the rings' oldest record).
    pub gap_ns: u64,
    /// Address of `_text` from /proc/kallsyms, for the kernel MMAP record.
    pub kernel_text: Option<u64>,
    /// Kernel modules found loaded after start (oldest first): those loaded
    /// before the window get their MMAP record at its start, the others
    /// have theirs among `tracking_records`.
    pub loaded_modules: Vec<LoadedModule>,
}
