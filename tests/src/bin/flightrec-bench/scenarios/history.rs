//! Scenario `history`: the past kept on disk. flightrec's `[history]`
//! (zstd level 1) against perf's ring of files (`perf record -a -z
//! --switch-output=SIZE --switch-max-files=8`), on the same events
//! (sched_switch + cpu-clock 999 Hz with call chains) and the same fixed
//! workload (`perf bench sched messaging -g 10`): the workload's slowdown,
//! the recorder's CPU per recorded CPU, records lost, disk bytes per
//! minute and how far back 1 GiB reaches. Then flightrec alone, recording
//! under the light load for `--history-minutes` (default 6): the time of
//! `snapctl dump --at -5m --before 10s` and of a dump of everything the
//! history holds, and the daemon's RSS.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{UNDER, Under, alternate};
use crate::MIB;
use crate::cli::Args;
use crate::procfs;
use crate::recorder::{Kind, Recorder, Setup};
use crate::report::{Row, Section, show};
use crate::stats::{Summary, ratio};
use crate::workload::{BackgroundLoad, Workload};

/// The disk budget of both tools in the overhead phase.
const BUDGET: u64 = 256 * MIB;

/// LOST records of perf's files (`perf report --stats`).
fn perf_lost(files: &[std::path::PathBuf]) -> Result<u64> {
    let mut lost = 0;
    for f in files {
        let out = Command::new("perf")
            .args(["report", "--stats", "-i"])
            .arg(f)
            .output()
            .context("perf report --stats")?;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let line = line.trim();
            if line.starts_with("LOST events:") {
                lost += line
                    .split_whitespace()
                    .nth(2)
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    Ok(lost)
}

struct Phase {
    wall: f64,
    cpu_per_cpu: f64,
    lost_per_min: f64,
    bytes_per_min: f64,
}

/// The workload under one recorder writing its disk ring.
fn under(kind: Kind, args: &Args, workload: Workload) -> Result<Phase> {
    let setup = Setup {
        disk_ring: Some(BUDGET),
        ..Setup::switch_and_clock(4 * MIB)
    };
    let recorder = Recorder::start(kind, setup)?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let cpu0 = procfs::cpu_seconds(recorder.pid())?;
    let (lost0, stored0) = history_counters(&recorder)?;
    let wall = workload.run(args.quick)?.as_secs_f64();
    let cpu1 = procfs::cpu_seconds(recorder.pid())?;
    let (bytes, lost) = match kind {
        Kind::Flightrec => {
            // What was recorded during the run reaches the disk within a
            // second; count it.
            std::thread::sleep(Duration::from_millis(1500));
            let (lost1, stored1) = history_counters(&recorder)?;
            recorder.stop()?;
            (stored1 - stored0, lost1 - lost0)
        }
        Kind::Perf => {
            let (_dir, files) = recorder.stop_keeping_files()?;
            let files: Vec<_> = files.into_iter().collect();
            let bytes = files
                .iter()
                .filter_map(|f| std::fs::metadata(f).ok())
                .map(|m| m.len())
                .sum::<u64>();
            (bytes, perf_lost(&files)?)
        }
    };
    let minutes = wall / 60.0;
    Ok(Phase {
        wall,
        cpu_per_cpu: 100.0 * (cpu1 - cpu0) / wall / cpus,
        lost_per_min: lost as f64 / minutes,
        bytes_per_min: bytes as f64 / minutes,
    })
}

/// Sample records the history lost and bytes it wrote (flightrec; zeros
/// for perf).
fn history_counters(recorder: &Recorder) -> Result<(u64, u64)> {
    if recorder.kind != Kind::Flightrec {
        return Ok((0, 0));
    }
    let (status, _) = recorder.snapctl_json(&["status"])?;
    let h = &status["history"];
    Ok((
        h["lost"].as_u64().unwrap_or(0),
        h["stored_bytes"].as_u64().unwrap_or(0),
    ))
}

pub fn history(args: &Args) -> Result<Section> {
    let workload = Workload::Messaging;
    let mut wall: [Vec<f64>; 3] = Default::default();
    let mut cpu: [Vec<f64>; 2] = Default::default();
    let mut lost: [Vec<f64>; 2] = Default::default();
    let mut bytes: [Vec<f64>; 2] = Default::default();
    for run in 0..args.runs {
        for &mode in alternate(run, &UNDER) {
            match mode {
                Under::Bare => wall[0].push(workload.run(args.quick)?.as_secs_f64()),
                Under::Tool(kind) => {
                    let i = kind as usize;
                    let p = under(kind, args, workload)?;
                    wall[1 + i].push(p.wall);
                    cpu[i].push(p.cpu_per_cpu);
                    lost[i].push(p.lost_per_min);
                    bytes[i].push(p.bytes_per_min / MIB as f64);
                }
            }
        }
    }
    let [bare, fr, pf] = wall.map(|v| Summary::of(&v));
    let [fr_cpu, pf_cpu] = cpu.map(|v| Summary::of(&v));
    let [fr_lost, pf_lost] = lost.map(|v| Summary::of(&v));
    let [fr_bytes, pf_bytes] = bytes.map(|v| Summary::of(&v));
    let reach = |s: Option<Summary>| {
        s.filter(|s| s.median > 0.0)
            .map(|s| format!("{:.1} min", 1024.0 / s.median))
            .unwrap_or_default()
    };
    let mut rows: Vec<Row> = super::wall_time_rows(bare, fr, pf).into();
    rows.extend([
        Row {
            metric: "recorder CPU, % of one core per recorded CPU".into(),
            flightrec: show(fr_cpu, "%", 2),
            perf: show(pf_cpu, "%", 2),
            ratio: ratio(fr_cpu, pf_cpu),
            target: "flightrec < 1%",
        },
        Row {
            metric: "records lost per minute while streaming".into(),
            flightrec: show(fr_lost, "", 0),
            perf: show(pf_lost, "", 0),
            ratio: None,
            target: "0",
        },
        Row {
            metric: "disk per minute of history".into(),
            flightrec: show(fr_bytes, " MiB", 1),
            perf: show(pf_bytes, " MiB", 1),
            ratio: ratio(fr_bytes, pf_bytes),
            target: "",
        },
        Row {
            metric: "how far back 1 GiB reaches".into(),
            flightrec: reach(fr_bytes),
            perf: reach(pf_bytes),
            ratio: ratio(pf_bytes, fr_bytes),
            target: ">= 1.0",
        },
    ]);
    rows.extend(long_history(args)?);
    Ok(Section {
        title: format!(
            "History on disk: {} under sched_switch + cpu-clock 999 Hz -g, {} MiB budget",
            workload.name(),
            BUDGET / MIB
        ),
        rows,
    })
}

/// flightrec alone: minutes of history under the light load, then windows
/// cut from it.
fn long_history(args: &Args) -> Result<Vec<Row>> {
    let minutes = args
        .history_minutes
        .unwrap_or(if args.quick { 1 } else { 6 });
    let setup = Setup {
        disk_ring: Some(1 << 30),
        ..Setup::switch_and_clock(4 * MIB)
    };
    let recorder = Recorder::start(Kind::Flightrec, setup)?;
    let load = BackgroundLoad::light()?;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(minutes * 60) {
        std::thread::sleep(Duration::from_secs(1));
    }
    drop(load);
    let back = if minutes >= 6 { "-5m" } else { "-30s" };
    let (at, at_time) = recorder.snapctl_json(&["dump", "--at", back, "--before", "10s"])?;
    let held = minutes * 60 - 5;
    let (all, all_time) =
        recorder.snapctl_json(&["dump", "--at", "-1s", "--before", &format!("{held}s")])?;
    let (status, _) = recorder.snapctl_json(&["status"])?;
    let (rss, peak) = procfs::rss_mib(recorder.pid())?;
    recorder.stop()?;
    let secs = |d: Duration| Summary::of(&[d.as_secs_f64()]);
    let mib = |v: &serde_json::Value| v["bytes"].as_u64().unwrap_or(0) as f64 / MIB as f64;
    let none = String::new;
    Ok(vec![
        Row {
            metric: format!(
                "`dump --at {back} --before 10s` to a complete file ({:.1} MiB)",
                mib(&at)
            ),
            flightrec: show(secs(at_time), "s", 2),
            perf: none(),
            ratio: None,
            target: "",
        },
        Row {
            metric: format!(
                "a dump of the {held} s the history holds ({:.1} MiB, {} records)",
                mib(&all),
                all["records"]
            ),
            flightrec: show(secs(all_time), "s", 2),
            perf: none(),
            ratio: None,
            target: "",
        },
        Row {
            metric: format!(
                "daemon RSS after {minutes} min with history on (peak), history {:.1} MiB",
                status["history"]["bytes"].as_u64().unwrap_or(0) as f64 / MIB as f64
            ),
            flightrec: format!("{rss:.1} MiB ({peak:.1})"),
            perf: none(),
            ratio: None,
            target: "",
        },
    ])
}
