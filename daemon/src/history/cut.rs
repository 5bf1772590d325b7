//! A window cut from the history, written as it is read: the history's
//! records of the window, frame by frame, then what the frozen rings hold
//! after the history's newest record. The same encoder the rings' dumps go
//! through writes it, so the file is an ordinary snapshot.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use super::read::{Frame, WindowRead, read_window};
use super::retention::SegmentInfo;
use super::segment::FrameKind;
use crate::recorder::{Capture, EventDescriptor, layouts_of};
use crate::ring::filter::{Kept, RecordFilter, TimeRange};
use crate::snapshot::output::Fill;
use crate::snapshot::perfdata::{Encoder, Sink};
use crate::time::SampleTime;

/// The events of a window cut from `segments`: `ring`'s, with the ids the
/// history's records carry (of this and earlier runs of the daemon) joined
/// to the event of the same name and layout. Records of any other event
/// are left out of the cut.
pub fn joined_events(ring: &[EventDescriptor], segments: &[SegmentInfo]) -> Vec<EventDescriptor> {
    let mut events = ring.to_vec();
    let mut known: HashSet<u64> = events.iter().flat_map(|e| e.ids.clone()).collect();
    for segment in segments {
        for e in &segment.events.events {
            let Some(same) = events
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
    }
    events
}

/// The oldest and newest instant `segments` hold.
pub fn held(segments: &[SegmentInfo]) -> Option<(SampleTime, SampleTime)> {
    let first = segments.iter().map(|s| s.first).min()?;
    let last = segments.iter().map(|s| s.last).max()?;
    Some((first, last))
}

/// Adds to `filter` the processes seen in its cgroups among the samples
/// `segments` hold of `range` (a scoped cut reads the window twice: the
/// processes first, then what it keeps of them).
pub fn collect_pids(
    segments: &[SegmentInfo],
    range: TimeRange,
    events: &[EventDescriptor],
    filter: &mut crate::snapshot::scope::ScopeFilter,
) -> std::io::Result<()> {
    let layouts = layouts_of(events);
    read_window(segments, range, |frame: Frame<'_>| {
        if frame.kind == FrameKind::Samples {
            filter.collect_pids(frame.records, &layouts);
        }
        Ok::<(), std::io::Error>(())
    })
    .map(drop)
}

/// Time of `range` that neither `segments` nor rings holding from
/// `ring_from` hold: from the history's newest record to the rings'
/// oldest, when the history stopped before it.
pub fn gap(ring_from: Option<SampleTime>, segments: &[SegmentInfo], range: TimeRange) -> Duration {
    match (ring_from, held(segments)) {
        (Some(ring_from), Some((_, history_to))) if ring_from > history_to => {
            let end = range.end.map_or(ring_from, |e| ring_from.min(e));
            let from = range.start.map_or(history_to, |s| history_to.max(s));
            end.since(from)
        }
        _ => Duration::ZERO,
    }
}

/// What a cut held.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CutFigures {
    /// Per CPU, the samples written (history and rings together).
    pub cpus: BTreeMap<u32, Kept>,
    pub tracking: Kept,
    /// Where the file's window starts: the later of the start asked for
    /// and the oldest instant the history holds.
    pub window_start: Option<SampleTime>,
    /// The oldest instant the history holds.
    pub held_from: Option<SampleTime>,
    /// Time inside the window that neither the history nor the rings hold
    /// (a history that stopped before the rings' oldest record).
    pub gap: Duration,
    pub read: WindowRead,
}

