//! A fleet dump request and its reply, as JSON on NATS: parsing, matching
//! a selector against this host's labels, and the reply's fields. Pure.

use std::collections::BTreeMap;

use flightrec_config::quoted;
use serde::{Deserialize, Serialize};

use crate::dump::HeldWindow;
use crate::dump::{Scope, WindowRequest};
use crate::store::SnapshotInfo;

/// Largest request accepted: a label and a few selector pairs fit in far
/// less; anything bigger is refused before parsing.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// `{"label": "...", "select": {"role": "db"}, "compress": false,
/// "at": "2026-11-23T21:04:05.000000000Z", "before": "10s", "after": "2s"}`;
/// every key is optional. Unknown keys are ignored, so an older daemon
/// still answers a newer client. `at` is absolute (RFC 3339, UTC) so that
/// every host cuts the same wall-clock window whenever the request reaches
/// it; `before` and `after` are durations, as `snapctl dump` takes them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Every pair must equal one of the host's labels (`host` also
    /// matches the host's fleet name unless a label is called `host`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub select: BTreeMap<String, String>,
    /// None: `[snapshot] compression` decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compress: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Part of the machine only: cgroup paths and containers (ids or
    /// names), each a string or a list of them; the same pod on every node.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "one_or_many"
    )]
    pub cgroup: Vec<String>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "one_or_many"
    )]
    pub container: Vec<String>,
}

/// A string, or a list of strings.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

impl FleetRequest {
    /// Parses a request; the error says what was wrong.
    pub fn parse(payload: &[u8]) -> Result<Self, String> {
        if payload.len() > MAX_REQUEST_BYTES {
            return Err(format!(
                "the request is {} bytes, at most {MAX_REQUEST_BYTES} are accepted",
                payload.len()
            ));
        }
        if payload.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self::default());
        }
        // serde quotes the offending value: cut it, whatever its size.
        let request: Self = serde_json::from_slice(payload).map_err(|e| {
            format!(
                "the request is not valid JSON of a fleet dump: {}",
                crate::log_limit::cut(&e.to_string())
            )
        })?;
        if request.label.as_deref() == Some("") {
            return Err("label \"\" is empty: leave it out for no label".into());
        }
        request.window()?;
        request.scope()?;
        Ok(request)
    }

    /// The part of the machine asked for; the error names the key.
    pub fn scope(&self) -> Result<Scope, String> {
        Scope::new(self.cgroup.clone(), self.container.clone()).map_err(|e| e.to_string())
    }

    /// The window asked for; the error names the key.
    pub fn window(&self) -> Result<WindowRequest, String> {
        let duration = |key: &str, text: &Option<String>| {
            text.as_deref()
                .map(|t| {
                    humantime::parse_duration(t.trim())
                        .map_err(|e| format!("{key}: {}: {e}", quoted(&crate::log_limit::cut(t))))
                })
                .transpose()
        };
        let at = self
            .at
            .as_deref()
            .map(|t| {
                humantime::parse_rfc3339(t.trim())
                    .ok()
                    .filter(|time| *time > std::time::UNIX_EPOCH)
                    .map(crate::time::WallTime::of)
                    .ok_or_else(|| {
                        format!(
                            "at: {} is not a time in RFC 3339 (UTC, e.g. 2026-11-23T21:04:05Z)",
                            quoted(&crate::log_limit::cut(t))
                        )
                    })
            })
            .transpose()?;
        Ok(WindowRequest {
            at,
            before: duration("before", &self.before)?,
            after: duration("after", &self.after)?,
        })
    }

    /// Whether a host called `host` with `labels` is selected.
    pub fn selects(&self, host: &str, labels: &BTreeMap<String, String>) -> bool {
        self.select.iter().all(|(key, want)| match labels.get(key) {
            Some(have) => have == want,
            None => key == "host" && want == host,
        })
    }
}

/// A reply: the snapshot's metadata, or what went wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetReply {
    pub host: String,
    #[serde(flatten)]
    pub outcome: ReplyOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ReplyOutcome {
    Snapshot {
        id: String,
        path: String,
        bytes: u64,
        compressed: bool,
        /// "" when none was given.
        label: String,
        /// As `snapctl list` shows it: "fleet", or e.g. "fleet+signal"
        /// when other triggers shared the dump.
        trigger: String,
        created_unix_ns: i64,
        /// The dump also served other triggers.
        coalesced: bool,
        /// The window the snapshot holds (as the `Dump` reply says).
        #[serde(default)]
        window_start_unix_ns: i64,
        #[serde(default)]
        window_end_unix_ns: i64,
        #[serde(default)]
        window_missing_ns: u64,
    },
    Error {
        error: String,
    },
}

impl FleetReply {
    pub fn snapshot(host: &str, s: &SnapshotInfo, window: HeldWindow, coalesced: bool) -> Self {
        Self {
            host: host.to_string(),
            outcome: ReplyOutcome::Snapshot {
                id: s.id.clone(),
                path: s.path.display().to_string(),
                bytes: s.bytes,
                compressed: s.compressed,
                label: s.label.clone().unwrap_or_default(),
                trigger: s.trigger.clone(),
                created_unix_ns: s.created_unix_ns,
                coalesced,
                window_start_unix_ns: window.start.as_unix_nanos(),
                window_end_unix_ns: window.end.as_unix_nanos(),
                window_missing_ns: u64::try_from(window.missing.as_nanos()).unwrap_or(u64::MAX),
            },
        }
    }

    pub fn error(host: &str, error: impl Into<String>) -> Self {
        Self {
            host: host.to_string(),
            outcome: ReplyOutcome::Error {
                error: error.into(),
            },
        }
    }

