//! The report page: one self-contained HTML file (styles, script and data
//! inline; its Content-Security-Policy allows no request) with the header,
//! a per-CPU timeline drawn on a canvas from the scheduler's slices (only
//! what a pixel can show is drawn, so a snapshot of millions of switches
//! still pans), flame graphs of on-CPU samples and off-CPU time, and the
//! top processes and threads.
//!
//! Every string of the snapshot (a thread's name, a trigger's text, a
//! label) reaches the page through one of two escapes: the JSON in a
//! `<script type="application/json">` element with `<`, `>` and `&`
//! written as `\u` escapes, or HTML text (the `<title>`); the template's
//! placeholders are filled in one pass, so nothing put in is read as a
//! placeholder again.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::model::{Snapshot, ThreadId};
use crate::stacks::{Measure, path, totals, weigh};
use crate::symbols::Names;

const TEMPLATE: &str = include_str!("page/page.html");
const CSS: &str = include_str!("page/page.css");
const JS: &str = include_str!("page/page.js");
/// Rows of each top table.
const TOP_ROWS: usize = 50;

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
}

/// The page for `snap`.
pub fn page(snap: &Snapshot, names: &Names, ctx: &PageContext) -> String {
    let mut strings = Strings::default();
    let data = json!({
        "title": format!("flightrec snapshot {}", ctx.title),
        "header": header(snap, names, ctx),
        "timeline": timeline(snap, ctx, &mut strings),
        "flames": flames(snap, names, &mut strings),
        "top": {
            "processes": totals(snap, true).into_iter().take(TOP_ROWS).collect::<Vec<_>>(),
            "threads": totals(snap, false).into_iter().take(TOP_ROWS).collect::<Vec<_>>(),
        },
        "strings": strings.table,
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
            ("__DATA__", &script_json(&data.to_string())),
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

fn rfc3339(unix_ns: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_nanos(unix_ns)).to_string()
}

fn secs(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

/// `[key, value, css class]` rows.
fn header(snap: &Snapshot, names: &Names, ctx: &PageContext) -> Vec<Value> {
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
    if !names.unresolved.is_empty() {
        let list: Vec<String> = names
            .unresolved
            .iter()
            .map(|u| format!("{} ({} frames: {})", u.file, u.frames, u.reason))
            .collect();
        rows.push(json!(["not symbolized", list.join("; "), "warn"]));
    }
    for n in &snap.notes {
        rows.push(json!(["note", n, "warn"]));
    }
    rows
}

fn timeline(snap: &Snapshot, ctx: &PageContext, strings: &mut Strings) -> Value {
    let mut threads: Vec<[u64; 3]> = Vec::new();
    let mut thread_index: HashMap<ThreadId, usize> = HashMap::new();
    let mut lanes: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
    let mut prev_end: BTreeMap<u32, i64> = BTreeMap::new();
    for cpu in snap.coverage.keys() {
        lanes.insert(*cpu, Vec::new());
    }
    for s in &snap.slices {
        let t = *thread_index.entry(s.thread).or_insert_with(|| {
            let th = &snap.threads[s.thread as usize];
            threads.push([
                u64::from(strings.get(&th.comm)),
                th.pid as u64,
                th.tid as u64,
            ]);
            threads.len() - 1
        });
        let start = s.start as i64 - snap.first_ns as i64;
        let prev = prev_end.entry(s.cpu).or_insert(0);
        let lane = lanes.entry(s.cpu).or_default();
        lane.extend([
            start - *prev,
            s.end.saturating_sub(s.start) as i64,
            t as i64,
        ]);
        *prev = s.end as i64 - snap.first_ns as i64;
    }
    let trigger = ctx.trigger_unix_ns.and_then(|at| {
        let (wall, clock) = snap.clock?;
        let t = at as i128 - i128::from(wall) + i128::from(clock) - i128::from(snap.first_ns);
        i64::try_from(t).ok()
    });
    let cpus: Vec<u32> = lanes.keys().copied().collect();
    let lanes: Vec<Vec<i64>> = lanes.into_values().collect();
    // Threads as [name, pid, tid], pids signed.
    let threads: Vec<Value> = threads
        .iter()
        .map(|t| json!([t[0], t[1] as i64 as i32, t[2] as i64 as i32]))
        .collect();
    json!({
        "cpus": cpus,
        "span": snap.last_ns.saturating_sub(snap.first_ns),
        "trigger": trigger,
        "threads": threads,
        "lanes": lanes,
    })
}

/// A flame graph node: `[name, value, [children]]`.
#[derive(Default)]
struct Node {
    value: u64,
    children: HashMap<String, Node>,
}

impl Node {
    fn to_json(&self, name: &str, strings: &mut Strings) -> Value {
        let mut kids: Vec<(&String, &Node)> = self.children.iter().collect();
        kids.sort_by(|a, b| a.0.cmp(b.0));
        let children: Vec<Value> = kids
            .into_iter()
            .map(|(n, c)| c.to_json(n, strings))
            .collect();
        json!([strings.get(name), self.value, children])
    }
}

fn tree(snap: &Snapshot, names: &Names, measure: Measure) -> Node {
    let mut root = Node::default();
    for ((thread, stack), w) in weigh(snap, measure) {
        root.value += w;
        let mut node = &mut root;
        for frame in path(snap, names, thread, stack) {
            node = node.children.entry(frame).or_default();
            node.value += w;
        }
    }
    root
}

fn flames(snap: &Snapshot, names: &Names, strings: &mut Strings) -> Vec<Value> {
    let mut out = Vec::new();
    for (i, e) in snap.events.iter().enumerate().filter(|(_, e)| e.sampled) {
        let t = tree(snap, names, Measure::Samples(i));
        let id: String = e
            .name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        out.push(json!({
            "id": format!("on-{id}"),
            "title": format!("On CPU: {} samples", e.name),
            "unit": "samples",
            "empty": "no samples",
            "tree": t.to_json("all", strings),
        }));
    }
    let switch = snap.events.iter().find(|e| e.is_sched_switch);
    let empty = match switch {
        None => "no sched:sched_switch event in this snapshot: no off-CPU time",
        Some(e) if !e.callchain => {
            "sched:sched_switch has no call chains here (callchain = true in its [[event]])"
        }
        Some(_) => "no thread switched out and back in inside the window",
    };
    let mut note = String::new();
    if switch.is_some_and(|e| !e.callchain) {
        note = " (without call chains: by thread only)".into();
    }
    out.push(json!({
        "id": "off-cpu",
        "title": format!("Off CPU: time threads waited, by the stack they switched out with{note}"),
        "unit": "ns",
        "empty": empty,
        "tree": tree(snap, names, Measure::OffCpu).to_json("all", strings),
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;
    use crate::symbols::FrameName;

    /// A thread that ran 100..300 on CPU 1 and was sampled in a function
    /// whose name tries to end the data's <script> element.
    fn snap() -> (Snapshot, Names) {
        let snap = Snapshot {
            host: "web1".into(),
            events: vec![EventInfo {
                name: "cpu-clock".into(),
                sampled: true,
                is_sched_switch: false,
                callchain: true,
                samples: 1,
            }],
            threads: vec![Thread {
                pid: 5,
                tid: 5,
                comm: "app".into(),
            }],
            frames: vec![Frame {
                key: FrameKey::Unmapped { addr: 1 },
                addr: 1,
            }],
            stacks: vec![vec![0]],
            samples: vec![Sample {
                time: 150,
                cpu: 1,
                event: 0,
                thread: 0,
                stack: 0,
                period: 1,
            }],
            slices: vec![Slice {
                cpu: 1,
                start: 100,
                end: 300,
                thread: 0,
            }],
            coverage: [(1, (100, 300))].into_iter().collect(),
            first_ns: 100,
            last_ns: 300,
            clock: Some((1_000_000_000_000, 0)),
            ..Snapshot::default()
        };
        let names = Names {
            frames: vec![FrameName {
                name: "</script><script>alert(1)</script>".into(),
                function: None,
                dso: "x".into(),
            }],
            unresolved: vec![],
        };
        (snap, names)
    }

    fn data_of(page: &str) -> Value {
        let start = page
            .find("<script type=\"application/json\" id=\"data\">")
            .unwrap();
        let rest = &page[start..];
        let body = &rest[rest.find('>').unwrap() + 1..rest.find("</script>").unwrap()];
        serde_json::from_str(body).unwrap()
    }

    #[test]
    fn a_thread_named_like_an_html_comment_leaves_the_data_valid_json() {
        let (mut snap, names) = snap();
        snap.threads[0].comm = "<!--".into();
        let ctx = PageContext {
            matched: Some("oom:mark_victim by <!-- (pid 9)".into()),
            ..PageContext::default()
        };
        let page = page(&snap, &names, &ctx);
        let data = data_of(&page);
        assert!(data["strings"].as_array().unwrap().contains(&json!("<!--")));
        assert_eq!(data["header"][3][1], "oom:mark_victim by <!-- (pid 9)");
        let start = page.find("id=\"data\">").unwrap();
        let body = &page[start + 10..];
        assert!(!body[..body.find("</script>").unwrap()].contains('<'));
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
        assert_eq!(page.matches(JS).count(), 1);
        assert_eq!(page.matches(CSS).count(), 1);
    }

    #[test]
    fn placeholders_are_filled_in_one_pass() {
        assert_eq!(
            fill_template("<a>__A__</a>__B__", &[("__A__", "__B__"), ("__B__", "x")]),
            "<a>__B__</a>x"
        );
    }

    #[test]
    fn the_data_cannot_end_its_script_element_and_reads_back_whole() {
        let (snap, names) = snap();
        let ctx = PageContext {
            title: "web1-x".into(),
            trigger: Some("condition:oom".into()),
            matched: Some("condition:oom: oom:mark_victim on CPU 0 by pid 9 (</script>)".into()),
            trigger_unix_ns: Some(1_000_000_000_200),
        };
        let page = page(&snap, &names, &ctx);
        assert!(!page.contains("</script><script>alert"));
        let data = data_of(&page);
        let strings: Vec<&str> = data["strings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        assert!(strings.contains(&"</script><script>alert(1)</script>"));
        let header = data["header"].as_array().unwrap();
        assert!(
            header[2][1]
                .as_str()
                .unwrap()
                .starts_with("condition:oom, rings frozen at ")
        );
        assert_eq!(
            header[3],
            json!([
                "matched",
                "condition:oom: oom:mark_victim on CPU 0 by pid 9 (</script>)"
            ])
        );
        // The trigger, on the sample clock, relative to the first record.
        assert_eq!(data["timeline"]["trigger"], 100);
        assert_eq!(data["timeline"]["cpus"], json!([1]));
        // One slice: no gap after the start, 200 ns, thread 0.
        assert_eq!(data["timeline"]["lanes"], json!([[0, 200, 0]]));
        let flame = &data["flames"][0];
        assert_eq!(flame["id"], "on-cpu-clock");
        assert_eq!(flame["tree"][1], 1);
        // Off CPU: no sched_switch here, and the page says so.
        assert!(
            data["flames"][1]["empty"]
                .as_str()
                .unwrap()
                .contains("no sched:sched_switch")
        );
    }
}
