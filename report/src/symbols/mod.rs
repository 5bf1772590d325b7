//! Names for a snapshot's frames, resolved on the machine that reads it.
//!
//! A file's symbols are used only when its build-id is the one the snapshot
//! recorded (a rebuilt or upgraded library would give wrong names): from a
//! build-id cache (`--symfs DIR`, laid out as `snapctl archive` and perf's
//! `~/.debug` do), then the path itself. A stripped file is named from its
//! separate debug file (by build-id or `.gnu_debuglink`, see
//! [`debug_files`], or from a debuginfod server when one is asked for,
//! [`debuginfod`]), whose DWARF also gives each frame its source line and
//! the functions inlined there. JIT code is named from the perf maps the
//! daemon kept with the snapshot ([`jit`]). The kernel's come from a
//! kallsyms file (`--kallsyms`, an archive's, or /proc/kallsyms when the
//! running kernel has the snapshot's build-id), moved by the difference of
//! the two `_text` addresses when the kernel was booted again. What cannot
//! be named shows as its file and offset, never as a guess, and the files
//! it lies in are listed with why.
//!
//! The files are copied with the shared bounded, deadline-guarded reader (a
//! path in a snapshot is a path some process chose) into anonymous
//! temporary files, a piece at a time, that blazesym then reads by
//! descriptor. Names are demangled here (Itanium C++ and Rust), never by
//! blazesym, which takes a C function called `a` for a mangled type.

pub mod debug_files;
pub mod debuginfod;
pub(crate) use flightrec_files::elf_layout;
pub mod jit;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use blazesym::MaybeDefault;
use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{CodeInfo, Input, Sym, Symbolized, Symbolizer};
use flightrec_files::Links;
use flightrec_files::elf::copy_if_build_id;
use flightrec_perfdata::kallsyms::kallsyms_text;

use crate::model::{FrameId, FrameKey, Snapshot};
use debuginfod::Debuginfod;
use jit::{JitMap, JitSymbols};

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
    /// Look at the paths themselves on this machine (off: only `symfs`),
    /// and at its debug files (`/usr/lib/debug`).
    pub local_files: bool,
    /// Debug files (and binaries) fetched by build-id; None: nothing is
    /// fetched.
    pub debuginfod: Option<Debuginfod>,
    /// The perf maps the daemon kept with the snapshot.
    pub jit_maps: Vec<JitMap>,
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

/// Where in the source a frame's address lies.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SourceLine {
    /// The source file as DWARF names it (its directory joined).
    pub file: String,
    pub line: Option<u32>,
}

/// A function inlined at a frame's address, with its own line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InlinedFrame {
    pub function: String,
    pub line: Option<SourceLine>,
}

/// What DWARF says of one frame beyond its function.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrameLines {
    /// The line in the frame's function (the call into the first inlined
    /// function, when there is one).
    pub line: Option<SourceLine>,
    /// Functions inlined at the address, outermost first (the last is
    /// where the address lies).
    pub inlined: Vec<InlinedFrame>,
}

/// Source lines and inlined functions of each frame (indexed like
/// `Snapshot::frames`; empty where DWARF says nothing).
#[derive(Debug, Clone, Default)]
pub struct Lines {
    pub frames: Vec<FrameLines>,
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
    resolve_with_lines(snap, sources).0
}

