//! Hand-built captures for the writer's tests and benchmarks: the records a
//! sample ring and a tracking ring would hold, without a kernel.
//! [`synthetic_capture`] and [`synthetic_host`] make a whole capture;
//! [`capture_from_perf_data`] turns a file `perf record` wrote into one.

mod from_file;
mod synthetic;

pub use from_file::capture_from_perf_data;
pub use synthetic::*;

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
