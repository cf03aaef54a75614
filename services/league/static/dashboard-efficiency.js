// PopuLoRA league dashboard: where a step's time goes against what the machine could do (the step summary's
// `efficiency`, coordinator/record/efficiency.py): per computing phase and for the whole step, the seconds it took, the
// least the roofline allows its work, its useful executed FLOPs (the products the work needs, counted from the
// model's shapes) per second and over the measured peak of their precision (mfu), and the share of the roofline it
// reached, drawn as a bar.
"use strict";

(() => {
  const D = window.dashboard;
  const { h, isNum, fmt, pct, secs, table } = D;
  const ORDER = ["propose", "solve", "update"];

  function efficiencyPanel(step) {
    const e = step && step.efficiency;
    if (!e) {
      return h("p", { class: "note", text: "not measured (a distributed run, or no training step yet)" });
    }
    const names = ORDER.filter((p) => e.phases[p]);
    const rows = [...names.map((p) => [p, e.phases[p]]), ["step", e.step]].map(([name, x]) => h("tr", {},
      h("td", { text: name }), h("td", { class: "num", text: x.threads }),
      h("td", { class: "num", text: secs(x.seconds) }), h("td", { class: "num", text: secs(x.least_seconds) }),
      h("td", { class: "num", text: fmt(x.gflops_per_s, 1) }), h("td", { class: "num", text: fmt(x.mfu, 2) }),
      h("td", { class: "eff-cell" }, fill(x.roofline_fraction), h("span", { text: pct(x.roofline_fraction) }))));
    const peaks = Object.entries(e.peaks || {}).map(([t, p]) =>
      `${t} thread${t === "1" ? "" : "s"}: ${fmt(p.gflops, 0)} GFLOP/s, ${fmt(p.bandwidth_gb_s, 1)} GB/s`).join("; ");
    return h("div", { id: "ov-efficiency" },
      table(["phase", "threads", "seconds", "least", "GFLOP/s", "mfu", "of the roofline"], rows,
        { class: "compact", id: "ov-efficiency-table" }),
      h("p", { class: "note", text: `against the best this machine has reached in ${e.dtype} (${peaks}); least: ` +
        "the prompt passes and updates at that peak, each decode step at the peak or reading every weight and its KV " +
        "cache once; GFLOP/s and mfu count the products the work needs, not the charged 2N and 6N" }));
  }
  function fill(frac) {
    const track = h("span", { class: "bar-track eff-track" });
    const bar = h("span", { class: "bar-fill" });
    bar.style.width = `${isNum(frac) ? Math.max(1, Math.min(100, 100 * frac)).toFixed(1) : 0}%`;
    track.append(bar);
    return track;
  }

  Object.assign(D, { efficiencyPanel });
})();
