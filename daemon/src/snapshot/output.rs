//! Putting a snapshot on disk so that a reader never sees half of one.
//!
//! The file is created exclusively as `.<name>.tmp-<12 random characters>`
//! in the output directory, its mode and group set on the descriptor
//! (`flightrec_files::NewFile`; see [`is_temp_file_name`]: the store
//! removes such leftovers of a crash), written with large `pwrite()`s
//! (direct I/O where the filesystem allows it: [`FileOutput`]), fsync'ed,
//! renamed to its final name (never over an existing file) and the
//! directory fsync'ed. A file placed before it in
//! the same directory without a sync (the store's sidecar,
//! [`Target::placed`]) is synced after its data and before its rename,
//! and the one directory sync covers both names. On any error (a full
//! disk is an ENOSPC from the write) the temporary file is removed and
//! the error names the file.
//!
//! Why writes and not a shared map grown in large chunks (seed 01, which
//! this module did until issue 33): the records arrive as a few large
//! slices (a CPU's ring at a time), so the writes are few; and a map takes
//! a page fault for every 4 KiB it is given, each one a read of the
//! (reserved, unwritten) block and a `page_mkwrite`, then the unmap: 2,700
//! faults for a 12 MB snapshot, 40% of the dump thread's CPU time under
//! load, where `pwrite()` of 1 MiB pieces costs a quarter of the map's CPU
//! (BENCHMARKS.md section 18). Through the page cache, as each large
//! piece is written its write-back is started (`posix_fadvise(DONTNEED)`,
//! on which Linux starts it), so the disk works while the next CPU's
//! records are encoded and the final fsync finds most of the file
//! written; with direct I/O each piece is handed to the kernel and the
//! next one encoded while the device writes it ([`FileOutput`]).
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

use thiserror::Error;

use super::perfdata::{
    DataSummary, Encoder, PerfData, PerfDataError, Sink, WriteOptions, encode_capture,
};
use super::recompress::{ReadError, recompress_file};
use crate::host::{HostInfo, HostInfoError};
use crate::perf::aio::{DirectWrites, Done};
use crate::recorder::{Capture, EventDescriptor};
use crate::tracking::modules::LoadedModule;

/// Snapshot files are readable by the owner's group (the operators).
pub const FILE_MODE: u32 = 0o640;
/// Small pieces (headers, attributes, feature sections, packed batches)
/// are gathered up to this many bytes before a write; a piece this large
/// is written from the caller's memory at once.
pub const WRITE_BYTES: usize = 1 << 20;

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
    /// Samples written per cgroup id.
    pub cgroups: std::collections::BTreeMap<u64, u64>,
    /// Encoding (and compression) plus writing and syncing.
    pub elapsed: Duration,
    /// Of `elapsed`, the syncs of the file, its sidecar and the directory
    /// (and the rename between them): on a file system others write to,
    /// a sync waits for the journal to take their data too.
    pub synced: Duration,
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
    let target = Target {
        dir,
        file_name,
        group,
        placed,
    };
    write_encoded(
        &target,
        host,
        capture.events.clone(),
        opts.compression,
        &capture.loaded_modules,
        |encoder| {
            if let Some(scope) = &opts.scope {
                encoder.set_scope(scope.clone());
            }
            encode_capture(encoder, capture).map_err(Fill::Encode)
        },
    )
}

/// Where a new snapshot goes.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub dir: &'a Path,
    pub file_name: &'a str,
    /// The socket group, given the file.
    pub group: Option<u32>,
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

