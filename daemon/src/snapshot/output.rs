//! Putting a snapshot on disk so that a reader never sees half of one.
//!
//! The file is created exclusively as `.<name>.tmp-<12 random characters>`
//! in the output directory, its mode and group set on the descriptor
//! (`flightrec_files::NewFile`; see [`is_temp_file_name`]: the store
//! removes such leftovers of a crash), written through a shared memory map
//! grown in chunks of up to 64 MiB (one copy into memory per piece instead
//! of a `write()` call each), truncated to its exact length, fsync'ed,
//! renamed to its final name (never over an existing file) and the
//! directory fsync'ed. A file placed before it in the same directory
//! without a sync (the store's sidecar, [`Target::placed`]) is synced
//! after its data and before its rename, and the one directory sync
//! covers both names. Each chunk's blocks are reserved with
//! `posix_fallocate` before it is mapped: a full disk is then an ENOSPC
//! error here instead of a SIGBUS when a page of the map is first touched.
//! On any error the temporary file is removed and the error names the file.
//!
//! Writing is meant to run on its own thread after the capture returned:
//! the capture never waits on the disk.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use flightrec_files::new_file::CommitError;
use flightrec_files::{Access, Existing, Links, NewFile, open_regular};

use memmap2::MmapMut;
use thiserror::Error;

use super::perfdata::{
    DataSummary, Encoder, PerfData, PerfDataError, Sink, WriteOptions, encode_capture,
};
use super::recompress::{ReadError, recompress_file};
use crate::host::{HostInfo, HostInfoError};
use crate::recorder::{Capture, EventDescriptor};
use crate::tracking::modules::LoadedModule;

/// Snapshot files are readable by the owner's group (the operators).
pub const FILE_MODE: u32 = 0o640;
/// Largest piece of the output file mapped (and reserved) at once.
pub const CHUNK_BYTES: u64 = 64 << 20;

const TEMP_MARK: &str = ".tmp-";

#[derive(Debug, Error)]
pub enum SnapshotError {
    #[error("{name:?} is not a valid snapshot file name (a plain name, not starting with '.')")]
    InvalidName { name: String },
    #[error("{} already exists; snapshots are never overwritten", path.display())]
    Exists { path: PathBuf },
    #[error("gathering host facts for {}: {source}", path.display())]
    HostInfo {
        path: PathBuf,
        source: HostInfoError,
    },
    #[error("encoding {}: {source}", path.display())]
    Encode {
        path: PathBuf,
        source: PerfDataError,
    },
    #[error("creating {}: {source}{}", path.display(), disk_full_hint(source))]
    Create { path: PathBuf, source: io::Error },
    #[error("writing {}: {source}{}", path.display(), disk_full_hint(source))]
    Write { path: PathBuf, source: io::Error },
    #[error("syncing {} to disk: {source}{}", path.display(), disk_full_hint(source))]
    Sync { path: PathBuf, source: io::Error },
    #[error("renaming {} to {}: {source}", from.display(), to.display())]
    Rename {
        from: PathBuf,
        to: PathBuf,
        source: io::Error,
    },
    #[error("syncing directory {}: {source}", path.display())]
    SyncDir { path: PathBuf, source: io::Error },
    #[error("reading {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("{}: {source}", path.display())]
    Parse { path: PathBuf, source: ReadError },
    /// Reading what goes into the snapshot failed (the history's segments).
    #[error("reading the records of {}: {source}", path.display())]
    Input { path: PathBuf, source: io::Error },
}

/// ENOSPC or EDQUOT: the file system is full or the quota exhausted. The
/// one test for it; the store asks it too.
pub fn is_disk_full_io(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

fn disk_full_hint(e: &io::Error) -> &'static str {
    if is_disk_full_io(e) {
        " (disk full)"
    } else {
        ""
    }
}

impl SnapshotError {
    /// The file system is full or the quota is exhausted (ENOSPC, EDQUOT):
    /// the store may free space and retry.
    pub fn is_disk_full(&self) -> bool {
        match self {
            Self::Create { source, .. }
            | Self::Write { source, .. }
            | Self::Sync { source, .. }
            | Self::Rename { source, .. }
            | Self::SyncDir { source, .. } => is_disk_full_io(source),
            _ => false,
        }
    }

