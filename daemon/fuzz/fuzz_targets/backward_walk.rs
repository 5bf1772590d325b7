//! The backward ring walk two ways: record sequences written by a copy of
//! the kernel's backward writer, where the walk must return exactly the
//! newest records that fit; and arbitrary data areas, heads and trusted
//! lengths, where it must not panic, must stay inside the data area and
//! must return a range whose copy parses as exactly the records it counted.

#![no_main]

use flightrecd_fuzz::abi::{RecordHeader, record_type};
use flightrecd_fuzz::ring::backward::{self, RangeEnd, RecordRange};
use flightrecd_fuzz::ring::records;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        kernel_written_ring(mode, rest);
    } else {
        arbitrary_ring(rest);
    }
});

/// `__perf_output_begin` with `backward`: `head -= size`, record written at
/// `head & mask` going up, wrapping, whatever the tail says.
fn kernel_written_ring(mode: u8, ops: &[u8]) {
    let data_size = 1usize << (5 + (mode >> 1) % 8);
    let mask = data_size as u64 - 1;
    let mut data = vec![0u8; data_size];
    let mut head = 0u64;
    let mut written: Vec<Vec<u8>> = Vec::new();
    for op in ops.chunks_exact(3) {
        let size = (u16::from(op[1]) % (data_size as u16 / 8) + 1) * 8;
        let header = RecordHeader {
            type_: u32::from(op[0]) % record_type::KERNEL_MAX + 1,
            misc: 0,
            size,
        };
        let mut record = header.to_bytes().to_vec();
        record.resize(usize::from(size), op[2]);
        head = head.wrapping_sub(u64::from(size));
        for (i, b) in record.iter().enumerate() {
            data[(head.wrapping_add(i as u64) & mask) as usize] = *b;
        }
        written.push(record);
    }

    let mut expected = Vec::new();
    let mut len = 0;
    for r in written.iter().rev() {
        if len + r.len() > data_size {
            break;
        }
        len += r.len();
        expected.extend_from_slice(r);
    }
    let range = backward::find_range(&data, head);
    assert_eq!(range.corruption, None);
    assert_eq!(range.len, len as u64);
    let mut copy = Vec::new();
    backward::copy_range(&data, &range, &mut copy);
    assert_eq!(copy, expected);
    check_parses(&copy, &range);
}

fn arbitrary_ring(input: &[u8]) {
    let Some((params, bytes)) = input.split_first_chunk::<17>() else {
        return;
    };
    let word = |i: usize| u64::from_le_bytes(params[i..i + 8].try_into().unwrap());
    let shape = params[16];
    let mut data = bytes.to_vec();
    // Mostly power-of-two data areas (the kernel's), sometimes whatever came.
    if shape & 0x80 == 0 {
        data.resize(1 << (shape % 14), 0);
    }
    // Often a head near 0 (a ring that has not wrapped far), as the kernel
    // starts there; otherwise any u64.
    let head = if shape & 0x40 == 0 {
        0u64.wrapping_sub(word(0) % (4 * data.len() as u64 + 1))
    } else {
        word(0)
    };
    let trusted = if shape & 0x20 == 0 { u64::MAX } else { word(8) };

    let range = backward::find_range_limited(&data, head, trusted);
    assert!(range.len <= data.len() as u64);
    assert!(range.len <= trusted);
    assert_eq!(range.end == RangeEnd::Corrupt, range.corruption.is_some());
    let mut copy = Vec::new();
    backward::copy_range(&data, &range, &mut copy);
    check_parses(&copy, &range);
}

fn check_parses(copy: &[u8], range: &RecordRange) {
    assert_eq!(copy.len() as u64, range.len);
    let mut parsed = 0;
    for record in records(copy) {
        record.expect("every record of a range is valid");
        parsed += 1;
    }
    assert_eq!(parsed, range.records);
}
