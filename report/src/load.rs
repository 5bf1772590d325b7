//! Reads a snapshot (plain or zstd-compressed perf.data) into a
//! [`Snapshot`]: one pass over the records in time order that keeps each
//! process's maps and names as perf does (FORK copies, an exec clears, MMAP
//! adds), so every frame is looked up in the maps of its own moment.
//!
//! A snapshot may come from another host (`snapctl fleet fetch`), so the
//! parser (`linux-perf-data`, which allocates what a header claims and
//! decompresses without bound) never sees the file itself: it reads
//! `flightrec_perfdata`'s [`PlainFile`] view of it, whose sections were
//! checked against the file and whose records were found to decompress to
//! at most the limit before the first one is parsed.

use std::collections::{BTreeMap, HashMap};
use std::io::BufReader;
use std::path::Path;

use flightrec_files::{Links, open_regular};
use flightrec_perfdata::reader::{FileLayout, PlainFile, ReadError, default_limit};
use linux_perf_data::linux_perf_event_reader::{
    CommOrExecRecord, CpuMode, EventRecord, ForkOrExitRecord, Mmap2FileId, PerfEventType,
    RecordType, SampleRecord, SamplingPolicy,
};
use linux_perf_data::{DsoKey, Feature, PerfFileReader, PerfFileRecord};

use crate::ReportError;
use crate::cgroups::{self, CgroupTable};
use crate::model::*;
use crate::symbols::SymbolSources;
use crate::tracefmt::{SwitchFields, SwitchRecord};
use crate::unwind::{LiveMapView, Unwinding};

/// Call chain entries at or above this are context markers
/// (`PERF_CONTEXT_KERNEL`, `PERF_CONTEXT_USER`, ...), not addresses.
const PERF_CONTEXT_MAX: u64 = -4095i64 as u64;
const PERF_CONTEXT_KERNEL: u64 = -128i64 as u64;
const PERF_CONTEXT_USER: u64 = -512i64 as u64;
/// `prev_state` bits of a task that is exiting (EXIT_DEAD, EXIT_ZOMBIE).
const EXITING: u64 = 0x10 | 0x20;
/// Low `prev_state` bits: any set means the task slept (0, or 0x100
/// TASK_REPORT_MAX on 6.x kernels, means it was preempted runnable).
const SLEEP_STATES: u64 = 0xff;

/// Reads the snapshot at `path`, whose records may take at most
/// `max_decompressed` bytes once decompressed (default: [`default_limit`]
/// of the file's size).
pub fn read(path: &Path, max_decompressed: Option<u64>) -> Result<Snapshot, ReportError> {
    read_unwinding(path, max_decompressed, None)
}

