//! The history tier (`[history]`, off by default): the look-back kept on
//! disk, minutes rather than the seconds the memory rings hold.
//!
//! With it on, the recorder offers its records as a stream
//! ([`crate::recorder::RecordTap`], the one seam between the two); a
//! drain thread (`drain`) woken by the kernel at each ring's watermark
//! copies them out into a bounded queue (`queue`), and the writer
//! (`writer`, with what both share in `shared`) takes that
//! and the tracking records once a second into zstd frames
//! appended to segment files (`segment`,
//! the format), each starting with the events it uses and a checkpoint of
//! every process, and drops whole segments by age and bytes (`retention`).
//! Stack copies of `callchain = "dwarf"` events are unwound by the
//! writer into call chains before they are written (`unwind`).
//! A dump whose window starts before what the rings hold is cut from the
//! segments instead ([`cut::write_cut`], reading them a frame at a time
//! with `read`), through the same encoder the rings' dumps use.

mod batch;
pub mod cut;
mod disk;
mod drain;
mod handle;
mod queue;
pub mod read;
pub mod retention;
pub mod segment;
mod shared;
mod status;
mod unwind;
mod writer;

pub use handle::History;
pub use queue::memory_bound as queue_memory_bound;
pub use retention::SegmentInfo;
pub use shared::{HistorySources, boot_id};
pub use status::{HistorySettings, HistoryStatus};
