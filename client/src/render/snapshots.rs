//! The replies that are snapshots: `dump`, `list`, `rotate`, `compress`
//! and `archive`.

use flightrec_proto::v1 as pb;
use serde_json::{Value, json};

use super::format::{duration, human_bytes, shown, table, utc};

pub fn snapshot_json(s: &pb::Snapshot) -> Value {
    json!({
        "id": s.id,
        "path": s.path,
        "bytes": s.bytes,
        "compressed": s.compressed,
        "label": s.label,
        "trigger": s.trigger,
        "matched": s.matched,
        "created_unix_ns": s.created_unix_ns,
        "seq": s.seq,
        "window_start_unix_ns": known(s.window_start_unix_ns),
        "window_end_unix_ns": known(s.window_end_unix_ns),
        "containers": s.containers.iter().map(container_json).collect::<Vec<_>>(),
        "scope": s.scope,
    })
}

/// A container a snapshot holds samples of.
pub fn container_json(c: &pb::Container) -> Value {
    json!({
        "runtime": c.runtime,
        "id": c.id,
        "name": c.name,
        "cgroup": c.cgroup,
        "pod_uid": c.pod_uid,
        "pod": c.pod,
        "namespace": c.namespace,
        "samples": c.samples,
    })
}

/// A time the daemon may not know (0): `null` then.
fn known(unix_ns: i64) -> Value {
    if unix_ns == 0 {
        Value::Null
    } else {
        json!(unix_ns)
    }
}

/// A dump's timings; `null` when there are none (`status` before the
/// first dump).
pub(super) fn timings_json(t: Option<&pb::DumpTimings>) -> Value {
    match t {
        None => Value::Null,
        Some(t) => json!({
            "wait_ns": t.wait_ns,
            "capture_ns": t.capture_ns,
            "write_ns": t.write_ns,
            "sync_ns": t.sync_ns,
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
    v["cpus"] = r.cpus.iter().map(cpu_capture_json).collect();
    v["records"] = json!(r.cpus.iter().map(|c| c.records).sum::<u64>());
    v["tracking_records"] = json!(r.tracking_records);
    v["coalesced"] = json!(r.coalesced);
    v["timings"] = timings_json(r.timings.as_ref());
    v["window_start_unix_ns"] = json!(r.window_start_unix_ns);
    v["window_end_unix_ns"] = json!(r.window_end_unix_ns);
    v["window_missing_ns"] = json!(r.window_missing_ns);
    v.to_string()
}

/// What a dump took from one CPU's ring.
fn cpu_capture_json(c: &pb::CpuCapture) -> Value {
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
}

/// A row of `snapctl list`: the cells `fleet list` shows too, with the
/// window after the creation time.
fn snapshot_row(s: &pb::Snapshot) -> Vec<String> {
    let mut row = snapshot_cells(
        &s.id,
        s.bytes,
        s.created_unix_ns,
        &s.trigger,
        s.compressed,
        &s.label,
    );
    row.insert(
        3,
        window_cell(
            s.window_start_unix_ns,
            s.window_end_unix_ns,
            s.created_unix_ns,
        ),
    );
    row
}

/// The window a snapshot holds: its length and UTC start, `2.95 s from
/// 22:11:30.452` (the date too when it is not the creation's); `-` when
/// the daemon does not know it (0).
fn window_cell(start_unix_ns: i64, end_unix_ns: i64, created_unix_ns: i64) -> String {
    if start_unix_ns == 0 || end_unix_ns == 0 {
        return "-".into();
    }
    let length = duration(
        end_unix_ns
            .saturating_sub(start_unix_ns)
            .max(0)
            .unsigned_abs(),
    );
    let day = |ns: i64| ns.div_euclid(86_400_000_000_000);
    let millis = start_unix_ns.rem_euclid(1_000_000_000) / 1_000_000;
    // utc() is "YYYY-MM-DD HH:MM:SSZ": the time of day is after the space.
    let start = utc(start_unix_ns);
    let start = start.trim_end_matches('Z');
    let start = if day(start_unix_ns) == day(created_unix_ns) {
        start.split_once(' ').map_or(start, |(_, time)| time)
    } else {
        start
    };
    format!("{length} from {start}.{millis:03}")
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

const SNAPSHOT_HEADER: [&str; 7] = [
    "ID",
    "SIZE",
    "CREATED",
    "WINDOW (UTC)",
    "TRIGGER",
    "COMPRESSED",
    "LABEL",
];

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
            "; left out (not found with their build-id): {}",
            shown(&s.missing.join(", "))
        ));
    }
    text
}