/// Names every frame of `snap`, with the source lines and inlined
/// functions DWARF gives them.
pub fn resolve_with_lines(snap: &Snapshot, sources: &SymbolSources) -> (Names, Lines) {
    let mut names: Vec<FrameName> = snap
        .frames
        .iter()
        .map(|f| unresolved_name(snap, f.key))
        .collect();
    let mut lines = Lines {
        frames: vec![FrameLines::default(); snap.frames.len()],
    };
    let mut unresolved = Vec::new();
    // Debug files give names and lines; blazesym looks for none itself
    // (they are found and checked by build-id here), and demangling is ours.
    let symbolizer = Symbolizer::builder()
        .enable_demangling(false)
        .set_debug_dirs(Some(Vec::<PathBuf>::new()))
        .build();
    let jit = JitSymbols::new(&sources.jit_maps);

    // User frames, by file.
    let mut by_file: BTreeMap<FileKey, Vec<(usize, u64)>> = BTreeMap::new();
    let mut kernel_frames = Vec::new();
    let mut unmapped = Vec::new();
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
            FrameKey::Unmapped { addr } => unmapped.push((i, addr)),
        }
    }
    let mut named = Named {
        names: &mut names,
        lines: &mut lines,
    };
    let pids = frame_pids(snap);
    // JIT code lies in anonymous maps (or none the snapshot names).
    let mut jit_frames: Vec<(usize, String)> = Vec::new();
    for ((path, build_id), frames) in by_file {
        let miss = |frames: usize, reason: &str| Unresolved {
            file: path.clone(),
            build_id: build_id.as_deref().map(hex),
            frames: frames as u64,
            reason: reason.to_string(),
        };
        if path.starts_with('[') || !path.starts_with('/') {
            // [vdso], [anon:...], anonymous JIT code: no file to read.
            jit_frames.extend(frames.iter().map(|&(i, _)| (i, "not a file".to_string())));
            continue;
        }
        let Some(build_id) = &build_id else {
            let why = "the snapshot has no build-id for it";
            jit_frames.extend(frames.iter().map(|&(i, _)| (i, why.to_string())));
            continue;
        };
        let file = FileToName {
            path: &path,
            build_id,
            holders: holders(&pids, &frames),
        };
        let left = resolve_file(&symbolizer, &file, &frames, sources, &mut named);
        if let Some((n, reason)) = left {
            unresolved.push(miss(n, &reason));
        }
    }
    if !jit.is_empty() {
        let mut still = Vec::new();
        for (i, reason) in jit_frames {
            match jit_name(snap, &jit, &pids, i) {
                Some((name, dso)) => {
                    named.names[i] = FrameName {
                        function: Some(name.clone()),
                        name,
                        dso,
                    }
                }
                None => still.push((i, reason)),
            }
        }
        jit_frames = still;
        for (i, _) in unmapped {
            if let Some((name, dso)) = jit_name(snap, &jit, &pids, i) {
                named.names[i] = FrameName {
                    function: Some(name.clone()),
                    name,
                    dso,
                };
            }
        }
    }
    // What stays unnamed outside files, by map and reason.
    let mut left: BTreeMap<(String, Option<String>, String), u64> = BTreeMap::new();
    for (i, reason) in jit_frames {
        if let FrameKey::User { map, .. } = snap.frames[i].key {
            let m = &snap.maps[map as usize];
            *left
                .entry((m.path.clone(), m.build_id.as_deref().map(hex), reason))
                .or_default() += 1;
        }
    }
    for ((file, build_id, reason), frames) in left {
        unresolved.push(Unresolved {
            file,
            build_id,
            frames,
            reason,
        });
    }
    unresolved.sort_by(|a, b| a.file.cmp(&b.file));
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
                    Ok(syms) => {
                        named.name(&movable, syms);
                    }
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
    (
        Names {
            frames: names,
            unresolved,
        },
        lines,
    )
}

/// Where names go as they are found.
struct Named<'a> {
    names: &'a mut [FrameName],
    lines: &'a mut Lines,
}