impl From<io::Error> for Fill {
    fn from(e: io::Error) -> Self {
        Fill::Input(e)
    }
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
    F: FnOnce(&mut Encoder<'_, FileOutput<'_>>) -> Result<(), Fill>,
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
    let out = FileOutput::new(new.file());
    let mut encoder = Encoder::begin(out, host, events, compression).map_err(encode_err)?;
    fill(&mut encoder).map_err(|f| match f {
        Fill::Encode(e) => encode_err(e),
        Fill::Input(source) => SnapshotError::Input {
            path: path.clone(),
            source,
        },
    })?;
    let cgroups = encoder.sampled_cgroups().clone();
    let (out, summary) = encoder.finish(loaded).map_err(encode_err)?;
    let bytes = out.finish().map_err(|source| SnapshotError::Write {
        path: path.clone(),
        source,
    })?;
    let synced = commit(new, target.dir, target.file_name, false, target.placed)?;
    Ok(WrittenSnapshot {
        path,
        bytes,
        summary,
        cgroups,
        elapsed: started.elapsed(),
        synced,
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
    let (written, synced) = put_file(&data, dir, name, access, true)?;
    Ok(WrittenSnapshot {
        path: path.into(),
        bytes: written,
        summary: data.summary,
        cgroups: Default::default(),
        elapsed: started.elapsed(),
        synced,
    })
}

/// Writes `data` under a temporary name in `dir` with `access`, then
/// renames it to `name` (replacing an existing file only if `replace`).
/// Returns the size and the time its commit took. Errors name the
/// snapshot, not the temporary file (removed on error).
fn put_file(
    data: &PerfData<'_>,
    dir: &Path,
    name: &str,
    access: Access,
    replace: bool,
) -> Result<(u64, Duration), SnapshotError> {
    let path = dir.join(name);
    let new = NewFile::create(dir, name, access).map_err(|source| SnapshotError::Create {
        path: path.clone(),
        source,
    })?;
    let write_err = |source| SnapshotError::Write {
        path: path.clone(),
        source,
    };
    let mut out = FileOutput::new(new.file());
    for segment in &data.segments {
        out.write(segment).map_err(write_err)?;
    }
    let len = out.finish().map_err(write_err)?;
    let synced = commit(new, dir, name, replace, None)?;
    Ok((len, synced))
}

/// Syncs `new` (then `placed`) and renames it to `dir/name` (replacing an
/// existing file only if `replace`), then syncs the directory. Returns the
/// time that took.
fn commit(
    new: NewFile,
    dir: &Path,
    name: &str,
    replace: bool,
    placed: Option<&File>,
) -> Result<Duration, SnapshotError> {
    let started = Instant::now();
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
    Ok(started.elapsed())
}

/// A new file written with large `pwrite()`s at the end of what it
/// holds: pieces under [`WRITE_BYTES`] are gathered first.
///
/// Where the filesystem allows it, the file is written with direct I/O
/// (`O_DIRECT`), from page-aligned buffers of [`WRITE_BYTES`] the
/// records are copied into: a buffered write copies every byte into pages
/// of the page cache allocated for it, which cost the dump thread 56-70%
/// of its CPU time at 32 MiB per CPU (BENCHMARKS.md section 26), where a
/// copy into a reused buffer is a few milliseconds, and the sync before
/// the rename finds the data on the disk. A full buffer is handed to the
/// kernel ([`DirectWrites`], up to [`WRITES_IN_FLIGHT`] at once) and the
/// next one filled while the device writes it: written one after the
/// other, a 9 MB file spent half its time in writes with the encoding
/// between them (section 50). For the kernel to write them
/// asynchronously they must not extend the file, so its blocks are
/// reserved ahead ([`RESERVE_AHEAD`], `fallocate`) and the file cut to
/// its length at the end. The last partial block and the header (patched
/// last) are written through the page cache, after every write in flight
/// has finished.
/// Where direct I/O is refused (a filesystem without it, `EINVAL`), the
/// file is written through the page cache, and its write-back is started
/// as it grows (but for the first page, where the header goes last), so
/// the final sync has little left to do. Where AIO or the reservation is
/// refused, the direct writes are made one at a time.
pub struct FileOutput<'f> {
    file: &'f File,
    /// Bytes gathered, not written yet: they go at `written`.
    pending: Staging,
    /// Bytes written to the file, or handed to the kernel to write.
    written: u64,
    /// Where the write-back started so far ends (page cache only).
    written_back: u64,
    /// Written with `O_DIRECT`, a whole buffer at a time.
    direct: bool,
    /// Direct writes in flight; `None`: each write waits.
    in_flight: Option<DirectWrites<'f>>,
    /// Buffers back from the kernel, to fill again.
    spare: Vec<Vec<u8>>,
    /// The file's size as reserved ahead of the writes; cut back to
    /// `written` at the end.
    reserved: u64,
}

/// Direct writes the kernel holds at once while the dump thread fills
/// the next buffer. Two in flight wrote a 9 MB file no sooner than one
/// under load, and each more buffer is 256 more page faults a dump.
pub const WRITES_IN_FLIGHT: usize = 1;
/// How far past the end of a write the file's blocks are reserved: a
/// `fallocate` per 8 MiB written.
pub const RESERVE_AHEAD: u64 = 8 << 20;

/// A page-aligned buffer of [`WRITE_BYTES`], as direct I/O needs.
#[derive(Default)]
struct Staging {
    buf: Vec<u8>,
    /// Where the aligned part of `buf` starts.
    start: usize,
    len: usize,
}

impl Staging {
    fn new() -> Self {
        let page = crate::perf::page_size();
        Self::reuse(vec![0u8; WRITE_BYTES + page])
    }

