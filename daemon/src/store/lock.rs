//! Per-snapshot locks: compressing a snapshot and removing it take the same
//! lock, so a removal never races a compression that would bring the file
//! back.

use std::fs;
use std::io;

use super::{RewriteError, SnapshotInfo, Store, StoreError, parse_id};

/// Holds a snapshot's id in [`Store::busy`] until dropped.
pub(super) struct SnapshotLock<'a> {
    store: &'a Store,
    id: String,
}

impl Drop for SnapshotLock<'_> {
    fn drop(&mut self) {
        let mut busy = self.store.busy.lock().unwrap_or_else(|p| p.into_inner());
        busy.remove(&self.id);
        self.store.freed.notify_all();
    }
}

impl Store {
    /// Waits until no one else compresses or removes snapshot `id`, and
    /// keeps it that way until the lock is dropped.
    pub(super) fn lock_snapshot(&self, id: &str) -> SnapshotLock<'_> {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        while busy.contains(id) {
            busy = self.freed.wait(busy).unwrap_or_else(|p| p.into_inner());
        }
        busy.insert(id.to_string());
        SnapshotLock {
            store: self,
            id: id.to_string(),
        }
    }

    /// Runs `rewrite` on snapshot `id` (a compression replacing the file,
    /// which keeps its mode and group) with the snapshot locked against
    /// removal. Returns the snapshot before and after.
    pub fn rewrite<E>(
        &self,
        id: &str,
        rewrite: impl FnOnce(&SnapshotInfo) -> Result<(), E>,
    ) -> Result<(SnapshotInfo, SnapshotInfo), RewriteError<E>> {
        let n = parse_id(id)?;
        let _lock = self.lock_snapshot(&n.id());
        let before = self.info_of(&n)?;
        self.forget(&before.id);
        rewrite(&before).map_err(RewriteError::Rewrite)?;
        let after = self.info_of(&n)?;
        Ok((before, after))
    }

    /// Removes a snapshot and its sidecar, waiting for a compression of it
    /// to finish. A snapshot already gone is not an error.
    pub fn remove(&self, info: &SnapshotInfo) -> Result<(), StoreError> {
        let _lock = self.lock_snapshot(&info.id);
        self.forget(&info.id);
        match fs::remove_file(&info.path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(StoreError::Remove {
                    path: info.path.clone(),
                    source,
                });
            }
        }
        let _ = fs::remove_file(self.sidecar_path(&info.id));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::time::{Duration, UNIX_EPOCH};

    use crate::store::tests::{header, reserve_snapshots};
    use crate::store::{RetentionPolicy, Store};

    #[test]
    fn a_removal_waits_for_a_compression_of_the_same_snapshot() {
        use std::sync::mpsc;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (store, _) = Store::open(d, "h").unwrap();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_795_212_693);
        let ids = reserve_snapshots(&store, t0, 2);
        let oldest = ids[0].id();
        let (started_tx, started_rx) = mpsc::channel();
        let (rotated_tx, rotated_rx) = mpsc::channel();
        std::thread::scope(|s| {
            let store = &store;
            s.spawn(move || {
                store
                    .rewrite(&oldest, |before| {
                        started_tx.send(()).unwrap();
                        // Without the lock, retention removes the snapshot
                        // now; the compression's rename would then bring it
                        // back without its sidecar.
                        let _ = rotated_rx.recv_timeout(Duration::from_millis(500));
                        let tmp = before.path.with_extension("tmp");
                        fs::write(&tmp, header(true))?;
                        fs::rename(&tmp, &before.path)
                    })
                    .unwrap();
            });
            started_rx.recv().unwrap();
            let policy = RetentionPolicy::from_limits(1, 0, Duration::ZERO);
            let (removed, _) = store.apply_retention(&policy, None, t0).unwrap();
            rotated_tx.send(()).ok();
            assert_eq!(removed.len(), 1);
        });
        let id = ids[0].id();
        assert!(!d.join(ids[0].file_name()).exists(), "{id} came back");
        assert!(!d.join(format!(".{id}.meta")).exists());
        assert_eq!(store.list().unwrap().len(), 1);
    }
}
