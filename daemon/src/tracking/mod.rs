//! Tracking records (comm, fork, exit, mmap2): the drain, the tracking log and
//! the process table.
//!
//! - [`record`]: parsing the records the tracking event emits.
//! - [`map_state`]: one mapping and the build-id of its file.
//! - [`maps`]: a process's mappings, shared between forks and snapshots.
//! - [`process_table`]: pid/tid → comm, parent, maps, folded from records.
//! - [`procfs`]: the /proc scan that seeds the table at start-up.
//! - [`state`]: a thread and its mappings as the table knows them.
//! - [`modules`]: MMAP records for kernel modules loaded after start.
//! - [`cgroups`]: every cgroup seen, by id, kept after it is gone.

pub mod build_id;
pub mod cgroups;
pub mod drain;
pub mod log;
pub mod map_state;
pub mod maps;
pub mod modules;
pub mod process_table;
pub mod procfs;
pub mod record;
pub mod state;