    /// The file (or directory) the error is about.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Self::InvalidName { .. } => None,
            Self::Exists { path }
            | Self::HostInfo { path, .. }
            | Self::Encode { path, .. }
            | Self::Create { path, .. }
            | Self::Write { path, .. }
            | Self::Sync { path, .. }
            | Self::SyncDir { path, .. }
            | Self::Read { path, .. }
            | Self::Parse { path, .. }
            | Self::Input { path, .. } => Some(path),
            Self::Rename { to, .. } => Some(to),
        }
    }
}

/// A snapshot on disk.
#[derive(Debug, Clone)]
pub struct WrittenSnapshot {
    pub path: PathBuf,
    /// File size.
    pub bytes: u64,
    pub summary: DataSummary,
    /// Encoding (and compression) plus writing and syncing.
    pub elapsed: Duration,
}

/// Whether `name` is a temporary snapshot name: a leftover of a crash when
/// no writer runs. Today's writer names them as `NewFile` does; earlier
/// versions used `.<name>.tmp-<pid>-<n>`.
pub fn is_temp_file_name(name: &str) -> bool {
    if flightrec_files::is_temp_name(name) {
        return true;
    }
    let Some(rest) = name.strip_prefix('.') else {
        return false;
    };
    let Some((base, suffix)) = rest.rsplit_once(TEMP_MARK) else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    !base.is_empty()
        && suffix
            .split_once('-')
            .is_some_and(|(p, n)| digits(p) && digits(n))
}

fn check_name(name: &str) -> Result<(), SnapshotError> {
    let bad = name.is_empty()
        || name.starts_with('.')
        || name.contains('/')
        || name.contains('\0')
        || name.len() > 200;
    if bad {
        return Err(SnapshotError::InvalidName { name: name.into() });
    }
    Ok(())
}

/// Writes `capture` as `dir/file_name`, atomically (see the module docs),
/// mode [`FILE_MODE`] in the writer's group. `opts.host` should be the
/// facts gathered at daemon start; without it they are gathered now.
pub fn write_snapshot(
    capture: &Capture,
    opts: &WriteOptions,
    dir: &Path,
    file_name: &str,
) -> Result<WrittenSnapshot, SnapshotError> {
    write_snapshot_in_group(capture, opts, dir, file_name, None, None)
}

/// [`write_snapshot`] giving the file to `group` (the socket group), with
/// `placed` synced before its rename (see [`Target::placed`]).
pub fn write_snapshot_in_group(
    capture: &Capture,
    opts: &WriteOptions,
    dir: &Path,
    file_name: &str,
    group: Option<u32>,
    placed: Option<&File>,
) -> Result<WrittenSnapshot, SnapshotError> {
    let gathered;
    let host: &HostInfo = match &opts.host {
        Some(h) => h,
        None => {
            gathered = HostInfo::gather(&crate::recorder::tracepoints_of(&capture.events))
                .map_err(|source| SnapshotError::HostInfo {
                    path: dir.join(file_name),
                    source,
                })?;
            &gathered
        }
    };
    let records: u64 = capture
        .cpus
        .iter()
        .map(|c| c.records.len() as u64)
        .sum::<u64>()
        + capture.tracking_records.len() as u64;
    let target = Target {
        dir,
        file_name,
        group,
        expected_bytes: records,
        placed,
    };
    write_encoded(
        &target,
        host,
        capture.events.clone(),
        opts.compression,
        &capture.loaded_modules,
        |encoder| encode_capture(encoder, capture).map_err(Fill::Encode),
    )
}

/// Where a new snapshot goes.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub dir: &'a Path,
    pub file_name: &'a str,
    /// The socket group, given the file.
    pub group: Option<u32>,
    /// About how many bytes of records it will hold: reserved as it is
    /// written, never more than a chunk beyond it.
    pub expected_bytes: u64,
    /// A file already named in `dir` but not synced (the store's sidecar,
    /// `flightrec_files::NewFile::place_unsynced`): synced after the
    /// snapshot's data and before its rename, so a snapshot on disk has
    /// it; one directory sync after the rename covers both names.
    pub placed: Option<&'a File>,
}

