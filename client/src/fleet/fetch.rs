//! `snapctl fleet fetch`: one snapshot of the bucket downloaded, checked
//! against its headers and the store's size and digest, and written
//! exclusively under a temporary name that becomes the file once whole.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream::object_store::ObjectInfo;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE;
use flightrec_files::{Access, Existing, NewFile};
use flightrec_proto::object::{ObjectHeaders, object_name};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::FleetTarget;
use super::bucket::Bucket;
use super::interrupts::Interrupts;
use super::store::{not_found, open_bucket, snapshot_of, within};
use crate::ClientError;

/// What `fleet fetch` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub path: PathBuf,
    pub snapshot: ObjectHeaders,
}

impl Fetched {
    pub fn render(&self, as_json: bool) -> String {
        if as_json {
            let mut v = serde_json::to_value(&self.snapshot).unwrap_or(Value::Null);
            v["path"] = json!(self.path.display().to_string());
            return v.to_string();
        }
        self.path.display().to_string()
    }
}

/// Where `fetch` writes: `output`, `output/ID.perf.data` when it is a
/// directory, `./ID.perf.data` by default.
pub fn output_path(output: Option<&Path>, id: &str) -> PathBuf {
    let file = format!("{id}.perf.data");
    match output {
        None => PathBuf::from(file),
        Some(dir) if dir.is_dir() => dir.join(file),
        Some(path) => path.to_path_buf(),
    }
}

fn already_exists(path: &Path) -> ClientError {
    ClientError::Daemon {
        code: tonic::Code::AlreadyExists,
        message: format!("{} already exists (--force overwrites it)", path.display()),
    }
}

fn local_error(path: &Path, what: &str, e: impl std::fmt::Display) -> ClientError {
    ClientError::Daemon {
        code: tonic::Code::FailedPrecondition,
        message: format!("cannot {what} {}: {e}", path.display()),
    }
}

/// Downloads snapshot `host/id` to `out`: into a temporary file beside
/// it, renamed over it only once complete and of the size and digest the
/// store and the headers promised, so a cut download leaves nothing
/// behind. An existing `out` is kept unless `force`.
pub async fn fetch(
    target: &FleetTarget,
    (host, id): (&str, &str),
    out: &Path,
    force: bool,
    timeout: Duration,
) -> Result<Fetched, ClientError> {
    if !force && out.symlink_metadata().is_ok() {
        return Err(already_exists(out));
    }
    let bucket = open_bucket(target, timeout).await?;
    let name = object_name(host, id);
    let (info, snapshot) = look_up_snapshot(target, &bucket, (host, id), &name, timeout).await?;
    let dir = download_dir(out);
    // Caught from before the partial file exists to the end of the fetch,
    // so that an interrupted download removes it first (a signal that
    // comes between is seen at the download's first wait).
    let interrupts = Interrupts::catch().map_err(|e| local_error(dir, "download into", e))?;
    let part = create_part(dir, out)?;
    let source = Source {
        target,
        bucket: &bucket,
        info: &info,
        name: &name,
    };
    let (part, downloaded) = download(&source, part, &interrupts, timeout).await?;
    verify(&name, &downloaded, &snapshot, &info)?;
    commit(part, out, force)?;
    Ok(Fetched {
        path: out.to_path_buf(),
        snapshot,
    })
}

/// Object `HOST/ID.perf.data` of the bucket and the snapshot its headers
/// describe; not found, or not a snapshot, are errors.
async fn look_up_snapshot(
    target: &FleetTarget,
    bucket: &Bucket,
    (host, id): (&str, &str),
    name: &str,
    timeout: Duration,
) -> Result<(ObjectInfo, ObjectHeaders), ClientError> {
    let info = within(target, timeout, "look up in bucket", async {
        bucket.info(name).await.map_err(|e| {
            target.error(format!(
                "cannot look {name} up in bucket {:?}: {e}",
                target.bucket
            ))
        })
    })
    .await?
    .ok_or_else(|| {
        not_found(format!(
            "no snapshot {host}/{id} in bucket {:?} on {} (see snapctl fleet list)",
            target.bucket,
            target.servers_text()
        ))
    })?;
    let snapshot =
        snapshot_of(&info.name, info.headers.as_ref()).map_err(|why| ClientError::Daemon {
            code: tonic::Code::FailedPrecondition,
            message: format!(
                "object {name} in bucket {:?} is not a snapshot: {why}",
                target.bucket
            ),
        })?;
    Ok((info, snapshot))
}

/// The directory `out` is in (the current one for a bare file name).
fn download_dir(out: &Path) -> &Path {
    match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The file the download goes into: created exclusively in `dir` under a
/// temporary name, readable by its user only, given the name of `out`
/// once whole.
fn create_part(dir: &Path, out: &Path) -> Result<NewFile, ClientError> {
    let file_name = out
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| local_error(out, "write", std::io::Error::other("no file name")))?;
    NewFile::create(dir, file_name, Access::PRIVATE)
        .map_err(|e| local_error(dir, "create a file in", e))
}

/// The object a download reads, and where from.
struct Source<'a> {
    target: &'a FleetTarget,
    bucket: &'a Bucket,
    info: &'a ObjectInfo,
    /// `HOST/ID.perf.data`, as the messages name it.
    name: &'a str,
}

/// What a download wrote: its size and its digest as the object store
/// writes digests (`SHA-256=` and URL-safe base64).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Downloaded {
    bytes: u64,
    digest: String,
}

