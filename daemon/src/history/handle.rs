//! The running history as the daemon holds it: start, flush, status.

use std::io;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::disk::create_dir;
use super::drain::DrainThread;
use super::queue::DrainQueue;
use super::retention::SegmentInfo;
use super::shared::{HistorySources, Shared, Wake, boot_id, lock};
use super::status::{HistorySettings, HistoryStatus, Index};
use super::writer::Writer;

/// The running history: dropping it stops and joins the drain, then the
/// writer (whose last round drains the rings once more).
pub struct History {
    shared: Arc<Shared>,
    drain: Option<DrainThread>,
    thread: Option<JoinHandle<()>>,
}

impl History {
    /// Creates the directory if needed, indexes the segments already there
    /// (those of another boot, and empty ones, are removed) and starts the
    /// writer.
    pub fn start(settings: HistorySettings, sources: HistorySources) -> io::Result<Self> {
        create_dir(&settings.dir, settings.group)?;
        let owner = nix::unistd::geteuid().as_raw();
        flightrec_files::dirs::check_owner_only(&settings.dir, owner).map_err(|e| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{e}; the daemon reads its segments back, so only it may write there"),
            )
        })?;
        let boot_id = boot_id();
        let closed = super::read::index_dir(&settings.dir, &boot_id)?;
        let mut index = Index {
            closed,
            current: None,
            status: HistoryStatus {
                dir: settings.dir.clone(),
                max_bytes: settings.max_bytes,
                max_age: settings.max_age,
                ..HistoryStatus::default()
            },
        };
        index.refresh();
        let shared = Arc::new(Shared {
            settings,
            boot_id,
            index: Mutex::new(index),
            wake: Mutex::new(Wake::default()),
            woken: Condvar::new(),
            drained: Mutex::new(DrainQueue::default()),
            unwinder: Mutex::new(None),
        });
        let drain = DrainThread::spawn(Arc::clone(&shared), Arc::clone(&sources.recorder))?;
        let s2 = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("history-writer".into())
            .spawn(move || Writer::new(s2, sources).run())?;
        Ok(History {
            shared,
            drain: Some(drain),
            thread: Some(thread),
        })
    }

    /// Writes everything recorded so far, waiting at most `timeout`.
    /// Returns whether it was done in time.
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut wake = lock(&self.shared.wake);
        wake.flush_asked += 1;
        let asked = wake.flush_asked;
        self.shared.woken.notify_all();
        while wake.flushed < asked && !wake.stop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            wake = self
                .shared
                .woken
                .wait_timeout(wake, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    pub fn status(&self) -> HistoryStatus {
        lock(&self.shared.index).status.clone()
    }

    /// The segments on disk now, oldest first.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        lock(&self.shared.index).all()
    }

    pub fn boot_id(&self) -> &str {
        &self.shared.boot_id
    }
}

impl Drop for History {
    fn drop(&mut self) {
        drop(self.drain.take());
        lock(&self.shared.wake).stop = true;
        self.shared.woken.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
