//! The TOML schema: one type per section, each key's default, and the
//! config printed back as TOML.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::fleet::FleetConfig;
use crate::trigger::TriggerConfig;
use crate::units::{ByteSize, HumanDuration};

/// Where the daemon looks for its config when not told otherwise.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/flightrec/flightrec.toml";
/// Where the daemon listens and `snapctl` connects by default.
pub const DEFAULT_SOCKET: &str = "/run/flightrec/flightrecd.sock";
/// The group given access to the socket by default.
pub const DEFAULT_SOCKET_GROUP: &str = "flightrec";

/// The whole config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub daemon: DaemonConfig,
    pub buffers: BuffersConfig,
    pub snapshot: SnapshotConfig,
    pub retention: RetentionConfig,
    pub tracking: TrackingConfig,
    /// `[history]`: the look-back kept on disk (off by default).
    pub history: HistoryConfig,
    /// `[containers]`: which cgroup (service, container, pod) samples are
    /// of, and the runtimes asked for containers' names.
    pub containers: ContainersConfig,
    /// `[[event]]` tables; a file that has none records the default events.
    #[serde(rename = "event")]
    pub events: Vec<Spanned<EventConfig>>,
    /// `[[trigger]]` tables: conditions that dump by themselves.
    #[serde(rename = "trigger", skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<Spanned<TriggerConfig>>,
    /// `[fleet]`: absent, the daemon runs alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<Spanned<FleetConfig>>,
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
    /// A second (standby) sample ring per CPU that a dump switches to, so
    /// freezing the rings loses no sample; `false` pauses the one ring
    /// instead (half the sample-ring memory, about one sample lost per CPU
    /// per dump under load).
    pub lossless_freeze: bool,
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
    /// Call chains with each sample: `false`, `true` (frame pointers, the
    /// kernel's walk) or `"dwarf"` (registers and a copy of the user
    /// stack, unwound later from the files' unwind tables).
    #[serde(default = "no_callchain")]
    pub callchain: Spanned<Callchain>,
    /// Bytes of user stack copied with each sample (`callchain = "dwarf"`
    /// only; default [`DEFAULT_STACK_SIZE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_size: Option<Spanned<ByteSize>>,
    /// Also record a PERF_RECORD_SWITCH_CPU_WIDE record of every context
    /// switch into this event's ring (what samply and hotspot compute
    /// off-CPU time from).
    #[serde(default)]
    pub context_switch: bool,
    /// Tracepoint filter in ftrace syntax, e.g. `prev_pid != 0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
}

/// User stack copied with each sample of a `callchain = "dwarf"` event
/// when `stack_size` is not given (perf's default).
pub const DEFAULT_STACK_SIZE: ByteSize = ByteSize::kib(8);
/// The largest `stack_size`: a sample record's size is a u16, and perf's
/// own limit is this.
pub const MAX_STACK_SIZE: u64 = 65528;

fn no_callchain() -> Spanned<Callchain> {
    unspanned(Callchain::None)
}

/// How an event's call chains are recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Callchain {
    /// None: the sampled address alone.
    #[default]
    None,
    /// The kernel walks the frame pointers (`true`, or `"fp"`).
    FramePointer,
    /// The kernel's chain, plus the user registers and a copy of the user
    /// stack, unwound later (`"dwarf"`, as `perf record --call-graph
    /// dwarf`).
    Dwarf,
}

impl Callchain {
    /// Any call chain at all.
    pub fn recorded(self) -> bool {
        self != Callchain::None
    }
}

impl Serialize for Callchain {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Callchain::None => s.serialize_bool(false),
            Callchain::FramePointer => s.serialize_bool(true),
            Callchain::Dwarf => s.serialize_str("dwarf"),
        }
    }
}

