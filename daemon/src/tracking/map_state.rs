//! One mapping of a process and the build-id of the file it maps.

use std::sync::Arc;

/// One mapping of a process, as an MMAP2 record describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MapState {
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
    pub ino_generation: u64,
    pub prot: u32,
    pub flags: u32,
    /// Shared: every copy of a map names the same string.
    pub filename: Arc<str>,
    /// The mapped file's GNU build-id: from the kernel's MMAP2 record, or
    /// read from the file's ELF note when the record was drained.
    pub build_id: Option<BuildId>,
}

/// A GNU build-id (at most 20 bytes, the size MMAP2 records carry).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BuildId {
    len: u8,
    bytes: [u8; 20],
}

impl BuildId {
    /// `None` for an empty id or one longer than 20 bytes.
    pub fn new(id: &[u8]) -> Option<Self> {
        if id.is_empty() || id.len() > 20 {
            return None;
        }
        let mut bytes = [0u8; 20];
        bytes[..id.len()].copy_from_slice(id);
        Some(Self {
            len: id.len() as u8,
            bytes,
        })
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Lower-case hex, as perf names build-ids.
    pub fn to_hex(&self) -> String {
        self.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }
}
