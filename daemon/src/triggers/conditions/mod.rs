//! Conditions (`[[trigger]]`): one thread watches every configured
//! condition with one poll(2) (tracepoint rings, PSI files, a stop
//! eventfd) and a timeout for the periodic ones (interval, loss), runs each
//! through its [`Gate`] and hands what fired to a sink that queues the
//! dump. The thread runs at the snapshot's realtime priority, so a
//! condition reaches the dump thread without waiting for a CPU.
//!
//! Opening ([`Conditions::open`]) is separate from starting, so a reload
//! can open the new set, and keep the running one if that fails.

mod hits;
mod psi;
mod watch;

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use flightrec_config::{Spanned, TriggerConfig, TriggerOn};
use nix::sys::eventfd::{EfdFlags, EventFd};

use super::gate::{Gate, GateRules, Verdict};
use crate::perf::PerfError;
use crate::perf::condition_ring::ConditionRing;
use crate::perf::event::{EventError, EventKind, EventSpec};
pub use hits::{Hit, Hits, parse_hits};
pub use psi::{PROC_PRESSURE, pressure_path};
use watch::watch;

/// How often losses are read for `on = "loss"` triggers.
const LOSS_PERIOD: Duration = Duration::from_millis(500);
/// A ring that had more than one hit to read is left alone this long: a
/// busy tracepoint (sched_switch as a condition) then costs at most 100
/// wake-ups a second per CPU instead of one per hit, while the first hit
/// after a quiet spell is still seen at once.
const BUSY_SNOOZE: Duration = Duration::from_millis(10);
/// Most hits run through a gate per ring read.
const MAX_HITS_PER_READ: u64 = 1 << 16;

/// A condition that fired (one or more times since the last report).
#[derive(Debug, Clone)]
pub struct Fired {
    pub name: Arc<str>,
    /// What matched, for people: the event and task, the stall, the losses.
    pub matched: String,
    pub verdict: Verdict,
    /// How many firings this report stands for (a burst of hits read at
    /// once is reported once per verdict).
    pub times: u64,
    pub label: String,
    pub compress: Option<bool>,
    pub delay: Option<Duration>,
    /// How far before the firing its snapshot reaches; None: as far as
    /// the rings hold.
    pub before: Option<Duration>,
}

/// Why a trigger could not be armed; `index` is its `[[trigger]]`.
#[derive(Debug, thiserror::Error)]
pub enum ConditionError {
    #[error("trigger {name:?}: {source}")]
    Event {
        index: usize,
        name: String,
        source: EventError,
    },
    #[error("trigger {name:?}: {source}")]
    Perf {
        index: usize,
        name: String,
        source: PerfError,
    },
    #[error("trigger {name:?}: {reason}")]
    Psi {
        index: usize,
        name: String,
        reason: String,
    },
    #[error("cannot start the condition thread: {0}")]
    Thread(std::io::Error),
}

impl ConditionError {
    /// The `[[trigger]]` concerned, if any.
    pub fn trigger_index(&self) -> Option<usize> {
        match self {
            ConditionError::Event { index, .. }
            | ConditionError::Perf { index, .. }
            | ConditionError::Psi { index, .. } => Some(*index),
            ConditionError::Thread(_) => None,
        }
    }
}

enum Source {
    Tracepoint {
        event: String,
        rings: Vec<ConditionRing>,
        /// Per ring: not polled before this (see [`BUSY_SNOOZE`]).
        snoozed: Vec<Option<Instant>>,
    },
    Psi {
        file: std::fs::File,
        path: PathBuf,
        text: String,
        broken: bool,
    },
    Loss {
        last: Option<u64>,
        next: Instant,
    },
    Interval {
        every: Duration,
        next: Instant,
    },
}

struct Watched {
    name: Arc<str>,
    source: Source,
    gate: Gate,
    label: String,
    compress: Option<bool>,
    delay: Option<Duration>,
    before: Option<Duration>,
}

/// The gate rules of `t`: an interval trigger is not rate limited unless
/// it says so (its period is its rate).
fn rules_of(t: &TriggerConfig) -> GateRules {
    let periodic = *t.on.get_ref() == TriggerOn::Interval;
    GateRules {
        count: t.count(),
        window: t.window(),
        cooldown: match (&t.cooldown, periodic) {
            (None, true) => Duration::ZERO,
            _ => t.cooldown(),
        },
        max_per_hour: match (&t.max_per_hour, periodic) {
            (None, true) => 3600,
            _ => t.max_per_hour(),
        },
    }
}

/// Armed conditions, not yet watched.
pub struct Opened {
    watched: Vec<Watched>,
}

