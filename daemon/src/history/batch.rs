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
    /// Where `records` is cut into frames, noted as they are added.
    cuts: FrameCuts,
}

impl Batch {
    /// Appends the whole records of `bytes`; returns the samples its LOST
    /// records say were dropped.
    pub(super) fn add(&mut self, bytes: &[u8], layouts: &RecordLayouts) -> u64 {
        let cuts = &mut self.cuts;
        let added =
            RecordFilter::all(layouts)
                .append_noting(bytes, &mut self.records, |at, len| cuts.note(at, len));
        self.kept.merge(&added);
        added.lost
    }

    /// Notes the records written into `records` from `start` by hand
    /// (the unwinder's, some rewritten), as [`Self::add`] notes its own.
    pub(super) fn note_written_from(&mut self, start: usize) {
        let mut at = start;
        for (_, record) in crate::ring::records(&self.records[start..]).map_while(Result::ok) {
            self.cuts.note(at, record.len());
            at += record.len();
        }
    }

    /// The frames `records` is cut into: each one's byte range and record
    /// count (see [`FrameCuts`]).
    pub(super) fn frames(&self) -> impl Iterator<Item = (Range<usize>, u32)> + '_ {
        self.cuts.parts(self.records.len())
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
        self.cuts.clear();
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

/// Where records are cut into frames of at most [`FRAME_RAW_BYTES`]
/// (whole records), noted record by record as they are appended, so the
/// writer need not walk them again.
#[derive(Default)]
struct FrameCuts {
    /// The frames closed so far: byte range and record count.
    closed: Vec<(Range<usize>, u32)>,
    /// Where the open frame starts and its records (it reaches to the
    /// end of what was noted).
    start: usize,
    count: u32,
}

impl FrameCuts {
    /// A record of `len` bytes appended at `at`, right after the last
    /// one noted.
    fn note(&mut self, at: usize, len: usize) {
        if at > self.start && at - self.start + len > FRAME_RAW_BYTES {
            self.closed.push((self.start..at, self.count));
            (self.start, self.count) = (at, 0);
        }
        self.count += 1;
    }

    /// The frames, the open one last; `len` is the records' length, to
    /// which the open frame reaches.
    fn parts(&self, len: usize) -> impl Iterator<Item = (Range<usize>, u32)> + '_ {
        let open = (self.count > 0).then_some((self.start..len, self.count));
        self.closed.iter().cloned().chain(open)
    }

    fn clear(&mut self) {
        self.closed.clear();
        (self.start, self.count) = (0, 0);
    }
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

    /// Cuts `records` (whole records, back to back) as `Batch::add` does.
    fn frame_parts(records: &[u8]) -> Vec<(Range<usize>, u32)> {
        let mut cuts = FrameCuts::default();
        let mut at = 0;
        for (_, record) in crate::ring::records(records).map_while(Result::ok) {
            cuts.note(at, record.len());
            at += record.len();
        }
        cuts.parts(at).collect()
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

    #[test]
    fn a_batch_cut_as_it_is_filled_is_cut_afresh_after_it_is_cleared() {
        let layouts = RecordLayouts::default();
        let mut batch = Batch::default();
        let chunk: Vec<u8> = (0..20).flat_map(|_| record(40 << 10)).collect();
        batch.add(&chunk, &layouts);
        batch.add(&chunk, &layouts);
        let parts: Vec<_> = batch.frames().collect();
        assert_eq!(parts, frame_parts(&batch.records));
        assert_eq!(parts.len(), 2);
        assert_eq!(parts.iter().map(|(_, n)| n).sum::<u32>(), 40);
        batch.clear();
        assert_eq!(batch.frames().count(), 0);
        batch.add(&chunk[..3 * 40960], &layouts);
        assert_eq!(batch.frames().collect::<Vec<_>>(), vec![(0..3 * 40960, 3)]);
    }
}
