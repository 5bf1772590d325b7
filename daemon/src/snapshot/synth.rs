//! Records the writer makes up from the tracking state: COMM and MMAP2 of
//! every thread at the window's start. The generic record encoders live in
//! `flightrec_perfdata::encode`.

use crate::abi::{EventAttr, misc, mmap_prot, record_type};
use crate::tracking::state::{MapState, ProcessState};

pub use flightrec_perfdata::encode::{
    SampleId, push_cgroup, push_comm, push_kernel_mmap, push_lost_samples, push_module_mmap,
    push_padded_str, push_record, push_sample_id,
};

/// A CGROUP record for each of `cgroups`, as of `time`. Returns how many
/// were written (a path too long for a record is left out).
pub fn push_cgroups(
    out: &mut Vec<u8>,
    attr: &EventAttr,
    event_id: u64,
    time: u64,
    cgroups: &[(u64, std::sync::Arc<str>)],
) -> u64 {
    let id = SampleId {
        pid: u32::MAX,
        tid: 0,
        time,
        id: event_id,
        cpu: 0,
    };
    let mut n = 0;
    for (cgroup, path) in cgroups {
        if push_cgroup(out, attr, *cgroup, path, &id) {
            n += 1;
        }
    }
    n
}

/// MMAP2 for one mapping of process `pid`. False if the file name is too
/// long for a record.
pub fn push_mmap2(
    out: &mut Vec<u8>,
    attr: &EventAttr,
    pid: u32,
    tid: u32,
    map: &MapState,
    id: &SampleId,
) -> bool {
    let mut misc_bits = misc::USER;
    if map.prot & mmap_prot::EXEC == 0 {
        misc_bits |= misc::MMAP_DATA;
    }
    if map.build_id.is_some() {
        misc_bits |= misc::MMAP_BUILD_ID;
    }
    push_record(out, record_type::MMAP2, misc_bits, attr, id, |b| {
        b.extend_from_slice(&pid.to_le_bytes());
        b.extend_from_slice(&tid.to_le_bytes());
        b.extend_from_slice(&map.start.to_le_bytes());
        b.extend_from_slice(&map.len.to_le_bytes());
        b.extend_from_slice(&map.pgoff.to_le_bytes());
        if let Some(build_id) = &map.build_id {
            // As the kernel writes it: u8 size, 3 reserved, 20 id bytes.
            let mut area = [0u8; 24];
            let idb = build_id.as_bytes();
            area[0] = idb.len() as u8;
            area[4..4 + idb.len()].copy_from_slice(idb);
            b.extend_from_slice(&area);
        } else {
            b.extend_from_slice(&map.maj.to_le_bytes());
            b.extend_from_slice(&map.min.to_le_bytes());
            b.extend_from_slice(&map.ino.to_le_bytes());
            b.extend_from_slice(&map.ino_generation.to_le_bytes());
        }
        b.extend_from_slice(&map.prot.to_le_bytes());
        b.extend_from_slice(&map.flags.to_le_bytes());
        push_padded_str(b, map.filename.as_bytes());
    })
}

/// COMM and MMAP2 records for every thread of `processes`, as of `time`.
/// Returns how many records were written.
pub fn push_process_state(
    out: &mut Vec<u8>,
    attr: &EventAttr,
    event_id: u64,
    time: u64,
    processes: &[ProcessState],
) -> u64 {
    let mut n = 0;
    for p in processes {
        let id = SampleId {
            pid: p.pid,
            tid: p.tid,
            time,
            id: event_id,
            cpu: 0,
        };
        push_comm(out, attr, p.pid, p.tid, &p.comm, &id);
        n += 1;
        for map in &p.maps {
            if push_mmap2(out, attr, p.pid, p.tid, map, &id) {
                n += 1;
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{attr_flag, sample};

    #[test]
    fn overlong_file_name_is_skipped_not_truncated() {
        let attr = EventAttr {
            type_: 1,
            config: 9,
            sample_type: sample::IDENTIFIER | sample::TID | sample::TIME | sample::CPU,
            flags: attr_flag::SAMPLE_ID_ALL | attr_flag::COMM | attr_flag::MMAP2,
            ..Default::default()
        };
        let map = MapState {
            filename: "x".repeat(70_000).into(),
            ..Default::default()
        };
        let id = SampleId {
            pid: 1,
            tid: 1,
            time: 0,
            id: 1,
            cpu: 0,
        };
        let mut out = vec![1, 2, 3];
        assert!(!push_mmap2(&mut out, &attr, 1, 1, &map, &id));
        assert_eq!(out, vec![1, 2, 3]);
    }
}
