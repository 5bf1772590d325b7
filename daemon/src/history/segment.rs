//! The history's file format, pure: a segment is a file of frames, each a
//! fixed header and a zstd frame (with its checksum) of records. A segment
//! describes itself: its first frame names the events whose ids its records
//! carry (and the boot they were recorded in), its second is a checkpoint
//! of every process as COMM and MMAP2 records, then come the sample records
//! of each CPU and the tracking records, a frame per CPU and round.
//!
//! A segment is only ever appended to, so a crash leaves at most a torn
//! last frame: [`frames`] stops before it and everything before it reads.

use std::io;

use crate::time::SampleTime;

/// The first bytes of every segment file.
pub const FILE_MAGIC: &[u8; 8] = b"FRHIST01";
/// The first bytes of every frame ("FRHF").
const FRAME_MAGIC: u32 = u32::from_le_bytes(*b"FRHF");
/// Bytes of a frame's header.
pub const HEADER_LEN: usize = 40;
/// A frame never holds more records than this many bytes.
pub const MAX_RAW_BYTES: usize = 64 << 20;
/// Records a frame holds at most, as the writer cuts them (a MiB, or one
/// record larger than that: records are at most 64 KiB): a reader refuses
/// a frame that says it holds more.
pub const WRITTEN_RAW_BYTES: usize = (1 << 20) + (64 << 10);

/// What a frame holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// The events of the segment ([`SegmentEvents`]).
    Events,
    /// Every process at `first_ns`, as COMM and MMAP2 records.
    Checkpoint,
    /// One CPU's sample records (and LOST records), oldest first.
    Samples,
    /// Tracking records of every CPU (COMM, FORK, EXIT, MMAP2...).
    Tracking,
}

impl FrameKind {
    fn code(self) -> u8 {
        match self {
            FrameKind::Events => 1,
            FrameKind::Checkpoint => 2,
            FrameKind::Samples => 3,
            FrameKind::Tracking => 4,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => FrameKind::Events,
            2 => FrameKind::Checkpoint,
            3 => FrameKind::Samples,
            4 => FrameKind::Tracking,
            _ => return None,
        })
    }
}

/// A frame's header: what it holds and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub kind: FrameKind,
    /// The CPU of a `Samples` frame (0 otherwise).
    pub cpu: u32,
    /// Sample times of the oldest and newest record.
    pub first: SampleTime,
    pub last: SampleTime,
    pub records: u32,
    /// Bytes of the records, and of the compressed frame that follows.
    pub raw_len: u32,
    pub stored_len: u32,
}

impl FrameHeader {
    fn to_bytes(self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
        b[4] = self.kind.code();
        b[8..12].copy_from_slice(&self.cpu.to_le_bytes());
        b[12..20].copy_from_slice(&self.first.as_nanos().to_le_bytes());
        b[20..28].copy_from_slice(&self.last.as_nanos().to_le_bytes());
        b[28..32].copy_from_slice(&self.records.to_le_bytes());
        b[32..36].copy_from_slice(&self.raw_len.to_le_bytes());
        b[36..40].copy_from_slice(&self.stored_len.to_le_bytes());
        b
    }

    /// A header from its bytes; None if they are not one.
    pub fn parse(b: &[u8]) -> Option<Self> {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or_default());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default());
        if b.len() < HEADER_LEN || u32_at(0) != FRAME_MAGIC {
            return None;
        }
        let header = FrameHeader {
            kind: FrameKind::from_code(b[4])?,
            cpu: u32_at(8),
            first: SampleTime::from_nanos(u64_at(12)),
            last: SampleTime::from_nanos(u64_at(20)),
            records: u32_at(28),
            raw_len: u32_at(32),
            stored_len: u32_at(36),
        };
        (header.raw_len as usize <= MAX_RAW_BYTES && header.first <= header.last).then_some(header)
    }
}

/// A frame of `records`, compressed at zstd `level` with a checksum.
pub fn encode_frame(
    kind: FrameKind,
    cpu: u32,
    times: (SampleTime, SampleTime),
    count: u32,
    records: &[u8],
    level: i32,
) -> io::Result<Vec<u8>> {
    Ok(FrameEncoder::new(level)?
        .encode(kind, cpu, times, count, records)?
        .to_vec())
}