    /// `buf` (made by [`Staging::new`]) empty again.
    fn reuse(buf: Vec<u8>) -> Self {
        let start = buf.as_ptr().align_offset(crate::perf::page_size());
        Self { buf, start, len: 0 }
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }

    fn room(&self) -> usize {
        WRITE_BYTES - self.len
    }

    /// Copies as much of `bytes` as fits; returns how much.
    fn fill(&mut self, bytes: &[u8]) -> usize {
        let n = bytes.len().min(self.room());
        let at = self.start + self.len;
        self.buf[at..at + n].copy_from_slice(&bytes[..n]);
        self.len += n;
        n
    }
}

impl<'f> FileOutput<'f> {
    fn new(file: &'f File) -> Self {
        let direct = set_direct(file, true).is_ok();
        let in_flight = if direct {
            DirectWrites::new(file, WRITES_IN_FLIGHT).ok()
        } else {
            None
        };
        Self {
            file,
            pending: Staging::new(),
            written: 0,
            written_back: crate::perf::page_size() as u64,
            direct,
            in_flight,
            spare: Vec::new(),
            reserved: 0,
        }
    }

    /// Bytes given so far (the file offset of the next byte).
    fn len(&self) -> u64 {
        self.written + self.pending.len as u64
    }

    fn write(&mut self, mut buf: &[u8]) -> io::Result<()> {
        if !self.direct && self.pending.len + buf.len() > WRITE_BYTES && buf.len() >= WRITE_BYTES {
            // Large enough to write from the caller's memory at once.
            self.write_pending()?;
            return self.put(buf);
        }
        while !buf.is_empty() {
            let n = self.pending.fill(buf);
            buf = &buf[n..];
            if self.pending.room() == 0 {
                self.write_pending()?;
            }
        }
        Ok(())
    }

    fn write_pending(&mut self) -> io::Result<()> {
        if self.pending.len == 0 {
            return Ok(());
        }
        let whole_pages = self.pending.len.is_multiple_of(crate::perf::page_size());
        if self.direct && self.in_flight.is_some() && whole_pages {
            return self.submit_pending();
        }
        let pending = std::mem::take(&mut self.pending);
        let put = self.put(pending.bytes());
        self.pending = pending;
        self.pending.len = 0;
        put
    }

    /// Hands what is gathered to the kernel to write, and gathers on in
    /// a free buffer. Where the blocks cannot be reserved or the kernel
    /// refuses the submission, the writes go on one at a time.
    fn submit_pending(&mut self) -> io::Result<()> {
        let end = self.written + self.pending.len as u64;
        if !self.reserve(end)? {
            self.stop_in_flight()?;
            return self.write_pending();
        }
        let next = self.free_buffer()?;
        let full = std::mem::replace(&mut self.pending, next);
        let range = full.start..full.start + full.len;
        let Some(in_flight) = self.in_flight.as_mut() else {
            unreachable!("submit_pending is called with writes in flight on");
        };
        match in_flight.submit(full.buf, range, self.written) {
            Ok(()) => {
                self.written = end;
                Ok(())
            }
            Err((buf, e)) => {
                tracing::debug!("AIO write refused ({e}); writing one buffer at a time");
                let next = std::mem::replace(&mut self.pending, Staging::reuse(buf));
                self.pending.len = full.len;
                self.spare.push(next.buf);
                self.stop_in_flight()?;
                self.write_pending()
            }
        }
    }

