//! End to end: `[[trigger]]`s for containers on the real kernel and real
//! cgroups. A process OOM-killed inside a memory-limited cgroup makes an
//! `oom:mark_victim` trigger with `scope = "matched"` and a
//! `cgroup-memory` trigger on a glob write snapshots scoped to that
//! cgroup, holding the victim's last samples, `matched` naming the
//! victim, the cgroup and its container; a PSI trigger on a cgroup glob
//! fires for the cgroup under pressure and dumps it alone; a scope that
//! matches nothing is refused naming it; bad container keys are refused
//! at their line and column.
//!
//! The cgroups are made for each test under the cgroup2 mount and, on a
//! hybrid host (cgroup2 without the memory controller), at the same path
//! in the v1 memory hierarchy; their processes are killed and the
//! directories removed after.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use flightrec_tests::{Daemon, perf_script, require_root, test_config};
use serde_json::Value;

/// Allocates and touches 1 MiB at a time, spinning about 3 ms of CPU
/// after each (samples to find), until its memory cgroup's OOM killer
/// kills it: exit 3 means no limit held it.
const HOG_C: &str = r#"
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void spin_ms(long ms) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < ms);
}

int main(void) {
    for (unsigned long mib = 1; mib < 4096; mib++) {
        char *p = malloc(1 << 20);
        if (!p)
            return 2;
        memset(p, (int)mib, 1 << 20);
        spin_ms(3);
    }
    return 3;
}
"#;

/// The cgroup2 mount, and where the memory controller is.
struct Hierarchies {
    unified: PathBuf,
    /// The v1 memory hierarchy (a hybrid host); None: cgroup2 has the
    /// memory controller.
    memory_v1: Option<PathBuf>,
}

fn hierarchies() -> Hierarchies {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let mut unified = None;
    let mut memory_v1 = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        match f[2] {
            "cgroup2" => unified = Some(PathBuf::from(f[1])),
            "cgroup" if f[3].split(',').any(|o| o == "memory") => {
                memory_v1 = Some(PathBuf::from(f[1]));
            }
            _ => {}
        }
    }
    let unified = unified.expect("a cgroup2 mount (the tests need one)");
    let v2_memory = std::fs::read_to_string(unified.join("cgroup.controllers"))
        .unwrap_or_default()
        .split_whitespace()
        .any(|c| c == "memory");
    let memory_v1 = if v2_memory {
        None
    } else {
        Some(memory_v1.expect("a memory controller: in cgroup2, or a v1 memory hierarchy"))
    };
    Hierarchies { unified, memory_v1 }
}

/// A cgroup made at `path` in each of `roots`; on drop its processes are
/// killed and its directories removed.
struct TestCgroup {
    path: String,
    dirs: Vec<PathBuf>,
}

