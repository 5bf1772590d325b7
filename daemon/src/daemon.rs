//! The daemon: start-up, the dump path, reload, loss watching, shutdown.
//!
//! `main.rs` parses the command line and calls [`run`]. Everything the API
//! handlers need lives in [`State`]; the parts a reload may replace (config,
//! store, recorder) sit together in one [`Current`] swapped atomically.

mod dump;
pub mod engine;
pub mod recorder;
mod reload;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use flightrec_config::{Config, ConfigError, LoadedConfig};
use flightrec_proto::v1 as pb;
use nix::unistd::{Gid, Group};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::api;
use crate::store::{RetentionPolicy, SnapshotInfo, Store, StoreError, unix_ns};
use crate::triggers::{self, DumpRequest, Outcome, Timing, Trigger, TriggerKind};
use engine::{DumpOutput, Engine, EngineError, EngineStatus};

/// How long connections get to finish after SIGTERM before they are cut.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Why the daemon could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Socket(#[from] api::SocketError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot install the handler for {signal}: {source}")]
    Signal {
        signal: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("the gRPC server failed: {0}")]
    Serve(#[source] tonic::transport::Error),
}

impl DaemonError {
    /// 2 for a config problem (as `--check-config`; the unit's
    /// RestartPreventExitStatus=2 relies on it), 1 otherwise. A directory
    /// the config names that cannot be created is a config problem.
    pub fn exit_code(&self) -> i32 {
        match self {
            DaemonError::Config(_)
            | DaemonError::Store(StoreError::CreateDir { .. })
            | DaemonError::Socket(
                api::SocketError::NotASocket { .. } | api::SocketError::CreateDir { .. },
            ) => 2,
            _ => 1,
        }
    }
}

/// Where the config comes from.
#[derive(Debug, Clone)]
pub struct ConfigSource {
    pub path: PathBuf,
    /// Given with `--config`: a missing file is an error. Otherwise the
    /// default path, and a missing file means built-in defaults.
    pub explicit: bool,
}

impl ConfigSource {
    /// Reads the config, falling back to built-in defaults when the default
    /// file is absent; `Ok(None)` path in the result means defaults.
    pub fn load(&self) -> Result<LoadedConfig, ConfigError> {
        if !self.explicit && !self.path.exists() {
            return Ok(LoadedConfig::defaults());
        }
        LoadedConfig::load(&self.path)
    }
}

/// The socket group resolved against the system's groups. The default
/// group may be absent (None: the socket keeps the daemon's group); a group
/// named in the file must exist.
pub fn resolve_group(loaded: &LoadedConfig) -> Result<Option<(String, Gid)>, ConfigError> {
    let Some(group) = &loaded.config.daemon.socket_group else {
        return Ok(None);
    };
    let name = group.get_ref();
    if name.is_empty() {
        return Ok(None);
    }
    match Group::from_name(name) {
        Ok(Some(g)) => Ok(Some((name.clone(), g.gid))),
        Ok(None) if group.span().is_empty() => {
            tracing::warn!(
                group = %name,
                "the default socket group does not exist; the socket is accessible to root only \
                 (create the group or set daemon.socket_group)"
            );
            Ok(None)
        }
        Ok(None) => Err(loaded.error_at(
            group.span(),
            format!(
                "daemon.socket_group: group {name:?} does not exist \
                 (create it with `groupadd {name}` or name another group)"
            ),
        )),
        Err(e) => Err(loaded.error_at(
            group.span(),
            format!("daemon.socket_group: cannot look up group {name:?}: {e}"),
        )),
    }
}

/// Everything `--check-config` verifies: syntax, values, the group, the
/// paths, and the events (filters included) against the running kernel.
/// Returns the effective config, which reads back as the same daemon.
pub fn check_config(loaded: &LoadedConfig) -> Result<Config, ConfigError> {
    let group = resolve_group(loaded)?;
    check_paths(loaded)?;
    check_tracking_log(loaded)?;
    recorder::check_events(&loaded.config).map_err(|e| engine_error_in_config(loaded, e))?;
    Ok(effective_config(&loaded.config, group.as_ref()))
}

