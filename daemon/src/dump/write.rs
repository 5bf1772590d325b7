//! A dump's file: what the rings hold, or a window cut from the history,
//! into the store under a reserved name; then the answer to its callers,
//! the log, Watch and retention.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::error::DumpError;
use super::outcome::{CpuWritten, DumpDone, DumpOutput, DumpTimings};
use super::queue::Member;
use super::request::{Served, Waiter};
use super::retention::apply_retention;
use super::scope;
use super::spec::Spec;
use super::window::{HeldWindow, WallWindow, held};
use super::{Hooks, Setup};
use crate::events::{Event, EventBus};
use crate::history::cut::{collect_pids, gap, held as history_held, joined_events, write_cut};
use crate::host::ClockReference;
use crate::recorder::Capture;
use crate::snapshot::output::SnapshotError;
use crate::snapshot::output::{self, Target};
use crate::snapshot::perfdata::WriteOptions;
use crate::time::WallTime;

/// How long a dump from the history waits for the writer to put what is
/// pending on disk.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// What the pipeline keeps between dumps, for `Status`.
#[derive(Default)]
pub(super) struct Figures {
    pub(super) last: Mutex<Option<DumpTimings>>,
    pub(super) count: AtomicU64,
}

/// What every dump shares: the hooks, the bus, the figures.
pub(super) struct Pipeline {
    pub(super) hooks: Hooks,
    pub(super) events: EventBus,
    pub(super) figures: Figures,
}

/// A frozen capture and the triggers it serves.
pub(super) struct Job {
    pub(super) members: Vec<Member<Waiter>>,
    pub(super) capture: Arc<Capture>,
    /// The wall-clock instant of the freeze: where a window ending at the
    /// freeze ends.
    pub(super) frozen_at: WallTime,
    /// From its first trigger to the freeze.
    pub(super) wait: Duration,
    pub(super) capture_time: Duration,
}

/// What a window is held by, for the messages that say so.
fn held_by(history: bool) -> &'static str {
    if history {
        "memory rings and the history"
    } else {
        "memory rings"
    }
}

impl Pipeline {
    /// Writes what the rings hold of the members' windows.
    pub(super) fn write_rings(&self, setup: &Setup, mut job: Job) {
        let spec = Spec::of(&job.members);
        // The capture is shared with a history job of the same freeze only
        // when both exist; then this part is a copy.
        let capture = Arc::try_unwrap(std::mem::take(&mut job.capture))
            .unwrap_or_else(|shared| (*shared).clone());
        let result = self.rings_file(setup, &job, &spec, capture);
        self.answer(setup, job, &spec, result);
    }

    fn rings_file(
        &self,
        setup: &Setup,
        job: &Job,
        spec: &Spec,
        mut capture: Capture,
    ) -> Result<(Capture, HeldWindow), DumpError> {
        let window = spec.window;
        // Read after the freeze: nothing reads a clock on the way to it.
        let clock = ClockReference::now();
        if !window.is_open() {
            let clock = clock.as_ref().ok_or(DumpError::Clock)?;
            capture.cut(window.to_samples(clock));
        }
        let held_from = clock.zip(capture.held_from).map(|(c, h)| c.wall_of(h));
        let held = held(window, job.frozen_at, held_from, Duration::ZERO).map_err(|o| {
            DumpError::OutsideWindow {
                end: o.end,
                held_from: o.held_from,
                held_by: held_by(setup.history.is_some()),
            }
        })?;
        if !held.missing.is_zero() {
            tracing::warn!(
                asked_from = %window.start.unwrap_or_default(),
                held_from = %held.start,
                missing = %humantime::format_duration(held.missing),
                "the window asked for starts before the oldest record the memory rings still \
                 hold; the snapshot holds what is left"
            );
        }
        Ok((capture, held))
    }

    /// Writes the members' window cut from the history, then what `job`'s
    /// rings hold after it.
    pub(super) fn write_history(&self, setup: &Setup, job: Job) {
        let spec = Spec::of(&job.members);
        let result = self.history_file(setup, &job, &spec);
        match result {
            Ok(done) => self.answer_done(setup, job, &spec, done),
            Err(e) => self.fail(job.members, &spec, e),
        }
    }

