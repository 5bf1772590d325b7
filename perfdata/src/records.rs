//! The one record walker: records laid out one after another, as a
//! copied-out ring range is ([`records`], every header checked as the
//! kernel writes them) and as a perf.data file's data section or BUILD_ID
//! feature holds them ([`file_records`]: the perf tool's own types too, and
//! sizes that need not be 8-aligned, as COMPRESSED records are).

mod corruption;

pub use corruption::{Corruption, CorruptionReason, check_header};

use crate::abi::{HEADER_SIZE, RecordHeader};

/// Which headers a walk accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rules {
    /// As the kernel writes them into a ring ([`check_header`]).
    Ring,
    /// As a perf.data file holds them: any type, any size that holds a
    /// header.
    File,
}

/// Iterates the records of `bytes`, each item the whole record (header
/// included). The first record that fails validation is returned as an
/// error and ends the iteration: past it, record boundaries are unknown.
pub fn records(bytes: &[u8]) -> Records<'_> {
    Records {
        bytes,
        offset: 0,
        done: false,
        rules: Rules::Ring,
    }
}

/// [`records`] with the rules of a perf.data file: records of the perf
/// tool (COMPRESSED, FINISHED_ROUND, the BUILD_ID feature's entries) pass,
/// and a size need only hold a header.
pub fn file_records(bytes: &[u8]) -> Records<'_> {
    Records {
        rules: Rules::File,
        ..records(bytes)
    }
}

/// Iterator returned by [`records`].
#[derive(Debug, Clone)]
pub struct Records<'a> {
    bytes: &'a [u8],
    offset: usize,
    done: bool,
    rules: Rules,
}

impl<'a> Records<'a> {
    /// Offset of the next record in the slice: after a full iteration
    /// without error, the number of bytes that were valid records.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Walks the rest of the records and returns where the valid ones end:
    /// the length of the longest prefix of the slice made of whole records.
    pub fn intact_len(mut self) -> usize {
        while let Some(Ok(_)) = self.next() {}
        self.offset
    }

    fn next_record(&self) -> Result<(RecordHeader, &'a [u8]), CorruptionReason> {
        let rest = &self.bytes[self.offset..];
        let remaining = rest.len() as u64;
        let Some(header) = RecordHeader::parse(rest) else {
            return Err(CorruptionReason::Truncated {
                size: HEADER_SIZE as u64,
                remaining,
            });
        };
        match self.rules {
            Rules::Ring => check_header(&header, u64::from(u16::MAX))?,
            Rules::File if usize::from(header.size) < HEADER_SIZE => {
                return Err(CorruptionReason::SizeTooSmall {
                    size: u64::from(header.size),
                });
            }
            Rules::File => {}
        }
        let size = usize::from(header.size);
        match rest.get(..size) {
            Some(record) => Ok((header, record)),
            None => Err(CorruptionReason::Truncated {
                size: size as u64,
                remaining,
            }),
        }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<(RecordHeader, &'a [u8]), Corruption>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.offset >= self.bytes.len() {
            return None;
        }
        match self.next_record() {
            Ok((header, record)) => {
                self.offset += record.len();
                Some(Ok((header, record)))
            }
            Err(reason) => {
                self.done = true;
                Some(Err(Corruption {
                    offset: self.offset as u64,
                    reason,
                }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::record_type;
    use crate::abi::test_records::record;

    #[test]
    fn yields_each_record_whole() {
        let a = record(record_type::SAMPLE, 24, 0xaa);
        let b = record(record_type::COMM, 8, 0);
        let bytes = [a.clone(), b.clone()].concat();
        let got: Vec<_> = records(&bytes).map(|r| r.unwrap()).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0.type_, record_type::SAMPLE);
        assert_eq!(got[0].1, &a[..]);
        assert_eq!(got[1].1, &b[..]);
        assert_eq!(records(&[]).count(), 0);
        assert_eq!(records(&bytes).intact_len(), bytes.len());
        assert_eq!(records(&bytes[..bytes.len() - 1]).intact_len(), a.len());
    }

    #[test]
    fn file_rules_take_unaligned_and_tool_records() {
        let compressed = record(record_type::COMPRESSED, 13, 7);
        let round = record(record_type::FINISHED_ROUND, 8, 0);
        let bytes = [compressed.clone(), round.clone()].concat();
        assert!(records(&bytes).next().unwrap().is_err());
        let got: Vec<_> = file_records(&bytes).map(|r| r.unwrap().1).collect();
        assert_eq!(got, [&compressed[..], &round[..]]);
        let short = record(record_type::SAMPLE, 4, 0);
        assert_eq!(
            file_records(&short).next(),
            Some(Err(Corruption {
                offset: 0,
                reason: CorruptionReason::SizeTooSmall { size: 4 }
            }))
        );
    }

    #[test]
    fn stops_at_the_first_bad_record() {
        let good = record(record_type::SAMPLE, 16, 1);
        let cases: [(Vec<u8>, CorruptionReason); 5] = [
            (
                record(record_type::SAMPLE, 0, 0),
                CorruptionReason::SizeTooSmall { size: 0 },
            ),
            (
                record(record_type::SAMPLE, 12, 0),
                CorruptionReason::SizeUnaligned { size: 12 },
            ),
            (record(0, 8, 0), CorruptionReason::UnknownType { type_: 0 }),
            (
                record(record_type::SAMPLE, 32, 0)[..24].to_vec(),
                CorruptionReason::Truncated {
                    size: 32,
                    remaining: 24,
                },
            ),
            (
                vec![1, 0, 0],
                CorruptionReason::Truncated {
                    size: 8,
                    remaining: 3,
                },
            ),
        ];
        for (bad, reason) in cases {
            // Nothing after a bad record is read, even a good one; a truncated
            // record can only be the last.
            let mut bytes = [good.clone(), bad].concat();
            if !matches!(reason, CorruptionReason::Truncated { .. }) {
                bytes.extend_from_slice(&good);
            }
            let got: Vec<_> = records(&bytes).collect();
            assert_eq!(got.len(), 2, "{reason}");
            assert!(got[0].is_ok());
            assert_eq!(got[1], Err(Corruption { offset: 16, reason }));
        }
    }
}
