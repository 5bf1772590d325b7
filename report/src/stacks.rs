//! Stacks weighed: samples of one event (on-CPU) or time off CPU, per
//! thread name and stack, the one aggregation the folded export and pprof
//! are built from. (The report page weighs them itself, for whatever range
//! and thread its reader picks.)

use std::collections::{BTreeMap, HashMap};

use crate::model::{Snapshot, StackId, ThreadId};
use crate::symbols::Names;

/// What a stack is weighed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Samples of the event at this index.
    Samples(usize),
    /// Nanoseconds off CPU, charged to the stack that switched out.
    OffCpu,
}

/// Weight per (thread, stack).
pub fn weigh(snap: &Snapshot, measure: Measure) -> HashMap<(ThreadId, StackId), u64> {
    let mut w: HashMap<(ThreadId, StackId), u64> = HashMap::new();
    match measure {
        Measure::Samples(event) => {
            for s in snap
                .samples
                .iter()
                .filter(|s| usize::from(s.event) == event)
            {
                *w.entry((s.thread, s.stack)).or_default() += 1;
            }
        }
        Measure::OffCpu => {
            for o in &snap.off_cpu {
                *w.entry((o.thread, o.stack)).or_default() += o.duration();
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

/// Folded stacks (`comm;root;...;leaf COUNT`, one line per stack, sorted),
/// as flamegraph.pl, inferno and speedscope read them. Off-CPU weights are
/// written in microseconds (stacks under 1 µs in all are left out).
pub fn folded(snap: &Snapshot, names: &Names, measure: Measure) -> String {
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for ((thread, stack), w) in weigh(snap, measure) {
        let frames: Vec<String> = path(snap, names, thread, stack)
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
