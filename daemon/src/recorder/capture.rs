//! Capture: the per-CPU sample rings, the tracking drain and the tracking
//! log behind one [`Recorder`], and the freeze-walk-copy that turns them into
//! a [`Capture`].
//!
//! With the lossless freeze (the default) every CPU has two sets of the
//! sample events, each with its own ring, and only one set is enabled. A
//! capture enables the standby set and then disables the active one (CPUs
//! in parallel), so every moment is recorded by at least one set and
//! nothing is dropped; it then copies the now idle ring, walking only what
//! was written since that set was last enabled (older bytes belong to the
//! window before). The next capture swaps the roles back. Re-pointing the
//! events with `PERF_EVENT_IOC_SET_OUTPUT` instead would not double the
//! events, but on this kernel each re-point of an event waits for an RCU
//! grace period (6-18 ms measured), against microseconds for an enable.
//!
//! Without it (`buffers.lossless_freeze = false`) a capture pauses each
//! CPU's one ring for a memcpy of its used bytes and resumes it; samples
//! arriving during the pause are dropped and counted by the kernel.
//!
//! Either way the copy is walked only after `data_head` is re-read: if a
//! writer that was already past the pause (or disable) when it took effect
//! moved it by `d` bytes, the oldest `d` bytes of the window are not
//! trusted: it overwrote them as it finished. The tracking rings
//! are drained after the sample rings resume, so the log covers every sample
//! of the window; the window's tracking records are found by the size-at-end
//! backward walk over the log, and the process state at the window start
//! from the newest checkpoint of the process table the log keeps before it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use rayon::prelude::*;

use super::maps_needed::{keep_maps_of, processes_needing_maps};
use super::rings::{CpuRing, Live, RingOpener, Rings, lock};
use super::start::{EventInfo, event_info};
use super::{Capture, CpuCapture, EventDescriptor};
use crate::abi::layout::RecordLayouts;
use crate::host::{HostInfo, HostInfoError, parse_kallsyms_text};
use crate::perf::cpus::{CpuListError, online_cpus};
use crate::perf::event::{EventError, EventSpec, ResolvedEvent};
use crate::perf::tracking_ring::TrackingRing;
use crate::perf::{PerfError, data_pages_for, page_size};
use crate::ring::Corruption;
use crate::ring::backward::{copy_range, find_range_limited};
use crate::ring::size_at_end::SizeAtEndError;
use crate::tracking::build_id::BuildIdStats;
use crate::tracking::drain::{DrainThread, Tracking};
use crate::tracking::log::{DEFAULT_CHECKPOINT_BYTES, TrackingLog, TrackingLogStatus};
use crate::tracking::modules::{LoadedModule, ModuleWatch};
use crate::tracking::process_table::{DroppedCounts, ProcessCounts, ProcessTable, TrackingLimits};
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

/// Records continuously; [`Recorder::capture`] freezes and copies.
pub struct Recorder {
    // Declared first: dropped (stopped and joined) before the rings close.
    drain: Option<DrainThread>,
    live: Arc<Live>,
    kernel_text: Option<u64>,
    /// Host facts and tracepoint formats, gathered once at start: a
    /// snapshot's writer then reads nothing from /sys or /proc.
    host: Arc<HostInfo>,
    event_info: Vec<EventInfo>,
    captures: AtomicU64,
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
            .map(EventSpec::resolve)
            .collect::<Result<_, _>>()?;
        let cpus = online_cpus()?;
        let page = page_size();
        let sample_pages = data_pages_for(config.ring_bytes_per_cpu, page)?;
        let tracking_pages = data_pages_for(config.tracking_ring_bytes_per_cpu, page)?;

