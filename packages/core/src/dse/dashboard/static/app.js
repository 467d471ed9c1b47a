// dse dashboard: the page over the JSON API of `dse dashboard` (dse/dashboard/_server.py).
// Plain JavaScript, no build step; figures with ECharts (vendored, SVG renderer: every text
// drawn is an element the page and its tests can measure). Routes: #/ (runs), #/run/ID
// (trials), #/run/ID/figures, #/run/ID/trial/N. The server pushes "change" events as the
// record changes; the view on screen reads its data again.
"use strict";

const STATUSES = ["completed", "failed", "stopped", "cached", "running", "cancelled", "pending"];
const COLOURS = ["#0072b2", "#e69f00", "#009e73", "#d55e00", "#56b4e9", "#cc79a7", "#f0e442"];
const view = document.getElementById("view");
const charts = [];
let current = null; // {render: () => Promise} of the view on screen
let pending = false;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "on") for (const [e, f] of Object.entries(v)) node.addEventListener(e, f);
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c);
  return node;
}

// The record's generation (its changes the server has seen) each answer was read at: a view
// is redrawn only for an event of a later generation than the oldest it was drawn from, so a
// page opened on a finished run is drawn once, and a change during a redraw is not lost.
let drawnGen = -1, latestGen = -1, readGen = Infinity;

async function api(path) {
  const resp = await fetch("api/" + path, {cache: "no-store"});
  const gen = Number(resp.headers.get("X-Dse-Generation"));
  if (resp.headers.has("X-Dse-Generation") && !Number.isNaN(gen)) readGen = Math.min(readGen, gen);
  const body = await resp.json();
  if (!resp.ok) throw new Error(body.error || resp.statusText);
  return body;
}

function fmt(v, digits = 4) {
  if (v === null || v === undefined) return "—";
  if (typeof v === "number") {
    if (Number.isInteger(v)) return v.toLocaleString("en");
    const a = Math.abs(v);
    return a !== 0 && (a < 1e-3 || a >= 1e6) ? v.toExponential(2) : Number(v.toPrecision(digits)).toString();
  }
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

function ago(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  if (seconds < 90) return `${seconds.toFixed(1)} s`;
  if (seconds < 5400) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(2)} h`;
}

function chart(node, option) {
  const c = echarts.init(node, null, {renderer: "svg"});
  c.setOption(Object.assign({animation: false, textStyle: {fontFamily: "system-ui, sans-serif"}}, option));
  charts.push(c);
  node.dataset.ready = "1";
  return c;
}

function clearCharts() {
  while (charts.length) charts.pop().dispose();
}

// -- runs --------------------------------------------------------------------------------

function progress(run) {
  const ended = run.trials - (run.running || 0) - (run.queued || 0) - (run.pending || 0);
  const cap = run.max_trials || run.trials || 1;
  const pct = Math.min(100, (100 * ended) / cap);
  return el("span", {}, el("span", {class: "bar"}, el("span", {style: `width:${pct}%`})),
    `${ended}/${run.max_trials || run.trials}`);
}

function budgetText(run) {
  // Each ceiling of the run's budget, with what the run used of it.
  const b = run.budget || {};
  const used = {trials: run.trials, wall_clock_s: run.wall_s, money: run.spent};
  const parts = [];
  for (const k of ["trials", "wall_clock_s", "compute", "money"]) {
    const cap = b[k];
    if (cap === null || cap === undefined) continue;
    const limit = typeof cap === "object" ? JSON.stringify(cap) : fmt(cap);
    parts.push(k in used ? `${k} ${fmt(used[k], 3)} of ${limit}` : `${k} ≤ ${limit}`);
  }
  return parts.length ? parts.join(", ") : "no ceiling";
}

async function runsView() {
  const data = await api("runs");
  document.getElementById("where").textContent = data.where;
  const rows = data.runs.map(r => el("tr", {"data-run": r.run, on: {click: () => { location.hash = `#/run/${r.run}`; }}},
    el("td", {class: "num", text: r.run}), el("td", {text: r.name}),
    el("td", {}, el("span", {class: `status ${r.status}`, text: r.status})),
    el("td", {}, progress(r)),
    el("td", {text: r.best ? `${fmt(r.best.score)} (trial ${r.best.trial})` : "—"}),
    el("td", {class: "num", text: fmt(r.throughput_per_h, 3)}),
    el("td", {class: "num", text: fmt(r.effective_per_h, 3)}),
    el("td", {class: "num", text: r.cost_per_effective === null ? "—" : `${fmt(r.cost_per_effective, 3)} ${r.currency}`}),
    el("td", {class: "num", text: `${fmt(r.spent, 3)} ${r.currency}`}),
    el("td", {text: budgetText(r)})));
  view.replaceChildren(el("h1", {text: "Runs"}),
    rows.length ? el("table", {id: "runs"},
      el("thead", {}, el("tr", {}, ["run", "campaign", "status", "progress", "best", "trials/h",
        "results/h", "cost/result", "spent", "budget"].map(h => el("th", {text: h})))),
      el("tbody", {}, rows)) : el("p", {class: "muted", text: "No run in this record yet."}));
}

