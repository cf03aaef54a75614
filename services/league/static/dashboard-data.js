// PopuLoRA league dashboard: what the views share: settings, the page's state, and the REST API's client.
"use strict";

(() => {
  const D = window.dashboard;
  const { enc } = D;

  const POLL_MS = Math.max(500, Number(new URLSearchParams(location.search).get("poll")) || 2000);
  const VIEWS = [
    ["overview", "Overview"], ["leaderboard", "Leaderboard"], ["ratings", "Rating curves"],
    ["lineage", "Lineage"], ["payoff", "Payoff"], ["dynamics", "Dynamics"], ["problems", "Problems"],
  ];
  const ROLE_ORDER = { teacher: 0, both: 1, student: 2 };
  const PALETTE = ["#e4793a", "#3a7be4", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#7f7f7f", "#1f3f8f", "#b8860b", "#006d5b", "#a0325a", "#5a6fd0", "#c06000"];
  const STEP_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000]; // steps are integers
  const TASK_COLORS = { code_i: "#1f77b4", code_o: "#d62728", code_f: "#2ca02c", math_w: "#9467bd" };

  const state = {
    runs: [], run: null, view: "overview", adapter: null, revision: null, overview: null, charts: {},
    sort: { key: "rank", dir: 1 }, filters: { role: "", status: "" }, lineageSelected: null,
    problems: { step: null, taskType: "", invalid: false }, evalsPath: null, polls: 0, renders: 0,
  };
  window.populora = state; // read by the browser tests and handy in a console


  // ---- data --------------------------------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, detail) { super(detail); this.status = status; }
  }
  // A read that takes longer is abandoned with an error, so that one stalled request cannot hold the views'
  // render queue (dashboard.js renders one view after another) and freeze the page; the next poll asks again.
  const API_TIMEOUT_MS = 20000;
  async function api(path) {
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), API_TIMEOUT_MS);
    let resp;
    try {
      resp = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store", signal: abort.signal });
    } catch (e) {
      if (abort.signal.aborted) throw new ApiError(0, `the league did not answer ${path} in ${API_TIMEOUT_MS / 1000} s`);
      throw e;
    } finally {
      clearTimeout(timer);
    }
    if (!resp.ok) {
      let detail = `${resp.status} ${resp.statusText}`;
      try { detail = (await resp.json()).detail || detail; } catch (_) { /* not JSON */ }
      throw new ApiError(resp.status, typeof detail === "string" ? detail : JSON.stringify(detail));
    }
    return resp.json();
  }
  const runPath = (suffix) => `/v1/runs/${enc(state.run)}/${suffix}`;

  Object.assign(D, { POLL_MS, VIEWS, ROLE_ORDER, PALETTE, STEP_INCRS, TASK_COLORS, state, ApiError, api, runPath });
})();
