//! Instants on the daemon's two clocks, as types of their own.
//!
//! Every record's time is on the *sample clock* (the `clockid` the events
//! were opened with: CLOCK_MONOTONIC, ns since boot); requests, snapshot
//! names and replies speak the *wall clock* (CLOCK_REALTIME, ns since the
//! Unix epoch). Mixing the two is a bug a type can prevent, so each has
//! its own: [`SampleTime`] and [`WallTime`]. Spans are [`Duration`]s.
//! The one conversion between them is `host::ClockReference`.
//! "None" is an `Option`, never a zero.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// An instant on the sample clock: ns since boot, as records carry it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SampleTime(u64);

/// An instant on the wall clock: ns since the Unix epoch (negative before
/// it, which no record has).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WallTime(i64);

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn signed_nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

impl SampleTime {
    pub const fn from_nanos(ns: u64) -> Self {
        SampleTime(ns)
    }

    /// ns since boot, as a record holds it.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    pub fn saturating_add(self, d: Duration) -> Self {
        SampleTime(self.0.saturating_add(nanos(d)))
    }

    pub fn saturating_sub(self, d: Duration) -> Self {
        SampleTime(self.0.saturating_sub(nanos(d)))
    }

    /// How long after `earlier` this is (zero if it is not after it).
    pub fn since(self, earlier: SampleTime) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl WallTime {
    pub const fn from_unix_nanos(ns: i64) -> Self {
        WallTime(ns)
    }

    /// ns since the Unix epoch, as the API carries it.
    pub const fn as_unix_nanos(self) -> i64 {
        self.0
    }

    pub fn now() -> Self {
        Self::of(SystemTime::now())
    }

    pub fn of(t: SystemTime) -> Self {
        WallTime(match t.duration_since(UNIX_EPOCH) {
            Ok(d) => signed_nanos(d),
            Err(e) => -signed_nanos(e.duration()),
        })
    }

    pub fn to_system_time(self) -> SystemTime {
        if self.0 >= 0 {
            UNIX_EPOCH + Duration::from_nanos(self.0.unsigned_abs())
        } else {
            UNIX_EPOCH - Duration::from_nanos(self.0.unsigned_abs())
        }
    }

    pub fn saturating_add(self, d: Duration) -> Self {
        WallTime(self.0.saturating_add(signed_nanos(d)))
    }

    pub fn saturating_sub(self, d: Duration) -> Self {
        WallTime(self.0.saturating_sub(signed_nanos(d)))
    }

    /// How long after `earlier` this is (zero if it is not after it).
    pub fn since(self, earlier: WallTime) -> Duration {
        Duration::from_nanos(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }

    /// As RFC 3339 in UTC, to the millisecond (the epoch for an instant
    /// before it).
    pub fn rfc3339(self) -> String {
        let t = if self.0 >= 0 {
            self.to_system_time()
        } else {
            UNIX_EPOCH
        };
        humantime::format_rfc3339_millis(t).to_string()
    }
}

impl std::fmt::Display for WallTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.rfc3339())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_saturate_and_never_go_negative() {
        let t = SampleTime::from_nanos(1_000);
        assert_eq!(t.saturating_sub(Duration::from_nanos(5_000)).as_nanos(), 0);
        assert_eq!(
            t.since(SampleTime::from_nanos(400)),
            Duration::from_nanos(600)
        );
        assert_eq!(SampleTime::from_nanos(400).since(t), Duration::ZERO);
        let w = WallTime::from_unix_nanos(10);
        assert_eq!(
            w.saturating_sub(Duration::from_nanos(30)).as_unix_nanos(),
            -20
        );
        assert_eq!(w.since(WallTime::from_unix_nanos(30)), Duration::ZERO);
        assert_eq!(
            WallTime::from_unix_nanos(i64::MAX)
                .saturating_add(Duration::from_secs(1))
                .as_unix_nanos(),
            i64::MAX
        );
    }

    #[test]
    fn wall_times_round_trip_through_system_time_and_print_in_utc() {
        let w = WallTime::from_unix_nanos(1_800_000_000_123_456_789);
        assert_eq!(WallTime::of(w.to_system_time()), w);
        assert_eq!(w.rfc3339(), "2027-01-15T08:00:00.123Z");
        let before = WallTime::from_unix_nanos(-5);
        assert_eq!(WallTime::of(before.to_system_time()), before);
    }
}
