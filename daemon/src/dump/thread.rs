//! The dump thread: a plain thread at SCHED_FIFO, asleep on its channel,
//! that freezes the rings as soon as a batch is due (without waiting for
//! a runtime worker), then at normal priority (at `snapshot.writer_nice`)
//! writes what the rings hold and hands a window older than the rings to
//! the history lane.
//!
//! [`Dumps`] is its handle: the one way anything asks for a dump.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use tokio::sync::oneshot;

use super::Hooks;
use super::error::DumpError;
use super::history_lane::HistoryLane;
use super::outcome::DumpTimings;
use super::queue::{Batch, Scheduler, Step, Timing};
use super::request::{Answer, DumpRequest, Trigger, TriggerKind, Waiter};
use super::spec::Spec;
use super::write::{Figures, Job, Pipeline, needs_history};
use crate::events::EventBus;
use crate::host::ClockReference;
use crate::perf::sched::NormalPriority;
use crate::time::WallTime;

/// What the dump thread receives.
enum Message {
    /// Boxed: a trigger is large next to the other messages.
    Trigger(Box<Trigger<Waiter>>),
    /// New `[snapshot]` timing (a reload).
    Timing(Timing),
    /// Finish the dump under way, serve what was accepted, stop.
    Shutdown,
    /// Answered at once between dumps: the watchdog's proof that the dump
    /// thread is not stuck (a hung dump leaves it unanswered).
    Ping(oneshot::Sender<()>),
}

/// The handle to the dump pipeline: every trigger goes through it.
#[derive(Clone)]
pub struct Dumps {
    tx: mpsc::Sender<Message>,
    pipeline: Arc<Pipeline>,
}

/// The threads behind [`Dumps`], joined at shutdown.
pub struct DumpThreads {
    thread: std::thread::JoinHandle<()>,
}

impl DumpThreads {
    /// Waits (on a blocking thread) until the last dump is served.
    pub async fn join(self) {
        let _ = tokio::task::spawn_blocking(move || self.thread.join()).await;
    }
}

/// Starts the dump thread (`flightrec-dump`, SCHED_FIFO at `priority`
/// until the rings are frozen; the workers that freeze them run at that
/// priority too) and the history lane.
pub fn start(
    hooks: Hooks,
    events: EventBus,
    timing: Timing,
    priority: u8,
) -> std::io::Result<(Dumps, DumpThreads)> {
    let pipeline = Arc::new(Pipeline {
        hooks,
        events,
        figures: Figures::default(),
    });
    let (tx, rx) = mpsc::channel();
    let lane = HistoryLane::start(Arc::clone(&pipeline))?;
    let p2 = Arc::clone(&pipeline);
    let thread = std::thread::Builder::new()
        .name("flightrec-dump".into())
        .spawn(move || {
            crate::perf::sched::pin_freeze_workers(priority);
            crate::perf::sched::run_realtime(priority);
            run(rx, timing, &p2, lane);
        })?;
    Ok((Dumps { tx, pipeline }, DumpThreads { thread }))
}

impl Dumps {
    /// A dump of `request` for a caller who waits for it.
    pub async fn dump(&self, kind: TriggerKind, request: DumpRequest) -> Answer {
        let (tx, rx) = oneshot::channel();
        self.queue(Trigger::of_request(kind, request, Some(tx)));
        rx.await.unwrap_or(Err(DumpError::ShuttingDown))
    }

    /// Queues `trigger` (its caller, if any, gets the answer). Callable
    /// from any thread: the queue never blocks. Refused once the dump
    /// thread has ended: the caller is told so.
    pub fn queue(&self, trigger: Trigger<Waiter>) {
        if let Err(mpsc::SendError(Message::Trigger(t))) =
            self.tx.send(Message::Trigger(Box::new(trigger)))
            && let Some(w) = t.waiter
        {
            let _ = w.send(Err(DumpError::ShuttingDown));
        }
    }

    pub fn set_timing(&self, timing: Timing) {
        let _ = self.tx.send(Message::Timing(timing));
    }

    /// Finishes the dump under way, serves the triggers already accepted,
    /// and stops; later triggers are refused.
    pub fn shutdown(&self) {
        let _ = self.tx.send(Message::Shutdown);
    }

    /// Asks the dump thread to answer between dumps: the receiver resolves
    /// once it did, and fails when the thread has ended. A dump that hangs
    /// leaves it pending (the watchdog's probe).
    pub fn ping(&self) -> oneshot::Receiver<()> {
        let (answer, answered) = oneshot::channel();
        // A send that fails drops `answer`: the receiver reports it.
        let _ = self.tx.send(Message::Ping(answer));
        answered
    }

