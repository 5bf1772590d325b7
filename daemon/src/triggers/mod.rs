//! What fires a dump besides a request: the signal thread (`signals`,
//! SIGUSR2, SIGHUP, SIGTERM) and the `[[trigger]]` conditions
//! (`conditions`: tracepoint condition rings, PSI files and timers, one
//! thread) with their rate limit (`gate`, pure). Both hand what fired to
//! a callback; the dump queue itself is `dump`'s.

pub mod conditions;
pub mod gate;
pub mod signals;
