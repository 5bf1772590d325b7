//! What a condition ring's records say: hits (one SAMPLE per tracepoint
//! hit, with the task and CPU) and hits the ring had no room for (LOST).

use crate::abi::record_type;
use crate::ring::records;

/// One sampled hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
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

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Reads the records of a condition ring (sample_type TID | TIME | CPU, no
/// sample_id_all): a SAMPLE is `header, pid, tid, time, cpu, res`; a LOST
/// is `header, id, lost`. Stops at the first malformed record.
pub fn parse_hits(bytes: &[u8]) -> Hits {
    let mut hits = Hits::default();
    for rec in records(bytes) {
        let Ok((header, rec)) = rec else { break };
        match header.type_ {
            record_type::SAMPLE => {
                if let (Some(pid), Some(tid), Some(cpu)) =
                    (u32_at(rec, 8), u32_at(rec, 12), u32_at(rec, 24))
                {
                    hits.sampled.push(Hit { pid, tid, cpu });
                }
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
        let hits = parse_hits(&bytes);
        assert_eq!(
            hits.sampled,
            vec![Hit {
                pid: 7,
                tid: 8,
                cpu: 3
            }]
        );
        assert_eq!(hits.lost, 5);
        assert_eq!(hits.total(), 6);
    }

    #[test]
    fn a_torn_tail_ends_the_walk_without_inventing_hits() {
        let mut bytes = with_words(record_type::SAMPLE, &[1 | (1 << 32), 1, 0]);
        let whole = bytes.len();
        bytes.extend(with_words(record_type::SAMPLE, &[2 | (2 << 32), 2, 0]));
        bytes.truncate(whole + 12);
        assert_eq!(parse_hits(&bytes).total(), 1);
    }
}
