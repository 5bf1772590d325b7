//! Which segments the history drops, pure: by age, then by bytes, oldest
//! first, so the budget is never exceeded.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::segment::SegmentEvents;
use crate::time::SampleTime;

/// A segment file as the history indexes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    pub path: PathBuf,
    /// Sample times of its oldest and newest record (the checkpoint's
    /// while it holds no other).
    pub first: SampleTime,
    pub last: SampleTime,
    /// Whole bytes: a read never goes past them.
    pub bytes: u64,
    /// The instant of the checkpoint the segment starts with.
    pub checkpoint: SampleTime,
    /// The events its records carry ids of (its first frame).
    pub events: Arc<SegmentEvents>,
}

/// How many of `closed` (oldest first) to remove before `incoming` more
/// bytes are written to a current segment of `current` bytes: those whose
/// newest record is older than `max_age` before `now`, then the oldest
/// while the total would pass `max_bytes`.
pub fn segments_to_drop(
    closed: &[SegmentInfo],
    current: u64,
    incoming: u64,
    now: SampleTime,
    max_age: Duration,
    max_bytes: u64,
) -> usize {
    let oldest_kept = now.saturating_sub(max_age);
    let mut drop = closed.iter().take_while(|s| s.last < oldest_kept).count();
    let mut total: u64 = closed[drop..].iter().map(|s| s.bytes).sum::<u64>() + current + incoming;
    while total > max_bytes && drop < closed.len() {
        total -= closed[drop].bytes;
        drop += 1;
    }
    drop
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ns: u64) -> SampleTime {
        SampleTime::from_nanos(ns)
    }

    fn seg(first_ns: u64, last_ns: u64, bytes: u64) -> SegmentInfo {
        let (first, last) = (
            SampleTime::from_nanos(first_ns),
            SampleTime::from_nanos(last_ns),
        );
        SegmentInfo {
            path: format!("{first_ns}").into(),
            first,
            last,
            bytes,
            checkpoint: first,
            events: Arc::default(),
        }
    }

    #[test]
    fn old_segments_go_by_age_then_by_bytes() {
        let closed = [seg(0, 10, 100), seg(10, 20, 100), seg(20, 30, 100)];
        // Nothing too old, room for everything.
        assert_eq!(
            segments_to_drop(&closed, 50, 10, t(35), Duration::from_nanos(100), 1000),
            0
        );
        // The first two end before now - max_age.
        assert_eq!(
            segments_to_drop(&closed, 50, 10, t(45), Duration::from_nanos(20), 1000),
            2
        );
        // 300 + 50 + 60 = 410 > 400: the oldest goes.
        assert_eq!(
            segments_to_drop(&closed, 50, 60, t(35), Duration::from_nanos(100), 400),
            1
        );
        // Even all closed ones cannot make room: all of them go.
        assert_eq!(
            segments_to_drop(&closed, 500, 60, t(35), Duration::from_nanos(100), 400),
            3
        );
    }

    #[test]
    fn the_budget_holds_after_every_plan() {
        let closed: Vec<_> = (0..20).map(|i| seg(i * 10, i * 10 + 9, 37 + i)).collect();
        for budget in [100, 333, 500, 1000] {
            for incoming in [0, 13, 99] {
                let n = segments_to_drop(
                    &closed,
                    20,
                    incoming,
                    t(200),
                    Duration::from_nanos(10_000),
                    budget,
                );
                let kept: u64 = closed[n..].iter().map(|s| s.bytes).sum();
                if n < closed.len() {
                    assert!(kept + 20 + incoming <= budget, "{budget} {incoming}");
                }
            }
        }
    }
}
