"""`python -m bench sparql` / `jindou bench sparql`: LUBM benchmark of Jindou against its peers.

For every peer a worker process loads the same generated N-Triples file (load time,
resident bytes per triple), then runs every query: one warm-up, then the median of
K runs, K adapted so one query costs about --budget seconds, a per-query --timeout
(the worker is killed and restarted; the query is marked "timeout").  Row counts of
all peers are cross-checked per query; a mismatch is printed loudly and the exit
status becomes 3.  See docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import select
import sys
import tempfile
import time
from pathlib import Path

from bench import lubm
from bench.peers import (
    ALL_PEERS,
    HTTP_PEERS,
    availability,
    kill_worker,
    parse_bench,
    spawn_worker,
)
from bench.queries import BY_NAME, HTTP_QUERY, PARSE_QUERY
from bench.queries import select as select_queries

EXIT_MISMATCH = 3

TARGETS = {
    "selective": "selective queries no slower than pyoxigraph",
    "nonselective": "non-selective joins >= 10x faster than pyoxigraph",
    "parse": "parse of a 3-pattern query <= 0.2 ms (rdflib: 3.8 ms)",
    "load": "bulk load >= 500k triples/s (Oxigraph: 354k/s)",
    "memory": "<= 100 resident bytes per triple incl. dictionary (Oxigraph ~340, rdflib ~1250)",
    "http": "HTTP p50 of a selective query no slower than oxigraph serve",
    "classes": "every non-selective class: geometric mean of Jindou / pyoxigraph time <= 0.2, none > 1 (issue 14)",
}

# Jindou's side against each peer in the per-class table (issue 14): in process and over HTTP
CLASS_PAIRS = (("jindou", "pyoxigraph"), ("jindou-http", "oxigraph-serve"))


def class_ratios(result: dict) -> dict:
    """{class: {peer: [Jindou / peer time ratio per query]}} over the queries both sides answered."""
    peers = result["peers"]
    out: dict = {}
    for qname, meta in result["queries"].items():
        for mine, other in CLASS_PAIRS:
            a, b = _median(peers.get(mine, {}), qname), _median(peers.get(other, {}), qname)
            if a is not None and b:
                out.setdefault(meta["class"], {}).setdefault(other, []).append(a / b)
    return out


def _median(p: dict, qname: str) -> float | None:
    r = p.get("queries", {}).get(qname) if p.get("status") == "ok" else None
    return r["median_ms"] if r and r.get("status") == "ok" else None


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def class_table(result: dict) -> list[str]:
    """Per class: geometric mean (and worst) of Jindou's time over each peer's, in process and HTTP."""
    cr = class_ratios(result)
    if not cr:
        return []
    L = ["### Per query class (Jindou time / peer time: < 1 means Jindou is faster; geometric mean, worst)", "",
         "| class | queries | vs pyoxigraph (in process) | vs oxigraph serve (HTTP) |", "| --- | ---: | ---: | ---: |"]
    for cls in sorted(cr, key=lambda c: (c != "selective", c)):
        n = max(len(v) for v in cr[cls].values())
        cells = []
        for _, other in CLASS_PAIRS:
            xs = cr[cls].get(other)
            cells.append("-" if not xs else f"{geomean(xs):.3f} (worst {max(xs):.2f})")
        L.append(f"| {cls} | {n} | " + " | ".join(cells) + " |")
    cells = []
    for _, other in CLASS_PAIRS:
        xs = [x for c, v in cr.items() if c != "selective" for x in v.get(other, [])]
        cells.append("-" if not xs else f"{geomean(xs):.3f} (worst {max(xs):.2f})")
    n = sum(max(map(len, v.values())) for c, v in cr.items() if c != "selective")
    L.append(f"| all non-selective | {n} | " + " | ".join(cells) + " |")
    L.append("")
    return L



def query_table_head(columns) -> list[str]:
    """The two header lines of a per-query Markdown table with one column per peer."""
    return ["| query | class | rows | " + " | ".join(columns) + " |",
            "| --- | --- | ---: | " + " | ".join("---:" for _ in columns) + " |"]


def machine_summary(result: dict) -> str:
    """When and on what a report was measured: date, CPUs, load average at start, Python."""
    m = result["machine"]
    return (f"{result['date']} · {m['cpus']} CPUs ({m['cpu_model']}) · load avg {m.get('loadavg_1m') or 0:.2f} "
            f"at start · Python {m['python']}")


def targets_table(targets: dict, verdicts: dict) -> list[str]:
    """The "Targets" section: one row per target (text, what was measured, met or not)."""
    L = ["### Targets", "", "| target | result | verdict |", "| --- | --- | --- |"]
    for key, text in targets.items():
        ok, detail = verdicts[key]
        L.append(f"| {text} | {detail} | {'n/a' if ok is None else ('met' if ok else '**not met**')} |")
    L.append("")
    return L


def mismatched(result: dict) -> set[str]:
    """The names of the queries whose answers differed between peers."""
    return {line.split(":")[0] for line in result["mismatches"]}

def _log(msg: str, quiet: bool = False) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- worker driving
class _Lines:
    """Read JSON lines from a worker's stdout with a deadline."""

    def __init__(self, proc) -> None:
        self.proc = proc
        self.fd = proc.stdout.fileno()
        self.buf = b""

    def read(self, timeout: float) -> dict | None:
        end = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.fd], [], [], min(left, 1.0))
            if r:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    raise EOFError("worker exited")
                self.buf += chunk
            elif self.proc.poll() is not None:
                raise EOFError(f"worker exited with {self.proc.returncode}")
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


