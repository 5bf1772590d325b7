//! Scenario `history-dwarf`: minutes of stacks unwound by DWARF tables.
//! The history's disk and CPU with `callchain = "dwarf"` (8 KiB stack
//! copies, unwound by the daemon's history writer into call chains before
//! they are written) against the same history with frame-pointer chains,
//! and both against perf's ring of files with `--call-graph dwarf` (the
//! copies written as they are) and `--call-graph fp`, on the same fixed
//! workload (`perf bench sched messaging -g 10`), run once after each
//! recorder starts before the measured run (the first run's CPU is shown
//! apart: it reads every mapped file's unwind tables). The goal:
//! dwarf-quality stacks at no more than twice the disk and CPU of
//! frame-pointer ones over a history's minutes.

use anyhow::Result;

use super::history::{BUDGET, Phase, streaming, under_after_warm_up};
use super::{UNDER, Under, alternate};
use crate::MIB;
use crate::cli::Args;
use crate::recorder::{EventSet, Kind, Setup};
use crate::report::{Row, Section, show};
use crate::stats::{Summary, ratio};
use crate::workload::Workload;

fn setup(dwarf: bool) -> Setup {
    let mut s = streaming(None, BUDGET);
    if dwarf {
        s.events = EventSet::SwitchAndClockDwarf;
        // Stack copies fill a ring ~50 times as fast as chains.
        s.ring_bytes_per_cpu = 16 * MIB;
    }
    s
}

pub fn history_dwarf(args: &Args) -> Result<Section> {
    let workload = Workload::Messaging;
    // [fp, dwarf] x [flightrec, perf]
    let mut phases: [[Vec<Phase>; 2]; 2] = Default::default();
    let mut bare = Vec::new();
    for run in 0..args.runs {
        for dwarf in [false, true] {
            for &mode in alternate(run, &UNDER) {
                match mode {
                    Under::Bare => {
                        if !dwarf {
                            bare.push(workload.run(args.quick)?.as_secs_f64());
                        }
                    }
                    Under::Tool(kind) => {
                        let p = under_after_warm_up(kind, args, workload, setup(dwarf))?;
                        phases[usize::from(dwarf)][kind as usize].push(p);
                    }
                }
            }
        }
    }
    let of = |dwarf: bool, kind: Kind, f: fn(&Phase) -> f64| {
        Summary::of(
            &phases[usize::from(dwarf)][kind as usize]
                .iter()
                .map(f)
                .collect::<Vec<_>>(),
        )
    };
    let bare = Summary::of(&bare);
    let mut rows = Vec::new();
    type Metric = (&'static str, fn(&Phase) -> f64, &'static str, usize);
    let metrics: [Metric; 5] = [
        ("workload wall time", |p| p.wall, "s", 3),
        (
            "recorder CPU, % of one core per recorded CPU",
            |p| p.cpu_per_cpu,
            "%",
            2,
        ),
        (
            "recorder CPU in the first run after start (tables read), %",
            |p| p.warm_up_cpu_per_cpu.unwrap_or(f64::NAN),
            "%",
            2,
        ),
        (
            "disk per minute of history",
            |p| p.bytes_per_min / MIB as f64,
            " MiB",
            1,
        ),
        ("samples lost per minute", |p| p.lost_per_min, "", 0),
    ];
    for (name, f, unit, digits) in metrics {
        for dwarf in [false, true] {
            let (fr, pf) = (of(dwarf, Kind::Flightrec, f), of(dwarf, Kind::Perf, f));
            rows.push(Row {
                metric: format!("{}: {name}", if dwarf { "dwarf" } else { "fp" }),
                flightrec: show(fr, unit, digits),
                perf: show(pf, unit, digits),
                ratio: ratio(fr, pf),
                target: "",
            });
        }
        // Each tool's dwarf against its own frame pointers.
        let (fr_fp, fr_dw) = (of(false, Kind::Flightrec, f), of(true, Kind::Flightrec, f));
        let (pf_fp, pf_dw) = (of(false, Kind::Perf, f), of(true, Kind::Perf, f));
        let times = |r: Option<f64>| r.map(|r| format!("{r:.2}x")).unwrap_or_default();
        rows.push(Row {
            metric: format!("dwarf / fp: {name}"),
            flightrec: times(ratio(fr_dw, fr_fp)),
            perf: times(ratio(pf_dw, pf_fp)),
            ratio: None,
            target: if name.starts_with("samples") || name.contains("first run") {
                ""
            } else {
                "flightrec <= 2.0"
            },
        });
    }
    Ok(Section {
        title: format!(
            "History with DWARF stacks: {} (bare {}) under sched_switch + cpu-clock 999 Hz, \
             --call-graph dwarf (8 KiB copies) against fp, {} MiB budget",
            workload.name(),
            show(bare, "s", 3),
            BUDGET / MIB
        ),
        rows,
    })
}
