//! "cgroup-memory" conditions: the memory event counters of the cgroups a
//! glob names, read a few times a second. cgroup2's `memory.events`
//! counts `oom`, `oom_kill`, `max` and `high`; a v1 memory hierarchy (a
//! hybrid host, where cgroup2 has no memory controller) counts `oom_kill`
//! in `memory.oom_control` and `max` as `memory.failcnt` (plus
//! `memory.memsw.failcnt` where swap is accounted), under the same
//! relative path. The glob is expanded again every few seconds, so
//! cgroups created later are watched too (from zero: a container that
//! hit its limit before it was first seen still fires), at most
//! [`MAX_TRIGGER_CGROUPS`].

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use flightrec_config::{MAX_TRIGGER_CGROUPS, MemoryCounter};

use super::cgroups::{CgroupGlob, MemoryRoot, RESCAN, dir_of};

/// How often the counters are read.
pub const MEMORY_POLL: Duration = Duration::from_millis(250);
/// Cgroups remembered as seen, per trigger (beyond it the memory starts
/// over: a cgroup seen before may then count from zero once more).
const MAX_SEEN: usize = 4096;

/// The counters of one cgroup, in [`MemoryCounter::ALL`]'s order; None
/// for one this hierarchy does not count.
pub type Counts = [Option<u64>; 4];

fn slot(c: MemoryCounter) -> usize {
    MemoryCounter::ALL
        .iter()
        .position(|&x| x == c)
        .unwrap_or_default()
}

/// The value after `name` on a `name value` line of `text`.
fn field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The counters `wanted` of cgroup `path` under `root`; None when the
/// cgroup (or its files) cannot be read, e.g. it is gone.
pub fn read_counts(root: &MemoryRoot, path: &str, wanted: &[MemoryCounter]) -> Option<Counts> {
    let dir = dir_of(root.mount(), path);
    let mut counts: Counts = [None; 4];
    match root {
        MemoryRoot::V2(_) => {
            let text = std::fs::read_to_string(dir.join("memory.events")).ok()?;
            for &c in wanted {
                counts[slot(c)] = field(&text, c.as_str());
            }
        }
        MemoryRoot::V1(_) => {
            for &c in wanted {
                counts[slot(c)] = match c {
                    MemoryCounter::OomKill => {
                        let text = std::fs::read_to_string(dir.join("memory.oom_control")).ok()?;
                        field(&text, "oom_kill")
                    }
                    MemoryCounter::Max => {
                        // Charges refused by the memory limit, and by the
                        // memory+swap limit where swap is accounted (with
                        // both limits equal, the latter refuses first).
                        let failcnt = |name: &str| -> Option<u64> {
                            std::fs::read_to_string(dir.join(name))
                                .ok()?
                                .trim()
                                .parse()
                                .ok()
                        };
                        let memory = failcnt("memory.failcnt")?;
                        Some(memory.saturating_add(failcnt("memory.memsw.failcnt").unwrap_or(0)))
                    }
                    MemoryCounter::Oom | MemoryCounter::High => None,
                };
            }
        }
    }
    Some(counts)
}

/// Which counters grew from `before` to `now`, `"oom_kill 0 -> 1"` each,
/// and by how much in all.
pub fn growth(before: &Counts, now: &Counts, wanted: &[MemoryCounter]) -> (u64, Vec<String>) {
    let mut total = 0u64;
    let mut said = Vec::new();
    for &c in wanted {
        let i = slot(c);
        if let (Some(b), Some(n)) = (before[i], now[i])
            && n > b
        {
            total = total.saturating_add(n - b);
            said.push(format!("{} {b} -> {n}", c.as_str()));
        }
    }
    (total, said)
}

/// A counter that grew: in which cgroup, what, and by how much.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grown {
    pub cgroup: String,
    pub times: u64,
    /// `cgroup /x: oom_kill 0 -> 1`.
    pub matched: String,
}

