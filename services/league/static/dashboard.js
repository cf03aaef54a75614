// PopuLoRA league dashboard: one page over the league's read-only REST API, live by polling /overview. This script,
// the last index.html loads, routes (#/<view>/<run>, #/adapter/<id>), polls, renders one view at a time and starts
// the page; the views and their helpers are the dashboard-*.js scripts before it, in the namespace window.dashboard.
// Every value from the server is put into the page as text (textContent, attributes, canvas text), never as HTML:
// adapter ids, programs and model output are whatever a model or a client wrote.
"use strict";

(() => {
  const D = window.dashboard;
  const { h, $, enc, POLL_MS, VIEWS, state, ApiError, api, runPath } = D;

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
      if (state.view === "overview") { if (state.renders) await serial(() => D.renderOverview(ov)); } else if (changed) await render();
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
    if (state.view === "adapter") return guard(main, () => D.renderAdapter(main, state.adapter));
    if (!state.run) {
      main.replaceChildren(h("section", { class: "empty" }, h("h2", { text: "No runs yet" }),
        h("p", { text: "Start one with `populora train --dashboard` and this page follows it." })));
      return;
    }
    const views = { overview: () => D.renderOverview(state.overview, true), leaderboard: () => D.renderLeaderboard(main),
      ratings: () => D.renderRatings(main), lineage: () => D.renderLineage(main), payoff: () => D.renderPayoff(main),
      dynamics: () => D.renderDynamics(main),
      problems: () => D.renderProblems(main) };
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

  Object.assign(D, { render, renderNav });
})();
