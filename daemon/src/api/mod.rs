//! The gRPC service `flightrec.v1.FlightRecorder` over a Unix socket.
//!
//! The socket is created mode 0660 with the configured group; a stale
//! socket file (no daemon answers on it) is replaced, a live one is not.
//! Every accepted connection's peer credentials (SO_PEERCRED) are checked
//! before it reaches the server: root, the socket's owner and members of
//! the socket's group (primary or supplementary) are admitted, any other
//! peer is dropped with a log line. Handlers map failures to gRPC codes
//! with messages meant for the operator reading them.

mod connections;

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use flightrec_proto::v1 as pb;
use flightrec_proto::{FlightRecorder, FlightRecorderServer};
use nix::unistd::{Gid, Group, Uid, User};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use connections::{ApiConnection, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT, RateLimitedWarning};
pub use connections::{ConnectionLimits, Connections, Peer, open_fds, raise_fd_limit};

use crate::daemon::engine::EngineError;
use crate::daemon::{self, DumpDone, DumpFailure, State, recorder, snapshot_pb, timings_pb};
use crate::store::{
    RetentionPolicy, RewriteError, SnapshotInfo, StoreError, retention, retention_entries, unix_ns,
    validate_label,
};
use crate::triggers::{Outcome, TriggerKind};

/// Socket set-up failures, naming the socket.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error(
        "another flightrecd is already listening on {path}; stop it first or configure another daemon.socket"
    )]
    InUse { path: PathBuf },
    #[error("{path} exists and is not a socket; refusing to replace it")]
    NotASocket { path: PathBuf },
    #[error("cannot remove the stale socket {path}: {source}")]
    RemoveStale {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot create the socket directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot listen on {path}: {source}")]
    Bind {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot set mode 0660 on {path}: {source}")]
    Chmod {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot give {path} to group {gid}: {source}")]
    Chown {
        path: PathBuf,
        gid: u32,
        #[source]
        source: nix::Error,
    },
}

/// Fails if a daemon answers on `path`; removes a stale socket file.
pub async fn check_socket_free(path: &Path) -> Result<(), SocketError> {
    let Ok(md) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !md.file_type().is_socket() {
        return Err(SocketError::NotASocket { path: path.into() });
    }
    let probe = tokio::time::timeout(Duration::from_secs(1), UnixStream::connect(path)).await;
    if let Ok(Ok(_)) = probe {
        return Err(SocketError::InUse { path: path.into() });
    }
    tracing::info!(socket = %path.display(), "replacing a stale socket file");
    std::fs::remove_file(path).map_err(|source| SocketError::RemoveStale {
        path: path.into(),
        source,
    })
}

/// Binds `path` (0660, group `gid`), creating its directory (0750) if needed.
pub async fn bind_socket(path: &Path, gid: Option<Gid>) -> Result<UnixListener, SocketError> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
        && !dir.exists()
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(dir)
            .map_err(|source| SocketError::CreateDir {
                path: dir.into(),
                source,
            })?;
        // Members of the socket group must be able to reach the socket.
        set_socket_group(dir, gid)?;
    }
    check_socket_free(path).await?;
    let listener = UnixListener::bind(path).map_err(|source| SocketError::Bind {
        path: path.into(),
        source,
    })?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(|source| {
        SocketError::Chmod {
            path: path.into(),
            source,
        }
    })?;
    set_socket_group(path, gid)?;
    Ok(listener)
}

/// Gives the socket to `gid` (None: the daemon's own group).
pub fn set_socket_group(path: &Path, gid: Option<Gid>) -> Result<(), SocketError> {
    let gid = gid.unwrap_or_else(Gid::effective);
    nix::unistd::chown(path, None, Some(gid)).map_err(|source| SocketError::Chown {
        path: path.into(),
        gid: gid.as_raw(),
        source,
    })
}

pub fn remove_socket(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(socket = %path.display(), "cannot remove the socket: {e}");
    }
}

