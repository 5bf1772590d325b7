//! Stack copies turned into call chains before they reach the history.
//!
//! A `callchain = "dwarf"` sample carries the user registers and a copy of
//! the user stack (8 KiB by default): kept as it is, a minute of history
//! holds ~50 times what frame-pointer chains take. So each copy is
//! unwound while the process still runs and its files are at hand: by the
//! drain, in the ring, when the process's unwinder is ready
//! ([`StackUnwinder::copy_unwinding`]: no file read, no wait for a lock),
//! else by the writer as it takes the drained records
//! ([`StackUnwinder::add_unwound`], which reads the files), and the sample
//! is written back with the
//! user frames appended to its (kernel) call chain after
//! `PERF_CONTEXT_USER`, the registers' ABI 0 and an empty stack: the
//! record's layout is its event's, and a window cut from the history is an
//! ordinary call-chain snapshot to `perf report` and `snapctl report`.
//! The memory rings' dumps keep the copies.
//!
//! Maps come from the tracking table of the moment (`maps_now`), the
//! files through [`open_mapped_file`] (the path or the process's own link
//! to it, build-id checked), each read on a thread of its own given up
//! after [`READ_DEADLINE`], at most [`MAX_STUCK_READS`] hanging at once,
//! with the tables kept under [`LIMITS`]. A sample whose process the table
//! no longer has keeps its copy (the report unwinds it later).

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use flightrec_unwind::{Limits, MapView, REG_IP, TableSource, UnwindTables, Unwinding};

use super::batch::Batch;
use crate::abi::layout::{RecordLayouts, SampleFields};
use crate::abi::{PERF_CONTEXT_USER, USER_REGS_MASK, mmap_prot, record_type};
use crate::recorder::{MapsNow, Recorder};
use crate::ring::filter::RecordFilter;
use crate::tracking::build_id::{BuildIds, MappedBy, MappedFile, READ_DEADLINE, open_mapped_file};
use crate::tracking::map_state::MapState;
use crate::tracking::maps::Maps;

/// What the daemon's unwinder may read and keep: it lives as long as the
/// history does, so its tables are bounded in sum.
const LIMITS: Limits = Limits {
    max_section_bytes: 32 << 20,
    max_text_bytes: 8 << 20,
    max_cached_bytes: 128 << 20,
    max_modules: u64::MAX,
};

/// Reads of a file that may hang (a FUSE file) at once; past this, files
/// are not read until one returns.
const MAX_STUCK_READS: usize = 4;

/// Address spaces with an unwinder at most (each is a few KiB of
/// modules); past this, all are made again as needed.
const MAX_SPACES: usize = 4096;

/// Counts of what became of the stack copies.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct UnwindCounts {
    /// Samples written with their user frames in the chain.
    pub unwound: u64,
    /// Samples written with their copy (process not known any more).
    pub kept: u64,
}

/// The files of processes, through `/proc` (see the module docs).
#[derive(Default)]
struct ProcFiles {
    /// The maps of the process whose unwinder is being made.
    maps: Vec<MapState>,
    reading: Arc<AtomicUsize>,
}

impl TableSource for ProcFiles {
    fn tables(&mut self, pid: i32, map: &MapView<'_>, limits: &Limits) -> Option<UnwindTables> {
        let state = self.maps.get(map.tag)?;
        let build_id = state.build_id?;
        if self.reading.load(Ordering::Relaxed) >= MAX_STUCK_READS {
            return None;
        }
        let file = MappedFile::of(state);
        let by = MappedBy {
            pid: u32::try_from(pid).ok()?,
            start: state.start,
            end: state.start.saturating_add(state.len),
        };
        let limits = *limits;
        let reading = Arc::clone(&self.reading);
        let (tx, rx) = mpsc::channel();
        reading.fetch_add(1, Ordering::Relaxed);
        let spawned = std::thread::Builder::new()
            .name("history-unwind".into())
            .spawn(move || {
                let tables = open_mapped_file(&file, Some(by), &build_id)
                    .and_then(|f| UnwindTables::read(&f, &limits));
                reading.fetch_sub(1, Ordering::Relaxed);
                let _ = tx.send(tables);
            });
        if spawned.is_err() {
            self.reading.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        rx.recv_timeout(READ_DEADLINE).ok().flatten()
    }
}

/// A process's executable maps, and what they are (the key of the
/// unwinder it shares with every process mapped the same way: the forked
/// workers of one program).
struct ProcessMaps {
    space: u64,
    maps: Vec<MapState>,
    /// The table's maps these were made from: while the table hands back
    /// the same storage, the process has not mapped anything since.
    of: Maps,
    /// Whether every map has its build-id; if not, the maps are made
    /// again at the next round (the file may have been read since).
    complete: bool,
}

impl ProcessMaps {
    fn new(of: Maps, build_ids: &BuildIds, keys: &RandomState) -> Self {
        let maps: Vec<MapState> = of
            .iter()
            .filter(|m| m.prot & mmap_prot::EXEC != 0 && m.filename.starts_with('/'))
            .map(|m| {
                let mut m = m.clone();
                if m.build_id.is_none() {
                    m.build_id = build_ids.for_map(&m);
                }
                m
            })
            .collect();
        ProcessMaps {
            space: fingerprint(keys, &maps),
            complete: maps.iter().all(|m| m.build_id.is_some()),
            maps,
            of,
        }
    }

