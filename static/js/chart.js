// A small SVG chart of a continuous query over time: a value per window (bars, left
// axis: its rows, or a chosen result column) and the server's evaluation time per
// window (line, right axis).

import { fmtInstant } from "./time.js";

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


export function fmtMs(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  if (v >= 10000) return `${(v / 1000).toFixed(1)} s`;
  if (v >= 100 || v === 0) return `${Math.round(v)} ms`;
  if (v < 1) return `${+v.toFixed(2)} ms`;
  return `${v.toFixed(1)} ms`;
}

function fmtNum(v) {
  if (!Number.isFinite(v)) return "–";
  const a = Math.abs(v);
  if (a >= 1e6) return `${+(v / 1e6).toFixed(2)}M`;
  if (a >= 1e4) return `${+(v / 1e3).toFixed(1)}k`;
  return String(+v.toFixed(a >= 100 ? 0 : a >= 10 ? 1 : 2));
}

/**
 * Bars: one value per window (``bar.value(p)``: the rows of the window, or a chosen result
 * column summarised over the window's rows). Line: the server's evaluation time of the
 * window (``p.evalMs``, right axis; windows without a measurement are skipped).
 * @param {HTMLElement} host
 * @param {{end:number, rows:number, evalMs:number|null, error?:string}[]} points  oldest first
 * @param {{bar?: {label: string, value: (p) => number|null}, maxPoints?: number}} opts
 */
export function drawChart(host, points, { bar = null, maxPoints = 60 } = {}) {
  bar = bar || { label: "rows", value: (p) => p.rows };
  const pts = points.slice(-maxPoints);
  const W = Math.max(320, host.clientWidth || 600);
  const H = 200;
  const m = { l: 48, r: 60, t: 24, b: 30 };
  const iw = W - m.l - m.r;
  const ih = H - m.t - m.b;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", class: "chart" });
  const lastP = pts[pts.length - 1];
  const vals = pts.map((p) => bar.value(p));
  root.append(svg("title", {}, pts.length
    ? `Last ${pts.length} windows: ${bar.label} per window (bars) and the server's evaluation time (line); `
      + `latest ${fmtNum(vals[vals.length - 1])}, evaluated in ${fmtMs(lastP.evalMs)}`
    : "No windows yet"));
  const top = Math.max(0, ...vals.filter((v) => Number.isFinite(v)));
  const integral = vals.every((v) => !Number.isFinite(v) || Number.isInteger(v));
  const maxBar = integral && top <= 20 ? Math.max(4, Math.ceil(top / 4) * 4) : niceMax(top); // integer ticks for small counts
  const evals = pts.map((p) => p.evalMs).filter((v) => v !== null && v !== undefined && v >= 0);
  const maxLat = niceMax(Math.max(1, ...evals));
  const g = svg("g", { transform: `translate(${m.l},${m.t})` });
  root.append(g);
  // grid + axes labels
  for (let i = 0; i <= 4; i++) {
    const y = ih - (ih * i) / 4;
    g.append(svg("line", { x1: 0, x2: iw, y1: y, y2: y, class: "grid" }));
    g.append(svg("text", { x: -6, y: y + 4, class: "axis rows", "text-anchor": "end" }, fmtNum(maxBar * i / 4)));
    g.append(svg("text", { x: iw + 6, y: y + 4, class: "axis lat", "text-anchor": "start" }, fmtMs(maxLat * i / 4)));
  }
  g.append(svg("text", { x: -m.l + 2, y: -12, class: "axis-title rows" }, bar.label));
  g.append(svg("text", { x: iw + m.r - 2, y: -12, class: "axis-title lat", "text-anchor": "end" }, "evaluation"));
  if (!pts.length) {
    g.append(svg("text", { x: iw / 2, y: ih / 2, class: "empty", "text-anchor": "middle" }, "waiting for the first window…"));
    host.replaceChildren(root);
    return;
  }
  const slot = iw / Math.min(maxPoints, Math.max(20, pts.length));
  const x0 = Math.max(0, iw - pts.length * slot);
  const bw = Math.max(2, slot * 0.68);
  pts.forEach((p, i) => {
    const v = vals[i];
    if (!Number.isFinite(v)) return;
    const h = (ih * Math.max(0, v)) / maxBar;
    const x = x0 + i * slot + (slot - bw) / 2;
    const r = svg("rect", { x, y: ih - h, width: bw, height: Math.max(h, v ? 1 : 0), class: p.error ? "bar error" : "bar",
      "data-value": String(v) });
    r.append(svg("title", {}, `${fmtInstant(p.end)}: ${bar.label} ${fmtNum(v)}, evaluation ${fmtMs(p.evalMs)}`));
    g.append(r);
  });
  let d = "";
  pts.forEach((p, i) => {
    if (p.evalMs === null || p.evalMs === undefined || p.evalMs < 0) return; // not measured: joined over
    const x = x0 + i * slot + slot / 2;
    const y = ih - (ih * Math.min(p.evalMs, maxLat)) / maxLat;
    d += `${d ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`;
    g.append(svg("circle", { cx: x, cy: y, r: 2.5, class: "dot" }));
  });
  if (d) g.insertBefore(svg("path", { d, class: "line" }), g.querySelector("circle"));
  // time ticks: first, middle, last
  const ticks = [...new Set([0, Math.floor((pts.length - 1) / 2), pts.length - 1])];
  for (const i of ticks) {
    const x = x0 + i * slot + slot / 2;
    g.append(svg("text", { x, y: ih + 18, class: "axis", "text-anchor": "middle" }, fmtInstant(pts[i].end)));
  }
  host.replaceChildren(root);
}
