//! Warnings that a flood cannot turn into a flood of log lines: each kind
//! of warning is logged at once, then at most once a minute with how many
//! were held back meanwhile, and what it quotes of a request is cut short.
//! A client sending thousands of bad requests a second thus costs a few log
//! lines a minute, not megabytes.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often one kind of warning is logged at most.
pub const EVERY: Duration = Duration::from_secs(60);

/// Characters of a client's value a warning quotes at most (as config
/// errors do).
pub const MAX_QUOTED_CHARS: usize = 80;

/// A warning logged once, then again only after `every`, with how many
/// were held back meanwhile.
pub struct RateLimitedWarning {
    every: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl RateLimitedWarning {
    pub const fn new(every: Duration) -> Self {
        RateLimitedWarning {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// One a minute ([`EVERY`]).
    pub const fn per_minute() -> Self {
        Self::new(EVERY)
    }

    /// `Some(suppressed since the last one)` when the warning should be
    /// logged now.
    pub fn check(&self, now: Instant) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match s.0 {
            Some(last) if now.duration_since(last) < self.every => {
                s.1 += 1;
                None
            }
            _ => {
                let suppressed = s.1;
                *s = (Some(now), 0);
                Some(suppressed)
            }
        }
    }

    /// Logs `message` at WARN level now if it is due, with the count held
    /// back since the last one. Returns whether it did.
    pub fn warn(&self, message: impl FnOnce() -> String) -> bool {
        match self.check(Instant::now()) {
            Some(0) => {
                tracing::warn!("{}", message());
                true
            }
            Some(held) => {
                tracing::warn!(
                    "{} ({held} more like it since the last one; repeated at most once a minute)",
                    message()
                );
                true
            }
            None => false,
        }
    }
}

/// `text` (a client's) cut to [`MAX_QUOTED_CHARS`] characters.
pub fn cut(text: &str) -> String {
    flightrec_config::truncated(text, MAX_QUOTED_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_limited_warning_counts_what_it_held_back() {
        let w = RateLimitedWarning::new(Duration::from_secs(60));
        let t = Instant::now();
        assert_eq!(w.check(t), Some(0));
        for i in 1..=10 {
            assert_eq!(w.check(t + Duration::from_millis(100 * i)), None);
        }
        assert_eq!(w.check(t + Duration::from_secs(61)), Some(10));
    }

    #[test]
    fn quoted_values_are_cut() {
        let long = "a".repeat(60_000);
        let cut = cut(&long);
        assert!(cut.len() < 120, "{}", cut.len());
        assert!(cut.ends_with("... (60000 bytes in all)"), "{cut}");
        assert_eq!(super::cut("short"), "short");
    }
}