impl Named<'_> {
    /// Names `frames` (frame index, address asked) from `syms` (one per
    /// frame, in order); returns the frames left unnamed.
    fn name(&mut self, frames: &[(usize, u64)], syms: Vec<Symbolized>) -> Vec<(usize, u64)> {
        let mut left = Vec::new();
        for (&(i, addr), sym) in frames.iter().zip(syms) {
            match sym {
                Symbolized::Sym(sym) => self.set(i, &sym),
                Symbolized::Unknown(_) => left.push((i, addr)),
            }
        }
        left
    }

    fn set(&mut self, i: usize, sym: &Sym) {
        let function = demangle(&sym.name);
        self.names[i].name = function.clone();
        self.names[i].function = Some(function);
        self.lines.frames[i] = FrameLines {
            line: sym.code_info.as_deref().map(source_line),
            inlined: sym
                .inlined
                .iter()
                .map(|f| InlinedFrame {
                    function: demangle(&f.name),
                    line: f.code_info.as_ref().map(source_line),
                })
                .collect(),
        };
    }
}

fn source_line(c: &CodeInfo) -> SourceLine {
    let file = match &c.dir {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(&*c.file).display().to_string(),
        _ => Path::new(&*c.file).display().to_string(),
    };
    SourceLine { file, line: c.line }
}

/// A name as people read it: Rust (legacy and v0) and Itanium C++ names
/// demangled, anything else as it is (a C function called `a` stays `a`).
pub fn demangle(name: &str) -> String {
    if (name.starts_with("_R") || name.starts_with("_ZN"))
        && let Ok(d) = rustc_demangle::try_demangle(name)
    {
        return format!("{d:#}");
    }
    if name.starts_with("_Z")
        && let Ok(sym) = cpp_demangle::Symbol::new(name)
        && let Ok(d) = sym.demangle()
    {
        return d;
    }
    name.to_string()
}

/// Names the frames of the file at `path` with `build_id` (frame index,
/// file offset): from its debug file, then its own symbols. Returns how
/// many stay unnamed and why.
fn resolve_file(
    symbolizer: &Symbolizer,
    file: &FileToName,
    frames: &[(usize, u64)],
    sources: &SymbolSources,
    named: &mut Named,
) -> Option<(usize, String)> {
    let (path, build_id) = (file.path, file.build_id);
    let mut why = Vec::new();
    let binary = find_elf(file, sources)
        .or_else(|| debug_files::fetch_executable(build_id, sources, &mut why));
    let debug = debug_files::find(path, build_id, binary.as_ref(), sources, &mut why);
    let Some(binary) = binary else {
        let mut reason = "no file with this build-id".to_string();
        if debug.is_some() {
            reason.push_str(" (only its debug file, which cannot place the addresses)");
        }
        return Some((frames.len(), with_why(reason, &why)));
    };
    let mut left = frames.to_vec();
    let mut failed = Vec::new();
    // Without a debug file, the MiniDebugInfo inside the file (Fedora's):
    // its symbols, addressed like a debug file's.
    let debug = debug.or_else(|| {
        debug_files::mini_debuginfo(&binary).map(|file| debug_files::DebugFile {
            file,
            from: PathBuf::from(format!("{path} (.gnu_debugdata)")),
        })
    });
    if let Some(debug) = &debug {
        // The debug file is addressed as the binary's virtual addresses.
        let segments = elf_layout::LoadSegments::read(&binary).unwrap_or_default();
        let (placed, unplaced): (Vec<_>, Vec<_>) = left
            .iter()
            .map(|&(i, off)| (i, off, segments.virt_of(off)))
            .partition(|(_, _, v)| v.is_some());
        let virts: Vec<u64> = placed.iter().filter_map(|(_, _, v)| *v).collect();
        let placed: Vec<(usize, u64)> = placed.iter().map(|&(i, off, _)| (i, off)).collect();
        let elf = Elf {
            debug_syms: true,
            ..Elf::new(fd_path(&debug.file))
        };
        left = unplaced.iter().map(|&(i, off, _)| (i, off)).collect();
        match symbolizer.symbolize(&Source::Elf(elf), Input::VirtOffset(&virts)) {
            Ok(syms) => left.extend(named.name(&placed, syms)),
            Err(e) => {
                failed.push(format!("debug file {}: {e}", debug.from.display()));
                left.extend(placed);
            }
        }
    }
    if !left.is_empty() {
        let offsets: Vec<u64> = left.iter().map(|&(_, o)| o).collect();
        // Its own DWARF too, when it has some (a build with -g).
        let elf = Elf {
            debug_syms: true,
            ..Elf::new(fd_path(&binary))
        };
        match symbolizer.symbolize(&Source::Elf(elf), Input::FileOffset(&offsets)) {
            Ok(syms) => left = named.name(&left, syms),
            Err(e) => failed.push(format!("unreadable: {e}")),
        }
    }
    if left.is_empty() {
        return None;
    }
    let reason = match (&debug, failed.is_empty()) {
        (_, false) => failed.join("; "),
        (Some(d), true) => format!(
            "no symbol at these addresses in it or its debug file ({})",
            d.from.display()
        ),
        (None, true) => with_why(
            "no symbol at these addresses (a stripped file: no debug file with its build-id \
             under /usr/lib/debug or --symfs; --debuginfod URL fetches one)"
                .to_string(),
            &why,
        ),
    };
    Some((left.len(), reason))
}

