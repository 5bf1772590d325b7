//! The socket's group: who may use the daemon. Applied when the socket is
//! bound (api) and again when a reload names another group (here).

use std::path::{Path, PathBuf};

use nix::unistd::Gid;

#[derive(Debug, thiserror::Error)]
#[error("cannot give {path} to group {gid}: {source}")]
pub struct SocketGroupError {
    pub path: PathBuf,
    pub gid: u32,
    #[source]
    pub source: nix::Error,
}

/// Gives the socket (or its directory) to `gid` (None: the daemon's own group).
pub fn set_socket_group(path: &Path, gid: Option<Gid>) -> Result<(), SocketGroupError> {
    let gid = gid.unwrap_or_else(Gid::effective);
    nix::unistd::chown(path, None, Some(gid)).map_err(|source| SocketGroupError {
        path: path.into(),
        gid: gid.as_raw(),
        source,
    })
}
