//! snapctl: the command-line client of flightrecd.
//!
//! [`connect`] opens the daemon's Unix socket and turns the usual failures
//! into sentences ([`ClientError`]); [`render`] turns replies into human
//! tables or stable JSON; [`run`] carries out a parsed command line. The
//! binary (`main.rs`) only parses arguments and hands them to [`run`].

#![forbid(unsafe_code)]

pub mod archive;
pub mod cli;
pub mod fleet;
pub mod render;
pub mod report;
pub mod run;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flightrec_proto::FlightRecorderClient;
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};
use tower::service_fn;

/// Exit status: success.
pub const EXIT_OK: i32 = 0;
/// The daemon answered with an error.
pub const EXIT_DAEMON_ERROR: i32 = 1;
/// Bad command line (clap's own code).
pub const EXIT_USAGE: i32 = 2;
/// No daemon to talk to (no socket, nobody listening, connection lost).
pub const EXIT_CONNECT: i32 = 3;
/// Not allowed to use the socket.
pub const EXIT_PERMISSION: i32 = 4;

/// How long snapctl waits for the daemon by default: to connect, for each
/// answer, and for the answer to a keep-alive ping during a long `dump` or
/// `watch`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// What went wrong, phrased for the person at the terminal.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("daemon not running (no socket at {path})")]
    NoSocket { path: PathBuf },
    #[error("daemon not running (nobody listens on {path}: {source})")]
    Refused {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "permission denied on socket {path} (owned by group {group}; add yourself to it or run as root)"
    )]
    Permission { path: PathBuf, group: String },
    #[error(
        "the daemon on {path} closed the connection before answering: your user may not be admitted (the API is for root and group {group})"
    )]
    Dropped { path: PathBuf, group: String },
    #[error("cannot connect to {path}: {message}")]
    Connect { path: PathBuf, message: String },
    #[error(
        "the daemon on {path} did not answer within {} (stopped or hung?); --timeout or FLIGHTREC_TIMEOUT change the limit",
        crate::render::std_duration(*after)
    )]
    Timeout { path: PathBuf, after: Duration },
    #[error("{message}")]
    Daemon { code: tonic::Code, message: String },
    #[error("cannot write the output: {0}")]
    Output(#[source] io::Error),
    #[error("NATS at {servers}: {message}")]
    Nats { servers: String, message: String },
    /// The config file named by --config or FLIGHTREC_CONFIG cannot be
    /// used.
    #[error("{0} (named by --config or FLIGHTREC_CONFIG)")]
    Config(flightrec_config::ConfigError),
    /// `fleet dump`: some hosts failed or did not answer (the replies
    /// were printed).
    #[error("{0}")]
    Fleet(String),
}

impl ClientError {
    /// `{"error": message, "code": "InvalidArgument", "exit": 1}` for
    /// `--json` callers (code: the gRPC code, or "Connect"/"Permission").
    pub fn to_json(&self) -> String {
        let code = match self {
            ClientError::Daemon { code, .. } => format!("{code:?}"),
            ClientError::Permission { .. } | ClientError::Dropped { .. } => {
                "PermissionDenied".into()
            }
            ClientError::Output(_) => "Output".into(),
            ClientError::Timeout { .. } => "Timeout".into(),
            ClientError::Fleet(_) => "Fleet".into(),
            ClientError::Config(_) => "Config".into(),
            _ => "Connect".into(),
        };
        serde_json::json!({ "error": self.to_string(), "code": code, "exit": self.exit_code() })
            .to_string()
    }

    pub fn exit_code(&self) -> i32 {
        match self {
            ClientError::NoSocket { .. }
            | ClientError::Refused { .. }
            | ClientError::Connect { .. }
            | ClientError::Nats { .. }
            | ClientError::Timeout { .. } => EXIT_CONNECT,
            ClientError::Permission { .. } | ClientError::Dropped { .. } => EXIT_PERMISSION,
            // Refused on an open connection: access revoked.
            ClientError::Daemon {
                code: tonic::Code::PermissionDenied,
                ..
            } => EXIT_PERMISSION,
            ClientError::Daemon { .. } | ClientError::Output(_) | ClientError::Fleet(_) => {
                EXIT_DAEMON_ERROR
            }
            ClientError::Config(_) => EXIT_USAGE,
        }
    }
}

/// The group that owns `path` (by name if it has one), or its directory's
/// when the socket itself cannot be seen.
fn socket_group(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(path).or_else(|e| match path.parent() {
        Some(dir) => std::fs::metadata(dir),
        None => Err(e),
    });
    let Ok(md) = md else {
        return "unknown".into();
    };
    let gid = md.gid();
    nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid))
        .ok()
        .flatten()
        .map_or_else(|| gid.to_string(), |g| g.name)
}

