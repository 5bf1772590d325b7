//! `snapctl watch`: one line (or one JSON object) per daemon event.

use flightrec_proto::v1 as pb;
use pb::watch_event::Kind;
use serde_json::{Value, json};

use super::format::{duration, human_bytes, shown, utc};
use super::snapshots::snapshot_json;

pub fn watch_event(e: &pb::WatchEvent, as_json: bool) -> String {
    if as_json {
        watch_event_json(e).to_string()
    } else {
        // One line, whose parts (a comm, a path, an error) come from other
        // processes.
        shown(&watch_event_text(e)).into_owned()
    }
}

/// `{"unix_ns", "event"}` and the fields of that kind of event.
fn watch_event_json(e: &pb::WatchEvent) -> Value {
    let mut v = json!({ "unix_ns": e.unix_ns });
    match &e.kind {
        Some(Kind::SnapshotCreated(c)) => {
            v["event"] = json!("snapshot_created");
            v["snapshot"] = snapshot_json(&c.snapshot.clone().unwrap_or_default());
        }
        Some(Kind::SnapshotRemoved(r)) => {
            v["event"] = json!("snapshot_removed");
            v["snapshot"] = snapshot_json(&r.snapshot.clone().unwrap_or_default());
            v["reason"] = json!(r.reason);
        }
        Some(Kind::Loss(l)) => {
            v["event"] = json!("loss");
            v["cpu"] = json!(l.cpu);
            v["ring"] = json!(l.ring);
            v["lost"] = json!(l.lost);
            v["total"] = json!(l.total);
        }
        Some(Kind::DumpFailed(f)) => {
            v["event"] = json!("dump_failed");
            v["error"] = json!(f.error);
        }
        Some(Kind::TriggerFired(t)) => {
            v["event"] = json!("trigger_fired");
            v["name"] = json!(t.name);
            v["matched"] = json!(t.matched);
            v["dumped"] = json!(t.dumped);
            v["suppressed_by"] = json!(t.suppressed_by);
            v["times"] = json!(t.times);
        }
        Some(Kind::Uploaded(u)) => {
            v["event"] = json!("uploaded");
            v["snapshot"] = snapshot_json(&u.snapshot.clone().unwrap_or_default());
            v["destination"] = json!(u.destination);
            v["object"] = json!(u.object);
            v["seconds"] = json!(u.seconds);
            v["already_there"] = json!(u.already_there);
        }
        Some(Kind::UploadFailed(f)) => {
            v["event"] = json!("upload_failed");
            v["id"] = json!(f.id);
            v["destination"] = json!(f.destination);
            v["error"] = json!(f.error);
        }
        Some(Kind::HistoryStopped(h)) => {
            v["event"] = json!("history_stopped");
            v["reason"] = json!(h.reason);
        }
        None => v["event"] = json!("unknown"),
    }
    v
}

/// The time, then what happened.
fn watch_event_text(e: &pb::WatchEvent) -> String {
    let when = utc(e.unix_ns);
    match &e.kind {
        Some(Kind::SnapshotCreated(c)) => {
            let s = c.snapshot.clone().unwrap_or_default();
            format!(
                "{when} created {} ({}, {})",
                s.path,
                human_bytes(s.bytes),
                s.trigger
            )
        }
        Some(Kind::SnapshotRemoved(r)) => {
            let s = r.snapshot.clone().unwrap_or_default();
            format!("{when} removed {} ({})", s.id, r.reason)
        }
        Some(Kind::Loss(l)) => format!(
            "{when} lost {} {} records on cpu {} ({} in total)",
            l.lost, l.ring, l.cpu, l.total
        ),
        Some(Kind::DumpFailed(f)) => format!("{when} dump failed: {}", f.error),
        Some(Kind::TriggerFired(t)) => trigger_fired_text(&when, t),
        Some(Kind::Uploaded(u)) => uploaded_text(&when, u),
        Some(Kind::UploadFailed(f)) => format!(
            "{when} upload of {} to {} failed: {}",
            f.id, f.destination, f.error
        ),
        Some(Kind::HistoryStopped(h)) => format!("{when} history stopped: {}", h.reason),
        None => format!("{when} (unknown event)"),
    }
}

