//! The dump queue, pure: which triggers share a dump, and when it starts.
//!
//! - Triggers join a pending batch when one file can hold both windows
//!   ([`WallWindow::union`]): triggers that end at the freeze share one
//!   batch; a window with an end joins one that ends at the same instant,
//!   or, in the past, one it overlaps. Every other trigger starts a batch
//!   of its own, so a trigger that asks for "now" is never held by
//!   another's `after`, and a past window is never served by the rings.
//! - A batch starts no earlier than its triggers' delays allow (the
//!   earliest `post_trigger_delay`; a window's end), and no earlier than
//!   `min_interval` after the previous freeze. Of several due batches the
//!   one ending at the freeze goes first: the rings overwrite its moment,
//!   a past window waits in the history.
//! - Triggers that arrive while a dump runs join the pending batches,
//!   served by one follow-up dump each.
//! - A trigger whose caller went away is dropped before its batch starts;
//!   a batch with no trigger left is dropped.

use std::time::{Duration, Instant};

use super::request::{Trigger, TriggerKind, Waiting};
use super::scope::Scope;
use super::window::WallWindow;
use crate::time::WallTime;

/// The two settings of `[snapshot]` the scheduler applies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timing {
    pub min_interval: Duration,
    pub post_trigger_delay: Duration,
}

/// One trigger of a batch: what it asked for and who waits.
#[derive(Debug)]
pub struct Member<W> {
    pub kind: TriggerKind,
    pub label: Option<String>,
    pub compress: Option<bool>,
    pub window: WallWindow,
    pub matched: Option<String>,
    pub scope: Scope,
    pub waiter: Option<W>,
}

/// Triggers waiting for one dump.
#[derive(Debug)]
pub struct Batch<W> {
    pub first_at: Instant,
    /// The earliest arrival among triggers on the `[snapshot]` delay.
    default_delay_from: Option<Instant>,
    /// The earliest due time among triggers with their own delay.
    own_due: Option<Instant>,
    /// The latest end among triggers asking for a window that ends after
    /// them: the freeze waits for it, whatever the other delays say.
    window_due: Option<Instant>,
    /// The window holding every trigger's.
    pub window: WallWindow,
    /// What part of the machine its triggers ask for (one scope a batch).
    pub scope: Scope,
    pub members: Vec<Member<W>>,
}

impl<W> Batch<W> {
    fn new(first_at: Instant, window: WallWindow, scope: Scope) -> Self {
        Self {
            first_at,
            default_delay_from: None,
            own_due: None,
            window_due: None,
            window,
            scope,
            members: Vec::new(),
        }
    }

    fn add(&mut self, t: Trigger<W>) {
        if t.window.end.is_some() {
            let due = t.at + t.delay.unwrap_or_default();
            self.window_due = Some(self.window_due.map_or(due, |w| w.max(due)));
        }
        match t.delay {
            Some(d) => {
                let due = t.at + d;
                self.own_due = Some(self.own_due.map_or(due, |o| o.min(due)));
            }
            None => {
                self.default_delay_from =
                    Some(self.default_delay_from.map_or(t.at, |f| f.min(t.at)));
            }
        }
        self.members.push(Member {
            kind: t.kind,
            label: t.label,
            compress: t.compress,
            window: t.window,
            matched: t.matched,
            scope: t.scope,
            waiter: t.waiter,
        });
    }

    /// When the batch may start, whatever the rate limit says: the earliest
    /// of its triggers' delays, but not before the end of a window asked
    /// for.
    fn due(&self, default_delay: Duration) -> Instant {
        let default_due = self.default_delay_from.map(|f| f + default_delay);
        let due = match (default_due, self.own_due) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => self.first_at,
        };
        self.window_due.map_or(due, |w| due.max(w))
    }

    /// Whether the batch ends at the freeze (the rings' moment, which
    /// waiting loses).
    fn ends_at_freeze(&self) -> bool {
        self.window.end.is_none()
    }
}

/// What the scheduler wants done next.
#[derive(Debug)]
pub enum Step<W> {
    /// Nothing pending.
    Idle,
    /// A dump runs: wait for [`Scheduler::finished`].
    Busy,
    /// A batch is pending but none is due before this instant.
    WaitUntil(Instant),
    /// Start this dump now.
    Start(Batch<W>),
}

