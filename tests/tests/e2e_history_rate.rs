//! End to end: the history keeps up at 19999 Hz. perf's ring of files
//! (`perf record -a -z --switch-output`) and flightrec's `[history]`, one
//! after the other on the same events (`cpu-clock` at 19999 Hz with call
//! chains and `sched_switch`, 4 MiB rings) and the same load: a window
//! cut from the history over the load says it lost no more samples than
//! perf's files say perf lost, and none where perf lost none.
//!
//! Alone in its test binary: the tests of a binary run at once, and any
//! other load would weigh on one tool's run and not the other's.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use flightrec_tests::{Daemon, have, perf_lost_samples, require_root, test_config};

const HZ: u32 = 19999;

/// The load: a fixed amount of work (a few seconds on two CPUs), many
/// tasks keeping every CPU busy, so the rings fill with call chains and
/// switches.
fn run_load() -> Duration {
    let started = Instant::now();
    let out = Command::new("perf")
        .args(["bench", "sched", "messaging", "-g", "10", "-l", "200"])
        .stdout(Stdio::null())
        .output()
        .expect("run perf bench");
    assert!(out.status.success(), "perf bench failed: {out:?}");
    started.elapsed()
}

/// `perf record`, killed if a failed assertion leaves it running.
struct PerfRecord(std::process::Child);

impl Drop for PerfRecord {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Open perf events of process `pid` (its fds on `[perf_event]`).
fn perf_event_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().contains("perf_event"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// perf's disk ring over one run of the load: the samples it took a second
/// of load (those its files hold and those their LOST records say were
/// dropped), and the samples dropped.
fn perf_disk_ring(dir: &Path) -> (f64, u64) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut perf = PerfRecord(
        Command::new("perf")
            .args(["record", "-a", "-z", "-q", "--switch-output=32M"])
            .args(["--switch-max-files=8", "-m", "1024"])
            .args(["-e", "sched:sched_switch", "-e"])
            .arg(format!("cpu-clock/freq={HZ},call-graph=fp/"))
            .arg("-o")
            .arg(dir.join("perf.data"))
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn perf record"),
    );
    // Witness that perf records: both events open on every CPU (perf
    // enables them once their rings are mapped, milliseconds later, of
    // seconds of load).
    let deadline = Instant::now() + Duration::from_secs(30);
    while perf_event_fds(perf.0.id()) < 2 * cpus {
        assert!(
            perf.0.try_wait().expect("perf record").is_none(),
            "perf record exited at start"
        );
        assert!(Instant::now() < deadline, "perf record opened no events");
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = run_load();
    let pid = perf.0.id().to_string();
    let status = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill");
    assert!(status.success());
    // perf record ends by raising the SIGINT it was stopped with.
    let ended = perf.0.wait().expect("perf record");
    assert!(
        ended.success() || ended.signal() == Some(nix::sys::signal::Signal::SIGINT as i32),
        "perf record ended with {ended}"
    );
    let (mut samples, mut lost) = (0, 0);
    for file in std::fs::read_dir(dir).expect("perf's dir") {
        let path = file.expect("perf's file").path();
        let (s, l) = perf_lost_samples(&path).unwrap_or_else(|e| panic!("{e}"));
        samples += s;
        lost += l;
    }
    ((samples + lost) as f64 / took.as_secs_f64(), lost)
}

/// flightrec's history over one run of the load: the samples it took a
/// second of load (those a window cut from it over the load holds and
/// those its LOST records count), the samples dropped, and what `status`
/// counts as lost.
fn flightrec_history() -> (f64, u64, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let history = dir.path().join("history");
    let text = test_config(
        dir.path(),
        &format!(
            "[snapshot]\ncompression = \"none\"\n\n[history]\nenabled = true\n\
             dir = \"{}\"\nmax_bytes = \"1GiB\"\n",
            history.display()
        ),
    )
    .replace("per_cpu = \"256KiB\"", "per_cpu = \"4MiB\"")
    .replace("frequency = 999", &format!("frequency = {HZ}"));
    assert!(text.contains("4MiB") && text.contains(&HZ.to_string()));
    let d = Daemon::start_in(dir, &text, &[]);
    let started = Instant::now();
    let took = run_load();
    // The window reaches back to before the load, a second to spare.
    let before = started.elapsed().as_secs() + 1;
    let dump = d.json(&["dump", "--before", &format!("{before}s")]);
    let path = Path::new(dump["path"].as_str().expect("the dump's path"));
    let (samples, lost) = perf_lost_samples(path).unwrap_or_else(|e| panic!("{e}"));
    let status = d.json(&["status"]);
    let status_lost = status["history"]["lost"]
        .as_u64()
        .unwrap_or_else(|| panic!("status counts no history loss: {status}"));
    (
        (samples + lost) as f64 / took.as_secs_f64(),
        lost,
        status_lost,
    )
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn at_19999_hz_the_history_loses_no_more_than_perfs_disk_ring() {
    let test = "at_19999_hz_the_history_loses_no_more_than_perfs_disk_ring";
    require_root(test);
    if !have(test, "perf", &["--version"]) {
        return;
    }
    let perf_dir = tempfile::tempdir().expect("tempdir");
    let (perf_rate, perf_lost) = perf_disk_ring(perf_dir.path());
    let (rate, lost, status_lost) = flightrec_history();
    eprintln!(
        "samples taken a second of load: perf {perf_rate:.0}, flightrec {rate:.0}; \
         lost: perf {perf_lost}, flightrec window {lost}, status {status_lost}"
    );
    // Witness that both recorded the load at the rate asked (the load
    // keeps every CPU busy, and cpu-clock fires on busy CPUs): not a
    // window that is empty for having missed it.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    assert!(
        rate >= perf_rate / 2.0 && perf_rate >= f64::from(HZ) * cpus / 2.0,
        "samples taken a second of load: flightrec {rate:.0}, perf {perf_rate:.0}"
    );
    if perf_lost == 0 {
        assert_eq!(
            (lost, status_lost),
            (0, 0),
            "perf's disk ring lost nothing, the history lost {lost} samples \
             (window) and {status_lost} (status)"
        );
    }
    assert!(
        lost <= perf_lost && status_lost <= perf_lost,
        "the history lost more than perf's disk ring ({perf_lost}): {lost} samples in the \
         window, {status_lost} in status"
    );
}
