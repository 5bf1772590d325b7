//! The seam between the recorder and what streams its records elsewhere
//! (the history, `[history]`): a [`RecordTap`] hands out every sample
//! record once, oldest first, per CPU, and the tracking records appended
//! to the log since the last take, with a checkpoint of every process
//! for a new segment to start from. Nothing behind it is the history's:
//! the history sees records, not rings.
//!
//! Behind it (`follow_rings`), the recorder's own overwrite rings are
//! read as they fill: one kernel copy of each sample, the rings' capture
//! untouched. (Until this seam, the history opened every event once more
//! per CPU into forward rings of its own: the kernel took each sample
//! twice, 5.3x the workload's time at 49999 Hz, BENCHMARKS.md section 32.)

mod follow_rings;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use nix::sys::epoll::Epoll;

use super::rings::Rings;
use crate::ring::Corruption;
use crate::tracking::drain::Tracking;
use crate::tracking::state::ProcessState;

/// What a segment of the history starts with: see [`RecordTap::checkpoint`].
pub struct Checkpoint {
    pub processes: Vec<ProcessState>,
    /// Every cgroup known (with cgroup ids recorded).
    pub cgroups: Vec<(u64, Arc<str>)>,
    /// The tracking records not taken before, all older than `processes`.
    pub records: Vec<u8>,
    /// Tracking records dropped because nobody took them in time.
    pub dropped: u64,
}

/// What [`RecordTap::drain`] hands each CPU's records to: the CPU, then
/// the records, in a buffer `f` may take whole (swapping in another one
/// for the tap's next records) rather than copy.
pub type CpuRecords<'a> = dyn FnMut(u32, &mut Vec<u8>) + 'a;

/// The recorder's records as a stream: see the module's comment.
pub struct RecordTap<'r> {
    pub(super) tracking: &'r Mutex<Tracking>,
    pub(super) source: &'r FollowRings,
    /// The recorder's rings (what `follow_rings` reads).
    pub(super) rings: &'r RwLock<Rings>,
}

pub(super) use follow_rings::FollowRings;

/// A lock a panicked holder left is taken anyway: what these guard is
/// whole between statements.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RecordTap<'_> {
    /// Bytes of every ring the tap reads together: what is in the
    /// kernel's hands and not yet drained, at most.
    pub fn ring_bytes(&self) -> usize {
        self.source.ring_bytes(self.rings)
    }

    /// Adds every ring's fd to `epoll`, so a drain is woken when the
    /// kernel fills one to its watermark.
    pub fn watch(&self, epoll: &Epoll) -> nix::Result<()> {
        self.source.watch(self.rings, epoll)
    }

    /// Hands `f` every CPU's records published since the last drain, a
    /// set's ring at a time (oldest first, a LOST record first where some
    /// were overwritten before they were read): `f` copies or takes what
    /// it keeps.
    pub fn drain(&self, f: &mut CpuRecords<'_>) {
        self.source.drain(self.rings, f)
    }

    /// Says that records drained from the rings since sample time
    /// `at_ns` (None: none) are not unwound yet: until they are, the
    /// process tables keep the threads they name that exited since the
    /// rings held them (`recorder::forget`), their maps at hand. Said
    /// before a drain reads the rings, and again when what was drained
    /// has been unwound.
    pub fn unwinding_since(&self, at_ns: Option<u64>) {
        self.source.set_unwinding_since(at_ns);
    }

    /// The tracking records appended since the last take (the tracking
    /// rings drained first), and how many were dropped.
    pub fn take_tracking(&self) -> (Vec<u8>, u64) {
        let mut tracking = lock(self.tracking);
        tracking.drain();
        tracking.take_tapped()
    }

    /// Every process at sample time `at_ns` (build-ids filled in), and the
    /// tracking records not taken yet (all older than that state), with
    /// how many were dropped; the tracking rings are drained first, under
    /// one lock, so the records after the state are exactly those taken
    /// next time.
    /// An error is the tracking log found damaged where it was walked.
    pub fn checkpoint(&self, at_ns: u64) -> Result<Checkpoint, Corruption> {
        let mut tracking = lock(self.tracking);
        tracking.drain();
        let (records, dropped) = tracking.take_tapped();
        let window = tracking.log().window(at_ns)?;
        let build_ids = tracking.build_ids();
        let cgroups = tracking.cgroups().map(|c| c.all()).unwrap_or_default();
        drop(tracking);
        let mut processes = window.processes;
        for p in &mut processes {
            p.maps.fill_build_ids(|m| build_ids.for_map(m));
        }
        Ok(Checkpoint {
            processes,
            cgroups,
            records,
            dropped,
        })
    }
}
