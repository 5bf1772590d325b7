//! The report page: one self-contained HTML file (styles, script and data
//! inline; its Content-Security-Policy allows no request). The data is
//! the snapshot itself, cut down to what the page draws and computes from:
//! the scheduler's slices per CPU (the timeline), every sample and
//! off-CPU interval with its time, thread and stack (so the flame graphs,
//! the top-functions table, the bottom-up view and the thread tables
//! follow whatever range, thread and container the reader picks), and the
//! stacks as one prefix tree of named frames. A page thread is a thread in
//! one container: a thread whose samples fall in two (moved into a cgroup
//! while it ran) is two page threads, so every sample's container is its
//! thread's. The script (`page/page.js`) does the rest in the browser.
//!
//! Every string of the snapshot (a thread's name, a trigger's text, a
//! label) reaches the page through one of two escapes: the JSON in a
//! `<script type="application/json">` element with `<`, `>` and `&`
//! written as `\u` escapes, or HTML text (the `<title>`); the template's
//! placeholders are filled in one pass, so nothing put in is read as a
//! placeholder again.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;
use serde_json::{Value, json};

use crate::cgroups::{HOST, container_name, thread_containers};
use crate::model::{CgroupIndex, ContainerIndex, FrameKey, Snapshot, StackId, ThreadId};
use crate::symbols::{Names, Unresolved};

const TEMPLATE: &str = include_str!("page/page.html");
const CSS: &str = include_str!("page/page.css");
const JS: &str = include_str!("page/page.js");

/// What the page says about the snapshot beyond its file.
#[derive(Debug, Clone, Default)]
pub struct PageContext {
    /// The snapshot's id or file name.
    pub title: String,
    /// What triggered it (`sigusr2`, `api`, a trigger's name), when known.
    pub trigger: Option<String>,
    /// What the conditions that triggered it matched, when one did.
    pub matched: Option<String>,
    /// When its rings were frozen, ns since the Unix epoch.
    pub trigger_unix_ns: Option<i64>,
    /// What a scoped dump held (`container:web`, `cgroup:/x`), when it was
    /// scoped.
    pub scope: Option<String>,
}

/// The page for `snap`.
pub fn page(snap: &Snapshot, names: &Names, ctx: &PageContext) -> String {
    let data = page_data(snap, names, ctx);
    let data = serde_json::to_string(&data).unwrap_or_else(|e| {
        // Only a map with non-string keys fails to serialize; there is none.
        format!("{{\"error\":{}}}", json!(e.to_string()))
    });
    fill_template(
        TEMPLATE,
        &[
            (
                "__TITLE__",
                &escape_html(&format!("flightrec: {}", ctx.title)),
            ),
            ("__CSS__", CSS),
            ("__JS__", JS),
            ("__DATA__", &script_json(&data)),
        ],
    )
}

/// JSON text made safe inside a `<script>` element: `<`, `>` and `&` only
/// occur inside JSON strings, where `\u003c`, `\u003e` and `\u0026` mean
/// the same characters to `JSON.parse`, and without them no `</script>`
/// or `<!--` can end or change the element.
fn script_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + json.len() / 64);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            c => out.push(c),
        }
    }
    out
}

/// `template` with each placeholder replaced by its value, in one pass
/// from left to right: a value is never searched for placeholders, so a
/// title that holds `__JS__` or `__DATA__` stays as it is.
fn fill_template(template: &str, values: &[(&str, &str)]) -> String {
    let mut out =
        String::with_capacity(template.len() + values.iter().map(|(_, v)| v.len()).sum::<usize>());
    let mut rest = template;
    loop {
        let next = values
            .iter()
            .filter_map(|(key, value)| rest.find(key).map(|at| (at, *key, *value)))
            .min_by_key(|(at, _, _)| *at);
        let Some((at, key, value)) = next else { break };
        out.push_str(&rest[..at]);
        out.push_str(value);
        rest = &rest[at + key.len()..];
    }
    out.push_str(rest);
    out
}

/// Text for HTML, in an element or a quoted attribute.
fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Strings of the page, each stored once; the data refers to them by index.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, u32>,
}

