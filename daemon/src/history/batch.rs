//! Records drained and not yet written, and how they are cut into frames.

use std::collections::BTreeMap;

use super::segment::FrameKind;
use crate::abi::layout::RecordLayouts;
use crate::abi::record_type;

/// Records waiting to be written: per CPU, and the tracking records.
#[derive(Default)]
pub(super) struct Pending {
    pub(super) cpus: BTreeMap<u32, Batch>,
    pub(super) tracking: Batch,
}

#[derive(Default)]
pub(super) struct Batch {
    pub(super) records: Vec<u8>,
    pub(super) count: u32,
    pub(super) first_ns: u64,
    pub(super) last_ns: u64,
}

impl Batch {
    /// Appends the whole records of `bytes`; returns the samples its LOST
    /// records say were dropped.
    pub(super) fn add(&mut self, bytes: &[u8], layouts: &RecordLayouts) -> u64 {
        let mut lost = 0;
        for (header, record) in crate::ring::records(bytes).map_while(Result::ok) {
            if header.type_ == record_type::LOST && record.len() >= 24 {
                lost += crate::abi::get_u64(record, 16);
            }
            if let (Some(t), _) = layouts.time_and_cpu(record) {
                self.first_ns = if self.count == 0 || self.first_ns == 0 {
                    t
                } else {
                    self.first_ns.min(t)
                };
                self.last_ns = self.last_ns.max(t);
            }
            self.records.extend_from_slice(record);
            self.count += 1;
        }
        lost
    }

    pub(super) fn take(&mut self) -> Batch {
        std::mem::take(self)
    }
}

impl Pending {
    pub(super) fn bytes(&self) -> usize {
        self.cpus.values().map(|b| b.records.len()).sum::<usize>() + self.tracking.records.len()
    }
}

/// Records in one frame at most: a window reads (and decompresses) only
/// the frames it overlaps.
const FRAME_RAW_BYTES: usize = 1 << 20;

/// Splits a batch into frames of at most [`FRAME_RAW_BYTES`] (whole
/// records).
pub(super) fn split(kind: FrameKind, cpu: u32, batch: Batch) -> Vec<(FrameKind, u32, Batch)> {
    if batch.records.len() <= FRAME_RAW_BYTES {
        return vec![(kind, cpu, batch)];
    }
    let mut out = Vec::new();
    let mut part = Batch {
        first_ns: batch.first_ns,
        last_ns: batch.last_ns,
        ..Batch::default()
    };
    for (_, record) in crate::ring::records(&batch.records).map_while(Result::ok) {
        if part.records.len() + record.len() > FRAME_RAW_BYTES {
            out.push((kind, cpu, std::mem::take(&mut part)));
            part.first_ns = batch.first_ns;
            part.last_ns = batch.last_ns;
        }
        part.records.extend_from_slice(record);
        part.count += 1;
    }
    out.push((kind, cpu, part));
    out
}
