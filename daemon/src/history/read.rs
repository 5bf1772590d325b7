//! Reading the history: the index of the segments a directory holds, and
//! the records of a window in time, which [`super::capture_from_history`]
//! turns into a capture like the rings'.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use super::retention::SegmentInfo;
use super::segment::{
    FILE_MAGIC, FrameHeader, FrameKind, HEADER_LEN, SegmentEvent, SegmentEvents, decode_frame,
    frames,
};
use crate::abi::layout::RecordLayouts;

/// Whether `name` is a segment's file name.
pub fn is_segment_name(name: &str) -> bool {
    name.starts_with("seg-") && name.ends_with(".hist")
}

/// The segments in `dir`, oldest first. Only the daemon's own regular
/// files count; segments of another boot (their times mean nothing now)
/// and segments without a whole frame are removed, with a log line.
pub fn index_dir(dir: &Path, boot_id: &str) -> io::Result<Vec<SegmentInfo>> {
    let owner = nix::unistd::geteuid().as_raw();
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| is_segment_name(n))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let path = dir.join(&name);
        let Ok(md) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !md.is_file() || md.uid() != owner {
            tracing::warn!(path = %path.display(), "not a history segment of this daemon; left alone");
            continue;
        }
        match index_segment(&path, boot_id) {
            Ok(Some(info)) => out.push(info),
            Ok(None) => {
                tracing::info!(path = %path.display(), "removed a history segment of another boot or without a whole frame");
                let _ = std::fs::remove_file(&path);
            }
            Err(e) => tracing::warn!(path = %path.display(), "cannot read a history segment: {e}"),
        }
    }
    Ok(out)
}

/// A segment's times and whole bytes, reading only the frame headers (and
/// the events frame); None for another boot's or an empty one.
fn index_segment(path: &Path, boot_id: &str) -> io::Result<Option<SegmentInfo>> {
    let file = open_segment(path)?;
    let len = file.metadata()?.len();
    let mut magic = [0u8; 8];
    if len < (FILE_MAGIC.len() + HEADER_LEN) as u64 {
        return Ok(None);
    }
    file.read_exact_at(&mut magic, 0)?;
    if &magic != FILE_MAGIC {
        return Ok(None);
    }
    let mut at = FILE_MAGIC.len() as u64;
    let (mut first, mut last) = (u64::MAX, 0u64);
    let mut checkpoint_ns = None;
    loop {
        let mut head = [0u8; HEADER_LEN];
        if at + HEADER_LEN as u64 > len || file.read_exact_at(&mut head, at).is_err() {
            break;
        }
        let Some(header) = FrameHeader::parse(&head) else {
            break;
        };
        let end = at + (HEADER_LEN as u64) + u64::from(header.stored_len);
        if end > len {
            break;
        }
        if header.kind == FrameKind::Events {
            let mut stored = vec![0u8; header.stored_len as usize];
            file.read_exact_at(&mut stored, at + HEADER_LEN as u64)?;
            let events = decode_frame(&header, &stored)
                .ok()
                .and_then(|b| SegmentEvents::parse(&b));
            if events.is_none_or(|e| e.boot_id != boot_id) {
                return Ok(None);
            }
        }
        if header.kind == FrameKind::Checkpoint {
            checkpoint_ns.get_or_insert(header.first_ns);
        }
        first = first.min(header.first_ns);
        last = last.max(header.last_ns);
        at = end;
    }
    Ok(checkpoint_ns.map(|checkpoint_ns| SegmentInfo {
        path: path.to_path_buf(),
        first_ns: first,
        last_ns: last,
        bytes: at,
        checkpoint_ns,
    }))
}

/// Opens a segment without following a link, regular files only.
fn open_segment(path: &Path) -> io::Result<File> {
    flightrec_files::open_regular(path, flightrec_files::Links::Refuse).map(|(f, _)| f)
}

/// One CPU's records of a window, oldest first.
#[derive(Debug, Default, Clone)]
pub struct CpuRecords {
    pub records: Vec<u8>,
    pub count: u64,
    pub oldest_ns: Option<u64>,
    pub newest_ns: Option<u64>,
}

