//! `snapctl fleet list` (and what `fleet fetch` shares): the snapshots the
//! daemons uploaded into the JetStream object store bucket, each the
//! object `<host>/<id>.perf.data` described by its headers
//! (flightrecd's `fleet::object`, the same code that writes them).

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream;
use async_nats::jetstream::object_store::ObjectInfo;
use flightrec_proto::object::{ObjectHeaders, parse_object_name};
use serde_json::{Value, json};

use super::FleetTarget;
use super::bucket::Bucket;
use crate::ClientError;
use crate::render::{human_bytes, shown, snapshot_cells, table};

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
                let line = format!(
                    "warning: skipped object {:?} in bucket {:?}: not a snapshot ({})",
                    s.name, self.bucket, s.why
                );
                shown(&line).into_owned()
            })
            .collect()
    }
}

pub(super) fn not_found(message: String) -> ClientError {
    ClientError::Daemon {
        code: tonic::Code::NotFound,
        message,
    }
}

/// The bucket, or why not: a missing bucket means nothing was uploaded.
pub(super) async fn open_bucket(
    target: &FleetTarget,
    timeout: Duration,
) -> Result<Bucket, ClientError> {
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
pub(super) async fn within<T>(
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
            crate::render::std_duration(timeout),
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

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The headers of snapshot `host/id` (3 MiB), created at `created`.
    pub(in crate::fleet) fn headers(host: &str, id: &str, created: i64) -> ObjectHeaders {
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
}
