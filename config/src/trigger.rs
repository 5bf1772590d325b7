//! `[[trigger]]`: conditions that dump by themselves (a tracepoint, a PSI
//! stall, ring losses, a period), their rate limits and their validation.

use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::checks::{MAX_FILTER_BYTES, check_event_name, check_path};
use crate::message::quoted;
use crate::units::HumanDuration;

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
/// The kernel's PSI trigger window bounds (kernel/sched/psi.c).
pub const PSI_WINDOW_MIN: Duration = Duration::from_millis(500);
pub const PSI_WINDOW_MAX: Duration = Duration::from_secs(10);

/// What a trigger watches (`on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TriggerOn {
    Tracepoint,
    Psi,
    Loss,
    Interval,
}

impl TriggerOn {
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerOn::Tracepoint => "tracepoint",
            TriggerOn::Psi => "psi",
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
    /// A cgroup v2 directory whose `*.pressure` file is watched instead of
    /// /proc/pressure (on = "psi").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<Spanned<PathBuf>>,
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
    /// The snapshots' label; default: the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<Spanned<String>>,
    /// Default: `snapshot.compression`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compress: Option<bool>,
}

/// The resource a PSI trigger watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PsiResource {
    Cpu,
    Memory,
    Io,
}

impl PsiResource {
    /// The file name, in /proc/pressure and in a cgroup directory (`cpu`,
    /// `cpu.pressure`).
    pub fn as_str(self) -> &'static str {
        match self {
            PsiResource::Cpu => "cpu",
            PsiResource::Memory => "memory",
            PsiResource::Io => "io",
        }
    }
}

/// A parsed `psi` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PsiSpec {
    pub resource: PsiResource,
    /// `full` (every task stalled) rather than `some`.
    pub full: bool,
    pub stall: Duration,
    pub window: Duration,
}

