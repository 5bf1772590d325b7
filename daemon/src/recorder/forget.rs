//! How far back the process tables may forget exited threads without a
//! dump. A dump forgets those that exited before its window (no later
//! capture reaches back past what the rings held). Without dumps the
//! tables would keep every exit the tracking log spans, so the drain
//! thread looks at the rings' oldest record every few seconds
//! (`reach::oldest_held`) and forgets before it too, a slice a round.
//!
//! With the record tap on (`[history]`), records drained from the rings
//! wait in the history's queue until its writer unwinds their stack
//! copies with their processes' maps from these tables. The tap says since
//! when records have been drained and not yet unwound
//! ([`super::tap::RecordTap::unwinding_since`]); those were in the rings
//! then, so they are no older than what the rings held at any look taken
//! before it. The tables forget before the newest such look's oldest
//! record: as little as the history needs, whatever its lag. That is
//! asked again every round, as the writer catches up, not only at the
//! next look. A capture is a look too (what it copied), so under dumps
//! the bound stays close.

use std::collections::VecDeque;
use std::time::Duration;

use super::rings::{Live, lock};
use super::tap::FollowRings;

/// How often the drain thread looks (`hotplug::follower`).
pub const FORGET_EXITED_EVERY: Duration = Duration::from_secs(10);

/// Exited threads the drain thread forgets at most in one round (of each
/// table). Forgetting holds the tracking lock the rings' drain, the
/// history's writer and captures wait for, and a removal from tables
/// shared with checkpoints copies their nodes: under the soak's churn,
/// forgetting a look's 1,000-4,500 exits at once held it up to 101 ms
/// (400 ms in a debug build). So it is spread over the rounds after the
/// look, at least four a second: a thousand exits a second or more (past
/// that the tables' cap forgets the oldest as they come).
const FORGET_PER_ROUND: usize = 256;

/// Looks kept at most (at one look every 10 s, about 10 minutes: a
/// history further behind keeps its exits, up to the tables' limits).
const MAX_LOOKS: usize = 64;

/// The rings' oldest record at past looks.
#[derive(Debug, Default)]
pub(super) struct ForgetBound {
    /// (sample time when the look ended, the rings' oldest record then),
    /// oldest first.
    looks: VecDeque<(u64, u64)>,
}

impl ForgetBound {
    /// Notes a look at the rings that ended at `ended_ns` and found
    /// `oldest_ns` (None: a CPU's rings not read, nothing noted), and
    /// returns the time before which exited threads may be forgotten:
    /// the rings' oldest now when nothing drained waits (`pending_since`
    /// None), else the oldest record of the newest look that ended no
    /// later than `pending_since`; None when no such look is kept.
    pub(super) fn look(
        &mut self,
        ended_ns: u64,
        oldest_ns: Option<u64>,
        pending_since: Option<u64>,
    ) -> Option<u64> {
        match oldest_ns {
            Some(oldest) => {
                if self.looks.len() == MAX_LOOKS {
                    self.looks.pop_front();
                }
                self.looks.push_back((ended_ns, oldest));
            }
            // Nothing waits and the rings were not read: nothing new.
            None if pending_since.is_none() => return None,
            None => {}
        }
        self.allowed(pending_since)
    }

    /// What the looks kept allow for records drained since
    /// `pending_since` and not yet unwound (None: nothing waits), without
    /// a new look: between looks, as the history's writer catches up.
    pub(super) fn allowed(&mut self, pending_since: Option<u64>) -> Option<u64> {
        let Some(since) = pending_since else {
            // Nothing waits: what is drained from now on was in the rings
            // after the newest look; no older look is of use again.
            let newest = *self.looks.back()?;
            self.looks.clear();
            self.looks.push_back(newest);
            return Some(newest.1);
        };
        // Looks before the newest one usable for `since` are of no use
        // again: what waits only gets newer.
        while self.looks.len() > 1 && self.looks[1].0 <= since {
            self.looks.pop_front();
        }
        self.looks
            .front()
            .filter(|&&(ended, _)| ended <= since)
            .map(|&(_, oldest)| oldest)
    }
}

