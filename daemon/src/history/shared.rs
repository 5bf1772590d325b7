//! What the history's drain, writer and handle share: the settings, the
//! index of segments, the queue between drain and writer, the wakeups,
//! and where the recorder of the moment is found.

use std::sync::{Arc, Condvar, Mutex, PoisonError};

use super::queue::DrainQueue;
use super::status::{HistorySettings, Index};
use super::unwind::StackUnwinder;
use crate::recorder::Recorder;

#[derive(Default)]
pub(super) struct Wake {
    pub(super) stop: bool,
    pub(super) flush_asked: u64,
    pub(super) flushed: u64,
    /// Set by the drain when a write's worth waits in its queue; cleared
    /// by the writer when it takes the queue.
    pub(super) queued: bool,
}

pub(super) struct Shared {
    pub(super) settings: HistorySettings,
    pub(super) boot_id: String,
    pub(super) index: Mutex<Index>,
    pub(super) wake: Mutex<Wake>,
    pub(super) woken: Condvar,
    /// What the drain copied out of the rings for the writer.
    pub(super) drained: Mutex<DrainQueue>,
    /// Made by the writer once an event takes stack copies
    /// (`callchain = "dwarf"`); used by the drain when free (it never
    /// waits for it: the writer holds it while it reads files).
    pub(super) unwinder: Mutex<Option<StackUnwinder>>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where the writer gets the recorder of the moment (a reload may open a
/// new one; None once the daemon is going away) and says that it stopped.
pub struct HistorySources {
    pub recorder: Arc<dyn Fn() -> Option<Arc<Recorder>> + Send + Sync>,
    pub on_failure: Box<dyn Fn(String) + Send>,
}

/// This boot's id: sample times of another boot mean nothing in this one.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}
