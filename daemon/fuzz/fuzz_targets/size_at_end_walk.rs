//! The size-at-end ring two ways: appends checked against a plain model
//! (kept records, evicted records), and the backward walk over arbitrary
//! bytes and positions, which must not panic or claim more than it has.

#![no_main]

use std::collections::VecDeque;

use flightrecd_fuzz::abi::{RecordHeader, record_type};
use flightrecd_fuzz::ring::size_at_end::{SizeAtEndRing, TRAILER_SIZE, WalkBack};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        appends_match_the_model(rest);
    } else {
        walk_over_arbitrary_bytes(rest);
    }
});

fn appends_match_the_model(input: &[u8]) {
    let Some((&words, ops)) = input.split_first() else {
        return;
    };
    let capacity = (usize::from(words) + 2) * 8;
    let mut ring = SizeAtEndRing::new(capacity).unwrap();
    let mut kept: VecDeque<Vec<u8>> = VecDeque::new();
    let mut evicted_total = 0u64;
    for op in ops.chunks_exact(3) {
        let (type_, size, fill) = (op[0], u16::from(op[1] % 64 + 1) * 8, op[2]);
        let mut record = RecordHeader {
            type_: u32::from(type_ % 24),
            misc: 0,
            size,
        }
        .to_bytes()
        .to_vec();
        record.resize(usize::from(size), fill);

        let mut evicted = Vec::new();
        let result = ring.append(&record, |r| evicted.push(r.to_vec()));
        let valid = (1..=record_type::KERNEL_MAX).contains(&u32::from(type_ % 24))
            && record.len() + TRAILER_SIZE <= capacity;
        assert_eq!(result.is_ok(), valid, "{result:?}");
        if !valid {
            assert!(evicted.is_empty());
            continue;
        }
        let mut used: usize = kept.iter().map(|r| r.len() + TRAILER_SIZE).sum();
        for e in &evicted {
            assert_eq!(Some(e), kept.front());
            kept.pop_front();
            used -= e.len() + TRAILER_SIZE;
        }
        assert!(used + record.len() + TRAILER_SIZE <= capacity);
        // Evicting one record fewer would not have made room.
        if let Some(last) = evicted.last() {
            assert!(used + last.len() + 2 * TRAILER_SIZE + record.len() > capacity);
        }
        evicted_total += evicted.len() as u64;
        kept.push_back(record);
    }
    let walked: Vec<Vec<u8>> = ring
        .walk_back(|_| false)
        .unwrap()
        .into_iter()
        .map(|r| r.into_owned())
        .collect();
    let expected: Vec<Vec<u8>> = kept.iter().rev().cloned().collect();
    assert_eq!(walked, expected);
    assert_eq!(ring.len(), kept.len());
    assert_eq!(ring.evicted(), evicted_total);
}

fn walk_over_arbitrary_bytes(input: &[u8]) {
    let Some((positions, buf)) = input.split_first_chunk::<4>() else {
        return;
    };
    let end = usize::from(u16::from_le_bytes([positions[0], positions[1]]));
    let used = usize::from(u16::from_le_bytes([positions[2], positions[3]]));
    let mut walked = 0;
    for record in WalkBack::new(buf, end, used) {
        match record {
            Ok(r) => {
                assert_eq!(r.len() % 8, 0);
                assert_eq!(usize::from(RecordHeader::parse(&r).unwrap().size), r.len());
                walked += r.len() + TRAILER_SIZE;
            }
            Err(c) => assert_eq!(c.offset as usize, walked),
        }
    }
    assert!(walked <= used);
}
