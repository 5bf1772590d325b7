//! The part of what the rings hold that a capture keeps: a window in
//! sample-clock time, cut out of each CPU's records.

use super::CpuCapture;
use crate::abi::layout::RecordLayouts;

/// A window in sample-clock ns; an open start reaches as far back as the
/// rings hold, an open end is the freeze.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SampleWindow {
    pub start_ns: Option<u64>,
    pub end_ns: Option<u64>,
}

impl SampleWindow {
    pub fn is_open(&self) -> bool {
        self.start_ns.is_none() && self.end_ns.is_none()
    }

    fn holds(&self, t: u64) -> bool {
        self.start_ns.is_none_or(|s| t >= s) && self.end_ns.is_none_or(|e| t <= e)
    }
}

/// Keeps the records of `cpu` whose time is inside `window` (a record
/// without a time stays), and counts and spans them again.
pub fn keep_window(cpu: &mut CpuCapture, layouts: &RecordLayouts, window: SampleWindow) {
    if window.is_open() {
        return;
    }
    let mut kept = Vec::with_capacity(cpu.records.len());
    let (mut count, mut oldest, mut newest) = (0u64, None::<u64>, None::<u64>);
    for (_, record) in crate::ring::records(&cpu.records).map_while(Result::ok) {
        let time = layouts.time_and_cpu(record).0;
        if time.is_some_and(|t| !window.holds(t)) {
            continue;
        }
        if let Some(t) = time {
            oldest = Some(oldest.map_or(t, |o| o.min(t)));
            newest = Some(newest.map_or(t, |n| n.max(t)));
        }
        kept.extend_from_slice(record);
        count += 1;
    }
    cpu.records = kept;
    cpu.record_count = count;
    cpu.oldest_ns = oldest;
    cpu.newest_ns = newest;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{record_type, sample};

    fn sample_at(time: u64) -> Vec<u8> {
        // identifier, tid, time, cpu
        crate::abi::test_records::with_words(record_type::SAMPLE, &[5, 1, time, 0])
    }

    fn cpu_with(times: &[u64]) -> CpuCapture {
        let records: Vec<u8> = times.iter().flat_map(|&t| sample_at(t)).collect();
        CpuCapture {
            record_count: times.len() as u64,
            records,
            ..CpuCapture::default()
        }
    }

    fn layouts() -> RecordLayouts {
        let mut l = RecordLayouts::default();
        l.insert(
            5,
            sample::IDENTIFIER | sample::TID | sample::TIME | sample::CPU,
        );
        l
    }

    #[test]
    fn keeps_the_records_inside_the_window_in_their_order() {
        let mut c = cpu_with(&[500, 400, 300, 200, 100]);
        let window = SampleWindow {
            start_ns: Some(200),
            end_ns: Some(400),
        };
        keep_window(&mut c, &layouts(), window);
        assert_eq!(c.records, cpu_with(&[400, 300, 200]).records);
        assert_eq!(
            (c.record_count, c.oldest_ns, c.newest_ns),
            (3, Some(200), Some(400))
        );

        let mut c = cpu_with(&[500, 400, 300]);
        keep_window(
            &mut c,
            &layouts(),
            SampleWindow {
                start_ns: Some(450),
                end_ns: None,
            },
        );
        assert_eq!(
            (c.record_count, c.oldest_ns, c.newest_ns),
            (1, Some(500), Some(500))
        );

        let mut c = cpu_with(&[500, 400]);
        keep_window(
            &mut c,
            &layouts(),
            SampleWindow {
                start_ns: None,
                end_ns: Some(100),
            },
        );
        assert_eq!((c.record_count, c.oldest_ns, c.records.len()), (0, None, 0));
    }

    #[test]
    fn an_open_window_keeps_everything() {
        let mut c = cpu_with(&[3, 2, 1]);
        let before = c.clone();
        keep_window(&mut c, &layouts(), SampleWindow::default());
        assert_eq!(c, before);
    }
}
