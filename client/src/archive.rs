//! What perf users do next with a snapshot, done by snapctl with the
//! caller's own rights (the daemon reads and writes nothing for it):
//! - [`write_archive`]: a tarball of the snapshot and, addressed by
//!   build-id as perf's build-id cache lays them out, the files its samples
//!   need (`perf archive`), so it opens on another machine;
//! - [`write_plain_copy`]: a decompressed copy for readers without zstd.
//!
//! A snapshot may come from another host (`snapctl fleet fetch`): it is
//! read through `flightrec_perfdata::reader`'s checked [`FileLayout`],
//! streamed into the tarball rather than read whole, and decompressed a
//! piece at a time into the copy, within a limit on what it expands to.
//!
//! snapctl often runs as root, in directories others may write, on paths
//! the snapshot's processes chose. So the output is created exclusively
//! under an unpredictable temporary name and renamed into place without
//! replacing anything (unless `--force`), with the snapshot's own mode and
//! group, never readable by others when it holds the kernel's symbol
//! addresses; and a mapped file is read only if, opened without blocking or
//! following a link, it is a regular file, and only as long as its reads
//! answer within [`READ_DEADLINE`].

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use flightrec_files::{Access, Existing, Links, NewFile, open_regular};
use flightrec_perfdata::format::bit;
use flightrec_perfdata::reader::{
    self, BuildIdTableEntry, FileLayout, PlainFile, ReadError, default_limit,
};
use flightrec_report::SymbolSources;
use flightrec_report::symbols::debug_files;
use flightrec_report::symbols::debuginfod::Debuginfod;
use thiserror::Error;

/// Bytes copied at a time into an output.
const COPY_CHUNK: usize = 1 << 20;
/// A mapped file whose reads take longer than this is left out.
pub use flightrec_files::elf::READ_DEADLINE;
/// A mapped file larger than this is left out.
const MAX_FILE_BYTES: u64 = 4 << 30;

#[derive(Debug, Error)]
pub enum ArchiveError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: {source}", path.display())]
    Snapshot { path: PathBuf, source: ReadError },
    #[error("{} already exists; give another -o or --force to replace it", path.display())]
    Exists { path: PathBuf },
    #[error("{}: {}", path.display(), flightrec_report::too_large(*limit, *file_len, *given))]
    TooLarge {
        path: PathBuf,
        limit: u64,
        file_len: u64,
        /// Whether the limit was `--max-decompressed`'s.
        given: bool,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ArchiveError + '_ {
    move |source| ArchiveError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What an archive holds besides the snapshot, and how it is written.
#[derive(Debug, Clone)]
pub struct ArchiveOptions {
    /// The running kernel's /proc/kallsyms, for kernel symbols (the
    /// archive is then never readable by others).
    pub kallsyms: bool,
    /// Replace an existing output file.
    pub force: bool,
    /// Where debug files not on this machine are fetched from (None:
    /// nowhere).
    pub debuginfod: Option<Debuginfod>,
}

impl Default for ArchiveOptions {
    fn default() -> Self {
        ArchiveOptions {
            kallsyms: true,
            force: false,
            debuginfod: None,
        }
    }
}

/// What went into an archive.
#[derive(Debug, Default)]
pub struct ArchiveSummary {
    /// `(name in the snapshot, build-id in hex, where its bytes came from)`.
    pub added: Vec<(String, String, PathBuf)>,
    /// Files of the build-id table found nowhere with that build-id, and
    /// files the snapshot's frames lie in that it has no build-id for
    /// (`PATH (no build-id recorded)`).
    pub missing: Vec<String>,
    pub bytes: u64,
    /// The mode the archive was given.
    pub mode: u32,
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// perf's build-id cache name: `.build-id/<2 hex>/<rest>/<basename>`.
pub fn cache_path(build_id_hex: &str, basename: &str) -> String {
    let (dir, rest) = build_id_hex.split_at(2.min(build_id_hex.len()));
    format!(".build-id/{dir}/{rest}/{basename}")
}

/// Candidates for the bytes of `filename` beyond its path: the same file
/// as mapped by running processes (`/proc/PID/map_files/RANGE`, which
/// still works when the file was deleted or replaced since, and needs
/// CAP_SYS_ADMIN), and the path inside each process's root (a
/// container's file, absent from this machine's tree). Each is taken
/// only if its build-id is the snapshot's.
fn mapped_copies() -> HashMap<String, Vec<(PathBuf, Links)>> {
    let mut out: HashMap<String, Vec<(PathBuf, Links)>> = HashMap::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        let name = p.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            continue;
        };
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        let root = proc_dir.join("root");
        for line in maps.lines() {
            let mut f = line.splitn(6, ' ');
            let (Some(range), Some(_), Some(_), Some(_), Some(_), Some(path)) =
                (f.next(), f.next(), f.next(), f.next(), f.next(), f.next())
            else {
                continue;
            };
            let path = path.trim_start();
            let path = path.strip_suffix(" (deleted)").unwrap_or(path);
            if let Some(relative) = path.strip_prefix('/') {
                let inside = root.join(relative);
                let copies = out.entry(path.to_string()).or_default();
                // Tried last to first: the kernel's own link first, the
                // root once per process (its maps of a file are
                // consecutive).
                if copies.last().is_none_or(|(c, _)| !c.starts_with(&proc_dir)) {
                    copies.push((inside, Links::Refuse));
                }
                copies.push((proc_dir.join("map_files").join(range), Links::Follow));
            }
        }
    }
    out
}

