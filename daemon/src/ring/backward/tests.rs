use super::*;
use crate::abi::record_type;
use crate::abi::test_records::{kernel_record, record};
use crate::ring::records;
use proptest::prelude::*;

/// The kernel's backward writer (kernel/events/ring_buffer.c,
/// `__perf_output_begin` with `backward`): reserve by `head -= size`, write
/// the record at `head & mask` going up, wrapping; data pages start zeroed
/// and, mapped read-only, the ring overwrites regardless of the tail.
struct KernelRing {
    data: Vec<u8>,
    head: u64,
}

impl KernelRing {
    fn new(data_size: usize) -> Self {
        Self {
            data: vec![0; data_size],
            head: 0,
        }
    }

    fn write(&mut self, record: &[u8]) {
        self.head = self.head.wrapping_sub(record.len() as u64);
        let mask = self.data.len() as u64 - 1;
        for (i, b) in record.iter().enumerate() {
            let at = self.head.wrapping_add(i as u64) & mask;
            self.data[at as usize] = *b;
        }
    }

    fn range(&self) -> RecordRange {
        find_range(&self.data, self.head)
    }

    fn copy(&self, range: &RecordRange) -> Vec<u8> {
        let mut out = Vec::new();
        copy_range(&self.data, range, &mut out);
        out
    }
}

fn sample(size: u16, fill: u8) -> Vec<u8> {
    record(record_type::SAMPLE, size, fill)
}

#[test]
fn unwrapped_ring_gives_head_to_zero_newest_first() {
    let mut ring = KernelRing::new(256);
    let (a, b, c) = (
        sample(24, 1),
        record(record_type::COMM, 32, 2),
        sample(16, 3),
    );
    for r in [&a, &b, &c] {
        ring.write(r);
    }
    let range = ring.range();
    assert_eq!(range.head, 0u64.wrapping_sub(72));
    assert_eq!(range.len, 72);
    assert_eq!(range.records, 3);
    assert!(!range.wrapped);
    assert_eq!(range.end, RangeEnd::Start);
    assert_eq!(range.corruption, None);
    assert_eq!(ring.copy(&range), [c, b, a].concat());
}

#[test]
fn empty_ring_gives_empty_range() {
    let range = find_range(&[0; 64], 0);
    assert!(range.is_empty());
    assert_eq!((range.records, range.end), (0, RangeEnd::Start));
}

#[test]
fn exactly_full_ring_keeps_every_record() {
    let mut ring = KernelRing::new(64);
    let records: Vec<_> = (0..4).map(|i| sample(16, i)).collect();
    records.iter().for_each(|r| ring.write(r));
    let range = ring.range();
    assert_eq!((range.len, range.records, range.wrapped), (64, 4, false));
    assert_eq!(range.end, RangeEnd::Start);

    // After a wrap, newest records that fill the area exactly are all kept.
    let (x, y) = (sample(32, 7), sample(32, 8));
    ring.write(&x);
    ring.write(&y);
    let range = ring.range();
    assert_eq!((range.len, range.records, range.wrapped), (64, 2, true));
    assert_eq!(range.end, RangeEnd::Full);
    assert_eq!(ring.copy(&range), [y, x].concat());
}

#[test]
fn overshoot_drops_the_torn_oldest_record() {
    let mut ring = KernelRing::new(64);
    let (a, b, c) = (sample(24, 1), sample(24, 2), sample(24, 3));
    for r in [&a, &b, &c] {
        ring.write(r);
    }
    // c wrapped over the last 8 bytes of a: a's header is intact, its tail is not.
    assert_eq!(&ring.data[40..48], &a[..8]);
    assert_ne!(&ring.data[56..64], &a[16..24]);
    let range = ring.range();
    assert_eq!((range.len, range.records, range.wrapped), (48, 2, true));
    assert_eq!(range.end, RangeEnd::Torn);
    assert_eq!(range.corruption, None);
    assert_eq!(ring.copy(&range), [c, b].concat());
}