/// Writes the object's chunks into `part` in order, each within
/// `timeout`; gives `part` back once there are no more. A signal in
/// `interrupts` removes `part`, then does what it would have done.
async fn download(
    source: &Source<'_>,
    mut part: NewFile,
    interrupts: &Interrupts,
    timeout: Duration,
) -> Result<(NewFile, Downloaded), ClientError> {
    let Source {
        target,
        bucket,
        info,
        name,
    } = source;
    let mut sha = Sha256::new();
    let mut written: u64 = 0;
    let mut next_seq = 1;
    for _ in 0..info.chunks {
        let chunk = tokio::select! {
            signal = interrupts.wait() => {
                // The partial file goes first, then the signal does what
                // it would have done.
                drop(part);
                let _ = signal_hook::low_level::emulate_default_handler(signal);
                return Err(target.error(format!(
                    "the download of {name} was interrupted by signal {signal}; nothing written"
                )));
            }
            chunk = tokio::time::timeout(timeout, bucket.chunk(info, next_seq)) => chunk,
        };
        let chunk = match chunk {
            Ok(Ok(Some(chunk))) => chunk,
            // Fewer chunks than the object has: the size check says so.
            Ok(Ok(None)) => break,
            Ok(Err(e)) => {
                return Err(target.error(format!(
                    "the download of {name} failed after {written} bytes: {e}"
                )));
            }
            Err(_) => {
                return Err(target.error(format!(
                    "the download of {name} stalled after {written} bytes (nothing for {})",
                    crate::render::std_duration(timeout)
                )));
            }
        };
        part.file_mut()
            .write_all(&chunk.payload)
            .map_err(|e| local_error(part.temp_path(), "write", e))?;
        sha.update(&chunk.payload);
        written += chunk.payload.len() as u64;
        next_seq = chunk.sequence + 1;
    }
    let downloaded = Downloaded {
        bytes: written,
        digest: format!("SHA-256={}", URL_SAFE.encode(sha.finalize())),
    };
    Ok((part, downloaded))
}

/// The download has the size both the headers and the store give, and
/// the digest of each that has one (the store's, and the daemon's
/// header).
fn verify(
    name: &str,
    got: &Downloaded,
    snapshot: &ObjectHeaders,
    info: &ObjectInfo,
) -> Result<(), ClientError> {
    let written = got.bytes;
    if written != snapshot.bytes || written != info.size as u64 {
        return Err(ClientError::Daemon {
            code: tonic::Code::DataLoss,
            message: format!(
                "{name}: downloaded {written} bytes, but its headers say {} and the store {}; \
                 nothing written",
                snapshot.bytes, info.size
            ),
        });
    }
    let digest = got.digest.as_str();
    let expected = [info.digest.as_deref(), Some(snapshot.digest.as_str())];
    if let Some(want) = expected
        .into_iter()
        .flatten()
        .find(|want| !want.is_empty() && *want != digest)
    {
        return Err(ClientError::Daemon {
            code: tonic::Code::DataLoss,
            message: format!(
                "{name}: the downloaded bytes have digest {digest}, not {want}; nothing written"
            ),
        });
    }
    Ok(())
}

/// Synced, then renamed to `out`: a file that appeared meanwhile is
/// replaced only with `force`.
fn commit(part: NewFile, out: &Path, force: bool) -> Result<(), ClientError> {
    let existing = if force {
        Existing::Replace
    } else {
        Existing::Keep
    };
    part.commit(existing).map_err(|e| {
        let e = e.into_io();
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            already_exists(out)
        } else {
            local_error(out, "write", e)
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::store::tests::headers;

    #[test]
    fn the_output_defaults_to_the_id_in_the_current_or_given_directory() {
        assert_eq!(output_path(None, "box-1"), Path::new("box-1.perf.data"));
        let dir = std::env::temp_dir();
        assert_eq!(
            output_path(Some(&dir), "box-1"),
            dir.join("box-1.perf.data")
        );
        assert_eq!(
            output_path(Some(Path::new("/nonexistent/x.data")), "box-1"),
            Path::new("/nonexistent/x.data")
        );
    }

    #[test]
    fn a_download_must_have_the_promised_size_and_digests() {
        let digest = format!("SHA-256={}", URL_SAFE.encode(Sha256::digest(b"abc")));
        let got = Downloaded {
            bytes: 3,
            digest: digest.clone(),
        };
        let mut h = headers("host-a", "box-1", 1);
        h.bytes = 3;
        h.digest = digest.clone();
        let info = |size: u64, digest: Option<&str>| {
            serde_json::from_value::<ObjectInfo>(json!({
                "name": "host-a/box-1.perf.data", "bucket": "flightrec",
                "size": size, "digest": digest,
            }))
            .unwrap()
        };
        let name = "host-a/box-1.perf.data";
        assert!(verify(name, &got, &h, &info(3, Some(&digest))).is_ok());
        assert!(verify(name, &got, &h, &info(3, None)).is_ok());
        let short = verify(name, &got, &h, &info(4, None)).unwrap_err();
        assert_eq!(
            short.to_string(),
            "host-a/box-1.perf.data: downloaded 3 bytes, but its headers say 3 and the store 4; \
             nothing written"
        );
        assert_eq!(short.exit_code(), crate::EXIT_DAEMON_ERROR);
        let corrupt = verify(name, &got, &h, &info(3, Some("SHA-256=other"))).unwrap_err();
        assert_eq!(
            corrupt.to_string(),
            format!(
                "{name}: the downloaded bytes have digest {digest}, not SHA-256=other; nothing written"
            )
        );
        h.digest = String::new();
        assert!(verify(name, &got, &h, &info(3, None)).is_ok());
        h.digest = "SHA-256=x".into();
        assert!(verify(name, &got, &h, &info(3, None)).is_err());
    }
}
