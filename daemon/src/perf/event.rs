//! Event specs as perf users write them, resolved to kernel attrs.
//!
//! Names: tracepoints `system:name` (id from tracefs
//! `events/<system>/<name>/id`), software events (`cpu-clock`, `task-clock`,
//! `context-switches`/`cs`, `cpu-migrations`/`migrations`,
//! `page-faults`/`faults`, `minor-faults`, `major-faults`,
//! `alignment-faults`, `emulation-faults`, `dummy`) and hardware events
//! (`cycles`/`cpu-cycles`, `instructions`, `cache-references`,
//! `cache-misses`, `branches`/`branch-instructions`, `branch-misses`,
//! `bus-cycles`, `stalled-cycles-frontend`, `stalled-cycles-backend`,
//! `ref-cycles`).
//!
//! Defaults follow `perf record`: tracepoints sample every hit (period 1),
//! every other event samples at 4000 Hz (perf's `-F` default), lowered to
//! `kernel.perf_event_max_sample_rate` when that is smaller. An explicit
//! frequency above that limit is an error, checked before any syscall.

use std::io;
use std::path::{Path, PathBuf};

use crate::abi::{EventAttr, attr_flag, event_type, hw_event, read_format, sample, sw_event};

/// Where tracefs is (and is mounted when missing).
pub const TRACEFS: &str = "/sys/kernel/tracing";
/// Sampling frequency of non-tracepoint events when none is given (perf's).
pub const DEFAULT_FREQUENCY: u64 = 4000;
const MAX_SAMPLE_RATE: &str = "/proc/sys/kernel/perf_event_max_sample_rate";
const PMU_DEVICES: &str = "/sys/bus/event_source/devices";

/// One configured event, as written in the config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventSpec {
    /// `sched:sched_switch`, `cpu-clock`, `cycles`...
    pub name: String,
    /// Sample every `period` events. Exclusive with `frequency`.
    pub period: Option<u64>,
    /// Sample about `frequency` times a second (the kernel adapts the period).
    pub frequency: Option<u64>,
    /// Record kernel and user call chains with each sample.
    pub callchain: bool,
    /// With `callchain`: the user part as the user registers and a copy of
    /// this many bytes of the user stack (perf's `--call-graph dwarf`),
    /// not the kernel's frame-pointer walk.
    pub user_stack: Option<u32>,
    /// Record every context switch (`attr.context_switch`).
    pub context_switch: bool,
    /// Tracepoint filter (`PERF_EVENT_IOC_SET_FILTER`), e.g. `prev_pid != 0`.
    pub filter: Option<String>,
    /// Record each sample's cgroup id (`PERF_SAMPLE_CGROUP`).
    pub cgroup: bool,
}

/// What kind of kernel event a name denotes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    Tracepoint {
        system: String,
        name: String,
        id: u64,
    },
    Software {
        config: u64,
    },
    Hardware {
        config: u64,
    },
}

/// An event checked against this machine, with the attr to open it with on
/// flightrec's overwrite rings (disabled, `write_backward`, `sample_id_all`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedEvent {
    /// The name as the user wrote it.
    pub name: String,
    pub kind: EventKind,
    pub attr: EventAttr,
    pub filter: Option<String>,
}

impl ResolvedEvent {
    /// `(system, name)` of a tracepoint.
    pub fn tracepoint(&self) -> Option<(String, String)> {
        match &self.kind {
            EventKind::Tracepoint { system, name, .. } => Some((system.clone(), name.clone())),
            _ => None,
        }
    }

