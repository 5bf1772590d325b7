//! Reading the history: the index of the segments a directory holds, and
//! the frames of a window, read one at a time.
//!
//! Every segment is opened as a path others could have touched, although
//! the directory is root's alone (checked at start): no final link, a
//! regular file only, owned by the daemon's user (checked on the
//! descriptor), read no further than the bytes the index counted and a
//! frame at a time of at most [`WRITTEN_RAW_BYTES`] of records. A window
//! of any length then costs the memory of one frame. The reads run on the
//! history's own dump thread, under no lock another dump takes: a file
//! system that stops answering holds up that dump alone.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

use super::retention::SegmentInfo;
use super::segment::{
    FILE_MAGIC, FrameDecoder, FrameHeader, FrameKind, HEADER_LEN, SegmentEvents, WRITTEN_RAW_BYTES,
};
use crate::ring::filter::TimeRange;
use crate::time::SampleTime;

/// Whether `name` is a segment's file name.
pub fn is_segment_name(name: &str) -> bool {
    name.starts_with("seg-") && name.ends_with(".hist")
}

/// The segments in `dir`, oldest first. Only the daemon's own regular
/// files count; segments of another boot (their times mean nothing now)
/// and segments without a whole frame are removed, with a log line.
pub fn index_dir(dir: &Path, boot_id: &str) -> io::Result<Vec<SegmentInfo>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| is_segment_name(n))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let path = dir.join(&name);
        match index_segment(&path, boot_id) {
            Ok(Some(info)) => out.push(info),
            Ok(None) => {
                tracing::info!(path = %path.display(), "removed a history segment of another boot or without a whole frame");
                let _ = std::fs::remove_file(&path);
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), "not a history segment of this daemon, left alone: {e}");
            }
        }
    }
    Ok(out)
}

/// Bytes of the shortest segment that holds anything: the magic and one
/// frame's header.
const SHORTEST_SEGMENT: u64 = (FILE_MAGIC.len() + HEADER_LEN) as u64;

/// A segment's times, events and whole bytes, reading only the frame
/// headers (and the events frame); None for another boot's or an empty
/// one.
fn index_segment(path: &Path, boot_id: &str) -> io::Result<Option<SegmentInfo>> {
    let (file, len) = open_segment(path, u64::MAX)?;
    // Segments are created unsynced: after a power cut one may be shorter
    // than its first frame, or empty. It is the daemon's (open_segment
    // checked the owner) and holds nothing.
    if len < SHORTEST_SEGMENT {
        return Ok(None);
    }
    let mut frames = Frames::new(&file, len)?;
    let (mut first, mut last) = (None::<SampleTime>, None::<SampleTime>);
    let mut checkpoint = None;
    let mut events = None;
    let (mut stored, mut records) = (Vec::new(), Vec::new());
    let mut decoder = FrameDecoder::new()?;
    while let Some((header, _)) = frames.next_header()? {
        match header.kind {
            FrameKind::Events => {
                let parsed = frames
                    .read_records(&header, &mut decoder, (&mut stored, &mut records))
                    .ok()
                    .and_then(|()| SegmentEvents::parse(&records));
                match parsed {
                    Some(e) if e.boot_id == boot_id => events = Some(Arc::new(e)),
                    _ => return Ok(None),
                }
            }
            FrameKind::Checkpoint => {
                checkpoint.get_or_insert(header.first);
            }
            FrameKind::Samples | FrameKind::Tracking => {}
        }
        first = Some(first.map_or(header.first, |f| f.min(header.first)));
        last = Some(last.map_or(header.last, |l| l.max(header.last)));
    }
    let (Some(checkpoint), Some(events), Some(first), Some(last)) =
        (checkpoint, events, first, last)
    else {
        return Ok(None);
    };
    Ok(Some(SegmentInfo {
        path: path.to_path_buf(),
        first,
        last,
        bytes: frames.at,
        checkpoint,
        events,
    }))
}

/// Opens a segment as a path others could touch (see the module docs):
/// the file and the bytes a reader may use, at most `indexed`.
fn open_segment(path: &Path, indexed: u64) -> io::Result<(File, u64)> {
    let (file, md) = flightrec_files::open_regular(path, flightrec_files::Links::Refuse)?;
    let owner = nix::unistd::geteuid().as_raw();
    if md.uid() != owner {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("owned by uid {}, not by the daemon ({owner})", md.uid()),
        ));
    }
    Ok((file, md.len().min(indexed)))
}

/// The frames of one open segment, a header at a time.
struct Frames<'f> {
    file: &'f File,
    /// Bytes that may be read.
    len: u64,
    /// Offset of the next frame's header (after the last whole frame: the
    /// segment's whole bytes).
    at: u64,
}

