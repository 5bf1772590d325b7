//! Tracking on the real kernel: a child's FORK, exec COMM, MMAP2 and EXIT
//! reach the tracking log, the capture's window and the process table.
//! Needs root (see `require_root`).

use std::process::Command;
use std::time::{Duration, Instant};

use flightrecd::perf::event::EventSpec;
use flightrecd::recorder::{FORGET_EXITED_EVERY, Recorder, RecorderConfig};
use flightrecd::tracking::process_table::TrackingLimits;
use flightrecd::tracking::record::{Parsed, TrackingRecord, parse};

use flightrec_tests::require_root;

/// Each test records every process of the machine: run side by side, one
/// test's hundreds of processes fill the other's tracking rings and
/// windows. One at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn recorder(tracking_log_bytes: u64) -> Recorder {
    Recorder::start(&RecorderConfig {
        events: vec![EventSpec::new("sched:sched_switch")],
        ring_bytes_per_cpu: 1 << 20,
        tracking_ring_bytes_per_cpu: 64 << 10,
        tracking_log_bytes,
        ..RecorderConfig::default()
    })
    .expect("recorder starts")
}

/// Runs `sh -c 'exec /bin/sleep 0.01'` to completion; returns its pid.
fn run_child() -> u32 {
    let mut child = Command::new("/bin/sh")
        .args(["-c", "exec /bin/sleep 0.01"])
        .spawn()
        .expect("spawn sh");
    let pid = child.id();
    assert!(child.wait().expect("wait").success());
    pid
}

