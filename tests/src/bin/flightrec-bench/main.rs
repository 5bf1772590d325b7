//! flightrec-bench: flightrec side by side with perf's own flight recorder
//! (`perf record -a --overwrite --switch-output`), same events, same ring size
//! per CPU, alternating the tools run by run, printing one table of ratios.
//!
//! Run as root: `cargo run --release -p flightrec-tests --bin flightrec-bench`
//! (`-- --help` for options). Needs Debian's `linux-perf` and tracefs, as the
//! tests do (`tests/prepare-host`).

mod analysis;
mod memory;
mod procfs;
mod recorder;
mod stats;
mod workload;

use analysis::Content;
use anyhow::{Context, Result};
use clap::Parser;
use recorder::{EventSet, Kind, Recorder, Setup};
use stats::{Summary, ratio};
use std::fmt::Write as _;
use std::time::{Duration, Instant};
use workload::{BackgroundLoad, Workload};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

#[derive(Parser)]
#[command(
    name = "flightrec-bench",
    about = "flightrec vs perf record --overwrite, side by side"
)]
struct Args {
    /// Repetitions of every measurement (alternating the tools).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Shorter workloads and fewer sizes: a smoke run, not figures to quote.
    #[arg(long)]
    quick: bool,
    /// Scenarios to run (overhead, snapshot, compression, scaling, memory).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "overhead,snapshot,compression,scaling,memory"
    )]
    only: Vec<String>,
    /// Also write the results as Markdown to this file.
    #[arg(long)]
    markdown: Option<std::path::PathBuf>,
    /// Only print what a snapshot file holds (samples, bytes per CPU, span,
    /// comm resolution, compression) and exit.
    #[arg(long, value_name = "FILE")]
    analyze: Option<std::path::PathBuf>,
}

/// One line of the results table.
struct Row {
    metric: String,
    flightrec: String,
    perf: String,
    ratio: Option<f64>,
    target: &'static str,
}