fn trigger_fired_text(when: &str, t: &pb::TriggerFired) -> String {
    let times = if t.times > 1 {
        format!(" ({} times)", t.times)
    } else {
        String::new()
    };
    let outcome = if t.dumped {
        "dump queued".to_string()
    } else {
        format!("no dump: {}", t.suppressed_by)
    };
    format!(
        "{when} trigger {} fired{times}: {}; {outcome}",
        t.name, t.matched
    )
}

/// [`duration`] of the API's float seconds (negative or not a number
/// reads as 0).
fn seconds(s: f64) -> String {
    duration(if s.is_finite() && s > 0.0 {
        (s * 1e9) as u64
    } else {
        0
    })
}

fn uploaded_text(when: &str, u: &pb::SnapshotUploaded) -> String {
    let s = u.snapshot.clone().unwrap_or_default();
    let already = if u.already_there {
        " (already there)"
    } else {
        ""
    };
    format!(
        "{when} uploaded {} to {} as {} ({}, {}){already}",
        s.id,
        u.destination,
        u.object,
        human_bytes(s.bytes),
        seconds(u.seconds)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: Kind) -> pb::WatchEvent {
        pb::WatchEvent {
            unix_ns: 1_795_212_693_000_000_000,
            kind: Some(kind),
        }
    }

    #[test]
    fn a_fired_trigger_says_how_often_and_whether_it_dumped() {
        let fired = |dumped, times| {
            event(Kind::TriggerFired(pb::TriggerFired {
                name: "oom".into(),
                matched: "Out of memory: Killed process 12".into(),
                dumped,
                suppressed_by: "min_interval".into(),
                times,
            }))
        };
        assert_eq!(
            watch_event(&fired(true, 1), false),
            "2026-11-20 22:11:33Z trigger oom fired: Out of memory: Killed process 12; dump queued"
        );
        assert_eq!(
            watch_event(&fired(false, 3), false),
            "2026-11-20 22:11:33Z trigger oom fired (3 times): Out of memory: Killed process 12; \
             no dump: min_interval"
        );
        let v: Value = serde_json::from_str(&watch_event(&fired(false, 3), true)).unwrap();
        assert_eq!(v["event"], "trigger_fired");
        assert_eq!(v["times"], 3);
        assert_eq!(v["suppressed_by"], "min_interval");
    }

    #[test]
    fn a_matched_comm_is_shown_escaped() {
        let e = event(Kind::TriggerFired(pb::TriggerFired {
            name: "exec".into(),
            matched: "sched:sched_process_exec on CPU 1 by pid 7 (\x1b]0;x\x07\r\n)".into(),
            dumped: true,
            suppressed_by: String::new(),
            times: 1,
        }));
        assert_eq!(
            watch_event(&e, false),
            "2026-11-20 22:11:33Z trigger exec fired: sched:sched_process_exec on CPU 1 by pid \
             7 (\\x1b]0;x\\x07\\r\\n); dump queued"
        );
    }

    #[test]
    fn an_upload_says_how_long_it_took_in_one_unit() {
        let uploaded = event(Kind::Uploaded(pb::SnapshotUploaded {
            snapshot: Some(pb::Snapshot {
                id: "h-1".into(),
                bytes: 3 << 20,
                ..Default::default()
            }),
            destination: "jetstream".into(),
            object: "flightrec/h/h-1.perf.data".into(),
            seconds: 0.0604,
            already_there: false,
        }));
        assert_eq!(
            watch_event(&uploaded, false),
            "2026-11-20 22:11:33Z uploaded h-1 to jetstream as flightrec/h/h-1.perf.data \
             (3.0MiB, 60.4 ms)"
        );
        assert_eq!(seconds(f64::NAN), "0 s");
        assert_eq!(seconds(-1.0), "0 s");
    }

    #[test]
    fn an_unknown_event_still_has_its_time() {
        let e = pb::WatchEvent {
            unix_ns: 0,
            kind: None,
        };
        assert_eq!(
            watch_event(&e, false),
            "1970-01-01 00:00:00Z (unknown event)"
        );
        assert_eq!(watch_event(&e, true), r#"{"event":"unknown","unix_ns":0}"#);
    }
}