fn with_why(reason: String, why: &[String]) -> String {
    if why.is_empty() {
        reason
    } else {
        format!("{reason}; {}", why.join("; "))
    }
}

/// The processes whose samples (on and off CPU) hold each user frame.
fn frame_pids(snap: &Snapshot) -> HashMap<usize, Vec<u32>> {
    // Each (process, stack) and each (frame, process) once: a window of
    // minutes on a busy machine holds thousands of processes, all with
    // libc's frames, and a list searched per frame and sample made this
    // quadratic (over 20 minutes for a 10-minute window in a debug build;
    // a release build hid it). Kernel frames are
    // neither in a file a process holds nor in a perf map.
    let mut stacks_seen: HashSet<(u32, u32)> = HashSet::new();
    let mut frames_seen: HashSet<(FrameId, u32)> = HashSet::new();
    let mut out: HashMap<usize, Vec<u32>> = HashMap::new();
    let mut add = |thread: u32, stack: u32| {
        let pid = snap.threads[thread as usize].pid;
        let Ok(pid) = u32::try_from(pid) else { return };
        if !stacks_seen.insert((pid, stack)) {
            return;
        }
        for &f in &snap.stacks[stack as usize] {
            let in_kernel = matches!(snap.frames[f as usize].key, FrameKey::Kernel { .. });
            if !in_kernel && frames_seen.insert((f, pid)) {
                out.entry(f as usize).or_default().push(pid);
            }
        }
    };
    for s in &snap.samples {
        add(s.thread, s.stack);
    }
    for o in &snap.off_cpu {
        add(o.thread, o.stack);
    }
    out
}

