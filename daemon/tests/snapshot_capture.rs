//! The whole path on the real kernel: a Recorder captures sched_switch and
//! cpu-clock with call chains while a known child runs, the writer turns the
//! capture into snapshot files, and the stock `perf` 6.1 reads them. Needs
//! root; under CI=true lacking it is a failure.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flightrecd::abi::{RecordHeader, record_type};
use flightrecd::perf::event::EventSpec;
use flightrecd::recorder::{Capture, HostInfo};
use flightrecd::recorder::{Recorder, RecorderConfig};
use flightrecd::snapshot::output::{compress_snapshot, write_snapshot};
use flightrecd::snapshot::perfdata::WriteOptions;

use flightrec_tests::require_root;

const CHILD_COMM: &str = "fr-known-child";

/// Runs a copy of /bin/sh named `fr-known-child` that spins and sleeps a
/// few times; returns its pid once it has exited.
fn run_known_child(dir: &Path) -> u32 {
    let exe = dir.join(CHILD_COMM);
    std::fs::copy("/bin/sh", &exe).unwrap();
    let mut child = Command::new(&exe)
        .args([
            "-c",
            "for r in 1 2 3 4 5; do i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 0.02; done",
        ])
        .spawn()
        .unwrap();
    let pid = child.id();
    assert!(child.wait().unwrap().success());
    pid
}