impl Strings {
    fn get(&mut self, s: &str) -> u32 {
        if let Some(i) = self.index.get(s) {
            return *i;
        }
        let i = self.table.len() as u32;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// What a frame is, for its colour and the "file" column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum FrameKind {
    User = 0,
    Kernel = 1,
    /// No function name: `file+0xOFFSET`, or an address in no mapping.
    Unnamed = 2,
}

/// The page's frames (one per name, file and kind) and its stacks as a
/// prefix tree of them: node 0 is the root (no frame); node `n` is its
/// parent's stack plus `frame[n]`, so a stack of the snapshot is one node
/// and two stacks share their common callers.
struct StackTree<'a> {
    snap: &'a Snapshot,
    names: &'a Names,
    /// `[name, file, kind]`, names and files as string indexes.
    frames: Vec<[u32; 3]>,
    frame_index: HashMap<(u32, u32, FrameKind), u32>,
    /// The page frame of each snapshot frame, once seen.
    frame_of: Vec<Option<u32>>,
    parent: Vec<u32>,
    frame: Vec<u32>,
    child_index: HashMap<(u32, u32), u32>,
    node_of: HashMap<StackId, u32>,
}

impl<'a> StackTree<'a> {
    fn new(snap: &'a Snapshot, names: &'a Names) -> Self {
        StackTree {
            snap,
            names,
            frames: Vec::new(),
            frame_index: HashMap::new(),
            frame_of: vec![None; snap.frames.len()],
            parent: vec![0],
            // The root's "frame" is never read.
            frame: vec![0],
            child_index: HashMap::new(),
            node_of: HashMap::new(),
        }
    }

    fn page_frame(&mut self, frame: usize, strings: &mut Strings) -> u32 {
        if let Some(f) = self.frame_of[frame] {
            return f;
        }
        let name = &self.names.frames[frame];
        let kind = match (self.snap.frames[frame].key, &name.function) {
            (_, None) => FrameKind::Unnamed,
            (FrameKey::Kernel { .. }, _) => FrameKind::Kernel,
            _ => FrameKind::User,
        };
        let key = (strings.get(&name.name), strings.get(&name.dso), kind);
        let next = self.frames.len() as u32;
        let f = *self.frame_index.entry(key).or_insert_with(|| {
            self.frames.push([key.0, key.1, kind as u32]);
            next
        });
        self.frame_of[frame] = Some(f);
        f
    }

    /// The node of a snapshot stack.
    fn node(&mut self, stack: StackId, strings: &mut Strings) -> u32 {
        if let Some(n) = self.node_of.get(&stack) {
            return *n;
        }
        let mut node = 0;
        // Stacks are stored leaf first; the tree grows from the root.
        for f in self.snap.stacks[stack as usize].iter().rev() {
            let frame = self.page_frame(*f as usize, strings);
            let next = self.parent.len() as u32;
            node = *self.child_index.entry((node, frame)).or_insert_with(|| {
                self.parent.push(node);
                self.frame.push(frame);
                next
            });
        }
        self.node_of.insert(stack, node);
        node
    }
}

/// Everything the script reads (`page/page.js` documents each field
/// where it decodes it). Times are ns from `origin_ns`, the snapshot's
/// first record on the sample clock.
#[derive(Serialize)]
struct PageData {
    title: String,
    /// `[key, value, css class]` rows.
    header: Vec<Value>,
    unresolved: Vec<Unresolved>,
    origin_ns: u64,
    span: u64,
    /// When the rings were frozen, when the file can place it.
    trigger: Option<i64>,
    strings: Vec<String>,
    /// `[name, pid, tid, container]` (container -1: none, the host): the
    /// snapshot's threads, each in the container most of its samples are
    /// in, then a thread again for each other container some of its
    /// samples or off-CPU intervals are in.
    threads: Vec<(u32, i32, i32, i64)>,
    /// The containers threads point at.
    containers: Vec<PageContainer>,
    /// What the page calls what is in no container.
    host: &'static str,
    cpus: Vec<u32>,
    /// Per CPU, `[start - the previous slice's end, duration, thread]`
    /// each (signed: slices the kernel reported overlapping stay exact).
    lanes: Vec<Vec<i64>>,
    /// `[name, file, kind]`: kind 0 user, 1 kernel, 2 unnamed.
    frames: Vec<[u32; 3]>,
    /// The stack tree: each node's parent and frame (node 0 is the root).
    stack_parent: Vec<u32>,
    stack_frame: Vec<u32>,
    events: Vec<SampledEvent>,
    off_cpu: OffCpuData,
}

