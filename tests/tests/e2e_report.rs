//! End to end: `snapctl report` and `snapctl export` on a snapshot of a C
//! program whose functions are known, one thread spinning in `burn_cpu`,
//! one sleeping in `wait_io` on a pipe; checked against `perf report`,
//! `perf script`, `go tool pprof`, samply and headless Chromium. The
//! program is deleted once it runs, so its symbols come from an archive's
//! build-id cache only.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flightrec_tests::{Daemon, perf_script, require_root, test_config};

/// The program: `fr-burner` spins in `burn_cpu`, `fr-waiter` blocks in
/// `wait_io` (its own `read` system call, so the function is the first user
/// frame of the stack it sleeps with: libc's `read` has no frame pointer,
/// and a frame-pointer walk from it would skip its caller) until
/// `fr-waker` writes a byte every 100 ms. The waiter prints each wait's
/// CLOCK_MONOTONIC start and end (the clock of the snapshot's samples).
const PROGRAM_C: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;
static int pipefd[2];

static unsigned long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ull + t.tv_nsec;
}

__attribute__((noinline)) void burn_cpu(void) {
    for (;;)
        for (unsigned long i = 0; i < 1000000; i++) sink += i * 7;
}

__attribute__((noinline)) long wait_io(int fd) {
    char c;
#if defined(__x86_64__)
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(0L), "D"((long)fd), "S"(&c), "d"(1L)
                     : "rcx", "r11", "memory");
    return ret;
#else
    return read(fd, &c, 1);
#endif
}

static void *waiter(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "fr-waiter");
    for (;;) {
        unsigned long long start = now_ns();
        if (wait_io(pipefd[0]) != 1) return NULL;
        unsigned long long end = now_ns();
        printf("wait %llu %llu\n", start, end);
        fflush(stdout);
    }
}

static void *waker(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "fr-waker");
    struct timespec t = {0, 100 * 1000 * 1000};
    for (;;) {
        nanosleep(&t, NULL);
        if (write(pipefd[1], "x", 1) != 1) return NULL;
    }
}

int main(void) {
    pthread_t a, b;
    if (pipe(pipefd) != 0) return 1;
    pthread_setname_np(pthread_self(), "fr-burner");
    pthread_create(&a, NULL, waiter, NULL);
    pthread_create(&b, NULL, waker, NULL);
    burn_cpu();
    return 0;
}
"#;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `snapctl --json ARGS -o OUT`, which must succeed: its summary.
fn snapctl_json(d: &Daemon, args: &[&str], out: &Path) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    all.extend(["-o", out.to_str().unwrap()]);
    serde_json::from_str(&run(&mut d.snapctl_cmd(&all))).unwrap()
}

/// A tool the test needs: a failure under CI, a skip elsewhere.
fn have(test: &str, tool: &str, args: &[&str]) -> bool {
    if Command::new(tool)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return true;
    }
    let why = format!("no working {tool} (run tests/prepare-host)");
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test}: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
    false
}

/// The program, running; its waits as they are printed. Killed on drop.
struct Program {
    child: std::process::Child,
    waits: Arc<Mutex<Vec<(u64, u64)>>>,
}

impl Program {
    fn start(exe: &Path) -> Self {
        let mut child = Command::new(exe)
            .stdout(Stdio::piped())
            .spawn()
            .expect("run the program");
        let stdout = child.stdout.take().unwrap();
        let waits = Arc::new(Mutex::new(Vec::new()));
        let sink = waits.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let f: Vec<&str> = line.split_whitespace().collect();
                if let [_, a, b] = f[..] {
                    sink.lock()
                        .unwrap()
                        .push((a.parse().unwrap(), b.parse().unwrap()));
                }
            }
        });
        Program { child, waits }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// First and last sample time of a snapshot (CLOCK_MONOTONIC ns).
fn sample_range(snapshot: &Path) -> (u64, u64) {
    let times: Vec<u64> = perf_script(snapshot, &["--ns", "-F", "time"])
        .lines()
        .filter_map(|l| {
            let (s, ns) = l.trim().trim_end_matches(':').split_once('.')?;
            Some(s.parse::<u64>().ok()? * 1_000_000_000 + ns.parse::<u64>().ok()?)
        })
        .collect();
    (
        *times.iter().min().expect("samples"),
        *times.iter().max().expect("samples"),
    )
}

