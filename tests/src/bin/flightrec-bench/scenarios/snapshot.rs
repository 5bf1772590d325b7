//! Scenarios `snapshot`: trigger → complete file under load, and what the
//! file holds.

use std::time::Duration;

use anyhow::Result;

use super::{alternate, wrap_rings_under_load};
use crate::analysis::{self, Content};
use crate::cli::Args;
use crate::recorder::{EventSet, Kind, Recorder, Setup};
use crate::report::{Row, Section, human_bytes, show};
use crate::stats::{Summary, ratio};

/// Scenarios 2 and 3: trigger → complete file under load, and what the file holds.
pub fn snapshot(args: &Args, ring: u64, events: EventSet) -> Result<Section> {
    let setup = Setup {
        events,
        ..Setup::switch_and_clock(ring)
    };
    snapshot_of(args, setup)
}

/// Scenarios 2 and 3 with both recorders configured as `setup` says.
pub fn snapshot_of(args: &Args, setup: Setup) -> Result<Section> {
    let (ring, events) = (setup.ring_bytes_per_cpu, setup.events);
    let mut signal_ms: [Vec<f64>; 2] = Default::default();
    let mut snapctl_ms = Vec::new();
    let mut contents: [Vec<Content>; 2] = Default::default();
    for run in 0..args.runs {
        for &kind in alternate(run, &[Kind::Flightrec, Kind::Perf]) {
            let mut recorder = Recorder::start(kind, setup)?;
            let load = wrap_rings_under_load(ring)?;
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
    let per_sample =
        |c: &Content| c.sample_bytes_per_cpu.values().sum::<u64>() as f64 / c.samples.max(1) as f64;
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
        title: match events {
            EventSet::SwitchAndClock => {
                format!("Snapshot under load, {} per CPU", human_bytes(ring))
            }
            _ => format!(
                "Snapshot under load, {} per CPU, {}",
                human_bytes(ring),
                events.name()
            ),
        },
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
            row("bytes per sample", &per_sample, " B", 0, ""),
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
