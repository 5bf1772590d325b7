//! Compressing a snapshot after it was written: the file re-encoded with
//! its data section packed into COMPRESSED records, everything else kept
//! byte for byte.

use std::borrow::Cow;

use crate::abi::get_u64;
use flightrec_perfdata::format::{
    FILE_HEADER_SIZE, bit, check_level, feature_bits, feature_index, file_header, is_perf_data,
};
use flightrec_perfdata::reader::parse;

pub use flightrec_perfdata::reader::ReadError;

use super::compress;
use super::features;
use super::perfdata::{CompressionSummary, DataSummary, PerfData};

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
    let feats = file
        .features
        .iter()
        .map(|(b, body)| (*b, Cow::Borrowed(*body)))
        .collect();
    Ok(assemble(
        Cow::Borrowed(file.before_data),
        file.attrs,
        feats,
        packed,
        level,
    ))
}

/// Largest header-to-data region or feature total [`recompress_file`]
/// reads into memory (this writer's are a few KiB).
const MAX_METADATA: u64 = 64 << 20;
/// Data read (and compressed in parallel) per step of [`recompress_file`].
const STREAM_BYTES: u64 = 32 << 20;

/// [`recompress`] reading `file` piece by piece: memory stays at about
/// 32 MiB plus the compressed output, whatever the file's size.
pub fn recompress_file(file: &std::fs::File, level: i32) -> Result<PerfData<'static>, ReadError> {
    use std::os::unix::fs::FileExt;

    check_level(level)?;
    let len = file.metadata().map_err(ReadError::Io)?.len();
    let read = |what: &'static str, offset: u64, size: u64| -> Result<Vec<u8>, ReadError> {
        let oob = || ReadError::OutOfBounds {
            what,
            offset,
            size,
            len,
        };
        if offset.checked_add(size).is_none_or(|end| end > len) {
            return Err(oob());
        }
        let mut buf = vec![0u8; usize::try_from(size).map_err(|_| oob())?];
        file.read_exact_at(&mut buf, offset)
            .map_err(ReadError::Io)?;
        Ok(buf)
    };
    if len < FILE_HEADER_SIZE as u64 {
        return Err(ReadError::NotPerfData);
    }
    let header = read("header", 0, FILE_HEADER_SIZE as u64)?;
    if !is_perf_data(&header) {
        return Err(ReadError::NotPerfData);
    }
    let attrs = (get_u64(&header, 0x18), get_u64(&header, 0x20));
    let (data_offset, data_size) = (get_u64(&header, 0x28), get_u64(&header, 0x30));
    let data_oob = ReadError::OutOfBounds {
        what: "data",
        offset: data_offset,
        size: data_size,
        len,
    };
    if data_offset < FILE_HEADER_SIZE as u64
        || attrs.0.saturating_add(attrs.1) > data_offset
        || data_offset
            .checked_add(data_size)
            .is_none_or(|end| end > len)
    {
        return Err(data_oob);
    }
    if data_offset > MAX_METADATA {
        return Err(ReadError::TooLarge {
            what: "header, ids and attrs",
            size: data_offset,
        });
    }
    let before_data = read("attrs", 0, data_offset)?;
    let bits = feature_bits(&header);
    if bits.contains(&bit::COMPRESSED) {
        return Err(ReadError::AlreadyCompressed);
    }
    let index = read(
        "feature index",
        data_offset + data_size,
        bits.len() as u64 * 16,
    )?;
    let mut feats = Vec::with_capacity(bits.len());
    let mut total = 0u64;
    for (i, b) in bits.into_iter().enumerate() {
        let (off, size) = (get_u64(&index, i * 16), get_u64(&index, i * 16 + 8));
        total = total.saturating_add(size);
        if total > MAX_METADATA {
            return Err(ReadError::TooLarge {
                what: "feature sections",
                size: total,
            });
        }
        feats.push((b, Cow::Owned(read("feature", off, size)?)));
    }

    let mut packed = compress::Packed::default();
    let mut buf: Vec<u8> = Vec::new();
    let mut pos = 0;
    while pos < data_size {
        let n = STREAM_BYTES.min(data_size - pos);
        buf.extend_from_slice(&read("data", data_offset + pos, n)?);
        pos += n;
        let intact = compress::intact_len(&buf);
        let rest = (buf.len() - intact) as u64;
        // Only a record cut by this step's end may be left over.
        if rest > u64::from(u16::MAX) || (pos == data_size && rest > 0) {
            return Err(ReadError::TornData { torn: rest });
        }
        let part = compress::pack_all(&compress::split_jobs(&buf[..intact]), level)
            .map_err(ReadError::Compress)?;
        packed.bytes.extend_from_slice(&part.bytes);
        packed.input_bytes += part.input_bytes;
        packed.largest_input = packed.largest_input.max(part.largest_input);
        buf.drain(..intact);
    }
    Ok(assemble(
        Cow::Owned(before_data),
        attrs,
        feats,
        packed,
        level,
    ))
}

