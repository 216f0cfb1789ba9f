"""One-shot selective queries whose FILTER / BIND / GROUP BY sees a handful of rows, in process.

``python -m bench.small_filter_oneshot [--triples 200000] [--rounds 5] [--requests 200]``

Why: the executor evaluates the operators above a BGP row by row when their input is small
(engine/exec/rowwise.py, aggregates._small); a selective query's FILTER over a professor's
students is such an input. Each query is drawn with a rotating constant (a department's
professor), unique texts (a comment per run: no plan or result cache hit) and the same text
again (cached), median milliseconds per query. Run it with ``PYTHONPATH`` on two trees,
alternating, for an A/B.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

from bench.lubm import generate_lines
from bench.queries import PREFIXES
from engine.database import Database

D = "http://www.Department{d}.University0.edu"

#: name -> query text with ``{p}`` a FullProfessor IRI of department ``{d}``
QUERIES = {
    "filter-age": "SELECT ?s ?a WHERE {{ ?s ub:advisor <{p}> ; ub:age ?a FILTER(?a > 25 && ?a <= 40) }}",
    "filter-str": "SELECT ?s ?n WHERE {{ ?s ub:advisor <{p}> ; ub:name ?n FILTER(STRSTARTS(?n, \"Graduate\") "
                  "&& isLiteral(?n)) }}",
    "filter-iri": "SELECT ?s ?c WHERE {{ ?s ub:advisor <{p}> ; ub:takesCourse ?c "
                  "FILTER(?c != <{dd}/GraduateCourse0> && ?s != ?c) }}",
    "bind-filter": "SELECT ?s ?w WHERE {{ ?s ub:advisor <{p}> ; ub:age ?a BIND(?a * 2 + 1 AS ?w) "
                   "FILTER(?w > 50) }}",
    "group-agg": "SELECT ?c (COUNT(?s) AS ?n) (AVG(?a) AS ?m) (MAX(?a) AS ?x) WHERE {{ ?s ub:advisor <{p}> ; "
                 "ub:takesCourse ?c ; ub:age ?a }} GROUP BY ?c",
    "order-expr": "SELECT ?s ?a WHERE {{ ?s ub:advisor <{p}> ; ub:age ?a }} ORDER BY DESC(?a + 0) ?s",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--triples", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=200)
    a = ap.parse_args(argv)
    db = Database()
    lines = list(itertools.chain.from_iterable(generate_lines(triples=a.triples, seed=0)))
    db.load_data("\n".join(lines) + "\n", "application/n-triples")
    profs = [(d, f"{D.format(d=d)}/FullProfessor{k}") for d in range(10) for k in range(3)]
    rows = {}
    times: dict[tuple[str, str], list[float]] = {}
    serial = itertools.count()
    for _ in range(a.rounds):
        for name, tmpl in QUERIES.items():
            for mode in ("unique", "cached"):
                ts = []
                for i in range(a.requests):
                    d, p = profs[i % len(profs)]
                    text = PREFIXES + tmpl.format(p=p, dd=D.format(d=d))
                    if mode == "unique":
                        text += f"\n# {next(serial)}"
                    t = time.perf_counter()
                    res = db.query(text)
                    ts.append((time.perf_counter() - t) * 1e3)
                    rows.setdefault(name, []).append(len(res))
                times.setdefault((name, mode), []).append(statistics.median(ts))
    print("| query | rows med | unique texts ms | cached ms |")
    print("|---|---|---|---|")
    for name in QUERIES:
        print(f"| {name} | {statistics.median(rows[name]):g} | {statistics.median(times[(name, 'unique')]):.3f} "
              f"| {statistics.median(times[(name, 'cached')]):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
