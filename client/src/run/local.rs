//! `snapctl archive`, `decompress`, `report` and `export`: the snapshot
//! resolved to a file (asking the daemon's list for an id), the output
//! written by this process.

use std::path::{Path, PathBuf};

use flightrec_proto::container::Container;
use flightrec_proto::sidecar::{self, Sidecar};
use flightrec_proto::v1 as pb;

use super::daemon::Daemon;
use crate::ClientError;
use crate::archive::{self, ArchiveError, ArchiveOptions};
use crate::cli::{ReadLimits, SymbolArgs};
use crate::render;
use crate::report::{self, ExportRequest, ReportFailure};

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
    limits: ReadLimits,
    force: bool,
    json: bool,
) -> Result<String, ClientError> {
    let path = snapshot_file(daemon, snapshot).await?;
    let out = output.unwrap_or_else(|| format!("{}.plain.perf.data", snapshot_id(&path)).into());
    let bytes = tokio::task::spawn_blocking(move || {
        archive::write_plain_copy(&path, &out, force, limits.max_decompressed)
            .map(|bytes| (out, bytes))
    })
    .await
    .map_err(|e| ClientError::Output(std::io::Error::other(e.to_string())))?;
    let (out, bytes) = bytes.map_err(failed)?;
    Ok(render::decompressed(&out, bytes, json))
}

pub(super) async fn report(
    daemon: &Daemon,
    snapshot: &str,
    output: Option<PathBuf>,
    symbols: &SymbolArgs,
    limits: ReadLimits,
    force: bool,
    json: bool,
) -> Result<String, ClientError> {
    let (path, info) = snapshot_info(daemon, snapshot).await?;
    let id = snapshot_id(&path);
    let out = output.unwrap_or_else(|| format!("{id}.html").into());
    let side = sidecar_of(&path, info.as_ref());
    let known = known_containers(side.as_ref());
    let ctx = flightrec_report::PageContext {
        title: id,
        trigger: side.as_ref().map(|s| s.trigger.clone()),
        matched: side
            .as_ref()
            .map(|s| s.matched.clone())
            .filter(|m| !m.is_empty()),
        trigger_unix_ns: side.as_ref().map(|s| s.created_unix_ns),
        scope: side
            .as_ref()
            .map(|s| s.scope.clone())
            .filter(|s| !s.is_empty()),
    };
    let sources = symbols.sources();
    let max = limits.max_decompressed;
    let written =
        blocking(move || report::write_report(&path, &out, &ctx, &known, &sources, max, force))
            .await?;
    Ok(render::written(&written, json))
}

pub(super) async fn export(
    daemon: &Daemon,
    snapshot: &str,
    output: Option<PathBuf>,
    request: ExportRequest,
    symbols: &SymbolArgs,
    json: bool,
) -> Result<String, ClientError> {
    let (path, info) = snapshot_info(daemon, snapshot).await?;
    let known = known_containers(sidecar_of(&path, info.as_ref()).as_ref());
    let out = output
        .unwrap_or_else(|| format!("{}.{}", snapshot_id(&path), request.format.extension()).into());
    let sources = symbols.sources();
    let written =
        blocking(move || report::write_export(&path, &out, &request, &known, &sources)).await?;
    let text = render::written(&written, json);
    if written.path.is_none() {
        // The export went to standard output: the summary goes beside it.
        if json {
            eprintln!("{text}");
        }
        return Ok(String::new());
    }
    Ok(text)
}

/// Runs a report or export off the async runtime's threads.
async fn blocking<F>(f: F) -> Result<report::Written, ClientError>
where
    F: FnOnce() -> Result<report::Written, ReportFailure> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ClientError::Output(std::io::Error::other(e.to_string())))?
        .map_err(|e| match e {
            ReportFailure::Write(e) => failed(e),
            ReportFailure::Usage(message) => ClientError::Daemon {
                code: tonic::Code::InvalidArgument,
                message,
            },
            ReportFailure::Read(
                e @ (flightrec_report::ReportError::Snapshot { .. }
                | flightrec_report::ReportError::TooLarge { .. }),
            ) => ClientError::Daemon {
                code: tonic::Code::FailedPrecondition,
                message: e.to_string(),
            },
            ReportFailure::Read(e) => ClientError::Daemon {
                code: tonic::Code::InvalidArgument,
                message: e.to_string(),
            },
        })
}

/// What the daemon's list says of the snapshot at `path` (`info`), as its
/// sidecar would; a file named on the command line has no entry in the
/// list: its sidecar, when it lies beside it, says the same.
fn sidecar_of(path: &Path, info: Option<&pb::Snapshot>) -> Option<Sidecar> {
    let Some(i) = info else {
        return sidecar_beside(path);
    };
    Some(Sidecar {
        trigger: i.trigger.clone(),
        matched: i.matched.clone(),
        created_unix_ns: i.created_unix_ns,
        uploads: Vec::new(),
        window_start_unix_ns: (i.window_start_unix_ns != 0).then_some(i.window_start_unix_ns),
        window_end_unix_ns: (i.window_end_unix_ns != 0).then_some(i.window_end_unix_ns),
        containers: i
            .containers
            .iter()
            .map(|c| sidecar::SidecarContainer {
                container: Container {
                    runtime: c.runtime.clone(),
                    id: c.id.clone(),
                    cgroup: c.cgroup.clone(),
                    pod_uid: c.pod_uid.clone(),
                    name: c.name.clone(),
                    pod: c.pod.clone(),
                    namespace: c.namespace.clone(),
                },
                samples: c.samples,
            })
            .collect(),
        scope: i.scope.clone(),
    })
}

