// Streams and server status: registered streams with rate, progress and lag,
// transient-store memory; store size, shards, queries, memory.

import { ApiError, getJSON } from "./api.js";
import { fmtMs } from "./chart.js";
import { el, keepFocus } from "./results.js";
import { fmtEventTime, isWallClock, rawTitle } from "./time.js";

const $ = (id) => document.getElementById(id);

export function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < u.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v < 10 && i ? v.toFixed(1) : Math.round(v)} ${u[i]}`;
}

const fmtInt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));

function fmtDuration(s) {
  if (s < 60) return `${Math.floor(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}


function sparkline(values, label) {
  const W = 120;
  const H = 26;
  const NS = "http://www.w3.org/2000/svg";
  const s = document.createElementNS(NS, "svg");
  s.setAttribute("viewBox", `0 0 ${W} ${H}`);
  s.setAttribute("width", W);
  s.setAttribute("height", H);
  s.setAttribute("class", "spark");
  s.setAttribute("role", "img");
  s.setAttribute("aria-label", label);
  if (values.length > 1) {
    const max = Math.max(1, ...values) * 1.25;
    const step = W / (values.length - 1);
    const pts = values.map((v, i) => `${(i * step).toFixed(1)},${(H - 2 - ((H - 4) * v) / max).toFixed(1)}`);
    const area = document.createElementNS(NS, "path");
    area.setAttribute("d", `M0,${H} L${pts.join(" L")} L${W},${H} Z`);
    area.setAttribute("class", "spark-area");
    const line = document.createElementNS(NS, "polyline");
    line.setAttribute("points", pts.join(" "));
    line.setAttribute("class", "spark-line");
    s.append(area, line);
  }
  return s;
}

export class StreamsView {
  constructor({ onStatus, openLive }) {
    this.openLive = openLive;
    this.samples = new Map(); // stream name -> [{at, accepted}]
    this.rates = new Map(); // stream name -> [rate, ...]
    this.timer = null;
    this.status = null;
    this.queries = [];
    onStatus((st) => {
      this.status = st;
    });
  }

  show() {
    this.poll();
    if (!this.timer) this.timer = setInterval(() => this.poll(), 2000);
  }

  hide() {
    clearInterval(this.timer);
    this.timer = null;
  }

  async poll() {
    let streams = null;
    let err = null;
    try {
      const [st, sd, qd] = await Promise.all([getJSON("/status"), getJSON("/streams"), getJSON("/queries")]);
      this.status = st;
      streams = sd.streams;
      this.queries = qd.queries;
    } catch (e) {
      err = e instanceof ApiError ? e.describe() : String(e);
    }
    if (err) {
      $("streams").replaceChildren(el("p", { class: "error-note", text: err }));
      return;
    }
    const now = performance.now();
    for (const s of streams) {
      const hist = this.samples.get(s.name) || [];
      hist.push({ at: now, accepted: s.accepted });
      while (hist.length > 2 && now - hist[0].at > 10000) hist.shift();
      this.samples.set(s.name, hist);
      const first = hist[0];
      const rate = hist.length > 1 && now > first.at ? ((s.accepted - first.accepted) * 1000) / (now - first.at) : null;
      s.rate = rate;
      if (rate !== null) {
        const r = this.rates.get(s.name) || [];
        r.push(rate);
        if (r.length > 40) r.shift();
        this.rates.set(s.name, r);
      }
    }
    this.drawStatus(streams);
    this.drawStreams(streams);
    this.drawQueries();
    $("status-updated").textContent = `updated ${new Date().toLocaleTimeString([], { hour12: false })}`;
  }

  drawStatus(streams) {
    const st = this.status;
    if (!st) return;
    const store = st.store || {};
    const transient = streams.reduce((a, s) => a + (s.bytes || 0), 0);
    const card = (label, value, sub, title) => el("div", { class: "card", title },
      el("span", { class: "label", text: label }), el("span", { class: "value", text: value }),
      sub ? el("span", { class: "sub", text: sub }) : null);
    const running = this.queries.length;
    const auth = st.auth ? `writes ${st.auth.writes} · reads ${st.auth.reads}` : "";
    $("status-cards").replaceChildren(
      card("Triples", fmtInt(store.triples), `${fmtInt(store.default_triples)} default · ${fmtInt(store.named_graphs)} named graphs`),
      card("Terms", fmtInt(store.terms), `dictionary ${fmtBytes(store.dictionary_bytes)}`),
      card("Shards", fmtInt(store.shards), `snapshot ${fmtInt(store.sn)}${store.persistent ? " · persistent" : " · in memory"}`),
      card("Store memory", fmtBytes(store.bytes), `graph ${fmtBytes(store.graph_bytes)} · dictionary ${fmtBytes(store.dictionary_bytes)}`),
      card("Stream memory", fmtBytes(transient), `transient store of ${streams.length} stream${streams.length === 1 ? "" : "s"}`),
      card("Process memory", fmtBytes((st.memory || {}).rss_bytes), `resident · peak ${fmtBytes((st.memory || {}).peak_rss_bytes)}`),
      card("One-shot queries", fmtInt(store.queries), `${fmtInt(st.queries_running)} running · ${fmtInt(store.updates)} updates`),
      card("Continuous queries", fmtInt(running), this.queries.map((q) => q.id).join(", ") || "none registered"),
      card("Uptime", fmtDuration(st.uptime_s || 0), `v${st.version} · ${auth}`, `Python ${st.python} · pid ${st.pid}`),
    );
  }

  drawQueries() {
    const host = $("cq-table");
    if (!this.queries.length) {
      host.replaceChildren(el("p", { class: "muted", text: "No continuous query is registered." }));
      return;
    }
    const head = ["Query", "Output", "Windows", "Instants evaluated", "Last evaluation", "Next instant"];
    keepFocus(host, () => host.replaceChildren(el("table", { class: "results streams" },
      el("caption", { class: "sr-only", text: "Registered continuous queries" }),
      el("thead", {}, el("tr", {}, head.map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, this.queries.map((q) => el("tr", { "data-query": q.id },
        el("th", { scope: "row" }, el("a", { href: "#live", class: "sname", text: q.id, "data-key": q.id,
          onclick: (ev) => { ev.preventDefault(); this.openLive(q.id); } })),
        el("td", { text: `${q.mode} ${q.form}` }),
        el("td", { class: "mono", text: q.windows.map((w) => `${w.stream} ${w.text}`).join(", ") }),
        el("td", { class: "num", text: fmtInt(q.evaluated) }),
        el("td", { class: "num", text: fmtMs(q.last_latency_ms) }),
        el("td", { text: fmtEventTime(q.next_instant) })))))));
  }

  drawStreams(streams) {
    if (!streams.length) {
      $("streams").replaceChildren(el("p", { class: "muted", text: "No stream is registered. Register one with PUT /streams/{name}." }));
      return;
    }
    const readers = (name) => this.queries.filter((q) => q.streams.includes(name)).map((q) => q.id);
    const head = ["Stream", "Clock", "Rate", "Accepted / rejected", "Progress (event time)", "Lag", "Window store", "Queries"];
    const table = el("table", { class: "results streams" },
      el("caption", { class: "sr-only", text: "Registered streams" }),
      el("thead", {}, el("tr", {}, head.map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, streams.map((s) => {
        const budget = s.budget_bytes || 0;
        const pct = budget ? Math.min(100, (100 * (s.bytes || 0)) / budget) : 0;
        // a lag behind the server's clock only means something for wall-clock event times
        const wall = s.progress === null || s.progress === undefined || isWallClock(s.progress);
        const lagBad = wall && s.lag_ms !== null && s.lag_ms !== undefined && s.lag_ms > 5000;
        return el("tr", { "data-stream": s.name },
          el("th", { scope: "row" }, el("div", { class: "sname", text: s.name }), el("div", { class: "sub mono", text: s.iri })),
          el("td", { text: s.clock }),
          el("td", {}, el("div", { class: "num", text: s.rate === null ? "measuring…" : `${s.rate.toFixed(1)} triples/s` }),
            sparkline(this.rates.get(s.name) || [], `rate of stream ${s.name} over the last minute`)),
          el("td", { class: "num" }, el("div", { text: fmtInt(s.accepted) }),
            el("div", { class: s.rejected ? "sub error-note" : "sub", text: `${fmtInt(s.rejected)} rejected` })),
          el("td", { title: rawTitle(s.progress) }, el("div", { text: fmtEventTime(s.progress) }),
            el("div", { class: "sub", text: s.published !== undefined && s.published !== s.progress
              ? `published ${fmtEventTime(s.published)}` : "published = progress" })),
          el("td", { class: lagBad ? "num warn" : "num", text: !wall ? "– (not wall-clock)" : s.lag_ms === undefined ? "–" : fmtMs(s.lag_ms),
            title: wall ? "server clock − progress" : "the event times are small values, not wall-clock: no lag to measure" }),
          el("td", {}, el("div", { text: `${fmtBytes(s.bytes)} · ${fmtInt(s.triples_in_window_store)} triples` }),
            budget ? el("div", { class: "meter", role: "meter", "aria-valuemin": "0", "aria-valuemax": String(budget),
              "aria-valuenow": String(s.bytes || 0), "aria-label": `memory of ${s.name} of its budget`,
              title: `${pct.toFixed(1)} % of the ${fmtBytes(budget)} budget` },
            el("span", { style: `width:${Math.max(pct, 0.5).toFixed(1)}%` })) : null,
            budget ? el("div", { class: "sub", text: `of ${fmtBytes(budget)} budget` }) : null),
          el("td", { text: readers(s.name).join(", ") || "–" }));
      })));
    $("streams").replaceChildren(table);
  }
}
