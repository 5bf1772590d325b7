//! What the tracking log knows about a thread: its process, name and
//! mappings, as of a point in time.

pub use super::map_state::{BuildId, MapState};
use super::maps::Maps;

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
