//! Names for a snapshot's frames, resolved on the machine that reads it.
//!
//! A file's symbols are used only when its build-id is the one the snapshot
//! recorded (a rebuilt or upgraded library would give wrong names): from a
//! build-id cache (`--symfs DIR`, laid out as `snapctl archive` and perf's
//! `~/.debug` do), then the path itself. The kernel's come from a kallsyms
//! file (`--kallsyms`, an archive's, or /proc/kallsyms when the running
//! kernel has the snapshot's build-id), moved by the difference of the two
//! `_text` addresses when the kernel was booted again. What cannot be named
//! shows as its file and offset, never as a guess.
//!
//! The files are copied with the shared bounded, deadline-guarded reader (a
//! path in a snapshot is a path some process chose) into anonymous
//! temporary files, a piece at a time, that blazesym then reads by
//! descriptor.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use blazesym::MaybeDefault;
use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use flightrec_files::Links;
use flightrec_files::elf::copy_if_build_id;
use flightrec_perfdata::kallsyms::kallsyms_text;

use crate::model::{FrameKey, Snapshot};

/// Largest ELF file read for its symbols.
const MAX_ELF_BYTES: u64 = 2 << 30;
/// Largest kallsyms file read.
const MAX_KALLSYMS_BYTES: u64 = 256 << 20;

/// Where symbols may come from.
#[derive(Debug, Clone, Default)]
pub struct SymbolSources {
    /// Build-id caches or root directories (an unpacked `snapctl archive`,
    /// `~/.debug`).
    pub symfs: Vec<PathBuf>,
    /// A kallsyms file for the snapshot's kernel.
    pub kallsyms: Option<PathBuf>,
    /// Look at the paths themselves on this machine (off: only `symfs`).
    pub local_files: bool,
}

/// The name of each frame of a snapshot (indexed like `Snapshot::frames`).
#[derive(Debug, Clone, Default)]
pub struct Names {
    pub frames: Vec<FrameName>,
    /// Files (and the kernel) whose symbols were not found, with why.
    pub unresolved: Vec<Unresolved>,
}