/// `config` with the socket group as resolved: a default group that does
/// not exist is written `""` (no group), so the printed config, fed back,
/// starts the same daemon instead of asking for a group that is absent.
pub fn effective_config(config: &Config, group: Option<&(String, Gid)>) -> Config {
    let mut effective = config.clone();
    effective.daemon.socket_group = Some(flightrec_config::Spanned::new(
        0..0,
        group.map(|g| g.0.clone()).unwrap_or_default(),
    ));
    effective
}

/// What a path the daemon must create can be refused for: the nearest
/// existing ancestor of `path` (itself included) must be a directory
/// (`want_dir`: `path` itself, when it exists, too) that root may write to.
fn check_creatable(path: &Path, want_dir: bool) -> Result<(), String> {
    let shown = |p: &Path| flightrec_config::quoted(&p.to_string_lossy());
    let mut probe = path;
    loop {
        match std::fs::metadata(probe) {
            Ok(md) if probe == path => {
                return if want_dir && !md.is_dir() {
                    Err(format!("{} exists and is not a directory", shown(path)))
                } else {
                    Ok(())
                };
            }
            Ok(md) if !md.is_dir() => {
                return Err(format!(
                    "{} cannot be created: {} is not a directory",
                    shown(path),
                    shown(probe)
                ));
            }
            Ok(_) => {
                return nix::unistd::access(probe, nix::unistd::AccessFlags::W_OK).map_err(|e| {
                    format!(
                        "{} cannot be created in {}: {}",
                        shown(path),
                        shown(probe),
                        e.desc()
                    )
                });
            }
            // Missing, or under a file: the ancestor found next says which.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) => {}
            Err(e) => return Err(format!("{} cannot be checked: {e}", shown(probe))),
        }
        match probe.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => probe = parent,
            _ => return Ok(()),
        }
    }
}

/// The output directory and the socket's directory exist as directories
/// or can be created; the socket path is free or a socket.
pub fn check_paths(loaded: &LoadedConfig) -> Result<(), ConfigError> {
    let daemon = &loaded.config.daemon;
    let at = |key: &str, why: String| {
        loaded.error_at(
            loaded.key_span("daemon", key),
            format!("daemon.{key}: {why}"),
        )
    };
    check_creatable(&daemon.output_dir, true).map_err(|why| at("output_dir", why))?;
    if let Some(dir) = daemon.socket.parent()
        && !dir.as_os_str().is_empty()
    {
        check_creatable(dir, true).map_err(|why| at("socket", why))?;
    }
    if let Ok(md) = std::fs::symlink_metadata(&daemon.socket) {
        use std::os::unix::fs::FileTypeExt;
        if !md.file_type().is_socket() {
            return Err(at(
                "socket",
                format!(
                    "{} exists and is not a socket",
                    flightrec_config::quoted(&daemon.socket.to_string_lossy())
                ),
            ));
        }
    }
    Ok(())
}

/// An engine start error that names an event becomes a config error
/// pointing at that event.
fn engine_error_in_config(loaded: &LoadedConfig, e: EngineError) -> ConfigError {
    let span = match &e {
        EngineError::Start { event: Some(i), .. } => loaded
            .config
            .events
            .get(*i)
            .map(|ev| ev.get_ref().name.span()),
        _ => None,
    };
    let message = match &e {
        EngineError::Start { message, .. } => message.clone(),
        other => other.to_string(),
    };
    loaded.error_at(span.unwrap_or(0..0), message)
}

/// Whether the system grants the memory `buffers.tracking_log` asks for
/// (the recorder allocates it whole), so a log too large for this machine
/// is a config error pointing at the key rather than a failed start.
pub fn check_tracking_log(loaded: &LoadedConfig) -> Result<(), ConfigError> {
    let log = &loaded.config.buffers.tracking_log;
    let bytes = usize::try_from(log.get_ref().bytes()).unwrap_or(usize::MAX);
    Vec::<u8>::new().try_reserve_exact(bytes).map_err(|e| {
        loaded.error_at(
            log.span(),
            format!(
                "buffers.tracking_log = {}: this machine does not grant that much memory ({e})",
                log.get_ref()
            ),
        )
    })
}