/// The pure state machine behind the dump thread.
#[derive(Debug)]
pub struct Scheduler<W> {
    timing: Timing,
    last_start: Option<Instant>,
    running: bool,
    pending: Vec<Batch<W>>,
}

impl<W: Waiting> Scheduler<W> {
    pub fn new(timing: Timing) -> Self {
        Self {
            timing,
            last_start: None,
            running: false,
            pending: Vec::new(),
        }
    }

    pub fn set_timing(&mut self, timing: Timing) {
        self.timing = timing;
    }

    /// Queues `t`, arriving when the wall clock says `now`.
    pub fn trigger(&mut self, t: Trigger<W>, now: WallTime) {
        for batch in &mut self.pending {
            if batch.scope != t.scope {
                continue;
            }
            if let Some(union) = batch.window.union(t.window, now) {
                batch.window = union;
                batch.add(t);
                return;
            }
        }
        let mut batch = Batch::new(t.at, t.window, t.scope.clone());
        batch.add(t);
        self.pending.push(batch);
    }

    /// Drops the triggers whose caller went away, and batches left empty.
    fn drop_gone(&mut self) {
        for batch in &mut self.pending {
            batch
                .members
                .retain(|m| !m.waiter.as_ref().is_some_and(Waiting::gone));
        }
        self.pending.retain(|b| !b.members.is_empty());
    }

    pub fn poll(&mut self, now: Instant) -> Step<W> {
        if self.running {
            return Step::Busy;
        }
        self.drop_gone();
        let slot = self.last_start.map(|last| last + self.timing.min_interval);
        let due_of = |b: &Batch<W>| {
            let due = b.due(self.timing.post_trigger_delay);
            slot.map_or(due, |s| due.max(s))
        };
        // Due now: the one ending at the freeze first, then the oldest.
        let next = self
            .pending
            .iter()
            .enumerate()
            .filter(|(_, b)| due_of(b) <= now)
            .min_by_key(|(_, b)| (!b.ends_at_freeze(), b.first_at))
            .map(|(i, _)| i);
        let Some(i) = next else {
            return match self.pending.iter().map(due_of).min() {
                Some(due) => Step::WaitUntil(due),
                None => Step::Idle,
            };
        };
        self.running = true;
        self.last_start = Some(now);
        Step::Start(self.pending.remove(i))
    }

    pub fn finished(&mut self) {
        self.running = false;
    }

