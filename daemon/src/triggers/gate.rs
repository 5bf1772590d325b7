//! The rules between a condition's matches and a dump, as a pure state
//! machine: `count` matches within `window` fire the trigger; a fired
//! trigger dumps unless it dumped less than `cooldown` ago or already
//! `max_per_hour` times in the last hour, in which case it is counted as
//! suppressed.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

const HOUR: Duration = Duration::from_secs(3600);
/// Matches less than a window's this fraction apart count as one run,
/// dated by its first match: a run leaves the window at most this
/// fraction of it early, never late.
const RUNS_PER_WINDOW: u32 = 1024;

/// A trigger's rate settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateRules {
    pub count: u64,
    pub window: Duration,
    pub cooldown: Duration,
    pub max_per_hour: u32,
}

/// What one match led to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Fewer than `count` matches in the window so far.
    Counting,
    /// Fired: ask for a dump.
    Dump,
    /// Fired, but the rate limit holds it.
    Suppressed(Suppression),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suppression {
    Cooldown,
    HourlyLimit,
}

impl Suppression {
    pub fn as_str(self) -> &'static str {
        match self {
            Suppression::Cooldown => "cooldown",
            Suppression::HourlyLimit => "max_per_hour",
        }
    }
}

#[derive(Debug)]
pub struct Gate {
    rules: GateRules,
    /// The matches counted towards the next firing, as runs of matches
    /// seen at about the same time (oldest first): a busy tracepoint
    /// costs one entry per read, and at most [`RUNS_PER_WINDOW`] entries
    /// per window, not one per hit.
    matches: VecDeque<(Instant, u64)>,
    /// The sum of `matches`' counts: always less than `count`.
    pending: u64,
    /// Dumps asked in the last hour, oldest first.
    dumps: VecDeque<Instant>,
}

impl Gate {
    pub fn new(rules: GateRules) -> Self {
        Self {
            rules,
            matches: VecDeque::new(),
            pending: 0,
            dumps: VecDeque::new(),
        }
    }

    pub fn rules(&self) -> GateRules {
        self.rules
    }

    /// One match at `now`.
    #[cfg(test)]
    pub fn on_match(&mut self, now: Instant) -> Verdict {
        let mut verdict = Verdict::Counting;
        self.on_matches(now, 1, |v| verdict = v);
        verdict
    }

    /// `n` matches at `now`: calls `fired` with the verdict of each firing
    /// they complete (none while fewer than `count` are in the window).
    pub fn on_matches(&mut self, now: Instant, mut n: u64, mut fired: impl FnMut(Verdict)) {
        let window = self.rules.window;
        while let Some(&(first, times)) = self.matches.front() {
            if now.saturating_duration_since(first) > window {
                self.matches.pop_front();
                self.pending -= times;
            } else {
                break;
            }
        }
        let count = self.rules.count.max(1);
        while n > 0 {
            let needed = count - self.pending;
            if n < needed {
                self.pending += n;
                match self.matches.back_mut() {
                    Some((at, times))
                        if now.saturating_duration_since(*at) < window / RUNS_PER_WINDOW =>
                    {
                        *times += n
                    }
                    _ => self.matches.push_back((now, n)),
                }
                return;
            }
            // The matches that fired are spent: the next firing needs
            // `count` new ones.
            n -= needed;
            self.matches.clear();
            self.pending = 0;
            fired(self.fire(now));
        }
    }

