//! flightrec configuration: the TOML schema, its defaults and validation.
//!
//! Every key has a default (see [`Config::default`] and the documented
//! `config/flightrec.toml`, which a test keeps equal to it). Unknown keys, bad
//! sizes, durations and values are errors that name the file, line and column;
//! values that can only be checked later (a group that must exist, an event
//! the kernel must know) keep their position ([`toml::Spanned`]) so the
//! daemon can point at them too ([`LoadedConfig::error_at`]).

#![forbid(unsafe_code)]

mod units;

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
pub use toml::Spanned;

pub use units::{ByteSize, HumanDuration};

/// Where the daemon looks for its config when not told otherwise.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/flightrec/flightrec.toml";
/// Where the daemon listens and `snapctl` connects by default.
pub const DEFAULT_SOCKET: &str = "/run/flightrec/flightrecd.sock";
/// The group given access to the socket by default.
pub const DEFAULT_SOCKET_GROUP: &str = "flightrec";
/// Largest ring the kernel side maps per CPU (`buffers.per_cpu`, `buffers.tracking`).
pub const MAX_RING_BYTES: u64 = 2 << 30;
/// Largest tracking log (`buffers.tracking_log`): it is allocated at start
/// and on every reload that changes it.
pub const MAX_TRACKING_LOG_BYTES: u64 = 4 << 30;
/// Longest path accepted for the socket and the output directory (PATH_MAX
/// with its NUL).
pub const MAX_PATH_BYTES: usize = 4095;
/// Longest event name (a tracepoint's directory names are file names).
pub const MAX_EVENT_NAME_BYTES: usize = 255;
/// Longest tracepoint filter: the kernel copies at most a page of it.
pub const MAX_FILTER_BYTES: usize = 4095;
/// Characters of user text (a config value, a label, an id) an error or a
/// log line echoes; the rest is cut.
pub const MAX_ECHO_CHARS: usize = 80;
/// Characters of a whole error message about a config.
pub const MAX_MESSAGE_CHARS: usize = 1000;

/// `text` quoted as `{:?}` shows it, cut to [`MAX_ECHO_CHARS`] characters
/// (then followed by its full length), so a huge value never becomes a
/// huge log line or gRPC status.
pub fn quoted(text: &str) -> String {
    match text.char_indices().nth(MAX_ECHO_CHARS) {
        None => format!("{text:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &text[..cut], text.len()),
    }
}

/// `message` cut to `max` characters, marked when cut.
pub fn truncated(message: &str, max: usize) -> String {
    match message.char_indices().nth(max) {
        None => message.to_string(),
        Some((cut, _)) => format!("{}... ({} bytes in all)", &message[..cut], message.len()),
    }
}

/// A config that cannot be used, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    Unlocated { path: PathBuf, message: String },
}

/// The whole config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub daemon: DaemonConfig,
    pub buffers: BuffersConfig,
    pub snapshot: SnapshotConfig,
    pub retention: RetentionConfig,
    pub tracking: TrackingConfig,
    /// `[[event]]` tables; a file that has none records the default events.
    #[serde(rename = "event")]
    pub events: Vec<Spanned<EventConfig>>,
}

/// `[daemon]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    pub socket: PathBuf,
    /// Group owning the socket (mode 0660) and the snapshots. The default
    /// group may be absent (the socket then stays root's); a group written
    /// in the file must exist; `""` means no group.
    pub socket_group: Option<Spanned<String>>,
    pub output_dir: PathBuf,
    pub log_level: Spanned<String>,
}

/// `[buffers]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BuffersConfig {
    /// Sample ring per CPU (a power of two, at least one page).
    pub per_cpu: Spanned<ByteSize>,
    /// Tracking ring per CPU (a power of two, at least one page).
    pub tracking: Spanned<ByteSize>,
    /// The daemon's user-space log of tracking records.
    pub tracking_log: Spanned<ByteSize>,
}

