//! Carrying out retention: [`retention::plan`] decides over (time, size),
//! this removes what it chose.

use std::time::SystemTime;

use super::{RetentionPolicy, SnapshotInfo, Store, StoreError, retention, unix_ns};

/// What retention weighs of each snapshot, in the same order.
pub fn retention_entries(all: &[SnapshotInfo]) -> Vec<retention::Entry> {
    all.iter()
        .map(|s| retention::Entry {
            created_unix_ns: s.created_unix_ns,
            bytes: s.bytes,
            pending_upload: !s.pending_uploads.is_empty(),
        })
        .collect()
}

impl Store {
    /// Applies `policy` now; `protect` is the id of a snapshot just written.
    /// Returns (removed, kept), each oldest first.
    pub fn apply_retention(
        &self,
        policy: &RetentionPolicy,
        protect: Option<&str>,
        now: SystemTime,
    ) -> Result<(Vec<SnapshotInfo>, Vec<SnapshotInfo>), StoreError> {
        let all = self.list()?;
        let entries = retention_entries(&all);
        let protect = protect.and_then(|id| all.iter().position(|s| s.id == id));
        let doomed = retention::plan(&entries, policy, unix_ns(now), protect);
        let mut removed = Vec::new();
        let mut kept = Vec::new();
        for (i, s) in all.into_iter().enumerate() {
            if doomed.contains(&i) {
                self.remove(&s)?;
                removed.push(s);
            } else {
                kept.push(s);
            }
        }
        Ok((removed, kept))
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::store::tests::reserve_snapshots;

    #[test]
    fn retention_removes_oldest_files_and_sidecars() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path(), "h").unwrap();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_795_212_693);
        let ids: Vec<String> = reserve_snapshots(&store, t0, 4)
            .iter()
            .map(|r| r.id())
            .collect();
        let policy = RetentionPolicy::from_limits(2, 0, Duration::ZERO);
        let (removed, kept) = store
            .apply_retention(&policy, Some(&ids[3]), t0 + Duration::from_secs(10))
            .unwrap();
        let names = |v: &[SnapshotInfo]| v.iter().map(|s| s.id.clone()).collect::<Vec<_>>();
        assert_eq!(names(&removed), ids[..2].to_vec());
        assert_eq!(names(&kept), ids[2..].to_vec());
        assert!(!dir.path().join(format!(".{}.meta", ids[0])).exists());
        let u = store.usage().unwrap();
        assert_eq!(u.snapshots, 2);
        assert_eq!(u.bytes, 208);
        assert!(u.disk_free_bytes > 0);
    }
}