/// The name the perf maps give frame `i` (and the map as its file), when
/// every process holding it names it the same.
fn jit_name(
    snap: &Snapshot,
    jit: &JitSymbols,
    pids: &HashMap<usize, Vec<u32>>,
    i: usize,
) -> Option<(String, String)> {
    let addr = match snap.frames[i].key {
        FrameKey::User { map, file_offset } => {
            let m = &snap.maps[map as usize];
            file_offset.wrapping_sub(m.pgoff).wrapping_add(m.start)
        }
        FrameKey::Unmapped { addr } => addr,
        FrameKey::Kernel { .. } => return None,
    };
    let mut found: Option<(String, String)> = None;
    for &pid in pids.get(&i)? {
        let name = jit.name(pid, addr)?;
        match &found {
            Some((n, _)) if n != name => return None,
            Some(_) => {}
            None => found = Some((name.to_string(), format!("perf-{pid}.map"))),
        }
    }
    found
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
pub(crate) fn cache_entries(dir: &Path, build_id: &[u8]) -> Vec<PathBuf> {
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

/// A copy of the file `path` with `build_id`, found as a frame's file is
/// (caches, the path, the root of process `pid`): what an unwinder reads
/// a file's unwind tables from.
pub(crate) fn find_binary(
    path: &str,
    build_id: &[u8],
    pid: Option<u32>,
    sources: &SymbolSources,
) -> Option<File> {
    let file = FileToName {
        path,
        build_id,
        holders: pid.into_iter().collect(),
    };
    find_elf(&file, sources)
}

/// A file whose frames are to be named: its path as the kernel recorded
/// it, its build-id and the processes whose samples hold its frames.
struct FileToName<'a> {
    path: &'a str,
    build_id: &'a [u8],
    holders: Vec<u32>,
}

/// Most processes whose root a file is looked for in: enough for the
/// replicas of a service, few enough to bound the opens.
const MAX_HOLDERS: usize = 16;

/// The processes holding any of `frames`, each once, at most
/// [`MAX_HOLDERS`].
fn holders(pids: &HashMap<usize, Vec<u32>>, frames: &[(usize, u64)]) -> Vec<u32> {
    let mut out: Vec<u32> = frames
        .iter()
        .filter_map(|(i, _)| pids.get(i))
        .flatten()
        .copied()
        .collect();
    out.sort_unstable();
    out.dedup();
    out.truncate(MAX_HOLDERS);
    out
}

/// A copy of the ELF file `file.path` with `file.build_id`: from a cache,
/// at its path, then (for a process in another mount namespace, a
/// container's) inside the root of a process that held its frames, if it
/// still runs here. Every candidate is checked by build-id, so a pid
/// reused since or a path that names another file inside that root
/// gives nothing.
fn find_elf(file: &FileToName, sources: &SymbolSources) -> Option<File> {
    let (path, build_id) = (file.path, file.build_id);
    let mut candidates: Vec<(PathBuf, Links)> = Vec::new();
    for dir in &sources.symfs {
        // A cache entry's debug file has the same build-id but no code:
        // it is not the file.
        for c in cache_entries(dir, build_id) {
            if !c
                .file_name()
                .is_some_and(|n| n == "debug" || n == "kallsyms")
            {
                candidates.push((c, Links::Follow));
            }
        }
        candidates.push((dir.join(path.trim_start_matches('/')), Links::Follow));
    }
    if sources.local_files {
        let on_disk = path.strip_suffix(" (deleted)").unwrap_or(path);
        candidates.push((PathBuf::from(on_disk), Links::Refuse));
        let inside = on_disk.trim_start_matches('/');
        for pid in &file.holders {
            candidates.push((
                Path::new(&format!("/proc/{pid}/root")).join(inside),
                Links::Refuse,
            ));
        }
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
    fn each_user_frame_lists_the_processes_holding_it_once_in_the_order_seen() {
        use crate::model::{Sample, Thread};
        let mut snap = snap_with_user_frame("/usr/lib/libc.so.6", None);
        snap.frames.push(Frame {
            key: FrameKey::Kernel {
                addr: 0xffff_ffff_8100_0000,
            },
            addr: 0xffff_ffff_8100_0000,
        });
        // Two stacks through the user frame, one with a kernel frame on
        // top; 3000 processes of two threads, a few samples each.
        snap.stacks = vec![vec![0], vec![0, 1]];
        for pid in (0..3000).rev() {
            for tid in [pid, pid + 100_000] {
                snap.threads.push(Thread {
                    pid,
                    tid,
                    comm: "worker".into(),
                });
            }
        }
        for (thread, stack) in (0..snap.threads.len() as u32).flat_map(|t| [(t, 0), (t, 1), (t, 1)])
        {
            snap.samples.push(Sample {
                time: 0,
                cpu: 0,
                event: 0,
                thread,
                stack,
                period: 1,
                cgroup: None,
            });
        }
        let pids = frame_pids(&snap);
        let expected: Vec<u32> = (0..3000).rev().collect();
        assert_eq!(pids.get(&0), Some(&expected));
        // Kernel frames are in no process's file nor perf map.
        assert_eq!(pids.get(&1), None);
        assert_eq!(pids.len(), 1);
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

    /// Runs `script` with sh in `dir`; false (a skip, or a failure under
    /// CI) when a tool it needs is missing.
    fn sh(dir: &Path, script: &str) -> bool {
        let out = std::process::Command::new("sh")
            .arg("-ec")
            .arg(script)
            .current_dir(dir)
            .output()
            .unwrap();
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            eprintln!("SKIPPED: {why}");
        }
        out.status.success()
    }

    #[test]
    fn a_stripped_file_is_named_from_its_minidebuginfo_as_fedora_ships_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("m.c"),
            "static volatile int sink;\n\
             __attribute__((noinline)) static void mini_local_fn(void) { for (;;) sink++; }\n\
             int main(void) { mini_local_fn(); return 0; }\n",
        )
        .unwrap();
        // Fedora's find-debuginfo: the function symbols .dynsym lacks,
        // in an xz-compressed ELF file added as .gnu_debugdata.
        let built = sh(
            dir.path(),
            "gcc -O2 -g -o m m.c\n\
             nm -D m --format=posix --defined-only | awk '{ print $1 }' | sort > dynsyms\n\
             nm m --format=posix --defined-only | awk '{ if ($2 == \"T\" || $2 == \"t\") print $1 }' | sort > funcsyms\n\
             comm -13 dynsyms funcsyms > keep\n\
             objcopy --only-keep-debug --remove-section .comment --keep-symbols=keep m mini\n\
             objcopy -S --remove-section .gdb_index --remove-section .comment --keep-symbols=keep mini\n\
             xz -f mini\n\
             objcopy --strip-all m m.stripped\n\
             objcopy --add-section .gnu_debugdata=mini.xz m.stripped\n\
             nm m | sed -n 's/^\\([0-9a-f]*\\) t mini_local_fn$/\\1/p' > addr",
        );
        if !built {
            return;
        }
        let stripped = dir.path().join("m.stripped");
        let vaddr = u64::from_str_radix(
            std::fs::read_to_string(dir.path().join("addr"))
                .unwrap()
                .trim(),
            16,
        )
        .unwrap();
        let file = File::open(&stripped).unwrap();
        let id = flightrec_files::elf::build_id(&file).unwrap();
        // The file offset of the function: through the program headers.
        let segments = elf_layout::LoadSegments::read(&file).unwrap();
        let offset = (0..1u64 << 24)
            .find(|&o| segments.virt_of(o) == Some(vaddr + 4))
            .unwrap();
        let snap = snap_with_user_frame(stripped.to_str().unwrap(), Some(id));
        let snap = Snapshot {
            frames: vec![Frame {
                key: FrameKey::User {
                    map: 0,
                    file_offset: offset,
                },
                addr: 0x2000,
            }],
            ..snap
        };
        let sources = SymbolSources {
            local_files: true,
            ..SymbolSources::default()
        };
        let names = resolve(&snap, &sources);
        assert_eq!(
            names.frames[0].function.as_deref(),
            Some("mini_local_fn"),
            "{:?}",
            names.unresolved
        );
        // Without it, the stripped file has no name for it, and says why.
        assert!(sh(
            dir.path(),
            "objcopy --remove-section .gnu_debugdata m.stripped"
        ));
        let names = resolve(&snap, &sources);
        assert_eq!(names.frames[0].function, None);
        assert!(
            names.unresolved[0].reason.contains("stripped"),
            "{:?}",
            names.unresolved
        );
    }

    #[test]
    fn only_mangled_names_are_demangled() {
        assert_eq!(demangle("a"), "a");
        assert_eq!(demangle("b"), "b");
        assert_eq!(demangle("burn"), "burn");
        assert_eq!(demangle("_Z3fooi"), "foo(int)");
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
    }
}
