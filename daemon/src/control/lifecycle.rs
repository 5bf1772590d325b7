//! The daemon's life: when it started, and whether it is going away.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tokio::sync::watch;

/// Start time and the shutdown every task watches.
pub struct Lifecycle {
    pub started: Instant,
    shutting_down: AtomicBool,
    shutdown_tx: watch::Sender<bool>,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            started: Instant::now(),
            shutting_down: AtomicBool::new(false),
            shutdown_tx: watch::channel(false).0,
        }
    }
}

impl Lifecycle {
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Resolves (see [`stopped`]) once the shutdown began.
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown_tx.subscribe()
    }

    /// Marks the shutdown; true the first time only.
    pub(super) fn begin(&self) -> bool {
        let first = !self.shutting_down.swap(true, Ordering::SeqCst);
        if first {
            self.shutdown_tx.send_replace(true);
        }
        first
    }
}

/// Resolves once `stop` turns true (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
