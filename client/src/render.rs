//! Replies as human text or stable JSON (one object per reply; `watch`
//! prints one object per line). JSON keys only ever get added.

use flightrec_proto::v1 as pb;
use serde_json::{Value, json};

/// `1.5MiB`, `512B`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n}B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.1}{unit}")
}

/// `2026-11-20 22:11:33Z` for nanoseconds since the epoch.
pub fn utc(unix_ns: i64) -> String {
    let secs = unix_ns.div_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `12.3ms`, or `45us` below a millisecond (ring pauses are that short).
fn ms(ns: u64) -> String {
    if ns < 1_000_000 {
        format!("{}us", ns / 1000)
    } else {
        format!("{:.1}ms", ns as f64 / 1e6)
    }
}

pub fn snapshot_json(s: &pb::Snapshot) -> Value {
    json!({
        "id": s.id,
        "path": s.path,
        "bytes": s.bytes,
        "compressed": s.compressed,
        "label": s.label,
        "trigger": s.trigger,
        "created_unix_ns": s.created_unix_ns,
        "seq": s.seq,
    })
}

fn timings_json(t: Option<&pb::DumpTimings>) -> Value {
    match t {
        None => Value::Null,
        Some(t) => json!({
            "wait_ns": t.wait_ns,
            "capture_ns": t.capture_ns,
            "write_ns": t.write_ns,
            "total_ns": t.total_ns,
            "max_pause_ns": t.max_pause_ns,
        }),
    }
}

/// `dump`: the path, or with `--json` the snapshot's fields at top level
/// plus `cpus`, `timings`, `coalesced`, `tracking_records`.
pub fn dump(r: &pb::DumpReply, as_json: bool) -> String {
    let snap = r.snapshot.clone().unwrap_or_default();
    if !as_json {
        return snap.path;
    }
    let mut v = snapshot_json(&snap);
    v["cpus"] = r
        .cpus
        .iter()
        .map(|c| {
            json!({
                "cpu": c.cpu,
                "records": c.records,
                "bytes": c.bytes,
                "lost": c.lost,
                "oldest_ns": c.oldest_ns,
                "newest_ns": c.newest_ns,
                "pause_ns": c.pause_ns,
                "lost_since_start": c.lost_since_start,
            })
        })
        .collect();
    v["records"] = json!(r.cpus.iter().map(|c| c.records).sum::<u64>());
    v["tracking_records"] = json!(r.tracking_records);
    v["coalesced"] = json!(r.coalesced);
    v["timings"] = timings_json(r.timings.as_ref());
    v.to_string()
}

/// Left-aligned columns under `header`, two spaces apart.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s.trim_end().to_string()
    };
    let mut out = vec![line(header.iter().map(|h| h.to_string()).collect())];
    out.extend(rows.iter().map(|r| line(r.clone())));
    out.join("\n")
}

fn snapshot_row(s: &pb::Snapshot) -> Vec<String> {
    snapshot_cells(
        &s.id,
        s.bytes,
        s.created_unix_ns,
        &s.trigger,
        s.compressed,
        &s.label,
    )
}

/// The cells of a snapshot in a table: ID, SIZE, CREATED, TRIGGER,
/// COMPRESSED, LABEL (`snapctl list`, and `fleet list` after the host).
pub fn snapshot_cells(
    id: &str,
    bytes: u64,
    created_unix_ns: i64,
    trigger: &str,
    compressed: bool,
    label: &str,
) -> Vec<String> {
    vec![
        id.to_string(),
        human_bytes(bytes),
        utc(created_unix_ns),
        trigger.to_string(),
        if compressed { "zstd" } else { "-" }.into(),
        if label.is_empty() { "-" } else { label }.to_string(),
    ]
}

const SNAPSHOT_HEADER: [&str; 6] = ["ID", "SIZE", "CREATED", "TRIGGER", "COMPRESSED", "LABEL"];

pub fn list(r: &pb::ListReply, as_json: bool) -> String {
    if as_json {
        let snaps: Vec<Value> = r.snapshots.iter().map(snapshot_json).collect();
        return json!({ "snapshots": snaps }).to_string();
    }
    if r.snapshots.is_empty() {
        return "no snapshots".into();
    }
    let rows: Vec<_> = r.snapshots.iter().map(snapshot_row).collect();
    let total: u64 = r.snapshots.iter().map(|s| s.bytes).sum();
    format!(
        "{}\n{} snapshots, {}",
        table(&SNAPSHOT_HEADER, &rows),
        r.snapshots.len(),
        human_bytes(total)
    )
}

