//! The tracking drain: per-CPU tracking rings emptied into the tracking log
//! by a dedicated thread that the kernel wakes (epoll on the ring fds, which
//! signal when a ring reaches its watermark), plus a periodic drain so a
//! quiet ring's records do not wait for the watermark too long.

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::EventFd;

use super::build_id::{BuildIdStats, BuildIds, MappedBy, MappedFile};
use super::cgroups::CgroupTable;
use super::log::TrackingLog;
use super::modules::{LoadedModule, ModuleWatch};
use super::record::{TrackingRecord, parse, record_time};
use crate::abi::mmap_prot::EXEC;
use crate::perf::tracking_ring::TrackingRing;
use crate::ring::records;

/// How often the drain runs without a wakeup.
pub const DRAIN_INTERVAL_MS: u16 = 250;

/// The tracking rings and what was drained from them.
pub struct Tracking {
    rings: Vec<TrackingRing>,
    log: TrackingLog,
    /// Records the kernel could not write, per ring (from LOST records).
    lost: Vec<u64>,
    /// Bytes in a ring that did not parse as records, per ring.
    malformed: Vec<u64>,
    scratch: Vec<u8>,
    batch: Vec<(u64, usize, usize)>,
    /// Build-ids for MMAP2 records the kernel wrote without one, read by
    /// threads of their own.
    build_ids: Arc<BuildIds>,
    /// Modules loaded after start, polled from the drain (see `modules`).
    modules: Option<ModuleWatch>,
    /// With a tap on (`[history]`): the records appended to the log since
    /// they were last taken.
    tap: Option<Tapped>,
    /// With cgroup ids recorded: every cgroup seen.
    cgroups: Option<CgroupTable>,
}

/// The executable files the maps of `log`'s table name without a build-id,
/// each with a process that maps it.
fn seeded_files(log: &TrackingLog) -> Vec<(MappedFile, MappedBy)> {
    let mut out = Vec::new();
    for p in log.current_table().state_at(0) {
        for map in p.maps.iter() {
            if map.build_id.is_none() && map.prot & EXEC != 0 && map.filename.starts_with('/') {
                let by = MappedBy {
                    pid: p.pid,
                    start: map.start,
                    end: map.start.saturating_add(map.len),
                };
                out.push((MappedFile::of(map), by));
            }
        }
    }
    out
}

/// Records kept for whoever taps the log, bounded: past [`MAX_TAP_BYTES`]
/// (a taker that stopped taking them) they are counted, not kept.
#[derive(Default)]
struct Tapped {
    records: Vec<u8>,
    dropped: u64,
}

/// Most bytes of tracking records waiting to be taken.
pub const MAX_TAP_BYTES: usize = 32 << 20;

impl Tapped {
    fn push(&mut self, record: &[u8]) {
        if self.records.len() + record.len() > MAX_TAP_BYTES {
            self.dropped += 1;
        } else {
            self.records.extend_from_slice(record);
        }
    }
}

impl Tracking {
    /// The drain over `rings` into `log`, whose table was seeded from
    /// /proc: the files those maps name are queued for their build-ids at
    /// once (no record will ever name them).
    pub fn new(rings: Vec<TrackingRing>, log: TrackingLog) -> Self {
        let n = rings.len();
        let build_ids = Arc::new(BuildIds::default());
        build_ids.seed(seeded_files(&log));
        Self {
            rings,
            log,
            lost: vec![0; n],
            malformed: vec![0; n],
            scratch: Vec::new(),
            batch: Vec::new(),
            build_ids,
            modules: None,
            tap: None,
            cgroups: None,
        }
    }

    /// Keeps the cgroups of `table` and those the kernel's CGROUP records
    /// name from now on.
    pub fn track_cgroups(&mut self, table: CgroupTable) {
        self.cgroups = Some(table);
    }

    /// The cgroups known (None: cgroup ids are not recorded).
    pub fn cgroups(&self) -> Option<&CgroupTable> {
        self.cgroups.as_ref()
    }

    /// Keeps every record appended to the log from now on for
    /// [`Tracking::take_tapped`].
    pub fn tap_records(&mut self) {
        self.tap.get_or_insert_with(Tapped::default);
    }

    /// The records appended to the log since the last call, oldest first,
    /// with the build-ids known by now filled in, and how many were dropped
    /// because nobody took them in time.
    pub fn take_tapped(&mut self) -> (Vec<u8>, u64) {
        let Some(tap) = &mut self.tap else {
            return (Vec::new(), 0);
        };
        let mut records = std::mem::take(&mut tap.records);
        let dropped = std::mem::take(&mut tap.dropped);
        self.build_ids.fill_records(&mut records);
        (records, dropped)
    }