    fn history_file(&self, setup: &Setup, job: &Job, spec: &Spec) -> Result<DumpDone, DumpError> {
        let started = Instant::now();
        let Some(history) = &setup.history else {
            return Err(DumpError::ShuttingDown);
        };
        if !history.flush(FLUSH_WAIT) {
            tracing::warn!(
                "the history writer did not answer within {}s: the window is cut from what it \
                 wrote so far",
                FLUSH_WAIT.as_secs()
            );
        }
        let segments = history.segments();
        let clock = ClockReference::now().ok_or(DumpError::Clock)?;
        let window = WallWindow {
            start: spec.window.start,
            end: Some(spec.window.end.unwrap_or(job.frozen_at)),
        };
        let range = window.to_samples(&clock);
        let ring = &job.capture;
        let oldest = match (history_held(&segments).map(|h| h.0), ring.held_from) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let gap = gap(ring.held_from, &segments, range);
        let held =
            held(window, job.frozen_at, oldest.map(|o| clock.wall_of(o)), gap).map_err(|o| {
                DumpError::OutsideWindow {
                    end: o.end,
                    held_from: o.held_from,
                    held_by: held_by(true),
                }
            })?;
        if !gap.is_zero() {
            tracing::warn!(
                gap = %humantime::format_duration(gap),
                "the window has a gap: the history stopped before the oldest record the memory \
                 rings still hold; the snapshot holds what is on either side"
            );
        }
        if held.missing > gap {
            tracing::warn!(
                asked_from = %window.start.unwrap_or_default(),
                held_from = %held.start,
                missing = %humantime::format_duration(held.missing - gap),
                "the window asked for starts before the oldest record the history still holds; \
                 the snapshot holds what is left"
            );
        }
        let events = joined_events(&ring.events, &segments);
        let scope = match spec.scope.is_machine() {
            true => None,
            false => {
                let ids = scope::resolve(&spec.scope, &ring.cgroups, setup.names.as_deref())?;
                let mut filter = scope::filter(ids, &events, &setup.recorder.host());
                collect_pids(&segments, range, &events, &mut filter).map_err(|e| {
                    DumpError::Write(Arc::new(SnapshotError::Input {
                        path: setup.store.dir().to_path_buf(),
                        source: e,
                    }))
                })?;
                filter.collect_pids_of_ring(ring);
                Some(filter)
            }
        };
        let reservation = setup
            .store
            .reserve_scoped(
                spec.label.as_deref(),
                &spec.trigger,
                &spec.matched,
                job.frozen_at.to_system_time(),
                Some((held.start, held.end)),
                &spec.scope.describe(),
            )
            .map_err(|e| DumpError::of_store(e, setup.store.dir()))?;
        let file_name = reservation.file_name();
        let target = Target {
            dir: setup.store.dir(),
            file_name: &file_name,
            group: setup.store.group_id(),
            placed: Some(reservation.sidecar()),
        };
        let mut figures = None;
        let written = output::write_encoded(
            &target,
            &setup.recorder.host(),
            events,
            self.compression(setup, spec),
            &ring.loaded_modules,
            |encoder| {
                if let Some(filter) = scope {
                    encoder.set_scope(filter);
                }
                figures = Some(write_cut(ring, &segments, range, encoder)?);
                Ok(())
            },
        );
        let written = match written {
            Ok(w) => w,
            Err(e) => {
                setup.store.abandon(&reservation);
                return Err(DumpError::of_write(e, setup.store.dir()));
            }
        };
        let figures = figures.unwrap_or_default();
        if figures.read.bad_frames > 0 || figures.read.skipped_segments > 0 {
            tracing::warn!(
                frames = figures.read.bad_frames,
                segments = figures.read.skipped_segments,
                "history frames that failed their checksum, and segments that could not be \
                 opened as the daemon's own, were left out of the window"
            );
        }
        let snapshot =
            self.with_containers(setup, &reservation.id(), &written.cgroups, &ring.cgroups)?;
        let output = DumpOutput {
            bytes: written.bytes,
            cpus: figures
                .cpus
                .iter()
                .map(|(&cpu, kept)| {
                    CpuWritten::of_cut(cpu, kept, ring.cpus.iter().find(|c| c.cpu == cpu))
                })
                .collect(),
            tracking_records: figures.tracking.count,
            capture: job.capture_time,
            write: started.elapsed(),
            sync: written.synced,
            window: held,
        };
        Ok(self.timed(job, output, snapshot))
    }

    /// The snapshot `id` as `List` shows it, its sidecar told which
    /// containers it holds samples of (`sampled` per cgroup id).
    fn with_containers(
        &self,
        setup: &Setup,
        id: &str,
        sampled: &std::collections::BTreeMap<u64, u64>,
        cgroups: &[(u64, Arc<str>)],
    ) -> Result<crate::store::SnapshotInfo, DumpError> {
        let containers = scope::containers_of(sampled, cgroups, setup.names.as_deref());
        if !containers.is_empty()
            && let Err(e) = setup.store.set_containers(id, containers)
        {
            tracing::warn!(
                id,
                "the snapshot's containers were not written to its sidecar: {e}"
            );
        }
        setup
            .store
            .get(id)
            .map_err(|e| DumpError::Store(Arc::new(e)))
    }

    fn compression(&self, setup: &Setup, spec: &Spec) -> Option<i32> {
        spec.compress
            .unwrap_or(setup.compress_by_default)
            .then_some(setup.level)
    }

    fn timed(
        &self,
        job: &Job,
        output: DumpOutput,
        snapshot: crate::store::SnapshotInfo,
    ) -> DumpDone {
        let wait = job.wait;
        DumpDone {
            timings: DumpTimings {
                wait,
                capture: output.capture,
                write: output.write,
                sync: output.sync,
                total: wait + output.capture + output.write,
                max_pause: output
                    .cpus
                    .iter()
                    .map(|c| c.pause)
                    .max()
                    .unwrap_or_default(),
            },
            snapshot,
            output,
        }
    }

