//! End to end: the history tier (`[history]`). Windows minutes old are cut
//! from the segments on disk with every process named, across a kill -9
//! of the daemon; the byte budget holds; a full or unwritable history
//! directory stops the history, never the ring dumps, and keeps what it
//! wrote.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use flightrec_tests::{
    Daemon, Load, Tmpfs, Watcher, copy_executable, flightrecd_to_end, perf_script, require_root,
    test_config, unix_now_ns,
};
use serde_json::Value;

/// A daemon on the test config (256 KiB rings) with `[history]` on in
/// `DIR/history`, and `history_extra` added to that section.
fn daemon_with_history(history_extra: &str) -> Daemon {
    daemon_with_history_in_rings(history_extra, "256KiB")
}

/// [`daemon_with_history`] with rings of `per_cpu` each.
fn daemon_with_history_in_rings(history_extra: &str, per_cpu: &str) -> Daemon {
    let dir = tempfile::tempdir().expect("tempdir");
    let history = dir.path().join("history");
    let text = test_config(
        dir.path(),
        &format!(
            "[snapshot]\ncompression = \"none\"\nmin_interval = \"100ms\"\n\n[history]\n\
             enabled = true\ndir = \"{}\"\n{history_extra}\n",
            history.display()
        ),
    )
    .replace("per_cpu = \"256KiB\"", &format!("per_cpu = \"{per_cpu}\""));
    Daemon::start_in(dir, &text, &[])
}

fn history_dir(d: &Daemon) -> PathBuf {
    PathBuf::from(
        d.json(&["status"])["history"]["dir"]
            .as_str()
            .expect("status names the history dir"),
    )
}