#[test]
fn zero_size_header_ends_the_walk() {
    // A wrapped head over zeroed bytes: reserved but never written.
    let mut data = vec![0u8; 64];
    let a = sample(16, 5);
    data[..16].copy_from_slice(&a);
    let range = find_range(&data, 0u64.wrapping_sub(128));
    assert!(range.wrapped);
    assert_eq!(
        (range.len, range.records, range.end),
        (16, 1, RangeEnd::ZeroSize)
    );
    assert_eq!(range.corruption, None);

    // Same in a ring that never wrapped.
    let range = find_range(&data, 0u64.wrapping_sub(48));
    assert!(!range.wrapped);
    assert_eq!(
        (range.len, range.records, range.end),
        (0, 0, RangeEnd::ZeroSize)
    );
}

#[test]
fn header_straddling_the_wrap_is_read_whole() {
    // Only an unaligned head splits a header; the walk must not care.
    let mut ring = KernelRing::new(64);
    ring.head = 0u64.wrapping_sub(4);
    let records: Vec<_> = (0..4).map(|i| sample(16, 10 + i)).collect();
    records.iter().for_each(|r| ring.write(r));
    assert_eq!(ring.head & 63, 60);
    let range = ring.range();
    assert_eq!(
        (range.len, range.records, range.end),
        (64, 4, RangeEnd::Full)
    );
    let newest_first: Vec<_> = records.iter().rev().cloned().collect();
    assert_eq!(ring.copy(&range), newest_first.concat());
}

#[test]
fn record_straddling_the_wrap_is_copied_in_two_pieces() {
    let (a, b) = (sample(16, 1), sample(40, 2));
    let mut ring = KernelRing::new(64);
    ring.write(&a);
    ring.write(&sample(16, 3));
    ring.write(&b); // b at -72 & 63 = 56: 8 bytes at the end, 32 at the start
    assert_eq!(ring.head & 63, 56);
    assert_eq!(&ring.data[56..64], &b[..8]);
    assert_eq!(&ring.data[..32], &b[8..]);
    let range = ring.range();
    assert_eq!(
        (range.len, range.records, range.end),
        (56, 2, RangeEnd::Torn)
    );
    assert_eq!(ring.copy(&range), [b, sample(16, 3)].concat());
}

#[test]
fn each_invalid_header_is_reported_where_it_is() {
    let good = sample(16, 1);
    let cases = [
        (sample(4, 0), CorruptionReason::SizeTooSmall { size: 4 }),
        (sample(20, 0), CorruptionReason::SizeUnaligned { size: 20 }),
        (
            sample(128, 0)[..8].to_vec(),
            CorruptionReason::SizeTooLarge {
                size: 128,
                limit: 64,
            },
        ),
        (record(0, 8, 0), CorruptionReason::UnknownType { type_: 0 }),
        (
            record(22, 8, 0),
            CorruptionReason::UnknownType { type_: 22 },
        ),
        (
            record(record_type::FINISHED_ROUND, 8, 0),
            CorruptionReason::UnknownType { type_: 68 },
        ),
    ];
    for (bad, reason) in cases {
        let mut data = vec![0u8; 64];
        data[..16].copy_from_slice(&good);
        data[16..16 + bad.len()].copy_from_slice(&bad);
        for head in [0u64.wrapping_sub(64), 0u64.wrapping_sub(1 << 20)] {
            let range = find_range(&data, head);
            assert_eq!((range.len, range.records), (16, 1), "{reason}");
            assert_eq!(range.end, RangeEnd::Corrupt);
            assert_eq!(range.corruption, Some(Corruption { offset: 16, reason }));
        }
    }
}

#[test]
fn record_reaching_past_the_first_written_byte_is_corrupt() {
    let mut ring = KernelRing::new(64);
    ring.write(&sample(16, 1));
    ring.write(&sample(16, 2));
    // Claim the older record is 24 bytes: it would run past offset 0.
    let at = (ring.head & 63) as usize + 16;
    ring.data[at + 6] = 24;
    let range = ring.range();
    assert_eq!(
        (range.len, range.records, range.end),
        (16, 1, RangeEnd::Corrupt)
    );
    let reason = CorruptionReason::Truncated {
        size: 24,
        remaining: 16,
    };
    assert_eq!(range.corruption, Some(Corruption { offset: 16, reason }));
}