impl TestCgroup {
    fn new(path: &str, roots: &[&Path]) -> Self {
        let dirs: Vec<PathBuf> = roots
            .iter()
            .map(|r| r.join(path.trim_start_matches('/')))
            .collect();
        for d in &dirs {
            std::fs::create_dir(d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
        }
        TestCgroup {
            path: path.to_string(),
            dirs,
        }
    }

    /// A shell command that moves the shell into this cgroup in every
    /// hierarchy, then runs `then`.
    fn enter_then(&self, then: &str) -> String {
        let moves: Vec<String> = self
            .dirs
            .iter()
            .map(|d| format!("echo $$ > {}/cgroup.procs", d.display()))
            .collect();
        format!("{}; {then}", moves.join("; "))
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        for d in self.dirs.iter().rev() {
            while d.exists() {
                let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
                for pid in procs.split_whitespace() {
                    let _ = Command::new("kill").args(["-KILL", pid]).status();
                }
                if std::fs::remove_dir(d).is_ok() || Instant::now() > deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// The first snapshot among whose triggers is `trigger` (a file several
/// triggers shared joins them with "+"), waited for up to 30 s.
fn wait_snapshot_of(d: &Daemon, trigger: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = d.list().into_iter().find(|s| {
            s["trigger"]
                .as_str()
                .unwrap_or("")
                .split('+')
                .any(|t| t == trigger)
        }) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "no snapshot of {trigger} in 30s: {:?}\n{}",
            d.list(),
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
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

/// Every cgroup `perf report --sort cgroup` gives `cpu-clock` samples to
/// in `file` (a scoped file's switch records also hold the other side's
/// cgroup id, which it does not name).
fn sampled_cgroups(file: &Path) -> Vec<String> {
    let out = Command::new("perf")
        .args([
            "report",
            "--stdio",
            "--no-children",
            "-g",
            "none",
            "--sort",
            "cgroup",
            "-i",
        ])
        .arg(file)
        .output()
        .expect("run perf report");
    assert!(
        out.status.success(),
        "perf report: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut event = String::new();
    let mut found = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((_, name)) = line.split_once(" of event '") {
            event = name.trim_end_matches('\'').to_string();
        } else if event == "cpu-clock" && !line.starts_with('#') && !line.trim().is_empty() {
            found.extend(line.split_whitespace().nth(1).map(str::to_string));
        }
    }
    found
}

/// The times (seconds of CLOCK_MONOTONIC, the daemon's sample clock) of
/// the `cpu-clock` samples of process `pid` in `file`.
fn sample_times_of(file: &Path, pid: u32) -> Vec<f64> {
    perf_script(file, &["-F", "comm,pid,time,event"])
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let n = f.len();
            (n >= 4 && f[n - 1] == "cpu-clock:" && f[n - 3] == pid.to_string())
                .then(|| f[n - 2].trim_end_matches(':').parse().ok())
                .flatten()
        })
        .collect()
}

fn monotonic_now() -> f64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9
}

fn build_hog(dir: &Path) -> PathBuf {
    let src = dir.join("hog.c");
    let exe = dir.join("hog");
    std::fs::write(&src, HOG_C).unwrap();
    let out = Command::new("gcc")
        .args(["-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run gcc (tests/prepare-host installs it)");
    assert!(
        out.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Limits cgroup `cg` to 32 MiB of memory (no swap) where its memory
/// controller is.
fn limit_memory(cg: &TestCgroup, h: &Hierarchies) {
    match &h.memory_v1 {
        Some(_) => {
            let dir = cg.dirs.last().unwrap();
            std::fs::write(dir.join("memory.limit_in_bytes"), "32M").unwrap();
            // Swap must not hold the rest. (A memory+swap limit would do
            // too, but the kernel then counts no failure in failcnt.)
            std::fs::write(dir.join("memory.swappiness"), "0").unwrap();
        }
        None => {
            let dir = &cg.dirs[0];
            std::fs::write(dir.join("memory.max"), "32M").unwrap();
            // Absent without swap accounting: then there is no swap to limit.
            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
        }
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn an_oom_kill_in_a_limited_cgroup_dumps_that_cgroup_with_the_victims_last_samples() {
    require_root("an_oom_kill_in_a_limited_cgroup_dumps_that_cgroup");
    let h = hierarchies();
    let work = tempfile::tempdir().unwrap();
    let hog = build_hog(work.path());
    let me = std::process::id();
    // Named as systemd names a service's cgroup, so the cgroup is a
    // container (runtime "systemd") that `matched` names.
    let prefix = format!("/flightrec-oom-{me}-");
    let extra = format!(
        r#"
[[trigger]]
name = "oom-kill"
on = "tracepoint"
event = "oom:mark_victim"
scope = "matched"
cooldown = "1h"

[[trigger]]
name = "memcg"
on = "cgroup-memory"
cgroup = "{prefix}*"
cooldown = "1h"

[[trigger]]
name = "memcg-max"
on = "cgroup-memory"
cgroup = "{prefix}*"
events = ["max"]
cooldown = "1h"
"#
    );
    let dir = tempfile::tempdir().unwrap();
    // Samples only: a busy host's context switches would fill the rings
    // in less than the 250 ms between two looks at the memory counters,
    // and the victim's samples would be gone before `memcg` dumps.
    let text = test_config(dir.path(), &extra)
        .replace("per_cpu = \"256KiB\"", "per_cpu = \"1MiB\"")
        .replace("[[event]]\nname = \"sched:sched_switch\"\n", "");
    assert!(!text.contains("sched_switch"), "{text}");
    let d = Daemon::start_in(dir, &text, &[]);

    // Made after the daemon started: the glob finds it on a later look,
    // its counters counted from zero.
    let path = format!("{prefix}hog.service");
    let mut roots = vec![h.unified.as_path()];
    roots.extend(h.memory_v1.as_deref());
    let cg = TestCgroup::new(&path, &roots);
    limit_memory(&cg, &h);
    let started = monotonic_now();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(cg.enter_then(&format!("exec {}", hog.display())))
        .spawn()
        .unwrap();
    let victim = child.id();
    let status = child.wait().unwrap();
    let ended = monotonic_now();
    assert_eq!(
        status.signal(),
        Some(9),
        "the hog was to be OOM-killed (SIGKILL) inside 32 MiB: {status}"
    );

    // Both triggers dump (one snapshot, or one each).
    let by_oom = wait_snapshot_of(&d, "condition:oom-kill");
    let by_memcg = wait_snapshot_of(&d, "condition:memcg");
    let container = format!("(container {}hog.service, systemd)", &prefix[1..]);
    for (snap, trigger, what) in [
        (
            &by_oom,
            "oom-kill",
            format!(": victim pid {victim} (hog) in cgroup {path} {container}"),
        ),
        (
            &by_memcg,
            "memcg",
            format!(": cgroup {path}: oom_kill 0 -> 1 {container}"),
        ),
    ] {
        assert_eq!(snap["scope"], format!("cgroup:{path}"), "{snap}");
        let matched = snap["matched"].as_str().unwrap();
        let mine = matched
            .split("; ")
            .find(|m| m.starts_with(&format!("condition:{trigger}: ")))
            .unwrap_or_else(|| panic!("{trigger} not in matched: {matched}"));
        assert!(mine.contains(&what), "expected {what:?} in {mine:?}");
        if trigger == "oom-kill" {
            assert!(mine.contains("oom:mark_victim on CPU "), "{mine}");
        }
        let file = PathBuf::from(snap["path"].as_str().unwrap());
        // Only the cgroup's samples...
        assert_eq!(
            sampled_cgroups(&file),
            std::slice::from_ref(&path),
            "{}",
            file.display()
        );
        // ...among them the victim's, up to its last moments.
        let times = sample_times_of(&file, victim);
        assert!(
            times.len() >= 10,
            "{} samples of the victim (pid {victim}) in {}",
            times.len(),
            file.display()
        );
        let last = times.iter().copied().fold(f64::MIN, f64::max);
        assert!(
            last >= started && last <= ended && ended - last < 1.0,
            "the victim's last sample at {last:.3}s, it ran from {started:.3}s to {ended:.3}s"
        );
    }
    // The v1 "max" (memory.failcnt) or v2 memory.events "max" counted the
    // limit being hit.
    let max = trigger_status(&d, "memcg-max");
    assert!(max["fired"].as_u64().unwrap() >= 1, "{max}");
    let last = max["last_matched"].as_str().unwrap();
    assert!(
        last.starts_with(&format!("cgroup {path}: max 0 -> ")),
        "{last}"
    );
    for name in ["oom-kill", "memcg"] {
        let t = trigger_status(&d, name);
        assert_eq!(t["dumped"], 1, "{t}");
        // Both dump what fired them: oom-kill by its key, cgroup-memory by
        // default.
        assert_eq!(t["scope"], "matched", "{t}");
    }
    drop(cg);
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_psi_trigger_on_a_cgroup_glob_dumps_the_cgroup_under_pressure() {
    require_root("a_psi_trigger_on_a_cgroup_glob_dumps_the_cgroup_under_pressure");
    let h = hierarchies();
    let me = std::process::id();
    let prefix = format!("/flightrec-psi-{me}-");
    let d = Daemon::start(&format!(
        r#"
[[trigger]]
name = "busy-cgroup"
on = "psi"
psi = "cpu some 100ms 2s"
cgroup = "{prefix}*"
scope = "matched"
cooldown = "1h"
"#
    ));
    // Both made after the daemon started (armed when the glob is looked
    // at again); only the second is busy.
    let idle = TestCgroup::new(&format!("{prefix}idle"), &[&h.unified]);
    let busy = TestCgroup::new(&format!("{prefix}busy"), &[&h.unified]);
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let loops: Vec<_> = (0..3 * cpus)
        .map(|_| {
            Command::new("sh")
                .arg("-c")
                .arg(busy.enter_then("exec sh -c 'while :; do :; done'"))
                .spawn()
                .unwrap()
        })
        .collect();
    let snap = wait_snapshot_of(&d, "condition:busy-cgroup");
    drop(busy);
    for mut l in loops {
        let _ = l.kill();
        let _ = l.wait();
    }
    assert_eq!(snap["scope"], format!("cgroup:{prefix}busy"), "{snap}");
    let matched = snap["matched"].as_str().unwrap();
    assert!(
        matched.contains(&format!(
            "pressure cpu some 100ms 2s in cgroup {prefix}busy ("
        )),
        "{matched}"
    );
    let file = PathBuf::from(snap["path"].as_str().unwrap());
    assert_eq!(
        sampled_cgroups(&file),
        [format!("{prefix}busy")],
        "{}",
        file.display()
    );
    assert_eq!(trigger_status(&d, "busy-cgroup")["dumped"], 1);
    drop(idle);
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_trigger_scope_that_matches_nothing_is_refused_naming_it() {
    require_root("a_trigger_scope_that_matches_nothing_is_refused_naming_it");
    let nowhere = format!("/flightrec-nosuch-{}", std::process::id());
    let d = Daemon::start(&format!(
        "[[trigger]]\nname = \"nowhere\"\non = \"interval\"\nevery = \"1s\"\nscope = \"cgroup:{nowhere}\"\n"
    ));
    let said =
        format!("dump refused: the scope cgroup:{nowhere} matches no cgroup the recorder knows");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !d.log_text().contains(&said) {
        assert!(
            Instant::now() < deadline,
            "no {said:?} in the log within 20s:\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(trigger_status(&d, "nowhere")["fired"].as_u64().unwrap() >= 1);
    assert!(d.list().is_empty(), "{:?}", d.list());
}

/// Runs `flightrecd FLAG CONFIG` to its end (it must not start).
fn refused(flag: &str, config: &Path) -> (i32, String) {
    let out = flightrec_tests::flightrecd_to_end(flag, config);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn bad_container_trigger_keys_exit_2_at_their_line_and_column() {
    require_root("bad_container_trigger_keys_exit_2_at_their_line_and_column");
    let h = hierarchies();
    let dir = tempfile::tempdir().unwrap();
    let base = test_config(dir.path(), "");
    let first_extra_line = base.lines().count();
    // A glob naming 65 cgroups, one more than a trigger may watch.
    let many = TestCgroup::new(
        &format!("/flightrec-many-{}", std::process::id()),
        &[&h.unified],
    );
    let children: Vec<TestCgroup> = (0..65)
        .map(|i| TestCgroup::new(&format!("{}/c{i}", many.path), &[&h.unified]))
        .collect();
    let memory = "[[trigger]]\nname = \"m\"\non = \"cgroup-memory\"\ncgroup = \"/x/*\"\n";
    let mut cases: Vec<(String, usize, usize, String)> = vec![
        (
            "[[trigger]]\nname = \"x\"\non = \"loss\"\nscope = \"pod:web\"\n".into(),
            3,
            9,
            "scope = \"pod:web\" is not \"machine\", \"matched\"".into(),
        ),
        (
            "[[trigger]]\nname = \"x\"\non = \"interval\"\nevery = \"1s\"\nscope = \"matched\"\n"
                .into(),
            4,
            9,
            "scope = \"matched\" has nothing to match".into(),
        ),
        (
            format!("{memory}events = [\"oom_kill\", \"swap\"]\n"),
            4,
            23,
            "\"swap\" is not a memory event counter".into(),
        ),
        (
            "[[trigger]]\nname = \"m\"\non = \"cgroup-memory\"\ncgroup = \"/x/**\"\n".into(),
            3,
            10,
            "`**` is not supported".into(),
        ),
        (
            format!(
                "[[trigger]]\nname = \"p\"\non = \"psi\"\npsi = \"cpu some 1s 2s\"\ncgroup = \"{}/*\"\n",
                many.path
            ),
            4,
            10,
            "names more than 64 cgroups".into(),
        ),
        (
            "[[trigger]]\nname = \"o\"\non = \"tracepoint\"\nevent = \"oom:mark_victim\"\nscope = \"matched\"\n[containers]\ncgroups = false\n".into(),
            4,
            9,
            "needs the cgroup of every sample".into(),
        ),
    ];
    if h.memory_v1.is_some() {
        // A hybrid host's v1 memory hierarchy has no "high" counter.
        cases.push((
            format!("{memory}events = [\"oom_kill\", \"high\"]\n"),
            4,
            10,
            "high is not counted on this host".into(),
        ));
    }
    for (table, line, column, message) in &cases {
        let config = dir.path().join("bad.toml");
        std::fs::write(&config, format!("{base}{table}")).unwrap();
        let at = format!(
            "{}:{}:{column}: ",
            config.display(),
            first_extra_line + 1 + line
        );
        for flag in ["--check-config", "--config"] {
            let (code, stderr) = refused(flag, &config);
            assert_eq!(code, 2, "{flag} {table}: {stderr}");
            assert!(stderr.contains(&at), "{flag}: expected {at} in: {stderr}");
            assert!(
                stderr.contains(message.as_str()),
                "{flag}: expected {message} in: {stderr}"
            );
        }
    }
    drop(children);
    drop(many);
}
