//! What serde cannot check about a `[[trigger]]`: its name, which keys its
//! kind needs or forbids, the values of those keys and its rate limits.
//! Each check returns the span of the offending value with its message, so
//! the error names the file, line and column; the first problem wins, so
//! the checks run in a fixed order.

use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

use super::{
    MAX_TRIGGER_NAME_BYTES, MIN_EVERY, MemoryCounter, PsiSpec, TriggerConfig, TriggerOn,
    TriggerScope, check_cgroup_glob,
};
use crate::checks::{MAX_FILTER_BYTES, check_event_name};
use crate::message::quoted;

/// A key, where it is (if given) and the kinds of trigger it applies to.
type KeyOfKinds<'a> = (&'static str, Option<Range<usize>>, &'a [TriggerOn]);

impl TriggerConfig {
    /// Checks one trigger; `whole` is the table's span (for a missing key).
    pub(crate) fn validate(&self, whole: Range<usize>) -> Result<(), (Range<usize>, String)> {
        let name = &self.name;
        if let Err(why) = check_trigger_name(name.get_ref()) {
            return Err((name.span(), why));
        }
        let n = name.get_ref();
        self.check_keys_match_kind(n)?;
        self.check_kind_has_its_key(n, whole)?;
        // A loss trigger has no key of its own: only the shared checks
        // below apply to it.
        self.check_tracepoint_keys(n)?;
        self.check_psi_keys(n)?;
        self.check_memory_keys(n)?;
        self.check_interval_keys(n)?;
        self.check_scope(n)?;
        self.check_rate_limits(n)?;
        self.check_snapshot_keys(n)
    }

