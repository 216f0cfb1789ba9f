"""Point lookups over a graph with many predicates (in process, no HTTP).

``python -m bench.point_preds [--predicates 2000] [--subjects 20000] [--per 12]``

A synthetic graph: each subject has ``--per`` triples over predicates drawn
from ``--predicates`` (a Zipf-like skew: a few common predicates, a long
tail), objects IRIs or literals. Times (median µs per query, unique texts,
answers checked against the first run's) ``SELECT ?p ?o WHERE { <s> ?p ?o }``,
``SELECT ?s ?p WHERE { ?s ?p <o> }``, ``SELECT ?p WHERE { <s> ?p <o> }`` (half of
the pairs taken from the subject's own triples, half arbitrary) and ``DESCRIBE <s>`` through
:meth:`engine.database.Database.query`. With more predicates than
``engine.plan.point.MAX_PREDICATES`` these took the general evaluator before
the vertex -> predicates index (engine/kv/vertex_preds.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import numpy as np


def generate(path: str, predicates: int, subjects: int, per: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, predicates + 1)
    w /= w.sum()
    n = subjects * per
    p = rng.choice(predicates, size=n, p=w)
    o = rng.integers(0, subjects, size=n)
    with open(path, "w") as f:
        for i in range(n):  # (data generation, not engine code)
            s = i // per
            obj = f"<http://x.example/e{o[i]}>" if o[i] % 4 else f'"v{o[i]}"'
            f.write(f"<http://x.example/e{s}> <http://x.example/p{p[i]}> {obj} .\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.point_preds", description=__doc__.split("\n\n")[0])
    ap.add_argument("--predicates", type=int, default=2000)
    ap.add_argument("--subjects", type=int, default=20000)
    ap.add_argument("--per", type=int, default=12)
    ap.add_argument("--queries", type=int, default=3000)
    args = ap.parse_args(argv)
    from engine.database import Database

    with tempfile.NamedTemporaryFile(suffix=".nt") as tmp:
        generate(tmp.name, args.predicates, args.subjects, args.per)
        db = Database(query_timeout=3600)
        db.load_file(tmp.name)
    forms = {
        "point out": "SELECT ?p ?o WHERE {{ <http://x.example/e{k}> ?p ?o }}",
        "point in": "SELECT ?s ?p WHERE {{ ?s ?p <http://x.example/e{k}> }}",
        "between": "SELECT ?p WHERE {{ <http://x.example/e{k}> ?p <http://x.example/e{m}> }}",
        "describe": "DESCRIBE <http://x.example/e{k}>",
    }
    # the objects generate() drew (same seed): "between" asks linked pairs half the time
    g = np.random.default_rng(0)
    w = 1.0 / np.arange(1, args.predicates + 1)
    g.choice(args.predicates, size=args.subjects * args.per, p=w / w.sum())
    objs = g.integers(0, args.subjects, size=args.subjects * args.per)
    print(f"{args.subjects * args.per} triples, {args.predicates} predicates; median µs per query, "
          f"{args.queries} unique texts per form\n")
    print("| form | µs | rows/query |\n| --- | ---: | ---: |")
    rng = np.random.default_rng(1)
    for name, tpl in forms.items():
        ks = rng.integers(1, args.subjects, size=args.queries).tolist()
        ns, rows = [], 0
        for i, k in enumerate(ks):
            m = int(objs[k * args.per + i % args.per]) if i % 2 else (k * 7919) % args.subjects
            text = tpl.format(k=k, m=m) + f"\n# {i}"
            t0 = time.perf_counter_ns()
            res = db.query(text)
            ns.append(time.perf_counter_ns() - t0)
            rows += len(res.triples) if res.is_graph else len(res.rows())
        print(f"| {name} | {statistics.median(ns) / 1e3:.1f} | {rows / len(ks):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
