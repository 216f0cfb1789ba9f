// Dashboard entry point: tabs, token, server connection, one-shot queries.

import { ApiError, getJSON, getToken, registerQuery, runQuery, runUpdate, setToken } from "./api.js";
import { Editor } from "./editor.js";
import { ResultTable, download, el, toCSV, turtleNode } from "./results.js";
import { KNOWN_PREFIXES, declaredPrefixes, operationOf } from "./sparql.js";
import { addHistory, clearHistory, loadHistory, offerLink, shareLink, summary } from "./history.js";
import { LiveView } from "./live.js";
import { StreamsView } from "./streams.js";

const $ = (id) => document.getElementById(id);

const CITY = `PREFIX city: <http://jindou.example/city/>
PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#>
PREFIX sosa: <http://www.w3.org/ns/sosa/>
PREFIX schema: <http://schema.org/>
`;

export const EXAMPLES = {
  "Sensors per district": `${CITY}
SELECT ?district (COUNT(?sensor) AS ?sensors) WHERE {
  ?sensor sosa:isHostedBy ?place .
  ?place schema:containedInPlace ?d .
  ?d rdfs:label ?district .
}
GROUP BY ?district
ORDER BY DESC(?sensors)`,
  "Temperature sensors": `${CITY}
SELECT ?sensor ?place WHERE {
  ?sensor a city:TemperatureSensor ;
          sosa:isHostedBy ?p .
  ?p rdfs:label ?place .
}
ORDER BY ?sensor`,
  "Latest readings": `${CITY}
SELECT ?sensor ?value ?time WHERE {
  ?obs sosa:madeBySensor ?sensor ;
       sosa:hasSimpleResult ?value ;
       sosa:resultTime ?time .
}
ORDER BY DESC(?time)
LIMIT 10`,
  "All triples": "SELECT ?s ?p ?o WHERE {\n  ?s ?p ?o\n}\nLIMIT 200",
  "Describe a sensor": `${CITY}
DESCRIBE city:sensor001`,
  "Graph of places (CONSTRUCT)": `${CITY}
CONSTRUCT { ?place rdfs:label ?label ; schema:containedInPlace ?d }
WHERE { ?place schema:containedInPlace ?d ; rdfs:label ?label }
LIMIT 20`,
  "Register a continuous query (C-SPARQL)": `${CITY}
REGISTER QUERY loud AS
SELECT ?sensor (MAX(?value) AS ?max)
FROM STREAM <http://jindou.example/city/stream/sensors> [RANGE 5s STEP 1s]
WHERE {
  ?obs sosa:madeBySensor ?sensor ;
       sosa:observedProperty city:noiseLevel ;
       sosa:hasSimpleResult ?value .
}
GROUP BY ?sensor`,
};

// ---------------------------------------------------------------- server state

export const server = { status: null, readsNeedToken: null }; // null until the first /status answer
const statusListeners = [];
export function onStatus(fn) { statusListeners.push(fn); }

async function pollStatus() {
  const conn = $("conn");
  try {
    const st = await getJSON("/status");
    server.status = st;
    server.readsNeedToken = !!(st.auth && st.auth.reads === "token");
    const auth = st.auth || {};
    const token = getToken();
    if (auth.reads === "token" && !token) {
      conn.textContent = "token needed";
      conn.className = "conn bad";
      conn.title = "This server needs a Bearer token for reads: enter it in the Token field";
    } else {
      conn.textContent = `v${st.version} · ${(st.store && st.store.triples) ?? "?"} triples`
        + (auth.writes === "token" && !token ? " · read-only" : "");
      conn.className = "conn ok";
      conn.title = auth.writes === "token" && !token
        ? "Connected; writes (updates, registering queries) need the server's token"
        : "Connected to the Jindou server";
    }
    for (const fn of statusListeners) fn(st);
  } catch (e) {
    conn.textContent = e.status === 401 || e.status === 403 ? "token needed" : "server unreachable";
    conn.className = "conn bad";
    conn.title = e instanceof ApiError ? e.describe() : String(e);
  }
}

// ---------------------------------------------------------------- tabs

const TABS = ["query", "live", "streams"];
const views = {};

export function showTab(name, { focus = false } = {}) {
  for (const t of TABS) {
    const tab = $(`tab-${t}`);
    const on = t === name;
    tab.setAttribute("aria-selected", String(on));
    tab.tabIndex = on ? 0 : -1;
    $(`view-${t}`).hidden = !on;
    if (views[t]) (on ? views[t].show?.() : views[t].hide?.());
  }
  if (focus) $(`tab-${name}`).focus();
  if (location.hash !== `#${name}` && !location.hash.startsWith("#describe=")) history.replaceState(null, "", `#${name}`);
}

