//! Condition rings: a tracepoint that a `[[trigger]]` watches, opened on
//! one CPU with its filter, sampling every hit into a small forward ring
//! that wakes a poll(2) on each record. Separate from the sample rings, so
//! a condition never has to parse what the flight recorder keeps. A hit
//! may also carry the task's cgroup id (`PERF_SAMPLE_CGROUP`, for a
//! trigger whose snapshots hold the cgroup that fired it) and the
//! tracepoint's fields (`PERF_SAMPLE_RAW`, for the OOM victim).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::abi::{EventAttr, attr_flag, event_type, sample};

use super::forward_ring::ForwardRing;
use super::mapping::{Access, RingMap};
use super::{PerfError, sys};

/// Data pages of a condition ring: 8 KiB holds about 200 hits between two
/// reads; beyond that the kernel counts them in a LOST record.
pub const CONDITION_RING_PAGES: usize = 2;

/// What a condition sample holds at least: `pid, tid` then `time` then
/// `cpu, res`.
pub const CONDITION_SAMPLE_TYPE: u64 = sample::TID | sample::TIME | sample::CPU;
/// What a condition sample may hold besides: the raw fields and the
/// cgroup id, after the others.
pub const CONDITION_EXTRA_FIELDS: u64 = sample::RAW | sample::CGROUP;

/// The attr of a condition on tracepoint `id`: every hit sampled, a wakeup
/// per record; `extra` among [`CONDITION_EXTRA_FIELDS`].
pub fn condition_attr(tracepoint_id: u64, extra: u64) -> EventAttr {
    EventAttr {
        type_: event_type::TRACEPOINT,
        config: tracepoint_id,
        sample_period_or_freq: 1,
        sample_type: CONDITION_SAMPLE_TYPE | (extra & CONDITION_EXTRA_FIELDS),
        flags: attr_flag::DISABLED,
        wakeup: 1,
        ..EventAttr::default()
    }
}

pub struct ConditionRing {
    name: String,
    cpu: u32,
    fd: OwnedFd,
    ring: ForwardRing,
}

impl ConditionRing {
    /// Opens tracepoint `name` (id `tracepoint_id`) on `cpu` with `filter`,
    /// sampling the fields of [`CONDITION_SAMPLE_TYPE`] and `extra`,
    /// disabled until [`ConditionRing::enable`].
    pub fn open(
        name: &str,
        tracepoint_id: u64,
        filter: Option<&str>,
        cpu: u32,
        extra: u64,
    ) -> Result<Self, PerfError> {
        let open_err = |source: std::io::Error| PerfError::Open {
            event: name.into(),
            cpu,
            reason: sys::open_failure_reason(&source, false),
            source,
        };
        let cpu_arg = i32::try_from(cpu)
            .map_err(|_| open_err(std::io::Error::from_raw_os_error(libc::EINVAL)))?;
        let fd = sys::perf_event_open(&condition_attr(tracepoint_id, extra), -1, cpu_arg)
            .map_err(open_err)?;
        if let Some(filter) = filter {
            sys::set_filter(fd.as_fd(), filter).map_err(|source| PerfError::Filter {
                event: name.into(),
                filter: filter.into(),
                source,
            })?;
        }
        let map = RingMap::new(
            &fd,
            CONDITION_RING_PAGES,
            Access::ReadWrite,
            "condition",
            cpu,
        )?;
        Ok(Self {
            name: name.into(),
            cpu,
            fd,
            ring: ForwardRing::new(map),
        })
    }

    pub fn cpu(&self) -> u32 {
        self.cpu
    }

    /// The fd to poll: readable once a record is published.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub fn enable(&self) -> Result<(), PerfError> {
        sys::enable(self.fd.as_fd()).map_err(|source| PerfError::Ioctl {
            op: "PERF_EVENT_IOC_ENABLE",
            event: self.name.clone(),
            cpu: self.cpu,
            source,
        })
    }

    /// Appends the records published since the last drain to `out`.
    pub fn drain(&mut self, out: &mut Vec<u8>) -> usize {
        self.ring.drain(out)
    }
}