/// The running kernel's build-id, from /sys/kernel/notes.
fn running_kernel_build_id() -> Option<Vec<u8>> {
    flightrec_files::elf::build_id_in_notes(&std::fs::read("/sys/kernel/notes").ok()?)
}

/// Opens the snapshot the user named and reads where its parts lie.
fn open_snapshot(snapshot: &Path) -> Result<(File, Metadata, FileLayout), ArchiveError> {
    let (mut file, md) = open_regular(snapshot, Links::Follow).map_err(io_err(snapshot))?;
    let layout = FileLayout::read(&mut file).map_err(snapshot_err(snapshot))?;
    Ok((file, md, layout))
}

fn snapshot_err(path: &Path) -> impl FnOnce(ReadError) -> ArchiveError + '_ {
    move |source| ArchiveError::Snapshot {
        path: path.to_path_buf(),
        source,
    }
}

/// A reader of exactly `len` bytes: one that ends sooner is an error (a
/// file cut while it is copied), never a short tar entry.
struct Exactly<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Exactly<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the file ended {} bytes early", self.left),
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// The access of an output made from a snapshot with metadata `md`: its
/// mode (`others`: with the bits of other users kept) and its group when
/// this process may give files to that group, else the creator's group and
/// the owner's bits only.
pub(crate) fn access_like(md: &Metadata, others: bool) -> Access {
    let mut mode = md.mode() & if others { 0o666 } else { 0o660 };
    let gid = md.gid();
    let may_give = nix::unistd::geteuid().is_root()
        || nix::unistd::getegid().as_raw() == gid
        || nix::unistd::getgroups().is_ok_and(|g| g.iter().any(|g| g.as_raw() == gid));
    if !may_give {
        mode &= 0o600;
    }
    Access::new(mode, may_give.then_some(gid))
}

/// `dir` and file name of an output path.
pub(crate) fn split_output(out: &Path) -> Result<(&Path, &str), ArchiveError> {
    let name = out
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| ArchiveError::Io {
            path: out.to_path_buf(),
            source: io::Error::new(io::ErrorKind::InvalidInput, "not a file name"),
        })?;
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Ok((dir, name))
}

/// Gives `new` its final name (replacing only with `force`).
pub(crate) fn commit(new: NewFile, out: &Path, force: bool) -> Result<File, ArchiveError> {
    let existing = if force {
        Existing::Replace
    } else {
        Existing::Keep
    };
    new.commit(existing).map_err(|e| {
        let e = e.into_io();
        if e.kind() == io::ErrorKind::AlreadyExists {
            ArchiveError::Exists {
                path: out.to_path_buf(),
            }
        } else {
            io_err(out)(e)
        }
    })
}

/// A copy of the file at `path` (an anonymous temporary file) if it has
/// build-id `build_id`.
fn copy_if_build_id(path: &Path, links: Links, build_id: &[u8]) -> Option<File> {
    flightrec_files::elf::copy_if_build_id(path, links, build_id, MAX_FILE_BYTES)
}