pub fn rotate(r: &pb::RotateReply, as_json: bool) -> String {
    if as_json {
        let removed: Vec<Value> = r.removed.iter().map(snapshot_json).collect();
        let kept: Vec<Value> = r.kept.iter().map(snapshot_json).collect();
        return json!({ "removed": removed, "kept": kept }).to_string();
    }
    let mut out: Vec<String> = r
        .removed
        .iter()
        .map(|s| format!("removed {} ({})", s.id, human_bytes(s.bytes)))
        .collect();
    out.push(format!(
        "{} removed, {} kept ({})",
        r.removed.len(),
        r.kept.len(),
        human_bytes(r.kept.iter().map(|s| s.bytes).sum())
    ));
    out.join("\n")
}

/// `snapctl archive`: the tarball, what went in and what was not found.
pub fn archive(out: &std::path::Path, s: &crate::archive::ArchiveSummary, as_json: bool) -> String {
    if as_json {
        return json!({
            "path": out.display().to_string(),
            "bytes": s.bytes,
            "build_ids": s.added.iter().map(|(name, id, from)| json!({
                "name": name,
                "build_id": id,
                "from": from.display().to_string(),
            })).collect::<Vec<_>>(),
            "missing": s.missing,
        })
        .to_string();
    }
    let mut text = format!(
        "{} ({}): {} files by build-id",
        out.display(),
        human_bytes(s.bytes),
        s.added.len()
    );
    if !s.missing.is_empty() {
        text.push_str(&format!(
            "; not found with their build-id: {}",
            s.missing.join(", ")
        ));
    }
    text
}

pub fn compress(r: &pb::CompressReply, as_json: bool) -> String {
    let snap = r.snapshot.clone().unwrap_or_default();
    if as_json {
        let mut v = snapshot_json(&snap);
        v["bytes_before"] = json!(r.bytes_before);
        return v.to_string();
    }
    format!(
        "{}: {} -> {} ({})",
        snap.id,
        human_bytes(r.bytes_before),
        human_bytes(snap.bytes),
        snap.path
    )
}

