//! Conversion between the control plane's types and the wire: replies and
//! events to protobuf messages, typed errors to gRPC codes.

use std::time::Duration;

use flightrec_proto::v1 as pb;
use tonic::Status;

use crate::control::command::{CommandError, StatusReport};
use crate::control::{DumpDone, DumpTimings, Event, Stamped};
use crate::recorder::EventInfo;
use crate::store::SnapshotInfo;

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

pub fn status_of(e: CommandError) -> Status {
    let message = e.to_string();
    match e {
        CommandError::InvalidArgument { .. } => Status::invalid_argument(message),
        CommandError::NotFound(_) => Status::not_found(message),
        CommandError::FailedPrecondition(_) => Status::failed_precondition(message),
        CommandError::ResourceExhausted(_) => Status::resource_exhausted(message),
        CommandError::ShuttingDown => Status::unavailable(message),
        CommandError::Internal(_) => Status::internal(message),
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
        window_start_unix_ns: 0,
        window_end_unix_ns: 0,
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
                oldest_ns: c.oldest_ns.unwrap_or(0),
                newest_ns: c.newest_ns.unwrap_or(0),
                pause_ns: nanos(c.pause),
                lost_since_start: c.lost_since_start,
            })
            .collect(),
        timings: Some(timings_pb(&d.timings)),
        tracking_records: d.output.tracking_records,
        coalesced,
        window_start_unix_ns: d.output.window.start_unix_ns,
        window_end_unix_ns: d.output.window.end_unix_ns,
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
                rings_oldest_unix_ns: c.rings_oldest_unix_ns,
                rings_reach_ns: nanos(c.rings_reach),
                ring_records: c.ring_records,
                records_per_second: c.records_per_second,
                history_oldest_unix_ns: s.history.as_ref().map_or(0, |h| h.oldest_unix_ns),
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
                last_fired_unix_ns: t.counters.last_fired_unix_ns,
                last_matched: t.counters.last_matched,
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
        history: s.history.map(|h| pb::HistoryStatus {
            dir: h.status.dir.display().to_string(),
            bytes: h.status.bytes,
            max_bytes: h.status.max_bytes,
            max_age_ns: nanos(h.status.max_age),
            segments: h.status.segments,
            oldest_unix_ns: h.oldest_unix_ns,
            newest_unix_ns: h.newest_unix_ns,
            raw_bytes: h.status.raw_bytes,
            stored_bytes: h.status.stored_bytes,
            lost: h.status.lost_per_cpu.values().sum(),
            tracking_dropped: h.status.tracking_dropped,
            failure: h.status.failure.unwrap_or_default(),
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
        unix_ns: stamped.unix_ns,
        kind: Some(kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_errors_map_to_grpc_codes_with_the_field_named() {
        let s = status_of(CommandError::InvalidArgument {
            field: "label",
            message: "invalid label \"../x\": it starts with a dot".into(),
        });
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            s.message(),
            "label: invalid label \"../x\": it starts with a dot"
        );
        let cases = [
            (CommandError::NotFound("x".into()), tonic::Code::NotFound),
            (
                CommandError::FailedPrecondition("x".into()),
                tonic::Code::FailedPrecondition,
            ),
            (
                CommandError::ResourceExhausted("x".into()),
                tonic::Code::ResourceExhausted,
            ),
            (CommandError::ShuttingDown, tonic::Code::Unavailable),
            (CommandError::Internal("x".into()), tonic::Code::Internal),
        ];
        for (e, code) in cases {
            assert_eq!(status_of(e).code(), code);
        }
        assert_eq!(
            status_of(CommandError::ShuttingDown).message(),
            "flightrecd is shutting down"
        );
    }
}