    /// Makes each drain also look for kernel modules loaded since `watch`'s
    /// last reading.
    pub fn watch_modules(&mut self, watch: ModuleWatch) {
        self.modules = Some(watch);
    }

    /// Kernel modules found loaded after start, oldest first.
    pub fn loaded_modules(&self) -> &[LoadedModule] {
        self.modules.as_ref().map_or(&[], ModuleWatch::loaded)
    }

    /// No window will start before `window_start_ns` again: forgets the
    /// threads that had exited by then and the module loads no window can
    /// need.
    pub fn no_window_before(&mut self, window_start_ns: u64) {
        self.no_window_before_at_most(window_start_ns, usize::MAX);
    }

    /// [`Self::no_window_before`], forgetting `max` threads of each table
    /// at most; whether none is left (the module loads are pruned then).
    pub fn no_window_before_at_most(&mut self, window_start_ns: u64, max: usize) -> bool {
        let done = self.log.forget_exited_before_at_most(window_start_ns, max);
        if done && let Some(watch) = &mut self.modules {
            watch.prune(window_start_ns);
        }
        done
    }

    pub fn rings(&self) -> &[TrackingRing] {
        &self.rings
    }

    pub fn log(&self) -> &TrackingLog {
        &self.log
    }

    pub fn log_mut(&mut self) -> &mut TrackingLog {
        &mut self.log
    }

    /// Adds `ring` (of a CPU that came online) in place of that CPU's old
    /// ring, which is drained first (its records stay in the log) and
    /// returned. Returns the new ring's index.
    pub fn put_ring(&mut self, ring: TrackingRing) -> (usize, Option<TrackingRing>) {
        self.drain();
        let cpu = ring.cpu();
        match self.rings.iter().position(|r| r.cpu() == cpu) {
            Some(i) => (i, Some(std::mem::replace(&mut self.rings[i], ring))),
            None => {
                self.rings.push(ring);
                self.lost.push(0);
                self.malformed.push(0);
                (self.rings.len() - 1, None)
            }
        }
    }

    /// The build-ids read so far (captures fill their window from them).
    pub fn build_ids(&self) -> Arc<BuildIds> {
        Arc::clone(&self.build_ids)
    }

    pub fn build_id_stats(&self) -> BuildIdStats {
        self.build_ids.stats()
    }

    /// `(cpu, lost records)` per tracking ring.
    pub fn lost_per_cpu(&self) -> Vec<(u32, u64)> {
        self.rings
            .iter()
            .map(|r| r.cpu())
            .zip(self.lost.iter().copied())
            .collect()
    }

    pub fn lost_total(&self) -> u64 {
        self.lost.iter().sum()
    }

    /// Bytes of ring data that were not valid records, per ring.
    pub fn malformed_per_cpu(&self) -> Vec<(u32, u64)> {
        self.rings
            .iter()
            .map(|r| r.cpu())
            .zip(self.malformed.iter().copied())
            .collect()
    }

    /// Empties every ring into the log, this round's records sorted by
    /// time so the log stays (nearly) in time order across CPUs. Returns the
    /// records appended.
    pub fn drain(&mut self) -> usize {
        self.scratch.clear();
        self.batch.clear();
        for (i, ring) in self.rings.iter_mut().enumerate() {
            let start = self.scratch.len();
            ring.drain(&mut self.scratch);
            let mut iter = records(&self.scratch[start..]);
            loop {
                let offset = start + iter.offset();
                let Some(Ok((_, record))) = iter.next() else {
                    break;
                };
                let time = record_time(record).unwrap_or(0);
                match parse(record).map(|p| p.record) {
                    Some(TrackingRecord::Lost { lost, .. }) => {
                        self.lost[i] = self.lost[i].saturating_add(lost);
                    }
                    Some(TrackingRecord::Cgroup { id, path }) => {
                        if let Some(table) = &mut self.cgroups {
                            table.insert(id, &path);
                        }
                    }
                    // Data maps are asked for their files' sake (an
                    // unwinder reads `.eh_frame_hdr` from them); anonymous
                    // ones (heaps, arenas, stacks) are many and useless.
                    Some(TrackingRecord::Mmap { map, .. })
                        if map.prot & EXEC == 0 && !map.filename.starts_with('/') =>
                    {
                        continue;
                    }
                    _ => {}
                }
                self.batch.push((time, offset, record.len()));
            }
            let valid = iter.offset();
            let total = self.scratch.len() - start;
            self.malformed[i] += (total.saturating_sub(valid)) as u64;
        }
        // From what the readers already know; the others are asked for
        // and filled at capture time if their answer has come by then.
        self.build_ids.check_deadlines(std::time::Instant::now());
        for &(_, offset, len) in &self.batch {
            self.build_ids
                .fill_mmap2(&mut self.scratch[offset..offset + len], true);
        }
        // Stable: records of one CPU with equal times keep their order.
        self.batch.sort_by_key(|&(time, _, _)| time);
        for &(_, offset, len) in &self.batch {
            self.log.append(&self.scratch[offset..offset + len]);
            if let Some(tap) = &mut self.tap {
                tap.push(&self.scratch[offset..offset + len]);
            }
        }
        self.batch.len() + self.poll_modules()
    }