#[derive(Serialize)]
struct PageContainer {
    name: String,
    /// Runtime, id, pod and cgroup, in words.
    detail: String,
}

/// The page's threads: each snapshot thread in its main container at its
/// own index, then (thread, other container) pairs as they are met.
struct PageThreads {
    main: Vec<Option<ContainerIndex>>,
    others: HashMap<(ThreadId, Option<ContainerIndex>), u64>,
    list: Vec<(ThreadId, Option<ContainerIndex>)>,
}

impl PageThreads {
    fn new(snap: &Snapshot) -> Self {
        let main = thread_containers(snap);
        let list = main
            .iter()
            .enumerate()
            .map(|(t, c)| (t as ThreadId, *c))
            .collect();
        PageThreads {
            main,
            others: HashMap::new(),
            list,
        }
    }

    /// The page thread of `thread` in the container of `cgroup`.
    fn of(&mut self, snap: &Snapshot, thread: ThreadId, cgroup: Option<CgroupIndex>) -> u64 {
        let container = snap.container_of(cgroup);
        if self.main.get(thread as usize) == Some(&container) {
            return u64::from(thread);
        }
        let next = self.list.len() as u64;
        *self.others.entry((thread, container)).or_insert_with(|| {
            self.list.push((thread, container));
            next
        })
    }
}

#[derive(Serialize)]
struct SampledEvent {
    id: String,
    name: String,
    /// `[time since the previous sample, thread, stack node]` each.
    samples: Vec<u64>,
}

#[derive(Serialize)]
struct OffCpuData {
    /// Why there is no off-CPU time, when there is none.
    empty: String,
    /// What the stacks lack, when they do.
    note: String,
    /// By start: `[start since the previous start, duration, thread,
    /// stack node, 1 if it slept (0: preempted)]` each.
    intervals: Vec<u64>,
}

fn page_data(snap: &Snapshot, names: &Names, ctx: &PageContext) -> PageData {
    let mut strings = Strings::default();
    let mut tree = StackTree::new(snap, names);
    let origin = snap.first_ns;
    let rel = |t: u64| t.saturating_sub(origin);

    let mut page_threads = PageThreads::new(snap);

    let mut lanes: BTreeMap<u32, Vec<i64>> =
        snap.coverage.keys().map(|cpu| (*cpu, Vec::new())).collect();
    let mut prev_end: BTreeMap<u32, i64> = BTreeMap::new();
    for s in &snap.slices {
        let prev = prev_end.entry(s.cpu).or_insert(0);
        let start = rel(s.start) as i64;
        let duration = s.end.saturating_sub(s.start) as i64;
        lanes
            .entry(s.cpu)
            .or_default()
            .extend([start - *prev, duration, i64::from(s.thread)]);
        *prev = start + duration;
    }

    let mut events = Vec::new();
    for (i, e) in snap.events.iter().enumerate().filter(|(_, e)| e.sampled) {
        let id: String = e
            .name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let mut samples = Vec::new();
        let mut prev = 0;
        for s in snap.samples.iter().filter(|s| usize::from(s.event) == i) {
            let t = rel(s.time);
            samples.extend([
                t.saturating_sub(prev),
                page_threads.of(snap, s.thread, s.cgroup),
                u64::from(tree.node(s.stack, &mut strings)),
            ]);
            prev = t;
        }
        events.push(SampledEvent {
            id: format!("on-{id}"),
            name: e.name.clone(),
            samples,
        });
    }

    let mut by_start: Vec<_> = snap.off_cpu.iter().collect();
    by_start.sort_by_key(|o| (o.start, o.end));
    let mut intervals = Vec::with_capacity(by_start.len() * 5);
    let mut prev = 0;
    for o in by_start {
        let start = rel(o.start);
        intervals.extend([
            start.saturating_sub(prev),
            o.duration(),
            page_threads.of(snap, o.thread, o.cgroup),
            u64::from(tree.node(o.stack, &mut strings)),
            u64::from(o.sleeping),
        ]);
        prev = start;
    }
    let switch = snap.events.iter().find(|e| e.is_sched_switch);
    let empty = match switch {
        None => "no sched:sched_switch event in this snapshot: no off-CPU time",
        Some(e) if !e.callchain => {
            "sched:sched_switch has no call chains here (callchain = true in its [[event]])"
        }
        Some(_) => "no thread switched out and back in inside the range",
    };
    let note = if switch.is_some_and(|e| !e.callchain) {
        "without call chains: by thread only"
    } else {
        ""
    };

    let trigger = ctx.trigger_unix_ns.and_then(|at| {
        let (wall, clock) = snap.clock?;
        let t = i128::from(at) - i128::from(wall) + i128::from(clock) - i128::from(origin);
        i64::try_from(t).ok()
    });
    let threads = page_threads
        .list
        .iter()
        .map(|(t, c)| {
            let t = &snap.threads[*t as usize];
            let container = c.map_or(-1, i64::from);
            (strings.get(&t.comm), t.pid, t.tid, container)
        })
        .collect();
    let containers = snap
        .containers
        .iter()
        .map(|c| PageContainer {
            name: c.display_name(),
            detail: container_detail(c),
        })
        .collect();
    PageData {
        title: format!("flightrec snapshot {}", ctx.title),
        header: header(snap, ctx),
        unresolved: names.unresolved.clone(),
        origin_ns: origin,
        span: snap.last_ns.saturating_sub(origin),
        trigger,
        threads,
        containers,
        host: HOST,
        cpus: lanes.keys().copied().collect(),
        lanes: lanes.into_values().collect(),
        events,
        off_cpu: OffCpuData {
            empty: empty.into(),
            note: note.into(),
            intervals,
        },
        frames: tree.frames,
        stack_parent: tree.parent,
        stack_frame: tree.frame,
        strings: strings.table,
    }
}

