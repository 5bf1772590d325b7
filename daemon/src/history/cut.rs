//! A window cut from the history, turned into the capture the rings give.

use std::collections::HashSet;

use super::read::HistoryWindow;
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
            let mut records = batch.records;
            let mut count = retain_records(&mut records, keep);
            let same_cpu = ring_cpus.iter().find(|c| c.cpu == cpu);
            let mut newest_ns = batch.newest_ns;
            if let Some(c) = same_cpu {
                records.reserve_exact(c.records.len());
                let after = batch.newest_ns.unwrap_or(history_to);
                let newer = append_newer(&mut records, &c.records, &layouts, after);
                count += newer.count;
                newest_ns = newest_ns.max(newer.newest_ns);
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
    // after it, with the times of what is kept.
    for mut c in ring_cpus
        .into_iter()
        .filter(|c| !history_cpus.contains(&c.cpu))
    {
        let from = std::mem::take(&mut c.records);
        let newer = append_newer(&mut c.records, &from, &layouts, history_to);
        if newer.count > 0 {
            c.record_count = newer.count;
            c.oldest_ns = newer.oldest_ns;
            c.newest_ns = newer.newest_ns;
            cpus.push(c);
        }
    }
    ring.cpus = cpus;
    let ring_tracking = std::mem::take(&mut ring.tracking_records);
    let mut tracking = window.tracking;
    let count = retain_records(&mut tracking, keep);
    // The checkpoint and the records after it name every process: none
    // is synthesized at the window's start.
    ring.processes.clear();
    let newer = append_newer(&mut tracking, &ring_tracking, &layouts, history_to);
    ring.tracking_records = tracking;
    ring.tracking_record_count = count + newer.count;
    let held_from = window.held_from_ns.unwrap_or(0);
    ring.held_from_ns = held_from;
    ring.window_start_ns = start_ns.max(held_from);
    ring
}

/// Keeps the records of `records` that `keep` accepts, moved down in
/// place (a window cut from the history can be hundreds of MiB: a copy
/// would double the dump's peak memory); returns how many. A torn tail is
/// dropped.
fn retain_records(records: &mut Vec<u8>, keep: impl Fn(&[u8]) -> bool) -> u64 {
    let (mut read, mut write, mut count) = (0, 0, 0);
    while let Some(Ok((_, record))) = crate::ring::records(&records[read..]).next() {
        let (size, kept) = (record.len(), keep(record));
        if kept {
            records.copy_within(read..read + size, write);
            write += size;
            count += 1;
        }
        read += size;
    }
    records.truncate(write);
    count
}

/// What [`append_newer`] appended.
#[derive(Debug, Default, PartialEq, Eq)]
struct Appended {
    count: u64,
    oldest_ns: Option<u64>,
    newest_ns: Option<u64>,
}

