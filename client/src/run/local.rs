//! `snapctl archive` and `snapctl decompress`: the snapshot resolved to a
//! file (asking the daemon's list for an id), the output written by this
//! process.

use std::path::{Path, PathBuf};

use flightrec_proto::v1 as pb;

use super::daemon::Daemon;
use crate::ClientError;
use crate::archive::{self, ArchiveError, ArchiveOptions};
use crate::render;

pub(super) async fn archive(
    daemon: &Daemon,
    snapshot: &str,
    output: Option<PathBuf>,
    options: ArchiveOptions,
    json: bool,
) -> Result<String, ClientError> {
    let path = snapshot_file(daemon, snapshot).await?;
    let out = output.unwrap_or_else(|| format!("{}.tar", snapshot_id(&path)).into());
    let summary = archive::write_archive(&path, &out, options).map_err(failed)?;
    Ok(render::archive(&out, &summary, json))
}

pub(super) async fn decompress(
    daemon: &Daemon,
    snapshot: &str,
    output: Option<PathBuf>,
    force: bool,
    json: bool,
) -> Result<String, ClientError> {
    let path = snapshot_file(daemon, snapshot).await?;
    let out = output.unwrap_or_else(|| format!("{}.plain.perf.data", snapshot_id(&path)).into());
    let bytes = archive::write_plain_copy(&path, &out, force).map_err(failed)?;
    Ok(render::decompressed(&out, bytes, json))
}

/// Whether the command line named a file rather than an id.
fn is_file_name(snapshot: &str) -> bool {
    snapshot.contains('/') || snapshot.ends_with(".perf.data")
}

/// The snapshot's file: `snapshot` itself when it names one, else the
/// path the daemon lists for that id.
async fn snapshot_file(daemon: &Daemon, snapshot: &str) -> Result<PathBuf, ClientError> {
    if is_file_name(snapshot) {
        return Ok(PathBuf::from(snapshot));
    }
    let mut client = daemon.connect().await?;
    let r = daemon.answered(client.list(pb::ListRequest {})).await?;
    match r.snapshots.iter().find(|s| s.id == snapshot) {
        Some(s) => Ok(PathBuf::from(&s.path)),
        None => Err(ClientError::Daemon {
            code: tonic::Code::NotFound,
            message: format!("no snapshot with id {snapshot} (see snapctl list)"),
        }),
    }
}

/// The id of a snapshot file name (`ID.perf.data`).
fn snapshot_id(path: &Path) -> String {
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    name.strip_suffix(".perf.data").unwrap_or(&name).to_string()
}

fn failed(e: ArchiveError) -> ClientError {
    ClientError::Daemon {
        code: tonic::Code::FailedPrecondition,
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_files_and_anything_else_is_an_id() {
        assert!(is_file_name("./x"));
        assert!(is_file_name("h-20261120T221133Z-000001.perf.data"));
        assert!(!is_file_name("h-20261120T221133Z-000001"));
    }

    #[test]
    fn the_id_is_the_file_name_without_perf_data() {
        assert_eq!(
            snapshot_id(Path::new("/var/lib/flightrec/snapshots/h-1-x.perf.data")),
            "h-1-x"
        );
        assert_eq!(snapshot_id(Path::new("other.bin")), "other.bin");
        assert_eq!(snapshot_id(Path::new("/")), "");
    }
}
