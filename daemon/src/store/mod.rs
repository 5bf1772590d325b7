//! The snapshot store: naming, listing and retention.
//!
//! Snapshots live in one directory as `<host>-<UTC time>-<seq>[-label].perf.data`
//! ([`name`]). What the name cannot hold (the trigger, the time to the
//! nanosecond) lives in a hidden sidecar `.<id>.meta` (JSON), written before
//! the snapshot itself is renamed into place, so every listed snapshot has
//! one; a sidecar without its snapshot (a crash mid-dump) is removed at
//! start-up like the writer's temporary files. Whether a snapshot is
//! compressed is read from its header (feature bit 27, COMPRESSED), so it
//! stays true after `Compress`.

pub mod name;
pub mod retention;

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::snapshot::output;

pub use name::{SnapshotName, validate_label};
pub use retention::RetentionPolicy;

/// Why a store operation failed, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid label {label:?}: {reason}")]
    InvalidLabel { label: String, reason: String },
    #[error(
        "invalid snapshot id {id:?}: expected a name like HOST-20261120T221133Z-000001[-LABEL] as `snapctl list` shows"
    )]
    InvalidId { id: String },
    #[error("no snapshot with id {id:?}")]
    NotFound { id: String },
    #[error("cannot create the output directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot list the output directory {path}: {source}")]
    ReadDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot read {path}: {source}")]
    Stat {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot remove {path}: {source}")]
    Remove {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write {path}: {source}")]
    WriteMeta {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot get the free space of {path}: {source}")]
    DiskFree {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
}

impl StoreError {
    /// ENOSPC or EDQUOT: the output directory's file system is full.
    pub fn is_disk_full(&self) -> bool {
        match self {
            StoreError::WriteMeta { source, .. } => matches!(
                source.raw_os_error(),
                Some(libc::ENOSPC) | Some(libc::EDQUOT)
            ),
            _ => false,
        }
    }
}

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
}

/// The sidecar `.<id>.meta`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Meta {
    trigger: String,
    created_unix_ns: i64,
}

/// A name handed out for a dump about to be written.
#[derive(Debug, Clone)]
pub struct Reservation {
    pub name: SnapshotName,
    pub trigger: String,
    pub created_unix_ns: i64,
}

impl Reservation {
    pub fn id(&self) -> String {
        self.name.id()
    }
    pub fn file_name(&self) -> String {
        self.name.file_name()
    }
}

/// Totals for `Status`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub snapshots: u32,
    pub bytes: u64,
    pub disk_free_bytes: u64,
}

/// Temporary files (the writer's and the sidecars'), named by
/// [`output::temp_file_name`]: leftovers of a crash when no dump runs.
pub fn is_temp_file_name(name: &str) -> bool {
    output::is_temp_file_name(name)
}

fn meta_file_name(id: &str) -> String {
    format!(".{id}.meta")
}

/// Bit 27 (COMPRESSED) of the perf.data header's feature bitmap at 0x48.
pub fn header_says_compressed(header: &[u8]) -> bool {
    header.len() >= 0x48 + 4 && header.starts_with(b"PERFILE2") && header[0x48 + 3] & (1 << 3) != 0
}

fn read_compressed_flag(path: &Path) -> bool {
    let mut buf = [0u8; 0x50];
    fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut buf))
        .map(|()| header_says_compressed(&buf))
        .unwrap_or(false)
}

pub fn unix_ns(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX),
    }
}

/// One output directory of snapshots.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    host: String,
    next_seq: Mutex<u64>,
}