/// Why filling a snapshot stopped.
#[derive(Debug)]
pub enum Fill {
    Encode(PerfDataError),
    /// Its records could not be read.
    Input(io::Error),
}

/// Writes a new snapshot at `target` (see the module docs) whose data
/// section `fill` writes through an [`Encoder`] of `events`, as it reads
/// them: a file of any size costs the memory of what `fill` holds at once.
pub fn write_encoded<F>(
    target: &Target<'_>,
    host: &HostInfo,
    events: Vec<EventDescriptor>,
    compression: Option<i32>,
    loaded: &[LoadedModule],
    fill: F,
) -> Result<WrittenSnapshot, SnapshotError>
where
    F: FnOnce(&mut Encoder<'_, MappedOutput<'_>>) -> Result<(), Fill>,
{
    let started = Instant::now();
    check_name(target.file_name)?;
    let path = target.dir.join(target.file_name);
    if path.symlink_metadata().is_ok() {
        return Err(SnapshotError::Exists { path });
    }
    let new = NewFile::create(
        target.dir,
        target.file_name,
        Access::new(FILE_MODE, target.group),
    )
    .map_err(|source| SnapshotError::Create {
        path: path.clone(),
        source,
    })?;
    let encode_err = |e: PerfDataError| match e {
        PerfDataError::Write { source } => SnapshotError::Write {
            path: path.clone(),
            source,
        },
        source => SnapshotError::Encode {
            path: path.clone(),
            source,
        },
    };
    let out = MappedOutput::new(new.file(), target.expected_bytes);
    let mut encoder = Encoder::begin(out, host, events, compression).map_err(encode_err)?;
    fill(&mut encoder).map_err(|f| match f {
        Fill::Encode(e) => encode_err(e),
        Fill::Input(source) => SnapshotError::Input {
            path: path.clone(),
            source,
        },
    })?;
    let (out, summary) = encoder.finish(loaded).map_err(encode_err)?;
    let bytes = out.finish().map_err(|source| SnapshotError::Write {
        path: path.clone(),
        source,
    })?;
    commit(new, target.dir, target.file_name, false, target.placed)?;
    Ok(WrittenSnapshot {
        path,
        bytes,
        summary,
        elapsed: started.elapsed(),
    })
}

