//! Scenario `compress-priority`: how much a workload slows down while the
//! daemon compresses a snapshot on request (`snapctl compress --level 19`),
//! against running `zstd -19` by hand on the same bytes. The daemon
//! compresses at normal priority or below, never at the realtime priority
//! of its freeze path: it must cost the workload no more than zstd does.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{alternate, wrap_rings_under_load};
use crate::MIB;
use crate::cli::Args;
use crate::recorder::{Kind, Recorder, Setup};
use crate::report::{Row, Section, human_bytes, show};
use crate::stats::{Summary, ratio};

const LEVEL: i32 = 19;

/// The measured workload: short, so it runs whole inside a compression.
fn workload_seconds(quick: bool) -> Result<f64> {
    let loops = if quick { "300" } else { "1000" };
    let start = Instant::now();
    let status = Command::new("perf")
        .args(["bench", "sched", "messaging", "-g", "2", "-l", loops])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("running perf bench")?;
    if !status.success() {
        bail!("perf bench sched messaging failed: {status}");
    }
    Ok(start.elapsed().as_secs_f64())
}

#[derive(Clone, Copy, PartialEq)]
enum Compressor {
    /// `snapctl compress ID --level 19`: the daemon's Compress RPC.
    Daemon,
    /// `zstd -19` on a copy of the same file, as a user would by hand.
    ByHand,
}

/// The workload's wall time while `compressor` works on `snapshot`
/// (`copy` for zstd), or `None` if the compression ended before the
/// workload did (the figure would not be one "during" it).
fn workload_during(
    recorder: &Recorder,
    compressor: Compressor,
    snapshot: &Path,
    copy: &Path,
    quick: bool,
) -> Result<Option<f64>> {
    let started = Instant::now();
    let (seconds, still_running) = match compressor {
        Compressor::ByHand => {
            let mut zstd = Command::new("zstd")
                .args(["-q", "-f", &format!("-{LEVEL}"), "-o"])
                .arg(copy.with_extension("zst"))
                .arg(copy)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting zstd (Debian package zstd)")?;
            std::thread::sleep(Duration::from_millis(300));
            let seconds = workload_seconds(quick)?;
            let running = zstd.try_wait()?.is_none();
            zstd.wait()?;
            (seconds, running)
        }
        Compressor::Daemon => std::thread::scope(|s| -> Result<(f64, bool)> {
            let call = s.spawn(|| recorder.compress(snapshot, LEVEL));
            std::thread::sleep(Duration::from_millis(300));
            let seconds = workload_seconds(quick)?;
            let running = !call.is_finished();
            call.join()
                .map_err(|_| anyhow::anyhow!("compress thread panicked"))??;
            Ok((seconds, running))
        })?,
    };
    eprintln!(
        "compress-priority: {} took {:.1}s, workload {seconds:.2}s during it",
        match compressor {
            Compressor::Daemon => "snapctl compress",
            Compressor::ByHand => "zstd by hand",
        },
        started.elapsed().as_secs_f64()
    );
    Ok(still_running.then_some(seconds))
}

pub fn compress_priority(args: &Args) -> Result<Section> {
    let ring = if args.quick { 4 * MIB } else { 16 * MIB };
    let setup = Setup::switch_and_clock(ring);
    let mut recorder = Recorder::start(Kind::Flightrec, setup)?;
    let scratch = tempfile::tempdir()?;
    let mut alone = Vec::new();
    let mut during: [Vec<f64>; 2] = Default::default();
    let mut too_short = 0;
    let mut snapshot_mib = Vec::new();
    for run in 0..args.runs {
        // A fresh plain snapshot each run: the RPC compresses in place.
        let shot = {
            let _load = wrap_rings_under_load(ring)?;
            recorder.trigger_signal()?
        };
        let copy = scratch.path().join("by-hand.perf.data");
        std::fs::copy(&shot.path, &copy)?;
        snapshot_mib.push(std::fs::metadata(&copy)?.len() as f64 / MIB as f64);
        alone.push(workload_seconds(args.quick)?);
        for &compressor in alternate(run, &[Compressor::Daemon, Compressor::ByHand]) {
            match workload_during(&recorder, compressor, &shot.path, &copy, args.quick)? {
                Some(s) => during[(compressor == Compressor::ByHand) as usize].push(s),
                None => too_short += 1,
            }
        }
        alone.push(workload_seconds(args.quick)?);
    }
    recorder.stop()?;
    if too_short > 0 {
        eprintln!(
            "compress-priority: {too_short} compressions ended before the workload; not counted"
        );
    }
    let alone_s = Summary::of(&alone);
    let slowdown = |v: &[f64]| {
        Summary::of(
            &v.iter()
                .map(|s| s / alone_s.map_or(f64::NAN, |a| a.median))
                .collect::<Vec<_>>(),
        )
    };
    let [daemon, by_hand] = [&during[0], &during[1]].map(|v| Summary::of(v));
    let [daemon_slowdown, hand_slowdown] = [&during[0], &during[1]].map(|v| slowdown(v));
    Ok(Section {
        title: format!(
            "Compression on request vs zstd by hand: `perf bench sched messaging -g 2` while \
             compressing a {} snapshot ({} per CPU) at level {LEVEL}; the perf column is `zstd \
             -{LEVEL}` run by hand",
            show(Summary::of(&snapshot_mib), " MiB", 0),
            human_bytes(ring)
        ),
        rows: vec![
            Row {
                metric: "workload alone, s".into(),
                flightrec: show(alone_s, " s", 2),
                perf: show(alone_s, " s", 2),
                ratio: None,
                target: "",
            },
            Row {
                metric: "workload during the compression, s".into(),
                flightrec: show(daemon, " s", 2),
                perf: show(by_hand, " s", 2),
                ratio: ratio(daemon, by_hand),
                target: "<= 1.0",
            },
            Row {
                metric: "slowdown (during / alone)".into(),
                flightrec: show(daemon_slowdown, "x", 2),
                perf: show(hand_slowdown, "x", 2),
                ratio: ratio(daemon_slowdown, hand_slowdown),
                target: "<= 1.0",
            },
        ],
    })
}
