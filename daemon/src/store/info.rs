//! What the store knows of one snapshot: its file, its header and its
//! sidecar.

use std::fs;
use std::io;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{SnapshotName, Store, StoreError, parse_id, read_compressed_flag};

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
    pub created_unix_ns: i64,
    pub seq: u64,
    /// Destinations ("jetstream", "s3") it still waits to be uploaded to.
    pub pending_uploads: Vec<String>,
}

/// The sidecar `.<id>.meta`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Meta {
    pub(super) trigger: String,
    pub(super) created_unix_ns: i64,
    /// The upload queue: destinations not reached yet. Written with the
    /// sidecar, before the snapshot exists, so a crash at any point leaves
    /// either no snapshot or one still queued.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) uploads: Vec<String>,
}

impl Store {
    pub(super) fn info_of(&self, n: &SnapshotName) -> Result<SnapshotInfo, StoreError> {
        let id = n.id();
        let path = self.dir.join(n.file_name());
        let md = fs::metadata(&path).map_err(|source| {
            if source.kind() == io::ErrorKind::NotFound {
                StoreError::NotFound { id: id.clone() }
            } else {
                StoreError::Stat {
                    path: path.clone(),
                    source,
                }
            }
        })?;
        let meta: Option<Meta> = fs::read(self.sidecar_path(&id))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let pending_uploads = meta.as_ref().map_or_else(Vec::new, |m| m.uploads.clone());
        Ok(SnapshotInfo {
            pending_uploads,
            bytes: md.len(),
            compressed: read_compressed_flag(&path),
            label: n.label.clone(),
            trigger: meta
                .as_ref()
                .map_or_else(|| "unknown".to_string(), |m| m.trigger.clone()),
            created_unix_ns: meta.map_or(n.unix_secs.saturating_mul(1_000_000_000), |m| {
                m.created_unix_ns
            }),
            seq: n.seq,
            id,
            path,
        })
    }

    /// The snapshot with this id (as `List` gives it).
    pub fn get(&self, id: &str) -> Result<SnapshotInfo, StoreError> {
        let n = parse_id(id)?;
        self.info_of(&n)
    }
}