/// A container in words: runtime and id, pod, cgroup.
fn container_detail(c: &crate::model::Container) -> String {
    let mut parts = vec![if c.runtime == "systemd" {
        "systemd unit".to_string()
    } else {
        format!("{} {}", c.runtime, &c.id[..c.id.len().min(12)])
    }];
    match (c.pod.as_str(), c.namespace.as_str(), c.pod_uid.as_str()) {
        ("", _, "") => {}
        ("", _, uid) => parts.push(format!("pod {uid}")),
        (pod, "", _) => parts.push(format!("pod {pod}")),
        (pod, ns, _) => parts.push(format!("pod {ns}/{pod}")),
    }
    parts.push(format!("cgroup {}", c.cgroup));
    parts.join(", ")
}

/// The header's containers row: each container with its samples (of
/// every sampled event), busiest first, then the host's; `None` when the
/// snapshot recorded no cgroup.
fn containers_row(snap: &Snapshot) -> Option<String> {
    if snap.cgroups.is_empty() {
        return None;
    }
    let mut counts: HashMap<Option<ContainerIndex>, u64> = HashMap::new();
    for s in &snap.samples {
        *counts.entry(snap.container_of(s.cgroup)).or_default() += 1;
    }
    let mut held: Vec<(Option<ContainerIndex>, u64)> = (0..snap.containers.len())
        .map(|c| {
            let c = Some(c as ContainerIndex);
            (c, counts.get(&c).copied().unwrap_or(0))
        })
        .collect();
    held.sort_by_key(|(c, n)| (std::cmp::Reverse(*n), *c));
    held.push((None, counts.get(&None).copied().unwrap_or(0)));
    let text: Vec<String> = held
        .iter()
        .map(|(c, n)| {
            let plural = if *n == 1 { "" } else { "s" };
            format!("{} ({n} sample{plural})", container_name(snap, *c))
        })
        .collect();
    Some(if snap.containers.is_empty() {
        format!("none: every sample is the host's ({})", held[0].1)
    } else {
        text.join(", ")
    })
}

fn rfc3339(unix_ns: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_nanos(unix_ns)).to_string()
}