    /// The figures of the last snapshot written.
    pub fn last(&self) -> Option<DumpTimings> {
        *self
            .pipeline
            .figures
            .last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Snapshots written since start.
    pub fn count(&self) -> u64 {
        self.pipeline.figures.count.load(Ordering::Relaxed)
    }
}

/// The dump loop: takes messages from `rx`, starts each batch when it is
/// due, and on [`Message::Shutdown`] (or when every sender is gone) serves
/// what was accepted and returns.
fn run(rx: Receiver<Message>, timing: Timing, pipeline: &Pipeline, mut lane: HistoryLane) {
    let mut sched: Scheduler<Waiter> = Scheduler::new(timing);
    let mut stopping = false;
    while !stopping {
        let now = Instant::now();
        let message = match sched.poll(now) {
            Step::Start(batch) => {
                serve(pipeline, &lane, batch);
                sched.finished();
                // Triggers that arrived during the dump, in the channel,
                // join their batches before the next poll: one follow-up.
                while let Ok(m) = rx.try_recv() {
                    stopping |= take(&mut sched, m);
                }
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
        stopping = take(&mut sched, message);
    }
    // Triggers accepted before the shutdown are honoured with one last
    // dump each, without waiting for their slot; later ones are refused
    // (their send fails once `rx` is dropped).
    while let Ok(m) = rx.try_recv() {
        take(&mut sched, m);
    }
    drop(rx);
    for batch in sched.take_pending() {
        serve(pipeline, &lane, batch);
    }
    lane.close();
}

/// Applies one message; true for a shutdown.
fn take(sched: &mut Scheduler<Waiter>, message: Message) -> bool {
    match message {
        Message::Trigger(t) => sched.trigger(*t, WallTime::now()),
        Message::Timing(t) => sched.set_timing(t),
        Message::Ping(answer) => {
            let _ = answer.send(());
        }
        Message::Shutdown => return true,
    }
    false
}

/// One batch: the freeze first (the rings are what the snapshot holds, and
/// they keep overwriting until it), then the rings' file, and the history
/// lane's job for the windows older than the rings.
fn serve(pipeline: &Pipeline, lane: &HistoryLane, batch: Batch<Waiter>) {
    #[cfg(feature = "testing")]
    if batch
        .members
        .iter()
        .any(|m| m.label.as_deref() == Some(super::HANG_DUMP_LABEL))
    {
        tracing::warn!(
            "testing build: the dump thread hangs on purpose ({})",
            super::HANG_DUMP_LABEL
        );
        loop {
            std::thread::park();
        }
    }
    let started = Instant::now();
    let wait = started.saturating_duration_since(batch.first_at);
    let Some(setup) = (pipeline.hooks.setup)() else {
        let spec = Spec::of(&batch.members);
        pipeline.fail(batch.members, &spec, DumpError::ShuttingDown);
        return;
    };
    let frozen_at = WallTime::now();
    let captured = setup.recorder.capture();
    let capture_time = started.elapsed();
    // The rings are frozen: the rest (naming, writing, retention) is
    // ordinary work and runs with the normal policy, at the writer's nice.
    let _normal = NormalPriority::enter(setup.writer_nice);
    let capture = match captured {
        Ok(c) => Arc::new(c),
        Err(e) => {
            let spec = Spec::of(&batch.members);
            pipeline.fail(batch.members, &spec, DumpError::Capture(Arc::new(e)));
            return;
        }
    };
    let history_oldest = setup.history.as_ref().and_then(|h| h.status().oldest);
    let explicit = batch.members.iter().any(|m| m.window.start.is_some());
    let clock = (history_oldest.is_some() && explicit)
        .then(ClockReference::now)
        .flatten();
    let (older, rings): (Vec<_>, Vec<_>) = batch
        .members
        .into_iter()
        .partition(|m| needs_history(&m.window, &capture, history_oldest, clock.as_ref()));
    let job = |members, capture| Job {
        members,
        capture,
        frozen_at,
        wait,
        capture_time,
    };
    if !older.is_empty() {
        lane.push(job(older, Arc::clone(&capture)));
    }
    if !rings.is_empty() {
        // The last owner of the capture, unless the lane shares it.
        pipeline.write_rings(&setup, job(rings, capture));
    }
}