#[test]
fn data_area_must_be_a_power_of_two_of_eight_or_more() {
    for len in [0usize, 4, 24, 48] {
        let range = find_range(&vec![0; len], 0u64.wrapping_sub(8));
        assert_eq!((range.len, range.end), (0, RangeEnd::Corrupt));
        let reason = CorruptionReason::DataSize { len: len as u64 };
        assert_eq!(range.corruption, Some(Corruption { offset: 0, reason }));
    }
}

#[test]
fn trusted_len_drops_records_reaching_past_it() {
    let mut ring = KernelRing::new(64);
    let records: Vec<_> = (0..6).map(|i| sample(16, i)).collect();
    records.iter().for_each(|r| ring.write(r));
    let cases = [
        (64, 64, 4, RangeEnd::Full),
        (48, 48, 3, RangeEnd::TrustLimit),
        (47, 32, 2, RangeEnd::TrustLimit),
        (20, 16, 1, RangeEnd::TrustLimit),
        (7, 0, 0, RangeEnd::TrustLimit),
        (0, 0, 0, RangeEnd::TrustLimit),
        (1000, 64, 4, RangeEnd::Full),
    ];
    for (trusted, len, n, end) in cases {
        let range = find_range_limited(&ring.data, ring.head, trusted);
        assert_eq!(
            (range.len, range.records, range.end),
            (len, n, end),
            "{trusted}"
        );
        assert_eq!(range.corruption, None);
        let newest: Vec<_> = records.iter().rev().take(n as usize).cloned().collect();
        assert_eq!(ring.copy(&range), newest.concat());
    }
    // Not wrapped: the written bytes bound the walk before trusted_len does.
    let mut ring = KernelRing::new(64);
    ring.write(&sample(16, 1));
    ring.write(&sample(16, 2));
    let range = find_range_limited(&ring.data, ring.head, 24);
    assert_eq!(
        (range.len, range.records, range.end),
        (16, 1, RangeEnd::TrustLimit)
    );
    let range = find_range_limited(&ring.data, ring.head, 32);
    assert_eq!(
        (range.len, range.records, range.end),
        (32, 2, RangeEnd::Start)
    );
}

#[test]
fn racing_writer_cannot_tear_the_trusted_window() {
    let mut ring = KernelRing::new(64);
    let records: Vec<_> = (0..5).map(|i| sample(16, i)).collect();
    records.iter().for_each(|r| ring.write(r));
    let head = ring.head;
    // A writer past the pause check lands 24 bytes after head was read.
    ring.write(&sample(24, 0xee));
    let d = head - ring.head;
    let range = find_range_limited(&ring.data, head, 64 - d);
    assert_eq!(
        (range.len, range.records, range.end),
        (32, 2, RangeEnd::TrustLimit)
    );
    let newest: Vec<_> = records.iter().rev().take(2).cloned().collect();
    assert_eq!(ring.copy(&range), newest.concat());
}

/// A ring of 2^5..2^11 bytes and up to 80 records that fit in it.
fn ring_and_records() -> impl Strategy<Value = (usize, Vec<Vec<u8>>)> {
    (5u32..=11).prop_flat_map(|shift| {
        let size = 1usize << shift;
        let max = size.min(256) as u16;
        (Just(size), prop::collection::vec(kernel_record(max), 0..80))
    })
}

/// Expected walk: newest first, as many whole records as fit in `limit`.
fn newest_fitting(written: &[Vec<u8>], limit: u64) -> Vec<Vec<u8>> {
    let mut total = 0u64;
    let mut kept = Vec::new();
    for r in written.iter().rev() {
        total += r.len() as u64;
        if total > limit {
            break;
        }
        kept.push(r.clone());
    }
    kept
}

