//! What the history is set to and what it holds: its settings, the index
//! of its segments and the status `snapctl status` shows.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::retention::SegmentInfo;
use crate::time::SampleTime;

/// `[history]` as the writer applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistorySettings {
    pub dir: PathBuf,
    pub max_age: Duration,
    pub max_bytes: u64,
    pub level: i32,
    /// The group of the segment files (the socket group), as snapshots.
    pub group: Option<u32>,
    /// `history.writer_nice`: the nice of the drain and the writer.
    pub writer_nice: i32,
}

impl HistorySettings {
    /// A segment is closed past this many bytes: a 32nd of the budget, so
    /// dropping one frees little of the look-back.
    pub(super) fn segment_bytes(&self) -> u64 {
        (self.max_bytes / 32).clamp(64 << 10, 64 << 20)
    }

    /// ... or past this age: a tenth of `max_age`.
    pub(super) fn segment_span(&self) -> Duration {
        (self.max_age / 10).clamp(Duration::from_secs(1), Duration::from_secs(600))
    }
}

/// What `snapctl status` shows of the history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryStatus {
    pub dir: PathBuf,
    pub bytes: u64,
    pub max_bytes: u64,
    pub max_age: Duration,
    pub segments: u32,
    /// Sample times of the oldest and newest record held.
    pub oldest: Option<SampleTime>,
    pub newest: Option<SampleTime>,
    /// Samples lost because the history fell behind (the LOST records of
    /// the record tap, per CPU; estimated from the bytes overwritten
    /// before they were read, see `recorder::tap`).
    pub lost_per_cpu: BTreeMap<u32, u64>,
    /// Tracking records that never reached the history.
    pub tracking_dropped: u64,
    /// Stack copies unwound into call chains, and written as they were
    /// (`history::unwind`).
    pub stacks_unwound: u64,
    pub stacks_kept: u64,
    /// Bytes of records streamed, and of what they took on disk.
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    /// Why the history is stopped, while it is.
    pub failure: Option<String>,
}

/// The segments on disk, oldest first (the current one last).
#[derive(Default)]
pub(super) struct Index {
    pub(super) closed: Vec<SegmentInfo>,
    pub(super) current: Option<SegmentInfo>,
    pub(super) status: HistoryStatus,
}

impl Index {
    pub(super) fn all(&self) -> Vec<SegmentInfo> {
        self.closed.iter().chain(&self.current).cloned().collect()
    }

    pub(super) fn refresh(&mut self) {
        let all = self.all();
        let s = &mut self.status;
        s.bytes = all.iter().map(|x| x.bytes).sum();
        s.segments = all.len() as u32;
        s.oldest = all.iter().map(|x| x.first).min();
        s.newest = all.iter().map(|x| x.last).max();
    }
}
