//! Conversion between the control plane's types and the wire: replies and
//! events to protobuf messages, typed errors to gRPC codes.

use std::time::Duration;

use flightrec_proto::v1 as pb;
use tonic::Status;

use crate::control::ReloadError;
use crate::control::snapshots::{CompressError, ListError, RotateError};
use crate::control::status::{StatusError, StatusReport};
use crate::dump::{DumpDone, DumpError, DumpTimings};
use crate::events::{Event, Stamped};
use crate::recorder::EventInfo;
use crate::store::{SnapshotInfo, StoreError};
use crate::time::{SampleTime, WallTime};

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// ns since the Unix epoch on the wire, 0 for none.
fn unix_ns(t: Option<WallTime>) -> i64 {
    t.map_or(0, WallTime::as_unix_nanos)
}

/// Sample-clock ns on the wire, 0 for none.
fn sample_ns(t: Option<SampleTime>) -> u64 {
    t.map_or(0, SampleTime::as_nanos)
}

/// The store's errors: a bad label or id names the field.
fn store_status(e: &StoreError) -> Status {
    let message = e.to_string();
    match e {
        StoreError::InvalidLabel { .. } => Status::invalid_argument(format!("label: {message}")),
        StoreError::InvalidId { .. } => Status::invalid_argument(format!("id: {message}")),
        StoreError::NotFound { .. } => Status::not_found(message),
        e if e.is_disk_full() => Status::resource_exhausted(message),
        _ => Status::internal(message),
    }
}

pub fn dump_status(e: DumpError) -> Status {
    let message = e.to_string();
    match &e {
        DumpError::InvalidArgument { .. } => Status::invalid_argument(message),
        DumpError::OutsideWindow { .. }
        | DumpError::ScopeMatchesNothing { .. }
        | DumpError::ScopeNotRecorded => Status::failed_precondition(message),
        DumpError::DiskFull { .. } => Status::resource_exhausted(message),
        DumpError::ShuttingDown => Status::unavailable(message),
        DumpError::Store(s) => {
            let s = store_status(s);
            Status::new(s.code(), format!("dump failed: {}", s.message()))
        }
        DumpError::Clock | DumpError::Capture(_) | DumpError::Write(_) => {
            Status::internal(format!("dump failed: {message}"))
        }
    }
}

pub fn reload_status(e: ReloadError) -> Status {
    match e {
        ReloadError::ShuttingDown => Status::unavailable(e.to_string()),
        e => Status::failed_precondition(format!(
            "new config rejected, the running one is kept: {e}"
        )),
    }
}

impl From<ListError> for Status {
    fn from(e: ListError) -> Status {
        match &e {
            ListError::Store(s) => store_status(s),
            ListError::Worker(_) => Status::internal(e.to_string()),
        }
    }
}

impl From<RotateError> for Status {
    fn from(e: RotateError) -> Status {
        match &e {
            RotateError::WouldRemoveAll { .. } => Status::failed_precondition(e.to_string()),
            RotateError::Store(s) => store_status(s),
            RotateError::Worker(_) => Status::internal(e.to_string()),
        }
    }
}

impl From<CompressError> for Status {
    fn from(e: CompressError) -> Status {
        let message = e.to_string();
        match &e {
            CompressError::Level { .. } => Status::invalid_argument(message),
            CompressError::AlreadyCompressed { .. } => Status::failed_precondition(message),
            CompressError::Busy => Status::resource_exhausted(message),
            CompressError::Write { source, .. } if source.is_disk_full() => {
                Status::resource_exhausted(message)
            }
            CompressError::Store(s) => store_status(s),
            CompressError::ShuttingDown => Status::unavailable(message),
            CompressError::Write { .. } | CompressError::Worker(_) => Status::internal(message),
        }
    }
}

impl From<StatusError> for Status {
    fn from(e: StatusError) -> Status {
        match &e {
            StatusError::Store(s) => store_status(s),
            StatusError::Worker(_) => Status::internal(e.to_string()),
        }
    }
}

