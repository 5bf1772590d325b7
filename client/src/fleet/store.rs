//! `snapctl fleet list` and `snapctl fleet fetch`: the snapshots the
//! daemons uploaded into the JetStream object store bucket, each the
//! object `<host>/<id>.perf.data` described by its headers
//! (flightrecd's `fleet::object`, the same code that writes them).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream;
use async_nats::jetstream::object_store::ObjectInfo;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE;
use flightrec_files::{Access, Existing, NewFile};
use flightrec_proto::object::{ObjectHeaders, object_name, parse_object_name};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::FleetTarget;
use super::bucket::Bucket;
use super::interrupts::Interrupts;
use crate::ClientError;
use crate::render::{human_bytes, snapshot_cells, table};

/// An object of the bucket that is not a snapshot, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub name: String,
    pub why: String,
}

/// What `fleet list` found: the snapshots newest first, and the objects
/// that are not snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub bucket: String,
    pub snapshots: Vec<ObjectHeaders>,
    pub skipped: Vec<Skipped>,
}

/// `HOST/ID` (or `HOST/ID.perf.data`) as `fleet list` shows it.
pub fn parse_snapshot_ref(s: &str) -> Result<(String, String), String> {
    let name = if s.ends_with(".perf.data") {
        s.to_string()
    } else {
        format!("{s}.perf.data")
    };
    match parse_object_name(&name) {
        Some((host, id)) => Ok((host.to_string(), id.to_string())),
        None => Err(format!(
            "{s:?} is not HOST/ID (as `snapctl fleet list` shows them)"
        )),
    }
}

/// The snapshot an object describes: its name is `HOST/ID.perf.data` and
/// its headers parse and name the same host and id.
pub fn snapshot_of(name: &str, headers: Option<&HeaderMap>) -> Result<ObjectHeaders, String> {
    let (host, id) =
        parse_object_name(name).ok_or_else(|| "the name is not HOST/ID.perf.data".to_string())?;
    let headers = headers.ok_or_else(|| "it has no headers".to_string())?;
    let lookup = |wanted: &str| {
        headers
            .iter()
            .find(|(k, _)| AsRef::<str>::as_ref(k).eq_ignore_ascii_case(wanted))
            .and_then(|(_, values)| values.first())
            .map(|v| v.as_str().to_string())
    };
    let h = ObjectHeaders::from_lookup(lookup)?;
    if h.host != host || h.id != id {
        return Err(format!("its headers name {}/{} instead", h.host, h.id));
    }
    Ok(h)
}

/// Snapshots newest first (ties by host, then id), those of `host` only
/// when given; the other objects as skipped.
pub fn listing(bucket: &str, objects: &[ObjectInfo], host: Option<&str>) -> Listing {
    let mut snapshots = Vec::new();
    let mut skipped = Vec::new();
    for o in objects {
        match snapshot_of(&o.name, o.headers.as_ref()) {
            Ok(h) if host.is_none_or(|wanted| h.host == wanted) => snapshots.push(h),
            Ok(_) => {}
            Err(why) => skipped.push(Skipped {
                name: o.name.clone(),
                why,
            }),
        }
    }
    snapshots.sort_by(|a, b| {
        b.created_unix_ns
            .cmp(&a.created_unix_ns)
            .then_with(|| a.host.cmp(&b.host))
            .then_with(|| a.id.cmp(&b.id))
    });
    Listing {
        bucket: bucket.to_string(),
        snapshots,
        skipped,
    }
}

impl Listing {
    /// A table like `snapctl list`'s with the host first, or
    /// `{"snapshots": [...]}` with ObjectHeaders' keys.
    pub fn render(&self, as_json: bool) -> String {
        if as_json {
            let snaps: Vec<Value> = self
                .snapshots
                .iter()
                .map(|s| serde_json::to_value(s).unwrap_or(Value::Null))
                .collect();
            return json!({ "snapshots": snaps }).to_string();
        }
        if self.snapshots.is_empty() {
            return format!("no snapshots in bucket {}", self.bucket);
        }
        let rows: Vec<Vec<String>> = self
            .snapshots
            .iter()
            .map(|s| {
                let mut row = vec![s.host.clone()];
                row.extend(snapshot_cells(
                    &s.id,
                    s.bytes,
                    s.created_unix_ns,
                    &s.trigger,
                    s.compressed,
                    &s.label,
                ));
                row
            })
            .collect();
        let total: u64 = self.snapshots.iter().map(|s| s.bytes).sum();
        format!(
            "{}\n{} snapshots, {}",
            table(
                &[
                    "HOST",
                    "ID",
                    "SIZE",
                    "CREATED",
                    "TRIGGER",
                    "COMPRESSED",
                    "LABEL"
                ],
                &rows
            ),
            self.snapshots.len(),
            human_bytes(total)
        )
    }

