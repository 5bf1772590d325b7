//! Triggers: signals, API calls and configured conditions into one dump
//! path, coalescing, rate limit.
//!
//! Every trigger (SIGUSR2, the `Dump` RPC, a `[[trigger]]` condition)
//! becomes a [`DumpRequest`] sent to one thread ([`run`]) that owns a
//! [`Scheduler`], a pure state machine:
//! - triggers that arrive while no dump is due yet, or while a dump runs,
//!   join the one pending batch, served by one dump; every caller waiting on
//!   that batch gets its result (marked coalesced when the batch held more
//!   than one trigger);
//! - a batch starts no earlier than `min_interval` after the previous freeze
//!   (an API caller waits for that slot rather than being refused: it asked
//!   for a snapshot) and no earlier than `post_trigger_delay` after its first
//!   trigger (a condition may set its own delay), so the rings keep
//!   recording what follows the trigger;
//! - on shutdown a dump under way finishes and triggers already accepted
//!   get one last dump at once (a caller asked for a snapshot); triggers
//!   after that get [`Outcome::ShuttingDown`].
//!
//! The dump thread is a plain thread, not an async task: it sleeps on its
//! channel and starts the freeze as soon as a due trigger arrives, without
//! waiting for a runtime worker (see `control::run_dumps`).

pub mod conditions;
pub mod gate;
pub mod signals;
pub mod window;

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

pub use window::{WallWindow, WindowRequest};

/// What asked for a dump.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TriggerKind {
    Api,
    Signal,
    /// A `[[trigger]]` condition, by name.
    Condition(Arc<str>),
    /// A request from the fleet (NATS).
    Fleet,
}

impl TriggerKind {
    /// As the snapshot's trigger field shows it: `api`, `signal`,
    /// `condition:<name>`.
    pub fn describe(&self) -> String {
        match self {
            TriggerKind::Api => "api".into(),
            TriggerKind::Signal => "signal".into(),
            TriggerKind::Condition(name) => format!("condition:{name}"),
            TriggerKind::Fleet => "fleet".into(),
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
    /// None: `[snapshot] compression` decides.
    pub compress: Option<bool>,
    /// This trigger's own `post_trigger_delay`, instead of `[snapshot]`'s.
    pub delay: Option<Duration>,
    /// When it happened (the delay counts from here, also for a trigger
    /// that waited in the channel while a dump ran).
    pub at: Instant,
    /// The part of the past it asks for; open: all the rings hold.
    pub window: WallWindow,
    /// What a condition matched (the event and task, the stall, the
    /// losses), for the snapshot's sidecar and report.
    pub matched: Option<String>,
    pub waiter: Option<W>,
}

impl<W> Trigger<W> {
    /// A trigger happening now, on the `[snapshot]` delay.
    pub fn now(
        kind: TriggerKind,
        label: Option<String>,
        compress: Option<bool>,
        waiter: Option<W>,
    ) -> Self {
        Self {
            kind,
            label,
            compress,
            delay: None,
            at: Instant::now(),
            window: WallWindow::default(),
            matched: None,
            waiter,
        }
    }
}

/// The dump a batch asks for: the first label given wins; compressed if
/// any trigger asked for it, plain if every trigger asked for plain, else
/// as `[snapshot] compression` says (None).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpSpec {
    /// "api", "signal", "condition:<name>" or several joined by "+".
    pub trigger: String,
    /// What the triggers were, each once.
    pub kinds: Vec<TriggerKind>,
    /// What the conditions among them matched, `condition:<name>: <what>`
    /// for the first firing of each, joined by "; "; empty without one.
    pub matched: String,
    pub label: Option<String>,
    pub compress: Option<bool>,
    /// Triggers served by this dump.
    pub triggers: usize,
    /// From the first trigger of the batch to the start of the dump.
    pub waited: Duration,
    /// The window holding every trigger's.
    pub window: WallWindow,
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
    window: WallWindow,
    pub kinds: Vec<TriggerKind>,
    /// What each condition's first firing in the batch matched.
    matched: Vec<String>,
    pub label: Option<String>,
    pub compress: Option<bool>,
    pub triggers: usize,
    pub waiters: Vec<W>,
}

impl<W> Batch<W> {
    fn new(first_at: Instant) -> Self {
        Self {
            first_at,
            default_delay_from: None,
            own_due: None,
            window_due: None,
            window: WallWindow::default(),
            kinds: Vec::new(),
            matched: Vec::new(),
            label: None,
            compress: None,
            triggers: 0,
            waiters: Vec::new(),
        }
    }

