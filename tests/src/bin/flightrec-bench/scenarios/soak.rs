//! Scenario `soak`: both recorders side by side for a long run (20 minutes,
//! 2 with `--quick`) on the default configuration (4 MiB per CPU, a 64 MiB
//! tracking log), under a light messaging load plus a steady churn of short
//! processes that fills the tracking log, with a dump every 3 s: the RSS
//! over time and at the end, against the goal of at most 1.5 x
//! `buffers.tracking_log` plus the rings' copy buffers. With
//! `--soak-history` flightrec keeps its `[history]` too, in a budget small
//! enough that segments are dropped as it runs, and the goal grows by
//! what the history's queue may hold.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::MIB;
use crate::cli::Args;
use crate::procfs::rss_mib;
use crate::recorder::{Kind, Recorder, Setup};
use crate::report::{Row, Section};
use crate::workload::BackgroundLoad;

/// The daemon's default tracking log and per-CPU ring.
const TRACKING_LOG: u64 = 64 * MIB;
const RING: u64 = 4 * MIB;
const DUMP_EVERY: Duration = Duration::from_secs(3);
const SAMPLE_EVERY: Duration = Duration::from_secs(60);
/// `--soak-history`'s budget: about 8 minutes of this load, so the
/// oldest segments go well before the end.
const HISTORY_BUDGET: u64 = 64 * MIB;
/// What the history's queue may keep for rings of `rings` bytes together:
/// up to twice their bytes, at least 16 MiB, and up to 16 MiB of spare
/// buffers (the daemon's `history::queue_memory_bound`, which a test
/// below holds this to; the bench does not link the daemon).
fn history_queue_bound(rings: u64) -> u64 {
    (2 * rings).max(16 * MIB) + 16 * MIB
}

/// Short processes, each exec'ing a program with a dozen libraries: the
/// COMM, MMAP2 and EXIT records that fill the tracking log.
struct Churn(Child);

impl Churn {
    fn start() -> Result<Self> {
        use std::os::unix::process::CommandExt;
        Ok(Churn(
            Command::new("sh")
                .args([
                    "-c",
                    "for i in 1 2; do (while :; do ls /usr/lib >/dev/null; done) & done; wait",
                ])
                .stdout(Stdio::null())
                .process_group(0)
                .spawn()
                .context("starting the process churn")?,
        ))
    }
}

