//! Scenario `cgroups`: what recording every sample's cgroup costs
//! (flightrec's `[containers] cgroups`, perf's `--all-cgroups`, on the same
//! events), a dump scoped to one cgroup against a whole one, and both
//! recorders' memory with 1,000 cgroups on the machine.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use flightrec_tests::Load;
use flightrec_tests::containers::{Cgroup, cgroup2_mount};

use super::{alternate, overhead_of, snapshot_of, wrap_rings_under_load};
use crate::analysis;
use crate::cli::Args;
use crate::procfs::rss_mib;
use crate::recorder::{Kind, Recorder, Setup};
use crate::report::{Row, Section, show};
use crate::stats::{Summary, ratio};
use crate::workload::Workload;
use crate::{KIB, MIB};

/// Cgroups made for the memory table.
const MANY: usize = 1000;

/// The three tables.
pub fn cgroups(args: &Args) -> Result<Vec<Section>> {
    Ok(vec![cost(args)?, scoped_dump(args)?, memory(args)?])
}

/// Overhead (section 1's table) and ring reach (section 2's) with cgroup
/// ids off and on for both tools, the rows of each measure side by side.
fn cost(args: &Args) -> Result<Section> {
    let ring = 4 * MIB;
    let mut by_setting = Vec::new();
    for on in [false, true] {
        let setup = Setup {
            cgroups: on,
            ..Setup::switch_and_clock(ring)
        };
        let label = if on { "cgroup ids" } else { "no cgroup ids" };
        let overhead = overhead_of(args, setup, Workload::Messaging)?;
        let snapshot = snapshot_of(args, setup)?;
        let rows: Vec<Row> = overhead
            .rows
            .into_iter()
            .chain(snapshot.rows)
            .map(|row| Row {
                metric: format!("{}, {label}", row.metric),
                ..row
            })
            .collect();
        by_setting.push(rows);
    }
    let on = by_setting.pop().context("rows with cgroup ids")?;
    let off = by_setting.pop().context("rows without")?;
    Ok(Section {
        title: format!(
            "Cgroup ids: overhead (sched messaging) and ring reach, {} MiB/CPU, \
             flightrec `[containers] cgroups` vs perf `--all-cgroups`",
            ring / MIB
        ),
        rows: off.into_iter().zip(on).flat_map(|(a, b)| [a, b]).collect(),
    })
}

/// A cgroup of its own under the cgroup2 mount, for this run of the
/// harness.
fn bench_cgroup(name: &str) -> Result<Cgroup> {
    let path = format!("/flightrec-bench-{}/{name}", std::process::id());
    let dir = cgroup2_mount().join(path.trim_start_matches('/'));
    std::fs::create_dir_all(&dir).with_context(|| format!("making {}", dir.display()))?;
    Ok(Cgroup::make(&path))
}

/// `snapctl dump --cgroup` of a CPU-bound process's cgroup against a whole
/// dump of the same rings, under the messaging load (outside it).
fn scoped_dump(args: &Args) -> Result<Section> {
    let ring = 4 * MIB;
    let busy = bench_cgroup("busy")?;
    let _burner = Load::from(busy.spawn(Path::new("/bin/sh"), &["-c", "while :; do :; done"]));
    let recorder = Recorder::start(Kind::Flightrec, Setup::switch_and_clock(ring))?;
    let load = wrap_rings_under_load(ring)?;
    // [whole, scoped]
    let mut reply_ms: [Vec<f64>; 2] = Default::default();
    let mut file_kib: [Vec<f64>; 2] = Default::default();
    let mut samples: [Vec<f64>; 2] = Default::default();
    for run in 0..args.runs {
        for &scoped in alternate(run, &[false, true]) {
            let mut dump = vec!["dump"];
            if scoped {
                dump.extend(["--cgroup", busy.path.as_str()]);
            }
            let (reply, elapsed) = recorder.snapctl_json(&dump)?;
            let path = PathBuf::from(reply["path"].as_str().context("dump reply has no path")?);
            let i = scoped as usize;
            reply_ms[i].push(elapsed.as_secs_f64() * 1e3);
            file_kib[i].push(std::fs::metadata(&path)?.len() as f64 / KIB as f64);
            samples[i].push(analysis::analyze(&path)?.samples as f64);
        }
    }
    drop(load);
    recorder.stop()?;
    let [whole_ms, scoped_ms] = reply_ms.map(|v| Summary::of(&v));
    let [whole_kib, scoped_kib] = file_kib.map(|v| Summary::of(&v));
    let [whole_samples, scoped_samples] = samples.map(|v| Summary::of(&v));
    let flightrec_only = |metric: String, value: String, target| Row {
        metric,
        flightrec: value,
        perf: "-".into(),
        ratio: None,
        target,
    };
    let scoped_vs_whole = |a: Option<Summary>, b: Option<Summary>| {
        ratio(a, b).map_or_else(|| "-".into(), |r| format!("{r:.3}"))
    };
    Ok(Section {
        title: format!(
            "A dump scoped to one cgroup (`snapctl dump --cgroup`, a CPU-bound process) \
             against a whole one, {} MiB/CPU, under the messaging load",
            ring / MIB
        ),
        rows: vec![
            flightrec_only(
                "`snapctl dump` → reply, whole".into(),
                show(whole_ms, " ms", 1),
                "",
            ),
            flightrec_only(
                "`snapctl dump --cgroup` → reply, scoped".into(),
                show(scoped_ms, " ms", 1),
                "",
            ),
            flightrec_only(
                "scoped / whole, time".into(),
                scoped_vs_whole(scoped_ms, whole_ms),
                "<= 1.0",
            ),
            flightrec_only(
                "file size, whole / scoped".into(),
                format!(
                    "{} / {}",
                    show(whole_kib, " KiB", 0),
                    show(scoped_kib, " KiB", 0)
                ),
                "",
            ),
            flightrec_only(
                "samples, whole / scoped".into(),
                format!(
                    "{} / {}",
                    show(whole_samples, "", 0),
                    show(scoped_samples, "", 0)
                ),
                "",
            ),
        ],
    })
}

