//! Tracking records (comm, fork, exit, mmap2): the drain, the tracking log and
//! the process table.