// -- a run: header, trial table ---------------------------------------------------------

const tableState = {}; // run id -> {sort, desc, offset, statuses, failure, version, range}

function runHeader(run, tab) {
  const cards = [
    ["status", run.status], ["progress", null], ["best", run.best ? fmt(run.best.score) : "—"],
    ["trials/h", fmt(run.throughput_per_h, 3)], ["results/h", fmt(run.effective_per_h, 3)],
    ["cost/result", run.cost_per_effective === null ? "—" : `${fmt(run.cost_per_effective, 3)} ${run.currency}`],
    ["spent", `${fmt(run.spent, 3)} ${run.currency}`], ["budget", budgetText(run)],
    ["wall", ago(run.wall_s)],
  ];
  return [
    el("h1", {}, `${run.name} `, el("span", {class: "muted", text: `run ${run.run}`})),
    el("div", {class: "cards"}, cards.map(([k, v]) => el("div", {class: "card", "data-card": k},
      el("div", {class: "k", text: k}), el("div", {class: "v"}, k === "progress" ? progress(run) : v)))),
    el("nav", {class: "tabs"},
      el("a", {href: `#/run/${run.run}`, class: tab === "trials" ? "on" : null, text: "Trials"}),
      el("a", {href: `#/run/${run.run}/figures`, class: tab === "figures" ? "on" : null, text: "Figures"})),
  ];
}

async function findRun(id) {
  const data = await api("runs");
  document.getElementById("where").textContent = data.where;
  const run = data.runs.find(r => r.run === id);
  if (!run) throw new Error(`no run ${id} in this record`);
  return run;
}

function query(state) {
  const q = new URLSearchParams({sort: state.sort, desc: state.desc ? "1" : "0", offset: state.offset, limit: 50});
  if (state.statuses.length) q.set("status", state.statuses.join(","));
  if (state.failure) q.set("failure", state.failure);
  if (state.version) q.set("version", state.version);
  if (state.range.name && (state.range.low !== "" || state.range.high !== ""))
    q.set("range", `${state.range.name}:${state.range.low}:${state.range.high}`);
  return q.toString();
}

function filters(run, state, redraw) {
  const numeric = (run.space || []).filter(numericParam).map(p => p.name);
  const boxes = STATUSES.map(s => el("label", {}, el("input", {type: "checkbox", name: "status", value: s,
    checked: state.statuses.includes(s), on: {change: e => {
      state.statuses = e.target.checked ? [...state.statuses, s] : state.statuses.filter(x => x !== s);
      state.offset = 0; redraw();
    }}}), ` ${s}`));
  const failure = el("select", {name: "failure", on: {change: e => { state.failure = e.target.value; state.offset = 0; redraw(); }}},
    el("option", {value: "", text: "any failure"}),
    Object.keys(run.failures || {}).map(f => el("option", {value: f, text: f, selected: state.failure === f})));
  const version = el("input", {type: "text", name: "version", placeholder: "data version", value: state.version,
    on: {change: e => { state.version = e.target.value.trim(); state.offset = 0; redraw(); }}});
  const param = el("select", {name: "range-param", on: {change: e => { state.range.name = e.target.value; state.offset = 0; redraw(); }}},
    numeric.map(n => el("option", {value: n, text: n, selected: state.range.name === n})));
  const bound = key => el("input", {type: "number", step: "any", name: `range-${key}`, placeholder: key, value: state.range[key],
    on: {change: e => { state.range[key] = e.target.value; state.offset = 0; redraw(); }}});
  return el("div", {class: "filters"}, boxes, failure, version,
    numeric.length ? el("span", {}, "param ", param, " from ", bound("low"), " to ", bound("high")) : null);
}

function numericParam(p) {
  // A param whose values are numbers (sorted and filtered by value in the record).
  return p.type !== "categorical" || (p.choices || p.values || []).every(c => typeof c === "number");
}