    /// Whether `ip` is in one of the maps (sorted by start).
    fn covers(&self, ip: u64) -> bool {
        let after = self.maps.partition_point(|m| m.start <= ip);
        after > 0 && ip - self.maps[after - 1].start < self.maps[after - 1].len
    }
}

/// What the unwinder knows of a process, and when it was last checked
/// against the tracking table.
struct Known {
    /// `None`: the table does not know the process.
    maps: Option<Arc<ProcessMaps>>,
    round: u64,
    checked_at: Instant,
}

/// A process's maps are checked against the table again after this
/// long, or at once when a sample's IP is in none of them (it exec'd or
/// mapped a library since): a lookup in the table for each process at
/// every round was a tenth of the writer's time under a load that forks.
const RECHECK_AFTER: Duration = Duration::from_secs(1);

/// Maps made lately, most recent last, at most this many: a process
/// forked from one of them shares its storage until it maps something,
/// so its maps are not made again.
const RECENT_MAPS: usize = 16;

/// Processes not seen for this many rounds are forgotten.
const FORGET_AFTER_ROUNDS: u64 = 64;

/// The history's unwinder: one per history, kept across rounds.
pub(super) struct StackUnwinder {
    unwinding: Unwinding<ProcFiles>,
    /// The processes seen lately, by pid.
    known: HashMap<u32, Known>,
    round_at: Instant,
    /// See [`RECENT_MAPS`].
    recent: Vec<Arc<ProcessMaps>>,
    round: u64,
    /// The keys address spaces are hashed with.
    keys: RandomState,
    /// Where the records that may carry a copy start in a batch.
    long_records: Vec<usize>,
    /// Records shorter than this carry no stack copy (see
    /// [`Self::set_smallest_copy`]).
    smallest_record: usize,
    pub(super) counts: UnwindCounts,
}

/// Where a walk over a ring's part stopped.
enum Walked {
    /// At its end.
    End,
    /// At a record that does not end in the part (where the ring wraps).
    Across(usize),
    /// At a size under a header's: the rest is not records.
    Broken(usize),
}

impl StackUnwinder {
    pub(super) fn new() -> Self {
        StackUnwinder {
            unwinding: Unwinding::new(ProcFiles::default(), LIMITS),
            known: HashMap::new(),
            recent: Vec::new(),
            round: 0,
            round_at: Instant::now(),
            keys: RandomState::new(),
            long_records: Vec::new(),
            smallest_record: 0,
            counts: UnwindCounts::default(),
        }
    }

    /// The smallest stack copy the events take: shorter records (most
    /// of a busy machine's, its context switches) are passed without
    /// looking up their layout.
    pub(super) fn set_smallest_copy(&mut self, bytes: usize) {
        self.smallest_record = bytes;
    }