    /// One stderr line per object that is not a snapshot.
    pub fn warnings(&self) -> Vec<String> {
        self.skipped
            .iter()
            .map(|s| {
                format!(
                    "warning: skipped object {:?} in bucket {:?}: not a snapshot ({})",
                    s.name, self.bucket, s.why
                )
            })
            .collect()
    }
}

fn not_found(message: String) -> ClientError {
    ClientError::Daemon {
        code: tonic::Code::NotFound,
        message,
    }
}

/// The bucket, or why not: a missing bucket means nothing was uploaded.
async fn open_bucket(target: &FleetTarget, timeout: Duration) -> Result<Bucket, ClientError> {
    if !valid_bucket_name(&target.bucket) {
        return Err(target.error(format!(
            "{:?} is not a bucket name (1 to 64 characters from A-Z a-z 0-9 _ -)",
            target.bucket
        )));
    }
    let client = target.connect(timeout).await?;
    let mut js = jetstream::new(client);
    // Each call below is bounded by `timeout` here; the context's own
    // limit is later, so a stall always gets the same message.
    js.set_timeout(timeout + Duration::from_secs(1));
    let stream = within(target, timeout, "open bucket", async {
        js.get_stream(format!("OBJ_{}", target.bucket))
            .await
            .map_err(|e| match e.kind() {
                jetstream::context::GetStreamErrorKind::JetStream(js_error)
                    if js_error.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND =>
                {
                    not_found(format!(
                        "no snapshot was uploaded yet: bucket {:?} does not exist on {}",
                        target.bucket,
                        target.servers_text()
                    ))
                }
                _ => target.error(format!("cannot open bucket {:?}: {e}", target.bucket)),
            })
    })
    .await?;
    Ok(Bucket::new(&target.bucket, stream))
}

/// As a JetStream object store names its buckets (and `[fleet] bucket`).
pub fn valid_bucket_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `call`, or an error naming `what` when NATS did not answer within
/// `timeout`.
async fn within<T>(
    target: &FleetTarget,
    timeout: Duration,
    what: &str,
    call: impl Future<Output = Result<T, ClientError>>,
) -> Result<T, ClientError> {
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or_else(|_| {
            Err(target.error(format!(
            "no answer within {} ({what} {:?}); --timeout or FLIGHTREC_TIMEOUT change the limit",
            humantime::format_duration(timeout),
            target.bucket
        )))
        })
}

