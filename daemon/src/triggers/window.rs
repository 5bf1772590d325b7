//! The window a dump asks for, in wall-clock time: `at`, `before`, `after`
//! as a caller gives them (`snapctl dump --at --before --after`), resolved
//! against the clock into a start, an end and how long the freeze waits.

use std::time::Duration;

/// Longest `before` a request may ask for: a week reaches past anything
/// the recorder keeps.
pub const MAX_BEFORE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Longest the freeze may be put off (`after`, or `at` in the future).
pub const MAX_AHEAD: Duration = Duration::from_secs(3600);
/// `before` when `at` is in the past and none is given.
pub const PAST_BEFORE: Duration = Duration::from_secs(10);

/// A window as requested; every part optional.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowRequest {
    /// The instant to cut around, ns since the Unix epoch; None: now.
    pub at_unix_ns: Option<i64>,
    pub before: Option<Duration>,
    pub after: Option<Duration>,
}

/// A window in wall-clock time (ns since the Unix epoch). An open start
/// reaches as far back as the recorder holds; an open end is the freeze.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WallWindow {
    pub start_unix_ns: Option<i64>,
    pub end_unix_ns: Option<i64>,
}

impl WallWindow {
    /// Whether this is today's dump: everything the rings hold, up to the
    /// freeze.
    pub fn is_open(&self) -> bool {
        self.start_unix_ns.is_none() && self.end_unix_ns.is_none()
    }

    /// The smallest window holding both (one dump serves both requests).
    pub fn union(self, other: WallWindow) -> WallWindow {
        WallWindow {
            start_unix_ns: self
                .start_unix_ns
                .zip(other.start_unix_ns)
                .map(|(a, b)| a.min(b)),
            end_unix_ns: self
                .end_unix_ns
                .zip(other.end_unix_ns)
                .map(|(a, b)| a.max(b)),
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

fn ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

impl WindowRequest {
    pub fn is_empty(&self) -> bool {
        *self == WindowRequest::default()
    }

    /// The window from `at - before` to `at + after`, `now_unix_ns` being
    /// the wall clock now. Without `at` the window is cut around now and
    /// reaches as far back as the rings hold unless `before` says less;
    /// with `at` in the past, `before` defaults to [`PAST_BEFORE`]. Without
    /// `after` a window cut around now ends at the freeze (which the
    /// `[snapshot]` delay may put off), one cut around a given `at` ends
    /// there.
    pub fn resolve(&self, now_unix_ns: i64) -> Result<ResolvedWindow, WindowError> {
        let fail = |field, message: String| WindowError { field, message };
        if let Some(at) = self.at_unix_ns
            && at <= 0
        {
            return Err(fail(
                "at_unix_ns",
                format!("{at} is not a time after the Unix epoch"),
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
        let at = self.at_unix_ns.unwrap_or(now_unix_ns);
        let end = self
            .after
            .map(|a| at.saturating_add(ns(a)))
            .or(self.at_unix_ns);
        if let Some(end) = end
            && end.saturating_sub(now_unix_ns) > ns(MAX_AHEAD)
        {
            let field = if self.after.is_some() {
                "after_ns"
            } else {
                "at_unix_ns"
            };
            return Err(fail(
                field,
                format!(
                    "the window would end more than {} from now",
                    humantime::format_duration(MAX_AHEAD)
                ),
            ));
        }
        let in_past = self.at_unix_ns.is_some_and(|at| at < now_unix_ns);
        let before = self.before.or(in_past.then_some(PAST_BEFORE));
        let start = before.map(|b| at.saturating_sub(ns(b)));
        let delay = end.map(|e| {
            Duration::from_nanos(u64::try_from(e.saturating_sub(now_unix_ns)).unwrap_or(0))
        });
        Ok(ResolvedWindow {
            window: WallWindow {
                start_unix_ns: start,
                end_unix_ns: end,
            },
            delay,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000_000_000;
    const S: i64 = 1_000_000_000;

    fn req(at: Option<i64>, before: Option<u64>, after: Option<u64>) -> WindowRequest {
        WindowRequest {
            at_unix_ns: at,
            before: before.map(Duration::from_secs),
            after: after.map(Duration::from_secs),
        }
    }

    #[test]
    fn no_window_is_todays_dump() {
        let r = WindowRequest::default().resolve(NOW).unwrap();
        assert!(r.window.is_open());
        assert_eq!(r.delay, None);
    }

    #[test]
    fn before_alone_cuts_the_rings_and_keeps_the_snapshot_delay() {
        let r = req(None, Some(2), None).resolve(NOW).unwrap();
        assert_eq!(r.window.start_unix_ns, Some(NOW - 2 * S));
        assert_eq!(r.window.end_unix_ns, None);
        assert_eq!(r.delay, None);
    }

    #[test]
    fn after_puts_the_freeze_off_to_the_end() {
        let r = req(None, None, Some(3)).resolve(NOW).unwrap();
        assert_eq!(r.window.start_unix_ns, None);
        assert_eq!(r.window.end_unix_ns, Some(NOW + 3 * S));
        assert_eq!(r.delay, Some(Duration::from_secs(3)));
    }

    #[test]
    fn an_instant_in_the_past_reaches_back_ten_seconds_and_waits_for_nothing() {
        let r = req(Some(NOW - 300 * S), None, None).resolve(NOW).unwrap();
        assert_eq!(r.window.start_unix_ns, Some(NOW - 310 * S));
        assert_eq!(r.window.end_unix_ns, Some(NOW - 300 * S));
        assert_eq!(r.delay, Some(Duration::ZERO));
        let r = req(Some(NOW - 300 * S), Some(60), Some(30))
            .resolve(NOW)
            .unwrap();
        assert_eq!(r.window.start_unix_ns, Some(NOW - 360 * S));
        assert_eq!(r.window.end_unix_ns, Some(NOW - 270 * S));
        assert_eq!(r.delay, Some(Duration::ZERO));
    }

    #[test]
    fn an_instant_in_the_future_is_waited_for() {
        let r = req(Some(NOW + 5 * S), Some(1), None).resolve(NOW).unwrap();
        assert_eq!(r.window.start_unix_ns, Some(NOW + 4 * S));
        assert_eq!(r.delay, Some(Duration::from_secs(5)));
    }

    #[test]
    fn bad_fields_are_named() {
        let field = |r: WindowRequest| r.resolve(NOW).unwrap_err().field;
        assert_eq!(field(req(Some(-1), None, None)), "at_unix_ns");
        assert_eq!(field(req(Some(0), None, None)), "at_unix_ns");
        assert_eq!(field(req(None, Some(8 * 24 * 3600), None)), "before_ns");
        assert_eq!(field(req(None, None, Some(3601))), "after_ns");
        assert_eq!(
            field(req(Some(NOW + 2 * 3600 * S), None, None)),
            "at_unix_ns"
        );
        // At the limits, accepted.
        assert!(
            req(None, Some(7 * 24 * 3600), Some(3600))
                .resolve(NOW)
                .is_ok()
        );
    }

    #[test]
    fn a_union_holds_both_and_an_open_end_wins() {
        let a = WallWindow {
            start_unix_ns: Some(10),
            end_unix_ns: Some(20),
        };
        let b = WallWindow {
            start_unix_ns: Some(5),
            end_unix_ns: Some(15),
        };
        assert_eq!(
            a.union(b),
            WallWindow {
                start_unix_ns: Some(5),
                end_unix_ns: Some(20)
            }
        );
        assert!(a.union(WallWindow::default()).is_open());
    }
}
