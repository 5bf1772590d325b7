//! Scenario `scaling`: capture and pause time vs ring size, against a plain
//! memcpy of the same bytes.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::wrap_rings_under_load;
use crate::cli::Args;
use crate::recorder::{Kind, Recorder, Setup};
use crate::report::{Row, Section, human_bytes, show};
use crate::stats::{Summary, ratio};
use crate::{KIB, MIB};

/// Scenario 5: capture and pause time vs ring size, against a plain memcpy of
/// the same bytes.
pub fn scaling(args: &Args) -> Result<Section> {
    let sizes: &[u64] = if args.quick {
        &[64 * KIB, MIB, 16 * MIB]
    } else {
        &[64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB]
    };
    let mut rows = Vec::new();
    for &ring in sizes {
        let setup = Setup::switch_and_clock(ring);
        let mut recorder = Recorder::start(Kind::Flightrec, setup)?;
        let load = wrap_rings_under_load(ring)?;
        let (mut pause_us, mut capture_us, mut memcpy_us) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.runs {
            let shot = recorder.trigger_snapctl(false)?;
            let reply = shot.reply.as_ref().context("dump reply")?;
            let cpus = reply["cpus"].as_array().context("reply has no cpus")?;
            let max_pause = cpus
                .iter()
                .filter_map(|c| c["pause_ns"].as_u64())
                .max()
                .context("reply has no pause_ns")?;
            let max_bytes = cpus
                .iter()
                .filter_map(|c| c["bytes"].as_u64())
                .max()
                .unwrap_or(0);
            pause_us.push(max_pause as f64 / 1e3);
            capture_us.push(shot.capture_ns()? as f64 / 1e3);
            memcpy_us.push(memcpy_time(max_bytes as usize).as_secs_f64() * 1e6);
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(load);
        recorder.stop()?;
        let (pause, capture, memcpy) = (
            Summary::of(&pause_us),
            Summary::of(&capture_us),
            Summary::of(&memcpy_us),
        );
        rows.push(Row {
            metric: format!(
                "{} ring: max pause per CPU / memcpy of its bytes",
                human_bytes(ring)
            ),
            flightrec: show(pause, " µs", 1),
            perf: format!("memcpy {}", show(memcpy, " µs", 1)),
            ratio: ratio(pause, memcpy),
            target: "<= 2.0",
        });
        rows.push(Row {
            metric: format!("{} ring: whole capture (all CPUs)", human_bytes(ring)),
            flightrec: show(capture, " µs", 1),
            perf: "-".into(),
            ratio: None,
            target: "linear in bytes",
        });
    }
    Ok(Section {
        title: "Scaling: capture vs ring size (flightrec; memcpy as the yardstick)".into(),
        rows,
    })
}

/// Median time of a plain memcpy of `bytes` from a buffer that is not in
/// the CPU caches, as most of a ring is not when it is frozen.
fn memcpy_time(bytes: usize) -> Duration {
    let src = vec![0x5au8; bytes.max(1)];
    let mut dst = vec![0u8; bytes.max(1)];
    let mut evict = vec![0u8; 64 * MIB as usize];
    let mut times: Vec<f64> = (0..7)
        .map(|round| {
            evict.iter_mut().step_by(64).for_each(|b| *b = round as u8);
            std::hint::black_box(&evict);
            let start = Instant::now();
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&dst);
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    Duration::from_secs_f64(times[times.len() / 2])
}
