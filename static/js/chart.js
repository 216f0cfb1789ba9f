// A small SVG chart of a continuous query over time: result rows per window
// (bars, left axis) and delivery latency per window (line, right axis).

const NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function fmtTime(ms) {
  const d = new Date(ms);
  return d.toLocaleTimeString("en-GB", { hour12: false, hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

export function fmtMs(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  if (v >= 10000) return `${(v / 1000).toFixed(1)} s`;
  if (v >= 100 || v === 0) return `${Math.round(v)} ms`;
  return `${v.toFixed(1)} ms`;
}

/**
 * @param {HTMLElement} host
 * @param {{end:number, rows:number, latency:number|null}[]} points  oldest first
 */
export function drawChart(host, points, { maxPoints = 60 } = {}) {
  const pts = points.slice(-maxPoints);
  const W = Math.max(320, host.clientWidth || 600);
  const H = 200;
  const m = { l: 44, r: 56, t: 24, b: 30 };
  const iw = W - m.l - m.r;
  const ih = H - m.t - m.b;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", class: "chart" });
  const lastP = pts[pts.length - 1];
  root.append(svg("title", {}, pts.length
    ? `Last ${pts.length} windows: rows per window (bars) and latency (line); latest ${lastP.rows} rows, `
      + `${fmtMs(lastP.latency)}`
    : "No windows yet"));
  const top = Math.max(1, ...pts.map((p) => p.rows));
  const maxRows = top <= 20 ? Math.ceil(top / 4) * 4 : niceMax(top); // integer ticks for small counts
  const lats = pts.map((p) => p.latency).filter((v) => v !== null && v !== undefined && v >= 0);
  const maxLat = niceMax(Math.max(1, ...lats));
  const g = svg("g", { transform: `translate(${m.l},${m.t})` });
  root.append(g);
  // grid + axes labels
  for (let i = 0; i <= 4; i++) {
    const y = ih - (ih * i) / 4;
    g.append(svg("line", { x1: 0, x2: iw, y1: y, y2: y, class: "grid" }));
    g.append(svg("text", { x: -6, y: y + 4, class: "axis rows", "text-anchor": "end" }, String(+(maxRows * i / 4).toFixed(2))));
    g.append(svg("text", { x: iw + 6, y: y + 4, class: "axis lat", "text-anchor": "start" }, fmtMs(maxLat * i / 4)));
  }
  g.append(svg("text", { x: -m.l + 2, y: -12, class: "axis-title rows" }, "rows"));
  g.append(svg("text", { x: iw + m.r - 2, y: -12, class: "axis-title lat", "text-anchor": "end" }, "latency"));
  if (!pts.length) {
    g.append(svg("text", { x: iw / 2, y: ih / 2, class: "empty", "text-anchor": "middle" }, "waiting for the first window…"));
    host.replaceChildren(root);
    return;
  }
  const slot = iw / Math.min(maxPoints, Math.max(20, pts.length));
  const x0 = Math.max(0, iw - pts.length * slot);
  const bw = Math.max(2, slot * 0.68);
  pts.forEach((p, i) => {
    const h = (ih * p.rows) / maxRows;
    const x = x0 + i * slot + (slot - bw) / 2;
    const r = svg("rect", { x, y: ih - h, width: bw, height: Math.max(h, p.rows ? 1 : 0), class: p.error ? "bar error" : "bar" });
    r.append(svg("title", {}, `${fmtTime(p.end)}: ${p.rows} rows, latency ${fmtMs(p.latency)}`));
    g.append(r);
  });
  let d = "";
  let pen = false; // the line breaks where a window has no latency (replayed)
  pts.forEach((p, i) => {
    if (p.latency === null || p.latency === undefined || p.latency < 0) {
      pen = false;
      return;
    }
    const x = x0 + i * slot + slot / 2;
    const y = ih - (ih * Math.min(p.latency, maxLat)) / maxLat;
    d += `${pen ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`;
    pen = true;
    g.append(svg("circle", { cx: x, cy: y, r: 2.5, class: "dot" }));
  });
  if (d) g.insertBefore(svg("path", { d, class: "line" }), g.querySelector("circle"));
  // time ticks: first, middle, last
  const ticks = [...new Set([0, Math.floor((pts.length - 1) / 2), pts.length - 1])];
  for (const i of ticks) {
    const x = x0 + i * slot + slot / 2;
    g.append(svg("text", { x, y: ih + 18, class: "axis", "text-anchor": "middle" }, fmtTime(pts[i].end)));
  }
  host.replaceChildren(root);
}
