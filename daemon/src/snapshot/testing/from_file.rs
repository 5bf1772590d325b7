//! A capture read back from a perf.data file, to feed the writer what
//! `perf record` recorded.

use super::*;
use crate::time::SampleTime;

/// Turns a file written by `perf record` (uncompressed, several events
/// with IDENTIFIER) into the capture flightrec would have taken of the same
/// events: attrs, ids and names from the file, its SAMPLE records split by
/// CPU and stored newest first (as a backward ring holds them), its other
/// kernel records as tracking records. perf's own user records (rounds,
/// features) are dropped.
pub fn capture_from_perf_data(bytes: &[u8]) -> Result<Capture, String> {
    use flightrec_perfdata::reader::parse;
    use flightrec_perfdata::records::file_records;

    let file = parse(bytes).map_err(|e| e.to_string())?;
    let events = events_of_file(bytes, &file)?;
    let attr_of = |id: u64| {
        events
            .iter()
            .find(|e| e.ids.contains(&id))
            .map(|e| e.attr)
            .or_else(|| events.first().map(|e| e.attr))
    };
    let mut per_cpu: std::collections::BTreeMap<u32, (Vec<&[u8]>, u64, u64)> = Default::default();
    let mut tracking_records = Vec::new();
    let mut tracking_record_count = 0;
    for record in file_records(file.data) {
        let (h, r) = record.map_err(|c| format!("bad record at data offset {}", c.offset))?;
        if h.type_ == record_type::SAMPLE {
            let Some(attr) = attr_of(crate::abi::get_u64(r, 8)) else {
                continue;
            };
            let (time, cpu) = sample_time_and_cpu(attr.sample_type, r);
            let e = per_cpu.entry(cpu).or_insert((Vec::new(), u64::MAX, 0));
            e.0.push(r);
            e.1 = e.1.min(time);
            e.2 = e.2.max(time);
        } else if h.is_kernel_type() {
            tracking_records.extend_from_slice(r);
            tracking_record_count += 1;
        }
    }
    let cpus: Vec<CpuCapture> = per_cpu
        .into_iter()
        .map(|(cpu, (records, oldest, newest))| CpuCapture {
            cpu,
            record_count: records.len() as u64,
            records: records.into_iter().rev().collect::<Vec<_>>().concat(),
            ring_bytes: 0,
            wrapped: false,
            oldest: Some(SampleTime::from_nanos(oldest)),
            newest: Some(SampleTime::from_nanos(newest)),
            ..Default::default()
        })
        .collect();
    let window_start = cpus.iter().filter_map(|c| c.oldest).min();
    Ok(Capture {
        events,
        cpus,
        processes: Vec::new(),
        tracking_records,
        tracking_record_count,
        tracking_lost: 0,
        window_start,
        held_from: window_start,
        kernel_text: None,
        loaded_modules: Vec::new(),
        cgroups: Vec::new(),
    })
}

/// The events of a file: attrs and ids, names from EVENT_DESC.
fn events_of_file(
    bytes: &[u8],
    file: &flightrec_perfdata::reader::ParsedFile<'_>,
) -> Result<Vec<EventDescriptor>, String> {
    use crate::abi::get_u32;
    use crate::snapshot::features::bit;

    let attr_size = crate::abi::get_u64(bytes, 0x10) as usize;
    if attr_size < crate::abi::ATTR_SIZE + 16 {
        return Err(format!("attr size {attr_size} too small"));
    }
    let (attrs_off, attrs_len) = (file.attrs.0 as usize, file.attrs.1 as usize);
    let mut events = Vec::new();
    for entry in bytes[attrs_off..attrs_off + attrs_len].chunks_exact(attr_size) {
        let attr = EventAttr::from_bytes(entry).ok_or("short attr")?;
        let ids_off = crate::abi::get_u64(entry, attr_size - 16) as usize;
        let ids_len = crate::abi::get_u64(entry, attr_size - 8) as usize;
        let ids = bytes
            .get(ids_off..ids_off + ids_len)
            .ok_or("ids out of bounds")?
            .chunks_exact(8)
            .map(|c| crate::abi::get_u64(c, 0))
            .collect();
        events.push(EventDescriptor {
            name: String::new(),
            attr,
            ids,
            tracepoint: None,
        });
    }
    // Names from EVENT_DESC.
    if let Some((_, desc)) = file.features.iter().find(|(b, _)| *b == bit::EVENT_DESC) {
        let nr = get_u32(desc, 0) as usize;
        let sz = get_u32(desc, 4) as usize;
        let mut pos = 8;
        for e in events.iter_mut().take(nr) {
            pos += sz;
            let nr_ids = get_u32(desc, pos) as usize;
            let len = get_u32(desc, pos + 4) as usize;
            let name = &desc[pos + 8..pos + 8 + len];
            let end = name.iter().position(|&b| b == 0).unwrap_or(len);
            e.name = String::from_utf8_lossy(&name[..end]).into_owned();
            pos += 8 + len + nr_ids * 8;
        }
    }
    for e in &mut events {
        if e.attr.type_ == event_type::TRACEPOINT
            && let Some((s, n)) = e.name.split_once(':')
        {
            e.tracepoint = Some((s.to_string(), n.to_string()));
        }
    }
    Ok(events)
}

/// TIME and CPU of a sample record laid out by `st`, 0 when absent.
fn sample_time_and_cpu(st: u64, r: &[u8]) -> (u64, u32) {
    let mut off = 8;
    let mut time = 0;
    let mut cpu = 0;
    for (flag, is_time, is_cpu) in [
        (sample::IDENTIFIER, false, false),
        (sample::IP, false, false),
        (sample::TID, false, false),
        (sample::TIME, true, false),
        (sample::ADDR, false, false),
        (sample::ID, false, false),
        (sample::STREAM_ID, false, false),
        (sample::CPU, false, true),
    ] {
        if st & flag != 0 && off + 8 <= r.len() {
            if is_time {
                time = crate::abi::get_u64(r, off);
            }
            if is_cpu {
                cpu = crate::abi::get_u32(r, off);
            }
            off += 8;
        }
    }
    (time, cpu)
}
