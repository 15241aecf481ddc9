// hoptune dashboard: fills each page from its JSON endpoint and polls it again.
// Plain JavaScript and SVG, no library: the file ships in the hoptune wheel and works offline.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const body = document.body;
const PAGE = body.dataset.page;
const API = body.dataset.api;
const POLL_MS = Math.max(500, parseFloat(body.dataset.poll || "2") * 1000);

// ---- small helpers ---------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "onclick") node.addEventListener("click", v);
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "onclick") node.addEventListener("click", v);
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children.flat()) if (c) node.append(c);
  return node;
}

function num(v, digits = 4) {
  if (v === null || v === undefined) return "–";
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v)) return String(v);
  return Number(v.toPrecision(digits)).toString();
}

function seconds(s) {
  if (s === null || s === undefined) return "–";
  const neg = s < 0;
  s = Math.abs(Math.round(s));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  const text = h ? `${h}h${String(m).padStart(2, "0")}m` : m ? `${m}m${String(r).padStart(2, "0")}s` : `${r}s`;
  return neg ? `-${text}` : text;
}

function clock(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

function params(p) {
  return Object.entries(p || {}).map(([k, v]) => `${k}=${num(v, 3)}`).join(" ");
}

// A colour per trial (or any integer), spread around the hue circle.
function colour(i) {
  return `hsl(${(i * 137.508) % 360}, 62%, 45%)`;
}

function badge(state) {
  return el("span", { class: `badge ${String(state).replace(/\s+/g, "-")}`, text: state });
}

function table(columns, rows, rowAttrs) {
  const head = el("tr", {}, columns.map(c => el("th", { text: c.title })));
  const lines = rows.map(r => el("tr", rowAttrs ? rowAttrs(r) : {},
    columns.map(c => {
      const v = c.value(r);
      return el("td", { class: c.cls || null }, v instanceof Node ? v : (v ?? "–"));
    })));
  return el("table", {}, el("thead", {}, head), el("tbody", {}, lines));
}

function card(label, value, note, id) {
  return el("div", { class: "card" }, el("div", { class: "label", text: label }),
    el("div", { class: "value", id: id || null, text: value }),
    note ? el("div", { class: "note muted", text: note }) : null);
}

function replace(id, ...nodes) {
  const target = document.getElementById(id);
  if (target) target.replaceChildren(...nodes);
}

// ---- charts --------------------------------------------------------------

// Scales for a chart of width w and height h inside margins.
function scale(lo, hi, a, b, log) {
  if (log) { lo = Math.log10(lo); hi = Math.log10(hi); }
  if (!(hi > lo)) { lo -= 1; hi += 1; }
  const f = v => a + ((log ? Math.log10(v) : v) - lo) / (hi - lo) * (b - a);
  f.ticks = (n) => {
    const out = [];
    for (let i = 0; i <= n; i++) {
      const t = lo + (hi - lo) * i / n;
      out.push(log ? Math.pow(10, t) : t);
    }
    return out;
  };
  return f;
}

const M = { l: 52, r: 12, t: 22, b: 30 };

function axes(g, x, y, xTicks, yTicks, w, h, xLabel, yLabel) {
  for (const t of yTicks) {
    g.append(svg("line", { x1: M.l, x2: w - M.r, y1: y(t), y2: y(t), class: "grid" }));
    g.append(svg("text", { x: M.l - 6, y: y(t) + 4, class: "tick", "text-anchor": "end", text: num(t, 4) }));
  }
  for (const t of xTicks) {
    g.append(svg("text", { x: x(t), y: h - M.b + 16, class: "tick", "text-anchor": "middle", text: num(t, 3) }));
  }
  g.append(svg("line", { x1: M.l, x2: w - M.r, y1: h - M.b, y2: h - M.b, class: "axis" }));
  g.append(svg("line", { x1: M.l, x2: M.l, y1: M.t, y2: h - M.b, class: "axis" }));
  if (xLabel) g.append(svg("text", { x: (M.l + w - M.r) / 2, y: h - 2, class: "label", "text-anchor": "middle", text: xLabel }));
  if (yLabel) g.append(svg("text", { x: 4, y: 12, class: "label", text: yLabel }));
}

// Learning curves: one line per trial, metric by epoch (from 1). A pruned trial ends in a ✕
// at the epoch it stopped, a rung of the pruner. `selected`: the trial drawn on top.
function curveChart(trials, opts) {
  const w = opts.width || 640, h = opts.height || 260;
  const root = svg("svg", { viewBox: `0 0 ${w} ${h}`, class: "curves", role: "img" });
  const pts = trials.flatMap(t => t.curve.map((m, i) => [i + 1, m]).filter(p => p[1] !== null));
  if (!pts.length) {
    root.append(svg("text", { x: w / 2, y: h / 2, "text-anchor": "middle", class: "empty", text: "no epoch has ended yet" }));
    return root;
  }
  const maxEpoch = Math.max(opts.epochs || 1, ...pts.map(p => p[0]));
  const ys = pts.map(p => p[1]);
  let lo = Math.min(...ys), hi = Math.max(...ys);
  const pad = (hi - lo) * 0.08 || Math.abs(hi) * 0.05 || 1;
  lo -= pad; hi += pad;
  const x = scale(maxEpoch === 1 ? 0.5 : 1, maxEpoch === 1 ? 1.5 : maxEpoch, M.l + 8, w - M.r - 8);
  const y = scale(lo, hi, h - M.b, M.t);
  const xt = Array.from({ length: maxEpoch }, (_, i) => i + 1);
  axes(root, x, y, xt, y.ticks(4), w, h, "epoch", opts.metric || "metric");
  for (const r of opts.rungs || []) {
    if (r > maxEpoch) continue;
    root.append(svg("line", { x1: x(r), x2: x(r), y1: M.t, y2: h - M.b, class: "rung", "data-rung": r }));
    root.append(svg("text", { x: x(r) + 3, y: M.t - 4, class: "tick", text: `rung ${r}` }));
  }
  const ordered = [...trials].sort((a, b) => (a.number === opts.selected) - (b.number === opts.selected));
  for (const t of ordered) {
    const points = t.curve.map((m, i) => [i + 1, m]).filter(p => p[1] !== null);
    if (!points.length) continue;
    const on = t.number === opts.selected;
    const cls = `curve ${t.state}${on ? " selected" : ""}`;
    const d = points.map((p, i) => `${i ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join("");
    const g = svg("g", { class: cls, "data-trial": t.number, onclick: opts.onclick ? () => opts.onclick(t.number) : null });
    g.append(svg("path", { d, stroke: colour(t.number), "data-trial": t.number }));
    for (const p of points) {
      g.append(svg("circle", { cx: x(p[0]), cy: y(p[1]), r: on ? 4 : 2.5, fill: colour(t.number), class: "point", "data-epoch": p[0] },
        svg("title", { text: `trial ${t.number}, epoch ${p[0]}: ${num(p[1])}` })));
    }
    if (t.state === "pruned") {
      const last = points[points.length - 1];
      const cx = x(last[0]), cy = y(last[1]), s = 6;
      g.append(svg("path", { d: `M${cx - s},${cy - s}L${cx + s},${cy + s}M${cx - s},${cy + s}L${cx + s},${cy - s}`,
        class: "pruned-mark", "data-trial": t.number, "data-epoch": last[0] },
        svg("title", { text: `trial ${t.number} pruned after epoch ${last[0]}` })));
    }
    root.append(g);
  }
  return root;
}

// One parameter against the trials' metric: a dot per trial, coloured by state.
function scatterChart(name, dim, trials, metricName) {
  const w = 300, h = 200;
  const root = svg("svg", { viewBox: `0 0 ${w} ${h}`, class: "scatter", "data-param": name });
  const rows = trials.filter(t => t.params && t.params[name] !== undefined);
  const scored = rows.filter(t => t.metric !== null);
  const categorical = dim && dim.type === "categorical";
  const cats = categorical ? dim.categories.map(String) : [];
  const xs = rows.map(t => categorical ? cats.indexOf(String(t.params[name])) : Number(t.params[name]));
  const log = dim && dim.prior === "log" && !categorical;
  const lo = categorical ? -0.5 : Math.min(dim && dim.low !== undefined ? dim.low : Infinity, ...xs);
  const hi = categorical ? cats.length - 0.5 : Math.max(dim && dim.high !== undefined ? dim.high : -Infinity, ...xs);
  const ys = scored.map(t => t.metric);
  let ylo = Math.min(...ys), yhi = Math.max(...ys);
  if (!ys.length) { ylo = 0; yhi = 1; }
  const pad = (yhi - ylo) * 0.1 || 0.5;
  const x = scale(lo, hi, M.l + 6, w - M.r - 6, log);
  const y = scale(ylo - pad, yhi + pad, h - M.b, M.t);
  const xt = categorical ? cats.map((_, i) => i) : x.ticks(3);
  axes(root, x, y, [], y.ticks(3), w, h, name + (log ? " (log)" : ""), metricName);
  for (const t of xt) {
    root.append(svg("text", { x: x(t), y: h - M.b + 16, class: "tick", "text-anchor": "middle", text: categorical ? cats[t] : num(t, 2) }));
  }
  rows.forEach((t, i) => {
    // a proposal without a metric yet sits on the x axis, hollow: not a value of the metric
    const yy = t.metric === null ? h - M.b - 4 : y(t.metric);
    const cls = `dot ${t.state}` + (t.metric === null ? " unscored" : "");
    root.append(svg("circle", { cx: x(xs[i]), cy: yy, r: 4, class: cls, "data-trial": t.number },
      svg("title", { text: `trial ${t.number} (${t.state}): ${name}=${num(t.params[name])}, ${num(t.metric)}` })));
  });
  return root;
}

// ---- pages ------------------------------------------------------------------

function renderNight(data) {
  const f = data.forecast;
  const cards = [
    card("forecast", f.verdict, f.deadline ? `HOPTUNE_NIGHTLY_DEADLINE ${seconds(f.deadline)}` : null, "verdict"),
    card("finish in", seconds(f.seconds_to_finish), "on the live workers, simulated"),
    card("deadline left", seconds(f.deadline_left), f.workers_wanted !== undefined && f.workers_wanted !== null ? `${f.workers_wanted} workers would meet it` : null),
    card("trials", `${data.totals.ended} / ${data.totals.budget}`, `${data.totals.running} running`, "trials-total"),
    card("failures", String(data.totals.failures), `${data.totals.queued} hop messages queued`),
  ];
  if (data.nightly) {
    cards.push(card(`nightly run ${data.nightly.id}`, data.nightly.state, `started ${clock(data.nightly.started_at)} (${data.nightly.trigger})`));
  }
  replace("forecast", ...cards);
  const better = r => r.best_metric !== null && r.champion_metric !== null &&
    (r.minimize ? r.best_metric < r.champion_metric : r.best_metric > r.champion_metric);
  const columns = [
    { title: "region", value: r => el("a", { href: `/region/${r.region}`, text: r.region }) },
    { title: "study", value: r => el("a", { href: `/study/${r.study}`, text: r.study }) },
    { title: "state", value: r => badge(r.state) },
    { title: "progress", value: r => el("div", { class: "progress", title: `${r.ended} of ${r.budget} trials ended, ${r.running} running` },
        el("div", { class: "bar", style: `width:${Math.min(100, 100 * r.ended / Math.max(1, r.budget))}%` }),
        el("div", { class: "bar running", style: `width:${Math.min(100, 100 * r.running / Math.max(1, r.budget))}%` }),
        el("span", { text: `${r.ended}/${r.budget}` })) },
    { title: "running", value: r => r.running, cls: "n" },
    { title: "pruned", value: r => r.pruned, cls: "n" },
    { title: "best so far", value: r => el("span", { class: better(r) ? "better" : "" }, num(r.best_metric)), cls: "n" },
    { title: "champion", value: r => r.champion ? `${num(r.champion_metric)} (${r.champion})` : "none yet", cls: "n" },
    { title: "failures", value: r => r.failures ? el("span", { class: "bad", title: r.failure || "", text: r.failures }) : 0, cls: "n" },
    { title: "queued", value: r => r.queued, cls: "n" },
  ];
  replace("regions", data.regions.length ? table(columns, data.regions, r => ({ "data-region": r.region, "data-state": r.state }))
    : el("p", { class: "muted", text: "no study yet: run `hoptune demo`, `hoptune tune REGION` or `hoptune nightly`" }));
}

let selected = null; // the trial number shown in the study page's trial panel
let lastStudy = null;

function renderStudy(data) {
  lastStudy = data;
  const s = data.study;
  document.getElementById("title").textContent = `${s.region} · study ${s.id}`;
  replace("summary",
    card("state", s.state, s.failure || (s.promotion ? s.promotion.reason : null), "study-state"),
    card("trials", `${data.trials.filter(t => ["done", "pruned", "failed"].includes(t.state)).length} / ${s.budget}`,
      `${data.trials.filter(t => t.state === "running").length} running, ${s.parallel} at once`, "trials-count"),
    card("hops done", String(data.hops.done), `${data.hops.running} running, ${data.hops.queued} queued`, "hops-done"),
    card("best so far", num(s.best_metric), s.best_trial !== null ? `trial ${s.best_trial} (${s.minimize ? "lower" : "higher"} is better)` : "no trial has ended"),
    card("shape", `${s.epochs} epochs × ${s.shards} shards`, data.rungs.length ? `rungs at epoch ${data.rungs.join(", ")}` : "no rung: nothing is pruned"));
  const pick = n => showTrial(s.id, n);
  replace("curves", curveChart(data.trials, { epochs: s.epochs, rungs: data.rungs, selected, onclick: pick, width: 720, height: 300 }));
  const columns = [
    { title: "trial", value: t => t.number, cls: "n" },
    { title: "state", value: t => badge(t.state) },
    { title: "where", value: t => t.at && t.state === "running" ? `epoch ${t.at.epoch}, hop ${t.at.hop}/${s.shards} (${t.at.state}${t.at.worker ? " on " + t.at.worker : ""})` : `${t.epochs_done} epoch${t.epochs_done === 1 ? "" : "s"}` },
    { title: "metric", value: t => num(t.metric), cls: "n" },
    { title: "last", value: t => num(t.last_metric), cls: "n" },
    { title: "params", value: t => params(t.params), cls: "mono" },
    { title: "note", value: t => t.failure || (t.state === "pruned" ? `pruned at epoch ${t.epochs_done}` : "") },
  ];
  replace("trials", table(columns, data.trials, t => ({
    "data-trial": t.number, "data-state": t.state, class: `clickable${t.number === selected ? " selected" : ""}`,
    onclick: () => pick(t.number) })));
  const dims = data.space || {};
  const names = Object.keys(dims).length ? Object.keys(dims) : Object.keys((data.trials[0] || {}).params || {});
  replace("proposals", ...(data.trials.length ? names.map(n => el("div", { class: "panel" }, scatterChart(n, dims[n], data.trials, "metric")))
    : [el("p", { class: "muted", text: "no trial proposed yet" })]));
  replace("rungs", data.rung_decisions.length ? el("div", { class: "grid" }, data.rung_decisions.map(r => el("div", { class: "panel", "data-rung": r.rung },
    el("h3", { text: `rung at epoch ${r.rung}` }),
    r.values.length ? table([
      { title: "trial", value: v => v.trial, cls: "n" },
      { title: "value", value: v => num(v.value), cls: "n" },
      { title: "then", value: v => badge(v.decision) },
    ], r.values, v => ({ "data-trial": v.trial, "data-decision": v.decision })) : el("p", { class: "muted", text: "no trial has reached it" }))))
    : el("p", { class: "muted", text: "this study has no rung (fixed trials, or too few epochs)" }));
  if (selected !== null) showTrial(s.id, selected);
}

async function showTrial(studyId, number) {
  const changed = selected !== number;
  selected = number;
  if (changed && lastStudy) {
    document.querySelectorAll("#trials tr[data-trial]").forEach(r => r.classList.toggle("selected", Number(r.dataset.trial) === number));
  }
  const response = await fetch(`/api/study/${studyId}/trial/${number}`, { credentials: "same-origin" });
  if (!response.ok) return;
  const t = await response.json();
  if (selected !== number) return;
  document.getElementById("trial-title").textContent = `Trial ${t.number} · ${t.state}`;
  document.getElementById("trial-hint").textContent = params(t.params) + (t.failure ? ` · ${t.failure}` : "");
  const curve = [{ number: t.number, state: t.state, curve: t.epochs.map(e => e.metric) }];
  const panel = document.getElementById("trial-curve");
  panel.dataset.trial = t.number;
  panel.replaceChildren(curveChart(curve, { epochs: lastStudy ? lastStudy.study.epochs : t.epochs.length, rungs: t.rungs, selected: t.number, width: 380, height: 220 }));
  replace("trial-hops", table([
    { title: "epoch", value: h => h.epoch, cls: "n" },
    { title: "hop", value: h => h.position, cls: "n" },
    { title: "shard", value: h => h.shard, cls: "n" },
    { title: "state", value: h => badge(h.state) },
    { title: "worker", value: h => h.worker },
    { title: "loss", value: h => num(h.loss), cls: "n" },
    { title: "s", value: h => num(h.train_seconds, 2), cls: "n" },
  ], t.hops));
  if (changed && lastStudy) {
    replace("curves", curveChart(lastStudy.trials, { epochs: lastStudy.study.epochs, rungs: lastStudy.rungs, selected, onclick: n => showTrial(studyId, n), width: 720, height: 300 }));
  }
}

function gantt(data) {
  const w = 960, lane = 26, h = M.t + M.b + Math.max(1, data.lanes.length) * lane;
  const root = svg("svg", { viewBox: `0 0 ${w} ${h}`, class: "gantt" });
  const left = 150;
  // the span the hops cover, up to the whole window: a short study is not a sliver at the right
  const oldest = Math.max(0, ...data.lanes.flatMap(l => l.hops.map(hop => hop.start)));
  const span = Math.min(data.window, Math.max(30, Math.ceil(oldest * 1.1 / 10) * 10));
  const x = s => left + (span - s) / span * (w - left - M.r);
  for (let s = 0; s <= span + 1e-9; s += span / 5) {
    root.append(svg("line", { x1: x(s), x2: x(s), y1: M.t, y2: h - M.b, class: "grid" }));
    root.append(svg("text", { x: x(s), y: h - M.b + 16, class: "tick", "text-anchor": "middle", text: s ? `-${seconds(s)}` : "now" }));
  }
  if (!data.lanes.length) {
    root.append(svg("text", { x: (left + w) / 2, y: M.t + 16, "text-anchor": "middle", class: "empty", text: "no hop in this window" }));
  }
  data.lanes.forEach((l, i) => {
    const y0 = M.t + i * lane;
    root.append(svg("text", { x: left - 8, y: y0 + lane / 2 + 4, class: "tick", "text-anchor": "end", text: l.worker }));
    const g = svg("g", { class: "lane", "data-worker": l.worker });
    for (const hop of l.hops) {
      const a = x(Math.min(hop.start, span)), b = Math.max(a + 1.5, x(Math.max(0, hop.end)));
      g.append(svg("rect", { x: a, y: y0 + 3, width: b - a, height: lane - 6, rx: 2, fill: colour(hop.trial_id),
        class: `hop ${hop.state}`, "data-trial": hop.trial_id },
        svg("title", { text: `${hop.region} study ${hop.study} trial ${hop.trial}: epoch ${hop.epoch}, hop ${hop.position} (shard ${hop.shard}), ${hop.state}, ${num(hop.start - hop.end, 3)} s` })));
    }
    root.append(g);
  });
  return root;
}

function renderCluster(data) {
  document.getElementById("gantt-note").textContent = `up to the last ${seconds(data.window)}; a colour per trial, now at the right`;
  replace("gantt", gantt(data));
  replace("workers", data.workers.length ? table([
    { title: "worker", value: w => w.worker },
    { title: "state", value: w => badge(w.state) },
    { title: "heartbeat", value: w => w.heartbeat_age === null ? "stopped" : `${Math.max(0, w.heartbeat_age).toFixed(1)} s ago`, cls: "n" },
    { title: "device", value: w => w.device },
    { title: "kernel paths", value: w => w.kernels },
    { title: "shards", value: w => w.shards.join(" ") },
    { title: "busy", value: w => `${(100 * w.busy_share).toFixed(1)}%`, cls: "n" },
    { title: "host", value: w => `${w.host} pid ${w.pid}` },
  ], data.workers, w => ({ "data-worker": w.worker, "data-state": w.state }))
    : el("p", { class: "muted", text: data.workers_why || "no worker has registered" }));
  replace("queues", data.queues.length ? table([
    { title: "queue", value: q => q.queue, cls: "mono" },
    { title: "waiting", value: q => q.depth, cls: "n" },
  ], data.queues) : el("p", { class: "muted", text: "no running study's queue" }));
}

function renderRegistry(data) {
  replace("registry", ...(data.regions.length ? data.regions.map(r => {
    const rows = r.versions;
    const metricName = rows[0].metric_name || "metric";
    const w = 360, h = 180;
    const chart = svg("svg", { viewBox: `0 0 ${w} ${h}`, class: "registry-chart" });
    const ys = rows.map(v => v.metric).filter(v => v !== null);
    if (ys.length) {
      const lo = Math.min(...ys), hi = Math.max(...ys), pad = (hi - lo) * 0.1 || 0.05;
      const x = scale(0, Math.max(1, rows.length - 1), M.l + 10, w - M.r - 10);
      const y = scale(lo - pad, hi + pad, h - M.b, M.t);
      axes(chart, x, y, [], y.ticks(3), w, h, "promotions, oldest first", metricName);
      const d = rows.map((v, i) => `${i ? "L" : "M"}${x(i)},${y(v.metric)}`).join("");
      chart.append(svg("path", { d, class: "champion-line" }));
      rows.forEach((v, i) => {
        chart.append(svg("circle", { cx: x(i), cy: y(v.metric), r: v.version === r.champion ? 6 : 4, class: v.version === r.champion ? "dot champion" : "dot" },
          svg("title", { text: `${v.version}: ${num(v.metric)} (${v.reason})` })));
        chart.append(svg("text", { x: x(i), y: h - M.b + 16, class: "tick", "text-anchor": "middle", text: v.version }));
      });
    }
    return el("div", { class: "panel", id: r.region, "data-region": r.region },
      el("h2", {}, el("a", { href: `/region/${r.region}`, text: r.region }), el("span", { class: "muted", text: ` champion ${r.champion}` })),
      chart,
      table([
        { title: "version", value: v => v.version === r.champion ? el("b", { text: v.version }) : v.version },
        { title: "promoted", value: v => v.created_at ? v.created_at.slice(0, 16).replace("T", " ") : "–" },
        { title: metricName, value: v => num(v.metric), cls: "n" },
        { title: "study", value: v => el("a", { href: `/study/${v.study_id}`, text: `${v.study_id} #${v.trial_number}` }) },
        { title: "why", value: v => v.reason },
      ], [...rows].reverse()));
  }) : [el("p", { class: "muted", text: "no champion yet: a study's best trial is promoted when the study ends" })]));
}

const RENDER = { night: renderNight, study: renderStudy, cluster: renderCluster, registry: renderRegistry };

async function poll() {
  const note = document.getElementById("updated");
  try {
    const response = await fetch(API, { credentials: "same-origin" });
    if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
    const data = await response.json();
    RENDER[PAGE](data);
    note.textContent = `updated ${new Date().toLocaleTimeString()}`;
    note.classList.remove("bad");
    body.dataset.polls = String(Number(body.dataset.polls || 0) + 1);
  } catch (error) {
    note.textContent = `not updated: ${error.message}`;
    note.classList.add("bad");
  }
  setTimeout(poll, POLL_MS);
}

if (RENDER[PAGE]) poll();
