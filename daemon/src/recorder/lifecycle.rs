//! The [`Recorder`]: what it records ([`RecorderConfig`]), starting it
//! (events resolved, rings opened and mapped, the process table seeded,
//! the drain thread started), what it holds and stopping it. The capture
//! is in `capture`, the health report in `status`.

use crate::host::cgroups::{CgroupHierarchy, walk as walk_cgroups};
use crate::tracking::cgroups::CgroupTable;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};

use super::EventDescriptor;
use super::rings::{Live, RingOpener, Rings, lock};
use super::start::{EventInfo, event_info};
use super::tap::{FollowRings, RecordTap};
use crate::host::{HostInfo, HostInfoError, kallsyms_text};
use crate::perf::cpus::{CpuListError, online_cpus};
use crate::perf::event::{EventError, EventSpec, ResolvedEvent};
use crate::perf::tracking_ring::{TrackingOptions, TrackingRing};
use crate::perf::{PerfError, data_pages_for, page_size};
use crate::ring::Corruption;
use crate::ring::size_at_end::SizeAtEndError;
use crate::tracking::drain::{DrainThread, Tracking};
use crate::tracking::log::{DEFAULT_CHECKPOINT_BYTES, TrackingLog};
use crate::tracking::modules::{LoadedModule, ModuleWatch};
use crate::tracking::process_table::{ProcessTable, TrackingLimits};
use crate::tracking::procfs::seed_from_proc;
use crate::tracking::state::ProcessState;

/// What to record and how much of it to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecorderConfig {
    pub events: Vec<EventSpec>,
    /// Per-CPU sample ring, rounded up to a power-of-two number of pages.
    pub ring_bytes_per_cpu: u64,
    /// Per-CPU tracking ring, rounded up likewise.
    pub tracking_ring_bytes_per_cpu: u64,
    /// The user-space tracking log (all CPUs), rounded up to 8 bytes.
    pub tracking_log_bytes: u64,
    /// Bounds of the process table.
    pub tracking_limits: TrackingLimits,
    /// Records between checkpoints of the process table, in bytes.
    pub tracking_checkpoint_bytes: u64,
    /// A standby set of sample events and ring per CPU, switched to at a
    /// capture instead of pausing the ring: nothing is lost, for twice the
    /// sample-ring memory.
    pub lossless_freeze: bool,
    /// With `[history]` on: hand the records out as they are recorded
    /// ([`Recorder::tap`]).
    pub tap: bool,
    /// Record each sample's cgroup id, and name every cgroup of this
    /// hierarchy (`[containers] cgroups`).
    pub cgroups: Option<CgroupHierarchy>,
    /// Why `cgroups` is None, for `status`.
    pub cgroups_off: Option<String>,
}

