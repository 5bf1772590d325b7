//! Reload (SIGHUP and the `Reload` RPC): re-read the config, keep the
//! running one if the new one is bad, apply what changed.

use std::sync::Arc;

use flightrec_config::ConfigError;

use super::access::{SocketGroupError, set_socket_group};
use super::conditions::open_conditions;
use super::config::{
    OpenError, check_paths, host_name, log_removed_temps, resolve_group, retention_of,
    start_recorder, timing_of,
};
use super::{Control, Current};
use crate::dump::apply_retention;
use crate::perf::sched::pin_freeze_workers;
use crate::store::{Store, StoreError};

/// Why a new config was not applied (the running one is kept).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Recorder(#[from] OpenError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    SocketGroup(#[from] SocketGroupError),
    #[error("the reload thread failed: {0}")]
    Thread(#[from] tokio::task::JoinError),
    #[error("flightrecd is shutting down")]
    ShuttingDown,
}

/// What a reload changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    pub changed: bool,
    /// "no change", or "changed: ..." naming what.
    pub summary: String,
}

impl Control {
    /// Re-reads the config (SIGHUP and `Reload`). A bad config is rejected
    /// and the running one kept.
    pub async fn reload(self: &Arc<Self>) -> Result<Reloaded, ReloadError> {
        if self.lifecycle.is_shutting_down() {
            return Err(ReloadError::ShuttingDown);
        }
        let _guard = self.live.reload_lock.lock().await;
        let result = self.reload_locked().await;
        match &result {
            Ok(r) => tracing::info!("config reloaded: {}", r.summary),
            Err(e) => tracing::error!("config reload rejected, keeping the running config: {e}"),
        }
        result
    }

    async fn reload_locked(self: &Arc<Self>) -> Result<Reloaded, ReloadError> {
        let source = self.live.source.clone();
        let loaded = tokio::task::spawn_blocking(move || source.load()).await??;
        let group = resolve_group(&loaded)?;
        check_paths(&loaded, group.as_ref())?;
        let old = self.live.current();
        let mut loaded = loaded;
        let history_changed = old.config.config.history != loaded.config.history;
        if history_changed {
            tracing::warn!("[history] changed; it takes effect at the next restart");
            // The running history and the rings it drains stay as they are.
            loaded.config.history = old.config.config.history.clone();
        }
        let (o, n) = (&old.config.config, &loaded.config);
        let mut changes = Vec::new();
        if history_changed {
            changes.push("history (at next restart)".to_string());
        }
        if o.daemon.socket != n.daemon.socket {
            tracing::warn!(
                "daemon.socket changed to {}; it takes effect at the next restart",
                n.daemon.socket.display()
            );
            changes.push("socket (at next restart)".to_string());
        }
        if o.fleet != n.fleet {
            tracing::warn!("[fleet] changed; it takes effect at the next restart");
            changes.push("fleet (at next restart)".to_string());
        }
        if group.as_ref().map(|g| g.1) != old.group.as_ref().map(|g| g.1) {
            set_socket_group(&self.socket_path, group.as_ref().map(|g| g.1))?;
            changes.push("socket_group".into());
        }
        let store = if o.daemon.output_dir != n.daemon.output_dir {
            let (store, removed) = Store::open(&n.daemon.output_dir, &host_name())?;
            log_removed_temps(&removed);
            // [fleet] changes at restart only: the same destinations.
            store.set_upload_destinations(old.store.upload_destinations());
            changes.push("output_dir".into());
            Arc::new(store)
        } else {
            old.store.clone()
        };
        let recorder = if o.buffers != n.buffers || o.events != n.events {
            let l2 = loaded.clone();
            let recorder = tokio::task::spawn_blocking(move || start_recorder(&l2)).await??;
            changes.push("rings and events (recorder re-opened)".into());
            Arc::new(recorder)
        } else {
            old.recorder.clone()
        };
        let gid = group.as_ref().map(|g| g.1);
        if !Arc::ptr_eq(&store, &old.store) || gid != old.group.as_ref().map(|g| g.1) {
            store.set_group(gid)?;
        }
        if o.daemon.log_level != n.daemon.log_level {
            (self.set_log_level)(n.daemon.log_level.get_ref());
            changes.push("log_level".into());
        }
        let restart_conditions = o.triggers != n.triggers
            || o.snapshot.realtime_priority != n.snapshot.realtime_priority;
        let conditions = if restart_conditions {
            let l2 = loaded.clone();
            let opened = tokio::task::spawn_blocking(move || open_conditions(&l2)).await??;
            if o.triggers != n.triggers {
                changes.push("triggers".into());
            }
            Some(opened)
        } else {
            None
        };
        if o.snapshot != n.snapshot {
            self.dumps.set_timing(timing_of(n));
            if o.snapshot.realtime_priority != n.snapshot.realtime_priority {
                pin_freeze_workers(*n.snapshot.realtime_priority.get_ref());
            }
            changes.push("snapshot".into());
        }
        let retention_changed = o.retention != n.retention;
        if retention_changed {
            changes.push("retention".into());
        }
        let changed = !changes.is_empty();
        self.live.replace(Current {
            config: loaded,
            store,
            recorder,
            group,
        });
        if let Some(opened) = conditions {
            self.start_conditions(opened)?;
        }
        if retention_changed {
            let cur = self.live.current();
            let policy = retention_of(&cur.config.config);
            apply_retention(&cur.store, &self.events, &policy, None)?;
        }
        let summary = if changed {
            format!("changed: {}", changes.join(", "))
        } else {
            "no change".into()
        };
        Ok(Reloaded { changed, summary })
    }
}