/// The state of one "cgroup-memory" trigger.
pub struct MemoryWatch {
    pub glob: CgroupGlob,
    pub root: MemoryRoot,
    pub counters: Vec<MemoryCounter>,
    /// The cgroups watched and their last counts.
    pub watched: BTreeMap<String, Counts>,
    seen: HashSet<String>,
    /// The glob named more than the cgroups watched (said once).
    over: bool,
    pub next_poll: Instant,
    pub next_scan: Instant,
}

impl MemoryWatch {
    /// Watches the cgroups `glob` names now, from their counts now; more
    /// than [`MAX_TRIGGER_CGROUPS`] is an error naming the count.
    pub fn open(
        glob: CgroupGlob,
        root: MemoryRoot,
        counters: Vec<MemoryCounter>,
        now: Instant,
    ) -> Result<Self, String> {
        let found = glob.expand(root.mount(), MAX_TRIGGER_CGROUPS);
        if found.len() > MAX_TRIGGER_CGROUPS {
            return Err(format!(
                "cgroup {} names more than {MAX_TRIGGER_CGROUPS} cgroups under {}: narrow the glob",
                glob.text(),
                root.mount().display()
            ));
        }
        if glob.is_literal() && found.is_empty() {
            return Err(format!(
                "cgroup {} does not exist under {}",
                glob.text(),
                root.mount().display()
            ));
        }
        let mut watched = BTreeMap::new();
        for path in &found {
            match read_counts(&root, path, &counters) {
                Some(counts) => {
                    watched.insert(path.clone(), counts);
                }
                None => tracing::warn!(
                    "cgroup {path} has no memory counters under {} (no memory controller \
                     there?): not watched",
                    root.mount().display()
                ),
            }
        }
        Ok(MemoryWatch {
            seen: found.into_iter().collect(),
            glob,
            root,
            counters,
            watched,
            over: false,
            next_poll: now + MEMORY_POLL,
            next_scan: now + RESCAN,
        })
    }

    /// Expands the glob again: cgroups gone are dropped, new ones watched
    /// from zero (a cgroup seen before, from its counts now).
    pub fn rescan(&mut self, trigger: &str) {
        let found = self.glob.expand(self.root.mount(), MAX_TRIGGER_CGROUPS);
        let over = found.len() > MAX_TRIGGER_CGROUPS;
        if over && !self.over {
            tracing::warn!(
                trigger,
                "cgroup {} names more than {MAX_TRIGGER_CGROUPS} cgroups: only the first \
                 {MAX_TRIGGER_CGROUPS} are watched",
                self.glob.text()
            );
        }
        self.over = over;
        let found: Vec<String> = found.into_iter().take(MAX_TRIGGER_CGROUPS).collect();
        self.watched.retain(|p, _| found.contains(p));
        for path in found {
            if self.watched.contains_key(&path) {
                continue;
            }
            let Some(now) = read_counts(&self.root, &path, &self.counters) else {
                continue;
            };
            if self.seen.len() >= MAX_SEEN {
                self.seen.clear();
            }
            let new = self.seen.insert(path.clone());
            let from = if new { now.map(|c| c.map(|_| 0)) } else { now };
            self.watched.insert(path, from);
        }
    }

    /// Reads the counters: each cgroup whose counters grew since the last
    /// read. A cgroup that cannot be read any more is dropped.
    pub fn poll(&mut self) -> Vec<Grown> {
        let mut grown = Vec::new();
        let mut gone = Vec::new();
        for (path, before) in &mut self.watched {
            let Some(now) = read_counts(&self.root, path, &self.counters) else {
                gone.push(path.clone());
                continue;
            };
            let (times, said) = growth(before, &now, &self.counters);
            *before = now;
            if times > 0 {
                grown.push(Grown {
                    cgroup: path.clone(),
                    times,
                    matched: format!("cgroup {path}: {}", said.join(", ")),
                });
            }
        }
        for path in gone {
            self.watched.remove(&path);
        }
        grown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn v2_cgroup(root: &Path, path: &str, events: &str) {
        let dir = dir_of(root, path);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("memory.events"), events).unwrap();
    }

