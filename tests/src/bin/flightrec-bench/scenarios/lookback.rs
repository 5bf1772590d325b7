//! Scenario `lookback`: how far back a dump reaches, and one taken a second
//! after it, under a light load that does not wrap 4 MiB rings in seconds
//! (`perf bench sched messaging -g 1` every 0.3 s): flightrec with the
//! lossless freeze (the default) and paused, against perf's
//! `--overwrite --switch-output`.

use std::time::Duration;

use anyhow::Result;

use super::alternate;
use crate::MIB;
use crate::analysis::analyze;
use crate::cli::Args;
use crate::recorder::{Kind, Recorder, Setup};
use crate::report::{Row, Section, human_bytes, show};
use crate::stats::{Summary, ratio};
use crate::workload::BackgroundLoad;

const RING: u64 = 4 * MIB;
/// Recording before the first dump.
const RECORDED: Duration = Duration::from_secs(8);
/// Between the two dumps.
const GAP: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    Lossless,
    Paused,
    Perf,
}

/// Spans (s) of the first dump and of the one a second later.
fn two_dumps(tool: Tool, quick: bool) -> Result<(f64, f64)> {
    let setup = Setup {
        lossless_freeze: tool != Tool::Paused,
        ..Setup::switch_and_clock(RING)
    };
    let kind = if tool == Tool::Perf {
        Kind::Perf
    } else {
        Kind::Flightrec
    };
    let mut recorder = Recorder::start(kind, setup)?;
    let load = BackgroundLoad::light()?;
    std::thread::sleep(if quick { RECORDED / 4 } else { RECORDED });
    let first = recorder.trigger_signal()?;
    std::thread::sleep(GAP);
    let second = recorder.trigger_signal()?;
    drop(load);
    let spans = (
        analyze(&first.path)?.span_ns as f64 / 1e9,
        analyze(&second.path)?.span_ns as f64 / 1e9,
    );
    recorder.stop()?;
    Ok(spans)
}

pub fn lookback(args: &Args) -> Result<Section> {
    let mut first: [Vec<f64>; 3] = Default::default();
    let mut second: [Vec<f64>; 3] = Default::default();
    let mut share: [Vec<f64>; 3] = Default::default();
    for run in 0..args.runs {
        for &tool in alternate(run, &[Tool::Lossless, Tool::Paused, Tool::Perf]) {
            let (a, b) = two_dumps(tool, args.quick)?;
            let i = tool as usize;
            first[i].push(a);
            second[i].push(b);
            share[i].push(100.0 * b / a.max(f64::MIN_POSITIVE));
        }
    }
    let summaries = |v: [Vec<f64>; 3]| v.map(|v| Summary::of(&v));
    let [first, second, share] = [first, second, share].map(summaries);
    let row = |metric: &str, s: &[Option<Summary>; 3], tool: usize, unit, p, target| Row {
        metric: metric.into(),
        flightrec: show(s[tool], unit, p),
        perf: show(s[Tool::Perf as usize], unit, p),
        ratio: ratio(s[tool], s[Tool::Perf as usize]),
        target,
    };
    let lossless = Tool::Lossless as usize;
    let paused = Tool::Paused as usize;
    Ok(Section {
        title: format!(
            "Look-back of a dump and of one {} s later, {} per CPU, light load",
            GAP.as_secs(),
            human_bytes(RING)
        ),
        rows: vec![
            row("first dump spans", &first, lossless, " s", 2, ""),
            row(
                "dump 1 s later spans",
                &second,
                lossless,
                " s",
                2,
                ">= perf",
            ),
            row("later / first", &share, lossless, "%", 0, ">= 80%"),
            row(
                "first dump spans, paused freeze",
                &first,
                paused,
                " s",
                2,
                "",
            ),
            row(
                "dump 1 s later spans, paused freeze",
                &second,
                paused,
                " s",
                2,
                "",
            ),
        ],
    })
}
