//! A perf.data file as the plain file it stands for, made as it is read:
//! [`PlainFile`] is a `Read + Seek` view of a (compressed or plain) file
//! whose records are decompressed a piece at a time, never more than
//! [`MAX_WINDOW_LOG`]'s window and a few hundred KiB of buffers in memory,
//! whatever the file holds.
//!
//! zstd packs 256 MiB of repeated records into a few KiB, so what a file
//! decompresses to is bounded: [`PlainFile::open`] first walks the whole
//! stream without keeping it, and refuses a file whose records take more
//! than the limit (by default [`default_limit`] of its size) before anyone
//! reads a record. The walk also gives the plain data's size, which the
//! plain header must carry; reading the view then decompresses once more,
//! still bounded by the same limit.

use std::io::{self, Read, Seek, SeekFrom};
use std::ops::Range;

use zstd::stream::raw::{DParameter, Decoder, Operation};

use crate::abi::{HEADER_SIZE, RecordHeader, get_u64, record_type};
use crate::format::{FEATURE_BITMAP_OFFSET, FILE_HEADER_SIZE, bit};

use super::ReadError;
use super::layout::{FileLayout, Section};

/// By default a file's records may take this many times its size once
/// decompressed (real snapshots compress 4 to 15 times)...
pub const DEFAULT_RATIO: u64 = 64;
/// ...and at least this much, whatever its size.
pub const DEFAULT_FLOOR: u64 = 16 << 20;
/// How the default limit is put in words, for messages and help texts.
pub const DEFAULT_LIMIT_TEXT: &str = "64 times the file's size, at least 16 MiB";
/// The largest zstd window accepted (128 MiB, zstd's own default limit:
/// what `perf record -z` writes at level 22); a frame that asks for more
/// is refused before it is allocated.
pub const MAX_WINDOW_LOG: u32 = 27;

/// Source bytes read at a time.
const SOURCE_CHUNK: usize = 256 << 10;
/// Decompressed bytes made at a time.
const OUT_CHUNK: usize = 128 << 10;

/// The most a file of `file_len` bytes may decompress to by default.
pub fn default_limit(file_len: u64) -> u64 {
    file_len.saturating_mul(DEFAULT_RATIO).max(DEFAULT_FLOOR)
}

/// The records of a data section, plain: plain records as they are,
/// COMPRESSED and COMPRESSED2 records replaced by what they hold (all of
/// them one zstd stream, as perf reads them). Reads its source through
/// the `Read + Seek` it is handed at each call, at its own offsets.
struct RecordStream {
    section: Section,
    /// Source offset of the byte after `buf[..filled]`.
    next_read: u64,
    buf: Vec<u8>,
    at: usize,
    filled: usize,
    decoder: Decoder<'static>,
    /// The zstd bytes of the current compressed record not yet fed
    /// (`buf` indices); `None` between records.
    input: Option<Range<usize>>,
    out: Vec<u8>,
    pending: Pending,
    produced: u64,
    limit: u64,
}

/// The plain bytes made and not yet handed out.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pending {
    /// `out[range]`: decompressed.
    Out(Range<usize>),
    /// `buf[range]`: plain records copied through.
    Source(Range<usize>),
}

impl RecordStream {
    fn new(section: Section, limit: u64) -> Result<Self, ReadError> {
        let mut decoder = Decoder::new().map_err(ReadError::Decompress)?;
        decoder
            .set_parameter(DParameter::WindowLogMax(MAX_WINDOW_LOG))
            .map_err(ReadError::Decompress)?;
        Ok(RecordStream {
            section,
            next_read: section.offset,
            buf: vec![0; SOURCE_CHUNK],
            at: 0,
            filled: 0,
            decoder,
            input: None,
            out: vec![0; OUT_CHUNK],
            pending: Pending::Out(0..0),
            produced: 0,
            limit,
        })
    }

    /// The plain bytes ready to hand out; empty at the end.
    fn chunk(&self) -> &[u8] {
        match &self.pending {
            Pending::Out(r) => &self.out[r.clone()],
            Pending::Source(r) => &self.buf[r.clone()],
        }
    }

    fn consume(&mut self, n: usize) {
        match &mut self.pending {
            Pending::Out(r) | Pending::Source(r) => r.start += n,
        }
    }

