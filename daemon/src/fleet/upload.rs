//! Shipping snapshots: every snapshot written while uploads are on is
//! queued on disk (its sidecar lists the destinations it has not reached,
//! see `store::uploads`) and sent by this task, oldest first, until each
//! destination has it. A failure (NATS down, a bucket not reachable) keeps
//! it queued and is retried with a growing pause; a restart resumes the
//! queue. Exactly once: an object already there under the same name with
//! the same digest is not sent again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use async_nats::Client;
use flightrec_config::{FleetConfig, S3Config};

use super::jetstream::{self, JetStreamDestination};
use super::object::headers_of;
use super::s3::S3Destination;
use crate::control::{self, Control};
use crate::events::{Event, Uploaded};
use crate::store::{SnapshotInfo, Store, unix_ns};

/// Destination names, as sidecars, Status and Watch give them.
pub const JETSTREAM: &str = "jetstream";
pub const S3: &str = "s3";

/// First pause after a failure; doubled up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(30);
/// The queue is looked at this often even without a new snapshot (a
/// snapshot queued by an earlier run, a destination back).
const RESCAN: Duration = Duration::from_secs(60);
/// Failures in a row that take a destination out of a pass.
const DOWN_AFTER: u32 = 2;
/// Opening the bucket (a JetStream request or two) may take this long
/// before the attempt counts as failed: while NATS is down requests wait.
const OPEN_DEADLINE: Duration = Duration::from_secs(10);

/// Where snapshots go with this `[fleet]`, in upload order.
pub fn destinations(fleet: &FleetConfig) -> Vec<String> {
    let mut to = Vec::new();
    if fleet.upload {
        to.push(JETSTREAM.to_string());
        if fleet.s3.is_some() {
            to.push(S3.to_string());
        }
    }
    to
}

/// An upload may take this long: a minute, plus a second per MiB (far
/// below any working link), so a stalled server cannot hold the queue.
fn upload_deadline(bytes: u64) -> Duration {
    Duration::from_secs(60 + bytes / (1 << 20))
}

/// What the upload task needs.
pub struct Uploader {
    pub state: Arc<Control>,
    pub client: Client,
    pub host: String,
    pub labels: BTreeMap<String, String>,
    pub bucket: String,
    pub replicas: usize,
    /// `[fleet] s3`, when set.
    pub s3: Option<S3Config>,
}

/// The destinations, opened on first use (and again after a failure that
/// may have left them unusable).
#[derive(Default)]
struct Opened {
    jetstream: Option<JetStreamDestination>,
    s3: Option<S3Destination>,
}

impl Uploader {
    /// Serves the queue until shutdown.
    pub async fn run(self) {
        let mut stop = self.state.lifecycle.shutdown_signal();
        let mut opened = Opened::default();
        let mut retry = FIRST_RETRY;
        loop {
            let pass = self.pass(&mut opened);
            let failed = tokio::select! {
                failed = pass => failed,
                () = control::stopped(&mut stop) => return,
            };
            let pause = if failed {
                let p = retry;
                retry = (retry * 2).min(MAX_RETRY);
                p
            } else {
                retry = FIRST_RETRY;
                RESCAN
            };
            tokio::select! {
                () = self.state.fleet.uploads_woken() => {}
                () = tokio::time::sleep(pause) => {}
                () = control::stopped(&mut stop) => return,
            }
        }
    }

    /// One pass over the queue; true when something failed. Everything
    /// that touches the output directory (listing, sidecars, their locks
    /// and fsyncs) runs on blocking threads: a slow file system stalls
    /// the queue, not the workers that answer the API.
    async fn pass(&self, opened: &mut Opened) -> bool {
        let store = self.state.live.current().store.clone();
        let configured = store.upload_destinations();
        let listed = {
            let store = store.clone();
            blocking(move || store.pending_uploads().map_err(|e| e.to_string())).await
        };
        let pending = match listed {
            Ok(p) => p,
            Err(e) => {
                self.failed("", "", format!("cannot read the upload queue: {e}"));
                return true;
            }
        };
        self.set_pending(pending.len());
        // Failures in a row per destination in this pass. One may be the
        // snapshot's own (an unreadable file), so the next snapshot is
        // still tried and one bad snapshot cannot hold the queue; two mean
        // the destination is down, and the rest waits for the next pass
        // (whose pause grows) rather than failing one snapshot after
        // another.
        let mut failures: BTreeMap<String, u32> = BTreeMap::new();
        let mut any_failed = false;
        let is_down = |failures: &BTreeMap<String, u32>, d: &str| {
            failures.get(d).copied().unwrap_or(0) >= DOWN_AFTER
        };
        for snapshot in pending {
            for destination in &snapshot.pending_uploads {
                if !configured.contains(destination) {
                    tracing::warn!(
                        id = %snapshot.id,
                        destination = %destination,
                        "fleet: this destination is no longer configured; the snapshot leaves its \
                         upload queue"
                    );
                    let _ = settle(&store, &snapshot.id, destination).await;
                    continue;
                }
                if is_down(&failures, destination) {
                    continue;
                }
                let result = match self.upload(opened, &snapshot, destination).await {
                    Ok(u) => settle(&store, &snapshot.id, destination).await.map(|()| u),
                    Err(e) => Err(e),
                };
                match result {
                    Ok(u) => {
                        failures.remove(destination);
                        self.done(u);
                    }
                    Err(e) => {
                        self.failed(&snapshot.id, destination, e);
                        *failures.entry(destination.clone()).or_default() += 1;
                        any_failed = true;
                    }
                }
            }
        }
        if let Ok(p) = blocking(move || store.pending_uploads().map_err(|e| e.to_string())).await {
            self.set_pending(p.len());
        }
        any_failed
    }