function sortHeader(label, key, state, redraw, numeric = false) {
  const sorted = state.sort === key;
  return el("th", {class: `sortable${sorted ? " sorted" : ""}${sorted && state.desc ? " desc" : ""}${numeric ? " num" : ""}`,
    "data-sort": key, text: label, on: {click: () => {
      state.desc = sorted ? !state.desc : false; state.sort = key; state.offset = 0; redraw();
    }}});
}

async function trialsView(id) {
  const run = await findRun(id);
  const names = (run.space || []).map(p => p.name);
  const state = tableState[id] || (tableState[id] = {sort: "number", desc: false, offset: 0, statuses: [],
    failure: "", version: "", range: {name: (run.space || []).filter(numericParam).map(p => p.name)[0] || "", low: "", high: ""}});
  const redraw = () => { current.render().catch(showError); };
  const page = await api(`runs/${id}/trials?${query(state)}`);
  const metric = ((run.objectives || [])[0] || {}).metric || "score";
  const head = el("tr", {}, sortHeader("#", "number", state, redraw, true), sortHeader("status", "status", state, redraw),
    el("th", {text: "failure"}), sortHeader(`score (${metric})`, "score", state, redraw, true),
    (run.space || []).map(p => numericParam(p) ? sortHeader(p.name, `param:${p.name}`, state, redraw, true) : el("th", {text: p.name})),
    sortHeader("data version", "data_version", state, redraw), sortHeader("ended", "ended_at", state, redraw));
  const rows = page.trials.map(t => el("tr", {"data-number": t.number, on: {click: () => { location.hash = `#/run/${id}/trial/${t.number}`; }}},
    el("td", {class: "num", text: t.number}),
    el("td", {}, el("span", {class: `status ${t.status}`, text: t.cached ? "cached" : t.status})),
    el("td", {text: t.failure || ""}), el("td", {class: "num", text: fmt(t.score)}),
    names.map(n => el("td", {class: "num", text: fmt(t.params[n])})),
    el("td", {text: t.data_version || ""}),
    el("td", {text: t.ended_at ? new Date(t.ended_at * 1000).toLocaleTimeString() : ""})));
  const last = Math.min(page.offset + page.limit, page.total);
  const pager = el("div", {class: "pager"},
    el("button", {name: "prev", disabled: page.offset === 0, text: "← previous", on: {click: () => { state.offset = Math.max(0, state.offset - 50); redraw(); }}}),
    el("span", {id: "shown", "data-total": page.total, text: page.total ? `${page.offset + 1}–${last} of ${page.total.toLocaleString("en")} trials` : "no trial matches"}),
    el("button", {name: "next", disabled: last >= page.total, text: "next →", on: {click: () => { state.offset += 50; redraw(); }}}));
  const focused = document.activeElement && document.activeElement.name;
  view.replaceChildren(...runHeader(run, "trials"), filters(run, state, redraw), pager,
    el("table", {id: "trials"}, el("thead", {}, head), el("tbody", {}, rows)));
  if (focused) { const again = view.querySelector(`[name="${focused}"]`); if (again) again.focus(); }
}

// -- a run's figures ---------------------------------------------------------------------

function figure(key, title, caption, extra = null) {
  const node = el("div", {class: "chart", id: `chart-${key}`});
  return [el("section", {class: "figure", "data-figure": key}, el("h2", {text: title}), extra, node,
    el("div", {class: "caption", text: caption})), node];
}

function axis(name, type = "value", extra = {}) {
  return Object.assign({type, name, nameLocation: "middle", nameGap: 30, scale: true}, extra);
}

function xaxis(name, type = "value", extra = {}) {
  // The end labels kept inside the axis's span: the first does not run into the y axis's
  // lowest label at the corner.
  return axis(name, type, Object.assign({axisLabel: {alignMinLabel: "left", alignMaxLabel: "right"}}, extra));
}

function convergence(node, data, xKey) {
  const xName = {number: "trial", at: "time since the run started (s)", spent: `spend (${data.spend_unit})`}[xKey];
  const pts = data.points;
  chart(node, {
    grid: {left: 70, right: 20, top: 30, bottom: 50},
    legend: {data: [data.metric, "best so far"], top: 0},
    tooltip: {trigger: "item", formatter: p => `trial ${p.data[2]}: ${fmt(p.data[1])}`},
    xAxis: xaxis(xName), yAxis: axis(`${data.metric} (${data.direction})`, "value", {nameGap: 50}),
    series: [
      {name: data.metric, type: "scatter", symbolSize: 6, itemStyle: {color: COLOURS[0]},
        data: pts.map(p => [p[xKey], p.score, p.number])},
      {name: "best so far", type: "line", step: "end", showSymbol: false, itemStyle: {color: COLOURS[3]},
        data: pts.slice().sort((a, b) => a[xKey] - b[xKey]).map(p => [p[xKey], p.best, p.number])},
    ],
  });
}

