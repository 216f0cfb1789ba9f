// The result feed of one continuous query (GET /queries/{name}/results).
//
// EventSource is used whenever reads need no token: the browser then
// reconnects by itself and sends Last-Event-ID, so no instant is lost. An
// EventSource cannot send an Authorization header, so with a read token the
// feed reads the same text/event-stream with fetch() and does the reconnect
// (with the Last-Event-ID header) itself. Resuming after a pause uses
// ?from=<last id + 1>, the replay the API offers for a new connection; a first
// connection may replay recent history with ?from=<t>.

import { getToken } from "./api.js";

export class Feed {
  /**
   * @param {string} name  query name
   * @param {{onEvent:(type:string, id:number|null, data:string)=>void, onState:(s:string, detail?:string)=>void}} h
   * @param {{useFetch?: boolean}} opts
   */
  constructor(name, h, opts = {}) {
    this.name = name;
    this.h = h;
    this.useFetch = !!opts.useFetch;
    this.lastId = null;
    this.es = null;
    this.abort = null;
    this.closed = true;
    this.retry = null;
  }

  url(fromT) {
    const base = `/queries/${encodeURIComponent(this.name)}/results`;
    return fromT !== null && fromT !== undefined ? `${base}?from=${fromT}` : base;
  }

  /**
   * Connect. With resumeAfter: resume right after that instant; else with fromT: replay the
   * retained instants from fromT on; else start at the next instant.
   */
  open(resumeAfter = null, fromT = null) {
    this.close();
    this.closed = false;
    this.lastId = resumeAfter;
    const from = resumeAfter !== null ? resumeAfter + 1 : fromT;
    if (this.useFetch) this.openFetch(from, false);
    else this.openEventSource(from);
  }

  openEventSource(fromT) {
    const es = new EventSource(this.url(fromT));
    this.es = es;
    this.h.onState("connecting");
    es.onopen = () => this.h.onState("live");
    es.onerror = () => {
      if (this.es !== es) return;
      if (es.readyState === EventSource.CLOSED) {
        // the server answered with an error (e.g. the query is gone): no automatic retry
        this.h.onState("closed", "the server closed the result stream");
        this.es = null;
      } else {
        this.h.onState("reconnecting", "connection lost; the browser reconnects with Last-Event-ID");
      }
    };
    const pass = (type) => (ev) => {
      if (this.es !== es) return;
      const id = ev.lastEventId ? Number(ev.lastEventId) : null;
      if (type === "result" && id !== null) this.lastId = id;
      this.h.onEvent(type, id, ev.data);
      if (type === "end") {
        es.close();
        this.es = null;
        this.closed = true;
        this.h.onState("ended", "the query was deleted");
      }
    };
    for (const t of ["result", "gap", "end", "error"]) es.addEventListener(t, pass(t));
  }

  async openFetch(fromT, reconnect) {
    const ctl = new AbortController();
    this.abort = ctl;
    this.h.onState(reconnect ? "reconnecting" : "connecting");
    const headers = { Accept: "text/event-stream" };
    const token = getToken();
    if (token) headers.Authorization = `Bearer ${token}`;
    let url = this.url(null);
    if (this.lastId !== null) headers["Last-Event-ID"] = String(this.lastId);
    else if (fromT !== null) url = this.url(fromT);
    try {
      const r = await fetch(url, { headers, signal: ctl.signal, cache: "no-store" });
      if (!r.ok) {
        let detail = `HTTP ${r.status}`;
        try { detail = (await r.json()).detail || detail; } catch { /* not JSON */ }
        this.h.onState("closed", detail);
        this.closed = true;
        return;
      }
      this.h.onState("live");
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      let ev = { type: "message", id: null, data: [] };
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let nl;
        while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + (buf.startsWith("\r\n", nl) ? 2 : 1));
          if (line === "") {
            if (ev.data.length) {
              const id = ev.id !== null ? Number(ev.id) : null;
              if (ev.type === "result" && id !== null) this.lastId = id;
              this.h.onEvent(ev.type, id, ev.data.join("\n"));
              if (ev.type === "end") {
                this.closed = true;
                ctl.abort();
                this.h.onState("ended", "the query was deleted");
                return;
              }
            }
            ev = { type: "message", id: null, data: [] };
          } else if (!line.startsWith(":")) {
            const c = line.indexOf(":");
            const field = c < 0 ? line : line.slice(0, c);
            const val = c < 0 ? "" : line.slice(c + 1).replace(/^ /, "");
            if (field === "event") ev.type = val;
            else if (field === "data") ev.data.push(val);
            else if (field === "id") ev.id = val;
          }
        }
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
    }
    if (!this.closed && this.abort === ctl) {
      this.h.onState("reconnecting", "connection lost; reconnecting with Last-Event-ID");
      this.retry = setTimeout(() => this.openFetch(null, true), 1500);
    }
  }

  close() {
    this.closed = true;
    if (this.retry) clearTimeout(this.retry);
    this.retry = null;
    if (this.es) this.es.close();
    this.es = null;
    if (this.abort) this.abort.abort();
    this.abort = null;
  }
}
