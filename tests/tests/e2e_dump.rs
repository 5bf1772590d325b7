//! End to end: a real flightrecd on the real kernel, driven by snapctl, its
//! snapshots read by perf.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use flightrec_tests::{Daemon, Load, perf_script, require_root};
use serde_json::Value;

fn n_cpus() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// Samples per CPU as `perf script` prints them (one line per sample with
/// `-F cpu,event`).
fn samples_per_cpu(path: &Path) -> BTreeMap<u64, u64> {
    let mut per_cpu = BTreeMap::new();
    for line in perf_script(path, &["-F", "cpu,event"]).lines() {
        let line = line.trim();
        let Some(cpu) = line
            .strip_prefix('[')
            .and_then(|l| l.split_once(']'))
            .and_then(|(c, _)| c.trim().parse::<u64>().ok())
        else {
            continue;
        };
        *per_cpu.entry(cpu).or_insert(0) += 1;
    }
    per_cpu
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn dump_writes_a_snapshot_perf_reads_with_the_counts_it_reports() {
    require_root("dump_writes_a_snapshot_perf_reads");
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\nmin_interval = \"100ms\"\n");
    let _load = Load::start();
    std::thread::sleep(Duration::from_millis(500));
    let v = d.json(&["dump", "--label", "first-look"]);
    let path = Path::new(v["path"].as_str().expect("path"));
    assert!(path.exists(), "{} missing", path.display());
    assert!(path.starts_with(&d.output));
    let id = v["id"].as_str().unwrap();
    assert!(id.ends_with("-first-look"), "{id}");
    assert_eq!(
        path.file_name().unwrap().to_str().unwrap(),
        format!("{id}.perf.data")
    );
    assert_eq!(
        v["bytes"].as_u64().unwrap(),
        std::fs::metadata(path).unwrap().len()
    );
    assert_eq!(v["compressed"], false);
    assert_eq!(v["trigger"], "api");
    assert_eq!(v["label"], "first-look");
    let cpus = v["cpus"].as_array().expect("cpus");
    assert_eq!(cpus.len(), n_cpus());
    for c in cpus {
        for key in ["cpu", "records", "bytes", "lost", "oldest_ns", "newest_ns"] {
            assert!(c[key].is_u64(), "cpus[].{key} missing in {c}");
        }
        if c["records"].as_u64().unwrap() > 1 {
            assert!(c["oldest_ns"].as_u64() <= c["newest_ns"].as_u64(), "{c}");
        }
    }
    let reported: BTreeMap<u64, u64> = cpus
        .iter()
        .map(|c| (c["cpu"].as_u64().unwrap(), c["records"].as_u64().unwrap()))
        .filter(|(_, n)| *n > 0)
        .collect();
    let total: u64 = reported.values().sum();
    assert!(total > 100, "only {total} records under load");
    assert_eq!(
        samples_per_cpu(path),
        reported,
        "perf script vs JSON per CPU"
    );
    // Snapshot files are for root and the operators' group only.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn sigusr2_list_compress_rotate_status_and_watch() {
    require_root("sigusr2_list_compress_rotate_status_and_watch");
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\nmin_interval = \"100ms\"\n");
    let _load = Load::start();
    std::thread::sleep(Duration::from_millis(300));

    // Watch first, so it sees the dumps below.
    let watcher = d
        .snapctl_cmd(&["--json", "watch", "--count", "2"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn watch");
    std::thread::sleep(Duration::from_millis(300));

    let first = d.json(&["dump"]);
    // SIGUSR2 makes a snapshot too.
    d.signal("USR2");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut list = d.list();
    while list.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "no snapshot after SIGUSR2:\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
        list = d.list();
    }
    assert_eq!(list[0]["id"], first["id"]);
    assert_eq!(list[1]["trigger"], "signal");
    perf_script(Path::new(list[1]["path"].as_str().unwrap()), &[]);

    let out = watcher.wait_with_output().expect("watch");
    assert!(out.status.success(), "watch failed");
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("watch JSON line"))
        .collect();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["event"], "snapshot_created");
    assert_eq!(events[0]["snapshot"]["id"], first["id"]);
    assert_eq!(events[1]["snapshot"]["trigger"], "signal");

    // A third one, then compress the first: perf reads the same events.
    let third = d.json(&["dump", "--label", "third"]);
    let first_path = Path::new(first["path"].as_str().unwrap()).to_path_buf();
    let before = perf_script(&first_path, &[]);
    let c = d.json(&["compress", first["id"].as_str().unwrap(), "--level", "3"]);
    assert_eq!(c["compressed"], true);
    assert_eq!(c["bytes_before"], first["bytes"]);
    assert!(c["bytes"].as_u64().unwrap() < first["bytes"].as_u64().unwrap());
    assert_eq!(c["path"], first["path"]);
    let after = perf_script(&first_path, &[]);
    assert!(!before.is_empty());
    assert_eq!(before, after, "perf script differs after compression");
    let again = d.snapctl(&["compress", first["id"].as_str().unwrap()]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already compressed"));

    let list = d.list();
    let ids: Vec<&str> = list.iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(list[0]["compressed"], true);
    assert_eq!(list[2]["id"], third["id"]);

    // Status: events, per-CPU counters, the store.
    let s = d.json(&["status"]);
    let names: Vec<&str> = s["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"sched:sched_switch"), "{names:?}");
    assert!(names.contains(&"cpu-clock"), "{names:?}");
    assert_eq!(s["cpus"].as_array().unwrap().len(), n_cpus());
    assert_eq!(s["ring_bytes_per_cpu"], 256 * 1024);
    assert_eq!(s["store"]["snapshots"], 3);
    assert_eq!(s["dumps"], 3);
    assert!(s["last_dump"]["total_ns"].as_u64().unwrap() > 0);
    let human = d.snapctl(&["status"]);
    assert!(human.status.success());
    assert!(String::from_utf8_lossy(&human.stdout).contains("sched:sched_switch"));

    // Rotate to 2 keeps the newest two.
    let r = d.json(&["rotate", "--keep", "2"]);
    let removed: Vec<&str> = r["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(removed, vec![ids[0]]);
    let left: Vec<String> = d
        .list()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(left, vec![ids[1].to_string(), ids[2].to_string()]);
    assert!(!first_path.exists());
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn bad_labels_and_ids_are_invalid_arguments() {
    require_root("bad_labels_and_ids_are_invalid_arguments");
    let d = Daemon::start("");
    for label in ["../etc/passwd", "a/b", "..", ".hidden", "x y"] {
        let out = d.snapctl(&["--json", "dump", "--label", label]);
        assert_eq!(out.status.code(), Some(1), "label {label:?}");
        let err: Value = serde_json::from_slice(&out.stderr).expect("JSON error");
        assert_eq!(err["code"], "InvalidArgument", "label {label:?}: {err}");
        assert!(
            err["error"].as_str().unwrap().starts_with("label: "),
            "{err}"
        );
    }
    let out = d.snapctl(&["--json", "compress", "../../etc/shadow"]);
    let err: Value = serde_json::from_slice(&out.stderr).expect("JSON error");
    assert_eq!(err["code"], "InvalidArgument");
    assert!(err["error"].as_str().unwrap().starts_with("id: "), "{err}");
    let out = d.snapctl(&["--json", "compress", "h-20261120T221133Z-000042"]);
    let err: Value = serde_json::from_slice(&out.stderr).expect("JSON error");
    assert_eq!(err["code"], "NotFound");
    assert!(d.list().is_empty(), "nothing may have been written");
    let human = d.snapctl(&["dump", "--label", "a/b"]);
    assert_eq!(
        String::from_utf8_lossy(&human.stderr).trim(),
        "snapctl: label: invalid label \"a/b\": it contains '/'; only letters, digits, '.', '_' and '-' are allowed"
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn an_unprivileged_client_is_refused_with_a_clear_message() {
    require_root("an_unprivileged_client_is_refused");
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let d = Daemon::start("");
    let nobody = |d: &Daemon| {
        let mut cmd = d.snapctl_cmd(&["status"]);
        cmd.uid(65534).gid(65534);
        cmd.output().expect("run snapctl as nobody")
    };
    let out = nobody(&d);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(
        msg.contains(&format!(
            "permission denied on socket {}",
            d.socket.display()
        )),
        "{msg}"
    );
    assert!(msg.contains("group root"), "{msg}");

    // Opened up by hand, the socket still admits only root and its group:
    // the daemon drops the peer before any handler.
    for p in [d.dir.path(), d.socket.parent().unwrap()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = nobody(&d);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(msg.contains("may not be admitted"), "{msg}");
    let log = d.log_text();
    assert!(log.contains("connection refused: peer uid 65534"), "{log}");
    // Root still gets in.
    assert!(d.snapctl(&["status"]).status.success());

    // Give the socket to nobody's group by reload: nobody is admitted now.
    let text = std::fs::read_to_string(&d.config).unwrap();
    std::fs::write(
        &d.config,
        text.replace("socket_group = \"root\"", "socket_group = \"nogroup\""),
    )
    .unwrap();
    let r = d.json(&["reload"]);
    assert!(
        r["summary"].as_str().unwrap().contains("socket_group"),
        "{r}"
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&d.socket).unwrap().gid(), 65534);
    let out = nobody(&d);
    assert!(
        out.status.success(),
        "a member of the new socket group was refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn reload_applies_a_good_config_and_rejects_a_bad_one() {
    require_root("reload_applies_a_good_config_and_rejects_a_bad_one");
    let d = Daemon::start("[retention]\nmax_snapshots = 10\n");
    let text = std::fs::read_to_string(&d.config).unwrap();

    // Bigger rings: the recorder is re-opened.
    std::fs::write(
        &d.config,
        text.replace("per_cpu = \"256KiB\"", "per_cpu = \"512KiB\""),
    )
    .unwrap();
    let r = d.json(&["reload"]);
    assert_eq!(r["changed"], true);
    assert!(
        r["summary"]
            .as_str()
            .unwrap()
            .contains("recorder re-opened"),
        "{r}"
    );
    assert_eq!(d.json(&["status"])["ring_bytes_per_cpu"], 512 * 1024);
    let v = d.json(&["dump"]);
    perf_script(Path::new(v["path"].as_str().unwrap()), &[]);

    // A bad file is rejected with its position; the old config keeps running.
    std::fs::write(&d.config, format!("{text}\n[snapshot]\nlevel = 99\n")).unwrap();
    let out = d.snapctl(&["--json", "reload"]);
    assert_eq!(out.status.code(), Some(1));
    let err: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(err["code"], "FailedPrecondition");
    let bad_line = text.lines().count() + 3;
    let msg = err["error"].as_str().unwrap();
    assert!(
        msg.contains(&format!("flightrec.toml:{bad_line}:9: snapshot.level = 99")),
        "{msg}"
    );
    assert_eq!(d.json(&["status"])["ring_bytes_per_cpu"], 512 * 1024);

    // SIGHUP takes the same path: a good file applies.
    std::fs::write(
        &d.config,
        text.replace("max_snapshots = 10", "max_snapshots = 1"),
    )
    .unwrap();
    d.json(&["dump"]);
    d.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while d.list().len() > 1 {
        assert!(
            Instant::now() < deadline,
            "SIGHUP reload did not apply retention"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        d.log_text()
            .contains("config reloaded: changed: rings and events")
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn sigterm_finishes_the_dump_under_way_and_removes_the_socket() {
    require_root("sigterm_finishes_the_dump_under_way");
    // Long enough that the dump is still under way once both clients are
    // in, however slowly they connect.
    let mut d = Daemon::start("[snapshot]\npost_trigger_delay = \"3s\"\ncompression = \"none\"\n");
    let client = d
        .snapctl_cmd(&["--json", "dump"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A watcher holds a stream open: shutdown must not wait for it.
    let watcher = d
        .snapctl_cmd(&["watch"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // SIGTERM while the accepted dump waits out its post-trigger delay:
    // once the daemon has both the dump and the watch stream.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let log = d.log_text();
        if log.contains("dump requested over the API") && log.contains("watch stream opened") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the clients never got in:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !d.log_text().contains("snapshot written"),
        "the dump was over before SIGTERM"
    );
    let stopping = Instant::now();
    let status = d.stop();
    assert_eq!(status.code(), Some(0), "{}", d.log_text());
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        stopping.elapsed()
    );
    let watched = watcher.wait_with_output().unwrap();
    assert_eq!(watched.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&watched.stderr).contains("ended the stream"),
        "{}",
        String::from_utf8_lossy(&watched.stderr)
    );
    let out = client.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the accepted dump was not answered: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    perf_script(Path::new(v["path"].as_str().unwrap()), &[]);
    assert!(!d.socket.exists(), "socket left behind");
    let leftovers: Vec<_> = std::fs::read_dir(&d.output)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn bad_config_exits_2_with_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[daemon]\noutput_dir = \"/tmp/x\"\n\n[buffers]\nper_cpu = \"4XB\"\n",
    )
    .unwrap();
    for flag in ["--config", "--check-config"] {
        let out = Command::new(flightrec_tests::bin_path("flightrecd"))
            .arg(flag)
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag}");
        let msg = String::from_utf8_lossy(&out.stderr);
        assert!(
            msg.contains(&format!("{}:5:11: invalid size \"4XB\"", path.display())),
            "{flag}: {msg}"
        );
    }
    std::fs::write(&path, "[daemon]\nsokcet = \"/x\"\n").unwrap();
    let out = Command::new(flightrec_tests::bin_path("flightrecd"))
        .arg("--check-config")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.toml:2:1: unknown field `sokcet`"));
    // A good file prints the effective config. Its paths are the test's
    // own: the check looks at them, and the machine's may hold anything.
    std::fs::write(
        &path,
        format!(
            "[retention]\nmax_snapshots = 3\n[daemon]\nsocket_group = \"root\"\n\
             socket = \"{d}/run/flightrecd.sock\"\noutput_dir = \"{d}/snapshots\"\n",
            d = dir.path().display()
        ),
    )
    .unwrap();
    let out = Command::new(flightrec_tests::bin_path("flightrecd"))
        .arg("--check-config")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("max_snapshots = 3"), "{printed}");
    assert!(printed.contains("name = \"cpu-clock\""), "{printed}");
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn post_trigger_delay_and_compress_on_demand() {
    require_root("post_trigger_delay_and_compress_on_demand");
    let d = Daemon::start(
        "[snapshot]\ncompression = \"none\"\npost_trigger_delay = \"400ms\"\nmin_interval = \"0s\"\n",
    );
    let _load = Load::start();
    let asked = Instant::now();
    let v = d.json(&["dump", "--compress"]);
    let took = asked.elapsed();
    assert!(
        took >= Duration::from_millis(400),
        "answered after {took:?}"
    );
    assert!(
        v["timings"]["wait_ns"].as_u64().unwrap() >= 400_000_000,
        "{v}"
    );
    assert_eq!(v["compressed"], true);
    let path = Path::new(v["path"].as_str().unwrap());
    let script = perf_script(path, &["-F", "event"]);
    assert!(!script.is_empty());
    assert_eq!(d.list()[0]["compressed"], true);
}
