//! Scenario `history`: the past kept on disk. flightrec's `[history]`
//! (zstd level 1) against perf's ring of files (`perf record -a -z
//! --switch-output=SIZE --switch-max-files=8`), on the same events
//! (sched_switch + cpu-clock 999 Hz with call chains) and the same fixed
//! workload (`perf bench sched messaging -g 10`): the workload's slowdown,
//! the recorder's CPU per recorded CPU, records lost, disk bytes per
//! minute and how far back 1 GiB reaches. Then the load at which each
//! starts losing records: the same workload with `cpu-clock` at rising
//! frequencies. Then flightrec alone, recording under the light load for
//! `--history-minutes` (default 11): the time and peak RSS of
//! `snapctl dump --at -5m --before 10s` and of a whole 10-minute window.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::{UNDER, Under, alternate};
use crate::MIB;
use crate::cli::Args;
use crate::procfs;
use crate::recorder::{Kind, Recorder, Setup};
use crate::report::{Row, Section, show};
use crate::stats::{Summary, ratio};
use crate::workload::{BackgroundLoad, Workload};

/// The disk budget of both tools in the overhead phase.
pub(super) const BUDGET: u64 = 256 * MIB;

/// Samples perf's files say were lost (the counts of their LOST records,
/// as flightrec's history counts its own).
fn perf_lost(files: &[std::path::PathBuf]) -> Result<u64> {
    let mut lost = 0;
    for f in files {
        let (_, n) = flightrec_tests::perf_lost_samples(f).map_err(anyhow::Error::msg)?;
        lost += n;
    }
    Ok(lost)
}

pub(super) struct Phase {
    pub(super) wall: f64,
    pub(super) cpu_per_cpu: f64,
    pub(super) lost_per_min: f64,
    pub(super) bytes_per_min: f64,
    /// Records streamed per recorded CPU, MiB/s before compression
    /// (flightrec's count; 0 for perf).
    raw_mib_per_sec_per_cpu: f64,
    /// With a warm-up run: the recorder's CPU during it (% of one core
    /// per recorded CPU).
    pub(super) warm_up_cpu_per_cpu: Option<f64>,
}

/// The workload under one recorder writing its disk ring.
pub(super) fn under(kind: Kind, args: &Args, workload: Workload, setup: Setup) -> Result<Phase> {
    measure(kind, args, workload, setup, false)
}

/// As [`under`], the workload run once first and measured apart: what a
/// recorder does once per program (flightrec reads the unwind tables of
/// every file a process maps) is not counted in the measured run, as it
/// is not in the minutes of a history.
pub(super) fn under_after_warm_up(
    kind: Kind,
    args: &Args,
    workload: Workload,
    setup: Setup,
) -> Result<Phase> {
    measure(kind, args, workload, setup, true)
}

