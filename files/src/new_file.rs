//! A file that appears under its final name only once it is whole.
//!
//! [`NewFile::create`] opens `.<name>.tmp-<12 random characters>` in the
//! target directory with `O_CREAT | O_EXCL` (through `tempfile`): an
//! existing file or a planted symlink at that name is never opened, and the
//! name cannot be guessed ahead. The mode and group are set on the
//! descriptor (`fchmod`, `fchown`) before anything is written, never by
//! path. [`NewFile::commit`] syncs the file, renames it to its final name
//! (with `RENAME_NOREPLACE` unless replacing is asked for) and syncs the
//! directory. Dropped without a commit, the temporary file is removed.
//!
//! A small file that must be on disk before a larger one is named (a
//! snapshot's sidecar) need not cost syncs of its own:
//! [`NewFile::place_unsynced`] renames it into place at once, and the
//! larger file's [`NewFile::commit_with`] syncs it after its own data and
//! before its own rename, then syncs the directory once for both names.
//! On a journaling file system (ext4, xfs) the small file's sync then
//! finds its blocks already committed with the larger file's data and
//! costs no journal commit of its own.

use std::fs::{File, Permissions};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Between a file's final name and the random part of its temporary name.
const TEMP_MARK: &str = ".tmp-";
/// Random alphanumeric characters in a temporary name.
const RANDOM_CHARS: usize = 12;

/// The mode and group a new file is given (its owner is the creator).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// Permission bits, e.g. 0o640 (applied exactly: the umask plays no part).
    pub mode: u32,
    /// The file's group; `None` keeps the creator's.
    pub group: Option<u32>,
}

impl Access {
    /// Readable and writable by the creator only.
    pub const PRIVATE: Access = Access {
        mode: 0o600,
        group: None,
    };

    pub const fn new(mode: u32, group: Option<u32>) -> Self {
        Access { mode, group }
    }
}

/// What a commit does with a file already at the final name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Fail with [`io::ErrorKind::AlreadyExists`] and leave it as it is.
    Keep,
    /// Replace it atomically (a reader sees the old or the new file).
    Replace,
}

/// A file being written under a temporary name (see the module docs).
#[derive(Debug)]
pub struct NewFile {
    temp: tempfile::NamedTempFile,
    dir: PathBuf,
    path: PathBuf,
}

impl NewFile {
    /// Creates the temporary file of `dir/name` with `access`. `name` must
    /// be a plain file name.
    pub fn create(dir: &Path, name: &str, access: Access) -> io::Result<Self> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name:?} is not a plain file name"),
            ));
        }
        let prefix = format!(".{name}{TEMP_MARK}");
        let temp = tempfile::Builder::new()
            .prefix(&prefix)
            .rand_bytes(RANDOM_CHARS)
            .permissions(Permissions::from_mode(0o600))
            .tempfile_in(dir)?;
        if let Some(gid) = access.group {
            nix::unistd::fchown(temp.as_file(), None, Some(nix::unistd::Gid::from_raw(gid)))?;
        }
        // fchmod: exact, whatever the umask cut at creation.
        temp.as_file()
            .set_permissions(Permissions::from_mode(access.mode & 0o7777))?;
        Ok(NewFile {
            temp,
            dir: dir.to_path_buf(),
            path: dir.join(name),
        })
    }

    pub fn file(&self) -> &File {
        self.temp.as_file()
    }

    pub fn file_mut(&mut self) -> &mut File {
        self.temp.as_file_mut()
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The temporary path (removed unless committed).
    pub fn temp_path(&self) -> &Path {
        self.temp.path()
    }

    /// Syncs the file, gives it its final name and syncs the directory.
    /// On error the temporary file is removed (and, with
    /// [`Existing::Keep`], a file already there is left as it was: the
    /// error is [`io::ErrorKind::AlreadyExists`]).
    pub fn commit(self, existing: Existing) -> Result<File, CommitError> {
        self.commit_with(existing, &[])
    }

    /// [`NewFile::commit`], syncing each of `placed` (files of the same
    /// directory that [`NewFile::place_unsynced`] put in place) after this
    /// file and before its rename: once this file's name is on disk, so
    /// are they, their names with it (the directory is synced after).
    pub fn commit_with(self, existing: Existing, placed: &[&File]) -> Result<File, CommitError> {
        let NewFile { temp, dir, path } = self;
        temp.as_file()
            .sync_all()
            .map_err(|source| CommitError::Sync { source })?;
        for file in placed {
            file.sync_all()
                .map_err(|source| CommitError::Sync { source })?;
        }
        let file = Self::rename(temp, &path, existing)?;
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| CommitError::SyncDir { source })?;
        Ok(file)
    }

    /// Gives the file its final name now, syncing nothing: neither its
    /// data nor its name is known to be on disk until a later
    /// [`NewFile::commit_with`] in the same directory is given it. What a
    /// crash leaves meanwhile must be harmless (the store removes a
    /// sidecar whose snapshot is missing). The file is left open to be
    /// given.
    pub fn place_unsynced(self, existing: Existing) -> Result<File, CommitError> {
        let NewFile { temp, path, .. } = self;
        // The write-back starts now (Linux starts it for dirty pages on
        // this advice), so the blocks are allocated before the larger
        // file's sync commits the journal. An advice: a failure costs
        // time, not safety.
        let _ = nix::fcntl::posix_fadvise(
            temp.as_file(),
            0,
            0,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        );
        Self::rename(temp, &path, existing)
    }

    fn rename(
        temp: tempfile::NamedTempFile,
        path: &Path,
        existing: Existing,
    ) -> Result<File, CommitError> {
        let persisted = match existing {
            Existing::Keep => temp.persist_noclobber(path),
            Existing::Replace => temp.persist(path),
        };
        // A failed persist hands the temporary file back; dropping it
        // removes it.
        persisted.map_err(|e| CommitError::Rename { source: e.error })
    }
}

