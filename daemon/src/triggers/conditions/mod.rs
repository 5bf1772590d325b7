//! Conditions (`[[trigger]]`): one thread watches every configured
//! condition with one poll(2) (tracepoint rings, PSI files, a stop
//! eventfd) and a timeout for the periodic ones (interval, loss, the
//! memory counters of cgroups), runs each through its [`Gate`] and hands
//! what fired to a sink that queues the dump. The thread runs at the
//! snapshot's realtime priority, so a condition reaches the dump thread
//! without waiting for a CPU. It takes no lock a dump takes: the cgroup a
//! firing matched is named from /proc and the cgroup hierarchy
//! (`cgroups`), never from the recorder.
//!
//! Opening ([`Conditions::open`]) is separate from starting, so a reload
//! can open the new set, and keep the running one if that fails.

mod cgroups;
mod hits;
mod memory;
mod psi;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use flightrec_config::{Spanned, TriggerConfig, TriggerOn, TriggerScope};
use nix::sys::eventfd::{EfdFlags, EventFd};

use super::gate::{Gate, GateRules, Verdict};
use crate::abi::sample;
use crate::host::format_field;
use crate::perf::PerfError;
use crate::perf::condition_ring::ConditionRing;
use crate::perf::event::{EventError, EventKind, EventSpec, TRACEFS};
pub use cgroups::{CgroupGlob, CgroupNames, CgroupRoots, MemoryRoot};
pub use hits::{Hit, HitLayout, Hits, Subject, SubjectFields, parse_hits};
pub use memory::MEMORY_POLL;
use memory::MemoryWatch;
use psi::PsiWatch;
pub use psi::{PROC_PRESSURE, pressure_path};
use watch::watch;

/// How often losses are read for `on = "loss"` triggers.
const LOSS_PERIOD: Duration = Duration::from_millis(500);
/// A ring that had more than one hit to read is left alone this long,
/// twice as long after each read that again finds more than one, up to
/// [`LONGEST_SNOOZE`]: a busy tracepoint (sched_switch as a condition)
/// then costs 20 wake-ups a second per CPU instead of one per hit, while
/// the first hit after a quiet spell is still seen at once. The hits of a
/// snooze are all counted (those the ring had no room for as lost), at
/// most a snooze late.
const BUSY_SNOOZE: Duration = Duration::from_millis(10);
const LONGEST_SNOOZE: Duration = Duration::from_millis(50);

/// A tracepoint ring's snooze (see [`BUSY_SNOOZE`]).
#[derive(Clone, Copy)]
struct Snooze {
    /// Not polled before this.
    until: Option<Instant>,
    /// How long the next snooze lasts.
    next: Duration,
}

impl Default for Snooze {
    fn default() -> Self {
        Snooze {
            until: None,
            next: BUSY_SNOOZE,
        }
    }
}

impl Snooze {
    /// After a read of the ring: snoozed if it was busy (more than one
    /// hit), each snooze in a row twice as long; else the next is short.
    fn after_read(&mut self, hits: u64, now: Instant) {
        if hits > 1 {
            self.until = Some(now + self.next);
            self.next = (self.next * 2).min(LONGEST_SNOOZE);
        } else {
            self.next = BUSY_SNOOZE;
        }
    }

    /// Ends the snooze if it is over; when it is not, the instant it ends.
    fn wakes(&mut self, now: Instant) -> Option<Instant> {
        self.until = self.until.filter(|&until| until > now);
        self.until
    }
}

/// Most hits run through a gate per ring read.
const MAX_HITS_PER_READ: u64 = 1 << 16;
/// The tracepoint whose hits name the OOM killer's victim in their
/// fields: its `pid`, not the task that hit it, is what fired.
pub const OOM_VICTIM_EVENT: &str = "oom:mark_victim";

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
    /// What the snapshot holds (the trigger's `scope`).
    pub scope: TriggerScope,
    /// The cgroup that fired it, relative to the hierarchy's root: the
    /// task's (the OOM victim's) for a tracepoint, the cgroup whose PSI
    /// file or memory counter fired. Sought for a tracepoint only when
    /// `scope` is "matched" or the event names a victim.
    pub cgroup: Option<String>,
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
    /// The value of `key` cannot be watched on this machine.
    #[error("trigger {name:?}: {reason}")]
    Key {
        index: usize,
        name: String,
        key: &'static str,
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
            | ConditionError::Psi { index, .. }
            | ConditionError::Key { index, .. } => Some(*index),
            ConditionError::Thread(_) => None,
        }
    }

    /// The key of the trigger whose value is at fault, if one is.
    pub fn key(&self) -> Option<&'static str> {
        match self {
            ConditionError::Key { key, .. } => Some(key),
            _ => None,
        }
    }
}

