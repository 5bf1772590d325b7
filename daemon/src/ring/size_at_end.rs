//! The daemon's own overwrite ring, framed with a trailing size per record,
//! so it can be walked backward from the newest record.
//!
//! The tracking log keeps drained kernel tracking records here. A snapshot
//! needs the records of its time window, which are the newest ones: walking
//! back from the newest record by each trailing size reaches them without
//! touching older ones, and stops at the first record older than the window.
//! Records pushed out by new ones are handed to the caller (to be folded
//! into the process table), never dropped silently.
//!
//! Layout: each frame is the record (a kernel record, `header.size` bytes, a
//! multiple of 8) followed by an 8-byte little-endian `u64` trailer equal to
//! `header.size` (the record alone, not the trailer). A `u64` rather than
//! a `u16` keeps every frame 8-aligned, so headers and trailers are
//! never split at the end of the buffer; record bodies may be, and are then
//! copied out.

use std::borrow::Cow;

use super::wrap;
use crate::abi::{HEADER_SIZE, RecordHeader};
use flightrec_perfdata::records::{Corruption, CorruptionReason, check_header};

/// Bytes of the size written after each record.
pub const TRAILER_SIZE: usize = 8;

/// The smallest frame: a bare header and its trailer.
const MIN_FRAME: usize = HEADER_SIZE + TRAILER_SIZE;

/// Why the ring refused an operation.
#[derive(Debug, thiserror::Error)]
pub enum SizeAtEndError {
    #[error("ring capacity {capacity} is not a multiple of 8 of at least {MIN_FRAME} bytes")]
    New { capacity: usize },
    #[error("cannot allocate a ring of {capacity} bytes: {source}")]
    Alloc {
        capacity: usize,
        #[source]
        source: std::collections::TryReserveError,
    },
    #[error(
        "record of {size} bytes (+{TRAILER_SIZE}-byte trailer) does not fit a {capacity}-byte ring"
    )]
    AppendTooLarge { size: usize, capacity: usize },
    #[error("record of {len} bytes has a header saying {header} bytes")]
    AppendSizeMismatch { len: usize, header: u64 },
    #[error("record rejected: {0}")]
    AppendInvalid(CorruptionReason),
    #[error("cannot evict the oldest record to make room")]
    Evict(#[source] Corruption),
}

/// A fixed-capacity overwrite ring of kernel records with trailing sizes.
#[derive(Debug, Clone)]
pub struct SizeAtEndRing {
    buf: Vec<u8>,
    /// Offset just past the newest frame.
    end: usize,
    /// Bytes of kept frames, ending at `end` and wrapping.
    used: usize,
    records: usize,
    evicted: u64,
    /// Where an evicted record that wraps is made contiguous.
    scratch: Vec<u8>,
}

impl SizeAtEndRing {
    /// An empty ring of `capacity` bytes, a multiple of 8 that holds at
    /// least one bare header and its trailer.
    pub fn new(capacity: usize) -> Result<Self, SizeAtEndError> {
        if capacity < MIN_FRAME || !capacity.is_multiple_of(8) {
            return Err(SizeAtEndError::New { capacity });
        }
        // An allocation the system refuses aborts the process in `vec!`;
        // ask first, fallibly. The buffer itself then comes from `vec!`,
        // whose zeroed allocation leaves the pages untouched (resident only
        // once records reach them), where filling a reserved Vec would make
        // the whole log resident at once.
        Vec::<u8>::new()
            .try_reserve_exact(capacity)
            .map_err(|source| SizeAtEndError::Alloc { capacity, source })?;
        Ok(Self {
            buf: vec![0; capacity],
            end: 0,
            used: 0,
            records: 0,
            evicted: 0,
            scratch: Vec::new(),
        })
    }

    /// Appends `record` (a whole kernel record), first evicting as many of
    /// the oldest records as needed to make room, oldest first, each passed
    /// to `evict`. An invalid or too-large record is refused before
    /// anything is evicted.
    pub fn append(
        &mut self,
        record: &[u8],
        mut evict: impl FnMut(&[u8]),
    ) -> Result<(), SizeAtEndError> {
        let capacity = self.buf.len();
        let frame = record.len() + TRAILER_SIZE;
        if frame > capacity {
            return Err(SizeAtEndError::AppendTooLarge {
                size: record.len(),
                capacity,
            });
        }
        let Some(header) = RecordHeader::parse(record) else {
            return Err(SizeAtEndError::AppendInvalid(
                CorruptionReason::SizeTooSmall {
                    size: record.len() as u64,
                },
            ));
        };
        check_header(&header, (capacity - TRAILER_SIZE) as u64)
            .map_err(SizeAtEndError::AppendInvalid)?;
        if usize::from(header.size) != record.len() {
            return Err(SizeAtEndError::AppendSizeMismatch {
                len: record.len(),
                header: u64::from(header.size),
            });
        }

        while self.used + frame > capacity {
            self.evict_oldest(&mut evict)?;
        }
        wrap::write(&mut self.buf, self.end, record);
        let trailer_at = (self.end + record.len()) % capacity;
        wrap::write(
            &mut self.buf,
            trailer_at,
            &(record.len() as u64).to_le_bytes(),
        );
        self.end = (self.end + frame) % capacity;
        self.used += frame;
        self.records += 1;
        Ok(())
    }

