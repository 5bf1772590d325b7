//! Per-CPU sample rings: every configured event opened on one CPU
//! (`pid = -1`), all writing into one `write_backward` ring mapped PROT_READ,
//! so the kernel overwrites the oldest records and nobody reads them until a
//! capture pauses the ring and copies it out.

use std::os::fd::{AsFd, OwnedFd};

use super::event::ResolvedEvent;
use super::mapping::{Access, RingMap};
use super::{PerfError, sys};
use crate::abi::{EventAttr, attr_flag};

pub struct SampleRing {
    cpu: u32,
    /// One fd per event, in the order of the events; the first owns the ring.
    fds: Vec<OwnedFd>,
    names: Vec<String>,
    ids: Vec<u64>,
    map: RingMap,
}

/// `read(2)` of a non-group event with `read_format = ID | LOST`:
/// value, id, lost.
const READ_SIZE: usize = 24;

fn open_event(event: &ResolvedEvent, cpu: u32) -> Result<OwnedFd, PerfError> {
    open_event_as(event, &event.attr, cpu)
}

/// [`open_event`] with `attr` in place of the event's own.
fn open_event_as(event: &ResolvedEvent, attr: &EventAttr, cpu: u32) -> Result<OwnedFd, PerfError> {
    let cpu_arg = i32::try_from(cpu).map_err(|_| PerfError::Open {
        event: event.name.clone(),
        cpu,
        reason: "CPU number out of range".into(),
        source: std::io::Error::from_raw_os_error(libc::EINVAL),
    })?;
    let fd = sys::perf_event_open(attr, -1, cpu_arg).map_err(|source| PerfError::Open {
        event: event.name.clone(),
        cpu,
        reason: sys::open_failure_reason(&source, event.is_hardware()),
        source,
    })?;
    if let Some(filter) = &event.filter {
        sys::set_filter(fd.as_fd(), filter).map_err(|source| PerfError::Filter {
            event: event.name.clone(),
            filter: filter.clone(),
            source,
        })?;
    }
    Ok(fd)
}

/// Opens `event` on `cpu` just long enough for the kernel to accept or
/// refuse its filter (`--check-config`, and before the rings are opened so
/// a refused filter is blamed on its `[[event]]`).
pub fn check_filter(event: &ResolvedEvent, cpu: u32) -> Result<(), PerfError> {
    open_event(event, cpu).map(drop)
}

/// The attr of the event that owns a ring of `data_size` bytes: `attr`,
/// waking a reader of the ring (the history's drain) when a quarter of it
/// is written, where the kernel's default is half. A reader woken late
/// (held off a CPU under load) then has three quarters of a ring before
/// the kernel overwrites what it has not read. Only the owner's attr sets
/// the ring's watermark; nothing but its fd's wakeups change, and
/// snapshot files keep the event's own attr.
fn owner_attr(attr: &EventAttr, data_size: usize) -> EventAttr {
    EventAttr {
        flags: attr.flags | attr_flag::WATERMARK,
        wakeup: super::quarter_ring_watermark(data_size),
        ..*attr
    }
}

