//! The cgroups the conditions watch and name: where the hierarchies are
//! mounted ([`CgroupRoots`]), which cgroups a `cgroup` glob names
//! ([`CgroupGlob::expand`], one level at a time, bounded), and which
//! cgroup a sampled cgroup id or a process is in ([`CgroupNames`]: from
//! /proc/PID/cgroup, else from a bounded walk of the hierarchy, at most
//! every few seconds), so a firing can name the cgroup it matched without
//! asking the recorder (whose locks a dump takes).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::host::cgroups::{CgroupHierarchy, find_hierarchy, find_mounts, walk};

/// How often a glob is expanded again (cgroups come and go).
pub const RESCAN: Duration = Duration::from_secs(2);
/// Directories a glob's expansion looks at, at most.
const MAX_VISITED: usize = 65_536;
/// A walk of the hierarchy to name an unknown cgroup id, at most this
/// often.
const WALK_EVERY: Duration = Duration::from_secs(5);

/// Where the cgroup hierarchies the conditions use are mounted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupRoots {
    /// The cgroup2 mount: PSI files, and `memory.events` where the memory
    /// controller is there.
    pub unified: Option<PathBuf>,
    /// The v1 hierarchy with the memory controller (a hybrid host).
    pub memory_v1: Option<PathBuf>,
    /// The hierarchy samples' cgroup ids are of (perf_event's).
    pub ids: Option<CgroupHierarchy>,
}

impl CgroupRoots {
    /// This machine's, from /proc/self/mounts (none when unreadable).
    pub fn of_this_machine() -> Self {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        Self::from_mounts(&mounts)
    }

    pub fn from_mounts(mounts: &str) -> Self {
        let (unified, memory_v1) = find_mounts(mounts, "memory");
        CgroupRoots {
            unified,
            memory_v1,
            ids: find_hierarchy(mounts),
        }
    }

    /// Where the memory counters are: cgroup2 when its root offers the
    /// memory controller, else the v1 memory hierarchy.
    pub fn memory(&self) -> Option<MemoryRoot> {
        if let Some(unified) = &self.unified {
            let controllers =
                std::fs::read_to_string(unified.join("cgroup.controllers")).unwrap_or_default();
            if controllers.split_whitespace().any(|c| c == "memory") {
                return Some(MemoryRoot::V2(unified.clone()));
            }
        }
        self.memory_v1.clone().map(MemoryRoot::V1)
    }
}

/// The hierarchy whose memory counters a "cgroup-memory" trigger reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryRoot {
    /// `memory.events` under the cgroup2 mount.
    V2(PathBuf),
    /// `memory.oom_control` and `memory.failcnt` under the v1 mount.
    V1(PathBuf),
}

impl MemoryRoot {
    pub fn mount(&self) -> &Path {
        match self {
            MemoryRoot::V2(p) | MemoryRoot::V1(p) => p,
        }
    }
}

/// The directory of cgroup `path` (relative to `mount`'s root, `/`-led).
pub fn dir_of(mount: &Path, path: &str) -> PathBuf {
    let rel = path.trim_start_matches('/');
    if rel.is_empty() {
        mount.to_path_buf()
    } else {
        mount.join(rel)
    }
}

enum Part {
    Literal(String),
    Pattern(glob::Pattern),
}

/// A `cgroup` value: a glob of cgroup paths relative to a hierarchy's root
/// (checked by the config; a path written under a cgroup mount, as
/// `/sys/fs/cgroup/x`, is taken relative to it).
pub struct CgroupGlob {
    text: String,
    parts: Vec<Part>,
}

