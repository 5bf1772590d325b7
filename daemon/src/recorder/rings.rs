//! The rings a recorder records into: per CPU, one or two sets of the
//! sample events with their ring, and a tracking ring; the events' kernel
//! ids and record layouts that name their records; and how to open them
//! for one more CPU (at start, or when a CPU comes online).

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use super::EventDescriptor;
use super::forget::ForgetBound;
use crate::abi::layout::RecordLayouts;
use crate::perf::PerfError;
use crate::perf::event::ResolvedEvent;
use crate::perf::sample_ring::SampleRing;
use crate::perf::tracking_ring::{TRACKING_EVENT_NAME, TrackingOptions, TrackingRing};
use crate::tracking::drain::Tracking;

/// What the recorder shares with the drain thread, which follows CPU
/// hotplug (see `hotplug`).
pub(super) struct Live {
    pub(super) rings: RwLock<Rings>,
    pub(super) opener: RingOpener,
    pub(super) tracking: Arc<Mutex<Tracking>>,
    /// Held by a capture, and while the rings of a CPU are put in.
    pub(super) capture_lock: Mutex<()>,
    /// The CPUs online at the last look, ascending.
    pub(super) online: Mutex<Vec<u32>>,
    /// What the rings held at past looks: how far back exited threads
    /// may be forgotten (`forget`).
    pub(super) forget: Mutex<ForgetBound>,
}

impl Live {
    pub(super) fn rings(&self) -> std::sync::RwLockReadGuard<'_, Rings> {
        self.rings.read().unwrap_or_else(PoisonError::into_inner)
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One set of the sample events on a CPU, with its ring.
pub(super) struct RingSet {
    pub(super) ring: SampleRing,
    /// `data_head` when the set was last enabled: the bytes from there to
    /// the head are its current window; older ones are an earlier window's.
    pub(super) enabled_at_head: AtomicU64,
}

pub(super) struct CpuRing {
    /// One set, or two with the lossless freeze (the active one and the
    /// standby).
    pub(super) sets: Vec<RingSet>,
    /// Index in `sets` of the enabled set.
    pub(super) active: AtomicUsize,
    /// The copy target, kept (and its pages touched) between captures so
    /// the paused memcpy never page-faults.
    pub(super) scratch: Mutex<Vec<u8>>,
    pub(super) last_lost: AtomicU64,
}

impl CpuRing {
    pub(super) fn cpu(&self) -> u32 {
        self.sets[0].ring.cpu()
    }

    pub(super) fn data_size(&self) -> usize {
        self.sets[0].ring.data_size()
    }

    /// Samples the kernel dropped on this CPU, over every set.
    pub(super) fn lost(&self) -> Result<u64, PerfError> {
        self.sets
            .iter()
            .try_fold(0u64, |sum, set| Ok(sum.wrapping_add(set.ring.lost()?)))
    }

    /// Starts recording into the first set.
    pub(super) fn enable(&self) -> Result<(), PerfError> {
        self.sets[0].ring.enable()
    }
}

/// Opens one CPU's rings as the recorder opened them at start.
pub(super) struct RingOpener {
    pub(super) events: Vec<ResolvedEvent>,
    pub(super) sample_pages: usize,
    pub(super) tracking_pages: usize,
    /// What the tracking rings record.
    pub(super) tracking: TrackingOptions,
    /// 2 with the lossless freeze, else 1.
    pub(super) sets_per_cpu: usize,
}

impl RingOpener {
    /// The tracking ring of `cpu`, disabled.
    pub(super) fn tracking(&self, cpu: u32) -> Result<TrackingRing, PerfError> {
        TrackingRing::open(cpu, self.tracking_pages, self.tracking)
    }

