//! Reading back a snapshot this writer produced, to compress it later:
//! header, the bytes before the data section (ids, attrs), the data
//! section, the feature sections. Every offset is checked; bad input is an
//! error, never a panic.

use std::borrow::Cow;

use thiserror::Error;

use crate::abi::get_u64;

use super::compress;
use super::features::{self, bit};
use super::perfdata::{
    CompressionSummary, DataSummary, FILE_HEADER_SIZE, MAGIC, PerfData, check_level, feature_index,
    file_header,
};

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
    #[error("{0}")]
    Level(#[from] super::perfdata::PerfDataError),
    #[error("compressing the records: {0}")]
    Compress(std::io::Error),
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
    if bytes.len() < FILE_HEADER_SIZE
        || &bytes[..8] != MAGIC
        || get_u64(bytes, 8) != FILE_HEADER_SIZE as u64
    {
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
    let bitmap = &bytes[0x48..0x68];
    let bits: Vec<u32> = (0..bit::BITMAP_BITS)
        .filter(|b| bitmap[(b / 8) as usize] & (1 << (b % 8)) != 0)
        .collect();
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

/// Re-encodes an uncompressed snapshot with its data section packed into
/// COMPRESSED records (in parallel) and the COMPRESSED feature added;
/// everything else is kept byte for byte.
pub fn recompress(bytes: &[u8], level: i32) -> Result<PerfData<'_>, ReadError> {
    check_level(level)?;
    let file = parse(bytes)?;
    if file.features.iter().any(|(b, _)| *b == bit::COMPRESSED) {
        return Err(ReadError::AlreadyCompressed);
    }
    let intact = compress::intact_len(file.data);
    if intact != file.data.len() {
        return Err(ReadError::TornData {
            torn: (file.data.len() - intact) as u64,
        });
    }
    let packed =
        compress::pack_all(&compress::split_jobs(file.data), level).map_err(ReadError::Compress)?;
    let mmap_len = compress::MAX_RECORD_INPUT as u32;
    let ratio = packed
        .input_bytes
        .checked_div(packed.bytes.len() as u64)
        .unwrap_or(0);
    let compressed_body =
        features::compressed(level, u32::try_from(ratio).unwrap_or(u32::MAX), mmap_len);

    let mut feats: Vec<(u32, &[u8])> = file.features.clone();
    feats.push((bit::COMPRESSED, &compressed_body));
    feats.sort_by_key(|(b, _)| *b);
    let bits: Vec<u32> = feats.iter().map(|(b, _)| *b).collect();
    let bodies: Vec<&[u8]> = feats.iter().map(|(_, b)| *b).collect();

    let data_offset = file.before_data.len() as u64;
    let data_len = packed.bytes.len() as u64;
    let index_offset = data_offset + data_len;
    let (index, bodies_len) = feature_index(index_offset, &bodies);
    let header = file_header(file.attrs, (data_offset, data_len), &bits);

    let mut segments: Vec<Cow<'_, [u8]>> = vec![
        Cow::Owned(header.to_vec()),
        Cow::Borrowed(&file.before_data[FILE_HEADER_SIZE..]),
        Cow::Owned(packed.bytes),
        Cow::Owned(index),
    ];
    segments.extend(bodies.iter().map(|b| Cow::Owned(b.to_vec())));
    segments.retain(|s| !s.is_empty());
    let summary = DataSummary {
        file_bytes: index_offset + bits.len() as u64 * 16 + bodies_len,
        data_bytes: data_len,
        compression: Some(CompressionSummary {
            level,
            input_bytes: packed.input_bytes,
            output_bytes: data_len,
            mmap_len,
        }),
        ..Default::default()
    };
    Ok(PerfData { segments, summary })
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
