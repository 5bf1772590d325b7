//! Writable mappings of the snapshot output file: it is written through a
//! mapping grown in large chunks instead of with many write() calls. A shared
//! file mapping is memory the kernel's page cache also owns, so the `unsafe`
//! it takes lives here with the other kernel-facing code.

use memmap2::{MmapMut, MmapOptions};
use std::fs::File;
use std::io;

/// Maps `len` bytes of `file` at `offset` for writing.
///
/// The caller must own `file` exclusively (a temporary file it created with
/// O_EXCL under a name no other writer uses) and must have reserved the range
/// with `posix_fallocate`, so nothing truncates it while mapped and touching
/// its pages cannot fault on a full disk.
pub fn map_reserved_chunk(file: &File, offset: u64, len: usize) -> io::Result<MmapMut> {
    // SAFETY: per this function's contract the file is private to the caller
    // and the range is allocated: no other process or thread truncates or
    // remaps it while the `MmapMut` lives, which is what memmap2 requires.
    unsafe { MmapOptions::new().offset(offset).len(len).map_mut(file) }
}
