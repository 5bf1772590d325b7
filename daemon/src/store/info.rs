//! What the store knows of one snapshot: its file, its header and its
//! sidecar.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

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

impl Store {
    /// The snapshot named `n`, if it is a regular file the daemon owns
    /// (anything else at that name is not a snapshot: `NotFound`).
    pub(super) fn info_of(&self, n: &SnapshotName) -> Result<SnapshotInfo, StoreError> {
        let id = n.id();
        let path = self.dir.join(n.file_name());
        match fs::symlink_metadata(&path) {
            Ok(_) => {}
            Err(source) if source.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::NotFound { id });
            }
            Err(source) => return Err(StoreError::Stat { path, source }),
        }
        let md = self
            .own_entry(&n.file_name())
            .ok_or_else(|| StoreError::NotFound { id: id.clone() })?;
        let meta: Option<Meta> = self
            .read_sidecar(&id)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let pending_uploads = meta.as_ref().map_or_else(Vec::new, |m| m.uploads.clone());
        let window = meta.as_ref().and_then(|m| {
            Some((
                WallTime::from_unix_nanos(m.window_start_unix_ns?),
                WallTime::from_unix_nanos(m.window_end_unix_ns?),
            ))
        });
        Ok(SnapshotInfo {
            pending_uploads,
            bytes: md.len(),
            compressed: read_compressed_flag(&path),
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
            id,
            path,
        })
    }

    /// The bytes of snapshot `id`'s sidecar: a regular file of the
    /// daemon's, not followed as a link, small.
    pub(super) fn read_sidecar(&self, id: &str) -> io::Result<Vec<u8>> {
        let path = self.sidecar_path(id);
        let (mut f, md) = flightrec_files::open_regular(&path, flightrec_files::Links::Refuse)?;
        if md.uid() != super::own_uid() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{} is not the daemon's", path.display()),
            ));
        }
        flightrec_files::untrusted::read_small(&mut f, flightrec_proto::sidecar::MAX_BYTES)
    }

    /// The snapshot with this id (as `List` gives it).
    pub fn get(&self, id: &str) -> Result<SnapshotInfo, StoreError> {
        let n = parse_id(id)?;
        self.info_of(&n)
    }
}
