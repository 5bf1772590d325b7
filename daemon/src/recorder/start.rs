//! From the config to a running [`Recorder`]: the `[[event]]` tables
//! resolved, their filters parsed by the kernel, the rings opened. Errors
//! keep the index of the `[[event]]` at fault, so the config layer can
//! point at its line.

use flightrec_config::{Callchain, Config, DEFAULT_STACK_SIZE};

use super::{CaptureError, Recorder, RecorderConfig};
use crate::abi::{attr_flag, sample};
use crate::perf::PerfError;
use crate::perf::event::{EventError, EventKind, EventSpec, ResolvedEvent};
use crate::perf::sample_ring::check_filter;
use crate::tracking::process_table::TrackingLimits;

/// Why the recorder could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The `[[event]]` at `index` names no event this kernel has, or asks
    /// for a rate it refuses.
    #[error("cannot start recording: {source}")]
    Event {
        index: usize,
        #[source]
        source: EventError,
    },
    /// The kernel refused the filter of the `[[event]]` at `index`.
    #[error("cannot start recording: {source}")]
    Filter {
        index: usize,
        #[source]
        source: PerfError,
    },
    #[error("cannot start recording: {0}")]
    Recorder(#[from] CaptureError),
}

impl StartError {
    /// The index of the `[[event]]` at fault, when one is.
    pub fn event_index(&self) -> Option<usize> {
        match self {
            StartError::Event { index, .. } | StartError::Filter { index, .. } => Some(*index),
            StartError::Recorder(_) => None,
        }
    }

    /// What went wrong, without the "cannot start recording" prefix.
    pub fn reason(&self) -> String {
        match self {
            StartError::Event { source, .. } => source.to_string(),
            StartError::Filter { source, .. } => source.to_string(),
            StartError::Recorder(e) => e.to_string(),
        }
    }
}

/// An event as opened, as `Status` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventInfo {
    pub name: String,
    pub kind: String,
    pub period: u64,
    pub frequency: u64,
    pub callchain: bool,
    /// Bytes of user stack each sample copies (`callchain = "dwarf"`).
    pub user_stack_bytes: u32,
    pub filter: String,
}

/// The `[[event]]` tables as the recorder takes them.
pub fn event_specs(config: &Config) -> Vec<EventSpec> {
    config
        .events
        .iter()
        .map(|e| {
            let e = e.get_ref();
            EventSpec {
                name: e.name.get_ref().clone(),
                period: e.period.as_ref().map(|p| *p.get_ref()),
                frequency: e.frequency.as_ref().map(|f| *f.get_ref()),
                callchain: e.callchain.get_ref().recorded(),
                user_stack: (*e.callchain.get_ref() == Callchain::Dwarf).then(|| {
                    let size = e
                        .stack_size
                        .as_ref()
                        .map_or(DEFAULT_STACK_SIZE, |s| *s.get_ref());
                    // The config checked it: at most MAX_STACK_SIZE.
                    u32::try_from(size.bytes()).unwrap_or(u32::MAX)
                }),
                context_switch: e.context_switch,
                filter: e.filter.clone(),
                // The recorder's own setting decides (`RecorderConfig::cgroups`).
                cgroup: false,
            }
        })
        .collect()
}