function parallel(node, data, brushed) {
  const space = data.space || [];
  const dims = space.map((p, i) => p.type === "categorical"
    ? {dim: i, name: p.name, type: "category", data: (p.values || p.choices || []).map(String)}
    : {dim: i, name: p.name, type: p.log ? "log" : "value", scale: true});
  dims.push({dim: space.length, name: data.metric, type: "value", scale: true});
  // A conditional param inactive in a trial has no value there: no point on its axis.
  const rows = data.points.map(p => [...space.map(s => !(s.name in p.params) ? null : s.type === "categorical" ? String(p.params[s.name]) : p.params[s.name]), p.score, p.number]);
  const c = chart(node, {
    parallelAxis: dims, parallel: {left: 60, right: 80, top: 40, bottom: 30,
      parallelAxisDefault: {nameLocation: "end", nameGap: 12, nameTextStyle: {fontSize: 12}}},
    visualMap: {show: false, dimension: space.length, min: Math.min(...rows.map(r => r[space.length])),
      max: Math.max(...rows.map(r => r[space.length])), inRange: {color: data.direction === "maximize" ? ["#d55e00", "#0072b2"] : ["#0072b2", "#d55e00"]}},
    series: [{type: "parallel", lineStyle: {width: 1, opacity: 0.5}, data: rows,
      inactiveOpacity: 0.05, activeOpacity: 0.9}],
  });
  c.on("axisareaselected", () => {
    if (current) current.paused = true; // a live redraw would drop the selection
    const picked = c.getModel().getSeries()[0].getRawIndicesByActiveState("active");
    brushed(picked.map(i => rows[i][space.length + 1]));
  });
  return rows;
}

function timeline(node, data) {
  // Each node its own lanes (a lane: one attempt at a time, as a slot runs them); with one
  // node (or none said) the lanes are numbered slots.
  const nodes = [...new Set(data.attempts.map(a => a.node || ""))].sort();
  const lanesOf = new Map(nodes.map(n => [n, []]));
  const placed = data.attempts.filter(a => a.start !== null).sort((a, b) => a.start - b.start).map(a => {
    const lanes = lanesOf.get(a.node || "");
    let lane = lanes.findIndex(end => end <= a.start);
    const end = a.end === null ? Infinity : a.end;
    if (lane < 0) { lanes.push(end); lane = lanes.length - 1; } else lanes[lane] = end;
    return [a, lane];
  });
  const labels = [], first = new Map();
  for (const n of nodes) {
    first.set(n, labels.length);
    lanesOf.get(n).forEach((_, i) => labels.push(nodes.length > 1 ? `${n} · ${i + 1}` : String(i + 1)));
  }
  const items = placed.map(([a, lane]) => [a.start, a.end === null ? a.start : a.end,
    first.get(a.node || "") + lane, a.number, a.state, a.node || ""]);
  const colour = {succeeded: COLOURS[2], failed: COLOURS[3], running: COLOURS[0]};
  chart(node, {
    grid: {left: nodes.length > 1 ? 110 : 60, right: 20, top: 20, bottom: 50},
    tooltip: {formatter: p => `trial ${p.data[3]}: ${p.data[4]}${p.data[5] ? " on " + p.data[5] : ""}, ${fmt(p.data[0])}–${fmt(p.data[1])} s`},
    xAxis: xaxis("time since the run started (s)"),
    yAxis: {type: "category", name: nodes.length > 1 ? "node · slot" : "slot", nameLocation: "middle",
      nameGap: nodes.length > 1 ? 95 : 35, data: labels},
    series: [{type: "custom", data: items, encode: {x: [0, 1], y: 2},
      renderItem: (params, api) => {
        const start = api.coord([api.value(0), api.value(2)]), end = api.coord([api.value(1), api.value(2)]);
        const h = Math.max(2, api.size([0, 1])[1] * 0.6);
        return {type: "rect", shape: {x: start[0], y: start[1] - h / 2, width: Math.max(1, end[0] - start[0]), height: h},
          style: {fill: colour[api.value(4)] || COLOURS[1]}};
      }}],
  });
}

function importance(node, data) {
  const shares = Object.entries(data.importance.importance).reverse(); // the largest on top
  chart(node, {
    grid: {left: 110, right: 30, top: 10, bottom: 50},
    tooltip: {formatter: p => `${p.name}: ${(100 * p.value).toFixed(1)}%`},
    xAxis: xaxis("share of the importance (PED-ANOVA)", "value", {max: 1, scale: false}),
    yAxis: {type: "category", data: shares.map(([n]) => n)},
    series: [{type: "bar", data: shares.map(([, v]) => v), itemStyle: {color: COLOURS[0]}}],
  });
}

