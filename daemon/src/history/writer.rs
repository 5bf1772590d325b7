//! The history writer: one thread, at `history.writer_nice` as the drain,
//! that takes what the drain (`drain`, a thread of its own) copied out of
//! the recorder's record tap, and the tracking records, once a second
//! (sooner when a MiB waits, a flush asks or it stops); compresses them
//! into frames and appends them to the current segment; starts a new
//! segment (events, then a checkpoint of every process) when the current
//! one is large or old enough; and drops old segments by age and by bytes
//! before each write, so the budget is never exceeded.
//!
//! A write that fails for lack of space drops the oldest segment and tries
//! once more; any other failure (or a second one) stops the history with
//! one log line and a call of `on_failure` (a Watch event): recording, ring
//! dumps and the store are not affected. It starts again with a new
//! segment a while later.

use std::fs::File;
use std::io::{self, Write};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flightrec_files::{Access, Existing, NewFile};

use super::batch::Pending;
use super::disk::remove_segment;
use super::queue::{Fate, fate};
use super::retention::{SegmentInfo, segments_to_drop};
use super::segment::{
    FILE_MAGIC, FrameEncoder, FrameKind, SegmentEvent, SegmentEvents, encode_frame,
};
use super::shared::{HistorySources, Shared, lock};
use super::unwind::{StackUnwinder, UnwindCounts};
use crate::abi::layout::RecordLayouts;
use crate::recorder::{Recorder, layouts_of};
use crate::snapshot::perfdata::tracking_event;
use crate::snapshot::synth;
use crate::time::SampleTime;

/// Pending records are written at least this often, the writer's only
/// round when nothing wakes it (the drain does once a MiB waits; a flush
/// and the stop do): rounds of their own in between drained the rings
/// the drain thread drains anyway, a sixth of an idle daemon's CPU...
const WRITE_EVERY: Duration = Duration::from_secs(1);
/// ...or once this many bytes wait.
const WRITE_AT_BYTES: usize = 1 << 20;
/// After a failure, the history tries a new segment this much later.
const RETRY_AFTER: Duration = Duration::from_secs(30);

struct Segment {
    file: File,
    info: SegmentInfo,
    opened: Instant,
}

pub(super) struct Writer {
    shared: Arc<Shared>,
    sources: HistorySources,
    recorder: Option<Arc<Recorder>>,
    layouts: RecordLayouts,
    segment: Option<Segment>,
    pending: Pending,
    last_write: Instant,
    /// Set while stopped by a failure: when to try again.
    retry_at: Option<Instant>,
    /// Event ids the recorder had at the last round.
    ids: usize,
    /// Kept from frame to frame (made at the first write).
    encoder: Option<FrameEncoder>,
}

impl Writer {
    pub(super) fn new(shared: Arc<Shared>, sources: HistorySources) -> Self {
        Writer {
            shared,
            sources,
            recorder: None,
            layouts: RecordLayouts::default(),
            segment: None,
            pending: Pending::default(),
            last_write: Instant::now(),
            retry_at: None,
            ids: 0,
            encoder: None,
        }
    }

    pub(super) fn run(mut self) {
        let nice = self.shared.settings.writer_nice;
        if nice != 0 {
            crate::perf::sched::run_at_nice(nice, "history.writer_nice");
        }
        let mut next_round = Instant::now() + WRITE_EVERY;
        loop {
            let (stop, flush, due) = {
                let mut wake = lock(&self.shared.wake);
                let due = loop {
                    if wake.stop || wake.flush_asked > wake.flushed || wake.queued {
                        break false;
                    }
                    let left = next_round.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break true;
                    }
                    wake = self
                        .shared
                        .woken
                        .wait_timeout(wake, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                };
                wake.queued = false;
                (wake.stop, wake.flush_asked, due)
            };
            next_round = Instant::now() + WRITE_EVERY;
            self.round(due || stop || flush > lock(&self.shared.wake).flushed);
            let mut wake = lock(&self.shared.wake);
            wake.flushed = wake.flushed.max(flush);
            self.shared.woken.notify_all();
            if stop {
                return;
            }
        }
    }