        // Tracking first, so nothing between the /proc scan and the first
        // sample goes unseen.
        let tracking_rings: Vec<TrackingRing> = cpus
            .iter()
            .map(|&cpu| TrackingRing::open(cpu, tracking_pages))
            .collect::<Result<_, _>>()?;
        for ring in &tracking_rings {
            ring.enable()?;
        }
        let mut table = ProcessTable::new(config.tracking_limits);
        seed_from_proc(std::path::Path::new("/proc"), &mut table);
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
        let tracking_attr = tracking_rings[0].attr();
        let tracking_id = tracking_rings[0].id();
        let mut tracking = Tracking::new(tracking_rings, log);
        tracking.drain();
        let tracking = Arc::new(Mutex::new(tracking));
        let live = Arc::new(Live {
            rings: RwLock::new(rings),
            opener,
            tracking: Arc::clone(&tracking),
            capture_lock: Mutex::new(()),
            online: Mutex::new(cpus),
        });
        let drain = DrainThread::spawn(Arc::clone(&tracking), super::hotplug::follower(&live))
            .map_err(CaptureError::DrainThread)?;
        let kernel_text = std::fs::read_to_string("/proc/kallsyms")
            .ok()
            .and_then(|k| parse_kallsyms_text(&k));
        // Taken before /proc/modules is read: a module loaded after that
        // read gets a record dated no later than its load.
        let modules_read_ns = crate::host::sample_clock_ns().unwrap_or(0);
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
        })
    }

    /// Sample events (in config order), then the tracking event, with the
    /// ids of every ring opened so far.
    pub fn events(&self) -> Vec<EventDescriptor> {
        self.live.rings().events.clone()
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

    /// Freezes every CPU's sample ring (in parallel: switched to the
    /// standby set, or paused), copies it (and resumes a paused one), then
    /// walks the copies and the tracking log.
    pub fn capture(&self) -> Result<Capture, CaptureError> {
        self.capture_calling(&|_| {})
    }

    /// [`Recorder::capture`] calling `hook(cpu)` while that CPU's ring is
    /// frozen, after its copy: tests use it to stretch or observe the
    /// freeze.
    #[cfg(feature = "testing")]
    pub fn capture_with_pause_hook(
        &self,
        hook: &(dyn Fn(u32) + Sync),
    ) -> Result<Capture, CaptureError> {
        self.capture_calling(hook)
    }

    fn capture_calling(&self, hook: &(dyn Fn(u32) + Sync)) -> Result<Capture, CaptureError> {
        let _one_at_a_time = lock(&self.live.capture_lock);
        let rings = self.live.rings();
        let results: Vec<Result<CpuCapture, PerfError>> = crate::perf::sched::freeze_pool()
            .install(|| {
                rings
                    .cpus
                    .par_iter()
                    .map(|cpu| capture_cpu(cpu, &rings.layouts, hook))
                    .collect()
            });
        let cpus = results.into_iter().collect::<Result<Vec<_>, _>>()?;
        let window_start_ns = cpus.iter().filter_map(|c| c.oldest_ns).min().unwrap_or(0);

        let mut tracking = lock(&self.live.tracking);
        tracking.drain();
        let mut window = tracking
            .log()
            .window(window_start_ns)
            .map_err(CaptureError::TrackingWalk)?;
        let build_ids = tracking.build_ids();
        build_ids.fill_records(&mut window.records);
        let tracking_lost = tracking.lost_total();
        let loaded_modules = tracking.loaded_modules().to_vec();
        if window_start_ns > 0 {
            // Windows only move forward: no later one needs these.
            tracking.log_mut().forget_exited_before(window_start_ns);
            tracking.prune_modules(window_start_ns);
        }
        drop(tracking);
        let mut processes = window.processes;
        keep_maps_of(
            &mut processes,
            &processes_needing_maps(&cpus, &rings.layouts, &window.records),
        );
        for p in &mut processes {
            p.maps.fill_build_ids(|m| build_ids.for_map(m));
        }
        self.captures.fetch_add(1, Ordering::Relaxed);
        Ok(Capture {
            events: rings.events.clone(),
            cpus,
            processes,
            tracking_records: window.records,
            tracking_record_count: window.count,
            tracking_lost,
            window_start_ns,
            kernel_text: self.kernel_text,
            loaded_modules,
        })
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
            crate::host::sample_clock_ns().unwrap_or(0),
            tracking.attr,
            tracking.ids.first().copied().unwrap_or(0),
        );
        lock(&self.live.tracking).watch_modules(watch);
        Ok(())
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

impl Drop for Recorder {
    fn drop(&mut self) {
        // Stop the drain before the rings it polls are closed.
        self.drain.take();
    }
}

/// Shortest time between freezing a ring (pausing it or disabling its
/// events) and re-reading its `data_head`.
pub const WRITER_GRACE: std::time::Duration = std::time::Duration::from_micros(5);

/// Stops the kernel writing `cpu`'s active ring and returns the index of
/// the set whose ring is now frozen. With a standby set, that set is
/// enabled before the active one is disabled: the two overlap for a few
/// microseconds (a record of that moment may be in both windows), never
/// leave a gap. Without one, the ring is paused (writes dropped, counted).
fn freeze(cpu: &CpuRing) -> Result<usize, PerfError> {
    let active = cpu.active.load(Ordering::Acquire);
    if cpu.sets.len() == 1 {
        cpu.sets[active].ring.pause()?;
        return Ok(active);
    }
    let standby = (active + 1) % cpu.sets.len();
    let next = &cpu.sets[standby];
    // Disabled since the last capture copied it: its head is still.
    next.enabled_at_head
        .store(next.ring.data_head(), Ordering::Release);
    if let Err(e) = next.ring.enable() {
        // Some of its events may be on: the active set alone records.
        let _ = next.ring.disable();
        return Err(e);
    }
    if let Err(e) = cpu.sets[active].ring.disable() {
        // Keep one set recording, the one that was (whole again).
        let _ = cpu.sets[active].ring.enable();
        let _ = next.ring.disable();
        return Err(e);
    }
    cpu.active.store(standby, Ordering::Release);
    Ok(active)
}

fn capture_cpu(
    cpu: &CpuRing,
    layouts: &RecordLayouts,
    hook: &(dyn Fn(u32) + Sync),
) -> Result<CpuCapture, PerfError> {
    let lost_before = cpu.lost()?;
    let mut scratch = lock(&cpu.scratch);

    let started = Instant::now();
    let frozen = freeze(cpu)?;
    let frozen_at = Instant::now();
    let set = &cpu.sets[frozen];
    let ring = &set.ring;
    let head = ring.data_head();
    ring.copy_used(head, &mut scratch);
    hook(ring.cpu());
    // A writer already past the pause check (or the event's enabled check)
    // finishes within microseconds (output runs with preemption off); a
    // tiny ring's copy can be quicker, so give it that long before asking
    // how far it moved data_head.
    while frozen_at.elapsed() < WRITER_GRACE {
        std::hint::spin_loop();
    }
    let head_after = ring.data_head();
    let paused = cpu.sets.len() == 1;
    let pause = if paused {
        let resumed = ring.resume();
        let pause = started.elapsed();
        resumed?;
        pause
    } else {
        std::time::Duration::ZERO
    };

    // Writers past the freeze when it took effect overwrote the oldest
    // bytes of the window as they finished; bytes written before the set
    // was enabled belong to an earlier window.
    let moved = head.wrapping_sub(head_after);
    let size = scratch.len() as u64;
    let since_enabled = set
        .enabled_at_head
        .load(Ordering::Acquire)
        .wrapping_sub(head);
    let trusted = size.saturating_sub(moved).min(since_enabled);
    let range = find_range_limited(&scratch, head, trusted);
    let mut records = Vec::with_capacity(usize::try_from(range.len).unwrap_or(0));
    copy_range(&scratch, &range, &mut records);
    drop(scratch);

    let lost_after = cpu.lost()?;
    cpu.last_lost.store(lost_after, Ordering::Relaxed);
    let summary = summarize(&mut records, layouts);
    Ok(CpuCapture {
        cpu: ring.cpu(),
        event_id: ring.ids().first().copied().unwrap_or(0),
        record_count: summary.count,
        ring_bytes: size,
        wrapped: since_enabled > size,
        oldest_ns: summary.oldest,
        newest_ns: summary.newest,
        lost_while_paused: lost_after.saturating_sub(lost_before),
        lost_since_start: lost_after,
        pause,
        corruption: range
            .corruption
            .map(|c| c.to_string())
            .or(summary.corruption),
        records,
    })
}

struct Summary {
    count: u64,
    oldest: Option<u64>,
    newest: Option<u64>,
    corruption: Option<String>,
}

/// Counts the linear records and finds their time span; a record that does
/// not parse ends the records (they are truncated before it).
fn summarize(records: &mut Vec<u8>, layouts: &RecordLayouts) -> Summary {
    let mut summary = Summary {
        count: 0,
        oldest: None,
        newest: None,
        corruption: None,
    };
    let mut iter = crate::ring::records(records);
    for item in iter.by_ref() {
        match item {
            Ok((_, record)) => {
                summary.count += 1;
                if let (Some(t), _) = layouts.time_and_cpu(record) {
                    summary.oldest = Some(summary.oldest.map_or(t, |o| o.min(t)));
                    summary.newest = Some(summary.newest.map_or(t, |n| n.max(t)));
                }
            }
            Err(c) => {
                summary.corruption = Some(c.to_string());
                break;
            }
        }
    }
    let valid = iter.offset();
    records.truncate(valid);
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(id: u64, time: u64) -> Vec<u8> {
        // identifier, tid, time, cpu
        crate::abi::test_records::with_words(crate::abi::record_type::SAMPLE, &[id, 1, time, 0])
    }

    #[test]
    fn summary_spans_the_records_and_cuts_at_corruption() {
        use crate::abi::sample;
        let mut layouts = RecordLayouts::default();
        layouts.insert(
            5,
            sample::IDENTIFIER | sample::TID | sample::TIME | sample::CPU,
        );
        let mut records = [sample(5, 300), sample(5, 200), sample(9, 7), sample(5, 100)].concat();
        let whole = records.len();
        let s = summarize(&mut records, &layouts);
        assert_eq!((s.count, s.oldest, s.newest), (4, Some(100), Some(300)));
        assert!(s.corruption.is_none());
        assert_eq!(records.len(), whole);

        let mut bad = [sample(5, 300), vec![0xff; 16], sample(5, 100)].concat();
        let s = summarize(&mut bad, &layouts);
        assert_eq!((s.count, s.oldest, s.newest), (1, Some(300), Some(300)));
        assert!(s.corruption.is_some());
        assert_eq!(bad.len(), 40, "records cut before the bad header");
    }

    #[test]
    fn recorder_is_shareable_across_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Recorder>();
    }
}
