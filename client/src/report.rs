//! `snapctl report` and `snapctl export`: a snapshot read, its frames named
//! on this machine, and written as an HTML page, a pprof profile or folded
//! stacks, by this process with the caller's rights. The output is created
//! as `snapctl archive` creates its own: exclusively, never through a link,
//! with the snapshot's mode and group (what the page shows is what the
//! snapshot holds), renamed into place without replacing unless `--force`.

use std::io::Write;
use std::path::{Path, PathBuf};

use flightrec_files::{Links, NewFile, open_regular};
use flightrec_proto::container::Container;
use flightrec_report::{
    Measure, Names, NotUsed, PageContext, ReportError, Snapshot, SymbolSources, Unresolved,
    cgroups, html, load, pick_event, pprof, stacks, symbols,
};

use crate::archive::{ArchiveError, access_like, commit, split_output};

/// The formats of `snapctl export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// gzipped profile.proto (`go tool pprof`, Pyroscope, Parca).
    Pprof,
    /// Folded stacks (flamegraph.pl, inferno, speedscope).
    Collapsed,
}

/// The root frame of `snapctl export --format collapsed`'s stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FoldBy {
    /// The thread's name.
    Thread,
    /// The container's name (`[host]` outside any), then the thread's.
    Container,
}

impl From<FoldBy> for stacks::Root {
    fn from(by: FoldBy) -> Self {
        match by {
            FoldBy::Thread => stacks::Root::Thread,
            FoldBy::Container => stacks::Root::Container,
        }
    }
}

impl ExportFormat {
    pub fn extension(self) -> &'static str {
        match self {
            ExportFormat::Pprof => "pb.gz",
            ExportFormat::Collapsed => "folded",
        }
    }
}