    /// One round: drain, maybe write (`write_now`: a flush or the stop),
    /// maybe start a new segment.
    fn round(&mut self, write_now: bool) {
        let Some(recorder) = (self.sources.recorder)() else {
            return;
        };
        if recorder.tap().is_none() {
            return;
        }
        self.take_drained(&recorder);
        // A reload, or rings of a CPU that came online, before any of
        // their records: a segment names the ids its records carry.
        let ids = recorder.event_id_count();
        if !self.is_current(&recorder) || ids > self.ids {
            self.switch_to(&recorder, ids);
        }
        self.take_tracking(&recorder);
        if self.retry_at.is_some_and(|at| Instant::now() < at) {
            // Stopped: what was drained is lost to the history, counted.
            let pending = std::mem::take(&mut self.pending);
            let mut index = lock(&self.shared.index);
            for (cpu, batch) in pending.cpus {
                *index.status.lost_per_cpu.entry(cpu).or_default() += batch.count();
            }
            index.status.tracking_dropped += pending.tracking.count();
            return;
        }
        let due = self.segment.as_ref().is_none_or(|s| {
            s.info.bytes >= self.shared.settings.segment_bytes()
                || s.opened.elapsed() >= self.shared.settings.segment_span()
        });
        if due && let Err(e) = self.start_segment(&recorder) {
            self.fail(format!(
                "cannot start a history segment in {}: {e}",
                self.shared.settings.dir.display()
            ));
            return;
        }
        if write_now
            || self.pending.bytes() >= WRITE_AT_BYTES
            || self.last_write.elapsed() >= WRITE_EVERY
        {
            self.write_pending();
        }
    }

    fn is_current(&self, recorder: &Arc<Recorder>) -> bool {
        self.recorder
            .as_ref()
            .is_some_and(|r| Arc::ptr_eq(r, recorder))
    }

    /// Ends the current segment (what is pending written to it first):
    /// records of `recorder` with `ids` event ids go to the next one.
    fn switch_to(&mut self, recorder: &Arc<Recorder>, ids: usize) {
        if self.segment.is_some() {
            self.write_pending();
        }
        self.end_segment();
        self.recorder = Some(Arc::clone(recorder));
        let events = recorder.events();
        self.layouts = layouts_of(&events);
        self.ids = ids;
        // The smallest copy any event takes (the kernel cuts one only to
        // keep a record under 64 KiB).
        let smallest_copy = events
            .iter()
            .filter(|e| e.attr.sample_type & crate::abi::sample::STACK_USER != 0)
            .map(|e| e.attr.sample_stack_user.min(32 << 10) as usize)
            .min();
        if let Some(bytes) = smallest_copy {
            lock(&self.shared.unwinder)
                .get_or_insert_with(StackUnwinder::new)
                .set_smallest_copy(bytes);
        }
    }

    /// Drains the rings once more and adds everything the drain queued to
    /// the pending records, in the order drained.
    fn take_drained(&mut self, recorder: &Arc<Recorder>) {
        let chunks = {
            let mut queue = lock(&self.shared.drained);
            queue.drain(recorder, &self.shared.unwinder);
            queue.take()
        };
        let mut lost_now: Vec<(u32, u64)> = Vec::new();
        let mut spent = Vec::with_capacity(chunks.len());
        if let Some(u) = lock(&self.shared.unwinder).as_mut() {
            u.begin_round();
        }
        for chunk in chunks {
            match fate(self.recorder.as_ref(), self.ids, recorder, &chunk) {
                Fate::Add => {}
                Fate::NewSegment => self.switch_to(&chunk.recorder, chunk.ids),
                Fate::Stale => {
                    let n = crate::ring::records(&chunk.records)
                        .map_while(Result::ok)
                        .count() as u64;
                    lost_now.push((chunk.cpu, n));
                    spent.push(chunk.records);
                    continue;
                }
            }
            // The stack copies the drain left (their processes' maps or
            // files not read yet) become call chains here: the unwinder
            // is held chunk by chunk, so that the drain can use it between.
            let batch = self.pending.cpus.entry(chunk.cpu).or_default();
            let (lost, copied) = match lock(&self.shared.unwinder).as_mut() {
                Some(u) => (
                    u.add_unwound(batch, &chunk.records, &self.layouts, &chunk.recorder),
                    Some(chunk.records),
                ),
                None => batch.add_chunk(chunk.records, &self.layouts),
            };
            if lost > 0 {
                lost_now.push((chunk.cpu, lost));
            }
            spent.extend(copied);
        }
        if let Some(u) = lock(&self.shared.unwinder).as_mut() {
            let counts = std::mem::take(&mut u.counts);
            if counts != UnwindCounts::default() {
                let mut index = lock(&self.shared.index);
                index.status.stacks_unwound += counts.unwound;
                index.status.stacks_kept += counts.kept;
            }
        }
        let mut queue = lock(&self.shared.drained);
        queue.recycle_all(spent);
        queue.unwound(recorder);
        drop(queue);
        if !lost_now.is_empty() {
            let mut index = lock(&self.shared.index);
            for (cpu, lost) in lost_now {
                *index.status.lost_per_cpu.entry(cpu).or_default() += lost;
            }
        }
    }

