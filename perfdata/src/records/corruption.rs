//! What a walk reports when ring bytes cannot be trusted, and the header
//! rules every walk applies.

use crate::abi::{HEADER_SIZE, RecordHeader};

/// Where a walk stopped trusting the bytes, and why.
///
/// `offset` is counted in the walk's own direction: bytes from the newest
/// record for the backward walk of a ring (the offset in the linearized copy),
/// bytes from the start of the slice for [`crate::records::records`], bytes back
/// from the newest end for the size-at-end walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("ring corrupt at offset {offset}: {reason}")]
pub struct Corruption {
    pub offset: u64,
    pub reason: CorruptionReason,
}

/// Why a record could not be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CorruptionReason {
    #[error("record size {size} is smaller than a record header")]
    SizeTooSmall { size: u64 },
    #[error("record size {size} is not a multiple of 8")]
    SizeUnaligned { size: u64 },
    #[error("record size {size} is larger than the {limit}-byte ring")]
    SizeTooLarge { size: u64, limit: u64 },
    #[error("record type {type_} is not one the kernel writes into a ring")]
    UnknownType { type_: u32 },
    #[error("record of {size} bytes runs past the data ({remaining} bytes left)")]
    Truncated { size: u64, remaining: u64 },
    #[error("ring data area of {len} bytes is not a power of two of at least 8 bytes")]
    DataSize { len: u64 },
    #[error("trailing size is 0 but older records remain")]
    ZeroTrailer,
    #[error("trailing size {trailer} disagrees with the header's size {header}")]
    TrailerMismatch { trailer: u64, header: u64 },
    #[error("{used} bytes ending at {end} do not fit a {capacity}-byte ring")]
    Positions { end: u64, used: u64, capacity: u64 },
}

/// The checks perf skips and flightrec makes on every header it reads: a
/// size that can hold a header, keeps records 8-aligned and fits in `limit`
/// bytes, and a type the kernel writes. A header that fails them cannot be
/// used to find the next record, so the walk ends there.
pub fn check_header(header: &RecordHeader, limit: u64) -> Result<(), CorruptionReason> {
    let size = u64::from(header.size);
    if size < HEADER_SIZE as u64 {
        return Err(CorruptionReason::SizeTooSmall { size });
    }
    if !size.is_multiple_of(8) {
        return Err(CorruptionReason::SizeUnaligned { size });
    }
    if size > limit {
        return Err(CorruptionReason::SizeTooLarge { size, limit });
    }
    if !header.is_kernel_type() {
        return Err(CorruptionReason::UnknownType {
            type_: header.type_,
        });
    }
    Ok(())
}
