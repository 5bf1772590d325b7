//! One dump: reserve a name, capture the rings, write the snapshot, apply
//! retention, tell the watchers; all of it off the async threads.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use flightrec_config::Compression;

use super::config::retention_of;
use super::{DumpDone, DumpFailure, DumpOutput, DumpResult, DumpTimings, Event, State};
use crate::perf::sched::RealtimeDump;
use crate::recorder::{CaptureError, Recorder};
use crate::snapshot::output::{self, SnapshotError};
use crate::snapshot::perfdata::WriteOptions;
use crate::store::StoreError;
use crate::triggers::DumpSpec;

/// Why the capture-and-write step failed.
#[derive(Debug, thiserror::Error)]
enum WriteFailure {
    #[error("capture failed: {0}")]
    Capture(#[from] CaptureError),
    #[error(transparent)]
    Write(#[from] SnapshotError),
}

/// Freezes the rings, copies them out and writes `dir/file_name`
/// atomically; `compression` is a zstd level.
fn capture_and_write(
    recorder: &Recorder,
    dir: &Path,
    file_name: &str,
    compression: Option<i32>,
) -> Result<DumpOutput, WriteFailure> {
    let started = Instant::now();
    let capture = recorder.capture()?;
    let capture_time = started.elapsed();
    let opts = WriteOptions {
        compression,
        host: Some(recorder.host()),
    };
    let written = output::write_snapshot(&capture, &opts, dir, file_name)?;
    Ok(DumpOutput {
        bytes: written.bytes,
        cpus: capture.cpus,
        tracking_records: capture.tracking_record_count,
        capture: capture_time,
        write: written.elapsed,
    })
}

impl State {
    /// One dump, run by the dump task: all of it (file system, capture,
    /// write, retention) on a blocking thread, off the async workers that
    /// keep answering `Status` and friends.
    pub(super) async fn execute_dump(self: Arc<Self>, spec: DumpSpec) -> DumpResult {
        let state = self.clone();
        tokio::task::spawn_blocking(move || state.dump_blocking(&spec))
            .await
            .unwrap_or_else(|join| {
                Err(DumpFailure::Failed(format!(
                    "the dump thread failed: {join}"
                )))
            })
    }

    fn dump_blocking(&self, spec: &DumpSpec) -> DumpResult {
        let started = Instant::now();
        let cur = self.current();
        let snap = &cur.config.config.snapshot;
        let compression = (spec.compress || snap.compression == Compression::Zstd)
            .then_some(*snap.level.get_ref());
        let _realtime = RealtimeDump::enter(*snap.realtime_priority.get_ref());
        let reservation = cur
            .store
            .reserve(spec.label.as_deref(), &spec.trigger, SystemTime::now())
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
                let written =
                    capture_and_write(&cur.recorder, cur.store.dir(), &r.file_name(), compression);
                if written.is_ok() {
                    cur.store.adopt(&r);
                }
                match written {
                    Ok(output) => match cur.store.get(&r.id()) {
                        Ok(snapshot) => Ok((snapshot, output)),
                        Err(e) => Err(DumpFailure::Failed(e.to_string())),
                    },
                    Err(e) => {
                        cur.store.abandon(&r);
                        let disk_full = matches!(&e, WriteFailure::Write(w) if w.is_disk_full());
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
                self.publish(Event::SnapshotCreated(snapshot.clone()));
                let policy = retention_of(&cur.config.config);
                if let Err(e) = self.apply_retention(&policy, Some(&snapshot.id)) {
                    tracing::error!("retention after the dump failed: {e}");
                }
                Ok(Arc::new(DumpDone {
                    snapshot,
                    output,
                    timings,
                }))
            }
            Err(f) => {
                tracing::error!(trigger = %spec.trigger, "dump failed: {f}");
                self.publish(Event::DumpFailed {
                    error: f.to_string(),
                });
                Err(f)
            }
        }
    }
}
