//! The one filter over linear records: which to keep (by time, by event),
//! and what the kept ones are (how many, how many samples, their span, the
//! losses their LOST records report). A ring's copy, a history frame and a
//! window cut from either all go through it.
//!
//! Records without a time (an event sampled without TIME) are kept
//! whatever the range: nothing says they are outside it. The walk stops at
//! the first record that does not parse; what follows is not trusted.

use std::collections::HashSet;
use std::ops::Range;

use flightrec_perfdata::abi::layout::{RecordLayouts, SampleLayout};
use flightrec_perfdata::abi::{get_u64, record_type};

use super::{Corruption, records};
use crate::time::SampleTime;

/// A span of sample-clock time, both ends included; an open end reaches
/// as far as the records do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeRange {
    pub start: Option<SampleTime>,
    pub end: Option<SampleTime>,
}

impl TimeRange {
    /// Every record.
    pub const ALL: TimeRange = TimeRange {
        start: None,
        end: None,
    };

    pub fn new(start: SampleTime, end: SampleTime) -> Self {
        TimeRange {
            start: Some(start),
            end: Some(end),
        }
    }

    /// Records strictly after `t`.
    pub fn after(t: SampleTime) -> Self {
        TimeRange {
            start: Some(SampleTime::from_nanos(t.as_nanos().saturating_add(1))),
            end: None,
        }
    }

    /// Records strictly before `t`.
    pub fn before(t: SampleTime) -> Self {
        TimeRange {
            start: None,
            end: t.as_nanos().checked_sub(1).map(SampleTime::from_nanos),
        }
    }

    pub fn is_all(&self) -> bool {
        self.start.is_none() && self.end.is_none()
    }

    pub fn holds(&self, t: SampleTime) -> bool {
        self.start.is_none_or(|s| t >= s) && self.end.is_none_or(|e| t <= e)
    }

    /// Whether some instant of `[first, last]` is inside.
    pub fn overlaps(&self, first: SampleTime, last: SampleTime) -> bool {
        self.start.is_none_or(|s| last >= s) && self.end.is_none_or(|e| first <= e)
    }
}

/// What the kept records are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kept {
    /// Records kept, and of them SAMPLE records.
    pub count: u64,
    pub samples: u64,
    /// Bytes kept.
    pub bytes: u64,
    /// Sum of the `lost` fields of the LOST records kept.
    pub lost: u64,
    pub oldest: Option<SampleTime>,
    pub newest: Option<SampleTime>,
    /// The record the walk stopped at, if one did not parse.
    pub corruption: Option<Corruption>,
}

impl Kept {
    fn add(&mut self, type_: u32, record: &[u8], time: Option<SampleTime>) {
        self.count += 1;
        self.bytes += record.len() as u64;
        match type_ {
            record_type::SAMPLE => self.samples += 1,
            // header, id, lost
            record_type::LOST if record.len() >= 24 => {
                self.lost = self.lost.saturating_add(get_u64(record, 16));
            }
            _ => {}
        }
        if let Some(t) = time {
            self.oldest = Some(self.oldest.map_or(t, |o| o.min(t)));
            self.newest = Some(self.newest.map_or(t, |n| n.max(t)));
        }
    }

    /// Both together: the counts summed, the spans joined.
    pub fn merge(&mut self, other: &Kept) {
        self.count += other.count;
        self.samples += other.samples;
        self.bytes += other.bytes;
        self.lost = self.lost.saturating_add(other.lost);
        self.oldest = match (self.oldest, other.oldest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.newest = self.newest.max(other.newest);
        if self.corruption.is_none() {
            self.corruption = other.corruption;
        }
    }
}

/// Which records to keep.
#[derive(Debug, Clone, Copy)]
pub struct RecordFilter<'a> {
    /// How to find each record's time, by the id it carries.
    pub layouts: &'a RecordLayouts,
    pub range: TimeRange,
    /// Only records of these event ids (a record without an id is kept);
    /// None: every event.
    pub ids: Option<&'a HashSet<u64>>,
}

impl<'a> RecordFilter<'a> {
    /// Every record, counted and spanned.
    pub fn all(layouts: &'a RecordLayouts) -> Self {
        RecordFilter {
            layouts,
            range: TimeRange::ALL,
            ids: None,
        }
    }