pub fn snapshot_pb(s: &SnapshotInfo) -> pb::Snapshot {
    pb::Snapshot {
        id: s.id.clone(),
        path: s.path.display().to_string(),
        bytes: s.bytes,
        compressed: s.compressed,
        label: s.label.clone().unwrap_or_default(),
        trigger: s.trigger.clone(),
        created_unix_ns: s.created_unix_ns,
        seq: s.seq,
        matched: s.matched.clone(),
        // Not filled yet: 0 is "unknown" to clients.
        window_start_unix_ns: unix_ns(s.window.map(|w| w.0)),
        window_end_unix_ns: unix_ns(s.window.map(|w| w.1)),
        containers: s
            .containers
            .iter()
            .map(|c| pb::Container {
                runtime: c.container.runtime.clone(),
                id: c.container.id.clone(),
                cgroup: c.container.cgroup.clone(),
                name: c.container.name.clone(),
                pod_uid: c.container.pod_uid.clone(),
                pod: c.container.pod.clone(),
                namespace: c.container.namespace.clone(),
                samples: c.samples,
            })
            .collect(),
        scope: s.scope.clone(),
    }
}

pub fn snapshots_pb(list: &[SnapshotInfo]) -> Vec<pb::Snapshot> {
    list.iter().map(snapshot_pb).collect()
}

pub fn timings_pb(t: &DumpTimings) -> pb::DumpTimings {
    pb::DumpTimings {
        wait_ns: nanos(t.wait),
        capture_ns: nanos(t.capture),
        write_ns: nanos(t.write),
        sync_ns: nanos(t.sync),
        total_ns: nanos(t.total),
        max_pause_ns: nanos(t.max_pause),
    }
}

pub fn dump_reply(d: &DumpDone, coalesced: bool) -> pb::DumpReply {
    pb::DumpReply {
        snapshot: Some(snapshot_pb(&d.snapshot)),
        cpus: d
            .output
            .cpus
            .iter()
            .map(|c| pb::CpuCapture {
                cpu: c.cpu,
                records: c.record_count,
                bytes: c.bytes,
                lost: c.lost_while_paused,
                oldest_ns: sample_ns(c.oldest),
                newest_ns: sample_ns(c.newest),
                pause_ns: nanos(c.pause),
                lost_since_start: c.lost_since_start,
            })
            .collect(),
        timings: Some(timings_pb(&d.timings)),
        tracking_records: d.output.tracking_records,
        coalesced,
        window_start_unix_ns: d.output.window.start.as_unix_nanos(),
        window_end_unix_ns: d.output.window.end.as_unix_nanos(),
        window_missing_ns: nanos(d.output.window.missing),
    }
}

fn event_pb(e: EventInfo) -> pb::EventStatus {
    pb::EventStatus {
        name: e.name,
        kind: e.kind,
        sample_period: e.period,
        sample_frequency: e.frequency,
        callchain: e.callchain,
        filter: e.filter,
        user_stack_bytes: e.user_stack_bytes,
    }
}

