//! Reserving the name of a dump about to be written, with its sidecar
//! written first so every listed snapshot has one.
//!
//! The sidecar is put in place unsynced; the snapshot's own commit syncs
//! it after the snapshot's data and before its rename, and one directory
//! sync covers both names (`flightrec_files::NewFile::commit_with`): one
//! sync of the data, then the sidecar's (which finds its blocks already
//! committed with the data's), then the directory's, where each file used
//! to cost a sync of its own and one of the directory.

use std::fs;
use std::sync::Arc;
use std::time::SystemTime;

use super::info::Meta;
use super::{SnapshotName, Store, StoreError, unix_ns, validate_label};
use crate::time::WallTime;

/// A name handed out for a dump about to be written.
#[derive(Debug, Clone)]
pub struct Reservation {
    pub name: SnapshotName,
    pub trigger: String,
    /// What the conditions among its triggers matched; empty without one.
    pub matched: String,
    pub created_unix_ns: i64,
    /// The sidecar, in place but not yet synced: the snapshot's commit
    /// must sync it before the snapshot is named.
    sidecar: Arc<fs::File>,
}

impl Reservation {
    pub fn id(&self) -> String {
        self.name.id()
    }
    pub fn file_name(&self) -> String {
        self.name.file_name()
    }
    /// The sidecar, for the snapshot's commit to sync before the
    /// snapshot's rename (`Target::placed`).
    pub fn sidecar(&self) -> &fs::File {
        &self.sidecar
    }
}

impl Store {
    /// A fresh name for a dump, with its sidecar written (0640). The label is
    /// validated here: this is the one door from a client's text to a path.
    /// `window`: the instants the snapshot holds, for `List`.
    pub fn reserve(
        &self,
        label: Option<&str>,
        trigger: &str,
        matched: &str,
        now: SystemTime,
        window: Option<(WallTime, WallTime)>,
    ) -> Result<Reservation, StoreError> {
        self.reserve_scoped(label, trigger, matched, now, window, "")
    }

    /// [`Store::reserve`] for a snapshot of part of the machine (`scope`,
    /// as `List` shows it; empty: the whole machine).
    pub fn reserve_scoped(
        &self,
        label: Option<&str>,
        trigger: &str,
        matched: &str,
        now: SystemTime,
        window: Option<(WallTime, WallTime)>,
        scope: &str,
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
        let name = SnapshotName {
            host: self.host.clone(),
            unix_secs: created_unix_ns.div_euclid(1_000_000_000),
            seq,
            label: label.map(str::to_string),
        };
        let meta = Meta {
            trigger: trigger.to_string(),
            matched: matched.to_string(),
            created_unix_ns,
            uploads: self.upload_destinations(),
            // Not known before the capture; not filled yet.
            window_start_unix_ns: window.map(|w| w.0.as_unix_nanos()),
            window_end_unix_ns: window.map(|w| w.1.as_unix_nanos()),
            // Copied once the snapshot is written (Store::keep_perf_maps).
            perf_maps: Vec::new(),
            containers: Vec::new(),
            scope: scope.to_string(),
        };
        let sidecar = Arc::new(self.place_sidecar(&name.id(), &meta)?);
        Ok(Reservation {
            name,
            trigger: meta.trigger,
            matched: meta.matched,
            created_unix_ns,
            sidecar,
        })
    }

    /// Drops the sidecar of a reservation whose snapshot was not written.
    pub fn abandon(&self, r: &Reservation) {
        self.forget(&r.id());
        let _ = fs::remove_file(self.sidecar_path(&r.id()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let r = store
            .reserve(None, "api", "", SystemTime::now(), None)
            .unwrap();
        let mode = fs::metadata(&d).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o750);
        assert!(d.join(format!(".{}.meta", r.id())).exists());
    }
}