    pub fn in_range(layouts: &'a RecordLayouts, range: TimeRange) -> Self {
        RecordFilter {
            layouts,
            range,
            ids: None,
        }
    }

    /// Whether `record` is kept, its time and its layout.
    fn keeps(&self, record: &[u8]) -> (bool, Option<SampleTime>, Option<SampleLayout>) {
        let id = RecordLayouts::identifier(record);
        if let Some(ids) = self.ids
            && id.is_some_and(|id| !ids.contains(&id))
        {
            return (false, None, None);
        }
        let layout = id.and_then(|id| self.layouts.by_id(id));
        let time = layout
            .and_then(|l| l.time_and_cpu(record).0)
            .map(SampleTime::from_nanos);
        (time.is_none_or(|t| self.range.holds(t)), time, layout)
    }

    /// What `bytes` holds that this filter keeps, and the pids of the
    /// samples kept (sorted, each once), changing nothing; `each(record,
    /// layout)` is called for every kept record whose event is known, in
    /// the same walk. The walk stops at the first record that starts at or
    /// past `limit` bytes: the counts are of the records before it, and
    /// `bytes[..kept.bytes]` of a filter that keeps every record is them.
    pub fn scan_samples(
        &self,
        bytes: &[u8],
        limit: usize,
        mut each: impl FnMut(&[u8], SampleLayout),
    ) -> (Kept, Vec<u32>) {
        let mut pids = Vec::new();
        let mut last = None;
        let kept = self.walk_with_layout(bytes, limit, |_, record, layout| {
            let Some(layout) = layout else {
                return;
            };
            each(record, layout);
            if let Some(pid) = layout.sample_pid(record)
                && last != Some(pid)
            {
                pids.push(pid);
                last = Some(pid);
            }
        });
        pids.sort_unstable();
        pids.dedup();
        (kept, pids)
    }

    /// Walks `records` calling `keep(offset, record)` for each kept one.
    fn walk(&self, bytes: &[u8], mut keep: impl FnMut(usize, &[u8])) -> Kept {
        self.walk_with_layout(bytes, usize::MAX, |at, record, _| keep(at, record))
    }

    fn walk_with_layout(
        &self,
        bytes: &[u8],
        limit: usize,
        mut keep: impl FnMut(usize, &[u8], Option<SampleLayout>),
    ) -> Kept {
        let mut kept = Kept::default();
        let mut walk = records(bytes);
        loop {
            let at = walk.offset();
            if at >= limit {
                break;
            }
            match walk.next() {
                Some(Ok((header, record))) => {
                    let (keeps, time, layout) = self.keeps(record);
                    if keeps {
                        kept.add(header.type_, record, time);
                        keep(at, record, layout);
                    }
                }
                Some(Err(c)) => {
                    kept.corruption = Some(c);
                    break;
                }
                None => break,
            }
        }
        kept
    }

    /// What `bytes` holds that this filter keeps, changing nothing.
    pub fn scan(&self, bytes: &[u8]) -> Kept {
        self.walk(bytes, |_, _| {})
    }

    /// Appends the kept records of `from` to `out`, in their order.
    pub fn append(&self, from: &[u8], out: &mut Vec<u8>) -> Kept {
        self.append_noting(from, out, |_, _| {})
    }

    /// As [`Self::append`], calling `each(at, len)` with where in `out`
    /// each kept record lands, in the same walk. Consecutive kept records
    /// are copied as one run: a copy a record costs more than the bytes.
    pub fn append_noting(
        &self,
        from: &[u8],
        out: &mut Vec<u8>,
        mut each: impl FnMut(usize, usize),
    ) -> Kept {
        let mut run: Option<Range<usize>> = None;
        let mut landed = out.len();
        let kept = self.walk(from, |at, record| {
            match &mut run {
                Some(r) if r.end == at => r.end += record.len(),
                _ => {
                    if let Some(done) = run.replace(at..at + record.len()) {
                        out.extend_from_slice(&from[done]);
                    }
                }
            }
            each(landed, record.len());
            landed += record.len();
        });
        if let Some(done) = run {
            out.extend_from_slice(&from[done]);
        }
        kept
    }

    /// What `bytes` holds that this filter keeps, as [`Self::scan`] says,
    /// noting where each kept record of at least `min_len` bytes starts
    /// (the few that need a closer look, found in the same walk).
    pub fn scan_noting(&self, bytes: &[u8], min_len: usize, noted: &mut Vec<usize>) -> Kept {
        self.scan_each(bytes, |at, len| {
            if len >= min_len {
                noted.push(at);
            }
        })
    }