impl Store {
    /// Opens (creating, 0750) `dir`, removes temporary files and orphaned
    /// sidecars left by a crash (returned), and continues the sequence.
    pub fn open(dir: &Path, host: &str) -> Result<(Self, Vec<PathBuf>), StoreError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(dir)
            .map_err(|source| StoreError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        let store = Self {
            dir: dir.to_path_buf(),
            host: name::sanitize_host(host),
            next_seq: Mutex::new(0),
        };
        let mut removed = Vec::new();
        let mut max_seq = None;
        for file in store.read_dir()? {
            let path = store.dir.join(&file);
            let orphan_meta = file
                .strip_prefix('.')
                .and_then(|f| f.strip_suffix(".meta"))
                .is_some_and(|id| !store.dir.join(format!("{id}{}", name::SUFFIX)).exists());
            if is_temp_file_name(&file) || orphan_meta {
                fs::remove_file(&path).map_err(|source| StoreError::Remove {
                    path: path.clone(),
                    source,
                })?;
                removed.push(path);
            } else if let Some(n) = SnapshotName::parse_file_name(&file) {
                max_seq = max_seq.max(Some(n.seq));
            }
        }
        *store.lock_seq() = max_seq.map_or(1, |s| (s + 1) % 1_000_000);
        Ok((store, removed))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn lock_seq(&self) -> std::sync::MutexGuard<'_, u64> {
        self.next_seq.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read_dir(&self) -> Result<Vec<String>, StoreError> {
        let err = |source| StoreError::ReadDir {
            path: self.dir.clone(),
            source,
        };
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(err)? {
            if let Some(n) = entry.map_err(err)?.file_name().to_str() {
                names.push(n.to_string());
            }
        }
        Ok(names)
    }

    /// A fresh name for a dump, with its sidecar written (0640). The label is
    /// validated here: this is the one door from a client's text to a path.
    pub fn reserve(
        &self,
        label: Option<&str>,
        trigger: &str,
        now: SystemTime,
    ) -> Result<Reservation, StoreError> {
        if let Some(l) = label {
            validate_label(l)?;
        }
        let created_unix_ns = unix_ns(now);
        let seq = {
            let mut next = self.lock_seq();
            let s = *next;
            *next = (s + 1) % 1_000_000;
            s
        };
        let r = Reservation {
            name: SnapshotName {
                host: self.host.clone(),
                unix_secs: created_unix_ns.div_euclid(1_000_000_000),
                seq,
                label: label.map(str::to_string),
            },
            trigger: trigger.to_string(),
            created_unix_ns,
        };
        let meta = Meta {
            trigger: r.trigger.clone(),
            created_unix_ns,
        };
        let final_path = self.dir.join(meta_file_name(&r.id()));
        let tmp = self.dir.join(format!(
            "{}.tmp-{}",
            meta_file_name(&r.id()),
            std::process::id()
        ));
        let write = || -> io::Result<()> {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o640)
                .open(&tmp)?;
            f.write_all(&serde_json::to_vec(&meta).map_err(io::Error::other)?)?;
            f.sync_all()?;
            fs::rename(&tmp, &final_path)
        };
        write().map_err(|source| {
            let _ = fs::remove_file(&tmp);
            StoreError::WriteMeta {
                path: final_path.clone(),
                source,
            }
        })?;
        Ok(r)
    }

    /// Drops the sidecar of a reservation whose snapshot was not written.
    pub fn abandon(&self, r: &Reservation) {
        let _ = fs::remove_file(self.dir.join(meta_file_name(&r.id())));
    }