/// One `[[event]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventConfig {
    /// `system:tracepoint` or a software/hardware event name (`cpu-clock`).
    pub name: Spanned<String>,
    /// Samples per second (only one of frequency and period).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency: Option<Spanned<u64>>,
    /// One sample every N events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<Spanned<u64>>,
    #[serde(default)]
    pub callchain: bool,
    /// Tracepoint filter in ftrace syntax, e.g. `prev_pid != 0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
}

/// `compression` in `[snapshot]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    Zstd,
    None,
}

/// `[snapshot]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SnapshotConfig {
    pub compression: Compression,
    /// zstd level, 1..=22.
    pub level: Spanned<i32>,
    /// At most one dump per this interval; triggers inside it wait for the
    /// next slot and are coalesced into one dump.
    pub min_interval: HumanDuration,
    /// Keep recording this long after a trigger before freezing the rings.
    pub post_trigger_delay: Spanned<HumanDuration>,
    /// SCHED_FIFO priority of the threads that run a dump or a compression
    /// (0 = normal priority), so a loaded machine does not starve them.
    pub realtime_priority: Spanned<u8>,
}

/// `[retention]`: zero disables a limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    pub max_snapshots: u32,
    pub max_bytes: ByteSize,
    pub max_age: HumanDuration,
}

/// `[tracking]`: the bounds of the daemon's process table (what the
/// tracking log's records describe), so its memory is bounded whatever
/// processes do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrackingConfig {
    /// Exited threads kept for windows that start before their exit
    /// (oldest exit dropped first); they also age out with the log.
    pub max_exited_threads: Spanned<u64>,
    /// Executable maps kept per process; further maps are refused.
    pub max_maps_per_process: Spanned<u64>,
    /// Records between checkpoints of the process table: a dump folds at
    /// most this much of the log besides its own window.
    pub checkpoint_interval: Spanned<ByteSize>,
}

/// Upper bound of `tracking.max_exited_threads` (the kernel's PID_MAX_LIMIT).
pub const MAX_EXITED_THREADS_LIMIT: u64 = 4 << 20;
/// Upper bound of `tracking.max_maps_per_process`.
pub const MAX_MAPS_PER_PROCESS_LIMIT: u64 = 1 << 20;

impl Default for TrackingConfig {
    fn default() -> Self {
        Self {
            max_exited_threads: unspanned(16_384),
            max_maps_per_process: unspanned(16_384),
            checkpoint_interval: unspanned(ByteSize::kib(512)),
        }
    }
}

impl TrackingConfig {
    fn validate(&self, tracking_log: u64) -> Result<(), (Range<usize>, String)> {
        let exited = &self.max_exited_threads;
        if *exited.get_ref() > MAX_EXITED_THREADS_LIMIT {
            return Err((
                exited.span(),
                format!(
                    "tracking.max_exited_threads = {} is more than the {} threads a \
                     system can have",
                    exited.get_ref(),
                    MAX_EXITED_THREADS_LIMIT
                ),
            ));
        }
        let maps = &self.max_maps_per_process;
        if !(1..=MAX_MAPS_PER_PROCESS_LIMIT).contains(maps.get_ref()) {
            return Err((
                maps.span(),
                format!(
                    "tracking.max_maps_per_process = {} is out of range: 1 to {}",
                    maps.get_ref(),
                    MAX_MAPS_PER_PROCESS_LIMIT
                ),
            ));
        }
        let interval = &self.checkpoint_interval;
        let n = interval.get_ref().bytes();
        if n < 4096 || n > tracking_log {
            return Err((
                interval.span(),
                format!(
                    "tracking.checkpoint_interval = {} is out of range: 4KiB to \
                     buffers.tracking_log ({})",
                    interval.get_ref(),
                    ByteSize(tracking_log)
                ),
            ));
        }
        Ok(())
    }
}

fn unspanned<T>(value: T) -> Spanned<T> {
    Spanned::new(0..0, value)
}

impl Default for DaemonConfig {
    fn default() -> Self {
        Self {
            socket: DEFAULT_SOCKET.into(),
            socket_group: Some(unspanned(DEFAULT_SOCKET_GROUP.to_string())),
            output_dir: "/var/lib/flightrec/snapshots".into(),
            log_level: unspanned("info".to_string()),
        }
    }
}