class _Worker:
    def __init__(self, peer: str, data: str, load_timeout: float) -> None:
        self.peer = peer
        self.log = tempfile.TemporaryFile()
        self.proc = spawn_worker(peer, data, self.log)
        self.lines = _Lines(self.proc)
        try:
            msg = self.lines.read(load_timeout)
        except EOFError as e:
            msg = {"op": "error", "error": f"{e}: {self.stderr_tail()}"}
        if msg is None:
            msg = {"op": "error", "error": f"load did not finish within {load_timeout:.0f} s"}
        self.loaded = msg

    def stderr_tail(self, n: int = 1500) -> str:
        try:
            self.log.seek(0)
            return self.log.read().decode(errors="replace")[-n:].strip()
        except Exception:
            return ""

    def ask(self, req: dict, timeout: float) -> dict | None:
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return self.lines.read(timeout)

    def stop(self) -> None:
        kill_worker(self.proc)
        self.log.close()


def run_peer(peer: str, data: str, queries, opts, triples: int) -> dict:
    """Load + all queries (+ HTTP p50) on one peer; never raises."""
    out: dict = {"peer": peer, "status": "ok", "queries": {}}
    _log(f"[{peer}] loading {data} ...", opts.quiet)
    w = _Worker(peer, data, opts.load_timeout)
    try:
        if w.loaded.get("op") != "loaded":
            out["status"] = "error"
            out["error"] = w.loaded.get("error", "?")
            _log(f"[{peer}] LOAD FAILED: {out['error']}", opts.quiet)
            return out
        ld = w.loaded
        out["load_s"] = ld["load_s"]
        out["triples_reported"] = ld.get("triples")
        out["triples_per_s"] = triples / ld["load_s"] if ld["load_s"] > 0 else None
        out["rss_before"] = ld["rss_before"]
        out["rss_after"] = ld["rss_after"]
        delta = ld["rss_after"] - ld["rss_before"] if ld["rss_after"] else None
        out["bytes_per_triple"] = delta / triples if delta is not None and triples else None
        raw = ld.get("rss_after_untrimmed")
        out["bytes_per_triple_untrimmed"] = (raw - ld["rss_before"]) / triples if raw and triples else None
        _log(f"[{peer}] loaded in {ld['load_s']:.2f} s ({out['triples_per_s'] or 0:,.0f} triples/s), "
             f"{out['bytes_per_triple'] or 0:.0f} B/triple", opts.quiet)
        rt = ld.get("triples")
        if isinstance(rt, int) and rt != triples:
            _log(f"[{peer}] WARNING: peer reports {rt} triples, file has {triples}", opts.quiet)
        for q in queries:
            if w is None:
                out["queries"][q.name] = {"status": "error", "error": "worker could not be restarted"}
                continue
            req = {"op": "query", "name": q.name, "text": q.text, "budget": opts.budget,
                   "max_runs": opts.max_runs, "min_runs": opts.min_runs, "timeout": opts.timeout,
                   "decode": opts.decode, "uncached": opts.uncached}
            deadline = opts.timeout + 2 * opts.budget + 10
            try:
                res = w.ask(req, deadline)
            except (EOFError, BrokenPipeError, OSError) as e:
                res = {"error": f"worker died: {e}; {w.stderr_tail(600)}"}
                w.stop()
                w = _restart(peer, data, opts)
            if res is None:
                out["queries"][q.name] = {"status": "timeout"}
                _log(f"[{peer}] {q.name}: timeout (> {opts.timeout:.0f} s)", opts.quiet)
                w.stop()
                w = _restart(peer, data, opts)
                continue
            if res.get("timeout"):
                out["queries"][q.name] = {"status": "timeout"}
                _log(f"[{peer}] {q.name}: timeout (> {opts.timeout:g} s)", opts.quiet)
                continue
            if "error" in res:
                out["queries"][q.name] = {"status": "error", "error": res["error"]}
                _log(f"[{peer}] {q.name}: ERROR {res['error']}", opts.quiet)
                continue
            res["status"] = "ok"
            if res["warm_ms"] > opts.timeout * 1000:
                res["status"] = "timeout"
            elif opts.check_results:
                try:
                    dg = w.ask({"op": "digest", "name": q.name, "text": q.text, "timeout": opts.timeout},
                               opts.timeout + 10)
                except (EOFError, OSError) as e:
                    dg = {"error": str(e)}
                if dg is None:  # should not happen after a successful timing; stay robust
                    w.stop()
                    w = _restart(peer, data, opts)
                elif "digest" in dg:
                    res["digest"] = dg["digest"]
                    if dg["rows"] != res["rows"]:
                        res["digest_rows"] = dg["rows"]
            out["queries"][q.name] = res
            _log(f"[{peer}] {q.name}: {res['rows']} rows, median {res['median_ms']:.3f} ms "
                 f"({res['runs']} runs)", opts.quiet)
        if peer in HTTP_PEERS and w is not None and opts.http_requests > 0:
            q = BY_NAME[HTTP_QUERY]
            try:
                res = w.ask({"op": "p50", "name": q.name, "text": q.text, "n": opts.http_requests},
                            opts.timeout * 3 + 60)
            except (EOFError, OSError) as e:
                res = {"error": str(e)}
            out["http_p50"] = res if res is not None else {"error": "timeout"}
            if res and "p50_ms" in res:
                _log(f"[{peer}] HTTP p50 of {q.name}: {res['p50_ms']:.3f} ms", opts.quiet)
    finally:
        if w is not None:
            w.stop()
    return out


