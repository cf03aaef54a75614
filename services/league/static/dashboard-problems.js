// PopuLoRA league dashboard: the problem explorer (a step's proposals, valid or rejected).
"use strict";

(() => {
  const D = window.dashboard;
  const { h, isNum, fmt, badge, adapterLink, panel, table, state, api, runPath } = D;

  // -- problem explorer
  async function renderProblems(main) {
    const ps = state.problems;
    const query = new URLSearchParams();
    if (ps.step !== null) query.set("step", ps.step);
    if (ps.invalid) query.set("include_invalid", "true");
    const data = await api(runPath(`tasks?${query}`));
    const tasks = data.tasks.filter((t) => !ps.taskType || t.task_type === ps.taskType);
    const stepSel = h("select", { id: "problem-step", on: { change: (e) => { ps.step = Number(e.target.value); D.render(); } } },
      data.steps.map((st) => { const o = h("option", { value: st.step, text: `step ${st.step} · ${st.valid}/${st.proposals} valid` }); if (st.step === data.step) o.selected = true; return o; }));
    const typeSel = h("select", { id: "problem-type", on: { change: (e) => { ps.taskType = e.target.value; D.render(); } } },
      [["", "all types"], ["code_i", "code_i"], ["code_o", "code_o"], ["code_f", "code_f"], ["math_w", "math_w"]].map(([v, t]) => { const o = h("option", { value: v, text: t }); if (ps.taskType === v) o.selected = true; return o; }));
    const inv = h("input", { type: "checkbox", id: "problem-invalid", on: { change: (e) => { ps.invalid = e.target.checked; D.render(); } } });
    inv.checked = ps.invalid;
    main.replaceChildren(panel(`Problems · step ${data.step} · ${tasks.length} shown`,
      h("div", { class: "toolbar" }, stepSel, typeSel, h("label", {}, inv, " include rejected proposals")),
      tasks.length ? h("div", { class: "tasks", id: "tasks" }, tasks.map(taskCard)) : h("p", { class: "note", text: "no task at this step" })));
  }
  function taskCard(t) {
    const cx = Object.entries(t.complexity || {}).filter(([, v]) => isNum(v)).map(([k, v]) => badge(`${k} ${fmt(v, k === "lines_of_code" ? 0 : 1)}`, "chip"));
    return h("article", { class: `task ${t.valid ? "valid" : "invalid"}`, "data-task": t.id },
      h("header", {}, badge(t.task_type, "tt"), " ", t.valid ? badge("valid", "ok") : badge(t.reason || "pending", "bad"), " ",
        h("span", { class: "who" }, "by ", adapterLink(t.teacher_id), t.student_id ? [" → ", adapterLink(t.student_id)] : ""),
        h("span", { class: "rho", text: t.rho === null ? "" : `solve rate ${fmt(t.rho, 2)}` }), ...cx),
      t.valid ? [
        h("pre", { class: "code program", text: t.program }),
        t.inputs.length ? table(["input", "output"], t.inputs.map((x, i) => h("tr", {}, h("td", {}, h("code", { text: x })), h("td", {}, h("code", { text: t.outputs[i] ?? "" })))), { class: "io compact" }) : null,
        t.message ? h("p", { class: "message", text: t.message }) : null,
      ] : [t.detail ? h("p", { class: "note", text: t.detail }) : null],
      h("details", {}, h("summary", { text: "the teacher's whole answer" }), h("pre", { class: "code raw", text: t.text })));
  }

  Object.assign(D, { renderProblems });
})();
