//! The snapshot store: naming, listing and retention.
//!
//! Snapshots live in one directory as `<host>-<UTC time>-<seq>[-label].perf.data`
//! ([`name`]). What the name cannot hold (the trigger, the time to the
//! nanosecond) lives in a hidden sidecar `.<id>.meta` (JSON), written before
//! the snapshot itself is renamed into place, so every listed snapshot has
//! one; a sidecar without its snapshot (a crash mid-dump) is removed at
//! start-up like the writer's temporary files. Whether a snapshot is
//! compressed is read from its header (feature bit 27, COMPRESSED), so it
//! stays true after `Compress`. Every dump's retention and every `Status`
//! lists the store: a listing reads a snapshot's header and sidecar again
//! only when `lstat` says either was replaced since (`info::Known`).
//!
//! With a socket group configured the directory, the snapshots and their
//! sidecars belong to that group (modes 0750 and 0640), so a member who may
//! ask for a dump may also read it. A directory removed while the daemon
//! runs is created again by the next dump.
//!
//! The daemon runs as root in a directory the config names: files are
//! created exclusively under unpredictable names and given their group on
//! the descriptor (`flightrec_files::NewFile`), and listing, clean-up,
//! retention and group changes act only on regular files the daemon owns
//! (`lstat`, never following a link); anything else is passed over and
//! named once in the log. Compressing a snapshot and
//! removing it (retention) take the same per-snapshot lock, so a removal
//! never races a compression that would bring the file back.

mod info;
mod listing;
mod lock;
pub mod name;
mod prune;
mod reservation;
pub mod retention;
mod uploads;

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::unistd::Gid;

use crate::snapshot::output;

pub use info::SnapshotInfo;
pub use listing::Usage;
pub use name::{SnapshotName, validate_label};
pub use prune::retention_entries;
pub use reservation::Reservation;
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
            StoreError::WriteMeta { source, .. } => output::is_disk_full_io(source),
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

/// Temporary files: the writers' (`flightrec_files::NewFile` names, and
/// those of earlier versions: `.<name>.tmp-<pid>-<n>`, `.<id>.meta.tmp-<pid>`):
/// leftovers of a crash when no dump runs.
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
    flightrec_proto::sidecar::file_name(id)
}

/// Whether a perf.data header (a prefix of at least 0x4C bytes) has the
/// COMPRESSED feature set.
pub fn header_says_compressed(header: &[u8]) -> bool {
    flightrec_perfdata::format::is_compressed(header)
}

/// Whether the snapshot at `path` is compressed; `None` when its header
/// cannot be read.
fn read_compressed_flag(path: &Path) -> Option<bool> {
    use flightrec_files::{Links, open_regular, untrusted::read_at_most};
    open_regular(path, Links::Refuse)
        .and_then(|(f, _)| read_at_most(&f, 0, 0x50, 0x50))
        .ok()
        .map(|header| header_says_compressed(&header))
}

/// The daemon's effective uid: the owner of every file it acts on.
fn own_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Whether `md` (from `lstat`) is of a regular file the daemon owns.
fn is_own_file(md: &fs::Metadata) -> bool {
    md.file_type().is_file() && md.uid() == own_uid()
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
    /// Destinations new snapshots are queued for (see `uploads`).
    uploads: Mutex<Vec<String>>,
    /// Entries passed over (not a regular file of the daemon's) already
    /// named in the log.
    reported: Mutex<HashSet<String>>,
    /// What was read of each snapshot listed (see `info::Known`).
    known: Mutex<HashMap<String, info::Known>>,
}

