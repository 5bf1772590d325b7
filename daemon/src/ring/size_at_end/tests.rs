use super::*;
use crate::abi::record_type;
use crate::abi::test_records::{kernel_record, record};
use proptest::prelude::*;

fn comm(size: u16, fill: u8) -> Vec<u8> {
    record(record_type::COMM, size, fill)
}

/// Appends, collecting what gets evicted.
fn append(ring: &mut SizeAtEndRing, record: &[u8]) -> Vec<Vec<u8>> {
    let mut evicted = Vec::new();
    ring.append(record, |r| evicted.push(r.to_vec())).unwrap();
    evicted
}

fn walk(ring: &SizeAtEndRing) -> Vec<Vec<u8>> {
    ring.walk_back(|_| false)
        .unwrap()
        .into_iter()
        .map(Cow::into_owned)
        .collect()
}

#[test]
fn capacity_must_be_a_multiple_of_8_holding_a_frame() {
    for bad in [0, 8, 12, 20, 33] {
        assert!(
            matches!(SizeAtEndRing::new(bad), Err(SizeAtEndError::New { capacity }) if capacity == bad)
        );
    }
    for good in [16, 24, 4096] {
        let ring = SizeAtEndRing::new(good).unwrap();
        assert_eq!((ring.capacity(), ring.used(), ring.len()), (good, 0, 0));
        assert!(ring.is_empty());
        assert_eq!(walk(&ring), Vec::<Vec<u8>>::new());
    }
}

#[test]
fn walk_gives_records_newest_first_with_trailing_sizes() {
    let mut ring = SizeAtEndRing::new(256).unwrap();
    let (a, b) = (comm(24, 1), record(record_type::MMAP2, 40, 2));
    assert!(append(&mut ring, &a).is_empty());
    assert!(append(&mut ring, &b).is_empty());
    assert_eq!(walk(&ring), [b.clone(), a.clone()]);
    assert_eq!((ring.len(), ring.used(), ring.evicted()), (2, 80, 0));
    // The documented frame: record, then its size as a u64.
    assert_eq!(&ring.buf[..24], &a[..]);
    assert_eq!(&ring.buf[24..32], &24u64.to_le_bytes());
    assert_eq!(&ring.buf[32..72], &b[..]);
    assert_eq!(&ring.buf[72..80], &40u64.to_le_bytes());
}

#[test]
fn exactly_full_ring_evicts_nothing_until_the_next_record() {
    let mut ring = SizeAtEndRing::new(96).unwrap();
    let records: Vec<_> = (0..4).map(|i| comm(16, i)).collect();
    for r in &records {
        assert!(append(&mut ring, r).is_empty());
    }
    assert_eq!((ring.used(), ring.len()), (96, 4));
    let evicted = append(&mut ring, &comm(24, 9));
    assert_eq!(evicted, [records[0].clone(), records[1].clone()]);
    assert_eq!((ring.used(), ring.len(), ring.evicted()), (80, 3, 2));
    assert_eq!(
        walk(&ring),
        [comm(24, 9), records[3].clone(), records[2].clone()]
    );
}

#[test]
fn record_wrapping_the_end_is_copied_out_whole() {
    let mut ring = SizeAtEndRing::new(64).unwrap();
    append(&mut ring, &comm(16, 1)); // frame 0..24
    append(&mut ring, &comm(16, 2)); // frame 24..48
    let big = comm(32, 3); // frame 48..88: record 48..64 and 0..16, trailer 16..24
    let evicted = append(&mut ring, &big);
    assert_eq!(evicted, [comm(16, 1)]);
    assert_eq!(&ring.buf[16..24], &32u64.to_le_bytes());
    let walked = ring.walk_back(|_| false).unwrap();
    assert!(matches!(walked[0], Cow::Owned(_)));
    assert!(matches!(walked[1], Cow::Borrowed(_)));
    assert_eq!(walked[0].as_ref(), &big[..]);
    assert_eq!(walked[1].as_ref(), &comm(16, 2)[..]);

    // Evicting a wrapped record hands it over whole as well.
    let evicted = append(&mut ring, &comm(56, 4));
    assert_eq!(evicted, [comm(16, 2), big]);
    assert_eq!(walk(&ring), [comm(56, 4)]);
}

#[test]
fn stop_predicate_ends_the_walk_before_the_record_it_rejects() {
    let mut ring = SizeAtEndRing::new(1024).unwrap();
    for i in 0..10 {
        append(&mut ring, &comm(16, i));
    }
    // "Older than the window": payload byte is the time here.
    let window = ring.walk_back(|r| r[8] < 6).unwrap();
    let times: Vec<u8> = window.iter().map(|r| r[8]).collect();
    assert_eq!(times, [9, 8, 7, 6]);
    assert!(ring.walk_back(|_| true).unwrap().is_empty());
}

