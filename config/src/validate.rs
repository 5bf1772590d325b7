//! What serde cannot check: ranges, names, paths and combinations of keys.
//! Each check returns the span of the offending value with its message, so
//! the error names the file, line and column.

use std::ops::Range;

use toml::Spanned;

use crate::checks::{MAX_FILTER_BYTES, check_event_name};
use crate::message::quoted;
use crate::schema::{
    BuffersConfig, Callchain, Config, ContainersConfig, DaemonConfig, EventConfig, HistoryConfig,
    MAX_STACK_SIZE, SnapshotConfig, TrackingConfig,
};
use crate::units::ByteSize;

/// Largest ring the kernel side maps per CPU (`buffers.per_cpu`, `buffers.tracking`).
pub const MAX_RING_BYTES: u64 = 2 << 30;
/// Largest tracking log (`buffers.tracking_log`): it is allocated at start
/// and on every reload that changes it.
pub const MAX_TRACKING_LOG_BYTES: u64 = 4 << 30;
/// Upper bound of `tracking.max_exited_threads` (the kernel's PID_MAX_LIMIT).
pub const MAX_EXITED_THREADS_LIMIT: u64 = 4 << 20;
/// Upper bound of `tracking.max_maps_per_process`.
pub const MAX_MAPS_PER_PROCESS_LIMIT: u64 = 1 << 20;

const LOG_LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];

impl TrackingConfig {
    pub(crate) fn validate(&self, tracking_log: u64) -> Result<(), (Range<usize>, String)> {
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
        let checkpoints = &self.max_checkpoints;
        if !(1..=MAX_CHECKPOINTS_LIMIT).contains(checkpoints.get_ref()) {
            return Err((
                checkpoints.span(),
                format!(
                    "tracking.max_checkpoints = {} is out of range: 1 to {MAX_CHECKPOINTS_LIMIT}",
                    checkpoints.get_ref()
                ),
            ));
        }
        Ok(())
    }
}

/// Smallest `history.max_bytes`: a few segments of a few hundred KiB.
pub const MIN_HISTORY_BYTES: u64 = 1 << 20;
/// Longest `history.max_age`.
pub const MAX_HISTORY_AGE_SECS: u64 = 7 * 86400;

/// A nice value (`key` names it in the error): -20 to 19.
fn check_nice(nice: &Spanned<i32>, key: &str) -> Result<(), (Range<usize>, String)> {
    if (-20..=19).contains(nice.get_ref()) {
        return Ok(());
    }
    Err((
        nice.span(),
        format!(
            "{key} = {} is out of range: nice values are -20 (highest priority) to 19 (lowest)",
            nice.get_ref()
        ),
    ))
}

impl HistoryConfig {
    pub(crate) fn validate(&self) -> Result<(), (Range<usize>, String)> {
        let age = &self.max_age;
        let secs = age.get_ref().get().as_secs_f64();
        if !(10.0..=MAX_HISTORY_AGE_SECS as f64).contains(&secs) {
            return Err((
                age.span(),
                format!(
                    "history.max_age = {} is out of range: 10s to 7days",
                    age.get_ref()
                ),
            ));
        }
        let bytes = &self.max_bytes;
        if bytes.get_ref().bytes() < MIN_HISTORY_BYTES {
            return Err((
                bytes.span(),
                format!(
                    "history.max_bytes = {} is too small: at least {}",
                    bytes.get_ref(),
                    ByteSize(MIN_HISTORY_BYTES)
                ),
            ));
        }
        let level = &self.level;
        if !(1..=22).contains(level.get_ref()) {
            return Err((
                level.span(),
                format!(
                    "history.level = {} is out of range: zstd levels are 1 to 22",
                    level.get_ref()
                ),
            ));
        }
        check_nice(&self.writer_nice, "history.writer_nice")?;
        Ok(())
    }
}

/// Runtime sockets asked at most.
pub const MAX_RUNTIME_SOCKETS: usize = 8;

