//! End to end: `snapctl report` and `snapctl export` on a snapshot of a C
//! program whose functions are known, one thread spinning in `burn_cpu`,
//! one sleeping in `wait_io` on a pipe; checked against `perf report`,
//! `perf script`, `go tool pprof`, samply and headless Chromium, where a
//! script drives the page as a reader would (the idle toggle, a range
//! dragged on the timeline, a thread picked, the top-functions table
//! sorted) and its figures are checked against `perf script`'s. The
//! program is deleted once it runs, so its symbols come from an archive's
//! build-id cache only. A second test names a thread `<!--` and labels
//! its snapshot with the page template's placeholders. A third runs a
//! spinner in a cgroup of its own (`web.service`) beside one on the host
//! and checks that the page's legend, container picker and header, the
//! pprof labels and `collapsed --by container` name it, each with the
//! samples `perf report --sort cgroup` counts in it.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use flightrec_tests::{Daemon, have, perf_script, require_root, test_config};

/// The program: `fr-burner` spins in `burn_cpu` (resting 2 ms after
/// every 16 rounds, so that a machine with one other busy loop on its
/// second CPU still has idle moments for the page's idle toggle to show),
/// `fr-waiter` blocks in
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
    struct timespec rest = {0, 2 * 1000 * 1000};
    for (unsigned n = 1;; n++) {
        for (unsigned long i = 0; i < 1000000; i++) sink += i * 7;
        if (n % 16 == 0) nanosleep(&rest, NULL);
    }
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

/// One test at a time: each records the whole machine, and the page test
/// needs a CPU left idle (its snapshot must hold samples of the idle task).
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

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

/// The program, running; its waits as they are printed. Killed on drop.
struct Program {
    child: std::process::Child,
    waits: Arc<Mutex<Vec<(u64, u64)>>>,
}