    pub fn is_hardware(&self) -> bool {
        matches!(self.kind, EventKind::Hardware { .. })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error(
        "unknown event '{event}': not a tracepoint (system:name), software event \
         (cpu-clock, task-clock, context-switches, ...) or hardware event (cycles, instructions, ...)"
    )]
    Unknown { event: String },
    #[error("event name '{event}' is not usable: {reason}")]
    BadName { event: String, reason: &'static str },
    #[error("tracepoint '{event}' does not exist: {} is missing", path.display())]
    TracepointMissing { event: String, path: PathBuf },
    #[error("reading the id of tracepoint '{event}' from {} failed: {detail}", path.display())]
    TracepointId {
        event: String,
        path: PathBuf,
        detail: String,
    },
    #[error("tracefs is not available at {path} ({detail}); tracepoint '{event}' needs it")]
    Tracefs {
        event: String,
        path: String,
        detail: String,
    },
    #[error(
        "hardware event '{event}' is not available: this machine has no CPU PMU \
         ({PMU_DEVICES}/cpu does not exist)"
    )]
    NoPmu { event: String },
    #[error("event '{event}' sets both a period and a frequency; choose one")]
    PeriodAndFrequency { event: String },
    #[error("event '{event}': {what} must be at least 1")]
    Zero { event: String, what: &'static str },
    #[error(
        "event '{event}': frequency {frequency} Hz is above kernel.perf_event_max_sample_rate \
         ({max} Hz)"
    )]
    FrequencyTooHigh {
        event: String,
        frequency: u64,
        max: u64,
    },
    #[error("event '{event}': reading {MAX_SAMPLE_RATE} failed: {detail}")]
    MaxSampleRate { event: String, detail: String },
    #[error("event '{event}': a filter only applies to tracepoints")]
    FilterNotTracepoint { event: String },
    #[error("event '{event}': the filter is empty or contains a NUL byte")]
    BadFilter { event: String },
}

/// The files resolution consults; tests point them into a temp dir.
#[derive(Debug, Clone)]
pub struct SystemPaths {
    pub tracefs: PathBuf,
    pub pmu_devices: PathBuf,
    pub max_sample_rate: PathBuf,
    /// Mount tracefs at `tracefs` when its `events` dir is missing.
    pub mount_tracefs: bool,
}

impl Default for SystemPaths {
    fn default() -> Self {
        Self {
            tracefs: TRACEFS.into(),
            pmu_devices: PMU_DEVICES.into(),
            max_sample_rate: MAX_SAMPLE_RATE.into(),
            mount_tracefs: true,
        }
    }
}

fn software_config(name: &str) -> Option<u64> {
    Some(match name {
        "cpu-clock" => sw_event::CPU_CLOCK,
        "task-clock" => sw_event::TASK_CLOCK,
        "page-faults" | "faults" => sw_event::PAGE_FAULTS,
        "context-switches" | "cs" => sw_event::CONTEXT_SWITCHES,
        "cpu-migrations" | "migrations" => sw_event::CPU_MIGRATIONS,
        "minor-faults" => sw_event::PAGE_FAULTS_MIN,
        "major-faults" => sw_event::PAGE_FAULTS_MAJ,
        "alignment-faults" => sw_event::ALIGNMENT_FAULTS,
        "emulation-faults" => sw_event::EMULATION_FAULTS,
        "dummy" => sw_event::DUMMY,
        _ => return None,
    })
}

fn hardware_config(name: &str) -> Option<u64> {
    Some(match name {
        "cycles" | "cpu-cycles" => hw_event::CPU_CYCLES,
        "instructions" => hw_event::INSTRUCTIONS,
        "cache-references" => hw_event::CACHE_REFERENCES,
        "cache-misses" => hw_event::CACHE_MISSES,
        "branches" | "branch-instructions" => hw_event::BRANCH_INSTRUCTIONS,
        "branch-misses" => hw_event::BRANCH_MISSES,
        "bus-cycles" => hw_event::BUS_CYCLES,
        "stalled-cycles-frontend" | "idle-cycles-frontend" => hw_event::STALLED_CYCLES_FRONTEND,
        "stalled-cycles-backend" | "idle-cycles-backend" => hw_event::STALLED_CYCLES_BACKEND,
        "ref-cycles" => hw_event::REF_CPU_CYCLES,
        _ => return None,
    })
}

