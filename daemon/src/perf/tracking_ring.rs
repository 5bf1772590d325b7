//! Per-CPU tracking rings: one software `dummy` event per CPU that emits only
//! side-band records (COMM, FORK, EXIT, MMAP2), in a forward ring mapped
//! read-write so the kernel never overwrites what flightrec has not read.
//! The drain copies `[data_tail, data_head)` out and advances `data_tail`.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::abi::{EventAttr, attr_flag, event_type, read_format, sample, sw_event};

use super::forward_ring::ForwardRing;
use super::mapping::{Access, RingMap};
use super::{PerfError, sys};

/// perf's name for its tracking dummy event when recording as root.
pub const TRACKING_EVENT_NAME: &str = "dummy:HG";

pub struct TrackingRing {
    cpu: u32,
    /// As opened: without BUILD_ID on kernels older than 5.12.
    attr: EventAttr,
    fd: OwnedFd,
    id: u64,
    ring: ForwardRing,
}

/// What the tracking event records besides tasks, comms and executable
/// maps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrackingOptions {
    /// CGROUP records (cgroup ids to paths).
    pub cgroups: bool,
    /// MMAP2 records of data mappings too: an unwinder of `dwarf` stack
    /// copies (perf's) reads a file's `.eh_frame_hdr` from the read-only
    /// mapping it lies in, as `perf record --call-graph dwarf` records
    /// them.
    pub data_maps: bool,
}

/// The tracking event's attr for a ring of `data_size` bytes: wake the reader
/// when a quarter of the ring is full.
pub fn tracking_attr(data_size: usize, options: TrackingOptions) -> EventAttr {
    let watermark = super::quarter_ring_watermark(data_size);
    EventAttr {
        type_: event_type::SOFTWARE,
        config: sw_event::DUMMY,
        sample_period_or_freq: 1,
        sample_type: sample::IDENTIFIER | sample::TID | sample::TIME | sample::CPU,
        read_format: read_format::ID | read_format::LOST,
        flags: attr_flag::DISABLED
            | attr_flag::MMAP
            | attr_flag::COMM
            | attr_flag::TASK
            | attr_flag::WATERMARK
            | attr_flag::SAMPLE_ID_ALL
            | attr_flag::MMAP2
            | attr_flag::COMM_EXEC
            | attr_flag::USE_CLOCKID
            | attr_flag::BUILD_ID
            | if options.cgroups {
                attr_flag::CGROUP
            } else {
                0
            }
            | if options.data_maps {
                attr_flag::MMAP_DATA
            } else {
                0
            },
        wakeup: watermark,
        clockid: crate::abi::SAMPLE_CLOCKID,
        ..EventAttr::default()
    }
}

impl TrackingRing {
    /// Opens the tracking event on `cpu` with a ring of `data_pages` pages,
    /// disabled until [`TrackingRing::enable`].
    pub fn open(cpu: u32, data_pages: usize, options: TrackingOptions) -> Result<Self, PerfError> {
        let page = sys::page_size();
        let attr = tracking_attr(data_pages.saturating_mul(page), options);
        let open_err = |source: std::io::Error| PerfError::Open {
            event: TRACKING_EVENT_NAME.into(),
            cpu,
            reason: sys::open_failure_reason(&source, false),
            source,
        };
        let cpu_arg = i32::try_from(cpu)
            .map_err(|_| open_err(std::io::Error::from_raw_os_error(libc::EINVAL)))?;
        let mut attr = attr;
        let fd = match sys::perf_event_open(&attr, -1, cpu_arg) {
            // Kernels before 5.12 reject the build_id bit: MMAP2 records
            // then carry maj/min/ino and the drain reads the build-ids.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                attr.flags &= !attr_flag::BUILD_ID;
                sys::perf_event_open(&attr, -1, cpu_arg)
            }
            other => other,
        }
        .map_err(open_err)?;
        let map = RingMap::new(&fd, data_pages, Access::ReadWrite, "tracking", cpu)?;
        let id = sys::event_id(fd.as_fd()).map_err(|source| PerfError::Ioctl {
            op: "PERF_EVENT_IOC_ID",
            event: TRACKING_EVENT_NAME.into(),
            cpu,
            source,
        })?;
        Ok(Self {
            cpu,
            attr,
            fd,
            id,
            ring: ForwardRing::new(map),
        })
    }

    pub fn cpu(&self) -> u32 {
        self.cpu
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// The attr the event was opened with.
    pub fn attr(&self) -> EventAttr {
        self.attr
    }

    /// The fd to poll for watermark wakeups.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub fn enable(&self) -> Result<(), PerfError> {
        sys::enable(self.fd.as_fd()).map_err(|source| PerfError::Ioctl {
            op: "PERF_EVENT_IOC_ENABLE",
            event: TRACKING_EVENT_NAME.into(),
            cpu: self.cpu,
            source,
        })
    }

    /// Appends every record published since the last drain to `out` and
    /// releases the space to the kernel. Returns the bytes appended.
    pub fn drain(&mut self, out: &mut Vec<u8>) -> usize {
        self.ring.drain(out)
    }
}
