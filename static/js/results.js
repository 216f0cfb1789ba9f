// Results of a one-shot query: a paged, sortable table (SELECT), a boolean
// (ASK), Turtle text (CONSTRUCT / DESCRIBE), and downloads.

import { Shortener, compareTerms, isNumericTerm, termText } from "./sparql.js";

export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) e.append(c);
  return e;
}

/**
 * Re-render part of the page without losing keyboard focus: if the focused element inside
 * `container` carries `data-key`, the element with the same key gets the focus back.
 */
export function keepFocus(container, render) {
  const active = document.activeElement;
  const key = active && container.contains(active) ? active.dataset.key : undefined;
  render();
  if (key !== undefined) {
    const again = container.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (again) again.focus();
  }
}

const XSD = "http://www.w3.org/2001/XMLSchema#";

const LONG_FRACTION = /^[+-]?\d*\.\d{7,}(?:[eE][+-]?\d+)?$/;

/** The text shown for a literal: long decimal fractions rounded (the exact form is in the tooltip). */
function displayValue(t) {
  if (isNumericTerm(t) && LONG_FRACTION.test(t.value) && !t.datatype.endsWith("#integer")) {
    const n = Number(t.value);
    if (Number.isFinite(n)) return n.toLocaleString("en-US", { maximumFractionDigits: 6, useGrouping: false });
  }
  return t.value;
}

/** A DOM node for one term: IRIs as explore links (DESCRIBE), literals with their datatype. */
export function termNode(t, shortener, onExplore) {
  if (!t) return el("span", { class: "unbound", text: "" });
  if (t.type === "uri") {
    const short = shortener ? shortener.shorten(t.value) : null;
    const a = el("a", {
      href: `#describe=${encodeURIComponent(t.value)}`, class: "iri", title: `${t.value}\nExplore with DESCRIBE`,
      text: short || `<${t.value}>`,
    });
    if (onExplore) {
      a.addEventListener("click", (ev) => {
        if (ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) return;
        ev.preventDefault();
        onExplore(t.value);
      });
    }
    return a;
  }
  if (t.type === "bnode") return el("span", { class: "bnode", text: `_:${t.value}` });
  const span = el("span", { class: isNumericTerm(t) ? "literal number" : "literal", text: displayValue(t) });
  if (t["xml:lang"]) span.append(el("span", { class: "lang", text: `@${t["xml:lang"]}` }));
  else if (t.datatype && t.datatype !== `${XSD}string` && !isNumericTerm(t)) {
    const dt = shortener ? shortener.shorten(t.datatype) : null;
    span.append(el("span", { class: "datatype", text: `^^${dt || `<${t.datatype}>`}` }));
  }
  span.title = termText(t);
  return span;
}

/** A paged, sortable table of SPARQL JSON bindings. */
export class ResultTable {
  constructor({ vars, bindings, prefixes, onExplore, pageSize = 50, caption = "", sort = null, onSort = null }) {
    this.vars = vars;
    this.rows = bindings;
    this.order = bindings.map((_, i) => i);
    this.shortener = new Shortener(prefixes || {});
    this.onExplore = onExplore;
    this.pageSize = pageSize;
    this.page = 0;
    this.sortVar = null;
    this.sortDir = 0;
    this.caption = caption;
    // columns whose bound values are all numbers are right-aligned, header included
    this.numeric = new Set(vars.filter((v) => {
      let any = false;
      for (const b of bindings) {
        if (!b[v]) continue;
        if (!isNumericTerm(b[v])) return false;
        any = true;
      }
      return any;
    }));
    this.root = el("div", { class: "result-table" });
    this.onSort = onSort;
    if (sort && vars.includes(sort.var) && sort.dir) {
      this.sortVar = sort.var;
      this.sortDir = sort.dir;
      this.applySort();
    }
    this.draw();
  }

  applySort() {
    const base = this.rows.map((_, i) => i);
    if (this.sortDir !== 0) {
      const d = this.sortDir;
      const v = this.sortVar;
      base.sort((a, b) => d * compareTerms(this.rows[a][v], this.rows[b][v]) || a - b);
    }
    this.order = base;
  }

  sortBy(v) {
    if (this.sortVar === v) this.sortDir = this.sortDir === 1 ? -1 : this.sortDir === -1 ? 0 : 1;
    else {
      this.sortVar = v;
      this.sortDir = 1;
    }
    this.applySort();
    this.page = 0;
    if (this.onSort) this.onSort({ var: this.sortVar, dir: this.sortDir });
    this.draw(v);
  }

