//! The history writer: one thread, at normal priority, that drains every
//! CPU's history ring and the tracking records a few times a second,
//! compresses them into frames and appends them to the current segment;
//! starts a new segment (events, then a checkpoint of every process) when
//! the current one is large or old enough; and drops old segments by age
//! and by bytes before each write, so the budget is never exceeded.
//!
//! A write that fails for lack of space drops the oldest segment and tries
//! once more; any other failure (or a second one) stops the history with
//! one log line and a call of `on_failure` (a Watch event): recording, ring
//! dumps and the store are not affected. It starts again with a new
//! segment a while later.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flightrec_files::{Access, Existing, NewFile};

use super::retention::{SegmentInfo, segments_to_drop};
use super::segment::{
    FILE_MAGIC, FrameKind, MAX_RAW_BYTES, SegmentEvent, SegmentEvents, encode_frame,
};
use crate::abi::layout::RecordLayouts;
use crate::abi::record_type;
use crate::recorder::Recorder;
use crate::snapshot::perfdata::tracking_event;
use crate::snapshot::synth;

/// How often the rings are drained...
const ROUND: Duration = Duration::from_millis(200);
/// ...and how soon again after a round that drained this much of a ring.
const BUSY_ROUND: Duration = Duration::from_millis(20);
const BUSY_BYTES: usize = 256 << 10;
/// Pending records are written at least this often...
const WRITE_EVERY: Duration = Duration::from_secs(1);
/// ...or once this many bytes wait.
const WRITE_AT_BYTES: usize = 1 << 20;
/// After a failure, the history tries a new segment this much later.
const RETRY_AFTER: Duration = Duration::from_secs(30);

/// `[history]` as the writer applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistorySettings {
    pub dir: PathBuf,
    pub max_age: Duration,
    pub max_bytes: u64,
    pub level: i32,
    /// The group of the segment files (the socket group), as snapshots.
    pub group: Option<u32>,
}

impl HistorySettings {
    /// A segment is closed past this many bytes: a 32nd of the budget, so
    /// dropping one frees little of the look-back.
    fn segment_bytes(&self) -> u64 {
        (self.max_bytes / 32).clamp(64 << 10, 64 << 20)
    }

    /// ... or past this age: a tenth of `max_age`.
    fn segment_span(&self) -> Duration {
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
    /// Sample times of the oldest and newest record held (0: none).
    pub oldest_ns: u64,
    pub newest_ns: u64,
    /// Sample records the kernel dropped because the writer fell behind
    /// (LOST records of the history rings), per CPU.
    pub lost_per_cpu: BTreeMap<u32, u64>,
    /// Tracking records that never reached the history.
    pub tracking_dropped: u64,
    /// Bytes of records streamed, and of what they took on disk.
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    /// Why the history is stopped, while it is.
    pub failure: Option<String>,
}

/// The segments on disk, oldest first (the current one last).
#[derive(Default)]
struct Index {
    closed: Vec<SegmentInfo>,
    current: Option<SegmentInfo>,
    status: HistoryStatus,
}

impl Index {
    fn all(&self) -> Vec<SegmentInfo> {
        self.closed.iter().chain(&self.current).cloned().collect()
    }