/// Expected end of a walk over `total` written bytes in a ring of `size`.
fn expected_end(total: u64, size: u64, trusted: u64, kept: &[Vec<u8>]) -> RangeEnd {
    let kept: u64 = kept.iter().map(|r| r.len() as u64).sum();
    if trusted < total.min(size) {
        RangeEnd::TrustLimit
    } else if total <= size {
        RangeEnd::Start
    } else if kept == size {
        RangeEnd::Full
    } else {
        RangeEnd::Torn
    }
}

fn check_walk(ring: &KernelRing, range: &RecordRange, expected: &[Vec<u8>]) {
    let bytes = ring.copy(range);
    assert_eq!(range.records, expected.len() as u64);
    assert_eq!(bytes, expected.concat());
    let parsed: Vec<_> = records(&bytes).map(|r| r.unwrap().1.to_vec()).collect();
    assert_eq!(parsed, expected);
    assert_eq!(range.corruption, None);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn walk_returns_exactly_the_newest_records_that_fit(
        (size, written) in ring_and_records(),
    ) {
        let mut ring = KernelRing::new(size);
        written.iter().for_each(|r| ring.write(r));
        let total: u64 = written.iter().map(|r| r.len() as u64).sum();
        let range = ring.range();
        prop_assert_eq!(range.wrapped, total > size as u64);
        let expected = newest_fitting(&written, size as u64);
        prop_assert_eq!(range.end, expected_end(total, size as u64, u64::MAX, &expected));
        check_walk(&ring, &range, &expected);
    }

    #[test]
    fn limited_walk_keeps_the_newest_records_within_trusted_len(
        (size, written) in ring_and_records(),
        trusted in 0u64..2100,
    ) {
        let mut ring = KernelRing::new(size);
        written.iter().for_each(|r| ring.write(r));
        let total: u64 = written.iter().map(|r| r.len() as u64).sum();
        let range = find_range_limited(&ring.data, ring.head, trusted);
        let expected = newest_fitting(&written, trusted.min(size as u64));
        prop_assert_eq!(range.end, expected_end(total, size as u64, trusted, &expected));
        check_walk(&ring, &range, &expected);
    }

    #[test]
    fn racing_writer_only_overwrites_bytes_past_trusted_len(
        (size, written) in ring_and_records(),
        late in kernel_record(64),
    ) {
        prop_assume!(late.len() <= size);
        let mut ring = KernelRing::new(size);
        written.iter().for_each(|r| ring.write(r));
        let head = ring.head;
        ring.write(&late);
        let trusted = (size - late.len()) as u64;
        let range = find_range_limited(&ring.data, head, trusted);
        check_walk(&ring, &range, &newest_fitting(&written, trusted));
    }
}

/// Ring bytes to throw at the walk: either random, or a sound ring with
/// random bytes overwritten, with a head near or far from the real one.
fn hostile_ring() -> impl Strategy<Value = (Vec<u8>, u64)> {
    let random = (prop::collection::vec(any::<u8>(), 0..600), any::<u64>());
    let damaged = (
        ring_and_records(),
        prop::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        -24i64..24,
    )
        .prop_map(|((size, written), damage, skew)| {
            let mut ring = KernelRing::new(size);
            written.iter().for_each(|r| ring.write(r));
            for (at, b) in damage {
                ring.data[at % size] = b;
            }
            (ring.data, ring.head.wrapping_add_signed(skew))
        });
    prop_oneof![random, damaged]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn hostile_bytes_never_panic_and_give_a_parseable_range(
        (data, head) in hostile_ring(),
        trusted in prop_oneof![Just(u64::MAX), any::<u64>(), 0u64..700],
    ) {
        let range = find_range_limited(&data, head, trusted);
        prop_assert!(range.len <= data.len() as u64);
        prop_assert!(range.len <= trusted);
        prop_assert_eq!(range.end == RangeEnd::Corrupt, range.corruption.is_some());
        let mut bytes = Vec::new();
        copy_range(&data, &range, &mut bytes);
        prop_assert_eq!(bytes.len() as u64, range.len);
        let parsed: Vec<_> = records(&bytes).collect();
        prop_assert_eq!(parsed.len() as u64, range.records);
        prop_assert!(parsed.iter().all(Result::is_ok));
    }
}