impl Default for RecorderConfig {
    fn default() -> Self {
        Self {
            events: Vec::new(),
            ring_bytes_per_cpu: 1 << 20,
            tracking_ring_bytes_per_cpu: 256 << 10,
            tracking_log_bytes: 16 << 20,
            tracking_limits: TrackingLimits::default(),
            tracking_checkpoint_bytes: DEFAULT_CHECKPOINT_BYTES,
            lossless_freeze: true,
            tap: false,
            cgroups: None,
            cgroups_off: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("no events configured")]
    NoEvents,
    #[error(transparent)]
    Event(#[from] EventError),
    #[error(transparent)]
    Cpus(#[from] CpuListError),
    #[error(transparent)]
    Perf(#[from] PerfError),
    #[error("creating the {bytes}-byte tracking log failed: {source}")]
    TrackingLog {
        bytes: u64,
        #[source]
        source: SizeAtEndError,
    },
    #[error("starting the tracking drain thread failed: {0}")]
    DrainThread(#[source] std::io::Error),
    #[error("walking the tracking log failed: {0}")]
    TrackingWalk(#[source] Corruption),
    #[error("the capture of CPU {cpu} panicked")]
    CpuPanicked { cpu: u32 },
    #[error("gathering host facts: {0}")]
    Host(#[from] HostInfoError),
}

/// See [`Recorder::maps_now`].
pub struct MapsNow {
    pub maps: Vec<(u32, crate::tracking::maps::Maps)>,
    pub build_ids: Arc<crate::tracking::build_id::BuildIds>,
}

/// Records continuously; [`Recorder::capture`] freezes and copies.
pub struct Recorder {
    // Declared first: dropped (stopped and joined) before the rings close.
    pub(super) drain: Option<DrainThread>,
    pub(super) live: Arc<Live>,
    pub(super) kernel_text: Option<u64>,
    /// Host facts and tracepoint formats, gathered once at start: a
    /// snapshot's writer then reads nothing from /sys or /proc.
    pub(super) host: Arc<HostInfo>,
    pub(super) event_info: Vec<EventInfo>,
    pub(super) captures: AtomicU64,
    /// Where the cgroup ids samples carry are from (None: not recorded).
    pub(super) cgroup_hierarchy: Option<std::path::PathBuf>,
    /// Why cgroup ids are not recorded, when they are not.
    pub(super) cgroup_reason: Option<String>,
    /// With `[history]` on: where the record tap's last look left each
    /// ring.
    pub(super) tap: Option<Arc<FollowRings>>,
}

impl Recorder {
    /// Resolves the events, opens and maps every ring, seeds the process
    /// table from /proc, enables everything and starts the drain thread.
    pub fn start(config: &RecorderConfig) -> Result<Self, CaptureError> {
        if config.events.is_empty() {
            return Err(CaptureError::NoEvents);
        }
        let resolved: Vec<ResolvedEvent> = config
            .events
            .iter()
            .map(|spec| {
                EventSpec {
                    cgroup: config.cgroups.is_some(),
                    ..spec.clone()
                }
                .resolve()
            })
            .collect::<Result<_, _>>()?;
        let cpus = online_cpus()?;
        let page = page_size();
        let sample_pages = data_pages_for(config.ring_bytes_per_cpu, page)?;
        let tracking_pages = data_pages_for(config.tracking_ring_bytes_per_cpu, page)?;

        // Tracking first, so nothing between the /proc scan and the first
        // sample goes unseen.
        let tracking = TrackingOptions {
            cgroups: config.cgroups.is_some(),
            data_maps: config.events.iter().any(|e| e.user_stack.is_some()),
        };
        let tracking_rings: Vec<TrackingRing> = cpus
            .iter()
            .map(|&cpu| TrackingRing::open(cpu, tracking_pages, tracking))
            .collect::<Result<_, _>>()?;
        for ring in &tracking_rings {
            ring.enable()?;
        }
        let mut table = ProcessTable::new(config.tracking_limits);
        seed_from_proc(
            std::path::Path::new("/proc"),
            &mut table,
            tracking.data_maps,
        );
        let log = TrackingLog::new(
            config.tracking_log_bytes,
            config.tracking_checkpoint_bytes,
            table,
        )
        .map_err(|source| CaptureError::TrackingLog {
            bytes: config.tracking_log_bytes,
            source,
        })?;

        let opener = RingOpener {
            events: resolved.clone(),
            sample_pages,
            tracking_pages,
            tracking,
            sets_per_cpu: if config.lossless_freeze { 2 } else { 1 },
        };
        let cpu_rings = cpus
            .iter()
            .map(|&cpu| opener.samples(cpu))
            .collect::<Result<Vec<_>, PerfError>>()?;
        let rings = Rings::new(&resolved, cpu_rings, &tracking_rings);
        for ring in &rings.cpus {
            ring.enable()?;
        }
        let tap = config.tap.then(|| Arc::new(FollowRings::default()));
        let tracking_attr = tracking_rings[0].attr();
        let tracking_id = tracking_rings[0].id();
        let mut tracking = Tracking::new(tracking_rings, log);
        if let Some(hierarchy) = &config.cgroups {
            // After the tracking rings: a cgroup made meanwhile is in both.
            tracking.track_cgroups(CgroupTable::seeded(walk_cgroups(&hierarchy.mount)));
        }
        if tap.is_some() {
            tracking.tap_records();
        }
        tracking.drain();
        let tracking = Arc::new(Mutex::new(tracking));
        let live = Arc::new(Live {
            rings: RwLock::new(rings),
            opener,
            tracking: Arc::clone(&tracking),
            capture_lock: Mutex::new(()),
            online: Mutex::new(cpus),
            forget: Mutex::default(),
        });
        let drain = DrainThread::spawn(
            Arc::clone(&tracking),
            super::hotplug::follower(&live, tap.clone()),
        )
        .map_err(CaptureError::DrainThread)?;
        let kernel_text = std::fs::File::open("/proc/kallsyms")
            .ok()
            .and_then(|k| kallsyms_text(std::io::BufReader::new(k)));
        // Taken before /proc/modules is read: a module loaded after that
        // read gets a record dated no later than its load.
        let modules_read_ns =
            crate::host::sample_clock_now().map_or(0, crate::time::SampleTime::as_nanos);
        let host = Arc::new(HostInfo::gather(&super::tracepoints_of(
            &live.rings().events,
        ))?);
        lock(&tracking).watch_modules(ModuleWatch::new(
            &host.modules,
            modules_read_ns,
            tracking_attr,
            tracking_id,
        ));
        Ok(Self {
            host,
            event_info: resolved.iter().map(event_info).collect(),
            drain: Some(drain),
            live,
            kernel_text,
            captures: AtomicU64::new(0),
            cgroup_hierarchy: config.cgroups.as_ref().map(|h| h.mount.clone()),
            cgroup_reason: config.cgroups_off.clone(),
            tap,
        })
    }

    /// Sample events (in config order), then the tracking event, with the
    /// ids of every ring opened so far.
    pub fn events(&self) -> Vec<EventDescriptor> {
        self.live.rings().events.clone()
    }

    /// How many event ids [`Self::events`] holds: it grows when rings of a
    /// CPU that came online open. Cheap enough for every history round.
    pub fn event_id_count(&self) -> usize {
        self.live.rings().events.iter().map(|e| e.ids.len()).sum()
    }

    /// The configured events as opened, for `Status`.
    pub fn event_info(&self) -> &[EventInfo] {
        &self.event_info
    }

    /// The host facts snapshots of this recorder describe.
    pub fn host(&self) -> Arc<HostInfo> {
        Arc::clone(&self.host)
    }

    /// The CPUs recorded, ascending.
    pub fn cpus(&self) -> Vec<u32> {
        self.live.rings().cpus.iter().map(|r| r.cpu()).collect()
    }

    /// Kernel modules found loaded since start, oldest first.
    pub fn loaded_modules(&self) -> Vec<LoadedModule> {
        lock(&self.live.tracking).loaded_modules().to_vec()
    }

    /// Watches `source` instead of /proc/modules for module loads, its
    /// text now taken as the modules already known: tests load modules on
    /// paper with it, on kernels without module support.
    #[cfg(feature = "testing")]
    pub fn watch_modules_in(&self, source: std::path::PathBuf) -> std::io::Result<()> {
        let known = crate::host::bare_modules(&std::fs::read_to_string(&source)?);
        let events = self.events();
        let tracking = events
            .last()
            .ok_or_else(|| std::io::Error::other("no tracking event"))?;
        let watch = ModuleWatch::reading(
            source,
            &known,
            crate::host::sample_clock_now().map_or(0, crate::time::SampleTime::as_nanos),
            tracking.attr,
            tracking.ids.first().copied().unwrap_or(0),
        );
        lock(&self.live.tracking).watch_modules(watch);
        Ok(())
    }

    /// The records as a stream, with `[history]` on (None without).
    pub fn tap(&self) -> Option<RecordTap<'_>> {
        Some(RecordTap {
            tracking: &self.live.tracking,
            source: self.tap.as_deref()?,
            rings: &self.live.rings,
        })
    }

    /// The maps of processes `pids` as known now (shared, not copied: a
    /// process whose maps did not change since hands back the same
    /// storage), with the build-ids read from mapped files since (the
    /// history's unwinder). A process the table no longer has is left
    /// out. The tracking rings are drained first, so that the table knows
    /// the processes of every sample drained before the call (forked
    /// since the tracking drain's last round: 6% of the stack copies under
    /// a load that forks were kept for want of their process otherwise).
    pub fn maps_now(&self, pids: &[u32]) -> MapsNow {
        Self::maps_in(lock(&self.live.tracking), pids)
    }

    /// [`Self::maps_now`], or None when the tracking state is in use (a
    /// dump walking it): for the history's drain, which does not wait.
    pub fn try_maps_now(&self, pids: &[u32]) -> Option<MapsNow> {
        let tracking = match self.live.tracking.try_lock() {
            Ok(t) => t,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        Some(Self::maps_in(tracking, pids))
    }

    fn maps_in(mut tracking: std::sync::MutexGuard<'_, Tracking>, pids: &[u32]) -> MapsNow {
        tracking.drain();
        let table = tracking.log().current_table();
        MapsNow {
            maps: pids
                .iter()
                .filter_map(|&p| Some((p, table.maps_of(p)?)))
                .collect(),
            build_ids: tracking.build_ids(),
        }
    }

    /// Every cgroup known (empty when cgroup ids are not recorded).
    pub fn cgroups(&self) -> Vec<(u64, Arc<str>)> {
        lock(&self.live.tracking)
            .cgroups()
            .map(|c| c.all())
            .unwrap_or_default()
    }

    /// Drains the tracking rings now (captures do this themselves).
    pub fn drain_tracking(&self) -> usize {
        lock(&self.live.tracking).drain()
    }

    /// The thread `tid` as the process table and the whole tracking log
    /// know it now (exited threads included until forgotten).
    pub fn process(&self, tid: u32) -> Result<Option<ProcessState>, CaptureError> {
        Ok(lock(&self.live.tracking).log().current_table().lookup(tid))
    }

    /// Rounds the tracking drain thread has completed (None: it is not
    /// running). The watchdog waits for this to grow.
    pub fn tracking_drain_rounds(&self) -> Option<u64> {
        self.drain.as_ref().map(DrainThread::rounds)
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // Stop the drain before the rings it polls are closed.
        self.drain.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorder_is_shareable_across_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Recorder>();
    }
}
