//! Triggers: signals and API calls into one dump path, coalescing, rate limit.
//!
//! Every trigger (SIGUSR2, the `Dump` RPC) becomes a [`DumpRequest`] sent to
//! one task ([`run`]) that owns a [`Scheduler`], a pure state machine:
//! - triggers that arrive while no dump is due yet, or while a dump runs,
//!   join the one pending batch, served by one dump; every caller waiting on
//!   that batch gets its result (marked coalesced when the batch held more
//!   than one trigger);
//! - a batch starts no earlier than `min_interval` after the previous freeze
//!   (an API caller waits for that slot rather than being refused: it asked
//!   for a snapshot) and no earlier than `post_trigger_delay` after its first
//!   trigger, so the rings keep recording what follows the trigger;
//! - on shutdown a dump under way finishes and triggers already accepted
//!   get one last dump at once (a caller asked for a snapshot); triggers
//!   after that get [`Outcome::ShuttingDown`].

pub mod signals;

use std::future::Future;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// What asked for a dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TriggerKind {
    Api,
    Signal,
}

impl TriggerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerKind::Api => "api",
            TriggerKind::Signal => "signal",
        }
    }
}

/// The two settings of `[snapshot]` the scheduler applies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timing {
    pub min_interval: Duration,
    pub post_trigger_delay: Duration,
}

/// One trigger, with the caller to answer (`W`), if any.
#[derive(Debug)]
pub struct Trigger<W> {
    pub kind: TriggerKind,
    pub label: Option<String>,
    pub compress: bool,
    pub waiter: Option<W>,
}

/// The dump a batch asks for: the first label given wins, compression if
/// any trigger asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpSpec {
    /// "api", "signal" or "api+signal".
    pub trigger: String,
    pub label: Option<String>,
    pub compress: bool,
    /// Triggers served by this dump.
    pub triggers: usize,
    /// From the first trigger of the batch to the start of the dump.
    pub waited: Duration,
}

/// Triggers waiting for one dump.
#[derive(Debug)]
pub struct Batch<W> {
    pub first_at: Instant,
    pub kinds: Vec<TriggerKind>,
    pub label: Option<String>,
    pub compress: bool,
    pub triggers: usize,
    pub waiters: Vec<W>,
}

impl<W> Batch<W> {
    fn new(first_at: Instant) -> Self {
        Self {
            first_at,
            kinds: Vec::new(),
            label: None,
            compress: false,
            triggers: 0,
            waiters: Vec::new(),
        }
    }

    fn add(&mut self, t: Trigger<W>) {
        if !self.kinds.contains(&t.kind) {
            self.kinds.push(t.kind);
            self.kinds.sort();
        }
        if self.label.is_none() {
            self.label = t.label;
        }
        self.compress |= t.compress;
        self.triggers += 1;
        self.waiters.extend(t.waiter);
    }

    pub fn spec(&self, now: Instant) -> DumpSpec {
        DumpSpec {
            trigger: self
                .kinds
                .iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join("+"),
            label: self.label.clone(),
            compress: self.compress,
            triggers: self.triggers,
            waited: now.saturating_duration_since(self.first_at),
        }
    }
}

/// What the scheduler wants done next.
#[derive(Debug)]
pub enum Step<W> {
    /// Nothing pending.
    Idle,
    /// A dump runs: wait for [`Scheduler::finished`].
    Busy,
    /// A batch is pending but not due before this instant.
    WaitUntil(Instant),
    /// Start this dump now.
    Start(Batch<W>),
}

/// The pure state machine behind the dump task.
#[derive(Debug)]
pub struct Scheduler<W> {
    timing: Timing,
    last_start: Option<Instant>,
    running: bool,
    pending: Option<Batch<W>>,
}

impl<W> Scheduler<W> {
    pub fn new(timing: Timing) -> Self {
        Self {
            timing,
            last_start: None,
            running: false,
            pending: None,
        }
    }