    /// The sample rings of `cpu`, disabled, with the copy buffer's pages
    /// touched.
    pub(super) fn samples(&self, cpu: u32) -> Result<CpuRing, PerfError> {
        let sets = (0..self.sets_per_cpu)
            .map(|_| {
                Ok(RingSet {
                    ring: SampleRing::open(cpu, &self.events, self.sample_pages)?,
                    enabled_at_head: AtomicU64::new(0),
                })
            })
            .collect::<Result<Vec<_>, PerfError>>()?;
        let mut scratch = vec![0u8; sets[0].ring.data_size()];
        // Write every page now (calloc'ed pages are mapped lazily).
        for byte in scratch.iter_mut().step_by(crate::perf::page_size()) {
            *byte = std::hint::black_box(0);
        }
        Ok(CpuRing {
            sets,
            active: AtomicUsize::new(0),
            scratch: Mutex::new(scratch),
            last_lost: AtomicU64::new(0),
        })
    }
}

/// The rings now, and what names their records.
pub(super) struct Rings {
    /// By ascending CPU.
    pub(super) cpus: Vec<Arc<CpuRing>>,
    /// Sample events (in config order), then the tracking event. Each
    /// event's ids: at start, every CPU's first set, then every CPU's
    /// standby set; then those of rings opened later, as they were.
    pub(super) events: Vec<EventDescriptor>,
    pub(super) layouts: RecordLayouts,
}

impl Rings {
    /// The rings opened at start (`cpus` and `tracking` in CPU order).
    pub(super) fn new(
        resolved: &[ResolvedEvent],
        cpus: Vec<CpuRing>,
        tracking: &[TrackingRing],
    ) -> Self {
        let sets_per_cpu = cpus.first().map_or(1, |c| c.sets.len());
        let mut layouts = RecordLayouts::default();
        let mut events = Vec::with_capacity(resolved.len() + 1);
        for (i, event) in resolved.iter().enumerate() {
            let ids: Vec<u64> = (0..sets_per_cpu)
                .flat_map(|set| cpus.iter().map(move |r| r.sets[set].ring.ids()[i]))
                .collect();
            for &id in &ids {
                layouts.insert_with_user_regs(
                    id,
                    event.attr.sample_type,
                    event.attr.sample_regs_user,
                );
            }
            events.push(EventDescriptor {
                name: event.name.clone(),
                attr: event.attr,
                ids,
                tracepoint: event.tracepoint(),
            });
        }
        let tracking_attr = tracking.first().map(TrackingRing::attr).unwrap_or_default();
        for ring in tracking {
            layouts.insert(ring.id(), tracking_attr.sample_type);
        }
        events.push(EventDescriptor {
            name: TRACKING_EVENT_NAME.to_string(),
            attr: tracking_attr,
            ids: tracking.iter().map(TrackingRing::id).collect(),
            tracepoint: None,
        });
        Rings {
            cpus: cpus.into_iter().map(Arc::new).collect(),
            events,
            layouts,
        }
    }

    /// Adds the rings of a CPU that came online, in place of those it had
    /// before (the old ids stay known: records of them may still be in a
    /// window).
    pub(super) fn put(&mut self, ring: CpuRing, tracking_id: u64) {
        let sample_events = self.events.len().saturating_sub(1);
        for (i, event) in self.events[..sample_events].iter_mut().enumerate() {
            for set in &ring.sets {
                let id = set.ring.ids()[i];
                event.ids.push(id);
                self.layouts.insert_with_user_regs(
                    id,
                    event.attr.sample_type,
                    event.attr.sample_regs_user,
                );
            }
        }
        if let Some(tracking_event) = self.events.last_mut() {
            tracking_event.ids.push(tracking_id);
            self.layouts
                .insert(tracking_id, tracking_event.attr.sample_type);
        }
        let cpu = ring.cpu();
        let ring = Arc::new(ring);
        match self.cpus.binary_search_by_key(&cpu, |r| r.cpu()) {
            Ok(at) => self.cpus[at] = ring,
            Err(at) => self.cpus.insert(at, ring),
        }
    }
}
