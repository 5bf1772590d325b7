//! flightrec configuration: the TOML schema, its defaults and validation.
//!
//! Every key has a default (see [`Config::default`] and the documented
//! `config/flightrec.toml`, which a test keeps equal to it). Unknown keys, bad
//! sizes, durations and values are errors that name the file, line and column;
//! values that can only be checked later (a group that must exist, an event
//! the kernel must know) keep their position ([`toml::Spanned`]) so the
//! daemon can point at them too ([`LoadedConfig::error_at`]).

#![forbid(unsafe_code)]

mod checks;
mod fleet;
mod load;
mod message;
mod schema;
mod trigger;
mod units;
mod validate;

pub use toml::Spanned;

pub use checks::{MAX_EVENT_NAME_BYTES, MAX_FILTER_BYTES, MAX_PATH_BYTES, check_event_name};
pub use fleet::{
    DEFAULT_BUCKET, DEFAULT_NATS_URL, DEFAULT_SUBJECT, FleetConfig, NatsServers, S3Config,
    check_host, check_label_key, check_label_value,
};
pub use load::{ConfigError, LoadedConfig};
pub use message::{MAX_ECHO_CHARS, MAX_MESSAGE_CHARS, line_column, quoted, truncated};
pub use schema::{
    BuffersConfig, Callchain, Compression, Config, ContainersConfig, DEFAULT_CONFIG_PATH,
    DEFAULT_SOCKET, DEFAULT_SOCKET_GROUP, DEFAULT_STACK_SIZE, DaemonConfig, EventConfig,
    HistoryConfig, MAX_STACK_SIZE, RetentionConfig, SnapshotConfig, TrackingConfig, default_events,
};
pub use trigger::{
    DEFAULT_COOLDOWN, DEFAULT_MAX_PER_HOUR, DEFAULT_WINDOW, MAX_CGROUP_BYTES, MAX_TRIGGER_CGROUPS,
    MemoryCounter, PsiResource, PsiSpec, TriggerConfig, TriggerOn, TriggerScope, check_cgroup_glob,
    check_trigger_name,
};
pub use units::{ByteSize, HumanDuration};
pub use validate::{
    MAX_EXITED_THREADS_LIMIT, MAX_HISTORY_AGE_SECS, MAX_MAPS_PER_PROCESS_LIMIT, MAX_RING_BYTES,
    MAX_TRACKING_LOG_BYTES, MIN_HISTORY_BYTES,
};

/// What the tests of every module share: parsing as from a file, and
/// asserting where a config is rejected.
#[cfg(test)]
mod test_support {
    use std::path::Path;

    use crate::{Config, ConfigError};

    pub(crate) fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml(text, Path::new("/etc/test.toml"))
    }

    /// Asserts that `text` is rejected at `line:column` with a message
    /// containing `needle`.
    pub(crate) fn rejected_at(text: &str, line: usize, column: usize, needle: &str) {
        let err = parse(text).expect_err("config should be rejected");
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!("/etc/test.toml:{line}:{column}: ")),
            "expected position {line}:{column}, got: {msg}"
        );
        assert!(msg.contains(needle), "expected {needle:?} in: {msg}");
    }
}