    pub fn set_timing(&mut self, timing: Timing) {
        self.timing = timing;
    }

    pub fn trigger(&mut self, now: Instant, t: Trigger<W>) {
        self.pending.get_or_insert_with(|| Batch::new(now)).add(t);
    }

    pub fn poll(&mut self, now: Instant) -> Step<W> {
        if self.running {
            return Step::Busy;
        }
        let Some(batch) = &self.pending else {
            return Step::Idle;
        };
        let mut due = batch.first_at + self.timing.post_trigger_delay;
        if let Some(last) = self.last_start {
            due = due.max(last + self.timing.min_interval);
        }
        if now < due {
            return Step::WaitUntil(due);
        }
        self.running = true;
        self.last_start = Some(now);
        match self.pending.take() {
            Some(b) => Step::Start(b),
            None => Step::Idle,
        }
    }

    pub fn finished(&mut self) {
        self.running = false;
    }

    /// The pending batch, whatever its due time (at shutdown).
    pub fn take_pending(&mut self) -> Option<Batch<W>> {
        self.pending.take()
    }
}

/// What a caller of the dump path gets back.
#[derive(Debug, Clone)]
pub enum Outcome<R> {
    Done { result: R, coalesced: bool },
    ShuttingDown,
}

/// A trigger as sent to [`run`].
pub type DumpRequest<R> = Trigger<oneshot::Sender<Outcome<R>>>;