enum Source {
    Tracepoint {
        event: String,
        rings: Vec<ConditionRing>,
        /// Per ring: whether it is left alone for now.
        snoozes: Vec<Snooze>,
        layout: HitLayout,
    },
    Psi {
        watch: PsiWatch,
        text: String,
    },
    CgroupMemory(MemoryWatch),
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
    scope: TriggerScope,
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
    names: CgroupNames,
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
    /// events with their filters (the kernel checks them here), writes
    /// the PSI thresholds and reads the memory counters of the cgroups
    /// watched. Nothing is watched until [`Conditions::start`]. Without
    /// `cgroup_ids` (samples do not carry their cgroup) a trigger's
    /// snapshots hold the whole machine unless its `scope` says otherwise.
    pub fn open(
        triggers: &[Spanned<TriggerConfig>],
        cpus: &[u32],
        cgroup_ids: bool,
    ) -> Result<Opened, ConditionError> {
        let now = Instant::now();
        let roots = CgroupRoots::of_this_machine();
        let mut watched = Vec::new();
        for (index, t) in triggers.iter().enumerate() {
            let t = t.get_ref();
            let name = t.name.get_ref().clone();
            let scope = match &t.scope {
                None if !cgroup_ids => TriggerScope::Machine,
                _ => t.scope(),
            };
            let key_error = |key: &'static str, reason: String| ConditionError::Key {
                index,
                name: name.clone(),
                key,
                reason,
            };
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
                    let EventKind::Tracepoint {
                        id,
                        system,
                        name: tracepoint,
                    } = resolved.kind
                    else {
                        return Err(ConditionError::Psi {
                            index,
                            name,
                            reason: format!("{event} is not a tracepoint"),
                        });
                    };
                    let layout =
                        hit_layout(&event, &system, &tracepoint, scope == TriggerScope::Matched);
                    let filter = t.filter.as_ref().map(|f| f.get_ref().as_str());
                    let extra = layout.sample_type;
                    let rings = cpus
                        .iter()
                        .map(|&cpu| ConditionRing::open(&event, id, filter, cpu, extra))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|source| ConditionError::Perf {
                            index,
                            name: name.clone(),
                            source,
                        })?;
                    let snoozes = vec![Snooze::default(); rings.len()];
                    Source::Tracepoint {
                        event,
                        rings,
                        snoozes,
                        layout,
                    }
                }
                TriggerOn::Psi => {
                    let spec = t.psi_spec().ok_or_else(|| ConditionError::Psi {
                        index,
                        name: name.clone(),
                        reason: "no valid psi value".into(),
                    })?;
                    let text = t
                        .psi
                        .as_ref()
                        .map(|p| p.get_ref().clone())
                        .unwrap_or_default();
                    let watch = match &t.cgroup {
                        None => PsiWatch::open(spec, None, now).map_err(|reason| {
                            ConditionError::Psi {
                                index,
                                name: name.clone(),
                                reason,
                            }
                        })?,
                        Some(c) => {
                            let mount = roots.unified.clone().ok_or_else(|| {
                                key_error(
                                    "cgroup",
                                    "no cgroup2 hierarchy is mounted: PSI files of cgroups are \
                                     cgroup2's"
                                        .into(),
                                )
                            })?;
                            let glob = glob_of(c.get_ref(), &roots)
                                .map_err(|why| key_error("cgroup", why))?;
                            PsiWatch::open(spec, Some((glob, mount)), now)
                                .map_err(|why| key_error("cgroup", why))?
                        }
                    };
                    Source::Psi { watch, text }
                }
                TriggerOn::CgroupMemory => {
                    let root = roots.memory().ok_or_else(|| {
                        key_error(
                            "cgroup",
                            "no memory controller to read: neither cgroup2 offers it nor is a \
                             v1 memory hierarchy mounted"
                                .into(),
                        )
                    })?;
                    let counters = t.memory_counters();
                    if let MemoryRoot::V1(mount) = &root
                        && let Some(c) = counters.iter().find(|c| !c.in_v1())
                    {
                        return Err(key_error(
                            "events",
                            format!(
                                "{} is not counted on this host: its memory controller is the \
                                 v1 hierarchy at {}, which counts oom_kill (memory.oom_control) \
                                 and max (memory.failcnt) only; oom and high are cgroup2's \
                                 memory.events",
                                c.as_str(),
                                mount.display()
                            ),
                        ));
                    }
                    let text = t
                        .cgroup
                        .as_ref()
                        .map(|c| c.get_ref().as_str())
                        .unwrap_or("/");
                    let glob = glob_of(text, &roots).map_err(|why| key_error("cgroup", why))?;
                    let watch = MemoryWatch::open(glob, root, counters, now)
                        .map_err(|why| key_error("cgroup", why))?;
                    Source::CgroupMemory(watch)
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
                scope,
            });
        }
        Ok(Opened {
            watched,
            names: CgroupNames::new(roots.ids),
        })
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
                watch(opened.watched, opened.names, &stop2, &losses, &sink);
            })
            .map_err(ConditionError::Thread)?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

