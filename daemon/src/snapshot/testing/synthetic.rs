//! A synthetic capture and host: known threads, samples on every CPU,
//! every fact perf's features hold.

use super::*;
use crate::time::SampleTime;

/// What to put in a synthetic capture.
#[derive(Debug, Clone)]
pub struct SyntheticSpec {
    pub cpus: u32,
    /// sched_switch and cpu-clock samples each, per CPU.
    pub samples_per_cpu: u32,
    /// The sched_switch format (its `ID:` becomes the attr's config).
    pub sched_switch_format: String,
    /// Kernel addresses cycled through as cpu-clock IPs and call chains.
    pub kernel_ips: Vec<u64>,
    pub kernel_text: Option<u64>,
    pub lost_while_paused: u64,
}

impl Default for SyntheticSpec {
    fn default() -> Self {
        Self {
            cpus: 2,
            samples_per_cpu: 100,
            sched_switch_format: SCHED_SWITCH_FORMAT.into(),
            kernel_ips: vec![0xffff_ffff_8100_1000, 0xffff_ffff_8100_2000],
            kernel_text: Some(0xffff_ffff_8100_0000),
            lost_while_paused: 0,
        }
    }
}

/// Pid and comm of the thread known from the process table (synthesized).
pub const KNOWN_PID: u32 = 4242;
pub const KNOWN_COMM: &str = "fr-known-task";
/// Pid and comm of the thread born inside the window (tracking records).
pub const LATE_PID: u32 = 4343;
pub const LATE_COMM: &str = "fr-late-task";
/// Time of the first sample of CPU 0.
pub const T0: u64 = 5_000_000_000;
const STEP: u64 = 10_000;

pub fn sched_switch_id(c: u32) -> u64 {
    1000 + u64::from(c)
}
pub fn cpu_clock_id(c: u32) -> u64 {
    2000 + u64::from(c)
}
pub fn tracking_id(c: u32) -> u64 {
    3000 + u64::from(c)
}

/// A capture of sched:sched_switch, cpu-clock (with call chains) and the
/// tracking event: per CPU `samples_per_cpu` of each, newest first; thread
/// [`KNOWN_PID`] from the process table, [`LATE_PID`] forked and named by
/// tracking records inside the window and sampled only after that.
pub fn synthetic_capture(spec: &SyntheticSpec) -> Capture {
    let tp_id = format_id(spec.sched_switch_format.as_bytes()).unwrap_or(372);
    let cpus: Vec<u32> = (0..spec.cpus).collect();
    let events = synthetic_events(tp_id, &cpus);
    let late_birth = T0 + STEP * u64::from(spec.samples_per_cpu) / 2;
    let tracking_records = late_task_records(late_birth);
    let cpu_captures = cpus
        .iter()
        .map(|&c| synthetic_cpu(spec, c, tp_id, late_birth))
        .collect();
    Capture {
        events,
        cpus: cpu_captures,
        processes: vec![ProcessState {
            pid: KNOWN_PID,
            tid: KNOWN_PID,
            ppid: 1,
            comm: KNOWN_COMM.into(),
            maps: vec![MapState {
                start: 0x5555_0000_0000,
                len: 0x2000,
                pgoff: 0,
                prot: 0x5,
                flags: 0x2,
                filename: "/usr/bin/fr-known-task".into(),
                ..Default::default()
            }]
            .into(),
        }],
        tracking_records,
        tracking_record_count: 2,
        tracking_lost: 0,
        window_start: Some(SampleTime::from_nanos(T0)),
        held_from: Some(SampleTime::from_nanos(T0)),
        kernel_text: spec.kernel_text,
        loaded_modules: Vec::new(),
        cgroups: Vec::new(),
    }
}