    /// Removes the oldest record, found by its header at the oldest kept
    /// byte, and passes it to `evict`.
    fn evict_oldest(&mut self, evict: &mut impl FnMut(&[u8])) -> Result<(), SizeAtEndError> {
        let capacity = self.buf.len();
        let start = (self.end + capacity - self.used) % capacity;
        let corrupt = |reason| {
            SizeAtEndError::Evict(Corruption {
                offset: self.used as u64,
                reason,
            })
        };
        let mut bytes = [0u8; HEADER_SIZE];
        wrap::read(&self.buf, start, &mut bytes);
        let header = RecordHeader::parse(&bytes).expect("HEADER_SIZE bytes always hold a header");
        check_header(&header, (capacity - TRAILER_SIZE) as u64).map_err(corrupt)?;
        let size = usize::from(header.size);
        if size + TRAILER_SIZE > self.used {
            return Err(corrupt(CorruptionReason::Truncated {
                size: size as u64,
                remaining: self.used as u64,
            }));
        }
        if start + size <= capacity {
            evict(&self.buf[start..start + size]);
        } else {
            self.scratch.clear();
            wrap::append(&self.buf, start, size, &mut self.scratch);
            evict(&self.scratch);
        }
        self.used -= size + TRAILER_SIZE;
        self.records -= 1;
        self.evicted += 1;
        Ok(())
    }

    /// The kept records, newest first, up to the oldest one or to the first
    /// for which `stop` returns true (that one is not included). Records
    /// that wrap at the end of the buffer are copied; others are borrowed.
    pub fn walk_back(
        &self,
        mut stop: impl FnMut(&[u8]) -> bool,
    ) -> Result<Vec<Cow<'_, [u8]>>, Corruption> {
        let mut out = Vec::new();
        for record in self.iter_back() {
            let record = record?;
            if stop(&record) {
                break;
            }
            out.push(record);
        }
        Ok(out)
    }

    /// Iterates the kept records newest first; see [`WalkBack`].
    pub fn iter_back(&self) -> WalkBack<'_> {
        WalkBack::new(&self.buf, self.end, self.used)
    }

    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Bytes of kept records and their trailers.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Number of kept records.
    pub fn len(&self) -> usize {
        self.records
    }

    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Number of records evicted since the ring was created.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }
}

/// Walks a size-at-end framed buffer backward from the newest record,
/// checking that each trailer is nonzero while older records remain and
/// equals its header's size, and each header as every ring walk does. The first frame that fails ends the walk with a
/// [`Corruption`] whose offset counts bytes back from `end`.
#[derive(Debug, Clone)]
pub struct WalkBack<'a> {
    buf: &'a [u8],
    /// Offset just past the next frame to read.
    pos: usize,
    /// Bytes not yet walked that belong to kept frames.
    remaining: usize,
    walked: usize,
    failed: Option<Corruption>,
}

impl<'a> WalkBack<'a> {
    /// Walks the `used` bytes of frames that end at offset `end` of `buf`,
    /// wrapping. Positions that cannot describe `buf` are reported as the
    /// walk's first item.
    pub fn new(buf: &'a [u8], end: usize, used: usize) -> Self {
        let capacity = buf.len();
        let failed = (capacity < MIN_FRAME
            || !capacity.is_multiple_of(8)
            || end >= capacity
            || used > capacity)
            .then_some(Corruption {
                offset: 0,
                reason: CorruptionReason::Positions {
                    end: end as u64,
                    used: used as u64,
                    capacity: capacity as u64,
                },
            });
        Self {
            buf,
            pos: end,
            remaining: used,
            walked: 0,
            failed,
        }
    }

    fn next_record(&mut self) -> Result<Cow<'a, [u8]>, CorruptionReason> {
        let capacity = self.buf.len();
        let remaining = self.remaining as u64;
        if self.remaining < MIN_FRAME {
            return Err(CorruptionReason::Truncated {
                size: MIN_FRAME as u64,
                remaining,
            });
        }
        let trailer_at = (self.pos + capacity - TRAILER_SIZE) % capacity;
        let size = wrap::read_u64(self.buf, trailer_at);
        if size == 0 {
            return Err(CorruptionReason::ZeroTrailer);
        }
        if !size.is_multiple_of(8) {
            return Err(CorruptionReason::SizeUnaligned { size });
        }
        let limit = (capacity - TRAILER_SIZE) as u64;
        if size > limit {
            return Err(CorruptionReason::SizeTooLarge { size, limit });
        }
        if size + TRAILER_SIZE as u64 > remaining {
            return Err(CorruptionReason::Truncated { size, remaining });
        }
        // Bounded by the capacity just above.
        let size = size as usize;
        let start = (trailer_at + capacity - size) % capacity;
        let mut bytes = [0u8; HEADER_SIZE];
        wrap::read(self.buf, start, &mut bytes);
        let header = RecordHeader::parse(&bytes).expect("HEADER_SIZE bytes always hold a header");
        if usize::from(header.size) != size {
            return Err(CorruptionReason::TrailerMismatch {
                trailer: size as u64,
                header: u64::from(header.size),
            });
        }
        check_header(&header, limit)?;
        let record = if start + size <= capacity {
            Cow::Borrowed(&self.buf[start..start + size])
        } else {
            let mut owned = Vec::with_capacity(size);
            wrap::append(self.buf, start, size, &mut owned);
            Cow::Owned(owned)
        };
        self.pos = start;
        self.remaining -= size + TRAILER_SIZE;
        self.walked += size + TRAILER_SIZE;
        Ok(record)
    }
}

impl<'a> Iterator for WalkBack<'a> {
    type Item = Result<Cow<'a, [u8]>, Corruption>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(corruption) = self.failed.take() {
            self.remaining = 0;
            return Some(Err(corruption));
        }
        if self.remaining == 0 {
            return None;
        }
        match self.next_record() {
            Ok(record) => Some(Ok(record)),
            Err(reason) => {
                self.remaining = 0;
                Some(Err(Corruption {
                    offset: self.walked as u64,
                    reason,
                }))
            }
        }
    }
}

#[cfg(test)]
mod tests;
