// Drives the Jindou dashboard in a real browser (Debian's chromium through
// playwright-core; no browser is ever downloaded) against a running
// `jindou serve --demo`, and prints one JSON document with what it saw.
//
//   node dashboard.test.mjs --url http://127.0.0.1:8000 [--screenshots DIR] [--timeout 60000] [--viewport 1440x900]
//   node dashboard.test.mjs --url ... --token T   (a server started with --token T --read-token T:
//                                                  the token field, then a query and live windows)
//
// Exit status 0 when every check passed, 1 otherwise (the JSON says which).
// tests/test_dashboard_browser.py starts the server and asserts on the JSON.

import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { createConnection, createServer } from "node:net";
import { join } from "node:path";
import { chromium } from "playwright-core";

function parseArgs(argv) {
  const out = { url: null, screenshots: null, timeout: 60000, token: null, viewport: { width: 1440, height: 900 },
    chromium: process.env.JINDOU_CHROMIUM || "/usr/bin/chromium" };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === "--url") out.url = next();
    else if (a === "--screenshots") out.screenshots = next();
    else if (a === "--timeout") out.timeout = Number(next());
    else if (a === "--chromium") out.chromium = next();
    else if (a === "--token") out.token = next();
    else if (a === "--viewport") {
      const m = /^(\d+)x(\d+)$/.exec(next());
      if (!m) throw new Error("--viewport is WIDTHxHEIGHT, e.g. 1280x800");
      out.viewport = { width: Number(m[1]), height: Number(m[2]) };
    }
    else throw new Error(`unknown argument ${a}`);
  }
  if (!out.url) throw new Error("--url is required");
  if (!(out.timeout > 0)) throw new Error("--timeout must be a positive number of ms");
  return out;
}

class Done extends Error {}

/**
 * A TCP proxy to the server that can cut every open connection at once (a network
 * drop, as the browser sees it) and records what the browser sends (to read request heads).
 */
function startProxy(target) {
  const { hostname, port } = new URL(target);
  const sockets = new Set();
  const heads = [];
  const server = createServer((client) => {
    const upstream = createConnection({ host: hostname, port: Number(port) });
    sockets.add(client);
    sockets.add(upstream);
    const seen = { text: "" };
    heads.push(seen);
    client.on("data", (chunk) => {
      if (seen.text.length < 1 << 20) seen.text += chunk.toString("latin1");
    });
    client.pipe(upstream);
    upstream.pipe(client);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on("error", drop);
    upstream.on("error", drop);
    client.on("close", drop);
    upstream.on("close", drop);
  });
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => resolve({
      url: `http://127.0.0.1:${server.address().port}`,
      /** request heads sent through the proxy (GET requests carry no body) */
      heads: () => heads.flatMap((h) => h.text.split("\r\n\r\n")).filter((h) => /^[A-Z]+ \S+ HTTP\/1\.1\r\n/.test(h)),
      cutAll() {
        const n = sockets.size;
        for (const s of sockets) s.destroy();
        sockets.clear();
        return n;
      },
      close() {
        for (const s of sockets) s.destroy();
        return new Promise((r) => server.close(() => r()));
      },
    }));
  });
}

const opts = parseArgs(process.argv.slice(2));
const report = {
  url: opts.url, checks: {}, rows: 0, sortedColumn: null, describeLines: 0, syntaxError: null,
  liveWindows: 0, liveWindowsAfterResume: 0, liveState: null, registered: null, streams: [],
  consoleErrors: [], pageErrors: [], screenshots: [], failed: null,
};
const check = (name, ok, detail) => {
  report.checks[name] = { ok: !!ok, detail };
  if (!ok) throw new Error(`check ${name} failed: ${detail}`);
};

