//! Scenario `trigger`: how long after a trigger the rings are frozen, under
//! `perf bench sched messaging -g 4`, for SIGUSR2 and for a tracepoint
//! condition (the exec of a named program), and how long until the file is
//! complete; perf's `--switch-output` / `--switch-output-event` on the same
//! tracepoint side by side.
//!
//! Both record on CLOCK_MONOTONIC, so the freeze is read off the snapshot:
//! the newest sample in it, minus the signal's send time (taken on
//! CLOCK_MONOTONIC just before kill(2)) or minus the time of the exec
//! sample that fired the condition.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use nix::time::{ClockId, clock_gettime};

use super::alternate;
use crate::MIB;
use crate::analysis::perf_script;
use crate::cli::Args;
use crate::recorder::{Kind, Recorder, Setup};
use crate::report::{Row, Section, show};
use crate::stats::{Summary, ratio};
use crate::workload::BackgroundLoad;

/// The probe's name: short enough to be its whole comm (15 bytes).
const PROBE: &str = "frbench-probe";
const RING: u64 = MIB;

fn monotonic_ns() -> Result<u64> {
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC)?;
    Ok(t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}

/// `1234.567890123:` as nanoseconds.
fn parse_time(token: &str) -> Option<u64> {
    let t = token.strip_suffix(':')?;
    let (secs, frac) = t.split_once('.')?;
    if frac.len() != 9 {
        return None;
    }
    Some(secs.parse::<u64>().ok()? * 1_000_000_000 + frac.parse::<u64>().ok()?)
}

/// The newest sample time in `path`, and the time of the probe's exec
/// sample if there is one.
fn sample_times(path: &Path) -> Result<(u64, Option<u64>)> {
    let script = perf_script(path, &["--ns", "-F", "comm,time,event"])?;
    let mut newest = 0;
    let mut exec = None;
    for line in script.lines() {
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let Some(at) = tokens.iter().position(|t| parse_time(t).is_some()) else {
            continue;
        };
        let time = parse_time(tokens[at]).unwrap_or(0);
        newest = newest.max(time);
        if tokens.get(at + 1) == Some(&"sched:sched_process_exec:") && line.contains(PROBE) {
            exec = Some(time);
        }
    }
    if newest == 0 {
        bail!("{} holds no sample", path.display());
    }
    Ok((newest, exec))
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The nearest-rank 99th percentile.
fn p99(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = (v.len() as f64 * 0.99).ceil() as usize;
    v.get(rank.checked_sub(1)?).copied()
}

#[derive(Default)]
struct Figures {
    signal_freeze: Vec<f64>,
    exec_freeze: Vec<f64>,
    signal_file: Vec<f64>,
    exec_file: Vec<f64>,
    /// Exec-triggered snapshots, and those that still hold the exec.
    exec_shots: usize,
    exec_kept: usize,
}

pub fn trigger(args: &Args) -> Result<Section> {
    let probe_dir = tempfile::tempdir()?;
    let probe = probe_dir.path().join(PROBE);
    std::fs::copy("/bin/true", &probe).context("copying /bin/true as the probe")?;
    let setup = Setup {
        exec_trigger: Some(PROBE),
        monotonic: true,
        ..Setup::switch_and_clock(RING)
    };
    let shots = if args.quick { 5 } else { 20 };
    let mut figures: [Figures; 2] = Default::default();
    for run in 0..args.runs {
        for &kind in alternate(run, &[Kind::Flightrec, Kind::Perf]) {
            let f = &mut figures[kind as usize];
            let mut recorder = Recorder::start(kind, setup)?;
            let load = BackgroundLoad::messaging(4)?;
            std::thread::sleep(Duration::from_secs(3));
            for _ in 0..shots {
                recorder.settle(Duration::from_millis(500))?;
                let sent = monotonic_ns()?;
                // A file frozen before the signal was sent is another switch's.
                let shot = recorder.trigger_signal_until(&|p| Ok(sample_times(p)?.0 >= sent))?;
                f.signal_file.push(shot.elapsed.as_secs_f64() * 1e3);
                let (newest, _) = sample_times(&shot.path)?;
                f.signal_freeze.push(ms(newest - sent));
                recorder.settle(Duration::from_millis(500))?;

                // The exec happens after `spawned`: the first file frozen
                // after it is the exec's. perf's may no longer hold the exec
                // (its rings overwrote it before perf froze them): then
                // its freeze is counted from `spawned`, a lower bound.
                let spawned = monotonic_ns()?;
                let shot = recorder.trigger_exec(&probe, &|p| Ok(sample_times(p)?.0 >= spawned))?;
                f.exec_file.push(shot.elapsed.as_secs_f64() * 1e3);
                let (newest, exec) = sample_times(&shot.path)?;
                f.exec_shots += 1;
                if exec.is_some() {
                    f.exec_kept += 1;
                }
                f.exec_freeze
                    .push(ms(newest.saturating_sub(exec.unwrap_or(spawned))));
            }
            drop(load);
            recorder.stop()?;
        }
    }
    let [fr, pf] = &figures;
    let row = |metric: &str, pick: &dyn Fn(&Figures) -> &Vec<f64>, target: &'static str| {
        let (a, b) = (Summary::of(pick(fr)), Summary::of(pick(pf)));
        Row {
            metric: metric.into(),
            flightrec: show(a, " ms", 2),
            perf: show(b, " ms", 2),
            ratio: ratio(a, b),
            target,
        }
    };
    let p99_row = |metric: &str, pick: &dyn Fn(&Figures) -> &Vec<f64>| {
        let show_p = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2} ms"));
        let (a, b) = (p99(pick(fr)), p99(pick(pf)));
        Row {
            metric: metric.into(),
            flightrec: show_p(a),
            perf: show_p(b),
            ratio: a.zip(b).filter(|(_, b)| *b > 0.0).map(|(a, b)| a / b),
            target: "reported",
        }
    };
    Ok(Section {
        title: format!(
            "Trigger to frozen rings under `perf bench sched messaging -g 4`, 1 MiB per CPU, \
             {shots} triggers of each kind per run"
        ),
        rows: vec![
            row(
                "SIGUSR2 → rings frozen (median)",
                &|f| &f.signal_freeze,
                "<= 5 ms",
            ),
            p99_row("SIGUSR2 → rings frozen (p99)", &|f| &f.signal_freeze),
            row(
                "exec tracepoint → rings frozen (median)",
                &|f| &f.exec_freeze,
                "<= 5 ms",
            ),
            p99_row("exec tracepoint → rings frozen (p99)", &|f| {
                &f.exec_freeze
            }),
            Row {
                metric: "exec-triggered snapshots that hold the exec".into(),
                flightrec: format!("{} of {}", fr.exec_kept, fr.exec_shots),
                perf: format!("{} of {}", pf.exec_kept, pf.exec_shots),
                ratio: None,
                target: "all",
            },
            row("SIGUSR2 → complete file", &|f| &f.signal_file, ""),
            row(
                "exec → complete file (perf: --switch-output-event)",
                &|f| &f.exec_file,
                "",
            ),
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_times_parse_to_nanoseconds() {
        assert_eq!(parse_time("1234.000000567:"), Some(1_234_000_000_567));
        assert_eq!(parse_time("1234.5:"), None);
        assert_eq!(parse_time("sched:sched_switch:"), None);
    }

    #[test]
    fn p99_is_the_nearest_rank() {
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(p99(&v), Some(198.0));
        assert_eq!(p99(&[3.0]), Some(3.0));
        assert_eq!(p99(&[]), None);
    }
}
