//! Which snapshots retention removes: a pure decision over (time, size).

use std::time::Duration;

/// Limits; `None` disables one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    pub max_snapshots: Option<u32>,
    pub max_bytes: Option<u64>,
    pub max_age: Option<Duration>,
}

impl RetentionPolicy {
    /// From config values where 0 means "no limit".
    pub fn from_limits(max_snapshots: u32, max_bytes: u64, max_age: Duration) -> Self {
        Self {
            max_snapshots: (max_snapshots > 0).then_some(max_snapshots),
            max_bytes: (max_bytes > 0).then_some(max_bytes),
            max_age: (!max_age.is_zero()).then_some(max_age),
        }
    }

    /// The stricter of each limit (for `Rotate` with its own limits).
    pub fn tightened(self, other: RetentionPolicy) -> Self {
        fn min<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        Self {
            max_snapshots: min(self.max_snapshots, other.max_snapshots),
            max_bytes: min(self.max_bytes, other.max_bytes),
            max_age: min(self.max_age, other.max_age),
        }
    }
}

/// What retention needs to know of a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub created_unix_ns: i64,
    pub bytes: u64,
    /// Still waiting for an upload: only the byte budget may remove it.
    pub pending_upload: bool,
}

/// Indices (into `entries`, which must be sorted oldest first) of the
/// snapshots to remove, oldest first. Too old ones go, then the oldest until
/// both the count and the byte budget hold. `protect` (the snapshot just
/// written) is never chosen: if it alone exceeds the byte budget the budget
/// is left exceeded and the next pass removes it.
///
/// A snapshot waiting for an upload is kept past `max_age` and
/// `max_snapshots`; only the byte budget removes one, and only once every
/// snapshot not waiting is gone (the caller says so: it is a loss).
pub fn plan(
    entries: &[Entry],
    policy: &RetentionPolicy,
    now_unix_ns: i64,
    protect: Option<usize>,
) -> Vec<usize> {
    let mut remove = vec![false; entries.len()];
    if let Some(age) = policy.max_age {
        let age_ns = i64::try_from(age.as_nanos()).unwrap_or(i64::MAX);
        for (i, e) in entries.iter().enumerate() {
            if Some(i) != protect
                && !e.pending_upload
                && now_unix_ns.saturating_sub(e.created_unix_ns) > age_ns
            {
                remove[i] = true;
            }
        }
    }
    let mut count = remove.iter().filter(|r| !**r).count() as u64;
    let mut bytes: u64 = entries
        .iter()
        .zip(&remove)
        .filter(|(_, r)| !**r)
        .map(|(e, _)| e.bytes)
        .sum();
    let over_count = |count: u64| policy.max_snapshots.is_some_and(|m| count > u64::from(m));
    let over_bytes = |bytes: u64| policy.max_bytes.is_some_and(|m| bytes > m);
    // Those not waiting for an upload first, for either limit; then, for
    // the byte budget alone, those waiting.
    for waiting in [false, true] {
        for (i, e) in entries.iter().enumerate() {
            let over = if waiting {
                over_bytes(bytes)
            } else {
                over_count(count) || over_bytes(bytes)
            };
            if !over {
                break;
            }
            if remove[i] || Some(i) == protect || e.pending_upload != waiting {
                continue;
            }
            remove[i] = true;
            count -= 1;
            bytes -= e.bytes;
        }
    }
    remove
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.then_some(i))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn entries(sizes: &[u64]) -> Vec<Entry> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &bytes)| Entry {
                created_unix_ns: (i as i64 + 1) * S,
                bytes,
                pending_upload: false,
            })
            .collect()
    }

    #[test]
    fn count_limit_removes_the_oldest() {
        let p = RetentionPolicy::from_limits(2, 0, Duration::ZERO);
        assert_eq!(plan(&entries(&[1, 1, 1, 1]), &p, 10 * S, None), vec![0, 1]);
        assert_eq!(
            plan(&entries(&[1, 1]), &p, 10 * S, None),
            Vec::<usize>::new()
        );
    }

    #[test]
    fn byte_limit_removes_oldest_until_within_budget() {
        let p = RetentionPolicy::from_limits(0, 100, Duration::ZERO);
        assert_eq!(plan(&entries(&[50, 40, 30, 20]), &p, 10 * S, None), vec![0]);
        assert_eq!(
            plan(&entries(&[50, 40, 30, 80]), &p, 10 * S, None),
            vec![0, 1, 2]
        );
    }

    #[test]
    fn age_limit_removes_old_ones_anywhere() {
        let p = RetentionPolicy::from_limits(0, 0, Duration::from_secs(2));
        // Entries made at 1s..4s, now 5s: those older than 2s (1s, 2s) go.
        assert_eq!(plan(&entries(&[1, 1, 1, 1]), &p, 5 * S, None), vec![0, 1]);
    }

    #[test]
    fn the_protected_snapshot_survives_even_when_alone_over_budget() {
        let p = RetentionPolicy::from_limits(1, 100, Duration::from_secs(1));
        let e = entries(&[10, 500]);
        assert_eq!(plan(&e, &p, 100 * S, Some(1)), vec![0]);
        // Without protection the next pass removes it.
        assert_eq!(plan(&e, &p, 100 * S, None), vec![0, 1]);
    }

    #[test]
    fn snapshots_waiting_for_upload_yield_only_to_the_byte_budget() {
        let waiting = |mut e: Vec<Entry>, which: &[usize]| {
            for &i in which {
                e[i].pending_upload = true;
            }
            e
        };
        // Count and age limits pass over the waiting ones (0 and 1).
        let p = RetentionPolicy::from_limits(1, 0, Duration::from_secs(1));
        let e = waiting(entries(&[1, 1, 1, 1]), &[0, 1]);
        assert_eq!(plan(&e, &p, 100 * S, Some(3)), vec![2]);
        // The byte budget takes the others first, oldest first...
        let p = RetentionPolicy::from_limits(0, 100, Duration::ZERO);
        let e = waiting(entries(&[50, 40, 30, 20]), &[0]);
        assert_eq!(plan(&e, &p, 10 * S, None), vec![1]);
        // ...and a waiting one only when the rest is not enough.
        let e = waiting(entries(&[50, 40, 30, 20]), &[0, 1]);
        assert_eq!(plan(&e, &p, 10 * S, Some(3)), vec![0, 2]);
    }

    #[test]
    fn no_limits_remove_nothing() {
        let p = RetentionPolicy::default();
        assert!(plan(&entries(&[u64::MAX / 4, u64::MAX / 4]), &p, i64::MAX, None).is_empty());
    }

    #[test]
    fn tightening_takes_the_stricter_limit() {
        let cfg = RetentionPolicy::from_limits(32, 1000, Duration::from_secs(60));
        let req = RetentionPolicy {
            max_snapshots: Some(2),
            max_bytes: Some(5000),
            max_age: None,
        };
        let t = cfg.tightened(req);
        assert_eq!(t.max_snapshots, Some(2));
        assert_eq!(t.max_bytes, Some(1000));
        assert_eq!(t.max_age, Some(Duration::from_secs(60)));
    }
}
