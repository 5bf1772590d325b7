//! What the tracking log knows about a thread: its process, name and
//! mappings, as of a point in time.

use std::sync::Arc;

use super::maps::Maps;

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
}

/// A thread as known at the start of a snapshot's window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessState {
    pub pid: u32,
    pub tid: u32,
    pub ppid: u32,
    pub comm: String,
    /// Mappings of the process (shared by its threads; set on the leader).
    /// Cloning shares them (a persistent map), so a snapshot copies none.
    pub maps: Maps,
}
