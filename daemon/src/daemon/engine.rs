//! The capture side as the control plane sees it: start the rings from the
//! config, take a snapshot into a file, report loss and health.
//!
//! [`Engine`] is the seam between the control plane (triggers, store, API)
//! and the recorder (kernel rings + perf.data writer).

use std::path::Path;
use std::time::Duration;

/// Why the recorder could not start or a snapshot could not be written.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot start recording: {message}")]
    Start {
        message: String,
        /// Index of the `[[event]]` at fault, when one is.
        event: Option<usize>,
    },
    #[error("capture failed: {0}")]
    Capture(String),
    #[error("{message}")]
    Write { message: String, disk_full: bool },
    #[error("{message}")]
    Compress {
        message: String,
        disk_full: bool,
        already_compressed: bool,
    },
}

impl EngineError {
    pub fn is_disk_full(&self) -> bool {
        matches!(
            self,
            EngineError::Write {
                disk_full: true,
                ..
            } | EngineError::Compress {
                disk_full: true,
                ..
            }
        )
    }
}

/// One CPU's part of a snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuSummary {
    pub cpu: u32,
    pub records: u64,
    pub bytes: u64,
    pub lost: u64,
    pub oldest_ns: u64,
    pub newest_ns: u64,
    pub pause: Duration,
    pub lost_since_start: u64,
}

/// A snapshot written to disk.
#[derive(Debug, Clone, Default)]
pub struct DumpOutput {
    pub bytes: u64,
    pub cpus: Vec<CpuSummary>,
    pub tracking_records: u64,
    pub capture: Duration,
    pub write: Duration,
}

/// An event as opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventInfo {
    pub name: String,
    pub kind: String,
    pub period: u64,
    pub frequency: u64,
    pub callchain: bool,
    pub filter: String,
}

/// Loss counters and tracking health.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStatus {
    /// (cpu, lost samples, lost tracking records) since start.
    pub cpus: Vec<(u32, u64, u64)>,
    pub log_capacity_bytes: u64,
    pub log_used_bytes: u64,
    pub log_records: u64,
    pub evicted_records: u64,
    pub processes: u64,
    pub exited_threads: u64,
    pub max_exited_threads: u64,
    pub max_maps_per_process: u64,
    pub exited_threads_dropped: u64,
    pub maps_dropped: u64,
    pub checkpoints: u64,
}

/// The recorder: rings running from [`Engine::start`] until dropped.
pub trait Engine: Send + Sync + 'static {
    /// Freezes the rings, copies them out and writes `dir/file_name`
    /// atomically; `compression` is a zstd level.
    fn dump(
        &self,
        dir: &Path,
        file_name: &str,
        compression: Option<i32>,
    ) -> Result<DumpOutput, EngineError>;
    fn status(&self) -> EngineStatus;
    fn events(&self) -> Vec<EventInfo>;
}
