// PopuLoRA league dashboard: one page over the league's read-only REST API, live by polling /overview.
// Every value from the server is put into the page as text (textContent, attributes, canvas text), never as HTML:
// adapter ids, programs and model output are whatever a model or a client wrote.
"use strict";

(() => {
  const POLL_MS = Math.max(500, Number(new URLSearchParams(location.search).get("poll")) || 2000);
  const VIEWS = [
    ["overview", "Overview"], ["leaderboard", "Leaderboard"], ["ratings", "Rating curves"],
    ["lineage", "Lineage"], ["payoff", "Payoff"], ["problems", "Problems"],
  ];
  const ROLE_ORDER = { teacher: 0, both: 1, student: 2 };
  const PALETTE = ["#e4793a", "#3a7be4", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#7f7f7f", "#1f3f8f", "#b8860b", "#006d5b", "#a0325a", "#5a6fd0", "#c06000"];
  const STEP_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000]; // steps are integers
  const TASK_COLORS = { code_i: "#1f77b4", code_o: "#d62728", code_f: "#2ca02c" };

  const state = {
    runs: [], run: null, view: "overview", adapter: null, revision: null, overview: null, charts: {},
    sort: { key: "rank", dir: 1 }, filters: { role: "", status: "" }, lineageSelected: null,
    problems: { step: null, taskType: "", invalid: false }, evalsPath: null, polls: 0, renders: 0,
  };
  window.populora = state; // read by the browser tests and handy in a console

  // ---- DOM helpers: strings become text nodes, never markup ---------------------------------------------------------
  function h(tag, props, ...children) {
    const node = document.createElement(tag);
    setProps(node, props);
    append(node, children);
    return node;
  }
  const SVGNS = "http://www.w3.org/2000/svg";
  function s(tag, props, ...children) {
    const node = document.createElementNS(SVGNS, tag);
    setProps(node, props);
    append(node, children);
    return node;
  }
  function setProps(node, props) {
    for (const [k, v] of Object.entries(props || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "on") for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
      else if (k === "text") node.textContent = String(v);
      else node.setAttribute(k, String(v));
    }
  }
  function append(node, children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }
  const $ = (sel) => document.querySelector(sel);
  const enc = encodeURIComponent;

  // ---- formatting ----------------------------------------------------------------------------------------------------
  const isNum = (x) => typeof x === "number" && Number.isFinite(x);
  const fmt = (x, d = 2) => (isNum(x) ? x.toFixed(d) : "–");
  const pct = (x) => (isNum(x) ? `${(100 * x).toFixed(0)}%` : "–");
  const int = (x) => (isNum(x) ? Math.round(x).toLocaleString("en-US") : "–");
  function secs(x) {
    if (!isNum(x)) return "–";
    if (x < 60) return `${x.toFixed(1)} s`;
    const m = Math.floor(x / 60);
    return m < 60 ? `${m} min ${Math.round(x - 60 * m)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
  }
  function ago(t, now) {
    if (!isNum(t)) return "–";
    return `${secs(Math.max(0, now - t))} ago`;
  }
  const badge = (text, cls) => h("span", { class: `badge ${cls || ""}`, text });
  const roleBadge = (role) => badge(role, `role-${["teacher", "student", "both"].includes(role) ? role : "other"}`);
  const adapterLink = (id) => h("a", { href: `#/adapter/${enc(id)}`, class: "adapter-link", text: id });

  // ---- data --------------------------------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, detail) { super(detail); this.status = status; }
  }
  async function api(path) {
    const resp = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store" });
    if (!resp.ok) {
      let detail = `${resp.status} ${resp.statusText}`;
      try { detail = (await resp.json()).detail || detail; } catch (_) { /* not JSON */ }
      throw new ApiError(resp.status, typeof detail === "string" ? detail : JSON.stringify(detail));
    }
    return resp.json();
  }
  const runPath = (suffix) => `/v1/runs/${enc(state.run)}/${suffix}`;

  // ---- routing: #/<view>/<run> or #/adapter/<id> ------------------------------------------------------------------------
  function parseHash() {
    const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
    if (parts[0] === "adapter" && parts[1]) return { view: "adapter", adapter: parts.slice(1).join("/") };
    const view = VIEWS.some(([v]) => v === parts[0]) ? parts[0] : "overview";
    return { view, run: parts[1] || null };
  }
  function go(view, run) { location.hash = `#/${view}/${enc(run || state.run || "")}`; }

  async function route() {
    const r = parseHash();
    state.view = r.view;
    state.adapter = r.adapter || null;
    if (r.run) state.run = r.run;
    if (!state.run) state.run = new URLSearchParams(location.search).get("run") || lastRun();
    renderNav();
    await render();
  }
  const lastRun = () => (state.runs.length ? state.runs[state.runs.length - 1].run_id : null);

  function renderNav() {
    const nav = $("#nav");
    nav.replaceChildren(...VIEWS.map(([v, label]) => h("a", {
      href: `#/${v}/${enc(state.run || "")}`, class: v === state.view ? "active" : null,
      "data-view": v, text: label,
    })));
    const select = $("#run-select");
    select.replaceChildren(...state.runs.map((r) => h("option", { value: r.run_id, text: r.run_id })));
    if (state.run) select.value = state.run;
  }

  // ---- live: poll the overview; when its revision moves, refresh the open view ---------------------------------------
  async function poll() {
    state.polls += 1;
    if (state.polls % 10 === 1 || !state.runs.length) await loadRuns();
    if (!state.run) { setLive("no run yet", "idle"); return; }
    try {
      const ov = await api(runPath("overview"));
      if (ov.run_id !== state.run) return;
      const changed = state.revision !== null && ov.revision !== state.revision;
      state.revision = ov.revision;
      state.overview = ov;
      setLive(ov.status === "running" ? `live · ${liveText(ov)}` : `${ov.status} · ${liveText(ov)}`,
        ov.status === "running" ? "running" : "idle");
      if (state.view === "overview") { if (state.renders) await serial(() => renderOverview(ov)); } else if (changed) await render();
    } catch (e) {
      setLive(e instanceof ApiError ? e.message : "the league does not answer", "error");
    }
  }
  function liveText(ov) {
    const p = ov.progress && ov.progress.in_progress;
    const step = p ? `step ${p.step}: ${p.phase}` : ov.progress && ov.progress.done ? `step ${ov.progress.done.step} done` : "";
    return `${step}${step ? " · " : ""}updated ${new Date(ov.server_time * 1000).toLocaleTimeString()}`;
  }
  function setLive(text, cls) {
    const live = $("#live");
    live.className = `live ${cls}`;
    live.replaceChildren(h("span", { class: "dot" }), h("span", { id: "live-text", text }));
  }
  async function loadRuns() {
    try {
      const runs = await api("/v1/runs");
      const changed = runs.map((r) => r.run_id).join("\n") !== state.runs.map((r) => r.run_id).join("\n");
      state.runs = runs;
      if (!state.run) state.run = lastRun();
      if (changed) renderNav(); // not otherwise: an open run menu would close under the user
    } catch (e) { setLive("the league does not answer", "error"); }
  }

  // ---- views ---------------------------------------------------------------------------------------------------------
  // Renders run one after another, so the last one asked for is the one left on screen.
  let queue = Promise.resolve();
  function serial(fn) {
    const next = queue.then(fn, fn);
    queue = next.catch(() => {});
    return next;
  }
  function render() { return serial(renderNow); }
  async function renderNow() {
    const main = $("#main");
    state.renders += 1;
    destroyCharts();
    if (state.view === "adapter") return guard(main, () => renderAdapter(main, state.adapter));
    if (!state.run) {
      main.replaceChildren(h("section", { class: "empty" }, h("h2", { text: "No runs yet" }),
        h("p", { text: "Start one with `populora train --dashboard` and this page follows it." })));
      return;
    }
    const views = { overview: () => renderOverview(state.overview, true), leaderboard: () => renderLeaderboard(main),
      ratings: () => renderRatings(main), lineage: () => renderLineage(main), payoff: () => renderPayoff(main),
      problems: () => renderProblems(main) };
    return guard(main, views[state.view]);
  }
  async function guard(main, fn) {
    const key = state.view === "adapter" ? `adapter/${state.adapter}` : `${state.view}/${state.run}`;
    try {
      await fn();
      main.dataset.view = key; // what is on screen (the tests wait for it)
    } catch (e) {
      main.replaceChildren(h("section", { class: "error-box" }, h("h2", { text: "Could not load this view" }),
        h("p", { text: e.message || String(e) })));
    }
  }
  function destroyCharts() {
    for (const chart of Object.values(state.charts)) chart.destroy();
    state.charts = {};
  }
  function panel(title, ...children) {
    return h("section", { class: "panel" }, title ? h("h2", { text: title }) : null, ...children);
  }
  function card(label, value, sub, id) {
    return h("div", { class: "card", id }, h("div", { class: "card-label", text: label }),
      h("div", { class: "card-value", text: value }), sub ? h("div", { class: "card-sub", text: sub }) : null);
  }
  function table(head, rows, attrs) {
    return h("table", attrs || {}, h("thead", {}, h("tr", {}, head.map((c) => (c instanceof Node ? c : h("th", { text: c }))))),
      h("tbody", {}, rows));
  }

  // -- overview
  async function renderOverview(ov, fresh) {
    const main = $("#main");
    if (!ov || ov.run_id !== state.run) {
      ov = await api(runPath("overview"));
      state.overview = ov;
      state.revision = ov.revision;
    }
    // The per-step chart is kept across polls and redrawn only when the revision moves.
    const box = (!fresh && state.stepsBox) || h("div", { id: "ov-steps-chart", class: "chart" });
    const prog = ov.progress || {};
    const inProg = prog.in_progress;
    const latest = ov.latest_step;
    const measured = ov.last_measured_step;
    const comp = ov.compute || {};
    const cards = h("div", { class: "cards" },
      card("status", ov.status, ov.mode ? `${ov.mode} run` : "", "ov-status"),
      card("step", latest ? `${latest.step}${isNum(ov.steps_planned) ? ` / ${ov.steps_planned}` : ""}` : "–",
        prog.done ? `last done: ${prog.done.phase}` : "", "ov-step"),
      card("in progress", inProg ? inProg.phase : "–", inProg ? `step ${inProg.step}` : "nothing running", "ov-phase"),
      card("valid proposals", measured ? pct(measured.valid_rate) : "–",
        measured ? `${int(measured.valid)} of ${int(measured.proposals)} at step ${measured.step}` : "", "ov-valid"),
      card("solve rate", measured ? pct(measured.solve_rate) : "–", measured ? `step ${measured.step}` : "", "ov-solve"),
      card("compute", `${int(comp.generated_tokens)} tok`,
        `generated · ${int(comp.trained_tokens)} trained · ${int(comp.sandbox_jobs)} sandbox jobs`, "ov-compute"),
      card("adapters", `${int(ov.league.active)} active`, `${int(ov.league.adapters)} in all`, "ov-adapters"));
    const parts = [cards];
    if (ov.error) {
      parts.push(h("div", { class: "error-box" }, `step ${ov.error.step}, ${ov.error.phase} failed: `,
        h("code", { text: ov.error.error })));
    }
    if (!ov.journal) {
      parts.push(h("p", { class: "note", text: "This database holds no phase journal for the run (the league " +
        "alone): progress, problems and samples stay empty." }));
    }
    parts.push(h("div", { class: "grid2" },
      panel(latest ? `Step ${latest.step}: seconds per phase` : "Seconds per phase", phaseBars(latest)),
      panel(measured ? `Step ${measured.step}: proposals and answers` : "Proposals", proposalsTable(measured))));
    parts.push(h("div", { class: "grid2" },
      panel("Solve rate (solid) and valid-proposal rate (dashed) per task type, by step", box),
      panel("Last evolution events", eventsList(ov.evolution))));
    main.replaceChildren(...parts);
    main.dataset.revision = ov.revision;
    state.stepsBox = box;
    if (fresh || box.dataset.revision !== ov.revision) {
      box.dataset.revision = ov.revision;
      const data = await api(runPath("steps"));
      if (state.charts.steps) { state.charts.steps.destroy(); delete state.charts.steps; }
      box.replaceChildren();
      stepsChart(box, data.steps);
    }
  }
  function phaseBars(step) {
    if (!step) return h("p", { class: "note", text: "no phase persisted yet" });
    const entries = Object.entries(step.seconds || {});
    const max = Math.max(1e-9, ...entries.map(([, v]) => v));
    return h("div", { class: "bars", id: "ov-phases" }, entries.map(([phase, v]) => h("div", { class: "bar-row" },
      h("span", { class: "bar-label", text: phase }),
      h("span", { class: "bar-track" }, barFill(v / max)),
      h("span", { class: "bar-value", text: secs(v) }))),
    h("div", { class: "bar-total", text: `step total ${secs(step.step_seconds)}` }));
  }
  function barFill(frac) {
    const fill = h("span", { class: "bar-fill" });
    fill.style.width = `${Math.max(1, 100 * frac).toFixed(1)}%`;
    return fill;
  }
  function proposalsTable(step) {
    if (!step || !step.task_types) return h("p", { class: "note", text: "no proposals yet" });
    const rows = Object.entries(step.task_types).map(([tt, m]) => h("tr", {},
      h("td", {}, badge(tt, "tt")), h("td", { class: "num", text: int(m.proposals) }),
      h("td", { class: "num", text: pct(m.valid_rate) }), h("td", { class: "num", text: pct(m.solve_rate) }),
      h("td", { class: "num", text: fmt(m.ast_depth, 1) }),
      h("td", { text: Object.entries(m.rejections || {}).map(([r, n]) => `${r} ×${n}`).join(", ") || "–" })));
    const outcomes = Object.entries(step.outcomes || {}).map(([o, n]) => `${o} ×${n}`).join(", ");
    return h("div", {}, table(["task type", "proposals", "valid", "solve rate", "AST depth", "rejections"], rows,
      { class: "compact", id: "ov-task-types" }),
    h("p", { class: "note", text: `answers: ${outcomes || "none checked"}` }));
  }
  function eventsList(events) {
    if (!events || !events.length) return h("p", { class: "note", text: "no evolution yet" });
    return h("ul", { class: "events", id: "ov-events" }, events.slice().reverse().map((e) => h("li", {},
      h("span", { class: "ev-step", text: `step ${e.step}` }), " ", roleBadge(e.role), " ",
      e.retired ? adapterLink(e.retired) : "–", " → ", adapterLink(e.child), " ",
      badge(e.operator, "op"), ` from ${e.parents.join(" + ")}`,
      isNum(e.epsilon) ? ` · ε ${fmt(e.epsilon, 3)}` : "",
      isNum(e.relative_change) ? ` · change ${fmt(e.relative_change, 3)}` : "")));
  }
  function stepsChart(box, steps) {
    const rows = steps.filter((s) => s.task_types);
    if (!rows.length) { box.replaceChildren(h("p", { class: "note", text: "no measured step yet" })); return; }
    const types = [...new Set(rows.flatMap((s) => Object.keys(s.task_types)))].sort();
    const xs = rows.map((s) => s.step);
    const series = [{ label: "step" }];
    const data = [xs];
    for (const tt of types) {
      series.push({ label: `${tt} solve`, stroke: TASK_COLORS[tt] || "#555", width: 2, points: { size: 6 } });
      data.push(rows.map((s) => nullable(s.task_types[tt] && s.task_types[tt].solve_rate)));
      series.push({ label: `${tt} valid`, stroke: TASK_COLORS[tt] || "#555", width: 1.5, dash: [5, 4],
        points: { size: 4 } });
      data.push(rows.map((s) => nullable(s.task_types[tt] && s.task_types[tt].valid_rate)));
    }
    chart("steps", box, { series, scales: { y: { range: [0, 1] } }, axes: [{ label: "step" }, { label: "rate" }] },
      data, evolutionSteps(steps));
  }
  const nullable = (x) => (isNum(x) ? x : null);
  const evolutionSteps = (steps) => steps.filter((s) => s.evolution && s.evolution.length).map((s) => s.step);

  // -- charts (uPlot); evolution steps drawn as dashed vertical lines
  function chart(name, box, opts, data, markers) {
    const width = Math.max(320, box.clientWidth || 640);
    const axes = (opts.axes || [{}, {}]).map((a, i) => (i === 0 ? { incrs: STEP_INCRS, ...a } : a));
    const plot = new uPlot({
      width, height: opts.height || 300, series: opts.series, scales: { x: { time: false }, ...(opts.scales || {}) },
      axes, cursor: { points: { size: 6 } }, legend: { live: true },
      plugins: markers && markers.length ? [markerPlugin(markers)] : [],
    }, data, box);
    box.dataset.series = String(opts.series.length - 1);
    state.charts[name] = plot;
    return plot;
  }
  function markerPlugin(steps) {
    return { hooks: { draw: [(u) => {
      const ctx = u.ctx;
      ctx.save();
      ctx.strokeStyle = "#888";
      ctx.fillStyle = "#666";
      ctx.setLineDash([4, 4]);
      ctx.lineWidth = 1;
      ctx.font = `${11 * devicePixelRatio}px sans-serif`;
      for (const step of steps) {
        const x = Math.round(u.valToPos(step, "x", true));
        if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
        ctx.beginPath();
        ctx.moveTo(x, u.bbox.top);
        ctx.lineTo(x, u.bbox.top + u.bbox.height);
        ctx.stroke();
        ctx.fillText("evolve", x + 3, u.bbox.top + 12 * devicePixelRatio);
      }
      ctx.restore();
    }] } };
  }

  // -- leaderboard
  const LB_COLUMNS = [
    ["rank", "#", "num"], ["adapter_id", "adapter", ""], ["role", "role", ""], ["status", "status", ""],
    ["mu", "μ", "num"], ["sigma", "σ", "num"], ["conservative_skill", "μ − kσ", "num"], ["wins", "W", "num"],
    ["losses", "L", "num"], ["draws", "D", "num"], ["matches", "matches", "num"], ["operator", "operator", ""],
    ["parents", "parents", ""], ["created_step", "born", "num"], ["retired_step", "retired", "num"],
  ];
  async function renderLeaderboard(main) {
    const [board, evals] = await Promise.all([api(runPath("leaderboard")), loadEvals()]);
    const f = state.filters;
    const rows = board.rows.filter((r) => (!f.role || r.role === f.role) && (!f.status || r.status === f.status));
    const key = state.sort.key;
    const cmp = (a, b) => {
      const x = key === "parents" ? a.parents.join(",") : a[key];
      const y = key === "parents" ? b.parents.join(",") : b[key];
      if (x === y) return a.rank - b.rank;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * state.sort.dir;
    };
    rows.sort(cmp);
    const benchmarks = evals ? [...new Set(evals.map((e) => e.benchmark))].sort() : [];
    const head = LB_COLUMNS.map(([k, label, cls]) => h("th", {
      class: `sortable ${cls} ${state.sort.key === k ? (state.sort.dir > 0 ? "asc" : "desc") : ""}`,
      "data-key": k, on: { click: () => { state.sort = { key: k, dir: state.sort.key === k ? -state.sort.dir : (cls ? -1 : 1) }; render(); } },
    }, label)).concat(benchmarks.map((b) => h("th", { class: "num", title: `latest pass@1 on ${b}`, text: `${b} pass@1` })));
    const evalOf = (id, b) => {
      const hits = (evals || []).filter((e) => e.adapter_id === id && e.benchmark === b);
      return hits.length ? hits[hits.length - 1].score : null;
    };
    const body = rows.map((r) => h("tr", { class: `lb-row ${r.status}`, "data-adapter": r.adapter_id },
      h("td", { class: "num", text: r.rank }), h("td", {}, adapterLink(r.adapter_id)), h("td", {}, roleBadge(r.role)),
      h("td", {}, badge(r.status, r.status)), h("td", { class: "num", text: fmt(r.mu) }),
      h("td", { class: "num", text: fmt(r.sigma) }), h("td", { class: "num strong", text: fmt(r.conservative_skill) }),
      h("td", { class: "num", text: r.wins }), h("td", { class: "num", text: r.losses }),
      h("td", { class: "num", text: r.draws }), h("td", { class: "num", text: r.matches }),
      h("td", { text: r.operator || "–" }), h("td", {}, r.parents.length ? r.parents.map((p, i) => [i ? ", " : "", adapterLink(p)]) : "–"),
      h("td", { class: "num", text: r.created_step }), h("td", { class: "num", text: r.retired_step ?? "–" }),
      benchmarks.map((b) => h("td", { class: "num", text: fmt(evalOf(r.adapter_id, b), 3) }))));
    const select = (label, key, options) => h("label", {}, `${label} `, h("select", {
      id: `filter-${key}`, on: { change: (e) => { state.filters[key] = e.target.value; render(); } },
    }, options.map(([v, t]) => { const o = h("option", { value: v, text: t }); if (state.filters[key] === v) o.selected = true; return o; })));
    main.replaceChildren(panel(`Leaderboard · ${rows.length} of ${board.rows.length} adapters · k = ${board.k}`,
      h("div", { class: "toolbar" },
        select("role", "role", [["", "all"], ["teacher", "teachers"], ["student", "students"], ["both", "both"]]),
        select("status", "status", [["", "all"], ["active", "active"], ["retired", "retired"]]),
        h("span", { class: "note", text: "click a header to sort; click an adapter for its page" }),
        benchmarks.length ? h("span", { id: "eval-base", class: "note", text: "bare base model: " + benchmarks.map((b) =>
          `${b} pass@1 ${fmt(evalOf(null, b), 3)}`).join(" · ") }) : null),
      h("div", { class: "scroll" }, table(head, body, { id: "leaderboard", class: "data" }))));
  }
  async function loadEvals() {
    // Held-out evaluation scores, where the league serves them (GET /v1/runs/{run}/evals): shown as columns.
    if (state.evalsPath === null) {
      try {
        const spec = await api("/openapi.json");
        state.evalsPath = Object.prototype.hasOwnProperty.call(spec.paths || {}, "/v1/runs/{run_id}/evals");
      } catch (_) { state.evalsPath = false; }
    }
    if (!state.evalsPath) return null;
    try {
      const got = await api(runPath("evals"));
      const rows = Array.isArray(got) ? got : Array.isArray(got.evals) ? got.evals : Array.isArray(got.rows) ? got.rows : [];
      // adapter_id null is the bare base model: shown beside the table, not as a row
      return rows.filter((e) => e && (typeof e.adapter_id === "string" || e.adapter_id === null)).map((e) => ({
        adapter_id: e.adapter_id, benchmark: String(e.benchmark || "eval"),
        score: [e.pass_at_1, e["pass@1"], e.score].find(isNum) ?? null,
      }));
    } catch (_) { return null; }
  }

  // -- rating curves
  function colorOf(i) { return PALETTE[i % PALETTE.length]; }
  async function renderRatings(main) {
    const data = await api(runPath("ratings"));
    const adapters = data.adapters.slice().sort((a, b) => (ROLE_ORDER[a.role] - ROLE_ORDER[b.role]) || (a.adapter_id < b.adapter_id ? -1 : 1));
    const box = h("div", { id: "ratings-chart", class: "chart" });
    main.replaceChildren(panel(`Rating curves · μ − ${data.k}σ per adapter, by step · ${adapters.length} adapters`,
      h("p", { class: "note", text: "Solid: teachers; dashed: students. Dashed verticals: evolution steps. Click a legend entry to hide it." }),
      box), panel("Evolution events", h("ul", { class: "events", id: "rating-events" }, data.events.length ? data.events.map((e) => h("li", {},
      h("span", { class: "ev-step", text: `step ${e.step}` }), " ", roleBadge(e.role), " ",
      e.retired_ids.length ? e.retired_ids.map((r, i) => [i ? ", " : "", adapterLink(r)]) : "–", " → ", adapterLink(e.child_id), " ",
      badge(e.operator, "op"), ` from ${e.parents.join(" + ")}`, isNum(e.epsilon) ? ` · ε ${fmt(e.epsilon, 3)}` : "")) : h("li", { text: "none yet" }))));
    const steps = [...new Set(adapters.flatMap((a) => a.steps))].sort((a, b) => a - b);
    const index = new Map(steps.map((st, i) => [st, i]));
    const series = [{ label: "step" }];
    const cols = [steps];
    adapters.forEach((a, i) => {
      const col = new Array(steps.length).fill(null);
      a.steps.forEach((st, j) => { col[index.get(st)] = a.conservative_skill[j]; });
      cols.push(col);
      series.push({ label: a.adapter_id, stroke: colorOf(i), width: a.status === "retired" ? 1 : 2,
        dash: a.role === "student" ? [6, 3] : undefined, spanGaps: true, points: { size: 5 } });
    });
    if (!steps.length) { box.replaceChildren(h("p", { class: "note", text: "no ratings yet" })); return; }
    chart("ratings", box, { series, height: 420, axes: [{ label: "step" }, { label: "μ − kσ" }] }, cols,
      [...new Set(data.events.map((e) => e.step))]);
  }

  // -- lineage tree (a DAG: crossover children have two parents)
  const NODE_W = 190, NODE_H = 36, COL_W = 300, ROW_H = 52, PAD = 30;
  async function renderLineage(main) {
    const data = await api(runPath("lineage"));
    const cols = [...new Set(data.nodes.map((n) => n.created_step))].sort((a, b) => a - b);
    const byCol = new Map(cols.map((c) => [c, []]));
    for (const n of data.nodes) byCol.get(n.created_step).push(n);
    const pos = new Map();
    const parentsOf = new Map();
    for (const e of data.edges) {
      if (!parentsOf.has(e.child_id)) parentsOf.set(e.child_id, []);
      parentsOf.get(e.child_id).push(e.parent_id);
    }
    let height = 0;
    cols.forEach((c, ci) => {
      const nodes = byCol.get(c);
      const meanY = (n) => {
        const ys = (parentsOf.get(n.adapter_id) || []).map((p) => pos.has(p) ? pos.get(p).y : null).filter(isNum);
        return ys.length ? ys.reduce((a, b) => a + b, 0) / ys.length : null;
      };
      nodes.sort((a, b) => (ROLE_ORDER[a.role] - ROLE_ORDER[b.role]) || ((meanY(a) ?? 0) - (meanY(b) ?? 0)) || (a.adapter_id < b.adapter_id ? -1 : 1));
      nodes.forEach((n, i) => pos.set(n.adapter_id, { x: PAD + ci * COL_W, y: PAD + 24 + i * ROW_H }));
      height = Math.max(height, PAD + 24 + nodes.length * ROW_H);
    });
    const width = PAD * 2 + Math.max(1, cols.length - 1) * COL_W + NODE_W;
    const graph = s("svg", { id: "lineage-svg", width, height: height + PAD, viewBox: `0 0 ${width} ${height + PAD}`, role: "img", "aria-label": "lineage tree" },
      s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 8 8", refX: 7, refY: 4, markerWidth: 7, markerHeight: 7, orient: "auto" },
        s("path", { d: "M0,0 L8,4 L0,8 z", class: "arrow-head" }))));
    cols.forEach((c, ci) => graph.append(s("text", { x: PAD + ci * COL_W, y: PAD, class: "col-label" }, c === 0 ? "initial members" : `born at step ${c}`)));
    // Each child's incoming edges enter at their own height on its left side, their labels just before it, so
    // that a label never sits on a node of a column the edge passes.
    const incoming = new Map();
    for (const e of data.edges) incoming.set(e.child_id, (incoming.get(e.child_id) || []).concat([e]));
    for (const e of data.edges) {
      const a = pos.get(e.parent_id), b = pos.get(e.child_id);
      if (!a || !b) continue;
      const siblings = incoming.get(e.child_id);
      const k = siblings.indexOf(e);
      const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + (NODE_H * (k + 1)) / (siblings.length + 1);
      const mx = x2 - Math.min(70, (x2 - x1) / 2);
      // An edge that skips columns runs along the gap below its parent's row (rows line up across columns, so the
      // gap holds no node) and turns to its child just before the child's column.
      const yg = a.y + NODE_H + (ROW_H - NODE_H) / 2;
      const d = b.x - a.x > COL_W * 1.5
        ? `M${x1},${y1} C${x1 + 28},${y1} ${x1 + 28},${yg} ${x1 + 56},${yg} L${x2 - 110},${yg} C${x2 - 55},${yg} ${x2 - 55},${y2} ${x2 - 4},${y2}`
        : `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 4},${y2}`;
      const label = `${e.operator}${isNum(e.epsilon) ? ` ε=${fmt(e.epsilon, 3)}` : ""}`;
      graph.append(s("g", { class: "lineage-edge", "data-parent": e.parent_id, "data-child": e.child_id },
        s("path", { d, "marker-end": "url(#arrow)" }),
        s("text", { x: x2 - 8, y: y2 - 5 - 11 * (siblings.length - 1 - k), class: "edge-label", "text-anchor": "end" }, label),
        s("title", {}, `${e.parent_id} → ${e.child_id}: ${label} at step ${e.step}`)));
    }
    for (const n of data.nodes) {
      const p = pos.get(n.adapter_id);
      const label = n.adapter_id.length > 24 ? `${n.adapter_id.slice(0, 23)}…` : n.adapter_id;
      const g = s("g", { class: `lineage-node role-${n.role} ${n.status} ${state.lineageSelected === n.adapter_id ? "selected" : ""}`,
        "data-adapter": n.adapter_id, transform: `translate(${p.x},${p.y})`, tabindex: 0,
        on: { click: () => selectNode(n, data), keydown: (ev) => { if (ev.key === "Enter") selectNode(n, data); } } },
      s("rect", { width: NODE_W, height: NODE_H, rx: 7 }),
      s("text", { x: 10, y: 15, class: "node-id" }, label),
      s("text", { x: 10, y: 29, class: "node-sub" }, `${n.role} · μ−kσ ${fmt(n.conservative_skill, 1)}${n.status === "retired" ? ` · retired at ${n.retired_step}` : ""}`),
      s("title", {}, n.adapter_id));
      graph.append(g);
    }
    const side = h("aside", { id: "lineage-detail", class: "side" }, h("p", { class: "note", text: "Click a node for its history." }));
    main.replaceChildren(panel(`Lineage · ${data.nodes.length} adapters · ${data.edges.length} parent links`,
      h("div", { class: "legend" }, roleBadge("teacher"), " ", roleBadge("student"), " ", roleBadge("both"),
        h("span", { class: "note", text: " faded with a dashed border: retired; edges: operator and the ε it applied" })),
      h("div", { class: "lineage-wrap" }, h("div", { class: "scroll lineage-scroll" }, graph), side)));
    const keep = data.nodes.find((n) => n.adapter_id === state.lineageSelected);
    if (keep) await selectNode(keep, data);
  }
  async function selectNode(node, data) {
    state.lineageSelected = node.adapter_id;
    for (const g of document.querySelectorAll(".lineage-node")) g.classList.toggle("selected", g.getAttribute("data-adapter") === node.adapter_id);
    const side = $("#lineage-detail");
    if (!side) return;
    const children = data.edges.filter((e) => e.parent_id === node.adapter_id);
    const parents = data.edges.filter((e) => e.child_id === node.adapter_id);
    const box = h("div", { class: "chart small", id: "lineage-history" });
    side.replaceChildren(h("h3", {}, adapterLink(node.adapter_id)),
      h("dl", { class: "facts" },
        h("dt", { text: "role" }), h("dd", {}, roleBadge(node.role)), h("dt", { text: "status" }), h("dd", { text: node.status }),
        h("dt", { text: "μ / σ" }), h("dd", { text: `${fmt(node.mu)} / ${fmt(node.sigma)}` }),
        h("dt", { text: "μ − kσ" }), h("dd", { text: fmt(node.conservative_skill) }),
        h("dt", { text: "born" }), h("dd", { text: `step ${node.created_step}${node.operator ? ` by ${node.operator}` : ""}` }),
        h("dt", { text: "retired" }), h("dd", { text: node.retired_step === null ? "–" : `step ${node.retired_step}` }),
        h("dt", { text: "parents" }), h("dd", {}, parents.length ? parents.map((e, i) => [i ? ", " : "", adapterLink(e.parent_id)]) : "–"),
        h("dt", { text: "children" }), h("dd", {}, children.length ? children.map((e, i) => [i ? ", " : "", adapterLink(e.child_id), ` (${e.operator})`]) : "–"),
        h("dt", { text: "params" }), h("dd", { text: Object.keys(node.params).length ? JSON.stringify(node.params) : "–" })),
      h("h4", { text: "rating history" }), box);
    const hist = await api(`/v1/adapters/${enc(node.adapter_id)}/history`);
    if (state.charts.lineageHistory) state.charts.lineageHistory.destroy();
    if (!hist.history.length || !document.body.contains(box)) return;
    chart("lineageHistory", box, { height: 180, series: [{ label: "step" },
      { label: "μ", stroke: "#3a7be4", width: 2 }, { label: "μ−kσ", stroke: "#e4793a", width: 2 }],
    axes: [{ label: "step" }, {}] }, [hist.history.map((r) => r.step), hist.history.map((r) => r.mu),
      hist.history.map((r) => r.mu - data.k * r.sigma)]);
  }

  // -- payoff heatmap
  async function renderPayoff(main) {
    const p = await api(runPath("payoff"));
    if (!p.teachers.length) {
      main.replaceChildren(panel("Payoff", h("p", { class: "note", text: "no match played yet" })));
      return;
    }
    const head = [h("th", { text: "teacher \\ student" }), ...p.students.map((st) => h("th", { class: "col-head" }, adapterLink(st)))];
    const rows = p.teachers.map((t, i) => h("tr", {}, h("th", { class: "row-head" }, adapterLink(t)), p.students.map((st, j) => {
      const v = p.solve_rate[i][j];
      const cell = h("td", { class: `heat ${v === null ? "empty" : v > 0.55 ? "dark" : ""}`, "data-teacher": t, "data-student": st,
        "data-value": v === null ? "" : String(v), title: `${t} vs ${st}: ${v === null ? "never matched" : `solve rate ${fmt(v, 3)} over ${p.matches[i][j]} matches`}` },
      h("div", { class: "heat-v", text: v === null ? "–" : fmt(v, 2) }), h("div", { class: "heat-n", text: p.matches[i][j] ? `n=${p.matches[i][j]}` : "" }));
      if (v !== null) cell.style.background = heatColor(v);
      return cell;
    })));
    main.replaceChildren(panel(`Payoff · teacher × student solve rate (decayed mean ρ, decay ${p.decay})`,
      h("p", { class: "note", text: "Teachers aim to keep students near 0.5: the edge of their ability. Blank: the pair never met." }),
      h("div", { class: "scroll" }, table(head, rows, { id: "payoff", class: "heatmap" })),
      h("div", { class: "scale" }, "0", h("span", { class: "scale-bar" }), "1")));
  }
  function heatColor(v) {
    const a = [247, 251, 255], b = [8, 69, 148];
    const c = a.map((x, i) => Math.round(x + (b[i] - x) * Math.min(1, Math.max(0, v))));
    return `rgb(${c[0]},${c[1]},${c[2]})`;
  }

  // -- problem explorer
  async function renderProblems(main) {
    const ps = state.problems;
    const query = new URLSearchParams();
    if (ps.step !== null) query.set("step", ps.step);
    if (ps.invalid) query.set("include_invalid", "true");
    const data = await api(runPath(`tasks?${query}`));
    const tasks = data.tasks.filter((t) => !ps.taskType || t.task_type === ps.taskType);
    const stepSel = h("select", { id: "problem-step", on: { change: (e) => { ps.step = Number(e.target.value); render(); } } },
      data.steps.map((st) => { const o = h("option", { value: st.step, text: `step ${st.step} · ${st.valid}/${st.proposals} valid` }); if (st.step === data.step) o.selected = true; return o; }));
    const typeSel = h("select", { id: "problem-type", on: { change: (e) => { ps.taskType = e.target.value; render(); } } },
      [["", "all types"], ["code_i", "code_i"], ["code_o", "code_o"], ["code_f", "code_f"]].map(([v, t]) => { const o = h("option", { value: v, text: t }); if (ps.taskType === v) o.selected = true; return o; }));
    const inv = h("input", { type: "checkbox", id: "problem-invalid", on: { change: (e) => { ps.invalid = e.target.checked; render(); } } });
    inv.checked = ps.invalid;
    main.replaceChildren(panel(`Problems · step ${data.step} · ${tasks.length} shown`,
      h("div", { class: "toolbar" }, stepSel, typeSel, h("label", {}, inv, " include rejected proposals")),
      tasks.length ? h("div", { class: "tasks", id: "tasks" }, tasks.map(taskCard)) : h("p", { class: "note", text: "no task at this step" })));
  }
  function taskCard(t) {
    const cx = Object.entries(t.complexity || {}).filter(([, v]) => isNum(v)).map(([k, v]) => badge(`${k} ${fmt(v, k === "lines_of_code" ? 0 : 1)}`, "chip"));
    return h("article", { class: `task ${t.valid ? "valid" : "invalid"}`, "data-task": t.id },
      h("header", {}, badge(t.task_type, "tt"), " ", t.valid ? badge("valid", "ok") : badge(t.reason || "pending", "bad"), " ",
        h("span", { class: "who" }, "by ", adapterLink(t.teacher_id), t.student_id ? [" → ", adapterLink(t.student_id)] : ""),
        h("span", { class: "rho", text: t.rho === null ? "" : `solve rate ${fmt(t.rho, 2)}` }), ...cx),
      t.valid ? [
        h("pre", { class: "code program", text: t.program }),
        t.inputs.length ? table(["input", "output"], t.inputs.map((x, i) => h("tr", {}, h("td", {}, h("code", { text: x })), h("td", {}, h("code", { text: t.outputs[i] ?? "" })))), { class: "io compact" }) : null,
        t.message ? h("p", { class: "message", text: t.message }) : null,
      ] : [t.detail ? h("p", { class: "note", text: t.detail }) : null],
      h("details", {}, h("summary", { text: "the teacher's whole answer" }), h("pre", { class: "code raw", text: t.text })));
  }

  // -- adapter page
  async function renderAdapter(main, id) {
    const page = await api(`/v1/adapters/${enc(id)}`);
    const a = page.adapter;
    if (a.run_id !== state.run) { state.run = a.run_id; renderNav(); }
    const [hist, matches, samples] = await Promise.all([
      api(`/v1/adapters/${enc(id)}/history`),
      api(`/v1/runs/${enc(a.run_id)}/matches?adapter_id=${enc(id)}&order=desc&limit=50`),
      api(`/v1/adapters/${enc(id)}/samples?limit=12`)]);
    const k = page.k;
    const box = h("div", { id: "adapter-chart", class: "chart" });
    main.replaceChildren(
      h("h1", { class: "adapter-title" }, h("span", { id: "adapter-id", text: a.adapter_id }), " ", roleBadge(a.role), " ", badge(a.status, a.status)),
      h("div", { class: "cards" }, card("μ − kσ", fmt(a.conservative_skill), `μ ${fmt(a.mu)} · σ ${fmt(a.sigma)}`),
        card("record", `${a.wins}W ${a.losses}L ${a.draws}D`, `${a.matches} matches`),
        card("born", `step ${a.created_step}`, a.operator ? `by ${a.operator} from ${a.parents.join(" + ")}` : "initial member"),
        card("retired", a.retired_step === null ? "–" : `step ${a.retired_step}`, ""),
        card("versions", String(page.versions.length || "–"), page.versions.length ? `latest v${page.versions[page.versions.length - 1].version}` : "")),
      h("div", { class: "grid2" },
        panel("Stored version", h("p", {}, "path ", h("code", { id: "store-path", text: page.store_path || "(not in the journal)" })),
          h("p", { class: "note", text: `store root: ${page.store_root || "–"}` }),
          page.versions.length ? table(["version", "current after step"], page.versions.map((v) => h("tr", {},
            h("td", { class: "num", text: `v${v.version}` }), h("td", { class: "num", text: v.step }))), { class: "compact", id: "versions" }) : null,
          h("dl", { class: "facts" }, h("dt", { text: "run" }), h("dd", {}, h("a", { href: `#/overview/${enc(a.run_id)}`, text: a.run_id })),
            h("dt", { text: "parents" }), h("dd", {}, a.parents.length ? a.parents.map((p, i) => [i ? ", " : "", adapterLink(p)]) : "–"),
            h("dt", { text: "params" }), h("dd", { text: Object.keys(a.params).length ? JSON.stringify(a.params) : "–" }),
            h("dt", { text: "seed" }), h("dd", { text: a.seed }))),
        panel("Rating over time", box)),
      panel(`Latest matches (${matches.matches.length})`, matches.matches.length ? h("div", { class: "scroll short" }, table(["step", "task type", "teacher", "student", "ρ", "outcome"],
        matches.matches.map((m) => h("tr", {}, h("td", { class: "num", text: m.step }), h("td", {}, badge(m.task_type, "tt")),
          h("td", {}, adapterLink(m.teacher_id)), h("td", {}, adapterLink(m.student_id)), h("td", { class: "num", text: fmt(m.rho) }),
          h("td", { text: m.outcome }))), { class: "data compact", id: "adapter-matches" })) : h("p", { class: "note", text: "no match yet" })),
      h("div", { class: "grid2" },
        panel(`Proposals (${samples.proposals.length})`, h("div", { id: "sample-proposals" }, samples.proposals.length ? samples.proposals.map((p) => h("article", { class: "sample" },
          h("header", {}, h("span", { class: "ev-step", text: `step ${p.step}` }), " ", badge(p.task_type, "tt"), " ",
            p.valid ? badge("valid", "ok") : badge(p.reason || "pending", "bad"), p.rho === null ? "" : ` · solve rate ${fmt(p.rho)}`),
          p.valid ? h("pre", { class: "code program", text: p.program }) : (p.detail ? h("p", { class: "note", text: p.detail }) : null),
          h("details", {}, h("summary", { text: "the whole answer" }), h("pre", { class: "code raw", text: p.text })))) : h("p", { class: "note", text: "none (not a teacher, or no journal)" }))),
        panel(`Answers (${samples.answers.length})`, h("div", { id: "sample-answers" }, samples.answers.length ? samples.answers.map((x) => h("article", { class: "sample" },
          h("header", {}, h("span", { class: "ev-step", text: `step ${x.step}` }), " ", badge(x.task_type || "task", "tt"), " ",
            badge(x.outcome || "unchecked", x.outcome === "correct" ? "ok" : "bad")),
          h("pre", { class: "code raw", text: x.text }),
          h("details", {}, h("summary", { text: "the task" }), h("pre", { class: "code program", text: x.program }),
            x.inputs.length ? table(["input", "gold output"], x.inputs.map((v, i) => h("tr", {}, h("td", {}, h("code", { text: v })), h("td", {}, h("code", { text: x.outputs[i] ?? "" })))), { class: "io compact" }) : null))) : h("p", { class: "note", text: "none (not a student, or no journal)" })))));
    if (hist.history.length) {
      chart("adapter", box, { height: 260, series: [{ label: "step" }, { label: "μ", stroke: "#3a7be4", width: 2 },
        { label: "μ − kσ", stroke: "#e4793a", width: 2 }], axes: [{ label: "step" }, {}] },
      [hist.history.map((r) => r.step), hist.history.map((r) => r.mu), hist.history.map((r) => r.mu - k * r.sigma)]);
    } else box.replaceChildren(h("p", { class: "note", text: "no rating yet" }));
  }

  // ---- start ------------------------------------------------------------------------------------------------------
  function start() {
    $("#run-select").addEventListener("change", (e) => { state.run = e.target.value; state.revision = null; state.overview = null; go(state.view === "adapter" ? "overview" : state.view, state.run); });
    window.addEventListener("hashchange", () => { route(); });
    let resizeTimer = null;
    window.addEventListener("resize", () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => { // charts follow the width of their box; nothing is fetched again
        for (const chart of Object.values(state.charts)) {
          const box = chart.root.parentElement;
          if (box && box.clientWidth) chart.setSize({ width: Math.max(320, box.clientWidth), height: chart.height });
        }
      }, 150);
    });
    loadRuns().then(route).then(() => poll());
    setInterval(poll, POLL_MS);
  }
  document.addEventListener("DOMContentLoaded", start);
})();
