//! Snapshots read by the stock `perf` 6.1, the reference reader: written
//! from hand-built captures with real tracefs formats and kernel addresses,
//! and from records `perf record` took on this machine. Needs root
//! (tracefs, perf_event_open, /proc/kallsyms addresses); under CI=true
//! lacking it is a failure.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use flightrecd::abi::{RecordHeader, record_type};
use flightrecd::recorder::HostInfo;
use flightrecd::recorder::tracepoints_of;
use flightrecd::snapshot::output::{compress_snapshot, write_snapshot};
use flightrecd::snapshot::perfdata::WriteOptions;

use flightrecd::snapshot::testing::{
    KNOWN_COMM, KNOWN_PID, LATE_COMM, LATE_PID, SyntheticSpec, capture_from_perf_data,
    synthetic_capture,
};

use flightrec_tests::require_root;

/// Address of a kernel symbol from /proc/kallsyms.
fn ksym(name: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap();
    text.lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let addr = f.next()?;
            let _kind = f.next()?;
            (f.next()? == name).then(|| u64::from_str_radix(addr, 16).ok())?
        })
        .unwrap_or_else(|| panic!("{name} not in /proc/kallsyms"))
}

/// Runs `perf <args> -i file`; returns (stdout, stderr).
fn perf(args: &[&str], file: &Path) -> (String, String) {
    let out = Command::new("perf")
        .args(args)
        .arg("-i")
        .arg(file)
        .output()
        .expect("running perf");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "perf {args:?} failed: {stderr}");
    (stdout, stderr)
}

fn spec(samples_per_cpu: u32, lost: u64) -> SyntheticSpec {
    let format = std::fs::read_to_string("/sys/kernel/tracing/events/sched/sched_switch/format")
        .expect("tracefs sched_switch format");
    SyntheticSpec {
        cpus: 2,
        samples_per_cpu,
        sched_switch_format: format,
        kernel_ips: vec![ksym("schedule") + 0x10, ksym("do_idle") + 0x20],
        kernel_text: Some(ksym("_text")),
        lost_while_paused: lost,
    }
}

fn opts(level: Option<i32>, tracepoints: &[(String, String)]) -> WriteOptions {
    WriteOptions {
        compression: level,
        host: Some(Arc::new(HostInfo::gather(tracepoints).unwrap())),
        scope: None,
    }
}

fn sched_switch() -> Vec<(String, String)> {
    vec![("sched".into(), "sched_switch".into())]
}

/// Sample times as `perf script` prints them (the field before the event).
fn times(script: &str) -> Vec<f64> {
    script
        .lines()
        .filter(|l| l.contains("sched:sched_switch:") || l.contains("cpu-clock:"))
        .filter_map(|l| {
            l.split_whitespace()
                .find(|w| w.ends_with(':') && w.contains('.'))
                .and_then(|w| w.trim_end_matches(':').parse().ok())
        })
        .collect()
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn perf_script_and_report_read_a_synthetic_snapshot() {
    require_root("perf_script_and_report_read_a_synthetic_snapshot");
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(50, 17);
    let capture = synthetic_capture(&spec);
    let written = write_snapshot(
        &capture,
        &opts(None, &sched_switch()),
        dir.path(),
        "synthetic.perf.data",
    )
    .unwrap();
    assert_eq!(written.summary.samples, 200);

    let (out, err) = perf(&["script"], &written.path);
    assert!(!err.contains("Error"), "{err}");
    let switches: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("sched:sched_switch:"))
        .collect();
    let clocks: Vec<&str> = out.lines().filter(|l| l.contains("cpu-clock:")).collect();
    assert_eq!(switches.len(), 100);
    assert_eq!(clocks.len(), 100);
    // comm from the synthesized COMM, and from the tracking COMM in the window
    assert!(switches.iter().any(|l| {
        l.trim_start()
            .starts_with(&format!("{KNOWN_COMM}  {KNOWN_PID}"))
    }));
    assert!(switches.iter().any(|l| {
        l.trim_start()
            .starts_with(&format!("{LATE_COMM}  {LATE_PID}"))
    }));
    assert!(!out.contains(&format!(":{KNOWN_PID}")), "{out}");
    assert!(
        switches
            .iter()
            .all(|l| l.contains("prev_comm=fr-") && l.contains("next_comm=swapper/0"))
    );
    // kernel call chains resolve through the synthesized kernel MMAP
    assert!(out.contains("schedule+0x10 ([kernel.kallsyms])"), "{out}");
    assert!(out.contains("do_idle+0x20 ([kernel.kallsyms])"), "{out}");
    // newest-first ring order comes out time-ordered
    let t = times(&out);
    assert_eq!(t.len(), 200);
    assert!(t.windows(2).all(|w| w[0] <= w[1]), "{t:?}");

    let (report, _) = perf(&["report", "--stdio", "--sort", "comm"], &written.path);
    // The 17 per CPU were dropped by the capture's pause, after the
    // window: not this file's to report.
    assert!(report.contains("# Total Lost Samples: 0"), "{report}");
    assert!(
        report.contains(KNOWN_COMM) && report.contains(LATE_COMM),
        "{report}"
    );
    let (header, _) = perf(&["report", "--header-only"], &written.path);
    assert!(header.contains("name = sched:sched_switch"), "{header}");
    assert!(header.contains("perf version : flightrec"), "{header}");
}

