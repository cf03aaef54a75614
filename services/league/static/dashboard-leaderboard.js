// PopuLoRA league dashboard: the leaderboard (sortable, filtered, with held-out evaluation scores).
"use strict";

(() => {
  const D = window.dashboard;
  const { h, isNum, fmt, badge, roleBadge, adapterLink, panel, table, state, api, runPath } = D;

  // -- leaderboard
  const LB_COLUMNS = [
    ["rank", "#", "num"], ["adapter_id", "adapter", ""], ["role", "role", ""], ["lora_rank", "r", "num"],
    ["status", "status", ""],
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
      "data-key": k, on: { click: () => { state.sort = { key: k, dir: state.sort.key === k ? -state.sort.dir : (cls ? -1 : 1) }; D.render(); } },
    }, label)).concat(benchmarks.map((b) => h("th", { class: "num", title: `latest pass@1 on ${b}`, text: `${b} pass@1` })));
    const evalOf = (id, b) => {
      const hits = (evals || []).filter((e) => e.adapter_id === id && e.benchmark === b);
      return hits.length ? hits[hits.length - 1].score : null;
    };
    const body = rows.map((r) => h("tr", { class: `lb-row ${r.status}`, "data-adapter": r.adapter_id },
      h("td", { class: "num", text: r.rank }), h("td", {}, adapterLink(r.adapter_id)), h("td", {}, roleBadge(r.role)),
      h("td", { class: "num lora-rank", title: "LoRA rank", text: r.lora_rank ?? "–" }),
      h("td", {}, badge(r.status, r.status)), h("td", { class: "num", text: fmt(r.mu) }),
      h("td", { class: "num", text: fmt(r.sigma) }), h("td", { class: "num strong", text: fmt(r.conservative_skill) }),
      h("td", { class: "num", text: r.wins }), h("td", { class: "num", text: r.losses }),
      h("td", { class: "num", text: r.draws }), h("td", { class: "num", text: r.matches }),
      h("td", { text: r.operator || "–" }), h("td", {}, r.parents.length ? r.parents.map((p, i) => [i ? ", " : "", adapterLink(p)]) : "–"),
      h("td", { class: "num", text: r.created_step }), h("td", { class: "num", text: r.retired_step ?? "–" }),
      benchmarks.map((b) => h("td", { class: "num", text: fmt(evalOf(r.adapter_id, b), 3) }))));
    const select = (label, key, options) => h("label", {}, `${label} `, h("select", {
      id: `filter-${key}`, on: { change: (e) => { state.filters[key] = e.target.value; D.render(); } },
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

  Object.assign(D, { renderLeaderboard });
})();
