//! `snapctl fleet dump`: one request published on NATS to every daemon of
//! the fleet, the replies collected until `--wait` runs out (or every
//! expected host answered).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_stream::StreamExt;

use super::FleetTarget;
use crate::ClientError;
use crate::render::{human_bytes, shown, std_duration};

/// `role=db` into its key and value.
pub fn parse_selector(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not KEY=VALUE, e.g. role=db")),
    }
}

/// `--at` (already absolute: every host cuts the same instant, however
/// late the request reaches it), `--before`, `--after`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowArgs {
    pub at_unix_ns: Option<i64>,
    pub before: Option<Duration>,
    pub after: Option<Duration>,
}

/// The request the daemons read (daemon/src/fleet/request.rs).
pub fn request_json(
    label: Option<&str>,
    select: &BTreeMap<String, String>,
    compress: bool,
    window: WindowArgs,
    (cgroups, containers): (&[String], &[String]),
) -> Value {
    let mut v = json!({});
    if let Some(l) = label {
        v["label"] = json!(l);
    }
    if !select.is_empty() {
        v["select"] = json!(select);
    }
    if compress {
        v["compress"] = json!(true);
    }
    if let Some(at) = window.at_unix_ns {
        let time = std::time::UNIX_EPOCH + Duration::from_nanos(at.max(0).unsigned_abs());
        v["at"] = json!(humantime::format_rfc3339_nanos(time).to_string());
    }
    if let Some(before) = window.before {
        v["before"] = json!(humantime::format_duration(before).to_string());
    }
    if let Some(after) = window.after {
        v["after"] = json!(humantime::format_duration(after).to_string());
    }
    if !cgroups.is_empty() {
        v["cgroup"] = json!(cgroups);
    }
    if !containers.is_empty() {
        v["container"] = json!(containers);
    }
    v
}

/// What came back within the wait.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetDump {
    /// Each reply as the daemon sent it (`host` and the snapshot's
    /// metadata, or `host` and `error`), by host.
    pub replies: Vec<Value>,
    /// Expected hosts that did not answer.
    pub missing: Vec<String>,
    pub waited: Duration,
    /// From the request to the last reply.
    pub last_reply: Option<Duration>,
}

impl FleetDump {
    /// Exit status 1 when a host failed, did not answer, or none did.
    pub fn failure(&self) -> Option<String> {
        let errors = self
            .replies
            .iter()
            .filter(|r| r.get("error").is_some())
            .count();
        if self.replies.is_empty() {
            Some(format!(
                "no host answered within {}",
                std_duration(self.waited)
            ))
        } else if !self.missing.is_empty() || errors > 0 {
            Some(format!(
                "{} hosts did not answer, {errors} answered with an error",
                self.missing.len()
            ))
        } else {
            None
        }
    }

    pub fn render(&self, as_json: bool) -> String {
        if as_json {
            return json!({
                "replies": self.replies,
                "missing": self.missing,
                "last_reply_ns": self.last_reply.map(|d| d.as_nanos() as u64),
            })
            .to_string();
        }
        let mut out: Vec<String> = self
            .replies
            .iter()
            .map(|r| {
                // Every field is what a responder (any member of the
                // subject) chose to send.
                let field = |key: &str| shown(r[key].as_str().unwrap_or("?")).into_owned();
                let host = field("host");
                match r.get("error") {
                    Some(_) => format!("{host}  error: {}", field("error")),
                    None => format!(
                        "{host}  {}  {}  {}",
                        field("id"),
                        human_bytes(r["bytes"].as_u64().unwrap_or(0)),
                        field("path")
                    ),
                }
            })
            .collect();
        for host in &self.missing {
            out.push(format!(
                "{}  no reply within {}",
                shown(host),
                std_duration(self.waited)
            ));
        }
        out.push(match self.last_reply {
            Some(d) => format!(
                "{} hosts answered, the last after {}",
                self.replies.len(),
                std_duration(d)
            ),
            None => "no host answered".into(),
        });
        out.join("\n")
    }
}

