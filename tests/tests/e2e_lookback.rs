//! End to end: how far back a dump sees and which part of the past it
//! cuts. With the lossless freeze, a dump taken right after another still
//! reaches back as far as the memory rings hold (the ring frozen at the
//! last dump is read too), without holding any record twice, and without
//! losing any; `snapctl dump --at --before --after` cuts the window asked
//! for, and refuses one the rings no longer hold.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Duration;

use flightrec_tests::{Daemon, Load, perf_script, require_root, test_config};
use serde_json::Value;

/// Time span (seconds) of the samples of each CPU of a snapshot, from
/// `perf script`, and the sample lines seen more than once.
fn spans_and_repeats(path: &Path) -> (BTreeMap<u32, f64>, Vec<String>) {
    let script = perf_script(path, &["-F", "event,cpu,time,pid", "--ns"]);
    let mut seen = HashSet::new();
    let mut repeats = Vec::new();
    let mut bounds: BTreeMap<u32, (f64, f64)> = BTreeMap::new();
    for line in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if !seen.insert(line) {
            repeats.push(line.to_string());
        }
        let mut fields = line.split_whitespace();
        let (Some(_pid), Some(cpu), Some(time)) = (fields.next(), fields.next(), fields.next())
        else {
            panic!(
                "{}: a perf script line without pid, cpu and time: {line}",
                path.display()
            );
        };
        let cpu: u32 = cpu
            .trim_matches(|c| c == '[' || c == ']')
            .parse()
            .unwrap_or_else(|e| panic!("CPU of {line:?}: {e}"));
        let time: f64 = time
            .trim_end_matches(':')
            .parse()
            .unwrap_or_else(|e| panic!("time of {line:?}: {e}"));
        let entry = bounds.entry(cpu).or_insert((time, time));
        entry.0 = entry.0.min(time);
        entry.1 = entry.1.max(time);
    }
    let spans = bounds
        .into_iter()
        .map(|(cpu, (a, b))| (cpu, b - a))
        .collect();
    (spans, repeats)
}

/// The sample time (CLOCK_MONOTONIC, s) of each sample line of a snapshot.
fn sample_times(path: &Path) -> Vec<(u32, f64)> {
    perf_script(path, &["-F", "cpu,time", "--ns"])
        .lines()
        .filter_map(|l| {
            let mut fields = l.split_whitespace();
            let cpu = fields
                .next()?
                .trim_matches(|c| c == '[' || c == ']')
                .parse()
                .ok()?;
            let time = fields.next()?.trim_end_matches(':').parse().ok()?;
            Some((cpu, time))
        })
        .collect()
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC, in ns: turns a wall-clock time
/// into a sample time.
fn realtime_offset_ns() -> i128 {
    use nix::time::{ClockId, clock_gettime};
    let ns = |c| {
        let t = clock_gettime(c).expect("clock_gettime");
        i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec())
    };
    let mono = ns(ClockId::CLOCK_MONOTONIC);
    let real = ns(ClockId::CLOCK_REALTIME);
    real - mono
}

/// A daemon under a light load of its own, recording into rings that it
/// does not fill in the seconds a test runs. 32 MiB per CPU: a busy
/// machine's scheduler events (beside the test's own load, and the other
/// tests of this binary) filled the default 4 MiB in 2.1-2.4 s under
/// `perf bench sched messaging` in a loop.
fn daemon_under_light_load() -> (Daemon, Load) {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = test_config(
        dir.path(),
        "[snapshot]\ncompression = \"none\"\nmin_interval = \"100ms\"\n",
    )
    .replace("per_cpu = \"256KiB\"", "per_cpu = \"32MiB\"");
    let d = Daemon::start_in(dir, &text, &[]);
    let load = Load::shells(
        1,
        "while :; do perf bench sched messaging -g 1 -l 20 >/dev/null 2>&1; sleep 0.3; done",
    );
    (d, load)
}

fn dump_path(v: &Value) -> &Path {
    Path::new(v["path"].as_str().expect("dump path"))
}

