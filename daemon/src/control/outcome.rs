//! What the control plane hands back: a dump's result, typed failures,
//! and the events Watch streams. The API layer turns them into protobuf
//! messages and gRPC codes; nothing here is a wire type.

use std::time::Duration;

use crate::recorder::CpuCapture;
use crate::store::SnapshotInfo;

/// A snapshot written to disk.
#[derive(Debug, Clone, Default)]
pub struct DumpOutput {
    pub bytes: u64,
    /// What each CPU's capture held; its records were freed once written.
    pub cpus: Vec<CpuWritten>,
    pub tracking_records: u64,
    pub capture: Duration,
    pub write: Duration,
    pub window: HeldWindow,
}

/// One CPU's part of a written snapshot, for the log and the `Dump`
/// reply. The records themselves are dropped as soon as they are on disk,
/// before the heap is trimmed: held until the replies went, they kept a
/// window's worth of pages resident in the capture workers' arenas
/// between dumps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuWritten {
    pub cpu: u32,
    pub record_count: u64,
    pub bytes: u64,
    pub lost_while_paused: u64,
    pub lost_since_start: u64,
    pub oldest_ns: Option<u64>,
    pub newest_ns: Option<u64>,
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
            oldest_ns: c.oldest_ns,
            newest_ns: c.newest_ns,
            pause: c.pause,
        }
    }
}

/// The window a snapshot holds, in wall-clock time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeldWindow {
    /// ns since the Unix epoch.
    pub start_unix_ns: i64,
    pub end_unix_ns: i64,
    /// How much of the window asked for was older than anything the
    /// recorder still held.
    pub missing: Duration,
}

/// Figures of one dump, for `Status` and the `Dump` reply.
#[derive(Debug, Clone, Copy, Default)]
pub struct DumpTimings {
    pub wait: Duration,
    pub capture: Duration,
    pub write: Duration,
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

/// A dump that did not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DumpFailure {
    #[error("{0}")]
    DiskFull(String),
    #[error("{0}")]
    InvalidLabel(String),
    #[error("{0}")]
    Failed(String),
    /// The window asked for lies wholly outside what the recorder holds.
    #[error("{0}")]
    OutsideWindow(String),
    #[error("shutting down")]
    ShuttingDown,
}

pub type DumpResult = Result<std::sync::Arc<DumpDone>, DumpFailure>;

/// What Watch streams, as it happened.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    SnapshotCreated(SnapshotInfo),
    SnapshotRemoved {
        snapshot: SnapshotInfo,
        reason: &'static str,
    },
    DumpFailed {
        error: String,
    },
    Loss(Loss),
    TriggerFired(TriggerFired),
    Uploaded(Uploaded),
    UploadFailed {
        id: String,
        destination: String,
        error: String,
    },
    /// The history stopped writing (it tries again later).
    HistoryStopped {
        reason: String,
    },
}

/// A snapshot reached an upload destination.
#[derive(Debug, Clone, PartialEq)]
pub struct Uploaded {
    pub snapshot: SnapshotInfo,
    /// "jetstream" or "s3".
    pub destination: String,
    /// Where it is: `<bucket>/<host>/<id>.perf.data`, or the S3 URL.
    pub object: String,
    pub seconds: f64,
    /// It was already there (an upload cut short by a restart had in fact
    /// completed): nothing was sent again.
    pub already_there: bool,
}

/// A `[[trigger]]` condition was met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerFired {
    pub name: String,
    pub matched: String,
    /// A dump was queued; false when the rate limit suppressed it.
    pub dumped: bool,
    /// "cooldown" or "max_per_hour" when suppressed, else "".
    pub suppressed_by: &'static str,
    pub times: u64,
}

/// Records a ring lost since the last reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    pub cpu: u32,
    /// "samples" or "tracking".
    pub ring: &'static str,
    pub lost: u64,
    pub total: u64,
}

/// An [`Event`] and when it happened (Unix time, ns).
#[derive(Debug, Clone, PartialEq)]
pub struct Stamped {
    pub unix_ns: i64,
    pub event: Event,
}