impl Default for BuffersConfig {
    fn default() -> Self {
        Self {
            per_cpu: unspanned(ByteSize::mib(4)),
            tracking: unspanned(ByteSize::kib(512)),
            tracking_log: unspanned(ByteSize::mib(64)),
        }
    }
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        Self {
            compression: Compression::Zstd,
            level: unspanned(3),
            min_interval: HumanDuration::secs(1),
            post_trigger_delay: unspanned(HumanDuration::secs(0)),
            realtime_priority: unspanned(1),
        }
    }
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            max_snapshots: 32,
            max_bytes: ByteSize::gib(4),
            max_age: HumanDuration::secs(7 * 86400),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            daemon: DaemonConfig::default(),
            buffers: BuffersConfig::default(),
            snapshot: SnapshotConfig::default(),
            retention: RetentionConfig::default(),
            tracking: TrackingConfig::default(),
            events: default_events(),
        }
    }
}

/// `sched:sched_switch`, and `cpu-clock` at 999 Hz with call chains.
pub fn default_events() -> Vec<Spanned<EventConfig>> {
    vec![
        unspanned(EventConfig {
            name: unspanned("sched:sched_switch".into()),
            frequency: None,
            period: None,
            callchain: false,
            filter: None,
        }),
        unspanned(EventConfig {
            name: unspanned("cpu-clock".into()),
            frequency: Some(unspanned(999)),
            period: None,
            callchain: true,
            filter: None,
        }),
    ]
}

const LOG_LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];

impl Config {
    /// Parses and validates `text`, read from `path` (used in messages).
    pub fn from_toml(text: &str, path: &Path) -> Result<Self, ConfigError> {
        Ok(LoadedConfig::parse(text, path)?.config)
    }

    /// The config as TOML, every key written out (what `--check-config` prints).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self)
            .unwrap_or_else(|e| format!("# cannot print the config as TOML: {e}\n"))
    }

    /// Checks what serde cannot: returns the span and message of the first
    /// problem.
    fn validate(&self) -> Result<(), (Range<usize>, String)> {
        let level = &self.daemon.log_level;
        if !LOG_LEVELS.contains(&level.get_ref().as_str()) {
            return Err((
                level.span(),
                format!(
                    "daemon.log_level {} is not one of {}",
                    quoted(level.get_ref()),
                    LOG_LEVELS.join(", ")
                ),
            ));
        }
        if let Some(group) = &self.daemon.socket_group
            && !group.get_ref().is_empty()
            && !valid_group_name(group.get_ref())
        {
            return Err((
                group.span(),
                format!(
                    "daemon.socket_group {} is not a valid group name \
                     (letters, digits, '_', '-', '.', not starting with '-'; \
                     \"\" for no group)",
                    quoted(group.get_ref())
                ),
            ));
        }
        for (key, ring) in [
            ("buffers.per_cpu", &self.buffers.per_cpu),
            ("buffers.tracking", &self.buffers.tracking),
        ] {
            let n = ring.get_ref().bytes();
            if n > MAX_RING_BYTES {
                return Err((
                    ring.span(),
                    format!(
                        "{key} = {} is above the {} per-ring limit",
                        ring.get_ref(),
                        ByteSize(MAX_RING_BYTES)
                    ),
                ));
            }
            if n < 4096 || !n.is_power_of_two() {
                return Err((
                    ring.span(),
                    format!(
                        "{key} = {} must be a power of two of at least 4KiB \
                         (the kernel maps rings in 2^n pages)",
                        ring.get_ref()
                    ),
                ));
            }
        }
        let log = &self.buffers.tracking_log;
        if !(64 * 1024..=MAX_TRACKING_LOG_BYTES).contains(&log.get_ref().bytes()) {
            return Err((
                log.span(),
                format!(
                    "buffers.tracking_log = {} is out of range: 64KiB to {} \
                     (the daemon allocates it in memory)",
                    log.get_ref(),
                    ByteSize(MAX_TRACKING_LOG_BYTES)
                ),
            ));
        }
        self.tracking.validate(log.get_ref().bytes())?;
        if self.events.is_empty() {
            return Err((0..0, "at least one [[event]] is needed".into()));
        }
        for ev in &self.events {
            let ev_ref = ev.get_ref();
            let name = &ev_ref.name;
            if let Err(why) = check_event_name(name.get_ref()) {
                return Err((name.span(), why));
            }
            if let Some(filter) = &ev_ref.filter
                && filter.len() > MAX_FILTER_BYTES
            {
                return Err((
                    ev.span(),
                    format!(
                        "event {:?}: the filter is {} bytes long, at most {MAX_FILTER_BYTES} \
                         are allowed",
                        name.get_ref(),
                        filter.len()
                    ),
                ));
            }
            match (&ev_ref.frequency, &ev_ref.period) {
                (Some(_), Some(p)) => {
                    return Err((
                        p.span(),
                        format!(
                            "event {:?}: give either frequency or period, not both",
                            name.get_ref()
                        ),
                    ));
                }
                (Some(v), None) | (None, Some(v)) if *v.get_ref() == 0 => {
                    return Err((
                        v.span(),
                        format!("event {:?}: must be at least 1", name.get_ref()),
                    ));
                }
                _ => {}
            }
        }
        let level = &self.snapshot.level;
        if !(1..=22).contains(level.get_ref()) {
            return Err((
                level.span(),
                format!(
                    "snapshot.level = {} is out of range: zstd levels are 1 to 22",
                    level.get_ref()
                ),
            ));
        }
        let priority = &self.snapshot.realtime_priority;
        if *priority.get_ref() > 99 {
            return Err((
                priority.span(),
                format!(
                    "snapshot.realtime_priority = {} is out of range: SCHED_FIFO priorities \
                     are 1 to 99 (0 for normal priority)",
                    priority.get_ref()
                ),
            ));
        }
        let delay = &self.snapshot.post_trigger_delay;
        if delay.get_ref().get() > std::time::Duration::from_secs(60) {
            return Err((
                delay.span(),
                format!(
                    "snapshot.post_trigger_delay = {} is longer than the 60s allowed \
                     (the rings would have overwritten the trigger's moment)",
                    delay.get_ref()
                ),
            ));
        }
        Ok(())
    }
}