/// Which step of [`NewFile::commit`] failed.
#[derive(Debug)]
pub enum CommitError {
    Sync { source: io::Error },
    Rename { source: io::Error },
    SyncDir { source: io::Error },
}

impl CommitError {
    pub fn io(&self) -> &io::Error {
        match self {
            CommitError::Sync { source }
            | CommitError::Rename { source }
            | CommitError::SyncDir { source } => source,
        }
    }

    pub fn into_io(self) -> io::Error {
        match self {
            CommitError::Sync { source }
            | CommitError::Rename { source }
            | CommitError::SyncDir { source } => source,
        }
    }
}

impl std::fmt::Display for CommitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommitError::Sync { source } => write!(f, "syncing to disk: {source}"),
            CommitError::Rename { source } => write!(f, "renaming into place: {source}"),
            CommitError::SyncDir { source } => write!(f, "syncing the directory: {source}"),
        }
    }
}

impl std::error::Error for CommitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.io())
    }
}

/// Writes `bytes` as `dir/name` through a [`NewFile`].
pub fn write_new(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    access: Access,
    existing: Existing,
) -> io::Result<()> {
    use std::io::Write;
    let mut new = NewFile::create(dir, name, access)?;
    new.file_mut().write_all(bytes)?;
    new.commit(existing).map(drop).map_err(CommitError::into_io)
}

/// Whether `name` is the temporary name [`NewFile`] gives a file
/// (`.<name>.tmp-<12 alphanumerics>`): a leftover of a crash when no
/// writer runs.
pub fn is_temp_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('.') else {
        return false;
    };
    let Some((base, random)) = rest.rsplit_once(TEMP_MARK) else {
        return false;
    };
    !base.is_empty()
        && random.len() == RANDOM_CHARS
        && random.bytes().all(|b| b.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_file_appears_whole_with_its_mode_and_temp_names_are_recognized() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = NewFile::create(dir.path(), "a.data", Access::new(0o640, None)).unwrap();
        let temp = f
            .temp_path()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        assert!(is_temp_name(&temp), "{temp}");
        assert!(temp.starts_with(".a.data.tmp-"), "{temp}");
        assert!(!dir.path().join("a.data").exists());
        use std::io::Write;
        f.file_mut().write_all(b"hello").unwrap();
        f.commit(Existing::Keep).unwrap();
        assert_eq!(names(dir.path()), ["a.data"]);
        let md = std::fs::metadata(dir.path().join("a.data")).unwrap();
        assert_eq!(md.mode() & 0o7777, 0o640);
        assert_eq!(std::fs::read(dir.path().join("a.data")).unwrap(), b"hello");
        assert!(!is_temp_name("a.data"));
        assert!(!is_temp_name(".a.tmp-short"));
        assert!(!is_temp_name(".a.tmp-12345678901!"));
        assert!(!is_temp_name("..tmp-123456789012"));
    }

    #[test]
    fn an_existing_file_is_kept_unless_replacing_is_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x"), b"old").unwrap();
        let err = write_new(dir.path(), "x", b"new", Access::PRIVATE, Existing::Keep).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(dir.path().join("x")).unwrap(), b"old");
        assert_eq!(names(dir.path()), ["x"], "the temporary file is gone");
        write_new(dir.path(), "x", b"new", Access::PRIVATE, Existing::Replace).unwrap();
        assert_eq!(std::fs::read(dir.path().join("x")).unwrap(), b"new");
    }

    #[test]
    fn a_planted_symlink_at_the_final_name_is_neither_followed_nor_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("out")).unwrap();
        let err = write_new(dir.path(), "out", b"x", Access::PRIVATE, Existing::Keep).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    }

    #[test]
    fn a_placed_file_is_named_at_once_and_synced_by_the_next_commit() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let mut side = NewFile::create(dir.path(), ".a.meta", Access::new(0o640, None)).unwrap();
        side.file_mut().write_all(b"meta").unwrap();
        let side = side.place_unsynced(Existing::Replace).unwrap();
        assert_eq!(names(dir.path()), [".a.meta"]);
        let mut data = NewFile::create(dir.path(), "a.data", Access::PRIVATE).unwrap();
        data.file_mut().write_all(b"data").unwrap();
        data.commit_with(Existing::Keep, &[&side]).unwrap();
        assert_eq!(names(dir.path()), [".a.meta", "a.data"]);
        assert_eq!(std::fs::read(dir.path().join(".a.meta")).unwrap(), b"meta");
        let md = std::fs::metadata(dir.path().join(".a.meta")).unwrap();
        assert_eq!(md.mode() & 0o7777, 0o640);
        // A name taken is refused as by a commit, the temporary file gone.
        let taken = NewFile::create(dir.path(), "a.data", Access::PRIVATE).unwrap();
        let err = taken.place_unsynced(Existing::Keep).unwrap_err();
        assert_eq!(err.io().kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(names(dir.path()), [".a.meta", "a.data"]);
    }

    #[test]
    fn a_dropped_file_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        drop(NewFile::create(dir.path(), "y", Access::PRIVATE).unwrap());
        assert!(names(dir.path()).is_empty());
        assert!(NewFile::create(dir.path(), "../y", Access::PRIVATE).is_err());
    }
}