/// Largest decompressed payload of any COMPRESSED record of `file`.
fn largest_payload(file: &Path) -> (usize, usize) {
    let bytes = std::fs::read(file).unwrap();
    let off = u64::from_le_bytes(bytes[0x28..0x30].try_into().unwrap()) as usize;
    let size = u64::from_le_bytes(bytes[0x30..0x38].try_into().unwrap()) as usize;
    let data = &bytes[off..off + size];
    let (mut pos, mut largest, mut n) = (0, 0, 0);
    while pos < data.len() {
        let h = RecordHeader::parse(&data[pos..]).unwrap();
        if h.type_ == record_type::COMPRESSED {
            let d = zstd::decode_all(&data[pos + 8..pos + usize::from(h.size)]).unwrap();
            largest = largest.max(d.len());
            n += 1;
        }
        pos += usize::from(h.size);
    }
    (largest, n)
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn compressed_snapshots_print_exactly_what_uncompressed_ones_do() {
    require_root("compressed_snapshots_print_exactly_what_uncompressed_ones_do");
    let dir = tempfile::tempdir().unwrap();
    // 2 CPUs x 30000 x 2 samples: ~12 MiB of records.
    let capture = synthetic_capture(&spec(30_000, 3));
    let tps = sched_switch();
    let plain = write_snapshot(&capture, &opts(None, &tps), dir.path(), "plain.data").unwrap();
    let packed = write_snapshot(&capture, &opts(Some(3), &tps), dir.path(), "zstd.data").unwrap();
    assert!(
        packed.bytes * 5 < plain.bytes,
        "{} vs {}",
        packed.bytes,
        plain.bytes
    );
    let (largest, records) = largest_payload(&packed.path);
    // A record decompresses to far more than 64 KiB: a too small mmap_len
    // would drop samples silently.
    assert!(largest > 4 * 65536, "largest payload {largest}");
    assert!(records > 10);

    let (want, _) = perf(&["script"], &plain.path);
    let (got, _) = perf(&["script"], &packed.path);
    assert_eq!(
        want.lines().filter(|l| l.contains("cpu-clock:")).count(),
        60_000
    );
    assert!(got == want, "compressed file prints differently");

    // The check above has teeth: the same file claiming perf's usual
    // 64 KiB mmap_len fails (these frames) or loses samples (perf's own
    // streams) in perf 6.1.
    let short = dir.path().join("short-mmap-len.data");
    let mut bytes = std::fs::read(&packed.path).unwrap();
    set_mmap_len(&mut bytes, 65536);
    std::fs::write(&short, &bytes).unwrap();
    let lossy = Command::new("perf")
        .args(["script", "-i"])
        .arg(&short)
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&lossy.stdout)
        .lines()
        .filter(|l| l.contains("cpu-clock:"))
        .count();
    assert!(!lossy.status.success() || printed < 60_000, "{printed}");

    // Compressing the file on disk afterwards gives the same again.
    let later = dir.path().join("later.data");
    std::fs::copy(&plain.path, &later).unwrap();
    let recompressed = compress_snapshot(&later, 5).unwrap();
    assert!(recompressed.bytes * 5 < plain.bytes);
    let (again, _) = perf(&["script"], &later);
    assert!(again == want, "recompressed file prints differently");
    let (header, _) = perf(&["report", "--header-only"], &later);
    assert!(
        header.contains("# compressed : Zstd, level = 5"),
        "{header}"
    );
}

