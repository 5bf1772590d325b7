//! The real [`Engine`]: kernel rings (`snapshot::capture::Recorder`) and the
//! perf.data writer (`snapshot::output`).

use std::path::Path;

use flightrec_config::Config;

use super::engine::{Engine, EngineError};
use crate::snapshot::output::{self, SnapshotError};
use crate::snapshot::reader::ReadError;

/// Opens the rings the config asks for.
pub fn start(_config: &Config) -> Result<Box<dyn Engine>, EngineError> {
    Err(EngineError::Start {
        message: "this build has no capture support yet".into(),
        event: None,
    })
}

/// Checks the configured events against the kernel (names, tracefs,
/// filters) without opening them.
pub fn check_events(_config: &Config) -> Result<(), EngineError> {
    Ok(())
}

/// Replaces the snapshot at `path` by its compressed form; returns its size.
pub fn compress(path: &Path, level: i32) -> Result<u64, EngineError> {
    output::compress_snapshot(path, level)
        .map(|w| w.bytes)
        .map_err(|e| EngineError::Compress {
            disk_full: e.is_disk_full(),
            already_compressed: matches!(
                &e,
                SnapshotError::Parse {
                    source: ReadError::AlreadyCompressed,
                    ..
                }
            ),
            message: e.to_string(),
        })
}