    fn refresh(&mut self) {
        let all = self.all();
        let s = &mut self.status;
        s.bytes = all.iter().map(|x| x.bytes).sum();
        s.segments = all.len() as u32;
        s.oldest_ns = all
            .iter()
            .map(|x| x.first_ns)
            .filter(|&t| t > 0)
            .min()
            .unwrap_or(0);
        s.newest_ns = all.iter().map(|x| x.last_ns).max().unwrap_or(0);
    }
}

#[derive(Default)]
struct Wake {
    stop: bool,
    flush_asked: u64,
    flushed: u64,
}

struct Shared {
    settings: HistorySettings,
    boot_id: String,
    index: Mutex<Index>,
    wake: Mutex<Wake>,
    woken: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The running history: dropping it stops and joins the writer.
pub struct History {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Where the writer gets the recorder of the moment (a reload may open a
/// new one; None once the daemon is going away) and says that it stopped.
pub struct HistorySources {
    pub recorder: Box<dyn Fn() -> Option<Arc<Recorder>> + Send>,
    pub on_failure: Box<dyn Fn(String) + Send>,
}

/// This boot's id: sample times of another boot mean nothing in this one.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl History {
    /// Creates the directory if needed, indexes the segments already there
    /// (those of another boot, and empty ones, are removed) and starts the
    /// writer.
    pub fn start(settings: HistorySettings, sources: HistorySources) -> io::Result<Self> {
        create_dir(&settings.dir, settings.group)?;
        let boot_id = boot_id();
        let closed = super::read::index_dir(&settings.dir, &boot_id)?;
        let mut index = Index {
            closed,
            current: None,
            status: HistoryStatus {
                dir: settings.dir.clone(),
                max_bytes: settings.max_bytes,
                max_age: settings.max_age,
                ..HistoryStatus::default()
            },
        };
        index.refresh();
        let shared = Arc::new(Shared {
            settings,
            boot_id,
            index: Mutex::new(index),
            wake: Mutex::new(Wake::default()),
            woken: Condvar::new(),
        });
        let s2 = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("flightrec-history".into())
            .spawn(move || Writer::new(s2, sources).run())?;
        Ok(History {
            shared,
            thread: Some(thread),
        })
    }

    /// Writes everything recorded so far, waiting at most `timeout`.
    /// Returns whether it was done in time.
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut wake = lock(&self.shared.wake);
        wake.flush_asked += 1;
        let asked = wake.flush_asked;
        self.shared.woken.notify_all();
        while wake.flushed < asked && !wake.stop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            wake = self
                .shared
                .woken
                .wait_timeout(wake, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    pub fn status(&self) -> HistoryStatus {
        lock(&self.shared.index).status.clone()
    }

    /// The segments on disk now, oldest first.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        lock(&self.shared.index).all()
    }

    pub fn boot_id(&self) -> &str {
        &self.shared.boot_id
    }
}

impl Drop for History {
    fn drop(&mut self) {
        lock(&self.shared.wake).stop = true;
        self.shared.woken.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Creates `dir` (and its parents) 0750 with the group, as the store does
/// for its own directory.
fn create_dir(dir: &Path, group: Option<u32>) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    match std::fs::symlink_metadata(dir) {
        Ok(md) if md.is_dir() => return Ok(()),
        Ok(_) => {
            return Err(io::Error::other(format!(
                "{} exists and is not a directory",
                dir.display()
            )));
        }
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        Err(_) => {}
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)?;
    let d = File::open(dir)?;
    d.set_permissions(std::fs::Permissions::from_mode(0o750))?;
    if let Some(gid) = group {
        std::os::unix::fs::fchown(&d, None, Some(gid))?;
    }
    Ok(())
}

/// Records waiting to be written: per CPU, and the tracking records.
#[derive(Default)]
struct Pending {
    cpus: BTreeMap<u32, Batch>,
    tracking: Batch,
}

#[derive(Default)]
struct Batch {
    records: Vec<u8>,
    count: u32,
    first_ns: u64,
    last_ns: u64,
}

impl Batch {
    /// Appends the whole records of `bytes`; returns the samples its LOST
    /// records say were dropped.
    fn add(&mut self, bytes: &[u8], layouts: &RecordLayouts) -> u64 {
        let mut lost = 0;
        for (header, record) in crate::ring::records(bytes).map_while(Result::ok) {
            if header.type_ == record_type::LOST && record.len() >= 24 {
                lost += crate::abi::get_u64(record, 16);
            }
            if let (Some(t), _) = layouts.time_and_cpu(record) {
                self.first_ns = if self.count == 0 || self.first_ns == 0 {
                    t
                } else {
                    self.first_ns.min(t)
                };
                self.last_ns = self.last_ns.max(t);
            }
            self.records.extend_from_slice(record);
            self.count += 1;
        }
        lost
    }

