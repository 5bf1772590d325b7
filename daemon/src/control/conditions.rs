//! The `[[trigger]]` conditions as the daemon runs them: arming them from
//! the config (errors point at the trigger's line and column, or at the
//! key at fault), what a firing does (count it, tell Watch, queue the dump
//! of the part of the machine its `scope` asks for), and the counters
//! Status and `snapctl triggers` show.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use flightrec_config::{
    Config, ConfigError, LoadedConfig, Spanned, TriggerConfig, TriggerOn, TriggerScope,
};
use flightrec_proto::container;

use super::Control;
use crate::dump::{Scope, Trigger, TriggerKind};
use crate::events::{Event, TriggerFired};
use crate::perf::cpus::online_cpus;
use crate::runtimes::RuntimeNames;
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
    /// What the runtimes call containers, to name the one a firing
    /// matched (set once at start, when containers are named).
    names: OnceLock<Arc<RuntimeNames>>,
}

impl Conditions {
    /// Names the containers firings match from `names` from now on.
    pub fn set_names(&self, names: Arc<RuntimeNames>) {
        let _ = self.names.set(names);
    }

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
            Some(c) => format!("{} in {}", get(&t.psi), c.get_ref()),
            None => get(&t.psi),
        },
        TriggerOn::CgroupMemory => {
            let counters: Vec<&str> = t.memory_counters().iter().map(|c| c.as_str()).collect();
            format!("{} in {}", counters.join(", "), get(&t.cgroup))
        }
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

/// Where the value of `key` of trigger `t` is (the whole table for a key
/// it does not have).
fn span_of_key(t: &Spanned<TriggerConfig>, key: Option<&str>) -> Range<usize> {
    let c = t.get_ref();
    let span = match key {
        Some("cgroup") => c.cgroup.as_ref().map(Spanned::span),
        Some("events") => c.events.as_ref().map(Spanned::span),
        Some("scope") => c.scope.as_ref().map(Spanned::span),
        _ => None,
    };
    span.unwrap_or_else(|| t.span())
}

/// Arms the triggers of `loaded` on the online CPUs. A trigger the kernel
/// refuses (unknown tracepoint, bad filter, no PSI, a cgroup glob naming
/// too many cgroups) is a config error at its `[[trigger]]`, or at the
/// key at fault; so is a `scope` of part of the machine where cgroup ids
/// are not recorded.
pub fn open_conditions(loaded: &LoadedConfig) -> Result<Opened, ConfigError> {
    let config = &loaded.config;
    let triggers = &config.triggers;
    if !config.containers.cgroups
        && let Some(t) = triggers
            .iter()
            .find(|t| t.get_ref().scope.is_some() && t.get_ref().scope() != TriggerScope::Machine)
    {
        return Err(loaded.error_at(
            span_of_key(t, Some("scope")),
            format!(
                "trigger {:?}: a scope of part of the machine needs the cgroup of every \
                 sample: set [containers] cgroups = true, or scope = \"machine\"",
                t.get_ref().name.get_ref()
            ),
        ));
    }
    let cpus = if triggers
        .iter()
        .any(|t| *t.get_ref().on.get_ref() == TriggerOn::Tracepoint)
    {
        online_cpus().map_err(|e| loaded.error_at(0..0, format!("triggers: {e}")))?
    } else {
        Vec::new()
    };
    Running::open(triggers, &cpus, config.containers.cgroups).map_err(|e| {
        let span = e
            .trigger_index()
            .and_then(|i| triggers.get(i))
            .map_or(0..0, |t| span_of_key(t, e.key()));
        loaded.error_at(span, e.to_string())
    })
}

