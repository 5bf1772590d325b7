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
//! - [`tap`]: the records as a stream, for the history ([`RecordTap`]).

pub mod capture;
mod forget;
mod hotplug;
pub mod lifecycle;
pub mod maps_needed;
mod reach;
mod rings;
pub mod start;
pub mod status;
pub mod tap;

use std::time::Duration;

use crate::abi::EventAttr;
use crate::abi::layout::{RecordLayouts, SampleLayout};
use crate::ring::filter::{Kept, RecordFilter, TimeRange};
use crate::time::SampleTime;
use crate::tracking::modules::LoadedModule;
use crate::tracking::state::ProcessState;

pub use crate::host::HostInfo;
pub use forget::FORGET_EXITED_EVERY;
pub use lifecycle::{CaptureError, MapsNow, Recorder, RecorderConfig};
pub use start::{EventInfo, StartError};
pub use status::{CpuLosses, CpuStatus, RecorderStatus};
pub use tap::{Checkpoint, RecordTap};

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

/// How to read the records of `events` (by the ids they carry).
pub fn layouts_of(events: &[EventDescriptor]) -> RecordLayouts {
    RecordLayouts::of_events(events.iter().map(|e| {
        let layout = SampleLayout::new(e.attr.sample_type).with_user_regs(e.attr.sample_regs_user);
        (&e.ids[..], layout)
    }))
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

/// The records one CPU's sample ring held when it was frozen (or those of
/// its CPU a window cut from the history holds).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuCapture {
    pub cpu: u32,
    /// The kernel id of the first sample event on the frozen ring (LOST
    /// records are written under it); None when unknown.
    pub event_id: Option<u64>,
    /// Whole records, verbatim, in no promised time order (a backward
    /// ring gives its newest first, a history frame its oldest first):
    /// perf sorts a file without FINISHED_ROUND records by time, and
    /// nothing else here depends on their order.
    pub records: Vec<u8>,
    /// How many `records` holds, and its oldest and newest record time:
    /// always those of `records` (see [`CpuCapture::keep`]).
    pub record_count: u64,
    pub oldest: Option<SampleTime>,
    pub newest: Option<SampleTime>,
    /// Size of the ring's data area (0 for a CPU the rings did not give).
    pub ring_bytes: u64,
    /// Whether the ring had wrapped (overwritten its oldest records) since
    /// the window began.
    pub wrapped: bool,
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

impl CpuCapture {
    /// Keeps the records `filter` keeps, and counts and spans them again:
    /// the one way a CPU's records change, so the figures stay theirs.
    pub fn keep(&mut self, filter: &RecordFilter) -> Kept {
        let kept = filter.retain(&mut self.records);
        self.set_figures(&kept);
        kept
    }

    fn set_figures(&mut self, kept: &Kept) {
        self.record_count = kept.count;
        self.oldest = kept.oldest;
        self.newest = kept.newest;
    }
}

/// Everything a snapshot holds, before it is written.
#[derive(Debug, Clone, Default)]
pub struct Capture {
    /// Sample events then the tracking event.
    pub events: Vec<EventDescriptor>,
    pub cpus: Vec<CpuCapture>,
    /// Process state at `window_start`, to synthesize COMM/MMAP2 from.
    pub processes: Vec<ProcessState>,
    /// Kernel tracking records (COMM, FORK, EXIT, MMAP2...) from the
    /// window's start, verbatim, oldest first.
    pub tracking_records: Vec<u8>,
    pub tracking_record_count: u64,
    /// Tracking records the kernel dropped since start.
    pub tracking_lost: u64,
    /// Where the window starts: the oldest sample time held, or the start
    /// asked for when the rings reach back past it. None: nothing held.
    pub window_start: Option<SampleTime>,
    /// The oldest sample time the rings held when frozen, before any cut.
    pub held_from: Option<SampleTime>,
    /// Address of `_text` from /proc/kallsyms, for the kernel MMAP record.
    pub kernel_text: Option<u64>,
    /// Kernel modules found loaded after start (oldest first): those loaded
    /// before the window get their MMAP record at its start, the others
    /// have theirs among `tracking_records`.
    pub loaded_modules: Vec<LoadedModule>,
    /// Every cgroup known, by id (empty when cgroup ids are not recorded):
    /// a CGROUP record each at the window's start names them in the file.
    pub cgroups: Vec<(u64, std::sync::Arc<str>)>,
}

impl Capture {
    /// How to read this capture's records.
    pub fn layouts(&self) -> RecordLayouts {
        layouts_of(&self.events)
    }

    /// Keeps only the samples inside `range` (the tracking records and
    /// the state at the window's start stay: records before the start only
    /// name what the samples need). The window then starts at the later of
    /// the range's start and the oldest record held.
    pub fn cut(&mut self, range: TimeRange) {
        if range.is_all() {
            return;
        }
        let layouts = self.layouts();
        let filter = RecordFilter::in_range(&layouts, range);
        for cpu in &mut self.cpus {
            cpu.keep(&filter);
        }
        self.window_start = match (range.start, self.held_from) {
            (Some(s), Some(h)) => Some(s.max(h)),
            (s, h) => h.or(s),
        };
    }

    /// Samples over every CPU, with their span.
    pub fn span(&self) -> (Option<SampleTime>, Option<SampleTime>) {
        let oldest = self.cpus.iter().filter_map(|c| c.oldest).min();
        let newest = self.cpus.iter().filter_map(|c| c.newest).max();
        (oldest, newest)
    }
}
