//! Scenario `memory`: the recorders' RSS idle, after 100 dumps and under an
//! unprivileged fork storm over many executable maps (issue 9); and
//! flightrec's capture time against the tracking log's fill.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{alternate, wrap_rings_under_load};
use crate::MIB;
use crate::cli::Args;
use crate::procfs::{reset_peak_rss, rss_mib};
use crate::recorder::{Kind, Recorder, Setup};
use crate::report::{Row, Section, show};
use crate::stats::{Summary, ratio};

/// nobody: the storm needs no privilege.
const NOBODY: u32 = 65534;
const STORM_MAPS: usize = 2000;
const STORM_FORKS: usize = 3000;
const DUMPS: usize = 100;

/// Maps and unmaps one executable page `argv[1]` times: an MMAP2 record
/// each, to fill the tracking log.
const FILLER: &str = r#"
import mmap, os, sys
fd = os.open(sys.executable, os.O_RDONLY)
for _ in range(int(sys.argv[1])):
    mmap.mmap(fd, 4096, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_EXEC).close()
"#;

fn python(script: &str, args: &[String]) -> Command {
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(script)
        .args(args)
        .uid(NOBODY)
        .gid(NOBODY)
        .current_dir("/");
    cmd
}

/// The storm's parent, kept alive (with its maps) until dropped.
struct Storm(Child);

impl Storm {
    fn run() -> Result<Self> {
        let mut child = python(
            flightrec_tests::FORK_STORM_PY,
            &[
                STORM_MAPS.to_string(),
                STORM_FORKS.to_string(),
                "exit".into(),
            ],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the fork storm (python3 as nobody)")?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("storm stdout")?).read_line(&mut line)?;
        if line.trim() != format!("ready {STORM_MAPS}") {
            bail!("the fork storm failed: {line:?}");
        }
        Ok(Self(child))
    }
}

impl Drop for Storm {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn dump(recorder: &mut Recorder) -> Result<Option<f64>> {
    Ok(match recorder.kind {
        Kind::Flightrec => {
            let shot = recorder.trigger_snapctl(false)?;
            Some(shot.capture_ns()? as f64 / 1e6)
        }
        Kind::Perf => {
            let shot = recorder.trigger_signal()?;
            // perf keeps every dump; they are not what is measured.
            let _ = std::fs::remove_file(&shot.path);
            None
        }
    })
}

/// RSS figures of one recorder run.
#[derive(Default)]
struct Figures {
    idle: Vec<f64>,
    after_dumps: Vec<f64>,
    peak_dumps: Vec<f64>,
    after_storm: Vec<f64>,
    storm_dump_growth: Vec<f64>,
    storm_dump_capture_ms: Vec<f64>,
}

/// RSS idle, after 100 dumps, after the storm and across the dump after it.
pub fn memory(args: &Args) -> Result<Section> {
    let ring = 4 * MIB;
    let setup = Setup::switch_and_clock(ring);
    let mut figures: [Figures; 2] = Default::default();
    for run in 0..args.runs {
        for &kind in alternate(run, &[Kind::Flightrec, Kind::Perf]) {
            let f = &mut figures[kind as usize];
            let mut recorder = Recorder::start(kind, setup)?;
            let pid = recorder.pid();
            std::thread::sleep(Duration::from_secs(2));
            f.idle.push(rss_mib(pid)?.0);
            reset_peak_rss(pid)?;
            for _ in 0..DUMPS {
                dump(&mut recorder)?;
            }
            let (now, peak) = rss_mib(pid)?;
            f.after_dumps.push(now);
            f.peak_dumps.push(peak);

            let storm = Storm::run()?;
            std::thread::sleep(Duration::from_secs(1));
            let (after_storm, _) = rss_mib(pid)?;
            f.after_storm.push(after_storm);
            // Move the sample rings past the storm, so the dump's window
            // starts after it and has to rebuild the state it left.
            let load = wrap_rings_under_load(ring)?;
            drop(load);
            let (before, _) = rss_mib(pid)?;
            reset_peak_rss(pid)?;
            if let Some(ms) = dump(&mut recorder)? {
                f.storm_dump_capture_ms.push(ms);
            }
            let (_, peak) = rss_mib(pid)?;
            f.storm_dump_growth.push((peak - before).max(0.0));
            drop(storm);
            recorder.stop()?;
        }
    }
    let [fr, pf] = figures;
    let row = |metric: &str, a: &[f64], b: &[f64], target: &'static str| {
        let (a, b) = (Summary::of(a), Summary::of(b));
        Row {
            metric: metric.into(),
            flightrec: show(a, " MiB", 1),
            perf: show(b, " MiB", 1),
            ratio: ratio(a, b),
            target,
        }
    };
    Ok(Section {
        title: "Memory: RSS idle, after dumps and under a fork storm \
                (sched_switch+cpu-clock/999Hz -g, 4 MiB/CPU, 64 MiB tracking log)"
            .into(),
        rows: vec![
            row("RSS idle (2 s after start)", &fr.idle, &pf.idle, ""),
            row(
                &format!("RSS after {DUMPS} dumps"),
                &fr.after_dumps,
                &pf.after_dumps,
                "",
            ),
            row(
                &format!("peak RSS during {DUMPS} dumps"),
                &fr.peak_dumps,
                &pf.peak_dumps,
                "",
            ),
            row(
                &format!(
                    "RSS after a storm by nobody ({STORM_MAPS} exec maps, {STORM_FORKS} forks)"
                ),
                &fr.after_storm,
                &pf.after_storm,
                "",
            ),
            row(
                "peak RSS growth across the dump after the storm",
                &fr.storm_dump_growth,
                &pf.storm_dump_growth,
                "flightrec < 64 MiB",
            ),
            Row {
                metric: "capture time of that dump".into(),
                flightrec: show(Summary::of(&fr.storm_dump_capture_ms), " ms", 1),
                perf: "-".into(),
                ratio: None,
                target: "",
            },
        ],
    })
}

/// Fills the daemon's tracking log until `done(status.tracking)` says so.
fn fill_log(recorder: &Recorder, done: &dyn Fn(&serde_json::Value) -> bool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let status = recorder.status()?;
        if done(&status["tracking"]) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the tracking log did not fill: {status}");
        }
        let ok = python(FILLER, &["20000".to_string()]).status()?;
        if !ok.success() {
            bail!("the log filler failed: {ok}");
        }
    }
}

