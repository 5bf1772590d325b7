//! End to end under pressure: signal bursts and concurrent clients.

use std::path::Path;
use std::time::{Duration, Instant};

use flightrec_tests::{Daemon, Load, perf_script, require_root};
use serde_json::Value;

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_burst_of_100_sigusr2_is_rate_limited_and_the_daemon_stays_responsive() {
    require_root("a_burst_of_100_sigusr2");
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\nmin_interval = \"1s\"\n");
    let _load = Load::start();
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    for i in 0..100 {
        d.signal("USR2");
        std::thread::sleep(Duration::from_millis(10));
        if i % 20 == 0 {
            let t = Instant::now();
            let out = d.snapctl(&["status"]);
            slowest = slowest.max(t.elapsed());
            assert!(out.status.success(), "status failed during the burst");
        }
    }
    let burst = started.elapsed();
    assert!(
        slowest < Duration::from_secs(1),
        "status took {slowest:?} during the burst"
    );
    // Let the last coalesced dump happen.
    std::thread::sleep(Duration::from_millis(1500));
    let list = d.list();
    let window = started.elapsed();
    // One dump at once, then at most one per second.
    let allowed = 1 + window.as_secs() as usize;
    assert!(!list.is_empty(), "no snapshot at all");
    assert!(
        list.len() <= allowed,
        "{} snapshots in {window:?} (burst {burst:?}) with min_interval 1s",
        list.len()
    );
    assert!(
        list.len() >= 2,
        "the burst after the first dump must give a follow-up"
    );
    let times: Vec<i64> = list
        .iter()
        .map(|s| s["created_unix_ns"].as_i64().unwrap())
        .collect();
    for w in times.windows(2) {
        // Names are reserved after the freeze; allow for scheduling jitter.
        assert!(w[1] - w[0] >= 900_000_000, "dumps {}ns apart", w[1] - w[0]);
    }
    for s in &list {
        assert_eq!(s["trigger"], "signal");
        perf_script(Path::new(s["path"].as_str().unwrap()), &["-F", "event"]);
    }
    let status = d.json(&["status"]);
    assert_eq!(status["dumps"].as_u64().unwrap(), list.len() as u64);
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn twenty_concurrent_dump_clients_are_all_answered() {
    require_root("twenty_concurrent_dump_clients");
    let d = Daemon::start("[snapshot]\ncompression = \"zstd\"\nmin_interval = \"200ms\"\n");
    let _load = Load::start();
    std::thread::sleep(Duration::from_millis(300));
    let clients: Vec<_> = (0..20)
        .map(|i| {
            d.snapctl_cmd(&["--json", "dump", "--label", &format!("client-{i}")])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn snapctl")
        })
        .collect();
    let mut replies = Vec::new();
    for c in clients {
        let out = c.wait_with_output().expect("snapctl");
        assert!(
            out.status.success(),
            "a client failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        replies.push(v);
    }
    let mut paths: Vec<&str> = replies
        .iter()
        .map(|v| v["path"].as_str().unwrap())
        .collect();
    paths.sort();
    paths.dedup();
    // Coalesced: far fewer files than clients, each one readable.
    assert!(paths.len() < 20, "{} files for 20 clients", paths.len());
    let coalesced = replies.iter().filter(|v| v["coalesced"] == true).count();
    assert!(
        coalesced >= 20 - paths.len(),
        "{coalesced} marked coalesced"
    );
    for p in &paths {
        assert!(Path::new(p).exists());
        let script = perf_script(Path::new(p), &["-F", "event"]);
        assert!(!script.is_empty(), "{p} has no samples");
    }
    for v in &replies {
        assert_eq!(v["compressed"], true);
    }
    assert_eq!(d.list().len(), paths.len());
}
