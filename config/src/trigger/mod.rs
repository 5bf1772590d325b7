//! `[[trigger]]`: conditions that dump by themselves (a tracepoint, a PSI
//! stall, a cgroup's memory events, ring losses, a period), their rate
//! limits and the part of the machine their snapshots hold. The `psi`
//! value's grammar is in [`psi`], the cgroup globs, memory counters and
//! scopes in [`cgroup`]; what serde cannot check about a trigger is in
//! [`validate`].

mod cgroup;
mod psi;
mod validate;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::units::HumanDuration;

pub use cgroup::{
    MAX_CGROUP_BYTES, MAX_TRIGGER_CGROUPS, MemoryCounter, TriggerScope, check_cgroup_glob,
};
pub use psi::{PsiResource, PsiSpec};
pub use validate::check_trigger_name;
pub(crate) use validate::validate_triggers;

/// Longest trigger name (it is part of every snapshot's trigger field).
pub const MAX_TRIGGER_NAME_BYTES: usize = 64;
/// Default `cooldown`: minimum time between two dumps of one trigger.
pub const DEFAULT_COOLDOWN: Duration = Duration::from_secs(10);
/// Default `max_per_hour`.
pub const DEFAULT_MAX_PER_HOUR: u32 = 60;
/// Default `window` when `count` > 1.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(1);
/// Shortest `every` of an interval trigger.
pub const MIN_EVERY: Duration = Duration::from_secs(1);

/// What a trigger watches (`on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TriggerOn {
    Tracepoint,
    Psi,
    /// The memory event counters of the cgroups a glob names.
    #[serde(rename = "cgroup-memory")]
    CgroupMemory,
    Loss,
    Interval,
}

impl TriggerOn {
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerOn::Tracepoint => "tracepoint",
            TriggerOn::Psi => "psi",
            TriggerOn::CgroupMemory => "cgroup-memory",
            TriggerOn::Loss => "loss",
            TriggerOn::Interval => "interval",
        }
    }
}

/// One `[[trigger]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerConfig {
    /// `[A-Za-z0-9_-]`, at most 64 bytes, unique.
    pub name: Spanned<String>,
    pub on: Spanned<TriggerOn>,
    /// `system:tracepoint` (on = "tracepoint").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<Spanned<String>>,
    /// ftrace filter on the tracepoint's fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<Spanned<String>>,
    /// `"<cpu|memory|io> <some|full> <stall> <window>"` (on = "psi").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi: Option<Spanned<String>>,
    /// The cgroups watched, a glob of paths relative to the cgroup2 root
    /// (`/kubepods.slice/*`; a path under the cgroup2 mount means the
    /// same): for "psi" their `*.pressure` files instead of /proc/pressure,
    /// for "cgroup-memory" their memory event counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<Spanned<String>>,
    /// The memory counters watched (on = "cgroup-memory"); default
    /// `["oom_kill"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Spanned<Vec<Spanned<String>>>>,
    /// Period (on = "interval").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<Spanned<HumanDuration>>,
    /// Fire when this many matches happen within `window`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<Spanned<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Spanned<HumanDuration>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown: Option<Spanned<HumanDuration>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_per_hour: Option<Spanned<u32>>,
    /// Overrides `snapshot.post_trigger_delay` for this trigger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_trigger_delay: Option<Spanned<HumanDuration>>,
    /// How far before the firing the snapshot reaches; default: as far
    /// back as the rings hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Spanned<HumanDuration>>,
    /// The snapshots' label; default: the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<Spanned<String>>,
    /// Default: `snapshot.compression`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compress: Option<bool>,
    /// What the snapshots hold: "machine", "matched", "cgroup:/PATH" or
    /// "container:ID|NAME"; default "machine" ("matched" for
    /// "cgroup-memory").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Spanned<String>>,
}

impl TriggerConfig {
    pub fn count(&self) -> u64 {
        self.count.as_ref().map_or(1, |c| *c.get_ref())
    }

    pub fn window(&self) -> Duration {
        self.window
            .as_ref()
            .map_or(DEFAULT_WINDOW, |w| w.get_ref().get())
    }

    pub fn cooldown(&self) -> Duration {
        self.cooldown
            .as_ref()
            .map_or(DEFAULT_COOLDOWN, |c| c.get_ref().get())
    }

    pub fn max_per_hour(&self) -> u32 {
        self.max_per_hour
            .as_ref()
            .map_or(DEFAULT_MAX_PER_HOUR, |m| *m.get_ref())
    }