    pub fn to_json(&self) -> Vec<u8> {
        // Strings and numbers only: serialising cannot fail.
        serde_json::to_vec(self).unwrap_or_else(|e| {
            format!(
                "{{\"host\":{},\"error\":\"cannot encode the reply\"}}",
                quoted(&e.to_string())
            )
            .into_bytes()
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_issue_request_parses() {
        let r = FleetRequest::parse(
            br#"{"label": "incident-7", "select": {"role": "db"}, "compress": false}"#,
        )
        .unwrap();
        assert_eq!(r.label.as_deref(), Some("incident-7"));
        assert_eq!(r.select, labels(&[("role", "db")]));
        assert_eq!(r.compress, Some(false));
        // An empty payload or object asks every host, with defaults.
        assert_eq!(FleetRequest::parse(b"").unwrap(), FleetRequest::default());
        assert_eq!(FleetRequest::parse(b"{}").unwrap(), FleetRequest::default());
        // Keys a newer client may add are ignored.
        assert_eq!(
            FleetRequest::parse(br#"{"upload": true}"#).unwrap(),
            FleetRequest::default()
        );
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        let e = FleetRequest::parse(b"dump please").unwrap_err();
        assert!(
            e.starts_with("the request is not valid JSON of a fleet dump: expected value"),
            "{e}"
        );
        let e = FleetRequest::parse(br#"{"select": {"role": 1}}"#).unwrap_err();
        assert!(
            e.contains("invalid type: integer `1`, expected a string"),
            "{e}"
        );
        let e = FleetRequest::parse(br#"{"label": ""}"#).unwrap_err();
        assert_eq!(e, "label \"\" is empty: leave it out for no label");
        let big = vec![b' '; MAX_REQUEST_BYTES + 1];
        assert_eq!(
            FleetRequest::parse(&big).unwrap_err(),
            format!(
                "the request is {} bytes, at most 65536 are accepted",
                MAX_REQUEST_BYTES + 1
            )
        );
    }

    #[test]
    fn a_window_is_an_absolute_time_and_durations_and_bad_keys_are_named() {
        let r = FleetRequest::parse(
            br#"{"at": "2026-11-23T21:04:05.5Z", "before": "10s", "after": "250ms"}"#,
        )
        .unwrap();
        assert_eq!(
            r.window().unwrap(),
            WindowRequest {
                at: Some(crate::time::WallTime::from_unix_nanos(
                    1_795_467_845_500_000_000
                )),
                before: Some(std::time::Duration::from_secs(10)),
                after: Some(std::time::Duration::from_millis(250)),
            }
        );
        assert!(
            FleetRequest::parse(b"{}")
                .unwrap()
                .window()
                .unwrap()
                .is_empty()
        );
        for (payload, start) in [
            (r#"{"at": "-5m"}"#, "at: "),
            (r#"{"at": "2026-11-23"}"#, "at: "),
            (r#"{"before": "ten seconds"}"#, "before: "),
            (r#"{"after": "-1s"}"#, "after: "),
        ] {
            let e = FleetRequest::parse(payload.as_bytes()).unwrap_err();
            assert!(e.starts_with(start), "{e}");
        }
    }

    #[test]
    fn a_selector_needs_every_pair() {
        let host = labels(&[("role", "db"), ("zone", "a")]);
        let mut r = FleetRequest::default();
        assert!(r.selects("h", &host), "no selector selects every host");
        r.select = labels(&[("role", "db")]);
        assert!(r.selects("h", &host));
        r.select = labels(&[("role", "db"), ("zone", "b")]);
        assert!(!r.selects("h", &host));
        r.select = labels(&[("rack", "1")]);
        assert!(
            !r.selects("h", &host),
            "a label the host lacks never matches"
        );
        r.select = labels(&[("host", "h")]);
        assert!(r.selects("h", &host));
        assert!(!r.selects("other", &host));
        // A label called host wins over the fleet name.
        let named = labels(&[("host", "x")]);
        assert!(!r.selects("h", &named));
    }

    #[test]
    fn replies_carry_the_snapshot_or_the_error() {
        let s = SnapshotInfo {
            id: "20260101T000000.000Z-h-1-x".into(),
            path: PathBuf::from("/var/lib/flightrec/snapshots/x.perf.data"),
            bytes: 4096,
            compressed: false,
            label: Some("x".into()),
            trigger: "fleet".into(),
            matched: String::new(),
            created_unix_ns: 17,
            seq: 1,
            pending_uploads: Vec::new(),
            window: None,
            containers: Vec::new(),
            scope: String::new(),
        };
        let v: serde_json::Value = serde_json::from_slice(
            &FleetReply::snapshot(
                "host-a",
                &s,
                HeldWindow {
                    start: crate::time::WallTime::from_unix_nanos(10),
                    end: crate::time::WallTime::from_unix_nanos(20),
                    missing: std::time::Duration::from_nanos(3),
                },
                false,
            )
            .to_json(),
        )
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "host": "host-a", "id": "20260101T000000.000Z-h-1-x",
                "path": "/var/lib/flightrec/snapshots/x.perf.data", "bytes": 4096,
                "compressed": false, "label": "x", "trigger": "fleet",
                "created_unix_ns": 17, "coalesced": false,
                "window_start_unix_ns": 10, "window_end_unix_ns": 20, "window_missing_ns": 3
            })
        );
        let v: serde_json::Value =
            serde_json::from_slice(&FleetReply::error("host-b", "disk full").to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"host": "host-b", "error": "disk full"})
        );
        // And they read back (as snapctl reads them).
        let back: FleetReply =
            serde_json::from_slice(&FleetReply::error("h", "e").to_json()).unwrap();
        assert_eq!(back, FleetReply::error("h", "e"));
    }
}