/// What was written.
#[derive(Debug)]
pub struct Written {
    /// `None`: standard output.
    pub path: Option<PathBuf>,
    pub bytes: u64,
    /// Frames of the snapshot, and how many have a function name.
    pub frames: usize,
    pub named: usize,
    pub unresolved: Vec<Unresolved>,
    /// `--symfs` and `--kallsyms` that could not be used, with why.
    pub not_used: Vec<NotUsed>,
    /// What the export holds (`samples of cpu-clock`, `off-CPU time`).
    pub content: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ReportFailure {
    #[error(transparent)]
    Read(#[from] ReportError),
    #[error(transparent)]
    Write(#[from] ArchiveError),
    /// Options that do not go together.
    #[error("{0}")]
    Usage(String),
}

/// Reads the snapshot (its records at most `max_decompressed` bytes, else
/// the default limit), names its frames (with their source lines), and
/// its containers as `known` (the snapshot's sidecar) names them, else
/// from their cgroup paths.
fn read(
    snapshot: &Path,
    sources: &SymbolSources,
    max_decompressed: Option<u64>,
    known: &[Container],
) -> Result<(Snapshot, Names, symbols::Lines), ReportError> {
    let mut snap = load::read_unwinding(snapshot, max_decompressed, Some(sources))?;
    cgroups::name_containers(&mut snap, known);
    let (names, lines) = symbols::resolve_with_lines(&snap, sources);
    Ok((snap, names, lines))
}

fn written(
    path: Option<PathBuf>,
    bytes: usize,
    names: Names,
    sources: &SymbolSources,
    content: String,
) -> Written {
    Written {
        path,
        bytes: bytes as u64,
        frames: names.frames.len(),
        named: names.frames.iter().filter(|f| f.function.is_some()).count(),
        unresolved: names.unresolved,
        not_used: symbols::not_used(sources),
        content,
    }
}

/// Writes `bytes` to `out` like the snapshot at `snapshot` (its mode and
/// group), or to standard output for `-`.
fn write_out(
    snapshot: &Path,
    out: &Path,
    bytes: &[u8],
    force: bool,
) -> Result<Option<PathBuf>, ArchiveError> {
    let io_err = |source| ArchiveError::Io {
        path: out.to_path_buf(),
        source,
    };
    if out == Path::new("-") {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(bytes).map_err(io_err)?;
        stdout.flush().map_err(io_err)?;
        return Ok(None);
    }
    let (_, md) = open_regular(snapshot, Links::Follow).map_err(|source| ArchiveError::Io {
        path: snapshot.to_path_buf(),
        source,
    })?;
    let (dir, name) = split_output(out)?;
    let mut new = NewFile::create(dir, name, access_like(&md, true)).map_err(io_err)?;
    new.file_mut().write_all(bytes).map_err(io_err)?;
    commit(new, out, force)?;
    Ok(Some(out.to_path_buf()))
}

/// `snapctl report`: the HTML page of `snapshot` at `out`; `known`: the
/// containers its sidecar names.
pub fn write_report(
    snapshot: &Path,
    out: &Path,
    ctx: &PageContext,
    known: &[Container],
    sources: &SymbolSources,
    max_decompressed: Option<u64>,
    force: bool,
) -> Result<Written, ReportFailure> {
    let (snap, names, _) = read(snapshot, sources, max_decompressed, known)?;
    let page = html::page(&snap, &names, ctx);
    let path = write_out(snapshot, out, page.as_bytes(), force)?;
    Ok(written(path, page.len(), names, sources, "report".into()))
}

/// What `snapctl export` writes.
#[derive(Debug, Clone)]
pub struct ExportRequest {
    pub format: ExportFormat,
    /// The sampled event (default: the first).
    pub event: Option<String>,
    pub off_cpu: bool,
    /// collapsed: the stacks' root frame (default: the thread).
    pub by: Option<FoldBy>,
    /// `--max-decompressed`.
    pub max_decompressed: Option<u64>,
    pub force: bool,
}

/// `snapctl export`; `known`: the containers the snapshot's sidecar names.
pub fn write_export(
    snapshot: &Path,
    out: &Path,
    request: &ExportRequest,
    known: &[Container],
    sources: &SymbolSources,
) -> Result<Written, ReportFailure> {
    let ExportRequest {
        format,
        ref event,
        off_cpu,
        by,
        max_decompressed,
        force,
    } = *request;
    if format == ExportFormat::Pprof && by.is_some() {
        return Err(ReportFailure::Usage(
            "--by applies to --format collapsed; pprof labels every sample with its \
             container (go tool pprof -tagroot=container)"
                .into(),
        ));
    }
    let root = by.map_or(stacks::Root::Thread, stacks::Root::from);
    let event = event.as_deref();
    let (snap, names, lines) = read(snapshot, sources, max_decompressed, known)?;
    let (bytes, content) = match format {
        ExportFormat::Pprof => {
            // Both sample types are in every pprof profile; the event picks
            // what `samples` counts (none sampled: off-CPU time alone).
            let event = match pick_event(&snap, event) {
                Ok(e) => e,
                Err(ReportError::NoSampledEvent) if off_cpu => usize::MAX,
                Err(e) => return Err(e.into()),
            };
            let name = snap
                .events
                .get(event)
                .map_or("no event", |e| e.name.as_str());
            let profile = pprof::profile_with_lines(&snap, &names, &lines, event);
            (
                pprof::gzipped(&profile),
                format!("samples of {name} and off-CPU time"),
            )
        }
        ExportFormat::Collapsed if off_cpu => (
            stacks::folded(&snap, &names, Measure::OffCpu, root).into_bytes(),
            "off-CPU time in microseconds".to_string(),
        ),
        ExportFormat::Collapsed => {
            let event = pick_event(&snap, event)?;
            (
                stacks::folded(&snap, &names, Measure::Samples(event), root).into_bytes(),
                format!("samples of {}", snap.events[event].name),
            )
        }
    };
    let path = write_out(snapshot, out, &bytes, force)?;
    Ok(written(path, bytes.len(), names, sources, content))
}