function slicesOf(holder, data) {
  // One small chart per param, the most important first.
  const nodes = [];
  for (const sl of data.slices) {
    const node = el("div", {class: "chart", id: `chart-slice-${sl.param}`, style: "height: 240px"});
    holder.append(el("div", {class: "slice"}, node));
    nodes.push([node, sl]);
  }
  for (const [node, sl] of nodes) {
    const categorical = sl.scale === "categorical";
    chart(node, {
      grid: {left: 60, right: 15, top: 15, bottom: 45},
      tooltip: {formatter: p => `trial ${p.data[2]}: ${sl.param} ${fmt(p.data[0])}, ${fmt(p.data[1])}`},
      xAxis: categorical ? {type: "category", name: sl.param, nameLocation: "middle", nameGap: 28, data: sl.levels.map(String)}
        : xaxis(sl.param, sl.scale === "log" ? "log" : "value", {min: sl.low, max: sl.high, nameGap: 28}),
      yAxis: axis(data.metric, "value", {nameGap: 42}),
      series: [{type: "scatter", symbolSize: 6, itemStyle: {color: COLOURS[0], opacity: 0.7},
        data: sl.values.map((v, i) => [categorical ? String(v) : v, sl.objectives[i], sl.trials[i]])}],
    });
  }
}

function contourOf(node, data) {
  const c = data.contour;
  const label = a => (a.scale === "categorical" ? a.levels : a.centres).map(v => fmt(v, 3));
  const cells = [];
  let low = Infinity, high = -Infinity;
  c.means.forEach((row, j) => row.forEach((m, i) => {
    if (m === null) return;
    cells.push([i, j, m, c.counts[j][i]]);
    low = Math.min(low, m); high = Math.max(high, m);
  }));
  chart(node, {
    grid: {left: 80, right: 90, top: 15, bottom: 50},
    tooltip: {formatter: p => `${c.x.param} ${label(c.x)[p.data[0]]}, ${c.y.param} ${label(c.y)[p.data[1]]}: mean ${fmt(p.data[2])} of ${p.data[3]} trial(s)`},
    xAxis: {type: "category", name: c.x.param, nameLocation: "middle", nameGap: 30, data: label(c.x)},
    yAxis: {type: "category", name: c.y.param, nameLocation: "middle", nameGap: 60, data: label(c.y)},
    visualMap: {dimension: 2, min: low, max: high === low ? low + 1 : high, calculable: false, orient: "vertical", right: 0, top: "middle",
      itemHeight: 120, text: [fmt(high, 3), fmt(low, 3)],
      inRange: {color: data.direction === "maximize" ? ["#fde4cf", "#0072b2"] : ["#0072b2", "#fde4cf"]}},
    series: [{type: "heatmap", data: cells}],
  });
}

function frontOf(node, data, id, xi = 0, yi = 1) {
  // Two objectives: every scored trial, the front's members joined by a step line. Three or
  // more: the two chosen above the figure, the front's members (of all the objectives) in
  // colour, unjoined (a projection of the front is no staircase).
  const f = data.front, many = f.objectives.length > 2;
  const [[mx, dx], [my, dy]] = [f.objectives[xi], f.objectives[yi]];
  const off = f.trials.filter(t => t.rank > 1), on = f.trials.filter(t => t.rank === 1)
    .sort((a, b) => a.scores[xi] - b.scores[xi]);
  const point = t => [t.scores[xi], t.scores[yi], t.number, t.scores];
  const all = s => f.objectives.map(([m], i) => `${m} ${fmt(s[i])}`).join(", ");
  const old = echarts.getInstanceByDom(node);
  if (old) { charts.splice(charts.indexOf(old), 1); old.dispose(); }
  const c = chart(node, {
    grid: {left: 70, right: 20, top: 30, bottom: 50},
    legend: {data: ["on the front", "dominated"], top: 0},
    tooltip: {formatter: p => `trial ${p.data[2]}: ${all(p.data[3])}`},
    xAxis: xaxis(`${mx} (${dx})`), yAxis: axis(`${my} (${dy})`, "value", {nameGap: 50}),
    series: [
      {name: "dominated", type: "scatter", symbolSize: 6, itemStyle: {color: "#9aa5b1"}, data: off.map(point)},
      many ? {name: "on the front", type: "scatter", symbolSize: 9, itemStyle: {color: COLOURS[3]}, data: on.map(point)}
        : {name: "on the front", type: "line", step: dx === dy ? "end" : "start", symbolSize: 9,
          itemStyle: {color: COLOURS[3]}, data: on.map(point)},
    ],
  });
  c.on("click", p => { if (p.data) location.hash = `#/run/${id}/trial/${p.data[2]}`; });
}