def _restart(peer: str, data: str, opts):
    w = _Worker(peer, data, opts.load_timeout)
    if w.loaded.get("op") != "loaded":
        w.stop()
        return None
    return w


# --------------------------------------------------------------------------- data
def prepare_data(opts) -> tuple[str, int, dict]:
    if opts.data:
        path = opts.data
        n = _count_lines(path)
        return path, n, {"path": path, "triples": n, "generated": False}
    workdir = Path(opts.workdir or Path(tempfile.gettempdir()) / "jindou-bench")
    workdir.mkdir(parents=True, exist_ok=True)
    if opts.universities:
        tag, kw = f"u{opts.universities}", {"universities": opts.universities}
    else:
        t = lubm.parse_scale(opts.scale)
        tag, kw = f"t{t}", {"triples": t}
    path = workdir / f"lubm-{tag}-seed{opts.seed}.nt"
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists():
        info = json.loads(meta.read_text())
        if info.get("generator_version") == GENERATOR_VERSION:
            info["generated"] = False
            return str(path), int(info["triples"]), info
    _log(f"generating LUBM data -> {path}", opts.quiet)
    info = lubm.generate(path, seed=opts.seed, **kw)
    info["generator_version"] = GENERATOR_VERSION
    meta.write_text(json.dumps(info))
    info["generated"] = True
    _log(f"  {info['triples']:,} triples, {info['universities']} universities in {info['seconds']:.2f} s",
         opts.quiet)
    return str(path), int(info["triples"]), info