  draw(focusVar) {
    const pages = Math.max(1, Math.ceil(this.rows.length / this.pageSize));
    this.page = Math.min(this.page, pages - 1);
    const start = this.page * this.pageSize;
    const slice = this.order.slice(start, start + this.pageSize);
    const head = el("tr", {}, el("th", { scope: "col", class: "rownum", text: "#" }), this.vars.map((v) => {
      const sorted = this.sortVar === v && this.sortDir !== 0;
      const btn = el("button", {
        type: "button", class: "sort", "data-var": v, "data-key": `sort-${v}`, onclick: () => this.sortBy(v),
        title: `Sort by ?${v}`,
      }, `?${v}`, el("span", { class: "arrow", "aria-hidden": "true",
        text: sorted ? (this.sortDir === 1 ? "▲" : "▼") : "↕" }));
      return el("th", { scope: "col", class: this.numeric.has(v) ? "num" : null,
        "aria-sort": sorted ? (this.sortDir === 1 ? "ascending" : "descending") : "none" }, btn);
    }));
    const body = el("tbody", {}, slice.map((i, k) => el("tr", {},
      el("td", { class: "rownum", text: String(start + k + 1) }),
      this.vars.map((v) => {
        const t = this.rows[i][v];
        return el("td", { class: isNumericTerm(t) ? "num" : null }, termNode(t, this.shortener, this.onExplore));
      }))));
    const table = el("table", { class: "results" },
      this.caption ? el("caption", { class: "sr-only", text: this.caption }) : null,
      el("thead", {}, head), body);
    const nav = el("nav", { class: "pager", "aria-label": "Result pages" },
      el("button", { type: "button", disabled: this.page === 0, onclick: () => this.go(0), "aria-label": "First page" }, "«"),
      el("button", { type: "button", disabled: this.page === 0, onclick: () => this.go(this.page - 1),
        "aria-label": "Previous page" }, "‹"),
      el("span", { class: "pageinfo", text: this.rows.length
        ? `${start + 1}–${Math.min(start + this.pageSize, this.rows.length)} of ${this.rows.length}` : "no rows" }),
      el("button", { type: "button", disabled: this.page >= pages - 1, onclick: () => this.go(this.page + 1),
        "aria-label": "Next page" }, "›"),
      el("button", { type: "button", disabled: this.page >= pages - 1, onclick: () => this.go(pages - 1),
        "aria-label": "Last page" }, "»"),
      el("label", { class: "pagesize" }, "Rows per page ",
        el("select", { onchange: (ev) => { this.pageSize = Number(ev.target.value); this.page = 0; this.draw(); } },
          [25, 50, 100, 500].map((n) => el("option", { value: n, selected: n === this.pageSize }, String(n))))));
    this.root.replaceChildren(el("div", { class: "table-scroll" }, table));
    if (this.rows.length > 25) this.root.append(nav);
    if (focusVar) {
      const b = this.root.querySelector(`button.sort[data-var="${CSS.escape(focusVar)}"]`);
      if (b) b.focus();
    }
  }

  go(p) {
    this.page = p;
    this.draw();
  }
}

// ---------------------------------------------------------------- downloads

function csvField(s) {
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/** SPARQL 1.1 CSV results (plain values, as the W3C format specifies). */
export function toCSV(doc) {
  const vars = doc.head.vars || [];
  const lines = [vars.map(csvField).join(",")];
  for (const b of doc.results.bindings) {
    lines.push(vars.map((v) => {
      const t = b[v];
      if (!t) return "";
      return csvField(t.type === "bnode" ? `_:${t.value}` : t.value);
    }).join(","));
  }
  return lines.join("\r\n") + "\r\n";
}

export function download(name, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = el("a", { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// ---------------------------------------------------------------- Turtle

const TTL_RE = /(#[^\n]*)|(<[^>\s]*>)|("""[\s\S]*?"""|"(?:[^"\\\n]|\\.)*")|(@prefix|@base|\ba\b)|([A-Za-z][\w.-]*:[\w.-]*|:[\w.-]+)|(\S)/g;
const escHtml = (s) => s.replace(/[&<>]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;" })[c]);

/** Turtle text with light highlighting. */
export function turtleNode(text) {
  let html = "";
  let last = 0;
  for (const m of text.matchAll(TTL_RE)) {
    html += escHtml(text.slice(last, m.index));
    const cls = m[1] ? "comment" : m[2] ? "iri" : m[3] ? "string" : m[4] ? "keyword" : m[5] ? "pname" : null;
    html += cls ? `<span class="tok-${cls}">${escHtml(m[0])}</span>` : escHtml(m[0]);
    last = m.index + m[0].length;
  }
  html += escHtml(text.slice(last));
  const pre = el("pre", { class: "turtle", tabindex: "0", "aria-label": "Graph result in Turtle" });
  pre.innerHTML = html;
  return pre;
}
