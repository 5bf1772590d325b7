//! Snapshots: the capture taken from frozen rings and what the perf.data
//! writer turns it into.
//!
//! [`Capture`] is the hand-off between the capture (kernel side) and the
//! writer (pure): everything a self-contained perf.data file needs.
//!
//! The writer, in data-flow order:
//! - [`host`]: the host facts and tracefs formats, gathered once
//!   ([`HostInfo::gather`]) and cached;
//! - [`synth`]: records made up for the window's start and the losses;
//! - [`features`]: the feature sections (TRACING_DATA, EVENT_DESC, ...);
//! - [`compress`]: zstd packing into PERF_RECORD_COMPRESSED, in parallel;
//! - [`perfdata`]: the encoder, [`perfdata::write_perf_data`] (pure);
//! - [`reader`]: reading a written snapshot back, to compress it later;
//! - [`output`]: the file on disk (temporary name, mmap'ed chunks, fsync,
//!   atomic rename): [`output::write_snapshot`] and
//!   [`output::compress_snapshot`].

pub mod capture;

use std::sync::Arc;
use std::time::Duration;

use crate::abi::EventAttr;

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

/// The records one CPU's sample ring held when it was frozen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuCapture {
    pub cpu: u32,
    /// Intact records, verbatim, newest first (the order of a backward ring).
    pub records: Vec<u8>,
    pub record_count: u64,
    /// Size of the ring's data area.
    pub ring_bytes: u64,
    /// Whether the ring had wrapped (overwritten its oldest records).
    pub wrapped: bool,
    /// Sample time of the oldest and newest records (perf clock, ns).
    pub oldest_ns: Option<u64>,
    pub newest_ns: Option<u64>,
    /// Samples the kernel dropped while the ring was paused for this capture.
    pub lost_while_paused: u64,
    /// Samples lost on this CPU since the rings were opened.
    pub lost_since_start: u64,
    /// How long the ring stayed paused.
    pub pause: Duration,
    /// Set when the walk met a record header that cannot be right; the
    /// records before it are still returned.
    pub corruption: Option<String>,
}

/// One mapping of a process, as an MMAP2 record describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MapState {
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
    pub ino_generation: u64,
    pub prot: u32,
    pub flags: u32,
    /// Shared: every copy of a map names the same string.
    pub filename: Arc<str>,
}

/// A thread as known at the start of a snapshot's window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessState {
    pub pid: u32,
    pub tid: u32,
    pub ppid: u32,
    pub comm: String,
    /// Mappings of the process (shared by its threads; set on the leader).
    /// Cloning shares them (a persistent map), so a snapshot copies none.
    pub maps: Maps,
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
    /// Oldest sample time over all CPUs.
    pub window_start_ns: u64,
    /// Address of `_text` from /proc/kallsyms, for the kernel MMAP record.
    pub kernel_text: Option<u64>,
}

pub mod compress;
pub mod features;
pub mod host;
pub mod output;
pub mod perfdata;
pub mod reader;
pub mod synth;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use crate::tracking::maps::Maps;
pub use host::HostInfo;