pub fn status_reply(s: StatusReport) -> pb::StatusReply {
    let r = &s.recorder;
    let lost_tracking: u64 = r.cpus.iter().map(|c| c.lost_tracking_records).sum();
    pb::StatusReply {
        version: env!("CARGO_PKG_VERSION").into(),
        pid: std::process::id(),
        uptime_ns: nanos(s.uptime),
        config_path: s.config_path,
        events: s.events.into_iter().map(event_pb).collect(),
        ring_bytes_per_cpu: s.ring_bytes_per_cpu,
        tracking_ring_bytes_per_cpu: s.tracking_ring_bytes_per_cpu,
        cpus: r
            .cpus
            .iter()
            .map(|c| pb::CpuStatus {
                cpu: c.cpu,
                online: c.online,
                lost_samples: c.lost_samples,
                lost_tracking: c.lost_tracking_records,
                rings_oldest_unix_ns: unix_ns(c.rings_oldest),
                rings_reach_ns: nanos(c.rings_reach),
                ring_records: c.ring_records,
                records_per_second: c.records_per_second,
                history_oldest_unix_ns: unix_ns(s.history.as_ref().and_then(|h| h.oldest)),
                history_reach_ns: s.history.as_ref().map_or(0, |h| nanos(h.reach)),
                history_lost: s
                    .history
                    .as_ref()
                    .and_then(|h| h.status.lost_per_cpu.get(&c.cpu).copied())
                    .unwrap_or(0),
            })
            .collect(),
        tracking: Some(pb::TrackingStatus {
            log_capacity_bytes: r.tracking_log.capacity,
            log_used_bytes: r.tracking_log.used,
            log_records: r.tracking_log.records,
            evicted_records: r.tracking_log.evicted,
            lost_records: lost_tracking,
            processes: r.processes.threads as u64,
            exited_threads: r.processes.exited_threads as u64,
            max_exited_threads: r.tracking_limits.max_exited_threads as u64,
            max_maps_per_process: r.tracking_limits.max_maps_per_process as u64,
            exited_threads_dropped: r.tracking_dropped.exited_threads,
            maps_dropped: r.tracking_dropped.maps,
            checkpoints: r.tracking_log.checkpoints,
            build_ids_found: r.build_ids.found,
            build_ids_absent: r.build_ids.absent,
            build_ids_timed_out: r.build_ids.timed_out,
            build_ids_dropped: r.build_ids.dropped,
            build_ids_queued: r.build_ids.queued,
            build_id_readers_stuck: r.build_ids.stuck_readers,
            checkpoint_interval_bytes: s.checkpoint_interval_bytes,
        }),
        store: Some(pb::StoreStatus {
            output_dir: s.output_dir.display().to_string(),
            snapshots: s.usage.snapshots,
            bytes: s.usage.bytes,
            disk_free_bytes: s.usage.disk_free_bytes,
        }),
        last_dump: s.last_dump.as_ref().map(timings_pb),
        dumps: s.dumps,
        triggers: s
            .triggers
            .into_iter()
            .map(|t| pb::TriggerStatus {
                name: t.name,
                on: t.on.into(),
                condition: t.condition,
                fired: t.counters.fired,
                dumped: t.counters.dumped,
                suppressed: t.counters.suppressed,
                last_fired_unix_ns: unix_ns(t.counters.last_fired),
                last_matched: t.counters.last_matched,
                scope: t.scope,
            })
            .collect(),
        fleet: s.fleet.map(|f| pb::FleetStatus {
            state: f.state.into(),
            host: f.host,
            servers: f.servers,
            last_error: f.last_error,
            last_error_unix_ns: f.last_error_unix_ns,
            requests: f.requests,
            bad_requests: f.bad_requests,
            dumps: f.dumps,
            upload_destinations: f.upload_destinations,
            uploads_pending: f.uploads_pending,
            uploaded: f.uploaded,
            upload_failures: f.upload_failures,
            last_upload_error: f.last_upload_error,
            last_upload_unix_ns: f.last_upload_unix_ns,
            bucket: f.bucket,
        }),
        cgroups: Some(pb::CgroupStatus {
            recorded: r.cgroups.hierarchy.is_some(),
            hierarchy: r
                .cgroups
                .hierarchy
                .as_ref()
                .map(|h| h.display().to_string())
                .unwrap_or_default(),
            known: r.cgroups.known,
            dropped: r.cgroups.dropped,
            reason: r.cgroups.reason.clone().unwrap_or_default(),
        }),
        history: s.history.map(|h| pb::HistoryStatus {
            dir: h.status.dir.display().to_string(),
            bytes: h.status.bytes,
            max_bytes: h.status.max_bytes,
            max_age_ns: nanos(h.status.max_age),
            segments: h.status.segments,
            oldest_unix_ns: unix_ns(h.oldest),
            newest_unix_ns: unix_ns(h.newest),
            raw_bytes: h.status.raw_bytes,
            stored_bytes: h.status.stored_bytes,
            lost: h.status.lost_per_cpu.values().sum(),
            tracking_dropped: h.status.tracking_dropped,
            failure: h.status.failure.unwrap_or_default(),
            stacks_unwound: h.status.stacks_unwound,
            stacks_kept: h.status.stacks_kept,
        }),
    }
}