    /// As [`Self::scan`], calling `each(at, len)` with where each kept
    /// record lies in `bytes`, in the same walk.
    pub fn scan_each(&self, bytes: &[u8], mut each: impl FnMut(usize, usize)) -> Kept {
        self.walk(bytes, |at, record| each(at, record.len()))
    }

    /// Keeps only the kept records of `bytes`, moved down in place (a
    /// window can be hundreds of MiB: a copy would double its memory);
    /// whatever follows a record that does not parse is dropped.
    pub fn retain(&self, bytes: &mut Vec<u8>) -> Kept {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let kept = self.walk(bytes, |at, record| match runs.last_mut() {
            // Consecutive kept records move as one run.
            Some((start, len)) if *start + *len == at => *len += record.len(),
            _ => runs.push((at, record.len())),
        });
        let mut write = 0;
        for (start, len) in runs {
            if start != write {
                bytes.copy_within(start..start + len, write);
            }
            write += len;
        }
        bytes.truncate(write);
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flightrec_perfdata::abi::sample;
    use flightrec_perfdata::abi::test_records::with_words;

    const SAMPLE_TYPE: u64 = sample::IDENTIFIER | sample::TID | sample::TIME | sample::CPU;

    fn sample_at(id: u64, time: u64) -> Vec<u8> {
        with_words(record_type::SAMPLE, &[id, 1, time, 0])
    }

    fn layouts() -> RecordLayouts {
        RecordLayouts::of_events([(&[1u64, 2][..], SampleLayout::new(SAMPLE_TYPE))])
    }

    fn times(bytes: &[u8]) -> Vec<u64> {
        let l = layouts();
        records(bytes)
            .map_while(Result::ok)
            .filter_map(|(_, r)| l.time_and_cpu(r).0)
            .collect()
    }

    fn t(ns: u64) -> SampleTime {
        SampleTime::from_nanos(ns)
    }

    #[test]
    fn a_scan_notes_where_the_long_records_it_keeps_start() {
        let l = layouts();
        let long = with_words(record_type::SAMPLE, &[2, 1, 150, 0, 0, 0, 0, 0]);
        let short = sample_at(1, 100);
        let bytes = [short.clone(), long.clone(), short.clone(), long.clone()].concat();
        let mut noted = Vec::new();
        let kept = RecordFilter::all(&l).scan_noting(&bytes, long.len(), &mut noted);
        assert_eq!(noted, vec![short.len(), 2 * short.len() + long.len()]);
        assert_eq!(kept, RecordFilter::all(&l).scan(&bytes));
        // Only kept records are noted.
        noted.clear();
        let range = RecordFilter::in_range(&l, TimeRange::before(t(120)));
        assert_eq!(range.scan_noting(&bytes, 1, &mut noted).count, 2);
        assert_eq!(noted, vec![0, short.len() + long.len()]);
    }

    #[test]
    fn a_scan_with_a_limit_stops_at_the_first_record_starting_past_it() {
        let l = layouts();
        let bytes = [10, 20, 30].map(|x| sample_at(1, x)).concat();
        let one = sample_at(1, 10).len();
        let all = RecordFilter::all(&l);
        let (kept, _) = all.scan_samples(&bytes, one + 1, |_, _| {});
        assert_eq!((kept.count, kept.bytes), (2, 2 * one as u64));
        assert_eq!(kept.newest, Some(t(20)));
        let (kept, _) = all.scan_samples(&bytes, one, |_, _| {});
        assert_eq!(kept.count, 1);
        assert_eq!(
            all.scan_samples(&bytes, usize::MAX, |_, _| {}).0,
            all.scan(&bytes)
        );
    }

    #[test]
    fn a_range_keeps_its_ends_and_counts_and_spans_what_it_keeps() {
        let l = layouts();
        let bytes = [500, 400, 300, 200, 100].map(|x| sample_at(1, x)).concat();
        let filter = RecordFilter::in_range(&l, TimeRange::new(t(200), t(400)));
        let mut out = Vec::new();
        let kept = filter.append(&bytes, &mut out);
        assert_eq!(times(&out), vec![400, 300, 200]);
        assert_eq!(
            (kept.count, kept.samples, kept.oldest, kept.newest),
            (3, 3, Some(t(200)), Some(t(400)))
        );
        assert_eq!(kept.bytes, out.len() as u64);
        let mut in_place = bytes.clone();
        assert_eq!(filter.retain(&mut in_place), kept);
        assert_eq!(in_place, out);
        assert_eq!(RecordFilter::all(&l).scan(&bytes).count, 5);
        let after = RecordFilter::in_range(&l, TimeRange::after(t(300)));
        assert_eq!(
            times(&{
                let mut b = bytes.clone();
                after.retain(&mut b);
                b
            }),
            vec![500, 400]
        );
        let before = RecordFilter::in_range(&l, TimeRange::before(t(300)));
        assert_eq!(before.scan(&bytes).newest, Some(t(200)));
    }

    #[test]
    fn ids_leave_out_other_events_and_a_torn_tail_is_dropped() {
        let l = layouts();
        let known: HashSet<u64> = [1].into();
        let mut bytes = [
            sample_at(1, 10),
            sample_at(9, 20),
            sample_at(1, 30),
            sample_at(9, 40),
        ]
        .concat();
        bytes.extend_from_slice(&sample_at(1, 50)[..12]);
        let filter = RecordFilter {
            layouts: &l,
            range: TimeRange::ALL,
            ids: Some(&known),
        };
        let kept = filter.retain(&mut bytes);
        assert_eq!(times(&bytes), vec![10, 30]);
        assert_eq!(kept.count, 2);
        assert!(kept.corruption.is_some(), "the torn tail is reported");
    }

    #[test]
    fn losses_are_summed_and_records_without_a_time_are_kept() {
        let l = layouts();
        // LOST: id, lost, then no sample_id the layouts know (id 77).
        let lost = with_words(record_type::LOST, &[77, 5, 77]);
        let bytes = [sample_at(1, 10), lost.clone(), lost].concat();
        let kept = RecordFilter::in_range(&l, TimeRange::new(t(100), t(200))).scan(&bytes);
        assert_eq!((kept.count, kept.samples, kept.lost), (2, 0, 10));
        assert_eq!(kept.oldest, None);
    }

    #[test]
    fn kept_figures_merge() {
        let mut a = Kept {
            count: 2,
            oldest: Some(t(50)),
            newest: Some(t(60)),
            ..Kept::default()
        };
        a.merge(&Kept {
            count: 1,
            lost: 3,
            oldest: Some(t(10)),
            newest: Some(t(20)),
            ..Kept::default()
        });
        assert_eq!(
            (a.count, a.lost, a.oldest, a.newest),
            (3, 3, Some(t(10)), Some(t(60)))
        );
    }

    proptest::proptest! {
        /// retain, append and scan agree on any bytes.
        #[test]
        fn the_three_ways_agree(
            good in proptest::collection::vec(flightrec_perfdata::abi::test_records::kernel_record(256), 0..30),
            tail in flightrec_perfdata::abi::test_records::suspect_tail(),
            start in 0u64..1000, len in 0u64..1000,
        ) {
            let l = layouts();
            let bytes = [good.concat(), tail].concat();
            let filter = RecordFilter::in_range(&l, TimeRange::new(t(start), t(start + len)));
            let mut out = Vec::new();
            let appended = filter.append(&bytes, &mut out);
            let mut in_place = bytes.clone();
            let retained = filter.retain(&mut in_place);
            proptest::prop_assert_eq!(&in_place, &out);
            proptest::prop_assert_eq!(&appended, &retained);
            proptest::prop_assert_eq!(filter.scan(&bytes), appended);
            // After what `out` held, each kept record lands where it is
            // noted, one after another.
            let mut after_prefix = vec![7u8; start as usize % 13];
            let prefix = after_prefix.len();
            let mut noted = Vec::new();
            let noting =
                filter.append_noting(&bytes, &mut after_prefix, |at, len| noted.push((at, len)));
            proptest::prop_assert_eq!(&noting, &retained);
            proptest::prop_assert_eq!(&after_prefix[prefix..], &out[..]);
            let mut expected = Vec::new();
            let mut at = prefix;
            for (_, record) in records(&out).map_while(Result::ok) {
                expected.push((at, record.len()));
                at += record.len();
            }
            proptest::prop_assert_eq!(noted, expected);
        }
    }
}