impl Drop for Churn {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(-(self.0.id() as i32));
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

pub fn soak(args: &Args) -> Result<Section> {
    let minutes = args.soak_minutes.unwrap_or(if args.quick { 2 } else { 20 });
    let setup = Setup::switch_and_clock(RING);
    let ours_setup = Setup {
        disk_ring: args.soak_history.then_some(HISTORY_BUDGET),
        ..setup
    };
    let mut flightrec = Recorder::start(Kind::Flightrec, ours_setup)?;
    let mut perf = Recorder::start(Kind::Perf, setup)?;
    let _load = BackgroundLoad::messaging(1)?;
    let _churn = Churn::start()?;
    let started = Instant::now();
    let end = started + Duration::from_secs(60 * minutes);
    let mut next_sample = started + SAMPLE_EVERY;
    let mut samples: Vec<(u64, f64, f64, serde_json::Value)> = Vec::new();
    let mut dumps = 0u64;
    while Instant::now() < end {
        let tick = Instant::now();
        flightrec.trigger_snapctl(false)?;
        perf.trigger_signal()?;
        dumps += 1;
        if Instant::now() >= next_sample {
            next_sample += SAMPLE_EVERY;
            let (ours, _) = rss_mib(flightrec.pid())?;
            let (theirs, _) = rss_mib(perf.pid())?;
            let status = flightrec.status()?;
            let tracking = status["tracking"].clone();
            let minute = started.elapsed().as_secs() / 60;
            eprintln!(
                "soak: minute {minute}: flightrecd {ours:.0} MiB, perf {theirs:.0} MiB, log \
                 {} of {} bytes, {} checkpoints, {dumps} dumps{}",
                tracking["log_used_bytes"],
                tracking["log_capacity_bytes"],
                tracking["checkpoints"],
                history_line(&status["history"])
            );
            samples.push((minute, ours, theirs, tracking));
        }
        std::thread::sleep(DUMP_EVERY.saturating_sub(tick.elapsed()));
    }
    let (ours, ours_peak) = rss_mib(flightrec.pid())?;
    let (theirs, theirs_peak) = rss_mib(perf.pid())?;
    let status = flightrec.status()?;
    let cpus = status["cpus"].as_array().map_or(1, Vec::len) as u64;
    let history_goal = if args.soak_history {
        history_queue_bound(RING * cpus)
    } else {
        0
    };
    let goal = (TRACKING_LOG * 3 / 2 + RING * cpus + history_goal) as f64 / MIB as f64;
    let history = &status["history"];
    flightrec.stop()?;
    perf.stop()?;

    let mut rows: Vec<Row> = samples
        .iter()
        .map(|(minute, ours, theirs, tracking)| Row {
            metric: format!(
                "RSS at minute {minute} (tracking log {} MiB used, {} checkpoints)",
                tracking["log_used_bytes"].as_u64().unwrap_or(0) / MIB,
                tracking["checkpoints"]
            ),
            flightrec: format!("{ours:.0} MiB"),
            perf: format!("{theirs:.0} MiB"),
            ratio: None,
            target: "",
        })
        .collect();
    rows.push(Row {
        metric: format!("RSS after {minutes} min and {dumps} dumps (peak)"),
        flightrec: format!("{ours:.0} MiB ({ours_peak:.0})"),
        perf: format!("{theirs:.0} MiB ({theirs_peak:.0})"),
        ratio: Some(ours / theirs),
        target: "",
    });
    if args.soak_history {
        let lost = history["lost"].as_u64().unwrap_or(0);
        rows.push(Row {
            metric: format!(
                "history at the end: on disk of a {} MiB budget, segments, samples lost",
                HISTORY_BUDGET / MIB
            ),
            flightrec: format!(
                "{:.1} MiB, {}, {lost}{}",
                history["bytes"].as_u64().unwrap_or(0) as f64 / MIB as f64,
                history["segments"],
                match history["failure"].as_str() {
                    Some(why) if !why.is_empty() => format!(" (stopped: {why})"),
                    _ => String::new(),
                }
            ),
            perf: "-".into(),
            ratio: None,
            target: "",
        });
    }
    rows.push(Row {
        metric: if args.soak_history {
            "goal: 1.5 x tracking_log + the rings' copy buffers + the history's queue bound".into()
        } else {
            "goal: 1.5 x tracking_log + the rings' copy buffers".into()
        },
        flightrec: format!("{goal:.0} MiB"),
        perf: "-".into(),
        ratio: None,
        target: if ours <= goal { "met" } else { "NOT met" },
    });
    Ok(Section {
        title: format!(
            "Soak: {minutes} min, default config (4 MiB per CPU, 64 MiB tracking log){}, \
             messaging -g 1 plus two loops of short processes, a dump every {}s",
            if args.soak_history {
                format!(", flightrec with [history] in {} MiB", HISTORY_BUDGET / MIB)
            } else {
                String::new()
            },
            DUMP_EVERY.as_secs()
        ),
        rows,
    })
}

/// The history's part of a minute's line (empty when it is off).
fn history_line(history: &serde_json::Value) -> String {
    if history.is_null() {
        return String::new();
    }
    format!(
        ", history {} bytes in {} segments",
        history["bytes"], history["segments"]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_goal_counts_what_the_daemon_s_history_queue_may_keep() {
        for rings in [0, MIB, 8 * MIB, 2 * RING, 64 * RING] {
            assert_eq!(
                history_queue_bound(rings),
                flightrecd::history::queue_memory_bound(rings as usize) as u64,
                "rings of {rings} bytes"
            );
        }
    }
}
