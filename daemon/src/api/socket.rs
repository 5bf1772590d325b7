//! The API's Unix socket: created mode 0660 with the configured group, a
//! stale socket file (no daemon answers on it) replaced, a live one not.

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::unistd::Gid;
use tokio::net::{UnixListener, UnixStream};

use crate::control::access::{SocketGroupError, set_socket_group};

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
    #[error(transparent)]
    Group(#[from] SocketGroupError),
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

pub fn remove_socket(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(socket = %path.display(), "cannot remove the socket: {e}");
    }
}