/// The containers a sidecar names (with the runtime's names, where the
/// daemon had them).
fn known_containers(side: Option<&Sidecar>) -> Vec<Container> {
    side.map(|s| s.containers.iter().map(|c| c.container.clone()).collect())
        .unwrap_or_default()
}

/// Whether the command line named a file rather than an id.
fn is_file_name(snapshot: &str) -> bool {
    snapshot.contains('/') || snapshot.ends_with(".perf.data")
}

/// The snapshot's file: `snapshot` itself when it names one, else the
/// path the daemon lists for that id.
async fn snapshot_file(daemon: &Daemon, snapshot: &str) -> Result<PathBuf, ClientError> {
    Ok(snapshot_info(daemon, snapshot).await?.0)
}

/// The snapshot's file and, for an id, what the daemon lists about it
/// (its trigger and creation time).
async fn snapshot_info(
    daemon: &Daemon,
    snapshot: &str,
) -> Result<(PathBuf, Option<pb::Snapshot>), ClientError> {
    if is_file_name(snapshot) {
        return Ok((PathBuf::from(snapshot), None));
    }
    let mut client = daemon.connect().await?;
    let r = daemon.answered(client.list(pb::ListRequest {})).await?;
    match r.snapshots.into_iter().find(|s| s.id == snapshot) {
        Some(s) => Ok((PathBuf::from(&s.path), Some(s))),
        None => Err(ClientError::Daemon {
            code: tonic::Code::NotFound,
            message: format!("no snapshot with id {snapshot} (see snapctl list)"),
        }),
    }
}

/// The sidecar the daemon wrote beside snapshot file `path`, if it is
/// there, readable and a regular file (not followed as a link); anything
/// else is as if there were none.
fn sidecar_beside(path: &Path) -> Option<Sidecar> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let side = dir.join(sidecar::file_name(&snapshot_id(path)));
    let (mut f, _) = flightrec_files::open_regular(&side, flightrec_files::Links::Refuse).ok()?;
    let bytes = flightrec_files::untrusted::read_small(&mut f, sidecar::MAX_BYTES).ok()?;
    serde_json::from_slice(&bytes).ok()
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
    fn a_sidecar_beside_a_file_is_read_and_a_link_or_garbage_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("h-20261120T221133Z-000001.perf.data");
        assert_eq!(sidecar_beside(&file), None);
        let side = dir.path().join(".h-20261120T221133Z-000001.meta");
        std::fs::write(
            &side,
            r#"{"trigger":"condition:oom","matched":"oom:mark_victim on CPU 0 by pid 9 (x)","created_unix_ns":7}"#,
        )
        .unwrap();
        let s = sidecar_beside(&file).unwrap();
        assert_eq!(s.trigger, "condition:oom");
        assert_eq!(s.matched, "oom:mark_victim on CPU 0 by pid 9 (x)");
        assert_eq!(s.created_unix_ns, 7);
        std::fs::write(&side, "not json").unwrap();
        assert_eq!(sidecar_beside(&file), None);
        std::fs::remove_file(&side).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, r#"{"trigger":"api","created_unix_ns":1}"#).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &side).unwrap();
        assert_eq!(sidecar_beside(&file), None, "a link is not followed");
    }

    #[test]
    fn the_containers_a_report_names_come_from_the_list_or_the_sidecar_beside_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("h-20261120T221133Z-000002.perf.data");
        assert!(known_containers(sidecar_of(&file, None).as_ref()).is_empty());
        std::fs::write(
            dir.path().join(".h-20261120T221133Z-000002.meta"),
            r#"{"trigger":"api","created_unix_ns":7,"scope":"container:web",
               "containers":[{"runtime":"podman","id":"a2ad75582abe0","cgroup":"/libpod_parent/libpod-a2ad75582abe0","name":"web","samples":9}]}"#,
        )
        .unwrap();
        let side = sidecar_of(&file, None).unwrap();
        assert_eq!(side.scope, "container:web");
        let known = known_containers(Some(&side));
        assert_eq!(known.len(), 1);
        assert_eq!(
            (known[0].name.as_str(), known[0].runtime.as_str()),
            ("web", "podman")
        );
        // An id the daemon lists: its List entry, not a file, says it.
        let listed = pb::Snapshot {
            scope: "cgroup:/x".into(),
            containers: vec![pb::Container {
                runtime: "docker".into(),
                id: "f".repeat(64),
                cgroup: "/docker/x".into(),
                name: "db".into(),
                pod: "shop".into(),
                namespace: "prod".into(),
                samples: 3,
                ..pb::Container::default()
            }],
            ..pb::Snapshot::default()
        };
        let side = sidecar_of(&file, Some(&listed)).unwrap();
        assert_eq!(side.scope, "cgroup:/x");
        let known = known_containers(Some(&side));
        assert_eq!(
            (
                known[0].name.as_str(),
                known[0].pod.as_str(),
                known[0].namespace.as_str()
            ),
            ("db", "shop", "prod")
        );
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