    /// Appends a ring's records (`first`, then `second` where the ring
    /// wraps) to `out` as the drain takes them out of the ring, each stack
    /// copy of a process whose unwinder is ready replaced by its user
    /// frames (as [`Self::add_unwound`] does): its maps checked against the
    /// tracking table less than [`RECHECK_AFTER`] ago (by `maps_now`, which
    /// does not wait for the table) and covering the sampled IP, its
    /// files' tables read. Nothing here reads a file or waits for a lock;
    /// every other record is copied as it is, and the writer unwinds the
    /// copies among them. Unwound where it lies in
    /// the ring, a sample's 8 KiB copy is read where framehop looks, not
    /// copied twice over (out of the ring, then by the writer's walk): that
    /// copy was a seventh of the daemon's CPU with dwarf stacks.
    pub(super) fn copy_unwinding(
        &mut self,
        layouts: &RecordLayouts,
        first: &[u8],
        second: &[u8],
        maps_now: &mut dyn FnMut(&[u32]) -> Option<MapsNow>,
        out: &mut Vec<u8>,
    ) {
        out.reserve(first.len() + second.len());
        let now = Instant::now();
        // The records of `first`, the one across the ring's end (copied as
        // it is: rare), then those of `second` after it.
        let from = match self.copy_part(layouts, first, now, maps_now, out) {
            Walked::End => 0,
            Walked::Across(at) => {
                let tail = &first[at..];
                out.extend_from_slice(tail);
                let header: Vec<u8> = tail.iter().chain(second).take(8).copied().collect();
                let size = header
                    .get(6..8)
                    .map(|s| u16::from_le_bytes([s[0], s[1]]) as usize);
                match size {
                    Some(size) if size >= 8 && size - tail.len() <= second.len() => {
                        size - tail.len()
                    }
                    _ => second.len(),
                }
            }
            Walked::Broken(at) => {
                out.extend_from_slice(&first[at..]);
                second.len()
            }
        };
        out.extend_from_slice(&second[..from]);
        match self.copy_part(layouts, &second[from..], now, maps_now, out) {
            Walked::End => {}
            Walked::Across(at) | Walked::Broken(at) => out.extend_from_slice(&second[from + at..]),
        }
    }

    /// Appends the whole records of `part` to `out` (stack copies unwound
    /// where ready), up to where the walk stopped.
    fn copy_part(
        &mut self,
        layouts: &RecordLayouts,
        part: &[u8],
        now: Instant,
        maps_now: &mut dyn FnMut(&[u32]) -> Option<MapsNow>,
        out: &mut Vec<u8>,
    ) -> Walked {
        let min = self.smallest_record.max(8);
        let (mut at, mut copied) = (0, 0);
        let stop = loop {
            if at == part.len() {
                break Walked::End;
            }
            let Some(header) = part.get(at..at + 8) else {
                break Walked::Across(at);
            };
            let size = u16::from_le_bytes([header[6], header[7]]) as usize;
            if size < 8 {
                break Walked::Broken(at);
            }
            let Some(record) = part.get(at..at + size) else {
                break Walked::Across(at);
            };
            if size >= min
                && let Some((fields, frames)) = self.unwind_ready(layouts, record, now, maps_now)
            {
                out.extend_from_slice(&part[copied..at]);
                with_user_frames(record, &fields, &frames, out);
                copied = at + size;
                self.counts.unwound += 1;
            }
            at += size;
        };
        out.extend_from_slice(&part[copied..at]);
        stop
    }

    /// The user frames of `record` if it is a stack copy whose process's
    /// unwinder is ready (see [`Self::copy_unwinding`]).
    fn unwind_ready(
        &mut self,
        layouts: &RecordLayouts,
        record: &[u8],
        now: Instant,
        maps_now: &mut dyn FnMut(&[u32]) -> Option<MapsNow>,
    ) -> Option<(SampleFields, Vec<u64>)> {
        let (pid, fields) = stack_copy(record, layouts)?;
        let ip = user_reg(record, &fields, REG_IP)?;
        let fresh = |k: &Known| {
            now.saturating_duration_since(k.checked_at) < RECHECK_AFTER
                && k.maps.as_ref().is_some_and(|m| m.covers(ip))
        };
        if !self.known.get(&pid).is_some_and(fresh) {
            // A process forked since (or due): its maps are looked up
            // unless the tracking state is in use; a fork shares the
            // unwinder of its parent.
            self.check_maps(std::iter::once((pid, Some(ip))), now, &mut *maps_now);
        }
        let known = self.known.get(&pid).filter(|k| fresh(k))?;
        let maps = known.maps.as_ref()?;
        if !self.unwinding.knows(maps.space) {
            return None;
        }
        let (stack_at, len) = fields.user_stack?;
        let stack = record.get(stack_at..stack_at + len)?;
        let dyn_size = get_u64(record, stack_at + len);
        let reg = |r: u64| user_reg(record, &fields, r);
        let frames = self.unwinding.unwind(
            maps.space,
            i32::try_from(pid).ok()?,
            reg,
            stack,
            dyn_size,
            Vec::new,
        )?;
        (!frames.is_empty()).then_some((fields, frames))
    }