function frontAxes(data, id, node) {
  // With three objectives or more: which two the front's figure plots.
  const f = data.front;
  if (f.objectives.length <= 2) return null;
  const pick = (label, chosen) => el("label", {}, `${label} `, el("select", {"data-axis": label},
    f.objectives.map(([m], i) => el("option", {value: String(i), selected: i === chosen, text: m}))));
  const box = el("div", {class: "axes"}, pick("x", 0), " ", pick("y", 1));
  box.addEventListener("change", () => {
    const [x, y] = [...box.querySelectorAll("select")].map(s => Number(s.value));
    frontOf(node(), data, id, x, y);
  });
  return box;
}

function curvesOf(node, data, id) {
  // Every sampled trial's curve; where the stopping rule stopped one (a cross) and
  // promoted one (a triangle); the rungs as guides.
  const cv = data.curves;
  const series = cv.curves.map(c => ({type: "line", name: `trial ${c.number}`, showSymbol: false,
    lineStyle: {width: 1, opacity: 0.6, color: c.status === "stopped" ? "#9aa5b1" : COLOURS[0]},
    data: c.points.map(([step, v]) => [step, v, c.number])}));
  series.push({type: "scatter", name: "stopped", symbol: "path://M0,0L10,10M10,0L0,10", symbolSize: 8,
    itemStyle: {color: COLOURS[3], borderColor: COLOURS[3], borderWidth: 2},
    data: cv.curves.flatMap(c => c.stops.map(([step, v]) => [step, v, c.number]))});
  series.push({type: "scatter", name: "promoted", symbol: "triangle", symbolSize: 9, itemStyle: {color: COLOURS[2]},
    data: cv.curves.flatMap(c => c.promotions.map(([step, v]) => [step, v, c.number]))});
  // Population-based training: a dashed line from the parent's point to its copy's first.
  for (const [a, b] of cv.links || []) series.push({type: "line", name: "started from a copy of",
    showSymbol: false, silent: true, lineStyle: {type: "dashed", width: 1, color: COLOURS[2]}, data: [a, b]});
  if (cv.rungs.length) series[0].markLine = {symbol: "none", silent: true, label: {show: false},
    lineStyle: {type: "dashed", color: "#c0c7ce"}, data: cv.rungs.map(r => ({xAxis: r}))};
  const c = chart(node, {
    grid: {left: 70, right: 20, top: 20, bottom: 50},
    tooltip: {formatter: p => `trial ${p.data[2]}: step ${p.data[0]}, ${cv.metric} ${fmt(p.data[1])}`},
    xAxis: xaxis("step"), yAxis: axis(`${cv.metric} (${cv.direction})`, "value", {nameGap: 50}),
    series,
  });
  c.on("click", p => { if (p.data) location.hash = `#/run/${id}/trial/${p.data[2]}`; });
}

