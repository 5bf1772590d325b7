//! The recorder's health, as `snapctl status` reports it: per CPU, the
//! tracking log and process table, build-ids, the drain thread.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::lifecycle::Recorder;
use super::reach::{RingReach, reach_of};
use super::rings::{CpuRing, lock};
use crate::host::{ClockReference, sample_clock_now};
use crate::time::{SampleTime, WallTime};
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
    /// The oldest record the memory rings hold now, ns since the Unix
    /// epoch (0: none), and how long ago that was.
    pub rings_oldest: Option<WallTime>,
    pub rings_reach: Duration,
    /// Records the rings hold now, and how many a second that is over
    /// the time they span.
    pub ring_records: u64,
    pub records_per_second: u64,
}

/// One CPU's loss counters since start: what the loss watcher compares
/// every second (read without walking the rings, as a status does).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuLosses {
    pub cpu: u32,
    pub lost_samples: u64,
    pub lost_tracking_records: u64,
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
    /// Whether samples carry their cgroup, and the cgroups known.
    pub cgroups: CgroupStatus,
}

/// Whether samples carry their cgroup id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupStatus {
    /// The hierarchy the ids are of, when recorded.
    pub hierarchy: Option<std::path::PathBuf>,
    pub known: u64,
    pub dropped: u64,
    /// Why they are not, when they are not.
    pub reason: Option<String>,
}

impl Recorder {
    /// Every CPU's loss counters, and nothing else: cheap enough to read
    /// every second (a status walks every ring's records, which with
    /// rings of stack copies is a good part of the daemon's time).
    pub fn losses(&self) -> Vec<CpuLosses> {
        let lost_tracking = lock(&self.live.tracking).lost_per_cpu();
        self.live
            .rings()
            .cpus
            .iter()
            .map(|r| CpuLosses {
                cpu: r.cpu(),
                lost_samples: lost_samples(r),
                lost_tracking_records: lost_tracking
                    .iter()
                    .find(|(c, _)| *c == r.cpu())
                    .map_or(0, |&(_, n)| n),
            })
            .collect()
    }

    pub fn status(&self) -> RecorderStatus {
        // Before the tracking lock: a dump needs it, and the walks take a
        // while on large rings.
        let reaches: Vec<(u32, TimedReach)> = {
            let rings = self.live.rings();
            let clock = ClockReference::now();
            rings
                .cpus
                .iter()
                .map(|r| (r.cpu(), timed(reach_of(r, &rings.layouts), clock)))
                .collect()
        };
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
                let lost_samples = lost_samples(r);
                let find =
                    |v: &[(u32, u64)]| v.iter().find(|(c, _)| *c == cpu).map_or(0, |&(_, n)| n);
                let reach = reaches
                    .iter()
                    .find(|(c, _)| *c == cpu)
                    .map(|&(_, r)| r)
                    .unwrap_or_default();
                CpuStatus {
                    cpu,
                    online: online.contains(&cpu),
                    ring_bytes: r.data_size() as u64,
                    lost_samples,
                    standby_ring: r.sets.len() > 1,
                    lost_tracking_records: find(&lost_tracking),
                    tracking_malformed_bytes: find(&malformed),
                    rings_oldest: reach.oldest,
                    rings_reach: reach.reach,
                    ring_records: reach.records,
                    records_per_second: reach.per_second,
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
            cgroups: CgroupStatus {
                hierarchy: self.cgroup_hierarchy.clone(),
                known: tracking.cgroups().map_or(0, |c| c.len() as u64),
                dropped: tracking.cgroups().map_or(0, |c| c.dropped),
                reason: self.cgroup_reason.clone(),
            },
            tracking_drain_failure: self.drain.as_ref().and_then(DrainThread::failure),
        }
    }
}

/// Samples `ring` dropped since start (the last count read when the
/// kernel cannot be asked now).
fn lost_samples(ring: &CpuRing) -> u64 {
    match ring.lost() {
        Ok(n) => {
            ring.last_lost.store(n, Ordering::Relaxed);
            n
        }
        Err(_) => ring.last_lost.load(Ordering::Relaxed),
    }
}

/// A CPU's reach in wall-clock terms.
#[derive(Debug, Clone, Copy, Default)]
struct TimedReach {
    oldest: Option<WallTime>,
    reach: Duration,
    records: u64,
    per_second: u64,
}

fn timed(r: RingReach, clock: Option<ClockReference>) -> TimedReach {
    let (Some(oldest), Some(clock)) = (r.oldest_ns, clock) else {
        return TimedReach {
            records: r.records,
            ..TimedReach::default()
        };
    };
    let oldest = SampleTime::from_nanos(oldest);
    let span = r
        .newest_ns
        .map_or(Duration::ZERO, |n| SampleTime::from_nanos(n).since(oldest));
    TimedReach {
        oldest: Some(clock.wall_of(oldest)),
        reach: sample_clock_now().map_or(Duration::ZERO, |now| now.since(oldest)),
        records: r.records,
        per_second: r
            .records
            .saturating_mul(1_000_000_000)
            .checked_div(u64::try_from(span.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or(0),
    }
}