    fn take_tracking(&mut self, recorder: &Recorder) {
        let Some(tap) = recorder.tap() else {
            return;
        };
        let (tracking, dropped) = tap.take_tracking();
        self.pending.tracking.add(&tracking, &self.layouts);
        if dropped > 0 {
            lock(&self.shared.index).status.tracking_dropped += dropped;
        }
    }

    /// Writes the pending records as frames of the current segment; the
    /// batches keep their buffers for the next records.
    fn write_pending(&mut self) {
        self.last_write = Instant::now();
        let level = self.shared.settings.level;
        let mut encoder = match self.encoder.take() {
            Some(e) => e,
            None => match FrameEncoder::new(level) {
                Ok(e) => e,
                Err(e) => {
                    self.fail(format!("zstd at level {level}: {e}"));
                    return;
                }
            },
        };
        let mut pending = std::mem::take(&mut self.pending);
        // The tracking records first: a crash between two frames then
        // leaves processes without samples on disk, never samples whose
        // processes are not named.
        let batches = std::iter::once((FrameKind::Tracking, 0, &mut pending.tracking)).chain(
            pending
                .cpus
                .iter_mut()
                .map(|(&cpu, batch)| (FrameKind::Samples, cpu, batch)),
        );
        let now = crate::host::sample_clock_now().unwrap_or_default();
        let mut spent = Vec::new();
        for (kind, cpu, batch) in batches {
            for part in batch.frames(now) {
                let raw = part.records.len() as u64;
                let times = part.times;
                let frame = encoder.encode(kind, cpu, times, part.count, part.records);
                let written = frame.and_then(|f| self.append(f, times));
                match written {
                    Ok(stored) => {
                        let mut index = lock(&self.shared.index);
                        index.status.raw_bytes += raw;
                        index.status.stored_bytes += stored;
                    }
                    Err(e) => {
                        self.fail(format!(
                            "writing the history in {} failed: {e}",
                            self.shared.settings.dir.display()
                        ));
                        return;
                    }
                }
            }
            spent.extend(batch.clear());
        }
        self.pending = pending;
        self.encoder = Some(encoder);
        if !spent.is_empty() {
            lock(&self.shared.drained).recycle_all(spent);
        }
    }

    /// Appends `frame` to the current segment after making room for it;
    /// once more after dropping the oldest segment when the disk is full.
    fn append(&mut self, frame: &[u8], (first, last): (SampleTime, SampleTime)) -> io::Result<u64> {
        let Some(segment) = &mut self.segment else {
            return Err(io::Error::other("no segment open"));
        };
        let settings = &self.shared.settings;
        if frame.len() as u64 > settings.max_bytes {
            return Err(io::Error::other("a frame larger than history.max_bytes"));
        }
        make_room(&self.shared, segment.info.bytes, frame.len() as u64);
        let mut result = segment.file.write_all(frame);
        if let Err(e) = &result
            && crate::snapshot::output::is_disk_full_io(e)
            && drop_oldest(&self.shared)
        {
            result = segment.file.write_all(frame);
        }
        result?;
        let info = &mut segment.info;
        info.bytes += frame.len() as u64;
        info.first = info.first.min(first);
        info.last = info.last.max(last);
        let mut index = lock(&self.shared.index);
        index.current = Some(info.clone());
        index.refresh();
        Ok(frame.len() as u64)
    }