    /// Fired at `now` (an interval or a PSI event fires without counting).
    pub fn fire(&mut self, now: Instant) -> Verdict {
        while let Some(&first) = self.dumps.front() {
            if now.saturating_duration_since(first) >= HOUR {
                self.dumps.pop_front();
            } else {
                break;
            }
        }
        if let Some(&last) = self.dumps.back()
            && now.saturating_duration_since(last) < self.rules.cooldown
        {
            return Verdict::Suppressed(Suppression::Cooldown);
        }
        if self.dumps.len() >= self.rules.max_per_hour as usize {
            return Verdict::Suppressed(Suppression::HourlyLimit);
        }
        self.dumps.push_back(now);
        Verdict::Dump
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    fn rules(count: u64, window: Duration, cooldown: Duration, max_per_hour: u32) -> GateRules {
        GateRules {
            count,
            window,
            cooldown,
            max_per_hour,
        }
    }

    #[test]
    fn count_matches_within_the_window_fire_once() {
        let t0 = Instant::now();
        let mut g = Gate::new(rules(3, S, Duration::ZERO, 60));
        assert_eq!(g.on_match(t0), Verdict::Counting);
        assert_eq!(g.on_match(t0 + 400 * MS), Verdict::Counting);
        // The first match left the window: two in it, not three.
        assert_eq!(g.on_match(t0 + 1100 * MS), Verdict::Counting);
        assert_eq!(g.on_match(t0 + 1200 * MS), Verdict::Dump);
        // Spent: the count starts again.
        assert_eq!(g.on_match(t0 + 1300 * MS), Verdict::Counting);
        assert_eq!(g.on_match(t0 + 1400 * MS), Verdict::Counting);
        assert_eq!(g.on_match(t0 + 1500 * MS), Verdict::Dump);
    }

    #[test]
    fn many_matches_at_once_fire_once_per_count_and_keep_the_rest() {
        let t0 = Instant::now();
        let mut g = Gate::new(rules(1000, S, Duration::ZERO, 60));
        let mut fired = Vec::new();
        g.on_matches(t0, 2500, |v| fired.push(v));
        assert_eq!(fired, [Verdict::Dump, Verdict::Dump]);
        // 500 left over: 499 more do not fire, the 500th does.
        fired.clear();
        g.on_matches(t0 + 100 * MS, 499, |v| fired.push(v));
        assert!(fired.is_empty());
        g.on_matches(t0 + 200 * MS, 1, |v| fired.push(v));
        assert_eq!(fired, [Verdict::Dump]);
    }

    #[test]
    fn a_flood_of_reads_keeps_a_bounded_number_of_runs() {
        let t0 = Instant::now();
        let mut g = Gate::new(rules(u64::MAX, S, Duration::ZERO, 60));
        // A read every 100 µs for 10 s: 100,000 reads, 10,000 in a window.
        for i in 0..100_000u32 {
            g.on_matches(t0 + i * Duration::from_micros(100), 7, |_| unreachable!());
        }
        assert!(
            g.matches.len() <= RUNS_PER_WINDOW as usize + 1,
            "{}",
            g.matches.len()
        );
        // What the window holds is still counted (to within a run).
        let in_window = 7 * 10_000;
        assert!(
            g.pending <= in_window && g.pending >= in_window - 7 * 10,
            "{}",
            g.pending
        );
    }

    #[test]
    fn cooldown_and_hourly_limit_suppress() {
        let t0 = Instant::now();
        let mut g = Gate::new(rules(1, S, 10 * S, 2));
        assert_eq!(g.on_match(t0), Verdict::Dump);
        assert_eq!(
            g.on_match(t0 + 5 * S),
            Verdict::Suppressed(Suppression::Cooldown)
        );
        assert_eq!(g.on_match(t0 + 10 * S), Verdict::Dump);
        assert_eq!(
            g.on_match(t0 + 30 * S),
            Verdict::Suppressed(Suppression::HourlyLimit)
        );
        // An hour after the first dump, one slot is free again.
        assert_eq!(g.on_match(t0 + 3600 * S), Verdict::Dump);
        assert_eq!(
            g.on_match(t0 + 3605 * S),
            Verdict::Suppressed(Suppression::Cooldown)
        );
    }

    #[test]
    fn zero_per_hour_counts_without_dumping() {
        let t0 = Instant::now();
        let mut g = Gate::new(rules(1, S, Duration::ZERO, 0));
        for i in 0..3 {
            assert_eq!(
                g.fire(t0 + i * S),
                Verdict::Suppressed(Suppression::HourlyLimit)
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn never_more_dumps_per_hour_than_allowed(
            gaps in proptest::collection::vec(0u64..120_000, 1..400),
            max in 0u32..10,
            cooldown_ms in 0u64..20_000,
        ) {
            let t0 = Instant::now();
            let mut g = Gate::new(rules(1, S, Duration::from_millis(cooldown_ms), max));
            let mut now = t0;
            let mut dumps = Vec::new();
            for gap in gaps {
                now += Duration::from_millis(gap);
                if g.on_match(now) == Verdict::Dump {
                    dumps.push(now);
                }
            }
            for (i, d) in dumps.iter().enumerate() {
                let in_hour = dumps[i..].iter().take_while(|x| x.duration_since(*d) < HOUR).count();
                proptest::prop_assert!(in_hour <= max as usize);
                if let Some(next) = dumps.get(i + 1) {
                    proptest::prop_assert!(next.duration_since(*d) >= Duration::from_millis(cooldown_ms));
                }
            }
        }
    }
}
