//! Snapshot write throughput and zstd ratio, next to `perf record -z`.
//!
//! Data: a real capture: a `Recorder` with sched:sched_switch and cpu-clock
//! (call chains) and rings of `RING_PAGES` pages per CPU, captured after
//! `perf bench sched messaging` ran (many switches, kernel call chains). Each
//! configuration writes a full snapshot (encode, compress, mmap'ed output,
//! fsync, rename) into a directory on the root file system; the best of a
//! few runs is printed. Then `perf record -z --compression-level=N` with
//! the same events and ring size reports its own ratio on the same kind of
//! data. Needs root; prints figures, asserts nothing.
//!
//! `cargo bench -p flightrecd --bench write` (env `BENCH_DIR` for the
//! output directory, default /var/tmp).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flightrecd::perf::event::EventSpec;
use flightrecd::recorder::HostInfo;
use flightrecd::recorder::{Recorder, RecorderConfig};
use flightrecd::snapshot::output::{compress_snapshot, write_snapshot};
use flightrecd::snapshot::perfdata::{WriteOptions, write_perf_data};

const RING_PAGES: &str = "4096";
const RUNS: usize = 5;
const LEVELS: [i32; 3] = [1, 3, 9];

fn workload() -> [&'static str; 6] {
    ["perf", "bench", "sched", "messaging", "-l", "1000"]
}

fn perf_record(out: &Path, compression: Option<i32>) -> String {
    let mut cmd = Command::new("perf");
    // Call chains on cpu-clock only, as the recorder is configured.
    cmd.args([
        "record",
        "-e",
        "sched:sched_switch",
        "-e",
        "cpu-clock/call-graph=fp/",
        "-a",
    ])
    .args(["-m", RING_PAGES, "-o"])
    .arg(out);
    if let Some(level) = compression {
        cmd.arg("-z").arg(format!("--compression-level={level}"));
    }
    let output = cmd
        .arg("--")
        .args(workload())
        .output()
        .expect("perf record");
    assert!(output.status.success(), "perf record failed");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn best<T>(mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best: Option<(Duration, T)> = None;
    for _ in 0..RUNS {
        let started = Instant::now();
        let v = f();
        let d = started.elapsed();
        if best.as_ref().is_none_or(|(b, _)| d < *b) {
            best = Some((d, v));
        }
    }
    best.expect("RUNS > 0")
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("write bench: needs root (perf record -a, tracefs); nothing measured");
        return;
    }
    let base =
        std::env::var_os("BENCH_DIR").map_or_else(|| PathBuf::from("/var/tmp"), PathBuf::from);
    let dir = tempfile::tempdir_in(&base).expect("bench dir");
    let pages: u64 = RING_PAGES.parse().unwrap();
    let config = RecorderConfig {
        events: vec![
            EventSpec::new("sched:sched_switch"),
            EventSpec {
                callchain: true,
                ..EventSpec::new("cpu-clock")
            },
        ],
        ring_bytes_per_cpu: pages * 4096,
        ..Default::default()
    };
    let recorder = Recorder::start(&config).expect("starting the recorder");
    let status = Command::new(workload()[0])
        .args(&workload()[1..])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("workload");
    assert!(status.success());
    let started = Instant::now();
    let capture = recorder.capture().expect("capture");
    let capture_time = started.elapsed();
    drop(recorder);
    let records: u64 = capture
        .cpus
        .iter()
        .map(|c| c.records.len() as u64)
        .sum::<u64>()
        + capture.tracking_records.len() as u64;
    let samples: u64 = capture.cpus.iter().map(|c| c.record_count).sum();
    println!(
        "data: {samples} records, {:.1} MB, {} CPUs, ring {RING_PAGES} pages, captured in {:.1} ms, events: {}",
        mb(records),
        capture.cpus.len(),
        capture_time.as_secs_f64() * 1e3,
        capture
            .events
            .iter()
            .map(|e| e.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let host =
        Arc::new(HostInfo::gather(&flightrecd::recorder::tracepoints_of(&capture.events)).unwrap());

    println!(
        "\n{:<14} {:>10} {:>8} {:>14} {:>14}",
        "flightrec", "file MB", "ratio", "write MB/s", "encode MB/s"
    );
    for level in std::iter::once(None).chain(LEVELS.map(Some)) {
        let opts = WriteOptions {
            compression: level,
            host: Some(host.clone()),
            scope: None,
        };
        let mut n = 0;
        let (write_time, written) = best(|| {
            n += 1;
            write_snapshot(&capture, &opts, dir.path(), &format!("w{level:?}-{n}.data")).unwrap()
        });
        let (encode_time, _) = best(|| write_perf_data(&capture, &host, &opts).unwrap().len());
        let ratio = written
            .summary
            .compression
            .map_or(1.0, |c| c.input_bytes as f64 / c.output_bytes as f64);
        println!(
            "{:<14} {:>10.2} {:>8.2} {:>14.0} {:>14.0}",
            level.map_or("uncompressed".to_string(), |l| format!("zstd -{l}")),
            mb(written.bytes),
            ratio,
            mb(records) / write_time.as_secs_f64(),
            mb(records) / encode_time.as_secs_f64(),
        );
    }

    // What one continuous zstd stream over the same bytes would reach (how
    // perf compresses), against this writer's independent frames.
    let all: Vec<u8> = capture
        .cpus
        .iter()
        .flat_map(|c| c.records.iter().copied())
        .collect();
    for level in LEVELS {
        let one = zstd::bulk::compress(&all, level).unwrap();
        println!(
            "  (the same sample records as one zstd frame at -{level}: ratio {:.2})",
            all.len() as f64 / one.len() as f64
        );
    }

    println!(
        "\n{:<14} {:>10} {:>8} {:>14}",
        "compress file", "file MB", "ratio", "MB/s"
    );
    let plain = write_snapshot(
        &capture,
        &WriteOptions {
            compression: None,
            host: Some(host.clone()),
            scope: None,
        },
        dir.path(),
        "plain.data",
    )
    .unwrap();
    for level in LEVELS {
        let copy = dir.path().join(format!("c{level}.data"));
        let (_, (elapsed, w)) = best(|| {
            std::fs::copy(&plain.path, &copy).unwrap();
            let started = Instant::now();
            let w = compress_snapshot(&copy, level).unwrap();
            (started.elapsed(), w)
        });
        let c = w.summary.compression.unwrap();
        println!(
            "{:<14} {:>10.2} {:>8.2} {:>14.0}",
            format!("zstd -{level}"),
            mb(w.bytes),
            c.input_bytes as f64 / c.output_bytes as f64,
            mb(plain.bytes) / elapsed.as_secs_f64(),
        );
    }

    println!("\nperf record -z (same events, -m {RING_PAGES}, its own run of the workload):");
    for level in LEVELS {
        let out = dir.path().join(format!("perf-z{level}.data"));
        let stderr = perf_record(&out, Some(level));
        let line = stderr
            .lines()
            .find(|l| l.contains("Captured and wrote"))
            .unwrap_or("(no summary line)");
        println!("  -z --compression-level={level}: {}", line.trim());
    }
}