/// The three events of [`synthetic_capture`], with one id per CPU each.
fn synthetic_events(tp_id: u64, cpus: &[u32]) -> Vec<EventDescriptor> {
    vec![
        EventDescriptor {
            name: "sched:sched_switch".into(),
            attr: tracepoint_attr(tp_id),
            ids: cpus.iter().map(|&c| sched_switch_id(c)).collect(),
            tracepoint: Some(("sched".into(), "sched_switch".into())),
        },
        EventDescriptor {
            name: "cpu-clock".into(),
            attr: cpu_clock_attr(),
            ids: cpus.iter().map(|&c| cpu_clock_id(c)).collect(),
            tracepoint: None,
        },
        EventDescriptor {
            name: "dummy:tracking".into(),
            attr: tracking_attr(),
            ids: cpus.iter().map(|&c| tracking_id(c)).collect(),
            tracepoint: None,
        },
    ]
}

/// FORK then COMM of [`LATE_PID`] at `late_birth`, on CPU 0.
fn late_task_records(late_birth: u64) -> Vec<u8> {
    let tracking = tracking_attr();
    let mut tracking_records = Vec::new();
    let fork_id = SampleId {
        pid: LATE_PID,
        tid: LATE_PID,
        time: late_birth,
        id: tracking_id(0),
        cpu: 0,
    };
    let start = tracking_records.len();
    tracking_records.extend_from_slice(&[0u8; 8]);
    for v in [LATE_PID, KNOWN_PID, LATE_PID, KNOWN_PID] {
        tracking_records.extend_from_slice(&v.to_le_bytes());
    }
    tracking_records.extend_from_slice(&late_birth.to_le_bytes());
    push_sample_id(&mut tracking_records, &tracking, &fork_id);
    let size = (tracking_records.len() - start) as u16;
    tracking_records[start..start + 8].copy_from_slice(
        &RecordHeader {
            type_: record_type::FORK,
            misc: 0,
            size,
        }
        .to_bytes(),
    );
    let comm_id = SampleId {
        time: late_birth + 1,
        ..fork_id
    };
    crate::snapshot::synth::push_comm(
        &mut tracking_records,
        &tracking,
        LATE_PID,
        LATE_PID,
        LATE_COMM,
        &comm_id,
    );
    tracking_records
}

/// CPU `c`'s ring: a sched_switch and a cpu-clock sample (with a kernel
/// call chain) per step, newest first.
fn synthetic_cpu(spec: &SyntheticSpec, c: u32, tp_id: u64, late_birth: u64) -> CpuCapture {
    let format = &spec.sched_switch_format;
    let mut records: Vec<Vec<u8>> = Vec::new();
    let mut first = None;
    let mut last = None;
    for i in 0..spec.samples_per_cpu {
        let time = T0 + u64::from(c) * 7 + u64::from(i) * STEP;
        let pid = if time > late_birth + 1 && i % 2 == 1 {
            LATE_PID
        } else {
            KNOWN_PID
        };
        let comm = if pid == LATE_PID {
            LATE_COMM
        } else {
            KNOWN_COMM
        };
        let raw = raw_from_format(
            format,
            &[
                ("common_type", Field::Int(tp_id as i64)),
                ("common_pid", Field::Int(i64::from(pid))),
                ("prev_comm", Field::Str(comm)),
                ("prev_pid", Field::Int(i64::from(pid))),
                ("prev_prio", Field::Int(120)),
                ("prev_state", Field::Int(1)),
                ("next_comm", Field::Str("swapper/0")),
                ("next_pid", Field::Int(0)),
                ("next_prio", Field::Int(120)),
            ],
        );
        records.push(sample_record(
            tracepoint_attr(0).sample_type,
            crate::abi::misc::KERNEL,
            &SampleFields {
                id: sched_switch_id(c),
                ip: spec.kernel_ips.first().copied().unwrap_or(0),
                pid,
                tid: pid,
                time,
                cpu: c,
                period: 1,
                callchain: &[],
                raw: &raw,
            },
        ));
        let ip = spec
            .kernel_ips
            .get(i as usize % spec.kernel_ips.len().max(1))
            .copied()
            .unwrap_or(0);
        let caller = spec
            .kernel_ips
            .get((i as usize + 1) % spec.kernel_ips.len().max(1))
            .copied()
            .unwrap_or(0);
        let chain = [CONTEXT_KERNEL, ip, caller];
        records.push(sample_record(
            cpu_clock_attr().sample_type,
            crate::abi::misc::KERNEL,
            &SampleFields {
                id: cpu_clock_id(c),
                ip,
                pid,
                tid: pid,
                time: time + 3,
                cpu: c,
                period: 1_000_000,
                callchain: &chain,
                raw: &[],
            },
        ));
        first.get_or_insert(time);
        last = Some(time + 3);
    }
    let record_count = records.len() as u64;
    records.reverse();
    CpuCapture {
        cpu: c,
        records: records.concat(),
        record_count,
        ring_bytes: 1 << 20,
        wrapped: true,
        oldest: first.map(SampleTime::from_nanos),
        newest: last.map(SampleTime::from_nanos),
        lost_while_paused: spec.lost_while_paused,
        lost_since_start: spec.lost_while_paused,
        ..Default::default()
    }
}

