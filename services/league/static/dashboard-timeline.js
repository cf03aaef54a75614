// PopuLoRA league dashboard: the timeline view of the overview: each step's phases per service on one time axis
// (the last steps the coordinator summarised, from /v1/runs/{run}/steps), coloured by step, so overlapped steps
// (loop.max_staleness >= 1) show a step's games beside the previous update; and each step's idle fraction of the
// trainer and of inference.
"use strict";

(() => {
  const D = window.dashboard;
  const { h, isNum, pct, secs } = D;
  const SERVICES = ["inference", "sandbox", "league", "trainer", "evolver"];
  const SHOWN = 8; // steps drawn: more would make the bars too thin to read
  const STEP_COLORS = ["#5b8ee8", "#e8a33a", "#4caf50", "#d95f5f", "#9467bd", "#8c6d31", "#17becf", "#e377c2"];

  function timelinePanel(steps) {
    const shown = (steps || []).filter((s) => s.timeline && s.timeline.length).slice(-SHOWN);
    if (!shown.length) return h("p", { class: "note", text: "no timeline recorded yet" });
    const spans = shown.flatMap((s) => s.timeline).filter((x) => SERVICES.includes(x.service));
    const t0 = Math.min(...spans.map((x) => x.start));
    const t1 = Math.max(...spans.map((x) => x.end));
    const width = Math.max(t1 - t0, 1e-6);
    const rows = SERVICES.filter((svc) => spans.some((x) => x.service === svc)).map((svc) => h("div",
      { class: "tl-row" }, h("span", { class: "tl-label", text: svc }),
      h("span", { class: "tl-track" }, spans.filter((x) => x.service === svc).map((x) => bar(x, t0, width)))));
    const idle = h("table", { class: "compact", id: "ov-idle" },
      h("tr", {}, h("th", { text: "step" }), h("th", { text: "window" }), h("th", { text: "trainer idle" }),
        h("th", { text: "inference idle" }), h("th", { text: "staleness max" })),
      shown.map((s) => h("tr", {}, h("td", { class: "num", text: s.step }),
        h("td", { class: "num", text: isNum(s.window_s) ? secs(s.window_s) : "–" }),
        h("td", { class: "num", text: idleText(s, "trainer") }),
        h("td", { class: "num", text: idleText(s, "inference") }),
        h("td", { class: "num", text: s.staleness ? s.staleness.max : "–" }))));
    return h("div", { id: "ov-timeline" }, h("div", { class: "tl" }, rows),
      h("p", { class: "note", text: `${secs(width)} shown; a bar is one phase, its colour its step (hover: step, ` +
        "phase, seconds)" }), idle);
  }
  function bar(x, t0, width) {
    const el = h("span", { class: "tl-bar", "data-step": x.step, "data-phase": x.phase,
      title: `step ${x.step}: ${x.phase}, ${secs(x.end - x.start)}`, text: x.phase });
    el.style.left = `${(100 * (x.start - t0) / width).toFixed(2)}%`;
    el.style.width = `${Math.max(0.3, 100 * (x.end - x.start) / width).toFixed(2)}%`;
    el.style.background = STEP_COLORS[x.step % STEP_COLORS.length];
    return el;
  }
  const idleText = (s, svc) => (s.idle_fraction && isNum(s.idle_fraction[svc]) ? pct(s.idle_fraction[svc]) : "–");

  Object.assign(D, { timelinePanel });
})();
