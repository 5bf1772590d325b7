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
//! window before). The next capture swaps the roles back. The standby ring
//! still holds the window the capture before this one took: when this
//! capture's window reaches back to where its set was enabled, the older
//! records of that window that the kernel has not yet overwritten follow
//! it, so every capture reaches back up to two rings' worth, even right
//! after another (windows of successive captures overlap; none repeats a
//! record within itself). Re-pointing the
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

use std::sync::atomic::Ordering;
use std::time::Instant;

use rayon::prelude::*;

use super::lifecycle::{CaptureError, Recorder};
use super::maps_needed::{keep_maps_of, processes_needing_maps};
use super::rings::{CpuRing, lock};
use super::{Capture, CpuCapture};
use crate::abi::layout::RecordLayouts;
use crate::perf::PerfError;
use crate::ring::backward::{copy_range, find_range_limited};
use crate::ring::filter::{RecordFilter, TimeRange};
use crate::time::SampleTime;

impl Recorder {
    /// Freezes every CPU's sample ring (in parallel: switched to the
    /// standby set, or paused), copies it (and resumes a paused one), then
    /// walks the copies and the tracking log: everything the rings hold.
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
        let held_from = cpus.iter().filter_map(|c| c.oldest).min();

        let mut tracking = lock(&self.live.tracking);
        tracking.drain();
        let mut window = tracking
            .log()
            .window(held_from.map_or(0, SampleTime::as_nanos))
            .map_err(CaptureError::TrackingWalk)?;
        let build_ids = tracking.build_ids();
        build_ids.fill_records(&mut window.records);
        let tracking_lost = tracking.lost_total();
        let loaded_modules = tracking.loaded_modules().to_vec();
        let cgroups = tracking.cgroups().map(|c| c.all()).unwrap_or_default();
        if let Some(held_from) = held_from {
            // What the rings hold only moves forward: no later window
            // reaches back past it (a window cut shorter may be followed
            // by a longer one). With the record tap's reader still
            // unwinding records the rings may no longer hold, less.
            let looked = crate::host::sample_clock_now().map_or(u64::MAX, SampleTime::as_nanos);
            if let Some(before) = super::forget::forgettable_before(
                &self.live,
                self.tap.as_deref(),
                looked,
                Some(held_from.as_nanos()),
            ) {
                tracking.no_window_before(before);
            }
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
            window_start: held_from,
            held_from,
            kernel_text: self.kernel_text,
            loaded_modules,
            cgroups,
        })
    }
}

/// Shortest time between freezing a ring (pausing it or disabling its
/// events) and re-reading its `data_head`.
pub const WRITER_GRACE: std::time::Duration = std::time::Duration::from_micros(5);

/// What a freeze left: the set whose ring is now frozen, and the window
/// the newly enabled standby ring held when it was frozen last.
struct Frozen {
    set: usize,
    earlier: Option<EarlierWindow>,
}

/// The window a standby ring held when it was last frozen: `len` bytes of
/// records from `head` (its `data_head` then, and when it was enabled
/// again) toward older ones. The kernel overwrites it from its oldest end
/// once the ring records again.
#[derive(Clone, Copy)]
struct EarlierWindow {
    set: usize,
    head: u64,
    len: u64,
}

/// Stops the kernel writing `cpu`'s active ring. With a standby set, that
/// set is enabled before the active one is disabled: the two overlap for a
/// few microseconds (a record of that moment may be in both windows),
/// never leave a gap. Without one, the ring is paused (writes dropped,
/// counted).
fn freeze(cpu: &CpuRing) -> Result<Frozen, PerfError> {
    let active = cpu.active.load(Ordering::Acquire);
    if cpu.sets.len() == 1 {
        cpu.sets[active].ring.pause()?;
        return Ok(Frozen {
            set: active,
            earlier: None,
        });
    }
    let standby = (active + 1) % cpu.sets.len();
    let next = &cpu.sets[standby];
    // Disabled since the last capture copied it: its head is still.
    let still = next.ring.data_head();
    let earlier = EarlierWindow {
        set: standby,
        head: still,
        len: next
            .enabled_at_head
            .load(Ordering::Acquire)
            .wrapping_sub(still),
    };
    next.enabled_at_head.store(still, Ordering::Release);
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
    Ok(Frozen {
        set: active,
        earlier: Some(earlier),
    })
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
    let set = &cpu.sets[frozen.set];
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
    let mut summary = RecordFilter::all(layouts).retain(&mut records);

    // Only a window whole back to where its set was enabled joins the
    // earlier one without a gap between them.
    let whole = range.len == since_enabled && summary.corruption.is_none();
    if let Some(earlier) = frozen.earlier.filter(|e| whole && e.len > 0) {
        let older = earlier_records(cpu, earlier, &mut scratch);
        // Both sets recorded the moment of the switch: a window must not
        // hold the same moment twice.
        let range = summary.oldest.map_or(TimeRange::ALL, TimeRange::before);
        let older_summary = RecordFilter::in_range(layouts, range).append(&older, &mut records);
        summary.merge(&older_summary);
    }
    drop(scratch);

    let lost_after = cpu.lost()?;
    cpu.last_lost.store(lost_after, Ordering::Relaxed);
    Ok(CpuCapture {
        cpu: ring.cpu(),
        event_id: ring.ids().first().copied(),
        record_count: summary.count,
        ring_bytes: size,
        wrapped: since_enabled > size,
        oldest: summary.oldest,
        newest: summary.newest,
        lost_while_paused: lost_after.saturating_sub(lost_before),
        lost_since_start: lost_after,
        pause,
        corruption: range
            .corruption
            .map(|c| c.to_string())
            .or(summary.corruption.map(|c| c.to_string())),
        records,
    })
}

/// The records of `earlier` the kernel has not overwritten since its ring
/// was enabled again, newest first, copied through `scratch`.
fn earlier_records(cpu: &CpuRing, earlier: EarlierWindow, scratch: &mut [u8]) -> Vec<u8> {
    let ring = &cpu.sets[earlier.set].ring;
    ring.copy_used(ring.data_head(), scratch);
    // The ring records again: wait for writers that began before the copy
    // ended to publish their head, then trust only what no write reached.
    let copied_at = Instant::now();
    while copied_at.elapsed() < WRITER_GRACE {
        std::hint::spin_loop();
    }
    let overwritten = earlier.head.wrapping_sub(ring.data_head());
    let trusted = (scratch.len() as u64)
        .saturating_sub(overwritten)
        .min(earlier.len);
    let range = find_range_limited(scratch, earlier.head, trusted);
    let mut records = Vec::with_capacity(usize::try_from(range.len).unwrap_or(0));
    copy_range(scratch, &range, &mut records);
    records
}
