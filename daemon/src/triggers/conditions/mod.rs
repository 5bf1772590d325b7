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

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use flightrec_config::{Spanned, TriggerConfig, TriggerOn};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::os::fd::AsFd;

use super::gate::{Gate, GateRules, Verdict};
use crate::perf::PerfError;
use crate::perf::condition_ring::ConditionRing;
use crate::perf::event::{EventError, EventKind, EventSpec};
pub use hits::{Hit, Hits, parse_hits};
pub use psi::{PROC_PRESSURE, pressure_path};

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

/// Which poll entry belongs to what.
#[derive(Clone, Copy)]
enum Slot {
    Stop,
    Ring { watched: usize, ring: usize },
    Psi { watched: usize },
}

fn comm_of(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end().to_string())
}

/// Runs `w`'s gate over `n` matches (or one firing without counting, when
/// `count` is false) and reports each verdict other than Counting, once
/// per verdict with how many times it happened.
fn judge(w: &mut Watched, now: Instant, n: u64, count: bool, matched: String, sink: &Sink) {
    let (mut dumps, mut cooldown, mut hourly) = (0u64, 0u64, 0u64);
    let mut last = [None, None, None];
    for _ in 0..n {
        let verdict = if count {
            w.gate.on_match(now)
        } else {
            w.gate.fire(now)
        };
        let slot = match verdict {
            Verdict::Counting => continue,
            Verdict::Dump => {
                dumps += 1;
                0
            }
            Verdict::Suppressed(super::gate::Suppression::Cooldown) => {
                cooldown += 1;
                1
            }
            Verdict::Suppressed(super::gate::Suppression::HourlyLimit) => {
                hourly += 1;
                2
            }
        };
        last[slot] = Some(verdict);
    }
    for (times, verdict) in [dumps, cooldown, hourly].into_iter().zip(last) {
        if let (true, Some(verdict)) = (times > 0, verdict) {
            sink(Fired {
                name: w.name.clone(),
                matched: matched.clone(),
                verdict,
                times,
                label: w.label.clone(),
                compress: w.compress,
                delay: w.delay,
            });
        }
    }
}

fn watch(mut watched: Vec<Watched>, stop: &EventFd, losses: &LossReader, sink: &Sink) {
    let mut buf = Vec::new();
    loop {
        let now = Instant::now();
        let mut next_tick: Option<Instant> = None;
        for w in &mut watched {
            let due = match &mut w.source {
                Source::Loss { next, .. } | Source::Interval { next, .. } => Some(*next),
                Source::Tracepoint { snoozed, .. } => {
                    // Wake-ups end snoozes that are over; the rest set the timeout.
                    for s in snoozed.iter_mut() {
                        if s.is_some_and(|until| until <= now) {
                            *s = None;
                        }
                    }
                    snoozed.iter().flatten().min().copied()
                }
                Source::Psi { .. } => None,
            };
            if let Some(d) = due {
                next_tick = Some(next_tick.map_or(d, |n| n.min(d)));
            }
        }
        let timeout = match next_tick {
            None => PollTimeout::NONE,
            Some(at) => {
                let ms = at.saturating_duration_since(now).as_millis();
                // Rounded up, so a tick is never polled for early in a loop.
                PollTimeout::try_from(i32::try_from(ms + 1).unwrap_or(i32::MAX))
                    .unwrap_or(PollTimeout::MAX)
            }
        };
        let mut slots = vec![Slot::Stop];
        let ready: Vec<(Slot, PollFlags)> = {
            let mut fds = vec![PollFd::new(stop.as_fd(), PollFlags::POLLIN)];
            for (wi, w) in watched.iter().enumerate() {
                match &w.source {
                    Source::Tracepoint { rings, snoozed, .. } => {
                        for (ri, r) in rings.iter().enumerate() {
                            if snoozed[ri].is_some() {
                                continue;
                            }
                            fds.push(PollFd::new(r.fd(), PollFlags::POLLIN));
                            slots.push(Slot::Ring {
                                watched: wi,
                                ring: ri,
                            });
                        }
                    }
                    Source::Psi { file, broken, .. } if !broken => {
                        fds.push(PollFd::new(file.as_fd(), PollFlags::POLLPRI));
                        slots.push(Slot::Psi { watched: wi });
                    }
                    _ => {}
                }
            }
            match poll(&mut fds, timeout) {
                Ok(_) => fds
                    .iter()
                    .zip(&slots)
                    .filter_map(|(fd, slot)| {
                        fd.revents().filter(|r| !r.is_empty()).map(|r| (*slot, r))
                    })
                    .collect(),
                Err(nix::errno::Errno::EINTR) => Vec::new(),
                Err(e) => {
                    tracing::error!("conditions: poll failed, condition triggers stop: {e}");
                    return;
                }
            }
        };
        let now = Instant::now();
        for (slot, revents) in ready {
            match slot {
                Slot::Stop => return,
                Slot::Ring { watched: wi, ring } => {
                    let w = &mut watched[wi];
                    let Source::Tracepoint {
                        event,
                        rings,
                        snoozed,
                    } = &mut w.source
                    else {
                        continue;
                    };
                    buf.clear();
                    rings[ring].drain(&mut buf);
                    let hits = parse_hits(&buf);
                    if hits.total() > 1 {
                        snoozed[ring] = Some(now + BUSY_SNOOZE);
                    }
                    if hits.total() == 0 {
                        continue;
                    }
                    let matched = match hits.sampled.first() {
                        Some(h) => format!(
                            "{event} on CPU {} by pid {}{}",
                            h.cpu,
                            h.pid,
                            comm_of(h.pid)
                                .map(|c| format!(" ({c})"))
                                .unwrap_or_default()
                        ),
                        None => format!("{event} ({} hits the ring had no room for)", hits.lost),
                    };
                    // A burst's hits beyond what the gate can use change
                    // nothing but the count of suppressed firings: capped so
                    // a flood costs bounded work.
                    judge(
                        w,
                        now,
                        hits.total().min(MAX_HITS_PER_READ),
                        true,
                        matched,
                        sink,
                    );
                }
                Slot::Psi { watched: wi } => {
                    let w = &mut watched[wi];
                    let Source::Psi {
                        path, text, broken, ..
                    } = &mut w.source
                    else {
                        continue;
                    };
                    if revents.intersects(PollFlags::POLLERR | PollFlags::POLLNVAL) {
                        tracing::error!(
                            trigger = %w.name,
                            "{} reports an error (removed cgroup?): this trigger stops",
                            path.display()
                        );
                        *broken = true;
                        continue;
                    }
                    if revents.contains(PollFlags::POLLPRI) {
                        let matched = format!("pressure {text} ({})", path.display());
                        judge(w, now, 1, false, matched, sink);
                    }
                }
            }
        }
        for w in &mut watched {
            match &mut w.source {
                Source::Interval { every, next } if *next <= now => {
                    while *next <= now {
                        *next += *every;
                    }
                    let matched = format!("every {}", flightrec_config::HumanDuration(*every));
                    judge(w, now, 1, false, matched, sink);
                }
                Source::Loss { last, next } if *next <= now => {
                    *next = now + LOSS_PERIOD;
                    let Some(total) = losses() else { continue };
                    let grown = last.map_or(0, |l| total.saturating_sub(l));
                    *last = Some(total);
                    if grown > 0 {
                        let rules = w.gate.rules();
                        let matched = format!("{grown} samples or tracking records lost");
                        // More than `count` lost at once fires once: the
                        // rest would only be suppressed by the cooldown.
                        judge(w, now, grown.min(rules.count), true, matched, sink);
                    }
                }
                _ => {}
            }
        }
    }
}