    async fn upload(
        &self,
        opened: &mut Opened,
        snapshot: &SnapshotInfo,
        destination: &str,
    ) -> Result<Uploaded, String> {
        let started = Instant::now();
        let path = snapshot.path.clone();
        let file_and_digest = blocking(move || Ok(jetstream::open_with_digest(&path)))
            .await
            .map_err(|e| format!("cannot read {}: {e}", snapshot.path.display()))?;
        let read = match file_and_digest {
            Ok(o) => o,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Removed (by a user or retention) since it was listed.
                return Err(format!("{} was removed before its upload", snapshot.id));
            }
            Err(e) => return Err(format!("cannot read {}: {e}", snapshot.path.display())),
        };
        // The file as opened: its size and compression now, not when
        // listed. JetStream is sent this descriptor; S3 reads the path
        // again, and refuses bytes that are not the ones digested here.
        let mut snapshot = snapshot.clone();
        snapshot.bytes = read.bytes;
        snapshot.compressed = read.compressed;
        let file = read.file;
        let headers = headers_of(&self.host, &self.labels, &snapshot, read.digest);
        let deadline = upload_deadline(snapshot.bytes);
        let (object, sent) = match destination {
            JETSTREAM => {
                if opened.jetstream.is_none() {
                    let open =
                        JetStreamDestination::open(&self.client, &self.bucket, self.replicas);
                    opened.jetstream = Some(
                        tokio::time::timeout(OPEN_DEADLINE, open)
                            .await
                            .map_err(|_| {
                                format!(
                                    "cannot open the bucket {:?} within {}s (is NATS reachable?)",
                                    self.bucket,
                                    OPEN_DEADLINE.as_secs()
                                )
                            })??,
                    );
                }
                let js = opened.jetstream.as_ref().ok_or("no bucket")?;
                let object = js.object_url(&headers);
                let sent = tokio::time::timeout(deadline, js.upload(file, &headers))
                    .await
                    .unwrap_or_else(|_| Err(too_slow(&object, deadline)));
                if sent.is_err() {
                    // Reopen the bucket next time (it may have been
                    // removed, or the cluster changed).
                    opened.jetstream = None;
                }
                (object, sent?)
            }
            S3 => {
                if opened.s3.is_none() {
                    let config = self.s3.clone().ok_or("fleet.s3 is not set")?;
                    // Reads the credentials file.
                    opened.s3 = Some(blocking(move || S3Destination::new(&config)).await?);
                }
                let s3 = opened.s3.as_ref().ok_or("no S3 destination")?;
                let object = s3.url(&headers);
                let sent = tokio::time::timeout(deadline, s3.upload(&snapshot.path, &headers))
                    .await
                    .unwrap_or_else(|_| Err(too_slow(&object, deadline)));
                if sent.is_err() {
                    // Read the credentials again next time (rotated keys).
                    opened.s3 = None;
                }
                (object, sent?)
            }
            other => return Err(format!("unknown upload destination {other:?}")),
        };
        Ok(Uploaded {
            snapshot,
            destination: destination.to_string(),
            object,
            seconds: started.elapsed().as_secs_f64(),
            already_there: !sent,
        })
    }

    fn done(&self, u: Uploaded) {
        tracing::info!(
            id = %u.snapshot.id,
            destination = %u.destination,
            object = %u.object,
            bytes = u.snapshot.bytes,
            ms = (u.seconds * 1000.0) as u64,
            already_there = u.already_there,
            "fleet: snapshot uploaded"
        );
        self.state.fleet.update(|r| {
            r.uploaded += 1;
            r.last_upload_unix_ns = unix_ns(SystemTime::now());
        });
        self.state.events.publish(Event::Uploaded(u));
    }

    fn failed(&self, id: &str, destination: &str, error: String) {
        tracing::warn!(id, destination, "fleet: upload failed: {error}");
        self.state.fleet.update(|r| {
            r.upload_failures += 1;
            r.last_upload_error = error.clone();
        });
        self.state.events.publish(Event::UploadFailed {
            id: id.to_string(),
            destination: destination.to_string(),
            error,
        });
    }

    fn set_pending(&self, n: usize) {
        self.state
            .fleet
            .update(|r| r.uploads_pending = u32::try_from(n).unwrap_or(u32::MAX));
    }
}

/// Runs `f` on a blocking thread (file systems, sidecar locks).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("worker thread failed: {e}"))?
}

/// Takes `destination` off the upload queue of snapshot `id`.
async fn settle(store: &Arc<Store>, id: &str, destination: &str) -> Result<(), String> {
    let (store, id, destination) = (store.clone(), id.to_string(), destination.to_string());
    blocking(move || {
        store
            .settle_upload(&id, &destination)
            .map(drop)
            .map_err(|e| e.to_string())
    })
    .await
}

fn too_slow(object: &str, deadline: Duration) -> String {
    format!(
        "the upload of {object} took more than {}s; retrying",
        deadline.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stalled_upload_is_cut_after_a_minute_plus_a_second_per_mib() {
        assert_eq!(upload_deadline(0), Duration::from_secs(60));
        assert_eq!(upload_deadline(512 << 20), Duration::from_secs(572));
    }
}
