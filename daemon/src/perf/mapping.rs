//! A perf ring mapping: the `perf_event_mmap_page` control page followed by
//! a power-of-two data area. No `&[u8]` is ever formed over it (the kernel
//! writes it concurrently): the control words are read with atomics and the
//! data is copied out with raw pointer copies.

use std::mem::{offset_of, size_of};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering, fence};

use memmap2::{MmapOptions, MmapRaw};
use perf_event_open_sys::bindings::perf_event_mmap_page;

use super::PerfError;

/// The control words read or written, by their offset in the control page.
const DATA_HEAD: usize = offset_of!(perf_event_mmap_page, data_head);
const DATA_TAIL: usize = offset_of!(perf_event_mmap_page, data_tail);
const DATA_OFFSET: usize = offset_of!(perf_event_mmap_page, data_offset);
const DATA_SIZE: usize = offset_of!(perf_event_mmap_page, data_size);
/// `sizeof(struct perf_event_mmap_page)`: the page must hold it.
const MMAP_PAGE_SIZE: usize = size_of::<perf_event_mmap_page>();

/// Whether the data area may be written back to (`data_tail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// PROT_READ: with `write_backward` the kernel overwrites the oldest data.
    ReadOnly,
    /// PROT_READ|PROT_WRITE: the kernel respects `data_tail` (no overwrite).
    ReadWrite,
}

pub struct RingMap {
    map: MmapRaw,
    data_offset: usize,
    data_size: usize,
}

impl RingMap {
    /// Maps `1 + data_pages` pages of `fd` (`data_pages` a power of two).
    pub fn new(
        fd: &OwnedFd,
        data_pages: usize,
        access: Access,
        what: &'static str,
        cpu: u32,
    ) -> Result<Self, PerfError> {
        let page = super::sys::page_size();
        let layout = |detail: String| PerfError::Layout { what, cpu, detail };
        if page < MMAP_PAGE_SIZE {
            return Err(layout(format!(
                "page size {page} is below the control page size"
            )));
        }
        if !data_pages.is_power_of_two() {
            return Err(layout(format!(
                "{data_pages} data pages is not a power of two"
            )));
        }
        let bytes = data_pages
            .checked_add(1)
            .and_then(|n| n.checked_mul(page))
            .ok_or_else(|| layout(format!("{data_pages} data pages overflow")))?;
        let mut opts = MmapOptions::new();
        opts.len(bytes);
        let map = match access {
            Access::ReadOnly => opts.map_raw_read_only(fd),
            Access::ReadWrite => opts.map_raw(fd),
        }
        .map_err(|source| PerfError::Mmap {
            what,
            cpu,
            bytes,
            source,
        })?;
        let ring = Self {
            map,
            data_offset: page,
            data_size: data_pages * page,
        };
        // The kernel fills data_offset/data_size since Linux 4.1; check they
        // agree with the layout we assume.
        let (off, size) = (ring.control_word(DATA_OFFSET), ring.control_word(DATA_SIZE));
        if off != page as u64 || size != ring.data_size as u64 {
            return Err(layout(format!(
                "kernel reports data_offset {off}, data_size {size}; expected {page}, {}",
                ring.data_size
            )));
        }
        Ok(ring)
    }

    pub fn data_size(&self) -> usize {
        self.data_size
    }

    fn control_atomic(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset + 8 <= MMAP_PAGE_SIZE && offset.is_multiple_of(8));
        let ptr = self.map.as_mut_ptr().wrapping_add(offset).cast::<u64>();
        // SAFETY: `ptr` is inside the control page of a live mapping that
        // lives as long as `self`, 8-byte aligned (page-aligned base, offset a
        // multiple of 8); the kernel accesses these words atomically too.
        unsafe { AtomicU64::from_ptr(ptr) }
    }

    fn control_word(&self, offset: usize) -> u64 {
        // Relaxed: the only atomic load Rust allows on read-only memory.
        self.control_atomic(offset).load(Ordering::Relaxed)
    }

    /// `data_head`, with acquire ordering: the data it covers is visible.
    pub fn data_head(&self) -> u64 {
        let head = self.control_word(DATA_HEAD);
        // Relaxed load + acquire fence = acquire load; pairs with the
        // kernel's smp_store_release of data_head.
        fence(Ordering::Acquire);
        head
    }

    /// Publishes `data_tail` (read-write rings only), with release ordering:
    /// our reads of the data before it are done when the kernel sees it.
    pub fn set_data_tail(&self, tail: u64) {
        self.control_atomic(DATA_TAIL)
            .store(tail, Ordering::Release);
    }

    /// Copies `dst.len()` bytes starting at `offset` in the data area.
    /// Out-of-range requests copy nothing and return false.
    pub fn copy_out(&self, offset: usize, dst: &mut [u8]) -> bool {
        let Some(end) = offset.checked_add(dst.len()) else {
            return false;
        };
        if end > self.data_size {
            return false;
        }
        let src = self.map.as_ptr().wrapping_add(self.data_offset + offset);
        // SAFETY: [src, src + dst.len()) lies inside the data area of a live
        // mapping (checked above); dst is a distinct Rust buffer. The kernel
        // may still write these bytes (the writer race of a paused ring):
        // bytes have no invalid values, and callers only trust what head
        // re-reads prove untouched.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        true
    }

    /// The `len` bytes starting at `offset` in the data area, in place
    /// (None when out of range).
    ///
    /// # Safety
    /// The caller owns those bytes while the borrow lives: the kernel
    /// writes none of them (a forward ring's `[data_tail, data_head)`,
    /// until `data_tail` is moved past them).
    pub unsafe fn reader_owned(&self, offset: usize, len: usize) -> Option<&[u8]> {
        let end = offset.checked_add(len)?;
        if end > self.data_size {
            return None;
        }
        let src = self.map.as_ptr().wrapping_add(self.data_offset + offset);
        // SAFETY: [src, src + len) lies inside the data area of a mapping
        // that lives as long as `self` (checked above), and by the
        // caller's contract nothing writes it while the borrow lives.
        Some(unsafe { std::slice::from_raw_parts(src, len) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_words_sit_where_the_kernel_writes_them() {
        // include/uapi/linux/perf_event.h: data_head starts the second
        // kilobyte, after the 1024 bytes of self-monitoring fields.
        assert_eq!(
            [DATA_HEAD, DATA_TAIL, DATA_OFFSET, DATA_SIZE],
            [1024, 1032, 1040, 1048]
        );
        assert_eq!(MMAP_PAGE_SIZE, 1088);
        assert!(
            [DATA_HEAD, DATA_TAIL, DATA_OFFSET, DATA_SIZE]
                .iter()
                .all(|off| off.is_multiple_of(8) && off + 8 <= MMAP_PAGE_SIZE)
        );
    }
}
