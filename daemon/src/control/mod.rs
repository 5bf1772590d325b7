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
//! - [`outcome`]: dump results and the events Watch streams.

pub mod access;
pub mod command;
pub mod config;
mod dump;
pub mod loss;
pub mod outcome;
mod reload;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Instant, SystemTime};

use flightrec_config::LoadedConfig;
use nix::unistd::Gid;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::recorder::Recorder;
use crate::store::{RetentionPolicy, SnapshotInfo, Store, StoreError, unix_ns};
use crate::triggers::{self, DumpRequest, Outcome, Timing, Trigger, TriggerKind};
pub use config::ConfigSource;
pub use outcome::{DumpDone, DumpFailure, DumpOutput, DumpResult, DumpTimings, Event, Stamped};
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
    dump_tx: mpsc::UnboundedSender<DumpRequest<DumpResult>>,
    timing_tx: watch::Sender<Timing>,
    events: broadcast::Sender<Stamped>,
    pub started: Instant,
    pub socket_path: PathBuf,
    last_dump: Mutex<Option<DumpTimings>>,
    dumps: AtomicU64,
    shutting_down: AtomicBool,
    shutdown_tx: watch::Sender<bool>,
    reload_lock: tokio::sync::Mutex<()>,
    set_log_level: Box<dyn Fn(&str) + Send + Sync>,
}

/// The dump queue's receiving ends, for [`run_dumps`].
pub struct DumpQueue {
    requests: mpsc::UnboundedReceiver<DumpRequest<DumpResult>>,
    timing: watch::Receiver<Timing>,
}

impl State {
    /// The state of a daemon whose recorder and store are open.
    pub fn new(
        source: ConfigSource,
        current: Current,
        socket_path: PathBuf,
        set_log_level: Box<dyn Fn(&str) + Send + Sync>,
    ) -> (Arc<Self>, DumpQueue) {
        let (dump_tx, requests) = mpsc::unbounded_channel();
        let (timing_tx, timing) = watch::channel(config::timing_of(&current.config.config));
        let (shutdown_tx, _) = watch::channel(false);
        let (events, _) = broadcast::channel(256);
        let state = Arc::new(State {
            source,
            current: RwLock::new(Arc::new(current)),
            dump_tx,
            timing_tx,
            events,
            started: Instant::now(),
            socket_path,
            last_dump: Mutex::new(None),
            dumps: AtomicU64::new(0),
            shutting_down: AtomicBool::new(false),
            shutdown_tx,
            reload_lock: tokio::sync::Mutex::new(()),
            set_log_level,
        });
        (state, DumpQueue { requests, timing })
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

    fn publish(&self, event: Event) {
        // No subscriber is not an error.
        let _ = self.events.send(Stamped {
            unix_ns: unix_ns(SystemTime::now()),
            event,
        });
    }

    /// Queues a dump; the receiver gets its result (API callers wait on
    /// it). Callable from any thread: the queue never blocks.
    pub fn request_dump(
        &self,
        kind: TriggerKind,
        label: Option<String>,
        compress: bool,
    ) -> oneshot::Receiver<Outcome<DumpResult>> {
        let (tx, rx) = oneshot::channel();
        let t = Trigger {
            kind,
            label,
            compress,
            waiter: Some(tx),
        };
        if let Err(mpsc::error::SendError(t)) = self.dump_tx.send(t)
            && let Some(w) = t.waiter
        {
            let _ = w.send(Outcome::ShuttingDown);
        }
        rx
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
            tracing::info!(id = %s.id, bytes = s.bytes, "snapshot removed by retention");
            self.publish(Event::SnapshotRemoved {
                snapshot: s.clone(),
                reason: "retention",
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

/// Serves the dump queue until shutdown: coalescing, rate limit, then one
/// dump at a time (see [`triggers`]).
pub async fn run_dumps(state: Arc<State>, queue: DumpQueue) {
    let stop = state.shutdown_signal();
    triggers::run(queue.requests, queue.timing, stop, move |spec| {
        state.clone().execute_dump(spec)
    })
    .await;
}

/// Resolves once `stop` turns true (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
