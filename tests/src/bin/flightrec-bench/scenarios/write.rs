//! Scenario `write`: SIGUSR2 → complete file under `perf bench sched
//! messaging -g N`, with the load in a cgroup of its own (as under
//! systemd, where the daemon is a service with a cgroup and a weight of
//! its own) and in the recorder's cgroup; for flightrec, where its dump
//! thread's time went (on a CPU, waiting for one, asleep) and its page
//! faults.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::write_floor::{FloorWrite, write_floor};
use super::{alternate, fill_time};
use crate::cgroup::{BenchCgroups, Placement};
use crate::cli::Args;
use crate::procfs::{ThreadCounts, thread_counts};
use crate::recorder::{Kind, Recorder, Setup};
use crate::report::{Row, Section, human_bytes, show};
use crate::stats::{Summary, ratio};
use crate::workload::BackgroundLoad;

/// The dump thread's name in flightrecd.
const DUMP_THREAD: &str = "flightrec-dump";
/// Its nice by default (`snapshot.writer_nice`).
const DUMP_THREAD_NICE: i32 = -20;

/// One flightrec dump: its dump thread's counts from the signal to the
/// complete file.
struct DumpThread {
    counts: ThreadCounts,
    elapsed: Duration,
}

/// SIGUSR2 → complete file for each ring size, both tools, under
/// `messaging -g groups` placed as `placement`.
pub fn write(args: &Args, groups: u32, placement: Placement, rings: &[u64]) -> Result<Section> {
    let cgroups = BenchCgroups::create(args.recorder_cpu_weight)?;
    let mut rows = Vec::new();
    for &ring in rings {
        let setup = Setup {
            writer_nice: args.writer_nice,
            nice: args.recorder_nice,
            ..Setup::switch_and_clock(ring)
        };
        let mut signal_ms: [Vec<f64>; 2] = Default::default();
        let mut bytes: [Vec<f64>; 2] = Default::default();
        let mut dumps = Vec::new();
        // The floor under the same load, per flightrec dump: dd's page
        // cache write and its direct write with fsync of the file's bytes.
        let mut floors: [Vec<f64>; 2] = Default::default();
        for run in 0..args.runs {
            for &kind in alternate(run, &[Kind::Flightrec, Kind::Perf]) {
                let mut recorder = Recorder::start(kind, setup)?;
                BenchCgroups::enter(&cgroups.recorder(), recorder.pid())?;
                let load = BackgroundLoad::messaging_in(groups, &cgroups.load(placement))?;
                std::thread::sleep(fill_time(ring));
                ensure_loaded(&cgroups.load(placement))?;
                let before = match kind {
                    Kind::Flightrec => Some(thread_counts(recorder.pid(), DUMP_THREAD)?),
                    Kind::Perf => None,
                };
                let shot = recorder.trigger_signal()?;
                if let Some(before) = before {
                    // Read as soon as the file is seen: the thread's time
                    // up to the rename (and the little after it).
                    let after = thread_counts(recorder.pid(), DUMP_THREAD)?;
                    dumps.push(DumpThread {
                        counts: after.since(before),
                        elapsed: shot.elapsed,
                    });
                }
                let file_bytes = std::fs::metadata(&shot.path)?.len();
                if let Kind::Flightrec = kind {
                    let dir = shot.path.parent().context("a snapshot has a directory")?;
                    let nice = args.writer_nice.unwrap_or(DUMP_THREAD_NICE);
                    for (i, how) in [FloorWrite::PageCache, FloorWrite::DirectSynced]
                        .into_iter()
                        .enumerate()
                    {
                        let took = write_floor(dir, file_bytes, how, &cgroups.recorder(), nice)?;
                        floors[i].push(took.as_secs_f64() * 1e3);
                    }
                }
                drop(load);
                signal_ms[kind as usize].push(shot.elapsed.as_secs_f64() * 1e3);
                bytes[kind as usize].push(file_bytes as f64 / 1e6);
                recorder.stop()?;
            }
        }
        let [fr, pf] = signal_ms.map(|v| Summary::of(&v));
        let size = human_bytes(ring);
        rows.push(Row {
            metric: format!("SIGUSR2 → complete file, {size}/CPU"),
            flightrec: show(fr, " ms", 1),
            perf: show(pf, " ms", 1),
            ratio: ratio(fr, pf),
            target: match placement {
                Placement::OwnCgroup => "<= 0.05",
                Placement::RecorderCgroup => "<= 0.1",
            },
        });
        let of =
            |f: &dyn Fn(&DumpThread) -> f64| Summary::of(&dumps.iter().map(f).collect::<Vec<_>>());
        let ms = |ns: u64| ns as f64 / 1e6;
        let only_flightrec = |metric: String, value: String| Row {
            metric,
            flightrec: value,
            perf: "-".into(),
            ratio: None,
            target: "",
        };
        rows.push(only_flightrec(
            format!("{size}: dump thread on a CPU / waiting for one / neither (asleep, or not yet woken)"),
            format!(
                "{} / {} / {}",
                show(of(&|d| ms(d.counts.run_ns)), " ms", 1),
                show(of(&|d| ms(d.counts.wait_ns)), " ms", 1),
                show(
                    of(&|d| {
                        (d.elapsed.as_secs_f64() * 1e3
                            - ms(d.counts.run_ns)
                            - ms(d.counts.wait_ns))
                        .max(0.0)
                    }),
                    " ms",
                    1
                ),
            ),
        ));
        rows.push(only_flightrec(
            format!("{size}: dump thread's minor page faults"),
            show(of(&|d| d.counts.minor_faults as f64), "", 0),
        ));
        for (floor, how) in floors.iter().zip([
            "to the page cache only (perf's way)",
            "with direct I/O and fsync (flightrec's way)",
        ]) {
            let floor = Summary::of(floor);
            rows.push(Row {
                metric: format!(
                    "{size}: floor, the file's bytes written by dd {how}, at the dump thread's nice in the recorder's cgroup"
                ),
                flightrec: show(floor, " ms", 1),
                perf: "-".into(),
                ratio: ratio(floor, pf),
                target: "",
            });
        }
        let [fb, pb] = bytes.map(|v| Summary::of(&v));
        rows.push(Row {
            metric: format!("{size}: file size"),
            flightrec: show(fb, " MB", 1),
            perf: show(pb, " MB", 1),
            ratio: ratio(fb, pb),
            target: "",
        });
    }
    let mut variant = String::new();
    if let Some(w) = args.recorder_cpu_weight {
        variant += &format!(", recorder's cgroup at CPU weight {w}");
    }
    if let Some(n) = args.recorder_nice {
        variant += &format!(", recorders at nice {n}");
    }
    if let Some(n) = args.writer_nice {
        variant += &format!(", flightrec's writer_nice = {n}");
    }
    Ok(Section {
        title: format!(
            "SIGUSR2 → complete file, messaging -g {groups}, {}{variant}",
            placement.name()
        ),
        rows,
    })
}

/// Fails unless the load's cgroup holds tasks: a load that could not
/// enter it would leave the recorders measured without one.
fn ensure_loaded(cgroup: &std::path::Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let procs = std::fs::read_to_string(cgroup.join("cgroup.procs"))
            .with_context(|| format!("reading {}/cgroup.procs", cgroup.display()))?;
        if procs.lines().count() > 10 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the messaging load did not start in {}", cgroup.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
