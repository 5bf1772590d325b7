//! The queue between the history's drain and its writer: what the drain
//! copied out of the record tap's rings (stack copies unwound on the way
//! where the unwinder is ready for them, see `unwind`), oldest first,
//! bounded by the rings' size, not by the load; and what the writer does
//! with each chunk ([`fate`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, TryLockError, Weak};

use super::unwind::StackUnwinder;
use crate::abi::layout::RecordLayouts;
use crate::recorder::{Recorder, layouts_of};
use crate::time::SampleTime;

/// The queue holds at most this many times the rings' bytes (and at least
/// [`MIN_QUEUE_BYTES`]): seconds of the busiest load, then the kernel
/// drops.
const QUEUE_RINGS: usize = 2;
const MIN_QUEUE_BYTES: usize = 16 << 20;
/// Spare buffers kept for the next drains, at most this many bytes of
/// them: enough for the next drains of a busy machine (a CPU's drain of
/// stack copies is a few MiB: buffers made anew each time are fresh pages
/// faulted in and unmapped again), no more memory kept for a burst that
/// is over.
const SPARE_BYTES: usize = 16 << 20;

/// The most the queue holds for rings of `ring_bytes` together before the
/// kernel drops.
fn queue_limit(ring_bytes: usize) -> usize {
    (QUEUE_RINGS * ring_bytes).max(MIN_QUEUE_BYTES)
}

/// The memory the queue may keep for rings of `ring_bytes` together: what
/// it holds at most, and its spare buffers.
pub fn memory_bound(ring_bytes: usize) -> usize {
    queue_limit(ring_bytes) + SPARE_BYTES
}

/// The records of one CPU's ring drained at once, oldest first,
/// with the recorder they came from and its event ids at the time: a
/// segment names the ids its records carry, so the writer starts a new
/// one when either changes (a reload, a CPU that came online).
pub(super) struct Drained<R = Recorder> {
    pub(super) recorder: Arc<R>,
    pub(super) ids: usize,
    pub(super) cpu: u32,
    pub(super) records: Vec<u8>,
}

/// What the writer does with a drained chunk, given the recorder its
/// current segment is of (`current`, with `current_ids` ids) and the
/// recorder of the moment (`source`).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Fate {
    /// Into the current segment.
    Add,
    /// Into a new segment, for the recorder of the moment or its new ids.
    NewSegment,
    /// Of a recorder a reload replaced after the writer moved on: its
    /// segment is closed, the records are counted lost.
    Stale,
}

pub(super) fn fate<R>(
    current: Option<&Arc<R>>,
    current_ids: usize,
    source: &Arc<R>,
    chunk: &Drained<R>,
) -> Fate {
    match current {
        Some(c) if Arc::ptr_eq(c, &chunk.recorder) => {
            if chunk.ids > current_ids {
                Fate::NewSegment
            } else {
                Fate::Add
            }
        }
        _ if Arc::ptr_eq(source, &chunk.recorder) => Fate::NewSegment,
        _ => Fate::Stale,
    }
}

/// What was drained and not yet taken by the writer, oldest first.
pub(super) struct DrainQueue<R = Recorder> {
    chunks: VecDeque<Drained<R>>,
    bytes: usize,
    spare: Vec<Vec<u8>>,
    /// The record layouts of the recorder drained last and its event id
    /// count, for the stack copies unwound as they are drained (weak: a
    /// recorder a reload replaced closes its rings).
    layouts: Option<(Weak<R>, usize, RecordLayouts)>,
    /// Sample times since which the chunks queued, and those the writer
    /// took and has not unwound yet, were drained: what the record tap is
    /// told ([`crate::recorder::RecordTap::unwinding_since`]).
    queued_since: Option<u64>,
    taken_since: Option<u64>,
}

impl<R> Default for DrainQueue<R> {
    fn default() -> Self {
        Self {
            chunks: VecDeque::new(),
            bytes: 0,
            spare: Vec::new(),
            layouts: None,
            queued_since: None,
            taken_since: None,
        }
    }
}

impl<R> DrainQueue<R> {
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Everything queued, oldest first.
    /// The writer says when it has unwound them ([`Self::unwound`]).
    pub(super) fn take(&mut self) -> VecDeque<Drained<R>> {
        self.bytes = 0;
        self.taken_since = self.waiting_since();
        self.queued_since = None;
        std::mem::take(&mut self.chunks)
    }

    /// Since when what is queued or taken and not unwound was drained.
    fn waiting_since(&self) -> Option<u64> {
        self.queued_since.into_iter().chain(self.taken_since).min()
    }

    /// A drain at sample time `now_ns` begins: since when what it adds
    /// and what waits already was drained.
    fn draining(&mut self, now_ns: u64) -> Option<u64> {
        self.queued_since.get_or_insert(now_ns);
        self.waiting_since()
    }