/// [`read`], unwinding the user stacks that samples carry
/// (`callchain = "dwarf"`) from the files `sources` finds; without
/// sources such a sample's stack is its kernel part and sampled address.
pub fn read_unwinding(
    path: &Path,
    max_decompressed: Option<u64>,
    sources: Option<&SymbolSources>,
) -> Result<Snapshot, ReportError> {
    let err = |e: &dyn std::fmt::Display| ReportError::Snapshot {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let (mut file, md) = open_regular(path, Links::Follow).map_err(|e| err(&e))?;
    let limit = max_decompressed.unwrap_or_else(|| default_limit(md.len()));
    let read_err = |e: ReadError| match e {
        ReadError::DecompressedTooLarge { limit } => ReportError::TooLarge {
            path: path.to_path_buf(),
            limit,
            file_len: md.len(),
            given: max_decompressed.is_some(),
        },
        e => err(&e),
    };
    let layout = FileLayout::read(&mut file).map_err(read_err)?;
    let plain = PlainFile::open(file, layout, limit).map_err(read_err)?;
    // The limit or torn data met while parsing (the file changed since it
    // was checked) is said as itself, not as the parser's I/O error.
    let parse_err = |e: linux_perf_data::Error| match e {
        linux_perf_data::Error::IoError(io) => read_err(ReadError::from_io(io)),
        e => err(&e),
    };
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(BufReader::with_capacity(256 << 10, plain))
        .map_err(parse_err)?;

    let mut loader = Loader {
        unwind: sources.map(Unwinding::new),
        ..Loader::default()
    };
    let snap = &mut loader.snap;
    snap.host = perf_file
        .hostname()
        .ok()
        .flatten()
        .unwrap_or("")
        .to_string();
    snap.os_release = perf_file
        .os_release()
        .ok()
        .flatten()
        .unwrap_or("")
        .to_string();
    snap.nr_cpus = perf_file
        .nr_cpus()
        .ok()
        .flatten()
        .map_or(0, |n| n.nr_cpus_available);
    snap.clock = perf_file
        .clock_data()
        .ok()
        .flatten()
        .map(|c| (c.wall_clock_ns, c.clockid_time_ns));
    for (key, info) in perf_file.build_ids().unwrap_or_default() {
        if key == DsoKey::Kernel {
            snap.kernel_build_id = Some(info.build_id.clone());
        }
        loader.build_ids.insert(
            String::from_utf8_lossy(&info.path).into_owned(),
            info.build_id,
        );
    }
    let switch_fields = perf_file
        .feature_section_data(Feature::TRACING_DATA)
        .and_then(SwitchFields::from_tracing_data);
    for desc in perf_file.event_attributes() {
        let name = desc.name().unwrap_or("?").to_string();
        let attr = &desc.attr;
        // A tracepoint records every event (perf gives it -F's frequency
        // flag too); the dummy tracking event records none.
        let sampled = !matches!(attr.type_, PerfEventType::Tracepoint(_))
            && !name.starts_with("dummy")
            && match attr.sampling_policy {
                SamplingPolicy::Frequency(_) => true,
                SamplingPolicy::Period(p) => p.get() > 1,
                SamplingPolicy::NoSampling => false,
            };
        loader.snap.events.push(EventInfo {
            is_sched_switch: name == "sched:sched_switch",
            callchain: attr
                .sample_format
                .contains(linux_perf_data::linux_perf_event_reader::SampleFormat::CALLCHAIN),
            sampled,
            name,
            samples: 0,
        });
    }
    if switch_fields.is_none() && loader.snap.events.iter().any(|e| e.is_sched_switch) {
        loader
            .snap
            .notes
            .push("the file has no sched_switch format: no timeline, no off-CPU time".into());
    }
    loader.switch_fields = switch_fields;

    while let Some(record) = record_iter.next_record(&mut perf_file).map_err(parse_err)? {
        let PerfFileRecord::EventRecord { attr_index, record } = record else {
            continue;
        };
        let time = record.timestamp();
        let cpu = record.common_data().ok().and_then(|c| c.cpu);
        if let (Some(t), Some(c)) = (time, cpu) {
            loader.seen(c, t);
        }
        if record.record_type == RecordType::LOST_SAMPLES {
            let lost = record.data.as_slice();
            if let Some(b) = lost.get(..8) {
                loader.snap.lost_samples += u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
            }
            continue;
        }
        if record.record_type == RecordType::CGROUP {
            loader.cgroups.record(&record.data.as_slice());
            continue;
        }
        let Ok(parsed) = record.parse() else {
            continue;
        };
        let t = time.unwrap_or(0);
        match parsed {
            EventRecord::Sample(s) => {
                let cgroup = cgroups::sample_cgroup(
                    record.parse_info.sample_format.bits(),
                    &record.data.as_slice(),
                );
                loader.sample(attr_index, &s, t, cgroup);
            }
            EventRecord::Comm(c) => loader.comm(&c),
            EventRecord::Fork(f) => loader.fork(&f),
            EventRecord::Exit(e) => loader.exit(&e),
            EventRecord::Mmap(m) => {
                let path = String::from_utf8_lossy(&m.path.as_slice()).into_owned();
                loader.mmap(m.pid, m.address, m.length, m.page_offset, path, None);
            }
            EventRecord::Mmap2(m) => {
                let path = String::from_utf8_lossy(&m.path.as_slice()).into_owned();
                let build_id = match &m.file_id {
                    Mmap2FileId::BuildId(b) => Some(b.clone()),
                    Mmap2FileId::InodeAndVersion(_) => None,
                };
                loader.mmap(m.pid, m.address, m.length, m.page_offset, path, build_id);
            }
            EventRecord::Lost(l) => {
                *loader
                    .snap
                    .lost_records
                    .entry(cpu.unwrap_or(0))
                    .or_default() += l.count;
            }
            _ => {}
        }
    }
    Ok(loader.finish())
}

/// A map as a process has it now.
#[derive(Debug, Clone, Copy)]
struct LiveMap {
    end: u64,
    pgoff: u64,
    map: MapId,
}

type AddressSpace = BTreeMap<u64, LiveMap>;

/// What is pending for a thread that switched out.
#[derive(Debug, Clone, Copy)]
struct SwitchedOut {
    thread: ThreadId,
    start: u64,
    stack: StackId,
    sleeping: bool,
    cgroup: Option<CgroupIndex>,
}

impl SwitchedOut {
    /// Its off-CPU time, ended at `end`.
    fn until(self, end: u64) -> OffCpu {
        OffCpu {
            thread: self.thread,
            start: self.start,
            end,
            stack: self.stack,
            sleeping: self.sleeping,
            cgroup: self.cgroup,
        }
    }
}

#[derive(Default)]
struct Loader {
    snap: Snapshot,
    build_ids: HashMap<String, Vec<u8>>,
    switch_fields: Option<SwitchFields>,
    /// tid -> (pid, comm).
    names: HashMap<i32, (i32, String)>,
    spaces: HashMap<i32, AddressSpace>,
    kernel: AddressSpace,
    threads: HashMap<Thread, ThreadId>,
    frames: HashMap<FrameKey, FrameId>,
    stacks: HashMap<Vec<FrameId>, StackId>,
    maps: HashMap<(String, u64, u64, u64), MapId>,
    /// CPU -> the thread running since.
    running: HashMap<u32, (ThreadId, u64)>,
    switched_out: HashMap<i32, SwitchedOut>,
    cgroups: CgroupTable,
    /// Unwinds the user stacks samples carry, when asked to.
    unwind: Option<Unwinding>,
}

impl Loader {
    fn seen(&mut self, cpu: u32, t: u64) {
        // perf's synthesized records (the state at its start) have time 0.
        if t == 0 {
            return;
        }
        let c = self.snap.coverage.entry(cpu).or_insert((t, t));
        c.0 = c.0.min(t);
        c.1 = c.1.max(t);
        if self.snap.first_ns == 0 || t < self.snap.first_ns {
            self.snap.first_ns = t;
        }
        self.snap.last_ns = self.snap.last_ns.max(t);
    }

    fn thread(&mut self, pid: i32, tid: i32) -> ThreadId {
        let comm = match self.names.get(&tid) {
            Some((_, c)) => c.clone(),
            None => format!(":{tid}"),
        };
        self.intern_thread(Thread { pid, tid, comm })
    }

    fn intern_thread(&mut self, t: Thread) -> ThreadId {
        let next = self.snap.threads.len() as ThreadId;
        *self.threads.entry(t.clone()).or_insert_with(|| {
            self.snap.threads.push(t);
            next
        })
    }

    fn comm(&mut self, c: &CommOrExecRecord) {
        let comm = String::from_utf8_lossy(&c.name.as_slice()).into_owned();
        if c.is_execve {
            self.spaces.remove(&c.pid);
        }
        self.names.insert(c.tid, (c.pid, comm));
    }

    fn fork(&mut self, f: &ForkOrExitRecord) {
        let parent = self.names.get(&f.ptid).cloned();
        if let Some((_, comm)) = parent {
            self.names.insert(f.tid, (f.pid, comm));
        }
        if f.pid != f.ppid
            && let Some(space) = self.spaces.get(&f.ppid).cloned()
        {
            self.spaces.insert(f.pid, space);
        }
    }

    fn exit(&mut self, e: &ForkOrExitRecord) {
        self.switched_out.remove(&e.tid);
    }

    fn mmap(
        &mut self,
        pid: i32,
        start: u64,
        len: u64,
        pgoff: u64,
        path: String,
        bid: Option<Vec<u8>>,
    ) {
        let end = start.saturating_add(len);
        let build_id = bid
            .or_else(|| self.build_ids.get(&path).cloned())
            .or_else(|| {
                // The kernel's map is `[kernel.kallsyms]_text`, its table
                // entry `[kernel.kallsyms]`.
                path.starts_with("[kernel.kallsyms]")
                    .then(|| self.snap.kernel_build_id.clone())
                    .flatten()
            });
        let key = (path.clone(), start, end, pgoff);
        let next = self.snap.maps.len() as MapId;
        let map = *self.maps.entry(key).or_insert_with(|| {
            self.snap.maps.push(MapInfo {
                path: path.clone(),
                build_id,
                start,
                end,
                pgoff,
            });
            next
        });
        let kernel = pid == -1;
        if !kernel && let Some(unwind) = &mut self.unwind {
            unwind.forget(pid);
        }
        if kernel && path.starts_with("[kernel.kallsyms]") {
            self.snap.kernel_text = Some(pgoff);
        }
        let space = if kernel {
            &mut self.kernel
        } else {
            self.spaces.entry(pid).or_default()
        };
        // A new map replaces what it overlaps; the parts of an old map
        // before and after it stay (as perf keeps them).
        let overlapping: Vec<(u64, LiveMap)> = space
            .range(..end)
            .filter(|(s, m)| **s < end && m.end > start)
            .map(|(s, m)| (*s, *m))
            .collect();
        for (s, old) in overlapping {
            space.remove(&s);
            if s < start {
                space.insert(s, LiveMap { end: start, ..old });
            }
            if old.end > end {
                let pgoff = old.pgoff + (end - s);
                space.insert(end, LiveMap { pgoff, ..old });
            }
        }
        space.insert(start, LiveMap { end, pgoff, map });
    }

    /// A sample, and the id of the cgroup it was taken in, if recorded.
    fn sample(&mut self, attr_index: usize, s: &SampleRecord, t: u64, cgroup: Option<u64>) {
        let Some(event) = self.snap.events.get_mut(attr_index) else {
            return;
        };
        event.samples += 1;
        let is_switch = event.is_sched_switch;
        let pid = s.pid.unwrap_or(-1);
        let tid = s.tid.unwrap_or(-1);
        let cpu = s.cpu.unwrap_or(0);
        let stack = self.stack(pid, s);
        let cgroup = cgroup.map(|id| self.cgroups.intern(id));
        if is_switch {
            let rec = match (&self.switch_fields, &s.raw) {
                (Some(f), Some(raw)) => f.parse(&raw.as_slice()),
                _ => None,
            };
            if let Some(rec) = rec {
                self.switch(cpu, t, pid, &rec, stack, cgroup);
            }
            return;
        }
        self.ran(tid, t);
        let thread = self.thread(pid, tid);
        self.snap.samples.push(Sample {
            time: t,
            cpu,
            event: attr_index as u16,
            thread,
            stack,
            period: s.period.unwrap_or(1),
            cgroup,
        });
    }

    /// Thread `tid` was running at `t`. Its switch-in ends its off-CPU
    /// time, but the kernel does not always record it: on some machines
    /// (virtual CPUs among them) a CPU's switches out of its idle task never
    /// reach the rings, so a thread woken on an idle CPU has no switch-in.
    /// Its first record after its switch-out (a sample, or its next
    /// switch-out) then ends that time, rather than its off-CPU time
    /// being lost.
    fn ran(&mut self, tid: i32, t: u64) {
        if tid <= 0 {
            return;
        }
        if let Some(out) = self.switched_out.get(&tid).copied()
            && t > out.start
        {
            self.switched_out.remove(&tid);
            self.snap.off_cpu.push(out.until(t));
        }
    }

    /// A switch; `cgroup` is the one its record was taken in (the task
    /// switching out's).
    fn switch(
        &mut self,
        cpu: u32,
        t: u64,
        prev_tgid: i32,
        rec: &SwitchRecord,
        stack: StackId,
        cgroup: Option<CgroupIndex>,
    ) {
        let prev_pid = self.names.get(&rec.prev_pid).map_or(prev_tgid, |n| n.0);
        self.names
            .insert(rec.prev_pid, (prev_pid, rec.prev_comm.clone()));
        let next_pid = self.names.get(&rec.next_pid).map_or(rec.next_pid, |n| n.0);
        self.names
            .insert(rec.next_pid, (next_pid, rec.next_comm.clone()));

        if let Some((thread, since)) = self.running.remove(&cpu) {
            self.snap.slices.push(Slice {
                cpu,
                start: since,
                end: t,
                thread,
            });
        }
        if rec.next_pid != 0 {
            let next = self.intern_thread(Thread {
                pid: next_pid,
                tid: rec.next_pid,
                comm: rec.next_comm.clone(),
            });
            self.running.insert(cpu, (next, t));
            if let Some(out) = self.switched_out.remove(&rec.next_pid) {
                self.snap.off_cpu.push(out.until(t));
            }
        }
        self.ran(rec.prev_pid, t);
        if rec.prev_pid != 0 && rec.prev_state & EXITING == 0 {
            let thread = self.intern_thread(Thread {
                pid: prev_pid,
                tid: rec.prev_pid,
                comm: rec.prev_comm.clone(),
            });
            self.switched_out.insert(
                rec.prev_pid,
                SwitchedOut {
                    thread,
                    start: t,
                    stack,
                    sleeping: rec.prev_state & SLEEP_STATES != 0,
                    cgroup,
                },
            );
        }
    }

    /// The sample's call chain (or its ip alone), each frame looked up in
    /// the maps of this moment, interned.
    fn stack(&mut self, pid: i32, s: &SampleRecord) -> StackId {
        let user = self.unwound(pid, s);
        let mut frames = Vec::new();
        let mut kernel = matches!(s.cpu_mode, CpuMode::Kernel);
        match &s.callchain {
            Some(chain) if !chain.is_empty() => {
                for i in 0..chain.len() {
                    let Some(addr) = chain.get(i) else { break };
                    if addr >= PERF_CONTEXT_MAX {
                        match addr {
                            PERF_CONTEXT_KERNEL => kernel = true,
                            PERF_CONTEXT_USER => kernel = false,
                            _ => {}
                        }
                        continue;
                    }
                    let leaf = frames.is_empty();
                    frames.push(self.frame(pid, addr, kernel, leaf));
                }
            }
            _ if user.is_some() => {}
            _ => {
                if let Some(ip) = s.ip {
                    frames.push(self.frame(pid, ip, kernel, true));
                }
            }
        }
        // The user part, unwound from the stack copy, after the kernel's.
        for (i, addr) in user.into_iter().flatten().enumerate() {
            frames.push(self.frame(pid, addr, false, i == 0));
        }
        let next = self.snap.stacks.len() as StackId;
        *self.stacks.entry(frames.clone()).or_insert_with(|| {
            self.snap.stacks.push(frames);
            next
        })
    }

    /// The user frames unwound from a sample's registers and stack copy,
    /// if it carries them and unwinding was asked for.
    fn unwound(&mut self, pid: i32, s: &SampleRecord) -> Option<Vec<u64>> {
        let unwind = self.unwind.as_mut()?;
        let regs = s.user_regs.as_ref()?;
        let (stack, dyn_size) = s.user_stack.as_ref()?;
        let maps: Vec<LiveMapView> = self
            .spaces
            .get(&pid)?
            .iter()
            .map(|(&start, m)| LiveMapView {
                start,
                end: m.end,
                pgoff: m.pgoff,
                map: m.map as usize,
            })
            .collect();
        let stack = stack.as_slice();
        let frames = unwind.unwind(
            pid,
            |r| regs.get(r),
            &stack,
            *dyn_size,
            &maps,
            &self.snap.maps,
        )?;
        (!frames.is_empty()).then_some(frames)
    }

    fn frame(&mut self, pid: i32, addr: u64, kernel: bool, leaf: bool) -> FrameId {
        // A caller's frame holds a return address: the call is just before.
        let lookup = if leaf { addr } else { addr.saturating_sub(1) };
        let key = if kernel {
            FrameKey::Kernel { addr: lookup }
        } else {
            match self.spaces.get(&pid).and_then(|s| find(s, lookup)) {
                Some(m) => FrameKey::User {
                    map: m.map,
                    file_offset: lookup - m.start + m.pgoff,
                },
                None => FrameKey::Unmapped { addr: lookup },
            }
        };
        let next = self.snap.frames.len() as FrameId;
        *self.frames.entry(key).or_insert_with(|| {
            self.snap.frames.push(Frame { key, addr });
            next
        })
    }

    fn finish(mut self) -> Snapshot {
        std::mem::take(&mut self.cgroups).finish(&mut self.snap);
        // Threads still off CPU at the end were off until then.
        let end = self.snap.last_ns;
        for out in self.switched_out.into_values() {
            self.snap.off_cpu.push(out.until(end));
        }
        for (cpu, (thread, since)) in self.running {
            let end = self.snap.coverage.get(&cpu).map_or(end, |c| c.1);
            self.snap.slices.push(Slice {
                cpu,
                start: since,
                end,
                thread,
            });
        }
        self.snap.off_cpu.sort_by_key(|o| (o.end, o.start));
        self.snap.slices.sort_by_key(|s| (s.cpu, s.start));
        self.snap.kernel_maps = self.kernel.iter().map(|(s, m)| (*s, m.map)).collect();
        self.snap
    }
}

/// The live map holding `addr`, with its start.
fn find(space: &AddressSpace, addr: u64) -> Option<Found> {
    let (start, m) = space.range(..=addr).next_back()?;
    (addr < m.end).then_some(Found {
        start: *start,
        pgoff: m.pgoff,
        map: m.map,
    })
}

struct Found {
    start: u64,
    pgoff: u64,
    map: MapId,
}

#[cfg(test)]
mod tests {
    use super::*;
    use linux_perf_data::linux_perf_event_reader::RawData;

    fn switch(prev: i32, state: u64, next: i32) -> SwitchRecord {
        SwitchRecord {
            prev_comm: format!("t{prev}"),
            prev_pid: prev,
            prev_state: state,
            next_comm: format!("t{next}"),
            next_pid: next,
        }
    }

    #[test]
    fn a_thread_is_off_cpu_from_its_switch_out_to_its_switch_in_on_any_cpu() {
        let mut l = Loader::default();
        l.switch(0, 100, 0, &switch(0, 0, 7), 0, None);
        // 7 sleeps on CPU 0 at 200 and wakes on CPU 1 at 450.
        l.switch(0, 200, 7, &switch(7, 1, 0), 3, None);
        l.switch(1, 450, 0, &switch(0, 0, 7), 0, None);
        l.seen(1, 500);
        let snap = l.finish();
        assert_eq!(snap.off_cpu.len(), 1);
        let o = snap.off_cpu[0];
        assert_eq!((o.start, o.end, o.stack, o.sleeping), (200, 450, 3, true));
        assert_eq!(snap.threads[o.thread as usize].comm, "t7");
        // Slices: 7 on CPU 0 from 100 to 200, on CPU 1 from 450 to the end.
        let slices: Vec<(u32, u64, u64)> = snap
            .slices
            .iter()
            .map(|s| (s.cpu, s.start, s.end))
            .collect();
        assert_eq!(slices, vec![(0, 100, 200), (1, 450, 500)]);
    }

    #[test]
    fn a_thread_woken_without_a_recorded_switch_in_is_off_cpu_until_it_is_next_seen() {
        let mut l = Loader::default();
        // 7 sleeps on CPU 0 at 200; CPU 1 leaves its idle task for it at
        // about 450 with no record of it; 7 switches out again at 460.
        l.switch(0, 200, 7, &switch(7, 1, 0), 3, None);
        l.switch(1, 460, 7, &switch(7, 1, 0), 4, None);
        // 8 sleeps at 500 and is next seen in a sample of its own at 700.
        l.switch(0, 500, 8, &switch(8, 1, 0), 5, None);
        l.ran(8, 700);
        // A record of a thread not off CPU changes nothing.
        l.ran(9, 710);
        l.seen(1, 900);
        let snap = l.finish();
        let off: Vec<(u64, u64, u32)> = snap
            .off_cpu
            .iter()
            .map(|o| (o.start, o.end, o.stack))
            .collect();
        assert_eq!(off, vec![(200, 460, 3), (500, 700, 5), (460, 900, 4)]);
    }

    #[test]
    fn preempted_exiting_and_never_woken_threads_are_told_apart() {
        let mut l = Loader::default();
        // Preempted while runnable (6.x reports 0x100, older kernels 0).
        l.switch(0, 10, 5, &switch(5, 0x100, 6), 1, None);
        l.switch(0, 20, 6, &switch(6, 0x10, 5), 2, None); // 6 exits
        l.switch(0, 30, 5, &switch(5, 2, 0), 4, None); // 5 sleeps (D), never back
        l.seen(0, 90);
        let snap = l.finish();
        let off: Vec<(u64, u64, bool)> = snap
            .off_cpu
            .iter()
            .map(|o| (o.start, o.end, o.sleeping))
            .collect();
        // 5: preempted 10..20, then asleep from 30 to the end; 6 exited.
        assert_eq!(off, vec![(10, 20, false), (30, 90, true)]);
    }

    #[test]
    fn frames_are_looked_up_in_the_maps_of_their_moment() {
        let mut l = Loader::default();
        l.mmap(10, 0x1000, 0x1000, 0x3000, "/bin/prog".into(), None);
        let leaf = l.frame(10, 0x1800, false, true);
        let caller = l.frame(10, 0x1800, false, false);
        assert_eq!(
            l.snap.frames[leaf as usize].key,
            FrameKey::User {
                map: 0,
                file_offset: 0x3800
            }
        );
        // A return address is looked up one byte back, in the call.
        assert_eq!(
            l.snap.frames[caller as usize].key,
            FrameKey::User {
                map: 0,
                file_offset: 0x37ff
            }
        );
        // A forked process has its parent's maps; an exec clears them.
        l.names.insert(10, (10, "prog".into()));
        l.fork(&ForkOrExitRecord {
            pid: 11,
            ppid: 10,
            tid: 11,
            ptid: 10,
            timestamp: 5,
        });
        let child = l.frame(11, 0x1100, false, true);
        assert!(matches!(
            l.snap.frames[child as usize].key,
            FrameKey::User { map: 0, .. }
        ));
        assert_eq!(l.names[&11].1, "prog");
        let name: &[u8] = b"other\0";
        l.comm(&CommOrExecRecord {
            pid: 11,
            tid: 11,
            name: RawData::from(name),
            is_execve: true,
        });
        let after_exec = l.frame(11, 0x1100, false, true);
        assert_eq!(
            l.snap.frames[after_exec as usize].key,
            FrameKey::Unmapped { addr: 0x1100 }
        );
        // A new map replaces the part of the old one it overlaps.
        l.mmap(
            10,
            0x1800,
            0x1000,
            0,
            "/lib/other.so".into(),
            Some(vec![1, 2]),
        );
        let f = l.frame(10, 0x1900, false, true);
        assert_eq!(
            l.snap.frames[f as usize].key,
            FrameKey::User {
                map: 1,
                file_offset: 0x100
            }
        );
        assert_eq!(l.snap.maps[1].build_id, Some(vec![1, 2]));
        let head = l.frame(10, 0x1100, false, true);
        assert_eq!(
            l.snap.frames[head as usize].key,
            FrameKey::User {
                map: 0,
                file_offset: 0x3100
            }
        );
    }

    #[test]
    fn the_kernel_map_gives_text_and_the_build_id_of_the_table() {
        let mut l = Loader::default();
        l.snap.kernel_build_id = Some(vec![9; 20]);
        l.mmap(
            -1,
            0xffff_ffff_8100_0000,
            u64::MAX - 0xffff_ffff_8100_0000,
            0xffff_ffff_8100_0000,
            "[kernel.kallsyms]_text".into(),
            None,
        );
        let snap = l.finish();
        assert_eq!(snap.kernel_text, Some(0xffff_ffff_8100_0000));
        assert_eq!(snap.maps[0].build_id, Some(vec![9; 20]));
        assert_eq!(snap.kernel_maps.len(), 1);
    }
}
