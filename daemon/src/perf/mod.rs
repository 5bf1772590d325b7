//! The kernel-facing module: perf_event_open, ioctls and ring mappings behind
//! safe types. It is the only place in the crate allowed to say `unsafe`.
#![allow(unsafe_code)]