/// A tracefs path component: no separators, no dot names, no wildcards.
fn check_component(event: &str, part: &str) -> Result<(), EventError> {
    let bad = |reason| EventError::BadName {
        event: event.to_string(),
        reason,
    };
    if part.is_empty() {
        return Err(bad(
            "tracepoint names are system:name with both parts non-empty",
        ));
    }
    if part.contains(['*', '?', '[', '{', ',']) {
        return Err(bad(
            "wildcards and lists are not supported; name one tracepoint",
        ));
    }
    if part == "." || part == ".." || !part.chars().all(|c| c.is_ascii_graphic() && c != '/') {
        return Err(bad(
            "tracepoint names may not contain '/', spaces or dot names",
        ));
    }
    Ok(())
}

impl EventSpec {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            ..Self::default()
        }
    }

    /// Resolves the name on this machine and builds the attr.
    pub fn resolve(&self) -> Result<ResolvedEvent, EventError> {
        self.resolve_with(&SystemPaths::default())
    }

    pub fn resolve_with(&self, paths: &SystemPaths) -> Result<ResolvedEvent, EventError> {
        let event = self.name.trim();
        let err_event = || event.to_string();
        if event.is_empty() {
            return Err(EventError::BadName {
                event: err_event(),
                reason: "the name is empty",
            });
        }
        let kind = if let Some((system, name)) = event.split_once(':') {
            check_component(event, system)?;
            check_component(event, name)?;
            let id = tracepoint_id(event, system, name, paths)?;
            EventKind::Tracepoint {
                system: system.to_string(),
                name: name.to_string(),
                id,
            }
        } else if let Some(config) = software_config(event) {
            EventKind::Software { config }
        } else if let Some(config) = hardware_config(event) {
            if !has_cpu_pmu(&paths.pmu_devices) {
                return Err(EventError::NoPmu { event: err_event() });
            }
            EventKind::Hardware { config }
        } else {
            return Err(EventError::Unknown { event: err_event() });
        };
        let is_tracepoint = matches!(kind, EventKind::Tracepoint { .. });

        if let Some(filter) = &self.filter {
            if !is_tracepoint {
                return Err(EventError::FilterNotTracepoint { event: err_event() });
            }
            if filter.trim().is_empty() || filter.contains('\0') {
                return Err(EventError::BadFilter { event: err_event() });
            }
        }

        let (period_or_freq, freq) = match (self.period, self.frequency) {
            (Some(_), Some(_)) => {
                return Err(EventError::PeriodAndFrequency { event: err_event() });
            }
            (Some(0), None) => {
                return Err(EventError::Zero {
                    event: err_event(),
                    what: "the period",
                });
            }
            (None, Some(0)) => {
                return Err(EventError::Zero {
                    event: err_event(),
                    what: "the frequency",
                });
            }
            (Some(period), None) => (period, false),
            (None, Some(frequency)) => {
                let max = max_sample_rate(event, &paths.max_sample_rate)?;
                if frequency > max {
                    return Err(EventError::FrequencyTooHigh {
                        event: err_event(),
                        frequency,
                        max,
                    });
                }
                (frequency, true)
            }
            (None, None) if is_tracepoint => (1, false),
            (None, None) => {
                let max = max_sample_rate(event, &paths.max_sample_rate)?;
                (DEFAULT_FREQUENCY.min(max).max(1), true)
            }
        };

        let (type_, config) = match &kind {
            EventKind::Tracepoint { id, .. } => (event_type::TRACEPOINT, *id),
            EventKind::Software { config } => (event_type::SOFTWARE, *config),
            EventKind::Hardware { config } => (event_type::HARDWARE, *config),
        };
        let mut sample_type = sample::IDENTIFIER | sample::TID | sample::TIME | sample::CPU;
        if is_tracepoint {
            // IP as perf record sets it: without it perf report files every
            // tracepoint sample under `[unknown] 0000000000000000`.
            sample_type |= sample::IP | sample::RAW;
        } else {
            // A sampled address, and the period so frequency-mode samples
            // weigh right in perf report.
            sample_type |= sample::IP | sample::PERIOD;
        }
        if self.callchain {
            sample_type |= sample::IP | sample::CALLCHAIN;
        }
        let (mut sample_regs_user, mut sample_stack_user) = (0, 0);
        if let Some(bytes) = self.user_stack {
            // As perf records `--call-graph dwarf`: the kernel's part of the
            // chain, the user registers an unwinder starts from and the
            // stack it reads.
            sample_type |= sample::IP | sample::CALLCHAIN | sample::REGS_USER | sample::STACK_USER;
            sample_regs_user = crate::abi::USER_REGS_MASK;
            sample_stack_user = bytes;
        }
        if self.cgroup {
            sample_type |= sample::CGROUP;
        }
        let mut flags = attr_flag::DISABLED
            | attr_flag::SAMPLE_ID_ALL
            | attr_flag::WRITE_BACKWARD
            | attr_flag::USE_CLOCKID;
        if freq {
            flags |= attr_flag::FREQ;
        }
        if self.context_switch {
            flags |= attr_flag::CONTEXT_SWITCH;
        }
        if self.user_stack.is_some() {
            flags |= attr_flag::EXCLUDE_CALLCHAIN_USER;
        }
        let attr = EventAttr {
            type_,
            config,
            sample_period_or_freq: period_or_freq,
            sample_type,
            read_format: read_format::ID | read_format::LOST,
            flags,
            clockid: crate::abi::SAMPLE_CLOCKID,
            sample_regs_user,
            sample_stack_user,
            ..EventAttr::default()
        };
        Ok(ResolvedEvent {
            name: event.to_string(),
            kind,
            attr,
            filter: self.filter.clone(),
        })
    }
}

