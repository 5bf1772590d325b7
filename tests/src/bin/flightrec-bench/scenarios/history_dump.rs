//! Scenario `history-dump`: a dump of the whole history on disk. flightrec
//! alone (perf's ring of files cuts no window): `[history]` with a 1 GiB
//! budget fills under `perf bench sched messaging -g 4` with `cpu-clock`
//! at 9999 Hz and call chains until the history holds `--history-mib`
//! (default 360, 40 with --quick), then `snapctl dump --before 7d` asks
//! for all of it. Its time, the file, and the daemon's peak RSS during the
//! dump (reset before it) against its RSS before: what a group member's
//! request of a whole history costs root.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::MIB;
use crate::cli::Args;
use crate::procfs;
use crate::recorder::{Kind, Recorder, Setup};
use crate::report::{Row, Section};
use crate::workload::BackgroundLoad;

/// The history's disk budget: larger than any fill asked for, so nothing
/// is dropped before the dump.
const BUDGET: u64 = 1 << 30;

/// Longest wait for the history to fill.
const FILL_LIMIT: Duration = Duration::from_secs(30 * 60);

pub fn history_dump(args: &Args) -> Result<Section> {
    let target_mib = args
        .history_mib
        .unwrap_or(if args.quick { 40 } else { 360 });
    let setup = Setup {
        disk_ring: Some(BUDGET),
        clock_hz: Some(9999),
        ..Setup::switch_and_clock(4 * MIB)
    };
    let recorder = Recorder::start(Kind::Flightrec, setup)?;
    let pid = recorder.pid();
    let load = BackgroundLoad::messaging(4)?;
    let started = Instant::now();
    let history_mib = |r: &Recorder| -> Result<f64> {
        let (status, _) = r.snapctl_json(&["status"])?;
        Ok(status["history"]["bytes"].as_u64().unwrap_or(0) as f64 / MIB as f64)
    };
    let mut held = history_mib(&recorder)?;
    while held < target_mib as f64 {
        if started.elapsed() > FILL_LIMIT {
            bail!(
                "the history held {held:.0} MiB after {} s, not {target_mib} MiB",
                FILL_LIMIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_secs(2));
        held = history_mib(&recorder)?;
    }
    let filled = started.elapsed();
    drop(load);
    let (rss_before, _) = procfs::rss_mib(pid)?;
    procfs::reset_peak_rss(pid)?;
    let (reply, took) = recorder.snapctl_json(&["dump", "--before", "7d"])?;
    let (rss_after, peak) = procfs::rss_mib(pid)?;
    recorder.stop()?;
    let file_mib = reply["bytes"].as_u64().unwrap_or(0) as f64 / MIB as f64;
    let row = |metric: String, value: String| Row {
        metric,
        flightrec: value,
        perf: "-".into(),
        ratio: None,
        target: "",
    };
    Ok(Section {
        title: format!(
            "A dump of the whole history (`snapctl dump --before 7d`), {held:.0} MiB on disk \
             (filled in {} s under messaging -g 4, cpu-clock 9999 Hz -g)",
            filled.as_secs()
        ),
        rows: vec![
            row(
                format!(
                    "`dump --before 7d` → reply ({file_mib:.1} MiB file, {} records)",
                    reply["records"]
                ),
                format!("{:.2} s", took.as_secs_f64()),
            ),
            row(
                "daemon RSS before the dump".into(),
                format!("{rss_before:.1} MiB"),
            ),
            row(
                "daemon peak RSS during the dump (VmHWM, reset before it)".into(),
                format!("{peak:.1} MiB (+{:.1} MiB)", peak - rss_before),
            ),
            row(
                "daemon RSS after the dump".into(),
                format!("{rss_after:.1} MiB"),
            ),
        ],
    })
}
