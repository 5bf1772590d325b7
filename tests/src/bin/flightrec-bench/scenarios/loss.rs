//! Scenario `loss`: samples the kernel drops per dump, flightrec (with and
//! without the lossless freeze) against perf's `--switch-output`, under the
//! same load, and the memory the lossless freeze costs.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::{alternate, wrap_rings_under_load};
use crate::MIB;
use crate::cli::Args;
use crate::procfs::{rss_mib, status_mib};
use crate::recorder::{Kind, Recorder, Setup};
use crate::report::{Row, Section, human_bytes, show};
use crate::stats::{Summary, ratio};

const RING: u64 = 4 * MIB;
/// Time between two SIGUSR2 (after the previous file is complete).
const SPACING: Duration = Duration::from_millis(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    Lossless,
    Paused,
    Perf,
}

/// The `lost samples :N` of every PERF_RECORD_LOST_SAMPLES in `path`:
/// perf writes the kernel's per-event lost counters there at exit.
fn lost_samples_records(path: &Path) -> Result<u64> {
    let out = Command::new("perf")
        .args(["script", "-D", "-i"])
        .arg(path)
        .output()
        .context("running perf script -D")?;
    if !out.status.success() {
        bail!(
            "perf script -D -i {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut total = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if line.contains("PERF_RECORD_LOST_SAMPLES")
            && let Some((_, n)) = line.rsplit_once(':')
        {
            total += n.trim().parse::<u64>().unwrap_or(0);
        }
    }
    Ok(total)
}

/// flightrec's kernel loss counters, summed over CPUs (`snapctl status`).
fn flightrec_lost(recorder: &Recorder) -> Result<u64> {
    let status = recorder.status()?;
    let cpus = status["cpus"].as_array().context("status has no cpus")?;
    Ok(cpus.iter().filter_map(|c| c["lost_samples"].as_u64()).sum())
}

/// Per dump: samples lost (the kernel's counters), and for flightrec the
/// daemon's RSS and pinned memory after the dumps.
pub fn loss(args: &Args) -> Result<Section> {
    let dumps = if args.quick { 3 } else { 10 };
    let mut lost: [Vec<f64>; 3] = Default::default();
    let mut rss: [Vec<f64>; 2] = Default::default();
    let mut pinned: [Vec<f64>; 2] = Default::default();
    for run in 0..args.runs {
        for &tool in alternate(run, &[Tool::Lossless, Tool::Paused, Tool::Perf]) {
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
            let load = wrap_rings_under_load(RING)?;
            for _ in 0..dumps {
                recorder.trigger_signal()?;
                std::thread::sleep(SPACING);
            }
            let i = tool as usize;
            if kind == Kind::Flightrec {
                lost[i].push(flightrec_lost(&recorder)? as f64 / dumps as f64);
                rss[i].push(rss_mib(recorder.pid())?.0);
                pinned[i].push(status_mib(recorder.pid(), "VmPin")?);
            }
            drop(load);
            let (_dir, files) = recorder.stop_keeping_files()?;
            if kind == Kind::Perf {
                // Its last file, written at exit, carries the counters;
                // the exit drains the rings once more: dumps + 1 pauses.
                let last = files.iter().next_back().context("perf wrote no file")?;
                lost[i].push(lost_samples_records(last)? as f64 / (dumps + 1) as f64);
            }
        }
    }
    let [lossless, paused, perf] = lost.map(|v| Summary::of(&v));
    let [rss_lossless, rss_paused] = rss.map(|v| Summary::of(&v));
    let [pin_lossless, pin_paused] = pinned.map(|v| Summary::of(&v));
    let row = |metric: String, a, b, unit, p, target| Row {
        metric,
        flightrec: show(a, unit, p),
        perf: show(b, unit, p),
        ratio: ratio(a, b),
        target,
    };
    Ok(Section {
        title: format!(
            "Samples lost per dump under load, {} per CPU, {dumps} SIGUSR2 dumps per run",
            human_bytes(RING)
        ),
        rows: vec![
            row(
                "samples lost per dump, lossless freeze (default)".into(),
                lossless,
                perf,
                "",
                1,
                "0",
            ),
            row(
                "samples lost per dump, `lossless_freeze = false` (paused)".into(),
                paused,
                perf,
                "",
                1,
                "",
            ),
            row(
                "flightrecd RSS, lossless vs paused (perf column)".into(),
                rss_lossless,
                rss_paused,
                " MiB",
                1,
                "",
            ),
            row(
                "flightrecd VmPin, lossless vs paused (perf column)".into(),
                pin_lossless,
                pin_paused,
                " MiB",
                1,
                "",
            ),
        ],
    })
}