/// A load that keeps 256 KiB rings to a few seconds.
fn busy_load() -> Load {
    Load::shells(
        1,
        "while :; do perf bench sched messaging -g 1 -l 50 >/dev/null 2>&1; done",
    )
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC, in ns.
fn realtime_offset_ns() -> i64 {
    use nix::time::{ClockId, clock_gettime};
    let ns = |c| {
        let t = clock_gettime(c).expect("clock_gettime");
        t.tv_sec() * 1_000_000_000 + t.tv_nsec()
    };
    ns(ClockId::CLOCK_REALTIME) - ns(ClockId::CLOCK_MONOTONIC)
}

/// Whether a sample's thread is named. The kernel gives pid or tid -1 to the
/// last switch of a task whose pid is already released (`pid_alive()`
/// false): perf names such a sample ":-1", and so does every reader.
fn named(pid: i64, comm: &str) -> bool {
    pid == -1 || comm == ":-1" || (!comm.starts_with(':') && !comm.is_empty())
}

/// `(cpu, sample time in ns, pid, comm)` of every sample of a snapshot,
/// and what perf wrote on stderr.
fn samples(path: &Path) -> (Vec<(u32, i64, i64, String)>, String) {
    let out = Command::new("perf")
        .args(["script", "-F", "cpu,time,pid,comm", "--ns", "-i"])
        .arg(path)
        .output()
        .expect("run perf script");
    assert!(out.status.success(), "perf script failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut rows = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        // "  comm PID [CPU] SECS.NANOS:" (the comm may hold spaces).
        let (head, rest) = line.rsplit_once('[').expect("a CPU in brackets");
        let (cpu, time) = rest.split_once(']').expect("a CPU in brackets");
        let head = head.trim_end();
        let (comm, pid) = head.rsplit_once(' ').expect("comm and pid");
        let time = time.trim().trim_end_matches(':');
        let (s, ns) = time.split_once('.').expect("seconds.nanoseconds");
        let parsed = (|| {
            Some((
                cpu.trim().parse().ok()?,
                s.parse::<i64>().ok()? * 1_000_000_000 + ns.parse::<i64>().ok()?,
                pid.trim().parse().ok()?,
                comm.trim().to_string(),
            ))
        })();
        rows.push(parsed.unwrap_or_else(|| panic!("a perf script line not understood: {line:?}")));
    }
    (rows, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The oldest record the memory rings hold, over every CPU (unix ns),
/// from a `status`.
fn rings_oldest(status: &Value) -> i64 {
    status["cpus"]
        .as_array()
        .expect("cpus")
        .iter()
        .filter_map(|c| c["rings_oldest_unix_ns"].as_i64())
        .min()
        .unwrap_or(0)
}

/// Waits until the history reaches at least `secs` back.
fn wait_for_history(d: &Daemon, secs: f64) {
    let deadline = Instant::now() + Duration::from_secs_f64(secs + 30.0);
    loop {
        let status = d.json(&["status"]);
        let reach = status["cpus"][0]["history_reach_ns"].as_u64().unwrap_or(0);
        if reach as f64 / 1e9 >= secs {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the history reaches {reach} ns back, not {secs} s: {status}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_window_a_minute_old_is_cut_from_the_history_with_every_process_named() {
    require_root("a_window_a_minute_old_is_cut_from_the_history_with_every_process_named");
    let d = daemon_with_history("max_age = \"2min\"\nmax_bytes = \"64MiB\"");
    let _load = busy_load();
    // A process that runs for 25 s and is gone 50 s before the dump.
    let bin = d.dir.path().join("fr-hist-gone");
    copy_executable("/usr/bin/yes", &bin);
    let mut gone = Command::new(&bin)
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn fr-hist-gone");
    let gone_pid = i64::from(gone.id());
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(25) {
        std::thread::sleep(Duration::from_millis(100));
    }
    gone.kill().expect("kill fr-hist-gone");
    gone.wait().expect("reap fr-hist-gone");
    let exited = Instant::now();
    // The scenario's time: 50 s after its exit.
    while exited.elapsed() < Duration::from_secs(50) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let status = d.json(&["status"]);
    for c in status["cpus"].as_array().expect("cpus") {
        assert!(
            c["rings_reach_ns"].as_u64().unwrap_or(0) < 60_000_000_000,
            "the memory rings alone reach back a minute, the test proves nothing: {c}"
        );
    }

    let dump = d.json(&["dump", "--at", "-60s", "--before", "10s"]);
    let (start, end) = (
        dump["window_start_unix_ns"].as_i64().expect("window start"),
        dump["window_end_unix_ns"].as_i64().expect("window end"),
    );
    assert_eq!(end - start, 10_000_000_000, "{dump}");
    assert_eq!(dump["window_missing_ns"], 0, "{dump}");
    let path = PathBuf::from(dump["path"].as_str().expect("path"));
    let (rows, stderr) = samples(&path);
    no_warning_but_counted_losses(&path, &stderr, lost_by_status(&d.json(&["status"])));
    let offset = realtime_offset_ns();
    let (first, last) = (start - offset, end - offset);
    let mut per_cpu: BTreeMap<u32, u64> = BTreeMap::new();
    for (cpu, t, pid, comm) in &rows {
        // 1 ms for the two clock readings that relate the clocks.
        assert!(
            *t >= first - 1_000_000 && *t <= last + 1_000_000,
            "a sample at {t} outside [{first}, {last}] (cpu {cpu}, pid {pid} {comm})"
        );
        assert!(named(*pid, comm), "pid {pid} has no name: {comm:?}");
        *per_cpu.entry(*cpu).or_default() += 1;
    }
    let cpus = status["cpus"].as_array().expect("cpus").len();
    assert_eq!(per_cpu.len(), cpus, "samples of every CPU: {per_cpu:?}");
    let of_gone: Vec<_> = rows.iter().filter(|r| r.2 == gone_pid).collect();
    assert!(
        of_gone.len() > 100,
        "fr-hist-gone (pid {gone_pid}) ran all through the window on a CPU: {} samples",
        of_gone.len()
    );
    assert!(
        of_gone.iter().all(|r| r.3 == "fr-hist-gone"),
        "pid {gone_pid} is named {:?}",
        of_gone.first().map(|r| &r.3)
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn the_history_written_before_a_kill_9_is_served_after_the_restart() {
    require_root("the_history_written_before_a_kill_9_is_served_after_the_restart");
    let mut d = daemon_with_history("max_age = \"2min\"\nmax_bytes = \"64MiB\"");
    let _load = busy_load();
    wait_for_history(&d, 8.0);
    let counted = lost_by_status(&d.json(&["status"]));
    let killed_at = unix_now_ns();
    d.kill9();
    d.spawn();
    // A window that ends 2 s before the kill: the old daemon's records.
    let ago = (unix_now_ns() - killed_at) / 1_000_000_000 + 3;
    let dump = d.json(&["dump", "--at", &format!("-{ago}s"), "--before", "4s"]);
    let path = PathBuf::from(dump["path"].as_str().expect("path"));
    let (rows, stderr) = samples(&path);
    no_warning_but_counted_losses(&path, &stderr, counted);
    let end = dump["window_end_unix_ns"].as_i64().expect("end");
    assert!(end < killed_at, "the window ends before the kill: {dump}");
    let cpus: BTreeSet<u32> = rows.iter().map(|r| r.0).collect();
    assert!(
        rows.len() > 200 && cpus.len() >= 2,
        "{} samples on CPUs {cpus:?} from before the kill",
        rows.len()
    );
    let unnamed: BTreeSet<(i64, &str)> = rows
        .iter()
        .filter(|r| !named(r.2, &r.3))
        .map(|r| (r.2, r.3.as_str()))
        .collect();
    assert!(
        unnamed.is_empty(),
        "pids not named after the restart: {unnamed:?}"
    );
    // The reader this project trusts the least: the perf report summary.
    let report = Command::new("perf")
        .args(["report", "--stdio", "--sort", "comm", "-i"])
        .arg(&path)
        .output()
        .expect("perf report");
    assert!(report.status.success(), "{report:?}");
}

/// The bytes of every file in the history dir, and the names of its
/// segments (a segment being created has a temporary name until it is
/// complete: counted in the bytes, not a segment yet).
fn on_disk(dir: &Path) -> (u64, Vec<String>) {
    let mut bytes = 0;
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).expect("read history dir").flatten() {
        if let Ok(md) = e.metadata() {
            bytes += md.len();
        }
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("seg-") && name.ends_with(".hist") {
            names.push(name);
        }
    }
    names.sort();
    (bytes, names)
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn the_byte_budget_is_never_exceeded_and_the_oldest_segments_go_first() {
    require_root("the_byte_budget_is_never_exceeded_and_the_oldest_segments_go_first");
    let budget = 2u64 << 20;
    let d = daemon_with_history("max_bytes = \"2MiB\"");
    let dir = history_dir(&d);
    let _load = busy_load();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut most = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    // The witness: ten segments created and dropped while measuring.
    loop {
        let (bytes, names) = on_disk(&dir);
        most = most.max(bytes);
        assert!(bytes <= budget, "{bytes} bytes on disk, over {budget}");
        seen.extend(names.iter().cloned());
        let dropped = seen.len() - names.len();
        if dropped >= 10 {
            // Those kept are the newest of all seen: names sort by time.
            let newest: Vec<_> = seen.iter().rev().take(names.len()).rev().cloned().collect();
            assert_eq!(names, newest, "the oldest go first");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {dropped} segments dropped in 120 s ({most} bytes at most)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        most > budget / 2,
        "the budget was used: {most} bytes at most"
    );
    let status = d.json(&["status"]);
    assert!(status["history"]["bytes"].as_u64().expect("bytes") <= budget);
    assert_eq!(status["history"]["failure"], Value::Null, "{status}");
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_full_history_dir_stops_the_history_and_ring_dumps_go_on() {
    require_root("a_full_history_dir_stops_the_history_and_ring_dumps_go_on");
    let dir = tempfile::tempdir().expect("tempdir");
    let history = dir.path().join("history");
    // Room at first: the disk fills once the watch is open, not before.
    let fs = Tmpfs::mount(&history, "8m");
    let text = test_config(
        dir.path(),
        &format!(
            "[history]\nenabled = true\nmax_bytes = \"8MiB\"\ndir = \"{}\"\n",
            history.display()
        ),
    );
    let d = Daemon::start_in(dir, &text, &[]);
    let watch = Watcher::start(&d);
    let _load = busy_load();
    // Less room than one segment of an 8 MiB budget (256 KiB) is left.
    fs.shrink_to_used_and(64);
    let stopped = watch
        .wait_for("history_stopped", Duration::from_secs(60))
        .unwrap_or_else(|| panic!("no history_stopped event:\n{}", d.log_text()));
    let reason = stopped["reason"].as_str().expect("reason");
    assert!(reason.contains("No space left"), "{reason}");
    let status = d.json(&["status"]);
    assert!(
        status["history"]["failure"]
            .as_str()
            .is_some_and(|f| f.contains("No space left")),
        "{status}"
    );
    // Ring dumps go on, and perf reads them.
    for _ in 0..2 {
        let dump = d.json(&["dump"]);
        assert!(dump["records"].as_u64().unwrap_or(0) > 0, "{dump}");
        let path = PathBuf::from(dump["path"].as_str().expect("path"));
        assert!(!perf_script(&path, &["-F", "comm"]).is_empty());
    }
    let log = d.log_text();
    assert_eq!(
        log.matches("the history stops").count(),
        1,
        "one log line for the stop:\n{log}"
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_history_dir_that_turns_unwritable_stops_the_history_and_keeps_what_it_wrote() {
    require_root("a_history_dir_that_turns_unwritable_stops_the_history_and_keeps_what_it_wrote");
    let dir = tempfile::tempdir().expect("tempdir");
    let history = dir.path().join("history");
    let _fs = Tmpfs::mount(&history, "64m");
    // 8 MiB: segments of 256 KiB, so the writer soon needs a new file.
    let text = test_config(
        dir.path(),
        &format!(
            "[snapshot]\ncompression = \"none\"\nmin_interval = \"100ms\"\n\n\
             [history]\nenabled = true\nmax_bytes = \"8MiB\"\ndir = \"{}\"\n",
            history.display()
        ),
    );
    let d = Daemon::start_in(dir, &text, &[]);
    let watch = Watcher::start(&d);
    let _load = busy_load();
    wait_for_history(&d, 3.0);
    // Unwritable, not full: an immutable directory refuses root too
    // (EPERM) to create or remove a file in it.
    let (_, before) = on_disk(&history);
    let status = Command::new("chattr")
        .arg("+i")
        .arg(&history)
        .status()
        .expect("run chattr");
    assert!(status.success(), "chattr +i {}", history.display());
    let stopped = watch
        .wait_for("history_stopped", Duration::from_secs(90))
        .unwrap_or_else(|| panic!("no history_stopped event:\n{}", d.log_text()));
    let reason = stopped["reason"].as_str().expect("reason");
    assert!(reason.contains("Operation not permitted"), "{reason}");
    let status = d.json(&["status"]);
    assert!(
        status["history"]["failure"]
            .as_str()
            .is_some_and(|f| f.contains("Operation not permitted")),
        "{status}"
    );
    let stopped_at = on_disk(&history);
    assert!(
        before.iter().all(|f| stopped_at.1.contains(f)),
        "segments went missing: {before:?} then {:?}",
        stopped_at.1
    );
    // Ring dumps go on.
    let dump = d.json(&["dump"]);
    assert!(dump["records"].as_u64().unwrap_or(0) > 0, "{dump}");
    let path = PathBuf::from(dump["path"].as_str().expect("path"));
    assert!(!perf_script(&path, &["-F", "comm"]).is_empty());
    // Once the rings no longer reach back to where the history ends (the
    // witness: status), a window across the end holds both sides and says
    // how much lies between them.
    let history_end = status["history"]["newest_unix_ns"]
        .as_i64()
        .expect("newest");
    let deadline = Instant::now() + Duration::from_secs(60);
    let rings_from = loop {
        let s = d.json(&["status"]);
        let oldest = rings_oldest(&s);
        if oldest > history_end + 500_000_000 {
            break oldest;
        }
        assert!(
            Instant::now() < deadline,
            "the rings still reach the history's end: {s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let back_ms = (unix_now_ns() - history_end) / 1_000_000 + 2_000;
    let across = d.json(&["dump", "--before", &format!("{back_ms}ms")]);
    let gap = across["window_missing_ns"]
        .as_i64()
        .expect("window_missing_ns");
    // The rings' oldest record moves on until they are frozen (seconds
    // later on a busy machine): the gap lies between what status said
    // before the dump and after it, give or take the clocks' conversion.
    let rings_after = rings_oldest(&d.json(&["status"]));
    let slack = 50_000_000;
    let (low, high) = (rings_from - history_end, rings_after - history_end);
    assert!(
        gap > 0 && gap + slack >= low && gap <= high + slack,
        "the gap between the history's end and the rings: {gap} ns, from {low} to {high} ns: {across}"
    );
    let path = PathBuf::from(across["path"].as_str().expect("path"));
    let (rows, _) = samples(&path);
    let offset = realtime_offset_ns();
    let before_end = rows.iter().filter(|r| r.1 + offset < history_end).count();
    let from_rings = rows.iter().filter(|r| r.1 + offset >= rings_from).count();
    assert!(
        before_end > 0 && from_rings > 0,
        "{before_end} samples from the history and {from_rings} from the rings: {across}"
    );
    // And a window inside what the history wrote is served whole: the
    // middle half of what it held when it stopped (8 MiB are a few
    // seconds under a busy machine's load, the oldest segments removed).
    let history_start = status["history"]["oldest_unix_ns"]
        .as_i64()
        .expect("oldest");
    let held_ms = (history_end - history_start) / 1_000_000;
    assert!(held_ms >= 400, "the history held {held_ms} ms: {status}");
    let at_ms = (unix_now_ns() - history_end) / 1_000_000 + held_ms / 4;
    let old = d.json(&[
        "dump",
        "--at",
        &format!("-{at_ms}ms"),
        "--before",
        &format!("{}ms", held_ms / 2),
    ]);
    assert_eq!(old["window_missing_ns"], 0, "{old}");
    let path = PathBuf::from(old["path"].as_str().expect("path"));
    let (rows, _) = samples(&path);
    assert!(
        !rows.is_empty(),
        "a window of the history written before: {old}"
    );
    assert_eq!(
        on_disk(&history),
        stopped_at,
        "the history changed after it stopped"
    );
    let log = d.log_text();
    assert_eq!(
        log.matches("the history stops").count(),
        1,
        "one log line for the stop:\n{log}"
    );
    let _ = Command::new("chattr").arg("-i").arg(&history).status();
}

#[test]
fn bad_history_settings_are_refused_at_their_line_and_column() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (section, at, needle) in [
        (
            "[history]\nenabled = true\nlevel = 0\n",
            ":3:9:",
            "history.level = 0",
        ),
        (
            "[history]\nmax_age = \"1s\"\n",
            ":2:11:",
            "history.max_age = 1s",
        ),
        (
            "[history]\nmax_bytes = \"1KiB\"\n",
            ":2:13:",
            "history.max_bytes = 1KiB",
        ),
    ] {
        let config = dir.path().join("flightrec.toml");
        // The section first, so its lines are 1, 2...
        let text = format!("{section}\n{}", test_config(dir.path(), ""));
        std::fs::write(&config, &text).expect("write config");
        let out = flightrecd_to_end("--check-config", &config);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{section}: {stderr}");
        let want = format!("{}{at}", config.display());
        assert!(
            stderr.contains(&want) && stderr.contains(needle),
            "{section}: expected {want} and {needle:?} in: {stderr}"
        );
    }
}

/// The LOST records (`PERF_RECORD_LOST`) of a snapshot, and the records
/// they say were lost.
fn lost_in(path: &Path) -> (usize, u64) {
    let dump = perf_script(path, &["-D"]);
    // "... PERF_RECORD_LOST: id:1853: lost:70878"
    let lost: Vec<u64> = dump
        .lines()
        .filter(|l| l.contains("PERF_RECORD_LOST:"))
        .map(|l| {
            l.rsplit_once("lost:")
                .and_then(|(_, n)| n.trim().parse().ok())
                .unwrap_or_else(|| panic!("a LOST record without a count: {l}"))
        })
        .collect();
    (lost.len(), lost.iter().sum())
}

/// The records the daemon counts lost by `status`: the history's and
/// the tracking rings'.
fn lost_by_status(status: &Value) -> u64 {
    status["history"]["lost"].as_u64().unwrap_or(0)
        + status["tracking"]["lost_records"].as_u64().unwrap_or(0)
}

/// perf's stderr less its two warnings of lost records, and what they
/// say: M of "Processed N events and lost M chunks!" (the LOST records;
/// 0 without it), and whether "Processed N samples and lost P%!" was
/// there (the counts of the snapshot's LOST_SAMPLES records, which sum
/// each CPU's LOST records up, over 5% of its samples).
fn without_loss_warnings(stderr: &str) -> (String, u64, bool) {
    let mut kept: Vec<&str> = Vec::new();
    let (mut chunks, mut share) = (0, false);
    let mut lines = stderr.lines().peekable();
    while let Some(line) = lines.next() {
        let Some((_, lost)) = line
            .strip_prefix("Processed ")
            .and_then(|l| l.split_once(" and lost "))
        else {
            kept.push(line);
            continue;
        };
        if let Some(m) = lost.strip_suffix(" chunks!").and_then(|m| m.parse().ok()) {
            chunks = m;
        } else if lost.ends_with("%!") && line.contains(" samples and lost ") {
            share = true;
        } else {
            kept.push(line);
            continue;
        }
        if kept.last() == Some(&"Warning:") {
            kept.pop();
        }
        while lines
            .next_if(|l| l.trim().is_empty() || *l == "Check IO/CPU overload!")
            .is_some()
        {}
    }
    (kept.join("\n"), chunks, share)
}

/// No warning from perf reading the snapshot at `path` (`stderr`) but
/// those of its LOST records, and those say no more lost than the
/// daemon counted (`counted`): a load that outruns the history's writer
/// makes it lose records, and it says so, where they were.
fn no_warning_but_counted_losses(path: &Path, stderr: &str, counted: u64) {
    let (rest, chunks, share) = without_loss_warnings(stderr);
    assert!(
        !rest.to_lowercase().contains("warning"),
        "perf script warned: {stderr}"
    );
    if chunks > 0 || share {
        let (records, lost) = lost_in(path);
        assert_eq!(records as u64, chunks, "perf's count of LOST records");
        assert!(
            lost > 0 && lost <= counted,
            "the window's LOST records say {lost} lost; status counted {counted}"
        );
    }
}

#[test]
fn perf_s_warnings_of_lost_records_are_told_from_other_warnings() {
    let chunks = "Warning:\nProcessed 582317 events and lost 80 chunks!\n\n\
                  Check IO/CPU overload!\n\n";
    assert_eq!(without_loss_warnings(chunks), (String::new(), 80, false));
    let share = "Warning:\nProcessed 74647 samples and lost 24.84%!\n\n";
    let both = format!("{chunks}{share}");
    assert_eq!(without_loss_warnings(&both), (String::new(), 80, true));
    let other = format!("{share}Warning:\nno symbols found\n");
    let (rest, chunks, share) = without_loss_warnings(&other);
    assert_eq!((chunks, share), (0, true));
    assert_eq!(rest, "Warning:\nno symbols found");
    assert_eq!(without_loss_warnings(""), (String::new(), 0, false));
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn records_lost_while_the_writer_lags_are_counted_and_in_the_window() {
    require_root("records_lost_while_the_writer_lags_are_counted_and_in_the_window");
    let started_at = unix_now_ns();
    // Rings of 4 MiB, not the tests' 256 KiB: a busy machine's own load
    // (a `perf bench sched messaging` loop) outran the history through
    // rings of 256 KiB, and its losses never stopped after the test's.
    let d = daemon_with_history_in_rings("max_bytes = \"256MiB\"", "4MiB");
    let load = Load::shells(
        2,
        "while :; do perf bench sched messaging -g 2 -l 100 >/dev/null 2>&1; done",
    );
    wait_for_history(&d, 1.0);
    // The whole daemon stops (the drain with it) while the kernel keeps
    // writing its rings: once round, it overwrites records not read yet,
    // and the drain after the resume says so with a LOST record. Stopped
    // a second longer each time until a loss is seen: the witness.
    let mut lost = 0;
    let mut status = Value::Null;
    for secs in 2..10 {
        d.signal("STOP");
        std::thread::sleep(Duration::from_secs(secs));
        d.signal("CONT");
        // The drain after the resume makes the LOST record.
        let deadline = Instant::now() + Duration::from_secs(5);
        while lost == 0 && Instant::now() < deadline {
            status = d.json(&["status"]);
            lost = status["history"]["lost"].as_u64().unwrap_or(0);
            std::thread::sleep(Duration::from_millis(100));
        }
        if lost > 0 {
            break;
        }
        eprintln!("no loss counted after a stop of {secs} s: {status}");
    }
    assert!(
        lost > 0,
        "no loss after stopping the writer for 9 s: {status}"
    );
    // On a busy machine the writer may go on losing while it catches up:
    // stop the load and wait until the counts stand still (witness: the
    // same counts 2 s apart), so that the stop's are all counted before
    // the window is cut.
    drop(load);
    let counts = |d: &Daemon| {
        let s = d.json(&["status"]);
        (
            s["history"]["lost"].as_u64().unwrap_or(0),
            s["tracking"]["lost_records"].as_u64().unwrap_or(0),
        )
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = counts(&d);
    loop {
        std::thread::sleep(Duration::from_secs(2));
        let now = counts(&d);
        if now == last {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the losses never stopped: {now:?}"
        );
        last = now;
    }
    let status = d.json(&["status"]);
    let per_cpu: u64 = status["cpus"]
        .as_array()
        .expect("cpus")
        .iter()
        .map(|c| c["history_lost"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(per_cpu, status["history"]["lost"].as_u64().unwrap_or(0));
    // A window from before the daemon's start to now holds every LOST
    // record counted so far (those of the stop, made by the drain after
    // the resume, and any a busy machine caused before it)...
    let counted_before = lost_by_status(&status);
    let since = (unix_now_ns() - started_at) / 1_000_000_000 + 2;
    let dump = d.json(&["dump", "--before", &format!("{since}s")]);
    let path = PathBuf::from(dump["path"].as_str().expect("path"));
    let (records, window_lost) = lost_in(&path);
    assert!(records > 0, "no LOST record in the window: {dump}");
    // perf warns of them as the other history tests allow.
    let (_, stderr) = samples(&path);
    let (_, chunks, _) = without_loss_warnings(&stderr);
    assert_eq!(chunks, records as u64, "perf script's warning: {stderr}");
    // ...and none that status does not count once the window is cut
    // (a machine busy with other work may make the history lose more
    // records meanwhile, not all of them inside the window). The
    // tracking rings, stopped as long, may have lost records too.
    let status = d.json(&["status"]);
    let counted_after = lost_by_status(&status);
    assert!(
        (counted_before..=counted_after).contains(&window_lost),
        "the LOST records of the window say {window_lost} lost; status counted \
         {counted_before} before the dump and {counted_after} after it: {status}"
    );
    no_warning_but_counted_losses(&path, &stderr, counted_after);
}