/// Every object of the bucket (deleted ones are not listed).
pub async fn list(
    target: &FleetTarget,
    host: Option<&str>,
    timeout: Duration,
) -> Result<Listing, ClientError> {
    let bucket = open_bucket(target, timeout).await?;
    // Bounded as a whole: a bucket of thousands takes a second or two.
    let infos = within(target, timeout, "list bucket", async {
        bucket
            .objects()
            .await
            .map_err(|e| target.error(format!("cannot list bucket {:?}: {e}", target.bucket)))
    })
    .await?;
    Ok(listing(&target.bucket, &infos, host))
}

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
    let part = create_part(dir, out)?;
    // Caught from here to the end of the fetch, so that an interrupted
    // download removes its partial file first.
    let interrupts = Interrupts::catch().map_err(|e| local_error(dir, "download into", e))?;
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
                    humantime::format_duration(timeout)
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
    use std::collections::BTreeMap;

    use super::*;

    fn headers(host: &str, id: &str, created: i64) -> ObjectHeaders {
        ObjectHeaders {
            host: host.into(),
            id: id.into(),
            label: if id.ends_with('2') { "" } else { "incident" }.into(),
            trigger: "signal".into(),
            bytes: 3 * 1024 * 1024,
            compressed: id.ends_with('2'),
            created_unix_ns: created,
            labels: BTreeMap::from([("role".into(), "db".into())]),
            digest: "SHA-256=x".into(),
        }
    }

    fn object(name: &str, h: Option<&ObjectHeaders>) -> ObjectInfo {
        let headers = h.map(|h| {
            let mut map = HeaderMap::new();
            for (k, v) in h.to_pairs() {
                map.insert(k, v.as_str());
            }
            map
        });
        serde_json::from_value::<ObjectInfo>(json!({"name": name, "bucket": "flightrec"}))
            .map(|mut o| {
                o.headers = headers;
                o
            })
            .unwrap()
    }

    #[test]
    fn bucket_names_are_those_jetstream_takes() {
        assert!(valid_bucket_name("flightrec"));
        assert!(valid_bucket_name("prod_snaps-2"));
        assert!(valid_bucket_name(&"b".repeat(64)));
        assert!(!valid_bucket_name(&"b".repeat(65)));
        assert!(!valid_bucket_name(""));
        assert!(!valid_bucket_name("a.b"));
        assert!(!valid_bucket_name("a b"));
    }

    #[test]
    fn snapshot_refs_are_host_slash_id() {
        assert_eq!(
            parse_snapshot_ref("host-a/box-1").unwrap(),
            ("host-a".to_string(), "box-1".to_string())
        );
        assert_eq!(
            parse_snapshot_ref("host-a/box-1.perf.data").unwrap(),
            ("host-a".to_string(), "box-1".to_string())
        );
        assert_eq!(
            parse_snapshot_ref("box-1").unwrap_err(),
            "\"box-1\" is not HOST/ID (as `snapctl fleet list` shows them)"
        );
        assert!(parse_snapshot_ref("a/b/c").is_err());
        assert!(parse_snapshot_ref("/b").is_err());
    }

    #[test]
    fn listing_is_newest_first_filtered_and_skips_what_is_not_a_snapshot() {
        let a1 = headers("host-a", "box-1", 1_795_212_693_000_000_000);
        let b2 = headers("host-b", "box-2", 1_795_212_694_000_000_000);
        let mut liar = headers("host-c", "box-3", 1);
        liar.host = "host-d".into();
        let objects = vec![
            object("host-a/box-1.perf.data", Some(&a1)),
            object("notes.txt", None),
            object("host-b/box-2.perf.data", Some(&b2)),
            object("host-c/box-3.perf.data", Some(&liar)),
            object("host-c/box-4.perf.data", None),
        ];
        let l = listing("flightrec", &objects, None);
        assert_eq!(l.snapshots, [b2.clone(), a1.clone()]);
        assert_eq!(
            l.warnings(),
            [
                "warning: skipped object \"notes.txt\" in bucket \"flightrec\": not a snapshot \
                 (the name is not HOST/ID.perf.data)",
                "warning: skipped object \"host-c/box-3.perf.data\" in bucket \"flightrec\": not \
                 a snapshot (its headers name host-d/box-3 instead)",
                "warning: skipped object \"host-c/box-4.perf.data\" in bucket \"flightrec\": not \
                 a snapshot (it has no headers)",
            ]
        );
        let only_a = listing("flightrec", &objects, Some("host-a"));
        assert_eq!(only_a.snapshots, [a1]);

        let v: Value = serde_json::from_str(&l.render(true)).unwrap();
        assert_eq!(
            v["snapshots"][0],
            json!({"host": "host-b", "id": "box-2", "label": "", "trigger": "signal",
                   "bytes": 3_145_728, "compressed": true,
                   "created_unix_ns": 1_795_212_694_000_000_000_i64})
        );
        let text = l.render(false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "HOST    ID     SIZE    CREATED               TRIGGER  COMPRESSED  LABEL"
        );
        assert_eq!(
            lines[1],
            "host-b  box-2  3.0MiB  2026-11-20 22:11:34Z  signal   zstd        -"
        );
        assert_eq!(
            lines[2],
            "host-a  box-1  3.0MiB  2026-11-20 22:11:33Z  signal   -           incident"
        );
        assert_eq!(lines[3], "2 snapshots, 6.0MiB");
        let empty = listing("snaps", &[], None);
        assert_eq!(empty.render(false), "no snapshots in bucket snaps");
        assert_eq!(empty.render(true), r#"{"snapshots":[]}"#);
    }

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
