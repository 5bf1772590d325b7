//! Peer policy: who may use the API. Checked at accept (SO_PEERCRED) and
//! again on every request, against the policy in force now: root, the
//! daemon's owner and members of the socket's group (primary or
//! supplementary, and still listed in the group database).
//!
//! The group database may be NSS over the network (LDAP, SSSD): every
//! lookup runs on a blocking thread with a deadline, never on the async
//! workers that answer everyone else.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use nix::unistd::{Gid, Group, Uid, User};
use tonic::Status;
use tonic::codegen::{BoxFuture, http};

pub use super::connections::Peer;
use crate::control::Control;
use crate::log_limit::RateLimitedWarning;

/// How long a peer check may wait for the group database; past it the
/// connection or request is refused (UNAVAILABLE), and the lookup left to
/// finish on its thread.
pub const LOOKUP_DEADLINE: Duration = Duration::from_secs(2);

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
pub fn current_group(state: &Control) -> Option<Gid> {
    state.live.current().group.as_ref().map(|g| g.1)
}

/// Runs `check` (which may consult the group database) on a blocking
/// thread, giving up after [`LOOKUP_DEADLINE`].
pub async fn off_runtime<T: Send + 'static>(
    check: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, Status> {
    match tokio::time::timeout(LOOKUP_DEADLINE, tokio::task::spawn_blocking(check)).await {
        Ok(Ok(Ok(v))) => Ok(v),
        Ok(Ok(Err(why))) => Err(Status::permission_denied(why)),
        Ok(Err(e)) => Err(Status::internal(format!("peer check failed: {e}"))),
        Err(_) => Err(Status::unavailable(format!(
            "the user and group database did not answer within {}s",
            LOOKUP_DEADLINE.as_secs()
        ))),
    }
}

/// Every request is checked against the current policy, not only the
/// connection at accept: a peer whose access was revoked (by a reload or
/// in the group database) gets PERMISSION_DENIED on its open connection.
async fn authorize(state: &Control, peer: Option<Peer>) -> Result<(), Status> {
    let Some(peer) = peer else {
        return Err(Status::permission_denied(
            "the connection carries no peer credentials",
        ));
    };
    static REFUSED: RateLimitedWarning = RateLimitedWarning::per_minute();
    let group = current_group(state);
    off_runtime(move || check_peer(&peer, group))
        .await
        .map_err(|status| {
            REFUSED.warn(|| format!("request refused: {}", status.message()));
            if status.code() == tonic::Code::PermissionDenied {
                Status::permission_denied(format!(
                    "{} (access revoked since the connection opened?)",
                    status.message()
                ))
            } else {
                status
            }
        })
}

/// The layer that runs [`authorize`] before every request reaches the
/// service.
#[derive(Clone)]
pub struct AuthorizeLayer {
    pub state: Arc<Control>,
}

impl<S> tower::Layer<S> for AuthorizeLayer {
    type Service = Authorize<S>;

    fn layer(&self, inner: S) -> Authorize<S> {
        Authorize {
            state: self.state.clone(),
            inner,
        }
    }
}

/// See [`AuthorizeLayer`].
#[derive(Clone)]
pub struct Authorize<S> {
    state: Arc<Control>,
    inner: S,
}

impl<S, B, R> tower::Service<http::Request<B>> for Authorize<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    B: Send + 'static,
    R: Default,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // The clone that was made ready is the one to call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let state = self.state.clone();
        Box::pin(async move {
            let peer = request.extensions().get::<Peer>().cloned();
            match authorize(&state, peer).await {
                Ok(()) => inner.call(request).await,
                Err(status) => Ok(status.into_http()),
            }
        })
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