/// Supplementary groups from a `/proc/<pid>/status` text (`Groups:` line).
pub fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a peer may use the API: what the socket's mode 0660 and group
/// would admit, decided here again for peers that reached the socket
/// another way (an inherited descriptor, a mode changed by hand).
pub fn admits(uid: u32, gid: u32, supplementary: &[u32], owner: u32, group: Option<u32>) -> bool {
    uid == 0 || uid == owner || group.is_some_and(|g| gid == g || supplementary.contains(&g))
}

/// Whether the group database (now, not when the peer logged in) lists
/// the user of `uid` in `group`: as its primary group or a member. A uid
/// the database does not know is left to its process credentials.
fn listed_in_group(uid: u32, group: Gid) -> bool {
    let Ok(Some(user)) = User::from_uid(Uid::from_raw(uid)) else {
        return true;
    };
    user.gid == group
        || Group::from_gid(group)
            .ok()
            .flatten()
            .is_some_and(|g| g.mem.contains(&user.name))
}

/// Checks `peer` against the current policy: the daemon's owner and the
/// socket group as of now (a reload may have changed it). Besides its
/// process credentials, a group member must still be listed in the group.
pub fn check_peer(peer: &Peer, group: Option<Gid>) -> Result<(), String> {
    let owner = Uid::effective().as_raw();
    let group = group.unwrap_or_else(Gid::effective);
    if admits(
        peer.uid,
        peer.gid,
        &peer.supplementary,
        owner,
        Some(group.as_raw()),
    ) && (peer.uid == 0 || peer.uid == owner || listed_in_group(peer.uid, group))
    {
        Ok(())
    } else {
        Err(format!(
            "peer uid {} gid {} (pid {}) is neither root nor in group {}",
            peer.uid,
            peer.gid,
            peer.pid.map_or_else(|| "?".into(), |p| p.to_string()),
            group.as_raw()
        ))
    }
}

/// The socket group in force now.
fn current_group(state: &State) -> Option<Gid> {
    state.current().group.as_ref().map(|g| g.1)
}

/// Every request is checked against the current policy, not only the
/// connection at accept: a peer whose access was revoked (by a reload or
/// in the group database) gets PERMISSION_DENIED on its open connection.
fn authorize(state: &State, request: Request<()>) -> Result<Request<()>, Status> {
    let Some(peer) = request.extensions().get::<Peer>() else {
        return Err(Status::permission_denied(
            "the connection carries no peer credentials",
        ));
    };
    check_peer(peer, current_group(state)).map_err(|why| {
        tracing::warn!("request refused: {why}");
        Status::permission_denied(format!(
            "{why} (access revoked since the connection opened?)"
        ))
    })?;
    Ok(request)
}

/// Serves the API on `listener` until shutdown, admitting only peers that
/// pass the credential check against the current socket group, and at most
/// as many connections as the descriptor limit leaves room for beside what
/// dumps need.
pub async fn serve(
    state: Arc<State>,
    listener: UnixListener,
    connections: Arc<Connections>,
) -> Result<(), tonic::transport::Error> {
    let (tx, rx) = mpsc::channel::<io::Result<ApiConnection>>(16);
    let mut stop = state.shutdown_signal();
    let admission = state.clone();
    let registry = connections.clone();
    tokio::spawn(async move {
        let fd_warning = RateLimitedWarning::new(Duration::from_secs(60));
        let cap_warning = RateLimitedWarning::new(Duration::from_secs(60));
        let mut failures: Option<u64> = None;
        loop {
            let accepted = tokio::select! {
                _ = daemon::stopped(&mut stop) => break,
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
            let peer = match Peer::of(&stream) {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!("connection refused: cannot read the peer's credentials: {e}");
                    continue;
                }
            };
            if let Err(why) = check_peer(&peer, current_group(&admission)) {
                tracing::warn!("connection refused: {why}");
                continue;
            }
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
    let mut stop_reaper = state.shutdown_signal();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = daemon::stopped(&mut stop_reaper) => break,
                _ = tick.tick() => {}
            }
            let (handshake, idle) = reaper.reap();
            if handshake + idle > 0 {
                tracing::debug!(handshake, idle, "closed silent API connections");
            }
        }
    });
    let mut stop = state.shutdown_signal();
    let check = state.clone();
    let service = FlightRecorderServer::with_interceptor(
        Api {
            state,
            watchers: Arc::new(AtomicUsize::new(0)),
        },
        move |request| authorize(&check, request),
    );
    tonic::transport::Server::builder()
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .add_service(service)
        .serve_with_incoming_shutdown(ReceiverStream::new(rx), async move {
            daemon::stopped(&mut stop).await;
        })
        .await
}

