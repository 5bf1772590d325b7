//! The API's connections: how many may be open, how long one may sit idle,
//! and who is at the other end.
//!
//! Every accepted socket is registered here. Beyond [`ConnectionLimits::max`]
//! open connections, the least recently active one (a connection that never
//! sent a byte first) is shut down to make room, so idle clients cannot lock
//! out a working one nor eat the descriptors a dump needs. A reaper shuts
//! down connections that send nothing within the handshake timeout, or
//! nothing for the idle timeout (the server's keep-alive pings make live
//! clients answer well within it).

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tonic::transport::server::Connected;

/// Descriptors kept free for a dump (snapshot, sidecar, directories, /proc
/// files of the tracking) and for re-opening rings on reload.
pub const DUMP_FD_RESERVE: u64 = 256;
/// At most this many connections, whatever the descriptor limit.
pub const MAX_CONNECTIONS: usize = 256;
/// A connection must send something (the HTTP/2 preface) within this.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection that sends nothing for this long is closed. Live clients
/// answer the server's keep-alive pings ([`KEEPALIVE_INTERVAL`]).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// The server pings a connection quiet for this long...
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);
/// ...and closes it when the ping is not answered within this.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// How many connections may be open, from the descriptor limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max: usize,
}

impl ConnectionLimits {
    /// At most [`MAX_CONNECTIONS`], and few enough that `open_fds` (in use
    /// now) plus one descriptor per connection plus [`DUMP_FD_RESERVE`]
    /// stay under `fd_limit`; at least one.
    pub fn from_fd_limit(fd_limit: u64, open_fds: u64) -> Self {
        let spare = fd_limit.saturating_sub(open_fds.saturating_add(DUMP_FD_RESERVE));
        let max = usize::try_from(spare)
            .unwrap_or(usize::MAX)
            .clamp(1, MAX_CONNECTIONS);
        ConnectionLimits { max }
    }
}

/// Raises the soft RLIMIT_NOFILE to the hard one and returns the limit in
/// force. Failing to raise it is not fatal: the connection cap follows
/// whatever the limit is.
pub fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => {
                tracing::debug!(from = soft, to = hard, "raised the open file limit");
                hard
            }
            Err(e) => {
                tracing::warn!(soft, hard, "cannot raise the open file limit: {e}");
                soft
            }
        },
        Ok((soft, _)) => soft,
        Err(e) => {
            tracing::warn!("cannot read the open file limit: {e}");
            1024
        }
    }
}

/// Descriptors this process has open now.
pub fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

/// The credentials of a connection's peer, read at accept (SO_PEERCRED and
/// /proc/<pid>/status) and handed to every request on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
    pub supplementary: Arc<[u32]>,
}

impl Peer {
    /// Reads /proc: call on a blocking thread.
    pub fn of(cred: tokio::net::unix::UCred) -> Self {
        let supplementary = cred
            .pid()
            .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
            .map(|s| super::peer::parse_groups(&s))
            .unwrap_or_default();
        Peer {
            uid: cred.uid(),
            gid: cred.gid(),
            pid: cred.pid(),
            supplementary: supplementary.into(),
        }
    }
}

struct Entry {
    fd: RawFd,
    accepted_ms: u64,
    /// Milliseconds since `Connections::epoch` of the last read that
    /// returned data; 0: nothing read yet.
    last_read_ms: Arc<AtomicU64>,
    closing: bool,
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    entries: HashMap<u64, Entry>,
}

/// Which timeout a silent connection has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// Sent nothing within [`HANDSHAKE_TIMEOUT`].
    Handshake,
    /// Sent nothing for [`IDLE_TIMEOUT`].
    Idle,
}

/// The open connections.
pub struct Connections {
    limits: ConnectionLimits,
    epoch: Instant,
    registry: Mutex<Registry>,
}