/// Publishes one request to `<subject>.dump` (`<subject>.dump.<host>`
/// for one host) and collects the replies on an inbox until `wait` has
/// passed or every host of `expect` answered.
pub async fn dump(
    target: &FleetTarget,
    host: Option<&str>,
    request: &Value,
    wait: Duration,
    expect: &[String],
    timeout: Duration,
) -> Result<FleetDump, ClientError> {
    let client = target.connect(timeout).await?;
    let inbox = client.new_inbox();
    let mut replies = client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| target.error(e))?;
    let subject = match host {
        Some(h) => format!("{}.dump.{h}", target.subject),
        None => format!("{}.dump", target.subject),
    };
    let started = Instant::now();
    client
        .publish_with_reply(subject, inbox, request.to_string().into())
        .await
        .map_err(|e| target.error(e))?;
    client.flush().await.map_err(|e| target.error(e))?;
    let deadline = tokio::time::Instant::from_std(started + wait);
    let expected: BTreeSet<&str> = expect.iter().map(String::as_str).collect();
    let mut by_host: BTreeMap<String, Value> = BTreeMap::new();
    let mut last_reply = None;
    while let Ok(Some(message)) = tokio::time::timeout_at(deadline, replies.next()).await {
        let reply: Value = serde_json::from_slice(&message.payload)
            .unwrap_or_else(|e| json!({"host": "?", "error": format!("unreadable reply: {e}")}));
        let host = reply["host"].as_str().unwrap_or("?").to_string();
        last_reply = Some(started.elapsed());
        by_host.insert(host, reply);
        if !expected.is_empty() && expected.iter().all(|h| by_host.contains_key(*h)) {
            break;
        }
    }
    let missing = expected
        .iter()
        .filter(|h| !by_host.contains_key(**h))
        .map(|h| h.to_string())
        .collect();
    Ok(FleetDump {
        replies: by_host.into_values().collect(),
        missing,
        waited: wait,
        last_reply,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_are_key_value() {
        assert_eq!(
            parse_selector("role=db").unwrap(),
            ("role".to_string(), "db".to_string())
        );
        assert_eq!(
            parse_selector("zone=eu=1").unwrap(),
            ("zone".to_string(), "eu=1".to_string())
        );
        assert_eq!(
            parse_selector("role").unwrap_err(),
            "\"role\" is not KEY=VALUE, e.g. role=db"
        );
        assert!(parse_selector("=db").is_err());
        assert!(parse_selector("role=").is_err());
    }

    #[test]
    fn the_request_has_only_what_was_asked() {
        let none = WindowArgs::default();
        assert_eq!(
            request_json(None, &BTreeMap::new(), false, none, (&[], &[])),
            json!({})
        );
        let select = BTreeMap::from([("role".to_string(), "db".to_string())]);
        assert_eq!(
            request_json(Some("x"), &select, true, none, (&[], &[])),
            json!({"label": "x", "select": {"role": "db"}, "compress": true})
        );
        let window = WindowArgs {
            at_unix_ns: Some(1_795_467_845_500_000_000),
            before: Some(Duration::from_secs(10)),
            after: Some(Duration::from_millis(1500)),
        };
        assert_eq!(
            request_json(None, &BTreeMap::new(), false, window, (&[], &[])),
            json!({"at": "2026-11-23T21:04:05.500000000Z", "before": "10s", "after": "1s 500ms"})
        );
    }

    #[test]
    fn a_responders_fields_are_shown_escaped() {
        let d = FleetDump {
            replies: vec![
                json!({"host": "a\x1b]0;x\x07", "id": "i\r\nforged", "bytes": 1, "path": "/\x1b[2J"}),
                json!({"host": "b\n", "error": "\x1b[31mred"}),
            ],
            missing: vec![],
            waited: Duration::from_secs(1),
            last_reply: Some(Duration::from_millis(5)),
        };
        assert_eq!(
            d.render(false),
            "a\\x1b]0;x\\x07  i\\r\\nforged  1B  /\\x1b[2J\nb\\n  error: \\x1b[31mred\n\
             2 hosts answered, the last after 5.00 ms"
        );
    }

    #[test]
    fn hosts_that_failed_or_did_not_answer_are_shown_and_fail() {
        let d = FleetDump {
            replies: vec![
                json!({"host": "host-a", "id": "i", "bytes": 2048, "path": "/s/i.perf.data"}),
                json!({"host": "host-b", "error": "disk full"}),
            ],
            missing: vec!["host-c".into()],
            waited: Duration::from_secs(2),
            last_reply: Some(Duration::from_millis(40)),
        };
        assert_eq!(
            d.render(false),
            "host-a  i  2.0KiB  /s/i.perf.data\nhost-b  error: disk full\nhost-c  no reply \
             within 2.00 s\n2 hosts answered, the last after 40.0 ms"
        );
        let v: Value = serde_json::from_str(&d.render(true)).unwrap();
        assert_eq!(v["replies"][1]["error"], "disk full");
        assert_eq!(v["missing"], json!(["host-c"]));
        assert_eq!(
            d.failure().unwrap(),
            "1 hosts did not answer, 1 answered with an error"
        );
        let none = FleetDump {
            replies: vec![],
            missing: vec![],
            waited: Duration::from_secs(1),
            last_reply: None,
        };
        assert_eq!(none.failure().unwrap(), "no host answered within 1.00 s");
        let ok = FleetDump {
            replies: vec![json!({"host": "a", "id": "i"})],
            ..none
        };
        assert_eq!(ok.failure(), None);
    }
}
