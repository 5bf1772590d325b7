//! The perf.data (PERFILE2) encoder: a [`Capture`] and the cached
//! [`HostInfo`] in, the file's bytes out, as a list of segments so the
//! sample records are copied once, from the capture into the output file.
//!
//! Layout: `header | id arrays | attrs | data | feature index |
//! feature bodies`. The data section holds, in this order:
//! 1. synthesized state at the window's start: the kernel MMAP, then COMM
//!    and MMAP2 of every known thread, stamped `window_start_ns - 1`;
//! 2. the tracking records of the window, verbatim;
//! 3. every CPU's sample records, verbatim and newest first as the ring
//!    held them (perf 6.1 sorts a whole file by time when it has no
//!    FINISHED_ROUND records, which this writer never emits);
//! 4. loss records: per CPU a LOST_SAMPLES with the samples lost inside the
//!    window (the kernel's own LOST records found in the ring), stamped
//!    after the CPU's newest sample. Samples dropped while a capture paused
//!    the ring (`buffers.lossless_freeze = false`) were dropped after the
//!    window ended: they are not this snapshot's to report (the dump's reply
//!    and `status` count them; the kernel's LOST record for them is in the
//!    next snapshot's window).

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;

use thiserror::Error;

use crate::abi::{ATTR_SIZE, attr_flag, event_type, get_u64, record_type, sample, sw_event};

use super::build_ids::build_id_entries;
use super::compress::{self, MAX_RECORD_INPUT};
use super::features;
pub use super::summary::{CompressionSummary, DataSummary, PerfData};
use super::synth::{self, SampleId};
use crate::host::{HostInfo, format_id};
use crate::recorder::{Capture, EventDescriptor};
pub use flightrec_perfdata::format::{
    FEATURE_BITMAP_OFFSET, FILE_HEADER_SIZE, LEVELS, LevelError, MAGIC, check_level, feature_index,
    file_header, has_feature, is_compressed,
};

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
    Compress { source: std::io::Error },
}

/// How a snapshot is written.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// zstd level, `None` for an uncompressed file.
    pub compression: Option<i32>,
    /// Host facts gathered at daemon start; `None` gathers them (I/O) when
    /// [`super::output::write_snapshot`] runs.
    pub host: Option<Arc<HostInfo>>,
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

/// Walks the whole, valid records ([`crate::ring::records`]), returning
/// (intact length, SAMPLE count, sum of the `lost` fields of LOST records).
fn scan_records(data: &[u8]) -> (usize, u64, u64) {
    scan_records_with_pids(data, None)
}

/// [`scan_records`], adding the pid of every sample to `pids` (the u32 at
/// `pids.0` in a sample record).
fn scan_records_with_pids(
    data: &[u8],
    mut pids: Option<(usize, &mut BTreeSet<u32>)>,
) -> (usize, u64, u64) {
    let mut walk = crate::ring::records(data);
    let mut samples = 0;
    let mut lost = 0u64;
    for (header, record) in walk.by_ref().map_while(Result::ok) {
        match header.type_ {
            record_type::SAMPLE => {
                samples += 1;
                if let Some((at, set)) = pids.as_mut()
                    && record.len() >= *at + 4
                {
                    set.insert(crate::abi::get_u32(record, *at));
                }
            }
            // header, id, lost
            record_type::LOST if record.len() >= 24 => {
                lost = lost.saturating_add(get_u64(record, 16));
            }
            _ => {}
        }
    }
    (walk.offset(), samples, lost)
}

fn check_events(capture: &Capture, host: &HostInfo) -> Result<(), PerfDataError> {
    if capture.events.is_empty() {
        return Err(PerfDataError::NoEvents);
    }
    if capture.events.len() > 1
        && let Some(e) = capture.events.iter().find(|e| e.ids.is_empty())
    {
        return Err(PerfDataError::MissingIds {
            event: e.name.clone(),
        });
    }
    for e in &capture.events {
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

/// Encodes `capture` as a perf.data file perf 6.1 reads.
pub fn write_perf_data<'a>(
    capture: &'a Capture,
    host: &HostInfo,
    opts: &WriteOptions,
) -> Result<PerfData<'a>, PerfDataError> {
    check_events(capture, host)?;
    if let Some(level) = opts.compression {
        check_level(level)?;
    }
    let events = &capture.events;
    let tracking = tracking_event(events).ok_or(PerfDataError::NoEvents)?;
    let mut summary = DataSummary::default();
    let head = window_start_records(capture, host, &events[tracking], &mut summary);
    let mut records = DataRecords::of(capture, tracking, &mut summary);
    let data = pack_data(head, &mut records, opts.compression, &mut summary)?;
    summary.data_bytes = data.iter().map(|d| d.len() as u64).sum();
    let build_ids = build_id_entries(
        capture,
        records.tracking,
        host,
        records
            .pid_offset
            .is_some()
            .then_some(&records.sampled_pids),
    );
    let feats = features::sections(host, events, &build_ids, &summary)
        .map_err(|event| PerfDataError::MissingTracepointFormat { event })?;
    Ok(assemble(events, data, feats, summary))
}

