// Continuous queries: the registered list, registration, pause/resume/delete,
// and a live view of the selected query's windows (table, boundaries, chart).

import { ApiError, deleteQuery, getJSON, getToken, registerQuery } from "./api.js";
import { drawChart, fmtMs } from "./chart.js";
import { Editor } from "./editor.js";
import { Feed } from "./feed.js";
import { ResultTable, el, keepFocus } from "./results.js";
import { KNOWN_PREFIXES, declaredPrefixes } from "./sparql.js";

const $ = (id) => document.getElementById(id);
const KEEP = 240; // windows kept per query in the page
const HISTORY = 30; // instants replayed when a query's live view first opens

const TEMPLATE = `PREFIX city: <http://jindou.example/city/>
PREFIX sosa: <http://www.w3.org/ns/sosa/>
REGISTER QUERY busy AS
SELECT ?sensor (COUNT(?obs) AS ?readings)
FROM STREAM <http://jindou.example/city/stream/sensors> [RANGE 5s STEP 1s]
WHERE {
  ?obs sosa:madeBySensor ?sensor .
}
GROUP BY ?sensor
ORDER BY DESC(?readings)`;

function clock(ms) {
  const d = new Date(ms);
  const t = d.toLocaleTimeString("en-GB", { hour12: false });
  return d.getMilliseconds() ? `${t}.${String(d.getMilliseconds()).padStart(3, "0")}` : t;
}

function span(ms) {
  if (ms % 3600000 === 0) return `${ms / 3600000} h`;
  if (ms % 60000 === 0) return `${ms / 60000} min`;
  if (ms % 1000 === 0) return `${ms / 1000} s`;
  return `${ms} ms`;
}

/** Per-query state kept while the page is open (also when another query is shown). */
class QueryState {
  constructor(name) {
    this.name = name;
    this.windows = []; // {id, start, end, rows, latency, error, doc, gap}
    this.lastId = null;
    this.paused = false;
    this.conn = "idle";
    this.connDetail = "";
    this.received = 0;
    this.gaps = 0;
    this.openedAt = 0;
    this.selected = null; // id of the window shown in the table, null = follow the latest
    this.sort = null; // {var, dir} of the live table, kept across windows
    this.fromStart = false; // registered from this page: replay from its first instant
  }
}

export class LiveView {
  constructor({ server, explore, showTab }) {
    this.server = server;
    this.explore = explore;
    this.showTab = showTab;
    this.infos = new Map();
    this.states = new Map();
    this.current = null;
    this.feed = null;
    this.visible = false;
    this.timer = null;
    this.editor = new Editor($("register-editor"), { onRun: () => this.register() });
    this.editor.value = TEMPLATE;
    $("register").addEventListener("click", () => this.register());
    $("cq-refresh").addEventListener("click", () => this.refresh());
    this.refresh();
    window.addEventListener("resize", () => this.drawChartOnly());
  }

  async show() {
    this.visible = true;
    if (!this.timer) this.timer = setInterval(() => this.refresh(), 3000);
    await this.refresh();
    if (this.visible && !this.current && this.infos.size) this.select(this.infos.keys().next().value);
    else this.drawChartOnly();
  }

  hide() {
    this.visible = false;
    clearInterval(this.timer);
    this.timer = null;
  }

  state(name) {
    let s = this.states.get(name);
    if (!s) {
      s = new QueryState(name);
      this.states.set(name, s);
    }
    return s;
  }

  async refresh() {
    try {
      const doc = await getJSON("/queries");
      this.infos = new Map(doc.queries.map((q) => [q.id, q]));
      this.listError = null;
    } catch (e) {
      this.listError = e instanceof ApiError ? e.describe() : String(e);
    }
    const n = this.infos.size;
    $("cq-count").textContent = n ? String(n) : "";
    this.drawList();
    if (this.current && !this.infos.has(this.current) && !this.listError) {
      const s = this.state(this.current);
      if (s.conn !== "ended") this.setConn(s, "ended", "the query is no longer registered");
      this.drawHeader();
    } else if (this.current) this.drawStats();
  }

