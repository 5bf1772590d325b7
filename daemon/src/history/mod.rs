//! The history tier (`[history]`, off by default): the look-back kept on
//! disk, minutes rather than the seconds the memory rings hold.
//!
//! With it on, the recorder opens every event once more per CPU into a
//! forward ring that is never overwritten (`perf::history_ring`); the
//! writer (`writer`) drains those rings and the tracking records a few
//! times a second into zstd frames appended to segment files (`segment`,
//! the format), each starting with the events it uses and a checkpoint of
//! every process, and drops whole segments by age and bytes (`retention`).
//! A dump whose window starts before what the rings hold is cut from the
//! segments instead (`read`, then [`capture_from_history`]): the same
//! capture the writer turns into a perf.data file.

mod batch;
mod cut;
mod disk;
mod handle;
pub mod read;
pub mod retention;
pub mod segment;
mod status;
mod writer;

pub use cut::capture_from_history;
pub use handle::{History, HistorySources, boot_id};
pub use read::{HistoryWindow, read_window};
pub use status::{HistorySettings, HistoryStatus};