/// The state at the window's start (the data section's first part),
/// stamped just before it: the kernel and module maps, then COMM and MMAP2
/// of every known thread.
fn window_start_records(
    capture: &Capture,
    host: &HostInfo,
    tracking: &EventDescriptor,
    summary: &mut DataSummary,
) -> Vec<u8> {
    let tracking_id = tracking.ids.first().copied().unwrap_or(0);
    let synth_time = capture.window_start_ns.saturating_sub(1);
    let mut head = Vec::new();
    if let Some(text) = capture.kernel_text {
        let id = SampleId {
            pid: u32::MAX,
            tid: 0,
            time: synth_time,
            id: tracking_id,
            cpu: 0,
        };
        synth::push_kernel_mmap(&mut head, &tracking.attr, text, &id);
        summary.synthesized_records += 1;
        // Modules of the start, then those loaded later but before the
        // window (in load order: a reload's map replaces the old one); a
        // load inside the window has its record among the tracking records.
        let loaded_before = capture
            .loaded_modules
            .iter()
            .filter(|l| l.time_ns < capture.window_start_ns)
            .map(|l| &l.module);
        for m in host.modules.iter().chain(loaded_before) {
            synth::push_module_mmap(&mut head, &tracking.attr, m.start, m.size, &m.path, &id);
            summary.synthesized_records += 1;
        }
    }
    summary.synthesized_records += synth::push_process_state(
        &mut head,
        &tracking.attr,
        tracking_id,
        synth_time,
        &capture.processes,
    );
    head
}

/// The rest of the data section: the tracking records, every CPU's samples
/// (verbatim, whole records only), the losses inside the window; and what
/// the walk saw.
struct DataRecords<'a> {
    tracking: &'a [u8],
    cpus: Vec<&'a [u8]>,
    /// LOST_SAMPLES records.
    losses: Vec<u8>,
    pid_offset: Option<usize>,
    sampled_pids: BTreeSet<u32>,
}

impl<'a> DataRecords<'a> {
    fn of(capture: &'a Capture, tracking: usize, summary: &mut DataSummary) -> Self {
        let events = &capture.events;
        let (tracking_len, _, _) = scan_records(&capture.tracking_records);
        summary.torn_bytes += (capture.tracking_records.len() - tracking_len) as u64;
        let sample_event = events
            .iter()
            .enumerate()
            .find(|(i, e)| *i != tracking && !e.ids.is_empty())
            .map_or(tracking, |(i, _)| i);
        let mut out = DataRecords {
            tracking: &capture.tracking_records[..tracking_len],
            cpus: Vec::with_capacity(capture.cpus.len()),
            losses: Vec::new(),
            pid_offset: sample_pid_offset(events, tracking),
            sampled_pids: BTreeSet::new(),
        };
        for (index, cpu) in capture.cpus.iter().enumerate() {
            let pids = out.pid_offset.map(|at| (at, &mut out.sampled_pids));
            let (len, samples, lost) = scan_records_with_pids(&cpu.records, pids);
            summary.torn_bytes += (cpu.records.len() - len) as u64;
            summary.samples += samples;
            out.cpus.push(&cpu.records[..len]);
            summary.first_sample_ns = min_opt(summary.first_sample_ns, cpu.oldest_ns);
            summary.last_sample_ns = max_opt(summary.last_sample_ns, cpu.newest_ns);
            if lost == 0 {
                continue;
            }
            let ids = &events[sample_event].ids;
            let id = SampleId {
                pid: 0,
                tid: 0,
                time: cpu
                    .newest_ns
                    .unwrap_or(capture.window_start_ns)
                    .saturating_add(1),
                id: match cpu.event_id {
                    0 => ids.get(index).or(ids.first()).copied().unwrap_or(0),
                    id => id,
                },
                cpu: cpu.cpu,
            };
            synth::push_lost_samples(&mut out.losses, &events[sample_event].attr, lost, &id);
            summary.lost_samples = summary.lost_samples.saturating_add(lost);
        }
        out
    }
}

/// Where the pid lies in the sample records of every sampling event, if
/// it is the same for all: header, IDENTIFIER, IP if sampled, then TID.
fn sample_pid_offset(events: &[EventDescriptor], tracking: usize) -> Option<usize> {
    let mut offsets = events
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != tracking)
        .map(|(_, e)| {
            let t = e.attr.sample_type;
            (t & sample::IDENTIFIER != 0 && t & sample::TID != 0)
                .then_some(16 + if t & sample::IP != 0 { 8 } else { 0 })
        });
    let first = offsets.next()??;
    offsets.all(|o| o == Some(first)).then_some(first)
}