GENERATOR_VERSION = 3  # 3: ub:age literals


def _count_lines(path: str) -> int:
    n = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 24)
            if not b:
                break
            n += b.count(b"\n")
    return n


# --------------------------------------------------------------------------- report
def _fmt_ms(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def _cell(peers: dict, peer: str, qname: str, jindou_ms: float | None, show_ratio: bool) -> str:
    p = peers.get(peer)
    if p is None:
        return "-"
    if p.get("status") != "ok":
        return p.get("status_text", p.get("status", "-"))
    r = p["queries"].get(qname)
    if r is None:
        return "-"
    if r["status"] != "ok":
        return r["status"]
    s = _fmt_ms(r["median_ms"])
    if show_ratio and jindou_ms:
        s += f" ({r['median_ms'] / jindou_ms:.1f}x)"
    return s


def check_counts(result: dict) -> list[str]:
    problems = []
    for qname in result["queries"]:
        counts = {}
        for peer, p in result["peers"].items():
            if p.get("status") == "ok":
                r = p["queries"].get(qname)
                if r and r.get("status") == "ok":
                    counts[peer] = r["rows"]
        digests = {}
        for peer, p in result["peers"].items():
            r = p.get("queries", {}).get(qname) if p.get("status") == "ok" else None
            if r and r.get("status") == "ok" and r.get("digest"):
                digests[peer] = r["digest"]
        if len(set(counts.values())) > 1:
            problems.append(f"{qname}: row counts differ: " + ", ".join(f"{k}={v}" for k, v in counts.items()))
        elif len(set(digests.values())) > 1:
            problems.append(f"{qname}: same row count, different rows (result digests): "
                            + ", ".join(f"{k}={v}" for k, v in digests.items()))
    return problems


def evaluate_targets(result: dict) -> dict:
    peers = result["peers"]
    j = peers.get("jindou", {})
    ox = peers.get("pyoxigraph", {})
    ev: dict = {}

    def qms(p, name):
        r = p.get("queries", {}).get(name) if p.get("status") == "ok" else None
        return r["median_ms"] if r and r.get("status") == "ok" else None

    def ratio_target(selective: bool, need: float):
        worst = None
        detail = []
        for qname, meta in result["queries"].items():
            if meta["selective"] != selective:
                continue
            a, b = qms(j, qname), qms(ox, qname)
            if a is None or b is None:
                return None, "n/a"
            r = b / a
            detail.append(f"{qname} {r:.2f}x")
            worst = r if worst is None else min(worst, r)
        if worst is None:
            return None, "n/a"
        return worst >= need, f"worst {worst:.2f}x (" + ", ".join(detail) + ")"

    cr = class_ratios(result)
    per = {c: geomean(v["pyoxigraph"]) for c, v in cr.items() if c != "selective" and v.get("pyoxigraph")}
    worst = max((x for c, v in cr.items() if c != "selective" for x in v.get("pyoxigraph", [])), default=None)
    ev["classes"] = ((max(per.values()) <= 0.2 and worst <= 1.0,
                      ", ".join(f"{c} {g:.3f}" for c, g in sorted(per.items())) + f"; worst query {worst:.2f}")
                     if per else (None, "n/a"))
    ev["selective"] = ratio_target(True, 1.0)
    ev["nonselective"] = ratio_target(False, 10.0)
    pj = result.get("parse", {}).get("jindou_ms")
    ev["parse"] = (pj <= 0.2, f"{pj:.3f} ms") if pj is not None else (None, "n/a")
    tps = j.get("triples_per_s") if j.get("status") == "ok" else None
    ev["load"] = (tps >= 500_000, f"{tps:,.0f} triples/s") if tps else (None, "n/a")
    bpt = j.get("bytes_per_triple") if j.get("status") == "ok" else None
    ev["memory"] = (bpt <= 100, f"{bpt:.0f} B/triple") if bpt is not None else (None, "n/a")
    jh = peers.get("jindou-http", {}).get("http_p50", {}).get("p50_ms")
    oh = peers.get("oxigraph-serve", {}).get("http_p50", {}).get("p50_ms")
    if jh is not None and oh is not None:
        ev["http"] = (jh <= oh, f"{jh:.3f} ms vs {oh:.3f} ms")
    else:
        ev["http"] = (None, "n/a")
    return ev


def render_markdown(result: dict) -> str:
    peers = result["peers"]
    order = [p for p in ALL_PEERS if p in peers]
    L: list[str] = []
    L.append(f"## Jindou SPARQL benchmark — LUBM {result['data']['triples']:,} triples")
    L.append("")
    L.append(f"{machine_summary(result)} · "
             f"seed {result['data'].get('seed', '-')} · budget {result['options']['budget']} s/query · "
             f"timeout {result['options']['timeout']:.0f} s · "
             f"{'results decoded' if result['options']['decode'] else 'results counted, not decoded'} · "
             f"jindou shards {result['options'].get('jindou_shards') or 'default'} · "
             f"{'uncached (unique text per run)' if result['options'].get('uncached') else 'repeated text'} · "
             f"jindou {result['versions'].get('jindou', '?')}, pyoxigraph {result['versions'].get('pyoxigraph', '?')}, "
             f"rdflib {result['versions'].get('rdflib', '?')}")
    L.append("")
    L.append("### Load and memory")
    L.append("")
    L.append("| peer | status | load s | triples/s | resident B/triple | before allocator trim |")
    L.append("| --- | --- | ---: | ---: | ---: | ---: |")
    for p in order:
        r = peers[p]
        if r.get("status") != "ok":
            L.append(f"| {p} | {r.get('status_text', r.get('status'))} | - | - | - | - |")
            continue
        bpt = r.get("bytes_per_triple")
        raw = r.get("bytes_per_triple_untrimmed")
        L.append(f"| {p} | ok | {r['load_s']:.2f} | {r['triples_per_s']:,.0f} | "
                 f"{'-' if bpt is None else f'{bpt:.0f}'} | {'-' if raw is None else f'{raw:.0f}'} |")
    L.append("")
    L.append("### Query latency (median ms; `(Nx)` = peer time / Jindou time, >1 means Jindou is faster)")
    L.append("")
    L.extend(query_table_head(order))
    mism = mismatched(result)
    for qname, meta in result["queries"].items():
        jr = peers.get("jindou", {}).get("queries", {}).get(qname) if peers.get("jindou", {}).get(
            "status") == "ok" else None
        jms = jr["median_ms"] if jr and jr.get("status") == "ok" else None
        rows = None
        for p in order:
            r = peers[p].get("queries", {}).get(qname) if peers[p].get("status") == "ok" else None
            if r and r.get("status") == "ok":
                rows = r["rows"]
                break
        rows_s = "**MISMATCH**" if qname in mism else ("-" if rows is None else f"{rows:,}")
        cells = [_cell(peers, p, qname, jms, p != "jindou") for p in order]
        L.append(f"| {qname} | {meta['class']} | {rows_s} | " + " | ".join(cells) + " |")
    L.append("")
    L.extend(class_table(result))
    if result["mismatches"]:
        L.append("**Result mismatches between peers (correctness oracle):**")
        L.append("")
        for line in result["mismatches"]:
            L.append(f"- {line}")
        L.append("")
    ps = result.get("parse", {})
    L.append("### Parse and HTTP")
    L.append("")
    L.append("| measurement | Jindou | peer |")
    L.append("| --- | ---: | ---: |")
    pj = ps.get("jindou_ms")
    pr = ps.get("rdflib_ms")
    L.append(f"| parse 3-pattern query (median ms) | {_fmt_ms(pj) if pj is not None else ps.get('jindou_error', '-')} "
             f"| rdflib prepareQuery: {_fmt_ms(pr) if pr is not None else ps.get('rdflib_error', '-')} |")
    jh = peers.get("jindou-http", {}).get("http_p50", {})
    oh = peers.get("oxigraph-serve", {}).get("http_p50", {})
    L.append(f"| HTTP p50 of {HTTP_QUERY}, keep-alive (ms) | {_fmt_ms(jh.get('p50_ms')) if 'p50_ms' in jh else '-'} "
             f"| oxigraph serve: {_fmt_ms(oh.get('p50_ms')) if 'p50_ms' in oh else '-'} |")
    L.append("")
    L.extend(targets_table(TARGETS, result["targets"]))
    errs = []
    for p in order:
        r = peers[p]
        if r.get("status") == "error":
            errs.append(f"- {p}: {r.get('error')}")
        for qn, qr in r.get("queries", {}).items():
            if qr.get("status") == "error":
                errs.append(f"- {p} {qn}: {qr.get('error')}")
    if errs:
        L.append("Errors:")
        L.append("")
        L.extend(errs)
        L.append("")
    return "\n".join(L)


def _machine() -> dict:
    model = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"cpus": os.cpu_count(), "cpu_model": model, "loadavg_1m": load, "python": platform.python_version(),
            "platform": platform.platform(), "mem_bytes": mem}