fn start_engine(loaded: &LoadedConfig) -> Result<Arc<dyn Engine>, DaemonError> {
    check_tracking_log(loaded)?;
    match recorder::start(&loaded.config) {
        Ok(e) => Ok(Arc::from(e)),
        Err(e @ EngineError::Start { event: Some(_), .. }) => {
            Err(DaemonError::Config(engine_error_in_config(loaded, e)))
        }
        Err(e) => Err(e.into()),
    }
}

/// What a reload may replace, swapped as one.
pub struct Current {
    pub config: LoadedConfig,
    pub store: Arc<Store>,
    pub engine: Arc<dyn Engine>,
    pub group: Option<(String, Gid)>,
}

/// Figures of one dump, for `Status` and the `Dump` reply.
#[derive(Debug, Clone, Copy, Default)]
pub struct DumpTimings {
    pub wait: Duration,
    pub capture: Duration,
    pub write: Duration,
    pub total: Duration,
    pub max_pause: Duration,
}

/// A dump that produced a snapshot.
#[derive(Debug, Clone)]
pub struct DumpDone {
    pub snapshot: SnapshotInfo,
    pub output: DumpOutput,
    pub timings: DumpTimings,
}

/// A dump that did not.
#[derive(Debug, Clone)]
pub enum DumpFailure {
    DiskFull(String),
    InvalidLabel(String),
    Failed(String),
    ShuttingDown,
}

pub type DumpResult = Result<Arc<DumpDone>, DumpFailure>;

/// Shared by the API handlers, the signal handlers and the dump task.
pub struct State {
    pub source: ConfigSource,
    current: RwLock<Arc<Current>>,
    dump_tx: mpsc::UnboundedSender<DumpRequest<DumpResult>>,
    timing_tx: watch::Sender<Timing>,
    pub events: broadcast::Sender<pb::WatchEvent>,
    pub started: Instant,
    pub socket_path: PathBuf,
    last_dump: Mutex<Option<DumpTimings>>,
    dumps: AtomicU64,
    shutting_down: AtomicBool,
    shutdown_tx: watch::Sender<bool>,
    reload_lock: tokio::sync::Mutex<()>,
    set_log_level: Box<dyn Fn(&str) + Send + Sync>,
}

fn timing_of(config: &Config) -> Timing {
    Timing {
        min_interval: config.snapshot.min_interval.get(),
        post_trigger_delay: config.snapshot.post_trigger_delay.get_ref().get(),
    }
}