    /// The writer has unwound what it took: since when what waits now
    /// was drained.
    fn taken_unwound(&mut self) -> Option<u64> {
        self.taken_since = None;
        self.waiting_since()
    }

    /// Gives a taken chunk's buffer back for the next drains (kept while
    /// the spares hold less than [`SPARE_BYTES`]).
    pub(super) fn recycle(&mut self, mut records: Vec<u8>) {
        let kept: usize = self.spare.iter().map(Vec::capacity).sum();
        if kept + records.capacity() <= SPARE_BYTES {
            records.clear();
            self.spare.push(records);
        }
    }

    /// [`Self::recycle`]s each of `buffers`.
    pub(super) fn recycle_all(&mut self, buffers: impl IntoIterator<Item = Vec<u8>>) {
        for records in buffers {
            self.recycle(records);
        }
    }

    /// Whether the queue is at [`queue_limit`] for rings of `ring_bytes` together.
    fn full(&self, ring_bytes: usize) -> bool {
        self.bytes >= queue_limit(ring_bytes)
    }

    /// A buffer for a ring's records: the largest spare one (a buffer
    /// grown anew is fresh pages faulted in), or a new one.
    fn buffer(&mut self) -> Vec<u8> {
        let largest = (0..self.spare.len()).max_by_key(|&i| self.spare[i].capacity());
        largest.map_or_else(Vec::new, |i| self.spare.swap_remove(i))
    }

    fn queue(&mut self, recorder: &Arc<R>, ids: usize, cpu: u32, records: Vec<u8>) {
        self.bytes += records.len();
        self.chunks.push_back(Drained {
            recorder: Arc::clone(recorder),
            ids,
            cpu,
            records,
        });
    }
}

impl DrainQueue {
    /// Drains `recorder`'s record tap into the queue, unless it
    /// already holds its limit. Returns false when it was full. Stack
    /// copies are unwound as they are copied out of the rings where
    /// `unwinder` is ready for them and not in use by the writer (which
    /// unwinds the rest).
    pub(super) fn drain(
        &mut self,
        recorder: &Arc<Recorder>,
        unwinder: &Mutex<Option<StackUnwinder>>,
    ) -> bool {
        let Some(tap) = recorder.tap() else {
            return true;
        };
        if self.full(tap.ring_bytes()) {
            return false;
        }
        // Said before the rings are read: until the writer has unwound
        // what is drained now, the tables keep its processes' maps.
        // (A clock that cannot be read says the earliest time: the tables
        // then keep every exit until the writer has caught up.)
        let now = crate::host::sample_clock_now().map_or(1, SampleTime::as_nanos);
        tap.unwinding_since(self.draining(now));
        let before = self.chunks.len();
        let mut unwinder = match unwinder.try_lock() {
            Ok(u) => Some(u),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        };
        let mut unwinder = unwinder.as_deref_mut().and_then(Option::as_mut);
        let layouts = unwinder.is_some().then(|| self.layouts_of(recorder));
        tap.drain(&mut |cpu, drained| {
            if drained.is_empty() {
                return;
            }
            let mut records = self.buffer();
            match (unwinder.as_deref_mut(), &layouts) {
                (Some(u), Some(layouts)) => u.copy_unwinding(
                    layouts,
                    drained,
                    &[],
                    &mut |pids| recorder.try_maps_now(pids),
                    &mut records,
                ),
                // Taken whole, the spare buffer left for the tap's next
                // records: a copy here is another pass over every byte.
                _ => std::mem::swap(&mut records, drained),
            }
            self.queue(recorder, 0, cpu, records);
        });
        if let (Some((_, _, kept)), Some(layouts)) = (&mut self.layouts, layouts) {
            *kept = layouts;
        }
        // Read after the drain: ids at least those of every ring drained.
        let ids = recorder.event_id_count();
        for chunk in self.chunks.iter_mut().skip(before) {
            chunk.ids = ids;
        }
        true
    }

    /// The writer has unwound what it took: the tap of `recorder` (of
    /// the moment) is told what still waits.
    pub(super) fn unwound(&mut self, recorder: &Recorder) {
        let since = self.taken_unwound();
        if let Some(tap) = recorder.tap() {
            tap.unwinding_since(since);
        }
    }

