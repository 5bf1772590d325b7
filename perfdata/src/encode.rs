//! Records made up rather than copied from a ring: the state at a
//! snapshot's start (COMM, the kernel and module MMAPs) and the loss count
//! (LOST_SAMPLES), written by the snapshot writer and by the tracking drain
//! (the MMAP of a module loaded after start).
//!
//! Every record carries a `sample_id` trailer laid out for the attr whose id
//! it names, so perf assigns it to a known event and time-orders it.

use crate::abi::{EventAttr, RecordHeader, attr_flag, misc, record_type, sample};

/// Comm length the kernel keeps (TASK_COMM_LEN - 1).
const COMM_MAX: usize = 15;
/// perf's name for the kernel map; perf resolves it through /proc/kallsyms.
pub const KERNEL_MMAP_NAME: &str = "[kernel.kallsyms]_text";

/// The fields of a `sample_id` trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleId {
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub id: u64,
    pub cpu: u32,
}

/// Appends `id`'s trailer for `attr`: nothing unless `sample_id_all`, else
/// TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER as `sample_type` selects them
/// (the kernel's `perf_event__output_id_sample` order).
pub fn push_sample_id(out: &mut Vec<u8>, attr: &EventAttr, id: &SampleId) {
    if !attr.has_flag(attr_flag::SAMPLE_ID_ALL) {
        return;
    }
    let st = attr.sample_type;
    if st & sample::TID != 0 {
        out.extend_from_slice(&id.pid.to_le_bytes());
        out.extend_from_slice(&id.tid.to_le_bytes());
    }
    if st & sample::TIME != 0 {
        out.extend_from_slice(&id.time.to_le_bytes());
    }
    if st & sample::ID != 0 {
        out.extend_from_slice(&id.id.to_le_bytes());
    }
    if st & sample::STREAM_ID != 0 {
        out.extend_from_slice(&id.id.to_le_bytes());
    }
    if st & sample::CPU != 0 {
        out.extend_from_slice(&id.cpu.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
    }
    if st & sample::IDENTIFIER != 0 {
        out.extend_from_slice(&id.id.to_le_bytes());
    }
}

/// Appends a NUL-terminated string padded with NULs to a multiple of 8.
pub fn push_padded_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(s);
    let padded = (s.len() + 1).next_multiple_of(8);
    out.resize(out.len() + padded - s.len(), 0);
}

/// Writes one record: header, `body` filled in by the closure, trailer.
/// Returns false (and writes nothing) if the record would exceed 64 KiB.
pub fn push_record(
    out: &mut Vec<u8>,
    type_: u32,
    misc: u16,
    attr: &EventAttr,
    id: &SampleId,
    body: impl FnOnce(&mut Vec<u8>),
) -> bool {
    let start = out.len();
    out.extend_from_slice(&[0u8; 8]);
    body(out);
    push_sample_id(out, attr, id);
    let Ok(size) = u16::try_from(out.len() - start) else {
        out.truncate(start);
        return false;
    };
    let header = RecordHeader { type_, misc, size };
    out[start..start + 8].copy_from_slice(&header.to_bytes());
    true
}

/// COMM for one thread (`misc` 0: a synthesized, not an exec, comm).
pub fn push_comm(
    out: &mut Vec<u8>,
    attr: &EventAttr,
    pid: u32,
    tid: u32,
    comm: &str,
    id: &SampleId,
) {
    let name = comm.as_bytes();
    let name = &name[..name.len().min(COMM_MAX)];
    push_record(out, record_type::COMM, 0, attr, id, |b| {
        b.extend_from_slice(&pid.to_le_bytes());
        b.extend_from_slice(&tid.to_le_bytes());
        push_padded_str(b, name);
    });
}

/// A kernel module's map as perf synthesizes it (perf_event__synthesize_modules):
/// MMAP, misc KERNEL, pid -1, the module's range, pgoff 0, its `.ko` path.
pub fn push_module_mmap(
    out: &mut Vec<u8>,
    attr: &EventAttr,
    start: u64,
    len: u64,
    path: &str,
    id: &SampleId,
) {
    push_record(out, record_type::MMAP, misc::KERNEL, attr, id, |b| {
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&start.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        push_padded_str(b, path.as_bytes());
    });
}

/// The kernel map as perf synthesizes it: pid -1, `[kernel.kallsyms]_text`
/// from `_text` to the end of the address space, pgoff = `_text`.
pub fn push_kernel_mmap(out: &mut Vec<u8>, attr: &EventAttr, text: u64, id: &SampleId) {
    push_record(out, record_type::MMAP, misc::KERNEL, attr, id, |b| {
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&text.to_le_bytes());
        b.extend_from_slice(&(u64::MAX - text).to_le_bytes());
        b.extend_from_slice(&text.to_le_bytes());
        push_padded_str(b, KERNEL_MMAP_NAME.as_bytes());
    });
}