pub fn status(r: &pb::StatusReply, as_json: bool) -> String {
    let tracking = r.tracking.unwrap_or_default();
    let store = r.store.clone().unwrap_or_default();
    if as_json {
        let events: Vec<Value> = r
            .events
            .iter()
            .map(|e| {
                json!({
                    "name": e.name, "kind": e.kind, "sample_period": e.sample_period,
                    "sample_frequency": e.sample_frequency, "callchain": e.callchain,
                    "filter": e.filter,
                })
            })
            .collect();
        let cpus: Vec<Value> = r
            .cpus
            .iter()
            .map(|c| json!({"cpu": c.cpu, "online": c.online, "lost_samples": c.lost_samples, "lost_tracking": c.lost_tracking}))
            .collect();
        return json!({
            "version": r.version,
            "pid": r.pid,
            "uptime_ns": r.uptime_ns,
            "config_path": r.config_path,
            "events": events,
            "ring_bytes_per_cpu": r.ring_bytes_per_cpu,
            "tracking_ring_bytes_per_cpu": r.tracking_ring_bytes_per_cpu,
            "cpus": cpus,
            "tracking": {
                "log_capacity_bytes": tracking.log_capacity_bytes,
                "log_used_bytes": tracking.log_used_bytes,
                "log_records": tracking.log_records,
                "evicted_records": tracking.evicted_records,
                "lost_records": tracking.lost_records,
                "processes": tracking.processes,
                "exited_threads": tracking.exited_threads,
                "max_exited_threads": tracking.max_exited_threads,
                "max_maps_per_process": tracking.max_maps_per_process,
                "exited_threads_dropped": tracking.exited_threads_dropped,
                "maps_dropped": tracking.maps_dropped,
                "checkpoints": tracking.checkpoints,
                "checkpoint_interval_bytes": tracking.checkpoint_interval_bytes,
                "build_ids_found": tracking.build_ids_found,
                "build_ids_absent": tracking.build_ids_absent,
                "build_ids_timed_out": tracking.build_ids_timed_out,
                "build_ids_dropped": tracking.build_ids_dropped,
                "build_ids_queued": tracking.build_ids_queued,
                "build_id_readers_stuck": tracking.build_id_readers_stuck,
            },
            "store": {
                "output_dir": store.output_dir,
                "snapshots": store.snapshots,
                "bytes": store.bytes,
                "disk_free_bytes": store.disk_free_bytes,
            },
            "last_dump": timings_json(r.last_dump.as_ref()),
            "dumps": r.dumps,
            "triggers": triggers_json(r),
            "fleet": fleet_status_json(r.fleet.as_ref()),
        })
        .to_string();
    }
    let mut out = vec![
        format!(
            "flightrecd {} (pid {}), up {}s, config {}",
            r.version,
            r.pid,
            r.uptime_ns / 1_000_000_000,
            r.config_path
        ),
        format!(
            "rings: {} samples + {} tracking per CPU",
            human_bytes(r.ring_bytes_per_cpu),
            human_bytes(r.tracking_ring_bytes_per_cpu)
        ),
        "events:".into(),
    ];
    for e in &r.events {
        let mut line = format!("  {} ({})", e.name, e.kind);
        if e.sample_frequency > 0 {
            line.push_str(&format!(" {} Hz", e.sample_frequency));
        } else if e.sample_period > 1 {
            line.push_str(&format!(" every {}", e.sample_period));
        }
        if e.callchain {
            line.push_str(" callchain");
        }
        if !e.filter.is_empty() {
            line.push_str(&format!(" filter {:?}", e.filter));
        }
        out.push(line);
    }
    let rows: Vec<Vec<String>> = r
        .cpus
        .iter()
        .map(|c| {
            vec![
                c.cpu.to_string(),
                c.lost_samples.to_string(),
                c.lost_tracking.to_string(),
            ]
        })
        .collect();
    out.push(table(&["CPU", "LOST SAMPLES", "LOST TRACKING"], &rows));
    let offline: Vec<String> = r
        .cpus
        .iter()
        .filter(|c| !c.online)
        .map(|c| c.cpu.to_string())
        .collect();
    if !offline.is_empty() && offline.len() < r.cpus.len() {
        out.push(format!(
            "offline (rings kept until they come back): CPU {}",
            offline.join(", ")
        ));
    }
    out.push(format!(
        "tracking log: {} of {} used, {} records, {} evicted, {} lost, {} processes",
        human_bytes(tracking.log_used_bytes),
        human_bytes(tracking.log_capacity_bytes),
        tracking.log_records,
        tracking.evicted_records,
        tracking.lost_records,
        tracking.processes
    ));
    out.push(format!(
        "process table: {} exited threads kept (limit {}), at most {} maps per process, \
         dropped {} exited threads and {} maps; {} checkpoints every {}",
        tracking.exited_threads,
        tracking.max_exited_threads,
        tracking.max_maps_per_process,
        tracking.exited_threads_dropped,
        tracking.maps_dropped,
        tracking.checkpoints,
        human_bytes(tracking.checkpoint_interval_bytes)
    ));
    let read = tracking.build_ids_found + tracking.build_ids_absent;
    if read + tracking.build_ids_timed_out + tracking.build_ids_dropped > 0 {
        out.push(format!(
            "build-ids read from mapped files: {} found, {} without, {} given up after the \
             deadline, {} not read, {} waiting, {} readers hung",
            tracking.build_ids_found,
            tracking.build_ids_absent,
            tracking.build_ids_timed_out,
            tracking.build_ids_dropped,
            tracking.build_ids_queued,
            tracking.build_id_readers_stuck
        ));
    }
    out.push(format!(
        "store: {} snapshots, {} in {} ({} free)",
        store.snapshots,
        human_bytes(store.bytes),
        store.output_dir,
        human_bytes(store.disk_free_bytes)
    ));
    match &r.last_dump {
        Some(t) => out.push(format!(
            "dumps: {}; last took {} (wait {}, capture {}, write {}, longest pause {})",
            r.dumps,
            ms(t.total_ns),
            ms(t.wait_ns),
            ms(t.capture_ns),
            ms(t.write_ns),
            ms(t.max_pause_ns)
        )),
        None => out.push("dumps: none yet".into()),
    }
    if !r.triggers.is_empty() {
        let line = r
            .triggers
            .iter()
            .map(|t| {
                format!(
                    "{} fired {}, dumped {}, suppressed {}",
                    t.name, t.fired, t.dumped, t.suppressed
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        out.push(format!("triggers: {line}"));
    }
    if let Some(f) = &r.fleet {
        let mut line = format!(
            "fleet: {} as {} via {}; {} requests, {} dumps",
            f.state,
            f.host,
            f.servers.join(", "),
            f.requests,
            f.dumps
        );
        if f.bad_requests > 0 {
            line.push_str(&format!(", {} malformed requests refused", f.bad_requests));
        }
        out.push(line);
        if !f.last_error.is_empty() {
            out.push(format!(
                "fleet last error ({}): {}",
                utc(f.last_error_unix_ns),
                f.last_error
            ));
        }
        if !f.upload_destinations.is_empty() {
            let last = if f.last_upload_unix_ns > 0 {
                format!(", last at {}", utc(f.last_upload_unix_ns))
            } else {
                String::new()
            };
            out.push(format!(
                "uploads to {} (bucket {}): {} waiting, {} done{last}, {} failed attempts",
                f.upload_destinations.join(", "),
                f.bucket,
                f.uploads_pending,
                f.uploaded,
                f.upload_failures
            ));
            if !f.last_upload_error.is_empty() {
                out.push(format!("upload last error: {}", f.last_upload_error));
            }
        }
    }
    out.join("\n")
}

/// `null` without `[fleet]`.
fn fleet_status_json(f: Option<&pb::FleetStatus>) -> Value {
    match f {
        None => Value::Null,
        Some(f) => json!({
            "state": f.state,
            "host": f.host,
            "servers": f.servers,
            "last_error": f.last_error,
            "last_error_unix_ns": f.last_error_unix_ns,
            "requests": f.requests,
            "bad_requests": f.bad_requests,
            "dumps": f.dumps,
            "bucket": f.bucket,
            "upload_destinations": f.upload_destinations,
            "uploads_pending": f.uploads_pending,
            "uploaded": f.uploaded,
            "upload_failures": f.upload_failures,
            "last_upload_error": f.last_upload_error,
            "last_upload_unix_ns": f.last_upload_unix_ns,
        }),
    }
}

pub fn watch_event(e: &pb::WatchEvent, as_json: bool) -> String {
    use pb::watch_event::Kind;
    if as_json {
        let mut v = json!({ "unix_ns": e.unix_ns });
        match &e.kind {
            Some(Kind::SnapshotCreated(c)) => {
                v["event"] = json!("snapshot_created");
                v["snapshot"] = snapshot_json(&c.snapshot.clone().unwrap_or_default());
            }
            Some(Kind::SnapshotRemoved(r)) => {
                v["event"] = json!("snapshot_removed");
                v["snapshot"] = snapshot_json(&r.snapshot.clone().unwrap_or_default());
                v["reason"] = json!(r.reason);
            }
            Some(Kind::Loss(l)) => {
                v["event"] = json!("loss");
                v["cpu"] = json!(l.cpu);
                v["ring"] = json!(l.ring);
                v["lost"] = json!(l.lost);
                v["total"] = json!(l.total);
            }
            Some(Kind::DumpFailed(f)) => {
                v["event"] = json!("dump_failed");
                v["error"] = json!(f.error);
            }
            Some(Kind::TriggerFired(t)) => {
                v["event"] = json!("trigger_fired");
                v["name"] = json!(t.name);
                v["matched"] = json!(t.matched);
                v["dumped"] = json!(t.dumped);
                v["suppressed_by"] = json!(t.suppressed_by);
                v["times"] = json!(t.times);
            }
            Some(Kind::Uploaded(u)) => {
                v["event"] = json!("uploaded");
                v["snapshot"] = snapshot_json(&u.snapshot.clone().unwrap_or_default());
                v["destination"] = json!(u.destination);
                v["object"] = json!(u.object);
                v["seconds"] = json!(u.seconds);
                v["already_there"] = json!(u.already_there);
            }
            Some(Kind::UploadFailed(f)) => {
                v["event"] = json!("upload_failed");
                v["id"] = json!(f.id);
                v["destination"] = json!(f.destination);
                v["error"] = json!(f.error);
            }
            None => v["event"] = json!("unknown"),
        }
        return v.to_string();
    }
    let when = utc(e.unix_ns);
    match &e.kind {
        Some(Kind::SnapshotCreated(c)) => {
            let s = c.snapshot.clone().unwrap_or_default();
            format!(
                "{when} created {} ({}, {})",
                s.path,
                human_bytes(s.bytes),
                s.trigger
            )
        }
        Some(Kind::SnapshotRemoved(r)) => {
            let s = r.snapshot.clone().unwrap_or_default();
            format!("{when} removed {} ({})", s.id, r.reason)
        }
        Some(Kind::Loss(l)) => format!(
            "{when} lost {} {} records on cpu {} ({} in total)",
            l.lost, l.ring, l.cpu, l.total
        ),
        Some(Kind::DumpFailed(f)) => format!("{when} dump failed: {}", f.error),
        Some(Kind::TriggerFired(t)) => {
            let times = if t.times > 1 {
                format!(" ({} times)", t.times)
            } else {
                String::new()
            };
            let outcome = if t.dumped {
                "dump queued".to_string()
            } else {
                format!("no dump: {}", t.suppressed_by)
            };
            format!(
                "{when} trigger {} fired{times}: {}; {outcome}",
                t.name, t.matched
            )
        }
        Some(Kind::Uploaded(u)) => {
            let s = u.snapshot.clone().unwrap_or_default();
            let already = if u.already_there {
                " (already there)"
            } else {
                ""
            };
            format!(
                "{when} uploaded {} to {} as {} ({}, {:.2}s){already}",
                s.id,
                u.destination,
                u.object,
                human_bytes(s.bytes),
                u.seconds
            )
        }
        Some(Kind::UploadFailed(f)) => format!(
            "{when} upload of {} to {} failed: {}",
            f.id, f.destination, f.error
        ),
        None => format!("{when} (unknown event)"),
    }
}

fn triggers_json(r: &pb::StatusReply) -> Value {
    r.triggers
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "on": t.on,
                "condition": t.condition,
                "fired": t.fired,
                "dumped": t.dumped,
                "suppressed": t.suppressed,
                "last_fired_unix_ns": t.last_fired_unix_ns,
                "last_matched": t.last_matched,
            })
        })
        .collect()
}