/// The dump task: takes triggers from `rx`, runs `dump` for each batch and
/// answers its callers. Returns when `shutdown` turns true (after the dump
/// under way, if any) or every sender is gone.
pub async fn run<R, F, Fut>(
    mut rx: mpsc::UnboundedReceiver<DumpRequest<R>>,
    mut timing: watch::Receiver<Timing>,
    mut shutdown: watch::Receiver<bool>,
    mut dump: F,
) where
    R: Clone,
    F: FnMut(DumpSpec) -> Fut,
    Fut: Future<Output = R>,
{
    let mut sched = Scheduler::new(*timing.borrow_and_update());
    let mut open = true;
    loop {
        if *shutdown.borrow() {
            break;
        }
        if timing.has_changed().unwrap_or(false) {
            sched.set_timing(*timing.borrow_and_update());
        }
        let now = Instant::now();
        match sched.poll(now) {
            Step::Start(batch) => {
                let coalesced = batch.triggers > 1;
                let fut = dump(batch.spec(now));
                tokio::pin!(fut);
                // Keep taking triggers while the dump runs, with their real
                // arrival time (post_trigger_delay counts from it).
                let result = loop {
                    tokio::select! {
                        r = &mut fut => break r,
                        req = rx.recv(), if open => match req {
                            Some(t) => sched.trigger(Instant::now(), t),
                            None => open = false,
                        },
                    }
                };
                sched.finished();
                for w in batch.waiters {
                    let _ = w.send(Outcome::Done {
                        result: result.clone(),
                        coalesced,
                    });
                }
            }
            Step::WaitUntil(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    req = rx.recv(), if open => match req {
                        Some(t) => sched.trigger(Instant::now(), t),
                        None => open = false,
                    },
                    _ = shutdown.changed() => {}
                    _ = timing.changed() => {}
                }
            }
            // Busy cannot happen here: the dump above is awaited in place.
            Step::Idle | Step::Busy => {
                if !open {
                    break;
                }
                tokio::select! {
                    req = rx.recv() => match req {
                        Some(t) => sched.trigger(Instant::now(), t),
                        None => open = false,
                    },
                    _ = shutdown.changed() => {}
                    _ = timing.changed() => {}
                }
            }
        }
    }
    // Triggers accepted before the shutdown are honoured with one last
    // dump, without waiting for their slot; later ones are refused.
    while let Ok(t) = rx.try_recv() {
        sched.trigger(Instant::now(), t);
    }
    rx.close();
    if let Some(batch) = sched.take_pending() {
        let coalesced = batch.triggers > 1;
        let result = dump(batch.spec(Instant::now())).await;
        for w in batch.waiters {
            let _ = w.send(Outcome::Done {
                result: result.clone(),
                coalesced,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(kind: TriggerKind, label: Option<&str>, compress: bool, waiter: u32) -> Trigger<u32> {
        Trigger {
            kind,
            label: label.map(str::to_string),
            compress,
            waiter: Some(waiter),
        }
    }

    const MS: Duration = Duration::from_millis(1);

    fn timing(min_interval_ms: u64, delay_ms: u64) -> Timing {
        Timing {
            min_interval: MS * min_interval_ms as u32,
            post_trigger_delay: MS * delay_ms as u32,
        }
    }

    #[test]
    fn a_lone_trigger_starts_at_once() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(1000, 0));
        assert!(matches!(s.poll(t0), Step::Idle));
        s.trigger(t0, t(TriggerKind::Api, Some("x"), false, 1));
        let Step::Start(b) = s.poll(t0) else {
            panic!("should start");
        };
        assert_eq!(b.waiters, vec![1]);
        let spec = b.spec(t0);
        assert_eq!(spec.trigger, "api");
        assert_eq!(spec.label.as_deref(), Some("x"));
        assert_eq!(spec.triggers, 1);
        assert!(matches!(s.poll(t0), Step::Busy));
    }

    #[test]
    fn triggers_during_a_dump_coalesce_into_one_follow_up_at_the_next_slot() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(1000, 0));
        s.trigger(t0, t(TriggerKind::Api, None, false, 1));
        assert!(matches!(s.poll(t0), Step::Start(_)));
        s.trigger(t0 + 10 * MS, t(TriggerKind::Signal, None, false, 2));
        s.trigger(t0 + 20 * MS, t(TriggerKind::Api, Some("b"), true, 3));
        s.trigger(t0 + 30 * MS, t(TriggerKind::Api, Some("c"), false, 4));
        assert!(matches!(s.poll(t0 + 40 * MS), Step::Busy));
        s.finished();
        // The rate limit holds the follow-up until 1s after the first start.
        match s.poll(t0 + 50 * MS) {
            Step::WaitUntil(at) => assert_eq!(at, t0 + 1000 * MS),
            other => panic!("expected a wait, got {other:?}"),
        }
        s.trigger(t0 + 500 * MS, t(TriggerKind::Signal, None, false, 5));
        let Step::Start(b) = s.poll(t0 + 1000 * MS) else {
            panic!("follow-up should start at the slot");
        };
        assert_eq!(b.waiters, vec![2, 3, 4, 5]);
        let spec = b.spec(t0 + 1000 * MS);
        assert_eq!(spec.trigger, "api+signal");
        assert_eq!(spec.label.as_deref(), Some("b"));
        assert!(spec.compress);
        assert_eq!(spec.triggers, 4);
        assert_eq!(spec.waited, 990 * MS);
        s.finished();
        assert!(matches!(s.poll(t0 + 1001 * MS), Step::Idle));
    }

    #[test]
    fn a_burst_of_signals_makes_one_dump_per_interval() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(100, 0));
        let mut starts = Vec::new();
        // 100 signals over 250ms, each dump taking 5ms.
        let mut now = t0;
        let mut busy_until = None;
        for i in 0..=300u32 {
            now = t0 + MS * i;
            if busy_until == Some(now) {
                s.finished();
                busy_until = None;
            }
            if i < 250 && i % 5 == 0 {
                s.trigger(now, t(TriggerKind::Signal, None, false, i));
            }
            if let Step::Start(_) = s.poll(now) {
                starts.push(i);
                busy_until = Some(now + 5 * MS);
            }
        }
        // Signals after the 200ms dump (205..245) make one more at 300ms.
        assert_eq!(starts, vec![0, 100, 200, 300]);
        let _ = now;
    }

    #[test]
    fn post_trigger_delay_defers_the_freeze() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(0, 300));
        s.trigger(t0, t(TriggerKind::Signal, None, false, 1));
        match s.poll(t0) {
            Step::WaitUntil(at) => assert_eq!(at, t0 + 300 * MS),
            other => panic!("expected a wait, got {other:?}"),
        }
        s.trigger(t0 + 100 * MS, t(TriggerKind::Api, None, false, 2));
        let Step::Start(b) = s.poll(t0 + 300 * MS) else {
            panic!("should start after the delay");
        };
        assert_eq!(b.waiters, vec![1, 2]);
    }

    #[test]
    fn the_pending_batch_can_be_taken_before_its_slot() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(1000, 0));
        s.trigger(t0, t(TriggerKind::Api, None, false, 1));
        assert!(matches!(s.poll(t0), Step::Start(_)));
        s.trigger(t0, t(TriggerKind::Api, None, false, 2));
        assert_eq!(s.take_pending().map(|b| b.waiters), Some(vec![2]));
        assert!(s.take_pending().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn the_task_serves_concurrent_callers_with_one_follow_up() {
        let (tx, rx) = mpsc::unbounded_channel::<DumpRequest<u32>>();
        let (_timing_tx, timing_rx) = watch::channel(timing(1000, 0));
        let (_stop_tx, stop_rx) = watch::channel(false);
        let dumps = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let d2 = dumps.clone();
        let task = tokio::spawn(run(rx, timing_rx, stop_rx, move |spec: DumpSpec| {
            let d = d2.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let mut d = d.lock().unwrap();
                d.push(spec.triggers);
                d.len() as u32
            }
        }));
        let mut replies = Vec::new();
        for i in 0..5 {
            let (w, r) = oneshot::channel();
            tx.send(Trigger {
                kind: TriggerKind::Api,
                label: None,
                compress: false,
                waiter: Some(w),
            })
            .unwrap();
            replies.push(r);
            if i == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let mut got = Vec::new();
        for r in replies {
            match r.await.unwrap() {
                Outcome::Done { result, coalesced } => got.push((result, coalesced)),
                Outcome::ShuttingDown => panic!("not shutting down"),
            }
        }
        assert_eq!(
            got,
            vec![(1, false), (2, true), (2, true), (2, true), (2, true)]
        );
        assert_eq!(*dumps.lock().unwrap(), vec![1, 4]);
        drop(tx);
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_finishes_the_running_dump_then_the_accepted_ones_then_refuses() {
        let (tx, rx) = mpsc::unbounded_channel::<DumpRequest<u32>>();
        let (_timing_tx, timing_rx) = watch::channel(timing(1000, 0));
        let (stop_tx, stop_rx) = watch::channel(false);
        let n = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let n2 = n.clone();
        let task = tokio::spawn(run(rx, timing_rx, stop_rx, move |_spec| {
            let n = n2.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                n.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1
            }
        }));
        let send = |tx: &mpsc::UnboundedSender<DumpRequest<u32>>| {
            let (w, r) = oneshot::channel();
            let sent = tx.send(Trigger {
                kind: TriggerKind::Signal,
                label: None,
                compress: false,
                waiter: Some(w),
            });
            (sent.is_ok(), r)
        };
        let (_, first) = send(&tx);
        tokio::time::sleep(Duration::from_millis(10)).await;
        let (_, second) = send(&tx);
        tokio::time::sleep(Duration::from_millis(10)).await;
        stop_tx.send(true).unwrap();
        assert!(matches!(
            first.await.unwrap(),
            Outcome::Done { result: 1, .. }
        ));
        // Accepted before the shutdown, due only in 1s: dumped at once.
        assert!(matches!(
            second.await.unwrap(),
            Outcome::Done { result: 2, .. }
        ));
        task.await.unwrap();
        let (sent, _late) = send(&tx);
        assert!(!sent, "the channel is closed after shutdown");
        assert_eq!(n.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
