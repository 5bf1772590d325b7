//! The tracking log: drained tracking records, oldest evicted first.
//!
//! Three process tables stand beside the records, all sharing structure
//! (persistent maps, O(1) clones):
//! - the *live* table, every appended record folded in: the state now;
//! - the *base* table, every evicted record folded in: the state at the
//!   oldest record the log holds;
//! - *checkpoints*, clones of the live table taken every
//!   `checkpoint_bytes` of records, dropped when their records are evicted.
//!
//! A window starting at `t` starts from the newest checkpoint whose records
//! all lie before `t` and folds only the records after it, so a dump costs
//! O(records in the window + one checkpoint interval), whatever the log's
//! fill. Records arrive per drain round sorted by time, but rounds drain
//! CPUs one after another, so the log's order can be off by the length of a
//! round: each record after the checkpoint is placed by its own time.
//!
//! Checkpoints are few, as their number bounds the tables' memory (with a
//! full 64 MiB log, one every 4 MiB). So the newest records also get
//! *recent* checkpoints, a few at a short interval, the oldest dropped as a
//! new one comes: the rings' windows start there, and folding up to 4 MiB
//! of records cost a dump milliseconds before its file was begun.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use super::process_table::{DroppedCounts, ProcessCounts, ProcessTable, TrackingLimits};
use super::record::{Parsed, TrackingRecord, parse, record_time};
use crate::ring::Corruption;
use crate::ring::size_at_end::{SizeAtEndError, SizeAtEndRing};
use crate::tracking::state::ProcessState;

/// How far out of time order the log may be (a drain round takes
/// microseconds; this leaves room for a descheduled drain thread). Exited
/// threads are kept this long past the log's oldest record.
pub const ORDER_SLACK_NS: u64 = 1_000_000_000;

/// Records between checkpoints by default, in bytes.
pub const DEFAULT_CHECKPOINT_BYTES: u64 = 512 << 10;

/// Records between recent checkpoints at most, in bytes (a fold of this
/// much takes about half a millisecond). 16 of them 16 KiB apart saved a
/// dump 0.2 ms and cost 2 MiB more after a fork storm (BENCHMARKS 30).
const RECENT_CHECKPOINT_BYTES: u64 = 64 << 10;
/// Recent checkpoints kept: they cover the newest 8 intervals of records.
const RECENT_CHECKPOINTS: usize = 8;

/// The process table after the records before `seq` were folded.
struct Checkpoint {
    /// Index (since the log was created) of the first record not folded.
    seq: u64,
    /// Newest record time folded in (`None`: none had a time).
    max_time: Option<u64>,
    table: ProcessTable,
}

pub struct TrackingLog {
    ring: SizeAtEndRing,
    /// Evicted records folded: the state at the oldest record held.
    base: Checkpoint,
    /// Every record folded: the state now.
    live: ProcessTable,
    live_max_time: Option<u64>,
    /// Records appended since creation (the next record's index).
    appended: u64,
    /// Oldest first, each `seq` above `base.seq`.
    checkpoints: VecDeque<Checkpoint>,
    checkpoint_bytes: u64,
    bytes_since_checkpoint: u64,
    /// Oldest first, each `seq` above `base.seq`, at most
    /// [`RECENT_CHECKPOINTS`].
    recent: VecDeque<Checkpoint>,
    recent_bytes: u64,
    bytes_since_recent: u64,
    rejected: u64,
    file_names: FileNames,
}

/// One string per mapped file name, shared by every map that names it:
/// the tables hold the maps of every process the log covers (tens of
/// thousands when short processes churn), mostly of the same few files.
#[derive(Default)]
struct FileNames {
    names: HashSet<Arc<str>>,
    /// Names no map uses any more are dropped when the set reaches this.
    prune_at: usize,
}

impl FileNames {
    const MIN_PRUNE_AT: usize = 1024;

    /// `record` parsed, its map's file name replaced by the shared one.
    fn parse(&mut self, record: &[u8]) -> Option<Parsed> {
        let mut parsed = parse(record)?;
        if let TrackingRecord::Mmap { map, .. } = &mut parsed.record {
            self.share(&mut map.filename);
        }
        Some(parsed)
    }

