//! Retention as a dump (and `Rotate`) applies it: the store removes what
//! the policy chose, and Watch hears of every snapshot removed.

use std::time::SystemTime;

use crate::events::{Event, EventBus};
use crate::store::{RetentionPolicy, SnapshotInfo, Store, StoreError};

/// Applies `policy` to `store` now; `protect` is a snapshot just written.
/// Returns (removed, kept), each oldest first.
pub fn apply_retention(
    store: &Store,
    events: &EventBus,
    policy: &RetentionPolicy,
    protect: Option<&str>,
) -> Result<(Vec<SnapshotInfo>, Vec<SnapshotInfo>), StoreError> {
    let (removed, kept) = store.apply_retention(policy, protect, SystemTime::now())?;
    for s in &removed {
        let reason = if s.pending_uploads.is_empty() {
            tracing::info!(id = %s.id, bytes = s.bytes, "snapshot removed by retention");
            "retention"
        } else {
            tracing::warn!(
                id = %s.id,
                bytes = s.bytes,
                destinations = %s.pending_uploads.join(","),
                "snapshot removed before its upload: retention.max_bytes forced it (every \
                 snapshot already uploaded was removed first)"
            );
            "retention.max_bytes, before its upload"
        };
        events.publish(Event::SnapshotRemoved {
            snapshot: s.clone(),
            reason,
        });
    }
    if let (Some(id), Some(limit)) = (protect, policy.max_bytes)
        && let Some(s) = kept.iter().find(|s| s.id == id)
        && s.bytes > limit
    {
        tracing::warn!(
            id = %s.id,
            bytes = s.bytes,
            max_bytes = limit,
            "the new snapshot alone exceeds retention.max_bytes; it is kept until the next \
             dump or rotate"
        );
    }
    Ok((removed, kept))
}