impl SampleRing {
    /// Opens every event on `cpu`, disabled, sharing one ring of
    /// `data_pages` pages (a power of two), mapped read-only: the kernel
    /// overwrites it.
    pub fn open(cpu: u32, events: &[ResolvedEvent], data_pages: usize) -> Result<Self, PerfError> {
        let what = "sample";
        let Some(first) = events.first() else {
            return Err(PerfError::Layout {
                what,
                cpu,
                detail: "no events configured".into(),
            });
        };
        let owner = open_event_as(
            first,
            &owner_attr(&first.attr, data_pages.saturating_mul(sys::page_size())),
            cpu,
        )?;
        let map = RingMap::new(&owner, data_pages, Access::ReadOnly, what, cpu)?;
        let mut fds = vec![owner];
        for event in &events[1..] {
            let fd = open_event(event, cpu)?;
            sys::set_output(fd.as_fd(), fds[0].as_fd()).map_err(|source| PerfError::Ioctl {
                op: "PERF_EVENT_IOC_SET_OUTPUT",
                event: event.name.clone(),
                cpu,
                source,
            })?;
            fds.push(fd);
        }
        let names: Vec<String> = events.iter().map(|e| e.name.clone()).collect();
        let ids = fds
            .iter()
            .zip(&names)
            .map(|(fd, name)| {
                sys::event_id(fd.as_fd()).map_err(|source| PerfError::Ioctl {
                    op: "PERF_EVENT_IOC_ID",
                    event: name.clone(),
                    cpu,
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            cpu,
            fds,
            names,
            ids,
            map,
        })
    }

    pub fn cpu(&self) -> u32 {
        self.cpu
    }

    /// Kernel ids of the events on this CPU, in the order of the events.
    pub fn ids(&self) -> &[u64] {
        &self.ids
    }

    pub fn data_size(&self) -> usize {
        self.map.data_size()
    }

    /// The fd to poll for the ring's wakeups.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fds[0].as_fd()
    }

    fn each_fd(
        &self,
        op: &'static str,
        f: impl Fn(std::os::fd::BorrowedFd<'_>) -> std::io::Result<()>,
    ) -> Result<(), PerfError> {
        for (fd, name) in self.fds.iter().zip(&self.names) {
            f(fd.as_fd()).map_err(|source| PerfError::Ioctl {
                op,
                event: name.clone(),
                cpu: self.cpu,
                source,
            })?;
        }
        Ok(())
    }

    pub fn enable(&self) -> Result<(), PerfError> {
        self.each_fd("PERF_EVENT_IOC_ENABLE", sys::enable)
    }

    pub fn disable(&self) -> Result<(), PerfError> {
        self.each_fd("PERF_EVENT_IOC_DISABLE", sys::disable)
    }

    fn pause_output(&self, pause: bool) -> Result<(), PerfError> {
        // Pausing the ring through its owner pauses every event writing to it.
        sys::pause_output(self.fds[0].as_fd(), pause).map_err(|source| PerfError::Ioctl {
            op: "PERF_EVENT_IOC_PAUSE_OUTPUT",
            event: self.names[0].clone(),
            cpu: self.cpu,
            source,
        })
    }

    /// Stops the kernel writing to the ring (writes are dropped and counted).
    pub fn pause(&self) -> Result<(), PerfError> {
        self.pause_output(true)
    }

    pub fn resume(&self) -> Result<(), PerfError> {
        self.pause_output(false)
    }

    /// `data_head` (acquire): decreases from 0 as a wrapping u64.
    pub fn data_head(&self) -> u64 {
        self.map.data_head()
    }

    /// Copies the part of the data area written so far, as seen at `head`
    /// (`min(0 - head, data_size)` bytes, ending at the end of the area for
    /// an unwrapped ring), to the same offsets of `dst`, which must be
    /// `data_size` long. Returns the bytes copied.
    pub fn copy_used(&self, head: u64, dst: &mut [u8]) -> usize {
        let size = self.map.data_size();
        if dst.len() != size {
            return 0;
        }
        let written = 0u64.wrapping_sub(head);
        let used = usize::try_from(written).map_or(size, |w| w.min(size));
        // Backward writing: the records occupy [size - used, size) until the
        // ring wraps, then all of it.
        let start = size - used;
        if self.map.copy_out(start, &mut dst[start..]) {
            used
        } else {
            0
        }
    }

    /// Copies `dst.len()` bytes of the data area from `offset` (taken
    /// modulo the data size), wrapping at its end: a few bytes of a live
    /// ring, which the caller checks against `data_head` re-reads.
    pub fn read_wrapping(&self, offset: u64, dst: &mut [u8]) -> bool {
        let size = self.map.data_size();
        if dst.len() > size {
            return false;
        }
        let start = (offset % size as u64) as usize;
        let first = dst.len().min(size - start);
        let (a, b) = dst.split_at_mut(first);
        self.map.copy_out(start, a) && self.map.copy_out(0, b)
    }

    /// Samples the kernel dropped on this CPU (paused ring), summed over the
    /// events, from `read_format`'s LOST counter.
    pub fn lost(&self) -> Result<u64, PerfError> {
        let mut total = 0u64;
        for (fd, name) in self.fds.iter().zip(&self.names) {
            let mut buf = [0u8; READ_SIZE];
            let n = sys::read(fd.as_fd(), &mut buf).map_err(|source| PerfError::Read {
                event: name.clone(),
                cpu: self.cpu,
                source,
            })?;
            if n != READ_SIZE {
                return Err(PerfError::Read {
                    event: name.clone(),
                    cpu: self.cpu,
                    source: std::io::Error::other(format!(
                        "read {n} bytes, expected {READ_SIZE} (value, id, lost)"
                    )),
                });
            }
            total = total.wrapping_add(crate::abi::get_u64(&buf, 16));
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rings_owner_wakes_its_reader_at_a_quarter_of_the_ring_and_changes_nothing_else() {
        let attr = EventAttr {
            type_: 1,
            sample_type: 0x1_0107,
            flags: attr_flag::DISABLED | attr_flag::WRITE_BACKWARD,
            ..EventAttr::default()
        };
        let owner = owner_attr(&attr, 4 << 20);
        assert_eq!(owner.wakeup, 1 << 20);
        assert_eq!(owner.flags, attr.flags | attr_flag::WATERMARK);
        assert_eq!(
            EventAttr {
                flags: attr.flags,
                wakeup: attr.wakeup,
                ..owner
            },
            attr
        );
        // A ring too small for a quarter in bytes still wakes (0 would
        // be the kernel's default of half).
        assert_eq!(owner_attr(&attr, 2).wakeup, 1);
    }
}
