//! The daemon: start-up, wiring and shutdown. `main.rs` parses the command
//! line and calls [`run`], which opens the store and the recorder, binds
//! the socket, starts the dump task, the loss watcher, the signal thread
//! and the API server, and tears them down in order on SIGTERM/SIGINT.

pub mod cli;
mod logging;
mod notify;
mod watchdog;

use std::sync::Arc;
use std::time::Duration;

use flightrec_config::{ConfigError, LoadedConfig};

use crate::api;
use crate::control::conditions::open_conditions;
use crate::control::config::{
    ConfigSource, OpenError, check_paths, host_name, log_removed_temps, resolve_group,
    start_recorder,
};
use crate::control::{self, Control, Current};
use crate::store::{Store, StoreError};
use crate::triggers::signals::{self, SignalRequest};
pub use logging::init_logging;
use notify::{notify, notify_reloading};

/// How long connections get to finish after SIGTERM before they are cut.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Why the daemon could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Recorder(#[from] OpenError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Socket(#[from] api::socket::SocketError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("the recorder's start-up thread failed: {0}")]
    StartThread(#[source] tokio::task::JoinError),
    #[error("cannot start the signal thread: {0}")]
    Signals(#[source] std::io::Error),
    #[error("cannot start the history: {0}")]
    History(#[source] std::io::Error),
    #[error("cannot start the dump thread: {0}")]
    DumpThread(#[source] std::io::Error),
    #[error("the gRPC server failed: {0}")]
    Serve(#[source] tonic::transport::Error),
}

impl DaemonError {
    /// 2 for a config problem (as `--check-config`; the unit's
    /// RestartPreventExitStatus=2 relies on it), 1 otherwise. A directory
    /// the config names that cannot be created is a config problem.
    pub fn exit_code(&self) -> i32 {
        use api::socket::SocketError;
        match self {
            DaemonError::Config(_)
            | DaemonError::Recorder(OpenError::Config(_))
            | DaemonError::Store(StoreError::CreateDir { .. })
            | DaemonError::Socket(SocketError::NotASocket { .. } | SocketError::CreateDir { .. }) => {
                2
            }
            _ => 1,
        }
    }
}

/// Under the packaged unit (ProtectSystem=strict) every path but
/// /var/lib/flightrec, /run/flightrec and /sys/fs/cgroup is read-only to
/// the daemon: a start that failed on a read-only file system under systemd
/// says how to allow another one. None for any other failure.
pub fn read_only_hint(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cause = Some(error);
    let mut read_only = false;
    while let Some(e) = cause {
        read_only |= e
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ReadOnlyFilesystem)
            || e.to_string().contains("Read-only file system");
        cause = e.source();
    }
    // systemd sets INVOCATION_ID for every service it starts.
    (read_only && std::env::var_os("INVOCATION_ID").is_some()).then(|| {
        "the flightrecd unit (ProtectSystem=strict) lets the daemon write only \
         /var/lib/flightrec, /run/flightrec and /sys/fs/cgroup: allow another path with \
         `systemctl edit flightrecd`, adding ReadWritePaths=PATH under [Service] (a \
         directory must exist first)"
            .to_string()
    })
}

/// Runs the daemon until SIGTERM/SIGINT. `loaded` is the config already
/// read by the caller.
pub fn run(source: ConfigSource, loaded: LoadedConfig) -> Result<(), DaemonError> {
    // Before any thread starts: they all inherit the mask, and only the
    // signal thread takes the signals (at realtime priority).
    signals::block_in_this_thread().map_err(DaemonError::Signals)?;
    let set_log_level = init_logging(loaded.config.daemon.log_level.get_ref());
    match &loaded.path {
        Some(p) => tracing::info!(config = %p.display(), "config loaded"),
        None => tracing::info!(
            "no config file at {}; running on built-in defaults",
            source.path.display()
        ),
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(runtime_workers(std::env::var("TOKIO_WORKER_THREADS").ok()))
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    rt.block_on(serve(source, loaded, set_log_level))
}

/// Async workers: two (the API, the fleet and the upload queue need no
/// more: their file and database work runs on blocking threads), or what
/// tokio's own `TOKIO_WORKER_THREADS` says.
fn runtime_workers(setting: Option<String>) -> usize {
    match setting.map(|s| s.trim().parse::<usize>()) {
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            tracing::warn!("TOKIO_WORKER_THREADS is not a positive number; using 2 workers");
            2
        }
        None => 2,
    }
}

/// What the signal thread does with each request.
fn on_signal(state: &Arc<Control>, runtime: &tokio::runtime::Handle, request: SignalRequest) {
    match request {
        SignalRequest::Dump => {
            tracing::debug!("SIGUSR2: dump requested");
            state.signal_dump();
        }
        SignalRequest::Reload => {
            let st = state.clone();
            runtime.spawn(async move {
                notify_reloading();
                let _ = st.reload().await;
                notify(sd_notify::NotifyState::Ready);
            });
        }
        SignalRequest::Shutdown(name) => state.begin_shutdown(name),
    }
}

/// What start-up opens before anything runs.
struct Opened {
    current: Current,
    conditions: crate::triggers::conditions::Opened,
    listener: tokio::net::UnixListener,
    connections: Arc<api::Connections>,
    socket_path: std::path::PathBuf,
}

/// Opens the store, the recorder (rings, tracking), the condition
/// triggers and the API socket, in the order that fails cheapest first.
async fn open(loaded: LoadedConfig) -> Result<Opened, DaemonError> {
    let group = resolve_group(&loaded)?;
    check_paths(&loaded, group.as_ref())?;
    let cfg = &loaded.config;
    let (store, removed) = Store::open(&cfg.daemon.output_dir, &host_name())?;
    log_removed_temps(&removed);
    store.set_group(group.as_ref().map(|g| g.1))?;
    // Queued from the first dump on, whether NATS is up yet or not.
    if let Some(fleet) = &cfg.fleet {
        store.set_upload_destinations(crate::fleet::upload::destinations(fleet.get_ref()));
    }
    let socket_path = cfg.daemon.socket.clone();
    // Refuse early if another daemon owns the socket, before opening rings.
    api::socket::check_socket_free(&socket_path).await?;
    let l2 = loaded.clone();
    let recorder = tokio::task::spawn_blocking(move || start_recorder(&l2))
        .await
        .map_err(DaemonError::StartThread)??;
    let l2 = loaded.clone();
    let conditions = tokio::task::spawn_blocking(move || open_conditions(&l2))
        .await
        .map_err(DaemonError::StartThread)??;
    let events: Vec<&str> = recorder
        .event_info()
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    tracing::info!(
        events = %events.join(", "),
        ring = %cfg.buffers.per_cpu.get_ref(),
        output_dir = %cfg.daemon.output_dir.display(),
        "recording"
    );
    let listener = api::socket::bind_socket(&socket_path, group.as_ref().map(|g| g.1)).await?;
    // Idle clients must never take the descriptors a dump needs: raise the
    // soft limit, then cap connections below it with a reserve for dumps.
    let fd_limit = api::raise_fd_limit();
    let limits = api::ConnectionLimits::from_fd_limit(fd_limit, api::open_fds());
    tracing::debug!(fd_limit, max_connections = limits.max, "API connection cap");
    let connections = api::Connections::new(limits);

    Ok(Opened {
        current: Current {
            config: loaded,
            store: Arc::new(store),
            recorder: Arc::new(recorder),
            group,
        },
        conditions,
        listener,
        connections,
        socket_path,
    })
}

async fn serve(
    source: ConfigSource,
    loaded: LoadedConfig,
    set_log_level: Box<dyn Fn(&str) + Send + Sync>,
) -> Result<(), DaemonError> {
    let Opened {
        current,
        conditions,
        listener,
        connections,
        socket_path,
    } = open(loaded).await?;
    let (state, dump_threads) = Control::start(source, current, socket_path.clone(), set_log_level)
        .map_err(DaemonError::DumpThread)?;
    state.start_conditions(conditions)?;
    state.start_history().map_err(DaemonError::History)?;
    let fleet_task = state
        .live
        .current()
        .config
        .config
        .fleet
        .as_ref()
        .map(|f| tokio::spawn(crate::fleet::run(state.clone(), f.get_ref().clone())));
    let loss_task = tokio::spawn(control::loss::watch_losses(state.clone()));
    let signal_thread = {
        let st = state.clone();
        let runtime = tokio::runtime::Handle::current();
        let priority = *st
            .live
            .current()
            .config
            .config
            .snapshot
            .realtime_priority
            .get_ref();
        signals::spawn(priority, move |request| on_signal(&st, &runtime, request))
            .map_err(DaemonError::Signals)?
    };

    let server = api::serve(state.clone(), listener, connections);
    tokio::pin!(server);
    tracing::info!(socket = %socket_path.display(), "listening");
    notify(sd_notify::NotifyState::Ready);
    // Only a service manager reads STATUS= (started by hand, no listing).
    let status_task = std::env::var_os("NOTIFY_SOCKET")
        .is_some()
        .then(|| tokio::spawn(notify::keep_status(state.clone())));
    let watchdog_task = sd_notify::watchdog_enabled().map(|limit| {
        tracing::info!(
            "systemd watchdog: WATCHDOG=1 every {}s while the dump thread, the tracking drain \
             and the API answer",
            (limit / 2).as_secs_f64()
        );
        tokio::spawn(watchdog::run(state.clone(), limit))
    });

    let mut stop = state.lifecycle.shutdown_signal();
    let served = tokio::select! {
        r = &mut server => Some(r),
        _ = control::stopped(&mut stop) => None,
    };
    let server_done = match served {
        Some(Err(e)) => return Err(DaemonError::Serve(e)),
        Some(Ok(())) => true,
        None => false,
    };
    notify(sd_notify::NotifyState::Stopping);
    if let Some(t) = watchdog_task {
        t.abort();
    }
    if let Some(t) = status_task {
        t.abort();
    }
    // The dump under way finishes (its callers get their answer) first.
    dump_threads.join().await;
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
    if let Some(t) = fleet_task {
        t.abort();
    }
    drop(signal_thread);
    api::socket::remove_socket(&socket_path);
    tracing::info!("stopped");
    Ok(())
}
