//! Why a dump failed, typed by cause. The control plane and the API pass
//! these on as they are; `api::convert` alone chooses a gRPC code for each.

use std::path::PathBuf;
use std::sync::Arc;

use crate::recorder::CaptureError;
use crate::snapshot::output::SnapshotError;
use crate::store::StoreError;
use crate::time::WallTime;

/// Why a dump made no snapshot. Cloned to every caller a dump answers,
/// hence the `Arc`s around errors that are not `Clone`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DumpError {
    /// A field of the request is wrong; `field` names it as the API does.
    #[error("{field}: {message}")]
    InvalidArgument {
        field: &'static str,
        message: String,
    },
    /// The window asked for ends before anything still held.
    #[error(
        "the window asked for ends at {end}, before the oldest record the {held_by} still hold \
         ({held_from}): nothing of it is left to dump"
    )]
    OutsideWindow {
        end: WallTime,
        held_from: WallTime,
        /// "memory rings", or "memory rings and the history".
        held_by: &'static str,
    },
    #[error("the sample clock cannot be read, so no window can be cut")]
    Clock,
    /// A scope's cgroup or container is none the recorder knows.
    #[error("the scope {what} matches no cgroup the recorder knows")]
    ScopeMatchesNothing { what: String },
    /// A scoped dump without cgroup ids to scope by.
    #[error(
        "a dump of part of the machine needs cgroup ids, which this daemon does not record \
         ([containers] cgroups is off, or the host has no cgroup2 or perf_event hierarchy)"
    )]
    ScopeNotRecorded,
    #[error("capture failed: {0}")]
    Capture(Arc<CaptureError>),
    /// No room for the snapshot: older ones are kept.
    #[error("disk full in {}: {source}; older snapshots are kept, free some space (snapctl rotate) and dump again", dir.display())]
    DiskFull {
        dir: PathBuf,
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
    #[error("{0}")]
    Store(Arc<StoreError>),
    #[error("{0}")]
    Write(Arc<SnapshotError>),
    #[error("flightrecd is shutting down")]
    ShuttingDown,
}

impl DumpError {
    /// The caller asked for something that cannot be (logged as the
    /// caller's mistake, not the daemon's failure).
    pub fn is_callers(&self) -> bool {
        matches!(
            self,
            DumpError::InvalidArgument { .. }
                | DumpError::OutsideWindow { .. }
                | DumpError::ScopeMatchesNothing { .. }
                | DumpError::ScopeNotRecorded
        )
    }

    pub(super) fn of_store(e: StoreError, dir: &std::path::Path) -> Self {
        match e {
            StoreError::InvalidLabel { .. } => DumpError::InvalidArgument {
                field: "label",
                message: e.to_string(),
            },
            e if e.is_disk_full() => DumpError::DiskFull {
                dir: dir.to_path_buf(),
                source: Arc::new(e),
            },
            e => DumpError::Store(Arc::new(e)),
        }
    }

    pub(super) fn of_write(e: SnapshotError, dir: &std::path::Path) -> Self {
        if e.is_disk_full() {
            DumpError::DiskFull {
                dir: dir.to_path_buf(),
                source: Arc::new(e),
            }
        } else {
            DumpError::Write(Arc::new(e))
        }
    }
}