/// `text` as a glob of cgroups, relative to the roots' mounts.
fn glob_of(text: &str, roots: &CgroupRoots) -> Result<CgroupGlob, String> {
    let mounts: Vec<&Path> = [&roots.unified, &roots.memory_v1]
        .into_iter()
        .flatten()
        .map(PathBuf::as_path)
        .collect();
    CgroupGlob::new(text, &mounts)
}

/// What the condition rings of `event` sample besides the task and CPU:
/// the cgroup id when the trigger's snapshots hold the cgroup that fired
/// it, and for [`OOM_VICTIM_EVENT`] the raw fields that name the victim
/// (where its tracefs format says they are).
fn hit_layout(event: &str, system: &str, tracepoint: &str, matched: bool) -> HitLayout {
    let mut layout = HitLayout::default();
    if matched {
        layout.sample_type |= sample::CGROUP;
    }
    if event == OOM_VICTIM_EVENT {
        let path = Path::new(TRACEFS)
            .join("events")
            .join(system)
            .join(tracepoint)
            .join("format");
        let format = std::fs::read(&path).unwrap_or_default();
        match format_field(&format, "pid") {
            Some(pid) => {
                layout.sample_type |= sample::RAW;
                layout.subject = Some(SubjectFields {
                    pid,
                    comm: format_field(&format, "comm")
                        .filter(|&(_, size)| size == 4)
                        .map(|(at, _)| at),
                });
            }
            None => tracing::warn!(
                "{} has no pid field: {event} triggers name the task that hit it, not the \
                 victim",
                path.display()
            ),
        }
    }
    layout
}

impl Drop for Conditions {
    fn drop(&mut self) {
        let _ = self.stop.write(1);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_ring_snoozes_twice_as_long_each_time_and_a_quiet_read_resets_it() {
        let start = Instant::now();
        let mut snooze = Snooze::default();
        // One hit: not snoozed, the ring is polled at once again.
        snooze.after_read(1, start);
        assert_eq!(snooze.wakes(start), None);
        // Busy reads in a row: 10, 20, 40, then 50 ms at most.
        let mut now = start;
        for ms in [10, 20, 40, 50, 50] {
            snooze.after_read(2, now);
            let until = now + Duration::from_millis(ms);
            assert_eq!(snooze.wakes(now), Some(until), "{ms} ms");
            assert_eq!(snooze.wakes(until - Duration::from_millis(1)), Some(until));
            // Over at its end: polled again.
            assert_eq!(snooze.wakes(until), None);
            now = until;
        }
        // A quiet read: the next busy one snoozes 10 ms again.
        snooze.after_read(0, now);
        snooze.after_read(5, now);
        assert_eq!(snooze.wakes(now), Some(now + BUSY_SNOOZE));
    }
}