    /// A new round; the maps of processes not seen for a while are
    /// forgotten.
    pub(super) fn begin_round(&mut self) {
        self.round += 1;
        self.round_at = Instant::now();
        if self.round.is_multiple_of(FORGET_AFTER_ROUNDS) {
            let round = self.round;
            self.known
                .retain(|_, k| round - k.round < FORGET_AFTER_ROUNDS);
        }
    }

    /// Appends `records` to `batch` with every stack copy the unwinder
    /// could unwind replaced by user frames in the chain, in one walk over
    /// them (a busy machine's chunks are mostly small records: context
    /// switches). Returns the samples its LOST records say were dropped.
    pub(super) fn add_unwound(
        &mut self,
        batch: &mut Batch,
        records: &[u8],
        layouts: &RecordLayouts,
        recorder: &Recorder,
    ) -> u64 {
        let mut long = std::mem::take(&mut self.long_records);
        long.clear();
        let mut kept =
            RecordFilter::all(layouts).scan_noting(records, self.smallest_record, &mut long);
        // Whole records only, as the batch's own walk keeps them.
        let end = kept
            .corruption
            .as_ref()
            .map_or(records.len(), |c| c.offset as usize);
        let copies: Vec<(usize, u32, SampleFields)> = long
            .iter()
            .filter_map(|&at| {
                let (pid, fields) = stack_copy(record_at(records, at), layouts)?;
                Some((at, pid, fields))
            })
            .collect();
        self.long_records = long;
        if !copies.is_empty() {
            self.check_maps(
                copies.iter().map(|(at, pid, fields)| {
                    let ip = user_reg(record_at(records, *at), fields, REG_IP);
                    (*pid, ip)
                }),
                self.round_at,
                |pids| Some(recorder.maps_now(pids)),
            );
        }
        if self.unwinding.spaces() > MAX_SPACES {
            self.unwinding.forget_all();
        }
        let known = std::mem::take(&mut self.known);
        let out = &mut batch.records;
        let start = out.len();
        let mut copied = 0;
        for (at, pid, fields) in copies {
            let record = record_at(records, at);
            let Some(Known {
                maps: Some(maps), ..
            }) = known.get(&pid)
            else {
                self.counts.kept += 1;
                continue;
            };
            let frames = self.unwind(pid, maps, record, &fields);
            let Some(frames) = frames.filter(|f| !f.is_empty()) else {
                self.counts.kept += 1;
                continue;
            };
            out.extend_from_slice(&records[copied..at]);
            with_user_frames(record, &fields, &frames, out);
            copied = at + record.len();
            self.counts.unwound += 1;
        }
        out.extend_from_slice(&records[copied..end]);
        // The same records, some shorter.
        kept.bytes = (out.len() - start) as u64;
        batch.note_written_from(start);
        self.known = known;
        batch.kept.merge(&kept);
        kept.lost
    }