def _versions() -> dict:
    out = {}
    try:
        import subprocess

        from bench.peers import REPO_ROOT

        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        if rev:
            out["jindou"] = rev + ("+dirty" if dirty else "")
    except Exception:
        pass
    for mod in ("pyoxigraph", "rdflib", "numpy"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:
            pass
    return out


# --------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench sparql",
                                 description="LUBM benchmark: Jindou vs pyoxigraph, oxigraph serve, rdflib")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--scale", default="1M", help="target triple count, e.g. 100k, 1M (default 1M)")
    g.add_argument("--universities", type=int, help="generate LUBM(N) by number of universities instead")
    g.add_argument("--data", help="use an existing N-Triples file instead of generating")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", help="where generated data is cached (default $TMPDIR/jindou-bench)")
    ap.add_argument("--peers", default=",".join(ALL_PEERS), help=f"comma list from {','.join(ALL_PEERS)}")
    ap.add_argument("--queries", help="comma list of query names (default all)")
    ap.add_argument("--timeout", type=float, default=60.0, help="per-query timeout in seconds (default 60)")
    ap.add_argument("--budget", type=float, default=1.0,
                    help="approximate seconds spent timing one query on one peer (default 1)")
    ap.add_argument("--max-runs", type=int, default=200)
    ap.add_argument("--min-runs", type=int, default=3)
    ap.add_argument("--load-timeout", type=float, default=1800.0)
    ap.add_argument("--rdflib-max-triples", type=lubm.parse_scale, default=100_000,
                    help="run rdflib only when the data has at most this many triples (default 100k)")
    ap.add_argument("--http-requests", type=int, default=300, help="requests for the HTTP p50 (default 300)")
    ap.add_argument("--jindou-shards", type=int,
                    help="Database(shards=N) / jindou serve --shards N (default: Jindou's default)")
    ap.add_argument("--uncached", action="store_true",
                    help="append a unique comment to every run so caches keyed by query text "
                         "(parse / prepared plans) never hit")
    ap.add_argument("--decode", action="store_true",
                    help="in-process peers also turn every result term into a string/object "
                         "(default: solutions are computed and counted)")
    ap.add_argument("--no-check-results", dest="check_results", action="store_false",
                    help="compare row counts only, not the rows themselves (order-independent digest)")
    ap.add_argument("--no-parse", action="store_true", help="skip the parse micro-benchmark")
    ap.add_argument("--alternate", action="store_true",
                    help="in process only: Jindou and pyoxigraph in one process, their runs alternating per "
                         "query (a shared machine's drifting load hits both), answers compared row by row; "
                         "prints the per-query and per-class tables")
    ap.add_argument("--alternate-http", action="store_true",
                    help="over HTTP: Jindou's server and oxigraph serve both up, their requests alternating per "
                         "query (one keep-alive client each), answers compared row by row; prints the per-query "
                         "and per-class tables")
    ap.add_argument("--out", help="also write the Markdown report to this file")
    ap.add_argument("--json", help="write the raw results as JSON (default: --out with .json)")
    ap.add_argument("--quiet", action="store_true")
    return ap


