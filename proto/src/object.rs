//! What an uploaded snapshot is called in a bucket and what it says about
//! itself: the same names and headers for the JetStream object store, for
//! S3 (as `x-amz-meta-*`) and for `snapctl fleet list`, written by the
//! daemon and read by `snapctl`. Pure.

use std::collections::BTreeMap;

use serde::Serialize;

/// Header names, in the order they are written. S3 stores them lowercased
/// as user metadata (`x-amz-meta-flightrec-host`, ...).
pub const HOST: &str = "Flightrec-Host";
pub const ID: &str = "Flightrec-Id";
pub const LABELS: &str = "Flightrec-Labels";
pub const TRIGGER: &str = "Flightrec-Trigger";
pub const LABEL: &str = "Flightrec-Label";
pub const CREATED_UNIX_NS: &str = "Flightrec-Created-Unix-Ns";
pub const BYTES: &str = "Flightrec-Bytes";
pub const COMPRESSED: &str = "Flightrec-Compressed";
/// `SHA-256=<base64url>`, as the JetStream object store writes its digest.
pub const DIGEST: &str = "Flightrec-Digest";

/// The object name of snapshot `id` of fleet host `host`:
/// `<host>/<id>.perf.data`. The fleet host, not the machine's name, comes
/// first, so daemons sharing a machine (and so an id) do not collide.
pub fn object_name(host: &str, id: &str) -> String {
    format!("{host}/{id}.perf.data")
}

/// `HOST/ID` from an object name; None for objects that are not
/// snapshots.
pub fn parse_object_name(name: &str) -> Option<(&str, &str)> {
    let (host, file) = name.split_once('/')?;
    let id = file.strip_suffix(".perf.data")?;
    (!host.is_empty() && !id.is_empty() && !id.contains('/')).then_some((host, id))
}

/// An uploaded snapshot's description, as headers carry it and as
/// `snapctl --json fleet list` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObjectHeaders {
    pub host: String,
    pub id: String,
    /// "" without a label.
    pub label: String,
    /// As `snapctl list` shows it: "signal", "fleet", "condition:oom"...
    pub trigger: String,
    pub bytes: u64,
    pub compressed: bool,
    pub created_unix_ns: i64,
    /// The host's `[fleet] labels`.
    #[serde(skip)]
    pub labels: BTreeMap<String, String>,
    /// `SHA-256=<base64url>` of the file; "" when unknown.
    #[serde(skip)]
    pub digest: String,
}

impl ObjectHeaders {
    /// The object's name in a bucket.
    pub fn object_name(&self) -> String {
        object_name(&self.host, &self.id)
    }

    /// (name, value) pairs; labels as a JSON object (values may hold any
    /// character but control characters, which JSON escapes).
    pub fn to_pairs(&self) -> Vec<(&'static str, String)> {
        // A map of strings always serializes.
        let labels = serde_json::to_string(&self.labels).unwrap_or_default();
        vec![
            (HOST, self.host.clone()),
            (ID, self.id.clone()),
            (LABELS, labels),
            (TRIGGER, self.trigger.clone()),
            (LABEL, self.label.clone()),
            (CREATED_UNIX_NS, self.created_unix_ns.to_string()),
            (BYTES, self.bytes.to_string()),
            (COMPRESSED, self.compressed.to_string()),
            (DIGEST, self.digest.clone()),
        ]
    }

    /// Back from headers; `get` looks a name up (case-insensitively where
    /// the store lowercases). The error names the missing or bad header.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let need = |name: &str| get(name).ok_or_else(|| format!("header {name} is missing"));
        let number = |name: &str| -> Result<i128, String> {
            let text = need(name)?;
            text.trim()
                .parse()
                .map_err(|_| format!("header {name} is not a number: {text:?}"))
        };
        let labels = match get(LABELS).filter(|l| !l.is_empty()) {
            None => BTreeMap::new(),
            Some(text) => serde_json::from_str(&text)
                .map_err(|e| format!("header {LABELS} is not a JSON object of strings: {e}"))?,
        };
        let compressed = match need(COMPRESSED)?.as_str() {
            "true" => true,
            "false" => false,
            other => return Err(format!("header {COMPRESSED} is not true/false: {other:?}")),
        };
        Ok(Self {
            host: need(HOST)?,
            id: need(ID)?,
            label: get(LABEL).unwrap_or_default(),
            trigger: get(TRIGGER).unwrap_or_else(|| "unknown".to_string()),
            bytes: u64::try_from(number(BYTES)?).map_err(|_| format!("header {BYTES} < 0"))?,
            compressed,
            created_unix_ns: i64::try_from(number(CREATED_UNIX_NS)?)
                .map_err(|_| format!("header {CREATED_UNIX_NS} is out of range"))?,
            labels,
            digest: get(DIGEST).unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let labels = [
            ("role".to_string(), "db".to_string()),
            ("zone".into(), "a,b=c".into()),
        ]
        .into_iter()
        .collect();
        let h = ObjectHeaders {
            host: "host-a".into(),
            id: "box-20261123T180000Z-000007-incident".into(),
            label: "incident".into(),
            trigger: "fleet+signal".into(),
            bytes: 4096,
            compressed: true,
            created_unix_ns: 1_795_500_000_123_456_789,
            labels,
            digest: "SHA-256=abc".into(),
        };
        assert_eq!(
            h.object_name(),
            "host-a/box-20261123T180000Z-000007-incident.perf.data"
        );
        let pairs = h.to_pairs();
        assert!(pairs.contains(&(LABELS, r#"{"role":"db","zone":"a,b=c"}"#.to_string())));
        let lower: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect();
        let back = ObjectHeaders::from_lookup(|n| lower.get(&n.to_ascii_lowercase()).cloned());
        assert_eq!(back.unwrap(), h);
    }

    #[test]
    fn bad_headers_are_named() {
        let value = |n: &str| if n == LABELS { "{}" } else { "true" }.to_string();
        let e = ObjectHeaders::from_lookup(|n| (n != BYTES).then(|| value(n)));
        assert_eq!(e.unwrap_err(), "header Flightrec-Bytes is missing");
        let e =
            ObjectHeaders::from_lookup(|n| Some(if n == BYTES { "x".into() } else { value(n) }));
        assert_eq!(
            e.unwrap_err(),
            "header Flightrec-Bytes is not a number: \"x\""
        );
        let e =
            ObjectHeaders::from_lookup(|n| Some(if n == LABELS { "[1]" } else { "true" }.into()));
        assert!(
            e.unwrap_err()
                .starts_with("header Flightrec-Labels is not a JSON object of strings"),
        );
    }

    #[test]
    fn object_names_parse_back() {
        assert_eq!(
            parse_object_name("host-a/id-1.perf.data"),
            Some(("host-a", "id-1"))
        );
        assert_eq!(parse_object_name("host-a/id-1.txt"), None);
        assert_eq!(parse_object_name("/id.perf.data"), None);
        assert_eq!(parse_object_name("a/b/c.perf.data"), None);
    }
}
