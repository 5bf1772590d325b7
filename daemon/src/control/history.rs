//! The history writer as the control plane runs it: started once after
//! the state exists (it asks the state for the recorder of the moment),
//! its failures on Watch, its status, and the dumps it serves.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{Event, State};
use crate::history::{
    History, HistorySettings, HistorySources, HistoryStatus, capture_from_history, read_window,
};
use crate::recorder::Capture;

/// How long a dump waits for the writer to put what is pending on disk.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

impl State {
    /// Starts the history writer when `[history]` is on. Changes to
    /// `[history]` take effect at the next start.
    pub fn start_history(self: &Arc<Self>) -> std::io::Result<()> {
        let cur = self.current();
        let h = &cur.config.config.history;
        if !h.enabled {
            return Ok(());
        }
        let settings = HistorySettings {
            dir: h.dir.clone(),
            max_age: h.max_age.get_ref().get(),
            max_bytes: h.max_bytes.get_ref().bytes(),
            level: *h.level.get_ref(),
            group: cur.group.as_ref().map(|g| g.1.as_raw()),
        };
        let weak: Weak<State> = Arc::downgrade(self);
        let weak2 = weak.clone();
        let sources = HistorySources {
            recorder: Box::new(move || weak.upgrade().map(|s| s.current().recorder.clone())),
            on_failure: Box::new(move |reason| {
                if let Some(s) = weak2.upgrade() {
                    s.publish(Event::HistoryStopped { reason });
                }
            }),
        };
        tracing::info!(
            dir = %settings.dir.display(),
            max_age = %humantime::format_duration(settings.max_age),
            max_bytes = settings.max_bytes,
            "history: streaming every CPU's records to disk"
        );
        let history = History::start(settings, sources)?;
        let _ = self.history.set(history);
        Ok(())
    }

    /// The history's status (None with `[history]` off).
    pub fn history_status(&self) -> Option<HistoryStatus> {
        self.history.get().map(History::status)
    }

    /// The history writer (None with `[history]` off).
    pub fn history(&self) -> Option<&History> {
        self.history.get()
    }
}

/// `capture` (of the rings) with the records of `[start_ns, end_ns]` from
/// the history instead, when the history reaches back further than the
/// rings do; `capture` as it is otherwise.
pub(super) fn widen_with_history(
    history: Option<&History>,
    capture: Capture,
    start_ns: u64,
    end_ns: u64,
) -> Capture {
    let Some(history) = history else {
        return capture;
    };
    if capture.held_from_ns != 0 && start_ns >= capture.held_from_ns {
        return capture;
    }
    if !history.flush(FLUSH_WAIT) {
        tracing::warn!(
            "the history writer did not answer within {}s: the window is cut from what it \
             wrote so far",
            FLUSH_WAIT.as_secs()
        );
    }
    let window = match read_window(&history.segments(), history.boot_id(), start_ns, end_ns) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!("reading the history failed, the dump holds what the rings hold: {e}");
            return capture;
        }
    };
    let reaches_further = window
        .held_from_ns
        .is_some_and(|h| capture.held_from_ns == 0 || h < capture.held_from_ns);
    if !reaches_further {
        return capture;
    }
    if window.bad_frames > 0 {
        tracing::warn!(
            frames = window.bad_frames,
            "history frames that failed their checksum were left out of the window"
        );
    }
    capture_from_history(capture, window, start_ns, end_ns)
}