/// Writes the window `range` (both ends given) through `encoder`, whose
/// events are [`joined_events`] of `ring` and `segments`: the history's
/// records, then those of `ring` (the rings frozen for this dump) after
/// the history's newest.
pub fn write_cut<S: Sink>(
    ring: &Capture,
    segments: &[SegmentInfo],
    range: TimeRange,
    encoder: &mut Encoder<'_, S>,
) -> Result<CutFigures, Fill> {
    let events = encoder.events().to_vec();
    let layouts = layouts_of(&events);
    let known: HashSet<u64> = events.iter().flat_map(|e| e.ids.clone()).collect();
    let of_known = |range| RecordFilter {
        layouts: &layouts,
        range,
        ids: Some(&known),
    };
    let (held_from, history_to) = match held(segments) {
        Some((f, l)) => (Some(f), Some(l)),
        None => (None, None),
    };
    let mut figures = CutFigures {
        held_from,
        window_start: match (range.start, held_from) {
            (Some(s), Some(h)) => Some(s.max(h)),
            (s, h) => s.or(h),
        },
        ..CutFigures::default()
    };
    // The checkpoint and the tracking records after it name every
    // process: none is synthesized at the window's start. Every cgroup the
    // daemon knows now is (the checkpoint's may be older).
    encoder
        .window_start(
            figures.window_start,
            ring.kernel_text,
            &ring.loaded_modules,
            (&ring.cgroups, &[]),
        )
        .map_err(Fill::Encode)?;
    let event_id_of = |cpu: u32| {
        ring.cpus
            .iter()
            .find(|c| c.cpu == cpu)
            .and_then(|c| c.event_id)
    };
    let tracking_range = TimeRange {
        start: None,
        end: range.end,
    };
    let mut scratch = Vec::new();
    figures.read = read_window(segments, range, |frame: Frame<'_>| {
        scratch.clear();
        match frame.kind {
            FrameKind::Checkpoint | FrameKind::Tracking => {
                let kept = of_known(tracking_range).append(frame.records, &mut scratch);
                figures.tracking.merge(&kept);
                encoder.tracking(&scratch).map_err(Fill::Encode)
            }
            FrameKind::Samples => {
                of_known(range).append(frame.records, &mut scratch);
                let kept = encoder
                    .samples(frame.cpu, event_id_of(frame.cpu), &scratch)
                    .map_err(Fill::Encode)?;
                figures.cpus.entry(frame.cpu).or_default().merge(&kept);
                Ok(())
            }
            FrameKind::Events => Ok(()),
        }
    })?;
    // What the rings hold after the history (all of them when it holds
    // nothing of a CPU, or stopped: disk full, unwritable).
    let history_to = history_to.unwrap_or_default();
    for cpu in &ring.cpus {
        let after = figures
            .cpus
            .get(&cpu.cpu)
            .and_then(|k| k.newest)
            .unwrap_or(history_to);
        let newer = TimeRange {
            start: TimeRange::after(after).start,
            end: range.end,
        };
        scratch.clear();
        of_known(newer).append(&cpu.records, &mut scratch);
        if scratch.is_empty() {
            continue;
        }
        let kept = encoder
            .samples(cpu.cpu, cpu.event_id, &scratch)
            .map_err(Fill::Encode)?;
        figures.cpus.entry(cpu.cpu).or_default().merge(&kept);
    }
    scratch.clear();
    let kept = of_known(TimeRange::after(history_to)).append(&ring.tracking_records, &mut scratch);
    figures.tracking.merge(&kept);
    encoder.tracking(&scratch).map_err(Fill::Encode)?;
    figures.gap = gap(ring.held_from, segments, range);
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::abi::test_records::with_words;
    use crate::abi::{EventAttr, record_type, sample};
    use crate::history::segment::{FILE_MAGIC, SegmentEvent, SegmentEvents, encode_frame};
    use crate::recorder::CpuCapture;
    use crate::snapshot::testing::{SCHED_SWITCH_FORMAT, synthetic_host};

    const SAMPLE_TYPE: u64 = sample::IDENTIFIER | sample::TID | sample::TIME | sample::CPU;

    fn t(ns: u64) -> SampleTime {
        SampleTime::from_nanos(ns)
    }

    /// A sample of event `id` at `time` on `cpu`.
    fn sample_at(id: u64, time: u64, cpu: u32) -> Vec<u8> {
        with_words(
            record_type::SAMPLE,
            &[id, 1 | (1 << 32), time, u64::from(cpu)],
        )
    }

    fn ring_capture(cpus: Vec<CpuCapture>) -> Capture {
        let held_from = cpus.iter().filter_map(|c| c.oldest).min();
        Capture {
            events: vec![EventDescriptor {
                name: "cpu-clock".into(),
                attr: EventAttr {
                    sample_type: SAMPLE_TYPE,
                    ..EventAttr::default()
                },
                ids: vec![1],
                tracepoint: None,
            }],
            cpus,
            held_from,
            window_start: held_from,
            ..Capture::default()
        }
    }

    /// A ring CPU's records, newest first as a backward ring gives them.
    fn ring_cpu(cpu: u32, times: &[u64]) -> CpuCapture {
        CpuCapture {
            cpu,
            event_id: Some(1),
            records: times
                .iter()
                .rev()
                .flat_map(|&x| sample_at(1, x, cpu))
                .collect(),
            record_count: times.len() as u64,
            oldest: times.iter().min().copied().map(t),
            newest: times.iter().max().copied().map(t),
            lost_since_start: 7,
            ..CpuCapture::default()
        }
    }

    /// A segment file in `dir` of the samples `(cpu, times, id)`.
    fn segment(dir: &Path, name: &str, cpus: &[(u32, &[u64], u64)]) -> SegmentInfo {
        let events = SegmentEvents {
            boot_id: "b".into(),
            events: vec![SegmentEvent {
                name: "cpu-clock".into(),
                sample_type: SAMPLE_TYPE,
                ids: vec![2],
            }],
        };
        let all: Vec<u64> = cpus.iter().flat_map(|c| c.1.iter().copied()).collect();
        let (first, last) = (t(*all.iter().min().unwrap()), t(*all.iter().max().unwrap()));
        let mut bytes = FILE_MAGIC.to_vec();
        bytes.extend(
            encode_frame(
                FrameKind::Events,
                0,
                (first, first),
                0,
                &events.to_bytes(),
                1,
            )
            .unwrap(),
        );
        bytes.extend(encode_frame(FrameKind::Checkpoint, 0, (first, first), 0, &[], 1).unwrap());
        for &(cpu, times, id) in cpus {
            let records: Vec<u8> = times.iter().flat_map(|&x| sample_at(id, x, cpu)).collect();
            let span = (t(times[0]), t(*times.last().unwrap()));
            bytes.extend(
                encode_frame(
                    FrameKind::Samples,
                    cpu,
                    span,
                    times.len() as u32,
                    &records,
                    1,
                )
                .unwrap(),
            );
        }
        let path = dir.join(name);
        std::fs::write(&path, &bytes).unwrap();
        SegmentInfo {
            path,
            first,
            last,
            bytes: bytes.len() as u64,
            checkpoint: first,
            events: Arc::new(events),
        }
    }

    /// Cuts `range` and reads the file back: the sample times per CPU.
    fn cut(
        ring: &Capture,
        segments: &[SegmentInfo],
        range: TimeRange,
    ) -> (CutFigures, BTreeMap<u32, Vec<u64>>, Vec<EventDescriptor>) {
        let host = synthetic_host(SCHED_SWITCH_FORMAT);
        let events = joined_events(&ring.events, segments);
        let mut encoder = Encoder::begin(Vec::new(), &host, events.clone(), None).unwrap();
        let figures = write_cut(ring, segments, range, &mut encoder).unwrap();
        let (bytes, _) = encoder.finish(&[]).unwrap();
        let parsed = flightrec_perfdata::reader::parse(&bytes).unwrap();
        let layouts = layouts_of(&events);
        let mut times: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for (h, r) in crate::ring::records(parsed.data).map_while(Result::ok) {
            if h.type_ == record_type::SAMPLE {
                let (time, cpu) = layouts.time_and_cpu(r);
                times.entry(cpu.unwrap()).or_default().push(time.unwrap());
            }
        }
        for v in times.values_mut() {
            v.sort_unstable();
        }
        (figures, times, events)
    }

    #[test]
    fn records_of_an_earlier_run_join_their_event_and_unknown_events_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        // CPU 0 written by an earlier run (id 2) and by an event no longer
        // configured (id 9).
        let segs = [segment(
            dir.path(),
            "seg-1.hist",
            &[(0, &[100, 200], 2), (0, &[250], 9)],
        )];
        let ring = ring_capture(vec![ring_cpu(0, &[1000])]);
        let (figures, times, events) = cut(&ring, &segs, TimeRange::new(t(100), t(1000)));
        assert_eq!(events[0].ids, vec![1, 2]);
        assert_eq!(times[&0], vec![100, 200, 1000]);
        assert_eq!(figures.cpus[&0].count, 3);
        assert_eq!(figures.window_start, Some(t(100)));
        assert_eq!(figures.read, WindowRead::default());
    }

    #[test]
    fn a_cpu_only_the_rings_hold_keeps_what_is_after_the_history() {
        let dir = tempfile::tempdir().unwrap();
        // The history stopped at 300 and has nothing of CPU 1; its ring
        // holds 250 (also in the history's time) and 400, 500 after it.
        let segs = [segment(
            dir.path(),
            "seg-1.hist",
            &[(0, &[100, 200, 300], 2)],
        )];
        let ring = ring_capture(vec![ring_cpu(0, &[]), ring_cpu(1, &[250, 400, 500])]);
        let (figures, times, _) = cut(&ring, &segs, TimeRange::new(t(100), t(600)));
        assert_eq!(times[&1], vec![400, 500]);
        assert_eq!(figures.cpus[&1].oldest, Some(t(400)));
        assert_eq!(
            figures.gap,
            Duration::ZERO,
            "the rings reach back past the history's end"
        );
    }

    #[test]
    fn the_time_neither_holds_is_the_gap_and_the_window_starts_at_the_oldest_held() {
        let dir = tempfile::tempdir().unwrap();
        let segs = [segment(dir.path(), "seg-1.hist", &[(0, &[150, 200], 2)])];
        let ring = ring_capture(vec![ring_cpu(0, &[700, 800, 950])]);
        let (figures, times, _) = cut(&ring, &segs, TimeRange::new(t(100), t(900)));
        assert_eq!(
            figures.gap,
            Duration::from_nanos(500),
            "from the history's 200 to the rings' 700"
        );
        assert_eq!(figures.window_start, Some(t(150)));
        assert_eq!(
            times[&0],
            vec![150, 200, 700, 800],
            "950 is after the window"
        );
    }

    #[test]
    fn a_planted_link_or_foreign_file_is_left_out_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let good = segment(dir.path(), "seg-1.hist", &[(0, &[100], 2)]);
        let mut planted = segment(dir.path(), "seg-2.hist", &[(0, &[200], 2)]);
        std::fs::remove_file(&planted.path).unwrap();
        std::os::unix::fs::symlink(&good.path, &planted.path).unwrap();
        planted.first = t(150);
        let ring = ring_capture(vec![ring_cpu(0, &[])]);
        let (figures, times, _) = cut(&ring, &[good, planted], TimeRange::new(t(50), t(300)));
        assert_eq!(figures.read.skipped_segments, 1);
        assert_eq!(times[&0], vec![100]);
    }
}
