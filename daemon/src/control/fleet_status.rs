//! The fleet connection as `Status` reports it: written by the fleet task
//! (a client of the control plane, as the API is), read by `Status`.

use std::sync::Mutex;
use std::time::SystemTime;

use crate::store::unix_ns;

/// The fleet connection as `Status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FleetReport {
    /// "connecting", "connected", "disconnected" or "stopped" (a setting
    /// the daemon cannot use: see `last_error`).
    pub state: &'static str,
    pub host: String,
    pub servers: Vec<String>,
    /// "" when nothing went wrong yet.
    pub last_error: String,
    pub last_error_unix_ns: i64,
    /// Dump requests this host was selected by.
    pub requests: u64,
    /// Requests refused as malformed.
    pub bad_requests: u64,
    /// Replies sent with a snapshot.
    pub dumps: u64,
    pub bucket: String,
    /// "jetstream", "s3"; empty with `upload = false`.
    pub upload_destinations: Vec<String>,
    pub uploads_pending: u32,
    pub uploaded: u64,
    pub upload_failures: u64,
    pub last_upload_error: String,
    pub last_upload_unix_ns: i64,
}

/// Shared between the connection task, its event callback and `Status`;
/// None without `[fleet]`.
#[derive(Debug, Default)]
pub struct FleetStatus {
    report: Mutex<Option<FleetReport>>,
    /// Wakes the uploader: a snapshot was written.
    uploads: tokio::sync::Notify,
}

impl FleetStatus {
    /// A snapshot was written: the uploader looks at the queue now.
    pub fn wake_uploads(&self) {
        self.uploads.notify_one();
    }

    /// Resolves at the next [`FleetStatus::wake_uploads`] (or at once if
    /// one came since the last wait).
    pub async fn uploads_woken(&self) {
        self.uploads.notified().await;
    }

    pub fn report(&self) -> Option<FleetReport> {
        self.lock().clone()
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Option<FleetReport>> {
        self.report.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn update(&self, f: impl FnOnce(&mut FleetReport)) {
        if let Some(r) = self.lock().as_mut() {
            f(r);
        }
    }

    pub(crate) fn set_state(&self, state: &'static str) {
        self.update(|r| r.state = state);
    }

    pub(crate) fn set_error(&self, error: String) {
        tracing::warn!("fleet: {error}");
        self.update(|r| {
            r.last_error = error;
            r.last_error_unix_ns = unix_ns(SystemTime::now());
        });
    }
}