fn perf(args: &[&str], file: &Path) -> String {
    let out = Command::new("perf")
        .args(args)
        .arg("-i")
        .arg(file)
        .output()
        .expect("running perf");
    assert!(
        out.status.success(),
        "perf {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sample_records(capture: &Capture) -> u64 {
    let mut n = 0;
    for cpu in &capture.cpus {
        let mut pos = 0;
        while let Some(h) = RecordHeader::parse(&cpu.records[pos..]) {
            if h.type_ == record_type::SAMPLE {
                n += 1;
            }
            pos += usize::from(h.size);
        }
    }
    n
}

/// Largest decompressed payload of the file's COMPRESSED records.
fn largest_payload(file: &Path) -> usize {
    let bytes = std::fs::read(file).unwrap();
    let off = u64::from_le_bytes(bytes[0x28..0x30].try_into().unwrap()) as usize;
    let size = u64::from_le_bytes(bytes[0x30..0x38].try_into().unwrap()) as usize;
    let data = &bytes[off..off + size];
    let (mut pos, mut largest) = (0, 0);
    while pos < data.len() {
        let h = RecordHeader::parse(&data[pos..]).unwrap();
        if h.type_ == record_type::COMPRESSED {
            let d = zstd::decode_all(&data[pos + 8..pos + usize::from(h.size)]).unwrap();
            largest = largest.max(d.len());
        }
        pos += usize::from(h.size);
    }
    largest
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn captured_snapshots_read_in_perf_with_comms_symbols_and_losses() {
    require_root("captured_snapshots_read_in_perf_with_comms_symbols_and_losses");
    let dir = tempfile::tempdir().unwrap();
    let config = RecorderConfig {
        events: vec![
            EventSpec::new("sched:sched_switch"),
            EventSpec {
                callchain: true,
                frequency: Some(4000),
                ..EventSpec::new("cpu-clock")
            },
        ],
        ring_bytes_per_cpu: 8 << 20,
        // Paused, so the held capture loses samples.
        lossless_freeze: false,
        ..Default::default()
    };
    let recorder = Recorder::start(&config).unwrap();
    let host = Arc::new(
        HostInfo::gather(&flightrecd::recorder::tracepoints_of(&recorder.events())).unwrap(),
    );
    let child = run_known_child(dir.path());

    // Keep the CPUs busy and hold each ring paused a while: samples are
    // lost during the capture, after its window: its file must not report
    // them, the next capture's (whose window holds the kernel's LOST
    // record) must.
    let stop = Arc::new(AtomicBool::new(false));
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let capture = recorder
        .capture_with_pause_hook(&|_| std::thread::sleep(Duration::from_millis(30)))
        .unwrap();
    let next = recorder.capture().unwrap();
    stop.store(true, Ordering::Relaxed);
    for s in spinners {
        s.join().unwrap();
    }
    let captured = sample_records(&capture);
    let lost: u64 = capture.cpus.iter().map(|c| c.lost_while_paused).sum();
    assert!(captured > 100, "only {captured} samples");

    let opts = |level| WriteOptions {
        compression: level,
        host: Some(Arc::clone(&host)),
        scope: None,
    };
    let plain = write_snapshot(&capture, &opts(None), dir.path(), "plain.perf.data").unwrap();
    let packed = write_snapshot(&capture, &opts(Some(3)), dir.path(), "zstd.perf.data").unwrap();
    assert_eq!(plain.summary.samples, captured);
    assert!(packed.bytes < plain.bytes);

    let script = perf(&["script"], &plain.path);
    let sample_lines: Vec<&str> = script
        .lines()
        .filter(|l| l.contains(" sched:sched_switch:") || l.contains(" cpu-clock:"))
        .collect();
    assert_eq!(
        sample_lines.len() as u64,
        captured,
        "perf script sample count"
    );
    assert!(
        script.contains("prev_comm="),
        "tracepoint fields not decoded"
    );

    // The known child: its samples carry its comm, never a bare pid.
    let pid = child.to_string();
    let child_lines: Vec<&str> = sample_lines
        .iter()
        .copied()
        .filter(|l| l.split_whitespace().nth(1) == Some(pid.as_str()))
        .collect();
    assert!(!child_lines.is_empty(), "no sample of the child {pid}");
    // Before its exec the child still bears this thread's name; after it,
    // only its own. Either way a name, never a bare pid.
    let before_exec: String = std::thread::current()
        .name()
        .unwrap_or_default()
        .chars()
        .take(15)
        .collect();
    let first_own = child_lines
        .iter()
        .position(|l| l.trim_start().starts_with(CHILD_COMM))
        .expect("no sample with the child's comm");
    assert!(
        child_lines[..first_own]
            .iter()
            .all(|l| l.trim_start().starts_with(&before_exec)),
        "{child_lines:#?}"
    );
    assert!(
        child_lines[first_own..]
            .iter()
            .all(|l| l.trim_start().starts_with(CHILD_COMM)),
        "{child_lines:#?}"
    );
    assert!(!script.contains(&format!(":{pid} ")), "child shown as :pid");
    assert!(script.contains(&format!("prev_comm={CHILD_COMM} ")));

    // Kernel call chain entries resolve to symbols.
    let kernel_frames: Vec<&str> = script
        .lines()
        .filter(|l| l.starts_with('\t') && l.contains("([kernel.kallsyms])"))
        .collect();
    assert!(!kernel_frames.is_empty(), "no kernel frames");
    let unknown = kernel_frames
        .iter()
        .filter(|l| l.contains("[unknown]"))
        .count();
    assert!(
        unknown * 10 < kernel_frames.len(),
        "{unknown} of {} unresolved",
        kernel_frames.len()
    );

    let report = perf(&["report", "--stdio", "--sort", "comm"], &plain.path);
    assert!(report.contains("# Samples:"), "{report}");
    assert!(lost > 0, "holding the rings paused lost nothing");
    assert_eq!(plain.summary.lost_samples, 0);
    assert!(report.contains("# Total Lost Samples: 0"), "{report}");
    let next_file = write_snapshot(&next, &opts(None), dir.path(), "next.perf.data").unwrap();
    assert_eq!(next_file.summary.lost_samples, lost);
    let next_report = perf(&["report", "--stdio", "--sort", "comm"], &next_file.path);
    assert!(
        next_report.contains(&format!("# Total Lost Samples: {lost}")),
        "{next_report}"
    );

    // Tracepoint samples carry their IP, so perf report puts them on kernel
    // symbols instead of one `[unknown] 0000000000000000` line.
    let by_symbol = perf(&["report", "--stdio", "--sort", "sym"], &plain.path);
    let switch_section = by_symbol
        .split("# Samples:")
        .find(|section| section.contains("of event 'sched:sched_switch'"))
        .unwrap_or_else(|| panic!("no sched_switch section in:\n{by_symbol}"));
    // sched_switch fires from inside __schedule.
    assert!(
        switch_section.contains("[k] __schedule"),
        "sched_switch samples not on __schedule:\n{switch_section}"
    );

    // Compressed files print byte for byte the same.
    let largest = largest_payload(&packed.path);
    eprintln!(
        "{captured} samples ({} of the child), {lost} lost, {} -> {} bytes, \
         largest compressed record payload {largest}",
        child_lines.len(),
        plain.bytes,
        packed.bytes
    );
    assert!(largest > 65536);
    assert!(
        perf(&["script"], &packed.path) == script,
        "zstd snapshot prints differently"
    );
    let later = dir.path().join("later.perf.data");
    std::fs::copy(&plain.path, &later).unwrap();
    compress_snapshot(&later, 1).unwrap();
    assert!(
        perf(&["script"], &later) == script,
        "compressed-later snapshot prints differently"
    );
}

/// Names of the kernel MMAP records `perf script --show-mmap-events` prints.
fn kernel_mmaps(file: &Path) -> Vec<String> {
    perf(&["script", "--show-mmap-events", "-F", "comm"], file)
        .lines()
        .filter(|l| l.contains("PERF_RECORD_MMAP -1/0:"))
        .filter_map(|l| l.rsplit(' ').next().map(str::to_string))
        .collect()
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_module_loaded_after_start_has_its_map_in_this_and_later_snapshots() {
    require_root("a_module_loaded_after_start_has_its_map_in_this_and_later_snapshots");
    // This kernel may have no module support: the watch reads a file that
    // stands for /proc/modules, and a module is loaded by writing it.
    let dir = tempfile::tempdir().unwrap();
    let modules = dir.path().join("modules");
    std::fs::write(&modules, "fr_start 16384 0 - Live 0xffffffffc1000000\n").unwrap();
    let config = RecorderConfig {
        events: vec![EventSpec {
            frequency: Some(999),
            ..EventSpec::new("cpu-clock")
        }],
        ..Default::default()
    };
    let recorder = Recorder::start(&config).unwrap();
    recorder.watch_modules_in(modules.clone()).unwrap();
    let host = recorder.host();
    let stop = Arc::new(AtomicBool::new(false));
    let spinner = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };

    std::fs::write(
        &modules,
        "fr_start 16384 0 - Live 0xffffffffc1000000\nfr_late 16384 0 - Live 0xffffffffc2000000\n",
    )
    .unwrap();
    // The drain reads the file at most once a second.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let loaded = loop {
        let loaded = recorder.loaded_modules();
        if !loaded.is_empty() {
            break loaded;
        }
        assert!(std::time::Instant::now() < deadline, "fr_late not seen");
        std::thread::sleep(Duration::from_millis(50));
    };
    let names: Vec<&str> = loaded.iter().map(|l| l.module.name.as_str()).collect();
    assert_eq!(names, ["fr_late"], "only the new module");
    let loaded_ns = loaded[0].time_ns;

    let opts = WriteOptions {
        compression: None,
        host: Some(host),
        scope: None,
    };
    // The first window reaches back before the load: the record is among
    // its tracking records. So does the second (it reaches back through
    // the ring the first froze). The third reaches back only to the first
    // capture, after the load: the map is synthesized at its start.
    let first = recorder.capture().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let second = recorder.capture().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let third = recorder.capture().unwrap();
    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
    assert!(
        first.window_start.unwrap().as_nanos() <= loaded_ns,
        "first window starts too late"
    );
    assert!(
        third.window_start.unwrap().as_nanos() > loaded_ns,
        "third window starts too early"
    );
    for (capture, name) in [
        (&first, "first.perf.data"),
        (&second, "second.perf.data"),
        (&third, "third.perf.data"),
    ] {
        let written = write_snapshot(capture, &opts, dir.path(), name).unwrap();
        let mmaps = kernel_mmaps(&written.path);
        assert_eq!(
            mmaps.iter().filter(|m| *m == "[fr_late]").count(),
            1,
            "{name}: {mmaps:?}"
        );
    }
}