/// Encodes frames with one zstd context and buffers kept from frame to
/// frame. A context per frame allocates and zeroes its tables each time
/// (above the allocator's 1 MiB mmap threshold: fresh pages, faulted in,
/// unmapped after), which was most of the writer's time at high rates.
pub struct FrameEncoder {
    compressor: zstd::bulk::Compressor<'static>,
    stored: Vec<u8>,
    frame: Vec<u8>,
}

impl FrameEncoder {
    pub fn new(level: i32) -> io::Result<Self> {
        let mut compressor = zstd::bulk::Compressor::new(level)?;
        compressor.include_checksum(true)?;
        Ok(FrameEncoder {
            compressor,
            stored: Vec::new(),
            frame: Vec::new(),
        })
    }

    /// The frame of `records`, valid until the next call.
    pub fn encode(
        &mut self,
        kind: FrameKind,
        cpu: u32,
        (first, last): (SampleTime, SampleTime),
        count: u32,
        records: &[u8],
    ) -> io::Result<&[u8]> {
        if records.len() > MAX_RAW_BYTES {
            return Err(io::Error::other(format!(
                "{} bytes of records in one frame, at most {MAX_RAW_BYTES}",
                records.len()
            )));
        }
        self.stored.clear();
        self.stored
            .reserve(zstd::zstd_safe::compress_bound(records.len()));
        self.compressor
            .compress_to_buffer(records, &mut self.stored)?;
        let header = FrameHeader {
            kind,
            cpu,
            first,
            last,
            records: count,
            raw_len: records.len() as u32,
            stored_len: u32::try_from(self.stored.len()).map_err(io::Error::other)?,
        };
        self.frame.clear();
        self.frame.extend_from_slice(&header.to_bytes());
        self.frame.extend_from_slice(&self.stored);
        Ok(&self.frame)
    }
}

/// The records of a frame, decompressed and checked against its checksum.
pub fn decode_frame(header: &FrameHeader, stored: &[u8]) -> io::Result<Vec<u8>> {
    let mut records = Vec::new();
    FrameDecoder::new()?.decode(header, stored, &mut records)?;
    Ok(records)
}

/// Decodes frames with one zstd context, into a buffer the caller keeps
/// from frame to frame (fresh buffers of a MiB are fresh pages each time).
pub struct FrameDecoder {
    decompressor: zstd::bulk::Decompressor<'static>,
}

impl FrameDecoder {
    pub fn new() -> io::Result<Self> {
        Ok(FrameDecoder {
            decompressor: zstd::bulk::Decompressor::new()?,
        })
    }

    /// The records of a frame into `records` (replaced), checked against
    /// the frame's checksum and its header's length.
    pub fn decode(
        &mut self,
        header: &FrameHeader,
        stored: &[u8],
        records: &mut Vec<u8>,
    ) -> io::Result<()> {
        records.clear();
        records.reserve(header.raw_len as usize);
        self.decompressor.decompress_to_buffer(stored, records)?;
        check_length(header, records)
    }
}

fn check_length(header: &FrameHeader, records: &[u8]) -> io::Result<()> {
    if records.len() != header.raw_len as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "frame holds {} bytes, its header says {}",
                records.len(),
                header.raw_len
            ),
        ));
    }
    Ok(())
}

/// The frames of a segment's bytes (after [`FILE_MAGIC`]): `(header,
/// offset of its stored bytes)`. Stops at the first header that does not
/// parse or whose bytes are not all there (a torn last frame), and says
/// how many bytes were whole.
pub fn frames(bytes: &[u8]) -> (Vec<(FrameHeader, usize)>, usize) {
    let mut out = Vec::new();
    if bytes.len() < FILE_MAGIC.len() || &bytes[..FILE_MAGIC.len()] != FILE_MAGIC {
        return (out, 0);
    }
    let mut at = FILE_MAGIC.len();
    while let Some(header) = bytes.get(at..at + HEADER_LEN).and_then(FrameHeader::parse) {
        let end = at + HEADER_LEN + header.stored_len as usize;
        if end > bytes.len() {
            break;
        }
        out.push((header, at + HEADER_LEN));
        at = end;
    }
    (out, at)
}

/// One event as a segment names it: records carrying one of `ids` are
/// that event's, laid out by `sample_type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentEvent {
    pub name: String,
    pub sample_type: u64,
    pub ids: Vec<u64>,
}

/// What an `Events` frame holds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SegmentEvents {
    /// /proc/sys/kernel/random/boot_id: sample times of another boot mean
    /// nothing on this one.
    pub boot_id: String,
    /// Sample events, then the tracking event.
    pub events: Vec<SegmentEvent>,
}

