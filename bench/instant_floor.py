"""The least an instant costs Jindou, against a tenth of the composite's time (issue 13 item 2).

``python -m bench.instant_floor [--workload citybench,lsbench-small] [--minutes 1]``

Issue 13 asks for an evaluation at least 10× faster than the C-SPARQL-style composite (each
window loaded into pyoxigraph and the query run again) on every small-window query. This
measures, in one run, whether that is within reach of any evaluation at all. For each bench
query it registers a *floor twin*: the same streams, windows and steps, with a WHERE clause that
no stream triple matches (``?s <urn:jindou:bench:absent> ?o``; the predicate is a stored term, in
a graph the twin does not read). Every instant of the twin still
does what any instant must (the scheduler's wake-up and unchanged-window check, the window's
capture, an evaluation that finds nothing, the result event in the log), and nothing else. When
the twin's median instant is above a tenth of the composite's time for the real query, no
evaluation of that query, however fast, can reach 10×: the instant's own bookkeeping in CPython
is already too dear.

Side by side, in one process and run: the real queries on Jindou (as ``python -m bench streams``
replays them), their floor twins, and the composite timed both ways (``hot``: back to back on a
warm thread; ``woken``: on a thread woken after an idle gap, as Jindou's instants run).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from bench import citybench as cb
from bench import streams as bs
from engine.sparql.csparql import format_duration

ABSENT = "urn:jindou:bench:absent"
FLOOR_GRAPH = "urn:jindou:bench:floor"


def floor_twin(bq: bs.BenchQuery) -> bs.BenchQuery:
    """The query's streams, windows and steps around a pattern no stream triple matches."""
    wins = "\n".join(f"FROM STREAM <{s}> [RANGE {format_duration(r)} STEP {format_duration(bq.q.steps[s])}]"
                     for s, r in bq.q.windows.items())
    name = f"floor_{bq.qid}"
    text = f"SELECT ?s\n{wins}\nWHERE {{ ?s <{ABSENT}> ?o }}"
    return bs.BenchQuery(bq.qid, cb.parse_query(name, text))


def _med_us(pr: bs.PeerRun) -> float | None:
    xs = list(pr.latency.values())
    return statistics.median(xs) * 1000.0 if xs else None


def measure(wl: bs.Workload, say=bs._log) -> list[dict]:
    """Per query: Jindou's real and floor-twin instants, the composite hot and woken (µs, medians)."""
    real = bs.run_jindou(wl, True, say)
    # the twin's predicate is a stored term (in a graph the twin does not read), so its instants
    # take the path of any query whose constants are known and whose windows changed elsewhere
    static = dict(wl.static_nt)
    static[FLOOR_GRAPH] = f"<{FLOOR_GRAPH}> <{ABSENT}> <{FLOOR_GRAPH}> .\n".encode()
    twins = bs.Workload(wl.name, [floor_twin(bq) for bq in wl.queries], static, wl.streams,
                        wl.start_ms, wl.end_ms, wl.config)
    floor = bs.run_jindou(twins, True, say)
    hot = bs.run_composite(wl, say, "hot")
    woken = bs.run_composite(wl, say, "woken")
    rows = []
    for bq in wl.queries:
        q = bq.qid
        rows.append({"query": q, "window": bq.window_spec, "jindou": _med_us(real[q]),
                     "floor": _med_us(floor[q]), "floor_min": min(floor[q].latency.values(), default=0) * 1000.0,
                     "hot": _med_us(hot[q]), "woken": _med_us(woken[q])})
    return rows


def verdict(r: dict) -> str:
    f, hot, woken = r["floor"], r["hot"], r["woken"]
    if None in (f, hot, woken):
        return "n/a"
    if f > woken / 10:
        return "below the floor (hot and woken)"
    if f > hot / 10:
        return "below the floor (hot); above it (woken)"
    return "above the floor"


def _f(x: float | None) -> str:
    return "-" if x is None else (f"{x:,.0f}" if x >= 100 else f"{x:.1f}")


def markdown(name: str, rows: list[dict]) -> str:
    out = [f"### {name}", "",
           "| query | window | composite hot / woken µs | 10× target hot / woken µs | Jindou floor twin µs "
           "(min) | Jindou real µs | floor / target (hot, woken) | 10× reachable? |",
           "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        f, hot, woken = r["floor"], r["hot"], r["woken"]
        ratio = "-" if None in (f, hot, woken) else f"{f / (hot / 10):.1f}, {f / (woken / 10):.1f}"
        out.append(f"| {r['query']} | {r['window']} | {_f(hot)} / {_f(woken)} | "
                   f"{_f(hot and hot / 10)} / {_f(woken and woken / 10)} | {_f(f)} ({_f(r['floor_min'])}) | "
                   f"{_f(r['jindou'])} | {ratio} | {verdict(r)} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.instant_floor", description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="citybench,lsbench-small")
    ap.add_argument("--queries", default=None, help="e.g. C1,L2 (default: all of each workload)")
    ap.add_argument("--minutes", type=float, default=1.0)
    a = ap.parse_args(argv)
    sel = {q.strip().upper() for q in a.queries.split(",")} if a.queries else None
    for w in a.workload.split(","):
        if w == "citybench":
            ids = [q for q in bs.CITYBENCH_QUERIES if sel is None or q in sel]
            wl = bs.load_citybench(ids, a.minutes) if ids else None
        elif w == "lsbench-small":
            ids = [q for q in bs.LSBENCH_QUERIES if sel is None or q in sel]
            wl = bs.load_lsbench(ids, a.minutes, bs.SMALL_RATE, 1000, name="lsbench-small") if ids else None
        else:
            print(f"unknown workload {w!r} (citybench, lsbench-small)", file=sys.stderr)
            return 2
        if wl is not None:
            print(markdown(w, measure(wl)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
