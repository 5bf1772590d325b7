//! The `[[trigger]]` conditions as the daemon runs them: arming them from
//! the config (errors point at the trigger's line and column), what a
//! firing does (count it, tell Watch, queue the dump), and the counters
//! Status and `snapctl triggers` show.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use flightrec_config::{Config, ConfigError, LoadedConfig, TriggerConfig, TriggerOn};

use super::Control;
use crate::dump::{Trigger, TriggerKind};
use crate::events::{Event, TriggerFired};
use crate::perf::cpus::online_cpus;
use crate::time::WallTime;
use crate::triggers::conditions::{Conditions as Running, Fired, Opened};
use crate::triggers::gate::Verdict;

/// What one trigger did since the daemon started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TriggerCounters {
    pub fired: u64,
    pub dumped: u64,
    pub suppressed: u64,
    pub last_fired: Option<WallTime>,
    pub last_matched: String,
}

/// A configured trigger with its counters, as Status reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerStatus {
    pub name: String,
    pub on: &'static str,
    pub condition: String,
    pub counters: TriggerCounters,
}

/// The running conditions and the counters (kept by name across reloads).
#[derive(Default)]
pub struct Conditions {
    running: Mutex<Option<Running>>,
    counters: Mutex<BTreeMap<String, TriggerCounters>>,
}

impl Conditions {
    /// Stops the condition thread (shutdown).
    pub fn stop(&self) {
        let old = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        drop(old);
    }

    fn counters(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, TriggerCounters>> {
        self.counters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A snapshot was written for `kinds`: count it for each condition.
    pub fn credit_dump(&self, kinds: &[TriggerKind]) {
        let mut counters = self.counters();
        for k in kinds {
            if let TriggerKind::Condition(name) = k {
                counters.entry(name.to_string()).or_default().dumped += 1;
            }
        }
    }

    /// The triggers `config` configures with their counters, in config
    /// order.
    pub fn statuses(&self, config: &Config) -> Vec<TriggerStatus> {
        let counters = self.counters();
        config
            .triggers
            .iter()
            .map(|t| {
                let t = t.get_ref();
                TriggerStatus {
                    name: t.name.get_ref().clone(),
                    on: t.on.get_ref().as_str(),
                    condition: condition_of(t),
                    counters: counters.get(t.name.get_ref()).cloned().unwrap_or_default(),
                }
            })
            .collect()
    }
}

/// What a trigger watches, in words.
pub fn condition_of(t: &TriggerConfig) -> String {
    let get = |v: &Option<flightrec_config::Spanned<String>>| {
        v.as_ref().map(|s| s.get_ref().clone()).unwrap_or_default()
    };
    match *t.on.get_ref() {
        TriggerOn::Tracepoint => match &t.filter {
            Some(f) => format!("{} if {}", get(&t.event), f.get_ref()),
            None => get(&t.event),
        },
        TriggerOn::Psi => match &t.cgroup {
            Some(c) => format!("{} in {}", get(&t.psi), c.get_ref().display()),
            None => get(&t.psi),
        },
        TriggerOn::Loss => format!(
            "{} lost within {}",
            t.count(),
            flightrec_config::HumanDuration(t.window())
        ),
        TriggerOn::Interval => format!(
            "every {}",
            t.every
                .as_ref()
                .map(|e| e.get_ref().to_string())
                .unwrap_or_default()
        ),
    }
}

/// Arms the triggers of `loaded` on the online CPUs. A trigger the kernel
/// refuses (unknown tracepoint, bad filter, no PSI) is a config error at its
/// `[[trigger]]`.
pub fn open_conditions(loaded: &LoadedConfig) -> Result<Opened, ConfigError> {
    let triggers = &loaded.config.triggers;
    let cpus = if triggers
        .iter()
        .any(|t| *t.get_ref().on.get_ref() == TriggerOn::Tracepoint)
    {
        online_cpus().map_err(|e| loaded.error_at(0..0, format!("triggers: {e}")))?
    } else {
        Vec::new()
    };
    Running::open(triggers, &cpus).map_err(|e| {
        let span = e
            .trigger_index()
            .and_then(|i| triggers.get(i))
            .map_or(0..0, |t| t.span());
        loaded.error_at(span, e.to_string())
    })
}

impl Control {
    /// Starts watching `opened` (replacing the conditions running before),
    /// at the configured realtime priority.
    pub fn start_conditions(self: &Arc<Self>, opened: Opened) -> Result<(), ConfigError> {
        let cur = self.live.current();
        let priority = *cur.config.config.snapshot.realtime_priority.get_ref();
        self.conditions.stop();
        if opened.is_empty() {
            return Ok(());
        }
        let live = Arc::downgrade(&self.live);
        let losses = Box::new(move || {
            let status = live.upgrade()?.current().recorder.status();
            Some(
                status
                    .cpus
                    .iter()
                    .map(|c| c.lost_samples + c.lost_tracking_records)
                    .sum(),
            )
        });
        let weak = self.weak();
        let sink = Box::new(move |fired: Fired| {
            if let Some(control) = weak.upgrade() {
                control.on_fired(fired);
            }
        });
        let running = Running::start(opened, priority, losses, sink)
            .map_err(|e| cur.config.error_at(0..0, e.to_string()))?;
        *self
            .conditions
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(running);
        Ok(())
    }

    /// A condition fired: count it, tell Watch, and queue its dump unless
    /// its rate limit suppressed it. Runs on the condition thread and never
    /// blocks it.
    fn on_fired(&self, fired: Fired) {
        let suppressed_by = match fired.verdict {
            Verdict::Suppressed(why) => Some(why.as_str()),
            _ => None,
        };
        let now = WallTime::now();
        {
            let mut counters = self.conditions.counters();
            let c = counters.entry(fired.name.to_string()).or_default();
            c.fired += fired.times;
            if suppressed_by.is_some() {
                c.suppressed += fired.times;
            }
            c.last_fired = Some(now);
            c.last_matched = fired.matched.clone();
        }
        match suppressed_by {
            None => {
                tracing::info!(trigger = %fired.name, matched = %fired.matched, "trigger fired");
                let mut t = Trigger::now(TriggerKind::Condition(fired.name.clone()), None);
                t.label = Some(fired.label.clone());
                t.compress = fired.compress;
                t.delay = fired.delay;
                t.matched = Some(fired.matched.clone());
                // The window starts `before` the firing; the end stays
                // open: post_trigger_delay plays `after`.
                t.window.start = fired.before.map(|b| now.saturating_sub(b));
                self.dumps.queue(t);
            }
            Some(why) => tracing::info!(
                trigger = %fired.name,
                matched = %fired.matched,
                times = fired.times,
                "trigger fired, no dump: {why} (rate limit)"
            ),
        }
        self.events.publish(Event::TriggerFired(TriggerFired {
            name: fired.name.to_string(),
            matched: fired.matched,
            dumped: suppressed_by.is_none(),
            suppressed_by: suppressed_by.unwrap_or_default(),
            times: fired.times,
        }));
    }
}
