// PopuLoRA league dashboard: the lineage tree (a DAG: crossover children have two parents) and a node's history.
"use strict";

(() => {
  const D = window.dashboard;
  const { h, s, $, enc, isNum, fmt, roleBadge, adapterLink, panel, state, api, runPath, ROLE_ORDER, chart } = D;

  // -- lineage tree (a DAG: crossover children have two parents)
  const NODE_W = 190, NODE_H = 36, COL_W = 300, ROW_H = 52, PAD = 30;
  async function renderLineage(main) {
    const data = await api(runPath("lineage"));
    const cols = [...new Set(data.nodes.map((n) => n.created_step))].sort((a, b) => a - b);
    const byCol = new Map(cols.map((c) => [c, []]));
    for (const n of data.nodes) byCol.get(n.created_step).push(n);
    const pos = new Map();
    const parentsOf = new Map();
    for (const e of data.edges) {
      if (!parentsOf.has(e.child_id)) parentsOf.set(e.child_id, []);
      parentsOf.get(e.child_id).push(e.parent_id);
    }
    let height = 0;
    cols.forEach((c, ci) => {
      const nodes = byCol.get(c);
      const meanY = (n) => {
        const ys = (parentsOf.get(n.adapter_id) || []).map((p) => pos.has(p) ? pos.get(p).y : null).filter(isNum);
        return ys.length ? ys.reduce((a, b) => a + b, 0) / ys.length : null;
      };
      nodes.sort((a, b) => (ROLE_ORDER[a.role] - ROLE_ORDER[b.role]) || ((meanY(a) ?? 0) - (meanY(b) ?? 0)) || (a.adapter_id < b.adapter_id ? -1 : 1));
      nodes.forEach((n, i) => pos.set(n.adapter_id, { x: PAD + ci * COL_W, y: PAD + 24 + i * ROW_H }));
      height = Math.max(height, PAD + 24 + nodes.length * ROW_H);
    });
    const width = PAD * 2 + Math.max(1, cols.length - 1) * COL_W + NODE_W;
    const graph = s("svg", { id: "lineage-svg", width, height: height + PAD, viewBox: `0 0 ${width} ${height + PAD}`, role: "img", "aria-label": "lineage tree" },
      s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 8 8", refX: 7, refY: 4, markerWidth: 7, markerHeight: 7, orient: "auto" },
        s("path", { d: "M0,0 L8,4 L0,8 z", class: "arrow-head" }))));
    cols.forEach((c, ci) => graph.append(s("text", { x: PAD + ci * COL_W, y: PAD, class: "col-label" }, c === 0 ? "initial members" : `born at step ${c}`)));
    // Each child's incoming edges enter at their own height on its left side, their labels just before it, so
    // that a label never sits on a node of a column the edge passes.
    const incoming = new Map();
    for (const e of data.edges) incoming.set(e.child_id, (incoming.get(e.child_id) || []).concat([e]));
    for (const e of data.edges) {
      const a = pos.get(e.parent_id), b = pos.get(e.child_id);
      if (!a || !b) continue;
      const siblings = incoming.get(e.child_id);
      const k = siblings.indexOf(e);
      const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + (NODE_H * (k + 1)) / (siblings.length + 1);
      const mx = x2 - Math.min(70, (x2 - x1) / 2);
      // An edge that skips columns runs along the gap below its parent's row (rows line up across columns, so the
      // gap holds no node) and turns to its child just before the child's column.
      const yg = a.y + NODE_H + (ROW_H - NODE_H) / 2;
      const d = b.x - a.x > COL_W * 1.5
        ? `M${x1},${y1} C${x1 + 28},${y1} ${x1 + 28},${yg} ${x1 + 56},${yg} L${x2 - 110},${yg} C${x2 - 55},${yg} ${x2 - 55},${y2} ${x2 - 4},${y2}`
        : `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 4},${y2}`;
      const label = `${e.operator}${isNum(e.epsilon) ? ` ε=${fmt(e.epsilon, 3)}` : ""}${isNum(e.relative_change) ? ` Δ=${fmt(e.relative_change)}` : ""}`;
      graph.append(s("g", { class: "lineage-edge", "data-parent": e.parent_id, "data-child": e.child_id },
        s("path", { d, "marker-end": "url(#arrow)" }),
        s("text", { x: x2 - 8, y: y2 - 5 - 11 * (siblings.length - 1 - k), class: "edge-label", "text-anchor": "end" }, label),
        s("title", {}, `${e.parent_id} → ${e.child_id}: ${label} at step ${e.step}`)));
    }
    for (const n of data.nodes) {
      const p = pos.get(n.adapter_id);
      const label = n.adapter_id.length > 24 ? `${n.adapter_id.slice(0, 23)}…` : n.adapter_id;
      const g = s("g", { class: `lineage-node role-${n.role} ${n.status} ${state.lineageSelected === n.adapter_id ? "selected" : ""}`,
        "data-adapter": n.adapter_id, transform: `translate(${p.x},${p.y})`, tabindex: 0,
        on: { click: () => selectNode(n, data), keydown: (ev) => { if (ev.key === "Enter") selectNode(n, data); } } },
      s("rect", { width: NODE_W, height: NODE_H, rx: 7 }),
      s("text", { x: 10, y: 15, class: "node-id" }, label),
      s("text", { x: 10, y: 29, class: "node-sub" }, `${n.role} · r ${n.lora_rank ?? "–"} · μ−kσ ${fmt(n.conservative_skill, 1)}${n.status === "retired" ? ` · retired at ${n.retired_step}` : ""}`),
      s("title", {}, n.adapter_id));
      graph.append(g);
    }
    const side = h("aside", { id: "lineage-detail", class: "side" }, h("p", { class: "note", text: "Click a node for its history." }));
    main.replaceChildren(panel(`Lineage · ${data.nodes.length} adapters · ${data.edges.length} parent links`,
      h("div", { class: "legend" }, roleBadge("teacher"), " ", roleBadge("student"), " ", roleBadge("both"),
        h("span", { class: "note", text: " faded with a dashed border: retired; edges: operator, the ε it applied and Δ, the child's relative change from its first parent" })),
      h("div", { class: "lineage-wrap" }, h("div", { class: "scroll lineage-scroll" }, graph), side)));
    const keep = data.nodes.find((n) => n.adapter_id === state.lineageSelected);
    if (keep) await selectNode(keep, data);
  }
  async function selectNode(node, data) {
    state.lineageSelected = node.adapter_id;
    for (const g of document.querySelectorAll(".lineage-node")) g.classList.toggle("selected", g.getAttribute("data-adapter") === node.adapter_id);
    const side = $("#lineage-detail");
    if (!side) return;
    const children = data.edges.filter((e) => e.parent_id === node.adapter_id);
    const parents = data.edges.filter((e) => e.child_id === node.adapter_id);
    const box = h("div", { class: "chart small", id: "lineage-history" });
    side.replaceChildren(h("h3", {}, adapterLink(node.adapter_id)),
      h("dl", { class: "facts" },
        h("dt", { text: "role" }), h("dd", {}, roleBadge(node.role)), h("dt", { text: "status" }), h("dd", { text: node.status }),
        h("dt", { text: "LoRA rank" }), h("dd", { id: "lineage-rank", text: node.lora_rank ?? "–" }),
        h("dt", { text: "μ / σ" }), h("dd", { text: `${fmt(node.mu)} / ${fmt(node.sigma)}` }),
        h("dt", { text: "μ − kσ" }), h("dd", { text: fmt(node.conservative_skill) }),
        h("dt", { text: "born" }), h("dd", { text: `step ${node.created_step}${node.operator ? ` by ${node.operator}` : ""}` }),
        h("dt", { text: "retired" }), h("dd", { text: node.retired_step === null ? "–" : `step ${node.retired_step}` }),
        h("dt", { text: "parents" }), h("dd", {}, parents.length ? parents.map((e, i) => [i ? ", " : "", adapterLink(e.parent_id)]) : "–"),
        h("dt", { text: "children" }), h("dd", {}, children.length ? children.map((e, i) => [i ? ", " : "", adapterLink(e.child_id), ` (${e.operator})`]) : "–"),
        h("dt", { text: "relative change" }), h("dd", { text: isNum(node.relative_change) ? `${fmt(node.relative_change, 3)} from its first parent (|ΔW′ − ΔW| / |ΔW|)` : "–" }),
        h("dt", { text: "params" }), h("dd", { text: Object.keys(node.params).length ? JSON.stringify(node.params) : "–" })),
      h("h4", { text: "rating history" }), box);
    const hist = await api(`/v1/adapters/${enc(node.adapter_id)}/history`);
    if (state.charts.lineageHistory) state.charts.lineageHistory.destroy();
    if (!hist.history.length || !document.body.contains(box)) return;
    chart("lineageHistory", box, { height: 180, series: [{ label: "step" },
      { label: "μ", stroke: "#3a7be4", width: 2 }, { label: "μ−kσ", stroke: "#e4793a", width: 2 }],
    axes: [{ label: "step" }, {}] }, [hist.history.map((r) => r.step), hist.history.map((r) => r.mu),
      hist.history.map((r) => r.mu - data.k * r.sigma)]);
  }

  Object.assign(D, { renderLineage });
})();
