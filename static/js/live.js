// Continuous queries: the registered list, registration, pause/resume/delete,
// and a live view of the selected query's windows (table, boundaries, chart).

import { ApiError, deleteQuery, getJSON, getToken, registerQuery } from "./api.js";
import { drawChart, fmtMs } from "./chart.js";
import { Editor } from "./editor.js";
import { Feed } from "./feed.js";
import { addHistory, offerLink, shareLink } from "./history.js";
import { ResultTable, el, keepFocus } from "./results.js";
import { KNOWN_PREFIXES, declaredPrefixes, registeredName } from "./sparql.js";
import { UNIT, fmtInstant, isWallClock, rawTitle } from "./time.js";

const $ = (id) => document.getElementById(id);
const KEEP = 240; // windows kept per query in the page
const HISTORY = 30; // instants replayed when a query's live view first opens

/** The registration form's first text; its name is made free (see freeName). */
const TEMPLATE_NAME = "readings";
const template = (name) => `PREFIX city: <http://jindou.example/city/>
PREFIX sosa: <http://www.w3.org/ns/sosa/>
REGISTER QUERY ${name} AS
SELECT ?sensor (COUNT(?obs) AS ?readings)
FROM STREAM <http://jindou.example/city/stream/sensors> [RANGE 5s STEP 1s]
WHERE {
  ?obs sosa:madeBySensor ?sensor .
}
GROUP BY ?sensor
ORDER BY DESC(?readings)`;

const clock = fmtInstant;

/** Names a new registration should not take: the README's example (`busy`), so following it
 * after registering from the page does not meet a 409. */
const RESERVED_NAMES = new Set(["busy"]);

/** ``base``, else ``base_2``, ``base_3``, ...: the first name not in ``taken`` nor reserved. */
export function freeName(base, taken) {
  const used = (n) => taken.has(n) || RESERVED_NAMES.has(n);
  if (!used(base)) return base;
  for (let i = 2; ; i++) if (!used(`${base}_${i}`)) return `${base}_${i}`;
}

/** The text with the name after REGISTER ... QUERY replaced. */
export function renameRegistered(text, name) {
  return text.replace(/(\bREGISTER\s+(?:[RID]STREAM\s+)?QUERY\s+)([A-Za-z0-9_.-]+)/i, (_, head) => head + name);
}

const NUMERIC = /XMLSchema#(integer|decimal|double|float|int|long|short|byte|nonNegativeInteger|nonPositiveInteger|negativeInteger|positiveInteger|unsigned(Long|Int|Short|Byte))$/;

/** Per numeric column of a result: {sum, min, max, n} over its rows (the chart's bar values). */
export function numericSummary(doc) {
  const out = {};
  if (!doc || !doc.results) return out;
  for (const b of doc.results.bindings) {
    for (const [v, t] of Object.entries(b)) {
      if (!t || t.type !== "literal" || !t.datatype || !NUMERIC.test(t.datatype)) continue;
      const x = Number(t.value);
      if (!Number.isFinite(x)) continue;
      const a = out[v] || (out[v] = { sum: 0, min: Infinity, max: -Infinity, n: 0 });
      a.sum += x;
      a.min = Math.min(a.min, x);
      a.max = Math.max(a.max, x);
      a.n += 1;
    }
  }
  return out;
}

const AGGREGATES = {
  sum: (a) => a.sum,
  mean: (a) => a.sum / a.n,
  max: (a) => a.max,
  min: (a) => a.min,
};

