//! The process table: who was running what, folded from tracking records
//! that left the tracking log, on top of a /proc scan taken at start-up.
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
//! A pid reused while its previous owner is still kept replaces it.

use std::collections::{BTreeSet, HashMap};

use super::record::{Parsed, TrackingRecord};
use crate::snapshot::{MapState, ProcessState};

/// Exited threads kept by default.
pub const DEFAULT_MAX_EXITED: usize = 32_768;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Thread {
    pid: u32,
    ppid: u32,
    comm: String,
    exit_ns: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct ProcessTable {
    threads: HashMap<u32, Thread>,
    /// Maps per process (tgid).
    maps: HashMap<u32, Vec<MapState>>,
    /// Threads kept per process: its maps go with the last one.
    members: HashMap<u32, usize>,
    /// (exit time, tid) of exited threads, oldest first.
    exited: BTreeSet<(u64, u32)>,
    max_exited: usize,
}

impl Default for ProcessTable {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_EXITED)
    }
}

/// Counts for status reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessCounts {
    pub threads: usize,
    pub exited_threads: usize,
    pub processes_with_maps: usize,
}

impl ProcessTable {
    pub fn new(max_exited: usize) -> Self {
        Self {
            threads: HashMap::new(),
            maps: HashMap::new(),
            members: HashMap::new(),
            exited: BTreeSet::new(),
            max_exited,
        }
    }

    /// Adds (or replaces) a live thread, e.g. from /proc. `maps` are the
    /// process's and replace its known maps when non-empty or for a leader.
    pub fn insert(&mut self, state: ProcessState) {
        self.remove_thread(state.tid);
        if state.tid == state.pid || !state.maps.is_empty() {
            self.maps.insert(state.pid, state.maps);
        }
        self.add_thread(
            state.tid,
            Thread {
                pid: state.pid,
                ppid: state.ppid,
                comm: state.comm,
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
                let parent = self.threads.get(ptid).cloned();
                let comm = parent.as_ref().map(|p| p.comm.clone()).unwrap_or_default();
                // A thread's parent process is its process's parent.
                let thread_ppid = if pid == ppid {
                    parent.map_or(*ppid, |p| p.ppid)
                } else {
                    *ppid
                };
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
                    Some(thread) if thread.pid == *pid => thread.comm.clone_from(comm),
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
                                comm: comm.clone(),
                                exit_ns: None,
                            },
                        );
                    }
                }
                if *exec {
                    self.maps.insert(*pid, Vec::new());
                }
            }
            TrackingRecord::Mmap { pid, map, .. } => {
                add_map(self.maps.entry(*pid).or_default(), map.clone());
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
            TrackingRecord::Lost { .. } | TrackingRecord::Other { .. } => {}
        }
    }

    fn enforce_exited_limit(&mut self) {
        while self.exited.len() > self.max_exited {
            let Some(&(_, tid)) = self.exited.first() else {
                break;
            };
            self.remove_thread(tid);
        }
    }

    /// Drops threads that exited at or before `time` (no window can start
    /// before `time` any more).
    pub fn forget_exited_before(&mut self, time: u64) {
        while let Some(&(exit, tid)) = self.exited.first() {
            if exit > time {
                break;
            }
            self.remove_thread(tid);
        }
    }

    /// Threads alive at `time` (not exited at or before it), sorted by
    /// (pid, tid), with maps on each process's leader.
    pub fn state_at(&self, time: u64) -> Vec<ProcessState> {
        let mut out: Vec<ProcessState> = self
            .threads
            .iter()
            .filter(|(_, t)| t.exit_ns.is_none_or(|e| e > time))
            .map(|(&tid, t)| ProcessState {
                pid: t.pid,
                tid,
                ppid: t.ppid,
                comm: t.comm.clone(),
                maps: if tid == t.pid {
                    self.maps.get(&t.pid).cloned().unwrap_or_default()
                } else {
                    Vec::new()
                },
            })
            .collect();
        out.sort_by_key(|p| (p.pid, p.tid));
        out
    }

    /// The thread `tid` as currently known (exited ones included).
    pub fn lookup(&self, tid: u32) -> Option<ProcessState> {
        let t = self.threads.get(&tid)?;
        Some(ProcessState {
            pid: t.pid,
            tid,
            ppid: t.ppid,
            comm: t.comm.clone(),
            maps: self.maps.get(&t.pid).cloned().unwrap_or_default(),
        })
    }

    /// When `tid` exited, if it did.
    pub fn exit_time(&self, tid: u32) -> Option<u64> {
        self.threads.get(&tid)?.exit_ns
    }

    pub fn counts(&self) -> ProcessCounts {
        ProcessCounts {
            threads: self.threads.len(),
            exited_threads: self.exited.len(),
            processes_with_maps: self.maps.values().filter(|m| !m.is_empty()).count(),
        }
    }
}

/// Inserts `map` keeping maps sorted and disjoint: the parts of older maps
/// it covers are cut away (as a new mmap replaces what it overlaps).
fn add_map(maps: &mut Vec<MapState>, map: MapState) {
    let (start, end) = (map.start, map.start.saturating_add(map.len));
    if start >= end {
        return;
    }
    let mut kept = Vec::with_capacity(maps.len() + 2);
    for old in maps.drain(..) {
        let (old_start, old_end) = (old.start, old.start.saturating_add(old.len));
        if old_end <= start || old_start >= end {
            kept.push(old);
            continue;
        }
        if old_start < start {
            kept.push(MapState {
                len: start - old_start,
                ..old.clone()
            });
        }
        if old_end > end {
            kept.push(MapState {
                start: end,
                len: old_end - end,
                pgoff: old.pgoff.wrapping_add(end - old_start),
                ..old
            });
        }
    }
    kept.push(map);
    kept.sort_by_key(|m| m.start);
    *maps = kept;
}

#[cfg(test)]
mod tests {
    use super::super::record::{build, parse};
    use super::*;

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
            maps: vec![exe_map(0x1000, 0x1000, "/usr/bin/bash")],
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
    fn fork_without_exec_inherits_comm_and_maps() {
        let mut t = seeded();
        fold(&mut t, &[build::fork(300, 100, 300, 100, 5)]);
        let p = t.lookup(300).unwrap();
        assert_eq!(p.comm, "bash");
        assert_eq!(p.maps, vec![exe_map(0x1000, 0x1000, "/usr/bin/bash")]);
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
            .map(|m| (m.start, m.len, m.pgoff, m.filename.as_str()))
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
        let mut t = ProcessTable::new(2);
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
