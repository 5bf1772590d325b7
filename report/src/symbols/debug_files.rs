//! A mapped file's separate debug file, where gdb and perf look for one,
//! used only if its build-id is the file's:
//!
//! 1. a build-id cache given with `--symfs` (`.build-id/xx/rest/debug`, as
//!    `snapctl archive` and perf's `~/.debug` keep them);
//! 2. `/usr/lib/debug/.build-id/xx/rest.debug` (Debian's `-dbg` and
//!    `-dbgsym` packages, Fedora's `debuginfo`), under each `--symfs` root
//!    and on this machine;
//! 3. the name in the file's `.gnu_debuglink`: beside the file, in its
//!    `.debug/` directory, and under `/usr/lib/debug` + its directory;
//! 4. a debuginfod server, when one was asked for.
//!
//! The files found are copied (bounded, with a deadline, like the mapped
//! files themselves) into anonymous temporary files. Without any, a file's
//! MiniDebugInfo ([`mini_debuginfo`]: an xz-compressed ELF file of the
//! function symbols `strip` removed, in its `.gnu_debugdata` section, as
//! Fedora ships its binaries) still names its local functions.

use std::fs::File;
use std::path::{Path, PathBuf};

use flightrec_files::Links;
use flightrec_files::elf::copy_if_build_id;

use super::debuginfod::Artifact;
use super::{SymbolSources, cache_entries, elf_layout, hex};

/// Largest debug file read.
const MAX_DEBUG_BYTES: u64 = 4 << 30;
/// Largest `.gnu_debugdata` section read.
const MAX_MINI_PACKED: usize = 64 << 20;
/// Largest MiniDebugInfo once decompressed.
const MAX_MINI_BYTES: u64 = 256 << 20;
/// Where distributions install debug files.
pub const DEBUG_DIR: &str = "/usr/lib/debug";

/// A debug file found for a mapped file.
#[derive(Debug)]
pub struct DebugFile {
    /// A private copy.
    pub file: File,
    /// Where it was found (a path, or the debuginfod cache's).
    pub from: PathBuf,
}

/// The debug file of the file at `path` with `build_id`, `binary` being a
/// copy of that file when one was found (for its `.gnu_debuglink`). A
/// debuginfod fetch that failed adds its reason to `why`.
pub fn find(
    path: &str,
    build_id: &[u8],
    binary: Option<&File>,
    sources: &SymbolSources,
    why: &mut Vec<String>,
) -> Option<DebugFile> {
    let link = binary.and_then(elf_layout::debuglink);
    let on_disk = path.strip_suffix(" (deleted)").unwrap_or(path);
    for (candidate, links) in candidates(on_disk, build_id, link.as_deref(), sources) {
        if let Some(file) = copy_if_build_id(&candidate, links, build_id, MAX_DEBUG_BYTES) {
            return Some(DebugFile {
                file,
                from: candidate,
            });
        }
    }
    let debuginfod = sources.debuginfod.as_ref()?;
    match debuginfod.fetch(&hex(build_id), Artifact::Debuginfo) {
        Ok(cached) => match copy_if_build_id(&cached, Links::Follow, build_id, MAX_DEBUG_BYTES) {
            Some(file) => Some(DebugFile { file, from: cached }),
            None => {
                why.push(format!(
                    "debuginfod: {} is not a file with this build-id",
                    cached.display()
                ));
                None
            }
        },
        Err(e) => {
            why.push(format!("debuginfod: {e}"));
            None
        }
    }
}

/// The MiniDebugInfo of `binary` (a copy of a mapped file), decompressed
/// into an anonymous temporary file; `None` without one, or when it is
/// not xz or decompresses past [`MAX_MINI_BYTES`].
pub fn mini_debuginfo(binary: &File) -> Option<File> {
    use std::io::{Seek, Write};
    let packed = elf_layout::section(binary, b".gnu_debugdata", MAX_MINI_PACKED)?;
    let mut out = Bounded {
        inner: std::io::BufWriter::new(tempfile::tempfile().ok()?),
        left: MAX_MINI_BYTES,
    };
    lzma_rs::xz_decompress(&mut &packed[..], &mut out).ok()?;
    let mut file = out.inner.into_inner().ok()?;
    file.flush().ok()?;
    file.rewind().ok()?;
    Some(file)
}

