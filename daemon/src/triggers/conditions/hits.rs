//! What a condition ring's records say: hits (one SAMPLE per tracepoint
//! hit, with the task and CPU, and where asked the task's cgroup id and
//! the task a tracepoint names in its fields, such as the OOM victim) and
//! hits the ring had no room for (LOST).

use crate::abi::layout::SampleLayout;
use crate::abi::{record_type, sample};
use crate::perf::condition_ring::CONDITION_SAMPLE_TYPE;
use crate::ring::records;

/// The task a tracepoint's fields name (`oom:mark_victim`'s `pid` and
/// `comm`), as read from the raw data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub pid: u32,
    /// Empty when the format has no `comm` the hit could be read from.
    pub comm: String,
}

/// One sampled hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    /// The cgroup id of the task that hit it, when sampled.
    pub cgroup: Option<u64>,
    pub subject: Option<Subject>,
}

/// The hits in drained bytes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Hits {
    pub sampled: Vec<Hit>,
    /// Hits the kernel counted but could not write (ring full).
    pub lost: u64,
}

impl Hits {
    pub fn total(&self) -> u64 {
        self.sampled.len() as u64 + self.lost
    }
}

/// Where a tracepoint's raw data holds its subject: the offset and size
/// of an integer `pid` field and the offset of a `__data_loc char[] comm`
/// (from the tracefs format).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubjectFields {
    pub pid: (usize, usize),
    pub comm: Option<usize>,
}

/// How to read a condition ring's samples: the fields beyond
/// [`CONDITION_SAMPLE_TYPE`] it was opened with, and the subject's place
/// in the raw data (with `RAW`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HitLayout {
    pub sample_type: u64,
    pub subject: Option<SubjectFields>,
}