impl Opened {
    pub fn is_empty(&self) -> bool {
        self.watched.is_empty()
    }
}

/// Reads the daemon's loss counters (samples and tracking records lost so
/// far), for `on = "loss"`; `None` when they cannot be read now.
pub type LossReader = Box<dyn Fn() -> Option<u64> + Send>;
/// Receives what fired, on the condition thread: must not block.
pub type Sink = Box<dyn Fn(Fired) + Send>;

/// The running condition thread; stopped on drop.
pub struct Conditions {
    stop: Arc<EventFd>,
    thread: Option<JoinHandle<()>>,
}

impl Conditions {
    /// Arms every trigger of `triggers` on `cpus`: opens the tracepoint
    /// events with their filters (the kernel checks them here) and writes
    /// the PSI thresholds. Nothing is watched until [`Conditions::start`].
    pub fn open(
        triggers: &[Spanned<TriggerConfig>],
        cpus: &[u32],
    ) -> Result<Opened, ConditionError> {
        let now = Instant::now();
        let mut watched = Vec::new();
        for (index, t) in triggers.iter().enumerate() {
            let t = t.get_ref();
            let name = t.name.get_ref().clone();
            let source = match *t.on.get_ref() {
                TriggerOn::Tracepoint => {
                    let event = t
                        .event
                        .as_ref()
                        .map(|e| e.get_ref().clone())
                        .unwrap_or_default();
                    let resolved = EventSpec::new(&event).resolve().map_err(|source| {
                        ConditionError::Event {
                            index,
                            name: name.clone(),
                            source,
                        }
                    })?;
                    let EventKind::Tracepoint { id, .. } = resolved.kind else {
                        return Err(ConditionError::Psi {
                            index,
                            name,
                            reason: format!("{event} is not a tracepoint"),
                        });
                    };
                    let filter = t.filter.as_ref().map(|f| f.get_ref().as_str());
                    let rings = cpus
                        .iter()
                        .map(|&cpu| ConditionRing::open(&event, id, filter, cpu))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|source| ConditionError::Perf {
                            index,
                            name: name.clone(),
                            source,
                        })?;
                    let snoozed = vec![None; rings.len()];
                    Source::Tracepoint {
                        event,
                        rings,
                        snoozed,
                    }
                }
                TriggerOn::Psi => {
                    let spec = t.psi_spec().ok_or_else(|| ConditionError::Psi {
                        index,
                        name: name.clone(),
                        reason: "no valid psi value".into(),
                    })?;
                    let cgroup = t.cgroup.as_ref().map(|c| c.get_ref().as_path());
                    let armed = psi::arm(&spec, cgroup).map_err(|reason| ConditionError::Psi {
                        index,
                        name: name.clone(),
                        reason,
                    })?;
                    Source::Psi {
                        file: armed.file,
                        path: armed.path,
                        text: t
                            .psi
                            .as_ref()
                            .map(|p| p.get_ref().clone())
                            .unwrap_or_default(),
                        broken: false,
                    }
                }
                TriggerOn::Loss => Source::Loss {
                    last: None,
                    next: now,
                },
                TriggerOn::Interval => {
                    let every = t
                        .every
                        .as_ref()
                        .map_or(Duration::from_secs(60), |e| e.get_ref().get());
                    Source::Interval {
                        every,
                        next: now + every,
                    }
                }
            };
            watched.push(Watched {
                name: name.as_str().into(),
                source,
                gate: Gate::new(rules_of(t)),
                label: t.label().to_string(),
                compress: t.compress,
                delay: t.post_trigger_delay.as_ref().map(|d| d.get_ref().get()),
                before: t.before.as_ref().map(|d| d.get_ref().get()),
            });
        }
        Ok(Opened { watched })
    }

    /// Enables the events and starts the thread (SCHED_FIFO `priority`).
    pub fn start(
        opened: Opened,
        priority: u8,
        losses: LossReader,
        sink: Sink,
    ) -> Result<Self, ConditionError> {
        let stop = Arc::new(
            EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
                .map_err(|e| ConditionError::Thread(e.into()))?,
        );
        for (index, w) in opened.watched.iter().enumerate() {
            if let Source::Tracepoint { rings, .. } = &w.source {
                for r in rings {
                    r.enable().map_err(|source| ConditionError::Perf {
                        index,
                        name: w.name.to_string(),
                        source,
                    })?;
                }
            }
        }
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("flightrec-conditions".into())
            .spawn(move || {
                crate::perf::sched::run_realtime(priority);
                watch(opened.watched, &stop2, &losses, &sink);
            })
            .map_err(ConditionError::Thread)?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Conditions {
    fn drop(&mut self) {
        let _ = self.stop.write(1);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
