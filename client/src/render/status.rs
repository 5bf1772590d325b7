//! `snapctl status` (one helper per section of its text, one per object
//! of its JSON) and `snapctl reload`.

use flightrec_proto::v1 as pb;
use serde_json::{Value, json};

use super::fleet_status::{fleet_lines, fleet_status_json};
use super::format::{duration, human_bytes, shown, table};
use super::snapshots::timings_json;
use super::triggers::triggers_json;

pub fn status(r: &pb::StatusReply, as_json: bool) -> String {
    let tracking = r.tracking.unwrap_or_default();
    let store = r.store.clone().unwrap_or_default();
    if as_json {
        status_json(r, &tracking, &store).to_string()
    } else {
        status_text(r, &tracking, &store)
    }
}

fn status_json(
    r: &pb::StatusReply,
    tracking: &pb::TrackingStatus,
    store: &pb::StoreStatus,
) -> Value {
    json!({
        "version": r.version,
        "pid": r.pid,
        "uptime_ns": r.uptime_ns,
        "config_path": r.config_path,
        "events": r.events.iter().map(event_json).collect::<Vec<_>>(),
        "ring_bytes_per_cpu": r.ring_bytes_per_cpu,
        "tracking_ring_bytes_per_cpu": r.tracking_ring_bytes_per_cpu,
        "cpus": r.cpus.iter().map(cpu_json).collect::<Vec<_>>(),
        "tracking": tracking_json(tracking),
        "store": store_json(store),
        "last_dump": timings_json(r.last_dump.as_ref()),
        "dumps": r.dumps,
        "triggers": triggers_json(r),
        "fleet": fleet_status_json(r.fleet.as_ref()),
        "history": r.history.as_ref().map(history_json),
        "cgroups": r.cgroups.as_ref().map(|c| json!({
            "recorded": c.recorded,
            "hierarchy": c.hierarchy,
            "known": c.known,
            "dropped": c.dropped,
            "reason": c.reason,
        })),
    })
}

fn history_json(h: &pb::HistoryStatus) -> Value {
    json!({
        "dir": h.dir, "bytes": h.bytes, "max_bytes": h.max_bytes,
        "max_age_ns": h.max_age_ns, "segments": h.segments,
        "oldest_unix_ns": h.oldest_unix_ns, "newest_unix_ns": h.newest_unix_ns,
        "raw_bytes": h.raw_bytes, "stored_bytes": h.stored_bytes, "lost": h.lost,
        "tracking_dropped": h.tracking_dropped,
        "stacks_unwound": h.stacks_unwound, "stacks_kept": h.stacks_kept,
        "failure": (!h.failure.is_empty()).then_some(&h.failure),
    })
}

fn event_json(e: &pb::EventStatus) -> Value {
    json!({
        "name": e.name, "kind": e.kind, "sample_period": e.sample_period,
        "sample_frequency": e.sample_frequency, "callchain": e.callchain,
        "callchain_mode": callchain_mode(e), "user_stack_bytes": e.user_stack_bytes,
        "filter": e.filter,
    })
}

fn cpu_json(c: &pb::CpuStatus) -> Value {
    json!({
        "cpu": c.cpu, "online": c.online, "lost_samples": c.lost_samples,
        "lost_tracking": c.lost_tracking, "rings_oldest_unix_ns": c.rings_oldest_unix_ns,
        "rings_reach_ns": c.rings_reach_ns, "ring_records": c.ring_records,
        "records_per_second": c.records_per_second,
        "history_oldest_unix_ns": c.history_oldest_unix_ns,
        "history_reach_ns": c.history_reach_ns, "history_lost": c.history_lost,
    })
}

