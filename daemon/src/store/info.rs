//! What the store knows of one snapshot: its file, its header and its
//! sidecar.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::MutexGuard;

use super::{SnapshotName, Store, StoreError, parse_id, read_compressed_flag};
use crate::time::WallTime;
use flightrec_proto::sidecar::SidecarContainer;

/// A snapshot as `List` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    pub id: String,
    pub path: PathBuf,
    pub bytes: u64,
    pub compressed: bool,
    pub label: Option<String>,
    /// "api", "signal", ... or "unknown" when the sidecar is missing.
    pub trigger: String,
    /// What the conditions that triggered it matched; empty without one
    /// (or a sidecar written before this was kept).
    pub matched: String,
    pub created_unix_ns: i64,
    pub seq: u64,
    /// Destinations ("jetstream", "s3") it still waits to be uploaded to.
    pub pending_uploads: Vec<String>,
    /// The window it holds (None for a snapshot written before it was
    /// kept).
    pub window: Option<(WallTime, WallTime)>,
    /// The containers it holds samples of.
    pub containers: Vec<SidecarContainer>,
    /// What a scoped dump held; empty for the whole machine.
    pub scope: String,
}

/// The sidecar `.<id>.meta`.
pub(super) type Meta = flightrec_proto::sidecar::Sidecar;

/// A file as `info_of` last read it. The daemon replaces a snapshot or a
/// sidecar by a rename (a new inode), never in place, so the same inode
/// with the same size and times holds what was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(md: &fs::Metadata) -> Self {
        Stamp {
            dev: md.dev(),
            ino: md.ino(),
            size: md.size(),
            mtime: (md.mtime(), md.mtime_nsec()),
            ctime: (md.ctime(), md.ctime_nsec()),
        }
    }
}

/// What `info_of` made of a snapshot, with the stamps of the files it read
/// it from: a listing (every dump's retention, every `Status`) reads the
/// header and the sidecar of a snapshot only when one of them changed.
#[derive(Debug)]
pub(super) struct Known {
    file: Stamp,
    sidecar: Option<Stamp>,
    info: SnapshotInfo,
}

