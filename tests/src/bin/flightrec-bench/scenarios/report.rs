//! Scenario `report`: `snapctl report` and `snapctl export` of a snapshot
//! taken under load (sched_switch with call chains and cpu-clock, the
//! off-CPU set), timed against `perf report --stdio` on the same file, with
//! the outputs' sizes. Run after the load stops: the tools run on an idle
//! machine, one after another.

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use super::wrap_rings_under_load;
use crate::MIB;
use crate::cli::Args;
use crate::recorder::{EventSet, Kind, Recorder, Setup};
use crate::report::{Row, Section, human_bytes, show};
use crate::stats::{Summary, ratio};

/// `perf report --stdio` of `path`, timed.
fn perf_report_secs(path: &std::path::Path) -> Result<f64> {
    let start = Instant::now();
    let out = Command::new("perf")
        .args(["report", "--stdio", "--no-children", "-i"])
        .arg(path)
        .output()
        .context("running perf report")?;
    if !out.status.success() {
        bail!("perf report: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(start.elapsed().as_secs_f64())
}

pub fn report(args: &Args, ring: u64) -> Result<Section> {
    let setup = Setup {
        events: EventSet::OffCpu,
        ..Setup::switch_and_clock(ring)
    };
    let mut snapshot_mib = Vec::new();
    let mut perf_secs = Vec::new();
    // report, pprof, collapsed: seconds and MiB.
    let mut secs: [Vec<f64>; 3] = Default::default();
    let mut mib: [Vec<f64>; 3] = Default::default();
    for _ in 0..args.runs {
        let mut recorder = Recorder::start(Kind::Flightrec, setup)?;
        let load = wrap_rings_under_load(ring)?;
        let shot = recorder.trigger_snapctl(false)?;
        drop(load);
        let work = tempfile::tempdir()?;
        snapshot_mib.push(std::fs::metadata(&shot.path)?.len() as f64 / MIB as f64);
        let path = shot.path.to_str().context("snapshot path")?.to_string();
        let outputs = [
            vec!["report".to_string(), path.clone()],
            vec![
                "export".into(),
                path.clone(),
                "--format".into(),
                "pprof".into(),
            ],
            vec![
                "export".into(),
                path.clone(),
                "--format".into(),
                "collapsed".into(),
            ],
        ];
        for (i, mut cmd) in outputs.into_iter().enumerate() {
            let out = work.path().join(format!("out-{i}"));
            cmd.extend(["-o".to_string(), out.to_str().unwrap().to_string()]);
            let argv: Vec<&str> = cmd.iter().map(String::as_str).collect();
            let (_, elapsed) = recorder.snapctl_json(&argv)?;
            secs[i].push(elapsed.as_secs_f64());
            mib[i].push(std::fs::metadata(&out)?.len() as f64 / MIB as f64);
        }
        perf_secs.push(perf_report_secs(&shot.path)?);
        recorder.stop()?;
    }
    let snap = Summary::of(&snapshot_mib);
    let perf = Summary::of(&perf_secs);
    let [report_s, pprof_s, folded_s] = secs.map(|v| Summary::of(&v));
    let [report_mib, pprof_mib, folded_mib] = mib.map(|v| Summary::of(&v));
    let timed = |metric: &str, s: Option<Summary>, target: &'static str| Row {
        metric: metric.into(),
        flightrec: show(s, " s", 2),
        perf: show(perf, " s", 2),
        ratio: ratio(s, perf),
        target,
    };
    let size = |metric: &str, s: Option<Summary>, target: &'static str| Row {
        metric: metric.into(),
        flightrec: show(s, " MiB", 1),
        perf: "-".into(),
        ratio: None,
        target,
    };
    let big = ring >= 32 * MIB;
    Ok(Section {
        title: format!(
            "Report and exports of a snapshot taken under load, {} per CPU, {} (perf column: perf report --stdio on the same file)",
            human_bytes(ring),
            EventSet::OffCpu.name()
        ),
        rows: vec![
            size("snapshot size", snap, ""),
            timed(
                "`snapctl report` → HTML page",
                report_s,
                if big { "< 5 s" } else { "" },
            ),
            size("page size", report_mib, if big { "< 20 MiB" } else { "" }),
            timed("`snapctl export --format pprof`", pprof_s, ""),
            size("pprof size", pprof_mib, ""),
            timed("`snapctl export --format collapsed`", folded_s, ""),
            size("folded stacks size", folded_mib, ""),
        ],
    })
}
