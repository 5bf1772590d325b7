//! Stacks weighed: samples of one event (on-CPU) or time off CPU, per
//! thread name and stack, the one aggregation the flame graphs, the folded
//! export and pprof are built from; and the threads ranked by both.

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

/// One thread's totals.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ThreadTotals {
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    /// Time on CPU from the scheduler's switches (0 without them).
    pub on_cpu_ns: u64,
    pub off_cpu_ns: u64,
    /// Samples of all sampled events.
    pub samples: u64,
}

/// Totals per thread (`by_process`: per process, named by its main thread
/// when seen), the idle task left out.
pub fn totals(snap: &Snapshot, by_process: bool) -> Vec<ThreadTotals> {
    let mut rows: HashMap<(i32, i32), ThreadTotals> = HashMap::new();
    let mut add = |thread: ThreadId, on: u64, off: u64, samples: u64| {
        let t = &snap.threads[thread as usize];
        let key = if by_process {
            (t.pid, t.pid)
        } else {
            (t.pid, t.tid)
        };
        let r = rows.entry(key).or_insert_with(|| ThreadTotals {
            pid: t.pid,
            tid: key.1,
            comm: t.comm.clone(),
            on_cpu_ns: 0,
            off_cpu_ns: 0,
            samples: 0,
        });
        if t.tid == t.pid {
            r.comm = t.comm.clone();
        }
        r.on_cpu_ns += on;
        r.off_cpu_ns += off;
        r.samples += samples;
    };
    for s in &snap.slices {
        add(s.thread, s.end.saturating_sub(s.start), 0, 0);
    }
    for o in &snap.off_cpu {
        add(o.thread, 0, o.duration(), 0);
    }
    for s in &snap.samples {
        if snap.events[usize::from(s.event)].sampled {
            add(s.thread, 0, 0, 1);
        }
    }
    let mut out: Vec<ThreadTotals> = rows.into_values().filter(|r| r.tid != 0).collect();
    out.sort_by(|a, b| {
        (b.on_cpu_ns, b.samples, b.off_cpu_ns).cmp(&(a.on_cpu_ns, a.samples, a.off_cpu_ns))
    });
    out
}
