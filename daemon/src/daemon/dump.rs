//! One dump: reserve a name, capture and write off the async threads,
//! apply retention, tell the watchers.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use flightrec_config::Compression;
use flightrec_proto::v1 as pb;

use super::{DumpDone, DumpFailure, DumpResult, DumpTimings, State, retention_of, snapshot_pb};
use crate::perf::sched::RealtimeDump;
use crate::store::StoreError;
use crate::triggers::DumpSpec;

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
                let written = cur
                    .engine
                    .dump(cur.store.dir(), &r.file_name(), compression);
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
                        Err(if e.is_disk_full() {
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
                    records = output.cpus.iter().map(|c| c.records).sum::<u64>(),
                    ms = timings.total.as_millis() as u64,
                    "snapshot written"
                );
                *self.last_dump.lock().unwrap_or_else(|p| p.into_inner()) = Some(timings);
                self.dumps.fetch_add(1, Ordering::Relaxed);
                self.publish(pb::watch_event::Kind::SnapshotCreated(
                    pb::SnapshotCreated {
                        snapshot: Some(snapshot_pb(&snapshot)),
                    },
                ));
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
                let msg = match &f {
                    DumpFailure::DiskFull(m)
                    | DumpFailure::InvalidLabel(m)
                    | DumpFailure::Failed(m) => m.clone(),
                    DumpFailure::ShuttingDown => "shutting down".into(),
                };
                tracing::error!(trigger = %spec.trigger, "dump failed: {msg}");
                self.publish(pb::watch_event::Kind::DumpFailed(pb::DumpFailed {
                    error: msg,
                }));
                Err(f)
            }
        }
    }
}