pub fn recorder_config(config: &Config) -> RecorderConfig {
    RecorderConfig {
        events: event_specs(config),
        ring_bytes_per_cpu: config.buffers.per_cpu.get_ref().bytes(),
        tracking_ring_bytes_per_cpu: config.buffers.tracking.get_ref().bytes(),
        tracking_log_bytes: config.buffers.tracking_log.get_ref().bytes(),
        tracking_limits: TrackingLimits {
            max_exited_threads: usize::try_from(*config.tracking.max_exited_threads.get_ref())
                .unwrap_or(usize::MAX),
            max_maps_per_process: usize::try_from(*config.tracking.max_maps_per_process.get_ref())
                .unwrap_or(usize::MAX),
        },
        tracking_checkpoint_bytes: config
            .tracking
            .effective_checkpoint_interval(config.buffers.tracking_log.get_ref().bytes()),
        lossless_freeze: config.buffers.lossless_freeze,
        // As large as a memory ring, and at least seconds of a busy CPU
        // (4 MiB: about 3 s under `perf bench sched messaging -g 10`):
        // the writer drains it every fraction of a second, and has that
        // long to catch up when the machine keeps it from running.
        cgroups: cgroup_hierarchy(config),
        cgroups_off: if !config.containers.cgroups {
            Some("[containers] cgroups = false".into())
        } else if crate::host::cgroups::this_hierarchy().is_none() {
            Some("no cgroup2 mount and no v1 perf_event mount".into())
        } else {
            None
        },
        tap: config.history.enabled,
    }
}

/// Resolves every event (names, tracefs, sample rate limits).
/// Where the cgroups samples name live, with `[containers] cgroups` on;
/// None (said once, at start) on a host without a hierarchy to name them
/// from.
fn cgroup_hierarchy(config: &Config) -> Option<crate::host::cgroups::CgroupHierarchy> {
    if !config.containers.cgroups {
        return None;
    }
    let found = crate::host::cgroups::this_hierarchy();
    if found.is_none() {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            tracing::warn!(
                "containers.cgroups: no cgroup2 mount and no v1 perf_event mount: samples are \
                 recorded without their cgroup"
            );
        });
    }
    found
}

fn resolve_all(config: &Config) -> Result<Vec<ResolvedEvent>, StartError> {
    event_specs(config)
        .iter()
        .enumerate()
        .map(|(index, spec)| {
            spec.resolve()
                .map_err(|source| StartError::Event { index, source })
        })
        .collect()
}

/// Has the kernel parse every tracepoint filter: an event with a filter is
/// opened (disabled, no ring) on the first online CPU and closed again.
fn check_filters(resolved: &[ResolvedEvent]) -> Result<(), StartError> {
    if resolved.iter().all(|r| r.filter.is_none()) {
        return Ok(());
    }
    let cpu = crate::perf::cpus::online_cpus()
        .ok()
        .and_then(|cpus| cpus.first().copied())
        .unwrap_or(0);
    for (index, r) in resolved.iter().enumerate() {
        if r.filter.is_some() {
            check_filter(r, cpu).map_err(|source| StartError::Filter { index, source })?;
        }
    }
    Ok(())
}

/// Checks the configured events against the kernel: names, rates, and
/// filters (which the kernel parses when they are set on an open event).
pub fn check_events(config: &Config) -> Result<(), StartError> {
    check_filters(&resolve_all(config)?)
}

/// Opens the rings the config asks for, once its events pass the checks.
pub fn start(config: &Config) -> Result<Recorder, StartError> {
    check_filters(&resolve_all(config)?)?;
    Ok(Recorder::start(&recorder_config(config))?)
}

pub(super) fn event_info(r: &ResolvedEvent) -> EventInfo {
    let kind = match r.kind {
        EventKind::Tracepoint { .. } => "tracepoint",
        EventKind::Software { .. } => "software",
        EventKind::Hardware { .. } => "hardware",
    };
    let freq = r.attr.flags & attr_flag::FREQ != 0;
    EventInfo {
        name: r.name.clone(),
        kind: kind.into(),
        period: if freq {
            0
        } else {
            r.attr.sample_period_or_freq
        },
        frequency: if freq {
            r.attr.sample_period_or_freq
        } else {
            0
        },
        callchain: r.attr.sample_type & sample::CALLCHAIN != 0,
        user_stack_bytes: if r.attr.sample_type & sample::STACK_USER != 0 {
            r.attr.sample_stack_user
        } else {
            0
        },
        filter: r.filter.clone().unwrap_or_default(),
    }
}
