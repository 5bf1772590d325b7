//! Event resolution and opening on the real kernel: each kind of bad event
//! fails with a message naming the event and the reason. Needs root.

use flightrecd::perf::event::EventSpec;
use flightrecd::recorder::{Recorder, RecorderConfig};

use flightrec_tests::require_root;

fn start_error(spec: EventSpec) -> String {
    let config = RecorderConfig {
        events: vec![spec],
        ring_bytes_per_cpu: 16 << 10,
        tracking_ring_bytes_per_cpu: 16 << 10,
        tracking_log_bytes: 64 << 10,
        ..RecorderConfig::default()
    };
    match Recorder::start(&config) {
        Ok(_) => panic!("recorder started"),
        Err(e) => e.to_string(),
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn bad_events_fail_with_clear_messages() {
    require_root("bad_events_fail_with_clear_messages");
    assert!(
        start_error(EventSpec::new("not-an-event")).starts_with("unknown event 'not-an-event'")
    );
    assert_eq!(
        start_error(EventSpec::new("sched:no_such_tracepoint")),
        "tracepoint 'sched:no_such_tracepoint' does not exist: \
         /sys/kernel/tracing/events/sched/no_such_tracepoint/id is missing"
    );
    // This VM has no hardware PMU.
    if !std::path::Path::new("/sys/bus/event_source/devices/cpu").exists() {
        assert_eq!(
            start_error(EventSpec::new("cycles")),
            "hardware event 'cycles' is not available: this machine has no CPU PMU \
             (/sys/bus/event_source/devices/cpu does not exist)"
        );
    }
    let filtered = EventSpec {
        filter: Some("prev_pid ==".into()),
        ..EventSpec::new("sched:sched_switch")
    };
    let msg = start_error(filtered);
    assert!(
        msg.starts_with("filter 'prev_pid ==' rejected for sched:sched_switch: "),
        "{msg}"
    );
    eprintln!("{msg}");
    assert_eq!(
        start_error(EventSpec {
            frequency: Some(10_000_000),
            ..EventSpec::new("cpu-clock")
        }),
        format!(
            "event 'cpu-clock': frequency 10000000 Hz is above \
             kernel.perf_event_max_sample_rate ({} Hz)",
            std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
                .unwrap()
                .trim()
        )
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn good_filters_and_software_events_open() {
    require_root("good_filters_and_software_events_open");
    let config = RecorderConfig {
        events: vec![
            EventSpec {
                filter: Some("prev_pid != 0".into()),
                ..EventSpec::new("sched:sched_switch")
            },
            EventSpec {
                callchain: true,
                ..EventSpec::new("cpu-clock")
            },
            EventSpec::new("cs"),
        ],
        ring_bytes_per_cpu: 64 << 10,
        tracking_ring_bytes_per_cpu: 16 << 10,
        tracking_log_bytes: 64 << 10,
        ..RecorderConfig::default()
    };
    let recorder = Recorder::start(&config).expect("recorder starts");
    let events = recorder.events();
    let names: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["sched:sched_switch", "cpu-clock", "cs", "dummy:HG"]);
    let ncpus = recorder.cpus().len();
    let mut ids: Vec<u64> = recorder
        .events()
        .iter()
        .flat_map(|e| e.ids.clone())
        .collect();
    // Each sample event twice per CPU (the lossless freeze's standby set),
    // the tracking event once.
    let expected = (3 * 2 + 1) * ncpus;
    assert_eq!(ids.len(), expected);
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), expected, "every fd has its own kernel id");
    // Spin a little so cpu-clock fires.
    let until = std::time::Instant::now() + std::time::Duration::from_millis(100);
    while std::time::Instant::now() < until {
        std::hint::black_box(0u64);
    }
    let capture = recorder.capture().expect("capture");
    let sample_ids: std::collections::HashSet<u64> = capture
        .cpus
        .iter()
        .flat_map(|c| flightrecd::ring::records(&c.records))
        .filter_map(|r| {
            let (h, rec) = r.ok()?;
            (h.type_ == flightrecd::abi::record_type::SAMPLE)
                .then(|| flightrecd::abi::get_u64(rec, 8))
        })
        .collect();
    let clock_ids = &events[1].ids;
    assert!(
        clock_ids.iter().any(|id| sample_ids.contains(id)),
        "cpu-clock samples share the rings"
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
#[cfg_attr(flightrec_cpu_pmu, ignore = "needs a machine without a CPU PMU")]
fn hardware_open_without_pmu_is_explained_by_the_kernel_error_too() {
    require_root("hardware_open_without_pmu_is_explained_by_the_kernel_error_too");
    assert!(
        !std::path::Path::new("/sys/bus/event_source/devices/cpu").exists(),
        "built where there was no CPU PMU, run where there is one: rebuild the tests"
    );
    // Pretend a PMU is there so resolution passes and the kernel decides.
    let fake = tempfile::tempdir().unwrap();
    std::fs::create_dir(fake.path().join("cpu")).unwrap();
    let paths = flightrecd::perf::event::SystemPaths {
        pmu_devices: fake.path().to_path_buf(),
        ..Default::default()
    };
    let event = EventSpec::new("instructions")
        .resolve_with(&paths)
        .expect("resolves with a pretend PMU");
    let err = match flightrecd::perf::sample_ring::SampleRing::open(0, &[event], 1) {
        Ok(_) => panic!("opened a hardware event without a PMU"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.starts_with("perf_event_open for instructions on CPU 0 failed: the kernel has no hardware PMU for it"),
        "{err}"
    );
}
