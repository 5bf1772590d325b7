//! How far back the memory rings reach right now, without freezing them
//! (`snapctl status`): a walk over the record headers of the live ring,
//! read a few bytes at a time (no copy of the ring), then over the standby
//! ring's earlier window when the live one reaches back to it, as a
//! capture would. Bytes of the live ring are trusted only where a
//! `data_head` re-read proves the kernel has not written since; no lock a
//! capture takes is held.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::capture::WRITER_GRACE;
use super::rings::{CpuRing, Live, RingSet};
use crate::abi::layout::RecordLayouts;
use crate::abi::{HEADER_SIZE, RecordHeader};
use crate::perf::sample_ring::SampleRing;
use flightrec_perfdata::records::check_header;

/// What one CPU's memory rings hold right now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingReach {
    /// Sample times (sample clock, ns) of the oldest and newest records.
    pub oldest_ns: Option<u64>,
    pub newest_ns: Option<u64>,
    pub records: u64,
}

/// Tries before giving up on a CPU whose rings switch (a capture) or
/// overwrite faster than the walk can follow.
const TRIES: usize = 4;

/// The oldest record any CPU's rings hold now (`forget`); None when a
/// CPU's rings hold nothing yet or cannot be read steadily (how far back
/// a capture reaches is not known then).
pub(super) fn oldest_held(live: &Live) -> Option<u64> {
    let rings = live.rings();
    let mut oldest: Option<u64> = None;
    for cpu in &rings.cpus {
        let held = reach_of(cpu, &rings.layouts).oldest_ns?;
        oldest = Some(oldest.map_or(held, |o| o.min(held)));
    }
    oldest
}

/// What `cpu`'s rings hold now; zero when they cannot be read steadily.
pub(super) fn reach_of(cpu: &CpuRing, layouts: &RecordLayouts) -> RingReach {
    for _ in 0..TRIES {
        let active = cpu.active.load(Ordering::Acquire);
        let reach = reach_from(cpu, active, layouts);
        // A capture switched the sets meanwhile: what was read may belong
        // to either; read again.
        if cpu.active.load(Ordering::Acquire) == active
            && let Some(reach) = reach
        {
            return reach;
        }
    }
    RingReach::default()
}

fn reach_from(cpu: &CpuRing, active: usize, layouts: &RecordLayouts) -> Option<RingReach> {
    let set = &cpu.sets[active];
    let ring = &set.ring;
    let head = ring.data_head();
    let since_enabled = set
        .enabled_at_head
        .load(Ordering::Acquire)
        .wrapping_sub(head);
    let records = walk(ring, head, since_enabled);
    let newest = records
        .first()
        .and_then(|&r| time_of(ring, head, r, layouts));
    let (kept, oldest) = oldest_trusted(ring, head, &records, layouts)?;
    let mut reach = RingReach {
        oldest_ns: oldest,
        newest_ns: newest,
        records: kept as u64,
    };
    let walked: u64 = records.iter().map(|&(_, len)| u64::from(len)).sum();
    if kept == records.len() && walked == since_enabled && cpu.sets.len() > 1 {
        let standby: &RingSet = &cpu.sets[(active + 1) % cpu.sets.len()];
        let still = standby.ring.data_head();
        let len = standby
            .enabled_at_head
            .load(Ordering::Acquire)
            .wrapping_sub(still);
        let earlier = walk(&standby.ring, still, len);
        if let Some(&last) = earlier.last() {
            reach.records += earlier.len() as u64;
            reach.oldest_ns = time_of(&standby.ring, still, last, layouts).or(reach.oldest_ns);
            reach.newest_ns = reach.newest_ns.or_else(|| {
                earlier
                    .first()
                    .and_then(|&r| time_of(&standby.ring, still, r, layouts))
            });
        }
    }
    Some(reach)
}

/// The records from `head` toward older ones, at most `limit` bytes (and
/// the data size): `(offset from head, size)`, newest first. Stops at the
/// first header that cannot be a record.
fn walk(ring: &SampleRing, head: u64, limit: u64) -> Vec<(u64, u16)> {
    let data_size = ring.data_size() as u64;
    let limit = limit.min(data_size);
    let mut out = Vec::new();
    let mut pos = 0u64;
    while pos + HEADER_SIZE as u64 <= limit {
        let mut bytes = [0u8; HEADER_SIZE];
        if !ring.read_wrapping(head.wrapping_add(pos), &mut bytes) {
            break;
        }
        let Some(header) = RecordHeader::parse(&bytes) else {
            break;
        };
        if header.size == 0 || check_header(&header, data_size).is_err() {
            break;
        }
        let len = u64::from(header.size);
        if pos + len > limit {
            break;
        }
        out.push((pos, header.size));
        pos += len;
    }
    out
}

/// The records of `records` the kernel has not overwritten, and the time
/// of the oldest of them, read and then proved untouched by a re-read of
/// `data_head`. None when the ring overwrites faster than this follows.
fn oldest_trusted(
    ring: &SampleRing,
    head: u64,
    records: &[(u64, u16)],
    layouts: &RecordLayouts,
) -> Option<(usize, Option<u64>)> {
    let data_size = ring.data_size() as u64;
    let trusted = || {
        let now = Instant::now();
        while now.elapsed() < WRITER_GRACE {
            std::hint::spin_loop();
        }
        data_size.saturating_sub(head.wrapping_sub(ring.data_head()))
    };
    let mut kept = records.len();
    for _ in 0..TRIES {
        let limit = trusted();
        while kept > 0 && records[kept - 1].0 + u64::from(records[kept - 1].1) > limit {
            kept -= 1;
        }
        let Some(&oldest) = kept.checked_sub(1).map(|i| &records[i]) else {
            return Some((0, None));
        };
        let time = time_of(ring, head, oldest, layouts);
        if oldest.0 + u64::from(oldest.1) <= trusted() {
            return Some((kept, time));
        }
    }
    None
}

/// The sample time of the record at `offset` from `head`.
fn time_of(
    ring: &SampleRing,
    head: u64,
    (offset, len): (u64, u16),
    layouts: &RecordLayouts,
) -> Option<u64> {
    let mut record = vec![0u8; usize::from(len)];
    ring.read_wrapping(head.wrapping_add(offset), &mut record)
        .then(|| layouts.time_and_cpu(&record).0)
        .flatten()
}
