//! snapctl: the command-line client of flightrecd.

#![forbid(unsafe_code)]