fn retention_of(config: &Config) -> RetentionPolicy {
    let r = &config.retention;
    RetentionPolicy::from_limits(r.max_snapshots, r.max_bytes.bytes(), r.max_age.get())
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

pub fn now_event(kind: pb::watch_event::Kind) -> pb::WatchEvent {
    pb::WatchEvent {
        unix_ns: unix_ns(SystemTime::now()),
        kind: Some(kind),
    }
}

pub fn snapshot_pb(s: &SnapshotInfo) -> pb::Snapshot {
    pb::Snapshot {
        id: s.id.clone(),
        path: s.path.display().to_string(),
        bytes: s.bytes,
        compressed: s.compressed,
        label: s.label.clone().unwrap_or_default(),
        trigger: s.trigger.clone(),
        created_unix_ns: s.created_unix_ns,
        seq: s.seq,
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

pub fn timings_pb(t: &DumpTimings) -> pb::DumpTimings {
    pb::DumpTimings {
        wait_ns: nanos(t.wait),
        capture_ns: nanos(t.capture),
        write_ns: nanos(t.write),
        total_ns: nanos(t.total),
        max_pause_ns: nanos(t.max_pause),
    }
}

impl State {
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

    pub fn last_dump(&self) -> Option<DumpTimings> {
        *self.last_dump.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn dumps(&self) -> u64 {
        self.dumps.load(Ordering::Relaxed)
    }

    fn publish(&self, kind: pb::watch_event::Kind) {
        // No subscriber is not an error.
        let _ = self.events.send(now_event(kind));
    }

    /// Queues a dump; the receiver gets its result (API callers wait on it).
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
            self.publish(pb::watch_event::Kind::SnapshotRemoved(
                pb::SnapshotRemoved {
                    snapshot: Some(snapshot_pb(s)),
                    reason: "retention".into(),
                },
            ));
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

fn log_removed_temps(removed: &[PathBuf]) {
    for p in removed {
        tracing::info!(path = %p.display(), "removed a temporary file left by an earlier crash");
    }
}

/// The configured level applies to flightrec's own messages; libraries
/// (the HTTP/2 stack) only speak up for warnings.
fn directives(level: &str) -> String {
    format!("warn,flightrecd={level},flightrec_config={level}")
}

/// Sets up logging to stderr: no colours unless stderr is a terminal, no
/// time stamps under systemd (journald adds its own). `RUST_LOG` overrides
/// the configured level. Returns a function that changes the level.
pub fn init_logging(level: &str) -> Box<dyn Fn(&str) + Send + Sync> {
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, fmt, reload};
    let from_env = std::env::var_os("RUST_LOG").is_some();
    let filter = if from_env {
        EnvFilter::from_default_env()
    } else {
        EnvFilter::new(directives(level))
    };
    let (filter, handle) = reload::Layer::new(filter);
    let ansi = std::io::stderr().is_terminal();
    let journal = std::env::var_os("JOURNAL_STREAM").is_some();
    let timed = (!journal).then(|| {
        fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .with_target(false)
    });
    let untimed = journal.then(|| {
        fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .with_target(false)
            .without_time()
    });
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(timed)
        .with(untimed)
        .try_init();
    Box::new(move |level: &str| {
        if !from_env {
            let _ = handle.reload(EnvFilter::new(directives(level)));
        }
    })
}

/// RELOADING=1 with the MONOTONIC_USEC systemd 253+ requires beside it.
fn notify_reloading() {
    let mut states = vec![sd_notify::NotifyState::Reloading];
    if let Ok(now) = sd_notify::NotifyState::monotonic_usec_now() {
        states.push(now);
    }
    if let Err(e) = sd_notify::notify(&states) {
        tracing::warn!("cannot notify systemd: {e}");
    }
}

fn notify(state: sd_notify::NotifyState<'_>) {
    if let Err(e) = sd_notify::notify(&[state]) {
        tracing::warn!("cannot notify systemd: {e}");
    }
}

/// Runs the daemon until SIGTERM/SIGINT. `loaded` is the config already
/// read (and logged) by the caller.
pub fn run(source: ConfigSource, loaded: LoadedConfig) -> Result<(), DaemonError> {
    let set_log_level = init_logging(loaded.config.daemon.log_level.get_ref());
    match &loaded.path {
        Some(p) => tracing::info!(config = %p.display(), "config loaded"),
        None => tracing::info!(
            "no config file at {}; running on built-in defaults",
            source.path.display()
        ),
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    rt.block_on(serve(source, loaded, set_log_level))
}

async fn serve(
    source: ConfigSource,
    loaded: LoadedConfig,
    set_log_level: Box<dyn Fn(&str) + Send + Sync>,
) -> Result<(), DaemonError> {
    let group = resolve_group(&loaded)?;
    check_paths(&loaded)?;
    let cfg = &loaded.config;
    let (store, removed) = Store::open(&cfg.daemon.output_dir, &host_name())?;
    log_removed_temps(&removed);
    store.set_group(group.as_ref().map(|g| g.1))?;
    let socket_path = cfg.daemon.socket.clone();
    // Refuse early if another daemon owns the socket, before opening rings.
    api::check_socket_free(&socket_path).await?;
    let l2 = loaded.clone();
    let engine = tokio::task::spawn_blocking(move || start_engine(&l2))
        .await
        .map_err(|e| EngineError::Start {
            message: e.to_string(),
            event: None,
        })??;
    let events: Vec<String> = engine.events().into_iter().map(|e| e.name).collect();
    tracing::info!(
        events = %events.join(", "),
        ring = %cfg.buffers.per_cpu.get_ref(),
        output_dir = %cfg.daemon.output_dir.display(),
        "recording"
    );
    let listener = api::bind_socket(&socket_path, group.as_ref().map(|g| g.1)).await?;
    // Idle clients must never take the descriptors a dump needs: raise the
    // soft limit, then cap connections below it with a reserve for dumps.
    let fd_limit = api::raise_fd_limit();
    let limits = api::ConnectionLimits::from_fd_limit(fd_limit, api::open_fds());
    tracing::debug!(fd_limit, max_connections = limits.max, "API connection cap");
    let connections = api::Connections::new(limits);

    let (dump_tx, dump_rx) = mpsc::unbounded_channel();
    let (timing_tx, timing_rx) = watch::channel(timing_of(cfg));
    let (shutdown_tx, _) = watch::channel(false);
    let (events_tx, _) = broadcast::channel(256);
    let state = Arc::new(State {
        source,
        current: RwLock::new(Arc::new(Current {
            config: loaded,
            store: Arc::new(store),
            engine,
            group: group.clone(),
        })),
        dump_tx,
        timing_tx,
        events: events_tx,
        started: Instant::now(),
        socket_path: socket_path.clone(),
        last_dump: Mutex::new(None),
        dumps: AtomicU64::new(0),
        shutting_down: AtomicBool::new(false),
        shutdown_tx,
        reload_lock: tokio::sync::Mutex::new(()),
        set_log_level,
    });

    let dump_task = {
        let st = state.clone();
        tokio::spawn(triggers::run(
            dump_rx,
            timing_rx,
            state.shutdown_signal(),
            move |spec| st.clone().execute_dump(spec),
        ))
    };
    let loss_task = tokio::spawn(watch_losses(state.clone()));
    let signals = spawn_signal_handlers(state.clone())?;

    let server = api::serve(state.clone(), listener, connections);
    tokio::pin!(server);
    tracing::info!(socket = %socket_path.display(), "listening");
    notify(sd_notify::NotifyState::Ready);

    let mut stop = state.shutdown_signal();
    let served = tokio::select! {
        r = &mut server => Some(r),
        _ = stopped(&mut stop) => None,
    };
    let server_done = match served {
        Some(Err(e)) => return Err(DaemonError::Serve(e)),
        Some(Ok(())) => true,
        None => false,
    };
    notify(sd_notify::NotifyState::Stopping);
    // The dump under way finishes (its callers get their answer) first.
    if let Err(e) = dump_task.await {
        tracing::error!("the dump task failed: {e}");
    }
    if !server_done {
        match tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("server error while shutting down: {e}"),
            Err(_) => tracing::info!(
                "connections still open after {}s are closed",
                SHUTDOWN_GRACE.as_secs()
            ),
        }
    }
    loss_task.abort();
    signals.abort();
    api::remove_socket(&socket_path);
    tracing::info!("stopped");
    Ok(())
}

/// Resolves once `stop` turns true (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Starts a clean shutdown (SIGTERM/SIGINT).
pub fn begin_shutdown(state: &State, why: &str) {
    if !state.shutting_down.swap(true, Ordering::SeqCst) {
        tracing::info!("{why}: shutting down");
        state.shutdown_tx.send_replace(true);
    }
}

fn spawn_signal_handlers(state: Arc<State>) -> Result<tokio::task::JoinHandle<()>, DaemonError> {
    let sig = |kind, name| {
        signal(kind).map_err(|source| DaemonError::Signal {
            signal: name,
            source,
        })
    };
    let mut usr2 = sig(SignalKind::user_defined2(), "SIGUSR2")?;
    let mut hup = sig(SignalKind::hangup(), "SIGHUP")?;
    let mut term = sig(SignalKind::terminate(), "SIGTERM")?;
    let mut int = sig(SignalKind::interrupt(), "SIGINT")?;
    Ok(tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = usr2.recv() => {
                    tracing::debug!("SIGUSR2: dump requested");
                    // Nobody waits on a signal's dump; the log and Watch
                    // report its result.
                    drop(state.request_dump(TriggerKind::Signal, None, false));
                }
                _ = hup.recv() => {
                    let st = state.clone();
                    tokio::spawn(async move {
                        notify_reloading();
                        let _ = st.reload().await;
                        notify(sd_notify::NotifyState::Ready);
                    });
                }
                _ = term.recv() => begin_shutdown(&state, "SIGTERM"),
                _ = int.recv() => begin_shutdown(&state, "SIGINT"),
            }
        }
    }))
}

