//! The process table: who was running what, folded from tracking records.
//!
//! Fold rules: FORK adds a thread (a new process inherits its parent's maps,
//! as fork copies the address space); COMM replaces the comm and, on exec,
//! forgets the maps (the new image's MMAP2 records follow); MMAP/MMAP2 add a
//! map, trimming any it overlaps; EXIT marks the thread exited at the
//! record's time but keeps it: a snapshot window can start before the exit
//! (a quiet CPU's ring may hold older samples than the log), so exited
//! threads stay resolvable until [`ProcessTable::forget_exited_before`] or
//! the exited-thread limit drops them, oldest exit first.
//!
//! Every collection is persistent (`imbl`): cloning the table is O(1) and
//! shares all of it, an update copies O(log n) nodes. A forked process
//! shares its parent's [`Maps`] until one of them maps something. Memory is
//! bounded by [`TrackingLimits`]: live threads (the kernel's own bound) plus
//! at most `max_exited_threads` exited ones, each process holding at most
//! `max_maps_per_process` maps; what a limit refused is counted.
//!
//! A pid reused while its previous owner is still kept replaces it.

use std::sync::Arc;

use super::maps::Maps;
use super::record::{Parsed, TrackingRecord};
use crate::tracking::state::ProcessState;

/// Exited threads kept by default.
pub const DEFAULT_MAX_EXITED: usize = 16_384;
/// Executable maps kept per process by default (the kernel's default
/// `vm.max_map_count` is 65530 maps of any kind).
pub const DEFAULT_MAX_MAPS_PER_PROCESS: usize = 16_384;

/// The bounds of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackingLimits {
    /// Exited threads kept (oldest exit dropped first).
    pub max_exited_threads: usize,
    /// Maps kept per process: at the limit, further maps are refused.
    pub max_maps_per_process: usize,
}

