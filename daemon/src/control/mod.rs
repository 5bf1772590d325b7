//! The control plane: the one place requests are carried out.
//!
//! The API handlers parse a request into a [`command::Command`] and hand it
//! to [`State::dispatch`]; signals and the trigger queue call the same
//! [`State`] methods. [`State`] holds what a reload may replace (config,
//! store, recorder) together in one [`Current`], swapped atomically.
//!
//! - [`config`]: the config as applied, and what `--check-config` checks;
//! - [`command`]: commands, their replies and typed errors;
//! - `dump`: one dump, capture then write, off the async workers;
//! - `reload`: re-reading the config and applying what changed;
//! - [`loss`]: the loss watcher;
//! - [`conditions`]: the `[[trigger]]` conditions, their counters;
//! - [`outcome`]: dump results and the events Watch streams.

pub mod access;
pub mod command;
pub mod conditions;
pub mod config;
mod dump;
pub mod fleet_status;
pub mod history;
pub mod loss;
pub mod outcome;
mod reload;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, mpsc};
use std::time::{Instant, SystemTime};

use flightrec_config::LoadedConfig;
use nix::unistd::Gid;
use tokio::sync::{broadcast, oneshot, watch};

use crate::recorder::Recorder;
use crate::store::{RetentionPolicy, SnapshotInfo, Store, StoreError, unix_ns};
use crate::triggers::window::ResolvedWindow;
use crate::triggers::{self, Message, Outcome, Timing, Trigger, TriggerKind};
pub use config::ConfigSource;
#[cfg(feature = "testing")]
pub use dump::HANG_DUMP_LABEL;
pub use outcome::{
    DumpDone, DumpFailure, DumpOutput, DumpResult, DumpTimings, Event, HeldWindow, Stamped,
};
pub use reload::ReloadError;

/// What a reload may replace, swapped as one.
pub struct Current {
    pub config: LoadedConfig,
    pub store: Arc<Store>,
    pub recorder: Arc<Recorder>,
    pub group: Option<(String, Gid)>,
}

/// Shared by the API handlers, the signal thread and the dump task.
pub struct State {
    pub source: ConfigSource,
    current: RwLock<Arc<Current>>,
    /// To the dump thread (sends fail once it has ended).
    dump_tx: mpsc::Sender<Message<DumpResult>>,
    /// The running `[[trigger]]` conditions and their counters.
    conditions: conditions::ConditionState,
    events: broadcast::Sender<Stamped>,
    pub started: Instant,
    pub socket_path: PathBuf,
    last_dump: Mutex<Option<DumpTimings>>,
    dumps: AtomicU64,
    shutting_down: AtomicBool,
    shutdown_tx: watch::Sender<bool>,
    reload_lock: tokio::sync::Mutex<()>,
    set_log_level: Box<dyn Fn(&str) + Send + Sync>,
    /// The fleet connection (None inside without `[fleet]`).
    pub fleet: Arc<fleet_status::FleetStatus>,
    /// `Compress` requests running and waiting.
    compressions: command::CompressQueue,
    /// The history writer, with `[history]` on (set once at start).
    history: std::sync::OnceLock<crate::history::History>,
}

/// The dump queue's receiving end, for [`run_dumps`].
pub struct DumpQueue {
    requests: mpsc::Receiver<Message<DumpResult>>,
    timing: Timing,
    priority: u8,
}

impl State {
    /// The state of a daemon whose recorder and store are open.
    pub fn new(
        source: ConfigSource,
        current: Current,
        socket_path: PathBuf,
        set_log_level: Box<dyn Fn(&str) + Send + Sync>,
    ) -> (Arc<Self>, DumpQueue) {
        let (dump_tx, requests) = mpsc::channel();
        let timing = config::timing_of(&current.config.config);
        let priority = *current.config.config.snapshot.realtime_priority.get_ref();
        let (shutdown_tx, _) = watch::channel(false);
        let (events, _) = broadcast::channel(256);
        let state = Arc::new(State {
            source,
            current: RwLock::new(Arc::new(current)),
            dump_tx,
            conditions: conditions::ConditionState::default(),
            events,
            started: Instant::now(),
            socket_path,
            last_dump: Mutex::new(None),
            dumps: AtomicU64::new(0),
            shutting_down: AtomicBool::new(false),
            shutdown_tx,
            reload_lock: tokio::sync::Mutex::new(()),
            set_log_level,
            fleet: Arc::default(),
            compressions: command::CompressQueue::default(),
            history: std::sync::OnceLock::new(),
        });
        (
            state,
            DumpQueue {
                requests,
                timing,
                priority,
            },
        )
    }

