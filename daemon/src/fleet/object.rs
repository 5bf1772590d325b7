//! What an uploaded snapshot is called in a bucket and what it says about
//! itself (`flightrec_proto::object`, shared with `snapctl`), made from a
//! store entry.

use std::collections::BTreeMap;

pub use flightrec_proto::object::*;

use crate::store::SnapshotInfo;

/// The headers of snapshot `s` uploaded by fleet host `host`.
pub fn headers_of(
    host: &str,
    labels: &BTreeMap<String, String>,
    s: &SnapshotInfo,
    digest: String,
) -> ObjectHeaders {
    ObjectHeaders {
        host: host.to_string(),
        id: s.id.clone(),
        label: s.label.clone().unwrap_or_default(),
        trigger: s.trigger.clone(),
        bytes: s.bytes,
        compressed: s.compressed,
        created_unix_ns: s.created_unix_ns,
        labels: labels.clone(),
        digest,
    }
}
