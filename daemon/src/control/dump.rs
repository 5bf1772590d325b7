//! One dump: freeze and copy the rings, then reserve a name, write the
//! snapshot, apply retention, tell the watchers; all of it on the dump
//! thread, off the async workers.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flightrec_config::Compression;

use super::config::retention_of;
use super::history::widen_with_history;
use super::outcome::{CpuWritten, HeldWindow};
use super::{DumpDone, DumpFailure, DumpOutput, DumpResult, DumpTimings, Event, State};
use crate::history::History;
use crate::host::ClockReference;
use crate::perf::sched::NormalPriority;
use crate::recorder::{Capture, Recorder, SampleWindow};
use crate::snapshot::output::{self, SnapshotError};
use crate::snapshot::perfdata::WriteOptions;
use crate::store::{StoreError, unix_ns};
use crate::triggers::{DumpSpec, WallWindow};

/// Test builds only (the `testing` feature, never the release binary): a
/// dump with this label hangs the dump thread for good, so a test can see
/// the systemd watchdog restart the daemon.
#[cfg(feature = "testing")]
pub const HANG_DUMP_LABEL: &str = "testing-hang-dump-thread";

/// Writes a capture to `dir/file_name` atomically; `compression` is a
/// zstd level.
fn write_capture(
    recorder: &Recorder,
    (capture, window): (Capture, HeldWindow),
    capture_time: Duration,
    dir: &Path,
    file_name: &str,
    compression: Option<i32>,
    group: Option<u32>,
) -> Result<DumpOutput, SnapshotError> {
    let opts = WriteOptions {
        compression,
        host: Some(recorder.host()),
    };
    let written = output::write_snapshot_in_group(&capture, &opts, dir, file_name, group)?;
    Ok(DumpOutput {
        bytes: written.bytes,
        cpus: capture.cpus.iter().map(CpuWritten::from).collect(),
        tracking_records: capture.tracking_record_count,
        capture: capture_time,
        write: written.elapsed,
        window,
    })
}

/// Freezes the rings and keeps the part of their past inside `asked`;
/// fails when none of it is still held.
fn capture_in(
    recorder: &Recorder,
    history: Option<&History>,
    asked: WallWindow,
    frozen_at: SystemTime,
) -> Result<(Capture, HeldWindow), DumpFailure> {
    let failed = |e| DumpFailure::Failed(format!("capture failed: {e}"));
    let freeze_unix_ns = unix_ns(frozen_at);
    if asked.is_open() {
        let capture = recorder.capture().map_err(failed)?;
        // Without a window asked for, no clock is read on the way to the
        // freeze.
        let start_unix_ns = ClockReference::now()
            .filter(|_| capture.window_start_ns > 0)
            .map_or(freeze_unix_ns, |c| {
                c.unix_ns_of_sample(capture.window_start_ns)
            });
        let window = HeldWindow {
            start_unix_ns,
            end_unix_ns: freeze_unix_ns,
            missing: Duration::ZERO,
        };
        return Ok((capture, window));
    }
    let clock = ClockReference::now()
        .ok_or_else(|| DumpFailure::Failed("the sample clock cannot be read".into()))?;
    let window = SampleWindow {
        start_ns: asked.start_unix_ns.map(|u| clock.sample_ns_of_unix(u)),
        end_ns: asked.end_unix_ns.map(|u| clock.sample_ns_of_unix(u)),
    };
    let capture = recorder.capture_window(window).map_err(failed)?;
    // A window older than the rings reach is cut from the history: the
    // rings are frozen, so reading it is ordinary work.
    let capture = match window.start_ns {
        Some(start_ns) => NormalPriority::run(|| {
            widen_with_history(
                history,
                capture,
                start_ns,
                window
                    .end_ns
                    .unwrap_or_else(|| clock.sample_ns_of_unix(freeze_unix_ns)),
            )
        }),
        None => capture,
    };
    let held_from =
        (capture.held_from_ns > 0).then(|| clock.unix_ns_of_sample(capture.held_from_ns));
    if let (Some(end), Some(held_from)) = (asked.end_unix_ns, held_from)
        && end < held_from
    {
        return Err(DumpFailure::OutsideWindow(format!(
            "the window asked for ends at {}, before the oldest record the {} still hold ({}): \
             nothing of it is left to dump",
            rfc3339(end),
            if history.is_some() {
                "memory rings and the history"
            } else {
                "memory rings"
            },
            rfc3339(held_from)
        )));
    }
    let start_unix_ns = match (asked.start_unix_ns, held_from) {
        (Some(start), Some(held)) => start.max(held),
        (Some(start), None) => start,
        (None, held) => held.unwrap_or(freeze_unix_ns),
    };
    let missing_ns = match (asked.start_unix_ns, held_from) {
        (Some(start), Some(held)) => held.saturating_sub(start).max(0),
        _ => 0,
    };
    if capture.gap_ns > 0 {
        tracing::warn!(
            gap = %humantime::format_duration(Duration::from_nanos(capture.gap_ns)),
            "the window has a gap: the history stopped before the oldest record the memory \
             rings still hold; the snapshot holds what is on either side"
        );
    }
    let missing_ns = missing_ns.saturating_add(i64::try_from(capture.gap_ns).unwrap_or(i64::MAX));
    let held = HeldWindow {
        start_unix_ns,
        end_unix_ns: asked.end_unix_ns.unwrap_or(freeze_unix_ns),
        missing: Duration::from_nanos(missing_ns.unsigned_abs()),
    };
    if !held.missing.is_zero() {
        tracing::warn!(
            asked_from = %rfc3339(asked.start_unix_ns.unwrap_or_default()),
            held_from = %rfc3339(start_unix_ns),
            missing = %humantime::format_duration(held.missing),
            "the window asked for starts before the oldest record the memory rings still hold; \
             the snapshot holds what is left"
        );
    }
    Ok((capture, held))
}