impl Program {
    /// Runs `exe` with every thread on `cpu` (taskset execs it: same pid).
    fn start(exe: &Path, cpu: u32) -> Self {
        let mut child = Command::new("taskset")
            .args(["-c", &cpu.to_string()])
            .arg(exe)
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

    /// Milliseconds the waiter slept in the waits it began from `from` to
    /// `until`, cut at `until`.
    fn slept_between(&self, from: u64, until: u64) -> f64 {
        self.waits
            .lock()
            .unwrap()
            .iter()
            .filter(|(start, _)| *start >= from && *start < until)
            .map(|(start, end)| (end.min(&until) - start) as f64 / 1e6)
            .sum()
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one CPU's ring held in a snapshot.
struct CpuSpan {
    oldest: u64,
    newest: u64,
    records: u64,
}

/// The CPU whose ring a snapshot filled most slowly (fewest records per
/// second): the one that will reach furthest back once every ring wraps,
/// where a context-switching load elsewhere leaves it milliseconds.
fn quietest_cpu(records: &[ScriptRecord]) -> u32 {
    let rate = |s: &CpuSpan| s.records as f64 / (s.newest - s.oldest).max(1) as f64;
    cpu_spans(records)
        .into_iter()
        .min_by(|a, b| rate(&a.1).total_cmp(&rate(&b.1)))
        .map(|(cpu, _)| cpu)
        .expect("samples")
}

/// Each CPU's span of a snapshot: each CPU's ring reaches back to its own
/// instant.
fn cpu_spans(records: &[ScriptRecord]) -> std::collections::BTreeMap<u32, CpuSpan> {
    let mut spans = std::collections::BTreeMap::new();
    for r in records {
        let e = spans.entry(r.cpu).or_insert(CpuSpan {
            oldest: r.time,
            newest: r.time,
            records: 0,
        });
        e.oldest = e.oldest.min(r.time);
        e.newest = e.newest.max(r.time);
        e.records += 1;
    }
    spans
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
    // Every line of the symbol: perf keeps one per file it lies in, and a
    // program deleted while it runs is two files to perf (its path, and
    // the path with " (deleted)" of the maps recorded since).
    let mut current = String::new();
    let mut samples = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# Samples: ") {
            current = rest.split('\'').nth(1).unwrap_or_default().to_string();
        } else if current == event && line.trim_end().ends_with(&format!("] {sym}")) {
            let n: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
            *samples.get_or_insert(0) += n;
        }
    }
    let samples =
        samples.unwrap_or_else(|| panic!("no {sym} under {event} in perf report:\n{text}"));
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(sym)).collect();
    eprintln!("perf report's lines of {sym}: {lines:?}");
    samples
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
    let _alone = one_at_a_time();
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
    // The program runs on the CPU whose ring fills most slowly: its
    // waits are switched out and in there, so that ring's reach is what
    // the snapshot can show of them (a CPU that a context-switching load
    // keeps busy reaches back milliseconds, whatever the ring's size).
    let cpu = quietest_cpu(&records_of(&PathBuf::from(
        d.json(&["dump"])["path"].as_str().unwrap(),
    )));
    let program = Program::start(&exe, cpu);
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
    // the burner, 5 switches of the waiter and 300 ms of its waits after
    // its CPU's oldest record; samples of the idle task,
    // which the page hides until asked (for 30 s at most outside CI: a
    // machine busy with other work may never idle); and the program's
    // samples from the first tenth of the samples' span on, so that the
    // range the page check drags (30% to 60% of the window) holds the
    // burner: the rings reach back seconds before the program started.
    let deadline = Instant::now() + Duration::from_secs(60);
    let idle_deadline = Instant::now() + Duration::from_secs(30);
    let ci = std::env::var("CI").as_deref() == Ok("true");
    let (path, records) = loop {
        std::thread::sleep(Duration::from_millis(1500));
        let v = d.json(&["dump"]);
        let path = PathBuf::from(v["path"].as_str().unwrap());
        let records = records_of(&path);
        let spans = cpu_spans(&records);
        let count = |comm: &str, event: &str| {
            records
                .iter()
                .filter(|r| r.comm == comm && r.event == event)
                .count()
        };
        let burns = count("fr-burner", "cpu-clock");
        let waits = count("fr-waiter", "sched:sched_switch");
        let samples = samples_of(&records);
        let idle = samples.iter().filter(|s| s.pid == 0).count();
        let first = samples.iter().map(|s| s.time).min().unwrap_or(0);
        let last = samples.iter().map(|s| s.time).max().unwrap_or(0);
        let program_from = samples
            .iter()
            .filter(|s| s.pid as u32 == program.child.id())
            .map(|s| s.time)
            .min()
            .unwrap_or(0);
        let early = program_from > 0 && program_from <= first + (last - first) / 10;
        let newest = spans.values().map(|s| s.newest).max().unwrap_or(0);
        let held = spans
            .get(&cpu)
            .map_or(0.0, |s| program.slept_between(s.oldest, newest));
        eprintln!(
            "{TEST}: {burns} samples of fr-burner, {waits} switches of fr-waiter \
             ({held:.1} ms of waits on CPU {cpu}'s reach), {idle} of idle, \
             the program's from {:.1}% of the span",
            program_from.saturating_sub(first) as f64 * 100.0 / (last - first).max(1) as f64
        );
        if burns >= 300
            && waits >= 5
            && held > 300.0
            && early
            && (idle >= 1 || !ci && Instant::now() > idle_deadline)
        {
            break (path, records);
        }
        assert!(
            Instant::now() < deadline,
            "no snapshot with both threads, 300 ms of waits, an idle moment and the program \
             from the first tenth of its span (is the machine busy?)"
        );
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
    let cpu_clock = samples_of(&records).len() as u64;
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
    // Each CPU's ring reaches back to its own instant: a wait whose
    // switch-out is on a CPU whose ring no longer holds it is not seen.
    // The program's threads are on one CPU, so the waits the snapshot
    // must show are those after that CPU's oldest record, and those it
    // can show those after any CPU's, up to the window's end (a thread
    // still asleep then counts until then).
    let spans = cpu_spans(&records);
    let first = spans.values().map(|s| s.oldest).min().expect("records");
    let last = spans.values().map(|s| s.newest).max().expect("records");
    let surely = program.slept_between(spans[&cpu].oldest, last);
    let at_most = program.slept_between(first, last);
    let slept_ms = surely;
    let wait_ms = pprof_value(&profile, "off_cpu", "wait_io", true);
    eprintln!(
        "{TEST}: wait_io: slept {surely:.1} ms after CPU {cpu}'s oldest record, \
         {at_most:.1} ms after any CPU's; pprof off_cpu {wait_ms:.1} ms"
    );
    assert!(
        wait_ms >= surely * 0.95 - 20.0 && wait_ms <= at_most * 1.05 + 20.0,
        "wait_io off-CPU {wait_ms} ms, not within {surely}..{at_most} ms slept"
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
        let on_cpu = samples_of(&records)
            .iter()
            .filter(|s| s.comm == "fr-waiter")
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
    check_page_at_work(&page, work.path(), &records);

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

/// The DOM of `page` once its script ran in Chromium (with `netlog`, when
/// given, recording every request), which must have printed nothing to
/// the console and shown no error.
fn dom_in_chromium(page: &Path, profile: &Path, netlog: Option<&Path>) -> String {
    let url = format!("file://{}", page.display());
    let mut cmd = chromium(profile);
    if let Some(netlog) = netlog {
        cmd.arg(format!("--log-net-log={}", netlog.display()));
    }
    let out = cmd
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
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
    dom
}

/// The text of the element `id` of a dumped DOM, up to its first `end`.
fn element<'a>(dom: &'a str, id: &str, end: &str) -> &'a str {
    let start = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in the page"));
    let rest = &dom[start..];
    &rest[..rest.find(end).unwrap_or(rest.len())]
}

fn check_page_in_chromium(page: &Path, work: &Path) {
    let netlog = work.join("netlog.json");
    let dom = dom_in_chromium(page, &work.join("chromium-dom"), Some(&netlog));
    // The page requested nothing but its own file. (Chromium itself calls
    // Google's update, time and account services whatever the flags; its
    // CSP would also have turned a request of the page into a console
    // error, which `dom_in_chromium` checks.)
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
    assert!(element(&dom, "flame-on-cpu-clock", "</svg>").contains("<title>burn_cpu ("));
    assert!(element(&dom, "flame-off-cpu", "</svg>").contains("<title>wait_io ("));
    let threads = element(&dom, "timeline-threads", "</ul>");
    assert!(threads.contains("data-thread=\"fr-burner\""), "{threads}");
    screenshot(page, &work.join("chromium-shot"), "report.png");
}

/// A screenshot of `page` as an artifact of the test run, named `name`.
fn screenshot(page: &Path, profile: &Path, name: &str) {
    let shot = artifacts_dir().join(name);
    let _ = std::fs::remove_file(&shot);
    let out = chromium(profile)
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
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
    eprintln!("screenshot: {}", shot.display());
}

/// A record as `perf script` prints it.
struct ScriptRecord {
    comm: String,
    pid: i32,
    tid: i32,
    cpu: u32,
    /// CLOCK_MONOTONIC ns, the snapshot's sample clock.
    time: u64,
    /// `cpu-clock`, `sched:sched_switch`, ...
    event: String,
}

/// Every record of a snapshot, from one `perf script`.
fn records_of(snapshot: &Path) -> Vec<ScriptRecord> {
    // `  COMM  PID/TID  [CPU]  SECS.NANOS:  EVENT:` (a comm may hold
    // spaces, so the fields are taken from the right).
    let parse = |l: &str| {
        let mut f: Vec<&str> = l.split_whitespace().collect();
        let event = f.pop()?.trim_end_matches(':').to_string();
        let (secs, ns) = f.pop()?.trim_end_matches(':').split_once('.')?;
        let cpu = f.pop()?.trim_matches(|c| c == '[' || c == ']');
        let (pid, tid) = f.pop()?.split_once('/')?;
        Some(ScriptRecord {
            comm: f.join(" "),
            pid: pid.parse().ok()?,
            tid: tid.parse().ok()?,
            cpu: cpu.parse().ok()?,
            time: secs.parse::<u64>().ok()? * 1_000_000_000 + ns.parse::<u64>().ok()?,
            event,
        })
    };
    perf_script(snapshot, &["--ns", "-F", "comm,pid,tid,cpu,time,event"])
        .lines()
        .map(|l| parse(l).unwrap_or_else(|| panic!("perf script printed {l:?}")))
        .collect()
}

/// The cpu-clock samples of a snapshot.
fn samples_of(records: &[ScriptRecord]) -> Vec<&ScriptRecord> {
    records.iter().filter(|r| r.event == "cpu-clock").collect()
}

/// Appended to a copy of the page: works it as a reader would, through
/// the DOM and mouse events (turns idle on and off, drags a range on the
/// timeline's time axis, picks THREAD in the picker, sorts the
/// top-functions table by self, twice, then by name) and writes what the
/// page showed at each step into `<pre id="probe">` as JSON.
const WORK_PROBE: &str = r##"<script>
(async function () {
  const out = {};
  const $ = (id) => document.getElementById(id);
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const updates = () => Number(document.body.getAttribute("data-updates") || 0);
  const settled = async (before) => { for (let i = 0; i < 200 && updates() === before; i++) await sleep(20); };
  const flame = (id) => $("flame-" + id);
  const total = (id) => Number(flame(id).getAttribute("data-total"));
  const level = (id, k) => [...flame(id).querySelectorAll("rect:not(.cut)")].filter((r) => Number(r.getAttribute("y")) === 16 * k)
    .map((r) => r.parentNode.querySelector("title").textContent.replace(/ \([^(]*\)$/, ""));
  const view = () => ({ range: $("flames").getAttribute("data-range").split(" ").map(Number), on: total("on-cpu-clock"), idle_hidden: Number(flame("on-cpu-clock").getAttribute("data-idle-hidden")), off: total("off-cpu"), level1: level("on-cpu-clock", 1) });
  try {
    out.origin = JSON.parse($("data").textContent).origin_ns;
    out.span = JSON.parse($("data").textContent).span;
    out.ready_ms = Number(document.body.getAttribute("data-ready-ms"));
    out.idle_checked = $("show-idle").checked;
    out.whole = view();
    let u = updates(); $("show-idle").click(); await settled(u);
    out.with_idle = view();
    u = updates(); $("show-idle").click(); await settled(u);
    // Drag on the time axis from 30% to 60% of the window.
    const c = $("timeline"), r = c.getBoundingClientRect(), LABEL = 150, w = c.width - LABEL;
    const at = (type, x) => c.dispatchEvent(new MouseEvent(type, { bubbles: true, clientX: r.left + 1 + x, clientY: r.top + 1 + 8, buttons: 1 }));
    u = updates();
    at("mousedown", LABEL + 0.3 * w); at("mousemove", LABEL + 0.45 * w); at("mousemove", LABEL + 0.6 * w); at("mouseup", LABEL + 0.6 * w);
    await settled(u);
    out.selected = view();
    const sel = $("thread-pick");
    sel.dispatchEvent(new MouseEvent("mousedown"));
    const opt = [...sel.options].find((o) => o.value.startsWith("t:") && o.textContent.trim().startsWith(THREAD + " (tid"));
    u = updates(); sel.value = opt.value; sel.dispatchEvent(new Event("change")); await settled(u);
    out.picked = Object.assign(view(), { tid: Number(opt.value.slice(2)) });
    document.querySelector('#tabs button[data-tab="functions"]').click();
    const col = (key) => {
      const ths = [...document.querySelectorAll("#top-functions th")], i = ths.findIndex((th) => th.dataset.key === key);
      return [...document.querySelectorAll("#top-functions tbody tr")].filter((tr) => tr.children.length === ths.length).map((tr) => tr.children[i].getAttribute("data-value"));
    };
    const sortOf = (key) => document.querySelector('#top-functions th[data-key="' + key + '"]').getAttribute("aria-sort");
    const f = out.functions = { self_sort: sortOf("self"), self: col("self").map(Number), names: col("name") };
    document.querySelector('#top-functions th[data-key="self"]').click();
    f.self_sort_after = sortOf("self"); f.self_after = col("self").map(Number);
    document.querySelector('#top-functions th[data-key="name"]').click();
    f.name_sort = sortOf("name"); f.names_sorted = col("name");
  } catch (e) { out.error = String((e && e.stack) || e); }
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.style.whiteSpace = "pre-wrap";
  pre.textContent = JSON.stringify(out).replace(/</g, "\\u003c").replace(/>/g, "\\u003e").replace(/&/g, "\\u0026");
  document.body.appendChild(pre);
})();
</script>"##;

/// The page as a place to work in: idle hidden until asked, the flame
/// graphs following a range dragged on the timeline, a thread picked, the
/// top-functions table sorted; each figure the page shows checked against
/// the samples `perf script` reads from the snapshot.
fn check_page_at_work(page: &Path, work: &Path, records: &[ScriptRecord]) {
    let html = std::fs::read_to_string(page).unwrap();
    let probed = work.join("probed.html");
    let probe = WORK_PROBE.replace("THREAD", "\"fr-burner\"");
    std::fs::write(
        &probed,
        html.replacen("</body>", &format!("{probe}</body>"), 1),
    )
    .unwrap();
    let dom = dom_in_chromium(&probed, &work.join("chromium-probe"), None);
    let text = element(&dom, "probe", "</pre>");
    let probe: serde_json::Value = serde_json::from_str(&text[text.find('>').unwrap() + 1..])
        .unwrap_or_else(|e| panic!("the probe's result {text}: {e}"));
    assert!(probe.get("error").is_none(), "{probe:#}");
    let samples = samples_of(records);
    let origin = probe["origin"].as_u64().unwrap();
    let count =
        |keep: &dyn Fn(&ScriptRecord) -> bool| samples.iter().filter(|s| keep(s)).count() as u64;
    let on = |step: &str| probe[step]["on"].as_u64().unwrap();
    let off = |step: &str| probe[step]["off"].as_u64().unwrap();
    let ready_ms = probe["ready_ms"].as_u64().unwrap();
    eprintln!("page at work: ready {ready_ms} ms after navigation; {probe}");
    assert!(ready_ms < 2000, "the page took {ready_ms} ms to be ready");

    // Idle hidden by default: no swapper frame, the on-CPU graph's total
    // is every sample but the idle task's, and its heading counts those;
    // shown on request.
    // (The idle task is `swapper/CPU` under the root.)
    let swapper = |step: &str| {
        probe[step]["level1"]
            .as_array()
            .unwrap()
            .iter()
            .any(|name| name.as_str().unwrap().starts_with("swapper"))
    };
    let idle = count(&|s| s.pid == 0);
    if idle == 0 {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no sample of the idle task"
        );
        eprintln!("SKIPPED the idle toggle's figures: the machine never idled in the window");
    }
    assert_eq!(probe["idle_checked"], false);
    assert!(!swapper("whole"), "{probe:#}");
    assert_eq!(on("whole"), count(&|s| s.pid != 0), "{probe:#}");
    assert_eq!(probe["whole"]["idle_hidden"], idle, "{probe:#}");
    assert_eq!(on("with_idle"), samples.len() as u64, "{probe:#}");
    assert_eq!(probe["with_idle"]["idle_hidden"], 0, "{probe:#}");
    // (A frame narrower than a pixel is not drawn.)
    if idle as f64 / samples.len() as f64 > 0.01 {
        assert!(swapper("with_idle"), "{probe:#}");
    }

    // A range dragged on the timeline: the flame graphs follow it, to the
    // sample.
    let range = &probe["selected"]["range"];
    let (a, b) = (range[0].as_u64().unwrap(), range[1].as_u64().unwrap());
    let span = probe["span"].as_u64().unwrap();
    assert!(
        a > span / 4 && b < span * 2 / 3 && a < b,
        "range {a}..{b} of {span}"
    );
    let in_range = |s: &ScriptRecord| s.time >= origin + a && s.time < origin + b;
    let expected = count(&|s| s.pid != 0 && in_range(s));
    assert_eq!(on("selected"), expected, "{probe:#}");
    assert!(expected > 0 && expected < on("whole"), "{probe:#}");
    assert!(off("selected") < off("whole"), "{probe:#}");

    // A thread picked: its samples in the range, alone under the root.
    let tid = probe["picked"]["tid"].as_i64().unwrap() as i32;
    assert_eq!(probe["picked"]["level1"], serde_json::json!(["fr-burner"]));
    let burner = count(&|s| s.tid == tid && in_range(s));
    assert_eq!(on("picked"), burner, "{probe:#}");
    assert!(burner > 0);

    // The top-functions table of that thread, sorted by self (heaviest
    // first: burn_cpu), then lightest first, then by name.
    let f = &probe["functions"];
    let numbers = |key: &str| -> Vec<u64> {
        f[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    };
    let desc = numbers("self");
    assert_eq!(f["self_sort"], "descending");
    assert!(
        desc.len() > 1 && desc.windows(2).all(|w| w[0] >= w[1]),
        "{f:#}"
    );
    assert_eq!(f["names"][0], "burn_cpu", "{f:#}");
    let asc = numbers("self_after");
    assert_eq!(f["self_sort_after"], "ascending");
    assert!(
        asc.windows(2).all(|w| w[0] <= w[1]) && asc[0] < desc[0],
        "{f:#}"
    );
    let names: Vec<&str> = f["names_sorted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(f["name_sort"], "ascending");
    assert!(
        names.len() > 1 && names.windows(2).all(|w| w[0] <= w[1]),
        "{names:?}"
    );

    // The page as the probe left it: a range, a thread, its functions.
    screenshot(
        &probed,
        &work.join("chromium-probe-shot"),
        "report-at-work.png",
    );
}

/// A process that names itself `<!--` (any user can, with
/// `prctl(PR_SET_NAME)`), prints `named`, then works 2 ms in every 5 (so
/// a CPU stays partly idle).
const COMMENT_NAMED_C: &str = r#"
#include <stdio.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static unsigned long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ull + t.tv_nsec;
}

int main(void) {
    if (prctl(PR_SET_NAME, "<!--", 0, 0, 0) != 0) return 1;
    printf("named\n");
    fflush(stdout);
    for (;;) {
        unsigned long long end = now_ns() + 2000000ull;
        while (now_ns() < end) sink++;
        usleep(3000);
    }
}
"#;

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_thread_named_like_an_html_comment_and_a_label_like_the_templates_placeholders_show_as_they_are()
 {
    const TEST: &str = "a_thread_named_like_an_html_comment";
    require_root(TEST);
    if !have(TEST, "chromium", &["--version"]) {
        return;
    }
    let _alone = one_at_a_time();
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\nmin_interval = \"100ms\"\n");
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("named.c");
    let exe = work.path().join("fr-named");
    std::fs::write(&src, COMMENT_NAMED_C).unwrap();
    run(Command::new("gcc")
        .args(["-O1", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(&src));
    let mut child = Command::new(&exe)
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the program");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "named\n", "the program did not rename itself");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _child = Kill(child);

    // Dump, labelled like the template's placeholders, until a snapshot
    // holds 20 samples of the renamed process.
    let label = "__DATA____JS____CSS____TITLE__";
    let deadline = Instant::now() + Duration::from_secs(60);
    let (id, path) = loop {
        std::thread::sleep(Duration::from_millis(500));
        let v = d.json(&["dump", "--label", label]);
        let path = PathBuf::from(v["path"].as_str().unwrap());
        let named = perf_script(&path, &["-F", "comm,event"])
            .lines()
            .filter(|l| l.trim_start().starts_with("<!-- ") && l.contains("cpu-clock"))
            .count();
        eprintln!("{TEST}: {named} samples of <!--");
        if named >= 20 {
            break (v["id"].as_str().unwrap().to_string(), path);
        }
        assert!(
            Instant::now() < deadline,
            "no snapshot with samples of <!--"
        );
    };
    assert!(id.ends_with(label), "{id}");

    let page = work.path().join("report.html");
    let summary = snapctl_json(&d, &["report", path.to_str().unwrap()], &page);
    assert_eq!(summary["path"], page.to_str().unwrap());
    let html = std::fs::read_to_string(&page).unwrap();
    // The label stays a literal title: not the script, styles or data.
    let title = &html[html.find("<title>").unwrap()..html.find("</title>").unwrap()];
    assert_eq!(title, format!("<title>flightrec: {id}"));

    // The page loads (no console message: its data is valid JSON) and
    // shows the thread by its name: in the on-CPU flame graph and the
    // thread picker.
    let dom = dom_in_chromium(&page, &work.path().join("chromium-dom"), None);
    let flame = element(&dom, "flame-on-cpu-clock", "</svg>");
    assert!(
        flame.contains("<title>&lt;!-- ("),
        "{}",
        &flame[..flame.len().min(3000)]
    );
    let h1 = element(&dom, "title", "</h1>");
    assert!(h1.ends_with(&format!(">flightrec snapshot {id}")), "{h1}");
    // The picker fills itself when first used: as a click on it would.
    let opened = work.path().join("opened.html");
    let open_picker = "<script>document.getElementById(\"thread-pick\").dispatchEvent(new MouseEvent(\"mousedown\"));</script>";
    std::fs::write(
        &opened,
        html.replacen("</body>", &format!("{open_picker}</body>"), 1),
    )
    .unwrap();
    let dom = dom_in_chromium(&opened, &work.path().join("chromium-picker"), None);
    let picker = element(&dom, "thread-pick", "</select>");
    assert!(picker.contains("&lt;!-- (tid"), "{picker}");
}

/// A program that moves itself into the cgroup whose `cgroup.procs` is
/// its argument (if given), prints `ready`, then spins.
const SPINNER_C: &str = r#"
#include <stdio.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) void spin(void) {
    for (;;)
        for (unsigned long i = 0; i < 1000000; i++) sink += i * 3;
}

int main(int argc, char **argv) {
    if (argc > 1) {
        FILE *procs = fopen(argv[1], "w");
        if (!procs) return 2;
        if (fprintf(procs, "%d\n", (int)getpid()) < 0 || fclose(procs) != 0) return 3;
    }
    printf("ready\n");
    fflush(stdout);
    spin();
    return 0;
}
"#;

/// The root of the cgroup2 hierarchy: `/sys/fs/cgroup` on a unified
/// host, `/sys/fs/cgroup/unified` beside v1 controllers (as flightrecd
/// finds it).
fn cgroup2_root() -> Option<PathBuf> {
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.join("cgroup.procs").exists() && p.join("cgroup.controllers").exists())
}

/// Cgroups made for a test, leaf last; their processes killed and the
/// directories removed when dropped.
struct TestCgroups {
    dirs: Vec<PathBuf>,
    children: Vec<std::process::Child>,
}

impl TestCgroups {
    /// `root/parent/leaf`, made (and empty).
    fn make(root: &Path, parent: &str, leaf: &str) -> Self {
        let top = root.join(parent);
        let dir = top.join(leaf);
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot make cgroup {}: {e}", dir.display()));
        TestCgroups {
            dirs: vec![top, dir],
            children: Vec::new(),
        }
    }

