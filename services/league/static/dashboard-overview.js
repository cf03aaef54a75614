// PopuLoRA league dashboard: the overview (status cards, phase times, proposals, the per-step chart).
"use strict";

(() => {
  const D = window.dashboard;
  const {
    h, $, isNum, fmt, pct, int, secs, badge, roleBadge, adapterLink, panel, card, table, state, api, runPath,
    TASK_COLORS, chart
  } = D;

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
        `generated · ${int(comp.trained_tokens)} trained · ${int(comp.sandbox_jobs)} sandbox jobs` +
        (isNum(comp.budget_flops) ? ` · ${comp.budget_flops.toExponential(1)} FLOPs charged to the budget` : ""), "ov-compute"),
      card("adapters", `${int(ov.league.active)} active`, `${int(ov.league.adapters)} in all`, "ov-adapters"));
    const parts = [cards];
    if (ov.error) {
      parts.push(h("div", { class: "error-box" }, `step ${ov.error.step}, ${ov.error.phase} failed: `,
        h("code", { text: ov.error.error })));
    }
    if (!ov.journal) {
      parts.push(h("p", { class: "note", text: "The coordinator has recorded no progress for this run (the league " +
        "alone, or a run recorded before league migration 0007: `populora train --resume` records it): progress, " +
        "problems and samples stay empty." }));
    }
    parts.push(h("div", { class: "grid2" },
      panel(latest ? `Step ${latest.step}: seconds per phase` : "Seconds per phase", phaseBars(latest)),
      panel(measured ? `Step ${measured.step}: proposals and answers` : "Proposals", proposalsTable(measured))));
    parts.push(h("div", { class: "grid2" },
      panel("Solve rate (solid) and valid-proposal rate (dashed) per task type, by step", box),
      panel("Last evolution events", eventsList(ov.evolution))));
    parts.push(panel(latest ? `Step ${latest.step}: each phase against the machine's peak` :
      "Each phase against the machine's peak", D.efficiencyPanel(latest)));
    const tlBox = (!fresh && state.timelineBox) || h("div", { id: "ov-timeline-box" });
    parts.push(panel("Timeline: each step's phases per service, and idle time", tlBox));
    main.replaceChildren(...parts);
    main.dataset.revision = ov.revision;
    state.stepsBox = box;
    state.timelineBox = tlBox;
    if (fresh || box.dataset.revision !== ov.revision) {
      box.dataset.revision = ov.revision;
      const data = await api(runPath("steps"));
      if (state.charts.steps) { state.charts.steps.destroy(); delete state.charts.steps; }
      box.replaceChildren();
      stepsChart(box, data.steps);
      tlBox.replaceChildren(D.timelinePanel(data.steps));
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

  Object.assign(D, { renderOverview });
})();
