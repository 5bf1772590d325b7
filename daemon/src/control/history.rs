//! Starting the history writer: once, after the parts exist (it asks for
//! the recorder of the moment), its failures on Watch.

use std::sync::Arc;

use super::Control;
use crate::events::Event;
use crate::history::{History, HistorySettings, HistorySources};

impl Control {
    /// Starts the history writer when `[history]` is on. Changes to
    /// `[history]` take effect at the next start.
    pub fn start_history(self: &Arc<Self>) -> std::io::Result<()> {
        let cur = self.live.current();
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
            writer_nice: *h.writer_nice.get_ref(),
        };
        let live = Arc::downgrade(&self.live);
        let events = self.events.clone();
        let sources = HistorySources {
            recorder: Arc::new(move || live.upgrade().map(|l| l.current().recorder.clone())),
            on_failure: Box::new(move |reason| events.publish(Event::HistoryStopped { reason })),
        };
        tracing::info!(
            dir = %settings.dir.display(),
            max_age = %humantime::format_duration(settings.max_age),
            max_bytes = settings.max_bytes,
            "history: streaming every CPU's records to disk"
        );
        let history = History::start(settings, sources)?;
        let _ = self.history.set(Arc::new(history));
        Ok(())
    }
}