    /// An empty buffer: a spare, a new one while fewer than
    /// [`WRITES_IN_FLIGHT`] are in flight, or the first to come back.
    fn free_buffer(&mut self) -> io::Result<Staging> {
        if let Some(buf) = self.spare.pop() {
            return Ok(Staging::reuse(buf));
        }
        let done = match self.in_flight.as_mut() {
            Some(in_flight) if !in_flight.has_room() => in_flight.wait_one(),
            _ => None,
        };
        match done {
            Some(done) => Ok(Staging::reuse(self.landed(done)?)),
            None => Ok(Staging::new()),
        }
    }

    /// A finished write's buffer, once what it did not write (refused by
    /// direct I/O, or cut short) is written through the page cache.
    fn landed(&mut self, done: Done) -> io::Result<Vec<u8>> {
        let wrote = match done.result {
            Ok(n) if n >= done.range.len() => return Ok(done.buf),
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => 0,
            Err(e) => return Err(e),
        };
        use std::os::unix::fs::FileExt;
        self.direct_off()?;
        let rest = &done.buf[done.range.start + wrote..done.range.end];
        self.file.write_all_at(rest, done.offset + wrote as u64)?;
        Ok(done.buf)
    }

    /// Waits for every write in flight; from here on each write waits.
    /// The first error is returned once all have finished.
    fn stop_in_flight(&mut self) -> io::Result<()> {
        let mut first_error = None;
        while let Some(done) = self.in_flight.as_mut().and_then(DirectWrites::wait_one) {
            if let Err(e) = self.landed(done) {
                first_error.get_or_insert(e);
            }
        }
        self.in_flight = None;
        self.spare.clear();
        first_error.map_or(Ok(()), Err)
    }

    /// Reserves the file's blocks up to `end` (and [`RESERVE_AHEAD`]
    /// beyond, where there is room), so that writes below it do not
    /// extend the file. `false`: the filesystem has no reservation.
    fn reserve(&mut self, end: u64) -> io::Result<bool> {
        use nix::fcntl::{FallocateFlags, fallocate};
        if end <= self.reserved {
            return Ok(true);
        }
        let from = to_off(self.reserved)?;
        for want in [end + RESERVE_AHEAD, end] {
            match fallocate(
                self.file,
                FallocateFlags::empty(),
                from,
                to_off(want)? - from,
            ) {
                Ok(()) => {
                    self.reserved = want;
                    return Ok(true);
                }
                // Without the margin there may be room.
                Err(e) if is_disk_full_io(&e.into()) && want > end => continue,
                Err(e) if is_disk_full_io(&e.into()) => return Err(e.into()),
                Err(_) => return Ok(false),
            }
        }
        Ok(false)
    }

    /// Writes `buf` at the end of the file. With direct I/O a refusal
    /// (`EINVAL`: the filesystem, or a partial last block) turns it off
    /// and the same bytes go through the page cache. Through the page
    /// cache, the write-back of the whole pages written since the last
    /// start is started once they make a piece worth it.
    fn put(&mut self, buf: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        if self.direct && !buf.len().is_multiple_of(crate::perf::page_size()) {
            self.leave_direct()?;
        }
        if self.direct {
            match self.file.write_all_at(buf, self.written) {
                Ok(()) => {
                    self.written += buf.len() as u64;
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.leave_direct()?,
                Err(e) => return Err(e),
            }
        }
        self.file.write_all_at(buf, self.written)?;
        self.written += buf.len() as u64;
        let page = crate::perf::page_size() as u64;
        let end = self.written / page * page;
        if end >= self.written_back + WRITE_BYTES as u64 {
            // An advice: declined, the final sync writes it all.
            let _ = nix::fcntl::posix_fadvise(
                self.file,
                to_off(self.written_back)?,
                to_off(end - self.written_back)?,
                nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
            );
            self.written_back = end;
        }
        Ok(())
    }

    /// From here on through the page cache (where the write-back of what
    /// direct I/O wrote needs no start), once the writes in flight have
    /// finished.
    fn leave_direct(&mut self) -> io::Result<()> {
        self.stop_in_flight()?;
        self.direct_off()
    }

    /// Turns `O_DIRECT` off for the writes made from here on.
    fn direct_off(&mut self) -> io::Result<()> {
        if self.direct {
            set_direct(self.file, false)?;
            self.direct = false;
            self.written_back = self.written_back.max(self.written);
        }
        Ok(())
    }

    /// Writes what is gathered, waits for the writes in flight and cuts
    /// the reservation back; returns the file's length.
    fn finish(mut self) -> io::Result<u64> {
        self.write_pending()?;
        self.stop_in_flight()?;
        if self.reserved > self.written {
            self.file.set_len(self.written)?;
        }
        Ok(self.written)
    }
}

/// A file offset as the kernel's calls take it.
fn to_off(v: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(v).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))
}

