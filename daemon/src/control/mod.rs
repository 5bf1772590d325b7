//! The control plane: the daemon's running parts, each with one job, and
//! the typed operations a client (the API, the fleet, a signal) asks of
//! them. Errors stay typed to the edge: `api::convert` alone turns them
//! into gRPC codes.
//!
//! - [`Live`] (`live`): the config, store and recorder in force, which a
//!   reload replaces as one ([`Control::reload`], `reload`);
//! - [`Lifecycle`] (`lifecycle`): start time and shutdown;
//! - [`EventBus`]: what Watch streams;
//! - [`Dumps`]: the dump pipeline (`dump`);
//! - [`conditions::Conditions`]: the `[[trigger]]` conditions, their
//!   counters, what a firing does;
//! - [`snapshots::Snapshots`]: listing, rotating and compressing the store;
//! - `status`: what `Status` reports; `history`: starting the history;
//!   [`loss`]: the loss watcher; [`config`]: what `--check-config` checks.

pub mod access;
pub mod conditions;
pub mod config;
pub mod fleet_status;
mod history;
pub mod lifecycle;
pub mod live;
pub mod loss;
mod reload;
pub mod snapshots;
pub mod status;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock, Weak};

use flightrec_config::Compression;

use crate::dump::{self, DumpThreads, Dumps, Hooks, Setup, TriggerKind};
use crate::events::EventBus;
use crate::history::History;
use crate::runtimes::RuntimeNames;
pub use config::ConfigSource;
pub use lifecycle::{Lifecycle, stopped};
pub use live::{Current, Live};
pub use reload::ReloadError;

/// The daemon's running parts.
pub struct Control {
    pub live: Arc<Live>,
    pub lifecycle: Lifecycle,
    pub events: EventBus,
    pub dumps: Dumps,
    pub conditions: Arc<conditions::Conditions>,
    pub snapshots: snapshots::Snapshots,
    /// The fleet connection (nothing inside without `[fleet]`).
    pub fleet: Arc<fleet_status::FleetStatus>,
    /// The history writer, with `[history]` on (set once at start).
    pub history: Arc<OnceLock<Arc<History>>>,
    pub socket_path: PathBuf,
    set_log_level: Box<dyn Fn(&str) + Send + Sync>,
}

/// What the dump pipeline needs of the daemon as it is now.
fn setup_of(
    live: &Live,
    history: &OnceLock<Arc<History>>,
    names: Option<&Arc<RuntimeNames>>,
) -> Setup {
    let cur = live.current();
    let snap = &cur.config.config.snapshot;
    Setup {
        recorder: Arc::clone(&cur.recorder),
        store: Arc::clone(&cur.store),
        history: history.get().cloned(),
        compress_by_default: snap.compression == Compression::Zstd,
        level: *snap.level.get_ref(),
        retention: config::retention_of(&cur.config.config),
        writer_nice: *snap.writer_nice.get_ref(),
        names: names.cloned(),
    }
}

/// Asks the runtimes' sockets for the names of the containers the
/// recorder sees, with `[containers]` cgroups on and sockets given.
fn start_names(live: &Arc<Live>) -> Option<Arc<RuntimeNames>> {
    let cur = live.current();
    let containers = &cur.config.config.containers;
    if !containers.cgroups || containers.runtime_sockets.is_empty() {
        return None;
    }
    let sockets = containers
        .runtime_sockets
        .iter()
        .map(|s| s.get_ref().clone())
        .collect();
    let weak = Arc::downgrade(live);
    let seen = Box::new(move || {
        let Some(live) = weak.upgrade() else {
            return Vec::new();
        };
        let cgroups = live.current().recorder.cgroups();
        let mut ids: Vec<String> = cgroups
            .iter()
            .filter_map(|(_, p)| flightrec_proto::container::of_cgroup(p))
            .filter(|c| c.runtime != "systemd")
            .map(|c| c.id)
            .collect();
        ids.sort();
        ids.dedup();
        ids
    });
    match RuntimeNames::start(sockets, seen) {
        Ok(names) => Some(Arc::new(names)),
        Err(e) => {
            tracing::warn!("containers are not named: the naming thread did not start: {e}");
            None
        }
    }
}

impl Control {
    /// The parts of a daemon whose recorder and store are open, with the
    /// dump thread started (its threads are joined at shutdown).
    pub fn start(
        source: ConfigSource,
        current: Current,
        socket_path: PathBuf,
        set_log_level: Box<dyn Fn(&str) + Send + Sync>,
    ) -> std::io::Result<(Arc<Self>, DumpThreads)> {
        let timing = config::timing_of(&current.config.config);
        let priority = *current.config.config.snapshot.realtime_priority.get_ref();
        let live = Arc::new(Live::new(source, current));
        let history: Arc<OnceLock<Arc<History>>> = Arc::default();
        let conditions: Arc<conditions::Conditions> = Arc::default();
        let fleet: Arc<fleet_status::FleetStatus> = Arc::default();
        let events = EventBus::default();
        let names = start_names(&live);
        if let Some(names) = &names {
            conditions.set_names(Arc::clone(names));
        }
        let hooks = Hooks {
            setup: {
                let (live, history) = (Arc::downgrade(&live), Arc::clone(&history));
                let names = names.clone();
                Box::new(move || {
                    live.upgrade()
                        .map(|l| setup_of(&l, &history, names.as_ref()))
                })
            },
            written: {
                let (conditions, fleet) = (Arc::clone(&conditions), Arc::clone(&fleet));
                Box::new(move |done, kinds| {
                    conditions.credit_dump(kinds);
                    if !done.snapshot.pending_uploads.is_empty() {
                        fleet.wake_uploads();
                    }
                })
            },
        };
        let (dumps, threads) = dump::start(hooks, events.clone(), timing, priority)?;
        let control = Arc::new(Control {
            snapshots: snapshots::Snapshots::new(Arc::clone(&live), events.clone()),
            live,
            lifecycle: Lifecycle::default(),
            events,
            dumps,
            conditions,
            fleet,
            history,
            socket_path,
            set_log_level,
        });
        Ok((control, threads))
    }

    /// Starts a clean shutdown (SIGTERM/SIGINT): conditions stop, the dump
    /// under way finishes and the triggers accepted are served.
    pub fn begin_shutdown(&self, why: &str) {
        if self.lifecycle.begin() {
            tracing::info!("{why}: shutting down");
            self.conditions.stop();
            self.dumps.shutdown();
        }
    }

    /// A trigger nobody waits for (SIGUSR2): the log and Watch report it.
    pub fn signal_dump(&self) {
        self.dumps
            .queue(dump::Trigger::now(TriggerKind::Signal, None));
    }

    fn weak(self: &Arc<Self>) -> Weak<Self> {
        Arc::downgrade(self)
    }
}