    fn events(oom: u64, oom_kill: u64, max: u64) -> String {
        format!("low 0\nhigh 0\nmax {max}\noom {oom}\noom_kill {oom_kill}\noom_group_kill 0\n")
    }

    #[test]
    fn v2_counters_that_grow_fire_with_what_grew() {
        let dir = tempfile::tempdir().unwrap();
        let root = MemoryRoot::V2(dir.path().to_path_buf());
        v2_cgroup(dir.path(), "/pods/a", &events(0, 0, 3));
        v2_cgroup(dir.path(), "/pods/b", &events(0, 0, 0));
        let glob = CgroupGlob::new("/pods/*", &[]).unwrap();
        let wanted = vec![MemoryCounter::OomKill, MemoryCounter::Max];
        let mut w = MemoryWatch::open(glob, root, wanted, Instant::now()).unwrap();
        assert_eq!(w.watched.len(), 2);
        assert!(w.poll().is_empty(), "counts at start are the baseline");
        v2_cgroup(dir.path(), "/pods/a", &events(1, 1, 40));
        let grown = w.poll();
        assert_eq!(
            grown,
            [Grown {
                cgroup: "/pods/a".into(),
                times: 38,
                matched: "cgroup /pods/a: oom_kill 0 -> 1, max 3 -> 40".into()
            }]
        );
        assert!(w.poll().is_empty(), "once");
        // A cgroup created later counts from zero; one removed is dropped.
        v2_cgroup(dir.path(), "/pods/c", &events(0, 2, 0));
        std::fs::remove_dir_all(dir.path().join("pods/b")).unwrap();
        w.rescan("t");
        assert_eq!(w.watched.keys().collect::<Vec<_>>(), ["/pods/a", "/pods/c"]);
        let grown = w.poll();
        assert_eq!(grown.len(), 1);
        assert_eq!(grown[0].matched, "cgroup /pods/c: oom_kill 0 -> 2");
    }

    #[test]
    fn v1_counters_come_from_oom_control_and_failcnt() {
        let dir = tempfile::tempdir().unwrap();
        let cg = dir.path().join("froom");
        std::fs::create_dir_all(&cg).unwrap();
        std::fs::write(
            cg.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
        )
        .unwrap();
        std::fs::write(cg.join("memory.failcnt"), "36\n").unwrap();
        let root = MemoryRoot::V1(dir.path().to_path_buf());
        let all = MemoryCounter::ALL;
        let counts = read_counts(&root, "/froom", &all).unwrap();
        assert_eq!(counts, [None, Some(1), Some(36), None]);
        std::fs::write(cg.join("memory.memsw.failcnt"), "4\n").unwrap();
        let counts = read_counts(&root, "/froom", &all).unwrap();
        assert_eq!(counts[2], Some(40), "memory+swap refusals count too");
        assert_eq!(read_counts(&root, "/gone", &all), None);
    }

    #[test]
    fn too_many_cgroups_or_a_missing_literal_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..=MAX_TRIGGER_CGROUPS {
            v2_cgroup(dir.path(), &format!("/many/c{i}"), &events(0, 0, 0));
        }
        let root = MemoryRoot::V2(dir.path().to_path_buf());
        let open = |g: &str| {
            MemoryWatch::open(
                CgroupGlob::new(g, &[]).unwrap(),
                root.clone(),
                vec![MemoryCounter::OomKill],
                Instant::now(),
            )
        };
        let e = open("/many/*").err().unwrap();
        assert!(e.contains("more than 64 cgroups"), "{e}");
        let e = open("/nosuch").err().unwrap();
        assert!(e.contains("does not exist"), "{e}");
        assert!(open("/nosuch/*").is_ok(), "a glob may name none yet");
    }
}
