//! Reading a perf.data file this project wrote: header, the bytes before
//! the data section (ids, attrs), the data section, the feature sections;
//! a plain copy of a compressed file; the BUILD_ID table. Every offset is
//! checked; bad input is an error, never a panic.

use thiserror::Error;

use crate::abi::{HEADER_SIZE, get_u64, misc, record_type};
use crate::format::{
    FILE_HEADER_SIZE, LevelError, bit, feature_bits, feature_index, file_header, is_perf_data,
};
use crate::records::file_records;

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
    #[error("the decompressed records take more than {limit} bytes")]
    DecompressedTooLarge { limit: u64 },
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

fn section<'a>(
    bytes: &'a [u8],
    what: &'static str,
    offset: u64,
    size: u64,
) -> Result<&'a [u8], ReadError> {
    let len = bytes.len() as u64;
    let oob = || ReadError::OutOfBounds {
        what,
        offset,
        size,
        len,
    };
    let end = offset.checked_add(size).ok_or_else(oob)?;
    if end > len {
        return Err(oob());
    }
    Ok(&bytes[offset as usize..end as usize])
}

pub fn parse(bytes: &[u8]) -> Result<ParsedFile<'_>, ReadError> {
    if !is_perf_data(bytes) {
        return Err(ReadError::NotPerfData);
    }
    let attrs = (get_u64(bytes, 0x18), get_u64(bytes, 0x20));
    section(bytes, "attrs", attrs.0, attrs.1)?;
    let (data_offset, data_size) = (get_u64(bytes, 0x28), get_u64(bytes, 0x30));
    let data = section(bytes, "data", data_offset, data_size)?;
    if data_offset < FILE_HEADER_SIZE as u64 || attrs.0.saturating_add(attrs.1) > data_offset {
        return Err(ReadError::OutOfBounds {
            what: "data",
            offset: data_offset,
            size: data_size,
            len: bytes.len() as u64,
        });
    }
    let bits = feature_bits(bytes);
    let index_offset = data_offset + data_size;
    let index = section(bytes, "feature index", index_offset, bits.len() as u64 * 16)?;
    let mut feats = Vec::with_capacity(bits.len());
    for (i, b) in bits.into_iter().enumerate() {
        let off = get_u64(index, i * 16);
        let size = get_u64(index, i * 16 + 8);
        feats.push((b, section(bytes, "feature", off, size)?));
    }
    Ok(ParsedFile {
        before_data: &bytes[..data_offset as usize],
        data,
        attrs,
        features: feats,
    })
}

/// A plain copy of a compressed perf.data file, for readers without zstd
/// (hotspot's perfparser): every COMPRESSED record replaced by the records
/// it holds (all of them one zstd stream, as perf reads them), the
/// COMPRESSED feature dropped, everything else kept byte for byte.
/// `limit` bounds the decompressed data (a hostile file could expand to
/// anything).
pub fn decompress(bytes: &[u8], limit: u64) -> Result<Vec<u8>, ReadError> {
    use std::io::Write;
    let file = parse(bytes)?;
    if !file.features.iter().any(|(b, _)| *b == bit::COMPRESSED) {
        return Err(ReadError::NotCompressed);
    }
    let mut stream =
        zstd::stream::write::Decoder::new(Vec::new()).map_err(ReadError::Decompress)?;
    for record in file_records(file.data) {
        let (header, record) = record.map_err(|c| ReadError::TornData {
            torn: file.data.len() as u64 - c.offset,
        })?;
        if header.type_ == record_type::COMPRESSED {
            stream
                .write_all(&record[HEADER_SIZE..])
                .and_then(|()| stream.flush())
                .map_err(ReadError::Decompress)?;
        } else {
            stream.get_mut().extend_from_slice(record);
        }
        if stream.get_ref().len() as u64 > limit {
            return Err(ReadError::DecompressedTooLarge { limit });
        }
    }
    let data = stream.into_inner();
    let feats: Vec<(u32, &[u8])> = file
        .features
        .iter()
        .filter(|(b, _)| *b != bit::COMPRESSED)
        .copied()
        .collect();
    let bits: Vec<u32> = feats.iter().map(|(b, _)| *b).collect();
    let data_offset = file.before_data.len() as u64;
    let index_offset = data_offset + data.len() as u64;
    let (index, _) = feature_index(
        index_offset,
        &feats.iter().map(|(_, b)| b).collect::<Vec<_>>(),
    );
    let mut out = Vec::with_capacity(bytes.len() + data.len());
    out.extend_from_slice(&file_header(
        file.attrs,
        (data_offset, data.len() as u64),
        &bits,
    ));
    out.extend_from_slice(&file.before_data[FILE_HEADER_SIZE..]);
    out.extend_from_slice(&data);
    out.extend_from_slice(&index);
    for (_, body) in feats {
        out.extend_from_slice(body);
    }
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
    let Some((_, body)) = file.features.iter().find(|(b, _)| *b == bit::BUILD_ID) else {
        return Ok(Vec::new());
    };
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
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
