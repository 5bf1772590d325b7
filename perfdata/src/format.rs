//! The PERFILE2 file layout: the header, its feature bitmap and the
//! feature index, as perf's tools/perf/util/header.c reads them.

use crate::abi::{ATTR_SIZE, get_u64};

/// Size of the PERFILE2 header.
pub const FILE_HEADER_SIZE: usize = 104;
pub const MAGIC: &[u8; 8] = b"PERFILE2";
/// Offset of the header's 256-bit feature bitmap (`adds_features`).
pub const FEATURE_BITMAP_OFFSET: usize = 0x48;

/// Whether `header`, the first bytes of a file, is a PERFILE2 header with
/// feature `bit` set. A prefix too short to hold that bit says no.
pub fn has_feature(header: &[u8], bit: u32) -> bool {
    header.starts_with(MAGIC)
        && header
            .get(FEATURE_BITMAP_OFFSET + (bit / 8) as usize)
            .is_some_and(|byte| byte & (1 << (bit % 8)) != 0)
}

/// Whether `header` is that of a compressed perf.data file (the COMPRESSED
/// feature is set).
pub fn is_compressed(header: &[u8]) -> bool {
    has_feature(header, bit::COMPRESSED)
}

/// Feature bits (`enum HEADER_FEAT`).
pub mod bit {
    pub const TRACING_DATA: u32 = 1;
    pub const BUILD_ID: u32 = 2;
    pub const HOSTNAME: u32 = 3;
    pub const OSRELEASE: u32 = 4;
    pub const VERSION: u32 = 5;
    pub const ARCH: u32 = 6;
    pub const NRCPUS: u32 = 7;
    pub const CPUDESC: u32 = 8;
    pub const CPUID: u32 = 9;
    pub const TOTAL_MEM: u32 = 10;
    pub const CMDLINE: u32 = 11;
    pub const EVENT_DESC: u32 = 12;
    pub const CPU_TOPOLOGY: u32 = 13;
    pub const NUMA_TOPOLOGY: u32 = 14;
    pub const PMU_MAPPINGS: u32 = 16;
    pub const CACHE: u32 = 20;
    pub const SAMPLE_TIME: u32 = 21;
    pub const MEM_TOPOLOGY: u32 = 22;
    pub const CLOCKID: u32 = 23;
    pub const COMPRESSED: u32 = 27;
    pub const CLOCK_DATA: u32 = 29;
    /// Size of the header's feature bitmap in bits.
    pub const BITMAP_BITS: u32 = 256;
}

/// The feature bits set in a PERFILE2 header, ascending.
pub fn feature_bits(header: &[u8]) -> Vec<u32> {
    let bitmap = &header[FEATURE_BITMAP_OFFSET..FEATURE_BITMAP_OFFSET + 32];
    (0..bit::BITMAP_BITS)
        .filter(|b| bitmap[(b / 8) as usize] & (1 << (b % 8)) != 0)
        .collect()
}

/// Whether `header` starts a PERFILE2 file this format describes: the
/// magic and the header size.
pub fn is_perf_data(header: &[u8]) -> bool {
    header.len() >= FILE_HEADER_SIZE
        && &header[..8] == MAGIC
        && get_u64(header, 8) == FILE_HEADER_SIZE as u64
}

/// zstd levels accepted: those `perf record -z --compression-level` takes.
pub const LEVELS: std::ops::RangeInclusive<i32> = 1..=22;

/// A zstd level outside [`LEVELS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("zstd compression level {level} is out of range {min}..={max}")]
pub struct LevelError {
    pub level: i32,
    pub min: i32,
    pub max: i32,
}

pub fn check_level(level: i32) -> Result<(), LevelError> {
    if LEVELS.contains(&level) {
        Ok(())
    } else {
        Err(LevelError {
            level,
            min: *LEVELS.start(),
            max: *LEVELS.end(),
        })
    }
}

/// The feature index table at `index_offset` for `bodies` placed right
/// after it; returns it and the bodies' total length.
pub fn feature_index(index_offset: u64, bodies: &[impl AsRef<[u8]>]) -> (Vec<u8>, u64) {
    let mut index = Vec::with_capacity(bodies.len() * 16);
    let mut offset = index_offset + (bodies.len() * 16) as u64;
    for b in bodies {
        let len = b.as_ref().len() as u64;
        index.extend_from_slice(&offset.to_le_bytes());
        index.extend_from_slice(&len.to_le_bytes());
        offset += len;
    }
    (index, offset - index_offset - (bodies.len() * 16) as u64)
}

/// The 104-byte PERFILE2 header.
pub fn file_header(attrs: (u64, u64), data: (u64, u64), feature_bits: &[u32]) -> [u8; 104] {
    let mut h = [0u8; FILE_HEADER_SIZE];
    h[0..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&(FILE_HEADER_SIZE as u64).to_le_bytes());
    h[16..24].copy_from_slice(&((ATTR_SIZE + 16) as u64).to_le_bytes());
    h[24..32].copy_from_slice(&attrs.0.to_le_bytes());
    h[32..40].copy_from_slice(&attrs.1.to_le_bytes());
    h[40..48].copy_from_slice(&data.0.to_le_bytes());
    h[48..56].copy_from_slice(&data.1.to_le_bytes());
    // event_types {0, 0} at 0x38
    for &b in feature_bits {
        if b < bit::BITMAP_BITS {
            h[FEATURE_BITMAP_OFFSET + (b / 8) as usize] |= 1 << (b % 8);
        }
    }
    h
}
