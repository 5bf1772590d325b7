//! The perf.data format as flightrec writes and reads it, shared by the
//! daemon and `snapctl`: the kernel's perf ABI as plain data ([`abi`]), the
//! one record walker ([`records`]), the records made up rather than copied
//! ([`encode`]), the PERFILE2 layout ([`format`]), the reader
//! ([`reader`]) and where the kernel's text starts ([`kallsyms`]). Pure: no I/O beyond what a caller hands in, no `unsafe`.

#![deny(unsafe_code)]

pub mod abi;
pub mod encode;
pub mod format;
pub mod kallsyms;
pub mod reader;
pub mod records;
