//! What a written perf.data file is: its bytes as segments, and what went
//! into it (the figures a dump's reply and `snapctl` report).

use std::borrow::Cow;

/// Compression figures of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompressionSummary {
    pub level: i32,
    /// Bytes of records before compression.
    pub input_bytes: u64,
    /// Bytes of the data section after compression.
    pub output_bytes: u64,
    /// Written as the COMPRESSED feature's `mmap_len`.
    pub mmap_len: u32,
}

/// What went into a file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DataSummary {
    pub file_bytes: u64,
    /// Length of the data section as written.
    pub data_bytes: u64,
    /// SAMPLE records over all CPUs.
    pub samples: u64,
    /// Samples reported lost (sum of the LOST_SAMPLES records).
    pub lost_samples: u64,
    /// COMM/MMAP2/MMAP records made up for the window's start.
    pub synthesized_records: u64,
    /// Bytes of ring data dropped because they did not parse as records.
    pub torn_bytes: u64,
    pub first_sample: Option<crate::time::SampleTime>,
    pub last_sample: Option<crate::time::SampleTime>,
    pub compression: Option<CompressionSummary>,
}

/// An encoded perf.data file: its bytes are the concatenation of
/// `segments`.
#[derive(Debug)]
pub struct PerfData<'a> {
    pub segments: Vec<Cow<'a, [u8]>>,
    pub summary: DataSummary,
}

impl PerfData<'_> {
    pub fn len(&self) -> u64 {
        self.summary.file_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.summary.file_bytes == 0
    }

    /// The whole file in one buffer (tests, small files).
    pub fn to_vec(&self) -> Vec<u8> {
        self.segments.concat()
    }
}
