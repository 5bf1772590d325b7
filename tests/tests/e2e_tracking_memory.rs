//! End to end: a tracking log that wraps under process churn keeps at
//! most `tracking.max_checkpoints` checkpoints of the process table and
//! flat memory (issue 19). Alone in its binary: the churn it makes is
//! recorded by every daemon on the machine, so a test beside it that
//! counts the records of its own load would see these too.

use std::process::Command;
use std::time::{Duration, Instant};

use flightrec_tests::{Daemon, require_root, rss};
use serde_json::Value;

const MIB: u64 = 1 << 20;

fn tracking(d: &Daemon) -> Value {
    d.json(&["status"])["tracking"].clone()
}

/// Runs `n` short processes (each an exec with its maps: COMM, MMAP2s,
/// FORK and EXIT records, as a shell loop or a cron job makes them).
fn churn(n: usize) {
    let status = Command::new("sh")
        .args([
            "-c",
            &format!("i=0; while [ $i -lt {n} ]; do /bin/true; i=$((i+1)); done"),
        ])
        .status()
        .expect("sh");
    assert!(status.success());
}

/// Churns until the log evicted `records` more records than `from`.
fn churn_until_evicted(d: &Daemon, from: u64, records: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let t = tracking(d);
        if t["evicted_records"].as_u64().unwrap() >= from + records {
            return t;
        }
        assert!(Instant::now() < deadline, "the log never wrapped: {t}");
        churn(200);
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_wrapping_tracking_log_keeps_at_most_max_checkpoints_and_flat_memory() {
    require_root("a_wrapping_tracking_log_keeps_at_most_max_checkpoints_and_flat_memory");
    // 16 KiB between checkpoints would make 64 of them in a 1 MiB log;
    // max_checkpoints = 4 widens the interval to 256 KiB.
    let dir = tempfile::tempdir().expect("tempdir");
    let text = flightrec_tests::test_config(
        dir.path(),
        "[tracking]\ncheckpoint_interval = \"16KiB\"\nmax_checkpoints = 4\n\
         [snapshot]\ncompression = \"none\"\nmin_interval = \"0s\"\n",
    )
    .replacen("tracking_log = \"4MiB\"", "tracking_log = \"1MiB\"", 1);
    assert!(text.contains("tracking_log = \"1MiB\""), "{text}");
    let d = Daemon::start_in(dir, &text, &[]);
    let t = churn_until_evicted(&d, 0, 1);
    assert_eq!(t["checkpoint_interval_bytes"], 256 * 1024, "{t}");
    // The log full and wrapped once more: the table holds what it covers.
    let t = churn_until_evicted(&d, 0, t["log_records"].as_u64().unwrap());
    d.json(&["dump"]);
    let after_one = rss(d.pid());
    let mut most = t["checkpoints"].as_u64().unwrap();
    // Three more laps of the log, with dumps between them.
    let mut t = t;
    for _ in 0..3 {
        let evicted = t["evicted_records"].as_u64().unwrap();
        t = churn_until_evicted(&d, evicted, t["log_records"].as_u64().unwrap());
        most = most.max(t["checkpoints"].as_u64().unwrap());
        d.json(&["dump"]);
    }
    let after_four = rss(d.pid());
    eprintln!(
        "RSS after one lap of the 1 MiB log {} KiB, after four {} KiB; at most {most} \
         checkpoints: {t}",
        after_one >> 10,
        after_four >> 10
    );
    assert!(most <= 4, "{most} checkpoints held: {t}");
    assert!(
        most >= 2,
        "the interval left room for {most} checkpoint(s) only: {t}"
    );
    assert!(
        after_four <= after_one + 8 * MIB,
        "RSS grew from {} to {} KiB over three laps of the log",
        after_one >> 10,
        after_four >> 10
    );
}
