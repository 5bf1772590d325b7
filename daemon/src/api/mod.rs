//! The gRPC service `flightrec.v1.FlightRecorder` over a Unix socket.
//!
//! - [`socket`]: the socket file (mode, group, stale sockets);
//! - [`peer`]: who may connect and call, checked at accept and per request;
//! - `connections`: the connection cap, idle timeouts and keepalive;
//! - [`handlers`]: requests parsed into commands for the dispatcher;
//! - [`convert`]: replies, events and errors to protobuf and gRPC codes.

mod connections;
pub mod convert;
pub mod handlers;
pub mod peer;
pub mod socket;

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flightrec_proto::FlightRecorderServer;
use tokio::net::UnixListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use connections::{ApiConnection, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT};

use crate::log_limit::RateLimitedWarning;
pub use connections::{ConnectionLimits, Connections, Peer, open_fds, raise_fd_limit};
use handlers::Api;
use peer::{AuthorizeLayer, check_peer, current_group, off_runtime};

use crate::control::{self, Control};

/// Streams one connection may have open at once (HTTP/2
/// SETTINGS_MAX_CONCURRENT_STREAMS): more wait in the client.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 16;

/// Serves the API on `listener` until shutdown, admitting only peers that
/// pass the credential check against the current socket group, and at most
/// as many connections as the descriptor limit leaves room for beside what
/// dumps need.
pub async fn serve(
    state: Arc<Control>,
    listener: UnixListener,
    connections: Arc<Connections>,
) -> Result<(), tonic::transport::Error> {
    let (tx, rx) = mpsc::channel::<io::Result<ApiConnection>>(16);
    let mut stop = state.lifecycle.shutdown_signal();
    let admission = state.clone();
    let registry = connections.clone();
    tokio::spawn(async move {
        let fd_warning = RateLimitedWarning::per_minute();
        let cap_warning = RateLimitedWarning::per_minute();
        let refused_warning = RateLimitedWarning::per_minute();
        let mut failures: Option<u64> = None;
        loop {
            let accepted = tokio::select! {
                _ = control::stopped(&mut stop) => break,
                accepted = listener.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => {
                    if let Some(n) = failures.take() {
                        tracing::info!("accepting connections again after {n} failures");
                    }
                    stream
                }
                Err(e) => {
                    *failures.get_or_insert(0) += 1;
                    if let Some(held) = fd_warning.check(Instant::now()) {
                        tracing::warn!(
                            open = registry.open(),
                            "accept failed: {e} ({held} more since the last warning; \
                             repeated at most once a minute)"
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let cred = match stream.peer_cred() {
                Ok(c) => c,
                Err(e) => {
                    refused_warning.warn(|| {
                        format!("connection refused: cannot read the peer's credentials: {e}")
                    });
                    continue;
                }
            };
            // The check may wait on the group database, off the workers;
            // connections are still admitted in the order they came (the
            // cap evicts the quietest, and a new one must not be taken for
            // it).
            let group = current_group(&admission);
            let checked = off_runtime(move || {
                let peer = Peer::of(cred);
                check_peer(&peer, group).map(|()| peer)
            })
            .await;
            let peer = match checked {
                Ok(peer) => peer,
                Err(status) => {
                    refused_warning.warn(|| format!("connection refused: {}", status.message()));
                    continue;
                }
            };
            let (conn, evicted) = registry.admit(stream, peer);
            if evicted && let Some(held) = cap_warning.check(Instant::now()) {
                tracing::warn!(
                    max = registry.limits().max,
                    "too many API connections: the least recently active one was closed \
                     ({held} more since the last warning; repeated at most once a minute)"
                );
            }
            if tx.send(Ok(conn)).await.is_err() {
                break;
            }
        }
    });
    let reaper = connections.clone();
    let mut stop_reaper = state.lifecycle.shutdown_signal();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = control::stopped(&mut stop_reaper) => break,
                _ = tick.tick() => {}
            }
            let (handshake, idle) = reaper.reap();
            if handshake + idle > 0 {
                tracing::debug!(handshake, idle, "closed silent API connections");
            }
        }
    });
    let mut stop = state.lifecycle.shutdown_signal();
    let authorize = AuthorizeLayer {
        state: state.clone(),
    };
    let service = FlightRecorderServer::new(Api::new(state));
    tonic::transport::Server::builder()
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .layer(authorize)
        .add_service(service)
        .serve_with_incoming_shutdown(ReceiverStream::new(rx), async move {
            control::stopped(&mut stop).await;
        })
        .await
}
