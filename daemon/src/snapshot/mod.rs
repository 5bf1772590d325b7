//! Snapshots: the pure perf.data encoder and the file it is written to.
//!
//! The input is a [`crate::recorder::Capture`]. In data-flow order:
//! - [`synth`]: records made up for the window's start and the losses;
//! - [`features`]: the feature sections (TRACING_DATA, EVENT_DESC, ...);
//! - [`build_ids`]: the files of the BUILD_ID table;
//! - [`scope`]: which records a snapshot of one service or container keeps;
//! - [`compress`]: zstd packing into PERF_RECORD_COMPRESSED, in parallel;
//! - [`perfdata`]: the encoder, [`perfdata::write_perf_data`] (pure), and
//!   [`summary`], what a written file is;
//! - [`recompress`]: a written snapshot compressed later (read with
//!   `flightrec_perfdata::reader`);
//! - [`output`]: the file on disk (temporary name, large direct writes,
//!   fsync, atomic rename): [`output::write_snapshot`] and
//!   [`output::compress_snapshot`].

pub mod build_ids;
pub mod compress;
pub mod features;
pub mod output;
pub mod perfdata;
pub mod recompress;
pub mod scope;
pub mod summary;
pub mod synth;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
