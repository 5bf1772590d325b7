//! Sample rings on the real kernel: wrap, walk, copy, the samples lost
//! while a capture holds a ring paused, and the lossless freeze that
//! switches to a standby ring instead. Needs root (see `require_root`).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use flightrecd::abi::layout::{RecordLayouts, SampleLayout};
use flightrecd::abi::{get_u64, record_type, sample};
use flightrecd::perf::event::EventSpec;
use flightrecd::recorder::CpuCapture;
use flightrecd::recorder::{Recorder, RecorderConfig};
use nix::sched::{CpuSet, sched_setaffinity};
use nix::unistd::Pid;

use flightrec_tests::require_root;

fn pin_to(cpu: u32) {
    let mut set = CpuSet::new();
    set.set(cpu as usize).expect("cpu in range");
    sched_setaffinity(Pid::from_raw(0), &set).expect("sched_setaffinity");
}

/// Two threads per CPU, pinned to it, bouncing a byte over a socket pair:
/// every bounce is a context switch on that CPU.
struct SwitchLoad {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<u64>>,
}

impl SwitchLoad {
    fn start(cpus: &[u32]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for &cpu in cpus {
            let (mut a, mut b) = UnixStream::pair().expect("socketpair");
            let stop_a = Arc::clone(&stop);
            threads.push(std::thread::spawn(move || {
                pin_to(cpu);
                let mut n = 0u64;
                let mut byte = [0u8; 1];
                while !stop_a.load(Ordering::Relaxed) {
                    if a.write_all(&byte).is_err() || a.read_exact(&mut byte).is_err() {
                        break;
                    }
                    n += 1;
                }
                n
            }));
            threads.push(std::thread::spawn(move || {
                pin_to(cpu);
                let mut byte = [0u8; 1];
                while b.read_exact(&mut byte).is_ok() {
                    if b.write_all(&byte).is_err() {
                        break;
                    }
                }
                0
            }));
        }
        Self { stop, threads }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.threads.into_iter().map(|t| t.join().unwrap()).sum()
    }
}

fn sched_switch_recorder(ring_bytes: u64) -> Recorder {
    recorder_with_freeze(ring_bytes, true)
}

fn recorder_with_freeze(ring_bytes: u64, lossless_freeze: bool) -> Recorder {
    let config = RecorderConfig {
        events: vec![EventSpec::new("sched:sched_switch")],
        ring_bytes_per_cpu: ring_bytes,
        lossless_freeze,
        ..RecorderConfig::default()
    };
    Recorder::start(&config).expect("recorder starts")
}

