//! What a snapshot shows, for people and for the tools they run: a
//! self-contained HTML report ([`html`]), pprof ([`pprof`]) and folded
//! stacks ([`stacks::folded`]), with on-CPU samples and off-CPU time
//! ([`load`] reads the file, [`symbols`] names the frames, [`cgroups`]
//! the containers). Runs where `snapctl` runs, with the caller's rights;
//! no `unsafe`.

#![forbid(unsafe_code)]

pub mod cgroups;
pub mod html;
pub mod load;
pub mod model;
pub mod pprof;
pub mod stacks;
pub mod symbols;
pub mod tracefmt;
pub mod unwind;

use std::path::PathBuf;

use thiserror::Error;

pub use html::PageContext;
pub use model::Snapshot;
pub use stacks::Measure;
pub use symbols::{Names, NotUsed, SymbolSources, Unresolved};

#[derive(Debug, Error)]
pub enum ReportError {
    #[error("{}: {message}", path.display())]
    Snapshot { path: PathBuf, message: String },
    #[error("{}: {}", path.display(), too_large(*limit, *file_len, *given))]
    TooLarge {
        path: PathBuf,
        limit: u64,
        file_len: u64,
        /// Whether the limit was `--max-decompressed`'s, not the default.
        given: bool,
    },
    #[error("no event named {name:?} in the snapshot (it has: {known})")]
    NoSuchEvent { name: String, known: String },
    #[error("the snapshot has no sampled event (give --event NAME or --off-cpu)")]
    NoSampledEvent,
}

/// Why a file whose records take more than `limit` bytes once
/// decompressed is not read (`snapctl report`, `export`, `decompress`):
/// the limit, where it came from and the option that raises it.
pub fn too_large(limit: u64, file_len: u64, given: bool) -> String {
    use flightrec_perfdata::reader::{DEFAULT_LIMIT_TEXT, ReadError};
    let what = ReadError::DecompressedTooLarge { limit };
    if given {
        format!("{what}, the limit --max-decompressed set")
    } else {
        format!(
            "{what}, the default limit for a file of {file_len} bytes ({DEFAULT_LIMIT_TEXT}); \
             --max-decompressed SIZE raises it"
        )
    }
}

/// The event `name` (or the default: the first sampled one) of `snap`.
pub fn pick_event(snap: &Snapshot, name: Option<&str>) -> Result<usize, ReportError> {
    match name {
        Some(n) => snap.event_named(n).ok_or_else(|| ReportError::NoSuchEvent {
            name: n.to_string(),
            known: snap
                .events
                .iter()
                .map(|e| e.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }),
        None => snap
            .events
            .iter()
            .position(|e| e.sampled)
            .ok_or(ReportError::NoSampledEvent),
    }
}