fn tracking_json(t: &pb::TrackingStatus) -> Value {
    json!({
        "log_capacity_bytes": t.log_capacity_bytes,
        "log_used_bytes": t.log_used_bytes,
        "log_records": t.log_records,
        "evicted_records": t.evicted_records,
        "lost_records": t.lost_records,
        "processes": t.processes,
        "exited_threads": t.exited_threads,
        "max_exited_threads": t.max_exited_threads,
        "max_maps_per_process": t.max_maps_per_process,
        "exited_threads_dropped": t.exited_threads_dropped,
        "maps_dropped": t.maps_dropped,
        "checkpoints": t.checkpoints,
        "checkpoint_interval_bytes": t.checkpoint_interval_bytes,
        "build_ids_found": t.build_ids_found,
        "build_ids_absent": t.build_ids_absent,
        "build_ids_timed_out": t.build_ids_timed_out,
        "build_ids_dropped": t.build_ids_dropped,
        "build_ids_queued": t.build_ids_queued,
        "build_id_readers_stuck": t.build_id_readers_stuck,
    })
}

fn store_json(s: &pb::StoreStatus) -> Value {
    json!({
        "output_dir": s.output_dir,
        "snapshots": s.snapshots,
        "bytes": s.bytes,
        "disk_free_bytes": s.disk_free_bytes,
    })
}

/// The sections in the order people read them: the daemon, its events
/// and rings, tracking, the store, dumps, triggers, the fleet.
fn status_text(
    r: &pb::StatusReply,
    tracking: &pb::TrackingStatus,
    store: &pb::StoreStatus,
) -> String {
    let mut out = daemon_lines(r);
    out.extend(r.events.iter().map(event_line));
    out.extend(cpu_lines(&r.cpus, r.history.is_some()));
    out.extend(r.history.as_ref().map(history_line));
    out.extend(r.cgroups.as_ref().map(cgroups_line));
    out.extend(tracking_lines(tracking));
    out.push(store_line(store));
    out.push(dumps_line(r.dumps, r.last_dump.as_ref()));
    out.extend(triggers_line(&r.triggers));
    if let Some(f) = &r.fleet {
        out.extend(fleet_lines(f));
    }
    out.join("\n")
}

/// Version, process and config; ring sizes; the heading of the events.
fn daemon_lines(r: &pb::StatusReply) -> Vec<String> {
    vec![
        format!(
            "flightrecd {} (pid {}), up {}, config {}",
            r.version,
            r.pid,
            duration(r.uptime_ns),
            r.config_path
        ),
        format!(
            "rings: {} samples + {} tracking per CPU",
            human_bytes(r.ring_bytes_per_cpu),
            human_bytes(r.tracking_ring_bytes_per_cpu)
        ),
        "events:".into(),
    ]
}

/// How an event's call chains are taken, as its `callchain` key says it.
fn callchain_mode(e: &pb::EventStatus) -> &'static str {
    match (e.callchain, e.user_stack_bytes) {
        (false, _) => "none",
        (true, 0) => "fp",
        (true, _) => "dwarf",
    }
}

/// One recorded event, indented under `events:`.
fn event_line(e: &pb::EventStatus) -> String {
    let mut line = format!("  {} ({})", e.name, e.kind);
    if e.sample_frequency > 0 {
        line.push_str(&format!(" {} Hz", e.sample_frequency));
    } else if e.sample_period > 1 {
        line.push_str(&format!(" every {}", e.sample_period));
    }
    if e.callchain && e.user_stack_bytes > 0 {
        line.push_str(&format!(
            " callchain dwarf ({} bytes of stack)",
            e.user_stack_bytes
        ));
    } else if e.callchain {
        line.push_str(" callchain");
    }
    if !e.filter.is_empty() {
        line.push_str(&format!(" filter {:?}", e.filter));
    }
    line
}