impl SegmentEvents {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::new();
        push_str(&mut b, &self.boot_id);
        b.extend_from_slice(&(self.events.len() as u32).to_le_bytes());
        for e in &self.events {
            push_str(&mut b, &e.name);
            b.extend_from_slice(&e.sample_type.to_le_bytes());
            b.extend_from_slice(&(e.ids.len() as u32).to_le_bytes());
            for id in &e.ids {
                b.extend_from_slice(&id.to_le_bytes());
            }
        }
        b
    }

    pub fn parse(b: &[u8]) -> Option<Self> {
        let mut r = Reader { b, at: 0 };
        let boot_id = r.str()?;
        let n = r.u32()?;
        let mut events = Vec::new();
        for _ in 0..n {
            let name = r.str()?;
            let sample_type = r.u64()?;
            let ids_len = r.u32()?;
            let ids = (0..ids_len).map(|_| r.u64()).collect::<Option<Vec<_>>>()?;
            events.push(SegmentEvent {
                name,
                sample_type,
                ids,
            });
        }
        Some(SegmentEvents { boot_id, events })
    }
}

fn push_str(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u32).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn str(&mut self) -> Option<String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(first: u64, last: u64) -> (SampleTime, SampleTime) {
        (SampleTime::from_nanos(first), SampleTime::from_nanos(last))
    }

    fn segment(frames: &[Vec<u8>]) -> Vec<u8> {
        let mut b = FILE_MAGIC.to_vec();
        for f in frames {
            b.extend_from_slice(f);
        }
        b
    }

    #[test]
    fn frames_read_back_and_a_torn_last_frame_is_left_out() {
        let a = encode_frame(FrameKind::Samples, 1, times(10, 20), 2, &[7u8; 4096], 1).unwrap();
        let b = encode_frame(FrameKind::Tracking, 0, times(15, 30), 1, &[9u8; 64], 3).unwrap();
        let whole = segment(&[a.clone(), b.clone()]);
        let (found, good) = frames(&whole);
        assert_eq!(good, whole.len());
        assert_eq!(found.len(), 2);
        let (h, at) = found[0];
        assert_eq!(
            (
                h.kind,
                h.cpu,
                h.first.as_nanos(),
                h.last.as_nanos(),
                h.records
            ),
            (FrameKind::Samples, 1, 10, 20, 2)
        );
        let stored = &whole[at..at + h.stored_len as usize];
        assert_eq!(decode_frame(&h, stored).unwrap(), vec![7u8; 4096]);

        // Cut anywhere inside the second frame: the first still reads.
        let second = FILE_MAGIC.len() + a.len();
        for cut in [second + 3, second + HEADER_LEN + 2, whole.len() - 1] {
            let (found, good) = frames(&whole[..cut]);
            assert_eq!(found.len(), 1, "cut at {cut}");
            assert_eq!(good, second);
        }
        // Not a segment at all.
        assert_eq!(frames(b"FRHIST00xxxxxxxx").0.len(), 0);
    }

    #[test]
    fn a_corrupt_frame_fails_its_checksum() {
        let a = encode_frame(FrameKind::Samples, 0, times(1, 2), 1, &[5u8; 1000], 1).unwrap();
        let mut whole = segment(&[a]);
        let (found, _) = frames(&whole);
        let (h, at) = found[0];
        let last = at + h.stored_len as usize - 6;
        whole[last] ^= 0xff;
        assert!(decode_frame(&h, &whole[at..at + h.stored_len as usize]).is_err());
    }

    #[test]
    fn events_read_back_and_garbage_is_refused() {
        let events = SegmentEvents {
            boot_id: "b0".into(),
            events: vec![
                SegmentEvent {
                    name: "cpu-clock".into(),
                    sample_type: 0x1_0087,
                    ids: vec![11, 12],
                },
                SegmentEvent {
                    name: "dummy:HG".into(),
                    sample_type: 0x10086,
                    ids: vec![13],
                },
            ],
        };
        let bytes = events.to_bytes();
        assert_eq!(SegmentEvents::parse(&bytes), Some(events));
        assert_eq!(SegmentEvents::parse(&bytes[..bytes.len() - 1]), None);
        assert_eq!(SegmentEvents::parse(&[0xff; 8]), None);
    }
}
