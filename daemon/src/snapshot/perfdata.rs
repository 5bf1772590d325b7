//! The perf.data (PERFILE2) encoder: records in, a file perf 6.1 reads
//! out, written as they come so a window of any length costs the memory of
//! one piece of it.
//!
//! Layout: `header | id arrays | attrs | data | feature index |
//! feature bodies`. The header goes last (its sizes are known only then),
//! over the placeholder written first. The data section holds, in the
//! order they are given:
//! 1. synthesized state at the window's start ([`Encoder::window_start`]):
//!    the kernel MMAP, the modules', then COMM and MMAP2 of every known
//!    thread, stamped just before the start;
//! 2. tracking records and samples ([`Encoder::tracking`],
//!    [`Encoder::samples`]), verbatim and in any time order (perf 6.1
//!    sorts a whole file by time when it has no FINISHED_ROUND records,
//!    which this writer never emits);
//! 3. loss records, made at [`Encoder::finish`]: per CPU a LOST_SAMPLES
//!    with the samples its kernel LOST records say were dropped inside the
//!    window, stamped after the CPU's newest sample. Samples dropped while
//!    a capture paused the ring (`buffers.lossless_freeze = false`) were
//!    dropped after the window ended: they are not this snapshot's to
//!    report (the dump's reply and `status` count them; the kernel's LOST
//!    record for them is in the next snapshot's window).
//!
//! With compression, records are gathered into batches of [`PACK_BATCH`]
//! and each batch is packed into COMPRESSED records in parallel.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::Arc;

use thiserror::Error;

use crate::abi::layout::RecordLayouts;
use crate::abi::{ATTR_SIZE, attr_flag, event_type, sw_event};

use super::build_ids::BuildIdTable;
use super::compress::{self, MAX_RECORD_INPUT};
use super::features;
use super::scope::{self, ScopeFilter};
pub use super::summary::{CompressionSummary, DataSummary, PerfData};
use super::synth::{self, SampleId};
use crate::host::{HostInfo, format_id};
use crate::recorder::{Capture, EventDescriptor, layouts_of};
use crate::ring::filter::{Kept, RecordFilter};
use crate::time::SampleTime;
use crate::tracking::modules::LoadedModule;
use crate::tracking::state::ProcessState;
pub use flightrec_perfdata::format::{
    FEATURE_BITMAP_OFFSET, FILE_HEADER_SIZE, LEVELS, LevelError, MAGIC, check_level, feature_index,
    file_header, has_feature, is_compressed,
};

/// Records packed at once when compressing: two parallel jobs.
pub const PACK_BATCH: usize = 2 * compress::JOB_BYTES;

/// Sample records walked and then written at once, uncompressed: well
/// inside a core's cache. Packing walks its own jobs of
/// [`compress::JOB_BYTES`] and is given the records whole.
const SAMPLES_PIECE_BYTES: usize = 512 << 10;

/// Processes whose state at a window's start is written out at once.
const SYNTH_PROCESSES_AT_ONCE: usize = 32;

#[derive(Debug, Error)]
pub enum PerfDataError {
    #[error("the capture has no events")]
    NoEvents,
    #[error("event {event} has no kernel ids; with several events every record needs one")]
    MissingIds { event: String },
    #[error("no tracefs format gathered for tracepoint event {event}")]
    MissingTracepointFormat { event: String },
    #[error(
        "tracepoint event {event} was opened with id {config} but tracefs now says {format_id}"
    )]
    TracepointIdMismatch {
        event: String,
        config: u64,
        format_id: u64,
    },
    #[error(transparent)]
    Level(#[from] LevelError),
    #[error("compressing the records: {source}")]
    Compress { source: io::Error },
    #[error("{source}")]
    Write { source: io::Error },
}

/// How a snapshot is written.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// zstd level, `None` for an uncompressed file.
    pub compression: Option<i32>,
    /// Host facts gathered at daemon start; `None` gathers them (I/O) when
    /// [`super::output::write_snapshot`] runs.
    pub host: Option<Arc<HostInfo>>,
    /// Part of the machine only (None: all of it).
    pub scope: Option<ScopeFilter>,
}

/// Where an encoded file goes: appended to, then its header written over
/// the placeholder at offset 0.
pub trait Sink {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()>;
}

impl Sink for Vec<u8> {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.extend_from_slice(bytes);
        Ok(())
    }

    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let at = usize::try_from(offset).map_err(io::Error::other)?;
        let end = at + bytes.len();
        if end > self.len() {
            self.resize(end, 0);
        }
        self[at..end].copy_from_slice(bytes);
        Ok(())
    }
}

/// Index of the tracking event: the one recording COMM/MMAP/task records
/// (the capture names it last), else the last event.
pub fn tracking_event(events: &[EventDescriptor]) -> Option<usize> {
    let tracks = |e: &EventDescriptor| {
        e.attr.flags & (attr_flag::COMM | attr_flag::MMAP | attr_flag::MMAP2 | attr_flag::TASK) != 0
    };
    let dummy = |e: &EventDescriptor| {
        e.attr.type_ == event_type::SOFTWARE && e.attr.config == sw_event::DUMMY
    };
    events
        .iter()
        .rposition(|e| tracks(e) && dummy(e))
        .or_else(|| events.iter().rposition(tracks))
        .or_else(|| events.len().checked_sub(1))
}

