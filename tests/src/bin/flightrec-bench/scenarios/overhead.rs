//! Scenario `overhead`: wall time of a fixed workload bare, under
//! flightrecd and under perf; the recorders' own CPU time and peak RSS.

use anyhow::Result;

use super::{UNDER, Under, alternate};
use crate::MIB;
use crate::cli::Args;
use crate::procfs;
use crate::recorder::{EventSet, Recorder, Setup};
use crate::report::{Row, Section, human_bytes, show};
use crate::stats::{Summary, ratio};
use crate::workload::Workload;

/// Scenario 1: wall time of a fixed workload bare, under flightrecd and under
/// perf; the recorders' own CPU time and peak RSS.
pub fn overhead(args: &Args, events: EventSet, workload: Workload) -> Result<Section> {
    let setup = Setup {
        events,
        ..Setup::switch_and_clock(4 * MIB)
    };
    overhead_of(args, setup, workload)
}

/// Scenario 1 with both recorders configured as `setup` says.
pub fn overhead_of(args: &Args, setup: Setup, workload: Workload) -> Result<Section> {
    let events = setup.events;
    let mut wall: [Vec<f64>; 3] = Default::default();
    let mut cpu_share: [Vec<f64>; 2] = Default::default();
    let mut rss: [Vec<f64>; 2] = Default::default();
    for run in 0..args.runs {
        for &mode in alternate(run, &UNDER) {
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
    let [fr_cpu, pf_cpu] = cpu_share.map(|v| Summary::of(&v));
    let [fr_rss, pf_rss] = rss.map(|v| Summary::of(&v));
    Ok(Section {
        title: format!(
            "Overhead: {} under {}, {}/CPU",
            workload.name(),
            events.name(),
            human_bytes(setup.ring_bytes_per_cpu)
        ),
        rows: super::wall_time_rows(bare, fr, pf)
            .into_iter()
            .chain([
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
            ])
            .collect(),
    })
}
