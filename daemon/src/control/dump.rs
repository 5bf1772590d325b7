//! One dump: freeze and copy the rings, then reserve a name, write the
//! snapshot, apply retention, tell the watchers; all of it on the dump
//! thread, off the async workers.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use flightrec_config::Compression;

use super::config::retention_of;
use super::{DumpDone, DumpFailure, DumpOutput, DumpResult, DumpTimings, Event, State};
use crate::perf::sched::NormalPriority;
use crate::recorder::{Capture, Recorder};
use crate::snapshot::output::{self, SnapshotError};
use crate::snapshot::perfdata::WriteOptions;
use crate::store::StoreError;
use crate::triggers::DumpSpec;

/// Test builds only (the `testing` feature, never the release binary): a
/// dump with this label hangs the dump thread for good, so a test can see
/// the systemd watchdog restart the daemon.
#[cfg(feature = "testing")]
pub const HANG_DUMP_LABEL: &str = "testing-hang-dump-thread";

/// Writes a capture to `dir/file_name` atomically; `compression` is a
/// zstd level.
fn write_capture(
    recorder: &Recorder,
    capture: Capture,
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
        cpus: capture.cpus,
        tracking_records: capture.tracking_record_count,
        capture: capture_time,
        write: written.elapsed,
    })
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
        let captured = cur.recorder.capture();
        let capture_time = started.elapsed();
        // The rings are frozen: the rest (naming, writing, compressing,
        // retention) is ordinary work and runs at normal priority.
        let _normal = NormalPriority::enter();
        let captured = match captured {
            Ok(c) => c,
            Err(e) => {
                return self.dump_failed(spec, DumpFailure::Failed(format!("capture failed: {e}")));
            }
        };
        let reservation = cur
            .store
            .reserve(spec.label.as_deref(), &spec.trigger, frozen_at)
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