#[test]
fn record_larger_than_the_ring_is_refused_without_evicting() {
    let mut ring = SizeAtEndRing::new(64).unwrap();
    append(&mut ring, &comm(16, 1));
    let err = ring
        .append(&comm(64, 2), |_| panic!("nothing may be evicted"))
        .unwrap_err();
    assert!(matches!(
        err,
        SizeAtEndError::AppendTooLarge {
            size: 64,
            capacity: 64
        }
    ));
    assert_eq!(walk(&ring), [comm(16, 1)]);
    // The largest record that fits takes the whole ring.
    assert_eq!(append(&mut ring, &comm(56, 3)), [comm(16, 1)]);
    assert_eq!((ring.used(), ring.len()), (64, 1));
    assert_eq!(walk(&ring), [comm(56, 3)]);
}

#[test]
fn malformed_records_are_refused() {
    let mut ring = SizeAtEndRing::new(256).unwrap();
    let short = ring.append(&[1, 0, 0, 0], |_| {}).unwrap_err();
    assert!(matches!(
        short,
        SizeAtEndError::AppendInvalid(CorruptionReason::SizeTooSmall { size: 4 })
    ));
    let unaligned = ring.append(&comm(12, 0), |_| {}).unwrap_err();
    assert!(matches!(
        unaligned,
        SizeAtEndError::AppendInvalid(CorruptionReason::SizeUnaligned { size: 12 })
    ));
    let unknown = ring.append(&record(68, 8, 0), |_| {}).unwrap_err();
    assert!(matches!(
        unknown,
        SizeAtEndError::AppendInvalid(CorruptionReason::UnknownType { type_: 68 })
    ));
    let mut lying = comm(16, 0);
    lying.extend_from_slice(&[0; 8]);
    let mismatch = ring.append(&lying, |_| {}).unwrap_err();
    assert!(matches!(
        mismatch,
        SizeAtEndError::AppendSizeMismatch {
            len: 24,
            header: 16
        }
    ));
    assert!(ring.is_empty());
}

/// A ring of 16-byte records A (oldest), B, C: frames at 0, 24, 48.
fn three_records() -> SizeAtEndRing {
    let mut ring = SizeAtEndRing::new(128).unwrap();
    for i in 0..3 {
        append(&mut ring, &comm(16, i));
    }
    ring
}

/// Each way a trailer or header can be damaged, found when walking back
/// from C: B's trailer sits at 40..48, its header at 24..32.
#[test]
fn each_damaged_frame_is_reported_where_it_is() {
    let cases: [(usize, Vec<u8>, CorruptionReason); 8] = [
        (
            40,
            0u64.to_le_bytes().to_vec(),
            CorruptionReason::ZeroTrailer,
        ),
        (
            40,
            20u64.to_le_bytes().to_vec(),
            CorruptionReason::SizeUnaligned { size: 20 },
        ),
        (
            40,
            128u64.to_le_bytes().to_vec(),
            CorruptionReason::SizeTooLarge {
                size: 128,
                limit: 120,
            },
        ),
        (
            40,
            48u64.to_le_bytes().to_vec(),
            CorruptionReason::Truncated {
                size: 48,
                remaining: 48,
            },
        ),
        // A trailer of 8 lands in B's payload, bytes of 0x01.
        (
            40,
            8u64.to_le_bytes().to_vec(),
            CorruptionReason::TrailerMismatch {
                trailer: 8,
                header: 0x0101,
            },
        ),
        (
            30,
            24u16.to_le_bytes().to_vec(),
            CorruptionReason::TrailerMismatch {
                trailer: 16,
                header: 24,
            },
        ),
        (
            30,
            8u16.to_le_bytes().to_vec(),
            CorruptionReason::TrailerMismatch {
                trailer: 16,
                header: 8,
            },
        ),
        (
            24,
            0u32.to_le_bytes().to_vec(),
            CorruptionReason::UnknownType { type_: 0 },
        ),
    ];
    for (at, bytes, reason) in cases {
        let mut ring = three_records();
        ring.buf[at..at + bytes.len()].copy_from_slice(&bytes);
        let walked: Vec<_> = ring.iter_back().collect();
        assert_eq!(walked.len(), 2, "{reason}");
        assert_eq!(walked[0].as_deref().unwrap(), &comm(16, 2)[..]);
        assert_eq!(walked[1], Err(Corruption { offset: 24, reason }));
        assert_eq!(
            ring.walk_back(|_| false),
            Err(Corruption { offset: 24, reason })
        );
    }
}

#[test]
fn positions_that_do_not_fit_the_buffer_are_reported() {
    let buf = [0u8; 64];
    for (len, end, used) in [(64, 64, 0), (64, 0, 72), (12, 0, 0), (60, 0, 16)] {
        let walked: Vec<_> = WalkBack::new(&buf[..len], end, used).collect();
        let reason = CorruptionReason::Positions {
            end: end as u64,
            used: used as u64,
            capacity: len as u64,
        };
        assert_eq!(walked, [Err(Corruption { offset: 0, reason })]);
    }
    let walked: Vec<_> = WalkBack::new(&buf, 8, 8).collect();
    let reason = CorruptionReason::Truncated {
        size: 16,
        remaining: 8,
    };
    assert_eq!(walked, [Err(Corruption { offset: 0, reason })]);
}

