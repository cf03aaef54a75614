// PopuLoRA league dashboard: the payoff heatmap (teacher × student solve rate).
"use strict";

(() => {
  const D = window.dashboard;
  const { h, fmt, adapterLink, panel, table, api, runPath } = D;

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

  Object.assign(D, { renderPayoff });
})();