/// How far back each CPU's rings reach, the rate, the loss counters, and
/// which CPUs are offline (unless all are: then the counters say enough).
fn cpu_lines(cpus: &[pb::CpuStatus], history: bool) -> Vec<String> {
    let rows: Vec<Vec<String>> = cpus
        .iter()
        .map(|c| {
            let mut row = vec![
                c.cpu.to_string(),
                reach_cell(c.rings_oldest_unix_ns, c.rings_reach_ns),
            ];
            if history {
                row.push(reach_cell(c.history_oldest_unix_ns, c.history_reach_ns));
            }
            row.extend([
                format!("{}/s", c.records_per_second),
                c.lost_samples.to_string(),
                c.lost_tracking.to_string(),
            ]);
            if history {
                row.push(c.history_lost.to_string());
            }
            row
        })
        .collect();
    let mut head = vec!["CPU", "RINGS REACH"];
    if history {
        head.push("HISTORY REACH");
    }
    head.extend(["RECORDS", "LOST SAMPLES", "LOST TRACKING"]);
    if history {
        head.push("LOST STREAMING");
    }
    let mut out = vec![table(&head, &rows)];
    let offline: Vec<String> = cpus
        .iter()
        .filter(|c| !c.online)
        .map(|c| c.cpu.to_string())
        .collect();
    if !offline.is_empty() && offline.len() < cpus.len() {
        out.push(format!(
            "offline (rings kept until they come back): CPU {}",
            offline.join(", ")
        ));
    }
    out
}

/// Whether samples say which cgroup (service, container) they are of.
fn cgroups_line(c: &pb::CgroupStatus) -> String {
    if c.recorded {
        let mut line = format!(
            "cgroups: every sample's recorded, {} known ({})",
            c.known,
            shown(&c.hierarchy)
        );
        if c.dropped > 0 {
            line.push_str(&format!(", {} forgotten to stay bounded", c.dropped));
        }
        line
    } else {
        format!("cgroups: not recorded: {}", shown(&c.reason))
    }
}

/// The history's use of its budget, how far back it reaches, and why it
/// is stopped if it is.
fn history_line(h: &pb::HistoryStatus) -> String {
    let mut line = format!(
        "history: {} of {} in {} segments ({}), up to {} back",
        human_bytes(h.bytes),
        human_bytes(h.max_bytes),
        h.segments,
        h.dir,
        duration(h.max_age_ns),
    );
    if h.raw_bytes > 0 {
        line.push_str(&format!(
            ", {:.1}x compressed",
            h.raw_bytes as f64 / h.stored_bytes.max(1) as f64
        ));
    }
    if h.lost > 0 || h.tracking_dropped > 0 {
        line.push_str(&format!(
            ", {} samples lost streaming, {} tracking records dropped",
            h.lost, h.tracking_dropped
        ));
    }
    if h.stacks_unwound > 0 || h.stacks_kept > 0 {
        line.push_str(&format!(
            ", {} stack copies unwound ({} kept as copies)",
            h.stacks_unwound, h.stacks_kept
        ));
    }
    if !h.failure.is_empty() {
        line.push_str(&format!("\nhistory STOPPED: {}", h.failure));
    }
    line
}

/// How far back a CPU's rings or history reach ("2.94 s"), "-" when
/// they hold nothing.
fn reach_cell(oldest_unix_ns: i64, reach_ns: u64) -> String {
    if oldest_unix_ns == 0 {
        return "-".into();
    }
    duration(reach_ns)
}

/// The tracking log, the process table's bounds and drops, and the
/// build-id reads once there were any.
fn tracking_lines(t: &pb::TrackingStatus) -> Vec<String> {
    let mut out = vec![
        format!(
            "tracking log: {} of {} used, {} records, {} evicted, {} lost, {} processes",
            human_bytes(t.log_used_bytes),
            human_bytes(t.log_capacity_bytes),
            t.log_records,
            t.evicted_records,
            t.lost_records,
            t.processes
        ),
        format!(
            "process table: {} exited threads kept (limit {}), at most {} maps per process, \
             dropped {} exited threads and {} maps; {} checkpoints every {}",
            t.exited_threads,
            t.max_exited_threads,
            t.max_maps_per_process,
            t.exited_threads_dropped,
            t.maps_dropped,
            t.checkpoints,
            human_bytes(t.checkpoint_interval_bytes)
        ),
    ];
    let read = t.build_ids_found + t.build_ids_absent;
    if read + t.build_ids_timed_out + t.build_ids_dropped > 0 {
        out.push(format!(
            "build-ids read from mapped files: {} found, {} without, {} given up after the \
             deadline, {} not read, {} waiting, {} readers hung",
            t.build_ids_found,
            t.build_ids_absent,
            t.build_ids_timed_out,
            t.build_ids_dropped,
            t.build_ids_queued,
            t.build_id_readers_stuck
        ));
    }
    out
}