impl<'f> Frames<'f> {
    fn new(file: &'f File, len: u64) -> io::Result<Self> {
        let mut magic = [0u8; 8];
        if len < SHORTEST_SEGMENT {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "shorter than a segment",
            ));
        }
        file.read_exact_at(&mut magic, 0)?;
        if &magic != FILE_MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a history segment",
            ));
        }
        Ok(Frames {
            file,
            len,
            at: FILE_MAGIC.len() as u64,
        })
    }

    /// The next whole frame's header and the offset of its stored bytes;
    /// None at the end or at a torn or foreign frame.
    fn next_header(&mut self) -> io::Result<Option<(FrameHeader, u64)>> {
        let mut head = [0u8; HEADER_LEN];
        if self.at + HEADER_LEN as u64 > self.len {
            return Ok(None);
        }
        self.file.read_exact_at(&mut head, self.at)?;
        let Some(header) = FrameHeader::parse(&head) else {
            return Ok(None);
        };
        let stored_at = self.at + HEADER_LEN as u64;
        let end = stored_at + u64::from(header.stored_len);
        if end > self.len {
            return Ok(None);
        }
        self.at = end;
        Ok(Some((header, stored_at)))
    }

    /// The records of the frame whose header was read last, read into
    /// `buffers.0` and decoded into `buffers.1` (both reused); a frame
    /// larger than the writer makes is refused unread.
    fn read_records(
        &self,
        header: &FrameHeader,
        decoder: &mut FrameDecoder,
        (stored, records): (&mut Vec<u8>, &mut Vec<u8>),
    ) -> io::Result<()> {
        if header.raw_len as usize > WRITTEN_RAW_BYTES
            || header.stored_len as usize > zstd::zstd_safe::compress_bound(WRITTEN_RAW_BYTES)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "a frame of {} bytes, more than the {WRITTEN_RAW_BYTES} the writer makes",
                    header.raw_len
                ),
            ));
        }
        stored.resize(header.stored_len as usize, 0);
        self.file
            .read_exact_at(stored, self.at - u64::from(header.stored_len))?;
        decoder.decode(header, stored, records)
    }
}

/// What [`read_window`] found besides the records.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WindowRead {
    /// Frames that did not decompress, check or read (counted, left out).
    pub bad_frames: u64,
    /// Segments that could not be opened (gone since listed, or not the
    /// daemon's), counted and left out.
    pub skipped_segments: u64,
}

/// One frame of a window, decoded.
#[derive(Debug)]
pub struct Frame<'a> {
    pub kind: FrameKind,
    pub cpu: u32,
    pub records: &'a [u8],
}

/// Hands `each` the frames of `segments` (oldest first) that a window of
/// `range` needs, one at a time and oldest first: the checkpoint of every
/// process from the newest segment starting at or before the window's
/// start, every tracking frame after it up to the window's end, and the
/// sample frames that overlap it. `each` filters the records itself.
pub fn read_window<E: From<io::Error>>(
    segments: &[SegmentInfo],
    range: TimeRange,
    mut each: impl FnMut(Frame<'_>) -> Result<(), E>,
) -> Result<WindowRead, E> {
    let mut figures = WindowRead::default();
    let overlapping: Vec<usize> = (0..segments.len())
        .filter(|&i| range.overlaps(segments[i].first, segments[i].last))
        .collect();
    let (Some(&first), Some(&last)) = (overlapping.first(), overlapping.last()) else {
        return Ok(figures);
    };
    let start = range.start.unwrap_or_default();
    let from = (0..=first)
        .rev()
        .find(|&i| segments[i].checkpoint <= start)
        .unwrap_or(first);
    // Records reach the disk up to a second after their time: the
    // segment after the last one may still hold some of the window.
    let last = (last + 1).min(segments.len() - 1);
    let (mut stored, mut records) = (Vec::new(), Vec::new());
    let mut decoder = FrameDecoder::new()?;
    for (i, segment) in segments.iter().enumerate().take(last + 1).skip(from) {
        let skip = |e: io::Error| {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(segment = %segment.path.display(), "a history segment left out of the window: {e}");
            }
        };
        let (file, len) = match open_segment(&segment.path, segment.bytes) {
            Ok(o) => o,
            Err(e) => {
                skip(e);
                figures.skipped_segments += 1;
                continue;
            }
        };
        let mut frames = match Frames::new(&file, len) {
            Ok(f) => f,
            Err(e) => {
                skip(e);
                figures.skipped_segments += 1;
                continue;
            }
        };
        loop {
            let header = match frames.next_header() {
                Ok(Some((h, _))) => h,
                Ok(None) => break,
                Err(_) => {
                    figures.bad_frames += 1;
                    break;
                }
            };
            let wanted = match header.kind {
                FrameKind::Events => false,
                FrameKind::Checkpoint => i == from,
                FrameKind::Tracking => range.end.is_none_or(|e| header.first <= e),
                FrameKind::Samples => range.overlaps(header.first, header.last),
            };
            if !wanted {
                continue;
            }
            match frames.read_records(&header, &mut decoder, (&mut stored, &mut records)) {
                Ok(()) => each(Frame {
                    kind: header.kind,
                    cpu: header.cpu,
                    records: &records,
                })?,
                Err(_) => figures.bad_frames += 1,
            }
        }
    }
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_shorter_than_its_first_frame_is_removed_and_a_foreign_file_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let empty = dir.path().join("seg-00000000000000000001.hist");
        let short = dir.path().join("seg-00000000000000000002.hist");
        let foreign = dir.path().join("seg-00000000000000000003.hist");
        std::fs::write(&empty, b"").unwrap();
        std::fs::write(&short, FILE_MAGIC).unwrap();
        // Long enough for a segment, without its magic: not the daemon's
        // making, left alone.
        std::fs::write(&foreign, vec![0u8; FILE_MAGIC.len() + HEADER_LEN]).unwrap();
        let indexed = index_dir(dir.path(), "this boot").expect("index");
        assert!(indexed.is_empty());
        assert!(!empty.exists(), "an empty segment is removed");
        assert!(
            !short.exists(),
            "a segment without a whole frame header is removed"
        );
        assert!(
            foreign.exists(),
            "a file that is not a segment is left alone"
        );
    }
}