/// `system:event` (tracepoint) or a lowercase software/hardware event name.
/// Whether the kernel knows it is checked when the events are opened.
pub fn check_event_name(name: &str) -> Result<(), String> {
    let word = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    let ok = match name.split_once(':') {
        Some((sys, ev)) => word(sys) && word(ev),
        None => word(name),
    };
    if name.len() > MAX_EVENT_NAME_BYTES {
        Err(format!(
            "event name {} is too long: at most {MAX_EVENT_NAME_BYTES} bytes",
            quoted(name)
        ))
    } else if ok {
        Ok(())
    } else {
        Err(format!(
            "event name {} is not valid: expected `system:tracepoint` \
             (e.g. sched:sched_switch) or an event such as cpu-clock",
            quoted(name)
        ))
    }
}

fn valid_group_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// A parsed config with its source, so later checks can point at a line.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: Config,
    /// None when running on built-in defaults (no file).
    pub path: Option<PathBuf>,
    source: String,
}

impl LoadedConfig {
    /// Built-in defaults, no file.
    pub fn defaults() -> Self {
        Self {
            config: Config::default(),
            path: None,
            source: String::new(),
        }
    }

    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| match e.span() {
            Some(span) => error_at(path, text, span, e.message().trim().to_string()),
            None => ConfigError::Unlocated {
                path: path.to_path_buf(),
                message: truncated(e.message().trim(), MAX_MESSAGE_CHARS),
            },
        })?;
        let loaded = Self {
            config,
            path: Some(path.to_path_buf()),
            source: text.to_string(),
        };
        loaded
            .config
            .validate()
            .map_err(|(span, msg)| loaded.error_at(span, msg))?;
        let daemon = &loaded.config.daemon;
        for (key, value) in [
            ("socket", &daemon.socket),
            ("output_dir", &daemon.output_dir),
        ] {
            if let Err(why) = check_path(value) {
                return Err(loaded.error_at(
                    loaded.key_span("daemon", key),
                    format!("daemon.{key} {why}"),
                ));
            }
        }
        Ok(loaded)
    }

    /// The span of the value of `key` in `[section]` of the file; empty
    /// (no position) when the file does not set it. For values kept as
    /// plain types (paths) rather than [`Spanned`].
    pub fn key_span(&self, section: &str, key: &str) -> Range<usize> {
        use toml::de::{DeTable, DeValue};
        let Ok(doc) = DeTable::parse(&self.source) else {
            return 0..0;
        };
        fn find<'a, 'i>(
            table: &'a DeTable<'i>,
            name: &str,
        ) -> Option<&'a toml::Spanned<DeValue<'i>>> {
            table
                .iter()
                .find(|(k, _)| k.get_ref() == name)
                .map(|(_, v)| v)
        }
        match find(doc.get_ref(), section).map(|v| v.get_ref()) {
            Some(DeValue::Table(t)) => find(t, key).map_or(0..0, |v| v.span()),
            _ => 0..0,
        }
    }

    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// An error pointing at `span` of this config's file. Spans of values
    /// that came from defaults (empty) give an error without a position.
    pub fn error_at(&self, span: Range<usize>, message: impl Into<String>) -> ConfigError {
        let path = self
            .path
            .clone()
            .unwrap_or_else(|| PathBuf::from("<built-in defaults>"));
        if span.is_empty() && span.start == 0 {
            return ConfigError::Unlocated {
                path,
                message: truncated(&message.into(), MAX_MESSAGE_CHARS),
            };
        }
        error_at(&path, &self.source, span, message.into())
    }
}