    /// The label of this trigger's snapshots.
    pub fn label(&self) -> &str {
        self.label.as_ref().unwrap_or(&self.name).get_ref()
    }

    /// The parsed `psi` value (validated at load).
    pub fn psi_spec(&self) -> Option<PsiSpec> {
        self.psi
            .as_ref()
            .and_then(|p| PsiSpec::parse(p.get_ref()).ok())
    }

    /// The memory counters a "cgroup-memory" trigger watches (validated
    /// at load), in `events`' order; default `oom_kill`.
    pub fn memory_counters(&self) -> Vec<MemoryCounter> {
        match &self.events {
            None => vec![MemoryCounter::OomKill],
            Some(events) => events
                .get_ref()
                .iter()
                .filter_map(|e| MemoryCounter::parse(e.get_ref()))
                .collect(),
        }
    }

    /// The part of the machine its snapshots hold (validated at load):
    /// `scope`, else the whole machine, but for "cgroup-memory" the
    /// cgroup whose counter grew.
    pub fn scope(&self) -> TriggerScope {
        match &self.scope {
            Some(s) => TriggerScope::parse(s.get_ref()).unwrap_or(TriggerScope::Machine),
            None if *self.on.get_ref() == TriggerOn::CgroupMemory => TriggerScope::Matched,
            None => TriggerScope::Machine,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::parse;

    #[test]
    fn the_issue_examples_parse() {
        let cfg = parse(
            r#"
[[trigger]]
name = "probe-exec"
on = "tracepoint"
event = "sched:sched_process_exec"
filter = 'filename ~ "*probe*"'
count = 1
window = "1s"
cooldown = "10s"
max_per_hour = 6
post_trigger_delay = "0s"
label = "probe"
compress = true

[[trigger]]
name = "cpu-pressure"
on = "psi"
psi = "cpu some 100ms 1s"

[[trigger]]
name = "tracking-loss"
on = "loss"

[[trigger]]
name = "every-30s"
on = "interval"
every = "30s"
"#,
        )
        .unwrap();
        assert_eq!(cfg.triggers.len(), 4);
        let probe = cfg.triggers[0].get_ref();
        assert_eq!(*probe.on.get_ref(), TriggerOn::Tracepoint);
        assert_eq!(probe.max_per_hour(), 6);
        assert_eq!(probe.label(), "probe");
        assert_eq!(probe.compress, Some(true));
        let psi = cfg.triggers[1].get_ref();
        assert_eq!(psi.label(), "cpu-pressure");
        assert_eq!(psi.cooldown(), DEFAULT_COOLDOWN);
        assert_eq!(psi.max_per_hour(), DEFAULT_MAX_PER_HOUR);
        assert_eq!(psi.psi_spec().unwrap().kernel_text(), "some 100000 1000000");
        assert_eq!(
            cfg.triggers[3]
                .get_ref()
                .every
                .as_ref()
                .unwrap()
                .get_ref()
                .get(),
            Duration::from_secs(30)
        );
        assert_eq!(parse(&cfg.to_toml()).unwrap(), cfg);
    }

    #[test]
    fn container_triggers_parse_with_their_defaults() {
        let cfg = parse(
            r#"
[[trigger]]
name = "oom-kill"
on = "tracepoint"
event = "oom:mark_victim"
scope = "matched"

[[trigger]]
name = "pods-oom"
on = "cgroup-memory"
cgroup = "/kubepods.slice/*"

[[trigger]]
name = "pods-max"
on = "cgroup-memory"
cgroup = "/kubepods.slice/*"
events = ["max", "oom_kill"]
scope = "machine"

[[trigger]]
name = "web-pressure"
on = "psi"
psi = "memory some 100ms 1s"
cgroup = "/system.slice/web-*.service"
scope = "container:web"
"#,
        )
        .unwrap();
        let t: Vec<&TriggerConfig> = cfg.triggers.iter().map(|t| t.get_ref()).collect();
        assert_eq!(t[0].scope(), TriggerScope::Matched);
        assert_eq!(*t[1].on.get_ref(), TriggerOn::CgroupMemory);
        assert_eq!(t[1].memory_counters(), [MemoryCounter::OomKill]);
        assert_eq!(t[1].scope(), TriggerScope::Matched);
        assert_eq!(
            t[2].memory_counters(),
            [MemoryCounter::Max, MemoryCounter::OomKill]
        );
        assert_eq!(t[2].scope(), TriggerScope::Machine);
        assert_eq!(t[3].scope(), TriggerScope::Container("web".into()));
        assert_eq!(parse(&cfg.to_toml()).unwrap(), cfg);
    }
}
