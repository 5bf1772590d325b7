//! End to end: the dump queue against a member of the socket group. A
//! request that asks for later never holds a trigger that asks for now; a
//! request whose caller left costs nothing; a past window is never served
//! by the rings; triggers that arrive during a long dump share one
//! follow-up.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use flightrec_tests::{Daemon, Load, require_root, test_config, unix_now_ns};
use serde_json::Value;

/// The snapshot of `list` with this trigger that is not one of `seen`.
fn new_snapshot(d: &Daemon, trigger: &str, seen: &[String], within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = d.list().into_iter().find(|s| {
            s["trigger"] == trigger && !seen.iter().any(|id| s["id"].as_str() == Some(id))
        }) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "no new {trigger} snapshot within {within:?}:\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn ids(d: &Daemon) -> Vec<String> {
    d.list()
        .iter()
        .filter_map(|s| s["id"].as_str().map(str::to_string))
        .collect()
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_pending_after_never_holds_a_signal_or_another_dump() {
    require_root("a_pending_after_never_holds_a_signal_or_another_dump");
    // Rings that reach back seconds under a heavy load (256 KiB a CPU
    // held half a second beside 40 runnable tasks): root's dump, asked a
    // second or two after the signal there, still holds its moment.
    let dir = tempfile::tempdir().expect("tempdir");
    let text = test_config(
        dir.path(),
        "[snapshot]\ncompression = \"none\"\nmin_interval = \"0s\"\n",
    )
    .replace("per_cpu = \"256KiB\"", "per_cpu = \"64MiB\"");
    assert!(text.contains("64MiB"), "{text}");
    let d = Daemon::start_in(dir, &text, &[]);
    let _load = Load::start();
    // A group member asks for the next two minutes, then goes away... but
    // not before its request is in the queue.
    let mut member = d
        .snapctl_cmd(&["dump", "--after", "2m", "--label", "member"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the member's snapctl");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        member.try_wait().expect("poll").is_none(),
        "the member's dump should still wait for its window's end"
    );
    let before = ids(&d);

    // SIGUSR2 is frozen at once.
    let sent = unix_now_ns();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.pid()),
        nix::sys::signal::Signal::SIGUSR2,
    )
    .expect("send SIGUSR2");
    let signal = new_snapshot(&d, "signal", &before, Duration::from_secs(5));
    let frozen = signal["created_unix_ns"].as_i64().expect("created_unix_ns");
    let after_signal = (frozen - sent) as f64 / 1e6;
    eprintln!("SIGUSR2 frozen {after_signal:.2} ms after it was sent");
    assert!(
        (0.0..10.0).contains(&after_signal),
        "SIGUSR2 frozen {after_signal:.2} ms after it was sent, behind a pending --after 2m"
    );

    // Root's own dump returns at once, holding the signal's moment.
    let asked = Instant::now();
    let v = d.json(&["dump", "--label", "root"]);
    let took = asked.elapsed();
    // Behind the member's request it would take its two minutes; a
    // loaded machine takes seconds to run snapctl.
    assert!(took < Duration::from_secs(20), "root's dump took {took:?}");
    let (start, end) = (
        v["window_start_unix_ns"].as_i64().expect("window start"),
        v["window_end_unix_ns"].as_i64().expect("window end"),
    );
    assert!(
        start <= sent && sent <= end,
        "root's dump holds {start}..{end}, not the signal's moment {sent}"
    );
    assert_eq!(v["coalesced"], false, "a now dump shared a pending after's");

    // The member leaves: its request is dropped, no snapshot comes of it
    // (checked by the next test with a shorter after: two minutes is too
    // long to wait here).
    member.kill().expect("kill the member");
    let _ = member.wait();
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_request_whose_caller_went_away_is_never_dumped_and_after_has_a_limit() {
    require_root("a_request_whose_caller_went_away_is_never_dumped_and_after_has_a_limit");
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\nmin_interval = \"0s\"\n");
    let mut member = d
        .snapctl_cmd(&["dump", "--after", "8s", "--label", "gone"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_secs(1));
    member.kill().expect("kill");
    let _ = member.wait();
    // A witness that the queue moved past the window's end: a dump asking
    // for a window ending later than the dropped one.
    let witness = d.json(&["dump", "--after", "9s", "--label", "witness"]);
    assert_eq!(witness["label"], "witness");
    assert_eq!(witness["coalesced"], false);
    assert!(
        d.list().iter().all(|s| s["label"] != "gone"),
        "a dump was written for a caller that went away: {:?}",
        d.list()
    );
    // The documented maximum, named with its field.
    let out = d.snapctl(&["dump", "--after", "6m"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("after_ns") && err.contains("5m"),
        "the refusal names the field and the limit: {err}"
    );
}

/// A daemon with `[history]` in its own dir, 256 KiB rings.
fn daemon_with_history() -> Daemon {
    let dir = tempfile::tempdir().expect("tempdir");
    let history = dir.path().join("history");
    let text = test_config(
        dir.path(),
        &format!(
            "[snapshot]\ncompression = \"none\"\nmin_interval = \"0s\"\n\n[history]\n\
             enabled = true\ndir = \"{}\"\nmax_age = \"2min\"\n",
            history.display()
        ),
    );
    Daemon::start_in(dir, &text, &[])
}

/// Waits until the history reaches `secs` back and the rings hold less.
fn wait_for_history_beyond_rings(d: &Daemon, secs: f64) {
    let deadline = Instant::now() + Duration::from_secs_f64(secs + 60.0);
    loop {
        let status = d.json(&["status"]);
        let cpu = &status["cpus"][0];
        let history = cpu["history_reach_ns"].as_u64().unwrap_or(0) as f64 / 1e9;
        let rings = cpu["rings_reach_ns"].as_u64().unwrap_or(u64::MAX) as f64 / 1e9;
        if history >= secs && rings < secs - 6.0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "history {history:.1} s, rings {rings:.1} s: {status}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Sample times of a snapshot on the wall clock, in ns (perf script's
/// times are the sample clock: CLOCK_MONOTONIC).
fn sample_wall_times(path: &Path) -> Vec<i64> {
    use nix::time::{ClockId, clock_gettime};
    let ns = |c| {
        let t = clock_gettime(c).expect("clock_gettime");
        t.tv_sec() * 1_000_000_000 + t.tv_nsec()
    };
    let offset = ns(ClockId::CLOCK_REALTIME) - ns(ClockId::CLOCK_MONOTONIC);
    let out = Command::new("perf")
        .args(["script", "-F", "time", "--ns", "-i"])
        .arg(path)
        .output()
        .expect("perf script");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (s, n) = l.trim().trim_end_matches(':').split_once('.')?;
            Some(s.parse::<i64>().ok()? * 1_000_000_000 + n.parse::<i64>().ok()? + offset)
        })
        .collect()
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_past_window_in_a_burst_is_the_one_asked_for() {
    require_root("a_past_window_in_a_burst_is_the_one_asked_for");
    let d = daemon_with_history();
    let _load = Load::shells(
        1,
        "while :; do perf bench sched messaging -g 1 -l 50 >/dev/null 2>&1; done",
    );
    wait_for_history_beyond_rings(&d, 25.0);
    // Within a few ms: a dump that keeps recording 2 s more, a window 15 to
    // 20 s back, a plain dump. No one file holds the past window and
    // either of the others.
    let spawn = |args: &[&str]| {
        d.snapctl_cmd(&[&["--json"], args].concat())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn snapctl")
    };
    let first = spawn(&["dump", "--after", "2s"]);
    let past = spawn(&["dump", "--at", "-15s", "--before", "5s", "--label", "B"]);
    let last = spawn(&["dump"]);
    let asked_at = unix_now_ns();
    let reply = |c: std::process::Child| {
        let out = c.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).expect("JSON")
    };
    let (first, b, last) = (reply(first), reply(past), reply(last));
    let (start, end) = (
        b["window_start_unix_ns"].as_i64().unwrap(),
        b["window_end_unix_ns"].as_i64().unwrap(),
    );
    let s = 1_000_000_000;
    // The window asked for: 20 to 15 s before the request (give or take the
    // few ms the three requests took to send).
    assert!(
        (start - (asked_at - 20 * s)).abs() < s / 2 && (end - (asked_at - 15 * s)).abs() < s / 2,
        "B holds {:.1}..{:.1} s before the request, not 20..15:\n{b}",
        (asked_at - start) as f64 / 1e9,
        (asked_at - end) as f64 / 1e9
    );
    assert_eq!(b["window_missing_ns"], 0, "the history held it all: {b}");
    assert_ne!(
        b["path"], first["path"],
        "the past window got the rings' file"
    );
    assert_ne!(
        b["path"], last["path"],
        "the past window got the rings' file"
    );
    let times = sample_wall_times(Path::new(b["path"].as_str().unwrap()));
    assert!(times.len() > 100, "B holds only {} samples", times.len());
    let outside = times
        .iter()
        .filter(|&&t| t < start - s / 100 || t > end + s / 100)
        .count();
    assert_eq!(outside, 0, "samples of B outside its window");
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn triggers_during_a_long_dump_share_one_follow_up() {
    require_root("triggers_during_a_long_dump_share_one_follow_up");
    // 16 MiB rings compressed at zstd 19: a dump of a second or more.
    let dir = tempfile::tempdir().expect("tempdir");
    let text = test_config(
        dir.path(),
        "[snapshot]\ncompression = \"zstd\"\nlevel = 19\nmin_interval = \"0s\"\n",
    )
    .replace("per_cpu = \"256KiB\"", "per_cpu = \"16MiB\"");
    let d = Daemon::start_in(dir, &text, &[]);
    let load = Load::start();
    // Fill the rings.
    let deadline = Instant::now() + Duration::from_secs(60);
    while d.json(&["status"])["cpus"][0]["ring_records"]
        .as_u64()
        .unwrap_or(0)
        < 100_000
    {
        assert!(Instant::now() < deadline, "the rings did not fill");
        std::thread::sleep(Duration::from_millis(250));
    }
    drop(load);
    let before = ids(&d);
    let long = d
        .snapctl_cmd(&["--json", "dump", "--label", "long"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Once it is being written (its sidecar exists), three signals and a dump.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_dir(&d.output)
        .map(|r| {
            r.flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with("-long.meta"))
        })
        .unwrap_or(false)
    {
        assert!(Instant::now() < deadline, "the long dump never started");
        std::thread::sleep(Duration::from_millis(1));
    }
    for _ in 0..3 {
        d.signal("USR2");
    }
    let during = d.json(&["dump", "--label", "during"]);
    let long = long.wait_with_output().expect("wait");
    assert!(long.status.success());
    let long: Value = serde_json::from_slice(&long.stdout).expect("JSON");
    let took = long["timings"]["total_ns"].as_u64().unwrap_or(0) as f64 / 1e9;
    assert!(
        took > 0.3,
        "the long dump took {took:.2} s: too short to test anything"
    );
    assert_eq!(during["coalesced"], true, "{during}");
    assert_eq!(during["trigger"], "api+signal", "{during}");
    let new: Vec<Value> = d
        .list()
        .into_iter()
        .filter(|s| !before.iter().any(|id| s["id"].as_str() == Some(id)))
        .collect();
    assert_eq!(
        new.len(),
        2,
        "the long dump and one follow-up: {new:?}\n{}",
        d.log_text()
    );
}