    /// Makes plain bytes ready ([`Self::chunk`]); false at the end of the
    /// section.
    fn fill<R: Read + Seek>(&mut self, src: &mut R) -> Result<bool, ReadError> {
        loop {
            if !self.chunk().is_empty() {
                return Ok(true);
            }
            if let Some(input) = self.input.clone() {
                let status = self
                    .decoder
                    .run_on_buffers(&self.buf[input.clone()], &mut self.out)
                    .map_err(ReadError::Decompress)?;
                let left = input.start + status.bytes_read..input.end;
                // Output that filled the buffer may have more behind it.
                if left.is_empty() && status.bytes_written < self.out.len() {
                    self.input = None;
                } else if status.bytes_read == 0 && status.bytes_written == 0 {
                    return Err(ReadError::Decompress(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the zstd stream makes no progress",
                    )));
                } else {
                    self.input = Some(left);
                }
                self.pending = Pending::Out(0..status.bytes_written);
                self.count(status.bytes_written)?;
                continue;
            }
            if !self.next_record(src)? {
                return Ok(false);
            }
        }
    }

    fn count(&mut self, n: usize) -> Result<(), ReadError> {
        self.produced += n as u64;
        if self.produced > self.limit {
            return Err(ReadError::DecompressedTooLarge { limit: self.limit });
        }
        Ok(())
    }

    /// Source offset of `buf[i]`.
    fn offset_of(&self, i: usize) -> u64 {
        self.next_read - (self.filled - i) as u64
    }

    /// Takes the next record: a compressed one becomes input, plain ones
    /// (as many as lie whole in the buffer) become pending. False at the
    /// end of the section.
    fn next_record<R: Read + Seek>(&mut self, src: &mut R) -> Result<bool, ReadError> {
        let start = self.offset_of(self.at);
        if start == self.section.end() {
            return Ok(false);
        }
        let torn = ReadError::TornData {
            torn: self.section.end() - start,
        };
        if !self.ensure(src, HEADER_SIZE)? {
            return Err(torn);
        }
        let header = record_header(&self.buf[self.at..]);
        let size = usize::from(header.size);
        if size < HEADER_SIZE || !self.ensure(src, size)? {
            return Err(torn);
        }
        let body = self.at + HEADER_SIZE..self.at + size;
        match header.type_ {
            record_type::COMPRESSED => self.input = Some(body),
            record_type::COMPRESSED2 => {
                // The zstd bytes' length, then the bytes, then padding.
                let Some(len) = self.buf.get(body.start..body.start + 8) else {
                    return Err(torn);
                };
                let len = usize::try_from(get_u64(len, 0)).unwrap_or(usize::MAX);
                let zstd = body.start + 8..body.end;
                self.input = Some(zstd.start..zstd.start + len.min(zstd.len()));
            }
            _ => {
                let first = self.at;
                let mut end = self.at + size;
                // The plain records after it, as far as they lie whole in
                // the buffer.
                while end + HEADER_SIZE <= self.filled && self.offset_of(end) < self.section.end() {
                    let h = record_header(&self.buf[end..]);
                    let n = usize::from(h.size);
                    if n < HEADER_SIZE
                        || end + n > self.filled
                        || matches!(h.type_, record_type::COMPRESSED | record_type::COMPRESSED2)
                    {
                        break;
                    }
                    end += n;
                }
                self.at = end;
                self.pending = Pending::Source(first..end);
                self.count(end - first)?;
                return Ok(true);
            }
        }
        self.at += size;
        Ok(true)
    }

    /// Makes `n` bytes of the section available at `buf[at..]`, reading
    /// more; false when the section has fewer left.
    fn ensure<R: Read + Seek>(&mut self, src: &mut R, n: usize) -> Result<bool, ReadError> {
        if self.filled - self.at >= n {
            return Ok(true);
        }
        self.buf.copy_within(self.at..self.filled, 0);
        self.filled -= self.at;
        self.at = 0;
        src.seek(SeekFrom::Start(self.next_read))
            .map_err(ReadError::Io)?;
        while self.filled < n {
            let want = (self.buf.len() - self.filled)
                .min(usize::try_from(self.section.end() - self.next_read).unwrap_or(usize::MAX));
            if want == 0 {
                return Ok(false);
            }
            let got = src
                .read(&mut self.buf[self.filled..self.filled + want])
                .map_err(ReadError::Io)?;
            if got == 0 {
                return Err(ReadError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file ends before its data section does (was it cut while read?)",
                )));
            }
            self.filled += got;
            self.next_read += got as u64;
        }
        Ok(true)
    }
}