/// `snapctl decompress`: the plain copy written, and its size with
/// `--json`.
/// What `report` or `export` wrote.
pub fn written(w: &crate::report::Written, as_json: bool) -> String {
    let path = w
        .path
        .as_ref()
        .map_or_else(|| "-".to_string(), |p| p.display().to_string());
    if as_json {
        return json!({
            "path": path,
            "bytes": w.bytes,
            "content": w.content,
            "frames": w.frames,
            "named_frames": w.named,
            "unresolved": w.unresolved,
            "not_used": w.not_used,
        })
        .to_string();
    }
    let mut text = format!(
        "{path} ({}, {}): {} of {} frames named",
        human_bytes(w.bytes),
        w.content,
        w.named,
        w.frames
    );
    // Paths in a snapshot are what its processes (or its writer) chose.
    for u in &w.unresolved {
        text.push_str(&format!(
            "\n  not named: {} ({} frames): {}",
            shown(&u.file),
            u.frames,
            shown(&u.reason)
        ));
    }
    for n in &w.not_used {
        text.push_str(&format!(
            "\n  not used: {} {}: {}",
            n.option,
            shown(&n.path),
            shown(&n.reason)
        ));
    }
    text
}

pub fn decompressed(out: &std::path::Path, bytes: u64, as_json: bool) -> String {
    if as_json {
        return json!({"path": out.display().to_string(), "bytes": bytes}).to_string();
    }
    out.display().to_string()
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
            matched: String::new(),
            window_start_unix_ns: 1_795_212_690_452_000_000,
            window_end_unix_ns: 1_795_212_693_401_000_000,
            containers: vec![pb::Container {
                runtime: "podman".into(),
                id: "a2ad75582abe".into(),
                name: "busy1".into(),
                samples: 7,
                ..Default::default()
            }],
            scope: String::new(),
        }
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
            window_start_unix_ns: 1_000,
            window_end_unix_ns: 2_000,
            window_missing_ns: 0,
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
        assert_eq!(v["window_start_unix_ns"], 1_000);
        assert_eq!(v["window_end_unix_ns"], 2_000);
    }

    #[test]
    fn decompressed_is_the_path_or_the_path_and_size() {
        let out = std::path::Path::new("h-1.plain.perf.data");
        assert_eq!(decompressed(out, 42, false), "h-1.plain.perf.data");
        assert_eq!(
            decompressed(out, 42, true),
            r#"{"bytes":42,"path":"h-1.plain.perf.data"}"#
        );
    }

    /// A table row's cells (columns are two or more spaces apart).
    fn cells(line: &str) -> Vec<&str> {
        line.split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect()
    }

    #[test]
    fn list_is_a_table() {
        let r = pb::ListReply {
            snapshots: vec![snap()],
        };
        let text = list(&r, false);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("ID  "), "{text}");
        assert_eq!(
            cells(lines[0]),
            [
                "ID",
                "SIZE",
                "CREATED",
                "WINDOW (UTC)",
                "TRIGGER",
                "COMPRESSED",
                "LABEL"
            ]
        );
        assert_eq!(
            cells(lines[1]),
            [
                "h-20261120T221133Z-000001-x",
                "3.0MiB",
                "2026-11-20 22:11:33Z",
                "2.95 s from 22:11:30.452",
                "api",
                "zstd",
                "x"
            ]
        );
        assert_eq!(lines[2], "1 snapshots, 3.0MiB");
        let v: Value = serde_json::from_str(&list(&r, true)).unwrap();
        assert_eq!(v["snapshots"][0]["label"], "x");
        assert_eq!(
            v["snapshots"][0]["window_start_unix_ns"],
            1_795_212_690_452_000_000_i64
        );
        assert_eq!(
            v["snapshots"][0]["window_end_unix_ns"],
            1_795_212_693_401_000_000_i64
        );
    }

    #[test]
    fn an_unknown_window_is_a_dash_and_null() {
        let old = pb::Snapshot {
            window_start_unix_ns: 0,
            window_end_unix_ns: 0,
            ..snap()
        };
        let text = list(
            &pb::ListReply {
                snapshots: vec![old.clone()],
            },
            false,
        );
        let row = text.lines().nth(1).unwrap();
        assert_eq!(cells(row)[3], "-", "{text}");
        let v = snapshot_json(&old);
        assert_eq!(v["window_start_unix_ns"], Value::Null);
        assert_eq!(v["window_end_unix_ns"], Value::Null);
        // Keys only ever get added: the old ones are all still there.
        for key in [
            "id",
            "path",
            "bytes",
            "compressed",
            "label",
            "trigger",
            "matched",
            "created_unix_ns",
            "seq",
        ] {
            assert!(v.get(key).is_some(), "{key} missing: {v}");
        }
    }

    #[test]
    fn a_window_on_another_day_than_the_dump_shows_its_date() {
        // Cut from the history: the window ended before midnight, the dump
        // came after it.
        let created = 1_795_219_205_000_000_000; // 2026-11-21 00:00:05Z
        assert_eq!(
            window_cell(created - 15_000_000_000, created - 5_000_000_000, created),
            "10.0 s from 2026-11-20 23:59:50.000"
        );
        assert_eq!(
            window_cell(created, created, created),
            "0 s from 00:00:05.000"
        );
        assert_eq!(window_cell(0, created, created), "-");
    }
}