fn has_cpu_pmu(devices: &Path) -> bool {
    // `cpu` on x86, `cpu_core`/`cpu_atom` on hybrid x86, `armv8_*` on arm64.
    ["cpu", "cpu_core", "cpu_atom"]
        .iter()
        .any(|name| devices.join(name).exists())
        || std::fs::read_dir(devices).is_ok_and(|dir| {
            dir.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("armv"))
        })
}

fn max_sample_rate(event: &str, path: &Path) -> Result<u64, EventError> {
    let text = std::fs::read_to_string(path).map_err(|e| EventError::MaxSampleRate {
        event: event.to_string(),
        detail: e.to_string(),
    })?;
    text.trim().parse().map_err(|_| EventError::MaxSampleRate {
        event: event.to_string(),
        detail: format!("'{}' is not a number", text.trim()),
    })
}

fn tracepoint_id(
    event: &str,
    system: &str,
    name: &str,
    paths: &SystemPaths,
) -> Result<u64, EventError> {
    let events = paths.tracefs.join("events");
    if !events.is_dir() {
        ensure_tracefs(event, paths)?;
    }
    let path = events.join(system).join(name).join("id");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(EventError::TracepointMissing {
                event: event.to_string(),
                path,
            });
        }
        Err(e) => {
            return Err(EventError::TracepointId {
                event: event.to_string(),
                path,
                detail: e.to_string(),
            });
        }
    };
    text.trim().parse().map_err(|_| EventError::TracepointId {
        event: event.to_string(),
        detail: format!("'{}' is not a number", text.trim()),
        path,
    })
}