fn check_events(events: &[EventDescriptor], host: &HostInfo) -> Result<(), PerfDataError> {
    if events.is_empty() {
        return Err(PerfDataError::NoEvents);
    }
    if events.len() > 1
        && let Some(e) = events.iter().find(|e| e.ids.is_empty())
    {
        return Err(PerfDataError::MissingIds {
            event: e.name.clone(),
        });
    }
    for e in events {
        let Some((system, name)) = &e.tracepoint else {
            continue;
        };
        let format = host.tracing.format(system, name).ok_or_else(|| {
            PerfDataError::MissingTracepointFormat {
                event: e.name.clone(),
            }
        })?;
        if let Some(id) = format.id.or_else(|| format_id(&format.format))
            && e.attr.type_ == event_type::TRACEPOINT
            && id != e.attr.config
        {
            return Err(PerfDataError::TracepointIdMismatch {
                event: e.name.clone(),
                config: e.attr.config,
                format_id: id,
            });
        }
    }
    Ok(())
}

/// What one CPU's samples said, for its LOST_SAMPLES record.
#[derive(Debug, Default)]
struct CpuTally {
    event_id: Option<u64>,
    lost: u64,
    newest: Option<SampleTime>,
}

/// A perf.data file being written into a [`Sink`].
pub struct Encoder<'h, S: Sink> {
    sink: S,
    host: &'h HostInfo,
    events: Vec<EventDescriptor>,
    tracking: usize,
    /// The first event with ids but the tracking one: LOST_SAMPLES go
    /// under it.
    sample_event: usize,
    layouts: RecordLayouts,
    level: Option<i32>,
    attrs_section: (u64, u64),
    data_offset: u64,
    /// Records waiting to be packed (compression only).
    pending: Vec<u8>,
    window_start: Option<SampleTime>,
    cpus: BTreeMap<u32, CpuTally>,
    sampled_pids: BTreeSet<u32>,
    /// Samples per cgroup id.
    sampled_cgroups: BTreeMap<u64, u64>,
    build_ids: BuildIdTable,
    /// For a snapshot of part of the machine: what it keeps.
    scope: Option<ScopeFilter>,
    /// Records a scope keeps, gathered before they are written.
    scoped: Vec<u8>,
    summary: DataSummary,
}

impl<'h, S: Sink> Encoder<'h, S> {
    /// Starts a file of `events` in `sink`: the header's placeholder, the
    /// id arrays and the attrs.
    pub fn begin(
        mut sink: S,
        host: &'h HostInfo,
        events: Vec<EventDescriptor>,
        compression: Option<i32>,
    ) -> Result<Self, PerfDataError> {
        check_events(&events, host)?;
        if let Some(level) = compression {
            check_level(level)?;
        }
        let tracking = tracking_event(&events).ok_or(PerfDataError::NoEvents)?;
        let sample_event = events
            .iter()
            .enumerate()
            .find(|(i, e)| *i != tracking && !e.ids.is_empty())
            .map_or(tracking, |(i, _)| i);
        let mut ids = Vec::new();
        let ids_offset = FILE_HEADER_SIZE as u64;
        let mut id_sections = Vec::with_capacity(events.len());
        for e in &events {
            let offset = ids_offset + ids.len() as u64;
            for id in &e.ids {
                ids.extend_from_slice(&id.to_le_bytes());
            }
            id_sections.push((offset, (e.ids.len() * 8) as u64));
        }
        let attrs_offset = ids_offset + ids.len() as u64;
        let mut attrs = Vec::with_capacity(events.len() * (ATTR_SIZE + 16));
        for (e, (off, size)) in events.iter().zip(&id_sections) {
            attrs.extend_from_slice(&e.attr.to_bytes());
            attrs.extend_from_slice(&off.to_le_bytes());
            attrs.extend_from_slice(&size.to_le_bytes());
        }
        let write = |source| PerfDataError::Write { source };
        sink.append(&[0u8; FILE_HEADER_SIZE]).map_err(write)?;
        sink.append(&ids).map_err(write)?;
        sink.append(&attrs).map_err(write)?;
        Ok(Encoder {
            layouts: layouts_of(&events),
            sink,
            host,
            tracking,
            sample_event,
            level: compression,
            attrs_section: (attrs_offset, attrs.len() as u64),
            data_offset: attrs_offset + attrs.len() as u64,
            pending: Vec::new(),
            window_start: None,
            cpus: BTreeMap::new(),
            sampled_pids: BTreeSet::new(),
            sampled_cgroups: BTreeMap::new(),
            build_ids: BuildIdTable::default(),
            scope: None,
            scoped: Vec::new(),
            summary: DataSummary::default(),
            events,
        })
    }

    /// Keeps only what `scope` holds, from here on.
    pub fn set_scope(&mut self, scope: ScopeFilter) {
        self.scope = Some(scope);
    }

    /// Samples written per cgroup id so far.
    pub fn sampled_cgroups(&self) -> &BTreeMap<u64, u64> {
        &self.sampled_cgroups
    }

    /// The events of the file, as [`Encoder::begin`] took them.
    pub fn events(&self) -> &[EventDescriptor] {
        &self.events
    }