  drawList() {
    const ul = $("cq-list");
    if (this.listError) {
      ul.replaceChildren(el("li", { class: "error-note", text: this.listError }));
      return;
    }
    if (!this.infos.size) {
      ul.replaceChildren(el("li", { class: "muted", text: "No continuous query is registered." }));
      return;
    }
    keepFocus(ul, () => ul.replaceChildren(...[...this.infos.values()].map((q) => {
      const s = this.states.get(q.id);
      const on = q.id === this.current;
      const badge = s && on ? (s.paused ? "paused" : s.conn) : "";
      return el("li", { class: on ? "active" : "" },
        el("button", { type: "button", class: "cq-select", "aria-current": on ? "true" : null,
          "data-query": q.id, "data-key": q.id, onclick: () => this.select(q.id) },
        el("span", { class: "cq-name", text: q.id }),
        badge ? el("span", { class: `badge ${badge}`, text: badge }) : null,
        el("span", { class: "cq-meta", text:
          `${q.mode} ${q.form} · ${q.windows.map((w) => `${w.stream} ${w.text}`).join(", ")}` }),
        el("span", { class: "cq-meta", text:
          `${q.evaluated} windows · eval ${fmtMs(q.last_latency_ms)}` })));
    })));
  }

  select(name) {
    if (this.current === name && this.feed && !this.feed.closed) return;
    if (this.feed) this.feed.close();
    this.feed = null;
    this.current = name;
    const s = this.state(name);
    this.buildView();
    if (!s.paused) this.connect(s);
    this.drawList();
  }

  connect(s) {
    if (this.feed) this.feed.close();
    const feed = new Feed(s.name, {
      onEvent: (type, id, data) => this.onEvent(s, type, id, data),
      onState: (st, detail) => {
        this.setConn(s, st, detail);
        if (s.name === this.current) {
          this.drawHeader();
          this.drawList();
        }
      },
    }, {
      // EventSource cannot send the token: with one (and reads that may need it), read with fetch
      useFetch: !!getToken() && this.server.readsNeedToken !== false,
    });
    this.feed = feed;
    s.openedAt = Date.now();
    let fromT = null;
    if (s.lastId === null) {
      // first connection: a query registered from this page replays all its instants; for
      // another, the recent history fills the chart at once (event time, from the query's info)
      const q = this.infos.get(s.name);
      if (s.fromStart) fromT = 0;
      else if (q && q.next_instant !== null && q.next_instant !== undefined && q.windows.length) {
        const step = Math.min(...q.windows.map((w) => w.step_ms || 1000));
        fromT = q.next_instant - HISTORY * step;
      }
    }
    feed.open(s.lastId, fromT);
  }

  setConn(s, st, detail = "") {
    s.conn = st;
    s.connDetail = detail;
  }

  pause() {
    const s = this.state(this.current);
    s.paused = true;
    if (this.feed) this.feed.close();
    this.feed = null;
    this.setConn(s, "paused", s.lastId !== null ? `resumes after the window ending ${clock(s.lastId)}` : "");
    this.drawHeader();
    this.drawList();
  }

  resume() {
    const s = this.state(this.current);
    s.paused = false;
    this.connect(s);
    this.drawHeader();
  }

  async remove() {
    const name = this.current;
    if (!name || !confirm(`Delete the continuous query “${name}”?`)) return;
    try {
      await deleteQuery(name);
      if (this.feed) this.feed.close();
      this.feed = null;
      this.states.delete(name);
      this.current = null;
      $("live-view").replaceChildren(el("p", { class: "muted empty-note", text: `Query “${name}” was deleted.` }));
      await this.refresh();
    } catch (e) {
      alert(e instanceof ApiError ? e.describe() : String(e));
    }
  }

  /** The token changed: reload the list and reopen the feed with the new credentials. */
  async tokenChanged() {
    await this.refresh();
    if (this.current && this.infos.has(this.current)) {
      const s = this.state(this.current);
      if (!s.paused) this.connect(s);
      this.drawHeader();
    } else if (this.visible && !this.current && this.infos.size) {
      this.select(this.infos.keys().next().value);
    }
  }

  /** A query was registered elsewhere on this page (the Query view). */
  registered(name, refresh = true) {
    if (this.current === name) {
      if (this.feed) this.feed.close();
      this.feed = null;
      this.current = null;
    }
    this.states.delete(name); // a name registered again starts afresh
    this.state(name).fromStart = true;
    if (refresh) this.refresh();
  }

  async register() {
    const box = $("register-error");
    box.hidden = true;
    this.editor.clearError();
    const text = this.editor.value;
    if (!text.trim()) return;
    $("register").disabled = true;
    try {
      const r = await registerQuery(text);
      this.registered(r.id, false);
      await this.refresh();
      this.select(r.id);
    } catch (e) {
      box.hidden = false;
      if (e instanceof ApiError) {
        box.replaceChildren(...[el("span", { class: "kind", text: e.kind === "syntax" ? "Syntax error" : `Error ${e.status}` }),
          " ", e.line ? el("strong", { text: `Line ${e.line}, column ${e.column ?? "?"}: ` }) : null,
          e.describe().replace(/ \(line \d+(, column \d+)?\)$/, "")].filter(Boolean));
        if (e.line) this.editor.markError(e.line, e.column);
      } else box.textContent = String(e);
    } finally {
      $("register").disabled = false;
    }
  }