const profile = mkdtempSync(join(tmpdir(), "jindou-chromium-"));
let context;
let proxy;
let failurePage = null; // screenshot of the page when a check fails (with --screenshots)
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: opts.chromium,
    headless: true,
    chromiumSandbox: false,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
      "--disable-dev-shm-usage"],
    viewport: opts.viewport,
    deviceScaleFactor: 1,
    acceptDownloads: true,
    timezoneId: "UTC",
    locale: "en-GB",
  });
  context.setDefaultTimeout(opts.timeout);
  const page = context.pages()[0] || (await context.newPage());
  failurePage = page;
  // Only the dashboard's own server may be contacted: anything else fails the run.
  const origin = new URL(opts.url).origin;
  proxy = await startProxy(opts.url);
  const proxyOrigin = new URL(proxy.url).origin;
  const foreign = [];
  await context.route("**/*", (route) => {
    const u = route.request().url();
    if (u.startsWith(origin) || u.startsWith(proxyOrigin) || u.startsWith("data:") || u.startsWith("blob:")) {
      return route.continue();
    }
    foreign.push(u);
    return route.abort();
  });
  // Console errors fail the run, except the one line Chromium itself logs for the 400 answer
  // the syntax-error step asks for on purpose ("Failed to load resource: ... 400").
  let phase = "load";
  page.on("console", (msg) => {
    if (msg.type() !== "error") return;
    const text = msg.text();
    if ((phase === "syntax-error" && /Failed to load resource: .*status of 400/.test(text)) ||
        (phase === "conflict" && /Failed to load resource: .*status of 409/.test(text)) ||
        (phase === "token-missing" && /Failed to load resource: .*status of 401/.test(text))) {
      report.expectedConsoleErrors = (report.expectedConsoleErrors || 0) + 1;
      return;
    }
    report.consoleErrors.push(`[${phase}] ${text}`);
  });
  page.on("pageerror", (err) => report.pageErrors.push(String(err && err.stack ? err.stack : err)));

  const shot = async (name) => {
    if (!opts.screenshots) return;
    mkdirSync(opts.screenshots, { recursive: true });
    const path = join(opts.screenshots, `${name}.png`);
    await page.screenshot({ path, fullPage: false });
    report.screenshots.push(path);
  };

  if (opts.token) {
    // ---------------------------------------------------------------- token-protected server
    phase = "token-missing";
    await page.goto(opts.url + "/", { waitUntil: "load" });
    await page.waitForSelector("html[data-ready='true']");
    await page.waitForSelector("#conn.bad");
    report.tokenState = await page.locator("#conn").textContent();
    check("token-needed", report.tokenState === "token needed", report.tokenState);
    await page.locator("#token").fill(opts.token);
    await page.locator("#token").press("Enter");
    await page.waitForSelector("#conn.ok");
    phase = "token";
    report.tokenStored = await page.evaluate(() => sessionStorage.getItem("jindou.token"));
    check("token-stored", report.tokenStored === opts.token, "sessionStorage");
    await page.locator("#tab-query").click();
    await page.locator("#query-text").fill("SELECT ?s ?p ?o WHERE { ?s ?p ?o } LIMIT 30");
    await page.locator("#query-text").press("Control+Enter");
    await page.waitForSelector("#results table.results tbody tr");
    report.rows = await page.locator("#results table.results tbody tr").count();
    check("rows", report.rows === 30, `${report.rows} rows`);
    // reads need the token: the live view reads the event stream with fetch + Authorization
    await page.locator("#tab-live").click();
    await page.waitForSelector("#cq-list button[data-query='demo'][aria-current='true']");
    await page.waitForFunction(() => document.querySelectorAll("#live-windows button.win").length >= 2);
    report.liveWindows = await page.locator("#live-windows button.win").count();
    report.liveState = await page.locator("#live-conn").textContent();
    check("live-windows", report.liveState === "live", `${report.liveWindows} windows, ${report.liveState}`);
    // the token survives a reload of the tab (session storage), and the page works at once
    await page.reload({ waitUntil: "load" });
    await page.waitForSelector("#conn.ok");
    check("token-reload", (await page.locator("#token").inputValue()) === opts.token, "token field after reload");
    throw new Done();
  }

  // ---------------------------------------------------------------- load
  await page.goto(opts.url + "/", { waitUntil: "load" });
  await page.waitForSelector("html[data-ready='true']");
  await page.waitForSelector("#conn.ok");
  check("loaded", true, await page.title());

  // ---------------------------------------------------------------- the page's helpers, in the browser
  phase = "units";
  report.units = await page.evaluate(async () => {
    const sp = await import("/static/js/sparql.js");
    const rs = await import("/static/js/results.js");
    const out = {};
    const kinds = (t) => sp.tokenize(t).filter((x) => x.kind !== "ws").map((x) => `${x.kind}:${x.text}`);
    out.tokens = kinds('SELECT ?x WHERE { ?x a ex:T ; ex:v "a\\"b"@en , 1.5e3 } # c');
    out.tokensCsparql = kinds("FROM STREAM <http://s> [RANGE 10s STEP 500ms]");
    out.covers = sp.tokenize("PREFIX : <x>\nASK{?a<=?b}").map((x) => x.text).join("") === "PREFIX : <x>\nASK{?a<=?b}";
    out.ops = ["PREFIX r: <http://x/>\nREGISTER ISTREAM QUERY q AS SELECT * WHERE {}", "# c\nINSERT DATA {}",
      "BASE <http://b/> CONSTRUCT WHERE {}", "describe <x>", "ASK {}", "WITH <g> DELETE {} WHERE {}",
      "SELECT * {}"].map(sp.operationOf);
    out.name = sp.registeredName("REGISTER DSTREAM QUERY my.q-1 AS SELECT * WHERE {}");
    out.prefixes = sp.declaredPrefixes("PREFIX a: <http://a/> # PREFIX b: <http://b/>\nprefix : <http://d/>");
    const sh = new sp.Shortener({ a: "http://a/", ab: "http://a/b/" });
    out.short = ["http://a/x", "http://a/b/y", "http://a/b/", "http://a/x/y", "http://c/"].map((i) => sh.shorten(i));
    const I = "http://www.w3.org/2001/XMLSchema#integer";
    const vals = [{ type: "literal", value: "10", datatype: I }, { type: "literal", value: "9", datatype: I },
      { type: "uri", value: "http://z" }, undefined];
    // (indices: Array.sort never hands undefined to a comparator; the table sorts indices too)
    out.sorted = [0, 1, 2, 3].sort((a, b) => sp.compareTerms(vals[a], vals[b])).map((i) => (vals[i] ? vals[i].value : "unbound"));
    out.csv = rs.toCSV({ head: { vars: ["a", "b"] }, results: { bindings: [
      { a: { type: "literal", value: 'say "hi", then\ngo' }, b: { type: "bnode", value: "b0" } }, { b: { type: "uri", value: "http://x" } }] } });
    return out;
  });
  const u = report.units;
  check("units-tokenize", JSON.stringify(u.tokens) === JSON.stringify(["keyword:SELECT", "var:?x", "keyword:WHERE",
    "punct:{", "var:?x", "keyword:a", "pname:ex:T", "punct:;", "pname:ex:v", 'string:"a\\"b"', "lang:@en", "punct:,",
    "number:1.5e3", "punct:}", "comment:# c"]) && u.covers, JSON.stringify(u.tokens));
  check("units-csparql", JSON.stringify(u.tokensCsparql) === JSON.stringify(["keyword:FROM", "keyword:STREAM",
    "iri:<http://s>", "punct:[", "keyword:RANGE", "duration:10s", "keyword:STEP", "duration:500ms", "punct:]"]),
  JSON.stringify(u.tokensCsparql));
  check("units-operation", JSON.stringify(u.ops) === JSON.stringify(["register", "update", "construct", "describe",
    "ask", "update", "select"]) && u.name === "my.q-1", JSON.stringify([u.ops, u.name]));
  check("units-prefixes", JSON.stringify(u.prefixes) === JSON.stringify({ a: "http://a/", "": "http://d/" }),
    JSON.stringify(u.prefixes));
  check("units-shorten", JSON.stringify(u.short) === JSON.stringify(["a:x", "ab:y", "ab:", null, null]), JSON.stringify(u.short));
  check("units-sort", JSON.stringify(u.sorted) === JSON.stringify(["unbound", "http://z", "9", "10"]), JSON.stringify(u.sorted));
  check("units-csv", u.csv === 'a,b\r\n"say ""hi"", then\ngo",_:b0\r\n,http://x\r\n', JSON.stringify(u.csv));

  // ---------------------------------------------------------------- first visit: the demo query, live
  phase = "demo-live";
  await page.waitForSelector("#tab-live[aria-selected='true']");
  await page.waitForSelector("#cq-list button[data-query='demo'][aria-current='true']");
  await page.waitForFunction(() => document.querySelectorAll("#live-windows button.win").length >= 1);
  report.demoWindows = await page.locator("#live-windows button.win").count();
  check("demo-live", report.demoWindows >= 1, `${report.demoWindows} windows of the demo query`);
  await page.locator("#tab-query").click();
  phase = "query";

  // ---------------------------------------------------------------- one-shot query
  const editor = page.locator("#query-text");
  await editor.fill(`PREFIX sosa: <http://www.w3.org/ns/sosa/>
PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#>
SELECT ?sensor ?label ?place WHERE {
  ?sensor sosa:isHostedBy ?place ; rdfs:label ?label .
}
ORDER BY ?sensor`);
  await editor.press("Control+Enter");
  await page.waitForSelector("#results table.results tbody tr");
  report.rows = await page.locator("#results table.results tbody tr").count();
  const info = await page.locator("#results-info").textContent();
  check("rows", report.rows > 0, `${report.rows} rows shown; ${info}`);
  // IRIs are shortened with the prefixes and are DESCRIBE links
  const firstIri = (await page.locator("#results a.iri").first().textContent()) || "";
  check("iri-shortened", /^city:sensor\d+$/.test(firstIri), firstIri);
  // sorting by a column
  await page.locator("#results th button.sort", { hasText: "?label" }).click();
  report.sortedColumn = await page.locator("#results th[aria-sort='ascending']").textContent();
  check("sortable", (report.sortedColumn || "").includes("label"), report.sortedColumn);
  // paging: more rows than one page?
  const pager = await page.locator("#results .pager .pageinfo").count();
  report.paged = pager > 0 ? await page.locator("#results .pager .pageinfo").textContent() : "one page";
  await shot("query-results");

  // history (localStorage) and a shareable link that fills the editor (and does not run it)
  phase = "history";
  const ran = await editor.inputValue();
  const hist = await page.evaluate(() => JSON.parse(localStorage.getItem("jindou.history") || "[]"));
  check("history-stored", hist.length >= 1 && hist[0].text === ran, `${hist.length} entries`);
  await page.locator("#share").click();
  const link = await page.locator("#share-url").inputValue();
  check("share-link", link.startsWith(`${origin}/#query=`) && decodeURIComponent(link.split("#query=")[1]) === ran, link.slice(0, 80));
  const shared = await context.newPage();
  shared.on("pageerror", (err) => report.pageErrors.push(String(err && err.stack ? err.stack : err)));
  await shared.goto(link, { waitUntil: "load" });
  await shared.waitForSelector("html[data-ready='true']");
  check("share-opens", (await shared.locator("#query-text").inputValue()) === ran &&
    (await shared.locator("#tab-query").getAttribute("aria-selected")) === "true" &&
    ((await shared.locator("#results-info").textContent()) || "") === "", "editor filled, not run");
  // the other tab sees the same history; choosing an entry fills the editor
  await shared.locator("#query-text").fill("ASK { ?s ?p ?o }");
  await shared.selectOption("#history", "0");
  check("history-choose", (await shared.locator("#query-text").inputValue()) === ran, "history entry 0");
  await shared.close();

  // explore a resource: DESCRIBE, shown as Turtle
  await page.locator("#results a.iri").first().click();
  await page.waitForSelector("#results pre.turtle");
  const ttl = (await page.locator("#results pre.turtle").textContent()) || "";
  report.describeLines = ttl.split("\n").filter((l) => l.trim()).length;
  check("describe", /sosa:isHostedBy|isHostedBy/.test(ttl) && (await editor.inputValue()).startsWith("DESCRIBE <"),
    `${report.describeLines} Turtle lines`);
  await page.locator("#back").click();
  await page.waitForSelector("#results table.results tbody tr");

  // downloads of a SELECT result
  const [csv] = await Promise.all([page.waitForEvent("download"), page.locator("#downloads button", { hasText: "CSV" }).click()]);
  check("download-csv", csv.suggestedFilename() === "result.csv", csv.suggestedFilename());

  // a syntax error is shown with its line and column
  phase = "syntax-error";
  await editor.fill("SELECT * WHERE {\n  ?s ?p\n}");
  await editor.press("Control+Enter");
  await page.waitForSelector("#query-error:not([hidden])");
  report.syntaxError = await page.locator("#query-error").textContent();
  check("syntax-error", /Line 3, column \d+/.test(report.syntaxError || "") ||
    /Line \d+, column \d+/.test(report.syntaxError || ""), report.syntaxError);
  check("error-marked", (await page.locator("#query-editor .editor-gutter span.error").count()) === 1, "gutter mark");

  // prefix completion: in a PREFIX declaration, and an undeclared known prefix is declared on ":"
  phase = "completion";
  await editor.fill("");
  await editor.pressSequentially("PREFIX fo");
  await page.waitForSelector("#query-editor .completion li[aria-selected='true']");
  await editor.press("Enter");
  await editor.press("Enter");
  await editor.pressSequentially("SELECT ?p WHERE { ?p a schema:");
  const completed = await editor.inputValue();
  report.completion = completed;
  check("prefix-completion", completed.startsWith("PREFIX foaf: <http://xmlns.com/foaf/0.1/>\n") &&
    completed.includes("PREFIX schema: <http://schema.org/>\n") && completed.endsWith("?p a schema:"), completed);
  await editor.pressSequentially("Place }");
  await editor.press("Control+Enter");
  await page.waitForSelector("#results-info:has-text('rows in')");
  phase = "continuous";

  // ---------------------------------------------------------------- continuous query
  await page.locator("#tab-live").click();
  await page.waitForSelector("#view-live:not([hidden])");
  phase = "register-form";
  const proposed = async () => (await page.locator("#register-text").inputValue()).match(/REGISTER QUERY (\S+)/)[1];
  const listed = async () => page.evaluate(async () => (await (await fetch("/queries")).json()).queries.map((q) => q.id));
  const first = await proposed();
  check("default-name-free", first !== "busy" && !(await listed()).includes(first), first);
  // someone registered the proposed name (and the README's `busy`): the form proposes another free one
  const registerText = (text) => page.evaluate(async (t) => (await fetch("/queries", { method: "POST", body: t,
    headers: { "Content-Type": "application/sparql-query" } })).status, text);
  const readmeQuery = `REGISTER QUERY busy AS SELECT ?road (COUNT(*) AS ?n)
  FROM STREAM cars [RANGE 10s STEP 2s] WHERE { ?car <http://ex.org/on> ?road } GROUP BY ?road`;
  const st = await page.evaluate(async () => (await fetch("/streams/cars", { method: "PUT",
    headers: { "Content-Type": "application/json" }, body: JSON.stringify({ iri: "http://ex.org/stream/cars", absorb: "none" }) })).status);
  check("readme-setup", st === 201 && (await registerText(readmeQuery)) === 201 &&
    (await registerText((await page.locator("#register-text").inputValue()))) === 201, `stream ${st}`);
  await page.locator("#cq-refresh").click();
  await page.waitForFunction((n) => !document.querySelector("#register-text").value.includes(`QUERY ${n} AS`), first);
  const second = await proposed();
  check("default-name-fresh", second !== "busy" && second !== first && !(await listed()).includes(second), `${first} -> ${second}`);
  // a taken name (the README's example) answers 409, and the form offers a free one
  phase = "conflict";
  await page.locator("#register-text").fill(readmeQuery);
  await page.locator("#register").click();
  await page.waitForSelector("#register-rename");
  const renameText = await page.locator("#register-rename").textContent();
  check("conflict-rename", /409/.test(await page.locator("#register-error").textContent()) && /busy_2/.test(renameText), renameText);
  await page.locator("#register-rename").click();
  await page.waitForSelector("#cq-list button[data-query='busy_2'][aria-current='true']");
  phase = "continuous";
  const name = `browser_${Date.now().toString(36)}`;
  report.registered = name;
  await page.locator("#register-text").fill(`PREFIX sosa: <http://www.w3.org/ns/sosa/>
PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#>
REGISTER QUERY ${name} AS
SELECT ?property (COUNT(?obs) AS ?readings) (MAX(?value) AS ?max)
FROM STREAM <http://jindou.example/city/stream/sensors> [RANGE 5s STEP 1s]
FROM <urn:jindou:default>
WHERE {
  GRAPH <http://jindou.example/city/stream/sensors> { ?obs sosa:observedProperty ?p ; sosa:hasSimpleResult ?value . }
  ?p rdfs:label ?property .
}
GROUP BY ?property
ORDER BY ?property`);
  // room and wrapping: the long lines wrap (no sideways scrolling), the line numbers follow
  const formBox = await page.evaluate(() => {
    const ta = document.querySelector("#register-text");
    ta.scrollTop = ta.scrollHeight;
    const pre = document.querySelector("#register-editor .editor-highlight");
    const gutter = [...document.querySelectorAll("#register-editor .editor-gutter span")];
    const lines = [...pre.querySelectorAll(".ln")];
    return { width: ta.getBoundingClientRect().width, sideways: ta.scrollWidth - ta.clientWidth, scrolled: ta.scrollTop,
      lines: lines.length, gutter: gutter.length, tall: lines.filter((l) => l.offsetHeight > 25).length,
      aligned: lines.every((l, i) => Math.abs(l.offsetHeight - gutter[i].offsetHeight) < 1) };
  });
  report.registerForm = formBox;
  check("register-room", formBox.width >= 320 && formBox.sideways <= 0 && formBox.tall >= 1 && formBox.aligned &&
    formBox.lines === formBox.gutter, JSON.stringify(formBox));
  await page.locator("#register").click();
  await page.waitForSelector(`#cq-list button[data-query='${name}'][aria-current='true']`);
  // live window events arrive through the EventSource
  await page.waitForFunction(() => document.querySelectorAll("#live-windows button.win").length >= 3);
  report.liveWindows = await page.locator("#live-windows button.win").count();
  report.liveState = await page.locator("#live-conn").textContent();
  check("live-windows", report.liveWindows >= 3 && report.liveState === "live",
    `${report.liveWindows} windows, state ${report.liveState}`);
  await page.waitForSelector("#live-table table.results tbody tr");
  const liveRows = await page.locator("#live-table table.results tbody tr").count();
  check("live-rows", liveRows > 0, `${liveRows} rows in the latest window`);
  check("chart", (await page.locator("#live-chart svg rect.bar").count()) >= 3, "bars in the chart");
  const scrolledBack = await page.evaluate(() => {
    const ta = document.querySelector("#register-text");
    return [ta.scrollTop, ta.scrollLeft];
  });
  check("register-scroll-reset", scrolledBack[0] === 0 && scrolledBack[1] === 0, JSON.stringify(scrolledBack));
  // the live table's sort order survives the arrival of the next windows
  await page.locator("#live-table th button.sort", { hasText: "?readings" }).click();
  const nSorted = await page.locator("#live-windows button.win").count();
  await page.waitForFunction((n) => document.querySelectorAll("#live-windows button.win").length >= n + 1, nSorted);
  const liveSort = await page.locator("#live-table th[aria-sort='ascending']").textContent();
  check("live-sort-kept", (liveSort || "").includes("readings"), liveSort);

  // pause, then resume: the windows missed while paused are replayed (no gap)
  await page.locator("#live-pause").click();
  check("paused", (await page.locator("#live-conn").textContent()) === "paused", "state after Pause");
  const before = await page.evaluate(() => document.querySelectorAll("#live-windows button.win").length);
  await page.waitForTimeout(2500);
  check("paused-quiet", (await page.locator("#live-windows button.win").count()) === before, "no window while paused");
  await page.locator("#live-pause").click();
  await page.waitForFunction((n) => document.querySelectorAll("#live-windows button.win").length >= n + 3, before);
  report.liveWindowsAfterResume = await page.locator("#live-windows button.win").count();
  // consecutive window ends: 1 s apart, none missing across the pause
  const ends = await page.evaluate(() => [...document.querySelectorAll("#live-windows .range")]
    .map((e) => e.textContent.split("→")[1].trim()));
  report.windowEnds = ends.slice(0, 8);
  const secs = ends.map((t) => {
    const [h, m, s] = t.split(":");
    return Number(h) * 3600 + Number(m) * 60 + Number(s);
  });
  const contiguous = secs.slice(1).every((v, i) => Math.abs(secs[i] - v - 1) < 0.01 || secs[i] - v < -86000);
  check("resume-contiguous", contiguous, ends.slice(0, 10).join(" "));
  // let more windows arrive for a fuller chart, then screenshot
  await page.waitForFunction(() => document.querySelectorAll("#live-windows button.win").length >= 12);
  // the line is the server's evaluation time, labelled; the bars show a chosen column
  await page.waitForFunction(() => document.querySelectorAll("#live-chart circle.dot").length >= 2);
  const legend = await page.locator("#live-chart-controls + #live-chart + figcaption").textContent();
  check("chart-labels", /evaluation time of the window on the server/.test(legend) &&
    (await page.locator("#live-chart .axis-title.lat").textContent()) === "evaluation", legend);
  const columns = await page.locator("#live-bars option").evaluateAll((os) => os.map((o) => o.value));
  check("bar-columns", columns.includes("") && columns.includes("readings") && columns.includes("max"), JSON.stringify(columns));
  await page.selectOption("#live-bars", "readings");
  await page.selectOption("#live-agg", "sum");
  const bars = await page.evaluate(() => {
    const vals = [...document.querySelectorAll("#live-chart rect.bar")].map((r) => Number(r.dataset.value));
    const head = [...document.querySelectorAll("#live-table thead th")].map((t) => t.textContent);
    const col = head.findIndex((h) => h.includes("?readings"));
    const sum = [...document.querySelectorAll("#live-table tbody tr")]
      .reduce((a, tr) => a + Number(tr.children[col].textContent), 0);
    return { last: vals[vals.length - 1], sum, n: vals.length, distinct: new Set(vals).size,
      title: document.querySelector("#live-chart .axis-title.rows").textContent };
  });
  report.bars = bars;
  check("bar-values", bars.last === bars.sum && bars.title === "sum of ?readings", JSON.stringify(bars));
  await shot("continuous-live");

  // ---------------------------------------------------------------- a dropped connection
  // Through the proxy: cut every connection; the EventSource reconnects by itself and
  // sends Last-Event-ID, and the windows go on without a missing instant.
  phase = "reconnect";
  const page2 = await context.newPage();
  page2.on("console", (msg) => {
    if (msg.type() === "error" && !/net::ERR_|Failed to load resource/.test(msg.text())) {
      report.consoleErrors.push(`[reconnect] ${msg.text()}`);
    }
  });
  page2.on("pageerror", (err) => report.pageErrors.push(String(err && err.stack ? err.stack : err)));
  await page2.goto(proxy.url + "/#live", { waitUntil: "load" });
  await page2.locator(`#cq-list button[data-query='${name}']`).click();
  await page2.waitForFunction(() => document.querySelectorAll("#live-windows button.win").length >= 2);
  await page2.evaluate(() => {
    window.__states = [];
    const c = () => document.querySelector("#live-conn");
    new MutationObserver(() => window.__states.push(c() && c().textContent))
      .observe(document.querySelector("#live-view"), { subtree: true, childList: true, characterData: true });
  });
  const lastBefore = await page2.evaluate(() => document.querySelectorAll("#live-windows button.win").length);
  report.cutConnections = proxy.cutAll();
  await page2.waitForFunction((n) => document.querySelectorAll("#live-windows button.win").length >= n + 3, lastBefore);
  const states = await page2.evaluate(() => window.__states);
  const resumed = proxy.heads().filter((h) => h.includes(`/queries/${name}/results`) && /^last-event-id: \d+$/im.test(h));
  report.reconnectStates = [...new Set(states)];
  report.lastEventIdRequests = resumed.length;
  check("reconnect-last-event-id", resumed.length >= 1 && states.includes("reconnecting"),
    `${report.cutConnections} sockets cut; states ${report.reconnectStates.join(",")}; ${resumed.length} resumed requests`);
  const ends2 = await page2.evaluate(() => [...document.querySelectorAll("#live-windows .range")]
    .map((e) => e.textContent.split("→")[1].trim()));
  const secs2 = ends2.map((t) => t.split(":").reduce((a, v) => a * 60 + Number(v), 0));
  check("reconnect-contiguous", secs2.slice(1).every((v, i) => secs2[i] - v === 1 || secs2[i] - v < -86000),
    ends2.slice(0, 10).join(" "));
  await page2.close();

  // ---------------------------------------------------------------- the README's stream example
  // Its event times are small (t = 1000 ms): not wall-clock. No 1970 dates, no decades of lag.
  phase = "relative-time";
  await page.evaluate(async () => {
    await fetch("/streams/cars", { method: "POST", headers: { "Content-Type": "application/x-ndjson" },
      body: '{"s":"<http://ex.org/c1>","p":"<http://ex.org/on>","o":"<http://ex.org/r9>","t":1000}\n' });
    await fetch("/streams/cars/progress?t=5000", { method: "POST" });
  });
  await page.locator("#cq-list button[data-query='busy']").click();
  await page.waitForSelector("#cq-list button[data-query='busy'][aria-current='true']");
  await page.waitForFunction(() => document.querySelectorAll("#live-windows button.win").length >= 2);
  const relRanges = await page.locator("#live-windows .range").allTextContents();
  const note = await page.locator("#live-time-note").textContent();
  report.relativeRanges = relRanges.slice(0, 4);
  check("relative-time", relRanges.every((r) => /^t=.* → t=/.test(r)) && relRanges.some((r) => /t=2 s$/.test(r)) &&
    !(await page.locator("#live-view").textContent()).includes("1970") && /epoch milliseconds/.test(note),
  `${relRanges.slice(0, 3).join(" | ")} / ${note}`);

  // ---------------------------------------------------------------- streams and status
  phase = "streams";
  // keyboard: the tab list moves with the arrow keys
  await page.locator("#tab-live").focus();
  await page.keyboard.press("ArrowRight");
  await page.waitForSelector("#tab-streams[aria-selected='true']:focus");
  check("keyboard-tabs", await page.locator("#view-streams").isVisible(), "ArrowRight from Continuous");
  await page.waitForSelector("#streams tr[data-stream='sensors']");
  await page.waitForFunction(() => {
    const r = document.querySelector("tr[data-stream='sensors'] td:nth-of-type(2) .num");
    return r && /triples\/s/.test(r.textContent);
  });
  report.streams = await page.locator("#streams table.streams tbody tr").evaluateAll((trs) => trs.map((tr) => ({
    name: tr.dataset.stream, cells: [...tr.children].map((c) => c.innerText.replace(/\s+/g, " ").trim()),
  })));
  const cars = await page.locator("#streams tr[data-stream='cars']").innerText();
  check("relative-lag", /not wall-clock/.test(cars) && !/1970/.test(cars) && /t=5 s/.test(cars), cars.replace(/\s+/g, " "));
  const cards = await page.locator("#status-cards .card").count();
  check("status", cards >= 6, `${cards} status cards`);
  // a second rate sample draws the sparkline
  await page.waitForSelector("tr[data-stream='sensors'] svg.spark polyline");
  await shot("streams-status");

  // ---------------------------------------------------------------- clean up
  phase = "delete";
  await page.locator("#tab-live").click();
  page.once("dialog", (d) => d.accept());
  await page.locator(`#cq-list button[data-query='${name}']`).click();
  await page.locator("#live-delete").click();
  await page.waitForSelector(`#cq-list button[data-query='${name}']`, { state: "detached" });
  check("deleted", true, name);
  // a link to the registration form's text
  await page.locator("#register-text").fill(readmeQuery);
  await page.locator("#register-share").click();
  const regLink = await page.locator("#register-share-url").inputValue();
  const regPage = await context.newPage();
  await regPage.goto(regLink, { waitUntil: "load" });
  await regPage.waitForSelector("html[data-ready='true']");
  check("register-link", (await regPage.locator("#register-text").inputValue()) === readmeQuery &&
    (await regPage.locator("#tab-live").getAttribute("aria-selected")) === "true", regLink.slice(0, 80));
  await regPage.close();
  // the API docs the top bar links to render from this server alone (any other origin is refused above)
  phase = "api-docs";
  const docsPage = await context.newPage();
  docsPage.on("pageerror", (err) => report.pageErrors.push(String(err && err.stack ? err.stack : err)));
  await docsPage.goto(opts.url + "/docs", { waitUntil: "load" });
  await docsPage.waitForSelector(".swagger-ui .info .title");
  await docsPage.waitForSelector(".swagger-ui .opblock-summary-path");
  const apiTitle = (await docsPage.locator(".swagger-ui .info .title").textContent()) || "";
  const ops = await docsPage.locator(".swagger-ui .opblock").count();
  check("api-docs", apiTitle.startsWith("Jindou") && ops >= 10, `${apiTitle}: ${ops} operations`);
  await docsPage.close();
  check("offline", foreign.length === 0, foreign.join(" "));
  await page.waitForTimeout(300);
} catch (e) {
  if (!(e instanceof Done)) {
    report.failed = String(e && e.message ? e.message : e);
    if (opts.screenshots && failurePage) {
      mkdirSync(opts.screenshots, { recursive: true });
      await failurePage.screenshot({ path: join(opts.screenshots, "failure.png") }).catch(() => {});
    }
  }
} finally {
  if (context) await context.close().catch(() => {});
  if (proxy) await proxy.close();
  rmSync(profile, { recursive: true, force: true });
}
const ok = !report.failed && report.consoleErrors.length === 0 && report.pageErrors.length === 0;
report.ok = ok;
process.stdout.write(JSON.stringify(report, null, 2) + "\n");
process.exit(ok ? 0 : 1);
