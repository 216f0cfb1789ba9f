// The Jindou HTTP API as the dashboard uses it. The token (if any) lives in the
// tab's sessionStorage and goes out as "Authorization: Bearer <token>".

const TOKEN_KEY = "jindou.token";

export function getToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  } catch {
    return "";
  }
}

export function setToken(v) {
  try {
    if (v) sessionStorage.setItem(TOKEN_KEY, v);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    /* storage disabled: the token is then only kept for this page */
  }
}

/** An error answer of the server: status, kind, detail, and line/column of syntax errors. */
export class ApiError extends Error {
  constructor(status, body) {
    const detail = body && (typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail));
    super(detail || (body && body.error) || `HTTP ${status}`);
    this.status = status;
    this.kind = (body && body.error) || "http_error";
    this.line = body && body.line;
    this.column = body && body.column;
  }

  describe() {
    let s = this.message;
    if (this.line) s += ` (line ${this.line}${this.column ? `, column ${this.column}` : ""})`;
    if (this.status === 401) s += " — enter the server's token at the top right.";
    if (this.status === 403) s += " — the token was refused.";
    return s;
  }
}

export async function request(path, { method = "GET", body, headers = {}, accept, signal } = {}) {
  const h = { ...headers };
  const token = getToken();
  if (token) h.Authorization = `Bearer ${token}`;
  if (accept) h.Accept = accept;
  let r;
  try {
    r = await fetch(path, { method, body, headers: h, signal, cache: "no-store" });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, { error: "network", detail: `cannot reach the server (${e.message})` });
  }
  if (!r.ok) {
    let doc = null;
    const text = await r.text();
    try {
      doc = JSON.parse(text);
    } catch {
      doc = { error: "http_error", detail: text.slice(0, 500) || r.statusText };
    }
    throw new ApiError(r.status, doc);
  }
  return r;
}

export async function getJSON(path) {
  return (await request(path, { accept: "application/json" })).json();
}

const QUERY_ACCEPT = "application/sparql-results+json, text/turtle;q=0.9";

/** Run a one-shot query; returns {kind: "results"|"boolean"|"graph", doc|text, ms, contentType}. */
export async function runQuery(text, signal) {
  const t0 = performance.now();
  const r = await request("/sparql", {
    method: "POST", body: text, signal, accept: QUERY_ACCEPT,
    headers: { "Content-Type": "application/sparql-query" },
  });
  const ct = (r.headers.get("content-type") || "").split(";")[0].trim();
  if (ct.includes("json")) {
    const doc = await r.json();
    const ms = performance.now() - t0;
    return { kind: "boolean" in doc ? "boolean" : "results", doc, ms, contentType: ct };
  }
  const body = await r.text();
  return { kind: "graph", text: body, ms: performance.now() - t0, contentType: ct };
}

export async function runUpdate(text) {
  const t0 = performance.now();
  await request("/update", { method: "POST", body: text, headers: { "Content-Type": "application/sparql-update" } });
  return { kind: "update", ms: performance.now() - t0 };
}

export async function registerQuery(text) {
  const r = await request("/queries", {
    method: "POST", body: text, headers: { "Content-Type": "application/sparql-query" },
  });
  return r.json();
}

export async function deleteQuery(name) {
  await request(`/queries/${encodeURIComponent(name)}`, { method: "DELETE" });
}