  onEvent(s, type, id, data) {
    if (type === "result") {
      let doc;
      try {
        doc = JSON.parse(data);
      } catch {
        doc = { error: "bad_event", detail: "the event data is not JSON" };
      }
      const win = doc.window || { start: id, end: id };
      const now = Date.now();
      // A window that ended before this connection opened is a replay (history, or missed
      // while paused): its delay is not a latency.
      const replay = win.end < s.openedAt;
      let rows = 0;
      if (doc.results) rows = doc.results.bindings.length;
      else if (typeof doc.triples === "string") rows = doc.triples.split("\n").filter((l) => l.trim()).length;
      else if ("boolean" in doc) rows = doc.boolean ? 1 : 0;
      s.windows.push({ id, start: win.start, end: win.end, rows, latency: replay ? null : Math.max(0, now - win.end),
        error: doc.error ? `${doc.error}: ${doc.detail}` : null, doc, replay, arrived: now });
      if (s.windows.length > KEEP) s.windows.splice(0, s.windows.length - KEEP);
      for (const w of s.windows.slice(0, -40)) w.doc = null; // keep the bindings of the recent windows only
      s.received += 1;
      s.lastId = id ?? s.lastId;
    } else if (type === "gap") {
      s.gaps += 1;
      let g = {};
      try { g = JSON.parse(data); } catch { /* ignore */ }
      s.windows.push({ id, gap: true, start: g.missed_from, end: g.resumed_at, rows: 0, latency: null, doc: null });
    } else if (type === "error") {
      let g = {};
      try { g = JSON.parse(data); } catch { /* ignore */ }
      this.setConn(s, "reconnecting", g.detail || "the server reported an error");
    }
    if (s.name === this.current) this.drawLive();
  }

  // ------------------------------------------------------------ drawing

  buildView() {
    const name = this.current;
    const q = this.infos.get(name);
    const root = $("live-view");
    root.replaceChildren(
      el("div", { class: "live-head" },
        el("h2", {}, el("span", { class: "muted", text: "Live · " }), name),
        q ? el("span", { class: "window-spec", text: q.windows.map((w) => `${w.stream} ${w.text}`).join(" · ") }) : null,
        el("span", { id: "live-conn", class: "badge", role: "status", "aria-live": "polite" }),
        el("span", { class: "spacer" }),
        el("button", { type: "button", id: "live-pause", class: "ghost small", onclick: () =>
          (this.state(name).paused ? this.resume() : this.pause()) }, "Pause"),
        el("button", { type: "button", id: "live-delete", class: "ghost small danger", onclick: () => this.remove() }, "Delete")),
      el("div", { id: "live-stats", class: "stats" }),
      el("figure", { class: "chart-box" },
        el("div", { id: "live-chart", class: "chart-host" }),
        el("figcaption", { class: "legend" },
          el("span", { class: "key rows" }), "rows per window ",
          el("span", { class: "key lat" }), "latency: result arrival − window end")),
      el("div", { class: "live-split" },
        el("div", { class: "live-table" },
          el("h3", { id: "live-window-title", text: "Latest window" }),
          el("div", { id: "live-table", "aria-live": "off" })),
        el("div", { class: "live-windows" },
          el("h3", { id: "live-windows-title", text: "Windows" }),
          el("ol", { id: "live-windows", class: "windows", "aria-labelledby": "live-windows-title", reversed: true }))),
    );
    if (q) {
      root.append(el("details", { class: "query-text" }, el("summary", { text: "Query text" }),
        el("pre", { class: "turtle", text: q.text })));
    }
    this.drawLive();
  }

  drawHeader() {
    const s = this.state(this.current);
    const c = $("live-conn");
    if (!c) return;
    const label = s.paused ? "paused" : s.conn;
    c.textContent = label;
    c.className = `badge ${label}`;
    c.title = s.connDetail || "";
    const b = $("live-pause");
    b.textContent = s.paused ? "Resume" : "Pause";
    b.setAttribute("aria-pressed", String(s.paused));
    b.disabled = s.conn === "ended";
  }

