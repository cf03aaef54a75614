// PopuLoRA league dashboard: the run's training dynamics against the compute charged to its budget (spec 11, 14):
// complexity of valid proposals, coverage, the teachers' behavioural and the members' weight diversity, and each
// student's solve rate with its oscillation.
"use strict";

(() => {
  const D = window.dashboard;
  const { h, isNum, fmt, int, panel, table, api, runPath, chart, colorOf } = D;

  const COMPLEXITY = [["ast_depth", "AST depth"], ["cyclomatic", "cyclomatic"], ["lines_of_code", "lines of code"]];

  function flopsText(x) { return isNum(x) ? (x === 0 ? "0" : x.toExponential(1)) : "–"; }

  async function renderDynamics(main) {
    const [d, st] = await Promise.all([api(runPath("dynamics")), api(runPath("steps"))]);
    const byFlops = d.flops.some((f) => f > 0); // a run recorded before FLOPs were counted: by step
    const xs = byFlops ? d.flops : d.steps;
    const xAt = new Map(d.steps.map((step, i) => [step, xs[i]]));
    const evolved = st.steps.filter((s) => (s.evolution || []).length).map((s) => xAt.get(s.step)).filter(isNum);
    // FLOPs on the axis in units of a power of ten, so that its ticks stay short and apart
    const unit = byFlops ? 10 ** Math.floor(Math.log10(Math.max(...xs.filter(isNum), 1))) : 1;
    const xAxis = byFlops
      ? { label: `FLOPs charged to the budget (× ${flopsText(unit)})`, incrs: undefined, space: 60,
        values: (u, vals) => vals.map((v) => (isNum(v) ? String(+(v / unit).toFixed(2)) : "")) }
      : { label: "step" };
    const x = { label: byFlops ? "FLOPs" : "step", value: (u, v) => (byFlops ? flopsText(v) : int(v)) };
    const line = (label, i, extra) => ({ label, stroke: colorOf(i), width: 2, spanGaps: true, points: { size: 5 }, ...extra });
    const last = (col) => { for (let i = col.length - 1; i >= 0; i -= 1) if (isNum(col[i])) return col[i]; return null; };
    const boxes = {};
    const box = (id) => (boxes[id] = h("div", { id, class: "chart" }));
    const cov = d.coverage;
    const weights = new Map(d.weight_diversity.map((w) => [w.step, w]));
    const students = Object.keys(d.solve_rate).sort();
    const lastCov = cov.length ? cov[cov.length - 1] : null;
    main.replaceChildren(
      panel(`Dynamics · ${d.steps.length} steps · against ${byFlops ? "the FLOPs charged to the budget (spec 14)" : "steps"}`,
        h("p", { class: "note", text: "What the comparison measures per step (spec 11). Dashed verticals: evolution steps. Click a legend entry to hide it." }),
        h("div", { class: "cards" },
          D.card("compute", flopsText(d.flops[d.flops.length - 1]), "FLOPs charged so far", "dyn-flops"),
          D.card("program shapes", lastCov ? int(lastCov.distinct_shapes) : "–", "distinct, ever proposed", "dyn-shapes"),
          D.card("AST node types", lastCov ? int(lastCov.node_types) : "–", "used so far", "dyn-node-types"),
          D.card("behavioural diversity", fmt(last(d.behavioural_diversity)), "latest, 1 − shape overlap", "dyn-behaviour"))),
      panel("Complexity of valid proposals · mean per step", box("dyn-complexity")),
      panel("Coverage · cumulative", h("p", { class: "note", text: "Distinct program shapes (ASTs with names and constants erased) and AST node types ever proposed." }), box("dyn-coverage")),
      panel("Diversity", h("p", { class: "note", text: "Behavioural: 1 − mean Jaccard overlap of the teachers' shapes over the last 3 steps. Weights: mean pairwise cosine and relative Frobenius distance of the members' updates ΔW, from the LoRA factors." }), box("dyn-diversity")),
      panel("Students' solve rate", box("dyn-solve"),
        table(["student", "steps with a rate", "oscillation"], students.map((s) => h("tr", {},
          h("td", {}, D.adapterLink(s)), h("td", { text: d.solve_rate[s].filter(isNum).length }),
          h("td", { text: fmt(d.oscillation[s]) }))), { id: "dyn-oscillation" }),
        h("p", { class: "note", text: "Oscillation: sign changes of the solve rate's first difference over (steps − 2); 0 steady, 1 alternating every step." })));
    if (!d.steps.length) {
      for (const b of Object.values(boxes)) b.replaceChildren(h("p", { class: "note", text: "no steps yet" }));
      return;
    }
    const opts = (series, y, range) => ({ series: [x, ...series], height: 260, axes: [xAxis, { label: y }],
      scales: range ? { y: { range } } : undefined });
    chart("dyn-complexity", boxes["dyn-complexity"], opts(COMPLEXITY.map(([, l], i) => line(l, i)), "mean"),
      [xs, ...COMPLEXITY.map(([k]) => d.complexity[k] || xs.map(() => null))], evolved);
    chart("dyn-coverage", boxes["dyn-coverage"], opts([line("program shapes", 0), line("AST node types", 1)], "distinct so far"),
      [xs, cov.map((c) => c.distinct_shapes), cov.map((c) => c.node_types)], evolved);
    const w = (k) => d.steps.map((step) => (weights.has(step) ? weights.get(step)[k] : null));
    chart("dyn-diversity", boxes["dyn-diversity"], opts([line("behavioural", 0), line("weights: cosine", 1),
      line("weights: relative distance", 2)], "diversity", [-1, 2]), [xs, d.behavioural_diversity, w("cosine"), w("distance")], evolved);
    if (!students.length) { boxes["dyn-solve"].replaceChildren(h("p", { class: "note", text: "no answers yet" })); return; }
    chart("dyn-solve", boxes["dyn-solve"], opts(students.map((s, i) => line(s, i, { dash: [6, 3] })), "solve rate", [0, 1]),
      [xs, ...students.map((s) => d.solve_rate[s])], evolved);
  }

  Object.assign(D, { renderDynamics });
})();