/// Rewrites the COMPRESSED feature's mmap_len (last u32 of feature 27).
fn set_mmap_len(bytes: &mut [u8], mmap_len: u32) {
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap()) as usize;
    let index = u64_at(bytes, 0x28) + u64_at(bytes, 0x30);
    let bits: Vec<usize> = (0..256)
        .filter(|b| bytes[0x48 + b / 8] & (1 << (b % 8)) != 0)
        .collect();
    let k = bits
        .iter()
        .position(|&b| b == 27)
        .expect("COMPRESSED feature");
    let (off, size) = (
        u64_at(bytes, index + 16 * k),
        u64_at(bytes, index + 16 * k + 8),
    );
    assert_eq!(size, 20);
    bytes[off + 16..off + 20].copy_from_slice(&mmap_len.to_le_bytes());
}

/// Splits `perf script` output into per-sample blocks, sorted: equal
/// timestamps may come out in another order.
fn blocks(script: &str) -> Vec<String> {
    let mut v: Vec<String> = script
        .split("\n\n")
        .flat_map(|b| {
            // tracepoint samples print one line each, without a blank line
            if b.lines().all(|l| !l.starts_with('\t')) {
                b.lines().map(str::to_string).collect::<Vec<_>>()
            } else {
                vec![b.to_string()]
            }
        })
        .filter(|b| !b.trim().is_empty())
        .collect();
    v.sort();
    v
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn records_perf_recorded_print_the_same_through_a_snapshot() {
    require_root("records_perf_recorded_print_the_same_through_a_snapshot");
    let dir = tempfile::tempdir().unwrap();
    let recorded = dir.path().join("recorded.data");
    let status = Command::new("perf")
        .args([
            "record",
            "-q",
            // No copies into ~/.debug at exit: perf readers in tests running
            // beside this one look DSOs up there and can read a half-written
            // copy (perf 6.1 then warns "assertion failed at
            // util/build-id.c" and may crash).
            "-N",
            "-e",
            "sched:sched_switch",
            "-e",
            "cpu-clock",
            "-g",
            "-a",
            "-o",
        ])
        .arg(&recorded)
        .args([
            "--",
            "sh",
            "-c",
            "for i in 1 2 3 4 5 6 7 8; do ls -R /usr/share/doc >/dev/null; done",
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let capture = capture_from_perf_data(&std::fs::read(&recorded).unwrap()).unwrap();
    let samples: u64 = capture.cpus.iter().map(|c| c.record_count).sum();
    assert!(samples > 100, "only {samples} samples recorded");

    let tps = tracepoints_of(&capture.events);
    for (level, name) in [(None, "plain.data"), (Some(1), "zstd.data")] {
        let written = write_snapshot(&capture, &opts(level, &tps), dir.path(), name).unwrap();
        assert_eq!(written.summary.samples, samples);
        let (want, _) = perf(&["script"], &recorded);
        let (got, _) = perf(&["script"], &written.path);
        let (want, got) = (blocks(&want), blocks(&got));
        assert_eq!(want.len(), got.len(), "{name}");
        if let Some((w, g)) = want.iter().zip(&got).find(|(w, g)| w != g) {
            panic!("{name}: perf script differs:\nrecorded: {w}\nsnapshot: {g}");
        }
        assert!(got.iter().any(|b| b.contains("prev_comm=")));
    }
}