    fn leaf(&self) -> &Path {
        self.dirs.last().unwrap()
    }

    /// Runs `exe ARGS`, waits for its `ready` line and keeps it until
    /// drop.
    fn spawn(&mut self, exe: &Path, args: &[&Path]) {
        let mut child = Command::new(exe)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("run the spinner");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n", "{} did not start", exe.display());
        self.children.push(child);
    }
}

impl Drop for TestCgroups {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // A reaped process has left its cgroup: the leaf is empty now
        // (`populated 0`), then its parent.
        for dir in self.dirs.iter().rev() {
            let deadline = Instant::now() + Duration::from_secs(5);
            while std::fs::read_to_string(dir.join("cgroup.events"))
                .is_ok_and(|e| e.contains("populated 1"))
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            if let Err(e) = std::fs::remove_dir(dir)
                && dir.exists()
            {
                eprintln!("cannot remove cgroup {}: {e}", dir.display());
            }
        }
    }
}

/// `perf report --sort cgroup` of a snapshot: samples of `event` per
/// cgroup path, as perf reads each sample's cgroup id and the file's
/// CGROUP records.
fn perf_cgroup_samples(snapshot: &Path, event: &str) -> Vec<(String, u64)> {
    let text = run(Command::new("perf")
        .args([
            "report",
            "--stdio",
            "--no-children",
            "--sort",
            "cgroup",
            "-n",
            "-g",
            "none",
            "-i",
        ])
        .arg(snapshot));
    let mut current = String::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# Samples: ") {
            current = rest.split('\'').nth(1).unwrap_or_default().to_string();
        } else if current == event && !line.starts_with('#') && !line.trim().is_empty() {
            // `    93.51%          2031  /fr-report-test-1/web.service`
            let f: Vec<&str> = line.split_whitespace().collect();
            if let [pct, n, path] = f[..]
                && pct.ends_with('%')
            {
                out.push((path.to_string(), n.parse().unwrap()));
            }
        }
    }
    if out.is_empty() {
        let _ = std::fs::copy(snapshot, artifacts_dir().join("no-cgroups.perf.data"));
        panic!("no cgroups under {event}:\n{text}");
    }
    out
}

