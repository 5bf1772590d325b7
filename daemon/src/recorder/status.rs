//! The recorder's health, as `snapctl status` reports it: per CPU, the
//! tracking log and process table, build-ids, the drain thread.

use std::sync::atomic::Ordering;

use super::lifecycle::Recorder;
use super::rings::lock;
use crate::tracking::build_id::BuildIdStats;
use crate::tracking::drain::DrainThread;
use crate::tracking::log::TrackingLogStatus;
use crate::tracking::process_table::{DroppedCounts, ProcessCounts, TrackingLimits};

/// Per-CPU health.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuStatus {
    pub cpu: u32,
    /// Recorded now; false for a CPU that went offline (its rings keep
    /// what they recorded before, until it comes back).
    pub online: bool,
    pub ring_bytes: u64,
    /// Samples dropped since start (only while a capture paused the ring).
    pub lost_samples: u64,
    /// Whether captures switch to a standby ring (`ring_bytes` more of
    /// kernel memory) instead of pausing.
    pub standby_ring: bool,
    /// Tracking records the kernel could not write (ring full).
    pub lost_tracking_records: u64,
    /// Bytes of a tracking ring that were not valid records.
    pub tracking_malformed_bytes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecorderStatus {
    pub cpus: Vec<CpuStatus>,
    pub tracking_log: TrackingLogStatus,
    pub processes: ProcessCounts,
    pub tracking_limits: TrackingLimits,
    /// What the limits made the process table drop.
    pub tracking_dropped: DroppedCounts,
    pub captures: u64,
    /// What became of the build-ids read from mapped files.
    pub build_ids: BuildIdStats,
    /// Set when the drain thread stopped by itself (captures still drain).
    pub tracking_drain_failure: Option<String>,
}

impl Recorder {
    pub fn status(&self) -> RecorderStatus {
        let tracking = lock(&self.live.tracking);
        let lost_tracking = tracking.lost_per_cpu();
        let malformed = tracking.malformed_per_cpu();
        let online = lock(&self.live.online).clone();
        let cpus = self
            .live
            .rings()
            .cpus
            .iter()
            .map(|r| {
                let cpu = r.cpu();
                let lost_samples = match r.lost() {
                    Ok(n) => {
                        r.last_lost.store(n, Ordering::Relaxed);
                        n
                    }
                    Err(_) => r.last_lost.load(Ordering::Relaxed),
                };
                let find =
                    |v: &[(u32, u64)]| v.iter().find(|(c, _)| *c == cpu).map_or(0, |&(_, n)| n);
                CpuStatus {
                    cpu,
                    online: online.contains(&cpu),
                    ring_bytes: r.data_size() as u64,
                    lost_samples,
                    standby_ring: r.sets.len() > 1,
                    lost_tracking_records: find(&lost_tracking),
                    tracking_malformed_bytes: find(&malformed),
                }
            })
            .collect();
        RecorderStatus {
            cpus,
            tracking_log: tracking.log().status(),
            processes: tracking.log().process_counts(),
            tracking_limits: tracking.log().limits(),
            tracking_dropped: tracking.log().dropped(),
            captures: self.captures.load(Ordering::Relaxed),
            build_ids: tracking.build_id_stats(),
            tracking_drain_failure: self.drain.as_ref().and_then(DrainThread::failure),
        }
    }
}
