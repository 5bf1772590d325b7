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
//!
//! With a socket group configured the directory, the snapshots and their
//! sidecars belong to that group (modes 0750 and 0640), so a member who may
//! ask for a dump may also read it. A directory removed while the daemon
//! runs is created again by the next dump. Compressing a snapshot and
//! removing it (retention) take the same per-snapshot lock, so a removal
//! never races a compression that would bring the file back.

pub mod name;
pub mod retention;

use std::collections::HashSet;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::unistd::Gid;

use serde::{Deserialize, Serialize};

use crate::snapshot::output;

pub use name::{SnapshotName, validate_label};
pub use retention::RetentionPolicy;

/// Why a store operation failed, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid label {}: {reason}", flightrec_config::quoted(label))]
    InvalidLabel { label: String, reason: String },
    #[error(
        "invalid snapshot id {}: expected a name like HOST-20261120T221133Z-000001[-LABEL] as `snapctl list` shows",
        flightrec_config::quoted(id)
    )]
    InvalidId { id: String },
    #[error("no snapshot with id {}", flightrec_config::quoted(id))]
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

/// Why [`Store::rewrite`] failed: the store, or the rewrite itself.
#[derive(Debug, thiserror::Error)]
pub enum RewriteError<E> {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Rewrite(E),
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

/// Temporary files: the writer's, named by [`output::temp_file_name`], and
/// the sidecars' (`.<id>.meta.tmp-<pid>`): leftovers of a crash when no dump
/// runs.
pub fn is_temp_file_name(name: &str) -> bool {
    output::is_temp_file_name(name) || is_meta_temp_file_name(name)
}

fn is_meta_temp_file_name(name: &str) -> bool {
    name.strip_prefix('.')
        .and_then(|rest| rest.rsplit_once(".meta.tmp-"))
        .is_some_and(|(id, pid)| {
            !id.is_empty() && !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())
        })
}

fn meta_file_name(id: &str) -> String {
    format!(".{id}.meta")
}

/// Whether a perf.data header (a prefix of at least 0x4C bytes) has the
/// COMPRESSED feature set.
pub fn header_says_compressed(header: &[u8]) -> bool {
    crate::snapshot::perfdata::is_compressed(header)
}

fn read_compressed_flag(path: &Path) -> bool {
    let mut buf = [0u8; 0x50];
    fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut buf))
        .map(|()| header_says_compressed(&buf))
        .unwrap_or(false)
}

/// What retention weighs of each snapshot, in the same order.
pub fn retention_entries(all: &[SnapshotInfo]) -> Vec<retention::Entry> {
    all.iter()
        .map(|s| retention::Entry {
            created_unix_ns: s.created_unix_ns,
            bytes: s.bytes,
        })
        .collect()
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
    /// The group the directory and its files are given (the socket's).
    group: Mutex<Option<Gid>>,
    /// Ids of snapshots being compressed or removed.
    busy: Mutex<HashSet<String>>,
    freed: Condvar,
}

/// Holds a snapshot's id in [`Store::busy`] until dropped.
struct SnapshotLock<'a> {
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

/// Gives `path` to `gid` (ownership stays root's); failures are logged,
/// not fatal: the snapshot matters more than the group's access to it.
fn give_to_group(path: &Path, gid: Option<Gid>) {
    if let Some(gid) = gid
        && let Err(e) = nix::unistd::chown(path, None, Some(gid))
    {
        tracing::warn!(path = %path.display(), gid = gid.as_raw(), "cannot give the file to the socket group: {e}");
    }
}