    fn add(&mut self, t: Trigger<W>) {
        if t.window.end_unix_ns.is_some() {
            let due = t.at + t.delay.unwrap_or_default();
            self.window_due = Some(self.window_due.map_or(due, |w| w.max(due)));
        }
        self.window = if self.triggers == 0 {
            t.window
        } else {
            self.window.union(t.window)
        };
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
        if !self.kinds.contains(&t.kind) {
            if let Some(m) = t.matched {
                self.matched.push(format!("{}: {m}", t.kind.describe()));
            }
            self.kinds.push(t.kind);
            self.kinds.sort();
        }
        if self.label.is_none() {
            self.label = t.label;
        }
        self.compress = match (self.compress, t.compress) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (Some(false), Some(false)) => Some(false),
            // The first trigger decides until another disagrees.
            (c, None) | (None, c) if self.triggers == 0 => c,
            _ => None,
        };
        self.triggers += 1;
        self.waiters.extend(t.waiter);
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

    pub fn spec(&self, now: Instant) -> DumpSpec {
        DumpSpec {
            trigger: self
                .kinds
                .iter()
                .map(TriggerKind::describe)
                .collect::<Vec<_>>()
                .join("+"),
            kinds: self.kinds.clone(),
            matched: self.matched.join("; "),
            label: self.label.clone(),
            compress: self.compress,
            triggers: self.triggers,
            waited: now.saturating_duration_since(self.first_at),
            window: self.window,
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

    pub fn trigger(&mut self, t: Trigger<W>) {
        self.pending.get_or_insert_with(|| Batch::new(t.at)).add(t);
    }

    pub fn poll(&mut self, now: Instant) -> Step<W> {
        if self.running {
            return Step::Busy;
        }
        let Some(batch) = &self.pending else {
            return Step::Idle;
        };
        let mut due = batch.due(self.timing.post_trigger_delay);
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

/// The caller's end of a dump request.
pub type Waiter<R> = oneshot::Sender<Outcome<R>>;

/// A trigger as sent to [`run`].
pub type DumpRequest<R> = Trigger<Waiter<R>>;

/// What the dump thread receives.
#[derive(Debug)]
pub enum Message<R> {
    /// Boxed: a trigger is large next to the other messages.
    Trigger(Box<DumpRequest<R>>),
    /// New `[snapshot]` timing (a reload).
    Timing(Timing),
    /// Finish the dump under way, serve what was accepted, stop.
    Shutdown,
    /// Answered at once between dumps: the watchdog's proof that the dump
    /// thread is not stuck (a hung dump leaves it unanswered).
    Ping(oneshot::Sender<()>),
}

fn answer<R: Clone>(waiters: Vec<Waiter<R>>, result: &R, coalesced: bool) {
    for w in waiters {
        let _ = w.send(Outcome::Done {
            result: result.clone(),
            coalesced,
        });
    }
}

/// The dump loop, run on its own thread: takes messages from `rx`, runs
/// `dump` for each batch and answers its callers. Returns on
/// [`Message::Shutdown`] or when every sender is gone.
pub fn run<R, F>(rx: Receiver<Message<R>>, timing: Timing, mut dump: F)
where
    R: Clone,
    F: FnMut(DumpSpec) -> R,
{
    let mut sched = Scheduler::new(timing);
    loop {
        let now = Instant::now();
        let message = match sched.poll(now) {
            Step::Start(batch) => {
                let coalesced = batch.triggers > 1;
                // Triggers arriving meanwhile wait in the channel, stamped
                // with their arrival time.
                let result = dump(batch.spec(now));
                sched.finished();
                answer(batch.waiters, &result, coalesced);
                continue;
            }
            Step::WaitUntil(at) => match rx.recv_timeout(at.saturating_duration_since(now)) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => break,
            },
            // Busy cannot happen here: the dump above runs in place.
            Step::Idle | Step::Busy => match rx.recv() {
                Ok(m) => m,
                Err(_) => break,
            },
        };
        match message {
            Message::Trigger(t) => sched.trigger(*t),
            Message::Timing(t) => sched.set_timing(t),
            Message::Ping(answer) => {
                let _ = answer.send(());
            }
            Message::Shutdown => break,
        }
    }
    // Triggers accepted before the shutdown are honoured with one last
    // dump, without waiting for their slot; later ones are refused (their
    // send fails once `rx` is dropped).
    while let Ok(m) = rx.try_recv() {
        if let Message::Trigger(t) = m {
            sched.trigger(*t);
        }
    }
    drop(rx);
    if let Some(batch) = sched.take_pending() {
        let coalesced = batch.triggers > 1;
        let result = dump(batch.spec(Instant::now()));
        answer(batch.waiters, &result, coalesced);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(kind: TriggerKind, label: Option<&str>, compress: bool, waiter: u32) -> Trigger<u32> {
        Trigger::now(
            kind,
            label.map(str::to_string),
            compress.then_some(true),
            Some(waiter),
        )
    }

    /// `t` arriving at `at`.
    fn at(at: Instant, mut t: Trigger<u32>) -> Trigger<u32> {
        t.at = at;
        t
    }

    const MS: Duration = Duration::from_millis(1);

    fn timing(min_interval_ms: u64, delay_ms: u64) -> Timing {
        Timing {
            min_interval: MS * min_interval_ms as u32,
            post_trigger_delay: MS * delay_ms as u32,
        }
    }

    #[test]
    fn compression_is_asked_by_any_refused_only_by_all() {
        let t0 = Instant::now();
        let spec_of = |wishes: &[Option<bool>]| {
            let mut s = Scheduler::new(timing(0, 0));
            for (i, w) in wishes.iter().enumerate() {
                let mut x = t(TriggerKind::Api, None, false, i as u32);
                x.compress = *w;
                s.trigger(at(t0, x));
            }
            let Step::Start(b) = s.poll(t0) else {
                panic!("should start")
            };
            b.spec(t0).compress
        };
        assert_eq!(spec_of(&[None]), None);
        assert_eq!(spec_of(&[Some(false)]), Some(false));
        assert_eq!(spec_of(&[Some(false), Some(false)]), Some(false));
        assert_eq!(spec_of(&[Some(false), None]), None);
        assert_eq!(spec_of(&[None, Some(false)]), None);
        assert_eq!(spec_of(&[None, Some(true), Some(false)]), Some(true));
    }

    #[test]
    fn a_lone_trigger_starts_at_once() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(1000, 0));
        assert!(matches!(s.poll(t0), Step::Idle));
        s.trigger(at(t0, t(TriggerKind::Api, Some("x"), false, 1)));
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
    fn what_each_condition_first_matched_is_kept_for_the_snapshot() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(0, 50));
        let fired = |name: &str, matched: &str, w| {
            let mut x = t(TriggerKind::Condition(name.into()), None, false, w);
            x.matched = Some(matched.into());
            at(t0, x)
        };
        s.trigger(fired("oom", "oom:mark_victim pid 42 (java)", 1));
        s.trigger(at(t0, t(TriggerKind::Signal, None, false, 2)));
        // A second firing of the same condition adds nothing.
        s.trigger(fired("oom", "oom:mark_victim pid 43 (java)", 3));
        s.trigger(fired("stall", "pressure some avg10=40.00", 4));
        let Step::Start(b) = s.poll(t0 + 50 * MS) else {
            panic!("should start after the delay");
        };
        let spec = b.spec(t0 + 50 * MS);
        assert_eq!(spec.trigger, "signal+condition:oom+condition:stall");
        assert_eq!(
            spec.matched,
            "condition:oom: oom:mark_victim pid 42 (java); condition:stall: pressure some avg10=40.00"
        );
        // Without a condition there is nothing to say.
        let mut s = Scheduler::new(timing(0, 0));
        s.trigger(at(t0, t(TriggerKind::Api, None, false, 1)));
        let Step::Start(b) = s.poll(t0) else {
            panic!("should start");
        };
        assert_eq!(b.spec(t0).matched, "");
    }

    #[test]
    fn a_window_that_ends_later_holds_the_batch_until_its_end() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(0, 0));
        let mut later = t(TriggerKind::Api, None, false, 1);
        later.delay = Some(200 * MS);
        later.window = WallWindow {
            start_unix_ns: Some(100),
            end_unix_ns: Some(500),
        };
        s.trigger(at(t0, later));
        // An immediate dump joins it and waits too: the window it shares
        // must be whole.
        s.trigger(at(t0 + 10 * MS, t(TriggerKind::Signal, None, false, 2)));
        match s.poll(t0 + 10 * MS) {
            Step::WaitUntil(at) => assert_eq!(at, t0 + 200 * MS),
            other => panic!("expected a wait, got {other:?}"),
        }
        let Step::Start(b) = s.poll(t0 + 200 * MS) else {
            panic!("should start at the window's end");
        };
        // The signal asked for all the rings hold: the union is open at
        // the start, and ends at the freeze.
        assert_eq!(b.spec(t0 + 200 * MS).window, WallWindow::default());

