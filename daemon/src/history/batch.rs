//! Records drained and not yet written, and how they are cut into frames.
//!
//! A drained chunk of [`WHOLE_FROM`] bytes or more is kept as it was
//! drained and cut into frames where it lies ([`Whole`]): copying it into
//! the batch was a pass over every byte at 999 Hz, where chunks are
//! hundreds of KiB and the batch is written in the same round. Smaller
//! chunks (an idle machine's, the writer's own last drain) are gathered
//! into the batch, so that its frames are not a few KiB each.

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
    /// Chunks kept as they were drained, oldest first, each after the
    /// gathered records before it.
    wholes: Vec<Whole>,
    pub(super) records: Vec<u8>,
    /// What `records` holds: count and span.
    pub(super) kept: Kept,
    /// Where `records` is cut into frames, noted as they are added.
    cuts: FrameCuts,
}

/// Chunks of this many bytes or more are framed where they lie.
pub(super) const WHOLE_FROM: usize = 256 << 10;

/// A drained chunk framed where it lies.
struct Whole {
    /// How many gathered bytes (`Batch::records`) come before it.
    after: usize,
    records: Vec<u8>,
    /// Where its whole records end (a walk stops at a record that does
    /// not parse).
    end: usize,
    kept: Kept,
    cuts: FrameCuts,
}

/// One frame's records, their count and span.
pub(super) struct FramePart<'a> {
    pub(super) records: &'a [u8],
    pub(super) count: u32,
    pub(super) times: (SampleTime, SampleTime),
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

    /// Takes `chunk`'s whole records: kept as it is when it is large, else
    /// appended. Returns the samples its LOST records say were dropped,
    /// and the chunk's buffer when it was copied (for the next drains).
    pub(super) fn add_chunk(
        &mut self,
        chunk: Vec<u8>,
        layouts: &RecordLayouts,
    ) -> (u64, Option<Vec<u8>>) {
        if chunk.len() < WHOLE_FROM {
            return (self.add(&chunk, layouts), Some(chunk));
        }
        // The gathered records' open frame ends where the chunk comes.
        let after = self.records.len();
        self.cuts.close(after);
        let mut cuts = FrameCuts::default();
        let mut end = 0;
        let kept = RecordFilter::all(layouts).scan_each(&chunk, |at, len| {
            cuts.note(at, len);
            end = at + len;
        });
        let lost = kept.lost;
        self.wholes.push(Whole {
            after,
            records: chunk,
            end,
            kept,
            cuts,
        });
        (lost, None)
    }

    /// Records held.
    pub(super) fn count(&self) -> u64 {
        self.wholes.iter().map(|w| w.kept.count).sum::<u64>() + self.kept.count
    }

    /// Bytes of records held.
    pub(super) fn len(&self) -> usize {
        self.wholes.iter().map(|w| w.end).sum::<usize>() + self.records.len()
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

    /// The frames the batch is cut into, oldest first (see
    /// [`FrameCuts`]): a kept chunk's are stamped with its span, the
    /// gathered records' with theirs (records without a timed one are
    /// stamped `at`).
    pub(super) fn frames(&self, at: SampleTime) -> Vec<FramePart<'_>> {
        let times = span(&self.kept, at);
        let mut frames = Vec::new();
        let mut wholes = self.wholes.iter().peekable();
        for (range, count) in self.cuts.parts(self.records.len()) {
            // No gathered frame spans a kept chunk's place (`add_chunk`).
            while let Some(w) = wholes.next_if(|w| w.after <= range.start) {
                w.push_frames(&mut frames, at);
            }
            frames.push(FramePart {
                records: &self.records[range],
                count,
                times,
            });
        }
        for w in wholes {
            w.push_frames(&mut frames, at);
        }
        frames
    }

    /// Empties the batch and keeps its buffer: batches are written a few
    /// times a second, and a buffer of a MiB or more made anew each time
    /// is fresh pages faulted in and unmapped again (the allocator maps
    /// blocks of 1 MiB and more apart, see `perf::heap`). Returns the
    /// buffers of the chunks it kept, for the next drains.
    pub(super) fn clear(&mut self) -> impl Iterator<Item = Vec<u8>> + use<> {
        self.records.clear();
        self.kept = Kept::default();
        self.cuts.clear();
        std::mem::take(&mut self.wholes)
            .into_iter()
            .map(|w| w.records)
    }
}

impl Whole {
    fn push_frames<'a>(&'a self, frames: &mut Vec<FramePart<'a>>, at: SampleTime) {
        let times = span(&self.kept, at);
        frames.extend(self.cuts.parts(self.end).map(|(range, count)| FramePart {
            records: &self.records[range],
            count,
            times,
        }));
    }
}

/// The span of `kept`'s records, for a frame's header (`at` without a
/// timed record).
fn span(kept: &Kept, at: SampleTime) -> (SampleTime, SampleTime) {
    (kept.oldest.unwrap_or(at), kept.newest.unwrap_or(at))
}

