//! Records drained and not yet written, and how they are cut into frames.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::abi::layout::RecordLayouts;
use crate::ring::filter::{Kept, RecordFilter};
use crate::time::SampleTime;

/// Records waiting to be written: per CPU, and the tracking records.
#[derive(Default)]
pub(super) struct Pending {
    pub(super) cpus: BTreeMap<u32, Batch>,
    pub(super) tracking: Batch,
}

#[derive(Default)]
pub(super) struct Batch {
    pub(super) records: Vec<u8>,
    /// What `records` holds: count and span.
    pub(super) kept: Kept,
}

impl Batch {
    /// Appends the whole records of `bytes`; returns the samples its LOST
    /// records say were dropped.
    pub(super) fn add(&mut self, bytes: &[u8], layouts: &RecordLayouts) -> u64 {
        let added = RecordFilter::all(layouts).append(bytes, &mut self.records);
        self.kept.merge(&added);
        added.lost
    }

    /// The span of the records, for the frame's header (a batch without a
    /// timed record is stamped `at`).
    pub(super) fn times(&self, at: SampleTime) -> (SampleTime, SampleTime) {
        (
            self.kept.oldest.unwrap_or(at),
            self.kept.newest.unwrap_or(at),
        )
    }

    /// Empties the batch and keeps its buffer: batches are written a few
    /// times a second, and a buffer of a MiB or more made anew each time
    /// is fresh pages faulted in and unmapped again (the allocator maps
    /// blocks of 1 MiB and more apart, see `perf::heap`).
    pub(super) fn clear(&mut self) {
        self.records.clear();
        self.kept = Kept::default();
    }
}

impl Pending {
    pub(super) fn bytes(&self) -> usize {
        self.cpus.values().map(|b| b.records.len()).sum::<usize>() + self.tracking.records.len()
    }
}

/// Records in one frame at most: a window reads (and decompresses) only
/// the frames it overlaps.
const FRAME_RAW_BYTES: usize = 1 << 20;

/// Where `records` is cut into frames of at most [`FRAME_RAW_BYTES`]
/// (whole records; a larger record is a frame of its own): each frame's
/// byte range and record count.
pub(super) fn frame_parts(records: &[u8]) -> Vec<(Range<usize>, u32)> {
    let mut parts = Vec::new();
    let (mut start, mut end, mut count) = (0, 0, 0u32);
    for (_, record) in crate::ring::records(records).map_while(Result::ok) {
        if end > start && end - start + record.len() > FRAME_RAW_BYTES {
            parts.push((start..end, count));
            (start, count) = (end, 0);
        }
        end += record.len();
        count += 1;
    }
    if count > 0 {
        parts.push((start..end, count));
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::abi::record_type;

    fn record(len: usize) -> Vec<u8> {
        let mut r = vec![0u8; len];
        r[0..4].copy_from_slice(&record_type::SAMPLE.to_le_bytes());
        r[6..8].copy_from_slice(&(len as u16).to_le_bytes());
        r
    }

    #[test]
    fn frames_hold_whole_records_up_to_a_mib_and_cover_everything() {
        assert!(frame_parts(&[]).is_empty());
        let small: Vec<u8> = (0..3).flat_map(|_| record(64)).collect();
        assert_eq!(frame_parts(&small), vec![(0..192, 3)]);
        // 40 KiB records: 25 fit in a MiB (1,024,000 bytes), the 26th
        // starts the next frame.
        let big: Vec<u8> = (0..60).flat_map(|_| record(40 << 10)).collect();
        let parts = frame_parts(&big);
        assert_eq!(
            parts,
            vec![
                (0..25 * 40960, 25),
                (25 * 40960..50 * 40960, 25),
                (50 * 40960..60 * 40960, 10)
            ]
        );
        assert!(parts.iter().all(|(r, _)| r.len() <= FRAME_RAW_BYTES));
    }
}
