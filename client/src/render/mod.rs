//! Replies as human text or stable JSON (one object per reply; `watch`
//! prints one object per line). JSON keys only ever get added.
//!
//! By concern: [`format`] holds the number, time and table helpers the
//! others share (and `fleet` reuses); [`snapshots`] the replies that are
//! snapshots (dump, list, rotate, compress, archive, decompress, report,
//! export);
//! [`status`] the daemon's status and reload, with its fleet section in
//! [`fleet_status`]; [`triggers`] and [`watch`] the triggers table and the
//! event stream.

mod fleet_status;
mod format;
mod snapshots;
mod status;
mod triggers;
mod watch;

pub use format::{duration, human_bytes, shown, std_duration, table, utc};
pub use snapshots::{
    archive, compress, decompressed, dump, list, rotate, snapshot_cells, snapshot_json, written,
};
pub use status::{reload, status};
pub use triggers::triggers;
pub use watch::watch_event;