/// After a look at the rings (the drain thread's, or a capture's) that
/// ended at sample time `ended_ns` and found `oldest_ns` as their oldest
/// record: the time before which exited threads may be forgotten.
pub(super) fn forgettable_before(
    live: &Live,
    tap: Option<&FollowRings>,
    ended_ns: u64,
    oldest_ns: Option<u64>,
) -> Option<u64> {
    // Read after the look ended: records drained later than that were in
    // the rings when it did.
    let pending = tap.and_then(FollowRings::unwinding_since);
    lock(&live.forget).look(ended_ns, oldest_ns, pending)
}

/// Between the drain thread's looks (every round, no walk of the rings):
/// what the looks kept allow now that the history's writer has moved on.
/// Without it the tables would trail the rings by one look more with the
/// history on than without (section 42 of BENCHMARKS.md: 9 MiB under the
/// soak's churn).
pub(super) fn forgettable_now(live: &Live, tap: &FollowRings) -> Option<u64> {
    let pending = tap.unwinding_since();
    lock(&live.forget).allowed(pending)
}

/// The drain thread's look: walks the rings and returns what
/// [`forgettable_before`] allows.
pub(super) fn look_for_exited(live: &Live, tap: Option<&FollowRings>) -> Option<u64> {
    let oldest = super::reach::oldest_held(live);
    let ended = crate::host::sample_clock_now()?;
    forgettable_before(live, tap, ended.as_nanos(), oldest)
}

/// Forgets the oldest [`FORGET_PER_ROUND`] exited threads that exited
/// before `before` at most; whether none is left.
pub(super) fn forget_some_exited(live: &Live, before: u64) -> bool {
    lock(&live.tracking).no_window_before_at_most(before, FORGET_PER_ROUND)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_nothing_waiting_the_rings_oldest_record_bounds_it() {
        let mut bound = ForgetBound::default();
        assert_eq!(bound.look(100, Some(40), None), Some(40));
        assert_eq!(bound.look(200, Some(90), None), Some(90));
        assert_eq!(bound.look(300, None, None), None);
    }

    #[test]
    fn records_waiting_since_a_time_keep_what_the_rings_held_before_it() {
        let mut bound = ForgetBound::default();
        assert_eq!(bound.look(100, Some(40), Some(150)), Some(40));
        assert_eq!(bound.look(200, Some(90), Some(150)), Some(40));
        assert_eq!(bound.look(300, Some(180), Some(150)), Some(40));
        // The writer caught up to records drained at 250.
        assert_eq!(bound.look(400, Some(260), Some(250)), Some(90));
        assert_eq!(bound.look(500, Some(350), None), Some(350));
    }

    #[test]
    fn between_looks_the_bound_follows_the_writer_as_it_catches_up() {
        let mut bound = ForgetBound::default();
        // Records drained at 90 wait: the look at 100 is of no use yet.
        assert_eq!(bound.look(100, Some(40), Some(90)), None);
        assert_eq!(bound.allowed(Some(90)), None);
        // The writer unwound them; what waits was drained at 150.
        assert_eq!(bound.allowed(Some(150)), Some(40));
        assert_eq!(bound.look(200, Some(90), Some(150)), Some(40));
        // Caught up past the look at 200, before the next look.
        assert_eq!(bound.allowed(Some(250)), Some(90));
        assert_eq!(bound.allowed(None), Some(90));
        assert_eq!(bound.looks.len(), 1);
        // Nothing kept: nothing allowed.
        assert_eq!(ForgetBound::default().allowed(None), None);
    }

    #[test]
    fn waiting_since_before_every_kept_look_forgets_nothing() {
        let mut bound = ForgetBound::default();
        assert_eq!(bound.look(100, Some(40), Some(50)), None);
        assert_eq!(bound.look(200, Some(90), Some(50)), None);
        assert_eq!(bound.look(300, Some(180), Some(250)), Some(90));
    }

    #[test]
    fn a_history_far_behind_keeps_at_most_the_bounded_looks() {
        let mut bound = ForgetBound::default();
        for i in 0..(MAX_LOOKS as u64 * 2) {
            let found = bound.look(100 + i * 10, Some(i * 10), Some(105));
            assert_eq!(
                found,
                if (i as usize) < MAX_LOOKS {
                    Some(0)
                } else {
                    None
                }
            );
        }
        assert_eq!(bound.looks.len(), MAX_LOOKS);
    }
}