impl Default for TrackingLimits {
    fn default() -> Self {
        Self {
            max_exited_threads: DEFAULT_MAX_EXITED,
            max_maps_per_process: DEFAULT_MAX_MAPS_PER_PROCESS,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Thread {
    pid: u32,
    ppid: u32,
    comm: Arc<str>,
    exit_ns: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct ProcessTable {
    threads: imbl::HashMap<u32, Thread>,
    /// Maps per process (tgid).
    maps: imbl::HashMap<u32, Maps>,
    /// Threads kept per process: its maps go with the last one.
    members: imbl::HashMap<u32, usize>,
    /// (exit time, tid) of exited threads, oldest first.
    exited: imbl::OrdSet<(u64, u32)>,
    limits: TrackingLimits,
    dropped: DroppedCounts,
}

impl Default for ProcessTable {
    fn default() -> Self {
        Self::new(TrackingLimits::default())
    }
}

/// Counts for status reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessCounts {
    pub threads: usize,
    pub exited_threads: usize,
    pub processes_with_maps: usize,
}

/// What the limits made the table drop, since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DroppedCounts {
    /// Exited threads dropped by `max_exited_threads` before they aged out.
    pub exited_threads: u64,
    /// Maps refused by `max_maps_per_process`.
    pub maps: u64,
}

impl ProcessTable {
    pub fn new(limits: TrackingLimits) -> Self {
        Self {
            threads: imbl::HashMap::new(),
            maps: imbl::HashMap::new(),
            members: imbl::HashMap::new(),
            exited: imbl::OrdSet::new(),
            limits,
            dropped: DroppedCounts::default(),
        }
    }

    pub fn limits(&self) -> TrackingLimits {
        self.limits
    }

    pub fn dropped(&self) -> DroppedCounts {
        self.dropped
    }

    /// Adds (or replaces) a live thread, e.g. from /proc. `maps` are the
    /// process's and replace its known maps when non-empty or for a leader.
    pub fn insert(&mut self, state: ProcessState) {
        self.remove_thread(state.tid);
        if state.tid == state.pid || !state.maps.is_empty() {
            let mut maps = state.maps;
            let cap = self.limits.max_maps_per_process;
            if maps.len() > cap {
                self.dropped.maps += (maps.len() - cap) as u64;
                maps = maps.iter().take(cap).cloned().collect::<Vec<_>>().into();
            }
            self.maps.insert(state.pid, maps);
        }
        self.add_thread(
            state.tid,
            Thread {
                pid: state.pid,
                ppid: state.ppid,
                comm: state.comm.into(),
                exit_ns: None,
            },
        );
    }

    /// Adds a thread whose tid is not in the table.
    fn add_thread(&mut self, tid: u32, thread: Thread) {
        *self.members.entry(thread.pid).or_default() += 1;
        self.threads.insert(tid, thread);
    }

    fn remove_thread(&mut self, tid: u32) {
        let Some(old) = self.threads.remove(&tid) else {
            return;
        };
        if let Some(t) = old.exit_ns {
            self.exited.remove(&(t, tid));
        }
        let members = self.members.entry(old.pid).or_default();
        *members = members.saturating_sub(1);
        if *members == 0 {
            self.members.remove(&old.pid);
            self.maps.remove(&old.pid);
        }
    }

    /// Folds one parsed tracking record.
    pub fn apply(&mut self, parsed: &Parsed) {
        match &parsed.record {
            TrackingRecord::Fork {
                pid,
                ppid,
                tid,
                ptid,
            } => {
                // Drain rounds read the CPUs' rings one after another, so
                // a child's exec (its COMM, its maps) on one CPU can be
                // folded a round before its FORK on another: a live thread
                // of this very process is already past the fork, and the
                // FORK must not take back its exec'd name and maps.
                if let Some(known) = self.threads.get_mut(tid)
                    && known.pid == *pid
                    && known.exit_ns.is_none()
                {
                    if known.ppid == 0 && pid != ppid {
                        known.ppid = *ppid;
                    }
                    return;
                }
                let parent = self.threads.get(ptid).cloned();
                let comm = parent
                    .as_ref()
                    .map_or_else(|| Arc::from(""), |p| Arc::clone(&p.comm));
                // A thread's parent process is its process's parent.
                let thread_ppid = if pid == ppid {
                    parent.map_or(*ppid, |p| p.ppid)
                } else {
                    *ppid
                };
                // Shared, not copied: O(1) whatever the parent maps.
                let inherited = (pid != ppid)
                    .then(|| self.maps.get(ppid).cloned())
                    .flatten();
                // A reused tid: nothing of its old owner stays.
                self.remove_thread(*tid);
                self.add_thread(
                    *tid,
                    Thread {
                        pid: *pid,
                        ppid: thread_ppid,
                        comm,
                        exit_ns: None,
                    },
                );
                if let Some(maps) = inherited {
                    self.maps.insert(*pid, maps);
                }
            }
            TrackingRecord::Comm {
                pid,
                tid,
                comm,
                exec,
            } => {
                match self.threads.get_mut(tid) {
                    Some(thread) if thread.pid == *pid => {
                        if *thread.comm != **comm {
                            thread.comm = comm.as_str().into();
                        }
                    }
                    _ => {
                        // Unknown thread (or one that changed process in
                        // exec's de_thread): take the record's word for it.
                        let ppid = self.threads.get(tid).map_or(0, |t| t.ppid);
                        self.remove_thread(*tid);
                        self.add_thread(
                            *tid,
                            Thread {
                                pid: *pid,
                                ppid,
                                comm: comm.as_str().into(),
                                exit_ns: None,
                            },
                        );
                    }
                }
                if *exec {
                    self.maps.insert(*pid, Maps::new());
                }
            }
            TrackingRecord::Mmap { pid, map, .. } => {
                let cap = self.limits.max_maps_per_process;
                let maps = self.maps.entry(*pid).or_default();
                if maps.len() >= cap {
                    self.dropped.maps += 1;
                } else {
                    maps.insert(map.clone());
                }
            }
            TrackingRecord::Exit { tid, .. } => {
                if let Some(thread) = self.threads.get_mut(tid)
                    && thread.exit_ns.is_none()
                {
                    thread.exit_ns = Some(parsed.time);
                    self.exited.insert((parsed.time, *tid));
                    self.enforce_exited_limit();
                }
            }
            TrackingRecord::Lost { .. }
            | TrackingRecord::Cgroup { .. }
            | TrackingRecord::Other { .. } => {}
        }
    }

    fn enforce_exited_limit(&mut self) {
        while self.exited.len() > self.limits.max_exited_threads {
            let Some(&(_, tid)) = self.exited.get_min() else {
                break;
            };
            self.remove_thread(tid);
            self.dropped.exited_threads += 1;
        }
    }

    /// Drops threads that exited at or before `time` (no window can start
    /// before `time` any more).
    pub fn forget_exited_before(&mut self, time: u64) {
        self.forget_exited_before_at_most(time, usize::MAX);
    }

    /// [`Self::forget_exited_before`], the oldest `max` of them at most;
    /// whether none is left.
    pub fn forget_exited_before_at_most(&mut self, time: u64, max: usize) -> bool {
        for _ in 0..max {
            match self.exited.get_min() {
                Some(&(exit, tid)) if exit <= time => self.remove_thread(tid),
                _ => return true,
            }
        }
        self.exited.get_min().is_none_or(|&(exit, _)| exit > time)
    }

    fn state(&self, tid: u32, t: &Thread, maps: bool) -> ProcessState {
        ProcessState {
            pid: t.pid,
            tid,
            ppid: t.ppid,
            comm: t.comm.to_string(),
            maps: if maps {
                self.maps.get(&t.pid).cloned().unwrap_or_default()
            } else {
                Maps::new()
            },
        }
    }

    /// Threads alive at `time` (not exited at or before it), sorted by
    /// (pid, tid), with maps (shared, not copied) on each process's leader.
    pub fn state_at(&self, time: u64) -> Vec<ProcessState> {
        let mut out: Vec<ProcessState> = self
            .threads
            .iter()
            .filter(|(_, t)| t.exit_ns.is_none_or(|e| e > time))
            .map(|(&tid, t)| self.state(tid, t, tid == t.pid))
            .collect();
        out.sort_by_key(|p| (p.pid, p.tid));
        out
    }

    /// The thread `tid` as currently known (exited ones included).
    pub fn lookup(&self, tid: u32) -> Option<ProcessState> {
        let t = self.threads.get(&tid)?;
        Some(self.state(tid, t, true))
    }

    /// The maps of `tid`'s process as currently known (shared, not
    /// copied; exited processes included).
    pub fn maps_of(&self, tid: u32) -> Option<Maps> {
        let t = self.threads.get(&tid)?;
        Some(self.maps.get(&t.pid).cloned().unwrap_or_default())
    }

    /// When `tid` exited, if it did.
    pub fn exit_time(&self, tid: u32) -> Option<u64> {
        self.threads.get(&tid)?.exit_ns
    }

    /// Whether `a` and `b` share their map storage (tests of the sharing).
    pub fn maps_shared(&self, a: u32, b: u32) -> bool {
        match (self.maps.get(&a), self.maps.get(&b)) {
            (Some(x), Some(y)) => x.shares_storage_with(y),
            _ => false,
        }
    }

    pub fn counts(&self) -> ProcessCounts {
        ProcessCounts {
            threads: self.threads.len(),
            exited_threads: self.exited.len(),
            processes_with_maps: self.maps.values().filter(|m| !m.is_empty()).count(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::{build, parse};
    use super::*;
    use crate::tracking::state::MapState;

    fn fold(table: &mut ProcessTable, records: &[Vec<u8>]) {
        for r in records {
            table.apply(&parse(r).expect("synthetic record parses"));
        }
    }

    fn exe_map(start: u64, len: u64, name: &str) -> MapState {
        MapState {
            start,
            len,
            prot: 5,
            flags: 2,
            filename: name.into(),
            ..MapState::default()
        }
    }

    fn seeded() -> ProcessTable {
        let mut t = ProcessTable::default();
        t.insert(ProcessState {
            pid: 100,
            tid: 100,
            ppid: 1,
            comm: "bash".into(),
            maps: vec![exe_map(0x1000, 0x1000, "/usr/bin/bash")].into(),
        });
        t
    }

    #[test]
    fn fork_exec_exit_lifecycle() {
        let mut t = seeded();
        fold(
            &mut t,
            &[
                build::fork(200, 100, 200, 100, 10),
                build::comm(200, 200, "sleep", true, 11),
                build::mmap2(200, 200, &exe_map(0x5000, 0x2000, "/usr/bin/sleep"), 12),
                build::exit(200, 100, 200, 200, 20),
            ],
        );
        // Just after fork: child of bash, bash's comm and maps.
        let p = t.lookup(200).unwrap();
        assert_eq!((p.pid, p.ppid, p.comm.as_str()), (200, 100, "sleep"));
        assert_eq!(p.maps, vec![exe_map(0x5000, 0x2000, "/usr/bin/sleep")]);
        // Exited at 20: visible before, gone after.
        assert!(t.state_at(15).iter().any(|s| s.tid == 200));
        assert!(!t.state_at(20).iter().any(|s| s.tid == 200));
        assert_eq!(t.exit_time(200), Some(20));
        t.forget_exited_before(19);
        assert!(t.lookup(200).is_some());
        t.forget_exited_before(20);
        assert!(t.lookup(200).is_none());
        assert!(t.lookup(100).is_some());
    }

    #[test]
    fn exited_threads_are_forgotten_a_slice_at_a_time_oldest_first() {
        let mut t = seeded();
        let records: Vec<Vec<u8>> = (0..5)
            .flat_map(|i| {
                let tid = 300 + i;
                [
                    build::fork(100, 100, tid, 100, 10 + u64::from(i)),
                    build::exit(100, 100, tid, 100, 20 + u64::from(i)),
                ]
            })
            .collect();
        fold(&mut t, &records);
        // Exited at 20..=24; those by 23 go, two at a time.
        assert!(!t.forget_exited_before_at_most(23, 2));
        assert!(t.lookup(300).is_none() && t.lookup(301).is_none());
        assert!(t.lookup(302).is_some());
        // The last two by 23: done, and the one that exited at 24 stays.
        assert!(t.forget_exited_before_at_most(23, 2));
        assert!(t.lookup(302).is_none() && t.lookup(303).is_none());
        assert!(t.lookup(304).is_some());
        assert!(t.forget_exited_before_at_most(23, 2));
        assert!(t.lookup(100).is_some());
    }

    #[test]
    fn a_fork_folded_after_its_childs_exec_keeps_the_exec() {
        let mut t = seeded();
        // The exec (CPU 1) drained a round before the fork (CPU 0).
        fold(
            &mut t,
            &[
                build::comm(200, 200, "sleep", true, 11),
                build::mmap2(200, 200, &exe_map(0x5000, 0x2000, "/usr/bin/sleep"), 12),
                build::fork(200, 100, 200, 100, 10),
            ],
        );
        let p = t.lookup(200).unwrap();
        assert_eq!((p.pid, p.ppid, p.comm.as_str()), (200, 100, "sleep"));
        assert_eq!(p.maps, vec![exe_map(0x5000, 0x2000, "/usr/bin/sleep")]);
        // A tid reused after its exit is a new thread: the fork names it.
        fold(
            &mut t,
            &[
                build::exit(200, 100, 200, 200, 20),
                build::fork(200, 100, 200, 100, 30),
            ],
        );
        assert_eq!(t.lookup(200).unwrap().comm, "bash");
    }

    #[test]
    fn fork_without_exec_inherits_comm_and_maps() {
        let mut t = seeded();
        fold(&mut t, &[build::fork(300, 100, 300, 100, 5)]);
        let p = t.lookup(300).unwrap();
        assert_eq!(p.comm, "bash");
        assert_eq!(p.maps, vec![exe_map(0x1000, 0x1000, "/usr/bin/bash")]);
    }

    #[test]
    fn forks_share_their_parents_maps_until_they_map() {
        let mut t = seeded();
        let many: Vec<MapState> = (0..2000u64)
            .map(|i| exe_map(0x10_0000 + i * 0x2000, 0x1000, "/tmp/hostile"))
            .collect();
        t.insert(ProcessState {
            pid: 100,
            tid: 100,
            ppid: 1,
            comm: "bash".into(),
            maps: many.into(),
        });
        for child in 200..3200u32 {
            fold(&mut t, &[build::fork(child, 100, child, 100, 5)]);
            assert!(t.maps_shared(100, child), "child {child} copied the maps");
        }
        fold(
            &mut t,
            &[build::mmap2(
                250,
                250,
                &exe_map(0x9000_0000, 0x1000, "/lib/own.so"),
                6,
            )],
        );
        assert!(!t.maps_shared(100, 250));
        assert_eq!(t.lookup(250).unwrap().maps.len(), 2001);
        assert_eq!(t.lookup(100).unwrap().maps.len(), 2000);
        assert!(t.maps_shared(100, 251));
    }

    #[test]
    fn maps_past_the_limit_are_refused_and_counted() {
        let mut t = ProcessTable::new(TrackingLimits {
            max_maps_per_process: 3,
            ..TrackingLimits::default()
        });
        let records: Vec<Vec<u8>> = (0..10u64)
            .map(|i| build::mmap2(7, 7, &exe_map(i * 0x1000, 0x1000, "/x"), i))
            .collect();
        fold(&mut t, &[build::fork(7, 1, 7, 1, 0)]);
        fold(&mut t, &records);
        assert_eq!(t.lookup(7).unwrap().maps.len(), 3);
        assert_eq!(t.dropped().maps, 7);
        // A seed above the limit is cut too.
        t.insert(ProcessState {
            pid: 8,
            tid: 8,
            ppid: 1,
            comm: "big".into(),
            maps: (0..5u64)
                .map(|i| exe_map(i * 0x1000, 0x1000, "/y"))
                .collect::<Vec<_>>()
                .into(),
        });
        assert_eq!(t.lookup(8).unwrap().maps.len(), 3);
        assert_eq!(t.dropped().maps, 9);
    }

    #[test]
    fn threads_share_the_process_and_its_parent() {
        let mut t = seeded();
        fold(
            &mut t,
            &[
                build::fork(100, 100, 101, 100, 5),
                build::comm(100, 101, "worker", false, 6),
            ],
        );
        let th = t.lookup(101).unwrap();
        assert_eq!((th.pid, th.ppid, th.comm.as_str()), (100, 1, "worker"));
        let state = t.state_at(7);
        let leader = state.iter().find(|s| s.tid == 100).unwrap();
        let thread = state.iter().find(|s| s.tid == 101).unwrap();
        assert_eq!(leader.maps.len(), 1);
        assert!(thread.maps.is_empty(), "maps live on the leader only");
        assert_eq!(leader.comm, "bash");
    }

    #[test]
    fn mmap_trims_what_it_overlaps() {
        let mut t = seeded();
        fold(
            &mut t,
            &[build::mmap2(
                100,
                100,
                &exe_map(0x1400, 0x400, "/lib/x.so"),
                3,
            )],
        );
        let maps = t.lookup(100).unwrap().maps;
        let spans: Vec<_> = maps
            .iter()
            .map(|m| (m.start, m.len, m.pgoff, &*m.filename))
            .collect();
        assert_eq!(
            spans,
            vec![
                (0x1000, 0x400, 0, "/usr/bin/bash"),
                (0x1400, 0x400, 0, "/lib/x.so"),
                (0x1800, 0x800, 0x800, "/usr/bin/bash"),
            ]
        );
    }

    #[test]
    fn pid_reuse_replaces_and_exited_limit_holds() {
        let mut t = ProcessTable::new(TrackingLimits {
            max_exited_threads: 2,
            ..TrackingLimits::default()
        });
        for (i, pid) in [10u32, 11, 12].iter().enumerate() {
            let time = i as u64 * 10;
            fold(
                &mut t,
                &[
                    build::fork(*pid, 1, *pid, 1, time),
                    build::exit(*pid, 1, *pid, *pid, time + 1),
                ],
            );
        }
        assert_eq!(t.counts().exited_threads, 2);
        assert_eq!(t.dropped().exited_threads, 1);
        assert!(t.lookup(10).is_none(), "oldest exit dropped first");
        assert!(t.lookup(11).is_some() && t.lookup(12).is_some());
        // pid 12 comes back as a new process: alive again, no stale exit.
        fold(&mut t, &[build::fork(12, 1, 12, 1, 50)]);
        assert_eq!(t.exit_time(12), None);
        assert_eq!(t.counts().exited_threads, 1);
    }

    #[test]
    fn exec_forgets_old_maps_and_unknown_threads_appear_on_comm() {
        let mut t = seeded();
        fold(&mut t, &[build::comm(100, 100, "python3", true, 4)]);
        assert!(t.lookup(100).unwrap().maps.is_empty());
        fold(&mut t, &[build::comm(555, 556, "late", false, 4)]);
        let p = t.lookup(556).unwrap();
        assert_eq!((p.pid, p.comm.as_str()), (555, "late"));
    }
}