/// A wall-clock time as RFC 3339, to the millisecond.
fn rfc3339(unix_ns: i64) -> String {
    let t = if unix_ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(unix_ns.unsigned_abs())
    } else {
        UNIX_EPOCH
    };
    humantime::format_rfc3339_millis(t).to_string()
}

impl State {
    /// One dump, run on the dump thread: the freeze first (the rings are
    /// what the snapshot holds, and they keep overwriting until it), then
    /// the name, the sidecar, the write, retention and Watch.
    pub(super) fn dump_blocking(&self, spec: &DumpSpec) -> DumpResult {
        #[cfg(feature = "testing")]
        if spec.label.as_deref() == Some(HANG_DUMP_LABEL) {
            tracing::warn!("testing build: the dump thread hangs on purpose ({HANG_DUMP_LABEL})");
            loop {
                std::thread::park();
            }
        }
        let started = Instant::now();
        let cur = self.current();
        let snap = &cur.config.config.snapshot;
        let compression = spec
            .compress
            .unwrap_or(snap.compression == Compression::Zstd)
            .then_some(*snap.level.get_ref());
        let frozen_at = SystemTime::now();
        let captured = capture_in(&cur.recorder, self.history(), spec.window, frozen_at);
        let capture_time = started.elapsed();
        // The rings are frozen: the rest (naming, writing, compressing,
        // retention) is ordinary work and runs at normal priority.
        let _normal = NormalPriority::enter();
        let captured = match captured {
            Ok(c) => c,
            Err(f) => return self.dump_failed(spec, f),
        };
        let reservation = cur
            .store
            .reserve(
                spec.label.as_deref(),
                &spec.trigger,
                &spec.matched,
                frozen_at,
            )
            .map_err(|e| match e {
                StoreError::InvalidLabel { .. } => DumpFailure::InvalidLabel(e.to_string()),
                e if e.is_disk_full() => DumpFailure::DiskFull(format!(
                    "no space left in {} ({e})",
                    cur.store.dir().display()
                )),
                e => DumpFailure::Failed(e.to_string()),
            });
        let result = match reservation {
            Err(f) => Err(f),
            Ok(r) => {
                let written = write_capture(
                    &cur.recorder,
                    captured,
                    capture_time,
                    cur.store.dir(),
                    &r.file_name(),
                    compression,
                    cur.store.group_id(),
                );
                match written {
                    Ok(output) => match cur.store.get(&r.id()) {
                        Ok(snapshot) => Ok((snapshot, output)),
                        Err(e) => Err(DumpFailure::Failed(e.to_string())),
                    },
                    Err(e) => {
                        cur.store.abandon(&r);
                        let disk_full = e.is_disk_full();
                        Err(if disk_full {
                            DumpFailure::DiskFull(format!(
                                "disk full in {}: {e}; older snapshots are kept, free some \
                                 space (snapctl rotate) and dump again",
                                cur.store.dir().display()
                            ))
                        } else {
                            DumpFailure::Failed(e.to_string())
                        })
                    }
                }
            }
        };
        match result {
            Ok((snapshot, output)) => {
                let timings = DumpTimings {
                    wait: spec.waited,
                    capture: output.capture,
                    write: output.write,
                    total: spec.waited + started.elapsed(),
                    max_pause: output
                        .cpus
                        .iter()
                        .map(|c| c.pause)
                        .max()
                        .unwrap_or_default(),
                };
                tracing::info!(
                    id = %snapshot.id,
                    bytes = snapshot.bytes,
                    trigger = %spec.trigger,
                    triggers = spec.triggers,
                    records = output.cpus.iter().map(|c| c.record_count).sum::<u64>(),
                    ms = timings.total.as_millis() as u64,
                    "snapshot written"
                );
                *self.last_dump.lock().unwrap_or_else(|p| p.into_inner()) = Some(timings);
                self.dumps.fetch_add(1, Ordering::Relaxed);
                self.credit_dump(&spec.kinds);
                self.publish(Event::SnapshotCreated(snapshot.clone()));
                if !snapshot.pending_uploads.is_empty() {
                    self.fleet.wake_uploads();
                }
                let policy = retention_of(&cur.config.config);
                if let Err(e) = self.apply_retention(&policy, Some(&snapshot.id)) {
                    tracing::error!("retention after the dump failed: {e}");
                }
                // The dump's buffers are freed: give the pages back.
                crate::perf::heap::release_free_memory();
                Ok(Arc::new(DumpDone {
                    snapshot,
                    output,
                    timings,
                }))
            }
            Err(f) => self.dump_failed(spec, f),
        }
    }

    fn dump_failed(&self, spec: &DumpSpec, f: DumpFailure) -> DumpResult {
        tracing::error!(trigger = %spec.trigger, "dump failed: {f}");
        self.publish(Event::DumpFailed {
            error: f.to_string(),
        });
        Err(f)
    }
}
