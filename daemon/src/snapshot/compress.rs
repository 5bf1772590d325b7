//! zstd packing of records into PERF_RECORD_COMPRESSED (type 81).
//!
//! Each compressed record holds one independent zstd frame of whole records,
//! so groups can be compressed in parallel and each record decompresses to
//! at most [`MAX_RECORD_INPUT`] bytes: the COMPRESSED feature's `mmap_len`,
//! the buffer perf 6.1 decompresses one record into (data past it is
//! silently dropped, hence the cap).

use rayon::prelude::*;

use crate::abi::{HEADER_SIZE, RecordHeader, record_type};
use crate::ring;

/// Largest uncompressed input of one compressed record (= `mmap_len`).
pub const MAX_RECORD_INPUT: usize = 1 << 20;
/// Largest zstd payload of one record (`header.size` is a u16).
const MAX_PAYLOAD: usize = u16::MAX as usize - HEADER_SIZE;
/// First guess of the input that compresses into one record.
const FIRST_GROUP: usize = 256 << 10;
/// Input per parallel job when one big buffer is split.
pub const JOB_BYTES: usize = 8 << 20;

/// The outcome of packing one buffer of records.
#[derive(Debug, Default)]
pub struct Packed {
    /// COMPRESSED records (and any record too incompressible to pack,
    /// verbatim).
    pub bytes: Vec<u8>,
    pub input_bytes: u64,
    /// Largest uncompressed payload of any compressed record written.
    pub largest_input: usize,
}

/// Length of the longest prefix of `data` made of whole, valid records
/// (as [`ring::records`] validates them).
pub fn intact_len(data: &[u8]) -> usize {
    ring::records(data).intact_len()
}

/// End of the longest run of whole records from `start` no longer than
/// `target` bytes (at least one record). `data[start..]` must be whole
/// valid records ([`intact_len`] of it is its length), so every call moves
/// past `start` unless `start` is the end.
fn group_end(data: &[u8], start: usize, target: usize) -> usize {
    let mut end = start;
    for (_, record) in ring::records(&data[start..]).map_while(Result::ok) {
        if end > start && end + record.len() - start > target {
            break;
        }
        end += record.len();
    }
    end
}

/// Packs `data` (whole records; a torn tail is dropped) at zstd `level`.
pub fn pack(data: &[u8], level: i32) -> std::io::Result<Packed> {
    let data = &data[..intact_len(data)];
    let mut compressor = zstd::bulk::Compressor::new(level)?;
    let mut out = Packed {
        bytes: Vec::with_capacity(data.len() / 4 + 64),
        input_bytes: data.len() as u64,
        largest_input: 0,
    };
    let mut frame = Vec::with_capacity(zstd::zstd_safe::compress_bound(MAX_RECORD_INPUT));
    let mut target = FIRST_GROUP;
    let mut pos = 0;
    while pos < data.len() {
        let end = group_end(data, pos, target);
        let input = &data[pos..end];
        frame.clear();
        compressor.compress_to_buffer(input, &mut frame)?;
        if frame.len() <= MAX_PAYLOAD {
            let header = RecordHeader {
                type_: record_type::COMPRESSED,
                misc: 0,
                size: (frame.len() + HEADER_SIZE) as u16,
            };
            out.bytes.extend_from_slice(&header.to_bytes());
            out.bytes.extend_from_slice(&frame);
            out.largest_input = out.largest_input.max(input.len());
            // Aim the next group at ~90% of a record's payload.
            let next = input.len() * (MAX_PAYLOAD / 10 * 9) / frame.len().max(1);
            target = next.clamp(4096, MAX_RECORD_INPUT);
            pos = end;
        } else if group_end(data, pos, 0) < end {
            target = input.len() / 2;
        } else {
            // One record that does not shrink: keep it as it is.
            out.bytes.extend_from_slice(input);
            pos = end;
        }
    }
    Ok(out)
}

/// Packs several buffers in parallel, each on its own; the results are
/// concatenated in order.
pub fn pack_all(parts: &[&[u8]], level: i32) -> std::io::Result<Packed> {
    let packed: Vec<Packed> = parts
        .par_iter()
        .map(|p| pack(p, level))
        .collect::<std::io::Result<_>>()?;
    let total = packed.iter().map(|p| p.bytes.len()).sum();
    let mut out = Packed {
        bytes: Vec::with_capacity(total),
        ..Default::default()
    };
    for p in packed {
        out.bytes.extend_from_slice(&p.bytes);
        out.input_bytes += p.input_bytes;
        out.largest_input = out.largest_input.max(p.largest_input);
    }
    Ok(out)
}