    /// Closes the current segment (what is pending is written to it
    /// first) and opens a new one: the events, then every process now.
    fn start_segment(&mut self, recorder: &Recorder) -> io::Result<()> {
        let now = crate::host::sample_clock_now()
            .ok_or_else(|| io::Error::other("the sample clock cannot be read"))?;
        let checkpoint = recorder
            .tap()
            .ok_or_else(|| io::Error::other("the recorder has no record tap"))?
            .checkpoint(now.as_nanos())
            .map_err(|e| io::Error::other(format!("walking the tracking log failed: {e}")))?;
        self.pending
            .tracking
            .add(&checkpoint.records, &self.layouts);
        if self.segment.is_some() {
            self.write_pending();
        }
        self.end_segment();
        if checkpoint.dropped > 0 {
            lock(&self.shared.index).status.tracking_dropped += checkpoint.dropped;
        }

        let events = recorder.events();
        let tracking = tracking_event(&events)
            .ok_or_else(|| io::Error::other("the recorder has no tracking event"))?;
        let mut state = Vec::new();
        let count = synth::push_process_state(
            &mut state,
            &events[tracking].attr,
            events[tracking].ids.first().copied().unwrap_or(0),
            now.as_nanos(),
            &checkpoint.processes,
        );
        let described = SegmentEvents {
            boot_id: self.shared.boot_id.clone(),
            events: events
                .iter()
                .map(|e| SegmentEvent {
                    name: e.name.clone(),
                    sample_type: e.attr.sample_type,
                    ids: e.ids.clone(),
                })
                .collect(),
        };
        let level = self.shared.settings.level;
        let head = [
            encode_frame(
                FrameKind::Events,
                0,
                (now, now),
                0,
                &described.to_bytes(),
                level,
            )?,
            encode_frame(
                FrameKind::Checkpoint,
                0,
                (now, now),
                u32::try_from(count).unwrap_or(u32::MAX),
                &state,
                level,
            )?,
        ]
        .concat();
        let name = format!("seg-{:020}.hist", unix_now_ns());
        let settings = &self.shared.settings;
        make_room(&self.shared, 0, (FILE_MAGIC.len() + head.len()) as u64);
        let new = NewFile::create(&settings.dir, &name, Access::new(0o640, settings.group))?;
        // Not synced: a segment outlives a restart of the daemon (the page
        // cache keeps it) but not a reboot (another boot's segments are
        // removed at start), so a sync buys nothing and only holds the
        // writer while the rings fill (the file's and the directory's: a
        // millisecond here, a wait for the filesystem's journal anywhere).
        let mut file = new
            .place_unsynced(Existing::Keep)
            .map_err(|e| e.into_io())?;
        file.write_all(FILE_MAGIC)?;
        file.write_all(&head)?;
        let info = SegmentInfo {
            path: settings.dir.join(&name),
            first: now,
            last: now,
            bytes: (FILE_MAGIC.len() + head.len()) as u64,
            checkpoint: now,
            events: Arc::new(described),
        };
        let mut index = lock(&self.shared.index);
        index.current = Some(info.clone());
        if index.status.failure.take().is_some() {
            tracing::info!(dir = %settings.dir.display(), "the history records again");
        }
        index.refresh();
        drop(index);
        self.segment = Some(Segment {
            file,
            info,
            opened: Instant::now(),
        });
        self.retry_at = None;
        Ok(())
    }

    fn end_segment(&mut self) {
        if let Some(segment) = self.segment.take() {
            let mut index = lock(&self.shared.index);
            index.current = None;
            index.closed.push(segment.info);
            index.refresh();
        }
    }

    /// Stops the history until [`RETRY_AFTER`]: logged once, and told.
    fn fail(&mut self, why: String) {
        self.end_segment();
        self.pending = Pending::default();
        self.retry_at = Some(Instant::now() + RETRY_AFTER);
        let mut index = lock(&self.shared.index);
        if index.status.failure.is_none() {
            tracing::error!(
                "{why}; the history stops (recording and ring dumps go on) and tries again \
                 in {}s",
                RETRY_AFTER.as_secs()
            );
            index.status.failure = Some(why.clone());
            drop(index);
            (self.sources.on_failure)(why);
        }
    }
}

/// Drops the segments [`segments_to_drop`] names before `incoming` bytes
/// are added to a current segment of `current` bytes.
fn make_room(shared: &Shared, current: u64, incoming: u64) {
    let now = crate::host::sample_clock_now().unwrap_or_default();
    let settings = &shared.settings;
    let mut index = lock(&shared.index);
    let n = segments_to_drop(
        &index.closed,
        current,
        incoming,
        now,
        settings.max_age,
        settings.max_bytes,
    );
    for segment in index.closed.drain(..n) {
        remove_segment(&segment.path);
    }
    if n > 0 {
        index.refresh();
    }
}

/// Drops the oldest closed segment; false when there is none.
fn drop_oldest(shared: &Shared) -> bool {
    let mut index = lock(&shared.index);
    if index.closed.is_empty() {
        return false;
    }
    let oldest = index.closed.remove(0);
    remove_segment(&oldest.path);
    tracing::warn!(
        segment = %oldest.path.display(),
        "the disk is full: the oldest history segment was dropped to make room"
    );
    index.refresh();
    true
}

fn unix_now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}
