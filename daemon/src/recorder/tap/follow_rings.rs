//! The tap over the recorder's own rings: one kernel copy of each sample.
//! Each look reads what every set of every CPU published since the last
//! one (`ring::follow`), without pausing or switching anything: the rings
//! keep their look-back for captures exactly as without the tap.
//!
//! With the lossless freeze a capture switches a CPU to its standby set:
//! a look reads the set that stopped first (its last records are older),
//! then the one recording; the microseconds both record at a switch are
//! kept from both, as each set sampled them.
//!
//! The rings overwrite: a reader that falls more than a ring behind loses
//! the oldest bytes it had not read, and the kernel does not count them.
//! They are counted here, in a LOST record put before the records that
//! follow them, in samples estimated from the mean size of the records
//! this set published so far (the bytes lost are exact, the count is
//! not).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags};

use super::{CpuRecords, lock};
use crate::recorder::capture::WRITER_GRACE;
use crate::recorder::rings::{CpuRing, Rings};
use crate::ring::follow::follow;
use flightrec_perfdata::encode::{SampleId, push_lost};

/// More than the LOST record a look may put before its records takes (a
/// header, two words and a sample_id of at most six).
const LOST_RECORD_BYTES: usize = 128;

/// Where each ring was at the last look.
#[derive(Default)]
pub(in crate::recorder) struct FollowRings {
    state: Mutex<Looks>,
    /// See [`super::RecordTap::unwinding_since`]: a sample time, 0 for
    /// none (the sample clock counts from boot).
    unwinding_since: AtomicU64,
}

#[derive(Default)]
struct Looks {
    /// Per CPU ring (a CPU that came online again has a new one).
    cpus: Vec<(Arc<CpuRing>, Vec<SetLook>)>,
    copy: Vec<u8>,
    out: Vec<u8>,
}

/// One set's ring at the last look.
#[derive(Default, Clone, Copy)]
struct SetLook {
    /// `data_head` then (the kernel's starts at 0).
    head: u64,
    /// Bytes and records followed so far: their mean sizes the samples a
    /// lost stretch held.
    bytes: u64,
    records: u64,
    /// Sample time of the newest record followed.
    newest_ns: u64,
}

fn read(rings: &RwLock<Rings>) -> RwLockReadGuard<'_, Rings> {
    rings
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl FollowRings {
    pub(super) fn set_unwinding_since(&self, at_ns: Option<u64>) {
        self.unwinding_since
            .store(at_ns.unwrap_or(0), Ordering::Release);
    }

    /// Since when the reader has drained records it has not unwound yet
    /// ([`super::RecordTap::unwinding_since`]).
    pub(in crate::recorder) fn unwinding_since(&self) -> Option<u64> {
        Some(self.unwinding_since.load(Ordering::Acquire)).filter(|&at| at != 0)
    }

    pub(super) fn ring_bytes(&self, rings: &RwLock<Rings>) -> usize {
        read(rings)
            .cpus
            .iter()
            .map(|c| c.data_size().saturating_mul(c.sets.len()))
            .sum()
    }

    /// Every set's fd (the kernel wakes a reader when a quarter of a ring
    /// is written: the watermark `perf::sample_ring` asks for).
    pub(super) fn watch(&self, rings: &RwLock<Rings>, epoll: &Epoll) -> nix::Result<()> {
        let mut i = 0u64;
        for cpu in &read(rings).cpus {
            for set in &cpu.sets {
                epoll.add(set.ring.fd(), EpollEvent::new(EpollFlags::EPOLLIN, i))?;
                i += 1;
            }
        }
        Ok(())
    }

    pub(super) fn drain(&self, rings: &RwLock<Rings>, f: &mut CpuRecords<'_>) {
        let rings = read(rings);
        let mut looks = lock(&self.state);
        let Looks { cpus, copy, out } = &mut *looks;
        cpus.retain(|(ring, _)| rings.cpus.iter().any(|r| Arc::ptr_eq(r, ring)));
        for ring in &rings.cpus {
            let at = match cpus.iter().position(|(r, _)| Arc::ptr_eq(r, ring)) {
                Some(at) => at,
                None => {
                    cpus.push((Arc::clone(ring), vec![SetLook::default(); ring.sets.len()]));
                    cpus.len() - 1
                }
            };
            let sets = &mut cpus[at].1;
            // The set not recording now first: what it holds is older.
            let active = ring.active.load(Ordering::Acquire);
            let order = (0..ring.sets.len())
                .filter(|&s| s != active)
                .chain([active]);
            for s in order {
                if look(ring, s, &mut sets[s], &rings, copy, out) {
                    f(ring.cpu(), out);
                }
            }
        }
    }
}

/// Puts in `out` what set `s` of `ring` published since `last`, oldest
/// first; false when it published nothing.
fn look(
    ring: &CpuRing,
    s: usize,
    last: &mut SetLook,
    rings: &Rings,
    copy: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> bool {
    let set = &ring.sets[s].ring;
    let head = set.data_head();
    let published = last.head.wrapping_sub(head);
    if published == 0 {
        return false;
    }
    let size = set.data_size();
    let len = usize::try_from(published).map_or(size, |p| p.min(size));
    // Kept at its longest: a resize to each look's length zeroes what it
    // grows by, bytes the copy overwrites anyway.
    if copy.len() < len {
        copy.resize(len, 0);
    }
    let copy = &mut copy[..len];
    if !set.read_wrapping(head, copy) {
        return false;
    }
    // A writer past its reservation publishes its head when done: wait
    // for it before the re-read says how far the kernel reached.
    let copied_at = std::time::Instant::now();
    while copied_at.elapsed() < WRITER_GRACE {
        std::hint::spin_loop();
    }
    let during = head.wrapping_sub(set.data_head());
    let intact = usize::try_from((size as u64).saturating_sub(during)).unwrap_or(0);
    let followed = follow(copy, published, intact);
    last.head = head;
    // The consumer may have taken the last buffer and left a smaller one:
    // a new one of the size needed rather than one grown by `realloc`,
    // which copies the old allocation's bytes, used or not.
    let needed = len + LOST_RECORD_BYTES;
    if out.capacity() < needed {
        *out = Vec::with_capacity(needed);
    } else {
        out.clear();
    }
    let oldest = followed
        .records
        .last()
        .map(|&(at, len)| &copy[at..at + len]);
    if followed.lost_bytes > 0 {
        let mean = last.bytes.checked_div(last.records).unwrap_or(0).max(8);
        let lost = followed.lost_bytes.div_ceil(mean);
        let time = oldest
            .and_then(|r| rings.layouts.time_and_cpu(r).0)
            .unwrap_or(last.newest_ns);
        if let (Some(event), Some(&id)) = (rings.events.first(), set.ids().first()) {
            let sample_id = SampleId {
                pid: 0,
                tid: 0,
                time,
                id,
                cpu: ring.cpu(),
            };
            push_lost(out, &event.attr, id, lost, &sample_id);
        }
    }
    for &(at, len) in followed.records.iter().rev() {
        out.extend_from_slice(&copy[at..at + len]);
    }
    last.bytes += followed
        .records
        .iter()
        .map(|&(_, len)| len as u64)
        .sum::<u64>();
    last.records += followed.records.len() as u64;
    if let Some(&(at, len)) = followed.records.first()
        && let Some(t) = rings.layouts.time_and_cpu(&copy[at..at + len]).0
    {
        last.newest_ns = t;
    }
    !out.is_empty()
}
