//! The upload queue, kept in the sidecars: a snapshot's sidecar lists the
//! destinations it has not reached yet. The sidecar is written before the
//! snapshot and rewritten (atomically) as each upload completes, so the
//! queue survives a restart or a kill -9 at any point.

use std::fs::File;
use std::io::{self, Write};

use flightrec_files::new_file::write_new;
use flightrec_files::{Access, Existing, NewFile};

use super::info::Meta;
use super::{SnapshotInfo, Store, StoreError, meta_file_name, parse_id};

impl Store {
    /// Where snapshots written from now on are to be uploaded ("jetstream",
    /// "s3"); none without `[fleet]`.
    pub fn set_upload_destinations(&self, destinations: Vec<String>) {
        *self.uploads.lock().unwrap_or_else(|p| p.into_inner()) = destinations;
    }

    pub fn upload_destinations(&self) -> Vec<String> {
        self.uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The snapshots still waiting for an upload, oldest first.
    pub fn pending_uploads(&self) -> Result<Vec<SnapshotInfo>, StoreError> {
        Ok(self
            .list()?
            .into_iter()
            .filter(|s| !s.pending_uploads.is_empty())
            .collect())
    }

    /// Takes `destination` off snapshot `id`'s queue (it was uploaded there,
    /// or is no longer configured). Returns false when the snapshot is gone
    /// (removed meanwhile): nothing is written then.
    pub fn settle_upload(&self, id: &str, destination: &str) -> Result<bool, StoreError> {
        self.update_sidecar(id, |meta| meta.uploads.retain(|d| d != destination))
    }

    /// Says in snapshot `id`'s sidecar which containers it holds samples
    /// of (known once it is written). Returns false when it is gone.
    pub fn set_containers(
        &self,
        id: &str,
        containers: Vec<flightrec_proto::sidecar::SidecarContainer>,
    ) -> Result<bool, StoreError> {
        self.update_sidecar(id, |meta| meta.containers = containers)
    }

    /// Changes snapshot `id`'s sidecar with `change`, under the snapshot's
    /// lock; false (nothing written) when the snapshot is gone.
    fn update_sidecar(&self, id: &str, change: impl FnOnce(&mut Meta)) -> Result<bool, StoreError> {
        let n = parse_id(id)?;
        let _lock = self.lock_snapshot(&n.id());
        let path = self.sidecar_path(id);
        let mut meta: Meta = match self.read_sidecar(id) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| StoreError::WriteMeta {
                path: path.clone(),
                source: io::Error::new(io::ErrorKind::InvalidData, e),
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(source) => return Err(StoreError::WriteMeta { path, source }),
        };
        if self.dir.join(n.file_name()).symlink_metadata().is_err() {
            return Ok(false);
        }
        change(&mut meta);
        self.write_sidecar(id, &meta)?;
        Ok(true)
    }

    /// Keeps `maps` (the JIT symbol maps of the processes running when
    /// snapshot `id` was written) in its sidecar. A failure is logged: the
    /// snapshot is whole without them.
    pub fn keep_perf_maps(&self, id: &str, maps: Vec<flightrec_proto::sidecar::PerfMap>) {
        if maps.is_empty() {
            return;
        }
        let kept = self.update_sidecar(id, |meta| meta.perf_maps = maps);
        if let Err(e) = kept {
            tracing::warn!("the perf maps of snapshot {id} were not kept: {e}");
        }
    }

    /// Writes `.<id>.meta` (0640, the socket group's) through a temporary
    /// file created exclusively, synced, then renamed: a reader sees the old
    /// or the new one.
    pub(super) fn write_sidecar(&self, id: &str, meta: &Meta) -> Result<(), StoreError> {
        self.forget(id);
        write_new(
            &self.dir,
            &meta_file_name(id),
            &self.sidecar_bytes(id, meta)?,
            Access::new(0o640, self.group_id()),
            Existing::Replace,
        )
        .map_err(|source| StoreError::WriteMeta {
            path: self.sidecar_path(id),
            source,
        })
    }

    /// The sidecar of a snapshot about to be written, in place at once
    /// but not synced (see [`NewFile::place_unsynced`]): the snapshot's
    /// commit syncs it before the snapshot is named. A crash before that
    /// leaves a sidecar without its snapshot, removed at start-up.
    pub(super) fn place_sidecar(&self, id: &str, meta: &Meta) -> Result<File, StoreError> {
        self.forget(id);
        let bytes = self.sidecar_bytes(id, meta)?;
        let err = |source| StoreError::WriteMeta {
            path: self.sidecar_path(id),
            source,
        };
        let mut new = NewFile::create(
            &self.dir,
            &meta_file_name(id),
            Access::new(0o640, self.group_id()),
        )
        .map_err(err)?;
        new.file_mut().write_all(&bytes).map_err(err)?;
        new.place_unsynced(Existing::Replace)
            .map_err(|e| err(e.into_io()))
    }

    fn sidecar_bytes(&self, id: &str, meta: &Meta) -> Result<Vec<u8>, StoreError> {
        serde_json::to_vec(meta).map_err(|e| StoreError::WriteMeta {
            path: self.sidecar_path(id),
            source: io::Error::other(e),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::store::tests::header;

    #[test]
    fn the_queue_survives_reopening_and_empties_as_uploads_settle() {
        let dir = tempfile::tempdir().unwrap();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_795_212_693);
        let id = {
            let (store, _) = Store::open(dir.path(), "h").unwrap();
            store.set_upload_destinations(vec!["jetstream".into(), "s3".into()]);
            let r = store.reserve(None, "signal", "", t0, None).unwrap();
            fs::write(dir.path().join(r.file_name()), header(false)).unwrap();
            // Without destinations a snapshot is not queued.
            store.set_upload_destinations(vec![]);
            let plain = store.reserve(None, "api", "", t0, None).unwrap();
            fs::write(dir.path().join(plain.file_name()), header(false)).unwrap();
            r.id()
        };
        // A restart (a new Store on the same directory) sees the queue.
        let (store, removed) = Store::open(dir.path(), "h").unwrap();
        assert!(removed.is_empty());
        let pending = store.pending_uploads().unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].id, id);
        assert_eq!(pending[0].pending_uploads, ["jetstream", "s3"]);
        assert!(store.settle_upload(&id, "jetstream").unwrap());
        assert_eq!(store.get(&id).unwrap().pending_uploads, ["s3"]);
        assert_eq!(store.get(&id).unwrap().trigger, "signal", "the rest stays");
        assert!(store.settle_upload(&id, "s3").unwrap());
        assert!(store.pending_uploads().unwrap().is_empty());
        // A snapshot removed meanwhile is not brought back by its sidecar.
        let s = store.get(&id).unwrap();
        store.remove(&s).unwrap();
        assert!(!store.settle_upload(&id, "s3").unwrap());
        assert!(!dir.path().join(format!(".{id}.meta")).exists());
    }
}