/// Gives the open `file` (at `path`) to `gid` (ownership stays root's);
/// failures are logged, not fatal: the snapshot matters more than the
/// group's access to it.
fn give_to_group(file: &fs::File, path: &Path, gid: Option<Gid>) {
    if let Some(gid) = gid
        && let Err(e) = nix::unistd::fchown(file, None, Some(gid))
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
            uploads: Mutex::new(Vec::new()),
            reported: Mutex::new(HashSet::new()),
            known: Mutex::new(HashMap::new()),
        };
        store.ensure_dir()?;
        let mut removed = Vec::new();
        let mut max_seq = None;
        for file in store.read_dir()? {
            let path = store.dir.join(&file);
            let orphan_meta = file
                .strip_prefix('.')
                .and_then(|f| f.strip_suffix(".meta"))
                .is_some_and(|id| {
                    store
                        .dir
                        .join(format!("{id}{}", name::SUFFIX))
                        .symlink_metadata()
                        .is_err()
                });
            if (is_temp_file_name(&file) || orphan_meta) && store.own_entry(&file).is_some() {
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
    /// socket group), now and for every file written later. Only regular
    /// files the daemon owns are changed, through their descriptor.
    pub fn set_group(&self, gid: Option<Gid>) -> Result<(), StoreError> {
        *self.group.lock().unwrap_or_else(|p| p.into_inner()) = gid;
        if gid.is_none() {
            return Ok(());
        }
        self.give_dir_to_group();
        for file in self.read_dir()? {
            let snapshot = SnapshotName::parse_file_name(&file).is_some();
            let sidecar = file.starts_with('.') && file.ends_with(".meta");
            if !(snapshot || sidecar) {
                continue;
            }
            if self.own_entry(&file).is_none() {
                continue;
            }
            // Opened without following a link: the entry checked above may
            // have been replaced since.
            let path = self.dir.join(&file);
            match flightrec_files::open_regular(&path, flightrec_files::Links::Refuse) {
                Ok((f, md)) if md.uid() == own_uid() => give_to_group(&f, &path, gid),
                Ok((_, md)) => self.report_skipped(&file, &md),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => self.report(&file, &e.to_string()),
            }
        }
        Ok(())
    }

    /// The group files are created in (the socket group), as a gid.
    pub fn group_id(&self) -> Option<u32> {
        self.group().map(Gid::as_raw)
    }

    fn give_dir_to_group(&self) {
        if let Ok(dir) = fs::File::open(&self.dir) {
            give_to_group(&dir, &self.dir, self.group());
        }
    }

    /// The metadata of entry `name` if it is a regular file the daemon
    /// owns (not following a link); else `None`, and the entry is named
    /// once in the log (a name gone meanwhile is not).
    fn own_entry(&self, name: &str) -> Option<fs::Metadata> {
        let md = fs::symlink_metadata(self.dir.join(name)).ok()?;
        if is_own_file(&md) {
            Some(md)
        } else {
            self.report_skipped(name, &md);
            None
        }
    }

    fn report_skipped(&self, name: &str, md: &fs::Metadata) {
        let what = if md.file_type().is_file() {
            format!("a file of uid {}, not the daemon's", md.uid())
        } else {
            flightrec_files::untrusted::kind(md).to_string()
        };
        self.report(name, &what);
    }

    fn report(&self, name: &str, what: &str) {
        let mut reported = self.reported.lock().unwrap_or_else(|p| p.into_inner());
        // Bounded: a directory full of plants is named once each, up to a
        // point, not once per listing.
        if reported.len() < 1024 && reported.insert(name.to_string()) {
            tracing::warn!(
                dir = %self.dir.display(),
                entry = %flightrec_config::quoted(name),
                "passed over in the output directory: {what} (someone else put it there?)"
            );
        }
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
        fs::File::open(&self.dir)
            .and_then(|d| d.set_permissions(fs::Permissions::from_mode(0o750)))
            .map_err(|source| StoreError::CreateDir {
                path: self.dir.clone(),
                source,
            })?;
        self.give_dir_to_group();
        Ok(())
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

    /// Where the sidecar of snapshot `id` is.
    fn sidecar_path(&self, id: &str) -> PathBuf {
        self.dir.join(meta_file_name(id))
    }
}

/// The name in a snapshot id a client gave.
fn parse_id(id: &str) -> Result<SnapshotName, StoreError> {
    SnapshotName::parse_id(id).ok_or_else(|| StoreError::InvalidId { id: id.into() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    /// `n` snapshots of trigger "api" a second apart from `t0`, each an
    /// uncompressed header, oldest first.
    pub(super) fn reserve_snapshots(store: &Store, t0: SystemTime, n: u64) -> Vec<Reservation> {
        (0..n)
            .map(|i| {
                let r = store
                    .reserve(None, "api", "", t0 + Duration::from_secs(i), None)
                    .unwrap();
                fs::write(store.dir().join(r.file_name()), header(false)).unwrap();
                r
            })
            .collect()
    }

    /// A perf.data header with or without the COMPRESSED feature bit.
    pub(super) fn header(compressed: bool) -> Vec<u8> {
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
        let a = store.reserve(None, "api", "", t0, None).unwrap();
        let b = store
            .reserve(Some("oom"), "signal", "", t0 + Duration::from_secs(1), None)
            .unwrap();
        assert_eq!(a.id(), "box_1-20261120T221133Z-000001");
        assert_eq!(b.id(), "box_1-20261120T221134Z-000002-oom");
        fs::write(d.join(a.file_name()), header(false)).unwrap();
        fs::write(d.join(b.file_name()), header(true)).unwrap();
        // A crash left a writer temp file and a sidecar without snapshot.
        fs::write(d.join(".box_1-x.perf.data.tmp-123-0"), b"partial").unwrap();
        let c = store
            .reserve(None, "api", "", t0 + Duration::from_secs(2), None)
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
            store.reserve(Some("../x"), "api", "", t0, None),
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
        let next = store.reserve(None, "api", "", t0, None).unwrap();
        assert_eq!(next.name.seq, 3);
        store.abandon(&next);
        assert!(!d.join(format!(".{}.meta", next.id())).exists());
    }

    #[test]
    fn sidecar_temp_files_left_by_a_kill_are_removed_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (store, _) = Store::open(d, "h").unwrap();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_795_212_693);
        let r = store.reserve(None, "api", "", t0, None).unwrap();
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
}
