//! The kernel's `write_backward` overwrite ring: find the intact records
//! between `data_head` and the oldest record not yet overwritten, then copy
//! them out.
//!
//! The kernel writes each record at `head -= size`, so the newest record
//! starts at `data_head & mask` and older ones follow at higher addresses,
//! wrapping at the end of the data area. Sizes live only in the
//! headers, so the oldest intact record is found by walking forward from
//! the newest one, as perf's `overwrite_rb_find_range` does, but checking
//! every header perf trusts blindly.
//!
//! Each header is read once into a local before it is checked and used, so
//! the walk stays in bounds even over bytes that change while it runs.

use super::wrap;
use crate::abi::{HEADER_SIZE, RecordHeader};
use flightrec_perfdata::records::{Corruption, CorruptionReason, check_header};

/// The intact records of a backward ring: `len` bytes starting at
/// `head & mask`, newest record first, possibly wrapping at the end of the
/// data area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRange {
    /// `data_head` as given to the walk.
    pub head: u64,
    /// Bytes of intact records from `head` toward older ones.
    pub len: u64,
    /// Number of records in those bytes.
    pub records: u64,
    /// The kernel has written more than the data area holds, so older records
    /// were overwritten: the range is the recent past, not everything.
    pub wrapped: bool,
    /// Why the walk stopped where it did.
    pub end: RangeEnd,
    /// The header the walk could not trust, when `end` is [`RangeEnd::Corrupt`].
    pub corruption: Option<Corruption>,
}

impl RecordRange {
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// How a walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeEnd {
    /// Reached the first record the kernel wrote: the ring never wrapped.
    Start,
    /// The records fill the data area exactly.
    Full,
    /// The next older record was partly overwritten by the newest ones and
    /// was dropped.
    Torn,
    /// A header of size 0: bytes the kernel has not written (data pages
    /// start zeroed).
    ZeroSize,
    /// The next older record reaches past `trusted_len` and was dropped.
    TrustLimit,
    /// A header failed validation; see [`RecordRange::corruption`].
    Corrupt,
}

/// Finds the intact records of a backward ring whose data area is `data`
/// (a power of two of at least 8 bytes) and whose `data_head` is `head`.
pub fn find_range(data: &[u8], head: u64) -> RecordRange {
    find_range_limited(data, head, u64::MAX)
}

/// Like [`find_range`], but uses only the newest `trusted_len` bytes from
/// `head`: a writer that was already past the pause check when the ring was
/// paused finishes later and overwrites the oldest end of the window, so the
/// caller trusts `data_size - d` bytes when `data_head` moved by `d`.
/// Records reaching past `trusted_len` are dropped.
pub fn find_range_limited(data: &[u8], head: u64, trusted_len: u64) -> RecordRange {
    let data_size = data.len() as u64;
    let written = 0u64.wrapping_sub(head);
    let mut range = RecordRange {
        head,
        len: 0,
        records: 0,
        wrapped: written > data_size,
        end: RangeEnd::Start,
        corruption: None,
    };
    if !data_size.is_power_of_two() || data_size < HEADER_SIZE as u64 {
        range.end = RangeEnd::Corrupt;
        range.corruption = Some(Corruption {
            offset: 0,
            reason: CorruptionReason::DataSize { len: data_size },
        });
        return range;
    }
    let mask = data_size - 1;

    // How far the walk may go, and what reaching or overshooting that
    // bound means. Overshooting the first byte the kernel wrote cannot
    // happen in a sound ring, so there it is corruption.
    let (bound, at_bound, past_bound) = if trusted_len < written.min(data_size) {
        (trusted_len, RangeEnd::TrustLimit, RangeEnd::TrustLimit)
    } else if range.wrapped {
        (data_size, RangeEnd::Full, RangeEnd::Torn)
    } else {
        (written, RangeEnd::Start, RangeEnd::Corrupt)
    };

    let mut pos = 0u64;
    range.end = loop {
        let remaining = bound - pos;
        if remaining == 0 {
            break at_bound;
        }
        // A header not all inside the usable bytes (only possible with an
        // unaligned head or trusted_len) is a record that does not fit.
        let size = if remaining < HEADER_SIZE as u64 {
            HEADER_SIZE as u64
        } else {
            let header = header_at(data, (head.wrapping_add(pos) & mask) as usize);
            if header.size == 0 {
                break RangeEnd::ZeroSize;
            }
            if let Err(reason) = check_header(&header, data_size) {
                range.corruption = Some(Corruption {
                    offset: pos,
                    reason,
                });
                break RangeEnd::Corrupt;
            }
            u64::from(header.size)
        };
        if size > remaining {
            if past_bound == RangeEnd::Corrupt {
                range.corruption = Some(Corruption {
                    offset: pos,
                    reason: CorruptionReason::Truncated { size, remaining },
                });
            }
            break past_bound;
        }
        pos += size;
        range.records += 1;
    };
    range.len = pos;
    range
}

/// Appends the bytes of `range` to `out`, linearized newest record first:
/// two pieces when the range wraps at the end of the data area. A range
/// that does not fit `data` is clamped rather than trusted.
pub fn copy_range(data: &[u8], range: &RecordRange, out: &mut Vec<u8>) {
    if data.is_empty() {
        return;
    }
    let data_size = data.len() as u64;
    let start = (range.head % data_size) as usize;
    let len = range.len.min(data_size) as usize;
    wrap::append(data, start, len, out);
}

/// The header at `at`, read with wrap handling: with an unaligned head a
/// header can be split across the end of the data area.
fn header_at(data: &[u8], at: usize) -> RecordHeader {
    let mut bytes = [0u8; HEADER_SIZE];
    wrap::read(data, at, &mut bytes);
    RecordHeader::parse(&bytes).expect("HEADER_SIZE bytes always hold a header")
}

#[cfg(test)]
mod tests;