    /// The data section's first records: the state at `start` (the
    /// kernel's and the modules' maps, modules loaded since start up to it
    /// from `loaded`, every cgroup, every process of `processes`), stamped
    /// just before.
    pub fn window_start(
        &mut self,
        start: Option<SampleTime>,
        kernel_text: Option<u64>,
        loaded: &[LoadedModule],
        (cgroups, processes): (&[(u64, Arc<str>)], &[ProcessState]),
    ) -> Result<(), PerfDataError> {
        self.window_start = start;
        let tracking = &self.events[self.tracking];
        let tracking_id = tracking.ids.first().copied().unwrap_or(0);
        let synth_time = start.map_or(0, |s| s.as_nanos().saturating_sub(1));
        let mut head = Vec::new();
        if let Some(text) = kernel_text {
            let id = SampleId {
                pid: u32::MAX,
                tid: 0,
                time: synth_time,
                id: tracking_id,
                cpu: 0,
            };
            synth::push_kernel_mmap(&mut head, &tracking.attr, text, &id);
            self.summary.synthesized_records += 1;
            // Modules of the start, then those loaded later but before the
            // window (in load order: a reload's map replaces the old one); a
            // load inside the window has its record among the tracking
            // records.
            let start_ns = start.map_or(0, SampleTime::as_nanos);
            let loaded_before = loaded
                .iter()
                .filter(|l| l.time_ns < start_ns)
                .map(|l| &l.module);
            for m in self.host.modules.iter().chain(loaded_before) {
                synth::push_module_mmap(&mut head, &tracking.attr, m.start, m.size, &m.path, &id);
                self.summary.synthesized_records += 1;
            }
        }
        let (cgroups, processes): (Cow<[_]>, Cow<[_]>) = match &self.scope {
            Some(scope) => (
                cgroups
                    .iter()
                    .filter(|(id, _)| scope.cgroups.contains(id))
                    .cloned()
                    .collect(),
                processes
                    .iter()
                    .filter(|p| scope.pids.contains(&p.pid))
                    .cloned()
                    .collect(),
            ),
            None => (Cow::Borrowed(cgroups), Cow::Borrowed(processes)),
        };
        let attr = tracking.attr;
        self.summary.synthesized_records +=
            synth::push_cgroups(&mut head, &attr, tracking_id, synth_time, &cgroups);
        // Out a few processes at a time: the maps of every process are
        // most of a small snapshot (hundreds of KiB), a buffer that large
        // made anew for each dump is pages faulted in and copied as it grows.
        for some in processes.chunks(SYNTH_PROCESSES_AT_ONCE) {
            self.summary.synthesized_records +=
                synth::push_process_state(&mut head, &attr, tracking_id, synth_time, some);
            self.push(&head)?;
            head.clear();
        }
        self.build_ids.add_processes(&processes);
        self.push(&head)
    }

    /// Tracking records (COMM, FORK, EXIT, MMAP2...): whole records; a torn
    /// tail is dropped and counted.
    pub fn tracking(&mut self, records: &[u8]) -> Result<(), PerfDataError> {
        let kept = RecordFilter::all(&self.layouts).scan(records);
        let whole = &records[..kept.bytes as usize];
        self.summary.torn_bytes += (records.len() - whole.len()) as u64;
        let Some(scope) = &self.scope else {
            self.build_ids.add_tracking(whole);
            return self.push(whole);
        };
        let mut scoped = std::mem::take(&mut self.scoped);
        scoped.clear();
        for (_, record) in crate::ring::records(whole).map_while(Result::ok) {
            if scope.tracking(record) {
                scoped.extend_from_slice(record);
            }
        }
        self.build_ids.add_tracking(&scoped);
        let pushed = self.push(&scoped);
        self.scoped = scoped;
        pushed
    }

    /// Sample records of `cpu` (and the kernel's LOST records among them),
    /// whole records; a torn tail is dropped and counted. `event_id`: the
    /// id LOST_SAMPLES of this CPU go under, if known.
    pub fn samples(
        &mut self,
        cpu: u32,
        event_id: Option<u64>,
        records: &[u8],
    ) -> Result<Kept, PerfDataError> {
        let mut scoped = std::mem::take(&mut self.scoped);
        let records = match &self.scope {
            None => records,
            Some(scope) => {
                scoped.clear();
                for (_, record) in crate::ring::records(records).map_while(Result::ok) {
                    match scope.sample(record, &self.layouts) {
                        scope::Kept::Whole => scoped.extend_from_slice(record),
                        scope::Kept::Rewritten(r) => scoped.extend_from_slice(&r),
                        scope::Kept::Dropped => {}
                    }
                }
                &scoped
            }
        };
        let written = self.write_samples(cpu, event_id, records);
        self.scoped = scoped;
        written
    }