/// `snapctl triggers`: each configured trigger with its counters.
pub fn triggers(r: &pb::StatusReply, as_json: bool) -> String {
    if as_json {
        return json!({ "triggers": triggers_json(r) }).to_string();
    }
    if r.triggers.is_empty() {
        return "no triggers configured (add [[trigger]] tables to the config)".into();
    }
    let rows: Vec<Vec<String>> = r
        .triggers
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                t.on.clone(),
                t.fired.to_string(),
                t.dumped.to_string(),
                t.suppressed.to_string(),
                if t.last_fired_unix_ns == 0 {
                    "never".into()
                } else {
                    utc(t.last_fired_unix_ns)
                },
                t.condition.clone(),
            ]
        })
        .collect();
    table(
        &[
            "NAME",
            "ON",
            "FIRED",
            "DUMPED",
            "SUPPRESSED",
            "LAST FIRED",
            "CONDITION",
        ],
        &rows,
    )
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

    fn snap() -> pb::Snapshot {
        pb::Snapshot {
            id: "h-20261120T221133Z-000001-x".into(),
            path: "/var/lib/flightrec/snapshots/h-20261120T221133Z-000001-x.perf.data".into(),
            bytes: 3 << 20,
            compressed: true,
            label: "x".into(),
            trigger: "api".into(),
            created_unix_ns: 1_795_212_693_000_000_000,
            seq: 1,
        }
    }

    #[test]
    fn bytes_and_times_are_readable() {
        assert_eq!(human_bytes(512), "512B");
        assert_eq!(human_bytes(1536), "1.5KiB");
        assert_eq!(human_bytes(3 << 20), "3.0MiB");
        assert_eq!(utc(1_795_212_693_000_000_000), "2026-11-20 22:11:33Z");
        assert_eq!(utc(0), "1970-01-01 00:00:00Z");
        assert_eq!(ms(45_600), "45us");
        assert_eq!(ms(12_340_000), "12.3ms");
    }

    #[test]
    fn dump_prints_the_path_or_a_json_object_with_cpus() {
        let r = pb::DumpReply {
            snapshot: Some(snap()),
            cpus: vec![pb::CpuCapture {
                cpu: 1,
                records: 10,
                bytes: 800,
                lost: 2,
                oldest_ns: 5,
                newest_ns: 9,
                ..Default::default()
            }],
            timings: None,
            tracking_records: 3,
            coalesced: true,
        };
        assert_eq!(dump(&r, false), snap().path);
        let v: Value = serde_json::from_str(&dump(&r, true)).unwrap();
        assert_eq!(v["id"], "h-20261120T221133Z-000001-x");
        assert_eq!(v["bytes"], 3 << 20);
        assert_eq!(v["compressed"], true);
        assert_eq!(v["trigger"], "api");
        assert_eq!(v["records"], 10);
        assert_eq!(v["cpus"][0]["cpu"], 1);
        assert_eq!(v["cpus"][0]["lost"], 2);
        assert_eq!(v["cpus"][0]["newest_ns"], 9);
        assert_eq!(v["coalesced"], true);
    }

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
    fn status_shows_the_fleet_connection_and_its_last_error() {
        let mut reply = pb::StatusReply::default();
        assert!(!status(&reply, false).contains("fleet"));
        let v: Value = serde_json::from_str(&status(&reply, true)).unwrap();
        assert_eq!(v["fleet"], Value::Null);
        reply.fleet = Some(pb::FleetStatus {
            state: "connecting".into(),
            host: "host-a".into(),
            servers: vec!["nats://127.0.0.1:4222".into()],
            last_error: "cannot connect: authorization violation".into(),
            last_error_unix_ns: 1_763_676_693_000_000_000,
            requests: 2,
            dumps: 1,
            bucket: "flightrec".into(),
            upload_destinations: vec!["jetstream".into()],
            uploads_pending: 3,
            uploaded: 5,
            upload_failures: 7,
            last_upload_error: "cannot upload flightrec/h/x.perf.data: timed out".into(),
            last_upload_unix_ns: 0,
            bad_requests: 0,
        });
        let human = status(&reply, false);
        assert!(
            human.contains(
                "uploads to jetstream (bucket flightrec): 3 waiting, 5 done, 7 failed attempts\n\
                 upload last error: cannot upload flightrec/h/x.perf.data: timed out"
            ),
            "{human}"
        );
        assert!(
            human.contains(
                "fleet: connecting as host-a via nats://127.0.0.1:4222; 2 requests, 1 dumps\n\
                 fleet last error (2025-11-20 22:11:33Z): cannot connect: authorization violation"
            ),
            "{human}"
        );
        if let Some(f) = reply.fleet.as_mut() {
            f.bad_requests = 641;
        }
        assert!(
            status(&reply, false).contains("2 requests, 1 dumps, 641 malformed requests refused"),
            "{}",
            status(&reply, false)
        );
        let v: Value = serde_json::from_str(&status(&reply, true)).unwrap();
        assert_eq!(v["fleet"]["bad_requests"], 641);
        assert_eq!(v["fleet"]["state"], "connecting");
        assert_eq!(
            v["fleet"]["last_error"],
            "cannot connect: authorization violation"
        );
        assert_eq!(v["fleet"]["servers"][0], "nats://127.0.0.1:4222");
        assert_eq!(v["fleet"]["uploads_pending"], 3);
        assert_eq!(v["fleet"]["upload_destinations"][0], "jetstream");
    }

    #[test]
    fn list_is_a_table() {
        let r = pb::ListReply {
            snapshots: vec![snap()],
        };
        let text = list(&r, false);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("ID  "), "{text}");
        assert!(lines[1].contains("3.0MiB") && lines[1].contains("2026-11-20 22:11:33Z"));
        assert_eq!(lines[2], "1 snapshots, 3.0MiB");
        let v: Value = serde_json::from_str(&list(&r, true)).unwrap();
        assert_eq!(v["snapshots"][0]["label"], "x");
    }
}