    fn share(&mut self, name: &mut Arc<str>) {
        if let Some(known) = self.names.get(&**name) {
            *name = Arc::clone(known);
            return;
        }
        if self.names.len() >= self.prune_at {
            // Amortised: the set at least doubles between two prunes, so
            // names of files mapped once (or by a hostile process that
            // maps many) never accumulate.
            self.names.retain(|n| Arc::strong_count(n) > 1);
            self.prune_at = (self.names.len() * 2).max(Self::MIN_PRUNE_AT);
        }
        self.names.insert(Arc::clone(name));
    }
}

/// The tracking records of a snapshot window and the state before it.
#[derive(Debug, Clone, Default)]
pub struct TrackingWindow {
    /// Records at or after the window start, verbatim, oldest first.
    pub records: Vec<u8>,
    pub count: u64,
    /// Threads alive at the window start.
    pub processes: Vec<ProcessState>,
    /// Log records read to build this (the window's and those between the
    /// checkpoint used and the window start).
    pub walked: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrackingLogStatus {
    pub capacity: u64,
    pub used: u64,
    pub records: u64,
    pub evicted: u64,
    /// Records the log refused (malformed): counted, never kept.
    pub rejected: u64,
    /// Checkpoints of the process table held.
    pub checkpoints: u64,
}

fn max_time(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The newest checkpoint of `list` holding only records before `start_ns`.
fn newest_before(list: &VecDeque<Checkpoint>, start_ns: u64) -> Option<&Checkpoint> {
    // max_time grows with seq: the usable checkpoints are a prefix.
    let usable = list.partition_point(|c| c.max_time.is_none_or(|t| t < start_ns));
    usable.checked_sub(1).map(|i| &list[i])
}

impl TrackingLog {
    /// A log of `capacity` bytes (rounded up to a multiple of 8) over a
    /// process table seeded by the caller, with a checkpoint every
    /// `checkpoint_bytes` of records (at least one record apart), and
    /// recent ones every [`RECENT_CHECKPOINT_BYTES`] (a quarter of
    /// `checkpoint_bytes` where that is less).
    pub fn new(
        capacity: u64,
        checkpoint_bytes: u64,
        table: ProcessTable,
    ) -> Result<Self, SizeAtEndError> {
        let capacity = usize::try_from(capacity.div_ceil(8).saturating_mul(8)).map_err(|_| {
            SizeAtEndError::New {
                capacity: usize::MAX,
            }
        })?;
        Ok(Self {
            ring: SizeAtEndRing::new(capacity)?,
            live: table.clone(),
            base: Checkpoint {
                seq: 0,
                max_time: None,
                table,
            },
            live_max_time: None,
            appended: 0,
            checkpoints: VecDeque::new(),
            checkpoint_bytes: checkpoint_bytes.max(1),
            bytes_since_checkpoint: 0,
            recent: VecDeque::new(),
            recent_bytes: RECENT_CHECKPOINT_BYTES.min(checkpoint_bytes / 4).max(1),
            bytes_since_recent: 0,
            file_names: FileNames::default(),
            rejected: 0,
        })
    }

    /// Appends one whole record and folds it into the live table; records
    /// it evicts are folded into the base table. Malformed records are
    /// counted and dropped.
    pub fn append(&mut self, record: &[u8]) {
        let base = &mut self.base;
        let file_names = &mut self.file_names;
        let mut evicted = false;
        let result = self.ring.append(record, |old| {
            evicted = true;
            base.seq += 1;
            base.max_time = max_time(base.max_time, record_time(old));
            if let Some(parsed) = file_names.parse(old) {
                base.table.apply(&parsed);
            }
        });
        if result.is_err() {
            self.rejected += 1;
        } else {
            self.appended += 1;
            self.live_max_time = max_time(self.live_max_time, record_time(record));
            if let Some(parsed) = self.file_names.parse(record) {
                self.live.apply(&parsed);
            }
            self.bytes_since_checkpoint += record.len() as u64;
            if self.bytes_since_checkpoint >= self.checkpoint_bytes {
                self.bytes_since_checkpoint = 0;
                self.checkpoints.push_back(self.checkpoint_now());
            }
            self.bytes_since_recent += record.len() as u64;
            if self.bytes_since_recent >= self.recent_bytes {
                self.bytes_since_recent = 0;
                if self.recent.len() == RECENT_CHECKPOINTS {
                    self.recent.pop_front();
                }
                self.recent.push_back(self.checkpoint_now());
            }
        }
        if evicted {
            let base_seq = self.base.seq;
            for list in [&mut self.checkpoints, &mut self.recent] {
                while list.front().is_some_and(|c| c.seq <= base_seq) {
                    list.pop_front();
                }
            }
            // Exits older than what the log covers (less the order slack)
            // matter to no window the log can serve: age them out.
            if let Some(oldest) = self.base.max_time {
                let horizon = oldest.saturating_sub(ORDER_SLACK_NS);
                self.base.table.forget_exited_before(horizon);
                self.live.forget_exited_before(horizon);
            }
        }
    }

    /// The live table as it is now, O(1).
    fn checkpoint_now(&self) -> Checkpoint {
        Checkpoint {
            seq: self.appended,
            max_time: self.live_max_time,
            table: self.live.clone(),
        }
    }

    /// The state at the oldest record the log holds.
    pub fn table(&self) -> &ProcessTable {
        &self.base.table
    }

    /// The state now: every record of the log folded in, exited threads
    /// included until they are forgotten. O(1) to read.
    pub fn current_table(&self) -> &ProcessTable {
        &self.live
    }

    /// No window will start before `time` again: forget threads that had
    /// exited by then, `max` of each table at most; whether none is left.
    pub fn forget_exited_before_at_most(&mut self, time: u64, max: usize) -> bool {
        let base = self.base.table.forget_exited_before_at_most(time, max);
        let live = self.live.forget_exited_before_at_most(time, max);
        base && live
    }

    pub fn status(&self) -> TrackingLogStatus {
        TrackingLogStatus {
            capacity: self.ring.capacity() as u64,
            used: self.ring.used() as u64,
            records: self.ring.len() as u64,
            evicted: self.ring.evicted(),
            rejected: self.rejected,
            checkpoints: self.checkpoints.len() as u64,
        }
    }

    /// Counts of the live table.
    pub fn process_counts(&self) -> ProcessCounts {
        self.live.counts()
    }

    /// What the live table's limits dropped.
    pub fn dropped(&self) -> DroppedCounts {
        self.live.dropped()
    }

    pub fn limits(&self) -> TrackingLimits {
        self.live.limits()
    }

    /// The records at or after `start_ns` (oldest first) and the threads
    /// alive at `start_ns`: the newest checkpoint holding only older records,
    /// with the older records after it folded into a clone of it.
    pub fn window(&self, start_ns: u64) -> Result<TrackingWindow, Corruption> {
        let from = [
            newest_before(&self.checkpoints, start_ns),
            newest_before(&self.recent, start_ns),
        ]
        .into_iter()
        .flatten()
        .max_by_key(|c| c.seq)
        .unwrap_or(&self.base);
        let n = usize::try_from(self.appended - from.seq).unwrap_or(usize::MAX);
        let mut newest_first = Vec::with_capacity(n.min(self.ring.len()));
        for record in self.ring.iter_back().take(n) {
            newest_first.push(record?);
        }
        let mut table = from.table.clone();
        let mut inside = Vec::new();
        for record in newest_first.iter().rev() {
            match record_time(record) {
                Some(t) if t < start_ns => {
                    if let Some(parsed) = parse(record) {
                        table.apply(&parsed);
                    }
                }
                _ => inside.push(record),
            }
        }
        let mut records = Vec::with_capacity(inside.iter().map(|r| r.len()).sum());
        for record in &inside {
            records.extend_from_slice(record);
        }
        Ok(TrackingWindow {
            records,
            count: inside.len() as u64,
            processes: table.state_at(start_ns),
            walked: newest_first.len() as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::build;
    use super::*;

    fn times(records: &[u8]) -> Vec<u64> {
        crate::ring::records(records)
            .map(|r| record_time(r.unwrap().1).unwrap())
            .collect()
    }

    #[test]
    fn evicted_records_fold_into_the_table() {
        let rec = build::fork(10, 1, 10, 1, 1);
        // Room for two FORK frames only.
        let mut log =
            TrackingLog::new(2 * (rec.len() as u64 + 8), 1 << 20, ProcessTable::default()).unwrap();
        log.append(&build::fork(10, 1, 10, 1, 1));
        log.append(&build::comm(10, 10, "first", true, 2));
        assert!(log.table().lookup(10).is_none());
        log.append(&build::fork(11, 1, 11, 1, 3));
        log.append(&build::fork(12, 1, 12, 1, 4));
        assert_eq!(log.table().lookup(10).unwrap().comm, "first");
        let st = log.status();
        assert_eq!((st.records, st.evicted, st.rejected), (2, 2, 0));
        log.append(b"not a record at all");
        assert_eq!(log.status().rejected, 1);
    }

    #[test]
    fn window_splits_at_its_start() {
        let s = ORDER_SLACK_NS;
        let mut log = TrackingLog::new(1 << 16, 1 << 20, ProcessTable::default()).unwrap();
        log.append(&build::fork(20, 1, 20, 1, s + 100));
        log.append(&build::comm(20, 20, "old", true, s + 110));
        log.append(&build::fork(21, 1, 21, 1, 3 * s));
        log.append(&build::comm(21, 21, "slack", true, 3 * s + 10));
        log.append(&build::exit(20, 1, 20, 20, 4 * s));
        log.append(&build::comm(21, 21, "new", true, 4 * s + 5));
        let w = log.window(4 * s).unwrap();
        assert_eq!(times(&w.records), vec![4 * s, 4 * s + 5]);
        assert_eq!(w.count, 2);
        // At the window start 20 is alive (its exit is inside the window) and
        // 21 is called "slack" (its later rename is inside the window too).
        let p20 = w.processes.iter().find(|p| p.tid == 20).unwrap();
        assert_eq!(p20.comm, "old");
        let p21 = w.processes.iter().find(|p| p.tid == 21).unwrap();
        assert_eq!(p21.comm, "slack");
        // The log itself did not change.
        assert!(log.table().lookup(20).is_none());
        // A window from the very beginning has everything.
        assert_eq!(log.window(0).unwrap().count, 6);
    }

    #[test]
    fn out_of_order_records_within_the_slack_are_placed_by_time() {
        let s = ORDER_SLACK_NS;
        let mut log = TrackingLog::new(1 << 16, 1 << 20, ProcessTable::default()).unwrap();
        log.append(&build::fork(30, 1, 30, 1, 10 * s));
        // Drained in a later round though older (another CPU).
        log.append(&build::comm(31, 31, "late", false, 10 * s - 5));
        log.append(&build::comm(30, 30, "x", false, 10 * s + 1));
        let w = log.window(10 * s).unwrap();
        assert_eq!(times(&w.records), vec![10 * s, 10 * s + 1]);
        assert!(w.processes.iter().any(|p| p.tid == 31 && p.comm == "late"));
    }
}

#[cfg(test)]
mod checkpoint_tests {
    use proptest::prelude::*;

    use super::super::process_table::TrackingLimits;
    use super::super::record::build;
    use super::*;
    use crate::tracking::state::MapState;

    fn seeded() -> ProcessTable {
        let mut t = ProcessTable::default();
        t.insert(ProcessState {
            pid: 1,
            tid: 1,
            ppid: 0,
            comm: "init".into(),
            maps: vec![MapState {
                start: 0x1000,
                len: 0x1000,
                prot: 5,
                filename: "/sbin/init".into(),
                ..MapState::default()
            }]
            .into(),
        });
        t
    }

    /// The reference: every record older than `start` folded, in log order,
    /// into the seed; the others are the window.
    fn brute_force(records: &[Vec<u8>], start: u64) -> (Vec<ProcessState>, Vec<u8>) {
        let mut table = seeded();
        let mut inside = Vec::new();
        for r in records {
            match record_time(r) {
                Some(t) if t < start => table.apply(&parse(r).unwrap()),
                _ => inside.extend_from_slice(r),
            }
        }
        (table.state_at(start), inside)
    }

    /// One random tracking record over a few pids, at `time`.
    fn record(kind: u8, a: u32, b: u32, time: u64) -> Vec<u8> {
        let (pid, other) = (2 + a % 12, 1 + b % 13);
        match kind % 6 {
            0 => build::fork(pid, other, pid, other, time),
            // A thread of `other`.
            1 => build::fork(other, other, pid + 100, other, time),
            2 => build::comm(pid, pid, &format!("c{b}"), b.is_multiple_of(2), time),
            3 | 4 => build::mmap2(
                pid,
                pid,
                &MapState {
                    start: u64::from(b % 8) * 0x1000,
                    len: u64::from(1 + a % 3) * 0x1000,
                    prot: 5,
                    filename: format!("/lib/l{a}.so").into(),
                    ..MapState::default()
                },
                time,
            ),
            _ => build::exit(pid, other, pid, pid, time),
        }
    }

    proptest! {
        /// The state at a window start via checkpoints equals the fold of
        /// every older record, for random streams a little out of order.
        #[test]
        fn window_via_checkpoints_equals_the_brute_force_fold(
            ops in prop::collection::vec((any::<u8>(), any::<u32>(), any::<u32>(), 0u64..30), 20..300),
            starts in prop::collection::vec(0u64..3200, 1..6),
        ) {
            let mut log = TrackingLog::new(1 << 20, 256, seeded()).unwrap();
            let mut records = Vec::new();
            for (i, (kind, a, b, jitter)) in ops.into_iter().enumerate() {
                // Mostly in time order, some records up to 30ns late.
                let time = (i as u64 * 10 + 30).saturating_sub(jitter);
                let r = record(kind, a, b, time);
                log.append(&r);
                records.push(r);
            }
            prop_assert!(log.status().checkpoints > 0);
            for start in starts {
                let w = log.window(start).unwrap();
                let (processes, inside) = brute_force(&records, start);
                prop_assert_eq!(&w.processes, &processes, "start {}", start);
                prop_assert_eq!(&w.records, &inside);
            }
            // The live table is the fold of everything.
            let (now, _) = brute_force(&records, u64::MAX);
            prop_assert_eq!(log.current_table().state_at(u64::MAX), now);
        }
    }

    /// `n` short-lived processes, each a FORK at time 2i and an EXIT at
    /// 2i + 1, over 30,000 pids.
    fn append_forks_and_exits(log: &mut TrackingLog, n: u32) {
        for i in 0..n {
            let pid = 1000 + i % 30_000;
            log.append(&build::fork(pid, 1, pid, 1, u64::from(i) * 2));
            log.append(&build::exit(pid, 1, pid, pid, u64::from(i) * 2 + 1));
        }
    }

    #[test]
    fn a_window_walks_only_its_records_and_one_checkpoint_interval() {
        let interval = 4096;
        let mut log = TrackingLog::new(64 << 20, interval, seeded()).unwrap();
        let n = 100_000u32;
        append_forks_and_exits(&mut log, n);
        let fork_len = build::fork(1, 1, 1, 1, 0).len() as u64;
        let per_interval = interval / fork_len + 1;
        // The last 50 records.
        let w = log.window(u64::from(n) * 2 - 50).unwrap();
        assert_eq!(w.count, 50);
        assert!(
            w.walked <= w.count + per_interval,
            "walked {} records for a window of {} (interval {} records)",
            w.walked,
            w.count,
            per_interval
        );
        assert_eq!(log.status().records, 2 * u64::from(n));
    }

    #[test]
    fn a_window_in_the_newest_records_folds_one_recent_interval_not_a_wide_one() {
        // A 64 MiB log in 16 checkpoints: one every 4 MiB.
        let interval = 4 << 20;
        let mut log = TrackingLog::new(64 << 20, interval, seeded()).unwrap();
        let n = 25_000u32;
        append_forks_and_exits(&mut log, n);
        let fork_len = build::fork(1, 1, 1, 1, 0).len() as u64;
        assert!(
            log.status().used < interval,
            "no wide checkpoint yet: {:?}",
            log.status()
        );
        let per_recent = RECENT_CHECKPOINT_BYTES / fork_len + 1;
        let start = u64::from(n) * 2 - 50;
        let w = log.window(start).unwrap();
        assert_eq!(w.count, 50);
        assert!(
            w.walked <= w.count + per_recent,
            "walked {} records for a window of {} (recent interval {} records)",
            w.walked,
            w.count,
            per_recent
        );
        // The same state as a log with no checkpoint but its base.
        let mut plain = TrackingLog::new(64 << 20, u64::MAX, seeded()).unwrap();
        plain.recent_bytes = u64::MAX;
        append_forks_and_exits(&mut plain, n);
        let reference = plain.window(start).unwrap();
        assert_eq!(reference.walked, 2 * u64::from(n));
        assert_eq!(w.processes, reference.processes);
        assert_eq!(w.records, reference.records);
        // A window older than every recent checkpoint still folds from
        // the base (or a wide checkpoint), as before.
        let old = log.window(1000).unwrap();
        assert_eq!(old.processes, plain.window(1000).unwrap().processes);
    }

    #[test]
    fn exits_age_out_with_the_log_and_checkpoints_with_their_records() {
        let s = ORDER_SLACK_NS;
        let rec = build::fork(10, 1, 10, 1, 0);
        // About ten FORK/EXIT records fit.
        let mut log = TrackingLog::new(10 * (rec.len() as u64 + 8), 1, seeded()).unwrap();
        log.append(&build::fork(10, 1, 10, 1, s));
        log.append(&build::exit(10, 1, 10, 10, s + 1));
        assert_eq!(log.current_table().exit_time(10), Some(s + 1));
        for i in 0..30u32 {
            let t = 3 * s + u64::from(i);
            log.append(&build::fork(20 + i, 1, 20 + i, 1, t));
        }
        // The log now starts past s + 1 + slack: tid 10 is forgotten.
        assert!(log.current_table().lookup(10).is_none());
        assert!(log.table().lookup(10).is_none());
        let st = log.status();
        assert!(st.evicted > 0);
        // One checkpoint per record, none older than the log.
        assert!(st.checkpoints <= st.records, "{st:?}");
        // A window before every checkpoint starts from the base table.
        let w = log.window(0).unwrap();
        assert_eq!(w.count, st.records);
    }

    #[test]
    fn the_exited_limit_is_counted() {
        let limits = TrackingLimits {
            max_exited_threads: 5,
            ..TrackingLimits::default()
        };
        let mut log = TrackingLog::new(1 << 20, 1 << 20, ProcessTable::new(limits)).unwrap();
        for pid in 100..120u32 {
            log.append(&build::fork(pid, 1, pid, 1, u64::from(pid)));
            log.append(&build::exit(pid, 1, pid, pid, u64::from(pid)));
        }
        assert_eq!(log.process_counts().exited_threads, 5);
        assert_eq!(log.dropped().exited_threads, 15);
        assert_eq!(log.limits(), limits);
    }
}

#[cfg(test)]
mod file_name_tests {
    use super::super::record::build;
    use super::*;
    use crate::tracking::state::MapState;

    fn mmap_of(name: &str) -> Vec<u8> {
        let map = MapState {
            start: 0x1000,
            len: 0x1000,
            prot: 5,
            filename: name.into(),
            ..MapState::default()
        };
        build::mmap2(7, 7, &map, 1)
    }

    fn file_name(parsed: &Parsed) -> Arc<str> {
        match &parsed.record {
            TrackingRecord::Mmap { map, .. } => Arc::clone(&map.filename),
            other => panic!("not a map: {other:?}"),
        }
    }

    #[test]
    fn maps_of_the_same_file_share_one_string() {
        let mut names = FileNames::default();
        let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        let a = file_name(&names.parse(&mmap_of(libc)).unwrap());
        let b = file_name(&names.parse(&mmap_of(libc)).unwrap());
        let other = file_name(&names.parse(&mmap_of("/usr/bin/ls")).unwrap());
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(&*a, libc);
        assert!(!Arc::ptr_eq(&a, &other));
        assert_eq!(names.names.len(), 2);
    }

    #[test]
    fn names_no_map_uses_are_dropped_and_the_set_stays_bounded() {
        let mut names = FileNames::default();
        let kept = file_name(&names.parse(&mmap_of("/usr/bin/kept")).unwrap());
        // A process mapping ever new names, none of them kept by a table.
        for i in 0..100_000 {
            names.parse(&mmap_of(&format!("/tmp/plant-{i}"))).unwrap();
            assert!(names.names.len() <= FileNames::MIN_PRUNE_AT, "{i}");
        }
        let again = file_name(&names.parse(&mmap_of("/usr/bin/kept")).unwrap());
        assert!(Arc::ptr_eq(&kept, &again), "a name in use survives pruning");
    }
}