    fn write_samples(
        &mut self,
        cpu: u32,
        event_id: Option<u64>,
        records: &[u8],
    ) -> Result<Kept, PerfDataError> {
        // A piece at a time, walked and then copied out while its bytes
        // are still in the cache: a ring of 32 MiB walked whole and then
        // copied is read from memory twice.
        let piece_bytes = if self.level.is_some() {
            usize::MAX
        } else {
            SAMPLES_PIECE_BYTES
        };
        let mut kept = Kept::default();
        let mut start = 0;
        loop {
            let rest = &records[start..];
            let sampled_cgroups = &mut self.sampled_cgroups;
            let (mut piece, pids) = RecordFilter::all(&self.layouts).scan_samples(
                rest,
                piece_bytes,
                |record, layout| {
                    if let Some(cgroup) = layout.sample_cgroup(record) {
                        *sampled_cgroups.entry(cgroup).or_default() += 1;
                    }
                },
            );
            let len = piece.bytes as usize;
            self.sampled_pids.extend(pids);
            self.push(&rest[..len])?;
            if let Some(corruption) = &mut piece.corruption {
                corruption.offset += start as u64;
            }
            kept.merge(&piece);
            start += len;
            if len == 0 || piece.corruption.is_some() {
                break;
            }
        }
        self.summary.torn_bytes += (records.len() - start) as u64;
        self.summary.samples += kept.samples;
        self.summary.first_sample = min_some(self.summary.first_sample, kept.oldest);
        self.summary.last_sample = self.summary.last_sample.max(kept.newest);
        let tally = self.cpus.entry(cpu).or_default();
        tally.event_id = tally.event_id.or(event_id);
        tally.lost = tally.lost.saturating_add(kept.lost);
        tally.newest = tally.newest.max(kept.newest);
        Ok(kept)
    }

    /// Appends records to the data section, packed when compressing: small
    /// pieces gather into a batch, a large one is packed on its own.
    fn push(&mut self, records: &[u8]) -> Result<(), PerfDataError> {
        if records.is_empty() {
            return Ok(());
        }
        let Some(level) = self.level else {
            self.summary.data_bytes += records.len() as u64;
            return self
                .sink
                .append(records)
                .map_err(|source| PerfDataError::Write { source });
        };
        if records.len() >= PACK_BATCH {
            self.pack_pending(level)?;
            return self.pack(level, records);
        }
        self.pending.extend_from_slice(records);
        if self.pending.len() >= PACK_BATCH {
            self.pack_pending(level)?;
        }
        Ok(())
    }

    fn pack_pending(&mut self, level: i32) -> Result<(), PerfDataError> {
        let pending = std::mem::take(&mut self.pending);
        self.pack(level, &pending)?;
        self.pending = pending;
        self.pending.clear();
        Ok(())
    }

    fn pack(&mut self, level: i32, records: &[u8]) -> Result<(), PerfDataError> {
        if records.is_empty() {
            return Ok(());
        }
        let packed = compress::pack_all(&compress::split_jobs(records), level)
            .map_err(|source| PerfDataError::Compress { source })?;
        let c = self.summary.compression.get_or_insert(CompressionSummary {
            level,
            input_bytes: 0,
            output_bytes: 0,
            mmap_len: MAX_RECORD_INPUT as u32,
        });
        c.input_bytes += packed.input_bytes;
        c.output_bytes += packed.bytes.len() as u64;
        self.summary.data_bytes += packed.bytes.len() as u64;
        self.sink
            .append(&packed.bytes)
            .map_err(|source| PerfDataError::Write { source })
    }

    /// The losses, the last packed batch, the feature sections and the
    /// header: the file is whole. Returns the sink and what went in.
    pub fn finish(mut self, loaded: &[LoadedModule]) -> Result<(S, DataSummary), PerfDataError> {
        let mut losses = Vec::new();
        let sample_event = &self.events[self.sample_event];
        for (&cpu, tally) in &self.cpus {
            if tally.lost == 0 {
                continue;
            }
            let id = SampleId {
                pid: 0,
                tid: 0,
                time: tally
                    .newest
                    .or(self.window_start)
                    .map_or(0, |t| t.as_nanos().saturating_add(1)),
                id: tally
                    .event_id
                    .or_else(|| sample_event.ids.first().copied())
                    .unwrap_or(0),
                cpu,
            };
            synth::push_lost_samples(&mut losses, &sample_event.attr, tally.lost, &id);
            self.summary.lost_samples = self.summary.lost_samples.saturating_add(tally.lost);
        }
        self.push(&losses)?;
        if let Some(level) = self.level {
            self.pack_pending(level)?;
        }
        let table = self
            .build_ids
            .entries(self.host, loaded, Some(&self.sampled_pids));
        let feats = features::sections(self.host, &self.events, &table, &self.summary)
            .map_err(|event| PerfDataError::MissingTracepointFormat { event })?;
        let bits: Vec<u32> = feats.iter().map(|(b, _)| *b).collect();
        let bodies: Vec<Vec<u8>> = feats.into_iter().map(|(_, b)| b).collect();
        let index_offset = self.data_offset + self.summary.data_bytes;
        let (index, bodies_len) = feature_index(index_offset, &bodies);
        let header = file_header(
            self.attrs_section,
            (self.data_offset, self.summary.data_bytes),
            &bits,
        );
        let write = |source| PerfDataError::Write { source };
        self.sink.append(&index).map_err(write)?;
        for b in &bodies {
            self.sink.append(b).map_err(write)?;
        }
        self.sink.write_at(0, &header).map_err(write)?;
        self.summary.file_bytes = index_offset + index.len() as u64 + bodies_len;
        Ok((self.sink, self.summary))
    }
}

