//! Giving freed heap memory back to the kernel.
//!
//! The tracking drain and every dump allocate and free many small objects
//! (the persistent process table's nodes, a dump's buffers) on several
//! threads, each with its own glibc arena; glibc keeps freed memory in
//! those arenas, so the resident set climbs to the peak of what every
//! arena ever held (measured in a 20-minute soak: 30 MiB and more above
//! what was in use). `malloc_trim` hands the free pages of every arena
//! back (`madvise`), once per dump.
//!
//! That does not reach the top of a thread's arena: a dump's window (4 MiB
//! a CPU by default) freed there stays resident until the next dump, and
//! glibc raises its mmap threshold to the size of every large block freed,
//! so each capture worker kept one window's pages for good (measured in
//! the soak: 2 × 4 MiB). A fixed threshold gives every block of 1 MiB or
//! more its own mapping, unmapped when freed.

/// Blocks of this size and more are mapped apart and unmapped when freed.
pub const OWN_MAPPING_FROM: usize = 1 << 20;

/// Sets the allocator's mmap threshold to [`OWN_MAPPING_FROM`], which also
/// stops glibc from raising it. Call once, before the threads start.
/// Returns whether glibc took it.
pub fn map_large_blocks_apart() -> bool {
    let threshold = i32::try_from(OWN_MAPPING_FROM).unwrap_or(i32::MAX);
    // SAFETY: mallopt takes two integers and no pointers; glibc applies
    // the setting under the main arena's lock.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, threshold) == 1 }
}

/// Releases the free pages of every malloc arena to the kernel. Returns
/// whether any memory was released.
pub fn release_free_memory() -> bool {
    // SAFETY: malloc_trim takes a size and no pointers; glibc walks its own
    // arenas under their locks, safe to call from any thread at any time.
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_is_taken() {
        assert!(map_large_blocks_apart());
    }
}
