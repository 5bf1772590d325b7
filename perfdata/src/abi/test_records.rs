//! Records for the tests of the ring walks and of code that frames records.

use crate::abi::{HEADER_SIZE, RecordHeader, record_type};
use proptest::prelude::*;

/// A record of `size` bytes whose payload bytes are `fill`.
pub fn record(type_: u32, size: u16, fill: u8) -> Vec<u8> {
    let mut r = RecordHeader {
        type_,
        misc: 0,
        size,
    }
    .to_bytes()
    .to_vec();
    r.resize(usize::from(size).max(HEADER_SIZE), fill);
    r
}

/// A record whose payload is `words`, little-endian.
pub fn with_words(type_: u32, words: &[u64]) -> Vec<u8> {
    let size = u16::try_from(HEADER_SIZE + 8 * words.len()).expect("a record under 64 KiB");
    let mut r = record(type_, size, 0);
    r.truncate(HEADER_SIZE);
    for w in words {
        r.extend_from_slice(&w.to_le_bytes());
    }
    r
}

/// Random kernel records: a type the kernel writes, a size that is a
/// multiple of 8 up to `max`, random header misc and payload bytes.
pub fn kernel_record(max: u16) -> impl Strategy<Value = Vec<u8>> {
    (1..=record_type::KERNEL_MAX, any::<u16>(), 1..=max / 8).prop_flat_map(
        |(type_, misc, words)| {
            let size = words * 8;
            prop::collection::vec(any::<u8>(), usize::from(size) - HEADER_SIZE).prop_map(
                move |payload| {
                    let header = RecordHeader { type_, misc, size };
                    [&header.to_bytes()[..], &payload].concat()
                },
            )
        },
    )
}

/// Bytes to put after whole records: garbage, or a record that only the
/// walker's checks reject (a type the kernel does not write, or a size
/// that is not a multiple of 8) followed by a good one.
pub fn suspect_tail() -> impl Strategy<Value = Vec<u8>> {
    let bad_type = prop_oneof![Just(0u32), record_type::KERNEL_MAX + 1..200];
    let unaligned = (1u16..8).prop_map(|words| words * 8 + 4);
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        (bad_type, kernel_record(64))
            .prop_map(|(type_, good)| [record(type_, 16, 0), good].concat()),
        (unaligned, kernel_record(64)).prop_map(|(size, good)| [
            record(record_type::SAMPLE, size, 0),
            good
        ]
        .concat()),
    ]
}
