//! The window of a dump, in one place: what a caller asks (`at`, `before`,
//! `after`, as `snapctl dump --at --before --after` gives them), resolved
//! against the wall clock into a [`WallWindow`]; whether two windows can
//! be one file; and what a file holds of the window asked for
//! ([`held`]: the start, the end and the time missing, for a dump of the
//! rings and one cut from the history alike).

use std::time::Duration;

use crate::host::ClockReference;
use crate::ring::filter::TimeRange;
use crate::time::WallTime;

/// Longest `before` a request may ask for: a week reaches past anything
/// the recorder keeps.
pub const MAX_BEFORE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Longest the freeze may be put off (`after`, or `at` in the future).
/// A window ending later is refused: nothing is gained by asking so far
/// ahead, and the request would hold its caller (and a pending dump) that
/// long.
pub const MAX_AHEAD: Duration = Duration::from_secs(5 * 60);
/// `before` when `at` is in the past and none is given.
pub const PAST_BEFORE: Duration = Duration::from_secs(10);

/// A window as requested; every part optional.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowRequest {
    /// The instant to cut around; None: now.
    pub at: Option<WallTime>,
    pub before: Option<Duration>,
    pub after: Option<Duration>,
}

/// A window in wall-clock time. An open start reaches as far back as the
/// rings hold; an open end is the freeze.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WallWindow {
    pub start: Option<WallTime>,
    pub end: Option<WallTime>,
}

impl WallWindow {
    /// Whether this is today's dump: everything the rings hold, up to the
    /// freeze.
    pub fn is_open(&self) -> bool {
        self.start.is_none() && self.end.is_none()
    }

    /// The smallest window holding both, when one file can hold both
    /// without holding time neither asked for; None otherwise. Windows
    /// ending at the freeze join any other ending there (the union starts
    /// at the older start: an open start is everything the rings hold,
    /// which an explicit start older than them extends); windows with an
    /// end join when they overlap or touch and end at the same instant or
    /// both before `now` (in the past, nothing waits for either end).
    pub fn union(self, other: WallWindow, now: WallTime) -> Option<WallWindow> {
        let start = match (self.start, other.start) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match (self.end, other.end) {
            (None, None) => Some(WallWindow { start, end: None }),
            (Some(a), Some(b)) => {
                let past = a <= now && b <= now;
                let touch = self.start.is_none_or(|s| s <= b) && other.start.is_none_or(|s| s <= a);
                ((a == b || past) && touch).then_some(WallWindow {
                    start,
                    end: Some(a.max(b)),
                })
            }
            _ => None,
        }
    }

    /// The smallest window holding all of `windows` as they are served
    /// by one file: an open start (everything held) or an open end (the
    /// freeze) if any has one, else the oldest start and the latest end.
    pub fn cover<'a>(windows: impl IntoIterator<Item = &'a WallWindow>) -> WallWindow {
        let mut windows = windows.into_iter();
        let Some(first) = windows.next() else {
            return WallWindow::default();
        };
        windows.fold(*first, |acc, w| WallWindow {
            start: acc.start.zip(w.start).map(|(a, b)| a.min(b)),
            end: acc.end.zip(w.end).map(|(a, b)| a.max(b)),
        })
    }

    /// The window in sample-clock time.
    pub fn to_samples(self, clock: &ClockReference) -> TimeRange {
        TimeRange {
            start: self.start.map(|s| clock.sample_of(s)),
            end: self.end.map(|e| clock.sample_of(e)),
        }
    }
}

/// A request resolved against the clock; the default is today's dump.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResolvedWindow {
    pub window: WallWindow,
    /// How long after the request the freeze may happen at the earliest:
    /// until the window's end. None: the `[snapshot]` delay applies.
    pub delay: Option<Duration>,
}

/// A request field that cannot be served, named as the API names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct WindowError {
    pub field: &'static str,
    pub message: String,
}

impl WindowRequest {
    pub fn is_empty(&self) -> bool {
        *self == WindowRequest::default()
    }

    /// The window from `at - before` to `at + after`, `now` being the wall
    /// clock now. Without `at` the window is cut around now and reaches as
    /// far back as the rings hold unless `before` says less; with `at` in
    /// the past, `before` defaults to [`PAST_BEFORE`]. Without `after` a
    /// window cut around now ends at the freeze (which the `[snapshot]`
    /// delay may put off), one cut around a given `at` ends there.
    pub fn resolve(&self, now: WallTime) -> Result<ResolvedWindow, WindowError> {
        let fail = |field, message: String| WindowError { field, message };
        if let Some(at) = self.at
            && at.as_unix_nanos() <= 0
        {
            return Err(fail(
                "at_unix_ns",
                format!("{} is not a time after the Unix epoch", at.as_unix_nanos()),
            ));
        }
        if let Some(before) = self.before.filter(|&b| b > MAX_BEFORE) {
            return Err(fail(
                "before_ns",
                format!(
                    "{} is longer than the {} a window may reach back",
                    humantime::format_duration(before),
                    humantime::format_duration(MAX_BEFORE)
                ),
            ));
        }
        let at = self.at.unwrap_or(now);
        let end = self.after.map(|a| at.saturating_add(a)).or(self.at);
        if let Some(end) = end
            && end.since(now) > MAX_AHEAD
        {
            let field = if self.after.is_some() {
                "after_ns"
            } else {
                "at_unix_ns"
            };
            return Err(fail(
                field,
                format!(
                    "the window would end {} from now, more than the {} a dump may wait for",
                    humantime::format_duration(end.since(now)),
                    humantime::format_duration(MAX_AHEAD)
                ),
            ));
        }
        let in_past = self.at.is_some_and(|at| at < now);
        let before = self.before.or(in_past.then_some(PAST_BEFORE));
        let start = before.map(|b| at.saturating_sub(b));
        Ok(ResolvedWindow {
            window: WallWindow { start, end },
            delay: end.map(|e| e.since(now)),
        })
    }
}