    fn info_of(&self, n: &SnapshotName) -> Result<SnapshotInfo, StoreError> {
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
        let meta: Option<Meta> = fs::read(self.dir.join(meta_file_name(&id)))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        Ok(SnapshotInfo {
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
        let n =
            SnapshotName::parse_id(id).ok_or_else(|| StoreError::InvalidId { id: id.into() })?;
        self.info_of(&n)
    }

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
        out.sort_by(|a, b| {
            (a.created_unix_ns, a.seq, &a.id).cmp(&(b.created_unix_ns, b.seq, &b.id))
        });
        Ok(out)
    }

    /// Removes a snapshot and its sidecar.
    pub fn remove(&self, info: &SnapshotInfo) -> Result<(), StoreError> {
        fs::remove_file(&info.path).map_err(|source| StoreError::Remove {
            path: info.path.clone(),
            source,
        })?;
        let _ = fs::remove_file(self.dir.join(meta_file_name(&info.id)));
        Ok(())
    }

    /// Applies `policy` now; `protect` is the id of a snapshot just written.
    /// Returns (removed, kept), each oldest first.
    pub fn apply_retention(
        &self,
        policy: &RetentionPolicy,
        protect: Option<&str>,
        now: SystemTime,
    ) -> Result<(Vec<SnapshotInfo>, Vec<SnapshotInfo>), StoreError> {
        let all = self.list()?;
        let entries: Vec<_> = all
            .iter()
            .map(|s| retention::Entry {
                created_unix_ns: s.created_unix_ns,
                bytes: s.bytes,
            })
            .collect();
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

    pub fn usage(&self) -> Result<Usage, StoreError> {
        let list = self.list()?;
        let vfs = nix::sys::statvfs::statvfs(&self.dir).map_err(|source| StoreError::DiskFree {
            path: self.dir.clone(),
            source,
        })?;
        Ok(Usage {
            snapshots: u32::try_from(list.len()).unwrap_or(u32::MAX),
            bytes: list.iter().map(|s| s.bytes).sum(),
            disk_free_bytes: vfs.blocks_available().saturating_mul(vfs.fragment_size()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn header(compressed: bool) -> Vec<u8> {
        let mut h = vec![0u8; 104];
        h[..8].copy_from_slice(b"PERFILE2");
        h[0x48] = 1 << 3; // HOSTNAME... bit 3
        if compressed {
            h[0x48 + 3] |= 1 << 3;
        }
        h
    }

    #[test]
    fn compressed_flag_comes_from_feature_bit_27() {
        assert!(header_says_compressed(&header(true)));
        assert!(!header_says_compressed(&header(false)));
        let mut not_perf = header(true);
        not_perf[0] = b'X';
        assert!(!header_says_compressed(&not_perf));
        assert!(!header_says_compressed(b"PERFILE2"));
    }

    #[test]
    fn store_names_lists_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("snaps");
        let (store, removed) = Store::open(&d, "box/1").unwrap();
        assert!(removed.is_empty());
        let t0 = UNIX_EPOCH + Duration::from_secs(1_795_212_693);
        let a = store.reserve(None, "api", t0).unwrap();
        let b = store
            .reserve(Some("oom"), "signal", t0 + Duration::from_secs(1))
            .unwrap();
        assert_eq!(a.id(), "box_1-20261120T221133Z-000001");
        assert_eq!(b.id(), "box_1-20261120T221134Z-000002-oom");
        fs::write(d.join(a.file_name()), header(false)).unwrap();
        fs::write(d.join(b.file_name()), header(true)).unwrap();
        // A crash left a writer temp file and a sidecar without snapshot.
        fs::write(d.join(".box_1-x.perf.data.tmp-123-0"), b"partial").unwrap();
        let c = store
            .reserve(None, "api", t0 + Duration::from_secs(2))
            .unwrap();
        fs::write(d.join("README"), b"not a snapshot").unwrap();

        let list = store.list().unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].id, a.id());
        assert_eq!(list[0].trigger, "api");
        assert!(!list[0].compressed);
        assert_eq!(list[1].label.as_deref(), Some("oom"));
        assert_eq!(list[1].trigger, "signal");
        assert!(list[1].compressed);
        assert_eq!(list[1].bytes, 104);
        assert_eq!(store.get(&b.id()).unwrap(), list[1]);
        assert!(matches!(
            store.get("../etc/passwd"),
            Err(StoreError::InvalidId { .. })
        ));
        assert!(matches!(
            store.get("box_1-20261120T221133Z-000009"),
            Err(StoreError::NotFound { .. })
        ));
        assert!(matches!(
            store.reserve(Some("../x"), "api", t0),
            Err(StoreError::InvalidLabel { .. })
        ));

        drop(store);
        let (store, removed) = Store::open(&d, "box/1").unwrap();
        let mut removed: Vec<_> = removed
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        removed.sort();
        assert_eq!(
            removed,
            vec![
                format!(".{}.meta", c.id()),
                ".box_1-x.perf.data.tmp-123-0".to_string()
            ]
        );
        // The sequence continues after the highest existing snapshot.
        let next = store.reserve(None, "api", t0).unwrap();
        assert_eq!(next.name.seq, 3);
        store.abandon(&next);
        assert!(!d.join(format!(".{}.meta", next.id())).exists());
    }

    #[test]
    fn retention_removes_oldest_files_and_sidecars() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path(), "h").unwrap();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_795_212_693);
        let ids: Vec<String> = (0..4)
            .map(|i| {
                let r = store
                    .reserve(None, "api", t0 + Duration::from_secs(i))
                    .unwrap();
                fs::write(dir.path().join(r.file_name()), header(false)).unwrap();
                r.id()
            })
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