/// The policy a `Rotate` applies: the configured one tightened by the
/// request's limits, where 0 means "no limit" as in the config file;
/// `delete_all` removes everything.
pub fn rotate_policy(configured: RetentionPolicy, req: &pb::RotateRequest) -> RetentionPolicy {
    if req.delete_all {
        return RetentionPolicy {
            max_snapshots: Some(0),
            max_bytes: None,
            max_age: None,
        };
    }
    configured.tightened(RetentionPolicy::from_limits(
        req.max_snapshots.unwrap_or(0),
        req.max_bytes.unwrap_or(0),
        Duration::from_secs(req.max_age_seconds.unwrap_or(0)),
    ))
}

/// FAILED_PRECONDITION when `policy` would remove every one of `all`
/// (at least one): that takes `delete_all`.
pub fn refuse_removing_all(
    all: &[SnapshotInfo],
    policy: &RetentionPolicy,
    now: SystemTime,
) -> Result<(), Status> {
    let entries = retention_entries(all);
    let doomed = retention::plan(&entries, policy, unix_ns(now), None).len();
    if doomed > 0 && doomed == all.len() {
        return Err(Status::failed_precondition(format!(
            "delete_all: this rotate would remove all {doomed} snapshots; set delete_all to \
             confirm (snapctl rotate --all), or choose limits that keep some"
        )));
    }
    Ok(())
}

/// Streams one connection may have open at once (HTTP/2
/// SETTINGS_MAX_CONCURRENT_STREAMS): more wait in the client.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 16;
/// Watch streams open at once, all connections together; beyond,
/// RESOURCE_EXHAUSTED.
pub const MAX_WATCHERS: usize = 64;

/// The service implementation.
pub struct Api {
    state: Arc<State>,
    /// Watch streams open now.
    watchers: Arc<AtomicUsize>,
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

fn store_status(e: StoreError) -> Status {
    match &e {
        StoreError::InvalidLabel { .. } => Status::invalid_argument(format!("label: {e}")),
        StoreError::InvalidId { .. } => Status::invalid_argument(format!("id: {e}")),
        StoreError::NotFound { .. } => Status::not_found(e.to_string()),
        _ if e.is_disk_full() => Status::resource_exhausted(e.to_string()),
        _ => Status::internal(e.to_string()),
    }
}

fn shutting_down() -> Status {
    Status::unavailable("flightrecd is shutting down")
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(format!("worker thread failed: {e}")))?
}