/// Host facts with `format` as the only tracepoint format (no tracefs).
/// A two-CPU, one-node machine with every fact perf's features hold.
pub fn synthetic_machine() -> MachineFacts {
    let cache = |level: u32, cpus: &str| CacheLevel {
        level,
        line_size: 64,
        sets: 64,
        ways: 8,
        kind: "Unified".into(),
        size: "32K".into(),
        cpus: cpus.into(),
    };
    MachineFacts {
        cpu_desc: Some("Test CPU".into()),
        cpuid: Some("GenuineIntel,6,85,4".into()),
        total_mem_kb: Some(2048),
        topology: Some(CpuTopology {
            package_lists: vec!["0-1".into()],
            core_lists: vec!["0".into(), "1".into()],
            die_lists: vec!["0-1".into()],
            cpus: (0..2)
                .map(|c| CpuIds {
                    core_id: c,
                    socket_id: 0,
                    die_id: 0,
                })
                .collect(),
        }),
        numa_nodes: vec![NumaNode {
            node: 0,
            mem_total_kb: 2048,
            mem_free_kb: 1024,
            cpus: "0-1".into(),
        }],
        pmus: vec![(1, "software".into()), (2, "tracepoint".into())],
        caches: vec![cache(1, "0"), cache(1, "1"), cache(2, "0-1")],
        mem_topology: Some(MemTopology {
            block_size: 0x800_0000,
            nodes: vec![(0, vec![0, 1])],
        }),
    }
}

pub fn synthetic_host(format: &str) -> HostInfo {
    HostInfo {
        hostname: "testhost".into(),
        os_release: "6.0.0-test".into(),
        version: "flightrec test".into(),
        arch: "x86_64".into(),
        nr_cpus_available: 2,
        nr_cpus_online: 2,
        cmdline: vec!["flightrecd".into(), "--test".into()],
        page_size: 4096,
        clock_resolution_ns: 1,
        clock: Some(ClockReference {
            clockid: 1,
            tod_ns: 1_700_000_000_000_000_000,
            clockid_ns: 1_000_000_000,
        }),
        kernel_build_id: Some((1..=20).collect()),
        modules: vec![KernelModule {
            name: "fr_test".into(),
            start: 0xffff_ffff_c000_0000,
            size: 0x4000,
            path: "/lib/modules/6.0.0-test/kernel/fr_test.ko".into(),
            build_id: Some(vec![0xee; 20]),
        }],
        machine: synthetic_machine(),
        tracing: TracingSource {
            header_page: b"\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n".to_vec(),
            header_event: b"# compressed entry header\n\ttype_len    :    5 bits\n".to_vec(),
            formats: vec![TracepointFormat {
                system: "sched".into(),
                name: "sched_switch".into(),
                id: format_id(format.as_bytes()),
                format: format.as_bytes().to_vec(),
            }],
            printk_formats: Vec::new(),
        },
    }
}