impl PsiSpec {
    /// Parses `"cpu some 100ms 1s"`; the error is a sentence.
    pub fn parse(text: &str) -> Result<Self, String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let usage = || {
            format!(
                "psi = {} is not \"<cpu|memory|io> <some|full> <stall> <window>\", \
                 e.g. \"cpu some 100ms 1s\"",
                quoted(text)
            )
        };
        let [resource, kind, stall, window] = words[..] else {
            return Err(usage());
        };
        let resource = match resource {
            "cpu" => PsiResource::Cpu,
            "memory" => PsiResource::Memory,
            "io" => PsiResource::Io,
            _ => return Err(usage()),
        };
        let full = match kind {
            "some" => false,
            "full" => true,
            _ => return Err(usage()),
        };
        let stall = HumanDuration::parse(stall)?.get();
        let window = HumanDuration::parse(window)?.get();
        if !(PSI_WINDOW_MIN..=PSI_WINDOW_MAX).contains(&window) {
            return Err(format!(
                "psi = {}: the window must be 500ms to 10s (the kernel's PSI limits)",
                quoted(text)
            ));
        }
        if stall.is_zero() || stall > window {
            return Err(format!(
                "psi = {}: the stall must be more than 0 and at most the window",
                quoted(text)
            ));
        }
        Ok(Self {
            resource,
            full,
            stall,
            window,
        })
    }

    /// What the kernel's trigger interface reads: `some 100000 1000000`.
    pub fn kernel_text(&self) -> String {
        format!(
            "{} {} {}",
            if self.full { "full" } else { "some" },
            self.stall.as_micros(),
            self.window.as_micros()
        )
    }
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

    /// Checks one trigger; `whole` is the table's span (for a missing key).
    pub(crate) fn validate(&self, whole: Range<usize>) -> Result<(), (Range<usize>, String)> {
        let name = &self.name;
        if let Err(why) = check_trigger_name(name.get_ref()) {
            return Err((name.span(), why));
        }
        let n = name.get_ref();
        let on = *self.on.get_ref();
        // Keys that belong to one kind only.
        let own: [(&str, Option<Range<usize>>, TriggerOn); 5] = [
            (
                "event",
                self.event.as_ref().map(Spanned::span),
                TriggerOn::Tracepoint,
            ),
            (
                "filter",
                self.filter.as_ref().map(Spanned::span),
                TriggerOn::Tracepoint,
            ),
            ("psi", self.psi.as_ref().map(Spanned::span), TriggerOn::Psi),
            (
                "cgroup",
                self.cgroup.as_ref().map(Spanned::span),
                TriggerOn::Psi,
            ),
            (
                "every",
                self.every.as_ref().map(Spanned::span),
                TriggerOn::Interval,
            ),
        ];
        for (key, span, kind) in own {
            if let Some(span) = span
                && kind != on
            {
                return Err((
                    span,
                    format!(
                        "trigger {}: `{key}` applies only to on = \"{}\", not \"{}\"",
                        quoted(n),
                        kind.as_str(),
                        on.as_str()
                    ),
                ));
            }
        }
        let required = match on {
            TriggerOn::Tracepoint if self.event.is_none() => Some("event = \"system:tracepoint\""),
            TriggerOn::Psi if self.psi.is_none() => Some("psi = \"cpu some 100ms 1s\""),
            TriggerOn::Interval if self.every.is_none() => Some("every = \"30s\""),
            _ => None,
        };
        if let Some(example) = required {
            return Err((
                whole,
                format!(
                    "trigger {}: on = \"{}\" needs {example}",
                    quoted(n),
                    on.as_str()
                ),
            ));
        }
        if let Some(event) = &self.event {
            let e = event.get_ref();
            if !e.contains(':') {
                return Err((
                    event.span(),
                    format!(
                        "trigger {}: event {} is not a tracepoint: expected system:name, \
                         e.g. sched:sched_process_exec",
                        quoted(n),
                        quoted(e)
                    ),
                ));
            }
            check_event_name(e)
                .map_err(|why| (event.span(), format!("trigger {}: {why}", quoted(n))))?;
        }
        if let Some(filter) = &self.filter {
            let f = filter.get_ref();
            if f.trim().is_empty() || f.contains('\0') || f.len() > MAX_FILTER_BYTES {
                return Err((
                    filter.span(),
                    format!(
                        "trigger {}: the filter must be 1 to {MAX_FILTER_BYTES} bytes without \
                         NUL",
                        quoted(n)
                    ),
                ));
            }
        }
        if let Some(psi) = &self.psi {
            PsiSpec::parse(psi.get_ref())
                .map_err(|why| (psi.span(), format!("trigger {}: {why}", quoted(n))))?;
        }
        if let Some(cgroup) = &self.cgroup {
            let path = cgroup.get_ref();
            if let Err(why) = check_path(path) {
                return Err((
                    cgroup.span(),
                    format!("trigger {}: cgroup {why}", quoted(n)),
                ));
            }
            if !path.is_absolute() {
                return Err((
                    cgroup.span(),
                    format!(
                        "trigger {}: cgroup {} must be an absolute path such as \
                         /sys/fs/cgroup/system.slice",
                        quoted(n),
                        quoted(&path.display().to_string())
                    ),
                ));
            }
        }
        if let Some(every) = &self.every
            && every.get_ref().get() < MIN_EVERY
        {
            return Err((
                every.span(),
                format!(
                    "trigger {}: every = {} is shorter than the 1s allowed",
                    quoted(n),
                    every.get_ref()
                ),
            ));
        }
        if let Some(count) = &self.count
            && *count.get_ref() == 0
        {
            return Err((
                count.span(),
                format!("trigger {}: count must be at least 1", quoted(n)),
            ));
        }
        for (key, value) in [("window", &self.window), ("cooldown", &self.cooldown)] {
            if let Some(v) = value
                && v.get_ref().get() > Duration::from_secs(86_400)
            {
                return Err((
                    v.span(),
                    format!(
                        "trigger {}: {key} = {} is more than a day",
                        quoted(n),
                        v.get_ref()
                    ),
                ));
            }
        }
        if let Some(w) = &self.window
            && w.get_ref().get().is_zero()
        {
            return Err((
                w.span(),
                format!("trigger {}: window must be more than 0s", quoted(n)),
            ));
        }
        if let Some(m) = &self.max_per_hour
            && *m.get_ref() > 3600
        {
            return Err((
                m.span(),
                format!(
                    "trigger {}: max_per_hour = {} is more than one a second (at most 3600; 0 \
                     counts without dumping)",
                    quoted(n),
                    m.get_ref()
                ),
            ));
        }
        if let Some(delay) = &self.post_trigger_delay
            && delay.get_ref().get() > Duration::from_secs(60)
        {
            return Err((
                delay.span(),
                format!(
                    "trigger {}: post_trigger_delay = {} is longer than the 60s allowed",
                    quoted(n),
                    delay.get_ref()
                ),
            ));
        }
        if let Some(label) = &self.label
            && let Err(why) = check_label(label.get_ref())
        {
            return Err((label.span(), format!("trigger {}: {why}", quoted(n))));
        }
        Ok(())
    }
}