/// What the history holds of a window.
#[derive(Debug, Default)]
pub struct HistoryWindow {
    pub cpus: BTreeMap<u32, CpuRecords>,
    /// A checkpoint of every process before the window, then the tracking
    /// records up to its end, oldest first.
    pub tracking: Vec<u8>,
    pub tracking_count: u64,
    /// The events of the segments read (ids of every daemon run that wrote
    /// them).
    pub events: Vec<SegmentEvent>,
    /// The oldest sample time the history holds at all.
    pub held_from_ns: Option<u64>,
    /// The newest: where a history that stopped (disk full, unwritable)
    /// ends.
    pub held_to_ns: Option<u64>,
    /// Frames that did not decompress or check (counted, left out).
    pub bad_frames: u64,
}

/// The records of `[start_ns, end_ns]` in `segments` (oldest first), with
/// the processes known from the newest checkpoint at or before the start.
pub fn read_window(
    segments: &[SegmentInfo],
    boot_id: &str,
    start_ns: u64,
    end_ns: u64,
) -> io::Result<HistoryWindow> {
    let mut out = HistoryWindow {
        held_from_ns: segments.iter().map(|s| s.first_ns).filter(|&t| t > 0).min(),
        held_to_ns: segments.iter().map(|s| s.last_ns).max().filter(|&t| t > 0),
        ..HistoryWindow::default()
    };
    let overlapping: Vec<usize> = (0..segments.len())
        .filter(|&i| segments[i].last_ns >= start_ns && segments[i].first_ns <= end_ns)
        .collect();
    let (Some(&first), Some(&last)) = (overlapping.first(), overlapping.last()) else {
        return Ok(out);
    };
    // The checkpoint: the newest one at or before the start.
    let from = (0..=first)
        .rev()
        .find(|&i| segments[i].checkpoint_ns <= start_ns)
        .unwrap_or(first);
    // Records reach the disk up to a second after their time: the
    // segment after the last one may still hold some of the window.
    let last = (last + 1).min(segments.len() - 1);
    for (i, segment) in segments.iter().enumerate().take(last + 1).skip(from) {
        let bytes = match std::fs::read(&segment.path) {
            Ok(b) => b,
            // Dropped by retention since it was listed.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        read_segment(&bytes, boot_id, i == from, (start_ns, end_ns), &mut out);
    }
    Ok(out)
}

/// Adds what `bytes` (one segment) holds of the window to `out`.
fn read_segment(
    bytes: &[u8],
    boot_id: &str,
    with_checkpoint: bool,
    (start_ns, end_ns): (u64, u64),
    out: &mut HistoryWindow,
) {
    let mut layouts = RecordLayouts::default();
    for (header, at) in frames(bytes).0 {
        let stored = &bytes[at..at + header.stored_len as usize];
        let wanted = match header.kind {
            FrameKind::Events | FrameKind::Tracking => true,
            FrameKind::Checkpoint => with_checkpoint,
            FrameKind::Samples => header.last_ns >= start_ns && header.first_ns <= end_ns,
        };
        if !wanted {
            continue;
        }
        let Ok(records) = decode_frame(&header, stored) else {
            out.bad_frames += 1;
            continue;
        };
        match header.kind {
            FrameKind::Events => {
                let Some(events) = SegmentEvents::parse(&records) else {
                    out.bad_frames += 1;
                    continue;
                };
                if events.boot_id != boot_id {
                    // Another boot's: nothing in it can be placed in time.
                    return;
                }
                for e in events.events {
                    for &id in &e.ids {
                        layouts.insert(id, e.sample_type);
                    }
                    out.events.push(e);
                }
            }
            FrameKind::Checkpoint => {
                out.tracking.extend_from_slice(&records);
                out.tracking_count += u64::from(header.records);
            }
            FrameKind::Tracking => {
                for (_, record) in crate::ring::records(&records).map_while(Result::ok) {
                    if layouts.time_and_cpu(record).0.is_none_or(|t| t <= end_ns) {
                        out.tracking.extend_from_slice(record);
                        out.tracking_count += 1;
                    }
                }
            }
            FrameKind::Samples => {
                let cpu = out.cpus.entry(header.cpu).or_default();
                for (_, record) in crate::ring::records(&records).map_while(Result::ok) {
                    let time = layouts.time_and_cpu(record).0;
                    if time.is_some_and(|t| t < start_ns || t > end_ns) {
                        continue;
                    }
                    if let Some(t) = time {
                        cpu.oldest_ns = Some(cpu.oldest_ns.map_or(t, |o| o.min(t)));
                        cpu.newest_ns = Some(cpu.newest_ns.map_or(t, |n| n.max(t)));
                    }
                    cpu.records.extend_from_slice(record);
                    cpu.count += 1;
                }
            }
        }
    }
}
