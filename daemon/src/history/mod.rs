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

/// `ring` (a capture of the rings, for its events, kernel and modules)
/// with its records replaced by those of `window`, cut from the history
/// for a window that starts at `start_ns`. The history's event ids (of
/// this and earlier runs of the daemon) join the events with the same name
/// and layout; records of any other event are left out.
pub fn capture_from_history(mut ring: Capture, window: HistoryWindow, start_ns: u64) -> Capture {
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
    let ring_cpus = std::mem::take(&mut ring.cpus);
    ring.cpus = window
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
            CpuCapture {
                cpu,
                event_id: same_cpu.map_or(event_id, |c| c.event_id),
                records,
                record_count: count,
                oldest_ns: batch.oldest_ns,
                newest_ns: batch.newest_ns,
                lost_since_start: same_cpu.map_or(0, |c| c.lost_since_start),
                ..CpuCapture::default()
            }
        })
        .collect();
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
    ring.tracking_records = tracking;
    ring.tracking_record_count = count;
    let held_from = window.held_from_ns.unwrap_or(0);
    ring.held_from_ns = held_from;
    ring.window_start_ns = start_ns.max(held_from);
    ring
}