impl CgroupGlob {
    /// `text` with the mount among `mounts` it starts with taken off.
    pub fn new(text: &str, mounts: &[&Path]) -> Result<Self, String> {
        flightrec_config::check_cgroup_glob(text)?;
        let mut rel = text.to_string();
        for mount in mounts {
            if let Ok(rest) = Path::new(text).strip_prefix(mount)
                && mount.as_os_str().len() > 1
            {
                rel = format!("/{}", rest.to_string_lossy());
                break;
            }
        }
        let parts = rel
            .split('/')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let literal = !p.contains(['*', '?', '[']);
                if literal {
                    Ok(Part::Literal(p.to_string()))
                } else {
                    glob::Pattern::new(p)
                        .map(Part::Pattern)
                        .map_err(|e| format!("{p}: {}", e.msg))
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CgroupGlob { text: rel, parts })
    }

    /// The glob relative to the root, as given or with the mount taken
    /// off.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether it names one path (no pattern in it).
    pub fn is_literal(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Literal(_)))
    }

    /// The cgroups under `mount` it names, sorted, at most `max + 1` (so
    /// a caller sees it was more than `max`); directories only, `.`-led
    /// names matched only by a `.` in the pattern.
    pub fn expand(&self, mount: &Path, max: usize) -> Vec<String> {
        let options = glob::MatchOptions {
            case_sensitive: true,
            require_literal_separator: true,
            require_literal_leading_dot: true,
        };
        let mut level: Vec<String> = vec![String::new()];
        let mut visited = 0usize;
        for part in &self.parts {
            let mut next = Vec::new();
            for path in &level {
                let dir = dir_of(mount, path);
                match part {
                    Part::Literal(name) => {
                        visited += 1;
                        if dir.join(name).is_dir() {
                            next.push(format!("{path}/{name}"));
                        }
                    }
                    Part::Pattern(pattern) => {
                        let Ok(entries) = std::fs::read_dir(&dir) else {
                            continue;
                        };
                        for entry in entries.flatten() {
                            visited += 1;
                            if visited > MAX_VISITED {
                                break;
                            }
                            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                                continue;
                            }
                            if let Some(name) = entry.file_name().to_str()
                                && pattern.matches_with(name, options)
                            {
                                next.push(format!("{path}/{name}"));
                            }
                        }
                    }
                }
                if visited > MAX_VISITED {
                    break;
                }
            }
            next.sort();
            level = next;
        }
        if self.parts.is_empty() {
            return vec!["/".to_string()];
        }
        level.truncate(max.saturating_add(1));
        level
    }
}

/// Names cgroup ids and processes' cgroups in the hierarchy samples
/// name, as paths relative to its root.
pub struct CgroupNames {
    hierarchy: Option<CgroupHierarchy>,
    by_id: HashMap<u64, String>,
    last_walk: Option<Instant>,
}

impl CgroupNames {
    pub fn new(hierarchy: Option<CgroupHierarchy>) -> Self {
        CgroupNames {
            hierarchy,
            by_id: HashMap::new(),
            last_walk: None,
        }
    }

    /// The cgroup process `pid` is in now, from /proc/PID/cgroup (None
    /// once it was reaped).
    pub fn of_pid(&self, pid: u32) -> Option<String> {
        let h = self.hierarchy.as_ref()?;
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        cgroup_line(&text, h.version).map(str::to_string)
    }

    /// The path of cgroup `id`: known, else that of process `pid` when
    /// its directory is `id`, else found by a walk of the hierarchy (at
    /// most every [`WALK_EVERY`]).
    pub fn path_of(&mut self, id: u64, pid: Option<u32>) -> Option<String> {
        if let Some(p) = self.by_id.get(&id) {
            return Some(p.clone());
        }
        let mount = self.hierarchy.as_ref()?.mount.clone();
        if let Some(path) = pid.and_then(|p| self.of_pid(p))
            && std::fs::metadata(dir_of(&mount, &path)).is_ok_and(|m| m.ino() == id)
        {
            self.by_id.insert(id, path.clone());
            return Some(path);
        }
        let now = Instant::now();
        if self.last_walk.is_some_and(|t| now < t + WALK_EVERY) {
            return None;
        }
        self.last_walk = Some(now);
        self.by_id = walk(&mount).into_iter().map(|c| (c.id, c.path)).collect();
        self.by_id.get(&id).cloned()
    }
}