impl ContainersConfig {
    pub(crate) fn validate(&self) -> Result<(), (Range<usize>, String)> {
        if let Some(extra) = self.runtime_sockets.get(MAX_RUNTIME_SOCKETS) {
            return Err((
                extra.span(),
                format!("containers.runtime_sockets: at most {MAX_RUNTIME_SOCKETS} sockets"),
            ));
        }
        for socket in &self.runtime_sockets {
            let path = socket.get_ref();
            crate::checks::check_path(path)
                .map_err(|why| (socket.span(), format!("containers.runtime_sockets: {why}")))?;
            if !path.is_absolute() {
                return Err((
                    socket.span(),
                    format!(
                        "containers.runtime_sockets: {} is not an absolute path",
                        quoted(&path.to_string_lossy())
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// More checkpoints than this cost memory and save a dump nothing.
const MAX_CHECKPOINTS_LIMIT: u64 = 4096;

impl Config {
    /// Checks what serde cannot: returns the span and message of the first
    /// problem, checking the sections in a fixed order.
    pub(crate) fn validate(&self) -> Result<(), (Range<usize>, String)> {
        self.daemon.validate()?;
        self.buffers.validate()?;
        // The checkpoint interval is bounded by the tracking log's size.
        self.tracking
            .validate(self.buffers.tracking_log.get_ref().bytes())?;
        self.history.validate()?;
        self.containers.validate()?;
        validate_events(&self.events)?;
        crate::trigger::validate_triggers(&self.triggers)?;
        if let Some(fleet) = &self.fleet {
            fleet.get_ref().validate(fleet.span())?;
        }
        self.snapshot.validate()
    }
}

impl DaemonConfig {
    /// `log_level` and `socket_group`; the paths are checked once the
    /// config is loaded, as they are not [`Spanned`](crate::Spanned).
    fn validate(&self) -> Result<(), (Range<usize>, String)> {
        let level = &self.log_level;
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
        if let Some(group) = &self.socket_group
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
        Ok(())
    }
}

impl BuffersConfig {
    /// The rings the kernel maps and the tracking log the daemon allocates.
    fn validate(&self) -> Result<(), (Range<usize>, String)> {
        for (key, ring) in [
            ("buffers.per_cpu", &self.per_cpu),
            ("buffers.tracking", &self.tracking),
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
        let log = &self.tracking_log;
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
        Ok(())
    }
}

/// The `[[event]]` tables: at least one, each valid.
fn validate_events(events: &[Spanned<EventConfig>]) -> Result<(), (Range<usize>, String)> {
    if events.is_empty() {
        return Err((0..0, "at least one [[event]] is needed".into()));
    }
    for ev in events {
        ev.get_ref().validate(ev.span())?;
    }
    Ok(())
}

impl EventConfig {
    /// Its name, filter, and sampling rate; `whole` is the table's span.
    fn validate(&self, whole: Range<usize>) -> Result<(), (Range<usize>, String)> {
        let name = &self.name;
        if let Err(why) = check_event_name(name.get_ref()) {
            return Err((name.span(), why));
        }
        if let Some(filter) = &self.filter
            && filter.len() > MAX_FILTER_BYTES
        {
            return Err((
                whole,
                format!(
                    "event {:?}: the filter is {} bytes long, at most {MAX_FILTER_BYTES} \
                     are allowed",
                    name.get_ref(),
                    filter.len()
                ),
            ));
        }
        self.validate_stack_size()?;
        match (&self.frequency, &self.period) {
            (Some(_), Some(p)) => Err((
                p.span(),
                format!(
                    "event {:?}: give either frequency or period, not both",
                    name.get_ref()
                ),
            )),
            (Some(v), None) | (None, Some(v)) if *v.get_ref() == 0 => Err((
                v.span(),
                format!("event {:?}: must be at least 1", name.get_ref()),
            )),
            _ => Ok(()),
        }
    }
}

impl EventConfig {
    /// `stack_size`: only with dwarf call chains, whole u64s, within what
    /// a sample record holds.
    fn validate_stack_size(&self) -> Result<(), (Range<usize>, String)> {
        let Some(size) = &self.stack_size else {
            return Ok(());
        };
        let name = self.name.get_ref();
        let bytes = size.get_ref().bytes();
        if *self.callchain.get_ref() != Callchain::Dwarf {
            return Err((
                size.span(),
                format!("event {name:?}: stack_size needs callchain = \"dwarf\""),
            ));
        }
        if bytes == 0 || bytes > MAX_STACK_SIZE || bytes % 8 != 0 {
            return Err((
                size.span(),
                format!(
                    "event {name:?}: stack_size must be a multiple of 8 bytes from 8 to \
                     {MAX_STACK_SIZE} (a sample record is at most 64 KiB), not {bytes}"
                ),
            ));
        }
        Ok(())
    }
}

impl SnapshotConfig {
    /// The compression level, the dumping thread's priorities and the
    /// delay after a trigger.
    fn validate(&self) -> Result<(), (Range<usize>, String)> {
        let level = &self.level;
        if !(1..=22).contains(level.get_ref()) {
            return Err((
                level.span(),
                format!(
                    "snapshot.level = {} is out of range: zstd levels are 1 to 22",
                    level.get_ref()
                ),
            ));
        }
        let priority = &self.realtime_priority;
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
        check_nice(&self.writer_nice, "snapshot.writer_nice")?;
        let delay = &self.post_trigger_delay;
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

fn valid_group_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use crate::test_support::{parse, rejected_at};

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
            "[tracking]\nmax_checkpoints = 0\n",
            2,
            19,
            "tracking.max_checkpoints = 0 is out of range: 1 to 4096",
        );
        let cfg = parse("[buffers]\ntracking_log = \"64MiB\"\n").unwrap();
        assert_eq!(
            cfg.tracking
                .effective_checkpoint_interval(cfg.buffers.tracking_log.get_ref().bytes()),
            4 << 20,
            "64MiB of log in at most 16 checkpoints"
        );
        let cfg = parse("[buffers]\ntracking_log = \"4MiB\"\n").unwrap();
        assert_eq!(
            cfg.tracking
                .effective_checkpoint_interval(cfg.buffers.tracking_log.get_ref().bytes()),
            512 << 10,
            "the configured interval when it is wider"
        );
        rejected_at(
            "[tracking]\nmax_exited = 3\n",
            2,
            1,
            "unknown field `max_exited`",
        );
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
    fn writer_nice_out_of_range_is_located() {
        rejected_at(
            "[snapshot]\nwriter_nice = -21\n",
            2,
            15,
            "nice values are -20 (highest priority) to 19",
        );
        rejected_at("[snapshot]\nwriter_nice = 20\n", 2, 15, "out of range");
        rejected_at(
            "[snapshot]\nwriter_nice = \"high\"\n",
            2,
            15,
            "invalid type",
        );
    }

    #[test]
    fn level_out_of_range_is_located() {
        rejected_at("[snapshot]\nlevel = 23\n", 2, 9, "zstd levels are 1 to 22");
        rejected_at("[snapshot]\nlevel = 0\n", 2, 9, "out of range");
    }

    #[test]
    fn callchains_parse_and_a_bad_stack_size_is_located() {
        use crate::schema::Callchain;
        let cfg = parse(
            "[[event]]\nname = \"cpu-clock\"\ncallchain = \"dwarf\"\nstack_size = \"16KiB\"\n\
             [[event]]\nname = \"cycles\"\ncallchain = true\n\
             [[event]]\nname = \"sched:sched_switch\"\ncallchain = \"fp\"\n",
        )
        .unwrap();
        let modes: Vec<Callchain> = cfg
            .events
            .iter()
            .map(|e| *e.get_ref().callchain.get_ref())
            .collect();
        assert_eq!(
            modes,
            [
                Callchain::Dwarf,
                Callchain::FramePointer,
                Callchain::FramePointer
            ]
        );
        let size = cfg.events[0].get_ref().stack_size.as_ref().unwrap();
        assert_eq!(size.get_ref().bytes(), 16 << 10);
        // Printed back as it reads.
        let again = parse(&cfg.to_toml()).unwrap();
        assert_eq!(
            *again.events[0].get_ref().callchain.get_ref(),
            Callchain::Dwarf
        );
        rejected_at(
            "[[event]]\nname = \"cpu-clock\"\ncallchain = \"lbr\"\n",
            3,
            13,
            "expected true, false, \"fp\" or \"dwarf\"",
        );
        rejected_at(
            "[[event]]\nname = \"cpu-clock\"\ncallchain = true\nstack_size = \"8KiB\"\n",
            4,
            14,
            "stack_size needs callchain = \"dwarf\"",
        );
        rejected_at(
            "[[event]]\nname = \"cpu-clock\"\ncallchain = \"dwarf\"\nstack_size = \"64KiB\"\n",
            4,
            14,
            "a multiple of 8 bytes from 8 to 65528",
        );
        rejected_at(
            "[[event]]\nname = \"cpu-clock\"\ncallchain = \"dwarf\"\nstack_size = 1001\n",
            4,
            14,
            "not 1001",
        );
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
    fn history_keys_are_checked_at_their_position() {
        let on =
            parse("[history]\nenabled = true\nmax_age = \"2min\"\nmax_bytes = \"8MiB\"\n").unwrap();
        assert!(on.history.enabled);
        assert_eq!(on.history.max_age.get_ref().get().as_secs(), 120);
        assert_eq!(on.history.max_bytes.get_ref().bytes(), 8 << 20);
        rejected_at(
            "[history]\nmax_age = \"5s\"\n",
            2,
            11,
            "history.max_age = 5s is out of range: 10s to 7days",
        );
        rejected_at(
            "[history]\nmax_bytes = \"64KiB\"\n",
            2,
            13,
            "history.max_bytes = 64KiB is too small: at least 1MiB",
        );
        rejected_at("[history]\nlevel = 23\n", 2, 9, "history.level = 23");
        rejected_at(
            "[history]\nwriter_nice = -21\n",
            2,
            15,
            "history.writer_nice = -21 is out of range",
        );
        assert_eq!(*on.history.writer_nice.get_ref(), -10);
        rejected_at("[history]\ndir = \"\"\n", 2, 7, "history.dir is empty");
        rejected_at(
            "[history]\nmax_days = 3\n",
            2,
            1,
            "unknown field `max_days`",
        );
    }
}
