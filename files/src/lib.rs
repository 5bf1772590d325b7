//! Files a root daemon creates, and files it reads on behalf of paths
//! others chose. Both `flightrecd` and `snapctl` (often run as root) use
//! these and nothing else:
//!
//! - [`new_file`]: a file created exclusively under an unpredictable
//!   temporary name (never following a link), its mode and group set on
//!   the descriptor, synced, then renamed to its final name (without
//!   replacing unless asked) and the directory synced;
//! - [`untrusted`]: opening a path a process chose without blocking (FIFOs,
//!   devices) or following a final link, only if it is a regular file, and
//!   reading it in bounded pieces;
//! - [`elf`]: the GNU build-id of such a file, from a few KiB of it at most;
//! - [`elf_layout`]: where its file offsets land in memory, and one
//!   section's bytes by name, each read bounded;
//! - [`dirs`]: whether anyone but root and one group could plant files in a
//!   directory.

#![forbid(unsafe_code)]

pub mod dirs;
pub mod elf;
pub mod elf_layout;
pub mod new_file;
pub mod untrusted;

pub use new_file::{Access, Existing, NewFile, is_temp_name};
pub use untrusted::{Links, open_regular};