fn measure(
    kind: Kind,
    args: &Args,
    workload: Workload,
    setup: Setup,
    warm_up: bool,
) -> Result<Phase> {
    let recorder = Recorder::start(kind, setup)?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let (warm_up_wall, warm_up_cpu_per_cpu) = if warm_up {
        let cpu0 = procfs::live_threads_cpu_seconds(recorder.pid())?;
        let wall = workload.run(args.quick)?.as_secs_f64();
        let cpu1 = procfs::live_threads_cpu_seconds(recorder.pid())?;
        (wall, Some(100.0 * (cpu1 - cpu0) / wall / cpus))
    } else {
        (0.0, None)
    };
    let cpu0 = procfs::live_threads_cpu_seconds(recorder.pid())?;
    let before = history_counters(&recorder)?;
    let wall = workload.run(args.quick)?.as_secs_f64();
    // The CPU each recorder spends on the run's records, those it reads
    // and writes after the run included: flightrec's once they are on
    // the disk, perf's when it exits (it reads a ring when half of it is
    // written, and what is left when stopped).
    let (cpu1, bytes, lost, raw) = match kind {
        Kind::Flightrec => {
            // What was recorded during the run reaches the disk within a
            // second; count it.
            std::thread::sleep(Duration::from_millis(1500));
            let cpu1 = procfs::live_threads_cpu_seconds(recorder.pid())?;
            let after = history_counters(&recorder)?;
            recorder.stop()?;
            (
                cpu1,
                after.stored - before.stored,
                after.lost - before.lost,
                after.raw - before.raw,
            )
        }
        Kind::Perf => {
            let (_dir, files, cpu1) = recorder.stop_keeping_files_with_cpu()?;
            let files: Vec<_> = files.into_iter().collect();
            let bytes = files
                .iter()
                .filter_map(|f| std::fs::metadata(f).ok())
                .map(|m| m.len())
                .sum::<u64>();
            (cpu1, bytes, perf_lost(&files)?, 0)
        }
    };
    // flightrec's counters are read around the measured run; perf's
    // files and losses cover the warm-up run too.
    let minutes = match kind {
        Kind::Flightrec => wall,
        Kind::Perf => wall + warm_up_wall,
    } / 60.0;
    Ok(Phase {
        wall,
        cpu_per_cpu: 100.0 * (cpu1 - cpu0) / wall / cpus,
        lost_per_min: lost as f64 / minutes,
        bytes_per_min: bytes as f64 / minutes,
        raw_mib_per_sec_per_cpu: raw as f64 / MIB as f64 / wall / cpus,
        warm_up_cpu_per_cpu,
    })
}

#[derive(Default)]
struct Counters {
    lost: u64,
    stored: u64,
    raw: u64,
}

/// Sample records the history lost, bytes it wrote and bytes of records
/// it took (flightrec; zeros for perf).
fn history_counters(recorder: &Recorder) -> Result<Counters> {
    if recorder.kind != Kind::Flightrec {
        return Ok(Counters::default());
    }
    let (status, _) = recorder.snapctl_json(&["status"])?;
    let h = &status["history"];
    Ok(Counters {
        lost: h["lost"].as_u64().unwrap_or(0),
        stored: h["stored_bytes"].as_u64().unwrap_or(0),
        raw: h["raw_bytes"].as_u64().unwrap_or(0),
    })
}

