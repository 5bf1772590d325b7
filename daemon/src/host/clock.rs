//! The sample clock: every record's time base, and its relation to the
//! wall clock. The one place a [`SampleTime`] becomes a [`WallTime`] and
//! back.

use crate::time::{SampleTime, WallTime};

/// The sample clock related to the wall clock, as perf's CLOCK_DATA
/// feature holds it: lets `perf script -F+tod` print wall-clock times.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClockReference {
    /// The `clockid` the events were opened with.
    pub clockid: u32,
    /// CLOCK_REALTIME in ns since the epoch...
    pub tod_ns: u64,
    /// ... and the sample clock at the same moment.
    pub clockid_ns: u64,
}

impl ClockReference {
    /// Reads CLOCK_REALTIME and the sample clock back to back, taking the
    /// pair with the shortest gap of a few tries.
    pub fn now() -> Option<Self> {
        use nix::time::{ClockId, clock_gettime};
        let ns = |t: nix::sys::time::TimeSpec| {
            u64::try_from(t.tv_sec())
                .ok()?
                .checked_mul(1_000_000_000)?
                .checked_add(u64::try_from(t.tv_nsec()).ok()?)
        };
        let sample_clock = ClockId::from_raw(crate::abi::SAMPLE_CLOCKID);
        let mut best: Option<(u64, Self)> = None;
        for _ in 0..5 {
            let before = ns(clock_gettime(sample_clock).ok()?)?;
            let tod = ns(clock_gettime(ClockId::CLOCK_REALTIME).ok()?)?;
            let after = ns(clock_gettime(sample_clock).ok()?)?;
            let gap = after.saturating_sub(before);
            if best.is_none_or(|(g, _)| gap < g) {
                best = Some((
                    gap,
                    Self {
                        clockid: crate::abi::SAMPLE_CLOCKID.cast_unsigned(),
                        tod_ns: tod,
                        clockid_ns: before + gap / 2,
                    },
                ));
            }
        }
        best.map(|(_, r)| r)
    }

    /// The sample-clock instant of a wall-clock one (the sample clock's
    /// start for one before it).
    pub fn sample_of(&self, wall: WallTime) -> SampleTime {
        let sample = i128::from(self.clockid_ns) + i128::from(wall.as_unix_nanos())
            - i128::from(self.tod_ns);
        SampleTime::from_nanos(u64::try_from(sample.max(0)).unwrap_or(u64::MAX))
    }

    /// The wall-clock instant of a sample-clock one.
    pub fn wall_of(&self, sample: SampleTime) -> WallTime {
        let unix =
            i128::from(self.tod_ns) + i128::from(sample.as_nanos()) - i128::from(self.clockid_ns);
        WallTime::from_unix_nanos(i64::try_from(unix).unwrap_or(i64::MAX))
    }
}

/// The sample clock now (the time base of every record).
pub fn sample_clock_now() -> Option<SampleTime> {
    use nix::time::{ClockId, clock_gettime};
    let t = clock_gettime(ClockId::from_raw(crate::abi::SAMPLE_CLOCKID)).ok()?;
    let ns = u64::try_from(t.tv_sec())
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(u64::try_from(t.tv_nsec()).ok()?)?;
    Some(SampleTime::from_nanos(ns))
}

/// The resolution of the sample clock in ns (CLOCKID feature).
pub(super) fn sample_clock_resolution_ns() -> u64 {
    use nix::time::{ClockId, clock_getres};
    clock_getres(ClockId::from_raw(crate::abi::SAMPLE_CLOCKID))
        .ok()
        .and_then(|t| u64::try_from(t.tv_nsec()).ok())
        .filter(|&n| n > 0)
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_and_sample_times_convert_both_ways() {
        let r = ClockReference {
            clockid: 1,
            tod_ns: 1_800_000_000_000_000_000,
            clockid_ns: 5_000_000_000,
        };
        let wall = WallTime::from_unix_nanos(1_800_000_000_000_000_000 - 1_000);
        let sample = SampleTime::from_nanos(4_999_999_000);
        assert_eq!(r.sample_of(wall), sample);
        assert_eq!(r.wall_of(sample), wall);
        // Before the sample clock started.
        assert_eq!(
            r.sample_of(WallTime::from_unix_nanos(1_000)),
            SampleTime::default()
        );
    }

    #[test]
    fn clock_reference_pairs_the_two_clocks() {
        let r = ClockReference::now().unwrap();
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert!(unix - r.tod_ns < 1_000_000_000, "{r:?} vs {unix}");
        assert_eq!(r.clockid, libc::CLOCK_MONOTONIC as u32);
        assert!(r.clockid_ns > 0 && r.clockid_ns < r.tod_ns);
    }
}
