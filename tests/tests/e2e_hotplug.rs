//! End to end: a CPU that goes offline and comes back is recorded again
//! (issue 19, item 7). Cloud VMs hot-plug vCPUs; perf events of a CPU that
//! went offline never record again, so the daemon must open new rings.
//!
//! Alone in its test binary: it takes CPU 1 offline for a moment, which
//! tests running beside it would notice.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use flightrec_tests::{Daemon, perf_script, require_root};

const CPU1: &str = "/sys/devices/system/cpu/cpu1/online";

/// Puts CPU 1 back online when dropped, whatever the test did.
struct Cpu1Back;

impl Drop for Cpu1Back {
    fn drop(&mut self) {
        let _ = std::fs::write(CPU1, "1");
    }
}

fn set_cpu1(online: bool) {
    std::fs::write(CPU1, if online { "1" } else { "0" })
        .unwrap_or_else(|e| panic!("writing {CPU1}: {e}"));
}

/// CPU 1 as `snapctl status` shows it.
fn cpu1(d: &Daemon) -> serde_json::Value {
    d.json(&["status"])["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cpu"] == 1)
        .cloned()
        .unwrap_or_default()
}

/// Records of `path` on CPU 1.
fn records_on_cpu1(path: &Path) -> usize {
    perf_script(path, &["-F", "cpu"])
        .lines()
        .filter(|l| l.trim() == "[001]")
        .count()
}

struct Pinned(Child);

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_cpu_that_comes_back_online_is_recorded_again_within_2s() {
    require_root("a_cpu_that_comes_back_online_is_recorded_again_within_2s");
    if !Path::new(CPU1).exists() {
        let why = format!("{CPU1} is missing: this machine cannot take CPU 1 offline");
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("SKIPPED: {why}");
        return;
    }
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\nmin_interval = \"0s\"\n");
    let _back = Cpu1Back;
    set_cpu1(false);
    assert!(d.json(&["dump"])["path"].is_string());
    // Status marks it offline once the daemon looked (every 250 ms).
    let deadline = Instant::now() + Duration::from_secs(10);
    let offline = loop {
        let c = cpu1(&d);
        if c["online"] == false || Instant::now() > deadline {
            break c;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        offline["online"], false,
        "status never showed CPU 1 offline"
    );

    set_cpu1(true);
    let online_at = Instant::now();
    let _load = Pinned(
        Command::new("taskset")
            .args(["-c", "1", "sh", "-c", "while :; do :; done"])
            .spawn()
            .expect("taskset"),
    );
    // The witness: a dump with samples of CPU 1 (cpu-clock on its busy
    // loop, its context switches).
    let mut dumps = 0;
    let (records, took) = loop {
        let asked = online_at.elapsed();
        let path = d.json(&["dump"])["path"].as_str().unwrap().to_string();
        dumps += 1;
        let n = records_on_cpu1(Path::new(&path));
        if n > 0 {
            break (n, asked);
        }
        assert!(
            online_at.elapsed() < Duration::from_secs(10),
            "no record of CPU 1 in {dumps} dumps over 10s after it came back:\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!(
        "CPU 1 recorded again in a dump asked {took:?} after it came online ({records} records, \
         {dumps} dumps)"
    );
    assert!(
        took < Duration::from_secs(2),
        "CPU 1 recorded again only after {took:?}"
    );
    assert_eq!(cpu1(&d)["online"], true);
    let log = d.log_text();
    assert!(log.contains("CPU went offline"), "{log}");
    assert!(log.contains("CPU came online: recording it"), "{log}");
}