fn dump_reply(d: &DumpDone, coalesced: bool) -> pb::DumpReply {
    pb::DumpReply {
        snapshot: Some(snapshot_pb(&d.snapshot)),
        cpus: d
            .output
            .cpus
            .iter()
            .map(|c| pb::CpuCapture {
                cpu: c.cpu,
                records: c.records,
                bytes: c.bytes,
                lost: c.lost,
                oldest_ns: c.oldest_ns,
                newest_ns: c.newest_ns,
                pause_ns: u64::try_from(c.pause.as_nanos()).unwrap_or(u64::MAX),
                lost_since_start: c.lost_since_start,
            })
            .collect(),
        timings: Some(timings_pb(&d.timings)),
        tracking_records: d.output.tracking_records,
        coalesced,
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchEvent, Status>> + Send>>;

#[tonic::async_trait]
impl FlightRecorder for Api {
    async fn dump(
        &self,
        request: Request<pb::DumpRequest>,
    ) -> Result<Response<pb::DumpReply>, Status> {
        let req = request.into_inner();
        let label = (!req.label.is_empty()).then_some(req.label);
        if let Some(l) = &label {
            validate_label(l).map_err(store_status)?;
        }
        if self.state.is_shutting_down() {
            return Err(shutting_down());
        }
        tracing::debug!(
            label = label.as_deref().unwrap_or(""),
            "dump requested over the API"
        );
        let rx = self
            .state
            .request_dump(TriggerKind::Api, label, req.compress);
        match rx.await {
            Ok(Outcome::Done {
                result: Ok(done),
                coalesced,
            }) => Ok(Response::new(dump_reply(&done, coalesced))),
            Ok(Outcome::Done { result: Err(f), .. }) => Err(match f {
                DumpFailure::DiskFull(m) => Status::resource_exhausted(m),
                DumpFailure::InvalidLabel(m) => Status::invalid_argument(format!("label: {m}")),
                DumpFailure::Failed(m) => Status::internal(format!("dump failed: {m}")),
                DumpFailure::ShuttingDown => shutting_down(),
            }),
            Ok(Outcome::ShuttingDown) | Err(_) => Err(shutting_down()),
        }
    }

    async fn list(
        &self,
        _request: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListReply>, Status> {
        let store = self.state.current().store.clone();
        let list = blocking(move || store.list().map_err(store_status)).await?;
        Ok(Response::new(pb::ListReply {
            snapshots: list.iter().map(snapshot_pb).collect(),
        }))
    }

    async fn rotate(
        &self,
        request: Request<pb::RotateRequest>,
    ) -> Result<Response<pb::RotateReply>, Status> {
        let req = request.into_inner();
        let cfg = self.state.current().config.config.retention.clone();
        let configured = RetentionPolicy::from_limits(
            cfg.max_snapshots,
            cfg.max_bytes.bytes(),
            cfg.max_age.get(),
        );
        let policy = rotate_policy(configured, &req);
        let state = self.state.clone();
        let store = self.state.current().store.clone();
        let (removed, kept) = blocking(move || {
            if !req.delete_all {
                let all = store.list().map_err(store_status)?;
                refuse_removing_all(&all, &policy, SystemTime::now())?;
            }
            state.apply_retention(&policy, None).map_err(store_status)
        })
        .await?;
        Ok(Response::new(pb::RotateReply {
            removed: removed.iter().map(snapshot_pb).collect(),
            kept: kept.iter().map(snapshot_pb).collect(),
        }))
    }

    async fn compress(
        &self,
        request: Request<pb::CompressRequest>,
    ) -> Result<Response<pb::CompressReply>, Status> {
        let req = request.into_inner();
        let cur = self.state.current();
        let level = match req.level {
            0 => *cur.config.config.snapshot.level.get_ref(),
            l @ 1..=22 => l,
            l => {
                return Err(Status::invalid_argument(format!(
                    "level: {l} is not a zstd level (1 to 22, or 0 for the configured one)"
                )));
            }
        };
        let store = cur.store.clone();
        let id = req.id;
        let priority = *cur.config.config.snapshot.realtime_priority.get_ref();
        let (before, after) = blocking(move || {
            let _realtime = crate::perf::sched::RealtimeDump::enter(priority);
            // Locked against retention removing it meanwhile.
            let rewritten = store.rewrite(&id, |before| {
                if before.compressed {
                    return Err(Status::failed_precondition(format!(
                        "snapshot {id} is already compressed"
                    )));
                }
                recorder::compress(&before.path, level)
                    .map(drop)
                    .map_err(|e| {
                        if matches!(
                            e,
                            EngineError::Compress {
                                already_compressed: true,
                                ..
                            }
                        ) {
                            Status::failed_precondition(format!(
                                "snapshot {id} is already compressed"
                            ))
                        } else if e.is_disk_full() {
                            Status::resource_exhausted(format!("cannot compress {id}: {e}"))
                        } else {
                            Status::internal(format!("cannot compress {id}: {e}"))
                        }
                    })
            });
            rewritten.map_err(|e| match e {
                RewriteError::Store(e) => store_status(e),
                RewriteError::Rewrite(status) => status,
            })
        })
        .await?;
        tracing::info!(id = %after.id, before = before.bytes, after = after.bytes, level, "snapshot compressed");
        Ok(Response::new(pb::CompressReply {
            snapshot: Some(snapshot_pb(&after)),
            bytes_before: before.bytes,
        }))
    }

    async fn status(
        &self,
        _request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusReply>, Status> {
        let cur = self.state.current();
        let engine = cur.engine.clone();
        let store = cur.store.clone();
        let (status, events, usage) = blocking(move || {
            let usage = store.usage().map_err(store_status)?;
            Ok((engine.status(), engine.events(), usage))
        })
        .await?;
        let cfg = &cur.config.config;
        let lost_tracking: u64 = status.cpus.iter().map(|c| c.2).sum();
        Ok(Response::new(pb::StatusReply {
            version: env!("CARGO_PKG_VERSION").into(),
            pid: std::process::id(),
            uptime_ns: u64::try_from(self.state.started.elapsed().as_nanos()).unwrap_or(u64::MAX),
            config_path: daemon::describe_source(&cur.config),
            events: events
                .into_iter()
                .map(|e| pb::EventStatus {
                    name: e.name,
                    kind: e.kind,
                    sample_period: e.period,
                    sample_frequency: e.frequency,
                    callchain: e.callchain,
                    filter: e.filter,
                })
                .collect(),
            ring_bytes_per_cpu: cfg.buffers.per_cpu.get_ref().bytes(),
            tracking_ring_bytes_per_cpu: cfg.buffers.tracking.get_ref().bytes(),
            cpus: status
                .cpus
                .iter()
                .map(|&(cpu, lost_samples, lost_tracking)| pb::CpuStatus {
                    cpu,
                    lost_samples,
                    lost_tracking,
                })
                .collect(),
            tracking: Some(pb::TrackingStatus {
                log_capacity_bytes: status.log_capacity_bytes,
                log_used_bytes: status.log_used_bytes,
                log_records: status.log_records,
                evicted_records: status.evicted_records,
                lost_records: lost_tracking,
                processes: status.processes,
                exited_threads: status.exited_threads,
                max_exited_threads: status.max_exited_threads,
                max_maps_per_process: status.max_maps_per_process,
                exited_threads_dropped: status.exited_threads_dropped,
                maps_dropped: status.maps_dropped,
                checkpoints: status.checkpoints,
                checkpoint_interval_bytes: cfg.tracking.checkpoint_interval.get_ref().bytes(),
            }),
            store: Some(pb::StoreStatus {
                output_dir: cur.store.dir().display().to_string(),
                snapshots: usage.snapshots,
                bytes: usage.bytes,
                disk_free_bytes: usage.disk_free_bytes,
            }),
            last_dump: self.state.last_dump().as_ref().map(timings_pb),
            dumps: self.state.dumps(),
        }))
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        _request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        if self.state.is_shutting_down() {
            return Err(shutting_down());
        }
        let slot = WatcherSlot::take(&self.watchers)?;
        let mut events = self.state.events.subscribe();
        let mut stop = self.state.shutdown_signal();
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            let _slot = slot;
            loop {
                let event = tokio::select! {
                    _ = daemon::stopped(&mut stop) => break,
                    _ = tx.closed() => break,
                    e = events.recv() => e,
                };
                let item = match event {
                    Ok(e) => Ok(e),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!("a watch client fell behind by {n} events");
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
        if self.state.is_shutting_down() {
            return Err(shutting_down());
        }
        match self.state.reload().await {
            Ok((changed, summary)) => Ok(Response::new(pb::ReloadReply { changed, summary })),
            Err(e) => Err(Status::failed_precondition(format!(
                "new config rejected, the running one is kept: {e}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supplementary_groups_are_read_from_proc_status() {
        let status =
            "Name:\tbash\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 27 1001 \nVmPeak:\t1 kB\n";
        assert_eq!(parse_groups(status), vec![4, 24, 27, 1001]);
        assert_eq!(parse_groups("Groups:\t\n"), Vec::<u32>::new());
        assert_eq!(parse_groups("Name: x\n"), Vec::<u32>::new());
    }

    #[test]
    fn store_errors_map_to_grpc_codes_naming_the_field() {
        let s = store_status(StoreError::InvalidLabel {
            label: "../x".into(),
            reason: "it starts with a dot".into(),
        });
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            s.message(),
            "label: invalid label \"../x\": it starts with a dot"
        );
        let s = store_status(StoreError::InvalidId { id: "a/b".into() });
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert!(s.message().starts_with("id: invalid snapshot id \"a/b\""));
        let s = store_status(StoreError::NotFound { id: "x".into() });
        assert_eq!(s.code(), tonic::Code::NotFound);
        let s = store_status(StoreError::WriteMeta {
            path: "/s/.x.meta".into(),
            source: io::Error::from_raw_os_error(libc::ENOSPC),
        });
        assert_eq!(s.code(), tonic::Code::ResourceExhausted);
        let s = store_status(StoreError::ReadDir {
            path: "/s".into(),
            source: io::Error::from_raw_os_error(libc::EIO),
        });
        assert_eq!(s.code(), tonic::Code::Internal);
        assert!(s.message().contains("/s"));
    }

    fn snapshot(id: &str, created_unix_ns: i64, bytes: u64) -> SnapshotInfo {
        SnapshotInfo {
            id: id.into(),
            path: format!("/s/{id}.perf.data").into(),
            bytes,
            compressed: false,
            label: None,
            trigger: "api".into(),
            created_unix_ns,
            seq: 0,
        }
    }

    #[test]
    fn rotate_limits_of_zero_mean_no_limit_as_in_the_config() {
        let configured = RetentionPolicy::from_limits(10, 0, Duration::ZERO);
        let zero = pb::RotateRequest {
            max_snapshots: Some(0),
            max_bytes: Some(0),
            max_age_seconds: Some(0),
            delete_all: false,
        };
        assert_eq!(rotate_policy(configured, &zero), configured);
        let tighter = pb::RotateRequest {
            max_snapshots: Some(3),
            max_bytes: Some(1 << 20),
            ..zero
        };
        let p = rotate_policy(configured, &tighter);
        assert_eq!(p.max_snapshots, Some(3));
        assert_eq!(p.max_bytes, Some(1 << 20));
        assert_eq!(p.max_age, None);
        let all = pb::RotateRequest {
            delete_all: true,
            ..zero
        };
        assert_eq!(rotate_policy(configured, &all).max_snapshots, Some(0));
    }

    #[test]
    fn a_rotate_removing_every_snapshot_needs_delete_all() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let all = [snapshot("a", 1, 100), snapshot("b", 2, 100)];
        let keep_one = RetentionPolicy::from_limits(1, 0, Duration::ZERO);
        assert!(refuse_removing_all(&all, &keep_one, now).is_ok());
        let tiny = RetentionPolicy::from_limits(0, 10, Duration::ZERO);
        let err = refuse_removing_all(&all, &tiny, now).unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition);
        assert!(
            err.message()
                .starts_with("delete_all: this rotate would remove all 2 snapshots"),
            "{}",
            err.message()
        );
        let old = RetentionPolicy::from_limits(0, 0, Duration::from_secs(1));
        assert!(refuse_removing_all(&all, &old, now).is_err());
        // Nothing to remove is not "everything".
        assert!(refuse_removing_all(&[], &tiny, now).is_ok());
    }

    #[test]
    fn admission_follows_the_socket_permissions() {
        // Socket owned by root (0), group 990.
        assert!(admits(0, 0, &[], 0, Some(990)));
        assert!(admits(1000, 990, &[], 0, Some(990)));
        assert!(admits(1000, 1000, &[27, 990], 0, Some(990)));
        assert!(!admits(65534, 65534, &[], 0, Some(990)));
        assert!(!admits(1000, 1000, &[27], 0, Some(990)));
        assert!(!admits(1000, 1000, &[], 0, None));
        // A daemon running as its own user admits that user.
        assert!(admits(555, 555, &[], 555, None));
    }
}
