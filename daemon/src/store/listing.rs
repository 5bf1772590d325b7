//! Listing the snapshots, oldest first, and what they take on disk.

use std::path::Path;

use super::{SnapshotInfo, SnapshotName, Store, StoreError};

/// Totals for `Status`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub snapshots: u32,
    pub bytes: u64,
    pub disk_free_bytes: u64,
    /// Snapshots still waiting for an upload.
    pub pending_uploads: u32,
}

impl Store {
    /// Every snapshot, oldest first.
    pub fn list(&self) -> Result<Vec<SnapshotInfo>, StoreError> {
        let mut out = Vec::new();
        for file in self.read_dir()? {
            let Some(n) = SnapshotName::parse_file_name(&file) else {
                continue;
            };
            match self.info_of(&n) {
                Ok(i) => out.push(i),
                // Removed between readdir and stat: not there any more.
                Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        self.keep_known(&out);
        out.sort_by(|a, b| {
            (a.created_unix_ns, a.seq, &a.id).cmp(&(b.created_unix_ns, b.seq, &b.id))
        });
        Ok(out)
    }

    pub fn usage(&self) -> Result<Usage, StoreError> {
        let list = self.list()?;
        // A directory removed behind our back: the free space where the
        // next dump will create it.
        let existing = self
            .dir
            .ancestors()
            .find(|p| p.is_dir())
            .unwrap_or(Path::new("/"));
        let vfs = nix::sys::statvfs::statvfs(existing).map_err(|source| StoreError::DiskFree {
            path: self.dir.clone(),
            source,
        })?;
        Ok(Usage {
            snapshots: u32::try_from(list.len()).unwrap_or(u32::MAX),
            bytes: list.iter().map(|s| s.bytes).sum(),
            disk_free_bytes: vfs.blocks_available().saturating_mul(vfs.fragment_size()),
            pending_uploads: u32::try_from(
                list.iter()
                    .filter(|s| !s.pending_uploads.is_empty())
                    .count(),
            )
            .unwrap_or(u32::MAX),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::validate_label;

    #[test]
    fn a_huge_label_or_id_is_cut_in_the_error() {
        let label = "a".repeat(100_000);
        let msg = validate_label(&label).unwrap_err().to_string();
        assert!(msg.len() < 300, "{} bytes", msg.len());
        assert!(
            msg.ends_with("(100000 bytes): it is 100000 characters long, at most 64 are allowed"),
            "{msg}"
        );
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path(), "h").unwrap();
        let msg = store.get(&"x".repeat(100_000)).unwrap_err().to_string();
        assert!(msg.len() < 300, "{} bytes", msg.len());
    }
}
