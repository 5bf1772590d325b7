"use strict";
// The report page. Everything it shows comes from the JSON in #data (its
// fields are described in report/src/html.rs); no request leaves the page
// (its Content-Security-Policy forbids them). The views below the
// timeline (flame graphs, top functions, bottom-up, the thread tables)
// are computed here from every sample and off-CPU interval, for the range
// the timeline shows or selects, the process or thread picked and the
// container picked.
(function () {
  const errors = document.getElementById("errors");
  window.addEventListener("error", (e) => { errors.textContent += "error: " + e.message + "\n"; });

  const D = JSON.parse(document.getElementById("data").textContent);
  const S = D.strings;
  const SPAN = Math.max(1, D.span);
  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  };

  // Numbers. Tables pick one unit per column (from its largest value), so
  // a column reads down without a change of unit.
  const fmtNs = (ns) => {
    const a = Math.abs(ns);
    if (a >= 1e9) return (ns / 1e9).toFixed(3) + " s";
    if (a >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
    if (a >= 1e3) return (ns / 1e3).toFixed(1) + " µs";
    return Math.round(ns) + " ns";
  };
  const formats = new Map();
  const fmtFixed = (v, digits) => {
    let f = formats.get(digits);
    if (!f) { f = new Intl.NumberFormat("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits }); formats.set(digits, f); }
    return f.format(v);
  };
  const fmtCount = (v) => fmtFixed(v, 0);
  function timeUnit(max) {
    if (max >= 10e9) return { div: 1e9, name: "s", digits: 3 };
    if (max >= 10e6) return { div: 1e6, name: "ms", digits: 1 };
    if (max >= 10e3) return { div: 1e3, name: "µs", digits: 1 };
    return { div: 1, name: "ns", digits: 0 };
  }
  const hash = (s) => { let h = 2166136261; for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); } return h >>> 0; };
  const tip = $("tip");
  const showTip = (ev, text) => {
    tip.textContent = text; tip.style.display = "block";
    const x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    tip.style.left = Math.max(0, x) + "px"; tip.style.top = (ev.clientY + 14) + "px";
  };
  const hideTip = () => { tip.style.display = "none"; };
  // The width inside an element's padding (or the window's, while the
  // element is hidden), for a canvas or an SVG that fills it.
  function contentWidth(e) {
    const cs = getComputedStyle(e);
    const w = e.clientWidth ? e.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight) : document.documentElement.clientWidth - 28;
    return Math.max(500, Math.floor(w) - 2);
  }
  function lower(arr, n, x) { let lo = 0, hi = n; while (lo < hi) { const m = (lo + hi) >> 1; if (arr[m] < x) lo = m + 1; else hi = m; } return lo; }

  // Threads: [name, pid, tid, container]; tid 0 is the idle task
  // (swapper). A thread whose samples fall in two containers is two page
  // threads (same name, pid and tid), so a sample's container is its
  // thread's; -1: in no container (the host).
  const NT = D.threads.length;
  const tComm = (t) => D.threads[t][0];
  const tName = (t) => S[D.threads[t][0]];
  const tPid = (t) => D.threads[t][1];
  const tTid = (t) => D.threads[t][2];
  const tCtr = (t) => D.threads[t][3];
  const isIdle = (t) => tTid(t) === 0;
  const tIds = (t) => tPid(t) === tTid(t) ? "" + tPid(t) : tPid(t) + "/" + tTid(t);
  // Containers ({ name, detail }); without any, the page shows none of
  // its container controls.
  const HAS_CTR = D.containers.length > 0;
  const ctrName = (c) => (c < 0 ? D.host : D.containers[c].name);
  const tWhere = (t) => (HAS_CTR ? ", " + ctrName(tCtr(t)) : "");

  // The stack tree: node 0 is the root, every other node its parent's
  // stack plus one frame ([name, file, kind]: 0 user, 1 kernel, 2 unnamed).
  const parentOf = Int32Array.from(D.stack_parent);
  const frameOf = Int32Array.from(D.stack_frame);
  const NN = parentOf.length;
  const F = D.frames;
  const fName = (f) => S[F[f][0]];
  const fFile = (f) => S[F[f][1]];

  // Per-CPU slices: [gap since the previous one's end, duration, thread].
  const lanes = D.lanes.map((flat) => {
    const n = flat.length / 3, start = new Float64Array(n), end = new Float64Array(n), thread = new Uint32Array(n);
    let t = 0;
    for (let i = 0; i < n; i++) { t += flat[3 * i]; start[i] = t; t += flat[3 * i + 1]; end[i] = t; thread[i] = flat[3 * i + 2]; }
    return { start, end, thread, n };
  });
  // Samples of each sampled event: [time since the previous, thread, node].
  const events = D.events.map((e) => {
    const s = e.samples, n = s.length / 3, time = new Float64Array(n), thread = new Uint32Array(n), node = new Uint32Array(n);
    let t = 0;
    for (let i = 0; i < n; i++) { t += s[3 * i]; time[i] = t; thread[i] = s[3 * i + 1]; node[i] = s[3 * i + 2]; }
    return { id: e.id, name: e.name, n, time, thread, node };
  });
  // Off-CPU intervals by start: [start since the previous, duration,
  // thread, node, slept].
  const off = (() => {
    const s = D.off_cpu.intervals, n = s.length / 5;
    const start = new Float64Array(n), end = new Float64Array(n), thread = new Uint32Array(n), node = new Uint32Array(n), slept = new Uint8Array(n);
    let t = 0;
    for (let i = 0; i < n; i++) { t += s[5 * i]; start[i] = t; end[i] = t + s[5 * i + 1]; thread[i] = s[5 * i + 2]; node[i] = s[5 * i + 3]; slept[i] = s[5 * i + 4]; }
    return { n, start, end, thread, node, slept };
  })();

  // Whole-window activity per thread: ranks threads for their colours,
  // the thread lanes and the picker.
  const onCpuAll = new Float64Array(NT), samplesAll = new Float64Array(NT), offAll = new Float64Array(NT);
  lanes.forEach((l) => { for (let i = 0; i < l.n; i++) onCpuAll[l.thread[i]] += l.end[i] - l.start[i]; });
  events.forEach((e) => { for (let i = 0; i < e.n; i++) samplesAll[e.thread[i]]++; });
  for (let i = 0; i < off.n; i++) offAll[off.thread[i]] += off.end[i] - off.start[i];
  const activity = (t) => onCpuAll[t] + samplesAll[t] * 1e6;
  const ranked = [];
  for (let t = 0; t < NT; t++) if (!isIdle(t) && (onCpuAll[t] > 0 || samplesAll[t] > 0 || offAll[t] > 0)) ranked.push(t);
  ranked.sort((a, b) => activity(b) - activity(a) || offAll[b] - offAll[a]);
  // Distinct colours for the busiest threads, muted ones for the rest.
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#ff9da7", "#1f77b4",
    "#2ca02c", "#d62728", "#9467bd", "#17becf", "#bcbd22", "#8c564b", "#e377c2", "#aec7e8", "#ffbb78", "#98df8a"];
  const color = new Array(NT).fill("#c9ced6");
  ranked.forEach((t, i) => { color[t] = i < PALETTE.length ? PALETTE[i] : "hsl(" + (hash(tName(t) + tTid(t)) % 360) + ",22%,74%)"; });

  // What the reader chose.
  const state = {
    view: [0, SPAN],
    selection: null,
    pick: null, // { kind: "p" (process) or "t" (thread), id: pid or tid }
    container: null, // a container's index, -1 the host, null all
    idle: false,
    tab: "flames",
    measure: 0,
    search: null,
    focus: [], // per flame graph: the keys of the zoomed node's path
    fnSort: { key: "self", dir: -1 },
    pSort: { key: "on", dir: -1 },
    tSort: { key: "on", dir: -1 },
    expanded: new Set(),
  };
  const range = () => state.selection || state.view;
  const inPick = (t) => !state.pick || (state.pick.kind === "p" ? tPid(t) === state.pick.id : tTid(t) === state.pick.id);
  const inCtr = (t) => state.container === null || tCtr(t) === state.container;
  const counted = (t) => (state.idle || !isIdle(t)) && inPick(t) && inCtr(t);

  // ---- Header.
  $("title").textContent = D.title;
  for (const [k, v, cls] of D.header) {
    // Long values take a whole row of the two-pair grid.
    const wide = v.length > 56;
    $("header").appendChild(el("dt", wide ? { class: "wide" } : {}, k));
    $("header").appendChild(el("dd", { class: (cls || "") + (wide ? " wide" : "") }, v));
  }
  if (D.unresolved.length) {
    const box = $("unresolved");
    const frames = D.unresolved.reduce((s, u) => s + u.frames, 0);
    box.querySelector("summary").textContent = D.unresolved.length + " file" + (D.unresolved.length > 1 ? "s" : "") + " not symbolized (" + fmtCount(frames) + " frames show as FILE+0xOFFSET)";
    const sorted = D.unresolved.slice().sort((a, b) => b.frames - a.frames);
    for (const u of sorted) box.querySelector("ul").appendChild(el("li", {}, u.file + ": " + fmtCount(u.frames) + " frames, " + u.reason));
    box.hidden = false;
  }

  // ---- The computation: every view below the timeline, for the range
  // and the threads picked. A range [a, b) at the window's edge is open
  // there, so the whole window holds everything.
  function compute() {
    const [ra, rb] = range();
    const a = ra <= 0 ? -Infinity : ra, b = rb >= SPAN ? Infinity : rb;
    const onCpu = new Float64Array(NT);
    for (const l of lanes) {
      for (let i = lower(l.end, l.n, a); i < l.n && l.start[i] < b; i++) {
        const d = Math.min(b, l.end[i]) - Math.max(a, l.start[i]);
        if (d > 0) onCpu[l.thread[i]] += d;
      }
    }
    const ran = new Uint8Array(NT);
    for (let t = 0; t < NT; t++) if (onCpu[t] > 0) ran[t] = 1;
    const samples = events.map(() => new Float64Array(NT));
    const measures = events.map((e, k) => {
      const weights = new Map(), per = samples[k];
      let total = 0, idle = 0;
      for (let i = lower(e.time, e.n, a); i < e.n && e.time[i] < b; i++) {
        const t = e.thread[i];
        per[t]++; ran[t] = 1;
        if (!counted(t)) { if (isIdle(t) && inPick(t) && inCtr(t)) idle++; continue; }
        const key = t * NN + e.node[i];
        weights.set(key, (weights.get(key) || 0) + 1);
        total++;
      }
      return { kind: "samples", id: e.id, name: e.name, weights, total, idle };
    });
    // A switch inside the range is a witness that the thread ran there,
    // even without a slice (a thread running when the window starts has
    // no slice until its first switch is seen).
    const last = lower(off.start, off.n, b);
    for (let i = 0; i < last; i++) {
      if ((off.start[i] > a) || (off.end[i] < b && off.end[i] < SPAN && off.end[i] > a)) ran[off.thread[i]] = 1;
    }
    const sleeping = new Float64Array(NT), runnable = new Float64Array(NT);
    const weights = new Map(), threads = new Set();
    let total = 0;
    for (let i = 0; i < last; i++) {
      const t = off.thread[i];
      if (!ran[t] || off.end[i] <= a) continue;
      const d = Math.min(b, off.end[i]) - Math.max(a, off.start[i]);
      if (d <= 0) continue;
      if (off.slept[i]) sleeping[t] += d; else runnable[t] += d;
      if (!counted(t)) continue;
      const key = t * NN + off.node[i];
      weights.set(key, (weights.get(key) || 0) + d);
      total += d; threads.add(t);
    }
    measures.push({ kind: "off", id: "off-cpu", name: "off-CPU time", weights, total, threads: threads.size });
    for (const m of measures) m.tree = flameTree(m.weights);
    return { a: ra, b: rb, onCpu, samples, sleeping, runnable, measures };
  }

  // A flame tree: root, thread names, then frames root first. Nodes:
  // { f: frame (-1 root, -2 thread name), c: name string, self, v, kids, list, up }.
  function flameTree(weights) {
    const mk = (f, c, up) => ({ f, c, self: 0, v: 0, kids: new Map(), list: null, up });
    const root = mk(-1, -1, null);
    const cache = new Map();
    const nodeFor = (c, s) => {
      const key = c * NN + s;
      let n = cache.get(key);
      if (n) return n;
      if (s === 0) {
        n = root.kids.get(c);
        if (!n) { n = mk(-2, c, root); root.kids.set(c, n); }
      } else {
        const up = nodeFor(c, parentOf[s]), f = frameOf[s];
        n = up.kids.get(f);
        if (!n) { n = mk(f, F[f][0], up); up.kids.set(f, n); }
      }
      cache.set(key, n);
      return n;
    };
    for (const [key, w] of weights) {
      const t = Math.floor(key / NN);
      nodeFor(tComm(t), key - t * NN).self += w;
    }
    const finish = (n) => {
      n.list = [...n.kids.values()];
      let v = n.self;
      for (const k of n.list) v += finish(k);
      n.list.sort((x, y) => (S[x.c] < S[y.c] ? -1 : S[x.c] > S[y.c] ? 1 : x.f - y.f));
      n.v = v;
      return v;
    };
    finish(root);
    return root;
  }

  // ---- The timeline: one lane per CPU, then lanes for the busiest
  // threads (their slices on any CPU, and their time off CPU: a thin grey
  // line asleep, a red one runnable), drawing at most one rectangle per
  // pixel and lane.
  const canvas = $("timeline");
  const AXIS = 22, LABEL = 150, GAP = 10, TLANE = 16;
  const CLANE = lanes.length <= 8 ? 16 : lanes.length <= 32 ? 10 : 6;
  // Each thread's slices (on any CPU, by start) and off-CPU intervals,
  // grouped in one pass over all of them the first time a lane needs one.
  let byThread = null;
  function groupByThread() {
    const count = new Uint32Array(NT + 1), offCount = new Uint32Array(NT + 1);
    for (const l of lanes) for (let i = 0; i < l.n; i++) count[l.thread[i] + 1]++;
    for (let i = 0; i < off.n; i++) offCount[off.thread[i] + 1]++;
    for (let t = 0; t < NT; t++) { count[t + 1] += count[t]; offCount[t + 1] += offCount[t]; }
    const total = count[NT], start = new Float64Array(total), end = new Float64Array(total), fill = count.slice(0, NT);
    for (const l of lanes) for (let i = 0; i < l.n; i++) { const k = fill[l.thread[i]]++; start[k] = l.start[i]; end[k] = l.end[i]; }
    const offIndex = new Uint32Array(off.n), offFill = offCount.slice(0, NT);
    for (let i = 0; i < off.n; i++) offIndex[offFill[off.thread[i]]++] = i;
    byThread = { count, start, end, offCount, offIndex, slices: new Map() };
  }
  function slicesOf(t) {
    if (!byThread) groupByThread();
    let s = byThread.slices.get(t);
    if (s) return s;
    const a = byThread.count[t], b = byThread.count[t + 1], order = [];
    for (let k = a; k < b; k++) order.push(k);
    order.sort((x, y) => byThread.start[x] - byThread.start[y]);
    s = { n: order.length, start: Float64Array.from(order, (k) => byThread.start[k]), end: Float64Array.from(order, (k) => byThread.end[k]) };
    // Ends stay sorted even if a hostile file says a thread ran twice at once.
    for (let i = 1; i < s.n; i++) if (s.end[i] < s.end[i - 1]) s.end[i] = s.end[i - 1];
    byThread.slices.set(t, s);
    return s;
  }
  function offOf(t) {
    if (!byThread) groupByThread();
    return byThread.offIndex.subarray(byThread.offCount[t], byThread.offCount[t + 1]);
  }
  function laneThreads() {
    let pool = ranked;
    if (state.pick || state.container !== null) pool = ranked.filter((t) => inPick(t) && inCtr(t));
    return pool.filter((t) => onCpuAll[t] > 0 || offAll[t] > 0).slice(0, state.pick && state.pick.kind === "t" ? 4 : 8);
  }
  function niceStep(span, px) {
    const raw = span / Math.max(1, px / 110), p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }
  function tickLabel(t, step) {
    if (step >= 1e9) return (t / 1e9).toFixed(Math.max(0, -Math.floor(Math.log10(step / 1e9)))) + " s";
    if (step >= 1e6) return (t / 1e6).toFixed(Math.max(0, -Math.floor(Math.log10(step / 1e6)))) + " ms";
    if (step >= 1e3) return (t / 1e3).toFixed(Math.max(0, -Math.floor(Math.log10(step / 1e3)))) + " µs";
    return Math.round(t) + " ns";
  }
  let layout = { cpuTop: AXIS, threadTop: AXIS, threads: [] };
  function drawTimeline() {
    const width = contentWidth(canvas.parentElement);
    const threads = laneThreads();
    const threadTop = AXIS + CLANE * lanes.length + GAP;
    layout = { threadTop, threads };
    canvas.width = width; canvas.height = threadTop + TLANE * threads.length + 2;
    const g = canvas.getContext("2d");
    g.fillStyle = "#fff"; g.fillRect(0, 0, width, canvas.height);
    const view = state.view, w = width - LABEL, scale = w / (view[1] - view[0]);
    const x = (t) => LABEL + (t - view[0]) * scale;
    const dim = (t) => ((state.pick && !inPick(t)) || !inCtr(t) ? "#e3e6ea" : color[t]);
    // The ruler, its ticks and a faint grid.
    g.fillStyle = "#f4f5f7"; g.fillRect(0, 0, width, AXIS);
    g.fillStyle = "#d8dce2"; g.fillRect(0, AXIS - 1, width, 1);
    g.font = "11px system-ui, sans-serif";
    const step = niceStep(view[1] - view[0], w);
    for (let t = Math.ceil(view[0] / step) * step; t <= view[1]; t += step) {
      const px = Math.round(x(t));
      g.fillStyle = "#eef0f3"; g.fillRect(px, AXIS, 1, canvas.height - AXIS);
      g.fillStyle = "#8a919c"; g.fillRect(px, AXIS - 6, 1, 5);
      g.fillStyle = "#3b4250"; g.fillText(tickLabel(t, step), Math.min(px + 3, width - 60), 14);
    }
    g.fillStyle = "#8a919c"; g.fillText("time since the first record", 6, 14);
    const inView = new Map();
    const drawSlices = (start, end, n, y, h, fill, count) => {
      let i = lower(end, n, view[0]), lastPx = -1;
      for (; i < n && start[i] <= view[1]; i++) {
        if (count) { const d = Math.min(view[1], end[i]) - Math.max(view[0], start[i]); if (d > 0) count(i, d); }
        const px0 = Math.floor(x(start[i])), px1 = Math.ceil(x(end[i]));
        if (px1 <= lastPx) continue; // this pixel is drawn already
        g.fillStyle = fill(i);
        const from = Math.max(px0, lastPx, LABEL);
        g.fillRect(from, y, Math.max(1, Math.min(px1, width) - from), h);
        lastPx = Math.max(px1, from + 1);
      }
    };
    g.font = "11px ui-monospace, monospace";
    lanes.forEach((l, li) => {
      const y = AXIS + li * CLANE;
      if (CLANE >= 10 || li % 4 === 0) { g.fillStyle = "#3b4250"; g.fillText("CPU " + D.cpus[li], 6, y + Math.min(12, CLANE)); }
      drawSlices(l.start, l.end, l.n, y + 1, CLANE - 2, (i) => dim(l.thread[i]),
        (i, d) => inView.set(l.thread[i], (inView.get(l.thread[i]) || 0) + d));
    });
    if (threads.length) {
      g.fillStyle = "#d8dce2"; g.fillRect(0, threadTop - GAP / 2, width, 1);
    }
    threads.forEach((t, k) => {
      const y = threadTop + k * TLANE;
      g.fillStyle = color[t]; g.fillRect(6, y + 4, 8, 8);
      g.fillStyle = "#1f2328";
      const label = tName(t) + " " + tIds(t);
      g.fillText(label.length > 20 ? label.slice(0, 19) + "…" : label, 18, y + 12);
      const offs = offOf(t);
      for (const i of offs) {
        if (off.end[i] < view[0] || off.start[i] > view[1]) continue;
        const a = Math.max(LABEL, x(off.start[i])), b = Math.min(width, x(off.end[i]));
        g.fillStyle = off.slept[i] ? "#c3c8cf" : "#e4574e";
        if (b - a >= 0.5) g.fillRect(a, y + (off.slept[i] ? 7 : 6), Math.max(1, b - a), off.slept[i] ? 2 : 4);
      }
      const s = slicesOf(t);
      drawSlices(s.start, s.end, s.n, y + 2, TLANE - 4, () => color[t], null);
    });
    // The selection and the trigger.
    if (state.selection) {
      const a = Math.max(LABEL, x(state.selection[0])), b = Math.min(width, x(state.selection[1]));
      if (b > LABEL && a < width) {
        g.fillStyle = "rgba(37, 99, 235, 0.13)"; g.fillRect(a, 0, Math.max(1, b - a), canvas.height);
        g.fillStyle = "#2563eb"; g.fillRect(a, 0, 1, canvas.height); g.fillRect(b - 1, 0, 1, canvas.height);
      }
    }
    if (D.trigger !== null && D.trigger >= view[0] && D.trigger <= view[1]) { g.fillStyle = "#e00"; g.fillRect(x(D.trigger), 0, 2, canvas.height); }
    showRange();
    // Threads in view, by time on CPU; with containers, grouped under
    // their container's name (groups in the order of their busiest thread).
    const list = $("timeline-threads");
    list.textContent = "";
    const shown = [...inView.entries()].sort((p, q) => q[1] - p[1]).slice(0, 12);
    const groups = new Map();
    for (const entry of shown) {
      const c = HAS_CTR ? tCtr(entry[0]) : -1;
      if (!groups.has(c)) groups.set(c, []);
      groups.get(c).push(entry);
    }
    for (const [c, entries] of groups) {
      if (HAS_CTR) {
        // Each group on a line of its own.
        if (list.firstChild) list.appendChild(el("li", { class: "break" }));
        const head = el("li", { class: "ctr" + (state.container === c ? " picked" : ""), "data-container": ctrName(c),
          title: (c < 0 ? "in no container" : D.containers[c].detail) + ": click to show only its threads" }, ctrName(c));
        head.addEventListener("click", () => pickContainer(state.container === c ? null : c));
        list.appendChild(head);
      }
      for (const [t, ns] of entries) {
        const li = el("li", { "data-thread": tName(t), "data-container": ctrName(tCtr(t)), title: "pick " + tName(t) + " (pid " + tPid(t) + ", tid " + tTid(t) + tWhere(t) + ")" });
        const sw = el("span", { class: "swatch" }); sw.style.background = color[t];
        li.appendChild(sw); li.appendChild(document.createTextNode(tName(t) + " "));
        li.appendChild(el("span", { class: "time" }, tIds(t) + " · " + fmtNs(ns)));
        li.addEventListener("click", () => pick({ kind: "t", id: tTid(t) }));
        list.appendChild(li);
      }
    }
  }
  function showRange() {
    const [a, b] = range();
    const what = state.selection ? "selection" : (state.view[0] <= 0 && state.view[1] >= SPAN ? "whole window" : "view");
    $("range-text").textContent = fmtNs(a) + " – " + fmtNs(b) + " (" + fmtNs(b - a) + ", " + what + ")";
    $("zoom-selection").disabled = !state.selection;
    $("clear-selection").disabled = !state.selection && state.view[0] <= 0 && state.view[1] >= SPAN;
  }
  const timeAt = (ev) => state.view[0] + (ev.offsetX - LABEL) / (canvas.width - LABEL) * (state.view[1] - state.view[0]);
  const clampT = (t) => Math.min(SPAN, Math.max(0, t));
  canvas.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const view = state.view, t = timeAt(ev), f = ev.deltaY < 0 ? 0.8 : 1.25;
    let a = t - (t - view[0]) * f, b = t + (view[1] - t) * f;
    if (b - a < 1000) { a = t - 500; b = t + 500; } // down to a microsecond
    state.view = [Math.max(0, a), Math.min(SPAN, b)];
    drawTimeline();
    if (!state.selection) schedule();
  }, { passive: false });
  let drag = null;
  canvas.addEventListener("mousedown", (ev) => {
    if (ev.offsetX >= LABEL && (ev.shiftKey || ev.offsetY < AXIS)) {
      drag = { mode: "select", t0: clampT(timeAt(ev)), x: ev.offsetX };
      ev.preventDefault();
    } else drag = { mode: "pan", x: ev.offsetX, view: state.view.slice(), moved: false };
  });
  window.addEventListener("mouseup", (ev) => {
    const d = drag;
    drag = null;
    if (!d) return;
    if (d.mode === "select" && Math.abs(ev.offsetX - d.x) < 3 && ev.target === canvas) {
      state.selection = null; drawTimeline(); schedule();
    } else if (d.mode === "pan" && !d.moved && ev.target === canvas) {
      const t = threadAt(ev);
      if (t !== null) pick({ kind: "t", id: tTid(t) });
    }
  });
  canvas.addEventListener("mousemove", (ev) => {
    if (drag && drag.mode === "pan") {
      if (Math.abs(ev.offsetX - drag.x) > 2) drag.moved = true;
      const span = drag.view[1] - drag.view[0];
      const dt = (ev.offsetX - drag.x) / (canvas.width - LABEL) * span;
      const a = Math.min(Math.max(0, drag.view[0] - dt), SPAN - span);
      state.view = [a, a + span]; drawTimeline();
      if (!state.selection) schedule();
      return;
    }
    if (drag && drag.mode === "select") {
      const t = clampT(timeAt(ev));
      state.selection = [Math.round(Math.min(drag.t0, t)), Math.round(Math.max(drag.t0, t))];
      drawTimeline(); schedule();
      return;
    }
    hover(ev);
  });
  canvas.addEventListener("mouseleave", hideTip);
  canvas.addEventListener("dblclick", () => { state.view = [0, SPAN]; state.selection = null; drawTimeline(); schedule(); });
  $("zoom-selection").addEventListener("click", () => { if (state.selection) { state.view = state.selection; state.selection = null; drawTimeline(); schedule(); } });
  $("clear-selection").addEventListener("click", () => { state.view = [0, SPAN]; state.selection = null; drawTimeline(); schedule(); });
  window.addEventListener("keydown", (ev) => { if (ev.key === "Escape" && state.selection) { state.selection = null; drawTimeline(); schedule(); } });

  // What is under the pointer: [thread, text] or null.
  function hit(ev) {
    if (ev.offsetX < LABEL) {
      const k = Math.floor((ev.offsetY - layout.threadTop) / TLANE);
      if (ev.offsetY >= layout.threadTop && k < layout.threads.length) { const t = layout.threads[k]; return [t, tName(t) + " (pid " + tPid(t) + ", tid " + tTid(t) + tWhere(t) + "): click to pick"]; }
      return null;
    }
    const t = timeAt(ev), slop = 2 * (state.view[1] - state.view[0]) / canvas.width;
    const find = (start, end, n) => { const i = lower(end, n, t - slop); return i < n && start[i] <= t + slop ? i : -1; };
    if (ev.offsetY >= AXIS && ev.offsetY < AXIS + CLANE * lanes.length) {
      const li = Math.floor((ev.offsetY - AXIS) / CLANE), l = lanes[li], i = find(l.start, l.end, l.n);
      if (i < 0) return null;
      const th = l.thread[i];
      return [th, tName(th) + " (pid " + tPid(th) + ", tid " + tTid(th) + tWhere(th) + ")\nCPU " + D.cpus[li] + " from " + fmtNs(l.start[i]) + " for " + fmtNs(l.end[i] - l.start[i])];
    }
    const k = Math.floor((ev.offsetY - layout.threadTop) / TLANE);
    if (ev.offsetY < layout.threadTop || k >= layout.threads.length) return null;
    const th = layout.threads[k], s = slicesOf(th), i = find(s.start, s.end, s.n);
    if (i >= 0) return [th, tName(th) + " " + tIds(th) + " on CPU from " + fmtNs(s.start[i]) + " for " + fmtNs(s.end[i] - s.start[i])];
    for (const j of offOf(th)) {
      if (off.start[j] <= t && off.end[j] >= t) {
        const frames = [];
        for (let n = off.node[j]; n !== 0 && frames.length < 6; n = parentOf[n]) frames.push(fName(frameOf[n]));
        return [th, tName(th) + " " + tIds(th) + (off.slept[j] ? " asleep" : " runnable (preempted)") + " from " + fmtNs(off.start[j]) + " for " + fmtNs(off.end[j] - off.start[j]) +
          (frames.length ? "\nin " + frames.join("\n ← ") : "")];
      }
    }
    return null;
  }
  const threadAt = (ev) => { const h = hit(ev); return h ? h[0] : null; };
  function hover(ev) { const h = hit(ev); if (h) showTip(ev, h[1]); else hideTip(); }

  // ---- The thread picker: processes by activity, each with its threads.
  // Filled when first used: a thousand options take the browser longer
  // to lay out than the rest of the page.
  let pickerFilled = false;
  function fillPicker() {
    if (pickerFilled) return;
    pickerFilled = true;
    const sel = $("thread-pick"), procs = new Map();
    for (const t of ranked) {
      let p = procs.get(tPid(t));
      if (!p) { p = { pid: tPid(t), name: null, tids: new Map() }; procs.set(tPid(t), p); }
      if (tTid(t) === tPid(t) && p.name === null) p.name = tName(t);
      if (!p.tids.has(tTid(t))) p.tids.set(tTid(t), t);
    }
    for (const p of procs.values()) {
      const name = p.name !== null ? p.name : tName(p.tids.values().next().value);
      const group = el("optgroup", { label: name + " · pid " + p.pid });
      group.appendChild(el("option", { value: "p:" + p.pid }, name + " (pid " + p.pid + ", " + p.tids.size + " thread" + (p.tids.size > 1 ? "s" : "") + ")"));
      for (const [tid, t] of p.tids) group.appendChild(el("option", { value: "t:" + tid }, "  " + tName(t) + " (tid " + tid + ")"));
      sel.appendChild(group);
    }
  }
  for (const type of ["mousedown", "focus", "keydown"]) $("thread-pick").addEventListener(type, fillPicker);
  $("thread-pick").addEventListener("change", (ev) => {
    const v = ev.target.value;
    pick(v ? { kind: v[0], id: Number(v.slice(2)) } : null);
  });
  function pick(p) {
    state.pick = p;
    state.focus = [];
    const v = p ? p.kind + ":" + p.id : "";
    const sel = $("thread-pick");
    fillPicker();
    if ([...sel.options].some((o) => o.value === v)) sel.value = v;
    drawTimeline();
    update();
  }
  $("show-idle").addEventListener("change", (ev) => { state.idle = ev.target.checked; update(); });

  // ---- The container picker: containers by samples, then the host.
  if (HAS_CTR) {
    const samplesOf = new Float64Array(D.containers.length + 1);
    for (let t = 0; t < NT; t++) samplesOf[tCtr(t) + 1] += samplesAll[t];
    const order = D.containers.map((_, c) => c).sort((a, b) => samplesOf[b + 1] - samplesOf[a + 1]);
    order.push(-1);
    const sel = $("container-pick");
    for (const c of order) {
      sel.appendChild(el("option", { value: "" + c, title: c < 0 ? "in no container" : D.containers[c].detail },
        ctrName(c) + " (" + fmtCount(samplesOf[c + 1]) + " samples)"));
    }
    sel.addEventListener("change", (ev) => pickContainer(ev.target.value === "" ? null : Number(ev.target.value)));
    $("container-box").hidden = false;
  }
  function pickContainer(c) {
    state.container = c;
    state.focus = [];
    $("container-pick").value = c === null ? "" : "" + c;
    drawTimeline();
    update();
  }
  $("search").addEventListener("input", (ev) => {
    const q = ev.target.value;
    try { state.search = q ? new RegExp(q) : null; } catch (e) { state.search = null; }
    stale.add("flames");
    renderTab();
  });

  // ---- Tabs and the measure the tables weigh by.
  document.querySelectorAll("#tabs button").forEach((b) => b.addEventListener("click", () => showTab(b.dataset.tab)));
  function showTab(tab) {
    state.tab = tab;
    document.querySelectorAll("#tabs button").forEach((b) => b.classList.toggle("active", b.dataset.tab === tab));
    document.querySelectorAll(".tab").forEach((s) => { s.hidden = s.id !== "tab-" + tab; });
    $("measure-box").hidden = tab !== "functions" && tab !== "bottom-up";
    renderTab();
  }
  events.forEach((e, i) => $("measure").appendChild(el("option", { value: i }, e.name + " samples (on CPU)")));
  $("measure").appendChild(el("option", { value: events.length }, "off-CPU time"));
  $("measure").addEventListener("change", (ev) => {
    state.measure = Number(ev.target.value);
    state.expanded = new Set();
    stale.add("functions"); stale.add("bottom-up");
    renderTab();
  });

  // ---- Flame graphs: an SVG each, one <g> (and a <title>) per frame at
  // least a pixel wide, root at the top; click zooms, the search marks.
  const MIN_PX = 1, TALL_PX = 3, ROW = 16, NS = "http://www.w3.org/2000/svg";
  const svgEl = (tag, attrs, text) => {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const fillOf = (n) => {
    if (n.f === -1) return "#cfd4db";
    if (n.f === -2) return "#aac4e6";
    const kind = F[n.f][2], h = hash(S[n.c]);
    if (kind === 1) return "hsl(" + (195 + h % 25) + "," + (40 + (h >> 8) % 20) + "%," + (64 + (h >> 16) % 12) + "%)";
    if (kind === 2) return "hsl(0,0%," + (74 + h % 10) + "%)";
    return "rgb(" + (225 + h % 30) + "," + (110 + (h >> 8) % 120) + "," + ((h >> 16) % 55) + ")";
  };
  const nodeName = (n) => (n.f === -1 ? "all" : S[n.c]);
  let R = null;
  let flameBoxes = null;
  const inWhat = () => (state.container === null ? "" : " in " + ctrName(state.container));
  function flameHeading(m) {
    if (m.kind === "samples") {
      return ["On CPU: " + m.name + ", " + fmtCount(m.total) + " samples" + inWhat(),
        m.idle && !state.idle ? " (idle hidden: " + fmtCount(m.idle) + " samples of swapper; \"show idle\" adds them)" : ""];
    }
    const [a, b] = [R.a, R.b];
    return ["Off CPU: " + fmtNs(m.total) + " waited, summed over " + m.threads + " thread" + (m.threads === 1 ? "" : "s") + inWhat(),
      " that ran in the range (each counts at most the range's " + fmtNs(b - a) + "), by the stack each switched out with" +
      (D.off_cpu.note ? " (" + D.off_cpu.note + ")" : "")];
  }
  function renderFlames() {
    if (!flameBoxes) {
      flameBoxes = R.measures.map((m) => {
        const section = el("div", { class: "flame", id: "flame-" + m.id });
        const h = el("h3"), box = el("div", { class: "box" });
        section.appendChild(h); section.appendChild(box);
        $("flames").appendChild(section);
        return { section, h, box };
      });
    }
    $("flames").setAttribute("data-range", Math.round(R.a) + " " + Math.round(R.b));
    $("flames").setAttribute("data-container", state.container === null ? "" : ctrName(state.container));
    const parts = [];
    R.measures.forEach((m, i) => {
      const { section, h, box } = flameBoxes[i];
      const [title, note] = flameHeading(m);
      h.textContent = title;
      h.appendChild(el("span", { class: "muted" }, note));
      section.setAttribute("data-total", m.total);
      if (m.kind === "samples") section.setAttribute("data-idle-hidden", m.idle);
      const matched = drawFlame(m, i, box);
      const fmt = m.kind === "off" ? fmtNs : (v) => fmtCount(v) + " samples";
      if (state.search) parts.push(m.name + ": " + fmt(matched) + " (" + (100 * matched / Math.max(1, m.total)).toFixed(2) + "%)");
    });
    $("matched").textContent = state.search ? "matched: " + parts.join("; ") : "";
  }
  function drawFlame(m, index, box) {
    box.textContent = "";
    const root = m.tree;
    if (root.v === 0) {
      box.appendChild(el("div", { class: "muted empty" }, m.kind === "off" ? D.off_cpu.empty : "no samples of the threads picked in the range"));
      return 0;
    }
    // The zoomed node: the keys of its path, as far as they still lead.
    const chain = [root];
    for (const key of state.focus[index] || []) {
      const next = chain[chain.length - 1].kids.get(key);
      if (!next) break;
      chain.push(next);
    }
    const focus = chain[chain.length - 1];
    const width = contentWidth($("flames"));
    const scale = width / Math.max(1, focus.v);
    // The height: down to the deepest level whose frames, of those wide
    // enough to read, hold 1% of the weight; narrow towers below are cut
    // (their last frame shows a dark lower edge, a click zooms in), so a
    // few deep stacks leave no tall blank area.
    const perLevel = [];
    const weigh = (n, l) => { if (n.v * scale < TALL_PX) return; perLevel[l] = (perLevel[l] || 0) + n.v; for (const c of n.list) weigh(c, l + 1); };
    weigh(focus, 0);
    let deep = 1;
    perLevel.forEach((v, l) => { if (v >= focus.v * 0.01) deep = l + 1; });
    const levels = deep + chain.length - 1;
    const svg = svgEl("svg", { width, height: levels * ROW + 2 });
    const re = state.search;
    const fmt = m.kind === "off" ? fmtNs : (v) => fmtCount(v) + " samples";
    let matched = 0;
    const keysTo = (n) => { const k = []; for (; n.up; n = n.up) k.push(n.f === -2 ? n.c : n.f); return k.reverse(); };
    const frame = (n, x, y, w, fill, onclick) => {
      const name = nodeName(n);
      const tipText = name + (n.f >= 0 ? "  [" + fFile(n.f) + "]" : "") + "\n" + fmt(n.v) + ", " + (100 * n.v / Math.max(1, root.v)).toFixed(2) + "% of all" +
        (n.self ? "; self " + fmt(n.self) : "");
      const g = svgEl("g", {});
      g.appendChild(svgEl("title", {}, name + " (" + fmt(n.v) + ", " + (100 * n.v / Math.max(1, root.v)).toFixed(2) + "%)"));
      const r = svgEl("rect", { x, y, width: w, height: ROW - 1, fill });
      g.appendChild(r);
      if (w > 28) {
        const fit = Math.floor((w - 6) / 6.7);
        g.appendChild(svgEl("text", { x: x + 3, y: y + 11.5 }, name.length <= fit ? name : name.slice(0, Math.max(0, fit - 2)) + ".."));
      }
      g.flightrec = { onclick, tipText };
      svg.appendChild(g);
      return r;
    };
    // One listener on the SVG serves every frame (thousands of them).
    const frameOfEv = (ev) => { const g = ev.target.closest("g"); return g && g.flightrec; };
    svg.addEventListener("click", (ev) => { const f = frameOfEv(ev); if (f) f.onclick(); });
    svg.addEventListener("mousemove", (ev) => { const f = frameOfEv(ev); if (f) showTip(ev, f.tipText); else hideTip(); });
    svg.addEventListener("mouseleave", hideTip);
    chain.slice(0, -1).forEach((n, k) => {
      frame(n, 0, k * ROW, width, "#e3e6ea", () => { state.focus[index] = keysTo(n); renderFlames(); });
    });
    const add = (n, x, lvl, marked) => {
      const w = n.v * scale;
      if (w < MIN_PX || lvl >= levels) return;
      const hit = re !== null && n.f >= 0 && re.test(S[n.c]);
      const r = frame(n, x, lvl * ROW, w, fillOf(n), () => { state.focus[index] = keysTo(n); renderFlames(); });
      if (hit) { r.setAttribute("class", "match"); if (!marked) matched += n.v; }
      if (lvl === levels - 1 && n.list.some((c) => c.v * scale >= MIN_PX)) {
        r.parentNode.appendChild(svgEl("rect", { x, y: lvl * ROW + ROW - 4, width: w, height: 3, class: "cut" }));
      }
      let cx = x;
      for (const c of n.list) { add(c, cx, lvl + 1, marked || hit); cx += c.v * scale; }
    };
    add(focus, 0, chain.length - 1, false);
    if (re) {
      // Matches outside the zoomed node count too.
      matched = 0;
      const count = (n, marked) => { const h = !marked && n.f >= 0 && re.test(S[n.c]); if (h) matched += n.v; for (const c of n.list) count(c, marked || h); };
      count(root, false);
    }
    box.appendChild(svg);
    return matched;
  }

  // ---- Sortable tables. Columns: { key, label, num, value(row), text(row) }.
  function sortableTable(table, columns, rows, sort, limit, onRow, rowClass) {
    table.textContent = "";
    const col = columns.find((c) => c.key === sort.key) || columns[0];
    rows.sort((x, y) => {
      const p = col.value(x), q = col.value(y);
      return (p < q ? -1 : p > q ? 1 : 0) * sort.dir;
    });
    const head = el("tr");
    for (const c of columns) {
      const th = el("th", { class: "sortable" + (c.num ? " num" : ""), "data-key": c.key, title: "sort by " + c.label }, c.label);
      if (c.key === sort.key) th.setAttribute("aria-sort", sort.dir < 0 ? "descending" : "ascending");
      th.addEventListener("click", () => {
        if (sort.key === c.key) sort.dir = -sort.dir; else { sort.key = c.key; sort.dir = c.num ? -1 : 1; }
        sortableTable(table, columns, rows, sort, limit, onRow, rowClass);
      });
      head.appendChild(th);
    }
    const thead = el("thead"); thead.appendChild(head); table.appendChild(thead);
    const body = el("tbody");
    for (const r of rows.slice(0, limit)) {
      const tr = el("tr");
      if (rowClass) { const c = rowClass(r); if (c) tr.className = c; }
      for (const c of columns) {
        const td = el("td", { class: c.cls || (c.num ? "num" : ""), "data-value": c.value(r) });
        const t = c.text(r);
        if (typeof t === "string") td.textContent = t; else td.appendChild(t);
        tr.appendChild(td);
      }
      if (onRow) tr.addEventListener("click", (ev) => onRow(r, ev));
      body.appendChild(tr);
    }
    table.appendChild(body);
    if (rows.length > limit) {
      const tr = el("tr"); tr.appendChild(el("td", { colspan: columns.length, class: "muted" }, (rows.length - limit) + " more rows not shown"));
      body.appendChild(tr);
    }
  }
  // Value columns of a measure: counts, or times in the unit of the column.
  function valueColumn(key, label, m, get, max) {
    if (m.kind === "samples") return { key, label, num: true, value: get, text: (r) => fmtCount(get(r)) };
    const u = timeUnit(max);
    return { key, label: label + " (" + u.name + ")", num: true, value: get, text: (r) => fmtFixed(get(r) / u.div, u.digits) };
  }
  const pctColumn = (key, label, get, total) => ({
    key, label, num: true, value: get,
    text: (r) => {
      const p = 100 * get(r) / Math.max(1, total), span = el("span");
      const bar = el("span", { class: "bar" }); bar.style.width = Math.max(1, Math.round(p * 0.6)) + "px";
      span.appendChild(bar); span.appendChild(document.createTextNode(p.toFixed(1) + "%"));
      return span;
    },
  });

  function functionRows(m) {
    const self = new Map(), total = new Map(), on = new Map();
    const walk = (n) => {
      if (n.f >= 0) {
        if (n.self) self.set(n.f, (self.get(n.f) || 0) + n.self);
        const k = on.get(n.f) || 0;
        if (!k) total.set(n.f, (total.get(n.f) || 0) + n.v);
        on.set(n.f, k + 1);
      }
      for (const c of n.list) walk(c);
      if (n.f >= 0) on.set(n.f, on.get(n.f) - 1);
    };
    walk(m.tree);
    return [...total.keys()].map((f) => ({ f, name: fName(f), file: fFile(f), self: self.get(f) || 0, total: total.get(f) }));
  }
  const escapeRegex = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  function renderFunctions() {
    const m = R.measures[state.measure];
    const rows = functionRows(m);
    const maxSelf = rows.reduce((x, r) => Math.max(x, r.self), 0), maxTotal = rows.reduce((x, r) => Math.max(x, r.total), 0);
    const columns = [
      { key: "name", label: "Function", value: (r) => r.name, cls: "fn", text: (r) => {
        const span = el("span");
        const callers = el("a", { class: "callers", title: "its callers, bottom-up" }, "↰");
        callers.addEventListener("click", (ev) => { ev.stopPropagation(); state.expanded = new Set(["" + r.f]); stale.delete("bottom-up"); showTab("bottom-up"); renderBottomUp(r.f); });
        span.appendChild(callers); span.appendChild(document.createTextNode(r.name));
        return span;
      } },
      valueColumn("self", "Self", m, (r) => r.self, maxSelf),
      pctColumn("self-pct", "Self %", (r) => r.self, m.total),
      valueColumn("total", "Total", m, (r) => r.total, maxTotal),
      pctColumn("total-pct", "Total %", (r) => r.total, m.total),
      { key: "file", label: "File", value: (r) => r.file, cls: "file", text: (r) => r.file },
    ];
    sortableTable($("top-functions"), columns, rows, state.fnSort, 500, (r) => {
      const q = "^" + escapeRegex(r.name) + "$";
      $("search").value = q; state.search = new RegExp(q); stale.add("flames");
    });
    $("top-functions").setAttribute("data-measure", m.id);
  }

  // Bottom-up: functions by self weight; a row's children are its callers,
  // each with the weight that came through it.
  function renderBottomUp(scrollTo) {
    const m = R.measures[state.measure], table = $("bottom-up");
    table.textContent = "";
    const u = m.kind === "off" ? timeUnit(m.total) : null;
    const fmt = (v) => (u ? fmtFixed(v / u.div, u.digits) : fmtCount(v));
    const head = el("tr");
    for (const [label, num] of [["Function (callers below)", false], ["File", false], [m.kind === "off" ? "Weight (" + u.name + ")" : "Samples", true], ["%", true]]) head.appendChild(el("th", num ? { class: "num" } : {}, label));
    const thead = el("thead"); thead.appendChild(head); table.appendChild(thead);
    const body = el("tbody"); table.appendChild(body);
    const roots = new Map();
    const gather = (n) => {
      if (n.f >= 0 && n.self) {
        let g = roots.get(n.f);
        if (!g) { g = { key: "" + n.f, f: n.f, c: n.c, w: 0, entries: [] }; roots.set(n.f, g); }
        g.w += n.self; g.entries.push([n, n.self]);
      }
      for (const c of n.list) gather(c);
    };
    gather(m.tree);
    const callers = (g) => {
      const groups = new Map();
      for (const [n, w] of g.entries) {
        const up = n.up;
        if (!up || up.f === -1) continue;
        const k = up.f >= 0 ? up.f : "t" + up.c;
        let c = groups.get(k);
        if (!c) { c = { key: g.key + "/" + k, f: up.f, c: up.c, w: 0, entries: [] }; groups.set(k, c); }
        c.w += w; c.entries.push([up, w]);
      }
      return [...groups.values()].sort((x, y) => y.w - x.w);
    };
    let target = null;
    // Rows in tree order: a row, then its callers' rows when it is open.
    const row = (g, depth) => {
      const tr = el("tr", { "data-key": g.key });
      const kids = g.f === -2 ? [] : callers(g);
      const open = state.expanded.has(g.key);
      const name = el("td", { class: "fn" });
      name.style.paddingLeft = (4 + depth * 14) + "px";
      name.appendChild(el("span", { class: "toggle" }, kids.length ? (open ? "▾" : "▸") : ""));
      name.appendChild(document.createTextNode(g.f === -2 ? "thread " + S[g.c] : S[g.c]));
      tr.appendChild(name);
      tr.appendChild(el("td", { class: "file" }, g.f >= 0 ? fFile(g.f) : ""));
      tr.appendChild(el("td", { class: "num", "data-value": g.w }, fmt(g.w)));
      tr.appendChild(el("td", { class: "num" }, (100 * g.w / Math.max(1, m.total)).toFixed(1) + "%"));
      tr.addEventListener("click", () => {
        if (!kids.length) return;
        if (state.expanded.has(g.key)) state.expanded.delete(g.key); else state.expanded.add(g.key);
        renderBottomUp();
      });
      body.appendChild(tr);
      if (scrollTo !== undefined && depth === 0 && g.f === scrollTo) target = tr;
      if (open) for (const k of kids) row(k, depth + 1);
    };
    const sorted = [...roots.values()].sort((x, y) => y.w - x.w);
    // At first, the heaviest function's heaviest chain of callers is open.
    if (!state.expanded.size) {
      for (let g = sorted[0], k = 0; g && k < 4; g = callers(g)[0], k++) state.expanded.add(g.key);
    }
    for (const g of sorted.slice(0, 300)) row(g, 0);
    if (sorted.length > 300) { const tr = el("tr"); tr.appendChild(el("td", { colspan: 4, class: "muted" }, (sorted.length - 300) + " more functions not shown")); body.appendChild(tr); }
    if (target) target.scrollIntoView({ block: "center" });
  }

  function renderThreads() {
    const rowsT = [], procs = new Map();
    const nEv = events.length;
    for (let t = 0; t < NT; t++) {
      if (isIdle(t) && !state.idle) continue;
      const samples = R.samples.map((s) => s[t]);
      const any = R.onCpu[t] > 0 || R.sleeping[t] > 0 || R.runnable[t] > 0 || samples.some((s) => s > 0);
      if (!any) continue;
      if (!inCtr(t)) continue;
      rowsT.push({ t, name: tName(t), pid: tPid(t), tid: tTid(t), ctr: ctrName(tCtr(t)), on: R.onCpu[t], samples, sleeping: R.sleeping[t], runnable: R.runnable[t] });
      let p = procs.get(tPid(t));
      if (!p) { p = { name: tName(t), pid: tPid(t), ctr: ctrName(tCtr(t)), tids: new Set(), on: 0, samples: new Array(nEv).fill(0), sleeping: 0, runnable: 0 }; procs.set(tPid(t), p); }
      if (tTid(t) === tPid(t)) { p.name = tName(t); p.ctr = ctrName(tCtr(t)); }
      p.tids.add(tTid(t)); p.on += R.onCpu[t]; p.sleeping += R.sleeping[t]; p.runnable += R.runnable[t];
      samples.forEach((s, i) => { p.samples[i] += s; });
    }
    const rowsP = [...procs.values()];
    const max = (rows, get) => rows.reduce((x, r) => Math.max(x, get(r)), 0);
    const timeCol = (key, label, rows, get) => {
      const u = timeUnit(max(rows, get));
      return { key, label: label + " (" + u.name + ")", num: true, value: get, text: (r) => fmtFixed(get(r) / u.div, u.digits) };
    };
    const sampleCols = events.map((e, i) => ({ key: "s" + i, label: e.name, num: true, value: (r) => r.samples[i], text: (r) => fmtCount(r.samples[i]) }));
    const ctrCol = HAS_CTR ? [{ key: "ctr", label: "Container", value: (r) => r.ctr, text: (r) => r.ctr }] : [];
    const tail = (rows) => [...ctrCol, timeCol("on", "On CPU", rows, (r) => r.on), ...sampleCols, timeCol("sleeping", "Sleeping", rows, (r) => r.sleeping), timeCol("runnable", "Runnable", rows, (r) => r.runnable)];
    sortableTable($("top-processes"), [
      { key: "name", label: "Process", value: (r) => r.name, text: (r) => r.name },
      { key: "pid", label: "pid", num: true, value: (r) => r.pid, text: (r) => "" + r.pid },
      { key: "threads", label: "Threads", num: true, value: (r) => r.tids.size, text: (r) => "" + r.tids.size },
      ...tail(rowsP),
    ], rowsP, state.pSort, 100, (r) => pick({ kind: "p", id: r.pid }), (r) => (state.pick && state.pick.kind === "p" && state.pick.id === r.pid ? "picked" : ""));
    sortableTable($("top-threads"), [
      { key: "name", label: "Thread", value: (r) => r.name, text: (r) => r.name },
      { key: "pid", label: "pid", num: true, value: (r) => r.pid, text: (r) => "" + r.pid },
      { key: "tid", label: "tid", num: true, value: (r) => r.tid, text: (r) => "" + r.tid },
      ...tail(rowsT),
    ], rowsT, state.tSort, 200, (r) => pick({ kind: "t", id: r.tid }), (r) => (state.pick && state.pick.kind === "t" && state.pick.id === r.tid ? "picked" : ""));
  }

  // ---- Updates: at once for a control, once the timeline rests for it.
  // Only the tab in view is drawn; the others when they are shown.
  let pending = 0, updates = 0;
  const renderers = { flames: renderFlames, functions: renderFunctions, "bottom-up": () => renderBottomUp(), threads: renderThreads };
  const stale = new Set();
  function schedule() { showRange(); clearTimeout(pending); pending = setTimeout(update, 150); }
  function update() {
    clearTimeout(pending);
    R = compute();
    for (const tab in renderers) stale.add(tab);
    renderTab();
    document.body.setAttribute("data-updates", ++updates);
  }
  function renderTab() {
    if (R && stale.delete(state.tab)) renderers[state.tab]();
  }

  // Sticky table headers sit under the toolbar, however tall it wraps.
  const barHeight = () => document.documentElement.style.setProperty("--bar-h", $("toolbar").offsetHeight + "px");
  barHeight();
  drawTimeline();
  update();
  let lastWidth = window.innerWidth;
  window.addEventListener("resize", () => { if (window.innerWidth !== lastWidth) { lastWidth = window.innerWidth; barHeight(); drawTimeline(); stale.add("flames"); renderTab(); } });
  document.body.setAttribute("data-ready-ms", Math.round(performance.now()));
  document.body.setAttribute("data-ready", "1");
})();