async function figuresView(id) {
  const run = await findRun(id);
  const data = await api(`runs/${id}/figures`);
  clearCharts();
  const chosen = (tableState[id] && tableState[id].xKey) || "number";
  const xKey = chosen === "spent" && data.sampled ? "number" : chosen;
  const select = el("select", {name: "convergence-x", on: {change: e => {
    (tableState[id] = tableState[id] || {}).xKey = e.target.value; current.render().catch(showError); }}},
    // A sample's spend so far is not the run's: against spend only when the run is whole.
    [["number", "trials"], ["at", "time"], ...(data.sampled ? [] : [["spent", "spend"]])]
      .map(([v, t]) => el("option", {value: v, text: `against ${t}`, selected: v === xKey})));
  const sample = data.sampled ? ` Drawn from ${data.sampled.toLocaleString("en")} of the run's ${data.trials.toLocaleString("en")} trials: its best hundred and every k-th.` : "";
  const [conv, convNode] = figure("convergence", "Convergence", `Each scored trial's ${data.metric}, and the best so far.${sample}`, el("div", {class: "controls"}, select));
  const brushedNote = el("div", {class: "caption", id: "brushed", text: "Drag along an axis to select a range; the trials inside are listed here."});
  const [par, parNode] = figure("parallel", "Parallel coordinates", "One line per scored trial, coloured by its score.", brushedNote);
  const [tl, tlNode] = figure("timeline", "Timeline", "Each attempt on its node's slot, from start to end.");
  const imp = data.importance || {reason: "no importance for this run"};
  const [impSection, impNode] = figure("importance", "Parameter importance",
    imp.reason ? imp.reason : `PED-ANOVA (Watanabe et al., 2023): how much each param's values among the best ${Math.round(100 * imp.target_quantile)}% of the ${imp.trials} scored trials differ from all of them, as shares.`);
  const sliceHolder = el("div", {class: "slices", id: "chart-slices"});
  const slicesSection = el("section", {class: "figure", "data-figure": "slices"}, el("h2", {text: "Slices"}), sliceHolder,
    el("div", {class: "caption", text: `Each scored trial's ${data.metric} against one param, the most important first.`}));
  const [conSection, conNode] = data.contour ? figure("contour", `Contour: ${data.contour.x.param} and ${data.contour.y.param}`,
    `The mean ${data.metric} of the trials in each cell (the two most important params; an empty cell: no trial there).`) : [null, null];
  const many = data.front && data.front.objectives.length > 2;
  const [frontSection, frontNode] = data.front && data.front.objectives.length >= 2 ? figure("front", "Pareto front",
    many ? `Each scored trial on two of the ${data.front.objectives.length} objectives (chosen above); the front's trials (on all of them) in colour (hypervolume ${fmt(data.front.hypervolume)}). Click a point for its trial.`
      : `Each scored trial's ${data.front.objectives[0][0]} and ${data.front.objectives[1][0]}; the front's trials joined (hypervolume ${fmt(data.front.hypervolume)}). Click a point for its trial.`,
    data.front ? frontAxes(data, id, () => document.getElementById("chart-front")) : null) : [null, null];
  const [curvesSection, curvesNode] = data.curves && data.curves.curves.length ? figure("curves", "Learning curves",
    `The ${data.curves.metric} each trial reported by step: ${data.curves.chosen}. Stopped trials in grey, a cross where the rule stopped one, a triangle where it promoted one; a click opens the trial.`) : [null, null];
  view.replaceChildren(...runHeader(run, "figures"),
    ...(data.points.length ? [] : [el("p", {class: "muted", text: "No scored trial yet."})]),
    ...(frontSection ? [frontSection] : []), conv, ...(curvesSection ? [curvesSection] : []), par,
    impSection, slicesSection, ...(conSection ? [conSection] : []), tl);
  if (frontNode) frontOf(frontNode, data, id);
  if (curvesNode) curvesOf(curvesNode, data, id);
  if (!imp.reason) importance(impNode, data);
  if (data.points.length) slicesOf(sliceHolder, data);
  if (conNode && data.points.length) contourOf(conNode, data);
  if (data.points.length) {
    convergence(convNode, data, xKey);
    parallel(parNode, data, numbers => {
      brushedNote.replaceChildren(`${numbers.length} trial(s) selected: `,
        ...numbers.slice(0, 30).map(n => el("a", {href: `#/run/${id}/trial/${n}`, text: `#${n} `})),
        numbers.length > 30 ? "…" : "");
      brushedNote.dataset.selected = numbers.join(",");
    });
  }
  timeline(tlNode, data);
}

// -- one trial ---------------------------------------------------------------------------

function answers(record) {
  const items = [];
  const add = (k, v) => items.push(el("dt", {text: k}), el("dd", {text: typeof v === "object" && v !== null ? JSON.stringify(v, null, 1) : fmt(v)}));
  const sections = {run: "what ran", data: "against what data", ended: "how it ended", cost: "what it cost", concluded: "what was concluded"};
  const out = [];
  for (const [key, title] of Object.entries(sections)) {
    items.length = 0;
    const part = record[key] || {};
    for (const [k, v] of Object.entries(part)) if (k !== "attempts" && k !== "progress") add(k, v);
    out.push(el("h2", {text: title}), el("dl", {class: "answers", "data-answer": key}, ...items));
  }
  return out;
}

