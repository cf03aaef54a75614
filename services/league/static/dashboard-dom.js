// PopuLoRA league dashboard: the DOM helpers (strings become text nodes, never markup), formatting, and the
// page's small building blocks (badges, links, panels, cards, tables).
// The dashboard's scripts share the namespace window.dashboard, made here: each adds what it defines and reads
// what the scripts before it added (index.html loads them in order); what dashboard.js, the last, adds (render,
// renderNav) the views read from the namespace when they call it.
// Every value from the server is put into the page as text (textContent, attributes, canvas text), never as HTML:
// adapter ids, programs and model output are whatever a model or a client wrote.
"use strict";

window.dashboard = {};

(() => {
  const D = window.dashboard;

  // ---- DOM helpers: strings become text nodes, never markup ---------------------------------------------------------
  function h(tag, props, ...children) {
    const node = document.createElement(tag);
    setProps(node, props);
    append(node, children);
    return node;
  }
  const SVGNS = "http://www.w3.org/2000/svg";
  function s(tag, props, ...children) {
    const node = document.createElementNS(SVGNS, tag);
    setProps(node, props);
    append(node, children);
    return node;
  }
  function setProps(node, props) {
    for (const [k, v] of Object.entries(props || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "on") for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
      else if (k === "text") node.textContent = String(v);
      else node.setAttribute(k, String(v));
    }
  }
  function append(node, children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }
  const $ = (sel) => document.querySelector(sel);
  const enc = encodeURIComponent;

  // ---- formatting ----------------------------------------------------------------------------------------------------
  const isNum = (x) => typeof x === "number" && Number.isFinite(x);
  const fmt = (x, d = 2) => (isNum(x) ? x.toFixed(d) : "–");
  const pct = (x) => (isNum(x) ? `${(100 * x).toFixed(0)}%` : "–");
  const int = (x) => (isNum(x) ? Math.round(x).toLocaleString("en-US") : "–");
  function secs(x) {
    if (!isNum(x)) return "–";
    if (x < 60) return `${x.toFixed(1)} s`;
    const m = Math.floor(x / 60);
    return m < 60 ? `${m} min ${Math.round(x - 60 * m)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
  }
  function ago(t, now) {
    if (!isNum(t)) return "–";
    return `${secs(Math.max(0, now - t))} ago`;
  }
  const badge = (text, cls) => h("span", { class: `badge ${cls || ""}`, text });
  const roleBadge = (role) => badge(role, `role-${["teacher", "student", "both"].includes(role) ? role : "other"}`);
  const adapterLink = (id) => h("a", { href: `#/adapter/${enc(id)}`, class: "adapter-link", text: id });
  function panel(title, ...children) {
    return h("section", { class: "panel" }, title ? h("h2", { text: title }) : null, ...children);
  }
  function card(label, value, sub, id) {
    return h("div", { class: "card", id }, h("div", { class: "card-label", text: label }),
      h("div", { class: "card-value", text: value }), sub ? h("div", { class: "card-sub", text: sub }) : null);
  }
  function table(head, rows, attrs) {
    return h("table", attrs || {}, h("thead", {}, h("tr", {}, head.map((c) => (c instanceof Node ? c : h("th", { text: c }))))),
      h("tbody", {}, rows));
  }

  Object.assign(D, { h, s, $, enc, isNum, fmt, pct, int, secs, ago, badge, roleBadge, adapterLink, panel, card, table });
})();