    /// Checks against the tracking table the maps of the processes of
    /// `samples` (pid and user IP) not checked this round that are due
    /// (see [`RECHECK_AFTER`]): kept while the table's storage is the
    /// same, made again when the process mapped something since.
    fn check_maps(
        &mut self,
        samples: impl Iterator<Item = (u32, Option<u64>)>,
        now: Instant,
        maps_now: impl FnOnce(&[u32]) -> Option<MapsNow>,
    ) {
        let round = self.round;
        let due = |k: &Known, ip: Option<u64>| {
            k.round != round
                && (now.duration_since(k.checked_at) >= RECHECK_AFTER
                    || match (&k.maps, ip) {
                        (Some(maps), Some(ip)) => !maps.covers(ip),
                        _ => true,
                    })
        };
        let mut unchecked: Vec<u32> = samples
            .filter(|&(pid, ip)| self.known.get(&pid).is_none_or(|k| due(k, ip)))
            .map(|(pid, _)| pid)
            .collect();
        if unchecked.is_empty() {
            return;
        }
        unchecked.sort_unstable();
        unchecked.dedup();
        let Some(table) = maps_now(&unchecked) else {
            return;
        };
        let mut found = table.maps.into_iter().peekable();
        for pid in unchecked {
            // Both sorted by pid: `found` is `unchecked` less the unknown.
            let current = found.next_if(|(p, _)| *p == pid).map(|(_, maps)| maps);
            let known = self.known.entry(pid).or_insert(Known {
                maps: None,
                round,
                checked_at: now,
            });
            (known.round, known.checked_at) = (round, now);
            known.maps = current.map(|of| match known.maps.take() {
                Some(kept) if kept.complete && kept.of.shares_storage_with(&of) => kept,
                _ => match self
                    .recent
                    .iter()
                    .rev()
                    .find(|r| r.complete && r.of.shares_storage_with(&of))
                {
                    Some(shared) => Arc::clone(shared),
                    None => {
                        let made = Arc::new(ProcessMaps::new(of, &table.build_ids, &self.keys));
                        if self.recent.len() == RECENT_MAPS {
                            self.recent.remove(0);
                        }
                        self.recent.push(Arc::clone(&made));
                        made
                    }
                },
            });
        }
    }

