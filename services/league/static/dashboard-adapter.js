// PopuLoRA league dashboard: an adapter's page (rating, versions, matches, samples).
"use strict";

(() => {
  const D = window.dashboard;
  const { h, enc, fmt, badge, roleBadge, adapterLink, panel, card, table, state, api, chart } = D;

  // -- adapter page
  async function renderAdapter(main, id) {
    const page = await api(`/v1/adapters/${enc(id)}`);
    const a = page.adapter;
    if (a.run_id !== state.run) { state.run = a.run_id; D.renderNav(); }
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
        card("LoRA rank", String(a.rank || "–"), "r of ΔW = (α / r)·B·A", "adapter-rank"),
        card("born", `step ${a.created_step}`, a.operator ? `by ${a.operator} from ${a.parents.join(" + ")}` : "initial member"),
        card("retired", a.retired_step === null ? "–" : `step ${a.retired_step}`, ""),
        card("versions", String(page.versions.length || "–"), page.versions.length ? `latest v${page.versions[page.versions.length - 1].version}` : "")),
      h("div", { class: "grid2" },
        panel("Stored version", h("p", {}, "path ", h("code", { id: "store-path", text: page.store_path || "(not recorded)" })),
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
          h("details", {}, h("summary", { text: "the whole answer" }), h("pre", { class: "code raw", text: p.text })))) : h("p", { class: "note", text: "none (not a teacher, or nothing recorded)" }))),
        panel(`Answers (${samples.answers.length})`, h("div", { id: "sample-answers" }, samples.answers.length ? samples.answers.map((x) => h("article", { class: "sample" },
          h("header", {}, h("span", { class: "ev-step", text: `step ${x.step}` }), " ", badge(x.task_type || "task", "tt"), " ",
            badge(x.outcome || "unchecked", x.outcome === "correct" ? "ok" : "bad")),
          h("pre", { class: "code raw", text: x.text }),
          h("details", {}, h("summary", { text: "the task" }), h("pre", { class: "code program", text: x.program }),
            x.inputs.length ? table(["input", "gold output"], x.inputs.map((v, i) => h("tr", {}, h("td", {}, h("code", { text: v })), h("td", {}, h("code", { text: x.outputs[i] ?? "" })))), { class: "io compact" }) : null))) : h("p", { class: "note", text: "none (not a student, or nothing recorded)" })))));
    if (hist.history.length) {
      chart("adapter", box, { height: 260, series: [{ label: "step" }, { label: "μ", stroke: "#3a7be4", width: 2 },
        { label: "μ − kσ", stroke: "#e4793a", width: 2 }], axes: [{ label: "step" }, {}] },
      [hist.history.map((r) => r.step), hist.history.map((r) => r.mu), hist.history.map((r) => r.mu - k * r.sigma)]);
    } else box.replaceChildren(h("p", { class: "note", text: "no rating yet" }));
  }

  Object.assign(D, { renderAdapter });
})();