impl Store {
    /// Opens (creating, 0750) `dir`, removes temporary files and orphaned
    /// sidecars left by a crash (returned), and continues the sequence.
    pub fn open(dir: &Path, host: &str) -> Result<(Self, Vec<PathBuf>), StoreError> {
        let store = Self {
            dir: dir.to_path_buf(),
            host: name::sanitize_host(host),
            next_seq: Mutex::new(0),
            group: Mutex::new(None),
            busy: Mutex::new(HashSet::new()),
            freed: Condvar::new(),
        };
        store.ensure_dir()?;
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

    fn group(&self) -> Option<Gid> {
        *self.group.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gives the directory, the snapshots and their sidecars to `gid` (the
    /// socket group), now and for every file written later.
    pub fn set_group(&self, gid: Option<Gid>) -> Result<(), StoreError> {
        *self.group.lock().unwrap_or_else(|p| p.into_inner()) = gid;
        if gid.is_none() {
            return Ok(());
        }
        give_to_group(&self.dir, gid);
        for file in self.read_dir()? {
            let snapshot = SnapshotName::parse_file_name(&file).is_some();
            let sidecar = file.starts_with('.') && file.ends_with(".meta");
            if snapshot || sidecar {
                give_to_group(&self.dir.join(file), gid);
            }
        }
        Ok(())
    }

    /// Gives a snapshot just written to the socket group.
    pub fn adopt(&self, r: &Reservation) {
        give_to_group(&self.dir.join(r.file_name()), self.group());
    }

    /// Creates the directory (0750, the socket group's) if it is missing:
    /// at start and before each dump, in case it was removed meanwhile.
    fn ensure_dir(&self) -> Result<(), StoreError> {
        if self.dir.is_dir() {
            return Ok(());
        }
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(&self.dir)
            .map_err(|source| StoreError::CreateDir {
                path: self.dir.clone(),
                source,
            })?;
        // The mode asked for is cut by the umask; the store's is exact.
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o750)).map_err(|source| {
            StoreError::CreateDir {
                path: self.dir.clone(),
                source,
            }
        })?;
        give_to_group(&self.dir, self.group());
        Ok(())
    }

    /// Waits until no one else compresses or removes snapshot `id`, and
    /// keeps it that way until the lock is dropped.
    fn lock_snapshot(&self, id: &str) -> SnapshotLock<'_> {
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

    /// Runs `rewrite` on snapshot `id` (a compression replacing the file)
    /// with the snapshot locked against removal, then gives the new file to
    /// the socket group. Returns the snapshot before and after.
    pub fn rewrite<E>(
        &self,
        id: &str,
        rewrite: impl FnOnce(&SnapshotInfo) -> Result<(), E>,
    ) -> Result<(SnapshotInfo, SnapshotInfo), RewriteError<E>> {
        let n =
            SnapshotName::parse_id(id).ok_or_else(|| StoreError::InvalidId { id: id.into() })?;
        let _lock = self.lock_snapshot(&n.id());
        let before = self.info_of(&n)?;
        rewrite(&before).map_err(RewriteError::Rewrite)?;
        give_to_group(&before.path, self.group());
        let after = self.info_of(&n)?;
        Ok((before, after))
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
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            // Removed behind our back: no snapshots until a dump creates it
            // again.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(names),
            Err(e) => return Err(err(e)),
        };
        for entry in entries {
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
        self.ensure_dir()?;
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
            give_to_group(&tmp, self.group());
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

    /// Removes a snapshot and its sidecar, waiting for a compression of it
    /// to finish. A snapshot already gone is not an error.
    pub fn remove(&self, info: &SnapshotInfo) -> Result<(), StoreError> {
        let _lock = self.lock_snapshot(&info.id);
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

    #[test]
    fn sidecar_temp_files_left_by_a_kill_are_removed_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (store, _) = Store::open(d, "h").unwrap();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_795_212_693);
        let r = store.reserve(None, "api", t0).unwrap();
        fs::write(d.join(r.file_name()), header(false)).unwrap();
        drop(store);
        // What a kill -9 between the sidecar's write and rename leaves.
        let tmp = format!(".{}.meta.tmp-4242", r.id());
        fs::write(d.join(&tmp), b"{}").unwrap();
        assert!(is_temp_file_name(&tmp));
        assert!(!is_temp_file_name(&format!(".{}.meta", r.id())));
        assert!(!is_temp_file_name(&format!(".{}.meta.tmp-", r.id())));
        let (_, removed) = Store::open(d, "h").unwrap();
        assert_eq!(removed, vec![d.join(&tmp)]);
        assert!(!d.join(&tmp).exists());
        assert!(d.join(format!(".{}.meta", r.id())).exists());
    }

    #[test]
    fn a_removed_directory_is_created_again_by_the_next_reservation() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("snaps");
        let (store, _) = Store::open(&d, "h").unwrap();
        fs::remove_dir_all(&d).unwrap();
        assert_eq!(store.list().unwrap(), vec![]);
        let u = store.usage().unwrap();
        assert_eq!((u.snapshots, u.bytes), (0, 0));
        assert!(u.disk_free_bytes > 0);
        let r = store.reserve(None, "api", SystemTime::now()).unwrap();
        let mode = fs::metadata(&d).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o750);
        assert!(d.join(format!(".{}.meta", r.id())).exists());
    }

    #[test]
    fn a_removal_waits_for_a_compression_of_the_same_snapshot() {
        use std::sync::mpsc;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (store, _) = Store::open(d, "h").unwrap();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_795_212_693);
        let ids: Vec<Reservation> = (0..2)
            .map(|i| {
                let r = store
                    .reserve(None, "api", t0 + Duration::from_secs(i))
                    .unwrap();
                fs::write(d.join(r.file_name()), header(false)).unwrap();
                r
            })
            .collect();
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
