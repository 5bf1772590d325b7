//! The `fleet` section of `snapctl status`: the NATS connection and the
//! uploads, as text lines and as the `fleet` object of the JSON.

use flightrec_proto::v1 as pb;
use serde_json::{Value, json};

use super::format::{shown, utc};

/// `null` without `[fleet]`.
pub(super) fn fleet_status_json(f: Option<&pb::FleetStatus>) -> Value {
    match f {
        None => Value::Null,
        Some(f) => json!({
            "state": f.state,
            "host": f.host,
            "servers": f.servers,
            "last_error": f.last_error,
            "last_error_unix_ns": f.last_error_unix_ns,
            "requests": f.requests,
            "bad_requests": f.bad_requests,
            "dumps": f.dumps,
            "bucket": f.bucket,
            "upload_destinations": f.upload_destinations,
            "uploads_pending": f.uploads_pending,
            "uploaded": f.uploaded,
            "upload_failures": f.upload_failures,
            "last_upload_error": f.last_upload_error,
            "last_upload_unix_ns": f.last_upload_unix_ns,
        }),
    }
}

/// The NATS connection and its last error, then the uploads when there
/// are destinations.
pub(super) fn fleet_lines(f: &pb::FleetStatus) -> Vec<String> {
    let mut line = format!(
        "fleet: {} as {} via {}; {} requests, {} dumps",
        f.state,
        shown(&f.host),
        shown(&f.servers.join(", ")),
        f.requests,
        f.dumps
    );
    if f.bad_requests > 0 {
        line.push_str(&format!(", {} malformed requests refused", f.bad_requests));
    }
    let mut out = vec![line];
    if !f.last_error.is_empty() {
        out.push(format!(
            "fleet last error ({}): {}",
            utc(f.last_error_unix_ns),
            shown(&f.last_error)
        ));
    }
    if !f.upload_destinations.is_empty() {
        out.extend(upload_lines(f));
    }
    out
}

fn upload_lines(f: &pb::FleetStatus) -> Vec<String> {
    let last = if f.last_upload_unix_ns > 0 {
        format!(", last at {}", utc(f.last_upload_unix_ns))
    } else {
        String::new()
    };
    let mut out = vec![format!(
        "uploads to {} (bucket {}): {} waiting, {} done{last}, {} failed attempts",
        f.upload_destinations.join(", "),
        f.bucket,
        f.uploads_pending,
        f.uploaded,
        f.upload_failures
    )];
    if !f.last_upload_error.is_empty() {
        out.push(format!(
            "upload last error: {}",
            shown(&f.last_upload_error)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::status;

    #[test]
    fn status_shows_the_fleet_connection_and_its_last_error() {
        let mut reply = pb::StatusReply::default();
        assert!(!status(&reply, false).contains("fleet"));
        let v: Value = serde_json::from_str(&status(&reply, true)).unwrap();
        assert_eq!(v["fleet"], Value::Null);
        reply.fleet = Some(pb::FleetStatus {
            state: "connecting".into(),
            host: "host-a".into(),
            servers: vec!["nats://127.0.0.1:4222".into()],
            last_error: "cannot connect: authorization violation".into(),
            last_error_unix_ns: 1_763_676_693_000_000_000,
            requests: 2,
            dumps: 1,
            bucket: "flightrec".into(),
            upload_destinations: vec!["jetstream".into()],
            uploads_pending: 3,
            uploaded: 5,
            upload_failures: 7,
            last_upload_error: "cannot upload flightrec/h/x.perf.data: timed out".into(),
            last_upload_unix_ns: 0,
            bad_requests: 0,
        });
        let human = status(&reply, false);
        assert!(
            human.contains(
                "uploads to jetstream (bucket flightrec): 3 waiting, 5 done, 7 failed attempts\n\
                 upload last error: cannot upload flightrec/h/x.perf.data: timed out"
            ),
            "{human}"
        );
        assert!(
            human.contains(
                "fleet: connecting as host-a via nats://127.0.0.1:4222; 2 requests, 1 dumps\n\
                 fleet last error (2025-11-20 22:11:33Z): cannot connect: authorization violation"
            ),
            "{human}"
        );
        if let Some(f) = reply.fleet.as_mut() {
            f.bad_requests = 641;
        }
        assert!(
            status(&reply, false).contains("2 requests, 1 dumps, 641 malformed requests refused"),
            "{}",
            status(&reply, false)
        );
        let v: Value = serde_json::from_str(&status(&reply, true)).unwrap();
        assert_eq!(v["fleet"]["bad_requests"], 641);
        assert_eq!(v["fleet"]["state"], "connecting");
        assert_eq!(
            v["fleet"]["last_error"],
            "cannot connect: authorization violation"
        );
        assert_eq!(v["fleet"]["servers"][0], "nats://127.0.0.1:4222");
        assert_eq!(v["fleet"]["uploads_pending"], 3);
        assert_eq!(v["fleet"]["upload_destinations"][0], "jetstream");
    }
}