/// `count` empty cgroups under one parent, removed when dropped.
struct ManyCgroups {
    parent: PathBuf,
    count: usize,
}

impl ManyCgroups {
    fn make(count: usize) -> Result<Self> {
        let parent = cgroup2_mount().join(format!("flightrec-bench-{}-many", std::process::id()));
        std::fs::create_dir_all(&parent).with_context(|| format!("making {}", parent.display()))?;
        let mut many = Self { parent, count: 0 };
        for i in 0..count {
            let dir = many.parent.join(format!("svc-{i:04}.service"));
            std::fs::create_dir(&dir).with_context(|| format!("making {}", dir.display()))?;
            many.count += 1;
        }
        Ok(many)
    }
}

impl Drop for ManyCgroups {
    fn drop(&mut self) {
        for i in 0..self.count {
            let _ = std::fs::remove_dir(self.parent.join(format!("svc-{i:04}.service")));
        }
        let _ = std::fs::remove_dir(&self.parent);
    }
}

/// The cgroups flightrecd says it knows (`status`).
fn known_cgroups(recorder: &Recorder) -> Result<u64> {
    recorder.status()?["cgroups"]["known"]
        .as_u64()
        .context("status has no cgroups.known")
}

/// Waits until flightrecd knows `at_least` cgroups (it learns new ones
/// from the kernel's CGROUP records as they are drained).
fn wait_known(recorder: &Recorder, at_least: u64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let known = known_cgroups(recorder)?;
        if known >= at_least {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("flightrecd knows {known} cgroups, not {at_least}, 60 s after they were made");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Resident memory after the recorder is started and one dump written:
/// with few cgroups, with 1,000 made while it records, and started with
/// the 1,000 already there (read at start: flightrec from the hierarchy,
/// perf synthesizing its CGROUP records).
fn memory(args: &Args) -> Result<Section> {
    let setup = Setup::switch_and_clock(4 * MIB);
    // [tool][few, made while recording, present at start]
    let mut rss: [[Vec<f64>; 3]; 2] = Default::default();
    for run in 0..args.runs {
        for &kind in alternate(run, &[Kind::Flightrec, Kind::Perf]) {
            let k = kind as usize;
            let mut recorder = Recorder::start(kind, setup)?;
            let known_before = match kind {
                Kind::Flightrec => known_cgroups(&recorder)?,
                Kind::Perf => 0,
            };
            recorder.trigger_signal()?;
            rss[k][0].push(rss_mib(recorder.pid())?.0);
            let many = ManyCgroups::make(MANY)?;
            match kind {
                Kind::Flightrec => wait_known(&recorder, known_before + MANY as u64)?,
                // perf reads its rings only at a switch: the dump below.
                Kind::Perf => std::thread::sleep(Duration::from_secs(1)),
            }
            recorder.trigger_signal()?;
            rss[k][1].push(rss_mib(recorder.pid())?.0);
            recorder.stop()?;
            let mut recorder = Recorder::start(kind, setup)?;
            recorder.trigger_signal()?;
            rss[k][2].push(rss_mib(recorder.pid())?.0);
            recorder.stop()?;
            drop(many);
        }
    }
    let summary = |k: Kind, i: usize| Summary::of(&rss[k as usize][i]);
    let row = |metric: &str, i: usize| {
        let (a, b) = (summary(Kind::Flightrec, i), summary(Kind::Perf, i));
        Row {
            metric: metric.into(),
            flightrec: show(a, " MiB", 1),
            perf: show(b, " MiB", 1),
            ratio: ratio(a, b),
            target: "",
        }
    };
    Ok(Section {
        title: format!(
            "Memory with {MANY} cgroups (RSS after a dump), 4 MiB/CPU, cgroup ids on \
             (perf `--all-cgroups`)"
        ),
        rows: vec![
            row("RSS, the machine's own cgroups", 0),
            row(&format!("RSS, {MANY} more made while recording"), 1),
            row(&format!("RSS, started with the {MANY} there"), 2),
        ],
    })
}