/// The file around a packed data section: header, the bytes before the
/// data kept as they were, the data, the feature index and the features
/// with COMPRESSED added.
fn assemble<'a>(
    before_data: Cow<'a, [u8]>,
    attrs: (u64, u64),
    mut feats: Vec<(u32, Cow<'a, [u8]>)>,
    packed: compress::Packed,
    level: i32,
) -> PerfData<'a> {
    let mmap_len = compress::MAX_RECORD_INPUT as u32;
    let ratio = packed
        .input_bytes
        .checked_div(packed.bytes.len() as u64)
        .unwrap_or(0);
    let compressed_body =
        features::compressed(level, u32::try_from(ratio).unwrap_or(u32::MAX), mmap_len);
    feats.push((bit::COMPRESSED, Cow::Owned(compressed_body)));
    feats.sort_by_key(|(b, _)| *b);
    let bits: Vec<u32> = feats.iter().map(|(b, _)| *b).collect();

    let data_offset = before_data.len() as u64;
    let data_len = packed.bytes.len() as u64;
    let index_offset = data_offset + data_len;
    let (index, bodies_len) = feature_index(
        index_offset,
        &feats.iter().map(|(_, b)| b).collect::<Vec<_>>(),
    );
    let header = file_header(attrs, (data_offset, data_len), &bits);

    let rest = match before_data {
        Cow::Borrowed(b) => Cow::Borrowed(&b[FILE_HEADER_SIZE..]),
        Cow::Owned(mut b) => {
            b.drain(..FILE_HEADER_SIZE);
            Cow::Owned(b)
        }
    };
    let mut segments: Vec<Cow<'a, [u8]>> = vec![
        Cow::Owned(header.to_vec()),
        rest,
        Cow::Owned(packed.bytes),
        Cow::Owned(index),
    ];
    segments.extend(feats.into_iter().map(|(_, b)| b));
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
    PerfData { segments, summary }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::snapshot::perfdata::{WriteOptions, write_perf_data};
    use crate::snapshot::testing::{
        SCHED_SWITCH_FORMAT, SyntheticSpec, synthetic_capture, synthetic_host,
    };
    use flightrec_perfdata::reader::{build_id_table, decompress};

    fn small_file() -> Vec<u8> {
        let capture = synthetic_capture(&SyntheticSpec {
            samples_per_cpu: 3,
            ..Default::default()
        });
        write_perf_data(
            &capture,
            &synthetic_host(SCHED_SWITCH_FORMAT),
            &WriteOptions::default(),
        )
        .unwrap()
        .to_vec()
    }

    #[test]
    fn decompressing_gives_back_the_plain_file_byte_for_byte() {
        let capture = synthetic_capture(&SyntheticSpec {
            samples_per_cpu: 5_000,
            ..Default::default()
        });
        let host = synthetic_host(SCHED_SWITCH_FORMAT);
        let plain = write_perf_data(&capture, &host, &WriteOptions::default())
            .unwrap()
            .to_vec();
        let opts = WriteOptions {
            compression: Some(3),
            ..Default::default()
        };
        let packed = write_perf_data(&capture, &host, &opts).unwrap().to_vec();
        assert!(packed.len() < plain.len() / 2);
        assert_eq!(decompress(&packed, u64::MAX).unwrap(), plain);
        let again = recompress(&plain, 5).unwrap().to_vec();
        assert_eq!(decompress(&again, u64::MAX).unwrap(), plain);
        assert!(matches!(
            decompress(&plain, u64::MAX),
            Err(ReadError::NotCompressed)
        ));
        assert!(matches!(
            decompress(&packed, 1000),
            Err(ReadError::DecompressedTooLarge { limit: 1000 })
        ));
        // The build-id table reads back from either.
        let table = build_id_table(&packed).unwrap();
        assert_eq!(table, build_id_table(&plain).unwrap());
        assert_eq!(table[0].filename, "[kernel.kallsyms]");
        assert_eq!(table[0].build_id, (1..=20).collect::<Vec<u8>>());
    }

    #[test]
    fn recompressing_from_a_file_matches_recompressing_in_memory() {
        let capture = synthetic_capture(&SyntheticSpec {
            samples_per_cpu: 2_000,
            ..Default::default()
        });
        let bytes = write_perf_data(
            &capture,
            &synthetic_host(SCHED_SWITCH_FORMAT),
            &WriteOptions::default(),
        )
        .unwrap()
        .to_vec();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, &bytes).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let from_file = recompress_file(&file, 3).unwrap().to_vec();
        assert_eq!(from_file, recompress(&bytes, 3).unwrap().to_vec());
        let mut torn = bytes.clone();
        // A data record shorter than its own header.
        let data_offset = get_u64(&bytes, 0x28) as usize;
        torn[data_offset + 6..data_offset + 8].copy_from_slice(&4u16.to_le_bytes());
        std::fs::write(&path, &torn).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        assert!(matches!(
            recompress_file(&file, 3),
            Err(ReadError::TornData { .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Corrupting any bytes of a written file never panics the reader
        /// or the recompression; whatever recompresses stays parseable.
        #[test]
        fn damaged_files_are_errors_not_panics(
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
            cut in any::<usize>(),
        ) {
            let mut bytes = small_file();
            let len = bytes.len();
            for (at, v) in edits {
                bytes[at % len] = v;
            }
            bytes.truncate(cut % (len + 1));
            let _ = parse(&bytes);
            if let Ok(data) = recompress(&bytes, 1) {
                let out = data.to_vec();
                prop_assert_eq!(out.len() as u64, data.len());
                prop_assert!(parse(&out).is_ok());
            }
        }
    }
}