/// The path on the line of /proc/PID/cgroup that is the hierarchy's:
/// `0::/path` for cgroup2, `N:...,perf_event,...:/path` for v1.
fn cgroup_line(text: &str, version: u8) -> Option<&str> {
    text.lines().find_map(|line| {
        let mut f = line.splitn(3, ':');
        let (Some(num), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            return None;
        };
        let ours = if version == 2 {
            num == "0" && controllers.is_empty()
        } else {
            controllers.split(',').any(|c| c == "perf_event")
        };
        ours.then_some(path)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_glob_names_directories_one_level_a_component() {
        let dir = tempfile::tempdir().unwrap();
        for d in [
            "kubepods.slice/pod-a/ctr1",
            "kubepods.slice/pod-b",
            "kubepods.slice/.hidden",
            "system.slice/x.service",
        ] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        std::fs::write(dir.path().join("kubepods.slice/cgroup.procs"), "").unwrap();
        let g = CgroupGlob::new("/kubepods.slice/*", &[]).unwrap();
        assert!(!g.is_literal());
        assert_eq!(
            g.expand(dir.path(), 64),
            ["/kubepods.slice/pod-a", "/kubepods.slice/pod-b"]
        );
        assert_eq!(g.expand(dir.path(), 1).len(), 2, "max + 1 shows the excess");
        let deep = CgroupGlob::new("/*/pod-?/ctr[0-9]", &[]).unwrap();
        assert_eq!(deep.expand(dir.path(), 64), ["/kubepods.slice/pod-a/ctr1"]);
        let literal = CgroupGlob::new("/system.slice/x.service", &[]).unwrap();
        assert!(literal.is_literal());
        assert_eq!(literal.expand(dir.path(), 64), ["/system.slice/x.service"]);
        assert!(
            CgroupGlob::new("/nosuch/*", &[])
                .unwrap()
                .expand(dir.path(), 64)
                .is_empty()
        );
        assert_eq!(
            CgroupGlob::new("/", &[]).unwrap().expand(dir.path(), 64),
            ["/"]
        );
    }

    #[test]
    fn a_path_under_a_mount_is_taken_relative_to_it() {
        let mount = Path::new("/sys/fs/cgroup/unified");
        let g = CgroupGlob::new("/sys/fs/cgroup/unified/froom", &[mount]).unwrap();
        assert_eq!(g.text(), "/froom");
        let g = CgroupGlob::new("/sys/fs/cgroup/unifiedx/froom", &[mount]).unwrap();
        assert_eq!(g.text(), "/sys/fs/cgroup/unifiedx/froom");
        assert_eq!(
            CgroupGlob::new("/sys/fs/cgroup/unified", &[mount])
                .unwrap()
                .text(),
            "/"
        );
    }

    #[test]
    fn the_hierarchys_line_of_proc_pid_cgroup_is_found() {
        let text = "4:memory:/libpod_parent/libpod-a2\n\
                    2:cpu,perf_event:/v1path\n\
                    0::/froom\n";
        assert_eq!(cgroup_line(text, 2), Some("/froom"));
        assert_eq!(cgroup_line(text, 1), Some("/v1path"));
        assert_eq!(cgroup_line("4:memory:/x\n", 2), None);
    }

    #[test]
    fn mounts_and_the_memory_root_of_a_hybrid_host() {
        let roots = CgroupRoots::from_mounts(
            "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n\
             cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n",
        );
        assert_eq!(roots.unified, Some("/sys/fs/cgroup/unified".into()));
        assert_eq!(roots.ids.as_ref().map(|h| h.version), Some(2));
        assert_eq!(dir_of(Path::new("/m"), "/"), Path::new("/m"));
        assert_eq!(dir_of(Path::new("/m"), "/a/b"), Path::new("/m/a/b"));
    }
}