  drawStats() {
    const s = this.state(this.current);
    const q = this.infos.get(this.current);
    const host = $("live-stats");
    if (!host) return;
    const last = [...s.windows].reverse().find((w) => !w.gap);
    const lats = s.windows.filter((w) => w.latency !== null && w.latency !== undefined).map((w) => w.latency);
    const avg = lats.length ? lats.reduce((a, b) => a + b, 0) / lats.length : null;
    const stat = (label, value, title, cls = "") => el("div", { class: `stat ${cls}`, title },
      el("span", { class: "label", text: label }),
      el("span", { class: "value", text: value }));
    host.replaceChildren(...[
      stat("Windows", String(s.received), "windows received by this page"),
      stat("Last window", last ? `${clock(last.start)} → ${clock(last.end)}` : "–",
        "(start, end]: the elements with start < τ ≤ end, in event time", "wide"),
      stat("Rows in last", last ? String(last.rows) : "–"),
      stat("Latency, last", last ? fmtMs(last.latency) : "–", "result arrival in this browser − window end"),
      stat("Latency, mean", fmtMs(avg), `mean over the ${lats.length} live windows kept`),
      stat("Evaluation", q ? fmtMs(q.last_latency_ms) : "–", "server-side evaluation time of the last instant"),
      s.gaps ? stat("Gaps", String(s.gaps), "instants the server no longer retained") : null,
    ].filter(Boolean));
  }

  drawChartOnly() {
    if (!this.current || !$("live-chart")) return;
    const s = this.state(this.current);
    drawChart($("live-chart"), s.windows.filter((w) => !w.gap));
  }

  drawLive() {
    if (!this.current) return;
    const s = this.state(this.current);
    this.drawHeader();
    this.drawStats();
    this.drawChartOnly();
    // windows list (newest first)
    const ol = $("live-windows");
    const recent = s.windows.slice(-30).reverse();
    keepFocus(ol, () => ol.replaceChildren(...recent.map((w) => {
      if (w.gap) {
        return el("li", { class: "gap", text: `gap: instants from ${clock(w.start)} were dropped; resumed at ${clock(w.end)}` });
      }
      const shown = (s.selected ?? s.windows[s.windows.length - 1]?.id) === w.id;
      return el("li", { class: shown ? "shown" : "" },
        el("button", { type: "button", class: "win", disabled: !w.doc, "aria-pressed": String(shown), "data-key": String(w.id),
          onclick: () => { s.selected = shown && s.selected !== null ? null : w.id; this.drawLive(); } },
        el("span", { class: "range", text: `${clock(w.start)} → ${clock(w.end)}` }),
        el("span", { class: w.error ? "rows error-note" : "rows", text: w.error ? "error" : `${w.rows} rows` }),
        el("span", { class: "lat", text: w.replay ? "replayed" : fmtMs(w.latency) })));
    })));
    if (!recent.length) ol.replaceChildren(el("li", { class: "muted", text: s.paused ? "Paused." : "Waiting for the next instant…" }));
    // table of the shown window
    const shown = s.selected !== null ? s.windows.find((w) => w.id === s.selected) : [...s.windows].reverse().find((w) => !w.gap);
    const title = $("live-window-title");
    const host = $("live-table");
    if (!shown || !shown.doc) {
      title.textContent = "Latest window";
      host.replaceChildren(el("p", { class: "muted", text: "No window yet." }));
      return;
    }
    title.textContent = `${s.selected !== null ? "Window" : "Latest window"} ${clock(shown.start)} → ${clock(shown.end)}`;
    const doc = shown.doc;
    const q = this.infos.get(this.current);
    const prefixes = { ...KNOWN_PREFIXES, ...(q ? declaredPrefixes(q.text) : {}) };
    if (doc.error) {
      host.replaceChildren(el("p", { class: "error-note", text: `${doc.error}: ${doc.detail}` }));
    } else if (doc.results) {
      // the user's sort order stays while new windows replace the table
      const t = new ResultTable({ vars: doc.head.vars || [], bindings: doc.results.bindings, prefixes,
        onExplore: (iri) => this.explore(iri), pageSize: 25, caption: "Results of the window",
        sort: s.sort, onSort: (so) => { s.sort = so; } });
      keepFocus(host, () => host.replaceChildren(t.root));
    } else if ("boolean" in doc) {
      host.replaceChildren(el("p", { class: `boolean ${doc.boolean ? "yes" : "no"}`, text: String(doc.boolean) }));
    } else if (typeof doc.triples === "string") {
      host.replaceChildren(el("pre", { class: "turtle", text: doc.triples || "(no triples)" }));
    }
  }
}