#[test]
fn damaged_oldest_record_stops_eviction_without_losing_it() {
    let mut ring = three_records();
    ring.buf[6] = 200; // A's header claims 200 bytes
    let full = comm(112, 7);
    let err = ring
        .append(&full, |_| panic!("nothing may be evicted"))
        .unwrap_err();
    let reason = CorruptionReason::SizeTooLarge {
        size: 200,
        limit: 120,
    };
    assert!(matches!(err, SizeAtEndError::Evict(c) if c == Corruption { offset: 72, reason }));
    assert_eq!((ring.len(), ring.used()), (3, 72));
}

/// A capacity of 16..=1024 bytes and up to 100 records that fit it.
fn capacity_and_records() -> impl Strategy<Value = (usize, Vec<Vec<u8>>)> {
    (2usize..=128).prop_flat_map(|words| {
        let capacity = words * 8;
        let max = (capacity - TRAILER_SIZE).min(256) as u16;
        (
            Just(capacity),
            prop::collection::vec(kernel_record(max), 0..100),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn ring_keeps_the_newest_records_that_fit_and_evicts_the_rest_in_order(
        (capacity, appended) in capacity_and_records(),
        stop_after in 0usize..100,
    ) {
        let mut ring = SizeAtEndRing::new(capacity).unwrap();
        let mut evicted = Vec::new();
        for r in &appended {
            ring.append(r, |e| evicted.push(e.to_vec())).unwrap();
        }
        // Independently: the longest run of newest records whose frames fit.
        let mut kept_from = appended.len();
        let mut bytes = 0;
        while kept_from > 0 && bytes + appended[kept_from - 1].len() + TRAILER_SIZE <= capacity {
            kept_from -= 1;
            bytes += appended[kept_from].len() + TRAILER_SIZE;
        }
        let newest_first: Vec<Vec<u8>> = appended[kept_from..].iter().rev().cloned().collect();
        prop_assert_eq!(walk(&ring), newest_first.clone());
        prop_assert_eq!(&evicted[..], &appended[..kept_from]);
        prop_assert_eq!(evicted.len() + ring.len(), appended.len());
        prop_assert_eq!((ring.used(), ring.evicted()), (bytes, kept_from as u64));

        let mut seen = 0;
        let window = ring.walk_back(|_| { seen += 1; seen > stop_after }).unwrap();
        let window: Vec<Vec<u8>> = window.into_iter().map(Cow::into_owned).collect();
        prop_assert_eq!(&window[..], &newest_first[..stop_after.min(newest_first.len())]);
    }

    #[test]
    fn damaged_ring_bytes_never_panic(
        (capacity, appended) in capacity_and_records(),
        damage in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        next in kernel_record(64),
    ) {
        let mut ring = SizeAtEndRing::new(capacity).unwrap();
        appended.iter().for_each(|r| { ring.append(r, |_| {}).unwrap(); });
        for (at, b) in damage {
            ring.buf[at % capacity] = b;
        }
        let mut walked = 0;
        for record in ring.iter_back() {
            match record {
                Ok(r) => { walked += r.len() + TRAILER_SIZE; prop_assert_eq!(r.len() % 8, 0); }
                Err(c) => { prop_assert_eq!(c.offset as usize, walked); }
            }
        }
        prop_assert!(walked <= ring.used());
        // Eviction reads the damaged oldest headers: it may refuse, never panic.
        if ring.append(&next, |r| assert_eq!(r.len() % 8, 0)).is_ok() {
            let newest = ring.iter_back().next().unwrap().unwrap();
            prop_assert_eq!(newest.as_ref(), &next[..]);
        }
        prop_assert!(ring.used() <= capacity);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_and_positions_never_panic(
        buf in prop::collection::vec(any::<u8>(), 0..300),
        end in 0usize..320,
        used in 0usize..320,
    ) {
        let mut walked = 0;
        for record in WalkBack::new(&buf, end, used) {
            match record {
                Ok(r) => walked += r.len() + TRAILER_SIZE,
                Err(c) => prop_assert_eq!(c.offset as usize, walked),
            }
        }
        prop_assert!(walked <= used);
    }
}

#[test]
fn an_allocation_the_system_refuses_is_an_error_not_an_abort() {
    let huge = usize::MAX & !7;
    assert!(matches!(
        SizeAtEndRing::new(huge),
        Err(SizeAtEndError::Alloc { capacity, .. }) if capacity == huge
    ));
    // Larger than any machine's memory and swap, within isize: refused by
    // the allocator (or lazily granted under `vm.overcommit_memory = 1`).
    if std::fs::read_to_string("/proc/sys/vm/overcommit_memory").is_ok_and(|m| m.trim() != "1") {
        let err = SizeAtEndRing::new(1 << 50).expect_err("1 PiB cannot be allocated");
        assert_eq!(
            err.to_string(),
            "cannot allocate a ring of 1125899906842624 bytes: memory allocation failed \
             because the memory allocator returned an error"
        );
    }
}
