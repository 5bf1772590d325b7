//! End to end when things go wrong: a full disk, a crash mid-dump, a second
//! daemon on the same socket.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use flightrec_tests::{
    Daemon, Load, Tmpfs, Watcher, bin_path, perf_script, require_root, test_config,
};
use serde_json::Value;

/// Names in `dir`, hidden ones included.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn leftovers(dir: &Path) -> Vec<String> {
    names(dir)
        .into_iter()
        .filter(|n| n.contains(".tmp-") || (n.ends_with(".meta") && !sidecar_has_snapshot(dir, n)))
        .collect()
}

fn sidecar_has_snapshot(dir: &Path, meta: &str) -> bool {
    let id = meta.trim_start_matches('.').trim_end_matches(".meta");
    dir.join(format!("{id}.perf.data")).exists()
}

/// Fills the file system of `dir` with `dir/filler`, then gives back
/// `keep` bytes so tiny writes succeed and a snapshot does not.
fn fill(dir: &Path, keep: u64) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0xa5u8; 64 * 1024];
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling {}: {e}", dir.display()),
        }
    }
    let _ = f.flush();
    let len = f.metadata().unwrap().len();
    f.set_len(len.saturating_sub(keep)).unwrap();
    path
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn disk_full_during_a_dump_is_resource_exhausted_and_recoverable() {
    require_root("disk_full_during_a_dump");
    let dir = tempfile::tempdir().unwrap();
    let snapshots = dir.path().join("snapshots");
    let _tmpfs = Tmpfs::mount(&snapshots, "3m");
    // The daemon lives in its own temp dir; point its output at the tmpfs.
    let mut d = Daemon::start("[snapshot]\ncompression = \"none\"\nmin_interval = \"100ms\"\n");
    let text = std::fs::read_to_string(&d.config).unwrap().replace(
        &format!("output_dir = \"{}\"", d.output.display()),
        &format!("output_dir = \"{}\"", snapshots.display()),
    );
    std::fs::write(&d.config, text).unwrap();
    d.stop();
    d.output = snapshots.clone();
    d.spawn();
    let _load = Load::start();
    std::thread::sleep(Duration::from_millis(300));

    let older = d.json(&["dump", "--label", "older"]);
    let older_path = PathBuf::from(older["path"].as_str().unwrap());
    let older_script = perf_script(&older_path, &[]);
    let older_bytes = std::fs::metadata(&older_path).unwrap().len();

    let filler = fill(&snapshots, 16 * 1024);
    // Loss reports may come before or after the failure: the test looks
    // for its event among the others.
    let watcher = Watcher::start(&d);
    let out = d.snapctl(&["--json", "dump"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err: Value = serde_json::from_slice(&out.stderr).expect("JSON error");
    assert_eq!(err["code"], "ResourceExhausted", "{err}");
    let msg = err["error"].as_str().unwrap();
    assert!(
        msg.contains("disk full") || msg.contains("No space"),
        "{msg}"
    );
    assert!(leftovers(&snapshots).is_empty(), "{:?}", names(&snapshots));
    assert_eq!(d.list().len(), 1);
    let event = watcher
        .wait_for("dump_failed", Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no dump_failed event in 30s:\n{}", d.log_text()));
    assert!(
        event["error"].as_str().unwrap().contains("disk full"),
        "{event}"
    );
    assert_eq!(std::fs::metadata(&older_path).unwrap().len(), older_bytes);
    assert_eq!(perf_script(&older_path, &[]), older_script);

    // The daemon keeps recording; with space back the next dump works.
    assert!(d.snapctl(&["status"]).status.success());
    std::fs::remove_file(filler).unwrap();
    let next = d.json(&["dump", "--label", "after"]);
    let next_path = Path::new(next["path"].as_str().unwrap());
    let script = perf_script(next_path, &["-F", "event"]);
    assert!(!script.is_empty());
    assert_eq!(d.list().len(), 2);
    drop(d);
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn kill_9_during_a_dump_leaves_nothing_partial_after_restart() {
    require_root("kill_9_during_a_dump");
    // Big rings and a slow zstd level: the write takes long enough to be
    // caught in the act.
    let mut d =
        Daemon::start("[snapshot]\ncompression = \"zstd\"\nlevel = 19\nmin_interval = \"10ms\"\n");
    let text = std::fs::read_to_string(&d.config)
        .unwrap()
        .replace("per_cpu = \"256KiB\"", "per_cpu = \"4MiB\"");
    std::fs::write(&d.config, text).unwrap();
    d.json(&["reload"]);
    let load = Load::start();
    std::thread::sleep(Duration::from_secs(2));
    let complete = d.json(&["dump", "--label", "complete"]);

    let mut caught = None;
    for _ in 0..10 {
        let mut client = d
            .snapctl_cmd(&["dump"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let temp = names(&d.output)
                .into_iter()
                .find(|n| n.contains(".perf.data.tmp-"));
            if let Some(temp) = temp {
                d.kill9();
                // The temporary file lives only for the copy, fsync and
                // rename: the rename may win the race with the kill. Then
                // nothing was caught; start again and retry.
                if d.output.join(&temp).exists() {
                    caught = Some(temp);
                } else {
                    d.spawn();
                }
                break;
            }
            if client.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = client.wait();
        if caught.is_some() {
            break;
        }
    }
    drop(load);
    let temp = caught.expect("never saw a dump's temporary file in 10 tries");
    assert!(
        d.output.join(&temp).exists(),
        "{temp} vanished before restart"
    );
    assert!(d.socket.exists(), "a killed daemon leaves its socket");

    d.spawn();
    let log = d.log_text();
    assert!(log.contains("replacing a stale socket file"), "{log}");
    assert!(
        log.contains("removed a temporary file left by an earlier crash"),
        "{log}"
    );
    assert!(leftovers(&d.output).is_empty(), "{:?}", names(&d.output));
    let list = d.list();
    assert!(list.iter().any(|s| s["id"] == complete["id"]));
    for s in &list {
        let path = Path::new(s["path"].as_str().unwrap());
        assert_eq!(
            s["bytes"].as_u64().unwrap(),
            std::fs::metadata(path).unwrap().len()
        );
        perf_script(path, &["-F", "event"]);
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_second_daemon_on_a_live_socket_refuses_to_start() {
    require_root("a_second_daemon_on_a_live_socket");
    let d = Daemon::start("");
    let out = Command::new(bin_path("flightrecd"))
        .arg("--config")
        .arg(&d.config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(
        msg.contains(&format!(
            "another flightrecd is already listening on {}",
            d.socket.display()
        )),
        "{msg}"
    );
    // The first one is unharmed.
    assert!(d.snapctl(&["status"]).status.success());
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_missing_socket_group_is_a_clear_start_error() {
    require_root("a_missing_socket_group");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("flightrec.toml");
    let text = test_config(dir.path(), "").replace(
        "socket_group = \"root\"",
        "socket_group = \"no-such-group-x\"",
    );
    std::fs::write(&config, text).unwrap();
    let out = Command::new(bin_path("flightrecd"))
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(
        msg.contains(
            "flightrec.toml:3:16: daemon.socket_group: group \"no-such-group-x\" does not exist"
        ),
        "{msg}"
    );
    // An unknown event is located the same way.
    let text =
        test_config(dir.path(), "").replace("sched:sched_switch", "sched:no_such_tracepoint");
    std::fs::write(&config, text).unwrap();
    let out = Command::new(bin_path("flightrecd"))
        .arg("--check-config")
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(msg.contains("flightrec.toml:13:8: "), "{msg}");
    assert!(msg.contains("no_such_tracepoint"), "{msg}");
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn systemd_is_told_ready_once_listening_and_stopping_on_sigterm() {
    require_root("systemd_is_told_ready");
    use std::os::unix::net::UnixDatagram;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("flightrec.toml");
    std::fs::write(&config, test_config(dir.path(), "")).unwrap();
    let notify_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let child = Command::new(bin_path("flightrecd"))
        .arg("--config")
        .arg(&config)
        .env("NOTIFY_SOCKET", &notify_path)
        .env("JOURNAL_STREAM", "8:1234")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 512];
    let n = notify.recv(&mut buf).expect("no READY=1 within 30s");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(msg.contains("READY=1"), "{msg}");
    // Ready means listening: a client gets an answer at once.
    let socket = dir.path().join("run/flightrecd.sock");
    let out = flightrec_tests::snapctl_command()
        .arg("--socket")
        .arg(&socket)
        .arg("status")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    // STATUS= lines (the status `systemctl status` shows) come between.
    let mut statuses = Vec::new();
    loop {
        let n = notify.recv(&mut buf).expect("no STOPPING=1 after SIGTERM");
        let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
        if msg.contains("STOPPING=1") {
            break;
        }
        assert!(msg.starts_with("STATUS="), "unexpected notification: {msg}");
        statuses.push(msg);
    }
    // The daemon records every online CPU (`0-3,8`: ranges and singles).
    let cpus: usize = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .expect("online CPUs")
        .trim()
        .split(',')
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum();
    let plural = if cpus == 1 { "CPU" } else { "CPUs" };
    assert_eq!(
        statuses,
        [format!("STATUS=recording {cpus} {plural}, 0 snapshots\n")],
        "one STATUS= line before any dump"
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Under journald (JOURNAL_STREAM) lines carry no time stamp of their own.
    let log = String::from_utf8_lossy(&out.stderr);
    let first = log.lines().next().unwrap_or_default();
    assert!(first.trim_start().starts_with("INFO"), "{first}");
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a non-terminal log"
    );
}