/** How many distinct values ``value`` takes over the windows (does a series say anything?). */
function distinct(windows, value) {
  return new Set(windows.map(value).filter((v) => v !== null && v !== undefined)).size;
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
    this.windows = []; // {id, start, end, rows, delay, evalMs, nums, error, doc, gap}
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
    this.bar = null; // the chart's bars: null = chosen automatically, "" = rows, else a column name
    this.agg = "sum"; // how a column's values of one window become one bar
    this.sampled = null; // the last query status read for the evaluation times
    this.sampling = false;
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
    this.editor = new Editor($("register-editor"), { onRun: () => this.register(), wrap: true });
    this.editor.value = template(TEMPLATE_NAME);
    this.untouched = this.editor.value; // the proposed text, while the user has not edited it
    $("register").addEventListener("click", () => this.register());
    $("register-share").addEventListener("click", () => offerLink($("register-share-bar"), shareLink("register", this.editor.value)));
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
    this.proposeFreeName();
    this.drawList();
    if (this.current && !this.infos.has(this.current) && !this.listError) {
      const s = this.state(this.current);
      if (s.conn !== "ended") this.setConn(s, "ended", "the query is no longer registered");
      this.drawHeader();
    } else if (this.current) this.drawStats();
  }

  /** While the form holds the proposed text, its name is one no query has. */
  proposeFreeName() {
    if (this.listError || this.editor.value !== this.untouched) return;
    const name = registeredName(this.untouched);
    const free = freeName(TEMPLATE_NAME, new Set(this.infos.keys()));
    if (name !== free) {
      this.editor.value = renameRegistered(this.untouched, free);
      this.untouched = this.editor.value;
    }
  }

  /** Show a text (a shared link) in the registration form. */
  fill(text) {
    this.editor.value = text;
    this.editor.resetScroll();
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
        fromT = Math.max(0, q.next_instant - HISTORY * step); // event time starts at 0
      } else {
        // no instant known yet (or the list is older than the query's first windows):
        // everything retained, then the windows as they come
        fromT = 0;
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
      addHistory(text, "register");
      // the form goes back to its top-left corner (it may have been scrolled while editing)
      this.editor.resetScroll();
      await this.refresh();
      this.select(r.id);
    } catch (e) {
      box.hidden = false;
      if (e instanceof ApiError) {
        box.replaceChildren(...[el("span", { class: "kind", text: e.kind === "syntax" ? "Syntax error" : `Error ${e.status}` }),
          " ", e.line ? el("strong", { text: `Line ${e.line}, column ${e.column ?? "?"}: ` }) : null,
          e.describe().replace(/ \(line \d+(, column \d+)?\)$/, "")].filter(Boolean));
        if (e.line) this.editor.markError(e.line, e.column);
        const name = registeredName(text);
        if (e.status === 409 && name) {
          // the name is taken: offer the first free one
          await this.refresh();
          const free = freeName(name.replace(/_\d+$/, ""), new Set([...this.infos.keys(), name]));
          box.append(" ", el("button", { type: "button", class: "ghost small", id: "register-rename",
            onclick: () => { this.editor.value = renameRegistered(text, free); this.register(); } },
          `Register as “${free}”`));
        }
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
      // Event time that is not wall-clock (small t values) has no delay to measure.
      const wall = isWallClock(win.end);
      const replay = wall ? win.end < s.openedAt : now - s.openedAt < 300;
      let rows = 0;
      if (doc.results) rows = doc.results.bindings.length;
      else if (typeof doc.triples === "string") rows = doc.triples.split("\n").filter((l) => l.trim()).length;
      else if ("boolean" in doc) rows = doc.boolean ? 1 : 0;
      s.windows.push({ id, start: win.start, end: win.end, rows,
        delay: replay || !wall ? null : Math.max(0, now - win.end), evalMs: null, nums: numericSummary(doc),
        error: doc.error ? `${doc.error}: ${doc.detail}` : null, doc, replay, arrived: now });
      if (!replay) this.sampleEvaluation(s);
      if (s.windows.length > KEEP) s.windows.splice(0, s.windows.length - KEEP);
      for (const w of s.windows.slice(0, -40)) w.doc = null; // keep the bindings of the recent windows only
      s.received += 1;
      s.lastId = id ?? s.lastId;
    } else if (type === "gap") {
      s.gaps += 1;
      let g = {};
      try { g = JSON.parse(data); } catch { /* ignore */ }
      s.windows.push({ id, gap: true, start: g.missed_from, end: g.resumed_at, rows: 0, delay: null, evalMs: null, doc: null });
    } else if (type === "error") {
      let g = {};
      try { g = JSON.parse(data); } catch { /* ignore */ }
      this.setConn(s, "reconnecting", g.detail || "the server reported an error");
    }
    if (s.name === this.current) this.drawLive();
  }

  /**
   * The evaluation time of the newest window, read from the query's status
   * (`last_latency_ms`; the result events do not carry it, so that a re-evaluated
   * instant stays identical). One read at a time, at most four a second (a fast STEP
   * leaves some windows without a point); a read that saw no new evaluation (only
   * unchanged instants, which are not evaluated) assigns nothing.
   */
  async sampleEvaluation(s) {
    if (s.sampling || (s.sampled && Date.now() - s.sampled.at < 250)) return;
    s.sampling = true;
    try {
      const q = await getJSON(`/queries/${encodeURIComponent(s.name)}`);
      const prev = s.sampled;
      s.sampled = { at: Date.now(), evaluated: q.evaluated, unchanged: q.unchanged_instants ?? 0 };
      const evaluatedNew = !prev || (q.evaluated - prev.evaluated) > ((q.unchanged_instants ?? 0) - prev.unchanged);
      const w = [...s.windows].reverse().find((x) => !x.gap && !x.replay);
      if (w && w.evalMs === null && evaluatedNew && typeof q.last_latency_ms === "number") {
        w.evalMs = q.last_latency_ms;
        if (s.name === this.current) {
          this.drawChartOnly();
          this.drawStats();
        }
      }
    } catch {
      /* the status read failed: that window has no evaluation point */
    } finally {
      s.sampling = false;
    }
  }

  /** The chart's bar series of ``s``: {key, label, value(window)}. */
  barSeries(s) {
    const wins = s.windows.filter((w) => !w.gap);
    const columns = [...new Set(wins.flatMap((w) => Object.keys(w.nums || {})))];
    let key = s.bar;
    if (key === null && wins.length >= 3) {
      // automatic: the rows when they vary, else the numeric column that varies most
      const rowsVary = distinct(wins, (w) => w.rows) > 1;
      let best = null;
      let bestN = 1;
      for (const c of columns) {
        const n = distinct(wins, (w) => (w.nums && w.nums[c] ? AGGREGATES.sum(w.nums[c]) : null));
        if (n > bestN) [best, bestN] = [c, n];
      }
      key = rowsVary || best === null ? "" : best;
      s.bar = key; // chosen once: the bars do not change meaning while watching
    }
    if (!key || !columns.includes(key)) return { key: "", columns, label: "rows", value: (w) => w.rows };
    const f = AGGREGATES[s.agg] || AGGREGATES.sum;
    return { key, columns, label: `${s.agg} of ?${key}`, value: (w) => (w.nums && w.nums[key] ? f(w.nums[key]) : null) };
  }

  drawChartControls(s, series) {
    const host = $("live-chart-controls");
    if (!host) return;
    const sig = JSON.stringify([series.key, series.columns, s.agg]);
    if (host.dataset.sig === sig) return;
    host.dataset.sig = sig;
    const barSel = el("select", { id: "live-bars", onchange: (ev) => { s.bar = ev.target.value; this.drawLive(); } },
      el("option", { value: "", text: "rows per window", selected: series.key === "" }),
      ...series.columns.map((c) => el("option", { value: c, text: `?${c}`, selected: series.key === c })));
    const aggSel = el("select", { id: "live-agg", disabled: series.key === "", title: "how the values of a window's rows become one bar",
      onchange: (ev) => { s.agg = ev.target.value; this.drawLive(); } },
    ...Object.keys(AGGREGATES).map((a) => el("option", { value: a, text: a, selected: s.agg === a })));
    keepFocus(host, () => host.replaceChildren(
      el("label", { for: "live-bars", text: "Bars" }), barSel,
      el("label", { for: "live-agg", class: "sr-only", text: "Aggregate of the column over a window" }), aggSel));
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
        el("div", { id: "live-chart-controls", class: "chart-controls" }),
        el("div", { id: "live-chart", class: "chart-host" }),
        el("figcaption", { class: "legend" },
          el("span", { class: "key rows" }), el("span", { id: "live-bar-label", text: "rows per window" }), " ",
          el("span", { class: "key lat" }),
          el("span", { id: "live-line-label", text: "evaluation time of the window on the server",
            title: "last_latency_ms of the query's status, read as the windows arrive (instants left unchanged are not evaluated)" }),
          el("span", { id: "live-time-note", class: "muted" }))),
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
    const delays = s.windows.filter((w) => w.delay !== null && w.delay !== undefined).map((w) => w.delay);
    const avg = delays.length ? delays.reduce((a, b) => a + b, 0) / delays.length : null;
    const wall = last ? isWallClock(last.end) : true;
    const stat = (label, value, title, cls = "") => el("div", { class: `stat ${cls}`, title },
      el("span", { class: "label", text: label }),
      el("span", { class: "value", text: value }));
    host.replaceChildren(...[
      stat("Windows", String(s.received), "windows received by this page"),
      stat("Last window", last ? `${clock(last.start)} → ${clock(last.end)}` : "–",
        `(start, end]: the elements with start < τ ≤ end, in event time (${UNIT})` +
        (last ? `: ${last.start} → ${last.end}${wall ? "" : "; not wall-clock, shown as the time since t = 0"}` : ""), "wide"),
      stat("Rows in last", last ? String(last.rows) : "–"),
      stat("Evaluation", q ? fmtMs(q.last_latency_ms) : "–", "server-side evaluation time of the last evaluated instant"),
      wall ? stat("Delay after window end", last ? fmtMs(last.delay) : "–",
        "result arrival in this browser − window end: includes the wait for the stream's progress to pass " +
        "the window's end (the feeder's pacing), not only the evaluation") : null,
      wall ? stat("Delay, mean", fmtMs(avg), `mean over the ${delays.length} live windows kept`) : null,
      s.gaps ? stat("Gaps", String(s.gaps), "instants the server no longer retained") : null,
    ].filter(Boolean));
  }

  drawChartOnly() {
    if (!this.current || !$("live-chart")) return;
    const s = this.state(this.current);
    const series = this.barSeries(s);
    this.drawChartControls(s, series);
    const label = $("live-bar-label");
    if (label) label.textContent = series.key ? `${series.label} per window (its rows' values)` : "rows per window";
    const note = $("live-time-note");
    const last = [...s.windows].reverse().find((w) => !w.gap);
    if (note) {
      note.textContent = last && !isWallClock(last.end)
        ? ` · event time in ${UNIT}; these are small values (not wall-clock), shown as t = time since 0` : "";
    }
    drawChart($("live-chart"), s.windows.filter((w) => !w.gap), { bar: { label: series.label, value: series.value } });
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
        el("span", { class: "range", text: `${clock(w.start)} → ${clock(w.end)}`, title: `${rawTitle(w.start)} → ${w.end}` }),
        el("span", { class: w.error ? "rows error-note" : "rows", text: w.error ? "error" : `${w.rows} rows` }),
        el("span", { class: "lat", text: w.replay ? "replayed" : w.delay !== null ? fmtMs(w.delay) : w.evalMs !== null ? `eval ${fmtMs(w.evalMs)}` : "",
          title: w.replay ? "replayed from the server's retained history" : w.delay !== null
            ? "delivered this long after the window's end" : "evaluation time on the server" })));
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
