//! The gRPC handlers: each parses its request (checking every field it
//! can without the daemon's state, errors naming the field), calls the
//! typed operation of the part that owns it, and converts the answer.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flightrec_proto::FlightRecorder;
use flightrec_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::log_limit::RateLimitedWarning;

use super::convert::{
    dump_reply, dump_status, reload_status, snapshot_pb, snapshots_pb, status_reply, watch_event_pb,
};
use crate::control::snapshots::RotateLimits;
use crate::control::{self, Control};
use crate::dump::{DumpError, DumpRequest, Scope, TriggerKind, WindowRequest};
use crate::store::validate_label;
use crate::time::WallTime;

/// Watch streams open at once, all connections together; beyond,
/// RESOURCE_EXHAUSTED.
pub const MAX_WATCHERS: usize = 64;

/// The service implementation.
pub struct Api {
    control: Arc<Control>,
    /// Watch streams open now.
    watchers: Arc<AtomicUsize>,
}

impl Api {
    pub fn new(control: Arc<Control>) -> Self {
        Self {
            control,
            watchers: Arc::new(AtomicUsize::new(0)),
        }
    }
}

/// One of [`MAX_WATCHERS`] places, given back when the stream ends.
struct WatcherSlot(Arc<AtomicUsize>);

impl WatcherSlot {
    fn take(count: &Arc<AtomicUsize>) -> Result<Self, Status> {
        count
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_WATCHERS).then_some(n + 1)
            })
            .map_err(|n| {
                Status::resource_exhausted(format!(
                    "watch: {n} Watch streams are open, the most flightrecd serves; \
                     close one and try again"
                ))
            })?;
        Ok(WatcherSlot(count.clone()))
    }
}

impl Drop for WatcherSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `DumpRequest` as the dump pipeline takes it: the label is checked
/// and the window resolved against the clock now.
pub fn dump_request(req: pb::DumpRequest, now: WallTime) -> Result<DumpRequest, DumpError> {
    let label = (!req.label.is_empty()).then_some(req.label);
    if let Some(l) = &label {
        validate_label(l).map_err(|e| DumpError::InvalidArgument {
            field: "label",
            message: e.to_string(),
        })?;
    }
    let window = WindowRequest {
        at: req.at_unix_ns.map(WallTime::from_unix_nanos),
        before: req.before_ns.map(Duration::from_nanos),
        after: req.after_ns.map(Duration::from_nanos),
    }
    .resolve(now)
    .map_err(|e| DumpError::InvalidArgument {
        field: e.field,
        message: e.message,
    })?;
    let scope = Scope::new(req.cgroup, req.container)?;
    Ok(DumpRequest {
        label,
        // `compress: false` asks for nothing: [snapshot] compression applies.
        compress: req.compress.then_some(true),
        window,
        scope,
    })
}