impl Store {
    /// The snapshot named `n`, if it is a regular file the daemon owns
    /// (anything else at that name is not a snapshot: `NotFound`).
    pub(super) fn info_of(&self, n: &SnapshotName) -> Result<SnapshotInfo, StoreError> {
        let id = n.id();
        let path = self.dir.join(n.file_name());
        let md = match fs::symlink_metadata(&path) {
            Ok(md) => md,
            Err(source) if source.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::NotFound { id });
            }
            Err(source) => return Err(StoreError::Stat { path, source }),
        };
        if !super::is_own_file(&md) {
            self.report_skipped(&n.file_name(), &md);
            return Err(StoreError::NotFound { id });
        }
        let file = Stamp::of(&md);
        let sidecar = fs::symlink_metadata(self.sidecar_path(&id))
            .ok()
            .filter(super::is_own_file)
            .map(|m| Stamp::of(&m));
        if let Some(k) = self.lock_known().get(&id)
            && k.file == file
            && k.sidecar == sidecar
        {
            return Ok(k.info.clone());
        }
        // Read: its stamp is the one of the file read (it may have been
        // replaced since the lstat above).
        let (meta, sidecar): (Option<Meta>, _) = match self.read_sidecar_stamped(&id) {
            Ok((bytes, md)) => (serde_json::from_slice(&bytes).ok(), Some(Stamp::of(&md))),
            Err(_) => (None, None),
        };
        let pending_uploads = meta.as_ref().map_or_else(Vec::new, |m| m.uploads.clone());
        let window = meta.as_ref().and_then(|m| {
            Some((
                WallTime::from_unix_nanos(m.window_start_unix_ns?),
                WallTime::from_unix_nanos(m.window_end_unix_ns?),
            ))
        });
        let compressed = read_compressed_flag(&path);
        let info = SnapshotInfo {
            pending_uploads,
            bytes: md.len(),
            compressed: compressed.unwrap_or(false),
            label: n.label.clone(),
            trigger: meta
                .as_ref()
                .map_or_else(|| "unknown".to_string(), |m| m.trigger.clone()),
            matched: meta
                .as_ref()
                .map_or_else(String::new, |m| m.matched.clone()),
            created_unix_ns: meta
                .as_ref()
                .map_or(n.unix_secs.saturating_mul(1_000_000_000), |m| {
                    m.created_unix_ns
                }),
            seq: n.seq,
            window,
            containers: meta
                .as_ref()
                .map_or_else(Vec::new, |m| m.containers.clone()),
            scope: meta.as_ref().map_or_else(String::new, |m| m.scope.clone()),
            id: id.clone(),
            path,
        };
        // An unreadable header is read again next time.
        if compressed.is_some() {
            self.lock_known().insert(
                id,
                Known {
                    file,
                    sidecar,
                    info: info.clone(),
                },
            );
        }
        Ok(info)
    }

    /// Forgets what was read of snapshot `id` (its file or its sidecar is
    /// being replaced or removed by the daemon).
    pub(super) fn forget(&self, id: &str) {
        self.lock_known().remove(id);
    }

    /// Keeps only what was read of the snapshots `listed` (a listing
    /// bounds the memory kept to the snapshots there are).
    pub(super) fn keep_known(&self, listed: &[SnapshotInfo]) {
        let ids: HashSet<&str> = listed.iter().map(|s| s.id.as_str()).collect();
        self.lock_known().retain(|id, _| ids.contains(id.as_str()));
    }

    fn lock_known(&self) -> MutexGuard<'_, HashMap<String, Known>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The bytes of snapshot `id`'s sidecar: a regular file of the
    /// daemon's, not followed as a link, small.
    pub(super) fn read_sidecar(&self, id: &str) -> io::Result<Vec<u8>> {
        self.read_sidecar_stamped(id).map(|(bytes, _)| bytes)
    }

    /// [`Store::read_sidecar`], with the metadata of the file read.
    fn read_sidecar_stamped(&self, id: &str) -> io::Result<(Vec<u8>, fs::Metadata)> {
        let path = self.sidecar_path(id);
        let (mut f, md) = flightrec_files::open_regular(&path, flightrec_files::Links::Refuse)?;
        if md.uid() != super::own_uid() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{} is not the daemon's", path.display()),
            ));
        }
        let bytes =
            flightrec_files::untrusted::read_small(&mut f, flightrec_proto::sidecar::MAX_BYTES)?;
        Ok((bytes, md))
    }

    /// The snapshot with this id (as `List` gives it).
    pub fn get(&self, id: &str) -> Result<SnapshotInfo, StoreError> {
        let n = parse_id(id)?;
        self.info_of(&n)
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::time::{Duration, UNIX_EPOCH};

    use crate::store::Store;
    use crate::store::tests::{header, reserve_snapshots};

    /// A listing reuses what it read of a snapshot only while its file and
    /// its sidecar are the ones it read: every way either is replaced or
    /// removed shows in the next listing.
    #[test]
    fn a_listing_sees_every_change_of_a_snapshot_or_its_sidecar() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (store, _) = Store::open(d, "h").unwrap();
        store.set_upload_destinations(vec!["s3".into()]);
        let t0 = UNIX_EPOCH + Duration::from_secs(1_795_212_693);
        let ids: Vec<String> = reserve_snapshots(&store, t0, 3)
            .iter()
            .map(|r| r.id())
            .collect();
        let first = store.list().unwrap();
        assert_eq!(first.len(), 3);
        assert!(first.iter().all(|s| s.trigger == "api" && !s.compressed));
        assert!(first.iter().all(|s| s.pending_uploads == ["s3"]));
        assert_eq!(store.list().unwrap(), first);
        assert_eq!(store.lock_known().len(), 3);

        // Through the store: an upload settled.
        assert!(store.settle_upload(&ids[0], "s3").unwrap());
        // By hand, as the daemon does it (a new file renamed over): a
        // sidecar of the same length saying another trigger...
        let meta = d.join(format!(".{}.meta", ids[1]));
        let text = fs::read_to_string(&meta).unwrap();
        let changed = text.replace("\"api\"", "\"sig\"");
        assert_ne!(changed, text);
        fs::write(d.join("new-meta"), &changed).unwrap();
        fs::rename(d.join("new-meta"), &meta).unwrap();
        // ...and the snapshot compressed.
        let file = d.join(format!("{}.perf.data", ids[2]));
        fs::write(d.join("new-data"), header(true)).unwrap();
        fs::rename(d.join("new-data"), &file).unwrap();
        let second = store.list().unwrap();
        assert_eq!(second[0].pending_uploads, Vec::<String>::new());
        assert_eq!(second[1].trigger, "sig");
        assert!(second[2].compressed);
        assert_eq!(second[2].pending_uploads, ["s3"]);

        // A sidecar removed; a snapshot removed.
        fs::remove_file(&meta).unwrap();
        fs::remove_file(&file).unwrap();
        let third = store.list().unwrap();
        assert_eq!(third.len(), 2);
        assert_eq!(third[1].trigger, "unknown");
        assert_eq!(store.lock_known().len(), 2, "the removed one is forgotten");
        assert_eq!(store.get(&ids[0]).unwrap(), third[0]);
    }
}