    pub fn current(&self) -> Arc<Current> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown_tx.subscribe()
    }

    /// Starts a clean shutdown (SIGTERM/SIGINT).
    pub fn begin_shutdown(&self, why: &str) {
        if !self.shutting_down.swap(true, Ordering::SeqCst) {
            tracing::info!("{why}: shutting down");
            self.conditions.stop();
            let _ = self.send_to_dumps(Message::Shutdown);
            self.shutdown_tx.send_replace(true);
        }
    }

    pub fn last_dump(&self) -> Option<DumpTimings> {
        *self.last_dump.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn dumps(&self) -> u64 {
        self.dumps.load(Ordering::Relaxed)
    }

    /// The events published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Stamped> {
        self.events.subscribe()
    }

    pub fn publish(&self, event: Event) {
        // No subscriber is not an error.
        let _ = self.events.send(Stamped {
            unix_ns: unix_ns(SystemTime::now()),
            event,
        });
    }

    fn send_to_dumps(
        &self,
        message: Message<DumpResult>,
    ) -> Result<(), mpsc::SendError<Message<DumpResult>>> {
        self.dump_tx.send(message)
    }

    /// Asks the dump thread to answer between dumps: the receiver resolves
    /// once it did, and fails when the thread has ended. A dump that hangs
    /// leaves it pending (the watchdog's probe).
    pub fn ping_dump_thread(&self) -> oneshot::Receiver<()> {
        let (answer, answered) = oneshot::channel();
        // A send that fails drops `answer`: the receiver reports it.
        let _ = self.send_to_dumps(Message::Ping(answer));
        answered
    }

    /// Queues a dump; the receiver gets its result (API callers wait on
    /// it). Callable from any thread: the queue never blocks. `compress`:
    /// None follows `[snapshot] compression`.
    pub fn request_dump(
        &self,
        kind: TriggerKind,
        label: Option<String>,
        compress: Option<bool>,
        window: ResolvedWindow,
    ) -> oneshot::Receiver<Outcome<DumpResult>> {
        let (tx, rx) = oneshot::channel();
        let mut trigger = Trigger::now(kind, label, compress, Some(tx));
        trigger.window = window.window;
        trigger.delay = window.delay;
        self.queue_trigger(trigger);
        rx
    }

    /// Queues `t`; a trigger refused because the dump thread has ended is
    /// answered with [`Outcome::ShuttingDown`].
    fn queue_trigger(&self, t: triggers::DumpRequest<DumpResult>) {
        if let Err(mpsc::SendError(Message::Trigger(t))) =
            self.send_to_dumps(Message::Trigger(Box::new(t)))
            && let Some(w) = t.waiter
        {
            let _ = w.send(Outcome::ShuttingDown);
        }
    }

    /// Applies retention now; `protect` is a snapshot just written.
    pub fn apply_retention(
        &self,
        policy: &RetentionPolicy,
        protect: Option<&str>,
    ) -> Result<(Vec<SnapshotInfo>, Vec<SnapshotInfo>), StoreError> {
        let cur = self.current();
        let (removed, kept) = cur
            .store
            .apply_retention(policy, protect, SystemTime::now())?;
        for s in &removed {
            let reason = if s.pending_uploads.is_empty() {
                tracing::info!(id = %s.id, bytes = s.bytes, "snapshot removed by retention");
                "retention"
            } else {
                tracing::warn!(
                    id = %s.id,
                    bytes = s.bytes,
                    destinations = %s.pending_uploads.join(","),
                    "snapshot removed before its upload: retention.max_bytes forced it (every \
                     snapshot already uploaded was removed first)"
                );
                "retention.max_bytes, before its upload"
            };
            self.publish(Event::SnapshotRemoved {
                snapshot: s.clone(),
                reason,
            });
        }
        if let (Some(id), Some(limit)) = (protect, policy.max_bytes)
            && let Some(s) = kept.iter().find(|s| s.id == id)
            && s.bytes > limit
        {
            tracing::warn!(
                id = %s.id,
                bytes = s.bytes,
                max_bytes = limit,
                "the new snapshot alone exceeds retention.max_bytes; it is kept until the next \
                 dump or rotate"
            );
        }
        Ok((removed, kept))
    }
}

/// Serves the dump queue until shutdown on its own thread
/// (`flightrec-dump`, SCHED_FIFO at `snapshot.realtime_priority` until the
/// rings are frozen): coalescing, rate limit, then one dump at a time (see
/// [`triggers`]). The workers that freeze the rings run at that priority
/// too.
/// Resolves when the thread has served its last dump.
pub async fn run_dumps(state: Arc<State>, queue: DumpQueue) -> std::io::Result<()> {
    let (done_tx, done_rx) = oneshot::channel();
    let DumpQueue {
        requests,
        timing,
        priority,
    } = queue;
    std::thread::Builder::new()
        .name("flightrec-dump".into())
        .spawn(move || {
            crate::perf::sched::pin_freeze_workers(priority);
            crate::perf::sched::run_realtime(priority);
            triggers::run(requests, timing, |spec| state.dump_blocking(&spec));
            let _ = done_tx.send(());
        })?;
    let _ = done_rx.await;
    Ok(())
}

/// Resolves once `stop` turns true (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