fn record_header(b: &[u8]) -> RecordHeader {
    // Callers hold at least HEADER_SIZE bytes.
    RecordHeader::parse(b).unwrap_or(RecordHeader {
        type_: 0,
        misc: 0,
        size: 0,
    })
}

/// A part of the plain view and where its bytes come from.
#[derive(Debug, Clone)]
enum Part {
    /// Bytes held here (the header, the feature index, a feature checked
    /// when opened).
    Held(Vec<u8>),
    /// The source's bytes from this offset.
    Source(u64),
    /// The plain records.
    Records,
}

/// A perf.data file seen as its plain (uncompressed) form. See the module
/// documentation.
pub struct PlainFile<R> {
    src: R,
    layout: FileLayout,
    /// `(start in the view, length, part)`, in order, covering the view.
    parts: Vec<(u64, u64, Part)>,
    records: RecordStream,
    /// How many plain bytes `records` handed out.
    records_pos: u64,
    records_len: u64,
    limit: u64,
    pos: u64,
    len: u64,
}

impl<R> std::fmt::Debug for PlainFile<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainFile")
            .field("len", &self.len)
            .field("records_len", &self.records_len)
            .finish_non_exhaustive()
    }
}

impl<R: Read + Seek> PlainFile<R> {
    /// The plain view of the file `src` laid out as `layout`, once its
    /// records were walked and found to take at most `limit` bytes; also
    /// checks what a parser reads first ([`FileLayout::check_contents`]).
    pub fn open(mut src: R, layout: FileLayout, limit: u64) -> Result<Self, ReadError> {
        let event_desc = layout.check_contents(&mut src)?;
        let records_len = if layout.is_compressed() {
            let mut walk = RecordStream::new(layout.data, limit)?;
            let mut total = 0u64;
            while walk.fill(&mut src)? {
                let n = walk.chunk().len();
                total += n as u64;
                walk.consume(n);
            }
            total
        } else {
            if layout.data.size > limit {
                return Err(ReadError::DecompressedTooLarge { limit });
            }
            layout.data.size
        };
        let kept: Vec<(u32, Section)> = layout
            .features
            .iter()
            .filter(|(b, _)| *b != bit::COMPRESSED)
            .copied()
            .collect();
        let mut header = layout.header;
        header[0x30..0x38].copy_from_slice(&records_len.to_le_bytes());
        let compressed_bit = FEATURE_BITMAP_OFFSET + (bit::COMPRESSED / 8) as usize;
        header[compressed_bit] &= !(1 << (bit::COMPRESSED % 8));

        let data_start = layout.data.offset;
        let index_start = data_start + records_len;
        let mut parts = vec![
            (0, FILE_HEADER_SIZE as u64, Part::Held(header.to_vec())),
            (
                FILE_HEADER_SIZE as u64,
                data_start - FILE_HEADER_SIZE as u64,
                Part::Source(FILE_HEADER_SIZE as u64),
            ),
            (data_start, records_len, Part::Records),
        ];
        let mut index = Vec::with_capacity(kept.len() * 16);
        let mut body_start = index_start + kept.len() as u64 * 16;
        let mut bodies = Vec::with_capacity(kept.len());
        for (b, s) in &kept {
            index.extend_from_slice(&body_start.to_le_bytes());
            index.extend_from_slice(&s.size.to_le_bytes());
            let part = match (&event_desc, *b) {
                (Some(held), bit::EVENT_DESC) => Part::Held(held.clone()),
                _ => Part::Source(s.offset),
            };
            bodies.push((body_start, s.size, part));
            body_start += s.size;
        }
        parts.push((index_start, index.len() as u64, Part::Held(index)));
        parts.extend(bodies);
        Ok(PlainFile {
            records: RecordStream::new(layout.data, limit)?,
            src,
            layout,
            parts,
            records_pos: 0,
            records_len,
            limit,
            pos: 0,
            len: body_start,
        })
    }

    /// The plain file's length.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The plain data section's length.
    pub fn records_len(&self) -> u64 {
        self.records_len
    }

    /// Plain bytes at `offset` of the records into `buf`.
    fn read_records(&mut self, offset: u64, buf: &mut [u8]) -> Result<usize, ReadError> {
        if offset < self.records_pos {
            self.records = RecordStream::new(self.layout.data, self.limit)?;
            self.records_pos = 0;
        }
        loop {
            if !self.records.fill(&mut self.src)? {
                return Err(ReadError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the records came out shorter than when first read (was the file \
                     changed while read?)",
                )));
            }
            let chunk = self.records.chunk();
            let skip = offset - self.records_pos;
            if skip >= chunk.len() as u64 {
                let n = chunk.len();
                self.records.consume(n);
                self.records_pos += n as u64;
                continue;
            }
            let skip = skip as usize;
            let n = (chunk.len() - skip).min(buf.len());
            buf[..n].copy_from_slice(&chunk[skip..skip + n]);
            self.records.consume(skip + n);
            self.records_pos += (skip + n) as u64;
            return Ok(n);
        }
    }
}

