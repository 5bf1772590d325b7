//! Reload (SIGHUP and the `Reload` RPC): re-read the config, keep the
//! running one if the new one is bad, apply what changed.

use std::sync::Arc;

use super::{
    Current, State, check_paths, host_name, log_removed_temps, resolve_group, retention_of,
    start_engine, timing_of,
};
use crate::api;
use crate::store::Store;

impl State {
    /// Re-reads the config (SIGHUP and `Reload`). A bad config is rejected
    /// and the running one kept. Returns (changed, summary).
    pub async fn reload(self: &Arc<Self>) -> Result<(bool, String), String> {
        let _guard = self.reload_lock.lock().await;
        let result = self.reload_locked().await;
        match &result {
            Ok((_, summary)) => tracing::info!("config reloaded: {summary}"),
            Err(e) => tracing::error!("config reload rejected, keeping the running config: {e}"),
        }
        result
    }

    async fn reload_locked(self: &Arc<Self>) -> Result<(bool, String), String> {
        let source = self.source.clone();
        let loaded = tokio::task::spawn_blocking(move || source.load())
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        let group = resolve_group(&loaded).map_err(|e| e.to_string())?;
        check_paths(&loaded).map_err(|e| e.to_string())?;
        let old = self.current();
        let (o, n) = (&old.config.config, &loaded.config);
        let mut changes = Vec::new();
        if o.daemon.socket != n.daemon.socket {
            tracing::warn!(
                "daemon.socket changed to {}; it takes effect at the next restart",
                n.daemon.socket.display()
            );
            changes.push("socket (at next restart)".to_string());
        }
        if group.as_ref().map(|g| g.1) != old.group.as_ref().map(|g| g.1) {
            api::set_socket_group(&self.socket_path, group.as_ref().map(|g| g.1))
                .map_err(|e| e.to_string())?;
            changes.push("socket_group".into());
        }
        let store = if o.daemon.output_dir != n.daemon.output_dir {
            let (store, removed) =
                Store::open(&n.daemon.output_dir, &host_name()).map_err(|e| e.to_string())?;
            log_removed_temps(&removed);
            changes.push("output_dir".into());
            Arc::new(store)
        } else {
            old.store.clone()
        };
        let engine = if o.buffers != n.buffers || o.events != n.events {
            let l2 = loaded.clone();
            let engine = tokio::task::spawn_blocking(move || start_engine(&l2))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
            changes.push("rings and events (recorder re-opened)".into());
            engine
        } else {
            old.engine.clone()
        };
        let gid = group.as_ref().map(|g| g.1);
        if !Arc::ptr_eq(&store, &old.store) || gid != old.group.as_ref().map(|g| g.1) {
            store.set_group(gid).map_err(|e| e.to_string())?;
        }
        if o.daemon.log_level != n.daemon.log_level {
            (self.set_log_level)(n.daemon.log_level.get_ref());
            changes.push("log_level".into());
        }
        if o.snapshot != n.snapshot {
            self.timing_tx.send_replace(timing_of(n));
            changes.push("snapshot".into());
        }
        let retention_changed = o.retention != n.retention;
        if retention_changed {
            changes.push("retention".into());
        }
        let changed = !changes.is_empty();
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(Current {
            config: loaded,
            store,
            engine,
            group,
        });
        if retention_changed {
            let policy = retention_of(&self.current().config.config);
            self.apply_retention(&policy, None)
                .map_err(|e| e.to_string())?;
        }
        let summary = if changed {
            format!("changed: {}", changes.join(", "))
        } else {
            "no change".into()
        };
        Ok((changed, summary))
    }
}