def run_alternating(data: str, triples: int, queries, opts, http: bool = False) -> int:
    """Jindou and its peer loaded side by side (in this process: pyoxigraph;
    ``http``: Jindou's server and ``oxigraph serve``, one keep-alive client each);
    every answer first (compared; each peer's warm-up), then per query ``--max-runs``
    (3 to 15) runs alternating,
    medians (a shared machine's drifting load hits both sides alike); every
    answer compared as sorted row strings (in order when the query orders)."""
    from bench.peers import JindouHttpPeer, JindouPeer, OxigraphServePeer, PyoxigraphPeer  # noqa: PLC0415

    if http:
        (jn, j), (on, o) = ("jindou-http", JindouHttpPeer()), ("oxigraph-serve", OxigraphServePeer())
        o.prepare()
    else:
        (jn, j), (on, o) = ("jindou", JindouPeer()), ("pyoxigraph", PyoxigraphPeer())
    try:
        j.load(data)
        o.load(data)
        return _alternate(j, o, jn, on, triples, queries, opts, http)
    finally:
        j.close()
        o.close()


def _timed(peer, text: str, http: bool) -> float:
    """Seconds for one run: in process the query; over HTTP the request until the
    body is read (the client's parse of the body is not timed)."""
    if http:
        return peer.timed(text)[0]
    t0 = time.perf_counter()
    peer.count(text)
    return time.perf_counter() - t0