/// The window a snapshot holds, in wall-clock time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeldWindow {
    pub start: WallTime,
    pub end: WallTime,
    /// How much of the window asked for neither the rings nor the history
    /// held: older than anything held, or in a gap between the two.
    pub missing: Duration,
}

/// A window wholly older than anything held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutsideWindow {
    /// Where the window asked for ends.
    pub end: WallTime,
    /// The oldest instant still held.
    pub held_from: WallTime,
}

/// What a file holds of `asked`: from the later of its start and the
/// oldest instant held (`held_from`: None when nothing is held), to its end
/// (an open end: `frozen_at`); what is missing is the time before
/// `held_from` it asked for, plus `gap` (time inside that neither held).
/// A window that ends before anything held is refused.
pub fn held(
    asked: WallWindow,
    frozen_at: WallTime,
    held_from: Option<WallTime>,
    gap: Duration,
) -> Result<HeldWindow, OutsideWindow> {
    if let (Some(end), Some(held_from)) = (asked.end, held_from)
        && end < held_from
    {
        return Err(OutsideWindow { end, held_from });
    }
    let start = match (asked.start, held_from) {
        (Some(start), Some(held)) => start.max(held),
        (Some(start), None) => start,
        (None, held) => held.unwrap_or(frozen_at),
    };
    let before_held = match (asked.start, held_from) {
        (Some(start), Some(held)) => held.since(start),
        _ => Duration::ZERO,
    };
    Ok(HeldWindow {
        start,
        end: asked.end.unwrap_or(frozen_at),
        missing: before_held + gap,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000_000_000;
    const S: i64 = 1_000_000_000;

    fn w(ns: i64) -> WallTime {
        WallTime::from_unix_nanos(ns)
    }

    fn req(at: Option<i64>, before: Option<u64>, after: Option<u64>) -> WindowRequest {
        WindowRequest {
            at: at.map(w),
            before: before.map(Duration::from_secs),
            after: after.map(Duration::from_secs),
        }
    }

    fn window(start: Option<i64>, end: Option<i64>) -> WallWindow {
        WallWindow {
            start: start.map(w),
            end: end.map(w),
        }
    }

    #[test]
    fn no_window_is_todays_dump() {
        let r = WindowRequest::default().resolve(w(NOW)).unwrap();
        assert!(r.window.is_open());
        assert_eq!(r.delay, None);
    }

    #[test]
    fn before_alone_cuts_the_rings_and_keeps_the_snapshot_delay() {
        let r = req(None, Some(2), None).resolve(w(NOW)).unwrap();
        assert_eq!(r.window, window(Some(NOW - 2 * S), None));
        assert_eq!(r.delay, None);
    }

    #[test]
    fn after_puts_the_freeze_off_to_the_end() {
        let r = req(None, None, Some(3)).resolve(w(NOW)).unwrap();
        assert_eq!(r.window, window(None, Some(NOW + 3 * S)));
        assert_eq!(r.delay, Some(Duration::from_secs(3)));
    }

    #[test]
    fn an_instant_in_the_past_reaches_back_ten_seconds_and_waits_for_nothing() {
        let r = req(Some(NOW - 300 * S), None, None)
            .resolve(w(NOW))
            .unwrap();
        assert_eq!(r.window, window(Some(NOW - 310 * S), Some(NOW - 300 * S)));
        assert_eq!(r.delay, Some(Duration::ZERO));
        let r = req(Some(NOW - 300 * S), Some(60), Some(30))
            .resolve(w(NOW))
            .unwrap();
        assert_eq!(r.window, window(Some(NOW - 360 * S), Some(NOW - 270 * S)));
        assert_eq!(r.delay, Some(Duration::ZERO));
    }

    #[test]
    fn an_instant_in_the_future_is_waited_for() {
        let r = req(Some(NOW + 5 * S), Some(1), None)
            .resolve(w(NOW))
            .unwrap();
        assert_eq!(r.window.start, Some(w(NOW + 4 * S)));
        assert_eq!(r.delay, Some(Duration::from_secs(5)));
    }

    #[test]
    fn bad_fields_are_named() {
        let field = |r: WindowRequest| r.resolve(w(NOW)).unwrap_err().field;
        assert_eq!(field(req(Some(-1), None, None)), "at_unix_ns");
        assert_eq!(field(req(Some(0), None, None)), "at_unix_ns");
        assert_eq!(field(req(None, Some(8 * 24 * 3600), None)), "before_ns");
        assert_eq!(field(req(None, None, Some(301))), "after_ns");
        assert_eq!(field(req(Some(NOW + 3600 * S), None, None)), "at_unix_ns");
        let e = req(None, None, Some(3600)).resolve(w(NOW)).unwrap_err();
        assert_eq!(
            e.message,
            "the window would end 1h from now, more than the 5m a dump may wait for"
        );
        // At the limits, accepted.
        assert!(
            req(None, Some(7 * 24 * 3600), Some(300))
                .resolve(w(NOW))
                .is_ok()
        );
    }

    #[test]
    fn windows_ending_at_the_freeze_share_a_file_from_the_older_start() {
        let now = w(NOW);
        let open = WallWindow::default();
        let since = window(Some(NOW - 60 * S), None);
        assert_eq!(open.union(open, now), Some(open));
        assert_eq!(open.union(since, now), Some(since));
        assert_eq!(
            since.union(window(Some(NOW - 5 * S), None), now),
            Some(since)
        );
    }

    #[test]
    fn a_past_window_never_shares_a_file_with_the_rings_or_a_disjoint_one() {
        let now = w(NOW);
        let past = window(Some(NOW - 65 * S), Some(NOW - 60 * S));
        // The coalescing bug: a plain dump must not swallow it.
        assert_eq!(past.union(WallWindow::default(), now), None);
        assert_eq!(WallWindow::default().union(past, now), None);
        // Overlapping past windows make one.
        let later = window(Some(NOW - 62 * S), Some(NOW - 50 * S));
        assert_eq!(
            past.union(later, now),
            Some(window(Some(NOW - 65 * S), Some(NOW - 50 * S)))
        );
        // Disjoint ones do not: the file would hold time neither asked for.
        let apart = window(Some(NOW - 30 * S), Some(NOW - 20 * S));
        assert_eq!(past.union(apart, now), None);
    }

    #[test]
    fn a_window_ending_later_never_holds_one_that_ends_now_or_elsewhere() {
        let now = w(NOW);
        let after = window(None, Some(NOW + 120 * S));
        assert_eq!(after.union(WallWindow::default(), now), None);
        assert_eq!(after.union(window(None, Some(NOW + 60 * S)), now), None);
        assert_eq!(after.union(after, now), Some(after));
    }

    #[test]
    fn a_cover_is_open_where_any_window_is() {
        let a = window(Some(NOW - 5 * S), None);
        let b = window(Some(NOW - 9 * S), None);
        assert_eq!(WallWindow::cover([&a, &b]), b);
        assert_eq!(
            WallWindow::cover([&a, &WallWindow::default()]),
            WallWindow::default()
        );
        let p = window(Some(NOW - 9 * S), Some(NOW - 8 * S));
        let q = window(Some(NOW - 8 * S), Some(NOW - 7 * S));
        assert_eq!(
            WallWindow::cover([&p, &q]),
            window(Some(NOW - 9 * S), Some(NOW - 7 * S))
        );
    }

    #[test]
    fn what_is_held_of_a_window_and_what_is_missing() {
        let frozen = w(NOW);
        // Rings holding back to -30s, asked from -60s: 30s missing.
        let h = held(
            window(Some(NOW - 60 * S), None),
            frozen,
            Some(w(NOW - 30 * S)),
            Duration::ZERO,
        )
        .unwrap();
        assert_eq!((h.start, h.end), (w(NOW - 30 * S), frozen));
        assert_eq!(h.missing, Duration::from_secs(30));
        // A gap adds to it.
        let h = held(
            window(Some(NOW - 60 * S), None),
            frozen,
            Some(w(NOW - 30 * S)),
            Duration::from_secs(2),
        )
        .unwrap();
        assert_eq!(h.missing, Duration::from_secs(32));
        // Held further back than asked: nothing missing, the start asked.
        let h = held(
            window(Some(NOW - 10 * S), Some(NOW - 5 * S)),
            frozen,
            Some(w(NOW - 30 * S)),
            Duration::ZERO,
        )
        .unwrap();
        assert_eq!(
            (h.start, h.end, h.missing),
            (w(NOW - 10 * S), w(NOW - 5 * S), Duration::ZERO)
        );
        // An open window holds what is held.
        let h = held(
            WallWindow::default(),
            frozen,
            Some(w(NOW - 3 * S)),
            Duration::ZERO,
        )
        .unwrap();
        assert_eq!((h.start, h.end), (w(NOW - 3 * S), frozen));
        // Wholly older than anything held.
        let e = held(
            window(Some(NOW - 90 * S), Some(NOW - 80 * S)),
            frozen,
            Some(w(NOW - 30 * S)),
            Duration::ZERO,
        )
        .unwrap_err();
        assert_eq!(
            e,
            OutsideWindow {
                end: w(NOW - 80 * S),
                held_from: w(NOW - 30 * S)
            }
        );
    }
}
