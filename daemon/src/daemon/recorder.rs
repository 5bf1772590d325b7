//! The real [`Engine`]: kernel rings (`snapshot::capture::Recorder`) and the
//! perf.data writer (`snapshot::output`).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use flightrec_config::Config;

use super::engine::{CpuSummary, DumpOutput, Engine, EngineError, EngineStatus, EventInfo};
use crate::abi::{attr_flag, sample};
use crate::perf::event::{EventKind, EventSpec, ResolvedEvent};
use crate::perf::sample_ring::check_filter;
use crate::snapshot::HostInfo;
use crate::snapshot::capture::{Recorder, RecorderConfig};
use crate::snapshot::output::{self, SnapshotError};
use crate::snapshot::perfdata::WriteOptions;
use crate::snapshot::reader::ReadError;
use crate::tracking::process_table::TrackingLimits;

/// The `[[event]]` tables as the capture side takes them.
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
                callchain: e.callchain,
                filter: e.filter.clone(),
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
        tracking_checkpoint_bytes: config.tracking.checkpoint_interval.get_ref().bytes(),
    }
}

/// Resolves every event (names, tracefs, sample rate limits); an error
/// names the index of the `[[event]]` at fault.
fn resolve_all(config: &Config) -> Result<Vec<ResolvedEvent>, EngineError> {
    event_specs(config)
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            spec.resolve().map_err(|e| EngineError::Start {
                message: e.to_string(),
                event: Some(i),
            })
        })
        .collect()
}

/// Has the kernel parse every tracepoint filter: an event with a filter is
/// opened (disabled, no ring) on the first online CPU and closed again. A
/// refusal names the index of its `[[event]]`.
fn check_filters(resolved: &[ResolvedEvent]) -> Result<(), EngineError> {
    if resolved.iter().all(|r| r.filter.is_none()) {
        return Ok(());
    }
    let cpu = crate::perf::cpus::online_cpus()
        .ok()
        .and_then(|cpus| cpus.first().copied())
        .unwrap_or(0);
    for (i, r) in resolved.iter().enumerate() {
        if r.filter.is_some() {
            check_filter(r, cpu).map_err(|e| EngineError::Start {
                message: e.to_string(),
                event: Some(i),
            })?;
        }
    }
    Ok(())
}

/// Checks the configured events against the kernel: names, rates, and
/// filters (which the kernel parses when they are set on an open event).
pub fn check_events(config: &Config) -> Result<(), EngineError> {
    check_filters(&resolve_all(config)?)
}

fn event_info(r: &ResolvedEvent) -> EventInfo {
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
        filter: r.filter.clone().unwrap_or_default(),
    }
}

/// Rings running, ready to dump.
pub struct RecorderEngine {
    recorder: Recorder,
    host: Arc<HostInfo>,
    events: Vec<EventInfo>,
}

/// Opens the rings the config asks for.
pub fn start(config: &Config) -> Result<Box<dyn Engine>, EngineError> {
    let resolved = resolve_all(config)?;
    check_filters(&resolved)?;
    let recorder = Recorder::start(&recorder_config(config)).map_err(|e| EngineError::Start {
        message: e.to_string(),
        event: None,
    })?;
    // Host facts (and the tracepoint formats) are gathered once: a dump
    // then reads nothing from /sys or /proc.
    let host = HostInfo::gather_for(recorder.events()).map_err(|e| EngineError::Start {
        message: format!("gathering host facts: {e}"),
        event: None,
    })?;
    Ok(Box::new(RecorderEngine {
        recorder,
        host: Arc::new(host),
        events: resolved.iter().map(event_info).collect(),
    }))
}

impl Engine for RecorderEngine {
    fn dump(
        &self,
        dir: &Path,
        file_name: &str,
        compression: Option<i32>,
    ) -> Result<DumpOutput, EngineError> {
        let started = Instant::now();
        let capture = self
            .recorder
            .capture()
            .map_err(|e| EngineError::Capture(e.to_string()))?;
        let capture_time = started.elapsed();
        let opts = WriteOptions {
            compression,
            host: Some(self.host.clone()),
        };
        let written = output::write_snapshot(&capture, &opts, dir, file_name).map_err(|e| {
            EngineError::Write {
                disk_full: e.is_disk_full(),
                message: e.to_string(),
            }
        })?;
        Ok(DumpOutput {
            bytes: written.bytes,
            cpus: capture
                .cpus
                .iter()
                .map(|c| CpuSummary {
                    cpu: c.cpu,
                    records: c.record_count,
                    bytes: c.records.len() as u64,
                    lost: c.lost_while_paused,
                    oldest_ns: c.oldest_ns.unwrap_or(0),
                    newest_ns: c.newest_ns.unwrap_or(0),
                    pause: c.pause,
                    lost_since_start: c.lost_since_start,
                })
                .collect(),
            tracking_records: capture.tracking_record_count,
            capture: capture_time,
            write: written.elapsed,
        })
    }

    fn status(&self) -> EngineStatus {
        let s = self.recorder.status();
        EngineStatus {
            cpus: s
                .cpus
                .iter()
                .map(|c| (c.cpu, c.lost_samples, c.lost_tracking_records))
                .collect(),
            log_capacity_bytes: s.tracking_log.capacity,
            log_used_bytes: s.tracking_log.used,
            log_records: s.tracking_log.records,
            evicted_records: s.tracking_log.evicted,
            processes: s.processes.threads as u64,
            exited_threads: s.processes.exited_threads as u64,
            max_exited_threads: s.tracking_limits.max_exited_threads as u64,
            max_maps_per_process: s.tracking_limits.max_maps_per_process as u64,
            exited_threads_dropped: s.tracking_dropped.exited_threads,
            maps_dropped: s.tracking_dropped.maps,
            checkpoints: s.tracking_log.checkpoints,
        }
    }

    fn events(&self) -> Vec<EventInfo> {
        self.events.clone()
    }
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
