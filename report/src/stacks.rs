//! Stacks weighed: samples of one event (on-CPU) or time off CPU, per
//! thread, cgroup and stack, the one aggregation the folded export and
//! pprof are built from. (The report page weighs them itself, for whatever
//! range, thread and container its reader picks.)

use std::collections::{BTreeMap, HashMap};

use crate::cgroups::container_name;
use crate::model::{CgroupIndex, Snapshot, StackId, ThreadId};
use crate::symbols::Names;

/// What a stack is weighed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Samples of the event at this index.
    Samples(usize),
    /// Nanoseconds off CPU, charged to the stack that switched out.
    OffCpu,
}

/// What the folded stacks start with (their root frame).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Root {
    /// The thread's name.
    #[default]
    Thread,
    /// The container (its name, or `[host]` outside any), then the
    /// thread's name.
    Container,
}

/// What a weight is of: a thread, the cgroup it was in (when recorded)
/// and a stack.
pub type Weighed = (ThreadId, Option<CgroupIndex>, StackId);

/// Weight per (thread, cgroup, stack).
pub fn weigh(snap: &Snapshot, measure: Measure) -> HashMap<Weighed, u64> {
    let mut w: HashMap<Weighed, u64> = HashMap::new();
    match measure {
        Measure::Samples(event) => {
            for s in snap
                .samples
                .iter()
                .filter(|s| usize::from(s.event) == event)
            {
                *w.entry((s.thread, s.cgroup, s.stack)).or_default() += 1;
            }
        }
        Measure::OffCpu => {
            for o in &snap.off_cpu {
                *w.entry((o.thread, o.cgroup, o.stack)).or_default() += o.duration();
            }
        }
    }
    w
}

/// The frames of a stack as names, root first, under the thread's name.
pub fn path(snap: &Snapshot, names: &Names, thread: ThreadId, stack: StackId) -> Vec<String> {
    let mut out = vec![snap.threads[thread as usize].comm.clone()];
    out.extend(
        snap.stacks[stack as usize]
            .iter()
            .rev()
            .map(|f| names.frames[*f as usize].name.clone()),
    );
    out
}

/// Folded stacks (`comm;root;...;leaf COUNT`, one line per stack, sorted;
/// `container;comm;...` with [`Root::Container`]), as flamegraph.pl,
/// inferno and speedscope read them. Off-CPU weights are written in
/// microseconds (stacks under 1 µs in all are left out).
pub fn folded(snap: &Snapshot, names: &Names, measure: Measure, root: Root) -> String {
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for ((thread, cgroup, stack), w) in weigh(snap, measure) {
        let mut frames = path(snap, names, thread, stack);
        if root == Root::Container {
            frames.insert(0, container_name(snap, snap.container_of(cgroup)));
        }
        let frames: Vec<String> = frames
            .into_iter()
            // `;` separates frames and a newline ends the line.
            .map(|f| f.replace([';', '\n'], ":"))
            .collect();
        *lines.entry(frames.join(";")).or_default() += w;
    }
    let mut out = String::new();
    for (stack, w) in lines {
        let w = match measure {
            Measure::Samples(_) => w,
            Measure::OffCpu => w / 1000,
        };
        if w > 0 {
            out.push_str(&format!("{stack} {w}\n"));
        }
    }
    out
}