/// The data section: the records in order, or packed into COMPRESSED
/// records at `level`.
fn pack_data<'a>(
    head: Vec<u8>,
    records: &mut DataRecords<'a>,
    level: Option<i32>,
    summary: &mut DataSummary,
) -> Result<Vec<Cow<'a, [u8]>>, PerfDataError> {
    let Some(level) = level else {
        let mut data = vec![Cow::Owned(head), Cow::Borrowed(records.tracking)];
        data.extend(records.cpus.iter().map(|s| Cow::Borrowed(*s)));
        data.push(Cow::Owned(std::mem::take(&mut records.losses)));
        return Ok(data);
    };
    let mut parts: Vec<&[u8]> = vec![&head];
    parts.extend(compress::split_jobs(records.tracking));
    for s in &records.cpus {
        parts.extend(compress::split_jobs(s));
    }
    parts.push(&records.losses);
    let packed =
        compress::pack_all(&parts, level).map_err(|source| PerfDataError::Compress { source })?;
    summary.compression = Some(CompressionSummary {
        level,
        input_bytes: packed.input_bytes,
        output_bytes: packed.bytes.len() as u64,
        mmap_len: MAX_RECORD_INPUT as u32,
    });
    Ok(vec![Cow::Owned(packed.bytes)])
}

/// `header | id arrays | attrs | data | feature index | feature bodies`.
fn assemble<'a>(
    events: &[EventDescriptor],
    data: Vec<Cow<'a, [u8]>>,
    feats: Vec<(u32, Vec<u8>)>,
    mut summary: DataSummary,
) -> PerfData<'a> {
    let mut ids = Vec::new();
    let ids_offset = FILE_HEADER_SIZE as u64;
    let mut id_sections = Vec::with_capacity(events.len());
    for e in events {
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
    let data_offset = attrs_offset + attrs.len() as u64;
    let data_len = summary.data_bytes;

    let bits: Vec<u32> = feats.iter().map(|(b, _)| *b).collect();
    let bodies: Vec<Vec<u8>> = feats.into_iter().map(|(_, b)| b).collect();
    let index_offset = data_offset + data_len;
    let (index, bodies_len) = feature_index(index_offset, &bodies);

    let header = file_header(
        (attrs_offset, attrs.len() as u64),
        (data_offset, data_len),
        &bits,
    );
    let mut segments: Vec<Cow<'a, [u8]>> = vec![
        Cow::Owned(header.to_vec()),
        Cow::Owned(ids),
        Cow::Owned(attrs),
    ];
    segments.extend(data);
    segments.push(Cow::Owned(index));
    segments.extend(bodies.into_iter().map(Cow::Owned));
    summary.file_bytes = index_offset + (bits.len() * 16) as u64 + bodies_len;
    segments.retain(|s| !s.is_empty());
    PerfData { segments, summary }
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn max_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::Cursor;

    use linux_perf_data::linux_perf_event_reader::{EventRecord, RecordType};
    use linux_perf_data::{PerfFileReader, PerfFileRecord};

    use super::*;
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
        let time = cpu0.newest_ns.unwrap();
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
    fn scan_stops_at_a_record_the_walker_rejects() {
        use crate::abi::test_records::record;
        let sample = record(record_type::SAMPLE, 16, 1);
        for bad in [record(0, 8, 0), record(record_type::SAMPLE, 12, 0)] {
            let data = [sample.clone(), bad, sample.clone()].concat();
            assert_eq!(scan_records(&data), (sample.len(), 1, 0));
        }
    }

    proptest::proptest! {
        /// scan_records counts over exactly the records the walker yields.
        #[test]
        fn scan_agrees_with_the_walker(
            good in proptest::collection::vec(crate::abi::test_records::kernel_record(256), 0..40),
            tail in crate::abi::test_records::suspect_tail(),
        ) {
            let data = [good.concat(), tail].concat();
            let walked: Vec<_> = crate::ring::records(&data).map_while(Result::ok).collect();
            let len = walked.iter().map(|(_, r)| r.len()).sum::<usize>();
            let samples = walked.iter().filter(|(h, _)| h.type_ == record_type::SAMPLE).count();
            let lost = walked
                .iter()
                .filter(|(h, r)| h.type_ == record_type::LOST && r.len() >= 24)
                .fold(0u64, |sum, (_, r)| sum.saturating_add(get_u64(r, 16)));
            proptest::prop_assert_eq!(scan_records(&data), (len, samples as u64, lost));
        }
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