    /// The record layouts of `recorder` (taken out of the queue while it
    /// drains, put back after), made again when it is a new recorder or
    /// has new event ids.
    fn layouts_of(&mut self, recorder: &Arc<Recorder>) -> RecordLayouts {
        let ids = recorder.event_id_count();
        match &mut self.layouts {
            Some((r, n, layouts)) if r.as_ptr() == Arc::as_ptr(recorder) && *n == ids => {
                std::mem::take(layouts)
            }
            _ => {
                self.layouts = Some((Arc::downgrade(recorder), ids, RecordLayouts::default()));
                layouts_of(&recorder.events())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(recorder: &Arc<u8>, ids: usize) -> Drained<u8> {
        Drained {
            recorder: Arc::clone(recorder),
            ids,
            cpu: 0,
            records: Vec::new(),
        }
    }

    #[test]
    fn a_chunk_goes_to_the_current_segment_a_new_one_or_is_stale() {
        let (old, new) = (Arc::new(1u8), Arc::new(2u8));
        // The first chunk: a segment for the recorder of the moment.
        assert_eq!(fate(None, 0, &old, &chunk(&old, 4)), Fate::NewSegment);
        assert_eq!(fate(Some(&old), 4, &old, &chunk(&old, 4)), Fate::Add);
        // Drained before a CPU came online: its ids are in the new segment too.
        assert_eq!(fate(Some(&old), 6, &old, &chunk(&old, 4)), Fate::Add);
        // A CPU came online: its ids need a segment that names them.
        assert_eq!(fate(Some(&old), 4, &old, &chunk(&old, 6)), Fate::NewSegment);
        // A reload: the old recorder's last chunks still go to its segment...
        assert_eq!(fate(Some(&old), 4, &new, &chunk(&old, 4)), Fate::Add);
        // ...the new one's start a segment...
        assert_eq!(fate(Some(&old), 4, &new, &chunk(&new, 4)), Fate::NewSegment);
        // ...and the old one's drained after that are too late.
        assert_eq!(fate(Some(&new), 4, &new, &chunk(&old, 4)), Fate::Stale);
    }

    #[test]
    fn what_waits_to_be_unwound_is_dated_by_its_oldest_drain() {
        let mut queue = DrainQueue::<u8>::default();
        assert_eq!(queue.draining(100), Some(100));
        assert_eq!(queue.draining(150), Some(100));
        queue.take();
        // Drained while the writer unwinds what it took at 100.
        assert_eq!(queue.draining(200), Some(100));
        assert_eq!(queue.draining(250), Some(100));
        assert_eq!(queue.taken_unwound(), Some(200));
        queue.take();
        assert_eq!(queue.taken_unwound(), None);
        assert_eq!(queue.draining(300), Some(300));
    }

    /// Queues a copy of `first` then `second` (a ring's records, in two
    /// parts where it wraps), drained from `cpu`'s ring of `recorder`.
    fn push(q: &mut DrainQueue<u8>, recorder: &Arc<u8>, cpu: u32, first: &[u8], second: &[u8]) {
        let mut records = q.buffer();
        records.reserve(first.len() + second.len());
        records.extend_from_slice(first);
        records.extend_from_slice(second);
        q.queue(recorder, 2, cpu, records);
    }

    #[test]
    fn the_queue_keeps_order_and_is_full_at_twice_the_rings_or_16_mib() {
        let r = Arc::new(0u8);
        let mut q: DrainQueue<u8> = DrainQueue::default();
        assert!(!q.full(1 << 20));
        push(&mut q, &r, 0, &[1; 6 << 20], &[1; 2 << 20]);
        push(&mut q, &r, 1, &[2; 8 << 20], &[]);
        assert_eq!(q.bytes(), 16 << 20);
        // Small rings: the 16 MiB floor.
        assert!(q.full(1 << 20));
        // 16 MiB of rings: room for 32.
        assert!(!q.full(16 << 20));
        let taken = q.take();
        assert_eq!(q.bytes(), 0);
        assert_eq!(
            taken
                .iter()
                .map(|c| (c.cpu, c.records[0]))
                .collect::<Vec<_>>(),
            vec![(0, 1), (1, 2)]
        );
        // Buffers come back empty and are used again, while the spares
        // hold no more than SPARE_BYTES: two 8 MiB ones, and no third.
        for c in taken {
            q.recycle(c.records);
        }
        q.recycle(Vec::with_capacity(8 << 20));
        assert_eq!(q.spare.len(), 2);
        q.spare.clear();
        q.recycle(Vec::with_capacity(1 << 20));
        push(&mut q, &r, 3, &[3; 4], &[4; 2]);
        let again = q.take();
        assert_eq!(again[0].records, vec![3, 3, 3, 3, 4, 4]);
        assert!(again[0].records.capacity() >= 1 << 20);
        // The largest spare buffer first.
        q.recycle(Vec::with_capacity(2 << 20));
        q.recycle(Vec::with_capacity(4 << 20));
        q.recycle(Vec::with_capacity(3 << 20));
        assert_eq!(q.buffer().capacity(), 4 << 20);
        q.spare.clear();
        for _ in 0..20 {
            q.recycle(Vec::with_capacity(1 << 20));
        }
        assert_eq!(q.spare.len(), 16);
    }
}