/// Turns `O_DIRECT` on or off for `file`'s open file description.
fn set_direct(file: &File, on: bool) -> io::Result<()> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = OFlag::from_bits_truncate(fcntl(file, FcntlArg::F_GETFL)?);
    let flags = if on {
        flags | OFlag::O_DIRECT
    } else {
        flags - OFlag::O_DIRECT
    };
    fcntl(file, FcntlArg::F_SETFL(flags))?;
    Ok(())
}

impl Sink for FileOutput<'_> {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write(bytes)
    }

    /// Bytes already given: in the file, or still gathered.
    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let end = offset + bytes.len() as u64;
        if end > self.len() {
            return Err(io::Error::other("writing past the end of the output"));
        }
        let in_file = usize::try_from(self.written.saturating_sub(offset))
            .map_or(bytes.len(), |n| n.min(bytes.len()));
        if in_file > 0 {
            // A patch (the header) is small and unaligned.
            self.leave_direct()?;
            self.file.write_all_at(&bytes[..in_file], offset)?;
        }
        let rest = &bytes[in_file..];
        if !rest.is_empty() {
            let at = usize::try_from(offset + in_file as u64 - self.written)
                .map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
            self.pending.bytes_mut()[at..at + rest.len()].copy_from_slice(rest);
        }
        Ok(())
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
    fn file_output_gathers_small_pieces_writes_large_ones_and_patches_anywhere() {
        // Direct I/O (where the temporary directory's filesystem has it),
        // then through the page cache.
        for direct in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("out");
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .unwrap();
            let mut out = FileOutput::new(&file);
            if !direct {
                out.leave_direct().unwrap();
            } else if !out.direct {
                eprintln!("{}: no direct I/O on this filesystem", dir.path().display());
                continue;
            }
            let small: Vec<u8> = (0..=255u8).cycle().take(3001).collect();
            let large: Vec<u8> = (0..=250u8).cycle().take(WRITE_BYTES * 3 + 17).collect();
            let mut want = Vec::new();
            for piece in [&small, &large, &small, &small, &large, &small] {
                out.append(piece).unwrap();
                want.extend_from_slice(piece);
            }
            // Whole buffers went to the file as they filled, with direct
            // I/O in flight ahead of the file's reserved end.
            assert_eq!(out.direct, direct);
            if direct {
                assert!(
                    out.in_flight.is_some(),
                    "direct writes were made one at a time"
                );
                assert!(
                    out.reserved > out.written && out.reserved >= RESERVE_AHEAD,
                    "{}",
                    out.reserved
                );
            }
            assert!(out.written >= (WRITE_BYTES * 6) as u64, "{}", out.written);
            // A header over what is in the file, and a patch across the
            // end of the file into what is still gathered.
            out.write_at(0, b"HEADER").unwrap();
            want[..6].copy_from_slice(b"HEADER");
            let edge = out.written - 3;
            out.write_at(edge, b"ACROSS").unwrap();
            want[edge as usize..edge as usize + 6].copy_from_slice(b"ACROSS");
            assert!(out.write_at(want.len() as u64 - 2, b"PAST").is_err());
            let len = out.finish().unwrap();
            assert_eq!(len, want.len() as u64);
            assert!(std::fs::read(&path).unwrap() == want, "direct: {direct}");
        }
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
            scope: None,
        };
        let capture = synthetic_capture(&SyntheticSpec::default());
        let results: Vec<_> = ["a.data", "b.data", "a.data"]
            .iter()
            .map(|name| write_snapshot(&capture, &opts, dir.path(), name))
            .collect();
        assert_eq!(results[0].as_ref().unwrap().summary.samples, 400);
        let first = std::fs::read(dir.path().join("a.data")).unwrap();
        let written = results[0].as_ref().unwrap();
        assert_eq!(first.len() as u64, written.bytes);
        // The syncs are timed, and are a part of the whole.
        assert!(
            written.synced > Duration::ZERO && written.synced <= written.elapsed,
            "{:?} of {:?}",
            written.synced,
            written.elapsed
        );
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
