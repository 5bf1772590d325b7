"use strict";
// The report page: everything it shows comes from the JSON in #data; no
// request leaves the page (its Content-Security-Policy forbids them).
(function () {
  const errors = document.getElementById("errors");
  window.addEventListener("error", (e) => { errors.textContent += "error: " + e.message + "\n"; });

  const D = JSON.parse(document.getElementById("data").textContent);
  const S = D.strings;
  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const fmtNs = (ns) => {
    const a = Math.abs(ns);
    if (a >= 1e9) return (ns / 1e9).toFixed(3) + " s";
    if (a >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
    if (a >= 1e3) return (ns / 1e3).toFixed(1) + " µs";
    return Math.round(ns) + " ns";
  };
  const hash = (s) => { let h = 2166136261; for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); } return h >>> 0; };
  const warm = (name) => { const h = hash(name); return "rgb(" + (205 + h % 50) + "," + (80 + (h >> 8) % 130) + "," + ((h >> 16) % 60) + ")"; };
  const hue = (name) => "hsl(" + (hash(name) % 360) + ",65%,60%)";
  const tip = $("tip");
  const showTip = (ev, text) => { tip.textContent = text; tip.style.display = "block"; tip.style.left = (ev.clientX + 12) + "px"; tip.style.top = (ev.clientY + 12) + "px"; };
  const hideTip = () => { tip.style.display = "none"; };

  // Header.
  $("title").textContent = D.title;
  const header = $("header");
  for (const [k, v, cls] of D.header) {
    const tr = el("tr");
    tr.appendChild(el("th", {}, k));
    tr.appendChild(el("td", cls ? { class: cls } : {}, v));
    header.appendChild(tr);
  }

  // Timeline.
  const T = D.timeline;
  const lanes = T.lanes.map((flat) => {
    const n = flat.length / 3, start = new Float64Array(n), end = new Float64Array(n), thread = new Uint32Array(n);
    let t = 0;
    for (let i = 0; i < n; i++) { t += flat[3 * i]; start[i] = t; t += flat[3 * i + 1]; end[i] = t; thread[i] = flat[3 * i + 2]; }
    return { start, end, thread, n };
  });
  const canvas = $("timeline");
  const LANE = 18, AXIS = 18, LABEL = 60;
  let view = [0, Math.max(1, T.span)];
  const threadColor = T.threads.map((t) => hue(S[t[0]] + t[1]));
  const threadName = (i) => S[T.threads[i][0]] + " pid " + T.threads[i][1] + " tid " + T.threads[i][2];
  function lower(arr, n, x) { let lo = 0, hi = n; while (lo < hi) { const m = (lo + hi) >> 1; if (arr[m] < x) lo = m + 1; else hi = m; } return lo; }
  function drawTimeline() {
    const width = Math.max(400, canvas.parentElement.clientWidth - 4);
    canvas.width = width; canvas.height = AXIS + LANE * lanes.length;
    const g = canvas.getContext("2d");
    g.font = "11px monospace"; g.fillStyle = "#fff"; g.fillRect(0, 0, canvas.width, canvas.height);
    const w = width - LABEL, scale = w / (view[1] - view[0]);
    const x = (t) => LABEL + (t - view[0]) * scale;
    const inView = new Map();
    lanes.forEach((lane, li) => {
      const y = AXIS + li * LANE;
      g.fillStyle = "#000"; g.fillText("CPU " + T.cpus[li], 2, y + 13);
      let i = lower(lane.end, lane.n, view[0]), lastPx = -1;
      for (; i < lane.n && lane.start[i] <= view[1]; i++) {
        const a = Math.max(view[0], lane.start[i]), b = Math.min(view[1], lane.end[i]);
        inView.set(lane.thread[i], (inView.get(lane.thread[i]) || 0) + (b - a));
        const px0 = Math.floor(x(lane.start[i])), px1 = Math.ceil(x(lane.end[i]));
        if (px1 <= lastPx) continue; // this pixel is drawn already
        g.fillStyle = threadColor[lane.thread[i]];
        const from = Math.max(px0, lastPx, LABEL);
        g.fillRect(from, y + 2, Math.max(1, Math.min(px1, width) - from), LANE - 4);
        lastPx = Math.max(px1, from + 1);
      }
    });
    // Axis and the trigger.
    g.fillStyle = "#555";
    for (let k = 0; k <= 8; k++) { const t = view[0] + (view[1] - view[0]) * k / 8; const px = x(t); g.fillRect(px, 0, 1, 4); g.fillText(fmtNs(t), Math.min(px + 2, width - 70), 12); }
    if (T.trigger !== null) { g.fillStyle = "#e00"; g.fillRect(x(T.trigger), AXIS - 4, 2, canvas.height); }
    $("timeline-range").textContent = "showing " + fmtNs(view[0]) + " to " + fmtNs(view[1]) + " of " + fmtNs(T.span) + (T.trigger !== null ? "; red: the trigger, at " + fmtNs(T.trigger) : "");
    const list = $("timeline-threads");
    list.textContent = "";
    [...inView.entries()].sort((a, b) => b[1] - a[1]).slice(0, 30).forEach(([t, ns]) => {
      const li = el("li", { "data-thread": S[T.threads[t][0]] });
      const sw = el("span", { class: "swatch" }); sw.style.background = threadColor[t];
      li.appendChild(sw); li.appendChild(document.createTextNode(threadName(t) + ": " + fmtNs(ns)));
      list.appendChild(li);
    });
  }
  const timeAt = (ev) => view[0] + (ev.offsetX - LABEL) / (canvas.width - LABEL) * (view[1] - view[0]);
  canvas.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const t = timeAt(ev), f = ev.deltaY < 0 ? 0.8 : 1.25;
    let a = t - (t - view[0]) * f, b = t + (view[1] - t) * f;
    if (b - a < 1000) { a = t - 500; b = t + 500; } // down to a microsecond
    view = [Math.max(0, a), Math.min(T.span, b)];
    drawTimeline();
  }, { passive: false });
  let drag = null;
  canvas.addEventListener("mousedown", (ev) => { drag = { x: ev.offsetX, view: view.slice() }; });
  window.addEventListener("mouseup", () => { drag = null; });
  canvas.addEventListener("mousemove", (ev) => {
    if (drag) {
      const dt = (ev.offsetX - drag.x) / (canvas.width - LABEL) * (drag.view[1] - drag.view[0]);
      const span = drag.view[1] - drag.view[0];
      const a = Math.min(Math.max(0, drag.view[0] - dt), T.span - span);
      view = [a, a + span]; drawTimeline(); return;
    }
    const li = Math.floor((ev.offsetY - AXIS) / LANE), lane = lanes[li];
    if (!lane || ev.offsetX < LABEL) { hideTip(); return; }
    const t = timeAt(ev), slop = 2 * (view[1] - view[0]) / canvas.width;
    const i = lower(lane.end, lane.n, t - slop);
    if (i < lane.n && lane.start[i] <= t + slop) {
      showTip(ev, threadName(lane.thread[i]) + "\nCPU " + T.cpus[li] + " from " + fmtNs(lane.start[i]) + " for " + fmtNs(lane.end[i] - lane.start[i]));
    } else hideTip();
  });
  canvas.addEventListener("mouseleave", hideTip);
  canvas.addEventListener("dblclick", () => { view = [0, Math.max(1, T.span)]; drawTimeline(); });

  // Flame graphs, each an SVG with one <g> (and a <title>) per frame
  // wider than MIN_PX, root at the top (the callers a reader looks for
  // first, whatever the depth); click zooms, the search marks.
  const MIN_PX = 0.5, ROW = 17, NS = "http://www.w3.org/2000/svg";
  // Levels of the frames wide enough to be drawn at this scale.
  function depth(n, scale) { if (n[1] * scale < MIN_PX) return 0; let d = 0; for (const c of n[2]) d = Math.max(d, depth(c, scale)); return d + 1; }
  function searchRegex() { const q = $("search").value; if (!q) return null; try { return new RegExp(q); } catch (e) { return null; } }
  function svgEl(tag, attrs, text) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const flames = D.flames.map((f, i) => {
    const fmt = f.unit === "ns" ? fmtNs : (v) => v + " samples";
    const section = el("div", { class: "flame", id: "flame-" + f.id });
    section.appendChild(el("h3", {}, f.title + ": " + fmt(f.tree[1])));
    const box = el("div");
    section.appendChild(box);
    $("flames").appendChild(section);
    return { f, fmt, box, focus: [], index: i };
  });
  function drawFlame(st) {
    const { f, fmt, box } = st;
    box.textContent = "";
    if (f.tree[1] === 0) { box.appendChild(el("div", { class: "muted" }, f.empty)); return 0; }
    const node = (path) => { let n = f.tree; for (const i of path) n = n[2][i]; return n; };
    const root = node(st.focus), width = Math.max(400, $("flames").clientWidth - 4);
    const scale = width / Math.max(1, root[1]);
    const levels = depth(root, scale) + st.focus.length;
    const svg = svgEl("svg", { width: width, height: levels * ROW + 4 });
    const re = searchRegex();
    let matched = 0;
    const frame = (name, x, y, w, fill, onclick, tipText) => {
      const g = svgEl("g", {});
      g.appendChild(svgEl("title", {}, tipText));
      const r = svgEl("rect", { x: x, y: y, width: w, height: ROW - 1, fill: fill });
      g.appendChild(r);
      if (w > 30) {
        const fit = Math.floor((w - 6) / 7);
        g.appendChild(svgEl("text", { x: x + 3, y: y + 12 }, name.length <= fit ? name : name.slice(0, Math.max(0, fit - 2)) + ".."));
      }
      // One listener on the SVG serves every frame (thousands of them).
      g.flightrec = { onclick, tipText };
      svg.appendChild(g);
      return r;
    };
    const frameOf = (ev) => { const g = ev.target.closest("g"); return g && g.flightrec; };
    svg.addEventListener("click", (ev) => { const f = frameOf(ev); if (f) f.onclick(); });
    svg.addEventListener("mousemove", (ev) => { const f = frameOf(ev); if (f) showTip(ev, f.tipText); else hideTip(); });
    svg.addEventListener("mouseleave", hideTip);
    st.focus.forEach((_, k) => {
      const a = node(st.focus.slice(0, k));
      frame(S[a[0]], 0, k * ROW, width, "#ddd", () => { st.focus = st.focus.slice(0, k); drawFlames(); }, S[a[0]]);
    });
    const add = (n, x, lvl, path, counted) => {
      const w = n[1] * scale;
      if (w < MIN_PX) return;
      const name = S[n[0]];
      const hit = re !== null && re.test(name);
      const r = frame(name, x, lvl * ROW, w, warm(name), () => { st.focus = path; drawFlames(); },
        name + " (" + fmt(n[1]) + ", " + (100 * n[1] / f.tree[1]).toFixed(2) + "%)");
      if (hit) { r.setAttribute("class", "match"); if (!counted) matched += n[1]; }
      let cx = x;
      n[2].forEach((c, i) => { add(c, cx, lvl + 1, path.concat([i]), counted || hit); cx += c[1] * scale; });
    };
    add(root, 0, st.focus.length, st.focus, false);
    box.appendChild(svg);
    return re ? matched : null;
  }
  function drawFlames() {
    const parts = [];
    for (const st of flames) {
      const m = drawFlame(st);
      if (m !== null && m !== 0 || searchRegex()) parts.push(st.f.title + ": " + st.fmt(m || 0) + " (" + (100 * (m || 0) / Math.max(1, st.f.tree[1])).toFixed(2) + "%)");
    }
    $("matched").textContent = searchRegex() ? "matched: " + parts.join("; ") : "";
  }
  $("search").addEventListener("input", drawFlames);
  $("reset").addEventListener("click", () => { flames.forEach((st) => { st.focus = []; }); drawFlames(); });

  // Top processes and threads.
  function table(id, rows, thread) {
    const t = $(id);
    const head = el("tr");
    for (const h of [thread ? "thread" : "process", "pid", thread ? "tid" : null, "on CPU", "samples", "off CPU"]) if (h) head.appendChild(el("th", { class: h === "on CPU" || h === "off CPU" || h === "samples" ? "num" : "" }, h));
    t.appendChild(head);
    for (const r of rows) {
      const tr = el("tr");
      tr.appendChild(el("td", {}, r.comm)); tr.appendChild(el("td", { class: "num" }, r.pid));
      if (thread) tr.appendChild(el("td", { class: "num" }, r.tid));
      tr.appendChild(el("td", { class: "num" }, fmtNs(r.on_cpu_ns))); tr.appendChild(el("td", { class: "num" }, r.samples)); tr.appendChild(el("td", { class: "num" }, fmtNs(r.off_cpu_ns)));
      t.appendChild(tr);
    }
  }
  table("top-processes", D.top.processes, false);
  table("top-threads", D.top.threads, true);

  drawTimeline();
  drawFlames();
  window.addEventListener("resize", () => { drawTimeline(); drawFlames(); });
  document.body.setAttribute("data-ready", "1");
})();
