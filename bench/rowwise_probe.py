"""Row-by-row vs column-wise expressions and aggregates over a few rows (engine/exec/rowwise.py).

``python -m bench.rowwise_probe [--rows 8,16,32,64,128,256] [--repeat 300]``

Why: the executor chooses the row-by-row evaluation up to ``rowwise.SMALL_ROWS`` rows; this
measures both over the same columns of a real store's ids (a fresh QueryContext per call, as a
continuous query's instant has), to see where the column-wise fixed cost stops dominating.
Times are medians in microseconds per call.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import numpy as np

from engine.database import Database
from engine.exec import aggregates as AG
from engine.exec import rowwise
from engine.exec.evaluate import QueryContext
from engine.exec.functions import eval_expr, eval_filter
from engine.sparql.algebra import Aggregate, Call, Const, Var
from engine.terms import XSD, literal_key

_D = XSD + "double"
_I = XSD + "integer"


def _store(n: int = 2000) -> Database:
    r = random.Random(7)
    lines = []
    for i in range(n):
        s = f"<http://ex.org/r{i}>"
        lines.append(f'{s} <http://ex.org/lat> "{r.uniform(50, 60):.4f}E0"^^<{_D}> .')
        lines.append(f'{s} <http://ex.org/long> "{r.uniform(-5, 5):.4f}E0"^^<{_D}> .')
        lines.append(f'{s} <http://ex.org/age> "{r.randrange(15, 80)}"^^<{_I}> .')
        lines.append(f'{s} <http://ex.org/user> <http://ex.org/u{r.randrange(200)}> .')
        lines.append(f'{s} <http://ex.org/name> "name {i % 300}"@en .')
    db = Database()
    db.load_data("\n".join(lines) + "\n", "application/n-triples")
    return db


def _lookup(ctx, keys):
    return np.asarray([ctx.lookup(k) for k in keys], dtype=np.int64)


_EXPRS = {
    "datatype&&isLiteral&&>=": ("filter", Call("&&", (Call("&&", (
        Call("=", (Call("DATATYPE", (Var("lat"),)), Const("<" + _D + ">"))), Call("ISLITERAL", (Var("long"),)))),
        Call(">=", (Var("lat"), Const(literal_key("55.5", XSD + "decimal"))))))),
    "iri != && != const": ("filter", Call("&&", (Call("!=", (Var("u"), Var("v"))),
                                               Call("!=", (Var("v"), Const("<http://ex.org/u3>")))))),
    "?age > 40": ("filter", Call(">", (Var("age"), Const(literal_key("40", _I))))),
    "?age + 1": ("expr", Call("+", (Var("age"), Const(literal_key("1", _I))))),
    "UCASE(?name)": ("expr", Call("UCASE", (Var("name"),))),
}
_AGGS = [("COUNT", "age"), ("SUM", "age"), ("AVG", "lat"), ("MAX", "long"), ("MIN", "age")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="8,16,32,64,128")
    ap.add_argument("--repeat", type=int, default=300)
    a = ap.parse_args(argv)
    db = _store()
    snap = db.store.snapshot()
    r = random.Random(1)
    ctx0 = QueryContext(snap)
    subj = [f"<http://ex.org/r{i}>" for i in range(2000)]
    print("| case | rows | row by row, cold µs | row by row, rows cached µs | column-wise µs | column / cold |")
    print("|---|---|---|---|---|---|")
    saved = rowwise.SMALL_ROWS
    for n in [int(x) for x in a.rows.split(",")]:
        pick = [r.randrange(2000) for _ in range(n)]
        vals = {p: [] for p in ("lat", "long", "age", "user", "name")}
        for i in pick:
            res = db.query(f"SELECT ?lat ?long ?age ?user ?name WHERE {{ {subj[i]} <http://ex.org/lat> ?lat ; "
                           "<http://ex.org/long> ?long ; <http://ex.org/age> ?age ; <http://ex.org/user> ?user ; "
                           "<http://ex.org/name> ?name }")
            for j, p in enumerate(("lat", "long", "age", "user", "name")):
                vals[p].append(res.terms.keys(res.columns[j])[0])
        cols = {p: _lookup(ctx0, ks) for p, ks in vals.items()}
        cols["u"] = cols["user"]
        cols["v"] = np.roll(cols["user"], 1)
        groups = np.asarray([i % max(1, n // 5) for i in range(n)], dtype=np.int64)
        n_groups = int(groups.max()) + 1
        cases = []
        for name, (kind, expr) in _EXPRS.items():
            fn = eval_filter if kind == "filter" else eval_expr
            cases.append((name, lambda ctx, fn=fn, expr=expr, cols=cols, n=n: fn(expr, cols, n, ctx)))
        for agg, var in _AGGS:
            ag = Aggregate(agg, Var(var), False, None)
            cases.append((f"{agg}(?{var}) by {n_groups} groups",
                          lambda ctx, ag=ag, c=cols[var], g=groups, k=n_groups: AG.aggregate(ag, c, g, k, ctx)))
        for name, f in cases:
            times = {}
            for mode, limit in (("cold", 1 << 30), ("warm", 1 << 30), ("cols", -1)):
                rowwise.SMALL_ROWS = limit
                ts = []
                for _ in range(a.repeat):
                    ctx = QueryContext(snap)
                    if mode == "cold":  # (the rows' results not yet cached: a row's first visit)
                        rowwise._MEMO.clear()
                    t = time.perf_counter()
                    f(ctx)
                    ts.append((time.perf_counter() - t) * 1e6)
                times[mode] = statistics.median(ts)
            rowwise.SMALL_ROWS = saved
            print(f"| {name} | {n} | {times['cold']:.1f} | {times['warm']:.1f} | {times['cols']:.1f} "
                  f"| {times['cols'] / times['cold']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
