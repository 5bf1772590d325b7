//! What a dump hands back: the snapshot written and what went into it.

use std::time::Duration;

use super::window::HeldWindow;
use crate::recorder::CpuCapture;
use crate::ring::filter::Kept;
use crate::store::SnapshotInfo;
use crate::time::SampleTime;

/// A snapshot written to disk.
#[derive(Debug, Clone, Default)]
pub struct DumpOutput {
    pub bytes: u64,
    /// What each CPU's part of the file held; its records were freed once
    /// written.
    pub cpus: Vec<CpuWritten>,
    pub tracking_records: u64,
    pub capture: Duration,
    pub write: Duration,
    /// Of `write`, the syncs that put the file and its name on disk.
    pub sync: Duration,
    pub window: HeldWindow,
}

/// One CPU's part of a written snapshot, for the log and the `Dump`
/// reply. The records themselves are dropped as soon as they are on disk,
/// before the heap is trimmed: held until the replies went, they kept a
/// window's worth of pages resident between dumps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuWritten {
    pub cpu: u32,
    pub record_count: u64,
    pub bytes: u64,
    pub lost_while_paused: u64,
    pub lost_since_start: u64,
    pub oldest: Option<SampleTime>,
    pub newest: Option<SampleTime>,
    pub pause: Duration,
}

impl From<&CpuCapture> for CpuWritten {
    fn from(c: &CpuCapture) -> Self {
        CpuWritten {
            cpu: c.cpu,
            record_count: c.record_count,
            bytes: c.records.len() as u64,
            lost_while_paused: c.lost_while_paused,
            lost_since_start: c.lost_since_start,
            oldest: c.oldest,
            newest: c.newest,
            pause: c.pause,
        }
    }
}

impl CpuWritten {
    /// A CPU's part of a window cut from the history: `kept` written, with
    /// the ring's counters when the rings had that CPU.
    pub fn of_cut(cpu: u32, kept: &Kept, ring: Option<&CpuCapture>) -> Self {
        CpuWritten {
            cpu,
            record_count: kept.count,
            bytes: kept.bytes,
            lost_while_paused: ring.map_or(0, |r| r.lost_while_paused),
            lost_since_start: ring.map_or(0, |r| r.lost_since_start),
            oldest: kept.oldest,
            newest: kept.newest,
            pause: ring.map_or(Duration::ZERO, |r| r.pause),
        }
    }
}

/// Figures of one dump, for `Status` and the `Dump` reply.
#[derive(Debug, Clone, Copy, Default)]
pub struct DumpTimings {
    /// From the first trigger to the freeze.
    pub wait: Duration,
    pub capture: Duration,
    pub write: Duration,
    /// Of `write`, the syncs of the file, its sidecar and the directory.
    pub sync: Duration,
    pub total: Duration,
    pub max_pause: Duration,
}

/// A dump that produced a snapshot.
#[derive(Debug, Clone)]
pub struct DumpDone {
    pub snapshot: SnapshotInfo,
    pub output: DumpOutput,
    pub timings: DumpTimings,
}