/// Appends to `out` the records of `from` newer than `after_ns`.
fn append_newer(
    out: &mut Vec<u8>,
    from: &[u8],
    layouts: &RecordLayouts,
    after_ns: u64,
) -> Appended {
    let mut appended = Appended::default();
    for (_, record) in crate::ring::records(from).map_while(Result::ok) {
        if let (Some(t), _) = layouts.time_and_cpu(record)
            && t > after_ns
        {
            out.extend_from_slice(record);
            appended.count += 1;
            appended.oldest_ns = Some(appended.oldest_ns.map_or(t, |o| o.min(t)));
            appended.newest_ns = appended.newest_ns.max(Some(t));
        }
    }
    appended
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::abi::sample;
    use crate::abi::test_records::with_words;
    use crate::abi::{EventAttr, record_type};
    use crate::history::read::CpuRecords;
    use crate::history::segment::SegmentEvent;
    use crate::recorder::EventDescriptor;

    const SAMPLE_TYPE: u64 = sample::IDENTIFIER | sample::TID | sample::TIME | sample::CPU;

    /// A sample of event `id` at `time` on `cpu`.
    fn sample_at(id: u64, time: u64, cpu: u32) -> Vec<u8> {
        with_words(
            record_type::SAMPLE,
            &[id, 1 | (1 << 32), time, u64::from(cpu)],
        )
    }

    fn times(records: &[u8]) -> Vec<u64> {
        let mut layouts = RecordLayouts::default();
        for id in [1, 2, 9] {
            layouts.insert(id, SAMPLE_TYPE);
        }
        crate::ring::records(records)
            .map_while(Result::ok)
            .filter_map(|(_, r)| layouts.time_and_cpu(r).0)
            .collect()
    }

    fn ring_capture(cpus: Vec<CpuCapture>, held_from_ns: u64) -> Capture {
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
            held_from_ns,
            ..Capture::default()
        }
    }

    /// A ring CPU's records, newest first as a backward ring gives them.
    fn ring_cpu(cpu: u32, times: &[u64]) -> CpuCapture {
        let records: Vec<u8> = times
            .iter()
            .rev()
            .flat_map(|&t| sample_at(1, t, cpu))
            .collect();
        CpuCapture {
            cpu,
            event_id: 1,
            records,
            record_count: times.len() as u64,
            oldest_ns: times.iter().min().copied(),
            newest_ns: times.iter().max().copied(),
            lost_since_start: 7,
            ..CpuCapture::default()
        }
    }

    fn history(cpus: &[(u32, &[u64], u64)], held: (u64, u64)) -> HistoryWindow {
        let mut map = BTreeMap::new();
        for &(cpu, times, id) in cpus {
            map.insert(
                cpu,
                CpuRecords {
                    records: times.iter().flat_map(|&t| sample_at(id, t, cpu)).collect(),
                    count: times.len() as u64,
                    oldest_ns: times.iter().min().copied(),
                    newest_ns: times.iter().max().copied(),
                },
            );
        }
        HistoryWindow {
            cpus: map,
            events: vec![SegmentEvent {
                name: "cpu-clock".into(),
                sample_type: SAMPLE_TYPE,
                ids: vec![2],
            }],
            held_from_ns: Some(held.0),
            held_to_ns: Some(held.1),
            ..HistoryWindow::default()
        }
    }

    #[test]
    fn retaining_moves_the_kept_records_down_in_order_and_drops_a_torn_tail() {
        let mut records: Vec<u8> = [
            sample_at(1, 10, 0),
            sample_at(9, 20, 0),
            sample_at(1, 30, 0),
            sample_at(9, 40, 0),
            sample_at(1, 50, 0),
        ]
        .concat();
        records.extend_from_slice(&sample_at(1, 60, 0)[..12]);
        let count = retain_records(&mut records, |r| RecordLayouts::identifier(r) == Some(1));
        assert_eq!(count, 3);
        assert_eq!(times(&records), vec![10, 30, 50]);
        assert_eq!(records.len(), 3 * sample_at(1, 0, 0).len());
        let mut none = sample_at(9, 1, 0);
        assert_eq!(retain_records(&mut none, |_| false), 0);
        assert!(none.is_empty());
    }

    #[test]
    fn records_of_an_earlier_run_join_their_event_and_unknown_events_are_left_out() {
        // History of CPU 0 written by an earlier run (id 2) and by an event
        // no longer configured (id 9).
        let mut window = history(&[(0, &[100, 200], 2)], (100, 300));
        window
            .cpus
            .get_mut(&0)
            .unwrap()
            .records
            .extend(sample_at(9, 250, 0));
        let ring = ring_capture(vec![ring_cpu(0, &[1000])], 1000);
        let cut = capture_from_history(ring, window, 100, 300);
        assert_eq!(cut.events[0].ids, vec![1, 2]);
        assert_eq!(times(&cut.cpus[0].records), vec![100, 200, 1000]);
        assert_eq!(cut.cpus[0].record_count, 3);
        assert_eq!(cut.cpus[0].lost_since_start, 7);
    }

    #[test]
    fn a_cpu_only_the_rings_hold_keeps_the_times_of_the_records_kept() {
        // The history stopped at 300 and has nothing of CPU 1; its ring
        // holds 250 (also in the history's time) and 400, 500 after it.
        let window = history(&[(0, &[100, 200, 300], 2)], (100, 300));
        let ring = ring_capture(vec![ring_cpu(0, &[]), ring_cpu(1, &[250, 400, 500])], 250);
        let cut = capture_from_history(ring, window, 100, 600);
        let cpu1 = cut.cpus.iter().find(|c| c.cpu == 1).expect("CPU 1 kept");
        assert_eq!(times(&cpu1.records), vec![500, 400]);
        assert_eq!(cpu1.record_count, 2);
        assert_eq!(cpu1.oldest_ns, Some(400), "not the ring's oldest, 250");
        assert_eq!(cpu1.newest_ns, Some(500));
        assert_eq!(cut.gap_ns, 0, "the rings reach back past the history's end");
    }

    #[test]
    fn the_time_neither_holds_is_the_gap_and_the_window_starts_at_the_oldest_held() {
        let window = history(&[(0, &[150, 200], 2)], (150, 200));
        let ring = ring_capture(vec![ring_cpu(0, &[700, 800])], 700);
        let cut = capture_from_history(ring, window, 100, 900);
        assert_eq!(cut.gap_ns, 500, "from the history's 200 to the rings' 700");
        assert_eq!(cut.window_start_ns, 150);
        assert_eq!(times(&cut.cpus[0].records), vec![150, 200, 800, 700]);
        assert_eq!(cut.cpus[0].oldest_ns, Some(150));
        assert_eq!(cut.cpus[0].newest_ns, Some(800));
    }
}