def _alternate(j, o, jn: str, on: str, triples: int, queries, opts, http: bool) -> int:
    runs = max(3, min(opts.max_runs, 15))
    result = {"queries": {}, "peers": {jn: {"status": "ok", "queries": {}}, on: {"status": "ok", "queries": {}}}}
    bad = []
    # First every answer, compared (each peer's warm-up): a query's timing then does not
    # depend on its place in the list (a fresh server's first requests also pay its lazy
    # set-up: index tables, worker threads, the interpreter's specialization)
    counts = {}
    for q in queries:
        a, b = j.row_strings(q.text), o.row_strings(q.text)
        ordered = "ORDER BY" in q.text.upper()
        if (a if ordered else sorted(a)) != (b if ordered else sorted(b)):
            bad.append(f"{q.name}: answers differ ({jn} {len(a)} rows, {on} {len(b)} rows)")
        counts[q.name] = len(a)
    for q in queries:
        tj, to = [], []
        for _ in range(runs):
            tj.append(_timed(j, q.text, http))
            to.append(_timed(o, q.text, http))
        result["queries"][q.name] = {"class": q.klass, "selective": q.selective}
        for peer, ts in ((jn, tj), (on, to)):
            result["peers"][peer]["queries"][q.name] = {"status": "ok", "rows": counts[q.name],
                                                        "median_ms": sorted(ts)[len(ts) // 2] * 1000}
        _log(f"{q.name}: {jn} {result['peers'][jn]['queries'][q.name]['median_ms']:.3f} ms, "
             f"{on} {result['peers'][on]['queries'][q.name]['median_ms']:.3f} ms", opts.quiet)
    where = "Over HTTP (one keep-alive client per server)" if http else "In process"
    L = [f"## {where}, alternating runs — LUBM {triples:,} triples, {runs} runs per query, "
         f"{_dt.datetime.now(_dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}, load avg {os.getloadavg()[0]:.2f} at end", "",
         f"| query | class | rows | {jn} ms | {on} ms | {jn} / {on} |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    for name, meta in result["queries"].items():
        a = result["peers"][jn]["queries"][name]
        b = result["peers"][on]["queries"][name]
        L.append(f"| {name} | {meta['class']} | {a['rows']:,} | {_fmt_ms(a['median_ms'])} | {_fmt_ms(b['median_ms'])} "
                 f"| {a['median_ms'] / b['median_ms']:.3f} |")
    L.append("")
    L.extend(class_table(result))
    L.extend(f"- **{line}**" for line in bad)
    md = "\n".join(L)
    print(md)
    if opts.out:
        Path(opts.out).write_text(md + "\n")
    return EXIT_MISMATCH if bad else 0


def run_sparql(argv: list[str]) -> int:
    opts = build_parser().parse_args(argv)
    queries = select_queries(opts.queries)
    if opts.alternate or opts.alternate_http:
        data, triples, _ = prepare_data(opts)
        return run_alternating(data, triples, queries, opts, http=opts.alternate_http)
    if opts.jindou_shards:
        os.environ["BENCH_JINDOU_SHARDS"] = str(opts.jindou_shards)  # read by the workers
    data, triples, info = prepare_data(opts)
    avail = availability()
    wanted = [p.strip() for p in opts.peers.split(",") if p.strip()]
    for p in wanted:
        if p not in ALL_PEERS:
            raise SystemExit(f"unknown peer {p!r}; known: {', '.join(ALL_PEERS)}")
    result: dict = {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": _machine(),
        "versions": _versions(),
        "data": {**info, "path": data, "triples": triples},
        "options": {"budget": opts.budget, "timeout": opts.timeout, "max_runs": opts.max_runs,
                    "min_runs": opts.min_runs, "rdflib_max_triples": opts.rdflib_max_triples,
                    "decode": opts.decode, "check_results": opts.check_results, "uncached": opts.uncached,
                    "jindou_shards": opts.jindou_shards,
                    "http_requests": opts.http_requests},
        "queries": {q.name: {"class": q.klass, "selective": q.selective, "description": q.description}
                    for q in queries},
        "peers": {},
    }
    for p in wanted:
        if avail.get(p):
            result["peers"][p] = {"peer": p, "status": "unavailable", "status_text": avail[p].split(" (")[0],
                                  "error": avail[p]}
            _log(f"[{p}] {avail[p]}", opts.quiet)
            continue
        if p == "rdflib" and triples > opts.rdflib_max_triples:
            result["peers"][p] = {"peer": p, "status": "skipped", "status_text": "skipped (scale)"}
            _log(f"[{p}] skipped (scale): {triples:,} > --rdflib-max-triples {opts.rdflib_max_triples:,}",
                 opts.quiet)
            continue
        result["peers"][p] = run_peer(p, data, queries, opts, triples)
    if not opts.no_parse:
        result["parse"] = parse_bench(PARSE_QUERY)
        if "jindou_ms" in result["parse"]:
            _log(f"parse: jindou {result['parse']['jindou_ms']:.4f} ms, "
                 f"rdflib {result['parse'].get('rdflib_ms', float('nan')):.3f} ms", opts.quiet)
    else:
        result["parse"] = {}
    result["mismatches"] = check_counts(result)
    result["targets"] = evaluate_targets(result)
    md = render_markdown(result)
    print(md)
    if result["mismatches"]:
        bar = "!" * 78
        print(f"\n{bar}\n!!! RESULT MISMATCH between peers (correctness oracle):", file=sys.stderr)
        for line in result["mismatches"]:
            print(f"!!!   {line}", file=sys.stderr)
        print(bar, file=sys.stderr)
    if opts.out:
        Path(opts.out).write_text(md + "\n")
    json_path = opts.json or (str(Path(opts.out).with_suffix(".json")) if opts.out else None)
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=2, default=str) + "\n")
    return EXIT_MISMATCH if result["mismatches"] else 0


USAGE = """usage: python -m bench <command> [options]

commands:
  sparql   run the LUBM SPARQL benchmark (python -m bench sparql --help)
  lubm     only generate LUBM-style N-Triples (python -m bench lubm --help)
  cluster  Jindou 1 process vs --workers 2/3 (shm, Flight) vs oxigraph serve, plus the cluster
           cost model's projection (python -m bench cluster --help)
"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "sparql":
        return run_sparql(rest)
    if cmd == "lubm":
        return lubm.main(rest)
    if cmd == "cluster":
        return __import__("bench.cluster", fromlist=["main"]).main(rest)
    if cmd == "citybench":
        return __import__("bench.citybench", fromlist=["main"]).main(rest)
    print(USAGE, file=sys.stderr)
    return 2
