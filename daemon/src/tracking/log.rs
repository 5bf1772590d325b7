//! The tracking log: drained tracking records, oldest evicted first into the
//! process table, so `process table + log` describes every moment the log
//! covers.
//!
//! Records arrive per drain round sorted by time, but rounds drain CPUs one
//! after another, so the log's order can be off by the length of a round.
//! The window walk therefore stops at the first record older than the
//! window start minus [`ORDER_SLACK_NS`], and sorts the records it passed
//! into "inside the window" and "before it" by their own time.

use std::borrow::Cow;

use super::process_table::{ProcessCounts, ProcessTable};
use super::record::{parse, record_time};
use crate::ring::Corruption;
use crate::ring::size_at_end::{SizeAtEndError, SizeAtEndRing};
use crate::snapshot::ProcessState;

/// How far out of time order the log may be (a drain round takes
/// microseconds; this leaves room for a descheduled drain thread).
pub const ORDER_SLACK_NS: u64 = 1_000_000_000;

pub struct TrackingLog {
    ring: SizeAtEndRing,
    table: ProcessTable,
    rejected: u64,
}

/// The tracking records of a snapshot window and the state before it.
#[derive(Debug, Clone, Default)]
pub struct TrackingWindow {
    /// Records at or after the window start, verbatim, oldest first.
    pub records: Vec<u8>,
    pub count: u64,
    /// Threads alive at the window start.
    pub processes: Vec<ProcessState>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrackingLogStatus {
    pub capacity: u64,
    pub used: u64,
    pub records: u64,
    pub evicted: u64,
    /// Records the log refused (malformed): counted, never kept.
    pub rejected: u64,
}

impl TrackingLog {
    /// A log of `capacity` bytes (rounded up to a multiple of 8) over a
    /// process table seeded by the caller.
    pub fn new(capacity: u64, table: ProcessTable) -> Result<Self, SizeAtEndError> {
        let capacity = usize::try_from(capacity.div_ceil(8).saturating_mul(8)).map_err(|_| {
            SizeAtEndError::New {
                capacity: usize::MAX,
            }
        })?;
        Ok(Self {
            ring: SizeAtEndRing::new(capacity)?,
            table,
            rejected: 0,
        })
    }

    /// Appends one whole record; records it evicts are folded into the
    /// process table. Malformed records are counted and dropped.
    pub fn append(&mut self, record: &[u8]) {
        let table = &mut self.table;
        let result = self.ring.append(record, |old| {
            if let Some(parsed) = parse(old) {
                table.apply(&parsed);
            }
        });
        if result.is_err() {
            self.rejected += 1;
        }
    }

    pub fn table(&self) -> &ProcessTable {
        &self.table
    }

    /// No window will start before `time` again: forget threads that had
    /// exited by then.
    pub fn forget_exited_before(&mut self, time: u64) {
        self.table.forget_exited_before(time);
    }

    pub fn status(&self) -> TrackingLogStatus {
        TrackingLogStatus {
            capacity: self.ring.capacity() as u64,
            used: self.ring.used() as u64,
            records: self.ring.len() as u64,
            evicted: self.ring.evicted(),
            rejected: self.rejected,
        }
    }

    pub fn process_counts(&self) -> ProcessCounts {
        self.table.counts()
    }

    /// The table with every record of the log folded in: the current state,
    /// exited threads included until they are forgotten.
    pub fn current_table(&self) -> Result<ProcessTable, Corruption> {
        let mut records = Vec::new();
        for record in self.ring.iter_back() {
            records.push(record?);
        }
        let mut table = self.table.clone();
        for record in records.iter().rev() {
            if let Some(parsed) = parse(record) {
                table.apply(&parsed);
            }
        }
        Ok(table)
    }

    /// The records at or after `start_ns` (oldest first) and the threads
    /// alive at `start_ns`: the table with every older log record folded
    /// into a copy of it.
    pub fn window(&self, start_ns: u64) -> Result<TrackingWindow, Corruption> {
        let cutoff = start_ns.saturating_sub(ORDER_SLACK_NS);
        let mut inside: Vec<Cow<'_, [u8]>> = Vec::new();
        let mut before: Vec<Cow<'_, [u8]>> = Vec::new();
        let mut walk = self.ring.iter_back();
        // Newest first: the window, then (past the first record older than
        // the cutoff) the records the window does not need.
        for record in walk.by_ref() {
            let record = record?;
            match record_time(&record) {
                Some(t) if t < cutoff => {
                    before.push(record);
                    break;
                }
                Some(t) if t < start_ns => before.push(record),
                _ => inside.push(record),
            }
        }
        let mut older: Vec<Cow<'_, [u8]>> = Vec::new();
        for record in walk {
            older.push(record?);
        }

        let mut table = self.table.clone();
        for record in older.iter().rev().chain(before.iter().rev()) {
            if let Some(parsed) = parse(record) {
                table.apply(&parsed);
            }
        }
        let mut records = Vec::with_capacity(inside.iter().map(|r| r.len()).sum());
        for record in inside.iter().rev() {
            records.extend_from_slice(record);
        }
        Ok(TrackingWindow {
            records,
            count: inside.len() as u64,
            processes: table.state_at(start_ns),
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
            TrackingLog::new(2 * (rec.len() as u64 + 8), ProcessTable::default()).unwrap();
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
        let mut log = TrackingLog::new(1 << 16, ProcessTable::default()).unwrap();
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
        let mut log = TrackingLog::new(1 << 16, ProcessTable::default()).unwrap();
        log.append(&build::fork(30, 1, 30, 1, 10 * s));
        // Drained in a later round though older (another CPU).
        log.append(&build::comm(31, 31, "late", false, 10 * s - 5));
        log.append(&build::comm(30, 30, "x", false, 10 * s + 1));
        let w = log.window(10 * s).unwrap();
        assert_eq!(times(&w.records), vec![10 * s, 10 * s + 1]);
        assert!(w.processes.iter().any(|p| p.tid == 31 && p.comm == "late"));
    }
}