async function trialView(id, number) {
  const run = await findRun(id);
  const data = await api(`runs/${id}/trials/${number}`);
  clearCharts();
  const rec = data.record;
  const attempts = (rec.ended.attempts || []).map(a => el("tr", {},
    el("td", {class: "num", text: a.attempt}), el("td", {text: a.state}), el("td", {text: a.node || ""}),
    el("td", {text: a.reason || ""}), el("td", {class: "num", text: fmt(a.exit_code)})));
  const parts = [el("h1", {}, `${run.name} `, el("span", {class: "muted", text: `trial ${number} (${rec.trial.id})`})),
    el("p", {}, el("a", {href: `#/run/${id}`, text: "← the run's trials"}), " ",
      el("span", {class: `status ${rec.ended.outcome}`, id: "outcome", text: rec.ended.outcome})),
    ...answers(rec), el("h2", {text: "attempts"}),
    el("table", {id: "attempts"}, el("thead", {}, el("tr", {}, ["#", "state", "node", "reason", "exit"].map(h => el("th", {text: h})))), el("tbody", {}, attempts))];
  let curveNode = null;
  if (data.curve.length) {
    const [section, node] = figure("curve", "Learning curve", "Each point the trial reported, by step; the stopping rule's decisions below.");
    parts.push(section); curveNode = node;
  }
  const lineage = rec.ended.lineage;
  if (lineage) {
    const rows = [];
    const link = n => el("a", {href: `#/run/${id}/trial/${n}`, text: `trial ${n}`});
    if (lineage.parent) {
      const before = lineage.parent.params_before || {};
      const changed = Object.entries(lineage.parent.params_after).filter(([k, v]) => before[k] !== v)
        .map(([k, v]) => `${k}: ${fmt(before[k])} → ${fmt(v)}`).join(", ") || "params unchanged";
      rows.push(el("li", {}, "started from a copy of ", link(lineage.parent.number),
        `'s checkpoint (it had reported step ${lineage.parent.step}), in the place of `,
        link(lineage.parent.replaces), `; ${changed}`));
    }
    for (const c of lineage.children) rows.push(el("li", {}, "copied by ", link(c.number),
      ` at step ${c.step} (in the place of `, link(c.replaces), ")"));
    parts.push(el("h2", {text: "lineage"}), el("ul", {id: "lineage"}, rows));
  }
  if (data.decisions.length) parts.push(el("h2", {text: "stopping decisions"}), el("table", {id: "decisions"},
    el("thead", {}, el("tr", {}, ["step", "verdict", "rule", "value", "cutoff", "reason"].map(h => el("th", {text: h})))),
    el("tbody", {}, data.decisions.map(d => el("tr", {}, el("td", {text: d.step}), el("td", {text: d.verdict}), el("td", {text: d.rule}),
      el("td", {text: fmt(d.value)}), el("td", {text: fmt(d.cutoff)}), el("td", {text: d.reason}))))));
  for (const log of data.logs || []) parts.push(el("h2", {text: log.name}), el("pre", {class: "log", text: log.tail}));
  view.replaceChildren(...parts);
  if (curveNode) {
    const metric = ((run.objectives || [])[0] || {}).metric || Object.keys(data.curve[0].metrics)[0];
    chart(curveNode, {grid: {left: 70, right: 20, top: 20, bottom: 50}, tooltip: {trigger: "axis"},
      xAxis: xaxis("step"), yAxis: axis(metric, "value", {nameGap: 50}),
      series: [{type: "line", data: data.curve.map(p => [p.step, p.metrics[metric]]), itemStyle: {color: COLOURS[0]}}]});
  }
}

// -- routing and live updates ------------------------------------------------------------

function showError(err) {
  view.replaceChildren(el("p", {class: "error", id: "error", text: String(err.message || err)}));
}

function route() {
  clearCharts();
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean);
  if (parts[0] === "run" && parts[1]) {
    const id = Number(parts[1]);
    if (parts[2] === "figures") current = {render: () => figuresView(id)};
    else if (parts[2] === "trial" && parts[3]) current = {render: () => trialView(id, Number(parts[3]))};
    else current = {render: () => trialsView(id)};
  } else current = {render: runsView};
  return draw(current).catch(showError);
}

async function draw(view) {
  // Render *view*, then note the generation of the oldest answer it was drawn from.
  readGen = Infinity;
  await view.render();
  drawnGen = readGen === Infinity ? latestGen : readGen;
}

async function refresh() {
  if (pending || !current || current.paused) return;
  pending = true;
  try { await draw(current); } catch (err) { showError(err); } finally { pending = false; }
  document.body.dataset.generation = (Number(document.body.dataset.generation || 0) + 1).toString();
  if (latestGen > drawnGen) refresh(); // the record changed while it drew
}

function listen() {
  const live = document.getElementById("live");
  const source = new EventSource("api/events");
  source.addEventListener("change", e => {
    live.className = "live on"; live.textContent = "live";
    latestGen = Math.max(latestGen, Number(e.data));
    if (latestGen > drawnGen) refresh();
  });
  source.onerror = () => { live.className = "live off"; live.textContent = "reconnecting"; };
}

window.addEventListener("hashchange", route);
window.addEventListener("resize", () => charts.forEach(c => c.resize()));
route().then(listen);