fn secs(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

/// `[key, value, css class]` rows.
fn header(snap: &Snapshot, ctx: &PageContext) -> Vec<Value> {
    let mut rows = vec![
        json!(["host", snap.host]),
        json!(["kernel", snap.os_release]),
        json!([
            "trigger",
            match (&ctx.trigger, ctx.trigger_unix_ns) {
                (Some(t), Some(at)) =>
                    format!("{t}, rings frozen at {}", rfc3339(at.max(0) as u64)),
                (Some(t), None) => t.clone(),
                _ => "not recorded in the file (`snapctl list` shows it)".into(),
            }
        ]),
    ];
    if let Some(m) = &ctx.matched {
        rows.push(json!(["matched", m]));
    }
    if let Some(scope) = ctx.scope.as_deref().filter(|s| !s.is_empty()) {
        rows.push(json!(["scope", scope]));
    }
    if let Some(row) = containers_row(snap) {
        rows.push(json!(["containers", row]));
    }
    let span = snap.last_ns.saturating_sub(snap.first_ns);
    rows.push(json!([
        "window",
        match (snap.wall_ns(snap.first_ns), snap.wall_ns(snap.last_ns)) {
            (Some(a), Some(b)) => format!("{} to {} ({})", rfc3339(a), rfc3339(b), secs(span)),
            _ => format!("{} (the file has no wall-clock reference)", secs(span)),
        }
    ]));
    let events: Vec<String> = snap
        .events
        .iter()
        // The tracking event (COMM, MMAP, FORK records) has no samples.
        .filter(|e| e.samples > 0 || !e.name.starts_with("dummy"))
        .map(|e| {
            let kind = if e.sampled { "samples" } else { "records" };
            format!("{}: {} {kind}", e.name, e.samples)
        })
        .collect();
    rows.push(json!(["events", events.join(", ")]));
    let lost: u64 = snap.lost_records.values().sum();
    if lost == 0 && snap.lost_samples == 0 {
        rows.push(json!(["lost", "nothing"]));
    } else {
        let per_cpu: Vec<String> = snap
            .lost_records
            .iter()
            .map(|(cpu, n)| format!("CPU {cpu}: {n}"))
            .collect();
        rows.push(json!([
            "lost",
            format!(
                "{lost} records ({}), {} samples counted lost",
                per_cpu.join(", "),
                snap.lost_samples
            ),
            "warn"
        ]));
    }
    let coverage: Vec<String> = snap
        .coverage
        .iter()
        .map(|(cpu, (a, b))| {
            format!(
                "CPU {cpu}: {} to {}",
                secs(a.saturating_sub(snap.first_ns)),
                secs(b.saturating_sub(snap.first_ns))
            )
        })
        .collect();
    rows.push(json!(["coverage", coverage.join("; ")]));
    for n in &snap.notes {
        rows.push(json!(["note", n, "warn"]));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;
    use crate::symbols::FrameName;

    /// A thread named `<!--` that ran 100..300 on CPU 1 and was sampled
    /// twice: in a function whose name tries to end the data's <script>
    /// element, and in `leaf` called from the same function; then went off
    /// CPU in it from 300 to 1000.
    fn snap() -> (Snapshot, Names) {
        let sample = |time, stack| Sample {
            time,
            cpu: 1,
            event: 0,
            thread: 0,
            stack,
            period: 1,
            cgroup: None,
        };
        let snap = Snapshot {
            host: "web1".into(),
            events: vec![
                EventInfo {
                    name: "cpu-clock".into(),
                    sampled: true,
                    is_sched_switch: false,
                    callchain: true,
                    samples: 2,
                },
                EventInfo {
                    name: "sched:sched_switch".into(),
                    sampled: false,
                    is_sched_switch: true,
                    callchain: true,
                    samples: 1,
                },
            ],
            threads: vec![Thread {
                pid: 5,
                tid: 5,
                comm: "<!--".into(),
            }],
            frames: vec![
                Frame {
                    key: FrameKey::Unmapped { addr: 1 },
                    addr: 1,
                },
                Frame {
                    key: FrameKey::Kernel { addr: 2 },
                    addr: 2,
                },
            ],
            // Leaf first: [script-breaker], [leaf, script-breaker].
            stacks: vec![vec![0], vec![1, 0]],
            samples: vec![sample(150, 0), sample(250, 1)],
            slices: vec![Slice {
                cpu: 1,
                start: 100,
                end: 300,
                thread: 0,
            }],
            off_cpu: vec![OffCpu {
                thread: 0,
                start: 300,
                end: 1000,
                stack: 1,
                sleeping: true,
                cgroup: None,
            }],
            coverage: [(1, (100, 1000))].into_iter().collect(),
            first_ns: 100,
            last_ns: 1000,
            clock: Some((1_000_000_000_000, 0)),
            ..Snapshot::default()
        };
        let names = Names {
            frames: vec![
                FrameName {
                    name: "</script><script>alert(1)</script>".into(),
                    function: Some("</script><script>alert(1)</script>".into()),
                    dso: "x".into(),
                },
                FrameName {
                    name: "leaf".into(),
                    function: Some("leaf".into()),
                    dso: "[kernel.kallsyms]".into(),
                },
            ],
            unresolved: vec![],
        };
        (snap, names)
    }

    /// The body of the data's <script> element.
    fn data_text(page: &str) -> &str {
        let open = "<script type=\"application/json\" id=\"data\">";
        let rest = &page[page.find(open).unwrap() + open.len()..];
        &rest[..rest.find("</script>").unwrap()]
    }

    fn data_of(page: &str) -> Value {
        serde_json::from_str(data_text(page)).unwrap()
    }

    fn context() -> PageContext {
        PageContext {
            title: "web1-x".into(),
            trigger: Some("condition:oom".into()),
            matched: Some("condition:oom: oom:mark_victim by pid 9 (</script>, <!--)".into()),
            trigger_unix_ns: Some(1_000_000_000_200),
            scope: None,
        }
    }

    #[test]
    fn no_string_of_the_snapshot_can_end_or_change_the_data_element() {
        let (snap, names) = snap();
        let page = page(&snap, &names, &context());
        assert!(!page.contains("</script><script>alert"));
        let text = data_text(&page);
        // No `<` at all: neither `</script>` nor `<!--` (which would make
        // the HTML parser look for `-->` and read `</script>` as data).
        assert!(!text.contains('<'), "{text}");
        assert!(text.contains("\\u003c!--"), "{text}");
        let data = data_of(&page);
        let strings: Vec<&str> = data["strings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        assert!(strings.contains(&"</script><script>alert(1)</script>"));
        assert!(strings.contains(&"<!--"));
        assert_eq!(
            data["header"][3],
            json!([
                "matched",
                "condition:oom: oom:mark_victim by pid 9 (</script>, <!--)"
            ])
        );
    }

    #[test]
    fn a_title_holding_the_templates_placeholders_stays_literal() {
        let (snap, names) = snap();
        let ctx = PageContext {
            title: "h-20261126T035002Z-000001-__DATA____JS____CSS____TITLE__<b>".into(),
            ..PageContext::default()
        };
        let page = page(&snap, &names, &ctx);
        let title = &page[page.find("<title>").unwrap()..page.find("</title>").unwrap()];
        assert_eq!(
            title,
            "<title>flightrec: h-20261126T035002Z-000001-__DATA____JS____CSS____TITLE__&lt;b&gt;"
        );
        // The script, styles and data each once, where the template has them.
        assert_eq!(page.matches(JS).count(), 1);
        assert_eq!(page.matches(CSS).count(), 1);
        assert_eq!(page.matches("id=\"data\"").count(), 1);
        assert_eq!(
            data_of(&page)["title"],
            "flightrec snapshot h-20261126T035002Z-000001-__DATA____JS____CSS____TITLE__<b>"
        );
    }

    #[test]
    fn placeholders_are_filled_in_one_pass() {
        assert_eq!(
            fill_template("<a>__A__</a>__B__", &[("__A__", "__B__"), ("__B__", "x")]),
            "<a>__B__</a>x"
        );
        assert_eq!(
            fill_template("no placeholder", &[("__A__", "y")]),
            "no placeholder"
        );
    }

    #[test]
    fn samples_and_off_cpu_time_carry_their_times_threads_and_stacks() {
        let (snap, names) = snap();
        let data = data_of(&page(&snap, &names, &context()));
        assert_eq!(data["origin_ns"], 100);
        assert_eq!(data["span"], 900);
        // The trigger, on the sample clock, relative to the first record.
        assert_eq!(data["trigger"], 100);
        assert_eq!(data["cpus"], json!([1]));
        // One slice: no gap after the start, 200 ns, thread 0.
        assert_eq!(data["lanes"], json!([[0, 200, 0]]));
        assert_eq!(data["threads"][0][1], 5);
        // The stack tree: root, the script-breaker, `leaf` under it.
        assert_eq!(data["stack_parent"], json!([0, 0, 1]));
        let frames = data["frames"].as_array().unwrap();
        let name = |node: usize| {
            let f = &frames[data["stack_frame"][node].as_u64().unwrap() as usize];
            data["strings"][f[0].as_u64().unwrap() as usize].clone()
        };
        assert_eq!(name(1), "</script><script>alert(1)</script>");
        assert_eq!(name(2), "leaf");
        // The kinds: user, then kernel.
        assert_eq!(frames[0][2], 0);
        assert_eq!(frames[1][2], 1);
        let event = &data["events"][0];
        assert_eq!(event["id"], "on-cpu-clock");
        // At 50 and 150 from the origin: deltas 50 and 100.
        assert_eq!(event["samples"], json!([50, 0, 1, 100, 0, 2]));
        // Off CPU from 300 (200 from the origin) for 700 ns, asleep.
        assert_eq!(data["off_cpu"]["intervals"], json!([200, 700, 0, 2, 1]));
        assert_eq!(data["off_cpu"]["note"], "");
        assert_eq!(data["events"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn a_thread_in_two_containers_is_two_page_threads_and_the_header_counts_each() {
        let (mut snap, names) = snap();
        // The thread's first sample on the host, its second and its
        // off-CPU interval in web.service: it is web.service's, and the
        // first sample's page thread is a second one, the host's.
        snap.cgroups = vec![
            Cgroup {
                id: 1,
                path: Some("/".into()),
                container: None,
            },
            Cgroup {
                id: 120,
                path: Some("/fr/web.service".into()),
                container: None,
            },
        ];
        crate::cgroups::name_containers(&mut snap, &[]);
        snap.samples[0].cgroup = Some(0);
        snap.samples[1].cgroup = Some(1);
        snap.off_cpu[0].cgroup = Some(1);
        let ctx = PageContext {
            scope: Some("container:web.service".into()),
            ..context()
        };
        let data = data_of(&page(&snap, &names, &ctx));
        let name = data["threads"][0][0].as_u64().unwrap() as usize;
        assert_eq!(
            data["threads"],
            json!([[name, 5, 5, 0], [name, 5, 5, -1]]),
            "{data:#}"
        );
        assert_eq!(data["containers"][0]["name"], "web.service");
        assert_eq!(
            data["containers"][0]["detail"],
            "systemd unit, cgroup /fr/web.service"
        );
        assert_eq!(data["host"], "[host]");
        // Samples: the first of page thread 1 (the host's), the second of 0.
        assert_eq!(data["events"][0]["samples"], json!([50, 1, 1, 100, 0, 2]));
        assert_eq!(data["off_cpu"]["intervals"], json!([200, 700, 0, 2, 1]));
        let rows: Vec<&Value> = data["header"].as_array().unwrap().iter().collect();
        let row = |key: &str| rows.iter().find(|r| r[0] == key).map(|r| r[1].clone());
        assert_eq!(row("scope"), Some(json!("container:web.service")));
        assert_eq!(
            row("containers"),
            Some(json!("web.service (1 sample), [host] (1 sample)"))
        );
        // Without cgroups recorded: no such row.
        let (snap, names) = self::snap();
        let data = data_of(&page(&snap, &names, &context()));
        assert!(
            !data["header"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r[0] == "containers" || r[0] == "scope")
        );
        assert_eq!(data["threads"], json!([[name, 5, 5, -1]]));
    }

    #[test]
    fn without_sched_switch_the_page_says_why_there_is_no_off_cpu_time() {
        let (mut snap, names) = snap();
        snap.events.truncate(1);
        snap.off_cpu.clear();
        let data = data_of(&page(&snap, &names, &context()));
        assert!(
            data["off_cpu"]["empty"]
                .as_str()
                .unwrap()
                .contains("no sched:sched_switch")
        );
    }
}