/// `RotateRequest`'s limits: absent limits and 0 are "no limit", as in
/// the config file.
pub fn rotate_limits(req: &pb::RotateRequest) -> RotateLimits {
    RotateLimits {
        max_snapshots: req.max_snapshots.filter(|&n| n > 0),
        max_bytes: req.max_bytes.filter(|&n| n > 0),
        max_age: req
            .max_age_seconds
            .filter(|&n| n > 0)
            .map(Duration::from_secs),
        delete_all: req.delete_all,
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchEvent, Status>> + Send>>;

#[tonic::async_trait]
impl FlightRecorder for Api {
    async fn dump(
        &self,
        request: Request<pb::DumpRequest>,
    ) -> Result<Response<pb::DumpReply>, Status> {
        if self.control.lifecycle.is_shutting_down() {
            return Err(dump_status(DumpError::ShuttingDown));
        }
        let request = dump_request(request.into_inner(), WallTime::now()).map_err(dump_status)?;
        tracing::debug!(
            label = %crate::log_limit::cut(request.label.as_deref().unwrap_or("")),
            "dump requested over the API"
        );
        let served = self
            .control
            .dumps
            .dump(TriggerKind::Api, request)
            .await
            .map_err(dump_status)?;
        Ok(Response::new(dump_reply(&served.done, served.coalesced)))
    }

    async fn list(
        &self,
        _request: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListReply>, Status> {
        let list = self.control.snapshots.list().await.map_err(Status::from)?;
        Ok(Response::new(pb::ListReply {
            snapshots: snapshots_pb(&list),
        }))
    }

    async fn rotate(
        &self,
        request: Request<pb::RotateRequest>,
    ) -> Result<Response<pb::RotateReply>, Status> {
        let limits = rotate_limits(request.get_ref());
        let (removed, kept) = self
            .control
            .snapshots
            .rotate(limits)
            .await
            .map_err(Status::from)?;
        Ok(Response::new(pb::RotateReply {
            removed: snapshots_pb(&removed),
            kept: snapshots_pb(&kept),
        }))
    }

    async fn compress(
        &self,
        request: Request<pb::CompressRequest>,
    ) -> Result<Response<pb::CompressReply>, Status> {
        let req = request.into_inner();
        // 0 asks for the configured level.
        let level = (req.level != 0).then_some(req.level);
        let compressed = self
            .control
            .snapshots
            .compress(req.id, level)
            .await
            .map_err(Status::from)?;
        Ok(Response::new(pb::CompressReply {
            snapshot: Some(snapshot_pb(&compressed.after)),
            bytes_before: compressed.bytes_before,
        }))
    }

    async fn status(
        &self,
        _request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusReply>, Status> {
        let report = self.control.status().await.map_err(Status::from)?;
        Ok(Response::new(status_reply(report)))
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        _request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        if self.control.lifecycle.is_shutting_down() {
            return Err(dump_status(DumpError::ShuttingDown));
        }
        let slot = WatcherSlot::take(&self.watchers)?;
        let mut events = self.control.events.subscribe();
        // After the subscription: a client that saw this line misses no
        // event sent after it.
        tracing::debug!("watch stream opened");
        let mut stop = self.control.lifecycle.shutdown_signal();
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            let _slot = slot;
            loop {
                let event = tokio::select! {
                    _ = control::stopped(&mut stop) => break,
                    _ = tx.closed() => break,
                    e = events.recv() => e,
                };
                let item = match event {
                    Ok(e) => Ok(watch_event_pb(e)),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        static BEHIND: RateLimitedWarning = RateLimitedWarning::per_minute();
                        BEHIND.warn(|| format!("a watch client fell behind by {n} events"));
                        continue;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                };
                if tx.send(item).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn reload(
        &self,
        _request: Request<pb::ReloadRequest>,
    ) -> Result<Response<pb::ReloadReply>, Status> {
        let reloaded = self.control.reload().await.map_err(reload_status)?;
        Ok(Response::new(pb::ReloadReply {
            changed: reloaded.changed,
            summary: reloaded.summary,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: WallTime = WallTime::from_unix_nanos(1_800_000_000_000_000_000);

    #[test]
    fn requests_are_parsed_naming_a_bad_field() {
        let bad = dump_request(
            pb::DumpRequest {
                label: "../x".into(),
                ..Default::default()
            },
            NOW,
        )
        .unwrap_err();
        assert!(bad.to_string().starts_with("label: invalid label"), "{bad}");
        let after = dump_request(
            pb::DumpRequest {
                after_ns: Some(3_600_000_000_000),
                ..Default::default()
            },
            NOW,
        )
        .unwrap_err();
        assert!(matches!(
            after,
            DumpError::InvalidArgument {
                field: "after_ns",
                ..
            }
        ));
        let ok = dump_request(
            pb::DumpRequest {
                compress: true,
                before_ns: Some(2_000_000_000),
                ..Default::default()
            },
            NOW,
        )
        .unwrap();
        assert_eq!(ok.label, None);
        assert_eq!(ok.compress, Some(true));
        assert_eq!(
            ok.window.window.start,
            Some(NOW.saturating_sub(Duration::from_secs(2)))
        );
        let rotate = rotate_limits(&pb::RotateRequest {
            max_snapshots: Some(3),
            max_bytes: Some(0),
            max_age_seconds: Some(60),
            delete_all: false,
        });
        assert_eq!(
            rotate,
            RotateLimits {
                max_snapshots: Some(3),
                max_bytes: None,
                max_age: Some(Duration::from_secs(60)),
                delete_all: false
            }
        );
    }
}
