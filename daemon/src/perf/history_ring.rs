//! Per-CPU history rings: with `[history]` on, every configured event is
//! opened once more on each CPU, writing forward into a ring mapped
//! read-write, so the kernel never overwrites what the history writer has
//! not drained; when the writer falls behind the kernel drops records and
//! says so with a LOST record in the ring, which the history keeps.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::event::ResolvedEvent;
use super::forward_ring::ForwardRing;
use super::mapping::Access;
use super::sample_ring::open_event_set;
use super::{PerfError, sys};
use crate::abi::attr_flag;

pub struct HistoryRing {
    cpu: u32,
    /// One fd per event, in the order of the events; the first owns the ring.
    fds: Vec<OwnedFd>,
    names: Vec<String>,
    ids: Vec<u64>,
    ring: ForwardRing,
}

/// `event` as the history opens it: written forward, the drain woken when
/// a quarter of a ring of `data_size` bytes is full, so that it has three
/// quarters of the ring's time to be scheduled before the kernel drops.
fn forward(event: &ResolvedEvent, data_size: usize) -> ResolvedEvent {
    let mut e = event.clone();
    e.attr.flags &= !attr_flag::WRITE_BACKWARD;
    e.attr.flags |= attr_flag::WATERMARK;
    e.attr.wakeup = u32::try_from(data_size / 4).unwrap_or(u32::MAX).max(1);
    e
}

impl HistoryRing {
    /// Opens every event on `cpu`, disabled, sharing one forward ring of
    /// `data_pages` pages (a power of two).
    pub fn open(cpu: u32, events: &[ResolvedEvent], data_pages: usize) -> Result<Self, PerfError> {
        let data_size = data_pages.saturating_mul(sys::page_size());
        let events: Vec<ResolvedEvent> = events.iter().map(|e| forward(e, data_size)).collect();
        let set = open_event_set(cpu, &events, data_pages, Access::ReadWrite, "history")?;
        Ok(Self {
            cpu,
            fds: set.fds,
            names: set.names,
            ids: set.ids,
            ring: ForwardRing::new(set.map),
        })
    }

    pub fn cpu(&self) -> u32 {
        self.cpu
    }

    /// Kernel ids of the events on this CPU, in the order of the events.
    pub fn ids(&self) -> &[u64] {
        &self.ids
    }

    /// The fd to poll for watermark wakeups.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fds[0].as_fd()
    }

    pub fn enable(&self) -> Result<(), PerfError> {
        for (fd, name) in self.fds.iter().zip(&self.names) {
            sys::enable(fd.as_fd()).map_err(|source| PerfError::Ioctl {
                op: "PERF_EVENT_IOC_ENABLE",
                event: name.clone(),
                cpu: self.cpu,
                source,
            })?;
        }
        Ok(())
    }

    /// Hands `f` every record published since the last drain in place
    /// (two parts where the ring wraps) and releases the space to the
    /// kernel. Returns the bytes handed.
    pub fn drain_in_place(&mut self, f: &mut dyn FnMut(&[u8], &[u8])) -> usize {
        self.ring.drain_in_place(f)
    }
}