/// Writes `out` (a tar file): the snapshot at `snapshot` as `NAME` and its
/// sidecar (the perf maps of its JIT code) beside it, and per build-id
/// table entry the file with that build-id under [`cache_path`] (`elf`;
/// its separate debug file, found as `snapctl report` finds it, as
/// `debug`; `kallsyms` for the running kernel, unless `opts.kallsyms` is
/// false). Extract it into a directory DIR and `perf --buildid-dir DIR
/// report -i NAME` (or `snapctl report --symfs DIR DIR/NAME`) resolves the
/// symbols of files since deleted, upgraded or absent.
pub fn write_archive(
    snapshot: &Path,
    out: &Path,
    opts: ArchiveOptions,
) -> Result<ArchiveSummary, ArchiveError> {
    let (mut file, md, layout) = open_snapshot(snapshot)?;
    // A file its readers would refuse is not packed for them.
    layout
        .check_contents(&mut file)
        .map_err(snapshot_err(snapshot))?;
    let build_ids = layout
        .read_feature(&mut file, bit::BUILD_ID)
        .map_err(snapshot_err(snapshot))?;
    let table = reader::build_id_entries(build_ids.as_deref().unwrap_or_default());
    let (dir, file_name) = split_output(out)?;
    // Kernel addresses (the KASLR base) are for the snapshot's readers only.
    let access = access_like(&md, !opts.kallsyms);
    let mut new = NewFile::create(dir, file_name, access).map_err(io_err(out))?;
    let tmp = new.temp_path().to_path_buf();
    let mut tar = tar::Builder::new(BufWriter::new(new.file_mut()));
    tar.mode(tar::HeaderMode::Deterministic);
    let name = snapshot.file_name().map_or_else(
        || "snapshot.perf.data".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    file.seek(SeekFrom::Start(0)).map_err(io_err(snapshot))?;
    append_exactly(&mut tar, &name, &mut file, layout.len, 0o640).map_err(io_err(&tmp))?;
    if let Some(side) = sidecar_of(snapshot) {
        let side_name = format!(".{}.meta", name.strip_suffix(".perf.data").unwrap_or(&name));
        append_bytes(&mut tar, &side_name, &side, 0o640).map_err(io_err(&tmp))?;
    }
    let debug_sources = SymbolSources {
        local_files: true,
        debuginfod: opts.debuginfod.clone(),
        ..SymbolSources::default()
    };

    let mut summary = ArchiveSummary {
        mode: access.mode,
        ..ArchiveSummary::default()
    };
    let mut copies: Option<HashMap<String, Vec<(PathBuf, Links)>>> = None;
    let mut stored = std::collections::HashSet::new();
    for BuildIdTableEntry {
        build_id, filename, ..
    } in table
    {
        let id_hex = hex(&build_id);
        if filename == "[kernel.kallsyms]" {
            let kallsyms = (opts.kallsyms
                && running_kernel_build_id().is_some_and(|k| k == build_id))
            .then(|| std::fs::read("/proc/kallsyms").ok())
            .flatten()
            // Hidden addresses (kptr_restrict) would mislead perf.
            .filter(|k| !k.starts_with(b"0000000000000000"));
            match kallsyms {
                Some(k) => {
                    append_bytes(&mut tar, &cache_path(&id_hex, "kallsyms"), &k, 0o600)
                        .map_err(io_err(&tmp))?;
                    summary
                        .added
                        .push((filename, id_hex, "/proc/kallsyms".into()));
                }
                None => summary.missing.push(filename),
            }
            continue;
        }
        // One copy per build-id (hard links share one file).
        if !filename.starts_with('/') || !stored.insert(id_hex.clone()) {
            continue;
        }
        // A name read from /proc/PID/maps after the file was deleted.
        let on_disk = filename.strip_suffix(" (deleted)").unwrap_or(&filename);
        let mut candidates = vec![(PathBuf::from(on_disk), Links::Refuse)];
        let found = loop {
            if let Some((c, links)) = candidates.pop() {
                if let Some(elf) = copy_if_build_id(&c, links, &build_id) {
                    let mut why = Vec::new();
                    let debug = debug_files::find(
                        &filename,
                        &build_id,
                        Some(&elf),
                        &debug_sources,
                        &mut why,
                    );
                    append_file(&mut tar, &cache_path(&id_hex, "elf"), elf, 0o644)
                        .map_err(io_err(&tmp))?;
                    if let Some(debug) = debug {
                        append_file(&mut tar, &cache_path(&id_hex, "debug"), debug.file, 0o644)
                            .map_err(io_err(&tmp))?;
                        summary.added.push((
                            format!("{filename} (debug)"),
                            id_hex.clone(),
                            debug.from,
                        ));
                    }
                    break Some(c);
                }
                continue;
            }
            // Only now scan the processes, once for the whole archive.
            let all = copies.get_or_insert_with(mapped_copies);
            match all.remove(on_disk) {
                Some(more) => candidates = more,
                None => break None,
            }
        };
        match found {
            Some(from) => summary.added.push((filename, id_hex, from)),
            None => {
                stored.remove(&id_hex);
                summary.missing.push(filename);
            }
        }
    }
    summary.missing.extend(without_build_id(snapshot));
    let mut w = tar.into_inner().map_err(io_err(&tmp))?;
    w.flush().map_err(io_err(&tmp))?;
    drop(w);
    let file = commit(new, out, opts.force)?;
    summary.bytes = file.metadata().map_err(io_err(out))?.len();
    Ok(summary)
}

/// The files the snapshot's frames lie in that it has no build-id for
/// (the archive cannot name them by one), each once, saying so. The
/// records are read whole for it; when they cannot be, the one entry says
/// why rather than the list going quiet.
fn without_build_id(snapshot: &Path) -> Vec<String> {
    use flightrec_report::model::FrameKey;
    let snap = match flightrec_report::load::read(snapshot, None) {
        Ok(snap) => snap,
        Err(e) => return vec![format!("(files without a build-id not listed: {e})")],
    };
    let mut files: Vec<String> = snap
        .frames
        .iter()
        .filter_map(|f| match f.key {
            FrameKey::User { map, .. } => snap.maps.get(map as usize),
            _ => None,
        })
        .filter(|m| m.build_id.is_none() && is_file(&m.path))
        .map(|m| format!("{} (no build-id recorded)", m.path))
        .collect();
    files.sort();
    files.dedup();
    files
}

/// Whether a mapping's name is a file's, not one of the names the kernel
/// and perf give anonymous memory (`//anon`, `/anon_hugepage`, `/SYSV…`,
/// `/dev/zero`), where JIT code lies.
fn is_file(path: &str) -> bool {
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    path.starts_with('/')
        && !path.starts_with("//")
        && !path.starts_with("/anon_hugepage")
        && !path.starts_with("/SYSV")
        && path != "/dev/zero"
}

/// The sidecar beside snapshot file `path` (its perf maps), if it is a
/// regular file (not followed as a link) of a sidecar's size.
fn sidecar_of(path: &Path) -> Option<Vec<u8>> {
    let name = path.file_name()?.to_str()?;
    let id = name.strip_suffix(".perf.data").unwrap_or(name);
    let side = path.with_file_name(flightrec_proto::sidecar::file_name(id));
    let (mut f, _) = open_regular(&side, Links::Refuse).ok()?;
    flightrec_files::untrusted::read_small(&mut f, flightrec_proto::sidecar::MAX_BYTES).ok()
}

/// Appends `len` bytes of `from` as `name`: a file that ends sooner is an
/// error, never a short entry.
fn append_exactly<W: Write>(
    tar: &mut tar::Builder<W>,
    name: &str,
    from: impl Read,
    len: u64,
    mode: u32,
) -> io::Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_size(len);
    h.set_mode(mode);
    h.set_entry_type(tar::EntryType::Regular);
    tar.append_data(
        &mut h,
        name,
        Exactly {
            inner: from,
            left: len,
        },
    )
}

