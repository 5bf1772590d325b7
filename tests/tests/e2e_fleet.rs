//! End to end: the fleet over a real `nats-server`. Three daemons on their
//! own configs (`host-a|b|c`, two with role=db): `snapctl fleet dump`
//! reaches all three and each has the snapshot (trigger "fleet", its
//! label) that `perf script` reads; `--select role=db` reaches only the
//! two; `--expect` names a host that did not answer. A daemon whose
//! password the server refuses says so in `snapctl status` and still
//! dumps on SIGUSR2; one started before its server connects once it runs.
//! A fleet dump of a moment older than the rings is cut from each host's
//! history.

use std::path::Path;
use std::time::{Duration, Instant};

use flightrec_tests::fleet::{
    connected, fleet_toml, snapctl_fleet_json, start_connected, wait_fleet,
};
use flightrec_tests::{Daemon, NatsServer, free_port, perf_script, require_root, test_config};
use serde_json::Value;

/// `[fleet]` for a test daemon that uploads nothing; `extra` adds keys
/// (credentials).
fn fleet_section(url: &str, host: &str, labels: &str, extra: &str) -> String {
    fleet_toml(
        &format!("\"{url}\""),
        host,
        labels,
        &format!("upload = false\n{extra}"),
    )
}

fn hosts(v: &Value) -> Vec<String> {
    v["replies"]
        .as_array()
        .expect("replies")
        .iter()
        .map(|r| r["host"].as_str().unwrap_or("?").to_string())
        .collect()
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn fleet_dump_reaches_every_daemon_and_the_selector_only_matching_ones() {
    require_root("fleet_dump_reaches_every_daemon_and_the_selector_only_matching_ones");
    let nats = NatsServer::start();
    let url = nats.url();
    let daemons = start_connected(
        [
            ("host-a", "role = \"db\", zone = \"1\""),
            ("host-b", "role = \"db\", zone = \"2\""),
            ("host-c", "role = \"web\", zone = \"1\""),
        ]
        .into_iter()
        .map(|(host, labels)| (host, fleet_section(&url, host, labels, "")))
        .collect(),
    );

    let (out, v) = snapctl_fleet_json(
        &url,
        &[
            "dump",
            "--label",
            "fleet-all",
            "--wait",
            "30s",
            "--expect",
            "host-a,host-b,host-c",
        ],
    );
    assert!(
        out.status.success(),
        "{v}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(hosts(&v), ["host-a", "host-b", "host-c"], "{v}");
    assert_eq!(v["missing"], serde_json::json!([]));
    for ((host, d), reply) in daemons.iter().zip(v["replies"].as_array().unwrap()) {
        assert_eq!(reply["host"], *host);
        assert_eq!(reply["trigger"], "fleet", "{reply}");
        assert_eq!(reply["label"], "fleet-all", "{reply}");
        assert_eq!(reply["compressed"], false);
        let path = Path::new(reply["path"].as_str().expect("path"));
        assert!(
            path.starts_with(&d.output),
            "{host}: {} not in {}",
            path.display(),
            d.output.display()
        );
        let bytes = std::fs::metadata(path).expect("snapshot on disk").len();
        assert_eq!(reply["bytes"].as_u64(), Some(bytes), "{reply}");
        // The daemon lists it with the same metadata, and perf reads it.
        let listed = d.list();
        let mine: Vec<&Value> = listed.iter().filter(|s| s["id"] == reply["id"]).collect();
        assert_eq!(mine.len(), 1, "{host}: {listed:?}");
        assert_eq!(mine[0]["trigger"], "fleet");
        assert_eq!(mine[0]["label"], "fleet-all");
        let script = perf_script(path, &[]);
        assert!(
            script.contains("sched_switch") || script.contains("cpu-clock"),
            "{host}: {script:.500}"
        );
    }

    // Only the two db hosts answer a selector on role=db: the wait runs
    // out (no --expect) and host-c has neither replied nor dumped.
    let started = Instant::now();
    let (out, v) = snapctl_fleet_json(
        &url,
        &[
            "dump", "--label", "db-only", "--select", "role=db", "--wait", "3s",
        ],
    );
    assert!(out.status.success(), "{v}");
    assert!(started.elapsed() >= Duration::from_secs(3));
    assert_eq!(hosts(&v), ["host-a", "host-b"], "{v}");
    for (host, d) in &daemons {
        let db_only = d.list().iter().filter(|s| s["label"] == "db-only").count();
        assert_eq!(db_only, usize::from(*host != "host-c"), "{host}");
        let status = d.json(&["status"]);
        let expected = if *host == "host-c" { 1 } else { 2 };
        assert_eq!(status["fleet"]["requests"], expected, "{host}: {status}");
        assert_eq!(status["fleet"]["dumps"], expected, "{host}");
    }

    // Two selector pairs must both match; an expected host that does not
    // answer is listed as missing, and the exit status is 1.
    let (out, v) = snapctl_fleet_json(
        &url,
        &[
            "dump",
            "--select",
            "role=db",
            "--select",
            "zone=2",
            "--wait",
            "3s",
            "--expect",
            "host-a,host-b",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{v}");
    assert_eq!(hosts(&v), ["host-b"], "{v}");
    assert_eq!(v["missing"], serde_json::json!(["host-a"]));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("1 hosts did not answer"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // One host by its own subject: only it answers and dumps.
    let (out, v) = snapctl_fleet_json(
        &url,
        &[
            "dump", "--host", "host-c", "--label", "c-only", "--wait", "2s",
        ],
    );
    assert!(out.status.success(), "{v}");
    assert_eq!(hosts(&v), ["host-c"], "{v}");
    assert_eq!(v["replies"][0]["label"], "c-only");
    for (host, d) in &daemons {
        let c_only = d.list().iter().filter(|s| s["label"] == "c-only").count();
        assert_eq!(c_only, usize::from(*host == "host-c"), "{host}");
    }

    // A label no snapshot may carry: every host answers why, nothing is
    // written, exit status 1.
    let before: Vec<usize> = daemons.iter().map(|(_, d)| d.list().len()).collect();
    let (out, v) = snapctl_fleet_json(
        &url,
        &[
            "dump",
            "--label",
            "../etc",
            "--wait",
            "20s",
            "--expect",
            "host-a,host-b,host-c",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{v}");
    assert_eq!(hosts(&v), ["host-a", "host-b", "host-c"], "{v}");
    for r in v["replies"].as_array().unwrap() {
        assert_eq!(
            r["error"], "invalid label \"../etc\": it starts with a dot",
            "{r}"
        );
    }
    let after: Vec<usize> = daemons.iter().map(|(_, d)| d.list().len()).collect();
    assert_eq!(before, after);
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_fleet_dump_at_an_instant_cuts_the_same_window_on_every_host() {
    require_root("a_fleet_dump_at_an_instant_cuts_the_same_window_on_every_host");
    let nats = NatsServer::start();
    let url = nats.url();
    // 4 MiB per CPU: the rings of three daemons reach back past the
    // window, a second and a half, even while the rest of the suite and
    // other work keep the CPUs busy (1 MiB reached less than 1.8 s there).
    let daemons: Vec<(&str, Daemon)> = ["host-a", "host-b", "host-c"]
        .into_iter()
        .map(|host| {
            let dir = tempfile::tempdir().expect("tempdir");
            let fleet = fleet_section(&url, host, "role = \"db\"", "");
            let text = test_config(dir.path(), &fleet)
                .replace("per_cpu = \"256KiB\"", "per_cpu = \"4MiB\"");
            (host, Daemon::start_in(dir, &text, &[]))
        })
        .collect();
    for (_, d) in &daemons {
        connected(d);
    }
    // The half second that ended 1 s ago, once every host's rings reach
    // back past it (witness: status).
    let deadline = Instant::now() + Duration::from_secs(30);
    for (host, d) in &daemons {
        while d.json(&["status"])["cpus"]
            .as_array()
            .expect("cpus")
            .iter()
            .any(|c| c["rings_reach_ns"].as_u64().unwrap_or(0) < 1_800_000_000)
        {
            assert!(
                Instant::now() < deadline,
                "{host}: the rings never reached 1.8 s back"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let (out, v) = snapctl_fleet_json(
        &url,
        &[
            "dump",
            "--at",
            "-1s",
            "--before",
            "500ms",
            "--wait",
            "30s",
            "--expect",
            "host-a,host-b,host-c",
        ],
    );
    assert!(
        out.status.success(),
        "{v}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replies = v["replies"].as_array().expect("replies");
    assert_eq!(replies.len(), 3, "{v}");
    let edge = |r: &Value, key: &str| r[key].as_i64().unwrap_or_else(|| panic!("{key}: {r}"));
    let starts: Vec<i64> = replies
        .iter()
        .map(|r| edge(r, "window_start_unix_ns"))
        .collect();
    let ends: Vec<i64> = replies
        .iter()
        .map(|r| edge(r, "window_end_unix_ns"))
        .collect();
    for (edges, what) in [(&starts, "starts"), (&ends, "ends")] {
        let spread = edges.iter().max().unwrap() - edges.iter().min().unwrap();
        assert!(
            spread <= 10_000_000,
            "the windows' {what} are {spread} ns apart: {v}"
        );
    }
    for r in replies {
        assert_eq!(
            edge(r, "window_end_unix_ns") - edge(r, "window_start_unix_ns"),
            500_000_000,
            "{r}"
        );
        assert_eq!(r["window_missing_ns"], 0, "{r}");
        // perf reads it, and holds samples.
        let script = perf_script(Path::new(r["path"].as_str().expect("path")), &[]);
        assert!(script.contains("cpu-clock"), "{r}: {script:.300}");
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_fleet_dump_of_a_moment_older_than_the_rings_is_cut_from_each_hosts_history() {
    require_root("a_fleet_dump_of_a_moment_older_than_the_rings_is_cut_from_each_hosts_history");
    let nats = NatsServer::start();
    let url = nats.url();
    let daemons: Vec<(&str, Daemon)> = ["host-a", "host-b"]
        .into_iter()
        .map(|host| {
            let dir = tempfile::tempdir().expect("tempdir");
            let history = dir.path().join("history");
            let extra = format!(
                "{}\n[history]\nenabled = true\ndir = \"{}\"\n",
                fleet_section(&url, host, "", ""),
                history.display()
            );
            let text = test_config(dir.path(), &extra);
            (host, Daemon::start_in(dir, &text, &[]))
        })
        .collect();
    for (_, d) in &daemons {
        connected(d);
    }
    // A load that keeps the 256 KiB rings to a few seconds, and a history
    // that reaches 20 s back on every host (witness: status).
    let _load = flightrec_tests::Load::shells(
        1,
        "while :; do perf bench sched messaging -g 1 -l 50 >/dev/null 2>&1; done",
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    let reach = |d: &Daemon, key: &str| -> u64 {
        d.json(&["status"])["cpus"]
            .as_array()
            .expect("cpus")
            .iter()
            .map(|c| c[key].as_u64().unwrap_or(0))
            .min()
            .unwrap_or(0)
    };
    for (host, d) in &daemons {
        while reach(d, "history_reach_ns") < 20_000_000_000 {
            assert!(
                Instant::now() < deadline,
                "{host}: the history never reached 20 s back"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    let (out, v) = snapctl_fleet_json(
        &url,
        &[
            "dump",
            "--at",
            "-15s",
            "--before",
            "2s",
            "--wait",
            "30s",
            "--expect",
            "host-a,host-b",
        ],
    );
    assert!(
        out.status.success(),
        "{v}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The rings could not have served it: they reach less than 15 s back.
    for (host, d) in &daemons {
        let rings = reach(d, "rings_reach_ns");
        assert!(
            rings < 13_000_000_000,
            "{host}: the rings reach {rings} ns back"
        );
    }
    let replies = v["replies"].as_array().expect("replies");
    assert_eq!(replies.len(), 2, "{v}");
    for r in replies {
        let start = r["window_start_unix_ns"].as_i64().expect("start");
        let end = r["window_end_unix_ns"].as_i64().expect("end");
        assert_eq!(end - start, 2_000_000_000, "{r}");
        assert_eq!(r["window_missing_ns"], 0, "{r}");
        let script = perf_script(
            Path::new(r["path"].as_str().expect("path")),
            &["-F", "event", "--ns"],
        );
        let samples = script.lines().filter(|l| l.contains("cpu-clock")).count();
        assert!(
            samples > 100,
            "{r}: {samples} cpu-clock samples in 2 s of history"
        );
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn wrong_credentials_show_in_status_and_the_daemon_still_dumps_on_sigusr2() {
    require_root("wrong_credentials_show_in_status_and_the_daemon_still_dumps_on_sigusr2");
    let nats = NatsServer::start_with_user("flightrec", "right-password");
    let url = nats.url();
    let secrets = tempfile::tempdir().expect("tempdir");
    let right = secrets.path().join("right");
    let wrong = secrets.path().join("wrong");
    std::fs::write(&right, "right-password\n").unwrap();
    std::fs::write(&wrong, "wrong-password\n").unwrap();
    let creds = |file: &Path| {
        format!(
            "user = \"flightrec\"\npassword_file = \"{}\"\n",
            file.display()
        )
    };
    let good = Daemon::start(&fleet_section(
        &url,
        "host-good",
        "role = \"db\"",
        &creds(&right),
    ));
    let bad = Daemon::start(&fleet_section(
        &url,
        "host-bad",
        "role = \"db\"",
        &creds(&wrong),
    ));

    // The password is really used: the right one connects.
    connected(&good);
    let fleet_status = wait_fleet(&bad, Duration::from_secs(20), |f| {
        f["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("authorization violation"))
    });
    assert_ne!(fleet_status["state"], "connected", "{fleet_status}");
    let human = String::from_utf8_lossy(&bad.snapctl(&["status"]).stdout).into_owned();
    assert!(
        human.contains(&format!(
            "cannot connect to {url}: authorization violation (the server refused the \
             credentials: check fleet.creds or fleet.user and fleet.password_file)"
        )),
        "{human}"
    );
    assert!(
        human.contains("fleet: connecting as host-bad")
            || human.contains("fleet: disconnected as host-bad"),
        "{human}"
    );

    // It records and dumps locally all the same.
    bad.signal("USR2");
    let deadline = Instant::now() + Duration::from_secs(20);
    let snapshot = loop {
        if let Some(s) = bad.list().into_iter().find(|s| s["trigger"] == "signal") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "no SIGUSR2 snapshot:\n{}",
            bad.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let script = perf_script(Path::new(snapshot["path"].as_str().unwrap()), &[]);
    assert!(!script.is_empty());

    // The fleet reaches the daemon with the right password only.
    let out = flightrec_tests::snapctl_command()
        .args(["--json", "fleet", "--nats", &url, "dump", "--wait", "1s"])
        .output()
        .unwrap();
    // snapctl itself has no credentials here: the server refuses it.
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err: Value = serde_json::from_slice(&out.stderr).expect("JSON error");
    assert_eq!(
        err["error"],
        format!(
            "NATS at {url}: authorization violation (the server refused the credentials: \
             --creds, --user with --password-file, or those of [fleet] in the config)"
        )
    );
    let right = right.to_str().unwrap();
    let (out, v) = snapctl_fleet_json(
        &url,
        &[
            "--user",
            "flightrec",
            "--password-file",
            right,
            "dump",
            "--wait",
            "3s",
        ],
    );
    assert!(out.status.success(), "{v}");
    assert_eq!(hosts(&v), ["host-good"], "{v}");
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_daemon_started_before_its_server_joins_when_the_server_comes() {
    require_root("a_daemon_started_before_its_server_joins_when_the_server_comes");
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let d = Daemon::start(&fleet_section(&url, "host-early", "role = \"db\"", ""));
    let f = wait_fleet(&d, Duration::from_secs(20), |f| {
        f["last_error"].as_str().is_some_and(|e| !e.is_empty())
    });
    assert_eq!(f["state"], "connecting", "{f}");
    assert!(
        f["last_error"]
            .as_str()
            .unwrap()
            .contains("is nats-server running and reachable?"),
        "{f}"
    );
    // Local dumps do not wait for NATS.
    let out = d.snapctl(&["dump", "--label", "alone"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let _nats = NatsServer::start_on(port, None);
    connected(&d);
    let (out, v) = snapctl_fleet_json(
        &url,
        &[
            "dump",
            "--label",
            "late",
            "--wait",
            "20s",
            "--expect",
            "host-early",
        ],
    );
    assert!(out.status.success(), "{v}");
    assert_eq!(v["replies"][0]["label"], "late", "{v}");

    // A changed [fleet] is reported by a reload and waits for a restart:
    // the running host name still answers.
    let text = std::fs::read_to_string(&d.config).unwrap();
    std::fs::write(&d.config, text.replace("host-early", "host-renamed")).unwrap();
    let r = d.json(&["reload"]);
    assert!(
        r["summary"]
            .as_str()
            .unwrap()
            .contains("fleet (at next restart)"),
        "{r}"
    );
    let (out, v) = snapctl_fleet_json(&url, &["dump", "--wait", "20s", "--expect", "host-early"]);
    assert!(out.status.success(), "{v}");
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn requests_beyond_the_waiting_limit_are_answered_busy() {
    require_root("requests_beyond_the_waiting_limit_are_answered_busy");
    let nats = NatsServer::start();
    let url = nats.url();
    // The dump waits 8s after its first trigger: every request sent
    // meanwhile waits for it.
    let config = fleet_section(&url, "host-busy", "role = \"db\"", "")
        .replace("[snapshot]\n", "[snapshot]\npost_trigger_delay = \"8s\"\n");
    let d = Daemon::start(&config);
    connected(&d);
    let clients: Vec<std::process::Child> = (0..20)
        .map(|_| {
            flightrec_tests::snapctl_command()
                .args([
                    "--json",
                    "fleet",
                    "--nats",
                    &url,
                    "dump",
                    "--host",
                    "host-busy",
                ])
                .args(["--wait", "30s"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn snapctl")
        })
        .collect();
    let mut ids = std::collections::BTreeSet::new();
    let mut busy = 0;
    for c in clients {
        let out = c.wait_with_output().unwrap();
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        let reply = &v["replies"][0];
        match reply["error"].as_str() {
            Some(e) => {
                assert_eq!(
                    e,
                    "busy: 16 fleet requests already wait for a snapshot on this host; ask again \
                     once they are answered"
                );
                assert_eq!(out.status.code(), Some(1));
                busy += 1;
            }
            None => {
                assert!(out.status.success(), "{v}");
                assert_eq!(reply["coalesced"], true, "{reply}");
                ids.insert(reply["id"].as_str().unwrap().to_string());
            }
        }
    }
    // Sixteen waited and shared one snapshot; four were turned away.
    assert_eq!(busy, 4);
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(d.list().len(), 1);
    assert_eq!(d.json(&["status"])["fleet"]["dumps"], 16);
}

/// VmRSS and VmHWM of `pid`, in bytes.
fn rss_and_peak(pid: i32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{name} missing"))
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_flood_of_huge_malformed_requests_costs_a_few_log_lines_and_no_memory() {
    require_root("a_flood_of_huge_malformed_requests_costs_a_few_log_lines_and_no_memory");
    const REQUESTS: u64 = 6000;
    const MIB: u64 = 1 << 20;
    let nats = NatsServer::start();
    let url = nats.url();
    let daemons = start_connected(vec![(
        "host-a",
        fleet_section(&url, "host-a", "role = \"db\"", ""),
    )]);
    let d = &daemons[0].1;
    let pid = d.pid();
    // A JSON string of 60,000 characters: serde quotes it whole in its
    // error, which 5595349 logged whole.
    let payload = format!("\"{}\"", "a".repeat(60_000));
    let log_before = d.log_text().len();
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset VmHWM");
    let (rss_before, _) = rss_and_peak(pid);
    let sent = Instant::now();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let client = async_nats::connect(&url).await.expect("connect to nats");
            for _ in 0..REQUESTS {
                client
                    .publish("flightrec.dump", payload.clone().into())
                    .await
                    .expect("publish");
            }
            client.flush().await.expect("flush");
        });
    // The witness that the flood is behind the daemon: a real request sent
    // after it is answered (it may be dropped with the flood's excess: the
    // daemon holds a few requests, not all of them; ask again then).
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (out, v) = snapctl_fleet_json(&url, &["dump", "--wait", "10s", "--expect", "host-a"]);
        if out.status.success() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon never answered again: {v}"
        );
    }
    let took = sent.elapsed();
    let fleet = d.json(&["status"])["fleet"].clone();
    let (rss_after, peak) = rss_and_peak(pid);
    let log = d.log_text();
    let grown = log.len() - log_before;
    let lines = log[log_before..]
        .lines()
        .filter(|l| l.contains("fleet: bad request"))
        .collect::<Vec<_>>();
    eprintln!(
        "{REQUESTS} requests of {} bytes in {took:?}: log +{grown} bytes ({} warnings), RSS {} -> \
         {} MiB, peak {} MiB; {fleet}",
        payload.len(),
        lines.len(),
        rss_before / MIB,
        rss_after / MIB,
        peak / MIB
    );
    assert!(
        lines.len() <= 2,
        "{} warnings, the first {} bytes long",
        lines.len(),
        lines.first().map_or(0, |l| l.len())
    );
    assert!(
        lines[0].contains("not valid JSON of a fleet dump") && lines[0].len() < 400,
        "{}",
        &lines[0][..lines[0].len().min(400)]
    );
    assert!(grown < 16 << 10, "the log grew by {grown} bytes");
    assert!(
        peak.saturating_sub(rss_before) < 32 * MIB,
        "RSS peaked {} MiB above its start",
        (peak - rss_before) / MIB
    );
    assert!(
        fleet["bad_requests"].as_u64().unwrap() >= 16,
        "the flood did not reach the daemon: {fleet}"
    );
}
