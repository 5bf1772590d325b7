//! End to end: realtime priority is for the path from a trigger to frozen
//! rings only (issue 19, item 4). A socket-group member asking for
//! compressions at the highest zstd level must not take the CPUs from the
//! machine's own work: compressions run one at a time, niced, a few wait
//! their turn and the rest are refused.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flightrec_tests::{Daemon, Load, require_root, snapshot_id};

/// CPU time (user + system, in clock ticks) of `pid` so far.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // Fields after the command name (which may hold spaces): utime is the
    // 14th field of the line, stime the 15th.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// The share of one CPU `pid` got over `wall`.
fn cpu_share(pid: u32, wall: Duration) -> f64 {
    let ticks_per_s = 100.0; // USER_HZ
    let before = cpu_ticks(pid);
    let started = Instant::now();
    std::thread::sleep(wall);
    let ticks = cpu_ticks(pid) - before;
    ticks as f64 / ticks_per_s / started.elapsed().as_secs_f64()
}

struct BusyLoop(Child);

impl BusyLoop {
    fn start() -> Self {
        BusyLoop(
            Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .expect("spawn a busy loop"),
        )
    }
}

impl Drop for BusyLoop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn compressions_at_level_22_leave_a_normal_loop_at_least_half_its_cpu() {
    require_root("compressions_at_level_22_leave_a_normal_loop_at_least_half_its_cpu");
    const SNAPSHOTS: usize = 4;
    let d = Daemon::start(
        "[snapshot]\ncompression = \"none\"\nmin_interval = \"0s\"\n\n[retention]\nmax_snapshots = 0\n",
    );
    let text = std::fs::read_to_string(&d.config)
        .unwrap()
        .replace("per_cpu = \"256KiB\"", "per_cpu = \"4MiB\"");
    std::fs::write(&d.config, text).unwrap();
    assert!(d.snapctl(&["reload"]).status.success());
    // One snapshot big enough that a level-22 pass takes a while, and
    // copies of it under other names (the store lists any regular file of
    // its own with a snapshot's name).
    let first = {
        let _load = Load::shells(2, "while :; do ls -R /usr/share/doc >/dev/null; done");
        // The rings fill for a while: that is all the snapshot holds.
        std::thread::sleep(Duration::from_secs(2));
        let v = d.json(&["dump"]);
        eprintln!("snapshot of {} bytes", v["bytes"]);
        PathBuf::from(v["path"].as_str().unwrap())
    };
    let mut ids = vec![snapshot_id(&first)];
    for n in 1..SNAPSHOTS {
        let id = format!("{}-copy{n}", ids[0]);
        std::fs::copy(&first, d.output.join(format!("{id}.perf.data"))).unwrap();
        ids.push(id);
    }

    let busy = BusyLoop::start();
    let baseline = cpu_share(busy.0.id(), Duration::from_secs(2));
    let compress = |id: &str| {
        d.snapctl_cmd(&["compress", id, "--level", "22"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let started = Instant::now();
    let mut running: Vec<Child> = ids[..3].iter().map(|id| compress(id)).collect();
    std::thread::sleep(Duration::from_millis(300));
    // A fourth while three are running or waiting: refused at once.
    let fourth_while_busy = running[2].try_wait().unwrap().is_none();
    let fourth = compress(&ids[3]).wait_with_output().unwrap();
    let during = cpu_share(busy.0.id(), Duration::from_secs(2));
    let window_end = started.elapsed();
    let mut finished = Vec::new();
    for child in running.drain(..) {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        finished.push(started.elapsed());
    }
    let last = *finished.last().unwrap();

    eprintln!(
        "busy loop: {:.0}% of a CPU alone, {:.0}% during three level-22 compressions \
         (finished after {finished:?}; window ended at {window_end:?})",
        baseline * 100.0,
        during * 100.0
    );
    assert!(
        last > window_end,
        "the compressions were over before the measurement ended ({last:?})"
    );
    assert!(baseline > 0.5, "the loop alone got {baseline:.2} of a CPU");
    assert!(
        during >= baseline * 0.5,
        "the loop got {:.0}% of its baseline while compressions ran",
        during / baseline * 100.0
    );
    if fourth_while_busy {
        assert_eq!(fourth.status.code(), Some(1));
        assert!(
            String::from_utf8_lossy(&fourth.stderr).contains("compressions are already running"),
            "{}",
            String::from_utf8_lossy(&fourth.stderr)
        );
    }
    let list = d.list();
    let compressed = list
        .iter()
        .filter(|s| ids[..3].contains(&s["id"].as_str().unwrap().to_string()))
        .filter(|s| s["compressed"] == true)
        .count();
    assert_eq!(compressed, 3, "{list:?}");
}