fn parsed(records: &[u8]) -> Vec<Parsed> {
    flightrecd::ring::records(records)
        .map(|r| parse(r.expect("tracking record is intact").1).expect("parses"))
        .collect()
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn child_fork_exec_exit_are_in_the_window_and_the_table() {
    require_root("child_fork_exec_exit_are_in_the_window_and_the_table");
    let _serial = one_at_a_time();
    let recorder = recorder(4 << 20);
    // A window starts at the oldest record the rings hold: wait for one,
    // or on busy CPUs the first switch recorded can come after the
    // child's fork, and the window with it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while recorder.status().cpus.iter().all(|c| c.ring_records == 0) {
        assert!(
            std::time::Instant::now() < deadline,
            "no switch recorded in 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let pid = run_child();
    let capture = recorder.capture().expect("capture");
    let records = parsed(&capture.tracking_records);
    assert_eq!(records.len() as u64, capture.tracking_record_count);
    let times: Vec<u64> = records.iter().map(|p| p.time).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "oldest first");
    let start = capture.window_start.expect("a window").as_nanos();
    assert!(times.iter().all(|&t| t >= start));

    let me = std::process::id();
    let fork = records
        .iter()
        .find(|p| matches!(p.record, TrackingRecord::Fork { pid: f, tid, .. } if f == pid && tid == pid))
        .expect("FORK of the child");
    let TrackingRecord::Fork { ppid, .. } = fork.record else {
        unreachable!()
    };
    assert_eq!(ppid, me);
    let exec = records
        .iter()
        .find(|p| {
            matches!(&p.record, TrackingRecord::Comm { pid: c, comm, exec: true, .. }
                if *c == pid && comm == "sleep")
        })
        .expect("exec COMM 'sleep' of the child");
    let mmap = records
        .iter()
        .find(|p| {
            matches!(&p.record, TrackingRecord::Mmap { pid: m, map, .. }
                if *m == pid && map.filename.ends_with("/sleep"))
        })
        .expect("MMAP2 of the sleep binary");
    let exit = records
        .iter()
        .find(|p| matches!(p.record, TrackingRecord::Exit { pid: e, tid, .. } if e == pid && tid == pid))
        .expect("EXIT of the child");
    assert!(fork.time < exec.time && exec.time <= mmap.time && mmap.time < exit.time);

    // The window starts before the child existed; this test process was
    // seeded from /proc with its comm and executable.
    assert!(!capture.processes.iter().any(|p| p.tid == pid));
    let own = capture
        .processes
        .iter()
        .find(|p| p.tid == me)
        .expect("this process at the window start");
    let own_comm = std::fs::read_to_string("/proc/self/comm").unwrap();
    assert_eq!(own.comm, own_comm.trim_end());
    assert!(!own.maps.is_empty());

    let child = recorder.process(pid).unwrap().expect("child known");
    assert_eq!((child.comm.as_str(), child.ppid), ("sleep", me));
    let status = recorder.status();
    assert!(status.cpus.iter().all(|c| c.lost_tracking_records == 0));
    assert_eq!(status.tracking_log.rejected, 0);
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn records_evicted_from_a_small_log_stay_resolvable() {
    require_root("records_evicted_from_a_small_log_stay_resolvable");
    let _serial = one_at_a_time();
    let recorder = recorder(8 << 10);
    let pid = run_child();
    // Each short-lived process adds fork/comm/mmap2/exit records: far more
    // than 8 KiB, so the child's records leave the log for the table.
    for _ in 0..40 {
        assert!(Command::new("/bin/true").status().unwrap().success());
    }
    recorder.drain_tracking();
    let status = recorder.status();
    assert!(status.tracking_log.evicted > 0, "{status:?}");
    assert!(status.tracking_log.used <= 8 << 10);
    let child = recorder.process(pid).unwrap().expect("child still known");
    assert_eq!(child.comm, "sleep");
    assert!(
        child.maps.iter().any(|m| m.filename.ends_with("/sleep")),
        "{:?}",
        child.maps
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn drain_thread_keeps_small_tracking_rings_from_overflowing() {
    require_root("drain_thread_keeps_small_tracking_rings_from_overflowing");
    let _serial = one_at_a_time();
    let recorder = Recorder::start(&RecorderConfig {
        events: vec![EventSpec::new("sched:sched_switch")],
        ring_bytes_per_cpu: 64 << 10,
        // 4 pages: the watermark wakes the drain every 4 KiB of records.
        tracking_ring_bytes_per_cpu: 16 << 10,
        tracking_log_bytes: 4 << 20,
        ..RecorderConfig::default()
    })
    .expect("recorder starts");
    let before = recorder.status().tracking_log.records;
    // No explicit drain: only the drain thread moves records into the log.
    // In bursts of 10 processes (about 4 KiB of records, one watermark),
    // each followed by a witness that the drain thread took them: the two
    // rings hold 32 KiB, so a drain woken at the watermark never lets them
    // overflow, whatever else runs on the machine; a drain that does not
    // wake fails the witness.
    for burst in 0..15u64 {
        let seen = recorder.status().tracking_log.records;
        for _ in 0..10 {
            assert!(Command::new("/bin/true").status().unwrap().success());
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while recorder.status().tracking_log.records < seen + 10 * 4 {
            assert!(
                std::time::Instant::now() < deadline,
                "burst {burst}: the drain thread took nothing in 10 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    let status = recorder.status();
    assert_eq!(status.tracking_drain_failure, None);
    // fork + comm + several mmap2 + exit per process, ~100 bytes each:
    // well over the 32 KiB the two rings hold together.
    assert!(
        status.tracking_log.records - before > 150 * 4,
        "{} records drained",
        status.tracking_log.records - before
    );
    for cpu in &status.cpus {
        assert_eq!(cpu.lost_tracking_records, 0, "CPU {}", cpu.cpu);
        assert_eq!(cpu.tracking_malformed_bytes, 0, "CPU {}", cpu.cpu);
    }
}

/// A recorder whose exited threads only the drain thread's looks (and a
/// capture, none taken here) forget, with the record tap on or off.
fn recorder_forgetting_only_at_its_looks(tap: bool) -> Recorder {
    Recorder::start(&RecorderConfig {
        events: vec![EventSpec::new("sched:sched_switch")],
        // Small rings: a few thousand switches and they hold nothing as
        // old as the child's exit.
        ring_bytes_per_cpu: 64 << 10,
        tracking_ring_bytes_per_cpu: 64 << 10,
        // A log the test does not fill: an exit older than the log's oldest
        // record is forgotten as the log evicts, whatever the rings hold.
        tracking_log_bytes: 256 << 20,
        // Nor this many exits, which would drop the oldest.
        tracking_limits: TrackingLimits {
            max_exited_threads: usize::MAX,
            ..TrackingLimits::default()
        },
        tap,
        ..RecorderConfig::default()
    })
    .expect("recorder starts")
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn exited_threads_the_rings_no_longer_reach_are_forgotten_without_a_dump() {
    require_root("exited_threads_the_rings_no_longer_reach_are_forgotten_without_a_dump");
    let _serial = one_at_a_time();
    let recorder = recorder_forgetting_only_at_its_looks(false);
    let pid = run_child();
    recorder.drain_tracking();
    // The drain thread's first look for exits to forget comes
    // FORGET_EXITED_EVERY (10 s) after the start.
    assert!(
        recorder.process(pid).unwrap().is_some(),
        "the exited child is known before the rings move past it"
    );
    // Switches until the rings hold nothing as old as the exit; no capture
    // is taken, so only the drain thread's looks can forget it.
    let deadline = Instant::now() + Duration::from_secs(60);
    while recorder.process(pid).unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "the exited child is still known after 60 s of switches and no dump"
        );
        for _ in 0..20 {
            assert!(Command::new("/bin/true").status().unwrap().success());
        }
        recorder.drain_tracking();
    }
    let status = recorder.status();
    assert_eq!(status.tracking_log.evicted, 0, "{status:?}");
    assert_eq!(status.tracking_drain_failure, None);
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn exited_threads_are_kept_while_the_record_tap_s_reader_has_not_unwound_what_it_drained() {
    require_root(
        "exited_threads_are_kept_while_the_record_tap_s_reader_has_not_unwound_what_it_drained",
    );
    let _serial = one_at_a_time();
    let recorder = recorder_forgetting_only_at_its_looks(true);
    let tap = recorder.tap().expect("the record tap is on");
    // A reader (the history) drained records now and has not unwound
    // them: their processes may have exited since, and their maps are
    // needed until then. Said before the drain thread's first look.
    let drained_at = flightrecd::host::sample_clock_now().unwrap().as_nanos();
    tap.unwinding_since(Some(drained_at));
    let pid = run_child();
    let exited = Instant::now();
    recorder.drain_tracking();
    let churn = || {
        for _ in 0..20 {
            assert!(Command::new("/bin/true").status().unwrap().success());
        }
        recorder.drain_tracking();
    };
    // Switches until every CPU's rings hold nothing as old as the exit...
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = recorder.status();
        if status
            .cpus
            .iter()
            .all(|c| c.rings_oldest.is_some() && c.rings_reach < exited.elapsed())
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the rings still reach the child's exit after 60 s of switches: {status:?}"
        );
        churn();
    }
    // ...then through more than one of the drain thread's looks, each of
    // which would forget it were nothing waiting (the test above).
    let past = Instant::now();
    while past.elapsed() < FORGET_EXITED_EVERY + Duration::from_secs(3) {
        churn();
        assert!(
            recorder.process(pid).unwrap().is_some(),
            "the exited child was forgotten while records drained before its exit wait \
             to be unwound"
        );
    }
    // Unwound: nothing waits, and the next look forgets it.
    tap.unwinding_since(None);
    let deadline = Instant::now() + Duration::from_secs(60);
    while recorder.process(pid).unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "the exited child is still known 60 s after nothing waits"
        );
        churn();
    }
    assert_eq!(recorder.status().tracking_log.evicted, 0);
}
