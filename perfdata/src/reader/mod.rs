//! Reading a perf.data file: header, the bytes before the data section
//! (ids, attrs), the data section, the feature sections ([`parse`], over
//! bytes in memory; [`layout`], through any `Read + Seek`); a plain copy of
//! a compressed file, made as it is read and bounded ([`plain`]); the
//! BUILD_ID table. Every offset is checked against the file before
//! anything is read or allocated from it; bad input is an error, never a
//! panic.

pub mod layout;
pub mod plain;

use std::io::{Cursor, Read};

use thiserror::Error;

use crate::abi::misc;
use crate::format::{LevelError, bit};
use crate::records::file_records;

pub use layout::{FileLayout, Section};
pub use plain::{DEFAULT_LIMIT_TEXT, PlainFile, default_limit};

/// A BUILD_ID entry up to its file name: header, pid, 24-byte id area.
const BUILD_ID_ENTRY_HEAD: usize = 36;

#[derive(Debug, Error)]
pub enum ReadError {
    #[error("not a perf.data file (bad magic or header size)")]
    NotPerfData,
    #[error("the {what} section ({offset}+{size}) lies outside the {len}-byte file")]
    OutOfBounds {
        what: &'static str,
        offset: u64,
        size: u64,
        len: u64,
    },
    #[error("the file is already compressed")]
    AlreadyCompressed,
    #[error("the data section does not end on a record boundary ({torn} bytes left over)")]
    TornData { torn: u64 },
    #[error("the {what} take {size} bytes, more than a snapshot ever has")]
    TooLarge { what: &'static str, size: u64 },
    #[error("reading: {0}")]
    Io(std::io::Error),
    #[error("{0}")]
    Level(#[from] LevelError),
    #[error("compressing the records: {0}")]
    Compress(std::io::Error),
    #[error("the file is not compressed")]
    NotCompressed,
    #[error("decompressing the records: {0}")]
    Decompress(std::io::Error),
    #[error("its records take more than {} once decompressed", mib(*limit))]
    DecompressedTooLarge { limit: u64 },
    #[error("the header's attr size {size} is not that of a perf_event_attr and its ids")]
    BadAttrSize { size: u64 },
    #[error("the {what} section is malformed: {why}")]
    BadFeature { what: &'static str, why: String },
}

impl ReadError {
    /// The error behind an I/O error from a [`PlainFile`] read: its own
    /// (the limit, torn data) when it is one, else the I/O error.
    pub fn from_io(e: std::io::Error) -> ReadError {
        if e.get_ref().is_some_and(|inner| inner.is::<ReadError>()) {
            if let Some(Ok(read)) = e.into_inner().map(|inner| inner.downcast::<ReadError>()) {
                return *read;
            }
            return ReadError::Io(std::io::ErrorKind::Other.into());
        }
        ReadError::Io(e)
    }
}

/// `16 MiB (16777216 bytes)`: a limit in words.
pub fn mib(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!(
            "{:.1} MiB ({bytes} bytes)",
            bytes as f64 / f64::from(1 << 20)
        )
    }
}

/// A parsed PERFILE2 file, borrowing from its bytes.
#[derive(Debug)]
pub struct ParsedFile<'a> {
    /// The file from its first byte up to the data section (header, ids,
    /// attrs): offsets inside it stay valid as long as the data section
    /// starts at the same place.
    pub before_data: &'a [u8],
    pub data: &'a [u8],
    pub attrs: (u64, u64),
    /// `(feature bit, body)` in ascending bit order.
    pub features: Vec<(u32, &'a [u8])>,
}

pub fn parse(bytes: &[u8]) -> Result<ParsedFile<'_>, ReadError> {
    let layout = FileLayout::read(&mut Cursor::new(bytes))?;
    // Every section lies inside `bytes` (checked), so these slices hold.
    let slice = |s: Section| &bytes[s.offset as usize..s.end() as usize];
    Ok(ParsedFile {
        before_data: &bytes[..layout.data.offset as usize],
        data: slice(layout.data),
        attrs: (layout.attrs.offset, layout.attrs.size),
        features: layout
            .features
            .iter()
            .map(|(b, s)| (*b, slice(*s)))
            .collect(),
    })
}

/// A plain copy of a compressed perf.data file, for readers without zstd
/// (hotspot's perfparser): every COMPRESSED record replaced by the records
/// it holds (all of them one zstd stream, as perf reads them), the
/// COMPRESSED feature dropped, everything else kept byte for byte.
/// `limit` bounds the decompressed data (a hostile file could expand to
/// anything). In memory: [`PlainFile`] makes the same copy as it is read.
pub fn decompress(bytes: &[u8], limit: u64) -> Result<Vec<u8>, ReadError> {
    let mut src = Cursor::new(bytes);
    let layout = FileLayout::read(&mut src)?;
    if !layout.is_compressed() {
        return Err(ReadError::NotCompressed);
    }
    let mut view = PlainFile::open(src, layout, limit)?;
    let mut out = Vec::with_capacity(usize::try_from(view.len()).unwrap_or(0));
    view.read_to_end(&mut out).map_err(ReadError::from_io)?;
    Ok(out)
}

/// One entry of a file's BUILD_ID feature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildIdTableEntry {
    /// `PERF_RECORD_MISC_KERNEL` or `_USER` (cpumode bits).
    pub cpumode: u16,
    pub build_id: Vec<u8>,
    pub filename: String,
}

/// The entries of the BUILD_ID feature of `bytes` (none without it).
/// Entries that do not parse end the list.
pub fn build_id_table(bytes: &[u8]) -> Result<Vec<BuildIdTableEntry>, ReadError> {
    let file = parse(bytes)?;
    Ok(file
        .features
        .iter()
        .find(|(b, _)| *b == bit::BUILD_ID)
        .map(|(_, body)| build_id_entries(body))
        .unwrap_or_default())
}

/// The entries of a BUILD_ID feature's `body`. Entries that do not parse
/// end the list.
pub fn build_id_entries(body: &[u8]) -> Vec<BuildIdTableEntry> {
    let mut out = Vec::new();
    for entry in file_records(body).map_while(Result::ok) {
        let (header, entry) = entry;
        if entry.len() < BUILD_ID_ENTRY_HEAD {
            break;
        }
        // PERF_RECORD_MISC_BUILD_ID_SIZE: byte 32 holds the id's length.
        let id_len = if header.misc & misc::BUILD_ID_SIZE != 0 {
            usize::from(entry[32]).min(20)
        } else {
            20
        };
        let name = &entry[BUILD_ID_ENTRY_HEAD..];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        out.push(BuildIdTableEntry {
            cpumode: header.misc & misc::CPUMODE_MASK,
            build_id: entry[12..12 + id_len].to_vec(),
            filename: String::from_utf8_lossy(name).into_owned(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::file_header;

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(parse(b"short"), Err(ReadError::NotPerfData)));
        let mut h = file_header((104, 0), (104, 1 << 40), &[3]).to_vec();
        assert!(matches!(parse(&h), Err(ReadError::OutOfBounds { .. })));
        h = file_header((104, 0), (104, 0), &[3]).to_vec();
        // index entry missing
        assert!(matches!(parse(&h), Err(ReadError::OutOfBounds { .. })));
        h.extend_from_slice(&u64::MAX.to_le_bytes());
        h.extend_from_slice(&2u64.to_le_bytes());
        assert!(matches!(parse(&h), Err(ReadError::OutOfBounds { .. })));
    }
}
