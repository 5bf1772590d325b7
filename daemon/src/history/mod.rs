//! The history tier (`[history]`, off by default): the look-back kept on
//! disk, minutes rather than the seconds the memory rings hold.
//!
//! With it on, the recorder opens every event once more per CPU into a
//! forward ring that is never overwritten (`perf::history_ring`); the
//! writer (`writer`) drains those rings and the tracking records a few
//! times a second into zstd frames appended to segment files (`segment`,
//! the format), each starting with the events it uses and a checkpoint of
//! every process, and drops whole segments by age and bytes (`retention`).
//! A dump whose window starts before what the rings hold is cut from the
//! segments instead (`read`, then [`capture_from_history`]): the same
//! capture the writer turns into a perf.data file.

mod batch;
mod disk;
mod handle;
pub mod read;
pub mod retention;
pub mod segment;
mod status;
mod writer;

use std::collections::HashSet;

pub use handle::{History, HistorySources, boot_id};
pub use read::{HistoryWindow, read_window};
pub use status::{HistorySettings, HistoryStatus};

use crate::abi::layout::RecordLayouts;
use crate::recorder::{Capture, CpuCapture};

/// `ring` (a capture of the rings for the window `[start_ns, end_ns]`,
/// with its events, kernel and modules) with its records replaced by those
/// of `window`, cut from the history. The history's event ids (of this and
/// earlier runs of the daemon) join the events with the same name and
/// layout; records of any other event are left out. What the rings hold
/// after the history's newest record (a history that stopped: disk full,
/// unwritable) is kept, and the time between the two, which neither holds,
/// is the capture's `gap_ns`.
pub fn capture_from_history(
    mut ring: Capture,
    window: HistoryWindow,
    start_ns: u64,
    end_ns: u64,
) -> Capture {
    let mut known: HashSet<u64> = ring.events.iter().flat_map(|e| e.ids.clone()).collect();
    for e in &window.events {
        let Some(same) = ring
            .events
            .iter_mut()
            .find(|r| r.name == e.name && r.attr.sample_type == e.sample_type)
        else {
            continue;
        };
        for &id in &e.ids {
            if known.insert(id) {
                same.ids.push(id);
            }
        }
    }
    let keep =
        |record: &[u8]| RecordLayouts::identifier(record).is_none_or(|id| known.contains(&id));
    let event_id = ring
        .events
        .first()
        .and_then(|e| e.ids.first())
        .copied()
        .unwrap_or(0);
    let mut layouts = RecordLayouts::default();
    for e in &ring.events {
        for &id in &e.ids {
            layouts.insert(id, e.attr.sample_type);
        }
    }
    let history_to = window.held_to_ns.unwrap_or(0);
    let ring_from = ring.held_from_ns;
    ring.gap_ns = if history_to > 0 && ring_from > history_to {
        ring_from
            .min(end_ns)
            .saturating_sub(history_to.max(start_ns))
    } else {
        0
    };
    let ring_cpus = std::mem::take(&mut ring.cpus);
    let history_cpus: HashSet<u32> = window.cpus.keys().copied().collect();
    let mut cpus: Vec<CpuCapture> = window
        .cpus
        .into_iter()
        .map(|(cpu, batch)| {
            let mut records = Vec::with_capacity(batch.records.len());
            let mut count = 0;
            for (_, record) in crate::ring::records(&batch.records).map_while(Result::ok) {
                if keep(record) {
                    records.extend_from_slice(record);
                    count += 1;
                }
            }
            let same_cpu = ring_cpus.iter().find(|c| c.cpu == cpu);
            let mut newest_ns = batch.newest_ns;
            if let Some(c) = same_cpu {
                let after = batch.newest_ns.unwrap_or(history_to);
                let (n, newest) = append_newer(&mut records, &c.records, &layouts, after);
                count += n;
                newest_ns = newest_ns.max(newest);
            }
            CpuCapture {
                cpu,
                event_id: same_cpu.map_or(event_id, |c| c.event_id),
                records,
                record_count: count,
                oldest_ns: batch.oldest_ns,
                newest_ns,
                lost_since_start: same_cpu.map_or(0, |c| c.lost_since_start),
                ..CpuCapture::default()
            }
        })
        .collect();
    // CPUs the history has nothing of in the window: what the rings hold
    // after it.
    for c in ring_cpus.iter().filter(|c| !history_cpus.contains(&c.cpu)) {
        let mut records = Vec::new();
        let (count, newest_ns) = append_newer(&mut records, &c.records, &layouts, history_to);
        if count > 0 {
            cpus.push(CpuCapture {
                records,
                record_count: count,
                newest_ns,
                ..c.clone()
            });
        }
    }
    ring.cpus = cpus;
    let ring_tracking = std::mem::take(&mut ring.tracking_records);
    let mut tracking = Vec::with_capacity(window.tracking.len());
    let mut count = 0;
    for (_, record) in crate::ring::records(&window.tracking).map_while(Result::ok) {
        if keep(record) {
            tracking.extend_from_slice(record);
            count += 1;
        }
    }
    // The checkpoint and the records after it name every process: none
    // is synthesized at the window's start.
    ring.processes.clear();
    let (n, _) = append_newer(&mut tracking, &ring_tracking, &layouts, history_to);
    ring.tracking_records = tracking;
    ring.tracking_record_count = count + n;
    let held_from = window.held_from_ns.unwrap_or(0);
    ring.held_from_ns = held_from;
    ring.window_start_ns = start_ns.max(held_from);
    ring
}

/// Appends to `out` the records of `from` newer than `after_ns`; returns
/// how many, and the newest time among them.
fn append_newer(
    out: &mut Vec<u8>,
    from: &[u8],
    layouts: &RecordLayouts,
    after_ns: u64,
) -> (u64, Option<u64>) {
    let mut count = 0;
    let mut newest = None;
    for (_, record) in crate::ring::records(from).map_while(Result::ok) {
        if let (Some(t), _) = layouts.time_and_cpu(record)
            && t > after_ns
        {
            out.extend_from_slice(record);
            count += 1;
            newest = newest.max(Some(t));
        }
    }
    (count, newest)
}