impl<'de> Deserialize<'de> for Callchain {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Callchain;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("true, false, \"fp\" or \"dwarf\"")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Callchain, E> {
                Ok(if v {
                    Callchain::FramePointer
                } else {
                    Callchain::None
                })
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Callchain, E> {
                match v {
                    "fp" => Ok(Callchain::FramePointer),
                    "dwarf" => Ok(Callchain::Dwarf),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
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
    /// SCHED_FIFO priority of the threads from a trigger to the frozen
    /// rings (0 = normal priority), so a loaded machine does not starve them.
    pub realtime_priority: Spanned<u8>,
    /// Nice of the dump thread while it writes a snapshot (after the
    /// freeze), -20..=19: raised so a loaded machine does not make the
    /// file wait, without a realtime policy.
    pub writer_nice: Spanned<i32>,
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
    /// (oldest exit dropped first); they also age out with the log and
    /// with the memory rings.
    pub max_exited_threads: Spanned<u64>,
    /// Executable maps kept per process; further maps are refused.
    pub max_maps_per_process: Spanned<u64>,
    /// Records between checkpoints of the process table: a dump folds at
    /// most this much of the log besides its own window (besides these,
    /// the newest records get a few recent checkpoints closer together).
    pub checkpoint_interval: Spanned<ByteSize>,
    /// Checkpoints held at most: the interval is widened to
    /// `buffers.tracking_log / max_checkpoints` when it is shorter, which
    /// bounds the memory the checkpoints take.
    pub max_checkpoints: Spanned<u64>,
}

impl TrackingConfig {
    /// The interval between checkpoints of a log of `tracking_log` bytes:
    /// `checkpoint_interval`, widened so that at most `max_checkpoints` fit.
    pub fn effective_checkpoint_interval(&self, tracking_log: u64) -> u64 {
        let max = (*self.max_checkpoints.get_ref()).max(1);
        self.checkpoint_interval
            .get_ref()
            .bytes()
            .max(tracking_log.div_ceil(max))
    }
}

impl Default for TrackingConfig {
    fn default() -> Self {
        Self {
            max_exited_threads: unspanned(16_384),
            max_maps_per_process: unspanned(16_384),
            checkpoint_interval: unspanned(ByteSize::kib(512)),
            max_checkpoints: unspanned(16),
        }
    }
}

/// `[history]`: every CPU's records streamed to disk, compressed, in
/// segments dropped by age and by bytes, so a dump can reach back minutes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistoryConfig {
    pub enabled: bool,
    /// How far back the history reaches; older segments are dropped.
    pub max_age: Spanned<HumanDuration>,
    /// The disk budget the history never exceeds; the oldest segments go
    /// first.
    pub max_bytes: Spanned<ByteSize>,
    /// Where the segments live (created like `daemon.output_dir`).
    pub dir: PathBuf,
    /// zstd level of the segments, 1..=22.
    pub level: Spanned<i32>,
    /// Nice of the history's threads: the drain that empties its rings and
    /// the writer that compresses and writes them (-20..=19).
    pub writer_nice: Spanned<i32>,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            max_age: unspanned(HumanDuration::secs(600)),
            max_bytes: unspanned(ByteSize::gib(1)),
            dir: "/var/lib/flightrec/history".into(),
            level: unspanned(1),
            writer_nice: unspanned(-10),
        }
    }
}

/// `[containers]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContainersConfig {
    /// Samples carry their cgroup id (`PERF_SAMPLE_CGROUP`) and every
    /// snapshot names every cgroup, as `perf record --all-cgroups` does.
    pub cgroups: bool,
    /// Docker Engine API sockets (Docker's, `podman system service`'s)
    /// asked for containers' names and labels; one that is absent or does
    /// not answer costs nothing but the names.
    pub runtime_sockets: Vec<Spanned<PathBuf>>,
}

impl Default for ContainersConfig {
    fn default() -> Self {
        Self {
            cgroups: true,
            runtime_sockets: vec![
                unspanned("/run/docker.sock".into()),
                unspanned("/run/podman/podman.sock".into()),
            ],
        }
    }
}

/// A value that came from a default, not from a file: it has no position.
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
            lossless_freeze: true,
        }
    }
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        Self {
            // Plain: every reader the README names opens it (hotspot and
            // samply 0.13.1 read no sample from a compressed one).
            compression: Compression::None,
            level: unspanned(3),
            min_interval: HumanDuration::secs(1),
            post_trigger_delay: unspanned(HumanDuration::secs(0)),
            realtime_priority: unspanned(1),
            writer_nice: unspanned(-20),
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
            history: HistoryConfig::default(),
            containers: ContainersConfig::default(),
            events: default_events(),
            triggers: Vec::new(),
            fleet: None,
        }
    }
}

/// `cpu-clock` at 999 Hz with call chains, then `sched:sched_switch`:
/// the CPU profile first, because `perf report` prints the first event
/// first and samply profiles only the first.
pub fn default_events() -> Vec<Spanned<EventConfig>> {
    vec![
        unspanned(EventConfig {
            name: unspanned("cpu-clock".into()),
            frequency: Some(unspanned(999)),
            period: None,
            callchain: unspanned(Callchain::FramePointer),
            stack_size: None,
            context_switch: false,
            filter: None,
        }),
        unspanned(EventConfig {
            name: unspanned("sched:sched_switch".into()),
            frequency: None,
            period: None,
            callchain: unspanned(Callchain::None),
            stack_size: None,
            context_switch: false,
            filter: None,
        }),
    ]
}

impl Config {
    /// The config as TOML, every key written out (what `--check-config` prints).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self)
            .unwrap_or_else(|e| format!("# cannot print the config as TOML: {e}\n"))
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::parse;
    use crate::units::ByteSize;
    use crate::{Compression, Config};

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
}