/// Capture time with the tracking log empty (fresh), half and full.
pub fn dump_vs_log_fill(args: &Args) -> Result<Section> {
    let ring = 256 * 1024;
    let setup = Setup::switch_and_clock(ring);
    type Fill = (&'static str, fn(&serde_json::Value) -> bool);
    let levels: [Fill; 3] = [
        ("empty (fresh daemon)", |_| true),
        ("half", |t| {
            t["log_used_bytes"].as_u64() >= t["log_capacity_bytes"].as_u64().map(|c| c / 2)
        }),
        ("full (records evicted)", |t| {
            t["evicted_records"].as_u64().unwrap_or(0) > 0
        }),
    ];
    let mut rows = Vec::new();
    for (name, done) in levels {
        let mut capture_ms = Vec::new();
        let mut used_mib = Vec::new();
        for _ in 0..args.runs {
            let mut recorder = Recorder::start(Kind::Flightrec, setup)?;
            fill_log(&recorder, &done)?;
            used_mib.push(
                recorder.status()?["tracking"]["log_used_bytes"]
                    .as_u64()
                    .unwrap_or(0) as f64
                    / MIB as f64,
            );
            // The window starts after the fill: what a dump costs besides
            // its own window.
            let load = wrap_rings_under_load(ring)?;
            for _ in 0..5 {
                if let Some(ms) = dump(&mut recorder)? {
                    capture_ms.push(ms);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            drop(load);
            recorder.stop()?;
        }
        rows.push(Row {
            metric: format!(
                "capture time, log {name}: {} used",
                show(Summary::of(&used_mib), " MiB", 1)
            ),
            flightrec: show(Summary::of(&capture_ms), " ms", 2),
            perf: "-".into(),
            ratio: None,
            target: "flat in log fill",
        });
    }
    Ok(Section {
        title: "Dump time vs tracking-log fill (64 MiB log, 256 KiB/CPU, under load)".into(),
        rows,
    })
}
