//! What the daemon reports about itself (`Status`, `snapctl status`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::Control;
use super::conditions::TriggerStatus;
use super::config::describe_source;
use crate::dump::DumpTimings;
use crate::host::ClockReference;
use crate::recorder::{EventInfo, RecorderStatus};
use crate::store::{StoreError, Usage};
use crate::time::WallTime;

/// What the daemon reports about itself.
#[derive(Debug, Clone)]
pub struct StatusReport {
    pub uptime: Duration,
    pub config_path: String,
    pub events: Vec<EventInfo>,
    pub recorder: RecorderStatus,
    pub ring_bytes_per_cpu: u64,
    pub tracking_ring_bytes_per_cpu: u64,
    pub checkpoint_interval_bytes: u64,
    pub output_dir: PathBuf,
    pub usage: Usage,
    pub last_dump: Option<DumpTimings>,
    pub dumps: u64,
    pub triggers: Vec<TriggerStatus>,
    /// None without `[fleet]`.
    pub fleet: Option<super::fleet_status::FleetReport>,
    /// None with `[history]` off.
    pub history: Option<HistoryReport>,
}

/// The history's status, its times on the wall clock.
#[derive(Debug, Clone)]
pub struct HistoryReport {
    pub status: crate::history::HistoryStatus,
    /// The oldest and newest instants held, and how long ago the oldest
    /// is.
    pub oldest: Option<WallTime>,
    pub newest: Option<WallTime>,
    pub reach: Duration,
}

impl HistoryReport {
    fn of(status: crate::history::HistoryStatus) -> Self {
        let clock = ClockReference::now();
        let wall = |t: Option<crate::time::SampleTime>| clock.zip(t).map(|(c, t)| c.wall_of(t));
        let oldest = wall(status.oldest);
        HistoryReport {
            oldest,
            newest: wall(status.newest),
            reach: oldest.map_or(Duration::ZERO, |o| WallTime::now().since(o)),
            status,
        }
    }
}

/// Why the status could not be gathered.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the worker thread failed: {0}")]
    Worker(#[from] tokio::task::JoinError),
}

impl Control {
    /// The daemon's status now.
    pub async fn status(&self) -> Result<StatusReport, StatusError> {
        let cur = self.live.current();
        let recorder = Arc::clone(&cur.recorder);
        let store = Arc::clone(&cur.store);
        let (status, usage) = tokio::task::spawn_blocking(move || {
            Ok::<_, StoreError>((recorder.status(), store.usage()?))
        })
        .await??;
        let cfg = &cur.config.config;
        Ok(StatusReport {
            uptime: self.lifecycle.started.elapsed(),
            config_path: describe_source(&cur.config),
            events: cur.recorder.event_info().to_vec(),
            recorder: status,
            ring_bytes_per_cpu: cfg.buffers.per_cpu.get_ref().bytes(),
            tracking_ring_bytes_per_cpu: cfg.buffers.tracking.get_ref().bytes(),
            checkpoint_interval_bytes: cfg
                .tracking
                .effective_checkpoint_interval(cfg.buffers.tracking_log.get_ref().bytes()),
            output_dir: cur.store.dir().to_path_buf(),
            last_dump: self.dumps.last(),
            dumps: self.dumps.count(),
            triggers: self.conditions.statuses(&cur.config.config),
            // The queue as it is on disk now, not at the uploader's last pass.
            fleet: self.fleet.report().map(|mut f| {
                f.uploads_pending = usage.pending_uploads;
                f
            }),
            history: self.history.get().map(|h| HistoryReport::of(h.status())),
            usage,
        })
    }
}