impl Pending {
    pub(super) fn bytes(&self) -> usize {
        self.cpus.values().map(Batch::len).sum::<usize>() + self.tracking.len()
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
            self.close(at);
        }
        self.count += 1;
    }

    /// Ends the open frame at `at` (where the next record will start).
    fn close(&mut self, at: usize) {
        if self.count > 0 {
            self.closed.push((self.start..at, self.count));
        }
        (self.start, self.count) = (at, 0);
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

    /// Each frame of `batch`: its bytes' length and record count.
    fn frame_sizes(batch: &Batch) -> Vec<(usize, u32)> {
        batch
            .frames(SampleTime::from_nanos(1))
            .iter()
            .map(|p| (p.records.len(), p.count))
            .collect()
    }

    /// Every frame's bytes, in the order they are written.
    fn framed_bytes(batch: &Batch) -> Vec<u8> {
        batch
            .frames(SampleTime::from_nanos(1))
            .iter()
            .flat_map(|p| p.records.to_vec())
            .collect()
    }

    #[test]
    fn a_batch_cut_as_it_is_filled_is_cut_afresh_after_it_is_cleared() {
        let layouts = RecordLayouts::default();
        let mut batch = Batch::default();
        let chunk: Vec<u8> = (0..20).flat_map(|_| record(40 << 10)).collect();
        batch.add(&chunk, &layouts);
        batch.add(&chunk, &layouts);
        let parts = frame_sizes(&batch);
        let expected: Vec<_> = frame_parts(&batch.records)
            .into_iter()
            .map(|(r, n)| (r.len(), n))
            .collect();
        assert_eq!(parts, expected);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts.iter().map(|(_, n)| n).sum::<u32>(), 40);
        assert_eq!(batch.clear().count(), 0);
        assert!(frame_sizes(&batch).is_empty());
        batch.add(&chunk[..3 * 40960], &layouts);
        assert_eq!(frame_sizes(&batch), vec![(3 * 40960, 3)]);
    }

    /// A record of `len` bytes whose body is `fill`.
    fn filled(len: usize, fill: u8) -> Vec<u8> {
        let mut r = record(len);
        r[8..].fill(fill);
        r
    }

    #[test]
    fn a_large_chunk_is_framed_where_it_lies_as_a_copy_would_be() {
        let layouts = RecordLayouts::default();
        // 30 records of 40 KiB: 1.2 MB, two frames either way.
        let chunk: Vec<u8> = (0..30u8).flat_map(|i| filled(40 << 10, i)).collect();
        let mut copied = Batch::default();
        copied.add(&chunk, &layouts);
        let mut kept = Batch::default();
        let (lost, back) = kept.add_chunk(chunk.clone(), &layouts);
        assert_eq!((lost, back.is_none()), (0, true), "taken as it is");
        assert_eq!(frame_sizes(&kept), frame_sizes(&copied));
        assert_eq!(framed_bytes(&kept), chunk);
        assert_eq!((kept.count(), kept.len()), (30, chunk.len()));
        // The buffer comes back when the batch is cleared.
        let spent: Vec<_> = kept.clear().collect();
        assert_eq!(spent, vec![chunk]);
        assert_eq!((kept.count(), kept.len()), (0, 0));
    }

    #[test]
    fn chunks_keep_their_order_whether_kept_or_gathered() {
        let layouts = RecordLayouts::default();
        let big = |fill: u8| -> Vec<u8> { (0..8).flat_map(|_| filled(40 << 10, fill)).collect() };
        let small = |fill: u8| filled(64, fill);
        let mut batch = Batch::default();
        let chunks = [big(1), big(2), small(3), big(4), small(5), small(6), big(7)];
        let copied: Vec<bool> = chunks
            .iter()
            .map(|c| batch.add_chunk(c.clone(), &layouts).1.is_some())
            .collect();
        assert_eq!(copied, [false, false, true, false, true, true, false]);
        assert_eq!(framed_bytes(&batch), chunks.concat());
        // Each large chunk a frame of its own, the small ones gathered
        // into a frame between them.
        assert_eq!(
            frame_sizes(&batch),
            vec![
                (8 * 40960, 8),
                (8 * 40960, 8),
                (64, 1),
                (8 * 40960, 8),
                (128, 2),
                (8 * 40960, 8)
            ]
        );
        assert_eq!(batch.count(), 8 * 4 + 3);
        assert_eq!(batch.len(), chunks.concat().len());
        assert_eq!(batch.clear().count(), 4);
        assert!(frame_sizes(&batch).is_empty());
    }

    #[test]
    fn a_kept_chunk_ends_at_its_last_whole_record() {
        let layouts = RecordLayouts::default();
        let mut chunk: Vec<u8> = (0..8).flat_map(|_| filled(40 << 10, 1)).collect();
        let whole = chunk.len();
        // A header that does not parse (size 0): the walk stops there.
        chunk.extend([0u8; 64]);
        let mut batch = Batch::default();
        assert!(batch.add_chunk(chunk.clone(), &layouts).1.is_none());
        assert_eq!(framed_bytes(&batch), chunk[..whole].to_vec());
        assert_eq!(batch.len(), whole);
    }
}