fn store_line(s: &pb::StoreStatus) -> String {
    format!(
        "store: {} snapshots, {} in {} ({} free)",
        s.snapshots,
        human_bytes(s.bytes),
        s.output_dir,
        human_bytes(s.disk_free_bytes)
    )
}

fn dumps_line(dumps: u64, last: Option<&pb::DumpTimings>) -> String {
    match last {
        Some(t) => format!(
            "dumps: {}; last took {} (wait {}, capture {}, write {} of which sync {}, longest \
             pause {})",
            dumps,
            duration(t.total_ns),
            duration(t.wait_ns),
            duration(t.capture_ns),
            duration(t.write_ns),
            duration(t.sync_ns),
            duration(t.max_pause_ns)
        ),
        None => "dumps: none yet".into(),
    }
}

/// Every trigger's counters on one line; none without triggers (`snapctl
/// triggers` has the details).
fn triggers_line(triggers: &[pb::TriggerStatus]) -> Option<String> {
    if triggers.is_empty() {
        return None;
    }
    let line = triggers
        .iter()
        .map(|t| {
            format!(
                "{} fired {}, dumped {}, suppressed {}",
                t.name, t.fired, t.dumped, t.suppressed
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    Some(format!("triggers: {line}"))
}

pub fn reload(r: &pb::ReloadReply, as_json: bool) -> String {
    if as_json {
        return json!({ "changed": r.changed, "summary": r.summary }).to_string();
    }
    format!("config reloaded: {}", r.summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_shows_the_process_table_bounds_and_drops() {
        let reply = pb::StatusReply {
            tracking: Some(pb::TrackingStatus {
                exited_threads: 12,
                max_exited_threads: 16384,
                max_maps_per_process: 1000,
                exited_threads_dropped: 3,
                maps_dropped: 1500,
                checkpoints: 7,
                checkpoint_interval_bytes: 512 << 10,
                ..Default::default()
            }),
            ..Default::default()
        };
        let human = status(&reply, false);
        assert!(
            human.contains(
                "process table: 12 exited threads kept (limit 16384), at most 1000 maps per \
                 process, dropped 3 exited threads and 1500 maps; 7 checkpoints every 512.0KiB"
            ),
            "{human}"
        );
        let v: Value = serde_json::from_str(&status(&reply, true)).unwrap();
        assert_eq!(v["tracking"]["maps_dropped"], 1500);
        assert_eq!(v["tracking"]["exited_threads_dropped"], 3);
        assert_eq!(v["tracking"]["max_maps_per_process"], 1000);
        assert_eq!(v["tracking"]["checkpoint_interval_bytes"], 512 << 10);
    }

    #[test]
    fn events_show_their_rate_callchain_and_filter() {
        let e = pb::EventStatus {
            name: "cycles".into(),
            kind: "hardware".into(),
            sample_frequency: 99,
            callchain: true,
            filter: "comm == \"x\"".into(),
            ..Default::default()
        };
        assert_eq!(
            event_line(&e),
            r#"  cycles (hardware) 99 Hz callchain filter "comm == \"x\"""#
        );
        let every = pb::EventStatus {
            sample_period: 1000,
            ..e.clone()
        };
        assert!(event_line(&every).contains(" 99 Hz"), "frequency first");
        let period = pb::EventStatus {
            sample_frequency: 0,
            callchain: false,
            filter: String::new(),
            ..every
        };
        assert_eq!(event_line(&period), "  cycles (hardware) every 1000");
        let dwarf = pb::EventStatus {
            user_stack_bytes: 8192,
            filter: String::new(),
            ..e.clone()
        };
        assert_eq!(
            event_line(&dwarf),
            "  cycles (hardware) 99 Hz callchain dwarf (8192 bytes of stack)"
        );
        assert_eq!(callchain_mode(&dwarf), "dwarf");
        assert_eq!(callchain_mode(&e), "fp");
        assert_eq!(callchain_mode(&period), "none");
    }

    #[test]
    fn offline_cpus_are_named_unless_all_are() {
        let cpu = |cpu, online| pb::CpuStatus {
            cpu,
            online,
            ..Default::default()
        };
        let some = cpu_lines(&[cpu(0, true), cpu(1, false), cpu(2, false)], false);
        assert_eq!(
            some[1],
            "offline (rings kept until they come back): CPU 1, 2"
        );
        assert_eq!(cpu_lines(&[cpu(0, false), cpu(1, false)], false).len(), 1);
        assert_eq!(cpu_lines(&[cpu(0, true)], false).len(), 1);
    }

    #[test]
    fn the_reach_reads_in_one_unit() {
        let reach = |ns| pb::CpuStatus {
            rings_oldest_unix_ns: 1,
            rings_reach_ns: ns,
            ..Default::default()
        };
        assert_eq!(reach_cell(0, 0), "-");
        assert_eq!(reach_cell(1, 2_940_000_000), "2.94 s");
        assert_eq!(reach_cell(1, 598_000_000_000), "9.97 min");
        let lines = cpu_lines(&[reach(2_940_000_000)], false);
        assert!(lines[0].contains("RINGS REACH"), "{}", lines[0]);
        assert!(lines[0].contains("2.94 s"), "{}", lines[0]);
        assert!(!lines[0].contains("HISTORY"), "{}", lines[0]);
        let with_history = pb::CpuStatus {
            history_oldest_unix_ns: 1,
            history_reach_ns: 598_000_000_000,
            history_lost: 7,
            ..reach(2_940_000_000)
        };
        let lines = cpu_lines(&[with_history], true);
        assert!(lines[0].contains("HISTORY REACH"), "{}", lines[0]);
        assert!(lines[0].contains("9.97 min"), "{}", lines[0]);
        assert!(lines[0].contains("LOST STREAMING"), "{}", lines[0]);
    }

    #[test]
    fn timings_and_uptime_read_in_one_unit_each() {
        let t = pb::DumpTimings {
            wait_ns: 45_600,
            capture_ns: 12_340_000,
            write_ns: 9_544_366_493,
            sync_ns: 8_120_000_000,
            total_ns: 9_557_000_000,
            max_pause_ns: 1_000,
        };
        assert_eq!(
            dumps_line(3, Some(&t)),
            "dumps: 3; last took 9.56 s (wait 45.6 µs, capture 12.3 ms, write 9.54 s of which \
             sync 8.12 s, longest pause 1.00 µs)"
        );
        let r = pb::StatusReply {
            version: "1".into(),
            pid: 7,
            uptime_ns: 7_380_000_000_000,
            config_path: "(built-in defaults)".into(),
            ..Default::default()
        };
        assert_eq!(
            daemon_lines(&r)[0],
            "flightrecd 1 (pid 7), up 2.05 h, config (built-in defaults)"
        );
    }

    #[test]
    fn the_history_line_says_its_budget_reach_and_failure() {
        let h = pb::HistoryStatus {
            dir: "/var/lib/flightrec/history".into(),
            bytes: 5 << 20,
            max_bytes: 1 << 30,
            max_age_ns: 600_000_000_000,
            segments: 3,
            raw_bytes: 40,
            stored_bytes: 10,
            failure: "disk full".into(),
            stacks_unwound: 7,
            stacks_kept: 1,
            ..Default::default()
        };
        let line = history_line(&h);
        assert!(
            line.contains("7 stack copies unwound (1 kept as copies)"),
            "{line}"
        );
        assert!(line.contains("3 segments"), "{line}");
        assert!(line.contains("up to 10.0 min back"), "{line}");
        assert!(line.contains("4.0x compressed"), "{line}");
        assert!(line.contains("history STOPPED: disk full"), "{line}");
    }
}