/// Every second, compares the recorder's loss counters with the last ones
/// and reports growth (log + Watch).
async fn watch_losses(state: Arc<State>) {
    let mut last: Option<(usize, EngineStatus)> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let cur = state.current();
        // A re-opened recorder starts its counters again.
        let id = Arc::as_ptr(&cur.engine) as *const () as usize;
        let engine = cur.engine.clone();
        let Ok(status) = tokio::task::spawn_blocking(move || engine.status()).await else {
            continue;
        };
        if let Some((prev_id, prev)) = &last
            && *prev_id == id
        {
            for loss in loss_growth(prev, &status) {
                if loss.ring == "tracking" {
                    tracing::warn!(
                        cpu = loss.cpu,
                        lost = loss.lost,
                        total = loss.total,
                        "tracking records lost: snapshots may miss process names or maps"
                    );
                } else {
                    tracing::info!(
                        cpu = loss.cpu,
                        lost = loss.lost,
                        total = loss.total,
                        "samples lost while a capture paused the ring"
                    );
                }
                state.publish(pb::watch_event::Kind::Loss(loss));
            }
        }
        last = Some((id, status));
    }
}

/// Loss counters that grew between two status readings, per CPU and ring.
pub fn loss_growth(prev: &EngineStatus, now: &EngineStatus) -> Vec<pb::LossDetected> {
    let mut out = Vec::new();
    for &(cpu, lost, lost_tracking) in &now.cpus {
        let (p_lost, p_tracking) = prev
            .cpus
            .iter()
            .find(|c| c.0 == cpu)
            .map_or((0, 0), |c| (c.1, c.2));
        for (ring, total, before) in [
            ("samples", lost, p_lost),
            ("tracking", lost_tracking, p_tracking),
        ] {
            if total > before {
                out.push(pb::LossDetected {
                    cpu,
                    ring: ring.into(),
                    lost: total - before,
                    total,
                });
            }
        }
    }
    out
}

