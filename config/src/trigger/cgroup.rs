//! The container keys of a `[[trigger]]`: `cgroup` (a glob of cgroup
//! paths, for "psi" and "cgroup-memory"), `events` (the memory counters a
//! "cgroup-memory" trigger watches) and `scope` (what part of the machine
//! its snapshots hold). Each value's grammar and checks; the daemon does
//! the matching.

use crate::message::quoted;

/// Cgroups one trigger's glob may name at once: beyond it the trigger is
/// refused at start (and, for cgroups that appear later, the rest are not
/// watched, said in the log).
pub const MAX_TRIGGER_CGROUPS: usize = 64;
/// Path components of a cgroup glob at most.
pub const MAX_CGROUP_DEPTH: usize = 32;
/// Longest cgroup path or glob.
pub const MAX_CGROUP_BYTES: usize = 4096;

/// A counter of a cgroup's memory events (cgroup v2 `memory.events`; on a
/// v1 memory hierarchy `oom_kill` is read from `memory.oom_control` and
/// `max` is `memory.failcnt` plus `memory.memsw.failcnt`, and `oom` and
/// `high` do not exist).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MemoryCounter {
    /// The memory limit was reached and the OOM killer was invoked.
    Oom,
    /// A process of the cgroup was killed by the OOM killer.
    OomKill,
    /// Usage hit the limit (`memory.max`; v1: the fail counts).
    Max,
    /// Usage went over `memory.high` and was throttled.
    High,
}

impl MemoryCounter {
    pub const ALL: [MemoryCounter; 4] = [
        MemoryCounter::Oom,
        MemoryCounter::OomKill,
        MemoryCounter::Max,
        MemoryCounter::High,
    ];

    /// Its name in `memory.events` and in `events = [...]`.
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryCounter::Oom => "oom",
            MemoryCounter::OomKill => "oom_kill",
            MemoryCounter::Max => "max",
            MemoryCounter::High => "high",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }

    /// Whether a v1 memory hierarchy counts it.
    pub fn in_v1(self) -> bool {
        matches!(self, MemoryCounter::OomKill | MemoryCounter::Max)
    }
}

/// What part of the machine a trigger's snapshots hold (`scope`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TriggerScope {
    /// All of it (the default, but for "cgroup-memory").
    Machine,
    /// The cgroup that fired it: the container of the task a tracepoint
    /// hit (for `oom:mark_victim`, of the victim), the cgroup whose PSI
    /// file or memory counter fired (the default of "cgroup-memory").
    Matched,
    /// A cgroup path relative to the hierarchy's root, descendants
    /// included.
    Cgroup(String),
    /// A container by id, id prefix or name.
    Container(String),
}

impl TriggerScope {
    /// Parses `machine`, `matched`, `cgroup:/PATH` or `container:ID|NAME`;
    /// the error is a sentence.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "machine" => return Ok(TriggerScope::Machine),
            "matched" => return Ok(TriggerScope::Matched),
            _ => {}
        }
        if let Some(path) = text.strip_prefix("cgroup:") {
            check_cgroup_path(path).map_err(|why| format!("scope = {}: {why}", quoted(text)))?;
            return Ok(TriggerScope::Cgroup(path.to_string()));
        }
        if let Some(key) = text.strip_prefix("container:") {
            let ok = !key.is_empty()
                && key.len() <= 128
                && key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
            if !ok {
                return Err(format!(
                    "scope = {}: {} is not a container id or name: 1 to 128 characters from \
                     A-Z a-z 0-9 _ . -",
                    quoted(text),
                    quoted(key)
                ));
            }
            return Ok(TriggerScope::Container(key.to_string()));
        }
        Err(format!(
            "scope = {} is not \"machine\", \"matched\", \"cgroup:/PATH\" or \
             \"container:ID|NAME\"",
            quoted(text)
        ))
    }

    /// As the scope of a dump describes it.
    pub fn describe(&self) -> String {
        match self {
            TriggerScope::Machine => "machine".into(),
            TriggerScope::Matched => "matched".into(),
            TriggerScope::Cgroup(p) => format!("cgroup:{p}"),
            TriggerScope::Container(c) => format!("container:{c}"),
        }
    }
}