/// CGROUP: a cgroup's id and its path relative to the root of its
/// hierarchy (`/`, `/system.slice/nginx.service`), as `perf record
/// --all-cgroups` synthesizes one for every cgroup at its start.
pub fn push_cgroup(
    out: &mut Vec<u8>,
    attr: &EventAttr,
    cgroup: u64,
    path: &str,
    id: &SampleId,
) -> bool {
    push_record(out, record_type::CGROUP, 0, attr, id, |b| {
        b.extend_from_slice(&cgroup.to_le_bytes());
        push_padded_str(b, path.as_bytes());
    })
}

/// LOST: `lost` samples of the event with id `lost_id` dropped, as the
/// kernel writes it in a ring (by a reader that lost them itself).
pub fn push_lost(out: &mut Vec<u8>, attr: &EventAttr, lost_id: u64, lost: u64, id: &SampleId) {
    push_record(out, record_type::LOST, 0, attr, id, |b| {
        b.extend_from_slice(&lost_id.to_le_bytes());
        b.extend_from_slice(&lost.to_le_bytes());
    });
}

/// LOST_SAMPLES: perf report's "Total Lost Samples".
pub fn push_lost_samples(out: &mut Vec<u8>, attr: &EventAttr, lost: u64, id: &SampleId) {
    push_record(out, record_type::LOST_SAMPLES, 0, attr, id, |b| {
        b.extend_from_slice(&lost.to_le_bytes());
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::get_u64;

    fn tracking_attr() -> EventAttr {
        EventAttr {
            type_: 1,
            config: 9,
            sample_type: sample::IDENTIFIER | sample::TID | sample::TIME | sample::CPU,
            flags: attr_flag::SAMPLE_ID_ALL | attr_flag::COMM | attr_flag::MMAP2,
            ..Default::default()
        }
    }

    #[test]
    fn comm_record_is_padded_and_ends_with_identifier() {
        let id = SampleId {
            pid: 7,
            tid: 8,
            time: 99,
            id: 0xabc,
            cpu: 1,
        };
        let mut out = Vec::new();
        push_comm(&mut out, &tracking_attr(), 7, 8, "exactly8", &id);
        let h = RecordHeader::parse(&out).unwrap();
        assert_eq!(h.type_, record_type::COMM);
        // 8 header + 8 pid/tid + 16 ("exactly8" + NUL padded) + 32 trailer
        assert_eq!(usize::from(h.size), out.len());
        assert_eq!(out.len(), 8 + 8 + 16 + 32);
        assert_eq!(&out[16..24], b"exactly8");
        assert_eq!(out[24], 0);
        assert_eq!(get_u64(&out, out.len() - 8), 0xabc);
        assert_eq!(get_u64(&out, out.len() - 24), 99);
    }

    #[test]
    fn a_lost_record_names_the_event_and_count_then_its_trailer() {
        let id = SampleId {
            pid: 0,
            tid: 0,
            time: 1234,
            id: 77,
            cpu: 1,
        };
        let mut out = Vec::new();
        push_lost(&mut out, &tracking_attr(), 77, 4096, &id);
        let h = RecordHeader::parse(&out).unwrap();
        assert_eq!(h.type_, record_type::LOST);
        assert_eq!(usize::from(h.size), out.len());
        // header, id, lost, then TID, TIME, CPU and IDENTIFIER.
        assert_eq!(out.len(), 8 + 16 + 8 + 8 + 8 + 8);
        assert_eq!(get_u64(&out, 8), 77);
        assert_eq!(get_u64(&out, 16), 4096);
        assert_eq!(get_u64(&out, 32), 1234);
        assert_eq!(get_u64(&out, out.len() - 8), 77);
    }

    #[test]
    fn trailer_is_empty_without_sample_id_all() {
        let attr = EventAttr {
            flags: 0,
            ..tracking_attr()
        };
        let mut out = Vec::new();
        push_sample_id(
            &mut out,
            &attr,
            &SampleId {
                pid: 1,
                tid: 1,
                time: 1,
                id: 1,
                cpu: 1,
            },
        );
        assert!(out.is_empty());
    }

    #[test]
    fn kernel_mmap_covers_the_rest_of_the_address_space() {
        let id = SampleId {
            pid: u32::MAX,
            tid: 0,
            time: 5,
            id: 3,
            cpu: 0,
        };
        let mut out = Vec::new();
        push_kernel_mmap(&mut out, &tracking_attr(), 0xffff_ffff_8100_0000, &id);
        let h = RecordHeader::parse(&out).unwrap();
        assert_eq!(h.misc, misc::KERNEL);
        assert_eq!(usize::from(h.size), out.len());
        assert_eq!(get_u64(&out, 16), 0xffff_ffff_8100_0000);
        assert_eq!(get_u64(&out, 16).wrapping_add(get_u64(&out, 24)), u64::MAX);
        assert_eq!(
            &out[40..40 + KERNEL_MMAP_NAME.len()],
            KERNEL_MMAP_NAME.as_bytes()
        );
    }
}