    /// Appends the MMAP records of modules loaded since the last poll (at
    /// most one read of /proc/modules per interval).
    fn poll_modules(&mut self) -> usize {
        let Some(watch) = &mut self.modules else {
            return 0;
        };
        let Some(now_ns) = crate::host::sample_clock_now().map(crate::time::SampleTime::as_nanos)
        else {
            return 0;
        };
        self.scratch.clear();
        let n = watch.poll(std::time::Instant::now(), now_ns, &mut self.scratch);
        for (_, record) in records(&self.scratch).map_while(Result::ok) {
            self.log.append(record);
            if let Some(tap) = &mut self.tap {
                tap.push(record);
            }
        }
        n
    }
}

/// The thread that drains [`Tracking`] when the kernel says a ring is at
/// its watermark. Dropping it stops and joins the thread.
pub struct DrainThread {
    stop: Arc<EventFd>,
    /// Why the thread stopped on its own, if it did.
    failure: Arc<Mutex<Option<String>>>,
    /// Drain rounds completed: the watchdog sees the thread alive when it
    /// grows (a round runs at least every `DRAIN_INTERVAL_MS`).
    rounds: Arc<AtomicU64>,
    handle: Option<JoinHandle<()>>,
}

impl DrainThread {
    /// Starts the thread; `after_round` runs after each round with no lock
    /// held (the recorder follows CPU hotplug there, adding rings to the
    /// epoll set).
    pub fn spawn(
        tracking: Arc<Mutex<Tracking>>,
        after_round: Box<dyn FnMut(&Epoll) + Send>,
    ) -> io::Result<Self> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        let stop = Arc::new(EventFd::new()?);
        epoll.add(stop.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, u64::MAX))?;
        {
            let guard = tracking.lock().unwrap_or_else(PoisonError::into_inner);
            for (i, ring) in guard.rings().iter().enumerate() {
                epoll.add(ring.fd(), EpollEvent::new(EpollFlags::EPOLLIN, i as u64))?;
            }
        }
        let stop_in_thread = Arc::clone(&stop);
        let failure = Arc::new(Mutex::new(None));
        let failure_in_thread = Arc::clone(&failure);
        let rounds = Arc::new(AtomicU64::new(0));
        let rounds_in_thread = Arc::clone(&rounds);
        let handle = std::thread::Builder::new()
            .name("tracking-drain".into())
            .spawn(move || {
                if let Err(e) = drain_loop(
                    &epoll,
                    &stop_in_thread,
                    &tracking,
                    &rounds_in_thread,
                    after_round,
                ) {
                    let msg = format!("waiting for tracking ring wakeups failed: {e}");
                    tracing::error!("{msg}; tracking records are now drained only by captures");
                    *failure_in_thread
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = Some(msg);
                }
            })?;
        Ok(Self {
            stop,
            failure,
            rounds,
            handle: Some(handle),
        })
    }

    /// Drain rounds completed so far.
    pub fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Relaxed)
    }

    /// Why the thread stopped by itself (it normally runs until dropped).
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

fn drain_loop(
    epoll: &Epoll,
    stop: &EventFd,
    tracking: &Mutex<Tracking>,
    rounds: &AtomicU64,
    mut after_round: Box<dyn FnMut(&Epoll) + Send>,
) -> nix::Result<()> {
    let mut events = [EpollEvent::empty(); 64];
    loop {
        let n = match epoll.wait(&mut events, EpollTimeout::from(DRAIN_INTERVAL_MS)) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => 0,
            // Cannot wait any more: stop rather than spin; captures still
            // drain on their own.
            Err(e) => return Err(e),
        };
        if events[..n].iter().any(|e| e.data() == u64::MAX) {
            let _ = stop.read();
            return Ok(());
        }
        tracking
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain();
        rounds.fetch_add(1, Ordering::Relaxed);
        after_round(epoll);
    }
}

impl Drop for DrainThread {
    fn drop(&mut self) {
        let _ = self.stop.write(1);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}