fn min_some(a: Option<SampleTime>, b: Option<SampleTime>) -> Option<SampleTime> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Writes all of `capture` through `encoder`: the state at its window's
/// start, its tracking records, every CPU's samples.
pub fn encode_capture<S: Sink>(
    encoder: &mut Encoder<'_, S>,
    capture: &Capture,
) -> Result<(), PerfDataError> {
    encoder.window_start(
        capture.window_start,
        capture.kernel_text,
        &capture.loaded_modules,
        (&capture.cgroups, &capture.processes),
    )?;
    encoder.tracking(&capture.tracking_records)?;
    for cpu in &capture.cpus {
        encoder.samples(cpu.cpu, cpu.event_id, &cpu.records)?;
    }
    Ok(())
}

/// Encodes `capture` as a perf.data file perf 6.1 reads, in memory.
pub fn write_perf_data(
    capture: &Capture,
    host: &HostInfo,
    opts: &WriteOptions,
) -> Result<PerfData<'static>, PerfDataError> {
    let mut encoder = Encoder::begin(Vec::new(), host, capture.events.clone(), opts.compression)?;
    encode_capture(&mut encoder, capture)?;
    let (bytes, summary) = encoder.finish(&capture.loaded_modules)?;
    Ok(PerfData {
        segments: vec![std::borrow::Cow::Owned(bytes)],
        summary,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::Cursor;

    use linux_perf_data::linux_perf_event_reader::{EventRecord, RecordType};
    use linux_perf_data::{PerfFileReader, PerfFileRecord};

    use super::*;
    use crate::abi::record_type;
    use crate::snapshot::features::bit;
    use crate::snapshot::testing::{
        KNOWN_COMM, KNOWN_PID, LATE_COMM, LATE_PID, SCHED_SWITCH_FORMAT, SyntheticSpec,
        synthetic_capture, synthetic_host,
    };

    /// What an independent reader (the linux-perf-data crate) finds.
    #[derive(Debug, Default)]
    struct Seen {
        names: Vec<String>,
        ids: Vec<Vec<u64>>,
        samples_per_attr: BTreeMap<usize, u64>,
        comms: Vec<(i32, String)>,
        lost_samples_records: u64,
        lost: Vec<(u64, u64)>,
        times: Vec<u64>,
        mmaps: Vec<String>,
        hostname: Option<String>,
        sample_time: Option<(u64, u64)>,
        compression: Option<(u32, u32)>,
        has_tracing_data: bool,
    }

    fn read_back(bytes: &[u8]) -> Seen {
        let PerfFileReader {
            mut perf_file,
            mut record_iter,
        } = PerfFileReader::parse_file(Cursor::new(bytes)).expect("linux-perf-data parses it");
        let mut seen = Seen {
            names: perf_file
                .event_attributes()
                .iter()
                .map(|a| a.name().unwrap_or("?").to_string())
                .collect(),
            ids: perf_file
                .event_attributes()
                .iter()
                .map(|a| a.event_ids.clone())
                .collect(),
            hostname: perf_file.hostname().unwrap().map(str::to_string),
            sample_time: perf_file
                .sample_time_range()
                .unwrap()
                .map(|r| (r.first_sample_time, r.last_sample_time)),
            compression: perf_file
                .compression_info()
                .unwrap()
                .map(|c| (c.type_, c.mmap_len)),
            has_tracing_data: perf_file
                .features()
                .has_feature(linux_perf_data::Feature::TRACING_DATA),
            ..Default::default()
        };
        while let Some(record) = record_iter.next_record(&mut perf_file).unwrap() {
            let PerfFileRecord::EventRecord { attr_index, record } = record else {
                continue;
            };
            if record.record_type == RecordType(crate::abi::record_type::LOST_SAMPLES) {
                seen.lost_samples_records += 1;
                continue;
            }
            if let Some(t) = record.timestamp() {
                seen.times.push(t);
            }
            match record.parse().unwrap() {
                EventRecord::Sample(_) => {
                    *seen.samples_per_attr.entry(attr_index).or_default() += 1
                }
                EventRecord::Comm(c) => seen.comms.push((
                    c.tid,
                    String::from_utf8_lossy(&c.name.as_slice()).into_owned(),
                )),
                EventRecord::Lost(l) => seen.lost.push((l.id, l.count)),
                EventRecord::Mmap(m) => seen
                    .mmaps
                    .push(String::from_utf8_lossy(&m.path.as_slice()).into_owned()),
                EventRecord::Mmap2(m) => seen
                    .mmaps
                    .push(String::from_utf8_lossy(&m.path.as_slice()).into_owned()),
                _ => {}
            }
        }
        seen
    }

    fn check(seen: &Seen, spec: &SyntheticSpec) {
        assert_eq!(
            seen.names,
            ["sched:sched_switch", "cpu-clock", "dummy:tracking"]
        );
        assert_eq!(seen.ids[0], [1000, 1001]);
        assert_eq!(seen.ids[2], [3000, 3001]);
        let per_event = u64::from(spec.cpus * spec.samples_per_cpu);
        assert_eq!(seen.samples_per_attr.get(&0), Some(&per_event));
        assert_eq!(seen.samples_per_attr.get(&1), Some(&per_event));
        assert!(seen.comms.contains(&(KNOWN_PID as i32, KNOWN_COMM.into())));
        assert!(seen.comms.contains(&(LATE_PID as i32, LATE_COMM.into())));
        assert!(seen.mmaps.contains(&"[kernel.kallsyms]_text".to_string()));
        assert!(
            seen.mmaps
                .contains(&"/lib/modules/6.0.0-test/kernel/fr_test.ko".to_string())
        );
        assert!(seen.mmaps.contains(&"/usr/bin/fr-known-task".to_string()));
        assert_eq!(seen.hostname.as_deref(), Some("testhost"));
        assert!(seen.has_tracing_data);
        // The reader sorts by time: synthesized state first, then in order.
        assert!(seen.times.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(
            seen.times.first(),
            Some(&(crate::snapshot::testing::T0 - 1))
        );
    }

    #[test]
    fn uncompressed_file_reads_back_with_every_attr_name_and_record() {
        let spec = SyntheticSpec::default();
        let capture = synthetic_capture(&spec);
        let host = synthetic_host(SCHED_SWITCH_FORMAT);
        let data = write_perf_data(&capture, &host, &WriteOptions::default()).unwrap();
        let bytes = data.to_vec();
        assert_eq!(bytes.len() as u64, data.len());
        assert_eq!(data.summary.samples, 400);
        let seen = read_back(&bytes);
        check(&seen, &spec);
        assert_eq!(seen.compression, None);
        assert_eq!(seen.lost_samples_records, 0);
        let t0 = crate::snapshot::testing::T0;
        assert_eq!(seen.sample_time, Some((t0, t0 + 7 + 99 * 10_000 + 3)));
    }

    #[test]
    fn every_host_fact_becomes_the_feature_perf_record_writes() {
        let capture = synthetic_capture(&SyntheticSpec::default());
        let host = synthetic_host(SCHED_SWITCH_FORMAT);
        let bytes = write_perf_data(&capture, &host, &WriteOptions::default())
            .unwrap()
            .to_vec();
        for b in [
            bit::TRACING_DATA,
            bit::BUILD_ID,
            bit::HOSTNAME,
            bit::OSRELEASE,
            bit::VERSION,
            bit::ARCH,
            bit::NRCPUS,
            bit::CPUDESC,
            bit::CPUID,
            bit::TOTAL_MEM,
            bit::CMDLINE,
            bit::EVENT_DESC,
            bit::CPU_TOPOLOGY,
            bit::NUMA_TOPOLOGY,
            bit::PMU_MAPPINGS,
            bit::CACHE,
            bit::SAMPLE_TIME,
            bit::MEM_TOPOLOGY,
            bit::CLOCKID,
            bit::CLOCK_DATA,
        ] {
            assert!(has_feature(&bytes, b), "feature bit {b} missing");
        }
        let PerfFileReader { perf_file, .. } =
            PerfFileReader::parse_file(Cursor::new(&bytes[..])).unwrap();
        assert_eq!(perf_file.cpu_desc().unwrap(), Some("Test CPU"));
        assert_eq!(perf_file.cpu_id().unwrap(), Some("GenuineIntel,6,85,4"));
        assert_eq!(perf_file.total_mem().unwrap(), Some(2048), "kB");
        let clock = perf_file.clock_data().unwrap().unwrap();
        assert_eq!(
            (clock.clockid, clock.wall_clock_ns, clock.clockid_time_ns),
            (1, 1_700_000_000_000_000_000, 1_000_000_000)
        );
        let ids = perf_file.build_ids().unwrap();
        let kernel = ids
            .values()
            .find(|d| d.path == b"[kernel.kallsyms]")
            .expect("kernel build-id");
        assert_eq!(kernel.build_id, (1..=20).collect::<Vec<u8>>());
        let module = ids
            .values()
            .find(|d| d.path == b"/lib/modules/6.0.0-test/kernel/fr_test.ko")
            .expect("module build-id");
        assert_eq!(module.build_id, vec![0xee; 20]);
        // A host whose facts could not be read gets none of those features.
        let bare = HostInfo {
            machine: Default::default(),
            clock: None,
            kernel_build_id: None,
            modules: Vec::new(),
            ..host
        };
        let bytes = write_perf_data(&capture, &bare, &WriteOptions::default())
            .unwrap()
            .to_vec();
        for b in [
            bit::BUILD_ID,
            bit::CPUDESC,
            bit::CPU_TOPOLOGY,
            bit::CACHE,
            bit::CLOCK_DATA,
        ] {
            assert!(!has_feature(&bytes, b), "feature bit {b} set");
        }
    }

    #[test]
    fn modules_loaded_after_start_get_one_map_each_and_their_build_ids() {
        use crate::host::KernelModule;
        use crate::tracking::modules::LoadedModule;
        let t0 = crate::snapshot::testing::T0;
        let mut capture = synthetic_capture(&SyntheticSpec::default());
        let loaded = |name: &str, start: u64, time_ns: u64, id: u8| LoadedModule {
            module: KernelModule {
                name: name.into(),
                start,
                size: 0x4000,
                path: format!("[{name}]"),
                build_id: Some(vec![id; 20]),
            },
            time_ns,
        };
        capture.loaded_modules = vec![
            loaded("fr_early", 0xffff_ffff_c100_0000, t0 - 100, 0xa1),
            loaded("fr_late", 0xffff_ffff_c200_0000, t0 + 50, 0xb2),
        ];
        // The late load's record is in the window's tracking records, as
        // the module watch appended it to the log.
        let tracking = capture.events.last().unwrap();
        let id = synth::SampleId {
            pid: u32::MAX,
            tid: 0,
            time: t0 + 50,
            id: tracking.ids[0],
            cpu: 0,
        };
        let attr = tracking.attr;
        synth::push_module_mmap(
            &mut capture.tracking_records,
            &attr,
            0xffff_ffff_c200_0000,
            0x4000,
            "[fr_late]",
            &id,
        );
        let host = synthetic_host(SCHED_SWITCH_FORMAT);
        let bytes = write_perf_data(&capture, &host, &WriteOptions::default())
            .unwrap()
            .to_vec();
        let seen = read_back(&bytes);
        for name in ["[fr_early]", "[fr_late]"] {
            assert_eq!(
                seen.mmaps.iter().filter(|m| *m == name).count(),
                1,
                "{name} in {:?}",
                seen.mmaps
            );
        }
        let PerfFileReader { perf_file, .. } =
            PerfFileReader::parse_file(Cursor::new(&bytes[..])).unwrap();
        let ids: Vec<(Vec<u8>, Vec<u8>)> = perf_file
            .build_ids()
            .unwrap()
            .values()
            .map(|d| (d.path.to_vec(), d.build_id.clone()))
            .collect();
        for (path, id) in [(&b"[fr_early]"[..], 0xa1), (&b"[fr_late]"[..], 0xb2)] {
            assert!(ids.contains(&(path.to_vec(), vec![id; 20])), "{ids:?}");
        }
    }

    #[test]
    fn compressed_file_reads_back_the_same_records() {
        // ~ 2 x 20000 x 2 samples of ~100 bytes: several MiB, many records.
        let spec = SyntheticSpec {
            samples_per_cpu: 20_000,
            ..Default::default()
        };
        let capture = synthetic_capture(&spec);
        let host = synthetic_host(SCHED_SWITCH_FORMAT);
        let plain = write_perf_data(&capture, &host, &WriteOptions::default()).unwrap();
        let opts = WriteOptions {
            compression: Some(3),
            ..Default::default()
        };
        let packed = write_perf_data(&capture, &host, &opts).unwrap();
        let c = packed.summary.compression.unwrap();
        assert!(c.input_bytes > 1 << 20, "{c:?}");
        assert!(packed.len() * 4 < plain.len(), "ratio too low: {c:?}");
        let seen = read_back(&packed.to_vec());
        check(&seen, &spec);
        assert_eq!(seen.compression, Some((1, MAX_RECORD_INPUT as u32)));
        let plain_seen = read_back(&plain.to_vec());
        assert_eq!(seen.times, plain_seen.times);
        assert_eq!(seen.comms, plain_seen.comms);
    }

    #[test]
    fn losses_in_the_window_are_reported_and_those_after_it_are_not() {
        let spec = SyntheticSpec {
            lost_while_paused: 17,
            ..Default::default()
        };
        let host = synthetic_host(SCHED_SWITCH_FORMAT);
        // Dropped while this capture paused the rings: after the window.
        let capture = synthetic_capture(&spec);
        let data = write_perf_data(&capture, &host, &WriteOptions::default()).unwrap();
        assert_eq!(data.summary.lost_samples, 0);
        let seen = read_back(&data.to_vec());
        assert_eq!(seen.lost, []);
        assert_eq!(seen.lost_samples_records, 0);

        // The kernel's LOST record in CPU 0's ring: a loss inside the window.
        let mut capture = synthetic_capture(&spec);
        let cpu0 = &mut capture.cpus[0];
        let time = cpu0.newest.unwrap().as_nanos();
        // id, lost, then sample_id: pid/tid, time, cpu, identifier.
        let lost = crate::abi::test_records::with_words(
            record_type::LOST,
            &[1000, 5, 1 | (1 << 32), time, 0, 1000],
        );
        cpu0.records.splice(0..0, lost);
        let data = write_perf_data(&capture, &host, &WriteOptions::default()).unwrap();
        assert_eq!(data.summary.lost_samples, 5);
        let seen = read_back(&data.to_vec());
        assert_eq!(seen.lost, [(1000, 5)]);
        assert_eq!(seen.lost_samples_records, 1);
    }

    #[test]
    fn bad_captures_are_errors() {
        let host = synthetic_host(SCHED_SWITCH_FORMAT);
        let opts = WriteOptions::default();
        let empty = Capture::default();
        assert!(matches!(
            write_perf_data(&empty, &host, &opts),
            Err(PerfDataError::NoEvents)
        ));
        let mut capture = synthetic_capture(&SyntheticSpec::default());
        capture.events[0].attr.config = 1;
        assert!(matches!(
            write_perf_data(&capture, &host, &opts),
            Err(PerfDataError::TracepointIdMismatch { .. })
        ));
        let mut capture = synthetic_capture(&SyntheticSpec::default());
        capture.events[1].ids.clear();
        assert!(matches!(
            write_perf_data(&capture, &host, &opts),
            Err(PerfDataError::MissingIds { .. })
        ));
        let capture = synthetic_capture(&SyntheticSpec::default());
        let no_formats = HostInfo::default();
        assert!(matches!(
            write_perf_data(&capture, &no_formats, &opts),
            Err(PerfDataError::MissingTracepointFormat { .. })
        ));
        for level in [0, -1, 23] {
            let bad_level = WriteOptions {
                compression: Some(level),
                ..Default::default()
            };
            assert!(matches!(
                write_perf_data(&capture, &host, &bad_level),
                Err(PerfDataError::Level(LevelError { .. }))
            ));
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Whatever bytes a ring hands over, encoding never panics, keeps
        /// whole records only, and the file's sections add up.
        #[test]
        fn arbitrary_ring_bytes_never_panic(
            ring in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4096),
            tracking in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
            level in proptest::option::of(1i32..4),
        ) {
            let mut capture = synthetic_capture(&SyntheticSpec {
                samples_per_cpu: 2,
                ..Default::default()
            });
            capture.cpus[1].records = ring;
            capture.tracking_records = tracking;
            let host = synthetic_host(SCHED_SWITCH_FORMAT);
            let opts = WriteOptions { compression: level, ..Default::default() };
            let data = write_perf_data(&capture, &host, &opts).unwrap();
            let bytes = data.to_vec();
            proptest::prop_assert_eq!(bytes.len() as u64, data.len());
            let parsed = flightrec_perfdata::reader::parse(&bytes).unwrap();
            // COMPRESSED records are not 8-aligned (perf does not pad them):
            // check the records they hold.
            let records = match level {
                Some(_) => compress::unpack(parsed.data).0,
                None => parsed.data.to_vec(),
            };
            proptest::prop_assert_eq!(compress::intact_len(&records), records.len());
        }
    }

    #[test]
    fn compressed_flag_is_read_from_the_written_header() {
        let plain = file_header((104, 0), (104, 0), &[bit::HOSTNAME, bit::CMDLINE]);
        let packed = file_header((104, 0), (104, 0), &[bit::HOSTNAME, bit::COMPRESSED]);
        assert!(!is_compressed(&plain));
        assert!(is_compressed(&packed));
        assert!(has_feature(&packed, bit::HOSTNAME));
        // The bit is at byte 0x48 + 3: a prefix up to it is enough.
        assert!(is_compressed(&packed[..FEATURE_BITMAP_OFFSET + 4]));
        assert!(!is_compressed(&packed[..FEATURE_BITMAP_OFFSET + 3]));
        let mut not_perf = packed;
        not_perf[0] = b'X';
        assert!(!is_compressed(&not_perf));
    }

    #[test]
    fn torn_ring_tail_is_cut_off() {
        let mut capture = synthetic_capture(&SyntheticSpec::default());
        capture.cpus[0]
            .records
            .extend_from_slice(&[9, 0, 0, 0, 0, 0, 200, 0, 1, 2]);
        let host = synthetic_host(SCHED_SWITCH_FORMAT);
        let data = write_perf_data(&capture, &host, &WriteOptions::default()).unwrap();
        assert_eq!(data.summary.torn_bytes, 10);
        check(&read_back(&data.to_vec()), &SyntheticSpec::default());
    }

    #[test]
    fn a_ring_of_many_pieces_is_written_whole_and_its_torn_tail_cut_off() {
        let spec = SyntheticSpec {
            samples_per_cpu: 20_000,
            ..Default::default()
        };
        let mut capture = synthetic_capture(&spec);
        let ring = &mut capture.cpus[0].records;
        assert!(ring.len() > 2 * SAMPLES_PIECE_BYTES, "{} bytes", ring.len());
        ring.extend_from_slice(&[9, 0, 0, 0, 0, 0, 200, 0, 1, 2]);
        let host = synthetic_host(SCHED_SWITCH_FORMAT);
        let data = write_perf_data(&capture, &host, &WriteOptions::default()).unwrap();
        assert_eq!(data.summary.torn_bytes, 10);
        let seen = read_back(&data.to_vec());
        check(&seen, &spec);
        assert_eq!(
            data.summary.samples,
            seen.samples_per_attr.values().sum::<u64>()
        );
    }

    #[test]
    fn recompressing_a_written_file_keeps_every_record() {
        let spec = SyntheticSpec {
            samples_per_cpu: 5_000,
            ..Default::default()
        };
        let capture = synthetic_capture(&spec);
        let host = synthetic_host(SCHED_SWITCH_FORMAT);
        let plain = write_perf_data(&capture, &host, &WriteOptions::default())
            .unwrap()
            .to_vec();
        let packed = crate::snapshot::recompress::recompress(&plain, 5).unwrap();
        let bytes = packed.to_vec();
        assert_eq!(bytes.len() as u64, packed.len());
        let seen = read_back(&bytes);
        check(&seen, &spec);
        assert_eq!(seen.times, read_back(&plain).times);
        assert!(matches!(
            crate::snapshot::recompress::recompress(&bytes, 5),
            Err(flightrec_perfdata::reader::ReadError::AlreadyCompressed)
        ));
    }
}