fn error_at(path: &Path, text: &str, span: Range<usize>, message: String) -> ConfigError {
    let (line, column) = line_column(text, span.start);
    ConfigError::Invalid {
        path: path.to_path_buf(),
        line,
        column,
        message: truncated(&message, MAX_MESSAGE_CHARS),
    }
}

/// A path the daemon can hand to the kernel: not empty, no NUL byte, not
/// longer than PATH_MAX. Returns the rest of a sentence naming the key.
fn check_path(path: &Path) -> Result<(), String> {
    let bytes = path.as_os_str().as_encoded_bytes();
    if bytes.is_empty() {
        Err("is empty: give a path".into())
    } else if bytes.contains(&0) {
        Err(format!(
            "{} contains a NUL byte, which no path can hold",
            quoted(&path.to_string_lossy())
        ))
    } else if bytes.len() > MAX_PATH_BYTES {
        Err(format!(
            "{} is {} bytes long, at most {MAX_PATH_BYTES} are allowed",
            quoted(&path.to_string_lossy()),
            bytes.len()
        ))
    } else {
        Ok(())
    }
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml(text, Path::new("/etc/test.toml"))
    }

    /// Asserts that `text` is rejected at `line:column` with a message
    /// containing `needle`.
    fn rejected_at(text: &str, line: usize, column: usize, needle: &str) {
        let err = parse(text).expect_err("config should be rejected");
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!("/etc/test.toml:{line}:{column}: ")),
            "expected position {line}:{column}, got: {msg}"
        );
        assert!(msg.contains(needle), "expected {needle:?} in: {msg}");
    }

    #[test]
    fn the_documented_example_file_equals_the_defaults() {
        let text = include_str!("../flightrec.toml");
        let cfg = parse(text).unwrap();
        assert_eq!(cfg, Config::default());
    }

    #[test]
    fn an_empty_file_means_defaults() {
        assert_eq!(parse("").unwrap(), Config::default());
    }

    #[test]
    fn the_issue_example_parses() {
        let cfg = parse(
            r#"
[daemon]
socket = "/tmp/x.sock"
socket_group = "adm"
output_dir = "/tmp/snaps"
[buffers]
per_cpu = "256KiB"
tracking = "64K"
tracking_log = "1M"
[[event]]
name = "sched:sched_switch"
filter = "prev_pid != 0"
[[event]]
name = "cpu-clock"
period = 100000
callchain = true
[snapshot]
compression = "none"
level = 19
min_interval = "250ms"
post_trigger_delay = "2s"
[retention]
max_snapshots = 2
max_bytes = 4096
max_age = "1h"
"#,
        )
        .unwrap();
        assert_eq!(cfg.buffers.per_cpu.get_ref().bytes(), 256 * 1024);
        assert_eq!(cfg.buffers.tracking.get_ref().bytes(), 64 * 1024);
        assert_eq!(cfg.events.len(), 2);
        assert_eq!(
            cfg.events[0].get_ref().filter.as_deref(),
            Some("prev_pid != 0")
        );
        assert_eq!(
            cfg.events[1]
                .get_ref()
                .period
                .as_ref()
                .map(|p| *p.get_ref()),
            Some(100000)
        );
        assert_eq!(cfg.snapshot.compression, Compression::None);
        assert_eq!(cfg.snapshot.min_interval.get().as_millis(), 250);
        assert_eq!(cfg.retention.max_bytes, ByteSize(4096));
        assert_eq!(cfg.retention.max_age.get().as_secs(), 3600);
    }

    #[test]
    fn printed_config_reads_back_equal() {
        let mut cfg = parse("[[event]]\nname = \"cpu-clock\"\nperiod = 5\n").unwrap();
        cfg.retention.max_snapshots = 7;
        let text = cfg.to_toml();
        assert_eq!(parse(&text).unwrap(), cfg, "{text}");
        let text = Config::default().to_toml();
        assert_eq!(parse(&text).unwrap(), Config::default(), "{text}");
    }

    #[test]
    fn tracking_limits_parse_and_bad_ones_are_located() {
        let cfg = parse(
            "[tracking]\nmax_exited_threads = 100\nmax_maps_per_process = 50\n\
             checkpoint_interval = \"1MiB\"\n",
        )
        .unwrap();
        assert_eq!(*cfg.tracking.max_exited_threads.get_ref(), 100);
        assert_eq!(*cfg.tracking.max_maps_per_process.get_ref(), 50);
        assert_eq!(cfg.tracking.checkpoint_interval.get_ref().bytes(), 1 << 20);
        rejected_at(
            "[tracking]\nmax_maps_per_process = 0\n",
            2,
            24,
            "tracking.max_maps_per_process = 0 is out of range: 1 to 1048576",
        );
        rejected_at(
            "[tracking]\nmax_exited_threads = 99999999\n",
            2,
            22,
            "tracking.max_exited_threads = 99999999 is more than",
        );
        rejected_at(
            "[buffers]\ntracking_log = \"1MiB\"\n[tracking]\ncheckpoint_interval = \"2MiB\"\n",
            4,
            23,
            "tracking.checkpoint_interval = 2MiB is out of range: 4KiB to buffers.tracking_log (1MiB)",
        );
        rejected_at(
            "[tracking]\nmax_exited = 3\n",
            2,
            1,
            "unknown field `max_exited`",
        );
    }

    #[test]
    fn unknown_key_is_located() {
        rejected_at(
            "[daemon]\nsocket = \"/x\"\n  sokcet_group = \"a\"\n",
            3,
            3,
            "sokcet_group",
        );
    }

    #[test]
    fn unknown_section_is_located() {
        rejected_at("\n\n[bufers]\nper_cpu = \"4MiB\"\n", 3, 2, "bufers");
    }

    #[test]
    fn bad_size_is_located() {
        rejected_at(
            "[buffers]\nper_cpu = \"4XB\"\n",
            2,
            11,
            "invalid size \"4XB\"",
        );
    }

    #[test]
    fn bad_duration_is_located() {
        rejected_at(
            "[retention]\nmax_age = \"a week\"\n",
            2,
            11,
            "invalid duration",
        );
        rejected_at("[snapshot]\nmin_interval = 5\n", 2, 16, "give a unit");
    }

    #[test]
    fn syntax_error_is_located() {
        rejected_at("[daemon]\nsocket = /run/x\n", 2, 10, "");
    }

    #[test]
    fn wrong_type_is_located() {
        rejected_at("[retention]\nmax_snapshots = \"many\"\n", 2, 17, "");
    }

    #[test]
    fn realtime_priority_out_of_range_is_located() {
        rejected_at(
            "[snapshot]\nrealtime_priority = 100\n",
            2,
            21,
            "SCHED_FIFO priorities are 1 to 99",
        );
    }

    #[test]
    fn level_out_of_range_is_located() {
        rejected_at("[snapshot]\nlevel = 23\n", 2, 9, "zstd levels are 1 to 22");
        rejected_at("[snapshot]\nlevel = 0\n", 2, 9, "out of range");
    }

    #[test]
    fn bad_event_name_is_located() {
        rejected_at(
            "[[event]]\nname = \"cpu-clock\"\n[[event]]\nname = \"sched:\"\n",
            4,
            8,
            "event name \"sched:\" is not valid",
        );
        rejected_at("[[event]]\nname = \"../x\"\n", 2, 8, "not valid");
    }

    #[test]
    fn frequency_and_period_together_are_rejected() {
        rejected_at(
            "[[event]]\nname = \"cpu-clock\"\nfrequency = 99\nperiod = 10\n",
            4,
            10,
            "either frequency or period",
        );
        rejected_at(
            "[[event]]\nname = \"cpu-clock\"\nfrequency = 0\n",
            3,
            13,
            "at least 1",
        );
    }

    #[test]
    fn event_without_name_is_located() {
        rejected_at("[[event]]\nfrequency = 99\n", 1, 1, "name");
    }

    #[test]
    fn bad_group_is_located() {
        rejected_at(
            "[daemon]\nsocket_group = \"wheel users\"\n",
            2,
            16,
            "not a valid group name",
        );
    }

    #[test]
    fn bad_log_level_is_located() {
        rejected_at(
            "[daemon]\nlog_level = \"loud\"\n",
            2,
            13,
            "not one of error, warn",
        );
    }

    #[test]
    fn ring_size_must_be_a_power_of_two() {
        rejected_at("[buffers]\ntracking = \"3KiB\"\n", 2, 12, "power of two");
        rejected_at("[buffers]\nper_cpu = \"384KiB\"\n", 2, 11, "power of two");
    }

    #[test]
    fn unknown_compression_is_located() {
        rejected_at("[snapshot]\ncompression = \"lz4\"\n", 2, 15, "lz4");
    }

    #[test]
    fn later_checks_point_at_the_value() {
        let text = "[daemon]\nsocket_group = \"nosuchgroup\"\n";
        let loaded = LoadedConfig::parse(text, Path::new("/c.toml")).unwrap();
        let span = loaded.config.daemon.socket_group.as_ref().unwrap().span();
        let err = loaded.error_at(span, "group does not exist");
        assert_eq!(err.to_string(), "/c.toml:2:16: group does not exist");
        let defaults = LoadedConfig::defaults();
        let span = defaults.config.daemon.socket_group.as_ref().unwrap().span();
        assert_eq!(
            defaults.error_at(span, "x").to_string(),
            "<built-in defaults>: x"
        );
    }

    proptest::proptest! {
        #[test]
        fn any_text_is_parsed_or_rejected_with_a_position(text in "\\PC{0,200}") {
            match parse(&text) {
                Ok(_) => {}
                Err(ConfigError::Invalid { line, column, .. }) => {
                    proptest::prop_assert!(line >= 1 && column >= 1);
                    proptest::prop_assert!(line <= text.lines().count().max(1) + 1);
                }
                Err(ConfigError::Unlocated { .. }) => {}
                Err(e) => proptest::prop_assert!(false, "unexpected error kind: {e}"),
            }
        }

        #[test]
        fn toml_shaped_text_never_panics(
            key in "(socket|per_cpu|level|name|max_age|max_bytes|frequency|x)",
            value in "(\"[0-9A-Za-z :/.]{0,12}\"|-?[0-9]{1,20}|true|\\[\\])",
            section in "(daemon|buffers|snapshot|retention|\\[event\\])",
        ) {
            let _ = parse(&format!("[{section}]\n{key} = {value}\n"));
        }

        #[test]
        fn sizes_round_trip(n in 0u64..(1 << 40), unit in 0usize..4) {
            let size = ByteSize(n << (10 * unit));
            proptest::prop_assert_eq!(ByteSize::parse(&size.to_string()), Ok(size));
        }
    }

    #[test]
    fn rings_above_the_kernel_limit_are_located() {
        rejected_at(
            "[buffers]\nper_cpu = \"4GiB\"\n",
            2,
            11,
            "buffers.per_cpu = 4GiB is above the 2GiB per-ring limit",
        );
        rejected_at(
            "[buffers]\n\ntracking = \"4GiB\"\n",
            3,
            12,
            "above the 2GiB per-ring limit",
        );
        assert!(parse("[buffers]\nper_cpu = \"2GiB\"\n").is_ok());
    }

    #[test]
    fn a_tracking_log_too_large_to_allocate_is_located() {
        rejected_at(
            "[buffers]\ntracking_log = \"1TiB\"\n",
            2,
            16,
            "buffers.tracking_log = 1TiB is out of range: 64KiB to 4GiB",
        );
        rejected_at("[buffers]\ntracking_log = \"4K\"\n", 2, 16, "64KiB to 4GiB");
        assert!(parse("[buffers]\ntracking_log = \"4GiB\"\n").is_ok());
    }

    #[test]
    fn unusable_paths_are_located() {
        rejected_at("[daemon]\nsocket = \"\"\n", 2, 10, "daemon.socket is empty");
        rejected_at(
            "[daemon]\nlog_level = \"info\"\n output_dir = \"/var/a\\u0000b\"\n",
            3,
            15,
            "daemon.output_dir \"/var/a\\0b\" contains a NUL byte",
        );
        rejected_at(
            "[daemon]\nsocket = \"/tmp/x\\u0000\"\n",
            2,
            10,
            "contains a NUL byte",
        );
        let long = format!("[daemon]\noutput_dir = \"/{}\"\n", "d".repeat(5000));
        rejected_at(&long, 2, 14, "5001 bytes long, at most 4095");
    }

    #[test]
    fn no_socket_group_is_written_as_an_empty_name() {
        let cfg = parse("[daemon]\nsocket_group = \"\"\n").unwrap();
        assert_eq!(
            cfg.daemon
                .socket_group
                .as_ref()
                .map(|g| g.get_ref().as_str()),
            Some("")
        );
        assert_eq!(parse(&cfg.to_toml()).unwrap(), cfg);
    }

    #[test]
    fn huge_values_are_cut_in_errors() {
        let huge = "x".repeat(10 << 20);
        for text in [
            format!("[daemon]\nlog_level = \"{huge}\"\n"),
            format!("[daemon]\nsocket_group = \"{huge}\"\n"),
            format!("[buffers]\nper_cpu = \"{huge}\"\n"),
            format!("[retention]\nmax_age = \"{huge}\"\n"),
            format!("[[event]]\nname = \"{huge}\"\n"),
            format!("[daemon]\n{huge} = 1\n"),
            format!("[daemon]\nsocket = \"/{huge}\"\n"),
        ] {
            let msg = parse(&text).expect_err("rejected").to_string();
            assert!(msg.len() < 1200, "{} bytes: {}", msg.len(), &msg[..200]);
            assert!(msg.starts_with("/etc/test.toml:2:"), "{msg}");
        }
        let msg = parse(&format!("[daemon]\nlog_level = \"{huge}\"\n"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("... (10485760 bytes)"), "{msg}");
        assert!(msg.contains("is not one of error, warn"), "{msg}");
    }

    #[test]
    fn quoted_cuts_at_a_character_boundary() {
        assert_eq!(quoted("abc"), "\"abc\"");
        let cut = quoted(&"é".repeat(100));
        assert_eq!(
            cut,
            format!("{:?}... (200 bytes)", "é".repeat(MAX_ECHO_CHARS))
        );
    }

    #[test]
    fn line_column_counts_characters() {
        assert_eq!(line_column("abc", 0), (1, 1));
        assert_eq!(line_column("a\nbc", 3), (2, 2));
        assert_eq!(line_column("é\né=x", 5), (2, 2));
        assert_eq!(line_column("ab", 99), (1, 3));
    }
}