/// Splits whole records into jobs of about [`JOB_BYTES`] for [`pack_all`].
pub fn split_jobs(data: &[u8]) -> Vec<&[u8]> {
    let data = &data[..intact_len(data)];
    let mut jobs = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let end = group_end(data, pos, JOB_BYTES);
        jobs.push(&data[pos..end]);
        pos = end;
    }
    jobs
}

/// The records packed in `bytes` (COMPRESSED records unpacked, others as
/// they are) and the largest uncompressed payload of one record; tests only.
#[cfg(test)]
pub(crate) fn unpack(bytes: &[u8]) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let mut largest = 0;
    for record in flightrec_perfdata::records::file_records(bytes) {
        let (h, r) = record.unwrap();
        if h.type_ == record_type::COMPRESSED {
            let d = zstd::decode_all(&r[HEADER_SIZE..]).unwrap();
            largest = largest.max(d.len());
            out.extend_from_slice(&d);
        } else {
            out.extend_from_slice(r);
        }
    }
    (out, largest)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::abi::test_records::{kernel_record, record, suspect_tail};

    #[test]
    fn packs_large_compressible_data_under_the_cap_and_round_trips() {
        let mut data = Vec::new();
        for i in 0..100_000u32 {
            data.extend_from_slice(&record(9, 48, (i % 7) as u8));
        }
        let p = pack(&data, 3).unwrap();
        assert!(p.bytes.len() < data.len() / 10);
        assert!(p.largest_input <= MAX_RECORD_INPUT);
        let (back, largest) = unpack(&p.bytes);
        assert_eq!(back, data);
        assert_eq!(largest, p.largest_input);
    }

    #[test]
    fn incompressible_records_fit_or_pass_through() {
        let mut data = Vec::new();
        let mut x = 0x1234_5678_u64;
        for _ in 0..40 {
            let mut r = record(9, 65528, 0);
            for b in &mut r[8..] {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            data.extend_from_slice(&r);
        }
        let p = pack(&data, 1).unwrap();
        let (back, _) = unpack(&p.bytes);
        assert_eq!(back, data);
    }

    #[test]
    fn torn_tail_is_dropped() {
        let mut data = record(9, 64, 1);
        data.extend_from_slice(&record(9, 64, 2)[..30]);
        assert_eq!(intact_len(&data), 64);
        let (back, _) = unpack(&pack(&data, 1).unwrap().bytes);
        assert_eq!(back.len(), 64);
        let zero_size = [0u8; 16];
        assert_eq!(intact_len(&zero_size), 0);
    }

    #[test]
    fn jobs_cover_everything_in_order() {
        let mut data = Vec::new();
        for i in 0..300_000u32 {
            data.extend_from_slice(&record(9, 64, i as u8));
        }
        let jobs = split_jobs(&data);
        assert!(jobs.len() >= 2);
        assert_eq!(jobs.concat(), data);
        let p = pack_all(&jobs, 1).unwrap();
        assert_eq!(unpack(&p.bytes).0, data);
    }

    #[test]
    fn records_the_walker_rejects_end_the_intact_prefix() {
        let good = record(record_type::SAMPLE, 16, 1);
        for bad in [record(0, 8, 0), record(record_type::SAMPLE, 12, 0)] {
            let data = [good.clone(), bad, good.clone()].concat();
            assert_eq!(intact_len(&data), good.len());
            assert_eq!(split_jobs(&data), [&good[..]]);
        }
    }

    proptest! {
        /// intact_len, group_end and split_jobs see the records the walker
        /// yields: same ends, same boundaries.
        #[test]
        fn derived_helpers_agree_with_the_walker(
            good in prop::collection::vec(kernel_record(512), 0..40),
            tail in suspect_tail(),
            target in 0usize..4096,
        ) {
            let data = [good.concat(), tail].concat();
            let mut boundaries = vec![0];
            for (_, r) in ring::records(&data).map_while(Result::ok) {
                boundaries.push(boundaries.last().unwrap() + r.len());
            }
            let intact = *boundaries.last().unwrap();
            prop_assert!(intact >= good.concat().len());
            prop_assert_eq!(intact_len(&data), intact);

            let whole = &data[..intact];
            for (i, &start) in boundaries.iter().enumerate().take(boundaries.len() - 1) {
                let end = group_end(whole, start, target);
                let at = boundaries.iter().position(|&b| b == end);
                prop_assert!(at.is_some_and(|at| at > i), "{start}..{end} not a record run");
                // No longer than target unless one record; no room for the next.
                prop_assert!(end - start <= target || end == boundaries[i + 1]);
                if let Some(&next) = boundaries.get(at.unwrap() + 1) {
                    prop_assert!(next - start > target);
                }
            }

            let jobs = split_jobs(&data);
            prop_assert_eq!(jobs.concat(), whole);
            let mut pos = 0;
            for job in jobs {
                pos += job.len();
                prop_assert!(boundaries.contains(&pos));
            }
        }
    }
}