impl Connections {
    pub fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(Connections {
            limits,
            epoch: Instant::now(),
            registry: Mutex::new(Registry::default()),
        })
    }

    pub fn limits(&self) -> ConnectionLimits {
        self.limits
    }

    fn now_ms(&self) -> u64 {
        // Never 0, which means "nothing read yet".
        u64::try_from(self.epoch.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Open connections (those being shut down excluded).
    pub fn open(&self) -> usize {
        self.lock().entries.values().filter(|e| !e.closing).count()
    }

    /// Registers `stream`; when the cap is reached, shuts down the least
    /// recently active connection first (returns whether it had to).
    pub fn admit(self: &Arc<Self>, stream: UnixStream, peer: Peer) -> (ApiConnection, bool) {
        let now = self.now_ms();
        let last_read_ms = Arc::new(AtomicU64::new(0));
        let mut reg = self.lock();
        let open = reg.entries.values().filter(|e| !e.closing).count();
        let evicted = open >= self.limits.max;
        if evicted {
            // Never-used connections (last_read 0) first, then the quietest.
            let victim = reg
                .entries
                .iter_mut()
                .filter(|(_, e)| !e.closing)
                .min_by_key(|(_, e)| (e.last_read_ms.load(Ordering::Relaxed), e.accepted_ms));
            if let Some((_, e)) = victim {
                shut_down(e);
            }
        }
        let id = reg.next_id;
        reg.next_id += 1;
        reg.entries.insert(
            id,
            Entry {
                fd: stream.as_raw_fd(),
                accepted_ms: now,
                last_read_ms: last_read_ms.clone(),
                closing: false,
            },
        );
        drop(reg);
        let conn = ApiConnection {
            stream,
            id,
            peer,
            last_read_ms,
            connections: self.clone(),
        };
        (conn, evicted)
    }

    /// Shuts down connections past their handshake or idle timeout;
    /// returns how many for each reason.
    pub fn reap(&self) -> (usize, usize) {
        let now = self.now_ms();
        let (mut handshake, mut idle) = (0, 0);
        let mut reg = self.lock();
        for e in reg.entries.values_mut().filter(|e| !e.closing) {
            match expired(e.accepted_ms, e.last_read_ms.load(Ordering::Relaxed), now) {
                Some(Closed::Handshake) => {
                    shut_down(e);
                    handshake += 1;
                }
                Some(Closed::Idle) => {
                    shut_down(e);
                    idle += 1;
                }
                _ => {}
            }
        }
        (handshake, idle)
    }
}

/// Which timeout, if any, a connection accepted at `accepted_ms` whose last
/// read was at `last_read_ms` (0: none) has passed at `now_ms`.
pub fn expired(accepted_ms: u64, last_read_ms: u64, now_ms: u64) -> Option<Closed> {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if last_read_ms == 0 {
        (now_ms.saturating_sub(accepted_ms) > ms(HANDSHAKE_TIMEOUT)).then_some(Closed::Handshake)
    } else {
        (now_ms.saturating_sub(last_read_ms) > ms(IDLE_TIMEOUT)).then_some(Closed::Idle)
    }
}

/// shutdown(2) makes the server's next read see the end of the stream, so
/// it drops the connection (and closes the descriptor) itself. Called with
/// the registry locked: the entry is removed, under the same lock, before
/// the descriptor is closed, so `fd` is still this connection's.
fn shut_down(e: &mut Entry) {
    e.closing = true;
    if let Err(err) = nix::sys::socket::shutdown(e.fd, nix::sys::socket::Shutdown::Both)
        && err != nix::errno::Errno::ENOTCONN
    {
        tracing::debug!("shutting down an API connection: {err}");
    }
}

/// An accepted, registered connection: what the gRPC server reads from and
/// writes to. Requests on it carry its [`Peer`].
pub struct ApiConnection {
    stream: UnixStream,
    id: u64,
    peer: Peer,
    last_read_ms: Arc<AtomicU64>,
    connections: Arc<Connections>,
}

impl Drop for ApiConnection {
    fn drop(&mut self) {
        // Before `stream` (a field) closes the descriptor: see `shut_down`.
        self.connections.lock().entries.remove(&self.id);
    }
}

impl Connected for ApiConnection {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Peer {
        self.peer.clone()
    }
}

impl AsyncRead for ApiConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let now = self.connections.now_ms();
            self.last_read_ms.store(now, Ordering::Relaxed);
        }
        polled
    }
}

impl AsyncWrite for ApiConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_the_dump_reserve_free() {
        assert_eq!(ConnectionLimits::from_fd_limit(1024, 40).max, 256);
        // 300 - 40 - 256 = 4 spare descriptors.
        assert_eq!(ConnectionLimits::from_fd_limit(300, 40).max, 4);
        assert_eq!(ConnectionLimits::from_fd_limit(100, 40).max, 1);
        assert_eq!(ConnectionLimits::from_fd_limit(1 << 20, 40).max, 256);
    }

    #[test]
    fn silent_connections_expire_after_the_handshake_or_idle_timeout() {
        assert_eq!(expired(1_000, 0, 1_000 + 5_000), None);
        assert_eq!(expired(1_000, 0, 1_000 + 5_001), Some(Closed::Handshake));
        assert_eq!(expired(1_000, 2_000, 2_000 + 300_000), None);
        assert_eq!(expired(1_000, 2_000, 2_000 + 300_001), Some(Closed::Idle));
    }

    #[tokio::test]
    async fn a_full_registry_evicts_the_connection_that_never_spoke() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let conns = Connections::new(ConnectionLimits { max: 2 });
        let peer = Peer {
            uid: 0,
            gid: 0,
            pid: None,
            supplementary: Arc::from(Vec::new()),
        };
        let (a, mut a_peer) = UnixStream::pair().unwrap();
        let (b, mut b_peer) = UnixStream::pair().unwrap();
        let (c, _c_peer) = UnixStream::pair().unwrap();
        let (mut a, evicted) = conns.admit(a, peer.clone());
        assert!(!evicted);
        let (_b, evicted) = conns.admit(b, peer.clone());
        assert!(!evicted);
        // `a` has spoken, `b` not: `b` goes when `c` arrives.
        a_peer.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        a.read_exact(&mut one).await.unwrap();
        let (_c, evicted) = conns.admit(c, peer);
        assert!(evicted);
        assert_eq!(conns.open(), 2);
        let mut rest = Vec::new();
        // Shut down: the peer of `b` sees the end of the stream.
        assert_eq!(b_peer.read_to_end(&mut rest).await.unwrap(), 0);
        drop(a);
        assert_eq!(conns.open(), 1);
    }
}
