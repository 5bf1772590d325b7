//! Scenario `compression`: zstd ratio and throughput, flightrec vs
//! `perf record -z`.

use anyhow::Result;

use super::{alternate, wrap_rings_under_load};
use crate::MIB;
use crate::analysis;
use crate::cli::Args;
use crate::recorder::{Kind, Recorder, Setup};
use crate::report::{Row, Section, show};
use crate::stats::{Summary, ratio};

/// Scenario 4: zstd ratio and throughput, flightrec vs `perf record -z`.
pub fn compression(args: &Args) -> Result<Section> {
    let ring = 4 * MIB;
    let mut rows = Vec::new();
    for level in [1, 3, 9] {
        let setup = Setup {
            compression: Some(level),
            ..Setup::switch_and_clock(ring)
        };
        let mut ratios: [Vec<f64>; 2] = Default::default();
        let mut record_ratios: [Vec<f64>; 2] = Default::default();
        let mut throughput: [Vec<f64>; 2] = Default::default();
        let mut recompress = Vec::new();
        for run in 0..args.runs {
            for &kind in alternate(run, &[Kind::Flightrec, Kind::Perf]) {
                let mut recorder = Recorder::start(kind, setup)?;
                let load = wrap_rings_under_load(ring)?;
                let shot = match kind {
                    Kind::Flightrec => recorder.trigger_snapctl(true)?,
                    Kind::Perf => recorder.trigger_signal()?,
                };
                let content = analysis::analyze(&shot.path)?;
                ratios[kind as usize].push(content.compression_ratio());
                record_ratios[kind as usize].push(content.compressed_records_ratio());
                throughput[kind as usize]
                    .push(content.record_bytes as f64 / MIB as f64 / shot.elapsed.as_secs_f64());
                if kind == Kind::Flightrec {
                    // Compressing an existing uncompressed snapshot (the
                    // Compress RPC), timed once the load is gone: under it
                    // the figure is mostly the starved client process.
                    let plain = recorder.trigger_signal()?;
                    drop(load);
                    let bytes = std::fs::metadata(&plain.path)?.len() as f64;
                    let took = recorder.compress(&plain.path, level)?;
                    recompress.push(bytes / MIB as f64 / took.as_secs_f64());
                } else {
                    drop(load);
                }
                recorder.stop()?;
            }
        }
        let [fr_ratio, pf_ratio] = ratios.map(|v| Summary::of(&v));
        let [fr_tp, pf_tp] = throughput.map(|v| Summary::of(&v));
        let [fr_records, pf_records] = record_ratios.map(|v| Summary::of(&v));
        rows.push(Row {
            metric: format!("zstd {level}: ratio of the compressed records (ring data)"),
            flightrec: show(fr_records, "x", 2),
            perf: show(pf_records, "x", 2),
            ratio: ratio(fr_records, pf_records),
            target: ">= 1.0",
        });
        rows.push(Row {
            metric: format!("zstd {level}: ratio of the whole data section"),
            flightrec: show(fr_ratio, "x", 2),
            perf: show(pf_ratio, "x", 2),
            ratio: ratio(fr_ratio, pf_ratio),
            target: "",
        });
        rows.push(Row {
            metric: format!(
                "zstd {level}: trigger → compressed file, MiB/s of records (flightrec: `snapctl dump --compress`; perf: SIGUSR2)"
            ),
            flightrec: show(fr_tp, " MiB/s", 1),
            perf: show(pf_tp, " MiB/s", 1),
            ratio: ratio(fr_tp, pf_tp),
            target: ">= 1.0",
        });
        rows.push(Row {
            metric: format!("zstd {level}: `snapctl compress` of a snapshot (no load), MiB/s"),
            flightrec: show(Summary::of(&recompress), " MiB/s", 1),
            perf: "-".into(),
            ratio: None,
            target: "",
        });
    }
    Ok(Section {
        title: "Compression, 4 MiB per CPU under load".into(),
        rows,
    })
}