function setupTabs() {
  for (const t of TABS) $(`tab-${t}`).addEventListener("click", () => showTab(t));
  $("main").previousElementSibling.querySelector('[role="tablist"]').addEventListener("keydown", (ev) => {
    const cur = TABS.findIndex((t) => $(`tab-${t}`).getAttribute("aria-selected") === "true");
    let next = null;
    if (ev.key === "ArrowRight") next = (cur + 1) % TABS.length;
    else if (ev.key === "ArrowLeft") next = (cur + TABS.length - 1) % TABS.length;
    else if (ev.key === "Home") next = 0;
    else if (ev.key === "End") next = TABS.length - 1;
    if (next !== null) {
      ev.preventDefault();
      showTab(TABS[next], { focus: true });
    }
  });
}

function setupToken() {
  const input = $("token");
  input.value = getToken();
  const save = async () => {
    if (input.value.trim() === getToken()) return;
    setToken(input.value.trim());
    await pollStatus();
    views.live?.tokenChanged();
  };
  input.addEventListener("change", save);
  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    save();
  });
}

// ---------------------------------------------------------------- one-shot queries

class QueryView {
  constructor() {
    this.editor = new Editor($("query-editor"), { onRun: () => this.run() });
    this.history = [];
    this.ctl = null;
    const sel = $("examples");
    sel.append(el("option", { value: "", text: "Choose an example…" }));
    for (const name of Object.keys(EXAMPLES)) sel.append(el("option", { value: name, text: name }));
    sel.addEventListener("change", () => {
      if (!sel.value) return;
      this.remember();
      this.editor.value = EXAMPLES[sel.value];
      sel.value = "";
      this.editor.focus();
    });
    $("run").addEventListener("click", () => this.run());
    $("back").addEventListener("click", () => this.back());
    $("share").addEventListener("click", () => offerLink($("share-bar"), shareLink("query", this.editor.value)));
    const hist = $("history");
    hist.addEventListener("change", () => {
      const i = hist.value;
      hist.value = "";
      if (i === "clear") clearHistory();
      else if (i !== "") this.fill(loadHistory()[Number(i)].text);
    });
    window.addEventListener("jindou-history", () => this.drawHistory());
    window.addEventListener("storage", (ev) => { if (ev.key === "jindou.history") this.drawHistory(); });
    this.drawHistory();
    this.editor.value = EXAMPLES["Sensors per district"];
  }

  /** The history menu: the queries run from this browser, newest first. */
  drawHistory() {
    const sel = $("history");
    const list = loadHistory();
    sel.replaceChildren(el("option", { value: "", text: list.length ? `History (${list.length})…` : "History (empty)" }),
      ...list.map((e, i) => el("option", { value: String(i), text: `${e.kind === "register" ? "⟳ " : ""}${summary(e.text)}`,
        title: `${new Date(e.at).toLocaleString()}\n${e.text}` })),
      list.length ? el("option", { value: "clear", text: "Clear the history" }) : null);
    sel.disabled = !list.length;
  }

  /** Put ``text`` in the editor (a history entry, a shared link), keeping the previous text for ← Back. */
  fill(text) {
    this.remember();
    this.editor.value = text;
    this.editor.resetScroll();
    this.editor.focus();
  }

  remember() {
    const v = this.editor.value;
    if (v.trim() && this.history[this.history.length - 1] !== v) this.history.push(v);
    if (this.history.length > 50) this.history.shift();
    $("back").disabled = this.history.length === 0;
  }

  back() {
    const v = this.history.pop();
    $("back").disabled = this.history.length === 0;
    if (v !== undefined) {
      this.editor.value = v;
      this.run();
    }
  }

  explore(iri) {
    this.remember();
    this.editor.value = `DESCRIBE <${iri}>`;
    showTab("query");
    this.run();
  }

  setError(err) {
    const box = $("query-error");
    if (!err) {
      box.hidden = true;
      box.replaceChildren();
      return;
    }
    box.hidden = false;
    if (err instanceof ApiError) {
      const where = err.line ? el("strong", { text: `Line ${err.line}, column ${err.column ?? "?"}: ` }) : null;
      box.replaceChildren(...[el("span", { class: "kind", text: err.kind === "syntax" ? "Syntax error" : `Error ${err.status || ""}` }),
        " ", where, err.describe().replace(/ \(line \d+(, column \d+)?\)$/, "")].filter(Boolean));
      if (err.line) this.editor.markError(err.line, err.column);
    } else {
      box.replaceChildren(String(err.message || err));
    }
  }

