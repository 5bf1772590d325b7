//! Following a live `write_backward` overwrite ring: the records the kernel
//! published since the last look, for a reader that streams them (the
//! history) while the ring keeps its look-back for captures.
//!
//! The reader keeps the `data_head` of its last look. At the next one it
//! reads `data_head` again (the newest record starts there), copies the
//! bytes from there toward the last look's head (at most the data area),
//! re-reads `data_head`, and calls [`follow`]: only the bytes the kernel
//! cannot have reached meanwhile are trusted, so a reader that fell more
//! than a ring behind gets the newest records and a count of the bytes it
//! lost, never a torn one.

use crate::abi::{HEADER_SIZE, RecordHeader};
use flightrec_perfdata::records::check_header;

/// What [`follow`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Followed {
    /// Whole records of the copy, newest first: offset and length.
    pub records: Vec<(usize, usize)>,
    /// Bytes published since the last look that are not in `records`:
    /// overwritten before they were read, or behind a header that failed
    /// its checks.
    pub lost_bytes: u64,
    /// A header failed its checks (the rest of the copy was not walked).
    pub corrupt: bool,
}

/// Walks `copy`: the ring's bytes from the head of this look toward older
/// records, `min(published, data size)` of them, where `published` is the
/// bytes the kernel published since the last look (its head a record
/// boundary). Of the copy only the first `intact` bytes are proven not
/// overwritten while they were copied (data size minus what the kernel
/// published between the two reads of `data_head`).
pub fn follow(copy: &[u8], published: u64, intact: usize) -> Followed {
    let trusted = copy.len().min(intact);
    let mut out = Followed::default();
    let mut at = 0usize;
    while at < copy.len() {
        if at + HEADER_SIZE > trusted {
            break;
        }
        let Some(header) = RecordHeader::parse(&copy[at..at + HEADER_SIZE]) else {
            break;
        };
        if check_header(&header, u64::MAX).is_err() {
            out.corrupt = true;
            break;
        }
        let size = usize::from(header.size);
        if at + size > trusted {
            // Overwritten or torn where it ends, not corrupt.
            break;
        }
        out.records.push((at, size));
        at += size;
    }
    out.lost_bytes = published.saturating_sub(at as u64);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::record_type;

    /// A record of `size` bytes whose body is filled with `fill`.
    fn record(size: u16, fill: u8) -> Vec<u8> {
        let mut r = vec![fill; usize::from(size)];
        r[..4].copy_from_slice(&record_type::SAMPLE.to_le_bytes());
        r[4..6].copy_from_slice(&0u16.to_le_bytes());
        r[6..8].copy_from_slice(&size.to_le_bytes());
        r
    }

    #[test]
    fn everything_published_since_the_last_look_is_followed_newest_first() {
        let mut copy = record(16, 1);
        copy.extend(record(24, 2));
        copy.extend(record(8, 3));
        let f = follow(&copy, copy.len() as u64, usize::MAX);
        assert_eq!(f.records, vec![(0, 16), (16, 24), (40, 8)]);
        assert_eq!(f.lost_bytes, 0);
        assert!(!f.corrupt);
    }

    #[test]
    fn a_reader_more_than_a_ring_behind_gets_the_newest_and_counts_the_rest() {
        // A 64-byte ring: 100 bytes were published since the last look,
        // the copy holds the newest 64, and its last record reaches past
        // the copy's end (the kernel overwrote its start): it is dropped.
        let mut copy = record(24, 1);
        copy.extend(record(24, 2));
        copy.extend(&record(24, 3)[..16]);
        let f = follow(&copy, 100, usize::MAX);
        assert_eq!(f.records, vec![(0, 24), (24, 24)]);
        assert_eq!(f.lost_bytes, 52);
        assert!(!f.corrupt);
    }

    #[test]
    fn bytes_the_kernel_reached_during_the_copy_are_not_trusted() {
        let mut copy = record(16, 1);
        copy.extend(record(16, 2));
        copy.extend(record(16, 3));
        // 20 bytes published during the copy of a 48-byte ring: the oldest
        // 20 bytes of the copy may be new records' bytes.
        let f = follow(&copy, 48, 28);
        assert_eq!(f.records, vec![(0, 16)]);
        assert_eq!(f.lost_bytes, 32);
        assert!(!f.corrupt);
    }

    #[test]
    fn a_bad_header_ends_the_walk_and_is_said() {
        let mut copy = record(16, 1);
        let mut bad = record(16, 2);
        bad[6..8].copy_from_slice(&12u16.to_le_bytes());
        copy.extend(bad);
        let f = follow(&copy, 32, usize::MAX);
        assert_eq!(f.records, vec![(0, 16)]);
        assert_eq!(f.lost_bytes, 16);
        assert!(f.corrupt);
        // Zeroed bytes (a header of size 0) are corrupt too: the last
        // look's head was a record boundary.
        let mut copy = record(16, 1);
        copy.extend([0u8; 16]);
        assert!(follow(&copy, 32, usize::MAX).corrupt);
    }

    #[test]
    fn nothing_published_is_nothing_followed() {
        assert_eq!(follow(&[], 0, usize::MAX), Followed::default());
    }
}