/// Connects to the daemon at `path`, waiting at most `timeout` for the
/// socket and the HTTP/2 handshake. The connection then pings the daemon
/// when it has been quiet for half of `timeout` and gives up on it when a
/// ping is not answered within the other half: a stopped daemon ends a
/// long `dump` or a `watch` instead of hanging them.
pub async fn connect(
    path: &Path,
    timeout: Duration,
) -> Result<FlightRecorderClient<Channel>, ClientError> {
    tokio::time::timeout(timeout, connect_unbounded(path, timeout))
        .await
        .unwrap_or_else(|_| {
            Err(ClientError::Timeout {
                path: path.into(),
                after: timeout,
            })
        })
}

async fn connect_unbounded(
    path: &Path,
    timeout: Duration,
) -> Result<FlightRecorderClient<Channel>, ClientError> {
    let stream = match UnixStream::connect(path).await {
        Ok(s) => s,
        Err(e) => {
            return Err(match e.kind() {
                io::ErrorKind::NotFound => ClientError::NoSocket { path: path.into() },
                io::ErrorKind::PermissionDenied => ClientError::Permission {
                    path: path.into(),
                    group: socket_group(path),
                },
                io::ErrorKind::ConnectionRefused => ClientError::Refused {
                    path: path.into(),
                    source: e,
                },
                _ => ClientError::Connect {
                    path: path.into(),
                    message: e.to_string(),
                },
            });
        }
    };
    // Hand the connected stream to tonic (once: a CLI call never reconnects).
    let slot = Arc::new(Mutex::new(Some(stream)));
    let half = (timeout / 2).max(Duration::from_millis(50));
    let channel = Endpoint::try_from("http://[::]:50051")
        .map_err(|e| ClientError::Connect {
            path: path.into(),
            message: e.to_string(),
        })?
        .http2_keep_alive_interval(half)
        .keep_alive_timeout(half)
        .keep_alive_while_idle(true)
        .connect_with_connector(service_fn(move |_| {
            let slot = slot.clone();
            async move {
                let stream = slot
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
                    .ok_or_else(|| io::Error::other("the connection to the daemon was lost"))?;
                Ok::<_, io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| {
            if admitted(path) {
                ClientError::Connect {
                    path: path.into(),
                    message: format!("the daemon closed the connection ({e})"),
                }
            } else {
                ClientError::Dropped {
                    path: path.into(),
                    group: socket_group(path),
                }
            }
        })?;
    Ok(FlightRecorderClient::new(channel))
}

/// One call that must be answered within `timeout`.
pub async fn answered_within<T>(
    path: &Path,
    timeout: Duration,
    call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, ClientError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(r) => r
            .map(tonic::Response::into_inner)
            .map_err(|s| call_error(path, s, timeout)),
        Err(_) => Err(ClientError::Timeout {
            path: path.into(),
            after: timeout,
        }),
    }
}

/// Whether the daemon's peer check would admit us: root, or a member of the
/// socket's group (the socket's owner is root in practice).
fn admitted(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    let Ok(md) = std::fs::metadata(path) else {
        return false;
    };
    let gid = nix::unistd::Gid::from_raw(md.gid());
    md.uid() == nix::unistd::geteuid().as_raw()
        || nix::unistd::getegid() == gid
        || nix::unistd::getgroups().is_ok_and(|g| g.contains(&gid))
}

/// A failed call: a daemon error keeps its message. A connection closed
/// before any answer (a transport error, not a status the daemon sent) is a
/// refused peer when we would not be admitted, else a daemon gone away (or
/// one that stopped answering pings within `timeout`).
pub fn call_error(path: &Path, status: tonic::Status, timeout: Duration) -> ClientError {
    let from_daemon = status.metadata().contains_key("content-type")
        || status.message().contains("shutting down");
    let transport = !from_daemon
        && matches!(
            status.code(),
            tonic::Code::Unavailable | tonic::Code::Unknown
        )
        && std::error::Error::source(&status).is_some();
    if transport {
        if unanswered_ping(&status) {
            return ClientError::Timeout {
                path: path.into(),
                after: timeout,
            };
        }
        if !admitted(path) {
            return ClientError::Dropped {
                path: path.into(),
                group: socket_group(path),
            };
        }
        return ClientError::Connect {
            path: path.into(),
            message: format!("the daemon closed the connection ({})", status.message()),
        };
    }
    ClientError::Daemon {
        code: status.code(),
        message: status.message().to_string(),
    }
}

/// Whether the connection ended because a keep-alive ping went unanswered
/// (hyper's error says so; it has no public type to match).
fn unanswered_ping(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        if e.to_string().contains("keep-alive timed out") {
            return true;
        }
        source = e.source();
    }
    false
}
