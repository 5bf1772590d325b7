//! The seam between the recorder and what streams its records elsewhere
//! (the history, `[history]`): a [`RecordTap`] hands out every sample
//! record once, oldest first, per CPU, and the tracking records appended
//! to the log since the last take, with a checkpoint of every process
//! for a new segment to start from. Nothing behind it is the history's:
//! the history sees records, not rings.
//!
//! Today each event is opened once more per CPU for the tap, into a
//! forward ring the kernel never overwrites (`perf::history_ring`), so
//! the kernel takes each sample twice with the tap on (BENCHMARKS.md
//! section 32). Taking the records out of the recorder's own rings
//! instead would change this module, not the history.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags};

use crate::perf::PerfError;
use crate::perf::event::ResolvedEvent;
use crate::perf::history_ring::HistoryRing;
use crate::perf::page_size;
use crate::ring::Corruption;
use crate::tracking::drain::Tracking;
use crate::tracking::state::ProcessState;

/// The tap's rings: per CPU, every event once more into a forward ring.
pub(super) struct TapRings {
    /// Pages of each CPU's ring.
    pages: usize,
    /// By CPU, in the order they were opened.
    rings: Mutex<Vec<HistoryRing>>,
}

impl TapRings {
    /// No rings yet; [`Self::open`] opens them one CPU at a time.
    pub(super) fn new(pages: usize) -> Self {
        Self {
            pages,
            rings: Mutex::new(Vec::new()),
        }
    }

    /// The ring of `cpu` for `events`, disabled.
    pub(super) fn open(
        &self,
        cpu: u32,
        events: &[ResolvedEvent],
    ) -> Result<HistoryRing, PerfError> {
        HistoryRing::open(cpu, events, self.pages)
    }

    /// Puts in `ring`, enabled, in place of the ring of the CPU's earlier
    /// life (idle since it went offline).
    pub(super) fn put(&self, ring: HistoryRing) -> Result<(), PerfError> {
        ring.enable()?;
        let mut rings = lock(&self.rings);
        rings.retain(|r| r.cpu() != ring.cpu());
        rings.push(ring);
        Ok(())
    }
}

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
/// the records in two parts where the ring wraps.
pub type CpuRecords<'a> = dyn FnMut(u32, &[u8], &[u8]) + 'a;

/// The recorder's records as a stream: see the module's comment.
pub struct RecordTap<'r> {
    pub(super) tracking: &'r Mutex<Tracking>,
    pub(super) rings: &'r TapRings,
}

/// A lock a panicked holder left is taken anyway: what these guard is
/// whole between statements.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RecordTap<'_> {
    /// Bytes of every CPU's ring together: what is in the kernel's hands
    /// and not yet drained, at most.
    pub fn ring_bytes(&self) -> usize {
        let per_cpu = self.rings.pages.saturating_mul(page_size());
        per_cpu.saturating_mul(lock(&self.rings.rings).len())
    }

    /// Adds every ring's fd to `epoll` (data: its index), so a drain is
    /// woken when the kernel fills one to its watermark.
    pub fn watch(&self, epoll: &Epoll) -> nix::Result<()> {
        for (i, ring) in lock(&self.rings.rings).iter().enumerate() {
            epoll.add(ring.fd(), EpollEvent::new(EpollFlags::EPOLLIN, i as u64))?;
        }
        Ok(())
    }

    /// Hands `f` every CPU's records published since the last drain
    /// (oldest first, LOST records where the kernel dropped some), where
    /// the kernel wrote them: `f` copies what it keeps; the space is then
    /// the kernel's again.
    pub fn drain(&self, f: &mut CpuRecords<'_>) {
        let mut rings = lock(&self.rings.rings);
        for ring in rings.iter_mut() {
            let cpu = ring.cpu();
            ring.drain_in_place(&mut |first, second| f(cpu, first, second));
        }
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