    fn unwind(
        &mut self,
        pid: u32,
        process: &ProcessMaps,
        record: &[u8],
        fields: &SampleFields,
    ) -> Option<Vec<u64>> {
        let maps = &process.maps;
        let (stack_at, len) = fields.user_stack?;
        let reg = |r: u64| user_reg(record, fields, r);
        let stack = record.get(stack_at..stack_at + len)?;
        let dyn_size = get_u64(record, stack_at + len);
        let pid = i32::try_from(pid).ok()?;
        if !self.unwinding.knows(process.space) {
            self.unwinding.source_mut().maps = maps.to_vec();
        }
        self.unwinding
            .unwind(process.space, pid, reg, stack, dyn_size, || {
                maps.iter()
                    .enumerate()
                    .filter_map(|(tag, m)| {
                        Some(MapView {
                            start: m.start,
                            end: m.start.saturating_add(m.len),
                            pgoff: m.pgoff,
                            path: &m.filename,
                            build_id: m.build_id.as_ref()?.as_bytes(),
                            tag,
                        })
                    })
                    .collect()
            })
    }
}

/// The pid and fields of a sample that carries user registers and a
/// stack copy.
fn stack_copy(record: &[u8], layouts: &RecordLayouts) -> Option<(u32, SampleFields)> {
    let layout = layouts.layout(record)?;
    let fields = layout.callchain_and_raw(record)?;
    let has_copy = matches!(fields.user_stack, Some((_, len)) if len > 0)
        && matches!(fields.user_regs, Some((_, n)) if n > 0)
        && fields.callchain.is_some();
    let pid = layout.sample_pid(record)?;
    (has_copy && pid != 0).then_some((pid, fields))
}

/// What a process's unwinder depends on: its maps and their build-ids,
/// hashed with keys of this daemon's own (a process cannot aim its maps
/// at another's unwinder).
fn fingerprint(keys: &RandomState, maps: &[MapState]) -> u64 {
    let mut h = keys.build_hasher();
    for m in maps {
        (m.start, m.len, m.pgoff, m.build_id).hash(&mut h);
    }
    h.finish()
}

/// User register `r` of a sample that carries them.
fn user_reg(record: &[u8], fields: &SampleFields, r: u64) -> Option<u64> {
    let (regs_at, n) = fields.user_regs?;
    if r >= 64 || USER_REGS_MASK & (1 << r) == 0 {
        return None;
    }
    let index = (USER_REGS_MASK & ((1u64 << r) - 1)).count_ones() as usize;
    (index < n).then(|| get_u64(record, regs_at + 8 * index))
}

fn record_at(records: &[u8], at: usize) -> &[u8] {
    let size = u16::from_le_bytes([records[at + 6], records[at + 7]]) as usize;
    &records[at..at + size]
}

fn get_u64(bytes: &[u8], at: usize) -> u64 {
    bytes
        .get(at..at + 8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
}

/// Appends `record` (a SAMPLE whose `fields` are found) to `out` with
/// `frames` after its call chain's entries, behind `PERF_CONTEXT_USER`,
/// and without its user registers (ABI 0) and stack copy (size 0); every
/// other field as it was.
pub(super) fn with_user_frames(
    record: &[u8],
    fields: &SampleFields,
    frames: &[u64],
    out: &mut Vec<u8>,
) {
    let (Some((chain_at, nr)), Some((regs_at, _)), Some((stack_at, len))) =
        (fields.callchain, fields.user_regs, fields.user_stack)
    else {
        out.extend_from_slice(record);
        return;
    };
    let start = out.len();
    let chain_end = chain_at + 8 + 8 * nr;
    let stack_end = if len == 0 {
        stack_at
    } else {
        stack_at + len + 8
    };
    out.extend_from_slice(&record[..chain_at]);
    let entries = nr + 1 + frames.len();
    out.extend_from_slice(&(entries as u64).to_le_bytes());
    out.extend_from_slice(&record[chain_at + 8..chain_end]);
    out.extend_from_slice(&PERF_CONTEXT_USER.to_le_bytes());
    for f in frames {
        out.extend_from_slice(&f.to_le_bytes());
    }
    // RAW (if any) sits between the chain and the registers' ABI word.
    out.extend_from_slice(&record[chain_end..regs_at - 8]);
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&record[stack_end..]);
    let size = out.len() - start;
    match u16::try_from(size) {
        Ok(size) => out[start + 6..start + 8].copy_from_slice(&size.to_le_bytes()),
        Err(_) => {
            // A chain too long for a record: the sample stays as it was.
            out.truncate(start);
            out.extend_from_slice(record);
        }
    }
    debug_assert_eq!(
        u16::from_le_bytes([record[0], record[1]]),
        record_type::SAMPLE as u16
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::abi::sample;

    const DWARF: u64 = sample::IDENTIFIER
        | sample::IP
        | sample::TID
        | sample::TIME
        | sample::CPU
        | sample::PERIOD
        | sample::CALLCHAIN
        | sample::REGS_USER
        | sample::STACK_USER
        | sample::CGROUP;

    /// A dwarf sample: kernel chain of `kernel` entries, three registers,
    /// a 16-byte stack copy of which 8 bytes hold stack, cgroup 77.
    fn sample(kernel: &[u64]) -> Vec<u8> {
        let mut words: Vec<u64> = vec![
            5,        // identifier
            0x401000, // ip
            (42 << 32) | 42,
            1_000,  // time
            1,      // cpu
            10_000, // period
            kernel.len() as u64,
        ];
        words.extend_from_slice(kernel);
        words.extend_from_slice(&[2, 0xa, 0xb, 0xc]); // ABI 64, regs
        words.extend_from_slice(&[16, 0x1111, 0x2222, 8]); // size, stack, dyn_size
        words.push(77); // cgroup
        let mut r = Vec::new();
        r.extend_from_slice(&record_type::SAMPLE.to_le_bytes());
        r.extend_from_slice(&0u16.to_le_bytes());
        r.extend_from_slice(&((8 + 8 * words.len()) as u16).to_le_bytes());
        for w in words {
            r.extend_from_slice(&w.to_le_bytes());
        }
        r
    }

    #[test]
    fn frames_follow_the_kernel_chain_and_the_copy_goes() {
        let mut layouts = RecordLayouts::default();
        layouts.insert_with_user_regs(5, DWARF, 0b111);
        let kernel = [crate::abi::PERF_CONTEXT_KERNEL, 0xffff_ffff_8100_0000];
        let record = sample(&kernel);
        let layout = layouts.layout(&record).unwrap();
        let fields = layout.callchain_and_raw(&record).unwrap();
        let mut out = vec![0xee]; // what came before stays
        with_user_frames(&record, &fields, &[0x401000, 0x401234, 0x401500], &mut out);
        assert_eq!(out[0], 0xee);
        let new = &out[1..];
        let size = u16::from_le_bytes([new[6], new[7]]) as usize;
        assert_eq!(size, new.len());
        assert_eq!(size % 8, 0);
        let got = layouts.layout(new).unwrap().callchain_and_raw(new).unwrap();
        let (chain_at, nr) = got.callchain.unwrap();
        let chain: Vec<u64> = (0..nr)
            .map(|i| get_u64(new, chain_at + 8 + 8 * i))
            .collect();
        assert_eq!(
            chain,
            vec![
                kernel[0],
                kernel[1],
                PERF_CONTEXT_USER,
                0x401000,
                0x401234,
                0x401500
            ]
        );
        assert_eq!(got.user_regs.map(|r| r.1), Some(0));
        assert_eq!(got.user_stack.map(|s| s.1), Some(0));
        // The fields before the chain and the cgroup after the copy.
        assert_eq!(new[8..8 + 48], record[8..8 + 48]);
        assert_eq!(layouts.sample_cgroup(new), Some(77));
        assert_eq!(layouts.sample_pid(new), Some(42));
    }

    /// Drains `ring`'s bytes as a ring holds them when its end falls at
    /// `split`, no process's maps known, into `out`.
    fn drain_split(
        unwinder: &mut StackUnwinder,
        layouts: &RecordLayouts,
        ring: &[u8],
        split: usize,
        out: &mut Vec<u8>,
    ) {
        let (before, after) = ring.split_at(split);
        unwinder.copy_unwinding(layouts, before, after, &mut |_| None, out);
    }

    #[test]
    fn records_drained_across_the_rings_end_are_copied_whole_and_in_order() {
        let mut layouts = RecordLayouts::default();
        layouts.insert_with_user_regs(5, DWARF, 0b111);
        let small = |n: u8| {
            let mut r = vec![n; 24];
            r[0..4].copy_from_slice(&record_type::COMM.to_le_bytes());
            r[4..8].copy_from_slice(&[0, 0, 24, 0]);
            r
        };
        let mut ring = Vec::new();
        for n in 0..3 {
            ring.extend(small(n));
            ring.extend(sample(&[
                crate::abi::PERF_CONTEXT_KERNEL,
                0xffff_8000 + n as u64,
            ]));
        }
        ring.extend(small(9));
        // A process the unwinder does not know: every copy stays, and the
        // records come out as they went in wherever the ring wraps.
        for split in 0..=ring.len() {
            let mut unwinder = StackUnwinder::new();
            unwinder.set_smallest_copy(16);
            let mut out = vec![0xee];
            drain_split(&mut unwinder, &layouts, &ring, split, &mut out);
            assert_eq!(out[0], 0xee);
            assert_eq!(&out[1..], &ring[..], "split at {split}");
            assert_eq!(unwinder.counts, UnwindCounts::default());
        }
        let unwinder = &mut StackUnwinder::new();
        // A size under a header's: the rest is copied as it is.
        let mut broken = small(1);
        broken.extend([0u8; 8]);
        broken.extend(small(2));
        for split in [0, 10, 24, 30, broken.len()] {
            let mut out = Vec::new();
            drain_split(unwinder, &layouts, &broken, split, &mut out);
            assert_eq!(out, broken, "split at {split}");
        }
    }

    #[test]
    fn maps_cover_the_addresses_inside_them_only() {
        let map = |start: u64, len: u64| MapState {
            start,
            len,
            ..MapState::default()
        };
        let maps = ProcessMaps {
            space: 0,
            maps: vec![map(0x1000, 0x1000), map(0x5000, 0x10)],
            of: Maps::new(),
            complete: true,
        };
        for (ip, covered) in [
            (0xfff, false),
            (0x1000, true),
            (0x1fff, true),
            (0x2000, false),
            (0x4fff, false),
            (0x500f, true),
            (0x5010, false),
            (u64::MAX, false),
        ] {
            assert_eq!(maps.covers(ip), covered, "{ip:#x}");
        }
    }

    #[test]
    fn a_sample_in_user_mode_gets_a_chain_of_its_own() {
        let mut layouts = RecordLayouts::default();
        layouts.insert_with_user_regs(5, DWARF, 0b111);
        let record = sample(&[]);
        let fields = layouts
            .layout(&record)
            .unwrap()
            .callchain_and_raw(&record)
            .unwrap();
        let mut out = Vec::new();
        with_user_frames(&record, &fields, &[0x401000], &mut out);
        let got = layouts
            .layout(&out)
            .unwrap()
            .callchain_and_raw(&out)
            .unwrap();
        let (chain_at, nr) = got.callchain.unwrap();
        assert_eq!(nr, 2);
        assert_eq!(get_u64(&out, chain_at + 8), PERF_CONTEXT_USER);
        assert_eq!(get_u64(&out, chain_at + 16), 0x401000);
        assert!(out.len() < record.len());
    }
}