    /// Writes a capture cut to its window and answers.
    fn answer(
        &self,
        setup: &Setup,
        job: Job,
        spec: &Spec,
        cut: Result<(Capture, HeldWindow), DumpError>,
    ) {
        let done = cut.and_then(|(mut capture, held)| {
            let started = Instant::now();
            let scope = match spec.scope.is_machine() {
                true => None,
                false => {
                    let ids =
                        scope::resolve(&spec.scope, &capture.cgroups, setup.names.as_deref())?;
                    let filter = scope::filter(ids, &capture.events, &setup.recorder.host());
                    Some(scope::with_pids_of(filter, &capture))
                }
            };
            let reservation = setup
                .store
                .reserve_scoped(
                    spec.label.as_deref(),
                    &spec.trigger,
                    &spec.matched,
                    job.frozen_at.to_system_time(),
                    Some((held.start, held.end)),
                    &spec.scope.describe(),
                )
                .map_err(|e| DumpError::of_store(e, setup.store.dir()))?;
            let opts = WriteOptions {
                compression: self.compression(setup, spec),
                host: Some(setup.recorder.host()),
                scope,
            };
            let written = output::write_snapshot_in_group(
                &capture,
                &opts,
                setup.store.dir(),
                &reservation.file_name(),
                setup.store.group_id(),
                Some(reservation.sidecar()),
            )
            .map_err(|e| {
                setup.store.abandon(&reservation);
                DumpError::of_write(e, setup.store.dir())
            })?;
            let output = DumpOutput {
                bytes: written.bytes,
                cpus: capture.cpus.iter().map(CpuWritten::from).collect(),
                tracking_records: capture.tracking_record_count,
                capture: job.capture_time,
                write: started.elapsed(),
                sync: written.synced,
                window: held,
            };
            let cgroups = std::mem::take(&mut capture.cgroups);
            // The records are freed before the heap is trimmed: the reply
            // needs only their figures.
            drop(capture);
            let snapshot =
                self.with_containers(setup, &reservation.id(), &written.cgroups, &cgroups)?;
            Ok(self.timed(&job, output, snapshot))
        });
        match done {
            Ok(done) => self.answer_done(setup, job, spec, done),
            Err(e) => self.fail(job.members, spec, e),
        }
    }

    fn answer_done(&self, setup: &Setup, job: Job, spec: &Spec, done: DumpDone) {
        let snapshot = &done.snapshot;
        tracing::info!(
            id = %snapshot.id,
            bytes = snapshot.bytes,
            trigger = %spec.trigger,
            triggers = spec.triggers,
            records = done.output.cpus.iter().map(|c| c.record_count).sum::<u64>(),
            ms = done.timings.total.as_millis() as u64,
            "snapshot written"
        );
        // The JIT maps of its processes, before anyone is told of it: they
        // may be gone once the caller has its answer.
        setup
            .store
            .keep_perf_maps(&snapshot.id, crate::host::perf_maps::collect());
        *self
            .figures
            .last
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(done.timings);
        self.figures.count.fetch_add(1, Ordering::Relaxed);
        (self.hooks.written)(&done, &spec.kinds);
        self.events
            .publish(Event::SnapshotCreated(snapshot.clone()));
        if let Err(e) = apply_retention(
            &setup.store,
            &self.events,
            &setup.retention,
            Some(&snapshot.id),
        ) {
            tracing::error!("retention after the dump failed: {e}");
        }
        // The dump's buffers are freed: give the pages back.
        drop(job.capture);
        crate::perf::heap::release_free_memory();
        let done = Arc::new(done);
        let coalesced = job.members.len() > 1;
        for m in job.members {
            if let Some(w) = m.waiter {
                let _ = w.send(Ok(Served {
                    done: Arc::clone(&done),
                    coalesced,
                }));
            }
        }
    }

    /// Answers `members` with `e`, logged as the caller's mistake or the
    /// daemon's failure.
    pub(super) fn fail(&self, members: Vec<Member<Waiter>>, spec: &Spec, e: DumpError) {
        if e.is_callers() {
            tracing::warn!(trigger = %spec.trigger, "dump refused: {e}");
        } else {
            tracing::error!(trigger = %spec.trigger, "dump failed: {e}");
        }
        self.events.publish(Event::DumpFailed {
            error: e.to_string(),
        });
        for m in members {
            if let Some(w) = m.waiter {
                let _ = w.send(Err(e.clone()));
            }
        }
    }
}

/// Which members the rings cannot serve: a start older than the oldest
/// record they held, when the history reaches back further.
pub(super) fn needs_history(
    window: &WallWindow,
    capture: &Capture,
    history_oldest: Option<crate::time::SampleTime>,
    clock: Option<&ClockReference>,
) -> bool {
    let (Some(start), Some(clock), Some(history_oldest)) = (window.start, clock, history_oldest)
    else {
        return false;
    };
    let start = clock.sample_of(start);
    let ring_from = capture.held_from;
    ring_from.is_none_or(|r| start < r && history_oldest < r)
}