/// Every record of a CPU capture, checked: each is a SAMPLE or LOST, sample
/// times strictly decrease from newest to oldest, and the sample's CPU field
/// is the ring's CPU. Returns the LOST counts seen.
fn check_cpu(c: &CpuCapture, sample_type: u64) -> Vec<u64> {
    let layout = SampleLayout::new(sample_type);
    let mut previous: Option<u64> = None;
    let mut count = 0u64;
    let mut lost = Vec::new();
    for item in flightrecd::ring::records(&c.records) {
        let (header, record) = item.unwrap_or_else(|e| panic!("CPU {}: {e}", c.cpu));
        count += 1;
        match header.type_ {
            record_type::SAMPLE => {
                let (time, cpu) = layout.time_and_cpu(record);
                let time = time.expect("sample has a time");
                assert_eq!(cpu, Some(c.cpu), "sample in the ring of CPU {}", c.cpu);
                if let Some(newer) = previous {
                    assert!(
                        time < newer,
                        "CPU {}: times must decrease newest to oldest ({time} after {newer})",
                        c.cpu
                    );
                }
                previous = Some(time);
            }
            record_type::LOST => lost.push(get_u64(record, 16)),
            // An event's (un)throttling is logged in its ring.
            record_type::THROTTLE | record_type::UNTHROTTLE => {}
            other => panic!("CPU {}: unexpected record type {other}", c.cpu),
        }
    }
    assert_eq!(count, c.record_count, "CPU {}: record count", c.cpu);
    assert!(c.corruption.is_none(), "CPU {}: {:?}", c.cpu, c.corruption);
    lost
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn wrapped_rings_walk_whole_and_ordered() {
    require_root("wrapped_rings_walk_whole_and_ordered");
    let _alone = one_at_a_time();
    let recorder = sched_switch_recorder(16 * 1024);
    let cpus = recorder.cpus();
    let sample_type = recorder.events()[0].attr.sample_type;
    assert_ne!(sample_type & sample::RAW, 0);
    let load = SwitchLoad::start(&cpus);
    std::thread::sleep(Duration::from_millis(400));
    // Captured under load: the writer race is live.
    let capture = recorder.capture().expect("capture");
    let bounces = load.stop();
    assert!(bounces > 10_000, "load made only {bounces} round trips");

    assert_eq!(capture.cpus.len(), cpus.len());
    for c in &capture.cpus {
        // ~110-byte records, 16 KiB ring: 10k switches is ~70 wraps.
        assert!(c.wrapped, "CPU {} ring did not wrap", c.cpu);
        assert_eq!(c.ring_bytes, 16 * 1024);
        let lost = check_cpu(c, sample_type);
        // A switch landing inside a microsecond-long pause is lost and
        // reported, but only a handful.
        assert!(lost.iter().sum::<u64>() < 100 && c.lost_while_paused < 100);
        let bytes = c.records.len() as u64;
        assert!(
            bytes * 100 >= c.ring_bytes * 99,
            "CPU {}: recovered {bytes} of {} bytes",
            c.cpu,
            c.ring_bytes
        );
        let (oldest, newest) = (c.oldest.unwrap().as_nanos(), c.newest.unwrap().as_nanos());
        assert!(oldest < newest);
        eprintln!(
            "CPU {}: {} records, {bytes} bytes, {:.3} ms span, paused {:?}",
            c.cpu,
            c.record_count,
            (newest - oldest) as f64 / 1e6,
            c.pause
        );
    }
    assert_eq!(
        capture.window_start,
        capture.cpus.iter().filter_map(|c| c.oldest).min()
    );
    assert!(capture.window_start.is_some());
    assert_eq!(capture.events.len(), 2);
    assert_eq!(capture.events[1].name, "dummy:HG");
    // One id per CPU for each of the two sets (the standby one).
    assert_eq!(capture.events[0].ids.len(), 2 * cpus.len());
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn samples_lost_while_paused_show_after_resume() {
    require_root("samples_lost_while_paused_show_after_resume");
    let _alone = one_at_a_time();
    // Big enough that the LOST record written at resume is still in the
    // ring at the next capture; paused, not switched. Under this load a
    // 4 MiB ring wrapped (and lost that record) between the two captures
    // of a debug build once in a few runs.
    let recorder = recorder_with_freeze(32 << 20, false);
    let cpus = recorder.cpus();
    let sample_type = recorder.events()[0].attr.sample_type;
    let load = SwitchLoad::start(&cpus);
    std::thread::sleep(Duration::from_millis(100));
    // Hold each ring paused for 50 ms while the load keeps switching.
    let paused = recorder
        .capture_with_pause_hook(&|_| std::thread::sleep(Duration::from_millis(50)))
        .expect("capture");
    let after = recorder.capture().expect("second capture");
    load.stop();

    for (p, a) in paused.cpus.iter().zip(&after.cpus) {
        assert!(p.pause >= Duration::from_millis(50));
        assert!(
            p.lost_while_paused > 0,
            "CPU {}: switches during a 50 ms pause must be lost",
            p.cpu
        );
        assert_eq!(p.lost_since_start, p.lost_while_paused);
        // The short pause of a plain capture loses next to nothing; the
        // counters add up.
        assert!(a.lost_while_paused < p.lost_while_paused);
        assert_eq!(a.lost_since_start, p.lost_since_start + a.lost_while_paused);
        // The first write after resume tells perf how much was lost.
        let lost = check_cpu(a, sample_type);
        assert_eq!(
            lost.iter().sum::<u64>(),
            p.lost_while_paused,
            "CPU {}: the LOST record after resume counts what the pause lost",
            a.cpu
        );
    }
    let status = recorder.status();
    for (s, a) in status.cpus.iter().zip(&after.cpus) {
        assert_eq!(s.lost_samples, a.lost_since_start);
    }
    eprintln!(
        "lost while paused: {:?}",
        paused
            .cpus
            .iter()
            .map(|c| c.lost_while_paused)
            .collect::<Vec<_>>()
    );
}

/// A recorder of `cpu-clock` every 100 µs on every CPU: with a [`Spin`]
/// keeping every CPU busy (cpu-clock does not tick in idle), a gap between
/// samples is a gap in the recording.
fn clock_recorder(lossless_freeze: bool) -> Recorder {
    let config = RecorderConfig {
        events: vec![EventSpec {
            period: Some(CLOCK_PERIOD_NS),
            ..EventSpec::new("cpu-clock")
        }],
        ring_bytes_per_cpu: 4 << 20,
        lossless_freeze,
        ..RecorderConfig::default()
    };
    Recorder::start(&config).expect("recorder starts")
}

const CLOCK_PERIOD_NS: u64 = 100_000;

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn the_lossless_freeze_loses_nothing_and_reaches_back_across_captures() {
    require_root("the_lossless_freeze_loses_nothing_and_reaches_back_across_captures");
    let _alone = one_at_a_time();
    let recorder = clock_recorder(true);
    let cpus = recorder.cpus();
    let _spin = Spin::start(&cpus);
    let sample_type = recorder.events()[0].attr.sample_type;
    // Two ids per CPU: the active and the standby set.
    assert_eq!(recorder.events()[0].ids.len(), 2 * cpus.len());
    std::thread::sleep(Duration::from_millis(50));
    // Hold each frozen ring 20 ms: the clock keeps ticking, into the
    // standby ring.
    let first = recorder
        .capture_with_pause_hook(&|_| std::thread::sleep(HOLD))
        .expect("capture");
    std::thread::sleep(Duration::from_millis(20));
    let second = recorder.capture().expect("second capture");
    std::thread::sleep(Duration::from_millis(20));
    // Back on the first set's ring, which still holds the first window.
    let third = recorder.capture().expect("third capture");

    for i in 0..cpus.len() {
        let (a, b, c) = (&first.cpus[i], &second.cpus[i], &third.cpus[i]);
        for capture in [a, b, c] {
            assert_eq!(capture.lost_while_paused, 0, "CPU {}", capture.cpu);
            assert_eq!(capture.lost_since_start, 0, "CPU {}", capture.cpu);
            assert_eq!(capture.pause, Duration::ZERO);
            assert!(
                check_cpu(capture, sample_type).is_empty(),
                "CPU {}: no LOST record",
                capture.cpu
            );
            assert!(capture.record_count > 0, "CPU {}", capture.cpu);
        }
        let (a_new, b_old, b_new, c_old) = (
            a.newest.unwrap().as_nanos(),
            b.oldest.unwrap().as_nanos(),
            b.newest.unwrap().as_nanos(),
            c.oldest.unwrap().as_nanos(),
        );
        // The second window reaches back through the first set's ring,
        // which still held the first window whole (it never wrapped).
        assert_eq!(
            b_old,
            a.oldest.unwrap().as_nanos(),
            "CPU {}: the second window does not reach back to the first's start",
            b.cpu
        );
        // The standby set recorded the hold: its samples in the second
        // window start at the first capture, where a pause would leave the
        // whole hold out (the control test below). The bound is half the
        // hold, not two ticks: a virtual CPU the host does not run for a
        // millisecond or two takes no sample either.
        let first_set = oldest_sample_id(a, sample_type);
        let standby_start =
            oldest_sample_of(b, sample_type, "the standby set", |id| id != first_set);
        assert!(
            standby_start.abs_diff(a_new) < HOLD.as_nanos() as u64 / 2,
            "CPU {}: the standby set's samples start {} µs from the first capture",
            b.cpu,
            standby_start.abs_diff(a_new) / 1000
        );
        // The third window is the first set's ring again, walked from where
        // the second capture re-enabled it, followed by the standby set's
        // window from the first capture on: it reaches back to the first
        // capture, not past it. Its oldest sample is the standby set's
        // first, the one the second window holds, and not one of the first
        // set's first window.
        assert_ne!(
            oldest_sample_id(c, sample_type),
            first_set,
            "CPU {}: the third window reaches back into the first set's first window",
            c.cpu
        );
        assert_eq!(
            c_old, standby_start,
            "CPU {}: the third window does not start where the standby set's recording starts",
            c.cpu
        );
        for (name, capture) in [("first", a), ("second", b), ("third", c)] {
            let mut times = sample_times(capture, sample_type);
            let count = times.len();
            times.sort_unstable();
            times.dedup();
            assert_eq!(
                times.len(),
                count,
                "CPU {}: the {name} window holds a moment twice",
                capture.cpu
            );
        }
        // The first set's samples in the third window start where the
        // second capture re-enabled it: nothing between the second and
        // third windows is left out.
        let first_set_again =
            oldest_sample_of(c, sample_type, "the first set", |id| id == first_set);
        assert!(
            first_set_again.abs_diff(b_new) < HOLD.as_nanos() as u64 / 2,
            "CPU {}: {} µs between the second and third windows",
            c.cpu,
            first_set_again.abs_diff(b_new) / 1000
        );
    }
    for s in recorder.status().cpus {
        assert_eq!(s.lost_samples, 0);
        assert!(s.standby_ring);
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_paused_freeze_leaves_a_hole_between_windows() {
    // The control for the test above: the same hold, pausing instead.
    require_root("a_paused_freeze_leaves_a_hole_between_windows");
    let _alone = one_at_a_time();
    let recorder = clock_recorder(false);
    let _spin = Spin::start(&recorder.cpus());
    std::thread::sleep(Duration::from_millis(50));
    let first = recorder
        .capture_with_pause_hook(&|_| std::thread::sleep(HOLD))
        .expect("capture");
    let second = recorder.capture().expect("second capture");
    for (a, b) in first.cpus.iter().zip(&second.cpus) {
        assert!(a.lost_while_paused > 0, "CPU {}", a.cpu);
        // The second window reaches back into the first (one ring), but
        // holds nothing from the hold after the first window's newest
        // sample.
        let newest = a.newest.unwrap().as_nanos();
        let held = newest + 1..newest + HOLD.as_nanos() as u64 / 2;
        let times = sample_times(b, recorder.events()[0].attr.sample_type);
        assert!(
            !times.iter().any(|t| held.contains(t)),
            "CPU {}: samples of a paused moment",
            a.cpu
        );
    }
}

/// A thread per CPU, pinned to it, spinning until dropped.
struct Spin(Arc<AtomicBool>, Vec<JoinHandle<()>>);

impl Spin {
    fn start(cpus: &[u32]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = cpus
            .iter()
            .map(|&cpu| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    pin_to(cpu);
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Self(stop, threads)
    }
}

impl Drop for Spin {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for t in self.1.drain(..) {
            let _ = t.join();
        }
    }
}

const HOLD: Duration = Duration::from_millis(20);

fn sample_times(c: &CpuCapture, sample_type: u64) -> Vec<u64> {
    sample_times_and_ids(c, sample_type)
        .into_iter()
        .map(|(time, _)| time)
        .collect()
}

/// `(time, event id)` of every sample of a CPU capture.
fn sample_times_and_ids(c: &CpuCapture, sample_type: u64) -> Vec<(u64, u64)> {
    let layout = SampleLayout::new(sample_type);
    flightrecd::ring::records(&c.records)
        .filter_map(Result::ok)
        .filter(|(h, _)| h.type_ == record_type::SAMPLE)
        .filter_map(|(_, r)| Some((layout.time_and_cpu(r).0?, RecordLayouts::identifier(r)?)))
        .collect()
}

/// The time of the oldest sample of a CPU capture whose event id passes
/// `of_set`: where that set's samples start (`set` names it in the panic).
fn oldest_sample_of(
    c: &CpuCapture,
    sample_type: u64,
    set: &str,
    of_set: impl Fn(u64) -> bool,
) -> u64 {
    sample_times_and_ids(c, sample_type)
        .into_iter()
        .filter(|&(_, id)| of_set(id))
        .map(|(time, _)| time)
        .min()
        .unwrap_or_else(|| panic!("CPU {}: no sample of {set}", c.cpu))
}

/// The event id of a CPU capture's oldest sample: which set's ring it came from.
fn oldest_sample_id(c: &CpuCapture, sample_type: u64) -> u64 {
    sample_times_and_ids(c, sample_type)
        .into_iter()
        .min()
        .unwrap_or_else(|| panic!("CPU {}: no sample", c.cpu))
        .1
}

/// These tests time what happens under load: run them one at a time.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