/// `perf report --no-children --sort sym` samples of `sym` for `event`.
fn perf_report_samples(snapshot: &Path, buildid_dir: &Path, event: &str, sym: &str) -> u64 {
    let text = run(Command::new("perf")
        .arg("--buildid-dir")
        .arg(buildid_dir)
        .args([
            "report",
            "--stdio",
            "--no-children",
            "--sort",
            "sym",
            "-n",
            "-g",
            "none",
            "-i",
        ])
        .arg(snapshot));
    let mut current = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# Samples: ") {
            current = rest.split('\'').nth(1).unwrap_or_default().to_string();
        } else if current == event && line.trim_end().ends_with(&format!("] {sym}")) {
            return line.split_whitespace().nth(1).unwrap().parse().unwrap();
        }
    }
    panic!("no {sym} under {event} in perf report:\n{text}");
}

/// The value `go tool pprof -top` gives `func` (flat, or cum with `cum`).
fn pprof_value(profile: &Path, sample_index: &str, func: &str, cum: bool) -> f64 {
    let home = tempfile::tempdir().unwrap();
    let text = run(Command::new("go")
        .env("HOME", home.path())
        .env("GOCACHE", home.path().join("cache"))
        .env("GOTOOLCHAIN", "local")
        .args(["tool", "pprof", "-top", "-nodecount=1000"])
        .arg(format!("-sample_index={sample_index}"))
        .args(if sample_index == "off_cpu" {
            &["-unit=ms"][..]
        } else {
            &[][..]
        })
        .args(if cum { &["-cum"][..] } else { &[][..] })
        .arg(profile));
    let line = text
        .lines()
        .find(|l| l.split_whitespace().last() == Some(func))
        .unwrap_or_else(|| panic!("no {func} in pprof -top:\n{text}"));
    let f: Vec<&str> = line.split_whitespace().collect();
    let value = if cum { f[3] } else { f[0] };
    value
        .trim_end_matches("ms")
        .parse()
        .unwrap_or_else(|_| panic!("value {value:?} in {line:?}"))
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn report_and_exports_show_on_and_off_cpu_stacks_as_perf_pprof_samply_and_a_browser_see_them() {
    const TEST: &str = "report_and_exports_show_on_and_off_cpu_stacks";
    require_root(TEST);
    if !have(TEST, "go", &["version"]) || !have(TEST, "chromium", &["--version"]) {
        return;
    }
    // cpu-clock first, with context switch records (samply profiles a
    // file's first event and computes off-CPU time from its switches);
    // sched_switch with call chains (the stacks threads sleep with).
    let dir = tempfile::tempdir().unwrap();
    let defaults = "[[event]]\nname = \"sched:sched_switch\"\n\n\
                    [[event]]\nname = \"cpu-clock\"\nfrequency = 999\ncallchain = true\n";
    let events = "[[event]]\nname = \"cpu-clock\"\nfrequency = 999\ncallchain = true\n\
                  context_switch = true\n\n\
                  [[event]]\nname = \"sched:sched_switch\"\ncallchain = true\n";
    let text = test_config(
        dir.path(),
        "[snapshot]\ncompression = \"none\"\nmin_interval = \"100ms\"\n",
    );
    assert!(text.contains(defaults), "{text}");
    let text = text
        .replacen(defaults, events, 1)
        .replace("per_cpu = \"256KiB\"", "per_cpu = \"1MiB\"");
    let d = Daemon::start_in(dir, &text, &[]);

    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("program.c");
    let exe = work.path().join("fr-program");
    std::fs::write(&src, PROGRAM_C).unwrap();
    run(Command::new("gcc")
        .args(["-g", "-O1", "-fno-omit-frame-pointer", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src));
    let program = Program::start(&exe);
    // Wait for a witness that it runs (its first wait), then delete it: its
    // symbols can then only come from the archive.
    let started = Instant::now();
    while program.waits.lock().unwrap().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the program never woke"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::remove_file(&exe).unwrap();

    // Dump until a snapshot holds enough of both threads: 300 samples of
    // the burner and 5 switches of the waiter.
    let deadline = Instant::now() + Duration::from_secs(60);
    let path = loop {
        std::thread::sleep(Duration::from_millis(1500));
        let v = d.json(&["dump"]);
        let path = PathBuf::from(v["path"].as_str().unwrap());
        let lines = perf_script(&path, &["-F", "comm,event"]);
        let burns = lines
            .lines()
            .filter(|l| l.contains("fr-burner") && l.contains("cpu-clock"))
            .count();
        let waits = lines
            .lines()
            .filter(|l| l.trim_start().starts_with("fr-waiter") && l.contains("sched_switch"))
            .count();
        eprintln!("{TEST}: {burns} samples of fr-burner, {waits} switches of fr-waiter");
        if burns >= 300 && waits >= 5 {
            break path;
        }
        assert!(Instant::now() < deadline, "no snapshot with both threads");
    };
    let id = flightrec_tests::snapshot_id(&path);

    // The archive's build-id cache, unpacked.
    let tarball = work.path().join("archive.tar");
    run(&mut d.snapctl_cmd(&["archive", &id, "-o", tarball.to_str().unwrap()]));
    let cache = work.path().join("cache");
    flightrec_tests::unpack(&tarball, &cache);
    let symfs = cache.to_str().unwrap().to_string();

    // Without it, the deleted program's frames are offsets, never names.
    let bare = work.path().join("bare.folded");
    let summary = snapctl_json(&d, &["export", &id, "--format", "collapsed"], &bare);
    let folded = std::fs::read_to_string(&bare).unwrap();
    assert!(!folded.contains("burn_cpu"), "named without its file");
    assert!(
        folded.contains("fr-program+0x"),
        "{}",
        &folded[..folded.len().min(2000)]
    );
    assert!(
        summary["unresolved"]
            .as_array()
            .unwrap()
            .iter()
            .any(|u| u["file"].as_str().unwrap().contains("fr-program")),
        "{summary}"
    );

    // Collapsed, default event (cpu-clock): its total is perf script's count.
    let collapsed = work.path().join("on.folded");
    let summary = snapctl_json(
        &d,
        &["export", &id, "--format", "collapsed", "--symfs", &symfs],
        &collapsed,
    );
    assert_eq!(summary["path"], collapsed.to_str().unwrap());
    assert_eq!(
        summary["bytes"].as_u64(),
        Some(std::fs::metadata(&collapsed).unwrap().len())
    );
    let folded = std::fs::read_to_string(&collapsed).unwrap();
    let total: u64 = folded
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    let cpu_clock = perf_script(&path, &["-F", "event"])
        .lines()
        .filter(|l| l.trim() == "cpu-clock:")
        .count() as u64;
    assert_eq!(
        total, cpu_clock,
        "collapsed total vs perf script's cpu-clock samples"
    );
    assert!(
        folded
            .lines()
            .any(|l| l.starts_with("fr-burner;") && l.contains(";burn_cpu ")),
        "{}",
        &folded[..folded.len().min(2000)]
    );

    // pprof: burn_cpu's samples as perf report counts them, wait_io's
    // off-CPU time as the program measured its waits.
    let profile = work.path().join("profile.pb.gz");
    run(&mut d.snapctl_cmd(&[
        "export",
        &id,
        "--format",
        "pprof",
        "--symfs",
        &symfs,
        "-o",
        profile.to_str().unwrap(),
    ]));
    let perf_burns = perf_report_samples(&path, &cache, "cpu-clock", "burn_cpu") as f64;
    let pprof_burns = pprof_value(&profile, "samples", "burn_cpu", false);
    eprintln!("{TEST}: burn_cpu: perf report {perf_burns} samples, pprof {pprof_burns}");
    assert!(
        (pprof_burns - perf_burns).abs() <= (perf_burns * 0.01).max(1.0),
        "burn_cpu: pprof {pprof_burns} vs perf report {perf_burns}"
    );
    let (first, last) = sample_range(&path);
    // The waits whose start the window saw, up to the window's end (a
    // thread still asleep at the end is counted until then).
    let slept_ms: f64 = program
        .waits
        .lock()
        .unwrap()
        .iter()
        .filter(|(start, _)| *start >= first && *start < last)
        .map(|(start, end)| (end.min(&last) - start) as f64 / 1e6)
        .sum();
    let wait_ms = pprof_value(&profile, "off_cpu", "wait_io", true);
    eprintln!(
        "{TEST}: wait_io: slept {slept_ms:.1} ms in the window, pprof off_cpu {wait_ms:.1} ms"
    );
    assert!(slept_ms > 300.0, "the window holds {slept_ms} ms of waits");
    assert!(
        (wait_ms - slept_ms).abs() <= slept_ms * 0.05 + 20.0,
        "wait_io off-CPU {wait_ms} ms vs {slept_ms} ms slept"
    );

    // samply: the waiter, hardly ever on CPU, has its waits as off-CPU
    // samples (weighing about one per millisecond asleep, cpu-clock's
    // interval).
    if have(TEST, "samply", &["--version"]) {
        let json = work.path().join("samply.json");
        run(Command::new("samply")
            .args(["import", "--save-only", "--no-open", "-o"])
            .arg(&json)
            .arg(&path));
        let p: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        // An off-CPU stretch is one sample weighed by the intervals it
        // covers.
        let waiter_samples: u64 = p["threads"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["name"] == "fr-waiter")
            .map(|t| {
                let samples = &t["samples"];
                match samples["weight"].as_array() {
                    Some(w) => w.iter().map(|x| x.as_u64().unwrap_or(1)).sum(),
                    None => samples["length"].as_u64().unwrap_or(0),
                }
            })
            .sum();
        let on_cpu = perf_script(&path, &["-F", "comm,event"])
            .lines()
            .filter(|l| l.trim_start().starts_with("fr-waiter") && l.contains("cpu-clock"))
            .count() as u64;
        eprintln!("{TEST}: samply: fr-waiter {waiter_samples} samples, {on_cpu} of them on CPU");
        assert!(
            waiter_samples as f64 >= on_cpu as f64 + slept_ms * 0.5,
            "samply shows too few off-CPU samples of fr-waiter: {waiter_samples} in all, \
             {on_cpu} on CPU, {slept_ms:.0} ms asleep"
        );
    }

    // The page, in a browser with no network.
    let page = work.path().join("report.html");
    let summary = snapctl_json(&d, &["report", &id, "--symfs", &symfs], &page);
    assert_eq!(summary["path"], page.to_str().unwrap());
    check_page_in_chromium(&page, work.path());

    // The same snapshot compressed (PERF_RECORD_COMPRESSED) exports the same.
    let compressed = d.json(&["compress", &id]);
    assert_eq!(compressed["compressed"], true, "{compressed}");
    let again = work.path().join("again.folded");
    snapctl_json(
        &d,
        &["export", &id, "--format", "collapsed", "--symfs", &symfs],
        &again,
    );
    assert_eq!(
        std::fs::read_to_string(&again).unwrap(),
        std::fs::read_to_string(&collapsed).unwrap()
    );
}

/// Chromium flags for a run that talks to nothing (as root: no sandbox).
fn chromium(profile: &Path) -> Command {
    let mut c = Command::new("chromium");
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1800",
        "--virtual-time-budget=5000",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

fn artifacts_dir() -> PathBuf {
    let dir = std::env::var_os("FLIGHTREC_TEST_ARTIFACTS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn url_prefix(page: &Path) -> String {
    format!("file://{}", page.display())
}

fn check_page_in_chromium(page: &Path, work: &Path) {
    let url = format!("file://{}", page.display());
    let netlog = work.join("netlog.json");
    let out = chromium(&work.join("chromium-dom"))
        .arg(format!("--log-net-log={}", netlog.display()))
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chromium failed: {log}");
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:#?}");
    assert!(
        dom.contains("data-ready=\"1\""),
        "the page's script did not finish:\n{log}"
    );
    assert!(
        dom.contains("<pre id=\"errors\"></pre>"),
        "errors on the page"
    );
    // The page requested nothing but its own file. (Chromium itself calls
    // Google's update, time and account services whatever the flags; its
    // CSP would also have turned a request of the page into a console
    // error, checked above.)
    let net = std::fs::read_to_string(&netlog).expect("chromium's net log");
    let chromiums_own = [
        "google.com/",
        "googleapis.com/",
        "gvt1.com/",
        "gstatic.com/",
    ];
    let requests: Vec<&str> = net
        .split("\"url\":\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .filter(|url| !url.starts_with(&url_prefix(page)))
        .filter(|url| !chromiums_own.iter().any(|h| url.contains(h)))
        .collect();
    assert!(requests.is_empty(), "the page made requests: {requests:?}");
    let section = |id: &str| -> String {
        let start = dom
            .find(&format!("id=\"{id}\""))
            .unwrap_or_else(|| panic!("no #{id} in the page"));
        let rest = &dom[start..];
        rest[..rest.find("</svg>").unwrap_or(rest.len())].to_string()
    };
    assert!(section("flame-on-cpu-clock").contains("<title>burn_cpu ("));
    assert!(section("flame-off-cpu").contains("<title>wait_io ("));
    let threads = &dom[dom
        .find("id=\"timeline-threads\"")
        .expect("timeline legend")..];
    let threads = &threads[..threads.find("</ul>").unwrap()];
    assert!(threads.contains("data-thread=\"fr-burner\""), "{threads}");

    let shot = artifacts_dir().join("report.png");
    let _ = std::fs::remove_file(&shot);
    let out = chromium(&work.join("chromium-shot"))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(&shot).expect("screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
}