/// Replaces the uncompressed snapshot at `path` by its zstd-compressed
/// form at `level`, atomically: until the rename the original is untouched.
/// The new file keeps the original's mode and group.
/// The file is read piece by piece; memory holds one piece (32 MiB) and the
/// compressed result, which is then written with its exact size reserved
/// (compressing is how a full disk gets room back).
pub fn compress_snapshot(path: &Path, level: i32) -> Result<WrittenSnapshot, SnapshotError> {
    let started = Instant::now();
    let (dir, name) = match (path.parent(), path.file_name().and_then(|n| n.to_str())) {
        (Some(dir), Some(name)) => (dir, name),
        _ => {
            return Err(SnapshotError::InvalidName {
                name: path.display().to_string(),
            });
        }
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let (file, md) = open_regular(path, Links::Refuse).map_err(|source| SnapshotError::Read {
        path: path.into(),
        source,
    })?;
    let data = recompress_file(&file, level).map_err(|source| SnapshotError::Parse {
        path: path.into(),
        source,
    })?;
    drop(file);
    let access = Access::new(md.mode() & 0o7777, Some(md.gid()));
    let written = put_file(&data, dir, name, access, true)?;
    Ok(WrittenSnapshot {
        path: path.into(),
        bytes: written,
        summary: data.summary,
        elapsed: started.elapsed(),
    })
}

/// Writes `data` under a temporary name in `dir` with `access`, then
/// renames it to `name` (replacing an existing file only if `replace`).
/// Returns the size. Errors name the snapshot, not the temporary file
/// (removed on error).
fn put_file(
    data: &PerfData<'_>,
    dir: &Path,
    name: &str,
    access: Access,
    replace: bool,
) -> Result<u64, SnapshotError> {
    let path = dir.join(name);
    let new = NewFile::create(dir, name, access).map_err(|source| SnapshotError::Create {
        path: path.clone(),
        source,
    })?;
    let write_err = |source| SnapshotError::Write {
        path: path.clone(),
        source,
    };
    let mut out = MappedOutput::new(new.file(), data.len());
    for segment in &data.segments {
        out.write(segment).map_err(write_err)?;
    }
    let len = out.finish().map_err(write_err)?;
    commit(new, dir, name, replace, None)?;
    Ok(len)
}

/// Syncs `new` (then `placed`) and renames it to `dir/name` (replacing an
/// existing file only if `replace`), then syncs the directory.
fn commit(
    new: NewFile,
    dir: &Path,
    name: &str,
    replace: bool,
    placed: Option<&File>,
) -> Result<(), SnapshotError> {
    let path = dir.join(name);
    let existing = if replace {
        Existing::Replace
    } else {
        Existing::Keep
    };
    let placed: Vec<&File> = placed.into_iter().collect();
    new.commit_with(existing, &placed).map_err(|e| match e {
        CommitError::Sync { source } => SnapshotError::Sync { path, source },
        CommitError::Rename { source } if source.kind() == io::ErrorKind::AlreadyExists => {
            SnapshotError::Exists { path }
        }
        CommitError::Rename { source } => SnapshotError::Rename {
            from: dir.join(format!(".{name}.tmp-*")),
            to: path,
            source,
        },
        CommitError::SyncDir { source } => SnapshotError::SyncDir {
            path: dir.into(),
            source,
        },
    })?;
    Ok(())
}

/// A file written through shared maps of up to [`CHUNK_BYTES`], each
/// reserved with `posix_fallocate` before it is mapped.
pub struct MappedOutput<'f> {
    file: &'f File,
    map: Option<MmapMut>,
    /// File offset of `map`.
    map_start: u64,
    /// Bytes written so far (file offset of the next byte).
    len: u64,
    /// Expected final length: chunks are not reserved past it (rounded up
    /// to a page), so a small file never needs 64 MiB free.
    expected: u64,
}

impl<'f> MappedOutput<'f> {
    fn new(file: &'f File, expected: u64) -> Self {
        Self {
            file,
            map: None,
            map_start: 0,
            len: 0,
            expected,
        }
    }

    fn write(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let full = self
                .map
                .as_ref()
                .is_none_or(|m| (self.len - self.map_start) as usize >= m.len());
            if full {
                self.next_chunk()?;
            }
            let offset_in_map = (self.len - self.map_start) as usize;
            let Some(map) = self.map.as_mut() else {
                return Err(io::Error::other("output map missing"));
            };
            let n = buf.len().min(map.len() - offset_in_map);
            map[offset_in_map..offset_in_map + n].copy_from_slice(&buf[..n]);
            self.len += n as u64;
            buf = &buf[n..];
        }
        Ok(())
    }

    /// Unmaps the current chunk, reserves and maps the next one at `len`
    /// (always page aligned: chunks are whole pages and filled completely
    /// before the next is mapped).
    fn next_chunk(&mut self) -> io::Result<()> {
        self.map = None;
        let page = crate::perf::page_size() as u64;
        let remaining = self.expected.saturating_sub(self.len);
        let size = if remaining == 0 {
            CHUNK_BYTES
        } else {
            remaining.next_multiple_of(page).min(CHUNK_BYTES)
        };
        let start = self.len;
        let to_off = |v: u64| {
            libc::off_t::try_from(v).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))
        };
        nix::fcntl::posix_fallocate(self.file, to_off(start)?, to_off(size)?)
            .map_err(io::Error::from)?;
        let len = usize::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        let map = crate::perf::file_map::map_reserved_chunk(self.file, start, len)?;
        self.map_start = start;
        self.map = Some(map);
        Ok(())
    }

    /// Unmaps and cuts the file to the bytes written.
    fn finish(mut self) -> io::Result<u64> {
        self.map = None;
        self.file.set_len(self.len)?;
        Ok(self.len)
    }
}

