//! Hand-built captures for the writer's tests and benchmarks: the records a
//! sample ring and a tracking ring would hold, without a kernel.

use crate::abi::{
    EventAttr, HEADER_SIZE, RecordHeader, attr_flag, event_type, record_type, sample, sw_event,
};

use super::synth::{SampleId, push_sample_id};
use crate::host::machine::{CacheLevel, CpuIds, CpuTopology, MachineFacts, MemTopology, NumaNode};
use crate::host::{
    ClockReference, HostInfo, KernelModule, TracepointFormat, TracingSource, format_id,
};
use crate::recorder::{Capture, CpuCapture, EventDescriptor};
use crate::tracking::state::{MapState, ProcessState};

/// `PERF_CONTEXT_KERNEL` marker in a call chain.
pub const CONTEXT_KERNEL: u64 = (-128i64) as u64;

/// The sched_switch format of a 6.x kernel (for tests without tracefs).
pub const SCHED_SWITCH_FORMAT: &str = "name: sched_switch\nID: 372\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n\nprint fmt: \"prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d next_prio=%d\", REC->prev_comm, REC->prev_pid, REC->prev_prio, (REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1)) ? __print_flags(REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1), \"|\", { 0x00000001, \"S\" }, { 0x00000002, \"D\" }, { 0x00000004, \"T\" }, { 0x00000008, \"t\" }, { 0x00000010, \"X\" }, { 0x00000020, \"Z\" }, { 0x00000040, \"P\" }, { 0x00000080, \"I\" }) : \"R\", REC->prev_state & (((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) ? \"+\" : \"\", REC->next_comm, REC->next_pid, REC->next_prio\n";

/// A field value for [`raw_from_format`].
#[derive(Debug, Clone, Copy)]
pub enum Field<'a> {
    Int(i64),
    Str(&'a str),
}