        let mut s = Scheduler::new(timing(0, 0));
        for (i, (start, end)) in [(100, 500), (50, 300)].into_iter().enumerate() {
            let mut w = t(TriggerKind::Api, None, false, i as u32);
            w.delay = Some(Duration::ZERO);
            w.window = WallWindow {
                start_unix_ns: Some(start),
                end_unix_ns: Some(end),
            };
            s.trigger(at(t0, w));
        }
        let Step::Start(b) = s.poll(t0) else {
            panic!("windows in the past start at once");
        };
        assert_eq!(
            b.spec(t0).window,
            WallWindow {
                start_unix_ns: Some(50),
                end_unix_ns: Some(500)
            }
        );
    }

    #[test]
    fn triggers_during_a_dump_coalesce_into_one_follow_up_at_the_next_slot() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(1000, 0));
        s.trigger(at(t0, t(TriggerKind::Api, None, false, 1)));
        assert!(matches!(s.poll(t0), Step::Start(_)));
        s.trigger(at(t0 + 10 * MS, t(TriggerKind::Signal, None, false, 2)));
        s.trigger(at(t0 + 20 * MS, t(TriggerKind::Api, Some("b"), true, 3)));
        s.trigger(at(t0 + 30 * MS, t(TriggerKind::Api, Some("c"), false, 4)));
        assert!(matches!(s.poll(t0 + 40 * MS), Step::Busy));
        s.finished();
        // The rate limit holds the follow-up until 1s after the first start.
        match s.poll(t0 + 50 * MS) {
            Step::WaitUntil(at) => assert_eq!(at, t0 + 1000 * MS),
            other => panic!("expected a wait, got {other:?}"),
        }
        s.trigger(at(t0 + 500 * MS, t(TriggerKind::Signal, None, false, 5)));
        let Step::Start(b) = s.poll(t0 + 1000 * MS) else {
            panic!("follow-up should start at the slot");
        };
        assert_eq!(b.waiters, vec![2, 3, 4, 5]);
        let spec = b.spec(t0 + 1000 * MS);
        assert_eq!(spec.trigger, "api+signal");
        assert_eq!(spec.label.as_deref(), Some("b"));
        assert_eq!(spec.compress, Some(true));
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
                s.trigger(at(now, t(TriggerKind::Signal, None, false, i)));
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
        s.trigger(at(t0, t(TriggerKind::Signal, None, false, 1)));
        match s.poll(t0) {
            Step::WaitUntil(at) => assert_eq!(at, t0 + 300 * MS),
            other => panic!("expected a wait, got {other:?}"),
        }
        s.trigger(at(t0 + 100 * MS, t(TriggerKind::Api, None, false, 2)));
        let Step::Start(b) = s.poll(t0 + 300 * MS) else {
            panic!("should start after the delay");
        };
        assert_eq!(b.waiters, vec![1, 2]);
    }

    #[test]
    fn the_pending_batch_can_be_taken_before_its_slot() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(1000, 0));
        s.trigger(at(t0, t(TriggerKind::Api, None, false, 1)));
        assert!(matches!(s.poll(t0), Step::Start(_)));
        s.trigger(at(t0, t(TriggerKind::Api, None, false, 2)));
        assert_eq!(s.take_pending().map(|b| b.waiters), Some(vec![2]));
        assert!(s.take_pending().is_none());
    }

    #[test]
    fn a_condition_with_its_own_delay_is_served_before_the_default_one() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(timing(0, 5000));
        s.trigger(at(t0, t(TriggerKind::Signal, None, false, 1)));
        let mut c = t(
            TriggerKind::Condition("probe".into()),
            Some("probe"),
            false,
            2,
        );
        c.at = t0 + 100 * MS;
        c.delay = Some(200 * MS);
        s.trigger(c);
        match s.poll(t0 + 100 * MS) {
            Step::WaitUntil(due) => assert_eq!(due, t0 + 300 * MS),
            other => panic!("expected a wait, got {other:?}"),
        }
        let Step::Start(b) = s.poll(t0 + 300 * MS) else {
            panic!("the condition's delay is due");
        };
        let spec = b.spec(t0 + 300 * MS);
        assert_eq!(spec.trigger, "signal+condition:probe");
        assert_eq!(
            spec.kinds,
            vec![TriggerKind::Signal, TriggerKind::Condition("probe".into())]
        );
    }

    /// The number of triggers each dump served, in order.
    type DumpLog = std::sync::Arc<std::sync::Mutex<Vec<usize>>>;

    /// Runs [`run`] on a thread with a dump taking `dump_ms`, recording the
    /// number of triggers each dump served.
    fn spawn_loop(
        timing: Timing,
        dump_ms: u64,
    ) -> (
        std::sync::mpsc::Sender<Message<u32>>,
        DumpLog,
        std::thread::JoinHandle<()>,
    ) {
        let (tx, rx) = std::sync::mpsc::channel();
        let dumps = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let d2 = dumps.clone();
        let thread = std::thread::spawn(move || {
            run(rx, timing, move |spec: DumpSpec| {
                let n = {
                    let mut d = d2.lock().unwrap();
                    d.push(spec.triggers);
                    d.len() as u32
                };
                std::thread::sleep(Duration::from_millis(dump_ms));
                n
            })
        });
        (tx, dumps, thread)
    }

    /// Waits until `n` dumps have started.
    fn started(dumps: &std::sync::Mutex<Vec<usize>>, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while dumps.lock().unwrap().len() < n {
            assert!(Instant::now() < deadline, "dump {n} never started");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn send(
        tx: &std::sync::mpsc::Sender<Message<u32>>,
        kind: TriggerKind,
    ) -> (bool, oneshot::Receiver<Outcome<u32>>) {
        let (w, r) = oneshot::channel();
        let sent = tx.send(Message::Trigger(Box::new(Trigger::now(
            kind,
            None,
            None,
            Some(w),
        ))));
        (sent.is_ok(), r)
    }

    #[test]
    fn the_loop_serves_concurrent_callers_with_one_follow_up() {
        // The follow-up waits for the 2s slot, long after all five sent.
        let (tx, dumps, thread) = spawn_loop(timing(2000, 0), 50);
        let (_, first) = send(&tx, TriggerKind::Api);
        started(&dumps, 1);
        let rest: Vec<_> = (0..4).map(|_| send(&tx, TriggerKind::Api).1).collect();
        let mut got = vec![first.blocking_recv().unwrap()];
        got.extend(rest.into_iter().map(|r| r.blocking_recv().unwrap()));
        let got: Vec<(u32, bool)> = got
            .into_iter()
            .map(|o| match o {
                Outcome::Done { result, coalesced } => (result, coalesced),
                Outcome::ShuttingDown => panic!("not shutting down"),
            })
            .collect();
        assert_eq!(
            got,
            vec![(1, false), (2, true), (2, true), (2, true), (2, true)]
        );
        assert_eq!(*dumps.lock().unwrap(), vec![1, 4]);
        drop(tx);
        thread.join().unwrap();
    }

    /// Sends a ping; Some(()) when the loop answered within `within`.
    fn ping(tx: &std::sync::mpsc::Sender<Message<u32>>, within: Duration) -> Option<()> {
        let (answer, answered) = oneshot::channel();
        tx.send(Message::Ping(answer)).unwrap();
        let deadline = Instant::now() + within;
        let mut answered = answered;
        loop {
            match answered.try_recv() {
                Ok(()) => return Some(()),
                Err(oneshot::error::TryRecvError::Closed) => return None,
                Err(oneshot::error::TryRecvError::Empty) if Instant::now() > deadline => {
                    return None;
                }
                Err(oneshot::error::TryRecvError::Empty) => {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }

    #[test]
    fn pings_are_answered_between_dumps_and_not_during_one() {
        let (tx, dumps, thread) = spawn_loop(timing(60_000, 0), 1500);
        assert_eq!(ping(&tx, Duration::from_secs(5)), Some(()), "idle");
        let (_, first) = send(&tx, TriggerKind::Api);
        started(&dumps, 1);
        // The dump takes 1.5s: a ping sent during it waits for its end.
        let during = Instant::now();
        assert_eq!(ping(&tx, Duration::from_millis(500)), None, "mid-dump");
        assert!(first.blocking_recv().is_ok());
        assert!(during.elapsed() >= Duration::from_millis(500));
        // A batch waiting 60s for its slot does not keep the loop busy.
        let (_, _waiting) = send(&tx, TriggerKind::Api);
        assert_eq!(
            ping(&tx, Duration::from_secs(5)),
            Some(()),
            "waiting for a slot"
        );
        assert_eq!(dumps.lock().unwrap().len(), 1);
        tx.send(Message::Shutdown).unwrap();
        thread.join().unwrap();
    }

    #[test]
    fn shutdown_finishes_the_running_dump_then_the_accepted_ones_then_refuses() {
        let (tx, dumps, thread) = spawn_loop(timing(60_000, 0), 100);
        let (_, first) = send(&tx, TriggerKind::Signal);
        started(&dumps, 1);
        let (_, second) = send(&tx, TriggerKind::Signal);
        tx.send(Message::Shutdown).unwrap();
        assert!(matches!(
            first.blocking_recv().unwrap(),
            Outcome::Done { result: 1, .. }
        ));
        // Accepted before the shutdown, due only in 60s: dumped at once.
        assert!(matches!(
            second.blocking_recv().unwrap(),
            Outcome::Done { result: 2, .. }
        ));
        thread.join().unwrap();
        let (sent, _late) = send(&tx, TriggerKind::Signal);
        assert!(!sent, "the channel is closed after shutdown");
        assert_eq!(dumps.lock().unwrap().len(), 2);
    }
}
