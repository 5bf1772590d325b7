//! The gRPC handlers: each parses its request into a [`Command`] (checking
//! every field it can without the daemon's state), hands it to the one
//! dispatcher, [`State::dispatch`], and converts the reply.

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
    dump_reply, snapshot_pb, snapshots_pb, status_of, status_reply, watch_event_pb,
};
use crate::control::command::{Command, CommandError, Reply, RotateLimits};
use crate::control::{self, State};
use crate::store::validate_label;
use crate::triggers::WindowRequest;

/// Watch streams open at once, all connections together; beyond,
/// RESOURCE_EXHAUSTED.
pub const MAX_WATCHERS: usize = 64;

/// The service implementation.
pub struct Api {
    state: Arc<State>,
    /// Watch streams open now.
    watchers: Arc<AtomicUsize>,
}

impl Api {
    pub fn new(state: Arc<State>) -> Self {
        Self {
            state,
            watchers: Arc::new(AtomicUsize::new(0)),
        }
    }

    async fn run(&self, command: Command) -> Result<Reply, Status> {
        self.state.dispatch(command).await.map_err(status_of)
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

/// `DumpRequest` as a command: the label is checked here.
pub fn dump_command(req: pb::DumpRequest) -> Result<Command, CommandError> {
    let label = (!req.label.is_empty()).then_some(req.label);
    if let Some(l) = &label {
        validate_label(l)?;
    }
    Ok(Command::Dump {
        label,
        compress: req.compress,
        window: WindowRequest {
            at_unix_ns: req.at_unix_ns,
            before: req.before_ns.map(Duration::from_nanos),
            after: req.after_ns.map(Duration::from_nanos),
        },
    })
}

/// `RotateRequest` as a command: absent limits are 0, "no limit".
pub fn rotate_command(req: &pb::RotateRequest) -> Command {
    Command::Rotate(RotateLimits {
        max_snapshots: req.max_snapshots.unwrap_or(0),
        max_bytes: req.max_bytes.unwrap_or(0),
        max_age: Duration::from_secs(req.max_age_seconds.unwrap_or(0)),
        delete_all: req.delete_all,
    })
}

/// `CompressRequest` as a command: level 0 means the configured one.
pub fn compress_command(req: pb::CompressRequest) -> Result<Command, CommandError> {
    let level = match req.level {
        0 => None,
        l @ 1..=22 => Some(l),
        l => {
            return Err(CommandError::InvalidArgument {
                field: "level",
                message: format!("{l} is not a zstd level (1 to 22, or 0 for the configured one)"),
            });
        }
    };
    Ok(Command::Compress { id: req.id, level })
}

fn unexpected(reply: Reply) -> Status {
    Status::internal(format!("the dispatcher answered with {reply:?}"))
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchEvent, Status>> + Send>>;

#[tonic::async_trait]
impl FlightRecorder for Api {
    async fn dump(
        &self,
        request: Request<pb::DumpRequest>,
    ) -> Result<Response<pb::DumpReply>, Status> {
        let command = dump_command(request.into_inner()).map_err(status_of)?;
        match self.run(command).await? {
            Reply::Dump { done, coalesced } => Ok(Response::new(dump_reply(&done, coalesced))),
            other => Err(unexpected(other)),
        }
    }

    async fn list(
        &self,
        _request: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListReply>, Status> {
        match self.run(Command::List).await? {
            Reply::List(list) => Ok(Response::new(pb::ListReply {
                snapshots: snapshots_pb(&list),
            })),
            other => Err(unexpected(other)),
        }
    }

    async fn rotate(
        &self,
        request: Request<pb::RotateRequest>,
    ) -> Result<Response<pb::RotateReply>, Status> {
        match self.run(rotate_command(request.get_ref())).await? {
            Reply::Rotate { removed, kept } => Ok(Response::new(pb::RotateReply {
                removed: snapshots_pb(&removed),
                kept: snapshots_pb(&kept),
            })),
            other => Err(unexpected(other)),
        }
    }

    async fn compress(
        &self,
        request: Request<pb::CompressRequest>,
    ) -> Result<Response<pb::CompressReply>, Status> {
        let command = compress_command(request.into_inner()).map_err(status_of)?;
        match self.run(command).await? {
            Reply::Compress {
                bytes_before,
                after,
            } => Ok(Response::new(pb::CompressReply {
                snapshot: Some(snapshot_pb(&after)),
                bytes_before,
            })),
            other => Err(unexpected(other)),
        }
    }

    async fn status(
        &self,
        _request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusReply>, Status> {
        match self.run(Command::Status).await? {
            Reply::Status(report) => Ok(Response::new(status_reply(*report))),
            other => Err(unexpected(other)),
        }
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        _request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        if self.state.is_shutting_down() {
            return Err(status_of(CommandError::ShuttingDown));
        }
        let slot = WatcherSlot::take(&self.watchers)?;
        tracing::debug!("watch stream opened");
        let mut events = self.state.subscribe();
        let mut stop = self.state.shutdown_signal();
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
        match self.run(Command::Reload).await? {
            Reply::Reload { changed, summary } => {
                Ok(Response::new(pb::ReloadReply { changed, summary }))
            }
            other => Err(unexpected(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_parsed_into_commands_naming_a_bad_field() {
        let bad = dump_command(pb::DumpRequest {
            label: "../x".into(),
            ..Default::default()
        })
        .unwrap_err();
        assert!(bad.to_string().starts_with("label: invalid label"), "{bad}");
        assert_eq!(
            dump_command(pb::DumpRequest {
                label: String::new(),
                compress: true,
                before_ns: Some(2_000_000_000),
                ..Default::default()
            })
            .unwrap(),
            Command::Dump {
                label: None,
                compress: true,
                window: WindowRequest {
                    before: Some(Duration::from_secs(2)),
                    ..Default::default()
                }
            }
        );
        let level = compress_command(pb::CompressRequest {
            id: "a".into(),
            level: 23,
        })
        .unwrap_err();
        assert_eq!(
            level.to_string(),
            "level: 23 is not a zstd level (1 to 22, or 0 for the configured one)"
        );
        assert_eq!(
            compress_command(pb::CompressRequest {
                id: "a".into(),
                level: 0,
            })
            .unwrap(),
            Command::Compress {
                id: "a".into(),
                level: None
            }
        );
        let rotate = rotate_command(&pb::RotateRequest {
            max_snapshots: Some(3),
            max_bytes: None,
            max_age_seconds: Some(60),
            delete_all: false,
        });
        assert_eq!(
            rotate,
            Command::Rotate(RotateLimits {
                max_snapshots: 3,
                max_bytes: 0,
                max_age: Duration::from_secs(60),
                delete_all: false
            })
        );
    }
}