pub fn watch_event_pb(stamped: Stamped) -> pb::WatchEvent {
    use pb::watch_event::Kind;
    let kind = match stamped.event {
        Event::SnapshotCreated(s) => Kind::SnapshotCreated(pb::SnapshotCreated {
            snapshot: Some(snapshot_pb(&s)),
        }),
        Event::SnapshotRemoved { snapshot, reason } => Kind::SnapshotRemoved(pb::SnapshotRemoved {
            snapshot: Some(snapshot_pb(&snapshot)),
            reason: reason.into(),
        }),
        Event::DumpFailed { error } => Kind::DumpFailed(pb::DumpFailed { error }),
        Event::Loss(l) => Kind::Loss(pb::LossDetected {
            cpu: l.cpu,
            ring: l.ring.into(),
            lost: l.lost,
            total: l.total,
        }),
        Event::TriggerFired(t) => Kind::TriggerFired(pb::TriggerFired {
            name: t.name,
            matched: t.matched,
            dumped: t.dumped,
            suppressed_by: t.suppressed_by.into(),
            times: t.times,
        }),
        Event::Uploaded(u) => Kind::Uploaded(pb::SnapshotUploaded {
            snapshot: Some(snapshot_pb(&u.snapshot)),
            destination: u.destination,
            object: u.object,
            seconds: u.seconds,
            already_there: u.already_there,
        }),
        Event::UploadFailed {
            id,
            destination,
            error,
        } => Kind::UploadFailed(pb::UploadFailed {
            id,
            destination,
            error,
        }),
        Event::HistoryStopped { reason } => Kind::HistoryStopped(pb::HistoryStopped { reason }),
    };
    pb::WatchEvent {
        unix_ns: stamped.at.as_unix_nanos(),
        kind: Some(kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_grpc_codes_with_the_field_named() {
        let s = dump_status(DumpError::InvalidArgument {
            field: "label",
            message: "invalid label \"../x\": it starts with a dot".into(),
        });
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            s.message(),
            "label: invalid label \"../x\": it starts with a dot"
        );
        let outside = DumpError::OutsideWindow {
            end: WallTime::from_unix_nanos(1),
            held_from: WallTime::from_unix_nanos(2),
            held_by: "memory rings",
        };
        assert_eq!(dump_status(outside).code(), tonic::Code::FailedPrecondition);
        let shutting = dump_status(DumpError::ShuttingDown);
        assert_eq!(shutting.code(), tonic::Code::Unavailable);
        assert_eq!(shutting.message(), "flightrecd is shutting down");
        let id = Status::from(CompressError::Store(StoreError::InvalidId {
            id: "a/b".into(),
        }));
        assert_eq!(id.code(), tonic::Code::InvalidArgument);
        assert!(
            id.message().starts_with("id: invalid snapshot id \"a/b\""),
            "{}",
            id.message()
        );
        let missing = Status::from(ListError::Store(StoreError::NotFound { id: "x".into() }));
        assert_eq!(missing.code(), tonic::Code::NotFound);
        let full = Status::from(RotateError::Store(StoreError::WriteMeta {
            path: "/s/.x.meta".into(),
            source: std::io::Error::from_raw_os_error(libc::ENOSPC),
        }));
        assert_eq!(full.code(), tonic::Code::ResourceExhausted);
        let all = Status::from(RotateError::WouldRemoveAll { count: 2 });
        assert_eq!(all.code(), tonic::Code::FailedPrecondition);
        assert_eq!(
            Status::from(CompressError::Busy).code(),
            tonic::Code::ResourceExhausted
        );
        assert_eq!(
            Status::from(CompressError::Level { level: 23 }).message(),
            "level: 23 is not a zstd level (1 to 22, or 0 for the configured one)"
        );
    }
}