fn ensure_tracefs(event: &str, paths: &SystemPaths) -> Result<(), EventError> {
    let target = paths.tracefs.to_string_lossy().into_owned();
    let fail = |detail: String| EventError::Tracefs {
        event: event.to_string(),
        path: target.clone(),
        detail,
    };
    if !paths.mount_tracefs {
        return Err(fail("it has no events directory".into()));
    }
    super::sys::mount_tracefs(&target).map_err(|e| fail(format!("mounting it failed: {e}")))?;
    if paths.tracefs.join("events").is_dir() {
        Ok(())
    } else {
        Err(fail("mounted, but it still has no events directory".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct FakeSystem {
        dir: tempfile::TempDir,
    }

    impl FakeSystem {
        fn new(pmu: bool, max_rate: &str) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let tp = dir.path().join("tracing/events/sched/sched_switch");
            std::fs::create_dir_all(&tp).unwrap();
            std::fs::write(tp.join("id"), "317\n").unwrap();
            std::fs::create_dir_all(dir.path().join("devices/software")).unwrap();
            if pmu {
                std::fs::create_dir_all(dir.path().join("devices/cpu")).unwrap();
            }
            std::fs::write(dir.path().join("max_rate"), max_rate).unwrap();
            Self { dir }
        }

        fn paths(&self) -> SystemPaths {
            SystemPaths {
                tracefs: self.dir.path().join("tracing"),
                pmu_devices: self.dir.path().join("devices"),
                max_sample_rate: self.dir.path().join("max_rate"),
                mount_tracefs: false,
            }
        }

        fn resolve(&self, spec: &EventSpec) -> Result<ResolvedEvent, EventError> {
            spec.resolve_with(&self.paths())
        }
    }

    #[test]
    fn tracepoint_gets_its_id_period_one_ip_and_raw() {
        let sys = FakeSystem::new(false, "100000\n");
        let ev = sys.resolve(&EventSpec::new("sched:sched_switch")).unwrap();
        assert_eq!(ev.attr.type_, event_type::TRACEPOINT);
        assert_eq!(ev.attr.config, 317);
        assert_eq!(ev.attr.sample_period_or_freq, 1);
        assert!(!ev.attr.has_flag(attr_flag::FREQ));
        assert!(ev.attr.has_flag(attr_flag::WRITE_BACKWARD));
        assert!(ev.attr.has_flag(attr_flag::SAMPLE_ID_ALL));
        assert_eq!(
            ev.attr.sample_type,
            sample::IDENTIFIER
                | sample::IP
                | sample::TID
                | sample::TIME
                | sample::CPU
                | sample::RAW
        );
        assert_eq!(ev.attr.read_format, read_format::ID | read_format::LOST);
        assert_eq!(
            ev.tracepoint(),
            Some(("sched".to_string(), "sched_switch".to_string()))
        );
    }

    #[test]
    fn software_aliases_and_default_frequency() {
        let sys = FakeSystem::new(false, "100000");
        for (alias, config) in [
            ("cs", sw_event::CONTEXT_SWITCHES),
            ("context-switches", sw_event::CONTEXT_SWITCHES),
            ("migrations", sw_event::CPU_MIGRATIONS),
            ("faults", sw_event::PAGE_FAULTS),
            ("major-faults", sw_event::PAGE_FAULTS_MAJ),
            ("cpu-clock", sw_event::CPU_CLOCK),
        ] {
            let ev = sys.resolve(&EventSpec::new(alias)).unwrap();
            assert_eq!(
                (ev.attr.type_, ev.attr.config),
                (event_type::SOFTWARE, config)
            );
            assert_eq!(ev.attr.sample_period_or_freq, DEFAULT_FREQUENCY);
            assert!(ev.attr.has_flag(attr_flag::FREQ));
            assert_ne!(ev.attr.sample_type & sample::IP, 0);
        }
        // The default frequency drops to a lower kernel limit.
        let low = FakeSystem::new(false, "1000");
        let ev = low.resolve(&EventSpec::new("cpu-clock")).unwrap();
        assert_eq!(ev.attr.sample_period_or_freq, 1000);
    }

    #[test]
    fn dwarf_callchains_ask_for_user_registers_and_stack_as_perf_does() {
        let sys = FakeSystem::new(false, "100000");
        let spec = EventSpec {
            callchain: true,
            user_stack: Some(8192),
            ..EventSpec::new("cpu-clock")
        };
        let ev = sys.resolve(&spec).unwrap();
        let wanted = sample::CALLCHAIN | sample::REGS_USER | sample::STACK_USER;
        assert_eq!(ev.attr.sample_type & wanted, wanted);
        assert_eq!(ev.attr.sample_stack_user, 8192);
        assert_eq!(ev.attr.sample_regs_user, crate::abi::USER_REGS_MASK);
        // The kernel's part of the chain only: the user part is unwound.
        assert!(ev.attr.has_flag(attr_flag::EXCLUDE_CALLCHAIN_USER));
        let fp = sys
            .resolve(&EventSpec {
                user_stack: None,
                ..spec
            })
            .unwrap();
        assert_eq!(fp.attr.sample_type & sample::STACK_USER, 0);
        assert_eq!(
            (fp.attr.sample_regs_user, fp.attr.sample_stack_user),
            (0, 0)
        );
        assert!(!fp.attr.has_flag(attr_flag::EXCLUDE_CALLCHAIN_USER));
    }

    #[test]
    fn period_frequency_and_callchain() {
        let sys = FakeSystem::new(false, "100000");
        let spec = EventSpec {
            period: Some(10_000),
            callchain: true,
            ..EventSpec::new("task-clock")
        };
        let ev = sys.resolve(&spec).unwrap();
        assert_eq!(ev.attr.sample_period_or_freq, 10_000);
        assert!(!ev.attr.has_flag(attr_flag::FREQ));
        assert_ne!(ev.attr.sample_type & sample::CALLCHAIN, 0);
        assert!(!ev.attr.has_flag(attr_flag::CONTEXT_SWITCH));
        let switches = EventSpec {
            context_switch: true,
            ..spec.clone()
        };
        assert!(
            sys.resolve(&switches)
                .unwrap()
                .attr
                .has_flag(attr_flag::CONTEXT_SWITCH)
        );

        let both = EventSpec {
            period: Some(1),
            frequency: Some(1),
            ..EventSpec::new("cpu-clock")
        };
        assert!(matches!(
            sys.resolve(&both),
            Err(EventError::PeriodAndFrequency { .. })
        ));
        let too_fast = EventSpec {
            frequency: Some(200_000),
            ..EventSpec::new("cpu-clock")
        };
        assert_eq!(
            sys.resolve(&too_fast).unwrap_err().to_string(),
            "event 'cpu-clock': frequency 200000 Hz is above kernel.perf_event_max_sample_rate (100000 Hz)"
        );
        let zero = EventSpec {
            period: Some(0),
            ..EventSpec::new("sched:sched_switch")
        };
        assert!(matches!(sys.resolve(&zero), Err(EventError::Zero { .. })));
    }

    #[test]
    fn errors_name_the_event_and_reason() {
        let sys = FakeSystem::new(false, "100000");
        let msg = |spec: EventSpec| sys.resolve(&spec).unwrap_err().to_string();
        assert!(msg(EventSpec::new("bogus")).starts_with("unknown event 'bogus'"));
        let missing = msg(EventSpec::new("sched:nope"));
        assert!(
            missing.starts_with("tracepoint 'sched:nope' does not exist"),
            "{missing}"
        );
        assert!(
            missing.contains("events/sched/nope/id is missing"),
            "{missing}"
        );
        assert_eq!(
            msg(EventSpec::new("cycles")),
            "hardware event 'cycles' is not available: this machine has no CPU PMU \
             (/sys/bus/event_source/devices/cpu does not exist)"
        );
        assert!(msg(EventSpec::new("../x:y")).contains("may not contain '/'"));
        assert!(msg(EventSpec::new("syscalls:*")).contains("wildcards"));
        assert!(msg(EventSpec::new("sched:")).contains("non-empty"));
        let filtered = EventSpec {
            filter: Some("pid == 1".into()),
            ..EventSpec::new("cpu-clock")
        };
        assert_eq!(
            msg(filtered),
            "event 'cpu-clock': a filter only applies to tracepoints"
        );
    }

    #[test]
    fn hardware_resolves_when_a_pmu_exists() {
        let sys = FakeSystem::new(true, "100000");
        let ev = sys.resolve(&EventSpec::new("instructions")).unwrap();
        assert!(ev.is_hardware());
        assert_eq!(ev.attr.config, hw_event::INSTRUCTIONS);
    }
}
