//! End to end: `[[trigger]]` conditions on the real kernel. A tracepoint
//! condition dumps on the exec of a named program, count/window and the
//! rate limit hold, a PSI condition fires under CPU overload, interval
//! snapshots come on time, reload adds and removes triggers, and a bad
//! trigger stops the daemon with exit 2 at its line and column.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use flightrec_tests::{
    Daemon, Load, Watcher, bin_path, flightrecd_to_end, perf_script, require_root, test_config,
};
use serde_json::Value;

/// A copy of /bin/true under a recognisable name, to exec.
fn probe_program(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    flightrec_tests::copy_executable("/bin/true", &path);
    path
}

fn run(program: &Path) {
    let status = Command::new(program).status().expect("run the probe");
    assert!(status.success());
}

/// The snapshots whose trigger names `trigger`.
fn snapshots_of(d: &Daemon, trigger: &str) -> Vec<Value> {
    d.list()
        .into_iter()
        .filter(|s| s["trigger"].as_str().unwrap_or("").contains(trigger))
        .collect()
}

/// Waits up to `within` for at least `n` snapshots of `trigger`.
fn wait_snapshots(d: &Daemon, trigger: &str, n: usize, within: Duration) -> Vec<Value> {
    let deadline = Instant::now() + within;
    loop {
        let found = snapshots_of(d, trigger);
        if found.len() >= n {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "{n} snapshot(s) of {trigger} expected within {within:?}, found {}: {:?}\n{}",
            found.len(),
            d.list(),
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `snapctl --json triggers`, the entry named `name`.
fn trigger_status(d: &Daemon, name: &str) -> Value {
    let all = d.json(&["triggers"]);
    all["triggers"]
        .as_array()
        .and_then(|a| a.iter().find(|t| t["name"] == name).cloned())
        .unwrap_or_else(|| panic!("no trigger {name} in {all}"))
}

/// The next `trigger_fired` on Watch not of the trigger named "witness"
/// (whose late repeats may still be queued), within 30 s.
fn next_firing_but_the_witness(watcher: &Watcher) -> Option<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        let e = watcher.wait_for("trigger_fired", left)?;
        if e["name"] != "witness" {
            return Some(e);
        }
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_tracepoint_trigger_dumps_on_the_exec_of_a_named_program_and_holds_it() {
    require_root("a_tracepoint_trigger_dumps_on_the_exec_of_a_named_program");
    // No rate limit between dumps: the probe's dump follows the witness's
    // at once (with the default 1 s slot, 256 KiB rings on a loaded
    // machine overwrote the exec before the freeze).
    let d = Daemon::start(
        r#"
[snapshot]
min_interval = "0s"

[[event]]
name = "sched:sched_process_exec"

[[trigger]]
name = "probe-exec"
on = "tracepoint"
event = "sched:sched_process_exec"
filter = 'filename ~ "*flightrec-probe*"'
label = "probe"
cooldown = "1h"

[[trigger]]
name = "witness"
on = "tracepoint"
event = "sched:sched_process_exec"
filter = 'filename ~ "*flightrec-witness*"'
cooldown = "1h"
"#,
    );
    let watcher = Watcher::start(&d);
    // Another program's exec does not match the filter. The witness that
    // the condition thread read that exec: a later one, matched by
    // another trigger, seen on Watch.
    let other = probe_program(d.dir.path(), "not-a-match");
    run(&other);
    let witness = probe_program(d.dir.path(), "flightrec-witness");
    run(&witness);
    let witnessed = watcher
        .wait_for("trigger_fired", Duration::from_secs(30))
        .expect("no trigger_fired on Watch in 30s");
    assert_eq!(witnessed["name"], "witness", "{witnessed}");
    wait_snapshots(&d, "condition:witness", 1, Duration::from_secs(30));
    assert_eq!(trigger_status(&d, "probe-exec")["fired"], 0);
    assert!(snapshots_of(&d, "condition:probe-exec").is_empty());

    let probe = probe_program(d.dir.path(), "flightrec-probe-1");
    run(&probe);
    let fired = next_firing_but_the_witness(&watcher).expect("a trigger_fired event");
    assert_eq!(fired["name"], "probe-exec");
    assert_eq!(fired["dumped"], true);
    assert!(
        fired["matched"]
            .as_str()
            .unwrap()
            .starts_with("sched:sched_process_exec on CPU "),
        "{fired}"
    );
    let snaps = wait_snapshots(&d, "condition:probe-exec", 1, Duration::from_secs(30));
    assert_eq!(snaps[0]["trigger"], "condition:probe-exec");
    assert_eq!(snaps[0]["label"], "probe");
    // What matched is kept with the snapshot: in the list, and in the
    // report's header, whether the report is asked for by id or by file.
    let matched = snaps[0]["matched"].as_str().unwrap();
    assert!(
        matched.starts_with("condition:probe-exec: sched:sched_process_exec on CPU "),
        "{matched}"
    );
    let id = snaps[0]["id"].as_str().unwrap();
    for (asked, page) in [
        (id, "by-id.html"),
        (snaps[0]["path"].as_str().unwrap(), "by-file.html"),
    ] {
        let page = d.dir.path().join(page);
        let out = d.snapctl(&["report", asked, "-o", page.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let html = std::fs::read_to_string(&page).unwrap();
        assert!(
            html.contains(r#"["matched",""#) && html.contains(matched),
            "{asked}: no match in the header"
        );
    }
    // The snapshot holds the exec that fired it.
    let script = perf_script(Path::new(snaps[0]["path"].as_str().unwrap()), &[]);
    assert!(
        script
            .lines()
            .any(|l| l.contains("sched:sched_process_exec") && l.contains("flightrec-probe-1")),
        "the exec is not in the snapshot"
    );
    // Until the status shows the dump (written after the snapshot is listed).
    let deadline = Instant::now() + Duration::from_secs(20);
    while trigger_status(&d, "probe-exec")["dumped"] != 1 {
        assert!(
            Instant::now() < deadline,
            "{}",
            trigger_status(&d, "probe-exec")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A second exec within the cooldown is counted, not dumped.
    run(&probe);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let t = trigger_status(&d, "probe-exec");
        if t["suppressed"] == 1 {
            assert_eq!(t["fired"], 2);
            assert_eq!(t["dumped"], 1);
            assert!(t["last_fired_unix_ns"].as_i64().unwrap() > 0);
            break;
        }
        assert!(Instant::now() < deadline, "{t}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let held = next_firing_but_the_witness(&watcher).expect("the suppressed firing on Watch");
    assert_eq!(held["dumped"], false);
    assert_eq!(held["suppressed_by"], "cooldown");
    assert_eq!(snapshots_of(&d, "condition:probe-exec").len(), 1);
    // The text forms name it too.
    let text = String::from_utf8(d.snapctl(&["triggers"]).stdout).unwrap();
    assert!(
        text.contains("probe-exec") && text.contains("tracepoint"),
        "{text}"
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_count_window_trigger_fires_only_once_the_count_is_reached() {
    require_root("a_count_window_trigger_fires_only_once_the_count_is_reached");
    let d = Daemon::start(
        r#"
[[trigger]]
name = "third-exec"
on = "tracepoint"
event = "sched:sched_process_exec"
filter = 'filename ~ "*flightrec-count*"'
count = 3
window = "30s"

[[trigger]]
name = "witness"
on = "tracepoint"
event = "sched:sched_process_exec"
filter = 'filename ~ "*flightrec-witness*"'
"#,
    );
    let probe = probe_program(d.dir.path(), "flightrec-count");
    run(&probe);
    run(&probe);
    // The witness that both execs were read: a later one, matched by
    // another trigger.
    run(&probe_program(d.dir.path(), "flightrec-witness"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while trigger_status(&d, "witness")["fired"] != 1 {
        assert!(
            Instant::now() < deadline,
            "{}",
            trigger_status(&d, "witness")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let t = trigger_status(&d, "third-exec");
    assert_eq!(t["fired"], 0, "{t}");
    assert!(snapshots_of(&d, "condition:third-exec").is_empty());
    run(&probe);
    let snaps = wait_snapshots(&d, "condition:third-exec", 1, Duration::from_secs(30));
    assert_eq!(snaps.len(), 1);
    assert_eq!(
        snaps[0]["label"], "third-exec",
        "the label defaults to the name"
    );
    assert_eq!(trigger_status(&d, "third-exec")["fired"], 1);
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_psi_trigger_fires_under_cpu_overload_and_its_rate_limit_holds() {
    require_root("a_psi_trigger_fires_under_cpu_overload");
    let d = Daemon::start(
        r#"
[[trigger]]
name = "cpu-pressure"
on = "psi"
psi = "cpu some 100ms 2s"
cooldown = "1s"
max_per_hour = 2
"#,
    );
    // Busy loops, three per CPU: runnable tasks wait for a CPU (CPU pressure).
    let overload = Load::shells(3, "while :; do :; done");
    // The first firing comes within a window or two of overload.
    wait_snapshots(&d, "condition:cpu-pressure", 1, Duration::from_secs(15));
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(overload);
    let snaps = snapshots_of(&d, "condition:cpu-pressure");
    let t = trigger_status(&d, "cpu-pressure");
    assert!(
        (1..=2).contains(&snaps.len()),
        "{} dumps under 10s+ of overload with max_per_hour = 2: {t}",
        snaps.len()
    );
    let fired = t["fired"].as_u64().unwrap();
    let suppressed = t["suppressed"].as_u64().unwrap();
    assert!(suppressed >= 1, "PSI kept firing, the limit held: {t}");
    assert_eq!(fired, t["dumped"].as_u64().unwrap() + suppressed, "{t}");
    assert!(
        t["last_matched"]
            .as_str()
            .unwrap()
            .contains("cpu some 100ms 2s"),
        "{t}"
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn interval_snapshots_appear_on_time() {
    require_root("interval_snapshots_appear_on_time");
    let d = Daemon::start(
        r#"
[snapshot]
compression = "none"

[[trigger]]
name = "every-2s"
on = "interval"
every = "2s"
"#,
    );
    let snaps = wait_snapshots(&d, "condition:every-2s", 3, Duration::from_secs(12));
    let times: Vec<i64> = snaps
        .iter()
        .map(|s| s["created_unix_ns"].as_i64().unwrap())
        .collect();
    for pair in times.windows(2) {
        let gap = Duration::from_nanos((pair[1] - pair[0]) as u64);
        assert!(
            gap > Duration::from_millis(1500) && gap < Duration::from_millis(2500),
            "interval snapshots {gap:?} apart, not 2s: {times:?}"
        );
    }
    let t = trigger_status(&d, "every-2s");
    assert_eq!(
        t["suppressed"], 0,
        "an interval is not rate-limited by default: {t}"
    );
    assert_eq!(t["on"], "interval");
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn reload_adds_and_removes_a_trigger() {
    require_root("reload_adds_and_removes_a_trigger");
    let d = Daemon::start("");
    assert_eq!(d.json(&["triggers"])["triggers"], serde_json::json!([]));
    let with = test_config(
        d.dir.path(),
        "[[trigger]]\nname = \"tick\"\non = \"interval\"\nevery = \"1s\"\n",
    );
    std::fs::write(&d.config, with).unwrap();
    let reply = d.json(&["reload"]);
    assert!(
        reply["summary"].as_str().unwrap().contains("triggers"),
        "{reply}"
    );
    assert_eq!(trigger_status(&d, "tick")["on"], "interval");
    wait_snapshots(&d, "condition:tick", 2, Duration::from_secs(10));

    std::fs::write(&d.config, test_config(d.dir.path(), "")).unwrap();
    let reply = d.json(&["reload"]);
    assert!(
        reply["summary"].as_str().unwrap().contains("triggers"),
        "{reply}"
    );
    assert_eq!(d.json(&["triggers"])["triggers"], serde_json::json!([]));
    // A dump queued just before the reload may still land; none after it.
    // Dumps are written in the order they were asked for: once one asked
    // now is written, any queued before the reload is too.
    assert!(d.json(&["dump"])["path"].is_string());
    let after_reload = snapshots_of(&d, "condition:tick").len();
    // Three periods of the removed trigger: what it would have dumped.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(snapshots_of(&d, "condition:tick").len(), after_reload);
}

/// Runs `flightrecd FLAG CONFIG` to its end (it must not start).
fn flightrecd_refuses(flag: &str, config: &Path) -> (i32, String) {
    let out = flightrecd_to_end(flag, config);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_bad_trigger_exits_2_at_its_line_and_column() {
    require_root("a_bad_trigger_exits_2_at_its_line_and_column");
    let dir = tempfile::tempdir().unwrap();
    let base = test_config(dir.path(), "");
    let first_extra_line = base.lines().count();
    // (trigger table, line offset in it, column, message part)
    let cases = [
        (
            "[[trigger]]\nname = \"x\"\non = \"tracepoint\"\nevent = \"sched:no_such_event\"\n",
            0,
            1,
            "tracepoint 'sched:no_such_event' does not exist",
        ),
        (
            "[[trigger]]\nname = \"x\"\non = \"tracepoint\"\nevent = \"sched:sched_process_exec\"\nfilter = \"no_such_field == 1\"\n",
            0,
            1,
            "filter 'no_such_field == 1' rejected",
        ),
        (
            "[[trigger]]\nname = \"x\"\non = \"disk\"\n",
            2,
            6,
            "unknown variant `disk`",
        ),
        (
            "[[trigger]]\nname = \"x\"\non = \"psi\"\npsi = \"cpu some 1s 20s\"\n",
            3,
            7,
            "500ms to 10s",
        ),
    ];
    for (table, line, column, message) in cases {
        let config = dir.path().join("bad.toml");
        std::fs::write(&config, format!("{base}{table}")).unwrap();
        let at = format!(
            "{}:{}:{column}: ",
            config.display(),
            first_extra_line + 1 + line
        );
        for flag in ["--check-config", "--config"] {
            let (code, stderr) = flightrecd_refuses(flag, &config);
            assert_eq!(code, 2, "{flag} {table}: {stderr}");
            assert!(stderr.contains(&at), "{flag}: expected {at} in: {stderr}");
            assert!(
                stderr.contains(message),
                "{flag}: expected {message} in: {stderr}"
            );
        }
    }
}

/// The `[[trigger]]` examples of config/flightrec.toml (commented out) and
/// of README.md's Triggers section.
fn documented_trigger_examples() -> Vec<(&'static str, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let shipped = std::fs::read_to_string(root.join("config/flightrec.toml")).unwrap();
    let key = |l: &str| {
        l == "[[trigger]]"
            || l.split_once(" = ")
                .is_some_and(|(k, _)| k.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
    };
    let from_config: String = shipped
        .lines()
        .skip_while(|l| *l != "# [[trigger]]")
        .filter_map(|l| l.strip_prefix("# "))
        .filter(|l| key(l))
        .map(|l| format!("{l}\n"))
        .collect();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = readme
        .split("### Triggers")
        .nth(1)
        .expect("README has a Triggers section");
    let from_readme = section
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a toml block in the Triggers section")
        .to_string();
    vec![
        ("config/flightrec.toml", from_config),
        ("README.md", from_readme),
    ]
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn the_documented_trigger_examples_pass_check_config() {
    require_root("the_documented_trigger_examples_pass_check_config");
    let dir = tempfile::tempdir().unwrap();
    for (source, examples) in documented_trigger_examples() {
        let tables = examples.matches("[[trigger]]").count();
        assert!(tables >= 4, "{source}: {tables} examples:\n{examples}");
        let config = dir.path().join("examples.toml");
        std::fs::write(&config, test_config(dir.path(), &examples)).unwrap();
        let out = Command::new(bin_path("flightrecd"))
            .arg("--check-config")
            .arg(&config)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{source}: {stderr}\n{examples}");
        let printed = String::from_utf8_lossy(&out.stdout);
        assert_eq!(printed.matches("[[trigger]]").count(), tables, "{printed}");
    }
}

/// User + system CPU time of process `pid` so far.
fn cpu_time(pid: i32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the ")" that ends the comm: utime and stime are 14, 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .unwrap()
        .unwrap_or(100) as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_condition_on_a_busy_tracepoint_costs_little_cpu() {
    require_root("a_condition_on_a_busy_tracepoint_costs_little_cpu");
    // The same daemon twice, side by side under the same load; one also
    // watches sched_switch (thousands of hits a second) for a count it
    // never reaches.
    let plain = Daemon::start("");
    let watching = Daemon::start(
        r#"
[[trigger]]
name = "switches"
on = "tracepoint"
event = "sched:sched_switch"
count = 1000000000
window = "1s"
"#,
    );
    let load = Load::start();
    std::thread::sleep(Duration::from_millis(500));
    let before = (cpu_time(plain.pid()), cpu_time(watching.pid()));
    std::thread::sleep(Duration::from_secs(4));
    let spent = (
        cpu_time(plain.pid()) - before.0,
        cpu_time(watching.pid()) - before.1,
    );
    drop(load);
    let t = trigger_status(&watching, "switches");
    assert_eq!(t["fired"], 0, "{t}");
    assert!(
        spent.1 < spent.0 + Duration::from_millis(200),
        "watching sched_switch cost {:?} of CPU in 4s, the same daemon without it {:?}",
        spent.1,
        spent.0
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_loss_trigger_fires_when_a_tiny_tracking_ring_overflows() {
    require_root("a_loss_trigger_fires_when_a_tiny_tracking_ring_overflows");
    let mut d = Daemon::start("");
    // One page of tracking ring per CPU against an exec storm: the kernel
    // drops records before the drain thread gets to them.
    let text = test_config(
        d.dir.path(),
        "[[trigger]]\nname = \"losses\"\non = \"loss\"\ncount = 1\nwindow = \"5s\"\n",
    )
    .replace("tracking = \"256KiB\"", "tracking = \"4KiB\"");
    std::fs::write(&d.config, text).unwrap();
    d.json(&["reload"]);
    assert_eq!(trigger_status(&d, "losses")["fired"], 0);
    let storm = Load::shells(2, "while :; do /bin/true; done");
    let snaps = wait_snapshots(&d, "condition:losses", 1, Duration::from_secs(60));
    drop(storm);
    let lost: u64 = d.json(&["status"])["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["lost_tracking"].as_u64().unwrap() + c["lost_samples"].as_u64().unwrap())
        .sum();
    assert!(lost > 0, "the trigger fired without a loss");
    let t = trigger_status(&d, "losses");
    assert!(t["last_matched"].as_str().unwrap().contains("lost"), "{t}");
    assert_eq!(snaps[0]["label"], "losses");
    d.stop();
}
