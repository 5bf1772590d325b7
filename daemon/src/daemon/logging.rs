//! Logging to stderr, its level changeable at reload.

use std::io::IsTerminal;

/// The configured level applies to flightrec's own messages; libraries
/// (the HTTP/2 stack) only speak up for warnings.
fn directives(level: &str) -> String {
    format!("warn,flightrecd={level},flightrec_config={level}")
}

/// Sets up logging to stderr: no colours unless stderr is a terminal, no
/// time stamps under systemd (journald adds its own). `RUST_LOG` overrides
/// the configured level. Returns a function that changes the level.
pub fn init_logging(level: &str) -> Box<dyn Fn(&str) + Send + Sync> {
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, fmt, reload};
    let from_env = std::env::var_os("RUST_LOG").is_some();
    let filter = if from_env {
        EnvFilter::from_default_env()
    } else {
        EnvFilter::new(directives(level))
    };
    let (filter, handle) = reload::Layer::new(filter);
    let ansi = std::io::stderr().is_terminal();
    let journal = std::env::var_os("JOURNAL_STREAM").is_some();
    let timed = (!journal).then(|| {
        fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .with_target(false)
    });
    let untimed = journal.then(|| {
        fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .with_target(false)
            .without_time()
    });
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(timed)
        .with(untimed)
        .try_init();
    Box::new(move |level: &str| {
        if !from_env {
            let _ = handle.reload(EnvFilter::new(directives(level)));
        }
    })
}