    /// Rejects a key that belongs to other kinds than `on` (an `every` on
    /// a tracepoint trigger would silently do nothing).
    fn check_keys_match_kind(&self, n: &str) -> Result<(), (Range<usize>, String)> {
        let on = *self.on.get_ref();
        let own: [KeyOfKinds; 6] = [
            (
                "event",
                self.event.as_ref().map(Spanned::span),
                &[TriggerOn::Tracepoint],
            ),
            (
                "filter",
                self.filter.as_ref().map(Spanned::span),
                &[TriggerOn::Tracepoint],
            ),
            (
                "psi",
                self.psi.as_ref().map(Spanned::span),
                &[TriggerOn::Psi],
            ),
            (
                "cgroup",
                self.cgroup.as_ref().map(Spanned::span),
                &[TriggerOn::Psi, TriggerOn::CgroupMemory],
            ),
            (
                "events",
                self.events.as_ref().map(Spanned::span),
                &[TriggerOn::CgroupMemory],
            ),
            (
                "every",
                self.every.as_ref().map(Spanned::span),
                &[TriggerOn::Interval],
            ),
        ];
        for (key, span, kinds) in own {
            if let Some(span) = span
                && !kinds.contains(&on)
            {
                let kinds: Vec<String> = kinds
                    .iter()
                    .map(|k| format!("\"{}\"", k.as_str()))
                    .collect();
                return Err((
                    span,
                    format!(
                        "trigger {}: `{key}` applies only to on = {}, not \"{}\"",
                        quoted(n),
                        kinds.join(" or "),
                        on.as_str()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Rejects a kind without the key that says what it watches; the error
    /// points at the whole table, since the key is missing.
    fn check_kind_has_its_key(
        &self,
        n: &str,
        whole: Range<usize>,
    ) -> Result<(), (Range<usize>, String)> {
        let on = *self.on.get_ref();
        let required = match on {
            TriggerOn::Tracepoint if self.event.is_none() => Some("event = \"system:tracepoint\""),
            TriggerOn::Psi if self.psi.is_none() => Some("psi = \"cpu some 100ms 1s\""),
            TriggerOn::CgroupMemory if self.cgroup.is_none() => {
                Some("cgroup = \"/system.slice/*\" (a glob of cgroup paths)")
            }
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
        Ok(())
    }

    /// `event` and `filter` (on = "tracepoint").
    fn check_tracepoint_keys(&self, n: &str) -> Result<(), (Range<usize>, String)> {
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
        Ok(())
    }

    /// `psi` and `cgroup` (on = "psi", "cgroup-memory").
    fn check_psi_keys(&self, n: &str) -> Result<(), (Range<usize>, String)> {
        if let Some(psi) = &self.psi {
            PsiSpec::parse(psi.get_ref())
                .map_err(|why| (psi.span(), format!("trigger {}: {why}", quoted(n))))?;
        }
        if let Some(cgroup) = &self.cgroup {
            check_cgroup_glob(cgroup.get_ref()).map_err(|why| {
                (
                    cgroup.span(),
                    format!(
                        "trigger {}: cgroup {why}; give a path relative to the cgroup2 root \
                         such as /system.slice/*",
                        quoted(n)
                    ),
                )
            })?;
        }
        Ok(())
    }

    /// `events` (on = "cgroup-memory"): known counters, each once.
    fn check_memory_keys(&self, n: &str) -> Result<(), (Range<usize>, String)> {
        let Some(events) = &self.events else {
            return Ok(());
        };
        if events.get_ref().is_empty() {
            return Err((
                events.span(),
                format!(
                    "trigger {}: events is empty: name the counters to watch, e.g. \
                     [\"oom_kill\"]",
                    quoted(n)
                ),
            ));
        }
        for (i, e) in events.get_ref().iter().enumerate() {
            let name = e.get_ref();
            if MemoryCounter::parse(name).is_none() {
                let known: Vec<&str> = MemoryCounter::ALL.iter().map(|c| c.as_str()).collect();
                return Err((
                    e.span(),
                    format!(
                        "trigger {}: {} is not a memory event counter: one of {}",
                        quoted(n),
                        quoted(name),
                        known.join(", ")
                    ),
                ));
            }
            if events.get_ref()[..i].iter().any(|o| o.get_ref() == name) {
                return Err((
                    e.span(),
                    format!("trigger {}: {} is listed twice", quoted(n), quoted(name)),
                ));
            }
        }
        Ok(())
    }

    /// `scope`: its grammar, and "matched" only where a firing has a cgroup
    /// (a tracepoint's task, a cgroup's PSI file or counter).
    fn check_scope(&self, n: &str) -> Result<(), (Range<usize>, String)> {
        let Some(scope) = &self.scope else {
            return Ok(());
        };
        let parsed = TriggerScope::parse(scope.get_ref())
            .map_err(|why| (scope.span(), format!("trigger {}: {why}", quoted(n))))?;
        if parsed != TriggerScope::Matched {
            return Ok(());
        }
        let on = *self.on.get_ref();
        let why = match on {
            TriggerOn::Loss | TriggerOn::Interval => Some(format!(
                "on = \"{}\" fires for the whole machine, not for a task or cgroup",
                on.as_str()
            )),
            TriggerOn::Psi if self.cgroup.is_none() => Some(
                "a PSI trigger on /proc/pressure watches the whole machine: add cgroup = \
                 \"/PATH\" to watch cgroups"
                    .to_string(),
            ),
            _ => None,
        };
        match why {
            Some(why) => Err((
                scope.span(),
                format!(
                    "trigger {}: scope = \"matched\" has nothing to match: {why}",
                    quoted(n)
                ),
            )),
            None => Ok(()),
        }
    }

    /// `every` (on = "interval").
    fn check_interval_keys(&self, n: &str) -> Result<(), (Range<usize>, String)> {
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
        Ok(())
    }

    /// `count`, `window`, `cooldown` and `max_per_hour`, which every kind
    /// shares.
    fn check_rate_limits(&self, n: &str) -> Result<(), (Range<usize>, String)> {
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
        Ok(())
    }

    /// `post_trigger_delay` and `label`: what the trigger's snapshots are.
    fn check_snapshot_keys(&self, n: &str) -> Result<(), (Range<usize>, String)> {
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
        if let Some(before) = &self.before
            && before.get_ref().get() > MAX_BEFORE
        {
            return Err((
                before.span(),
                format!(
                    "trigger {}: before = {} is longer than the 7days a window may reach back",
                    quoted(n),
                    before.get_ref()
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

/// Longest `before` (the API's limit too).
const MAX_BEFORE: Duration = Duration::from_secs(7 * 24 * 3600);

/// `[A-Za-z0-9_-]`, 1 to 64 bytes.
pub fn check_trigger_name(name: &str) -> Result<(), String> {
    let ok = crate::checks::is_word(name, MAX_TRIGGER_NAME_BYTES);
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
    use crate::test_support::rejected_at;

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
            "not a cgroup path",
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
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"loss\"\nbefore = \"8days\"\n",
            4,
            10,
            "before = 8days is longer than the 7days",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"loss\"\nbefore = \"soon\"\n",
            4,
            10,
            "soon",
        );
    }

    #[test]
    fn container_keys_are_rejected_at_their_line_and_column() {
        let memory = "[[trigger]]\nname = \"m\"\non = \"cgroup-memory\"\n";
        rejected_at(memory, 1, 1, "needs cgroup = ");
        rejected_at(
            &format!("{memory}cgroup = \"/a/**\"\n"),
            4,
            10,
            "`**` is not supported",
        );
        rejected_at(
            &format!("{memory}cgroup = \"/a/[b\"\n"),
            4,
            10,
            "not a valid glob",
        );
        rejected_at(
            &format!("{memory}cgroup = \"/a\"\nevents = [\"oom_kill\", \"swap\"]\n"),
            5,
            23,
            "\"swap\" is not a memory event counter: one of oom, oom_kill, max, high",
        );
        rejected_at(
            &format!("{memory}cgroup = \"/a\"\nevents = [\"max\", \"max\"]\n"),
            5,
            18,
            "listed twice",
        );
        rejected_at(
            &format!("{memory}cgroup = \"/a\"\nevents = []\n"),
            5,
            10,
            "events is empty",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"loss\"\nevents = [\"oom\"]\n",
            4,
            10,
            "`events` applies only to on = \"cgroup-memory\"",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"loss\"\ncgroup = \"/a\"\n",
            4,
            10,
            "`cgroup` applies only to on = \"psi\" or \"cgroup-memory\"",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"loss\"\nscope = \"pod:x\"\n",
            4,
            9,
            "is not \"machine\", \"matched\"",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"loss\"\nscope = \"cgroup:x\"\n",
            4,
            9,
            "is not a cgroup path",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"interval\"\nevery = \"1s\"\nscope = \"matched\"\n",
            5,
            9,
            "nothing to match",
        );
        rejected_at(
            "[[trigger]]\nname = \"x\"\non = \"psi\"\npsi = \"io some 1s 2s\"\nscope = \"matched\"\n",
            5,
            9,
            "add cgroup",
        );
    }
}