  async run() {
    const text = this.editor.value;
    if (!text.trim()) return;
    if (this.ctl) this.ctl.abort();
    const ctl = new AbortController();
    this.ctl = ctl;
    const info = $("results-info");
    const out = $("results");
    const dl = $("downloads");
    this.setError(null);
    this.editor.clearError();
    info.textContent = "running…";
    $("run").disabled = true;
    const op = operationOf(text);
    try {
      if (op === "register") {
        const r = await registerQuery(text);
        addHistory(text, "register");
        info.textContent = `registered continuous query “${r.id}”`;
        dl.replaceChildren();
        out.replaceChildren(el("p", {}, "Registered ", el("code", { text: r.id }), ` reading ${r.streams.join(", ")}. `,
          el("a", { href: "#live", onclick: (ev) => { ev.preventDefault(); views.live.select(r.id); showTab("live"); } },
            "Watch its windows live →")));
        views.live.registered(r.id);
        return;
      }
      if (op === "update") {
        const r = await runUpdate(text);
        addHistory(text, "update");
        info.textContent = `update done in ${r.ms.toFixed(1)} ms`;
        dl.replaceChildren();
        out.replaceChildren(el("p", { class: "muted", text: "The update was applied." }));
        pollStatus();
        return;
      }
      const r = await runQuery(text, ctl.signal);
      addHistory(text, "query");
      if (ctl !== this.ctl) return;
      this.showResult(r, text);
    } catch (e) {
      if (e.name === "AbortError") return;
      info.textContent = "";
      out.replaceChildren();
      dl.replaceChildren();
      this.setError(e);
    } finally {
      if (ctl === this.ctl) $("run").disabled = false;
    }
  }

  showResult(r, text) {
    const info = $("results-info");
    const out = $("results");
    const dl = $("downloads");
    const ms = `${r.ms < 10 ? r.ms.toFixed(1) : Math.round(r.ms)} ms`;
    if (r.kind === "boolean") {
      info.textContent = `answer in ${ms}`;
      out.replaceChildren(el("p", { class: `boolean ${r.doc.boolean ? "yes" : "no"}`, text: r.doc.boolean ? "true" : "false" }));
      dl.replaceChildren(el("button", { type: "button", class: "ghost small",
        onclick: () => download("result.json", JSON.stringify(r.doc, null, 2), "application/sparql-results+json") },
      "JSON"));
      return;
    }
    if (r.kind === "graph") {
      const n = r.text.split("\n").filter((l) => l.trim() && !l.startsWith("@prefix")).length;
      info.textContent = `graph (Turtle, ${n} lines) in ${ms}`;
      out.replaceChildren(r.text.trim() ? turtleNode(r.text) : el("p", { class: "muted", text: "The graph is empty." }));
      dl.replaceChildren(el("button", { type: "button", class: "ghost small",
        onclick: () => download("result.ttl", r.text, "text/turtle") }, "Turtle"));
      return;
    }
    const doc = r.doc;
    const vars = doc.head.vars || [];
    const rows = doc.results.bindings;
    info.textContent = `${rows.length} row${rows.length === 1 ? "" : "s"} in ${ms}`;
    const prefixes = { ...KNOWN_PREFIXES, ...declaredPrefixes(text) };
    const table = new ResultTable({ vars, bindings: rows, prefixes, onExplore: (iri) => this.explore(iri),
      caption: "Query results" });
    out.replaceChildren(table.root);
    dl.replaceChildren(
      el("span", { class: "muted", text: "Download" }),
      el("button", { type: "button", class: "ghost small", onclick: () => download("result.csv", toCSV(doc), "text/csv") }, "CSV"),
      el("button", { type: "button", class: "ghost small",
        onclick: () => download("result.json", JSON.stringify(doc, null, 2), "application/sparql-results+json") }, "JSON"));
  }
}

function routeHash(qv) {
  const h = location.hash;
  // a shared link: fill the editor (never run: the text may be an update)
  for (const [key, tab] of [["#query=", "query"], ["#register=", "live"]]) {
    if (h.startsWith(key)) {
      let text = "";
      try {
        text = decodeURIComponent(h.slice(key.length));
      } catch {
        text = "";
      }
      history.replaceState(null, "", `#${tab}`);
      if (tab === "query") qv.fill(text);
      else views.live.fill(text);
      showTab(tab);
      return;
    }
  }
  if (h.startsWith("#describe=")) {
    qv.explore(decodeURIComponent(h.slice("#describe=".length)));
    history.replaceState(null, "", "#query");
    return;
  }
  const t = h.slice(1);
  if (TABS.includes(t)) showTab(t);
}

async function start() {
  setupTabs();
  setupToken();
  const qv = new QueryView();
  views.query = qv;
  views.live = new LiveView({ server, explore: (iri) => qv.explore(iri), showTab });
  views.streams = new StreamsView({ onStatus, openLive: (name) => { views.live.select(name); showTab("live"); } });
  window.addEventListener("hashchange", () => routeHash(qv));
  await pollStatus(); // whether reads need a token decides how the live view connects
  setInterval(pollStatus, 5000);
  if (location.hash) {
    routeHash(qv);
    document.documentElement.dataset.ready = "true";
  } else {
    // First visit: with continuous queries registered (e.g. `jindou serve --demo`), open their live view.
    getJSON("/queries").then((d) => d.queries.length > 0, () => false).then((live) => {
      if (!location.hash) showTab(live ? "live" : "query");
      document.documentElement.dataset.ready = "true";
    });
  }
}

start();
