//! Parsing of the tracking records the dummy event emits (COMM, FORK, EXIT,
//! MMAP, MMAP2, CGROUP, LOST), each followed by the `sample_id_all` trailer of the
//! tracking attr (`IDENTIFIER | TID | TIME | CPU`: pid, tid, time, cpu, res,
//! id = 32 bytes). Pure: bad bytes give `None`, never a panic.

use crate::abi::{HEADER_SIZE, RecordHeader, get_u32, get_u64, misc, record_type};
use crate::tracking::state::{BuildId, MapState};

/// Size of the `sample_id_all` trailer of tracking records.
pub const SAMPLE_ID_SIZE: usize = 32;

/// A tracking record's meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrackingRecord {
    Comm {
        pid: u32,
        tid: u32,
        comm: String,
        exec: bool,
    },
    Fork {
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
    },
    Exit {
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
    },
    Mmap {
        pid: u32,
        tid: u32,
        map: MapState,
    },
    Lost {
        id: u64,
        lost: u64,
    },
    /// A cgroup was created (its id, its path below the hierarchy's root).
    Cgroup {
        id: u64,
        path: String,
    },
    /// A record type the process table does not need.
    Other {
        type_: u32,
    },
}

/// A parsed record with its trailer's time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub record: TrackingRecord,
    pub time: u64,
}

/// The time in the `sample_id_all` trailer (perf clock, ns).
pub fn record_time(record: &[u8]) -> Option<u64> {
    let size = usize::from(RecordHeader::parse(record)?.size);
    if size < HEADER_SIZE + SAMPLE_ID_SIZE || size > record.len() {
        return None;
    }
    Some(get_u64(record, size - 24))
}