/// The disk-ring setup of both tools, `cpu-clock` at `clock_hz`.
pub(super) fn streaming(clock_hz: Option<u32>, budget: u64) -> Setup {
    Setup {
        disk_ring: Some(budget),
        clock_hz,
        ..Setup::switch_and_clock(4 * MIB)
    }
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
                    let p = under(kind, args, workload, streaming(None, BUDGET))?;
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
    rows.extend(loss_onset(args, workload)?);
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

/// `cpu-clock` frequencies of the loss ramp (call chains on every sample).
const RAMP_HZ: [u32; 4] = [999, 4999, 19999, 49999];

/// The same workload with `cpu-clock` at rising frequencies, a 1 GiB
/// budget (no file of perf's ring is deleted before it is counted): the
/// records lost per minute by each tool at each step, and the first step
/// at which each loses any.
fn loss_onset(args: &Args, workload: Workload) -> Result<Vec<Row>> {
    // The kernel lowers its limit when sampling interrupts take too long;
    // a frequency above it is refused, so each step reads it again.
    let max_hz = || -> u32 {
        std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(u32::MAX)
    };
    let mut rows = Vec::new();
    let mut onset: [Option<u32>; 2] = [None, None];
    let mut steps = Vec::new();
    for hz in RAMP_HZ {
        if hz > max_hz() {
            eprintln!(
                "skipping {hz} Hz: above kernel.perf_event_max_sample_rate ({})",
                max_hz()
            );
            continue;
        }
        steps.push(hz);
        let mut lost: [Vec<f64>; 2] = Default::default();
        let mut walls: [Vec<f64>; 2] = Default::default();
        let mut rate = Vec::new();
        for run in 0..args.runs {
            for &mode in alternate(run, &UNDER) {
                if let Under::Tool(kind) = mode {
                    let p = under(kind, args, workload, streaming(Some(hz), 1 << 30))?;
                    lost[kind as usize].push(p.lost_per_min);
                    walls[kind as usize].push(p.wall);
                    if kind == Kind::Flightrec {
                        rate.push(p.raw_mib_per_sec_per_cpu);
                    }
                }
            }
        }
        let [fr_wall, pf_wall] = walls.map(|v| Summary::of(&v));
        rows.push(Row {
            metric: format!(
                "cpu-clock at {hz} Hz -g: workload wall time under the recorder (the kernel's \
                 sampling included)"
            ),
            ratio: ratio(fr_wall, pf_wall),
            flightrec: show(fr_wall, "s", 3),
            perf: show(pf_wall, "s", 3),
            target: "<= 1.0",
        });
        let [fr, pf] = lost.map(|v| Summary::of(&v));
        for (i, s) in [&fr, &pf].into_iter().enumerate() {
            if onset[i].is_none() && s.as_ref().is_some_and(|s| s.max > 0.0) {
                onset[i] = Some(hz);
            }
        }
        rows.push(Row {
            metric: format!(
                "cpu-clock at {hz} Hz -g ({} MiB/s of records per CPU): records lost per minute",
                show(Summary::of(&rate), "", 1)
            ),
            flightrec: show(fr, "", 0),
            perf: show(pf, "", 0),
            ratio: None,
            target: "0",
        });
    }
    let last = steps.last().copied().unwrap_or(0);
    let first_loss = |o: Option<u32>| match o {
        Some(hz) => format!("{hz} Hz"),
        None => format!("none up to {last} Hz"),
    };
    rows.push(Row {
        metric: "first cpu-clock frequency with a record lost (any run)".into(),
        flightrec: first_loss(onset[0]),
        perf: first_loss(onset[1]),
        ratio: None,
        target: "",
    });
    Ok(rows)
}

/// flightrec alone: minutes of history under the light load, then windows
/// cut from it.
fn long_history(args: &Args) -> Result<Vec<Row>> {
    let minutes = args
        .history_minutes
        .unwrap_or(if args.quick { 1 } else { 11 });
    let recorder = Recorder::start(Kind::Flightrec, streaming(None, 1 << 30))?;
    let load = BackgroundLoad::light()?;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(minutes * 60) {
        std::thread::sleep(Duration::from_secs(1));
    }
    drop(load);
    let pid = recorder.pid();
    let (rss, _) = procfs::rss_mib(pid)?;
    let back = if minutes >= 6 { "-5m" } else { "-30s" };
    procfs::reset_peak_rss(pid)?;
    let (at, at_time) = recorder.snapctl_json(&["dump", "--at", back, "--before", "10s"])?;
    let (_, at_peak) = procfs::rss_mib(pid)?;
    // A whole 10-minute window, or what a shorter run holds.
    let held = (minutes * 60).saturating_sub(5).min(600);
    procfs::reset_peak_rss(pid)?;
    let (all, all_time) =
        recorder.snapctl_json(&["dump", "--at", "-1s", "--before", &format!("{held}s")])?;
    let (after, all_peak) = procfs::rss_mib(pid)?;
    let (status, _) = recorder.snapctl_json(&["status"])?;
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
            metric: "daemon peak RSS during that dump".into(),
            flightrec: format!("{at_peak:.1} MiB"),
            perf: none(),
            ratio: None,
            target: "",
        },
        Row {
            metric: format!(
                "a dump of a whole {held} s window ({:.1} MiB, {} records)",
                mib(&all),
                all["records"]
            ),
            flightrec: show(secs(all_time), "s", 2),
            perf: none(),
            ratio: None,
            target: "",
        },
        Row {
            metric: "daemon peak RSS during that dump, and RSS after it".into(),
            flightrec: format!("{all_peak:.1} MiB, {after:.1} MiB"),
            perf: none(),
            ratio: None,
            target: "",
        },
        Row {
            metric: format!(
                "daemon RSS after {minutes} min with history on, before the dumps (history {:.1} MiB)",
                status["history"]["bytes"].as_u64().unwrap_or(0) as f64 / MIB as f64
            ),
            flightrec: format!("{rss:.1} MiB"),
            perf: none(),
            ratio: None,
            target: "",
        },
    ])
}
