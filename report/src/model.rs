//! What a snapshot holds, once read: samples, the scheduler's slices and
//! off-CPU intervals, each pointing at an interned thread and stack. Frames
//! are still addresses here; [`crate::symbols`] names them.

use std::collections::BTreeMap;

/// Index into [`Snapshot::threads`].
pub type ThreadId = u32;
/// Index into [`Snapshot::stacks`].
pub type StackId = u32;
/// Index into [`Snapshot::frames`].
pub type FrameId = u32;
/// Index into [`Snapshot::maps`].
pub type MapId = u32;
/// Index into [`Snapshot::cgroups`].
pub type CgroupIndex = u32;
/// Index into [`Snapshot::containers`].
pub type ContainerIndex = u32;

pub use flightrec_proto::container::Container;

/// Where a frame's address points, as it is looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKey {
    /// In a file mapped by the process: the file offset looked up (a
    /// return address minus one for callers, so it falls in the call).
    User { map: MapId, file_offset: u64 },
    /// In the kernel or a module (looked up at this address).
    Kernel { addr: u64 },
    /// In no mapping the snapshot names.
    Unmapped { addr: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub key: FrameKey,
    /// The address as recorded (the first time this frame was seen).
    pub addr: u64,
}

/// A file (or the kernel) that frames point into.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MapInfo {
    /// The path as the kernel recorded it (`/usr/lib/.../libc.so.6`,
    /// `[vdso]`, `[kernel.kallsyms]_text`, a module's name).
    pub path: String,
    /// From the snapshot's build-id table (or the MMAP2 record).
    pub build_id: Option<Vec<u8>>,
    /// Where it was mapped, for pprof's mapping table.
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
}

/// A thread as it was named at that time (an exec makes a new one).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Thread {
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventInfo {
    /// The name the daemon's config gave it (`cpu-clock`,
    /// `sched:sched_switch`).
    pub name: String,
    /// Sampled by frequency or period (not every event recorded).
    pub sampled: bool,
    /// `sched:sched_switch`: read for the timeline and off-CPU time.
    pub is_sched_switch: bool,
    /// Its records carry call chains.
    pub callchain: bool,
    /// Samples of it in the file.
    pub samples: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub time: u64,
    pub cpu: u32,
    pub event: u16,
    pub thread: ThreadId,
    pub stack: StackId,
    pub period: u64,
    /// The cgroup the sampled task was in (`PERF_SAMPLE_CGROUP`), when
    /// the event records it.
    pub cgroup: Option<CgroupIndex>,
}

/// A thread running on a CPU from `start` to `end` (from two switches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    pub cpu: u32,
    pub start: u64,
    pub end: u64,
    pub thread: ThreadId,
}

/// A thread off CPU from its switch out to its next switch in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffCpu {
    pub thread: ThreadId,
    pub start: u64,
    pub end: u64,
    /// The stack it switched out with (the `sched_switch` record's).
    pub stack: StackId,
    /// It went to sleep (blocked); false when preempted while runnable.
    pub sleeping: bool,
    /// The cgroup it switched out of (the `sched_switch` record's).
    pub cgroup: Option<CgroupIndex>,
}

impl OffCpu {
    pub fn duration(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }
}

/// A cgroup samples were recorded in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    /// The kernel's id (the cgroup2 directory's inode number).
    pub id: u64,
    /// Its path relative to the hierarchy's root (`/system.slice/x.service`),
    /// from the file's CGROUP records; `None` when none names the id.
    pub path: Option<String>,
    /// The container, service or pod it is part of, if any.
    pub container: Option<ContainerIndex>,
}

impl Cgroup {
    /// The path, or the id when no record named it.
    pub fn label(&self) -> String {
        match &self.path {
            Some(p) => p.clone(),
            None => format!("[cgroup id {}]", self.id),
        }
    }
}

/// The whole snapshot, read.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub host: String,
    pub os_release: String,
    pub nr_cpus: u32,
    pub events: Vec<EventInfo>,
    /// Sorted by time.
    pub samples: Vec<Sample>,
    /// Sorted by CPU, then start.
    pub slices: Vec<Slice>,
    /// Sorted by end time.
    pub off_cpu: Vec<OffCpu>,
    pub threads: Vec<Thread>,
    pub frames: Vec<Frame>,
    /// Leaf first.
    pub stacks: Vec<Vec<FrameId>>,
    pub maps: Vec<MapInfo>,
    /// The cgroups samples and off-CPU intervals point at.
    pub cgroups: Vec<Cgroup>,
    /// The containers (and systemd services) of those cgroups, each once:
    /// named from the cgroup path, and by the runtime when the snapshot's
    /// sidecar says ([`crate::cgroups::name_containers`]).
    pub containers: Vec<Container>,
    /// Kernel and module maps at the end of the file, by start address.
    pub kernel_maps: BTreeMap<u64, MapId>,
    /// `_text` as the snapshot's kernel map gives it.
    pub kernel_text: Option<u64>,
    /// Build-id of `[kernel.kallsyms]`.
    pub kernel_build_id: Option<Vec<u8>>,
    /// Records the kernel dropped (LOST records), per CPU.
    pub lost_records: BTreeMap<u32, u64>,
    /// Samples the kernel counted as lost (LOST_SAMPLES records).
    pub lost_samples: u64,
    /// First and last record time seen on each CPU.
    pub coverage: BTreeMap<u32, (u64, u64)>,
    /// First and last record time in the file.
    pub first_ns: u64,
    pub last_ns: u64,
    /// `(wall clock ns since the epoch, sample clock ns)` at one instant.
    pub clock: Option<(u64, u64)>,
    /// What the file lacks for part of the report, in words.
    pub notes: Vec<String>,
}

impl Snapshot {
    /// Wall-clock ns since the Unix epoch of a sample time, when the file
    /// carries a clock reference.
    pub fn wall_ns(&self, time: u64) -> Option<u64> {
        let (wall, clock) = self.clock?;
        Some(wall.wrapping_add(time).wrapping_sub(clock))
    }

    pub fn event_named(&self, name: &str) -> Option<usize> {
        self.events.iter().position(|e| e.name == name)
    }

    /// The container a cgroup (of a sample or interval) is in.
    pub fn container_of(&self, cgroup: Option<CgroupIndex>) -> Option<ContainerIndex> {
        self.cgroups.get(cgroup? as usize)?.container
    }
}