/// Appended to a copy of the page: reads the legend's groups, then picks
/// CONTAINER in the container picker as a reader would and writes what
/// the flame graphs and the thread table showed into `<pre id="probe">`.
const CONTAINER_PROBE: &str = r##"<script>
(async function () {
  const out = {};
  const $ = (id) => document.getElementById(id);
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const updates = () => Number(document.body.getAttribute("data-updates") || 0);
  const settled = async (before) => { for (let i = 0; i < 200 && updates() === before; i++) await sleep(20); };
  const flame = (id) => $("flame-" + id);
  const level = (id, k) => [...flame(id).querySelectorAll("rect:not(.cut)")].filter((r) => Number(r.getAttribute("y")) === 16 * k)
    .map((r) => r.parentNode.querySelector("title").textContent.replace(/ \([^(]*\)$/, ""));
  try {
    out.ready_ms = Number(document.body.getAttribute("data-ready-ms"));
    out.picker_hidden = $("container-box").hidden;
    out.options = [...$("container-pick").options].map((o) => o.textContent);
    // The legend, in order: a group's name, then its threads.
    out.legend = [...$("timeline-threads").children].filter((li) => !li.classList.contains("break")).map((li) => li.classList.contains("ctr") ? "group " + li.dataset.container : li.dataset.thread + " in " + li.dataset.container);
    out.all_on = Number(flame("on-cpu-clock").getAttribute("data-total"));
    const sel = $("container-pick");
    const opt = [...sel.options].find((o) => o.textContent.startsWith(CONTAINER + " ("));
    let u = updates(); sel.value = opt.value; sel.dispatchEvent(new Event("change")); await settled(u);
    out.picked = { container: $("flames").getAttribute("data-container"), on: Number(flame("on-cpu-clock").getAttribute("data-total")), level1: level("on-cpu-clock", 1), heading: flame("on-cpu-clock").querySelector("h3").textContent };
    document.querySelector('#tabs button[data-tab="threads"]').click();
    const ths = [...document.querySelectorAll("#top-threads th")], c = ths.findIndex((th) => th.dataset.key === "ctr"), n = ths.findIndex((th) => th.dataset.key === "name");
    out.thread_rows = [...document.querySelectorAll("#top-threads tbody tr")].filter((tr) => tr.children.length === ths.length).map((tr) => tr.children[n].textContent + " in " + tr.children[c].textContent);
    document.querySelector('#tabs button[data-tab="flames"]').click();
  } catch (e) { out.error = String((e && e.stack) || e); }
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.style.whiteSpace = "pre-wrap";
  pre.textContent = JSON.stringify(out).replace(/</g, "\\u003c").replace(/>/g, "\\u003e").replace(/&/g, "\\u0026");
  document.body.appendChild(pre);
})();
</script>"##;

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_service_in_its_own_cgroup_is_named_in_the_page_the_pprof_labels_and_the_folded_roots() {
    const TEST: &str = "a_service_in_its_own_cgroup_is_named";
    require_root(TEST);
    if !have(TEST, "go", &["version"]) || !have(TEST, "chromium", &["--version"]) {
        return;
    }
    let Some(root) = cgroup2_root() else {
        let why = "no cgroup2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified";
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{TEST}: {why}"
        );
        eprintln!("SKIPPED {TEST}: {why}");
        return;
    };
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let text = test_config(
        dir.path(),
        "[snapshot]\ncompression = \"none\"\nmin_interval = \"100ms\"\n",
    )
    .replace("per_cpu = \"256KiB\"", "per_cpu = \"1MiB\"");
    let d = Daemon::start_in(dir, &text, &[]);

    // fr-web in `/fr-report-test-PID/web.service` (named as the systemd
    // unit it looks like), fr-host beside it in the test's own cgroup.
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("spinner.c");
    let web = work.path().join("fr-web");
    let host = work.path().join("fr-host");
    std::fs::write(&src, SPINNER_C).unwrap();
    run(Command::new("gcc")
        .args(["-O1", "-fno-omit-frame-pointer", "-o"])
        .arg(&web)
        .arg(&src));
    std::fs::copy(&web, &host).unwrap();
    let parent = format!("fr-report-test-{}", std::process::id());
    let cgroup = format!("/{parent}/web.service");
    let mut cgroups = TestCgroups::make(&root, &parent, "web.service");
    let procs = cgroups.leaf().join("cgroup.procs");
    cgroups.spawn(&web, &[&procs]);
    cgroups.spawn(&host, &[]);

    // Dump until a snapshot holds 300 samples of each.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (id, path) = loop {
        std::thread::sleep(Duration::from_millis(1500));
        let v = d.json(&["dump"]);
        let path = PathBuf::from(v["path"].as_str().unwrap());
        let lines = perf_script(&path, &["-F", "comm,event"]);
        let of = |comm: &str| {
            lines
                .lines()
                .filter(|l| l.trim_start().starts_with(comm) && l.contains("cpu-clock"))
                .count()
        };
        let (webs, hosts) = (of("fr-web"), of("fr-host"));
        eprintln!("{TEST}: {webs} samples of fr-web, {hosts} of fr-host");
        if webs >= 300 && hosts >= 300 {
            break (v["id"].as_str().unwrap().to_string(), path);
        }
        assert!(Instant::now() < deadline, "no snapshot with both spinners");
    };

    // perf's own count of the cgroup's samples: each figure below is it.
    let by_cgroup = perf_cgroup_samples(&path, "cpu-clock");
    let in_web = by_cgroup
        .iter()
        .find(|(p, _)| *p == cgroup)
        .map(|(_, n)| *n)
        .unwrap_or_else(|| panic!("no {cgroup} in perf report: {by_cgroup:?}"));
    let all: u64 = by_cgroup.iter().map(|(_, n)| n).sum();
    let web_samples = samples_of(&records_of(&path))
        .iter()
        .filter(|s| s.pid as u32 == cgroups.children[0].id())
        .count() as u64;
    eprintln!(
        "{TEST}: perf report: {in_web} of {all} cpu-clock samples in {cgroup}; fr-web has {web_samples}"
    );
    // fr-web moved itself before its first spin: nearly all its samples.
    assert!(
        in_web <= web_samples && in_web as f64 >= web_samples as f64 * 0.95,
        "{in_web} samples in {cgroup}, {web_samples} of fr-web"
    );

    // Collapsed by container: web.service is the root of exactly those
    // samples, fr-web its only thread; fr-host's are the host's.
    let folded_path = work.path().join("by-container.folded");
    snapctl_json(
        &d,
        &["export", &id, "--format", "collapsed", "--by", "container"],
        &folded_path,
    );
    let folded = std::fs::read_to_string(&folded_path).unwrap();
    let mut roots = std::collections::BTreeMap::<String, u64>::new();
    for line in folded.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        *roots
            .entry(stack.split(';').next().unwrap().to_string())
            .or_default() += n.parse::<u64>().unwrap();
        if stack.starts_with("web.service;") {
            assert!(stack.starts_with("web.service;fr-web;"), "{line}");
        }
        if stack.contains(";fr-host;") {
            assert!(stack.starts_with("[host];fr-host;"), "{line}");
        }
    }
    eprintln!("{TEST}: collapsed --by container roots: {roots:?}");
    assert_eq!(roots.get("web.service"), Some(&in_web), "{roots:?}");
    assert_eq!(roots.values().sum::<u64>(), all, "{roots:?}");
    // By thread (the default, as before): no container frames.
    let by_thread = work.path().join("by-thread.folded");
    snapctl_json(&d, &["export", &id, "--format", "collapsed"], &by_thread);
    let by_thread = std::fs::read_to_string(&by_thread).unwrap();
    assert!(by_thread.lines().any(|l| l.starts_with("fr-web;")));
    assert!(!by_thread.contains("web.service"));
    // --by is for collapsed: pprof refuses it, naming why.
    let out = d.snapctl(&[
        "export",
        &id,
        "--format",
        "pprof",
        "--by",
        "container",
        "-o",
        "-",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--by applies to --format collapsed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // pprof: every sample of the cgroup carries `cgroup` and `container`.
    let profile = work.path().join("profile.pb.gz");
    snapctl_json(&d, &["export", &id, "--format", "pprof"], &profile);
    let tags = flightrec_tests::pprof::tags(&profile);
    eprintln!("{TEST}: pprof tags: {tags:?}");
    let tag = |key: &str, value: &str| {
        tags.get(key)
            .and_then(|v| v.iter().find(|(x, _)| x == value))
            .map(|(_, n)| *n)
    };
    assert_eq!(tag("container", "web.service"), Some(in_web), "{tags:?}");
    assert_eq!(tag("cgroup", &cgroup), Some(in_web), "{tags:?}");
    // Every sample has its cgroup (the host's included).
    let cgroup_total: u64 = tags["cgroup"].iter().map(|(_, n)| n).sum();
    assert_eq!(cgroup_total, all, "{tags:?}");

    // The page: the legend groups fr-web under web.service, the header
    // counts its samples, the container picker shows its samples alone.
    let page = work.path().join("report.html");
    snapctl_json(&d, &["report", &id], &page);
    let html = std::fs::read_to_string(&page).unwrap();
    let dom = dom_in_chromium(&page, &work.path().join("chromium-dom"), None);
    let header = element(&dom, "header", "</dl>");
    assert!(
        header.contains(&format!("web.service ({in_web} samples)")),
        "{header}"
    );
    let probed = work.path().join("probed.html");
    let probe = CONTAINER_PROBE.replace("CONTAINER", "\"web.service\"");
    std::fs::write(
        &probed,
        html.replacen("</body>", &format!("{probe}</body>"), 1),
    )
    .unwrap();
    let dom = dom_in_chromium(&probed, &work.path().join("chromium-probe"), None);
    let text = element(&dom, "probe", "</pre>");
    let probe: serde_json::Value = serde_json::from_str(&text[text.find('>').unwrap() + 1..])
        .unwrap_or_else(|e| panic!("the probe's result {text}: {e}"));
    eprintln!("{TEST}: page: {probe}");
    assert!(probe.get("error").is_none(), "{probe:#}");
    assert_eq!(probe["picker_hidden"], false);
    let legend: Vec<&str> = probe["legend"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let group = legend
        .iter()
        .position(|l| *l == "group web.service")
        .unwrap_or_else(|| panic!("no web.service group in the legend: {legend:?}"));
    assert_eq!(legend[group + 1], "fr-web in web.service", "{legend:?}");
    assert!(
        legend.contains(&"fr-host in [host]") && legend.contains(&"group [host]"),
        "{legend:?}"
    );
    assert!(
        probe["options"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o.as_str().unwrap().starts_with("web.service (")),
        "{probe:#}"
    );
    let picked = &probe["picked"];
    assert_eq!(picked["container"], "web.service");
    assert_eq!(picked["on"], in_web, "{probe:#}");
    assert_eq!(picked["level1"], serde_json::json!(["fr-web"]), "{probe:#}");
    assert!(
        picked["heading"]
            .as_str()
            .unwrap()
            .contains(" in web.service"),
        "{probe:#}"
    );
    let rows: Vec<&str> = probe["thread_rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        !rows.is_empty() && rows.iter().all(|r| r.ends_with(" in web.service")),
        "{rows:?}"
    );
    let ready_ms = probe["ready_ms"].as_u64().unwrap();
    assert!(ready_ms < 2000, "the page took {ready_ms} ms to be ready");
    screenshot(
        &probed,
        &work.path().join("chromium-shot"),
        "report-containers.png",
    );

    // A dump scoped to the service: `list --json` names its container and
    // scope, and the page's header says the scope.
    let scoped = d.json(&["dump", "--container", "web.service"]);
    let scoped_id = scoped["id"].as_str().unwrap().to_string();
    let listed = d
        .list()
        .into_iter()
        .find(|s| s["id"] == scoped_id.as_str())
        .expect("the scoped snapshot in the list");
    assert_eq!(listed["scope"], "container:web.service", "{listed:#}");
    let containers = listed["containers"].as_array().unwrap();
    assert!(
        containers
            .iter()
            .any(|c| c["id"] == "web.service" && c["cgroup"] == cgroup.as_str()),
        "{listed:#}"
    );
    let page = work.path().join("scoped.html");
    snapctl_json(&d, &["report", &scoped_id], &page);
    let dom = dom_in_chromium(&page, &work.path().join("chromium-scoped"), None);
    let header = element(&dom, "header", "</dl>");
    assert!(
        header.contains("<dt>scope</dt><dd class=\"\">container:web.service</dd>")
            || header.contains("<dt>scope</dt><dd>container:web.service</dd>"),
        "{header}"
    );
    drop(cgroups);
    assert!(!root.join(&parent).exists(), "the test's cgroup is left");
}