/// A cgroup path relative to the hierarchy's root: `/` then components,
/// none of them `.` or `..`, no NUL.
fn check_cgroup_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/')
        || path.len() > MAX_CGROUP_BYTES
        || path.contains('\0')
        || path.split('/').any(|p| p == "." || p == "..")
    {
        return Err(format!(
            "{} is not a cgroup path: one relative to the cgroup root, starting with '/' \
             (e.g. /system.slice/nginx.service), without '.' or '..', at most \
             {MAX_CGROUP_BYTES} bytes",
            quoted(path)
        ));
    }
    Ok(())
}

/// Checks a `cgroup` glob: a cgroup path relative to the cgroup2 root (or
/// under the cgroup2 mount, `/sys/fs/cgroup/...`), whose components may
/// hold `*`, `?` and `[...]`; no `**` (a component matches one directory
/// level), at most [`MAX_CGROUP_DEPTH`] components.
pub fn check_cgroup_glob(glob: &str) -> Result<(), String> {
    check_cgroup_path(glob)?;
    let parts: Vec<&str> = glob.split('/').skip(1).collect();
    if glob != "/" && parts.iter().any(|p| p.is_empty()) {
        return Err(format!(
            "{} has an empty component (\"//\" or a trailing '/')",
            quoted(glob)
        ));
    }
    if parts.len() > MAX_CGROUP_DEPTH {
        return Err(format!(
            "{} has more than {MAX_CGROUP_DEPTH} components",
            quoted(glob)
        ));
    }
    for part in parts {
        if part.contains("**") {
            return Err(format!(
                "{}: `**` is not supported, a component matches one level (use * per level)",
                quoted(glob)
            ));
        }
        if let Err(e) = glob::Pattern::new(part) {
            return Err(format!(
                "{} is not a valid glob: {} in {}",
                quoted(glob),
                e.msg,
                quoted(part)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_parse_and_bad_ones_say_what_is_expected() {
        assert_eq!(TriggerScope::parse("matched"), Ok(TriggerScope::Matched));
        assert_eq!(TriggerScope::parse("machine"), Ok(TriggerScope::Machine));
        assert_eq!(
            TriggerScope::parse("cgroup:/system.slice/nginx.service"),
            Ok(TriggerScope::Cgroup("/system.slice/nginx.service".into()))
        );
        assert_eq!(
            TriggerScope::parse("container:web-1"),
            Ok(TriggerScope::Container("web-1".into()))
        );
        assert!(TriggerScope::parse("cgroup:relative").is_err());
        assert!(TriggerScope::parse("cgroup:/a/../b").is_err());
        assert!(TriggerScope::parse("container:a b").is_err());
        assert!(TriggerScope::parse("container:").is_err());
        assert!(
            TriggerScope::parse("pod:x")
                .unwrap_err()
                .contains("\"machine\", \"matched\"")
        );
    }

    #[test]
    fn globs_are_paths_with_patterns_per_component() {
        for good in [
            "/",
            "/kubepods.slice/*",
            "/libpod_parent/libpod-*",
            "/sys/fs/cgroup/unified/x?",
            "/a/[bc]d",
        ] {
            assert_eq!(check_cgroup_glob(good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("kubepods.slice", "not a cgroup path"),
            ("/a/../b", "not a cgroup path"),
            ("/a//b", "empty component"),
            ("/a/", "empty component"),
            ("/a/**", "`**`"),
            ("/a/[b", "not a valid glob"),
        ] {
            let e = check_cgroup_glob(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let deep = "/a".repeat(MAX_CGROUP_DEPTH + 1);
        assert!(check_cgroup_glob(&deep).unwrap_err().contains("components"));
    }

    #[test]
    fn memory_counters_by_name_and_where_they_exist() {
        assert_eq!(
            MemoryCounter::parse("oom_kill"),
            Some(MemoryCounter::OomKill)
        );
        assert_eq!(MemoryCounter::parse("low"), None);
        assert!(MemoryCounter::Max.in_v1());
        assert!(!MemoryCounter::High.in_v1());
    }
}