    fn take(&mut self) -> Batch {
        std::mem::take(self)
    }
}

impl Pending {
    fn bytes(&self) -> usize {
        self.cpus.values().map(|b| b.records.len()).sum::<usize>() + self.tracking.records.len()
    }
}

struct Segment {
    file: File,
    info: SegmentInfo,
    opened: Instant,
}

struct Writer {
    shared: Arc<Shared>,
    sources: HistorySources,
    recorder: Option<Arc<Recorder>>,
    layouts: RecordLayouts,
    segment: Option<Segment>,
    pending: Pending,
    scratch: Vec<u8>,
    last_write: Instant,
    /// Set while stopped by a failure: when to try again.
    retry_at: Option<Instant>,
    /// The last round drained [`BUSY_BYTES`] of some ring.
    busy: bool,
}

impl Writer {
    fn new(shared: Arc<Shared>, sources: HistorySources) -> Self {
        Writer {
            shared,
            sources,
            recorder: None,
            layouts: RecordLayouts::default(),
            segment: None,
            pending: Pending::default(),
            scratch: Vec::new(),
            last_write: Instant::now(),
            retry_at: None,
            busy: false,
        }
    }

    fn run(mut self) {
        loop {
            let (stop, flush) = {
                let wake = lock(&self.shared.wake);
                let wake = if wake.stop || wake.flush_asked > wake.flushed {
                    wake
                } else {
                    let round = if self.busy { BUSY_ROUND } else { ROUND };
                    self.shared
                        .woken
                        .wait_timeout(wake, round)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                };
                (wake.stop, wake.flush_asked)
            };
            self.round(stop || flush > lock(&self.shared.wake).flushed);
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
        if !recorder.records_history() {
            return;
        }
        let same = self
            .recorder
            .as_ref()
            .is_some_and(|r| Arc::ptr_eq(r, &recorder));
        if !same {
            self.recorder = Some(Arc::clone(&recorder));
            self.layouts = layouts_of(&recorder);
            self.end_segment();
        }
        self.drain(&recorder);
        if self.retry_at.is_some_and(|at| Instant::now() < at) {
            // Stopped: what was drained is lost to the history (counted).
            self.pending = Pending::default();
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

    fn drain(&mut self, recorder: &Recorder) {
        let layouts = &self.layouts;
        let pending = &mut self.pending;
        let mut lost_now: Vec<(u32, u64)> = Vec::new();
        let mut busy = false;
        recorder.drain_history(&mut self.scratch, &mut |cpu, bytes| {
            busy |= bytes.len() >= BUSY_BYTES;
            let lost = pending.cpus.entry(cpu).or_default().add(bytes, layouts);
            if lost > 0 {
                lost_now.push((cpu, lost));
            }
        });
        self.busy = busy;
        let (tracking, dropped) = recorder.take_tracking_for_history();
        self.pending.tracking.add(&tracking, &self.layouts);
        if !lost_now.is_empty() || dropped > 0 {
            let mut index = lock(&self.shared.index);
            for (cpu, lost) in lost_now {
                *index.status.lost_per_cpu.entry(cpu).or_default() += lost;
            }
            index.status.tracking_dropped += dropped;
        }
    }

    /// Writes the pending records as frames of the current segment.
    fn write_pending(&mut self) {
        self.last_write = Instant::now();
        let pending = std::mem::take(&mut self.pending);
        let level = self.shared.settings.level;
        let mut frames = Vec::new();
        for (cpu, mut batch) in pending.cpus {
            frames.extend(split(FrameKind::Samples, cpu, batch.take()));
        }
        frames.extend(split(FrameKind::Tracking, 0, pending.tracking));
        for (kind, cpu, batch) in frames {
            if batch.count == 0 {
                continue;
            }
            let raw = batch.records.len() as u64;
            let frame = encode_frame(
                kind,
                cpu,
                (batch.first_ns, batch.last_ns),
                batch.count,
                &batch.records,
                level,
            );
            let written = frame.and_then(|f| self.append(&f, batch.first_ns, batch.last_ns));
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
    }

    /// Appends `frame` to the current segment after making room for it;
    /// once more after dropping the oldest segment when the disk is full.
    fn append(&mut self, frame: &[u8], first_ns: u64, last_ns: u64) -> io::Result<u64> {
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
        info.first_ns = if info.first_ns == 0 {
            first_ns
        } else {
            info.first_ns.min(first_ns)
        };
        info.last_ns = info.last_ns.max(last_ns);
        let mut index = lock(&self.shared.index);
        index.current = Some(info.clone());
        index.refresh();
        Ok(frame.len() as u64)
    }

    /// Closes the current segment (what is pending is written to it
    /// first) and opens a new one: the events, then every process now.
    fn start_segment(&mut self, recorder: &Recorder) -> io::Result<()> {
        let now_ns = crate::host::sample_clock_ns()
            .ok_or_else(|| io::Error::other("the sample clock cannot be read"))?;
        let checkpoint = recorder
            .history_checkpoint(now_ns)
            .map_err(io::Error::other)?;
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
            now_ns,
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
                (now_ns, now_ns),
                0,
                &described.to_bytes(),
                level,
            )?,
            encode_frame(
                FrameKind::Checkpoint,
                0,
                (now_ns, now_ns),
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
        let mut file = new.commit(Existing::Keep).map_err(|e| e.into_io())?;
        file.write_all(FILE_MAGIC)?;
        file.write_all(&head)?;
        let info = SegmentInfo {
            path: settings.dir.join(&name),
            first_ns: now_ns,
            last_ns: now_ns,
            bytes: (FILE_MAGIC.len() + head.len()) as u64,
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

/// Splits a batch into frames of at most [`MAX_RAW_BYTES`] (whole records).
fn split(kind: FrameKind, cpu: u32, batch: Batch) -> Vec<(FrameKind, u32, Batch)> {
    if batch.records.len() <= MAX_RAW_BYTES {
        return vec![(kind, cpu, batch)];
    }
    let mut out = Vec::new();
    let mut part = Batch {
        first_ns: batch.first_ns,
        last_ns: batch.last_ns,
        ..Batch::default()
    };
    for (_, record) in crate::ring::records(&batch.records).map_while(Result::ok) {
        if part.records.len() + record.len() > MAX_RAW_BYTES {
            out.push((kind, cpu, std::mem::take(&mut part)));
            part.first_ns = batch.first_ns;
            part.last_ns = batch.last_ns;
        }
        part.records.extend_from_slice(record);
        part.count += 1;
    }
    out.push((kind, cpu, part));
    out
}

/// Drops the segments [`segments_to_drop`] names before `incoming` bytes
/// are added to a current segment of `current` bytes.
fn make_room(shared: &Shared, current: u64, incoming: u64) {
    let now_ns = crate::host::sample_clock_ns().unwrap_or(0);
    let settings = &shared.settings;
    let mut index = lock(&shared.index);
    let n = segments_to_drop(
        &index.closed,
        current,
        incoming,
        now_ns,
        u64::try_from(settings.max_age.as_nanos()).unwrap_or(u64::MAX),
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

fn remove_segment(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(segment = %path.display(), "removing a history segment failed: {e}");
    }
}

fn layouts_of(recorder: &Recorder) -> RecordLayouts {
    let mut layouts = RecordLayouts::default();
    for e in recorder.events() {
        for id in e.ids {
            layouts.insert(id, e.attr.sample_type);
        }
    }
    layouts
}

fn unix_now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}