/// Appends the whole of `file` (a private copy: its length holds).
fn append_file<W: Write>(
    tar: &mut tar::Builder<W>,
    name: &str,
    mut file: File,
    mode: u32,
) -> io::Result<()> {
    let len = file.metadata()?.len();
    append_exactly(tar, name, &mut file, len, mode)
}

fn append_bytes<W: Write>(
    tar: &mut tar::Builder<W>,
    name: &str,
    bytes: &[u8],
    mode: u32,
) -> io::Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_size(bytes.len() as u64);
    h.set_mode(mode);
    h.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut h, name, bytes)
}

/// Writes a plain (uncompressed) copy of the compressed snapshot at
/// `snapshot` to `out`, with the snapshot's mode and group; returns its
/// size. The records may take at most `max_decompressed` bytes (default:
/// [`default_limit`] of the file's size), checked before `out` is
/// created; they are decompressed as they are written.
pub fn write_plain_copy(
    snapshot: &Path,
    out: &Path,
    force: bool,
    max_decompressed: Option<u64>,
) -> Result<u64, ArchiveError> {
    let (file, md, layout) = open_snapshot(snapshot)?;
    if !layout.is_compressed() {
        return Err(snapshot_err(snapshot)(ReadError::NotCompressed));
    }
    let limit = max_decompressed.unwrap_or_else(|| default_limit(md.len()));
    let read_err = |source| match source {
        ReadError::DecompressedTooLarge { limit } => ArchiveError::TooLarge {
            path: snapshot.to_path_buf(),
            limit,
            file_len: md.len(),
            given: max_decompressed.is_some(),
        },
        source => snapshot_err(snapshot)(source),
    };
    let mut plain = PlainFile::open(file, layout, limit).map_err(read_err)?;
    let (dir, file_name) = split_output(out)?;
    let mut new = NewFile::create(dir, file_name, access_like(&md, true)).map_err(io_err(out))?;
    let mut w = BufWriter::with_capacity(COPY_CHUNK, new.file_mut());
    let mut buf = vec![0u8; COPY_CHUNK];
    loop {
        let n = plain
            .read(&mut buf)
            .map_err(|e| read_err(ReadError::from_io(e)))?;
        if n == 0 {
            break;
        }
        w.write_all(&buf[..n]).map_err(io_err(out))?;
    }
    w.flush().map_err(io_err(out))?;
    drop(w);
    commit(new, out, force)?;
    Ok(plain.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_paths_are_perfs() {
        assert_eq!(
            cache_path("04fb38d7d15da7689ab7aabdcf654a2e538b7ce6", "elf"),
            ".build-id/04/fb38d7d15da7689ab7aabdcf654a2e538b7ce6/elf"
        );
    }

    #[test]
    fn anonymous_memory_is_not_listed_as_a_file_without_a_build_id() {
        for anon in [
            "//anon",
            "/anon_hugepage (deleted)",
            "/SYSV00000000 (deleted)",
            "/dev/zero",
        ] {
            assert!(!is_file(anon), "{anon}");
        }
        for file in [
            "/usr/bin/true",
            "/tmp/a.out (deleted)",
            "/memfd:jit (deleted)",
        ] {
            assert!(is_file(file), "{file}");
        }
    }

    #[test]
    fn outputs_keep_the_snapshots_mode_and_never_others_with_kallsyms() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let snap = dir.path().join("s");
        std::fs::write(&snap, b"x").unwrap();
        std::fs::set_permissions(&snap, std::fs::Permissions::from_mode(0o644)).unwrap();
        let md = std::fs::metadata(&snap).unwrap();
        // Our own group: we may give it.
        assert_eq!(access_like(&md, true), Access::new(0o644, Some(md.gid())));
        assert_eq!(access_like(&md, false), Access::new(0o640, Some(md.gid())));
        std::fs::set_permissions(&snap, std::fs::Permissions::from_mode(0o600)).unwrap();
        let md = std::fs::metadata(&snap).unwrap();
        assert_eq!(access_like(&md, true).mode, 0o600);
    }

    #[test]
    fn a_fifo_at_a_mapped_path_is_passed_over_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("lib.so");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let started = std::time::Instant::now();
        assert!(copy_if_build_id(&fifo, Links::Refuse, &[1; 20]).is_none());
        assert!(copy_if_build_id(&fifo, Links::Follow, &[1; 20]).is_none());
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }
}