/// Builds a tracepoint's raw payload from its tracefs `format` text.
/// Fields not given are zero; unknown names are ignored.
pub fn raw_from_format(format: &str, values: &[(&str, Field<'_>)]) -> Vec<u8> {
    let mut fields = Vec::new();
    for line in format.lines() {
        let Some(rest) = line.trim().strip_prefix("field:") else {
            continue;
        };
        let mut parts = rest.split(';').map(str::trim);
        let decl = parts.next().unwrap_or_default();
        let num = |p: Option<&str>, key: &str| {
            p.and_then(|p| p.strip_prefix(key))
                .and_then(|v| v.parse::<usize>().ok())
        };
        let (Some(offset), Some(size)) = (num(parts.next(), "offset:"), num(parts.next(), "size:"))
        else {
            continue;
        };
        let name = decl
            .rsplit(' ')
            .next()
            .unwrap_or_default()
            .split('[')
            .next()
            .unwrap_or_default()
            .to_string();
        fields.push((name, offset, size));
    }
    let len = fields.iter().map(|(_, o, s)| o + s).max().unwrap_or(0);
    let mut raw = vec![0u8; len];
    for (name, value) in values {
        let Some((_, offset, size)) = fields.iter().find(|(n, _, _)| n == name) else {
            continue;
        };
        let dst = &mut raw[*offset..offset + size];
        match value {
            Field::Int(v) => {
                let b = v.to_le_bytes();
                let n = (*size).min(8);
                dst[..n].copy_from_slice(&b[..n]);
            }
            Field::Str(s) => {
                let n = s.len().min(size.saturating_sub(1));
                dst[..n].copy_from_slice(&s.as_bytes()[..n]);
            }
        }
    }
    raw
}

/// Fields of one SAMPLE record.
#[derive(Debug, Clone, Default)]
pub struct SampleFields<'a> {
    pub id: u64,
    pub ip: u64,
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub cpu: u32,
    pub period: u64,
    pub callchain: &'a [u64],
    pub raw: &'a [u8],
}

/// A SAMPLE record laid out for `sample_type` (IDENTIFIER, IP, TID, TIME,
/// ID, CPU, PERIOD, CALLCHAIN, RAW are supported).
pub fn sample_record(sample_type: u64, misc: u16, f: &SampleFields<'_>) -> Vec<u8> {
    let mut r = vec![0u8; HEADER_SIZE];
    let u64s = |r: &mut Vec<u8>, v: u64| r.extend_from_slice(&v.to_le_bytes());
    if sample_type & sample::IDENTIFIER != 0 {
        u64s(&mut r, f.id);
    }
    if sample_type & sample::IP != 0 {
        u64s(&mut r, f.ip);
    }
    if sample_type & sample::TID != 0 {
        u64s(&mut r, u64::from(f.pid) | (u64::from(f.tid) << 32));
    }
    if sample_type & sample::TIME != 0 {
        u64s(&mut r, f.time);
    }
    if sample_type & sample::ID != 0 {
        u64s(&mut r, f.id);
    }
    if sample_type & sample::CPU != 0 {
        u64s(&mut r, u64::from(f.cpu));
    }
    if sample_type & sample::PERIOD != 0 {
        u64s(&mut r, f.period);
    }
    if sample_type & sample::CALLCHAIN != 0 {
        u64s(&mut r, f.callchain.len() as u64);
        for ip in f.callchain {
            u64s(&mut r, *ip);
        }
    }
    if sample_type & sample::RAW != 0 {
        // u32 size + data, padded so the whole is a multiple of 8.
        let padded = (f.raw.len() + 4).next_multiple_of(8) - 4;
        r.extend_from_slice(&(padded as u32).to_le_bytes());
        r.extend_from_slice(f.raw);
        r.resize(r.len() + padded - f.raw.len(), 0);
    }
    let header = RecordHeader {
        type_: record_type::SAMPLE,
        misc,
        size: r.len() as u16,
    };
    r[..HEADER_SIZE].copy_from_slice(&header.to_bytes());
    r
}

pub fn tracepoint_attr(id: u64) -> EventAttr {
    EventAttr {
        type_: event_type::TRACEPOINT,
        config: id,
        sample_period_or_freq: 1,
        sample_type: sample::IDENTIFIER
            | sample::IP
            | sample::TID
            | sample::TIME
            | sample::CPU
            | sample::PERIOD
            | sample::RAW,
        flags: attr_flag::SAMPLE_ID_ALL | attr_flag::WRITE_BACKWARD | attr_flag::EXCLUDE_GUEST,
        ..Default::default()
    }
}

pub fn cpu_clock_attr() -> EventAttr {
    EventAttr {
        type_: event_type::SOFTWARE,
        config: sw_event::CPU_CLOCK,
        sample_period_or_freq: 1000,
        sample_type: sample::IDENTIFIER
            | sample::IP
            | sample::TID
            | sample::TIME
            | sample::CPU
            | sample::PERIOD
            | sample::CALLCHAIN,
        flags: attr_flag::SAMPLE_ID_ALL
            | attr_flag::WRITE_BACKWARD
            | attr_flag::FREQ
            | attr_flag::EXCLUDE_GUEST,
        sample_max_stack: 127,
        ..Default::default()
    }
}

pub fn tracking_attr() -> EventAttr {
    EventAttr {
        type_: event_type::SOFTWARE,
        config: sw_event::DUMMY,
        sample_period_or_freq: 1,
        sample_type: sample::IDENTIFIER | sample::IP | sample::TID | sample::TIME | sample::CPU,
        flags: attr_flag::SAMPLE_ID_ALL
            | attr_flag::COMM
            | attr_flag::COMM_EXEC
            | attr_flag::TASK
            | attr_flag::MMAP2
            | attr_flag::EXCLUDE_GUEST,
        ..Default::default()
    }
}

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
    let events = vec![
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
    ];
    let late_birth = T0 + STEP * u64::from(spec.samples_per_cpu) / 2;

    // Tracking: FORK then COMM of LATE_PID, on CPU 0.
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
    super::synth::push_comm(
        &mut tracking_records,
        &tracking,
        LATE_PID,
        LATE_PID,
        LATE_COMM,
        &comm_id,
    );

    let format = &spec.sched_switch_format;
    let mut cpu_captures = Vec::new();
    for &c in &cpus {
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
        cpu_captures.push(CpuCapture {
            cpu: c,
            records: records.concat(),
            record_count,
            ring_bytes: 1 << 20,
            wrapped: true,
            oldest_ns: first,
            newest_ns: last,
            lost_while_paused: spec.lost_while_paused,
            lost_since_start: spec.lost_while_paused,
            ..Default::default()
        });
    }
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
        window_start_ns: T0,
        kernel_text: spec.kernel_text,
        loaded_modules: Vec::new(),
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

/// Turns a file written by `perf record` (uncompressed, several events
/// with IDENTIFIER) into the capture flightrec would have taken of the same
/// events: attrs, ids and names from the file, its SAMPLE records split by
/// CPU and stored newest first (as a backward ring holds them), its other
/// kernel records as tracking records. perf's own user records (rounds,
/// features) are dropped.
pub fn capture_from_perf_data(bytes: &[u8]) -> Result<Capture, String> {
    use crate::abi::get_u32;
    use crate::snapshot::features::bit;
    use flightrec_perfdata::reader::parse;

    let file = parse(bytes).map_err(|e| e.to_string())?;
    let attr_size = crate::abi::get_u64(bytes, 0x10) as usize;
    if attr_size < crate::abi::ATTR_SIZE + 16 {
        return Err(format!("attr size {attr_size} too small"));
    }
    let (attrs_off, attrs_len) = (file.attrs.0 as usize, file.attrs.1 as usize);
    let mut events = Vec::new();
    for entry in bytes[attrs_off..attrs_off + attrs_len].chunks_exact(attr_size) {
        let attr = EventAttr::from_bytes(entry).ok_or("short attr")?;
        let ids_off = crate::abi::get_u64(entry, attr_size - 16) as usize;
        let ids_len = crate::abi::get_u64(entry, attr_size - 8) as usize;
        let ids = bytes
            .get(ids_off..ids_off + ids_len)
            .ok_or("ids out of bounds")?
            .chunks_exact(8)
            .map(|c| crate::abi::get_u64(c, 0))
            .collect();
        events.push(EventDescriptor {
            name: String::new(),
            attr,
            ids,
            tracepoint: None,
        });
    }
    // Names from EVENT_DESC.
    if let Some((_, desc)) = file.features.iter().find(|(b, _)| *b == bit::EVENT_DESC) {
        let nr = get_u32(desc, 0) as usize;
        let sz = get_u32(desc, 4) as usize;
        let mut pos = 8;
        for e in events.iter_mut().take(nr) {
            pos += sz;
            let nr_ids = get_u32(desc, pos) as usize;
            let len = get_u32(desc, pos + 4) as usize;
            let name = &desc[pos + 8..pos + 8 + len];
            let end = name.iter().position(|&b| b == 0).unwrap_or(len);
            e.name = String::from_utf8_lossy(&name[..end]).into_owned();
            pos += 8 + len + nr_ids * 8;
        }
    }
    for e in &mut events {
        if e.attr.type_ == event_type::TRACEPOINT
            && let Some((s, n)) = e.name.split_once(':')
        {
            e.tracepoint = Some((s.to_string(), n.to_string()));
        }
    }
    let attr_of = |id: u64| {
        events
            .iter()
            .find(|e| e.ids.contains(&id))
            .map(|e| e.attr)
            .or_else(|| events.first().map(|e| e.attr))
    };

    let mut per_cpu: std::collections::BTreeMap<u32, (Vec<&[u8]>, u64, u64)> = Default::default();
    let mut tracking_records = Vec::new();
    let mut tracking_record_count = 0;
    let data = file.data;
    let mut pos = 0;
    while let Some(h) = RecordHeader::parse(&data[pos..]) {
        let size = usize::from(h.size);
        if size < HEADER_SIZE || pos + size > data.len() {
            return Err(format!("bad record at data offset {pos}"));
        }
        let r = &data[pos..pos + size];
        pos += size;
        if h.type_ == record_type::SAMPLE {
            let Some(attr) = attr_of(crate::abi::get_u64(r, 8)) else {
                continue;
            };
            let st = attr.sample_type;
            let mut off = 8;
            let mut time = 0;
            let mut cpu = 0;
            for (flag, is_time, is_cpu) in [
                (sample::IDENTIFIER, false, false),
                (sample::IP, false, false),
                (sample::TID, false, false),
                (sample::TIME, true, false),
                (sample::ADDR, false, false),
                (sample::ID, false, false),
                (sample::STREAM_ID, false, false),
                (sample::CPU, false, true),
            ] {
                if st & flag != 0 && off + 8 <= r.len() {
                    if is_time {
                        time = crate::abi::get_u64(r, off);
                    }
                    if is_cpu {
                        cpu = get_u32(r, off);
                    }
                    off += 8;
                }
            }
            let e = per_cpu.entry(cpu).or_insert((Vec::new(), u64::MAX, 0));
            e.0.push(r);
            e.1 = e.1.min(time);
            e.2 = e.2.max(time);
        } else if h.is_kernel_type() {
            tracking_records.extend_from_slice(r);
            tracking_record_count += 1;
        }
    }
    let cpus: Vec<CpuCapture> = per_cpu
        .into_iter()
        .map(|(cpu, (records, oldest, newest))| CpuCapture {
            cpu,
            record_count: records.len() as u64,
            records: records.into_iter().rev().collect::<Vec<_>>().concat(),
            ring_bytes: 0,
            wrapped: false,
            oldest_ns: Some(oldest),
            newest_ns: Some(newest),
            ..Default::default()
        })
        .collect();
    let window_start_ns = cpus.iter().filter_map(|c| c.oldest_ns).min().unwrap_or(0);
    Ok(Capture {
        events,
        cpus,
        processes: Vec::new(),
        tracking_records,
        tracking_record_count,
        tracking_lost: 0,
        window_start_ns,
        kernel_text: None,
        loaded_modules: Vec::new(),
    })
}
