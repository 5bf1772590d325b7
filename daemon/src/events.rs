//! What happened, as `Watch` streams it: snapshots written and removed,
//! dumps that failed, losses, triggers, uploads, the history stopping.
//! One bus ([`EventBus`]) every part publishes on; publishing never waits
//! and nobody listening is not an error.

use tokio::sync::broadcast;

use crate::store::SnapshotInfo;
use crate::time::WallTime;

/// What Watch streams, as it happened.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    SnapshotCreated(SnapshotInfo),
    SnapshotRemoved {
        snapshot: SnapshotInfo,
        reason: &'static str,
    },
    DumpFailed {
        error: String,
    },
    Loss(Loss),
    TriggerFired(TriggerFired),
    Uploaded(Uploaded),
    UploadFailed {
        id: String,
        destination: String,
        error: String,
    },
    /// The history stopped writing (it tries again later).
    HistoryStopped {
        reason: String,
    },
}

/// A snapshot reached an upload destination.
#[derive(Debug, Clone, PartialEq)]
pub struct Uploaded {
    pub snapshot: SnapshotInfo,
    /// "jetstream" or "s3".
    pub destination: String,
    /// Where it is: `<bucket>/<host>/<id>.perf.data`, or the S3 URL.
    pub object: String,
    pub seconds: f64,
    /// It was already there (an upload cut short by a restart had in fact
    /// completed): nothing was sent again.
    pub already_there: bool,
}

/// A `[[trigger]]` condition was met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerFired {
    pub name: String,
    pub matched: String,
    /// A dump was queued; false when the rate limit suppressed it.
    pub dumped: bool,
    /// "cooldown" or "max_per_hour" when suppressed, else "".
    pub suppressed_by: &'static str,
    pub times: u64,
}

/// Records a ring lost since the last reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    pub cpu: u32,
    /// "samples" or "tracking".
    pub ring: &'static str,
    pub lost: u64,
    pub total: u64,
}

/// An [`Event`] and when it happened.
#[derive(Debug, Clone, PartialEq)]
pub struct Stamped {
    pub at: WallTime,
    pub event: Event,
}

/// The bus: cloned by every part that publishes.
#[derive(Debug, Clone)]
pub struct EventBus {
    sender: broadcast::Sender<Stamped>,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus {
            sender: broadcast::channel(256).0,
        }
    }
}

impl EventBus {
    /// The events published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Stamped> {
        self.sender.subscribe()
    }

    pub fn publish(&self, event: Event) {
        // No subscriber is not an error.
        let _ = self.sender.send(Stamped {
            at: WallTime::now(),
            event,
        });
    }
}