/// A `--symfs` or `--kallsyms` that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NotUsed {
    /// `--symfs` or `--kallsyms`.
    pub option: &'static str,
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameName {
    /// The function, or `file+0xOFFSET` when it is not known.
    pub name: String,
    /// The function when it is known.
    pub function: Option<String>,
    /// The file's base name (`libc.so.6`, `[kernel.kallsyms]`).
    pub dso: String,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Unresolved {
    pub file: String,
    pub build_id: Option<String>,
    /// Frames of the snapshot in it.
    pub frames: u64,
    pub reason: String,
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A mapped file: its path and build-id.
type FileKey = (String, Option<Vec<u8>>);

/// Names every frame of `snap`.
pub fn resolve(snap: &Snapshot, sources: &SymbolSources) -> Names {
    let mut names: Vec<FrameName> = snap
        .frames
        .iter()
        .map(|f| unresolved_name(snap, f.key))
        .collect();
    let mut unresolved = Vec::new();
    let symbolizer = Symbolizer::new();

    // User frames, by file.
    let mut by_file: BTreeMap<FileKey, Vec<(usize, u64)>> = BTreeMap::new();
    let mut kernel_frames = Vec::new();
    for (i, f) in snap.frames.iter().enumerate() {
        match f.key {
            FrameKey::User { map, file_offset } => {
                let m = &snap.maps[map as usize];
                by_file
                    .entry((m.path.clone(), m.build_id.clone()))
                    .or_default()
                    .push((i, file_offset));
            }
            FrameKey::Kernel { addr } => kernel_frames.push((i, addr)),
            FrameKey::Unmapped { .. } => {}
        }
    }
    for ((path, build_id), frames) in by_file {
        let miss = |reason: &str| Unresolved {
            file: path.clone(),
            build_id: build_id.as_deref().map(hex),
            frames: frames.len() as u64,
            reason: reason.to_string(),
        };
        if path.starts_with('[') || !path.starts_with('/') {
            // [vdso], [anon:...], anonymous JIT code: no file to read.
            unresolved.push(miss("not a file"));
            continue;
        }
        let Some(build_id) = &build_id else {
            unresolved.push(miss("the snapshot has no build-id for it"));
            continue;
        };
        let Some(file) = find_elf(&path, build_id, sources) else {
            unresolved.push(miss("no file with this build-id"));
            continue;
        };
        let offsets: Vec<u64> = frames.iter().map(|(_, o)| *o).collect();
        let elf = Elf {
            debug_syms: false,
            ..Elf::new(fd_path(&file))
        };
        match symbolizer.symbolize(&Source::Elf(elf), Input::FileOffset(&offsets)) {
            Ok(syms) => name_frames(&mut names, &frames, syms),
            Err(e) => unresolved.push(miss(&format!("unreadable: {e}"))),
        }
    }
    if !kernel_frames.is_empty() {
        match kernel_source(snap, sources) {
            Ok((file, delta)) => {
                // Only the kernel's own text moves with a new boot; modules
                // load elsewhere, so theirs are named only on the same boot.
                let (movable, rest): (Vec<_>, Vec<_>) = kernel_frames
                    .iter()
                    .partition(|(_, addr)| delta == 0 || in_kernel_text(snap, *addr));
                let addrs: Vec<u64> = movable.iter().map(|(_, a)| a.wrapping_add(delta)).collect();
                let kernel = Kernel {
                    kallsyms: MaybeDefault::Some(fd_path(&file)),
                    vmlinux: MaybeDefault::None,
                    kaslr_offset: Some(0),
                    debug_syms: false,
                    ..Kernel::default()
                };
                match symbolizer.symbolize(&Source::Kernel(kernel), Input::AbsAddr(&addrs)) {
                    Ok(syms) => name_frames(&mut names, &movable, syms),
                    Err(e) => {
                        unresolved.push(kernel_miss(snap, kernel_frames.len(), &e.to_string()))
                    }
                }
                if !rest.is_empty() {
                    unresolved.push(kernel_miss(
                        snap,
                        rest.len(),
                        "modules of another boot of this kernel",
                    ));
                }
            }
            Err(reason) => unresolved.push(kernel_miss(snap, kernel_frames.len(), &reason)),
        }
    }
    Names {
        frames: names,
        unresolved,
    }
}

/// The sources given on the command line that cannot be used, with why:
/// a `--symfs` that is not a directory one can read, a `--kallsyms` that
/// is not a regular file (a FIFO, a device, a loop of links) or has no
/// `_text`. Checked whether or not the snapshot needs them, so a mistake
/// is said even when other sources (/proc/kallsyms) stand in.
pub fn not_used(sources: &SymbolSources) -> Vec<NotUsed> {
    let mut out = unusable_symfs(sources);
    if let Some(path) = &sources.kallsyms
        && let Err(reason) = read_kallsyms(path).and_then(|bytes| checked_kallsyms(&bytes))
    {
        out.push(NotUsed {
            option: "--kallsyms",
            path: path.display().to_string(),
            reason,
        });
    }
    out
}

/// The `_text` address of a kallsyms file, or why it has none.
fn checked_kallsyms(bytes: &[u8]) -> Result<u64, String> {
    kallsyms_text(bytes).ok_or_else(|| {
        "it has no _text symbol (addresses hidden by kptr_restrict, or not a kallsyms file)"
            .to_string()
    })
}

/// The `--symfs` directories that are not directories one can read.
fn unusable_symfs(sources: &SymbolSources) -> Vec<NotUsed> {
    sources
        .symfs
        .iter()
        .filter_map(|dir| {
            let reason = match std::fs::metadata(dir) {
                Ok(md) if md.is_dir() => match std::fs::read_dir(dir) {
                    Ok(_) => return None,
                    Err(e) => e.to_string(),
                },
                Ok(md) => format!(
                    "it is not a directory ({})",
                    flightrec_files::untrusted::kind(&md)
                ),
                Err(e) => e.to_string(),
            };
            Some(NotUsed {
                option: "--symfs",
                path: dir.display().to_string(),
                reason,
            })
        })
        .collect()
}

fn kernel_miss(snap: &Snapshot, frames: usize, reason: &str) -> Unresolved {
    Unresolved {
        file: "[kernel.kallsyms]".into(),
        build_id: snap.kernel_build_id.as_deref().map(hex),
        frames: frames as u64,
        reason: reason.to_string(),
    }
}

fn name_frames(names: &mut [FrameName], frames: &[(usize, u64)], syms: Vec<Symbolized>) {
    for ((i, _), sym) in frames.iter().zip(syms) {
        if let Symbolized::Sym(sym) = sym {
            let function = sym.name.to_string();
            names[*i].name = function.clone();
            names[*i].function = Some(function);
        }
    }
}

/// The name a frame has until its symbol is found.
fn unresolved_name(snap: &Snapshot, key: FrameKey) -> FrameName {
    match key {
        FrameKey::User { map, file_offset } => {
            let dso = basename(&snap.maps[map as usize].path).to_string();
            FrameName {
                name: format!("{dso}+0x{file_offset:x}"),
                function: None,
                dso,
            }
        }
        FrameKey::Kernel { addr } => {
            let (dso, base) = kernel_map_of(snap, addr);
            FrameName {
                name: format!("{dso}+0x{:x}", addr.wrapping_sub(base)),
                function: None,
                dso,
            }
        }
        FrameKey::Unmapped { addr } => FrameName {
            name: format!("[unknown] 0x{addr:x}"),
            function: None,
            dso: "[unknown]".into(),
        },
    }
}

/// The kernel map (the kernel or a module) holding `addr`, as a name and
/// the address offsets count from.
fn kernel_map_of(snap: &Snapshot, addr: u64) -> (String, u64) {
    let map = snap
        .kernel_maps
        .range(..=addr)
        .next_back()
        .map(|(_, m)| &snap.maps[*m as usize])
        .filter(|m| addr < m.end);
    match map {
        Some(m) if !m.path.starts_with("[kernel.kallsyms]") => {
            (format!("[{}]", basename(&m.path)), m.start)
        }
        _ => ("[kernel.kallsyms]".into(), snap.kernel_text.unwrap_or(0)),
    }
}

fn in_kernel_text(snap: &Snapshot, addr: u64) -> bool {
    kernel_map_of(snap, addr).0 == "[kernel.kallsyms]"
}

/// A path blazesym opens to read `file`'s bytes.
fn fd_path(file: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// An anonymous temporary file holding `bytes`.
fn anonymous(bytes: &[u8]) -> Option<File> {
    let mut f = tempfile::tempfile().ok()?;
    f.write_all(bytes).ok()?;
    f.rewind().ok()?;
    Some(f)
}

/// The build-id cache entries for `build_id` under `dir`: perf's
/// `.build-id/xx/rest` is a file, or (in `snapctl archive`'s layout and
/// perf's `~/.debug`) a directory of files.
fn cache_entries(dir: &Path, build_id: &[u8]) -> Vec<PathBuf> {
    let id = hex(build_id);
    let (xx, rest) = id.split_at(2.min(id.len()));
    let entry = dir.join(".build-id").join(xx).join(rest);
    if entry.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&entry)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        files.sort();
        files
    } else {
        vec![entry]
    }
}

/// A copy of the ELF file `path` with `build_id`.
fn find_elf(path: &str, build_id: &[u8], sources: &SymbolSources) -> Option<File> {
    let mut candidates: Vec<(PathBuf, Links)> = Vec::new();
    for dir in &sources.symfs {
        for c in cache_entries(dir, build_id) {
            candidates.push((c, Links::Follow));
        }
        candidates.push((dir.join(path.trim_start_matches('/')), Links::Follow));
    }
    if sources.local_files {
        let on_disk = path.strip_suffix(" (deleted)").unwrap_or(path);
        candidates.push((PathBuf::from(on_disk), Links::Refuse));
    }
    candidates
        .into_iter()
        .find_map(|(c, links)| copy_if_build_id(&c, links, build_id, MAX_ELF_BYTES))
}

/// A kallsyms file for the snapshot's kernel, and what to add to the
/// snapshot's kernel addresses to find them in it: `--kallsyms`, then an
/// archive's, then /proc/kallsyms when this is the snapshot's kernel.
/// Without any, why, naming each file tried.
fn kernel_source(snap: &Snapshot, sources: &SymbolSources) -> Result<(File, u64), String> {
    let mut candidates: Vec<PathBuf> = sources.kallsyms.iter().cloned().collect();
    if let Some(id) = &snap.kernel_build_id {
        for dir in &sources.symfs {
            candidates.extend(
                cache_entries(dir, id)
                    .into_iter()
                    .filter(|p| p.file_name().is_some_and(|n| n == "kallsyms")),
            );
        }
    }
    let running = std::fs::read("/sys/kernel/notes")
        .ok()
        .and_then(|n| flightrec_files::elf::build_id_in_notes(&n));
    let same_kernel = running.is_some() && running == snap.kernel_build_id;
    if sources.local_files && same_kernel {
        candidates.push("/proc/kallsyms".into());
    }
    if candidates.is_empty() {
        return Err(if snap.kernel_build_id.is_none() {
            "the snapshot has no kernel build-id".into()
        } else {
            "no kallsyms for this kernel (running another kernel; give --kallsyms or --symfs)"
                .into()
        });
    }
    let mut why = Vec::new();
    for c in candidates {
        let checked =
            read_kallsyms(&c).and_then(|bytes| checked_kallsyms(&bytes).map(|text| (bytes, text)));
        match checked {
            Ok((bytes, text)) => {
                let delta = snap.kernel_text.map_or(0, |t| text.wrapping_sub(t));
                let file = anonymous(&bytes).ok_or_else(|| "no temporary file".to_string())?;
                return Ok((file, delta));
            }
            Err(reason) => why.push(format!("{}: {reason}", c.display())),
        }
    }
    Err(why.join("; "))
}

/// The first [`MAX_KALLSYMS_BYTES`] of the kallsyms file at `path`, if it
/// is a regular file (not a FIFO or device, which could block or never
/// end; a link is followed, a loop of them refused).
fn read_kallsyms(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let (file, _) =
        flightrec_files::open_regular(path, Links::Follow).map_err(|e| match e.kind() {
            // open_regular names the path and what the file is.
            std::io::ErrorKind::InvalidInput => e
                .to_string()
                .strip_prefix(&path.display().to_string())
                .map_or_else(|| e.to_string(), |rest| format!("it{rest}")),
            _ => e.to_string(),
        })?;
    let mut bytes = Vec::new();
    file.take(MAX_KALLSYMS_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Frame, MapInfo};

    fn snap_with_user_frame(path: &str, build_id: Option<Vec<u8>>) -> Snapshot {
        Snapshot {
            maps: vec![MapInfo {
                path: path.into(),
                build_id,
                start: 0x1000,
                end: 0x9000,
                pgoff: 0,
            }],
            frames: vec![Frame {
                key: FrameKey::User {
                    map: 0,
                    file_offset: 0x1234,
                },
                addr: 0x2234,
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn a_file_without_a_build_id_in_the_snapshot_is_named_by_offset_only() {
        // /bin/sh exists here, but with no build-id to check it against,
        // its symbols could be another build's.
        let snap = snap_with_user_frame("/bin/sh", None);
        let sources = SymbolSources {
            local_files: true,
            ..SymbolSources::default()
        };
        let names = resolve(&snap, &sources);
        assert_eq!(names.frames[0].name, "sh+0x1234");
        assert_eq!(names.frames[0].function, None);
        assert_eq!(
            names.unresolved[0].reason,
            "the snapshot has no build-id for it"
        );
    }

    #[test]
    fn a_file_whose_build_id_differs_is_not_used() {
        let snap = snap_with_user_frame("/bin/sh", Some(vec![0xab; 20]));
        let sources = SymbolSources {
            local_files: true,
            ..SymbolSources::default()
        };
        let names = resolve(&snap, &sources);
        assert_eq!(names.frames[0].name, "sh+0x1234");
        assert_eq!(names.unresolved[0].reason, "no file with this build-id");
        assert_eq!(
            names.unresolved[0].build_id.as_deref(),
            Some(&"ab".repeat(20)[..])
        );
    }

    #[test]
    fn kernel_frames_are_named_from_a_kallsyms_moved_to_another_boot() {
        let dir = tempfile::tempdir().unwrap();
        let kallsyms = dir.path().join("kallsyms");
        // The file's boot put _text 0x200000 higher than the snapshot's.
        std::fs::write(
            &kallsyms,
            "ffffffff81200000 T _text\nffffffff81200000 T startup_64\n\
             ffffffff81300000 T schedule\nffffffff81300100 T pipe_read\n",
        )
        .unwrap();
        let snap = Snapshot {
            kernel_text: Some(0xffff_ffff_8100_0000),
            maps: vec![MapInfo {
                path: "[kernel.kallsyms]_text".into(),
                build_id: None,
                start: 0xffff_ffff_8100_0000,
                end: u64::MAX,
                pgoff: 0xffff_ffff_8100_0000,
            }],
            kernel_maps: [(0xffff_ffff_8100_0000, 0)].into_iter().collect(),
            frames: vec![Frame {
                key: FrameKey::Kernel {
                    addr: 0xffff_ffff_8110_0010,
                },
                addr: 0xffff_ffff_8110_0010,
            }],
            ..Snapshot::default()
        };
        let sources = SymbolSources {
            kallsyms: Some(kallsyms),
            ..SymbolSources::default()
        };
        let names = resolve(&snap, &sources);
        assert_eq!(names.frames[0].function.as_deref(), Some("schedule"));
        assert!(names.unresolved.is_empty(), "{:?}", names.unresolved);
    }

    #[test]
    fn without_kallsyms_kernel_frames_show_their_offset_from_text() {
        let snap = Snapshot {
            kernel_text: Some(0xffff_ffff_8100_0000),
            frames: vec![Frame {
                key: FrameKey::Kernel {
                    addr: 0xffff_ffff_8100_0042,
                },
                addr: 0xffff_ffff_8100_0042,
            }],
            ..Snapshot::default()
        };
        let names = resolve(&snap, &SymbolSources::default());
        assert_eq!(names.frames[0].name, "[kernel.kallsyms]+0x42");
        assert_eq!(names.unresolved.len(), 1);
    }
}