impl Default for HitLayout {
    fn default() -> Self {
        HitLayout {
            sample_type: CONDITION_SAMPLE_TYPE,
            subject: None,
        }
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// The subject in `raw` (a tracepoint's raw data), if its fields are
/// inside it.
fn subject_of(raw: &[u8], fields: &SubjectFields) -> Option<Subject> {
    let (at, size) = fields.pid;
    let pid = match size {
        4 => u32_at(raw, at)?,
        8 => u32::try_from(u64_at(raw, at)?).ok()?,
        _ => return None,
    };
    // A __data_loc field: the string's offset in the low 16 bits, its
    // length (with the NUL) in the high 16.
    let comm = fields
        .comm
        .and_then(|at| u32_at(raw, at))
        .and_then(|loc| {
            let start = (loc & 0xffff) as usize;
            let len = (loc >> 16) as usize;
            raw.get(start..start.checked_add(len)?)
        })
        .map(|b| {
            let b = b.split(|&c| c == 0).next().unwrap_or_default();
            String::from_utf8_lossy(b).into_owned()
        })
        .unwrap_or_default();
    Some(Subject { pid, comm })
}

/// Reads the records of a condition ring opened with `layout` (no
/// sample_id_all): a SAMPLE is `header, pid, tid, time, cpu, res[, raw]
/// [, cgroup]`; a LOST is `header, id, lost`. Stops at the first
/// malformed record.
pub fn parse_hits(bytes: &[u8], layout: &HitLayout) -> Hits {
    let fields = SampleLayout::new(layout.sample_type);
    let mut hits = Hits::default();
    for rec in records(bytes) {
        let Ok((header, rec)) = rec else { break };
        match header.type_ {
            record_type::SAMPLE => {
                let (Some(pid), Some(tid), Some(cpu)) =
                    (u32_at(rec, 8), u32_at(rec, 12), u32_at(rec, 24))
                else {
                    continue;
                };
                let cgroup = fields.sample_cgroup(rec);
                let subject = match (layout.subject, layout.sample_type & sample::RAW != 0) {
                    (Some(sf), true) => fields
                        .callchain_and_raw(rec)
                        .and_then(|f| f.raw)
                        .and_then(|(at, len)| rec.get(at..at + len))
                        .and_then(|raw| subject_of(raw, &sf)),
                    _ => None,
                };
                hits.sampled.push(Hit {
                    pid,
                    tid,
                    cpu,
                    cgroup,
                    subject,
                });
            }
            record_type::LOST => hits.lost += u64_at(rec, 16).unwrap_or(0),
            _ => {}
        }
    }
    hits
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::test_records::with_words;

    fn hit(pid: u32, tid: u32, cpu: u32) -> Hit {
        Hit {
            pid,
            tid,
            cpu,
            cgroup: None,
            subject: None,
        }
    }

    #[test]
    fn samples_and_lost_counts_are_read() {
        let mut bytes = with_words(
            record_type::SAMPLE,
            &[
                u64::from(7u32) | (u64::from(8u32) << 32),
                123_456,
                u64::from(3u32),
            ],
        );
        bytes.extend(with_words(record_type::LOST, &[99, 5]));
        bytes.extend(with_words(record_type::COMM, &[0, 0]));
        let hits = parse_hits(&bytes, &HitLayout::default());
        assert_eq!(hits.sampled, vec![hit(7, 8, 3)]);
        assert_eq!(hits.lost, 5);
        assert_eq!(hits.total(), 6);
    }

    #[test]
    fn a_torn_tail_ends_the_walk_without_inventing_hits() {
        let mut bytes = with_words(record_type::SAMPLE, &[1 | (1 << 32), 1, 0]);
        let whole = bytes.len();
        bytes.extend(with_words(record_type::SAMPLE, &[2 | (2 << 32), 2, 0]));
        bytes.truncate(whole + 12);
        assert_eq!(parse_hits(&bytes, &HitLayout::default()).total(), 1);
    }

    /// A sample as the kernel writes `oom:mark_victim` with RAW and
    /// CGROUP: raw = u32 size, then common fields (8 bytes), `int pid`,
    /// `__data_loc char[] comm`, padding to 8 with the size.
    #[test]
    fn the_cgroup_id_and_the_victim_are_read_from_raw_and_cgroup_fields() {
        let mut raw = Vec::new();
        raw.extend_from_slice(&[0u8; 8]);
        raw.extend_from_slice(&4242u32.to_ne_bytes());
        let comm_at = 16u32;
        raw.extend_from_slice(&(comm_at | (4 << 16)).to_ne_bytes());
        raw.extend_from_slice(b"hog\0");
        // u32 size + data is a multiple of 8.
        while (raw.len() + 4) % 8 != 0 {
            raw.push(0);
        }
        let mut payload = Vec::new();
        payload.extend_from_slice(&(9u64 | (10u64 << 32)).to_ne_bytes());
        payload.extend_from_slice(&777u64.to_ne_bytes());
        payload.extend_from_slice(&1u64.to_ne_bytes());
        payload.extend_from_slice(&u32::try_from(raw.len()).unwrap().to_ne_bytes());
        payload.extend_from_slice(&raw);
        payload.extend_from_slice(&120u64.to_ne_bytes());
        let words: Vec<u64> = payload
            .chunks(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        let bytes = with_words(record_type::SAMPLE, &words);
        let layout = HitLayout {
            sample_type: CONDITION_SAMPLE_TYPE | sample::RAW | sample::CGROUP,
            subject: Some(SubjectFields {
                pid: (8, 4),
                comm: Some(12),
            }),
        };
        let hits = parse_hits(&bytes, &layout);
        assert_eq!(
            hits.sampled,
            vec![Hit {
                cgroup: Some(120),
                subject: Some(Subject {
                    pid: 4242,
                    comm: "hog".into()
                }),
                ..hit(9, 10, 1)
            }]
        );
        // A comm whose place is outside the data is left empty, not read
        // past the end.
        let far = HitLayout {
            subject: Some(SubjectFields {
                pid: (8, 4),
                comm: Some(60),
            }),
            ..layout
        };
        let victim = parse_hits(&bytes, &far).sampled[0].subject.clone().unwrap();
        assert_eq!((victim.pid, victim.comm.as_str()), (4242, ""));
    }
}