/// A writer that refuses to take more than `left` bytes.
struct Bounded<W> {
    inner: W,
    left: u64,
}

impl<W: std::io::Write> std::io::Write for Bounded<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() as u64 > self.left {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "MiniDebugInfo larger than allowed",
            ));
        }
        let n = self.inner.write(buf)?;
        self.left -= n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The binary itself from debuginfod (`executable`), when the snapshot's
/// file is nowhere else.
pub fn fetch_executable(
    build_id: &[u8],
    sources: &SymbolSources,
    why: &mut Vec<String>,
) -> Option<File> {
    let debuginfod = sources.debuginfod.as_ref()?;
    match debuginfod.fetch(&hex(build_id), Artifact::Executable) {
        Ok(cached) => copy_if_build_id(&cached, Links::Follow, build_id, MAX_DEBUG_BYTES),
        Err(e) => {
            why.push(format!("debuginfod: {e}"));
            None
        }
    }
}

/// Where a debug file may lie, in order, with whether a final link may be
/// followed (in the directories of debug files, packages install links;
/// beside a mapped file, the directory is some process's choice).
fn candidates(
    path: &str,
    build_id: &[u8],
    link: Option<&str>,
    sources: &SymbolSources,
) -> Vec<(PathBuf, Links)> {
    let id = hex(build_id);
    let by_id = (id.len() > 2).then(|| {
        let (xx, rest) = id.split_at(2);
        format!("{DEBUG_DIR}/.build-id/{xx}/{rest}.debug")
    });
    let dir = Path::new(path).parent().unwrap_or(Path::new("/"));
    let mut roots: Vec<(PathBuf, bool)> = sources.symfs.iter().map(|d| (d.clone(), true)).collect();
    if sources.local_files {
        roots.push((PathBuf::from("/"), false));
    }
    let mut out = Vec::new();
    for dir_cache in &sources.symfs {
        out.extend(
            cache_entries(dir_cache, build_id)
                .into_iter()
                .filter(|p| p.file_name().is_some_and(|n| n == "debug"))
                .map(|p| (p, Links::Follow)),
        );
    }
    for (root, _) in &roots {
        if let Some(by_id) = &by_id {
            out.push((under(root, Path::new(by_id)), Links::Follow));
        }
    }
    if let Some(link) = link {
        for (root, symfs) in &roots {
            // Beside the file: a directory some process chose, on this
            // machine; in an unpacked archive, ours.
            let beside = if *symfs { Links::Follow } else { Links::Refuse };
            out.push((under(root, &dir.join(link)), beside));
            out.push((under(root, &dir.join(".debug").join(link)), beside));
            out.push((
                under(
                    root,
                    &Path::new(DEBUG_DIR)
                        .join(dir.strip_prefix("/").unwrap_or(dir))
                        .join(link),
                ),
                Links::Follow,
            ));
        }
    }
    out
}

/// `path` (absolute) under `root`.
fn under(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_files_are_looked_for_where_gdb_and_perf_look() {
        let sources = SymbolSources {
            symfs: vec!["/arch".into()],
            local_files: true,
            ..SymbolSources::default()
        };
        let got: Vec<String> = candidates(
            "/usr/bin/prog",
            &[0xab, 0xcd, 0xef],
            Some("prog.debug"),
            &sources,
        )
        .into_iter()
        .map(|(p, _)| p.display().to_string())
        .collect();
        assert_eq!(
            got,
            [
                "/arch/usr/lib/debug/.build-id/ab/cdef.debug",
                "/usr/lib/debug/.build-id/ab/cdef.debug",
                "/arch/usr/bin/prog.debug",
                "/arch/usr/bin/.debug/prog.debug",
                "/arch/usr/lib/debug/usr/bin/prog.debug",
                "/usr/bin/prog.debug",
                "/usr/bin/.debug/prog.debug",
                "/usr/lib/debug/usr/bin/prog.debug",
            ]
        );
    }
}