/// What a firing's snapshot holds: the trigger's scope, with "matched"
/// made the container (else the cgroup) that fired it. The words that
/// say what matched gain the container's name; a "matched" firing whose
/// cgroup is not known dumps the whole machine and says so.
fn scope_of(fired: &Fired, names: Option<&RuntimeNames>) -> (Scope, String) {
    let mut matched = fired.matched.clone();
    let container = fired.cgroup.as_deref().and_then(container::of_cgroup);
    if let Some(c) = &container {
        let name = names
            .and_then(|n| n.get(&c.id))
            .map(|n| n.name)
            .unwrap_or_default();
        let shown = container::Container { name, ..c.clone() }.display_name();
        matched.push_str(&format!(" (container {shown}, {})", c.runtime));
    }
    let scope = match &fired.scope {
        TriggerScope::Machine => Ok(Scope::default()),
        TriggerScope::Cgroup(p) => Scope::new(vec![p.clone()], Vec::new()),
        TriggerScope::Container(c) => Scope::new(Vec::new(), vec![c.clone()]),
        TriggerScope::Matched => {
            match container.map(|c| c.cgroup).or_else(|| fired.cgroup.clone()) {
                Some(cgroup) => Scope::new(vec![cgroup], Vec::new()),
                None => {
                    matched.push_str(
                        "; the cgroup that fired it is not known: the snapshot holds the whole \
                         machine",
                    );
                    Ok(Scope::default())
                }
            }
        }
    };
    let scope = scope.unwrap_or_else(|e| {
        matched.push_str(&format!("; {e}: the snapshot holds the whole machine"));
        Scope::default()
    });
    (scope, matched)
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
    fn on_fired(&self, mut fired: Fired) {
        let (scope, matched) = scope_of(&fired, self.conditions.names.get().map(Arc::as_ref));
        fired.matched = matched;
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
                tracing::info!(
                    trigger = %fired.name,
                    matched = %fired.matched,
                    scope = %scope_text(&scope),
                    "trigger fired"
                );
                let mut t = Trigger::now(TriggerKind::Condition(fired.name.clone()), None);
                t.label = Some(fired.label.clone());
                t.compress = fired.compress;
                t.delay = fired.delay;
                t.matched = Some(fired.matched.clone());
                t.scope = scope;
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

/// A scope as the log says it.
fn scope_text(scope: &Scope) -> String {
    if scope.is_machine() {
        "machine".into()
    } else {
        scope.describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::triggers::gate::Verdict;

    fn fired(scope: TriggerScope, cgroup: Option<&str>) -> Fired {
        Fired {
            name: "t".into(),
            matched: "oom:mark_victim on CPU 0 by pid 7: victim pid 7 (hog)".into(),
            verdict: Verdict::Dump,
            times: 1,
            label: "t".into(),
            compress: None,
            delay: None,
            before: None,
            scope,
            cgroup: cgroup.map(str::to_string),
        }
    }

    #[test]
    fn matched_is_the_container_of_the_cgroup_that_fired() {
        let id = "a2ad75582abe099d70d3a2c0b3ee3d0dec4cc438041da7f642efcd8c13c09d2c";
        let inside = format!("/libpod_parent/libpod-{id}/sub");
        let (scope, matched) = scope_of(&fired(TriggerScope::Matched, Some(&inside)), None);
        assert_eq!(scope.cgroups, [format!("/libpod_parent/libpod-{id}")]);
        assert!(
            matched.ends_with("(container podman:a2ad75582abe, podman)"),
            "{matched}"
        );
        let (scope, matched) = scope_of(&fired(TriggerScope::Matched, Some("/froom")), None);
        assert_eq!(scope.describe(), "cgroup:/froom");
        assert!(!matched.contains("container"), "{matched}");
    }

    #[test]
    fn a_fixed_scope_stays_and_an_unknown_cgroup_dumps_the_machine_saying_so() {
        let (scope, _) = scope_of(
            &fired(TriggerScope::Container("web".into()), Some("/froom")),
            None,
        );
        assert_eq!(scope.describe(), "container:web");
        let (scope, _) = scope_of(&fired(TriggerScope::Machine, Some("/froom")), None);
        assert!(scope.is_machine());
        let (scope, matched) = scope_of(&fired(TriggerScope::Matched, None), None);
        assert!(scope.is_machine());
        assert!(matched.contains("not known: the snapshot holds the whole machine"));
    }
}
