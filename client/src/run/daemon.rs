//! The commands the daemon answers over its socket.

use std::path::PathBuf;
use std::time::Duration;

use flightrec_proto::FlightRecorderClient;
use flightrec_proto::v1 as pb;
use tonic::transport::Channel;

use super::print_line;
use crate::cli::Command;
use crate::render;
use crate::{ClientError, answered_within, call_error, connect};

/// The daemon's socket, and how long it gets to answer.
pub(super) struct Daemon {
    pub socket: PathBuf,
    pub timeout: Duration,
}

impl Daemon {
    pub async fn connect(&self) -> Result<FlightRecorderClient<Channel>, ClientError> {
        connect(&self.socket, self.timeout).await
    }

    /// A call that must be answered within the timeout.
    pub async fn answered<T>(
        &self,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, ClientError> {
        answered_within(&self.socket, self.timeout, call).await
    }

    /// A call that may take long (no deadline, but the connection's
    /// keep-alive pings end it when the daemon stops answering).
    pub async fn kept_alive<T>(
        &self,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, ClientError> {
        call.await
            .map(tonic::Response::into_inner)
            .map_err(|s| self.call_error(s))
    }

    fn call_error(&self, status: tonic::Status) -> ClientError {
        call_error(&self.socket, status, self.timeout)
    }
}

/// Connects, calls the daemon for `command` and prints its reply.
pub(super) async fn call(daemon: &Daemon, command: Command, json: bool) -> Result<(), ClientError> {
    let mut client = daemon.connect().await?;
    let text = match command {
        Command::Dump {
            label,
            compress,
            at,
            before,
            after,
            cgroups,
            containers,
        } => {
            // A dump may wait for its slot (snapshot.min_interval), for the
            // end of its window, and take long to write.
            let r = daemon
                .kept_alive(client.dump(pb::DumpRequest {
                    label: label.unwrap_or_default(),
                    compress,
                    at_unix_ns: at,
                    before_ns: before.map(nanos),
                    after_ns: after.map(nanos),
                    cgroup: cgroups,
                    container: containers,
                }))
                .await?;
            if r.window_missing_ns > 0 && !json {
                eprintln!(
                    "snapctl: the window asked for starts {} before the oldest record still \
                     held; the snapshot holds what is left",
                    render::duration(r.window_missing_ns)
                );
            }
            render::dump(&r, json)
        }
        Command::List => {
            let r = daemon.answered(client.list(pb::ListRequest {})).await?;
            render::list(&r, json)
        }
        Command::Rotate {
            keep,
            max_bytes,
            max_age,
            all,
        } => {
            let request = pb::RotateRequest {
                max_snapshots: keep,
                max_bytes,
                max_age_seconds: max_age,
                delete_all: all,
            };
            let r = daemon.answered(client.rotate(request)).await?;
            render::rotate(&r, json)
        }
        Command::Compress { id, level } => {
            // Compressing a big snapshot takes a while, like a dump.
            let r = daemon
                .kept_alive(client.compress(pb::CompressRequest {
                    id,
                    level: level.unwrap_or(0),
                }))
                .await?;
            render::compress(&r, json)
        }
        Command::Status => {
            let r = daemon.answered(client.status(pb::StatusRequest {})).await?;
            render::status(&r, json)
        }
        Command::Triggers => {
            let r = daemon.answered(client.status(pb::StatusRequest {})).await?;
            render::triggers(&r, json)
        }
        Command::Reload => {
            let r = daemon.answered(client.reload(pb::ReloadRequest {})).await?;
            render::reload(&r, json)
        }
        Command::Watch { count } => return watch(daemon, &mut client, count, json).await,
        Command::Archive { .. }
        | Command::Decompress { .. }
        | Command::Report { .. }
        | Command::Export { .. }
        | Command::Fleet { .. } => {
            unreachable!("handled before connecting")
        }
    };
    print_line(&text)
}

/// Prints the daemon's events as they come, `count` of them or until
/// interrupted; the stream ending is an error (the daemon went away).
async fn watch(
    daemon: &Daemon,
    client: &mut FlightRecorderClient<Channel>,
    count: Option<u64>,
    json: bool,
) -> Result<(), ClientError> {
    let mut stream = daemon.answered(client.watch(pb::WatchRequest {})).await?;
    let mut seen = 0u64;
    while count.is_none_or(|c| seen < c) {
        let event = stream.message().await.map_err(|s| daemon.call_error(s))?;
        let Some(event) = event else {
            return Err(ClientError::Connect {
                path: daemon.socket.clone(),
                message: "the daemon ended the stream (shutting down?)".into(),
            });
        };
        print_line(&render::watch_event(&event, json))?;
        seen += 1;
    }
    Ok(())
}

/// A duration as the API's `_ns` fields carry it.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