/// `[A-Za-z0-9_-]`, 1 to 64 bytes.
pub fn check_trigger_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_TRIGGER_NAME_BYTES
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "trigger name {} is not valid: 1 to {MAX_TRIGGER_NAME_BYTES} characters from \
             A-Z a-z 0-9 _ -",
            quoted(name)
        ))
    }
}

/// The snapshot label rule: 1 to 64 characters from `[A-Za-z0-9._-]`, not
/// starting with `.` or `-`.
fn check_label(label: &str) -> Result<(), String> {
    let ok = !label.is_empty()
        && label.len() <= 64
        && !label.starts_with(['.', '-'])
        && label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "label {} is not valid: 1 to 64 characters from A-Z a-z 0-9 . _ -, not starting \
             with . or -",
            quoted(label)
        ))
    }
}

/// Checks every trigger and that names are unique.
pub(crate) fn validate_triggers(
    triggers: &[Spanned<TriggerConfig>],
) -> Result<(), (Range<usize>, String)> {
    for (i, t) in triggers.iter().enumerate() {
        t.get_ref().validate(t.span())?;
        let name = &t.get_ref().name;
        if triggers[..i]
            .iter()
            .any(|o| o.get_ref().name.get_ref() == name.get_ref())
        {
            return Err((
                name.span(),
                format!(
                    "trigger name {} is used twice: names must be unique",
                    quoted(name.get_ref())
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{parse, rejected_at};

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
    fn psi_values_are_parsed_and_bounded() {
        let s = PsiSpec::parse("memory full 150ms 2s").unwrap();
        assert_eq!(s.resource, PsiResource::Memory);
        assert!(s.full);
        assert_eq!(s.kernel_text(), "full 150000 2000000");
        for bad in [
            "cpu some 100ms",
            "disk some 1s 2s",
            "cpu most 1s 2s",
            "cpu some x 1s",
        ] {
            assert!(PsiSpec::parse(bad).is_err(), "{bad}");
        }
        assert!(
            PsiSpec::parse("cpu some 100ms 20s")
                .unwrap_err()
                .contains("500ms to 10s")
        );
        assert!(
            PsiSpec::parse("cpu some 2s 1s")
                .unwrap_err()
                .contains("at most the window")
        );
    }

    #[test]
    fn bad_triggers_are_rejected_at_their_line_and_column() {
        rejected_at(
            "[[trigger]]\nname = \"a b\"\non = \"loss\"\n",
            2,
            8,
            "trigger name \"a b\"",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"disk\"\n",
            3,
            6,
            "unknown variant",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"tracepoint\"\nevent = \"cpu-clock\"\n",
            4,
            9,
            "not a tracepoint",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"psi\"\npsi = \"cpu some 1s\"\n",
            4,
            7,
            "psi = \"cpu some 1s\"",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"loss\"\nevery = \"1s\"\n",
            4,
            9,
            "`every` applies only to on = \"interval\"",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"interval\"\n",
            1,
            1,
            "needs every",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"interval\"\nevery = \"100ms\"\n",
            4,
            9,
            "shorter than the 1s",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"loss\"\ncount = 0\n",
            4,
            9,
            "count must be at least 1",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"loss\"\nlabel = \"-x\"\n",
            4,
            9,
            "label \"-x\"",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"loss\"\n[[trigger]]\nname = \"x\"\non = \"loss\"\n",
            5,
            8,
            "used twice",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"psi\"\npsi = \"io some 1s 2s\"\ncgroup = \"sys\"\n",
            5,
            10,
            "absolute path",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"loss\"\nmax_per_hour = 5000\n",
            4,
            16,
            "at most 3600",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"loss\"\ncolor = 1\n",
            4,
            1,
            "unknown field",
        );
    }
}
