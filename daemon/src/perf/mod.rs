//! The kernel-facing module: perf_event_open, ioctls and ring mappings behind
//! safe types. It is the only place in the crate allowed to say `unsafe`.
//!
//! - [`event`]: event names as perf users write them → attrs (tracefs, sysctls).
//! - [`cpus`]: the online CPU list.
//! - [`sample_ring`]: per-CPU overwrite rings (`write_backward`, PROT_READ),
//!   pause/resume and copy-out.
//! - [`tracking_ring`]: per-CPU forward rings of the tracking `dummy` event,
//!   drained by advancing `data_tail` (`forward_ring`).
//! - [`condition_ring`]: per-CPU forward rings of a tracepoint a
//!   `[[trigger]]` watches.
//! - [`sched`]: SCHED_FIFO for the threads that freeze the rings, the
//!   writer's nice and the niced background workers.
//! - [`heap`]: freed heap memory given back to the kernel after each dump.
//! - [`aio`]: a snapshot's direct writes in flight while the next is filled.
//! - `sys`: the syscalls and ioctls themselves, each through one errno check.
//!
//! See perf_event_open(2) and include/uapi/linux/perf_event.h.
#![allow(unsafe_code)]

pub mod aio;
pub mod condition_ring;
pub mod cpus;
pub mod event;
mod forward_ring;
pub mod heap;
mod mapping;
pub mod sample_ring;
pub mod sched;
mod sys;
pub mod tracking_ring;

pub use sys::page_size;

use std::io;

/// Failures of the kernel calls, naming the event and CPU concerned.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error("perf_event_open for {event} on CPU {cpu} failed: {reason}")]
    Open {
        event: String,
        cpu: u32,
        reason: String,
        #[source]
        source: io::Error,
    },
    #[error("filter '{filter}' rejected for {event}: {source}")]
    Filter {
        event: String,
        filter: String,
        #[source]
        source: io::Error,
    },
    #[error("mapping the {what} ring of CPU {cpu} ({bytes} bytes) failed: {source}")]
    Mmap {
        what: &'static str,
        cpu: u32,
        bytes: usize,
        #[source]
        source: io::Error,
    },
    #[error("the {what} ring of CPU {cpu} has an unexpected layout: {detail}")]
    Layout {
        what: &'static str,
        cpu: u32,
        detail: String,
    },
    #[error("{op} for {event} on CPU {cpu} failed: {source}")]
    Ioctl {
        op: &'static str,
        event: String,
        cpu: u32,
        #[source]
        source: io::Error,
    },
    #[error("reading the counters of {event} on CPU {cpu} failed: {source}")]
    Read {
        event: String,
        cpu: u32,
        #[source]
        source: io::Error,
    },
    #[error("ring size {bytes} bytes is not usable: {reason}")]
    RingSize { bytes: u64, reason: &'static str },
}

/// Largest data area flightrec maps per ring (the kernel's own limit for a
/// per-CPU ring is of the same order on 64-bit machines).
pub const MAX_RING_BYTES: u64 = 1 << 31;

/// Data pages for a ring of at least `bytes` bytes: rounded up to whole pages
/// and then to a power of two (the kernel requires 2^n data pages).
pub fn data_pages_for(bytes: u64, page_size: usize) -> Result<usize, PerfError> {
    if bytes == 0 {
        return Err(PerfError::RingSize {
            bytes,
            reason: "a ring needs at least one page",
        });
    }
    if bytes > MAX_RING_BYTES {
        return Err(PerfError::RingSize {
            bytes,
            reason: "above the 2 GiB per-ring limit",
        });
    }
    let page = page_size as u64;
    let pages = bytes.div_ceil(page).next_power_of_two();
    usize::try_from(pages).map_err(|_| PerfError::RingSize {
        bytes,
        reason: "does not fit this machine's address space",
    })
}

/// The `wakeup_watermark` of a ring of `data_size` bytes whose reader is
/// woken when a quarter of it is written (at least a byte: 0 would be the
/// kernel's default of half).
pub(crate) fn quarter_ring_watermark(data_size: usize) -> u32 {
    u32::try_from(data_size / 4).unwrap_or(u32::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sizes_round_up_to_power_of_two_pages() {
        assert_eq!(data_pages_for(1, 4096).unwrap(), 1);
        assert_eq!(data_pages_for(4096, 4096).unwrap(), 1);
        assert_eq!(data_pages_for(4097, 4096).unwrap(), 2);
        assert_eq!(data_pages_for(16 * 1024, 4096).unwrap(), 4);
        assert_eq!(data_pages_for(20 * 1024, 4096).unwrap(), 8);
        assert_eq!(data_pages_for(8 << 20, 4096).unwrap(), 2048);
        assert!(data_pages_for(0, 4096).is_err());
        assert!(data_pages_for(u64::MAX, 4096).is_err());
    }
}