impl Sink for MappedOutput<'_> {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write(bytes)
    }

    /// Bytes already written, through the file (the pages are the map's:
    /// the page cache is one).
    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        if offset + bytes.len() as u64 > self.len {
            return Err(io::Error::other("writing past the end of the output"));
        }
        self.file.write_all_at(bytes, offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_recognized_and_final_names_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let name = "host-20261120T221500Z-0001.perf.data";
        let new = NewFile::create(dir.path(), name, Access::PRIVATE).unwrap();
        let t = new.temp_path().file_name().unwrap().to_str().unwrap();
        assert!(t.starts_with(".host-20261120T221500Z-0001.perf.data.tmp-"));
        assert!(is_temp_file_name(t));
        // Left by earlier versions.
        assert!(is_temp_file_name(".host-1.perf.data.tmp-123-0"));
        assert!(!is_temp_file_name("host-20261120T221500Z-0001.perf.data"));
        assert!(!is_temp_file_name(".hidden"));
        assert!(!is_temp_file_name(".x.tmp-12-"));
        assert!(!is_temp_file_name(".x.tmp-a-1"));
        assert!(!is_temp_file_name("..tmp-1-2"));
    }

    #[test]
    fn names_with_slashes_or_leading_dots_are_refused() {
        for bad in ["", ".x", "../x", "a/b", "a\0b"] {
            assert!(
                matches!(check_name(bad), Err(SnapshotError::InvalidName { .. })),
                "{bad:?}"
            );
        }
        assert!(check_name("host-1.perf.data").is_ok());
    }

    #[test]
    fn mapped_output_crosses_chunks_and_ends_at_exact_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        // Expect less than is written: the writer must grow past it.
        let mut out = MappedOutput::new(&file, 5000);
        let piece: Vec<u8> = (0..=255u8).cycle().take(3001).collect();
        let mut want = Vec::new();
        for _ in 0..5 {
            out.write(&piece).unwrap();
            want.extend_from_slice(&piece);
        }
        let len = out.finish().unwrap();
        assert_eq!(len, want.len() as u64);
        assert_eq!(std::fs::read(&path).unwrap(), want);
    }

    #[test]
    fn snapshots_are_written_and_an_existing_name_is_refused() {
        use crate::snapshot::testing::{
            SCHED_SWITCH_FORMAT, SyntheticSpec, synthetic_capture, synthetic_host,
        };
        let dir = tempfile::tempdir().unwrap();
        let opts = WriteOptions {
            compression: Some(1),
            host: Some(std::sync::Arc::new(synthetic_host(SCHED_SWITCH_FORMAT))),
        };
        let capture = synthetic_capture(&SyntheticSpec::default());
        let results: Vec<_> = ["a.data", "b.data", "a.data"]
            .iter()
            .map(|name| write_snapshot(&capture, &opts, dir.path(), name))
            .collect();
        assert_eq!(results[0].as_ref().unwrap().summary.samples, 400);
        let first = std::fs::read(dir.path().join("a.data")).unwrap();
        assert_eq!(first.len() as u64, results[0].as_ref().unwrap().bytes);
        assert!(dir.path().join("b.data").exists());
        assert!(matches!(results[2], Err(SnapshotError::Exists { .. })));
        // The refused write left the first file as it was.
        assert_eq!(std::fs::read(dir.path().join("a.data")).unwrap(), first);
    }

    #[test]
    fn disk_full_is_recognized() {
        let e = SnapshotError::Write {
            path: "/x/y".into(),
            source: io::Error::from_raw_os_error(libc::ENOSPC),
        };
        assert!(e.is_disk_full());
        let msg = e.to_string();
        assert!(msg.contains("/x/y") && msg.contains("disk full"), "{msg}");
        let e = SnapshotError::Write {
            path: "/x/y".into(),
            source: io::Error::from_raw_os_error(libc::EIO),
        };
        assert!(!e.is_disk_full());
    }
}
