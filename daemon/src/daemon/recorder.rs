//! The real [`Engine`]: kernel rings (`snapshot::capture::Recorder`) and the
//! perf.data writer (`snapshot::output`).

use std::path::Path;

use flightrec_config::Config;

use super::engine::{Engine, EngineError};

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
pub fn compress(path: &Path, _level: i32) -> Result<u64, EngineError> {
    Err(EngineError::Compress {
        message: format!(
            "cannot compress {}: no writer in this build",
            path.display()
        ),
        disk_full: false,
        already_compressed: false,
    })
}
