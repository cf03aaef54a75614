// PopuLoRA league dashboard: the rating curves (μ − kσ per adapter, by step) and the evolution events.
"use strict";

(() => {
  const D = window.dashboard;
  const { h, isNum, fmt, roleBadge, badge, adapterLink, panel, api, runPath, ROLE_ORDER, chart, colorOf } = D;

  // -- rating curves
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

  Object.assign(D, { renderRatings });
})();