    /// Every pending batch, whatever its due time (at shutdown).
    pub fn take_pending(&mut self) -> Vec<Batch<W>> {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A waiter in tests: a number, and whether its caller left.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct W(u32, bool);

    impl Waiting for W {
        fn gone(&self) -> bool {
            self.1
        }
    }

    const NOW: i64 = 1_800_000_000_000_000_000;
    const S: i64 = 1_000_000_000;
    const MS: Duration = Duration::from_millis(1);

    fn wall(ns: i64) -> WallTime {
        WallTime::from_unix_nanos(ns)
    }

    fn t(kind: TriggerKind, waiter: u32) -> Trigger<W> {
        Trigger::now(kind, Some(W(waiter, false)))
    }

    /// `t` arriving at `at`.
    fn at(at: Instant, mut t: Trigger<W>) -> Trigger<W> {
        t.at = at;
        t
    }

    fn timing(min_interval_ms: u64, delay_ms: u64) -> Timing {
        Timing {
            min_interval: MS * min_interval_ms as u32,
            post_trigger_delay: MS * delay_ms as u32,
        }
    }

    fn waiters(b: &Batch<W>) -> Vec<u32> {
        b.members
            .iter()
            .filter_map(|m| m.waiter.map(|w| w.0))
            .collect()
    }

    fn with_window(
        mut x: Trigger<W>,
        start: Option<i64>,
        end: Option<i64>,
        delay: Option<Duration>,
    ) -> Trigger<W> {
        x.window = WallWindow {
            start: start.map(wall),
            end: end.map(wall),
        };
        x.delay = delay;
        x
    }

    #[test]
    fn a_lone_trigger_starts_at_once() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(1000, 0));
        assert!(matches!(s.poll(t0), Step::Idle));
        s.trigger(at(t0, t(TriggerKind::Api, 1)), wall(NOW));
        let Step::Start(b) = s.poll(t0) else {
            panic!("should start");
        };
        assert_eq!(waiters(&b), vec![1]);
        assert!(matches!(s.poll(t0), Step::Busy));
    }

    #[test]
    fn a_trigger_asking_for_now_never_waits_for_another_requests_after() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(0, 0));
        // A group member's --after 2m.
        let later = with_window(
            t(TriggerKind::Api, 1),
            None,
            Some(NOW + 120 * S),
            Some(120_000 * MS),
        );
        s.trigger(at(t0, later), wall(NOW));
        s.trigger(
            at(t0 + 10 * MS, t(TriggerKind::Signal, 2)),
            wall(NOW + 10_000_000),
        );
        let Step::Start(b) = s.poll(t0 + 10 * MS) else {
            panic!("the signal is due at once");
        };
        assert_eq!(waiters(&b), vec![2]);
        assert!(b.window.is_open());
        s.finished();
        match s.poll(t0 + 20 * MS) {
            Step::WaitUntil(due) => assert_eq!(due, t0 + 120_000 * MS),
            other => panic!("the after waits for its end, got {other:?}"),
        }
    }

    #[test]
    fn a_past_window_in_a_burst_is_not_served_by_the_rings() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(0, 0));
        s.trigger(at(t0, t(TriggerKind::Api, 1)), wall(NOW));
        let past = with_window(
            t(TriggerKind::Api, 2),
            Some(NOW - 65 * S),
            Some(NOW - 60 * S),
            Some(Duration::ZERO),
        );
        s.trigger(at(t0, past), wall(NOW));
        s.trigger(at(t0, t(TriggerKind::Api, 3)), wall(NOW));
        let Step::Start(first) = s.poll(t0) else {
            panic!("due");
        };
        assert_eq!(waiters(&first), vec![1, 3], "the two plain dumps share");
        s.finished();
        let Step::Start(second) = s.poll(t0) else {
            panic!("due");
        };
        assert_eq!(waiters(&second), vec![2]);
        assert_eq!(second.window.start, Some(wall(NOW - 65 * S)));
        assert_eq!(second.window.end, Some(wall(NOW - 60 * S)));
    }

    #[test]
    fn a_request_whose_caller_went_away_is_dropped() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(0, 0));
        let mut gone = with_window(
            t(TriggerKind::Api, 1),
            None,
            Some(NOW + 60 * S),
            Some(60_000 * MS),
        );
        gone.waiter = Some(W(1, true));
        s.trigger(at(t0, gone), wall(NOW));
        assert!(matches!(s.poll(t0), Step::Idle), "nothing left to wait for");
        // A signal has no caller and never goes away.
        let mut sig: Trigger<W> = Trigger::now(TriggerKind::Signal, None);
        sig.at = t0;
        s.trigger(sig, wall(NOW));
        assert!(matches!(s.poll(t0), Step::Start(_)));
    }

    #[test]
    fn windows_ending_together_share_and_a_now_trigger_joins_a_before() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(0, 0));
        let before = with_window(t(TriggerKind::Api, 1), Some(NOW - 60 * S), None, None);
        s.trigger(at(t0, before), wall(NOW));
        s.trigger(at(t0, t(TriggerKind::Signal, 2)), wall(NOW));
        let Step::Start(b) = s.poll(t0) else {
            panic!("due");
        };
        assert_eq!(waiters(&b), vec![1, 2]);
        assert_eq!(b.window.start, Some(wall(NOW - 60 * S)), "the older start");
        // Two fleet requests for the same instant share one dump.
        let mut s = Scheduler::new(timing(0, 0));
        for i in 0..2 {
            let x = with_window(
                t(TriggerKind::Fleet, i),
                Some(NOW + S),
                Some(NOW + 2 * S),
                Some(2000 * MS),
            );
            s.trigger(at(t0, x), wall(NOW));
        }
        let Step::Start(b) = s.poll(t0 + 2000 * MS) else {
            panic!("due at the end");
        };
        assert_eq!(waiters(&b), vec![0, 1]);
    }

    #[test]
    fn triggers_during_a_dump_coalesce_into_one_follow_up_at_the_next_slot() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(1000, 0));
        s.trigger(at(t0, t(TriggerKind::Api, 1)), wall(NOW));
        assert!(matches!(s.poll(t0), Step::Start(_)));
        s.trigger(at(t0 + 10 * MS, t(TriggerKind::Signal, 2)), wall(NOW));
        s.trigger(at(t0 + 20 * MS, t(TriggerKind::Api, 3)), wall(NOW));
        s.trigger(at(t0 + 30 * MS, t(TriggerKind::Api, 4)), wall(NOW));
        assert!(matches!(s.poll(t0 + 40 * MS), Step::Busy));
        s.finished();
        match s.poll(t0 + 50 * MS) {
            Step::WaitUntil(at) => assert_eq!(at, t0 + 1000 * MS),
            other => panic!("expected a wait, got {other:?}"),
        }
        s.trigger(at(t0 + 500 * MS, t(TriggerKind::Signal, 5)), wall(NOW));
        let Step::Start(b) = s.poll(t0 + 1000 * MS) else {
            panic!("follow-up should start at the slot");
        };
        assert_eq!(waiters(&b), vec![2, 3, 4, 5]);
        s.finished();
        assert!(matches!(s.poll(t0 + 1001 * MS), Step::Idle));
    }

    #[test]
    fn a_burst_of_signals_makes_one_dump_per_interval() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(100, 0));
        let mut starts = Vec::new();
        let mut busy_until = None;
        for i in 0..=300u32 {
            let now = t0 + MS * i;
            if busy_until == Some(now) {
                s.finished();
                busy_until = None;
            }
            if i < 250 && i % 5 == 0 {
                s.trigger(at(now, t(TriggerKind::Signal, i)), wall(NOW));
            }
            if let Step::Start(_) = s.poll(now) {
                starts.push(i);
                busy_until = Some(now + 5 * MS);
            }
        }
        assert_eq!(starts, vec![0, 100, 200, 300]);
    }

    #[test]
    fn post_trigger_delay_defers_the_freeze_and_a_condition_may_set_its_own() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(0, 300));
        s.trigger(at(t0, t(TriggerKind::Signal, 1)), wall(NOW));
        match s.poll(t0) {
            Step::WaitUntil(at) => assert_eq!(at, t0 + 300 * MS),
            other => panic!("expected a wait, got {other:?}"),
        }
        s.trigger(at(t0 + 100 * MS, t(TriggerKind::Api, 2)), wall(NOW));
        let Step::Start(b) = s.poll(t0 + 300 * MS) else {
            panic!("should start after the delay");
        };
        assert_eq!(waiters(&b), vec![1, 2]);

        let mut s = Scheduler::new(timing(0, 5000));
        s.trigger(at(t0, t(TriggerKind::Signal, 1)), wall(NOW));
        let mut c = t(TriggerKind::Condition("probe".into()), 2);
        c.at = t0 + 100 * MS;
        c.delay = Some(200 * MS);
        s.trigger(c, wall(NOW));
        let Step::Start(b) = s.poll(t0 + 300 * MS) else {
            panic!("the condition's delay is due");
        };
        assert_eq!(waiters(&b), vec![1, 2]);
    }

    #[test]
    fn every_pending_batch_can_be_taken_before_its_slot() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(1000, 0));
        s.trigger(at(t0, t(TriggerKind::Api, 1)), wall(NOW));
        assert!(matches!(s.poll(t0), Step::Start(_)));
        s.trigger(at(t0, t(TriggerKind::Api, 2)), wall(NOW));
        let past = with_window(
            t(TriggerKind::Api, 3),
            Some(NOW - 9 * S),
            Some(NOW - 8 * S),
            Some(Duration::ZERO),
        );
        s.trigger(at(t0, past), wall(NOW));
        let taken: Vec<Vec<u32>> = s.take_pending().iter().map(waiters).collect();
        assert_eq!(taken, vec![vec![2], vec![3]]);
        assert!(s.take_pending().is_empty());
    }
}