impl<R: Read + Seek> Read for PlainFile<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let pos = self.pos;
        let Some((start, len, part)) = self
            .parts
            .iter()
            .find(|(start, len, _)| pos >= *start && pos - start < *len)
            .cloned()
        else {
            return Ok(0);
        };
        let within = pos - start;
        let room = usize::try_from(len - within).unwrap_or(usize::MAX);
        let want = buf.len().min(room);
        let n = match part {
            Part::Held(bytes) => {
                let from = within as usize;
                buf[..want].copy_from_slice(&bytes[from..from + want]);
                want
            }
            Part::Source(offset) => {
                self.src.seek(SeekFrom::Start(offset + within))?;
                self.src.read(&mut buf[..want])?
            }
            Part::Records => self
                .read_records(within, &mut buf[..want])
                .map_err(io::Error::other)?,
        };
        self.pos += n as u64;
        Ok(n)
    }
}

impl<R: Read + Seek> Seek for PlainFile<R> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = target
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{feature_index, file_header};
    use std::io::{Cursor, Write};

    /// A plain record of `size` bytes (type SAMPLE) filled with `fill`.
    fn record(size: u16, fill: u8) -> Vec<u8> {
        let mut r = RecordHeader {
            type_: record_type::SAMPLE,
            misc: 0,
            size,
        }
        .to_bytes()
        .to_vec();
        r.resize(usize::from(size), fill);
        r
    }

    fn compressed(type_: u32, zstd: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        if type_ == record_type::COMPRESSED2 {
            body.extend_from_slice(&(zstd.len() as u64).to_le_bytes());
        }
        body.extend_from_slice(zstd);
        if type_ == record_type::COMPRESSED2 {
            body.resize(body.len().next_multiple_of(8), 0);
        }
        let size = u16::try_from(HEADER_SIZE + body.len()).expect("a record's size");
        let mut r = RecordHeader {
            type_,
            misc: 0,
            size,
        }
        .to_bytes()
        .to_vec();
        r.extend_from_slice(&body);
        r
    }

    /// A file of `data` with a HOSTNAME feature (and COMPRESSED if
    /// `compressed`).
    fn file(data: &[u8], compressed: bool) -> Vec<u8> {
        let mut bits = vec![bit::HOSTNAME];
        let mut bodies: Vec<Vec<u8>> = vec![b"\x04\0\0\0host".to_vec()];
        if compressed {
            bits.push(bit::COMPRESSED);
            bodies.push(vec![0; 28]);
        }
        let mut f = file_header((104, 0), (104, data.len() as u64), &bits).to_vec();
        f.extend_from_slice(data);
        let (index, _) = feature_index(f.len() as u64, &bodies);
        f.extend_from_slice(&index);
        for b in bodies {
            f.extend_from_slice(&b);
        }
        f
    }

    fn plain_of(bytes: &[u8], limit: u64) -> Result<Vec<u8>, ReadError> {
        let mut src = Cursor::new(bytes);
        let layout = FileLayout::read(&mut src)?;
        let mut view = PlainFile::open(src, layout, limit)?;
        let mut out = Vec::new();
        view.read_to_end(&mut out).map_err(ReadError::Io)?;
        assert_eq!(out.len() as u64, view.len());
        Ok(out)
    }

    #[test]
    fn compressed_records_of_both_kinds_come_out_in_place_as_one_stream() {
        let inner: Vec<u8> = (0..400).flat_map(|i| record(24, i as u8)).collect();
        let (first, second) = inner.split_at(24 * 150);
        // One stream, flushed after the first part (as perf flushes each
        // record's worth), split across a COMPRESSED and a COMPRESSED2
        // record, a plain record between them.
        let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
        enc.write_all(first).unwrap();
        enc.flush().unwrap();
        let a = enc.get_ref().clone();
        enc.write_all(second).unwrap();
        let stream = enc.finish().unwrap();
        let mut data = compressed(record_type::COMPRESSED, &a);
        data.extend(record(16, 0xee));
        data.extend(compressed(record_type::COMPRESSED2, &stream[a.len()..]));
        data.extend(record(8, 0));
        let plain = plain_of(&file(&data, true), u64::MAX).unwrap();
        let mut want_data = first.to_vec();
        want_data.extend(record(16, 0xee));
        want_data.extend_from_slice(second);
        want_data.extend(record(8, 0));
        assert_eq!(plain, file(&want_data, false));
    }

    #[test]
    fn a_plain_file_reads_back_as_itself() {
        let data: Vec<u8> = (0..20_000).flat_map(|i| record(32, i as u8)).collect();
        let f = file(&data, false);
        assert_eq!(plain_of(&f, u64::MAX).unwrap(), f);
    }

    #[test]
    fn a_bomb_is_refused_at_the_limit_having_made_no_more_than_a_chunk_beyond_it() {
        let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
        let r = record(40, 7);
        for _ in 0..(64 << 20) / 40 {
            enc.write_all(&r).unwrap();
        }
        let stream = enc.finish().unwrap();
        assert!(stream.len() < 60_000, "{}", stream.len());
        let f = file(&compressed(record_type::COMPRESSED, &stream), true);
        let err = plain_of(&f, 1 << 20).unwrap_err();
        assert!(
            matches!(err, ReadError::DecompressedTooLarge { limit } if limit == 1 << 20),
            "{err}"
        );
        let mut src = Cursor::new(&f);
        let layout = FileLayout::read(&mut src).unwrap();
        let view = PlainFile::open(src, layout, 64 << 20).unwrap();
        assert_eq!(view.records_len(), (64 << 20) / 40 * 40);
    }

    #[test]
    fn a_torn_record_is_an_error() {
        let mut data = record(32, 1);
        data.truncate(20);
        let err = plain_of(&file(&data, true), u64::MAX).unwrap_err();
        assert!(matches!(err, ReadError::TornData { torn: 20 }), "{err}");
        let err = plain_of(
            &file(&compressed(record_type::COMPRESSED, b"not zstd"), true),
            u64::MAX,
        )
        .unwrap_err();
        assert!(matches!(err, ReadError::Decompress(_)), "{err}");
    }

    #[test]
    fn the_view_seeks_back_and_forth() {
        let inner: Vec<u8> = (0..50_000).flat_map(|i| record(24, i as u8)).collect();
        let stream = zstd::encode_all(&inner[..], 1).unwrap();
        let f = file(&compressed(record_type::COMPRESSED, &stream), true);
        let whole = plain_of(&f, u64::MAX).unwrap();
        let mut src = Cursor::new(&f);
        let layout = FileLayout::read(&mut src).unwrap();
        let mut view = PlainFile::open(src, layout, u64::MAX).unwrap();
        for at in [900_000u64, 104, 1_000_000, 5, whole.len() as u64 - 3] {
            view.seek(SeekFrom::Start(at)).unwrap();
            let mut b = [0u8; 3];
            view.read_exact(&mut b).unwrap();
            assert_eq!(b, whole[at as usize..at as usize + 3], "at {at}");
        }
    }

    /// Reads `bytes` through the plain view as far as it goes: whatever
    /// the bytes, no panic, and never more than `limit` bytes of records.
    fn read_any(bytes: &[u8], limit: u64) {
        let mut src = Cursor::new(bytes);
        let Ok(layout) = FileLayout::read(&mut src) else {
            return;
        };
        let Ok(mut view) = PlainFile::open(src, layout, limit) else {
            return;
        };
        assert!(view.records_len() <= limit);
        let mut out = Vec::new();
        if view.read_to_end(&mut out).is_ok() {
            assert_eq!(out.len() as u64, view.len());
        }
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_are_read_or_refused_within_the_limit(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..700),
            limit in 0u64..4096,
        ) {
            read_any(&bytes, limit);
        }

        #[test]
        fn a_damaged_compressed_file_is_read_or_refused_within_the_limit(
            flips in proptest::collection::vec((0usize..4096, proptest::prelude::any::<u8>()), 1..8),
            limit in 0u64..100_000,
        ) {
            let inner: Vec<u8> = (0..2000).flat_map(|i| record(24, i as u8)).collect();
            let stream = zstd::encode_all(&inner[..], 1).unwrap();
            let mut data = compressed(record_type::COMPRESSED, &stream);
            data.extend(record(16, 3));
            let mut f = file(&data, true);
            for (at, b) in flips {
                let at = at % f.len();
                f[at] = b;
            }
            read_any(&f, limit);
        }
    }
}