struct Section {
    title: String,
    rows: Vec<Row>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(path) = &args.analyze {
        println!("{:#?}", analysis::analyze(path)?);
        return Ok(());
    }
    observe_at_realtime_priority();
    let mut sections = Vec::new();
    let wants = |s: &str| args.only.iter().any(|o| o == s);
    if wants("overhead") {
        for events in [EventSet::SwitchAndClock, EventSet::SwitchOnly] {
            for workload in [Workload::Messaging, Workload::Pipe] {
                sections.push(overhead(&args, events, workload)?);
            }
        }
    }
    if wants("snapshot") {
        let sizes: &[u64] = if args.quick {
            &[256 * KIB, 4 * MIB]
        } else {
            &[256 * KIB, 4 * MIB, 32 * MIB]
        };
        for &ring in sizes {
            sections.push(snapshot(&args, ring)?);
        }
    }
    if wants("compression") {
        sections.push(compression(&args)?);
    }
    if wants("scaling") {
        sections.push(scaling(&args)?);
    }
    if wants("memory") {
        sections.push(memory::memory(&args)?);
        sections.push(memory::dump_vs_log_fill(&args)?);
    }
    let report = render(&args, &sections);
    println!("{report}");
    if let Some(path) = &args.markdown {
        std::fs::write(path, &report).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The harness times triggers by watching for the finished file. Under the
/// load a watcher at normal priority is starved and sees files late, for
/// both tools alike; at SCHED_FIFO (reset on fork, so perf, flightrecd,
/// snapctl and the workload all start at normal priority) it sees them when
/// they appear.
fn observe_at_realtime_priority() {
    let pid = std::process::id().to_string();
    let raised = std::process::Command::new("chrt")
        .args(["--reset-on-fork", "--fifo", "--pid", "1", &pid])
        .status()
        .is_ok_and(|s| s.success());
    if !raised {
        eprintln!(
            "warning: could not raise the harness to SCHED_FIFO; trigger times include its own wake-up delays"
        );
    }
}

/// Runs `f` for each tool in an order that rotates with `run`, so neither tool
/// always runs first (warm caches, thermal drift).
fn alternate<T>(run: usize, tools: &[T]) -> Vec<&T> {
    let n = tools.len();
    (0..n).map(|i| &tools[(i + run) % n]).collect()
}

#[derive(Clone, Copy, PartialEq)]
enum Under {
    Bare,
    Tool(Kind),
}

/// Scenario 1: wall time of a fixed workload bare, under flightrecd and under
/// perf; the recorders' own CPU time and peak RSS.
fn overhead(args: &Args, events: EventSet, workload: Workload) -> Result<Section> {
    let setup = Setup {
        events,
        ring_bytes_per_cpu: 4 * MIB,
        compression: None,
    };
    let mut wall: [Vec<f64>; 3] = Default::default();
    let mut cpu_share: [Vec<f64>; 2] = Default::default();
    let mut rss: [Vec<f64>; 2] = Default::default();
    let modes = [
        Under::Bare,
        Under::Tool(Kind::Flightrec),
        Under::Tool(Kind::Perf),
    ];
    for run in 0..args.runs {
        for &mode in alternate(run, &modes) {
            match mode {
                Under::Bare => wall[0].push(workload.run(args.quick)?.as_secs_f64()),
                Under::Tool(kind) => {
                    let i = kind as usize;
                    let recorder = Recorder::start(kind, setup)?;
                    let cpu0 = procfs::cpu_seconds(recorder.pid())?;
                    let elapsed = workload.run(args.quick)?.as_secs_f64();
                    let cpu1 = procfs::cpu_seconds(recorder.pid())?;
                    wall[1 + i].push(elapsed);
                    cpu_share[i].push(100.0 * (cpu1 - cpu0) / elapsed);
                    rss[i].push(procfs::peak_rss_bytes(recorder.pid())? as f64 / MIB as f64);
                    recorder.stop()?;
                }
            }
        }
    }
    let [bare, fr, pf] = wall.map(|v| Summary::of(&v));
    let slowdown = |s: Option<Summary>| {
        ratio(s, bare)
            .map(|r| format!("{r:.3}x"))
            .unwrap_or_default()
    };
    let [fr_cpu, pf_cpu] = cpu_share.map(|v| Summary::of(&v));
    let [fr_rss, pf_rss] = rss.map(|v| Summary::of(&v));
    Ok(Section {
        title: format!(
            "Overhead: {} under {}, 4 MiB/CPU",
            workload.name(),
            events.name()
        ),
        rows: vec![
            Row {
                metric: format!("workload wall time (bare {})", show(bare, "s", 3)),
                flightrec: show(fr, "s", 3),
                perf: show(pf, "s", 3),
                ratio: ratio(fr, pf),
                target: "<= 1.0",
            },
            Row {
                metric: "slowdown vs bare".into(),
                flightrec: slowdown(fr),
                perf: slowdown(pf),
                ratio: ratio(fr, bare).zip(ratio(pf, bare)).map(|(a, b)| a / b),
                target: "<= 1.0",
            },
            Row {
                metric: "recorder CPU, % of one core".into(),
                flightrec: show(fr_cpu, "%", 2),
                perf: show(pf_cpu, "%", 2),
                ratio: ratio(fr_cpu, pf_cpu),
                target: "flightrec < 1%",
            },
            Row {
                metric: "recorder peak RSS".into(),
                flightrec: show(fr_rss, " MiB", 1),
                perf: show(pf_rss, " MiB", 1),
                ratio: ratio(fr_rss, pf_rss),
                target: "",
            },
        ],
    })
}

/// Time a ring of `ring` bytes per CPU needs to wrap under the messaging
/// load: sched_switch + cpu-clock records arrive at about 1 MiB/s per CPU
/// on the reference machine; half again for margin.
fn fill_time(ring: u64) -> Duration {
    Duration::from_millis(1500 + ring * 1500 / MIB)
}

/// Scenarios 2 and 3: trigger → complete file under load, and what the file holds.
fn snapshot(args: &Args, ring: u64) -> Result<Section> {
    let setup = Setup {
        events: EventSet::SwitchAndClock,
        ring_bytes_per_cpu: ring,
        compression: None,
    };
    let mut signal_ms: [Vec<f64>; 2] = Default::default();
    let mut snapctl_ms = Vec::new();
    let mut contents: [Vec<Content>; 2] = Default::default();
    for run in 0..args.runs {
        for &kind in alternate(run, &[Kind::Flightrec, Kind::Perf]) {
            let mut recorder = Recorder::start(kind, setup)?;
            let load = BackgroundLoad::start()?;
            std::thread::sleep(fill_time(ring));
            let shot = recorder.trigger_signal()?;
            signal_ms[kind as usize].push(shot.elapsed.as_secs_f64() * 1e3);
            if kind == Kind::Flightrec {
                std::thread::sleep(Duration::from_millis(200));
                snapctl_ms.push(recorder.trigger_snapctl(false)?.elapsed.as_secs_f64() * 1e3);
            }
            drop(load);
            contents[kind as usize].push(analysis::analyze(&shot.path)?);
            recorder.stop()?;
        }
    }
    let [fr, pf] = signal_ms.map(|v| Summary::of(&v));
    let snapctl = Summary::of(&snapctl_ms);
    let stat = |kind: Kind, f: &dyn Fn(&Content) -> f64| {
        Summary::of(&contents[kind as usize].iter().map(f).collect::<Vec<_>>())
    };
    let samples = |c: &Content| c.samples as f64;
    let ring_share = |c: &Content| 100.0 * c.min_ring_share(ring);
    let span = |c: &Content| c.span_ns as f64 / 1e6;
    let resolved = |c: &Content| 100.0 * c.resolved_share();
    let row = |metric: &str, f: &dyn Fn(&Content) -> f64, unit: &str, p: usize, target| {
        let (a, b) = (stat(Kind::Flightrec, f), stat(Kind::Perf, f));
        Row {
            metric: metric.into(),
            flightrec: show(a, unit, p),
            perf: show(b, unit, p),
            ratio: ratio(a, b),
            target,
        }
    };
    Ok(Section {
        title: format!("Snapshot under load, {} per CPU", human_bytes(ring)),
        rows: vec![
            Row {
                metric: "SIGUSR2 → complete file".into(),
                flightrec: show(fr, " ms", 1),
                perf: show(pf, " ms", 1),
                ratio: ratio(fr, pf),
                target: "<= 0.05 (20x faster)",
            },
            Row {
                metric: "`snapctl dump` → reply (file complete)".into(),
                flightrec: show(snapctl, " ms", 1),
                perf: "-".into(),
                ratio: None,
                target: "",
            },
            row("samples in the snapshot", &samples, "", 0, ""),
            row(
                "ring bytes recovered as samples (worst CPU)",
                &ring_share,
                "%",
                1,
                ">= 99%",
            ),
            row("time span covered", &span, " ms", 1, ""),
            row(
                "samples whose pid resolves to a comm",
                &resolved,
                "%",
                2,
                "100%",
            ),
        ],
    })
}

/// Scenario 4: zstd ratio and throughput, flightrec vs `perf record -z`.
fn compression(args: &Args) -> Result<Section> {
    let ring = 4 * MIB;
    let mut rows = Vec::new();
    for level in [1, 3, 9] {
        let setup = Setup {
            events: EventSet::SwitchAndClock,
            ring_bytes_per_cpu: ring,
            compression: Some(level),
        };
        let mut ratios: [Vec<f64>; 2] = Default::default();
        let mut record_ratios: [Vec<f64>; 2] = Default::default();
        let mut throughput: [Vec<f64>; 2] = Default::default();
        let mut recompress = Vec::new();
        for run in 0..args.runs {
            for &kind in alternate(run, &[Kind::Flightrec, Kind::Perf]) {
                let mut recorder = Recorder::start(kind, setup)?;
                let load = BackgroundLoad::start()?;
                std::thread::sleep(fill_time(ring));
                let shot = match kind {
                    Kind::Flightrec => recorder.trigger_snapctl(true)?,
                    Kind::Perf => recorder.trigger_signal()?,
                };
                let content = analysis::analyze(&shot.path)?;
                ratios[kind as usize].push(content.compression_ratio());
                record_ratios[kind as usize].push(content.compressed_records_ratio());
                throughput[kind as usize]
                    .push(content.record_bytes as f64 / MIB as f64 / shot.elapsed.as_secs_f64());
                if kind == Kind::Flightrec {
                    // Compressing an existing uncompressed snapshot (the
                    // Compress RPC), timed once the load is gone: under it
                    // the figure is mostly the starved client process.
                    let plain = recorder.trigger_signal()?;
                    drop(load);
                    let bytes = std::fs::metadata(&plain.path)?.len() as f64;
                    let took = recorder.compress(&plain.path, level)?;
                    recompress.push(bytes / MIB as f64 / took.as_secs_f64());
                } else {
                    drop(load);
                }
                recorder.stop()?;
            }
        }
        let [fr_ratio, pf_ratio] = ratios.map(|v| Summary::of(&v));
        let [fr_tp, pf_tp] = throughput.map(|v| Summary::of(&v));
        let [fr_records, pf_records] = record_ratios.map(|v| Summary::of(&v));
        rows.push(Row {
            metric: format!("zstd {level}: ratio of the compressed records (ring data)"),
            flightrec: show(fr_records, "x", 2),
            perf: show(pf_records, "x", 2),
            ratio: ratio(fr_records, pf_records),
            target: ">= 1.0",
        });
        rows.push(Row {
            metric: format!("zstd {level}: ratio of the whole data section"),
            flightrec: show(fr_ratio, "x", 2),
            perf: show(pf_ratio, "x", 2),
            ratio: ratio(fr_ratio, pf_ratio),
            target: "",
        });
        rows.push(Row {
            metric: format!(
                "zstd {level}: trigger → compressed file, MiB/s of records (flightrec: `snapctl dump --compress`; perf: SIGUSR2)"
            ),
            flightrec: show(fr_tp, " MiB/s", 1),
            perf: show(pf_tp, " MiB/s", 1),
            ratio: ratio(fr_tp, pf_tp),
            target: ">= 1.0",
        });
        rows.push(Row {
            metric: format!("zstd {level}: `snapctl compress` of a snapshot (no load), MiB/s"),
            flightrec: show(Summary::of(&recompress), " MiB/s", 1),
            perf: "-".into(),
            ratio: None,
            target: "",
        });
    }
    Ok(Section {
        title: "Compression, 4 MiB per CPU under load".into(),
        rows,
    })
}

/// Scenario 5: capture and pause time vs ring size, against a plain memcpy of
/// the same bytes.
fn scaling(args: &Args) -> Result<Section> {
    let sizes: &[u64] = if args.quick {
        &[64 * KIB, MIB, 16 * MIB]
    } else {
        &[64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB]
    };
    let mut rows = Vec::new();
    for &ring in sizes {
        let setup = Setup {
            events: EventSet::SwitchAndClock,
            ring_bytes_per_cpu: ring,
            compression: None,
        };
        let mut recorder = Recorder::start(Kind::Flightrec, setup)?;
        let load = BackgroundLoad::start()?;
        std::thread::sleep(fill_time(ring));
        let (mut pause_us, mut capture_us, mut memcpy_us) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.runs {
            let shot = recorder.trigger_snapctl(false)?;
            let reply = shot.reply.context("dump reply")?;
            let cpus = reply["cpus"].as_array().context("reply has no cpus")?;
            let max_pause = cpus
                .iter()
                .filter_map(|c| c["pause_ns"].as_u64())
                .max()
                .context("reply has no pause_ns")?;
            let max_bytes = cpus
                .iter()
                .filter_map(|c| c["bytes"].as_u64())
                .max()
                .unwrap_or(0);
            pause_us.push(max_pause as f64 / 1e3);
            capture_us.push(
                reply["timings"]["capture_ns"]
                    .as_u64()
                    .context("reply has no timings.capture_ns")? as f64
                    / 1e3,
            );
            memcpy_us.push(memcpy_time(max_bytes as usize).as_secs_f64() * 1e6);
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(load);
        recorder.stop()?;
        let (pause, capture, memcpy) = (
            Summary::of(&pause_us),
            Summary::of(&capture_us),
            Summary::of(&memcpy_us),
        );
        rows.push(Row {
            metric: format!(
                "{} ring: max pause per CPU / memcpy of its bytes",
                human_bytes(ring)
            ),
            flightrec: show(pause, " µs", 1),
            perf: format!("memcpy {}", show(memcpy, " µs", 1)),
            ratio: ratio(pause, memcpy),
            target: "<= 2.0",
        });
        rows.push(Row {
            metric: format!("{} ring: whole capture (all CPUs)", human_bytes(ring)),
            flightrec: show(capture, " µs", 1),
            perf: "-".into(),
            ratio: None,
            target: "linear in bytes",
        });
    }
    Ok(Section {
        title: "Scaling: capture vs ring size (flightrec; memcpy as the yardstick)".into(),
        rows,
    })
}

/// Median time of a plain memcpy of `bytes` from a buffer that is not in
/// the CPU caches, as most of a ring is not when it is frozen.
fn memcpy_time(bytes: usize) -> Duration {
    let src = vec![0x5au8; bytes.max(1)];
    let mut dst = vec![0u8; bytes.max(1)];
    let mut evict = vec![0u8; 64 * MIB as usize];
    let mut times: Vec<f64> = (0..7)
        .map(|round| {
            evict.iter_mut().step_by(64).for_each(|b| *b = round as u8);
            std::hint::black_box(&evict);
            let start = Instant::now();
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&dst);
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    Duration::from_secs_f64(times[times.len() / 2])
}

fn show(s: Option<Summary>, unit: &str, precision: usize) -> String {
    s.map(|s| s.show(unit, precision))
        .unwrap_or_else(|| "-".into())
}

fn human_bytes(b: u64) -> String {
    if b >= MIB {
        format!("{} MiB", b / MIB)
    } else {
        format!("{} KiB", b / KIB)
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let run = |cmd: &str, args: &[&str]| {
        std::process::Command::new(cmd)
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    format!(
        "{} CPUs ({cpu}), Linux {}, {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        run("uname", &["-r"]),
        run("perf", &["--version"])
    )
}

fn render(args: &Args, sections: &[Section]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Machine: {}", machine());
    let _ = writeln!(
        out,
        "Runs per measurement: {}{}; figures are median (min–max); ratio = flightrec / perf.\n\
         The harness watches for finished files at SCHED_FIFO 1 (reset on fork: both recorders \
         and the workloads run at normal priority).\n",
        args.runs,
        if args.quick { " (quick mode)" } else { "" }
    );
    for section in sections {
        let _ = writeln!(out, "### {}\n", section.title);
        let _ = writeln!(out, "| metric | flightrec | perf | ratio | target |");
        let _ = writeln!(out, "|---|---|---|---|---|");
        for row in &section.rows {
            let ratio = row
                .ratio
                .map(|r| format!("{r:.3}"))
                .unwrap_or_else(|| "-".into());
            let _ = writeln!(
                out,
                "| {} | {} | {} | {ratio} | {} |",
                row.metric, row.flightrec, row.perf, row.target
            );
        }
        let _ = writeln!(out);
    }
    out
}