/// The daemon's own config path for messages.
pub fn describe_source(loaded: &LoadedConfig) -> String {
    loaded.path.as_deref().map_or_else(
        || "built-in defaults".to_string(),
        |p: &Path| p.display().to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(text: &str) -> LoadedConfig {
        LoadedConfig::parse(text, Path::new("/etc/f.toml")).unwrap()
    }

    #[test]
    fn a_missing_group_is_an_error_only_when_written_in_the_file() {
        let named = loaded("[daemon]\nsocket_group = \"no-such-group-zz\"\n");
        let err = resolve_group(&named).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "/etc/f.toml:2:16: daemon.socket_group: group \"no-such-group-zz\" does not exist"
            ),
            "{err}"
        );
        let mut defaults = LoadedConfig::defaults();
        if let Some(g) = defaults.config.daemon.socket_group.as_mut() {
            *g = flightrec_config::Spanned::new(0..0, "no-such-group-zz".to_string());
        }
        assert!(resolve_group(&defaults).unwrap().is_none());
        let root = loaded("[daemon]\nsocket_group = \"root\"\n");
        assert_eq!(resolve_group(&root).unwrap().map(|g| g.1.as_raw()), Some(0));
        assert!(resolve_group(&loaded("[daemon]\n")).is_ok());
    }

    #[test]
    fn an_empty_socket_group_means_none_and_a_missing_default_prints_as_empty() {
        assert!(
            resolve_group(&loaded("[daemon]\nsocket_group = \"\"\n"))
                .unwrap()
                .is_none()
        );
        let mut defaults = LoadedConfig::defaults();
        defaults.config.daemon.socket_group = Some(flightrec_config::Spanned::new(
            0..0,
            "no-such-group-zz".to_string(),
        ));
        let group = resolve_group(&defaults).unwrap();
        let printed = effective_config(&defaults.config, group.as_ref()).to_toml();
        assert!(printed.contains("socket_group = \"\"\n"), "{printed}");
        let back = loaded(&printed);
        assert!(resolve_group(&back).unwrap().is_none());
        let root = loaded("[daemon]\nsocket_group = \"root\"\n");
        let group = resolve_group(&root).unwrap();
        let printed = effective_config(&root.config, group.as_ref()).to_toml();
        assert!(printed.contains("socket_group = \"root\"\n"), "{printed}");
    }

    #[test]
    fn paths_under_a_file_cannot_be_created() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"").unwrap();
        assert_eq!(
            check_creatable(&file, true).unwrap_err(),
            format!(
                "{:?} exists and is not a directory",
                file.display().to_string()
            )
        );
        let under = file.join("a/b");
        assert_eq!(
            check_creatable(&under, true).unwrap_err(),
            format!(
                "{:?} cannot be created: {:?} is not a directory",
                under.display().to_string(),
                file.display().to_string()
            )
        );
        assert!(check_creatable(&dir.path().join("new/dir"), true).is_ok());
        assert!(check_creatable(dir.path(), true).is_ok());
    }

    #[test]
    fn an_absent_default_file_means_defaults_but_an_explicit_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.toml");
        let implicit = ConfigSource {
            path: missing.clone(),
            explicit: false,
        };
        let l = implicit.load().unwrap();
        assert!(l.path.is_none());
        assert_eq!(l.config, Config::default());
        let explicit = ConfigSource {
            path: missing,
            explicit: true,
        };
        assert!(matches!(explicit.load(), Err(ConfigError::Read { .. })));
    }

    #[test]
    fn engine_errors_naming_an_event_point_at_it() {
        let l = loaded("[[event]]\nname = \"cpu-clock\"\n\n[[event]]\nname = \"sched:nope\"\n");
        let e = EngineError::Start {
            message: "tracepoint 'sched:nope' does not exist".into(),
            event: Some(1),
        };
        assert_eq!(
            engine_error_in_config(&l, e).to_string(),
            "/etc/f.toml:5:8: tracepoint 'sched:nope' does not exist"
        );
    }

    #[test]
    fn loss_growth_reports_what_grew_per_cpu_and_ring() {
        let prev = EngineStatus {
            cpus: vec![(0, 5, 0), (1, 0, 2)],
            ..Default::default()
        };
        let now = EngineStatus {
            cpus: vec![(0, 5, 1), (1, 7, 2), (2, 3, 0)],
            ..Default::default()
        };
        let got: Vec<(u32, String, u64, u64)> = loss_growth(&prev, &now)
            .into_iter()
            .map(|l| (l.cpu, l.ring, l.lost, l.total))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, "tracking".to_string(), 1, 1),
                (1, "samples".to_string(), 7, 7),
                (2, "samples".to_string(), 3, 3),
            ]
        );
        assert!(loss_growth(&now, &now).is_empty());
    }

    #[test]
    fn retention_from_config_treats_zero_as_no_limit() {
        let c = loaded("[retention]\nmax_snapshots = 0\nmax_bytes = \"1MiB\"\nmax_age = \"0s\"\n");
        let p = retention_of(&c.config);
        assert_eq!(p.max_snapshots, None);
        assert_eq!(p.max_bytes, Some(1 << 20));
        assert_eq!(p.max_age, None);
    }
}
