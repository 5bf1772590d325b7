//! What perf users do next with a snapshot, done by snapctl with the
//! caller's own rights (the daemon reads and writes nothing for it):
//! - [`write_archive`]: a tarball of the snapshot and, addressed by
//!   build-id as perf's build-id cache lays them out, the files its samples
//!   need (`perf archive`), so it opens on another machine;
//! - [`write_plain_copy`]: a decompressed copy for readers without zstd.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use flightrecd::snapshot::reader::{self, BuildIdTableEntry, ReadError};
use flightrecd::tracking::build_id::elf_build_id;
use thiserror::Error;

/// Largest decompressed data section [`write_plain_copy`] writes.
const MAX_PLAIN_BYTES: u64 = 64 << 30;

#[derive(Debug, Error)]
pub enum ArchiveError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: {source}", path.display())]
    Snapshot { path: PathBuf, source: ReadError },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ArchiveError + '_ {
    move |source| ArchiveError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What went into an archive.
#[derive(Debug, Default)]
pub struct ArchiveSummary {
    /// `(name in the snapshot, build-id in hex, where its bytes came from)`.
    pub added: Vec<(String, String, PathBuf)>,
    /// Files of the build-id table found nowhere with that build-id.
    pub missing: Vec<String>,
    pub bytes: u64,
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
/// as mapped by running processes (`/proc/PID/map_files/RANGE`), which
/// still works when the file was deleted or replaced since.
fn mapped_copies() -> HashMap<String, Vec<PathBuf>> {
    let mut out: HashMap<String, Vec<PathBuf>> = HashMap::new();
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
        for line in maps.lines() {
            let mut f = line.splitn(6, ' ');
            let (Some(range), Some(_), Some(_), Some(_), Some(_), Some(path)) =
                (f.next(), f.next(), f.next(), f.next(), f.next(), f.next())
            else {
                continue;
            };
            let path = path.trim_start();
            let path = path.strip_suffix(" (deleted)").unwrap_or(path);
            if path.starts_with('/') {
                out.entry(path.to_string())
                    .or_default()
                    .push(format!("/proc/{pid}/map_files/{range}").into());
            }
        }
    }
    out
}

/// The running kernel's build-id, from /sys/kernel/notes.
fn running_kernel_build_id() -> Option<Vec<u8>> {
    flightrecd::recorder::host::parse_build_id_note(&std::fs::read("/sys/kernel/notes").ok()?)
}

/// Writes `out` (a tar file): the snapshot at `snapshot` as `NAME`, and
/// per build-id table entry the file with that build-id under
/// [`cache_path`] (`elf`; `kallsyms` for the running kernel). Extract it
/// into a directory DIR and `perf --buildid-dir DIR report -i NAME`
/// resolves the symbols of files since deleted, upgraded or absent.
pub fn write_archive(snapshot: &Path, out: &Path) -> Result<ArchiveSummary, ArchiveError> {
    let bytes = std::fs::read(snapshot).map_err(io_err(snapshot))?;
    let table = reader::build_id_table(&bytes).map_err(|source| ArchiveError::Snapshot {
        path: snapshot.to_path_buf(),
        source,
    })?;
    let tmp = out.with_extension("tar.tmp");
    let file = File::create(&tmp).map_err(io_err(&tmp))?;
    let mut tar = tar::Builder::new(io::BufWriter::new(file));
    tar.mode(tar::HeaderMode::Deterministic);
    let name = snapshot.file_name().map_or_else(
        || "snapshot.perf.data".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    append_bytes(&mut tar, &name, &bytes).map_err(io_err(&tmp))?;

    let mut summary = ArchiveSummary::default();
    let mut copies: Option<HashMap<String, Vec<PathBuf>>> = None;
    let mut stored = std::collections::HashSet::new();
    for BuildIdTableEntry {
        build_id, filename, ..
    } in table
    {
        let id_hex = hex(&build_id);
        if filename == "[kernel.kallsyms]" {
            let kallsyms = running_kernel_build_id()
                .filter(|k| *k == build_id)
                .and_then(|_| std::fs::read("/proc/kallsyms").ok())
                // Hidden addresses (kptr_restrict) would mislead perf.
                .filter(|k| !k.starts_with(b"0000000000000000"));
            match kallsyms {
                Some(k) => {
                    append_bytes(&mut tar, &cache_path(&id_hex, "kallsyms"), &k)
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
        let mut candidates = vec![PathBuf::from(on_disk)];
        let found = loop {
            if let Some(c) = candidates.pop() {
                if let Ok(mut f) = File::open(&c)
                    && elf_build_id(&f).is_some_and(|id| id.as_bytes() == build_id)
                {
                    tar.append_file(cache_path(&id_hex, "elf"), &mut f)
                        .map_err(io_err(&tmp))?;
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
    let mut w = tar.into_inner().map_err(io_err(&tmp))?;
    w.flush().map_err(io_err(&tmp))?;
    let file = w.into_inner().map_err(|e| io_err(&tmp)(e.into_error()))?;
    file.sync_all().map_err(io_err(&tmp))?;
    summary.bytes = file.metadata().map_err(io_err(&tmp))?.len();
    std::fs::rename(&tmp, out).map_err(io_err(out))?;
    Ok(summary)
}

fn append_bytes<W: Write>(tar: &mut tar::Builder<W>, name: &str, bytes: &[u8]) -> io::Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_size(bytes.len() as u64);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut h, name, bytes)
}

/// Writes a plain (uncompressed) copy of the compressed snapshot at
/// `snapshot` to `out`; returns its size.
pub fn write_plain_copy(snapshot: &Path, out: &Path) -> Result<u64, ArchiveError> {
    let bytes = std::fs::read(snapshot).map_err(io_err(snapshot))?;
    let plain =
        reader::decompress(&bytes, MAX_PLAIN_BYTES).map_err(|source| ArchiveError::Snapshot {
            path: snapshot.to_path_buf(),
            source,
        })?;
    let tmp = out.with_extension("tmp");
    std::fs::write(&tmp, &plain).map_err(io_err(&tmp))?;
    std::fs::rename(&tmp, out).map_err(io_err(out))?;
    Ok(plain.len() as u64)
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
}