/// NUL-terminated string inside `b` (lossy UTF-8).
fn c_string(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Parses one whole record (header included).
pub fn parse(record: &[u8]) -> Option<Parsed> {
    let header = RecordHeader::parse(record)?;
    let size = usize::from(header.size);
    if size > record.len() {
        return None;
    }
    let record = &record[..size];
    let time = record_time(record)?;
    let body_end = size - SAMPLE_ID_SIZE;
    let need = |n: usize| (body_end >= n).then_some(());
    let parsed = match header.type_ {
        record_type::COMM => {
            need(16)?;
            TrackingRecord::Comm {
                pid: get_u32(record, 8),
                tid: get_u32(record, 12),
                comm: c_string(&record[16..body_end]),
                exec: header.misc & misc::COMM_EXEC != 0,
            }
        }
        record_type::FORK | record_type::EXIT => {
            need(32)?;
            let (pid, ppid, tid, ptid) = (
                get_u32(record, 8),
                get_u32(record, 12),
                get_u32(record, 16),
                get_u32(record, 20),
            );
            if header.type_ == record_type::FORK {
                TrackingRecord::Fork {
                    pid,
                    ppid,
                    tid,
                    ptid,
                }
            } else {
                TrackingRecord::Exit {
                    pid,
                    ppid,
                    tid,
                    ptid,
                }
            }
        }
        record_type::MMAP2 => {
            need(72)?;
            let build_id = header.misc & misc::MMAP_BUILD_ID != 0;
            TrackingRecord::Mmap {
                pid: get_u32(record, 8),
                tid: get_u32(record, 12),
                map: MapState {
                    start: get_u64(record, 16),
                    len: get_u64(record, 24),
                    pgoff: get_u64(record, 32),
                    maj: if build_id { 0 } else { get_u32(record, 40) },
                    min: if build_id { 0 } else { get_u32(record, 44) },
                    ino: if build_id { 0 } else { get_u64(record, 48) },
                    ino_generation: if build_id { 0 } else { get_u64(record, 56) },
                    prot: get_u32(record, 64),
                    flags: get_u32(record, 68),
                    filename: c_string(&record[72..body_end]).into(),
                    // u8 size, 3 reserved bytes, then the id in 20 bytes.
                    build_id: if build_id {
                        BuildId::new(&record[44..44 + usize::from(record[40]).min(20)])
                    } else {
                        None
                    },
                },
            }
        }
        record_type::MMAP => {
            need(40)?;
            TrackingRecord::Mmap {
                pid: get_u32(record, 8),
                tid: get_u32(record, 12),
                map: MapState {
                    start: get_u64(record, 16),
                    len: get_u64(record, 24),
                    pgoff: get_u64(record, 32),
                    // PROT_EXEC: MMAP records are emitted for executable maps.
                    prot: 4,
                    filename: c_string(&record[40..body_end]).into(),
                    build_id: None,
                    ..MapState::default()
                },
            }
        }
        record_type::CGROUP => {
            need(16)?;
            TrackingRecord::Cgroup {
                id: get_u64(record, 8),
                path: c_string(&record[16..body_end]),
            }
        }
        record_type::LOST => {
            need(24)?;
            TrackingRecord::Lost {
                id: get_u64(record, 8),
                lost: get_u64(record, 16),
            }
        }
        type_ => TrackingRecord::Other { type_ },
    };
    Some(Parsed {
        record: parsed,
        time,
    })
}

/// Builders of synthetic records, for tests here and in the kernel tests'
/// expectations (the layout the kernel writes).
#[cfg(any(test, feature = "testing"))]
pub mod build {
    use crate::abi::{RecordHeader, misc, record_type};
    use crate::tracking::state::MapState;

    fn finish(type_: u32, misc: u16, mut body: Vec<u8>, pid: u32, tid: u32, time: u64) -> Vec<u8> {
        while !body.len().is_multiple_of(8) {
            body.push(0);
        }
        let mut rec = Vec::with_capacity(body.len() + 40);
        let size = u16::try_from(8 + body.len() + 32).unwrap_or(u16::MAX);
        rec.extend_from_slice(&RecordHeader { type_, misc, size }.to_bytes());
        rec.extend_from_slice(&body);
        rec.extend_from_slice(&pid.to_le_bytes());
        rec.extend_from_slice(&tid.to_le_bytes());
        rec.extend_from_slice(&time.to_le_bytes());
        rec.extend_from_slice(&0u64.to_le_bytes()); // cpu, res
        rec.extend_from_slice(&0u64.to_le_bytes()); // identifier
        rec
    }

    fn u32s(values: &[u32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    pub fn comm(pid: u32, tid: u32, comm: &str, exec: bool, time: u64) -> Vec<u8> {
        let mut body = u32s(&[pid, tid]);
        body.extend_from_slice(comm.as_bytes());
        body.push(0);
        let misc = if exec { misc::COMM_EXEC } else { 0 };
        finish(record_type::COMM, misc, body, pid, tid, time)
    }

    fn task(type_: u32, pid: u32, ppid: u32, tid: u32, ptid: u32, time: u64) -> Vec<u8> {
        let mut body = u32s(&[pid, ppid, tid, ptid]);
        body.extend_from_slice(&time.to_le_bytes());
        finish(type_, 0, body, pid, tid, time)
    }

    pub fn fork(pid: u32, ppid: u32, tid: u32, ptid: u32, time: u64) -> Vec<u8> {
        task(record_type::FORK, pid, ppid, tid, ptid, time)
    }

    pub fn exit(pid: u32, ppid: u32, tid: u32, ptid: u32, time: u64) -> Vec<u8> {
        task(record_type::EXIT, pid, ppid, tid, ptid, time)
    }

    pub fn mmap2(pid: u32, tid: u32, map: &MapState, time: u64) -> Vec<u8> {
        let mut body = u32s(&[pid, tid]);
        for v in [map.start, map.len, map.pgoff] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        body.extend_from_slice(&u32s(&[map.maj, map.min]));
        body.extend_from_slice(&map.ino.to_le_bytes());
        body.extend_from_slice(&map.ino_generation.to_le_bytes());
        body.extend_from_slice(&u32s(&[map.prot, map.flags]));
        body.extend_from_slice(map.filename.as_bytes());
        body.push(0);
        finish(record_type::MMAP2, misc::USER, body, pid, tid, time)
    }

    pub fn lost(id: u64, lost: u64, time: u64) -> Vec<u8> {
        let mut body = id.to_le_bytes().to_vec();
        body.extend_from_slice(&lost.to_le_bytes());
        finish(record_type::LOST, 0, body, 0, 0, time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_kind() {
        let c = parse(&build::comm(10, 11, "sleep", true, 500)).unwrap();
        assert_eq!(c.time, 500);
        assert_eq!(
            c.record,
            TrackingRecord::Comm {
                pid: 10,
                tid: 11,
                comm: "sleep".into(),
                exec: true
            }
        );
        let f = parse(&build::fork(10, 1, 10, 1, 7)).unwrap();
        assert_eq!(
            f.record,
            TrackingRecord::Fork {
                pid: 10,
                ppid: 1,
                tid: 10,
                ptid: 1
            }
        );
        assert!(matches!(
            parse(&build::exit(10, 1, 10, 1, 9)).unwrap().record,
            TrackingRecord::Exit { tid: 10, .. }
        ));
        let map = MapState {
            start: 0x1000,
            len: 0x2000,
            pgoff: 0x3000,
            maj: 8,
            min: 1,
            ino: 42,
            ino_generation: 3,
            prot: 5,
            flags: 2,
            filename: "/usr/bin/sleep".into(),
            build_id: None,
        };
        let m = parse(&build::mmap2(10, 10, &map, 8)).unwrap();
        assert_eq!(
            m.record,
            TrackingRecord::Mmap {
                pid: 10,
                tid: 10,
                map
            }
        );
        assert_eq!(
            parse(&build::lost(77, 5, 1)).unwrap().record,
            TrackingRecord::Lost { id: 77, lost: 5 }
        );
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let parsed = parse(&bytes);
            let _ = record_time(&bytes);
            // Whatever parses folds into a table without panicking.
            if let Some(p) = parsed {
                let mut table = crate::tracking::process_table::ProcessTable::default();
                table.apply(&p);
                let _ = table.state_at(p.time);
            }
        }

        #[test]
        fn any_record_type_in_a_valid_frame_keeps_its_time(
            type_ in 1u32..=21, time in proptest::prelude::any::<u64>(), words in 3usize..12
        ) {
            let mut rec = build::lost(0, 0, time);
            rec.resize(8 + 8 * words + 32, 0);
            let size = u16::try_from(rec.len()).unwrap();
            rec[..8].copy_from_slice(&RecordHeader { type_, misc: 0, size }.to_bytes());
            let n = rec.len();
            rec[n - 24..n - 16].copy_from_slice(&time.to_le_bytes());
            proptest::prop_assert_eq!(record_time(&rec), Some(time));
            if let Some(p) = parse(&rec) {
                proptest::prop_assert_eq!(p.time, time);
            }
        }
    }

    #[test]
    fn truncated_or_tiny_records_do_not_parse() {
        let rec = build::comm(1, 1, "x", false, 1);
        assert!(parse(&rec[..rec.len() - 8]).is_none());
        assert!(parse(&rec[..4]).is_none());
        let mut tiny = rec.clone();
        tiny[6..8].copy_from_slice(&16u16.to_le_bytes());
        assert!(parse(&tiny).is_none());
        // A FORK whose size leaves no room for its body.
        let mut fork = build::fork(1, 1, 1, 1, 1);
        fork[6..8].copy_from_slice(&48u16.to_le_bytes());
        assert!(parse(&fork).is_none());
    }
}