fn assert_lost_nothing(dump: &Value, name: &str) {
    for c in dump["cpus"].as_array().expect("cpus") {
        assert_eq!(c["lost"], 0, "dump {name}: {c}");
        assert_eq!(c["lost_since_start"], 0, "dump {name}: {c}");
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_dump_right_after_another_reaches_back_as_far() {
    require_root("a_dump_right_after_another_reaches_back_as_far");
    // The default ring size and freeze, under a light load: the first
    // dump reaches back to the start, and so must the second.
    let (d, _load) = daemon_under_light_load();
    // The scenario: what the rings gathered over 3 s, then dumps 1 s apart.
    wait_for_reach(&d, 3.0);
    let first = d.json(&["dump"]);
    std::thread::sleep(Duration::from_secs(1));
    let second = d.json(&["dump"]);

    let (first_spans, first_repeats) = spans_and_repeats(dump_path(&first));
    let (second_spans, second_repeats) = spans_and_repeats(dump_path(&second));
    assert!(
        first_repeats.is_empty(),
        "first dump repeats {first_repeats:?}"
    );
    assert!(
        second_repeats.is_empty(),
        "second dump repeats {second_repeats:?}"
    );
    assert!(!first_spans.is_empty(), "the first dump holds no sample");
    for (cpu, &first_span) in &first_spans {
        assert!(
            first_span >= 2.0,
            "CPU {cpu}: the first dump spans only {first_span:.2} s of 3"
        );
        let second_span = second_spans.get(cpu).copied().unwrap_or(0.0);
        assert!(
            second_span >= 0.8 * first_span,
            "CPU {cpu}: the second dump spans {second_span:.2} s, the first {first_span:.2} s"
        );
    }
    assert_lost_nothing(&first, "first");
    assert_lost_nothing(&second, "second");
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_dump_holds_the_window_it_asks_for_and_nothing_else() {
    require_root("a_dump_holds_the_window_it_asks_for_and_nothing_else");
    let (d, _load) = daemon_under_light_load();
    // The scenario: 3 s recorded, then the second before the last 2 s.
    wait_for_reach(&d, 3.2);
    let v = d.json(&["dump", "--at", "-2s", "--before", "1s"]);
    let start = i128::from(v["window_start_unix_ns"].as_i64().expect("window start"));
    let end = i128::from(v["window_end_unix_ns"].as_i64().expect("window end"));
    assert_eq!(end - start, 1_000_000_000, "{v}");
    assert_eq!(v["window_missing_ns"], 0, "{v}");
    let offset = realtime_offset_ns();
    // Sample times in s, with 5 ms for reading the two clocks apart.
    let (low, high) = (
        (start - offset) as f64 / 1e9 - 0.005,
        (end - offset) as f64 / 1e9 + 0.005,
    );
    let times = sample_times(dump_path(&v));
    let outside: Vec<_> = times
        .iter()
        .filter(|(_, t)| *t < low || *t > high)
        .collect();
    assert!(
        outside.is_empty(),
        "{} of {} samples outside [{low:.6}, {high:.6}], e.g. {:?}",
        outside.len(),
        times.len(),
        &outside[..outside.len().min(5)]
    );
    for cpu in d.json(&["status"])["cpus"].as_array().expect("cpus") {
        let cpu = cpu["cpu"].as_u64().expect("cpu") as u32;
        let mine: Vec<f64> = times
            .iter()
            .filter(|(c, _)| *c == cpu)
            .map(|(_, t)| *t)
            .collect();
        let (first, last) = mine
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &t| (a.min(t), b.max(t)));
        // cpu-clock ticks at 999 Hz, idle or not: the window is full.
        assert!(
            first < low + 0.1 && last > high - 0.1,
            "CPU {cpu}: samples from {first:.3} to {last:.3}, window {low:.3} to {high:.3}"
        );
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_window_the_rings_no_longer_hold_is_refused_and_a_bad_one_named() {
    require_root("a_window_the_rings_no_longer_hold_is_refused_and_a_bad_one_named");
    let (d, _load) = daemon_under_light_load();
    // Witness: the rings hold something.
    assert!(d.json(&["dump"])["records"].as_u64().unwrap_or(0) > 0);
    let before = d.list().len();

    let out = d.snapctl(&["--json", "dump", "--at", "-1h"]);
    assert_eq!(out.status.code(), Some(1));
    let err: Value = serde_json::from_slice(&out.stderr).expect("JSON error");
    assert_eq!(err["code"], "FailedPrecondition", "{err}");
    let msg = err["error"].as_str().expect("message");
    assert!(
        msg.contains("before the oldest record the memory rings still hold (20"),
        "{msg}"
    );
    assert_eq!(d.list().len(), before, "no snapshot for a refused window");

    for (args, field) in [
        (&["--after", "2h"][..], "after_ns: "),
        (&["--at", "+2h"][..], "at_unix_ns: "),
        (&["--before", "30d"][..], "before_ns: "),
    ] {
        let mut full = vec!["--json", "dump"];
        full.extend_from_slice(args);
        let out = d.snapctl(&full);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err: Value = serde_json::from_slice(&out.stderr).expect("JSON error");
        assert_eq!(err["code"], "InvalidArgument", "{args:?}: {err}");
        assert!(err["error"].as_str().unwrap().starts_with(field), "{err}");
    }
    // A window reaching back past the rings is served with what is left.
    let v = d.json(&["dump", "--before", "1h"]);
    let missing = v["window_missing_ns"].as_u64().expect("missing");
    assert!(
        missing > 3_500_000_000_000 && missing < 3_600_000_000_000,
        "{v}"
    );
    assert!(v["records"].as_u64().unwrap_or(0) > 0, "{v}");
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn after_keeps_recording_until_the_windows_end() {
    require_root("after_keeps_recording_until_the_windows_end");
    let (d, _load) = daemon_under_light_load();
    // Witness: the rings reach back past the window's start.
    wait_for_reach(&d, 1.0);
    let asked = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let v = d.json(&["dump", "--before", "500ms", "--after", "1s"]);
    let start = v["window_start_unix_ns"].as_i64().expect("start");
    let end = v["window_end_unix_ns"].as_i64().expect("end");
    // The window is cut around the moment the request arrived.
    assert!(end - start == 1_500_000_000, "{v}");
    assert!(
        end >= asked + 1_000_000_000 && end < asked + 2_000_000_000,
        "{v}"
    );
    // The rings recorded the second after: samples reach its end.
    let offset = realtime_offset_ns();
    let newest = sample_times(dump_path(&v))
        .iter()
        .map(|(_, t)| *t)
        .fold(f64::MIN, f64::max);
    let end_s = (i128::from(end) - offset) as f64 / 1e9;
    assert!(
        newest > end_s - 0.1 && newest <= end_s + 0.005,
        "newest {newest:.3}, end {end_s:.3}"
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_triggers_before_cuts_its_snapshots() {
    require_root("a_triggers_before_cuts_its_snapshots");
    let dir = tempfile::tempdir().expect("tempdir");
    // Rings of the default 4 MiB: the tests' 256 KiB can hold less than
    // 300 ms while the other tests of this binary load the machine, and
    // the window then starts at the oldest record held instead.
    let text = test_config(
        dir.path(),
        "[snapshot]\ncompression = \"none\"\nmin_interval = \"100ms\"\n\n\
         [[trigger]]\nname = \"tick\"\non = \"interval\"\nevery = \"2s\"\nbefore = \"300ms\"\n",
    )
    .replace("per_cpu = \"256KiB\"", "per_cpu = \"4MiB\"");
    let d = Daemon::start_in(dir, &text, &[]);
    // Witness: the trigger's first snapshot (the rings hold 2 s by then).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let snapshot = loop {
        if let Some(s) = d
            .list()
            .into_iter()
            .find(|s| s["trigger"] == "condition:tick")
        {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no snapshot of the trigger in 20 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // The window is the trigger's `before` from the firing to the freeze,
    // not cut short by what the rings hold.
    let window = |key: &str| snapshot[key].as_u64().expect(key);
    let span = window("window_end_unix_ns") - window("window_start_unix_ns");
    assert!((300_000_000..350_000_000).contains(&span), "{snapshot}");
    let times = sample_times(Path::new(snapshot["path"].as_str().expect("path")));
    let (first, last) = times.iter().fold((f64::MAX, f64::MIN), |(a, b), (_, t)| {
        (a.min(*t), b.max(*t))
    });
    // 300 ms before the firing, and the moment it takes to freeze.
    assert!(
        last - first <= 0.35 && last - first >= 0.25,
        "the snapshot spans {:.3} s: {snapshot}",
        last - first
    );
}

/// Per CPU: how far back the rings reach (s), and their record rate.
fn reach_per_cpu(d: &Daemon) -> Vec<(u64, f64, u64)> {
    d.json(&["status"])["cpus"]
        .as_array()
        .expect("cpus")
        .iter()
        .map(|c| {
            (
                c["cpu"].as_u64().expect("cpu"),
                c["rings_reach_ns"].as_u64().expect("rings_reach_ns") as f64 / 1e9,
                c["records_per_second"]
                    .as_u64()
                    .expect("records_per_second"),
            )
        })
        .collect()
}

/// Waits until the rings of every CPU reach `seconds` back.
fn wait_for_reach(d: &Daemon, seconds: f64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while reach_per_cpu(d)
        .iter()
        .any(|&(_, reach, _)| reach < seconds)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the rings never reached {seconds} s back: {:?}",
            reach_per_cpu(d)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn status_says_how_far_back_the_rings_reach_before_and_after_a_dump() {
    require_root("status_says_how_far_back_the_rings_reach_before_and_after_a_dump");
    let started = std::time::Instant::now();
    let (d, _load) = daemon_under_light_load();
    wait_for_reach(&d, 2.5);
    let before = reach_per_cpu(&d);
    let bound = started.elapsed().as_secs_f64();
    for &(cpu, reach, rate) in &before {
        // The rings have recorded since the start, and are not full yet.
        assert!(
            reach >= 2.5 && reach <= bound,
            "CPU {cpu}: reach {reach:.2} s, {bound:.2} s since the start"
        );
        assert!(rate > 0, "CPU {cpu}: no record rate");
    }
    d.json(&["dump"]);
    for ((cpu, after, _), (_, reach, _)) in reach_per_cpu(&d).into_iter().zip(before) {
        assert!(
            after >= reach,
            "CPU {cpu}: a dump took the reach from {reach:.2} s to {after:.2} s"
        );
    }
}
